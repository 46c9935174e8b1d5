//! Per-layer-type strategies (MAD Max Sec. 4, Figs. 8-10): each layer type of the model
//! (embeddings, attention, dense feed-forward, experts, a recommendation model's feature
//! interaction) split its own way over the same devices, such as attention under
//! `(TP, DDP)` and the dense layers under `(FSDP, DDP)`.
//!
//! An iteration is priced from one [`Plan`] per layer type, each over the graph of that
//! type's kernels alone ([`Graph::part`]), on that plan's best mapping. Every step holds the
//! parts' work (their blocking collectives included), plus the resharding of activations
//! where consecutive layers lay them out differently; the parts share one pipeline
//! schedule, and their gradient buckets one communication stream
//! (`timeline::finish_parts`): layer by layer in a transformer, where the types
//! alternate; one type after another in a model without repeated layers, whose buckets then
//! meet only their own type's blocking collectives on a shared fabric. The parts share the pipeline degree, chunks, schedule,
//! recomputation and micro-batch count; each picks its own tensor, data, sequence and ZeRO
//! split.
//!
//! Resharding: a layer's activations are split over its data-parallel ranks (and, under
//! sequence parallelism, its tensor ranks). Where the next layer type keeps more of them
//! per device, they are all-gathered over its tensor-parallel group before it runs (the
//! group holds the ranks that own the missing rows); where it keeps fewer, each device
//! takes its slice for free, and the backward pass all-gathers the gradients instead.
//! Tables split table-wise deliver their pooled outputs through their own all-to-all.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::fit::{fit_graph, FitError};
use super::memory::{self, Footprint};
use super::predict::{gemm_peak, Fitted, Plan, Workspace};
use super::report::CommReport;
use super::timeline::{self, Part, StageTimes};
use crate::domain::Precision;
use crate::generator::Architecture;
use crate::network::collective::Collective;
use crate::network::Network;
use crate::parallel::strategy::{Placement, StrategyError};
use crate::parallel::{Axis, Mapping, Strategy};
use crate::violation::Violation;
use crate::workload::{Graph, Kernel, LayerType, Phase, Position, Split, Workload};

/// A strategy per layer type. The types share the pipeline degree, chunks, schedule and
/// recomputation; each has its own tensor, data, sequence and ZeRO split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStrategy {
    /// In [`LayerType`] order, each type once.
    parts: Vec<(LayerType, Strategy)>,
}

/// What a per-layer-type strategy string lists, for its errors.
const EXAMPLE: &str = "attention:t8-d16,dense:d128-z3-hs8,embedding:d128";

