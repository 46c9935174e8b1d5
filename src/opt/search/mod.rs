//! Strategy search (DeepFlow Sec. 9.2, MAD Max Sec. 4): every strategy of the grammar in
//! [`space`] (tensor or RC/CR, pipeline, context, data, expert, micro-batch, interleave,
//! recompute, sequence parallelism, ZeRO 0-3, hybrid shard groups, prefetch) and every
//! placement of its axes, for the fastest that fits, the top N and the Pareto front of time
//! against memory per device.
//!
//! Exact over the grammar's strategies (which leave out, by construction, micro-batches
//! that the context ranks divide: see [`space`]), with pruning that cannot change the
//! answer:
//! 1. every strategy is fitted (batch and layer splits: the rest are *invalid*) and its
//!    fullest device's memory counted before any kernel is timed (*pruned by memory*);
//! 2. the strategies that fit are timed stage by stage with one kernel cache per thread
//!    (strategies differing only in interleaving, prefetch or placement share their
//!    stages' times), and ordered by a lower bound under any placement: the busiest
//!    stage's micro-batches back to back behind the pipeline's fill and drain, with free
//!    communication;
//! 3. in that order, a chunk at a time, each is priced on its best placement unless its
//!    bound (then its whole schedule with free communication) is above both the N-th best time so far and the best time of a strategy that
//!    needs no more memory (*pruned by bound*: it can enter neither the top N nor the
//!    front); placements are bounded the same way (`Plan::best_mapping`).
//!
//! [`layered`] then gives each layer type its own split, from the best uniform strategies.
//! [`serving`] searches a served transformer's deployments (splits, replicas, batch caps,
//! chunked prefill, prefill/decode pools) by goodput per device within an SLO.
//!
//! The user's base strategy is always priced and wins ties, so a feasible base is never
//! beaten by a slower result. Chunks are fixed and the incumbent moves only between them:
//! the same inputs give the same counts and the same answer on any number of threads.

pub mod layered;
pub mod serving;
pub mod space;

use rustc_hash::FxHashMap;
use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;

use super::{PerThread, Progress};
use crate::distributed::predict::{Fitted, StagesWork};
use crate::distributed::DistPrediction;
use crate::domain::Recompute;
use crate::generator::Architecture;
use crate::network::Network;
use crate::parallel::mapping::ordering_count;
use crate::parallel::Strategy;
use crate::perf::Evaluator;
use crate::violation::Violation;
use crate::workload::{Graph, Workload};

pub use space::{divisors, Shape, TooLarge, GRAMMAR};

/// One strategy priced on its best placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub strategy: String,
    /// The placement: used axes innermost (nearest devices) first.
    pub placement: String,
    pub time_per_iteration_s: f64,
    pub memory_per_device_bytes: f64,
    pub model_flops_utilization: f64,
    /// What the iteration's time goes to most: compute, exposed communication or the
    /// pipeline bubble.
    pub binding: &'static str,
    pub feasible: bool,
    #[serde(skip)]
    pub parsed: Strategy,
    /// Position in the search's list (the base first): ties go to the earlier.
    #[serde(skip)]
    order: usize,
}

/// A strategy that does not fit in memory, with why.
#[derive(Debug, Clone, Serialize)]
pub struct Nearest {
    pub strategy: String,
    pub memory_per_device_bytes: f64,
    pub violations: Vec<Violation>,
    #[serde(skip)]
    pub parsed: Strategy,
}

/// The outcome of a search, with its honest counts.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    /// Strategies searched (the grammar's and the base).
    pub enumerated: usize,
    /// Those the workload cannot run (indivisible batch, layers or experts).
    pub invalid: usize,
    /// Valid (strategy, placement) pairs.
    pub pairs: usize,
    /// Valid strategies that do not fit in memory.
    pub pruned_by_memory: usize,
    /// Strategies (placements included) whose lower bound ruled them out.
    pub pruned_by_bound: usize,
    /// Fitting strategies priced on at least one placement (with invalid, pruned by memory
    /// and pruned by bound: every strategy once).
    pub evaluated: usize,
    /// The fastest strategy that fits; `None` when none fits.
    pub best: Option<Candidate>,
    /// The user's base strategy as predicted (fitting or not), when it runs at all.
    pub base: Option<Candidate>,
    /// The fastest that fit, by time (at most the settings' `top`).
    pub top: Vec<Candidate>,
    /// Fitting strategies no other beats in both time and memory per device, by time.
    pub pareto: Vec<Candidate>,
    /// When none fits: those nearest to fitting (least memory over capacity first).
    pub nearest: Vec<Nearest>,
}

