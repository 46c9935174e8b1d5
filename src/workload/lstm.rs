//! The LSTM language model of DeepFlow Sec. 9: embedding, stacked LSTM layers, a softmax
//! over the vocabulary, unrolled over the sequence.

use serde::Serialize;

use super::graph::{Builder, Graph, KernelClass};
use super::Workload;
use crate::config::raw::LstmRaw;
use crate::config::{Checker, ConfigError};
use crate::domain::{Optimizer, Precision, Precisions, Recompute};

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
    /// Each tensor role's precision (what `precision` implies unless `precisions:` says).
    pub precisions: Precisions,
    pub optimizer: Optimizer,
}

pub(super) fn lstm(check: &Checker, raw: LstmRaw, stem: String) -> Result<Workload, ConfigError> {
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
        precisions: super::roles(raw.precision, raw.precisions),
        optimizer: raw.optimizer,
    }))
}

/// LSTM language model: embedding lookup, `layers` stacked cells unrolled over `sequence`
/// steps (one GEMM of [x_t, h_{t-1}] against all gates per step, then the cell's
/// element-wise work), and a softmax classifier over the vocabulary for every token.
pub(super) fn lstm_graph(w: &Lstm) -> Graph {
    let mut g = Builder::with_roles(w.precisions, Recompute::None);
    let storage = g.storage();
    let bytes = storage.bytes();
    let roles = w.precisions;
    // Width of the recurrent state fed back and to the next layer.
    let state = w.projection.unwrap_or(w.hidden);
    let tokens = w.batch * w.sequence;
    let steps = w.layers * w.sequence;
    let (b, d) = (w.batch as f64, w.hidden as f64);
    g.embedding(
        "embedding lookup",
        tokens as f64,
        state as f64 * roles.weights.bytes(),
        tokens as f64 * state as f64 * bytes,
        w.vocab as f64 * state as f64 * roles.weights.bytes(),
        0.0,
        storage,
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
    // FP8 training keeps the output layer in its storage precision.
    g.gemm_input_linears(false);
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
    g.gemm_input_linears(true);
    g.pointwise(
        "softmax cross-entropy",
        KernelClass::Pointwise,
        1,
        tokens as f64 * w.vocab as f64,
        1.0,
        5.0,
        1.0,
    );
    let boundary = tokens as f64 * state as f64 * roles.communication.bytes();
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
