//! The shared vocabulary of the pipeline: number formats, memory scopes, topologies,
//! optimizers, recomputation modes, serving batches. Every stage speaks it, so it sits below
//! them all (below [`crate::config`], whose raw files deserialize into these types
//! directly). It imports nothing from the crate.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

/// Devices a system may join, and members a grid topology may have (a bound on every count
/// sized by them: group shapes, links).
pub const MAX_DEVICES: u64 = 1 << 20;

/// A component of a design that takes a share of the area, power or perimeter budget
/// (DeepFlow Sec. 4.3). Written by its name in budget files and reports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// The compute units.
    Core,
    /// A memory level, by its template name (`l0`, `l2`, `dram`, ...).
    Memory(String),
    /// The network between the accelerators of a package.
    IntraPackage,
    /// The network between packages.
    InterPackage,
}

impl Component {
    /// The names a memory level may not take.
    pub const RESERVED: [&'static str; 3] = ["core", "intra_package", "inter_package"];

    /// The name budget files and reports use.
    pub fn name(&self) -> &str {
        match self {
            Component::Core => "core",
            Component::Memory(name) => name,
            Component::IntraPackage => "intra_package",
            Component::InterPackage => "inter_package",
        }
    }

    /// The component a budget file names (any other name is a memory level's).
    pub fn from_name(name: &str) -> Component {
        match name {
            "core" => Component::Core,
            "intra_package" => Component::IntraPackage,
            "inter_package" => Component::InterPackage,
            level => Component::Memory(level.to_string()),
        }
    }

    /// Whether it is one of the two networks.
    pub fn is_network(&self) -> bool {
        matches!(self, Component::IntraPackage | Component::InterPackage)
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Component {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// How a served model stores its weights or its KV cache: a float format, or integers
/// with a scale per group (weight-only quantization: GPTQ, AWQ, TensorRT-LLM's W8A16 and
/// W4A16), widened to the product's precision inside the matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageFormat {
    Fp32,
    Bf16,
    Fp16,
    Fp8,
    Int8,
    Int4,
}

impl StorageFormat {
    /// Bytes per stored element (int4 packs two per byte; group scales are neglected).
    pub fn bytes(self) -> f64 {
        match self {
            StorageFormat::Fp32 => 4.0,
            StorageFormat::Bf16 | StorageFormat::Fp16 => 2.0,
            StorageFormat::Fp8 | StorageFormat::Int8 => 1.0,
            StorageFormat::Int4 => 0.5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StorageFormat::Fp32 => "fp32",
            StorageFormat::Bf16 => "bf16",
            StorageFormat::Fp16 => "fp16",
            StorageFormat::Fp8 => "fp8",
            StorageFormat::Int8 => "int8",
            StorageFormat::Int4 => "int4",
        }
    }

    /// Vector operations (FP32-rate lanes) to widen one element to the product's precision:
    /// int4 1 (Marlin, Frantar et al. 2024: two bitwise LOP3s and one half2 fused
    /// multiply-add widen and scale a pair of values), int8 and fp8 0.5 (one conversion and
    /// scale per pair), none for a float format the product computes in.
    pub fn widen_ops(self) -> f64 {
        match self {
            StorageFormat::Int4 => 1.0,
            StorageFormat::Int8 | StorageFormat::Fp8 => 0.5,
            _ => 0.0,
        }
    }
}

/// Number format of a workload's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
    Fp8,
}

impl Precision {
    /// Bytes per stored element (tf32 is stored as fp32).
    pub fn bytes(self) -> f64 {
        match self {
            Precision::Fp32 | Precision::Tf32 => 4.0,
            Precision::Bf16 | Precision::Fp16 => 2.0,
            Precision::Fp8 => 1.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
        }
    }
}

/// The number format of each role a training step's tensors play. A workload states them
/// with `precision` (the defaults below) and overrides any under `precisions:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Precisions {
    /// Inputs of the linear layers' matrix products (activations, weights and output
    /// gradients are cast to it when they are stored otherwise); their outputs are
    /// `activations`. The output layer (and a router) keep `activations`.
    pub gemm_inputs: Precision,
    /// What every other kernel reads, writes and computes in, and what is kept for the
    /// backward pass.
    pub activations: Precision,
    /// Activations and their gradients sent between devices (tensor, sequence, expert and
    /// pipeline parallelism).
    pub communication: Precision,
    /// The working copy of the weights every replica holds (gathered under ZeRO-3).
    pub weights: Precision,
    /// Weight gradients: held, reduced over data parallelism and read by the optimizer.
    pub gradients: Precision,
    /// Optimizer moments, and the master copy of the weights when `weights` is narrower.
    pub optimizer_state: Precision,
}

impl Precisions {
    /// Every role in `precision`, the optimizer state in FP32 (mixed precision: FP32 master
    /// weights and moments beside 16-bit working weights).
    pub fn uniform(precision: Precision) -> Self {
        Precisions {
            gemm_inputs: precision,
            activations: precision,
            communication: precision,
            weights: precision,
            gradients: precision,
            optimizer_state: Precision::Fp32,
        }
    }

