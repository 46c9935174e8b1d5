//! The architecture generator (DeepFlow Sec. 4.4): technology x template x budget ->
//! compute throughput, memory capacities and bandwidths, and network bandwidths, with the
//! constraint that binds each component.
//!
//! # Equations
//! - Core (Sec. 4.4.1, Eq. 1): bundles `= floor(A_core / (mcus_per_bundle * a_mcu))`, then the
//!   [`operating_point`] under `P_core`; throughput `= N_mcu * flops_per_cycle * f_op`
//!   (= `N * flop_nominal * f_op / f_nominal`), times `max_utilization` for the sustained rate.
//!   Bundles (SMs, TensorCores) are the unit of replication: a fraction of an SM is not built.
//! - On-chip memory (Sec. 4.4.2, Eq. 2-3): each bank costs its cells and periphery
//!   (`bits * a_bit / (1 - overhead)`), its controller, and one crosspoint per client of the
//!   crossbar joining the level's banks to the components under its scope. Banks are
//!   `floor(A / cost)`, shared evenly between the level's instances (one per MCU, bundle or
//!   chip). `P_static = p_bit * bits` (Eq. 2); bandwidth `= (P - P_static - P_ctrl) / E_bit`
//!   (Eq. 3). If leakage alone exceeds the power share, banks are removed until it fits and the
//!   level has no access bandwidth (zero, not a tiny number).
//! - Main memory (Sec. 4.4.3, Eq. 4): devices `= min(node area outside the die / device area,
//!   A_ctrl / controller area, perimeter * links_per_mm / links_per_device)`; the links'
//!   data rate follows the [`operating_point`] under the power left after device leakage.
//! - Networks (Sec. 4.4.4): lanes `= min(A / a_lane, perimeter * lanes_per_mm)`; data rate
//!   from the [`operating_point`]; bandwidth `= lanes * rate * encoding_efficiency`.
//!
//! All bandwidths are bytes/s summed over directions (as datasheets quote NVLink).
//!
//! Owns: [`generate`] (core, memory levels, networks, budget checks as typed
//! [`crate::violation::Violation`]s) and the [`operating_point`] solver. Imports the design
//! and technology stages. A new component kind: its report here, its share in
//! `crate::domain::Component`, its checks in `check_budgets`.

mod operating_point;
mod pinned;

use serde::{Deserialize, Serialize};

pub use operating_point::{operating_point, Limit, OperatingPoint};
pub use pinned::{pinned, Curve, Pinned, PinnedSpec};

use std::collections::BTreeMap;

use crate::config::raw::OperandTile;
use crate::design::{Design, LevelTech, NetworkDesign};
pub use crate::domain::UtilizationCaps;
use crate::domain::{Component, Dataflow, McuShape, Precision, Scope, Topology};
use crate::tech::{DramTech, SramTech};
use crate::violation::Violation;

/// Relative slack when comparing used against allocated budget.
const BUDGET_SLACK: f64 = 1e-9;

/// Allocated versus used amount of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub allocated: f64,
    pub used: f64,
}

impl Usage {
    fn new(allocated: f64, used: f64) -> Self {
        Self { allocated, used }
    }

    fn exceeded(&self) -> bool {
        self.used > self.allocated * (1.0 + BUDGET_SLACK) + 1e-12
    }
}

/// Which constraint limited one quantity of a component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bound {
    pub quantity: String,
    pub limit: Limit,
}

