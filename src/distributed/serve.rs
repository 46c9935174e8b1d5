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
use crate::parallel::mapping::{best_placement, Mapping};
use crate::parallel::Axis;
use crate::parallel::Strategy;
use crate::perf::{EnergyRates, Evaluator};
use crate::violation::Violation;
use crate::workload::inference::{
    decode_graph, kv_cache_bytes, mean_context, prefill_graph, verify_graph, InferenceSpec,
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
    /// all its devices: compute and memory traffic, bytes through network ports, the idle
    /// floor),
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
    /// With speculative decoding: what a step costs and yields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeReport>,
    pub feasible: bool,
    pub violations: Vec<Violation>,
}

/// Speculative decoding's step: `tokens` draft steps and one verification yield
/// `expected_tokens` tokens on average, so a token takes `(tokens x draft_step_s +
/// verify_step_s) / expected_tokens` against the served model's own decode step; the
/// speed-up is their ratio, at most `expected_tokens` (the acceptance bound).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpeculativeReport {
    pub draft: String,
    pub tokens: u64,
    pub acceptance: f64,
    pub expected_tokens: f64,
    /// One draft decode step, one verification of `tokens + 1` positions, and the served
    /// model's plain decode step (each with the engine's host work per step).
    pub draft_step_s: f64,
    pub verify_step_s: f64,
    pub target_step_s: f64,
    pub speedup: f64,
}

/// Refuses what serving does not split (RC/CR, ZeRO, interleaving, experts, uneven stages)
/// and a training step's switches (recomputation, gradient and send timing, schedules,
/// micro-batches).
fn check(w: &Transformer, s: &Strategy, devices: u64) -> Result<(), FitError> {
    let fail = |message: String| FitError {
        strategy: s.to_string(),
        workload: w.name.clone(),
        message,
    };
    // The training step's switches: serving has no backward pass to recompute for, no
    // gradients to reduce, and no micro-batch schedule (a batch runs whole, stage after
    // stage).
    let training = [
        (s.recompute.is_some(), "rc= (activation recomputation)"),
        (!s.grad_overlap, "grad=after (the gradient all-reduce)"),
        (
            !s.send_overlap,
            "send=blocking (the pipeline schedule's sends)",
        ),
        (s.gpipe, "gpipe (the pipeline schedule)"),
        (s.micro_batch > 0, "mb (micro-batches)"),
    ];
    if let Some((_, what)) = training.iter().find(|(given, _)| *given) {
        return Err(fail(format!(
            "{what} concerns a training step; serving runs a batch's prefill and decode \
             steps whole: drop it"
        )));
    }
    s.check_devices(devices).map_err(|e| fail(e.message))?;
    if s.kernel.is_some() || s.zero > 0 || s.interleave > 1 || s.expert > 1 || s.context > 1 {
        return Err(fail(
            "serving splits a model by tensor (t), pipeline (p) and data (d) parallelism only; \
             drop RC/CR, ZeRO, interleaving, expert and context parallelism"
                .into(),
        ));
    }
    if s.tp_overlap {
        return Err(fail(
            "tp=overlap is priced for training steps; serving runs its tensor-parallel \
             collectives blocking"
                .into(),
        ));
    }
    if s.scatter_sends {
        return Err(fail(
            "p2p=scatter is priced for training pipelines; serving stages hand on whole \
             activations"
                .into(),
        ));
    }
    if w.layers % s.pipeline != 0 {
        return Err(fail(format!(
            "{} layers do not split evenly into {} stages",
            w.layers, s.pipeline
        )));
    }
    if w.speculative.is_some() && s.pipeline > 1 {
        return Err(fail(
            "speculative decoding is priced on replicas without pipeline stages (p = 1): a \
             draft and a verification alternate on the same devices"
                .into(),
        ));
    }
    Ok(())
}

/// A replica's prefill and decode step, each as per-stage work.
struct Work {
    prefill: Graph,
    prefill_stages: Vec<StageWork>,
    decode: Graph,
    decode_stages: Vec<StageWork>,
    /// Kernel launch time of one decode step per stage (one captured graph).
    launch_s: f64,
    /// The engine's host work per step (the template's `stack.step_overhead_us`).
    overhead_s: f64,
    /// Speculative decoding: the draft's own work and the verification step.
    speculative: Option<Box<SpecWork>>,
}

