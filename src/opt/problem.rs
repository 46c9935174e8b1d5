//! The budget problem (DeepFlow Sec. 7): parameters are the shares of area, power and
//! perimeter given to each component of the accelerator; the objective is the log of the
//! predicted time per iteration of a fixed workload and strategy on a fixed system.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::Mutex;

use argmin::core::{CostFunction, Error, Gradient};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::simplex::{SimplexGroup, Simplices};
use super::PerThread;
use crate::config::{parse_yaml, Checker, ConfigError};
use crate::design::Design;
use crate::distributed::load::{Engine, Lengths, Load, Slo};
use crate::distributed::{predict, predict_with, DistPrediction, Plan, Workspace};
use crate::domain::Component;
use crate::error::ModelError;
use crate::generator::{generate, Architecture};
use crate::network::scale::Scaling;
use crate::network::System;
use crate::network::{Fabric, Network};
use crate::parallel::Strategy;
use crate::perf::Machine;
use crate::violation::Violation;
use crate::workload::Workload;

/// The three budgets a design splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Area,
    Power,
    Perimeter,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Area, Resource::Power, Resource::Perimeter];

    pub fn name(self) -> &'static str {
        match self {
            Resource::Area => "area",
            Resource::Power => "power",
            Resource::Perimeter => "perimeter",
        }
    }

    /// The unit one share of the resource is measured in.
    pub fn unit(self) -> &'static str {
        match self {
            Resource::Area => "mm2",
            Resource::Power => "W",
            Resource::Perimeter => "mm",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One parameter: the share of `resource` given to `component`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    pub resource: Resource,
    pub component: Component,
}

/// The components of a design that take a share of each resource, in parameter order.
pub fn layout(design: &Design) -> Vec<Share> {
    let mut out = Vec::new();
    let networks: Vec<Component> = [
        design
            .intra_package
            .as_ref()
            .map(|_| Component::IntraPackage),
        design
            .inter_package
            .as_ref()
            .map(|_| Component::InterPackage),
    ]
    .into_iter()
    .flatten()
    .collect();
    for resource in [Resource::Area, Resource::Power] {
        out.push(Share {
            resource,
            component: Component::Core,
        });
        for l in &design.levels {
            out.push(Share {
                resource,
                component: Component::Memory(l.name.clone()),
            });
        }
        for n in &networks {
            out.push(Share {
                resource,
                component: n.clone(),
            });
        }
    }
    if let Some(main) = design.levels.last() {
        out.push(Share {
            resource: Resource::Perimeter,
            component: Component::Memory(main.name.clone()),
        });
    }
    for n in &networks {
        out.push(Share {
            resource: Resource::Perimeter,
            component: n.clone(),
        });
    }
    out
}

/// The design's current shares, in `layout` order.
pub fn shares_of(design: &Design, layout: &[Share]) -> Vec<f64> {
    layout.iter().map(|s| get_share(design, s)).collect()
}

/// A copy of `design` with the shares `w` (in `layout` order).
pub fn with_shares(design: &Design, layout: &[Share], w: &[f64]) -> Design {
    let mut d = design.clone();
    for (s, &v) in layout.iter().zip(w) {
        *share_mut(&mut d, s) = v;
    }
    d
}

fn get_share(design: &Design, s: &Share) -> f64 {
    let mut d = design.clone();
    *share_mut(&mut d, s)
}

fn share_mut<'a>(d: &'a mut Design, s: &Share) -> &'a mut f64 {
    let pick = |area: &'a mut f64, power: &'a mut f64, perimeter: &'a mut f64| match s.resource {
        Resource::Area => area,
        Resource::Power => power,
        Resource::Perimeter => perimeter,
    };
    match &s.component {
        Component::Core => match s.resource {
            Resource::Area => &mut d.core.area_share,
            _ => &mut d.core.power_share,
        },
        Component::IntraPackage | Component::InterPackage => {
            let n = if s.component == Component::IntraPackage {
                d.intra_package.as_mut()
            } else {
                d.inter_package.as_mut()
            }
            .expect("layout lists only networks the design has");
            pick(
                &mut n.area_share,
                &mut n.power_share,
                &mut n.perimeter_share,
            )
        }
        Component::Memory(name) => {
            let l = d
                .levels
                .iter_mut()
                .find(|l| &l.name == name)
                .expect("layout lists only the design's levels");
            pick(
                &mut l.area_share,
                &mut l.power_share,
                &mut l.perimeter_share,
            )
        }
    }
}

