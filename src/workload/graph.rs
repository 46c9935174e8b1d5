//! The kernel graph a workload lowers to: every kernel of one training iteration (forward,
//! backward input and weight gradients, optimizer update) with exact FLOPs and tensor sizes.
//!
//! Kernels that repeat identically (one per transformer layer, one per LSTM time step) are
//! stored once with a `count`, so a 96-layer model costs as much to evaluate as one layer.

use serde::Serialize;

use crate::domain::{LossKernel, Optimizer, Precision, Precisions, Recompute, StorageFormat};

/// What a kernel is, for the breakdown table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Dense matrix products with a weight operand (linear layers, MLPs, LSTM gates, logits).
    Gemm,
    /// Attention: batched score and context products, and the softmax over scores.
    Attention,
    /// Element-wise and normalisation work: activations, residual adds, layer norm, loss.
    Pointwise,
    /// Embedding-table gathers and their gradient scatters.
    Embedding,
    /// Parameter update.
    Optimizer,
}

impl KernelClass {
    pub const ALL: [KernelClass; 5] = [
        KernelClass::Gemm,
        KernelClass::Attention,
        KernelClass::Pointwise,
        KernelClass::Embedding,
        KernelClass::Optimizer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Gemm => "gemm",
            KernelClass::Attention => "attention",
            KernelClass::Pointwise => "pointwise",
            KernelClass::Embedding => "embedding",
            KernelClass::Optimizer => "optimizer",
        }
    }
}

/// Where in the iteration a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    /// Forward work rerun during backward (activation recomputation).
    Recompute,
    /// Gradient with respect to a layer's input.
    BackwardInput,
    /// Gradient with respect to a layer's weights.
    BackwardWeight,
    Update,
}

/// The work of one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// `batch` independent products C (m x n) = A (m x k) B (k x n).
    Gemm { batch: u64, m: u64, k: u64, n: u64 },
    /// Streaming work: every byte read and written once, no reuse worth tiling for.
    Stream {
        read_bytes: f64,
        write_bytes: f64,
        flops: f64,
    },
    /// A fused kernel whose matrix products run on tiles held on chip (FlashAttention):
    /// `flops` at the matrix rate, every byte read and written once; `model_flops` what
    /// a model FLOP count gives the same products (every score, masked or not, as
    /// Narayanan et al. and PaLM count attention), for utilization.
    Fused {
        read_bytes: f64,
        write_bytes: f64,
        flops: f64,
        model_flops: f64,
        /// Of `read_bytes`, state kept in main memory between steps (a decode step's KV
        /// cache): read from there whatever its size, never found in a cache nearer by.
        #[serde(default, skip_serializing_if = "is_zero")]
        resident_bytes: f64,
    },
    /// Row gathers (or scatters) into a table of `table_bytes`.
    Gather {
        read_bytes: f64,
        write_bytes: f64,
        table_bytes: f64,
    },
}

/// Whether a serialized byte count is zero (left out of reports).
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// How tensor parallelism splits a kernel (Megatron-LM, Shoeybi et al. 2019).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Every tensor-parallel rank does all of it (norms, residual adds), unless sequence
    /// parallelism splits it by tokens.
    #[default]
    Replicated,
    /// A linear layer whose output features are split (column-parallel).
    Column,
    /// A linear layer whose input features are split; partial outputs are summed
    /// (row-parallel).
    Row,
    /// Work on split features or heads, with no communication of its own (attention core,
    /// the activation between column and row layers, the vocabulary-parallel loss).
    Sharded,
    /// A vocabulary-parallel embedding lookup: each rank gathers its rows, outputs summed.
    Embedding,
    /// A mixture-of-experts feed-forward: experts spread over the expert-parallel group, the
    /// routed tokens dispatched to them and combined back all-to-all.
    Expert,
    /// A tensor of an expert layer that every tensor-parallel rank of the expert holds
    /// whole: the input of its column-parallel product, the output of its row-parallel one
    /// (what their FP8 casts read). Spread over the expert-parallel group like `Expert`.
    ExpertWhole,
    /// Recommendation embedding tables, sharded table-wise over every device (MAD Max
    /// Sec. 2.2: model parallelism, the one way such tables fit): each device looks up its
    /// tables for the whole batch, and the pooled outputs are exchanged all-to-all.
    Table,
    /// As `Table`, for a model whose interaction takes every feature of a sample (dot
    /// products, feature transformers, a concatenation a column-parallel layer reads): the
    /// all-to-all leaves each tensor-parallel rank its slice of the pooled vectors, so the
    /// ranks all-gather them before the interaction, which each runs whole.
    TableWhole,
}

impl Split {
    /// Recommendation embedding tables ([`Split::Table`], [`Split::TableWhole`]).
    pub fn is_table(self) -> bool {
        matches!(self, Split::Table | Split::TableWhole)
    }
}

/// The type of layer a kernel belongs to: the unit MAD Max (Sec. 4) gives its own
/// parallelization strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    /// Embedding tables (recommendation models) and word embeddings, with the final norm,
    /// logits and loss of a language model (its vocabulary-parallel tail).
    Embedding,
    /// Self-attention of a transformer layer: its norm, projections, scores, context and
    /// residual add.
    Attention,
    /// Dense feed-forward layers: a transformer layer's MLP with its norm and residual add,
    /// a recommendation model's bottom and top MLPs, LSTM cells, a lone GEMM.
    #[default]
    Dense,
    /// Mixture-of-experts feed-forward layers: the router and the experts.
    Expert,
    /// A recommendation model's feature interaction (dot, concatenation or transformer
    /// layers: MAD Max's DLRM-A-Transformer interaction).
    Interaction,
}

