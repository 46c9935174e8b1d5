//! Pathfinding studies (DeepFlow Sec. 9): a base design, axes over any field of its input
//! files, and per point a prediction, a budget optimization, a strategy search or both.
//! The grid is the product of the axes; every point is evaluated on its own, so any subset
//! (a shard, the points a resumed run still lacks) gives the same numbers.
//!
//! Owns: [`Study`] (a study file checked: axes over `system.`, `budget.`, `template.`,
//! `workload.` or `optimizer.` fields, `scale.` multipliers on the generated machine
//! ([`Scaling`]), or `edits` axes whose values each set several fields
//! at once (an ablation's variants); plots; optimizer settings) and the evaluation of one
//! point ([`PointResult`]); [`intensity`]: DeepFlow Fig. 1, one product's splits over many
//! devices. Writing results, plots and progress is the command line's. A new axis target:
//! a kind in `TARGETS` and its edit in `Study::inputs` (a file), `Study::point_settings`
//! (a setting) or `Study::point_scaling` (a multiplier).

pub mod intensity;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::config::raw::{
    StudyAction, StudyAvailability, StudyAxis, StudyCollective, StudyFile, StudyOptimizer,
    StudyPlot,
};
use crate::config::{edit_yaml, normalize, parse_yaml, Checker, ConfigError, Source};
use crate::design::Design;
use crate::distributed::DistPrediction;
use crate::error::ModelError;
use crate::generator::Architecture;
use crate::network::availability::{goodput, Pod};
use crate::network::collective::Collective;
use crate::network::scale::Scaling;
use crate::network::{Network, System};
use crate::opt::budget::{
    optimize_budgets, sensitivities, Finish, Settings, MAX_RESTARTS, MAX_STEPS,
};
use crate::opt::problem::{feasible_set, layout};
use crate::opt::search::layered;
use crate::opt::Progress;
use crate::opt::{co_optimize, search, BudgetProblem};
use crate::parallel::Strategy;
use crate::tech::TechLibrary;
use crate::template::Template;
use crate::violation::Violation;
use crate::workload::Workload;

/// What an axis can edit: the base files, and the optimizer settings.
const TARGETS: [&str; 8] = [
    "system",
    "budget",
    "template",
    "workload",
    "optimizer",
    "scale",
    "collective",
    "availability",
];

/// The actions that price the system alone (no workload, no strategy), by the base section
/// each reads and an example of it.
const SYSTEM_ACTIONS: [(StudyAction, &str, &str); 2] = [
    (
        StudyAction::Collective,
        "collective",
        "{kind: all_to_all, message_bytes: 1.0e5}",
    ),
    (
        StudyAction::Availability,
        "availability",
        "{pod_chips: 4096, slice_chips: 1024, host_availability: 0.995, switching: ocs}",
    ),
];

/// The collectives a `collective` study times, by their names in a study file.
const COLLECTIVES: [(&str, Collective); 4] = [
    ("all_reduce", Collective::AllReduce),
    ("all_to_all", Collective::AllToAll),
    ("all_gather", Collective::AllGather),
    ("reduce_scatter", Collective::ReduceScatter),
];

/// An availability point: the pod, the slice size, how often a host is up, and whether
/// optical circuit switches compose the slices.
struct Slices {
    pod: Pod,
    slice_chips: u64,
    host_availability: f64,
    ocs: bool,
}

/// The most points a study may have (the product of its axes' lengths): a million points
/// of a millisecond each are a quarter of an hour.
pub const MAX_POINTS: usize = 1_000_000;

/// The most devices a collective study prices in one group: an all-to-all's port loads
/// over switched fabrics take time quadratic in the devices (0.8 s at 16,384 on DGX A100
/// nodes).
const MAX_COLLECTIVE_DEVICES: u64 = 16_384;

/// The largest buffer a collective study times, bytes (1 PB).
const MAX_MESSAGE_BYTES: f64 = 1e15;

/// The columns of a study's `results.csv` after the index and the axes (an axis may not
/// take one of these names).
pub const RESULT_COLUMNS: [&str; 27] = [
    "baseline_strategy",
    "strategy",
    "initial_time_per_iteration_s",
    "initial_violations",
    "time_per_iteration_s",
    "speedup",
    "feasible",
    "peak_flops_per_s",
    "memory_bandwidth_bytes_per_s",
    "memory_capacity_bytes",
    "network_bandwidth_bytes_per_s",
    "local_bandwidth_bytes_per_s",
    "compute_s",
    "exposed_communication_s",
    "pipeline_bubble_s",
    "host_tables_s",
    "serving_latency_s",
    "bisection_bytes_per_s",
    "sparse_core_s",
    "memory_per_device_bytes",
    "samples_per_s",
    "goodput",
    "bound_by",
    "strategy_only_speedup",
    "budgets_only_speedup",
    "both_speedup",
    "error",
];

/// One edit a point makes: a field and the value it takes.
#[derive(Debug, Clone, Serialize)]
pub struct Edit {
    /// `system`, `budget`, `template`, `workload` or `optimizer`.
    pub target: String,
    /// Path inside that file (or the optimizer setting).
    pub path: String,
    pub value: serde_json::Value,
}

/// One axis, checked.
#[derive(Debug, Clone, Serialize)]
pub struct Axis {
    pub name: String,
    /// Per value of the axis, the edits it makes: one for a `field` axis, any number (all
    /// made together) for an `edits` axis.
    pub values: Vec<Vec<Edit>>,
    pub labels: Vec<String>,
}

/// A loaded, checked study.
/// What a study file says apart from its base files: its name, action, axes, plots and text.
/// Read from the text alone, it lays out, merges and plots results wherever the checkout is.
#[derive(Debug, Clone)]
pub struct Outline {
    /// The name the study was read by (error messages).
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    pub action: StudyAction,
    pub axes: Vec<Axis>,
    pub plots: Vec<StudyPlot>,
    /// The study file's text: shards of the same study must agree on it.
    pub text: String,
}

impl Outline {
    /// Reads a study's outline from its text (`file` names it in errors): the version, the
    /// axes and the plots checked, no base file read.
    pub fn parse(file: &str, text: String) -> Result<Outline, ConfigError> {
        Ok(Outline::read(file, text)?.0)
    }

    /// [`Outline::parse`], with the raw file for [`Study::load`].
    fn read(file: &str, text: String) -> Result<(Outline, StudyFile), ConfigError> {
        let file = file.to_string();
        let raw: StudyFile = parse_yaml(&file, &text)?;
        Checker { file: &file }.version(raw.version)?;
        if raw.axes.is_empty() {
            return Err(ConfigError::invalid(
                &file,
                "axes",
                "[]",
                "at least one axis with at least one value",
            ));
        }
        let axes = check_axes(&file, &raw.axes)?;
        let points = axes
            .iter()
            .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
            .filter(|&n| n <= MAX_POINTS);
        if points.is_none() {
            let lengths: Vec<String> = axes.iter().map(|a| a.values.len().to_string()).collect();
            return Err(ConfigError::invalid(
                &file,
                "axes",
                format!("{} values", lengths.join(" x ")),
                format!(
                    "at most {MAX_POINTS} points in all (the product of the axes' lengths); \
                     split the study into several"
                ),
            ));
        }
        check_plots(&file, &raw.plots, &axes, raw.action)?;
        if raw.action != StudyAction::Both {
            if let Some(i) = raw
                .plots
                .iter()
                .position(|p| p.kind == crate::config::raw::StudyPlotKind::GroupedBars)
            {
                return Err(ConfigError::invalid(
                    &file,
                    format!("plots[{i}].kind"),
                    "grouped_bars",
                    "grouped_bars (the co-optimization's three speedups) with action both; lines or bars otherwise",
                ));
            }
        }
        let outline = Outline {
            name: raw.name.clone(),
            description: raw.description.clone(),
            action: raw.action,
            axes,
            plots: raw.plots.clone(),
            file,
            text,
        };
        Ok((outline, raw))
    }

