//! Integration tests of the technology -> template -> budget -> architecture pipeline.

mod common;

use std::path::Path;

use common::{assert_close, root, stackflow, Scratch};

use proptest::prelude::*;
use stackflow::config::{Source, SHIPPED};
use stackflow::design::{Design, DesignFiles, LevelTech};
use stackflow::generator::{generate, Architecture, Limit, Usage};
use stackflow::tech::VoltageCurve;

fn design(budget: &str) -> Design {
    Design::load(DesignFiles {
        source: Source::Disk,
        budget: &root().join(budget),
        template: None,
        tech: None,
    })
    .unwrap_or_else(|e| panic!("{budget}: {e}"))
}

fn with_tech(budget: &str, tech: &str) -> Design {
    let tech = root().join(tech);
    Design::load(DesignFiles {
        source: Source::Disk,
        budget: &root().join(budget),
        template: None,
        tech: Some(&tech),
    })
    .unwrap()
}

// ------------------------------------------------------------------ calibration

/// Datasheet values from ../shared/reference/published-measurements.md (spec rows).
/// (budget, peak dense 16-bit FLOP/s, memory B/s, memory bytes, source)
const DATASHEETS: [(&str, f64, f64, f64, &str); 4] = [
    (
        "budgets/v100.yaml",
        125e12,
        900e9,
        16.0 * (1u64 << 30) as f64,
        "NVIDIA V100 datasheet",
    ),
    (
        "budgets/a100.yaml",
        312e12,
        2039e9,
        80.0 * (1u64 << 30) as f64,
        "TPU v4 paper Table 5",
    ),
    (
        "budgets/h100.yaml",
        989e12,
        3.35e12,
        80e9,
        "NVIDIA H100 datasheet",
    ),
    (
        "budgets/tpu-v4.yaml",
        275e12,
        1200e9,
        32.0 * (1u64 << 30) as f64,
        "TPU v4 paper Table 4",
    ),
];

#[test]
fn shipped_chips_match_their_datasheets_within_10_percent() {
    for (budget, peak, bandwidth, capacity, source) in DATASHEETS {
        let a = generate(&design(budget));
        assert!(a.feasible(), "{budget}: {:?}", a.violations);
        assert_close(
            &format!("{budget} peak ({source})"),
            a.peak_flops_per_s,
            peak,
            0.10,
        );
        assert_close(
            &format!("{budget} bandwidth ({source})"),
            a.memory_bandwidth_bytes_per_s,
            bandwidth,
            0.10,
        );
        assert_close(
            &format!("{budget} capacity ({source})"),
            a.memory_capacity_bytes,
            capacity,
            0.10,
        );
        // Derived by the solver, not pinned: the voltage is not the nominal one for all.
        assert!(a.core.voltage_v > 0.0 && a.core.frequency_hz > 0.0);
    }
}

#[test]
fn v100_voltage_is_solved_from_its_power_budget() {
    let a = generate(&design("budgets/v100.yaml"));
    // 640 tensor cores need 1.53 GHz for 125 TFLOP/s; nominal is 1.33 GHz at 0.8 V, so the
    // 112.35 W core budget must raise the voltage above nominal.
    assert_eq!(a.core.mcus, 640);
    assert!(a.core.voltage_v > 0.8);
    assert_close("V100 clock", a.core.frequency_hz, 1.53e9, 0.01);
}

// ------------------------------------------------------------------ oracle cross-checks

fn oracle(budget: &str) -> Architecture {
    generate(&design(&format!("tests/oracle/{budget}")))
}

fn level<'a>(a: &'a Architecture, name: &str) -> &'a stackflow::generator::OnChipReport {
    a.on_chip.iter().find(|l| l.name == name).unwrap()
}

