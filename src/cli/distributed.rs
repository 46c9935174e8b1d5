//! `predict --system`: one training iteration on a multi-device system.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::config::Source;
use crate::distributed::{
    predict, predict_inference, DistInference, DistPrediction, LayerStrategy, LayeredPlan,
    LayeredPrediction, Workspace,
};
use crate::network::System;
use crate::parallel::strategy::ContextAttention;
use crate::parallel::Strategy;
use crate::workload::Workload;
use anyhow::{bail, Context};

use super::predict::seconds;
use super::table::{bytes_as, gib, si};
use super::DEFAULT_WORKLOAD;

pub struct Args<'a> {
    pub workload: Option<&'a Path>,
    pub system: &'a Path,
    /// Budget, template and technology files replacing the system's accelerator.
    pub accelerator: (Option<&'a Path>, Option<&'a Path>, Option<&'a Path>),
    pub devices: Option<u64>,
    pub strategy: Option<&'a str>,
    pub slice: Option<&'a str>,
    pub host: &'a HostFlags,
    pub carbon: Option<super::CarbonRates>,
    pub json: bool,
    /// `--csv`: the kernel classes and collectives to this file.
    pub csv: Option<&'a Path>,
    /// `--plot`: the roofline chart of each kind of stage into this directory.
    pub plot: Option<&'a Path>,
    /// `--trace`: the iteration's timeline to this file (Chrome trace-event JSON).
    pub trace: Option<&'a Path>,
    /// `--report`: the run as one HTML page.
    pub report: Option<&'a Path>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = args.trace {
        super::output_file("--trace", path)?;
    }
    if let Some(path) = args.report {
        super::output_file("--report", path)?;
    }
    if let (Some(t), Some(r)) = (args.trace, args.report) {
        if t == r {
            bail!(
                "--trace and --report name the same file {}: give each its own",
                t.display()
            );
        }
    }
    let (source, workload_file) = match args.workload {
        Some(p) => (Source::Disk, p.to_path_buf()),
        None => (Source::Embedded, PathBuf::from(DEFAULT_WORKLOAD)),
    };
    // A Calculon execution as --strategy: its degrees, and its batch for a Calculon model.
    let execution = super::import::execution(args.strategy)?;
    let workload = super::import::workload(source, &workload_file, execution.as_ref())?;
    if let (Some(path), Some(_)) = (args.csv, workload.serving()) {
        bail!(
            "--csv {}: a served model on a system reports its phases' totals, not kernels or \
             collectives (see --json; on one accelerator, --budget, --csv lists them)",
            path.display()
        );
    }
    let (budget, template, tech) = args.accelerator;
    let budget = budget.map(super::import::budget).transpose()?;
    let system = load_system_with(args.system, args.slice, args.host, execution.as_ref())?
        .with_accelerator(budget.as_deref(), template, tech);
    if system.pinned.is_some() && args.carbon.is_some() {
        bail!(
            "{}: --grid-kg-per-kwh: a pinned processor (processor:) gives no power figures, so \
             its energy and emissions are not modelled",
            system.file
        );
    }
    if system.pinned.is_some() && (template.is_some() || tech.is_some()) {
        bail!(
            "{}: a pinned processor (processor:) has no template or technology to override: \
             give --budget for a derived accelerator, or leave --template and --tech out",
            system.file
        );
    }
    let accelerator = match &system.pinned {
        Some(arch) => format!("pinned processor {}", arch.template),
        None => system.design()?.budget_file,
    };
    // A lone kernel runs as measured alone, in a system as on its own (one device, one
    // answer).
    let arch = crate::perf::as_run(&system.accelerator()?, &workload.graph());
    let devices = args
        .devices
        .or(execution.as_ref().map(|e| e.1.devices()))
        .unwrap_or_else(|| system.default_devices());
    let network = system
        .network(&arch, devices)
        .map_err(|e| super::devices_given(e, args.devices))?;
    super::check_precision(&workload_file, &workload, &arch)?;
    if let Some(text) = args.strategy.filter(|t| is_per_layer_type(t)) {
        if args.carbon.is_some() {
            bail!(
                "--grid-kg-per-kwh: a per-layer-type prediction reports no energy yet; give \
                 one strategy for every layer"
            );
        }
        if args.trace.is_some() {
            bail!("--trace: a per-layer-type prediction has no timeline yet; give one strategy for every layer");
        }
        let s = LayerStrategy::parse(text)?;
        if let Some(dir) = args.plot {
            super::plot::prepare(dir)?;
        }
        let plan = LayeredPlan::new(
            &workload,
            &arch,
            &network,
            system.node_size(network.devices),
            &s,
            &mut Workspace::new(&arch),
        )?;
        let p = plan.predict(&network);
        // Each layer type's kernels split its own way, on one device of each kind of stage.
        let kernels = |stage| plan.stage_kernels(stage);
        let rooflines = || rooflines_of(&p.workload, &arch, plan.stages(), &kernels);
        if let Some(dir) = args.plot {
            rooflines()?.write(dir)?;
        }
        let serving = workload
            .queries_per_batch()
            .map(|q| Serving::of(q, p.serving_latency_s, p.time_per_iteration_s, None));
        let mut value = serde_json::to_value(&p)?;
        if let Some(s) = &serving {
            value["serving"] = serde_json::to_value(s)?;
        }
        let mut text = format!(
            "System: {} ({} devices of {}).\n\n",
            system.name, devices, accelerator
        );
        if let Some(s) = &serving {
            let _ = writeln!(text, "{}", s.render());
        }
        text.push_str(&render_layered(&p, unit_of(&workload)));
        if args.json {
            super::print_json(&value)?;
        } else {
            print!("{text}");
        }
        if let Some(path) = args.csv {
            super::predict::write_csv(path, &serde_json::to_value(&p)?)?;
        }
        if let Some(path) = args.report {
            let on = (devices, system.name.as_str());
            let mut r = training_page(
                &p.workload,
                on,
                &p.strategy,
                &headline(
                    p.time_per_iteration_s,
                    p.model_flops_utilization,
                    p.memory_per_device_bytes,
                    p.feasible,
                ),
            );
            r.heading("Roofline of each kind of stage");
            rooflines()?.report(&mut r);
            r.text("Prediction", &text);
            r.tables("The numbers (as --json gives them)", &value);
            report_inputs(&mut r, &args, &workload_file);
            r.write(path)?;
        }
        return Ok(());
    }
    let strategy = match &execution {
        Some((file, e)) => {
            let imported = crate::import::calculon::strategy(file, e);
            Strategy::from_yaml(file, &imported.files[0].text)?
        }
        None => load_strategy(args.strategy, &system, devices)?,
    };
    if let Some((t, spec)) = workload.serving() {
        if args.trace.is_some() {
            bail!(
                "--trace: a served model's prefill and decode have no timeline; the trace is \
                 of a training (or batch inference) iteration"
            );
        }
        if args.plot.is_some() {
            bail!(
                "--plot: a served model's roofline is drawn on one accelerator (--budget, no \
                 --system); its distributed prefill and decode have no chart yet"
            );
        }
        let p = predict_inference(t, spec, &arch, &network, &strategy)?;
        let carbon = args.carbon.map(|r| r.kg_per_joule() * p.joules_per_token);
        let mut value = serde_json::to_value(&p)?;
        if let Some(kg) = carbon {
            value["co2e_kg_per_token"] = kg.into();
        }
        let mut text = format!(
            "System: {} ({} devices of {}).\n\n{}",
            system.name,
            devices,
            accelerator,
            render_inference(&p)
        );
        if let Some(kg) = carbon {
            let _ = writeln!(text, "operational CO2e    {kg:.3e} kg per output token");
        }
        if args.json {
            super::print_json(&value)?;
        } else {
            print!("{text}");
        }
        if let Some(path) = args.csv {
            super::predict::write_csv(path, &serde_json::to_value(&p)?)?;
        }
        if let Some(path) = args.report {
            let title = format!(
                "stackflow predict: {} served on {} x {}",
                p.workload, devices, system.name
            );
            plain_report(path, &title, &text, &value, &args, &workload_file)?;
        }
        return Ok(());
    }
    if let Some(dir) = args.plot {
        super::plot::prepare(dir)?;
    }
    let prediction = predict(&workload, &arch, &network, &strategy)?;
    let rooflines = || stage_rooflines(&workload, &arch, &strategy, &prediction);
    if let Some(dir) = args.plot {
        rooflines()?.write(dir)?;
    }
    // A timeline of an iteration that never ends (a collective or a wait that cannot
    // finish: the prediction's violations say why) has nothing to draw.
    let finite = prediction.time_per_iteration_s.is_finite();
    if args.trace.is_some() && !finite {
        bail!(
            "--trace: the iteration's time is not finite ({}), so it has no timeline",
            prediction
                .violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let trace = match args.trace.or(args.report) {
        Some(_) if finite => {
            let plan = crate::distributed::Plan::new(&workload, &arch, &network, &strategy)?;
            Some(plan.trace(&network))
        }
        _ => None,
    };
    // Operational emissions of every device's energy (TPU v4 paper Sec. 7.6).
    let carbon = args.carbon.map(|r| r.kg_per_joule() * prediction.energy_j);
    let serving = workload.queries_per_batch().map(|q| {
        Serving::of(
            q,
            prediction.serving_latency_s,
            prediction.time_per_iteration_s,
            Some(prediction.energy_j),
        )
    });
    let mut value = serde_json::to_value(&prediction)?;
    if let Some(s) = &serving {
        value["serving"] = serde_json::to_value(s)?;
    }
    if let Some(kg) = carbon {
        value["co2e_kg_per_iteration"] = kg.into();
    }
    if arch.pinned.is_some() {
        // No power figures: no energy, rather than 0 J.
        for key in ["energy_j", "average_power_w", "joules_per_token"] {
            value[key] = serde_json::Value::Null;
        }
    }
    let mut text = format!(
        "System: {} ({} devices of {}).\n\n",
        system.name, devices, accelerator
    );
    if let Some(s) = &serving {
        let _ = writeln!(text, "{}", s.render());
    }
    text.push_str(&render(
        &prediction,
        arch.peak_flops_per_s,
        unit_of(&workload),
    ));
    // The CPU sockets' share, when they hold tables, apart from the devices'.
    let host_w = prediction
        .host_tables
        .as_ref()
        .map_or(0.0, |h| h.energy_j / prediction.time_per_iteration_s);
    if arch.pinned.is_some() {
        let _ = writeln!(
            text,
            "\nenergy / iteration  not modelled: a pinned processor (a Calculon system) gives \
             no power figures"
        );
    } else if !(prediction.energy_j.is_finite() && prediction.time_per_iteration_s.is_finite()) {
        let _ = writeln!(
            text,
            "\nenergy / iteration  not finite: {} (see above)",
            if prediction.time_per_iteration_s.is_finite() {
                "a non-finite result"
            } else {
                "the iteration's time is not"
            }
        );
    } else {
        let _ = writeln!(
            text,
            "\nenergy / iteration  {} on {} devices{}; average {} ({} per device{}){}",
            si(prediction.energy_j, "J"),
            devices,
            if host_w > 0.0 { " and their hosts" } else { "" },
            si(prediction.average_power_w, "W"),
            si((prediction.average_power_w - host_w) / devices as f64, "W"),
            if host_w > 0.0 {
                format!(", {} on the CPU sockets", si(host_w, "W"))
            } else {
                String::new()
            },
            super::predict::per_unit_energy(prediction.joules_per_token, unit_of(&workload))
        );
    }
    match carbon {
        Some(kg) if kg.is_finite() => {
            let _ = writeln!(text, "operational CO2e    {kg:.3e} kg per iteration");
        }
        Some(_) => {
            let _ = writeln!(text, "operational CO2e    not finite, as the energy");
        }
        None => {}
    }
    if args.json {
        super::print_json(&value).context("writing the prediction")?;
    } else {
        if args.workload.is_none() {
            println!("No --workload given: using the embedded default {DEFAULT_WORKLOAD}.");
        }
        print!("{text}");
    }
    if !prediction.feasible && prediction.violations.is_empty() {
        bail!("infeasible prediction without reasons");
    }
    if let Some(path) = args.csv {
        super::predict::write_csv(path, &value)?;
    }
    if let (Some(path), Some(trace)) = (args.trace, &trace) {
        crate::config::write_atomic(path, super::trace::chrome_json(trace).as_bytes())
            .with_context(|| format!("--trace: writing {}", path.display()))?;
    }
    if let Some(path) = args.report {
        let on = (devices, system.name.as_str());
        let p = &prediction;
        let mut r = training_page(
            &p.workload,
            on,
            &p.strategy,
            &headline(
                p.time_per_iteration_s,
                p.model_flops_utilization,
                p.memory_per_device_bytes,
                p.feasible,
            ),
        );
        r.heading("The iteration's timeline");
        if let Some(trace) = &trace {
            let name = format!("{}, {}", prediction.workload, prediction.strategy);
            let whole = (0.0, trace.time_per_iteration_s);
            let svg = super::plot::timeline_svg(&format!("{name}: one iteration"), trace, whole)?;
            r.chart(&svg, None);
            if let Some([fill, drain]) = super::plot::timeline_windows(trace) {
                for (what, window) in [
                    ("zoomed on the pipeline filling", fill),
                    (
                        "zoomed on the pipeline draining, gradients and update",
                        drain,
                    ),
                ] {
                    let title = format!("{name}: {what}");
                    r.chart(&super::plot::timeline_svg(&title, trace, window)?, None);
                }
            }
        } else {
            r.paragraph("The iteration's time is not finite: no timeline (see the violations).");
        }
        r.heading("Roofline of each kind of stage");
        rooflines()?.report(&mut r);
        r.text("Prediction", &text);
        r.tables("The numbers (as --json gives them)", &value);
        report_inputs(&mut r, &args, &workload_file);
        r.write(path)?;
    }
    Ok(())
}

/// The page of a training prediction of `workload` on `(devices, system)` under `strategy`:
/// its title and headline.
fn training_page(
    workload: &str,
    (devices, system): (u64, &str),
    strategy: &str,
    headline: &str,
) -> super::report::Report {
    let title = format!("stackflow predict: {workload} on {devices} x {system}, {strategy}");
    let mut r = super::report::Report::new(&title, &super::command_line());
    r.headline(headline);
    r
}

/// A training prediction's report in a line.
fn headline(time_s: f64, mfu: f64, memory_bytes: f64, feasible: bool) -> String {
    format!(
        "{} per iteration, {:.1}% model FLOPs utilization, {} per device{}",
        super::predict::seconds(time_s),
        100.0 * mfu,
        gib(memory_bytes),
        if feasible {
            ""
        } else {
            ": INFEASIBLE (see the report)"
        }
    )
}

/// The input files of a distributed prediction, for its report.
fn report_inputs(r: &mut super::report::Report, args: &Args, workload_file: &Path) {
    use super::report::Input::{Default, Given};
    let workload = match args.workload {
        Some(_) => Given("workload", Some(workload_file)),
        None => Default("workload", workload_file),
    };
    super::report::add_inputs(
        r,
        &[
            workload,
            Given("system", Some(args.system)),
            Given("strategy", args.strategy.map(Path::new)),
            Given("budget", args.accelerator.0),
            Given("template", args.accelerator.1),
            Given("technology", args.accelerator.2),
        ],
    );
}

/// A report without charts (distributed serving): the printed
/// report, the numbers, the inputs.
fn plain_report(
    path: &Path,
    title: &str,
    text: &str,
    value: &serde_json::Value,
    args: &Args,
    workload_file: &Path,
) -> anyhow::Result<()> {
    let mut r = super::report::Report::new(title, &super::command_line());
    r.text("Prediction", text);
    r.tables("The numbers (as --json gives them)", value);
    report_inputs(&mut r, args, workload_file);
    r.write(path)
}

/// The roofline of one device of every pipeline stage (one chart per run of stages with the
/// same kernels: a pipeline's first, middle and last stages), each kernel at its
/// micro-batch's size, timed as the prediction times it.
fn stage_rooflines(
    workload: &Workload,
    arch: &crate::generator::Architecture,
    s: &Strategy,
    p: &DistPrediction,
) -> anyhow::Result<super::predict::Rooflines> {
    let graph = workload.graph();
    let f_tok = p.micro_batch as f64 / graph.samples.max(1.0);
    let kernels = |stage| crate::distributed::micro_batch_kernels(&graph, s, stage, f_tok);
    rooflines_of(&p.workload, arch, s.pipeline, &kernels)
}

/// The roofline of one device of each kind of stage of `stages`, from each stage's kernels
/// for one micro-batch (`kernels_of`).
fn rooflines_of(
    workload: &str,
    arch: &crate::generator::Architecture,
    stages: u64,
    kernels_of: &dyn Fn(u64) -> Vec<(crate::workload::Kernel, u64)>,
) -> anyhow::Result<super::predict::Rooflines> {
    use crate::perf::roofline::Roofline;
    use crate::perf::{Evaluator, KernelReport};
    let mut evaluator = Evaluator::new(arch);
    let mut charts: Vec<(String, Roofline)> = Vec::new();
    let mut last: Option<Vec<(String, u64)>> = None;
    let mut first_of_run = 0;
    for stage in 0..stages {
        let kernels = kernels_of(stage);
        let shape: Vec<(String, u64)> = kernels.iter().map(|(k, c)| (k.name.clone(), *c)).collect();
        if last.as_ref() == Some(&shape) {
            if let Some(chart) = charts.last_mut() {
                chart.0 = format!("stages {first_of_run}-{stage}");
            }
            continue;
        }
        first_of_run = stage;
        last = Some(shape);
        let reports: Vec<KernelReport> = kernels
            .iter()
            .map(|(k, count)| KernelReport::of(k, *count, evaluator.kernel(k)))
            .collect();
        let name = match stages {
            1 => "step".to_string(),
            _ => format!("stage {stage}"),
        };
        charts.push((name, Roofline::of(&evaluator.machine, &reports)));
    }
    let named: Vec<(&str, Roofline)> = charts
        .iter()
        .map(|(n, r)| (n.as_str(), r.clone()))
        .collect();
    super::predict::rooflines(workload, &arch.template, &named)
}

/// Whether `--strategy` gives a strategy per layer type (`attention:t8-d16,dense:...`)
/// rather than a file or one strategy.
fn is_per_layer_type(text: &str) -> bool {
    text.contains(':') && !crate::config::is_file(Path::new(text))
}

/// Compute per layer type and stage (all stages up to 4, else the first, second and last;
/// `--json` lists every one), with one layer's forward and backward for one micro-batch.
fn render_layers(s: &mut String, p: &DistPrediction) {
    let stages = p
        .per_layer
        .iter()
        .map(|l| l.stage)
        .max()
        .map_or(0, |x| x + 1);
    let shown = |stage: u64| stages <= 4 || stage <= 1 || stage + 1 == stages;
    let _ = writeln!(
        s,
        "\n{:<15} {:>5} {:>6} {:>12} {:>12} {:>12} {:>12}  one layer, one micro-batch: fwd / bwd",
        "per layer type", "stage", "layers", "forward", "backward", "recompute", "collectives"
    );
    for l in p.per_layer.iter().filter(|l| shown(l.stage)) {
        let one = if l.layers > 0 {
            format!(
                "{} / {}",
                seconds(l.per_layer_forward_s),
                seconds(l.per_layer_backward_s)
            )
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            s,
            "{:<15} {:>5} {:>6} {:>12} {:>12} {:>12} {:>12}  {one}",
            l.layer.name(),
            l.stage,
            l.layers,
            seconds(l.forward_s),
            seconds(l.backward_s),
            seconds(l.recompute_s),
            seconds(l.collectives_s.max(0.0))
        );
    }
    if stages > 4 {
        let _ = writeln!(
            s,
            "(stages 2 to {} not shown; --json lists every stage; the optimizer step: {})",
            stages - 2,
            seconds(p.optimizer_step_s)
        );
    } else {
        let _ = writeln!(s, "(the optimizer step: {})", seconds(p.optimizer_step_s));
    }
}

/// A served recommendation model's figures: one batch's latency (lookups, transfers and
/// forward one after another) and the throughput of batches that overlap (the next batch's
/// lookups beside this one's forward).
#[derive(serde::Serialize)]
struct Serving {
    queries_per_batch: u64,
    latency_s: f64,
    /// Between batches: the longer of the devices' step and the lookups beside it.
    interval_s: f64,
    queries_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    joules_per_query: Option<f64>,
}

impl Serving {
    fn of(queries: u64, latency_s: Option<f64>, interval_s: f64, energy_j: Option<f64>) -> Self {
        Serving {
            queries_per_batch: queries,
            latency_s: latency_s.unwrap_or(interval_s),
            interval_s,
            queries_per_s: queries as f64 / interval_s,
            joules_per_query: energy_j.map(|e| e / queries as f64),
        }
    }

    fn render(&self) -> String {
        let overlap = if self.latency_s > self.interval_s * (1.0 + 1e-9) {
            ": the next batch's lookups beside this one's forward"
        } else {
            ""
        };
        let mut s = format!(
            "serving: batches of {} queries, forward only (lookups, the pooled embeddings' \
             exchange, the MLPs)\nlatency / batch   {} (lookups, transfers and forward one \
             after another)\nthroughput        {} (a batch every {}{overlap})",
            self.queries_per_batch,
            seconds(self.latency_s),
            si(self.queries_per_s, "queries/s"),
            seconds(self.interval_s),
        );
        if let Some(j) = self.joules_per_query {
            s.push_str(&format!(
                "\nenergy / query    {}",
                super::table::si_small(j, "J")
            ));
        }
        s.push('\n');
        s
    }
}

/// The report's line on the tables the hosts keep in DDR, for an iteration of `time_s`.
fn host_line(h: &crate::distributed::HostReport, time_s: f64) -> String {
    format!(
        "host tables       {} tables, {} of the {} DDR of {} CPU sockets; {} busy ({}), \
         beside the devices' step: lookups {}, {} transfers {}, update {}",
        h.tables,
        gib(h.tables_bytes),
        gib(h.memory_capacity_bytes),
        h.sockets,
        seconds(h.time_s),
        if h.time_s >= time_s {
            "the hosts pace the iteration".to_string()
        } else {
            format!("{:.0}% of the step", 100.0 * h.time_s / time_s)
        },
        seconds(h.gather_s),
        match h.transfers {
            crate::domain::Transfers::Direct => "direct",
            crate::domain::Transfers::Staged => "host-staged",
        },
        seconds(h.transfer_s),
        seconds(h.update_s),
    )
}

/// A per-layer-type prediction: the iteration, each type's split and mapping, the
/// collectives (resharding between types included).
fn render_layered(p: &LayeredPrediction, unit: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "workload          {}", p.workload);
    let _ = writeln!(
        s,
        "strategy          {} ({})",
        p.strategy,
        plural(p.micro_batches, "micro-batch", "micro-batches")
    );
    let _ = writeln!(s, "MAD Max notation  {}", p.madmax);
    let _ = writeln!(
        s,
        "iteration         {} ({}, MFU {:.1}% of the 16-bit peak, {:.1}% of the {} peak)",
        seconds(p.time_per_iteration_s),
        si(p.tokens_per_s, &format!("{unit}/s")),
        100.0 * p.model_flops_utilization,
        100.0 * p.model_flops_utilization_at_precision,
        p.gemm_precision.name()
    );
    let _ = writeln!(
        s,
        "exposed comm      {}; pipeline bubble {}",
        seconds(p.exposed_communication_s),
        seconds(p.pipeline_bubble_s)
    );
    if let Some(h) = &p.host_tables {
        let _ = writeln!(s, "{}", host_line(h, p.time_per_iteration_s));
    }
    let _ = writeln!(
        s,
        "memory / device   {} of {} (weights {}, gradients {}, optimizer {}, activations {}{})",
        gib(p.memory_per_device_bytes),
        gib(p.memory_capacity_bytes),
        gib(p.weights_bytes),
        gib(p.gradients_bytes),
        gib(p.optimizer_state_bytes),
        gib(p.activations_bytes),
        gathered(p.gathered_bytes)
    );
    let _ = writeln!(
        s,
        "\n  {:<12} {:<32} {:<13} {:>10} {:>11}  mapping",
        "layer type", "split", "MAD Max", "compute", "memory"
    );
    for part in &p.parts {
        let _ = writeln!(
            s,
            "  {:<12} {:<32} {:<13} {:>10} {:>11}  {}",
            part.layer.name(),
            part.strategy,
            part.madmax.as_deref().unwrap_or("-"),
            seconds(part.compute_s),
            gib(part.memory_per_device_bytes),
            describe_mapping(&part.mapping)
        );
    }
    let largest = p.communication.iter().map(|c| c.bytes).fold(0.0, f64::max);
    let rows: Vec<Vec<String>> = p
        .communication
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.collective.name().to_string(),
                c.group.to_string(),
                bytes_as(c.bytes, largest),
                format!("{:.0}", c.calls),
                seconds(c.time_s),
                if c.blocking { "" } else { "(overlapped)" }.to_string(),
            ]
        })
        .collect();
    let _ = writeln!(s);
    s.push_str(&super::table::aligned(
        &["collective", "kind", "group", "bytes", "calls", "time", ""],
        &rows,
        &[false, false, true, true, true, true, false],
    ));
    if !p.feasible {
        let _ = writeln!(s, "\nINFEASIBLE:");
        for v in &p.violations {
            let _ = writeln!(s, "  {v}");
        }
    }
    s
}

