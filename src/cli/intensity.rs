//! `stackflow intensity` (DeepFlow Fig. 1): a matrix product split every way over each
//! device count, its compute intensity per split; a table, and with `--out` a CSV and an
//! SVG of the figure's two panels.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::config::{write_atomic, Source};
use crate::study::intensity::{shard_points, ShardPoint};
use crate::workload::Workload;
use anyhow::{bail, Context};
use plotters::prelude::*;

use super::plot::FONT;

use super::predict::seconds;
use super::table::si;

/// The counts of DeepFlow Fig. 1's left panel: powers of four up to 64K devices.
const DEFAULT_DEVICES: [u64; 9] = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536];

/// Splits the right panel shows at most (spread evenly over the sorted list).
const BARS_SHOWN: usize = 10;

/// Splits the table lists at the largest count at most.
const LISTED: usize = 12;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A GEMM workload file (`kind: gemm`; default: the embedded workloads/gemm-64k.yaml,
    /// DeepFlow Fig. 1's 64K x 64K x 64K).
    #[arg(long)]
    workload: Option<PathBuf>,
    #[command(flatten)]
    design: super::DesignArgs,
    /// Device counts, comma-separated (default: 1, 4, 16, ..., 65536).
    #[arg(long, value_delimiter = ',')]
    devices: Vec<u64>,
    /// Directory for intensity.csv and intensity.svg.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print JSON (every split priced) instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let (source, file) = match &a.workload {
        Some(p) => (Source::Disk, p.clone()),
        None => (Source::Embedded, PathBuf::from("workloads/gemm-64k.yaml")),
    };
    let workload = Workload::load(source, &file)?;
    let Workload::Gemm(gemm) = &workload else {
        bail!(
            "{}: kind: expected gemm (one matrix product to split); {} is not one",
            file.display(),
            workload.name()
        );
    };
    let design = super::load_design_or(
        a.design.budget.as_deref(),
        a.design.template.as_deref(),
        a.design.tech.as_deref(),
        DEFAULT_BUDGET,
    )?;
    // What the product runs on: the budget, and the technology and template it was given.
    let machine = format!(
        "{} ({}, {})",
        design.budget_file, design.tech_file, design.template_file
    );
    let arch = crate::generator::generate(&design);
    let arch = crate::perf::as_run(&arch, &workload.graph());
    super::check_precision(&file, &workload, &arch)?;
    let devices = if a.devices.is_empty() {
        DEFAULT_DEVICES.to_vec()
    } else {
        a.devices.clone()
    };
    if let Some(out) = &a.out {
        super::output_folder("--out", out)?;
    }
    let points = shard_points(&arch, gemm, &devices)?;
    if a.json {
        super::print_json(&points)?;
    } else {
        print!("{}", render(&workload.name(), &machine, &points));
    }
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        write_atomic(&out.join("intensity.csv"), csv(&points)?.as_bytes())?;
        let title = format!(
            "Fig. 1: compute intensity of {} on {}",
            workload.name(),
            design.budget_file
        );
        write_atomic(
            &out.join("intensity.svg"),
            plot(&title, &points)?.as_bytes(),
        )?;
        eprintln!("wrote {}/intensity.csv and intensity.svg", out.display());
    }
    Ok(())
}

/// The budget Fig. 1 runs on by default: a V100-class GPU, DeepFlow's validation target.
const DEFAULT_BUDGET: &str = "budgets/v100.yaml";

/// Quartiles of sorted values (linear interpolation): min, q1, median, q3, max.
fn quartiles(sorted: &[f64]) -> [f64; 5] {
    let at = |q: f64| {
        let x = q * (sorted.len() - 1) as f64;
        let (i, f) = (x.floor() as usize, x.fract());
        let j = (i + 1).min(sorted.len() - 1);
        sorted[i] + f * (sorted[j] - sorted[i])
    };
    [at(0.0), at(0.25), at(0.5), at(0.75), at(1.0)]
}

/// Each count's intensities, sorted.
fn by_count(points: &[ShardPoint]) -> Vec<(u64, Vec<&ShardPoint>)> {
    let mut counts: Vec<u64> = points.iter().map(|p| p.devices).collect();
    counts.dedup();
    counts
        .into_iter()
        .map(|d| {
            let mut of: Vec<&ShardPoint> = points.iter().filter(|p| p.devices == d).collect();
            of.sort_by(|a, b| {
                b.intensity_flops_per_byte
                    .total_cmp(&a.intensity_flops_per_byte)
            });
            (d, of)
        })
        .collect()
}

fn render(workload: &str, machine: &str, points: &[ShardPoint]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{workload} on {machine}: compute intensity per device (FLOP per byte of main memory), every split of m (data), n (column) and k (row) parallelism\n"
    );
    let _ = writeln!(
        s,
        "{:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}   {:<18} {:>11}",
        "devices", "splits", "min", "q1", "median", "q3", "max", "fastest split", "its time"
    );
    let groups = by_count(points);
    for (d, of) in &groups {
        let mut v: Vec<f64> = of.iter().map(|p| p.intensity_flops_per_byte).collect();
        v.sort_by(f64::total_cmp);
        let q = quartiles(&v);
        let fastest = of
            .iter()
            .min_by(|a, b| a.time_s.total_cmp(&b.time_s))
            .expect("a count has at least one split");
        let _ = writeln!(
            s,
            "{:>8} {:>7} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0}   {:<18} {:>11}",
            d,
            of.len(),
            q[0],
            q[1],
            q[2],
            q[3],
            q[4],
            fastest.label(),
            seconds(fastest.time_s)
        );
    }
    if let Some((d, of)) = groups.last() {
        let _ = writeln!(
            s,
            "\nat {d} devices, by intensity (m.n.k: parts of each dimension){}",
            if of.len() > LISTED {
                format!("; the first and last {} of {}", LISTED / 2, of.len())
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            s,
            "  {:<18} {:>24} {:>11} {:>12} {:>10}  bound by",
            "split", "shard m x k x n", "FLOP/B", "HBM bytes", "time"
        );
        let shown: Vec<&&ShardPoint> = if of.len() > LISTED {
            of.iter()
                .take(LISTED / 2)
                .chain(of.iter().skip(of.len() - LISTED / 2))
                .collect()
        } else {
            of.iter().collect()
        };
        for p in shown {
            let _ = writeln!(
                s,
                "  {:<18} {:>24} {:>11.1} {:>12} {:>10}  {}",
                p.label(),
                format!("{} x {} x {}", p.shard.m, p.shard.k, p.shard.n),
                p.intensity_flops_per_byte,
                si(p.main_memory_bytes, "B"),
                seconds(p.time_s),
                p.bound
            );
        }
    }
    s
}

