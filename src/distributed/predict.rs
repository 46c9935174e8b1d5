//! One training iteration on many devices: the super-graph of one device (its share of
//! every kernel, and the exact bytes of every collective and point-to-point transfer the
//! strategy adds), mapped onto the network under every axis ordering, scheduled, and the
//! best mapping kept.

use super::fit::FitError;
use super::report::{ComputeReport, DistPrediction};
use super::timeline::{evaluate, free_schedule_end, Eval};
use super::work::{stage_work, StageWork};
use crate::generator::Architecture;
use crate::network::collective::Collective;
use crate::network::Network;
use crate::parallel::mapping::{self, Mapping};
use crate::parallel::strategy::{KernelSplit, Strategy};
use crate::parallel::Axis;
use crate::perf::{EnergyRates, Evaluator};
use crate::violation::Violation;
use crate::workload::{optimizer_state_bytes, Phase, Split, Workload};

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