struct SpecWork {
    draft: Work,
    verify: Graph,
    verify_stages: Vec<StageWork>,
    tokens: u64,
    acceptance: f64,
    expected_tokens: f64,
    name: String,
}

impl Work {
    fn new(
        w: &Transformer,
        spec: &InferenceSpec,
        arch: &Architecture,
        s: &Strategy,
        rates: &EnergyRates,
    ) -> Work {
        let stages = |graph: &Graph, evaluator: &mut Evaluator| -> Vec<StageWork> {
            (0..s.pipeline)
                .map(|stage| stage_work(graph, s, stage, 1.0, evaluator, rates, false))
                .collect()
        };
        let prefill = prefill_graph(w, spec);
        let mut evaluator = Evaluator::new(arch);
        let prefill_stages = stages(&prefill, &mut evaluator);
        // Decode steps replay as one captured graph per stage: one launch each.
        let decode = decode_graph(w, spec, mean_context(spec));
        let launch_s = evaluator.machine.kernel_launch_s;
        let mut evaluator = Evaluator::new(arch);
        evaluator.machine.kernel_launch_s = 0.0;
        let decode_stages = stages(&decode, &mut evaluator);
        let speculative = w.speculative.as_ref().map(|sp| {
            let verify = verify_graph(w, spec, mean_context(spec), sp.tokens);
            let verify_stages = stages(&verify, &mut evaluator);
            Box::new(SpecWork {
                draft: Work::new(&sp.draft, spec, arch, s, rates),
                verify,
                verify_stages,
                tokens: sp.tokens,
                acceptance: sp.acceptance,
                expected_tokens: sp.expected_tokens(),
                name: sp.draft.name.clone(),
            })
        });
        Work {
            prefill,
            prefill_stages,
            decode,
            decode_stages,
            launch_s,
            overhead_s: arch.caps.step_overhead_s(),
            speculative,
        }
    }
}

/// Memory on the fullest stage: its weight shard and its share of the KV cache of every
/// batch in flight (split over the stages' layers and over tensor-parallel ranks, one whole
/// key/value head at least per rank). Returns (weights, KV cache) bytes and the violations.
fn memory(
    w: &Transformer,
    spec: &InferenceSpec,
    arch: &Architecture,
    s: &Strategy,
    work: &Work,
) -> (f64, f64, Vec<Violation>) {
    let p = s.pipeline;
    let in_flight = p;
    let t = s.tensor as f64;
    // The fullest stage's weights: the layers' at the weights' width, the embedding table
    // and output layer at `precision` under a weight-only integer format (FP8 weights are
    // all FP8, as `precision: fp8` holds them).
    let full = match w.weights {
        Some(f @ crate::domain::StorageFormat::Fp8) => f.bytes(),
        _ => w.precision.bytes(),
    };
    let narrow = match w.weights {
        Some(f) => f.bytes(),
        None => full,
    };
    let graph = &work.prefill;
    let layer_share = |st: &StageWork| {
        let all: f64 = graph.parameters_by_position.iter().sum();
        let layers = graph.parameters_by_position[crate::workload::Position::Layer as usize];
        if all > 0.0 && st.parameters > 0.0 {
            (layers * st.layers as f64 / graph.layers.max(1) as f64).min(st.parameters)
        } else {
            0.0
        }
    };
    // Adapters (LoRA) stay in precision; their rank-thin matrices kept whole on every
    // tensor rank are not split.
    let weights_bytes = work
        .prefill_stages
        .iter()
        .map(|st| {
            let (adapter, whole) = graph.adapters_in(st.layers, s.kernel.is_none());
            let layers = (layer_share(st) - adapter).max(0.0);
            (layers * narrow + (st.parameters - layers - whole) * full) / t + whole * full
        })
        .fold(0.0, f64::max);
    let heads_per_rank = w.kv_heads.div_ceil(s.tensor) as f64;
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
            gathered_bytes: 0.0,
        });
    }
    (weights_bytes, kv, violations)
}

/// Through every stage under `map`: (latency, its communication, the slowest stage's turn
/// with its hand-off). `sp`: the sequence-parallel share of a hand-off.
fn latency(
    map: &Mapping,
    stages: &[StageWork],
    graph: &Graph,
    launch: f64,
    sp: f64,
) -> (f64, f64, f64) {
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
}