impl LayerStrategy {
    /// The strategy of each listed layer type; `Err` when a type repeats or the types do
    /// not share the pipeline degree, chunks, schedule and recomputation.
    pub fn new(mut parts: Vec<(LayerType, Strategy)>) -> Result<LayerStrategy, StrategyError> {
        parts.sort_by_key(|p| p.0);
        let text = || {
            parts
                .iter()
                .map(|(t, s)| format!("{}:{s}", t.name()))
                .collect::<Vec<_>>()
                .join(",")
        };
        let fail = |message: String| StrategyError {
            input: text(),
            message,
        };
        let Some((_, first)) = parts.first() else {
            return Err(fail(format!(
                "no layer type given; expected such as {EXAMPLE}"
            )));
        };
        if let Some(w) = parts.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(fail(format!(
                "the {} layers are given twice",
                w[0].0.name()
            )));
        }
        for (t, s) in &parts {
            let shared = |s: &Strategy| {
                (
                    s.pipeline,
                    s.interleave,
                    s.gpipe,
                    s.recompute,
                    s.send_overlap,
                )
            };
            if shared(s) != shared(first) {
                return Err(fail(format!(
                    "the {} layers' pipeline, interleaving, schedule, sends or recomputation \
                     differ from the {} layers': layer types share them",
                    t.name(),
                    parts[0].0.name()
                )));
            }
            if s.context > 1 {
                return Err(fail(format!(
                    "the {} layers use context parallelism (cp): per-layer-type strategies \
                     split layers with t, d, sp and ZeRO",
                    t.name()
                )));
            }
            if s.kernel.is_some() {
                return Err(fail(format!(
                    "the {} layers use RC/CR kernel parallelism: per-layer-type strategies \
                     split layers with t, d, sp and ZeRO",
                    t.name()
                )));
            }
        }
        Ok(LayerStrategy { parts })
    }

    /// Every type of `types` under `s`.
    pub fn uniform(types: &[LayerType], s: Strategy) -> LayerStrategy {
        let mut parts: Vec<(LayerType, Strategy)> = types.iter().map(|&t| (t, s)).collect();
        parts.sort_by_key(|p| p.0);
        parts.dedup_by_key(|p| p.0);
        LayerStrategy { parts }
    }

    /// `type:strategy` pairs separated by commas, each strategy in the short form, such as
    /// `attention:t8-d16,dense:d128-z3-hs8,embedding:d128`.
    pub fn parse(text: &str) -> Result<LayerStrategy, StrategyError> {
        let fail = |message: String| StrategyError {
            input: text.to_string(),
            message: format!("{message}; expected type:strategy pairs such as {EXAMPLE}"),
        };
        let mut parts = Vec::new();
        for item in text.split(',').map(str::trim) {
            let Some((name, strategy)) = item.split_once(':') else {
                return Err(fail(format!("{item:?} has no type: before its strategy")));
            };
            let Some(t) = LayerType::parse(name.trim()) else {
                let names: Vec<&str> = LayerType::ALL.iter().map(|t| t.name()).collect();
                return Err(fail(format!(
                    "unknown layer type {name:?} (one of {})",
                    names.join(", ")
                )));
            };
            parts.push((t, Strategy::parse(strategy.trim())?));
        }
        LayerStrategy::new(parts)
    }

    pub fn parts(&self) -> &[(LayerType, Strategy)] {
        &self.parts
    }

    /// The strategy of layer type `t`.
    pub fn strategy(&self, t: LayerType) -> Option<&Strategy> {
        self.parts.iter().find(|p| p.0 == t).map(|p| &p.1)
    }

    /// Whether every type has the same strategy.
    pub fn is_uniform(&self) -> bool {
        self.parts.windows(2).all(|w| w[0].1 == w[1].1)
    }
}

impl fmt::Display for LayerStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .parts
            .iter()
            .map(|(t, s)| format!("{}:{s}", t.name()))
            .collect();
        write!(f, "{}", items.join(","))
    }
}

/// Where the forward pass goes from one layer type to another.
#[derive(Debug, Clone, Copy)]
struct Boundary {
    /// Indices into the plan's parts.
    from: usize,
    to: usize,
    /// The activations handed over, for the whole batch, bytes.
    bytes: f64,
    /// How the kernel writing them and the kernel reading them are split.
    splits: (Split, Split),
    /// Where in the model: the first stage's (head), every layer's, the last stage's.
    position: Position,
    /// Between two kernels of the same layer (else between consecutive layers).
    inside_layer: bool,
    /// The tables' pooled vectors, which their own all-to-all delivers to the reader.
    tables: bool,
}

/// The first forward kernel after the last table lookup: what reads the pooled vectors.
fn tables_reader(graph: &Graph) -> Option<&Kernel> {
    let forward: Vec<_> = graph
        .kernels
        .iter()
        .filter(|k| k.phase == Phase::Forward)
        .collect();
    let last = forward.iter().rposition(|k| k.split.is_table())?;
    forward.get(last + 1).copied()
}

