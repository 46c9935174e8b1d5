//! `stackflow search`: the strategy search ([`crate::opt::search`]) for a workload on a
//! system: the top N with time, memory per device, MFU and what binds; the Pareto front of
//! time against memory per device; the search's counts; JSON and CSV for scripts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{write_atomic, Source};
use crate::distributed::LayeredPrediction;
use crate::opt::search::layered::{search_layered, LayeredResult};
use crate::opt::search::serving::{search_serving, ServingResult, ServingSettings};
use crate::opt::search::{self, Candidate, SearchResult};
use crate::opt::Progress;
use crate::workload::Workload;
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::distributed::{load_strategy, load_system};
use super::table::{aligned, gib};
use super::{Outcome, DEFAULT_WORKLOAD};

/// The arguments of `search`.
#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// Workload file (default: the embedded workloads/gpt-1.7b.yaml).
    #[arg(long)]
    workload: Option<PathBuf>,
    /// System template (templates/dgx-a100.yaml, templates/tpu-v4-pod.yaml).
    #[arg(long)]
    system: PathBuf,
    /// Total devices (a multiple of the devices per node); default: the system's own.
    #[arg(long, conflicts_with = "slice")]
    devices: Option<u64>,
    /// Reshape the system's mesh or torus into this slice, e.g. 4x8x16.
    #[arg(long)]
    slice: Option<String>,
    #[command(flatten)]
    host: super::distributed::HostFlags,
    /// The strategy to start from, always a candidate (the result is never slower when it
    /// fits): a YAML file, MAD Max's (INTRA, INTER), the paper's notation or the short
    /// form. Its schedule (GPipe or 1F1B) is kept for every candidate. Default: data
    /// parallelism over every device with the least ZeRO stage that fits, else the first
    /// strategy that fits, else the first that runs the workload.
    #[arg(long, allow_hyphen_values = true)]
    base: Option<String>,
    /// Strategies listed by time.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    top: u64,
    /// Price every strategy that fits instead of pruning by lower bounds (slower; the same
    /// best, top N and Pareto front).
    #[arg(long)]
    exhaustive: bool,
    /// Then give each layer type (embeddings, attention, dense layers, experts, a feature
    /// interaction) its own split, starting from the first 4 strategies of the top N that
    /// fit (MAD Max Sec. 4), and print the best per-layer-type strategy beside the best
    /// uniform one, both priced per layer type.
    #[arg(long)]
    per_layer_type: bool,
    /// Write the top N and the Pareto front to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Directory for the Pareto chart (pareto.svg: time against memory per device, the
    /// chosen strategy and the base marked) and its data (pareto.csv).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write one self-contained HTML page of this search to this file: the report, the
    /// Pareto chart, the candidates as tables, the command line and the input files.
    #[arg(long)]
    report: Option<PathBuf>,
    /// A serving workload only: leave prefill/decode disaggregation out of the search.
    #[arg(long)]
    no_disaggregate: bool,
    /// A serving workload (one with `inference:`): the arrivals, the engine's policy (the
    /// search varies the batch cap up to --max-batch and tries chunked prefill) and the SLO
    /// it ranks deployments by, goodput per device.
    #[command(flatten)]
    engine: super::serve::EngineFlags,
    /// Print JSON (a stable interface for scripts) instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    workload: String,
    system: &'a str,
    devices: u64,
    base_strategy: String,
    feasible: bool,
    /// Base time over best time.
    speedup: Option<f64>,
    /// Wall time (left out of JSON: the same inputs give the same bytes).
    #[serde(skip)]
    wall_s: f64,
    #[serde(flatten)]
    search: &'a SearchResult,
    /// With --per-layer-type.
    #[serde(skip_serializing_if = "Option::is_none")]
    per_layer_type: Option<LayeredResult>,
}