impl LayerType {
    pub const ALL: [LayerType; 5] = [
        LayerType::Embedding,
        LayerType::Attention,
        LayerType::Dense,
        LayerType::Expert,
        LayerType::Interaction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LayerType::Embedding => "embedding",
            LayerType::Attention => "attention",
            LayerType::Dense => "dense",
            LayerType::Expert => "expert",
            LayerType::Interaction => "interaction",
        }
    }

    /// The layer type named `name` (as [`LayerType::name`] writes it).
    pub fn parse(name: &str) -> Option<LayerType> {
        LayerType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Where a kernel sits in the model, for splitting layers into pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// Before the repeated layers (embeddings): the first pipeline stage.
    #[default]
    Head,
    /// Inside the repeated layers; `count` is a multiple of the graph's `layers`.
    Layer,
    /// After the repeated layers (final norm, classifier, loss): the last stage.
    Tail,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kernel {
    pub name: String,
    pub class: KernelClass,
    pub phase: Phase,
    /// The precision its tensors are stored in (messages: `wire`).
    pub precision: Precision,
    /// The precision its matrix products run in: `precision`, except the linear layers of
    /// a training whose GEMM inputs are stored otherwise (FP8 the Transformer Engine way:
    /// FP8 inputs, BF16 outputs, activations and messages).
    pub math: Precision,
    /// The precision its tensors are sent between devices in.
    pub wire: Precision,
    /// A served linear layer's weights stored narrower than its product (int8 or int4
    /// weight-only): read at their width and widened inside the product.
    pub weights: Option<StorageFormat>,
    /// Identical instances per iteration.
    pub count: u64,
    pub op: Op,
    pub split: Split,
    pub position: Position,
    pub layer: LayerType,
}

impl Kernel {
    /// A copy without its name, for work that splits and times the kernel without printing
    /// it (one allocation fewer per kernel in a search's inner loop).
    pub fn unnamed(&self) -> Kernel {
        Kernel {
            name: String::new(),
            class: self.class,
            phase: self.phase,
            precision: self.precision,
            math: self.math,
            wire: self.wire,
            weights: self.weights,
            count: self.count,
            op: self.op,
            split: self.split,
            position: self.position,
            layer: self.layer,
        }
    }

    /// Bytes one instance writes (its output), for the whole batch.
    pub fn output_bytes(&self) -> f64 {
        match self.op {
            Op::Gemm { batch, m, n, .. } => {
                batch as f64 * m as f64 * n as f64 * self.precision.bytes()
            }
            Op::Stream { write_bytes, .. }
            | Op::Fused { write_bytes, .. }
            | Op::Gather { write_bytes, .. } => write_bytes,
        }
    }

    /// FLOPs of one instance (2 per multiply-accumulate).
    pub fn flops(&self) -> f64 {
        match self.op {
            Op::Gemm { batch, m, k, n } => 2.0 * batch as f64 * m as f64 * k as f64 * n as f64,
            Op::Stream { flops, .. } | Op::Fused { flops, .. } => flops,
            Op::Gather { .. } => 0.0,
        }
    }

    /// FLOPs a model FLOP count gives one instance: [`Kernel::flops`], except a fused
    /// kernel's (every score of its products, skipped tiles included).
    pub fn model_flops(&self) -> f64 {
        match self.op {
            Op::Fused { model_flops, .. } => model_flops,
            _ => self.flops(),
        }
    }

    /// Is this a matrix product (the FLOPs that papers count as model FLOPs)?
    pub fn is_matmul(&self) -> bool {
        matches!(self.op, Op::Gemm { .. } | Op::Fused { .. })
    }

    /// Elements of the layer weights a linear-layer GEMM reads (forward, input gradient)
    /// or writes (weight gradient): one matrix, or one per product of a batch of adapters;
    /// 0 for products of two activations (attention, a feature interaction).
    pub fn weight_elements(&self) -> u64 {
        let Op::Gemm { batch, m, k, n } = self.op else {
            return 0;
        };
        let weights = match batch {
            1 => self.class != KernelClass::Attention,
            _ => self.class == KernelClass::Gemm && self.layer != LayerType::Interaction,
        };
        if !weights {
            return 0;
        }
        batch
            * match self.phase {
                Phase::BackwardWeight => m * n,
                _ => k * n,
            }
    }
}

/// Bytes one device holds for training.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Footprint {
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_state_bytes: f64,
    /// Activations kept for the backward pass, at their peak (end of forward).
    pub activations_bytes: f64,
    /// The part of `activations_bytes` that tensor parallelism does not split (unless
    /// sequence parallelism does).
    pub replicated_activations_bytes: f64,
    /// Under full recomputation, one layer's activations for the whole batch, rebuilt for
    /// its backward while the layers' inputs stay kept (0 otherwise); and the part of it
    /// tensor parallelism does not split.
    pub rebuilt_bytes: f64,
    pub rebuilt_replicated_bytes: f64,
}

impl Footprint {
    pub fn total_bytes(&self) -> f64 {
        self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_state_bytes
            + self.activations_bytes
            + self.rebuilt_bytes
    }
}

/// One training iteration (or, for `gemm`, one product) as a list of kernels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    pub name: String,
    pub kernels: Vec<Kernel>,
    pub parameters: f64,
    /// Samples (sequences, for language models) per iteration.
    pub samples: f64,
    /// Tokens per iteration (samples for non-sequence models).
    pub tokens: f64,
    pub memory: Footprint,
    /// Repeated layers (0 when the model has none to split into pipeline stages).
    pub layers: u64,
    /// Bytes of one layer's input for the whole batch, in the communication precision:
    /// what a pipeline stage sends on.
    pub boundary_bytes: f64,
    /// Dense parameters before, inside and after the repeated layers.
    pub parameters_by_position: [f64; 3],
    /// Of those, the mixture-of-experts feed-forward weights (inside the layers).
    pub expert_parameters: f64,
    /// Share of the parameters that train (1 unless fine-tuning freezes some).
    pub trainable_share: f64,
    /// Repeated layers that train: the last this-many (all unless fine-tuning).
    pub trainable_layers: u64,
    /// Optimizer state of sparse embedding tables (sharded with the tables; also counted
    /// in `memory.optimizer_state_bytes`).
    pub table_state_bytes: f64,
    /// Whether the graph trains (has gradients and an optimizer step); a lone GEMM does not.
    pub trains: bool,
    /// Optimizer state per trained dense parameter, bytes (mixed-precision master copy and
    /// moments).
    pub optimizer_state_per_parameter_bytes: f64,
    /// Each tensor role's precision (a lone product and serving: all in one).
    pub precisions: Precisions,
    /// Mixture-of-experts experts per expert layer (1 without experts).
    pub experts: u64,
    /// Attention heads of a language model's layers, which tensor parallelism splits
    /// whole (0: none to split).
    pub heads: u64,
    /// A language model's attention as context parallelism splits it (training graphs of
    /// transformers; `None` otherwise).
    pub attention: Option<AttentionShape>,
    /// Attention and feed-forward side by side from one input, summed (parallel blocks):
    /// under tensor parallelism they share the input's collective and the sum's.
    pub parallel_blocks: bool,
    /// What each layer type present holds of the totals above (training graphs built by
    /// the builder; empty otherwise).
    pub layer_parts: Vec<LayerPart>,
    /// The layer type this graph holds alone, when it is one part of a model
    /// ([`Graph::part`]).
    pub part_of: Option<LayerType>,
    /// Embedding tables kept in host memory, by group (no kernel of theirs is in
    /// `kernels`; the system's host prices them).
    pub host_tables: Vec<HostTables>,
    /// A served model (forward only, batches of queries): its report gives a batch's
    /// latency.
    pub served: bool,
    /// Low-rank adapters' parameters in the repeated layers (0 without), also counted in
    /// `parameters_by_position`; LoRA fine-tuning trains these alone.
    pub adapter_parameters: f64,
    /// The part of `adapter_parameters` tensor parallelism leaves whole on every rank.
    pub adapter_replicated: f64,
    /// Parameters the output layer shares with the input embedding (tied embeddings),
    /// counted once in `parameters`. Split into pipeline stages, the last stage keeps its
    /// own copy for the logits, trained beside the first stage's (Megatron-LM's
    /// word-embedding copy, its gradient all-reduced with the first stage's).
    pub tied_parameters: f64,
}

/// A group of embedding tables in host memory, for one iteration of the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostTables {
    pub tables: u64,
    /// Rows read by the forward lookups (and written back by the update).
    pub lookups: f64,
    pub row_bytes: f64,
    /// Optimizer state per row, read and written with each touched row.
    pub state_row_bytes: f64,
    /// The pooled vectors sent to the devices (and their gradients sent back).
    pub pooled_bytes: f64,
    pub table_bytes: f64,
    pub state_bytes: f64,
}