/// Where a recommendation model's tables live and how host transfers go, overriding the
/// system file's `host:` section.
#[derive(clap::Args, Debug, Default)]
pub struct HostFlags {
    /// A recommendation model's embedding tables on the devices, in the hosts' DDR, or the
    /// hottest on the devices while they fit and the rest in DDR (auto); overrides the
    /// system's host.tables (the system needs a host: section for host and auto).
    #[arg(long, value_enum, requires = "system")]
    pub tables: Option<TablesArg>,
    /// Host-device transfers of host-resident tables: direct (GPU-direct DMA) or staged
    /// through a bounce buffer in host memory (Zion Sec. V-B); overrides host.transfers.
    #[arg(long, value_enum, requires = "system")]
    pub host_transfers: Option<TransfersArg>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum TablesArg {
    Device,
    Host,
    Auto,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum TransfersArg {
    Direct,
    Staged,
}

/// `system` with the command line's `--tables` and `--host-transfers` applied: an error
/// naming the flag when the system has no host to apply them to.
fn with_host_flags(mut system: System, flags: &HostFlags) -> anyhow::Result<System> {
    use crate::domain::{TablePlacement, Transfers};
    let tables = flags.tables.map(|t| match t {
        TablesArg::Device => TablePlacement::Device,
        TablesArg::Host => TablePlacement::Host,
        TablesArg::Auto => TablePlacement::Auto,
    });
    let transfers = flags.host_transfers.map(|t| match t {
        TransfersArg::Direct => Transfers::Direct,
        TransfersArg::Staged => Transfers::Staged,
    });
    let Some(host) = &mut system.host else {
        // Tables on the devices is what a system without CPUs does anyway.
        let asked = match (tables, transfers) {
            (_, Some(t)) => ("--host-transfers", format!("{t:?}").to_lowercase()),
            (Some(t), None) if t != TablePlacement::Device => {
                ("--tables", format!("{t:?}").to_lowercase())
            }
            _ => return Ok(system),
        };
        return Err(crate::config::ConfigError::invalid(
            "(command line)",
            asked.0,
            asked.1,
            format!(
                "a system with a host: section (CPUs whose memory holds the tables); {} has none",
                system.file
            ),
        )
        .into());
    };
    if let Some(t) = tables {
        host.tables = t;
    }
    if let Some(t) = transfers {
        host.transfers = t;
    }
    Ok(system)
}

/// A system file, reshaped into `--slice` (e.g. 4x8x16) when given, its host as the
/// command line sets it.
pub fn load_system(path: &Path, slice: Option<&str>, host: &HostFlags) -> anyhow::Result<System> {
    load_system_with(path, slice, host, None)
}

/// [`load_system`], a Calculon system read in-line (its tiers checked against
/// `execution`'s).
pub fn load_system_with(
    path: &Path,
    slice: Option<&str>,
    host: &HostFlags,
    execution: Option<&(String, crate::import::calculon::Execution)>,
) -> anyhow::Result<System> {
    let system = with_host_flags(super::import::system(path, execution)?, host)?;
    let Some(text) = slice else {
        return Ok(system);
    };
    let dims: Option<Vec<u64>> = text
        .split('x')
        .map(|d| d.trim().parse::<u64>().ok().filter(|&d| d > 0))
        .collect();
    let dims = dims.ok_or_else(|| {
        anyhow::anyhow!("--slice {text}: expected dimensions joined by x, e.g. 4x8x16")
    })?;
    Ok(system.with_slice(&dims)?)
}

/// A strategy from `--strategy`: a YAML file, MAD Max's `(INTRA, INTER)`, the paper's
/// notation or the short form; pure data parallelism when absent.
pub fn load_strategy(
    text: Option<&str>,
    system: &System,
    devices: u64,
) -> anyhow::Result<Strategy> {
    Ok(match text {
        None => Strategy {
            data: devices,
            ..Strategy::default()
        },
        Some(text) => {
            let path = Path::new(text);
            if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
                || crate::config::is_file(path)
            {
                let file = path.display().to_string();
                Strategy::from_yaml(&file, &Source::Disk.read(path)?)?
            } else if text.trim_start().starts_with('(') {
                Strategy::from_madmax(text, system.node_size(devices), devices)?
            } else {
                Strategy::parse(text)?
            }
        }
    })
}

/// `n` and the noun that goes with it.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How many placements of the axes were priced.
fn orderings(n: u64) -> String {
    if n == 1 {
        "the one ordering of its axes".to_string()
    } else {
        format!("best of {n} orderings")
    }
}

/// What a workload's throughput counts: samples (DLRM), iterations (a lone GEMM) or tokens.
pub fn unit_of(workload: &Workload) -> &'static str {
    match workload {
        Workload::Gemm(_) => "iterations",
        _ if workload.table_groups().is_some() => "samples",
        _ => "tokens",
    }
}

pub fn render(p: &DistPrediction, peak: f64, unit: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "workload          {}", p.workload);
    let batches = if p.micro_batches == 1 {
        "micro-batch"
    } else {
        "micro-batches"
    };
    let _ = writeln!(
        s,
        "strategy          {} ({} {batches} of {})",
        p.strategy, p.micro_batches, p.micro_batch
    );
    let _ = writeln!(
        s,
        "mapping           {} ({})",
        describe_mapping(&p.mapping),
        orderings(p.mappings_tried as u64)
    );
    if let Some(b) = p.bisection_bytes_per_s {
        let _ = writeln!(
            s,
            "bisection         {} each way (the least across any halving cut of the devices)",
            si(b, "B/s")
        );
    }
    if let Some(kind) = p.context_attention {
        let how = match kind {
            ContextAttention::Ring => {
                "keys and values round a ring, each step beside the attention (cp=ring)"
            }
            ContextAttention::AllGather => {
                "keys and values all-gathered before the attention, blocking (cp=gather)"
            }
        };
        let _ = writeln!(s, "context exchange  {how}");
    }
    let _ = writeln!(s, "time / iteration  {}", seconds(p.time_per_iteration_s));
    let _ = writeln!(
        s,
        "throughput        {}",
        si(p.tokens_per_s, &format!("{unit}/s"))
    );
    let _ = writeln!(
        s,
        "utilization       {:.1}% model FLOPs of the {} x {} dense 16-bit peak ({:.1}% of the \
         {} peak); {} executed per device",
        100.0 * p.model_flops_utilization,
        p.devices,
        si(peak, "FLOP/s"),
        100.0 * p.model_flops_utilization_at_precision,
        p.gemm_precision.name(),
        si(p.achieved_flops_per_s_per_device, "FLOP/s")
    );
    let roles: Vec<String> = p
        .precisions
        .roles()
        .iter()
        .map(|(role, precision)| format!("{} {}", role.replace('_', " "), precision.name()))
        .collect();
    let _ = writeln!(s, "precisions        {}", roles.join(", "));
    let _ = writeln!(
        s,
        "breakdown         compute {}, exposed communication {}, pipeline bubble {}",
        seconds(p.compute_s),
        seconds(p.exposed_communication_s),
        seconds(p.pipeline_bubble_s)
    );
    if p.sparse_core_s > 0.0 {
        let _ = writeln!(
            s,
            "sparse cores      {} busy ({:.0}% of the step): lookups, updates and their all-to-alls beside the dense step",
            seconds(p.sparse_core_s),
            100.0 * p.sparse_core_s / p.time_per_iteration_s
        );
    }
    if let Some(h) = &p.host_tables {
        let _ = writeln!(s, "{}", host_line(h, p.time_per_iteration_s));
    }
    let _ = writeln!(
        s,
        "memory / device   {} of {}: weights {}, gradients {}, optimizer {}, activations {}{}",
        gib(p.memory_per_device_bytes),
        gib(p.memory_capacity_bytes),
        gib(p.weights_bytes),
        gib(p.gradients_bytes),
        gib(p.optimizer_state_bytes),
        gib(p.activations_bytes),
        gathered(p.gathered_bytes)
    );
    let _ = writeln!(s, "\n{:<11} {:>12}  bound by", "compute", "time");
    for c in &p.compute {
        let _ = writeln!(
            s,
            "{:<11} {:>12}  {}",
            c.class.name(),
            seconds(c.time_s),
            c.bound
        );
    }
    render_layers(&mut s, p);
    // Message sizes in one unit, the largest's.
    let largest = p.communication.iter().map(|c| c.bytes).fold(0.0, f64::max);
    let rows: Vec<Vec<String>> = p
        .communication
        .iter()
        .map(|c| {
            vec![
                format!("{} ({})", c.name, c.collective.name()),
                c.group.to_string(),
                bytes_as(c.bytes, largest),
                c.calls.to_string(),
                seconds(c.time_s),
                if c.blocking {
                    "blocking"
                } else {
                    "overlappable"
                }
                .to_string(),
            ]
        })
        .collect();
    let _ = writeln!(s);
    s.push_str(&super::table::aligned(
        &[
            "communication (first stage)",
            "group",
            "bytes",
            "calls",
            "time",
            "overlap",
        ],
        &rows,
        &[false, true, true, true, true, false],
    ));
    let _ = writeln!(s);
    if p.feasible {
        let _ = writeln!(s, "feasible: every device holds its share");
    } else {
        let _ = writeln!(s, "INFEASIBLE:");
        for v in &p.violations {
            let _ = writeln!(s, "  - {v}");
        }
    }
    s
}