/// A replica's batches in flight under one mapping.
struct Timing {
    /// Every batch's prefill and decode steps, s.
    total_s: f64,
    ttft_s: f64,
    prefill_comm_s: f64,
    tpot_s: f64,
    decode_comm_s: f64,
    /// Speculative decoding: (draft step, verification, the plain decode step), s.
    speculative: Option<(f64, f64, f64)>,
}

/// The batches' prefills follow each other through the stages; then every batch takes a
/// decode step per cycle, paced by the slowest stage when the stages are unbalanced.
fn timing(map: &Mapping, work: &Work, spec: &InferenceSpec, in_flight: f64, sp: f64) -> Timing {
    let (first, first_comm, first_slowest) =
        latency(map, &work.prefill_stages, &work.prefill, 0.0, sp);
    let (step, step_comm, step_slowest) =
        latency(map, &work.decode_stages, &work.decode, work.launch_s, sp);
    // The engine's host work, once per step of each batch in flight: its prefill, and each
    // decode step, whether the whole pass or the slowest stage's turns pace the cycle.
    let o = work.overhead_s;
    let (first, step) = (first + o, step + o);
    let cycle = step.max(in_flight * (step_slowest + o));
    let fill = first + (in_flight - 1.0) * (first_slowest + o);
    let plain = Timing {
        total_s: fill + spec.output_tokens.saturating_sub(1) as f64 * cycle,
        ttft_s: first,
        prefill_comm_s: first_comm,
        tpot_s: cycle,
        decode_comm_s: step_comm,
        speculative: None,
    };
    let Some(sw) = &work.speculative else {
        return plain;
    };
    // Unpipelined (checked): the draft prefills the prompt too; then each step is `tokens`
    // draft steps and one verification, yielding `expected_tokens` tokens.
    let (draft_first, draft_first_comm, _) =
        latency(map, &sw.draft.prefill_stages, &sw.draft.prefill, 0.0, sp);
    let (draft, draft_comm, _) = latency(
        map,
        &sw.draft.decode_stages,
        &sw.draft.decode,
        work.launch_s,
        sp,
    );
    let (verify, verify_comm, _) = latency(map, &sw.verify_stages, &sw.verify, work.launch_s, sp);
    let (draft, verify) = (draft + o, verify + o);
    let g = sw.tokens as f64;
    let per_token = (g * draft + verify) / sw.expected_tokens;
    let ttft = first + draft_first + o;
    Timing {
        total_s: ttft + spec.output_tokens.saturating_sub(1) as f64 * per_token,
        ttft_s: ttft,
        prefill_comm_s: first_comm + draft_first_comm,
        tpot_s: per_token,
        decode_comm_s: (g * draft_comm + verify_comm) / sw.expected_tokens,
        speculative: Some((draft, verify, cycle)),
    }
}

/// Energy of one replica's batches: each stage's t devices run its kernels; the bytes of
/// its collectives (all-reduce sends twice) and hand-offs cross network ports; every device
/// of the replica leaks for the whole time.
fn energy_j(
    work: &Work,
    spec: &InferenceSpec,
    s: &Strategy,
    rates: &EnergyRates,
    total_s: f64,
    sp: f64,
) -> f64 {
    let (p, t, k) = (s.pipeline, s.tensor as f64, s.pipeline as f64);
    let steps = spec.output_tokens.saturating_sub(1) as f64;
    let work_j: f64 = work
        .prefill_stages
        .iter()
        .zip(&work.decode_stages)
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
    let bytes_sent = (sent(&work.prefill_stages, &work.prefill)
        + steps * sent(&work.decode_stages, &work.decode))
        * k;
    let replica = (s.tensor * p) as f64;
    let (work_j, bytes_sent) = match &work.speculative {
        None => (work_j, bytes_sent),
        // Speculative (unpipelined): both prefills, then per token a share of the draft's
        // steps and of a verification in place of a decode step.
        Some(sw) => {
            let g = sw.tokens as f64;
            let per_token = |d: &[StageWork], v: &[StageWork]| -> f64 {
                (g * d.iter().map(|x| x.step_j).sum::<f64>()
                    + v.iter().map(|x| x.step_j).sum::<f64>())
                    / sw.expected_tokens
            };
            let prefill_j: f64 = work
                .prefill_stages
                .iter()
                .chain(&sw.draft.prefill_stages)
                .map(|x| x.step_j)
                .sum();
            let j =
                (prefill_j + steps * per_token(&sw.draft.decode_stages, &sw.verify_stages)) * t * k;
            let b = sent(&work.prefill_stages, &work.prefill)
                + sent(&sw.draft.prefill_stages, &sw.draft.prefill)
                + steps
                    * (g * sent(&sw.draft.decode_stages, &sw.draft.decode)
                        + sent(&sw.verify_stages, &sw.verify))
                    / sw.expected_tokens;
            (j, b * k)
        }
    };
    work_j + bytes_sent * rates.link_j_per_byte + rates.floor_w * total_s * replica
}

