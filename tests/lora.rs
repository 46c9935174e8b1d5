//! LoRA (issue 30, part 3): adapters fine-tuned beside frozen base weights, and served
//! many to a batch.

mod common;

use common::{assert_close, root, stackflow, Scratch};
use stackflow::config::Source;
use stackflow::distributed::{predict, predict_inference};
use stackflow::network::System;
use stackflow::parallel::Strategy;
use stackflow::perf::Evaluator;
use stackflow::workload::inference::{decode_graph, InferenceSpec};
use stackflow::workload::{Graph, Phase, Position, Transformer, Workload};

fn text(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap()
}

fn transformer(w: &Workload) -> &Transformer {
    match w {
        Workload::Transformer(t) => t,
        _ => unreachable!(),
    }
}

/// workloads/llama2-70b-lora.yaml, and the same model pre-trained (no `lora:`).
fn seventy_b() -> (Workload, Workload) {
    let lora = text("workloads/llama2-70b-lora.yaml");
    let full = lora.split("lora:").next().unwrap().to_string();
    (
        Workload::from_yaml("llama2-70b-lora.yaml", &lora).unwrap(),
        Workload::from_yaml("full.yaml", &full).unwrap(),
    )
}

/// Rank-16 adapters on Llama-2-70B's four products per layer (h 8192, q 8192, kv 1024,
/// gated feed-forward 28672): r (in + out) each.
const RANK: f64 = 16.0;
const PER_LAYER: [(f64, f64); 4] = [
    (8192.0, 8192.0 + 2.0 * 1024.0), // linear_qkv
    (8192.0, 8192.0),                // linear_proj
    (8192.0, 2.0 * 28672.0),         // linear_fc1 (gate and up)
    (28672.0, 8192.0),               // linear_fc2
];

fn adapters() -> f64 {
    80.0 * PER_LAYER.iter().map(|(i, o)| RANK * (i + o)).sum::<f64>()
}

/// The Must-show: LoRA fine-tuning of a 70B model keeps gradients and optimizer state for
/// the adapters alone, on one device and on every device of a split.
#[test]
fn seventy_b_lora_trains_the_adapters_alone() {
    let (lora, full) = seventy_b();
    let (g, f) = (lora.graph(), full.graph());
    let a = adapters();
    println!(
        "adapters {a:.4e} parameters of {:.4e} ({:.3}%)",
        g.parameters,
        100.0 * a / g.parameters
    );
    assert_close("adapter parameters", g.adapter_parameters, a, 1e-12);
    assert_close("held parameters", g.parameters, f.parameters + a, 1e-12);
    // BF16 gradients; Adam's FP32 master copy and two moments.
    assert_close("gradients", g.memory.gradients_bytes, 2.0 * a, 1e-9);
    assert_close(
        "optimizer state",
        g.memory.optimizer_state_bytes,
        12.0 * a,
        1e-9,
    );
    assert_close(
        "weights",
        g.memory.weights_bytes,
        2.0 * (f.parameters + a),
        1e-12,
    );
    // The update reads and writes the adapters' state alone.
    let update = |g: &Graph| -> f64 {
        g.kernels
            .iter()
            .filter(|k| k.phase == Phase::Update)
            .map(|k| k.flops())
            .sum()
    };
    assert_close(
        "update work",
        update(&g) / update(&f),
        a / f.parameters,
        1e-9,
    );

    // On 64 H100s (t8-p4-d2): each device trains its stage's 20 layers' adapters, split by
    // the 8 tensor ranks except the thin A beside column-parallel products (qkv, fc1) and B
    // beside row-parallel ones (proj, fc2), which every rank holds whole.
    let sys = System::load(Source::Disk, &root().join("templates/dgx-h100.yaml")).unwrap();
    let arch = sys.accelerator().unwrap();
    let net = sys.network(&arch, 64).unwrap();
    let s = Strategy::parse("t8-p4-d2-mb1-sp").unwrap();
    let (p, q) = (
        predict(&lora, &arch, &net, &s).unwrap(),
        predict(&full, &arch, &net, &s).unwrap(),
    );
    let whole: f64 = RANK * (8192.0 + 8192.0 + 8192.0 + 8192.0);
    let per_layer: f64 = PER_LAYER.iter().map(|(i, o)| RANK * (i + o)).sum();
    let trained = 20.0 * ((per_layer - whole) / 8.0 + whole);
    assert_close(
        "gradients per device",
        p.gradients_bytes,
        2.0 * trained,
        1e-9,
    );
    assert_close(
        "optimizer state per device",
        p.optimizer_state_bytes,
        12.0 * trained,
        1e-9,
    );
    assert!(p.feasible, "{:?}", p.violations);
    assert!(p.weights_bytes > q.weights_bytes);
    assert!(p.optimizer_state_bytes < 0.01 * q.optimizer_state_bytes);
    // The gradient all-reduce carries the adapters' gradients alone.
    let sync = |p: &stackflow::distributed::DistPrediction| {
        p.communication
            .iter()
            .find(|c| c.name == "gradient sync")
            .map_or(0.0, |c| c.bytes)
    };
    println!(
        "gradient sync {:.3e} B against {:.3e} B pre-training; iteration {:.3} s against {:.3} s",
        sync(&p),
        sync(&q),
        p.time_per_iteration_s,
        q.time_per_iteration_s
    );
    assert!(sync(&p) > 0.0 && sync(&p) < 0.01 * sync(&q));
    // No weight gradient of a base product: the compute falls toward two thirds (the
    // adapters' thin, memory-bound products add some back); the tensor-parallel
    // collectives of forward and input gradients stay.
    let ratio = p.compute_s / q.compute_s;
    println!("compute {ratio:.3} of pre-training's");
    assert!((2.0 / 3.0..0.85).contains(&ratio), "{ratio}");
    assert!(p.time_per_iteration_s < q.time_per_iteration_s);
}

