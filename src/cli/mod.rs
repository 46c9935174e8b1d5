//! Command-line front end: parse arguments, load and check inputs, run, print.
//! The only place that uses `anyhow`; any error prints its chain and exits with code 2.
//!
//! Two callers: `src/main.rs` ([`run`]: the process's arguments, printed answers, an exit
//! code) and the Python package ([`capture`]: a command line run in-process, its `--json`
//! answer handed back as a value). Every `--json` answer leaves a command through
//! `print_json`, so both get the same answer. A new command: its arguments in `Command`,
//! its code in a file of this folder, its JSON through `print_json`, and a function of its
//! own in `python/stackflow/__init__.py` if notebooks want it (`stackflow.run` reaches it
//! either way).

mod distributed;
mod import;
mod intensity;
mod optimize;
mod plot;
mod predict;
mod report;
mod search;
mod serve;
mod sweep;
mod table;
mod trace;
mod validate;

use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::config::{parse_json, Source};
use crate::design::{Design, DesignFiles};
use crate::generator::{generate, Architecture};
use crate::perf::roofline::Roofline;
use crate::perf::{unsupported, Evaluator};
use crate::workload::Workload;
use anyhow::{bail, Context};

/// Budget used when `generate` or `predict` gets none.
const DEFAULT_BUDGET: &str = "budgets/h100.yaml";
/// Workload used when `predict` gets none.
pub(crate) const DEFAULT_WORKLOAD: &str = "workloads/gpt-1.7b.yaml";

#[derive(Parser, Debug)]
#[command(
    name = "stackflow",
    version,
    about = "Cross-stack pathfinding for ML hardware"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// An accelerator design: a budget, which names its template and technology file, and
