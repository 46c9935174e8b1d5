//! One training iteration on many devices (DeepFlow Sec. 5-6): a [`Plan`] holds everything
//! that does not depend on the mapping (the fit of the strategy, every stage's work, the
//! memory of the fullest device); [`Plan::evaluate`] prices one mapping; [`predict`] is the
//! convenience that asks [`crate::parallel::mapping::best_placement`] for the best one.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::sync::Arc;

use super::fit::{fit, fit_graph, Fit, FitError};
use super::host::{placed_with, HostReport};
use super::memory::{self, Footprint};
use super::report::{CommReport, ComputeReport, DistPrediction, LayerTimes};
use super::timeline::{self, Eval, StageTimes};
use super::work::{stages_weights, stages_work, StageWork};
use crate::domain::{Precision, Recompute};
use crate::generator::Architecture;
use crate::network::collective::Collective;
use crate::network::Network;
use crate::parallel::mapping::{best_placement, place_cached, Mapping};
use crate::parallel::strategy::ContextAttention;
use crate::parallel::Axis;
use crate::parallel::Strategy;
use crate::perf::{EnergyRates, Evaluator};
use crate::violation::Violation;
use crate::workload::{Graph, LayerType, Phase, Position, Workload};

/// A strategy fitted to a workload on a machine, before any kernel is timed: the batch
/// split and the fullest device's memory. What a search checks first.
pub struct Fitted {
    strategy: Strategy,
    fit: Fit,
    memory: Footprint,
    violations: Vec<Violation>,
    devices: u64,
    /// The hosts' work on the tables they hold, if any.
    host: Option<HostReport>,
    /// The network's fabrics that cannot send ([`Network::dead_fabrics`]), to say why a
    /// time is endless.
    dead_fabrics: Vec<String>,
}

impl Fitted {
    /// Fits `strategy` to `workload`, whose graph under the strategy's recomputation is
    /// `graph` (built once for a search's strategies: [`Workload::graph_with`]).
    pub fn new(
        workload: &Workload,
        graph: Arc<Graph>,
        arch: &Architecture,
        net: &Network,
        strategy: &Strategy,
    ) -> Result<Fitted, FitError> {
        Fitted::of(
            fit_graph(workload, graph, strategy, net.devices)?,
            arch,
            net,
            strategy,
        )
    }

    pub(super) fn of(
        fit: Fit,
        arch: &Architecture,
        net: &Network,
        s: &Strategy,
    ) -> Result<Fitted, FitError> {
        if s.tp_overlap && fit.graph.layers == 0 {
            return Err(FitError {
                strategy: s.to_string(),
                workload: fit.graph.name.clone(),
                message: "tp=overlap runs the tensor-parallel collectives of repeated layers \
                          beside their linear layers; this workload has no repeated layers"
                    .into(),
            });
        }
        if s.tp_overlap && arch.core.collective_compute_share.is_none() {
            return Err(FitError {
                strategy: s.to_string(),
                workload: fit.graph.name.clone(),
                message: format!(
                    "tp=overlap runs the tensor-parallel collectives on the compute units \
                     beside the linear layers, and {} gives no {} (the share they hold) to \
                     price it with",
                    arch.template,
                    if arch.pinned.is_some() {
                        "processor.collective_compute_share"
                    } else {
                        "compute.collective_compute_share"
                    }
                ),
            });
        }
        let host = HostReport::on(&fit.graph, net).map_err(|message| FitError {
            strategy: s.to_string(),
            workload: fit.graph.name.clone(),
            message,
        })?;
        let weights = stages_weights(&fit.graph, s);
        let memory = memory::footprint(&fit, s, &weights, net.devices);
        let mut violations = memory::violations(arch, &memory, net.devices);
        violations.extend(host.as_ref().and_then(HostReport::violation));
        Ok(Fitted {
            strategy: *s,
            fit,
            memory,
            violations,
            devices: net.devices,
            host,
            dead_fabrics: net.dead_fabrics(),
        })
    }

    /// The fullest device's memory, bytes.
    pub fn memory_per_device_bytes(&self) -> f64 {
        self.memory.total_bytes()
    }