pub fn run(a: SearchArgs) -> anyhow::Result<Outcome> {
    if let Some(path) = &a.report {
        super::output_file("--report", path)?;
    }
    if let Some(path) = &a.csv {
        super::output_file_making_folders("--csv", path)?;
    }
    if let Some(dir) = &a.plot {
        super::output_folder("--plot", dir)?;
    }
    let (source, workload_file) = match &a.workload {
        Some(p) => (Source::Disk, p.clone()),
        None => (Source::Embedded, PathBuf::from(DEFAULT_WORKLOAD)),
    };
    let workload = Workload::load(source, &workload_file)?;
    if workload.serving().is_some() {
        return run_serving(&a, &workload, &workload_file);
    }
    let mut serving_flags = a.engine.given();
    if a.no_disaggregate {
        serving_flags.push("--no-disaggregate");
    }
    if !serving_flags.is_empty() {
        bail!(
            "{}: {} search a served transformer (a workload with `inference:`), as do the \
             other engine flags; this one trains",
            workload_file.display(),
            serving_flags.join(", ")
        );
    }
    let system = load_system(&a.system, a.slice.as_deref(), &a.host)?;
    let arch = crate::perf::as_run(&system.accelerator()?, &workload.graph());
    let devices = a.devices.unwrap_or_else(|| system.default_devices());
    let net = system
        .network(&arch, devices)
        .map_err(|e| super::devices_given(e, a.devices))?;
    super::check_precision(&workload_file, &workload, &arch)?;
    let base = match &a.base {
        Some(text) => {
            let base = load_strategy(Some(text), &system, devices)
                .with_context(|| format!("--base {text}"))?;
            base.check_devices(devices)
                .with_context(|| format!("--base {base} on --devices {devices}"))?;
            // A base the workload cannot run is bad input, with the fit's reason.
            crate::distributed::Plan::new(&workload, &arch, &net, &base)
                .with_context(|| format!("--base {base}"))?;
            base
        }
        // Data parallelism with the least sharding that fits (see `search::baseline`).
        None => search::baseline(&workload, &arch, &net, devices).ok_or_else(|| {
            let tried = search::enumerate(&workload, devices).map_or(0, |s| s.len());
            anyhow::anyhow!(
                "--devices {devices}: none of the {tried} strategies for {devices} devices runs \
                 workload {} (its batch, layers, heads or experts do not split that way); try \
                 another device count",
                workload.name()
            )
        })?,
    };
    let space = search::enumerate_from(&workload, devices, system.node_size(devices), &base)
        .map_err(|e| anyhow::anyhow!("--devices {devices}: {e}"))?;
    let settings = search::Settings {
        top: a.top as usize,
        prune: !a.exhaustive,
    };
    let bar = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(3 * (space.len() as u64 + 1))
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} fit, time, price")
            .expect("static template"),
    );
    let progress = {
        let bar = bar.clone();
        Progress::new(move |n| bar.inc(n))
    };
    if let Some(dir) = &a.plot {
        super::plot::prepare(dir)?;
    }
    let start = Instant::now();
    let r = search::search(
        &workload,
        &arch,
        &net,
        &space,
        Some(&base),
        &settings,
        &progress,
    );
    let per_layer_type = a.per_layer_type.then(|| {
        let starts = crate::opt::search::layered::starts(&r);
        search_layered(&workload, &arch, &net, system.node_size(devices), &starts)
    });
    let wall_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let report = Report {
        workload: workload.name(),
        system: &system.name,
        devices,
        base_strategy: base.to_string(),
        feasible: r.best.is_some(),
        speedup: match (&r.base, &r.best) {
            (Some(b), Some(x)) if b.feasible => {
                Some(b.time_per_iteration_s / x.time_per_iteration_s)
            }
            _ => None,
        },
        wall_s,
        search: &r,
        per_layer_type,
    };
    if let Some(path) = &a.csv {
        write_csv(path, &r)?;
    }
    let title = format!(
        "{} on {} x {}: time against memory per device",
        workload.name(),
        devices,
        system.name
    );
    if let Some(dir) = &a.plot {
        write_pareto(dir, &title, &r, arch.memory_capacity_bytes)?;
    }
    let text = render(&report);
    let mut value = serde_json::to_value(&report)?;
    value["headline"] = headline(&report).into();
    if a.json {
        super::print_json(&value)?;
    } else {
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        println!("{first}");
        if a.workload.is_none() {
            println!("(no --workload given: the embedded default {DEFAULT_WORKLOAD})");
        }
        print!("{rest}");
        if let Some(path) = &a.csv {
            println!("\nwrote {}", path.display());
        }
    }
    if let Some(path) = &a.report {
        let heading = format!(
            "stackflow search: {} on {} x {}",
            workload.name(),
            devices,
            system.name
        );
        let mut page = super::report::Report::new(&heading, &super::command_line());
        page.headline(text.lines().next().unwrap_or_default());
        page.heading("Pareto front");
        let svg = super::plot::pareto_svg(&title, &r, arch.memory_capacity_bytes, "the base")?;
        page.chart(&svg, Some(&csv_text(&r)?));
        page.text("Search", &text);
        page.tables("The numbers (as --json gives them)", &value);
        inputs(&mut page, &a, &workload_file);
        page.write(path)?;
    }
    Ok(if r.best.is_some() {
        Outcome::Done
    } else {
        Outcome::NothingFeasible
    })
}