/// How a search runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Candidates kept by time (at least 1).
    pub top: usize,
    /// Skip candidates whose bound rules them out (false: price every one that fits).
    pub prune: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            top: 10,
            prune: true,
        }
    }
}

/// Strategies priced together between updates of the incumbent.
const CHUNK: usize = 32;
/// Stages' work (counted in stages) a search thread keeps before it starts over.
const STAGES_KEPT: usize = 16_384;
/// Infeasible strategies listed when none fits.
const NEAREST: usize = 5;

/// Every strategy of the grammar for `workload` on `devices` devices, `node` per node
/// (`System::devices_per_node`; 0 when unknown: no hybrid sharding), the user's axes (the
/// schedule) from `base`.
pub fn enumerate_from(
    workload: &Workload,
    devices: u64,
    node: u64,
    base: &Strategy,
) -> Result<Vec<Strategy>, TooLarge> {
    space::enumerate(&Shape::of(workload, devices, node), base)
}

/// [`enumerate_from`] with the default schedule (1F1B) and no node size.
pub fn enumerate(workload: &Workload, devices: u64) -> Result<Vec<Strategy>, TooLarge> {
    enumerate_from(workload, devices, 0, &Strategy::default())
}

/// The baseline of a search and of a co-optimization: DeepFlow's, data parallelism over
/// every device, with the least ZeRO sharding that fits in memory (stages 0, 1, 2, 3 in
/// turn; within a stage, plain first, then the enumeration's data-parallel variants:
/// micro-batches, recomputation); where none of those fits, the first enumerated strategy
/// that fits; where nothing fits, the first of them that runs at all (an infeasible
/// baseline, which every report marks as such). Speedups over a baseline are thus over one
/// that fits whenever any does.
pub fn baseline(
    workload: &Workload,
    arch: &Architecture,
    network: &Network,
    devices: u64,
) -> Option<Strategy> {
    let workload = &*crate::distributed::placed(workload, arch, network);
    let all = enumerate(workload, devices).ok()?;
    let data = (0..=3u8).flat_map(|zero| {
        let plain = Strategy {
            data: devices,
            zero,
            ..Strategy::default()
        };
        std::iter::once(plain).chain(
            all.iter()
                .filter(move |s| s.data == devices && s.zero == zero)
                .copied(),
        )
    });
    let graphs = Graphs::new(workload);
    let mut runs = None;
    for s in data.chain(all.iter().copied()) {
        let Ok(fitted) = Fitted::new(workload, graphs.get(s.recompute), arch, network, &s) else {
            continue;
        };
        if fitted.violations().is_empty() {
            return Some(s);
        }
        runs.get_or_insert(s);
    }
    runs
}

/// The workload's graph under each recomputation override, built once.
struct Graphs {
    by_recompute: Vec<(Option<Recompute>, Arc<Graph>)>,
}

impl Graphs {
    fn new(workload: &Workload) -> Graphs {
        let overrides = [
            None,
            Some(Recompute::None),
            Some(Recompute::Selective),
            Some(Recompute::Full),
        ];
        Graphs {
            by_recompute: overrides
                .into_iter()
                .map(|r| (r, Arc::new(workload.graph_with(r))))
                .collect(),
        }
    }

    fn get(&self, recompute: Option<Recompute>) -> Arc<Graph> {
        let (_, g) = self
            .by_recompute
            .iter()
            .find(|(r, _)| *r == recompute)
            .expect("every override is built");
        g.clone()
    }
}

/// What fitting one strategy gave.
enum Fit {
    Invalid,
    /// Fits the workload: its memory, violations and placements.
    Valid {
        memory: f64,
        violations: Vec<Violation>,
        placements: usize,
    },
}

/// The search's shared inputs.
struct Job<'a> {
    workload: &'a Workload,
    arch: &'a Architecture,
    net: &'a Network,
    graphs: Graphs,
    all: Vec<Strategy>,
}

impl Job<'_> {
    fn fitted(&self, i: usize) -> Option<Fitted> {
        let s = &self.all[i];
        let graph = self.graphs.get(s.recompute);
        Fitted::new(self.workload, graph, self.arch, self.net, s).ok()
    }

    /// The strategy's best placement faster than `beat`.
    fn price(&self, i: usize, beat: f64, workspace: &mut StageCache) -> Option<Candidate> {
        let f = self.fitted(i)?;
        let stages = workspace.work(&f, self.arch);
        let plan = f.plan_with(self.arch, stages);
        if plan.free_end_s() > beat {
            return None;
        }
        let p = plan.best_mapping_brief(self.net, beat)?;
        Some(candidate(&p, self.all[i], i))
    }
}

