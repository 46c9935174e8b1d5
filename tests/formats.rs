//! Weight and KV-cache formats of a served model (issue 30, part 1): int8/int4 weight-only
//! quantization widened inside the products, FP8 weights with FP8 products, an FP8 or int8
//! KV cache.

mod common;

use common::{root, stackflow, Scratch};
use stackflow::config::Source;
use stackflow::perf::Evaluator;
use stackflow::workload::inference::{decode_graph, prefill_graph};
use stackflow::workload::Op;
use stackflow::workload::{Graph, Transformer, Workload};

/// Llama-2-7B served (workloads/llama2-7b-serve.yaml) with extra `inference:` keys.
fn served(extra: &str) -> Transformer {
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml")).unwrap();
    let text = text.replace(
        "inference: {batch: 1, prompt_tokens: 128, output_tokens: 128}",
        &format!("inference: {{batch: 1, prompt_tokens: 128, output_tokens: 128{extra}}}"),
    );
    match Workload::from_yaml("llama2-7b-serve.yaml", &text).unwrap() {
        Workload::Transformer(t) => t,
        _ => unreachable!(),
    }
}

fn h100() -> stackflow::generator::Architecture {
    stackflow::network::System::load(Source::Disk, &root().join("templates/dgx-h100.yaml"))
        .unwrap()
        .accelerator()
        .unwrap()
}

/// Main-memory bytes and time of every kernel of a graph (without launches: a decode step
/// replays as one captured graph).
fn dram(g: &Graph, ev: &mut Evaluator) -> (f64, f64) {
    g.kernels.iter().fold((0.0, 0.0), |(b, t), k| {
        let kt = ev.kernel(k);
        (
            b + kt.level_bytes.last().unwrap() * k.count as f64,
            t + (kt.time_s - kt.launch_s) * k.count as f64,
        )
    })
}

/// Batch-1 decode with int4 weights moves about a quarter of the 16-bit weights' bytes per
/// token (int8 about half): the traffic of every kernel of a decode step, weights and the
/// small rest; and its time follows.
#[test]
fn int4_decode_moves_a_quarter_of_the_bytes() {
    let arch = h100();
    let mut ev = Evaluator::new(&arch);
    let (w16, w8, w4) = (
        served(""),
        served(", weights: int8"),
        served(", weights: int4"),
    );
    let spec = *w16.inference.as_ref().unwrap();
    let step = |w: &Transformer, ev: &mut Evaluator| dram(&decode_graph(w, &spec, 192), ev);
    let (b16, t16) = step(&w16, &mut ev);
    let (b8, t8) = step(&w8, &mut ev);
    let (b4, t4) = step(&w4, &mut ev);
    // 6.74e9 weights, of which a decode step reads all but the token embedding's 0.13e9 (a
    // row at a time), in 16 bits.
    let weights = w16.parameters();
    assert!(
        b16 > 1.95 * weights && b16 < 2.02 * weights,
        "{b16} vs {weights}"
    );
    let (r8, r4) = (b8 / b16, b4 / b16);
    assert!((0.50..0.53).contains(&r8), "int8: {r8}");
    assert!((0.25..0.28).contains(&r4), "int4: {r4}");
    assert!(t4 < 0.35 * t16 && t8 < 0.6 * t16, "{t16} {t8} {t4}");
}

/// A weight-only product's time includes widening its weights: a 2048-token prefill's
/// feed-forward product with int4 weights computes longer than the 16-bit one by the
/// widening (one vector operation per weight per 128 rows), and is never faster on compute.
#[test]
fn weight_only_products_pay_for_widening() {
    let arch = h100();
    let mut ev = Evaluator::new(&arch);
    let spec = stackflow::workload::inference::InferenceSpec {
        batch: 1,
        prompt_tokens: 2048,
        output_tokens: 1,
    };
    let (w16, w4) = (served(""), served(", weights: int4"));
    let ffn = |w: &Transformer| {
        prefill_graph(w, &spec)
            .kernels
            .into_iter()
            .find(|k| k.weight_elements() == 4096 * 11008 * 2 || k.name.contains("up"))
            .expect("a feed-forward product")
    };
    let (k16, k4) = (ffn(&w16), ffn(&w4));
    assert!(matches!(k4.op, Op::Gemm { m: 2048, .. }), "{:?}", k4.op);
    assert_eq!(k4.weights, Some(stackflow::domain::StorageFormat::Int4));
    let (c16, c4) = (ev.kernel(&k16).compute_s, ev.kernel(&k4).compute_s);
    let elements = k4.weight_elements() as f64;
    let widen = elements * 1.0 * (2048.0f64 / 128.0) / ev.machine.vector_rate();
    assert!(
        ((c4 - c16) / widen - 1.0).abs() < 0.01,
        "{c16} + {widen} vs {c4}"
    );
}

