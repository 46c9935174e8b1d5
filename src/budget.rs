//! Area, power and perimeter budgets and their split across components (DeepFlow Sec. 4.3,
//! Fig. 4). Shares are fractions of the processor-chip area, the TDP and the die perimeter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::raw::BudgetFile;
use crate::config::{parse_yaml, Checker, ConfigError, Source};

/// Slack allowed when checking that shares sum to at most 1 (rounding in hand-written files).
pub const SUM_TOLERANCE: f64 = 1e-9;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budget {
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    /// Template the budget is meant for, resolved relative to the budget file.
    pub template: PathBuf,
    /// Technology file the budget is meant for, resolved relative to the budget file.
    pub technology: PathBuf,
    pub node_area_mm2: f64,
    pub chip_area_mm2: f64,
    pub tdp_w: f64,
    /// Die perimeter (given, or `4 * sqrt(chip_area_mm2)`).
    pub perimeter_mm: f64,
    pub area_shares: BTreeMap<String, f64>,
    pub power_shares: BTreeMap<String, f64>,
    pub perimeter_shares: BTreeMap<String, f64>,
}

impl Budget {
    /// Reads and checks a budget file; its template and technology paths are resolved
    /// relative to it within the same `source`.
    pub fn load(source: Source, path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let mut budget = Self::from_yaml(&file, &source.read(path)?)?;
        budget.template =
            source.referenced(path, "template", &budget.template.to_string_lossy())?;
        budget.technology =
            source.referenced(path, "technology", &budget.technology.to_string_lossy())?;
        Ok(budget)
    }

    /// Parses and checks budget YAML text (template/technology paths left as written).
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let raw: BudgetFile = parse_yaml(file, text)?;
        let check = Checker { file };
        check.version(raw.version)?;
        // Physical ranges: a chip is at most a 300 mm wafer (~70,000 mm2), a node at most
        // ten of them; a chip's power at most 100 kW (a wafer-scale engine draws ~20 kW).
        let chip_area_mm2 = check.within("area.chip_mm2", raw.area.chip_mm2, 1e-6, 1e5)?;
        let node_area_mm2 = check.within("area.node_mm2", raw.area.node_mm2, 1e-6, 1e6)?;
        if node_area_mm2 < chip_area_mm2 {
            return Err(ConfigError::invalid(
                file,
                "area.node_mm2",
                node_area_mm2,
                format!("expected node area >= chip area ({chip_area_mm2} mm2)"),
            ));
        }
        let tdp_w = check.within("power.tdp_w", raw.power.tdp_w, 1e-6, 1e5)?;
        let perimeter_mm = match raw.perimeter.total_mm {
            Some(p) => check.non_negative("perimeter.total_mm", p)?,
            None => 4.0 * chip_area_mm2.sqrt(),
        };
        Ok(Budget {
            file: file.to_string(),
            name: raw.name,
            description: raw.description,
            template: PathBuf::from(raw.template),
            technology: PathBuf::from(raw.technology),
            node_area_mm2,
            chip_area_mm2,
            tdp_w,
            perimeter_mm,
            area_shares: shares(&check, "area.breakdown", raw.area.breakdown)?,
            power_shares: shares(&check, "power.breakdown", raw.power.breakdown)?,
            perimeter_shares: shares(&check, "perimeter.breakdown", raw.perimeter.breakdown)?,
        })
    }
}

fn shares(
    check: &Checker,
    path: &str,
    map: BTreeMap<String, f64>,
) -> Result<BTreeMap<String, f64>, ConfigError> {
    let expected = "fractions must lie in [0, 1] and sum to at most 1";
    for (name, &value) in &map {
        if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
            return Err(ConfigError::invalid(
                check.file,
                format!("{path}.{name}"),
                value,
                expected,
            ));
        }
    }
    let sum: f64 = map.values().sum();
    if sum > 1.0 + SUM_TOLERANCE {
        return Err(ConfigError::invalid(
            check.file,
            path,
            format!("sum {sum}"),
            expected,
        ));
    }
    Ok(map)
}
