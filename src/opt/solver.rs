//! DeepFlow's projected gradient descent (DeepFlow Sec. 7, Eq. 6) as an `argmin` solver:
//! a gradient step, exponential averaging in parameter space with discount `beta`, and an
//! exact projection onto the feasible set.
//!
//! Eq. 6 normalises the parameters (`W / ||W||`) before averaging. With a projection onto
//! `sum w <= 1` afterwards that rescale moves the fixed points off the constrained optimum
//! (a point where the gradient is `-lambda * 1` on the active face is not mapped to itself),
//! so here the normalisation is applied to the step instead: `W - eta * g / ||g||`. The step
//! length `eta` is then a distance in parameter space whatever the objective's scale; it
//! grows after an improving step and halves after a failed one, and the iteration stops
//! when it falls below the tolerance or the iterate stops moving.

use argmin::core::{
    CostFunction, Error, Gradient, IterState, Problem, Solver, State as _, TerminationReason,
    TerminationStatus, KV,
};

use super::simplex::Simplices;

pub(super) type State = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

/// A solver's starting point projected onto `set`; an error names the `solver` when there
/// is none or its dimension is not the set's.
pub(super) fn projected_start(
    set: &Simplices,
    state: &State,
    solver: &str,
) -> Result<Vec<f64>, Error> {
    let start = state
        .get_param()
        .ok_or_else(|| Error::msg(format!("{solver} needs a starting point")))?;
    if start.len() != set.dimension {
        return Err(Error::msg(format!(
            "starting point has {} coordinates, the feasible set {}",
            start.len(),
            set.dimension
        )));
    }
    Ok(set.project(start))
}

/// Projected gradient descent with exponential averaging in parameter space.
#[derive(Debug, Clone)]
pub struct ProjectedGradient {
    set: Simplices,
    /// Initial step length (parameter-space distance).
    pub eta: f64,
    /// Discount of the running average (`beta` of Eq. 6).
    pub beta: f64,
    /// Stop when the step length or the move falls below this.
    pub tolerance: f64,
    /// Step growth after an improvement.
    pub grow: f64,
    average: Vec<f64>,
    step: f64,
    moved: f64,
}

impl ProjectedGradient {
    /// Defaults: `eta` 0.05, `beta` 0.5, tolerance 1e-9.
    pub fn new(set: Simplices) -> ProjectedGradient {
        ProjectedGradient {
            set,
            eta: 0.05,
            beta: 0.5,
            tolerance: 1e-9,
            grow: 1.25,
            average: Vec::new(),
            step: 0.0,
            moved: f64::INFINITY,
        }
    }

    pub fn with_eta(mut self, eta: f64) -> Self {
        self.eta = eta;
        self
    }

    pub fn with_beta(mut self, beta: f64) -> Self {
        self.beta = beta;
        self
    }

    pub fn with_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    pub fn set(&self) -> &Simplices {
        &self.set
    }
}

impl<O> Solver<O, State> for ProjectedGradient
where
    O: CostFunction<Param = Vec<f64>, Output = f64>
        + Gradient<Param = Vec<f64>, Gradient = Vec<f64>>,
{
    const NAME: &'static str = "Projected gradient (DeepFlow Eq. 6)";

    fn init(
        &mut self,
        problem: &mut Problem<O>,
        state: State,
    ) -> Result<(State, Option<KV>), Error> {
        let w = projected_start(&self.set, &state, "ProjectedGradient")?;
        let cost = problem.cost(&w)?;
        self.average = w.clone();
        self.step = self.eta;
        self.moved = f64::INFINITY;
        Ok((state.param(w).cost(cost), None))
    }

    fn next_iter(
        &mut self,
        problem: &mut Problem<O>,
        state: State,
    ) -> Result<(State, Option<KV>), Error> {
        let w = state
            .get_param()
            .ok_or_else(|| Error::msg("ProjectedGradient: no current point"))?
            .clone();
        let cost = state.get_cost();
        let g = problem.gradient(&w)?;
        let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            self.moved = 0.0;
            return Ok((state.param(w).cost(cost), None));
        }
        let beta = self.beta;
        for ((m, &wi), gi) in self.average.iter_mut().zip(&w).zip(&g) {
            *m = beta * *m + (1.0 - beta) * (wi - self.step * gi / norm);
        }
        let candidate = self.set.project(&self.average);
        let new_cost = problem.cost(&candidate)?;
        if new_cost <= cost {
            self.moved = candidate
                .iter()
                .zip(&w)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                .sqrt();
            self.step *= self.grow;
            Ok((state.param(candidate).cost(new_cost), None))
        } else {
            // Overshot: shorter steps, restart the average from the current point.
            self.step *= 0.5;
            self.average.clone_from(&w);
            Ok((state.param(w).cost(cost), None))
        }
    }

    fn terminate(&mut self, _state: &State) -> TerminationStatus {
        if self.step < self.tolerance || self.moved < self.tolerance * 1e-3 {
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        } else {
            TerminationStatus::NotTerminated
        }
    }
}
