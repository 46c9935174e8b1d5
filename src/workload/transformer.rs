//! Decoder-only transformer language models (GPT-3, LLaMA, Megatron; MAD Max Sec. 3): the
//! layer lowering shared by training, fine-tuning, serving and DLRM feature transformers;
//! mixture-of-experts feed-forward layers; grouped-query attention; LoRA adapters (their
//! products in `graph::Builder::linear`, their training in [`lora_tune`]). A new adapter
//! target: a [`LoraTarget`] with its names, its site and its projection's widths.

use serde::Serialize;

use super::graph::{
    AdapterGemms, AttentionShape, Builder, FusedAttention, Graph, KernelClass, LayerType, Op,
    Phase, Position, Split,
};
use super::{inference, Workload};
use crate::config::raw::{LoraRaw, MoeRaw, TransformerRaw};
use crate::config::{Checker, ConfigError};
use crate::domain::{
    AttentionKernel, LossKernel, Optimizer, Positions, Precision, Precisions, Recompute,
    StorageFormat,
};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transformer {
    pub name: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    /// Width of one attention head (the attention is heads x head_dim wide).
    pub head_dim: u64,
    pub kv_heads: u64,
    pub ffn_hidden: u64,
    pub gated_ffn: bool,
    /// Attention and feed-forward side by side from one norm (GPT-J, PaLM).
    pub parallel_blocks: bool,
    pub sequence: u64,
    pub vocab: u64,
    pub global_batch: u64,
    pub precision: Precision,
    /// Each tensor role's precision in training (what `precision` implies unless
    /// `precisions:` says); serving keeps every tensor in `precision`.
    pub precisions: Precisions,
    pub recompute: Recompute,
    pub tie_embeddings: bool,
    /// How the attention core runs.
    pub attention: AttentionKernel,
    /// How the loss over the vocabulary runs in training.
    pub loss: LossKernel,
    /// How token positions are encoded (rotary: a kernel per layer over many tokens).
    pub positions: Positions,
    /// Dropout probability in training (0: none). Its cost does not depend on the value:
    /// the masks are written, kept and read whatever it is.
    pub dropout: f64,
    pub optimizer: Optimizer,
    /// Inference instead of training.
    pub inference: Option<inference::InferenceSpec>,
    /// Mixture-of-experts feed-forward.
    pub moe: Option<Moe>,
    /// Fine-tuning: the last this-many layers (and the head) train, the rest are frozen.
    pub trainable_layers: Option<u64>,
    /// Serving with speculative decoding (Leviathan et al. 2023; Chen et al. 2023).
    pub speculative: Option<Speculative>,
    /// Serving: the weights' storage when it differs from `precision` (int8/int4
    /// weight-only, widened in the product; fp8: FP8 products on FP8 inputs).
    pub weights: Option<StorageFormat>,
    /// Serving: the KV cache's storage when it differs from `precision`.
    pub kv_cache: Option<StorageFormat>,
    /// Low-rank adapters: fine-tuned with the base weights frozen (training), or served
    /// beside them.
    pub lora: Option<Lora>,
}

/// LoRA (Hu et al. 2021): beside each targeted projection W (in x out), A (in x rank) and
/// B (rank x out), the product x A B added to x W. Training updates only A and B: the base
/// weights get no gradient, optimizer state or gradient traffic, but every layer still
/// propagates input gradients (the first layer's too, which a framework may skip below its
/// first adapter).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lora {
    pub rank: u64,
    pub targets: Vec<LoraTarget>,
    /// Serving: distinct adapters over a batch, each request using one (S-LoRA, Punica):
    /// each adapter's A and B are read once per step. 1 in training.
    pub adapters: u64,
}

/// A projection an adapter sits beside. Megatron fuses Q, K and V into one product and a
/// gated feed-forward's gate and up projections into another; Hugging Face PEFT adapts
/// them one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraTarget {
    /// Q, K and V as one projection (Megatron's `linear_qkv`).
    Qkv,
    Q,
    K,
    V,
    /// The attention's output projection (`linear_proj`, `o_proj`).
    Output,
    /// The feed-forward's first product (`linear_fc1`: gate and up together when gated).
    Fc1,
    Gate,
    Up,
    /// The feed-forward's second product (`linear_fc2`, `down_proj`).
    Down,
}

impl LoraTarget {
    const NAMES: [(&'static str, LoraTarget); 11] = [
        ("linear_qkv", LoraTarget::Qkv),
        ("q_proj", LoraTarget::Q),
        ("k_proj", LoraTarget::K),
        ("v_proj", LoraTarget::V),
        ("linear_proj", LoraTarget::Output),
        ("o_proj", LoraTarget::Output),
        ("linear_fc1", LoraTarget::Fc1),
        ("gate_proj", LoraTarget::Gate),
        ("up_proj", LoraTarget::Up),
        ("linear_fc2", LoraTarget::Down),
        ("down_proj", LoraTarget::Down),
    ];

    fn parse(name: &str) -> Option<LoraTarget> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, target)| target)
    }

    /// The product it sits beside: 0 Q/K/V, 1 the attention output, 2 the feed-forward's
    /// first, 3 its second.
    fn site(self) -> usize {
        match self {
            LoraTarget::Qkv | LoraTarget::Q | LoraTarget::K | LoraTarget::V => 0,
            LoraTarget::Output => 1,
            LoraTarget::Fc1 | LoraTarget::Gate | LoraTarget::Up => 2,
            LoraTarget::Down => 3,
        }
    }
}