/// What one layer type holds of a graph's totals (see [`Graph::part`]).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LayerPart {
    pub layer: LayerType,
    pub parameters: f64,
    /// Parameters updated by the dense optimizer.
    pub dense_parameters: f64,
    pub parameters_by_position: [f64; 3],
    pub expert_parameters: f64,
    /// Embedding tables' bytes (recommendation models).
    pub sparse_weight_bytes: f64,
    pub activations_bytes: f64,
    pub replicated_activations_bytes: f64,
    /// One layer's activations rebuilt under full recomputation ([`Footprint::rebuilt_bytes`]).
    pub rebuilt_bytes: f64,
    pub rebuilt_replicated_bytes: f64,
}

impl Graph {
    /// One kernel that does not train (a `gemm` workload): measured alone, as a
    /// microbenchmark runs it, not as a step of a software stack.
    pub fn is_lone_kernel(&self) -> bool {
        !self.trains && self.kernels.len() == 1
    }

    /// Total FLOPs of one iteration.
    pub fn flops(&self) -> f64 {
        self.kernels
            .iter()
            .map(|k| k.flops() * k.count as f64)
            .sum()
    }

    /// The adapters (LoRA) of `layers` of the repeated layers: all their parameters, and
    /// the part tensor parallelism leaves whole on every rank when `whole_kept` (two-
    /// dimensional kernel splits split every weight).
    pub fn adapters_in(&self, layers: u64, whole_kept: bool) -> (f64, f64) {
        let of = layers as f64 / self.layers.max(1) as f64;
        let whole = if whole_kept {
            self.adapter_replicated
        } else {
            0.0
        };
        (self.adapter_parameters * of, whole * of)
    }

    /// FLOPs of the matrix products only.
    pub fn matmul_flops(&self) -> f64 {
        self.kernels
            .iter()
            .filter(|k| k.is_matmul())
            .map(|k| k.flops() * k.count as f64)
            .sum()
    }

    /// The layer types present, in the order of their first forward kernel.
    pub fn layer_types(&self) -> Vec<LayerType> {
        let mut types = Vec::new();
        for k in self.kernels.iter().filter(|k| k.phase == Phase::Forward) {
            if !types.contains(&k.layer) {
                types.push(k.layer);
            }
        }
        types
    }

    /// The graph of one layer type's kernels alone, with its share of the parameters,
    /// memory and optimizer update: what a per-layer-type strategy splits its own way. The
    /// iteration's batch, tokens, repeated layers and stage boundary stay the whole
    /// graph's. `Err` names why there is none: a graph without per-layer-type totals, a
    /// fine-tuned one (frozen layers are not split by type), or an absent type.
    pub fn part(&self, layer: LayerType) -> Result<Graph, String> {
        if self.trainable_layers < self.layers || self.trainable_share < 1.0 {
            return Err("fine-tuning graphs are not split by layer type".into());
        }
        let Some(part) = self.layer_parts.iter().find(|p| p.layer == layer) else {
            return Err(format!("{} has no {} layers", self.name, layer.name()));
        };
        let dense: f64 = self.layer_parts.iter().map(|p| p.dense_parameters).sum();
        let share = if dense > 0.0 {
            part.dense_parameters / dense
        } else {
            0.0
        };
        let mut kernels: Vec<Kernel> = Vec::new();
        for k in &self.kernels {
            if k.phase == Phase::Update {
                // The update streams every dense parameter once: this type's share of it.
                if share > 0.0 {
                    let mut k = k.clone();
                    if let Op::Stream {
                        read_bytes,
                        write_bytes,
                        flops,
                    } = &mut k.op
                    {
                        *read_bytes *= share;
                        *write_bytes *= share;
                        *flops *= share;
                    }
                    kernels.push(k);
                }
            } else if k.layer == layer {
                kernels.push(k.clone());
            }
        }
        let (weight_b, gradient_b) = (
            self.precisions.weights.bytes(),
            self.precisions.gradients.bytes(),
        );
        let table_state = if layer == LayerType::Embedding {
            self.table_state_bytes
        } else {
            0.0
        };
        let p = part.dense_parameters;
        Ok(Graph {
            name: format!("{} ({})", self.name, layer.name()),
            kernels,
            parameters: part.parameters,
            memory: Footprint {
                weights_bytes: p * weight_b + part.sparse_weight_bytes,
                gradients_bytes: p * gradient_b,
                optimizer_state_bytes: p * self.optimizer_state_per_parameter_bytes + table_state,
                activations_bytes: part.activations_bytes,
                replicated_activations_bytes: part.replicated_activations_bytes,
                rebuilt_bytes: part.rebuilt_bytes,
                rebuilt_replicated_bytes: part.rebuilt_replicated_bytes,
            },
            parameters_by_position: part.parameters_by_position,
            expert_parameters: part.expert_parameters,
            table_state_bytes: table_state,
            // The copy belongs with the input embedding it copies.
            tied_parameters: if part.parameters_by_position[Position::Head as usize] > 0.0 {
                self.tied_parameters
            } else {
                0.0
            },
            layer_parts: vec![*part],
            part_of: Some(layer),
            ..self.clone_totals()
        })
    }

    /// The graph's iteration-wide fields, without kernels or per-type totals.
    fn clone_totals(&self) -> Graph {
        Graph {
            name: self.name.clone(),
            kernels: Vec::new(),
            parameters: self.parameters,
            samples: self.samples,
            tokens: self.tokens,
            memory: self.memory,
            layers: self.layers,
            boundary_bytes: self.boundary_bytes,
            parameters_by_position: self.parameters_by_position,
            expert_parameters: self.expert_parameters,
            trainable_share: self.trainable_share,
            trainable_layers: self.trainable_layers,
            table_state_bytes: self.table_state_bytes,
            trains: self.trains,
            optimizer_state_per_parameter_bytes: self.optimizer_state_per_parameter_bytes,
            precisions: self.precisions,
            experts: self.experts,
            heads: self.heads,
            attention: self.attention,
            parallel_blocks: self.parallel_blocks,
            layer_parts: Vec::new(),
            part_of: None,
            host_tables: Vec::new(),
            served: self.served,
            adapter_parameters: self.adapter_parameters,
            adapter_replicated: self.adapter_replicated,
            tied_parameters: self.tied_parameters,
        }
    }
}

/// A training step's self-attention, as context parallelism splits it: every sequence of
/// `sequence` tokens attends to itself (causally) with `kv_heads` key and value heads of
/// `head_dim`; under full recomputation the backward pass runs the attention's forward
/// again (`reruns_forward`), key and value exchange included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttentionShape {
    pub sequence: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub reruns_forward: bool,
}

/// Rows of the query (and key) tiles a fused attention core runs: FlashAttention-2 skips a
/// causal mask's tiles above the diagonal and runs those on it whole, masked (Dao 2023,
/// "FlashAttention-2", Sec. 3.1.1), in blocks of 64 or 128 rows (Sec. 3.3; flash-attn's
/// kernels for head dimensions 64 and 128 waste whole 128-row blocks on the diagonal, in
/// the forward pass by queries and in the backward by keys). At 2048 tokens 136 of the
/// 16 x 16 tiles run, 17/32 of the products, where the mask's elements are 2049/4096.
pub const FLASH_TILE: u64 = 128;

