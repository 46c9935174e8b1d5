//! One stage's work for one micro-batch (DeepFlow Sec. 5.1's super-graph of one device):
//! every kernel split by the strategy (tensor, sequence, context, RC/CR, expert,
//! table-wise), the exact bytes of the blocking collectives each split adds (and of the
//! context-parallel key/value exchanges, both kinds), the weights the stage holds and
//! trains, and the order of a step's events for graphs without repeated layers.

use std::sync::Arc;

use crate::network::collective::Collective;
use crate::parallel::strategy::{ContextAttention, KernelSplit, Strategy};
use crate::parallel::Axis;
use crate::perf::{EnergyRates, Evaluator};
use crate::workload::{
    AttentionShape, Graph, Kernel, KernelClass, LayerType, Op, Phase, Position, Split,
};

/// A collective a kernel needs, per instance.
#[derive(Clone)]
pub(super) struct Need {
    pub(super) collective: Collective,
    pub(super) axis: Axis,
    pub(super) bytes: f64,
    /// A tensor-parallel linear layer's all-gather or reduce-scatter (sequence
    /// parallelism): what `tp=overlap` runs beside the products.
    pub(super) of_linear: bool,
    /// For such a collective, the time of one instance of the product it comes with (its
    /// own kernel's: the all-gather feeds it, the reduce-scatter drains it), s; else 0.
    pub(super) product_s: f64,
    /// The layer type of the kernel it belongs to (for the per-layer report).
    pub(super) layer: LayerType,
    /// A context-parallel key/value exchange of this kind: a ring step runs beside one
    /// chunk's attention (`product_s`); where the strategy leaves the kind open, both kinds'
    /// exchanges are listed and the timeline keeps the cheaper.
    pub(super) context: Option<ContextAttention>,
    /// Per instance, the compute it adds beside its message: a ring step's own kernel
    /// launches (the attention over each chunk is a kernel of its own), s; else 0.
    pub(super) launch_s: f64,
}

impl Need {
    /// A collective of `bytes` over `axis` that blocks its kernel: not beside a product,
    /// not a context-parallel exchange (its layer type set where the kernel is known).
    pub(super) fn new(collective: Collective, axis: Axis, bytes: f64) -> Need {
        Need {
            collective,
            axis,
            bytes,
            of_linear: false,
            product_s: 0.0,
            layer: LayerType::Dense,
            context: None,
            launch_s: 0.0,
        }
    }

    /// Whether it runs when the context-parallel ranks exchange keys and values as
    /// `context`: every need but the exchanges of the kind not taken.
    pub(super) fn taken(&self, context: Option<ContextAttention>) -> bool {
        self.context.map_or(true, |kind| Some(kind) == context)
    }
}

/// What a graph without repeated layers does next in its backward step.
#[derive(Debug, Clone, Copy)]
pub(super) enum StepEvent {
    /// Kernel time, s.
    Compute(f64),
    /// The blocking collective `backward_needs[i]`.
    Need(usize),
    /// A weight's gradient is ready: its parameters (per device), and whether it is an
    /// expert's (synchronised among the expert's replicas).
    Gradient(f64, bool),
    /// The next kernel reads a weight: its parameters (per device). Under ZeRO-3 the
    /// weight is gathered first. Whether it is an expert's.
    Weight(f64, bool),
}

impl StageWork {
    /// The experts' fraction of the weights this stage trains.
    pub(super) fn expert_share(&self) -> f64 {
        if self.trained > 0.0 {
            self.trained_experts / self.trained
        } else {
            0.0
        }
    }
}

/// One stage's work for one micro-batch, before communication costs.
#[derive(Default, Clone)]
pub(super) struct StageWork {
    pub(super) forward_s: f64,
    pub(super) backward_s: f64,
    /// Blocking collectives, (kernel count x need).
    pub(super) forward_needs: Vec<(f64, Need)>,
    pub(super) backward_needs: Vec<(f64, Need)>,
    /// Time per kernel class (class, seconds, the bound its first kernel named: the report
    /// names a class's bound so), the classes in the order the stage first runs them.
    pub(super) by_class: Vec<(KernelClass, f64, String)>,
    /// Dense parameters held (before model-parallel sharding).
    pub(super) parameters: f64,
    pub(super) update_s: f64,
    /// Graphs without repeated layers: the backward step in order, so that gradient
    /// buckets meet the blocking collectives they share a fabric with.
    pub(super) backward_order: Vec<StepEvent>,
    pub(super) forward_order: Vec<StepEvent>,
    /// Weights this stage trains, per device before data-parallel sharding: model-parallel
    /// shares, experts split over the expert group, frozen layers left out.
    pub(super) trained: f64,
    /// The experts' part of `trained`: replicated d/e times, not d.
    pub(super) trained_experts: f64,
    /// On embedding engines (SparseCores): lookup and update time of one micro-batch, and
    /// the all-to-alls they wait for.
    pub(super) sparse_s: f64,
    pub(super) sparse_needs: Vec<(f64, Need)>,
    /// Compute and memory energy of one micro-batch's forward and backward, and of the
    /// optimizer step, on one device of the stage.
    pub(super) step_j: f64,
    pub(super) update_j: f64,
    /// Repeated layers this stage holds.
    pub(super) layers: u64,
    /// One micro-batch's compute per layer type (by `LayerType as usize`): forward,
    /// backward and recomputation (on embedding engines: not counted here).
    pub(super) by_layer: [PhaseTimes; 5],
}

/// One pass of the attention core on a device (forward; or backward with recomputation):
/// its kernels' time over all instances, its instances, and one instance's launches.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AttentionPass {
    time_s: f64,
    instances: u64,
    launch_s: f64,
}

/// Compute time of one layer type's kernels by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct PhaseTimes {
    pub(super) forward_s: f64,
    pub(super) backward_s: f64,
    pub(super) recompute_s: f64,
}

/// Scales the token dimension of a kernel by `f` (a micro-batch's share of the batch).
fn scale_tokens(k: &mut Kernel, f: f64) {
    let shrink = |x: u64| ((x as f64 * f).ceil() as u64).max(1);
    match &mut k.op {
        Op::Gemm {
            batch, m, k: kk, ..
        } => {
            if *batch > 1 {
                *batch = shrink(*batch);
            } else if k.phase == Phase::BackwardWeight {
                *kk = shrink(*kk);
            } else {
                *m = shrink(*m);
            }
        }
        op => scale_stream(op, f),
    }
}

