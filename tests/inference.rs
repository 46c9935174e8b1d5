//! Serving: the decode of a 70B model at batch 1 reads the weights and the KV cache once per
//! token at HBM bandwidth; the prefill of a long prompt is compute-bound.

mod common;

use common::{root, stackflow};
use stackflow::config::Source;
use stackflow::design::{Design, DesignFiles};
use stackflow::generator::generate;
use stackflow::perf::Evaluator;
use stackflow::workload::{KernelClass, Workload};

#[test]
fn decode_is_bandwidth_bound_and_prefill_compute_bound() {
    let design = Design::load(DesignFiles {
        source: Source::Disk,
        budget: &root().join("budgets/h100.yaml"),
        template: None,
        tech: None,
    })
    .unwrap();
    let arch = generate(&design);
    let w = match Workload::load(
        Source::Disk,
        &root().join("workloads/llama2-70b-decode.yaml"),
    )
    .unwrap()
    {
        Workload::Transformer(t) => t,
        other => panic!("{other:?}"),
    };
    let spec = w.inference.unwrap();
    let p = Evaluator::new(&arch).predict_inference(&w, &spec, &arch.violations);
    // Main memory at the bandwidth the stack achieves (the template's `stack:` cap).
    let floor = p.decode_bytes_per_step / arch.achieved_memory_bandwidth();
    println!(
        "TTFT {:.1} ms, TPOT {:.2} ms, bytes/bandwidth {:.2} ms, {:.1} tokens/s",
        p.time_to_first_token_s * 1e3,
        p.time_per_output_token_s * 1e3,
        floor * 1e3,
        p.tokens_per_s
    );
    assert!(p.feasible, "{:?}", p.violations);
    assert!(
        (p.time_per_output_token_s / floor - 1.0).abs() < 0.10,
        "decode {} vs {} s",
        p.time_per_output_token_s,
        floor
    );
    // 70B parameters in fp8, and the cache of 2304 tokens x 80 layers x 2 x 1024 values.
    assert!(
        (p.weights_bytes / 69e9 - 1.0).abs() < 0.05,
        "{}",
        p.weights_bytes
    );
    assert_eq!(p.kv_cache_bytes, (2304u64 * 80 * 2 * 1024) as f64);
    let gemm = |pr: &stackflow::perf::Prediction| {
        pr.breakdown
            .iter()
            .find(|c| c.class == KernelClass::Gemm)
            .unwrap()
            .clone()
    };
    assert_eq!(gemm(&p.decode).bound.to_string(), "dram");
    assert_eq!(gemm(&p.prefill).bound.to_string(), "compute");
    // The prefill of 2048 tokens does ~2 x 70e9 x 2048 FLOPs: near the fp8 peak.
    assert!(p.prefill.utilization > 0.5, "{}", p.prefill.utilization);
}

#[test]
fn inference_reports_and_bad_requests() {
    let (code, out, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/llama2-70b-decode.yaml",
        "--budget",
        "budgets/h100.yaml",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "time_to_first_token_s",
        "time_per_output_token_s",
        "tokens_per_s",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}");
    }
    let dir = common::Scratch::new("inference-bad");
    let text = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml"))
        .unwrap()
        .replace("batch: 1,", "batch: 0,");
    let bad = dir.write("bad.yaml", &text);
    let (code, _, err) = stackflow(&["predict", "--workload", &bad]);
    assert_eq!(code, 2);
    assert!(err.contains("inference.batch"), "{err}");
}
