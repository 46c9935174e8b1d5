//! Per-layer-type strategy search (MAD Max Sec. 4, Figs. 8-10): from the best uniform
//! strategies, give each layer type (embeddings, attention, dense layers, experts, a
//! feature interaction) its own split of the same devices, one type at a time, while that
//! makes the iteration faster.
//!
//! The types share a starting strategy's pipeline degree, chunks, schedule, recomputation
//! and micro-batch count (one pipeline schedule); each type's candidates are every tensor
//! degree that divides a stage's devices, with its data degree, sequence parallelism, ZeRO
//! 0-3, and a node-sized hybrid shard group, and the micro-batch that keeps the count.
//! Coordinate descent: each round tries every candidate of every type against the current
//! assignment (in parallel, with the same answer on any number of threads) and takes the
//! best improvement of each type in turn, until a round changes nothing (at most
//! [`ROUNDS`]). It is a local search: the counts say how many assignments it priced, and
//! the exhaustive product of the types' candidates is tested against it on small cases.
//! Every assignment is priced by [`LayeredPlan`], the uniform start included, so the
//! result is never slower than its start in the same model.

use rayon::prelude::*;
use serde::Serialize;

use super::space::divisors;
use crate::distributed::{LayerStrategy, LayeredPlan, LayeredPrediction, Workspace};
use crate::generator::Architecture;
use crate::network::Network;
use crate::opt::PerThread;
use crate::parallel::Strategy;
use crate::workload::{LayerType, Phase, Workload};

/// Rounds of coordinate descent at most (each round gives every type one move).
pub const ROUNDS: usize = 4;

/// What a per-layer-type search found and what it priced.
#[derive(Debug, Clone, Serialize)]
pub struct LayeredResult {
    /// The uniform strategies it started from.
    pub starts: Vec<String>,
    /// Per-layer-type assignments priced (each a full iteration).
    pub evaluated: usize,
    /// Assignments that could not run (a type's split does not fit its layers or the
    /// micro-batch count) or did not fit in memory.
    pub invalid: usize,
    pub pruned_by_memory: usize,
    /// Skipped because their schedule with free communication was already slower than the
    /// current assignment.
    pub pruned_by_bound: usize,
    /// The best uniform start, priced per layer type (the comparison the result is
    /// measured against).
    pub uniform: Option<LayeredPrediction>,
    /// The best assignment found (the uniform start when no type gains from its own split).
    pub best: Option<LayeredPrediction>,
}

/// The splits a layer type may take in place of `base`'s: the same pipeline, chunks,
/// schedule, recomputation and micro-batch count `m`, any tensor degree dividing a
/// stage's devices, ZeRO 0-3, sequence parallelism with tensor parallelism, a hybrid shard
/// group of one node under ZeRO-3. `batch`: samples per iteration.
pub fn alternatives(
    base: &Strategy,
    m: u64,
    batch: u64,
    devices: u64,
    node: u64,
    experts: bool,
) -> Vec<Strategy> {
    let per_stage = devices / base.pipeline.max(1);
    // Only the experts' layers spread experts.
    let expert = if experts { base.expert } else { 1 };
    let mut out = Vec::new();
    for t in divisors(per_stage) {
        let d = per_stage / t;
        if batch % (d * m) != 0 || d % expert != 0 {
            continue;
        }
        let mb = batch / (d * m);
        for zero in 0..=3u8 {
            for sp in [false, true] {
                if sp && t == 1 {
                    continue;
                }
                let mut shards = vec![0];
                if zero == 3 && t == 1 && base.expert == 1 && node >= 2 && node < d && d % node == 0
                {
                    shards.push(node);
                }
                for shard in shards {
                    out.push(Strategy {
                        tensor: t,
                        data: d,
                        micro_batch: mb,
                        zero,
                        sequence_parallel: sp,
                        shard,
                        prefetch: true,
                        placement: None,
                        kernel: None,
                        expert,
                        // Without data parallelism there is nothing to overlap.
                        grad_overlap: base.grad_overlap || d == 1,
                        tp_overlap: base.tp_overlap && t > 1 && sp,
                        scatter_sends: base.scatter_sends && t > 1 && !sp,
                        ..*base
                    });
                }
            }
        }
    }
    out
}

/// One assignment priced: its prediction, or why it was skipped.
enum Priced {
    Time(Box<LayeredPrediction>),
    Invalid,
    Memory,
    Bound,
}

struct Pricer<'a> {
    workload: &'a Workload,
    arch: &'a Architecture,
    net: &'a Network,
    node: u64,
    workspaces: PerThread<Workspace>,
}

