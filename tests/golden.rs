//! Golden reports: the `--json` output of representative commands, compared field by field
//! with `tests/golden/<name>.json`. Every difference prints its JSON path, both values and
//! the relative error; numbers agree when their relative difference is at most 1e-12.
//!
//! A change that moves a number is deliberate: re-bless with
//! `STACKFLOW_BLESS=1 cargo test --release --test golden`, in its own commit that says which
//! numbers moved and why.

mod common;

use std::path::PathBuf;

use serde_json::Value;

/// Relative difference allowed between two numbers.
const TOLERANCE: f64 = 1e-12;

/// What a golden case runs.
enum Run {
    /// `stackflow ARGS` printing JSON on stdout.
    Stdout(&'static [&'static str]),
    /// `stackflow sweep STUDY --out DIR`, then DIR/results.json.
    Sweep(&'static str),
}

/// (name, command, expected exit code).
const CASES: &[(&str, Run, i32)] = &[
    // `generate` for every shipped budget.
    (
        "generate-a100-40gb",
        Run::Stdout(&["generate", "--budget", "budgets/a100-40gb.yaml", "--json"]),
        0,
    ),
    (
        "generate-a100",
        Run::Stdout(&["generate", "--budget", "budgets/a100.yaml", "--json"]),
        0,
    ),
    (
        "generate-deepflow-sec9",
        Run::Stdout(&[
            "generate",
            "--budget",
            "budgets/deepflow-sec9.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "generate-fig4-example",
        Run::Stdout(&[
            "generate",
            "--budget",
            "budgets/fig4-example.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "generate-h100",
        Run::Stdout(&["generate", "--budget", "budgets/h100.yaml", "--json"]),
        0,
    ),
    (
        "generate-mcm",
        Run::Stdout(&["generate", "--budget", "budgets/mcm.yaml", "--json"]),
        0,
    ),
    (
        "generate-tpu-v3",
        Run::Stdout(&["generate", "--budget", "budgets/tpu-v3.yaml", "--json"]),
        0,
    ),
    (
        "generate-tpu-v4",
        Run::Stdout(&["generate", "--budget", "budgets/tpu-v4.yaml", "--json"]),
        0,
    ),
    (
        "generate-v100",
        Run::Stdout(&["generate", "--budget", "budgets/v100.yaml", "--json"]),
        0,
    ),
    (
        "generate-waferscale",
        Run::Stdout(&["generate", "--budget", "budgets/waferscale.yaml", "--json"]),
        0,
    ),
    (
        "generate-a100-at-n3",
        Run::Stdout(&[
            "generate",
            "--budget",
            "budgets/a100.yaml",
            "--tech",
            "tech_libs/n3.yaml",
            "--json",
        ]),
        0,
    ),
    // Single-device `predict` for every workload kind.
    (
        "predict-gemm",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/gemm-8192.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "predict-lstm",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/lstm-o1.yaml",
            "--budget",
            "budgets/v100.yaml",
            "--kernels",
            "--json",
        ]),
        0,
    ),
    (
        "predict-transformer",
        Run::Stdout(&["predict", "--json"]),
        0,
    ),
    (
        "predict-llama-65b-a100",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/llama-65b.yaml",
            "--budget",
            "budgets/a100.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "predict-serving",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--budget",
            "budgets/h100.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "predict-dlrm",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/dlrm-b.yaml",
            "--budget",
            "budgets/a100.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "predict-moe",
        Run::Stdout(&[
            "predict",
            "--workload",
            "workloads/llm-moe.yaml",
            "--budget",
            "budgets/h100.yaml",
            "--json",
        ]),
        0,
    ),
    // Distributed `predict` on every shipped system.
    (
        "dist-dgx-a100-gpt3",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "1024",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "t8-p16-d8-mb1-i2-sp-rc=selective",
            "--json",
        ]),
        0,
    ),
    (
        "import-calculon-megatron-1t",
        Run::Stdout(&[
            "predict",
            "--workload",
            "tests/import/calculon/models/megatron-1T.json",
            "--system",
            "tests/import/calculon/systems/a100_80g.json",
            "--strategy",
            "tests/import/calculon/examples/3072_t4_p64_d12_mbs4_full.json",
            "--json",
        ]),
        0,
    ),
    (
        "import-deepflow-v100-lstm",
        Run::Stdout(&[
            "predict",
            "--workload",
            "tests/import/deepflow/model-LSTM.yaml",
            "--budget",
            "tests/import/deepflow/hw-v100.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "dist-dgx-a100-megatron-1t",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "3072",
            "--workload",
            "workloads/megatron-1t.yaml",
            "--strategy",
            "t8-p64-d6-mb1-sp-rc=selective",
            "--json",
        ]),
        0,
    ),
    (
        "dist-dgx-a100-llama-65b-co2",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "2048",
            "--workload",
            "workloads/llama-65b.yaml",
            "--strategy",
            "t8-p4-d64-mb1-sp-rc=selective",
            "--grid-kg-per-kwh",
            "0.4",
            "--json",
        ]),
        0,
    ),
    (
        "dist-dgx-a100-moe",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "1024",
            "--workload",
            "workloads/llm-moe.yaml",
            "--strategy",
            "t8-p8-d16-e8-mb1-sp-z1",
            "--json",
        ]),
        0,
    ),
    (
        "dist-dgx-h100-serving",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "8",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--strategy",
            "t8",
            "--grid-kg-per-kwh",
            "0.4",
            "--json",
        ]),
        0,
    ),
    (
        "dist-dgx-h100-serving-pipelined",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "8",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--strategy",
            "t4-p2",
            "--json",
        ]),
        0,
    ),
    // LoRA fine-tuning (issue 30): adapters beside frozen weights, over TP, PP and DP.
    (
        "dist-h100-lora-70b",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "64",
            "--workload",
            "workloads/llama2-70b-lora.yaml",
            "--strategy",
            "t8-p4-d2-mb1-sp",
            "--json",
        ]),
        0,
    ),
    (
        "dist-h100-superpod-nvl",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/h100-superpod-nvl.yaml",
            "--devices",
            "256",
            "--workload",
            "workloads/llama2-70b.yaml",
            "--strategy",
            "t8-p4-d8-mb1-sp-z1-rc=selective",
            "--json",
        ]),
        0,
    ),
    (
        "dist-tpu-v4-slice",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/tpu-v4-pod.yaml",
            "--slice",
            "4x8x16",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "p16-d4-t8-mb1-rc=full",
            "--json",
        ]),
        0,
    ),
    (
        "dist-tpu-v4-dlrm0",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/tpu-v4-pod.yaml",
            "--slice",
            "4x4x8",
            "--workload",
            "workloads/dlrm0-tpu.yaml",
            "--strategy",
            "d128",
            "--json",
        ]),
        0,
    ),
    (
        "dist-tpu-v3",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/tpu-v3-pod.yaml",
            "--devices",
            "512",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "p16-d4-t8-mb1-rc=full",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zionex-dlrm-a-tp-ddp",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a.yaml",
            "--strategy",
            "(TP, DDP)",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zionex-dlrm-a-fsdp",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a.yaml",
            "--strategy",
            "(FSDP, FSDP)",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zionex-dlrm-a-moe",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a-moe.yaml",
            "--strategy",
            "d128-e16",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zionex-dlrm-a-transformer",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a-transformer.yaml",
            "--strategy",
            "d128",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zion-dlrm-b",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zion.yaml",
            "--workload",
            "workloads/dlrm-b.yaml",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zion-dlrm-b-staged",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zion.yaml",
            "--workload",
            "workloads/dlrm-b.yaml",
            "--host-transfers",
            "staged",
            "--json",
        ]),
        0,
    ),
    (
        "dist-zionex-dlrm-a-inference-tp-ddp",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a-inference.yaml",
            "--strategy",
            "(TP, DDP)",
            "--json",
        ]),
        0,
    ),
    (
        "dist-tpu-v4-dlrm0-cpu-hosted",
        Run::Stdout(&[
            "predict",
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
            "--json",
        ]),
        0,
    ),
    (
        "dist-deepflow-sec9-rc",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/deepflow-sec9.yaml",
            "--workload",
            "workloads/lstm-sec9.yaml",
            "--strategy",
            "RC-1-4-d128-p1",
            "--json",
        ]),
        0,
    ),
    (
        "dist-deepflow-sec9-cr",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/deepflow-sec9.yaml",
            "--workload",
            "workloads/lstm-sec9.yaml",
            "--strategy",
            "CR-16-d32",
            "--json",
        ]),
        0,
    ),
    (
        "dist-h100-llama3-70b-128k-cp8",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "256",
            "--workload",
            "workloads/llama3-70b-128k.yaml",
            "--strategy",
            "t8-p4-cp8-mb1-sp",
            "--json",
        ]),
        0,
    ),
    (
        "dist-infeasible-oom",
        Run::Stdout(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "64",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "d64",
            "--json",
        ]),
        0,
    ),
    // `search`: the strategy search with its counts, top N and Pareto front; and a search
    // where nothing fits (exit 3, the nearest candidates listed).
    (
        "search-llama2-70b-64",
        Run::Stdout(&[
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
            "5",
            "--json",
        ]),
        0,
    ),
    // A per-layer-type search (MAD Max Sec. 4): the transformer interaction and the dense
    // layers of DLRM-A-Transformer each take their own split.
    (
        "search-per-layer-type-dlrm-a-transformer",
        Run::Stdout(&[
            "search",
            "--system",
            "templates/zionex.yaml",
            "--workload",
            "workloads/dlrm-a-transformer.yaml",
            "--top",
            "3",
            "--per-layer-type",
            "--json",
        ]),
        0,
    ),
    (
        "search-nothing-fits",
        Run::Stdout(&[
            "search",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "8",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--json",
        ]),
        3,
    ),
    // `optimize` with a fixed seed and few steps: co-optimization and budgets only.
    (
        "optimize-co",
        Run::Stdout(&[
            "optimize",
            "--restarts",
            "2",
            "--steps",
            "3",
            "--seed",
            "1",
            "--json",
        ]),
        0,
    ),
    (
        "optimize-budgets",
        Run::Stdout(&[
            "optimize",
            "--strategy",
            "CR-16-d32",
            "--restarts",
            "3",
            "--steps",
            "5",
            "--seed",
            "7",
            "--json",
        ]),
        0,
    ),
    // An optimization that runs but finds nothing feasible: its report, exit code 3.
    (
        "optimize-infeasible",
        Run::Stdout(&[
            "optimize",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "64",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "d64",
            "--restarts",
            "1",
            "--steps",
            "2",
            "--json",
        ]),
        3,
    ),
    // Serving under load (issue 29): Poisson arrivals with an SLO's goodput, P/D pools, a
    // closed loop with chunked prefill, the serving search and a budget optimized for it.
    (
        "serve-llama2-7b-h100",
        Run::Stdout(&[
            "serve",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "1",
            "--rate",
            "50",
            "--requests",
            "500",
            "--slo-ttft-ms",
            "200",
            "--slo-tpot-ms",
            "20",
            "--json",
        ]),
        0,
    ),
    (
        "serve-llama2-70b-pd",
        Run::Stdout(&[
            "serve",
            "--workload",
            "workloads/llama2-70b-serve.yaml",
            "--system",
            "templates/dgx-h100.yaml",
            "--prefill",
            "t2-d2",
            "--decode",
            "t4",
            "--rate",
            "10",
            "--requests",
            "300",
            "--json",
        ]),
        0,
    ),
    (
        "serve-closed-loop-chunked",
        Run::Stdout(&[
            "serve",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "1",
            "--concurrency",
            "32",
            "--requests",
            "320",
            "--chunked-prefill",
            "--no-evict",
            "--json",
        ]),
        0,
    ),
    (
        "search-serving-llama2-70b",
        Run::Stdout(&[
            "search",
            "--workload",
            "workloads/llama2-70b-serve.yaml",
            "--system",
            "templates/dgx-h100.yaml",
            "--slo-ttft-ms",
            "1000",
            "--slo-tpot-ms",
            "50",
            "--requests",
            "200",
            "--top",
            "3",
            "--json",
        ]),
        0,
    ),
    (
        "optimize-serving",
        Run::Stdout(&[
            "optimize",
            "--workload",
            "workloads/llama2-7b-serve.yaml",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "1",
            "--slo-ttft-ms",
            "1000",
            "--slo-tpot-ms",
            "100",
            "--restarts",
            "1",
            "--steps",
            "5",
            "--json",
        ]),
        0,
    ),
    ("validate", Run::Stdout(&["validate", "--json"]), 0),
    (
        "sweep-dlrm-fabric",
        Run::Sweep("studies/dlrm-fabric.yaml"),
        0,
    ),
];

