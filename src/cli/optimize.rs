//! `stackflow optimize`: budget reallocation (DeepFlow Sec. 7) and strategy search
//! (Sec. 9.2) for a fixed workload on a system; writes the optimized budget, a JSON report,
//! the convergence trace and its plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::Outcome;
use crate::config::raw::{AreaBudgetRaw, BudgetFile, PerimeterBudgetRaw, PowerBudgetRaw};
use crate::config::{normalize, to_yaml, write_atomic, Source};
use crate::design::{Design, DesignFiles};
use crate::distributed::load::{Arrivals, Deployment, Engine, Goodput, Lengths, Load, Slo};
use crate::generator::Architecture;
use crate::network::System;
use crate::opt::budget::{self, BudgetResult, Sensitivity, Settings, TracePoint};
use crate::opt::problem::{feasible_set, with_shares, BoundsFile, Evaluation, ServingGoal};
use crate::opt::{co_optimize, BudgetProblem, CoOptimization, Resource};
use crate::parallel::Strategy;
use crate::tech::TechLibrary;
use crate::workload::Workload;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;

use super::plot::FONT;
use serde::Serialize;

use super::distributed::{load_strategy, render, unit_of};
use super::table;

/// The embedded default: DeepFlow Sec. 9's LSTM on 512 N7 / HBM2e / 200 GB/s nodes.
pub const DEFAULT_SYSTEM: &str = "templates/deepflow-sec9.yaml";
pub const DEFAULT_WORKLOAD: &str = "workloads/lstm-sec9.yaml";

pub struct Args {
    pub workload: Option<PathBuf>,
    pub system: Option<PathBuf>,
    pub budget: Option<PathBuf>,
    pub template: Option<PathBuf>,
    pub tech: Option<PathBuf>,
    pub devices: Option<u64>,
    pub strategy: Option<String>,
    pub search_strategy: bool,
    pub bounds: Option<PathBuf>,
    pub settings: Settings,
    /// A served transformer's SLO: p99 TTFT and TPOT bounds, ms.
    pub slo_ms: Option<(f64, f64)>,
    pub max_batch: u64,
    pub out: Option<PathBuf>,
    /// `--report`: the run as one HTML page.
    pub report: Option<PathBuf>,
    pub json: bool,
}

#[derive(Serialize)]
struct ShareReport {
    resource: Resource,
    component: String,
    initial: f64,
    best: f64,
    best_amount: f64,
    unit: &'static str,
}

#[derive(Serialize)]
struct Report<'a> {
    workload: String,
    system: String,
    devices: u64,
    mode: &'static str,
    settings: &'a Settings,
    initial_strategy: String,
    strategy: String,
    initial_time_per_iteration_s: f64,
    /// Whether the given budget and strategy fit.
    initial_feasible: bool,
    best_time_per_iteration_s: f64,
    /// What the speedup compares against: the best feasible baseline, if any.
    reference: Option<Reference>,
    /// The reference's time over the best design's; null when either does not fit.
    speedup: Option<f64>,
    /// The report's first line.
    headline: String,
    feasible: bool,
    violations: &'a [crate::violation::Violation],
    shares: Vec<ShareReport>,
    sensitivities: &'a [Sensitivity],
    /// Share of each whole budget the best design uses; a class at 100% binds.
    budget_use: Vec<(Resource, f64)>,
    binding: Vec<Resource>,
    co_optimization: Option<&'a CoOptimization>,
    restarts: Vec<(usize, u64, f64)>,
    /// A served transformer: goodput within the SLO before and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    serving: Option<ServingReport>,
}

/// A serving optimization's goodput per device before and after: the fluid steady state the
/// optimizer maximised, and the simulated goodput (Poisson arrivals, 1,000 requests, seed
/// 0) that checks it.
#[derive(Serialize)]
struct ServingReport {
    slo: Slo,
    initial_fluid_requests_per_s_per_device: f64,
    best_fluid_requests_per_s_per_device: f64,
    initial_simulated: Option<Goodput>,
    best_simulated: Option<Goodput>,
    /// Why the simulation finds no goodput, when so.
    simulated_note: Vec<String>,
}

/// The simulated goodput of the problem's strategy on `arch` (Poisson, 1,000 requests, seed 0).
fn simulated_goodput(
    problem: &BudgetProblem,
    arch: &Architecture,
    goal: &ServingGoal,
) -> Result<Goodput, String> {
    let (t, spec) = problem.workload.serving().ok_or("not served")?;
    let net = problem.network(arch).map_err(|e| e.to_string())?;
    let engine = Engine::new(
        t,
        Lengths::from(spec),
        arch,
        &net,
        &problem.strategy,
        &goal.policy,
    )
    .map_err(|e| e.to_string())?;
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    Deployment::Colocated(engine)
        .goodput(&arrivals, &goal.slo, 1000)
        .map_err(|e| e.to_string())?
}

