//! Search and optimization (DeepFlow Sec. 7, 9.2): the budget problem and its projected
//! gradient solver, strategy search, co-optimization and sensitivities.

pub mod budget;
pub mod problem;
pub mod search;
pub mod simplex;
pub mod solver;

pub use problem::{BudgetProblem, Resource, Share};
pub use simplex::{SimplexGroup, Simplices};
pub use solver::ProjectedGradient;

use indicatif::ProgressBar;
use serde::Serialize;

use crate::parallel::Strategy;

/// One step of the co-optimization: a strategy, the shares and the time they give.
#[derive(Debug, Clone, Serialize)]
pub struct DesignPoint {
    pub label: &'static str,
    pub strategy: String,
    pub shares: Vec<f64>,
    pub time_per_iteration_s: f64,
    pub feasible: bool,
    /// Baseline time over this point's time.
    pub speedup: f64,
}

/// DeepFlow Fig. 10: from a baseline (the given budget and strategy), (a) the strategy
/// search alone, (b) the budget optimization alone, (c) both, alternated until the
/// strategy stops changing (at most three rounds).
#[derive(Debug, Clone, Serialize)]
pub struct CoOptimization {
    pub baseline: DesignPoint,
    pub strategy_only: DesignPoint,
    pub budgets_only: DesignPoint,
    pub both: DesignPoint,
    pub search: search::SearchResult,
    pub budgets: budget::BudgetResult,
    pub rounds: usize,
}

fn point(
    problem: &BudgetProblem,
    label: &'static str,
    strategy: &Strategy,
    shares: &[f64],
    baseline_s: f64,
) -> DesignPoint {
    let e = problem.evaluate_with(shares, strategy);
    DesignPoint {
        label,
        strategy: strategy.to_string(),
        shares: shares.to_vec(),
        time_per_iteration_s: e.time_per_iteration_s,
        feasible: e.feasible,
        speedup: baseline_s / e.time_per_iteration_s,
    }
}

/// Runs the three searches of Fig. 10 from `problem`'s design and strategy.
pub fn co_optimize(
    problem: &mut BudgetProblem,
    settings: &budget::Settings,
    bar: &ProgressBar,
) -> anyhow::Result<CoOptimization> {
    let baseline_strategy = problem.strategy;
    let start = problem.initial();
    let base = problem.evaluate(&start);
    let baseline_s = base.time_per_iteration_s;
    let candidates = search::enumerate(&problem.workload, problem.devices);
    let best_strategy =
        |problem: &BudgetProblem, w: &[f64]| -> anyhow::Result<search::SearchResult> {
            let (arch, net) = problem.machine(w)?;
            Ok(search::search(&problem.workload, &arch, &net, &candidates))
        };
    // (a) strategy only.
    let first = best_strategy(problem, &start)?;
    let chosen = first
        .best
        .as_ref()
        .or(first.fastest.as_ref())
        .map(|c| c.parsed)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no strategy of the {} enumerated runs workload {} on {} devices",
                first.enumerated,
                problem.workload.name(),
                problem.devices
            )
        })?;
    let strategy_only = point(problem, "strategy", &chosen, &start, baseline_s);
    // (b) budgets only, under the baseline strategy.
    let budgets_only_result = budget::optimize_budgets(problem, settings, bar)?;
    let budgets_only = point(
        problem,
        "budgets",
        &baseline_strategy,
        &budgets_only_result.best,
        baseline_s,
    );
    // (c) both: budgets under the searched strategy, then search again, until stable.
    // Each round optimizes the budgets for the strategy of the last search; the best round
    // is kept.
    let mut next = chosen;
    let mut best: Option<(Strategy, budget::BudgetResult, search::SearchResult)> = None;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let strategy = next;
        problem.strategy = strategy;
        let result = budget::optimize_budgets(problem, settings, bar)?;
        let again = best_strategy(problem, &result.best)?;
        next = again.best.as_ref().map(|c| c.parsed).unwrap_or(strategy);
        if best
            .as_ref()
            .map_or(true, |b| result.best_objective < b.1.best_objective)
        {
            best = Some((strategy, result, again));
        }
        if next == strategy || rounds >= 3 {
            break;
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
    })
}