/// The forward pass's hand-offs between layer types, in order: a layer's output to the
/// next kernel that reads it. Table-wise lookups take indices, not the previous layer's
/// output, and deliver theirs through their own all-to-all: the hand-off skips them, and
/// the tables' pooled vectors hand over to their reader apart.
fn boundaries(graph: &Graph, types: &[LayerType]) -> Vec<Boundary> {
    let index = |t: LayerType| types.iter().position(|&x| x == t);
    let forward: Vec<_> = graph
        .kernels
        .iter()
        .filter(|k| k.phase == Phase::Forward && !k.split.is_table())
        .collect();
    let mut out = Vec::new();
    for w in forward.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.layer == b.layer {
            continue;
        }
        let (Some(from), Some(to)) = (index(a.layer), index(b.layer)) else {
            continue;
        };
        let position = match (a.position, b.position) {
            (Position::Layer, Position::Layer) => Position::Layer,
            (Position::Head, _) | (_, Position::Head) => Position::Head,
            _ => Position::Tail,
        };
        out.push(Boundary {
            from,
            to,
            bytes: a.output_bytes(),
            splits: (a.split, b.split),
            position,
            inside_layer: true,
            tables: false,
        });
    }
    // From one layer's last kernel to the next layer's first.
    let layer: Vec<_> = forward
        .iter()
        .filter(|k| k.position == Position::Layer)
        .collect();
    if let (Some(first), Some(last)) = (layer.first(), layer.last()) {
        if let (Some(from), Some(to)) = (index(last.layer), index(first.layer)) {
            if from != to {
                out.push(Boundary {
                    from,
                    to,
                    bytes: last.output_bytes(),
                    splits: (last.split, first.split),
                    position: Position::Layer,
                    inside_layer: false,
                    tables: false,
                });
            }
        }
    }
    if let (Some(reader), Some(from)) = (tables_reader(graph), index(LayerType::Embedding)) {
        if let Some(to) = index(reader.layer) {
            let pooled = graph
                .kernels
                .iter()
                .filter(|k| k.phase == Phase::Forward && k.split.is_table())
                .map(|k| k.output_bytes() * k.count as f64)
                .sum();
            out.push(Boundary {
                from,
                to,
                bytes: pooled,
                splits: (Split::Table, reader.split),
                position: Position::Head,
                inside_layer: false,
                tables: true,
            });
        }
    }
    out
}

/// A per-layer-type strategy fitted to a workload on a machine: one [`Plan`] per type.
pub struct LayeredPlan {
    strategy: LayerStrategy,
    graph: Arc<Graph>,
    /// The hosts' work on the tables they hold (the whole model's), beside the step.
    host: Option<super::HostReport>,
    /// The workload's layer types, in forward order, and each one's plan.
    types: Vec<LayerType>,
    parts: Vec<Plan>,
    boundaries: Vec<Boundary>,
    memory: Footprint,
    violations: Vec<Violation>,
    /// [`Network::dead_fabrics`], to say why a time is endless.
    dead_fabrics: Vec<String>,
    free_end_s: f64,
    devices: u64,
    devices_per_node: u64,
    peak_flops_per_s: f64,
    throughput_by_precision: BTreeMap<Precision, f64>,
    memory_capacity_bytes: f64,
}

/// One layer type's share of a [`LayeredPrediction`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartReport {
    pub layer: LayerType,
    pub strategy: String,
    /// MAD Max's `(INTRA, INTER)`, when the split is one of the notation's.
    pub madmax: Option<String>,
    pub mapping: Mapping,
    /// Compute of its kernels per iteration on the busiest stage, s.
    pub compute_s: f64,
    pub memory_per_device_bytes: f64,
}

