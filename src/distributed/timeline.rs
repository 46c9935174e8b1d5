//! The iteration under one mapping: every collective priced on the mapping's group links,
//! the pipeline schedule (GPipe, 1F1B, interleaved 1F1B), ZeRO-3 gathers and scatters,
//! gradient buckets sharing the communication stream with blocking collectives (MAD Max
//! Sec. 4.3), embedding engines beside the dense step (TPU v4 Fig. 10).

use super::report::CommReport;
use super::schedule::{self, Piece, StageSteps};
use super::work::{Need, StageWork, StepEvent};
use crate::network::collective::Collective;
use crate::parallel::strategy::{KernelSplit, Strategy};
use crate::parallel::{Axis, Mapping};
use crate::workload::Graph;

/// Prices collectives under one mapping and lists those of the reported stage.
struct Ledger<'a> {
    map: &'a Mapping,
    comms: Vec<CommReport>,
}

impl Ledger<'_> {
    /// [`Ledger::charge`] for `bytes` of `collective` split over `parts` (axis, fraction);
    /// the experts' part is listed as its own line.
    fn charge_parts(
        &mut self,
        name: &str,
        parts: &[(Axis, f64)],
        (collective, bytes): (Collective, f64),
        calls: f64,
        blocking: bool,
        report: Option<f64>,
    ) -> f64 {
        let mut t = 0.0;
        for &(axis, f) in parts.iter().filter(|p| p.1 > 0.0) {
            let need = Need {
                collective,
                axis,
                bytes: bytes * f,
            };
            t += if axis == Axis::ExpertReplica {
                self.charge(&format!("expert {name}"), &need, calls, blocking, report)
            } else {
                self.charge(name, &need, calls, blocking, report)
            };
        }
        t
    }

    /// Time of `calls` calls of `need`; with `report = Some(r)` they are also listed, as
    /// `calls x r` calls per iteration.
    fn charge(
        &mut self,
        name: &str,
        need: &Need,
        calls: f64,
        blocking: bool,
        report: Option<f64>,
    ) -> f64 {
        let link = self.map.link(need.axis);
        let t = link.time(need.collective, need.bytes) * calls;
        let Some(r) = report else { return t };
        if link.p <= 1 || calls <= 0.0 {
            return t;
        }
        let (calls, time_s) = (calls * r, t * r);
        match self
            .comms
            .iter_mut()
            .find(|c| c.name == name && c.collective == need.collective)
        {
            Some(c) => {
                // Calls of different sizes (gradient buckets): report the mean size.
                c.bytes = (c.bytes * c.calls + need.bytes * calls) / (c.calls + calls);
                c.calls += calls;
                c.time_s += time_s;
            }
            None => self.comms.push(CommReport {
                name: name.to_string(),
                collective: need.collective,
                axis: need.axis,
                group: link.p,
                bytes: need.bytes,
                calls,
                time_s,
                blocking,
            }),
        }
        t
    }
}

/// The per-fabric phases of `scale` calls of `need` under `map`.
fn need_phases(map: &Mapping, need: &Need, scale: f64) -> Vec<(usize, f64)> {
    let mut out = map.link(need.axis).phases(need.collective, need.bytes);
    out.iter_mut().for_each(|p| p.1 *= scale);
    out
}

/// Traffic the communication stream carries during a step: per weight, its share of
/// `bytes` through `collective`, a fraction over each of `axes` in turn (`expert_axes` for
/// an expert's weight).
struct StreamTraffic<'a> {
    bytes: f64,
    collective: Collective,
    axes: &'a [(Axis, f64)],
    expert_axes: &'a [(Axis, f64)],
}

