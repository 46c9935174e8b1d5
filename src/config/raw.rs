//! Raw, unit-suffixed serde structs: exactly what the YAML files say, before validation.
//! Every struct denies unknown fields, so a misspelt key or a wrong unit suffix is an error.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::{
    AttentionKernel, Dataflow, EmbeddingOptimizer, Interaction, KernelSplitKind, LossKernel,
    McuShape, Optimizer, Positions, Precision, Recompute, Scope, Topology,
};

// ---------------------------------------------------------------- technology library

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TechFile {
    pub version: u32,
    /// Logic node this file describes (`N7`); absent for memory-only or link-only files.
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Other technology files merged into this one, relative to this file.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub compute: BTreeMap<String, ComputeTech>,
    #[serde(default)]
    pub sram: BTreeMap<String, SramTech>,
    #[serde(default)]
    pub dram: BTreeMap<String, DramTech>,
    #[serde(default)]
    pub links: BTreeMap<String, LinkTech>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoltageRaw {
    pub nominal_v: f64,
    pub threshold_v: f64,
    pub min_v: f64,
    pub max_v: f64,
    /// Velocity-saturation exponent of the alpha-power law; 2 when absent.
    #[serde(default)]
    pub alpha: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeTech {
    /// 16-bit multiply-accumulates per cycle of the component at nominal size.
    pub macs_per_cycle: f64,
    pub area_mm2: f64,
    pub power_w: f64,
    pub frequency_ghz: f64,
    pub voltage: VoltageRaw,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SramTech {
    pub area_per_bit_um2: f64,
    pub periphery_overhead: f64,
    pub bank_capacity_kib: f64,
    pub dynamic_energy_per_bit_fj: f64,
    pub static_power_per_bit_pw: f64,
    pub controller_area_per_bank_mm2: f64,
    pub controller_power_per_bank_mw: f64,
    pub crossbar_area_per_port_mm2: f64,
    pub latency_ns: f64,
    #[serde(default)]
    pub ports_per_bank: Option<u64>,
    #[serde(default)]
    pub port_width_bits: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DramTech {
    pub device_capacity_gib: f64,
    pub device_area_mm2: f64,
    pub links_per_device: u64,
    pub controller_phy_area_mm2: f64,
    pub energy_per_bit_pj: f64,
    pub static_power_per_bit_pw: f64,
    pub data_rate_gbps: f64,
    pub voltage: VoltageRaw,
    pub links_per_mm: f64,
    pub latency_ns: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkTech {
    pub energy_per_bit_pj: f64,
    pub area_per_lane_mm2: f64,
    pub lanes_per_mm: f64,
    pub data_rate_gbps: f64,
    /// Payload bits per line bit (line coding, FEC); 1 when absent.
    #[serde(default)]
    pub encoding_efficiency: Option<f64>,
    pub voltage: VoltageRaw,
    pub latency_ns: f64,
}

// ---------------------------------------------------------------- architecture template

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFile {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub compute: ComputeRaw,
    pub memory: Vec<MemoryLevelRaw>,
    pub package: PackageRaw,
    pub system: SystemRaw,
    /// What a software stack achieves over whole steps on this accelerator; no caps when
    /// absent.
    #[serde(default)]
    pub stack: Option<StackRaw>,
}

/// A template's `stack:` section: what a software stack achieves over whole steps.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackRaw {
    /// Share of the sustained matrix rate whole steps reach.
    #[serde(default)]
    pub compute_utilization: Option<f64>,
    /// Share of the FP8 matrix rate whole steps reach, where it differs from
    /// `compute_utilization`.
    #[serde(default)]
    pub fp8_compute_utilization: Option<f64>,
    /// Share of main memory's bandwidth whole steps reach.
    #[serde(default)]
    pub memory_utilization: Option<f64>,
    /// Share of main memory's bandwidth products (GEMMs) reach where their operands stream
    /// from it, where it differs from `memory_utilization`.
    #[serde(default)]
    pub product_memory_utilization: Option<f64>,
    /// A serving engine's host work per step the device waits on (scheduling, sampling,
    /// input preparation), microseconds; none when absent.
    #[serde(default)]
    pub step_overhead_us: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeRaw {
    pub technology: String,
    pub mcu: McuShape,
    pub dataflow: Dataflow,
    pub max_utilization: f64,
    pub mcus_per_bundle: u64,
    /// Dense throughput of each precision the compute units support, relative to the 16-bit
    /// peak the MCU shape defines. `fp32` is also the rate of element-wise (vector) work.
    pub throughput_by_precision: BTreeMap<Precision, f64>,
    /// Operand block (rows x cols) one matrix instruction reads from the innermost memory
    /// level: Nx x Ny of DeepFlow Eq. 5. The MCU's own shape when absent.
    #[serde(default)]
    pub operand_tile: Option<OperandTile>,
    /// Fixed cost of starting one kernel.
    pub kernel_launch_us: f64,
    /// Dedicated embedding engines beside the dense cores (TPU SparseCores); 0 when absent.
    #[serde(default)]
    pub sparse_cores: u64,
    /// The chip's measured idle power (die and memory), W; absent where none is published.
    #[serde(default)]
    pub idle_power_w: Option<f64>,
    /// Power the chip draws above idle whenever it runs a program, whatever its rates of
    /// work (clock tree, instruction issue, vector and scalar units, control), W; absent
    /// where nothing bounds it.
    #[serde(default)]
    pub active_power_w: Option<f64>,
    /// Share of the compute units a collective holds while it runs beside compute (`tp=overlap`);
    /// absent where none is published.
    #[serde(default)]
    pub collective_compute_share: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OperandTile {
    pub rows: u64,
    pub cols: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryLevelRaw {
    pub name: String,
    pub technology: String,
    pub scope: Scope,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageRaw {
    pub accelerators: u64,
    #[serde(default)]
    pub intra_package: Option<NetworkRaw>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemRaw {
    pub packages: u64,
    #[serde(default)]
    pub inter_package: Option<NetworkRaw>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRaw {
    pub technology: String,
    pub topology: Topology,
}

// ---------------------------------------------------------------- budgets

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetFile {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Template this budget is meant for, relative to this file.
    pub template: String,
    /// Technology file this budget is meant for, relative to this file.
    pub technology: String,
    pub area: AreaBudgetRaw,
    pub power: PowerBudgetRaw,
    pub perimeter: PerimeterBudgetRaw,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AreaBudgetRaw {
    /// Node (package share per accelerator: die plus memory devices) area.
    pub node_mm2: f64,
    /// Processor die area.
    pub chip_mm2: f64,
    pub breakdown: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PowerBudgetRaw {
    pub tdp_w: f64,
    pub breakdown: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerimeterBudgetRaw {
    /// Usable die shoreline; 4 * sqrt(chip area) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_mm: Option<f64>,
    pub breakdown: BTreeMap<String, f64>,
}

// ---------------------------------------------------------------- workloads

/// The two keys every workload file starts with; read first to pick the full schema.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkloadHeader {
    pub version: u32,
    pub kind: String,
}

/// Exactly `{version, kind: gemm, m, k, n, precision}`: C (m x n) = A (m x k) B (k x n).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmRaw {
    pub version: u32,
    pub kind: String,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub precision: Precision,
}

/// LSTM language model (DeepFlow Sec. 9): embedding, stacked LSTM layers, softmax over the
/// vocabulary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LstmRaw {
    pub version: u32,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub hidden: u64,
    /// Sequences per iteration.
    pub batch: u64,
    pub vocab: u64,
    pub layers: u64,
    pub sequence: u64,
    /// Gates per cell; 4 when absent.
    #[serde(default)]
    pub gates: Option<u64>,
    /// Width of the recurrent projection (LSTMP); none when absent.
    #[serde(default)]
    pub projection: Option<u64>,
    pub precision: Precision,
    /// Precision per tensor role, overriding what `precision` implies.
    #[serde(default)]
    pub precisions: Option<PrecisionsRaw>,
    #[serde(default)]
    pub optimizer: Optimizer,
}

/// A training workload's precision per tensor role (`precisions:`); each absent role keeps
/// what the workload's `precision` implies (see [`crate::domain::Precisions`]).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecisionsRaw {
    pub gemm_inputs: Option<Precision>,
    pub activations: Option<Precision>,
    pub communication: Option<Precision>,
    pub weights: Option<Precision>,
    pub gradients: Option<Precision>,
    pub optimizer_state: Option<Precision>,
}

/// Decoder-only transformer language model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerRaw {
    pub version: u32,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    /// Width of one attention head; hidden / heads when absent (then heads must divide
    /// hidden).
    #[serde(default)]
    pub head_dim: Option<u64>,
    /// Key/value heads (grouped-query attention); `heads` when absent.
    #[serde(default)]
    pub kv_heads: Option<u64>,
    pub ffn_hidden: u64,
    /// Gated feed-forward (SwiGLU: three matrices); false when absent.
    #[serde(default)]
    pub gated_ffn: bool,
    /// Attention and feed-forward side by side from one norm, their outputs summed into
    /// the residual (GPT-J, PaLM); false when absent.
    #[serde(default)]
    pub parallel_blocks: bool,
    pub sequence: u64,
    pub vocab: u64,
    /// Sequences per iteration.
    pub global_batch: u64,
    pub precision: Precision,
    /// Precision per tensor role in training, overriding what `precision` implies.
    #[serde(default)]
    pub precisions: Option<PrecisionsRaw>,
    #[serde(default)]
    pub recompute: Recompute,
    /// Input embedding and output logits share one matrix; false when absent.
    #[serde(default)]
    pub tie_embeddings: bool,
    /// How the attention core runs (`materialized` or `flash`); materialized when absent.
    #[serde(default)]
    pub attention: AttentionKernel,
    /// How the loss over the vocabulary runs in training (`fp32` or `fused`); fp32 when
    /// absent.
    #[serde(default)]
    pub loss: LossKernel,
    /// How token positions are encoded (`learned` or `rotary`); learned when absent.
    #[serde(default)]
    pub positions: Positions,
    /// Dropout probability in training (on the embeddings, the attention probabilities and
    /// both residual branches, as Megatron-LM and GPT-2/3); 0 when absent.
    #[serde(default)]
    pub dropout: Option<f64>,
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Serve instead of train: `{batch, prompt_tokens, output_tokens, speculative?}`.
    #[serde(default)]
    pub inference: Option<InferenceRaw>,
    /// Mixture of experts: the feed-forward of every layer is `experts` experts, each token
    /// routed to `top_k` of them (GShard, Switch Transformer).
    #[serde(default)]
    pub moe: Option<MoeRaw>,
    /// Fine-tune instead of pre-train: only the last `trainable_layers` layers (and the
    /// output head) learn; the rest are frozen.
    #[serde(default)]
    pub fine_tuning: Option<FineTuningRaw>,
    /// Low-rank adapters (LoRA, Hu et al. 2021) of rank `rank` on the projections
    /// `targets` names: training fine-tunes them with the base weights frozen; serving runs
    /// `adapters` distinct adapters over a batch (batched adapter products).
    #[serde(default)]
    pub lora: Option<LoraRaw>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FineTuningRaw {
    pub trainable_layers: u64,
}

/// `lora:`: adapters of rank `rank` on the projections `targets` names, in Megatron's
/// names (`linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2`) or Hugging Face PEFT's
/// (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraRaw {
    pub rank: u64,
    pub targets: Vec<String>,
    /// Serving: distinct adapters the batch's requests use, one each, evenly (default 1).
    #[serde(default)]
    pub adapters: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeRaw {
    pub experts: u64,
    pub top_k: u64,
    /// Expert buffer over the balanced share of tokens (Switch Transformer: 1.0-1.25).
    #[serde(default)]
    pub capacity_factor: Option<f64>,
}

/// Deep learning recommendation model (Naumov et al. 2019; MAD Max Sec. 3).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DlrmRaw {
    pub version: u32,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Samples per iteration.
    pub batch: u64,
    pub dense_features: u64,
    /// Output width of each bottom-MLP layer; the last must equal the embedding dimension.
    pub bottom_mlp: Vec<u64>,
    /// Output width of each top-MLP layer.
    pub top_mlp: Vec<u64>,
    pub embeddings: Vec<TableGroupRaw>,
    pub interaction: Interaction,
    /// Precision of the dense layers.
    pub precision: Precision,
    /// Precision per tensor role of the dense layers, overriding what `precision` implies.
    #[serde(default)]
    pub precisions: Option<PrecisionsRaw>,
    /// Precision of the embedding tables.
    pub embedding_precision: Precision,
    /// Precision of the pooled embeddings exchanged between devices (quantized
    /// communication); the tables' precision when absent.
    #[serde(default)]
    pub pooled_precision: Option<Precision>,
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Optimizer of the embedding tables, fused into their backward (state per row or per
    /// element, kept beside the tables); row-wise Adagrad when absent.
    #[serde(default)]
    pub embedding_optimizer: EmbeddingOptimizer,
    /// Transformer layers over the feature vectors (`interaction: transformer`; MAD Max
    /// Table 2's DLRM-Transformer variants).
    #[serde(default)]
    pub transformer: Option<FeatureTransformerRaw>,
    /// Mixture of experts in the top MLP (MAD Max Table 2's DLRM-MoE variants): the layer
    /// pair after the first top layer becomes `experts` copies, each sample routed to
    /// `top_k` of them.
    #[serde(default)]
    pub moe: Option<MoeRaw>,
    /// Serving instead of training: batches of queries through the forward pass only (the
    /// `inference:` block transformers have; a recommendation model has no tokens to
    /// generate, so it takes the batch alone).
    #[serde(default)]
    pub inference: Option<DlrmInferenceRaw>,
}

/// A recommendation model's `inference:` block.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DlrmInferenceRaw {
    /// Queries (samples) the whole system serves together.
    pub batch: u64,
}

/// Transformer feature interaction: the feature vectors are summed into `sequence` tokens,
/// projected to `hidden`, run through `layers` transformer layers, and flattened into the
/// top MLP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureTransformerRaw {
    pub layers: u64,
    pub sequence: u64,
    pub hidden: u64,
    pub heads: u64,
    pub ffn_hidden: u64,
}

/// A group of identical embedding tables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableGroupRaw {
    pub tables: u64,
    pub rows: u64,
    pub dim: u64,
    pub lookups_per_sample: u64,
}

// ---------------------------------------------------------------- strategies

/// Distributed-GEMM kernel parallelism of DeepFlow Sec. 3.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRaw {
    #[serde(rename = "type")]
    pub kind: KernelSplitKind,
    pub kp1: u64,
    pub kp2: Option<u64>,
}

/// A parallelism strategy file; absent keys mean 1 or off.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyRaw {
    pub version: Option<u32>,
    pub data: Option<u64>,
    pub tensor: Option<u64>,
    pub pipeline: Option<u64>,
    /// Context-parallel ranks splitting every sequence.
    pub context: Option<u64>,
    /// `ring` or `all_gather` (default: the cheaper under each mapping).
    pub context_attention: Option<String>,
    pub kernel: Option<KernelRaw>,
    pub micro_batch: Option<u64>,
    pub interleave: Option<u64>,
    /// `gpipe` or `1f1b` (the default).
    pub schedule: Option<String>,
    #[serde(default)]
    pub sequence_parallel: bool,
    pub recompute: Option<Recompute>,
    pub zero: Option<u64>,
    pub expert: Option<u64>,
    /// ZeRO-3: gather weights ahead of use (true, the default) or just in time.
    pub weight_prefetch: Option<bool>,
    /// ZeRO-3 hybrid sharding: data-parallel ranks per shard group (default: all).
    pub shard_group: Option<u64>,
    /// Data-parallel gradient synchronisation beside the backward pass (true, the default)
    /// or after it.
    pub gradient_overlap: Option<bool>,
    /// Pipeline sends beside compute (true, the default) or blocking.
    pub send_overlap: Option<bool>,
    /// Pipeline sends split over the tensor-parallel ranks and gathered on arrival (true)
    /// or sent whole by every rank (false, the default).
    pub scatter_sends: Option<bool>,
    /// Tensor-parallel collectives beside the linear layers (true) or blocking (false, the
    /// default).
    pub tensor_overlap: Option<bool>,
    /// Layers of the first and last pipeline stages; the stages between share the rest.
    #[serde(default)]
    pub stage_ends: Option<[u64; 2]>,
    /// The parallel axes' placement, innermost first (`[t, d, p]`); every ordering is
    /// tried when absent.
    #[serde(default)]
    pub order: Option<Vec<String>>,
}

// ---------------------------------------------------------------- systems

/// A system template: one accelerator design, replicated, joined by fabrics.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemFile {
    pub version: u32,
    pub name: String,
    pub description: Option<String>,
    /// Budget file of the accelerator, relative to this file (or `processor:`).
    #[serde(default)]
    pub accelerator: Option<String>,
    /// A processor pinned by its rates instead of a budget (a Calculon system).
    #[serde(default)]
    pub processor: Option<ProcessorRaw>,
    /// Device count used when the command line gives none.
    pub devices: Option<u64>,
    /// Moved to the accelerator template's `stack:` section (one device, one answer): read
    /// only to say so.
    #[serde(default)]
    pub compute_utilization: Option<f64>,
    #[serde(default)]
    pub memory_utilization: Option<f64>,
    /// Fabrics from the innermost (inside a node) to the outermost (between nodes).
    pub fabrics: Vec<FabricRaw>,
    /// The CPUs beside the accelerators, whose memory may hold embedding tables.
    #[serde(default)]
    pub host: Option<HostRaw>,
}

/// A processor given by its rates and the efficiency it achieves by operation size
/// (Calculon's `matrix`, `vector` and `mem1`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorRaw {
    /// Matrix units per precision.
    pub matrix: BTreeMap<Precision, UnitRaw>,
    /// The vector unit (element-wise work, norms, softmax, the optimizer).
    pub vector: UnitRaw,
    pub memory: PinnedMemoryRaw,
    /// Compute and memory time overlap (the roofline's maximum, the default) or add.
    #[serde(default = "overlap_on")]
    pub compute_memory_overlap: bool,
    #[serde(default)]
    pub kernel_launch_us: f64,
    /// Share of the processor a collective holds while it runs beside compute
    /// (`tp=overlap`; Calculon's `processor_usage`); absent where none is given.
    #[serde(default)]
    pub collective_compute_share: Option<f64>,
}

fn overlap_on() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitRaw {
    pub tflop_per_s: f64,
    /// `[GFLOP threshold, efficiency]` pairs, thresholds descending to 0: an operation of
    /// at least the threshold's size achieves the efficiency.
    pub efficiency_by_gflop: Vec<[f64; 2]>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedMemoryRaw {
    pub capacity_gib: f64,
    pub bandwidth_gb_per_s: f64,
    /// `[MB threshold (1e6 bytes), efficiency]` pairs, descending to 0.
    pub efficiency_by_mb: Vec<[f64; 2]>,
}

/// A system's CPU hosts: each host machine has `sockets` CPU sockets and carries
/// `devices` accelerators.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRaw {
    pub sockets: u64,
    pub devices: u64,
    pub memory_gib_per_socket: f64,
    pub memory_bandwidth_gb_per_s_per_socket: f64,
    /// Each accelerator's link to its host, each way.
    pub link_gb_per_s: f64,
    pub link_latency_us: f64,
    #[serde(default = "direct_transfers")]
    pub transfers: crate::domain::Transfers,
    #[serde(default = "auto_tables")]
    pub tables: crate::domain::TablePlacement,
    #[serde(default)]
    pub power_w_per_socket: Option<f64>,
}

fn direct_transfers() -> crate::domain::Transfers {
    crate::domain::Transfers::Direct
}

fn auto_tables() -> crate::domain::TablePlacement {
    crate::domain::TablePlacement::Auto
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricRaw {
    pub name: String,
    pub topology: Topology,
    /// Devices (or groups of the fabric inside) this fabric joins; the outermost fabric may
    /// leave it out to take whatever the device count leaves.
    pub size: Option<u64>,
    /// Take bandwidth and latency from the generated accelerator's network of this name
    /// (`intra_package` or `inter_package`).
    pub network: Option<String>,
    /// Or from a link family of the technology library, with this many lanes per device
    /// (both directions counted, as in the library).
    pub technology: Option<String>,
    pub lanes_per_device: Option<u64>,
    /// Pinned values override the derived ones.
    pub bandwidth_gb_per_s: Option<f64>,
    pub latency_us: Option<f64>,
    /// Share of the link bandwidth that transfers achieve on this fabric (protocol,
    /// synchronisation and scheduling losses of the collective library); 1 when absent.
    #[serde(default)]
    pub bandwidth_efficiency: Option<f64>,
    /// Fixed cost of one collective on this fabric (launch and synchronisation), beside
    /// its per-hop latency; 0 when absent.
    #[serde(default)]
    pub collective_latency_us: Option<f64>,
    /// How a direct fabric's members pass on others' traffic: `router` (hardware, the
    /// default) or `relay` (a hop a step, Zion). A switch or full mesh has no member
    /// between two others, so it changes nothing there (a study may sweep a ring's
    /// topology to a full mesh).
    #[serde(default)]
    pub forwarding: Option<crate::domain::Forwarding>,
    /// Which planes of a torus or mesh run a collective along both dimensions at once:
    /// `any` (the default) or `square` (XLA on TPUs); on a switch or full mesh it changes
    /// nothing.
    #[serde(default)]
    pub plane_collectives: Option<crate::domain::PlaneCollectives>,
    /// Slices are composed of whole blocks of this shape (TPU v4: 4x4x4 blocks joined by
    /// optical circuit switches into any 4i x 4j x 4k torus).
    #[serde(default)]
    pub block: Option<Vec<u64>>,
}

// ---------------------------------------------------------------- studies

/// A study: a base design and the axes of a sweep over it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub base: StudyBase,
    /// `predict`, `optimize` (budgets), `search` (strategy) or `both`.
    pub action: StudyAction,
    #[serde(default)]
    pub optimizer: Option<StudyOptimizer>,
    pub axes: Vec<StudyAxis>,
    #[serde(default)]
    pub plots: Vec<StudyPlot>,
}

/// The base point, files relative to the study file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyBase {
    pub system: String,
    /// The workload file (every action but `collective`).
    #[serde(default)]
    pub workload: Option<String>,
    /// The collective a `collective` study times.
    #[serde(default)]
    pub collective: Option<StudyCollective>,
    /// The slices an `availability` study schedules.
    #[serde(default)]
    pub availability: Option<StudyAvailability>,
    /// Accelerator budget replacing the system's.
    #[serde(default)]
    pub budget: Option<String>,
    #[serde(default)]
    pub devices: Option<u64>,
    /// Strategy string; pure data parallelism when absent.
    #[serde(default)]
    pub strategy: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyAction {
    Predict,
    Optimize,
    Search,
    Both,
    /// `search`, then each layer type's own split from the fastest uniform strategies
    /// (MAD Max Sec. 4, Fig. 8; `stackflow search --per-layer-type`).
    SearchPerLayerType,
    /// Times one collective over every device of the point's system (Zion Fig. 10, 14).
    Collective,
    /// The goodput of slices of a pod of blocks (TPU v4 Fig. 4).
    Availability,
}

/// The slices of an `availability` study: the pod, the slice size, how often a CPU host is
/// up, and whether optical circuit switches compose the slices or the cabling is static.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StudyAvailability {
    pub pod_chips: u64,
    pub slice_chips: u64,
    /// Probability that one CPU host is up (0.995).
    pub host_availability: f64,
    /// `ocs` (any blocks that are up) or `static` (fixed slices).
    pub switching: String,
}

/// The collective of a `collective` study: its pattern and what each device contributes.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StudyCollective {
    /// `all_reduce`, `all_to_all`, `all_gather` or `reduce_scatter`.
    pub kind: String,
    /// Each device's buffer, bytes (an all-to-all sends all but its own share of it).
    pub message_bytes: f64,
}

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StudyOptimizer {
    pub restarts: Option<u64>,
    pub steps: Option<u64>,
    pub seed: Option<u64>,
    /// What finishes each restart: `transfer` (default) or `none` (DeepFlow's optimizer).
    pub finish: Option<String>,
}

