//! Plain-text report of a single-device prediction.

use std::fmt::Write;

use crate::perf::roofline::Roofline;
use crate::perf::Prediction;

use super::table::{bytes, gib, si};

pub(super) fn seconds(t: f64) -> String {
    if !t.is_finite() {
        "inf".into()
    } else if t >= 1.0 {
        format!("{t:.3} s")
    } else if t >= 1e-3 {
        format!("{:.3} ms", t * 1e3)
    } else {
        format!("{:.3} us", t * 1e6)
    }
}

/// Renders headline numbers, memory, the per-class breakdown and (if `kernels`) every kernel.
pub fn render(p: &Prediction, peak_flops_per_s: f64, kernels: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "workload          {}", p.workload);
    let _ = writeln!(s, "time / iteration  {}", seconds(p.time_per_iteration_s));
    let _ = writeln!(
        s,
        "achieved          {}  ({:.1}% of the {} peak)",
        si(p.achieved_flops_per_s, "FLOP/s"),
        100.0 * p.utilization,
        si(peak_flops_per_s, "FLOP/s")
    );
    let _ = writeln!(
        s,
        "work              {} per iteration ({} in matrix products)",
        si(p.flops_per_iteration, "FLOP"),
        si(p.matmul_flops_per_iteration, "FLOP")
    );
    let m = &p.memory;
    let _ = writeln!(
        s,
        "memory / device   {} of {}: weights {}, gradients {}, optimizer {}, activations {}",
        gib(p.memory_per_device_bytes),
        gib(m.capacity_bytes),
        gib(m.weights_bytes),
        gib(m.gradients_bytes),
        gib(m.optimizer_state_bytes),
        gib(m.activations_bytes)
    );
    let _ = writeln!(s);
    s.push_str(&class_table(p));
    if kernels {
        let _ = writeln!(s);
        s.push_str(&kernel_table(p));
    }
    let _ = writeln!(s);
    if p.feasible {
        let _ = writeln!(
            s,
            "feasible: the design fits its budget and holds the workload"
        );
    } else {
        let _ = writeln!(s, "INFEASIBLE:");
        for v in &p.violations {
            let _ = writeln!(s, "  - {v}");
        }
    }
    s
}

/// Each kernel class's kernels, FLOPs, time, share and bound.
fn class_table(p: &Prediction) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<11} {:>8} {:>14} {:>12} {:>7}  bound by",
        "class", "kernels", "FLOP", "time", "share"
    );
    for c in &p.breakdown {
        let _ = writeln!(
            s,
            "{:<11} {:>8} {:>14} {:>12} {:>6.1}%  {}",
            c.class.name(),
            c.kernels,
            format!("{:.3e}", c.flops),
            seconds(c.time_s),
            100.0 * c.fraction,
            c.bound
        );
    }
    s
}

/// Every kernel: its count, time each and in all, and bound.
fn kernel_table(p: &Prediction) -> String {
    let rows: Vec<Vec<String>> = p
        .kernels
        .iter()
        .map(|k| {
            vec![
                k.name.clone(),
                k.count.to_string(),
                seconds(k.detail.time_s),
                seconds(k.time_s),
                k.bound.to_string(),
            ]
        })
        .collect();
    super::table::aligned(
        &["kernel", "count", "time each", "total", "bound by"],
        &rows,
        &[false, true, true, true, false],
    )
}

/// `--kernels` on a served model: the prefill's and a decode step's classes and kernels.
pub fn render_served_kernels(p: &crate::perf::InferencePrediction) -> String {
    let mut s = String::new();
    for (name, pass) in [("prefill", &p.prefill), ("decode step", &p.decode)] {
        let _ = writeln!(s, "\n{name} ({})", seconds(pass.time_per_iteration_s));
        s.push_str(&class_table(pass));
        let _ = writeln!(s);
        s.push_str(&kernel_table(pass));
    }
    s
}