/// The serving search ([`crate::opt::search::serving`]) of a served transformer.
fn run_serving(a: &SearchArgs, workload: &Workload, file: &Path) -> anyhow::Result<Outcome> {
    let (t, spec) = workload.serving().expect("a serving workload");
    let setup = a.engine.setup(t, spec, true, true)?;
    let Some(slo) = setup.slo else {
        bail!(
            "{}: a serving workload is searched by goodput within an SLO: give --slo-ttft-ms and \
             --slo-tpot-ms",
            file.display()
        );
    };
    if a.slice.is_some()
        || a.base.is_some()
        || a.per_layer_type
        || a.csv.is_some()
        || a.plot.is_some()
    {
        bail!("--slice, --base, --per-layer-type, --csv and --plot search training strategies; a serving search takes none");
    }
    let system = load_system(&a.system, None, &a.host)?;
    let arch = system.accelerator()?;
    super::check_precision(file, workload, &arch)?;
    let devices = a.devices.unwrap_or_else(|| system.default_devices());
    let settings = ServingSettings {
        slo,
        requests: a.engine.requests,
        top: a.top as usize,
        disaggregate: !a.no_disaggregate,
        chunked: true,
        prune: !a.exhaustive,
    };
    let start = Instant::now();
    let r = search_serving(
        t,
        &setup.arrivals,
        &system,
        &arch,
        devices,
        &setup.policy,
        &settings,
    )?;
    let wall_s = start.elapsed().as_secs_f64();
    let mut value = serde_json::to_value(&r)?;
    value["workload"] = workload.name().into();
    value["system"] = system.name.clone().into();
    value["devices"] = devices.into();
    value["arrivals"] = setup.arrivals.name().into();
    let text = render_serving(&r, &workload.name(), &system.name, devices, &slo, wall_s);
    if a.json {
        super::print_json(&value)?;
    } else {
        print!("{text}");
    }
    if let Some(path) = &a.report {
        let heading = format!(
            "stackflow search: serving {} on {} x {}",
            workload.name(),
            devices,
            system.name
        );
        let mut page = super::report::Report::new(&heading, &super::command_line());
        page.headline(text.lines().next().unwrap_or_default());
        page.text("Search", &text);
        page.tables("The numbers (as --json gives them)", &value);
        inputs(&mut page, a, file);
        page.write(path)?;
    }
    Ok(if r.best.is_some() {
        Outcome::Done
    } else {
        Outcome::NothingFeasible
    })
}