    /// The number of points: the product of the axes' lengths.
    pub fn len(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// Axis coordinates of point `index`; the last axis varies fastest.
    pub fn coords(&self, index: usize) -> Vec<usize> {
        let mut rest = index;
        let mut out = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            out[i] = rest % a.values.len();
            rest /= a.values.len();
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone)]
pub struct Study {
    /// Its name, action, axes, plots and text.
    pub outline: Outline,
    /// The study's optimizer settings (an `optimizer.` axis changes them per point).
    pub settings: Settings,
    optimizer: Option<StudyOptimizer>,
    pub devices: Option<u64>,
    pub strategy: Option<String>,
    system: (PathBuf, String),
    /// Absent only for a `collective` study.
    workload: Option<(PathBuf, String)>,
    collective: Option<StudyCollective>,
    availability: Option<StudyAvailability>,
    budget: Option<(PathBuf, String)>,
}

/// A file a study's results depend on ([`Study::base_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseFile {
    /// What it is to the study (`base.system`, `budget template`, ...).
    pub role: String,
    /// Where it was read, as resolved from the study's path.
    pub path: PathBuf,
    pub text: String,
}

/// Everything recorded about one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub index: usize,
    pub labels: Vec<String>,
    pub strategy: String,
    /// The strategy the point starts from: the study's, else the baseline
    /// ([`search::baseline`]: data parallelism with the least sharding that fits).
    pub baseline_strategy: String,
    /// Time per iteration at the base budget and strategy of the point.
    pub initial_time_per_iteration_s: Option<f64>,
    /// Why the starting design does not fit (empty when it fits). Without a time there is
    /// no speedup; with one, the ratio stays in the results and tables quote none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initial_violations: Vec<Violation>,
    /// After the point's action (equal to the initial time for `predict`).
    pub time_per_iteration_s: Option<f64>,
    pub speedup: Option<f64>,
    pub feasible: bool,
    pub violations: Vec<Violation>,
    pub peak_flops_per_s: f64,
    pub memory_bandwidth_bytes_per_s: f64,
    pub memory_capacity_bytes: f64,
    /// What a device sends into the outermost fabric, each way: its generated port, or the
    /// bandwidth the system pins.
    pub network_bandwidth_bytes_per_s: Option<f64>,
    /// What a device sends into the innermost fabric, each way (one fabric: the same as
    /// `network_bandwidth_bytes_per_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bandwidth_bytes_per_s: Option<f64>,
    pub compute_s: Option<f64>,
    pub exposed_communication_s: Option<f64>,
    pub pipeline_bubble_s: Option<f64>,
    /// The hosts' work per iteration on the embedding tables they keep in DDR (none kept:
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tables_s: Option<f64>,
    /// A served model's latency for one batch (training: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_latency_s: Option<f64>,
    /// The least bandwidth across any halving cut of the devices, each way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisection_bytes_per_s: Option<f64>,
    /// Time the embedding engines (SparseCores) are busy per iteration (none: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_core_s: Option<f64>,
    /// What one device holds at its peak (weights, gradients, optimizer state, activations,
    /// tables), whether or not it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_per_device_bytes: Option<f64>,
    /// Samples per second: per iteration's samples (sequences for language models, queries
    /// of a served batch) over the time per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_s: Option<f64>,
    /// An availability study's expected share of the pod's chips running slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// What sets the iteration time, the largest of its parts: `network: <the longest
    /// collective>` where the communication compute waits for exceeds the compute, `pipeline
    /// bubble`, else the kernel class taking most compute time and the resource bounding it
    /// (`gemm: dram`).
    pub bound_by: String,
    /// Budget shares after the action, in the design's layout order (`share_names`).
    pub shares: Vec<f64>,
    pub share_names: Vec<String>,
    /// Co-optimization steps (action `both`): speedups over the baseline.
    pub strategy_only_speedup: Option<f64>,
    pub budgets_only_speedup: Option<f64>,
    pub both_speedup: Option<f64>,
    /// Sensitivities at the result (actions `optimize` and `both`): % time per +1% budget.
    pub sensitivities: Vec<(String, Option<f64>)>,
    /// Why the point could not be evaluated at all.
    pub error: Option<String>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl Study {
    /// Loads a study and checks every axis value against its file before anything runs:
    /// unknown fields, wrong types or units, an empty grid are errors naming the field.
    pub fn load(path: &Path) -> Result<Study, ConfigError> {
        let file = path.display().to_string();
        let text = Source::Disk.read(path)?;
        let (outline, raw) = Outline::read(&file, text)?;
        let check = Checker { file: &file };
        let read = |field: &str, reference: &str| -> Result<(PathBuf, String), ConfigError> {
            let p = normalize(&Source::Disk.referenced(path, field, reference)?);
            let t = Source::Disk.read(&p)?;
            Ok((p, t))
        };
        let system = read("base.system", &raw.base.system)?;
        check_action_base(&file, &raw)?;
        let workload = raw
            .base
            .workload
            .as_deref()
            .map(|w| read("base.workload", w))
            .transpose()?;
        let budget = raw
            .base
            .budget
            .as_deref()
            .map(|b| read("base.budget", b))
            .transpose()?;
        let settings = study_settings(&check, &raw.optimizer)?;
        if !matches!(raw.action, StudyAction::Optimize | StudyAction::Both) {
            for (i, a) in outline.axes.iter().enumerate() {
                if let Some(e) = a.values.iter().flatten().find(|e| e.target == "optimizer") {
                    return Err(ConfigError::invalid(
                        &file,
                        format!("axes[{i}] ({})", a.name),
                        format!("optimizer.{}", e.path),
                        format!(
                            "optimizer fields only with action optimize or both (action {:?} runs no budget optimizer)",
                            raw.action
                        )
                        .to_lowercase(),
                    ));
                }
            }
        }
        if let Some(d) = raw.base.devices {
            check.count_in("base.devices", d, crate::network::system::MAX_DEVICES)?;
        }
        // MAD Max's notation needs the system's node size: checked with each point below.
        if let Some(s) = raw
            .base
            .strategy
            .as_ref()
            .filter(|s| !s.trim_start().starts_with('('))
        {
            Strategy::parse(s)
                .map_err(|e| ConfigError::invalid(&file, "base.strategy", s, e.to_string()))?;
        }
        let study = Study {
            outline,
            settings,
            optimizer: raw.optimizer,
            devices: raw.base.devices,
            strategy: raw.base.strategy,
            system,
            workload,
            collective: raw.base.collective,
            availability: raw.base.availability,
            budget,
        };
        // The base's own sections, as the base's: no axis value is to blame for them.
        if study.collective.is_some() || study.availability.is_some() {
            let (path, text) = &study.system;
            let system = System::from_yaml(&path.display().to_string(), text)?;
            if let Some(c) = &study.collective {
                study.collective_of(c, "base.collective")?;
            }
            if let Some(a) = &study.availability {
                study.slices(a, "base.availability", &system)?;
            }
        }
        // Every value on its own against the base: type and unit errors surface now.
        for (i, a) in study.outline.axes.iter().enumerate() {
            for k in 0..a.values.len() {
                let mut coords = vec![0; study.outline.axes.len()];
                coords[i] = k;
                let checked = study.inputs(&coords).and_then(|(system, _, workload)| {
                    let devices = study.devices.unwrap_or_else(|| system.default_devices());
                    let strategy = study.point_strategy(&coords, &system, devices)?;
                    if workload.is_some_and(|w| w.serving().is_some()) {
                        if strategy.is_none() {
                            return Err(serving_needs_strategy(&study.outline.file));
                        }
                        if matches!(
                            study.outline.action,
                            StudyAction::Optimize | StudyAction::Both
                        ) {
                            return Err(ConfigError::invalid(
                                &study.outline.file,
                                "action",
                                format!("{:?}", study.outline.action).to_lowercase(),
                                "predict or search for a served transformer (serving is priced \
                                 at its strategy: a search leaves it as it is, and no budget \
                                 optimization runs for it)",
                            ));
                        }
                    }
                    if study.outline.action == StudyAction::Collective
                        && devices > MAX_COLLECTIVE_DEVICES
                    {
                        return Err(ConfigError::invalid(
                            &study.outline.file,
                            "devices",
                            devices,
                            format!(
                                "at most {MAX_COLLECTIVE_DEVICES} devices in one collective (its \
                                 all-pairs port loads grow with the square of the devices)"
                            ),
                        ));
                    }
                    let scaling = study.point_scaling(&coords)?;
                    if scaling.inter_node != 1.0 && system.fabrics.len() < 2 {
                        return Err(ConfigError::invalid(
                            &study.outline.file,
                            "scale.inter_node",
                            crate::config::number(scaling.inter_node),
                            format!(
                                "a system with a fabric outside the innermost ({} has one: \
                                 scale.intra_node scales it)",
                                system.name
                            ),
                        ));
                    }
                    study.point_collective(&coords)?;
                    study.point_availability(&coords, &system)?;
                    study.point_settings(&coords)
                });
                checked.map_err(|e| {
                    // The point holds every other axis at its first value: the field the
                    // error names may be one of theirs.
                    // Only at the point of first values (any other point's values all
                    // passed there, so the value checked is to blame), and only when the
                    // checked edit does not itself name the field.
                    let own = study.outline.axes[i].values[k].iter().any(|edit| {
                        matches!(&e, ConfigError::Parse { path, .. }
                            | ConfigError::Invalid { path, .. } if *path == edit.path)
                    });
                    let (i, k) = if k == 0 && !own {
                        blamed_axis(&study.outline.axes, &coords, &e).unwrap_or((i, k))
                    } else {
                        (i, k)
                    };
                    let (a, edits) = (&study.outline.axes[i], &study.outline.axes[i].values[k]);
                    // The axis's own field unknown to its file (the parser stops at the
                    // path the axis edits, with a plain value there): the field is wrong,
                    // whatever its values. The parser's line is of the edited text.
                    if let (
                        Some(field),
                        [edit],
                        ConfigError::Parse {
                            file: base,
                            path,
                            message,
                        },
                    ) = (&raw.axes[i].field, edits.as_slice(), &e)
                    {
                        let scalar = !(edit.value.is_object() || edit.value.is_array());
                        if scalar && *path == edit.path && message.contains("unknown field") {
                            let message = message
                                .rfind(" at line ")
                                .map_or(message.as_str(), |at| &message[..at]);
                            return ConfigError::invalid(
                                &file,
                                format!("axes[{i}].field"),
                                field,
                                format!("a field {base} has ({path}: {message})"),
                            );
                        }
                    }
                    // A list index past the list's end (or into what is no list) is the
                    // field's fault too.
                    if let (
                        Some(field),
                        [edit],
                        ConfigError::Invalid {
                            file: base,
                            path,
                            expected,
                            ..
                        },
                    ) = (&raw.axes[i].field, edits.as_slice(), &e)
                    {
                        if *path == edit.path
                            && (expected.starts_with("an index of")
                                || expected.ends_with("is not a list"))
                        {
                            return ConfigError::invalid(
                                &file,
                                format!("axes[{i}].field"),
                                field,
                                format!("a field {base} has ({path}: {expected})"),
                            );
                        }
                    }
                    let (at, value) = match edits.as_slice() {
                        [one] if raw.axes[i].field.is_some() => {
                            (format!("axes[{i}].values[{k}]"), one.value.clone())
                        }
                        _ => (
                            format!("axes[{i}].edits[{k}]"),
                            serde_json::Value::Object(
                                edits
                                    .iter()
                                    .map(|e| {
                                        let field = if e.path.is_empty() {
                                            e.target.clone()
                                        } else {
                                            format!("{}.{}", e.target, e.path)
                                        };
                                        (field, e.value.clone())
                                    })
                                    .collect(),
                            ),
                        ),
                    };
                    ConfigError::invalid(
                        &file,
                        at,
                        value,
                        format!("a value {} accepts: {e}", a.name),
                    )
                })?;
            }
        }
        Ok(study)
    }

    /// The files a study's results depend on besides the study itself, each with the role
    /// it plays: the system, the budget (the study's or the system's), its template and
    /// technology file with what that includes, the workload, and workload files an axis
    /// swaps in. Shards and resumed runs compare them.
    pub fn base_files(&self) -> Result<Vec<BaseFile>, ConfigError> {
        let (sys_path, sys_text) = &self.system;
        let system = System::from_yaml(&sys_path.display().to_string(), sys_text)?;
        let (budget_role, budget_path) = match &self.budget {
            Some((p, _)) => ("base.budget", p.clone()),
            None => (
                "base.system's accelerator budget",
                normalize(
                    &Source::Disk.resolve(sys_path, &system.budget_file()?.display().to_string()),
                ),
            ),
        };
        let budget_text = Source::Disk.read(&budget_path)?;
        let budget = Budget::from_yaml(&budget_path.display().to_string(), &budget_text)?;
        let template =
            normalize(&Source::Disk.resolve(&budget_path, &budget.template.display().to_string()));
        let tech = normalize(
            &Source::Disk.resolve(&budget_path, &budget.technology.display().to_string()),
        );
        let file = |role: String, path: PathBuf| -> Result<BaseFile, ConfigError> {
            let text = Source::Disk.read(&path)?;
            Ok(BaseFile { role, path, text })
        };
        let mut out = vec![
            BaseFile {
                role: "base.system".into(),
                path: sys_path.clone(),
                text: sys_text.clone(),
            },
            BaseFile {
                role: budget_role.into(),
                path: budget_path,
                text: budget_text,
            },
            file("budget template".into(), template)?,
        ];
        for (i, path) in TechLibrary::files(Source::Disk, &tech)?
            .into_iter()
            .enumerate()
        {
            let role = if i == 0 {
                "budget technology".to_string()
            } else {
                format!("technology include {i}")
            };
            out.push(file(role, path)?);
        }
        if let Some((path, text)) = &self.workload {
            out.push(BaseFile {
                role: "base.workload".into(),
                path: path.clone(),
                text: text.clone(),
            });
        }
        // Workload files an axis swaps in.
        for (i, a) in self.outline.axes.iter().enumerate() {
            for k in 0..a.values.len() {
                let mut coords = vec![0; self.outline.axes.len()];
                coords[i] = k;
                if let Some((path, text)) = self.workload_file(&coords)? {
                    let role = format!("axes[{i}].values[{k}] workload");
                    out.push(BaseFile { role, path, text });
                }
            }
        }
        Ok(out)
    }

    /// Points in the grid (the product of the axis lengths).
    pub fn len(&self) -> usize {
        self.outline.len()
    }

    pub fn is_empty(&self) -> bool {
        self.outline.is_empty()
    }

    /// Axis coordinates of point `index`; the last axis varies fastest.
    pub fn coords(&self, index: usize) -> Vec<usize> {
        self.outline.coords(index)
    }

    pub fn labels(&self, index: usize) -> Vec<String> {
        self.coords(index)
            .iter()
            .zip(&self.outline.axes)
            .map(|(&k, a)| a.labels[k].clone())
            .collect()
    }

    /// The edited inputs of a point: system, design, workload (none for a `collective`
    /// study).
    fn inputs(&self, coords: &[usize]) -> Result<(System, Design, Option<Workload>), ConfigError> {
        let edit = |target: &str, file: &Path, text: &str| -> Result<String, ConfigError> {
            let mut t = text.to_string();
            for (a, &k) in self.outline.axes.iter().zip(coords) {
                // A whole-file swap is no edit inside the file.
                for e in a.values[k]
                    .iter()
                    .filter(|e| e.target == target && !e.path.is_empty())
                {
                    t = edit_yaml(&file.display().to_string(), &t, &e.path, &e.value)?;
                }
            }
            Ok(t)
        };
        let (sys_path, sys_text) = &self.system;
        let mut system = System::from_yaml(
            &sys_path.display().to_string(),
            &edit("system", sys_path, sys_text)?,
        )?;
        let budget_path = match &self.budget {
            Some((p, _)) => p.clone(),
            None => normalize(
                &Source::Disk.resolve(sys_path, &system.budget_file()?.display().to_string()),
            ),
        };
        let budget_text = match &self.budget {
            Some((_, t)) => t.clone(),
            None => Source::Disk.read(&budget_path)?,
        };
        system.accelerator = budget_path.clone();
        let budget = Budget::from_yaml(
            &budget_path.display().to_string(),
            &edit("budget", &budget_path, &budget_text)?,
        )?;
        let template_path =
            normalize(&Source::Disk.resolve(&budget_path, &budget.template.display().to_string()));
        let template_text = Source::Disk.read(&template_path)?;
        let template = Template::from_yaml(
            &template_path.display().to_string(),
            &edit("template", &template_path, &template_text)?,
        )?;
        let tech_path = normalize(
            &Source::Disk.resolve(&budget_path, &budget.technology.display().to_string()),
        );
        let tech = TechLibrary::load(Source::Disk, &tech_path)?;
        system.resolve_links(&tech)?;
        let design = Design::bind(&tech, &template, &budget)?;
        let Some((w_path, w_text)) = self
            .workload_file(coords)?
            .or_else(|| self.workload.clone())
        else {
            return Ok((system, design, None));
        };
        let workload = Workload::from_yaml(
            &w_path.display().to_string(),
            &edit("workload", &w_path, &w_text)?,
        )?;
        Ok((system, design, Some(workload)))
    }

    /// The strategy of a point: a `strategy` axis's, else the base's (`None`: the baseline).
    fn point_strategy(
        &self,
        coords: &[usize],
        system: &System,
        devices: u64,
    ) -> Result<Option<Strategy>, ConfigError> {
        let from_axis = self
            .outline
            .axes
            .iter()
            .zip(coords)
            .flat_map(|(a, &k)| a.values[k].iter())
            .find(|e| e.target == "strategy")
            .map(|e| {
                (
                    e.value.as_str().map(str::to_string),
                    "strategy",
                    e.value.clone(),
                )
            });
        let (text, at, value) = match (from_axis, &self.strategy) {
            (Some(found), _) => found,
            (None, Some(s)) => (Some(s.clone()), "base.strategy", s.as_str().into()),
            (None, None) => return Ok(None),
        };
        let fail = |message: String| ConfigError::invalid(&self.outline.file, at, &value, message);
        let Some(text) = text else {
            return Err(fail(
                "a strategy: a short form (t8-d16) or MAD Max's (INTRA, INTER)".into(),
            ));
        };
        let parsed = if text.trim_start().starts_with('(') {
            Strategy::from_madmax(&text, system.node_size(devices), devices)
        } else {
            Strategy::parse(&text)
        };
        parsed.map(Some).map_err(|e| fail(e.to_string()))
    }

    /// The workload file a point swaps in (a `workload` axis), read now: its path (relative
    /// to the study file) and text.
    fn workload_file(&self, coords: &[usize]) -> Result<Option<(PathBuf, String)>, ConfigError> {
        let swap = self
            .outline
            .axes
            .iter()
            .zip(coords)
            .flat_map(|(a, &k)| a.values[k].iter())
            .find(|e| e.target == "workload" && e.path.is_empty());
        let Some(e) = swap else {
            return Ok(None);
        };
        let Some(name) = e.value.as_str() else {
            return Err(ConfigError::invalid(
                &self.outline.file,
                "workload",
                &e.value,
                "a workload file's path, relative to the study",
            ));
        };
        let path =
            normalize(&Source::Disk.referenced(Path::new(&self.outline.file), "workload", name)?);
        let text = Source::Disk.read(&path)?;
        Ok(Some((path, text)))
    }

    /// The what-if multipliers of a point (`scale.` edits; none: the machine as generated).
    fn point_scaling(&self, coords: &[usize]) -> Result<Scaling, ConfigError> {
        let mut scaling = Scaling::default();
        for e in self
            .outline
            .axes
            .iter()
            .zip(coords)
            .flat_map(|(a, &k)| a.values[k].iter().filter(|e| e.target == "scale"))
        {
            let at = format!("scale.{}", e.path);
            let factor = e.value.as_f64().ok_or_else(|| {
                ConfigError::invalid(&self.outline.file, &at, &e.value, "a number (a multiplier)")
            })?;
            scaling.set(&e.path, factor).map_err(|expected| {
                ConfigError::invalid(&self.outline.file, &at, &e.value, expected)
            })?;
        }
        Ok(scaling)
    }

    /// `base` with a point's `target.` edits made (a section of the study file: the
    /// collective, the availability); `expected` says what its fields take.
    fn edited<T: Serialize + serde::de::DeserializeOwned>(
        &self,
        base: &T,
        target: &str,
        coords: &[usize],
        expected: &str,
    ) -> Result<T, ConfigError> {
        let mut raw = serde_json::to_value(base).unwrap_or_default();
        for e in self
            .outline
            .axes
            .iter()
            .zip(coords)
            .flat_map(|(a, &k)| a.values[k].iter().filter(|e| e.target == target))
        {
            raw[e.path.as_str()] = e.value.clone();
            serde_json::from_value::<T>(raw.clone()).map_err(|err| {
                ConfigError::invalid(
                    &self.outline.file,
                    format!("{target}.{}", e.path),
                    &e.value,
                    format!("{expected}: {err}"),
                )
            })?;
        }
        serde_json::from_value(raw).map_err(|err| {
            ConfigError::invalid(
                &self.outline.file,
                format!("base.{target}"),
                "",
                err.to_string(),
            )
        })
    }

    /// The pod, slice size and host availability of a point, and whether optical circuit
    /// switches compose its slices (an `availability` study; `None` otherwise): the base's,
    /// with its `availability.` edits made, checked against the system's blocks.
    fn point_availability(
        &self,
        coords: &[usize],
        system: &System,
    ) -> Result<Option<Slices>, ConfigError> {
        let Some(base) = &self.availability else {
            return Ok(None);
        };
        let a = self.edited(
            base,
            "availability",
            coords,
            "an availability field (pod_chips, slice_chips: counts; host_availability: a \
             probability; switching: ocs or static)",
        )?;
        self.slices(&a, "availability", system).map(Some)
    }

    /// `a` checked against `system`'s blocks; errors name `at` (`base.availability` for the
    /// base, `availability` for a point's edits).
    fn slices(
        &self,
        a: &StudyAvailability,
        at: &str,
        system: &System,
    ) -> Result<Slices, ConfigError> {
        let fail = |field: &str, value: serde_json::Value, expected: String| {
            ConfigError::invalid(&self.outline.file, format!("{at}.{field}"), value, expected)
        };
        let ocs = match a.switching.as_str() {
            "ocs" => true,
            "static" => false,
            other => {
                return Err(fail(
                    "switching",
                    other.into(),
                    "one of [ocs, static]".into(),
                ))
            }
        };
        if !(a.host_availability > 0.0 && a.host_availability <= 1.0) {
            return Err(fail(
                "host_availability",
                crate::config::number(a.host_availability).into(),
                "a probability above 0 and at most 1 (e.g. 0.995)".into(),
            ));
        }
        let pod = Pod::of(
            system,
            a.pod_chips,
            (&self.outline.file, &format!("{at}.pod_chips")),
        )?;
        if a.slice_chips == 0 || a.slice_chips % pod.block_chips != 0 || a.slice_chips > pod.chips {
            return Err(fail(
                "slice_chips",
                a.slice_chips.into(),
                format!(
                    "a multiple of the {}-chip block, at most the pod's {} chips",
                    pod.block_chips, pod.chips
                ),
            ));
        }
        Ok(Slices {
            pod,
            slice_chips: a.slice_chips,
            host_availability: a.host_availability,
            ocs,
        })
    }

    /// The collective of a point and each device's buffer (a `collective` study; `None`
    /// otherwise): the base's, with its `collective.` edits made.
    fn point_collective(&self, coords: &[usize]) -> Result<Option<(Collective, f64)>, ConfigError> {
        let Some(base) = &self.collective else {
            return Ok(None);
        };
        let c = self.edited(
            base,
            "collective",
            coords,
            "a collective's field (kind: a name; message_bytes: a number)",
        )?;
        self.collective_of(&c, "collective").map(Some)
    }

    /// `c` checked; errors name `at` (`base.collective` or `collective`).
    fn collective_of(
        &self,
        c: &StudyCollective,
        at: &str,
    ) -> Result<(Collective, f64), ConfigError> {
        let kind = COLLECTIVES
            .iter()
            .find(|(n, _)| *n == c.kind)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                ConfigError::invalid(
                    &self.outline.file,
                    format!("{at}.kind"),
                    &c.kind,
                    format!("one of [{}]", COLLECTIVES.map(|(n, _)| n).join(", ")),
                )
            })?;
        if !(c.message_bytes > 0.0 && c.message_bytes <= MAX_MESSAGE_BYTES) {
            return Err(ConfigError::invalid(
                &self.outline.file,
                format!("{at}.message_bytes"),
                crate::config::number(c.message_bytes),
                format!("a buffer of more than 0 and at most {MAX_MESSAGE_BYTES:e} bytes"),
            ));
        }
        Ok((kind, c.message_bytes))
    }

    /// The optimizer settings of a point: the study's, with its `optimizer.` edits made.
    fn point_settings(&self, coords: &[usize]) -> Result<Settings, ConfigError> {
        let edits: Vec<&Edit> = self
            .outline
            .axes
            .iter()
            .zip(coords)
            .flat_map(|(a, &k)| a.values[k].iter().filter(|e| e.target == "optimizer"))
            .collect();
        if edits.is_empty() {
            return Ok(self.settings);
        }
        let mut o = self.optimizer.clone().unwrap_or_default();
        for e in edits {
            let mut raw = serde_json::to_value(&o).unwrap_or_default();
            raw[e.path.as_str()] = e.value.clone();
            o = serde_json::from_value(raw).map_err(|err| {
                ConfigError::invalid(
                    &self.outline.file,
                    format!("optimizer.{}", e.path),
                    &e.value,
                    format!("an optimizer setting (restarts, steps, seed: counts; finish: one of [{}]): {err}", Finish::NAMES.join(", ")),
                )
            })?;
        }
        study_settings(
            &Checker {
                file: &self.outline.file,
            },
            &Some(o),
        )
    }

    /// Evaluates point `index`: its inputs, then the study's action.
    pub fn evaluate(&self, index: usize) -> PointResult {
        let labels = self.labels(index);
        let mut r = PointResult {
            index,
            labels,
            strategy: String::new(),
            baseline_strategy: String::new(),
            initial_time_per_iteration_s: None,
            initial_violations: Vec::new(),
            time_per_iteration_s: None,
            speedup: None,
            feasible: false,
            violations: Vec::new(),
            peak_flops_per_s: 0.0,
            memory_bandwidth_bytes_per_s: 0.0,
            memory_capacity_bytes: 0.0,
            network_bandwidth_bytes_per_s: None,
            local_bandwidth_bytes_per_s: None,
            compute_s: None,
            exposed_communication_s: None,
            pipeline_bubble_s: None,
            host_tables_s: None,
            serving_latency_s: None,
            bisection_bytes_per_s: None,
            sparse_core_s: None,
            memory_per_device_bytes: None,
            samples_per_s: None,
            goodput: None,
            bound_by: String::new(),
            shares: Vec::new(),
            share_names: Vec::new(),
            strategy_only_speedup: None,
            budgets_only_speedup: None,
            both_speedup: None,
            sensitivities: Vec::new(),
            error: None,
        };
        if let Err(e) = self.run(index, &mut r) {
            r.error = Some(format!("{e:#}"));
        }
        r
    }

    fn run(&self, index: usize, r: &mut PointResult) -> Result<(), ModelError> {
        let coords = self.coords(index);
        let (system, design, workload) = self.inputs(&coords)?;
        let settings = self.point_settings(&coords)?;
        let scaling = self.point_scaling(&coords)?;
        let devices = self.devices.unwrap_or_else(|| system.default_devices());
        if let Some((kind, bytes)) = self.point_collective(&coords)? {
            return time_collective(&system, &design, devices, scaling, kind, bytes, r);
        }
        if let Some(s) = self.point_availability(&coords, &system)? {
            let g = goodput(&s.pod, s.slice_chips, s.host_availability)?;
            r.strategy = format!(
                "slices of {} of {} chips, {}",
                s.slice_chips,
                s.pod.chips,
                if s.ocs { "OCS" } else { "static" }
            );
            r.baseline_strategy = r.strategy.clone();
            r.goodput = Some(if s.ocs { g.with_ocs } else { g.static_cabled });
            r.feasible = true;
            return Ok(());
        }
        let Some(workload) = workload else {
            return Err(ConfigError::invalid(
                &self.outline.file,
                "base.workload",
                "(none)",
                "a workload file (every action but collective and availability)",
            )
            .into());
        };
        if workload.serving().is_some() {
            let strategy = self.point_strategy(&coords, &system, devices)?;
            return serve_transformer(
                &self.outline.file,
                &system,
                &design,
                devices,
                scaling,
                &workload,
                strategy,
                r,
            );
        }
        let strategy = match self.point_strategy(&coords, &system, devices)? {
            Some(s) => s,
            None => {
                let (arch, net) = scaling.machine(&system, &design, devices)?;
                search::baseline(&workload, &arch, &net, devices).ok_or_else(|| {
                    ModelError::NoStrategy {
                        tried: search::enumerate(&workload, devices).map_or(0, |s| s.len()),
                        workload: workload.name().to_string(),
                        devices,
                    }
                })?
            }
        };
        let lay = layout(&design);
        let set = feasible_set(&lay, None)?;
        let mut problem = BudgetProblem::new(system, design, devices, workload, strategy, set)?
            .with_scaling(scaling)?;
        let start = problem.initial();
        let initial = problem.evaluate(&start);
        r.baseline_strategy = problem.strategy.to_string();
        r.initial_time_per_iteration_s = finite(initial.time_per_iteration_s);
        // Why the start does not fit, beside the ratio (MAD Max Fig. 8 compares against
        // FSDP even where it runs out of memory): tables quote no speedup then.
        r.initial_violations = initial.violations.clone();
        r.share_names = lay
            .iter()
            .map(|s| format!("{}.{}", s.resource, s.component))
            .collect();
        let quiet = Progress::none();
        // A per-layer-type search's starting points: the fastest uniform strategies that fit.
        let mut layered_starts = Vec::new();
        let (shares, strategy) = match self.outline.action {
            // Collective and availability studies returned above, having no workload.
            StudyAction::Predict | StudyAction::Collective | StudyAction::Availability => {
                (start, problem.strategy)
            }
            StudyAction::Optimize => {
                let b = optimize_budgets(&problem, &settings, &quiet)?;
                (b.best, problem.strategy)
            }
            StudyAction::Search | StudyAction::SearchPerLayerType => {
                let (arch, net) = problem.machine(&start)?;
                let node = problem.system.node_size(devices);
                let space =
                    search::enumerate_from(&problem.workload, devices, node, &problem.strategy)
                        .map_err(crate::opt::too_large)?;
                let found = search::search(
                    &problem.workload,
                    &arch,
                    &net,
                    &space,
                    Some(&problem.strategy),
                    &search::Settings::default(),
                    &quiet,
                );
                layered_starts = layered::starts(&found);
                let best = found.best.map(|c| c.parsed).unwrap_or(problem.strategy);
                (start, best)
            }
            StudyAction::Both => {
                let co = co_optimize(&mut problem, &settings, &quiet)?;
                r.strategy_only_speedup = co.strategy_only.speedup.and_then(finite);
                r.budgets_only_speedup = co.budgets_only.speedup.and_then(finite);
                r.both_speedup = co.both.speedup.and_then(finite);
                (co.both.shares.clone(), problem.strategy)
            }
        };
        problem.strategy = strategy;
        let e = problem.evaluate(&shares);
        let a = &e.architecture;
        r.strategy = strategy.to_string();
        r.time_per_iteration_s = finite(e.time_per_iteration_s);
        r.speedup = match (r.initial_time_per_iteration_s, r.time_per_iteration_s) {
            (Some(a), Some(b)) => Some(a / b),
            _ => None,
        };
        r.feasible = e.feasible;
        r.violations = e.violations.clone();
        // The fabrics as the prediction ran them: generated ports, or the bandwidths the
        // system pins (a pinned port takes no budget).
        record_machine(r, a, problem.network(a).ok().as_ref());
        if let Some(p) = &e.prediction {
            r.compute_s = finite(p.compute_s);
            r.exposed_communication_s = finite(p.exposed_communication_s);
            r.pipeline_bubble_s = finite(p.pipeline_bubble_s);
            r.host_tables_s = p.host_tables.as_ref().and_then(|h| finite(h.time_s));
            r.serving_latency_s = p.serving_latency_s.and_then(finite);
            r.sparse_core_s = (p.sparse_core_s > 0.0)
                .then_some(p.sparse_core_s)
                .and_then(finite);
            r.memory_per_device_bytes = finite(p.memory_per_device_bytes);
            r.samples_per_s = finite(problem.workload.graph().samples / e.time_per_iteration_s);
            r.bound_by = bound_by(p);
        }
        if matches!(
            self.outline.action,
            StudyAction::Optimize | StudyAction::Both
        ) {
            r.sensitivities = sensitivities(&problem, &shares)
                .into_iter()
                .map(|s| {
                    (
                        format!("{}.{}", s.resource, s.component),
                        // A probe across a cliff has no marginal value to report.
                        finite(s.percent_time_per_percent_budget).filter(|_| s.cliff.is_none()),
                    )
                })
                .collect();
        }
        if self.outline.action == StudyAction::SearchPerLayerType {
            let (arch, net) = problem.machine(&shares)?;
            let node = problem.system.node_size(problem.devices);
            let found =
                layered::search_layered(&problem.workload, &arch, &net, node, &layered_starts);
            // The split's gain is measured per layer type against the best uniform start
            // priced the same way (the two pricings differ by a few percent), then applied to
            // the uniform search's time: a "split" that gives every type the same strategy
            // gains nothing.
            let gain = match (&found.uniform, &found.best) {
                (Some(u), Some(b)) if b.feasible && b.strategy != u.strategy => {
                    u.time_per_iteration_s / b.time_per_iteration_s
                }
                _ => 1.0,
            };
            if let (Some(b), Some(t)) = (found.best.filter(|_| gain > 1.0), r.time_per_iteration_s)
            {
                let time = t / gain;
                r.strategy = b.strategy.clone();
                r.time_per_iteration_s = finite(time);
                r.speedup = r.initial_time_per_iteration_s.map(|a| a / time);
                r.feasible = true;
                r.violations.clear();
                let scale = time / b.time_per_iteration_s;
                // The busiest stage's compute: the schedule with free communication, less
                // its bubble.
                let compute =
                    b.time_per_iteration_s - b.exposed_communication_s - b.pipeline_bubble_s;
                r.exposed_communication_s = finite(b.exposed_communication_s * scale);
                r.pipeline_bubble_s = finite(b.pipeline_bubble_s * scale);
                r.compute_s = finite(compute * scale);
                r.host_tables_s = b.host_tables.as_ref().and_then(|h| finite(h.time_s));
                r.serving_latency_s = b.serving_latency_s.and_then(finite);
                // Not priced per layer type.
                r.sparse_core_s = None;
                r.memory_per_device_bytes = finite(b.memory_per_device_bytes);
                r.samples_per_s = finite(problem.workload.graph().samples / time);
                let part = if b.exposed_communication_s > compute.max(b.pipeline_bubble_s) {
                    "network"
                } else if b.pipeline_bubble_s > compute {
                    "pipeline bubble"
                } else {
                    "compute"
                };
                r.bound_by = format!("per layer type: {part}");
            }
        }
        r.shares = shares;
        Ok(())
    }
}

