//! The iteration under one mapping: every collective priced on the mapping's group links,
//! the pipeline schedule (GPipe, 1F1B, interleaved 1F1B), ZeRO-3 gathers and scatters,
//! gradient buckets sharing the communication stream with blocking collectives (MAD Max
//! Sec. 4.3), embedding engines beside the dense step (TPU v4 Fig. 10).

use super::pipeline;
use std::sync::Arc;

use super::report::CommReport;
use super::schedule::{self, Piece, StageSteps};
use super::work::{Need, StageWork, StepEvent};
use crate::network::collective::Collective;
use crate::parallel::strategy::{ContextAttention, Strategy};
use crate::parallel::{Axis, Mapping};
use crate::workload::Graph;

/// Prices collectives under one mapping and lists those of the reported stage.
struct Ledger<'a> {
    map: &'a Mapping,
    comms: Vec<CommReport>,
    /// How the context-parallel ranks exchange keys and values under this mapping.
    context: Option<ContextAttention>,
    /// When tracing: the gradient stream's buckets of the stage being synchronised.
    buckets: Option<Vec<BucketSpan>>,
}

/// One message on a stage's communication stream, as a trace draws it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BucketSpan {
    pub(super) name: &'static str,
    pub(super) collective: Collective,
    pub(super) bytes: f64,
    pub(super) start_s: f64,
    pub(super) end_s: f64,
    /// (fabric, s) alone on the network, in order.
    pub(super) phases: Vec<(usize, f64)>,
}

/// What follows stage `i`'s last step in a traced iteration.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct StageEnd {
    /// End of its last step in the schedule.
    pub(super) schedule_end_s: f64,
    /// Blocking collectives' time lost to gradient traffic on their fabric.
    pub(super) delay_s: f64,
    /// ZeRO-3 reduce-scatters outlasting compute.
    pub(super) tail_s: f64,
    /// When its communication stream is free.
    pub(super) comm_free_s: f64,
    /// The optimizer update, then what follows it (ZeRO-1/2's gather of updated weights).
    pub(super) update_s: f64,
    pub(super) after_s: f64,
    pub(super) end_s: f64,
    pub(super) buckets: Vec<BucketSpan>,
    /// The embedding engines' busy time on this stage.
    pub(super) sparse_s: f64,
}

/// One iteration's schedule as run: what [`finish_parts`] records for a trace.
#[derive(Debug, Clone, Default)]
pub(super) struct Recording {
    /// Per stage and chunk: one step's durations as scheduled (blocking collectives and
    /// blocking sends inside).
    pub(super) steps: Vec<Vec<StageSteps>>,
    /// Every step's span.
    pub(super) spans: Vec<schedule::StepSpan>,
    /// One hand-off between stages beside compute (0 when sends block, folded into the
    /// steps: `folded_send_s`).
    pub(super) transfer_s: f64,
    pub(super) folded_send_s: f64,
    pub(super) stages: Vec<StageEnd>,
}