/// optional overrides of those two.
#[derive(clap::Args, Debug)]
struct DesignArgs {
    /// Budget file; it names its template and technology file.
    #[arg(long)]
    pub(crate) budget: Option<PathBuf>,
    /// Template file overriding the one the budget names.
    #[arg(long)]
    pub(crate) template: Option<PathBuf>,
    /// Technology file overriding the one the budget names.
    #[arg(long)]
    pub(crate) tech: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Turn DeepFlow's (hw-*.yaml, model-*.yaml) or Calculon's (models, systems, executions
    /// as JSON) input files into stackflow's, each value commented with the field it came
    /// from; lists what has no counterpart. `predict` also reads them in-line.
    Import(import::Args),
    /// Derive an accelerator (throughput, memories, networks) from a budget, template and
    /// technology library. With no arguments, uses the embedded budgets/h100.yaml.
    Generate {
        #[command(flatten)]
        design: DesignArgs,
        /// Print JSON (a stable interface for scripts) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Predict one training iteration (or a served batch) of a workload on one accelerator,
    /// or on a system with --system: time, achieved FLOP/s, memory footprint and a
    /// per-kernel-class breakdown with the bounding resource.
    /// With no arguments, runs the embedded workloads/gpt-1.7b.yaml on budgets/h100.yaml.
    Predict(PredictArgs),
    /// Search parallelism strategies for a workload on a system (tensor or RC/CR, pipeline,
    /// context, data, expert, micro-batch, interleave, recompute, sequence parallelism,
    /// ZeRO 0-3, hybrid shard groups, prefetch, placements): the top N, the Pareto front of
    /// time against memory per device, and the search's counts. Exits 3 when no strategy
    /// fits.
    Search(search::SearchArgs),
    /// Serve a transformer under load: Poisson arrivals at --rate, a trace or a closed loop
    /// of clients on continuously batching engines (a paged KV cache, preemption by
    /// recomputation, chunked prefill, prefill/decode pools); throughput and TTFT, TPOT and
    /// end-to-end percentiles, and the goodput within an SLO.
    Serve(serve::Args),
    /// Reallocate area, power and perimeter budgets (DeepFlow Sec. 7) and search
    /// parallelism strategies to minimise the time per iteration of a workload on a system.
    /// With no arguments: DeepFlow Sec. 9's LSTM on 512 N7 / HBM2e / 200 GB/s nodes.
    Optimize {
        /// Workload file (default: the embedded workloads/lstm-sec9.yaml).
        #[arg(long)]
        workload: Option<PathBuf>,
        /// System file (default: the embedded templates/deepflow-sec9.yaml).
        #[arg(long)]
        system: Option<PathBuf>,
        /// Accelerator budget to start from (default: the system's), and overrides.
        #[command(flatten)]
        design: DesignArgs,
        /// Total devices (default: the system's).
        #[arg(long)]
        devices: Option<u64>,
        /// Fixed strategy (file or string): budgets only. Without it, or with
        /// --search-strategy, strategies are searched too (from data parallelism with the least ZeRO stage that
        /// fits).
        #[arg(long, allow_hyphen_values = true)]
        strategy: Option<String>,
        /// Search strategies as well as budgets (DeepFlow Fig. 10).
        #[arg(long)]
        search_strategy: bool,
        /// A YAML file of per-component share bounds, e.g. holding
        /// `area: {core: {min: 0.2, max: 0.5}, dram: {fixed: 0.05}}`.
        #[arg(long, value_name = "FILE")]
        bounds: Option<PathBuf>,
        /// Restarts (S): the budget's own split, then seeded random starts.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=crate::opt::budget::MAX_RESTARTS))]
        restarts: u64,
        /// Steps per restart (T).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=crate::opt::budget::MAX_STEPS))]
        steps: u64,
        /// Seed of the random starts.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// What finishes each restart: a transfer search over pairwise share moves, or
        /// nothing (DeepFlow's optimizer as published).
        #[arg(long, default_value = "transfer", value_parser = crate::opt::budget::Finish::NAMES)]
        finish: String,
        /// A served transformer (a workload with `inference:`): the p99 TTFT bound, ms, with
        /// --slo-tpot-ms. The budget is then judged by goodput per device within the SLO
        /// (the engine's fluid steady state; the report adds the simulated goodput before
        /// and after) under the fixed strategy (default: a replica per device).
        #[arg(long, requires = "slo_tpot_ms")]
        slo_ttft_ms: Option<f64>,
        /// With --slo-ttft-ms: the p99 TPOT bound, ms.
        #[arg(long, requires = "slo_ttft_ms")]
        slo_tpot_ms: Option<f64>,
        /// A served transformer: the engine's batch cap (vLLM's max_num_seqs), per replica or per
        /// pipelined replica's engine.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
        max_batch: u64,
        /// Directory for budget.yaml, report.json, trace.csv and the charts
        /// (convergence.svg, budget.svg, sensitivities.svg and, searching strategies too,
        /// pareto.svg).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Write one self-contained HTML page of this run to this file: the report, the
        /// chip's budgets drawn before and after, the sensitivities, the Pareto front, the
        /// numbers as tables, the command line and the input files.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Print the report as JSON (as report.json holds it) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Evaluate a study (studies/*.yaml): the grid of its axes, in parallel, each point
    /// predicted, budget-optimized, strategy-searched or both; CSV, JSON and SVG plots.
    Sweep {
        /// Study file.
        study: PathBuf,
        /// Output folder (default: sweep-<study name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Worker threads (default: one per core; at most 256).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Evaluate only shard K of N (points whose index is K-1 modulo N), e.g. 2/8.
        #[arg(long)]
        shard: Option<String>,
        /// Keep the points the output folder already holds and evaluate the rest.
        #[arg(long)]
        resume: bool,
        /// Print the results as JSON (as results.json holds them, with the counts) instead
        /// of the table of the fastest points.
        #[arg(long)]
        json: bool,
        /// Write one self-contained HTML page of this sweep to this file: its plots, its
        /// summary, every point as a table, the command line and the study file.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Join the output folders of sharded sweeps into one.
    Merge {
        /// Shard output folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Output folder of the merged results.
        #[arg(long)]
        out: PathBuf,
        /// Merge what the folders hold even when a shard is absent or unfinished (by default
        /// that is an error naming each gap).
        #[arg(long)]
        allow_partial: bool,
        /// Print the merged results as JSON (as results.json holds them, with the counts).
        #[arg(long)]
        json: bool,
    },
    /// Replay the published measurements (validation/cases.yaml) and report the model's
    /// error on each; exits non-zero when a case leaves its tolerance.
    Validate {
        /// Validation index (default: the embedded validation/cases.yaml).
        file: Option<PathBuf>,
        /// Print JSON (every case with its source, measured and predicted values and error).
        #[arg(long)]
        json: bool,
    },
    /// DeepFlow Fig. 1: a matrix product (default 64K x 64K x 64K) split every way over m
    /// (data), n (column) and k (row) parallelism at each device count, and the compute
    /// intensity (FLOP per byte of main memory) and time of one device's shard, on one
    /// accelerator (default budgets/v100.yaml). With --out, a CSV and the figure's SVG.
    Intensity(intensity::Args),
    /// TPU v4 Fig. 4: the goodput of slices of a supercomputer of blocks (4096 TPU v4
    /// chips: 64-chip blocks, 4 chips per CPU host, from templates/tpu-v4-pod.yaml) with
    /// optical circuit switches and statically cabled, by host availability.
    Availability {
        /// A system file whose torus is built of blocks (`block:`) and whose `host:` gives
        /// the chips per CPU host (default: the embedded templates/tpu-v4-pod.yaml).
        #[arg(long)]
        system: Option<PathBuf>,
        /// Chips in the supercomputer (default 4096, TPU v4 paper Sec. 2).
        #[arg(long, default_value_t = crate::network::availability::TPU_V4_POD_CHIPS)]
        pod_chips: u64,
        /// Host availabilities, comma-separated (default 0.99, 0.995, 0.999).
        #[arg(long, value_delimiter = ',')]
        host_availability: Vec<f64>,
        /// Slice sizes in chips, multiples of the block (default: the block doubled up to
        /// the pod, and three quarters of the pod; 64, 128, ..., 4096 and 3072 on TPU v4).
        #[arg(long, value_delimiter = ',')]
        slices: Vec<u64>,
        /// Print JSON (goodput by slice and availability) instead of tables.
        #[arg(long)]
        json: bool,
    },
}

/// What a command that ran to the end found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its answer (an infeasible design included, for `predict` and `generate`).
    Done,
    /// A search, `optimize` or `sweep` that ran but found nothing feasible: the report is
    /// printed and the exit code is 3.
    NothingFeasible,
    /// A check that ran and failed (`validate` with a case outside its tolerance): the
    /// report is printed, then this message, and the exit code is 2.
    Failed(&'static str),
}

impl Outcome {
    /// The process exit code of this outcome.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Done => 0,
            Outcome::NothingFeasible => 3,
            Outcome::Failed(_) => 2,
        }
    }
}

/// The command line's grammar. A negative number is a value (which its option then refuses
/// by name: `--devices -1` is not a count), never a flag clap does not know.
fn grammar() -> clap::Command {
    let mut command = Cli::command();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |s| s.allow_negative_numbers(true));
    }
    command
}

