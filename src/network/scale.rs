//! What-if multipliers on a generated machine's resources (MAD Max Sec. 6, Fig. 14: each
//! resource 10x on its own, then all at once), applied after the generator and the system
//! have priced the design: a resource that no budget could buy is still a question an
//! architect asks ("what would 10x inter-node bandwidth be worth?").
//!
//! Owns: [`Scaling`] and its five resources. A new resource: a field, its name in
//! [`Scaling::NAMES`] and [`Scaling::set`], and what it multiplies in [`Scaling::apply`].

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::design::Design;
use crate::generator::{generate, Architecture};

use super::{Fabric, Network, System};

/// Multipliers on one accelerator's resources and the bandwidth it sends into the fabrics
/// (1 each: the machine as generated).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// The chip's throughput: its compute units' (dense peak and sustained, every
    /// precision) and its on-chip memories' bandwidth, which feeds them (a chip with 10x the
    /// FLOPs but the same SRAM bandwidth would be bound by its SRAM, not faster).
    pub compute: f64,
    /// Main memory's bandwidth.
    pub memory_bandwidth: f64,
    /// Main memory's capacity.
    pub memory_capacity: f64,
    /// What a device sends into the innermost fabric (inside a node).
    pub intra_node: f64,
    /// What a device sends into every fabric outside the innermost.
    pub inter_node: f64,
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling {
            compute: 1.0,
            memory_bandwidth: 1.0,
            memory_capacity: 1.0,
            intra_node: 1.0,
            inter_node: 1.0,
        }
    }
}

/// The most any one resource may be scaled by (either way): beyond it the question is no
/// longer about this machine.
pub const MAX_FACTOR: f64 = 1e6;

impl Scaling {
    /// The resources by name, as a study names them (`scale.compute`).
    pub const NAMES: [&'static str; 5] = [
        "compute",
        "memory_bandwidth",
        "memory_capacity",
        "intra_node",
        "inter_node",
    ];

    /// Sets resource `name` to `factor`; the error says what was expected.
    pub fn set(&mut self, name: &str, factor: f64) -> Result<(), String> {
        if !(1.0 / MAX_FACTOR..=MAX_FACTOR).contains(&factor) {
            return Err(format!(
                "a multiplier between {} and {MAX_FACTOR:e}",
                1.0 / MAX_FACTOR
            ));
        }
        let slot = match name {
            "compute" => &mut self.compute,
            "memory_bandwidth" => &mut self.memory_bandwidth,
            "memory_capacity" => &mut self.memory_capacity,
            "intra_node" => &mut self.intra_node,
            "inter_node" => &mut self.inter_node,
            _ => return Err(format!("one of [{}]", Self::NAMES.join(", "))),
        };
        *slot = factor;
        Ok(())
    }

    /// True when every multiplier is 1 (nothing to apply).
    pub fn is_identity(&self) -> bool {
        *self == Scaling::default()
    }

    /// `arch` with its compute and main memory scaled.
    pub fn architecture(&self, arch: &mut Architecture) {
        arch.peak_flops_per_s *= self.compute;
        arch.core.peak_flops_per_s *= self.compute;
        arch.core.sustained_flops_per_s *= self.compute;
        for level in &mut arch.on_chip {
            level.bandwidth_bytes_per_s *= self.compute;
        }
        arch.memory_bandwidth_bytes_per_s *= self.memory_bandwidth;
        arch.main_memory.bandwidth_bytes_per_s *= self.memory_bandwidth;
        arch.memory_capacity_bytes *= self.memory_capacity;
        arch.main_memory.capacity_bytes *= self.memory_capacity;
    }

    /// The accelerator `design` generates and `system`'s network of `devices` of it, both
    /// scaled.
    pub fn machine(
        &self,
        system: &System,
        design: &Design,
        devices: u64,
    ) -> Result<(Architecture, Network), ConfigError> {
        let mut arch = generate(design);
        self.architecture(&mut arch);
        let net = system.network(&arch, devices)?;
        if self.is_identity() {
            return Ok((arch, net));
        }
        let mut fabrics = net.fabrics.clone();
        self.fabrics(&mut fabrics);
        Ok((arch, net.rebuilt(fabrics)))
    }

    /// `fabrics` (innermost first) with what a device sends into each scaled.
    pub fn fabrics(&self, fabrics: &mut [Fabric]) {
        for (i, f) in fabrics.iter_mut().enumerate() {
            f.egress_bytes_per_s *= if i == 0 {
                self.intra_node
            } else {
                self.inter_node
            };
        }
    }
}
