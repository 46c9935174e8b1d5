//! The voltage-frequency operating point of a replicated unit under a power budget.
//!
//! Used for compute bundles, DRAM links and network lanes alike (DeepFlow Sec. 4.4.1,
//! 4.4.3, 4.4.4): start from the most units the area (or perimeter) allows; if their nominal
//! power is below the budget raise the voltage, if above lower it; at the minimum voltage
//! remove units until the budget holds; never exceed the maximum voltage.
//!
//! Each thread remembers its last few operating points: a budget search moves one share at
//! a time, so most components of a new design ask for the point they had before. A pure
//! function's memo: never changes a result.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

use crate::tech::VoltageCurve;

/// What stopped a quantity from growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The area share (or the node area for memory devices).
    Area,
    /// The power share.
    Power,
    /// The perimeter (shoreline) share.
    Perimeter,
    /// Units were removed because even at the minimum voltage all of them exceed the power.
    VoltageFloor,
    /// Already at the maximum voltage; power is left over.
    VoltageCeiling,
    /// Memory devices: the package area outside the die.
    NodeArea,
    /// Leakage of the memory alone uses the whole power share: no power left for accesses.
    StaticPower,
    /// An on-chip memory's banks move at most their ports' width every clock.
    Ports,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Limit::Area => "area",
            Limit::Power => "power",
            Limit::Perimeter => "perimeter",
            Limit::VoltageFloor => "voltage floor",
            Limit::VoltageCeiling => "voltage ceiling",
            Limit::NodeArea => "node area",
            Limit::StaticPower => "static power",
            Limit::Ports => "bank ports",
        };
        f.write_str(s)
    }
}

/// Result of [`operating_point`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OperatingPoint {
    /// Units powered (at most `max_units`).
    pub units: u64,
    pub voltage_v: f64,
    /// Operating frequency or data rate relative to nominal.
    pub frequency_ratio: f64,
    /// Power drawn by the powered units; never above the budget.
    pub power_w: f64,
    /// What limited the number of units: `Area` (the caller's geometric limit) or
    /// `VoltageFloor`/`Power` when power removed units.
    pub units_limit: Limit,
    /// What set the voltage: `Power` (the whole budget is used) or `VoltageCeiling`.
    pub voltage_limit: Limit,
}

impl OperatingPoint {
    fn off(curve: &VoltageCurve, units_limit: Limit) -> Self {
        OperatingPoint {
            units: 0,
            voltage_v: curve.min_v,
            frequency_ratio: 0.0,
            power_w: 0.0,
            units_limit,
            voltage_limit: Limit::Power,
        }
    }
}

/// The inputs of one operating point, bit for bit.
type Inputs = [u64; 8];

/// Operating points each thread remembers.
const REMEMBERED: usize = 32;

thread_local! {
    /// The thread's recent operating points, and where the next one goes.
    static RECENT: RefCell<(Vec<(Inputs, OperatingPoint)>, usize)> =
        const { RefCell::new((Vec::new(), 0)) };
}

/// Finds how many of `max_units` units (each drawing `unit_power_w` at the nominal point) to
/// power, and at which voltage, so that their dynamic power fits `budget_w`.
///
/// Zero units or zero budget give zero units: never a tiny positive capability.
pub fn operating_point(
    curve: &VoltageCurve,
    max_units: u64,
    unit_power_w: f64,
    budget_w: f64,
) -> OperatingPoint {
    let inputs = [
        curve.nominal_v.to_bits(),
        curve.threshold_v.to_bits(),
        curve.min_v.to_bits(),
        curve.max_v.to_bits(),
        curve.alpha.to_bits(),
        max_units,
        unit_power_w.to_bits(),
        budget_w.to_bits(),
    ];
    let known = RECENT.with(|r| {
        let r = r.borrow();
        r.0.iter().find(|(k, _)| *k == inputs).map(|(_, op)| *op)
    });
    if let Some(op) = known {
        return op;
    }
    let op = solve(curve, max_units, unit_power_w, budget_w);
    RECENT.with(|r| {
        let (points, next) = &mut *r.borrow_mut();
        if points.len() < REMEMBERED {
            points.push((inputs, op));
        } else {
            points[*next] = (inputs, op);
        }
        *next = (*next + 1) % REMEMBERED;
    });
    op
}

/// [`operating_point`], computed.
fn solve(curve: &VoltageCurve, max_units: u64, unit_power_w: f64, budget_w: f64) -> OperatingPoint {
    if max_units == 0 {
        return OperatingPoint::off(curve, Limit::Area);
    }
    if budget_w <= 0.0 || unit_power_w <= 0.0 {
        return OperatingPoint::off(curve, Limit::Power);
    }
    let floor_power = unit_power_w * curve.power_ratio(curve.min_v);
    let affordable = (budget_w / floor_power * (1.0 + 1e-12)).floor();
    let (units, units_limit) = if affordable < max_units as f64 {
        (affordable as u64, Limit::VoltageFloor)
    } else {
        (max_units, Limit::Area)
    };
    if units == 0 {
        return OperatingPoint::off(curve, Limit::VoltageFloor);
    }
    let ratio = budget_w / (units as f64 * unit_power_w);
    let mut voltage_v = curve.voltage_for_power_ratio(ratio).max(curve.min_v);
    let voltage_limit = if voltage_v >= curve.max_v {
        voltage_v = curve.max_v;
        Limit::VoltageCeiling
    } else {
        Limit::Power
    };
    let power_w = (units as f64 * unit_power_w * curve.power_ratio(voltage_v)).min(budget_w);
    OperatingPoint {
        units,
        voltage_v,
        frequency_ratio: curve.frequency_ratio(voltage_v),
        power_w,
        units_limit,
        voltage_limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CURVE: VoltageCurve = VoltageCurve {
        nominal_v: 0.8,
        threshold_v: 0.2,
        min_v: 0.55,
        max_v: 1.0,
        alpha: 2.0,
    };

    #[test]
    fn under_budget_raises_voltage_and_uses_the_whole_budget() {
        let op = operating_point(&CURVE, 80, 1.04, 112.35);
        assert_eq!(op.units, 80);
        assert!(op.voltage_v > CURVE.nominal_v);
        assert!((op.power_w - 112.35).abs() < 1e-6);
        assert_eq!(op.voltage_limit, Limit::Power);
    }

    #[test]
    fn at_the_floor_units_are_removed_and_budget_holds() {
        // 80 bundles x 1.04 W, 10 W: at 0.55 V a bundle draws 1.04 * 0.233941 = 0.2433 W -> 41.
        let op = operating_point(&CURVE, 80, 1.04, 10.0);
        assert_eq!(op.units, 41);
        assert_eq!(op.units_limit, Limit::VoltageFloor);
        assert!(op.power_w <= 10.0);
        assert!(op.voltage_v >= CURVE.min_v);
    }

    #[test]
    fn ceiling_leaves_power_unused() {
        let op = operating_point(&CURVE, 1, 1.0, 1000.0);
        assert_eq!(op.voltage_v, CURVE.max_v);
        assert_eq!(op.voltage_limit, Limit::VoltageCeiling);
        assert!(op.power_w < 1000.0);
    }

    #[test]
    fn zero_budget_is_zero_capability() {
        assert_eq!(operating_point(&CURVE, 80, 1.0, 0.0).frequency_ratio, 0.0);
        assert_eq!(operating_point(&CURVE, 0, 1.0, 50.0).units, 0);
        assert_eq!(operating_point(&CURVE, 80, 1.0, 1e-9).units, 0);
    }
}
