//! Architecture templates (DeepFlow Sec. 4.2, Fig. 3): the compute unit and its bundle, the
//! memory hierarchy with scopes, the package and the system.
//!
//! A template names technology components by their library name (`tensor_core`, `l2_sram`,
//! `hbm3`), so the same template can be generated at any node that defines those names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use crate::config::raw::{self, OperandTile, TemplateFile};
use crate::config::{parse_yaml, Checker, ConfigError, Source};
use crate::domain::{
    Component, Dataflow, McuShape, Precision, Scope, Topology, UtilizationCaps, MAX_DEVICES,
};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Template {
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    pub compute: Compute,
    /// From the level nearest the compute units (registers) to main memory.
    pub memory: Vec<MemoryLevel>,
    pub package: Package,
    pub system: System,
    /// What a software stack achieves over whole steps on this accelerator.
    pub stack: UtilizationCaps,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compute {
    /// Name of the compute component in the technology library.
    pub technology: String,
    pub mcu: McuShape,
    pub dataflow: Dataflow,
    pub max_utilization: f64,
    pub mcus_per_bundle: u64,
    /// Dense throughput per precision relative to the 16-bit peak; `fp32` is always present
    /// and is also the rate of element-wise work.
    pub throughput_by_precision: BTreeMap<Precision, f64>,
    /// Nx x Ny of DeepFlow Eq. 5: the operand block one matrix instruction reads from the
    /// innermost memory level.
    pub operand_tile: OperandTile,
    /// Fixed cost of starting one kernel, in seconds.
    pub kernel_launch_s: f64,
    /// Embedding engines beside the dense cores (TPU SparseCores, TPU v4 Sec. 3.5): when
    /// present, recommendation-model lookups, their updates and their all-to-all run on them
    /// while the dense cores run the MLPs.
    pub sparse_cores: u64,
    /// The chip's measured idle power (die and memory, W): the floor of its power while it
    /// runs. `None` where no figure is published; the generated design's SRAM leakage is
    /// the floor then.
    pub idle_power_w: Option<f64>,
    /// Power the chip draws above idle whenever it runs a program, whatever its rates of
    /// work: the clock tree, instruction issue, the vector, scalar and control logic beside
    /// the matrix units (W). Added to the floor of every run; `None` (0) where not given.
    pub active_power_w: Option<f64>,
    /// Share of the compute units a collective holds while it runs beside compute (NCCL's
    /// and userbuffers' kernels run on SMs): the products beside it run that much slower.
    /// `None` where no figure is published; `tp=overlap` cannot be priced then.
    pub collective_compute_share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryLevel {
    pub name: String,
    pub technology: String,
    pub scope: Scope,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub technology: String,
    pub topology: Topology,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Package {
    pub accelerators: u64,
    pub intra_package: Option<Network>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct System {
    pub packages: u64,
    pub inter_package: Option<Network>,
}

impl Template {
    /// Reads and checks a template file.
    pub fn load(source: Source, path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        Self::from_yaml(&file, &source.read(path)?)
    }

    /// Parses and checks template YAML text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let raw: TemplateFile = parse_yaml(file, text)?;
        let check = Checker { file };
        check.version(raw.version)?;
        let (operand_tile, kernel_launch_s) = check_compute(&check, &raw.compute)?;
        check_memory(file, &raw.memory)?;
        check.positive_count("package.accelerators", raw.package.accelerators)?;
        check.positive_count("system.packages", raw.system.packages)?;
        let intra_package = raw
            .package
            .intra_package
            .map(|n| network(&check, "package.intra_package", n))
            .transpose()?;
        let inter_package = raw
            .system
            .inter_package
            .map(|n| network(&check, "system.inter_package", n))
            .transpose()?;
        let stack = raw.stack.unwrap_or_default();
        let share = |key: &str, u: Option<f64>| {
            u.map(|u| check.within(&format!("stack.{key}"), u, 1e-3, 1.0))
                .transpose()
        };
        let stack = UtilizationCaps {
            compute_utilization: share("compute_utilization", stack.compute_utilization)?,
            fp8_compute_utilization: share(
                "fp8_compute_utilization",
                stack.fp8_compute_utilization,
            )?,
            memory_utilization: share("memory_utilization", stack.memory_utilization)?,
            product_memory_utilization: share(
                "product_memory_utilization",
                stack.product_memory_utilization,
            )?,
            // A step's host work: under a second (engines publish milliseconds at most).
            step_overhead_s: stack
                .step_overhead_us
                .map(|us| check.within("stack.step_overhead_us", us, 0.0, 1e6))
                .transpose()?
                .map(|us| us * 1e-6),
        };
        Ok(Template {
            stack,
            file: file.to_string(),
            name: raw.name,
            description: raw.description,
            compute: Compute {
                technology: raw.compute.technology,
                mcu: raw.compute.mcu,
                dataflow: raw.compute.dataflow,
                max_utilization: raw.compute.max_utilization,
                mcus_per_bundle: raw.compute.mcus_per_bundle,
                throughput_by_precision: raw.compute.throughput_by_precision,
                operand_tile,
                kernel_launch_s,
                sparse_cores: raw.compute.sparse_cores,
                idle_power_w: raw
                    .compute
                    .idle_power_w
                    .map(|w| chip_power(&check, "compute.idle_power_w", w, true))
                    .transpose()?,
                active_power_w: raw
                    .compute
                    .active_power_w
                    .map(|w| chip_power(&check, "compute.active_power_w", w, false))
                    .transpose()?,
                collective_compute_share: match raw.compute.collective_compute_share {
                    None => None,
                    Some(f) if (0.0..1.0).contains(&f) => Some(f),
                    Some(f) => {
                        return Err(ConfigError::invalid(
                            file,
                            "compute.collective_compute_share",
                            f,
                            "a share in [0, 1)",
                        ))
                    }
                },
            },
            memory: raw
                .memory
                .into_iter()
                .map(|l| MemoryLevel {
                    name: l.name,
                    technology: l.technology,
                    scope: l.scope,
                })
                .collect(),
            package: Package {
                accelerators: raw.package.accelerators,
                intra_package,
            },
            system: System {
                packages: raw.system.packages,
                inter_package,
            },
        })
    }

    /// The main-memory (last) level.
    pub fn main_memory(&self) -> &MemoryLevel {
        self.memory.last().expect("validated: at least one level")
    }

    /// Names of the components a budget must share area and power between.
    pub fn budget_components(&self) -> Vec<Component> {
        let mut names = vec![Component::Core];
        names.extend(
            self.memory
                .iter()
                .map(|l| Component::Memory(l.name.clone())),
        );
        names.extend(self.networks());
        names
    }

    /// Names of the components a budget must share the die perimeter between.
    pub fn perimeter_components(&self) -> Vec<Component> {
        let mut names = vec![Component::Memory(self.main_memory().name.clone())];
        names.extend(self.networks());
        names
    }

    /// The networks the template has.
    pub fn networks(&self) -> Vec<Component> {
        let mut names = Vec::new();
        if self.package.intra_package.is_some() {
            names.push(Component::IntraPackage);
        }
        if self.system.inter_package.is_some() {
            names.push(Component::InterPackage);
        }
        names
    }
}

fn network(check: &Checker, path: &str, raw: raw::NetworkRaw) -> Result<Network, ConfigError> {
    check_topology(check, &format!("{path}.topology"), &raw.topology)?;
    Ok(Network {
        technology: raw.technology,
        topology: raw.topology,
    })
}

/// Switch stages a fat tree may have (large clusters use three to five).
pub const MAX_FAT_TREE_LEVELS: u64 = 8;

/// The most a chip's idle or active power may be, in W: 100 kW, five times a wafer-scale
/// engine's ~20 kW (Cerebras CS-2 system power), so that no floor overflows an energy.
pub const CHIP_POWER_MAX_W: f64 = 1e5;

/// A chip's power figure at `path`: above 0 (`positive`) or at least 0, and at most
/// [`CHIP_POWER_MAX_W`].
fn chip_power(check: &Checker, path: &str, w: f64, positive: bool) -> Result<f64, ConfigError> {
    if positive {
        check.positive(path, w)?;
    } else {
        check.non_negative(path, w)?;
    }
    check.within(path, w, 0.0, CHIP_POWER_MAX_W)
}

/// Checks a topology at `path` (grid sizes, twisted-torus shape, fat-tree levels) and
/// returns the members a grid topology joins (at most [`MAX_DEVICES`]).
pub(crate) fn check_topology(
    check: &Checker,
    path: &str,
    topology: &Topology,
) -> Result<Option<u64>, ConfigError> {
    match topology {
        Topology::Mesh { dims } | Topology::Torus { dims } | Topology::TwistedTorus { dims } => {
            if dims.is_empty() || dims.contains(&0) {
                return Err(ConfigError::invalid(
                    check.file,
                    format!("{path}.dims"),
                    format!("{dims:?}"),
                    "expected a non-empty list of sizes >= 1",
                ));
            }
            let twisted_shape = dims.len() == 3
                && dims[2] == 2 * dims[0]
                && (dims[1] == dims[0] || dims[1] == dims[2]);
            if matches!(topology, Topology::TwistedTorus { .. }) && !twisted_shape {
                return Err(ConfigError::invalid(
                    check.file,
                    format!("{path}.dims"),
                    format!("{dims:?}"),
                    "a twisted torus has shape [n, n, 2n] or [n, 2n, 2n]",
                ));
            }
            // Checked as it multiplies: a product past 2^64 would wrap to any value.
            let members = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d).filter(|&n| n <= MAX_DEVICES));
            match members {
                Some(n) => Ok(Some(n)),
                None => Err(ConfigError::invalid(
                    check.file,
                    format!("{path}.dims"),
                    format!("{dims:?}"),
                    format!("at most {MAX_DEVICES} members (2^20) in all"),
                )),
            }
        }
        Topology::FatTree { levels } => {
            check.count_in(&format!("{path}.levels"), *levels, MAX_FAT_TREE_LEVELS)?;
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Checks the compute section; returns its operand tile (the MCU's shape when absent) and
/// its kernel launch time, s.
fn check_compute(check: &Checker, c: &raw::ComputeRaw) -> Result<(OperandTile, f64), ConfigError> {
    let file = check.file;
    check.within("compute.max_utilization", c.max_utilization, 1e-6, 1.0)?;
    check.positive_count("compute.mcus_per_bundle", c.mcus_per_bundle)?;
    let dims: Vec<(&str, u64)> = match c.mcu {
        McuShape::TensorCore { m, n, k } => vec![("m", m), ("n", n), ("k", k)],
        McuShape::SystolicArray { rows, cols } => vec![("rows", rows), ("cols", cols)],
    };
    for (name, value) in dims {
        check.positive_count(&format!("compute.mcu.{name}"), value)?;
    }
    for (precision, ratio) in &c.throughput_by_precision {
        check.positive(
            &format!("compute.throughput_by_precision.{}", precision.name()),
            *ratio,
        )?;
    }
    if !c.throughput_by_precision.contains_key(&Precision::Fp32) {
        return Err(ConfigError::invalid(
            file,
            "compute.throughput_by_precision",
            "(no fp32)",
            "an fp32 entry: the rate of element-wise work",
        ));
    }
    let operand_tile = match c.operand_tile {
        Some(t) => {
            check.positive_count("compute.operand_tile.rows", t.rows)?;
            check.positive_count("compute.operand_tile.cols", t.cols)?;
            t
        }
        None => match c.mcu {
            McuShape::TensorCore { m, n, .. } => OperandTile { rows: m, cols: n },
            McuShape::SystolicArray { rows, cols } => OperandTile { rows, cols },
        },
    };
    let kernel_launch_s =
        check.non_negative("compute.kernel_launch_us", c.kernel_launch_us)? * 1e-6;
    Ok((operand_tile, kernel_launch_s))
}

/// Checks the memory levels: names unique and not reserved, scopes widening to a global
/// main memory.
fn check_memory(file: &str, memory: &[raw::MemoryLevelRaw]) -> Result<(), ConfigError> {
    if memory.is_empty() {
        return Err(ConfigError::invalid(
            file,
            "memory",
            "[]",
            "expected at least one memory level (main memory)",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, level) in memory.iter().enumerate() {
        if Component::RESERVED.contains(&level.name.as_str()) || level.name.is_empty() {
            return Err(ConfigError::invalid(
                file,
                format!("memory[{i}].name"),
                &level.name,
                format!(
                    "a non-empty name other than {}",
                    Component::RESERVED.join(", ")
                ),
            ));
        }
        if !seen.insert(level.name.clone()) {
            return Err(ConfigError::invalid(
                file,
                format!("memory[{i}].name"),
                &level.name,
                "memory level names must be unique",
            ));
        }
        if i > 0 && level.scope < memory[i - 1].scope {
            return Err(ConfigError::invalid(
                file,
                format!("memory[{i}].scope"),
                format!("{:?}", level.scope).to_lowercase(),
                "scopes must widen (mcu -> bundle -> global) from registers to main memory",
            ));
        }
    }
    let last = memory.len() - 1;
    if memory[last].scope != Scope::Global {
        return Err(ConfigError::invalid(
            file,
            format!("memory[{last}].scope"),
            format!("{:?}", memory[last].scope).to_lowercase(),
            "main memory (the last level) must have scope global",
        ));
    }
    Ok(())
}