impl Ledger<'_> {
    /// Records a message on the communication stream when tracing.
    fn trace(&mut self, span: impl FnOnce(&Mapping) -> BucketSpan) {
        let map = self.map;
        if let Some(b) = &mut self.buckets {
            b.push(span(map));
        }
    }

    /// Whether `need` runs under this mapping: every need but the context-parallel
    /// exchanges of the kind not taken.
    fn keeps(&self, need: &Need) -> bool {
        need.taken(self.context)
    }

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
            let need = Need::new(collective, axis, bytes * f);
            t += if axis == Axis::ExpertReplica && report.is_some() {
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
            .find(|c| c.name == name && c.collective == need.collective && c.axis == need.axis)
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

/// The per-fabric phases of `collective` on `bytes` split over `parts` (axis, fraction), one
/// part after another.
fn parts_phases(
    map: &Mapping,
    parts: &[(Axis, f64)],
    collective: Collective,
    bytes: f64,
) -> Vec<(usize, f64)> {
    parts
        .iter()
        .flat_map(|&(axis, f)| map.link(axis).phases(collective, bytes * f))
        .collect()
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
/// of the whole data group. Over the context-parallel ranks and then the data group
/// (`context` ranks), hierarchically as over one group of both: the whole message among
/// the context ranks (a reduce-scatter and an all-gather cost an all-reduce), 1/context of
/// it among the replicas.
fn sync_parts(axes: &[Axis], experts: f64, context: u64) -> Vec<(Axis, f64)> {
    let mut parts = Vec::with_capacity(axes.len() + 1);
    let mut share = 1.0;
    for &axis in axes {
        if axis == Axis::Context {
            parts.push((axis, 1.0));
            share = 1.0 / context as f64;
        } else if axis == Axis::Data && experts > 0.0 {
            if experts < 1.0 {
                parts.push((Axis::Data, (1.0 - experts) * share));
            }
            parts.push((Axis::ExpertReplica, experts * share));
        } else {
            parts.push((axis, share));
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
    /// The context-parallel exchange taken (the first part's).
    pub(super) context: Option<ContextAttention>,
    pub(super) sparse_s: f64,
    /// The devices' step with the embedding engines' work before it rather than beside it:
    /// one batch's latency when nothing runs a batch ahead (serving).
    pub(super) serial_s: f64,
    pub(super) exposed_s: f64,
    pub(super) bubble_s: f64,
    pub(super) comms: Vec<CommReport>,
}

/// What the timeline of one iteration needs besides the mapping.
pub(super) struct Inputs<'a> {
    pub(super) graph: &'a Graph,
    pub(super) s: &'a Strategy,
    pub(super) stages: &'a [Arc<StageWork>],
    /// Micro-batches per replica.
    pub(super) m: u64,
    /// A micro-batch's share of the batch.
    pub(super) f_tok: f64,
    /// Bytes of the fullest stage's weights on one device before ZeRO-3 sharding.
    pub(super) stage_param_bytes: f64,
    /// The experts' share of those weights.
    pub(super) expert_param_share: f64,
    /// Bytes per weight gradient (what data parallelism reduces), and per weight.
    pub(super) gradient_bytes: f64,
    pub(super) weight_bytes: f64,
    /// End of the schedule with free communication.
    pub(super) free_end: f64,
    /// List the first stage's collectives for a report (a search reading only the time
    /// leaves them out: naming them is a tenth of the work). Pipeline transfers are listed
    /// either way. Without the list an [`Eval`]'s `comms` are incomplete: its time is
    /// right, its energy and exposed fraction are not, so it is never reported.
    pub(super) listing: bool,
    /// Share of the compute units a collective holds while it runs beside compute.
    pub(super) collective_compute_share: f64,
}

/// Every stage's step under one mapping, before the pipeline schedule: what a lower bound
/// on the iteration needs, and what [`finish`] schedules.
pub(super) struct Steps {
    /// The collectives listed so far (the first stage's).
    comms: Vec<CommReport>,
    /// The context-parallel exchange taken ([`context_choice`]).
    context: Option<ContextAttention>,
    /// Per stage and chunk: step durations with blocking collectives.
    steps: Vec<Vec<StageSteps>>,
    /// Per stage: how long the last reduce-scatters outlast compute (ZeRO-3, weight by
    /// weight).
    tails: Vec<f64>,
    /// One micro-batch's activations to the next stage.
    transfer: f64,
}

impl Steps {
    /// A lower bound on the iteration, from the steps alone: stage `b` runs its `m`
    /// micro-batches one after another, after the first has come through the stages before
    /// it and before the last goes back up them (a chunk's share of their steps and a
    /// transfer each way per stage), and stage 0 then updates.
    pub(super) fn bound(&self, inputs: &Inputs) -> f64 {
        let whole = self.steps.iter().map(|st| {
            st.iter()
                .fold((0.0, 0.0), |a, c| (a.0 + c.forward_s, a.1 + c.backward_s))
        });
        let update = inputs.stages.first().map_or(0.0, |st| st.update_s);
        schedule_bound(whole, inputs.m, inputs.s.interleave, self.transfer) + update
    }
}

/// A lower bound on any pipeline schedule of `m` micro-batches over stages whose whole
/// forward and backward step (all `chunks` chunks) take `stages`: stage `b` runs its
/// micro-batches one after another, after the first has come through the stages before it
/// and before the last goes back up them (a chunk's share of their steps and a `transfer`
/// each way per stage). Exact for 1F1B on equal stages without transfers.
pub(super) fn schedule_bound(
    stages: impl Iterator<Item = (f64, f64)>,
    m: u64,
    chunks: u64,
    transfer: f64,
) -> f64 {
    let (m, v) = (m as f64, chunks as f64);
    let mut before = 0.0;
    let mut bound = 0.0f64;
    for (f, b) in stages {
        bound = bound.max(before + m * (f + b));
        before += (f + b) / v + 2.0 * transfer;
    }
    bound
}

/// A lower bound on [`free_schedule_end`]: [`schedule_bound`] without transfers, then the
/// first stage's update, or the embedding engines' time if longer.
pub(super) fn free_bound(s: &Strategy, stages: &[StageTimes], m: u64) -> f64 {
    let whole = stages.iter().map(|st| (st.forward_s, st.backward_s));
    let update = stages.first().map_or(0.0, |st| st.update_s);
    let sparse = stages.iter().map(|st| st.sparse_s).fold(0.0, f64::max) * m as f64;
    (schedule_bound(whole, m, s.interleave, 0.0) + update).max(sparse)
}

/// Each stage's forward and backward step under `map` with their blocking collectives (and
/// ZeRO-3 traffic), and the activation hand-offs.
pub(super) fn stage_steps(inputs: &Inputs, map: &Mapping) -> Steps {
    let s = inputs.s;
    let mut ledger = Ledger {
        map,
        comms: Vec::new(),
        context: context_choice(inputs, map),
        buckets: None,
    };
    let p = s.pipeline as usize;
    let mut steps = Vec::with_capacity(p);
    let mut tails = vec![0.0; p];
    // Stages with the same work (one shared `StageWork`) take the same steps; only the
    // first stage's collectives are listed.
    let mut seen: Vec<(*const StageWork, (f64, f64, f64))> = Vec::new();
    for (i, st) in inputs.stages.iter().enumerate() {
        let ptr = Arc::as_ptr(st);
        let known = seen.iter().find(|(q, _)| *q == ptr).map(|x| x.1);
        let (fwd, bwd, tail) = match known {
            Some(step) if i > 0 => step,
            _ => {
                let step = stage_step(inputs, &mut ledger, i, st);
                seen.push((ptr, step));
                step
            }
        };
        tails[i] = tail;
        let v = s.interleave as usize;
        steps.push(vec![
            StageSteps {
                forward_s: fwd / v as f64,
                backward_s: bwd / v as f64,
            };
            v
        ]);
    }
    let transfer = pipeline_transfers(inputs, &mut ledger);
    Steps {
        comms: ledger.comms,
        context: ledger.context,
        steps,
        tails,
        transfer,
    }
}

/// How the context-parallel ranks exchange keys and values under `map`: the strategy's
/// kind, else the cheaper on the first stage (ties: the ring), each exchange at what it
/// adds to the step (a ring step beyond the attention beside it, [`beside`], and its
/// chunk's kernel launches; an all-gather or reduce-scatter whole). `None` without context
/// parallelism.
fn context_choice(inputs: &Inputs, map: &Mapping) -> Option<ContextAttention> {
    let s = inputs.s;
    if s.context <= 1 || s.context_attention.is_some() {
        return s.context_attention.filter(|_| s.context > 1);
    }
    let st = inputs.stages.first()?;
    let share = inputs.collective_compute_share;
    let (mut ring, mut gather) = (0.0, 0.0);
    for (count, n) in st.forward_needs.iter().chain(&st.backward_needs) {
        let comm = map.link(n.axis).time(n.collective, n.bytes) * count;
        match n.context {
            Some(ContextAttention::Ring) => ring += added_beside(n, *count, comm, share),
            Some(ContextAttention::AllGather) => gather += comm,
            None => {}
        }
    }
    Some(if ring <= gather {
        ContextAttention::Ring
    } else {
        ContextAttention::AllGather
    })
}

/// Schedules one iteration under one mapping: each stage's steps with their blocking
/// collectives (and ZeRO-3 traffic), the pipeline schedule with activation hand-offs, then
/// per stage the gradient synchronisation, the update and the embedding engines.
pub(super) fn evaluate(inputs: &Inputs, map: &Mapping) -> Eval {
    finish(inputs, map, stage_steps(inputs, map))
}

/// [`evaluate`] from the stages' steps under `map` ([`stage_steps`]).
pub(super) fn finish(inputs: &Inputs, map: &Mapping, steps: Steps) -> Eval {
    let part = Part {
        inputs,
        label: "",
        hands_on: true,
    };
    finish_parts(&[part], &[map], vec![steps], &[])
}

/// [`finish`] recording the schedule as run (for a trace).
pub(super) fn record(inputs: &Inputs, map: &Mapping) -> (Eval, Recording) {
    let part = Part {
        inputs,
        label: "",
        hands_on: true,
    };
    let mut recording = Recording::default();
    let eval = finish_recorded(
        &[part],
        &[map],
        vec![stage_steps(inputs, map)],
        &[],
        Some(&mut recording),
    );
    (eval, recording)
}

/// One part of an iteration whose layer types are split their own ways (see
/// [`finish_parts`]): its inputs, and the prefix of its collectives' names.
pub(super) struct Part<'a> {
    pub(super) inputs: &'a Inputs<'a>,
    pub(super) label: &'a str,
    /// Whether its activations cross from stage to stage (the part that opens a layer).
    pub(super) hands_on: bool,
}

/// Schedules an iteration made of `parts` run one after another in every step (layer
/// types split their own ways, MAD Max Sec. 4; one part for a uniform strategy): each
/// stage's step is the parts' steps with their blocking collectives, plus `extra` (per
/// stage: forward and backward time between parts, such as resharding activations); one
/// pipeline schedule; then per stage every part's gradient buckets on the one
/// communication stream, one part after another, and every part's update. The parts share
/// the strategy's pipeline, chunks, schedule and micro-batch count.
pub(super) fn finish_parts(
    parts: &[Part],
    maps: &[&Mapping],
    steps_of: Vec<Steps>,
    extra: &[(f64, f64)],
) -> Eval {
    finish_recorded(parts, maps, steps_of, extra, None)
}

/// [`finish_parts`], recording the schedule into `record` when given (one part: several
/// parts' joint gradient buckets are not recorded).
fn finish_recorded(
    parts: &[Part],
    maps: &[&Mapping],
    steps_of: Vec<Steps>,
    extra: &[(f64, f64)],
    mut record: Option<&mut Recording>,
) -> Eval {
    let first = parts[0].inputs;
    let (s, m) = (first.s, first.m);
    let mut ledgers = Vec::with_capacity(parts.len());
    let mut steps: Vec<Vec<StageSteps>> = Vec::new();
    let mut tails: Vec<f64> = Vec::new();
    let mut transfer = 0.0f64;
    // Backward time of the parts already added, per stage: parts before a part in the
    // forward pass run after it in the backward pass, so its last reduce-scatters outlast
    // only what they leave of that.
    let mut before: Vec<f64> = Vec::new();
    for ((part, st), &map) in parts.iter().zip(steps_of).zip(maps) {
        let Steps {
            comms,
            context,
            steps: own,
            tails: own_tails,
            transfer: own_transfer,
        } = st;
        let mut ledger = Ledger {
            map,
            comms,
            context,
            buckets: record.as_ref().map(|_| Vec::new()),
        };
        if part.hands_on {
            transfer = transfer.max(own_transfer);
        } else {
            // Only the part that opens a stage hands its activations on (its sends, and
            // with scattered sends their gathers).
            ledger
                .comms
                .retain(|c| c.axis != Axis::Pipeline && c.name != PIPELINE_GATHER);
        }
        ledgers.push(ledger);
        if steps.is_empty() {
            before = own
                .iter()
                .map(|c| c.iter().map(|x| x.backward_s).sum())
                .collect();
            (steps, tails) = (own, own_tails);
            continue;
        }
        for (tail, (own, done)) in tails.iter_mut().zip(own_tails.iter().zip(&before)) {
            *tail = tail.max(own - done);
        }
        for ((stage, add), done) in steps.iter_mut().zip(&own).zip(before.iter_mut()) {
            for (c, a) in stage.iter_mut().zip(add) {
                c.forward_s += a.forward_s;
                c.backward_s += a.backward_s;
            }
            *done += add.iter().map(|x| x.backward_s).sum::<f64>();
        }
    }
    assert!(!steps.is_empty(), "an iteration has at least one part");

    for (stage, &(fwd, bwd)) in steps.iter_mut().zip(extra) {
        let v = stage.len() as f64;
        for c in stage.iter_mut() {
            c.forward_s += fwd / v;
            c.backward_s += bwd / v;
        }
    }
    // Blocking sends: a step that hands its activations (or gradients) on ends when the
    // send does; the receiver then has them at once.
    let unfolded = transfer;
    let transfer = if s.send_overlap || steps.len() <= 1 {
        transfer
    } else {
        // Interleaved, the last stage's last chunk sends nothing forward and the first
        // stage's first chunk nothing backward: their stages' chunks share the v - 1 sends
        // evenly (equal chunks keep the schedule's closed form).
        let (p, v) = (steps.len(), steps[0].len());
        let end_share = (v - 1) as f64 / v as f64;
        for (i, stage) in steps.iter_mut().enumerate() {
            for c in stage.iter_mut() {
                c.forward_s += transfer * if i + 1 < p { 1.0 } else { end_share };
                c.backward_s += transfer * if i > 0 { 1.0 } else { end_share };
            }
        }
        0.0
    };
    let timeline = match record.as_deref_mut() {
        Some(r) => {
            r.steps = steps.clone();
            r.transfer_s = transfer;
            r.folded_send_s = if transfer == 0.0 { unfolded } else { 0.0 };
            let spans = Some(&mut r.spans);
            schedule::simulate_recorded(&steps, m as usize, transfer, s.gpipe, spans)
        }
        None => pipeline::solve(&steps, m as usize, transfer, s.gpipe),
    };
    let mut end = 0.0f64;
    let mut dense_end = 0.0f64;
    let mut sparse_busy = 0.0f64;
    let gradients: Vec<_> = parts.iter().map(|p| gradient_sync_of(p.inputs.s)).collect();
    for (i, tail) in tails.iter().enumerate() {
        let layered = parts
            .iter()
            .all(|p| p.inputs.graph.layers > 0 && !by_weight(&p.inputs.stages[i]));
        let overlapped = parts.iter().all(|p| p.inputs.s.grad_overlap);
        let (comm_free, delay, after) = if parts.len() > 1 && layered && overlapped {
            joint_layer_sync(parts, &mut ledgers, &timeline, &gradients, i)
        } else {
            // Backward runs the parts last to first: so do their buckets (a part without
            // gradients leaves the stream as it was).
            let (mut comm_free, mut delay, mut after) = (0.0f64, 0.0, 0.0);
            for ((part, ledger), grads) in parts.iter().zip(&mut ledgers).zip(&gradients).rev() {
                let st = &part.inputs.stages[i];
                let (free, d, a) =
                    stage_sync(part.inputs, ledger, &timeline, grads, i, st, comm_free);
                if st.trained > 0.0 || parts.len() == 1 {
                    comm_free = free;
                }
                delay += d;
                after += a;
            }
            (comm_free, delay, after)
        };
        let stage_end = (timeline.end_s[i] + delay + tail).max(comm_free) + after;
        if let Some(r) = record.as_deref_mut() {
            let update_s = parts.iter().map(|p| p.inputs.stages[i].update_s).sum();
            let buckets = ledgers
                .iter_mut()
                .flat_map(|l| l.buckets.as_mut().map(std::mem::take).unwrap_or_default())
                .map(|mut b| {
                    // What follows the update ends with the stage.
                    if b.start_s.is_nan() {
                        (b.start_s, b.end_s) = (stage_end - b.end_s, stage_end);
                    }
                    b
                })
                .collect();
            r.stages.push(StageEnd {
                schedule_end_s: timeline.end_s[i],
                delay_s: delay,
                tail_s: *tail,
                comm_free_s: comm_free,
                update_s,
                after_s: after,
                end_s: stage_end,
                buckets,
                sparse_s: 0.0,
            });
        }
        end = end.max(stage_end);
        dense_end = dense_end.max(stage_end);
        for (part, ledger) in parts.iter().zip(&mut ledgers) {
            let st = &part.inputs.stages[i];
            // Embedding engines run lookups, updates and their all-to-alls beside the dense
            // step, a batch ahead (TPU v4 Fig. 10: the step takes the longer of the two).
            if st.sparse_s > 0.0 {
                let report = (part.inputs.listing && i == 0).then_some(m as f64);
                let exchange: f64 = st
                    .sparse_needs
                    .iter()
                    .map(|(count, n)| {
                        let label = match report {
                            Some(_) => format!("sparse-core {}", n.collective.name()),
                            None => String::new(),
                        };
                        ledger.charge(&label, n, *count, false, report)
                    })
                    .sum();
                let busy = m as f64 * (st.sparse_s + exchange);
                if let Some(last) = record.as_deref_mut().and_then(|r| r.stages.last_mut()) {
                    last.sparse_s += busy;
                }
                sparse_busy = sparse_busy.max(busy);
                end = end.max(sparse_busy);
            }
        }
    }
    let per_stage = |f: &dyn Fn(&StageWork) -> f64| -> f64 {
        (0..steps.len())
            .map(|i| parts.iter().map(|p| f(&p.inputs.stages[i])).sum::<f64>())
            .fold(0.0f64, f64::max)
    };
    let busiest_compute = per_stage(&|st| (st.forward_s + st.backward_s) * m as f64);
    let busiest_update = per_stage(&|st| st.update_s);
    let busiest_sparse = per_stage(&|st| st.sparse_s) * m as f64;
    let context = ledgers.first().and_then(|l| l.context);
    let mut comms = Vec::new();
    for (part, ledger) in parts.iter().zip(ledgers) {
        comms.extend(ledger.comms.into_iter().map(|mut c| {
            if !part.label.is_empty() {
                c.name = format!("{} {}", part.label, c.name);
            }
            c
        }));
    }
    Eval {
        time_s: end,
        context,
        sparse_s: sparse_busy,
        serial_s: dense_end + sparse_busy,
        exposed_s: 0.0,
        bubble_s: (first.free_end - (busiest_compute + busiest_update).max(busiest_sparse))
            .max(0.0),
        comms,
    }
}

/// One micro-batch's forward and backward step on stage `i`, with its blocking
/// collectives; under ZeRO-3 also its weight gathers and gradient reduce-scatters. Returns
/// (forward, backward, how long the last reduce-scatters outlast the iteration's compute).
fn stage_step(inputs: &Inputs, ledger: &mut Ledger, i: usize, st: &StageWork) -> (f64, f64, f64) {
    // The report lists the first stage's collectives, for all micro-batches.
    let report = (inputs.listing && i == 0).then_some(inputs.m as f64);
    let beside_linear = |n: &Need| !blocks_compute(inputs.s, n);
    let context = ledger.context;
    let mut blocking = |needs: &[(f64, Need)]| -> f64 {
        needs
            .iter()
            .filter(|(_, n)| n.taken(context))
            .map(|(count, n)| {
                // Only listed collectives need their name.
                let label = match report {
                    Some(_) if beside_linear(n) => {
                        let next_to = if n.context.is_some() {
                            "attention"
                        } else {
                            "products"
                        };
                        let (axis, collective) = (n.axis.name(), n.collective.name());
                        format!("{axis} {collective} beside {next_to}")
                    }
                    Some(_) => format!("{} {}", n.axis.name(), n.collective.name()),
                    None => String::new(),
                };
                ledger.charge(&label, n, *count, !beside_linear(n), report)
            })
            .sum()
    };
    let (fwd, bwd) = if inputs.s.tp_overlap || context == Some(ContextAttention::Ring) {
        // Each linear layer's collective beside its own product, each ring step beside
        // one chunk's attention, the rest blocking.
        let share = inputs.collective_compute_share;
        let mut step = |compute: f64, needs: &[(f64, Need)]| {
            let mut t = compute;
            // The context exchange not taken adds nothing, not even its launches.
            for one in needs.iter().filter(|(_, n)| n.taken(context)) {
                let comm = blocking(std::slice::from_ref(one));
                let (count, n) = one;
                t += if beside_linear(n) {
                    added_beside(n, *count, comm, share)
                } else {
                    comm
                };
            }
            t
        };
        (
            step(st.forward_s, &st.forward_needs),
            step(st.backward_s, &st.backward_needs),
        )
    } else {
        let fwd_comm = blocking(&st.forward_needs);
        let bwd_comm = blocking(&st.backward_needs);
        (st.forward_s + fwd_comm, st.backward_s + bwd_comm)
    };
    if inputs.s.zero >= 3 {
        zero3_step(inputs, ledger, report, st, fwd, bwd)
    } else {
        (fwd, bwd, 0.0)
    }
}

/// Whether a collective of a step stops the compute while it runs: all do, but the
/// all-gathers and reduce-scatters of sequence-parallel linear layers under `tp=overlap`,
/// which run beside the products ([`beside`]), and context parallelism's ring steps, each
/// beside the attention of the chunk before; not the vocabulary-parallel embedding's
/// reduce-scatter nor the expert layers' all-reduce.
pub(super) fn blocks_compute(s: &Strategy, n: &Need) -> bool {
    !(s.tp_overlap && n.of_linear || n.context == Some(ContextAttention::Ring))
}

/// What `count` calls of `n`, taking `comm_s` alone, add to a step beside the product each
/// runs next to ([`beside`]), with the launches they bring.
fn added_beside(n: &Need, count: f64, comm_s: f64, share: f64) -> f64 {
    let product = n.product_s * count;
    beside(product, comm_s, share) - product + n.launch_s * count
}

/// Linear layers taking `linear_s` alone, with collectives taking `comm_s` alone run beside
/// them, decomposed and pipelined with the products (Wang et al., ASPLOS 2023; Transformer
/// Engine's userbuffers): while the collectives run they hold `share` of the compute units,
/// so the products run that much slower; the products left when they end run at full rate,
/// and collectives longer than the products set the time. Never longer than the two one
/// after the other (`linear_s + comm_s`) nor shorter than either.
pub(super) fn beside(linear_s: f64, comm_s: f64, share: f64) -> f64 {
    if comm_s * (1.0 - share) <= linear_s {
        linear_s + comm_s * share
    } else {
        comm_s
    }
}

/// FSDP (ZeRO-3): gather the stage's weights before each forward and backward step and
/// reduce-scatter its gradients after each backward. Prefetched gathers run beside
/// compute; just-in-time ones sit on the critical path. `fwd` and `bwd` are the steps
/// without them.
fn zero3_step(
    inputs: &Inputs,
    ledger: &mut Ledger,
    report: Option<f64>,
    st: &StageWork,
    fwd: f64,
    bwd: f64,
) -> (f64, f64, f64) {
    let (s, m, map) = (inputs.s, inputs.m, ledger.map);
    let v = s.interleave as usize;
    // Every weight is gathered; only trained weights have gradients to scatter.
    // Experts travel among their replicas.
    let (gather_bytes, scatter_bytes) = (
        inputs.stage_param_bytes / v as f64,
        st.trained * inputs.gradient_bytes / v as f64,
    );
    let axis = s.shard_axis();
    let gather_parts = sync_parts(&[axis], inputs.expert_param_share, 1);
    let scatter_parts = sync_parts(&[axis], st.expert_share(), 1);
    let steps = (m * v as u64) as f64;
    // A gather before each forward and backward step; serving gathers before the forward
    // only, and has no gradient to scatter.
    let gathers = if inputs.graph.trains { 2.0 } else { 1.0 };
    let gather_s = ledger.charge_parts(
        "weight gather",
        &gather_parts,
        (Collective::AllGather, gather_bytes),
        gathers,
        !s.prefetch,
        report.map(|_| steps),
    ) / gathers;
    if !inputs.graph.trains {
        let fwd = if s.prefetch {
            fwd.max(gather_s)
        } else {
            fwd + gather_s
        };
        return (fwd, bwd, 0.0);
    }
    let scatter_s = ledger.charge_parts(
        "gradient reduce-scatter",
        &scatter_parts,
        (Collective::ReduceScatter, scatter_bytes),
        1.0,
        false,
        report.map(|_| steps),
    );
    if inputs.graph.layers > 0 {
        // Without gradient overlap the reduce-scatters follow the backward step.
        return match (s.prefetch, s.grad_overlap) {
            (true, true) => (fwd.max(gather_s), bwd.max(gather_s + scatter_s), 0.0),
            (true, false) => (fwd.max(gather_s), bwd.max(gather_s) + scatter_s, 0.0),
            (false, true) => (
                fwd + gather_s,
                (bwd + gather_s).max(gather_s + scatter_s),
                0.0,
            ),
            (false, false) => (fwd + gather_s, bwd + gather_s + scatter_s, 0.0),
        };
    }
    // Weight by weight: each kernel waits for its gathered weight, and the gathers and
    // reduce-scatters share the fabric with blocking collectives.
    let (dense, experts) = (sync_parts(&[axis], 0.0, 1), sync_parts(&[axis], 1.0, 1));
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
    let fwd = run(&st.forward_order, &st.forward_needs, None).end_s;
    if !s.grad_overlap {
        // The reduce-scatters follow the backward step, on its critical path.
        let b = run(&st.backward_order, &st.backward_needs, None);
        return (fwd, b.end_s + scatter_s, 0.0);
    }
    let b = run(&st.backward_order, &st.backward_needs, Some(&r));
    // Reduce-scatters left over after a step hold up the next step's gathers on the same
    // stream; the last step's run past compute.
    let tail = (b.sync_end_s - b.end_s).max(0.0);
    if m > 1 {
        (fwd, b.end_s + tail, 0.0)
    } else {
        (fwd, b.end_s, tail)
    }
}

/// One micro-batch's activations (or their gradients) each device hands to the next stage,
/// bytes: its 1/t share under sequence parallelism or scattered sends.
pub(super) fn boundary_bytes(inputs: &Inputs) -> f64 {
    let s = inputs.s;
    let sp_share = if s.sequence_parallel || s.scatter_sends {
        s.tensor as f64
    } else {
        1.0
    };
    // A context-parallel rank sends on its share of the tokens.
    inputs.graph.boundary_bytes * inputs.f_tok / sp_share / s.context as f64
}

/// A message as a trace draws it: its bytes on the network and its phases (fabric, s).
pub(super) type Message = (f64, Vec<(usize, f64)>);

/// ZeRO-3's weight gather before each step and gradient reduce-scatter after each backward
/// step of stage `st` under `map`, as [`zero3_step`] prices them: per message its bytes on
/// the network and its phases (fabric, s) alone; `None` without ZeRO-3. For a trace.
pub(super) fn zero3_messages(
    inputs: &Inputs,
    map: &Mapping,
    st: &StageWork,
) -> Option<[Message; 2]> {
    let s = inputs.s;
    if s.zero < 3 {
        return None;
    }
    let v = s.interleave as f64;
    let axis = s.shard_axis();
    let message = |collective, bytes: f64, experts| {
        let parts = sync_parts(&[axis], experts, 1);
        let phases = parts_phases(map, &parts, collective, bytes);
        (on_wire(map, &parts, bytes), phases)
    };
    let gather = message(
        Collective::AllGather,
        inputs.stage_param_bytes / v,
        inputs.expert_param_share,
    );
    let scatter = message(
        Collective::ReduceScatter,
        st.trained * inputs.gradient_bytes / v,
        st.expert_share(),
    );
    Some([gather, scatter])
}

/// The listed name of scattered sends' all-gathers on arrival.
const PIPELINE_GATHER: &str = "pipeline gather";

/// Activations handed between stages, per micro-batch: listed, and the time of one (with
/// scattered sends, the share each rank sends and the all-gather that makes it whole on
/// arrival, over the receiving stage's tensor-parallel group).
fn pipeline_transfers(inputs: &Inputs, ledger: &mut Ledger) -> f64 {
    let s = inputs.s;
    let boundary = boundary_bytes(inputs);
    let gather = s.scatter_sends.then(|| {
        Need::new(
            Collective::AllGather,
            Axis::Tensor,
            boundary * s.tensor as f64,
        )
    });
    let transfer = ledger
        .map
        .link(Axis::Pipeline)
        .time(Collective::PointToPoint, boundary)
        + gather.as_ref().map_or(0.0, |g| {
            ledger.map.link(Axis::Tensor).time(g.collective, g.bytes)
        });
    if s.pipeline > 1 {
        let calls = 2.0 * (inputs.m as f64) * s.interleave as f64;
        let need = Need::new(Collective::PointToPoint, Axis::Pipeline, boundary);
        let blocking = !s.send_overlap;
        ledger.charge("pipeline activations", &need, calls, blocking, Some(1.0));
        if let Some(g) = &gather {
            ledger.charge(PIPELINE_GATHER, g, calls, blocking, Some(1.0));
        }
    }
    transfer
}

/// The data-parallel axes gradients synchronise over and the collective they use. Under
/// ZeRO-3 the shard group already reduce-scattered every micro-batch's gradients; with
/// hybrid sharding the shard replicas then all-reduce their shards.
fn gradient_sync_of(s: &Strategy) -> (Vec<Axis>, Collective) {
    let axes = s.gradient_sync_axes();
    // Hybrid shard groups all-reduce the shards they reduce-scattered.
    let collective = if s.zero >= 2 && s.shard == 0 {
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    (axes, collective)
}

/// Gradient synchronisation of stage `i`, bucket by bucket as the last backward step of
/// each chunk produces them (MAD Max Sec. 4.3: non-blocking, overlapped with backward),
/// then its update, on a communication stream free from `comm_free`. Returns (when its
/// communication stream is free, how much the buckets delayed blocking collectives, the
/// time after the schedule: update and ZeRO-1/2 weight gathers).
fn stage_sync(
    inputs: &Inputs,
    ledger: &mut Ledger,
    timeline: &schedule::Timeline,
    gradients: &(Vec<Axis>, Collective),
    i: usize,
    st: &StageWork,
    mut comm_free: f64,
) -> (f64, f64, f64) {
    let v = inputs.s.interleave as usize;
    let sync = sync_of(inputs, gradients, i, st);
    if !inputs.s.grad_overlap {
        // One flat synchronisation of every gradient once the stage's backward is done.
        if !sync.axes.is_empty() && sync.stage_bytes > 0.0 {
            let t = sync.charge(ledger, &sync.expert_axes, sync.stage_bytes);
            let start = comm_free.max(timeline.end_s[i]);
            comm_free = start + t;
            ledger.trace(|map| BucketSpan {
                name: "gradient sync",
                collective: sync.collective,
                bytes: on_wire(map, &sync.expert_axes, sync.stage_bytes),
                start_s: start,
                end_s: comm_free,
                phases: sync.phases(map, sync.stage_bytes),
            });
        }
        return (comm_free, 0.0, after_of(inputs, ledger, st, &sync));
    }
    let mut delay = 0.0;
    let by_weight = by_weight(st);
    for c in (0..v).rev() {
        if sync.axes.is_empty() {
            break;
        }
        let (start, stop) = timeline.last_backward[i][c];
        // Each bucket's bytes: the weight's own (weight by weight), or one per layer alike.
        let (pieces, (listed, each)) = if by_weight {
            let (pieces, buckets) = weight_buckets(ledger, st, &sync, v as f64);
            (pieces, (buckets, 0.0))
        } else {
            match layer_buckets(inputs, ledger, st, &sync, (start, stop)) {
                Buckets::Pieces(pieces, bytes) => (pieces, (Vec::new(), bytes)),
                Buckets::Apart(send, bytes, phases) => {
                    // Nothing meets on a fabric: each bucket leaves as its layer ends.
                    let layers = layers_per_chunk(inputs, st);
                    let layer = (stop - start) / layers as f64;
                    for j in 0..layers {
                        let from = comm_free.max(start + layer * (j + 1) as f64);
                        comm_free = from + send;
                        ledger.trace(|map| BucketSpan {
                            name: "gradient sync",
                            collective: sync.collective,
                            bytes: on_wire(map, &sync.expert_axes, bytes),
                            start_s: from,
                            end_s: comm_free,
                            phases: phases.clone(),
                        });
                    }
                    continue;
                }
            }
        };
        let mut sent = Vec::new();
        let record = ledger.buckets.is_some().then_some(&mut sent);
        let shared = schedule::shared_step_recorded(&pieces, start, comm_free, record);
        comm_free = shared.sync_end_s;
        delay += shared.delay_s;
        // The k-th bucket handed over carries the k-th of `bytes` (layers: all alike).
        for (k, from, to) in sent {
            let nth = pieces[..k]
                .iter()
                .filter(|p| matches!(p, Piece::Bucket(_)))
                .count();
            let Piece::Bucket(phases) = &pieces[k] else {
                continue;
            };
            // A weight's bucket goes among the data group, an expert's among its replicas.
            let (bytes, expert) = listed.get(nth).copied().unwrap_or((each, false));
            let parts = match (listed.is_empty(), expert) {
                (true, _) => sync.expert_axes.clone(),
                (false, e) => sync_parts(sync.axes, if e { 1.0 } else { 0.0 }, sync.context),
            };
            ledger.trace(|map| BucketSpan {
                name: "gradient sync",
                collective: sync.collective,
                bytes: on_wire(map, &parts, bytes),
                start_s: from,
                end_s: to,
                phases: phases.clone(),
            });
        }
    }
    (comm_free, delay, after_of(inputs, ledger, st, &sync))
}

/// The bytes `bytes` split over `parts` (axis, fraction) put on the network: the parts
/// whose group has more than one device (a trace's label for a message).
fn on_wire(map: &Mapping, parts: &[(Axis, f64)], bytes: f64) -> f64 {
    parts
        .iter()
        .filter(|(axis, _)| map.link(*axis).p > 1)
        .map(|(_, f)| bytes * f)
        .sum()
}

/// Whether a stage's gradients leave weight by weight (graphs without repeated layers).
fn by_weight(st: &StageWork) -> bool {
    st.backward_order
        .iter()
        .any(|e| matches!(e, StepEvent::Gradient(n, _) if *n > 0.0))
}

/// Stage `i`'s gradient synchronisation under `inputs`' strategy.
fn sync_of<'a>(
    inputs: &Inputs,
    (data_axes, collective): &'a (Vec<Axis>, Collective),
    i: usize,
    st: &StageWork,
) -> Sync<'a> {
    let s = inputs.s;
    // RC's row groups each hold the stage's weights: they synchronise them whole.
    // A shard group's device holds 1 / shard of them (hybrid sharding).
    let held = if s.shard > 0 { s.shard } else { 1 };
    Sync {
        axes: data_axes,
        expert_axes: sync_parts(data_axes, st.expert_share(), s.context),
        collective: *collective,
        stage_bytes: st.trained * inputs.gradient_bytes * (s.weight_replicas() / s.data) as f64
            / held as f64,
        report: (inputs.listing && i == 0).then_some(1.0),
        context: s.context,
    }
}

/// What follows a stage's schedule: its update, and under ZeRO-1/2 the gather of the
/// updated weights.
fn after_of(inputs: &Inputs, ledger: &mut Ledger, st: &StageWork, sync: &Sync) -> f64 {
    let s = inputs.s;
    let mut after = st.update_s;
    if s.zero >= 1 && s.zero < 3 {
        // Among the ranks ZeRO shards over: the data group, with the context ranks.
        let axes: &[Axis] = if s.context > 1 {
            &[Axis::Context, Axis::Data]
        } else {
            &[Axis::Data]
        };
        let parts = sync_parts(axes, st.expert_share(), s.context);
        // The updated weights, in their own precision (the gradients' may differ).
        let bytes = sync.stage_bytes / inputs.gradient_bytes * inputs.weight_bytes;
        let need = (Collective::AllGather, bytes);
        let t = ledger.charge_parts("updated weights", &parts, need, 1.0, false, sync.report);
        after += t;
        // Drawn after the update, once the stage's end is known.
        ledger.trace(|map| BucketSpan {
            name: "updated weights",
            collective: Collective::AllGather,
            bytes: on_wire(map, &parts, bytes),
            start_s: f64::NAN,
            end_s: t,
            phases: parts_phases(map, &parts, Collective::AllGather, bytes),
        });
    }
    after
}

/// The gradient synchronisation of stage `i` under several parts whose layers alternate
/// inside every repeated layer (attention, then the feed-forward): layer by layer, each
/// part's backward compute, its blocking collectives and its bucket, on one stream. Each
/// part's share of a layer's time is its backward step, plus the window's slack in
/// proportion (a single part gets [`layer_buckets`]' pieces exactly). Returns what
/// [`stage_sync`] does.
fn joint_layer_sync(
    parts: &[Part],
    ledgers: &mut [Ledger],
    timeline: &schedule::Timeline,
    gradients: &[(Vec<Axis>, Collective)],
    i: usize,
) -> (f64, f64, f64) {
    let first = parts[0].inputs;
    let v = first.s.interleave as usize;
    let (vf, layers) = (v as f64, layers_per_chunk(first, &first.stages[i]));
    let l = layers as f64;
    let syncs: Vec<Sync> = parts
        .iter()
        .zip(gradients)
        .map(|(p, g)| sync_of(p.inputs, g, i, &p.inputs.stages[i]))
        .collect();
    // Per part, in backward order (last part first): per layer its blocking phases, its
    // bucket's phases and bytes, and its backward compute.
    struct Layer {
        blocking: Vec<(usize, f64)>,
        bucket: Vec<(usize, f64)>,
        bytes: f64,
        compute: f64,
        part: usize,
    }
    let per_layer: Vec<Layer> = (0..parts.len())
        .rev()
        .map(|k| {
            let (p, sync) = (&parts[k], &syncs[k]);
            let (st, map) = (&p.inputs.stages[i], ledgers[k].map);
            let bytes = if sync.axes.is_empty() {
                0.0
            } else {
                sync.stage_bytes / (vf * l)
            };
            Layer {
                blocking: st
                    .backward_needs
                    .iter()
                    .filter(|(_, n)| blocks_compute(p.inputs.s, n) && ledgers[k].keeps(n))
                    .flat_map(|(count, n)| need_phases(map, n, count / (vf * l)))
                    .collect(),
                bucket: if bytes > 0.0 {
                    sync.phases(map, bytes)
                } else {
                    Vec::new()
                },
                bytes,
                compute: st.backward_s / (vf * l),
                part: k,
            }
        })
        .collect();
    let meets = per_layer.iter().any(|a| {
        a.bucket.iter().any(|b| {
            per_layer
                .iter()
                .any(|c| c.blocking.iter().any(|x| x.0 == b.0))
        })
    });
    let (mut comm_free, mut delay) = (0.0f64, 0.0);
    for c in (0..v).rev() {
        let (start, stop) = timeline.last_backward[i][c];
        let charge = |ledgers: &mut [Ledger]| {
            for x in per_layer.iter().filter(|x| x.bytes > 0.0) {
                let sync = &syncs[x.part];
                sync.charge(&mut ledgers[x.part], &sync.expert_axes, x.bytes);
            }
        };
        if !meets {
            // Nothing meets on a fabric: each bucket leaves as its layer ends.
            let layer = (stop - start) / l;
            for j in 0..layers {
                charge(ledgers);
                for x in &per_layer {
                    let send: f64 = x.bucket.iter().map(|p| p.1).sum();
                    if send > 0.0 {
                        comm_free = comm_free.max(start + layer * (j + 1) as f64) + send;
                    }
                }
            }
            continue;
        }
        let busy: f64 = per_layer
            .iter()
            .map(|x| x.compute + x.blocking.iter().map(|p| p.1).sum::<f64>())
            .sum();
        let compute: f64 = per_layer.iter().map(|x| x.compute).sum();
        let slack = ((stop - start) / l - busy).max(0.0);
        let mut pieces = Vec::with_capacity(3 * layers * per_layer.len());
        for _ in 0..layers {
            charge(ledgers);
            for x in &per_layer {
                let share = if compute > 0.0 {
                    x.compute / compute
                } else {
                    1.0 / per_layer.len() as f64
                };
                pieces.push(Piece::Compute(x.compute + slack * share));
                pieces.push(Piece::Blocking(x.blocking.clone()));
                if !x.bucket.is_empty() {
                    pieces.push(Piece::Bucket(x.bucket.clone()));
                }
            }
        }
        let shared = schedule::shared_step(&pieces, start, comm_free);
        comm_free = shared.sync_end_s;
        delay += shared.delay_s;
    }
    let after = parts
        .iter()
        .zip(ledgers.iter_mut())
        .zip(&syncs)
        .map(|((p, ledger), sync)| after_of(p.inputs, ledger, &p.inputs.stages[i], sync))
        .sum();
    (comm_free, delay, after)
}

/// One chunk's gradient synchronisation: over `axes` with `collective`, `bytes` per chunk.
struct Sync<'a> {
    axes: &'a [Axis],
    /// `axes` with the stage's experts among their replicas.
    expert_axes: Vec<(Axis, f64)>,
    collective: Collective,
    /// The stage's gradient bytes (all its chunks).
    stage_bytes: f64,
    report: Option<f64>,
    /// Context-parallel ranks (the data group carries 1/context of the bytes).
    context: u64,
}