/// A served transformer's point (priced at its strategy: under `search` too, which leaves it
/// as it is; the load refuses `optimize` and `both`): the time the whole system takes to emit one batch's output tokens
/// (`batch x output_tokens` over its tokens per second) in `time_per_iteration_s`, a fixed
/// amount of work whatever the strategy, so speedups are throughput ratios; one request's
/// latency (its prefill, then a decode step per further token) in `serving_latency_s`;
/// requests per second in `samples_per_s`.
#[allow(clippy::too_many_arguments)]
fn serve_transformer(
    file: &str,
    system: &System,
    design: &Design,
    devices: u64,
    scaling: Scaling,
    workload: &Workload,
    strategy: Option<Strategy>,
    r: &mut PointResult,
) -> Result<(), ModelError> {
    let Some((t, spec)) = workload.serving() else {
        return Ok(());
    };
    let Some(strategy) = strategy else {
        return Err(serving_needs_strategy(file).into());
    };
    let (arch, net) = scaling.machine(system, design, devices)?;
    let p = crate::distributed::predict_inference(t, spec, &arch, &net, &strategy)?;
    let interval = (spec.batch * spec.output_tokens) as f64 / p.tokens_per_s;
    // The first token comes with the prefill; each further one takes a decode step.
    let steps = spec.output_tokens.saturating_sub(1) as f64;
    let decode = steps * p.time_per_output_token_s;
    r.strategy = strategy.to_string();
    r.baseline_strategy = r.strategy.clone();
    r.initial_time_per_iteration_s = finite(interval);
    r.time_per_iteration_s = finite(interval);
    r.speedup = finite(interval).map(|_| 1.0);
    r.feasible = p.feasible && interval.is_finite();
    r.violations = p.violations.clone();
    record_machine(r, &arch, Some(&net));
    r.exposed_communication_s =
        finite(p.prefill_communication_s + steps * p.decode_communication_s);
    r.serving_latency_s = finite(p.time_to_first_token_s + decode);
    r.memory_per_device_bytes = finite(p.memory_per_device_bytes);
    r.samples_per_s = finite(p.tokens_per_s / spec.output_tokens as f64);
    r.bound_by = if decode > p.time_to_first_token_s {
        "serving: decode".to_string()
    } else {
        "serving: prefill".to_string()
    };
    Ok(())
}

