//! A processor given by its rates rather than derived from budgets (a Calculon system's
//! `matrix`, `vector` and `mem1`): peak matrix and vector FLOP/s, main-memory capacity and
//! bandwidth, and the efficiency each achieves as a step function of the operation's size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Architecture, CoreReport, MainMemoryReport, Usage};
use crate::config::raw::OperandTile;
use crate::domain::{Dataflow, McuShape, Precision, UtilizationCaps};

/// Efficiency over operation size, a step function: the efficiency of the largest
/// threshold at or below the size (Calculon's `gflops_efficiency` and `MB_efficiency`,
/// with thresholds in FLOPs or bytes). Thresholds descend; the last is 0, so every size
/// has an efficiency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// (threshold, efficiency), thresholds strictly descending to 0.
    pub steps: Vec<(f64, f64)>,
}

impl Curve {
    /// The efficiency of an operation of `size` FLOPs or bytes.
    pub fn at(&self, size: f64) -> f64 {
        self.steps
            .iter()
            .find(|(from, _)| size >= *from)
            .or(self.steps.last())
            .map_or(1.0, |s| s.1)
    }

    /// The curve's numbers, bit for bit (for a machine's fingerprint).
    pub fn bits(&self) -> impl Iterator<Item = u64> + '_ {
        self.steps
            .iter()
            .flat_map(|(a, b)| [a.to_bits(), b.to_bits()])
    }
}

/// What a pinned processor adds to the roofline: efficiency curves and how compute and
/// memory time combine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pinned {
    /// Matrix-unit efficiency by the FLOPs of one kernel, per precision.
    pub matrix: BTreeMap<Precision, Curve>,
    /// Element-wise (vector-unit) FLOP/s and efficiency by the FLOPs of one kernel.
    pub vector_flops_per_s: f64,
    pub vector: Curve,
    /// Main-memory efficiency by the bytes one kernel moves.
    pub memory: Curve,
    /// Compute and memory time add (Calculon's `no_overlap`) instead of overlapping
    /// (`roofline`, the maximum).
    pub serial: bool,
}

impl Pinned {
    /// The matrix units' efficiency on a kernel of `flops` in `precision`.
    pub fn matrix_efficiency(&self, precision: Precision, flops: f64) -> f64 {
        self.matrix.get(&precision).map_or(1.0, |c| c.at(flops))
    }
}

/// A pinned processor's inputs, checked: its rates and capacity beside its curves.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedSpec {
    pub name: String,
    /// Matrix FLOP/s per precision (each with its curve in `curves.matrix`).
    pub matrix_flops_per_s: BTreeMap<Precision, f64>,
    pub memory_capacity_bytes: f64,
    pub memory_bandwidth_bytes_per_s: f64,
    pub kernel_launch_s: f64,
    /// Share of the processor a collective holds while it runs beside compute.
    pub collective_compute_share: Option<f64>,
    pub curves: Pinned,
}

/// The architecture of a pinned processor: one memory level (main memory), no budgets.
/// The peak is the 16-bit matrix rate (the largest rate where no 16-bit one is given).
pub fn pinned(spec: &PinnedSpec) -> Architecture {
    let peak = [Precision::Bf16, Precision::Fp16]
        .iter()
        .find_map(|p| spec.matrix_flops_per_s.get(p).copied())
        .unwrap_or_else(|| {
            spec.matrix_flops_per_s
                .values()
                .copied()
                .fold(0.0, f64::max)
        });
    let none = Usage::new(0.0, 0.0);
    let core = CoreReport {
        technology: "pinned".into(),
        mcus: 0,
        bundles: 0,
        voltage_v: 0.0,
        frequency_hz: 0.0,
        peak_flops_per_s: peak,
        sustained_flops_per_s: peak,
        mcu: McuShape::TensorCore { m: 1, n: 1, k: 1 },
        dataflow: Dataflow::Best,
        max_utilization: 1.0,
        throughput_by_precision: spec
            .matrix_flops_per_s
            .iter()
            .map(|(p, rate)| (*p, rate / peak))
            .collect(),
        operand_tile: OperandTile { rows: 1, cols: 1 },
        kernel_launch_s: spec.kernel_launch_s,
        sparse_cores: 0,
        idle_power_w: None,
        active_power_w: None,
        collective_compute_share: spec.collective_compute_share,
        area_mm2: none,
        power_w: none,
        bounds: Vec::new(),
    };
    let main_memory = MainMemoryReport {
        name: "mem1".into(),
        technology: "pinned".into(),
        devices: 1,
        links: 0,
        active_links: 0,
        voltage_v: 0.0,
        data_rate_bit_per_s: 0.0,
        capacity_bytes: spec.memory_capacity_bytes,
        bandwidth_bytes_per_s: spec.memory_bandwidth_bytes_per_s,
        latency_s: 0.0,
        area_mm2: none,
        node_area_mm2: none,
        power_w: none,
        perimeter_mm: none,
        bounds: Vec::new(),
    };
    Architecture {
        peak_flops_per_s: peak,
        memory_bandwidth_bytes_per_s: spec.memory_bandwidth_bytes_per_s,
        memory_capacity_bytes: spec.memory_capacity_bytes,
        budget: format!("(pinned processor {})", spec.name),
        template: spec.name.clone(),
        node: None,
        core,
        on_chip: Vec::new(),
        main_memory,
        intra_package: None,
        inter_package: None,
        accelerators_per_package: 1,
        packages: 1,
        chip_area_mm2: none,
        power_w: none,
        perimeter_mm: none,
        violations: Vec::new(),
        caps: UtilizationCaps::default(),
        pinned: Some(spec.curves.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_steps_down_at_each_threshold() {
        let c = Curve {
            steps: vec![(128e9, 0.95), (16e9, 0.9), (1e9, 0.6), (0.0, 0.1)],
        };
        assert_eq!(c.at(200e9), 0.95);
        assert_eq!(c.at(128e9), 0.95);
        assert_eq!(c.at(127.9e9), 0.9);
        assert_eq!(c.at(1e9), 0.6);
        assert_eq!(c.at(0.5e9), 0.1);
        assert_eq!(c.at(0.0), 0.1);
    }
}