/// One training iteration under a per-layer-type strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayeredPrediction {
    pub workload: String,
    pub strategy: String,
    /// Each type's split in MAD Max's notation (`(MP)` for tables split table-wise), the
    /// short form where it has none.
    pub madmax: String,
    pub devices: u64,
    pub micro_batches: u64,
    pub time_per_iteration_s: f64,
    pub tokens_per_s: f64,
    pub model_flops_utilization: f64,
    /// As [`super::DistPrediction`]'s: the matrix products' precision and the utilization of
    /// its dense peak.
    pub gemm_precision: Precision,
    pub model_flops_utilization_at_precision: f64,
    /// Iteration time beyond the same schedule with free communication.
    pub exposed_communication_s: f64,
    pub pipeline_bubble_s: f64,
    /// A served model's latency for one batch ([`super::DistPrediction::serving_latency_s`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_latency_s: Option<f64>,
    /// The hosts' work on the embedding tables they keep in DDR (`None`: every table on the
    /// devices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_tables: Option<super::HostReport>,
    pub communication: Vec<CommReport>,
    pub parts: Vec<PartReport>,
    pub memory_per_device_bytes: f64,
    pub memory_capacity_bytes: f64,
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_state_bytes: f64,
    pub activations_bytes: f64,
    /// ZeRO-3's working set ([`super::DistPrediction::gathered_bytes`]).
    pub gathered_bytes: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
}

impl LayeredPlan {
    /// Fits every layer type's strategy to its part of `workload` and times the parts'
    /// kernels. `Err` when a type of the workload has no strategy, a listed type is not in
    /// the workload, a part's strategy does not fit it, or the parts split the batch into
    /// different micro-batch counts.
    pub fn new(
        workload: &Workload,
        arch: &Architecture,
        net: &Network,
        devices_per_node: u64,
        strategy: &LayerStrategy,
        workspace: &mut Workspace,
    ) -> Result<LayeredPlan, FitError> {
        let first = strategy.parts[0].1;
        let fail = |message: String| FitError {
            strategy: strategy.to_string(),
            workload: workload.name(),
            message,
        };
        if workload.serving().is_some() {
            return Err(fail("per-layer-type strategies price training".into()));
        }
        let workload =
            &*super::host::placed_with(workload, arch, net, || workspace.graph(workload, None));
        let graph = workspace.graph(workload, first.recompute);
        let types = graph.layer_types();
        if let Some(t) = types.iter().find(|t| strategy.strategy(**t).is_none()) {
            return Err(fail(format!("no strategy for the {} layers", t.name())));
        }
        if let Some((t, _)) = strategy.parts.iter().find(|p| !types.contains(&p.0)) {
            let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
            return Err(fail(format!(
                "{} has no {} layers (it has {})",
                graph.name,
                t.name(),
                names.join(", ")
            )));
        }
        if let Some((t, s)) = strategy.parts.iter().find(|(_, s)| s.tensor > 1) {
            let tensor =
                |k: &crate::workload::Kernel| matches!(k.split, Split::Column | Split::Row);
            if !graph.kernels.iter().any(tensor) {
                return Err(fail(format!(
                    "the {} layers' t{}: tensor parallelism needs a transformer's column/row linear layers",
                    t.name(),
                    s.tensor
                )));
            }
        }
        let mut parts = Vec::with_capacity(types.len());
        let mut micro_batches: Option<(LayerType, u64)> = None;
        let reader = tables_reader(&graph).map_or(LayerType::Embedding, |k| k.layer);
        for &t in &types {
            let s = strategy.strategy(t).expect("checked above");
            let mut part = graph.part(t).map_err(&fail)?;
            // Where the pooled vectors' reader is split otherwise than the tables, the
            // hand-off between them prices what it gathers (`reshard`), not the tables.
            if strategy.strategy(reader) != Some(s) {
                for k in part
                    .kernels
                    .iter_mut()
                    .filter(|k| k.split == Split::TableWhole)
                {
                    k.split = Split::Table;
                }
            }
            let part = Arc::new(part);
            let fit = fit_graph(workload, part, s, net.devices).map_err(|e| {
                fail(format!(
                    "the {} layers' {}: {}",
                    t.name(),
                    e.strategy,
                    e.message
                ))
            })?;
            let fitted = Fitted::of(fit, arch, net, s)?;
            match micro_batches {
                Some((other, m)) if m != fitted.micro_batches() => {
                    return Err(fail(format!(
                        "the {} layers run {} micro-batches, the {} layers {m}: layer types \
                         share the pipeline schedule (choose each type's mb so that they agree)",
                        t.name(),
                        fitted.micro_batches(),
                        other.name()
                    )))
                }
                _ => micro_batches = Some((t, fitted.micro_batches())),
            }
            parts.push(fitted.plan(arch, &mut workspace.evaluator));
        }
        let mut memory = parts[0].memory.clone();
        for p in &parts[1..] {
            memory.add(&p.memory);
        }
        let host = super::HostReport::on(&graph, net).map_err(fail)?;
        let mut violations = memory::violations(arch, &memory, net.devices);
        violations.extend(host.as_ref().and_then(super::HostReport::violation));
        let m = parts[0].fit.micro_batches;
        let stages = parts[0].stages.len();
        let times: Vec<StageTimes> = (0..stages)
            .map(|i| {
                let mut t = StageTimes::of(&parts[0].stages[i]);
                for p in &parts[1..] {
                    let o = StageTimes::of(&p.stages[i]);
                    t.forward_s += o.forward_s;
                    t.backward_s += o.backward_s;
                    t.update_s += o.update_s;
                    t.sparse_s += o.sparse_s;
                }
                t
            })
            .collect();
        Ok(LayeredPlan {
            host,
            boundaries: boundaries(&graph, &types),
            free_end_s: timeline::free_schedule_end(&first, &times, m),
            strategy: strategy.clone(),
            graph,
            types,
            parts,
            memory,
            violations,
            dead_fabrics: net.dead_fabrics(),
            devices: net.devices,
            devices_per_node,
            peak_flops_per_s: arch.peak_flops_per_s,
            throughput_by_precision: arch.core.throughput_by_precision.clone(),
            memory_capacity_bytes: arch.memory_capacity_bytes,
        })
    }

