//! Pathfinding studies: DeepFlow Sec. 9's qualitative findings on reduced grids, sharding and
//! resuming that change nothing, and bad study files.

mod common;

use std::collections::BTreeMap;

use common::{root, stackflow, Scratch};
use stackflow::study::{PointResult, Study};

/// A reduced study: the shipped base files, the given action and axes.
fn study(dir: &Scratch, name: &str, base: &str, action: &str, axes: &str) -> String {
    let text = format!(
        "version: 1\nname: {name}\n{base}action: {action}\noptimizer: {{restarts: 2, steps: 20, seed: 0}}\naxes:\n{axes}"
    );
    dir.write(&format!("{name}.yaml"), &text)
}

fn sec9_base(system: &str) -> String {
    let r = root();
    format!(
        "base:\n  system: {}\n  workload: {}\n  devices: 512\n",
        r.join(system).display(),
        r.join("workloads/lstm-sec9.yaml").display()
    )
}

/// Evaluates every point of a study in this process; results by axis labels.
fn run(path: &str) -> BTreeMap<Vec<String>, PointResult> {
    let s = Study::load(std::path::Path::new(path)).unwrap();
    (0..s.len())
        .map(|i| {
            let r = s.evaluate(i);
            assert!(r.error.is_none(), "{:?}: {:?}", r.labels, r.error);
            (r.labels.clone(), r)
        })
        .collect()
}

fn time(results: &BTreeMap<Vec<String>, PointResult>, labels: &[&str]) -> f64 {
    let key: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
    results[&key].time_per_iteration_s.unwrap()
}

const NODES: &str = "  - name: node\n    field: budget.technology\n    values: [../tech_libs/n12.yaml, ../tech_libs/n7.yaml, ../tech_libs/n3.yaml, ../tech_libs/n2.yaml, ../tech_libs/n1.yaml]\n    labels: [N12, N7, N3, N2, N1]\n";

#[test]
fn technology_scaling_findings() {
    let dir = Scratch::new("study-tech");
    let axes = format!(
        "{NODES}  - name: memory\n    field: template.memory[3].technology\n    values: [hbm2, hbm4]\n  - name: network\n    field: system.fabrics[0].bandwidth_gb_per_s\n    values: [100, 200, 400]\n"
    );
    let base = sec9_base("templates/deepflow-sec9.yaml") + "  strategy: RC-1-4-d128-z3\n";
    let r = run(&study(&dir, "tech", &base, "optimize", &axes));
    let t = |n: &str, m: &str, w: &str| time(&r, &[n, m, w]);
    let mut report = String::new();
    for w in ["100", "200", "400"] {
        for m in ["hbm2", "hbm4"] {
            report += &format!(
                "{w} GB/s {m}: {}\n",
                ["N12", "N7", "N3", "N2", "N1"]
                    .map(|n| format!("{n} {:.3}", t(n, m, w)))
                    .join("  ")
            );
        }
    }
    println!("{report}");
    // 1. A clear jump from N12 to N7 at every HBM generation (DeepFlow: L2-bound at N12,
    //    HBM-bound at N7) wherever the network does not bind.
    for m in ["hbm2", "hbm4"] {
        for w in ["200", "400"] {
            let jump = t("N12", m, w) / t("N7", m, w);
            assert!(
                jump >= 1.15,
                "N12 -> N7 at {m}, {w} GB/s: {jump:.3}\n{report}"
            );
        }
        // Disagreement, documented: at 100 GB/s this model's iteration is bound by the
        // network (gradient and weight traffic of d128 with ZeRO-3), so N12 -> N7 gains
        // under 10% there; DeepFlow's Fig. 9 shows the jump at every network speed.
        let jump = t("N12", m, "100") / t("N7", m, "100");
        assert!(jump < 1.10, "{m} at 100 GB/s: {jump:.3}\n{report}");
    }
    // 2. Beyond N3, under 10% at fixed memory and network ...
    for m in ["hbm2", "hbm4"] {
        for w in ["100", "200"] {
            let gain = t("N3", m, w) / t("N1", m, w);
            assert!(
                gain < 1.10,
                "N3 -> N1 at {m}, {w} GB/s: {gain:.3}\n{report}"
            );
        }
        // ... except at 400 GB/s, a documented disagreement: here the GEMMs stay
        // compute-bound past N3 (our SRAM banks, controllers and crossbar ports all shrink
        // with the node, so caches keep pace with compute), and N1 still gains 10-50%;
        // DeepFlow's caches fall behind the 1.8x more MCUs per node and performance flattens.
        let gain = t("N3", m, "400") / t("N1", m, "400");
        assert!(
            (1.10..1.50).contains(&gain),
            "{m} at 400 GB/s: {gain:.3}\n{report}"
        );
    }
    // 3. Beyond N3, a network upgrade helps more than a logic upgrade.
    for m in ["hbm2", "hbm4"] {
        for n in ["N3", "N2"] {
            let next = if n == "N3" { "N2" } else { "N1" };
            let network = t(n, m, "200") / t(n, m, "400");
            let logic = t(n, m, "200") / t(next, m, "200");
            assert!(
                network > logic,
                "{n} {m}: network {network:.3} vs logic {logic:.3}\n{report}"
            );
        }
    }
}

