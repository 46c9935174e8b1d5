//! Optimizer speed. Run with `cargo bench --bench optimize`.
//! - a full S = 10 x T = 100 budget optimization of the embedded default (DeepFlow Sec. 9's
//!   LSTM on 512 nodes) under a fixed strategy, restarts in parallel, on a fresh problem;
//! - the full strategy enumeration for 512 devices on it;
//! - the README's main job, `stackflow optimize` on the embedded defaults: the three searches
//!   of DeepFlow Fig. 10 (strategy, budgets, both) from pure data parallelism.

/// As the command line (`src/main.rs`): what a user runs is what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use stackflow::config::Source;
use stackflow::network::System;
use stackflow::opt::budget::{optimize_budgets, Settings};
use stackflow::opt::problem::{feasible_set, layout};
use stackflow::opt::search::{self, enumerate, search};
use stackflow::opt::{co_optimize, BudgetProblem};
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

fn bench(c: &mut Criterion) {
    let system = System::load(Source::Embedded, Path::new("templates/deepflow-sec9.yaml")).unwrap();
    let design = system.design().unwrap();
    let lstm = Workload::load(Source::Embedded, Path::new("workloads/lstm-sec9.yaml")).unwrap();
    let set = feasible_set(&layout(&design), None).unwrap();
    let strategy = Strategy::parse("CR-16-d32").unwrap();
    let bar = stackflow::opt::Progress::none();
    let mut g = c.benchmark_group("optimize");
    g.sample_size(10);
    // A fresh problem each time (built outside the timing): a problem remembers the
    // objectives it computed.
    g.bench_function("budgets S=10 x T=100, lstm-sec9 on 512 nodes", |b| {
        b.iter_batched(
            || {
                let (design, set) = (design.clone(), set.clone());
                BudgetProblem::new(system.clone(), design, 512, lstm.clone(), strategy, set)
                    .unwrap()
            },
            |problem| optimize_budgets(&problem, &Settings::default(), &bar).unwrap(),
            BatchSize::PerIteration,
        )
    });
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, 512).unwrap();
    g.bench_function("strategy enumeration, lstm-sec9 on 512 nodes", |b| {
        b.iter(|| {
            let space = enumerate(&lstm, 512).unwrap();
            search(
                &lstm,
                &arch,
                &net,
                &space,
                None,
                &search::Settings::default(),
                &bar,
            )
        })
    });
    let base = stackflow::opt::search::baseline(&lstm, &arch, &net, 512).unwrap();
    g.bench_function(
        "default optimize (co-optimization), lstm-sec9 on 512 nodes",
        |b| {
            b.iter(|| {
                let mut problem = BudgetProblem::new(
                    system.clone(),
                    system.design().unwrap(),
                    512,
                    lstm.clone(),
                    base,
                    feasible_set(&layout(&system.design().unwrap()), None).unwrap(),
                )
                .unwrap();
                co_optimize(&mut problem, &Settings::default(), &bar).unwrap()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
