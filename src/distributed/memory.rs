//! Memory of the fullest device (Megatron's accounting, ZeRO stages 1-3, MAD Max Sec. 4):
//! its shard of the weights, gradients and optimizer state, embedding tables sharded over
//! every device, the activations of the micro-batches in flight under the schedule (with
//! the layer full recomputation rebuilds), and ZeRO-3's gathered layers.
//!
//! Left out: ZeRO-1/2's gradient buckets before their reduce-scatter, and the attention
//! core selective recomputation rebuilds during a layer's backward (5 a s^2 b / t).

use super::fit::Fit;
use super::work::StageWork;
use crate::generator::Architecture;
use crate::parallel::strategy::Strategy;
use crate::violation::Violation;

/// Bytes one device of the fullest stage holds, and the weight shares the timeline needs.
#[derive(Clone)]
pub(super) struct Footprint {
    pub(super) weights_bytes: f64,
    pub(super) gradients_bytes: f64,
    pub(super) optimizer_state_bytes: f64,
    pub(super) activations_bytes: f64,
    /// ZeRO-3's working set: the layer it gathers whole to run (and the next, prefetched)
    /// and that layer's whole gradient, held until its reduce-scatter.
    pub(super) gathered_bytes: f64,
    /// Parameters of the fullest stage held by one device before ZeRO-3 sharding.
    pub(super) stage_parameters: f64,
    /// The experts' part of `stage_parameters`.
    pub(super) expert_parameters: f64,
    /// Bytes per weight, and per weight gradient.
    pub(super) bytes_per_weight: f64,
    pub(super) bytes_per_gradient: f64,
    /// Embedding tables over all devices, and their optimizer state.
    pub(super) tables_bytes: f64,
    pub(super) table_state_bytes: f64,
}

impl Footprint {
    pub(super) fn total_bytes(&self) -> f64 {
        self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_state_bytes
            + self.activations_bytes
            + self.gathered_bytes
    }

    /// Adds what a device holds for another part of the model (a layer type split its own
    /// way, on the same devices).
    pub(super) fn add(&mut self, other: &Footprint) {
        self.weights_bytes += other.weights_bytes;
        self.gradients_bytes += other.gradients_bytes;
        self.optimizer_state_bytes += other.optimizer_state_bytes;
        self.activations_bytes += other.activations_bytes;
        // A layer's parts of each type are gathered together (a transformer layer's
        // attention and feed-forward), each its mean per layer: as one strategy prices them.
        self.gathered_bytes += other.gathered_bytes;
        self.stage_parameters += other.stage_parameters;
        self.expert_parameters += other.expert_parameters;
        self.tables_bytes += other.tables_bytes;
        self.table_state_bytes += other.table_state_bytes;
    }

    /// The experts' share of a stage's weights (0 without expert parallelism).
    pub(super) fn expert_share(&self, s: &Strategy) -> f64 {
        if self.stage_parameters > 0.0 && s.expert > 1 {
            self.expert_parameters / self.stage_parameters
        } else {
            0.0
        }
    }
}

/// The footprint of the fullest device of `stages` under `s`: each stage's weights,
/// gradients, optimizer state, activations in flight and ZeRO-3 gathers, the stage with the
/// most in all (its components reported; the first stage on a tie).
pub(super) fn footprint(fit: &Fit, s: &Strategy, stages: &[StageWork], devices: u64) -> Footprint {
    let graph = &fit.graph;
    let p = s.pipeline;
    let model_shard = s.weight_shards() as f64;
    // ZeRO shards over the shard group (hybrid sharding) or every replica, with the
    // context-parallel ranks (which hold the same weights).
    let weight_replicas = (s.gradient_replicas() / (s.data / s.shard_group())) as f64;
    let (bytes, gradient_bytes) = (
        graph.precisions.weights.bytes(),
        graph.precisions.gradients.bytes(),
    );
    let (opt_state, optimizer) = (graph.optimizer_state_per_parameter_bytes, graph.trains);
    // Experts are split over the expert-parallel group, not the model-parallel one.
    let expert_stage = graph.expert_parameters / p as f64;
    let expert_params = expert_stage / (s.expert * s.tensor) as f64;
    // A stage's parameters on one device before ZeRO-3 sharding; the adapters' rank-thin
    // matrices that tensor parallelism keeps whole on every rank are not split.
    let whole = |st: &StageWork| graph.adapters_in(st.layers, s.kernel.is_none()).1;
    let held = |st: &StageWork| {
        (st.parameters - expert_stage - whole(st)) / model_shard + whole(st) + expert_params
    };
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
    let sparse = tables / devices as f64;
    let activations = stage_activations(fit, s, stages);
    // Per stage: weights, gradients (frozen weights have none), optimizer state (the
    // tables' beside their rows), activations.
    // ZeRO-3 gathers a layer's weights whole before it runs (the next one too where it
    // prefetches and there is a next: DeepSpeed's and FSDP's working set) and holds its
    // trained weights' whole gradient until the reduce-scatter: a stage's mean layer of
    // what the device holds, of the parts ZeRO shards (dense weights over their replicas,
    // experts over theirs; a part held whole is already counted).
    let unsharded = |dense: f64, experts: f64, st: &StageWork| {
        if z < 3 {
            return 0.0;
        }
        let dense = if weight_replicas > 1.0 { dense } else { 0.0 };
        let experts = if expert_replicas > 1.0 { experts } else { 0.0 };
        (dense + experts) / st.layers.max(1) as f64
    };
    let gathered = |st: &StageWork| unsharded(held(st) - expert_params, expert_params, st);
    let gathered_trained =
        |st: &StageWork| unsharded(st.trained - st.trained_experts, st.trained_experts, st);
    let in_flight = |st: &StageWork| {
        if s.prefetch && st.layers > 1 {
            2.0
        } else {
            1.0
        }
    };
    let of = |(st, act): (&StageWork, f64)| -> [f64; 5] {
        let (gradients, gathered_gradient) = if optimizer {
            (
                sharded(2, st.trained, st.trained_experts) * gradient_bytes,
                gathered_trained(st) * gradient_bytes,
            )
        } else {
            (0.0, 0.0)
        };
        [
            sharded(3, held(st), expert_params) * bytes + sparse,
            gradients,
            sharded(1, st.trained, st.trained_experts) * opt_state
                + graph.table_state_bytes / devices as f64,
            act,
            in_flight(st) * gathered(st) * bytes + gathered_gradient,
        ]
    };
    let fullest = stages
        .iter()
        .zip(activations)
        .map(of)
        .reduce(|b, c| {
            if b.iter().sum::<f64>() >= c.iter().sum::<f64>() {
                b
            } else {
                c
            }
        })
        .unwrap_or([0.0; 5]);
    let [weights_bytes, gradients_bytes, optimizer_state_bytes, activations_bytes, gathered_bytes] =
        fullest;
    Footprint {
        weights_bytes,
        gradients_bytes,
        optimizer_state_bytes,
        activations_bytes,
        gathered_bytes,
        // The most any stage holds: what its ZeRO-3 gathers move.
        stage_parameters: stages.iter().map(held).fold(0.0, f64::max),
        expert_parameters: expert_params,
        bytes_per_weight: bytes,
        bytes_per_gradient: gradient_bytes,
        tables_bytes: tables,
        table_state_bytes: graph.table_state_bytes,
    }
}