    /// Why the strategy does not fit in memory (empty when it does).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Micro-batches per replica and iteration.
    pub fn micro_batches(&self) -> u64 {
        self.fit.micro_batches
    }

    /// What the stages' work depends on: the strategy without its interleaving, prefetch,
    /// schedule, overlaps, scattered sends and placement, and the micro-batch's share of the
    /// batch.
    /// Strategies with the same key have the same [`Fitted::stages_work`].
    pub fn work_key(&self) -> (Strategy, u64) {
        let s = Strategy {
            interleave: 1,
            prefetch: true,
            gpipe: false,
            grad_overlap: true,
            send_overlap: true,
            scatter_sends: false,
            tp_overlap: false,
            placement: None,
            micro_batch: 0,
            ..self.strategy
        };
        (s, self.fit.f_tok.to_bits())
    }

    /// A lower bound on the iteration under any mapping, from the stages' work in
    /// O(stages): the busiest stage's micro-batches back to back, behind the pipeline's
    /// fill and drain, then the update (below [`Plan::free_end_s`]).
    pub fn bound_s(&self, stages: &StagesWork) -> f64 {
        let times: Vec<StageTimes> = stages.0.iter().map(|st| StageTimes::of(st)).collect();
        timeline::free_bound(&self.strategy, &times, self.fit.micro_batches)
    }

    /// Times every stage's kernels with `evaluator` (built for `arch`; its kernel times are
    /// reused across plans).
    pub fn plan(self, arch: &Architecture, evaluator: &mut Evaluator) -> Plan {
        let stages = self.stages_work(arch, evaluator);
        self.plan_with(arch, stages)
    }

    /// Every stage's work, timed with `evaluator`: shared by the plans of strategies with
    /// the same [`Fitted::work_key`].
    pub fn stages_work(&self, arch: &Architecture, evaluator: &mut Evaluator) -> StagesWork {
        // Embedding engines beside the dense cores take the table lookups (TPU v4 Sec. 3.5).
        self.stages_work_at(
            &EnergyRates::of(arch),
            arch.core.sparse_cores > 0,
            evaluator,
        )
    }

    /// [`Fitted::stages_work`] with the architecture's energy rates and whether it has
    /// embedding engines already known.
    fn stages_work_at(
        &self,
        rates: &EnergyRates,
        sparse: bool,
        evaluator: &mut Evaluator,
    ) -> StagesWork {
        let (s, fit) = (&self.strategy, &self.fit);
        StagesWork(Arc::new(stages_work(
            &fit.graph, s, fit.f_tok, evaluator, rates, sparse,
        )))
    }

    /// The plan with every stage's work already timed (`stages`, from the
    /// [`Fitted::stages_work`] of a strategy with the same [`Fitted::work_key`]).
    pub fn plan_with(self, arch: &Architecture, stages: StagesWork) -> Plan {
        let free_end_s = self.free_end_s(&stages);
        self.plan_ended(arch, EnergyRates::of(arch), stages, free_end_s)
    }

    /// The end of the schedule of `stages` with free communication.
    fn free_end_s(&self, stages: &StagesWork) -> f64 {
        let times: Vec<StageTimes> = stages.0.iter().map(|st| StageTimes::of(st)).collect();
        timeline::free_schedule_end(&self.strategy, &times, self.fit.micro_batches)
    }

    /// [`Fitted::plan_with`] with the schedule's end with free communication known.
    fn plan_ended(
        self,
        arch: &Architecture,
        rates: EnergyRates,
        stages: StagesWork,
        free_end_s: f64,
    ) -> Plan {
        let s = &self.strategy;
        let fit = self.fit;
        let stages = stages.0;
        debug_assert_eq!(stages.len() as u64, s.pipeline);
        Plan {
            strategy: *s,
            host: self.host,
            table_wise: fit.graph.kernels.iter().any(|k| k.split.is_table()),
            free_end_s,
            fit,
            stages,
            memory: self.memory,
            violations: self.violations,
            dead_fabrics: self.dead_fabrics,
            rates,
            devices: self.devices,
            peak_flops_per_s: arch.peak_flops_per_s,
            throughput_by_precision: arch.core.throughput_by_precision.clone(),
            memory_capacity_bytes: arch.memory_capacity_bytes,
            collective_compute_share: arch.core.collective_compute_share.unwrap_or(0.0),
        }
    }
}