/// The shape of a fused attention core ([`Builder::flash_attention`]): `heads` (batch x
/// heads) of `queries` against `keys` at `head_dim`; `q_bytes` of queries (and of output),
/// `kv_bytes` of keys (and of values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedAttention {
    pub heads: u64,
    pub queries: u64,
    pub keys: u64,
    pub head_dim: u64,
    pub q_bytes: f64,
    pub kv_bytes: f64,
}

/// Builds a training graph from forward layers: each forward kernel brings its backward
/// kernels, its saved activations and (with recomputation) its rerun.
pub(crate) struct Builder {
    /// The precision activations are stored in (`precisions.activations`).
    precision: Precision,
    /// Each tensor role's precision.
    precisions: Precisions,
    recompute: Recompute,
    kernels: Vec<Kernel>,
    backward: Vec<Kernel>,
    pub saved_bytes: f64,
    pub parameters: f64,
    /// Parameters updated by the dense optimizer, and their precision.
    dense_parameters: f64,
    /// Kernels being added belong to a repeated layer: the unit that full recomputation
    /// reruns and whose activations it drops.
    pub in_layer: bool,
    /// How tensor parallelism splits the kernels being added.
    pub split: Split,
    replicated_saved_bytes: f64,
    position: Position,
    parameters_by_position: [f64; 3],
    expert_parameters: f64,
    /// The layer type of the kernels being added.
    pub layer: LayerType,
    /// Each layer type's share of the totals, by `LayerType as usize`.
    parts: [LayerPart; 5],
    /// The precision the linear layers' products run in (`precisions.gemm_inputs`, or the
    /// activations' for an output layer or a router).
    linear_math: Precision,
    /// The precision the kernels being added run in.
    math: Precision,
    /// Serving: the linear layers' weights stored narrower than their products (int8 or int4
    /// weight-only), set on their forward products.
    pub weight_only: Option<StorageFormat>,
    /// Serving: bytes per element of the KV cache when it is stored otherwise than the
    /// activations.
    pub kv_bytes: Option<f64>,
    /// Weights of the linear layers whose products take them in another precision than
    /// they are kept in: copied to it once per iteration.
    cast_weights: f64,
    /// Whether the step clips the gradients by their global norm (language models).
    pub clips_gradients: bool,
    /// The next linear layer's input is already kept for the backward pass by another
    /// that reads the same tensor (parallel blocks' feed-forward): not kept again.
    pub input_kept: bool,
    /// The linear layers' weights are frozen (LoRA fine-tuning): no weight gradient, and
    /// their inputs are kept only for an adapter's.
    pub frozen: bool,
    /// Low-rank adapters beside the next linear layer (taken by it).
    pub adapter: Option<AdapterGemms>,
    /// Adapter parameters added so far, and the part tensor parallelism leaves whole.
    adapter_parameters: f64,
    adapter_replicated: f64,
    /// Parameters the output layer shares with the input embedding ([`Graph::tied_parameters`]).
    pub tied_parameters: f64,
}

/// Low-rank adapters beside one linear layer Y = X W (m x k by k x n): `count` adapters
/// (at most three: Q, K and V one by one), each an A (k x rank, the A's read X as one
/// product) and a B (rank x `outputs[i]`), written into Y's columns; `adapters` distinct
/// adapters share the batch's rows evenly (serving many: one batched product per matrix,
/// each adapter's weights read once, as Punica's SGMV and S-LoRA run them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdapterGemms {
    pub rank: u64,
    pub outputs: [u64; 3],
    pub count: usize,
    pub adapters: u64,
}

impl AdapterGemms {
    /// The B matrices' output widths.
    fn outs(&self) -> &[u64] {
        &self.outputs[..self.count.min(3)]
    }
}

impl Builder {
    /// A graph whose every kernel runs and stores its tensors in `precision` (inference:
    /// FP8 weights and caches are FP8).
    pub fn new(precision: Precision, recompute: Recompute) -> Self {
        Builder::with_roles(Precisions::uniform(precision), recompute)
    }

    /// A training graph with each tensor role in its precision: the linear layers' products
    /// run in `gemm_inputs` on copies of their inputs, weights and output gradients cast to
    /// it (casts with their scaling priced as streams) where those are kept otherwise; every
    /// other kernel, the saved activations and the outputs in `activations`; messages in
    /// `communication`; the optimizer's update over `weights`, `gradients` and
    /// `optimizer_state`. FP8 the Transformer Engine way is [`Precisions::training`]`(Fp8)`.
    pub fn with_roles(precisions: Precisions, recompute: Recompute) -> Self {
        let precision = precisions.activations;
        Builder {
            precision,
            precisions,
            linear_math: precisions.gemm_inputs,
            math: precision,
            weight_only: None,
            kv_bytes: None,
            cast_weights: 0.0,
            clips_gradients: false,
            input_kept: false,
            frozen: false,
            adapter: None,
            adapter_parameters: 0.0,
            adapter_replicated: 0.0,
            tied_parameters: 0.0,
            recompute,
            kernels: Vec::new(),
            backward: Vec::new(),
            saved_bytes: 0.0,
            parameters: 0.0,
            dense_parameters: 0.0,
            in_layer: false,
            split: Split::Replicated,
            replicated_saved_bytes: 0.0,
            position: Position::Head,
            parameters_by_position: [0.0; 3],
            expert_parameters: 0.0,
            layer: LayerType::Dense,
            parts: LayerType::ALL.map(|layer| LayerPart {
                layer,
                ..LayerPart::default()
            }),
        }
    }

    /// The precision activations are stored in.
    pub fn storage(&self) -> Precision {
        self.precision
    }

    /// Each tensor role's precision.
    pub fn precisions(&self) -> Precisions {
        self.precisions
    }

    /// Runs the linear layers added next in the activations' precision (`false`: an output
    /// layer or a router, which FP8 training keeps in BF16) or again in the GEMM inputs'
    /// (`true`).
    pub fn gemm_input_linears(&mut self, on: bool) {
        self.linear_math = if on {
            self.precisions.gemm_inputs
        } else {
            self.precision
        };
    }

    fn part(&mut self) -> &mut LayerPart {
        &mut self.parts[self.layer as usize]
    }

    /// Marks the start (`true`) or end of the repeated layers.
    pub fn set_in_layer(&mut self, in_layer: bool) {
        self.in_layer = in_layer;
        self.position = if in_layer {
            Position::Layer
        } else {
            Position::Tail
        };
    }

    fn add_parameters(&mut self, parameters: f64) {
        let expert = if self.split == Split::Expert {
            parameters
        } else {
            0.0
        };
        let position = self.position as usize;
        self.expert_parameters += expert;
        self.parameters += parameters;
        self.dense_parameters += parameters;
        self.parameters_by_position[position] += parameters;
        let part = self.part();
        part.expert_parameters += expert;
        part.parameters += parameters;
        part.dense_parameters += parameters;
        part.parameters_by_position[position] += parameters;
    }

    fn bytes(&self) -> f64 {
        self.precision.bytes()
    }

    fn rerun(&self, class: KernelClass, recomputable: bool) -> bool {
        recomputable
            && self.in_layer
            && match self.recompute {
                Recompute::None => false,
                Recompute::Selective => class == KernelClass::Attention,
                Recompute::Full => true,
            }
    }