    /// What a training workload's `precision` means: [`Precisions::uniform`], except FP8
    /// the Transformer Engine way (FP8 GEMM inputs; BF16 activations, messages, weights and
    /// gradients; FP32 master weights and moments).
    pub fn training(precision: Precision) -> Self {
        match precision {
            Precision::Fp8 => Precisions {
                gemm_inputs: Precision::Fp8,
                ..Precisions::uniform(Precision::Bf16)
            },
            other => Precisions::uniform(other),
        }
    }

    /// The roles by their workload-file names.
    pub fn roles(&self) -> [(&'static str, Precision); 6] {
        [
            ("gemm_inputs", self.gemm_inputs),
            ("activations", self.activations),
            ("communication", self.communication),
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer_state", self.optimizer_state),
        ]
    }

    /// Bytes per parameter of the master copy the optimizer keeps (0 when the working
    /// weights are as wide as the optimizer state).
    pub fn master_bytes(&self) -> f64 {
        let state = self.optimizer_state.bytes();
        if self.weights.bytes() < state {
            state
        } else {
            0.0
        }
    }
}

/// What a software stack achieves on an accelerator over whole steps of training or serving
/// (MAD Max Sec. 4.2): the share of the sustained matrix rate and of main memory's bandwidth
/// that runs reach, as caps (the matrix rate is the lesser of this and the template's
/// microbenchmark ceiling). A template's `stack:` section; a lone kernel measured alone
/// runs without them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationCaps {
    #[serde(default)]
    pub compute_utilization: Option<f64>,
    /// The cap on FP8 products where it differs from `compute_utilization` (H100: FP8
    /// tensor cores at full rate hold lower clocks under a whole step's load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_compute_utilization: Option<f64>,
    #[serde(default)]
    pub memory_utilization: Option<f64>,
    /// The share of main memory's bandwidth products reach when their operands stream from
    /// it (decode steps, short prefills), where it differs from `memory_utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_memory_utilization: Option<f64>,
    /// The serving engine's host work per step (scheduling, sampling, input preparation)
    /// that the device waits on, s: added to each decode step and to the prefill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_overhead_s: Option<f64>,
}

impl UtilizationCaps {
    pub fn is_none(&self) -> bool {
        self.compute_utilization.is_none()
            && self.fp8_compute_utilization.is_none()
            && self.memory_utilization.is_none()
            && self.product_memory_utilization.is_none()
            && self.step_overhead_s.is_none()
    }

    /// The engine's host work per serving step, s (0 when the template gives none).
    pub fn step_overhead_s(&self) -> f64 {
        self.step_overhead_s.unwrap_or(0.0)
    }
}

/// Shape of the minimal compute unit.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum McuShape {
    /// A tensor core computing an `m x k` by `k x n` product per cycle (`m*n*k` MACs).
    TensorCore { m: u64, n: u64, k: u64 },
    /// A `rows x cols` systolic array (`rows*cols` MACs per cycle).
    SystolicArray { rows: u64, cols: u64 },
}

impl McuShape {
    /// Multiply-accumulates per cycle.
    pub fn macs_per_cycle(&self) -> u64 {
        match *self {
            McuShape::TensorCore { m, n, k } => m * n * k,
            McuShape::SystolicArray { rows, cols } => rows * cols,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dataflow {
    WeightStationary,
    ActivationStationary,
    OutputStationary,
    Best,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Mcu,
    Bundle,
    Global,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Mcu => "mcu",
            Scope::Bundle => "bundle",
            Scope::Global => "global",
        }
    }
}

/// How the endpoints of one network level are connected. Read through [`TopologyRaw`], so
/// a field the kind does not take (`size` or `dims` on a switch) is refused by name rather
/// than ignored.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    try_from = "TopologyRaw"
)]
pub enum Topology {
    Ring,
    FullyConnected,
    /// A single non-blocking switch (NVSwitch-class).
    Switch,
    Mesh {
        dims: Vec<u64>,
    },
    Torus {
        dims: Vec<u64>,
    },
    /// Twisted torus of shape n x n x 2n (TPU v4).
    TwistedTorus {
        dims: Vec<u64>,
    },
    /// Switched fat tree with a given number of levels.
    FatTree {
        levels: u64,
    },
}

