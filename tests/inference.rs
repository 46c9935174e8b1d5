//! Serving: the decode of a 70B model at batch 1 reads the weights and the KV cache once per
//! token at HBM bandwidth; the prefill of a long prompt is compute-bound.

mod common;

use common::{root, stackflow, Scratch};
use stackflow::config::Source;
use stackflow::design::{Design, DesignFiles};
use stackflow::generator::generate;
use stackflow::perf::Evaluator;
use stackflow::workload::{KernelClass, Workload};

/// The H100 of `budgets/h100.yaml`, generated.
fn h100() -> stackflow::generator::Architecture {
    let design = Design::load(DesignFiles {
        source: Source::Disk,
        budget: &root().join("budgets/h100.yaml"),
        template: None,
        tech: None,
    })
    .unwrap();
    generate(&design)
}

#[test]
fn decode_is_bandwidth_bound_and_prefill_compute_bound() {
    let arch = h100();
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
    // Main memory at the bandwidth the stack achieves (the template's `stack:` caps): the
    // weights through the products at theirs, the cache through the fused attention at the
    // streaming kernels'.
    let kv = p.decode_bytes_per_step - p.weights_bytes;
    let floor =
        p.weights_bytes / arch.achieved_product_bandwidth() + kv / arch.achieved_memory_bandwidth();
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

/// Issue 28: Llama-2-70B bf16 decode on 4 H100s (t4) at batch 32 with 4,096 tokens of
/// context. Grouped-query attention reads each key/value head's cache once: a device's
/// attention DRAM bytes are its share of the KV cache (2 of the 8 KV heads), not 8 times it;
/// and the step is the bytes a device streams (its weight shard and KV share) at the capped
/// HBM bandwidth, plus the latency floors of its kernels (one captured graph) and of its
/// collectives.
#[test]
fn gqa_decode_reads_each_kv_head_once_and_streams_at_the_capped_bandwidth() {
    use stackflow::distributed::{device_kernels, predict_inference};
    use stackflow::parallel::Strategy;
    use stackflow::workload::inference::{decode_graph, kv_cache_bytes};
    let text = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml"))
        .unwrap()
        .replace("precision: fp8", "precision: bf16  #")
        .replace("sequence: 4096", "sequence: 8192  #")
        .replace(
            "inference: {batch: 1, prompt_tokens: 2048, output_tokens: 256}",
            "inference: {batch: 32, prompt_tokens: 4096, output_tokens: 1}",
        );
    let w = Workload::from_yaml("llama2-70b-bf16.yaml", &text).unwrap();
    let (t, spec) = w.serving().unwrap();
    assert_eq!((spec.batch, spec.prompt_tokens), (32, 4096));
    let (arch, net) = dgx_h100(4);
    let s = Strategy {
        tensor: 4,
        ..Strategy::default()
    };
    let context = 4096;
    let graph = decode_graph(t, spec, context);
    let mut evaluator = Evaluator::new(&arch);
    let dram = evaluator.machine.levels.len() - 1;
    let attention: f64 = device_kernels(&graph, &s, 0)
        .iter()
        .filter(|(k, _)| k.class == KernelClass::Attention)
        .map(|(k, n)| evaluator.kernel_ref(k).level_bytes[dram] * *n as f64)
        .sum();
    let kv_share = kv_cache_bytes(t, 32, context) / 4.0;
    assert!(
        (attention / kv_share - 1.0).abs() < 0.05,
        "attention reads {attention:.4e} B per device, its KV share is {kv_share:.4e} B"
    );
    let p = predict_inference(t, spec, &arch, &net, &s).unwrap();
    assert!(p.feasible, "{:?}", p.violations);
    // The floors: one launch of the captured step, and a fixed cost per all-reduce (two per
    // layer, after the row-parallel attention output and MLP down projection).
    let capped = arch.memory_bandwidth_bytes_per_s * arch.caps.memory_utilization.unwrap_or(1.0);
    // The weights stream through the products, at the stack's product cap.
    let products = arch.memory_bandwidth_bytes_per_s
        * arch
            .caps
            .product_memory_utilization
            .or(arch.caps.memory_utilization)
            .unwrap_or(1.0);
    assert!(
        products < capped,
        "H100's products stream below the streaming cap"
    );
    let latency = net.fabrics[0].collective_latency_s;
    assert!(
        latency > 0.0,
        "the NVLink fabric carries a collective latency floor"
    );
    let collectives = 2.0 * t.layers as f64;
    let streamed = p.weights_bytes / products + kv_share / capped;
    let expected = streamed + evaluator.machine.kernel_launch_s + collectives * latency;
    let step = p.time_per_output_token_s;
    assert!(
        (step / expected - 1.0).abs() < 0.10,
        "step {step:.4e} s against {expected:.4e} s (streaming {streamed:.4e} s)"
    );
}

/// A served model on one accelerator reports the energy of its batch (prefill, then a
/// decode step per further token, on the chip's floor for the whole request) per output
/// token and, with a grid intensity, its CO2e per output token; `--kernels` lists the
/// prefill's and a decode step's kernels.
#[test]
fn one_served_accelerator_reports_energy_and_kernels() {
    let base = [
        "predict",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--budget",
        "budgets/h100.yaml",
        "--grid-kg-per-kwh",
        "0.4",
        "--pue",
        "1.2",
    ];
    let (code, out, err) = stackflow(&[&base[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["energy"];
    let num = |v: &serde_json::Value| v.as_f64().unwrap();
    let memory: f64 = e["memory_j"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| num(&m[1]))
        .sum();
    let total = num(&e["total_j"]);
    assert!(((num(&e["compute_j"]) + memory + num(&e["static_j"])) / total - 1.0).abs() < 1e-12);
    let spec = &v["spec"];
    let tokens = num(&spec["batch"]) * num(&spec["output_tokens"]);
    assert!((num(&e["joules_per_token"]) * tokens / total - 1.0).abs() < 1e-12);
    let request_s = tokens / num(&v["tokens_per_s"]);
    assert!((num(&e["average_power_w"]) * request_s / total - 1.0).abs() < 1e-9);
    let kg = num(&v["co2e_kg_per_token"]);
    assert!((kg / (num(&e["joules_per_token"]) / 3.6e6 * 1.2 * 0.4) - 1.0).abs() < 1e-12);
    let (code, out, err) = stackflow(&[&base[..], &["--kernels"]].concat());
    assert_eq!(code, 0, "{err}");
    for says in [
        "energy / batch",
        "per token",
        "kg per output token",
        "\nprefill (",
        "\ndecode step (",
        "mlp down",
    ] {
        assert!(out.contains(says), "{says}: {out}");
    }
    assert_eq!(out.matches("qkv projection").count(), 2, "{out}");
    // On a system it has nothing to list: refused, not ignored.
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--strategy",
        "t8",
        "--kernels",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--kernels lists one accelerator's kernels"),
        "{err}"
    );
    // A batch whose cache does not fit is out of memory by its KV cache, by name.
    let dir = Scratch::new("served-oom");
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml"))
        .unwrap()
        .replace(
            "inference: {batch: 1, prompt_tokens: 128, output_tokens: 128}",
            "inference: {batch: 64, prompt_tokens: 2048, output_tokens: 2048}",
        );
    let w = dir.write("big.yaml", &text);
    let (code, out, err) = stackflow(&[
        "predict",
        "--workload",
        &w,
        "--budget",
        "budgets/a100-40gb.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "out of memory: 140.6 GiB per device (weights 12.6, KV cache 128.0) > 40.0 GiB"
        ),
        "{out}"
    );
}

/// One device, one answer: a served model through `--budget` and through a one-device part
/// of a DGX H100 (its NVSwitch lets 1, 2 or 4 of 8 GPUs serve alone) agree; 3 is refused.
#[test]
fn one_device_is_one_answer_and_part_of_a_node_serves() {
    let w = "workloads/llama2-7b-serve.yaml";
    let json = |args: &[&str]| -> serde_json::Value {
        let (code, out, err) = stackflow(args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let alone = json(&[
        "predict",
        "--workload",
        w,
        "--budget",
        "budgets/h100.yaml",
        "--json",
    ]);
    let system = ["--system", "templates/dgx-h100.yaml"];
    let one = json(
        &[
            &["predict", "--workload", w],
            &system[..],
            &["--devices", "1", "--strategy", "t1", "--json"],
        ]
        .concat(),
    );
    for (key, of_alone) in [
        ("time_to_first_token_s", "/time_to_first_token_s"),
        ("time_per_output_token_s", "/time_per_output_token_s"),
        ("joules_per_token", "/energy/joules_per_token"),
        ("average_power_w", "/energy/average_power_w"),
    ] {
        let a = alone.pointer(of_alone).and_then(|v| v.as_f64()).unwrap();
        let b = one[key].as_f64().unwrap();
        assert!(
            (a / b - 1.0).abs() < 0.01,
            "{key}: {a} through --budget, {b} on one device"
        );
    }
    let two = json(
        &[
            &["predict", "--workload", w],
            &system[..],
            &["--devices", "2", "--strategy", "t2", "--json"],
        ]
        .concat(),
    );
    let four = json(
        &[
            &["predict", "--workload", w],
            &system[..],
            &["--devices", "4", "--strategy", "t4", "--json"],
        ]
        .concat(),
    );
    let tpot = |v: &serde_json::Value| v["time_per_output_token_s"].as_f64().unwrap();
    assert!(tpot(&four) < tpot(&two) && tpot(&two) < tpot(&one));
    let (code, _, err) = stackflow(
        &[
            &["predict", "--workload", w],
            &system[..],
            &["--devices", "3", "--strategy", "t3"],
        ]
        .concat(),
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("command line: --devices = 3: a positive multiple of the 8 devices per node, or part of one node: 1, 2, 4 of its devices")
            && err.contains("(the system in templates/dgx-h100.yaml)"),
        "{err}"
    );
}

/// A template's `stack.step_overhead_us` (a serving engine's host work per step) adds to the
/// prefill and to every decode step, alone and in a system; a negative one is refused.
#[test]
fn the_engine_step_overhead_adds_to_every_step() {
    let dir = common::Scratch::new("step-overhead");
    let h100 = std::fs::read_to_string(root().join("templates/gpu-h100.yaml")).unwrap();
    let anchor = "  memory_utilization: 0.80";
    assert!(h100.contains(anchor));
    let with = |us: &str| {
        let text = h100.replacen(anchor, &format!("  step_overhead_us: {us}\n{anchor}"), 1);
        dir.write(&format!("gpu-h100-{us}.yaml"), &text)
    };
    let template = with("500");
    let w = "workloads/llama2-7b-serve.yaml";
    let times = |args: &[&str]| -> (f64, f64) {
        let (code, out, err) = stackflow(args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (
            v["time_to_first_token_s"].as_f64().unwrap(),
            v["time_per_output_token_s"].as_f64().unwrap(),
        )
    };
    let alone = [
        "predict",
        "--workload",
        w,
        "--budget",
        "budgets/h100.yaml",
        "--json",
    ];
    let system = [
        "predict",
        "--workload",
        w,
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "2",
        "--strategy",
        "t2",
        "--json",
    ];
    for args in [&alone[..], &system[..]] {
        let (ttft, tpot) = times(args);
        let (ttft2, tpot2) = times(&[args, &["--template", &template]].concat());
        assert!((ttft2 - ttft - 500e-6).abs() < 1e-9, "{ttft} -> {ttft2}");
        assert!((tpot2 - tpot - 500e-6).abs() < 1e-9, "{tpot} -> {tpot2}");
    }
    // Two pipeline stages keep two batches in flight: each batch's prefill and decode steps
    // carry the host work (the TTFT the first batch's once; a decode cycle at least once).
    let piped = [
        "predict",
        "--workload",
        w,
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "2",
        "--strategy",
        "p2",
        "--json",
    ];
    let (ttft, tpot) = times(&piped);
    let (ttft2, tpot2) = times(&[&piped[..], &["--template", &template]].concat());
    assert!((ttft2 - ttft - 500e-6).abs() < 1e-9, "{ttft} -> {ttft2}");
    assert!(
        tpot2 - tpot >= 500e-6 - 1e-9 && tpot2 - tpot <= 1e-3 + 1e-9,
        "{tpot} -> {tpot2}"
    );
    let bad = with("-1");
    let (code, _, err) = stackflow(&[&alone[..], &["--template", &bad]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("stack.step_overhead_us = -1"), "{err}");
}

/// Part of a node inside an outer fabric of a fixed size: the outer fabric joins that one
/// partial node alone (2 devices, not 2 x 4).
#[test]
fn part_of_a_node_in_a_sized_outer_fabric_is_that_many_devices() {
    let text = std::fs::read_to_string(root().join("templates/dgx-h100.yaml"))
        .unwrap()
        .replace("../budgets/", &format!("{}/budgets/", root().display()))
        .replacen(
            "    lanes_per_device: 8",
            "    size: 4\n    lanes_per_device: 8",
            1,
        );
    assert!(text.contains("size: 4"));
    let dir = common::Scratch::new("sized-outer");
    let system = dir.write("system.yaml", &text);
    let (code, out, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--system",
        &system,
        "--devices",
        "2",
        "--strategy",
        "t2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"], 2);
}

/// A serving row of the validation family with a measured value of 0 or an output of 0 is
/// refused naming the row and field (not divided by).
#[test]
fn a_bad_serving_row_is_refused_by_name() {
    let dir = common::Scratch::new("serving-rows");
    let r = root();
    let cases = format!(
        "version: 1\ncases:\n  - id: Serving\n    name: x\n    source: y\n    kind: serving\n    \
         file: rows.yaml\n    models: {{llama2-7b: {}}}\n    systems: {{dgx-h100: {}}}\n    \
         tolerance: 0.15\n",
        r.join("workloads/llama2-7b-serve.yaml").display(),
        r.join("templates/dgx-h100.yaml").display()
    );
    let index = dir.write("cases.yaml", &cases);
    for (row, says) in [
        ("measured: 0", "rows[0] (S1).measured = 0"),
        ("output: 0, measured: 6.3", "rows[0] (S1).output = 0"),
    ] {
        let text =
            format!(
            "rows:\n  - {{id: S1, model: llama2-7b, system: dgx-h100, devices: 1, precision: fp8, \
             batch: 1, prompt: 128, metric: ttft_ms, source: z, {}{}}}\n",
            row,
            if row.starts_with("measured") { ", output: 1" } else { "" }
        );
        dir.write("rows.yaml", &text);
        let (code, _, err) = stackflow(&["validate", &index]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(says), "{says}: {err}");
    }
}

/// Serving under load (issue 29's core): a continuously batching engine fed Poisson
/// arrivals. At low load a request waits for nothing: its TTFT is an idle engine's; swamped,
/// the engine serves at the static-batch throughput of the largest batch it holds; near and
/// past capacity the tail of the TTFT grows with the queue.
#[test]
fn continuous_batching_under_load() {
    use stackflow::distributed::load::{simulate, Load};
    use stackflow::distributed::predict_inference;
    use stackflow::parallel::Strategy;
    let (w, arch, net) = llama2_7b_on_one_h100();
    let (t, spec) = w.serving().unwrap();
    let s = Strategy::default();
    let run = |rate: f64, requests: u64| {
        let load = Load {
            rate_per_s: rate,
            requests,
            max_step_tokens: 1 << 20,
            ..Load::default()
        };
        simulate(t, spec, &arch, &net, &s, &load).unwrap()
    };
    // Low load: one request at a time, the odd one waiting for a decode step in flight
    // (at most one step of the other request's, at its batch of 1).
    let idle = run(0.01, 50);
    let step = predict_inference(t, spec, &arch, &net, &s)
        .unwrap()
        .time_per_output_token_s;
    assert_eq!(spec.batch, 1);
    assert!(
        (idle.ttft_s.p50 / idle.idle_ttft_s - 1.0).abs() < 1e-9
            && idle.ttft_s.p99 > idle.idle_ttft_s
            && idle.ttft_s.p99 < idle.idle_ttft_s + 1.05 * step,
        "{:?} vs {} and a step of {step}",
        idle.ttft_s,
        idle.idle_ttft_s
    );
    // Swamped: every request arrives at once; throughput is the static batch's of the
    // largest batch held (the cap, 256, when the cache holds it).
    let swamped = run(1e9, 2048);
    let b = swamped.most_running;
    assert_eq!(b, 256, "{swamped:?}");
    let st = predict_inference(
        t,
        &stackflow::workload::inference::InferenceSpec { batch: b, ..*spec },
        &arch,
        &net,
        &s,
    )
    .unwrap();
    let static_rate = (b * spec.output_tokens) as f64
        / (st.time_to_first_token_s + (spec.output_tokens - 1) as f64 * st.time_per_output_token_s);
    let ratio = swamped.output_tokens_per_s / static_rate;
    assert!(
        (0.9..1.1).contains(&ratio),
        "{} vs {static_rate}: {ratio}",
        swamped.output_tokens_per_s
    );
    // Near and past capacity the tail grows; past it, with the length of the run.
    let capacity = swamped.requests_per_s;
    let half = run(0.5 * capacity, 2000);
    let near = run(0.95 * capacity, 2000);
    let over = run(1.5 * capacity, 2000);
    let longer = run(1.5 * capacity, 4000);
    assert!(
        near.ttft_s.p99 > 2.0 * half.ttft_s.p99,
        "{:?} {:?}",
        half.ttft_s,
        near.ttft_s
    );
    assert!(
        longer.ttft_s.p99 > 1.5 * over.ttft_s.p99,
        "{:?} {:?}",
        over.ttft_s,
        longer.ttft_s
    );
    // A cache too small for every admitted sequence to finish: the newest give way and are
    // recomputed; every request still completes.
    let tight = simulate(
        t,
        spec,
        &arch,
        &net,
        &s,
        &Load {
            rate_per_s: 1e9,
            requests: 500,
            memory_utilization: 0.2,
            ..Load::default()
        },
    )
    .unwrap();
    assert!(tight.preemptions > 0, "{tight:?}");
    assert!(tight.output_tokens_per_s > 0.0 && tight.end_to_end_s.p99.is_finite());
    // Seeded: the same run twice is the same.
    assert_eq!(run(0.5 * capacity, 500), run(0.5 * capacity, 500));
}

/// `serve`'s bad input: a block of 0 tokens, a rate of 0, a memory share above 1, a request
/// that does not fit the KV cache: exit 2 naming the flag or what does not fit.
#[test]
fn serve_refuses_bad_input_by_name() {
    let base = [
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
    ];
    for (extra, says) in [
        (
            &["--rate", "10", "--block-tokens", "0"][..],
            "--block-tokens 0",
        ),
        (&["--rate", "0"][..], "--rate 0"),
        (
            &["--rate", "10", "--memory-utilization", "1.5"][..],
            "--memory-utilization 1.5",
        ),
        (
            &["--rate", "10", "--memory-utilization", "0.15"][..],
            "KV blocks of 16; the devices hold 0",
        ),
    ] {
        let (code, _, err) = stackflow(&[&base[..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(says), "{says}: {err}");
    }
}

/// Goodput under an SLO: the highest rate whose p99 TTFT and TPOT keep their bounds; the
/// rate the bisection found above it, within 0.5%, breaks the binding one; bounds no rate keeps exit 3 naming the latency.
#[test]
fn goodput_is_the_highest_rate_within_the_slo() {
    use stackflow::distributed::load::{Arrivals, Deployment, Engine, Load, Slo};
    use stackflow::parallel::Strategy;
    let (w, arch, net) = llama2_7b_on_one_h100();
    let (t, spec) = w.serving().unwrap();
    let engine = Deployment::Colocated(
        Engine::new(
            t,
            spec.into(),
            &arch,
            &net,
            &Strategy::default(),
            &Load::default(),
        )
        .unwrap(),
    );
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    let slo = Slo {
        ttft_p99_s: 0.2,
        tpot_p99_s: 0.02,
    };
    let g = engine.goodput(&arrivals, &slo, 1000).unwrap().unwrap();
    assert!(g.at.ttft_s.p99 <= 0.2 && g.at.tpot_s.p99 <= 0.02, "{g:?}");
    assert!(g.requests_per_s > 0.1 * g.capacity_requests_per_s);
    assert!(g.requests_per_s < g.capacity_requests_per_s);
    // The bisection's bracket: the rate above it that broke the binding bound.
    let breaks_at = g.breaks_at_requests_per_s.unwrap();
    assert!(breaks_at > g.requests_per_s && breaks_at <= 1.005 * g.requests_per_s);
    let above = engine.run_at(&arrivals, breaks_at, 1000).unwrap();
    let broken = match g.binding.as_str() {
        "ttft" => above.ttft_s.p99 > 0.2,
        "tpot" => above.tpot_s.p99 > 0.02,
        other => panic!("{other}"),
    };
    assert!(
        broken,
        "{}: {:?} {:?}",
        g.binding, above.ttft_s, above.tpot_s
    );
    let (code, _, err) = stackflow(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
        "--rate",
        "10",
        "--requests",
        "200",
        "--slo-ttft-ms",
        "1",
        "--slo-tpot-ms",
        "20",
    ]);
    assert_eq!(code, 3, "{err}");
    let (code, out, _) = stackflow(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
        "--rate",
        "10",
        "--requests",
        "200",
        "--slo-ttft-ms",
        "1",
        "--slo-tpot-ms",
        "20",
        "--json",
    ]);
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["goodput"]["infeasible"]
            .as_str()
            .unwrap()
            .contains("p99 TTFT"),
        "{v}"
    );
}

/// workloads/llama2-7b-serve.yaml on one H100 of a DGX H100: the workload, the accelerator
/// and the one-device network.
fn llama2_7b_on_one_h100() -> (
    Workload,
    stackflow::generator::Architecture,
    stackflow::network::Network,
) {
    let w = Workload::load(Source::Disk, &root().join("workloads/llama2-7b-serve.yaml")).unwrap();
    let (arch, net) = dgx_h100(1);
    (w, arch, net)
}

/// `devices` GPUs of a DGX H100 (templates/dgx-h100.yaml): the accelerator and its network.
fn dgx_h100(
    devices: u64,
) -> (
    stackflow::generator::Architecture,
    stackflow::network::Network,
) {
    let system =
        stackflow::network::System::load(Source::Disk, &root().join("templates/dgx-h100.yaml"))
            .unwrap();
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, devices).unwrap();
    (arch, net)
}

/// A model served at `precision: fp8` runs as TensorRT-LLM's FP8 checkpoints do: FP8
/// products, weights and KV cache, and its tensor-parallel all-reduces on the products'
/// 16-bit outputs, so over 8 H100s (t8) a 2048-token prefill's 160 all-reduces cost what the
/// 16-bit model's do (33.5 MB each), while its weights and cache are half the 16-bit model's.
#[test]
fn fp8_serving_reduces_in_16_bits() {
    use stackflow::distributed::predict_inference;
    use stackflow::parallel::Strategy;
    let base = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml"))
        .unwrap()
        .replace(
            "inference: {batch: 1, prompt_tokens: 2048, output_tokens: 256}",
            "inference: {batch: 1, prompt_tokens: 2048, output_tokens: 1}",
        );
    assert!(base.contains("precision: fp8"));
    let (arch, net) = dgx_h100(8);
    let s = Strategy {
        tensor: 8,
        ..Strategy::default()
    };
    let predict = |text: &str| {
        let w = Workload::from_yaml("llama2-70b.yaml", text).unwrap();
        let (t, spec) = w.serving().unwrap();
        predict_inference(t, spec, &arch, &net, &s).unwrap()
    };
    let fp8 = predict(&base);
    let bf16 = predict(&base.replace("precision: fp8", "precision: bf16 #"));
    assert!(fp8.prefill_communication_s > 0.0);
    common::assert_close(
        "prefill all-reduces",
        fp8.prefill_communication_s,
        bf16.prefill_communication_s,
        1e-9,
    );
    common::assert_close("weights", fp8.weights_bytes, bf16.weights_bytes / 2.0, 1e-3);
    common::assert_close(
        "KV cache",
        fp8.kv_cache_bytes,
        bf16.kv_cache_bytes / 2.0,
        1e-9,
    );
    assert!(fp8.time_to_first_token_s < bf16.time_to_first_token_s);
}

/// Rotary positions (`positions: rotary`, LLaMA's RoPE): over a prompt every layer rotates
/// its queries and keys in a kernel of their own, reading and writing each once; a decode
/// step rotates its one token inside the attention kernel; learned positions add none; an
/// unknown encoding is refused naming the key.
#[test]
fn rotary_positions_rotate_queries_and_keys_over_a_prompt() {
    use stackflow::workload::inference::{decode_graph, prefill_graph};
    let text = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml")).unwrap();
    assert!(text.contains("positions: rotary"));
    let w = Workload::from_yaml("llama2-70b.yaml", &text).unwrap();
    let (t, spec) = w.serving().unwrap();
    let rotary = |g: &stackflow::workload::Graph| {
        g.kernels
            .iter()
            .filter(|k| k.name == "rotary embedding")
            .map(|k| match k.op {
                stackflow::workload::Op::Stream {
                    read_bytes,
                    write_bytes,
                    ..
                } => (k.count, read_bytes, write_bytes),
                _ => panic!("{k:?}"),
            })
            .collect::<Vec<_>>()
    };
    let prefill = rotary(&prefill_graph(t, spec));
    // 2048 tokens of 64 query heads and 8 key heads of 128 in FP8, in each of 80 layers.
    let qk = 2048.0 * (8192.0 + 1024.0);
    assert_eq!(prefill, vec![(80, qk, qk)]);
    assert!(rotary(&decode_graph(t, spec, 2048)).is_empty());
    let learned = Workload::from_yaml(
        "llama2-70b.yaml",
        &text.replace("positions: rotary", "positions: learned"),
    )
    .unwrap();
    let (t, spec) = learned.serving().unwrap();
    assert!(rotary(&prefill_graph(t, spec)).is_empty());
    let err = Workload::from_yaml(
        "llama2-70b.yaml",
        &text.replace("positions: rotary", "positions: alibi"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("llama2-70b.yaml") && err.contains("positions") && err.contains("rotary"),
        "{err}"
    );
}

/// A served mixture of experts (Mixtral-8x7B's shape, 8 experts, 2 per token, FP8) reads
/// the experts its tokens are routed to: one token's decode step streams the attention and
/// 2 of each layer's 8 experts, so its time follows those bytes, not all the weights; a
/// batch of 64 tokens reaches every expert (8 (1 - (3/4)^64) ~ 8) and reads them all.
#[test]
fn a_served_mixture_of_experts_reads_the_experts_its_tokens_reach() {
    let arch = h100();
    let served = |batch: u64| {
        let yaml = format!(
            "version: 1\nkind: transformer\nname: mixtral\nhidden: 4096\nlayers: 32\nheads: 32\n\
             kv_heads: 8\nffn_hidden: 14336\ngated_ffn: true\nsequence: 4096\nvocab: 32000\n\
             positions: rotary\nglobal_batch: 1\nprecision: fp8\n\
             moe: {{experts: 8, top_k: 2, capacity_factor: 1.25}}\n\
             inference: {{batch: {batch}, prompt_tokens: 512, output_tokens: 128}}\n"
        );
        let Workload::Transformer(w) = Workload::from_yaml("mixtral.yaml", &yaml).unwrap() else {
            unreachable!()
        };
        let spec = w.inference.unwrap();
        let p = Evaluator::new(&arch).predict_inference(&w, &spec, &arch.violations);
        (w, p)
    };
    let (w, one) = served(1);
    // Per layer: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096, 2 experts of
    // 3 x 4096 x 14336; the embedding and the output layer, 32000 x 4096 each; 1 byte each.
    let (h, ffn) = (4096.0, 14336.0);
    let attention = h * (h + 2.0 * 1024.0) + h * h;
    let expert = 3.0 * h * ffn;
    let held = 32.0 * (attention + 8.0 * expert + 2.0 * h) + 2.0 * 32000.0 * h;
    let read = held - 32.0 * 6.0 * expert;
    assert!(
        (w.parameters() / held - 1.0).abs() < 1e-3,
        "{}",
        w.parameters()
    );
    assert!(
        (one.decode_weights_bytes_per_step / read - 1.0).abs() < 1e-3,
        "{} of {}",
        one.decode_weights_bytes_per_step,
        one.weights_bytes
    );
    // The step streams its products' weights (all but the embedding table, of which it
    // looks up one row) at the products' achieved bandwidth, within launches, the KV cache
    // and the sampling: not the 3.6x more of every expert.
    let floor = (read - 32000.0 * h) / arch.achieved_product_bandwidth();
    assert!(
        one.time_per_output_token_s > floor && one.time_per_output_token_s < 1.15 * floor,
        "TPOT {} s, {} s to read {read} bytes",
        one.time_per_output_token_s,
        floor
    );
    // A served expert takes its routed tokens alone (no capacity padding): 2 rows at
    // batch 1, 16 each of 8 experts at batch 64.
    let (_, wide) = served(64);
    assert!((wide.decode_weights_bytes_per_step / held - 1.0).abs() < 1e-3);
    assert!(wide.time_per_output_token_s > 3.0 * one.time_per_output_token_s);
    let moe = w.moe.unwrap();
    assert_eq!(moe.routed(1.0, true), (2, 1));
    assert_eq!(moe.routed(64.0, true), (8, 16));
    // Training pads each expert to its capacity: 1.25 x 4096 x 2 / 8 = 1280 rows.
    assert_eq!(moe.routed(4096.0, false), (8, 1280));
}

/// What a deployment serves swamped is what it sustains: a long run of arrivals far faster
/// than it serves comes out at that rate, for a full engine (Llama-2-7B on one H100) as for
/// a short trace of varied lengths that never fills it (its one batch drains: the spread of
/// its lengths is not a rate).
#[test]
fn the_swamped_capacity_is_the_sustained_rate() {
    use stackflow::distributed::load::{Arrivals, Deployment, Engine, Load, Trace};
    use stackflow::parallel::Strategy;
    let (w, arch, net) = llama2_7b_on_one_h100();
    let (t, spec) = w.serving().unwrap();
    let poisson = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    let text = std::iter::once("arrival_s,prompt_tokens,output_tokens".to_string())
        .chain((0..20).map(|i| format!("{},128,{}", i as f64 * 0.1, 100 + i)))
        .collect::<Vec<_>>()
        .join("\n");
    let trace = Arrivals::Trace(Trace::parse("t.csv", &text).unwrap());
    for (arrivals, requests) in [(poisson, 4000), (trace, 20)] {
        let engine = Deployment::Colocated(
            Engine::new(
                t,
                arrivals.lengths(),
                &arch,
                &net,
                &Strategy::default(),
                &Load::default(),
            )
            .unwrap(),
        );
        let capacity = engine.capacity_requests_per_s(&arrivals).unwrap();
        let flooded = engine.run_at(&arrivals, 1e6, requests).unwrap();
        assert!(
            (capacity / flooded.requests_per_s - 1.0).abs() < 0.03,
            "{}: capacity {capacity} against {} requests/s flooded",
            arrivals.name(),
            flooded.requests_per_s
        );
    }
    // Chunked prefill on two t4 replicas of Llama-2-70B: requests sent at once complete in
    // waves of a batch, smeared over seconds; a window of whole batches counts whole waves
    // (one that ended inside the last wave's smear read 21.1 requests/s for 18.5).
    let (t, arrivals) = {
        let w = Workload::load(
            Source::Disk,
            &root().join("workloads/llama2-70b-serve.yaml"),
        )
        .unwrap();
        let Workload::Transformer(t) = w else {
            unreachable!()
        };
        let spec = t.inference.unwrap();
        let arrivals = Arrivals::Poisson {
            prompt_tokens: spec.prompt_tokens,
            output_tokens: spec.output_tokens,
            seed: 0,
        };
        (t, arrivals)
    };
    let (arch, net) = dgx_h100(8);
    let engine = Deployment::Colocated(
        Engine::new(
            &t,
            arrivals.lengths(),
            &arch,
            &net,
            &Strategy::parse("t4-d2").unwrap(),
            &Load {
                chunked_prefill: true,
                ..Load::default()
            },
        )
        .unwrap(),
    );
    let capacity = engine.capacity_requests_per_s(&arrivals).unwrap();
    let flooded = engine.run_at(&arrivals, 1e6, 4000).unwrap();
    assert!(
        (capacity / flooded.requests_per_s - 1.0).abs() < 0.03,
        "t4-d2 chunked: capacity {capacity} against {} requests/s flooded",
        flooded.requests_per_s
    );
}