/// User bounds on shares: `area: {core: {min: 0.2, max: 0.5}, dram: {fixed: 0.05}}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundsFile {
    pub version: Option<u32>,
    #[serde(default)]
    pub area: BTreeMap<String, BoundRaw>,
    #[serde(default)]
    pub power: BTreeMap<String, BoundRaw>,
    #[serde(default)]
    pub perimeter: BTreeMap<String, BoundRaw>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundRaw {
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub fixed: Option<f64>,
}

impl BoundsFile {
    pub fn from_yaml(file: &str, text: &str) -> Result<BoundsFile, ConfigError> {
        parse_yaml(file, text)
    }
}

/// Builds the feasible set for `layout` from optional user bounds; errors name the file,
/// the field and what was wrong (conflicting bounds, fixed parts above the whole budget).
pub fn feasible_set(
    layout: &[Share],
    bounds: Option<(&str, &BoundsFile)>,
) -> Result<Simplices, ConfigError> {
    let empty = BoundsFile::default();
    let (file, b) = bounds.unwrap_or(("(no bounds file)", &empty));
    let check = Checker { file };
    if let Some(v) = b.version {
        check.version(v)?;
    }
    let mut groups = Vec::new();
    for resource in Resource::ALL {
        let given = match resource {
            Resource::Area => &b.area,
            Resource::Power => &b.power,
            Resource::Perimeter => &b.perimeter,
        };
        let indices: Vec<usize> = (0..layout.len())
            .filter(|&i| layout[i].resource == resource)
            .collect();
        for name in given.keys() {
            if !indices.iter().any(|&i| layout[i].component.name() == name) {
                let valid: Vec<&str> = indices
                    .iter()
                    .map(|&i| layout[i].component.name())
                    .collect();
                return Err(ConfigError::invalid(
                    file,
                    format!("{resource}.{name}"),
                    name,
                    format!(
                        "a component with a {resource} share: one of [{}]",
                        valid.join(", ")
                    ),
                ));
            }
        }
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        for &i in &indices {
            let name = layout[i].component.name();
            let path = |k: &str| format!("{resource}.{name}.{k}");
            let (lo, hi) = match given.get(name) {
                None => (0.0, 1.0),
                Some(r) => {
                    if let Some(f) = r.fixed {
                        if r.min.is_some() || r.max.is_some() {
                            return Err(ConfigError::invalid(
                                file,
                                path("fixed"),
                                f,
                                "either fixed or min/max, not both",
                            ));
                        }
                        let f = check.within(&path("fixed"), f, 0.0, 1.0)?;
                        (f, f)
                    } else {
                        let lo = match r.min {
                            Some(v) => check.within(&path("min"), v, 0.0, 1.0)?,
                            None => 0.0,
                        };
                        let hi = match r.max {
                            Some(v) => check.within(&path("max"), v, 0.0, 1.0)?,
                            None => 1.0,
                        };
                        if lo > hi {
                            return Err(ConfigError::invalid(
                                file,
                                path("min"),
                                lo,
                                format!("at most max = {hi} (conflicting bounds)"),
                            ));
                        }
                        (lo, hi)
                    }
                }
            };
            lower.push(lo);
            upper.push(hi);
        }
        let least: f64 = lower.iter().sum();
        if least > 1.0 + 1e-12 {
            return Err(ConfigError::invalid(
                file,
                resource.name(),
                format!("{least:.4}"),
                "fixed and minimum shares that sum to at most 1 (the whole budget)",
            ));
        }
        if !indices.is_empty() {
            groups.push(SimplexGroup {
                name: resource.name().to_string(),
                indices,
                lower,
                upper,
                total: 1.0,
            });
        }
    }
    Simplices::new(groups, layout.len()).map_err(|e| ConfigError::invalid(file, "(bounds)", "", e))
}

