//! Search and optimization (DeepFlow Sec. 7, 9.2): the budget problem and its projected
//! gradient solver, strategy search, co-optimization and sensitivities.
//!
//! Owns: [`problem`] (the design's shares as parameters, the objective: log of the iteration
//! time plus a smooth penalty on the typed out-of-memory excess, Sec. 7; for a served
//! transformer with a [`problem::ServingGoal`], log of device-seconds per request within an
//! SLO), [`simplex`] (the
//! exact Euclidean projection onto the capped simplices of area, power and perimeter),
//! [`solver`] (projected gradient as an `argmin` solver, Sec. 7.2), [`transfer`] (the
//! compass search over pairwise transfers that finishes each restart on the objective's
//! staircase), [`budget`] (restarts, sensitivities), [`search`] (strategy enumeration and search, Sec. 9.2; `search::serving`, the serving
//! deployment search), and
//! [`co_optimize`] (Fig. 10). Progress reaches the caller through [`Progress`]; errors are
//! [`crate::error::ModelError`]. Imports the model stages, nothing downstream.
//!
//! A new solver: implement `argmin::core::Solver` over `Vec<f64>` on [`BudgetProblem`] (it
//! is a `CostFunction` and a `Gradient`), keeping iterates inside the feasible set with
//! [`Simplices::project`]. A new strategy axis for the search: a row of
//! [`search::GRAMMAR`].

pub mod budget;
pub mod problem;
pub mod search;
pub mod simplex;
pub mod solver;
pub mod transfer;

pub use problem::{BudgetProblem, Resource, Share};
pub use simplex::{SimplexGroup, Simplices};
pub use solver::ProjectedGradient;

use std::sync::Arc;

use serde::Serialize;

use crate::error::ModelError;
use crate::parallel::Strategy;

/// Progress of a long search, in steps, reported to whoever shows it (the command line's
/// progress bar); [`Progress::none`] reports nowhere.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn Fn(u64) + Send + Sync>>);

impl Progress {
    /// Reports nowhere.
    pub fn none() -> Progress {
        Progress(None)
    }

    /// Calls `report(steps)` each time `steps` more steps are done.
    pub fn new(report: impl Fn(u64) + Send + Sync + 'static) -> Progress {
        Progress(Some(Arc::new(report)))
    }

    /// Reports `steps` more steps done.
    pub fn inc(&self, steps: u64) {
        if let Some(report) = &self.0 {
            report(steps);
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(reporting)"
        } else {
            "Progress(none)"
        })
    }
}

/// One value per thread of the rayon pool, each locked only by its own thread (caches a
/// parallel search keeps across its steps; they never change a result).
pub(crate) struct PerThread<T>(Vec<std::sync::Mutex<T>>);

impl<T> PerThread<T> {
    pub(crate) fn new(make: impl Fn() -> T) -> PerThread<T> {
        let n = rayon::current_num_threads().max(1);
        PerThread((0..n).map(|_| std::sync::Mutex::new(make())).collect())
    }

    /// Runs `f` on the calling thread's value.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let i = rayon::current_thread_index().unwrap_or(0) % self.0.len();
        let mut value = self.0[i].lock().unwrap_or_else(|e| e.into_inner());
        f(&mut value)
    }
}

/// One step of the co-optimization: a strategy, the shares and the time they give.
#[derive(Debug, Clone, Serialize)]
pub struct DesignPoint {
    pub label: &'static str,
    pub strategy: String,
    pub shares: Vec<f64>,
    pub time_per_iteration_s: f64,
    pub feasible: bool,
    /// Baseline time over this point's time, when both fit (null otherwise).
    pub speedup: Option<f64>,
}

/// Strategies whose budgets step (c) of [`co_optimize`] optimizes first: the fastest at the
/// given budget.
pub const CO_STARTS: usize = 3;

/// DeepFlow Fig. 10: from a baseline (the given budget and strategy), (a) the strategy
/// search alone, (b) the budget optimization alone, (c) both, alternated until the
/// strategy stops changing (at most three rounds), from each of the [`CO_STARTS`] fastest
/// strategies at the given budget.
#[derive(Debug, Clone, Serialize)]
pub struct CoOptimization {
    pub baseline: DesignPoint,
    pub strategy_only: DesignPoint,
    pub budgets_only: DesignPoint,
    pub both: DesignPoint,
    pub search: search::SearchResult,
    pub budgets: budget::BudgetResult,
    /// Budget optimizations step (c) ran, over all its starting strategies.
    pub rounds: usize,
    /// Every budget optimization's convergence trace, in the order they ran: (b) first
    /// (round 0), then each of (c)'s rounds.
    #[serde(skip)]
    pub traces: Vec<RoundTrace>,
}

/// The convergence trace of one budget optimization of a co-optimization.
#[derive(Debug, Clone)]
pub struct RoundTrace {
    pub round: usize,
    /// The strategy the budgets were optimized for.
    pub strategy: String,
    pub trace: Vec<budget::TracePoint>,
}