#[test]
fn oracle_o1_reproduced_within_1_percent() {
    let a = oracle("o1-budget.yaml");
    // deepflow-oracle.md, O1. The reference counts 643 loose MCUs; stackflow builds whole
    // bundles (SMs), 80 x 8 = 640, which is within 0.5%.
    assert_close("MCUs", a.core.mcus as f64, 643.0, 0.01);
    assert_eq!(a.core.bundles, 80);
    assert_close("V", a.core.voltage_v, 0.8678548, 0.01);
    assert_close("f", a.core.frequency_hz, 1.518994460e9, 0.01);
    assert_close("peak", a.peak_flops_per_s, 1.2501932e14, 0.01);
    assert_close(
        "sustained",
        a.core.sustained_flops_per_s,
        1.0626642e14,
        0.01,
    );
    let r = level(&a, "l0");
    assert_close("register banks", r.banks as f64, 1282.0, 0.01);
    assert_close("register bytes", r.capacity_bytes, 21_004_288.0, 0.01);
    assert_close("register B/s", r.bandwidth_bytes_per_s, 1.0302101e14, 0.01);
    let l1 = level(&a, "l1");
    assert_eq!(l1.banks, 320);
    assert_close("L1 bytes", l1.capacity_bytes, 10_485_760.0, 1e-12);
    assert_close("L1 B/s", l1.bandwidth_bytes_per_s, 3.0028120e13, 0.01);
    let l2 = level(&a, "l2");
    assert_eq!(l2.banks, 192);
    assert_close("L2 bytes", l2.capacity_bytes, 6_291_456.0, 1e-12);
    assert_close("L2 B/s", l2.bandwidth_bytes_per_s, 2.3072858e12, 0.01);
    let m = &a.main_memory;
    assert_eq!(m.devices, 4);
    assert_eq!(m.links, 4096);
    assert_close(
        "DRAM bytes",
        m.capacity_bytes,
        16.0 * (1u64 << 30) as f64,
        1e-12,
    );
    assert_close("DRAM V", m.voltage_v, 1.4381877, 0.01);
    assert_close("DRAM rate", m.data_rate_bit_per_s, 1.939173066e9, 0.01);
    assert_close("DRAM B/s", m.bandwidth_bytes_per_s, 9.9285661e11, 0.01);
    // The reference solves the inter-node link below its own minimum voltage (defect 4);
    // stackflow clamps at the floor and powers fewer lanes. The power-limited bandwidth
    // agrees all the same.
    let n = a.inter_package.as_ref().unwrap();
    assert_close("inter B/s", n.bandwidth_bytes_per_s, 5.160543e10, 0.01);
    assert!(
        n.voltage_v >= 0.85,
        "inter-node link below its minimum voltage"
    );
    assert_eq!(n.bounds[0].limit, Limit::VoltageFloor);
    assert!(n.power_w.used <= n.power_w.allocated);
}

#[test]
fn oracle_o3_reproduced_within_1_percent() {
    let a = oracle("o3-budget.yaml");
    assert_close("peak", a.peak_flops_per_s, 1.2501932e14, 0.01);
    assert_close(
        "register B/s",
        level(&a, "l0").bandwidth_bytes_per_s,
        5.666155e15,
        0.01,
    );
    assert_close(
        "L1 B/s",
        level(&a, "l1").bandwidth_bytes_per_s,
        1.951872e15,
        0.01,
    );
    assert_close(
        "L2 B/s",
        level(&a, "l2").bandwidth_bytes_per_s,
        8.569919e13,
        0.01,
    );
    assert_close(
        "DRAM B/s",
        a.main_memory.bandwidth_bytes_per_s,
        9.9285661e11,
        0.01,
    );
    // A network with no budget has no bandwidth: exactly zero (reference defect 1).
    assert_eq!(a.inter_package.as_ref().unwrap().bandwidth_bytes_per_s, 0.0);
}

#[test]
fn oracle_o3_l1_gives_every_sm_its_own_bank_unlike_the_reference() {
    // The reference sizes the bundle-scope L1 crossbar as if every L1 bank were wired to all
    // 80 SMs (banks x bundles x 0.004 mm2), leaving 24 banks for 80 SMs: 56 SMs without any
    // shared memory. stackflow gives each SM its own L1 with a crossbar to its 8 tensor
    // cores: floor(8.3945 / (0.026214 + 8 x 0.004)) = 144 banks, 1 per SM -> 80 banks.
    let a = oracle("o3-budget.yaml");
    let l1 = level(&a, "l1");
    assert_eq!(l1.clients_per_instance, 8);
    assert_eq!(l1.instances, 80);
    assert_eq!(l1.banks_per_instance, 1);
    assert_eq!(l1.banks, 80);
    assert!(l1.area_mm2.used <= l1.area_mm2.allocated);
}

