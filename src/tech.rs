//! The technology library: physical parameters of compute, on-chip SRAM, off-chip DRAM and
//! link components (DeepFlow Sec. 4.1, Table 1), converted to SI units.
//!
//! # Voltage-frequency-power relations
//! Every component that can be voltage-scaled carries a [`VoltageCurve`]:
//! - frequency follows the alpha-power law, `f ∝ (V - Vt)^a / V` (a = 2 by default, the
//!   long-channel/velocity-saturation compromise also used by DeepFlow);
//! - dynamic energy per operation follows `E ∝ V^2`, so dynamic power `P ∝ C V^2 f`;
//! - relative to the nominal point, `P/Pn = (V/Vn)^2 * f/fn = V (V-Vt)^a / (Vn (Vn-Vt)^a)`,
//!   which rises monotonically with V above Vt, so a power budget gives exactly one voltage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::raw::{self, TechFile};
use crate::config::{parse_yaml, Checker, ConfigError, Source};

/// Alpha-power voltage-frequency curve of one component, with its legal voltage range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VoltageCurve {
    pub nominal_v: f64,
    pub threshold_v: f64,
    pub min_v: f64,
    pub max_v: f64,
    pub alpha: f64,
}

impl VoltageCurve {
    /// `(V - Vt)^a / V`: frequency up to a constant.
    fn shape(&self, voltage: f64) -> f64 {
        (voltage - self.threshold_v).powf(self.alpha) / voltage
    }

    /// `f(V) / f(Vn)`.
    pub fn frequency_ratio(&self, voltage: f64) -> f64 {
        self.frequency_ratio_to(voltage, self.shape(self.nominal_v))
    }

    /// `frequency_ratio` given the nominal point's shape.
    fn frequency_ratio_to(&self, voltage: f64, nominal_shape: f64) -> f64 {
        if voltage <= self.threshold_v {
            return 0.0;
        }
        self.shape(voltage) / nominal_shape
    }

    /// Dynamic power at `voltage` relative to the nominal point, for the same amount of hardware.
    pub fn power_ratio(&self, voltage: f64) -> f64 {
        self.power_ratio_to(voltage, self.shape(self.nominal_v))
    }

    /// `power_ratio` given the nominal point's shape (one power law per call, not two).
    fn power_ratio_to(&self, voltage: f64, nominal_shape: f64) -> f64 {
        let v = voltage / self.nominal_v;
        v * v * self.frequency_ratio_to(voltage, nominal_shape)
    }

    /// Dynamic energy per operation at `voltage` relative to nominal (`(V/Vn)^2`).
    pub fn energy_ratio(&self, voltage: f64) -> f64 {
        let v = voltage / self.nominal_v;
        v * v
    }