    fn push(&mut self, name: &str, class: KernelClass, count: u64, op: Op, recomputable: bool) {
        // Weight-only formats quantize the layers' products (not the output layer's).
        let weights = match op {
            Op::Gemm { batch: 1, .. }
                if class != KernelClass::Attention && self.position == Position::Layer =>
            {
                self.weight_only
            }
            _ => None,
        };
        let kernel = Kernel {
            name: name.to_string(),
            class,
            phase: Phase::Forward,
            precision: self.precision,
            math: self.math,
            wire: self.precisions.communication,
            weights,
            count,
            op,
            split: self.split,
            position: self.position,
            layer: self.layer,
        };
        if self.rerun(class, recomputable) {
            self.backward.push(Kernel {
                name: format!("{name} (recompute)"),
                phase: Phase::Recompute,
                ..kernel.clone()
            });
        }
        self.kernels.push(kernel);
    }

    fn push_backward(
        &mut self,
        name: String,
        class: KernelClass,
        phase: Phase,
        count: u64,
        op: Op,
    ) {
        self.backward.push(Kernel {
            name,
            class,
            phase,
            precision: self.precision,
            math: self.math,
            wire: self.precisions.communication,
            weights: None,
            count,
            op,
            split: self.split,
            position: self.position,
            layer: self.layer,
        });
    }

    /// Activations saved for backward: all of them, or, under full recomputation, only a
    /// layer's input (`layer_input`) and what lies outside the recomputed layers.
    fn save(&mut self, bytes: f64, count: u64, layer_input: bool, class: KernelClass) {
        let kept = match self.recompute {
            Recompute::None => true,
            Recompute::Selective => class != KernelClass::Attention,
            Recompute::Full => layer_input,
        };
        let saved = bytes * count as f64;
        let replicated = self.split == Split::Replicated;
        if kept || !self.in_layer {
            self.saved_bytes += saved;
            self.part().activations_bytes += saved;
            if replicated {
                self.replicated_saved_bytes += saved;
                self.part().replicated_activations_bytes += saved;
            }
        }
        if self.in_layer {
            // All of the layers' activations, of which full recomputation rebuilds one
            // layer's at a time (see `finish`), less their inputs: kept as the checkpoint,
            // the rebuild starts from them (the first norm's saved input is that tensor).
            let sign = if layer_input { -1.0 } else { 1.0 };
            self.part().rebuilt_bytes += sign * saved;
            if replicated {
                self.part().rebuilt_replicated_bytes += sign * saved;
            }
        }
    }