#[test]
fn oracle_o6_stays_within_its_10_watt_core_budget() {
    // The reference clamps V to 0.55 V and scales f, drawing 14.3 W from a 10 W budget
    // (defect 4). stackflow removes whole bundles at the minimum voltage instead (Sec. 4.4.1).
    let mut d = design("tests/oracle/o1-budget.yaml");
    d.core.power_share = 10.0 / 300.0;
    let a = generate(&d);
    assert!(
        a.core.power_w.used <= 10.0 + 1e-9,
        "{} W",
        a.core.power_w.used
    );
    assert!(a.core.voltage_v >= 0.55);
    assert_eq!(a.core.bounds[0].limit, Limit::VoltageFloor);
    assert_eq!(a.core.bundles, 41);
    assert!(a.peak_flops_per_s < 3.966258e13);
    assert!(a.feasible());
}

// ------------------------------------------------------------------ scaling law

#[test]
fn node_steps_raise_throughput_per_watt_by_the_stated_factor() {
    let techs = [
        "tech_libs/n7.yaml",
        "tech_libs/n5.yaml",
        "tech_libs/n3.yaml",
    ];
    // Iso-performance: the same bundle count at the same clock needs 1/1.3 the power per step.
    let base = with_tech("budgets/a100.yaml", techs[0]);
    let a0 = generate(&base);
    let mut previous = a0.peak_flops_per_s / a0.core.power_w.used;
    for (step, tech) in techs.iter().enumerate().skip(1) {
        let mut d = with_tech("budgets/a100.yaml", tech);
        let shrink = 1.8f64.powi(step as i32);
        d.core.area_share = base.core.area_share / shrink;
        d.core.power_share = base.core.power_share / 1.3f64.powi(step as i32);
        let a = generate(&d);
        assert_eq!(a.core.mcus, a0.core.mcus, "{tech}");
        assert_close(
            &format!("{tech} clock"),
            a.core.frequency_hz,
            a0.core.frequency_hz,
            1e-6,
        );
        let per_watt = a.peak_flops_per_s / a.core.power_w.used;
        assert_close(
            &format!("{tech} FLOP/s per W step"),
            per_watt / previous,
            1.3,
            1e-6,
        );
        previous = per_watt;
    }
    // Same budget: 1.8x the MCUs fit per step and throughput per watt rises at least 1.3x
    // (the extra units also run at a lower, more efficient voltage).
    let mut previous = generate(&with_tech("budgets/a100.yaml", techs[0]));
    for tech in &techs[1..] {
        let a = generate(&with_tech("budgets/a100.yaml", tech));
        assert_close(
            &format!("{tech} MCU ratio"),
            a.core.mcus as f64 / previous.core.mcus as f64,
            1.8,
            0.02,
        );
        let gain = (a.peak_flops_per_s / a.core.power_w.used)
            / (previous.peak_flops_per_s / previous.core.power_w.used);
        assert!(gain >= 1.3 - 1e-9, "{tech}: {gain}");
        previous = a;
    }
}

// ------------------------------------------------------------------ properties

fn assert_within_budget(a: &Architecture) {
    let mut all: Vec<(String, Usage)> = vec![
        ("core area".into(), a.core.area_mm2),
        ("core power".into(), a.core.power_w),
        ("dram area".into(), a.main_memory.area_mm2),
        ("dram node area".into(), a.main_memory.node_area_mm2),
        ("dram power".into(), a.main_memory.power_w),
        ("dram perimeter".into(), a.main_memory.perimeter_mm),
        ("chip area".into(), a.chip_area_mm2),
        ("chip power".into(), a.power_w),
        ("chip perimeter".into(), a.perimeter_mm),
    ];
    for l in &a.on_chip {
        all.push((format!("{} area", l.name), l.area_mm2));
        all.push((format!("{} power", l.name), l.power_w));
    }
    for n in [&a.intra_package, &a.inter_package].into_iter().flatten() {
        all.push(("network area".into(), n.area_mm2));
        all.push(("network power".into(), n.power_w));
        all.push(("network perimeter".into(), n.perimeter_mm));
    }
    for (what, u) in all {
        assert!(
            u.used <= u.allocated * (1.0 + 1e-9) + 1e-12,
            "{what}: {} > {}",
            u.used,
            u.allocated
        );
    }
    assert!(
        !a.violations
            .iter()
            .any(|v| matches!(v, stackflow::violation::Violation::OverBudget { .. })),
        "{:?}",
        a.violations
    );
}

