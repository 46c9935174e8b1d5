//! Search and optimization: the projected-gradient solver on problems with a known optimum,
//! the projection's properties, determinism, the embedded default and strategy search.

mod common;

use std::path::Path;

use argmin::core::observers::{Observe, ObserverMode};
use argmin::core::{CostFunction, Error, Executor, Gradient, IterState, State, KV};
use common::{root, stackflow, Scratch};
use proptest::prelude::*;
use stackflow::config::Source;
use stackflow::network::System;
use stackflow::opt::budget::{optimize_budgets, Settings};
use stackflow::opt::problem::{feasible_set, layout};
use stackflow::opt::simplex::project_capped;
use stackflow::opt::{BudgetProblem, ProjectedGradient, SimplexGroup, Simplices};
use stackflow::parallel::Strategy as DistStrategy;
use stackflow::workload::Workload;

fn one_group(n: usize, lower: Vec<f64>, upper: Vec<f64>) -> Simplices {
    Simplices::new(
        vec![SimplexGroup {
            name: "area".into(),
            indices: (0..n).collect(),
            lower,
            upper,
            total: 1.0,
        }],
        n,
    )
    .unwrap()
}

/// f(x) = sum (x_i - a_i)^2: on the simplex the optimum is the projection of `a`.
struct Quadratic {
    a: Vec<f64>,
}

impl CostFunction for Quadratic {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Vec<f64>) -> Result<f64, Error> {
        Ok(x.iter().zip(&self.a).map(|(x, a)| (x - a).powi(2)).sum())
    }
}

impl Gradient for Quadratic {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, x: &Vec<f64>) -> Result<Vec<f64>, Error> {
        Ok(x.iter().zip(&self.a).map(|(x, a)| 2.0 * (x - a)).collect())
    }
}

/// Rosenbrock's valley, f = (0.5 - x)^2 + 100 (y - x^2)^2, with the box x <= 0.4: the
/// optimum is on the bound, (0.4, 0.16).
struct BoxedRosenbrock;

impl CostFunction for BoxedRosenbrock {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, p: &Vec<f64>) -> Result<f64, Error> {
        let (x, y) = (p[0], p[1]);
        Ok((0.5 - x).powi(2) + 100.0 * (y - x * x).powi(2))
    }
}

impl Gradient for BoxedRosenbrock {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, p: &Vec<f64>) -> Result<Vec<f64>, Error> {
        let (x, y) = (p[0], p[1]);
        Ok(vec![
            -2.0 * (0.5 - x) - 400.0 * x * (y - x * x),
            200.0 * (y - x * x),
        ])
    }
}

type PgState = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

/// Fails the run if any iterate leaves the feasible set.
struct Feasible(Simplices);

impl Observe<PgState> for Feasible {
    fn observe_iter(&mut self, state: &PgState, _: &KV) -> Result<(), Error> {
        let p = state.get_param().expect("an iterate");
        if self.0.contains(p, 1e-12) {
            Ok(())
        } else {
            Err(Error::msg(format!("infeasible iterate {p:?}")))
        }
    }
}

fn solve<O>(problem: O, set: Simplices, start: Vec<f64>, iters: u64) -> Vec<f64>
where
    O: CostFunction<Param = Vec<f64>, Output = f64>
        + Gradient<Param = Vec<f64>, Gradient = Vec<f64>>
        + 'static,
{
    let solver = ProjectedGradient::new(set.clone()).with_tolerance(1e-10);
    let r = Executor::new(problem, solver)
        .configure(|s| s.param(start).max_iters(iters))
        .add_observer(Feasible(set), ObserverMode::Always)
        .run()
        .unwrap();
    r.state().get_best_param().unwrap().clone()
}

#[test]
fn solver_finds_the_projection_of_a_quadratic_minimum() {
    let a = vec![0.6, 0.5, 0.3];
    let set = one_group(3, vec![0.0; 3], vec![1.0; 3]);
    let x = solve(Quadratic { a: a.clone() }, set, vec![0.1, 0.1, 0.1], 5000);
    // KKT: subtract (1.4 - 1) / 3 from each coordinate.
    let expected = [0.6 - 0.4 / 3.0, 0.5 - 0.4 / 3.0, 0.3 - 0.4 / 3.0];
    for (x, e) in x.iter().zip(expected) {
        assert!((x - e).abs() < 1e-6, "{x} vs {e}");
    }
}

