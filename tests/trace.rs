//! The iteration's timeline (issue 31): `predict --trace FILE` writes Chrome trace-event
//! JSON whose tracks, steps and end are the schedule's; the library's [`Trace`] ends when
//! the prediction does under every kind of schedule.

mod common;

use std::collections::BTreeMap;

use common::{root, stackflow, Scratch};
use serde_json::Value;
use stackflow::config::Source;
use stackflow::distributed::trace::{SliceKind, Trace, TrackKind};
use stackflow::distributed::{predict, DistPrediction, Plan};
use stackflow::network::System;
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

/// The trace of `workload` on `devices` of `system` under `strategy`, and the prediction.
fn trace_of(workload: &str, system: &str, devices: u64, strategy: &str) -> (Trace, DistPrediction) {
    let w = Workload::load(Source::Disk, &root().join(workload)).unwrap();
    let sys = System::load(Source::Disk, &root().join(system)).unwrap();
    let arch = stackflow::perf::as_run(&sys.accelerator().unwrap(), &w.graph());
    let net = sys.network(&arch, devices).unwrap();
    let s = Strategy::parse(strategy).unwrap();
    let p = predict(&w, &arch, &net, &s).unwrap();
    let trace = Plan::new(&w, &arch, &net, &s).unwrap().trace(&net);
    (trace, p)
}

/// No two slices of a track overlap, none is empty, every one starts at or after 0, and
/// each is where the model puts it (none waited for the one before on its track; the
/// collectives run beside the products may outlast their step and wait).
fn assert_tracks_sequential(t: &Trace) {
    for track in &t.tracks {
        if track.kind != TrackKind::Beside {
            let last = track.slices.last().map_or(0.0, |s| s.end_s());
            assert!(
                track.delayed_s <= 1e-9 * last,
                "stage {} {}: slices drawn {} s late",
                track.stage,
                track.name,
                track.delayed_s
            );
        }
        for w in track.slices.windows(2) {
            assert!(
                w[1].start_s >= w[0].end_s() - 1e-12 * w[0].end_s().max(1.0),
                "stage {} {}: {:?} overlaps {:?}",
                track.stage,
                track.name,
                w[0],
                w[1]
            );
        }
        for s in &track.slices {
            assert!(s.duration_s > 0.0 && s.start_s >= 0.0, "{s:?}");
        }
    }
}

/// Every stage runs each micro-batch's forward and backward once per chunk, its compute
/// track's steps summing to the schedule's steps; the timeline ends when the prediction
/// does.
fn assert_schedule(t: &Trace, time_s: f64) {
    let v = t.steps[0].len();
    for (i, steps) in t.steps.iter().enumerate() {
        let compute = t
            .tracks
            .iter()
            .find(|k| k.stage == i && k.name == "compute")
            .expect("every stage has a compute track");
        let sum = |kinds: &[SliceKind]| -> f64 {
            compute
                .slices
                .iter()
                .filter(|s| kinds.contains(&s.kind))
                .map(|s| s.duration_s)
                .sum()
        };
        let m = t.micro_batches as f64;
        let forward: f64 = steps.iter().map(|s| s.0).sum::<f64>() * m;
        let backward: f64 = steps.iter().map(|s| s.1).sum::<f64>() * m;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.max(1e-30);
        assert!(close(sum(&[SliceKind::Forward]), forward), "stage {i}");
        let back = sum(&[SliceKind::Recompute, SliceKind::Backward]);
        assert!(close(back, backward), "stage {i}: {back} != {backward}");
        let forwards = compute
            .slices
            .iter()
            .filter(|s| s.kind == SliceKind::Forward)
            .count();
        assert_eq!(forwards, t.micro_batches as usize * v, "stage {i}");
    }
    let end = t
        .tracks
        .iter()
        .flat_map(|k| k.slices.iter().map(|s| s.end_s()))
        .fold(0.0, f64::max);
    assert!(
        (end - time_s).abs() <= 1e-9 * time_s,
        "the trace ends at {end} s, the prediction at {time_s} s"
    );
}

/// A slice of the file: start and duration (us) and name.
type Span = (f64, f64, String);