    /// Pipeline stages (every layer type shares them).
    pub fn stages(&self) -> u64 {
        self.parts[0].strategy().pipeline
    }

    /// Every kernel one device of stage `stage` runs for one micro-batch, each layer type's
    /// split its own way ([`Plan::stage_kernels`] of each part).
    pub fn stage_kernels(&self, stage: u64) -> Vec<(crate::workload::Kernel, u64)> {
        self.parts
            .iter()
            .flat_map(|p| p.stage_kernels(stage))
            .collect()
    }

    /// The workload's layer types, in the order of their first forward kernel.
    pub fn types(&self) -> &[LayerType] {
        &self.types
    }

    /// The fullest device's memory (every type's share), bytes. Each type's fullest stage
    /// is counted: exact without pipeline parallelism, and an upper bound with it when the
    /// types' fullest stages differ.
    pub fn memory_per_device_bytes(&self) -> f64 {
        self.memory.total_bytes()
    }

    /// Why the strategy does not fit in memory (empty when it does).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// A lower bound on the iteration under any mappings: the schedule with free
    /// communication.
    pub fn free_end_s(&self) -> f64 {
        self.free_end_s
    }

    /// The iteration with each type on the best mapping of its own part.
    pub fn predict(&self, net: &Network) -> LayeredPrediction {
        let maps: Vec<Mapping> = self
            .parts
            .iter()
            .map(|p| {
                p.best_mapping(net, f64::INFINITY)
                    .expect("without a bound to beat a mapping is priced")
                    .mapping
            })
            .collect();
        self.evaluate(&maps)
    }