/// One design evaluated.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub time_per_iteration_s: f64,
    /// `ln(time)` plus the penalties: what the optimizer minimises.
    pub objective: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
    #[serde(skip)]
    pub architecture: Architecture,
    /// `None` when the strategy cannot run on the design at all.
    #[serde(skip)]
    pub prediction: Option<DistPrediction>,
}

/// Time per iteration of a fixed workload and strategy as a function of the shares.
pub struct BudgetProblem {
    pub system: System,
    pub design: Design,
    pub devices: u64,
    pub workload: Workload,
    pub strategy: Strategy,
    pub layout: Vec<Share>,
    pub set: Simplices,
    /// Finite-difference step (share units). The generator counts whole compute units,
    /// banks and lanes, so the objective is a staircase at fine scales; half a percent of a
    /// budget spans several steps and gives a useful slope.
    pub step: f64,
    base_network: Network,
    /// Per thread of the pool, kernel-time workspaces of recent machines: designs that
    /// differ only in their networks (a network share's finite difference) have the same
    /// machine and reuse its kernel times. Never changes a result.
    workspaces: PerThread<Vec<Workspace>>,
    /// Per thread of the pool, a copy of `design` whose shares each evaluation sets (the
    /// other fields never change).
    designs: PerThread<Option<Design>>,
    /// Objectives computed, by strategy and shares (bit for bit): projected finite
    /// differences land on points already priced (a share held at its bound projects back),
    /// and restarts revisit points; about half of an optimization's evaluations. The other
    /// inputs are fixed once the problem is built. Never changes a result.
    objectives: Objectives,
    /// Objectives computed, by strategy and everything the objective reads of a design
    /// (see `price`): about a fifth of the distinct points of an optimization move no bank,
    /// lane or volt. Never changes a result.
    by_inputs: Objectives,
    /// What-if multipliers on every generated machine (identity unless a study asks).
    scaling: Scaling,
    /// A served transformer's goal: its "time" is device-seconds per request within the SLO.
    serving: Option<ServingGoal>,
}

/// What a budget serving a transformer is judged by: goodput per device within an SLO, in
/// the fluid steady state of a continuously batching engine ([`Engine::steady_goodput`];
/// smooth in the shares, where a simulated goodput is a staircase). The problem's "time" is
/// its inverse, device-seconds per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServingGoal {
    pub slo: Slo,
    /// The engine's batch cap, block size and memory share.
    pub policy: Load,
}

/// Objectives by strategy and a bit-for-bit key, shared by the threads; bounded.
#[derive(Default)]
struct Objectives(Mutex<FxHashMap<(Strategy, Vec<u64>), f64>>);

impl Objectives {
    fn get(&self, key: &(Strategy, Vec<u64>)) -> Option<f64> {
        self.0.lock().ok().and_then(|m| m.get(key).copied())
    }

    fn insert(&self, key: (Strategy, Vec<u64>), objective: f64) {
        if let Ok(mut kept) = self.0.lock() {
            if kept.len() >= OBJECTIVES_KEPT {
                kept.clear();
            }
            kept.insert(key, objective);
        }
    }
}

/// Machines whose workspaces a budget problem keeps.
const WORKSPACES_KEPT: usize = 8;

/// Objectives a budget problem keeps before it starts over.
const OBJECTIVES_KEPT: usize = 1 << 16;

/// Weight of the squared distance outside the feasible set, for solvers that leave it.
const OUTSIDE_WEIGHT: f64 = 1e3;

impl BudgetProblem {
    /// Errors when the strategy cannot run the workload at all (not a budget question).
    pub fn new(
        system: System,
        design: Design,
        devices: u64,
        workload: Workload,
        strategy: Strategy,
        set: Simplices,
    ) -> Result<BudgetProblem, ModelError> {
        let layout = layout(&design);
        let arch = generate(&design);
        let base_network = system.network(&arch, devices)?;
        strategy.check_devices(devices)?;
        if workload.serving().is_none() {
            predict(&workload, &arch, &base_network, &strategy)?;
        }
        Ok(BudgetProblem {
            system,
            design,
            devices,
            workload,
            strategy,
            layout,
            set,
            step: 5e-3,
            base_network,
            workspaces: PerThread::new(Vec::new),
            designs: PerThread::new(|| None),
            objectives: Objectives::default(),
            by_inputs: Objectives::default(),
            scaling: Scaling::default(),
            serving: None,
        })
    }

