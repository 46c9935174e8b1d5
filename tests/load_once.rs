//! Load once, evaluate pure: once a system, a design and a workload are loaded, predicting,
//! evaluating a budget split and running optimizer steps read no file. Its own test binary,
//! so that no other test's reads share the process-wide counter.

use std::path::Path;

use stackflow::config::{reads, Source};
use stackflow::distributed::predict;
use stackflow::network::System;
use stackflow::opt::budget::{optimize_budgets, Settings};
use stackflow::opt::problem::{feasible_set, layout};
use stackflow::opt::{BudgetProblem, Progress};
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

#[test]
fn evaluations_and_optimizer_steps_read_no_file() {
    // DGX A100's InfiniBand comes from the technology library: resolved at load.
    let system = System::load(Source::Embedded, Path::new("templates/dgx-a100.yaml")).unwrap();
    let design = system.design().unwrap();
    let gpt3 = Workload::load(Source::Embedded, Path::new("workloads/gpt3-175b.yaml")).unwrap();
    let strategy = Strategy::parse("t8-p8-d16-mb1-i2-sp-rc=selective").unwrap();
    let set = feasible_set(&layout(&design), None).unwrap();
    let before = reads();
    let arch = stackflow::generate(&design);
    let net = system.network(&arch, 1024).unwrap();
    let p = predict(&gpt3, &arch, &net, &strategy).unwrap();
    assert!(p.time_per_iteration_s > 0.0);
    let problem = BudgetProblem::new(system, design, 1024, gpt3, strategy, set).unwrap();
    let start = problem.initial();
    assert!(problem.evaluate(&start).time_per_iteration_s.is_finite());
    let settings = Settings {
        restarts: 2,
        steps: 2,
        ..Settings::default()
    };
    optimize_budgets(&problem, &settings, &Progress::none()).unwrap();
    assert_eq!(
        reads(),
        before,
        "files were read while evaluating and optimizing"
    );
    // The counter does count reads.
    Source::Embedded
        .read(Path::new("templates/dgx-a100.yaml"))
        .unwrap();
    assert_eq!(reads(), before + 1);
}