    /// The highest voltage in `[Vt, max_v]` whose power ratio does not exceed `ratio`
    /// (bisection; the result never overshoots the budget).
    ///
    /// The bisection's comparisons far from the root are settled without the power law: a
    /// Newton estimate `v` is verified to bracket the root within `v +- 1e-9 v`, and a
    /// midpoint at least that far again outside the bracket is on the bracket's side. Its
    /// power ratio differs from the bracket's by a factor of at least `1 +- 1e-9` (the ratio
    /// grows faster than `V`), far beyond the few ulps of rounding in computing it, so the
    /// comparison would come out the same: the result is the plain bisection's, bit for bit
    /// (a test compares the two).
    pub fn voltage_for_power_ratio(&self, ratio: f64) -> f64 {
        let nominal = self.shape(self.nominal_v);
        if ratio >= self.power_ratio_to(self.max_v, nominal) {
            return self.max_v;
        }
        let settled = self.bracket(ratio, nominal);
        let (mut lo, mut hi) = (self.threshold_v, self.max_v);
        for _ in 0..64 {
            let mid = 0.5 * (lo + hi);
            let fits = match settled {
                Some((below, _, gap)) if mid <= below - gap => true,
                Some((_, above, gap)) if mid >= above + gap => false,
                _ => self.power_ratio_to(mid, nominal) <= ratio,
            };
            if fits {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * hi {
                break;
            }
        }
        lo
    }

    /// Voltages `below` and `above` = `below + 2 gap` whose power ratios are verified to lie
    /// at most at and above `ratio`, around a Newton estimate of the root of
    /// `V (V - Vt)^a = ratio Vn^2 shape(Vn)` started from the maximum voltage (the left
    /// side is convex and rising above Vt, so the iterates fall monotonically to the root).
    /// `None` when the estimate does not verify.
    fn bracket(&self, ratio: f64, nominal: f64) -> Option<(f64, f64, f64)> {
        let (vt, a) = (self.threshold_v, self.alpha);
        let target = ratio * self.nominal_v * self.nominal_v * nominal;
        let mut v = self.max_v;
        for _ in 0..40 {
            let d = v - vt;
            if d <= 0.0 {
                return None;
            }
            let pow = d.powf(a - 1.0);
            let step = (v * pow * d - target) / (pow * (d + a * v));
            if !step.is_finite() {
                return None;
            }
            let next = (v - step).max(vt + 0.5 * d);
            let done = (v - next).abs() <= 1e-15 * v;
            v = next;
            if done {
                break;
            }
        }
        let gap = 1e-9 * v;
        let (below, above) = (v - gap, v + gap);
        let verified = below > vt
            && self.power_ratio_to(below, nominal) <= ratio
            && self.power_ratio_to(above, nominal) > ratio;
        verified.then_some((below, above, gap))
    }

    fn from_raw(check: &Checker, path: &str, raw: &raw::VoltageRaw) -> Result<Self, ConfigError> {
        let p = |f: &str| format!("{path}.{f}");
        let threshold_v = check.non_negative(&p("threshold_v"), raw.threshold_v)?;
        let nominal_v = check.positive(&p("nominal_v"), raw.nominal_v)?;
        let min_v = check.positive(&p("min_v"), raw.min_v)?;
        let max_v = check.positive(&p("max_v"), raw.max_v)?;
        let alpha = check.within(&p("alpha"), raw.alpha.unwrap_or(2.0), 1.0, 3.0)?;
        if min_v <= threshold_v {
            return Err(ConfigError::invalid(
                check.file,
                p("min_v"),
                min_v,
                format!("expected min_v > threshold_v ({threshold_v})"),
            ));
        }
        if !(min_v <= nominal_v && nominal_v <= max_v) {
            return Err(ConfigError::invalid(
                check.file,
                p("nominal_v"),
                nominal_v,
                format!("expected min_v ({min_v}) <= nominal_v <= max_v ({max_v})"),
            ));
        }
        Ok(Self {
            nominal_v,
            threshold_v,
            min_v,
            max_v,
            alpha,
        })
    }
}

/// A minimal compute component (tensor core, systolic array) at its nominal operating point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComputeTech {
    pub macs_per_cycle: f64,
    pub area_mm2: f64,
    pub power_w: f64,
    pub frequency_hz: f64,
    pub voltage: VoltageCurve,
}

/// An SRAM macro family used to build on-chip memory levels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SramTech {
    /// Bit-cell area, mm2 per bit.
    pub area_per_bit_mm2: f64,
    /// Fraction of a bank's area taken by periphery (decoders, sense amps): bank area is
    /// `cells / (1 - overhead)`.
    pub periphery_overhead: f64,
    pub bank_capacity_bytes: f64,
    pub dynamic_energy_per_bit_j: f64,
    pub static_power_per_bit_w: f64,
    pub controller_area_per_bank_mm2: f64,
    pub controller_power_per_bank_w: f64,
    /// Crossbar area per (bank, client) crosspoint.
    pub crossbar_area_per_port_mm2: f64,
    pub latency_s: f64,
    /// Bytes one bank moves per clock through all its ports (ports x width); `None`: no cap
    /// (DeepFlow's model, where power alone sets bandwidth).
    pub bank_bytes_per_cycle: Option<f64>,
}

/// Ports an SRAM bank may have (multi-ported register files reach a handful).
const MAX_BANK_PORTS: u64 = 16;

/// Widest port of an SRAM bank, bits.
const MAX_PORT_BITS: u64 = 8192;

impl SramTech {
    /// Area of one bank including periphery, without controller or crossbar.
    pub fn bank_area_mm2(&self) -> f64 {
        self.bank_capacity_bytes * 8.0 * self.area_per_bit_mm2 / (1.0 - self.periphery_overhead)
    }

    /// Leakage of one bank: its cells (Eq. 2) plus its controller.
    pub fn bank_static_power_w(&self) -> f64 {
        self.static_power_per_bit_w * self.bank_capacity_bytes * 8.0
            + self.controller_power_per_bank_w
    }
}

impl DramTech {
    /// Leakage of one device (Eq. 2 applied to main memory).
    pub fn device_static_power_w(&self) -> f64 {
        self.static_power_per_bit_w * self.device_capacity_bytes * 8.0
    }
}