fn point(
    problem: &BudgetProblem,
    label: &'static str,
    strategy: &Strategy,
    shares: &[f64],
    baseline: Option<f64>,
) -> DesignPoint {
    let e = problem.evaluate_with(shares, strategy);
    DesignPoint {
        label,
        strategy: strategy.to_string(),
        shares: shares.to_vec(),
        time_per_iteration_s: e.time_per_iteration_s,
        feasible: e.feasible,
        speedup: baseline
            .filter(|_| e.feasible)
            .map(|b| b / e.time_per_iteration_s),
    }
}

/// A strategy space too large to enumerate, as a setting out of range.
pub fn too_large(e: search::TooLarge) -> ModelError {
    ModelError::Setting {
        setting: "devices",
        value: e.devices.to_string(),
        expected: "a device count whose strategy space has at most 4,000,000 strategies",
    }
}

/// Runs the three searches of Fig. 10 from `problem`'s design and strategy.
pub fn co_optimize(
    problem: &mut BudgetProblem,
    settings: &budget::Settings,
    progress: &Progress,
) -> Result<CoOptimization, ModelError> {
    let baseline_strategy = problem.strategy;
    let start = problem.initial();
    let base = problem.evaluate(&start);
    // The baseline's time, when it fits: speedups only between designs that fit.
    let baseline_s = Some(base.time_per_iteration_s).filter(|_| base.feasible);
    let node = problem.system.node_size(problem.devices);
    let candidates =
        search::enumerate_from(&problem.workload, problem.devices, node, &problem.strategy)
            .map_err(too_large)?;
    let best_strategy =
        |problem: &BudgetProblem, w: &[f64]| -> Result<search::SearchResult, ModelError> {
            let (arch, net) = problem.machine(w)?;
            let settings = search::Settings::default();
            let base = Some(&problem.strategy);
            let none = Progress::none();
            Ok(search::search(
                &problem.workload,
                &arch,
                &net,
                &candidates,
                base,
                &settings,
                &none,
            ))
        };
    // (a) strategy only: the fastest that fits, else the nearest to fitting (least memory
    // over capacity), else the base.
    let first = best_strategy(problem, &start)?;
    let chosen = first
        .best
        .as_ref()
        .map(|c| c.parsed)
        .or(first.nearest.first().map(|n| n.parsed))
        .or(first.base.as_ref().map(|c| c.parsed))
        .ok_or_else(|| ModelError::NoStrategy {
            tried: first.enumerated,
            workload: problem.workload.name().to_string(),
            devices: problem.devices,
        })?;
    let strategy_only = point(problem, "strategy", &chosen, &start, baseline_s);
    // (b) budgets only, under the baseline strategy.
    let budgets_only_result = budget::optimize_budgets(problem, settings, progress)?;
    let mut traces = vec![RoundTrace {
        round: 0,
        strategy: baseline_strategy.to_string(),
        trace: budgets_only_result.trace.clone(),
    }];
    let budgets_only = point(
        problem,
        "budgets",
        &baseline_strategy,
        &budgets_only_result.best,
        baseline_s,
    );
    // (c) both: from each of the CO_STARTS fastest strategies at the given budget, budgets
    // under the strategy, then search again, until stable. Each round optimizes the
    // budgets for the strategy of the last search; the best round of all is kept. One
    // chain alone ends where its first strategy leads: a strategy a little slower at the
    // given budget can be the faster one once the budget is its own.
    let mut starts: Vec<Strategy> = vec![chosen];
    for c in &first.top {
        if starts.len() < CO_STARTS && !starts.contains(&c.parsed) {
            starts.push(c.parsed);
        }
    }
    let mut best: Option<(Strategy, budget::BudgetResult, search::SearchResult)> = None;
    let mut rounds = 0;
    // Strategies whose budgets some chain already optimized: a chain reaching one has
    // nothing new to find (the optimization is deterministic).
    let mut done: Vec<Strategy> = Vec::new();
    for start_strategy in starts {
        let mut next = start_strategy;
        for _ in 0..3 {
            let strategy = next;
            if done.contains(&strategy) {
                break;
            }
            done.push(strategy);
            rounds += 1;
            problem.strategy = strategy;
            let result = budget::optimize_budgets(problem, settings, progress)?;
            traces.push(RoundTrace {
                round: rounds,
                strategy: strategy.to_string(),
                trace: result.trace.clone(),
            });
            let again = best_strategy(problem, &result.best)?;
            next = again.best.as_ref().map(|c| c.parsed).unwrap_or(strategy);
            if best
                .as_ref()
                .map_or(true, |b| result.best_objective < b.1.best_objective)
            {
                best = Some((strategy, result, again));
            }
            if next == strategy {
                break;
            }
        }
    }
    let (strategy, result, search_result) = best.expect("at least one round");
    let both = point(problem, "both", &strategy, &result.best, baseline_s);
    problem.strategy = strategy;
    Ok(CoOptimization {
        baseline: point(problem, "baseline", &baseline_strategy, &start, baseline_s),
        strategy_only,
        budgets_only,
        both,
        search: search_result,
        budgets: result,
        rounds,
        traces,
    })
}
