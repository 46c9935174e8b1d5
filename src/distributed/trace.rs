//! One iteration's schedule as a timeline (the step a profiler would show): per pipeline
//! stage a compute track (every forward, recomputation and backward step, the bubbles, the
//! wait for gradients and the update), a track of its sends to the neighbouring stages,
//! and per fabric a track of the blocking collectives, one of the collectives run beside
//! the products (`tp=overlap`, context-parallel ring steps) and one of the communication
//! stream (gradient buckets, gathers of updated weights), each collective with its name and
//! size.
//!
//! The spans are the schedule's own ([`super::schedule::simulate_recorded`], the reference
//! the closed forms are pinned to) and the gradient stream's
//! ([`super::schedule::shared_step_recorded`]). Inside a step the model keeps totals, not
//! an order: a step's blocking collectives are drawn together at its end, the collectives
//! beside the products from its start, its recomputation before its backward, and the
//! time its blocking collectives lose to gradient traffic after the stage's last step.
//! ZeRO-3's weight gathers and gradient reduce-scatters (repeated layers) get a track per
//! fabric, placed in each step as `timeline::zero3_step` prices them; weight by weight they
//! stay inside the steps.
//!
//! Owns [`Trace`]; [`crate::distributed::Plan::trace`] builds one. Output formats (Chrome
//! trace-event JSON, SVG) belong to the CLI.

use serde::Serialize;

use super::schedule::StepSpan;
use super::timeline::{Inputs, Recording};
use super::work::Need;
use crate::network::Network;
use crate::parallel::strategy::ContextAttention;
use crate::parallel::Mapping;

/// What a slice of a track is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SliceKind {
    Forward,
    Recompute,
    Backward,
    /// The compute stream idle inside the schedule (waiting for a neighbouring stage).
    Bubble,
    /// Blocking collectives slowed by gradient traffic on their fabric, ZeRO-3
    /// reduce-scatters outlasting compute, or waiting for the gradient stream.
    Wait,
    Update,
    /// A collective (blocking, beside the products, or on the communication stream).
    Collective,
    /// Activations or their gradients to the neighbouring stage.
    Send,
    /// The embedding engines' lookups and updates.
    Sparse,
}

/// One span on a track.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slice {
    pub name: String,
    pub kind: SliceKind,
    pub start_s: f64,
    pub duration_s: f64,
    /// The message's bytes: one call's (a collective drawn for several calls of one size
    /// names that size and the calls).
    pub bytes: Option<f64>,
    /// Calls drawn as this slice (collectives, sends), and the micro-batch of a step.
    pub calls: Option<f64>,
    pub micro_batch: Option<usize>,
}

impl Slice {
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }
}

/// What a track carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrackKind {
    Compute,
    /// Activations to the next stage.
    SendsOn,
    /// Gradients to the previous stage.
    SendsBack,
    Sparse,
    /// The hosts' work on embedding tables in their memory (beside every stage).
    Host,
    /// Collectives compute waits for, on one fabric.
    Blocking,
    /// Collectives run beside the products, on one fabric.
    Beside,
    /// The communication stream on one fabric: gradient buckets, gathers.
    Stream,
    /// ZeRO-3's weight gathers and gradient reduce-scatters on one fabric.
    Zero,
}

/// One track of one stage (one device of it: every device of a stage runs the same).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Track {
    pub stage: usize,
    pub kind: TrackKind,
    /// The fabric of a collective track.
    pub fabric: Option<String>,
    pub name: String,
    pub slices: Vec<Slice>,
    /// How much later than the model puts them its slices were drawn, summed: a track runs
    /// one thing at a time, so a slice meeting the one before waits for it (0 when every
    /// slice is where the model puts it).
    pub delayed_s: f64,
}