/// Every stage's work under one strategy, shareable between plans ([`Fitted::stages_work`]).
#[derive(Clone)]
pub struct StagesWork(Arc<Vec<Arc<StageWork>>>);

impl StagesWork {
    /// Pipeline stages held.
    pub fn stages(&self) -> usize {
        self.0.len()
    }
}

/// A strategy fitted to a workload on a machine: everything about the iteration that does
/// not depend on how the strategy's axes are mapped onto the devices.
pub struct Plan {
    strategy: Strategy,
    pub(super) fit: Fit,
    pub(super) stages: Arc<Vec<Arc<StageWork>>>,
    pub(super) memory: Footprint,
    violations: Vec<Violation>,
    /// [`Network::dead_fabrics`], to say why a time is endless.
    dead_fabrics: Vec<String>,
    /// Table-wise sharded embeddings talk to every device at once.
    table_wise: bool,
    /// End of the schedule with free communication.
    free_end_s: f64,
    rates: EnergyRates,
    devices: u64,
    peak_flops_per_s: f64,
    /// Dense throughput per precision relative to `peak_flops_per_s`.
    throughput_by_precision: BTreeMap<Precision, f64>,
    memory_capacity_bytes: f64,
    /// Share of the compute units a collective holds beside compute (`tp=overlap`).
    collective_compute_share: f64,
    /// The hosts' work on the tables they hold, beside the devices' step.
    pub(super) host: Option<HostReport>,
}

impl Plan {
    /// Fits `strategy` to `workload` on `arch` x `net` and times every stage's kernels.
    pub fn new(
        workload: &Workload,
        arch: &Architecture,
        net: &Network,
        strategy: &Strategy,
    ) -> Result<Plan, FitError> {
        Plan::with(workload, arch, net, strategy, &mut Workspace::new(arch))
    }

    /// [`Plan::new`] with the kernel times and graphs `workspace` keeps.
    pub fn with(
        workload: &Workload,
        arch: &Architecture,
        net: &Network,
        strategy: &Strategy,
        workspace: &mut Workspace,
    ) -> Result<Plan, FitError> {
        if workload.serving().is_some() {
            let fitted = Fitted::of(fit(workload, strategy, net.devices)?, arch, net, strategy)?;
            return Ok(fitted.plan(arch, &mut workspace.evaluator));
        }
        let workload = &*placed_with(workload, arch, net, || workspace.graph(workload, None));
        let graph = workspace.graph(workload, strategy.recompute);
        let fit = fit_graph(workload, graph, strategy, net.devices)?;
        let fitted = Fitted::of(fit, arch, net, strategy)?;
        Ok(workspace.plan(workload, fitted, arch))
    }

    /// The iteration with every communication free: a lower bound under any mapping.
    pub fn free_end_s(&self) -> f64 {
        self.free_end_s
    }

    /// The fullest device's memory, bytes.
    pub fn memory_per_device_bytes(&self) -> f64 {
        self.memory.total_bytes()
    }

    /// Why the strategy cannot run as planned (memory), whatever the mapping.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The prediction under the best mapping of the strategy's axes onto `net`; `None` when
    /// no mapping can be faster than `beat` s (by its lower bound: nothing is priced then).
    pub fn best_mapping(&self, net: &Network, beat: f64) -> Option<DistPrediction> {
        let (map, eval, tried) = self.best(net, beat, true)?;
        Some(self.report(map, eval, tried, true))
    }

    /// [`Plan::best_mapping`] without the per-layer table (`per_layer` empty): what a
    /// strategy search ranks by, at no cost for a table it does not show.
    pub fn best_mapping_brief(&self, net: &Network, beat: f64) -> Option<DistPrediction> {
        let (map, eval, tried) = self.best(net, beat, true)?;
        Some(self.report(map, eval, tried, false))
    }

    /// The time per iteration under the best mapping, without the report
    /// ([`Plan::best_mapping`]'s `time_per_iteration_s`): what a search over designs reads.
    pub fn best_time_s(&self, net: &Network) -> f64 {
        self.best(net, f64::INFINITY, false)
            .expect("without a bound to beat a mapping is priced")
            .1
            .time_s
    }

