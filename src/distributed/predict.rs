//! One training iteration on many devices: the super-graph of one device (its share of
//! every kernel, and the exact bytes of every collective and point-to-point transfer the
//! strategy adds), mapped onto the network under every axis ordering, scheduled, and the
//! best mapping kept.

use serde::Serialize;

use super::schedule::{self, Piece, StageSteps};
use crate::generator::Architecture;
use crate::network::collective::Collective;
use crate::network::Network;
use crate::parallel::mapping::{self, Mapping};
use crate::parallel::strategy::{KernelSplit, Strategy};
use crate::parallel::Axis;
use crate::perf::{EnergyRates, Evaluator};
use crate::violation::Violation;
use crate::workload::{
    optimizer_state_bytes, Graph, Kernel, KernelClass, Op, Phase, Position, Split, Workload,
};

/// One collective (or transfer) of the iteration, per device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommReport {
    pub name: String,
    pub collective: Collective,
    pub axis: Axis,
    /// Devices in the group.
    pub group: u64,
    /// Bytes of one call's message (the mean when calls differ, as gradient buckets do),
    /// and calls per iteration on the busiest stage.
    pub bytes: f64,
    pub calls: f64,
    /// Time of all calls, s.
    pub time_s: f64,
    /// Whether compute waits for it (tensor and kernel parallelism) or it runs beside
    /// compute on the communication stream.
    pub blocking: bool,
}

/// Compute time per kernel class on the busiest stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComputeReport {
    pub class: KernelClass,
    pub time_s: f64,
    /// The resource bounding most of that time.
    pub bound: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DistPrediction {
    pub workload: String,
    pub strategy: String,
    pub devices: u64,
    pub micro_batches: u64,
    pub micro_batch: u64,
    pub time_per_iteration_s: f64,
    pub tokens_per_s: f64,
    /// Model FLOPs (no recomputation) per second over the devices' dense 16-bit peak.
    pub model_flops_utilization: f64,
    /// FLOPs actually executed (with recomputation) per device per second.
    pub achieved_flops_per_s_per_device: f64,
    pub compute_s: f64,
    pub compute: Vec<ComputeReport>,
    pub communication: Vec<CommReport>,
    /// Iteration time beyond the same schedule with free communication.
    pub exposed_communication_s: f64,
    /// Compute of the busiest stage plus every collective of the first stage, one after
    /// the other (MAD Max Table 1's "serialized iteration time").
    pub serialized_time_s: f64,
    /// Exposed communication as a share of all communication time (MAD Max Table 1's
    /// "% communication exposed").
    pub exposed_communication_fraction: f64,
    /// Energy of the iteration on every device: compute and memory traffic from the
    /// technology energies, bytes sent through network ports, SRAM leakage.
    pub energy_j: f64,
    pub average_power_w: f64,
    pub joules_per_token: f64,
    /// Time the embedding engines (SparseCores) are busy per iteration: lookups, updates and
    /// their all-to-alls, beside the dense step; 0 without them.
    pub sparse_core_s: f64,
    /// Idle time of the busiest stage while the pipeline fills and drains.
    pub pipeline_bubble_s: f64,
    pub mapping: Mapping,
    pub mappings_tried: usize,
    pub memory_per_device_bytes: f64,
    pub memory_capacity_bytes: f64,
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_state_bytes: f64,
    pub activations_bytes: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
}

/// A strategy that does not fit the workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strategy {strategy} does not fit workload {workload}: {message}")]
pub struct FitError {
    pub strategy: String,
    pub workload: String,
    pub message: String,
}

/// A collective a kernel needs, per instance.
pub(super) struct Need {
    pub(super) collective: Collective,
    pub(super) axis: Axis,
    pub(super) bytes: f64,
}

/// What a graph without repeated layers does next in its backward step.
#[derive(Debug, Clone, Copy)]
enum StepEvent {
    /// Kernel time, s.
    Compute(f64),
    /// The blocking collective `backward_needs[i]`.
    Need(usize),
    /// A weight's gradient is ready: its parameters (per device), and whether it is an
    /// expert's (synchronised among the expert's replicas).
    Gradient(f64, bool),
    /// The next kernel reads a weight: its parameters (per device). Under ZeRO-3 the
    /// weight is gathered first. Whether it is an expert's.
    Weight(f64, bool),
}

impl StageWork {
    /// The experts' fraction of the weights this stage trains.
    fn expert_share(&self) -> f64 {
        if self.trained > 0.0 {
            self.trained_experts / self.trained
        } else {
            0.0
        }
    }
}

/// One stage's work for one micro-batch, before communication costs.
#[derive(Default)]
pub(super) struct StageWork {
    pub(super) forward_s: f64,
    backward_s: f64,
    /// Blocking collectives, (kernel count x need).
    pub(super) forward_needs: Vec<(f64, Need)>,
    backward_needs: Vec<(f64, Need)>,
    by_class: Vec<(KernelClass, f64, String)>,
    /// Dense parameters held (before model-parallel sharding).
    pub(super) parameters: f64,
    update_s: f64,
    /// Graphs without repeated layers: the backward step in order, so that gradient
    /// buckets meet the blocking collectives they share a fabric with.
    backward_order: Vec<StepEvent>,
    forward_order: Vec<StepEvent>,
    /// Weights this stage trains, per device before data-parallel sharding: model-parallel
    /// shares, experts split over the expert group, frozen layers left out.
    trained: f64,
    /// The experts' part of `trained`: replicated d/e times, not d.
    trained_experts: f64,
    /// On embedding engines (SparseCores): lookup and update time of one micro-batch, and
    /// the all-to-alls they wait for.
    sparse_s: f64,
    sparse_needs: Vec<(f64, Need)>,
    /// Compute and memory energy of one micro-batch's forward and backward, and of the
    /// optimizer step, on one device of the stage.
    pub(super) step_j: f64,
    update_j: f64,
}

