//! Serving a transformer on many devices (MAD Max Sec. 2.3): tensor parallelism splits
//! every layer's weights, work and KV cache over `t` devices, with a blocking all-reduce
//! (or, under sequence parallelism, reduce-scatter and all-gather) after each row-parallel
//! layer; pipeline parallelism splits the layers over `p` stages that hand each token's
//! activations on; data parallelism runs `d` independent replicas, each serving its own
//! batch. The prefill gives the time to the first token; a decode step at the mean context
//! (one launch per stage, as captured CUDA graphs do) gives the time per output token.
//!
//! A pipelined replica keeps one batch in flight per stage, so that no stage idles while
//! another works: each batch still crosses every stage once per token, but the stages work
//! on different batches at once. The replica then holds `p` batches' KV caches, and its
//! slowest stage paces the cycle when the stages are not balanced.

use serde::Serialize;

use super::fit::FitError;
use super::work::{stage_work, StageWork};
use crate::generator::Architecture;
use crate::network::collective::Collective;
use crate::network::Network;
use crate::parallel::mapping::{self, Mapping};
use crate::parallel::Axis;
use crate::parallel::Strategy;
use crate::perf::{EnergyRates, Evaluator};
use crate::violation::Violation;
use crate::workload::inference::{
    decode_graph, kv_cache_bytes, mean_context, prefill_graph, InferenceSpec,
};
use crate::workload::{Graph, Transformer};

/// One replica's serving latency and the system's throughput.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DistInference {
    pub workload: String,
    pub strategy: String,
    pub devices: u64,
    pub spec: InferenceSpec,
    /// The prefill of one batch through every stage (the first batch in flight; the p-th
    /// waits for the p-1 prefills before it at the slowest stage).
    pub time_to_first_token_s: f64,
    /// One decode step of a batch: through every stage, or the slowest stage's turn over
    /// every batch in flight when that is longer.
    pub time_per_output_token_s: f64,
    /// Batches each replica keeps in flight: one per pipeline stage.
    pub batches_in_flight: u64,
    /// Output tokens per second of all `d` replicas together.
    pub tokens_per_s: f64,
    /// Blocking collectives and stage hand-offs inside those two times.
    pub prefill_communication_s: f64,
    pub decode_communication_s: f64,
    /// Energy of one replica serving its batches in flight (prefill and every decode step on
    /// all its devices: compute and memory traffic, bytes through network ports, leakage),
    /// per output token, and the system's average power.
    pub joules_per_token: f64,
    pub average_power_w: f64,
    pub mapping: Mapping,
    pub mappings_tried: usize,
    /// Per device on the fullest stage.
    pub weights_bytes: f64,
    pub kv_cache_bytes: f64,
    pub memory_per_device_bytes: f64,
    pub memory_capacity_bytes: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
}

