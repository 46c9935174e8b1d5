//! What users see: honest headlines (a speedup only against a baseline that fits, or that
//! nothing fits with the least infeasible design), outputs that work moved elsewhere, and a
//! JSON report from every command.

mod common;

use common::{stackflow, Scratch};

/// The embedded default's baseline fits: the first line is the speedup over it, exit 0.
#[test]
fn optimize_leads_with_the_speedup_over_a_baseline_that_fits() {
    let args = ["optimize", "--restarts", "2", "--steps", "3", "--seed", "1"];
    let (code, out, err) = stackflow(&args);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("time / iteration  ")
            && first.contains(" s -> ")
            && first.contains("x); strategy t1-d512-p1-z2 -> "),
        "{first}"
    );
    let (code, json, err) = stackflow(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["initial_feasible"], true);
    assert_eq!(report["reference"]["baseline"], "given");
    assert_eq!(report["headline"].as_str(), Some(first));
    let speedup = report["speedup"].as_f64().unwrap();
    let quoted = report["reference"]["time_per_iteration_s"]
        .as_f64()
        .unwrap()
        / report["best_time_per_iteration_s"].as_f64().unwrap();
    assert_eq!(speedup, quoted);
    assert!(first.contains(&format!("({speedup:.2}x)")), "{first}");
}

/// GPT-3 175B on 8 A100s fits no strategy: the first line says so and names the least
/// infeasible design (about 326 GiB per device, not the fastest at tens of TiB), no speedup,
/// exit 3.
#[test]
fn optimize_with_nothing_feasible_leads_with_the_least_infeasible_design() {
    let args = [
        "optimize",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--restarts",
        "1",
        "--steps",
        "2",
    ];
    let (code, out, err) = stackflow(&args);
    assert_eq!(code, 3, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("NOTHING FITS (exit code 3). The least infeasible design found")
            && first.contains("out of memory: "),
        "{first}"
    );
    let (code, json, err) = stackflow(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 3, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["feasible"], false);
    assert!(report["speedup"].is_null() && report["reference"].is_null());
    let memory = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["needed_bytes"].as_f64())
        .unwrap_or_else(|| panic!("{}", report["violations"]));
    let gib = memory / (1u64 << 30) as f64;
    assert!(
        gib < 400.0,
        "the least infeasible needs {gib} GiB per device"
    );
}

/// `search` leads the same way: its best and the speedup over a base that fits, or nothing
/// fits with the nearest strategy.
#[test]
fn search_leads_with_its_answer() {
    let (code, out, err) = stackflow(&[
        "search",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
    ]);
    assert_eq!(code, 3, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("gpt3-175b on 8 x dgx-a100: NOTHING FITS (exit code 3); the nearest, ")
            && first.contains("out of memory"),
        "{first}"
    );
    let (code, out, err) = stackflow(&[
        "search",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "64",
    ]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("gpt3-175b on 64 x dgx-a100: best ") && first.contains("x the base "),
        "{first}"
    );
}

