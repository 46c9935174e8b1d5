//! Distributed evaluation speed. Run with `cargo bench --bench distributed`.
//! - GPT-3 175B on 1024 A100s (`t8-p16-d8-mb1-i2-sp-rc=selective`, templates/dgx-a100.yaml)
//!   and Megatron 1T on 3072 (`t8-p64-d6-mb1-sp-rc=selective`), each with every mapping
//!   ordering tried;
//! - cold: a freshly built network with no memoised group shapes (one CLI prediction);
//! - warm: the network's group shapes and the kernel times already computed (a search over
//!   designs or strategies on one topology, which keeps its `distributed::Workspace`: kernel
//!   times, graphs, and each strategy's stage work and schedule end with free
//!   communication);
//! - evaluate: one mapping (the best ordering) priced, warm;
//! - search: `opt::search` over the full strategy space of GPT-3 175B on 1024 A100s from
//!   Megatron's strategy (top 10);
//! - DLRM-B on one Zion with its tables in the hosts' DDR (`templates/zion.yaml`, `d8`):
//!   placement and host pricing on every prediction, warm;
//! - trace: GPT-3 175B's iteration as a timeline (`predict --trace`), from its plan;
//! - per layer type: Megatron's GPT-3 strategy for every layer type priced part by part
//!   (`predict_layered`, warm), and the per-layer-type search of DLRM-A-Transformer on
//!   ZionEX from its best uniform strategy.

/// As the command line (`src/main.rs`): what a user runs is what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackflow::config::Source;
use stackflow::distributed::{
    evaluate_with, predict, predict_layered, predict_with, LayerStrategy, Plan,
};
use stackflow::network::System;
use stackflow::opt::search::{enumerate_from, search, Settings};
use stackflow::opt::Progress;
use stackflow::parallel::Axis;
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

fn bench(c: &mut Criterion) {
    let system = System::load(Source::Embedded, Path::new("templates/dgx-a100.yaml")).unwrap();
    let a100 = system.accelerator().unwrap();
    let mut g = c.benchmark_group("distributed");
    for (name, file, devices, strategy) in [
        (
            "gpt3-175b on 1024 a100",
            "workloads/gpt3-175b.yaml",
            1024,
            "t8-p16-d8-mb1-i2-sp-rc=selective",
        ),
        (
            "megatron-1t on 3072 a100",
            "workloads/megatron-1t.yaml",
            3072,
            "t8-p64-d6-mb1-sp-rc=selective",
        ),
    ] {
        let workload = Workload::load(Source::Embedded, Path::new(file)).unwrap();
        let net = system.network(&a100, devices).unwrap();
        let strategy = Strategy::parse(strategy).unwrap();
        g.bench_function(format!("predict {name} ({strategy}), cold network"), |b| {
            b.iter(|| {
                let net = net.fresh();
                predict(std::hint::black_box(&workload), &a100, &net, &strategy)
            })
        });
        let mut ev = stackflow::distributed::Workspace::new(&a100);
        g.bench_function(format!("predict {name} ({strategy}), warm"), |b| {
            b.iter(|| {
                let w = std::hint::black_box(&workload);
                predict_with(w, &a100, &net, &strategy, &mut ev)
            })
        });
        let best = predict(&workload, &a100, &net, &strategy).unwrap();
        let order: Vec<Axis> = best.mapping.order.clone();
        g.bench_function(format!("evaluate {name} ({strategy}), one mapping"), |b| {
            b.iter(|| {
                let w = std::hint::black_box(&workload);
                evaluate_with(w, &a100, &net, &strategy, &order, &mut ev)
            })
        });
        let types = workload.graph_with(strategy.recompute).layer_types();
        let parts = LayerStrategy::uniform(&types, strategy);
        g.bench_function(format!("predict {name} per layer type, warm"), |b| {
            b.iter(|| {
                let w = std::hint::black_box(&workload);
                predict_layered(w, &a100, &net, 8, &parts, &mut ev)
            })
        });
    }
    // DLRM-B on one Zion with its tables placed by the host (369 of 400 in DDR): the
    // placement (a graph built to size the room) and the hosts' pricing on every call.
    let zion = System::load(Source::Embedded, Path::new("templates/zion.yaml")).unwrap();
    let v100 = zion.accelerator().unwrap();
    let net = zion.network(&v100, 8).unwrap();
    let dlrm = Workload::load(Source::Embedded, Path::new("workloads/dlrm-b.yaml")).unwrap();
    let d8 = Strategy::parse("d8").unwrap();
    let mut ev = stackflow::distributed::Workspace::new(&v100);
    g.bench_function("predict dlrm-b on zion, tables in host memory, warm", |b| {
        b.iter(|| predict_with(std::hint::black_box(&dlrm), &v100, &net, &d8, &mut ev))
    });
    // The timeline of GPT-3 175B on 1024 A100s (`predict --trace`): 12,288 steps simulated
    // one by one and drawn with their collectives, from a planned strategy.
    let gpt3 = Workload::load(Source::Embedded, Path::new("workloads/gpt3-175b.yaml")).unwrap();
    let net = system.network(&a100, 1024).unwrap();
    let megatron = Strategy::parse("t8-p16-d8-mb1-i2-sp-rc=selective").unwrap();
    let plan = Plan::new(&gpt3, &a100, &net, &megatron).unwrap();
    g.bench_function("trace gpt3-175b on 1024 a100 (12,288 steps)", |b| {
        b.iter(|| std::hint::black_box(&plan).trace(&net))
    });
    g.finish();
    let mut g = c.benchmark_group("search");
    g.sample_size(10);
    let workload = Workload::load(Source::Embedded, Path::new("workloads/gpt3-175b.yaml")).unwrap();
    let net = system.network(&a100, 1024).unwrap();
    let base = Strategy::parse("t8-p16-d8-mb1-i2-sp-rc=selective").unwrap();
    g.bench_function("full search gpt3-175b on 1024 a100", |b| {
        b.iter(|| {
            let space = enumerate_from(&workload, 1024, 8, &base).unwrap();
            let none = Progress::none();
            search(
                &workload,
                &a100,
                &net,
                &space,
                Some(&base),
                &Settings::default(),
                &none,
            )
        })
    });
    let zionex = System::load(Source::Embedded, Path::new("templates/zionex.yaml")).unwrap();
    let z = zionex.accelerator().unwrap();
    let znet = zionex.network(&z, 128).unwrap();
    let dlrm = Workload::load(
        Source::Embedded,
        Path::new("workloads/dlrm-a-transformer.yaml"),
    )
    .unwrap();
    let start = Strategy::parse("t1-d128-mb128-z3-hs8").unwrap();
    g.bench_function("per-layer-type search dlrm-a-transformer on zionex", |b| {
        b.iter(|| {
            stackflow::opt::search::layered::search_layered(
                std::hint::black_box(&dlrm),
                &z,
                &znet,
                zionex.devices_per_node(),
                &[start],
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
