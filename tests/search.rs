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
    assert!(out.lines().nth(1).unwrap().starts_with("System:"), "{out}");
    let first = out.lines().nth(3).unwrap();
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
    // heads and 24 layers leave at most t8 x p24 for the rest; a sequence of 2 x 1023
    // tokens splits over no context-parallel degree dividing 1024 (at 2048 tokens, t8-p8-cp16
    // would use them all); no strategy uses them all.
    let text = std::fs::read_to_string(common::root().join("workloads/gpt-1.7b.yaml"))
        .unwrap()
        .replace("sequence: 2048", "sequence: 2046");
    let workload = Scratch::new("search-no-strategy").write("gpt.yaml", &text);
    let (code, _, err) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "1024",
        "--workload",
        &workload,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--devices 1024") && err.contains("none of the"),
        "{err}"
    );
}

// ------------------------------------------------------------------ per layer type

use stackflow::distributed::{
    predict_layered, predict_with, LayerStrategy, LayeredPlan, Workspace,
};
use stackflow::opt::search::layered::{alternatives, search_layered};
use stackflow::workload::LayerType;

fn system(template: &str, devices: u64) -> (Architecture, Network, u64) {
    let system = System::load(Source::Embedded, Path::new(template)).unwrap();
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, devices).unwrap();
    (arch, net, system.devices_per_node())
}

fn embedded(file: &str) -> Workload {
    Workload::load(Source::Embedded, Path::new(file)).unwrap()
}

/// Every layer type under one strategy, priced part by part, agrees with the uniform
/// prediction: the composition (parts one after another in each step, one schedule, one
/// communication stream) differs only in how buckets and gathers of different types meet.
/// Without repeated layers a type's gradient buckets meet only its own blocking collectives
/// on a shared fabric: for DLRM-A under t16-d8-sp the dense layers' buckets no longer slow
/// the tables' backward all-to-all on RoCE, 1.2% faster than the uniform prediction; the
/// transformers agree within 0.02%, the other DLRMs within 0.4%.
#[test]
fn one_strategy_for_every_layer_type_prices_as_the_uniform_strategy() {
    for (template, file, devices, strategy) in [
        (
            "templates/dgx-a100.yaml",
            "workloads/gpt3-175b.yaml",
            1024,
            "t8-p16-d8-mb1-i2-sp-rc=selective",
        ),
        (
            "templates/dgx-a100.yaml",
            "workloads/llm-moe.yaml",
            256,
            "t8-d32-e8-mb1",
        ),
        (
            "templates/zionex.yaml",
            "workloads/dlrm-a.yaml",
            128,
            "t8-d16",
        ),
        (
            "templates/zionex.yaml",
            "workloads/dlrm-a-transformer.yaml",
            128,
            "t1-d128-z3-hs8",
        ),
        (
            "templates/zionex.yaml",
            "workloads/dlrm-a-moe.yaml",
            128,
            "t8-d16",
        ),
    ] {
        let (arch, net, node) = system(template, devices);
        let w = embedded(file);
        let s = Strategy::parse(strategy).unwrap();
        let mut ws = Workspace::new(&arch);
        let uniform = predict_with(&w, &arch, &net, &s, &mut ws).unwrap();
        let types = w.graph_with(s.recompute).layer_types();
        let parts = LayerStrategy::uniform(&types, s);
        let layered = predict_layered(&w, &arch, &net, node, &parts, &mut ws).unwrap();
        let error = layered.time_per_iteration_s / uniform.time_per_iteration_s - 1.0;
        assert!(error.abs() < 0.015, "{file} {strategy}: {error:+.4}");
        let memory = layered.memory_per_device_bytes / uniform.memory_per_device_bytes - 1.0;
        assert!(
            memory.abs() < 1e-9,
            "{file} {strategy}: memory {memory:+.2e}"
        );
        // Consecutive layers split alike exchange nothing.
        assert!(
            layered
                .communication
                .iter()
                .all(|c| !c.name.starts_with("reshard")),
            "{file}: {:?}",
            layered.communication
        );
    }
}