/// A point's machine columns: the accelerator's peak and main memory, and what a device
/// sends into the outermost and innermost fabrics and the bisection (no network: absent).
fn record_machine(r: &mut PointResult, arch: &Architecture, net: Option<&Network>) {
    r.peak_flops_per_s = arch.peak_flops_per_s;
    r.memory_bandwidth_bytes_per_s = arch.memory_bandwidth_bytes_per_s;
    r.memory_capacity_bytes = arch.memory_capacity_bytes;
    r.network_bandwidth_bytes_per_s =
        net.and_then(|n| n.fabrics.last().map(|f| f.egress_bytes_per_s));
    r.local_bandwidth_bytes_per_s =
        net.and_then(|n| n.fabrics.first().map(|f| f.egress_bytes_per_s));
    r.bisection_bytes_per_s = net.and_then(|n| finite(n.bisection_bytes_per_s()));
}

/// The axis value at `coords` whose edit the error `e` names (its field path, or the axis
/// target and path), if any: a point's error may be any of its axes' values.
fn blamed_axis(axes: &[Axis], coords: &[usize], e: &ConfigError) -> Option<(usize, usize)> {
    let path = match e {
        ConfigError::Parse { path, .. } | ConfigError::Invalid { path, .. } => path,
        _ => return None,
    };
    axes.iter().enumerate().find_map(|(j, a)| {
        let k = coords[j];
        a.values[k]
            .iter()
            .any(|edit| {
                !edit.path.is_empty()
                    && (*path == edit.path || *path == format!("{}.{}", edit.target, edit.path))
            })
            .then_some((j, k))
    })
}

