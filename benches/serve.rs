//! Model time of serving under load (`src/distributed/load.rs`) and its search. Run with
//! `cargo bench --bench serve`.

/// As the command line (`src/main.rs`): what a user runs is what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackflow::config::Source;
use stackflow::distributed::load::{Arrivals, Deployment, Engine, Load, Slo};
use stackflow::network::System;
use stackflow::opt::search::serving::{search_serving, ServingSettings};
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

fn bench(c: &mut Criterion) {
    let system = System::load(Source::Embedded, Path::new("templates/dgx-h100.yaml"))
        .expect("shipped system");
    let arch = system.accelerator().expect("shipped accelerator");
    let seven = Workload::load(
        Source::Embedded,
        Path::new("workloads/llama2-7b-serve.yaml"),
    )
    .expect("shipped workload");
    let (t, spec) = seven.serving().expect("served");
    let net = system.network(&arch, 1).expect("one device");
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    let s = Strategy::default();
    c.bench_function("engine: price Llama-2-7B on one H100", |b| {
        b.iter(|| Engine::new(t, spec.into(), &arch, &net, &s, &Load::default()).unwrap())
    });
    let d = Deployment::Colocated(
        Engine::new(t, spec.into(), &arch, &net, &s, &Load::default()).unwrap(),
    );
    c.bench_function("run: 1,000 Poisson requests at 50/s, Llama-2-7B", |b| {
        b.iter(|| d.run_at(&arrivals, 50.0, 1000).unwrap())
    });
    let slo = Slo {
        ttft_p99_s: 0.2,
        tpot_p99_s: 0.02,
    };
    c.bench_function("goodput: 1,000 requests, Llama-2-7B, 200 ms / 20 ms", |b| {
        b.iter(|| d.goodput(&arrivals, &slo, 1000).unwrap().unwrap())
    });
    let seventy = Workload::load(
        Source::Embedded,
        Path::new("workloads/llama2-70b-serve.yaml"),
    )
    .expect("shipped workload");
    let (t70, spec70) = seventy.serving().expect("served");
    let arrivals70 = Arrivals::Poisson {
        prompt_tokens: spec70.prompt_tokens,
        output_tokens: spec70.output_tokens,
        seed: 0,
    };
    let settings = ServingSettings {
        slo: Slo {
            ttft_p99_s: 1.0,
            tpot_p99_s: 0.05,
        },
        requests: 1000,
        top: 10,
        disaggregate: true,
        chunked: true,
        prune: true,
    };
    let mut group = c.benchmark_group("search");
    group.sample_size(10);
    group.bench_function("serving search: Llama-2-70B on 8 H100s", |b| {
        b.iter(|| {
            search_serving(
                t70,
                &arrivals70,
                &system,
                &arch,
                8,
                &Load::default(),
                &settings,
            )
            .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