impl Sync<'_> {
    /// The phases of one bucket of `bytes` over the stage's axes.
    fn phases(&self, map: &Mapping, bytes: f64) -> Vec<(usize, f64)> {
        parts_phases(map, &self.expert_axes, self.collective, bytes)
    }

    /// Charges (and lists) one bucket of `bytes` synchronised over `parts`; its time.
    fn charge(&self, ledger: &mut Ledger, parts: &[(Axis, f64)], bytes: f64) -> f64 {
        let need = (self.collective, bytes);
        ledger.charge_parts("gradient sync", parts, need, 1.0, false, self.report)
    }
}

/// Repeated layers in each of stage `st`'s chunks.
fn layers_per_chunk(inputs: &Inputs, st: &StageWork) -> usize {
    (st.layers / inputs.s.interleave).max(1) as usize
}

/// A bucket per weight, when its gradient is computed (DDP's order: last layers first); an
/// expert's among its replicas. `chunks`: the stage's chunks (the step is one of them).
/// Returns the step's pieces and each bucket's bytes (and whether an expert's), in order.
fn weight_buckets(
    ledger: &mut Ledger,
    st: &StageWork,
    sync: &Sync,
    chunks: f64,
) -> (Vec<Piece>, Vec<(f64, bool)>) {
    let (dense, experts) = (
        sync_parts(sync.axes, 0.0, sync.context),
        sync_parts(sync.axes, 1.0, sync.context),
    );
    let traffic = StreamTraffic {
        bytes: sync.stage_bytes / chunks,
        collective: sync.collective,
        axes: &dense,
        expert_axes: &experts,
    };
    let (pieces, buckets) = step_pieces(
        &st.backward_order,
        &st.backward_needs,
        1.0 / chunks,
        ledger.map,
        None,
        Some(&traffic),
    );
    for &(bytes, expert) in &buckets {
        let parts = if expert { &experts } else { &dense };
        sync.charge(ledger, parts, bytes);
    }
    (pieces, buckets)
}