fn csv(points: &[ShardPoint]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "devices",
        "split",
        "m_parts",
        "n_parts",
        "k_parts",
        "shard_m",
        "shard_k",
        "shard_n",
        "flops",
        "main_memory_bytes",
        "intensity_flops_per_byte",
        "time_s",
        "bound_by",
    ])?;
    for p in points {
        w.write_record([
            p.devices.to_string(),
            p.label(),
            p.split.m.to_string(),
            p.split.n.to_string(),
            p.split.k.to_string(),
            p.shard.m.to_string(),
            p.shard.k.to_string(),
            p.shard.n.to_string(),
            p.flops.to_string(),
            p.main_memory_bytes.to_string(),
            p.intensity_flops_per_byte.to_string(),
            p.time_s.to_string(),
            p.bound.to_string(),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// Fig. 1's two panels: the spread of intensity over splits at each device count (box:
/// quartiles, whiskers: min and max), and the splits at the largest count.
fn plot(title: &str, points: &[ShardPoint]) -> anyhow::Result<String> {
    let groups = by_count(points);
    let log = |x: f64| x.max(1e-3).log10();
    let all: Vec<f64> = points
        .iter()
        .map(|p| log(p.intensity_flops_per_byte))
        .collect();
    // Whole decades around the data (a hair of rounding does not open another decade).
    let lo = (all.iter().cloned().fold(f64::INFINITY, f64::min) + 1e-9).floor();
    let hi = (all.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - 1e-9).ceil();
    let ticks = |v: &f64| {
        let x = 10f64.powf(*v);
        if x < 1.0 {
            format!("{x:.2}")
        } else {
            format!("{x:.0}")
        }
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1300, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 18))?;
        let (left, right) = root.split_horizontally(560);
        let counts: Vec<String> = groups.iter().map(|(d, _)| d.to_string()).collect();
        let mut chart = ChartBuilder::on(&left)
            .caption("spread over splits, by device count", (FONT, 14))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..counts.len() as f64 - 0.5, lo..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(counts.len())
            .x_desc("devices")
            .y_desc("FLOP per byte of main memory (log scale)")
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 {
                    counts.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&ticks)
            .draw()?;
        // Boxes by hand: whiskers at the least and most intense split (plotters' box plot
        // puts them at 1.5 interquartile ranges, beyond the data).
        for (i, (_, of)) in groups.iter().enumerate() {
            let mut v: Vec<f64> = of.iter().map(|p| log(p.intensity_flops_per_byte)).collect();
            v.sort_by(f64::total_cmp);
            let [min, q1, median, q3, max] = quartiles(&v);
            let at = |dx: f64, y: f64| (i as f64 + dx, y);
            let line = |a, b| PathElement::new(vec![a, b], BLUE.stroke_width(1));
            chart.draw_series([
                line(at(0.0, min), at(0.0, q1)),
                line(at(0.0, q3), at(0.0, max)),
                line(at(-0.12, min), at(0.12, min)),
                line(at(-0.12, max), at(0.12, max)),
                line(at(-0.25, median), at(0.25, median)),
            ])?;
            chart.draw_series([Rectangle::new(
                [at(-0.25, q1), at(0.25, q3)],
                BLUE.stroke_width(1),
            )])?;
        }
        if let Some((d, of)) = groups.last() {
            // Evenly spread over the list sorted by intensity, the first and last included.
            let shown: Vec<&ShardPoint> = if of.len() > BARS_SHOWN {
                (0..BARS_SHOWN)
                    .map(|i| of[i * (of.len() - 1) / (BARS_SHOWN - 1)])
                    .collect()
            } else {
                of.clone()
            };
            let labels: Vec<String> = shown.iter().map(|p| p.label()).collect();
            let mut chart = ChartBuilder::on(&right)
                .caption(
                    format!(
                        "splits at {d} devices (m.n.k parts; {} of {})",
                        shown.len(),
                        of.len()
                    ),
                    (FONT, 14),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((0..shown.len().saturating_sub(1)).into_segmented(), lo..hi)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(shown.len())
                .x_label_style((FONT, 10))
                .x_desc("split (m.n.k: parts of each dimension)")
                .x_label_formatter(&|v| match v {
                    SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                    _ => String::new(),
                })
                .y_desc("FLOP per byte of main memory (log scale)")
                .y_label_formatter(&ticks)
                .draw()?;
            chart.draw_series(shown.iter().enumerate().map(|(i, p)| {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), lo),
                        (SegmentValue::Exact(i + 1), log(p.intensity_flops_per_byte)),
                    ],
                    BLUE.mix(0.7).filled(),
                );
                bar.set_margin(0, 0, 3, 3);
                bar
            }))?;
        }
        root.present()?;
    }
    Ok(svg)
}
