//! Budget optimization: S restarts of T projected-gradient steps (DeepFlow Sec. 7), each
//! finished by a transfer search of at most T sweeps ([`super::transfer`]), run in
//! parallel, and the sensitivities of the optimum.

use std::sync::{Arc, Mutex};

use argmin::core::observers::{Observe, ObserverMode};
use argmin::core::{Error, Executor, IterState, State, KV};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;

use super::problem::{with_shares, BudgetProblem, Evaluation, Resource, Share};
use super::solver::ProjectedGradient;
use super::transfer::TransferSearch;
use super::Progress;
use crate::domain::Component;
use crate::error::ModelError;
use crate::generator::generate;

/// What finishes each restart after its projected-gradient steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// A transfer search ([`super::transfer`]): stackflow's default.
    Transfer,
    /// Nothing: DeepFlow's optimizer as published (Sec. 7).
    None,
}

impl Finish {
    pub const NAMES: [&'static str; 2] = ["transfer", "none"];

    pub fn parse(text: &str) -> Option<Finish> {
        match text {
            "transfer" => Some(Finish::Transfer),
            "none" => Some(Finish::None),
            _ => None,
        }
    }
}

/// The most restarts an optimization takes (each keeps its trajectory's best).
pub const MAX_RESTARTS: u64 = 10_000;

/// The most projected-gradient steps per restart.
pub const MAX_STEPS: u64 = 1_000_000;

/// Search settings; defaults are DeepFlow's (T = 100, S = 10), finished by a transfer search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Settings {
    pub restarts: usize,
    pub steps: u64,
    pub seed: u64,
    pub eta: f64,
    pub beta: f64,
    pub tolerance: f64,
    /// The transfer search that finishes each restart stops when its moves fall below
    /// this share of a budget ([`super::transfer`]).
    pub resolution: f64,
    pub finish: Finish,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            restarts: 10,
            steps: 100,
            seed: 0,
            eta: 0.05,
            beta: 0.5,
            // Moves much finer than the finite-difference step (0.5%) cannot be resolved.
            tolerance: 1e-4,
            // A quarter percent of a budget: finer moves mostly land on the same stair.
            resolution: 2.5e-3,
            finish: Finish::Transfer,
        }
    }
}

/// One point of the convergence trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TracePoint {
    pub restart: usize,
    pub step: u64,
    /// The objective: ln(time) plus penalties.
    pub objective: f64,
}

/// The outcome of one restart.
#[derive(Debug, Clone, Serialize)]
pub struct Restart {
    pub restart: usize,
    pub start: Vec<f64>,
    pub best: Vec<f64>,
    pub objective: f64,
    /// Projected-gradient steps taken.
    pub steps: u64,
    /// Sweeps of the transfer search that finished the restart.
    pub sweeps: u64,
}

/// The outcome of a budget optimization.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetResult {
    pub initial: Vec<f64>,
    pub initial_objective: f64,
    pub best: Vec<f64>,
    pub best_objective: f64,
    pub restarts: Vec<Restart>,
    pub trace: Vec<TracePoint>,
}

/// Reports steps to the progress callback and records the trace of one restart.
struct Recorder {
    restart: usize,
    progress: Progress,
    trace: Arc<Mutex<Vec<TracePoint>>>,
}

type PgState = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

impl Observe<PgState> for Recorder {
    fn observe_init(&mut self, _: &str, state: &PgState, _: &KV) -> Result<(), Error> {
        self.push(0, state.get_cost());
        Ok(())
    }

    fn observe_iter(&mut self, state: &PgState, _: &KV) -> Result<(), Error> {
        // Observed before the state counts the iteration: this is step iter + 1 (step 0 is
        // the start, observed at init).
        self.push(state.get_iter() + 1, state.get_cost());
        self.progress.inc(1);
        Ok(())
    }
}

impl Recorder {
    fn push(&self, step: u64, objective: f64) {
        if let Ok(mut t) = self.trace.lock() {
            t.push(TracePoint {
                restart: self.restart,
                step,
                objective,
            });
        }
    }
}

/// A seeded random point of the feasible set: per resource, uniform over the shares that
/// sum to at most one (exponential spacings with a slack share), then fitted to the bounds.
pub fn random_start(problem: &BudgetProblem, rng: &mut StdRng) -> Vec<f64> {
    let mut w = vec![0.0; problem.layout.len()];
    for g in &problem.set.groups {
        let draws: Vec<f64> = (0..=g.indices.len())
            .map(|_| -(1.0 - rng.gen::<f64>()).ln())
            .collect();
        let sum: f64 = draws.iter().sum();
        for (k, &i) in g.indices.iter().enumerate() {
            w[i] = draws[k] / sum * g.total;
        }
    }
    problem.set.project(&w)
}