/// The graph: every layer still propagates input gradients (down to the first adapter),
/// no base weight has a gradient, the embedding has none, and the adapters' products are
/// the closed forms.
#[test]
fn lora_graph_keeps_input_gradients_and_drops_base_weight_gradients() {
    let (lora, full) = seventy_b();
    let (g, f) = (lora.graph(), full.graph());
    let weight_grads: Vec<&str> = g
        .kernels
        .iter()
        .filter(|k| k.phase == Phase::BackwardWeight)
        .map(|k| k.name.as_str())
        .collect();
    assert!(!weight_grads.is_empty());
    for name in &weight_grads {
        assert!(name.contains("lora"), "a base weight gradient: {name}");
    }
    assert!(!g
        .kernels
        .iter()
        .any(|k| k.position == Position::Head && k.phase != Phase::Forward));
    // Every base product's input gradient, in every layer.
    for name in [
        "qkv projection dX",
        "attention output dX",
        "mlp up dX",
        "mlp down dX",
    ] {
        let k = g.kernels.iter().find(|k| k.name == name).unwrap();
        assert_eq!(k.count, 80, "{name}");
    }
    // Forward products: the base's plus 2 r (in + out) per token per adapter.
    let forward = |g: &Graph| -> f64 {
        g.kernels
            .iter()
            .filter(|k| k.phase == Phase::Forward && k.is_matmul())
            .map(|k| k.flops() * k.count as f64)
            .sum()
    };
    let tokens = 32.0 * 4096.0;
    assert_close(
        "adapter forward FLOPs",
        forward(&g) - forward(&f),
        2.0 * tokens * adapters(),
        1e-9,
    );
    // Backward: the base's input gradients (half its backward) plus the adapters' four
    // products; weight gradients of the adapters equal their forward.
    let backward = |g: &Graph, phase: Phase| -> f64 {
        g.kernels
            .iter()
            .filter(|k| k.phase == phase && k.is_matmul())
            .map(|k| k.flops() * k.count as f64)
            .sum()
    };
    assert_close(
        "adapter weight gradients",
        backward(&g, Phase::BackwardWeight),
        2.0 * tokens * adapters(),
        1e-9,
    );
    assert_close(
        "input gradients",
        backward(&g, Phase::BackwardInput),
        backward(&f, Phase::BackwardInput) + 2.0 * tokens * adapters(),
        1e-9,
    );
    // Frozen products keep no input for a weight gradient: fewer activations kept.
    assert!(g.memory.activations_bytes < f.memory.activations_bytes);
}