/// The inference report: time to first token, time per output token, throughput, bounds.
pub fn render_inference(
    p: &crate::perf::InferencePrediction,
    arch: &crate::generator::Architecture,
) -> String {
    let mut s = String::new();
    let bound = |pr: &Prediction| {
        pr.breakdown
            .iter()
            .max_by(|a, b| a.time_s.total_cmp(&b.time_s))
            .map_or(String::new(), |c| {
                format!("{} bound by {}", c.class.name(), c.bound)
            })
    };
    let _ = writeln!(
        s,
        "workload               {} (inference: batch {}, prompt {} tokens, {} output tokens)",
        p.workload, p.spec.batch, p.spec.prompt_tokens, p.spec.output_tokens
    );
    let _ = writeln!(
        s,
        "time to first token    {}  (prefill; mostly {})",
        seconds(p.time_to_first_token_s),
        bound(&p.prefill)
    );
    let _ = writeln!(
        s,
        "time per output token  {}  (decode step at the mean context; mostly {})",
        seconds(p.time_per_output_token_s),
        bound(&p.decode)
    );
    let _ = writeln!(
        s,
        "throughput             {:.1} output tokens/s",
        p.tokens_per_s
    );
    // A mixture of experts reads only the experts its tokens are routed to.
    let read = p.decode_weights_bytes_per_step;
    let weights = if read < p.weights_bytes * (1.0 - 1e-9) {
        format!("{} of the {} held", gib(read), gib(p.weights_bytes))
    } else {
        gib(p.weights_bytes)
    };
    let _ = writeln!(
        s,
        "decode reads           {} per step (weights {weights}, KV cache {} at the end); at {} that is {}",
        bytes(p.decode_bytes_per_step),
        gib(p.kv_cache_bytes),
        si(arch.memory_bandwidth_bytes_per_s, "B/s"),
        seconds(p.decode_bytes_per_step / arch.memory_bandwidth_bytes_per_s)
    );
    if p.feasible {
        let _ = writeln!(s, "feasible: weights and KV cache fit");
    } else {
        let _ = writeln!(s, "INFEASIBLE:");
        for v in &p.violations {
            let _ = writeln!(s, "  - {v}");
        }
    }
    s
}

/// `, <energy> per <unit>` for the throughput's unit (`tokens`, `samples`), nothing for a
/// lone GEMM, whose iteration is its unit.
pub fn per_unit_energy(joules: f64, unit: &str) -> String {
    match unit {
        "iterations" => String::new(),
        _ => format!(
            ", {} per {}",
            super::table::si_small(joules, "J"),
            unit.trim_end_matches('s')
        ),
    }
}

/// Energy of the `period` (an iteration; a served batch) and, with a grid intensity, its
/// operational emissions with what they are per.
pub fn render_energy(
    e: &crate::perf::Energy,
    period: &str,
    carbon_kg: Option<(f64, &str)>,
    unit: &str,
) -> String {
    let mut s = String::new();
    let memory: Vec<String> = e
        .memory_j
        .iter()
        .map(|(n, j)| format!("{n} {}", si(*j, "J")))
        .collect();
    let per_unit = per_unit_energy(e.joules_per_token, unit);
    let _ = writeln!(
        s,
        "\n{:<19} {} (compute {}, {}, floor {}); average {}{per_unit}",
        format!("energy / {period}"),
        si(e.total_j, "J"),
        si(e.compute_j, "J"),
        memory.join(", "),
        si(e.static_j, "J"),
        si(e.average_power_w, "W"),
    );
    if let Some((kg, per)) = carbon_kg {
        let _ = writeln!(s, "operational CO2e    {kg:.3e} kg per {per}");
    }
    s
}

/// The columns of `predict --csv`: one row per kernel (one accelerator: training, or a
/// served model's prefill and decode), or per kernel class and per collective (a system).
const CSV_COLUMNS: [&str; 13] = [
    "section", "name", "class", "phase", "count", "calls", "group", "axis", "bytes", "flops",
    "time_s", "bound", "blocking",
];