/// Layered graphs' buckets: one per layer, layers spread evenly over the step.
enum Buckets {
    /// The step as pieces to share the stream, and each bucket's bytes.
    Pieces(Vec<Piece>, f64),
    /// No bucket meets a blocking collective on a fabric: each bucket's send time, bytes
    /// and phases.
    Apart(f64, f64, Vec<(usize, f64)>),
}

/// A bucket per layer of the chunk that ran over `(start, stop)`; every bucket is charged.
fn layer_buckets(
    inputs: &Inputs,
    ledger: &mut Ledger,
    st: &StageWork,
    sync: &Sync,
    (start, stop): (f64, f64),
) -> Buckets {
    let map = ledger.map;
    let vf = inputs.s.interleave as f64;
    let layers = layers_per_chunk(inputs, st);
    let l = layers as f64;
    let sync_axes = &sync.expert_axes;
    // Collectives beside the linear layers (`tp=overlap`) and ring steps are inside the
    // compute here.
    let per_layer: Vec<(usize, f64)> = st
        .backward_needs
        .iter()
        .filter(|(_, n)| blocks_compute(inputs.s, n) && ledger.keeps(n))
        .flat_map(|(count, n)| need_phases(map, n, count / (vf * l)))
        .collect();
    let bucket = sync.stage_bytes / (vf * l);
    let bucket_phases = sync.phases(map, bucket);
    let charge = |ledger: &mut Ledger| {
        sync.charge(ledger, sync_axes, bucket);
    };
    if !per_layer
        .iter()
        .any(|a| bucket_phases.iter().any(|b| a.0 == b.0))
    {
        for _ in 0..layers {
            charge(ledger);
        }
        let send = bucket_phases.iter().map(|p| p.1).sum();
        return Buckets::Apart(send, bucket, bucket_phases);
    }
    // The step's own length per layer (it may also hold ZeRO gathers): what blocking
    // collectives leave of it is compute.
    let blocking: f64 = per_layer.iter().map(|p| p.1).sum();
    let compute = ((stop - start) / l - blocking).max(st.backward_s / (vf * l));
    let mut pieces = Vec::with_capacity(3 * layers);
    for _ in 0..layers {
        pieces.push(Piece::Compute(compute));
        pieces.push(Piece::Blocking(per_layer.clone()));
        pieces.push(Piece::Bucket(bucket_phases.clone()));
        charge(ledger);
    }
    Buckets::Pieces(pieces, bucket)
}