/// Predicts serving `w` (its `inference:` batch per replica) on `net` under `s`.
pub fn predict_inference(
    w: &Transformer,
    spec: &InferenceSpec,
    arch: &Architecture,
    net: &Network,
    s: &Strategy,
) -> Result<DistInference, FitError> {
    let fail = |message: String| FitError {
        strategy: s.to_string(),
        workload: w.name.clone(),
        message,
    };
    s.check_devices(net.devices).map_err(|e| fail(e.message))?;
    if s.kernel.is_some() || s.zero > 0 || s.interleave > 1 || s.expert > 1 {
        return Err(fail(
            "serving splits a model by tensor (t), pipeline (p) and data (d) parallelism only; \
             drop RC/CR, ZeRO, interleaving and expert parallelism"
                .into(),
        ));
    }
    if w.layers % s.pipeline != 0 {
        return Err(fail(format!(
            "{} layers do not split evenly into {} stages",
            w.layers, s.pipeline
        )));
    }
    let p = s.pipeline;
    // One batch per stage in flight.
    let in_flight = p;
    let rates = EnergyRates::of(arch);
    let stages = |graph: &Graph, evaluator: &mut Evaluator| -> Vec<StageWork> {
        (0..p)
            .map(|stage| stage_work(graph, s, stage, 1.0, evaluator, &rates, false))
            .collect()
    };
    let prefill = prefill_graph(w, spec);
    let mut evaluator = Evaluator::new(arch);
    let prefill_stages = stages(&prefill, &mut evaluator);
    // Decode steps replay as one captured graph per stage: one launch each.
    let decode = decode_graph(w, spec, mean_context(spec));
    let launch = evaluator.machine.kernel_launch_s;
    let mut evaluator = Evaluator::new(arch);
    evaluator.machine.kernel_launch_s = 0.0;
    let decode_stages = stages(&decode, &mut evaluator);

    // Memory on the fullest stage: its weight shard and its share of the KV cache (split
    // over the stages' layers and over tensor-parallel ranks, one whole key/value head at
    // least per rank).
    let bytes = w.precision.bytes();
    let t = s.tensor as f64;
    let weights_bytes = prefill_stages
        .iter()
        .map(|st| st.parameters)
        .fold(0.0, f64::max)
        * bytes
        / t;
    let heads_per_rank = w.kv_heads.div_ceil(s.tensor) as f64;
    // Each stage keeps the caches of every batch in flight for its layers.
    let kv = kv_cache_bytes(w, spec.batch, spec.prompt_tokens + spec.output_tokens) / p as f64
        * heads_per_rank
        / w.kv_heads as f64
        * in_flight as f64;
    let memory = weights_bytes + kv;
    let mut violations = arch.violations.clone();
    if memory > arch.memory_capacity_bytes {
        violations.push(Violation::OutOfMemory {
            needed_bytes: memory,
            capacity_bytes: arch.memory_capacity_bytes,
            weights_bytes,
            gradients_bytes: 0.0,
            optimizer_state_bytes: 0.0,
            activations_bytes: 0.0,
            kv_cache_bytes: kv,
        });
    }

    // Every mapping; keep the one that serves the batches in flight fastest.
    let sp = if s.sequence_parallel { t } else { 1.0 };
    // Through every stage: (latency, its communication, the slowest stage's turn with its
    // hand-off).
    let latency = |map: &Mapping, stages: &[StageWork], graph: &Graph, launch: f64| {
        let hand_off = map
            .link(Axis::Pipeline)
            .time(Collective::PointToPoint, graph.boundary_bytes / sp);
        let (mut total, mut comm, mut slowest) = (0.0, 0.0, 0.0f64);
        for (i, st) in stages.iter().enumerate() {
            let mut c: f64 = st
                .forward_needs
                .iter()
                .map(|(count, n)| count * map.link(n.axis).time(n.collective, n.bytes))
                .sum();
            if i + 1 < stages.len() {
                c += hand_off;
            }
            let turn = st.forward_s + c + launch;
            total += turn;
            comm += c;
            slowest = slowest.max(turn);
        }
        (total, comm, slowest)
    };
    let orders = mapping::orderings(s);
    let mut cache = Vec::new();
    // (time for the batches in flight, mapping, (TTFT, its communication), (TPOT, its
    // communication)).
    type Best = (f64, Mapping, (f64, f64), (f64, f64));
    let mut best: Option<Best> = None;
    let k = in_flight as f64;
    for order in &orders {
        let map = mapping::place_cached(net, s, order, false, &mut cache);
        let (first, first_comm, first_slowest) = latency(&map, &prefill_stages, &prefill, 0.0);
        let (step, step_comm, step_slowest) = latency(&map, &decode_stages, &decode, launch);
        // The batches' prefills follow each other through the stages; then every batch
        // takes a decode step per cycle.
        let cycle = step.max(k * step_slowest);
        let fill = first + (k - 1.0) * first_slowest;
        let total = fill + spec.output_tokens.saturating_sub(1) as f64 * cycle;
        if best.as_ref().map_or(true, |b| total < b.0) {
            best = Some((total, map, (first, first_comm), (cycle, step_comm)));
        }
    }
    let (total, map, (ttft, prefill_comm), (tpot, decode_comm)) =
        best.expect("at least one ordering");
    // Energy of one replica's batches: each stage's t devices run its kernels; the bytes of
    // its collectives (all-reduce sends twice) and hand-offs cross network ports.
    let steps = spec.output_tokens.saturating_sub(1) as f64;
    let work_j: f64 = prefill_stages
        .iter()
        .zip(&decode_stages)
        .map(|(a, b)| (a.step_j + steps * b.step_j) * t * k)
        .sum();
    let sent = |stages: &[StageWork], graph: &Graph| -> f64 {
        let collectives: f64 = stages
            .iter()
            .flat_map(|st| &st.forward_needs)
            .map(|(count, n)| {
                let twice = if n.collective == Collective::AllReduce {
                    2.0
                } else {
                    1.0
                };
                count * n.bytes * twice * t
            })
            .sum();
        collectives + (p - 1) as f64 * graph.boundary_bytes / sp * t
    };
    let bytes_sent = (sent(&prefill_stages, &prefill) + steps * sent(&decode_stages, &decode)) * k;
    let replica = (s.tensor * p) as f64;
    let energy = work_j + bytes_sent * rates.link_j_per_byte + rates.leakage_w * total * replica;
    let tokens = (in_flight * spec.batch * spec.output_tokens) as f64;
    Ok(DistInference {
        workload: w.name.clone(),
        strategy: s.to_string(),
        devices: net.devices,
        spec: *spec,
        time_to_first_token_s: ttft,
        time_per_output_token_s: tpot,
        batches_in_flight: in_flight,
        tokens_per_s: s.data as f64 * tokens / total,
        prefill_communication_s: prefill_comm,
        decode_communication_s: decode_comm,
        joules_per_token: energy / tokens,
        average_power_w: energy / total * s.data as f64,
        mapping: map,
        mappings_tried: orders.len(),
        weights_bytes,
        kv_cache_bytes: kv,
        memory_per_device_bytes: memory,
        memory_capacity_bytes: arch.memory_capacity_bytes,
        feasible: violations.is_empty(),
        violations,
    })
}