/// A search thread's kernel times and stages' work by [`Fitted::work_key`], kept across
/// the search's phases (it never changes a result).
struct StageCache {
    evaluator: Evaluator,
    works: FxHashMap<(Strategy, u64), StagesWork>,
    /// Stages held in `works`.
    held: usize,
}

impl StageCache {
    fn new(arch: &Architecture) -> StageCache {
        StageCache {
            evaluator: Evaluator::new(arch),
            works: FxHashMap::default(),
            held: 0,
        }
    }

    fn work(&mut self, f: &Fitted, arch: &Architecture) -> StagesWork {
        let key = f.work_key();
        if let Some(w) = self.works.get(&key) {
            return w.clone();
        }
        if self.held >= STAGES_KEPT {
            self.works.clear();
            self.held = 0;
        }
        let w = f.stages_work(arch, &mut self.evaluator);
        self.held += w.stages();
        self.works.insert(key, w.clone());
        w
    }
}

fn candidate(p: &DistPrediction, parsed: Strategy, order: usize) -> Candidate {
    let binding = p.binding();
    // The key/value exchange the mapping took, written into the strategy so that the string
    // reproduces the answer (`predict` prices both kinds when it is left open).
    let strategy = match (parsed.context_attention, p.context_attention) {
        (None, Some(kind)) => Strategy {
            context_attention: Some(kind),
            ..parsed
        }
        .to_string(),
        _ => p.strategy.clone(),
    };
    Candidate {
        strategy,
        placement: p
            .mapping
            .order
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(" "),
        time_per_iteration_s: p.time_per_iteration_s,
        memory_per_device_bytes: p.memory_per_device_bytes,
        model_flops_utilization: p.model_flops_utilization,
        binding,
        feasible: p.feasible,
        parsed,
        order,
    }
}

/// The times to beat, from the fitting candidates priced so far: a candidate whose time
/// is above both the N-th best time and the best time among those needing no more memory
/// can enter neither the top N nor the Pareto front.
struct Incumbents {
    /// N-th best time (infinite while fewer than N).
    nth: f64,
    /// (memory, best time of any candidate needing at most that memory), by memory.
    by_memory: Vec<(f64, f64)>,
}

impl Incumbents {
    fn of(done: &[Candidate], top: usize) -> Incumbents {
        let mut times: Vec<f64> = done.iter().map(|c| c.time_per_iteration_s).collect();
        times.sort_by(f64::total_cmp);
        let mut by_memory: Vec<(f64, f64)> = done
            .iter()
            .map(|c| (c.memory_per_device_bytes, c.time_per_iteration_s))
            .collect();
        by_memory.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut best = f64::INFINITY;
        for m in &mut by_memory {
            best = best.min(m.1);
            m.1 = best;
        }
        Incumbents {
            nth: times.get(top - 1).copied().unwrap_or(f64::INFINITY),
            by_memory,
        }
    }

    fn beat(&self, memory: f64) -> f64 {
        let fitting = self.by_memory.partition_point(|m| m.0 <= memory);
        let leaner = if fitting == 0 {
            f64::INFINITY
        } else {
            self.by_memory[fitting - 1].1
        };
        self.nth.max(leaner)
    }
}