    /// The iteration with each type's part on its mapping in `maps`: one per layer type,
    /// in the order of [`LayeredPlan::types`].
    pub fn evaluate(&self, maps: &[Mapping]) -> LayeredPrediction {
        assert_eq!(maps.len(), self.parts.len(), "one mapping per layer type");
        let mut inputs: Vec<timeline::Inputs> = self.parts.iter().map(|p| p.inputs()).collect();
        for i in &mut inputs {
            i.free_end = self.free_end_s;
        }
        let labels: Vec<&str> = self.types.iter().map(|t| t.name()).collect();
        // The type that opens a layer receives the previous stage's activations.
        let opener = self
            .graph
            .kernels
            .iter()
            .find(|k| k.phase == Phase::Forward && k.position == Position::Layer)
            .and_then(|k| self.types.iter().position(|&t| t == k.layer))
            .unwrap_or(0);
        let parts: Vec<Part> = inputs
            .iter()
            .zip(&labels)
            .enumerate()
            .map(|(i, (inputs, label))| Part {
                inputs,
                label,
                hands_on: i == opener,
            })
            .collect();
        let steps = inputs
            .iter()
            .zip(maps)
            .map(|(i, map)| timeline::stage_steps(i, map))
            .collect();
        let (extra, reshard) = self.reshard(maps);
        let map_refs: Vec<&Mapping> = maps.iter().collect();
        let mut eval = timeline::finish_parts(&parts, &map_refs, steps, &extra);
        eval.comms.extend(reshard);
        // A part without weights of its own lists no gradient traffic.
        eval.comms.retain(|c| c.bytes > 0.0);
        // Exposed communication is the devices' schedule's; the hosts' work on their tables
        // runs beside it, and the iteration takes the longer.
        let exposed_s = (eval.time_s - self.free_end_s).max(0.0);
        super::HostReport::beside(self.host.as_ref(), &mut eval);
        let time = eval.time_s;
        let m = self.parts[0].fit.micro_batches;
        let graph = &self.graph;
        let model_flops: f64 = graph
            .kernels
            .iter()
            .filter(|k| k.phase != Phase::Recompute)
            .map(|k| k.model_flops() * k.count as f64)
            .sum();
        let memory = &self.memory;
        let (gemm_precision, at_precision) = gemm_peak(graph, &self.throughput_by_precision);
        let parts: Vec<PartReport> = self
            .parts
            .iter()
            .zip(&self.types)
            .zip(maps)
            .map(|((p, &layer), map)| {
                let s = p.strategy();
                let busiest = p
                    .stages
                    .iter()
                    .map(|st| (st.forward_s + st.backward_s + st.sparse_s) * m as f64)
                    .fold(0.0, f64::max);
                // Tables split table-wise are MAD Max's model-parallel (MP) sharding.
                let tables = p
                    .fit
                    .graph
                    .kernels
                    .iter()
                    .all(|k| k.split.is_table() || k.phase == Phase::Update);
                PartReport {
                    layer,
                    strategy: s.to_string(),
                    madmax: if tables {
                        Some("(MP)".into())
                    } else {
                        // The notation reads the placement: the one this part runs on.
                        let placed = Strategy {
                            placement: s.placement.or(Placement::new(&map.order)),
                            ..*s
                        };
                        placed.madmax(self.devices_per_node)
                    },
                    mapping: map.clone(),
                    compute_s: busiest,
                    memory_per_device_bytes: p.memory_per_device_bytes(),
                }
            })
            .collect();
        let madmax: Vec<String> = parts
            .iter()
            .map(|p| {
                let pair = p.madmax.clone().unwrap_or_else(|| p.strategy.clone());
                format!("{} {pair}", p.layer.name())
            })
            .collect();
        let mut violations = self.violations.clone();
        violations.extend(super::predict::non_finite_time(
            time,
            &eval.comms,
            &self.dead_fabrics,
        ));
        LayeredPrediction {
            workload: graph.name.clone(),
            strategy: self.strategy.to_string(),
            madmax: madmax.join(", "),
            devices: self.devices,
            micro_batches: m,
            time_per_iteration_s: time,
            tokens_per_s: graph.tokens / time,
            model_flops_utilization: model_flops
                / (time * self.devices as f64 * self.peak_flops_per_s),
            gemm_precision,
            model_flops_utilization_at_precision: model_flops
                / (time * self.devices as f64 * self.peak_flops_per_s * at_precision),
            exposed_communication_s: exposed_s,
            pipeline_bubble_s: eval.bubble_s,
            serving_latency_s: graph.served.then_some(eval.serial_s),
            host_tables: self.host.clone(),
            communication: eval.comms,
            parts,
            memory_per_device_bytes: memory.total_bytes(),
            memory_capacity_bytes: self.memory_capacity_bytes,
            weights_bytes: memory.weights_bytes,
            gradients_bytes: memory.gradients_bytes,
            optimizer_state_bytes: memory.optimizer_state_bytes,
            activations_bytes: memory.activations_bytes,
            gathered_bytes: memory.gathered_bytes,
            feasible: violations.is_empty(),
            violations,
        }
    }

