//! Recommendation models (DLRM; MAD Max Table 2, Zion, TPU v4 Sec. 3.5): embedding tables,
//! bottom and top MLPs, dot, concatenation or transformer feature interaction, and
//! mixture-of-experts top MLPs.

use serde::Serialize;

use super::graph::{Builder, Graph, HostTables, KernelClass, LayerType, Phase, Split};
use super::transformer::{hidden_and_heads, moe, transformer_layers, LayerShape, Moe};
use super::Workload;
use crate::config::raw::{DlrmRaw, FeatureTransformerRaw, TableGroupRaw};
use crate::config::{Checker, ConfigError};
use crate::domain::{EmbeddingOptimizer, Interaction, Optimizer, Precision, Precisions, Recompute};

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
    /// Each tensor role's precision in the dense layers (what `precision` implies unless
    /// `precisions:` says).
    pub precisions: Precisions,
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
    /// Tables of each group kept in host memory (none unless a system's `host:` places
    /// them there: [`Dlrm::with_host_tables`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_tables: Vec<u64>,
    /// Serving: the queries the system serves together, forward only (`None`: training).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference: Option<DlrmInference>,
}

/// A recommendation model served: batches of `batch` queries through the forward pass
/// (lookups, the pooled embeddings' all-to-all, the MLPs), nothing kept for a backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DlrmInference {
    pub batch: u64,
}

impl Dlrm {
    /// The same model with `per_group[i]` of group i's tables in host memory (at most the
    /// group's tables).
    pub fn with_host_tables(&self, per_group: &[u64]) -> Dlrm {
        let host_tables = self
            .embeddings
            .iter()
            .enumerate()
            .map(|(i, g)| per_group.get(i).copied().unwrap_or(0).min(g.tables))
            .collect::<Vec<u64>>();
        Dlrm {
            host_tables: if host_tables.iter().all(|&h| h == 0) {
                Vec::new()
            } else {
                host_tables
            },
            ..self.clone()
        }
    }

    /// Bytes one table of group `i` holds on a device: its rows, and in training their
    /// optimizer state.
    pub fn table_bytes(&self, i: usize) -> f64 {
        let g = &self.embeddings[i];
        let state = match self.inference {
            None => self.embedding_optimizer.state_bytes_per_row(g.dim),
            Some(_) => 0.0,
        };
        g.rows as f64 * (g.dim as f64 * self.embedding_precision.bytes() + state)
    }

    /// The tables of each group that stay beyond `room_bytes` of device memory when the
    /// hottest tables (most lookups per row and sample) take the room first, whole.
    pub fn tables_beyond(&self, room_bytes: f64) -> Vec<u64> {
        let mut order: Vec<usize> = (0..self.embeddings.len()).collect();
        let heat = |i: usize| {
            let g = &self.embeddings[i];
            g.lookups_per_sample as f64 / g.rows as f64
        };
        order.sort_by(|&a, &b| heat(b).total_cmp(&heat(a)).then(a.cmp(&b)));
        let mut room = room_bytes.max(0.0);
        let mut beyond = vec![0; self.embeddings.len()];
        for i in order {
            let (tables, each) = (self.embeddings[i].tables, self.table_bytes(i));
            let fit = ((room / each).floor() as u64).min(tables);
            room -= fit as f64 * each;
            beyond[i] = tables - fit;
        }
        beyond
    }

    /// Tables of group `i` in host memory.
    pub fn host_tables_of(&self, i: usize) -> u64 {
        self.host_tables.get(i).copied().unwrap_or(0)
    }
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableGroup {
    pub tables: u64,
    pub rows: u64,
    pub dim: u64,
    pub lookups_per_sample: u64,
}

/// Checks the embedding table groups.
fn table_groups(check: &Checker, raw: &[TableGroupRaw]) -> Result<Vec<TableGroup>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::invalid(
            check.file,
            "embeddings",
            "[]",
            "at least one group of embedding tables",
        ));
    }
    let mut embeddings = Vec::new();
    for (i, g) in raw.iter().enumerate() {
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
    Ok(embeddings)
}

/// Checks the `transformer:` section against the interaction it configures.
fn feature_transformer_of(
    check: &Checker,
    interaction: Interaction,
    raw: Option<FeatureTransformerRaw>,
) -> Result<Option<FeatureTransformer>, ConfigError> {
    Ok(match (interaction, raw) {
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
    })
}

pub(super) fn dlrm(check: &Checker, raw: DlrmRaw, stem: String) -> Result<Workload, ConfigError> {
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
    let embeddings = table_groups(check, &raw.embeddings)?;
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
    let transformer = feature_transformer_of(check, raw.interaction, raw.transformer)?;
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
        host_tables: Vec::new(),
        inference: raw
            .inference
            .map(|i| {
                check
                    .positive_count("inference.batch", i.batch)
                    .map(|batch| DlrmInference { batch })
            })
            .transpose()?,
        name: raw.name.unwrap_or(stem),
        batch: check.positive_count("batch", raw.batch)?,
        dense_features: check.positive_count("dense_features", raw.dense_features)?,
        bottom_mlp,
        top_mlp,
        embeddings,
        interaction: raw.interaction,
        precision: raw.precision,
        precisions: super::roles(raw.precision, raw.precisions),
        embedding_precision: raw.embedding_precision,
        pooled_precision: raw.pooled_precision.unwrap_or(raw.embedding_precision),
        optimizer: raw.optimizer,
        embedding_optimizer: raw.embedding_optimizer,
    }))
}