/// Predicts serving `w` (its `inference:` batch per replica) on `net` under `s`, on the
/// mapping that serves the batches in flight fastest.
pub fn predict_inference(
    w: &Transformer,
    spec: &InferenceSpec,
    arch: &Architecture,
    net: &Network,
    s: &Strategy,
) -> Result<DistInference, FitError> {
    check(w, s, net.devices)?;
    // One batch per stage in flight.
    let in_flight = s.pipeline;
    let rates = EnergyRates::of(arch);
    let work = Work::new(w, spec, arch, s, &rates);
    let (weights_bytes, kv, violations) = memory(w, spec, arch, s, &work);
    // A draft's weights and cache sit beside the model's.
    let (weights_bytes, kv, violations) = match (&work.speculative, &w.speculative) {
        (Some(sw), Some(sp)) => {
            let (dw, dkv, _) = memory(&sp.draft, spec, arch, s, &sw.draft);
            let (wb, kvb) = (weights_bytes + dw, kv + dkv);
            let mut v: Vec<Violation> = violations
                .into_iter()
                .filter(|v| !matches!(v, Violation::OutOfMemory { .. }))
                .collect();
            if wb + kvb > arch.memory_capacity_bytes {
                v.push(Violation::OutOfMemory {
                    needed_bytes: wb + kvb,
                    capacity_bytes: arch.memory_capacity_bytes,
                    weights_bytes: wb,
                    gradients_bytes: 0.0,
                    optimizer_state_bytes: 0.0,
                    activations_bytes: 0.0,
                    kv_cache_bytes: kvb,
                    gathered_bytes: 0.0,
                });
            }
            (wb, kvb, v)
        }
        _ => (weights_bytes, kv, violations),
    };
    let sp = if s.sequence_parallel {
        s.tensor as f64
    } else {
        1.0
    };
    let (map, time, tried) = best_placement(
        net,
        s,
        false,
        f64::INFINITY,
        |_| 0.0,
        |map| {
            let time = timing(map, &work, spec, in_flight as f64, sp);
            (time.total_s, time)
        },
    )
    .expect("without a bound every ordering is priced");
    let energy = energy_j(&work, spec, s, &rates, time.total_s, sp);
    let tokens = (in_flight * spec.batch * spec.output_tokens) as f64;
    let mut violations = violations;
    violations.extend(
        [
            ("time to first token (s)", time.ttft_s),
            ("time per output token (s)", time.tpot_s),
            ("energy per batch (J)", energy),
        ]
        .into_iter()
        .filter_map(|(q, v)| Violation::unless_finite(q, v)),
    );
    Ok(DistInference {
        workload: w.name.clone(),
        strategy: s.to_string(),
        devices: net.devices,
        spec: *spec,
        time_to_first_token_s: time.ttft_s,
        time_per_output_token_s: time.tpot_s,
        batches_in_flight: in_flight,
        tokens_per_s: s.data as f64 * tokens / time.total_s,
        prefill_communication_s: time.prefill_comm_s,
        decode_communication_s: time.decode_comm_s,
        joules_per_token: energy / tokens,
        average_power_w: energy / time.total_s * s.data as f64,
        mapping: map,
        mappings_tried: tried,
        weights_bytes,
        kv_cache_bytes: kv,
        memory_per_device_bytes: weights_bytes + kv,
        memory_capacity_bytes: arch.memory_capacity_bytes,
        speculative: match (&work.speculative, time.speculative) {
            (Some(sw), Some((draft, verify, target))) => Some(SpeculativeReport {
                draft: sw.name.clone(),
                tokens: sw.tokens,
                acceptance: sw.acceptance,
                expected_tokens: sw.expected_tokens,
                draft_step_s: draft,
                verify_step_s: verify,
                target_step_s: target,
                speedup: target / time.tpot_s,
            }),
            _ => None,
        },
        feasible: violations.is_empty(),
        violations,
    })
}