/// One axis: either a field (`system.`, `budget.`, `template.`, `workload.` or
/// `optimizer.` then its path) and the values it takes, or `edits`: per value, a mapping of
/// fields to the values they take together (an ablation's variants), with optional labels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyAxis {
    pub name: String,
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default, deserialize_with = "finite_values")]
    pub values: Option<Vec<serde_json::Value>>,
    #[serde(default, deserialize_with = "finite_edits")]
    pub edits: Option<Vec<std::collections::BTreeMap<String, serde_json::Value>>>,
    #[serde(default)]
    pub labels: Option<Vec<String>>,
}

/// A YAML value as JSON, refusing a non-finite number: JSON holds none, and serde_json would
/// turn `.nan` or `.inf` into `null`, which unsets the field an axis sets.
fn finite_json<E: serde::de::Error>(v: serde_yaml::Value) -> Result<serde_json::Value, E> {
    fn check<E: serde::de::Error>(v: &serde_yaml::Value) -> Result<(), E> {
        match v {
            serde_yaml::Value::Number(n) if n.as_f64().is_some_and(|x| !x.is_finite()) => {
                Err(E::custom(format!(
                    "{n} is not a finite number (expected a value the field takes)"
                )))
            }
            serde_yaml::Value::Sequence(items) => items.iter().try_for_each(check),
            serde_yaml::Value::Mapping(m) => m.values().try_for_each(check),
            // No field takes a tagged value (serde_json's reader refused them too).
            serde_yaml::Value::Tagged(t) => Err(E::custom(format!(
                "a tagged value ({}) is not a value a field takes",
                t.tag
            ))),
            _ => Ok(()),
        }
    }
    check(&v)?;
    serde_json::to_value(v).map_err(E::custom)
}