    /// The best mapping, its schedule (its collectives listed when `listing`) and the
    /// number of orderings tried. Only a listed schedule may be reported: without the list
    /// its time is right but the energy and the exposed fraction `report` derives from the
    /// collectives are not.
    fn best(&self, net: &Network, beat: f64, listing: bool) -> Option<(Mapping, Eval, usize)> {
        let inputs = timeline::Inputs {
            listing,
            ..self.inputs()
        };
        // Bounds never list their collectives (naming them is most of a bound's work, and
        // most orderings are bounded, not priced); a listed schedule takes its steps again.
        let unlisted = timeline::Inputs {
            listing: false,
            ..self.inputs()
        };
        // The steps a mapping's bound took, kept for pricing it (by the mapping's address:
        // the mappings stay in place while they are bounded and priced).
        let kept: RefCell<Vec<(*const Mapping, timeline::Steps, f64)>> = RefCell::new(Vec::new());
        let bound = |map: &Mapping| {
            let steps = timeline::stage_steps(&unlisted, map);
            let bound = steps.bound(&unlisted);
            kept.borrow_mut()
                .push((map as *const Mapping, steps, bound));
            bound
        };
        let all = self.needs_all_devices();
        best_placement(net, &self.strategy, all, beat, bound, |map| {
            let found = {
                let mut kept = kept.borrow_mut();
                let at = kept.iter().position(|k| std::ptr::eq(k.0, map));
                at.map(|i| kept.swap_remove(i))
            };
            let (steps, bound) = match found {
                Some((_, _, bound)) if listing => (timeline::stage_steps(&inputs, map), bound),
                Some((_, steps, bound)) => (steps, bound),
                None => {
                    let steps = timeline::stage_steps(&inputs, map);
                    let bound = steps.bound(&inputs);
                    (steps, bound)
                }
            };
            let mut eval = timeline::finish(&inputs, map, steps);
            self.settle(&mut eval);
            debug_assert!(
                eval.time_s >= bound * (1.0 - 1e-12),
                "the bound exceeds the time: {bound} > {}",
                eval.time_s
            );
            (eval.time_s, eval)
        })
    }

    /// The iteration under the best mapping as a timeline: every step, collective, send and
    /// bubble of every stage ([`super::trace`]).
    pub fn trace(&self, net: &Network) -> super::Trace {
        let (map, _, _) = self
            .best(net, f64::INFINITY, false)
            .expect("without a bound to beat a mapping is priced");
        let inputs = self.inputs();
        let (mut eval, recording) = timeline::record(&inputs, &map);
        self.settle(&mut eval);
        let eval_of = (eval.time_s, eval.context);
        super::trace::build(&inputs, &map, net, &recording, eval_of, self.host.as_ref())
    }

    /// Every kernel one device of pipeline stage `stage` runs for one micro-batch, at the
    /// size the step runs it, with its instances (what its roofline draws).
    pub fn stage_kernels(&self, stage: u64) -> Vec<(crate::workload::Kernel, u64)> {
        super::work::micro_batch_kernels(&self.fit.graph, &self.strategy, stage, self.fit.f_tok)
    }

    /// Whether a mapping must also measure every device as one group.
    pub fn needs_all_devices(&self) -> bool {
        self.table_wise
    }

    /// The prediction under one mapping. `map` must have been placed with every device
    /// measured as one group when [`Plan::needs_all_devices`] (table-wise embeddings talk to
    /// all of them); [`evaluate`] places it so.
    pub fn evaluate(&self, map: &Mapping) -> DistPrediction {
        debug_assert!(
            !self.table_wise || self.devices <= 1 || map.link(Axis::Every).p > 1,
            "a table-wise workload's mapping must measure every device as one group"
        );
        self.report(map.clone(), self.schedule(map), 1, true)
    }