impl Track {
    fn new(stage: usize, kind: TrackKind, fabric: Option<&str>) -> Track {
        let name = match (kind, fabric) {
            (TrackKind::Compute, _) => "compute".to_string(),
            (TrackKind::SendsOn, _) => "sends to the next stage".to_string(),
            (TrackKind::SendsBack, _) => "sends to the previous stage".to_string(),
            (TrackKind::Sparse, _) => "embedding engines".to_string(),
            (TrackKind::Host, _) => "embedding tables in host memory".to_string(),
            (TrackKind::Blocking, f) => format!("{}: blocking collectives", f.unwrap_or("")),
            (TrackKind::Beside, f) => format!("{}: beside the products", f.unwrap_or("")),
            (TrackKind::Stream, f) => format!("{}: communication stream", f.unwrap_or("")),
            (TrackKind::Zero, f) => format!("{}: ZeRO-3 gathers and scatters", f.unwrap_or("")),
        };
        Track {
            stage,
            kind,
            fabric: fabric.map(str::to_string),
            name,
            slices: Vec::new(),
            delayed_s: 0.0,
        }
    }

    /// Appends a slice at `start` or, if the track is still busy then, when it is free
    /// (a track runs one thing at a time); empty slices are left out.
    fn push(&mut self, mut slice: Slice, start: f64) {
        if slice.duration_s.is_nan() || slice.duration_s <= 0.0 {
            return;
        }
        slice.start_s = self.slices.last().map_or(start, |l| start.max(l.end_s()));
        // Rounding aside, a slice drawn later than asked for.
        if slice.start_s - start > 1e-12 * start.abs().max(1e-9) {
            self.delayed_s += slice.start_s - start;
        }
        self.slices.push(slice);
    }
}

/// One iteration's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    pub workload: String,
    pub strategy: String,
    pub devices: u64,
    pub micro_batches: u64,
    /// The iteration as predicted, s.
    pub time_per_iteration_s: f64,
    /// Per stage and chunk: one micro-batch's forward and backward step as scheduled
    /// (blocking collectives and blocking sends inside).
    pub steps: Vec<Vec<(f64, f64)>>,
    /// Tracks by stage, compute first; then the hosts' track (its `stage` one past the
    /// last) when they keep embedding tables.
    pub tracks: Vec<Track>,
}

fn step_slice(name: String, kind: SliceKind, duration_s: f64, mb: usize) -> Slice {
    Slice {
        name,
        kind,
        start_s: 0.0,
        duration_s,
        bytes: None,
        calls: None,
        micro_batch: Some(mb),
    }
}

fn message(name: String, kind: SliceKind, duration_s: f64, bytes: f64, calls: f64) -> Slice {
    Slice {
        name,
        kind,
        start_s: 0.0,
        duration_s,
        bytes: Some(bytes),
        calls: Some(calls),
        micro_batch: None,
    }
}

/// A stage's tracks, the collective ones made on first use per fabric.
struct Tracks<'a> {
    stage: usize,
    fabrics: &'a [String],
    list: Vec<Track>,
}

impl Tracks<'_> {
    fn get(&mut self, kind: TrackKind, fabric: Option<usize>) -> &mut Track {
        let name = fabric.map(|f| self.fabrics.get(f).map_or("network", String::as_str));
        let at = self
            .list
            .iter()
            .position(|t| t.kind == kind && t.fabric.as_deref() == name);
        match at {
            Some(i) => &mut self.list[i],
            None => {
                self.list.push(Track::new(self.stage, kind, name));
                self.list.last_mut().expect("pushed")
            }
        }
    }
}

/// A message's phases (fabric, s) summed per fabric, the fabrics in the order first met: a
/// hierarchical collective's inner steps together, its launch with the steps on its fabric.
fn per_fabric(phases: &[(usize, f64)]) -> Vec<(usize, f64)> {
    let mut out: Vec<(usize, f64)> = Vec::new();
    for &(fabric, each) in phases {
        match out.iter_mut().find(|r| r.0 == fabric) {
            Some(r) => r.1 += each,
            None => out.push((fabric, each)),
        }
    }
    out
}