/// Runs the command line and returns the process exit code: 0 done, 2 bad input (or a
/// failed validation), 3 a search that ran but found nothing feasible.
pub fn run() -> i32 {
    COMMAND_LINE.with(|c| {
        *c.borrow_mut() = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    });
    let cli = match Cli::from_arg_matches(&grammar().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match execute(cli) {
        Ok(outcome) => {
            if let Outcome::Failed(message) = outcome {
                eprintln!("error: {message}");
            }
            outcome.exit_code()
        }
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            2
        }
    }
}

/// An error as the command line prints it (after `error: `): the error, then each cause on
/// its own line.
pub fn describe(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    text
}

/// The long flags of subcommand `name` (without `--`, as clap spells them), for front ends
/// that map their own arguments onto the command line; `None` for no such subcommand.
pub fn flags(name: &str) -> Option<Vec<String>> {
    let command = grammar();
    let sub = command.get_subcommands().find(|s| s.get_name() == name)?;
    Some(
        sub.get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect(),
    )
}

/// A command's answer, run in-process by [`capture`].
#[derive(Debug)]
pub struct Captured {
    /// How it ended (its exit code is [`Outcome::exit_code`]).
    pub outcome: Outcome,
    /// What `--json` prints, as a value.
    pub json: serde_json::Value,
}

std::thread_local! {
    /// Where [`print_json`] puts the answer while [`capture`] runs a command on this thread.
    static CAPTURED: std::cell::RefCell<Option<Option<serde_json::Value>>> =
        const { std::cell::RefCell::new(None) };
}

/// Prints a command's `--json` answer, or hands it to [`capture`] when that runs the
/// command: the one place a `--json` answer leaves a command.
pub(crate) fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let capturing = CAPTURED.with(|c| c.borrow().is_some());
    if capturing {
        let value = serde_json::to_value(value)?;
        CAPTURED.with(|c| *c.borrow_mut() = Some(Some(value)));
    } else {
        println!("{}", serde_json::to_string_pretty(value)?);
    }
    Ok(())
}

/// Runs the command line `args` (the program name first, as `std::env::args` gives it)
/// in-process and returns its `--json` answer as a value instead of printing it: the same
/// parsing, checks and code path as the command, so the same answer. Bad input, a clap
/// usage error included, is an error with the message the command prints; a command that
/// prints no JSON (no `--json` given) is an error too. Tables and progress bars are not
/// drawn (a `--json` run draws none).
pub fn capture<I, T>(args: I) -> anyhow::Result<Captured>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    COMMAND_LINE.with(|c| {
        *c.borrow_mut() = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    });
    let matches = grammar()
        .try_get_matches_from(args)
        .map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim_end()))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Reset on the way out, even when the command fails.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CAPTURED.with(|c| *c.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    CAPTURED.with(|c| *c.borrow_mut() = Some(None));
    let outcome = execute(cli)?;
    match CAPTURED.with(|c| c.borrow_mut().take().flatten()) {
        Some(json) => Ok(Captured { outcome, json }),
        None => bail!("the command printed no JSON answer (it needs --json)"),
    }
}

fn execute(cli: Cli) -> anyhow::Result<Outcome> {
    let done: anyhow::Result<()> = match cli.command {
        Command::Import(args) => import::run(args),
        Command::Generate { design, json } => generate_command(design, json),
        Command::Sweep {
            study,
            out,
            jobs,
            shard,
            resume,
            json,
            report,
        } => {
            return sweep::run(sweep::Args {
                study,
                out,
                jobs: jobs.map(|j| j as usize),
                shard,
                resume,
                json,
                report,
            })
        }
        Command::Merge {
            dirs,
            out,
            allow_partial,
            json,
        } => sweep::merge(&dirs, &out, allow_partial, json),
        Command::Validate { file, json } => return validate::run(file, json),
        Command::Optimize {
            workload,
            system,
            design:
                DesignArgs {
                    budget,
                    template,
                    tech,
                },
            devices,
            strategy,
            search_strategy,
            bounds,
            restarts,
            steps,
            seed,
            finish,
            slo_ttft_ms,
            slo_tpot_ms,
            max_batch,
            out,
            report,
            json,
        } => {
            return optimize::run(optimize::Args {
                slo_ms: slo_ttft_ms.zip(slo_tpot_ms),
                max_batch,
                workload,
                system,
                budget,
                template,
                tech,
                devices,
                strategy,
                search_strategy,
                bounds,
                settings: crate::opt::budget::Settings {
                    restarts: restarts as usize,
                    steps,
                    seed,
                    finish: crate::opt::budget::Finish::parse(&finish)
                        .expect("clap accepts only Finish::NAMES"),
                    ..Default::default()
                },
                out,
                report,
                json,
            })
        }
        Command::Predict(args) => return predict_command(args),
        Command::Search(args) => return search::run(args),
        Command::Serve(args) => return serve::run(args),
        Command::Intensity(args) => intensity::run(args),
        Command::Availability {
            system,
            pod_chips,
            host_availability,
            slices,
            json,
        } => availability(
            system.as_deref(),
            pod_chips,
            &host_availability,
            &slices,
            json,
        ),
    };
    done.map(|()| Outcome::Done)
}

