//! Model time of the architecture generator on every shipped budget (files parsed once,
//! outside the timed loop). Run with `cargo bench --bench generate`.

/// As the command line (`src/main.rs`): what a user runs is what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackflow::config::{Source, SHIPPED};
use stackflow::design::{Design, DesignFiles};
use stackflow::generator::generate;

fn bench(c: &mut Criterion) {
    for (name, _) in SHIPPED.iter().filter(|(n, _)| n.starts_with("budgets/")) {
        let design = Design::load(DesignFiles {
            source: Source::Embedded,
            budget: Path::new(name),
            template: None,
            tech: None,
        })
        .expect("shipped budgets load");
        c.bench_function(&format!("generate {name}"), |b| {
            b.iter(|| generate(std::hint::black_box(&design)))
        });
    }
    c.bench_function("load + generate budgets/h100.yaml (embedded)", |b| {
        b.iter(|| {
            let d = Design::load(DesignFiles {
                source: Source::Embedded,
                budget: Path::new("budgets/h100.yaml"),
                template: None,
                tech: None,
            })
            .unwrap();
            generate(&d)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
