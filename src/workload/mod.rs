//! Workloads (DeepFlow Sec. 4.1 and 6; MAD Max Sec. 3 and 4.2): what one training iteration
//! computes, read from `workloads/*.yaml` and lowered to a [`Graph`] of kernels.
//!
//! Four kinds, chosen by the file's `kind` key:
//! - `gemm`: one matrix product, exactly `{version, kind, m, k, n, precision}`;
//! - `lstm_lm`: the LSTM language model of DeepFlow Sec. 9;
//! - `transformer`: a decoder-only language model (GPT-3, LLaMA, Megatron);
//! - `dlrm`: a recommendation model with embedding tables, MLPs and feature interaction.

mod graph;
pub mod inference;

use std::path::Path;

use serde::Serialize;

pub use graph::{
    optimizer_state_bytes, Footprint, Graph, Kernel, KernelClass, Op, Phase, Position, Split,
};

use crate::config::raw::{
    DlrmRaw, GemmRaw, LstmRaw, MoeRaw, TableGroupRaw, TransformerRaw, WorkloadHeader,
};
use crate::config::{parse_yaml, Checker, ConfigError, Source};
use crate::domain::{EmbeddingOptimizer, Interaction, Optimizer, Precision, Recompute};
use graph::Builder;

/// A checked workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Gemm(Gemm),
    LstmLm(Lstm),
    Transformer(Transformer),
    Dlrm(Dlrm),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemm {
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub precision: Precision,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lstm {
    pub name: String,
    pub hidden: u64,
    pub batch: u64,
    pub vocab: u64,
    pub layers: u64,
    pub sequence: u64,
    pub gates: u64,
    pub projection: Option<u64>,
    pub precision: Precision,
    pub optimizer: Optimizer,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transformer {
    pub name: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn_hidden: u64,
    pub gated_ffn: bool,
    pub sequence: u64,
    pub vocab: u64,
    pub global_batch: u64,
    pub precision: Precision,
    pub recompute: Recompute,
    pub tie_embeddings: bool,
    pub optimizer: Optimizer,
    /// Inference instead of training.
    pub inference: Option<inference::InferenceSpec>,
    /// Mixture-of-experts feed-forward.
    pub moe: Option<Moe>,
    /// Fine-tuning: the last this-many layers (and the head) train, the rest are frozen.
    pub trainable_layers: Option<u64>,
}

impl Transformer {
    fn layer_shape(&self) -> LayerShape {
        LayerShape {
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            ffn_hidden: self.ffn_hidden,
            gated_ffn: self.gated_ffn,
            moe: self.moe,
        }
    }
}

/// A mixture-of-experts feed-forward (GShard; Switch Transformer).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moe {
    pub experts: u64,
    pub top_k: u64,
    pub capacity_factor: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dlrm {
    pub name: String,
    pub batch: u64,
    pub dense_features: u64,
    pub bottom_mlp: Vec<u64>,
    pub top_mlp: Vec<u64>,
    pub embeddings: Vec<TableGroup>,
    pub interaction: Interaction,
    pub precision: Precision,
    pub embedding_precision: Precision,
    /// Precision of the pooled embeddings as they are exchanged.
    pub pooled_precision: Precision,
    pub optimizer: Optimizer,
    /// The tables' optimizer, fused into their backward.
    pub embedding_optimizer: EmbeddingOptimizer,
    /// Transformer feature interaction (`interaction: transformer`).
    pub transformer: Option<FeatureTransformer>,
    /// Mixture of experts on the top MLP's second and third layers.
    pub moe: Option<Moe>,
}

/// Transformer layers over a DLRM's feature vectors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FeatureTransformer {
    pub layers: u64,
    pub sequence: u64,
    pub hidden: u64,
    pub heads: u64,
    pub ffn_hidden: u64,
}

/// One transformer layer's shape, shared by language models and DLRM feature interaction.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LayerShape {
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    ffn_hidden: u64,
    gated_ffn: bool,
    moe: Option<Moe>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableGroup {
    pub tables: u64,
    pub rows: u64,
    pub dim: u64,
    pub lookups_per_sample: u64,
}

const KINDS: &str = "gemm, lstm_lm, transformer, dlrm";

impl Workload {
    /// Reads and checks a workload file.
    pub fn load(source: Source, path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        Self::from_yaml(&file, &source.read(path)?)
    }

    /// Parses and checks workload YAML text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let header: WorkloadHeader = parse_yaml(file, text)?;
        let check = Checker { file };
        check.version(header.version)?;
        let stem = Path::new(file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match header.kind.as_str() {
            "gemm" => {
                let raw: GemmRaw = parse_yaml(file, text)?;
                Ok(Workload::Gemm(Gemm {
                    m: check.positive_count("m", raw.m)?,
                    k: check.positive_count("k", raw.k)?,
                    n: check.positive_count("n", raw.n)?,
                    precision: raw.precision,
                }))
            }
            "lstm_lm" => lstm(&check, parse_yaml(file, text)?, stem),
            "transformer" => transformer(&check, parse_yaml(file, text)?, stem),
            "dlrm" => dlrm(&check, parse_yaml(file, text)?, stem),
            other => Err(ConfigError::invalid(
                file,
                "kind",
                other,
                format!("one of {KINDS}"),
            )),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Workload::Gemm(g) => format!("gemm {}x{}x{} {}", g.m, g.k, g.n, g.precision.name()),
            Workload::LstmLm(w) => w.name.clone(),
            Workload::Transformer(w) => w.name.clone(),
            Workload::Dlrm(w) => w.name.clone(),
        }
    }

    /// Every precision the workload computes in (the architecture must support each).
    pub fn precisions(&self) -> Vec<(&'static str, Precision)> {
        match self {
            Workload::Gemm(g) => vec![("precision", g.precision)],
            Workload::LstmLm(w) => vec![("precision", w.precision)],
            Workload::Transformer(w) => vec![("precision", w.precision)],
            Workload::Dlrm(w) => vec![("precision", w.precision)],
        }
    }

    /// Lowers the workload to its kernels.
    pub fn graph(&self) -> Graph {
        match self {
            Workload::Gemm(g) => gemm_graph(g),
            Workload::LstmLm(w) => lstm_graph(w),
            Workload::Transformer(w) => transformer_graph(w),
            Workload::Dlrm(w) => dlrm_graph(w),
        }
    }
}

fn lstm(check: &Checker, raw: LstmRaw, stem: String) -> Result<Workload, ConfigError> {
    Ok(Workload::LstmLm(Lstm {
        name: raw.name.unwrap_or(stem),
        hidden: check.positive_count("hidden", raw.hidden)?,
        batch: check.positive_count("batch", raw.batch)?,
        vocab: check.positive_count("vocab", raw.vocab)?,
        layers: check.positive_count("layers", raw.layers)?,
        sequence: check.positive_count("sequence", raw.sequence)?,
        gates: check.positive_count("gates", raw.gates.unwrap_or(4))?,
        projection: raw
            .projection
            .map(|p| check.positive_count("projection", p))
            .transpose()?,
        precision: raw.precision,
        optimizer: raw.optimizer,
    }))
}

fn transformer(
    check: &Checker,
    raw: TransformerRaw,
    stem: String,
) -> Result<Workload, ConfigError> {
    let (hidden, heads) = hidden_and_heads(check, "", raw.hidden, raw.heads)?;
    let kv_heads = check.positive_count("kv_heads", raw.kv_heads.unwrap_or(heads))?;
    if heads % kv_heads != 0 {
        return Err(ConfigError::invalid(
            check.file,
            "kv_heads",
            kv_heads,
            format!("a divisor of heads ({heads})"),
        ));
    }
    Ok(Workload::Transformer(Transformer {
        name: raw.name.unwrap_or(stem),
        hidden,
        layers: check.positive_count("layers", raw.layers)?,
        heads,
        kv_heads,
        ffn_hidden: check.positive_count("ffn_hidden", raw.ffn_hidden)?,
        gated_ffn: raw.gated_ffn,
        sequence: check.positive_count("sequence", raw.sequence)?,
        vocab: check.positive_count("vocab", raw.vocab)?,
        global_batch: check.positive_count("global_batch", raw.global_batch)?,
        precision: raw.precision,
        recompute: raw.recompute,
        tie_embeddings: raw.tie_embeddings,
        optimizer: raw.optimizer,
        trainable_layers: match raw.fine_tuning {
            None => None,
            Some(f) => {
                let layers = raw.layers;
                if f.trainable_layers > layers {
                    return Err(ConfigError::invalid(
                        check.file,
                        "fine_tuning.trainable_layers",
                        f.trainable_layers,
                        format!("at most layers ({layers})"),
                    ));
                }
                Some(f.trainable_layers)
            }
        },
        moe: raw.moe.map(|m| moe(check, m)).transpose()?,
        inference: match raw.inference {
            None => None,
            Some(i) => Some(inference::InferenceSpec {
                batch: check.positive_count("inference.batch", i.batch)?,
                prompt_tokens: check.positive_count("inference.prompt_tokens", i.prompt_tokens)?,
                output_tokens: check.positive_count("inference.output_tokens", i.output_tokens)?,
            }),
        },
    }))
}

/// Checks a layer width and its attention heads (`prefix` names the section).
fn hidden_and_heads(
    check: &Checker,
    prefix: &str,
    hidden: u64,
    heads: u64,
) -> Result<(u64, u64), ConfigError> {
    let hidden = check.positive_count(&format!("{prefix}hidden"), hidden)?;
    let heads = check.positive_count(&format!("{prefix}heads"), heads)?;
    if hidden % heads != 0 {
        return Err(ConfigError::invalid(
            check.file,
            format!("{prefix}heads"),
            heads,
            format!("a divisor of {prefix}hidden ({hidden})"),
        ));
    }
    Ok((hidden, heads))
}

/// Checks a mixture-of-experts section.
fn moe(check: &Checker, m: MoeRaw) -> Result<Moe, ConfigError> {
    let experts = check.positive_count("moe.experts", m.experts)?;
    let top_k = check.positive_count("moe.top_k", m.top_k)?;
    if top_k > experts {
        return Err(ConfigError::invalid(
            check.file,
            "moe.top_k",
            top_k,
            format!("at most moe.experts ({experts}): a token picks top_k of the experts"),
        ));
    }
    let capacity_factor = match m.capacity_factor {
        Some(c) => check.within("moe.capacity_factor", c, 1.0, 8.0)?,
        None => 1.25, // Switch Transformer's default training capacity factor
    };
    Ok(Moe {
        experts,
        top_k,
        capacity_factor,
    })
}

fn dlrm(check: &Checker, raw: DlrmRaw, stem: String) -> Result<Workload, ConfigError> {
    let mlp = |name: &str, layers: &[u64]| -> Result<Vec<u64>, ConfigError> {
        if layers.is_empty() {
            return Err(ConfigError::invalid(
                check.file,
                name,
                "[]",
                "at least one layer width",
            ));
        }
        layers
            .iter()
            .enumerate()
            .map(|(i, &w)| check.positive_count(&format!("{name}[{i}]"), w))
            .collect()
    };
    let bottom_mlp = mlp("bottom_mlp", &raw.bottom_mlp)?;
    let top_mlp = mlp("top_mlp", &raw.top_mlp)?;
    if raw.embeddings.is_empty() {
        return Err(ConfigError::invalid(
            check.file,
            "embeddings",
            "[]",
            "at least one group of embedding tables",
        ));
    }
    let mut embeddings = Vec::new();
    for (i, g) in raw.embeddings.iter().enumerate() {
        let TableGroupRaw {
            tables,
            rows,
            dim,
            lookups_per_sample,
        } = *g;
        let field = |f: &str| format!("embeddings[{i}].{f}");
        embeddings.push(TableGroup {
            tables: check.positive_count(&field("tables"), tables)?,
            rows: check.positive_count(&field("rows"), rows)?,
            dim: check.positive_count(&field("dim"), dim)?,
            lookups_per_sample: check
                .positive_count(&field("lookups_per_sample"), lookups_per_sample)?,
        });
    }
    let last = *bottom_mlp.last().expect("checked non-empty");
    for (i, g) in embeddings.iter().enumerate() {
        if g.dim != last {
            return Err(ConfigError::invalid(
                check.file,
                format!("embeddings[{i}].dim"),
                g.dim,
                format!(
                    "the width of the last bottom_mlp layer ({last}): feature interaction \
                     combines vectors of one size"
                ),
            ));
        }
    }
    let transformer = match (raw.interaction, raw.transformer) {
        (Interaction::Transformer, Some(t)) => {
            let (hidden, heads) = hidden_and_heads(check, "transformer.", t.hidden, t.heads)?;
            Some(FeatureTransformer {
                layers: check.positive_count("transformer.layers", t.layers)?,
                sequence: check.positive_count("transformer.sequence", t.sequence)?,
                hidden,
                heads,
                ffn_hidden: check.positive_count("transformer.ffn_hidden", t.ffn_hidden)?,
            })
        }
        (Interaction::Transformer, None) => {
            return Err(ConfigError::invalid(
                check.file,
                "transformer",
                "(missing)",
                "a transformer: {layers, sequence, hidden, heads, ffn_hidden} section for \
                 interaction: transformer",
            ))
        }
        (other, Some(_)) => {
            return Err(ConfigError::invalid(
                check.file,
                "transformer",
                format!("given with interaction: {other:?}").to_lowercase(),
                "interaction: transformer (the section configures that interaction)",
            ))
        }
        (_, None) => None,
    };
    let moe = raw.moe.map(|m| moe(check, m)).transpose()?;
    if moe.is_some() && !(top_mlp.len() >= 3 && top_mlp[1] > top_mlp[0].max(top_mlp[2])) {
        return Err(ConfigError::invalid(
            check.file,
            "top_mlp",
            format!("{top_mlp:?}"),
            "at least 3 layers with moe, the second wider than the first and third: that pair \
             (up, then down) becomes the experts",
        ));
    }
    if let Some(t) = transformer {
        let features = 1 + embeddings.iter().map(|g| g.tables).sum::<u64>();
        if t.sequence > features {
            return Err(ConfigError::invalid(
                check.file,
                "transformer.sequence",
                t.sequence,
                format!("at most the {features} feature vectors (tables + 1) it groups"),
            ));
        }
    }
    Ok(Workload::Dlrm(Dlrm {
        transformer,
        moe,
        name: raw.name.unwrap_or(stem),
        batch: check.positive_count("batch", raw.batch)?,
        dense_features: check.positive_count("dense_features", raw.dense_features)?,
        bottom_mlp,
        top_mlp,
        embeddings,
        interaction: raw.interaction,
        precision: raw.precision,
        embedding_precision: raw.embedding_precision,
        pooled_precision: raw.pooled_precision.unwrap_or(raw.embedding_precision),
        optimizer: raw.optimizer,
        embedding_optimizer: raw.embedding_optimizer,
    }))
}

// ---------------------------------------------------------------- lowering

fn gemm_graph(g: &Gemm) -> Graph {
    let b = g.precision.bytes();
    let (m, k, n) = (g.m as f64, g.k as f64, g.n as f64);
    Graph {
        name: format!("gemm {}x{}x{}", g.m, g.k, g.n),
        kernels: vec![Kernel {
            name: "gemm".into(),
            class: KernelClass::Gemm,
            phase: Phase::Forward,
            precision: g.precision,
            count: 1,
            op: Op::Gemm {
                batch: 1,
                m: g.m,
                k: g.k,
                n: g.n,
            },
            split: Split::Replicated,
            position: Position::Head,
        }],
        parameters: 0.0,
        samples: 1.0,
        tokens: 1.0,
        memory: Footprint {
            // Inputs and output; nothing is trained.
            activations_bytes: (m * k + k * n + m * n) * b,
            ..Footprint::default()
        },
        layers: 0,
        boundary_bytes: 0.0,
        parameters_by_position: [0.0; 3],
        expert_parameters: 0.0,
        table_state_bytes: 0.0,
        trainable_share: 1.0,
        trainable_layers: 0,
    }
}

/// LSTM language model: embedding lookup, `layers` stacked cells unrolled over `sequence`
/// steps (one GEMM of [x_t, h_{t-1}] against all gates per step, then the cell's
/// element-wise work), and a softmax classifier over the vocabulary for every token.
fn lstm_graph(w: &Lstm) -> Graph {
    let mut g = Builder::new(w.precision, Recompute::None);
    let bytes = w.precision.bytes();
    // Width of the recurrent state fed back and to the next layer.
    let state = w.projection.unwrap_or(w.hidden);
    let tokens = w.batch * w.sequence;
    let steps = w.layers * w.sequence;
    let (b, d) = (w.batch as f64, w.hidden as f64);
    g.embedding(
        "embedding lookup",
        tokens as f64,
        state as f64 * bytes,
        tokens as f64 * state as f64 * bytes,
        w.vocab as f64 * state as f64 * bytes,
        0.0,
        w.precision,
    );
    g.dense_parameters(w.vocab as f64 * state as f64);
    g.set_in_layer(true);
    g.linear(
        "lstm gates",
        KernelClass::Gemm,
        steps,
        w.batch,
        2 * state,
        w.gates * w.hidden,
        w.layers,
        false,
    );
    // Cell update: sigmoid/tanh on the gates, c = f*c + i*g, h = o*tanh(c). DeepFlow's LSTM
    // model (model-LSTM.yaml) counts 5 non-linear and 8 add/multiply operations per element.
    g.pointwise(
        "lstm cell",
        KernelClass::Pointwise,
        steps,
        b * d,
        w.gates as f64 + 1.0,
        13.0,
        w.gates as f64 + 1.0,
    );
    if let Some(p) = w.projection {
        g.linear(
            "lstm projection",
            KernelClass::Gemm,
            steps,
            w.batch,
            w.hidden,
            p,
            w.layers,
            false,
        );
    }
    g.set_in_layer(false);
    g.linear(
        "softmax projection",
        KernelClass::Gemm,
        1,
        tokens,
        state,
        w.vocab,
        1,
        false,
    );
    g.pointwise(
        "softmax cross-entropy",
        KernelClass::Pointwise,
        1,
        tokens as f64 * w.vocab as f64,
        1.0,
        5.0,
        1.0,
    );
    let boundary = tokens as f64 * state as f64 * bytes;
    g.finish(
        w.name.clone(),
        w.optimizer,
        b,
        tokens as f64,
        0.0,
        w.layers,
        boundary,
    )
}

/// Decoder-only transformer (GPT-style, pre-norm), Megatron's kernel decomposition.
fn transformer_graph(w: &Transformer) -> Graph {
    let g = transformer_pass(w, w.global_batch, w.sequence, w.sequence);
    match w.trainable_layers {
        Some(k) => fine_tune(g, w.layers, k),
        None => g,
    }
}

/// Fine-tuning with the first `layers - trainable` layers and the embedding frozen: no
/// backward work below the lowest trainable layer, no weight gradients, optimizer state or
/// gradient traffic for frozen weights, no activations kept for frozen layers.
fn fine_tune(mut g: Graph, layers: u64, trainable: u64) -> Graph {
    let share = trainable as f64 / layers.max(1) as f64;
    let frozen_layers = g.parameters_by_position[Position::Layer as usize] * (1.0 - share);
    let frozen = g.parameters_by_position[Position::Head as usize] + frozen_layers;
    let all: f64 = g.parameters_by_position.iter().sum();
    let trainable_share = if all > 0.0 { (all - frozen) / all } else { 0.0 };
    g.kernels.retain_mut(|k| {
        let backward = matches!(
            k.phase,
            Phase::Recompute | Phase::BackwardInput | Phase::BackwardWeight
        );
        match (backward, k.position) {
            (true, Position::Head) => false,
            (true, Position::Layer) => {
                k.count = k.count / layers.max(1) * trainable;
                k.count > 0
            }
            _ => true,
        }
    });
    for k in g.kernels.iter_mut().filter(|k| k.phase == Phase::Update) {
        if let Op::Stream {
            read_bytes,
            write_bytes,
            flops,
        } = &mut k.op
        {
            *read_bytes *= trainable_share;
            *write_bytes *= trainable_share;
            *flops *= trainable_share;
        }
    }
    g.memory.gradients_bytes *= trainable_share;
    g.memory.optimizer_state_bytes *= trainable_share;
    g.memory.activations_bytes *= share;
    g.memory.replicated_activations_bytes *= share;
    g.trainable_share = trainable_share;
    g.trainable_layers = trainable;
    g
}

/// The transformer's kernels for `batch` sequences of `queries` new tokens each attending
/// to `keys` positions: a training step (queries = keys = sequence), a prefill (the
/// prompt), or one decode step (one query against the KV cache).
fn transformer_pass(w: &Transformer, batch: u64, queries: u64, keys: u64) -> Graph {
    let mut g = Builder::new(w.precision, w.recompute);
    let bytes = w.precision.bytes();
    let (s, h, l) = (queries, w.hidden, w.layers);
    let tokens = batch * s;
    let t = tokens as f64;

    g.split = Split::Embedding;
    g.embedding(
        "token embedding",
        t,
        h as f64 * bytes,
        t * h as f64 * bytes,
        w.vocab as f64 * h as f64 * bytes,
        0.0,
        w.precision,
    );
    g.dense_parameters(w.vocab as f64 * h as f64);
    g.set_in_layer(true);
    g.split = Split::Replicated;
    g.layer_input(t * h as f64 * bytes, l);
    transformer_layers(&mut g, &w.layer_shape(), l, batch, s, keys, bytes);
    // One final norm.
    g.dense_parameters((2 * h) as f64);
    g.set_in_layer(false);
    layer_norm(&mut g, "final layer norm", 1, t * h as f64);
    g.split = Split::Column;
    g.linear("logits", KernelClass::Gemm, 1, tokens, h, w.vocab, 1, false);
    g.split = Split::Sharded;
    if w.tie_embeddings {
        // The logits reuse the embedding matrix: count its parameters once.
        g.dense_parameters(-(w.vocab as f64 * h as f64));
    }
    g.pointwise(
        "softmax cross-entropy",
        KernelClass::Pointwise,
        1,
        t * w.vocab as f64,
        1.0,
        5.0,
        1.0,
    );
    g.finish(
        w.name.clone(),
        w.optimizer,
        batch as f64,
        t,
        0.0,
        l,
        t * h as f64 * bytes,
    )
}

/// `l` transformer layers over `batch` sequences of `s` queries attending to `keys` keys:
/// norms, attention, residuals and the (dense or mixture-of-experts) feed-forward.
fn transformer_layers(
    g: &mut Builder,
    w: &LayerShape,
    l: u64,
    batch: u64,
    s: u64,
    keys: u64,
    bytes: f64,
) {
    let h = w.hidden;
    let tokens = batch * s;
    let t = tokens as f64;
    let head_dim = h / w.heads;
    let kv = w.kv_heads * head_dim;
    layer_norm(g, "layer norm (attention)", l, t * h as f64);
    g.split = Split::Column;
    g.linear(
        "qkv projection",
        KernelClass::Gemm,
        l,
        tokens,
        h,
        h + 2 * kv,
        l,
        true,
    );
    let bh = batch * w.heads;
    // Scores need Q (every head) and K (one per key/value head); the context needs the
    // softmax output (kept by the softmax) and V (one per key/value head).
    let q_bytes = t * h as f64 * bytes;
    let kv_bytes = (batch * keys) as f64 * kv as f64 * bytes;
    g.split = Split::Sharded;
    g.batched(
        "attention scores",
        KernelClass::Attention,
        l,
        bh,
        s,
        head_dim,
        keys,
        q_bytes + kv_bytes,
    );
    let scores = bh as f64 * (s * keys) as f64;
    g.pointwise(
        "attention softmax",
        KernelClass::Attention,
        l,
        scores,
        1.0,
        5.0,
        1.0,
    );
    g.batched(
        "attention context",
        KernelClass::Attention,
        l,
        bh,
        s,
        keys,
        head_dim,
        kv_bytes,
    );
    g.split = Split::Row;
    g.linear(
        "attention output",
        KernelClass::Gemm,
        l,
        tokens,
        h,
        h,
        l,
        true,
    );
    g.split = Split::Replicated;
    g.pointwise(
        "residual add (attention)",
        KernelClass::Pointwise,
        l,
        t * h as f64,
        2.0,
        1.0,
        0.0,
    );
    layer_norm(g, "layer norm (mlp)", l, t * h as f64);
    match w.moe {
        None => feed_forward(
            g,
            w,
            "mlp",
            l,
            tokens,
            [Split::Column, Split::Sharded, Split::Row],
        ),
        Some(moe) => {
            // The router scores every token against every expert, then each expert takes
            // its capacity of the routed tokens: tokens x top_k x capacity / experts.
            g.split = Split::Replicated;
            g.linear(
                "router",
                KernelClass::Gemm,
                l,
                tokens,
                h,
                moe.experts,
                l,
                true,
            );
            g.pointwise(
                "router softmax and top-k",
                KernelClass::Pointwise,
                l,
                t * moe.experts as f64,
                1.0,
                6.0,
                1.0,
            );
            let e = moe.experts;
            let per_expert =
                ((t * moe.top_k as f64 * moe.capacity_factor) / e as f64).ceil() as u64;
            feed_forward(g, w, "expert", l * e, per_expert.max(1), [Split::Expert; 3]);
        }
    }
    g.split = Split::Replicated;
    g.pointwise(
        "residual add (mlp)",
        KernelClass::Pointwise,
        l,
        t * h as f64,
        2.0,
        1.0,
        0.0,
    );
    // Two norm scales (and shifts) per layer.
    g.dense_parameters((4 * h * l) as f64);
}

/// A layer norm over `elements`, `count` times (statistics, scale and shift: ~8 FLOPs per
/// element, input kept for the backward).
fn layer_norm(g: &mut Builder, name: &str, count: u64, elements: f64) {
    g.pointwise(name, KernelClass::Pointwise, count, elements, 1.0, 8.0, 1.0);
}

/// A transformer feed-forward, `count` times over `m` tokens: up projection (two for a
/// gated one), activation, down projection, split for tensor parallelism as `splits` says.
fn feed_forward(
    g: &mut Builder,
    w: &LayerShape,
    name: &str,
    count: u64,
    m: u64,
    splits: [Split; 3],
) {
    let (h, f) = (w.hidden, w.ffn_hidden);
    let up = if w.gated_ffn { 2 * f } else { f };
    let (act, inputs) = if w.gated_ffn {
        ("swiglu", 2.0)
    } else {
        ("gelu", 1.0)
    };
    g.split = splits[0];
    g.linear(
        &format!("{name} up"),
        KernelClass::Gemm,
        count,
        m,
        h,
        up,
        count,
        true,
    );
    g.split = splits[1];
    g.pointwise(
        act,
        KernelClass::Pointwise,
        count,
        m as f64 * f as f64,
        inputs,
        8.0,
        inputs,
    );
    g.split = splits[2];
    g.linear(
        &format!("{name} down"),
        KernelClass::Gemm,
        count,
        m,
        f,
        h,
        count,
        true,
    );
}

/// An MLP of linear layers with an element-wise activation after each, on `batch` rows
/// of `width` features; returns the output width.
/// Tensor parallelism pairs the layers as Megatron pairs an MLP's two: a column-parallel
/// layer, then a row-parallel one whose partial sums are all-reduced; an odd last layer is
/// replicated. A first layer that narrows its input (DLRM's top MLP over the concatenated
/// embeddings) is row-parallel on its own, its input arriving split by features: its
/// narrow output is all-reduced instead of its wide input gradient.
fn mlp(g: &mut Builder, name: &str, batch: u64, mut width: u64, layers: &[u64]) -> u64 {
    let row_first = layers.first().is_some_and(|&out| width > out);
    let offset = usize::from(row_first);
    let paired = offset + (layers.len() - offset) / 2 * 2;
    for (i, &out) in layers.iter().enumerate() {
        g.split = match i {
            0 if row_first => Split::Row,
            _ if i >= paired => Split::Replicated,
            _ if (i - offset) % 2 == 0 => Split::Column,
            _ => Split::Row,
        };
        g.linear(
            &format!("{name} mlp {i}"),
            KernelClass::Gemm,
            1,
            batch,
            width,
            out,
            1,
            false,
        );
        g.split = if g.split == Split::Column {
            Split::Sharded
        } else {
            Split::Replicated
        };
        g.pointwise(
            &format!("{name} activation {i}"),
            KernelClass::Pointwise,
            1,
            (batch * out) as f64,
            1.0,
            1.0,
            1.0,
        );
        width = out;
    }
    g.split = Split::Replicated;
    width
}

/// DLRM: bottom MLP on dense features, pooled embedding lookups, feature interaction, top
/// MLP, loss.
fn dlrm_graph(w: &Dlrm) -> Graph {
    let mut g = Builder::new(w.precision, Recompute::None);
    let b = w.batch;
    let eb = w.embedding_precision.bytes();
    let dim = mlp(&mut g, "bottom", b, w.dense_features, &w.bottom_mlp);
    let mut features = 1;
    let mut table_bytes = 0.0;
    let mut table_state = 0.0;
    g.split = Split::Table;
    for (i, t) in w.embeddings.iter().enumerate() {
        let rows = (b * t.tables * t.lookups_per_sample) as f64;
        let bytes = (t.tables * t.rows * t.dim) as f64 * eb;
        table_bytes += bytes;
        g.embedding(
            &format!("embedding bags {i} ({} tables)", t.tables),
            rows,
            t.dim as f64 * eb,
            (b * t.tables * t.dim) as f64 * w.pooled_precision.bytes(),
            bytes,
            (t.tables * t.rows * t.dim) as f64,
            w.embedding_precision,
        );
        // The fused optimizer reads and writes the touched rows' state.
        let state_row = w.embedding_optimizer.state_bytes_per_row(t.dim);
        let state = (t.tables * t.rows) as f64 * state_row;
        g.fused_update_state(rows * state_row, state);
        table_state += state;
        features += t.tables;
    }
    g.split = Split::Replicated;
    let top_in = match w.interaction {
        Interaction::Dot => {
            let inputs = (b * features * dim) as f64 * w.precision.bytes();
            g.batched(
                "feature interaction",
                KernelClass::Gemm,
                1,
                b,
                features,
                dim,
                features,
                inputs,
            );
            features * (features - 1) / 2 + dim
        }
        Interaction::Concat => {
            // A narrowing first top layer is row-parallel: each tensor-parallel device
            // assembles only its slice of the features.
            if w.top_mlp.first().is_some_and(|&out| features * dim > out) {
                g.split = Split::Sharded;
            }
            g.pointwise(
                "feature concat",
                KernelClass::Pointwise,
                1,
                (b * features * dim) as f64,
                1.0,
                0.0,
                0.0,
            );
            features * dim
        }
        Interaction::Transformer => {
            let t = w
                .transformer
                .expect("checked: interaction transformer has its section");
            let (s, h) = (t.sequence, t.hidden);
            // The feature vectors are summed into `sequence` tokens (MAD Max Sec. 5:
            // "downsampled sequence length of 80"), projected to the layers' width.
            let per_token = features as f64 / s as f64;
            g.pointwise(
                "feature grouping",
                KernelClass::Pointwise,
                1,
                (b * s * dim) as f64,
                per_token,
                per_token,
                0.0,
            );
            g.linear(
                "token projection",
                KernelClass::Gemm,
                1,
                b * s,
                dim,
                h,
                1,
                false,
            );
            let shape = LayerShape {
                hidden: h,
                heads: t.heads,
                kv_heads: t.heads,
                ffn_hidden: t.ffn_hidden,
                gated_ffn: false,
                moe: None,
            };
            transformer_layers(&mut g, &shape, t.layers, b, s, s, w.precision.bytes());
            g.split = Split::Replicated;
            s * h
        }
    };
    g.split = Split::Replicated;
    let width = match w.moe {
        None => mlp(&mut g, "top", b, top_in, &w.top_mlp),
        Some(moe) => {
            // The first top layer, then the pair after it as experts: a router picks
            // top_k of them per sample; each expert takes its capacity of the routed
            // samples (samples x top_k x capacity / experts); the rest of the MLP follows.
            let first = mlp(&mut g, "top", b, top_in, &w.top_mlp[..1]);
            let e = moe.experts;
            g.linear("router", KernelClass::Gemm, 1, b, first, e, 1, false);
            g.pointwise(
                "router softmax and top-k",
                KernelClass::Pointwise,
                1,
                (b * e) as f64,
                1.0,
                6.0,
                1.0,
            );
            let per_expert =
                ((b as f64 * moe.top_k as f64 * moe.capacity_factor) / e as f64).ceil() as u64;
            let (up, down) = (w.top_mlp[1], w.top_mlp[2]);
            g.split = Split::Expert;
            g.linear(
                "expert up",
                KernelClass::Gemm,
                e,
                per_expert,
                first,
                up,
                e,
                false,
            );
            g.pointwise(
                "expert activation",
                KernelClass::Pointwise,
                e,
                (per_expert * up) as f64,
                1.0,
                1.0,
                1.0,
            );
            g.linear(
                "expert down",
                KernelClass::Gemm,
                e,
                per_expert,
                up,
                down,
                e,
                false,
            );
            g.split = Split::Replicated;
            g.pointwise(
                "expert combine",
                KernelClass::Pointwise,
                1,
                (b * down) as f64,
                moe.top_k as f64,
                2.0 * moe.top_k as f64,
                moe.top_k as f64,
            );
            mlp(&mut g, "top tail", b, down, &w.top_mlp[3..])
        }
    };
    g.pointwise(
        "loss",
        KernelClass::Pointwise,
        1,
        (b * width) as f64,
        1.0,
        5.0,
        1.0,
    );
    let mut graph = g.finish(
        w.name.clone(),
        w.optimizer,
        b as f64,
        b as f64,
        table_bytes,
        0,
        0.0,
    );
    graph.table_state_bytes = table_state;
    graph.memory.optimizer_state_bytes += table_state;
    graph
}
