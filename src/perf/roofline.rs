//! The hierarchical roofline of a prediction (Williams, Waterman and Patterson, "Roofline",
//! CACM 2009; DeepFlow Sec. 6): the machine's ceilings (one bandwidth line per memory
//! level, one compute roof per precision) and each kernel as a point at its operational
//! intensity against main memory and the throughput it achieved. What the roofline chart
//! draws; the chart itself belongs to the command line.

use serde::Serialize;

use super::{Bound, KernelReport, Machine};
use crate::domain::Precision;
use crate::workload::KernelClass;

/// A memory level's bandwidth line: `bandwidth x intensity` FLOP/s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    pub level: String,
    pub bandwidth_bytes_per_s: f64,
}

/// A compute roof: the sustained matrix rate in a precision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Roof {
    pub precision: Precision,
    pub flops_per_s: f64,
}

/// One kernel on the chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RooflinePoint {
    pub name: String,
    pub class: KernelClass,
    pub count: u64,
    /// FLOPs per byte crossing main memory (one instance). Infinite when its operands
    /// never leave the chip.
    pub intensity_flop_per_byte: f64,
    /// FLOP/s over the instance's whole time (its launch included).
    pub achieved_flops_per_s: f64,
    /// Share of the prediction's kernel time.
    pub time_share: f64,
    /// What sets its time: compute or a memory level.
    pub bound: Bound,
}

/// The machine's ceilings and the kernels under them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    /// Innermost level first; main memory last.
    pub ceilings: Vec<Ceiling>,
    /// Main memory's line for products (GEMMs), where the stack's product cap
    /// (`stack.product_memory_utilization`) puts it below the streaming kernels' line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_memory: Option<Ceiling>,
    pub roofs: Vec<Roof>,
    /// Kernels that compute (pure data movement has no place on the chart).
    pub points: Vec<RooflinePoint>,
    /// Kernels left off: no FLOPs (gathers, copies).
    pub without_flops: usize,
}

impl Roofline {
    /// The roofline of `kernels` (a prediction's, or one device's) on `machine`.
    pub fn of(machine: &Machine, kernels: &[KernelReport]) -> Roofline {
        let ceilings = machine
            .levels
            .iter()
            .map(|l| Ceiling {
                level: l.name.clone(),
                bandwidth_bytes_per_s: l.bandwidth_bytes_per_s,
            })
            .collect();
        let products = machine.product_bandwidth_bytes_per_s();
        let product_memory = machine
            .levels
            .last()
            .filter(|l| products != l.bandwidth_bytes_per_s)
            .map(|l| Ceiling {
                level: format!("{} (products)", l.name),
                bandwidth_bytes_per_s: products,
            });
        let roofs = machine
            .throughput_by_precision
            .keys()
            .filter_map(|&precision| {
                machine.matrix_rate(precision).map(|flops_per_s| Roof {
                    precision,
                    flops_per_s,
                })
            })
            .collect();
        let total: f64 = kernels.iter().map(|k| k.time_s).sum();
        let mut without_flops = 0;
        let points = kernels
            .iter()
            .filter_map(|k| {
                let t = &k.detail;
                let flops = if k.count > 0 {
                    k.flops / k.count as f64
                } else {
                    0.0
                };
                if flops <= 0.0 || t.time_s <= 0.0 {
                    without_flops += 1;
                    return None;
                }
                let dram = t.level_bytes.last().copied().unwrap_or(0.0);
                Some(RooflinePoint {
                    name: k.name.clone(),
                    class: k.class,
                    count: k.count,
                    intensity_flop_per_byte: if dram > 0.0 {
                        flops / dram
                    } else {
                        f64::INFINITY
                    },
                    achieved_flops_per_s: flops / t.time_s,
                    time_share: if total > 0.0 { k.time_s / total } else { 0.0 },
                    bound: k.bound.clone(),
                })
            })
            .collect();
        Roofline {
            ceilings,
            product_memory,
            roofs,
            points,
            without_flops,
        }
    }

    /// The highest roof (the chart's top).
    pub fn peak_flops_per_s(&self) -> f64 {
        self.roofs.iter().map(|r| r.flops_per_s).fold(0.0, f64::max)
    }

    /// Main memory's bandwidth line.
    pub fn main_memory(&self) -> Option<&Ceiling> {
        self.ceilings.last()
    }

    /// The attainable FLOP/s at `intensity` against main memory in `precision`: the
    /// lesser of its roof and main memory's line.
    pub fn attainable(&self, precision: Precision, intensity: f64) -> f64 {
        let roof = self
            .roofs
            .iter()
            .find(|r| r.precision == precision)
            .map_or(0.0, |r| r.flops_per_s);
        let line = self
            .main_memory()
            .map_or(f64::INFINITY, |c| c.bandwidth_bytes_per_s * intensity);
        roof.min(line)
    }
}