/// Layers split differently hand their activations over: attention under tensor
/// parallelism in a node, dense layers under data parallelism, all-gather what a tensor
/// rank lacks (forward into attention, backward into the dense layers' gradients).
#[test]
fn layers_split_differently_pay_for_resharding() {
    let (arch, net, node) = system("templates/dgx-a100.yaml", 64);
    let w = gpt(512);
    let mut ws = Workspace::new(&arch);
    let mixed = LayerStrategy::parse("embedding:t8-d8-mb8,attention:t8-d8-mb8,dense:t1-d64-mb1-z3")
        .unwrap();
    let p = predict_layered(&w, &arch, &net, node, &mixed, &mut ws).unwrap();
    let reshard: Vec<_> = p
        .communication
        .iter()
        .filter(|c| c.name.starts_with("reshard"))
        .collect();
    // Into the dense layers, back into the next layer's attention, into the logits.
    assert_eq!(reshard.len(), 3, "{:?}", p.communication);
    assert!(reshard
        .iter()
        .all(|c| c.time_s > 0.0 && c.group == 8 && c.blocking));
    assert_eq!(
        p.madmax,
        "embedding (TP, DDP), attention (TP, DDP), dense (FSDP, FSDP)"
    );
    let names: Vec<LayerType> = p.parts.iter().map(|x| x.layer).collect();
    assert_eq!(
        names,
        [LayerType::Embedding, LayerType::Attention, LayerType::Dense]
    );
}

