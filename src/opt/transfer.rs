//! Transfer search: a compass (generating set) search on the capped simplices of the
//! budget problem, run after projected gradient to finish each restart.
//!
//! The generator counts whole compute units, banks and lanes, so the objective is a
//! staircase at fine scales and a finite-difference slope points only roughly downhill:
//! projected gradient stops on a step's edge, and restarts that should meet end apart by
//! several percent. A transfer search needs no slope. Its moves are the edges of the
//! feasible set: `delta` of one resource taken from one component (or from the resource's
//! unused part) and given to another (or left unused). Every improving move is taken as
//! it is found; a sweep of all moves that improves nothing halves `delta`; the search ends
//! when `delta` falls below the resolution. Every iterate lies in the feasible set, and the
//! objective never rises, so the result is never worse than the start.

use argmin::core::{
    CostFunction, Error, Problem, Solver, State as _, TerminationReason, TerminationStatus, KV,
};

use super::simplex::Simplices;
use super::solver::{projected_start, State};

/// Compass search over pairwise transfers of a resource between components.
#[derive(Debug, Clone)]
pub struct TransferSearch {
    set: Simplices,
    /// First transfer (share units).
    pub delta: f64,
    /// Stop when the transfer falls below this.
    pub resolution: f64,
    step: f64,
}

impl TransferSearch {
    /// Defaults: first transfer 4% of a budget, resolution 0.25%.
    pub fn new(set: Simplices) -> TransferSearch {
        TransferSearch {
            set,
            delta: 0.04,
            resolution: 2.5e-3,
            step: 0.0,
        }
    }

    pub fn with_delta(mut self, delta: f64) -> Self {
        self.delta = delta;
        self
    }

    pub fn with_resolution(mut self, resolution: f64) -> Self {
        self.resolution = resolution;
        self
    }

    /// `w` with up to `step` moved from coordinate `from` to `to` of group `g` (`None`: the
    /// group's unused part), within the bounds; `None` when nothing can move.
    fn transfer(
        &self,
        w: &[f64],
        g: usize,
        from: Option<usize>,
        to: Option<usize>,
        step: f64,
    ) -> Option<Vec<f64>> {
        let group = &self.set.groups[g];
        let used: f64 = group.indices.iter().map(|&i| w[i]).sum();
        let available = match from {
            Some(k) => w[group.indices[k]] - group.lower[k],
            None => group.total - used,
        };
        let room = match to {
            Some(k) => group.upper[k] - w[group.indices[k]],
            None => f64::INFINITY,
        };
        let amount = step.min(available).min(room);
        // Also refuses a NaN amount (a NaN share).
        if amount.is_nan() || amount <= 1e-12 {
            return None;
        }
        let mut out = w.to_vec();
        if let Some(k) = from {
            out[group.indices[k]] -= amount;
        }
        if let Some(k) = to {
            out[group.indices[k]] += amount;
        }
        Some(out)
    }
}

impl<O> Solver<O, State> for TransferSearch
where
    O: CostFunction<Param = Vec<f64>, Output = f64>,
{
    const NAME: &'static str = "Transfer search (compass search on the budget simplices)";

    fn init(
        &mut self,
        problem: &mut Problem<O>,
        state: State,
    ) -> Result<(State, Option<KV>), Error> {
        let w = projected_start(&self.set, &state, "TransferSearch")?;
        let cost = problem.cost(&w)?;
        self.step = self.delta;
        Ok((state.param(w).cost(cost), None))
    }

    fn next_iter(
        &mut self,
        problem: &mut Problem<O>,
        state: State,
    ) -> Result<(State, Option<KV>), Error> {
        let mut w = state
            .get_param()
            .ok_or_else(|| Error::msg("TransferSearch: no current point"))?
            .clone();
        let mut cost = state.get_cost();
        let mut improved = false;
        for g in 0..self.set.groups.len() {
            let n = self.set.groups[g].indices.len();
            // Endpoints: each component, then the unused part.
            let ends: Vec<Option<usize>> = (0..n).map(Some).chain([None]).collect();
            for &from in &ends {
                for &to in &ends {
                    if from == to {
                        continue;
                    }
                    let Some(candidate) = self.transfer(&w, g, from, to, self.step) else {
                        continue;
                    };
                    let c = problem.cost(&candidate)?;
                    if c < cost {
                        w = candidate;
                        cost = c;
                        improved = true;
                    }
                }
            }
        }
        if !improved {
            self.step *= 0.5;
        }
        Ok((state.param(w).cost(cost), None))
    }

    fn terminate(&mut self, _state: &State) -> TerminationStatus {
        if self.step < self.resolution {
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        } else {
            TerminationStatus::NotTerminated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opt::SimplexGroup;
    use argmin::core::Executor;

    /// A staircase with its minimum at (0.6, 0.3): no useful slope anywhere.
    struct Stairs;

    impl CostFunction for Stairs {
        type Param = Vec<f64>;
        type Output = f64;
        fn cost(&self, w: &Vec<f64>) -> Result<f64, Error> {
            let q = |x: f64| (x * 50.0).floor() / 50.0;
            Ok((q(w[0]) - 0.6).abs() + (q(w[1]) - 0.3).abs())
        }
    }

    fn set(upper: f64) -> Simplices {
        Simplices::new(
            vec![SimplexGroup {
                name: "area".into(),
                indices: vec![0, 1],
                lower: vec![0.0, 0.0],
                upper: vec![upper, upper],
                total: 1.0,
            }],
            2,
        )
        .unwrap()
    }

    fn run(set: Simplices, start: Vec<f64>) -> (Vec<f64>, f64) {
        let r = Executor::new(Stairs, TransferSearch::new(set))
            .configure(|s| s.param(start).max_iters(200))
            .run()
            .unwrap();
        let s = r.state();
        (s.get_best_param().unwrap().clone(), s.get_best_cost())
    }

    #[test]
    fn finds_the_floor_of_a_staircase_from_a_corner() {
        let (w, cost) = run(set(1.0), vec![0.05, 0.05]);
        assert!(cost < 0.021, "cost {cost} at {w:?}");
        assert!(w[0] + w[1] <= 1.0 + 1e-12);
    }

    #[test]
    fn keeps_every_iterate_within_the_bounds() {
        // The optimum is outside the upper bound of 0.5: the search stops at it.
        let (w, _) = run(set(0.5), vec![0.1, 0.1]);
        assert!(w[0] <= 0.5 + 1e-12 && (w[0] - 0.5).abs() < 0.01, "{w:?}");
        assert!(w.iter().sum::<f64>() <= 1.0 + 1e-12);
    }
}