/// The name of a collective need: its axis and collective.
fn need_name(n: &Need) -> String {
    format!("{} {}", n.axis.name(), n.collective.name())
}

/// Builds the timeline from a recorded iteration (`rec`) of `inputs` under `map`,
/// `time_s` the iteration as predicted.
pub(super) fn build(
    inputs: &Inputs,
    map: &Mapping,
    net: &Network,
    rec: &Recording,
    (time_s, context): (f64, Option<ContextAttention>),
    host: Option<&super::HostReport>,
) -> Trace {
    let s = inputs.s;
    let (p, v) = (rec.steps.len(), s.interleave as usize);
    let fabrics: Vec<String> = net.fabrics.iter().map(|f| f.name.clone()).collect();
    let boundary = super::timeline::boundary_bytes(inputs);
    let mut tracks = Vec::new();
    for (i, st) in inputs.stages.iter().enumerate() {
        let mut t = Tracks {
            stage: i,
            fabrics: &fabrics,
            list: vec![Track::new(i, TrackKind::Compute, None)],
        };
        let recompute: f64 = st.by_layer.iter().map(|l| l.recompute_s).sum::<f64>() / v as f64;
        // ZeRO-3's messages per step (graphs of repeated layers; weight by weight they stay
        // inside the steps).
        let zero3 = if inputs.graph.layers > 0 {
            super::timeline::zero3_messages(inputs, map, st)
        } else {
            None
        };
        // A ZeRO-3 message from `from`, one slice per fabric its phases cross.
        let draw =
            |t: &mut Tracks, name: String, bytes: f64, phases: &[(usize, f64)], from: f64| {
                let mut at = from;
                for (fabric, d) in per_fabric(phases) {
                    let slice = message(name.clone(), SliceKind::Collective, d, bytes, 1.0);
                    t.get(TrackKind::Zero, Some(fabric)).push(slice, at);
                    at += d;
                }
            };
        let mut spans: Vec<&StepSpan> = rec.spans.iter().filter(|x| x.stage == i).collect();
        spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        for span in spans {
            let (mb, c, back) = (span.step.micro_batch, span.step.chunk, span.step.backward);
            let chunk = if v > 1 {
                format!(" chunk {c}")
            } else {
                String::new()
            };
            let compute = &mut t.list[0];
            let idle = span.start_s - compute.slices.last().map_or(0.0, Slice::end_s);
            if idle > 0.0 {
                let bubble = step_slice("bubble".into(), SliceKind::Bubble, idle, mb);
                compute.push(
                    Slice {
                        micro_batch: None,
                        ..bubble
                    },
                    span.start_s - idle,
                );
            }
            let length = span.end_s - span.start_s;
            if back {
                let rc = recompute.min(length);
                let name = format!("recompute mb {mb}{chunk}");
                compute.push(step_slice(name, SliceKind::Recompute, rc, mb), span.start_s);
                let name = format!("backward mb {mb}{chunk}");
                let slice = step_slice(name, SliceKind::Backward, length - rc, mb);
                compute.push(slice, span.start_s + rc);
            } else {
                let name = format!("forward mb {mb}{chunk}");
                compute.push(
                    step_slice(name, SliceKind::Forward, length, mb),
                    span.start_s,
                );
            }
            // Sends: to the next stage after a forward (the last stage's last chunk sends
            // none), to the one before after a backward (the first stage's first chunk).
            let sends = p > 1
                && if back {
                    i > 0 || c > 0
                } else {
                    i + 1 < p || c + 1 < v
                };
            let (to, what, kind) = if back {
                ((i + p - 1) % p, "gradients", TrackKind::SendsBack)
            } else {
                ((i + 1) % p, "activations", TrackKind::SendsOn)
            };
            // Scattered sends: a slice is a rank's 1/t share and the receiver's all-gather
            // of the whole over its tensor-parallel group.
            let what = if s.scatter_sends {
                format!("{what} (a 1/{} share, gathered on arrival)", s.tensor)
            } else {
                what.to_string()
            };
            // Blocking sends are inside the steps: every step that sends ends with one; the
            // end stages' v - 1 sends of a direction spread evenly over their v chunks.
            let end_stage = if back { i == 0 } else { i + 1 == p };
            let share = if end_stage {
                (v - 1) as f64 / v as f64
            } else {
                1.0
            };
            let folded = if rec.folded_send_s > 0.0 && p > 1 {
                rec.folded_send_s * share
            } else {
                0.0
            };
            if folded > 0.0 {
                let name = match (sends, end_stage) {
                    (true, false) => format!("{what} mb {mb} to stage {to} (blocking)"),
                    (true, true) => format!(
                        "{what} mb {mb} to stage {to} (blocking; its share of the chunks' sends)"
                    ),
                    (false, _) => format!("its share of the stage's blocking sends of {what}"),
                };
                let send = message(name, SliceKind::Send, folded, boundary, share);
                t.get(kind, None).push(send, span.end_s - folded);
            } else if sends {
                let name = format!("{what} mb {mb} to stage {to}");
                let send = message(name, SliceKind::Send, rec.transfer_s, boundary, 1.0);
                t.get(kind, None).push(send, span.end_s);
            }
            // The step's collectives: blocking ones together before its send, those beside
            // the products from its start.
            let needs = if back {
                &st.backward_needs
            } else {
                &st.forward_needs
            };
            // Calls of one collective of one size on one fabric are drawn as one slice (a
            // collective's phases on a fabric, its launch among them, count once).
            let mut blocking: Vec<(bool, usize, Slice)> = Vec::new();
            for (count, n) in needs.iter().filter(|(_, n)| n.taken(context)) {
                let calls = count / v as f64;
                let blocks = super::timeline::blocks_compute(s, n);
                let name = need_name(n);
                let phases = map.link(n.axis).phases(n.collective, n.bytes);
                for (fabric, each) in per_fabric(&phases) {
                    let same = blocking.iter_mut().find(|(b, f, x)| {
                        *b == blocks && *f == fabric && x.name == name && x.bytes == Some(n.bytes)
                    });
                    match same {
                        Some((_, _, x)) => {
                            x.duration_s += each * calls;
                            x.calls = Some(x.calls.unwrap_or(0.0) + calls);
                        }
                        None => {
                            let d = each * calls;
                            let slice =
                                message(name.clone(), SliceKind::Collective, d, n.bytes, calls);
                            blocking.push((blocks, fabric, slice));
                        }
                    }
                }
            }
            let total: f64 = blocking
                .iter()
                .filter(|b| b.0)
                .map(|b| b.2.duration_s)
                .sum();
            // ZeRO-3 (repeated layers): each step's weights gathered from its start
            // (prefetched beside compute, or before it); a backward step's gradients
            // reduce-scattered after the gather beside compute, or at its end.
            let mut scatter_at_end = 0.0;
            if let Some([(gather_bytes, gather), (scatter_bytes, scatter)]) = &zero3 {
                let g: f64 = gather.iter().map(|x| x.1).sum();
                let r: f64 = scatter.iter().map(|x| x.1).sum();
                let how = if s.prefetch { "prefetched" } else { "blocking" };
                let name = format!("weight gather all-gather ({how})");
                draw(&mut t, name, *gather_bytes, gather, span.start_s);
                if back && inputs.graph.trains && r > 0.0 {
                    let (name, from) = if s.grad_overlap {
                        ("gradient reduce-scatter", span.start_s + g)
                    } else {
                        scatter_at_end = r;
                        (
                            "gradient reduce-scatter (blocking)",
                            span.end_s - folded - r,
                        )
                    };
                    draw(&mut t, name.into(), *scatter_bytes, scatter, from);
                }
            }
            let mut at = (span.end_s - folded - scatter_at_end - total).max(span.start_s);
            let mut beside_at = span.start_s;
            for (blocks, fabric, slice) in blocking {
                let d = slice.duration_s;
                if blocks {
                    t.get(TrackKind::Blocking, Some(fabric)).push(slice, at);
                    at += d;
                } else {
                    t.get(TrackKind::Beside, Some(fabric))
                        .push(slice, beside_at);
                    beside_at += d;
                }
            }
        }
        // After the last step: what the gradient stream and the update add.
        let end = &rec.stages[i];
        let wait = |name: &str, d: f64| step_slice(name.into(), SliceKind::Wait, d, 0);
        let mut at = end.schedule_end_s;
        let compute = &mut t.list[0];
        let mut push = |slice: Slice, at: &mut f64| {
            let d = slice.duration_s;
            compute.push(
                Slice {
                    micro_batch: None,
                    ..slice
                },
                *at,
            );
            *at += d.max(0.0);
        };
        push(
            wait("collectives slowed by gradient traffic", end.delay_s),
            &mut at,
        );
        push(
            wait("reduce-scatters outlasting compute", end.tail_s),
            &mut at,
        );
        if end.comm_free_s > at {
            let d = end.comm_free_s - at;
            push(wait("waiting for gradient sync", d), &mut at);
        }
        let update = step_slice(
            "optimizer update".into(),
            SliceKind::Update,
            end.update_s,
            0,
        );
        push(update, &mut at);
        if end.end_s > at {
            push(wait("waiting for updated weights", end.end_s - at), &mut at);
        }
        for b in &end.buckets {
            // A bucket's span split over its fabrics as their phases' times alone share it,
            // one slice per fabric (a hierarchical collective's inner steps and its launch
            // folded together, in the order the fabrics are first met).
            let alone: f64 = b.phases.iter().map(|x| x.1).sum();
            let mut from = b.start_s;
            for (fabric, each) in per_fabric(&b.phases) {
                let d = if alone > 0.0 {
                    (b.end_s - b.start_s) * each / alone
                } else {
                    0.0
                };
                let name = format!("{} {}", b.name, b.collective.name());
                let slice = message(name, SliceKind::Collective, d, b.bytes, 1.0);
                t.get(TrackKind::Stream, Some(fabric)).push(slice, from);
                from += d;
            }
        }
        if end.sparse_s > 0.0 {
            let m = inputs.m as usize;
            let each = end.sparse_s / m as f64;
            for mb in 0..m {
                let name = format!("lookups, updates and all-to-alls mb {mb}");
                let slice = step_slice(name, SliceKind::Sparse, each, mb);
                t.get(TrackKind::Sparse, None).push(slice, each * mb as f64);
            }
        }
        let order = |k: TrackKind| k as usize;
        t.list.sort_by_key(|x| (order(x.kind), x.fabric.clone()));
        tracks.extend(t.list);
    }
    if let Some(h) = host {
        // The hosts' gather, transfers and update one after another from the start, beside
        // the devices' step (a batch ahead).
        let mut track = Track::new(p, TrackKind::Host, None);
        let mut at = 0.0;
        for (name, d) in [
            ("lookups and pooling in host memory", h.gather_s),
            ("pooled vectors over the host links", h.transfer_s),
            ("gradients and update in host memory", h.update_s),
        ] {
            let slice = step_slice(name.into(), SliceKind::Sparse, d, 0);
            track.push(
                Slice {
                    micro_batch: None,
                    ..slice
                },
                at,
            );
            at += d.max(0.0);
        }
        tracks.push(track);
    }
    Trace {
        workload: inputs.graph.name.clone(),
        strategy: s.to_string(),
        devices: s.devices(),
        micro_batches: inputs.m,
        time_per_iteration_s: time_s,
        steps: rec
            .steps
            .iter()
            .map(|st| st.iter().map(|c| (c.forward_s, c.backward_s)).collect())
            .collect(),
        tracks,
    }
}