#[test]
fn co_optimization_findings() {
    let dir = Scratch::new("study-co");
    let axes = "  - name: node\n    field: budget.technology\n    values: [../tech_libs/n12.yaml, ../tech_libs/n7.yaml, ../tech_libs/n3.yaml, ../tech_libs/n1.yaml]\n    labels: [N12, N7, N3, N1]\n";
    let r = run(&study(
        &dir,
        "co",
        &sec9_base("templates/deepflow-sec9.yaml"),
        "both",
        axes,
    ));
    let mut report = String::new();
    let mut on_top = BTreeMap::new();
    for n in ["N12", "N7", "N3", "N1"] {
        let p = &r[&vec![n.to_string()]];
        let (a, c) = (p.strategy_only_speedup.unwrap(), p.both_speedup.unwrap());
        report += &format!(
            "{n}: strategy {a:.2}x, budgets {:.2}x, both {c:.2}x ({})\n",
            p.budgets_only_speedup.unwrap(),
            p.strategy
        );
        on_top.insert(n, c / a);
        // Parallelism search alone: about 2x in DeepFlow; at least 1.5x here.
        assert!(a >= 1.5, "{n}: {a:.2}\n{report}");
    }
    println!("{report}");
    // Disagreement, documented: DeepFlow finds architecture search adds more on top of the
    // strategy at N12/N7 than at N3 and beyond (20-30% there). Here it adds 1.2-2x at every
    // node and no less at N3/N1: the Fig. 4 split starves main-memory power (25 W, 1.2 TB/s
    // of HBM2e) and the network port, and moving budget there pays more as compute gets
    // cheaper; our caches do not become the wall that caps DeepFlow's advanced nodes.
    for (n, g) in &on_top {
        assert!((1.2..2.0).contains(g), "{n}: {g:.3}\n{report}");
    }
    assert!(
        on_top["N3"].max(on_top["N1"]) >= on_top["N12"].min(on_top["N7"]),
        "{on_top:?}"
    );
}

#[test]
fn multi_node_packages_gain_little() {
    let dir = Scratch::new("study-package");
    let axes = "  - name: nodes_per_package\n    field: system.fabrics[0].size\n    values: [1, 2, 4, 8]\n";
    let r = run(&study(
        &dir,
        "package",
        &sec9_base("templates/deepflow-package.yaml"),
        "both",
        axes,
    ));
    let t = |k: &str| time(&r, &[k]);
    let gains: Vec<f64> = ["1", "2", "4", "8"].iter().map(|k| t("1") / t(k)).collect();
    println!("speedup by nodes per package 1, 2, 4, 8: {gains:.3?}");
    // DeepFlow Fig. 11: at most ~32-35%, and little beyond 4 nodes per package.
    assert!(gains.iter().all(|&g| g <= 1.35), "{gains:?}");
    assert!(gains[3] <= gains[2] * 1.10, "{gains:?}");
}

fn roadmap(dir: &Scratch) -> String {
    let r = root();
    let base = format!(
        "base:\n  system: {}\n  workload: {}\n  devices: 1024\n  strategy: t8-p8-d16-mb1-i2-sp-rc=selective\n",
        r.join("templates/dgx-a100.yaml").display(),
        r.join("workloads/gpt3-175b.yaml").display()
    );
    let axes = "  - name: node\n    field: budget.technology\n    values: [../tech_libs/n7.yaml, ../tech_libs/n5.yaml, ../tech_libs/n3.yaml]\n  - name: ib\n    field: system.fabrics[1].bandwidth_gb_per_s\n    values: [25, 50]\n";
    let mut s = study(dir, "roadmap", &base, "predict", axes);
    // A plot, so the comparison covers the SVG too.
    let text =
        std::fs::read_to_string(&s).unwrap() + "plots:\n  - {kind: lines, x: node, series: ib}\n";
    s = dir.write("roadmap.yaml", &text);
    s
}