/// Runs `availability` (TPU v4 Fig. 4): a table of goodput by slice size and host
/// availability, with and without OCS.
fn availability(
    system: Option<&Path>,
    pod_chips: u64,
    hosts: &[f64],
    slices: &[u64],
    json: bool,
) -> anyhow::Result<()> {
    use crate::network::availability::{goodput, Pod};
    let (source, file) = match system {
        Some(p) => (Source::Disk, p.to_path_buf()),
        None => (Source::Embedded, PathBuf::from("templates/tpu-v4-pod.yaml")),
    };
    let system = crate::network::System::load(source, &file)?;
    let pod = Pod::of(&system, pod_chips, ("(command line)", "--pod-chips"))?;
    let hosts = if hosts.is_empty() {
        vec![0.99, 0.995, 0.999]
    } else {
        // Each value once, in the order given (intensity's device counts likewise).
        let mut once: Vec<f64> = Vec::new();
        for &h in hosts {
            if !once.contains(&h) {
                once.push(h);
            }
        }
        once
    };
    // Default slices: the block doubled up to the pod, and three quarters of it (Fig. 4).
    let slices = if slices.is_empty() {
        let mut s: Vec<u64> = std::iter::successors(Some(pod.block_chips), |c| Some(c * 2))
            .take_while(|&c| c <= pod.chips)
            .collect();
        let three_quarters = pod.chips / 4 * 3;
        if three_quarters % pod.block_chips == 0 && !s.contains(&three_quarters) {
            s.push(three_quarters);
        }
        if !s.contains(&pod.chips) {
            s.push(pod.chips);
        }
        s.sort_unstable();
        s
    } else {
        let mut once: Vec<u64> = Vec::new();
        for &s in slices {
            if !once.contains(&s) {
                once.push(s);
            }
        }
        once
    };
    let mut rows = Vec::new();
    for &a in &hosts {
        for &s in &slices {
            rows.push(goodput(&pod, s, a)?);
        }
    }
    if json {
        print_json(&rows)?;
        return Ok(());
    }
    println!(
        "goodput: expected share of a {}-chip {} supercomputer running slices ({}-chip blocks, \
         {} chips per host; TPU v4 Fig. 4)",
        pod.chips, system.name, pod.block_chips, pod.chips_per_host
    );
    println!(
        "{:>6} {:>7} {:>10} {:>10} {:>16} {:>16}",
        "hosts", "slice", "OCS", "static", "one slice, OCS", "one slice, static"
    );
    for r in rows {
        println!(
            "{:>5.1}% {:>7} {:>9.1}% {:>9.1}% {:>15.1}% {:>15.1}%",
            100.0 * r.host_availability,
            r.slice_chips,
            100.0 * r.with_ocs,
            100.0 * r.static_cabled,
            100.0 * r.one_slice_with_ocs,
            100.0 * r.one_slice_static
        );
    }
    Ok(())
}

/// Runs `generate`: derives the design's architecture and prints it as JSON or tables.
fn generate_command(
    DesignArgs {
        budget,
        template,
        tech,
    }: DesignArgs,
    json: bool,
) -> anyhow::Result<()> {
    let design = load_design(budget.as_deref(), template.as_deref(), tech.as_deref())?;
    let arch = generate(&design);
    if json {
        print_json(&arch)?;
    } else {
        if budget.is_none() {
            println!(
                "No --budget given: using the embedded default {} (template {}, technology {}).\n",
                design.budget_file, design.template_file, design.tech_file
            );
        }
        print!("{}", table::render(&design, &arch));
    }
    Ok(())
}