    /// The problem of a served transformer judged by `goal`: errors when its strategy cannot
    /// serve it on the base design (the weights do not fit, or the split does not divide).
    pub fn with_serving(mut self, goal: ServingGoal) -> Result<BudgetProblem, ModelError> {
        let Some((t, spec)) = self.workload.serving() else {
            return Err(ModelError::Fit(crate::distributed::FitError {
                strategy: self.strategy.to_string(),
                workload: self.workload.name(),
                message: "not a served workload (no `inference:`): a serving goal needs one".into(),
            }));
        };
        let arch = self.generate(&self.design);
        Engine::new(
            t,
            Lengths::from(spec),
            &arch,
            &self.base_network,
            &self.strategy,
            &goal.policy,
        )?;
        self.serving = Some(goal);
        Ok(self)
    }

    /// The serving goal, if the problem has one.
    pub fn serving(&self) -> Option<&ServingGoal> {
        self.serving.as_ref()
    }

    /// Device-seconds per request within the serving goal on `arch` and `net`, and what
    /// stops it (the design's own violations; an engine that cannot serve; an SLO that one
    /// sequence breaks).
    fn serve_time(
        &self,
        goal: &ServingGoal,
        arch: &Architecture,
        net: &Network,
        strategy: &Strategy,
    ) -> (f64, Vec<Violation>) {
        let Some((t, spec)) = self.workload.serving() else {
            return (
                f64::INFINITY,
                vec![Violation::CannotRun {
                    reason: "not a served workload".into(),
                }],
            );
        };
        let mut violations = arch.violations.clone();
        let engine = match Engine::new(t, Lengths::from(spec), arch, net, strategy, &goal.policy) {
            Ok(e) => e,
            Err(e) => {
                violations.push(Violation::CannotRun {
                    reason: e.to_string(),
                });
                return (f64::INFINITY, violations);
            }
        };
        match engine.steady_goodput(&goal.slo, spec.prompt_tokens, spec.output_tokens) {
            Ok(s) if s.requests_per_s > 0.0 => (self.devices as f64 / s.requests_per_s, violations),
            Ok(_) => (f64::INFINITY, violations),
            Err(why) => {
                violations.push(Violation::CannotRun {
                    reason: format!("the SLO cannot be kept: {why}"),
                });
                (f64::INFINITY, violations)
            }
        }
    }

    /// The problem with every machine it generates scaled (MAD Max Fig. 14's what-ifs):
    /// errors as `new` does when the strategy cannot run on the scaled base design.
    pub fn with_scaling(mut self, scaling: Scaling) -> Result<BudgetProblem, ModelError> {
        if scaling.is_identity() {
            return Ok(self);
        }
        self.scaling = scaling;
        let arch = self.generate(&self.design);
        self.base_network = self.base_network.rebuilt(self.fabrics(&arch)?);
        predict(&self.workload, &arch, &self.base_network, &self.strategy)?;
        Ok(self)
    }

    /// The accelerator a design generates, scaled.
    fn generate(&self, design: &Design) -> Architecture {
        let mut arch = generate(design);
        self.scaling.architecture(&mut arch);
        arch
    }

    /// The fabrics of `arch`'s system for the problem's devices, scaled.
    fn fabrics(&self, arch: &Architecture) -> Result<Vec<Fabric>, ConfigError> {
        let mut fabrics = self.system.fabrics_for(arch, self.devices)?;
        self.scaling.fabrics(&mut fabrics);
        Ok(fabrics)
    }

    /// The network of `arch`'s system for the problem's devices, scaled.
    pub fn network(&self, arch: &Architecture) -> Result<Network, ConfigError> {
        let net = self
            .system
            .network_like(arch, self.devices, &self.base_network)?;
        if self.scaling.is_identity() {
            return Ok(net);
        }
        Ok(net.rebuilt(self.fabrics(arch)?))
    }