/// Serving many adapters: one batched product per adapter matrix, each adapter's weights
/// read once per step, so a decode step's traffic grows by the extra adapters' bytes.
#[test]
fn serving_many_adapters_reads_each_once_per_step() {
    let base = text("workloads/llama2-70b-decode.yaml").replace("batch: 1,", "batch: 16,");
    let with = |n: u64| {
        let t = format!(
            "{base}lora: {{rank: 16, targets: [q_proj, k_proj, v_proj, o_proj], adapters: {n}}}\n"
        );
        Workload::from_yaml("served.yaml", &t).unwrap()
    };
    let (one, sixteen) = (with(1), with(16));
    let (w1, w16) = (transformer(&one), transformer(&sixteen));
    let spec = *w1.inference.as_ref().unwrap();
    assert_eq!(spec.batch, 16);
    // FP8 model: adapters stored at 1 byte; q, k, v and o each r (in + out), 80 layers.
    let per_adapter = 80.0 * 16.0 * ((8192.0 + 8192.0) + 2.0 * (8192.0 + 1024.0) + 16384.0);
    let sys = System::load(Source::Disk, &root().join("templates/dgx-h100.yaml")).unwrap();
    let arch = sys.accelerator().unwrap();
    let mut ev = Evaluator::new(&arch);
    let dram = |g: &Graph, ev: &mut Evaluator| -> f64 {
        g.kernels
            .iter()
            .map(|k| ev.kernel(k).level_bytes.last().unwrap() * k.count as f64)
            .sum()
    };
    let (d1, d16) = (
        dram(&decode_graph(w1, &spec, 2048), &mut ev),
        dram(&decode_graph(w16, &spec, 2048), &mut ev),
    );
    println!(
        "decode step main memory: {d1:.4e} B with one adapter, {d16:.4e} B with 16 (adapter {per_adapter:.3e} B)"
    );
    assert_close("15 more adapters read", d16 - d1, 15.0 * per_adapter, 0.05);
    // Their weights are held beside the model's: on each of 2 tensor ranks, the three A
    // beside the column-parallel QKV product and the B beside the row-parallel output
    // whole, the other matrices halved.
    let net = sys.network(&arch, 2).unwrap();
    let s = Strategy::parse("t2").unwrap();
    let (p1, p16) = (
        predict_inference(w1, &spec, &arch, &net, &s).unwrap(),
        predict_inference(w16, &spec, &arch, &net, &s).unwrap(),
    );
    let whole = 16.0 * (3.0 * 8192.0 + 8192.0);
    let split = 16.0 * (8192.0 + 2.0 * 1024.0 + 8192.0);
    let per_device = 80.0 * (whole + split / 2.0);
    assert_close(
        "adapter weights per device",
        p16.weights_bytes - p1.weights_bytes,
        15.0 * per_device,
        1e-9,
    );
    assert!(p16.time_per_output_token_s > p1.time_per_output_token_s);
    // A batch of one request reads one adapter, however many the engine serves.
    let single = InferenceSpec { batch: 1, ..spec };
    let (g1, g16) = (
        decode_graph(w1, &single, 2048),
        decode_graph(w16, &single, 2048),
    );
    assert_close(
        "one request, one adapter",
        dram(&g16, &mut ev),
        dram(&g1, &mut ev),
        1e-9,
    );
    // Under int4 weight-only quantization the adapters stay in precision (FP8: 1 byte).
    let int4 = |n: u64| {
        let t = format!(
            "{}lora: {{rank: 16, targets: [q_proj, k_proj, v_proj, o_proj], adapters: {n}}}\n",
            base.replace("output_tokens: 256}", "output_tokens: 256, weights: int4}")
        );
        Workload::from_yaml("int4.yaml", &t).unwrap()
    };
    let (q1, q16) = (int4(1), int4(16));
    let (m1, m16) = (
        predict_inference(transformer(&q1), &spec, &arch, &net, &s).unwrap(),
        predict_inference(transformer(&q16), &spec, &arch, &net, &s).unwrap(),
    );
    assert_close(
        "int4: adapter weights per device",
        m16.weights_bytes - m1.weights_bytes,
        15.0 * per_device,
        1e-9,
    );
}

