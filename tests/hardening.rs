//! Issue 23's reproducers, each named after its finding: bounded counts, a study's base
//! checked before any point runs. Each asserts the exit code and the message.

mod common;

use common::{stackflow, Scratch};

/// D1: device counts are bounded before any network is built (a system file's `devices`,
/// a torus's dims, `--devices`).
#[test]
fn d1_device_counts_are_bounded_before_the_network_is_built() {
    let dir = Scratch::new("hardening-d1");
    let root = common::root();
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "4294967296",
        "--workload",
        "workloads/gpt-1.7b.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most 1048576 devices"), "{err}");
    let text = std::fs::read_to_string(root.join("templates/tpu-v4-pod.yaml"))
        .unwrap()
        .replace("dims: [8, 8, 8]", "dims: [8000000000000, 8, 8]")
        .replace("../budgets", &root.join("budgets").display().to_string());
    let torus = dir.write("torus.yaml", &text);
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        &torus,
        "--workload",
        "workloads/gpt-1.7b.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("fabrics[0].topology.dims = [8000000000000, 8, 8]")
            && err.contains("at most 1048576 members"),
        "{err}"
    );
}

/// D1 (network) on direct fabrics: a million devices as 8x8x8 tori or meshes under a fat
/// tree predict, with groups whose stride falls inside a torus dimension (p16 after t8:
/// 16 apart, inside the second dimension of 8) and groups spanning meshes. The symmetry of
/// such groups (`network::Symmetry`) routes a few of them, not every one (torus t8-p16-d8192:
/// 7.3 s and 236 MB before, 0.06 s and 24 MB here; the loads are pinned to routing every
/// group by the network's unit tests).
#[test]
fn d1_a_million_devices_on_tori_and_meshes_under_a_fat_tree_predict() {
    let dir = Scratch::new("hardening-d1-direct");
    let root = common::root();
    let workload = std::fs::read_to_string(root.join("workloads/gpt3-175b.yaml"))
        .unwrap()
        .replacen("global_batch: 1536", "global_batch: 1048576", 1);
    let workload = dir.write("gpt3-big-batch.yaml", &workload);
    let torus = std::fs::read_to_string(root.join("templates/tpu-v4-pod.yaml"))
        .unwrap()
        .replace("../budgets", &root.join("budgets").display().to_string())
        .replacen(
            "\nhost:",
            "\n  - name: dcn\n    topology: {kind: fat_tree, levels: 3}\n    \
             bandwidth_gb_per_s: 25\n    latency_us: 10\nhost:",
            1,
        );
    assert!(torus.contains("name: dcn"));
    let mesh = torus.replace("kind: torus, dims", "kind: mesh, dims");
    assert!(mesh.contains("kind: mesh"));
    for (name, text) in [("torus", torus), ("mesh", mesh)] {
        let system = dir.write(&format!("{name}-dcn.yaml"), &text);
        for strategy in ["t8-p16-d8192", "t2-p8-d65536"] {
            let (code, out, err) = stackflow(&[
                "predict",
                "--system",
                &system,
                "--devices",
                "1048576",
                "--workload",
                &workload,
                "--strategy",
                strategy,
                "--json",
            ]);
            assert_eq!(code, 0, "{name} {strategy}: {err}");
            let report: serde_json::Value = serde_json::from_str(&out).unwrap();
            let time = report["time_per_iteration_s"].as_f64().unwrap();
            assert!(time.is_finite() && time > 0.0, "{name} {strategy}: {time}");
        }
    }
}