/// `optimize --out` writes a folder that works moved elsewhere (its budget refers to copies
/// of its template and technology files beside it), and `predict --system` runs the
/// optimized budget on a system.
#[test]
fn an_optimized_budget_works_moved_and_on_a_system() {
    let dir = Scratch::new("reports-moved");
    let out = dir.path().join("optimized");
    let moved = dir.path().join("elsewhere").join("moved");
    let (code, _, err) = stackflow(&[
        "optimize",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--strategy",
        "t2-d4",
        "--restarts",
        "1",
        "--steps",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let budget = std::fs::read_to_string(out.join("budget.yaml")).unwrap();
    assert!(
        budget.contains("template: inputs/template/gpu-a100.yaml")
            && budget.contains("technology: inputs/technology/n7.yaml"),
        "{budget}"
    );
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&out, &moved).unwrap();
    let budget = moved.join("budget.yaml");
    let budget = budget.to_str().unwrap();
    let (code, json, err) = stackflow(&["generate", "--budget", budget, "--json"]);
    assert_eq!(code, 0, "{err}");
    let arch: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(arch["peak_flops_per_s"].as_f64().unwrap() > 1e14, "{json}");
    let (code, json, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--budget",
        budget,
        "--devices",
        "8",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--strategy",
        "t2-d4",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let optimized: serde_json::Value = serde_json::from_str(&json).unwrap();
    let (code, json, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--strategy",
        "t2-d4",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let shipped: serde_json::Value = serde_json::from_str(&json).unwrap();
    let time = |v: &serde_json::Value| v["time_per_iteration_s"].as_f64().unwrap();
    // The optimized budget is another accelerator: it prices differently.
    assert_ne!(time(&optimized), time(&shipped));
}

/// Every subcommand prints JSON that parses with --json (and nothing else on stdout).
#[test]
fn every_command_prints_json() {
    let dir = Scratch::new("reports-json");
    let out = |name: &str| dir.path().join(name).display().to_string();
    let (shard1, shard2, merged) = (out("shard1"), out("shard2"), out("merged"));
    let imported = out("imported");
    let study = "studies/tpu-v4-fig8.yaml";
    let runs: Vec<Vec<&str>> = vec![
        vec!["generate"],
        vec!["predict", "--workload", "workloads/gemm-8192.yaml"],
        vec![
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--workload",
            "workloads/gpt-1.7b.yaml",
            "--strategy",
            "t2-d4",
        ],
        vec![
            "search",
            "--workload",
            "workloads/gpt-1.7b.yaml",
            "--system",
            "templates/dgx-a100.yaml",
        ],
        vec!["optimize", "--restarts", "1", "--steps", "2"],
        vec!["sweep", study, "--out", &shard1, "--shard", "1/2"],
        vec!["sweep", study, "--out", &shard2, "--shard", "2/2"],
        vec!["merge", &shard1, &shard2, "--out", &merged],
        vec!["validate"],
        vec!["intensity", "--devices", "1,4"],
        vec!["availability"],
        vec![
            "serve",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "1",
            "--rate",
            "10",
            "--requests",
            "100",
        ],
        vec![
            "import",
            "deepflow",
            "tests/import/deepflow/model-LSTM.yaml",
            "--out",
            &imported,
        ],
    ];
    let mut commands: Vec<&str> = Vec::new();
    for args in &runs {
        let mut args = args.clone();
        args.push("--json");
        let (code, stdout, err) = stackflow(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let value: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"));
        assert!(value.is_object() || value.is_array(), "{args:?}");
        commands.push(args[0]);
    }
    // Every subcommand the binary lists was run.
    let (_, help, _) = stackflow(&["--help"]);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(listed.len() >= 9, "{help}");
    for c in listed {
        assert!(commands.contains(&c), "{c} has no --json run here");
    }
    let merged: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("merged").join("results.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(merged["points"].as_array().unwrap().len(), 10);
}

/// `predict --csv` writes every kernel of one accelerator, and a system's kernel classes
/// and collectives.
#[test]
fn predict_writes_kernels_and_collectives_as_csv() {
    let dir = Scratch::new("reports-csv");
    let kernels = dir.path().join("kernels.csv");
    let (code, json, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--csv",
        kernels.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let text = std::fs::read_to_string(&kernels).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("section,name,class,phase,count"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), report["kernels"].as_array().unwrap().len());
    assert!(rows.iter().all(|r| r.starts_with("kernel,")), "{text}");
    let system = dir.path().join("system.csv");
    let (code, json, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--strategy",
        "t2-d4",
        "--csv",
        system.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let text = std::fs::read_to_string(&system).unwrap();
    let collectives = text
        .lines()
        .filter(|l| l.starts_with("collective,"))
        .count();
    assert_eq!(
        collectives,
        report["communication"].as_array().unwrap().len()
    );
    assert!(
        text.contains("collective,tensor all-reduce,all_reduce,"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("compute,,gemm,")),
        "{text}"
    );
}

/// With --search-strategy from a given strategy that does not fit, the speedup is quoted
/// against the given budget with the fastest strategy that fits, and the line says why.
#[test]
fn optimize_quotes_a_searched_baseline_when_the_given_strategy_does_not_fit() {
    let (code, json, err) = stackflow(&[
        "optimize",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "64",
        "--strategy",
        "d64",
        "--search-strategy",
        "--restarts",
        "1",
        "--steps",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["initial_feasible"], false);
    assert_eq!(report["reference"]["baseline"], "searched");
    let headline = report["headline"].as_str().unwrap();
    assert!(
        headline.contains("the given t1-d64-p1 does not fit: out of memory"),
        "{headline}"
    );
    // The co-optimization quotes no speedup against the baseline that does not fit.
    assert!(report["co_optimization"]["both"]["speedup"].is_null());
}

/// The folder is self-contained from any working directory, with a technology file whose
/// include lies outside its own folder.
#[test]
fn optimize_out_copies_inputs_from_anywhere() {
    let dir = Scratch::new("reports-portable");
    let root = common::root();
    let tech = dir.path().join("tx");
    std::fs::create_dir_all(tech.join("my")).unwrap();
    std::fs::create_dir_all(tech.join("shared")).unwrap();
    let n7 = std::fs::read_to_string(root.join("tech_libs/n7.yaml")).unwrap();
    let n7 = n7.replace(
        "include: [dram.yaml, links.yaml]",
        "include: [../shared/dram.yaml, links.yaml]",
    );
    assert!(n7.contains("../shared/dram.yaml"));
    std::fs::write(tech.join("my/n7.yaml"), n7).unwrap();
    std::fs::copy(
        root.join("tech_libs/dram.yaml"),
        tech.join("shared/dram.yaml"),
    )
    .unwrap();
    std::fs::copy(
        root.join("tech_libs/links.yaml"),
        tech.join("my/links.yaml"),
    )
    .unwrap();
    let out = dir.path().join("out");
    // From tests/, with paths that climb out of it.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_stackflow"))
        .args([
            "optimize",
            "--system",
            "../templates/dgx-a100.yaml",
            "--workload",
            "../workloads/gpt-1.7b.yaml",
            "--devices",
            "8",
            "--strategy",
            "t2-d4",
            "--tech",
            tech.join("my/n7.yaml").to_str().unwrap(),
            "--restarts",
            "1",
            "--steps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
        .current_dir(root.join("tests"))
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let budget = std::fs::read_to_string(out.join("budget.yaml")).unwrap();
    assert!(
        budget.contains("technology: inputs/technology/my/n7.yaml"),
        "{budget}"
    );
    assert!(out.join("inputs/technology/shared/dram.yaml").is_file());
    let moved = dir.path().join("moved");
    std::fs::rename(&out, &moved).unwrap();
    let (code, _, err) = stackflow(&[
        "generate",
        "--budget",
        moved.join("budget.yaml").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
}

/// `cli::capture` (the Python package's way in) runs a command in-process and hands back the
/// same answer the binary prints with `--json`, the same outcome, and the same errors.
#[test]
fn capture_gives_what_the_command_prints() {
    use stackflow::cli::{capture, Outcome};
    let cases: [&[&str]; 4] = [
        &[
            "predict",
            "--workload",
            "workloads/gemm-8192.yaml",
            "--json",
        ],
        &["generate", "--budget", "budgets/v100.yaml", "--json"],
        &[
            "search",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "8",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--json",
        ],
        &["validate", "--json"],
    ];
    for args in cases {
        let (code, out, err) = stackflow(args);
        let printed: serde_json::Value = serde_json::from_str(&out).unwrap();
        let argv = std::iter::once("stackflow").chain(args.iter().copied());
        let captured = capture(argv).unwrap();
        same_json(&captured.json, &printed, &format!("{args:?}"));
        assert_eq!(captured.outcome.exit_code(), code, "{args:?}: {err}");
    }
    let nothing_fits = capture([
        "stackflow",
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--json",
    ])
    .unwrap();
    assert_eq!(nothing_fits.outcome, Outcome::NothingFeasible);
    // Bad input: the command line's message; no --json: refused; a usage error: clap's text.
    let (code, _, err) = stackflow(&["predict", "--workload", "nowhere.yaml", "--json"]);
    assert_eq!(code, 2);
    let e = capture([
        "stackflow",
        "predict",
        "--workload",
        "nowhere.yaml",
        "--json",
    ])
    .unwrap_err();
    assert_eq!(
        format!("error: {}\n", stackflow::cli::describe(&e)),
        err,
        "the same message"
    );
    let e = capture(["stackflow", "generate"]).unwrap_err();
    assert!(e.to_string().contains("needs --json"), "{e}");
    let e = capture(["stackflow", "predict", "--devicez", "8"]).unwrap_err();
    assert!(e.to_string().contains("--devicez"), "{e}");
}

/// The Python package maps its keywords onto the flags `cli::flags` lists.
#[test]
fn flags_lists_each_commands_long_flags() {
    let predict = stackflow::cli::flags("predict").unwrap();
    for flag in [
        "workload", "budget", "system", "devices", "strategy", "json",
    ] {
        assert!(predict.iter().any(|f| f == flag), "{flag}: {predict:?}");
    }
    assert!(stackflow::cli::flags("nonesuch").is_none());
}

/// `a` and `b` hold the same keys, strings and numbers; numbers to the last bit but one
/// (serde_json reads printed floats back to within an ulp without its `float_roundtrip`).
fn same_json(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs()),
                "{at}: {x} != {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                same_json(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(x), keys(y), "{at}");
            for (k, v) in x {
                same_json(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// `optimize --template FILE --out DIR` on the embedded default system reads the override
/// from disk (it was looked up among the embedded files when the budget was written), and the
/// budget written works on its own.
#[test]
fn an_override_of_the_embedded_default_is_written_from_disk() {
    let dir = Scratch::new("optimize-override");
    let template = dir.write(
        "node.yaml",
        &std::fs::read_to_string(common::root().join("templates/deepflow-node.yaml")).unwrap(),
    );
    let out = dir.path().join("out").display().to_string();
    let args = [
        "optimize",
        "--template",
        &template,
        "--strategy",
        "CR-16-d32",
        "--restarts",
        "1",
        "--steps",
        "2",
        "--out",
        &out,
    ];
    let (code, _, err) = stackflow(&args);
    assert_eq!(code, 0, "{err}");
    let budget = dir.path().join("out/budget.yaml").display().to_string();
    let (code, _, err) = stackflow(&["generate", "--budget", &budget, "--json"]);
    assert_eq!(code, 0, "{err}");
}