impl Pricer<'_> {
    fn price(&self, s: &LayerStrategy, beat: f64) -> Priced {
        self.workspaces.with(|ws| {
            let Ok(plan) = LayeredPlan::new(self.workload, self.arch, self.net, self.node, s, ws)
            else {
                return Priced::Invalid;
            };
            if !plan.violations().is_empty() {
                return Priced::Memory;
            }
            if plan.free_end_s() >= beat {
                return Priced::Bound;
            }
            Priced::Time(Box::new(plan.predict(self.net)))
        })
    }
}

/// Uniform strategies a per-layer-type search starts from by default: the fastest that fit.
pub const STARTS: usize = 4;

/// The starts of a per-layer-type search after the uniform search `found`: its [`STARTS`]
/// fastest strategies that fit.
pub fn starts(found: &super::SearchResult) -> Vec<Strategy> {
    found
        .top
        .iter()
        .filter(|c| c.feasible)
        .take(STARTS)
        .map(|c| c.parsed)
        .collect()
}

/// Searches per-layer-type strategies for `workload` on `arch` x `net` (nodes of `node`
/// devices) from each of `starts` (uniform strategies, best first; those that cannot run
/// or fit, RC/CR kernel splits and context parallelism are skipped).
pub fn search_layered(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    node: u64,
    starts: &[Strategy],
) -> LayeredResult {
    let pricer = Pricer {
        workload,
        arch,
        net,
        node,
        workspaces: PerThread::new(|| Workspace::new(arch)),
    };
    let mut result = LayeredResult {
        starts: starts.iter().map(|s| s.to_string()).collect(),
        evaluated: 0,
        invalid: 0,
        pruned_by_memory: 0,
        pruned_by_bound: 0,
        uniform: None,
        best: None,
    };
    let count = |r: &mut LayeredResult, p: &Priced| match p {
        Priced::Time(_) => r.evaluated += 1,
        Priced::Invalid => r.invalid += 1,
        Priced::Memory => r.pruned_by_memory += 1,
        Priced::Bound => r.pruned_by_bound += 1,
    };
    let batch = workload.graph().samples.round() as u64;
    // Per-layer-type strategies split layers with t, d, sp and ZeRO, not RC/CR or cp.
    for start in starts
        .iter()
        .filter(|s| s.kernel.is_none() && s.context == 1)
    {
        let graph = workload.graph_with(start.recompute);
        let types = graph.layer_types();
        // Tables split table-wise whatever the strategy: nothing to choose for them.
        let searched: Vec<LayerType> = types
            .iter()
            .copied()
            .filter(|&t| {
                !graph
                    .kernels
                    .iter()
                    .filter(|k| k.layer == t && k.phase != Phase::Update)
                    .all(|k| k.split.is_table())
            })
            .collect();
        let uniform = LayerStrategy::uniform(&types, *start);
        let priced = pricer.price(&uniform, f64::INFINITY);
        count(&mut result, &priced);
        let Priced::Time(mut current) = priced else {
            continue;
        };
        if faster(&current, result.uniform.as_ref()) {
            result.uniform = Some((*current).clone());
        }
        let m = current.micro_batches;
        let options =
            |t: LayerType| alternatives(start, m, batch, net.devices, node, t == LayerType::Expert);
        let mut assignment = uniform;
        for _ in 0..ROUNDS {
            let mut moved = false;
            for &t in &searched {
                let beat = current.time_per_iteration_s;
                let tries: Vec<LayerStrategy> = options(t)
                    .iter()
                    .filter(|o| assignment.strategy(t) != Some(*o))
                    .filter_map(|o| with(&assignment, t, *o))
                    .collect();
                let priced: Vec<Priced> = tries.par_iter().map(|s| pricer.price(s, beat)).collect();
                let mut best: Option<(usize, Box<LayeredPrediction>)> = None;
                for (i, p) in priced.into_iter().enumerate() {
                    count(&mut result, &p);
                    if let Priced::Time(p) = p {
                        let better = p.time_per_iteration_s < beat * (1.0 - 1e-12)
                            && best.as_ref().map_or(true, |b| {
                                p.time_per_iteration_s < b.1.time_per_iteration_s
                            });
                        if better {
                            best = Some((i, p));
                        }
                    }
                }
                if let Some((i, p)) = best {
                    assignment = tries[i].clone();
                    current = p;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        if faster(&current, result.best.as_ref()) {
            result.best = Some(*current);
        }
    }
    result
}

/// Whether `p` is faster than `than` (ties keep the earlier).
fn faster(p: &LayeredPrediction, than: Option<&LayeredPrediction>) -> bool {
    than.map_or(true, |b| p.time_per_iteration_s < b.time_per_iteration_s)
}

/// `s` with layer type `t` under `split`.
fn with(s: &LayerStrategy, t: LayerType, split: Strategy) -> Option<LayerStrategy> {
    let parts = s
        .parts()
        .iter()
        .map(|&(u, x)| (u, if u == t { split } else { x }))
        .collect();
    LayerStrategy::new(parts).ok()
}