/// Runs restart 0 from the problem's own shares and restarts 1.. from seeded random starts,
/// in parallel; keeps the best. Same inputs and seed give the same result, bit for bit.
pub fn optimize_budgets(
    problem: &BudgetProblem,
    settings: &Settings,
    progress: &Progress,
) -> Result<BudgetResult, ModelError> {
    if settings.restarts == 0 {
        return Err(ModelError::Setting {
            setting: "restarts",
            value: "0".into(),
            expected: "at least 1",
        });
    }
    if settings.steps == 0 {
        return Err(ModelError::Setting {
            setting: "steps",
            value: "0".into(),
            expected: "at least 1",
        });
    }
    let initial = problem.initial();
    let initial_objective = problem.evaluate(&initial).objective;
    let starts: Vec<Vec<f64>> = (0..settings.restarts)
        .map(|r| {
            if r == 0 {
                initial.clone()
            } else {
                let mut rng = StdRng::seed_from_u64(
                    settings.seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                let mut w = random_start(problem, &mut rng);
                // A start that starves a component the workload needs (no bandwidth at all)
                // has no slope to follow: pull it toward the given design until it runs.
                for _ in 0..20 {
                    if problem.evaluate(&w).objective.is_finite() {
                        break;
                    }
                    w = problem.set.project(
                        &w.iter()
                            .zip(&initial)
                            .map(|(a, b)| 0.5 * (a + b))
                            .collect::<Vec<_>>(),
                    );
                }
                w
            }
        })
        .collect();
    let runs: Vec<Result<(Restart, Vec<TracePoint>), ModelError>> = starts
        .into_par_iter()
        .enumerate()
        .map(|(r, start)| {
            let trace = Arc::new(Mutex::new(Vec::new()));
            let solver = ProjectedGradient::new(problem.set.clone())
                .with_eta(settings.eta)
                .with_beta(settings.beta)
                .with_tolerance(settings.tolerance);
            let recorder = Recorder {
                restart: r,
                progress: progress.clone(),
                trace: trace.clone(),
            };
            let result = Executor::new(Shared(problem), solver)
                .configure(|s| s.param(start.clone()).max_iters(settings.steps))
                .add_observer(recorder, ObserverMode::Always)
                .run()
                .map_err(|e| ModelError::Solver {
                    restart: r,
                    message: e.to_string(),
                })?;
            let state = result.state();
            // Steps the early stop saved still count as progress.
            progress.inc(settings.steps.saturating_sub(state.get_iter()));
            let descended = state
                .get_best_param()
                .cloned()
                .unwrap_or_else(|| start.clone());
            let gradient_steps = state.get_iter();
            let (best, objective, sweeps) = match settings.finish {
                Finish::None => (descended, state.get_best_cost(), 0),
                Finish::Transfer => {
                    // A transfer search from where the gradient stopped, at most T sweeps.
                    let polished = Executor::new(Shared(problem), search_from(problem, settings))
                        .configure(|s| s.param(descended.clone()).max_iters(settings.steps))
                        .run()
                        .map_err(|e| ModelError::Solver {
                            restart: r,
                            message: e.to_string(),
                        })?;
                    let finish = polished.state();
                    let objective = finish.get_best_cost();
                    if let Ok(mut t) = trace.lock() {
                        t.push(TracePoint {
                            restart: r,
                            step: gradient_steps + finish.get_iter(),
                            objective,
                        });
                    }
                    let best = finish.get_best_param().cloned().unwrap_or(descended);
                    (best, objective, finish.get_iter())
                }
            };
            let trace = trace.lock().map(|t| t.clone()).unwrap_or_default();
            Ok((
                Restart {
                    restart: r,
                    start,
                    best,
                    objective,
                    steps: gradient_steps,
                    sweeps,
                },
                trace,
            ))
        })
        .collect();
    let mut restarts = Vec::new();
    let mut trace = Vec::new();
    for run in runs {
        let (r, t) = run?;
        restarts.push(r);
        trace.extend(t);
    }
    let best = restarts
        .iter()
        .min_by(|a, b| a.objective.total_cmp(&b.objective))
        .expect("at least one restart");
    Ok(BudgetResult {
        initial,
        initial_objective,
        best: best.best.clone(),
        best_objective: best.objective,
        restarts: restarts.clone(),
        trace,
    })
}

/// The transfer search that finishes a restart.
fn search_from(problem: &BudgetProblem, settings: &Settings) -> TransferSearch {
    TransferSearch::new(problem.set.clone()).with_resolution(settings.resolution)
}

/// The problem behind a shared reference, so parallel restarts need no copies.
struct Shared<'a>(&'a BudgetProblem);

impl argmin::core::CostFunction for Shared<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, w: &Vec<f64>) -> Result<f64, Error> {
        self.0.cost(w)
    }
}

impl argmin::core::Gradient for Shared<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, w: &Vec<f64>) -> Result<Vec<f64>, Error> {
        self.0.gradient(w)
    }
}

