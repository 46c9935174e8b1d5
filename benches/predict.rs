//! Model time of the single-device performance model. Run with `cargo bench --bench predict`.
//! Every timed loop starts from an empty GEMM cache, so it measures the tiling search, not
//! cache hits.

/// As the command line (`src/main.rs`): what a user runs is what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackflow::config::Source;
use stackflow::design::{Design, DesignFiles};
use stackflow::domain::Precision;
use stackflow::generator::{generate, Architecture};
use stackflow::perf::Evaluator;
use stackflow::workload::{Gemm, Workload};

fn arch(budget: &str) -> Architecture {
    let design = Design::load(DesignFiles {
        source: Source::Embedded,
        budget: Path::new(budget),
        template: None,
        tech: None,
    })
    .expect("shipped budgets load");
    generate(&design)
}

fn workload(file: &str, edit: impl Fn(String) -> String) -> Workload {
    let text = Source::Embedded
        .read(Path::new(file))
        .expect("shipped workload");
    Workload::from_yaml(file, &edit(text)).expect("shipped workload parses")
}

fn bench(c: &mut Criterion) {
    let h100 = arch("budgets/h100.yaml");
    let v100 = arch("budgets/v100.yaml");
    let mut ev = Evaluator::new(&h100);
    for (m, k, n) in [(8192, 8192, 8192), (2048, 13312, 2048), (524288, 128, 8)] {
        let kernel = Workload::Gemm(Gemm {
            m,
            k,
            n,
            precision: Precision::Bf16,
        })
        .graph()
        .kernels[0]
            .clone();
        c.bench_function(&format!("gemm {m}x{k}x{n} on h100 (uncached)"), |b| {
            b.iter(|| {
                ev.clear_cache();
                ev.kernel(std::hint::black_box(&kernel))
            })
        });
    }
    // A design whose L2 nearly binds (DeepFlow's O1 V100): the search cannot stop early.
    let o1 = generate(
        &Design::load(DesignFiles {
            source: Source::Disk,
            budget: Path::new("tests/oracle/o1-budget.yaml"),
            template: None,
            tech: None,
        })
        .expect("oracle budget loads"),
    );
    let mut ev_o1 = Evaluator::new(&o1);
    let mut o1_tech = o1.clone();
    // Quarter the L2 bandwidth so that L2 binds outright.
    o1_tech.on_chip[2].bandwidth_bytes_per_s /= 4.0;
    let mut ev_l2 = Evaluator::new(&o1_tech);
    let kernel = Workload::Gemm(Gemm {
        m: 4096,
        k: 4096,
        n: 4096,
        precision: Precision::Fp16,
    })
    .graph()
    .kernels[0]
        .clone();
    c.bench_function("gemm 4096^3 on o1 v100 (uncached)", |b| {
        b.iter(|| {
            ev_o1.clear_cache();
            ev_o1.kernel(std::hint::black_box(&kernel))
        })
    });
    c.bench_function("gemm 4096^3 on o1 v100 with L2 bound (uncached)", |b| {
        b.iter(|| {
            ev_l2.clear_cache();
            ev_l2.kernel(std::hint::black_box(&kernel))
        })
    });
    let lstm = workload("workloads/lstm-o1.yaml", |t| t).graph();
    let mut ev = Evaluator::new(&v100);
    c.bench_function("predict lstm-o1 on v100 (cold cache)", |b| {
        b.iter(|| {
            ev.clear_cache();
            ev.predict(std::hint::black_box(&lstm), &[])
        })
    });
    let layer = workload("workloads/gpt3-175b.yaml", |t| {
        t.replace("layers: 96 ", "layers: 1 ")
    })
    .graph();
    let mut ev = Evaluator::new(&h100);
    c.bench_function("predict one gpt3-175b layer on h100 (cold cache)", |b| {
        b.iter(|| {
            ev.clear_cache();
            ev.predict(std::hint::black_box(&layer), &[])
        })
    });
    let full = workload("workloads/gpt3-175b.yaml", |t| t).graph();
    c.bench_function("predict gpt3-175b (96 layers) on h100 (cold cache)", |b| {
        b.iter(|| {
            ev.clear_cache();
            ev.predict(std::hint::black_box(&full), &[])
        })
    });
    // Distributed: GPT-3 175B on 1024 A100s, tensor x pipeline x data = 8 x 8 x 16, every
    // mapping ordering tried, interleaved 1F1B schedule simulated.
    let system = stackflow::network::System::load(
        Source::Disk,
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("templates/dgx-a100.yaml"),
    )
    .unwrap();
    let a100 = system.accelerator().unwrap();
    let net = system.network(&a100, 1024).unwrap();
    let gpt3 = workload("workloads/gpt3-175b.yaml", |t| t);
    let strategy = stackflow::parallel::Strategy::parse("t8-p8-d16-mb1-i2").unwrap();
    // Cold: a network with no group shapes yet, so every group set is routed (as in one
    // CLI prediction).
    c.bench_function(
        "predict gpt3-175b on 1024 a100 (t8-p8-d16, 6 mappings, cold network)",
        |b| {
            b.iter(|| {
                let net = net.fresh();
                stackflow::distributed::predict(std::hint::black_box(&gpt3), &a100, &net, &strategy)
            })
        },
    );
    // Warm: the network's group shapes already computed (a search over designs or
    // strategies on one topology).
    c.bench_function(
        "predict gpt3-175b on 1024 a100 (t8-p8-d16, 6 mappings, warm network)",
        |b| {
            b.iter(|| {
                stackflow::distributed::predict(std::hint::black_box(&gpt3), &a100, &net, &strategy)
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