impl Transformer {
    /// The (input, output) widths of the projection `target` adapts.
    fn projection(&self, target: LoraTarget) -> (u64, u64) {
        let (h, f) = (self.hidden, self.ffn_hidden);
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        match target {
            LoraTarget::Qkv => (h, q + 2 * kv),
            LoraTarget::Q => (h, q),
            LoraTarget::K | LoraTarget::V => (h, kv),
            LoraTarget::Output => (q, h),
            LoraTarget::Fc1 => (h, if self.gated_ffn { 2 * f } else { f }),
            LoraTarget::Gate | LoraTarget::Up => (h, f),
            LoraTarget::Down => (f, h),
        }
    }

    /// Each product's adapters: the output width of each B beside it (Q, K and V adapted
    /// one by one: three adapters, writing q, kv and kv columns).
    fn adapter_sites(&self) -> Option<[AdapterSite; 4]> {
        let lora = self.lora.as_ref()?;
        let mut sites = [AdapterSite::default(); 4];
        for &target in &lora.targets {
            let site = &mut sites[target.site()];
            site.outputs[site.count] = self.projection(target).1;
            site.count += 1;
        }
        Some(sites)
    }
}

/// The adapters beside one product of a layer (see [`Transformer::adapter_sites`]): at
/// most three (Q, K, V; gate and up), each B's output width.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct AdapterSite {
    pub(super) count: usize,
    pub(super) outputs: [u64; 3],
}

/// Speculative decoding: each step the `draft` proposes `tokens` tokens one at a time, the
/// served model checks them in one pass over `tokens + 1` positions, and each proposal is
/// accepted with probability `acceptance` (independently: Leviathan et al. 2023, Sec. 3.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speculative {
    pub draft: Box<Transformer>,
    pub tokens: u64,
    pub acceptance: f64,
}

impl Speculative {
    /// Tokens one verification yields on average: `(1 - a^(g+1)) / (1 - a)` for `g`
    /// proposals accepted with probability `a` (Leviathan et al. 2023, Eq. 1); `g + 1` at
    /// `a = 1`.
    pub fn expected_tokens(&self) -> f64 {
        let (a, g) = (self.acceptance, self.tokens as f64);
        if a >= 1.0 {
            g + 1.0
        } else {
            (1.0 - a.powf(g + 1.0)) / (1.0 - a)
        }
    }
}

impl Transformer {
    /// Parameters (weights) of the model: attention, feed-forward and embeddings.
    pub fn parameters(&self) -> f64 {
        let h = self.hidden as f64;
        let q = (self.heads * self.head_dim) as f64;
        let kv = (self.kv_heads * self.head_dim) as f64;
        let ffn = self.feed_forward_parameters();
        let experts = self.moe.map_or(1.0, |m| m.experts as f64);
        let tables = if self.tie_embeddings { 1.0 } else { 2.0 };
        self.layers as f64 * (2.0 * h * q + 2.0 * h * kv + experts * ffn)
            + tables * self.vocab as f64 * h
    }
}

impl Transformer {
    /// Parameters of one layer's feed-forward (one expert's, in a mixture of experts).
    pub fn feed_forward_parameters(&self) -> f64 {
        self.ffn_hidden as f64 * self.hidden as f64 * if self.gated_ffn { 3.0 } else { 2.0 }
    }

    /// Parameters a served step of `batch` tokens does not read: the experts none of its
    /// tokens is routed to (none without a mixture of experts).
    pub fn unread_parameters(&self, batch: u64) -> f64 {
        self.moe.map_or(0.0, |m| {
            let (active, _) = m.routed(batch as f64, true);
            (m.experts - active) as f64 * self.layers as f64 * self.feed_forward_parameters()
        })
    }