fn finite_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<serde_json::Value>>, D::Error> {
    let raw: Option<Vec<serde_yaml::Value>> = Deserialize::deserialize(d)?;
    raw.map(|vs| {
        vs.into_iter()
            .enumerate()
            .map(|(k, v)| {
                finite_json(v)
                    .map_err(|e: D::Error| serde::de::Error::custom(format!("[{k}]: {e}")))
            })
            .collect()
    })
    .transpose()
}

type Edits = Vec<std::collections::BTreeMap<String, serde_json::Value>>;

fn finite_edits<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Edits>, D::Error> {
    let raw: Option<Vec<std::collections::BTreeMap<String, serde_yaml::Value>>> =
        Deserialize::deserialize(d)?;
    raw.map(|edits| {
        edits
            .into_iter()
            .map(|m| {
                m.into_iter()
                    .map(|(k, v)| finite_json(v).map(|v| (k, v)))
                    .collect()
            })
            .collect()
    })
    .transpose()
}

/// A plot of the results: `lines` (DeepFlow Fig. 9: performance against `x`, a line per
/// `series` value, a panel per `panels` value), `grouped_bars` (Fig. 10: the co-optimization
/// steps' speedups against `x`) or `bars` (Fig. 11: speedup against `x`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyPlot {
    pub kind: StudyPlotKind,
    pub x: String,
    #[serde(default)]
    pub series: Option<String>,
    #[serde(default)]
    pub panels: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    /// What the y axis shows: the speedup (the default) or one of the results' quantities.
    #[serde(default)]
    pub y: StudyMetric,
    /// An axis the speedup is taken over (lines): each point against the point with this
    /// axis's first value and the same other coordinates (Zion Fig. 10: ring time over fully
    /// connected time); the first value's points are the 1.0 and are not drawn.
    #[serde(default)]
    pub over: Option<String>,
}