fn div(x: &mut u64, d: u64) {
    *x = x.div_ceil(d).max(1);
}

/// Multiplies a streaming or gather kernel's traffic and work by `factor`.
fn scale_stream(op: &mut Op, factor: f64) {
    match op {
        Op::Stream {
            read_bytes,
            write_bytes,
            flops,
        } => {
            *read_bytes *= factor;
            *write_bytes *= factor;
            *flops *= factor;
        }
        Op::Fused {
            read_bytes,
            write_bytes,
            flops,
            model_flops,
            resident_bytes,
        } => {
            *read_bytes *= factor;
            *write_bytes *= factor;
            *flops *= factor;
            *model_flops *= factor;
            *resident_bytes *= factor;
        }
        Op::Gather {
            read_bytes,
            write_bytes,
            ..
        } => {
            *read_bytes *= factor;
            *write_bytes *= factor;
        }
        Op::Gemm { .. } => {}
    }
}

/// Context parallelism over `cp` ranks: each holds 1/cp of every sequence's tokens. Weight
/// products and streams take 1/cp of the tokens. An attention product takes its rank's
/// queries against the whole sequence's keys, 1/cp of the score tiles (the causal load
/// balance gives every rank an equal share): one of its two sequence-long dimensions is
/// cut, `m` where it is at least `k`, else `k` (the FLOPs are the same either way; the
/// dimension is the queries' but in the values' gradient, whose two are equal). A fused
/// attention kernel (flash) does 1/cp of the work on 1/cp of the queries and outputs but
/// reads the whole sequence's keys and values (`kv_bytes`, both, for the micro-batch), and
/// its backward writes their gradients' partial sums for the whole sequence. The key and
/// value exchange is priced apart ([`StageWork::add_context_exchange`]).
fn split_context(k: &mut Kernel, cp: u64, kv_bytes: f64) {
    let attention = k.class == KernelClass::Attention;
    let phase = k.phase;
    match &mut k.op {
        Op::Gemm { m, k: kk, .. } if attention => {
            if *m >= *kk {
                div(m, cp);
            } else {
                div(kk, cp);
            }
        }
        Op::Gemm { m, k: kk, .. } => {
            if phase == Phase::BackwardWeight {
                div(kk, cp);
            } else {
                div(m, cp);
            }
        }
        op @ Op::Fused { .. } if attention => {
            scale_stream(op, 1.0 / cp as f64);
            let rest = kv_bytes * (1.0 - 1.0 / cp as f64);
            if let Op::Fused {
                read_bytes,
                write_bytes,
                ..
            } = op
            {
                // The backward's recomputed scores read nothing of their own.
                if *read_bytes > 0.0 {
                    *read_bytes += rest;
                }
                if phase == Phase::BackwardInput {
                    *write_bytes += rest;
                }
            }
        }
        op => scale_stream(op, 1.0 / cp as f64),
    }
}

/// Splits a kernel's work `d` ways: batched products by their batch, streams by bytes.
fn divide_stream(op: &mut Op, d: f64) {
    match op {
        Op::Gemm { batch, .. } => div(batch, d as u64),
        op => scale_stream(op, 1.0 / d),
    }
}

/// One device's share of kernel `k` (already scaled to a micro-batch) under `s`: the
/// blocking collectives it needs, per instance, and by how much fewer instances of it the
/// device runs (expert parallelism: a device holds 1/e of the experts). `parallel_blocks`:
/// the layers run attention and feed-forward side by side ([`Carried`]).
fn split_kernel(k: &mut Kernel, s: &Strategy, parallel_blocks: bool) -> (Vec<Need>, u64) {
    let mut needs = Vec::new();
    if matches!(k.split, Split::Expert | Split::ExpertWhole) {
        split_expert(k, s, &mut needs);
        return (needs, s.expert);
    }
    if k.split.is_table() {
        split_table(k, s, &mut needs);
        return (needs, 1);
    }
    match s.kernel {
        Some(KernelSplit::Rc { kp1, kp2 }) => split_rc(k, kp1, kp2, &mut needs),
        Some(KernelSplit::Cr { kp1 }) => split_cr(k, kp1, &mut needs),
        None if s.tensor > 1 => {
            let carried = match (parallel_blocks, k.split, k.layer) {
                (true, Split::Column, LayerType::Dense) => Carried::Input,
                (true, Split::Row, LayerType::Attention) => Carried::Output,
                _ => Carried::Neither,
            };
            split_tensor(k, s.tensor, s.sequence_parallel, carried, &mut needs)
        }
        None => {}
    }
    (needs, 1)
}

fn need(needs: &mut Vec<Need>, collective: Collective, axis: Axis, bytes: f64) {
    needs.push(Need::new(collective, axis, bytes))
}

/// A product with one weight operand (not attention's batched products).
fn weight_gemm(k: &Kernel) -> bool {
    matches!(k.op, Op::Gemm { batch: 1, .. }) && k.class != KernelClass::Attention
}

/// Each device keeps 1/e of the experts; each expert takes the routed tokens of the e
/// devices. Routed tokens go out (dispatch) before the first expert GEMM and come back
/// (combine) after the second, and their gradients likewise. Tensor parallelism splits
/// each expert's feed-forward width as Megatron splits a dense one: partial sums over the
/// width are all-reduced.
fn split_expert(k: &mut Kernel, s: &Strategy, needs: &mut Vec<Need>) {
    let b = k.wire.bytes();
    let (e, t) = (s.expert, s.tensor);
    let Op::Gemm { m, k: kk, n, .. } = &mut k.op else {
        // The device's expert slots take the tokens of the e devices; a tensor every
        // tensor rank of the expert holds whole is not divided among them.
        let ranks = if k.split == Split::ExpertWhole { 1 } else { t };
        divide_stream(&mut k.op, ranks as f64 / e as f64);
        return;
    };
    if k.phase == Phase::BackwardWeight {
        *kk *= e;
        if *m >= *n {
            div(m, t);
        } else {
            div(n, t);
        }
        return;
    }
    // The device's expert slots take m tokens from each of the e devices.
    *m *= e;
    need(
        needs,
        Collective::AllToAll,
        Axis::Expert,
        (*m * (*kk).min(*n)) as f64 * b,
    );
    if *kk > *n {
        div(kk, t);
        if t > 1 {
            need(
                needs,
                Collective::AllReduce,
                Axis::Tensor,
                (*m * *n) as f64 * b,
            );
        }
    } else {
        div(n, t);
    }
}