fn file(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn sharded_and_resumed_sweeps_equal_the_whole() {
    let dir = Scratch::new("study-shards");
    let s = roadmap(&dir);
    let base = root().join("target/test-scratch/study-shards");
    let out = |n: &str| base.join(n).display().to_string();
    let (code, _, err) = stackflow(&["sweep", &s, "--out", &out("whole")]);
    assert_eq!(code, 0, "{err}");
    for k in ["1/2", "2/2"] {
        let name = format!("shard{}", &k[..1]);
        let (code, _, err) = stackflow(&[
            "sweep",
            &s,
            "--out",
            &out(&name),
            "--shard",
            k,
            "--jobs",
            "1",
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = stackflow(&[
        "merge",
        &out("shard1"),
        &out("shard2"),
        "--out",
        &out("merged"),
    ]);
    assert_eq!(code, 0, "{err}");
    let whole = base.join("whole");
    for f in ["results.json", "results.csv", "plot-1-node.svg"] {
        assert_eq!(file(&whole, f), file(&base.join("merged"), f), "{f}");
    }
    // Kill mid-run: keep two whole lines and half of a third, then resume.
    let killed = base.join("killed");
    std::fs::create_dir_all(&killed).unwrap();
    let journal = file(&whole, "points.jsonl");
    let lines: Vec<&str> = journal.lines().collect();
    let partial = format!(
        "{}\n{}\n{}",
        lines[0],
        lines[1],
        &lines[2][..lines[2].len() / 2]
    );
    std::fs::write(killed.join("points.jsonl"), partial).unwrap();
    std::fs::write(killed.join("study.yaml"), file(&whole, "study.yaml")).unwrap();
    let (code, _, err) = stackflow(&["sweep", &s, "--out", &out("killed")]);
    assert_eq!(code, 2, "a folder with results needs --resume");
    assert!(err.contains("--resume"), "{err}");
    let (code, stdout, err) = stackflow(&["sweep", &s, "--out", &out("killed"), "--resume"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("4 to evaluate") && stdout.contains("2 already done"),
        "{stdout}"
    );
    for f in ["results.json", "results.csv"] {
        assert_eq!(file(&whole, f), file(&killed, f), "{f}");
    }
    // Resuming after a base file changed is refused: the results would mix two designs.
    let r = root();
    let workload = dir.write(
        "gpt3.yaml",
        &std::fs::read_to_string(r.join("workloads/gpt3-175b.yaml")).unwrap(),
    );
    let text = std::fs::read_to_string(&s).unwrap().replace(
        &r.join("workloads/gpt3-175b.yaml").display().to_string(),
        &workload,
    );
    let moved = dir.write("roadmap-copy.yaml", &text);
    let (code, _, err) = stackflow(&["sweep", &moved, "--out", &out("copy")]);
    assert_eq!(code, 0, "{err}");
    let edited = std::fs::read_to_string(&workload)
        .unwrap()
        .replace("global_batch: 1536", "global_batch: 1024");
    std::fs::write(&workload, edited).unwrap();
    let (code, _, err) = stackflow(&["sweep", &moved, "--out", &out("copy"), "--resume"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("changed since these results were computed"),
        "{err}"
    );
}

#[test]
fn bad_studies_exit_2_naming_the_valid_choices() {
    let dir = Scratch::new("study-bad");
    let base = sec9_base("templates/deepflow-sec9.yaml");
    let cases = [
        (
            "  - name: x\n    field: budget.area.breakdwn.core\n    values: [0.3]\n",
            "a field of area: one of [node_mm2, chip_mm2, breakdown]",
        ),
        (
            "  - name: x\n    field: system.fabrics[0].bandwidth_gb_per_s\n    values: [fast]\n",
            "axes[0].values[0]",
        ),
        (
            "  - name: x\n    field: budget.technology\n    values: []\n",
            "an empty axis empties the grid",
        ),
        (
            "  - name: x\n    field: chip.area\n    values: [1]\n",
            "system., budget., template., workload.",
        ),
        (
            "  - name: x\n    field: template.memory[9].technology\n    values: [hbm3]\n",
            "which has 4 entries",
        ),
    ];
    for (i, (axes, says)) in cases.iter().enumerate() {
        let s = study(&dir, &format!("bad{i}"), &base, "predict", axes);
        let (code, _, err) = stackflow(&["sweep", &s, "--out", &dir.write("o", "")]);
        assert_eq!(code, 2, "{axes}");
        assert!(err.contains(says), "{axes}: {err}");
    }
    let ok = study(
        &dir,
        "ok",
        &base,
        "predict",
        "  - name: x\n    field: system.fabrics[0].bandwidth_gb_per_s\n    values: [100]\n",
    );
    let (code, _, err) = stackflow(&["sweep", &ok, "--shard", "5/4"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected K/N with 1 <= K <= N"), "{err}");
}

#[test]
fn a_sweep_that_finds_nothing_feasible_exits_3_with_its_results_written() {
    let dir = Scratch::new("study-infeasible");
    let r = root();
    // GPT-3 175B data parallel on 64 A100s: 6 TiB per device at every IB bandwidth.
    let base = format!(
        "base:\n  system: {}\n  workload: {}\n  devices: 64\n  strategy: d64\n",
        r.join("templates/dgx-a100.yaml").display(),
        r.join("workloads/gpt3-175b.yaml").display()
    );
    let axes =
        "  - name: ib\n    field: system.fabrics[1].bandwidth_gb_per_s\n    values: [25, 50]\n";
    let s = study(&dir, "oom", &base, "predict", axes);
    let out = r.join("target/test-scratch/study-infeasible/out");
    let (code, stdout, err) = stackflow(&["sweep", &s, "--out", &out.display().to_string()]);
    assert_eq!(code, 3, "{stdout}{err}");
    assert!(
        stdout.contains("2 points evaluated: 2 infeasible"),
        "{stdout}"
    );
    let results: serde_json::Value = serde_json::from_str(&file(&out, "results.json")).unwrap();
    for p in results["points"].as_array().unwrap() {
        assert_eq!(p["feasible"], false);
        assert_eq!(p["violations"][0]["kind"], "out_of_memory");
    }
}