/// An MLP of linear layers with an element-wise activation after each, on `batch` rows
/// of `width` features; returns the output width.
/// Tensor parallelism pairs the layers as Megatron pairs an MLP's two: a column-parallel
/// layer, then a row-parallel one whose partial sums are all-reduced; an odd last layer is
/// replicated. A first layer that narrows its input (DLRM's top MLP over the concatenated
/// embeddings) is row-parallel on its own, its input arriving split by features: its
/// narrow output is all-reduced instead of its wide input gradient.
pub(super) fn mlp(g: &mut Builder, name: &str, batch: u64, mut width: u64, layers: &[u64]) -> u64 {
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

/// The embedding tables, sharded table-wise (`split`: [`Split::Table`], or
/// [`Split::TableWhole`] when the interaction takes every feature): pooled lookups and
/// their fused optimizer update. Tables kept in host memory run no lookup on the devices:
/// their pooled vectors arrive from the hosts ([`HostTables`]) and cross the devices'
/// all-to-all like the others'. Returns the feature vectors (the dense one included), the
/// device tables' bytes and their optimizer state's bytes, and the host-resident groups.
fn embeddings(g: &mut Builder, w: &Dlrm, split: Split) -> (u64, f64, f64, Vec<HostTables>) {
    let b = w.batch;
    let eb = w.embedding_precision.bytes();
    let mut features = 1;
    let mut table_bytes = 0.0;
    let mut table_state = 0.0;
    let mut host = Vec::new();
    g.layer = LayerType::Embedding;
    g.split = split;
    for (i, t) in w.embeddings.iter().enumerate() {
        features += t.tables;
        let state_row = w.embedding_optimizer.state_bytes_per_row(t.dim);
        let on_host = w.host_tables_of(i);
        if on_host > 0 {
            // The hosts hand each device their tables' pooled vectors for every sample
            // (and take their gradients back); the devices exchange them all-to-all as
            // they do their own tables' (Zion: the accelerator fabric; TPU v4: the ICI).
            let pooled = (b * on_host * t.dim) as f64 * w.pooled_precision.bytes();
            g.embedding(
                &format!("host tables' pooled vectors {i} ({on_host} tables)"),
                0.0,
                t.dim as f64 * eb,
                pooled,
                0.0,
                0.0,
                w.embedding_precision,
            );
            host.push(HostTables {
                tables: on_host,
                lookups: (b * on_host * t.lookups_per_sample) as f64,
                row_bytes: t.dim as f64 * eb,
                state_row_bytes: state_row,
                pooled_bytes: (b * on_host * t.dim) as f64 * w.pooled_precision.bytes(),
                table_bytes: (on_host * t.rows * t.dim) as f64 * eb,
                state_bytes: (on_host * t.rows) as f64 * state_row,
            });
        }
        let tables = t.tables - on_host;
        if tables == 0 {
            continue;
        }
        let rows = (b * tables * t.lookups_per_sample) as f64;
        let bytes = (tables * t.rows * t.dim) as f64 * eb;
        table_bytes += bytes;
        g.embedding(
            &format!("embedding bags {i} ({tables} tables)"),
            rows,
            t.dim as f64 * eb,
            (b * tables * t.dim) as f64 * w.pooled_precision.bytes(),
            bytes,
            (tables * t.rows * t.dim) as f64,
            w.embedding_precision,
        );
        // The fused optimizer reads and writes the touched rows' state.
        let state = (tables * t.rows) as f64 * state_row;
        g.fused_update_state(rows * state_row, state);
        table_state += state;
    }
    g.layer = LayerType::Dense;
    (features, table_bytes, table_state, host)
}

/// Whether the interaction takes each tensor-parallel rank's slice of the features alone:
/// a concatenation whose narrowing first top layer is row-parallel. Dot products, feature
/// transformers and a concatenation a column-parallel layer reads take every feature.
fn takes_slices(w: &Dlrm, features: u64, dim: u64) -> bool {
    w.interaction == Interaction::Concat
        && w.top_mlp.first().is_some_and(|&out| features * dim > out)
}

/// The feature vectors the interaction takes: the bottom MLP's output and one pooled
/// vector per table.
fn features_of(w: &Dlrm) -> u64 {
    1 + w.embeddings.iter().map(|t| t.tables).sum::<u64>()
}

/// The feature interaction; returns the top MLP's input width.
fn interaction(g: &mut Builder, w: &Dlrm, features: u64, dim: u64) -> u64 {
    let b = w.batch;
    g.layer = LayerType::Interaction;
    let width = match w.interaction {
        Interaction::Dot => {
            let inputs = (b * features * dim) as f64 * g.storage().bytes();
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
            if takes_slices(w, features, dim) {
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
        Interaction::Transformer => feature_transformer(g, w, features, dim),
    };
    g.layer = LayerType::Dense;
    width
}

/// Transformer layers over the feature vectors (DLRM-Transformer, MAD Max Table 2);
/// returns the flattened output width.
fn feature_transformer(g: &mut Builder, w: &Dlrm, features: u64, dim: u64) -> u64 {
    let b = w.batch;
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
        head_dim: h / t.heads,
        kv_heads: t.heads,
        ffn_hidden: t.ffn_hidden,
        gated_ffn: false,
        parallel: false,
        moe: None,
        dropout: false,
        flash: false,
        dropless: false, // no experts in the interaction's layers
        rotary: false,
        lora: None,
    };
    let bytes = g.storage().bytes();
    transformer_layers(g, &shape, t.layers, b, s, s, bytes);
    g.split = Split::Replicated;
    s * h
}

/// A top MLP whose second and third layers are routed experts (DLRM-MoE); returns its
/// output width.
fn expert_top_mlp(g: &mut Builder, w: &Dlrm, moe: &Moe, top_in: u64, served: bool) -> u64 {
    let b = w.batch;
    // The first top layer, then the pair after it as experts: a router picks
    // top_k of them per sample; each expert takes its capacity of the routed
    // samples (samples x top_k x capacity / experts); the rest of the MLP follows.
    let first = mlp(g, "top", b, top_in, &w.top_mlp[..1]);
    let e = moe.experts;
    g.layer = LayerType::Expert;
    g.gemm_input_linears(false);
    g.linear("router", KernelClass::Gemm, 1, b, first, e, 1, false);
    g.gemm_input_linears(true);
    g.pointwise(
        "router softmax and top-k",
        KernelClass::Pointwise,
        1,
        (b * e) as f64,
        1.0,
        6.0,
        1.0,
    );
    // Served, the experts take exactly their routed samples; an expert no sample reaches
    // (a small served batch) is not run.
    let (active, per_expert) = moe.routed(b as f64, served);
    let (up, down) = (w.top_mlp[1], w.top_mlp[2]);
    g.split = Split::Expert;
    g.linear(
        "expert up",
        KernelClass::Gemm,
        active,
        per_expert,
        first,
        up,
        e,
        false,
    );
    g.pointwise(
        "expert activation",
        KernelClass::Pointwise,
        active,
        (per_expert * up) as f64,
        1.0,
        1.0,
        1.0,
    );
    g.linear(
        "expert down",
        KernelClass::Gemm,
        active,
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
    g.layer = LayerType::Dense;
    mlp(g, "top tail", b, down, &w.top_mlp[3..])
}

pub(super) fn dlrm_graph(w: &Dlrm) -> Graph {
    match w.inference {
        None => training_graph(w, false),
        Some(spec) => serving_graph(w, spec),
    }
}

/// One batch of queries served: the training graph of a batch of that size, forward kernels
/// only; no gradients, optimizer state (the tables' included) or update. The activations
/// are those a training forward pass keeps, a bound on what serving holds live.
fn serving_graph(w: &Dlrm, spec: DlrmInference) -> Graph {
    let served = Dlrm {
        batch: spec.batch,
        inference: None,
        ..w.clone()
    };
    let mut g = training_graph(&served, true);
    g.kernels.retain(|k| k.phase == Phase::Forward);
    g.trains = false;
    g.served = true;
    g.memory.gradients_bytes = 0.0;
    g.memory.optimizer_state_bytes = 0.0;
    g.table_state_bytes = 0.0;
    for t in &mut g.host_tables {
        t.state_bytes = 0.0;
    }
    g
}

/// The training graph of `w`; `served`: its forward pass serves queries (experts take their
/// routed samples alone, unpadded).
fn training_graph(w: &Dlrm, served: bool) -> Graph {
    let mut g = Builder::with_roles(w.precisions, Recompute::None);
    let b = w.batch;
    let dim = mlp(&mut g, "bottom", b, w.dense_features, &w.bottom_mlp);
    let tables = if takes_slices(w, features_of(w), dim) {
        Split::Table
    } else {
        Split::TableWhole
    };
    let (features, table_bytes, table_state, host_tables) = embeddings(&mut g, w, tables);
    g.split = Split::Replicated;
    let top_in = interaction(&mut g, w, features, dim);
    g.split = Split::Replicated;
    let width = match w.moe {
        None => mlp(&mut g, "top", b, top_in, &w.top_mlp),
        Some(moe) => expert_top_mlp(&mut g, w, &moe, top_in, served),
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
    graph.host_tables = host_tables;
    graph.experts = w.moe.map_or(1, |m| m.experts);
    graph.memory.optimizer_state_bytes += table_state;
    graph
}