fn golden_path(name: &str) -> PathBuf {
    common::root()
        .join("tests/golden")
        .join(format!("{name}.json"))
}

fn run(name: &str, what: &Run) -> (i32, String, String) {
    match what {
        Run::Stdout(args) => common::stackflow(args),
        Run::Sweep(study) => {
            let dir = common::root().join("target/test-scratch/golden").join(name);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
            let out = dir.display().to_string();
            let (code, stdout, stderr) =
                common::stackflow(&["sweep", study, "--out", &out, "--jobs", "2"]);
            let results = std::fs::read_to_string(dir.join("results.json")).unwrap_or_else(|e| {
                panic!("{name}: no results.json ({e}); stdout {stdout} stderr {stderr}")
            });
            (code, results, stderr)
        }
    }
}

/// Every difference between `expected` and `actual` under `path`.
fn compare(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Number(e), Value::Number(a)) => {
            let (e, a) = (e.as_f64().unwrap(), a.as_f64().unwrap());
            let scale = e.abs().max(a.abs());
            let rel = if scale == 0.0 {
                0.0
            } else {
                (a - e).abs() / scale
            };
            if rel > TOLERANCE {
                out.push(format!(
                    "{path}: expected {e:e}, got {a:e} (relative error {rel:.3e})"
                ));
            }
        }
        (Value::Object(e), Value::Object(a)) => {
            for (key, ev) in e {
                let p = format!("{path}.{key}");
                match a.get(key) {
                    Some(av) => compare(&p, ev, av, out),
                    None => out.push(format!("{p}: missing (expected {ev})")),
                }
            }
            for key in a.keys().filter(|k| !e.contains_key(*k)) {
                out.push(format!("{path}.{key}: unexpected field"));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{path}: expected {} elements, got {}",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                compare(&format!("{path}[{i}]"), ev, av, out);
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(format!("{path}: expected {e}, got {a}")),
    }
}