/// An off-chip memory device family (HBM generation).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DramTech {
    pub device_capacity_bytes: f64,
    pub device_area_mm2: f64,
    pub links_per_device: u64,
    /// Memory controller plus PHY area on the processor die, per device.
    pub controller_phy_area_mm2: f64,
    pub energy_per_bit_j: f64,
    pub static_power_per_bit_w: f64,
    /// Nominal data rate per link (pin), bit/s.
    pub data_rate_bit_per_s: f64,
    pub voltage: VoltageCurve,
    pub links_per_mm: f64,
    pub latency_s: f64,
}

/// A chip-to-chip link family (2.5D, NVLink-class, InfiniBand-class, ICI, PCIe).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkTech {
    pub energy_per_bit_j: f64,
    pub area_per_lane_mm2: f64,
    pub lanes_per_mm: f64,
    /// Nominal line rate per lane, bit/s.
    pub data_rate_bit_per_s: f64,
    pub encoding_efficiency: f64,
    pub voltage: VoltageCurve,
    pub latency_s: f64,
}

/// A merged technology library: one logic node plus the memory and link families it includes.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct TechLibrary {
    /// Name of the logic node (`N7`), if the library has one.
    pub node: Option<String>,
    /// The file it was loaded from.
    pub file: String,
    pub compute: BTreeMap<String, ComputeTech>,
    pub sram: BTreeMap<String, SramTech>,
    pub dram: BTreeMap<String, DramTech>,
    pub links: BTreeMap<String, LinkTech>,
}

impl TechLibrary {
    /// Loads a technology file and, recursively, the files it includes.
    pub fn load(source: Source, path: &Path) -> Result<Self, ConfigError> {
        let mut library = TechLibrary {
            file: path.display().to_string(),
            ..Default::default()
        };
        library.merge_file(source, path, 0)?;
        Ok(library)
    }

    /// The files a technology file is made of: itself, then what it includes, recursively
    /// (each resolved as the loader resolves it; a file included twice listed once).
    pub fn files(source: Source, path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
        let mut files = Vec::new();
        let mut pending = vec![(path.to_path_buf(), 0)];
        while let Some((file, depth)) = pending.pop() {
            if files.contains(&file) {
                continue;
            }
            let name = file.display().to_string();
            if depth > 8 {
                return Err(ConfigError::invalid(
                    &name,
                    "include",
                    "(nested too deeply)",
                    "includes may nest at most 8 deep (is there a cycle?)",
                ));
            }
            let raw: TechFile = parse_yaml(&name, &source.read(&file)?)?;
            for (i, include) in raw.include.iter().enumerate().rev() {
                let included = source.referenced(&file, &format!("include[{i}]"), include)?;
                pending.push((included, depth + 1));
            }
            files.push(file);
        }
        Ok(files)
    }