    /// A linear layer Y (m x n) = X (m x k) W (k x n), `count` times, with its input and
    /// weight gradients (the input gradient is computed even for a first layer); the layer
    /// has `weight_instances` distinct weight matrices (time steps share one), and reruns
    /// under full recomputation if `recomputable` and inside a layer.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &mut self,
        name: &str,
        class: KernelClass,
        count: u64,
        m: u64,
        k: u64,
        n: u64,
        weight_instances: u64,
        recomputable: bool,
    ) {
        let adapter = self.adapter.take();
        // Inputs and output gradients are cast when the product takes them in another
        // precision than activations are kept in; weights when they are kept otherwise.
        let cast = self.linear_math != self.precision;
        let split = self.split;
        if self.linear_math != self.precisions.weights {
            self.cast_weights += (k * n * weight_instances) as f64;
        }
        // The input is split by features for a row-parallel layer, the output for a
        // column-parallel one; the weight always is a shard.
        let (input_split, output_split) = match split {
            Split::Row => (Split::Sharded, Split::Replicated),
            Split::Column => (Split::Replicated, Split::Sharded),
            // Tensor parallelism inside an expert splits the wider of k and n (see
            // `distributed::work::split_expert`): a product that widens (k <= n) is
            // column-parallel, one that narrows row-parallel.
            Split::Expert if k <= n => (Split::ExpertWhole, Split::Expert),
            Split::Expert => (Split::Expert, Split::ExpertWhole),
            other => (other, other),
        };
        let to_name = self.linear_math.name();
        if cast {
            // Casts with their scaling (the amax over the tensor, the scale, the
            // conversion): read the activation, write the product's input (FP8 training:
            // BF16 to FP8). The weights' copies are written once per iteration by the
            // optimizer step (see `finish`).
            let (from, to) = (self.bytes(), self.linear_math.bytes());
            let cast = move |elements: f64| Op::Stream {
                read_bytes: elements * from,
                write_bytes: elements * to,
                flops: 3.0 * elements,
            };
            let x = m as f64 * k as f64;
            self.split = input_split;
            self.push(
                &format!("{name} {to_name} cast (input)"),
                KernelClass::Pointwise,
                count,
                cast(x),
                recomputable,
            );
            self.split = split;
            self.math = self.linear_math;
        }
        self.push(
            name,
            class,
            count,
            Op::Gemm { batch: 1, m, k, n },
            recomputable,
        );
        // The weight gradient reads the input kept in the product's precision (once, when
        // another linear layer keeps the same tensor); a frozen weight has none, and only
        // its adapter's reads the input.
        let kept = std::mem::take(&mut self.input_kept);
        let needed = !self.frozen || adapter.is_some();
        if !kept && needed {
            // A frozen product's input is read by its adapter's weight gradient alone, which
            // runs in the activations' precision.
            let width = if self.frozen {
                self.precision.bytes()
            } else {
                self.math.bytes()
            };
            // Kept as the product takes it: a column-parallel layer's input whole on every
            // tensor rank (Korthikanti et al. 2022's 10 sbh term; sequence parallelism
            // splits it, see `Strategy::activation_split`).
            let layer_split = self.split;
            if input_split == Split::Replicated {
                self.split = Split::Replicated;
            }
            self.save(m as f64 * k as f64 * width, count, false, class);
            self.split = layer_split;
        }
        if let Some(a) = adapter {
            self.adapter_products(name, count, (m, k, n), a, weight_instances, recomputable);
        }
        self.push_backward(
            format!("{name} dX"),
            class,
            Phase::BackwardInput,
            count,
            Op::Gemm {
                batch: 1,
                m,
                k: n,
                n: k,
            },
        );
        if !self.frozen {
            self.push_backward(
                format!("{name} dW"),
                class,
                Phase::BackwardWeight,
                count,
                Op::Gemm {
                    batch: 1,
                    m: k,
                    k: m,
                    n,
                },
            );
        }
        if cast {
            // Backward runs last-pushed first: the output gradient's cast precedes both.
            self.math = self.precision;
            self.split = output_split;
            let elements = m as f64 * n as f64;
            self.push_backward(
                format!("{name} {to_name} cast (output gradient)"),
                KernelClass::Pointwise,
                Phase::BackwardInput,
                count,
                Op::Stream {
                    read_bytes: elements * self.bytes(),
                    write_bytes: elements * self.linear_math.bytes(),
                    flops: 3.0 * elements,
                },
            );
            self.split = split;
        }
        self.add_parameters((k * n * weight_instances) as f64);
    }

    /// The adapters beside linear layer `name` (Y = X W, `m x k` by `k x n`, `count`
    /// times): forward X A (m x k by k x r per A), then (X A) B, added to Y; backward the
    /// gradients of B and of X A, of A and the input gradient through A, added to the
    /// layer's. Under tensor parallelism the adapter follows its layer (Megatron's
    /// parallel adapters): beside a column-parallel layer A is whole and B split by
    /// columns, beside a row-parallel one A is split by rows (its partial products
    /// reduced) and B whole. Adapters run in the activations' precision (not FP8) and
    /// store their weights in it (not weight-only formats).
    fn adapter_products(
        &mut self,
        name: &str,
        count: u64,
        (m, k, n): (u64, u64, u64),
        a: AdapterGemms,
        weight_instances: u64,
        recomputable: bool,
    ) {
        let split = self.split;
        // How A, B, the layer's input (gradient) and its output are split.
        let (a_split, b_split, in_split, out_split) = match split {
            Split::Column => (
                Split::Replicated,
                Split::Column,
                Split::Replicated,
                Split::Sharded,
            ),
            Split::Row => (
                Split::Row,
                Split::Replicated,
                Split::Sharded,
                Split::Replicated,
            ),
            other => (other, other, other, other),
        };
        let (math, weight_only) = (self.math, self.weight_only.take());
        self.math = self.precision;
        let b = self.bytes();
        let batch = a.adapters;
        let rows = m.div_ceil(batch);
        let ra = a.rank * a.count as u64;
        let outputs: u64 = a.outs().iter().sum();
        let gemm = |m, k, n| Op::Gemm { batch, m, k, n };
        let class = KernelClass::Gemm;
        // One B per adapter (its own slice of X A and of Y's columns).
        let b_name = |i: usize| match a.count {
            1 => format!("{name} lora B"),
            c => format!("{name} lora B {}/{c}", i + 1),
        };
        self.split = a_split;
        self.push(
            &format!("{name} lora A"),
            class,
            count,
            gemm(rows, k, ra),
            recomputable,
        );
        self.split = b_split;
        for (i, &out) in a.outs().iter().enumerate() {
            self.push(
                &b_name(i),
                class,
                count,
                gemm(rows, a.rank, out),
                recomputable,
            );
        }
        self.split = out_split;
        let added = m as f64 * outputs.min(n) as f64;
        self.push(
            &format!("{name} lora add"),
            KernelClass::Pointwise,
            count,
            Op::Stream {
                read_bytes: 2.0 * added * b,
                write_bytes: added * b,
                flops: added,
            },
            recomputable,
        );
        // B's gradient reads X A, kept whole on every rank (A's reads X, kept by the
        // layer).
        self.split = Split::Replicated;
        self.save(m as f64 * ra as f64 * b, count, false, class);
        // Backward runs last-pushed first: B's gradients, then A's, then the input
        // gradient through A added to the layer's.
        self.split = in_split;
        let dx = m as f64 * k as f64;
        self.push_backward(
            format!("{name} lora dX add"),
            KernelClass::Pointwise,
            Phase::BackwardInput,
            count,
            Op::Stream {
                read_bytes: 2.0 * dx * b,
                write_bytes: dx * b,
                flops: dx,
            },
        );
        self.split = a_split;
        self.push_backward(
            format!("{name} lora A dX"),
            class,
            Phase::BackwardInput,
            count,
            gemm(rows, ra, k),
        );
        self.push_backward(
            format!("{name} lora A dW"),
            class,
            Phase::BackwardWeight,
            count,
            gemm(k, rows, ra),
        );
        self.split = b_split;
        for (i, &out) in a.outs().iter().enumerate() {
            let name = b_name(i);
            self.push_backward(
                format!("{name} dX"),
                class,
                Phase::BackwardInput,
                count,
                gemm(rows, out, a.rank),
            );
            self.push_backward(
                format!("{name} dW"),
                class,
                Phase::BackwardWeight,
                count,
                gemm(a.rank, rows, out),
            );
        }
        self.split = split;
        self.math = math;
        self.weight_only = weight_only;
        let per_a = (k * ra * weight_instances * batch) as f64;
        let per_b = (a.rank * outputs * weight_instances * batch) as f64;
        self.add_parameters(per_a + per_b);
        self.adapter_parameters += per_a + per_b;
        self.adapter_replicated += match split {
            Split::Column => per_a,
            Split::Row => per_b,
            _ => per_a + per_b,
        };
    }

    /// `batch` products of two activations (attention scores, context, feature
    /// interaction): both operands get gradients; `saved_bytes` of them are kept for
    /// backward (less than both when an operand is already kept by another kernel, such as
    /// the softmax output, or shared between heads).
    #[allow(clippy::too_many_arguments)]
    pub fn batched(
        &mut self,
        name: &str,
        class: KernelClass,
        count: u64,
        batch: u64,
        m: u64,
        k: u64,
        n: u64,
        saved_bytes: f64,
    ) {
        self.push(name, class, count, Op::Gemm { batch, m, k, n }, true);
        // Its operands come from other kernels (queries, keys and values from their
        // projections): selective recomputation keeps them as the recomputed core's inputs
        // (Korthikanti et al. 2022: 34 sbh per layer with them); only what the core makes
        // inside (the softmax, the dropout) is dropped.
        self.save(saved_bytes, count, false, KernelClass::Gemm);
        self.push_backward(
            format!("{name} dA"),
            class,
            Phase::BackwardInput,
            count,
            Op::Gemm {
                batch,
                m,
                k: n,
                n: k,
            },
        );
        self.push_backward(
            format!("{name} dB"),
            class,
            Phase::BackwardInput,
            count,
            Op::Gemm {
                batch,
                m: k,
                k: m,
                n,
            },
        );
    }

    /// The attention core as one fused kernel per pass (FlashAttention, Dao et al. 2022),
    /// `count` times. Forward: the two products over the score tiles a causal mask leaves
    /// (queries = keys), reading Q, K and V and writing the output and each row's softmax
    /// statistics (FP32) once; dropout regenerates its mask, so no score, probability or
    /// mask is stored. Kept for backward: Q, K, V and the statistics (the output is the
    /// next linear layer's input, kept there). Backward: the scores recomputed (a
    /// `Recompute` kernel, not model FLOPs) and the four gradient products, reading Q, K,
    /// V, the output, its gradient and the statistics, writing the gradients of Q, K and V.
    /// Selective recomputation has nothing left to drop; full recomputation reruns it.
    pub fn flash_attention(&mut self, name: &str, count: u64, a: FusedAttention) {
        // A causal mask skips the tiles wholly above the diagonal and runs those on it
        // whole, masked: of n x n tiles of FLASH_TILE rows, n (n + 1) / 2 run.
        let causal = a.queries == a.keys;
        let tiles = if causal {
            let n = a.keys.div_ceil(FLASH_TILE) as f64;
            (n + 1.0) / (2.0 * n)
        } else {
            1.0
        };
        // Two products of 2 x queries x keys x head_dim FLOPs per head over the tiles run.
        let whole = 2.0 * a.heads as f64 * a.queries as f64 * a.keys as f64 * a.head_dim as f64;
        let product = whole * tiles;
        let stats = a.heads as f64 * a.queries as f64 * 4.0;
        let full = self.recompute == Recompute::Full;
        self.push(
            name,
            KernelClass::Attention,
            count,
            Op::Fused {
                read_bytes: a.q_bytes + 2.0 * a.kv_bytes,
                write_bytes: a.q_bytes + stats,
                flops: 2.0 * product,
                model_flops: 2.0 * whole,
                // Queries against more keys than they bring: the keys and values of earlier
                // steps, cached in main memory (a decode step, a prompt chunk).
                resident_bytes: if a.queries < a.keys {
                    2.0 * a.kv_bytes
                } else {
                    0.0
                },
            },
            full,
        );
        // Kept unless full recomputation drops the layer: selective recomputation's rule
        // for the attention core does not apply (nothing quadratic is stored).
        self.save(
            a.q_bytes + 2.0 * a.kv_bytes + stats,
            count,
            false,
            KernelClass::Gemm,
        );
        self.push_backward(
            format!("{name} backward"),
            KernelClass::Attention,
            Phase::BackwardInput,
            count,
            Op::Fused {
                read_bytes: 3.0 * a.q_bytes + 2.0 * a.kv_bytes + stats,
                write_bytes: a.q_bytes + 2.0 * a.kv_bytes,
                flops: 4.0 * product,
                model_flops: 4.0 * whole,
                resident_bytes: 0.0,
            },
        );
        self.push_backward(
            format!("{name} backward scores (recompute)"),
            KernelClass::Attention,
            Phase::Recompute,
            count,
            Op::Fused {
                read_bytes: 0.0,
                write_bytes: 0.0,
                flops: product,
                model_flops: 0.0,
                resident_bytes: 0.0,
            },
        );
    }

    /// Element-wise work over `elements` outputs reading `inputs` tensors of that size and
    /// doing `flops_per_element`; `saved` tensors of that size are kept for backward.
    /// Backward reads the saved tensors and the output gradient and writes one gradient per
    /// input, at twice the FLOPs.
    #[allow(clippy::too_many_arguments)]
    pub fn pointwise(
        &mut self,
        name: &str,
        class: KernelClass,
        count: u64,
        elements: f64,
        inputs: f64,
        flops_per_element: f64,
        saved: f64,
    ) {
        self.pointwise_masked(
            name,
            class,
            count,
            elements,
            inputs,
            flops_per_element,
            saved,
            0.0,
        );
    }

    /// As [`Builder::pointwise`], with dropout applied to the output: a mask of
    /// `mask_bytes` per element is written, kept for backward and read by it (PyTorch's
    /// dropout keeps a one-byte mask per element). Full recomputation reruns the kernel and
    /// regenerates the mask from the saved random state instead.
    #[allow(clippy::too_many_arguments)]
    pub fn pointwise_masked(
        &mut self,
        name: &str,
        class: KernelClass,
        count: u64,
        elements: f64,
        inputs: f64,
        flops_per_element: f64,
        saved: f64,
        mask_bytes: f64,
    ) {
        let b = self.bytes();
        let mask = mask_bytes * elements;
        self.push(
            name,
            class,
            count,
            Op::Stream {
                read_bytes: inputs * elements * b,
                write_bytes: elements * b + mask,
                flops: flops_per_element * elements,
            },
            true,
        );
        self.save(saved * elements * b + mask, count, false, class);
        self.push_backward(
            format!("{name} backward"),
            class,
            Phase::BackwardInput,
            count,
            Op::Stream {
                read_bytes: (saved + 1.0) * elements * b + mask,
                write_bytes: inputs * elements * b,
                flops: 2.0 * flops_per_element * elements,
            },
        );
    }

    /// The loss over the vocabulary, softmax cross-entropy on `elements` logits (tokens x
    /// vocabulary) in the builder's precision, run as `kernel` says. Per logit of `b` bytes:
    /// - [`LossKernel::Fp32`]: forward casts to FP32 (reads b, writes 4), takes the maximum
    ///   (reads 4), subtracts it (reads 4, writes 4), exponentiates (reads 4, writes 4), sums
    ///   (reads 4) and divides (reads 4, writes 4), keeping the FP32 softmax (4); backward
    ///   scales it in place (reads 4, writes 4) and casts the gradient back (reads 4,
    ///   writes b);
    /// - [`LossKernel::Fused`]: forward reads the logits, kept for backward (b); backward
    ///   reads them and writes their gradient (b each).
    ///
    /// The per-token reductions (maxima, sums, losses and, under tensor parallelism, their
    /// all-reduces over tokens) are a vocabulary's fraction of this and are not priced.
    pub fn cross_entropy(&mut self, name: &str, elements: f64, kernel: LossKernel) {
        const FP32: f64 = 4.0;
        let b = self.bytes();
        // (forward read, forward write, kept, backward read, backward write, forward
        // FLOPs, backward FLOPs) per logit.
        let (fr, fw, kept, br, bw, ff, bf) = match kernel {
            LossKernel::Fp32 => (
                b + 5.0 * FP32,
                4.0 * FP32,
                FP32,
                2.0 * FP32,
                FP32 + b,
                5.0,
                2.0,
            ),
            LossKernel::Fused => (b, 0.0, b, b, b, 5.0, 5.0),
        };
        let class = KernelClass::Pointwise;
        self.push(
            name,
            class,
            1,
            Op::Stream {
                read_bytes: fr * elements,
                write_bytes: fw * elements,
                flops: ff * elements,
            },
            true,
        );
        self.save(kept * elements, 1, false, class);
        self.push_backward(
            format!("{name} backward"),
            class,
            Phase::BackwardInput,
            1,
            Op::Stream {
                read_bytes: br * elements,
                write_bytes: bw * elements,
                flops: bf * elements,
            },
        );
    }

    /// Keeps `bytes` (per instance, `count` instances) of a kernel's output for a later
    /// kernel's backward, as recomputation allows.
    pub fn keep(&mut self, bytes: f64, count: u64, class: KernelClass) {
        self.save(bytes, count, false, class);
    }

    /// Records a layer input kept under full recomputation.
    pub fn layer_input(&mut self, bytes: f64, count: u64) {
        if self.recompute == Recompute::Full {
            self.save(bytes, count, true, KernelClass::Gemm);
        }
    }

    /// A pooled gather of `rows` rows of `row_bytes` from a table of `table_bytes`, writing
    /// `out_bytes`; backward scatters the gradient rows back (read, add, write): into the
    /// dense gradient for language-model embeddings (updated by the optimizer with the other
    /// dense parameters, see [`Builder::dense_parameters`]), or as an update fused into the
    /// scatter for sparse recommendation tables (`parameters` > 0: no dense gradient; the
    /// fused optimizer's state is added by [`Builder::fused_update_state`]).
    #[allow(clippy::too_many_arguments)]
    pub fn embedding(
        &mut self,
        name: &str,
        rows: f64,
        row_bytes: f64,
        out_bytes: f64,
        table_bytes: f64,
        parameters: f64,
        precision: Precision,
    ) {
        let read = rows * row_bytes;
        self.kernels.push(Kernel {
            name: name.to_string(),
            class: KernelClass::Embedding,
            phase: Phase::Forward,
            precision,
            math: precision,
            wire: self.precisions.communication,
            weights: None,
            count: 1,
            op: Op::Gather {
                read_bytes: read,
                write_bytes: out_bytes,
                table_bytes,
            },
            split: self.split,
            position: self.position,
            layer: self.layer,
        });
        self.backward.push(Kernel {
            name: format!("{name} gradient scatter"),
            class: KernelClass::Embedding,
            phase: Phase::BackwardWeight,
            precision,
            math: precision,
            wire: self.precisions.communication,
            weights: None,
            count: 1,
            op: Op::Gather {
                read_bytes: out_bytes + read,
                write_bytes: read,
                table_bytes,
            },
            split: self.split,
            position: self.position,
            layer: self.layer,
        });
        self.parameters += parameters;
        self.part().parameters += parameters;
    }

    /// The optimizer fused into the last embedding's backward reads and writes
    /// `touched_bytes` of state beside the rows it updates; the whole state,
    /// `table_state_bytes`, lives beside the table.
    pub fn fused_update_state(&mut self, touched_bytes: f64, table_state_bytes: f64) {
        if let Some(Kernel {
            op:
                Op::Gather {
                    read_bytes,
                    write_bytes,
                    table_bytes,
                },
            ..
        }) = self.backward.last_mut()
        {
            *read_bytes += touched_bytes;
            *write_bytes += touched_bytes;
            *table_bytes += table_state_bytes;
        }
    }

    /// Parameters trained densely but not by a `linear` (norm scales, embeddings in LLMs).
    pub fn dense_parameters(&mut self, parameters: f64) {
        self.add_parameters(parameters);
    }

    /// Finishes the graph: backward kernels in reverse order, then the optimizer update.
    /// `layers` repeated layers each take `boundary_bytes` of input (for the whole batch).
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        mut self,
        name: String,
        optimizer: Optimizer,
        samples: f64,
        tokens: f64,
        sparse_weight_bytes: f64,
        layers: u64,
        boundary_bytes: f64,
    ) -> Graph {
        let p = self.dense_parameters;
        let roles = self.precisions;
        let weight_b = roles.weights.bytes();
        // Weight-only quantized serving holds its layers' weights at their width (the
        // embedding table and the output layer stay in the weights' precision, as GPTQ and
        // AWQ leave them).
        let weights_bytes = match self.weight_only {
            Some(f) => {
                // Adapters stay in precision beside the quantized layers.
                let layers = (self.parameters_by_position[Position::Layer as usize]
                    - self.adapter_parameters)
                    .clamp(0.0, p);
                layers * f.bytes() + (p - layers) * weight_b
            }
            None => p * weight_b,
        };
        let gradient_b = roles.gradients.bytes();
        let state = optimizer_state_bytes(optimizer, roles);
        // Update traffic per parameter: read the gradient, the master copy (or the weight
        // itself when none is kept) and the moments; write the master copy and moments, and
        // the working weights when a master copy is kept.
        let master = roles.master_bytes();
        let moment_bytes = state - master;
        let value_bytes = if master > 0.0 { master } else { weight_b };
        let per_param_read = gradient_b + value_bytes + moment_bytes;
        let per_param_write =
            value_bytes + moment_bytes + if master > 0.0 { weight_b } else { 0.0 };
        let moments = match optimizer {
            Optimizer::Adam => 2.0,
            Optimizer::Sgd => 1.0,
        };
        self.backward.reverse();
        let mut kernels = self.kernels;
        kernels.append(&mut self.backward);
        // The step's whole-model kernels, once per iteration, on every weight a device holds.
        let precision = self.precision;
        let update = |name: String, class: KernelClass, read_bytes, write_bytes, flops| Kernel {
            name,
            class,
            phase: Phase::Update,
            precision,
            math: precision,
            wire: precision,
            weights: None,
            count: 1,
            op: Op::Stream {
                read_bytes,
                write_bytes,
                flops,
            },
            split: Split::Replicated,
            position: Position::Layer,
            layer: LayerType::Dense,
        };
        if p > 0.0 {
            kernels.push(update(
                format!("{} update", optimizer_name(optimizer)),
                KernelClass::Optimizer,
                p * per_param_read,
                p * per_param_write,
                p * (4.0 + 4.0 * moments),
            ));
            if self.cast_weights > 0.0 {
                // The linear layers' weight copies in their products' precision with their
                // scaling, written once per iteration after the update (FP8 training:
                // Transformer Engine's cached FP8 weights): every such weight a device
                // holds (a `Pointwise` update).
                let to = roles.gemm_inputs;
                kernels.push(update(
                    format!("{} weight copies", to.name()),
                    KernelClass::Pointwise,
                    self.cast_weights * weight_b,
                    self.cast_weights * to.bytes(),
                    3.0 * self.cast_weights,
                ));
            }
            if self.clips_gradients {
                // The global gradient norm reads every gradient once (the clipping scale
                // is applied as the optimizer reads them); its scalar all-reduce is free.
                kernels.push(update(
                    "gradient norm".into(),
                    KernelClass::Optimizer,
                    p * gradient_b,
                    0.0,
                    2.0 * p,
                ));
            }
        }
        // Tables belong to the embedding layers.
        self.parts[LayerType::Embedding as usize].sparse_weight_bytes = sparse_weight_bytes;
        let present: Vec<LayerType> = kernels
            .iter()
            .filter(|k| k.phase == Phase::Forward)
            .map(|k| k.layer)
            .collect();
        // Full recomputation rebuilds one layer's activations at a time for its backward;
        // otherwise what a layer keeps is already counted.
        let full = self.recompute == Recompute::Full && layers > 0;
        let per_layer = if full { 1.0 / layers as f64 } else { 0.0 };
        for part in &mut self.parts {
            part.rebuilt_bytes *= per_layer;
            part.rebuilt_replicated_bytes *= per_layer;
        }
        let rebuilt: f64 = self.parts.iter().map(|p| p.rebuilt_bytes).sum();
        let rebuilt_replicated: f64 = self.parts.iter().map(|p| p.rebuilt_replicated_bytes).sum();
        let layer_parts = self
            .parts
            .into_iter()
            .filter(|p| present.contains(&p.layer))
            .collect();
        Graph {
            name,
            kernels,
            parameters: self.parameters,
            samples,
            tokens,
            memory: Footprint {
                weights_bytes: weights_bytes + sparse_weight_bytes,
                gradients_bytes: p * gradient_b,
                optimizer_state_bytes: p * state,
                activations_bytes: self.saved_bytes,
                replicated_activations_bytes: self.replicated_saved_bytes,
                rebuilt_bytes: rebuilt,
                rebuilt_replicated_bytes: rebuilt_replicated,
            },
            layers,
            boundary_bytes,
            parameters_by_position: self.parameters_by_position,
            expert_parameters: self.expert_parameters,
            trainable_share: 1.0,
            trainable_layers: layers,
            table_state_bytes: 0.0,
            trains: true,
            optimizer_state_per_parameter_bytes: state,
            precisions: roles,
            experts: 1,
            heads: 0,
            attention: None,
            parallel_blocks: false,
            layer_parts,
            part_of: None,
            host_tables: Vec::new(),
            served: false,
            adapter_parameters: self.adapter_parameters,
            adapter_replicated: self.adapter_replicated,
            tied_parameters: self.tied_parameters,
        }
    }
}

fn optimizer_name(optimizer: Optimizer) -> &'static str {
    match optimizer {
        Optimizer::Adam => "adam",
        Optimizer::Sgd => "sgd",
    }
}

/// Optimizer state per parameter: the moments in `optimizer_state`, plus a master copy in
/// it when the working weights are narrower (mixed precision, Micikevicius et al. 2018).
pub fn optimizer_state_bytes(optimizer: Optimizer, roles: Precisions) -> f64 {
    let moments = match optimizer {
        Optimizer::Adam => 2.0,
        Optimizer::Sgd => 1.0,
    };
    moments * roles.optimizer_state.bytes() + roles.master_bytes()
}