fn render_serving(
    r: &ServingResult,
    workload: &str,
    system: &str,
    devices: u64,
    slo: &crate::distributed::load::Slo,
    wall_s: f64,
) -> String {
    let mut s = String::new();
    let within = format!(
        "p99 TTFT <= {:.0} ms, p99 TPOT <= {:.1} ms",
        slo.ttft_p99_s * 1e3,
        slo.tpot_p99_s * 1e3
    );
    match &r.best_layout {
        Some(b) => {
            let _ = writeln!(
                s,
                "{workload} on {devices} x {system}: best {} (batch cap {}{}) serves {:.3} requests/s \
                 ({:.3} per device, {:.0} output tokens/s) within {within}; {}",
                b.layout,
                b.max_batch,
                if b.chunked_prefill { ", chunked prefill" } else { "" },
                b.goodput_requests_per_s,
                b.goodput_requests_per_s_per_device,
                b.output_tokens_per_s,
                if b.binding == "capacity" {
                    "the SLO holds up to what it serves swamped: its capacity binds".to_string()
                } else {
                    format!("{} binds", b.binding)
                }
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{workload} on {devices} x {system}: NOTHING KEEPS THE SLO (exit code 3) {within}: {}",
                r.infeasible.clone().unwrap_or_default()
            );
        }
    }
    let rows: Vec<Vec<String>> = r
        .top
        .iter()
        .map(|c| {
            vec![
                c.layout.clone(),
                c.max_batch.to_string(),
                if c.chunked_prefill { "yes" } else { "no" }.into(),
                format!("{:.3}", c.goodput_requests_per_s),
                format!("{:.3}", c.goodput_requests_per_s_per_device),
                format!("{:.3}", c.capacity_requests_per_s),
                format!("{:.1}", c.ttft_p99_s * 1e3),
                format!("{:.2}", c.tpot_p99_s * 1e3),
                c.binding.clone(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let _ = writeln!(s, "\nTop {} by goodput per device:", rows.len());
        s.push_str(&aligned(
            &[
                "deployment",
                "batch cap",
                "chunked",
                "goodput req/s",
                "per device",
                "swamped req/s",
                "p99 TTFT ms",
                "p99 TPOT ms",
                "binds",
            ],
            &rows,
            &[false, true, false, true, true, true, true, true, false],
        ));
    }
    let _ = writeln!(
        s,
        "\nSearched {} deployments ({} splits, {} cannot serve{}): {} searched for goodput, {} \
         pruned by capacity, {} keep the SLO at no rate, {} failed to simulate; {:.2} s.",
        r.deployments,
        r.splits,
        r.splits_unfit,
        r.unfit_example
            .as_ref()
            .map(|e| format!(", e.g. {e}"))
            .unwrap_or_default(),
        r.searched,
        r.pruned_by_capacity,
        r.slo_unmet,
        r.failed,
        wall_s
    );
    s
}

/// The first line: the best strategy and its speedup over the base when the base fits, or
/// that nothing fits and the nearest strategy with its violations.
fn headline(report: &Report) -> String {
    let r = report.search;
    let on = format!(
        "{} on {} x {}",
        report.workload, report.devices, report.system
    );
    match (&r.best, report.speedup) {
        (Some(b), Some(x)) => format!(
            "{on}: best {} at {:.4} s per iteration, {x:.3}x the base {}",
            b.strategy, b.time_per_iteration_s, report.base_strategy
        ),
        (Some(b), None) => format!(
            "{on}: best {} at {:.4} s per iteration (the base {} does not fit: no speedup quoted)",
            b.strategy, b.time_per_iteration_s, report.base_strategy
        ),
        (None, _) => match r.nearest.first() {
            Some(n) => format!(
                "{on}: NOTHING FITS (exit code 3); the nearest, {}: {}",
                n.strategy,
                n.violations
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            None => format!("{on}: NOTHING FITS (exit code 3): no strategy runs the workload"),
        },
    }
}

/// The search as tables: nothing fits first (with the nearest candidates), else the base,
/// the best, the top N and the Pareto front, then the counts.
fn render(report: &Report) -> String {
    let r = report.search;
    let mut s = String::new();
    let _ = writeln!(s, "{}", headline(report));
    let _ = writeln!(
        s,
        "System: {} ({} devices). Workload: {}.\n",
        report.system, report.devices, report.workload
    );
    if r.best.is_none() {
        let _ = writeln!(
            s,
            "No strategy fits: every one of the {} valid strategies runs out of memory. Nearest:",
            r.enumerated - r.invalid
        );
        let width = r
            .nearest
            .iter()
            .map(|n| n.strategy.len())
            .max()
            .unwrap_or(0);
        for n in &r.nearest {
            let _ = writeln!(
                s,
                "  {:<width$}  {:>11}",
                n.strategy,
                gib(n.memory_per_device_bytes)
            );
            for v in &n.violations {
                let _ = writeln!(s, "      {v}");
            }
        }
        let _ = writeln!(s);
    }
    // The base and best rows share one width: their longer strategy's.
    let width = [&r.base, &r.best]
        .iter()
        .filter_map(|c| c.as_ref().map(|c| c.strategy.len()))
        .max()
        .unwrap_or(0);
    if let Some(b) = &r.base {
        let fits = if b.feasible { "" } else { "  (does not fit)" };
        let _ = writeln!(
            s,
            "base  {:<width$}  {:>10.4} s{fits}",
            b.strategy, b.time_per_iteration_s
        );
    }
    if let Some(b) = &r.best {
        let faster = report
            .speedup
            .map_or(String::new(), |x| format!("  ({x:.3}x the base)"));
        let _ = writeln!(
            s,
            "best  {:<width$}  {:>10.4} s{faster}\n",
            b.strategy, b.time_per_iteration_s
        );
        let _ = writeln!(s, "top {} by time", r.top.len());
        table(&mut s, &r.top);
        let _ = writeln!(s, "\nPareto front: time against memory per device");
        table(&mut s, &r.pareto);
    }
    if let Some(l) = &report.per_layer_type {
        render_layered(&mut s, l);
    }
    let _ = writeln!(
        s,
        "\nsearched {} strategies ({} valid strategy-placement pairs): {} invalid, {} out of \
         memory, {} ruled out by a lower bound, {} priced; {:.2} s",
        r.enumerated,
        r.pairs,
        r.invalid,
        r.pruned_by_memory,
        r.pruned_by_bound,
        r.evaluated,
        report.wall_s
    );
    s
}

/// The per-layer-type search: the best assignment beside the best uniform start, both
/// priced per layer type, each type's split in the short form and MAD Max's notation.
fn render_layered(s: &mut String, l: &LayeredResult) {
    let _ = writeln!(
        s,
        "\nPer layer type (MAD Max Sec. 4), from the {} fastest uniform strategies that fit: {} \
         assignments priced, {} invalid, {} out of memory, {} ruled out by a lower bound",
        l.starts.len(),
        l.evaluated,
        l.invalid,
        l.pruned_by_memory,
        l.pruned_by_bound
    );
    let (Some(u), Some(b)) = (&l.uniform, &l.best) else {
        let _ = writeln!(
            s,
            "  no uniform start runs per layer type (starts with RC/CR kernel splits or \
             context parallelism are not split per layer type)"
        );
        return;
    };
    let line = |s: &mut String, label: &str, p: &LayeredPrediction| {
        let _ = writeln!(
            s,
            "  {label:<8} {:>10.4} s {:>11} {:>5.1}%  {}",
            p.time_per_iteration_s,
            gib(p.memory_per_device_bytes),
            100.0 * p.model_flops_utilization,
            p.madmax
        );
        for part in &p.parts {
            let order: Vec<&str> = part.mapping.order.iter().map(|a| a.letter()).collect();
            let _ = writeln!(
                s,
                "      {:<12} {:<36} {:<14} placement {}",
                part.layer.name(),
                part.strategy,
                part.madmax.as_deref().unwrap_or("-"),
                order.join(".")
            );
        }
    };
    line(s, "uniform", u);
    line(s, "best", b);
    let _ = writeln!(
        s,
        "  the best per-layer-type strategy takes {:.3}x the best uniform one's time",
        b.time_per_iteration_s / u.time_per_iteration_s
    );
}

fn table(s: &mut String, rows: &[Candidate]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|c| {
            vec![
                c.strategy.clone(),
                c.placement.clone(),
                format!("{:.4} s", c.time_per_iteration_s),
                gib(c.memory_per_device_bytes),
                format!("{:.1}%", 100.0 * c.model_flops_utilization),
                c.binding.to_string(),
            ]
        })
        .collect();
    s.push_str(&aligned(
        &[
            "strategy",
            "placement (inner first)",
            "time",
            "memory",
            "MFU",
            "binding",
        ],
        &rows,
        &[false, false, true, true, true, false],
    ));
}

/// Writes the Pareto chart (`pareto.svg`) and its data (`pareto.csv`, as `--csv` writes
/// it) into `dir`, created if missing; each file atomically.
fn write_pareto(dir: &Path, title: &str, r: &SearchResult, capacity: f64) -> anyhow::Result<()> {
    super::plot::prepare(dir)?;
    let svg = super::plot::pareto_svg(title, r, capacity, "the base")?;
    let path = dir.join("pareto.svg");
    write_atomic(&path, svg.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    write_csv(&dir.join("pareto.csv"), r)
}

/// The input files of a search, for its report.
fn inputs(page: &mut super::report::Report, a: &SearchArgs, workload_file: &Path) {
    use super::report::Input::{Default, Given};
    let workload = match &a.workload {
        Some(_) => Given("workload", Some(workload_file)),
        None => Default("workload", workload_file),
    };
    super::report::add_inputs(
        page,
        &[
            workload,
            Given("system", Some(&a.system)),
            Given("base strategy", a.base.as_deref().map(Path::new)),
        ],
    );
}

/// The top N and the Pareto front, one row each, written atomically.
fn write_csv(path: &Path, r: &SearchResult) -> anyhow::Result<()> {
    let bytes = csv_text(r)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_atomic(path, bytes.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// The top N and the Pareto front as CSV text, one row each.
fn csv_text(r: &SearchResult) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "list",
        "rank",
        "strategy",
        "placement",
        "time_per_iteration_s",
        "memory_per_device_bytes",
        "model_flops_utilization",
        "binding",
    ])?;
    for (list, rows) in [("top", &r.top), ("pareto", &r.pareto)] {
        for (rank, c) in rows.iter().enumerate() {
            w.write_record([
                list.to_string(),
                (rank + 1).to_string(),
                c.strategy.clone(),
                c.placement.clone(),
                c.time_per_iteration_s.to_string(),
                c.memory_per_device_bytes.to_string(),
                c.model_flops_utilization.to_string(),
                c.binding.to_string(),
            ])?;
        }
    }
    let bytes = w.into_inner().context("writing the CSV")?;
    Ok(String::from_utf8(bytes)?)
}
