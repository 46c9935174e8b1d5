//! The strategy search: never slower than the base, the pruned search equal to the
//! exhaustive one, deterministic counts, and `stackflow search` on the command line.

mod common;

use std::path::Path;

use common::{stackflow, Scratch};
use proptest::prelude::*;
use stackflow::config::Source;
use stackflow::generator::Architecture;
use stackflow::network::{Network, System};
use stackflow::opt::search::{enumerate_from, search, SearchResult, Settings};
use stackflow::opt::Progress;
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

/// The 1.7B GPT of Narayanan et al. with a batch that splits many ways.
fn gpt(batch: u64) -> Workload {
    let text = format!(
        "version: 1\nkind: transformer\nname: gpt-1.7b-b{batch}\nhidden: 2304\nlayers: 24\n\
         heads: 24\nffn_hidden: 9216\nsequence: 2048\nvocab: 51200\nglobal_batch: {batch}\n\
         precision: bf16\n"
    );
    Workload::from_yaml("gpt.yaml", &text).unwrap()
}

fn machine(devices: u64) -> (Architecture, Network) {
    let system = System::load(Source::Embedded, Path::new("templates/dgx-a100.yaml")).unwrap();
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, devices).unwrap();
    (arch, net)
}

fn run(w: &Workload, devices: u64, base: &Strategy, settings: Settings) -> SearchResult {
    let (arch, net) = machine(devices);
    let space = enumerate_from(w, devices, 8, base).unwrap();
    search(
        w,
        &arch,
        &net,
        &space,
        Some(base),
        &settings,
        &Progress::none(),
    )
}

fn names(c: &[stackflow::opt::search::Candidate]) -> Vec<(String, String, f64)> {
    c.iter()
        .map(|c| {
            (
                c.strategy.clone(),
                c.placement.clone(),
                c.time_per_iteration_s,
            )
        })
        .collect()
}

#[test]
fn the_pruned_search_equals_the_exhaustive_one() {
    for (devices, batch) in [(8, 64), (16, 32), (32, 64), (64, 64)] {
        let w = gpt(batch);
        let base = Strategy {
            data: devices,
            ..Strategy::default()
        };
        let pruned = run(
            &w,
            devices,
            &base,
            Settings {
                top: 5,
                prune: true,
            },
        );
        let all = run(
            &w,
            devices,
            &base,
            Settings {
                top: 5,
                prune: false,
            },
        );
        assert_eq!(names(&pruned.top), names(&all.top), "{devices} devices");
        assert_eq!(
            names(&pruned.pareto),
            names(&all.pareto),
            "{devices} devices"
        );
        assert_eq!(pruned.pairs, all.pairs);
        assert!(
            pruned.evaluated < all.evaluated,
            "{devices}: nothing pruned"
        );
        assert_eq!(all.pruned_by_bound, 0);
        // Every valid strategy is counted once.
        assert_eq!(
            pruned.invalid + pruned.pruned_by_memory + pruned.pruned_by_bound + pruned.evaluated,
            pruned.enumerated,
            "{devices}"
        );
        assert!(pruned.pairs >= pruned.enumerated - pruned.invalid);
    }
}

#[test]
fn counts_and_answers_are_the_same_every_time() {
    let w = gpt(64);
    let base = Strategy::parse("t2-p2-d8-mb2").unwrap();
    let a = run(&w, 32, &base, Settings::default());
    let b = run(&w, 32, &base, Settings::default());
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// The base is always a candidate: when it fits, the result is no slower.
    #[test]
    fn the_search_is_never_slower_than_a_feasible_base(
        log_devices in 3u32..7,
        t_log in 0u32..3,
        p_log in 0u32..3,
        mb_log in 0u32..3,
        zero in 0u8..4,
        sp in proptest::bool::ANY,
    ) {
        let devices = 1u64 << log_devices;
        let (t, p) = (1u64 << t_log, 1u64 << p_log);
        prop_assume!(t * p <= devices);
        let base = Strategy {
            tensor: t,
            pipeline: p,
            data: devices / (t * p),
            micro_batch: 1 << mb_log,
            sequence_parallel: sp && t > 1,
            zero: if devices / (t * p) > 1 { zero } else { 0 },
            ..Strategy::default()
        };
        let w = gpt(64);
        let r = run(&w, devices, &base, Settings { top: 3, prune: true });
        if let (Some(b), Some(best)) = (&r.base, &r.best) {
            if b.feasible {
                prop_assert!(best.time_per_iteration_s <= b.time_per_iteration_s, "{} {} > {} {}",
                    best.strategy, best.time_per_iteration_s, b.strategy, b.time_per_iteration_s);
            }
        }
    }
}

#[test]
fn search_prints_the_best_the_front_and_the_counts() {
    let dir = Scratch::new("search-cli");
    let csv = std::path::PathBuf::from(dir.write("top.csv", ""));
    let (code, out, err) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "64",
        "--workload",
        "workloads/llama2-70b.yaml",
        "--base",
        "t8-p8-mb1",
        "--top",
        "3",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        "base  t8-d1-p8-mb1",
        "best  ",
        "top 3 by time",
        "Pareto front",
        "priced",
    ] {
        assert!(out.contains(needle), "{needle} missing:\n{out}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("list,rank,strategy,placement,time_per_iteration_s"));
    assert_eq!(text.lines().filter(|l| l.starts_with("top,")).count(), 3);
}

#[test]
fn nothing_fitting_lists_the_nearest_and_exits_3() {
    let (code, out, _) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--workload",
        "workloads/gpt3-175b.yaml",
    ]);
    assert_eq!(code, 3);
    assert!(out.starts_with("System:"), "{out}");
    let first = out.lines().nth(2).unwrap();
    assert!(first.starts_with("No strategy fits"), "{out}");
    assert!(out.contains("out of memory:"), "{out}");
    let (code, json, _) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--json",
    ]);
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["feasible"], false);
    assert!(!v["nearest"].as_array().unwrap().is_empty());
    assert_eq!(v["nearest"][0]["violations"][0]["kind"], "out_of_memory");
}

#[test]
fn bad_search_input_exits_2_naming_the_value() {
    let base = [
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--workload",
        "workloads/llama2-70b.yaml",
    ];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        stackflow(&args)
    };
    let (code, _, err) = with(&["--devices", "64", "--top", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--top") && err.contains('0'), "{err}");
    let (code, _, err) = with(&["--devices", "64", "--base", "t8-q3"]);
    assert_eq!(code, 2);
    assert!(err.contains("t8-q3"), "{err}");
    let (code, _, err) = with(&["--devices", "64", "--base", "t8-p3-d2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--base"), "{err}");
    let (code, _, err) = with(&["--devices", "12"]);
    assert_eq!(code, 2);
    assert!(err.contains("12"), "{err}");
    // A batch of 4 sequences on 1024 devices: the data replicas cannot exceed 4, and 24
    // heads and 24 layers leave at most t8 x p24 for the rest; no strategy uses them all.
    let (code, _, err) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "1024",
        "--workload",
        "workloads/gpt-1.7b.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--devices 1024") && err.contains("none of the"),
        "{err}"
    );
}