/// Why a served transformer cannot be priced: no strategy.
fn serving_needs_strategy(file: &str) -> ConfigError {
    ConfigError::invalid(
        file,
        "strategy",
        "(none)",
        "a strategy for a served transformer (base.strategy or a strategy axis): serving is \
         priced at one strategy, not searched",
    )
}

/// A `collective` study's point: `kind` of `bytes` per device over all `devices` of the
/// system, as the model prices a group spanning them (every fabric the group crosses,
/// its phases one after another). The time goes in `time_per_iteration_s`.
fn time_collective(
    system: &System,
    design: &Design,
    devices: u64,
    scaling: Scaling,
    kind: Collective,
    bytes: f64,
    r: &mut PointResult,
) -> Result<(), ModelError> {
    let (arch, net) = scaling.machine(system, design, devices)?;
    // One group of every device: the strided form is priced without listing the group's
    // pairs (linear, not quadratic, in the devices).
    let (link, _) = net.strided_link(devices, 1);
    let t = link.time(kind, bytes);
    r.strategy = format!("{} of {bytes} B on {devices} devices", kind.name());
    r.baseline_strategy = r.strategy.clone();
    r.initial_time_per_iteration_s = finite(t);
    r.time_per_iteration_s = finite(t);
    r.speedup = finite(t).map(|_| 1.0);
    r.feasible = t.is_finite();
    record_machine(r, &arch, Some(&net));
    r.bound_by = format!("network: {}", kind.name());
    Ok(())
}