/// Sets share `i` of a class (0 = core, 1.. = levels, then networks) in `d`.
fn shares_mut(d: &mut Design) -> Vec<(&mut f64, &mut f64)> {
    let mut v = vec![(&mut d.core.area_share, &mut d.core.power_share)];
    for l in &mut d.levels {
        v.push((&mut l.area_share, &mut l.power_share));
    }
    for n in [&mut d.intra_package, &mut d.inter_package]
        .into_iter()
        .flatten()
    {
        v.push((&mut n.area_share, &mut n.power_share));
    }
    v
}

const BUDGETS: [&str; 7] = [
    "budgets/v100.yaml",
    "budgets/a100.yaml",
    "budgets/h100.yaml",
    "budgets/tpu-v4.yaml",
    "budgets/fig4-example.yaml",
    "budgets/waferscale.yaml",
    "budgets/mcm.yaml",
];

/// Capability of every component, in a fixed order.
fn capabilities(a: &Architecture) -> Vec<f64> {
    let mut v = vec![a.peak_flops_per_s];
    v.extend(a.on_chip.iter().map(|l| l.bandwidth_bytes_per_s));
    v.push(a.memory_bandwidth_bytes_per_s);
    v.extend(
        [&a.intra_package, &a.inter_package]
            .into_iter()
            .flatten()
            .map(|n| n.bandwidth_bytes_per_s),
    );
    v
}