    /// Parses technology YAML text (no includes allowed) — handy for tests and tools.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let raw: TechFile = parse_yaml(file, text)?;
        if let Some(first) = raw.include.first() {
            return Err(ConfigError::invalid(
                file,
                "include[0]",
                first,
                "includes need a file path; load with TechLibrary::load",
            ));
        }
        let mut library = TechLibrary {
            file: file.to_string(),
            ..Default::default()
        };
        library.merge_raw(file, raw)?;
        Ok(library)
    }

    fn merge_file(&mut self, source: Source, path: &Path, depth: usize) -> Result<(), ConfigError> {
        let file = path.display().to_string();
        if depth > 8 {
            return Err(ConfigError::invalid(
                &file,
                "include",
                "(nested too deeply)",
                "includes may nest at most 8 deep (is there a cycle?)",
            ));
        }
        let raw: TechFile = parse_yaml(&file, &source.read(path)?)?;
        for (i, include) in raw.include.clone().into_iter().enumerate() {
            let included = source.referenced(path, &format!("include[{i}]"), &include)?;
            self.merge_file(source, &included, depth + 1)?;
        }
        self.merge_raw(&file, raw)
    }

    fn merge_raw(&mut self, file: &str, raw: TechFile) -> Result<(), ConfigError> {
        let check = Checker { file };
        check.version(raw.version)?;
        if let Some(node) = raw.node {
            if let Some(existing) = &self.node {
                return Err(ConfigError::invalid(
                    file,
                    "node",
                    &node,
                    format!("a library holds one logic node; {existing} is already loaded"),
                ));
            }
            self.node = Some(node);
        }
        for (name, c) in raw.compute {
            let p = |f: &str| format!("compute.{name}.{f}");
            let tech = ComputeTech {
                macs_per_cycle: check.positive(&p("macs_per_cycle"), c.macs_per_cycle)?,
                area_mm2: check.positive(&p("area_mm2"), c.area_mm2)?,
                power_w: check.positive(&p("power_w"), c.power_w)?,
                // Physical range: no logic clocks below 10 MHz or above 20 GHz.
                frequency_hz: check.within(&p("frequency_ghz"), c.frequency_ghz, 0.01, 20.0)? * 1e9,
                voltage: VoltageCurve::from_raw(&check, &p("voltage"), &c.voltage)?,
            };
            insert_unique(&mut self.compute, file, "compute", name, tech)?;
        }
        for (name, s) in raw.sram {
            let p = |f: &str| format!("sram.{name}.{f}");
            let tech = SramTech {
                area_per_bit_mm2: check.positive(&p("area_per_bit_um2"), s.area_per_bit_um2)?
                    * 1e-6,
                periphery_overhead: check.within(
                    &p("periphery_overhead"),
                    s.periphery_overhead,
                    0.0,
                    0.95,
                )?,
                bank_capacity_bytes: check
                    .positive(&p("bank_capacity_kib"), s.bank_capacity_kib)?
                    * 1024.0,
                dynamic_energy_per_bit_j: check
                    .positive(&p("dynamic_energy_per_bit_fj"), s.dynamic_energy_per_bit_fj)?
                    * 1e-15,
                static_power_per_bit_w: check
                    .non_negative(&p("static_power_per_bit_pw"), s.static_power_per_bit_pw)?
                    * 1e-12,
                controller_area_per_bank_mm2: check.non_negative(
                    &p("controller_area_per_bank_mm2"),
                    s.controller_area_per_bank_mm2,
                )?,
                controller_power_per_bank_w: check.non_negative(
                    &p("controller_power_per_bank_mw"),
                    s.controller_power_per_bank_mw,
                )? * 1e-3,
                crossbar_area_per_port_mm2: check.non_negative(
                    &p("crossbar_area_per_port_mm2"),
                    s.crossbar_area_per_port_mm2,
                )?,
                latency_s: check.non_negative(&p("latency_ns"), s.latency_ns)? * 1e-9,
                bank_bytes_per_cycle: match (s.ports_per_bank, s.port_width_bits) {
                    (None, None) => None,
                    (Some(ports), Some(bits)) => Some(
                        check.count_in(&p("ports_per_bank"), ports, MAX_BANK_PORTS)? as f64
                            * check.count_in(&p("port_width_bits"), bits, MAX_PORT_BITS)? as f64
                            / 8.0,
                    ),
                    (Some(_), None) => {
                        return Err(ConfigError::invalid(
                            file,
                            p("port_width_bits"),
                            "(absent)",
                            "a port width beside ports_per_bank (both or neither)",
                        ))
                    }
                    (None, Some(_)) => {
                        return Err(ConfigError::invalid(
                            file,
                            p("ports_per_bank"),
                            "(absent)",
                            "a port count beside port_width_bits (both or neither)",
                        ))
                    }
                },
            };
            insert_unique(&mut self.sram, file, "sram", name, tech)?;
        }
        for (name, d) in raw.dram {
            let p = |f: &str| format!("dram.{name}.{f}");
            let tech = DramTech {
                device_capacity_bytes: check
                    .positive(&p("device_capacity_gib"), d.device_capacity_gib)?
                    * (1u64 << 30) as f64,
                device_area_mm2: check.positive(&p("device_area_mm2"), d.device_area_mm2)?,
                links_per_device: check
                    .positive_count(&p("links_per_device"), d.links_per_device)?,
                controller_phy_area_mm2: check
                    .positive(&p("controller_phy_area_mm2"), d.controller_phy_area_mm2)?,
                energy_per_bit_j: check.positive(&p("energy_per_bit_pj"), d.energy_per_bit_pj)?
                    * 1e-12,
                static_power_per_bit_w: check
                    .non_negative(&p("static_power_per_bit_pw"), d.static_power_per_bit_pw)?
                    * 1e-12,
                data_rate_bit_per_s: check.positive(&p("data_rate_gbps"), d.data_rate_gbps)? * 1e9,
                voltage: VoltageCurve::from_raw(&check, &p("voltage"), &d.voltage)?,
                links_per_mm: check.positive(&p("links_per_mm"), d.links_per_mm)?,
                latency_s: check.non_negative(&p("latency_ns"), d.latency_ns)? * 1e-9,
            };
            insert_unique(&mut self.dram, file, "dram", name, tech)?;
        }
        for (name, l) in raw.links {
            let p = |f: &str| format!("links.{name}.{f}");
            let tech = LinkTech {
                energy_per_bit_j: check.positive(&p("energy_per_bit_pj"), l.energy_per_bit_pj)?
                    * 1e-12,
                area_per_lane_mm2: check.positive(&p("area_per_lane_mm2"), l.area_per_lane_mm2)?,
                lanes_per_mm: check.positive(&p("lanes_per_mm"), l.lanes_per_mm)?,
                data_rate_bit_per_s: check.positive(&p("data_rate_gbps"), l.data_rate_gbps)? * 1e9,
                encoding_efficiency: check.within(
                    &p("encoding_efficiency"),
                    l.encoding_efficiency.unwrap_or(1.0),
                    0.01,
                    1.0,
                )?,
                voltage: VoltageCurve::from_raw(&check, &p("voltage"), &l.voltage)?,
                latency_s: check.non_negative(&p("latency_ns"), l.latency_ns)? * 1e-9,
            };
            insert_unique(&mut self.links, file, "links", name, tech)?;
        }
        Ok(())
    }
}