/// Writes the kernels, or the kernel classes and collectives, of a prediction (as its JSON
/// report holds them) to `path` as CSV, atomically; returns the rows written.
pub fn write_csv(path: &std::path::Path, report: &serde_json::Value) -> anyhow::Result<usize> {
    use serde_json::Value;
    let text = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    // A kernel's bound is {kind: compute} or {kind: memory, level: dram}.
    let bound = |v: &Value| match v {
        Value::Object(o) => o
            .get("level")
            .or_else(|| o.get("kind"))
            .map_or(String::new(), text),
        other => text(other),
    };
    let sections: Vec<(&str, &Vec<Value>)> = [
        ("kernel", report.get("kernels")),
        ("prefill kernel", report.pointer("/prefill/kernels")),
        ("decode kernel", report.pointer("/decode/kernels")),
        ("compute", report.get("compute")),
        ("collective", report.get("communication")),
    ]
    .into_iter()
    .filter_map(|(name, list)| match list {
        Some(Value::Array(rows)) => Some((name, rows)),
        _ => None,
    })
    .collect();
    anyhow::ensure!(
        !sections.is_empty(),
        "--csv {}: this prediction lists no kernels or collectives (a served model on a \
         system reports its phases' totals: see --json)",
        path.display()
    );
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record(CSV_COLUMNS)?;
    let mut rows = 0;
    for (section, list) in sections {
        for row in list {
            let field = |k: &str| row.get(k).map_or(String::new(), text);
            csv.write_record([
                section.to_string(),
                field("name"),
                // A collective's class is its algorithm's kind (all_reduce, ...).
                row.get("class")
                    .or_else(|| row.get("collective"))
                    .map_or(String::new(), text),
                field("phase"),
                field("count"),
                field("calls"),
                field("group"),
                field("axis"),
                field("bytes"),
                field("flops"),
                field("time_s"),
                row.get("bound").map_or(String::new(), bound),
                field("blocking"),
            ])?;
            rows += 1;
        }
    }
    crate::config::write_atomic(path, &csv.into_inner()?)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(rows)
}

/// Draws each named roofline's chart (`roofline.svg`, or `roofline-NAME.svg` for several)
/// and lists the data behind every one (`roofline.csv`: a row per ceiling, roof and
/// kernel, with the chart it belongs to).
pub fn rooflines(
    workload: &str,
    device: &str,
    charts: &[(&str, Roofline)],
) -> anyhow::Result<Rooflines> {
    let mut svgs = Vec::new();
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record([
        "chart",
        "kind",
        "name",
        "class",
        "count",
        "intensity_flop_per_byte",
        "flops_per_s",
        "bandwidth_bytes_per_s",
        "time_share",
        "bound",
    ])?;
    for (chart, r) in charts {
        let file = match charts.len() {
            1 => "roofline.svg".to_string(),
            _ => format!("roofline-{}.svg", chart.replace(' ', "-")),
        };
        let title = format!("Roofline: {workload} ({chart}) on {device}");
        let svg = super::plot::roofline_svg(&title, r)?;
        svgs.push((file, title, svg));
        for c in r.ceilings.iter().chain(&r.product_memory) {
            let bw = c.bandwidth_bytes_per_s.to_string();
            csv.write_record([chart, "ceiling", &c.level, "", "", "", "", &bw, "", ""])?;
        }
        for roof in &r.roofs {
            let rate = roof.flops_per_s.to_string();
            csv.write_record([
                chart,
                "roof",
                roof.precision.name(),
                "",
                "",
                "",
                &rate,
                "",
                "",
                "",
            ])?;
        }
        for p in &r.points {
            csv.write_record([
                chart.to_string(),
                "kernel".into(),
                p.name.clone(),
                p.class.name().into(),
                p.count.to_string(),
                p.intensity_flop_per_byte.to_string(),
                p.achieved_flops_per_s.to_string(),
                String::new(),
                p.time_share.to_string(),
                p.bound.to_string(),
            ])?;
        }
    }
    Ok(Rooflines {
        charts: svgs,
        csv: String::from_utf8(csv.into_inner()?)?,
    })
}

/// Roofline charts: (file name, title, SVG) each, and the data behind them all as CSV.
pub struct Rooflines {
    pub charts: Vec<(String, String, String)>,
    pub csv: String,
}

impl Rooflines {
    /// Writes the charts and roofline.csv into `dir` (`--plot DIR`).
    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        super::plot::prepare(dir)?;
        let files = self
            .charts
            .iter()
            .map(|(file, _, svg)| (file.as_str(), svg.as_bytes()))
            .chain(std::iter::once(("roofline.csv", self.csv.as_bytes())));
        for (file, bytes) in files {
            let path = dir.join(file);
            crate::config::write_atomic(&path, bytes)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        }
        eprintln!(
            "wrote the roofline chart and roofline.csv to {}",
            dir.display()
        );
        Ok(())
    }

    /// Adds the charts, and their data under the last, to a report.
    pub(super) fn report(&self, report: &mut super::report::Report) {
        for (i, (_, _, svg)) in self.charts.iter().enumerate() {
            let last = i + 1 == self.charts.len();
            report.chart(svg, last.then_some(self.csv.as_str()));
        }
    }
}