    fn layer_shape(&self, training: bool) -> LayerShape {
        LayerShape {
            dropout: training && self.dropout > 0.0,
            hidden: self.hidden,
            heads: self.heads,
            head_dim: self.head_dim,
            kv_heads: self.kv_heads,
            ffn_hidden: self.ffn_hidden,
            gated_ffn: self.gated_ffn,
            parallel: self.parallel_blocks,
            moe: self.moe,
            // Serving engines (TensorRT-LLM, vLLM, SGLang) run the attention fused:
            // FlashAttention over the prompt, a FlashDecoding-style kernel per step, each
            // reading a key/value head's cache once for the query heads that share it.
            // `attention:` picks the training kernel.
            flash: !training || self.attention == AttentionKernel::Flash,
            // vLLM's, SGLang's and TensorRT-LLM's fused MoE kernels route dropless.
            dropless: !training,
            rotary: self.positions == Positions::Rotary,
            lora: self
                .lora
                .as_ref()
                .zip(self.adapter_sites())
                .map(|(l, sites)| LoraShape {
                    rank: l.rank,
                    adapters: l.adapters,
                    sites,
                }),
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

impl Moe {
    /// Of `tokens` routed, each to `top_k` of the experts: how many experts receive any
    /// (the expected number, e (1 - (1 - k / e)^tokens), for routes spread evenly: all of
    /// them in a training batch, `top_k` for one decoded token) and the rows each takes,
    /// its share of the routes padded to the capacity factor unless `dropless`. An expert
    /// that receives nothing is not run, and its weights are not read.
    pub fn routed(&self, tokens: f64, dropless: bool) -> (u64, u64) {
        let (e, k) = (self.experts as f64, self.top_k as f64);
        let touched = e * (1.0 - (1.0 - k / e).powf(tokens.max(1.0)));
        // Rounded up, less a hair for one token's k exactly.
        let active = (touched - 1e-9).ceil().clamp(k, e) as u64;
        let capacity = if dropless { 1.0 } else { self.capacity_factor };
        let rows = (tokens * k * capacity / active as f64).ceil().max(1.0) as u64;
        (active, rows)
    }
}

/// One transformer layer's shape, shared by language models and DLRM feature interaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LayerShape {
    pub(super) hidden: u64,
    pub(super) heads: u64,
    pub(super) head_dim: u64,
    pub(super) kv_heads: u64,
    pub(super) ffn_hidden: u64,
    pub(super) gated_ffn: bool,
    /// Attention and feed-forward side by side from one norm, summed into the residual.
    pub(super) parallel: bool,
    pub(super) moe: Option<Moe>,
    /// Dropout on the attention probabilities and on both residual branches (fused into
    /// the residual adds, as Megatron-LM's bias-dropout-add).
    pub(super) dropout: bool,
    /// The attention core as one fused kernel per pass ([`AttentionKernel::Flash`]).
    pub(super) flash: bool,
    /// Experts take exactly the tokens routed to them (serving engines: no capacity
    /// padding, no dropped tokens); training pads each to its capacity.
    pub(super) dropless: bool,
    /// Rotary position embeddings ([`Positions::Rotary`]).
    pub(super) rotary: bool,
    /// Low-rank adapters beside the projections.
    pub(super) lora: Option<LoraShape>,
}

/// Low-rank adapters of one layer, by product (Q/K/V, attention output, feed-forward
/// first and second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LoraShape {
    pub(super) rank: u64,
    pub(super) adapters: u64,
    pub(super) sites: [AdapterSite; 4],
}

impl LayerShape {
    /// The adapter products beside product `site` (see [`LoraTarget`]), if any.
    fn adapter(&self, site: usize) -> Option<AdapterGemms> {
        let l = self.lora?;
        let s = l.sites[site];
        (s.count > 0).then_some(AdapterGemms {
            rank: l.rank,
            outputs: s.outputs,
            count: s.count,
            adapters: l.adapters,
        })
    }
}

pub(super) fn transformer(
    check: &Checker,
    raw: TransformerRaw,
    stem: String,
) -> Result<Workload, ConfigError> {
    let (hidden, heads, head_dim) = match raw.head_dim {
        None => {
            let (hidden, heads) = hidden_and_heads(check, "", raw.hidden, raw.heads)?;
            (hidden, heads, hidden / heads)
        }
        Some(d) => {
            let heads = check.positive_count("heads", raw.heads)?;
            let d = check.positive_count("head_dim", d)?;
            // Bounded so that heads x head_dim (and the products over it) stay exact.
            if heads.checked_mul(d).map_or(true, |width| width > 1 << 24) {
                return Err(ConfigError::invalid(
                    check.file,
                    "head_dim",
                    d,
                    format!(
                        "at most {} (heads x head_dim <= 2^24)",
                        (1u64 << 24) / heads
                    ),
                ));
            }
            (check.positive_count("hidden", raw.hidden)?, heads, d)
        }
    };
    let kv_heads = check.positive_count("kv_heads", raw.kv_heads.unwrap_or(heads))?;
    if heads % kv_heads != 0 {
        return Err(ConfigError::invalid(
            check.file,
            "kv_heads",
            kv_heads,
            format!("a divisor of heads ({heads})"),
        ));
    }
    if raw.precisions.is_some() && raw.inference.is_some() {
        return Err(ConfigError::invalid(
            check.file,
            "precisions",
            "a precision per role",
            "no `precisions:` beside `inference:` (serving keeps weights, caches and \
             activations in `precision`)",
        ));
    }
    let speculative = raw.inference.as_ref().and_then(|i| i.speculative.clone());
    let (weights, kv_cache) = match &raw.inference {
        Some(i) => formats(check, raw.precision, i.weights, i.kv_cache)?,
        None => (None, None),
    };
    let mut model = Transformer {
        name: raw.name.unwrap_or(stem),
        hidden,
        layers: check.positive_count("layers", raw.layers)?,
        heads,
        head_dim,
        kv_heads,
        ffn_hidden: check.positive_count("ffn_hidden", raw.ffn_hidden)?,
        gated_ffn: raw.gated_ffn,
        parallel_blocks: raw.parallel_blocks,
        sequence: check.positive_count("sequence", raw.sequence)?,
        vocab: match (raw.vocab, &raw.inference, raw.tie_embeddings) {
            // No embedding and no output layer: a stack of blocks (as Calculon models one).
            (0, None, false) => 0,
            (0, _, _) => {
                return Err(ConfigError::invalid(
                    check.file,
                    "vocab",
                    0,
                    "a vocabulary > 0: serving samples from the logits and tied embeddings \
                     need a table (vocab: 0, a model without embedding or output layer, is \
                     for training only)",
                ))
            }
            (v, _, _) => v,
        },
        global_batch: check.positive_count("global_batch", raw.global_batch)?,
        precision: raw.precision,
        precisions: super::roles(raw.precision, raw.precisions),
        recompute: raw.recompute,
        tie_embeddings: raw.tie_embeddings,
        attention: raw.attention,
        loss: raw.loss,
        positions: raw.positions,
        dropout: match raw.dropout {
            None => 0.0,
            Some(p) if (0.0..1.0).contains(&p) => p,
            Some(p) => {
                return Err(ConfigError::invalid(
                    check.file,
                    "dropout",
                    p,
                    "a probability in [0, 1)",
                ))
            }
        },
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
            Some(i) => {
                let prompt = check.positive_count("inference.prompt_tokens", i.prompt_tokens)?;
                let output = check.positive_count("inference.output_tokens", i.output_tokens)?;
                // A request's prompt and its answer share the model's context.
                if prompt.saturating_add(output) > raw.sequence {
                    return Err(ConfigError::invalid(
                        check.file,
                        "inference.prompt_tokens",
                        prompt,
                        format!(
                            "a prompt that leaves room for the {output} output tokens in the \
                             model's {}-token sequence (prompt + output <= sequence)",
                            raw.sequence
                        ),
                    ));
                }
                Some(inference::InferenceSpec {
                    batch: check.positive_count("inference.batch", i.batch)?,
                    prompt_tokens: prompt,
                    output_tokens: output,
                })
            }
        },
        speculative: None,
        weights,
        kv_cache,
        lora: None,
    };
    if let Some(l) = raw.lora {
        if let Some(k) = model.trainable_layers {
            return Err(ConfigError::invalid(
                check.file,
                "fine_tuning.trainable_layers",
                k,
                "no `fine_tuning:` beside `lora:`: either adapters with the base weights \
                 frozen, or the last layers trained",
            ));
        }
        if model.parallel_blocks {
            return Err(ConfigError::invalid(
                check.file,
                "lora",
                format!("rank {}", l.rank),
                "a model without parallel blocks: adapters beside attention and feed-forward \
                 run from one input are not modelled",
            ));
        }
        model.lora = Some(lora_of(check, &model, l)?);
    }
    if let Some(sp) = speculative {
        model.speculative = Some(speculative_of(check, &model, sp)?);
    }
    Ok(Workload::Transformer(model))
}