/// The KV cache's format is its own: FP8 halves the cache a device holds and what a decode
/// step's attention reads from it, weights untouched; FP8 weights need FP8 products
/// (A100 has none: refused by name); an int4 cache and FP32 weights are refused.
#[test]
fn formats_are_independent_and_checked() {
    let (w16, kv8) = (served(""), served(", kv_cache: fp8"));
    let spec = *w16.inference.as_ref().unwrap();
    use stackflow::workload::inference::kv_cache_bytes;
    assert_eq!(
        kv_cache_bytes(&kv8, 1, 256) * 2.0,
        kv_cache_bytes(&w16, 1, 256)
    );
    let resident = |w: &Transformer| -> f64 {
        decode_graph(w, &spec, 4096)
            .kernels
            .iter()
            .map(|k| match k.op {
                Op::Fused { resident_bytes, .. } => resident_bytes * k.count as f64,
                _ => 0.0,
            })
            .sum()
    };
    assert!((resident(&kv8) * 2.0 / resident(&w16) - 1.0).abs() < 1e-12);
    assert_eq!(kv8.weights, None);
    let dir = Scratch::new("formats-bad");
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml")).unwrap();
    for (i, (extra, system, says)) in [
        (
            ", weights: fp8",
            "templates/dgx-a100.yaml",
            "inference.weights",
        ),
        (
            ", kv_cache: int4",
            "templates/dgx-h100.yaml",
            "inference.kv_cache = int4",
        ),
        (
            ", weights: fp32",
            "templates/dgx-h100.yaml",
            "inference.weights = fp32",
        ),
        (
            ", weights: int3",
            "templates/dgx-h100.yaml",
            "inference.weights",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        // "@fp32": the model in fp32 with narrower float weights.
        let (text, says) = match says.strip_prefix('@') {
            Some(p) => (
                text.replace("precision: fp16", &format!("precision: {p}")),
                "inference.weights = bf16: int4, int8 or fp8, or a precision as wide",
            ),
            None => (text.clone(), says),
        };
        let w = dir.write(
            &format!("bad{i}.yaml"),
            &text.replace(
                "output_tokens: 128}",
                &format!("output_tokens: 128{extra}}}"),
            ),
        );
        let (code, _, err) = stackflow(&[
            "predict",
            "--workload",
            &w,
            "--system",
            system,
            "--devices",
            "1",
        ]);
        assert_eq!(code, 2, "{extra}: {err}");
        assert!(err.contains(&w) && err.contains(says), "{says}: {err}");
    }
    // FP8 weights on H100: FP8 products, half the weights' bytes.
    let w = dir.write(
        "fp8.yaml",
        &text.replace("output_tokens: 128}", "output_tokens: 128, weights: fp8}"),
    );
    let (code, out, err) = stackflow(&[
        "predict",
        "--workload",
        &w,
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (_, base, _) = stackflow(&[
        "predict",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
        "--json",
    ]);
    let base: serde_json::Value = serde_json::from_str(&base).unwrap();
    let ratio = v["weights_bytes"].as_f64().unwrap() / base["weights_bytes"].as_f64().unwrap();
    assert!((ratio - 0.5).abs() < 1e-9, "{ratio}");
    assert!(v["time_per_output_token_s"].as_f64() < base["time_per_output_token_s"].as_f64());
}

/// H100's FP8 cap (`stack.fp8_compute_utilization`, 0.52) stretches FP8 products alone,
/// by 0.70 / 0.52 against the stack's cap for every precision; compute energy stays the
/// work's; a cap outside (0, 1] is refused naming the field.
#[test]
fn the_fp8_cap_stretches_fp8_products_alone() {
    use stackflow::perf::EnergyRates;
    use stackflow::workload::{Kernel, KernelClass, LayerType, Phase, Position, Split};
    let capped = h100();
    assert_eq!(capped.caps.fp8_compute_utilization, Some(0.52));
    let mut uncapped = capped.clone();
    uncapped.caps.fp8_compute_utilization = None;
    let gemm = |p: stackflow::domain::Precision| Kernel {
        name: "square".into(),
        class: KernelClass::Gemm,
        phase: Phase::Forward,
        precision: p,
        math: p,
        wire: p,
        weights: None,
        count: 1,
        op: Op::Gemm {
            batch: 1,
            m: 8192,
            k: 8192,
            n: 8192,
        },
        split: Split::Replicated,
        position: Position::Layer,
        layer: LayerType::Dense,
    };
    let (fp8, bf16) = (
        gemm(stackflow::domain::Precision::Fp8),
        gemm(stackflow::domain::Precision::Bf16),
    );
    let (a, b) = (
        Evaluator::new(&capped).kernel(&fp8),
        Evaluator::new(&uncapped).kernel(&fp8),
    );
    common::assert_close(
        "FP8 product stretched",
        a.compute_s / b.compute_s,
        0.70 / 0.52,
        1e-9,
    );
    let (c, d) = (
        Evaluator::new(&capped).kernel(&bf16),
        Evaluator::new(&uncapped).kernel(&bf16),
    );
    assert_eq!(c.compute_s, d.compute_s);
    let (ea, eb) = (
        EnergyRates::of(&capped).kernel_j(&a).0,
        EnergyRates::of(&uncapped).kernel_j(&b).0,
    );
    common::assert_close("FP8 compute energy", ea, eb, 1e-9);
    let text = std::fs::read_to_string(root().join("templates/gpu-h100.yaml")).unwrap();
    for bad in ["0", "1.5"] {
        let t = text.replace(
            "fp8_compute_utilization: 0.52",
            &format!("fp8_compute_utilization: {bad}"),
        );
        let e = stackflow::template::Template::from_yaml("gpu-h100.yaml", &t)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpu-h100.yaml") && e.contains("stack.fp8_compute_utilization"),
            "{e}"
        );
    }
}

/// The products' HBM cap (`stack.product_memory_utilization`, 0.62 on H100, fitted on NIM's
/// batch-1 decode step): a product streaming its weights from HBM takes 0.80 / 0.62 of the
/// time it takes at the streaming cap; a stream kernel keeps the streaming cap, and a
/// compute-bound product does not move; a cap outside (0, 1] is refused naming the field.
#[test]
fn the_product_cap_stretches_products_streaming_from_memory_alone() {
    use stackflow::workload::{Kernel, KernelClass, LayerType, Phase, Position, Split};
    let capped = h100();
    assert_eq!(capped.caps.product_memory_utilization, Some(0.62));
    assert_eq!(capped.caps.memory_utilization, Some(0.80));
    let mut uncapped = capped.clone();
    uncapped.caps.product_memory_utilization = None;
    let bf16 = stackflow::domain::Precision::Bf16;
    let kernel = |op: Op| Kernel {
        name: "k".into(),
        class: KernelClass::Gemm,
        phase: Phase::Forward,
        precision: bf16,
        math: bf16,
        wire: bf16,
        weights: None,
        count: 1,
        op,
        split: Split::Replicated,
        position: Position::Layer,
        layer: LayerType::Dense,
    };
    let time = |k: &Kernel| {
        let (a, b) = (
            Evaluator::new(&capped).kernel(k),
            Evaluator::new(&uncapped).kernel(k),
        );
        let dram = a.level_s.len() - 1;
        (a.level_s[dram] / b.level_s[dram], a.time_s / b.time_s)
    };
    // One token through a 8192 x 28672 weight: the weight crosses HBM once.
    let (dram, _) = time(&kernel(Op::Gemm {
        batch: 1,
        m: 1,
        k: 8192,
        n: 28672,
    }));
    common::assert_close("skinny product's HBM time", dram, 0.80 / 0.62, 1e-9);
    let (_, whole) = time(&kernel(Op::Gemm {
        batch: 1,
        m: 8192,
        k: 8192,
        n: 8192,
    }));
    assert_eq!(whole, 1.0, "a compute-bound product does not move");
    let (dram, _) = time(&kernel(Op::Stream {
        read_bytes: 1e9,
        write_bytes: 1e9,
        flops: 0.0,
    }));
    assert_eq!(dram, 1.0, "a stream keeps the streaming cap");
    let text = std::fs::read_to_string(root().join("templates/gpu-h100.yaml")).unwrap();
    for bad in ["0", "1.5", "-0.6"] {
        let t = text.replace(
            "product_memory_utilization: 0.62",
            &format!("product_memory_utilization: {bad}"),
        );
        assert_ne!(t, text);
        let e = stackflow::template::Template::from_yaml("gpu-h100.yaml", &t)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpu-h100.yaml") && e.contains("stack.product_memory_utilization"),
            "{e}"
        );
    }
}