/// The axes a weight's gradients (or ZeRO shards) travel, each with the fraction of the
/// bytes it carries: the experts' `experts` share goes among an expert's replicas instead
/// of the whole data group.
fn sync_parts(axes: &[Axis], experts: f64) -> Vec<(Axis, f64)> {
    let mut parts = Vec::with_capacity(axes.len() + 1);
    for &axis in axes {
        if axis == Axis::Data && experts > 0.0 {
            if experts < 1.0 {
                parts.push((Axis::Data, 1.0 - experts));
            }
            parts.push((Axis::ExpertReplica, experts));
        } else {
            parts.push((axis, 1.0));
        }
    }
    parts
}

/// The pieces of one step of a graph without repeated layers (`scale`: the step's share
/// of the recorded work). `gathers`: weights gathered before use (ZeRO-3), all handed over
/// at the start when prefetched, else just before the kernel; `gradients`: a bucket per
/// weight once its gradient is ready. Also returns the gradient buckets' bytes (and
/// whether each is an expert's).
fn step_pieces(
    order: &[StepEvent],
    needs: &[(f64, Need)],
    scale: f64,
    map: &Mapping,
    gathers: Option<(&StreamTraffic, bool)>,
    gradients: Option<&StreamTraffic>,
) -> (Vec<Piece>, Vec<(f64, bool)>) {
    let phases =
        |collective, axis, bytes| -> Vec<(usize, f64)> { map.link(axis).phases(collective, bytes) };
    let traffic = |t: &StreamTraffic, bytes: f64, expert: bool| -> Piece {
        Piece::Bucket(
            if expert { t.expert_axes } else { t.axes }
                .iter()
                .flat_map(|&(a, f)| phases(t.collective, a, bytes * f))
                .collect(),
        )
    };
    let total = |pick: fn(&StepEvent) -> f64| -> f64 { order.iter().map(pick).sum() };
    let weights = total(|e| match e {
        StepEvent::Weight(n, _) => *n,
        _ => 0.0,
    });
    let grads = total(|e| match e {
        StepEvent::Gradient(n, _) => *n,
        _ => 0.0,
    });
    let mut pieces = Vec::new();
    let mut handed = 0;
    let mut next_gather = 0;
    if let Some((g, true)) = gathers {
        for e in order {
            if let StepEvent::Weight(n, expert) = *e {
                pieces.push(traffic(g, g.bytes * n / weights, expert));
                handed += 1;
            }
        }
    }
    let mut buckets = Vec::new();
    for e in order {
        match *e {
            StepEvent::Compute(t) => pieces.push(Piece::Compute(t * scale)),
            StepEvent::Need(j) => {
                let (count, n) = &needs[j];
                pieces.push(Piece::Blocking(need_phases(map, n, count * scale)));
            }
            StepEvent::Weight(n, expert) => match gathers {
                Some((_, true)) => {
                    pieces.push(Piece::Await(next_gather));
                    next_gather += 1;
                }
                Some((g, false)) => {
                    pieces.push(traffic(g, g.bytes * n / weights, expert));
                    pieces.push(Piece::Await(handed));
                    handed += 1;
                }
                None => {}
            },
            StepEvent::Gradient(n, expert) => {
                if let Some(g) = gradients.filter(|_| grads > 0.0) {
                    let bytes = g.bytes * n / grads;
                    pieces.push(traffic(g, bytes, expert));
                    buckets.push((bytes, expert));
                    handed += 1;
                }
            }
        }
    }
    (pieces, buckets)
}

pub(super) struct Eval {
    pub(super) time_s: f64,
    pub(super) sparse_s: f64,
    pub(super) exposed_s: f64,
    pub(super) bubble_s: f64,
    pub(super) comms: Vec<CommReport>,
}

