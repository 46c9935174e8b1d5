//! DeepFlow's input files (nanocad-lab/DeepFlow): hardware (`hw-*.yaml`) and models
//! (`model-*.yaml`).
//!
//! A hardware file becomes three stackflow files: a technology library (the
//! `tech_param` section, per component), a template (memory hierarchy, MCU shape, devices
//! per node and topologies) and a budget (the absolute area and power breakdowns divided by
//! the chip area and TDP; the perimeter fractions as they are). DeepFlow's equations and
//! stackflow's are the same where the paper defines them (area, power and voltage-frequency
//! scaling), so the imported budget generates DeepFlow's architecture; where DeepFlow's code
//! departs from the paper (`../shared/reference/deepflow-oracle.md`, reference defects), the
//! import says so in a note.
//!
//! A model file becomes a workload: `GEMM` a `gemm`, `LSTM` an `lstm_lm`, `LLM` a
//! `transformer`.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Deserialize;

use super::{line, num, stem, FileKind, Imported, ImportedFile};
use crate::config::{parse_yaml, Checker, ConfigError};

// ---------------------------------------------------------------- raw hardware file

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HwFile {
    sw_param: SwParam,
    tech_param: TechParam,
    area_breakdown: Breakdown,
    power_breakdown: Breakdown,
    perimeter_breakdown: Perimeter,
    system_hierarchy: SystemHierarchy,
    network_topology: NetworkTopology,
    memory_hierarchy: BTreeMap<String, MemoryLevel>,
    #[serde(default)]
    scheduling_param: Option<BTreeMap<String, serde::de::IgnoredAny>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwParam {
    kernel_launch_overhead: f64,
    precision: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TechParam {
    core: Core,
    #[serde(rename = "DRAM")]
    dram: Dram,
    #[serde(rename = "SRAM-L2")]
    sram_l2: Option<Sram>,
    #[serde(rename = "SRAM-L1")]
    sram_l1: Option<Sram>,
    #[serde(rename = "SRAM-R")]
    sram_r: Option<Sram>,
    network: Networks,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Core {
    nominal_power_per_mcu: f64,
    nominal_flop_rate_per_mcu: f64,
    nominal_area_per_mcu: Option<f64>,
    nominal_frequency: Option<f64>,
    nominal_voltage: f64,
    threshold_voltage: f64,
    margin_voltage: f64,
    operating_area_per_mcu: Option<f64>,
    num_mcu_per_bundle: u64,
    #[serde(rename = "FMA_d1")]
    fma_d1: u64,
    #[serde(rename = "FMA_d2")]
    fma_d2: u64,
    dataflow: String,
    util: f64,
    operating_frequency: Option<f64>,
    num_bundles: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Dram {
    dynamic_energy_per_bit: f64,
    static_power_per_bit: f64,
    area_per_bit: Option<f64>,
    stack_capacity: Quantity,
    area_per_stack: f64,
    latency: f64,
    mem_ctrl_area: f64,
    nominal_frequency: Option<f64>,
    nominal_voltage: f64,
    threshold_voltage: f64,
    margin_voltage: f64,
    max_voltage: f64,
    num_links_per_mm: f64,
    num_links_per_stack: u64,
    util: f64,
    size: Option<Quantity>,
    bandwidth: Option<Quantity>,
    num_stacks: Option<u64>,
    operating_frequency: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sram {
    dynamic_energy_per_bit: f64,
    static_power_per_bit: f64,
    area_per_bit: f64,
    bank_capacity: Quantity,
    controller_area_per_link: f64,
    controller_power_per_link: f64,
    latency: f64,
    overhead: f64,
    util: f64,
    size: Option<Quantity>,
    bandwidth: Option<Quantity>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Networks {
    intra_node: Link,
    inter_node: Link,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Link {
    latency: f64,
    nominal_frequency: f64,
    nominal_voltage: f64,
    nominal_energy_per_link: f64,
    nominal_area_per_link: f64,
    num_links_per_mm: f64,
    threshold_voltage: f64,
    margin_voltage: f64,
    util: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Breakdown {
    device_area_budget: Option<f64>,
    proc_chip_area_budget: Option<f64>,
    #[serde(rename = "TDP")]
    tdp: Option<f64>,
    core: f64,
    #[serde(rename = "DRAM")]
    dram: f64,
    #[serde(rename = "L2")]
    l2: Option<f64>,
    #[serde(rename = "L1")]
    l1: Option<f64>,
    reg_mem: Option<f64>,
    network: NetworkShares,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkShares {
    intra_node: f64,
    inter_node: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Perimeter {
    #[serde(rename = "DRAM")]
    dram: f64,
    intra_node: f64,
    inter_node: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemHierarchy {
    num_devices_per_node: u64,
    num_nodes: u64,
    inter_derate: f64,
    intra_derate: f64,
    kp1_inter: bool,
    kp2_inter: bool,
    dp_inter: bool,
    lp_inter: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkTopology {
    inter_node: String,
    intra_node: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryLevel {
    #[serde(rename = "type")]
    kind: String,
    scope: String,
}

/// A DeepFlow size or rate: a number, or text with a unit (`4 GB`, `30096 KB`, `244 TB`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Quantity {
    Number(f64),
    Text(String),
}

impl Quantity {
    /// The number and its unit's power of 1024 (K 1, M 2, G 3, T 4; a bare number 0).
    fn parse(&self, file: &str, path: &str) -> Result<(f64, i32), ConfigError> {
        match self {
            Quantity::Number(v) => Ok((*v, 0)),
            Quantity::Text(t) => {
                let bad = || {
                    ConfigError::invalid(
                        file,
                        path,
                        format!("{t:?}"),
                        "a number with a unit: B, KB, MB, GB or TB (`4 GB`)",
                    )
                };
                let mut parts = t.split_whitespace();
                let value: f64 = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
                let power = match parts.next().unwrap_or("B").to_ascii_uppercase().as_str() {
                    "B" => 0,
                    "KB" | "KIB" => 1,
                    "MB" | "MIB" => 2,
                    "GB" | "GIB" => 3,
                    "TB" | "TIB" => 4,
                    _ => return Err(bad()),
                };
                if parts.next().is_some() {
                    return Err(bad());
                }
                Ok((value, power))
            }
        }
    }

    fn text(&self) -> String {
        match self {
            Quantity::Number(v) => num(*v),
            Quantity::Text(t) => t.clone(),
        }
    }
}

// ---------------------------------------------------------------- checks

/// A share in (0, 1] (DeepFlow's `util`s).
fn share(check: &Checker, path: &str, v: f64) -> Result<f64, ConfigError> {
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(fail(check, path, num(v), "a share in (0, 1]"))
    }
}

fn fail(check: &Checker, path: &str, value: impl std::fmt::Display, expected: &str) -> ConfigError {
    ConfigError::invalid(check.file, path, value, expected)
}

/// Threshold below nominal and the floor (threshold + margin) at or below nominal.
fn voltages(
    check: &Checker,
    path: &str,
    nominal: f64,
    threshold: f64,
    margin: f64,
) -> Result<(), ConfigError> {
    check.positive(&format!("{path}.nominal_voltage"), nominal)?;
    check.non_negative(&format!("{path}.threshold_voltage"), threshold)?;
    check.non_negative(&format!("{path}.margin_voltage"), margin)?;
    if threshold + margin > nominal {
        return Err(fail(
            check,
            &format!("{path}.margin_voltage"),
            num(margin),
            &format!(
                "threshold_voltage + margin_voltage (the lowest operating voltage) at most \
                 nominal_voltage {}",
                num(nominal)
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------- hardware import

/// The stackflow name of a DeepFlow memory type, and the budget key DeepFlow's breakdowns
/// use for it.
fn memory_type(t: &str) -> Option<(&'static str, &'static str)> {
    Some(match t {
        "SRAM-R" => ("register_file", "reg_mem"),
        "SRAM-L1" => ("l1_sram", "L1"),
        "SRAM-L2" => ("l2_sram", "L2"),
        "DRAM" => ("dram", "DRAM"),
        _ => return None,
    })
}

/// A DeepFlow topology name as a stackflow topology for `members` devices, or `None` for
/// one DeepFlow's timing does not read (`none`, `hic`, ...: the caller says so and uses a
/// switch).
fn topology(
    check: &Checker,
    path: &str,
    name: &str,
    members: u64,
) -> Result<Option<String>, ConfigError> {
    Ok(match name {
        // Topologies DeepFlow's timing never reads: the caller imports them as a switch.
        "none" | "hic" | "hierarchical" | "custom" => None,
        "mesh" | "torus" => {
            // A square-ish 2D grid where the members factor so; else a line.
            let mut a = (members as f64).sqrt().floor() as u64;
            while a > 1 && members % a != 0 {
                a -= 1;
            }
            let dims = if a > 1 {
                format!("[{}, {a}]", members / a)
            } else {
                format!("[{members}]")
            };
            Some(format!("{{kind: {name}, dims: {dims}}}"))
        }
        "ring" => Some("{kind: ring}".into()),
        "crossbar" | "switch" => Some("{kind: switch}".into()),
        "fully_connected" => Some("{kind: fully_connected}".into()),
        other => {
            return Err(fail(
                check,
                path,
                other,
                "one of none, mesh, torus, ring, crossbar, hic, hierarchical, custom",
            ))
        }
    })
}

/// Imports a DeepFlow hardware file: `<stem>-tech.yaml`, `<stem>-template.yaml` and
/// `<stem>-budget.yaml`.
pub fn import_hardware(file: &str, text: &str) -> Result<Imported, ConfigError> {
    let raw: HwFile = parse_yaml(file, text)?;
    let check = Checker { file };
    let stem = stem(file);
    let mut notes = Vec::new();
    let c = &raw.tech_param.core;
    let d = &raw.tech_param.dram;

    // ---- technology
    let mut tech = String::new();
    let _ = writeln!(
        tech,
        "# Technology of DeepFlow's {file}, imported by `stackflow import deepflow`.\n\
         # Each value names the DeepFlow field it came from (tech_param.*).\nversion: 1"
    );
    let _ = writeln!(tech, "compute:\n  tensor_core:");
    let flop_rate = check.positive(
        "tech_param.core.nominal_flop_rate_per_mcu",
        c.nominal_flop_rate_per_mcu,
    )?;
    let d1 = check.positive_count("tech_param.core.FMA_d1", c.fma_d1)?;
    let d2 = check.positive_count("tech_param.core.FMA_d2", c.fma_d2)?;
    if (2 * d1 * d2 * d1) as f64 != flop_rate {
        notes.push(format!(
            "tech_param.core: FMA_d1 x FMA_d2 x FMA_d1 = {} MACs per cycle, but \
             nominal_flop_rate_per_mcu {} is {} MACs: the throughput follows the flop rate, the \
             tiling the FMA shape",
            d1 * d2 * d1,
            num(flop_rate),
            num(flop_rate / 2.0)
        ));
    }
    line(
        &mut tech,
        4,
        "macs_per_cycle",
        &num(flop_rate / 2.0),
        "core.nominal_flop_rate_per_mcu / 2",
    );
    let (area, area_from) = match (c.nominal_area_per_mcu, c.operating_area_per_mcu) {
        (Some(n), operating) => {
            if let Some(o) = operating.filter(|o| *o != n) {
                notes.push(format!(
                    "tech_param.core.operating_area_per_mcu = {} (nominal {}): DeepFlow builds \
                     {:.2}x as many MCUs, each with {:.2}x the throughput, area and power; \
                     stackflow builds whole MCUs of the FMA shape at nominal size, so the peak \
                     and power are the same from fewer MCUs",
                    num(o),
                    num(n),
                    n / o,
                    o / n
                ));
            }
            (n, "core.nominal_area_per_mcu")
        }
        (None, Some(o)) => (
            o,
            "core.operating_area_per_mcu (no nominal_area_per_mcu given)",
        ),
        (None, None) => {
            return Err(fail(
                &check,
                "tech_param.core.nominal_area_per_mcu",
                "(missing)",
                "an MCU area (nominal_area_per_mcu or operating_area_per_mcu, mm2)",
            ))
        }
    };
    line(
        &mut tech,
        4,
        "area_mm2",
        &num(check.positive("tech_param.core.operating_area_per_mcu", area)?),
        area_from,
    );
    line(
        &mut tech,
        4,
        "power_w",
        &num(check.positive(
            "tech_param.core.nominal_power_per_mcu",
            c.nominal_power_per_mcu,
        )?),
        "core.nominal_power_per_mcu",
    );
    let (freq, freq_from) = match (c.nominal_frequency, c.operating_frequency) {
        (Some(f), _) => (f, "core.nominal_frequency"),
        (None, Some(f)) => {
            notes.push(format!(
                "tech_param.core.nominal_frequency is absent: the operating frequency {} Hz \
                 stands for the nominal point of the voltage-frequency curve",
                num(f)
            ));
            (f, "core.operating_frequency (no nominal_frequency given)")
        }
        (None, None) => {
            return Err(fail(
                &check,
                "tech_param.core.nominal_frequency",
                "(missing)",
                "the nominal frequency of the MCU, Hz (scaling starts from it)",
            ))
        }
    };
    line(
        &mut tech,
        4,
        "frequency_ghz",
        &num(check.positive("tech_param.core.nominal_frequency", freq)? / 1e9),
        freq_from,
    );
    voltages(
        &check,
        "tech_param.core",
        c.nominal_voltage,
        c.threshold_voltage,
        c.margin_voltage,
    )?;
    voltage(
        &mut tech,
        c.nominal_voltage,
        c.threshold_voltage,
        c.margin_voltage,
        None,
        "core",
    );
    if let Some(f) = c.operating_frequency {
        notes.push(format!(
            "tech_param.core.operating_frequency = {} Hz is not pinned: stackflow solves the \
             frequency from the core's power budget",
            num(f)
        ));
    }
    if let Some(b) = c.num_bundles {
        notes.push(format!(
            "tech_param.core.num_bundles = {b} is not pinned: stackflow fits as many bundles as \
             the core's area and power budgets allow"
        ));
    }

    // SRAM levels, in the order of the memory hierarchy.
    let levels: Vec<(&String, &MemoryLevel)> = raw.memory_hierarchy.iter().collect();
    if levels.is_empty() {
        return Err(fail(
            &check,
            "memory_hierarchy",
            "{}",
            "at least the main memory (DRAM)",
        ));
    }
    let _ = writeln!(tech, "sram:");
    for (name, level) in &levels {
        let path = format!("memory_hierarchy.{name}.type");
        let (tech_name, _) = memory_type(&level.kind).ok_or_else(|| {
            fail(
                &check,
                &path,
                &level.kind,
                "one of SRAM-R, SRAM-L1, SRAM-L2, DRAM",
            )
        })?;
        let sram = match level.kind.as_str() {
            "SRAM-R" => raw.tech_param.sram_r.as_ref(),
            "SRAM-L1" => raw.tech_param.sram_l1.as_ref(),
            "SRAM-L2" => raw.tech_param.sram_l2.as_ref(),
            _ => continue,
        };
        let Some(s) = sram else {
            return Err(fail(
                &check,
                &path,
                &level.kind,
                &format!("a level whose tech_param.{} is given", level.kind),
            ));
        };
        let p = format!("tech_param.{}", level.kind);
        let _ = writeln!(tech, "  {tech_name}:");
        line(
            &mut tech,
            4,
            "area_per_bit_um2",
            &num(check.positive(&format!("{p}.area_per_bit"), s.area_per_bit)? * 1e6),
            &format!("{} area_per_bit (mm2) x 1e6", level.kind),
        );
        line(
            &mut tech,
            4,
            "periphery_overhead",
            &num(check.non_negative(&format!("{p}.overhead"), s.overhead)?),
            &format!("{} overhead", level.kind),
        );
        let (cap, power) = s.bank_capacity.parse(file, &format!("{p}.bank_capacity"))?;
        let kib = check.positive(&format!("{p}.bank_capacity"), cap * 1024f64.powi(power - 1))?;
        line(
            &mut tech,
            4,
            "bank_capacity_kib",
            &num(kib),
            &format!(
                "{} bank_capacity {:?} (KB read as KiB, as DeepFlow does)",
                level.kind,
                s.bank_capacity.text()
            ),
        );
        line(
            &mut tech,
            4,
            "dynamic_energy_per_bit_fj",
            &num(check.non_negative(
                &format!("{p}.dynamic_energy_per_bit"),
                s.dynamic_energy_per_bit,
            )? * 1e15),
            &format!("{} dynamic_energy_per_bit (J) x 1e15", level.kind),
        );
        line(
            &mut tech,
            4,
            "static_power_per_bit_pw",
            &num(check
                .non_negative(&format!("{p}.static_power_per_bit"), s.static_power_per_bit)?
                * 1e12),
            &format!("{} static_power_per_bit (W) x 1e12", level.kind),
        );
        line(
            &mut tech,
            4,
            "controller_area_per_bank_mm2",
            "0",
            "DeepFlow's controller area is per crossbar link (below)",
        );
        line(
            &mut tech,
            4,
            "controller_power_per_bank_mw",
            "0",
            &format!(
                "{} controller_power_per_link is read but never used by DeepFlow",
                level.kind
            ),
        );
        line(
            &mut tech,
            4,
            "crossbar_area_per_port_mm2",
            &num(check.non_negative(
                &format!("{p}.controller_area_per_link"),
                s.controller_area_per_link,
            )?),
            &format!(
                "{} controller_area_per_link (DeepFlow: x banks x clients, a crossbar)",
                level.kind
            ),
        );
        line(
            &mut tech,
            4,
            "latency_ns",
            &num(check.non_negative(&format!("{p}.latency"), s.latency)? * 1e9),
            &format!("{} latency (s) x 1e9", level.kind),
        );
        if s.controller_power_per_link != 0.0 {
            notes.push(format!(
                "{p}.controller_power_per_link = {} W: DeepFlow reads it but never uses it; \
                 stackflow's controller power per bank is 0",
                num(s.controller_power_per_link)
            ));
        }
        share(&check, &format!("{p}.util"), s.util)?;
        if s.util != 1.0 {
            notes.push(format!(
                "{p}.util = {}: no counterpart; stackflow's SRAM bandwidth is its banks' ports \
                 at the core clock",
                num(s.util)
            ));
        }
        for (key, q) in [("size", &s.size), ("bandwidth", &s.bandwidth)] {
            if let Some(q) = q {
                notes.push(format!(
                    "{p}.{key} = {} is not pinned: stackflow derives the level from its area \
                     and power budgets",
                    q.text()
                ));
            }
        }
    }

    // DRAM.
    let _ = writeln!(tech, "dram:\n  dram:");
    let (cap, power) = d
        .stack_capacity
        .parse(file, "tech_param.DRAM.stack_capacity")?;
    let gib = check.positive(
        "tech_param.DRAM.stack_capacity",
        cap * 1024f64.powi(power - 3),
    )?;
    line(
        &mut tech,
        4,
        "device_capacity_gib",
        &num(gib),
        &format!(
            "DRAM stack_capacity {:?} (stacks are binary: GB read as GiB)",
            d.stack_capacity.text()
        ),
    );
    line(
        &mut tech,
        4,
        "device_area_mm2",
        &num(check.positive("tech_param.DRAM.area_per_stack", d.area_per_stack)?),
        "DRAM area_per_stack",
    );
    line(
        &mut tech,
        4,
        "links_per_device",
        &check
            .positive_count("tech_param.DRAM.num_links_per_stack", d.num_links_per_stack)?
            .to_string(),
        "DRAM num_links_per_stack",
    );
    line(
        &mut tech,
        4,
        "controller_phy_area_mm2",
        &num(check.non_negative("tech_param.DRAM.mem_ctrl_area", d.mem_ctrl_area)?),
        "DRAM mem_ctrl_area",
    );
    line(
        &mut tech,
        4,
        "energy_per_bit_pj",
        &num(check.non_negative(
            "tech_param.DRAM.dynamic_energy_per_bit",
            d.dynamic_energy_per_bit,
        )? * 1e12),
        "DRAM dynamic_energy_per_bit (J) x 1e12",
    );
    line(
        &mut tech,
        4,
        "static_power_per_bit_pw",
        &num(check.non_negative(
            "tech_param.DRAM.static_power_per_bit",
            d.static_power_per_bit,
        )? * 1e12),
        "DRAM static_power_per_bit (W) x 1e12",
    );
    let (rate, rate_from) = match (d.nominal_frequency, d.operating_frequency) {
        (Some(f), _) => (f, "DRAM nominal_frequency (bit/s per link)"),
        (None, Some(f)) => {
            notes.push(format!(
                "tech_param.DRAM.nominal_frequency is absent: the operating frequency {} stands \
                 for the nominal point",
                num(f)
            ));
            (f, "DRAM operating_frequency (no nominal_frequency given)")
        }
        (None, None) => {
            return Err(fail(
                &check,
                "tech_param.DRAM.nominal_frequency",
                "(missing)",
                "the nominal data rate per DRAM link, bit/s",
            ))
        }
    };
    line(
        &mut tech,
        4,
        "data_rate_gbps",
        &num(check.positive("tech_param.DRAM.nominal_frequency", rate)? / 1e9),
        rate_from,
    );
    voltages(
        &check,
        "tech_param.DRAM",
        d.nominal_voltage,
        d.threshold_voltage,
        d.margin_voltage,
    )?;
    if d.max_voltage < d.nominal_voltage || !d.max_voltage.is_finite() {
        return Err(fail(
            &check,
            "tech_param.DRAM.max_voltage",
            num(d.max_voltage),
            &format!("at least nominal_voltage {}", num(d.nominal_voltage)),
        ));
    }
    voltage(
        &mut tech,
        d.nominal_voltage,
        d.threshold_voltage,
        d.margin_voltage,
        Some(d.max_voltage),
        "DRAM",
    );
    line(
        &mut tech,
        4,
        "links_per_mm",
        &num(check.positive("tech_param.DRAM.num_links_per_mm", d.num_links_per_mm)?),
        "DRAM num_links_per_mm",
    );
    line(
        &mut tech,
        4,
        "latency_ns",
        &num(check.non_negative("tech_param.DRAM.latency", d.latency)? * 1e9),
        "DRAM latency (s) x 1e9",
    );
    share(&check, "tech_param.DRAM.util", d.util)?;
    if d.util != 1.0 {
        notes.push(format!(
            "tech_param.DRAM.util = {}: no counterpart (stackflow's DRAM bandwidth is its links \
             at their data rate; a stack's achieved share belongs to the template's stack caps)",
            num(d.util)
        ));
    }
    if let Some(a) = d.area_per_bit {
        notes.push(format!(
            "tech_param.DRAM.area_per_bit = {} mm2: DeepFlow reads it but sizes stacks by \
             area_per_stack and stack_capacity, as stackflow does",
            num(a)
        ));
    }
    for (key, q) in [("size", &d.size), ("bandwidth", &d.bandwidth)] {
        if let Some(q) = q {
            notes.push(format!(
                "tech_param.DRAM.{key} = {} is not pinned: stackflow derives the stacks and their \
                 rate from the DRAM budgets",
                q.text()
            ));
        }
    }
    if let Some(n) = d.num_stacks {
        notes.push(format!(
            "tech_param.DRAM.num_stacks = {n} is not pinned: the stacks follow the node area \
             left beside the chip"
        ));
    }
    if let Some(f) = d
        .operating_frequency
        .filter(|_| d.nominal_frequency.is_some())
    {
        notes.push(format!(
            "tech_param.DRAM.operating_frequency = {} is not pinned: stackflow solves the rate \
             from the DRAM power budget",
            num(f)
        ));
    }

    // Links.
    let h = &raw.system_hierarchy;
    let mut devices = check.positive_count(
        "system_hierarchy.num_devices_per_node",
        h.num_devices_per_node,
    )?;
    let nodes = check.positive_count("system_hierarchy.num_nodes", h.num_nodes)?;
    check.non_negative("system_hierarchy.intra_derate", h.intra_derate)?;
    check.non_negative("system_hierarchy.inter_derate", h.inter_derate)?;
    if devices > 1 && h.intra_derate == 0.0 {
        notes.push(format!(
            "system_hierarchy.num_devices_per_node = {devices} with intra_derate 0: DeepFlow \
             gives those devices no bandwidth between them (and runs the file only with one \
             device per node, as deepflow-oracle.md's runs were edited); imported as one device \
             per node"
        ));
        devices = 1;
    }
    let ignored = |notes: &mut Vec<String>, key: &str, name: &str| {
        notes.push(format!(
            "network_topology.{key} = {name}: DeepFlow's timing does not read the topology \
             (reference defect 7); imported as a switch, whose collectives are DeepFlow's rings"
        ));
        "{kind: switch}".to_string()
    };
    let intra = if devices > 1 {
        let name = &raw.network_topology.intra_node;
        Some(
            match topology(&check, "network_topology.intra_node", name, devices)? {
                Some(t) => t,
                None => ignored(&mut notes, "intra_node", name),
            },
        )
    } else {
        None
    };
    let inter_budget =
        raw.area_breakdown.network.inter_node > 0.0 || raw.power_breakdown.network.inter_node > 0.0;
    let inter = if nodes > 1 || inter_budget || raw.network_topology.inter_node != "none" {
        let name = &raw.network_topology.inter_node;
        Some(
            match topology(&check, "network_topology.inter_node", name, nodes)? {
                Some(t) => t,
                None => ignored(&mut notes, "inter_node", name),
            },
        )
    } else {
        None
    };
    let _ = writeln!(tech, "links:");
    let nets = &raw.tech_param.network;
    for (key, link, used) in [
        ("intra_node", &nets.intra_node, intra.is_some()),
        ("inter_node", &nets.inter_node, inter.is_some()),
    ] {
        if !used {
            continue;
        }
        let p = format!("tech_param.network.{key}");
        let _ = writeln!(tech, "  {key}:");
        line(
            &mut tech,
            4,
            "energy_per_bit_pj",
            &num(check.non_negative(
                &format!("{p}.nominal_energy_per_link"),
                link.nominal_energy_per_link,
            )? * 1e12),
            &format!("network.{key}.nominal_energy_per_link (J/bit) x 1e12"),
        );
        line(
            &mut tech,
            4,
            "area_per_lane_mm2",
            &num(check.positive(
                &format!("{p}.nominal_area_per_link"),
                link.nominal_area_per_link,
            )?),
            &format!("network.{key}.nominal_area_per_link"),
        );
        line(
            &mut tech,
            4,
            "lanes_per_mm",
            &num(check.positive(&format!("{p}.num_links_per_mm"), link.num_links_per_mm)?),
            &format!("network.{key}.num_links_per_mm"),
        );
        line(
            &mut tech,
            4,
            "data_rate_gbps",
            &num(check.positive(&format!("{p}.nominal_frequency"), link.nominal_frequency)? / 1e9),
            &format!("network.{key}.nominal_frequency (bit/s per lane)"),
        );
        line(
            &mut tech,
            4,
            "encoding_efficiency",
            &num(share(&check, &format!("{p}.util"), link.util)?),
            &format!("network.{key}.util"),
        );
        voltages(
            &check,
            &p,
            link.nominal_voltage,
            link.threshold_voltage,
            link.margin_voltage,
        )?;
        voltage(
            &mut tech,
            link.nominal_voltage,
            link.threshold_voltage,
            link.margin_voltage,
            None,
            &format!("network.{key}"),
        );
        line(
            &mut tech,
            4,
            "latency_ns",
            &num(check.non_negative(&format!("{p}.latency"), link.latency)? * 1e9),
            &format!("network.{key}.latency (s) x 1e9"),
        );
    }

    // ---- template
    let mut template = String::new();
    let _ = writeln!(
        template,
        "# Architecture of DeepFlow's {file}, imported by `stackflow import deepflow`.\nversion: 1\nname: {stem}\ncompute:"
    );
    line(&mut template, 2, "technology", "tensor_core", "");
    line(
        &mut template,
        2,
        "mcu",
        &format!("{{kind: tensor_core, m: {d1}, n: {d2}, k: {d1}}}"),
        "core.FMA_d1 x FMA_d2 x FMA_d1",
    );
    let dataflow = match c.dataflow.as_str() {
        "best" | "none" => "best",
        "wst" => "weight_stationary",
        "ast" => "activation_stationary",
        "ost" => "output_stationary",
        other => {
            return Err(fail(
                &check,
                "tech_param.core.dataflow",
                other,
                "one of best, none, wst, ast, ost",
            ))
        }
    };
    if c.dataflow == "none" {
        notes.push(
            "tech_param.core.dataflow = none: imported as best (stackflow always tiles)".into(),
        );
    }
    line(&mut template, 2, "dataflow", dataflow, "core.dataflow");
    line(
        &mut template,
        2,
        "max_utilization",
        &num(share(&check, "tech_param.core.util", c.util)?),
        "core.util",
    );
    line(
        &mut template,
        2,
        "mcus_per_bundle",
        &check
            .positive_count("tech_param.core.num_mcu_per_bundle", c.num_mcu_per_bundle)?
            .to_string(),
        "core.num_mcu_per_bundle",
    );
    let precision = match raw.sw_param.precision {
        1 => "fp8",
        2 => "fp16",
        4 => "fp32",
        other => {
            return Err(fail(
                &check,
                "sw_param.precision",
                other,
                "bytes per element: 1 (fp8), 2 (fp16) or 4 (fp32)",
            ))
        }
    };
    let _ = writeln!(template, "  throughput_by_precision:");
    line(
        &mut template,
        4,
        precision,
        "1.0",
        "sw_param.precision: the MCU's flop rate is at this width",
    );
    if precision != "fp32" {
        line(
            &mut template,
            4,
            "fp32",
            "1.0",
            "element-wise work: DeepFlow times every FLOP at the MCU rate",
        );
    }
    line(
        &mut template,
        2,
        "kernel_launch_us",
        &num(check.non_negative(
            "sw_param.kernel_launch_overhead",
            raw.sw_param.kernel_launch_overhead,
        )? * 1e6),
        "sw_param.kernel_launch_overhead (s) x 1e6",
    );
    let _ = writeln!(template, "memory:");
    let mut main_memory = None;
    for (i, (name, level)) in levels.iter().enumerate() {
        let (tech_name, _) = memory_type(&level.kind).expect("checked above");
        let scope = match level.scope.as_str() {
            "mcu" => "mcu",
            "mcu-bundle" => "bundle",
            "global" => "global",
            other => {
                return Err(fail(
                    &check,
                    &format!("memory_hierarchy.{name}.scope"),
                    other,
                    "one of mcu, mcu-bundle, global",
                ))
            }
        };
        let last = i + 1 == levels.len();
        if (level.kind == "DRAM") != last {
            return Err(fail(
                &check,
                &format!("memory_hierarchy.{name}.type"),
                &level.kind,
                "DRAM as the last (outermost) level and only there",
            ));
        }
        if last {
            main_memory = Some(name.to_string());
        }
        let _ = writeln!(
            template,
            "  - {{name: {name}, technology: {tech_name}, scope: {scope}}}   # memory_hierarchy.{name}: {} ({})",
            level.kind, level.scope
        );
    }
    let _ = writeln!(template, "package:");
    line(
        &mut template,
        2,
        "accelerators",
        &devices.to_string(),
        "system_hierarchy.num_devices_per_node",
    );
    if let Some(t) = &intra {
        let _ = writeln!(
            template,
            "  intra_package:   # network_topology.intra_node, tech_param.network.intra_node"
        );
        line(&mut template, 4, "technology", "intra_node", "");
        line(
            &mut template,
            4,
            "topology",
            t,
            &format!(
                "network_topology.intra_node = {}",
                raw.network_topology.intra_node
            ),
        );
    }
    let _ = writeln!(template, "system:");
    line(
        &mut template,
        2,
        "packages",
        &nodes.to_string(),
        "system_hierarchy.num_nodes",
    );
    if let Some(t) = &inter {
        let _ = writeln!(
            template,
            "  inter_package:   # network_topology.inter_node, tech_param.network.inter_node"
        );
        line(&mut template, 4, "technology", "inter_node", "");
        line(
            &mut template,
            4,
            "topology",
            t,
            &format!(
                "network_topology.inter_node = {}",
                raw.network_topology.inter_node
            ),
        );
    }
    for (key, v) in [
        ("inter_derate", h.inter_derate),
        ("intra_derate", h.intra_derate),
    ] {
        if v != 0.0 && v != 1.0 {
            notes.push(format!(
                "system_hierarchy.{key} = {}: no counterpart (a divisor DeepFlow applies to link \
                 throughput, reference defect 7)",
                num(v)
            ));
        }
    }
    for (key, v) in [
        ("kp1_inter", h.kp1_inter),
        ("kp2_inter", h.kp2_inter),
        ("dp_inter", h.dp_inter),
        ("lp_inter", h.lp_inter),
    ] {
        if v {
            notes.push(format!(
                "system_hierarchy.{key} = true: a placement, which belongs to a strategy in \
                 stackflow (order=...); the search places every axis itself"
            ));
        }
    }
    if raw.scheduling_param.is_some() {
        notes.push(
            "scheduling_param: a parallelism strategy, which stackflow takes on the command \
             line (--strategy RC-kp1-kp2-d<dp>-p<lp>) or searches (search); not imported"
                .into(),
        );
    }

    // ---- budget
    let a = &raw.area_breakdown;
    let p = &raw.power_breakdown;
    // A budget needs all three: a missing one is named as missing, not as NaN.
    let given = |path: &str, v: Option<f64>| -> Result<f64, ConfigError> {
        match v {
            Some(v) => check.positive(path, v),
            None => Err(fail(&check, path, "(missing)", "a positive number")),
        }
    };
    let chip = given(
        "area_breakdown.proc_chip_area_budget",
        a.proc_chip_area_budget,
    )?;
    let node = given("area_breakdown.device_area_budget", a.device_area_budget)?;
    let tdp = given("power_breakdown.TDP", p.tdp)?;
    let mut budget = String::new();
    let _ = writeln!(
        budget,
        "# Budgets of DeepFlow's {file}, imported by `stackflow import deepflow`: its absolute\n\
         # area (mm2) and power (W) breakdowns divided by the chip area and TDP.\n\
         version: 1\nname: {stem}\ntemplate: {stem}-template.yaml\ntechnology: {stem}-tech.yaml\narea:"
    );
    let main_memory = main_memory.expect("the last level is DRAM");
    // (stackflow component, DeepFlow key, area, power)
    let mut parts: Vec<(String, &str, f64, f64)> = vec![("core".into(), "core", a.core, p.core)];
    for (name, level) in &levels {
        let (_, key) = memory_type(&level.kind).expect("checked above");
        let (area, power) = match key {
            "reg_mem" => (a.reg_mem, p.reg_mem),
            "L1" => (a.l1, p.l1),
            "L2" => (a.l2, p.l2),
            _ => (Some(a.dram), Some(p.dram)),
        };
        let missing = |what: &str| {
            fail(
                &check,
                &format!("{what}.{key}"),
                "(missing)",
                &format!("a budget for memory level {name} ({})", level.kind),
            )
        };
        parts.push((
            name.to_string(),
            key,
            area.ok_or_else(|| missing("area_breakdown"))?,
            power.ok_or_else(|| missing("power_breakdown"))?,
        ));
    }
    if intra.is_some() {
        parts.push((
            "intra_package".into(),
            "network.intra_node",
            a.network.intra_node,
            p.network.intra_node,
        ));
    }
    if inter.is_some() {
        parts.push((
            "inter_package".into(),
            "network.inter_node",
            a.network.inter_node,
            p.network.inter_node,
        ));
    }
    for (_, key, area, power) in &parts {
        check
            .non_negative(&format!("area_breakdown.{key}"), *area)
            .and_then(|_| check.non_negative(&format!("power_breakdown.{key}"), *power))?;
    }
    // DeepFlow divides by the chip area and TDP without capping at them: where its parts
    // add up to more, each keeps its absolute allocation and the total grows to hold them.
    let area_sum: f64 = parts.iter().map(|p| p.2).sum();
    let (chip, chip_from) = if area_sum > chip * (1.0 + 1e-9) {
        notes.push(format!(
            "area_breakdown: its parts add up to {} mm2, over proc_chip_area_budget {} mm2 \
             (DeepFlow does not check); imported with chip_mm2 {} so that every part keeps its \
             mm2 (the perimeter grows with it)",
            num(area_sum),
            num(chip),
            num(area_sum)
        ));
        (
            area_sum,
            "the sum of area_breakdown's parts (over proc_chip_area_budget)",
        )
    } else {
        (chip, "area_breakdown.proc_chip_area_budget")
    };
    if node < chip {
        return Err(fail(
            &check,
            "area_breakdown.device_area_budget",
            num(node),
            &format!(
                "at least the chip area {} mm2 (the package holds the chip)",
                num(chip)
            ),
        ));
    }
    line(
        &mut budget,
        2,
        "node_mm2",
        &num(node),
        "area_breakdown.device_area_budget",
    );
    line(&mut budget, 2, "chip_mm2", &num(chip), chip_from);
    let _ = writeln!(budget, "  breakdown:");
    for (name, key, area, _) in &parts {
        line(
            &mut budget,
            4,
            name,
            &num(area / chip),
            &format!("area_breakdown.{key} {} / {}", num(*area), num(chip)),
        );
    }
    let power_sum: f64 = parts.iter().map(|p| p.3).sum();
    let (tdp, tdp_from) = if power_sum > tdp * (1.0 + 1e-9) {
        notes.push(format!(
            "power_breakdown: its parts add up to {} W, over TDP {} W (DeepFlow uses TDP only \
             as a divisor); imported with tdp_w {} so that every part keeps its watts",
            num(power_sum),
            num(tdp),
            num(power_sum)
        ));
        (power_sum, "the sum of power_breakdown's parts (over TDP)")
    } else {
        (tdp, "power_breakdown.TDP")
    };
    let _ = writeln!(budget, "power:");
    line(&mut budget, 2, "tdp_w", &num(tdp), tdp_from);
    let _ = writeln!(budget, "  breakdown:");
    for (name, key, _, power) in &parts {
        line(
            &mut budget,
            4,
            name,
            &num(power / tdp),
            &format!("power_breakdown.{key} {} / {}", num(*power), num(tdp)),
        );
    }
    let _ = writeln!(budget, "perimeter:\n  breakdown:");
    let r = &raw.perimeter_breakdown;
    let mut perimeter = vec![(main_memory.clone(), "DRAM", r.dram)];
    if intra.is_some() {
        perimeter.push(("intra_package".into(), "intra_node", r.intra_node));
    } else if r.intra_node != 0.0 {
        notes.push(format!(
            "perimeter_breakdown.intra_node = {}: no network inside the node to give it to",
            num(r.intra_node)
        ));
    }
    if inter.is_some() {
        perimeter.push(("inter_package".into(), "inter_node", r.inter_node));
    }
    for (name, key, v) in &perimeter {
        let v = check.non_negative(&format!("perimeter_breakdown.{key}"), *v)?;
        line(
            &mut budget,
            4,
            name,
            &num(v),
            &format!("perimeter_breakdown.{key}"),
        );
    }
    let share: f64 = perimeter.iter().map(|p| p.2).sum();
    if share > 1.0 + 1e-9 {
        return Err(fail(
            &check,
            "perimeter_breakdown",
            num(share),
            "fractions of the chip perimeter summing to at most 1",
        ));
    }
    for (what, shares) in [
        ("area_breakdown", &a.network),
        ("power_breakdown", &p.network),
    ] {
        if intra.is_none() && shares.intra_node != 0.0 {
            notes.push(format!(
                "{what}.network.intra_node = {}: no network inside the node to give it to",
                num(shares.intra_node)
            ));
        }
        if inter.is_none() && shares.inter_node != 0.0 {
            notes.push(format!(
                "{what}.network.inter_node = {}: network_topology.inter_node is none",
                num(shares.inter_node)
            ));
        }
    }
    for (what, b) in [("area_breakdown", a), ("power_breakdown", p)] {
        for (key, v) in [("L2", b.l2), ("L1", b.l1), ("reg_mem", b.reg_mem)] {
            let used = parts.iter().any(|p| p.1 == key);
            if let Some(v) = v.filter(|v| !used && *v != 0.0) {
                notes.push(format!(
                    "{what}.{key} = {}: memory_hierarchy has no level of that type",
                    num(v)
                ));
            }
        }
    }

    Ok(Imported {
        files: vec![
            ImportedFile {
                name: format!("{stem}-budget.yaml"),
                kind: FileKind::Budget,
                text: budget,
            },
            ImportedFile {
                name: format!("{stem}-template.yaml"),
                kind: FileKind::Template,
                text: template,
            },
            ImportedFile {
                name: format!("{stem}-tech.yaml"),
                kind: FileKind::Technology,
                text: tech,
            },
        ],
        notes,
    })
}

/// A `voltage:` line: DeepFlow's floor is threshold + margin; its core and networks have no
/// ceiling, so 1.5 x nominal stands for one (a note of the import says so when used).
fn voltage(
    out: &mut String,
    nominal: f64,
    threshold: f64,
    margin: f64,
    max: Option<f64>,
    from: &str,
) {
    let (max, max_from) = match max {
        Some(m) => (m, "max_voltage"),
        None => (nominal * 1.5, "no maximum in DeepFlow: 1.5 x nominal"),
    };
    line(
        out,
        4,
        "voltage",
        &format!(
            "{{nominal_v: {}, threshold_v: {}, min_v: {}, max_v: {}}}",
            num(nominal),
            num(threshold),
            num(threshold + margin),
            num(max)
        ),
        &format!("{from}: nominal, threshold, threshold + margin, {max_from}"),
    );
}

// ---------------------------------------------------------------- models

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    model_param: ModelParam,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelParam {
    mode: String,
    // GEMM
    #[serde(rename = "M")]
    m: Option<u64>,
    #[serde(rename = "K")]
    k: Option<u64>,
    #[serde(rename = "N")]
    n: Option<u64>,
    // LSTM and LLM
    batch_size: Option<u64>,
    vocab_size: Option<u64>,
    num_layers: Option<u64>,
    seq_len: Option<u64>,
    // LSTM
    layer_size: Option<u64>,
    projection: Option<u64>,
    num_gates: Option<u64>,
    num_non_linear: Option<u64>,
    num_add: Option<u64>,
    data_scale: Option<f64>,
    // LLM
    hidden_dim: Option<u64>,
    num_heads: Option<u64>,
    ffn_dim: Option<u64>,
    ffn_mult: Option<f64>,
    n_tokens: Option<f64>,
    communication_time: Option<f64>,
    #[serde(rename = "N_PP")]
    n_pp: Option<u64>,
}

/// Imports a DeepFlow model file: `<stem>.yaml`, a stackflow workload in fp16 (DeepFlow's
/// element width is its hardware file's `sw_param.precision`, 2 bytes in every shipped one).
pub fn import_model(file: &str, text: &str) -> Result<Imported, ConfigError> {
    let raw: ModelFile = parse_yaml(file, text)?;
    let m = raw.model_param;
    let check = Checker { file };
    let stem = stem(file);
    let mut notes = Vec::new();
    let need = |key: &str, v: Option<u64>| -> Result<u64, ConfigError> {
        let v = v.ok_or_else(|| {
            fail(
                &check,
                &format!("model_param.{key}"),
                "(missing)",
                &format!("a {} model's {key}", m.mode),
            )
        })?;
        check.positive_count(&format!("model_param.{key}"), v)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# DeepFlow's {file} ({} mode), imported by `stackflow import deepflow`.\n\
         # DeepFlow's element width is the hardware file's sw_param.precision: 2 bytes here.\nversion: 1",
        m.mode
    );
    match m.mode.as_str() {
        "GEMM" => {
            line(&mut out, 0, "kind", "gemm", "model_param.mode = GEMM");
            for (ours, key, value, from) in [
                ("m", "M", m.m, "model_param.M (rows of the output)"),
                (
                    "k",
                    "K",
                    m.k,
                    "model_param.K (the shared, reduced dimension)",
                ),
                ("n", "N", m.n, "model_param.N (columns of the output)"),
            ] {
                line(&mut out, 0, ours, &need(key, value)?.to_string(), from);
            }
            line(
                &mut out,
                0,
                "precision",
                "fp16",
                "DeepFlow's default sw_param.precision: 2",
            );
        }
        "LSTM" => {
            line(&mut out, 0, "kind", "lstm_lm", "model_param.mode = LSTM");
            line(&mut out, 0, "name", &stem, "");
            for (ours, key, value, from) in [
                (
                    "hidden",
                    "layer_size",
                    m.layer_size,
                    "model_param.layer_size",
                ),
                (
                    "batch",
                    "batch_size",
                    m.batch_size,
                    "model_param.batch_size",
                ),
                (
                    "vocab",
                    "vocab_size",
                    m.vocab_size,
                    "model_param.vocab_size (embedding and softmax width: layer_size)",
                ),
                (
                    "layers",
                    "num_layers",
                    m.num_layers,
                    "model_param.num_layers",
                ),
                ("sequence", "seq_len", m.seq_len, "model_param.seq_len"),
                ("gates", "num_gates", m.num_gates, "model_param.num_gates"),
            ] {
                line(&mut out, 0, ours, &need(key, value)?.to_string(), from);
            }
            line(
                &mut out,
                0,
                "precision",
                "fp16",
                "DeepFlow's sw_param.precision: 2",
            );
            if let Some(p) = m.projection {
                notes.push(format!(
                    "model_param.projection = {p}: DeepFlow reads it but forms no GEMM with it \
                     (its LSTM cells, embedding and softmax all use layer_size); imported as \
                     no projection, which is what DeepFlow computes"
                ));
            }
            for (key, v, ours) in [
                ("num_non_linear", m.num_non_linear, 5),
                ("num_add", m.num_add, 8),
            ] {
                if let Some(v) = v.filter(|v| *v != ours) {
                    notes.push(format!(
                        "model_param.{key} = {v}: stackflow's LSTM cell counts {ours} per element \
                         (sigmoid/tanh and the c and h updates); not carried"
                    ));
                }
            }
            if let Some(s) = m.data_scale {
                notes.push(format!(
                    "model_param.data_scale = {}: required by DeepFlow's parser but never read",
                    num(s)
                ));
            }
        }
        "LLM" => {
            let hidden = need("hidden_dim", m.hidden_dim)?;
            let heads = need("num_heads", m.num_heads)?;
            let ffn = match (m.ffn_mult, m.ffn_dim) {
                (Some(mult), given) => {
                    if let Some(d) = given {
                        notes.push(format!(
                            "model_param.ffn_dim = {d}: ffn_mult {} takes precedence, as in \
                             DeepFlow",
                            num(mult)
                        ));
                    }
                    let f = check.positive("model_param.ffn_mult", mult)? * hidden as f64;
                    (
                        f.round() as u64,
                        format!("model_param.ffn_mult {} x hidden_dim", num(mult)),
                    )
                }
                (None, Some(f)) => (
                    check.positive_count("model_param.ffn_dim", f)?,
                    "model_param.ffn_dim".to_string(),
                ),
                (None, None) => (
                    4 * hidden,
                    "4 x hidden_dim (neither ffn_dim nor ffn_mult given)".to_string(),
                ),
            };
            let batch = need("batch_size", m.batch_size)?;
            line(&mut out, 0, "kind", "transformer", "model_param.mode = LLM");
            line(&mut out, 0, "name", &stem, "");
            line(
                &mut out,
                0,
                "hidden",
                &hidden.to_string(),
                "model_param.hidden_dim",
            );
            line(
                &mut out,
                0,
                "layers",
                &need("num_layers", m.num_layers)?.to_string(),
                "model_param.num_layers",
            );
            line(
                &mut out,
                0,
                "heads",
                &heads.to_string(),
                "model_param.num_heads",
            );
            if hidden % heads != 0 {
                return Err(fail(
                    &check,
                    "model_param.num_heads",
                    heads,
                    &format!("a divisor of hidden_dim {hidden}"),
                ));
            }
            line(&mut out, 0, "ffn_hidden", &ffn.0.to_string(), &ffn.1);
            line(
                &mut out,
                0,
                "sequence",
                &need("seq_len", m.seq_len)?.to_string(),
                "model_param.seq_len",
            );
            line(
                &mut out,
                0,
                "vocab",
                "0",
                "no embedding or output layer: DeepFlow's LLM mode times none",
            );
            if let Some(v) = m.vocab_size {
                notes.push(format!(
                    "model_param.vocab_size = {v}: DeepFlow's LLM mode reads it but times no \
                     embedding or logits; imported as vocab: 0 (a stack of blocks)"
                ));
            }
            notes.push(
                "model_param.mode = LLM: DeepFlow times six GEMMs per layer forward and \
                 multiplies by 3 for training; stackflow also times the norms, softmax, \
                 residuals, the backward pass's own shapes and the optimizer"
                    .into(),
            );
            line(
                &mut out,
                0,
                "global_batch",
                &batch.to_string(),
                "model_param.batch_size",
            );
            line(
                &mut out,
                0,
                "precision",
                "fp16",
                "DeepFlow's sw_param.precision: 2",
            );
            if let Some(t) = m.n_tokens {
                notes.push(format!(
                    "model_param.n_tokens = {}: a training run's length; stackflow predicts one \
                     iteration (multiply by n_tokens / (global_batch x sequence) for the run)",
                    num(t)
                ));
            }
            if let Some(t) = m.communication_time.filter(|t| *t != 0.0) {
                notes.push(format!(
                    "model_param.communication_time = {}: a fixed time DeepFlow adds; stackflow \
                     prices communication from the system and strategy",
                    num(t)
                ));
            }
            if let Some(p) = m.n_pp.filter(|p| *p != 1) {
                notes.push(format!(
                    "model_param.N_PP = {p}: a pipeline degree, which belongs to the strategy \
                     (--strategy p{p})"
                ));
            }
        }
        other => {
            return Err(fail(
                &check,
                "model_param.mode",
                other,
                "one of GEMM, LSTM, LLM",
            ));
        }
    }
    Ok(Imported {
        files: vec![ImportedFile {
            name: format!("{stem}.yaml"),
            kind: FileKind::Workload,
            text: out,
        }],
        notes,
    })
}