    /// The strategy planned.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    pub(super) fn inputs(&self) -> timeline::Inputs<'_> {
        timeline::Inputs {
            graph: &self.fit.graph,
            s: &self.strategy,
            stages: &self.stages,
            m: self.fit.micro_batches,
            f_tok: self.fit.f_tok,
            stage_param_bytes: self.memory.stage_parameters * self.memory.bytes_per_weight,
            expert_param_share: self.memory.expert_share(&self.strategy),
            gradient_bytes: self.memory.bytes_per_gradient,
            weight_bytes: self.memory.bytes_per_weight,
            free_end: self.free_end_s,
            listing: true,
            collective_compute_share: self.collective_compute_share,
        }
    }

    fn schedule(&self, map: &Mapping) -> Eval {
        let mut eval = timeline::evaluate(&self.inputs(), map);
        self.settle(&mut eval);
        eval
    }

    /// The devices' schedule's exposed communication, then the iteration as the longer of
    /// that schedule and the hosts' work on their tables (which runs a batch ahead), and one
    /// batch's latency with the hosts' work before the devices' (as serving runs a batch).
    fn settle(&self, eval: &mut Eval) {
        eval.exposed_s = (eval.time_s - self.free_end_s).max(0.0);
        HostReport::beside(self.host.as_ref(), eval);
    }

    /// A lower bound on the iteration under `map`, from its stages' steps alone.
    pub fn bound(&self, map: &Mapping) -> f64 {
        let inputs = self.inputs();
        timeline::stage_steps(&inputs, map).bound(&inputs)
    }

    /// The stage with the most compute per micro-batch.
    fn busiest_stage(&self) -> &StageWork {
        let busiest = self
            .stages
            .iter()
            .enumerate()
            .max_by(|a, b| {
                (a.1.forward_s + a.1.backward_s).total_cmp(&(b.1.forward_s + b.1.backward_s))
            })
            .map_or(0, |(i, _)| i);
        &self.stages[busiest]
    }

    /// Every stage's compute per layer type over all micro-batches, and per repeated layer
    /// for one micro-batch (the types a stage runs no kernel of left out).
    fn layer_report(&self, map: &Mapping, context: Option<ContextAttention>) -> Vec<LayerTimes> {
        let graph = &self.fit.graph;
        let m = self.fit.micro_batches as f64;
        // Types with kernels inside the repeated layers.
        let repeated: Vec<LayerType> = graph
            .kernels
            .iter()
            .filter(|k| k.position == Position::Layer && k.phase == Phase::Forward)
            .map(|k| k.layer)
            .collect();
        let mut out = Vec::new();
        for (stage, st) in self.stages.iter().enumerate() {
            for layer in LayerType::ALL {
                let t = st.by_layer[layer as usize];
                if t.forward_s + t.backward_s + t.recompute_s == 0.0 {
                    continue;
                }
                let layers = if repeated.contains(&layer) {
                    st.layers
                } else {
                    0
                };
                let per = |x: f64| if layers > 0 { x / layers as f64 } else { 0.0 };
                let collectives_s: f64 = st
                    .forward_needs
                    .iter()
                    .chain(&st.backward_needs)
                    .filter(|(_, n)| n.layer == layer)
                    .filter(|(_, n)| n.taken(context))
                    .map(|(count, n)| count * map.link(n.axis).time(n.collective, n.bytes))
                    .sum();
                out.push(LayerTimes {
                    stage: stage as u64,
                    layer,
                    layers,
                    forward_s: t.forward_s * m,
                    backward_s: t.backward_s * m,
                    recompute_s: t.recompute_s * m,
                    collectives_s: collectives_s * m,
                    per_layer_forward_s: per(t.forward_s),
                    per_layer_backward_s: per(t.backward_s + t.recompute_s),
                });
            }
        }
        out
    }

    /// Compute time per kernel class on the busiest stage, over all micro-batches.
    fn compute_report(&self, busiest: &StageWork) -> Vec<ComputeReport> {
        let m = self.fit.micro_batches as f64;
        let mut compute: Vec<ComputeReport> = Vec::with_capacity(busiest.by_class.len());
        for (class, t, bound) in &busiest.by_class {
            compute.push(ComputeReport {
                class: *class,
                time_s: t * m,
                bound: bound.clone(),
            });
        }
        compute
    }

    /// Energy of the iteration on every device: every stage's devices (devices / p of them)
    /// run its micro-batches and its update; each device sends about the bytes of the first
    /// stage's collectives (an all-reduce twice); the chip's floor (idle, else leakage,
    /// plus active power) is drawn for the whole iteration.
    fn energy_j(&self, eval: &Eval) -> f64 {
        let m = self.fit.micro_batches as f64;
        let devices = self.devices as f64;
        let per_stage = devices / self.strategy.pipeline as f64;
        let work_j: f64 = self
            .stages
            .iter()
            .map(|st| (st.step_j * m + st.update_j) * per_stage)
            .sum();
        let sent: f64 = eval
            .comms
            .iter()
            .map(|c| {
                let twice = if c.collective == Collective::AllReduce {
                    2.0
                } else {
                    1.0
                };
                c.bytes * c.calls * twice
            })
            .sum();
        work_j
            + sent * self.rates.link_j_per_byte * devices
            + self.rates.floor_w * eval.time_s * devices
            + self.host.as_ref().map_or(0.0, |h| h.energy_j)
    }

    /// The prediction under `map`; `per_layer` filled when `layers`.
    fn report(
        &self,
        map: Mapping,
        eval: Eval,
        mappings_tried: usize,
        layers: bool,
    ) -> DistPrediction {
        let graph = &self.fit.graph;
        let m = self.fit.micro_batches;
        let time = eval.time_s;
        let devices = self.devices as f64;
        let model_flops: f64 = graph
            .kernels
            .iter()
            .filter(|k| k.phase != Phase::Recompute)
            .map(|k| k.model_flops() * k.count as f64)
            .sum();
        let (gemm_precision, at_precision) = gemm_peak(graph, &self.throughput_by_precision);
        let busiest = self.busiest_stage();
        let compute_s = (busiest.forward_s + busiest.backward_s + busiest.sparse_s) * m as f64
            + busiest.update_s;
        let mut eval = eval;
        if !graph.trains {
            // Nothing trains: no gradient synchronisation to list.
            eval.comms.retain(|c| c.bytes > 0.0);
        }
        let communication_s: f64 = eval.comms.iter().map(|c| c.time_s).sum();
        let energy_j = self.energy_j(&eval);
        let memory = &self.memory;
        let mut violations = self.violations.clone();
        violations.extend(non_finite_time(time, &eval.comms, &self.dead_fabrics));
        if time.is_finite() {
            violations.extend(Violation::unless_finite(
                "energy per iteration (J)",
                energy_j,
            ));
        }
        DistPrediction {
            energy_j,
            average_power_w: energy_j / time,
            joules_per_token: energy_j / graph.tokens.max(1.0),
            serialized_time_s: compute_s + communication_s,
            exposed_communication_fraction: if communication_s > 0.0 {
                (eval.exposed_s / communication_s).min(1.0)
            } else {
                0.0
            },
            workload: graph.name.clone(),
            strategy: self.strategy.to_string(),
            context_attention: eval.context,
            devices: self.devices,
            micro_batches: m,
            micro_batch: self.fit.micro_batch,
            time_per_iteration_s: time,
            tokens_per_s: graph.tokens / time,
            model_flops_utilization: model_flops / (time * devices * self.peak_flops_per_s),
            gemm_precision,
            model_flops_utilization_at_precision: model_flops
                / (time * devices * self.peak_flops_per_s * at_precision),
            precisions: graph.precisions,
            achieved_flops_per_s_per_device: graph.flops() / (time * devices),
            compute_s,
            compute: self.compute_report(busiest),
            per_layer: if layers {
                self.layer_report(&map, eval.context)
            } else {
                Vec::new()
            },
            optimizer_step_s: busiest.update_s,
            communication: eval.comms,
            exposed_communication_s: eval.exposed_s,
            sparse_core_s: eval.sparse_s,
            pipeline_bubble_s: eval.bubble_s,
            mapping: map,
            mappings_tried,
            memory_per_device_bytes: memory.total_bytes(),
            memory_capacity_bytes: self.memory_capacity_bytes,
            bisection_bytes_per_s: None,
            serving_latency_s: graph.served.then_some(eval.serial_s),
            host_tables: self.host.clone(),
            weights_bytes: memory.weights_bytes,
            gradients_bytes: memory.gradients_bytes,
            optimizer_state_bytes: memory.optimizer_state_bytes,
            activations_bytes: memory.activations_bytes,
            gathered_bytes: memory.gathered_bytes,
            feasible: violations.is_empty(),
            violations,
        }
    }
}