/// Schedules one iteration under one mapping.
#[allow(clippy::too_many_arguments)]
pub(super) fn evaluate(
    graph: &Graph,
    s: &Strategy,
    stages: &[StageWork],
    map: &Mapping,
    m: u64,
    f_tok: f64,
    stage_param_bytes: f64,
    expert_param_share: f64,
    bytes: f64,
    free_end: f64,
) -> Eval {
    let p = s.pipeline as usize;
    let v = s.interleave as usize;
    let mut ledger = Ledger {
        map,
        comms: Vec::new(),
    };
    // Per stage and chunk: step durations with blocking collectives.
    let mut steps = Vec::with_capacity(p);
    let mut busiest_compute = 0.0f64;
    // Per stage: how long the last reduce-scatters outlast compute (ZeRO-3, weight by
    // weight).
    let mut tails = vec![0.0; p];
    for (i, st) in stages.iter().enumerate() {
        // The report lists the first stage's collectives, for all micro-batches.
        let report = (i == 0).then_some(m as f64);
        let mut blocking = |needs: &[(f64, Need)]| -> f64 {
            needs
                .iter()
                .map(|(count, n)| {
                    let label = format!("{} {}", n.axis.name(), n.collective.name());
                    ledger.charge(&label, n, *count, true, report)
                })
                .sum()
        };
        let fwd_comm = blocking(&st.forward_needs);
        let bwd_comm = blocking(&st.backward_needs);
        // FSDP (ZeRO-3): gather this stage's weights before each forward and backward
        // step and reduce-scatter its gradients after each backward. Prefetched gathers
        // run beside compute; just-in-time ones sit on the critical path.
        let (mut fwd, mut bwd) = (st.forward_s + fwd_comm, st.backward_s + bwd_comm);
        if s.zero >= 3 {
            // Every weight is gathered; only trained weights have gradients to scatter.
            // Experts travel among their replicas.
            let (gather_bytes, scatter_bytes) =
                (stage_param_bytes / v as f64, st.trained * bytes / v as f64);
            let gather_parts = sync_parts(&[Axis::Data], expert_param_share);
            let scatter_parts = sync_parts(&[Axis::Data], st.expert_share());
            let steps = (m * v as u64) as f64;
            let gather_s = ledger.charge_parts(
                "weight gather",
                &gather_parts,
                (Collective::AllGather, gather_bytes),
                2.0,
                !s.prefetch,
                report.map(|_| steps),
            ) / 2.0;
            let scatter_s = ledger.charge_parts(
                "gradient reduce-scatter",
                &scatter_parts,
                (Collective::ReduceScatter, scatter_bytes),
                1.0,
                false,
                report.map(|_| steps),
            );
            if graph.layers == 0 {
                // Weight by weight: each kernel waits for its gathered weight, and the
                // gathers and reduce-scatters share the fabric with blocking collectives.
                let (dense, experts) = (
                    sync_parts(&[Axis::Data], 0.0),
                    sync_parts(&[Axis::Data], 1.0),
                );
                let g = StreamTraffic {
                    bytes: gather_bytes,
                    collective: Collective::AllGather,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let r = StreamTraffic {
                    bytes: scatter_bytes,
                    collective: Collective::ReduceScatter,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let run = |order, needs, scatter| {
                    let gathers = Some((&g, s.prefetch));
                    let (pieces, _) = step_pieces(order, needs, 1.0, map, gathers, scatter);
                    schedule::shared_step(&pieces, 0.0, 0.0)
                };
                fwd = run(&st.forward_order, &st.forward_needs, None).end_s;
                let b = run(&st.backward_order, &st.backward_needs, Some(&r));
                // Reduce-scatters left over after a step hold up the next step's gathers
                // on the same stream; the last step's run past compute.
                let tail = (b.sync_end_s - b.end_s).max(0.0);
                bwd = b.end_s;
                if m > 1 {
                    bwd += tail;
                } else {
                    tails[i] = tail;
                }
            } else if s.prefetch {
                fwd = fwd.max(gather_s);
                bwd = bwd.max(gather_s + scatter_s);
            } else {
                fwd += gather_s;
                bwd = (bwd + gather_s).max(gather_s + scatter_s);
            }
        }
        busiest_compute = busiest_compute.max((st.forward_s + st.backward_s) * m as f64);
        steps.push(vec![
            StageSteps {
                forward_s: fwd / v as f64,
                backward_s: bwd / v as f64,
            };
            v
        ]);
    }
    // Activations handed between stages, per micro-batch.
    let sp_share = if s.sequence_parallel {
        s.tensor as f64
    } else {
        1.0
    };
    let boundary = graph.boundary_bytes * f_tok / sp_share;
    let transfer = map
        .link(Axis::Pipeline)
        .time(Collective::PointToPoint, boundary);
    if p > 1 {
        let calls = 2.0 * (m as f64) * v as f64;
        let need = Need {
            collective: Collective::PointToPoint,
            axis: Axis::Pipeline,
            bytes: boundary,
        };
        ledger.charge("pipeline activations", &need, calls, false, Some(1.0));
    }
    let timeline = schedule::simulate(&steps, m as usize, transfer, s.gpipe);
    // Gradient synchronisation per stage, bucket by bucket as the last backward step of
    // each chunk produces them (MAD Max Sec. 4.3: non-blocking, overlapped with backward).
    let layers_per_chunk = (graph.layers / (s.pipeline * s.interleave)).max(1) as usize;
    // Under ZeRO-3 the data group already reduce-scattered every micro-batch's gradients.
    let data_axes: Vec<Axis> = match (s.kernel, s.zero >= 3) {
        (Some(KernelSplit::Rc { .. }), false) => vec![Axis::Kp1, Axis::Data],
        (Some(KernelSplit::Rc { .. }), true) => vec![Axis::Kp1],
        (_, false) => vec![Axis::Data],
        (_, true) => vec![],
    };
    let grad_collective = if s.zero >= 2 {
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    let mut end = 0.0f64;
    let mut sparse_busy = 0.0f64;
    for (i, st) in stages.iter().enumerate() {
        let stage_bytes = st.trained
            * bytes
            * match s.kernel {
                Some(KernelSplit::Rc { kp1, .. }) => kp1 as f64,
                _ => 1.0,
            };
        let report = (i == 0).then_some(1.0);
        let mut comm_free = 0.0f64;
        let mut delay = 0.0;
        let phases = |need: &Need, scale: f64| need_phases(map, need, scale);
        let sync_axes = sync_parts(&data_axes, st.expert_share());
        let charge = |bytes: f64, ledger: &mut Ledger| {
            let need = (grad_collective, bytes);
            ledger.charge_parts("gradient sync", &sync_axes, need, 1.0, false, report);
        };
        let by_weight = st
            .backward_order
            .iter()
            .any(|e| matches!(e, StepEvent::Gradient(n, _) if *n > 0.0));
        for c in (0..v).rev() {
            if data_axes.is_empty() {
                break;
            }
            let (start, stop) = timeline.last_backward[i][c];
            let vf = v as f64;
            let pieces = if by_weight {
                // A bucket per weight, when its gradient is computed (DDP's order: last
                // layers first); an expert's among its replicas.
                let (dense, experts) = (sync_parts(&data_axes, 0.0), sync_parts(&data_axes, 1.0));
                let sync = StreamTraffic {
                    bytes: stage_bytes / vf,
                    collective: grad_collective,
                    axes: &dense,
                    expert_axes: &experts,
                };
                let (pieces, buckets) = step_pieces(
                    &st.backward_order,
                    &st.backward_needs,
                    1.0 / vf,
                    map,
                    None,
                    Some(&sync),
                );
                for &(bytes, expert) in &buckets {
                    let parts = if expert { &experts } else { &dense };
                    let need = (grad_collective, bytes);
                    ledger.charge_parts("gradient sync", parts, need, 1.0, false, report);
                }
                pieces
            } else {
                // Layered graphs: a bucket per layer, layers spread evenly over the step.
                let l = layers_per_chunk as f64;
                let per_layer: Vec<(usize, f64)> = st
                    .backward_needs
                    .iter()
                    .flat_map(|(count, n)| phases(n, count / (vf * l)))
                    .collect();
                let bucket = stage_bytes / (vf * l);
                let bucket_phases: Vec<(usize, f64)> = sync_axes
                    .iter()
                    .flat_map(|&(axis, f)| map.link(axis).phases(grad_collective, bucket * f))
                    .collect();
                if !per_layer
                    .iter()
                    .any(|a| bucket_phases.iter().any(|b| a.0 == b.0))
                {
                    // Nothing meets on a fabric: each bucket leaves as its layer ends.
                    let layer = (stop - start) / l;
                    let send: f64 = bucket_phases.iter().map(|p| p.1).sum();
                    for j in 0..layers_per_chunk {
                        charge(bucket, &mut ledger);
                        comm_free = comm_free.max(start + layer * (j + 1) as f64) + send;
                    }
                    continue;
                }
                // The step's own length per layer (it may also hold ZeRO gathers): what
                // blocking collectives leave of it is compute.
                let blocking: f64 = per_layer.iter().map(|p| p.1).sum();
                let compute = ((stop - start) / l - blocking).max(st.backward_s / (vf * l));
                let mut pieces = Vec::with_capacity(3 * layers_per_chunk);
                for _ in 0..layers_per_chunk {
                    pieces.push(Piece::Compute(compute));
                    pieces.push(Piece::Blocking(per_layer.clone()));
                    pieces.push(Piece::Bucket(bucket_phases.clone()));
                    charge(bucket, &mut ledger);
                }
                pieces
            };
            let shared = schedule::shared_step(&pieces, start, comm_free);
            comm_free = shared.sync_end_s;
            delay += shared.delay_s;
        }
        let mut after = st.update_s;
        if s.zero >= 1 && s.zero < 3 {
            let parts = sync_parts(&[Axis::Data], st.expert_share());
            let need = (Collective::AllGather, stage_bytes);
            after += ledger.charge_parts("updated weights", &parts, need, 1.0, false, report);
        }
        end = end.max((timeline.end_s[i] + delay + tails[i]).max(comm_free) + after);
        // Embedding engines run lookups, updates and their all-to-alls beside the dense
        // step, a batch ahead (TPU v4 Fig. 10: the step takes the longer of the two).
        if st.sparse_s > 0.0 {
            let report = (i == 0).then_some(m as f64);
            let exchange: f64 = st
                .sparse_needs
                .iter()
                .map(|(count, n)| {
                    let label = format!("sparse-core {}", n.collective.name());
                    ledger.charge(&label, n, *count, false, report)
                })
                .sum();
            sparse_busy = sparse_busy.max(m as f64 * (st.sparse_s + exchange));
            end = end.max(sparse_busy);
        }
    }
    let busiest_update = stages.iter().map(|st| st.update_s).fold(0.0, f64::max);
    let busiest_sparse = stages.iter().map(|st| st.sparse_s).fold(0.0, f64::max) * m as f64;
    Eval {
        time_s: end,
        sparse_s: sparse_busy,
        exposed_s: 0.0,
        bubble_s: (free_end - (busiest_compute + busiest_update).max(busiest_sparse)).max(0.0),
        comms: ledger.comms,
    }
}

/// End of the iteration with every communication free: the schedule's compute alone.
pub(super) fn free_schedule_end(s: &Strategy, stages: &[StageWork], m: u64) -> f64 {
    let v = s.interleave as usize;
    let free_steps: Vec<Vec<StageSteps>> = stages
        .iter()
        .map(|st| {
            vec![
                StageSteps {
                    forward_s: st.forward_s / v as f64,
                    backward_s: st.backward_s / v as f64,
                };
                v
            ]
        })
        .collect();
    let free = schedule::simulate(&free_steps, m as usize, 0.0, s.gpipe);
    stages
        .iter()
        .zip(&free.end_s)
        .map(|(st, e)| (e + st.update_s).max(st.sparse_s * m as f64))
        .fold(0.0, f64::max)
}
