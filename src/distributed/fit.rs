//! Whether a strategy fits a workload at all: devices, pipeline stages, tensor and expert
//! parallelism, batch and micro-batch splits. A strategy that does not fit is an error
//! ([`FitError`]), not an infeasible design: there is nothing to price.

use std::sync::Arc;

use crate::parallel::Strategy;
use crate::workload::{Graph, Split, Workload};

/// A strategy that does not fit the workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strategy {strategy} does not fit workload {workload}: {message}")]
pub struct FitError {
    pub strategy: String,
    pub workload: String,
    pub message: String,
}

/// A workload's graph under a strategy that fits it, and its batch split.
pub(super) struct Fit {
    /// The graph with the strategy's recomputation (shared by a search's strategies).
    pub(super) graph: Arc<Graph>,
    /// Samples per micro-batch.
    pub(super) micro_batch: u64,
    /// Micro-batches per replica and iteration.
    pub(super) micro_batches: u64,
    /// A micro-batch's share of the graph's batch.
    pub(super) f_tok: f64,
}

/// Checks that `s` can run `workload` on `devices` devices and splits its batch.
pub(super) fn fit(workload: &Workload, s: &Strategy, devices: u64) -> Result<Fit, FitError> {
    if workload.serving().is_some() {
        s.check_devices(devices)
            .map_err(|e| fail(workload, s, e.message))?;
        let message = "a serving workload (inference:): use distributed::predict_inference";
        return Err(fail(workload, s, message.into()));
    }
    let graph = Arc::new(workload.graph_with(s.recompute));
    fit_graph(workload, graph, s, devices)
}

fn fail(workload: &Workload, s: &Strategy, message: String) -> FitError {
    FitError {
        strategy: s.to_string(),
        workload: workload.name(),
        message,
    }
}

/// [`fit`] with the workload's graph under `s`'s recomputation already built (a training
/// workload's).
pub(super) fn fit_graph(
    workload: &Workload,
    graph: Arc<Graph>,
    s: &Strategy,
    devices: u64,
) -> Result<Fit, FitError> {
    s.check_devices(devices)
        .map_err(|e| fail(workload, s, e.message))?;
    check_model_split(&graph, s).map_err(|m| fail(workload, s, m))?;
    let (micro_batch, micro_batches) = split_batch(&graph, s).map_err(|m| fail(workload, s, m))?;
    let f_tok = micro_batch as f64 / graph.samples;
    Ok(Fit {
        graph,
        micro_batch,
        micro_batches,
        f_tok,
    })
}

/// Pipeline stages need repeated layers to split ([`Strategy::stage_layers`]: evenly, or
/// with fewer on the ends); tensor parallelism needs column/row layers; expert
/// parallelism needs experts that split evenly.
fn check_model_split(graph: &Graph, s: &Strategy) -> Result<(), String> {
    if s.pipeline > 1 {
        if graph.layers == 0 {
            return Err("the workload has no repeated layers to split into pipeline stages".into());
        }
        s.stage_layers(graph.layers)?;
    }
    if s.tensor > 1 && graph.heads > 0 && graph.heads % s.tensor != 0 {
        return Err(format!(
            "t{} does not divide the {} attention heads (tensor parallelism gives each rank \
             whole heads)",
            s.tensor, graph.heads
        ));
    }
    if s.context > 1 {
        check_context(graph, s)?;
    }
    if let Some(a) = graph.attention.filter(|_| s.sequence_parallel) {
        // Sequence parallelism splits each rank's tokens of a sequence over the tensor
        // ranks (Megatron-LM requires the sequence to divide by the tensor degree).
        let tokens = a.sequence / s.context;
        if tokens % s.tensor != 0 {
            return Err(format!(
                "sequence parallelism (sp) splits the {tokens} tokens a rank holds of each \
                 sequence over t{}: they must be a multiple of {}",
                s.tensor, s.tensor
            ));
        }
    }
    let has_tensor_split = graph
        .kernels
        .iter()
        .any(|k| matches!(k.split, Split::Column | Split::Row));
    // One layer type of a model may have none (tables, a feature interaction): the
    // model's others do.
    if s.tensor > 1 && !has_tensor_split && graph.part_of.is_none() {
        return Err(
            "tensor parallelism needs a transformer's column/row linear layers; use RC or CR \
             kernel parallelism"
                .into(),
        );
    }
    if s.expert > 1 {
        let experts = graph.experts;
        if experts == 1 {
            return Err(
                "the workload has no experts to spread (expert parallelism e > 1); give a \
                 transformer or a DLRM a moe: {experts, top_k} section"
                    .into(),
            );
        }
        if s.kernel.is_some() {
            return Err(
                "expert parallelism (e) splits experts with tensor parallelism (t), not with \
                 RC/CR kernel parallelism"
                    .into(),
            );
        }
        if experts % s.expert != 0 {
            return Err(format!(
                "{experts} experts do not split evenly over expert parallelism e{}",
                s.expert
            ));
        }
    }
    Ok(())
}

/// Context parallelism splits a language model's sequences ([`Strategy::splits_sequence`]):
/// the sequence must divide into its chunks.
fn check_context(graph: &Graph, s: &Strategy) -> Result<(), String> {
    let context = s.context;
    let Some(a) = graph.attention else {
        return Err(format!(
            "context parallelism (cp{context}) splits a transformer's training sequences; the \
             workload has none to split"
        ));
    };
    if !s.splits_sequence(a.sequence) {
        return Err(format!(
            "cp{context} does not divide the sequence of {} tokens: each of the {context} \
             ranks takes two chunks of sequence / (2 x {context}) tokens, one from each end \
             (causal load balance), so the sequence must be a multiple of {}",
            a.sequence,
            2 * context
        ));
    }
    Ok(())
}

/// Samples per micro-batch and micro-batches per replica.
fn split_batch(graph: &Graph, s: &Strategy) -> Result<(u64, u64), String> {
    let (p, v) = (s.pipeline, s.interleave);
    let replicas = s.data;
    let samples = graph.samples.round() as u64;
    if samples % replicas != 0 {
        // A served model's batch is its inference.batch.
        let batch = if graph.served {
            "inference.batch"
        } else {
            "a batch"
        };
        return Err(format!(
            "{batch} of {samples} {} does not split over {replicas} data-parallel replicas",
            if samples == 1 { "sample" } else { "samples" }
        ));
    }
    let per_replica = samples / replicas;
    let micro_batch = if s.micro_batch == 0 {
        per_replica
    } else {
        s.micro_batch
    };
    if per_replica % micro_batch != 0 {
        return Err(format!(
            "{per_replica} samples per replica do not split into micro-batches of {micro_batch}"
        ));
    }
    let m = per_replica / micro_batch;
    if v > 1 && m % p != 0 {
        return Err(format!(
            "the interleaved schedule needs the {m} micro-batches to be a multiple of the {p} stages"
        ));
    }
    Ok((micro_batch, m))
}