/// A quantity a study plot draws on its y axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyMetric {
    /// Performance relative to the plot's slowest point (lines) or to the first x (bars).
    #[default]
    Speedup,
    /// Each point's own speedup: its action's result over its starting design and strategy.
    ActionSpeedup,
    TimePerIterationS,
    BisectionBytesPerS,
    SparseCoreS,
    HostTablesS,
    ServingLatencyS,
    /// Samples (sequences for language models, queries served) per second.
    SamplesPerS,
    MemoryPerDeviceBytes,
    /// What a device sends into the innermost fabric over what it sends into the outermost
    /// (Zion Fig. 12's local against global bandwidth; 1 for a flat fabric).
    LocalToGlobalBandwidth,
    /// An availability study's share of the pod running slices.
    Goodput,
}

impl StudyMetric {
    /// The name a study file gives it.
    pub fn name(self) -> &'static str {
        match self {
            StudyMetric::Speedup => "speedup",
            StudyMetric::ActionSpeedup => "action_speedup",
            StudyMetric::TimePerIterationS => "time_per_iteration_s",
            StudyMetric::BisectionBytesPerS => "bisection_bytes_per_s",
            StudyMetric::SparseCoreS => "sparse_core_s",
            StudyMetric::HostTablesS => "host_tables_s",
            StudyMetric::ServingLatencyS => "serving_latency_s",
            StudyMetric::SamplesPerS => "samples_per_s",
            StudyMetric::MemoryPerDeviceBytes => "memory_per_device_bytes",
            StudyMetric::LocalToGlobalBandwidth => "local_to_global_bandwidth",
            StudyMetric::Goodput => "goodput",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyPlotKind {
    Lines,
    GroupedBars,
    Bars,
    /// One dot per value of `x` (each a strategy, say) at its memory per device and its
    /// `y`, a colour per series, and each series' front: the points no other of the series
    /// beats on both (MAD Max Fig. 11).
    Pareto,
}

/// A served transformer's `inference:` block.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferenceRaw {
    pub batch: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Speculative decoding with a draft model.
    #[serde(default)]
    pub speculative: Option<SpeculativeRaw>,
    /// How the weights are stored (default: `precision`): int8 or int4 weight-only, or fp8
    /// (FP8 products).
    #[serde(default)]
    pub weights: Option<crate::domain::StorageFormat>,
    /// How the KV cache is stored (default: `precision`).
    #[serde(default)]
    pub kv_cache: Option<crate::domain::StorageFormat>,
}

/// `inference.speculative`: a draft model proposes `tokens` tokens per step, the served
/// model verifies them in one pass, each accepted with probability `acceptance`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeRaw {
    pub draft: DraftRaw,
    pub tokens: u64,
    pub acceptance: f64,
}

/// A draft model's shape; its vocabulary, precision and feed-forward kind are the served
/// model's (a draft shares its tokenizer).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraftRaw {
    #[serde(default)]
    pub name: Option<String>,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    #[serde(default)]
    pub kv_heads: Option<u64>,
    pub ffn_hidden: u64,
}