/// Predicts one iteration of `workload` on `net` under `strategy`.
pub fn predict(
    workload: &Workload,
    arch: &Architecture,
    net: &Network,
    strategy: &Strategy,
) -> Result<DistPrediction, FitError> {
    let fail = |message: String| FitError {
        strategy: strategy.to_string(),
        workload: workload.name(),
        message,
    };
    strategy
        .check_devices(net.devices)
        .map_err(|e| fail(e.message))?;
    if let Workload::Transformer(t) = workload {
        if t.inference.is_some() {
            return Err(fail(
                "a serving workload (inference:): use distributed::predict_inference".into(),
            ));
        }
    }
    let graph = match (workload, strategy.recompute) {
        (Workload::Transformer(t), Some(r)) => {
            let mut t = t.clone();
            t.recompute = r;
            Workload::Transformer(t).graph()
        }
        _ => workload.graph(),
    };
    let s = strategy;
    let (p, v) = (s.pipeline, s.interleave);
    if p > 1 {
        if graph.layers == 0 {
            return Err(fail(
                "the workload has no repeated layers to split into pipeline stages".into(),
            ));
        }
        if graph.layers % (p * v) != 0 {
            return Err(fail(format!(
                "{} layers do not split evenly into {p} stages x {v} chunks",
                graph.layers
            )));
        }
    }
    let has_tensor_split = graph
        .kernels
        .iter()
        .any(|k| matches!(k.split, Split::Column | Split::Row));
    if s.tensor > 1 && !has_tensor_split {
        return Err(fail(
            "tensor parallelism needs a transformer's column/row linear layers; use RC or CR \
             kernel parallelism"
                .into(),
        ));
    }
    if s.expert > 1 {
        let experts = match workload {
            Workload::Transformer(t) => t.moe.map_or(1, |m| m.experts),
            Workload::Dlrm(d) => d.moe.map_or(1, |m| m.experts),
            _ => 1,
        };
        if experts == 1 {
            return Err(fail(
                "the workload has no experts to spread (expert parallelism e > 1); give a \
                 transformer or a DLRM a moe: {experts, top_k} section"
                    .into(),
            ));
        }
        if s.kernel.is_some() {
            return Err(fail(
                "expert parallelism (e) splits experts with tensor parallelism (t), not with \
                 RC/CR kernel parallelism"
                    .into(),
            ));
        }
        if experts % s.expert != 0 {
            return Err(fail(format!(
                "{experts} experts do not split evenly over expert parallelism e{}",
                s.expert
            )));
        }
    }
    // Samples per replica and per micro-batch.
    let replicas = s.data;
    let samples = graph.samples.round() as u64;
    if samples % replicas != 0 {
        return Err(fail(format!(
            "a batch of {samples} samples does not split over {replicas} data-parallel replicas"
        )));
    }
    let per_replica = samples / replicas;
    let micro_batch = if s.micro_batch == 0 {
        per_replica
    } else {
        s.micro_batch
    };
    if per_replica % micro_batch != 0 {
        return Err(fail(format!(
            "{per_replica} samples per replica do not split into micro-batches of {micro_batch}"
        )));
    }
    let m = per_replica / micro_batch;
    if v > 1 && m % p != 0 {
        return Err(fail(format!(
            "the interleaved schedule needs the {m} micro-batches to be a multiple of the {p} stages"
        )));
    }
    let f_tok = micro_batch as f64 / graph.samples;

    let mut evaluator = Evaluator::new(arch);
    // Embedding engines beside the dense cores take the table lookups (TPU v4 Sec. 3.5).
    let sparse = arch.core.sparse_cores > 0;
    let rates = EnergyRates::of(arch);
    let stages: Vec<StageWork> = (0..p)
        .map(|stage| stage_work(&graph, s, stage, f_tok, &mut evaluator, &rates, sparse))
        .collect();

    // Memory on the fullest stage.
    let degrees = s.degrees();
    let model_shard = match s.kernel {
        Some(KernelSplit::Rc { kp2, .. }) => kp2,
        Some(KernelSplit::Cr { kp1 }) => kp1,
        None => s.tensor,
    } as f64;
    // Devices holding the same weight shard: the data replicas, and RC's row groups.
    let weight_replicas = (s.data * degrees[Axis::Kp1 as usize]) as f64
        / if matches!(s.kernel, Some(KernelSplit::Cr { .. })) {
            degrees[Axis::Kp1 as usize] as f64
        } else {
            1.0
        };
    let bytes = graph.kernels.first().map_or(2.0, |k| k.precision.bytes());
    let (opt_state, optimizer) = match workload {
        Workload::LstmLm(w) => (optimizer_state_bytes(w.optimizer, w.precision), true),
        Workload::Transformer(w) => (optimizer_state_bytes(w.optimizer, w.precision), true),
        Workload::Dlrm(w) => (optimizer_state_bytes(w.optimizer, w.precision), true),
        Workload::Gemm(_) => (0.0, false),
    };
    // Experts are split over the expert-parallel group, not the model-parallel one.
    let expert_stage = graph.expert_parameters / p as f64;
    let expert_params = expert_stage / (s.expert * s.tensor) as f64;
    let max_params = (stages.iter().map(|st| st.parameters).fold(0.0, f64::max) - expert_stage)
        / model_shard
        + expert_params;
    // ZeRO shards dense weights over their replicas, and an expert over its d/e replicas.
    let expert_replicas = weight_replicas / s.expert as f64;
    let z = s.zero;
    let shard_if = |stage: u8, replicas: f64| if z >= stage { replicas } else { 1.0 };
    let sharded = |stage: u8, all: f64, experts: f64| {
        (all - experts) / shard_if(stage, weight_replicas)
            + experts / shard_if(stage, expert_replicas)
    };
    // Sparse tables (recommendation models) are sharded over every device, evenly as a
    // sharding planner balances them (whole tables, or column- and row-wise shards).
    let tables = (graph.memory.weights_bytes
        - graph.parameters_by_position.iter().sum::<f64>() * bytes)
        .max(0.0);
    let sparse = tables / net.devices as f64;
    let weights_bytes = sharded(3, max_params, expert_params) * bytes + sparse;
    // Frozen weights (fine-tuning) have no gradients or optimizer state.
    let max_trained = |stage: u8| {
        stages
            .iter()
            .map(|st| sharded(stage, st.trained, st.trained_experts))
            .fold(0.0, f64::max)
    };
    let gradients_bytes = if optimizer {
        max_trained(2) * bytes
    } else {
        0.0
    };
    // The tables' optimizer state lives beside their rows.
    let optimizer_state_bytes =
        max_trained(1) * opt_state + graph.table_state_bytes / net.devices as f64;
    let act = &graph.memory;
    let tensor_split = match s.kernel {
        Some(KernelSplit::Rc { kp1, kp2 }) => ((kp1 * kp2) as f64, kp1 as f64),
        Some(KernelSplit::Cr { .. }) => (1.0, 1.0),
        None => (
            s.tensor as f64,
            if s.sequence_parallel {
                s.tensor as f64
            } else {
                1.0
            },
        ),
    };
    let per_micro_batch = ((act.activations_bytes - act.replicated_activations_bytes)
        / tensor_split.0
        + act.replicated_activations_bytes / tensor_split.1)
        * f_tok
        / p as f64;
    let in_flight = if s.gpipe || p == 1 {
        m as f64
    } else {
        (p as f64 * (1.0 + (p as f64 - 1.0) / (p * v) as f64)).min((m * v) as f64)
    };
    let in_flight = if p == 1 { 1.0 } else { in_flight };
    let activations_bytes = per_micro_batch * in_flight;
    let memory = weights_bytes + gradients_bytes + optimizer_state_bytes + activations_bytes;
    let mut violations = arch.violations.clone();
    let all = arch.memory_capacity_bytes * net.devices as f64;
    let state = graph.table_state_bytes;
    let tables = tables + state;
    if tables > all {
        violations.push(Violation::TablesExceedSystem {
            tables_bytes: tables,
            with_optimizer_state: state > 0.0,
            capacity_bytes: all,
            devices: net.devices,
        });
    }
    if memory > arch.memory_capacity_bytes {
        violations.push(Violation::OutOfMemory {
            needed_bytes: memory,
            capacity_bytes: arch.memory_capacity_bytes,
            weights_bytes,
            gradients_bytes,
            optimizer_state_bytes,
            activations_bytes,
            kv_cache_bytes: 0.0,
        });
    }

    // Every mapping; keep the fastest.
    let orders = mapping::orderings(s);
    // Only table-wise sharded embeddings talk to every device at once.
    let tables = graph.kernels.iter().any(|k| k.split == Split::Table);
    let mut best: Option<(f64, Mapping, Eval)> = None;
    let mut cache = Vec::new();
    let free_end = free_schedule_end(s, &stages, m);
    for order in &orders {
        let map = mapping::place_cached(net, s, order, tables, &mut cache);
        let mut eval = evaluate(
            &graph,
            s,
            &stages,
            &map,
            m,
            f_tok,
            max_params * bytes,
            if max_params > 0.0 && s.expert > 1 {
                expert_params / max_params
            } else {
                0.0
            },
            bytes,
            free_end,
        );
        eval.exposed_s = (eval.time_s - free_end).max(0.0);
        if best.as_ref().map_or(true, |b| eval.time_s < b.0) {
            best = Some((eval.time_s, map, eval));
        }
    }
    let (time, map, eval) = best.expect("at least one ordering");
    let busiest = stages
        .iter()
        .enumerate()
        .max_by(|a, b| {
            (a.1.forward_s + a.1.backward_s).total_cmp(&(b.1.forward_s + b.1.backward_s))
        })
        .map_or(0, |(i, _)| i);
    let model_flops: f64 = graph
        .kernels
        .iter()
        .filter(|k| k.phase != Phase::Recompute)
        .map(|k| k.flops() * k.count as f64)
        .sum();
    let executed = graph.flops();
    let mut compute: Vec<ComputeReport> = Vec::new();
    for (class, t, bound) in &stages[busiest].by_class {
        match compute.iter_mut().find(|c| c.class == *class) {
            Some(c) => c.time_s += t * m as f64,
            None => compute.push(ComputeReport {
                class: *class,
                time_s: t * m as f64,
                bound: bound.clone(),
            }),
        }
    }
    let compute_s =
        (stages[busiest].forward_s + stages[busiest].backward_s + stages[busiest].sparse_s)
            * m as f64
            + stages[busiest].update_s;
    let communication_s: f64 = eval.comms.iter().map(|c| c.time_s).sum();
    // Every stage's devices (devices / p of them) run its micro-batches and its update;
    // each device sends about the bytes of the first stage's collectives (all-reduce twice).
    let per_stage = net.devices as f64 / p as f64;
    let work_j: f64 = stages
        .iter()
        .map(|st| (st.step_j * m as f64 + st.update_j) * per_stage)
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
    let energy_j = work_j
        + sent * rates.link_j_per_byte * net.devices as f64
        + rates.leakage_w * time * net.devices as f64;
    Ok(DistPrediction {
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
        strategy: s.to_string(),
        devices: net.devices,
        micro_batches: m,
        micro_batch,
        time_per_iteration_s: time,
        tokens_per_s: graph.tokens / time,
        model_flops_utilization: model_flops / (time * net.devices as f64 * arch.peak_flops_per_s),
        achieved_flops_per_s_per_device: executed / (time * net.devices as f64),
        compute_s,
        compute,
        communication: eval.comms,
        exposed_communication_s: eval.exposed_s,
        sparse_core_s: eval.sparse_s,
        pipeline_bubble_s: eval.bubble_s,
        mapping: map,
        mappings_tried: orders.len(),
        memory_per_device_bytes: memory,
        memory_capacity_bytes: arch.memory_capacity_bytes,
        weights_bytes,
        gradients_bytes,
        optimizer_state_bytes,
        activations_bytes,
        feasible: violations.is_empty(),
        violations,
    })
}