/// Searches `strategies` (and `base`, always priced) for `workload` on one accelerator and
/// network; see the module doc for the pruning. `progress` counts strategies, three times
/// over (fitted, timed, priced).
pub fn search(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategies: &[Strategy],
    base: Option<&Strategy>,
    settings: &Settings,
    progress: &Progress,
) -> SearchResult {
    let workload = &*crate::distributed::placed(workload, arch, net);
    let top = settings.top.max(1);
    let mut all: Vec<Strategy> = base.into_iter().copied().collect();
    all.extend(strategies.iter().filter(|s| Some(*s) != base));
    let job = Job {
        workload,
        arch,
        net,
        graphs: Graphs::new(workload),
        all,
    };
    let n = job.all.len();
    // 1. Fit and memory.
    let fits: Vec<Fit> = (0..n)
        .into_par_iter()
        .map(|i| {
            progress.inc(1);
            match job.fitted(i) {
                None => Fit::Invalid,
                Some(f) => Fit::Valid {
                    memory: f.memory_per_device_bytes(),
                    violations: f.violations().to_vec(),
                    // One ordering when the placement is pinned.
                    placements: ordering_count(&job.all[i]),
                },
            }
        })
        .collect();
    let invalid = fits.iter().filter(|f| matches!(f, Fit::Invalid)).count();
    let pairs = fits
        .iter()
        .map(|f| match f {
            Fit::Valid { placements, .. } => *placements,
            Fit::Invalid => 0,
        })
        .sum();
    let fitting: Vec<usize> = (0..n)
        .filter(|&i| matches!(&fits[i], Fit::Valid { violations, .. } if violations.is_empty()))
        .collect();
    let pruned_by_memory = n - invalid - fitting.len();
    // The base, priced whether it fits or not.
    let workspaces = PerThread::new(|| StageCache::new(arch));
    let base_candidate = base
        .filter(|_| matches!(fits[0], Fit::Valid { .. }))
        .and_then(|_| workspaces.with(|ws| job.price(0, f64::INFINITY, ws)));
    // 2. Every fitting strategy's iteration with free communication.
    // Strategies differing only in interleaving, prefetch or placement share their stages'
    // work: one cache per thread, for this phase and the next.
    let mut order: Vec<(f64, usize)> = fitting
        .par_iter()
        .map(|&i| {
            progress.inc(1);
            let Some(f) = job.fitted(i) else {
                return (f64::INFINITY, i);
            };
            let stages = workspaces.with(|ws| ws.work(&f, arch));
            (f.bound_s(&stages), i)
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // 3. Priced a chunk at a time, from the lowest bound up.
    let mut done: Vec<Candidate> = base_candidate
        .iter()
        .filter(|c| c.feasible)
        .cloned()
        .collect();
    let mut pruned_by_bound = 0;
    // The base counts as priced when it fits (else among those out of memory).
    let mut evaluated = usize::from(base_candidate.as_ref().is_some_and(|c| c.feasible));
    for chunk in order.chunks(CHUNK) {
        let incumbents = Incumbents::of(&done, top);
        let priced: Vec<Option<Candidate>> = chunk
            .par_iter()
            .map(|&(free, i)| {
                progress.inc(1);
                if base.is_some() && i == 0 {
                    return None;
                }
                let beat = match &fits[i] {
                    Fit::Valid { memory, .. } if settings.prune => incumbents.beat(*memory),
                    _ => f64::INFINITY,
                };
                if free > beat {
                    return None;
                }
                workspaces.with(|ws| job.price(i, beat, ws))
            })
            .collect();
        for (p, &(_, i)) in priced.into_iter().zip(chunk) {
            match p {
                Some(c) => {
                    evaluated += 1;
                    done.push(c);
                }
                None if base.is_some() && i == 0 => {}
                None => pruned_by_bound += 1,
            }
        }
    }
    done.sort_by(|a, b| {
        a.time_per_iteration_s
            .total_cmp(&b.time_per_iteration_s)
            .then(a.order.cmp(&b.order))
    });
    let mut pareto: Vec<Candidate> = Vec::new();
    for c in &done {
        if pareto
            .iter()
            .all(|p| p.memory_per_device_bytes > c.memory_per_device_bytes)
        {
            pareto.push(c.clone());
        }
    }
    let nearest = if done.is_empty() {
        nearest_of(&job.all, &fits)
    } else {
        Vec::new()
    };
    SearchResult {
        enumerated: n,
        invalid,
        pairs,
        pruned_by_memory,
        pruned_by_bound,
        evaluated,
        best: done.first().cloned(),
        base: base_candidate,
        top: done.into_iter().take(top).collect(),
        pareto,
        nearest,
    }
}

/// The valid strategies nearest to fitting in memory, least excess first.
fn nearest_of(all: &[Strategy], fits: &[Fit]) -> Vec<Nearest> {
    let mut out: Vec<(f64, usize, Nearest)> = fits
        .iter()
        .enumerate()
        .filter_map(|(i, f)| match f {
            Fit::Valid {
                memory, violations, ..
            } if !violations.is_empty() => {
                let excess = violations
                    .iter()
                    .filter_map(Violation::memory_excess)
                    .fold(f64::INFINITY, f64::min);
                let n = Nearest {
                    strategy: all[i].to_string(),
                    memory_per_device_bytes: *memory,
                    violations: violations.clone(),
                    parsed: all[i],
                };
                Some((excess, i, n))
            }
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out.into_iter().take(NEAREST).map(|x| x.2).collect()
}