    /// Per stage, the forward and backward time of one micro-batch's resharding between
    /// layer types under `maps`, and the report of the first stage's.
    fn reshard(&self, maps: &[Mapping]) -> (Vec<(f64, f64)>, Vec<CommReport>) {
        let first = self.parts[0].strategy();
        let (p, m) = (first.pipeline, self.parts[0].fit.micro_batches);
        let split = first.split_of(self.graph.layers);
        let mut extra = vec![(0.0, 0.0); p as usize];
        let mut reports: Vec<CommReport> = Vec::new();
        for b in &self.boundaries {
            // Types split alike hand over as the uniform strategy does.
            if self.parts[b.from].strategy() == self.parts[b.to].strategy() {
                continue;
            }
            let from = self.layout(b.from, b.splits.0, true);
            let to = self.layout(b.to, b.splits.1, false);
            // The tables' all-to-all delivers any layout of as many bytes: the reader
            // gathers only what it holds beyond them (tensor ranks that each run it whole).
            if b.tables && to.bytes(b.bytes) <= from.bytes(b.bytes) * (1.0 + 1e-9) {
                continue;
            }
            // Forward, the reader gathers what it lacks; backward, the writer gathers the
            // gradients it lacks; where each lacks part of the other's (rows against
            // features), both directions exchange all-to-all.
            let link = |i: usize| {
                let own = maps[i].link(Axis::Tensor);
                if own.p > 1 {
                    own
                } else {
                    maps[b.from + b.to - i].link(Axis::Tensor)
                }
            };
            let (forward_t, backward_t, collective, gatherer, bytes) =
                match (from.covers(&to), to.covers(&from)) {
                    (true, true) => continue,
                    (true, false) => {
                        let l = link(b.from);
                        let bytes = from.bytes(b.bytes);
                        (
                            0.0,
                            l.time(Collective::AllGather, bytes),
                            Collective::AllGather,
                            b.from,
                            bytes,
                        )
                    }
                    (false, true) => {
                        let l = link(b.to);
                        let bytes = to.bytes(b.bytes);
                        (
                            l.time(Collective::AllGather, bytes),
                            0.0,
                            Collective::AllGather,
                            b.to,
                            bytes,
                        )
                    }
                    (false, false) => {
                        let split = if from.features < to.features {
                            b.from
                        } else {
                            b.to
                        };
                        let bytes = from.bytes(b.bytes).max(to.bytes(b.bytes));
                        let t = link(split).time(Collective::AllToAll, bytes);
                        (t, t, Collective::AllToAll, split, bytes)
                    }
                };
            // Serving runs no backward: nothing to reshard on the way back.
            let backward_t = if self.graph.trains { backward_t } else { 0.0 };
            if !self.graph.trains && forward_t == 0.0 {
                continue;
            }
            let link = link(gatherer);
            for (stage, e) in extra.iter_mut().enumerate() {
                let layers_per_stage = split.map_or(self.graph.layers / p.max(1), |split| {
                    split.layers(stage as u64)
                }) as f64;
                let count = match b.position {
                    Position::Layer if b.inside_layer => layers_per_stage,
                    Position::Layer if stage == 0 => (layers_per_stage - 1.0).max(0.0),
                    Position::Layer => layers_per_stage,
                    Position::Head if stage == 0 => 1.0,
                    Position::Tail if stage + 1 == p as usize => 1.0,
                    _ => 0.0,
                };
                e.0 += count * forward_t;
                e.1 += count * backward_t;
                let t = forward_t + backward_t;
                if stage == 0 && count > 0.0 && link.p > 1 {
                    let name = format!(
                        "reshard {} to {}",
                        self.types[b.from].name(),
                        self.types[b.to].name()
                    );
                    // An exchange both ways is two calls.
                    let ways = if forward_t > 0.0 && backward_t > 0.0 {
                        2.0
                    } else {
                        1.0
                    };
                    let calls = ways * count * m as f64;
                    let time_s = count * m as f64 * t;
                    match reports.iter_mut().find(|r| r.name == name) {
                        Some(r) => {
                            r.bytes = (r.bytes * r.calls + bytes * calls) / (r.calls + calls);
                            r.calls += calls;
                            r.time_s += time_s;
                        }
                        None => reports.push(CommReport {
                            name,
                            collective,
                            axis: Axis::Tensor,
                            group: link.p,
                            bytes,
                            calls,
                            time_s,
                            blocking: true,
                        }),
                    }
                }
            }
        }
        (extra, reports)
    }
}