/// Largest bandwidth the leakage `static_w` could have bought in a component (used to bound
/// the capacity-for-bandwidth trade of memories given more area).
fn leakage_bandwidth(d: &Design, component: usize, static_w: f64) -> f64 {
    let level = &d.levels[component - 1];
    match &level.tech {
        LevelTech::OnChip(s) => static_w / s.dynamic_energy_per_bit_j / 8.0,
        LevelTech::OffChip(m) => {
            let e_min = m.energy_per_bit_j * m.voltage.energy_ratio(m.voltage.min_v);
            static_w / e_min / 8.0
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn frequency_rises_with_voltage(vt in 0.1f64..0.4, span in 0.2f64..0.6, a in 1.0f64..3.0, x in 0.0f64..1.0, dx in 1e-4f64..0.3) {
        let c = VoltageCurve { nominal_v: vt + span, threshold_v: vt, min_v: vt + 0.05, max_v: vt + span + 0.3, alpha: a };
        let v1 = c.min_v + x * (c.max_v - c.min_v);
        let v2 = v1 + dx;
        prop_assert!(c.frequency_ratio(v2) > c.frequency_ratio(v1));
        prop_assert!(c.power_ratio(v2) > c.power_ratio(v1));
    }

    #[test]
    fn every_component_fits_random_budgets(which in 0usize..7, raw in prop::collection::vec((0.0f64..1.0, 0.0f64..1.0), 8)) {
        let mut d = design(BUDGETS[which]);
        let mut shares = shares_mut(&mut d);
        let n = shares.len();
        let (sa, sp): (f64, f64) = raw.iter().take(n).fold((0.0, 0.0), |(x, y), (a, p)| (x + a, y + p));
        for (i, (area, power)) in shares.iter_mut().enumerate() {
            **area = raw[i].0 / sa.max(1.0);
            **power = raw[i].1 / sp.max(1.0);
        }
        let a = generate(&d);
        assert_within_budget(&a);
    }

    #[test]
    fn more_power_never_lowers_capability(which in 0usize..7, component in 0usize..8, p1 in 0.0f64..0.5, dp in 0.0f64..0.5) {
        let mut d = design(BUDGETS[which]);
        let n = shares_mut(&mut d).len();
        let component = component % n;
        *shares_mut(&mut d)[component].1 = p1;
        let before = capabilities(&generate(&d));
        *shares_mut(&mut d)[component].1 = p1 + dp;
        let after = capabilities(&generate(&d));
        prop_assert!(after[component] >= before[component] * (1.0 - 1e-12), "component {}: {} -> {}", component, before[component], after[component]);
    }

    #[test]
    fn more_area_never_lowers_capability_beyond_added_leakage(which in 0usize..7, component in 0usize..8, a1 in 0.0f64..0.3, da in 0.0f64..0.3) {
        let mut d = design(BUDGETS[which]);
        let n = shares_mut(&mut d).len();
        let component = component % n;
        *shares_mut(&mut d)[component].0 = a1;
        let first = generate(&d);
        *shares_mut(&mut d)[component].0 = a1 + da;
        let second = generate(&d);
        let (before, after) = (capabilities(&first)[component], capabilities(&second)[component]);
        let is_memory = component >= 1 && component <= d.levels.len();
        if is_memory {
            // Capacity never falls; bandwidth falls at most by what the added memory's leakage
            // could have bought (the capacity/bandwidth trade under a fixed power share).
            let cap = |a: &Architecture| if component <= a.on_chip.len() { a.on_chip[component - 1].capacity_bytes } else { a.memory_capacity_bytes };
            prop_assert!(cap(&second) >= cap(&first));
            let leak = |a: &Architecture| if component <= a.on_chip.len() {
                a.on_chip[component - 1].static_power_w
            } else {
                let m = &d.levels[component - 1];
                match &m.tech { LevelTech::OffChip(t) => a.main_memory.devices as f64 * t.device_static_power_w(), _ => 0.0 }
            };
            // Plus one bank's (device's) leakage: where leakage sets the count, what it
            // leaves (under one unit's leakage per instance) is all the access power.
            let unit_leak = match &d.levels[component - 1].tech {
                LevelTech::OnChip(s) => s.bank_static_power_w(),
                LevelTech::OffChip(t) => t.device_static_power_w(),
            };
            let slack = leakage_bandwidth(&d, component, (leak(&second) - leak(&first)).max(0.0) + unit_leak);
            prop_assert!(after >= before - slack * (1.0 + 1e-9) - 1e-6, "memory {}: {} -> {} (slack {})", component, before, after, slack);
        } else {
            prop_assert!(after >= before * (1.0 - 1e-12), "component {}: {} -> {}", component, before, after);
        }
    }
}

#[test]
fn zero_budget_gives_zero_capability() {
    for budget in BUDGETS {
        let mut d = design(budget);
        for (area, power) in shares_mut(&mut d) {
            *area = 0.0;
            *power = 0.0;
        }
        let a = generate(&d);
        assert!(
            capabilities(&a).iter().all(|&c| c == 0.0),
            "{budget}: {:?}",
            capabilities(&a)
        );
        assert_eq!(a.memory_capacity_bytes, 0.0);
        assert!(!a.feasible());
        // Power alone at zero also gives exactly zero.
        let mut d = design(budget);
        for (_, power) in shares_mut(&mut d) {
            *power = 0.0;
        }
        assert!(
            capabilities(&generate(&d)).iter().all(|&c| c == 0.0),
            "{budget}"
        );
    }
}

#[test]
fn leakage_beyond_the_power_share_means_zero_bandwidth_not_a_tiny_one() {
    let mut d = design("budgets/v100.yaml");
    d.levels[2].power_share = 1e-6; // 0.3 mW for 6 MiB of L2: not even its leakage
    let a = generate(&d);
    let l2 = &a.on_chip[2];
    assert_eq!(l2.bandwidth_bytes_per_s, 0.0);
    assert_eq!(l2.bounds[0].limit, Limit::StaticPower);
    assert!(l2.power_w.used <= l2.power_w.allocated);
}

/// Banks come in whole instances (V100's L1: 4 banks in each of 80 SMs). A power share
/// that leaks one bank short of the area's 320 builds 3 per SM, 240, and what their leakage
/// leaves, 79.5 banks' worth, buys accesses (DeepFlow Eq. 3); it bought none, and the level
/// had no bandwidth at all.
#[test]
fn power_left_by_whole_instances_of_banks_buys_bandwidth() {
    let mut d = design("budgets/v100.yaml");
    let LevelTech::OnChip(s) = d.levels[1].tech.clone() else {
        panic!()
    };
    let whole = generate(&d).on_chip[1].banks;
    let bank = s.bank_static_power_w();
    d.levels[1].power_share = (whole as f64 - 0.5) * bank / d.tdp_w;
    let l1 = &generate(&d).on_chip[1];
    let instances = l1.instances;
    assert_eq!(l1.banks, (whole - 1) / instances * instances);
    assert!(l1.banks < whole - 1, "{} of {whole}", l1.banks);
    assert_eq!(l1.bounds[0].limit, Limit::StaticPower);
    let left = (whole as f64 - 0.5 - l1.banks as f64) * bank;
    assert_close(
        "l1 bandwidth",
        l1.bandwidth_bytes_per_s,
        left / s.dynamic_energy_per_bit_j / 8.0,
        1e-9,
    );
    assert_close("l1 power", l1.power_w.used, l1.power_w.allocated, 1e-9);
}

/// Of the limits that allow as many whole devices, the tightest binds: A100's controller
/// area holds 5.04 HBM2e stacks and the package's room beside the die 5.22, both 5; the
/// room, listed first, was reported, though 1% less controller area loses a stack.
#[test]
fn the_tightest_of_tied_device_limits_binds() {
    let d = design("budgets/a100.yaml");
    let LevelTech::OffChip(dram) = d.levels.last().unwrap().tech.clone() else {
        panic!()
    };
    let m = generate(&d).main_memory;
    let by_controllers = m.area_mm2.allocated / dram.controller_phy_area_mm2;
    let by_room = m.node_area_mm2.allocated / dram.device_area_mm2;
    assert_eq!(by_controllers.floor(), by_room.floor());
    assert!(by_controllers < by_room, "{by_controllers} {by_room}");
    assert_eq!(m.devices as f64, by_controllers.floor());
    assert_eq!(m.bounds[0].limit, Limit::Area);
}

#[test]
fn on_chip_leakage_is_eq_2_banks_times_bank_leakage() {
    // DeepFlow Eq. 2: P_static = p_bit x N_banks x capacity_bank (plus controller leakage).
    let d = design("budgets/v100.yaml");
    let a = generate(&d);
    let LevelTech::OnChip(s) = &d.levels[0].tech else {
        panic!()
    };
    let per_bank =
        s.static_power_per_bit_w * s.bank_capacity_bytes * 8.0 + s.controller_power_per_bank_w;
    assert_close(
        "l0 static",
        a.on_chip[0].static_power_w,
        a.on_chip[0].banks as f64 * per_bank,
        1e-12,
    );
}

// ------------------------------------------------------------------ shipped files, CLI

#[test]
fn every_shipped_budget_generates_a_feasible_design_from_disk_and_embedded() {
    for (name, _) in SHIPPED.iter().filter(|(n, _)| n.starts_with("budgets/")) {
        let disk = generate(&design(name));
        assert!(disk.feasible(), "{name}: {:?}", disk.violations);
        let embedded = generate(
            &Design::load(DesignFiles {
                source: Source::Embedded,
                budget: Path::new(name),
                template: None,
                tech: None,
            })
            .unwrap(),
        );
        assert_eq!(disk.peak_flops_per_s, embedded.peak_flops_per_s, "{name}");
    }
}

#[test]
fn every_number_in_tech_libs_and_templates_cites_a_source() {
    for (name, text) in SHIPPED
        .iter()
        .filter(|(n, _)| n.starts_with("tech_libs/") || n.starts_with("templates/"))
    {
        for (i, line) in text.lines().enumerate() {
            let code = line.split('#').next().unwrap();
            let has_number = code
                .split(|c: char| c.is_whitespace() || ":,[]{}".contains(c))
                .any(|t| t.parse::<f64>().is_ok());
            let key = code.trim_start();
            let is_version = ["version:", "node:", "name:", "description:", "include:"]
                .iter()
                .any(|k| key.starts_with(k));
            if has_number && !is_version {
                assert!(
                    line.contains('#'),
                    "{name}:{}: number without a source comment: {line}",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn generate_without_arguments_uses_the_embedded_default_and_says_so() {
    let (code, out, _) = stackflow(&["generate"]);
    assert_eq!(code, 0);
    assert!(out.contains("embedded default budgets/h100.yaml"), "{out}");
    assert!(out.contains("feasible"));
}

#[test]
fn generate_json_has_the_stable_top_level_fields() {
    let (code, out, err) = stackflow(&["generate", "--budget", "budgets/a100.yaml", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "peak_flops_per_s",
        "memory_bandwidth_bytes_per_s",
        "memory_capacity_bytes",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert_close(
        "json peak",
        v["peak_flops_per_s"].as_f64().unwrap(),
        312e12,
        0.10,
    );
    assert!(v["core"]["area_mm2"]["allocated"].as_f64().is_some());
    assert!(v["main_memory"]["bounds"][0]["limit"].as_str().is_some());
}

// ------------------------------------------------------------------ bad input

fn v100_budget_text() -> String {
    let text = std::fs::read_to_string(root().join("budgets/v100.yaml")).unwrap();
    let templates = root().join("templates").display().to_string();
    let tech = root().join("tech_libs").display().to_string();
    text.replace("../templates", &templates)
        .replace("../tech_libs", &tech)
}

/// Runs `generate --budget` on a mutated V100 budget and checks exit code 2 and the message.
fn rejects(test: &str, from: &str, to: &str, expected: &[&str]) {
    let scratch = Scratch::new(test);
    let text = v100_budget_text();
    assert!(text.contains(from), "fixture lacks {from:?}");
    let path = scratch.write("budget.yaml", &text.replacen(from, to, 1));
    let (code, _, err) = stackflow(&["generate", "--budget", &path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&path), "error must name the file: {err}");
    for piece in expected {
        assert!(err.contains(piece), "expected {piece:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_unknown_field() {
    rejects(
        "unknown",
        "  tdp_w: 300",
        "  tdp_w: 300\n  boost: 1",
        &[
            "power",
            "unknown field `boost`",
            "expected `tdp_w` or `breakdown`",
        ],
    );
}

#[test]
fn bad_input_missing_field() {
    rejects(
        "missing",
        "  tdp_w: 300          # V100 SXM2 TDP (V100 datasheet)\n",
        "",
        &["power", "missing field `tdp_w`"],
    );
}

#[test]
fn bad_input_wrong_unit_key() {
    rejects(
        "unit",
        "  tdp_w: 300",
        "  tdp_kw: 0.3",
        &["unknown field `tdp_kw`", "`tdp_w`"],
    );
}

#[test]
fn bad_input_negative_value() {
    rejects(
        "negative",
        "  tdp_w: 300",
        "  tdp_w: -300",
        &["power.tdp_w = -300", "expected a number in [1e-6, 100000]"],
    );
    // No power, no design: a zero budget is bad input, not a chip of 0 FLOP/s.
    rejects(
        "zero-tdp",
        "  tdp_w: 300",
        "  tdp_w: 0",
        &["power.tdp_w = 0", "expected a number in [1e-6, 100000]"],
    );
}

#[test]
fn bad_input_nan_value() {
    rejects(
        "nan",
        "  chip_mm2: 815",
        "  chip_mm2: .nan",
        &["area.chip_mm2 = NaN", "expected a number in [1e-6, 100000]"],
    );
}

#[test]
fn bad_input_fraction_outside_unit_interval() {
    rejects(
        "fraction",
        "    core: 0.3745",
        "    core: 1.4",
        &[
            "power.breakdown.core = 1.4",
            "fractions must lie in [0, 1] and sum to at most 1",
        ],
    );
}

#[test]
fn bad_input_fractions_summing_above_one() {
    rejects(
        "sum",
        "    core: 0.3745",
        "    core: 0.9",
        &["power.breakdown = sum 1.4", "sum to at most 1"],
    );
}

#[test]
fn bad_input_budget_share_for_a_component_the_template_lacks() {
    rejects(
        "component",
        "    l1: 0.01143",
        "    l9: 0.01143",
        &[
            "area.breakdown.l9 = 0.01143",
            "a component of template 'gpu-v100'",
        ],
    );
}

#[test]
fn bad_input_template_naming_a_technology_the_library_lacks() {
    let scratch = Scratch::new("missing-tech");
    let template = std::fs::read_to_string(root().join("templates/gpu-v100.yaml"))
        .unwrap()
        .replace("technology: l2_sram", "technology: l9_sram");
    let tpath = scratch.write("template.yaml", &template);
    let (code, _, err) = stackflow(&[
        "generate",
        "--budget",
        "budgets/v100.yaml",
        "--template",
        &tpath,
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{tpath}: memory[2].technology = l9_sram")),
        "{err}"
    );
    assert!(
        err.contains("a sram component of technology library") && err.contains("l2_sram"),
        "{err}"
    );
}

#[test]
fn bad_input_unreadable_file() {
    let (code, _, err) = stackflow(&["generate", "--budget", "budgets/no-such-budget.yaml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("budgets/no-such-budget.yaml: cannot read file"),
        "{err}"
    );
}

#[test]
fn bad_input_in_a_technology_file_names_its_field_path() {
    let scratch = Scratch::new("bad-tech");
    let tech = std::fs::read_to_string(root().join("tech_libs/n12.yaml"))
        .unwrap()
        .replacen("min_v: 0.55", "min_v: 0.1", 1)
        .replace(
            "include: [dram.yaml, links.yaml]",
            &format!(
                "include: [{0}/dram.yaml, {0}/links.yaml]",
                root().join("tech_libs").display()
            ),
        );
    let path = scratch.write("n12.yaml", &tech);
    let (code, _, err) = stackflow(&["generate", "--budget", "budgets/v100.yaml", "--tech", &path]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!(
            "{path}: compute.systolic_array.voltage.min_v = 0.1"
        )) || err.contains(&format!("{path}: compute.tensor_core.voltage.min_v = 0.1")),
        "{err}"
    );
    assert!(err.contains("expected min_v > threshold_v"), "{err}");
}

/// Generates `budget` with `template` (a shipped file) edited from `from` to `to`: exit 2,
/// the error naming the edited file's `field` (its `path: field` prefix); returns the
/// error for the caller's further checks.
fn rejects_template(
    test: &str,
    template: &str,
    budget: &str,
    (from, to): (&str, &str),
    field: &str,
) -> String {
    let scratch = Scratch::new(test);
    let text = std::fs::read_to_string(root().join("templates").join(template))
        .unwrap()
        .replacen(from, to, 1);
    assert!(text.contains(to), "fixture lacks {from:?}");
    let path = scratch.write(template, &text);
    let (code, _, err) = stackflow(&["generate", "--budget", budget, "--template", &path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{path}: {field}")), "{err}");
    err
}

#[test]
fn bad_input_in_a_template_names_its_field_path() {
    let err = rejects_template(
        "bad-template",
        "tpu.yaml",
        "budgets/tpu-v4.yaml",
        ("idle_power_w: 90", "idle_power_w: -5"),
        "compute.idle_power_w = -5",
    );
    assert!(err.contains("> 0"), "{err}");
    let err = rejects_template(
        "bad-active-power",
        "tpu.yaml",
        "budgets/tpu-v4.yaml",
        ("active_power_w: 31", "active_power_w: -1"),
        "compute.active_power_w = -1",
    );
    assert!(err.contains(">= 0"), "{err}");
    // Bounded above: a floor past 100 kW per chip is refused, not carried to an infinite
    // energy.
    for (from, to, field) in [
        (
            "idle_power_w: 90",
            "idle_power_w: 1e6",
            "compute.idle_power_w = 1000000",
        ),
        (
            "active_power_w: 31",
            "active_power_w: 1e308",
            "compute.active_power_w",
        ),
    ] {
        let err = rejects_template(
            "huge-power",
            "tpu.yaml",
            "budgets/tpu-v4.yaml",
            (from, to),
            field,
        );
        assert!(err.contains("[0, 100000]"), "{err}");
    }
}

/// A chip whose idle and active power alone exceed its power budget cannot run anything:
/// the design is infeasible, with the floor named, and still reported (exit 0).
#[test]
fn a_power_floor_above_the_budget_is_infeasible() {
    let scratch = Scratch::new("floor-over-budget");
    let root = root();
    let text = std::fs::read_to_string(root.join("templates/tpu.yaml"))
        .unwrap()
        .replacen("idle_power_w: 90", "idle_power_w: 150", 1);
    let template = scratch.write("tpu.yaml", &text);
    let (code, out, err) = stackflow(&[
        "generate",
        "--budget",
        "budgets/tpu-v4.yaml",
        "--template",
        &template,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("power floor (compute.idle_power_w + compute.active_power_w): uses 181")
            && out.contains("of 170"),
        "{out}"
    );
    // At 90 W idle (the shipped 121 W floor) the same budget is feasible.
    let (code, out, _) = stackflow(&["generate", "--budget", "budgets/tpu-v4.yaml"]);
    assert_eq!(code, 0);
    assert!(!out.contains("power floor"), "{out}");
}

#[test]
fn a_collective_compute_share_outside_zero_to_one_is_refused_by_name() {
    let err = rejects_template(
        "bad-share",
        "gpu-h100.yaml",
        "budgets/h100.yaml",
        (
            "collective_compute_share: 0.08",
            "collective_compute_share: 1.5",
        ),
        "compute.collective_compute_share = 1.5",
    );
    assert!(err.contains("[0, 1)"), "{err}");
}

#[test]
fn a_stack_utilization_outside_zero_to_one_is_refused_by_name() {
    rejects_template(
        "bad-stack",
        "gpu-h100.yaml",
        "budgets/h100.yaml",
        ("memory_utilization: 0.80", "memory_utilization: 1.3"),
        "stack.memory_utilization = 1.3",
    );
}