/// Bad input: exit 2 naming the file, the field, the value and what was expected.
#[test]
fn bad_lora_is_refused() {
    let scratch = Scratch::new("lora-bad");
    let base = text("workloads/llama2-70b.yaml");
    let cases: [(&str, &str); 10] = [
        (
            "lora: {rank: 8193, targets: [linear_proj]}",
            "lora.rank = 8193: at most 8192",
        ),
        ("lora: {rank: 16, targets: [k_proj]}\n", ""),
        (
            "lora: {rank: 1025, targets: [k_proj]}",
            "lora.rank = 1025: at most 1024 (k_proj is 8192 x 1024",
        ),
        (
            "lora: {rank: 16, targets: [q_proj, wq]}",
            "lora.targets[1] = wq: one of linear_qkv, q_proj",
        ),
        (
            "lora: {rank: 16, targets: [linear_qkv, v_proj]}",
            "lora.targets[1] = v_proj: a projection not already adapted (by linear_qkv)",
        ),
        (
            "lora: {rank: 16, targets: [o_proj, linear_proj]}",
            "lora.targets[1] = linear_proj: a projection not already adapted (by o_proj)",
        ),
        ("lora: {rank: 0, targets: [q_proj]}", "lora.rank = 0"),
        (
            "lora: {rank: 16, targets: [q_proj], adapters: 4}",
            "lora.adapters = 4: 1 in training",
        ),
        (
            "lora: {rank: 16, targets: []}",
            "lora.targets = []: at least one projection",
        ),
        (
            "lora: {rank: 16, targets: [q_proj]}\nfine_tuning: {trainable_layers: 8}",
            "fine_tuning.trainable_layers = 8: no `fine_tuning:` beside `lora:`",
        ),
    ];
    for (extra, expected) in cases {
        let path = scratch.write("bad.yaml", &format!("{base}{extra}\n"));
        let (code, _, err) = stackflow(&[
            "predict",
            "--workload",
            &path,
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "8",
        ]);
        if expected.is_empty() {
            assert_eq!(code, 0, "{extra}: {err}");
            continue;
        }
        assert_eq!(code, 2, "{extra}: {err}");
        assert!(err.contains("bad.yaml"), "{err}");
        assert!(err.contains(expected), "{extra}\n{err}");
    }
    // Adapters on a mixture of experts' feed-forward, and gate_proj without a gate.
    let moe = text("workloads/llm-moe.yaml");
    let e = Workload::from_yaml(
        "moe.yaml",
        &format!("{moe}lora: {{rank: 8, targets: [q_proj, linear_fc2]}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("lora.targets[1] = linear_fc2"), "{e}");
    let gpt = text("workloads/gpt3-175b.yaml");
    let e = Workload::from_yaml(
        "gpt.yaml",
        &format!("{gpt}lora: {{rank: 8, targets: [gate_proj]}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("gate_proj only on a gated feed-forward"), "{e}");
    // More adapters than requests in a batch.
    let served = text("workloads/llama2-70b-decode.yaml");
    let e = Workload::from_yaml(
        "served.yaml",
        &format!("{served}lora: {{rank: 8, targets: [q_proj], adapters: 2}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("lora.adapters = 2: 1 to 1: at most one adapter per request"),
        "{e}"
    );
    // Parallel blocks (attention and feed-forward from one input).
    let palm = text("workloads/palm-540b.yaml");
    let e = Workload::from_yaml(
        "palm.yaml",
        &format!("{palm}lora: {{rank: 8, targets: [q_proj]}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("a model without parallel blocks"), "{e}");
}