/// Each stage's activations of the micro-batches it holds in flight (a context-parallel
/// rank keeps its share of the tokens'): its layers' share of a micro-batch's, times the
/// micro-batches in flight (never more than there are): GPipe all m; 1F1B p - i on stage i
/// (Narayanan et al. 2021); interleaved 1F1B with v chunks (2 (p - i - 1) + (v - 1) p + 1)
/// chunks of 1/v of the stage (Megatron-LM's warm-up plus one; on the first stage
/// Narayanan's p (1 + (p - 1) / (p v))); one without pipelining. Under full recomputation,
/// one layer's activations of one micro-batch besides, rebuilt for its backward.
fn stage_activations(fit: &Fit, s: &Strategy, stages: &[StageWork]) -> Vec<f64> {
    let (p, v, m) = (s.pipeline, s.interleave, fit.micro_batches as f64);
    let act = &fit.graph.memory;
    let tensor_split = s.activation_split();
    // A device's share of a micro-batch's bytes, of which `replicated` tensor parallelism
    // does not split (unless sequence parallelism does).
    let per_device = |all: f64, replicated: f64| {
        ((all - replicated) / tensor_split.0 + replicated / tensor_split.1) * fit.f_tok
            / s.context as f64
    };
    let whole = per_device(act.activations_bytes, act.replicated_activations_bytes);
    let layers = fit.graph.layers;
    // Full recomputation rebuilds one layer of one micro-batch during its backward.
    let rebuilt = per_device(act.rebuilt_bytes, act.rebuilt_replicated_bytes);
    stages
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let i = i as u64;
            let in_flight = if p == 1 {
                1.0
            } else if s.gpipe {
                m
            } else if v == 1 {
                ((p - i) as f64).min(m)
            } else {
                ((2 * (p - i - 1) + (v - 1) * p + 1) as f64 / v as f64).min(m)
            };
            let share = if layers > 0 {
                st.layers as f64 / layers as f64
            } else {
                1.0 / p as f64
            };
            // A stage that trains nothing runs no backward, and rebuilds nothing.
            let rebuilds = st.layers > 0 && st.trained > 0.0;
            whole * share * in_flight + if rebuilds { rebuilt } else { 0.0 }
        })
        .collect()
}

/// The architecture's own violations, then the tables beyond all devices' memory and the
/// fullest device beyond its own.
pub(super) fn violations(arch: &Architecture, memory: &Footprint, devices: u64) -> Vec<Violation> {
    let mut violations = arch.violations.clone();
    let all = arch.memory_capacity_bytes * devices as f64;
    let tables = memory.tables_bytes + memory.table_state_bytes;
    if tables > all {
        violations.push(Violation::TablesExceedSystem {
            tables_bytes: tables,
            with_optimizer_state: memory.table_state_bytes > 0.0,
            capacity_bytes: all,
            devices,
        });
    }
    let total = memory.total_bytes();
    if total > arch.memory_capacity_bytes {
        violations.push(Violation::OutOfMemory {
            needed_bytes: total,
            capacity_bytes: arch.memory_capacity_bytes,
            weights_bytes: memory.weights_bytes,
            gradients_bytes: memory.gradients_bytes,
            optimizer_state_bytes: memory.optimizer_state_bytes,
            activations_bytes: memory.activations_bytes,
            kv_cache_bytes: 0.0,
            gathered_bytes: memory.gathered_bytes,
        });
    }
    violations
}