#[test]
fn golden_reports_are_unchanged() {
    let bless = std::env::var("STACKFLOW_BLESS").is_ok_and(|v| v == "1");
    assert!(CASES.len() >= 25, "at least 25 representative commands");
    let mut failures = Vec::new();
    for (name, what, expected_code) in CASES {
        let (code, stdout, stderr) = run(name, what);
        assert_eq!(
            code, *expected_code,
            "{name}: exit code {code}, expected {expected_code}; stderr: {stderr}"
        );
        let actual: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{name}: output is not JSON ({e}): {stdout}"));
        let path = golden_path(name);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; bless with STACKFLOW_BLESS=1 cargo test --release --test golden",
                path.display()
            )
        });
        let expected: Value = serde_json::from_str(&text).unwrap();
        let mut diffs = Vec::new();
        compare("$", &expected, &actual, &mut diffs);
        if !diffs.is_empty() {
            failures.push(format!(
                "{name} ({} differences):\n  {}",
                diffs.len(),
                diffs.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden reports changed (re-bless deliberately with STACKFLOW_BLESS=1):\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_comparison_reports_path_values_and_relative_error() {
    let expected: Value =
        serde_json::from_str(r#"{"a": {"b": [1.0, 2.0]}, "c": "x", "d": 1}"#).unwrap();
    let actual: Value =
        serde_json::from_str(r#"{"a": {"b": [1.0, 2.5]}, "c": "y", "e": 2}"#).unwrap();
    let mut diffs = Vec::new();
    compare("$", &expected, &actual, &mut diffs);
    assert_eq!(
        diffs,
        vec![
            "$.a.b[1]: expected 2e0, got 2.5e0 (relative error 2.000e-1)".to_string(),
            "$.c: expected \"x\", got \"y\"".to_string(),
            "$.d: missing (expected 1)".to_string(),
            "$.e: unexpected field".to_string(),
        ]
    );
    let mut none = Vec::new();
    compare("$", &expected, &expected, &mut none);
    assert!(none.is_empty());
    // Within 1e-12 is equal.
    let mut tiny = Vec::new();
    compare(
        "$",
        &serde_json::json!(1.0),
        &serde_json::json!(1.0 + 1e-14),
        &mut tiny,
    );
    assert!(tiny.is_empty());
}