/// The base a study's action needs: a workload for every action that runs one; for an
/// action that prices the system alone ([`SYSTEM_ACTIONS`]), its own section and no
/// workload or strategy. A section's fields are axes only under its action.
fn check_action_base(file: &str, raw: &StudyFile) -> Result<(), ConfigError> {
    let fail = |at: String, value: &str, expected: String| {
        Err(ConfigError::invalid(file, at, value, expected))
    };
    let given = |key: &str| match key {
        "collective" => raw.base.collective.is_some(),
        "availability" => raw.base.availability.is_some(),
        other => unreachable!("SYSTEM_ACTIONS names {other} without its base section"),
    };
    let own = SYSTEM_ACTIONS.iter().find(|(a, _, _)| *a == raw.action);
    for (_, key, _) in SYSTEM_ACTIONS {
        if given(key) && own.map(|o| o.1) != Some(key) {
            return fail(
                format!("base.{key}"),
                "(given)",
                format!("no {key} unless the action is {key}"),
            );
        }
    }
    // Every field an axis sets, with where it sets it.
    let fields: Vec<(usize, &str)> = raw
        .axes
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            a.field
                .iter()
                .map(String::as_str)
                .chain(
                    a.edits
                        .iter()
                        .flatten()
                        .flat_map(|m| m.keys().map(String::as_str)),
                )
                .map(move |f| (i, f))
        })
        .collect();
    // base.devices is the device count of every point: an axis on the system file's own
    // `devices` would be read by nothing.
    if raw.base.devices.is_some() {
        if let Some((i, f)) = fields.iter().find(|(_, f)| *f == "system.devices") {
            return fail(
                format!("axes[{i}]"),
                f,
                "no system.devices axis beside base.devices (base.devices sets every point's \
                 count): drop base.devices to sweep the system's devices"
                    .into(),
            );
        }
    }
    let Some((_, key, example)) = own else {
        if raw.base.workload.is_none() {
            return fail("base.workload".into(), "(none)", "a workload file".into());
        }
        for (i, f) in &fields {
            if let Some((_, key, _)) = SYSTEM_ACTIONS
                .iter()
                .find(|(_, key, _)| f.starts_with(&format!("{key}.")))
            {
                return fail(
                    format!("axes[{i}]"),
                    f,
                    format!("{key} fields only with action {key}"),
                );
            }
        }
        return Ok(());
    };
    if !given(key) {
        return fail(
            format!("base.{key}"),
            "(none)",
            format!("the {key} the study prices: {example}"),
        );
    }
    if let Some(w) = &raw.base.workload {
        return fail(
            "base.workload".into(),
            w,
            format!("no workload with action {key} (it prices the system alone)"),
        );
    }
    if let Some(s) = &raw.base.strategy {
        return fail(
            "base.strategy".into(),
            s,
            format!("no strategy with action {key}"),
        );
    }
    // A collective reads only the fabrics of a machine; slices only the system's blocks.
    let (scales, uses) = match *key {
        "collective" => (
            &["scale.intra_node", "scale.inter_node"][..],
            "a system, budget, template, scale.intra_node, scale.inter_node or collective field",
        ),
        _ => (&[][..], "a system or availability field"),
    };
    let elsewhere = |f: &str| {
        f == "strategy"
            || f == "workload"
            || f.starts_with("workload.")
            || f.starts_with("optimizer.")
            || (f.starts_with("scale.") && !scales.contains(&f))
            || SYSTEM_ACTIONS
                .iter()
                .any(|(_, k, _)| k != key && f.starts_with(&format!("{k}.")))
    };
    if let Some((i, f)) = fields.iter().find(|(_, f)| elsewhere(f)) {
        return fail(
            format!("axes[{i}]"),
            f,
            format!("{uses} (action {key} prices the system alone: no workload, strategy, optimizer or other resources)"),
        );
    }
    Ok(())
}