/// The served model's weight and KV-cache storage, kept only where it differs from
/// `precision`: weights in a float format at least as wide as `precision` are `precision`'s
/// (a product reads what it computes in), integers are weight-only; the KV cache in fp8,
/// int8 or a float format (not int4).
fn formats(
    check: &Checker,
    precision: Precision,
    weights: Option<StorageFormat>,
    kv_cache: Option<StorageFormat>,
) -> Result<(Option<StorageFormat>, Option<StorageFormat>), ConfigError> {
    let own = precision.bytes();
    let weights = match weights {
        Some(StorageFormat::Fp32) => {
            return Err(ConfigError::invalid(
                check.file,
                "inference.weights",
                "fp32",
                "int4, int8 (weight-only), fp8 (FP8 products), bf16 or fp16",
            ))
        }
        // A narrower float than `precision` other than fp8 would be a second compute
        // precision: `precision` itself says it.
        Some(f @ (StorageFormat::Bf16 | StorageFormat::Fp16)) if f.bytes() < own => {
            return Err(ConfigError::invalid(
                check.file,
                "inference.weights",
                f.name(),
                format!(
                    "int4, int8 or fp8, or a precision as wide as `precision` ({}): set \
                     `precision: {}` to serve in it",
                    precision.name(),
                    f.name()
                ),
            ))
        }
        Some(f) if f.bytes() < own => Some(f),
        _ => None,
    };
    let kv_cache = match kv_cache {
        Some(StorageFormat::Int4) => {
            return Err(ConfigError::invalid(
                check.file,
                "inference.kv_cache",
                "int4",
                "fp8 or int8 (a quantized cache), or a float precision",
            ))
        }
        Some(f) if f.bytes() != own => Some(f),
        _ => None,
    };
    Ok((weights, kv_cache))
}

/// Checks `inference.speculative` against the served model: a draft of the model's kind
/// (its vocabulary, precision and feed-forward), smaller than it, 1 to 64 proposals per
/// step, an acceptance rate in [0, 1].
fn speculative_of(
    check: &Checker,
    model: &Transformer,
    sp: crate::config::raw::SpeculativeRaw,
) -> Result<Speculative, ConfigError> {
    const AT: &str = "inference.speculative.";
    let tokens = check.count_in(&format!("{AT}tokens"), sp.tokens, 64)?;
    let acceptance = check.within(&format!("{AT}acceptance"), sp.acceptance, 0.0, 1.0)?;
    let d = sp.draft;
    let (hidden, heads) = hidden_and_heads(check, &format!("{AT}draft."), d.hidden, d.heads)?;
    let kv_heads = d.kv_heads.unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(ConfigError::invalid(
            check.file,
            format!("{AT}draft.kv_heads"),
            kv_heads,
            format!("a divisor of {AT}draft.heads ({heads})"),
        ));
    }
    let draft = Transformer {
        name: d.name.unwrap_or_else(|| format!("{} draft", model.name)),
        hidden,
        layers: check.positive_count(&format!("{AT}draft.layers"), d.layers)?,
        heads,
        head_dim: hidden / heads,
        kv_heads,
        ffn_hidden: check.positive_count(&format!("{AT}draft.ffn_hidden"), d.ffn_hidden)?,
        moe: None,
        speculative: None,
        lora: None,
        ..model.clone()
    };
    if draft.parameters() >= model.parameters() {
        return Err(ConfigError::invalid(
            check.file,
            format!("{AT}draft"),
            format!("{:.3e} parameters", draft.parameters()),
            format!(
                "a draft smaller than the model it drafts for ({:.3e} parameters)",
                model.parameters()
            ),
        ));
    }
    Ok(Speculative {
        draft: Box::new(draft),
        tokens,
        acceptance,
    })
}