#[test]
fn solver_finds_the_box_constrained_rosenbrock_minimum() {
    let set = one_group(2, vec![0.0, 0.0], vec![0.4, 1.0]);
    let x = solve(BoxedRosenbrock, set, vec![0.05, 0.6], 20000);
    assert!((x[0] - 0.4).abs() < 1e-6, "{x:?}");
    assert!((x[1] - 0.16).abs() < 1e-6, "{x:?}");
}

/// Brute force: every choice of each coordinate at its lower bound, upper bound or free,
/// with the sum constraint active or not; the nearest feasible candidate.
fn brute_projection(v: &[f64], lo: &[f64], hi: &[f64], total: f64) -> Vec<f64> {
    let n = v.len();
    let mut best: Option<(f64, Vec<f64>)> = None;
    for code in 0..3usize.pow(n as u32) {
        let state: Vec<usize> = (0..n).map(|i| code / 3usize.pow(i as u32) % 3).collect();
        for face in [false, true] {
            let fixed: f64 = (0..n)
                .filter(|&i| state[i] != 2)
                .map(|i| if state[i] == 0 { lo[i] } else { hi[i] })
                .sum();
            let free: Vec<usize> = (0..n).filter(|&i| state[i] == 2).collect();
            let lambda = if face {
                if free.is_empty() {
                    continue;
                }
                (free.iter().map(|&i| v[i]).sum::<f64>() + fixed - total) / free.len() as f64
            } else {
                0.0
            };
            let w: Vec<f64> = (0..n)
                .map(|i| match state[i] {
                    0 => lo[i],
                    1 => hi[i],
                    _ => v[i] - lambda,
                })
                .collect();
            let ok = w.iter().sum::<f64>() <= total + 1e-12
                && (0..n).all(|i| w[i] >= lo[i] - 1e-12 && w[i] <= hi[i] + 1e-12);
            if ok {
                let d: f64 = w.iter().zip(v).map(|(a, b)| (a - b).powi(2)).sum();
                if best.as_ref().map_or(true, |b| d < b.0 - 1e-15) {
                    best = Some((d, w));
                }
            }
        }
    }
    best.unwrap().1
}

fn bounded_point() -> impl Strategy<Value = (Vec<f64>, Vec<f64>, Vec<f64>)> {
    (1usize..=4).prop_flat_map(|n| {
        (
            prop::collection::vec(-0.5f64..1.5, n),
            prop::collection::vec(0.0f64..0.2, n),
            prop::collection::vec(0.2f64..1.0, n),
        )
    })
}

proptest! {
    #[test]
    fn projection_is_exact_idempotent_and_non_expansive(
        (v, lo, hi) in bounded_point(),
        shift in prop::collection::vec(-0.3f64..0.3, 4),
    ) {
        let total = 1.0f64.max(lo.iter().sum::<f64>());
        let p = project_capped(&v, &lo, &hi, total);
        let brute = brute_projection(&v, &lo, &hi, total);
        for (a, b) in p.iter().zip(&brute) {
            prop_assert!((a - b).abs() < 1e-9, "{p:?} vs brute {brute:?}");
        }
        let pp = project_capped(&p, &lo, &hi, total);
        for (a, b) in p.iter().zip(&pp) {
            prop_assert!((a - b).abs() < 1e-12);
        }
        let u: Vec<f64> = v.iter().zip(&shift).map(|(a, b)| a + b).collect();
        let pu = project_capped(&u, &lo, &hi, total);
        let d = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>().sqrt();
        prop_assert!(d(&p, &pu) <= d(&v, &u) + 1e-12);
    }

    #[test]
    fn every_solver_iterate_is_feasible(
        a in prop::collection::vec(-0.5f64..1.5, 3),
        start in prop::collection::vec(-1.0f64..2.0, 3),
    ) {
        // The observer fails the run on any infeasible iterate.
        let set = one_group(3, vec![0.0, 0.05, 0.0], vec![0.7, 1.0, 0.5]);
        let x = solve(Quadratic { a }, set.clone(), start, 200);
        prop_assert!(set.contains(&x, 1e-12));
    }
}