/// How the members of a direct fabric (ring, mesh, torus) pass on traffic that is not
/// theirs: what an all-to-all's latency is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forwarding {
    /// A router on every member forwards packets as they arrive (TPU v4 paper Sec. 7.2:
    /// "every TPU since 2017 has had its own built-in router between links"): every
    /// message of an all-to-all is in flight at once, and the exchange's latency is its
    /// longest path.
    #[default]
    Router,
    /// Members relay messages a hop a step in software (Zion Sec. IV-C, Eq. 3: "each node
    /// sends message to destination that is 1-hop away, 2-hop away, etc."): an
    /// all-to-all's latency is the hop distances summed.
    Relay,
}

/// Which planes of a torus or mesh run a collective along both of their dimensions at once
/// (Ying et al. 2018's 2-D algorithm, [`crate::network`]); groups spanning three or more
/// dimensions are not concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaneCollectives {
    /// Every plane, square or not.
    #[default]
    Any,
    /// Square planes only: a group spanning two dimensions of unequal extent runs one ring
    /// through its members. XLA on TPUs: "2D collectives only implemented for square 2D
    /// plane ... e.g., map 32 to 4x8" (JAX, `jax/_src/mesh_utils.py`,
    /// `_create_device_mesh_for_nd_torus`).
    Square,
}

impl Topology {
    /// The shape of a mesh, torus or twisted torus; `None` for the other kinds.
    pub fn dims(&self) -> Option<&[u64]> {
        match self {
            Topology::Mesh { dims }
            | Topology::Torus { dims }
            | Topology::TwistedTorus { dims } => Some(dims),
            _ => None,
        }
    }
}

/// A topology as a file gives it: its kind and the fields some kinds take.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyRaw {
    kind: TopologyKind,
    dims: Option<Vec<u64>>,
    levels: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TopologyKind {
    Ring,
    FullyConnected,
    Switch,
    Mesh,
    Torus,
    TwistedTorus,
    FatTree,
}

impl TryFrom<TopologyRaw> for Topology {
    type Error = String;

    fn try_from(raw: TopologyRaw) -> Result<Topology, String> {
        use TopologyKind as K;
        let name = match raw.kind {
            K::Ring => "a ring",
            K::FullyConnected => "a fully connected level",
            K::Switch => "a switch",
            K::Mesh => "a mesh",
            K::Torus => "a torus",
            K::TwistedTorus => "a twisted torus",
            K::FatTree => "a fat tree",
        };
        let dimensional = matches!(raw.kind, K::Mesh | K::Torus | K::TwistedTorus);
        if raw.dims.is_some() && !dimensional {
            return Err(format!(
                "{name} takes no dims (only a mesh, torus or twisted torus has them; the \
                 fabric's own size: gives the members of a ring, switch or fat tree)"
            ));
        }
        if raw.levels.is_some() && raw.kind != K::FatTree {
            return Err(format!("{name} takes no levels (only a fat tree does)"));
        }
        let dims = || {
            raw.dims
                .clone()
                .ok_or_else(|| format!("{name} needs its dims, e.g. [4, 4, 4]"))
        };
        Ok(match raw.kind {
            K::Ring => Topology::Ring,
            K::FullyConnected => Topology::FullyConnected,
            K::Switch => Topology::Switch,
            K::Mesh => Topology::Mesh { dims: dims()? },
            K::Torus => Topology::Torus { dims: dims()? },
            K::TwistedTorus => Topology::TwistedTorus { dims: dims()? },
            K::FatTree => Topology::FatTree {
                levels: raw
                    .levels
                    .ok_or_else(|| "a fat tree needs its levels, e.g. 2".to_string())?,
            },
        })
    }
}

/// Training optimizer, which sets the state kept per parameter and the update traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Adam with fp32 master weights and two fp32 moments.
    #[default]
    Adam,
    /// SGD with momentum: fp32 master weights and one fp32 momentum.
    Sgd,
}