/// The arguments of `predict`.
#[derive(clap::Args, Debug)]
struct PredictArgs {
    /// Workload file (workloads/*.yaml).
    #[arg(long)]
    workload: Option<PathBuf>,
    /// Budget file; it names its template and technology file.
    #[arg(long, conflicts_with = "arch")]
    budget: Option<PathBuf>,
    /// Template file overriding the one the budget names.
    #[arg(long, conflicts_with = "arch")]
    template: Option<PathBuf>,
    /// Technology file overriding the one the budget names.
    #[arg(long, conflicts_with = "arch")]
    tech: Option<PathBuf>,
    /// A derived architecture saved by `generate --json`, instead of a budget.
    #[arg(long)]
    arch: Option<PathBuf>,
    /// List every kernel, not only the per-class breakdown (one accelerator; a served model's
    /// prefill and decode step each).
    #[arg(long)]
    kernels: bool,
    /// A system template (templates/dgx-a100.yaml, templates/tpu-v4-pod.yaml): the
    /// accelerator and the fabrics joining the devices. Makes the prediction distributed;
    /// --budget (an optimized budget.yaml, say), --template and --tech replace the
    /// accelerator it names.
    #[arg(long, conflicts_with = "arch")]
    system: Option<PathBuf>,
    /// Total devices (a multiple of the devices per node); default: the system's own.
    #[arg(long, requires = "system")]
    devices: Option<u64>,
    /// Parallelism strategy: a YAML file, the paper's notation (RC-4-2-d8-p2,
    /// CR-16-d4-p1), the short form (t8-p8-d16-mb1-i3-sp-rc=selective), MAD Max's
    /// (INTRA, INTER) such as "(TP, DDP)", or one short form per layer type
    /// (embedding:d128,attention:t8-d16,dense:d128-z3-hs8). Default: data parallelism over
    /// all devices.
    #[arg(long, requires = "system", allow_hyphen_values = true)]
    strategy: Option<String>,
    /// Reshape the system's mesh or torus into this slice, e.g. 4x8x16 (TPU v4 slices
    /// are whole 4x4x4 blocks); the device count follows.
    #[arg(long, requires = "system")]
    slice: Option<String>,
    #[command(flatten)]
    host: distributed::HostFlags,
    /// Grid carbon intensity (kg CO2e per kWh) for operational emissions (TPU v4 Sec. 7.6).
    #[arg(long)]
    grid_kg_per_kwh: Option<f64>,
    /// Power usage effectiveness of the datacenter (with --grid-kg-per-kwh; default 1.1).
    #[arg(long, requires = "grid_kg_per_kwh")]
    pue: Option<f64>,
    /// Print JSON (a stable interface for scripts) instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the kernels (one accelerator), or the kernel classes and collectives (a
    /// system), to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Directory for the roofline chart (roofline.svg; one per kind of pipeline stage on a
    /// system, a served model's prefill and decode on one accelerator) and the data behind
    /// it (roofline.csv).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the iteration's timeline to this file as Chrome trace-event JSON (open it in
    /// ui.perfetto.dev or chrome://tracing): per pipeline stage its compute, its sends and,
    /// per fabric, its blocking collectives and communication stream (with --system).
    #[arg(long, requires = "system")]
    trace: Option<PathBuf>,
    /// Write one self-contained HTML page of this run to this file: the report, the
    /// roofline (and on a system the timeline) charts, the numbers as tables, the command
    /// line and the input files.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// Runs `predict`: distributed on `--system`, else one iteration on one accelerator.
fn predict_command(a: PredictArgs) -> anyhow::Result<Outcome> {
    let plot_files = a.plot.as_ref().map(|d| d.join("roofline.csv"));
    distinct_outputs(
        &[
            ("--csv", a.csv.as_deref()),
            ("--trace", a.trace.as_deref()),
            ("--report", a.report.as_deref()),
            ("--plot's roofline.csv", plot_files.as_deref()),
        ],
        &[
            a.workload.as_deref(),
            a.budget.as_deref(),
            a.template.as_deref(),
            a.tech.as_deref(),
            a.arch.as_deref(),
            a.system.as_deref(),
        ],
    )?;
    // The chart folder first: a --csv may go into it.
    if let Some(dir) = &a.plot {
        plot::prepare(dir)?;
    }
    if let Some(path) = &a.csv {
        output_file("--csv", path)?;
    }
    if let Some(system) = &a.system {
        if a.kernels {
            bail!(
                "--kernels lists one accelerator's kernels (--budget, no --system); on a system \
                 the report gives each layer type's time by phase and the collectives, and \
                 --csv writes the kernel classes and collectives"
            );
        }
        return distributed::run(distributed::Args {
            workload: a.workload.as_deref(),
            system,
            accelerator: (
                a.budget.as_deref(),
                a.template.as_deref(),
                a.tech.as_deref(),
            ),
            devices: a.devices,
            strategy: a.strategy.as_deref(),
            slice: a.slice.as_deref(),
            host: &a.host,
            carbon: carbon_rates(a.grid_kg_per_kwh, a.pue)?,
            json: a.json,
            csv: a.csv.as_deref(),
            plot: a.plot.as_deref(),
            trace: a.trace.as_deref(),
            report: a.report.as_deref(),
        })
        .map(|()| Outcome::Done);
    }
    let workload_file = a
        .workload
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_WORKLOAD));
    let source = if a.workload.is_some() {
        Source::Disk
    } else {
        Source::Embedded
    };
    if let Some(dir) = &a.plot {
        plot::prepare(dir)?;
    }
    if let Some(path) = &a.report {
        output_file("--report", path)?;
    }
    let wl = import::workload(source, &workload_file, None)?;
    let (architecture, described) = load_architecture(&a)?;
    let graph = wl.graph();
    let architecture = crate::perf::as_run(&architecture, &graph);
    let mut evaluator = Evaluator::new(&architecture);
    check_precision(&workload_file, &wl, &architecture)?;
    if let Some((t, spec)) = wl.serving() {
        if t.speculative.is_some() {
            anyhow::bail!(
                "{}: inference.speculative is priced by the distributed serving model: give \
                 --system (a one-device part of a node, --devices 1, for one accelerator)",
                workload_file.display()
            );
        }
        let p = evaluator.predict_inference(t, spec, &architecture.violations);
        let energy = crate::perf::inference_energy(&architecture, &p);
        let carbon = carbon_rates(a.grid_kg_per_kwh, a.pue)?
            .map(|r| r.kg_per_joule() * energy.joules_per_token);
        let mut value = serde_json::to_value(&p)?;
        value["energy"] = serde_json::to_value(&energy)?;
        if let Some(kg) = carbon {
            value["co2e_kg_per_token"] = kg.into();
        }
        let text = format!(
            "{}{}{}",
            predict::render_inference(&p, &architecture),
            predict::render_energy(
                &energy,
                "batch",
                carbon.map(|kg| (kg, "output token")),
                "tokens"
            ),
            if a.kernels {
                predict::render_served_kernels(&p)
            } else {
                String::new()
            }
        );
        if a.json {
            print_json(&value)?;
        } else {
            println!("Accelerator: {described}.\n");
            print!("{text}");
        }
        if let Some(path) = &a.csv {
            predict::write_csv(path, &serde_json::to_value(&p)?)?;
        }
        let m = &evaluator.machine;
        let charts = [
            ("prefill", Roofline::of(m, &p.prefill.kernels)),
            ("decode", Roofline::of(m, &p.decode.kernels)),
        ];
        if let Some(dir) = &a.plot {
            predict::rooflines(&p.workload, &architecture.template, &charts)?.write(dir)?;
        }
        if let Some(path) = &a.report {
            let text = format!("Accelerator: {described}.\n\n{text}");
            let charts = predict::rooflines(&p.workload, &architecture.template, &charts)?;
            let headline = format!(
                "time to first token {}, time per output token {}",
                predict::seconds(p.time_to_first_token_s),
                predict::seconds(p.time_per_output_token_s)
            );
            predict_report(path, &a, (&p.workload, &headline), &text, &charts, &value)?;
        }
        return Ok(Outcome::Done);
    }
    let prediction = evaluator.predict(&graph, &architecture.violations);
    let energy = crate::perf::energy(&architecture, &prediction);
    let carbon = carbon_rates(a.grid_kg_per_kwh, a.pue)?.map(|r| r.kg_per_joule() * energy.total_j);
    if a.json {
        let mut value = serde_json::to_value(&prediction)?;
        value["energy"] = serde_json::to_value(&energy)?;
        if let Some(kg) = carbon {
            value["co2e_kg_per_iteration"] = kg.into();
        }
        print_json(&value).context("writing the prediction as JSON")?;
    } else {
        if a.workload.is_none() {
            println!("No --workload given: using the embedded default {DEFAULT_WORKLOAD}.");
        }
        println!("Accelerator: {described}.\n");
        print!(
            "{}",
            predict::render(&prediction, architecture.peak_flops_per_s, a.kernels)
        );
        print!(
            "{}",
            predict::render_energy(
                &energy,
                "iteration",
                carbon.map(|kg| (kg, "iteration")),
                distributed::unit_of(&wl)
            )
        );
    }
    if let Some(path) = &a.csv {
        predict::write_csv(path, &serde_json::to_value(&prediction)?)?;
    }
    let chart = || {
        let r = Roofline::of(&evaluator.machine, &prediction.kernels);
        let device = &architecture.template;
        predict::rooflines(&prediction.workload, device, &[("step", r)])
    };
    if let Some(dir) = &a.plot {
        chart()?.write(dir)?;
    }
    if let Some(path) = &a.report {
        let text = format!(
            "Accelerator: {described}.\n\n{}{}",
            predict::render(&prediction, architecture.peak_flops_per_s, a.kernels),
            predict::render_energy(
                &energy,
                "iteration",
                carbon.map(|kg| (kg, "iteration")),
                distributed::unit_of(&wl)
            )
        );
        let mut value = serde_json::to_value(&prediction)?;
        value["energy"] = serde_json::to_value(&energy)?;
        if let Some(kg) = carbon {
            value["co2e_kg_per_iteration"] = kg.into();
        }
        let headline = format!(
            "{} per iteration, {:.1}% of the peak{}",
            predict::seconds(prediction.time_per_iteration_s),
            100.0 * prediction.utilization,
            if prediction.feasible {
                ""
            } else {
                ": INFEASIBLE (see the report)"
            }
        );
        let name = (prediction.workload.as_str(), headline.as_str());
        predict_report(path, &a, name, &text, &chart()?, &value)?;
    }
    Ok(Outcome::Done)
}

