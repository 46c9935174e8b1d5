//! Inference of a transformer (MAD Max Sec. 2.3): a prefill over the prompt, then one decode
//! step per output token, each reading the weights and the KV cache.

use super::{transformer_pass, Transformer};
pub use crate::domain::InferenceSpec;
use crate::workload::graph::{Graph, Phase};

/// Bytes of the KV cache for `batch` sequences of `context` tokens, in the cache's storage
/// (`inference.kv_cache`, else `precision`).
pub fn kv_cache_bytes(w: &Transformer, batch: u64, context: u64) -> f64 {
    let head_dim = w.head_dim;
    let element = w
        .kv_cache
        .map_or(w.precision.bytes(), crate::domain::StorageFormat::bytes);
    (batch * context * w.layers * 2 * w.kv_heads * head_dim) as f64 * element
}

/// Keeps the forward kernels of a graph and sets its memory to weights plus `kv` bytes.
fn forward_only(mut g: Graph, kv: f64) -> Graph {
    g.kernels.retain(|k| k.phase == Phase::Forward);
    g.memory.gradients_bytes = 0.0;
    g.memory.optimizer_state_bytes = 0.0;
    g.memory.activations_bytes = kv;
    g.memory.replicated_activations_bytes = 0.0;
    g.memory.rebuilt_bytes = 0.0;
    g.memory.rebuilt_replicated_bytes = 0.0;
    g
}

/// The prefill: every prompt token through the model, filling the KV cache; the output
/// layer and the sampling softmax take the last token of each prompt (TensorRT-LLM without
/// `gather_context_logits`, vLLM, SGLang), which samples the first output token.
pub fn prefill_graph(w: &Transformer, spec: &InferenceSpec) -> Graph {
    let g = transformer_pass(
        w,
        spec.batch,
        spec.prompt_tokens,
        spec.prompt_tokens,
        1,
        false,
    );
    let kv = kv_cache_bytes(w, spec.batch, spec.prompt_tokens + spec.output_tokens);
    forward_only(g, kv)
}

/// One decode step with `context` tokens already cached: one new token per sequence,
/// attending to the cache.
pub fn decode_graph(w: &Transformer, spec: &InferenceSpec, context: u64) -> Graph {
    let g = transformer_pass(w, spec.batch, 1, context, 1, false);
    let kv = kv_cache_bytes(w, spec.batch, spec.prompt_tokens + spec.output_tokens);
    forward_only(g, kv)
}

/// One verification step of speculative decoding with `context` tokens cached: the last
/// accepted token and `tokens` proposals per sequence through the model in one pass, each
/// attending to the cache and to the ones before it.
pub fn verify_graph(w: &Transformer, spec: &InferenceSpec, context: u64, tokens: u64) -> Graph {
    let g = transformer_pass(
        w,
        spec.batch,
        tokens + 1,
        context + tokens + 1,
        tokens + 1,
        false,
    );
    let kv = kv_cache_bytes(w, spec.batch, spec.prompt_tokens + spec.output_tokens);
    forward_only(g, kv)
}

/// The mean context over the decode steps (the cost of a step is affine in it).
pub fn mean_context(spec: &InferenceSpec) -> u64 {
    spec.prompt_tokens + spec.output_tokens.div_ceil(2)
}
