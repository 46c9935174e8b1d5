//! Distributed evaluation speed. Run with `cargo bench --bench distributed`.
//! - GPT-3 175B on 1024 A100s (`t8-p16-d8-mb1-i2-sp-rc=selective`, templates/dgx-a100.yaml)
//!   and Megatron 1T on 3072 (`t8-p64-d6-mb1-sp-rc=selective`), each with every mapping
//!   ordering tried;
//! - cold: a freshly built network with no memoised group shapes (one CLI prediction);
//! - warm: the network's group shapes already computed (a search over designs or strategies
//!   on one topology).

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackflow::config::Source;
use stackflow::distributed::predict;
use stackflow::network::System;
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
        g.bench_function(format!("predict {name} ({strategy}), warm network"), |b| {
            b.iter(|| predict(std::hint::black_box(&workload), &a100, &net, &strategy))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