/// `predict --report` on one accelerator: the report, the roofline, the answer's numbers,
/// the inputs.
fn predict_report(
    path: &std::path::Path,
    a: &PredictArgs,
    (workload, headline): (&str, &str),
    text: &str,
    charts: &predict::Rooflines,
    value: &serde_json::Value,
) -> anyhow::Result<()> {
    let mut r = report::Report::new(&format!("stackflow predict: {workload}"), &command_line());
    r.headline(headline);
    r.heading("Roofline");
    charts.report(&mut r);
    r.text("Prediction", text);
    r.tables("The numbers (as --json gives them)", value);
    use report::Input::{Default, Given};
    let workload = match &a.workload {
        Some(w) => Given("workload", Some(w)),
        None => Default("workload", DEFAULT_WORKLOAD.as_ref()),
    };
    report::add_inputs(
        &mut r,
        &[
            workload,
            Given("budget", a.budget.as_deref()),
            Given("template", a.template.as_deref()),
            Given("technology", a.tech.as_deref()),
            Given("architecture", a.arch.as_deref()),
        ],
    );
    r.write(path)
}

std::thread_local! {
    /// The command line being run (the program name first), for reports to quote.
    static COMMAND_LINE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The command line being run, as a report quotes it (`stackflow` and its arguments).
pub(super) fn command_line() -> Vec<String> {
    COMMAND_LINE.with(|c| {
        let mut args = c.borrow().clone();
        if let Some(first) = args.first_mut() {
            *first = "stackflow".into();
        }
        args
    })
}

/// Refuses an output file `--flag path` that cannot be written whole: a directory, or a
/// file in a folder that does not exist (checked before any work, so nothing is left half
/// done).
pub(super) fn output_file(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {}: a directory, not a file to write",
        path.display()
    );
    let parent = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    anyhow::ensure!(
        parent.is_dir(),
        "{flag} {}: the folder {} does not exist",
        path.display(),
        parent.display()
    );
    Ok(())
}