/// GPT-3 175B on 1024 A100s (Megatron's t8-p16-d8, interleaved): the file is trace-event
/// JSON with a process per stage, its tracks named, its slices sequential per track, each
/// stage's steps summing as the schedule says and the last slice ending with the iteration.
#[test]
fn gpt3_trace_is_valid_trace_event_json() {
    let scratch = Scratch::new("trace-gpt3");
    let file = scratch.path().join("gpt3.json");
    let strategy = "t8-p16-d8-mb1-i2-sp-rc=selective";
    let args = [
        "predict",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "1024",
        "--strategy",
        strategy,
    ];
    let path = file.display().to_string();
    let (code, _, err) = stackflow(&[&args[..], &["--trace", &path]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = stackflow(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let predicted: Value = serde_json::from_str(&out).unwrap();
    let time_s = predicted["time_per_iteration_s"].as_f64().unwrap();

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    // Track names, and each track's slices in microseconds.
    let mut names: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut slices: BTreeMap<(u64, u64), Vec<Span>> = BTreeMap::new();
    for e in events {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        match e["ph"].as_str().unwrap() {
            "M" if e["name"] == "thread_name" => {
                names.insert(key, e["args"]["name"].as_str().unwrap().to_string());
            }
            "M" => {}
            "X" => {
                let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                let name = e["name"].as_str().unwrap().to_string();
                assert!(!name.is_empty());
                slices.entry(key).or_default().push((ts, dur, name));
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    // Every stage has its compute, sends, tensor-parallel collectives on NVLink and
    // gradient stream on InfiniBand; every track with slices is named.
    // Processes and threads count from 1 (Perfetto's pid 0 is the idle process).
    assert!(!names.keys().any(|k| k.0 == 0 || k.1 == 0));
    for stage in 1..=16u64 {
        let tracks: Vec<&str> = names
            .iter()
            .filter(|(k, _)| k.0 == stage)
            .map(|(_, n)| n.as_str())
            .collect();
        for want in [
            "compute",
            "sends to the next stage",
            "sends to the previous stage",
            "nvlink: blocking collectives",
            "infiniband: communication stream",
        ] {
            assert!(
                tracks.contains(&want),
                "stage {stage} lacks {want}: {tracks:?}"
            );
        }
    }
    assert!(slices.keys().all(|k| names.contains_key(k)));
    // Sequential per track (times in whole nanoseconds: abutting slices meet exactly).
    let mut end_us = 0.0f64;
    for (key, list) in &mut slices {
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in list.windows(2) {
            assert!(
                w[1].0 >= w[0].0 + w[0].1 - 1e-6,
                "{key:?} {}: {:?} overlaps {:?}",
                names[key],
                w[0],
                w[1]
            );
        }
        end_us = list.iter().map(|s| s.0 + s.1).fold(end_us, f64::max);
    }
    assert!(
        (end_us * 1e-6 - time_s).abs() < 1e-6,
        "{end_us} us vs {time_s} s"
    );
    // Stage 0's steps: 192 micro-batches x 2 chunks forward and backward, each named.
    let compute = &slices[&(1, 1)];
    let forwards = compute
        .iter()
        .filter(|s| s.2.starts_with("forward"))
        .count();
    let backwards = compute
        .iter()
        .filter(|s| s.2.starts_with("backward"))
        .count();
    assert_eq!((forwards, backwards), (384, 384));
    assert!(compute.iter().any(|s| s.2 == "bubble"));
    assert!(compute.iter().any(|s| s.2 == "optimizer update"));

    // Stage 0's collectives as the prediction lists them (the first stage's, over the
    // iteration): each blocking one's calls and bytes, the gradient buckets' bytes.
    let listed = predicted["communication"].as_array().unwrap();
    let listed_of = |name: &str| {
        listed
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
    };
    let track_of = |track: &str| -> Vec<&Value> {
        let tid = names
            .iter()
            .find(|(k, n)| k.0 == 1 && n.as_str() == track)
            .map(|(k, _)| k.1)
            .unwrap();
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1 && e["tid"] == tid)
            .collect()
    };
    let sum = |slices: &[&Value], name: &str, field: &str| -> f64 {
        slices
            .iter()
            .filter(|e| e["name"] == name)
            .map(|e| e["args"][field].as_f64().unwrap())
            .sum()
    };
    let nvlink = track_of("nvlink: blocking collectives");
    for name in ["tensor all-gather", "tensor reduce-scatter"] {
        let c = listed_of(name);
        let calls = sum(&nvlink, name, "calls");
        assert!(
            (calls - c["calls"].as_f64().unwrap()).abs() < 1e-6,
            "{name}: {calls} calls"
        );
        let bytes = nvlink.iter().find(|e| e["name"] == name).unwrap()["args"]["bytes"].clone();
        assert_eq!(bytes.as_f64(), c["bytes"].as_f64(), "{name}");
    }
    let stream = track_of("infiniband: communication stream");
    let c = listed_of("gradient sync");
    let sent = sum(&stream, "gradient sync all-reduce", "bytes");
    let listed_bytes = c["bytes"].as_f64().unwrap() * c["calls"].as_f64().unwrap();
    assert!(
        (sent / listed_bytes - 1.0).abs() < 1e-9,
        "{sent} vs {listed_bytes}"
    );

    // The same through the library: steps sum as scheduled, the end is the prediction's.
    let (trace, p) = trace_of(
        "workloads/gpt3-175b.yaml",
        "templates/dgx-a100.yaml",
        1024,
        strategy,
    );
    let time = p.time_per_iteration_s;
    assert!((time - time_s).abs() <= 1e-12 * time_s);
    assert_tracks_sequential(&trace);
    assert_schedule(&trace, time);
}

/// The timeline ends with the prediction under each kind of schedule and synchronisation:
/// plain and interleaved 1F1B, GPipe, blocking sends, gradients after the backward pass,
/// ZeRO-1's gather of updated weights, tensor collectives beside the products, ZeRO-3,
/// scattered sends (each send slice a 1/t share and its gather on arrival).
#[test]
fn traces_end_with_the_prediction_under_every_schedule() {
    for strategy in [
        "t8-p4-d2-mb1",
        "t8-p4-d2-mb1-i2",
        "t8-p4-d2-mb1-gpipe",
        "t8-p4-d2-mb1-send=blocking",
        "t8-p4-d2-mb1-i2-send=blocking",
        "t8-p4-d2-mb1-i2-send=blocking-p2p=scatter",
        "t8-p4-d2-mb1-p2p=scatter",
        "t8-p4-d2-mb1-grad=after",
        "t8-p2-d4-mb2-z1",
        "t8-p4-d2-mb1-sp-tp=overlap",
        "t8-d8-mb4-z3",
        "t8-d8-mb4-z3-hs4",
        "t8-d8-mb4-z3-prefetch=off-grad=after",
        "t2-p2-d16-mb1-i2",
    ] {
        let (trace, p) = trace_of(
            "workloads/llama2-70b.yaml",
            "templates/dgx-a100.yaml",
            64,
            strategy,
        );
        assert_tracks_sequential(&trace);
        assert_schedule(&trace, p.time_per_iteration_s);
        // Stage 0's gradient buckets carry the bytes the prediction lists, on every fabric
        // they cross (a hierarchical all-reduce's inner and outer steps, t2-p2-d16).
        let listed: f64 = p
            .communication
            .iter()
            .filter(|c| c.name == "gradient sync")
            .map(|c| c.bytes * c.calls)
            .sum();
        let streams: Vec<_> = trace
            .tracks
            .iter()
            .filter(|t| t.stage == 0 && t.kind == TrackKind::Stream)
            .collect();
        for t in &streams {
            let sent: f64 = t
                .slices
                .iter()
                .filter(|s| s.name.starts_with("gradient sync"))
                .filter_map(|s| s.bytes)
                .sum();
            if sent > 0.0 {
                assert!(
                    (sent / listed - 1.0).abs() < 1e-9,
                    "{strategy} {}: {sent} vs {listed}",
                    t.name
                );
            }
        }
        if strategy.contains("z3") {
            // A gather before every step, a reduce-scatter after every backward step.
            let zero = trace
                .tracks
                .iter()
                .find(|t| t.stage == 0 && t.kind == TrackKind::Zero)
                .unwrap_or_else(|| panic!("{strategy}: no ZeRO-3 track"));
            let count = |prefix: &str| {
                zero.slices
                    .iter()
                    .filter(|s| s.name.starts_with(prefix))
                    .count() as u64
            };
            let m = trace.micro_batches;
            assert_eq!(count("weight gather"), 2 * m, "{strategy}");
            assert_eq!(count("gradient reduce-scatter"), m, "{strategy}");
        }
        if strategy == "t2-p2-d16-mb1-i2" {
            assert_eq!(
                streams.len(),
                2,
                "{strategy}: a bucket crosses NVLink and InfiniBand"
            );
        }
        let names: Vec<&str> = trace
            .tracks
            .iter()
            .flat_map(|t| t.slices.iter().map(|s| s.name.as_str()))
            .collect();
        if strategy.contains("z1") {
            assert!(names.contains(&"updated weights all-gather"), "{strategy}");
        }
        if strategy.contains("tp=overlap") {
            let beside = trace
                .tracks
                .iter()
                .any(|t| t.name.ends_with("beside the products"));
            assert!(beside, "{strategy}");
        }
    }
}

/// A recommendation model's gradients leave weight by weight, each bucket its weight's
/// bytes; with its tables in the hosts' memory the hosts get a track of their own, beside
/// the stage (the trace still ends when the prediction does).
#[test]
fn recommendation_traces_have_weight_buckets_and_a_host_track() {
    let scratch = Scratch::new("trace-dlrm");
    let file = scratch.path().join("dlrm.json");
    let path = file.display().to_string();
    let cases: [&[&str]; 2] = [
        &[
            "--workload",
            "workloads/dlrm-a.yaml",
            "--system",
            "templates/zionex.yaml",
            "--devices",
            "128",
            "--strategy",
            "(TP, DDP)",
        ],
        &[
            "--system",
            "templates/tpu-v4-pod.yaml",
            "--slice",
            "4x4x8",
            "--workload",
            "workloads/dlrm0-tpu.yaml",
            "--strategy",
            "d128",
            "--tables",
            "host",
        ],
    ];
    for (k, case) in cases.iter().enumerate() {
        let (code, out, err) = stackflow(&[&["predict"][..], case, &["--json"]].concat());
        assert_eq!(code, 0, "{err}");
        let predicted: Value = serde_json::from_str(&out).unwrap();
        let time_s = predicted["time_per_iteration_s"].as_f64().unwrap();
        let (code, _, err) = stackflow(&[&["predict"][..], case, &["--trace", &path]].concat());
        assert_eq!(code, 0, "{err}");
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let end = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!(
            (end * 1e-6 - time_s).abs() < 1e-6,
            "case {k}: {end} us vs {time_s} s"
        );
        let buckets: Vec<f64> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "collective")
            .filter(|e| e["name"].as_str().unwrap().starts_with("gradient sync"))
            .map(|e| e["args"]["bytes"].as_f64().unwrap())
            .collect();
        let listed = predicted["communication"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == "gradient sync")
            .map(|c| c["bytes"].as_f64().unwrap() * c["calls"].as_f64().unwrap())
            .sum::<f64>();
        let sent: f64 = buckets.iter().sum();
        assert!(
            (sent / listed - 1.0).abs() < 1e-9,
            "case {k}: {sent} vs {listed}"
        );
        let hosts = events
            .iter()
            .any(|e| e["name"] == "process_name" && e["args"]["name"] == "hosts");
        if k == 0 {
            // Weights of different sizes: buckets of different sizes.
            assert!(buckets.iter().any(|b| *b != buckets[0]), "{buckets:?}");
            assert!(!hosts);
        } else {
            assert!(hosts, "no hosts' process");
        }
    }
}

/// A per-layer-type strategy and a served model have no timeline: exit 2 saying so.
#[test]
fn trace_of_what_has_no_timeline_is_refused() {
    let scratch = Scratch::new("trace-refused");
    let path = scratch.path().join("t.json").display().to_string();
    for (case, says) in [
        (
            vec![
                "--workload",
                "workloads/llama2-70b.yaml",
                "--system",
                "templates/dgx-a100.yaml",
                "--devices",
                "64",
                "--strategy",
                "attention:t8-d8,dense:t8-d8",
            ],
            "per-layer-type",
        ),
        (
            vec![
                "--workload",
                "workloads/llama2-70b-serve.yaml",
                "--system",
                "templates/dgx-h100.yaml",
                "--devices",
                "8",
                "--strategy",
                "t8",
            ],
            "served model",
        ),
    ] {
        let (code, _, err) = stackflow(&[&["predict"][..], &case, &["--trace", &path]].concat());
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--trace") && err.contains(says), "{err}");
    }
    assert!(!std::path::Path::new(&path).exists());
}

/// `--trace` into a folder that does not exist, or onto a directory: exit 2 naming it,
/// nothing written.
#[test]
fn trace_into_a_missing_folder_or_a_directory_is_refused() {
    let scratch = Scratch::new("trace-bad");
    let base = [
        "predict",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--strategy",
        "t8",
        "--trace",
    ];
    let missing = scratch.path().join("nowhere/trace.json");
    let (code, _, err) = stackflow(&[&base[..], &[missing.to_str().unwrap()]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nowhere") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!missing.exists());
    let dir = scratch.path().display().to_string();
    let (code, _, err) = stackflow(&[&base[..], &[dir.as_str()]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a directory, not a file"), "{err}");
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