/// Checks `lora:` against the model: known projection names, each adapted once, a rank
/// no wider than any targeted projection, no adapters on experts; one adapter in training,
/// and in serving no more adapters than the batch has requests.
fn lora_of(check: &Checker, model: &Transformer, l: LoraRaw) -> Result<Lora, ConfigError> {
    let rank = check.positive_count("lora.rank", l.rank)?;
    if l.targets.is_empty() {
        return Err(ConfigError::invalid(
            check.file,
            "lora.targets",
            "[]",
            "at least one projection to adapt",
        ));
    }
    let names: Vec<&str> = LoraTarget::NAMES.iter().map(|(n, _)| *n).collect();
    let mut targets: Vec<LoraTarget> = Vec::with_capacity(l.targets.len());
    for (i, name) in l.targets.iter().enumerate() {
        let at = format!("lora.targets[{i}]");
        let Some(target) = LoraTarget::parse(name) else {
            return Err(ConfigError::invalid(
                check.file,
                at,
                name,
                format!("one of {}", names.join(", ")),
            ));
        };
        // A projection adapted twice: named twice, or fused and one by one.
        let fused_with = |t: LoraTarget| match t {
            LoraTarget::Qkv => matches!(target, LoraTarget::Q | LoraTarget::K | LoraTarget::V),
            LoraTarget::Q | LoraTarget::K | LoraTarget::V => target == LoraTarget::Qkv,
            LoraTarget::Fc1 => matches!(target, LoraTarget::Gate | LoraTarget::Up),
            LoraTarget::Gate | LoraTarget::Up => target == LoraTarget::Fc1,
            _ => false,
        };
        if let Some(j) = targets.iter().position(|&t| t == target || fused_with(t)) {
            let other = &l.targets[j];
            return Err(ConfigError::invalid(
                check.file,
                at,
                name,
                format!("a projection not already adapted (by {other})"),
            ));
        }
        if target == LoraTarget::Gate && !model.gated_ffn {
            return Err(ConfigError::invalid(
                check.file,
                at,
                name,
                "gate_proj only on a gated feed-forward (gated_ffn: true)",
            ));
        }
        if target.site() >= 2 && model.moe.is_some() {
            return Err(ConfigError::invalid(
                check.file,
                at,
                name,
                "an attention projection: adapters on mixture-of-experts feed-forwards are \
                 not modelled",
            ));
        }
        let (input, output) = model.projection(target);
        if rank > input.min(output) {
            return Err(ConfigError::invalid(
                check.file,
                "lora.rank",
                rank,
                format!(
                    "at most {} ({name} is {input} x {output}: a rank wider than the \
                     projection adds nothing)",
                    input.min(output)
                ),
            ));
        }
        targets.push(target);
    }
    let adapters = match (l.adapters, &model.inference) {
        (None, _) => 1,
        (Some(n), Some(i)) => {
            let most = i.batch.min(MAX_ADAPTERS);
            if !(1..=most).contains(&n) {
                return Err(ConfigError::invalid(
                    check.file,
                    "lora.adapters",
                    n,
                    format!(
                        "1 to {most}: at most one adapter per request of the batch \
                         (inference.batch {}), and at most {MAX_ADAPTERS}",
                        i.batch
                    ),
                ));
            }
            n
        }
        (Some(1), None) => 1,
        (Some(n), None) => {
            return Err(ConfigError::invalid(
                check.file,
                "lora.adapters",
                n,
                "1 in training (one adapter is fine-tuned); several only when serving",
            ))
        }
    };
    Ok(Lora {
        rank,
        targets,
        adapters,
    })
}

/// Most distinct adapters one batch serves (S-LoRA serves thousands from host memory; a
/// batch reads at most one per request).
const MAX_ADAPTERS: u64 = 4096;