/// Refuses output files that would overwrite each other or an input of the run (the same
/// path, as the working directory resolves it): checked before any work.
pub(super) fn distinct_outputs(
    outputs: &[(&str, Option<&std::path::Path>)],
    inputs: &[Option<&std::path::Path>],
) -> anyhow::Result<()> {
    let resolved = |p: &std::path::Path| {
        std::path::absolute(p).map_or_else(|_| p.to_path_buf(), |a| crate::config::normalize(&a))
    };
    let given: Vec<(&str, std::path::PathBuf)> = outputs
        .iter()
        .filter_map(|(flag, p)| p.map(|p| (*flag, resolved(p))))
        .collect();
    for (i, (flag, path)) in given.iter().enumerate() {
        if let Some((other, _)) = given[..i].iter().find(|(_, q)| q == path) {
            anyhow::bail!(
                "{other} and {flag} name the same file {}: give each its own",
                path.display()
            );
        }
        if inputs
            .iter()
            .flatten()
            .any(|input| resolved(input) == *path)
        {
            anyhow::bail!(
                "{flag} {}: an input of this run; writing it would overwrite the input",
                path.display()
            );
        }
    }
    Ok(())
}

/// Refuses an output folder `--flag path` that cannot be made: an existing file, or a path
/// under one (checked before any work).
pub(super) fn output_folder(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    if let Some(file) = path.ancestors().find(|p| p.is_file()) {
        anyhow::bail!(
            "{flag} {}: {} is a file, not a folder to write into",
            path.display(),
            file.display()
        );
    }
    Ok(())
}

/// Refuses an output file `--flag path` that cannot be written whole where the command makes
/// the folders it lacks: a directory, or a path under a file (checked before any work).
pub(super) fn output_file_making_folders(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {}: a directory, not a file to write",
        path.display()
    );
    match path
        .parent()
        .and_then(|d| d.ancestors().find(|p| p.is_file()))
    {
        Some(file) => anyhow::bail!(
            "{flag} {}: {} is a file, not a folder to write into",
            path.display(),
            file.display()
        ),
        None => Ok(()),
    }
}

/// A saved architecture's numbers in their ranges, and the fields derived from others
/// agreeing with them (an edited file could say anything): what `generate` writes passes,
/// an infeasible design's zeros included (the model reports those as violations).
fn check_architecture(file: &str, a: &Architecture) -> Result<(), crate::config::ConfigError> {
    use crate::config::{Checker, ConfigError};
    let check = Checker { file };
    let c = &a.core;
    check.non_negative("core.peak_flops_per_s", c.peak_flops_per_s)?;
    check.within("core.max_utilization", c.max_utilization, 1e-6, 1.0)?;
    check.non_negative("core.kernel_launch_s", c.kernel_launch_s)?;
    check.non_negative("core.frequency_hz", c.frequency_hz)?;
    for (p, share) in &c.throughput_by_precision {
        check.positive(
            &format!("core.throughput_by_precision.{}", p.name()),
            *share,
        )?;
    }
    for (key, w) in [
        ("core.idle_power_w", c.idle_power_w),
        ("core.active_power_w", c.active_power_w),
    ] {
        if let Some(w) = w {
            check.within(key, w, 0.0, crate::template::CHIP_POWER_MAX_W)?;
        }
    }
    if let Some(f) = c.collective_compute_share {
        check.within("core.collective_compute_share", f, 0.0, 0.999)?;
    }
    let m = &a.main_memory;
    check.non_negative("main_memory.bandwidth_bytes_per_s", m.bandwidth_bytes_per_s)?;
    check.non_negative("main_memory.capacity_bytes", m.capacity_bytes)?;
    check.non_negative("main_memory.latency_s", m.latency_s)?;
    for (i, l) in a.on_chip.iter().enumerate() {
        check.non_negative(&format!("on_chip[{i}].capacity_bytes"), l.capacity_bytes)?;
        check.non_negative(
            &format!("on_chip[{i}].bandwidth_bytes_per_s"),
            l.bandwidth_bytes_per_s,
        )?;
        check.non_negative(&format!("on_chip[{i}].latency_s"), l.latency_s)?;
    }
    let agree = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
    for (key, value, from, source) in [
        (
            "peak_flops_per_s",
            a.peak_flops_per_s,
            "core.peak_flops_per_s",
            c.peak_flops_per_s,
        ),
        (
            "core.sustained_flops_per_s",
            c.sustained_flops_per_s,
            "core.peak_flops_per_s x core.max_utilization",
            c.peak_flops_per_s * c.max_utilization,
        ),
        (
            "memory_bandwidth_bytes_per_s",
            a.memory_bandwidth_bytes_per_s,
            "main_memory.bandwidth_bytes_per_s",
            m.bandwidth_bytes_per_s,
        ),
        (
            "memory_capacity_bytes",
            a.memory_capacity_bytes,
            "main_memory.capacity_bytes",
            m.capacity_bytes,
        ),
    ] {
        if !agree(value, source) {
            return Err(ConfigError::invalid(
                file,
                key,
                value,
                format!("{from} = {source} (a derived field agrees with what it is derived from)"),
            ));
        }
    }
    Ok(())
}

