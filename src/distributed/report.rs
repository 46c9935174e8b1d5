//! What a distributed prediction reports: time, compute and communication per kind, memory,
//! energy, the mapping chosen and the typed violations.

use serde::Serialize;

use crate::domain::{Precision, Precisions};
use crate::network::collective::Collective;
use crate::parallel::strategy::ContextAttention;
use crate::parallel::{Axis, Mapping};
use crate::violation::Violation;
use crate::workload::{KernelClass, LayerType};

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

/// One stage's compute for one layer type over the iteration, by phase, and per repeated
/// layer of it (what a profiler shows for one layer of one micro-batch).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerTimes {
    pub stage: u64,
    pub layer: LayerType,
    /// Repeated layers of this type on the stage (0: the type is outside the repeated
    /// layers, e.g. the embedding, logits and loss).
    pub layers: u64,
    pub forward_s: f64,
    pub backward_s: f64,
    pub recompute_s: f64,
    /// Its kernels' own collectives (tensor, sequence, expert and kernel parallelism) over
    /// the iteration, each at its full time (before `tp=overlap` hides any).
    pub collectives_s: f64,
    /// One layer's forward and backward (with recomputation) for one micro-batch; 0 when
    /// `layers` is 0.
    pub per_layer_forward_s: f64,
    pub per_layer_backward_s: f64,
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
    /// How the context-parallel ranks exchange keys and values (the strategy's kind, or
    /// the cheaper under the mapping); `None` without context parallelism.
    pub context_attention: Option<ContextAttention>,
    pub devices: u64,
    pub micro_batches: u64,
    pub micro_batch: u64,
    pub time_per_iteration_s: f64,
    pub tokens_per_s: f64,
    /// Model FLOPs (no recomputation) per second over the devices' dense 16-bit peak.
    pub model_flops_utilization: f64,
    /// The precision of the workload's matrix products, and model FLOPs per second over the
    /// devices' dense peak in it (FP8 doubles the 16-bit peak on H100: its utilization is
    /// half the 16-bit one).
    pub gemm_precision: Precision,
    pub model_flops_utilization_at_precision: f64,
    /// Each tensor role's precision.
    pub precisions: Precisions,
    /// FLOPs actually executed (with recomputation) per device per second.
    pub achieved_flops_per_s_per_device: f64,
    pub compute_s: f64,
    pub compute: Vec<ComputeReport>,
    /// Every stage's compute per layer type, and per repeated layer.
    pub per_layer: Vec<LayerTimes>,
    /// The busiest stage's optimizer step (with ZeRO, its shard): with its per-layer times,
    /// `compute_s`.
    pub optimizer_step_s: f64,
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
    /// technology energies, bytes sent through network ports, the chip's floor (its
    /// measured idle power, else SRAM leakage, plus its active power while running).
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
    /// The network's bisection bandwidth, bytes per second each way
    /// ([`crate::network::Network::bisection_bytes_per_s`]); set by [`super::predict`] and
    /// [`super::evaluate`], absent from the reports a search prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisection_bytes_per_s: Option<f64>,
    /// A served model's latency for one batch: its lookups (on embedding engines or hosts),
    /// transfers and forward one after another. `time_per_iteration_s` is then the interval
    /// between batches, the lookups of the next running beside the forward of this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_latency_s: Option<f64>,
    /// The hosts' work on the embedding tables they keep in DDR (`None`: every table on the
    /// devices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_tables: Option<super::HostReport>,
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_state_bytes: f64,
    pub activations_bytes: f64,
    /// ZeRO-3's working set on top of the shards: the layer it gathers whole to run (the
    /// next too where it prefetches) and that layer's whole gradient until its
    /// reduce-scatter; 0 below ZeRO-3.
    pub gathered_bytes: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
}

impl DistPrediction {
    /// The largest part of the iteration: `compute` (the busiest stage's kernels),
    /// `communication` (collectives compute waits for) or `pipeline bubble`; `host tables`
    /// when the hosts' work on their tables paces the iteration. What a search
    /// lists as a strategy's binding and a study as its `bound_by`.
    pub fn binding(&self) -> &'static str {
        if self
            .host_tables
            .as_ref()
            .is_some_and(|h| h.time_s >= self.time_per_iteration_s)
        {
            return "host tables";
        }
        [
            (self.compute_s, "compute"),
            (self.exposed_communication_s, "communication"),
            (self.pipeline_bubble_s, "pipeline bubble"),
        ]
        .iter()
        .fold((f64::NEG_INFINITY, "compute"), |a, &(t, n)| {
            if t > a.0 {
                (t, n)
            } else {
                a
            }
        })
        .1
    }
}