/// Checks a layer width and its attention heads (`prefix` names the section).
pub(super) fn hidden_and_heads(
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
pub(super) fn moe(check: &Checker, m: MoeRaw) -> Result<Moe, ConfigError> {
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

/// Decoder-only transformer (GPT-style, pre-norm), Megatron's kernel decomposition.
pub(super) fn transformer_graph(w: &Transformer) -> Graph {
    let mut g = transformer_pass(w, w.global_batch, w.sequence, w.sequence, w.sequence, true);
    g.experts = w.moe.map_or(1, |m| m.experts);
    match w.trainable_layers {
        Some(k) => fine_tune(g, w.layers, k),
        None if w.lora.is_some() => lora_tune(g),
        None => g,
    }
}

/// LoRA fine-tuning: only the adapters train. The builder already left out the frozen
/// products' weight gradients and the inputs only those read; this drops the embedding's
/// gradient (nothing below the first layer trains) and scales the optimizer's step, the
/// gradients and the optimizer state to the adapters' parameters.
pub(super) fn lora_tune(mut g: Graph) -> Graph {
    let all: f64 = g.parameters_by_position.iter().sum();
    let share = if all > 0.0 {
        g.adapter_parameters / all
    } else {
        0.0
    };
    g.kernels.retain(|k| {
        let backward = matches!(
            k.phase,
            Phase::Recompute | Phase::BackwardInput | Phase::BackwardWeight
        );
        !(backward && k.position == Position::Head)
    });
    train_share(&mut g, share);
    g
}

/// Fine-tuning trains `share` of the parameters: the optimizer's step, the gradients and
/// the optimizer state scale to it.
fn train_share(g: &mut Graph, share: f64) {
    for k in g.kernels.iter_mut().filter(|k| k.phase == Phase::Update) {
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
    }
    g.memory.gradients_bytes *= share;
    g.memory.optimizer_state_bytes *= share;
    g.trainable_share = share;
}

/// Fine-tuning with the first `layers - trainable` layers and the embedding frozen: no
/// backward work below the lowest trainable layer, no weight gradients, optimizer state or
/// gradient traffic for frozen weights, no activations kept for frozen layers.
pub(super) fn fine_tune(mut g: Graph, layers: u64, trainable: u64) -> Graph {
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
    train_share(&mut g, trainable_share);
    g.memory.activations_bytes *= share;
    g.memory.replicated_activations_bytes *= share;
    // No layer runs a backward: none is rebuilt.
    if share == 0.0 {
        g.memory.rebuilt_bytes = 0.0;
        g.memory.rebuilt_replicated_bytes = 0.0;
    }
    g.trainable_layers = trainable;
    g
}

/// The transformer's kernels for `batch` sequences of `queries` new tokens each attending
/// to `keys` positions: a training step (queries = keys = sequence), a prefill (the
/// prompt), or one decode step (one query against the KV cache).
/// `logits`: the positions per sequence whose logits the output layer computes (every query
/// in training and speculative verification; the last one in a prefill, as serving engines
/// gather the last token's hidden state before the output layer).
/// `training`: a training step (each tensor role in its precision, [`Builder::with_roles`]),
/// else inference (an FP8 model's weights and caches in FP8).
pub(super) fn transformer_pass(
    w: &Transformer,
    batch: u64,
    queries: u64,
    keys: u64,
    logits: u64,
    training: bool,
) -> Graph {
    debug_assert!((1..=queries).contains(&logits));
    let mut g = if training {
        Builder::with_roles(w.precisions, w.recompute)
    } else if w.weights == Some(StorageFormat::Fp8) {
        // FP8 weights: FP8 products on FP8 copies of their inputs (TensorRT-LLM's FP8),
        // everything else in `precision`.
        Builder::with_roles(
            Precisions {
                gemm_inputs: Precision::Fp8,
                weights: Precision::Fp8,
                ..Precisions::uniform(w.precision)
            },
            w.recompute,
        )
    } else if w.precision == Precision::Fp8 {
        // A model served at `precision: fp8` (TensorRT-LLM's FP8 checkpoints: FP8 weights,
        // products, activations between them and KV cache) still sends its tensor-parallel
        // all-reduces and pipeline hand-offs in 16 bits: TensorRT-LLM's all-reduce (NCCL or
        // its own kernels) reduces the row-parallel products' FP16/BF16 outputs.
        Builder::with_roles(
            Precisions {
                communication: Precision::Bf16,
                ..Precisions::uniform(Precision::Fp8)
            },
            w.recompute,
        )
    } else {
        Builder::new(w.precision, w.recompute)
    };
    // LoRA fine-tuning: the base weights get no gradient (the adapters' do).
    g.frozen = training && w.lora.is_some();
    if !training {
        g.weight_only = w
            .weights
            .filter(|f| matches!(f, StorageFormat::Int8 | StorageFormat::Int4));
        g.kv_bytes = w.kv_cache.map(StorageFormat::bytes);
    }
    // Language models clip the gradients' global norm every step (GPT-3: at 1.0).
    g.clips_gradients = training;
    let storage = g.storage();
    let bytes = storage.bytes();
    let roles = g.precisions();
    let (s, h, l) = (queries, w.hidden, w.layers);
    let tokens = batch * s;
    let t = tokens as f64;

    // `vocab: 0` is a stack of blocks alone: no embedding, final norm, logits or loss.
    let head = w.vocab > 0;
    g.layer = LayerType::Embedding;
    g.split = Split::Embedding;
    if head {
        // Rows of the table are read in the weights' precision, written as activations.
        let row_bytes = h as f64 * roles.weights.bytes();
        g.embedding(
            "token embedding",
            t,
            row_bytes,
            t * h as f64 * bytes,
            w.vocab as f64 * row_bytes,
            0.0,
            storage,
        );
        g.dense_parameters(w.vocab as f64 * h as f64);
    }
    let mut shape = w.layer_shape(training);
    if let Some(l) = shape.lora.as_mut() {
        // A smaller batch than the adapters served reads only the adapters its requests use.
        l.adapters = l.adapters.min(batch);
    }
    g.split = Split::Replicated;
    if shape.dropout && head {
        g.pointwise_masked(
            "embedding dropout",
            KernelClass::Pointwise,
            1,
            t * h as f64,
            1.0,
            2.0,
            0.0,
            DROPOUT_MASK_BYTES,
        );
    }
    g.set_in_layer(true);
    // Full recomputation keeps each layer's input: the attention's, which opens the layer.
    g.layer = LayerType::Attention;
    g.layer_input(t * h as f64 * bytes, l);
    transformer_layers(&mut g, &shape, l, batch, s, keys, bytes);
    // The final norm, logits and loss go with the (vocabulary-parallel) embedding.
    g.layer = LayerType::Embedding;
    if head {
        // One final norm.
        g.dense_parameters((2 * h) as f64);
    }
    g.set_in_layer(false);
    if head {
        output_head(&mut g, w, tokens, batch * logits, h, training);
    }
    let mut graph = g.finish(
        w.name.clone(),
        w.optimizer,
        batch as f64,
        t,
        0.0,
        l,
        t * h as f64 * roles.communication.bytes(),
    );
    graph.heads = w.heads;
    // A dense feed-forward beside the attention shares its tensor-parallel collectives
    // (an expert layer's run among the expert group).
    graph.parallel_blocks = shape.parallel && w.moe.is_none();
    if training && queries == keys {
        graph.attention = Some(AttentionShape {
            sequence: queries,
            kv_heads: w.kv_heads,
            head_dim: w.head_dim,
            reruns_forward: w.recompute == Recompute::Full,
        });
    }
    graph
}

/// The output head: the final norm over all `tokens`, the logits over the vocabulary for
/// `tokens_out` of them and, in training, the loss over those (in serving, the softmax the
/// sampling reads).
fn output_head(
    g: &mut Builder,
    w: &Transformer,
    tokens: u64,
    tokens_out: u64,
    h: u64,
    training: bool,
) {
    layer_norm(g, "final layer norm", 1, tokens as f64 * h as f64);
    let (tokens, t) = (tokens_out, tokens_out as f64);
    g.split = Split::Column;
    // FP8 training keeps the output layer in BF16 (Megatron-LM, Transformer Engine).
    g.gemm_input_linears(false);
    g.linear("logits", KernelClass::Gemm, 1, tokens, h, w.vocab, 1, false);
    g.gemm_input_linears(true);
    g.split = Split::Sharded;
    if w.tie_embeddings {
        // The logits reuse the embedding matrix: count its parameters once (a pipeline's
        // last stage keeps a copy: `Graph::tied_parameters`).
        g.dense_parameters(-(w.vocab as f64 * h as f64));
        g.tied_parameters = w.vocab as f64 * h as f64;
    }
    let logits = t * w.vocab as f64;
    if training {
        g.cross_entropy("softmax cross-entropy", logits, w.loss);
    } else {
        // Serving: the softmax the next token is sampled from, no loss.
        g.pointwise(
            "sampling softmax",
            KernelClass::Pointwise,
            1,
            logits,
            1.0,
            5.0,
            1.0,
        );
    }
}

/// `l` transformer layers over `batch` sequences of `s` queries attending to `keys` keys:
/// norms, attention, residuals and the (dense or mixture-of-experts) feed-forward; with
/// parallel blocks, one norm feeds both and one add sums them into the residual (under
/// tensor parallelism one collective brings the shared input and one reduces the sum:
/// `distributed::work::split_tensor`).
pub(super) fn transformer_layers(
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
    // A recommendation model's feature transformer is one layer type, its interaction.
    let nested = g.layer == LayerType::Interaction;
    let tag = |g: &mut Builder, layer| {
        if !nested {
            g.layer = layer;
        }
    };
    tag(g, LayerType::Attention);
    attention(g, w, l, batch, s, keys, bytes);
    tag(
        g,
        match w.moe {
            None => LayerType::Dense,
            Some(_) => LayerType::Expert,
        },
    );
    // Parallel blocks feed the feed-forward the attention's normalized input, which the
    // QKV projection already keeps for the backward pass.
    if w.parallel {
        g.input_kept = true;
    } else {
        layer_norm(g, "layer norm (mlp)", l, t * h as f64);
    }
    match w.moe {
        None => feed_forward(
            g,
            w,
            "mlp",
            (l, l),
            tokens,
            [Split::Column, Split::Sharded, Split::Row],
        ),
        Some(moe) => moe_feed_forward(g, w, &moe, l, tokens),
    }
    g.split = Split::Replicated;
    if w.parallel {
        // One add of both branches' outputs (each dropped out) to the layer's input.
        let mask = if w.dropout {
            2.0 * DROPOUT_MASK_BYTES
        } else {
            0.0
        };
        g.pointwise_masked(
            "residual add (parallel blocks)",
            KernelClass::Pointwise,
            l,
            t * h as f64,
            3.0,
            2.0,
            0.0,
            mask,
        );
    } else {
        residual_add(g, "residual add (mlp)", w.dropout, l, t * h as f64);
    }
    // Norm scales (and shifts) per layer: the attention's, then the feed-forward's (one
    // shared norm with parallel blocks).
    let feed_forward = g.layer;
    tag(g, LayerType::Attention);
    g.dense_parameters((2 * h * l) as f64);
    g.layer = feed_forward;
    if !w.parallel {
        g.dense_parameters((2 * h * l) as f64);
    }
}

/// Self-attention of `l` layers: norm, QKV projection (grouped-query: `kv_heads` key and
/// value heads), scores, softmax, context, output projection, residual add.
#[allow(clippy::too_many_arguments)]
fn attention(g: &mut Builder, w: &LayerShape, l: u64, batch: u64, s: u64, keys: u64, bytes: f64) {
    let h = w.hidden;
    let tokens = batch * s;
    let t = tokens as f64;
    let head_dim = w.head_dim;
    let kv = w.kv_heads * head_dim;
    // The attention's width: heads x head_dim (hidden unless `head_dim` says otherwise).
    let width = w.heads * head_dim;
    layer_norm(g, "layer norm (attention)", l, t * h as f64);
    g.split = Split::Column;
    g.adapter = w.adapter(0);
    g.linear(
        "qkv projection",
        KernelClass::Gemm,
        l,
        tokens,
        h,
        width + 2 * kv,
        l,
        true,
    );
    if w.rotary && s > 1 {
        // Rotary positions: the queries and keys rotated in a kernel of their own, reading
        // and writing each once (about 3 FLOPs per element: two products and a sum); a
        // decode step's attention kernel rotates its one token inline.
        g.split = Split::Sharded;
        g.pointwise(
            "rotary embedding",
            KernelClass::Pointwise,
            l,
            t * (width + kv) as f64,
            1.0,
            3.0,
            0.0,
        );
    }
    let bh = batch * w.heads;
    // Scores need Q (every head) and K (one per key/value head); the context needs the
    // softmax output (kept by the softmax) and V (one per key/value head).
    let q_bytes = t * width as f64 * bytes;
    let kv_bytes = (batch * keys) as f64 * kv as f64 * g.kv_bytes.unwrap_or(bytes);
    g.split = Split::Sharded;
    if w.flash {
        g.flash_attention(
            "attention (fused)",
            l,
            FusedAttention {
                heads: bh,
                queries: s,
                keys,
                head_dim,
                q_bytes,
                kv_bytes,
            },
        );
    } else {
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
        if w.dropout {
            g.pointwise_masked(
                "attention dropout",
                KernelClass::Attention,
                l,
                scores,
                1.0,
                2.0,
                0.0,
                DROPOUT_MASK_BYTES,
            );
            // The context's backward reads the dropped probabilities (Korthikanti et al.
            // 2022: softmax output, mask and dropout output are kept).
            g.keep(scores * bytes, l, KernelClass::Attention);
        }
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
    }
    g.split = Split::Row;
    g.adapter = w.adapter(1);
    g.linear(
        "attention output",
        KernelClass::Gemm,
        l,
        tokens,
        width,
        h,
        l,
        true,
    );
    g.split = Split::Replicated;
    if !w.parallel {
        residual_add(g, "residual add (attention)", w.dropout, l, t * h as f64);
    }
}

/// A mixture-of-experts feed-forward layer, `l` times: the router scores every token
/// against every expert, then each expert takes its capacity of the routed tokens
/// (tokens x top_k x capacity / experts).
fn moe_feed_forward(g: &mut Builder, w: &LayerShape, moe: &Moe, l: u64, tokens: u64) {
    let h = w.hidden;
    let t = tokens as f64;
    // The router scores every token against every expert, then each expert takes
    // its capacity of the routed tokens: tokens x top_k x capacity / experts.
    g.split = Split::Replicated;
    // The router stays in the training's storage precision under FP8.
    g.gemm_input_linears(false);
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
    g.gemm_input_linears(true);
    g.pointwise(
        "router softmax and top-k",
        KernelClass::Pointwise,
        l,
        t * moe.experts as f64,
        1.0,
        6.0,
        1.0,
    );
    let (active, per_expert) = moe.routed(t, w.dropless);
    feed_forward(
        g,
        w,
        "expert",
        (l * active, l * moe.experts),
        per_expert,
        [Split::Expert; 3],
    );
}

/// Bytes of a dropout mask per element (PyTorch keeps one boolean per element).
const DROPOUT_MASK_BYTES: f64 = 1.0;

/// A residual add over `elements`, `count` times; with `dropout`, Megatron-LM's fused
/// bias-dropout-add, which also writes the branch's mask.
fn residual_add(g: &mut Builder, name: &str, dropout: bool, count: u64, elements: f64) {
    let mask = if dropout { DROPOUT_MASK_BYTES } else { 0.0 };
    g.pointwise_masked(
        name,
        KernelClass::Pointwise,
        count,
        elements,
        2.0,
        1.0,
        0.0,
        mask,
    );
}

/// A layer norm over `elements`, `count` times (statistics, scale and shift: ~8 FLOPs per
/// element, input kept for the backward).
pub(super) fn layer_norm(g: &mut Builder, name: &str, count: u64, elements: f64) {
    g.pointwise(name, KernelClass::Pointwise, count, elements, 1.0, 8.0, 1.0);
}

/// A transformer feed-forward, `count` times over `m` tokens: up projection (two for a
/// gated one), activation, down projection, split for tensor parallelism as `splits` says.
pub(super) fn feed_forward(
    g: &mut Builder,
    w: &LayerShape,
    name: &str,
    (count, weights): (u64, u64),
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
    g.adapter = w.adapter(2);
    g.linear(
        &format!("{name} up"),
        KernelClass::Gemm,
        count,
        m,
        h,
        up,
        weights,
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
    g.adapter = w.adapter(3);
    g.linear(
        &format!("{name} down"),
        KernelClass::Gemm,
        count,
        m,
        f,
        h,
        weights,
        true,
    );
}