/// The accelerator `predict` runs on, from `--arch` or a budget, and how to describe it.
fn load_architecture(a: &PredictArgs) -> anyhow::Result<(Architecture, String)> {
    Ok(match &a.arch {
        Some(path) => {
            let file = path.display().to_string();
            let text = Source::Disk.read(path)?;
            let arch: Architecture = parse_json(&file, &text)?;
            check_architecture(&file, &arch)?;
            (arch, format!("architecture {file}"))
        }
        None => {
            let budget = a.budget.as_deref().map(import::budget).transpose()?;
            let design = load_design(budget.as_deref(), a.template.as_deref(), a.tech.as_deref())?;
            let described = match (&a.budget, &budget) {
                (Some(given), Some(used)) if given != used => {
                    format!("DeepFlow hardware {} (imported in-line)", given.display())
                }
                _ => format!(
                    "budget {} (template {}, technology {})",
                    design.budget_file, design.template_file, design.tech_file
                ),
            };
            (generate(&design), described)
        }
    })
}

/// Refuses a workload whose precision the accelerator's template cannot compute.
/// A system's complaint about its device count, attributed to `--devices` when the count
/// came from that flag (`given`), else unchanged.
pub(crate) fn devices_given(
    e: crate::config::ConfigError,
    given: Option<u64>,
) -> crate::config::ConfigError {
    match given {
        Some(_) => e.given_as("command line", "--devices"),
        None => e,
    }
}

pub(crate) fn check_precision(
    file: &std::path::Path,
    workload: &Workload,
    arch: &Architecture,
) -> anyhow::Result<()> {
    let machine = Evaluator::new(arch).machine;
    // The graph's products, and every precision a key asks products to run in (a served
    // model's FP8 weights, which its serving graphs use).
    let asked = workload
        .precisions()
        .into_iter()
        .filter(|(key, _)| key.starts_with("inference."))
        .find(|(_, p)| machine.matrix_rate(*p).is_none())
        .map(|(_, p)| {
            let supported: Vec<&str> = machine
                .throughput_by_precision
                .keys()
                .map(|p| p.name())
                .collect();
            (p, supported.join(", "))
        });
    if let Some((precision, supported)) = unsupported(&machine, &workload.graph()).or(asked) {
        // The key that asked for it (a role's, when `precisions:` set it).
        let roles = workload.precisions();
        let key = roles
            .iter()
            .find(|(_, p)| *p == precision)
            .map_or("precision", |(key, _)| key.as_str());
        bail!(
            "{}: {key} = {}: the template {} supports only {supported} \
             (compute.throughput_by_precision)",
            file.display(),
            precision.name(),
            arch.template
        );
    }
    Ok(())
}

/// Grid intensity and PUE for operational CO2e (TPU v4 paper Sec. 7.6).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CarbonRates {
    pub grid_kg_per_kwh: f64,
    pub pue: f64,
}

impl CarbonRates {
    /// kg CO2e per joule the devices draw: energy x PUE x grid intensity.
    pub fn kg_per_joule(self) -> f64 {
        self.pue * self.grid_kg_per_kwh / 3.6e6
    }
}

/// Checks `--grid-kg-per-kwh` and `--pue` (default 1.1).
fn carbon_rates(grid: Option<f64>, pue: Option<f64>) -> anyhow::Result<Option<CarbonRates>> {
    let Some(g) = grid else { return Ok(None) };
    // Physical ranges: coal-fired grids emit ~1 kg CO2e per kWh; datacenters run a PUE of
    // 1.1-2.
    if !(0.0..=5.0).contains(&g) {
        bail!(
            "--grid-kg-per-kwh {}: expected a carbon intensity from 0 to 5 kg CO2e per kWh",
            crate::config::number(g)
        );
    }
    let pue = pue.unwrap_or(1.1);
    if !(1.0..=5.0).contains(&pue) {
        bail!(
            "--pue {}: expected a power usage effectiveness from 1 to 5 (facility over IT \
             energy)",
            crate::config::number(pue)
        );
    }
    Ok(Some(CarbonRates {
        grid_kg_per_kwh: g,
        pue,
    }))
}

/// Loads a design from a budget on disk, or the embedded default budget.
fn load_design(
    budget: Option<&std::path::Path>,
    template: Option<&std::path::Path>,
    tech: Option<&std::path::Path>,
) -> anyhow::Result<Design> {
    load_design_or(budget, template, tech, DEFAULT_BUDGET)
}

/// [`load_design`] with another embedded budget, `default`, when none is given.
fn load_design_or(
    budget: Option<&std::path::Path>,
    template: Option<&std::path::Path>,
    tech: Option<&std::path::Path>,
    default: &str,
) -> anyhow::Result<Design> {
    let (source, budget_path) = match budget {
        Some(path) => (Source::Disk, path.to_path_buf()),
        None => (Source::Embedded, PathBuf::from(default)),
    };
    Ok(Design::load(DesignFiles {
        source,
        budget: &budget_path,
        template,
        tech,
    })?)
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every flag and argument of every subcommand says what it does in `--help`.
    #[test]
    fn every_flag_has_help_text() {
        let command = Cli::command();
        let (mut missing, mut checked) = (Vec::new(), 0);
        for sub in command.get_subcommands() {
            for arg in sub.get_arguments() {
                checked += 1;
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{} --{}", sub.get_name(), arg.get_id()));
                }
            }
        }
        assert!(checked > 50, "{checked} arguments");
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
