//! The charts every command draws, in one style: the font, the colours told apart and the
//! roofline chart. Studies' line, bar and Pareto plots (`sweep.rs`), the intensity spread
//! (`intensity.rs`) and the optimizer's convergence (`optimize.rs`) take their style from
//! here. A new chart: a function returning SVG text, from data a library type holds.

use plotters::prelude::*;

use crate::opt::search::{Candidate, SearchResult};
use crate::perf::roofline::Roofline;
use crate::workload::KernelClass;

/// The one font family of every chart.
pub(super) const FONT: &str = "sans-serif";

/// Readies `dir` for a command's charts (`--plot DIR`): created if missing; a file in its
/// place is refused naming it. Called before the command's work, so that a bad path costs
/// nothing.
pub(super) fn prepare(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    anyhow::ensure!(
        !dir.is_file(),
        "--plot {}: a file, not a directory for the charts",
        dir.display()
    );
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Colours told apart at a glance (Tableau's ten, first six), for series drawn as dots.
const DISTINCT: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The colour of series `i`: [`DISTINCT`]'s first, then the plotting library's palette.
pub(super) fn distinct(i: usize) -> RGBAColor {
    DISTINCT
        .get(i)
        .map_or_else(|| Palette99::pick(i).to_rgba(), |c| c.to_rgba())
}

/// A tick label on a log axis: whole numbers from 10, one decimal from 1, else the first
/// significant digit's place (0.1, 0.05).
fn tick(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else if v > 0.0 {
        let places = (-v.log10()).ceil().max(1.0) as usize;
        format!("{v:.places$}")
    } else {
        "0".into()
    }
}

/// A rate with an SI prefix and its unit: 3.35 TB/s, 989 TFLOP/s.
fn rate(v: f64, unit: &str) -> String {
    let (scale, prefix) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| v.abs() >= *s)
        .unwrap_or((1.0, ""));
    format!("{:.3} {prefix}{unit}", v / scale)
}

/// The roofline chart: log-log, operational intensity against main memory (FLOP/byte)
/// across, achieved FLOP/s up; one line per memory level's bandwidth and one roof per
/// precision, each labelled with its rate; each kernel a dot coloured by its class and
/// sized by its share of the time. Kernels whose operands never leave the chip (no main
/// memory traffic) sit at the right edge.
pub(super) fn roofline_svg(title: &str, r: &Roofline) -> anyhow::Result<String> {
    let peak = r.peak_flops_per_s().max(1.0);
    let finite = |x: f64| x.is_finite() && x > 0.0;
    let intensities: Vec<f64> = r
        .points
        .iter()
        .map(|p| p.intensity_flop_per_byte)
        .filter(|&x| finite(x))
        .collect();
    // The ridge of the slowest level bounds the interesting range on the right.
    let ridge = r
        .ceilings
        .iter()
        .chain(&r.product_memory)
        .map(|c| peak / c.bandwidth_bytes_per_s.max(1.0))
        .fold(1.0f64, f64::max);
    let x_lo = intensities
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .clamp(1e-3, 0.1)
        / 2.0;
    let x_hi = intensities
        .iter()
        .copied()
        .fold(ridge * 4.0, f64::max)
        .min(1e7)
        * 2.0;
    let y_lo = r
        .points
        .iter()
        .map(|p| p.achieved_flops_per_s)
        .filter(|&y| finite(y))
        .fold(peak, f64::min)
        .min(
            // The slower main-memory line (products' or streams'), with room below it for
            // the products' label.
            x_lo * r
                .main_memory()
                .iter()
                .chain(&r.product_memory.as_ref())
                .map(|c| c.bandwidth_bytes_per_s)
                .fold(f64::INFINITY, f64::min)
                .min(f64::MAX)
                / 2.0,
        )
        .max(peak * 1e-9)
        / 2.0;
    let y_hi = peak * 3.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 620)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 18))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(78)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("operational intensity against main memory (FLOP/byte)")
            .y_desc("achieved (FLOP/s)")
            .x_label_formatter(&|x| format!("{x:.0e}"))
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 14))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        // Bandwidth lines, innermost (fastest) first, in greys darkening outward; then the
        // products' main-memory line where the stack caps it apart, dashed.
        let levels = r.ceilings.len().max(1);
        let lines = r
            .ceilings
            .iter()
            .enumerate()
            .map(|(i, c)| (c, 170 - (120 * i / levels) as u8, false))
            .chain(r.product_memory.iter().map(|c| (c, 50, true)));
        for (c, shade, products) in lines {
            let color = RGBColor(shade, shade, shade);
            if c.bandwidth_bytes_per_s * x_lo >= peak {
                // Above the highest roof across the whole chart: it bounds nothing drawn.
                continue;
            }
            let knee = (peak / c.bandwidth_bytes_per_s.max(1.0)).clamp(x_lo, x_hi);
            let ends = [(x_lo, c.bandwidth_bytes_per_s * x_lo), (knee, peak)];
            if products {
                chart.draw_series(DashedLineSeries::new(ends, 6, 4, color.stroke_width(2)))?;
            } else {
                chart.draw_series(LineSeries::new(ends, color.stroke_width(2)))?;
            }
            // Labels at the left edge, each just above its line (the lines part there by
            // their bandwidths' ratios); the products' just below the main memory's.
            let at = x_lo * 1.2;
            let lift = if products { 1.0 / 1.6 } else { 1.12 };
            chart.draw_series(std::iter::once(Text::new(
                format!("{} {}", c.level, rate(c.bandwidth_bytes_per_s, "B/s")),
                (at, c.bandwidth_bytes_per_s * at * lift),
                (FONT, 12).into_font().color(&color.mix(1.0)),
            )))?;
        }
        // Compute roofs, one per rate (precisions at the same rate share one label).
        let mut roofs: Vec<(f64, Vec<&str>)> = Vec::new();
        for roof in &r.roofs {
            match roofs.iter_mut().find(|(f, _)| *f == roof.flops_per_s) {
                Some((_, names)) => names.push(roof.precision.name()),
                None => roofs.push((roof.flops_per_s, vec![roof.precision.name()])),
            }
        }
        for (flops, names) in &roofs {
            chart.draw_series(LineSeries::new(
                [(x_lo, *flops), (x_hi, *flops)],
                BLACK.mix(0.55).stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{} {}", names.join(", "), rate(*flops, "FLOP/s")),
                (x_lo * 1.2, flops * 1.06),
                (FONT, 12),
            )))?;
        }
        if r.points.iter().any(|p| !finite(p.intensity_flop_per_byte)) {
            chart.draw_series(std::iter::once(Text::new(
                "right edge: no main-memory traffic",
                (x_hi / 30.0, y_lo * 1.6),
                (FONT, 11).into_font().color(&BLACK.mix(0.6)),
            )))?;
        }
        // Kernels by class, the largest share drawn first so small dots stay on top.
        let mut order: Vec<usize> = (0..r.points.len()).collect();
        order.sort_by(|&a, &b| r.points[b].time_share.total_cmp(&r.points[a].time_share));
        for class in KernelClass::ALL {
            let color = distinct(class as usize);
            let dots: Vec<(f64, f64, f64)> = order
                .iter()
                .map(|&i| &r.points[i])
                .filter(|p| p.class == class && finite(p.achieved_flops_per_s))
                .map(|p| {
                    let x = if finite(p.intensity_flop_per_byte) {
                        p.intensity_flop_per_byte.clamp(x_lo, x_hi)
                    } else {
                        x_hi / 1.2
                    };
                    (x, p.achieved_flops_per_s.clamp(y_lo, y_hi), p.time_share)
                })
                .collect();
            if dots.is_empty() {
                continue;
            }
            chart
                .draw_series(dots.iter().map(|&(x, y, share)| {
                    let radius = 3 + (14.0 * share.sqrt()).round() as i32;
                    Circle::new((x, y), radius, color.mix(0.55).filled())
                }))?
                .label(class.name())
                .legend(move |(x, y)| Circle::new((x + 8, y), 5, color.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// One strategy on the Pareto chart.
struct ParetoPoint<'a> {
    strategy: &'a str,
    memory_bytes: f64,
    /// `None`: it was not timed.
    time_s: Option<f64>,
    feasible: bool,
}

impl<'a> ParetoPoint<'a> {
    fn of(c: &'a Candidate) -> Self {
        ParetoPoint {
            strategy: &c.strategy,
            memory_bytes: c.memory_per_device_bytes,
            time_s: Some(c.time_per_iteration_s).filter(|t| t.is_finite()),
            feasible: c.feasible,
        }
    }
}

/// The strategies a search kept, time per iteration against memory per device: the
/// fastest that fit (dots), the Pareto front among them (joined), the chosen one (ringed
/// and named) and the base (named `base_name`; hollow when it does not fit); the device's
/// capacity as a dashed line, what lies right of it out of memory.
pub(super) fn pareto_svg(
    title: &str,
    r: &SearchResult,
    capacity_bytes: f64,
    base_name: &str,
) -> anyhow::Result<String> {
    const GIB: f64 = (1u64 << 30) as f64;
    let kept: Vec<ParetoPoint> = r.top.iter().map(ParetoPoint::of).collect();
    let front: Vec<ParetoPoint> = r.pareto.iter().map(ParetoPoint::of).collect();
    let chosen = r.best.as_ref().map(ParetoPoint::of);
    let base = r.base.as_ref().map(ParetoPoint::of);
    let (chosen, base) = (chosen.as_ref(), base.as_ref());
    let all = kept
        .iter()
        .chain(&front)
        .chain(chosen)
        .chain(base)
        .collect::<Vec<_>>();
    // Log-log: fronts span decades of time (a strategy that fits in little memory can be
    // many times slower) and of memory (up to the capacity).
    let memory: Vec<f64> = all
        .iter()
        .map(|p| p.memory_bytes / GIB)
        .filter(|m| m.is_finite() && *m > 0.0)
        .collect();
    let x_hi = memory
        .iter()
        .copied()
        .fold(capacity_bytes / GIB, f64::max)
        .max(1e-3)
        * 1.4;
    let x_lo = memory
        .iter()
        .copied()
        .fold(x_hi / 10.0, f64::min)
        .max(x_hi * 1e-6)
        / 1.5;
    let times: Vec<f64> = all
        .iter()
        .filter_map(|p| p.time_s)
        .filter(|t| t.is_finite() && *t > 0.0)
        .collect();
    let (t_lo, t_hi) = times
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
    // Each axis starts at a power of ten: plotters labels a log axis from its first power
    // of ten up (1, 2, ..., 9 times each), so a range without one would have no labels.
    let decade_down = |v: f64| 10f64.powf(v.log10().floor());
    let (y_lo, y_hi) = if times.is_empty() {
        (0.1, 10.0)
    } else {
        (decade_down(t_lo / 1.5), t_hi * 2.0)
    };
    let x_lo = decade_down(x_lo);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 18))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(14)
            .x_label_area_size(46)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("memory per device (GiB)")
            .y_desc("time per iteration (s)")
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 14))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        // The capacity, and the out-of-memory side shaded.
        let cap = capacity_bytes / GIB;
        if cap.is_finite() && cap > 0.0 {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(cap, y_lo), (x_hi, y_hi)],
                RGBColor(214, 39, 40).mix(0.06).filled(),
            )))?;
            chart.draw_series(DashedLineSeries::new(
                [(cap, y_lo), (cap, y_hi)],
                6,
                4,
                RGBColor(214, 39, 40).stroke_width(2),
            ))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("capacity {} GiB: out of memory to the right", tick(cap)),
                (
                    cap / (x_hi / x_lo).powf(0.36),
                    y_hi / (y_hi / y_lo).powf(0.05),
                ),
                (FONT, 12).into_font().color(&RGBColor(214, 39, 40)),
            )))?;
        }
        // Only points a log axis can place.
        let at = |p: &ParetoPoint| {
            let m = p.memory_bytes / GIB;
            p.time_s
                .filter(|t| t.is_finite() && *t > 0.0 && m.is_finite() && m > 0.0)
                .map(|t| (m, t))
        };
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(
                kept.iter()
                    .filter_map(at)
                    .map(|xy| Circle::new(xy, 4, grey.mix(0.7).filled())),
            )?
            .label("fastest that fit")
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, grey.filled()));
        let blue = distinct(0);
        let mut line: Vec<(f64, f64)> = front.iter().filter_map(at).collect();
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.draw_series(LineSeries::new(line.clone(), blue.stroke_width(2)))?;
        chart
            .draw_series(line.iter().map(|&xy| Circle::new(xy, 5, blue.filled())))?
            .label("Pareto front (time, memory)")
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, blue.filled()));
        // Fractions of the axes, as factors on log scales.
        let (xs, ys) = (x_hi / x_lo, y_hi / y_lo);
        let mut named =
            |p: &ParetoPoint, what: &str, color: RGBAColor, above: bool| -> anyhow::Result<()> {
                if let Some(xy) = at(p) {
                    let style = if p.feasible {
                        color.filled()
                    } else {
                        color.stroke_width(2)
                    };
                    chart.draw_series(std::iter::once(Circle::new(xy, 8, style)))?;
                    let label = if p.feasible {
                        format!("{what}: {}", p.strategy)
                    } else {
                        format!("{what} (does not fit): {}", p.strategy)
                    };
                    // Right of the dot, or left of it in the chart's right half (about 6.5 px
                    // a character over some 820 px of plot); above it, or below.
                    let width = label.len() as f64 * 6.5 / 820.0;
                    let x = if xy.0 > (x_lo * x_hi).sqrt() {
                        xy.0 / xs.powf(width + 0.012)
                    } else {
                        xy.0 * xs.powf(0.012)
                    };
                    // Clear of a flat front: a tenth of the axis above, or below.
                    let y = if above {
                        xy.1 * ys.powf(0.10)
                    } else {
                        xy.1 / ys.powf(0.07)
                    };
                    let x = x.max(x_lo);
                    // A leader from the label's end nearest the dot to the dot, so that a
                    // label landing by another point still names its own.
                    let near = if x < xy.0 { x * xs.powf(width) } else { x };
                    chart.draw_series(LineSeries::new(
                        [(near, y / ys.powf(0.015)), xy],
                        color.mix(0.6).stroke_width(1),
                    ))?;
                    chart.draw_series(std::iter::once(Text::new(
                        label,
                        (x, y),
                        (FONT, 12).into_font().color(&color),
                    )))?;
                }
                Ok(())
            };
        let same = matches!((base, chosen), (Some(b), Some(c)) if b.strategy == c.strategy);
        if let Some(b) = base.filter(|_| !same) {
            named(b, base_name, distinct(3), false)?;
        }
        if let Some(c) = chosen {
            let what = if same {
                format!("chosen ({base_name})")
            } else {
                "chosen".to_string()
            };
            let what = what.as_str();
            named(c, what, distinct(2), true)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// One component's share of one budget, in the given design and the optimized one.
pub(super) struct BudgetShare {
    pub(super) resource: &'static str,
    pub(super) component: String,
    pub(super) given: f64,
    pub(super) optimized: f64,
}

/// The chip drawn: for each budget (area, power, perimeter) two stacked bars, the given
/// split and the optimized one, each component a colour (the same in every bar) labelled
/// with its share where it fits; each panel says how much of the budget the optimized design
/// uses and whether it binds; under them, what limits each component (`bound_by`).
pub(super) fn budget_svg(
    title: &str,
    shares: &[BudgetShare],
    used: &[(&'static str, f64)],
    bound_by: &[(String, String)],
) -> anyhow::Result<String> {
    let mut components: Vec<&str> = Vec::new();
    for s in shares {
        if !components.contains(&s.component.as_str()) {
            components.push(&s.component);
        }
    }
    let colour = |c: &str| distinct(components.iter().position(|x| *x == c).unwrap_or(0));
    let resources: Vec<&str> = {
        let mut r: Vec<&str> = Vec::new();
        for s in shares {
            if !r.contains(&s.resource) {
                r.push(s.resource);
            }
        }
        r
    };
    let notes: Vec<String> = bound_by
        .iter()
        .filter(|(_, b)| !b.is_empty())
        .map(|(c, b)| format!("{c}: {b}"))
        .collect();
    let mut svg = String::new();
    {
        // The footer: the key, then the notes about 130 characters a line.
        let note_lines = notes.iter().map(|n| n.len() + 2).sum::<usize>() / 130 + 2;
        let height = 200 * resources.len().max(1) as u32 + 60 + 16 * note_lines as u32;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 18))?;
        let (panels, foot) = root.split_vertically(200 * resources.len().max(1) as u32);
        let areas = panels.split_evenly((resources.len().max(1), 1));
        for (area, resource) in areas.iter().zip(&resources) {
            let (share_used, binds) = used
                .iter()
                .find(|(r, _)| r == resource)
                .map_or((f64::NAN, false), |&(_, u)| (u, u > 0.99));
            let caption = if share_used.is_finite() {
                format!(
                    "{resource}: the optimized design uses {:.1}% of the budget{}",
                    100.0 * share_used,
                    if binds { " (binding)" } else { "" }
                )
            } else {
                format!("{resource}: no budget")
            };
            let mut chart = ChartBuilder::on(area)
                .caption(caption, (FONT, 14))
                .margin(6)
                .margin_right(28)
                .x_label_area_size(38)
                .y_label_area_size(80)
                .build_cartesian_2d(0.0..1.0f64, 0.0..2.0f64)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .light_line_style(WHITE.mix(0.0))
                .x_desc("share of the budget allocated to each component")
                .axis_desc_style((FONT, 11))
                .x_labels(11)
                .x_label_formatter(&|x| format!("{:.0}%", 100.0 * x))
                .y_labels(5)
                .y_label_formatter(&|y| {
                    if (y - 1.5).abs() < 1e-6 {
                        "given".into()
                    } else if (y - 0.5).abs() < 1e-6 {
                        "optimized".into()
                    } else {
                        String::new()
                    }
                })
                .label_style((FONT, 12))
                .draw()?;
            for (row, optimized) in [(1.0, false), (0.0, true)] {
                let mut at = 0.0;
                for s in shares.iter().filter(|s| s.resource == *resource) {
                    let share = if optimized { s.optimized } else { s.given };
                    if share.is_nan() || share <= 0.0 {
                        continue;
                    }
                    let color = colour(&s.component);
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(at, row + 0.15), ((at + share).min(1.0), row + 0.85)],
                        color.mix(0.8).filled(),
                    )))?;
                    if share >= 0.07 {
                        chart.draw_series(std::iter::once(Text::new(
                            format!("{} {:.0}%", s.component, 100.0 * share),
                            (at + 0.005, row + 0.58),
                            (FONT, 12).into_font().color(&WHITE),
                        )))?;
                    }
                    at += share;
                }
            }
        }
        // The key (every component, small shares included) and what limits each.
        let mut x = 20;
        for c in &components {
            let color = colour(c);
            foot.draw(&Rectangle::new([(x, 8), (x + 12, 20)], color.filled()))?;
            foot.draw(&Text::new(c.to_string(), (x + 16, 8), (FONT, 12)))?;
            x += 30 + 8 * c.len() as i32;
        }
        let mut line = String::from("what limits each component (optimized): ");
        let mut y = 34;
        for note in &notes {
            if line.len() + note.len() > 150 {
                foot.draw(&Text::new(line.clone(), (20, y), (FONT, 11)))?;
                y += 16;
                line = String::from("    ");
            }
            line.push_str(note);
            line.push_str("; ");
        }
        foot.draw(&Text::new(line, (20, y), (FONT, 11)))?;
        root.present()?;
    }
    Ok(svg)
}