/// The share of a layer's activations one device holds, as rows (tokens of its
/// micro-batch) and features.
#[derive(Debug, Clone, Copy)]
struct Layout {
    rows: f64,
    features: f64,
}

impl Layout {
    /// Whether a device holds all that `other` holds (slicing is free).
    fn covers(&self, other: &Layout) -> bool {
        let at_least = |a: f64, b: f64| a >= b * (1.0 - 1e-9);
        at_least(self.rows, other.rows) && at_least(self.features, other.features)
    }

    /// Bytes of `whole` (the whole batch's activations) one device holds.
    fn bytes(&self, whole: f64) -> f64 {
        whole * self.rows * self.features
    }
}

impl LayeredPlan {
    /// How part `i` lays out the activations a kernel split `split` writes (`output`) or
    /// reads: column-parallel outputs and row-parallel inputs by features over the tensor
    /// group; others whole per tensor rank, their tokens split over it under sequence
    /// parallelism (Megatron's own gathers and scatters are the part's collectives).
    fn layout(&self, i: usize, split: Split, output: bool) -> Layout {
        let (plan, s) = (&self.parts[i], self.parts[i].strategy());
        if split.is_table() {
            // After their all-to-all: each device its replica's rows, a slice of the
            // features (`work::split_table`).
            return Layout {
                rows: plan.fit.f_tok,
                features: 1.0 / s.model_degree() as f64,
            };
        }
        let t = s.tensor as f64;
        let by_features = match split {
            Split::Sharded => true,
            Split::Column => output,
            Split::Row => !output,
            _ => false,
        };
        let (rows, features) = if by_features {
            (1.0, 1.0 / t)
        } else if s.sequence_parallel {
            (1.0 / t, 1.0)
        } else {
            (1.0, 1.0)
        };
        Layout {
            rows: rows * plan.fit.f_tok,
            features,
        }
    }
}

/// [`LayeredPlan::predict`] in one call.
pub fn predict_layered(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    devices_per_node: u64,
    strategy: &LayerStrategy,
    workspace: &mut Workspace,
) -> Result<LayeredPrediction, FitError> {
    let plan = LayeredPlan::new(workload, arch, net, devices_per_node, strategy, workspace)?;
    Ok(plan.predict(net))
}
