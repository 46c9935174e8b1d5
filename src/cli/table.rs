//! Plain-text tables of a derived architecture.

use std::fmt::Write;

use crate::design::Design;
use crate::domain::Component;
use crate::generator::{Architecture, Bound, Usage};

pub fn si(value: f64, unit: &str) -> String {
    let prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in prefixes {
        if value.abs() >= scale {
            return format!("{:.3} {p}{unit}", value / scale);
        }
    }
    format!("{value:.3} {unit}")
}

/// [`si`] with milli and micro prefixes for values below one.
pub fn si_small(value: f64, unit: &str) -> String {
    match value.abs() {
        v if v >= 1.0 || v == 0.0 => si(value, unit),
        v if v >= 1e-3 => format!("{:.3} m{unit}", value * 1e3),
        _ => format!("{:.3} u{unit}", value * 1e6),
    }
}

/// Rows under a header, each column as wide as its widest cell (so long names never break
/// the columns), left-aligned or, where `right[c]`, right-aligned; indented by two spaces.
pub fn aligned(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            std::iter::once(&header)
                .chain(rows)
                .map(|r| r.get(c).map_or(0, |cell| cell.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                let w = widths.get(c).copied().unwrap_or(0);
                if right.get(c).copied().unwrap_or(false) {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str("  ");
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Memory (capacities and footprints) in one unit, GiB, whatever its size: a report
/// compares them (`29.59 TiB of 80.00 GiB` read as the smaller).
pub fn gib(value: f64) -> String {
    let g = value / (1u64 << 30) as f64;
    if g >= 1.0 || g == 0.0 {
        format!("{g:.2} GiB")
    } else if g >= 0.001 {
        format!("{g:.3} GiB")
    } else {
        format!("{g:.2e} GiB")
    }
}

/// `value` with the binary prefix that fits `largest`: a column of sizes in one unit.
pub fn bytes_as(value: f64, largest: f64) -> String {
    let prefixes = [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (scale, p) in prefixes {
        if largest >= scale as f64 {
            return format!("{:.2} {p}", value / scale as f64);
        }
    }
    format!("{value:.0} B")
}

/// A size (a message, an SRAM level) with the binary prefix that fits it.
pub fn bytes(value: f64) -> String {
    bytes_as(value, value)
}

fn usage(u: &Usage) -> String {
    format!("{:.2}/{:.2}", u.used, u.allocated)
}

fn bounds(b: &[Bound]) -> String {
    b.iter()
        .map(|b| format!("{}: {}", b.quantity, b.limit))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Renders the design's files, headline numbers and per-component tables.
pub fn render(design: &Design, a: &Architecture) -> String {
    let mut s = String::new();
    render_summary(&mut s, design, a);
    render_components(&mut s, a);
    if a.violations.is_empty() {
        let _ = writeln!(s, "\nfeasible: every component fits its budget");
    } else {
        let _ = writeln!(s, "\nINFEASIBLE:");
        for v in &a.violations {
            let _ = writeln!(s, "  - {v}");
        }
    }
    s
}

/// Writes the design's files and the headline numbers (peak, main memory, chip totals).
fn render_summary(s: &mut String, design: &Design, a: &Architecture) {
    let _ = writeln!(
        s,
        "budget     {} ({})",
        design.budget_name, design.budget_file
    );
    let _ = writeln!(
        s,
        "template   {} ({})",
        design.template_name, design.template_file
    );
    let _ = writeln!(
        s,
        "technology {} ({})",
        design.node.as_deref().unwrap_or("-"),
        design.tech_file
    );
    let _ = writeln!(
        s,
        "\npeak 16-bit      {}  (sustained {} at {:.0}% utilisation)",
        si(a.peak_flops_per_s, "FLOP/s"),
        si(a.core.sustained_flops_per_s, "FLOP/s"),
        design.core.compute.max_utilization * 100.0
    );
    let _ = writeln!(
        s,
        "main memory      {}  {}",
        gib(a.memory_capacity_bytes),
        si(a.memory_bandwidth_bytes_per_s, "B/s")
    );
    let _ = writeln!(
        s,
        "chip totals      area {} mm2, power {} W, perimeter {} mm",
        usage(&a.chip_area_mm2),
        usage(&a.power_w),
        usage(&a.perimeter_mm)
    );
}

/// Writes the per-component table: core, on-chip memories, main memory and networks.
fn render_components(s: &mut String, a: &Architecture) {
    let row = |name: &str,
               derived: String,
               area: &Usage,
               power: &Usage,
               perimeter: String,
               b: &[Bound]| {
        vec![
            name.to_string(),
            derived,
            usage(area),
            usage(power),
            perimeter,
            bounds(b),
        ]
    };
    let c = &a.core;
    let mut rows = vec![row(
        Component::Core.name(),
        format!(
            "{} MCU/{} bundles {:.3} V {}",
            c.mcus,
            c.bundles,
            c.voltage_v,
            si(c.frequency_hz, "Hz")
        ),
        &c.area_mm2,
        &c.power_w,
        "-".into(),
        &c.bounds,
    )];
    for l in &a.on_chip {
        rows.push(row(
            &l.name,
            format!(
                "{} banks {} {}",
                l.banks,
                bytes(l.capacity_bytes),
                si(l.bandwidth_bytes_per_s, "B/s")
            ),
            &l.area_mm2,
            &l.power_w,
            "-".into(),
            &l.bounds,
        ));
    }
    let m = &a.main_memory;
    rows.push(row(
        &m.name,
        format!(
            "{} x {} {:.3} V {}",
            m.devices,
            m.technology,
            m.voltage_v,
            si(m.data_rate_bit_per_s, "b/s")
        ),
        &m.area_mm2,
        &m.power_w,
        usage(&m.perimeter_mm),
        &m.bounds,
    ));
    for (name, n) in [
        (Component::IntraPackage.name(), &a.intra_package),
        (Component::InterPackage.name(), &a.inter_package),
    ] {
        if let Some(n) = n {
            rows.push(row(
                name,
                format!(
                    "{} lanes {} {}",
                    n.lanes,
                    n.technology,
                    si(n.bandwidth_bytes_per_s, "B/s")
                ),
                &n.area_mm2,
                &n.power_w,
                usage(&n.perimeter_mm),
                &n.bounds,
            ));
        }
    }
    let _ = writeln!(s);
    s.push_str(&aligned(
        &[
            "component",
            "derived",
            "area mm2",
            "power W",
            "perimeter mm",
            "bound by",
        ],
        &rows,
        &[false, false, true, true, true, false],
    ));
}