/// One sensitivity at the optimum.
pub(super) struct Shadow {
    pub(super) label: String,
    /// Relative change of the time per extra 1% of the resource's whole budget, %.
    pub(super) percent: f64,
    /// The slope in the resource's own unit, written beside its bar.
    pub(super) slope: String,
}

/// The sensitivities (shadow prices) as bars: per component and budget, the change of the
/// time per iteration for 1% more of that budget (negative: it helps), each labelled with
/// its slope in the budget's unit.
pub(super) fn sensitivity_svg(title: &str, shadows: &[Shadow]) -> anyhow::Result<String> {
    let most = shadows
        .iter()
        .map(|s| s.percent.abs())
        .filter(|p| p.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let rows = shadows.len().max(1);
    let labels: Vec<String> = shadows.iter().map(|s| s.label.clone()).collect();
    let mut svg = String::new();
    {
        let height = 26 * rows as u32 + 130;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 18))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(170)
            .build_cartesian_2d(-most * 1.6..most * 1.6, 0.0..rows as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_desc("time per iteration per +1% of the whole budget (%; negative: it helps)")
            .x_label_formatter(&|x| {
                // Digits to tell ticks about a tenth of the axis apart; no "-0.0" at zero.
                let digits = (-(most * 0.32).log10().floor()).max(0.0) as usize;
                let x = if x.abs() < most * 1e-9 { 0.0 } else { *x };
                format!("{x:.digits$}")
            })
            .y_labels(rows * 2 + 1)
            .y_label_formatter(&|y| {
                let i = y - 0.5;
                if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                    labels
                        .get(rows - 1 - i.round() as usize)
                        .cloned()
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()?;
        for (i, s) in shadows.iter().enumerate() {
            let y = (rows - 1 - i) as f64;
            let color = if s.percent < 0.0 {
                distinct(2)
            } else if s.percent > 0.0 {
                distinct(1)
            } else {
                RGBColor(150, 150, 150).to_rgba()
            };
            let v = if s.percent.is_finite() {
                s.percent
            } else {
                0.0
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0f64.min(v), y + 0.2), (0.0f64.max(v), y + 0.8)],
                color.mix(0.8).filled(),
            )))?;
            // Beside the bar's end: about 6.2 px a character over some 800 px spanning
            // 3.2 x `most`.
            let x = if v < 0.0 {
                v - most * 0.02 - most * 0.025 * s.slope.len() as f64
            } else {
                v + most * 0.02
            };
            chart.draw_series(std::iter::once(Text::new(
                s.slope.clone(),
                (x, y + 0.72),
                (FONT, 11),
            )))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The colour of a timeline slice and its name in the key.
fn slice_style(kind: crate::distributed::trace::SliceKind) -> (RGBColor, &'static str) {
    use crate::distributed::trace::SliceKind as K;
    match kind {
        K::Forward => (RGBColor(31, 119, 180), "forward"),
        K::Recompute => (RGBColor(188, 189, 34), "recompute"),
        K::Backward => (RGBColor(255, 127, 14), "backward"),
        K::Bubble => (RGBColor(225, 225, 225), "bubble"),
        K::Wait => (
            RGBColor(214, 39, 40),
            "waiting (gradients, slowed collectives)",
        ),
        K::Update => (RGBColor(44, 160, 44), "optimizer update"),
        K::Collective => (RGBColor(148, 103, 189), "collective"),
        K::Send => (RGBColor(140, 86, 75), "pipeline send"),
        K::Sparse => (RGBColor(23, 190, 207), "embedding tables (engines, hosts)"),
    }
}

/// The iteration's timeline ([`Trace`](crate::distributed::Trace)) between `from_s` and
/// `to_s` as a chart: per pipeline stage a row of its compute and a row of its network
/// (blocking collectives, the communication stream and the sends together). Each pixel
/// column is coloured by what ran in it, the kinds' colours mixed in proportion to their
/// time and faded to white by the time nothing ran: slices wider than a pixel keep their
/// colour, thousands of interleaved steps show as their mix, and the chart stays of a
/// bounded size however many steps the iteration has.
pub(super) fn timeline_svg(
    title: &str,
    t: &crate::distributed::Trace,
    (from_s, to_s): (f64, f64),
) -> anyhow::Result<String> {
    use crate::distributed::trace::{SliceKind, TrackKind};
    const COLUMNS: usize = 860;
    const KINDS: [SliceKind; 9] = [
        SliceKind::Forward,
        SliceKind::Recompute,
        SliceKind::Backward,
        SliceKind::Bubble,
        SliceKind::Wait,
        SliceKind::Update,
        SliceKind::Collective,
        SliceKind::Send,
        SliceKind::Sparse,
    ];
    let stages = t.steps.len().max(1);
    // Per stage its compute and its network (with its embedding engines, if any); the
    // hosts' tables, when they keep some, in a row of their own at the bottom.
    let hosts = t.tracks.iter().any(|k| k.kind == TrackKind::Host);
    let engines = t.tracks.iter().any(|k| k.kind == TrackKind::Sparse);
    let rows = 2 * stages + usize::from(hosts);
    let span = (to_s - from_s).max(1e-30);
    // The unit of the time axis.
    let (scale, unit) = if to_s >= 1.0 {
        (1.0, "s")
    } else if to_s >= 1e-3 {
        (1e3, "ms")
    } else {
        (1e6, "us")
    };
    let index = |k: SliceKind| KINDS.iter().position(|x| *x == k).unwrap_or(0);
    let width = span / COLUMNS as f64;
    // Per row and pixel column: the share of the column's time per kind.
    let mut busy = vec![[0.0f64; KINDS.len()]; rows * COLUMNS];
    let mut used = [false; KINDS.len()];
    for track in &t.tracks {
        let row = if track.kind == TrackKind::Host {
            2 * stages
        } else if track.stage < stages {
            2 * track.stage + usize::from(track.kind != TrackKind::Compute)
        } else {
            continue;
        };
        for s in &track.slices {
            let (a, b) = ((s.start_s - from_s) / width, (s.end_s() - from_s) / width);
            if b <= 0.0 || a >= COLUMNS as f64 {
                continue;
            }
            used[index(s.kind)] = true;
            let mut c = a.floor().max(0.0) as usize;
            while (c as f64) < b && c < COLUMNS {
                let overlap = (b.min(c as f64 + 1.0) - a.max(c as f64)).max(0.0);
                busy[row * COLUMNS + c][index(s.kind)] += overlap;
                c += 1;
            }
        }
    }
    // A column's colour: its kinds mixed by time, faded to white by its idle share;
    // quantized so that runs of alike columns merge into one rectangle.
    let colour_of = |cell: &[f64; KINDS.len()]| -> Option<(u8, u8, u8)> {
        let total: f64 = cell.iter().sum();
        if total < 0.02 {
            return None;
        }
        let mut mix = [0.0f64; 3];
        for (k, share) in cell.iter().enumerate() {
            let c = slice_style(KINDS[k]).0;
            for (m, v) in mix.iter_mut().zip([c.0, c.1, c.2]) {
                *m += share / total * v as f64;
            }
        }
        let fill = total.min(1.0);
        let q = |v: f64| ((255.0 - (255.0 - v) * fill) / 12.0).round() as u8 * 12;
        Some((q(mix[0]), q(mix[1]), q(mix[2])))
    };
    let mut svg = String::new();
    {
        let plot = (18 * rows).clamp(100, 640) as u32;
        let height = plot + 150;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 16))?;
        let (area, foot) = root.split_vertically(plot + 60);
        let mut chart = ChartBuilder::on(&area)
            .margin(8)
            .margin_right(24)
            .x_label_area_size(40)
            .y_label_area_size(110)
            .build_cartesian_2d(from_s * scale..to_s * scale, 0.0..rows as f64)?;
        // Every row labelled while they fit; past 24 rows, every few stages' compute.
        let every = (rows / 32).max(1);
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_desc(format!("time in the iteration ({unit})"))
            .y_labels(2 * rows + 1)
            .y_label_formatter(&|y| {
                let i = y - 0.5;
                if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                    let r = rows - 1 - i.round() as usize;
                    if hosts && r == 2 * stages {
                        return "hosts' tables".into();
                    }
                    if r % 2 == 1 {
                        return match (rows <= 24, engines) {
                            (true, false) => "network".into(),
                            (true, true) => "network, engines".into(),
                            (false, _) => String::new(),
                        };
                    }
                    if (r / 2) % every == 0 {
                        return format!("stage {} compute", r / 2);
                    }
                }
                String::new()
            })
            .label_style((FONT, 11))
            .axis_desc_style((FONT, 12))
            .draw()?;
        let x = |c: usize| (from_s + c as f64 * width) * scale;
        for r in 0..rows {
            let y = (rows - 1 - r) as f64;
            let mut run: Option<(usize, (u8, u8, u8))> = None;
            let mut rects = Vec::new();
            for c in 0..=COLUMNS {
                let k = if c < COLUMNS {
                    colour_of(&busy[r * COLUMNS + c])
                } else {
                    None
                };
                if run.map(|x| Some(x.1)) != Some(k) {
                    if let Some((start, colour)) = run.take() {
                        rects.push((start, c, colour));
                    }
                    run = k.map(|k| (c, k));
                }
            }
            for (a, b, (red, green, blue)) in rects {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x(a), y + 0.12), (x(b), y + 0.88)],
                    RGBColor(red, green, blue).filled(),
                )))?;
            }
        }
        // The key, for the kinds drawn.
        let mut at = 20;
        for (_, kind) in KINDS.iter().enumerate().filter(|(k, _)| used[*k]) {
            let (colour, name) = slice_style(*kind);
            foot.draw(&Rectangle::new([(at, 10), (at + 12, 22)], colour.filled()))?;
            foot.draw(&Text::new(name.to_string(), (at + 16, 10), (FONT, 12)))?;
            at += 30 + 7 * name.len() as i32;
        }
        foot.draw(&Text::new(
            format!(
                "{} micro-batch{} on {} devices, one device per stage drawn. Mixed colours: \
                 steps shorter than a pixel (forward and backward interleaved); pale: idle \
                 part of the pixel.",
                t.micro_batches,
                if t.micro_batches == 1 { "" } else { "es" },
                t.devices
            ),
            (20, 36),
            (FONT, 11),
        ))?;
        foot.draw(&Text::new(
            "Every step, collective and send with its name and size: predict --trace \
             FILE.json (Perfetto)."
                .to_string(),
            (20, 52),
            (FONT, 11),
        ))?;
        root.present()?;
    }
    Ok(svg)
}