/// End of the iteration with every communication free: the schedule's compute alone.
pub(super) fn free_schedule_end(s: &Strategy, stages: &[StageTimes], m: u64) -> f64 {
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
    let free = pipeline::solve(&free_steps, m as usize, 0.0, s.gpipe);
    stages
        .iter()
        .zip(&free.end_s)
        .map(|(st, e)| (e + st.update_s).max(st.sparse_s * m as f64))
        .fold(0.0, f64::max)
}

/// What the schedule with free communication needs of a stage: one micro-batch's forward,
/// backward and embedding-engine time, and the update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageTimes {
    pub forward_s: f64,
    pub backward_s: f64,
    pub update_s: f64,
    pub sparse_s: f64,
}

impl StageTimes {
    pub(super) fn of(st: &StageWork) -> StageTimes {
        StageTimes {
            forward_s: st.forward_s,
            backward_s: st.backward_s,
            update_s: st.update_s,
            sparse_s: st.sparse_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::beside;

    proptest::proptest! {
        /// Collectives beside linear layers take no less than the longer of the two and no
        /// more than both one after the other; with no compute units held, the longer.
        #[test]
        fn beside_lies_between_the_longer_and_the_sum(
            linear in 0.0f64..1.0,
            comm in 0.0f64..1.0,
            share in 0.0f64..0.99,
        ) {
            let t = beside(linear, comm, share);
            proptest::prop_assert!(t >= linear.max(comm) * (1.0 - 1e-12));
            proptest::prop_assert!(t <= (linear + comm) * (1.0 + 1e-12));
            proptest::prop_assert_eq!(beside(linear, comm, 0.0), linear.max(comm));
        }
    }
}