/// Why an iteration's time is not finite, naming the collective that made it so when one
/// did and the fabrics that cannot send (`dead`): nothing such a prediction says can be
/// trusted.
pub(super) fn non_finite_time(
    time_s: f64,
    comms: &[CommReport],
    dead: &[String],
) -> Option<Violation> {
    if time_s.is_finite() {
        return None;
    }
    let mut why: Vec<String> = comms
        .iter()
        .find(|c| !c.time_s.is_finite())
        .map(|c| c.name.clone())
        .into_iter()
        .collect();
    if !dead.is_empty() {
        why.push(format!(
            "fabric {} cannot send: the accelerator's network has no bandwidth (no lanes, \
             or no power)",
            dead.join(", ")
        ));
    }
    let quantity = if why.is_empty() {
        "time per iteration".to_string()
    } else {
        format!("time per iteration ({})", why.join("; "))
    };
    Violation::unless_finite(&quantity, time_s)
}

/// The precision of `graph`'s matrix products (the one most of their FLOPs use) and its
/// dense throughput relative to the 16-bit peak (1 where the template does not list it).
pub(super) fn gemm_peak(graph: &Graph, throughput: &BTreeMap<Precision, f64>) -> (Precision, f64) {
    let mut flops: BTreeMap<Precision, f64> = BTreeMap::new();
    for k in graph.kernels.iter().filter(|k| k.is_matmul()) {
        *flops.entry(k.math).or_default() += k.flops() * k.count as f64;
    }
    let precision = flops
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(Precision::Bf16, |p| p.0);
    let relative = throughput
        .get(&precision)
        .copied()
        .filter(|r| *r > 0.0)
        .unwrap_or(1.0);
    (precision, relative)
}