/// Windows of a timeline worth drawing apart from the whole: the pipeline filling (until
/// the first stage's first backward step has run a few steps) and draining (from the
/// earliest last forward step of any stage to the end), each at least 2% of the
/// iteration; `None` for a timeline without a pipeline.
pub(super) fn timeline_windows(t: &crate::distributed::Trace) -> Option<[(f64, f64); 2]> {
    use crate::distributed::trace::{SliceKind, TrackKind};
    let end = t.time_per_iteration_s;
    if t.steps.len() <= 1 || end.is_nan() || end <= 0.0 {
        return None;
    }
    let compute = |stage: usize| {
        t.tracks
            .iter()
            .find(|k| k.stage == stage && k.kind == TrackKind::Compute)
    };
    let first_backward = compute(0)?
        .slices
        .iter()
        .filter(|s| s.kind == SliceKind::Backward)
        .nth(3)
        .map_or(end, |s| s.end_s());
    let last_forward = (0..t.steps.len())
        .filter_map(|i| {
            compute(i)?
                .slices
                .iter()
                .rev()
                .find(|s| s.kind == SliceKind::Forward)
                .map(|s| s.start_s)
        })
        .fold(end, f64::min);
    let least = 0.02 * end;
    let windows = [
        (0.0, first_backward.max(least).min(end)),
        (last_forward.min(end - least).max(0.0), end),
    ];
    // A window of most of the iteration shows nothing the whole does not.
    windows
        .iter()
        .all(|w| w.1 - w.0 <= 0.6 * end)
        .then_some(windows)
}