/// Scales the token dimension of a kernel by `f` (a micro-batch's share of the batch).
fn scale_tokens(k: &mut Kernel, f: f64) {
    let shrink = |x: u64| ((x as f64 * f).ceil() as u64).max(1);
    match &mut k.op {
        Op::Gemm {
            batch, m, k: kk, ..
        } => {
            if *batch > 1 {
                *batch = shrink(*batch);
            } else if k.phase == Phase::BackwardWeight {
                *kk = shrink(*kk);
            } else {
                *m = shrink(*m);
            }
        }
        op => scale_stream(op, f),
    }
}

fn div(x: &mut u64, d: u64) {
    *x = x.div_ceil(d).max(1);
}

/// Multiplies a streaming or gather kernel's traffic and work by `factor`.
fn scale_stream(op: &mut Op, factor: f64) {
    match op {
        Op::Stream {
            read_bytes,
            write_bytes,
            flops,
        } => {
            *read_bytes *= factor;
            *write_bytes *= factor;
            *flops *= factor;
        }
        Op::Gather {
            read_bytes,
            write_bytes,
            ..
        } => {
            *read_bytes *= factor;
            *write_bytes *= factor;
        }
        Op::Gemm { .. } => {}
    }
}

/// Splits a kernel's work `d` ways: batched products by their batch, streams by bytes.
fn divide_stream(op: &mut Op, d: f64) {
    match op {
        Op::Gemm { batch, .. } => div(batch, d as u64),
        op => scale_stream(op, 1.0 / d),
    }
}