/// Each parallel axis and the fabrics its groups span.
fn describe_mapping(m: &crate::parallel::mapping::Mapping) -> String {
    if m.spans.is_empty() {
        return "one device".into();
    }
    // In placement order, innermost first; the groups that are not strategy axes
    // (experts, shards) after them.
    let mut spans: Vec<&(crate::parallel::Axis, Vec<String>)> = m.spans.iter().collect();
    spans.sort_by_key(|(a, _)| m.order.iter().position(|o| o == a).unwrap_or(usize::MAX));
    let axes: Vec<String> = spans
        .into_iter()
        .map(|(a, f)| {
            let fabrics = if f.is_empty() {
                "-".into()
            } else {
                f.join("+")
            };
            format!("{} over {}", a.name(), fabrics)
        })
        .collect();
    axes.join(", ")
}

/// The serving report: latency of one replica, throughput of all.
pub fn render_inference(p: &DistInference) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "workload          {} (serving)", p.workload);
    let _ = writeln!(
        s,
        "strategy          {} (batch {} per replica, prompt {}, {} output tokens)",
        p.strategy, p.spec.batch, p.spec.prompt_tokens, p.spec.output_tokens
    );
    let _ = writeln!(
        s,
        "mapping           {} ({})",
        describe_mapping(&p.mapping),
        orderings(p.mappings_tried as u64)
    );
    let _ = writeln!(
        s,
        "time to first token   {} (communication {})",
        seconds(p.time_to_first_token_s),
        seconds(p.prefill_communication_s)
    );
    let _ = writeln!(
        s,
        "time per output token {} (communication {})",
        seconds(p.time_per_output_token_s),
        seconds(p.decode_communication_s)
    );
    if let Some(sp) = &p.speculative {
        let _ = writeln!(
            s,
            "speculative       draft {} proposes {} tokens, each accepted at {}: {:.3} tokens \
             per verification; a step is {} x {} drafting + {} verifying against {} plain: \
             {:.2}x (at most {:.3}x)",
            sp.draft,
            sp.tokens,
            sp.acceptance,
            sp.expected_tokens,
            sp.tokens,
            seconds(sp.draft_step_s),
            seconds(sp.verify_step_s),
            seconds(sp.target_step_s),
            sp.speedup,
            sp.expected_tokens
        );
    }
    let _ = writeln!(
        s,
        "throughput        {} over all replicas ({})",
        si(p.tokens_per_s, "tokens/s"),
        match p.batches_in_flight {
            1 => "one batch in flight per replica".to_string(),
            k => format!("{k} batches in flight per replica, one per stage"),
        }
    );
    let _ = writeln!(
        s,
        "memory / device   {} of {}: weights {}, KV cache {}",
        gib(p.memory_per_device_bytes),
        gib(p.memory_capacity_bytes),
        gib(p.weights_bytes),
        gib(p.kv_cache_bytes)
    );
    let _ = writeln!(
        s,
        "energy            {} per output token; average {} for all devices",
        si(p.joules_per_token, "J"),
        si(p.average_power_w, "W")
    );
    if p.feasible {
        let _ = writeln!(s, "\nfeasible: every device holds its share");
    } else {
        let _ = writeln!(s, "\nINFEASIBLE:");
        for v in &p.violations {
            let _ = writeln!(s, "  - {v}");
        }
    }
    s
}

/// `, ZeRO-3 gathers <bytes>` where ZeRO-3's working set holds any, else nothing.
fn gathered(bytes: f64) -> String {
    if bytes > 0.0 {
        format!(", ZeRO-3 gathers {}", gib(bytes))
    } else {
        String::new()
    }
}
