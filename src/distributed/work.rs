//! One stage's work for one micro-batch (DeepFlow Sec. 5.1's super-graph of one device):
//! every kernel split by the strategy (tensor, sequence, RC/CR, expert, table-wise), the
//! exact bytes of the blocking collectives each split adds, the weights the stage holds and
//! trains, and the order of a step's events for graphs without repeated layers.

use crate::network::collective::Collective;
use crate::parallel::strategy::{KernelSplit, Strategy};
use crate::parallel::Axis;
use crate::perf::{EnergyRates, Evaluator};
use crate::workload::{Graph, Kernel, KernelClass, Op, Phase, Position, Split};

/// A collective a kernel needs, per instance.
pub(super) struct Need {
    pub(super) collective: Collective,
    pub(super) axis: Axis,
    pub(super) bytes: f64,
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
#[derive(Default)]
pub(super) struct StageWork {
    pub(super) forward_s: f64,
    pub(super) backward_s: f64,
    /// Blocking collectives, (kernel count x need).
    pub(super) forward_needs: Vec<(f64, Need)>,
    pub(super) backward_needs: Vec<(f64, Need)>,
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

/// Splits a kernel's work `d` ways: batched products by their batch, streams by bytes.
fn divide_stream(op: &mut Op, d: f64) {
    match op {
        Op::Gemm { batch, .. } => div(batch, d as u64),
        op => scale_stream(op, 1.0 / d),
    }
}

/// One device's share of kernel `k` (already scaled to a micro-batch) and the blocking
/// collectives it needs, per instance.
/// Splits `k` for one device under `s`: the collectives it needs, and by how much fewer
/// instances of it the device runs (expert parallelism: a device holds 1/e of the experts).
fn split_kernel(k: &mut Kernel, s: &Strategy) -> (Vec<Need>, u64) {
    let b = k.precision.bytes();
    let mut needs = Vec::new();
    let mut need = |collective, axis, bytes: f64| {
        needs.push(Need {
            collective,
            axis,
            bytes,
        })
    };
    let forward = matches!(k.phase, Phase::Forward | Phase::Recompute);
    if k.split == Split::Expert {
        // Each device keeps 1/e of the experts; each expert takes the routed tokens of the
        // e devices. Routed tokens go out (dispatch) before the first expert GEMM and come
        // back (combine) after the second, and their gradients likewise.
        // Tensor parallelism splits each expert's feed-forward width as Megatron splits a
        // dense one: partial sums over the width are all-reduced.
        let (e, t) = (s.expert, s.tensor);
        if let Op::Gemm { m, k: kk, n, .. } = &mut k.op {
            if k.phase == Phase::BackwardWeight {
                *kk *= e;
                if *m >= *n {
                    div(m, t);
                } else {
                    div(n, t);
                }
            } else {
                // The device's expert slots take m tokens from each of the e devices.
                *m *= e;
                need(
                    Collective::AllToAll,
                    Axis::Expert,
                    (*m * (*kk).min(*n)) as f64 * b,
                );
                if *kk > *n {
                    div(kk, t);
                    if t > 1 {
                        need(Collective::AllReduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                } else {
                    div(n, t);
                }
            }
        } else {
            divide_stream(&mut k.op, t as f64 / e as f64);
        }
        return (needs, e);
    }
    if k.split == Split::Table {
        // Each device looks up its share of the tables for the whole batch: the same bytes
        // as a replica's share of every table, split again over a model-parallel group;
        // the pooled outputs (forward) and their gradients (backward) cross all-to-all.
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
            need(Collective::AllToAll, Axis::Every, pooled / share);
        }
        divide_stream(&mut k.op, share);
        return (needs, 1);
    }
    let weight_gemm =
        matches!(k.op, Op::Gemm { batch: 1, .. }) && k.class != KernelClass::Attention;
    match s.kernel {
        Some(KernelSplit::Rc { kp1, kp2 }) => {
            if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm, &mut k.op) {
                match k.phase {
                    Phase::BackwardWeight => {
                        div(kk, kp1);
                        div(n, kp2);
                    }
                    Phase::BackwardInput => {
                        div(m, kp1);
                        div(kk, kp2);
                        need(Collective::AllReduce, Axis::Kp2, (*m * *n) as f64 * b);
                    }
                    _ => {
                        div(m, kp1);
                        div(n, kp2);
                        need(Collective::AllGather, Axis::Kp2, (*m * *n * kp2) as f64 * b);
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
        Some(KernelSplit::Cr { kp1 }) => {
            if let (true, Op::Gemm { m, k: kk, n, .. }) = (weight_gemm, &mut k.op) {
                match k.phase {
                    Phase::BackwardWeight => div(m, kp1),
                    Phase::BackwardInput => {
                        div(n, kp1);
                        need(Collective::AllGather, Axis::Kp1, (*m * *n * kp1) as f64 * b);
                    }
                    _ => {
                        div(kk, kp1);
                        need(Collective::AllReduce, Axis::Kp1, (*m * *n) as f64 * b);
                    }
                }
            }
        }
        None if s.tensor > 1 => {
            let t = s.tensor;
            let sp = s.sequence_parallel;
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
                        need(reduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                    _ => {
                        if sp {
                            need(Collective::AllGather, Axis::Tensor, (*m * *kk) as f64 * b);
                        }
                        div(n, t);
                    }
                },
                (Split::Row, Op::Gemm { m, k: kk, n, .. }) => match k.phase {
                    Phase::BackwardWeight => div(m, t),
                    Phase::BackwardInput => {
                        if sp {
                            need(Collective::AllGather, Axis::Tensor, (*m * *kk) as f64 * b);
                        }
                        div(n, t);
                    }
                    _ => {
                        div(kk, t);
                        need(reduce, Axis::Tensor, (*m * *n) as f64 * b);
                    }
                },
                (Split::Sharded, op) => divide_stream(op, t as f64),
                (Split::Embedding, op) => {
                    if forward {
                        if let Op::Gather { write_bytes, .. } = op {
                            need(reduce, Axis::Tensor, *write_bytes);
                        }
                    }
                    divide_stream(op, t as f64);
                }
                (Split::Replicated, op) if sp => divide_stream(op, t as f64),
                _ => {}
            }
        }
        None => {}
    }
    (needs, 1)
}

pub(super) fn stage_work(
    graph: &Graph,
    s: &Strategy,
    stage: u64,
    f_tok: f64,
    evaluator: &mut Evaluator,
    rates: &EnergyRates,
    sparse_cores: bool,
) -> StageWork {
    let p = s.pipeline;
    let layer_params = graph.parameters_by_position[Position::Layer as usize];
    let mut w = StageWork {
        parameters: layer_params / p as f64,
        ..Default::default()
    };
    if stage == 0 {
        w.parameters += graph.parameters_by_position[Position::Head as usize];
    }
    if stage == p - 1 {
        w.parameters += graph.parameters_by_position[Position::Tail as usize];
    }
    let total_params: f64 = graph.parameters_by_position.iter().sum();
    let model_shard = s.model_degree() as f64;
    // Fine-tuning trains the last `trainable_layers` layers: this stage's share of them.
    let per_stage = graph.layers / p;
    let (first, last) = (stage * per_stage, (stage + 1) * per_stage);
    let lowest = graph.layers - graph.trainable_layers.min(graph.layers);
    let trained_layers = last.saturating_sub(first.max(lowest)).min(per_stage);
    let fine_tuning = graph.trainable_layers < graph.layers;
    {
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
        if stage == 0 && !fine_tuning {
            trained += graph.parameters_by_position[Position::Head as usize];
        }
        if stage == p - 1 {
            trained += graph.parameters_by_position[Position::Tail as usize];
        }
        if graph.layers == 0 {
            // Experts outside repeated layers (a DLRM's top MLP): 1/e of them here.
            trained -= graph.expert_parameters * (1.0 - 1.0 / s.expert as f64);
        }
        w.trained = trained / model_shard;
        // Without expert parallelism every device holds every expert, as a dense weight.
        if s.expert > 1 {
            w.trained_experts = trained_experts / model_shard;
        }
    }
    for kernel in &graph.kernels {
        let backward = matches!(
            kernel.phase,
            Phase::Recompute | Phase::BackwardInput | Phase::BackwardWeight
        );
        let count = match kernel.position {
            _ if kernel.phase == Phase::Update => 1,
            Position::Layer if backward && fine_tuning => {
                kernel.count / graph.trainable_layers.max(1) * trained_layers
            }
            Position::Layer => kernel.count / p,
            Position::Head if stage == 0 => kernel.count,
            Position::Tail if stage == p - 1 => kernel.count,
            _ => 0,
        };
        if count == 0 {
            continue;
        }
        let mut k = kernel.clone();
        if k.phase == Phase::Update {
            // The optimizer runs once per iteration on this stage's shard of the weights.
            // The graph's update kernel covers every trainable weight once; this device
            // updates its trained share of them.
            // ZeRO shards dense weights' state over the data group, an expert's over its
            // replicas.
            let (dense, experts) = (w.trained - w.trained_experts, w.trained_experts);
            let mine = if s.zero >= 1 {
                dense / s.data as f64 + experts * s.expert as f64 / s.data as f64
            } else {
                w.trained
            };
            let share = if total_params > 0.0 {
                mine / (total_params * graph.trainable_share)
            } else {
                0.0
            };
            scale_stream(&mut k.op, share);
            let t = evaluator.kernel(&k);
            let (c, m) = rates.kernel_j(&t);
            w.update_j += c + m.iter().sum::<f64>();
            w.update_s += t.time_s;
            continue;
        }
        scale_tokens(&mut k, f_tok);
        let (needs, fewer) = split_kernel(&mut k, s);
        let count = count / fewer.max(1);
        let t = evaluator.kernel(&k);
        let (c, m) = rates.kernel_j(&t);
        w.step_j += (c + m.iter().sum::<f64>()) * count as f64;
        let time = t.time_s * count as f64;
        let forward = matches!(k.phase, Phase::Forward);
        if sparse_cores && k.split == Split::Table {
            // SparseCores: the lookup (or its update) and the pooled all-to-all leave the
            // dense step.
            w.sparse_s += time;
            w.by_class.push((k.class, time, t.bound.to_string()));
            w.sparse_needs
                .extend(needs.into_iter().map(|n| (count as f64, n)));
            continue;
        }
        if forward {
            w.forward_s += time;
        } else {
            w.backward_s += time;
        }
        let bound = t.bound.to_string();
        w.by_class.push((k.class, time, bound));
        if graph.layers == 0 {
            let (order, first) = if forward {
                (&mut w.forward_order, w.forward_needs.len())
            } else {
                (&mut w.backward_order, w.backward_needs.len())
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
            // Pooled-embedding gradients arrive before the lookup's backward; other
            // kernels' collectives follow them.
            let needs_at = (first..first + needs.len()).map(StepEvent::Need);
            if k.split == Split::Table && !forward {
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
        let list = if forward {
            &mut w.forward_needs
        } else {
            &mut w.backward_needs
        };
        list.extend(needs.into_iter().map(|n| (count as f64, n)));
    }
    w
}