/// One device's share of kernel `k` (already scaled to a micro-batch) and the blocking
/// collectives it needs, per instance.
/// Splits `k` for one device under `s`: the collectives it needs, and by how much fewer
/// instances of it the device runs (expert parallelism: a device holds 1/e of the experts).
fn split_kernel(k: &mut Kernel, s: &Strategy) -> (Vec<Need>, u64) {
    let b = k.precision.bytes();
    let mut needs = Vec::new();
    let mut need = |collective, axis, bytes: f64| {
        needs.push(Need {
            collective,
            axis,
            bytes,
        })
    };
    let forward = matches!(k.phase, Phase::Forward | Phase::Recompute);
    if k.split == Split::Expert {
        // Each device keeps 1/e of the experts; each expert takes the routed tokens of the
        // e devices. Routed tokens go out (dispatch) before the first expert GEMM and come
        // back (combine) after the second, and their gradients likewise.
        // Tensor parallelism splits each expert's feed-forward width as Megatron splits a
        // dense one: partial sums over the width are all-reduced.
        let (e, t) = (s.expert, s.tensor);
        if let Op::Gemm { m, k: kk, n, .. } = &mut k.op {
            if k.phase == Phase::BackwardWeight {
                *kk *= e;
                if *m >= *n {
                    div(m, t);
                } else {
                    div(n, t);
                }
            } else {
                // The device's expert slots take m tokens from each of the e devices.
                *m *= e;
                need(
                    Collective::AllToAll,
                    Axis::Expert,
                    (*m * (*kk).min(*n)) as f64 * b,
                );
                if *kk > *n {
                    div(kk, t);
                    if t > 1 {
                        need(Collective::AllReduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                } else {
                    div(n, t);
                }
            }
        } else {
            divide_stream(&mut k.op, t as f64 / e as f64);
        }
        return (needs, e);
    }
    if k.split == Split::Table {
        // Each device looks up its share of the tables for the whole batch: the same bytes
        // as a replica's share of every table, split again over a model-parallel group;
        // the pooled outputs (forward) and their gradients (backward) cross all-to-all.
        let share = s.model_degree() as f64;
        if let Op::Gather {
            read_bytes,
            write_bytes,
            ..
        } = &k.op
        {
            let pooled = if forward {
                *write_bytes
            } else {
                *read_bytes - *write_bytes
            };
            need(Collective::AllToAll, Axis::Every, pooled / share);
        }
        divide_stream(&mut k.op, share);
        return (needs, 1);
    }
    let weight_gemm =
        matches!(k.op, Op::Gemm { batch: 1, .. }) && k.class != KernelClass::Attention;
    match s.kernel {
        Some(KernelSplit::Rc { kp1, kp2 }) => {
            if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm, &mut k.op) {
                match k.phase {
                    Phase::BackwardWeight => {
                        div(kk, kp1);
                        div(n, kp2);
                    }
                    Phase::BackwardInput => {
                        div(m, kp1);
                        div(kk, kp2);
                        need(Collective::AllReduce, Axis::Kp2, (*m * *n) as f64 * b);
                    }
                    _ => {
                        div(m, kp1);
                        div(n, kp2);
                        need(Collective::AllGather, Axis::Kp2, (*m * *n * kp2) as f64 * b);
                    }
                }
            } else {
                let d = match k.split {
                    Split::Sharded => kp1 * kp2,
                    _ => kp1,
                };
                divide_stream(&mut k.op, d as f64);
            }
        }
        Some(KernelSplit::Cr { kp1 }) => {
            if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm, &mut k.op) {
                match k.phase {
                    Phase::BackwardWeight => div(m, kp1),
                    Phase::BackwardInput => {
                        div(n, kp1);
                        need(Collective::AllGather, Axis::Kp1, (*m * *n * kp1) as f64 * b);
                    }
                    _ => {
                        div(kk, kp1);
                        need(Collective::AllReduce, Axis::Kp1, (*m * *n) as f64 * b);
                    }
                }
            }
        }
        None if s.tensor > 1 => {
            let t = s.tensor;
            let sp = s.sequence_parallel;
            let reduce = if sp {
                Collective::ReduceScatter
            } else {
                Collective::AllReduce
            };
            match (k.split, &mut k.op) {
                (Split::Column, Op::Gemm { m, k: kk, n, .. }) => match k.phase {
                    Phase::BackwardWeight => div(n, t),
                    Phase::BackwardInput => {
                        div(kk, t);
                        need(reduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                    _ => {
                        if sp {
                            need(Collective::AllGather, Axis::Tensor, (*m * *kk) as f64 * b);
                        }
                        div(n, t);
                    }
                },
                (Split::Row, Op::Gemm { m, k: kk, n, .. }) => match k.phase {
                    Phase::BackwardWeight => div(m, t),
                    Phase::BackwardInput => {
                        if sp {
                            need(Collective::AllGather, Axis::Tensor, (*m * *kk) as f64 * b);
                        }
                        div(n, t);
                    }
                    _ => {
                        div(kk, t);
                        need(reduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                },
                (Split::Sharded, op) => divide_stream(op, t as f64),
                (Split::Embedding, op) => {
                    if forward {
                        if let Op::Gather { write_bytes, .. } = op {
                            need(reduce, Axis::Tensor, *write_bytes);
                        }
                    }
                    divide_stream(op, t as f64);
                }
                (Split::Replicated, op) if sp => divide_stream(op, t as f64),
                _ => {}
            }
        }
        None => {}
    }
    (needs, 1)
}

pub(super) fn stage_work(
    graph: &Graph,
    s: &Strategy,
    stage: u64,
    f_tok: f64,
    evaluator: &mut Evaluator,
    rates: &EnergyRates,
    sparse_cores: bool,
) -> StageWork {
    let p = s.pipeline;
    let layer_params = graph.parameters_by_position[Position::Layer as usize];
    let mut w = StageWork {
        parameters: layer_params / p as f64,
        ..Default::default()
    };
    if stage == 0 {
        w.parameters += graph.parameters_by_position[Position::Head as usize];
    }
    if stage == p - 1 {
        w.parameters += graph.parameters_by_position[Position::Tail as usize];
    }
    let total_params: f64 = graph.parameters_by_position.iter().sum();
    let model_shard = s.model_degree() as f64;
    // Fine-tuning trains the last `trainable_layers` layers: this stage's share of them.
    let per_stage = graph.layers / p;
    let (first, last) = (stage * per_stage, (stage + 1) * per_stage);
    let lowest = graph.layers - graph.trainable_layers.min(graph.layers);
    let trained_layers = last.saturating_sub(first.max(lowest)).min(per_stage);
    let fine_tuning = graph.trainable_layers < graph.layers;
    {
        let layer = if graph.layers > 0 {
            layer_params / graph.layers as f64
        } else {
            0.0
        };
        let experts = graph.expert_parameters / graph.layers.max(1) as f64;
        let (mut trained, trained_experts) = if graph.layers > 0 {
            let spread = trained_layers as f64 * experts / s.expert as f64;
            (trained_layers as f64 * (layer - experts) + spread, spread)
        } else {
            (layer_params, graph.expert_parameters / s.expert as f64)
        };
        if stage == 0 && !fine_tuning {
            trained += graph.parameters_by_position[Position::Head as usize];
        }
        if stage == p - 1 {
            trained += graph.parameters_by_position[Position::Tail as usize];
        }
        if graph.layers == 0 {
            // Experts outside repeated layers (a DLRM's top MLP): 1/e of them here.
            trained -= graph.expert_parameters * (1.0 - 1.0 / s.expert as f64);
        }
        w.trained = trained / model_shard;
        // Without expert parallelism every device holds every expert, as a dense weight.
        if s.expert > 1 {
            w.trained_experts = trained_experts / model_shard;
        }
    }
    for kernel in &graph.kernels {
        let backward = matches!(
            kernel.phase,
            Phase::Recompute | Phase::BackwardInput | Phase::BackwardWeight
        );
        let count = match kernel.position {
            _ if kernel.phase == Phase::Update => 1,
            Position::Layer if backward && fine_tuning => {
                kernel.count / graph.trainable_layers.max(1) * trained_layers
            }
            Position::Layer => kernel.count / p,
            Position::Head if stage == 0 => kernel.count,
            Position::Tail if stage == p - 1 => kernel.count,
            _ => 0,
        };
        if count == 0 {
            continue;
        }
        let mut k = kernel.clone();
        if k.phase == Phase::Update {
            // The optimizer runs once per iteration on this stage's shard of the weights.
            // The graph's update kernel covers every trainable weight once; this device
            // updates its trained share of them.
            // ZeRO shards dense weights' state over the data group, an expert's over its
            // replicas.
            let (dense, experts) = (w.trained - w.trained_experts, w.trained_experts);
            let mine = if s.zero >= 1 {
                dense / s.data as f64 + experts * s.expert as f64 / s.data as f64
            } else {
                w.trained
            };
            let share = if total_params > 0.0 {
                mine / (total_params * graph.trainable_share)
            } else {
                0.0
            };
            scale_stream(&mut k.op, share);
            let t = evaluator.kernel(&k);
            let (c, m) = rates.kernel_j(&t);
            w.update_j += c + m.iter().sum::<f64>();
            w.update_s += t.time_s;
            continue;
        }
        scale_tokens(&mut k, f_tok);
        let (needs, fewer) = split_kernel(&mut k, s);
        let count = count / fewer.max(1);
        let t = evaluator.kernel(&k);
        let (c, m) = rates.kernel_j(&t);
        w.step_j += (c + m.iter().sum::<f64>()) * count as f64;
        let time = t.time_s * count as f64;
        let forward = matches!(k.phase, Phase::Forward);
        if sparse_cores && k.split == Split::Table {
            // SparseCores: the lookup (or its update) and the pooled all-to-all leave the
            // dense step.
            w.sparse_s += time;
            w.by_class.push((k.class, time, t.bound.to_string()));
            w.sparse_needs
                .extend(needs.into_iter().map(|n| (count as f64, n)));
            continue;
        }
        if forward {
            w.forward_s += time;
        } else {
            w.backward_s += time;
        }
        let bound = t.bound.to_string();
        w.by_class.push((k.class, time, bound));
        if graph.layers == 0 {
            let (order, first) = if forward {
                (&mut w.forward_order, w.forward_needs.len())
            } else {
                (&mut w.backward_order, w.backward_needs.len())
            };
            let weight = match (k.phase, &k.op) {
                _ if k.class == KernelClass::Attention => None,
                (Phase::Forward, Op::Gemm { k, n, batch: 1, .. }) => Some(*k * *n),
                (Phase::BackwardWeight, Op::Gemm { m, n, batch: 1, .. }) => Some(*m * *n),
                _ => None,
            };
            let expert = k.split == Split::Expert && s.expert > 1;
            if let Some(n) = weight {
                order.push(StepEvent::Weight(n as f64 * count as f64, expert));
            }
            // Pooled-embedding gradients arrive before the lookup's backward; other
            // kernels' collectives follow them.
            let needs_at = (first..first + needs.len()).map(StepEvent::Need);
            if k.split == Split::Table && !forward {
                order.extend(needs_at);
                order.push(StepEvent::Compute(time));
            } else {
                order.push(StepEvent::Compute(time));
                order.extend(needs_at);
            }
            if let (Some(n), Phase::BackwardWeight) = (weight, k.phase) {
                order.push(StepEvent::Gradient(n as f64 * count as f64, expert));
            }
        }
        let list = if forward {
            &mut w.forward_needs
        } else {
            &mut w.backward_needs
        };
        list.extend(needs.into_iter().map(|n| (count as f64, n)));
    }
    w
}

/// Prices collectives under one mapping and lists those of the reported stage.
struct Ledger<'a> {
    map: &'a Mapping,
    comms: Vec<CommReport>,
}

impl Ledger<'_> {
    /// [`Ledger::charge`] for `bytes` of `collective` split over `parts` (axis, fraction);
    /// the experts' part is listed as its own line.
    fn charge_parts(
        &mut self,
        name: &str,
        parts: &[(Axis, f64)],
        (collective, bytes): (Collective, f64),
        calls: f64,
        blocking: bool,
        report: Option<f64>,
    ) -> f64 {
        let mut t = 0.0;
        for &(axis, f) in parts.iter().filter(|p| p.1 > 0.0) {
            let need = Need {
                collective,
                axis,
                bytes: bytes * f,
            };
            t += if axis == Axis::ExpertReplica {
                self.charge(&format!("expert {name}"), &need, calls, blocking, report)
            } else {
                self.charge(name, &need, calls, blocking, report)
            };
        }
        t
    }

    /// Time of `calls` calls of `need`; with `report = Some(r)` they are also listed, as
    /// `calls x r` calls per iteration.
    fn charge(
        &mut self,
        name: &str,
        need: &Need,
        calls: f64,
        blocking: bool,
        report: Option<f64>,
    ) -> f64 {
        let link = self.map.link(need.axis);
        let t = link.time(need.collective, need.bytes) * calls;
        let Some(r) = report else { return t };
        if link.p <= 1 || calls <= 0.0 {
            return t;
        }
        let (calls, time_s) = (calls * r, t * r);
        match self
            .comms
            .iter_mut()
            .find(|c| c.name == name && c.collective == need.collective)
        {
            Some(c) => {
                // Calls of different sizes (gradient buckets): report the mean size.
                c.bytes = (c.bytes * c.calls + need.bytes * calls) / (c.calls + calls);
                c.calls += calls;
                c.time_s += time_s;
            }
            None => self.comms.push(CommReport {
                name: name.to_string(),
                collective: need.collective,
                axis: need.axis,
                group: link.p,
                bytes: need.bytes,
                calls,
                time_s,
                blocking,
            }),
        }
        t
    }
}

/// The per-fabric phases of `scale` calls of `need` under `map`.
fn need_phases(map: &Mapping, need: &Need, scale: f64) -> Vec<(usize, f64)> {
    let mut out = map.link(need.axis).phases(need.collective, need.bytes);
    out.iter_mut().for_each(|p| p.1 *= scale);
    out
}

/// Traffic the communication stream carries during a step: per weight, its share of
/// `bytes` through `collective`, a fraction over each of `axes` in turn (`expert_axes` for
/// an expert's weight).
struct StreamTraffic<'a> {
    bytes: f64,
    collective: Collective,
    axes: &'a [(Axis, f64)],
    expert_axes: &'a [(Axis, f64)],
}

/// The axes a weight's gradients (or ZeRO shards) travel, each with the fraction of the
/// bytes it carries: the experts' `experts` share goes among an expert's replicas instead
/// of the whole data group.
fn sync_parts(axes: &[Axis], experts: f64) -> Vec<(Axis, f64)> {
    let mut parts = Vec::with_capacity(axes.len() + 1);
    for &axis in axes {
        if axis == Axis::Data && experts > 0.0 {
            if experts < 1.0 {
                parts.push((Axis::Data, 1.0 - experts));
            }
            parts.push((Axis::ExpertReplica, experts));
        } else {
            parts.push((axis, 1.0));
        }
    }
    parts
}

/// The pieces of one step of a graph without repeated layers (`scale`: the step's share
/// of the recorded work). `gathers`: weights gathered before use (ZeRO-3), all handed over
/// at the start when prefetched, else just before the kernel; `gradients`: a bucket per
/// weight once its gradient is ready. Also returns the gradient buckets' bytes (and
/// whether each is an expert's).
fn step_pieces(
    order: &[StepEvent],
    needs: &[(f64, Need)],
    scale: f64,
    map: &Mapping,
    gathers: Option<(&StreamTraffic, bool)>,
    gradients: Option<&StreamTraffic>,
) -> (Vec<Piece>, Vec<(f64, bool)>) {
    let phases =
        |collective, axis, bytes| -> Vec<(usize, f64)> { map.link(axis).phases(collective, bytes) };
    let traffic = |t: &StreamTraffic, bytes: f64, expert: bool| -> Piece {
        Piece::Bucket(
            if expert { t.expert_axes } else { t.axes }
                .iter()
                .flat_map(|&(a, f)| phases(t.collective, a, bytes * f))
                .collect(),
        )
    };
    let total = |pick: fn(&StepEvent) -> f64| -> f64 { order.iter().map(pick).sum() };
    let weights = total(|e| match e {
        StepEvent::Weight(n, _) => *n,
        _ => 0.0,
    });
    let grads = total(|e| match e {
        StepEvent::Gradient(n, _) => *n,
        _ => 0.0,
    });
    let mut pieces = Vec::new();
    let mut handed = 0;
    let mut next_gather = 0;
    if let Some((g, true)) = gathers {
        for e in order {
            if let StepEvent::Weight(n, expert) = *e {
                pieces.push(traffic(g, g.bytes * n / weights, expert));
                handed += 1;
            }
        }
    }
    let mut buckets = Vec::new();
    for e in order {
        match *e {
            StepEvent::Compute(t) => pieces.push(Piece::Compute(t * scale)),
            StepEvent::Need(j) => {
                let (count, n) = &needs[j];
                pieces.push(Piece::Blocking(need_phases(map, n, count * scale)));
            }
            StepEvent::Weight(n, expert) => match gathers {
                Some((_, true)) => {
                    pieces.push(Piece::Await(next_gather));
                    next_gather += 1;
                }
                Some((g, false)) => {
                    pieces.push(traffic(g, g.bytes * n / weights, expert));
                    pieces.push(Piece::Await(handed));
                    handed += 1;
                }
                None => {}
            },
            StepEvent::Gradient(n, expert) => {
                if let Some(g) = gradients.filter(|_| grads > 0.0) {
                    let bytes = g.bytes * n / grads;
                    pieces.push(traffic(g, bytes, expert));
                    buckets.push((bytes, expert));
                    handed += 1;
                }
            }
        }
    }
    (pieces, buckets)
}

struct Eval {
    time_s: f64,
    sparse_s: f64,
    exposed_s: f64,
    bubble_s: f64,
    comms: Vec<CommReport>,
}

/// Schedules one iteration under one mapping.
#[allow(clippy::too_many_arguments)]
fn evaluate(
    graph: &Graph,
    s: &Strategy,
    stages: &[StageWork],
    map: &Mapping,
    m: u64,
    f_tok: f64,
    stage_param_bytes: f64,
    expert_param_share: f64,
    bytes: f64,
    free_end: f64,
) -> Eval {
    let p = s.pipeline as usize;
    let v = s.interleave as usize;
    let mut ledger = Ledger {
        map,
        comms: Vec::new(),
    };
    // Per stage and chunk: step durations with blocking collectives.
    let mut steps = Vec::with_capacity(p);
    let mut busiest_compute = 0.0f64;
    // Per stage: how long the last reduce-scatters outlast compute (ZeRO-3, weight by
    // weight).
    let mut tails = vec![0.0; p];
    for (i, st) in stages.iter().enumerate() {
        // The report lists the first stage's collectives, for all micro-batches.
        let report = (i == 0).then_some(m as f64);
        let mut blocking = |needs: &[(f64, Need)]| -> f64 {
            needs
                .iter()
                .map(|(count, n)| {
                    let label = format!("{} {}", n.axis.name(), n.collective.name());
                    ledger.charge(&label, n, *count, true, report)
                })
                .sum()
        };
        let fwd_comm = blocking(&st.forward_needs);
        let bwd_comm = blocking(&st.backward_needs);
        // FSDP (ZeRO-3): gather this stage's weights before each forward and backward
        // step and reduce-scatter its gradients after each backward. Prefetched gathers
        // run beside compute; just-in-time ones sit on the critical path.
        let (mut fwd, mut bwd) = (st.forward_s + fwd_comm, st.backward_s + bwd_comm);
        if s.zero >= 3 {
            // Every weight is gathered; only trained weights have gradients to scatter.
            // Experts travel among their replicas.
            let (gather_bytes, scatter_bytes) =
                (stage_param_bytes / v as f64, st.trained * bytes / v as f64);
            let gather_parts = sync_parts(&[Axis::Data], expert_param_share);
            let scatter_parts = sync_parts(&[Axis::Data], st.expert_share());
            let steps = (m * v as u64) as f64;
            let gather_s = ledger.charge_parts(
                "weight gather",
                &gather_parts,
                (Collective::AllGather, gather_bytes),
                2.0,
                !s.prefetch,
                report.map(|_| steps),
            ) / 2.0;
            let scatter_s = ledger.charge_parts(
                "gradient reduce-scatter",
                &scatter_parts,
                (Collective::ReduceScatter, scatter_bytes),
                1.0,
                false,
                report.map(|_| steps),
            );
            if graph.layers == 0 {
                // Weight by weight: each kernel waits for its gathered weight, and the
                // gathers and reduce-scatters share the fabric with blocking collectives.
                let (dense, experts) = (
                    sync_parts(&[Axis::Data], 0.0),
                    sync_parts(&[Axis::Data], 1.0),
                );
                let g = StreamTraffic {
                    bytes: gather_bytes,
                    collective: Collective::AllGather,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let r = StreamTraffic {
                    bytes: scatter_bytes,
                    collective: Collective::ReduceScatter,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let run = |order, needs, scatter| {
                    let gathers = Some((&g, s.prefetch));
                    let (pieces, _) = step_pieces(order, needs, 1.0, map, gathers, scatter);
                    schedule::shared_step(&pieces, 0.0, 0.0)
                };
                fwd = run(&st.forward_order, &st.forward_needs, None).end_s;
                let b = run(&st.backward_order, &st.backward_needs, Some(&r));
                // Reduce-scatters left over after a step hold up the next step's gathers
                // on the same stream; the last step's run past compute.
                let tail = (b.sync_end_s - b.end_s).max(0.0);
                bwd = b.end_s;
                if m > 1 {
                    bwd += tail;
                } else {
                    tails[i] = tail;
                }
            } else if s.prefetch {
                fwd = fwd.max(gather_s);
                bwd = bwd.max(gather_s + scatter_s);
            } else {
                fwd += gather_s;
                bwd = (bwd + gather_s).max(gather_s + scatter_s);
            }
        }
        busiest_compute = busiest_compute.max((st.forward_s + st.backward_s) * m as f64);
        steps.push(vec![
            StageSteps {
                forward_s: fwd / v as f64,
                backward_s: bwd / v as f64,
            };
            v
        ]);
    }
    // Activations handed between stages, per micro-batch.
    let sp_share = if s.sequence_parallel {
        s.tensor as f64
    } else {
        1.0
    };
    let boundary = graph.boundary_bytes * f_tok / sp_share;
    let transfer = map
        .link(Axis::Pipeline)
        .time(Collective::PointToPoint, boundary);
    if p > 1 {
        let calls = 2.0 * (m as f64) * v as f64;
        let need = Need {
            collective: Collective::PointToPoint,
            axis: Axis::Pipeline,
            bytes: boundary,
        };
        ledger.charge("pipeline activations", &need, calls, false, Some(1.0));
    }
    let timeline = schedule::simulate(&steps, m as usize, transfer, s.gpipe);
    // Gradient synchronisation per stage, bucket by bucket as the last backward step of
    // each chunk produces them (MAD Max Sec. 4.3: non-blocking, overlapped with backward).
    let layers_per_chunk = (graph.layers / (s.pipeline * s.interleave)).max(1) as usize;
    // Under ZeRO-3 the data group already reduce-scattered every micro-batch's gradients.
    let data_axes: Vec<Axis> = match (s.kernel, s.zero >= 3) {
        (Some(KernelSplit::Rc { .. }), false) => vec![Axis::Kp1, Axis::Data],
        (Some(KernelSplit::Rc { .. }), true) => vec![Axis::Kp1],
        (_, false) => vec![Axis::Data],
        (_, true) => vec![],
    };
    let grad_collective = if s.zero >= 2 {
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    let mut end = 0.0f64;
    let mut sparse_busy = 0.0f64;
    for (i, st) in stages.iter().enumerate() {
        let stage_bytes = st.trained
            * bytes
            * match s.kernel {
                Some(KernelSplit::Rc { kp1, .. }) => kp1 as f64,
                _ => 1.0,
            };
        let report = (i == 0).then_some(1.0);
        let mut comm_free = 0.0f64;
        let mut delay = 0.0;
        let phases = |need: &Need, scale: f64| need_phases(map, need, scale);
        let sync_axes = sync_parts(&data_axes, st.expert_share());
        let charge = |bytes: f64, ledger: &mut Ledger| {
            let need = (grad_collective, bytes);
            ledger.charge_parts("gradient sync", &sync_axes, need, 1.0, false, report);
        };
        let by_weight = st
            .backward_order
            .iter()
            .any(|e| matches!(e, StepEvent::Gradient(n, _) if *n > 0.0));
        for c in (0..v).rev() {
            if data_axes.is_empty() {
                break;
            }
            let (start, stop) = timeline.last_backward[i][c];
            let vf = v as f64;
            let pieces = if by_weight {
                // A bucket per weight, when its gradient is computed (DDP's order: last
                // layers first); an expert's among its replicas.
                let (dense, experts) = (sync_parts(&data_axes, 0.0), sync_parts(&data_axes, 1.0));
                let sync = StreamTraffic {
                    bytes: stage_bytes / vf,
                    collective: grad_collective,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let (pieces, buckets) = step_pieces(
                    &st.backward_order,
                    &st.backward_needs,
                    1.0 / vf,
                    map,
                    None,
                    Some(&sync),
                );
                for &(bytes, expert) in &buckets {
                    let parts = if expert { &experts } else { &dense };
                    let need = (grad_collective, bytes);
                    ledger.charge_parts("gradient sync", parts, need, 1.0, false, report);
                }
                pieces
            } else {
                // Layered graphs: a bucket per layer, layers spread evenly over the step.
                let l = layers_per_chunk as f64;
                let per_layer: Vec<(usize, f64)> = st
                    .backward_needs
                    .iter()
                    .flat_map(|(count, n)| phases(n, count / (vf * l)))
                    .collect();
                let bucket = stage_bytes / (vf * l);
                let bucket_phases: Vec<(usize, f64)> = sync_axes
                    .iter()
                    .flat_map(|&(axis, f)| map.link(axis).phases(grad_collective, bucket * f))
                    .collect();
                if !per_layer
                    .iter()
                    .any(|a| bucket_phases.iter().any(|b| a.0 == b.0))
                {
                    // Nothing meets on a fabric: each bucket leaves as its layer ends.
                    let layer = (stop - start) / l;
                    let send: f64 = bucket_phases.iter().map(|p| p.1).sum();
                    for j in 0..layers_per_chunk {
                        charge(bucket, &mut ledger);
                        comm_free = comm_free.max(start + layer * (j + 1) as f64) + send;
                    }
                    continue;
                }
                // The step's own length per layer (it may also hold ZeRO gathers): what
                // blocking collectives leave of it is compute.
                let blocking: f64 = per_layer.iter().map(|p| p.1).sum();
                let compute = ((stop - start) / l - blocking).max(st.backward_s / (vf * l));
                let mut pieces = Vec::with_capacity(3 * layers_per_chunk);
                for _ in 0..layers_per_chunk {
                    pieces.push(Piece::Compute(compute));
                    pieces.push(Piece::Blocking(per_layer.clone()));
                    pieces.push(Piece::Bucket(bucket_phases.clone()));
                    charge(bucket, &mut ledger);
                }
                pieces
            };
            let shared = schedule::shared_step(&pieces, start, comm_free);
            comm_free = shared.sync_end_s;
            delay += shared.delay_s;
        }
        let mut after = st.update_s;
        if s.zero >= 1 && s.zero < 3 {
            let parts = sync_parts(&[Axis::Data], st.expert_share());
            let need = (Collective::AllGather, stage_bytes);
            after += ledger.charge_parts("updated weights", &parts, need, 1.0, false, report);
        }
        end = end.max((timeline.end_s[i] + delay + tails[i]).max(comm_free) + after);
        // Embedding engines run lookups, updates and their all-to-alls beside the dense
        // step, a batch ahead (TPU v4 Fig. 10: the step takes the longer of the two).
        if st.sparse_s > 0.0 {
            let report = (i == 0).then_some(m as f64);
            let exchange: f64 = st
                .sparse_needs
                .iter()
                .map(|(count, n)| {
                    let label = format!("sparse-core {}", n.collective.name());
                    ledger.charge(&label, n, *count, false, report)
                })
                .sum();
            sparse_busy = sparse_busy.max(m as f64 * (st.sparse_s + exchange));
            end = end.max(sparse_busy);
        }
    }
    let busiest_update = stages.iter().map(|st| st.update_s).fold(0.0, f64::max);
    let busiest_sparse = stages.iter().map(|st| st.sparse_s).fold(0.0, f64::max) * m as f64;
    Eval {
        time_s: end,
        sparse_s: sparse_busy,
        exposed_s: 0.0,
        bubble_s: (free_end - (busiest_compute + busiest_update).max(busiest_sparse)).max(0.0),
        comms: ledger.comms,
    }
}

/// End of the iteration with every communication free: the schedule's compute alone.
fn free_schedule_end(s: &Strategy, stages: &[StageWork], m: u64) -> f64 {
    let v = s.interleave as usize;
    let free_steps: Vec<Vec<StageSteps>> = stages
        .iter()
        .map(|st| {
            vec![
                StageSteps {
                    forward_s: st.forward_s / v as f64,
                    backward_s: st.backward_s / v as f64,
                };
                v
            ]
        })
        .collect();
    let free = schedule::simulate(&free_steps, m as usize, 0.0, s.gpipe);
    stages
        .iter()
        .zip(&free.end_s)
        .map(|(st, e)| (e + st.update_s).max(st.sparse_s * m as f64))
        .fold(0.0, f64::max)
}
