//! `predict --trace FILE`: an iteration's timeline ([`Trace`]) in the Chrome trace-event
//! format, which Perfetto (ui.perfetto.dev) and chrome://tracing load: one process per
//! pipeline stage, one thread per track, every slice a complete event ("ph": "X") with
//! times in microseconds and its bytes, calls and micro-batch as arguments.

use serde::Serialize;

use crate::distributed::trace::{SliceKind, Trace};

/// One trace event (the format's field names).
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: usize,
    tid: usize,
    args: Args<'a>,
}

#[derive(Serialize, Default)]
struct Args<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    calls: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    micro_batch: Option<usize>,
}

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event<'a>>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(rename = "otherData")]
    other_data: Other<'a>,
}

#[derive(Serialize)]
struct Other<'a> {
    workload: &'a str,
    strategy: &'a str,
    devices: u64,
    micro_batches: u64,
    time_per_iteration_s: f64,
    note: &'static str,
}

fn category(kind: SliceKind) -> &'static str {
    match kind {
        SliceKind::Forward => "forward",
        SliceKind::Recompute => "recompute",
        SliceKind::Backward => "backward",
        SliceKind::Bubble => "bubble",
        SliceKind::Wait => "wait",
        SliceKind::Update => "update",
        SliceKind::Collective => "collective",
        SliceKind::Send => "send",
        SliceKind::Sparse => "sparse",
    }
}

/// A process's or thread's name and sort index as metadata events ("ph": "M") at (pid, tid).
fn metadata<'a>(
    events: &mut Vec<Event<'a>>,
    (pid, tid): (usize, usize),
    (name_event, name): (&'static str, &'a str),
    (sort_event, index): (&'static str, usize),
) {
    let event = |ph_name, args| Event {
        name: ph_name,
        cat: None,
        ph: "M",
        ts: None,
        dur: None,
        pid,
        tid,
        args,
    };
    events.push(event(
        name_event,
        Args {
            name: Some(name),
            ..Args::default()
        },
    ));
    events.push(event(
        sort_event,
        Args {
            sort_index: Some(index),
            ..Args::default()
        },
    ));
}

/// `t` s in whole nanoseconds (saturating; an iteration is far shorter than 292 years).
fn ns(t: f64) -> i64 {
    (t * 1e9).round() as i64
}

/// The trace as Chrome trace-event JSON text.
pub fn chrome_json(t: &Trace) -> String {
    // A process per stage, and one for the hosts when they keep embedding tables.
    let processes = t.tracks.iter().map(|k| k.stage + 1).max().unwrap_or(0);
    let names: Vec<String> = (0..processes)
        .map(|i| match i < t.steps.len() {
            true => format!("stage {i}"),
            false => "hosts".into(),
        })
        .collect();
    let mut events = Vec::new();
    // Processes and threads numbered from 1 (Perfetto treats pid 0 as the idle process).
    for (i, name) in names.iter().enumerate() {
        let pid = i + 1;
        metadata(
            &mut events,
            (pid, 1),
            ("process_name", name),
            ("process_sort_index", pid),
        );
    }
    let mut tid = 0;
    let mut stage = usize::MAX;
    for track in &t.tracks {
        if track.stage != stage {
            (stage, tid) = (track.stage, 1);
        }
        let at = (stage + 1, tid);
        metadata(
            &mut events,
            at,
            ("thread_name", &track.name),
            ("thread_sort_index", tid),
        );
        for s in &track.slices {
            // Whole nanoseconds, in microseconds: slices that abut keep abutting.
            let (from, to) = (ns(s.start_s), ns(s.end_s()));
            events.push(Event {
                name: &s.name,
                cat: Some(category(s.kind)),
                ph: "X",
                ts: Some(from as f64 / 1e3),
                dur: Some((to - from) as f64 / 1e3),
                pid: stage + 1,
                tid,
                args: Args {
                    bytes: s.bytes,
                    calls: s.calls,
                    micro_batch: s.micro_batch,
                    ..Args::default()
                },
            });
        }
        tid += 1;
    }
    let file = File {
        trace_events: events,
        display_time_unit: "ms",
        other_data: Other {
            workload: &t.workload,
            strategy: &t.strategy,
            devices: t.devices,
            micro_batches: t.micro_batches,
            time_per_iteration_s: t.time_per_iteration_s,
            note: "one device of each pipeline stage; inside a step the blocking collectives \
                   are drawn together at its end, those beside the products from its start",
        },
    };
    serde_json::to_string(&file).expect("plain data serialises to JSON")
}