/// D1 (network): a network's cost follows its distinct group shapes, not its device count:
/// a million-device switched system predicts (0.02 s and 19 MB here), and fabrics whose
/// traffic is routed member by member are bounded in size with a message.
#[test]
fn d1_a_million_devices_predict_and_fabric_sizes_are_bounded() {
    let dir = Scratch::new("hardening-d1-network");
    let root = common::root();
    let workload = std::fs::read_to_string(root.join("workloads/gpt3-175b.yaml"))
        .unwrap()
        .replacen("global_batch: 1536", "global_batch: 1048576", 1);
    assert!(workload.contains("global_batch: 1048576"));
    let workload = dir.write("gpt3-big-batch.yaml", &workload);
    let (code, out, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "1048576",
        "--workload",
        &workload,
        "--strategy",
        "t8-d131072",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let time = report["time_per_iteration_s"].as_f64().unwrap();
    assert!(time.is_finite() && time > 0.0, "{time}");
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/tpu-v4-pod.yaml",
        "--slice",
        "64x128x128",
        "--workload",
        &workload,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("fabrics[0].topology = 1048576 members")
            && err.contains("at most 16384 members in a direct (ring, mesh or torus) fabric"),
        "{err}"
    );
    let text = std::fs::read_to_string(root.join("templates/deepflow-package.yaml"))
        .unwrap()
        .replace("size: 4 ", "size: 128 ")
        .replace("../budgets", &root.join("budgets").display().to_string());
    assert!(text.contains("size: 128 "));
    let mesh = dir.write("full-mesh.yaml", &text);
    let (code, _, err) = stackflow(&["predict", "--system", &mesh, "--devices", "128"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("128 members") && err.contains("at most 64 members in a fully connected"),
        "{err}"
    );
}

/// D2: the optimizer's restarts and steps and a sweep's worker threads are bounded on the
/// command line and in a study file.
#[test]
fn d2_restarts_steps_and_jobs_are_bounded() {
    for (args, says) in [
        (
            vec!["optimize", "--restarts", "99999999999", "--steps", "1"],
            "not in 1..=10000",
        ),
        (
            vec!["optimize", "--steps", "10000000"],
            "not in 1..=1000000",
        ),
        (
            vec!["sweep", "studies/zion-fig10.yaml", "--jobs", "1000000"],
            "not in 1..=256",
        ),
    ] {
        let (code, _, err) = stackflow(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let dir = Scratch::new("hardening-d2");
    let root = common::root();
    let study = dir.write(
        "s.yaml",
        &format!(
            "version: 1\nname: s\nbase:\n  system: {}\n  workload: {}\naction: optimize\noptimizer: {{restarts: 99999999999}}\naxes:\n  - name: x\n    field: workload.global_batch\n    values: [512]\n",
            root.join("templates/deepflow-sec9.yaml").display(),
            root.join("workloads/lstm-sec9.yaml").display()
        ),
    );
    let (code, _, err) = stackflow(&["sweep", &study, "--out", &dir.write("o", "")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("optimizer.restarts") && err.contains("from 1 to 10000"),
        "{err}"
    );
}

/// D6: a study whose base cannot run (no devices) is refused before any point runs.
#[test]
fn d6_a_study_base_is_checked_before_any_point() {
    let dir = Scratch::new("hardening-d6");
    let root = common::root();
    let study = dir.write(
        "s.yaml",
        &format!(
            "version: 1\nname: s\nbase:\n  system: {}\n  workload: {}\n  devices: 0\naction: predict\naxes:\n  - name: x\n    field: workload.global_batch\n    values: [512]\n",
            root.join("templates/dgx-a100.yaml").display(),
            root.join("workloads/gpt-1.7b.yaml").display()
        ),
    );
    let out = dir.write("o", "");
    let (code, _, err) = stackflow(&["sweep", &study, "--out", &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("base.devices = 0"), "{err}");
}

/// D3: a technology value outside its physical range is refused (a clock of 1e308 GHz), and
/// a derived quantity that still overflows is a typed violation, never "feasible".
#[test]
fn d3_overflowing_technology_is_refused_or_infeasible() {
    let dir = Scratch::new("hardening-d3");
    let root = common::root();
    // The node file with its includes beside it.
    for entry in std::fs::read_dir(root.join("tech_libs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        dir.write(&name, &std::fs::read_to_string(&path).unwrap());
    }
    let tech = std::fs::read_to_string(root.join("tech_libs/n7.yaml"))
        .unwrap()
        .replacen("frequency_ghz: 1.41", "frequency_ghz: 1e308", 1);
    assert!(tech.contains("1e308"));
    let tech_path = dir.write("n7.yaml", &tech);
    let (code, _, err) = stackflow(&[
        "generate",
        "--budget",
        "budgets/a100.yaml",
        "--tech",
        &tech_path,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("frequency_ghz = 1e308") && err.contains("expected a number in [0.01, 20]"),
        "{err}"
    );
}

/// D4 and D7: a budget whose inter-package power share is 0 gives the DeepFlow Sec. 9 system
/// an endless gradient sync: the answer is INFEASIBLE with that reason (exit 0, as predict
/// reports an infeasible design), never "feasible"; a TDP of 1e308 W is refused.
#[test]
fn d4_an_endless_iteration_is_infeasible_and_says_why() {
    let dir = Scratch::new("hardening-d4");
    let root = common::root();
    let budget = std::fs::read_to_string(root.join("budgets/deepflow-sec9.yaml"))
        .unwrap()
        .replace(
            "../templates",
            &root.join("templates").display().to_string(),
        )
        .replace(
            "../tech_libs",
            &root.join("tech_libs").display().to_string(),
        );
    let starved = budget.replacen("inter_package: 0.0427", "inter_package: 0", 1);
    assert_ne!(starved, budget);
    let budget_path = dir.write("budget.yaml", &starved);
    let system = std::fs::read_to_string(root.join("templates/deepflow-sec9.yaml"))
        .unwrap()
        .replace("../budgets/deepflow-sec9.yaml", &budget_path);
    let system_path = dir.write("system.yaml", &system);
    let args = [
        "predict",
        "--system",
        &system_path,
        "--workload",
        "workloads/lstm-sec9.yaml",
        "--strategy",
        "d512-z2",
    ];
    let (code, out, err) = stackflow(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("INFEASIBLE"), "{out}");
    assert!(
        out.contains(
            "time per iteration (gradient sync; fabric infiniband (512 members, 0 B/s per \
             device) cannot send: the accelerator's network has no bandwidth (no lanes, or no \
             power)) is inf: a non-finite result"
        ),
        "{out}"
    );
    assert!(
        out.contains("energy / iteration  not finite: the iteration's time is not"),
        "{out}"
    );
    assert!(
        !out.contains("feasible: every device holds its share"),
        "{out}"
    );
    let (code, json, _) = stackflow(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["feasible"], false, "{json}");
    assert!(
        v["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "non_finite"),
        "{json}"
    );
    let hot = dir.write("hot.yaml", &budget.replacen("tdp_w: ", "tdp_w: 1e308 #", 1));
    let (code, _, err) = stackflow(&["generate", "--budget", &hot]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("power.tdp_w = 1e308"), "{err}");
}

/// D9: a served prompt and its answer must fit the model's sequence.
#[test]
fn d9_a_prompt_longer_than_the_sequence_is_refused() {
    let dir = Scratch::new("hardening-d9");
    let text =
        std::fs::read_to_string(common::root().join("workloads/llama2-70b-decode.yaml")).unwrap();
    let inference = text
        .lines()
        .find(|l| l.starts_with("inference:"))
        .unwrap()
        .to_string();
    let long = dir.write(
        "w.yaml",
        &text.replace(
            &inference,
            "inference: {batch: 1, prompt_tokens: 100000, output_tokens: 256}",
        ),
    );
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-h100.yaml",
        "--workload",
        &long,
        "--strategy",
        "t8",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("inference.prompt_tokens = 100000")
            && err.contains("prompt + output <= sequence"),
        "{err}"
    );
}

/// D8: a file nested 100,000 levels deep is refused before the YAML parser sees it (the
/// parser's time grows with the square of the depth: over a minute here before).
#[test]
fn d8_deep_nesting_is_refused_before_parsing() {
    let dir = Scratch::new("hardening-d8");
    let n = 100_000;
    let deep = dir.write(
        "deep.yaml",
        &format!(
            "version: 1\nkind: gemm\nname: x\nextra: {}{}\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
    );
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--workload",
        &deep,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("line 4 nested 100000 levels deep") && err.contains("at most 64 levels"),
        "{err}"
    );
    let wide = dir.write(
        "wide.yaml",
        &format!("version: 1\nkind: gemm\nm:\n{}1\n", " ".repeat(1000)),
    );
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--workload",
        &wide,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("indented 1000 columns"), "{err}");
}

/// D7: the carbon inputs have physical ranges (a grid of 1e308 kg CO2e per kWh refused).
#[test]
fn d7_carbon_inputs_have_physical_ranges() {
    for (flag, value, says) in [
        (
            "--grid-kg-per-kwh",
            "1e308",
            "--grid-kg-per-kwh 1e308: expected a carbon intensity from 0 to 5",
        ),
        (
            "--pue",
            "50",
            "--pue 50: expected a power usage effectiveness from 1 to 5",
        ),
    ] {
        let mut args = vec![
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--grid-kg-per-kwh",
            "0.4",
        ];
        if flag == "--grid-kg-per-kwh" {
            args[4] = value;
        } else {
            args.extend([flag, value]);
        }
        let (code, _, err) = stackflow(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(says), "{err}");
    }
}

/// Messages: a negative number reaches its option (which refuses it by name) instead of
/// being read as an unknown flag; a strategy starting with a dash is a strategy.
#[test]
fn negative_numbers_and_dashed_strategies_reach_their_options() {
    for (args, says) in [
        (
            vec![
                "predict",
                "--system",
                "templates/dgx-a100.yaml",
                "--devices",
                "-1",
            ],
            "invalid value '-1' for '--devices <DEVICES>'",
        ),
        (
            vec!["optimize", "--steps", "-5"],
            "invalid value '-5' for '--steps <STEPS>'",
        ),
        (
            vec![
                "predict",
                "--system",
                "templates/dgx-a100.yaml",
                "--strategy",
                "-d8",
            ],
            "strategy \"-d8\": empty field between dashes",
        ),
    ] {
        let (code, _, err) = stackflow(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Messages: a dangling reference names the file and field that hold it (a system's
/// accelerator, a study's base workload), not only the path it resolved to.
#[test]
fn a_dangling_reference_names_the_file_and_field_holding_it() {
    let dir = Scratch::new("hardening-refs");
    let root = common::root();
    let system = std::fs::read_to_string(root.join("templates/zion.yaml"))
        .unwrap()
        .replace("../budgets/v100.yaml", "nope.yaml");
    let system_path = dir.write("system.yaml", &system);
    let (code, _, err) = stackflow(&["predict", "--system", &system_path]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("system.yaml: accelerator = nope.yaml: a file that exists"),
        "{err}"
    );
    let study = dir.write(
        "s.yaml",
        &format!(
            "version: 1\nname: s\nbase:\n  system: {}\n  workload: missing.yaml\naction: predict\naxes:\n  - name: x\n    field: workload.global_batch\n    values: [8]\n",
            root.join("templates/dgx-a100.yaml").display()
        ),
    );
    let (code, _, err) = stackflow(&["sweep", &study, "--out", &dir.write("o", "")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("s.yaml: base.workload = missing.yaml: a file that exists"),
        "{err}"
    );
}

/// Messages: a wrong type under a map keyed by precision names the key, not `?`.
#[test]
fn a_wrong_type_under_a_precision_key_names_the_key() {
    let dir = Scratch::new("hardening-precision-key");
    let root = common::root();
    let text = std::fs::read_to_string(root.join("templates/gpu-a100.yaml"))
        .unwrap()
        .replacen("    fp32: 0.0625 ", "    fp32: fast ", 1);
    assert!(text.contains("fp32: fast"));
    let template = dir.write("t.yaml", &text);
    let (code, _, err) = stackflow(&[
        "generate",
        "--budget",
        "budgets/a100.yaml",
        "--template",
        &template,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("t.yaml: compute.throughput_by_precision.fp32: invalid type"),
        "{err}"
    );
    assert!(!err.contains(".?"), "{err}");
}

/// D7: SRAM bandwidth is capped by its banks' ports at the core's clock (2 ports of 1024
/// bits per bank in the shipped libraries): an A100 budget with a 100 kW TDP no longer buys
/// unbounded on-chip bandwidth with its power (was 82.6 PB/s from 8.38 mm2 at 1 MW).
#[test]
fn d7_sram_bandwidth_is_capped_by_bank_ports() {
    let dir = Scratch::new("hardening-d7-sram");
    let root = common::root();
    let text = std::fs::read_to_string(root.join("budgets/a100.yaml"))
        .unwrap()
        .replacen("tdp_w: 400 ", "tdp_w: 100000 ", 1)
        .replace("../", &format!("{}/", root.display()));
    assert!(text.contains("tdp_w: 100000 "));
    let budget = dir.write("a100-hot.yaml", &text);
    let (code, out, err) = stackflow(&["generate", "--budget", &budget, "--json"]);
    assert_eq!(code, 0, "{err}");
    let arch: serde_json::Value = serde_json::from_str(&out).unwrap();
    let clock = arch["core"]["frequency_hz"].as_f64().unwrap();
    for level in arch["on_chip"].as_array().unwrap() {
        let banks = level["banks"].as_f64().unwrap();
        let bandwidth = level["bandwidth_bytes_per_s"].as_f64().unwrap();
        let cap = banks * 256.0 * clock;
        assert!(bandwidth <= cap * (1.0 + 1e-12), "{level}");
        assert!(
            (bandwidth / cap - 1.0).abs() < 1e-9,
            "bound by ports: {level}"
        );
        assert_eq!(level["bounds"][1]["limit"], "ports", "{level}");
    }
}

/// Messages: `optimize --out` onto something that is not a directory (a file, or a path
/// under one) names the path and the file in the way, exit 2, before any restart runs (after
/// the run, creating the folder would fail with the system's "File exists").
#[test]
fn optimize_out_onto_a_file_is_refused_before_the_run() {
    let dir = Scratch::new("hardening-out");
    let file = dir.write("not-a-directory", "x");
    for out in [file.clone(), format!("{file}/sub")] {
        let (code, _, err) = stackflow(&["optimize", "--restarts", "40", "--out", &out]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "--out {out}: {file} is a file, not a folder to write into"
            )),
            "{err}"
        );
    }
}

/// A reader that stops reading (`stackflow optimize --json | head -c 10`) ends the run
/// quietly: exit 0, no panic message. The report (31 kB) fits a pipe's buffer, so the pipe
/// is closed before anything is written: the write fails as it would past `head`.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackflow"))
        .args(["optimize", "--restarts", "2", "--steps", "5", "--json"])
        .current_dir(common::root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert!(out.status.success(), "{:?}", out.status);
}

/// Fuzz finding #907091 (seed 1): a torus whose dims multiply past 2^64 (`dims:
/// [4294967296, 4294967296]`) wrapped to 0 members and divided by zero; the product is now
/// checked as it multiplies and bounded by the device limit.
#[test]
fn fuzz_907091_torus_dims_multiplying_past_u64_are_refused() {
    let dir = Scratch::new("hardening-fuzz-907091");
    let root = common::root();
    let text = std::fs::read_to_string(root.join("templates/tpu-v3-pod.yaml"))
        .unwrap()
        .replacen("dims: [16, 32]", "dims: [4294967296, 4294967296]", 1)
        .replace("../budgets", &root.join("budgets").display().to_string());
    assert!(text.contains("4294967296, 4294967296"));
    let system = dir.write("tpu-v3-pod.yaml", &text);
    let (code, _, err) = stackflow(&["predict", "--system", &system]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("fabrics[0].topology.dims = [4294967296, 4294967296]")
            && err.contains("at most 1048576 members"),
        "{err}"
    );
}