/// What sets the iteration time (see [`PointResult::bound_by`]): the largest part of the
/// iteration ([`DistPrediction::binding`], as the search lists it), with what bounds it.
fn bound_by(p: &DistPrediction) -> String {
    match p.binding() {
        "communication" => {
            let longest = p
                .communication
                .iter()
                .max_by(|a, b| a.time_s.total_cmp(&b.time_s));
            format!("network: {}", longest.map_or("", |c| c.name.as_str()))
        }
        "compute" => p
            .compute
            .iter()
            .max_by(|a, b| a.time_s.total_cmp(&b.time_s))
            .map_or_else(String::new, |c| format!("{}: {}", c.class.name(), c.bound)),
        other => other.to_string(),
    }
}

/// How a value prints as a label: strings without quotes, file paths by their stem.
fn label_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => Path::new(s)
            .file_stem()
            .filter(|_| s.ends_with(".yaml"))
            .map_or_else(|| s.clone(), |x| x.to_string_lossy().into_owned()),
        other => other.to_string(),
    }
}

/// Checks the study's axes: a field of a base file (or of the optimizer) and its values,
/// or per value a mapping of such fields (`edits`); labels; unique names.
fn check_axes(file: &str, raw: &[StudyAxis]) -> Result<Vec<Axis>, ConfigError> {
    let file = file.to_string();
    let mut axes = Vec::new();
    for (i, a) in raw.iter().enumerate() {
        let at = |k: &str| format!("axes[{i}].{k}");
        let split = |field_at: String, field: &str| -> Result<(String, String), ConfigError> {
            match field.split_once('.') {
                // A multiplier names a resource the machine has.
                Some(("scale", rest)) if !Scaling::NAMES.contains(&rest) => {
                    Err(ConfigError::invalid(
                        &file,
                        field_at,
                        field,
                        format!("scale.<resource>, one of [{}]", Scaling::NAMES.join(", ")),
                    ))
                }
                Some((target, rest)) if TARGETS.contains(&target) && !rest.is_empty() => {
                    Ok((target.to_string(), rest.to_string()))
                }
                // The whole workload file: its values are paths (relative to the study).
                None if field == "workload" => Ok(("workload".to_string(), String::new())),
                // The strategy: short forms or MAD Max's (INTRA, INTER).
                None if field == "strategy" => Ok(("strategy".to_string(), String::new())),
                _ => Err(ConfigError::invalid(
                    &file,
                    field_at,
                    field,
                    format!(
                        "a field of one of the base files or the optimizer: {}, then its path (e.g. budget.technology, template.memory[3].technology, system.fabrics[0].bandwidth_gb_per_s, optimizer.restarts); scale.<resource>, a multiplier on the generated machine's {}; collective.kind or collective.message_bytes (action collective); availability.pod_chips, .slice_chips, .host_availability or .switching (action availability); or workload, the whole workload file; or strategy",
                        TARGETS[..5].iter().map(|t| format!("{t}.")).collect::<Vec<_>>().join(", "),
                        Scaling::NAMES.join(", ")
                    ),
                )),
            }
        };
        let (values, default_labels): (Vec<Vec<Edit>>, Vec<String>) =
            match (&a.field, &a.values, &a.edits) {
                (Some(field), Some(values), None) => {
                    let (target, path) = split(at("field"), field)?;
                    let edits = values
                        .iter()
                        .map(|v| {
                            vec![Edit {
                                target: target.clone(),
                                path: path.clone(),
                                value: v.clone(),
                            }]
                        })
                        .collect();
                    (edits, values.iter().map(label_of).collect())
                }
                (None, None, Some(edits)) => {
                    let mut out = Vec::new();
                    for (k, m) in edits.iter().enumerate() {
                        let mut one = Vec::new();
                        for (field, value) in m {
                            let (target, path) = split(format!("axes[{i}].edits[{k}]"), field)?;
                            one.push(Edit {
                                target,
                                path,
                                value: value.clone(),
                            });
                        }
                        out.push(one);
                    }
                    if a.labels.is_none() {
                        return Err(ConfigError::invalid(
                            &file,
                            at("labels"),
                            "(none)",
                            "one label per entry of edits",
                        ));
                    }
                    (out, Vec::new())
                }
                _ => return Err(ConfigError::invalid(
                    &file,
                    at("field"),
                    a.field.as_deref().unwrap_or("(none)"),
                    "either field and values, or edits (per value, a mapping of fields to values)",
                )),
            };
        if values.is_empty() {
            return Err(ConfigError::invalid(
                &file,
                at(if a.edits.is_some() { "edits" } else { "values" }),
                "[]",
                "at least one value (an empty axis empties the grid)",
            ));
        }
        let labels = match &a.labels {
            Some(l) if l.len() != values.len() => {
                return Err(ConfigError::invalid(
                    &file,
                    at("labels"),
                    l.len(),
                    format!("one label per value ({})", values.len()),
                ))
            }
            Some(l) => l.clone(),
            None => default_labels,
        };
        if a.name == "index" || RESULT_COLUMNS.contains(&a.name.as_str()) {
            return Err(ConfigError::invalid(
                &file,
                at("name"),
                &a.name,
                "a name that is not a column of the results (index, strategy, speedup, ...)",
            ));
        }
        if axes.iter().any(|b: &Axis| b.name == a.name) {
            return Err(ConfigError::invalid(
                &file,
                at("name"),
                &a.name,
                "a name no other axis has",
            ));
        }
        if let Some((k, l)) = labels
            .iter()
            .enumerate()
            .find(|(k, l)| labels[..*k].contains(l))
        {
            return Err(ConfigError::invalid(
                &file,
                format!("axes[{i}].labels[{k}]"),
                l,
                "a label no other value of the axis has (results are keyed by labels)",
            ));
        }
        // Two axes setting one field: the later would silently win.
        let fields = |edits: &[Vec<Edit>]| -> Vec<String> {
            edits
                .iter()
                .flatten()
                .map(|e| format!("{}.{}", e.target, e.path))
                .collect()
        };
        let ours = fields(&values);
        for (j, b) in axes.iter().enumerate() {
            if let Some(f) = fields(&b.values).into_iter().find(|f| ours.contains(f)) {
                return Err(ConfigError::invalid(
                    &file,
                    at("name"),
                    &a.name,
                    format!(
                        "axes that set different fields: axes[{j}] ({}) sets {f} too",
                        b.name
                    ),
                ));
            }
        }
        axes.push(Axis {
            name: a.name.clone(),
            values,
            labels,
        });
    }
    Ok(axes)
}