/// Each device looks up its share of the tables for the whole batch: the same bytes as a
/// replica's share of every table, split again over a model-parallel group; the pooled
/// outputs (forward) and their gradients (backward) cross all-to-all, which leaves each
/// tensor-parallel rank its slice of its replica's pooled vectors. An interaction that
/// takes every feature ([`Split::TableWhole`]) runs whole on each rank: the ranks
/// all-gather the slices first; backward, each sends on its slice of the whole gradient.
/// Under sequence parallelism each rank runs the interaction on its own samples, which the
/// all-to-all hands it with every feature (the same bytes): no gather. Split per layer
/// type, the reader's split decides ([`super::LayeredPlan`] prices it between the tables
/// and their reader). Not priced: the gather under DeepFlow's RC and CR kernel splits
/// (which the search does not offer recommendation models). On SparseCores the gather stays
/// in the dense step, which the interaction it feeds runs in.
fn split_table(k: &mut Kernel, s: &Strategy, needs: &mut Vec<Need>) {
    let forward = matches!(k.phase, Phase::Forward | Phase::Recompute);
    let share = s.model_degree() as f64;
    if let Op::Gather {
        read_bytes,
        write_bytes,
        ..
    } = &k.op
    {
        let pooled = if forward {
            *write_bytes
        } else {
            *read_bytes - *write_bytes
        };
        need(needs, Collective::AllToAll, Axis::Every, pooled / share);
        let whole = k.split == Split::TableWhole && !s.sequence_parallel;
        if forward && whole && s.kernel.is_none() && s.tensor > 1 {
            need(needs, Collective::AllGather, Axis::Tensor, pooled);
        }
    }
    divide_stream(&mut k.op, share);
}

/// DeepFlow's RC (Sec. 3.3): weight products split over kp1 rows and kp2 columns; other
/// kernels over the rows (sharded ones over both).
fn split_rc(k: &mut Kernel, kp1: u64, kp2: u64, needs: &mut Vec<Need>) {
    let b = k.wire.bytes();
    if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm(k), &mut k.op) {
        match k.phase {
            Phase::BackwardWeight => {
                div(kk, kp1);
                div(n, kp2);
            }
            Phase::BackwardInput => {
                div(m, kp1);
                div(kk, kp2);
                need(
                    needs,
                    Collective::AllReduce,
                    Axis::Kp2,
                    (*m * *n) as f64 * b,
                );
            }
            _ => {
                div(m, kp1);
                div(n, kp2);
                need(
                    needs,
                    Collective::AllGather,
                    Axis::Kp2,
                    (*m * *n * kp2) as f64 * b,
                );
            }
        }
    } else {
        let d = match k.split {
            Split::Sharded => kp1 * kp2,
            _ => kp1,
        };
        divide_stream(&mut k.op, d as f64);
    }
}

/// DeepFlow's CR (Sec. 3.3): weight products split over their shared dimension.
fn split_cr(k: &mut Kernel, kp1: u64, needs: &mut Vec<Need>) {
    let b = k.wire.bytes();
    if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm(k), &mut k.op) {
        match k.phase {
            Phase::BackwardWeight => div(m, kp1),
            Phase::BackwardInput => {
                div(n, kp1);
                need(
                    needs,
                    Collective::AllGather,
                    Axis::Kp1,
                    (*m * *n * kp1) as f64 * b,
                );
            }
            _ => {
                div(kk, kp1);
                need(
                    needs,
                    Collective::AllReduce,
                    Axis::Kp1,
                    (*m * *n) as f64 * b,
                );
            }
        }
    }
}

/// A tensor-parallel linear layer's collective: under sequence parallelism an all-gather
/// or reduce-scatter next to the product, which `tp=overlap` can run beside it.
fn linear_need(needs: &mut Vec<Need>, collective: Collective, bytes: f64, sp: bool) {
    needs.push(Need {
        of_linear: sp,
        ..Need::new(collective, Axis::Tensor, bytes)
    });
}

/// Which collective of a tensor-parallel linear layer another layer's carries (parallel
/// blocks, PaLM Sec. 2): the feed-forward's up projection reads the input the QKV
/// projection's all-gather brings (sequence parallelism; backward, one reduction of both
/// input gradients); the attention's output projection adds into the sum the feed-forward's
/// down projection reduces (backward, one all-gather of the shared output gradient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    Neither,
    /// The collective on the layer's input side (a column layer's).
    Input,
    /// The collective on the layer's output side (a row layer's).
    Output,
}