/// Marginal value of one more unit of a resource for one component at a design point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sensitivity {
    pub component: Component,
    pub resource: Resource,
    pub unit: &'static str,
    /// Change of the time per iteration per extra unit (negative: the unit helps).
    pub seconds_per_unit: f64,
    /// Relative change of the time per extra 1% of the resource's whole budget.
    pub percent_time_per_percent_budget: f64,
    /// What limits the component in the generated design (the generator's bounds).
    pub bound_by: Vec<String>,
    /// When the probe's extra unit makes the design infeasible (a cliff, not a slope), why:
    /// the probed design's violations in words. The slope is then not a marginal value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cliff: Option<String>,
}

/// Shadow prices at shares `w`: for each component and resource, the change in time per
/// iteration when the component gets one more mm2 / W / mm and every other component keeps
/// its absolute amount (the budget grows by that unit; an area probe grows the package
/// by as much, so main memory's room beside the die keeps its amount). Forward differences of 1% of the
/// resource's budget: the generator counts whole units, so finer steps see a staircase.
pub fn sensitivities(problem: &BudgetProblem, w: &[f64]) -> Vec<Sensitivity> {
    let base = problem.evaluate(w);
    let arch = &base.architecture;
    let design = with_shares(&problem.design, &problem.layout, w);
    let total = |r: Resource| match r {
        Resource::Area => design.chip_area_mm2,
        Resource::Power => design.tdp_w,
        Resource::Perimeter => design.perimeter_mm,
    };
    problem
        .layout
        .par_iter()
        .enumerate()
        // A resource with no budget at all (0 W, 0 mm) has no margin to price.
        .filter(|(_, share)| total(share.resource) > 0.0)
        .map(|(i, share)| {
            let t = total(share.resource);
            let delta = 0.01 * t;
            let time_with = |extra: f64| -> Evaluation {
                let mut d = design.clone();
                let grown = t + extra;
                match share.resource {
                    // The die grows into the package by as much, so the room beside it
                    // (main memory's devices, `node_mm2 - chip_mm2`) keeps its amount too.
                    Resource::Area => {
                        d.chip_area_mm2 = grown;
                        d.node_area_mm2 += extra;
                    }
                    Resource::Power => d.tdp_w = grown,
                    Resource::Perimeter => d.perimeter_mm = grown,
                }
                let w2: Vec<f64> = problem
                    .layout
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        if s.resource != share.resource {
                            w[j]
                        } else if j == i {
                            (w[j] * t + extra) / grown
                        } else {
                            w[j] * t / grown
                        }
                    })
                    .collect();
                let d = with_shares(&d, &problem.layout, &w2);
                problem.evaluate_design(&d, &problem.strategy)
            };
            // Forward: the question is what the next unit buys.
            let probe = time_with(delta);
            let up = probe.time_per_iteration_s;
            let cliff = (base.feasible && !probe.feasible).then(|| {
                let reasons: Vec<String> = probe.violations.iter().map(|v| v.to_string()).collect();
                if reasons.is_empty() {
                    format!("infeasible: the time becomes {up}")
                } else {
                    format!("infeasible: {}", reasons.join("; "))
                }
            });
            let slope = (up - base.time_per_iteration_s) / delta;
            Sensitivity {
                component: share.component.clone(),
                resource: share.resource,
                unit: share.resource.unit(),
                seconds_per_unit: slope,
                percent_time_per_percent_budget: 100.0 * (up - base.time_per_iteration_s)
                    / base.time_per_iteration_s,
                bound_by: bound_by(arch, share),
                cliff,
            }
        })
        .collect()
}

/// The generator's binding limits of a component, as "quantity: limit".
fn bound_by(arch: &crate::generator::Architecture, share: &Share) -> Vec<String> {
    let bounds = match &share.component {
        Component::Core => Some(&arch.core.bounds),
        Component::IntraPackage => arch.intra_package.as_ref().map(|n| &n.bounds),
        Component::InterPackage => arch.inter_package.as_ref().map(|n| &n.bounds),
        Component::Memory(name) if *name == arch.main_memory.name => Some(&arch.main_memory.bounds),
        Component::Memory(name) => arch
            .on_chip
            .iter()
            .find(|l| l.name == *name)
            .map(|l| &l.bounds),
    };
    bounds
        .map(|b| {
            b.iter()
                .map(|b| format!("{}: {}", b.quantity, b.limit))
                .collect()
        })
        .unwrap_or_default()
}

/// Evaluation of the best design, for reports.
pub fn evaluate_best(problem: &BudgetProblem, result: &BudgetResult) -> Evaluation {
    problem.evaluate(&result.best)
}

/// Whether the design regenerated with shares `w` stays within every budget.
pub fn within_budgets(problem: &BudgetProblem, w: &[f64]) -> bool {
    generate(&with_shares(&problem.design, &problem.layout, w)).feasible()
}