    /// A workspace for `arch`'s machine: a kept one if a recent design had the same, else
    /// the oldest kept one moved to it (its graphs stay good), else a new one.
    fn workspace(&self, arch: &Architecture, machine: Machine) -> Workspace {
        let found = self.workspaces.with(|kept| {
            if let Some(i) = kept.iter().position(|w| *w.machine() == machine) {
                return Some(kept.swap_remove(i));
            }
            let mut oldest = (kept.len() >= WORKSPACES_KEPT).then(|| kept.remove(0))?;
            oldest.retarget(machine.clone());
            Some(oldest)
        });
        found.unwrap_or_else(|| Workspace::new(arch))
    }

    /// Hands a workspace back for the next design with its machine.
    fn keep(&self, ws: Workspace) {
        let evicted = self.workspaces.with(|kept| {
            kept.push(ws);
            (kept.len() > WORKSPACES_KEPT).then(|| kept.remove(0))
        });
        drop(evicted);
    }

    /// The starting shares: the design's own, projected onto the feasible set.
    pub fn initial(&self) -> Vec<f64> {
        self.set.project(&shares_of(&self.design, &self.layout))
    }

    /// Evaluates the design with shares `w` (taken as they are; see `cost` for points
    /// outside the feasible set).
    pub fn evaluate(&self, w: &[f64]) -> Evaluation {
        self.evaluate_with(w, &self.strategy)
    }

    /// As `evaluate`, under another strategy.
    pub fn evaluate_with(&self, w: &[f64], strategy: &Strategy) -> Evaluation {
        self.evaluate_design(&with_shares(&self.design, &self.layout, w), strategy)
    }

    /// Evaluates any variant of the problem's design (other totals, other shares).
    pub fn evaluate_design(&self, design: &Design, strategy: &Strategy) -> Evaluation {
        let arch = self.generate(design);
        if let Some(goal) = &self.serving {
            let (time, violations) = match self.network(&arch) {
                Ok(net) => self.serve_time(goal, &arch, &net, strategy),
                Err(e) => (
                    f64::INFINITY,
                    vec![Violation::CannotRun {
                        reason: e.to_string(),
                    }],
                ),
            };
            return Evaluation {
                time_per_iteration_s: time,
                objective: objective_of(time, &violations),
                feasible: violations.is_empty() && time.is_finite(),
                violations,
                architecture: arch,
                prediction: None,
            };
        }
        let prediction = self
            .network(&arch)
            .map_err(|e| e.to_string())
            .and_then(|net| {
                let mut ws = self.workspace(&arch, Machine::new(&arch));
                let p = predict_with(&self.workload, &arch, &net, strategy, &mut ws);
                self.keep(ws);
                p.map_err(|e| e.to_string())
            });
        let prediction = match prediction {
            Ok(p) => p,
            Err(e) => {
                return Evaluation {
                    time_per_iteration_s: f64::INFINITY,
                    objective: f64::INFINITY,
                    feasible: false,
                    violations: vec![Violation::CannotRun { reason: e }],
                    architecture: arch,
                    prediction: None,
                }
            }
        };
        let time = prediction.time_per_iteration_s;
        let objective = objective_of(time, &prediction.violations);
        Evaluation {
            time_per_iteration_s: time,
            objective,
            feasible: prediction.feasible && time.is_finite(),
            violations: prediction.violations.clone(),
            architecture: arch,
            prediction: Some(prediction),
        }
    }

    /// `evaluate_with(w, strategy).objective`, without the reports: the optimizer's inner
    /// loop. The design is the thread's copy of the problem's, with the shares `w` set.
    fn price(&self, w: &[f64], strategy: &Strategy) -> f64 {
        debug_assert_eq!(w.len(), self.layout.len(), "one share per layout entry");
        let arch = self.designs.with(|design| {
            let design = design.get_or_insert_with(|| self.design.clone());
            for (s, &v) in self.layout.iter().zip(w) {
                *share_mut(design, s) = v;
            }
            self.generate(design)
        });
        let Ok(fabrics) = self.fabrics(&arch) else {
            return f64::INFINITY;
        };
        let machine = Machine::new(&arch);
        // What the objective reads of a design without over-budget parts: its roofline,
        // memory capacity, embedding engines and fabrics (the workload and the system's
        // topology are the problem's). Shares that move none of them (a share no level
        // can turn into another bank, lane or volt) price alike.
        let inputs = arch.violations.is_empty().then(|| {
            let mut key = Vec::with_capacity(96);
            machine.fingerprint(&mut key);
            key.extend([
                arch.memory_capacity_bytes.to_bits(),
                arch.core.sparse_cores,
                fabrics.len() as u64,
            ]);
            for f in &fabrics {
                f.fingerprint(&mut key);
            }
            (*strategy, key)
        });
        if let Some(known) = inputs.as_ref().and_then(|k| self.by_inputs.get(k)) {
            return known;
        }
        let net = self.base_network.rebuilt(fabrics);
        if let Some(goal) = &self.serving {
            let (time, violations) = self.serve_time(goal, &arch, &net, strategy);
            let objective = objective_of(time, &violations);
            if let Some(k) = inputs {
                self.by_inputs.insert(k, objective);
            }
            return objective;
        }
        let mut ws = self.workspace(&arch, machine);
        let objective = match Plan::with(&self.workload, &arch, &net, strategy, &mut ws) {
            Ok(plan) => objective_of(plan.best_time_s(&net), plan.violations()),
            Err(_) => f64::INFINITY,
        };
        self.keep(ws);
        if let Some(k) = inputs {
            self.by_inputs.insert(k, objective);
        }
        objective
    }