fn bound(quantity: &'static str, limit: Limit) -> Bound {
    Bound {
        quantity: quantity.to_string(),
        limit,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreReport {
    pub technology: String,
    pub mcus: u64,
    pub bundles: u64,
    pub voltage_v: f64,
    pub frequency_hz: f64,
    /// Dense 16-bit peak.
    pub peak_flops_per_s: f64,
    /// Peak times the template's maximum utilisation.
    pub sustained_flops_per_s: f64,
    pub mcu: McuShape,
    pub dataflow: Dataflow,
    pub max_utilization: f64,
    /// Throughput per precision relative to `peak_flops_per_s`.
    pub throughput_by_precision: BTreeMap<Precision, f64>,
    pub operand_tile: OperandTile,
    pub kernel_launch_s: f64,
    /// Embedding engines beside the dense cores (TPU SparseCores); 0 when none.
    #[serde(default)]
    pub sparse_cores: u64,
    /// The chip's measured idle power from the template, W (`None` where none is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_power_w: Option<f64>,
    /// Power above idle while the chip runs a program, whatever its rates, from the template,
    /// W (`None` where none is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_power_w: Option<f64>,
    /// Share of the compute units a collective holds beside compute, from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_compute_share: Option<f64>,
    pub area_mm2: Usage,
    pub power_w: Usage,
    pub bounds: Vec<Bound>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnChipReport {
    pub name: String,
    pub technology: String,
    pub scope: Scope,
    /// Copies of the level (one per MCU, bundle or chip).
    pub instances: u64,
    pub banks: u64,
    pub banks_per_instance: u64,
    /// Crossbar clients per instance.
    pub clients_per_instance: u64,
    pub capacity_bytes: f64,
    pub bandwidth_bytes_per_s: f64,
    pub static_power_w: f64,
    pub latency_s: f64,
    pub area_mm2: Usage,
    pub power_w: Usage,
    pub bounds: Vec<Bound>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MainMemoryReport {
    pub name: String,
    pub technology: String,
    pub devices: u64,
    pub links: u64,
    /// Links powered; fewer than `links` only at the voltage floor.
    pub active_links: u64,
    pub voltage_v: f64,
    pub data_rate_bit_per_s: f64,
    pub capacity_bytes: f64,
    pub bandwidth_bytes_per_s: f64,
    pub latency_s: f64,
    /// Controller and PHY area on the die.
    pub area_mm2: Usage,
    /// Package area outside the die taken by the devices.
    pub node_area_mm2: Usage,
    pub power_w: Usage,
    pub perimeter_mm: Usage,
    pub bounds: Vec<Bound>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkReport {
    pub technology: String,
    pub topology: Topology,
    pub lanes: u64,
    pub voltage_v: f64,
    pub data_rate_bit_per_s: f64,
    /// Payload bandwidth summed over all lanes (both directions).
    pub bandwidth_bytes_per_s: f64,
    pub latency_s: f64,
    pub area_mm2: Usage,
    pub power_w: Usage,
    pub perimeter_mm: Usage,
    pub bounds: Vec<Bound>,
}

/// The derived accelerator: what the performance model consumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Architecture {
    /// Dense 16-bit peak of one accelerator, FLOP/s.
    pub peak_flops_per_s: f64,
    /// Main-memory bandwidth of one accelerator, B/s.
    pub memory_bandwidth_bytes_per_s: f64,
    /// Main-memory capacity of one accelerator, bytes.
    pub memory_capacity_bytes: f64,
    pub budget: String,
    pub template: String,
    pub node: Option<String>,
    pub core: CoreReport,
    pub on_chip: Vec<OnChipReport>,
    pub main_memory: MainMemoryReport,
    pub intra_package: Option<NetworkReport>,
    pub inter_package: Option<NetworkReport>,
    pub accelerators_per_package: u64,
    pub packages: u64,
    /// Whole-chip totals.
    pub chip_area_mm2: Usage,
    pub power_w: Usage,
    pub perimeter_mm: Usage,
    /// Why the design is not usable (empty when it is). An over-budget component is listed
    /// here rather than panicking, though the generator is built never to produce one.
    pub violations: Vec<Violation>,
    /// What the software stack achieves over whole steps (the template's `stack:`; none
    /// where it gives none).
    #[serde(default, skip_serializing_if = "UtilizationCaps::is_none")]
    pub caps: UtilizationCaps,
    /// A processor given by its rates (a Calculon system) rather than derived: its
    /// efficiency curves. `None` for every generated design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinned>,
}

impl Architecture {
    /// The sustained share of the matrix peak, under the stack's cap.
    pub fn achieved_utilization(&self) -> f64 {
        match self.caps.compute_utilization {
            Some(u) => self.core.max_utilization.min(u),
            None => self.core.max_utilization,
        }
    }

    /// The sustained share of the FP8 matrix peak: under the stack's FP8 cap where the
    /// template gives one, else as every precision.
    pub fn achieved_fp8_utilization(&self) -> f64 {
        match self.caps.fp8_compute_utilization {
            Some(u) => self.core.max_utilization.min(u),
            None => self.achieved_utilization(),
        }
    }

    /// Main memory's bandwidth under the stack's cap, B/s.
    pub fn achieved_memory_bandwidth(&self) -> f64 {
        match self.caps.memory_utilization {
            Some(u) => self.main_memory.bandwidth_bytes_per_s * u,
            None => self.main_memory.bandwidth_bytes_per_s,
        }
    }

    /// Main memory's bandwidth for products streaming their operands from it, B/s: under the
    /// stack's product cap where the template gives one, else as every kernel.
    pub fn achieved_product_bandwidth(&self) -> f64 {
        match self.caps.product_memory_utilization {
            Some(u) => self.main_memory.bandwidth_bytes_per_s * u,
            None => self.achieved_memory_bandwidth(),
        }
    }

    /// The accelerator as a lone kernel measured alone sees it (a `gemm` workload, a GEMM
    /// microbenchmark): at the template's ceiling and full bandwidth, without the caps a
    /// stack achieves over whole steps.
    pub fn alone(&self) -> Architecture {
        Architecture {
            caps: UtilizationCaps::default(),
            ..self.clone()
        }
    }

    /// `true` when no constraint is violated.
    pub fn feasible(&self) -> bool {
        self.violations.is_empty()
    }
}

/// `floor(x)` robust to values a hair below an integer through rounding.
fn count(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        (x * (1.0 + 1e-12)).floor() as u64
    } else {
        0
    }
}

/// The compute units the core's shares buy, at the voltage and frequency the power share
/// allows (DeepFlow Sec. 4.4).
fn core_level(design: &Design, violations: &mut Vec<Violation>) -> CoreReport {
    let (chip, tdp) = (design.chip_area_mm2, design.tdp_w);
    let c = &design.core;
    let core_area = c.area_share * chip;
    let core_power = c.power_share * tdp;
    let bundle_area = c.unit.area_mm2 * c.compute.mcus_per_bundle as f64;
    let max_bundles = count(core_area / bundle_area);
    let op = operating_point(
        &c.unit.voltage,
        max_bundles,
        c.unit.power_w * c.compute.mcus_per_bundle as f64,
        core_power,
    );
    let bundles = op.units;
    let mcus = bundles * c.compute.mcus_per_bundle;
    let frequency_hz = c.unit.frequency_hz * op.frequency_ratio;
    let peak = mcus as f64 * c.flops_per_cycle() * frequency_hz;
    let core = CoreReport {
        technology: c.compute.technology.clone(),
        mcus,
        bundles,
        voltage_v: op.voltage_v,
        frequency_hz,
        peak_flops_per_s: peak,
        sustained_flops_per_s: peak * c.compute.max_utilization,
        mcu: c.compute.mcu,
        dataflow: c.compute.dataflow,
        max_utilization: c.compute.max_utilization,
        throughput_by_precision: c.compute.throughput_by_precision.clone(),
        operand_tile: c.compute.operand_tile,
        kernel_launch_s: c.compute.kernel_launch_s,
        sparse_cores: c.compute.sparse_cores,
        idle_power_w: c.compute.idle_power_w,
        active_power_w: c.compute.active_power_w,
        collective_compute_share: c.compute.collective_compute_share,
        area_mm2: Usage::new(core_area, bundles as f64 * bundle_area),
        power_w: Usage::new(core_power, op.power_w),
        bounds: vec![
            bound(
                "mcus",
                if max_bundles == 0 {
                    Limit::Area
                } else {
                    op.units_limit
                },
            ),
            bound("frequency", op.voltage_limit),
        ],
    };
    if mcus == 0 {
        violations.push(Violation::NoComputeUnit {
            area_mm2: core_area,
            power_w: core_power,
        });
    }
    // What the chip draws idle and running before any work: above the whole power budget,
    // no share of it can run anything.
    let floor_w = c.compute.idle_power_w.unwrap_or(0.0) + c.compute.active_power_w.unwrap_or(0.0);
    if floor_w > tdp {
        violations.push(Violation::OverBudget {
            component: "power floor (compute.idle_power_w + compute.active_power_w)".into(),
            unit: "W".into(),
            used: floor_w,
            allocated: tdp,
        });
    }
    core
}

/// Every on-chip level (banks for each instance of its scope) and main memory.
fn memory_levels(
    design: &Design,
    core: &CoreReport,
    violations: &mut Vec<Violation>,
) -> (Vec<OnChipReport>, MainMemoryReport) {
    let (chip, tdp, perimeter) = (design.chip_area_mm2, design.tdp_w, design.perimeter_mm);
    let (mcus, bundles) = (core.mcus, core.bundles);
    let instances_of = |scope: Scope| match scope {
        Scope::Mcu => mcus,
        Scope::Bundle => bundles,
        Scope::Global => u64::from(mcus > 0),
    };
    let mut on_chip = Vec::new();
    let mut below = Scope::Mcu;
    let mut main_memory = None;
    for level in &design.levels {
        match &level.tech {
            LevelTech::OnChip(sram) => {
                let instances = instances_of(level.scope);
                let clients = instances_of(below).checked_div(instances).unwrap_or(0);
                let report = on_chip_level(
                    level.name.clone(),
                    level.technology.clone(),
                    level.scope,
                    sram,
                    instances,
                    clients,
                    level.area_share * chip,
                    level.power_share * tdp,
                    core.frequency_hz,
                );
                if mcus > 0 && report.banks == 0 {
                    violations.push(Violation::NoBank {
                        level: level.name.clone(),
                        instances,
                        scope: level.scope,
                        area_mm2: report.area_mm2.allocated,
                        power_w: report.power_w.allocated,
                    });
                }
                on_chip.push(report);
                below = level.scope;
            }
            LevelTech::OffChip(dram) => {
                main_memory = Some(main_memory_level(
                    level.name.clone(),
                    level.technology.clone(),
                    dram,
                    design.node_area_mm2 - chip,
                    level.area_share * chip,
                    level.power_share * tdp,
                    level.perimeter_share * perimeter,
                ));
            }
        }
    }
    let main_memory = main_memory.expect("a bound design ends with an off-chip level");
    if main_memory.devices == 0 {
        violations.push(Violation::NoMemoryDevice {
            memory: main_memory.name.clone(),
            limit: main_memory.bounds[0].limit.to_string(),
        });
    }
    (on_chip, main_memory)
}

/// Every component's use of its shares, and the chip's totals; an exceeded share is a
/// violation. Returns the chip's area, power and perimeter use.
fn check_budgets(
    design: &Design,
    core: &CoreReport,
    on_chip: &[OnChipReport],
    main_memory: &MainMemoryReport,
    networks: [&Option<NetworkReport>; 2],
    violations: &mut Vec<Violation>,
) -> (Usage, Usage, Usage) {
    let (chip, tdp, perimeter) = (design.chip_area_mm2, design.tdp_w, design.perimeter_mm);
    let mut area_used = core.area_mm2.used + main_memory.area_mm2.used;
    let mut power_used = core.power_w.used + main_memory.power_w.used;
    let mut perimeter_used = main_memory.perimeter_mm.used;
    let mut check = |name: &str, what: &str, u: &Usage| {
        if u.exceeded() {
            violations.push(Violation::OverBudget {
                component: name.to_string(),
                unit: what.to_string(),
                used: u.used,
                allocated: u.allocated,
            });
        }
    };
    check(Component::Core.name(), "mm2", &core.area_mm2);
    check(Component::Core.name(), "W", &core.power_w);
    for l in on_chip {
        check(&l.name, "mm2", &l.area_mm2);
        check(&l.name, "W", &l.power_w);
        area_used += l.area_mm2.used;
        power_used += l.power_w.used;
    }
    check(&main_memory.name, "mm2", &main_memory.area_mm2);
    check(
        &main_memory.name,
        "mm2 of node area",
        &main_memory.node_area_mm2,
    );
    check(&main_memory.name, "W", &main_memory.power_w);
    check(
        &main_memory.name,
        "mm of perimeter",
        &main_memory.perimeter_mm,
    );
    for (name, n) in [Component::IntraPackage, Component::InterPackage]
        .into_iter()
        .zip(networks)
    {
        if let Some(n) = n {
            check(name.name(), "mm2", &n.area_mm2);
            check(name.name(), "W", &n.power_w);
            check(name.name(), "mm of perimeter", &n.perimeter_mm);
            area_used += n.area_mm2.used;
            power_used += n.power_w.used;
            perimeter_used += n.perimeter_mm.used;
        }
    }
    let chip_area_mm2 = Usage::new(chip, area_used);
    let power_w = Usage::new(tdp, power_used);
    let perimeter_mm = Usage::new(perimeter, perimeter_used);
    check("chip", "mm2", &chip_area_mm2);
    check("chip", "W", &power_w);
    check("chip", "mm of perimeter", &perimeter_mm);
    (chip_area_mm2, power_w, perimeter_mm)
}

/// Generates the architecture of one accelerator of `design`.
pub fn generate(design: &Design) -> Architecture {
    let mut violations = Vec::new();
    let core = core_level(design, &mut violations);
    let (on_chip, main_memory) = memory_levels(design, &core, &mut violations);
    let network = |n: &NetworkDesign| {
        network_level(
            n,
            n.area_share * design.chip_area_mm2,
            n.power_share * design.tdp_w,
            n.perimeter_share * design.perimeter_mm,
        )
    };
    let intra_package = design.intra_package.as_ref().map(network);
    let inter_package = design.inter_package.as_ref().map(network);
    let (chip_area_mm2, power_w, perimeter_mm) = check_budgets(
        design,
        &core,
        &on_chip,
        &main_memory,
        [&intra_package, &inter_package],
        &mut violations,
    );
    // An input at the edge of its range can overflow what it derives: such a design is
    // not usable, whatever else it fits.
    let derived = [
        ("core: peak FLOP/s", core.peak_flops_per_s),
        ("core: frequency (Hz)", core.frequency_hz),
        (
            "main memory: bandwidth (B/s)",
            main_memory.bandwidth_bytes_per_s,
        ),
        ("main memory: capacity (bytes)", main_memory.capacity_bytes),
        ("chip: power (W)", power_w.used),
        ("chip: area (mm2)", chip_area_mm2.used),
    ];
    {
        let networks = [&intra_package, &inter_package];
        let all = || {
            derived
                .iter()
                .copied()
                .chain(
                    on_chip
                        .iter()
                        .map(|l| (l.name.as_str(), l.bandwidth_bytes_per_s)),
                )
                .chain(
                    networks
                        .iter()
                        .copied()
                        .flatten()
                        .map(|n| ("network: bandwidth (B/s)", n.bandwidth_bytes_per_s)),
                )
        };
        // A finite sum means every term is finite (an infinity or NaN carries into it):
        // the common case costs one pass of additions.
        if !all().map(|(_, v)| v).sum::<f64>().is_finite() {
            violations.extend(all().filter_map(|(q, v)| Violation::unless_finite(q, v)));
        }
    }
    Architecture {
        peak_flops_per_s: core.peak_flops_per_s,
        memory_bandwidth_bytes_per_s: main_memory.bandwidth_bytes_per_s,
        memory_capacity_bytes: main_memory.capacity_bytes,
        budget: design.budget_name.clone(),
        template: design.template_name.clone(),
        node: design.node.clone(),
        core,
        on_chip,
        main_memory,
        intra_package,
        inter_package,
        accelerators_per_package: design.accelerators_per_package,
        packages: design.packages,
        chip_area_mm2,
        power_w,
        perimeter_mm,
        violations,
        caps: design.stack,
        pinned: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn on_chip_level(
    name: String,
    technology: String,
    scope: Scope,
    sram: &SramTech,
    instances: u64,
    clients: u64,
    area: f64,
    power: f64,
    clock_hz: f64,
) -> OnChipReport {
    let bank_cost = sram.bank_area_mm2()
        + sram.controller_area_per_bank_mm2
        + clients as f64 * sram.crossbar_area_per_port_mm2;
    let bank_static = sram.bank_static_power_w();
    let by_area = count(area / bank_cost);
    let by_power = if bank_static > 0.0 {
        count(power / bank_static)
    } else {
        u64::MAX
    };
    // Every instance holds as many banks: leakage binds when it, not the area, sets that
    // count (rounding down to whole instances can leave both limits above the banks built).
    let per_instance = by_area.min(by_power).checked_div(instances).unwrap_or(0);
    let leakage_bound = per_instance < by_area.checked_div(instances).unwrap_or(0);
    let banks = per_instance * instances;
    let static_power = banks as f64 * bank_static;
    // What leakage leaves (DeepFlow Eq. 3: P - P_static) buys accesses, whatever bound
    // the banks.
    let dynamic = if banks == 0 {
        0.0
    } else {
        (power - static_power).max(0.0)
    };
    // The power left after leakage buys accesses, up to what the banks' ports move per
    // clock (the core's clock); a capped level leaves the rest of its power unused.
    let by_energy = dynamic / sram.dynamic_energy_per_bit_j / 8.0;
    let by_ports = sram
        .bank_bytes_per_cycle
        .map_or(f64::INFINITY, |b| banks as f64 * b * clock_hz);
    let ports_bound = by_ports < by_energy;
    let bandwidth = by_energy.min(by_ports);
    let dynamic = if ports_bound {
        bandwidth * 8.0 * sram.dynamic_energy_per_bit_j
    } else {
        dynamic
    };
    OnChipReport {
        name,
        technology,
        scope,
        instances,
        banks,
        banks_per_instance: per_instance,
        clients_per_instance: clients,
        capacity_bytes: banks as f64 * sram.bank_capacity_bytes,
        bandwidth_bytes_per_s: bandwidth,
        static_power_w: static_power,
        latency_s: sram.latency_s,
        area_mm2: Usage::new(area, banks as f64 * bank_cost),
        power_w: Usage::new(power, static_power + dynamic),
        bounds: vec![
            bound(
                "banks",
                if leakage_bound {
                    Limit::StaticPower
                } else {
                    Limit::Area
                },
            ),
            bound(
                "bandwidth",
                if ports_bound {
                    Limit::Ports
                } else if leakage_bound {
                    Limit::StaticPower
                } else {
                    Limit::Power
                },
            ),
        ],
    }
}

fn main_memory_level(
    name: String,
    technology: String,
    dram: &DramTech,
    outside_area: f64,
    area: f64,
    power: f64,
    perimeter: f64,
) -> MainMemoryReport {
    let device_static = dram.device_static_power_w();
    // The devices each limit allows, in fractions of a device: the fewest whole ones
    // bind, and of limits allowing as many, the tightest (the least fraction).
    let candidates = [
        (outside_area / dram.device_area_mm2, Limit::NodeArea),
        (area / dram.controller_phy_area_mm2, Limit::Area),
        (
            perimeter * dram.links_per_mm / dram.links_per_device as f64,
            Limit::Perimeter,
        ),
        (
            if device_static > 0.0 {
                power / device_static
            } else {
                f64::INFINITY
            },
            Limit::StaticPower,
        ),
    ];
    let whole = |x: f64| if x.is_infinite() { u64::MAX } else { count(x) };
    let (devices, devices_limit) = candidates
        .iter()
        .map(|&(x, limit)| (whole(x), x, limit))
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(n, _, limit)| (n, limit))
        .expect("non-empty");
    let links = devices * dram.links_per_device;
    let leakage = devices as f64 * device_static;
    // What leakage leaves buys the links' traffic, whatever bound the devices.
    let dynamic_budget = (power - leakage).max(0.0);
    let op = operating_point(
        &dram.voltage,
        links,
        dram.energy_per_bit_j * dram.data_rate_bit_per_s,
        dynamic_budget,
    );
    let data_rate = dram.data_rate_bit_per_s * op.frequency_ratio;
    MainMemoryReport {
        name,
        technology,
        devices,
        links,
        active_links: op.units,
        voltage_v: op.voltage_v,
        data_rate_bit_per_s: data_rate,
        capacity_bytes: devices as f64 * dram.device_capacity_bytes,
        bandwidth_bytes_per_s: op.units as f64 * data_rate / 8.0,
        latency_s: dram.latency_s,
        area_mm2: Usage::new(area, devices as f64 * dram.controller_phy_area_mm2),
        node_area_mm2: Usage::new(outside_area, devices as f64 * dram.device_area_mm2),
        power_w: Usage::new(power, leakage + op.power_w),
        perimeter_mm: Usage::new(perimeter, links as f64 / dram.links_per_mm),
        bounds: vec![
            bound("devices", devices_limit),
            bound(
                "active_links",
                if op.units_limit == Limit::VoltageFloor {
                    Limit::VoltageFloor
                } else {
                    devices_limit
                },
            ),
            bound("data_rate", op.voltage_limit),
        ],
    }
}

fn network_level(n: &NetworkDesign, area: f64, power: f64, perimeter: f64) -> NetworkReport {
    let t = &n.tech;
    let by_area = count(area / t.area_per_lane_mm2);
    let by_perimeter = count(perimeter * t.lanes_per_mm);
    let (max_lanes, lanes_limit) = if by_area <= by_perimeter {
        (by_area, Limit::Area)
    } else {
        (by_perimeter, Limit::Perimeter)
    };
    let op = operating_point(
        &t.voltage,
        max_lanes,
        t.energy_per_bit_j * t.data_rate_bit_per_s,
        power,
    );
    let data_rate = t.data_rate_bit_per_s * op.frequency_ratio;
    NetworkReport {
        technology: n.technology.clone(),
        topology: n.topology.clone(),
        lanes: op.units,
        voltage_v: op.voltage_v,
        data_rate_bit_per_s: data_rate,
        bandwidth_bytes_per_s: op.units as f64 * data_rate * t.encoding_efficiency / 8.0,
        latency_s: t.latency_s,
        area_mm2: Usage::new(area, op.units as f64 * t.area_per_lane_mm2),
        power_w: Usage::new(power, op.power_w),
        perimeter_mm: Usage::new(perimeter, op.units as f64 / t.lanes_per_mm),
        bounds: vec![
            bound(
                "lanes",
                if op.units_limit == Limit::Area {
                    lanes_limit
                } else {
                    op.units_limit
                },
            ),
            bound("data_rate", op.voltage_limit),
        ],
    }
}