fn insert_unique<T>(
    map: &mut BTreeMap<String, T>,
    file: &str,
    section: &str,
    name: String,
    value: T,
) -> Result<(), ConfigError> {
    if map.contains_key(&name) {
        return Err(ConfigError::invalid(
            file,
            format!("{section}.{name}"),
            &name,
            "each component name may be defined once across a file and its includes",
        ));
    }
    map.insert(name, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    fn curve() -> VoltageCurve {
        VoltageCurve {
            nominal_v: 0.8,
            threshold_v: 0.2,
            min_v: 0.55,
            max_v: 1.1,
            alpha: 2.0,
        }
    }

    #[test]
    fn nominal_point_is_unity() {
        assert_relative_eq!(curve().frequency_ratio(0.8), 1.0);
        assert_relative_eq!(curve().power_ratio(0.8), 1.0);
    }

    #[test]
    fn hand_computed_frequency_ratio() {
        // (0.9-0.2)^2/0.9 / ((0.6)^2/0.8) = 0.544444/0.45 = 1.209877
        assert_relative_eq!(
            curve().frequency_ratio(0.9),
            1.209_876_5,
            max_relative = 1e-6
        );
    }

    /// The plain bisection `voltage_for_power_ratio` shortens.
    fn bisection(c: &VoltageCurve, ratio: f64) -> f64 {
        if ratio >= c.power_ratio(c.max_v) {
            return c.max_v;
        }
        let (mut lo, mut hi) = (c.threshold_v, c.max_v);
        for _ in 0..64 {
            let mid = 0.5 * (lo + hi);
            if c.power_ratio(mid) <= ratio {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * hi {
                break;
            }
        }
        lo
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Settling the far comparisons changes no result: bit for bit the bisection's, on
        /// curves and ratios of every kind (down to a hair above the threshold).
        #[test]
        fn the_shortened_solver_is_the_bisection(
            vt in 0.0f64..0.5,
            span in 0.05f64..1.0,
            alpha in 1.0f64..3.0,
            ratio_exp in -12.0f64..1.0,
        ) {
            let c = VoltageCurve {
                nominal_v: vt + 0.6 * span,
                threshold_v: vt,
                min_v: vt + 0.1 * span,
                max_v: vt + span,
                alpha,
            };
            let ratio = 10f64.powf(ratio_exp);
            proptest::prop_assert_eq!(
                c.voltage_for_power_ratio(ratio).to_bits(),
                bisection(&c, ratio).to_bits()
            );
        }
    }

    /// The Newton estimate brackets the root wherever the bisection searches (so the far
    /// comparisons are settled, not merely allowed to be).
    #[test]
    fn the_estimate_brackets_the_root() {
        let c = curve();
        let nominal = c.shape(c.nominal_v);
        for r in [1e-9, 1e-4, 0.01, 0.3, 1.0, 1.9] {
            assert!(c.power_ratio(c.max_v) > r);
            let (below, above, gap) = c.bracket(r, nominal).expect("verified");
            let v = c.voltage_for_power_ratio(r);
            assert!(
                below <= v && v <= above && gap < 2e-9,
                "{r}: {below} {v} {above}"
            );
        }
    }

    #[test]
    fn power_solver_inverts_power_ratio_and_never_overshoots() {
        let c = curve();
        for r in [0.3, 0.5, 1.0, 1.344_06, 1.9] {
            let v = c.voltage_for_power_ratio(r);
            assert!(c.power_ratio(v) <= r);
            assert_relative_eq!(c.power_ratio(v), r, max_relative = 1e-9);
        }
        assert_eq!(c.voltage_for_power_ratio(100.0), c.max_v);
    }
}