#[test]
fn per_layer_type_strategies_say_what_is_wrong() {
    let (arch, net, node) = system("templates/dgx-a100.yaml", 64);
    let w = gpt(512);
    let mut ws = Workspace::new(&arch);
    for (text, says) in [
        ("attention:t8-d8,attention:t8-d8", "given twice"),
        ("attention:t8-d8,dense:t8-d4-p2", "share them"),
        ("mlp:t8-d8", "unknown layer type \"mlp\""),
        ("t8-d8", "no type:"),
        ("attention:RC-8-1-d8", "RC/CR"),
    ] {
        let e = LayerStrategy::parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    for (text, says) in [
        (
            "attention:t8-d8,dense:t8-d8",
            "no strategy for the embedding layers",
        ),
        (
            "embedding:d64,attention:t8-d8,dense:d64,expert:d64",
            "has no expert layers",
        ),
        (
            "embedding:t8-d8-mb8,attention:t8-d8-mb8,dense:t1-d64-mb8",
            "micro-batches",
        ),
    ] {
        let s = LayerStrategy::parse(text).unwrap();
        let e = LayeredPlan::new(&w, &arch, &net, node, &s, &mut ws)
            .err()
            .unwrap_or_else(|| panic!("{text} fits"))
            .to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    let s = LayerStrategy::parse("embedding:d64, attention:t8-d8-mb8 ,dense:d64").unwrap();
    assert_eq!(
        s.to_string(),
        "embedding:t1-d64-p1,attention:t8-d8-p1-mb8,dense:t1-d64-p1"
    );
    assert_eq!(LayerStrategy::parse(&s.to_string()).unwrap(), s);
}

/// The coordinate descent against the exhaustive product of every type's splits on a small
/// system: the same best (optimality gap 0 here), for a fraction of the assignments.
#[test]
fn per_layer_type_descent_matches_the_exhaustive_product_on_8_devices() {
    let (arch, net, node) = system("templates/dgx-a100.yaml", 8);
    let w = gpt(32);
    let start = Strategy::parse("t8-d1-mb4").unwrap();
    let local = search_layered(&w, &arch, &net, node, &[start]);
    let best = local.best.clone().unwrap();
    let types = w.graph().layer_types();
    let options = alternatives(&start, 8, 32, 8, node, false);
    assert_eq!(options.len(), 24);
    let mut ws = Workspace::new(&arch);
    let mut exhaustive = f64::INFINITY;
    let mut priced = 0;
    for a in &options {
        for b in &options {
            for c in &options {
                let parts = types.iter().copied().zip([*a, *b, *c]).collect();
                let Ok(s) = LayerStrategy::new(parts) else {
                    continue;
                };
                let Ok(plan) = LayeredPlan::new(&w, &arch, &net, node, &s, &mut ws) else {
                    continue;
                };
                if plan.violations().is_empty() {
                    priced += 1;
                    exhaustive = exhaustive.min(plan.predict(&net).time_per_iteration_s);
                }
            }
        }
    }
    let gap = best.time_per_iteration_s / exhaustive - 1.0;
    assert!(
        gap.abs() < 1e-12,
        "descent {best:?} vs exhaustive {exhaustive}"
    );
    assert!(
        local.evaluated < priced / 4,
        "{} of {priced}",
        local.evaluated
    );
}

/// MAD Max's DLRM-A-Transformer (Fig. 10): its transformer interaction and its dense layers
/// gain from different splits; the result is never slower than the uniform start.
#[test]
fn dlrm_transformer_layers_take_their_own_split() {
    let (arch, net, node) = system("templates/zionex.yaml", 128);
    let w = embedded("workloads/dlrm-a-transformer.yaml");
    let start = Strategy::parse("t1-d128-mb128-z3-hs8").unwrap();
    let r = search_layered(&w, &arch, &net, node, &[start]);
    let (u, b) = (r.uniform.unwrap(), r.best.unwrap());
    assert!(
        b.time_per_iteration_s < u.time_per_iteration_s * 0.995,
        "{} vs {}",
        b.time_per_iteration_s,
        u.time_per_iteration_s
    );
    let dense = b
        .parts
        .iter()
        .find(|p| p.layer == LayerType::Dense)
        .unwrap();
    let interaction = b
        .parts
        .iter()
        .find(|p| p.layer == LayerType::Interaction)
        .unwrap();
    assert_ne!(dense.strategy, interaction.strategy);
    let tables = b.parts.iter().find(|p| p.layer == LayerType::Embedding);
    assert_eq!(tables.unwrap().madmax.as_deref(), Some("(MP)"));
}

#[test]
fn predict_takes_a_split_per_layer_type_on_the_command_line() {
    let run = |strategy: &str| {
        stackflow(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a-transformer.yaml",
            "--strategy",
            strategy,
        ])
    };
    let (code, out, err) =
        run("embedding:d128-mb128,dense:t4-d32-mb512-sp,interaction:d128-mb128-z3-hs8");
    assert_eq!(code, 0, "{err}");
    for says in [
        "MAD Max notation  dense t4-d32-p1-mb512-sp, embedding (MP), interaction (FSDP, DDP)",
        "reshard interaction to dense",
        "(4 micro-batches)",
    ] {
        assert!(out.contains(says), "{says}: {out}");
    }
    // Micro-batch counts that differ, an unknown type: exit 2 naming them.
    let (code, _, err) = run("embedding:d128,dense:t4-d32-mb512-sp,interaction:d128");
    assert_eq!(code, 2);
    assert!(err.contains("micro-batches"), "{err}");
    let (code, _, err) = run("tables:d128");
    assert_eq!(code, 2);
    assert!(err.contains("unknown layer type \"tables\""), "{err}");
}

/// The data-parallel gradient overlap is the user's: the search keeps the base's wherever
/// gradients are synchronised (data parallelism, or context-parallel ranks).
#[test]
fn the_search_keeps_the_base_gradient_overlap() {
    let w = gpt(64);
    let base = Strategy::parse("d8-grad=after").unwrap();
    let space = enumerate_from(&w, 8, 8, &base).unwrap();
    assert!(space.iter().any(|s| s.weight_replicas() > 1));
    assert!(space
        .iter()
        .any(|s| s.weight_replicas() == 1 && s.context > 1));
    for s in &space {
        assert_eq!(s.grad_overlap, s.gradient_replicas() <= 1, "{s}");
    }
    let r = run(&w, 8, &base, Settings::default());
    assert!(!r.top.is_empty());
    for c in &r.top {
        let s = &c.parsed;
        assert_eq!(s.grad_overlap, s.gradient_replicas() <= 1, "{}", c.strategy);
    }
}

// ------------------------------------------------------------------ context parallelism

/// Why the search tries context parallelism only on micro-batches too small to split over
/// the context ranks: a micro-batch of mb sequences over cp context ranks has a twin of cp
/// times the replicas with mb / cp sequences each, the same tokens per device, the same
/// memory, and no key/value exchange; the twin is never slower (here, materialized and
/// fused attention, with ZeRO-1 and pipeline stages; the search golden's best, cp8 on 64
/// A100s, is on micro-batches of one).
#[test]
fn a_micro_batch_that_splits_over_the_context_ranks_is_no_faster_with_them() {
    let (arch, net) = machine(32);
    for attention in ["materialized", "flash"] {
        let text = format!(
            "version: 1\nkind: transformer\nname: gpt-{attention}\nhidden: 2304\nlayers: 8\n\
             heads: 24\nffn_hidden: 9216\nsequence: 4096\nvocab: 51200\nglobal_batch: 64\n\
             precision: bf16\nattention: {attention}\n"
        );
        let w = Workload::from_yaml("gpt.yaml", &text).unwrap();
        for (with_cp, twin) in [
            ("t2-cp2-d8-mb2", "t2-d16-mb1"),
            ("t2-cp4-d4-mb4", "t2-d16-mb1"),
            ("t4-cp2-d4-mb4-z1", "t4-d8-mb2-z1"),
            ("t2-p2-cp4-d2-mb4-sp", "t2-p2-d8-mb1-sp"),
        ] {
            let p = |s: &str| {
                stackflow::distributed::predict(&w, &arch, &net, &Strategy::parse(s).unwrap())
                    .unwrap()
            };
            let (a, b) = (p(with_cp), p(twin));
            assert!(
                b.time_per_iteration_s <= a.time_per_iteration_s * (1.0 + 1e-9),
                "{attention}: {twin} {} s > {with_cp} {} s",
                b.time_per_iteration_s,
                a.time_per_iteration_s
            );
            let same = (b.memory_per_device_bytes / a.memory_per_device_bytes - 1.0).abs();
            assert!(
                same < 1e-9,
                "{attention}: {twin} vs {with_cp}: memory {same:e}"
            );
        }
    }
}

/// A search of a training workload runs no serving engine: its flags are refused by name
/// (not silently ignored, even out of range); an output that cannot be written (a path
/// under a file) is refused before any work. `--csv` makes the folders it lacks (README:
/// `--csv out/search.csv`).
#[test]
fn search_refuses_serving_flags_on_training_and_outputs_it_cannot_write() {
    let dir = Scratch::new("search-flags");
    for flags in [
        &["--memory-utilization", "1.5"][..],
        &["--max-batch", "64"],
        &["--requests", "10"],
        &["--chunked-prefill"],
    ] {
        let args = [
            &[
                "search",
                "--system",
                "templates/dgx-a100.yaml",
                "--devices",
                "8",
                "--workload",
                "workloads/gpt-1.7b.yaml",
            ][..],
            flags,
        ]
        .concat();
        let (code, _, err) = stackflow(&args);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(
            err.contains(flags[0]) && err.contains("this one trains"),
            "{flags:?}: {err}"
        );
    }
    // A search of gpt-1.7b's default on 8 A100s with `extra` flags.
    let on_8 = |extra: &[&str]| {
        let args = [
            &[
                "search",
                "--system",
                "templates/dgx-a100.yaml",
                "--devices",
                "8",
            ][..],
            extra,
        ]
        .concat();
        stackflow(&args)
    };
    let file = dir.write("a-file", "");
    let (code, _, err) = on_8(&["--plot", &file]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a file, not a folder"), "{err}");
    let under = format!("{file}/top.csv");
    let (code, _, err) = on_8(&["--csv", &under]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--csv {under}: {file} is a file")),
        "{err}"
    );
    let fresh = dir.path().join("new-folder").join("top.csv");
    let (code, _, err) = on_8(&["--csv", &fresh.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(fresh.is_file());
}