/// Predicts one iteration of `workload` on `net` under `strategy`, on the best mapping of
/// its axes.
pub fn predict(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategy: &Strategy,
) -> Result<DistPrediction, FitError> {
    predict_with(workload, arch, net, strategy, &mut Workspace::new(arch))
}

/// What predictions of workloads on one architecture keep between them: kernel times
/// ([`Evaluator`]) and each workload's graph under each recomputation, by workload name.
/// Never changes a result; how a search over strategies or mappings predicts.
pub struct Workspace {
    pub(super) evaluator: Evaluator,
    graphs: Vec<(GraphKey, Arc<Graph>)>,
    /// Strategies planned: their stages' work, and their schedule's end with free
    /// communication by (interleave, GPipe), for the kernels' energy rates and the
    /// embedding engines of `planned_for` (the stage work's other inputs than the kernel
    /// times; the network's energy and the idle floor are not among them).
    plans: FxHashMap<PlanKey, (StagesWork, Vec<FreeEnd>)>,
    planned_for: Option<(EnergyRates, bool)>,
}

/// A workload's name, a recomputation override and the tables it keeps in host memory.
type GraphKey = (String, Option<Recompute>, Vec<u64>);

/// A workload's name, recomputation, host tables and [`Fitted::work_key`].
type PlanKey = (String, Option<Recompute>, Vec<u64>, Strategy, u64);

/// A schedule (interleave, GPipe) and its end with free communication.
type FreeEnd = ((u64, bool), f64);

impl Workspace {
    /// Graphs a workspace keeps before it starts over.
    const GRAPHS_KEPT: usize = 64;
    /// Planned strategies a workspace keeps before it starts over.
    const PLANS_KEPT: usize = 1024;

    pub fn new(arch: &Architecture) -> Workspace {
        Workspace {
            evaluator: Evaluator::new(arch),
            graphs: Vec::new(),
            plans: FxHashMap::default(),
            planned_for: None,
        }
    }

    /// Moves to another machine (that of the architecture it will plan on): forgets what
    /// depended on the machine (kernel times, planned strategies), keeps the graphs and the
    /// room its caches took.
    pub fn retarget(&mut self, machine: crate::perf::Machine) {
        self.evaluator.retarget(machine);
        self.plans.clear();
        self.planned_for = None;
    }