    /// The accelerator and network at shares `w`, for a strategy search on that design.
    pub fn machine(&self, w: &[f64]) -> Result<(Architecture, Network), ModelError> {
        let arch = self.generate(&with_shares(&self.design, &self.layout, w));
        let net = self.network(&arch)?;
        Ok((arch, net))
    }

    /// The objective at a point of the feasible set.
    fn objective(&self, w: &[f64]) -> f64 {
        let key = (
            self.strategy,
            w.iter().map(|x| x.to_bits()).collect::<Vec<u64>>(),
        );
        if let Some(objective) = self.objectives.get(&key) {
            return objective;
        }
        let objective = self.price(w, &self.strategy);
        self.objectives.insert(key, objective);
        objective
    }
}

/// What the optimizer minimises: `ln(time)`, plus a smooth penalty in the memory excess
/// ratio (so the search can leave a design out of memory) and one per other violation.
fn objective_of(time_s: f64, violations: &[Violation]) -> f64 {
    let excess = violations
        .iter()
        .filter_map(Violation::memory_excess)
        .fold(1.0, f64::max)
        - 1.0;
    let others = violations
        .iter()
        .filter(|v| v.memory_excess().is_none())
        .count();
    if time_s.is_finite() && time_s > 0.0 {
        time_s.ln() + 5.0 * excess + 25.0 * excess * excess + others as f64
    } else {
        f64::INFINITY
    }
}

impl CostFunction for BudgetProblem {
    type Param = Vec<f64>;
    type Output = f64;

    /// The objective at the nearest feasible point, plus the squared distance to it: defined
    /// everywhere, so any argmin solver can run on the problem.
    fn cost(&self, w: &Self::Param) -> Result<f64, Error> {
        let p = self.set.project(w);
        let outside: f64 = p.iter().zip(w).map(|(a, b)| (a - b) * (a - b)).sum();
        Ok(self.objective(&p) + OUTSIDE_WEIGHT * outside)
    }
}

impl Gradient for BudgetProblem {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;

    /// Central finite differences, evaluated in parallel; one-sided where a neighbour is
    /// infeasible (a zero share that leaves the workload without bandwidth).
    fn gradient(&self, w: &Self::Param) -> Result<Vec<f64>, Error> {
        let h = self.step;
        let g = (0..w.len())
            .into_par_iter()
            .map(|i| {
                // The objective at the projected neighbours: the distance penalty of `cost`
                // would tilt every slope at the edge of the feasible set.
                let at = |d: f64| {
                    let mut x = w.clone();
                    x[i] += d;
                    self.objective(&self.set.project(&x))
                };
                let (up, down) = (at(h), at(-h));
                let here = || self.objective(&self.set.project(w));
                match (up.is_finite(), down.is_finite()) {
                    (true, true) => (up - down) / (2.0 * h),
                    (true, false) => (up - here()) / h,
                    (false, true) => (here() - down) / h,
                    (false, false) => 0.0,
                }
            })
            .collect::<Vec<f64>>();
        Ok(g.into_iter()
            .map(|x| if x.is_finite() { x } else { 0.0 })
            .collect())
    }
}