fn default_problem(strategy: &str) -> BudgetProblem {
    let system = System::load(Source::Embedded, Path::new("templates/deepflow-sec9.yaml")).unwrap();
    let design = system.design().unwrap();
    let workload = Workload::load(Source::Embedded, Path::new("workloads/lstm-sec9.yaml")).unwrap();
    let set = feasible_set(&layout(&design), None).unwrap();
    BudgetProblem::new(
        system,
        design,
        512,
        workload,
        DistStrategy::parse(strategy).unwrap(),
        set,
    )
    .unwrap()
}

/// D5 (issue 23): a sensitivity probe that crosses a cliff says so in words. Area moved
/// from l0 to the core until l0 can barely give every MCU a bank: one more percent of core
/// area adds MCUs that l0 has no bank for, which is a cliff, not a slope.
#[test]
fn a_sensitivity_probe_across_a_cliff_says_why() {
    use stackflow::domain::Component;
    use stackflow::opt::budget::sensitivities;
    use stackflow::opt::problem::Resource;
    let problem = default_problem("CR-16-d32");
    let start = problem.initial();
    let at = |c: &str, r: Resource| {
        problem
            .layout
            .iter()
            .position(|s| s.resource == r && s.component.to_string() == c)
            .unwrap()
    };
    let (core, l0) = (at("core", Resource::Area), at("l0", Resource::Area));
    let moved = |x: f64| {
        let mut w = start.clone();
        let amount = x * w[l0];
        w[l0] -= amount;
        w[core] += amount;
        w
    };
    assert!(problem.evaluate(&moved(0.0)).feasible);
    assert!(!problem.evaluate(&moved(1.0)).feasible);
    // The largest move that stays feasible, to 1e-6 of l0's share.
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..20 {
        let mid = 0.5 * (lo + hi);
        if problem.evaluate(&moved(mid)).feasible {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let edge = moved(lo);
    let found = sensitivities(&problem, &edge);
    let probe = found
        .iter()
        .find(|s| s.component == Component::Core && s.resource == Resource::Area)
        .unwrap();
    let cliff = probe
        .cliff
        .as_deref()
        .unwrap_or_else(|| panic!("{probe:?}"));
    assert!(
        cliff.starts_with("infeasible: ") && cliff.contains("bank"),
        "{cliff}"
    );
    // A probe that stays feasible has no cliff.
    assert!(found.iter().any(|s| s.cliff.is_none()));
}

/// An area probe grows the package with the die, so the room beside it keeps main
/// memory's stacks. With that room exactly filled, a probe that took its extra area from
/// the room lost a stack whichever component it probed: l1's next 1% of area, which buys
/// nothing, read +2.7% and a cliff (out of memory, 48.4 GiB in 48).
#[test]
fn an_area_probe_keeps_the_room_beside_the_die() {
    use stackflow::opt::budget::sensitivities;
    use stackflow::opt::problem::Resource;
    let mut problem = default_problem("CR-16-d32");
    let w = problem.initial();
    let before = problem.evaluate(&w).architecture;
    let stacks = before.main_memory.devices;
    problem.design.node_area_mm2 =
        before.chip_area_mm2.allocated + before.main_memory.node_area_mm2.used * (1.0 + 1e-9);
    let after = problem.evaluate(&w);
    assert!(after.feasible);
    assert_eq!(after.architecture.main_memory.devices, stacks);
    let found = sensitivities(&problem, &w);
    for c in ["l1", "dram"] {
        let s = found
            .iter()
            .find(|s| s.component.to_string() == c && s.resource == Resource::Area)
            .unwrap();
        assert!(s.percent_time_per_percent_budget.abs() < 0.5, "{s:?}");
    }
}

#[test]
fn same_seed_same_result_bit_for_bit() {
    let problem = default_problem("CR-16-d32");
    let settings = |seed| Settings {
        restarts: 3,
        steps: 15,
        seed,
        ..Settings::default()
    };
    let steps = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bar = {
        let steps = steps.clone();
        stackflow::opt::Progress::new(move |n| {
            steps.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let a = optimize_budgets(&problem, &settings(7), &bar).unwrap();
    // Every step of every restart is reported, early stops included.
    assert_eq!(steps.load(std::sync::atomic::Ordering::Relaxed), 3 * 15);
    let b = optimize_budgets(&problem, &settings(7), &bar).unwrap();
    assert_eq!(a.best, b.best);
    assert_eq!(a.best_objective.to_bits(), b.best_objective.to_bits());
    assert_eq!(
        a.trace
            .iter()
            .map(|t| t.objective.to_bits())
            .collect::<Vec<_>>(),
        b.trace
            .iter()
            .map(|t| t.objective.to_bits())
            .collect::<Vec<_>>()
    );
    let c = optimize_budgets(&problem, &settings(8), &bar).unwrap();
    // Restart 0 starts from the budget itself; the random starts follow the seed.
    assert_eq!(a.restarts[0].start, c.restarts[0].start);
    assert_ne!(a.restarts[1].start, c.restarts[1].start);
}

/// The optimizer prices a point without building its report (and with the memos of kernel
/// times, tiles, operating points and objectives by design warm from other points): the
/// same objective, bit for bit, as the full evaluation of that point alone, feasible or not.
#[test]
fn the_objective_is_the_evaluation_s() {
    let problem = default_problem("CR-16-d32");
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(3);
    let mut points = vec![problem.initial()];
    points.extend((0..24).map(|_| stackflow::opt::budget::random_start(&problem, &mut rng)));
    // Starved of every memory level: no bank, an infinite objective.
    points.push(
        problem
            .layout
            .iter()
            .map(|s| match s.component {
                stackflow::domain::Component::Memory(_) => 0.0,
                _ => 0.1,
            })
            .collect(),
    );
    let mut infinite = 0;
    for w in &points {
        let w = &problem.set.project(w);
        let fresh = default_problem("CR-16-d32").evaluate(w).objective;
        let priced = problem.cost(w).unwrap();
        assert_eq!(priced.to_bits(), fresh.to_bits(), "at {w:?}");
        infinite += usize::from(priced.is_infinite());
    }
    assert!(infinite >= 1, "an infeasible point is among them");
    // Nudged one share at a time, most points move no bank, lane or volt and are priced
    // from the objectives remembered by what the design is: still the evaluation's.
    let reference = default_problem("CR-16-d32");
    for w in points.iter().take(6) {
        for i in 0..w.len() {
            for nudge in [1e-9, 1e-3] {
                let mut x = w.clone();
                x[i] += nudge;
                let x = problem.set.project(&x);
                let fresh = reference.evaluate(&x).objective;
                let priced = problem.cost(&x).unwrap();
                assert_eq!(
                    priced.to_bits(),
                    fresh.to_bits(),
                    "share {i} + {nudge} at {w:?}"
                );
            }
        }
    }
}

#[test]
fn optimize_improves_the_default_and_stays_within_every_budget() {
    let dir = Scratch::new("optimize-default");
    let out = dir.write(".keep", "");
    let out = Path::new(&out).parent().unwrap().join("out");
    let out_s = out.display().to_string();
    let (code, stdout, err) = stackflow(&[
        "optimize",
        "--restarts",
        "4",
        "--steps",
        "40",
        "--out",
        &out_s,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("(no inputs given: the embedded default"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let initial = report["initial_time_per_iteration_s"].as_f64().unwrap();
    let best = report["best_time_per_iteration_s"].as_f64().unwrap();
    assert!(best < initial, "{best} !< {initial}");
    for key in ["strategy", "sensitivities"] {
        assert!(report.get(key).is_some(), "{key} missing");
    }
    assert!(report["feasible"].as_bool().unwrap());
    // The written budget regenerates a design within every budget.
    let budget = out.join("budget.yaml").display().to_string();
    let (code, json, err) = stackflow(&["generate", "--budget", &budget, "--json"]);
    assert_eq!(code, 0, "{err}");
    let arch: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(arch["violations"].as_array().unwrap().len(), 0, "{json}");
    for total in ["chip_area_mm2", "power_w", "perimeter_mm"] {
        let used = arch[total]["used"].as_f64().unwrap();
        let allocated = arch[total]["allocated"].as_f64().unwrap();
        assert!(
            used <= allocated * (1.0 + 1e-9),
            "{total}: {used} > {allocated}"
        );
    }
    let trace = std::fs::read_to_string(out.join("trace.csv")).unwrap();
    assert!(trace.starts_with("round,strategy,restart,step,objective,time_s"));
    // One row per round, restart and step.
    let mut keys: Vec<(String, String, String)> = trace
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[2].to_string(), f[3].to_string())
        })
        .collect();
    let rows = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), rows, "a step listed twice: {trace}");
    assert!(std::fs::read_to_string(out.join("convergence.svg"))
        .unwrap()
        .contains("<svg"));
    // The chip drawn: each budget's split given and optimized, with every component of the
    // report and the binding budgets named; the shadow prices with their units.
    let budget_svg = std::fs::read_to_string(out.join("budget.svg")).unwrap();
    for s in report["shares"].as_array().unwrap() {
        let c = s["component"].as_str().unwrap();
        assert!(budget_svg.contains(c), "{c} missing from budget.svg");
    }
    let binding: Vec<&str> = report["binding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(!binding.is_empty());
    for (r, used) in report["budget_use"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u[0].as_str().unwrap(), u[1].as_f64().unwrap()))
    {
        let caption = format!(
            "{r}: the optimized design uses {:.1}% of the budget",
            100.0 * used
        );
        let marked = format!("{caption} (binding)");
        assert!(budget_svg.contains(&caption), "{caption} missing");
        assert_eq!(
            budget_svg.contains(&marked),
            binding.contains(&r),
            "{r}: binding marked wrongly"
        );
    }
    let shadows = std::fs::read_to_string(out.join("sensitivities.svg")).unwrap();
    for x in report["sensitivities"].as_array().unwrap() {
        let label = format!(
            "{} {}",
            x["component"].as_str().unwrap(),
            x["resource"].as_str().unwrap()
        );
        assert!(shadows.contains(&label), "{label} missing");
    }
    assert!(shadows.contains(" s/mm2") && shadows.contains(" s/W"));
    // A co-optimization also draws its strategy search's front at the given budget.
    let co = &report["co_optimization"];
    assert!(!co.is_null(), "the default optimize co-optimizes");
    let svg = std::fs::read_to_string(out.join("pareto.svg")).unwrap();
    let chosen = co["search"]["best"]["strategy"].as_str().unwrap();
    assert!(svg.contains(chosen), "{chosen} not marked in pareto.svg");
}

#[test]
fn strategy_search_beats_pure_data_parallelism() {
    let system = System::load(Source::Embedded, Path::new("templates/deepflow-sec9.yaml")).unwrap();
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, 512).unwrap();
    let lstm = Workload::load(Source::Embedded, Path::new("workloads/lstm-sec9.yaml")).unwrap();
    let all = stackflow::opt::search::enumerate(&lstm, 512).unwrap();
    let dp = stackflow::parallel::Strategy::parse("d512").unwrap();
    let settings = stackflow::opt::search::Settings::default();
    let none = stackflow::opt::Progress::none();
    let r = stackflow::opt::search::search(&lstm, &arch, &net, &all, Some(&dp), &settings, &none);
    let dp = r.base.as_ref().unwrap();
    assert_eq!(dp.strategy, "t1-d512-p1");
    let best = r.best.as_ref().unwrap();
    let speedup = dp.time_per_iteration_s / best.time_per_iteration_s;
    println!(
        "best {} {:.3} s vs data parallel {:.3} s: {speedup:.2}x",
        best.strategy, best.time_per_iteration_s, dp.time_per_iteration_s
    );
    assert!(speedup >= 1.5, "{speedup}");
    // The Pareto front trades time for memory: faster entries hold more per device.
    for w in r.pareto.windows(2) {
        assert!(w[0].time_per_iteration_s <= w[1].time_per_iteration_s);
        assert!(w[0].memory_per_device_bytes > w[1].memory_per_device_bytes);
    }
}

#[test]
fn bad_optimizer_input_exits_2_with_a_clear_message() {
    let dir = Scratch::new("optimize-bad");
    let conflicting = dir.write("b1.yaml", "area: {core: {min: 0.6, max: 0.4}}\n");
    let (code, _, err) = stackflow(&[
        "optimize",
        "--bounds",
        &conflicting,
        "--strategy",
        "CR-16-d32",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("area.core.min") && err.contains("conflicting bounds"),
        "{err}"
    );
    let over = dir.write("b2.yaml", "power: {core: {fixed: 0.7}, dram: {min: 0.5}}\n");
    let (code, _, err) = stackflow(&["optimize", "--bounds", &over, "--strategy", "CR-16-d32"]);
    assert_eq!(code, 2);
    assert!(err.contains("sum to at most 1"), "{err}");
    let unknown = dir.write("b3.yaml", "area: {gpu: {max: 0.5}}\n");
    let (code, _, err) = stackflow(&["optimize", "--bounds", &unknown, "--strategy", "CR-16-d32"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("one of [core, l0, l1, l2, dram, inter_package]"),
        "{err}"
    );
    let (code, _, err) = stackflow(&["optimize", "--restarts", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("restarts"), "{err}");
    let (code, _, err) = stackflow(&["optimize", "--steps", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("steps"), "{err}");
    let _ = root();
}

#[test]
fn other_argmin_solvers_run_on_the_budget_problem() {
    use argmin::solver::neldermead::NelderMead;
    let problem = default_problem("CR-16-d32");
    let start = problem.initial();
    let start_cost = problem.cost(&start).unwrap();
    // A simplex of the start and the start with each share nudged.
    let mut simplex = vec![start.clone()];
    for i in 0..start.len() {
        let mut p = start.clone();
        p[i] *= 0.9;
        simplex.push(p);
    }
    let r = Executor::new(problem, NelderMead::new(simplex))
        .configure(|s| s.max_iters(20))
        .run()
        .unwrap();
    assert!(r.state().get_best_cost() <= start_cost);
}

#[test]
fn a_workload_that_fits_no_strategy_gets_an_infeasible_report_and_exit_3() {
    let (code, out, err) = stackflow(&[
        "optimize",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--devices",
        "4",
        "--restarts",
        "1",
        "--steps",
        "2",
    ]);
    // The search ran and found nothing feasible: the report, then exit code 3.
    assert_eq!(code, 3, "{err}");
    assert!(
        out.contains("INFEASIBLE") && out.contains("out of memory"),
        "{out}"
    );
}

/// The baseline on `devices` of `system` for `workload`: DeepFlow's data parallelism with
/// the least ZeRO stage that fits, else the first strategy that fits, else the first that
/// runs.
fn baseline(system: &str, workload: &str, devices: u64) -> (String, bool) {
    let system = System::load(Source::Embedded, Path::new(system)).unwrap();
    let arch = stackflow::generator::generate(&system.design().unwrap());
    let net = system.network(&arch, devices).unwrap();
    let workload = Workload::load(Source::Embedded, Path::new(workload)).unwrap();
    let s = stackflow::opt::search::baseline(&workload, &arch, &net, devices).unwrap();
    let p = stackflow::distributed::predict(&workload, &arch, &net, &s).unwrap();
    (s.to_string(), p.feasible)
}

#[test]
fn the_baseline_is_data_parallelism_with_the_least_sharding_that_fits() {
    // Sec. 9: d512 needs 456 GiB per device of 64, ZeRO-1 116 GiB; ZeRO-2 fits.
    let (s, fits) = baseline(
        "templates/deepflow-sec9.yaml",
        "workloads/lstm-sec9.yaml",
        512,
    );
    assert_eq!(s, "t1-d512-p1-z2");
    assert!(fits);
    // The LSTM of issue 9 on one DGX A100: data parallelism does not fit at any ZeRO stage
    // (under ZeRO-3 each device still gathers a layer whole, with its gradient: 107 GiB of
    // working set beside 71 GiB of shards), so the first enumerated strategy that fits is
    // the baseline.
    let (s, fits) = baseline("templates/dgx-a100.yaml", "workloads/lstm-o1.yaml", 8);
    assert!(!s.starts_with("t1-d8-p1"), "{s}");
    assert!(fits, "{s}");
    // GPT-1.7B has a global batch of 4: data parallelism cannot split it 8 ways, and the
    // first enumerated strategy that fits is the baseline.
    let (s, fits) = baseline("templates/dgx-a100.yaml", "workloads/gpt-1.7b.yaml", 8);
    assert!(!s.contains("d8"), "{s}");
    assert!(fits, "{s}");
    // LLaMA-65B on 8 A100s fits no strategy: the baseline runs, and is infeasible.
    let (s, fits) = baseline("templates/dgx-a100.yaml", "workloads/llama-65b.yaml", 8);
    assert_eq!(s, "t1-d8-p1");
    assert!(!fits);
}