/// Megatron tensor parallelism over `t` devices (column then row layers, an all-reduce
/// after the row layer), with sequence parallelism's reduce-scatter and all-gather
/// (Korthikanti et al. 2022) when `sp`; less what another layer carries.
fn split_tensor(k: &mut Kernel, t: u64, sp: bool, carried: Carried, needs: &mut Vec<Need>) {
    let b = k.wire.bytes();
    let forward = matches!(k.phase, Phase::Forward | Phase::Recompute);
    let reduce = if sp {
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    match (k.split, &mut k.op) {
        (Split::Column, Op::Gemm { m, k: kk, n, .. }) => match k.phase {
            Phase::BackwardWeight => div(n, t),
            Phase::BackwardInput => {
                div(kk, t);
                if carried != Carried::Input {
                    linear_need(needs, reduce, (*m * *n) as f64 * b, sp);
                }
            }
            _ => {
                if sp && carried != Carried::Input {
                    linear_need(needs, Collective::AllGather, (*m * *kk) as f64 * b, sp);
                }
                div(n, t);
            }
        },
        (Split::Row, Op::Gemm { m, k: kk, n, .. }) => match k.phase {
            Phase::BackwardWeight => div(m, t),
            Phase::BackwardInput => {
                if sp && carried != Carried::Output {
                    linear_need(needs, Collective::AllGather, (*m * *kk) as f64 * b, sp);
                }
                div(n, t);
            }
            _ => {
                div(kk, t);
                if carried != Carried::Output {
                    linear_need(needs, reduce, (*m * *n) as f64 * b, sp);
                }
            }
        },
        (Split::Sharded, op) => divide_stream(op, t as f64),
        (Split::Embedding, op) => {
            if forward {
                if let Op::Gather { write_bytes, .. } = op {
                    let sent = *write_bytes * k.wire.bytes() / k.precision.bytes();
                    need(needs, reduce, Axis::Tensor, sent);
                }
            }
            divide_stream(op, t as f64);
        }
        // A product every rank runs whole (a router, an adapter's thin matrix) runs on its
        // sequence-parallel shard of the tokens: the rows, or a weight gradient's inner
        // dimension.
        (
            Split::Replicated,
            Op::Gemm {
                batch: 1, m, k: kk, ..
            },
        ) if sp => {
            if k.phase == Phase::BackwardWeight {
                div(kk, t)
            } else {
                div(m, t)
            }
        }
        (Split::Replicated, op) if sp => divide_stream(op, t as f64),
        _ => {}
    }
}

/// The first repeated layer of stage `stage` and how many it holds
/// ([`Strategy::stage_layers`]; a strategy that fits the graph always has a split).
pub(super) fn stage_span(graph: &Graph, s: &Strategy, stage: u64) -> (u64, u64) {
    match s.split_of(graph.layers) {
        Some(split) => (split.start(stage), split.layers(stage)),
        None => {
            let per = graph.layers / s.pipeline;
            (stage * per, per)
        }
    }
}

/// The layers of stage `stage` that train: fine-tuning trains the last `trainable_layers`
/// layers, and this is the stage's share of them. Also whether the graph is fine-tuned.
fn trained_layers(graph: &Graph, (first, per_stage): (u64, u64)) -> (u64, bool) {
    let last = first + per_stage;
    let lowest = graph.layers - graph.trainable_layers.min(graph.layers);
    let trained = last.saturating_sub(first.max(lowest)).min(per_stage);
    (trained, graph.trainable_layers < graph.layers)
}

/// The weights stage `stage` holds (before model-parallel sharding) and those it trains
/// per device, with the experts' part (spread over the expert group).
fn stage_weights(graph: &Graph, s: &Strategy, stage: u64) -> StageWork {
    let p = s.pipeline;
    let layer_params = graph.parameters_by_position[Position::Layer as usize];
    let span = stage_span(graph, s, stage);
    let layers = span.1;
    let mut w = StageWork {
        parameters: if graph.layers > 0 {
            layer_params * layers as f64 / graph.layers as f64
        } else {
            layer_params / p as f64
        },
        layers,
        ..Default::default()
    };
    if stage == 0 {
        w.parameters += graph.parameters_by_position[Position::Head as usize];
    }
    if stage == p - 1 {
        w.parameters += graph.parameters_by_position[Position::Tail as usize];
    }
    // Tied embeddings split over stages: the last keeps its own copy for the logits.
    let tied_copy = if p > 1 && stage == p - 1 {
        graph.tied_parameters
    } else {
        0.0
    };
    w.parameters += tied_copy;
    let model_shard = s.model_degree() as f64;
    let (trained_layers, fine_tuning) = trained_layers(graph, span);
    let layer = if graph.layers > 0 {
        layer_params / graph.layers as f64
    } else {
        0.0
    };
    let experts = graph.expert_parameters / graph.layers.max(1) as f64;
    let (mut trained, trained_experts) = if graph.layers > 0 {
        let spread = trained_layers as f64 * experts / s.expert as f64;
        (trained_layers as f64 * (layer - experts) + spread, spread)
    } else {
        (layer_params, graph.expert_parameters / s.expert as f64)
    };
    // Fine-tuning freezes the embedding, whatever share of the layers it trains.
    let embedding_frozen = fine_tuning || graph.trainable_share < 1.0;
    if stage == 0 && !embedding_frozen {
        trained += graph.parameters_by_position[Position::Head as usize];
    }
    if stage == p - 1 {
        trained += graph.parameters_by_position[Position::Tail as usize];
    }
    if !embedding_frozen {
        // Trained as the first stage's embedding is (the two kept equal by an all-reduce
        // of their gradients between the two stages, which is not priced: GPT-3 175B at
        // t8 all-reduces 154 MB between two devices once a step).
        trained += tied_copy;
    }
    if graph.layers == 0 {
        // Experts outside repeated layers (a DLRM's top MLP): 1/e of them here.
        trained -= graph.expert_parameters * (1.0 - 1.0 / s.expert as f64);
    }
    if !graph.trains {
        // Nothing trains (serving, a lone product): no gradient, no optimizer state.
        return w;
    }
    if graph.adapter_parameters > 0.0 {
        // LoRA: the adapters of the stage's layers train, split by tensor parallelism
        // except their whole part (A beside a column-parallel product, B beside a row one).
        let (adapters, whole) = graph.adapters_in(layers, s.kernel.is_none());
        w.trained = (adapters - whole) / model_shard + whole;
        return w;
    }
    w.trained = trained / model_shard;
    // Without expert parallelism every device holds every expert, as a dense weight.
    if s.expert > 1 {
        w.trained_experts = trained_experts / model_shard;
    }
    w
}

/// Instances of `kernel` stage `stage` (of `p`, holding `layers` repeated layers) runs per
/// micro-batch (the update: once); `trained` is the stage's [`trained_layers`].
fn instances(
    kernel: &Kernel,
    graph: &Graph,
    (p, stage, layers): (u64, u64, u64),
    trained: (u64, bool),
) -> u64 {
    let backward = matches!(
        kernel.phase,
        Phase::Recompute | Phase::BackwardInput | Phase::BackwardWeight
    );
    let (trained_layers, fine_tuning) = trained;
    match kernel.position {
        _ if kernel.phase == Phase::Update => 1,
        Position::Layer if backward && fine_tuning => {
            kernel.count / graph.trainable_layers.max(1) * trained_layers
        }
        // A repeated layer's kernels run count / layers times per layer.
        Position::Layer if graph.layers > 0 && kernel.count % graph.layers == 0 => {
            kernel.count / graph.layers * layers
        }
        Position::Layer => kernel.count / p,
        Position::Head if stage == 0 => kernel.count,
        Position::Tail if stage == p - 1 => kernel.count,
        _ => 0,
    }
}

/// Every stage's weights ([`StageWork`] with only the weights filled in): what the memory
/// footprint needs, without timing a kernel.
pub(super) fn stages_weights(graph: &Graph, s: &Strategy) -> Vec<StageWork> {
    (0..s.pipeline)
        .map(|stage| stage_weights(graph, s, stage))
        .collect()
}

/// Every stage's work ([`stage_work`]); stages that hold the same kinds of layers (neither
/// end of the pipeline, the same trained layers) share one evaluation.
pub(super) fn stages_work(
    graph: &Graph,
    s: &Strategy,
    f_tok: f64,
    evaluator: &mut Evaluator,
    rates: &EnergyRates,
    sparse_cores: bool,
) -> Vec<Arc<StageWork>> {
    let p = s.pipeline;
    let mut out: Vec<Arc<StageWork>> = Vec::with_capacity(p as usize);
    // (first stage, last stage, layers, trained layers) -> the stage that has it.
    type Kind = (bool, bool, u64, (u64, bool));
    let mut seen: Vec<(Kind, usize)> = Vec::new();
    for stage in 0..p {
        let span = stage_span(graph, s, stage);
        let key = (
            stage == 0,
            stage == p - 1,
            span.1,
            trained_layers(graph, span),
        );
        match seen.iter().find(|(k, _)| *k == key) {
            Some(&(_, i)) => {
                let same = out[i].clone();
                out.push(same);
            }
            None => {
                seen.push((key, out.len()));
                let work = stage_work(graph, s, stage, f_tok, evaluator, rates, sparse_cores);
                out.push(Arc::new(work));
            }
        }
    }
    out
}

/// `kernel` (run `count` times on the stage) as one device runs it under `s`: its tokens
/// scaled by `f_tok`, split over the context ranks and the model-parallel axes; with its
/// count on the device and the blocking collectives it waits on.
fn on_device(
    kernel: &Kernel,
    count: u64,
    s: &Strategy,
    f_tok: f64,
    kv_bytes: f64,
    parallel_blocks: bool,
) -> (Kernel, u64, Vec<Need>) {
    let mut k = kernel.unnamed();
    scale_tokens(&mut k, f_tok);
    if s.context > 1 {
        split_context(&mut k, s.context, kv_bytes);
    }
    let (needs, fewer) = split_kernel(&mut k, s, parallel_blocks);
    // A device holds 1/e of the experts: of the expert kernels the tokens reach (fewer
    // than e where a served batch reaches few experts), at least one.
    (k, count.div_ceil(fewer.max(1)), needs)
}

/// The kernels one device of pipeline stage `stage` runs for one micro-batch of `graph`
/// under `s`, with their names and counts: what [`stage_work`] prices, for tests and tools
/// that look at a device's traffic (the roofline chart). The optimizer's update is left out; so is the key and value
/// exchange of context parallelism (a strategy with `context > 1` gives the kernels as its
/// ranks split them). `stage` must be below `s.pipeline` (a stage of the strategy).
pub fn device_kernels(graph: &Graph, s: &Strategy, stage: u64) -> Vec<(Kernel, u64)> {
    micro_batch_kernels(graph, s, stage, 1.0)
}

/// [`device_kernels`] for one micro-batch of `f_tok` of the graph's samples (the
/// prediction's `micro_batch / samples`): the kernels at the sizes the step runs them.
pub fn micro_batch_kernels(
    graph: &Graph,
    s: &Strategy,
    stage: u64,
    f_tok: f64,
) -> Vec<(Kernel, u64)> {
    let w = stage_weights(graph, s, stage);
    let trained = trained_layers(graph, stage_span(graph, s, stage));
    let span = (s.pipeline, stage, w.layers);
    let parallel_blocks = graph.parallel_blocks && graph.part_of.is_none();
    graph
        .kernels
        .iter()
        .filter(|k| k.phase != Phase::Update)
        .filter_map(|kernel| {
            let count = instances(kernel, graph, span, trained);
            (count > 0).then(|| {
                let (mut k, count, _) = on_device(kernel, count, s, f_tok, 0.0, parallel_blocks);
                k.name.clone_from(&kernel.name);
                (k, count)
            })
        })
        .collect()
}

/// One stage's work for one micro-batch: every kernel it runs, split by `s` and timed by
/// `evaluator`; `f_tok` is a micro-batch's share of the batch; with `sparse_cores` the
/// table lookups run on embedding engines beside the dense step.
pub(super) fn stage_work(
    graph: &Graph,
    s: &Strategy,
    stage: u64,
    f_tok: f64,
    evaluator: &mut Evaluator,
    rates: &EnergyRates,
    sparse_cores: bool,
) -> StageWork {
    let mut w = stage_weights(graph, s, stage);
    let trained = trained_layers(graph, stage_span(graph, s, stage));
    let span = (s.pipeline, stage, w.layers);
    // The attention core's compute per pass (forward; backward with recomputation), its
    // instances and the launches of one instance's kernels: what context-parallel
    // exchanges run beside.
    let mut attention = [AttentionPass::default(); 2];
    // Attention and feed-forward side by side share collectives (not in one layer type's
    // part of a model: the types may split differently).
    let parallel_blocks = graph.parallel_blocks && graph.part_of.is_none();
    // The keys and values of a micro-batch's whole sequences (what fused attention reads
    // on every context-parallel rank).
    let kv_bytes = graph.attention.map_or(0.0, |a| {
        f_tok
            * graph.samples
            * (a.sequence * 2 * a.kv_heads * a.head_dim) as f64
            * graph.precisions.activations.bytes()
    });
    for kernel in &graph.kernels {
        let count = instances(kernel, graph, span, trained);
        if count == 0 {
            continue;
        }
        if kernel.phase == Phase::Update {
            w.add_update(&mut kernel.unnamed(), graph, s, evaluator, rates);
            continue;
        }
        let (k, count, needs) = on_device(kernel, count, s, f_tok, kv_bytes, parallel_blocks);
        let t = evaluator.kernel_ref(&k);
        let mut needs = needs;
        for n in needs.iter_mut() {
            n.layer = k.layer;
            if n.of_linear {
                n.product_s = t.time_s;
            }
        }
        let (c, m) = rates.kernel_j(t);
        w.step_j += (c + m.iter().sum::<f64>()) * count as f64;
        let time = t.time_s * count as f64;
        if k.class == KernelClass::Attention && k.position == Position::Layer {
            let pass = &mut attention[usize::from(k.phase != Phase::Forward)];
            pass.time_s += time;
            pass.launch_s += t.launch_s;
            if matches!(k.phase, Phase::Forward | Phase::BackwardInput) {
                pass.instances = pass.instances.max(count);
            }
        }
        match w.by_class.iter_mut().find(|c| c.0 == k.class) {
            Some(c) => c.1 += time,
            None => w.by_class.push((k.class, time, t.bound.to_string())),
        }
        if sparse_cores && k.split.is_table() {
            // SparseCores: the lookup (or its update) and the pooled all-to-all leave the
            // dense step. The tensor ranks' gather of the pooled vectors feeds the
            // TensorCores' interaction: it stays in the dense step.
            let (dense, sparse): (Vec<Need>, Vec<Need>) =
                needs.into_iter().partition(|n| n.axis == Axis::Tensor);
            w.sparse_s += time;
            w.sparse_needs
                .extend(sparse.into_iter().map(|n| (count as f64, n)));
            if !dense.is_empty() {
                w.add_step_kernel(&k, graph, s, 0.0, count, dense);
            }
            continue;
        }
        w.add_step_kernel(&k, graph, s, time, count, needs);
    }
    if let Some(shape) = graph.attention.filter(|_| s.context > 1) {
        let samples = f_tok * graph.samples;
        w.add_context_exchange(
            shape,
            s,
            samples,
            graph.precisions.communication.bytes(),
            attention,
        );
    }
    w
}

impl StageWork {
    /// Context parallelism's key and value exchange for the attention of each layer
    /// instance, one micro-batch of `samples` sequences, in messages of `wire` bytes per
    /// element. A rank holds one chunk: its tokens' keys and values for its tensor rank's
    /// key/value heads. `attention`: the attention core's compute and instances per pass
    /// (forward; backward with recomputation) on this device.
    ///
    /// - Ring (Megatron-LM's context parallelism): cp - 1 steps per pass, each sending one
    ///   chunk on to the next rank beside the attention of the chunk in hand (1/cp of the
    ///   pass's attention, its own kernels: a step adds their launches); backward sends the
    ///   chunk and its key/value gradient partial sums, and under full recomputation the
    ///   rerun forward's chunk too.
    /// - All-gather (Llama 3): forward gathers every rank's chunk before the attention;
    ///   backward gathers them again (none is kept: the gathered keys and values would hold
    ///   cp times the memory; under full recomputation the rerun forward's gather serves the
    ///   backward right after it) and reduce-scatters their gradients. All on the critical
    ///   path.
    fn add_context_exchange(
        &mut self,
        shape: AttentionShape,
        s: &Strategy,
        samples: f64,
        wire: f64,
        attention: [AttentionPass; 2],
    ) {
        let cp = s.context;
        let kv_heads = shape.kv_heads.div_ceil(s.tensor) as f64;
        let chunk =
            samples * (shape.sequence / cp) as f64 * 2.0 * kv_heads * shape.head_dim as f64 * wire;
        let reruns = f64::from(u8::from(shape.reruns_forward));
        let exchange = |collective, bytes, kind| Need {
            layer: LayerType::Attention,
            context: Some(kind),
            ..Need::new(collective, Axis::Context, bytes)
        };
        let [forward, backward] = attention;
        if s.context_attention != Some(ContextAttention::AllGather) {
            // A step beside one chunk's attention, with that chunk's kernel launches.
            let step = |pass: AttentionPass, bytes: f64| {
                let calls = (pass.instances * (cp - 1)) as f64;
                let need = Need {
                    product_s: pass.time_s / (pass.instances.max(1) * cp) as f64,
                    launch_s: pass.launch_s,
                    ..exchange(Collective::PointToPoint, bytes, ContextAttention::Ring)
                };
                (calls, need)
            };
            self.forward_needs.push(step(forward, chunk));
            self.backward_needs
                .push(step(backward, (2.0 + reruns) * chunk));
        }
        if s.context_attention != Some(ContextAttention::Ring) {
            let gather =
                |collective| exchange(collective, chunk * cp as f64, ContextAttention::AllGather);
            let (forward_n, backward_n) = (forward.instances as f64, backward.instances as f64);
            self.forward_needs
                .push((forward_n, gather(Collective::AllGather)));
            self.backward_needs
                .push((backward_n, gather(Collective::AllGather)));
            self.backward_needs
                .push((backward_n, gather(Collective::ReduceScatter)));
        }
    }

    /// The optimizer runs once per iteration on this stage's shard of the weights. The
    /// graph's update kernel covers every trainable weight once; this device updates its
    /// trained share of them. ZeRO shards dense weights' state over the data group, an
    /// expert's over its replicas.
    fn add_update(
        &mut self,
        k: &mut Kernel,
        graph: &Graph,
        s: &Strategy,
        evaluator: &mut Evaluator,
        rates: &EnergyRates,
    ) {
        let total_params: f64 = graph.parameters_by_position.iter().sum();
        let (dense, experts) = (self.trained - self.trained_experts, self.trained_experts);
        // Casts of the weights (FP8 copies, a `Pointwise` update) run on every weight a
        // device holds: sharded only under ZeRO-3; the optimizer on its ZeRO shard.
        let zero_sharded = if k.class == KernelClass::Pointwise {
            s.zero >= 3
        } else {
            s.zero >= 1
        };
        let mine = if zero_sharded {
            let group = s.zero_group() as f64;
            dense / group + experts * s.expert as f64 / group
        } else {
            self.trained
        };
        let share = if total_params > 0.0 {
            mine / (total_params * graph.trainable_share)
        } else {
            0.0
        };
        scale_stream(&mut k.op, share);
        let t = evaluator.kernel(k);
        let (c, m) = rates.kernel_j(&t);
        self.update_j += c + m.iter().sum::<f64>();
        self.update_s += t.time_s;
    }

    /// A kernel of the forward or backward step taking `time` for its `count` instances,
    /// with its blocking collectives; graphs without repeated layers also record the
    /// step's order of events.
    fn add_step_kernel(
        &mut self,
        k: &Kernel,
        graph: &Graph,
        s: &Strategy,
        time: f64,
        count: u64,
        needs: Vec<Need>,
    ) {
        let forward = matches!(k.phase, Phase::Forward);
        if forward {
            self.forward_s += time;
        } else {
            self.backward_s += time;
        }
        let layer = &mut self.by_layer[k.layer as usize];
        match k.phase {
            Phase::Forward => layer.forward_s += time,
            Phase::Recompute => layer.recompute_s += time,
            _ => layer.backward_s += time,
        }
        if graph.layers == 0 {
            self.record_order(k, s, forward, time, count, needs.len());
        }
        let list = if forward {
            &mut self.forward_needs
        } else {
            &mut self.backward_needs
        };
        list.extend(needs.into_iter().map(|n| (count as f64, n)));
    }

    /// Appends a kernel's events to its step's order: the weight it reads, its compute and
    /// collectives (a lookup's backward after its pooled gradients arrive), the gradient it
    /// makes.
    fn record_order(
        &mut self,
        k: &Kernel,
        s: &Strategy,
        forward: bool,
        time: f64,
        count: u64,
        needs: usize,
    ) {
        let (order, first) = if forward {
            (&mut self.forward_order, self.forward_needs.len())
        } else {
            (&mut self.backward_order, self.backward_needs.len())
        };
        let weight = match (k.phase, &k.op) {
            _ if k.class == KernelClass::Attention => None,
            (Phase::Forward, Op::Gemm { k, n, batch: 1, .. }) => Some(*k * *n),
            (Phase::BackwardWeight, Op::Gemm { m, n, batch: 1, .. }) => Some(*m * *n),
            _ => None,
        };
        let expert = k.split == Split::Expert && s.expert > 1;
        if let Some(n) = weight {
            order.push(StepEvent::Weight(n as f64 * count as f64, expert));
        }
        let needs_at = (first..first + needs).map(StepEvent::Need);
        if k.split.is_table() && !forward {
            order.extend(needs_at);
            order.push(StepEvent::Compute(time));
        } else {
            order.push(StepEvent::Compute(time));
            order.extend(needs_at);
        }
        if let (Some(n), Phase::BackwardWeight) = (weight, k.phase) {
            order.push(StepEvent::Gradient(n as f64 * count as f64, expert));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    /// Stages of unequal layers share the work whole: every repeated-layer kernel's
    /// instances over the stages add up to its count, each stage running its own layers'
    /// share; the stages' weights add up to the layers' (30 layers over 4 stages: 7/8/8/7).
    #[test]
    fn unequal_stages_share_the_layers_whole() {
        let text = "version: 1\nkind: transformer\nname: g\nhidden: 256\nlayers: 30\nheads: 4\n\
                    ffn_hidden: 1024\nsequence: 128\nvocab: 1000\nglobal_batch: 8\n\
                    precision: bf16\n";
        let graph = Workload::from_yaml("g.yaml", text).unwrap().graph();
        let s = Strategy::parse("p4").unwrap();
        let split = s.stage_layers(graph.layers).unwrap();
        assert_eq!(split, vec![7, 8, 8, 7]);
        for k in graph
            .kernels
            .iter()
            .filter(|k| k.position == Position::Layer)
        {
            let per_stage: Vec<u64> = (0..4)
                .map(|stage| {
                    let span = (4, stage, split[stage as usize]);
                    let trained = trained_layers(&graph, stage_span(&graph, &s, stage));
                    instances(k, &graph, span, trained)
                })
                .collect();
            if k.phase == Phase::Update {
                continue;
            }
            assert_eq!(per_stage.iter().sum::<u64>(), k.count, "{}", k.name);
            assert_eq!(per_stage[1] * 7, per_stage[0] * 8, "{}", k.name);
        }
        let layer_params = graph.parameters_by_position[Position::Layer as usize];
        let held: f64 = (0..4)
            .map(|stage| stage_weights(&graph, &s, stage).parameters)
            .sum();
        let ends = graph.parameters_by_position[Position::Head as usize]
            + graph.parameters_by_position[Position::Tail as usize];
        assert!((held - layer_params - ends).abs() < 1e-6 * held, "{held}");
    }

    /// A context-parallel rank does 1/cp of every kernel: each kernel's FLOPs over the cp
    /// ranks add up to the whole sequence's (the attention's score tiles included: its
    /// queries against every key), a product cut along one of its tokens' dimensions (the
    /// sequence's, 1024, for an attention product; the 2 x 1024 tokens' for a weight
    /// product); streams and gathers move 1/cp of the bytes; fused attention reads (and its
    /// backward writes) the whole sequence's keys and values besides its 1/cp share.
    #[test]
    fn context_parallel_ranks_share_every_kernel_whole() {
        for attention in ["flash", "materialized"] {
            let text = format!(
                "version: 1\nkind: transformer\nname: g\nhidden: 512\nlayers: 2\nheads: 8\n\
                 kv_heads: 2\nffn_hidden: 2048\nsequence: 1024\nvocab: 1000\n\
                 global_batch: 2\nprecision: bf16\nattention: {attention}\n"
            );
            let graph = Workload::from_yaml("g.yaml", &text).unwrap().graph();
            // Keys and values: 2 sequences x 1024 tokens x 2 heads x 64 x 2 tensors x 2 B.
            let kv = 2.0 * 1024.0 * 2.0 * 64.0 * 2.0 * 2.0;
            let mut fused = 0;
            for k in graph.kernels.iter().filter(|k| k.phase != Phase::Update) {
                let mut split = k.clone();
                split_context(&mut split, 4, kv);
                if k.flops() > 0.0 {
                    let ratio = split.flops() * 4.0 / k.flops();
                    assert!(
                        (ratio - 1.0).abs() < 1e-12,
                        "{attention} {}: {ratio}",
                        k.name
                    );
                }
                let moved = |op: &Op| match *op {
                    Op::Stream {
                        read_bytes,
                        write_bytes,
                        ..
                    }
                    | Op::Fused {
                        read_bytes,
                        write_bytes,
                        ..
                    }
                    | Op::Gather {
                        read_bytes,
                        write_bytes,
                        ..
                    } => (read_bytes, write_bytes),
                    Op::Gemm { .. } => (0.0, 0.0),
                };
                let ((r, w), (r4, w4)) = (moved(&k.op), moved(&split.op));
                let rest = kv * 0.75;
                let (read, write) = match k.op {
                    Op::Fused { .. } if k.class == KernelClass::Attention => {
                        fused += 1;
                        let read = if r > 0.0 { r / 4.0 + rest } else { 0.0 };
                        let backward = k.phase == Phase::BackwardInput;
                        (read, w / 4.0 + if backward { rest } else { 0.0 })
                    }
                    _ => (r / 4.0, w / 4.0),
                };
                assert!((r4 - read).abs() <= 1e-9 * r.max(1.0), "{}: read", k.name);
                assert!((w4 - write).abs() <= 1e-9 * w.max(1.0), "{}: write", k.name);
                if let (
                    Op::Gemm { m, k: kk, n, .. },
                    Op::Gemm {
                        m: m4,
                        k: k4,
                        n: n4,
                        ..
                    },
                ) = (k.op, split.op)
                {
                    let cut: Vec<u64> = [(m, m4), (kk, k4), (n, n4)]
                        .iter()
                        .filter(|(a, b)| a != b)
                        .map(|&(a, b)| {
                            assert_eq!(a, 4 * b, "{}", k.name);
                            a
                        })
                        .collect();
                    let tokens = if k.class == KernelClass::Attention {
                        1024
                    } else {
                        2048
                    };
                    assert_eq!(cut, vec![tokens], "{attention} {}", k.name);
                }
            }
            assert_eq!(fused > 0, attention == "flash");
        }
    }

    /// Tied embeddings split into pipeline stages: the last stage keeps its own copy of the
    /// embedding for the logits (Megatron-LM), so with a pipeline every stage holds and
    /// trains what it would untied; in one stage the tied model holds one matrix fewer.
    #[test]
    fn a_pipelines_last_stage_keeps_its_copy_of_a_tied_embedding() {
        let graph = |tied: bool| {
            let text = format!(
                "version: 1\nkind: transformer\nname: t\nhidden: 1024\nlayers: 4\nheads: 16\n\
                 ffn_hidden: 4096\nsequence: 2048\nvocab: 50000\nglobal_batch: 8\n\
                 precision: bf16\ntie_embeddings: {tied}\n"
            );
            Workload::from_yaml("t.yaml", &text).unwrap().graph()
        };
        let (tied, untied) = (graph(true), graph(false));
        let matrix = 50000.0 * 1024.0;
        assert!((untied.parameters - tied.parameters - matrix).abs() < 1.0);
        for strategy in ["p2", "p4-t2"] {
            let s = Strategy::parse(strategy).unwrap();
            for stage in 0..s.pipeline {
                let (a, b) = (
                    stage_weights(&tied, &s, stage),
                    stage_weights(&untied, &s, stage),
                );
                assert!(
                    (a.parameters - b.parameters).abs() < 1.0,
                    "{strategy} {stage}"
                );
                assert!((a.trained - b.trained).abs() < 1.0, "{strategy} {stage}");
            }
        }
        let one = Strategy::parse("d2").unwrap();
        let (a, b) = (
            stage_weights(&tied, &one, 0),
            stage_weights(&untied, &one, 0),
        );
        assert!((b.parameters - a.parameters - matrix).abs() < 1.0);
        // Fine-tuning every layer still freezes the embedding, and so its copy: the
        // stages train the layers (and the final norm) alone.
        let text = "version: 1\nkind: transformer\nname: t\nhidden: 1024\nlayers: 4\nheads: 16\n\
                    ffn_hidden: 4096\nsequence: 2048\nvocab: 50000\nglobal_batch: 8\n\
                    precision: bf16\ntie_embeddings: true\nfine_tuning: {trainable_layers: 4}\n";
        let tuned = Workload::from_yaml("t.yaml", text).unwrap().graph();
        let s = Strategy::parse("p2").unwrap();
        let trained: f64 = (0..2).map(|i| stage_weights(&tuned, &s, i).trained).sum();
        let all = tuned.parameters_by_position.iter().sum::<f64>();
        assert!(
            (trained - all * tuned.trainable_share).abs() < 1.0,
            "{trained} vs {all}"
        );
    }

    /// A small mixture-of-experts model trained in FP8.
    fn fp8_moe() -> crate::workload::Graph {
        let text = "version: 1\nkind: transformer\nname: moe\nhidden: 512\nlayers: 2\nheads: 8\n\
                    ffn_hidden: 2048\nsequence: 256\nvocab: 1000\nglobal_batch: 8\n\
                    precision: fp8\nmoe: {experts: 8, top_k: 2, capacity_factor: 1.0}\n";
        Workload::from_yaml("moe.yaml", text).unwrap().graph()
    }

    /// Tensor parallelism inside an expert splits its products' wider dimension: the
    /// up-projection's input and the down-projection's output (and its gradient) are whole
    /// on every tensor rank, so their FP8 casts are not divided among the ranks; the
    /// up-projection's output gradient and the down-projection's input are.
    #[test]
    fn fp8_casts_of_expert_layers_divide_only_what_tensor_parallelism_splits() {
        let graph = fp8_moe();
        let cast = |name: &str| {
            graph
                .kernels
                .iter()
                .find(|k| k.name == name)
                .unwrap_or_else(|| panic!("no kernel {name}"))
                .clone()
        };
        let s = Strategy::parse("t2-d4-e4").unwrap();
        let bytes = |k: &Kernel| match k.op {
            Op::Stream { read_bytes, .. } => read_bytes,
            _ => panic!("a cast is a stream"),
        };
        for (name, whole) in [
            ("expert up fp8 cast (input)", true),
            ("expert up fp8 cast (output gradient)", false),
            ("expert down fp8 cast (input)", false),
            ("expert down fp8 cast (output gradient)", true),
        ] {
            let k = cast(name);
            assert_eq!(
                k.split == Split::ExpertWhole,
                whole,
                "{name}: {:?}",
                k.split
            );
            let mut split = k.clone();
            let (needs, fewer) = split_kernel(&mut split, &s, false);
            assert!(needs.is_empty(), "{name}");
            assert_eq!(fewer, 4, "{name}: a device runs a quarter of the experts");
            // The expert slots take the tokens of 4 devices; only split tensors halve.
            let expected = bytes(&k) * 4.0 / if whole { 1.0 } else { 2.0 };
            assert!((bytes(&split) / expected - 1.0).abs() < 1e-12, "{name}");
        }
    }
}