    /// `fitted` planned on `arch`, its stages' work and schedule end with free
    /// communication reused when a strategy with the same work was planned before.
    fn plan(&mut self, workload: &Workload, fitted: Fitted, arch: &Architecture) -> Plan {
        debug_assert!(
            crate::perf::Machine::new(arch) == self.evaluator.machine,
            "a workspace plans on the machine it was built for"
        );
        let (rates, sparse) = (EnergyRates::of(arch), arch.core.sparse_cores > 0);
        let same = self
            .planned_for
            .as_ref()
            .is_some_and(|(r, s)| *s == sparse && r.prices_kernels_as(&rates));
        if !same {
            self.plans.clear();
            self.planned_for = Some((rates.clone(), sparse));
        }
        let (work, f_tok) = fitted.work_key();
        let key = (
            workload.name(),
            fitted.strategy.recompute,
            workload.host_tables().to_vec(),
            work,
            f_tok,
        );
        if !self.plans.contains_key(&key) {
            if self.plans.len() >= Self::PLANS_KEPT {
                self.plans.clear();
            }
            let stages = fitted.stages_work_at(&rates, sparse, &mut self.evaluator);
            self.plans.insert(key.clone(), (stages, Vec::new()));
        }
        let (stages, ends) = self.plans.get_mut(&key).expect("inserted above");
        let schedule = (fitted.strategy.interleave, fitted.strategy.gpipe);
        let free_end_s = match ends.iter().find(|e| e.0 == schedule) {
            Some(e) => e.1,
            None => {
                let end = fitted.free_end_s(stages);
                ends.push((schedule, end));
                end
            }
        };
        let stages = stages.clone();
        fitted.plan_ended(arch, rates, stages, free_end_s)
    }

    /// The machine whose kernel times it keeps (equal machines share them exactly).
    pub fn machine(&self) -> &crate::perf::Machine {
        &self.evaluator.machine
    }

    pub(super) fn graph(
        &mut self,
        workload: &Workload,
        recompute: Option<Recompute>,
    ) -> Arc<Graph> {
        let key = (workload.name(), recompute, workload.host_tables().to_vec());
        if let Some((_, g)) = self.graphs.iter().find(|(k, _)| *k == key) {
            return g.clone();
        }
        if self.graphs.len() >= Self::GRAPHS_KEPT {
            self.graphs.clear();
        }
        let g = Arc::new(workload.graph_with(recompute));
        self.graphs.push((key, g.clone()));
        g
    }
}

/// [`predict`] with the kernel times and graphs `workspace` keeps from earlier predictions
/// on the same architecture.
pub fn predict_with(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategy: &Strategy,
    workspace: &mut Workspace,
) -> Result<DistPrediction, FitError> {
    let plan = Plan::with(workload, arch, net, strategy, workspace)?;
    let mut p = plan
        .best_mapping(net, f64::INFINITY)
        .expect("without a bound to beat a mapping is priced");
    p.bisection_bytes_per_s = Some(net.bisection_bytes_per_s());
    Ok(p)
}

/// Prices `workload` under `strategy` with its used axes laid onto the devices in `order`,
/// innermost first (one mapping: no search over orderings; `parallel::mapping::orderings`
/// lists the candidates).
pub fn evaluate(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategy: &Strategy,
    order: &[Axis],
) -> Result<DistPrediction, FitError> {
    evaluate_with(
        workload,
        arch,
        net,
        strategy,
        order,
        &mut Workspace::new(arch),
    )
}

/// [`evaluate`] with `workspace` (see [`predict_with`]).
pub fn evaluate_with(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategy: &Strategy,
    order: &[Axis],
    workspace: &mut Workspace,
) -> Result<DistPrediction, FitError> {
    let plan = Plan::with(workload, arch, net, strategy, workspace)?;
    let map = place_cached(
        net,
        strategy,
        order,
        plan.needs_all_devices(),
        &mut Vec::new(),
    );
    let mut p = plan.evaluate(&map);
    p.bisection_bytes_per_s = Some(net.bisection_bytes_per_s());
    Ok(p)
}