/// The feasible baseline a speedup is quoted against.
#[derive(Serialize)]
struct Reference {
    /// `given` (the given budget and strategy) or `searched` (the given budget with the
    /// fastest strategy that fits, when the given strategy does not).
    baseline: &'static str,
    strategy: String,
    time_per_iteration_s: f64,
}

/// The best feasible baseline: the given budget and strategy when they fit, else the given
/// budget with the strategy search's pick when that fits.
fn reference(
    initial: &Evaluation,
    baseline: &Strategy,
    co: Option<&CoOptimization>,
) -> Option<Reference> {
    if initial.feasible {
        return Some(Reference {
            baseline: "given",
            strategy: baseline.to_string(),
            time_per_iteration_s: initial.time_per_iteration_s,
        });
    }
    co.map(|c| &c.strategy_only)
        .filter(|p| p.feasible)
        .map(|p| Reference {
            baseline: "searched",
            strategy: p.strategy.clone(),
            time_per_iteration_s: p.time_per_iteration_s,
        })
}

/// The first line: the speedup over the best feasible baseline, or that none fits, or
/// that nothing fits with the least infeasible design's violations.
fn headline(
    initial: &Evaluation,
    baseline: &Strategy,
    best: &Evaluation,
    (strategy, searched): (&Strategy, bool),
    reference: Option<&Reference>,
) -> String {
    let first_violation = |e: &Evaluation| {
        e.violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    if !best.feasible {
        return format!(
            "NOTHING FITS (exit code 3){}. The least infeasible design found, strategy \
             {strategy} ({:.4} s per iteration if it ran): {}",
            if searched {
                ""
            } else {
                " with the strategy given (--search-strategy searches others)"
            },
            best.time_per_iteration_s,
            first_violation(best)
        );
    }
    match reference {
        Some(r) if r.baseline == "given" => format!(
            "time / iteration  {:.4} s -> {:.4} s ({:.2}x); strategy {} -> {strategy}",
            r.time_per_iteration_s,
            best.time_per_iteration_s,
            r.time_per_iteration_s / best.time_per_iteration_s,
            r.strategy,
        ),
        Some(r) => format!(
            "time / iteration  {:.4} s -> {:.4} s ({:.2}x); strategy {} -> {strategy} (against \
             the given budget with the fastest strategy that fits: the given {baseline} does not \
             fit: {})",
            r.time_per_iteration_s,
            best.time_per_iteration_s,
            r.time_per_iteration_s / best.time_per_iteration_s,
            r.strategy,
            first_violation(initial)
        ),
        None => format!(
            "time / iteration  {:.4} s, strategy {strategy}; no speedup quoted: nothing fits the \
             given budget (with {baseline}: {})",
            best.time_per_iteration_s,
            first_violation(initial)
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if let Some(path) = &args.report {
        super::output_file("--report", path)?;
    }
    if let Some(dir) = &args.out {
        super::output_folder("--out", dir)?;
    }
    // The note on the embedded default only when every input is the default's.
    let defaults = args.workload.is_none()
        && args.system.is_none()
        && args.budget.is_none()
        && args.template.is_none()
        && args.tech.is_none()
        && args.devices.is_none()
        && args.strategy.is_none()
        && args.bounds.is_none();
    let (wsource, wfile) = match &args.workload {
        Some(p) => (Source::Disk, p.clone()),
        None => (Source::Embedded, PathBuf::from(DEFAULT_WORKLOAD)),
    };
    let workload = Workload::load(wsource, &wfile)?;
    let unit = unit_of(&workload);
    let system = match &args.system {
        Some(p) => System::load(Source::Disk, p)?,
        None => System::load(Source::Embedded, Path::new(DEFAULT_SYSTEM))?,
    };
    let design = load_design(&args, &system)?;
    let devices = args.devices.unwrap_or_else(|| system.default_devices());
    let bounds = load_bounds(&args)?;
    let layout = crate::opt::problem::layout(&design);
    let set = feasible_set(&layout, bounds.as_ref().map(|(f, b)| (f.as_str(), b)))?;
    let goal = serving_goal(&args, &workload, &wfile)?;
    let search = goal.is_none() && (args.search_strategy || args.strategy.is_none());
    let baseline = match (&goal, &args.strategy) {
        (Some(_), None) => Strategy {
            data: devices,
            ..Strategy::default()
        },
        _ => baseline_strategy(&args, search, &system, &design, &workload, &wfile, devices)?,
    };
    let cannot = || {
        format!(
            "the strategy {baseline} cannot run {} on {devices} devices",
            wfile.display()
        )
    };
    let mut problem = BudgetProblem::new(system.clone(), design, devices, workload, baseline, set)
        .with_context(cannot)?;
    if let Some(goal) = goal {
        problem = problem.with_serving(goal).with_context(cannot)?;
    }
    let initial = problem.initial();
    let initial_eval = problem.evaluate(&initial);
    let (result, co) = optimize_problem(&mut problem, &args, search)?;
    let best = problem.evaluate(&result.best);
    let sens = budget::sensitivities(&problem, &result.best);
    let best_design = with_shares(&problem.design, &problem.layout, &result.best);
    let shares = share_reports(&problem, &initial, &result.best, &best_design);
    let (budget_use, binding) = budget_use(&best.architecture);
    let reference = reference(&initial_eval, &baseline, co.as_ref());
    let serving = goal.map(|goal| {
        let initial_sim = simulated_goodput(&problem, &initial_eval.architecture, &goal);
        let best_sim = simulated_goodput(&problem, &best.architecture, &goal);
        let per_device = |e: &Evaluation| {
            if e.time_per_iteration_s.is_finite() {
                1.0 / e.time_per_iteration_s
            } else {
                0.0
            }
        };
        ServingReport {
            slo: goal.slo,
            initial_fluid_requests_per_s_per_device: per_device(&initial_eval),
            best_fluid_requests_per_s_per_device: per_device(&best),
            simulated_note: [("initial", &initial_sim), ("best", &best_sim)]
                .iter()
                .filter_map(|(which, g)| g.as_ref().err().map(|e| format!("{which}: {e}")))
                .collect(),
            initial_simulated: initial_sim.ok(),
            best_simulated: best_sim.ok(),
        }
    });
    let headline = headline(
        &initial_eval,
        &baseline,
        &best,
        (&problem.strategy, search),
        reference.as_ref(),
    );
    let headline = match &serving {
        Some(sv) if best.feasible => serving_headline(sv, &problem.strategy),
        _ => headline,
    };
    let speedup = reference
        .as_ref()
        .filter(|_| best.feasible)
        .map(|r| r.time_per_iteration_s / best.time_per_iteration_s);
    let report = Report {
        workload: problem.workload.name(),
        system: system.name.clone(),
        devices,
        mode: if search {
            "strategy search and budget optimization"
        } else {
            "budget optimization"
        },
        settings: &args.settings,
        initial_strategy: baseline.to_string(),
        strategy: problem.strategy.to_string(),
        initial_time_per_iteration_s: initial_eval.time_per_iteration_s,
        initial_feasible: initial_eval.feasible,
        best_time_per_iteration_s: best.time_per_iteration_s,
        reference,
        speedup,
        headline,
        feasible: best.feasible,
        violations: &best.violations,
        shares,
        sensitivities: &sens,
        budget_use,
        binding,
        co_optimization: co.as_ref(),
        restarts: result
            .restarts
            .iter()
            .map(|r| (r.restart, r.steps, r.objective.exp()))
            .collect(),
        serving,
    };
    if let Some(dir) = &args.out {
        // Where the design's files were read from: --budget from disk, else the system's;
        // a --template or --tech override from disk whatever the budget's source.
        let source = if args.budget.is_some() {
            Source::Disk
        } else {
            system.source()
        };
        let from = |given: &Option<PathBuf>| given.as_ref().map_or(source, |_| Source::Disk);
        let sources = Sources {
            template: from(&args.template),
            tech: from(&args.tech),
        };
        write_outputs(
            dir,
            &problem,
            &best_design,
            &report,
            &result,
            co.as_ref(),
            sources,
        )?;
    }
    let outcome = if report.feasible {
        Outcome::Done
    } else {
        Outcome::NothingFeasible
    };
    let text = render_report(&report, &best, &best_design, co.as_ref(), unit);
    // The answer first: a page that cannot be written loses no result.
    if args.json {
        super::print_json(&report)?;
    } else {
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        println!("{first}");
        if defaults {
            println!(
                "(no inputs given: the embedded default, DeepFlow Sec. 9's LSTM \
                 ({DEFAULT_WORKLOAD}) on {DEFAULT_SYSTEM}: 512 nodes, N7, HBM2e, 200 GB/s \
                 InfiniBand XDR, from DeepFlow Fig. 4's budget split)"
            );
        }
        print!("{rest}");
        print_footer(&args, report.feasible, report.co_optimization.is_some());
    }
    if let Some(path) = &args.report {
        let title = format!(
            "stackflow optimize: {} on {} x {}",
            report.workload, report.devices, report.system
        );
        let mut page = super::report::Report::new(&title, &super::command_line());
        page.headline(text.lines().next().unwrap_or_default());
        let mut charts = charts(&problem, &report, &result, co.as_ref())?;
        // The chip first, the optimizer's convergence last.
        charts.rotate_left(1);
        page.heading("The chip, the shadow prices, the strategies");
        for (_, _, svg) in &charts {
            page.chart(svg, None);
        }
        page.text("Optimization", &text);
        page.tables(
            "The numbers (as --json gives them)",
            &serde_json::to_value(&report)?,
        );
        use super::report::Input::{Default, Given};
        let workload = match &args.workload {
            Some(w) => Given("workload", Some(w)),
            None => Default("workload", DEFAULT_WORKLOAD.as_ref()),
        };
        let system_file = match &args.system {
            Some(s) => Given("system", Some(s)),
            None => Default("system", DEFAULT_SYSTEM.as_ref()),
        };
        super::report::add_inputs(
            &mut page,
            &[
                workload,
                system_file,
                Given("budget", args.budget.as_deref()),
                Given("template", args.template.as_deref()),
                Given("technology", args.tech.as_deref()),
                Given("strategy", args.strategy.as_deref().map(Path::new)),
                Given("share bounds", args.bounds.as_deref()),
            ],
        );
        page.write(path)?;
    }
    Ok(outcome)
}

/// A serving optimization's first line: goodput per device before and after, fluid and
/// simulated.
fn serving_headline(sv: &ServingReport, strategy: &Strategy) -> String {
    let sim = |g: &Option<Goodput>| {
        g.as_ref().map_or("none".to_string(), |g| {
            format!("{:.3}", g.requests_per_s_per_device)
        })
    };
    let gain = if sv.initial_fluid_requests_per_s_per_device > 0.0 {
        format!(
            "{:.2}x",
            sv.best_fluid_requests_per_s_per_device / sv.initial_fluid_requests_per_s_per_device
        )
    } else {
        "the given budget keeps no load within the SLO".into()
    };
    format!(
        "goodput / device  {:.3} -> {:.3} requests/s ({gain}) within p99 TTFT {:.0} ms and TPOT \
         {:.1} ms (fluid steady state; simulated {} -> {}); strategy {strategy}",
        sv.initial_fluid_requests_per_s_per_device,
        sv.best_fluid_requests_per_s_per_device,
        sv.slo.ttft_p99_s * 1e3,
        sv.slo.tpot_p99_s * 1e3,
        sim(&sv.initial_simulated),
        sim(&sv.best_simulated),
    )
}

/// The serving goal of a served transformer (its SLO required), none for anything else (an
/// SLO given for it is refused).
fn serving_goal(
    args: &Args,
    workload: &Workload,
    file: &Path,
) -> anyhow::Result<Option<ServingGoal>> {
    match (workload.serving(), args.slo_ms) {
        (None, None) => Ok(None),
        (None, Some(_)) => anyhow::bail!(
            "--slo-ttft-ms/--slo-tpot-ms: {} is not served (no `inference:`); an SLO judges a \
             served transformer",
            file.display()
        ),
        (Some(_), None) => anyhow::bail!(
            "{}: a served transformer is optimized for goodput within an SLO: give \
             --slo-ttft-ms and --slo-tpot-ms",
            file.display()
        ),
        (Some(_), Some(bounds)) => {
            let slo = super::serve::slo_of(bounds)?;
            if args.search_strategy {
                anyhow::bail!(
                    "--search-strategy: a served transformer's budget is optimized under a fixed \
                     strategy; `stackflow search` finds its deployment"
                );
            }
            Ok(Some(ServingGoal {
                slo,
                policy: Load {
                    max_batch: args.max_batch,
                    ..Load::default()
                },
            }))
        }
    }
}

/// The strategy to start from: `--strategy`, else (searching) the search's baseline.
fn baseline_strategy(
    args: &Args,
    search: bool,
    system: &System,
    design: &Design,
    workload: &Workload,
    wfile: &Path,
    devices: u64,
) -> anyhow::Result<Strategy> {
    Ok(match (&args.strategy, search) {
        (None, true) => {
            // Pure data parallelism, or the first strategy that runs when it does not.
            let arch = crate::generator::generate(design);
            let net = system
                .network(&arch, devices)
                .map_err(|e| super::devices_given(e, args.devices))?;
            crate::opt::search::baseline(workload, &arch, &net, devices).ok_or_else(|| {
                anyhow::anyhow!(
                    "no strategy runs {} on {devices} devices (batch, layers or heads do not split)",
                    wfile.display()
                )
            })?
        }
        _ => load_strategy(args.strategy.as_deref(), system, devices)?,
    })
}

/// Loads the starting design: `--budget` from disk, else the budget the system names.
fn load_design(args: &Args, system: &System) -> anyhow::Result<Design> {
    Ok(match &args.budget {
        Some(b) => Design::load(DesignFiles {
            source: Source::Disk,
            budget: b,
            template: args.template.as_deref(),
            tech: args.tech.as_deref(),
        })?,
        None => Design::load(DesignFiles {
            source: system.source(),
            budget: system.budget_file()?,
            template: args.template.as_deref(),
            tech: args.tech.as_deref(),
        })?,
    })
}

/// Reads `--bounds`, when given, with the file name its errors cite.
fn load_bounds(args: &Args) -> anyhow::Result<Option<(String, BoundsFile)>> {
    Ok(match &args.bounds {
        Some(p) => {
            let file = p.display().to_string();
            Some((
                file.clone(),
                BoundsFile::from_yaml(&file, &Source::Disk.read(p)?)?,
            ))
        }
        None => None,
    })
}

/// Runs the budget optimization, with the strategy search when `search`, under a progress bar.
fn optimize_problem(
    problem: &mut BudgetProblem,
    args: &Args,
    search: bool,
) -> anyhow::Result<(BudgetResult, Option<CoOptimization>)> {
    let per_run = args.settings.restarts as u64 * args.settings.steps;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(per_run)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps {elapsed} {msg}")
            .expect("static template"),
    );
    let progress = {
        let bar = bar.clone();
        crate::opt::Progress::new(move |steps| bar.inc(steps))
    };
    let (result, co) = if search {
        // (b), then at most three rounds from each of (c)'s starting strategies.
        bar.set_length(per_run * (1 + 3 * crate::opt::CO_STARTS as u64));
        bar.set_message("strategy search and budget optimization");
        let co = co_optimize(problem, &args.settings, &progress)?;
        (co.budgets.clone(), Some(co))
    } else {
        bar.set_message("budget optimization");
        (
            budget::optimize_budgets(problem, &args.settings, &progress)?,
            None,
        )
    };
    bar.finish_and_clear();
    Ok((result, co))
}

/// Each share of the layout: initial and best fraction, and the best amount in its unit.
fn share_reports(
    problem: &BudgetProblem,
    initial: &[f64],
    best: &[f64],
    best_design: &Design,
) -> Vec<ShareReport> {
    problem
        .layout
        .iter()
        .enumerate()
        .map(|(i, s)| ShareReport {
            resource: s.resource,
            component: s.component.to_string(),
            initial: initial[i],
            best: best[i],
            best_amount: best[i]
                * match s.resource {
                    Resource::Area => best_design.chip_area_mm2,
                    Resource::Power => best_design.tdp_w,
                    Resource::Perimeter => best_design.perimeter_mm,
                },
            unit: s.resource.unit(),
        })
        .collect()
}

/// The share of each whole budget an architecture uses, and the classes that bind (> 99%).
fn budget_use(a: &Architecture) -> (Vec<(Resource, f64)>, Vec<Resource>) {
    let budget_use = vec![
        (
            Resource::Area,
            a.chip_area_mm2.used / a.chip_area_mm2.allocated,
        ),
        (Resource::Power, a.power_w.used / a.power_w.allocated),
        (
            Resource::Perimeter,
            a.perimeter_mm.used / a.perimeter_mm.allocated,
        ),
    ];
    let binding = budget_use
        .iter()
        .filter(|(_, u)| *u > 0.99)
        .map(|(r, _)| *r)
        .collect();
    (budget_use, binding)
}

/// Prints where the outputs went (or how to get them) and, when so, that nothing was feasible.
fn print_footer(args: &Args, feasible: bool, co: bool) {
    let pareto = if co { " and pareto.svg" } else { "" };
    match &args.out {
        Some(dir) => println!(
            "\nwrote {0}/budget.yaml, {0}/report.json, {0}/trace.csv, {0}/convergence.svg, \
             {0}/budget.svg, {0}/sensitivities.svg{1}",
            dir.display(),
            if co {
                format!(", {}/pareto.svg", dir.display())
            } else {
                String::new()
            }
        ),
        None => println!(
            "\n(--out DIR writes budget.yaml, report.json, trace.csv, convergence.svg, \
             budget.svg, sensitivities.svg{pareto})"
        ),
    }
    if !feasible {
        println!("\nNothing feasible was found (exit code 3).");
    }
}

fn render_report(
    r: &Report,
    best: &Evaluation,
    design: &Design,
    co: Option<&CoOptimization>,
    unit: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", r.headline);
    let _ = writeln!(
        s,
        "{} of {} on {} x {} ({}), {} x {}, seed {}, {}",
        r.mode,
        r.workload,
        r.devices,
        design.budget_name,
        r.system,
        super::distributed::plural(r.settings.restarts as u64, "restart", "restarts"),
        super::distributed::plural(r.settings.steps, "step", "steps"),
        r.settings.seed,
        match r.settings.finish {
            crate::opt::budget::Finish::Transfer => "each finished by a transfer search",
            crate::opt::budget::Finish::None => "projected gradient only (--finish none)",
        }
    );
    if let Some(co) = co {
        render_co_optimization(&mut s, co);
    }
    render_budget_split(&mut s, r);
    if r.serving.is_some() {
        let _ = writeln!(
            s,
            "\n(serving: \"time\" below is device-seconds per request within the SLO, the \
             inverse of goodput per device)"
        );
    }
    render_sensitivities(&mut s, r.sensitivities);
    let _ = writeln!(
        s,
        "\nbest design\n{}",
        table::render(design, &best.architecture)
    );
    if let Some(p) = &best.prediction {
        let _ = write!(s, "{}", render(p, best.architecture.peak_flops_per_s, unit));
    }
    s
}

/// Writes the co-optimization table (DeepFlow Fig. 10) and the strategies' Pareto front.
fn render_co_optimization(s: &mut String, co: &CoOptimization) {
    let _ = writeln!(
        s,
        "\nco-optimization (DeepFlow Fig. 10)      time/iter  speedup  strategy"
    );
    for p in [&co.baseline, &co.strategy_only, &co.budgets_only, &co.both] {
        // A speedup only between designs that fit.
        let speedup = p.speedup.map_or("-".to_string(), |x| format!("{x:.2}x"));
        let _ = writeln!(
            s,
            "  {:<36} {:>9.4} s {:>8}  {}{}",
            match p.label {
                "baseline" => "baseline (given budget, strategy)",
                "strategy" => "(a) strategy search only",
                "budgets" => "(b) budget optimization only",
                _ => "(c) both",
            },
            p.time_per_iteration_s,
            speedup,
            p.strategy,
            if p.feasible { "" } else { "  (infeasible)" }
        );
    }
    let _ = writeln!(
        s,
        "  strategies: {} searched ({} strategy-placement pairs): {} cannot run the workload, \
         {} out of memory, {} ruled out by a lower bound, {} priced; {}",
        co.search.enumerated,
        co.search.pairs,
        co.search.invalid,
        co.search.pruned_by_memory,
        co.search.pruned_by_bound,
        co.search.evaluated,
        if co.search.pareto.is_empty() {
            "none fits"
        } else {
            "Pareto front (time vs memory) at the optimized budget:"
        }
    );
    let rows: Vec<Vec<String>> = co
        .search
        .pareto
        .iter()
        .take(6)
        .map(|c| {
            vec![
                c.strategy.clone(),
                format!("{:.4} s", c.time_per_iteration_s),
                table::gib(c.memory_per_device_bytes),
                if c.feasible { "" } else { "(out of memory)" }.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let text = table::aligned(
            &["strategy", "time", "memory", ""],
            &rows,
            &[false, true, true, false],
        );
        // Under the co-optimization table, two spaces further in.
        for line in text.lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
}

/// Writes the initial and best budget split, the whole budgets used and those that bind.
fn render_budget_split(s: &mut String, r: &Report) {
    let _ = writeln!(s, "\nbudget split        initial     best   amount");
    for sh in &r.shares {
        let _ = writeln!(
            s,
            "  {:<9} {:<14} {:>6.3} {:>8.3} {:>8.2} {}",
            sh.resource.name(),
            sh.component,
            sh.initial,
            sh.best,
            sh.best_amount,
            sh.unit
        );
    }
    let uses: Vec<String> = r
        .budget_use
        .iter()
        .map(|(res, u)| format!("{res} {:.1}%", 100.0 * u))
        .collect();
    let _ = writeln!(
        s,
        "  whole budgets used: {}; binding: {}",
        uses.join(", "),
        if r.binding.is_empty() {
            "none".to_string()
        } else {
            r.binding
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
}

/// Writes the sensitivities at the optimum and the share the next 1% of budget helps most.
fn render_sensitivities(s: &mut String, sensitivities: &[Sensitivity]) {
    let _ = writeln!(
        s,
        "\nsensitivities at the optimum: time change per extra unit (and % time per +1% of the budget)"
    );
    for x in sensitivities {
        if let Some(cliff) = &x.cliff {
            let _ = writeln!(
                s,
                "  {:<14} {:<9} a step of +1% crosses a cliff: {cliff}",
                x.component.to_string(),
                x.resource.name(),
            );
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<14} {:<9} {:>+12.3e} s/{:<3} {:>+8.3}%   bound by {}",
            // Padded as text: the component's own Display ignores widths.
            x.component.to_string(),
            x.resource.name(),
            x.seconds_per_unit,
            x.unit,
            x.percent_time_per_percent_budget,
            if x.bound_by.is_empty() {
                "-".to_string()
            } else {
                x.bound_by.join("; ")
            }
        );
    }
    if let Some(most) = sensitivities
        .iter()
        .filter(|x| x.cliff.is_none())
        .min_by(|a, b| {
            a.percent_time_per_percent_budget
                .total_cmp(&b.percent_time_per_percent_budget)
        })
    {
        let _ = writeln!(
            s,
            "  the next 1% of budget is worth most as {} {} ({:+.3}% time)",
            most.component,
            most.resource.name(),
            most.percent_time_per_percent_budget
        );
    }
}

fn write_outputs(
    dir: &Path,
    problem: &BudgetProblem,
    design: &Design,
    report: &Report,
    result: &BudgetResult,
    co: Option<&CoOptimization>,
    sources: Sources,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let path = dir.join(name);
        write_atomic(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    let budget = budget_file(dir, problem, (design, sources))?;
    write(
        "budget.yaml",
        format!(
            "# Optimized by `stackflow optimize` from {} (time per iteration {:.6} s -> {:.6} s).\n{}",
            design.budget_file,
            report.initial_time_per_iteration_s,
            report.best_time_per_iteration_s,
            to_yaml(&budget)
        )
        .as_bytes(),
    )?;
    write(
        "report.json",
        serde_json::to_string_pretty(report)?.as_bytes(),
    )?;
    // Every budget optimization that ran: one (round 0), or a co-optimization's (b) and
    // each of (c)'s rounds; one row per restart and step.
    let rounds: Vec<(usize, String, &[TracePoint])> = match co {
        Some(co) => co
            .traces
            .iter()
            .map(|t| (t.round, t.strategy.clone(), t.trace.as_slice()))
            .collect(),
        None => vec![(0, report.strategy.clone(), result.trace.as_slice())],
    };
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record([
        "round",
        "strategy",
        "restart",
        "step",
        "objective",
        "time_s",
    ])?;
    for (round, strategy, trace) in rounds {
        let mut rows: Vec<&TracePoint> = trace.iter().collect();
        rows.sort_by_key(|t| (t.restart, t.step));
        for t in rows {
            csv.write_record([
                round.to_string(),
                strategy.clone(),
                t.restart.to_string(),
                t.step.to_string(),
                format!("{}", t.objective),
                format!("{}", t.objective.exp()),
            ])?;
        }
    }
    write("trace.csv", &csv.into_inner()?)?;
    for (file, _, svg) in charts(problem, report, result, co)? {
        write(file, svg.as_bytes())?;
    }
    Ok(())
}

/// The charts of an optimization: (file name, title, SVG) of its convergence, the budgets'
/// split given and optimized, the sensitivities and, co-optimizing, the strategies' Pareto
/// front at the optimized budget (step (c)'s last search).
fn charts(
    problem: &BudgetProblem,
    report: &Report,
    result: &BudgetResult,
    co: Option<&CoOptimization>,
) -> anyhow::Result<Vec<(&'static str, String, String)>> {
    let mut out = vec![(
        "convergence.svg",
        "the objective at each step of each restart".to_string(),
        convergence_svg(&result.trace)?,
    )];
    // The chip drawn: its budgets' split before and after, and the shadow prices.
    {
        use super::plot::{budget_svg, sensitivity_svg, BudgetShare, Shadow};
        let shares: Vec<BudgetShare> = report
            .shares
            .iter()
            .map(|s| BudgetShare {
                resource: s.resource.name(),
                component: s.component.clone(),
                given: s.initial,
                optimized: s.best,
            })
            .collect();
        let used: Vec<(&'static str, f64)> = report
            .budget_use
            .iter()
            .map(|(r, u)| (r.name(), *u))
            .collect();
        let mut bound_by: Vec<(String, String)> = Vec::new();
        for x in report.sensitivities {
            let component = x.component.to_string();
            if !bound_by.iter().any(|(c, _)| *c == component) {
                bound_by.push((component, x.bound_by.join(", ")));
            }
        }
        let title = format!(
            "{} on {} x {}: the budgets' split, given and optimized",
            report.workload, report.devices, report.system
        );
        let svg = budget_svg(&title, &shares, &used, &bound_by)?;
        out.push(("budget.svg", title, svg));
        let shadows: Vec<Shadow> = report
            .sensitivities
            .iter()
            .map(|x| Shadow {
                label: format!("{} {}", x.component, x.resource.name()),
                percent: if x.cliff.is_some() {
                    f64::NAN
                } else {
                    x.percent_time_per_percent_budget
                },
                slope: match &x.cliff {
                    Some(_) => "a cliff: +1% makes the design infeasible".into(),
                    None if !x.percent_time_per_percent_budget.is_finite() => "not finite".into(),
                    None => format!("{:+.3e} s/{}", x.seconds_per_unit, x.unit),
                },
            })
            .collect();
        let title = format!(
            "{}: sensitivities at the optimum (shadow prices)",
            report.workload
        );
        let svg = sensitivity_svg(&title, &shadows)?;
        out.push(("sensitivities.svg", title, svg));
    }
    if let Some(co) = co {
        // The strategy search at the optimized budget (step (c)'s last): its front and its
        // choice, against the optimized design's capacity; its base is the strategy the
        // budgets were optimized for.
        let optimized = with_shares(&problem.design, &problem.layout, &result.best);
        let capacity = crate::generator::generate(&optimized).memory_capacity_bytes;
        let title = format!(
            "{} on {} x {}: strategies at the optimized budget, time against memory per device",
            report.workload, report.devices, report.system
        );
        let svg = super::plot::pareto_svg(&title, &co.search, capacity, "the budgets' strategy")?;
        out.push(("pareto.svg", title, svg));
    }
    Ok(out)
}

/// Where a design's template and technology file were read from.
#[derive(Debug, Clone, Copy)]
struct Sources {
    template: Source,
    tech: Source,
}

/// The optimized budget as a budget file `generate` and `predict` accept.
fn budget_file(
    dir: &Path,
    problem: &BudgetProblem,
    (design, sources): (&Design, Sources),
) -> anyhow::Result<BudgetFile> {
    let mut area = BTreeMap::new();
    let mut power = BTreeMap::new();
    let mut perimeter = BTreeMap::new();
    let shares = crate::opt::problem::shares_of(design, &problem.layout);
    for (s, v) in problem.layout.iter().zip(shares) {
        let map = match s.resource {
            Resource::Area => &mut area,
            Resource::Power => &mut power,
            Resource::Perimeter => &mut perimeter,
        };
        map.insert(s.component.to_string(), v);
    }
    Ok(BudgetFile {
        version: 1,
        name: format!("{}-optimized", design.budget_name),
        description: Some(format!(
            "{} with its shares reallocated by stackflow optimize",
            design.budget_name
        )),
        template: portable(dir, sources.template, &design.template_file, "template")?,
        technology: portable(dir, sources.tech, &design.tech_file, "technology")?,
        area: AreaBudgetRaw {
            node_mm2: design.node_area_mm2,
            chip_mm2: design.chip_area_mm2,
            breakdown: area,
        },
        power: PowerBudgetRaw {
            tdp_w: design.tdp_w,
            breakdown: power,
        },
        perimeter: PerimeterBudgetRaw {
            total_mm: Some(design.perimeter_mm),
            breakdown: perimeter,
        },
    })
}

/// Copies an input of the written budget (`file`, read from `source` as the design was; a
/// technology file with every file it includes) under `dir/inputs/<kind>/`, keeping their
/// places relative to the deepest folder that holds them all (so includes resolve as
/// before), and returns the reference the budget makes to it: the folder is
/// self-contained and works moved anywhere.
fn portable(dir: &Path, source: Source, file: &str, kind: &str) -> anyhow::Result<String> {
    let path = PathBuf::from(file);
    let files = if kind == "technology" {
        TechLibrary::files(source, &path)?
    } else {
        vec![path.clone()]
    };
    // Where each file lies, comparable across includes: canonical on disk, normalised
    // among the embedded files.
    let placed: Vec<PathBuf> = files
        .iter()
        .map(|f| match source {
            // A file held in memory (the Python package's dict) lies in the working folder.
            Source::Disk if !f.exists() && crate::config::is_file(f) => Ok(std::path::absolute(f)?),
            Source::Disk => {
                std::fs::canonicalize(f).with_context(|| format!("{}: cannot resolve", f.display()))
            }
            Source::Embedded => Ok(normalize(f)),
        })
        .collect::<anyhow::Result<_>>()?;
    let mut root = placed[0]
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    while !placed.iter().all(|p| p.starts_with(&root)) {
        root = root.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    let inputs = dir.join("inputs").join(kind);
    for (f, p) in files.iter().zip(&placed) {
        let target = inputs.join(p.strip_prefix(&root).unwrap_or(p));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        write_atomic(&target, source.read(f)?.as_bytes())
            .with_context(|| format!("writing {}", target.display()))?;
    }
    let top = placed[0].strip_prefix(&root).unwrap_or(&placed[0]);
    // Forward slashes: the budget reads the same on every system.
    let parts: Vec<String> = top
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Ok(format!("inputs/{kind}/{}", parts.join("/")))
}

/// Time per iteration against step, one line per restart.
fn convergence_svg(trace: &[TracePoint]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let finite: Vec<&TracePoint> = trace.iter().filter(|t| t.objective.is_finite()).collect();
        let steps = finite.iter().map(|t| t.step).max().unwrap_or(1).max(1);
        let (lo, hi) = finite
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                let y = t.objective.exp();
                (a.min(y), b.max(y))
            });
        // A start far off (an infeasible one, penalised: tens of seconds beside optima of
        // tenths) would squash every useful curve: the axis stops at 8x the best time and
        // what lies above is drawn on its top edge.
        let clip = lo * 8.0;
        let clipped = hi > clip;
        let (lo, hi) = if lo.is_finite() && hi > lo {
            (lo * 0.95, hi.min(clip) * 1.05)
        } else {
            (0.5, 1.0)
        };
        let y_desc = if clipped {
            format!("time per iteration (s, log scale; above {clip:.3} s drawn at the top)")
        } else {
            "time per iteration (s, log scale; penalised when infeasible)".to_string()
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Budget optimization: time per iteration by restart",
                (FONT, 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            // Drawn in ln(time), labelled in seconds: evenly spaced labels on a log axis.
            .build_cartesian_2d(0u64..steps, lo.ln()..hi.ln())?;
        chart
            .configure_mesh()
            .x_desc("step (a restart's last segment: its transfer search, all sweeps at once)")
            .y_desc(y_desc)
            .y_labels(12)
            .y_label_formatter(&|v| format!("{:.3}", v.exp()))
            .draw()?;
        let restarts = finite.iter().map(|t| t.restart).max().map_or(0, |r| r + 1);
        for r in 0..restarts {
            let color = Palette99::pick(r).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    finite
                        .iter()
                        .filter(|t| t.restart == r)
                        .map(|t| (t.step, t.objective.exp().min(hi).ln())),
                    color.stroke_width(2),
                ))?
                .label(format!("restart {r}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}
