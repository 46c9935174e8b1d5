//! A design point: a technology library, an architecture template and a budget, checked
//! against each other and resolved into the flat form the generator evaluates quickly.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::budget::Budget;
use crate::config::{ConfigError, Source};
use crate::domain::{Component, Scope, Topology, UtilizationCaps};
use crate::tech::{ComputeTech, DramTech, LinkTech, SramTech, TechLibrary};
use crate::template::{Compute, Template};

/// The compute side of a design: the MCU scaled from its library component to the
/// template's shape (area and power scale with the MAC count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoreDesign {
    /// The template's compute section, as checked (embedded, not copied field by field).
    #[serde(flatten)]
    pub compute: Compute,
    /// The library component, scaled to one MCU of the template's shape.
    pub unit: ComputeTech,
    pub area_share: f64,
    pub power_share: f64,
}

impl CoreDesign {
    /// 16-bit floating-point operations per cycle of one MCU (2 per MAC).
    pub fn flops_per_cycle(&self) -> f64 {
        2.0 * self.compute.mcu.macs_per_cycle() as f64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LevelTech {
    OnChip(SramTech),
    OffChip(DramTech),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelDesign {
    pub name: String,
    pub technology: String,
    pub scope: Scope,
    pub tech: LevelTech,
    pub area_share: f64,
    pub power_share: f64,
    /// Only main memory uses perimeter; 0 for on-chip levels.
    pub perimeter_share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkDesign {
    pub technology: String,
    pub topology: Topology,
    pub tech: LinkTech,
    pub area_share: f64,
    pub power_share: f64,
    pub perimeter_share: f64,
}

/// Everything the generator needs, with names checked and shares resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Design {
    pub budget_file: String,
    pub template_file: String,
    pub tech_file: String,
    pub budget_name: String,
    pub template_name: String,
    pub node: Option<String>,
    pub node_area_mm2: f64,
    pub chip_area_mm2: f64,
    pub tdp_w: f64,
    pub perimeter_mm: f64,
    pub core: CoreDesign,
    pub levels: Vec<LevelDesign>,
    pub intra_package: Option<NetworkDesign>,
    pub inter_package: Option<NetworkDesign>,
    pub accelerators_per_package: u64,
    pub packages: u64,
    /// What a software stack achieves over whole steps (the template's `stack:`).
    pub stack: UtilizationCaps,
}

/// Which files to read. `template` and `tech` override the budget's own references.
#[derive(Debug, Clone, Copy)]
pub struct DesignFiles<'a> {
    pub source: Source,
    pub budget: &'a Path,
    pub template: Option<&'a Path>,
    pub tech: Option<&'a Path>,
}

impl Design {
    /// Loads a budget, the template and technology it names (or the overrides), and binds them.
    pub fn load(files: DesignFiles) -> Result<Self, ConfigError> {
        let budget = Budget::load(files.source, files.budget)?;
        let template_path = files.template.unwrap_or(&budget.template);
        let tech_path = files.tech.unwrap_or(&budget.technology);
        // Overrides given on the command line are always files on disk.
        let source_for = |given: Option<&Path>| {
            if given.is_some() {
                Source::Disk
            } else {
                files.source
            }
        };
        let template = Template::load(source_for(files.template), template_path)?;
        let tech = TechLibrary::load(source_for(files.tech), tech_path)?;
        Self::bind(&tech, &template, &budget)
    }

    /// Checks that the template's components exist in the library and that the budget shares
    /// name exactly the template's components.
    pub fn bind(
        tech: &TechLibrary,
        template: &Template,
        budget: &Budget,
    ) -> Result<Self, ConfigError> {
        let unit = compute_unit(tech, template)?;
        let c = &template.compute;
        check_shares(
            budget,
            "area.breakdown",
            &budget.area_shares,
            &template.budget_components(),
            template,
        )?;
        check_shares(
            budget,
            "power.breakdown",
            &budget.power_shares,
            &template.budget_components(),
            template,
        )?;
        check_shares(
            budget,
            "perimeter.breakdown",
            &budget.perimeter_shares,
            &template.perimeter_components(),
            template,
        )?;

        let levels = memory_levels(tech, template, budget)?;
        let network = |key: Component, path: &str, net: &Option<crate::template::Network>| {
            network_design(tech, template, budget, (key, path), net)
        };
        let intra_package = network(
            Component::IntraPackage,
            "package.intra_package",
            &template.package.intra_package,
        )?;
        let inter_package = network(
            Component::InterPackage,
            "system.inter_package",
            &template.system.inter_package,
        )?;

        Ok(Design {
            budget_file: budget.file.clone(),
            template_file: template.file.clone(),
            tech_file: tech.file.clone(),
            budget_name: budget.name.clone(),
            template_name: template.name.clone(),
            node: tech.node.clone(),
            node_area_mm2: budget.node_area_mm2,
            chip_area_mm2: budget.chip_area_mm2,
            tdp_w: budget.tdp_w,
            perimeter_mm: budget.perimeter_mm,
            core: CoreDesign {
                compute: c.clone(),
                unit,
                area_share: budget.area_shares[Component::Core.name()],
                power_share: budget.power_shares[Component::Core.name()],
            },
            levels,
            intra_package,
            inter_package,
            accelerators_per_package: template.package.accelerators,
            packages: template.system.packages,
            stack: template.stack,
        })
    }
}

/// Looks up a template's component in the technology library; a missing one is an error
/// naming the template field and the library's choices.
fn lookup(
    tech: &TechLibrary,
    template: &Template,
    (kind, path): (&str, String),
    name: &str,
    found: bool,
    names: Vec<&String>,
) -> Result<(), ConfigError> {
    if found {
        return Ok(());
    }
    Err(ConfigError::invalid(
        template.file.as_str(),
        path,
        name,
        format!(
            "a {kind} component of technology library {}: one of [{}]",
            tech.file,
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// The template's compute unit, scaled from the library's to the template's MACs per cycle.
fn compute_unit(tech: &TechLibrary, template: &Template) -> Result<ComputeTech, ConfigError> {
    let c = &template.compute;
    lookup(
        tech,
        template,
        ("compute", "compute.technology".into()),
        &c.technology,
        tech.compute.contains_key(&c.technology),
        tech.compute.keys().collect(),
    )?;
    let base = &tech.compute[&c.technology];
    let scale = c.mcu.macs_per_cycle() as f64 / base.macs_per_cycle;
    Ok(ComputeTech {
        macs_per_cycle: c.mcu.macs_per_cycle() as f64,
        area_mm2: base.area_mm2 * scale,
        power_w: base.power_w * scale,
        ..base.clone()
    })
}

/// Every memory level with its technology and its shares (the last is main memory).
fn memory_levels(
    tech: &TechLibrary,
    template: &Template,
    budget: &Budget,
) -> Result<Vec<LevelDesign>, ConfigError> {
    let last = template.memory.len() - 1;
    let mut levels = Vec::with_capacity(template.memory.len());
    for (i, level) in template.memory.iter().enumerate() {
        let path = format!("memory[{i}].technology");
        let level_tech = if i == last {
            lookup(
                tech,
                template,
                ("dram", path),
                &level.technology,
                tech.dram.contains_key(&level.technology),
                tech.dram.keys().collect(),
            )?;
            LevelTech::OffChip(tech.dram[&level.technology].clone())
        } else {
            lookup(
                tech,
                template,
                ("sram", path),
                &level.technology,
                tech.sram.contains_key(&level.technology),
                tech.sram.keys().collect(),
            )?;
            LevelTech::OnChip(tech.sram[&level.technology].clone())
        };
        levels.push(LevelDesign {
            name: level.name.clone(),
            technology: level.technology.clone(),
            scope: level.scope,
            tech: level_tech,
            area_share: budget.area_shares[&level.name],
            power_share: budget.power_shares[&level.name],
            perimeter_share: budget
                .perimeter_shares
                .get(&level.name)
                .copied()
                .unwrap_or(0.0),
        });
    }
    Ok(levels)
}

/// A template network with its link technology and its shares.
fn network_design(
    tech: &TechLibrary,
    template: &Template,
    budget: &Budget,
    (key, path): (Component, &str),
    net: &Option<crate::template::Network>,
) -> Result<Option<NetworkDesign>, ConfigError> {
    net.as_ref()
        .map(|n| {
            lookup(
                tech,
                template,
                ("links", format!("{path}.technology")),
                &n.technology,
                tech.links.contains_key(&n.technology),
                tech.links.keys().collect(),
            )?;
            Ok::<_, ConfigError>(NetworkDesign {
                technology: n.technology.clone(),
                topology: n.topology.clone(),
                tech: tech.links[&n.technology].clone(),
                area_share: budget.area_shares[key.name()],
                power_share: budget.power_shares[key.name()],
                perimeter_share: budget.perimeter_shares[key.name()],
            })
        })
        .transpose()
}

/// The shares must name exactly `components`: none missing, none unknown.
fn check_shares(
    budget: &Budget,
    path: &str,
    shares: &BTreeMap<String, f64>,
    components: &[Component],
    template: &Template,
) -> Result<(), ConfigError> {
    let list = components
        .iter()
        .map(Component::name)
        .collect::<Vec<_>>()
        .join(", ");
    for name in shares.keys() {
        if !components.iter().any(|c| c.name() == name) {
            return Err(ConfigError::invalid(
                &budget.file,
                format!("{path}.{name}"),
                shares[name],
                format!(
                    "a component of template '{}' ({}): one of [{list}]",
                    template.name, template.file
                ),
            ));
        }
    }
    for name in components.iter().map(Component::name) {
        if !shares.contains_key(name) {
            return Err(ConfigError::invalid(
                &budget.file,
                format!("{path}.{name}"),
                "(missing)",
                format!(
                    "a share for every component of template '{}': [{list}]",
                    template.name
                ),
            ));
        }
    }
    Ok(())
}