/// Checks that every plot names axes, that bar plots have no series, and that what a plot
/// draws is something the study's action produces.
fn check_plots(
    file: &str,
    plots: &[StudyPlot],
    axes: &[Axis],
    action: StudyAction,
) -> Result<(), ConfigError> {
    use crate::config::raw::StudyMetric as M;
    let file = file.to_string();
    for (i, p) in plots.iter().enumerate() {
        // What each action leaves empty: a plot of it would be blank.
        let produced = match action {
            StudyAction::Availability => p.y == M::Goodput,
            StudyAction::Collective => matches!(
                p.y,
                M::Speedup
                    | M::TimePerIterationS
                    | M::BisectionBytesPerS
                    | M::LocalToGlobalBandwidth
            ),
            _ => p.y != M::Goodput,
        };
        if !produced {
            return Err(ConfigError::invalid(
                &file,
                format!("plots[{i}].y"),
                p.y.name(),
                format!(
                    "a quantity action {} produces",
                    format!("{action:?}").to_lowercase()
                ),
            ));
        }
        if p.kind == crate::config::raw::StudyPlotKind::GroupedBars
            && p.y != crate::config::raw::StudyMetric::Speedup
        {
            return Err(ConfigError::invalid(
                &file,
                format!("plots[{i}].y"),
                p.y.name(),
                "speedup (grouped_bars draws the co-optimization's three speedups); another \
                 quantity with lines or bars",
            ));
        }
        use crate::config::raw::{StudyMetric, StudyPlotKind};
        if !matches!(p.kind, StudyPlotKind::Lines | StudyPlotKind::Pareto) && p.series.is_some() {
            return Err(ConfigError::invalid(
                &file,
                format!("plots[{i}].series"),
                p.series.as_deref().unwrap_or(""),
                "no series for bar plots (one bar group per x value; use panels)",
            ));
        }
        if p.kind == StudyPlotKind::Pareto
            && !matches!(p.y, StudyMetric::SamplesPerS | StudyMetric::ActionSpeedup)
        {
            return Err(ConfigError::invalid(
                &file,
                format!("plots[{i}].y"),
                p.y.name(),
                "samples_per_s or action_speedup (a pareto plot's fronts are of memory per \
                 device against a quantity where more is better)",
            ));
        }
        if let Some(over) = &p.over {
            let used = [Some(&p.x), p.series.as_ref(), p.panels.as_ref()];
            let values = axes
                .iter()
                .find(|a| &a.name == over)
                .map_or(0, |a| a.values.len());
            if p.kind != StudyPlotKind::Lines
                || p.y != StudyMetric::Speedup
                || used.contains(&Some(over))
                || values == 1
            {
                return Err(ConfigError::invalid(
                    &file,
                    format!("plots[{i}].over"),
                    over,
                    "an axis of two or more values the plot does not otherwise use, on a lines \
                     plot of the speedup",
                ));
            }
        }
        for (k, name) in [
            ("x", Some(&p.x)),
            ("series", p.series.as_ref()),
            ("panels", p.panels.as_ref()),
            ("over", p.over.as_ref()),
        ] {
            if let Some(name) = name {
                if !axes.iter().any(|a| &a.name == name) {
                    return Err(ConfigError::invalid(
                        &file,
                        format!("plots[{i}].{k}"),
                        name,
                        format!(
                            "an axis name: one of [{}]",
                            axes.iter()
                                .map(|a| a.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The optimizer settings of the study (defaults where it gives none).
fn study_settings(check: &Checker, raw: &Option<StudyOptimizer>) -> Result<Settings, ConfigError> {
    let defaults = Settings::default();
    let settings = match raw {
        None => defaults,
        Some(o) => Settings {
            restarts: o.restarts.map_or(Ok(defaults.restarts as u64), |v| {
                check.count_in("optimizer.restarts", v, MAX_RESTARTS)
            })? as usize,
            steps: o.steps.map_or(Ok(defaults.steps), |v| {
                check.count_in("optimizer.steps", v, MAX_STEPS)
            })?,
            seed: o.seed.unwrap_or(defaults.seed),
            finish: match &o.finish {
                None => defaults.finish,
                Some(f) => Finish::parse(f).ok_or_else(|| {
                    ConfigError::invalid(
                        check.file,
                        "optimizer.finish",
                        f,
                        format!("one of [{}]", Finish::NAMES.join(", ")),
                    )
                })?,
            },
            ..defaults
        },
    };
    Ok(settings)
}