/// Optimizer of sparse embedding tables, applied to the rows a batch touches as their
/// gradients arrive (fused into the lookup's backward, so no table-sized gradient exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingOptimizer {
    /// Plain SGD: no state.
    Sgd,
    /// Row-wise Adagrad: one fp32 accumulator per row (the tables may be reduced
    /// precision, the accumulator is not).
    #[default]
    RowwiseAdagrad,
    /// Adagrad: one fp32 accumulator per element.
    Adagrad,
    /// Adam: two fp32 moments per element.
    Adam,
}

impl EmbeddingOptimizer {
    /// Optimizer-state bytes of one table row of `dim` elements.
    pub fn state_bytes_per_row(self, dim: u64) -> f64 {
        match self {
            EmbeddingOptimizer::Sgd => 0.0,
            EmbeddingOptimizer::RowwiseAdagrad => 4.0,
            EmbeddingOptimizer::Adagrad => 4.0 * dim as f64,
            EmbeddingOptimizer::Adam => 8.0 * dim as f64,
        }
    }
}

/// How a transformer's attention core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Separate kernels with the scores in main memory (products, softmax, dropout):
    /// Megatron-LM before fused attention, as Korthikanti et al. 2022 account it.
    #[default]
    Materialized,
    /// One fused kernel per pass on tiles held on chip (FlashAttention, Dao et al. 2022;
    /// cuDNN and Transformer Engine fused attention): Q, K and V read and the output
    /// written once, no scores stored, masked tiles of a causal mask skipped, the scores
    /// recomputed in the backward pass.
    Flash,
}

/// How a transformer encodes token positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// Learned absolute position embeddings added to the token embeddings (GPT-2/3,
    /// Megatron-LM's GPT): no kernel in the layers.
    #[default]
    Learned,
    /// Rotary position embeddings (RoFormer, Su et al. 2021; LLaMA, PaLM): every layer
    /// rotates its queries and keys in a kernel of their own over a pass of many tokens
    /// (Transformer Engine's fused RoPE in training and its backward; TensorRT-LLM's QKV
    /// preprocessing before the context attention, vLLM's rotary kernel); a decode step's
    /// attention kernel rotates its one query and key inline (TensorRT-LLM's masked MHA).
    Rotary,
}

/// How a language model's loss over the vocabulary (softmax cross-entropy on the logits)
/// runs in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LossKernel {
    /// The 16-bit logits cast to FP32 and the loss taken in separate passes over them:
    /// Megatron-LM's vocab-parallel cross-entropy (`output.float()`; the maximum, its
    /// subtraction, the exponential, the sum and the division each one pass, the FP32
    /// softmax kept; backward scales it in place and casts it back), as PyTorch's
    /// `cross_entropy(logits.float())` runs it too. 38 bytes moved per 16-bit logit forward
    /// and 14 backward.
    #[default]
    Fp32,
    /// One kernel per pass on the 16-bit logits (Megatron-Core's
    /// `cross_entropy_loss_fusion`, Transformer Engine's parallel cross-entropy): forward
    /// reads the logits, backward reads them again and writes their gradient.
    Fused,
}

/// Activation recomputation (Narayanan et al. 2021).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recompute {
    /// Keep every activation the backward pass needs.
    #[default]
    None,
    /// Drop the attention core's activations (scores, softmax, context) and rerun it
    /// during backward (Korthikanti et al. 2022).
    Selective,
    /// Keep only each layer's input; rerun the layer's forward pass during backward.
    Full,
}

/// How the bottom-MLP output and the pooled embeddings are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Interaction {
    /// Pairwise dot products between all feature vectors (DLRM default).
    Dot,
    /// Concatenation of all feature vectors.
    Concat,
    /// Transformer layers over the feature vectors (the `transformer:` section).
    Transformer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelSplitKind {
    Rc,
    Cr,
}

/// Requests served together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferenceSpec {
    /// Sequences decoded together.
    pub batch: u64,
    /// Prompt length (tokens per sequence) processed by the prefill.
    pub prompt_tokens: u64,
    /// Tokens generated per sequence.
    pub output_tokens: u64,
}

/// How data crosses between host memory and an accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transfers {
    /// DMA between the host buffer and device memory.
    Direct,
    /// Through a bounce buffer in host memory: one more DDR copy before the DMA.
    Staged,
}

/// Where a recommendation model's embedding tables live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TablePlacement {
    /// Every table in the accelerators' memory, sharded over them.
    Device,
    /// Every table in the CPUs' DDR memory.
    Host,
    /// The hottest tables (most lookups per row) on the accelerators while they fit
    /// beside the dense model, the rest in host memory.
    Auto,
}
