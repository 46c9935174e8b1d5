//! `stackflow sweep` and `stackflow merge`: evaluate a study's grid in parallel, a shard of
//! it, or what an interrupted run left; write CSV, JSON and SVG plots.
//!
//! An output folder holds `study.yaml` (the study it belongs to), `sweep.json` (its shard and
//! base files by role, path relative to the study and SHA-256: what `--resume` and `merge`
//! check), `points.jsonl` (one line per finished point, appended as points finish: the
//! journal a resumed run reads; rewritten in index order at the end), and the collected
//! `results.json`, `results.csv` and plots, rewritten atomically at the end. `merge` reads
//! only the folders: the study's outline comes from their `study.yaml`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Outcome;
use crate::config::raw::{StudyAction, StudyMetric, StudyPlot, StudyPlotKind};
use crate::config::write_atomic;
use crate::study::{Outline, PointResult, Study};
use anyhow::{bail, ensure, Context};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;

use super::plot::{distinct, FONT};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub struct Args {
    pub study: PathBuf,
    pub out: Option<PathBuf>,
    pub jobs: Option<usize>,
    pub shard: Option<String>,
    pub resume: bool,
    /// Print the results as JSON (as `results.json` holds them, with the counts).
    pub json: bool,
    /// `--report`: the sweep as one HTML page.
    pub report: Option<PathBuf>,
}

/// How many of the fastest feasible points the sweep's table shows.
const TABLE_ROWS: usize = 10;

/// `K/N`: the points whose index is K-1 modulo N.
fn parse_shard(text: &str) -> anyhow::Result<(usize, usize)> {
    let parsed = text.split_once('/').and_then(|(k, n)| {
        Some((
            k.trim().parse::<usize>().ok()?,
            n.trim().parse::<usize>().ok()?,
        ))
    });
    match parsed {
        Some((k, n)) if n >= 1 && (1..=n).contains(&k) => Ok((k, n)),
        _ => bail!(
            "--shard {text}: expected K/N with 1 <= K <= N (e.g. 1/4, 2/4, 3/4, 4/4 for four shards)"
        ),
    }
}

const JOURNAL: &str = "points.jsonl";

/// Reads the finished points of a journal; a last line without its newline (a run killed
/// mid-write) is dropped and the file cut back to the last whole line.
fn read_journal(path: &Path) -> anyhow::Result<BTreeMap<usize, PointResult>> {
    let mut out = BTreeMap::new();
    if !path.exists() {
        return Ok(out);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    if whole < text.len() {
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(whole as u64)?;
    }
    for (n, line) in text[..whole].lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: PointResult =
            crate::config::parse_json(&format!("{}: line {}", path.display(), n + 1), line)?;
        // What a point can hold: a time or a speed-up above 0, a goodput a share.
        let at = |field: &str| format!("{}: line {} ({field})", path.display(), n + 1);
        for (field, value) in [
            ("time_per_iteration_s", p.time_per_iteration_s),
            (
                "initial_time_per_iteration_s",
                p.initial_time_per_iteration_s,
            ),
            ("speedup", p.speedup),
        ] {
            if let Some(v) = value {
                ensure!(
                    v.is_finite() && v > 0.0,
                    "{} = {v}: expected a number > 0",
                    at(field)
                );
            }
        }
        if let Some(g) = p.goodput {
            ensure!(
                (0.0..=1.0).contains(&g),
                "{} = {g}: expected a share in [0, 1]",
                at("goodput")
            );
        }
        out.insert(p.index, p);
    }
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if let Some(path) = &args.report {
        super::output_file("--report", path)?;
    }
    let study = Study::load(&args.study)?;
    let total = study.len();
    let (k, n) = match &args.shard {
        Some(s) => parse_shard(s)?,
        None => (1, 1),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("sweep-{}", study.outline.name)));
    let journal = out.join(JOURNAL);
    let manifest = Manifest::of(&study, &args.study, (k, n))?;
    prepare_out(&args, &study, &manifest, &out, &journal)?;
    let done = read_journal(&journal)?;
    let mine: Vec<usize> = (0..total).filter(|i| i % n == k - 1).collect();
    let todo: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|i| !done.contains_key(i))
        .collect();
    let preamble = format!(
        "study {}: {} points{}, {} to evaluate{} ({}), results in {}",
        study.outline.name,
        total,
        if n > 1 {
            format!(", shard {k}/{n} holds {}", mine.len())
        } else {
            String::new()
        },
        todo.len(),
        if done.is_empty() {
            String::new()
        } else {
            format!(", {} already done", done.len())
        },
        format!("{:?}", study.outline.action).to_lowercase(),
        out.display()
    );
    if !args.json {
        println!("{preamble}");
    }
    evaluate_points(&study, &todo, &journal, args.jobs, args.json)?;
    let results: Vec<PointResult> = read_journal(&journal)?
        .into_values()
        .filter(|p| p.index % n == k - 1)
        .collect();
    let written = write_results(&study.outline, &out, &results)?;
    let summary = summarize(&study.outline, &results);
    if args.json {
        let mut value = serde_json::to_value(results_file(&study.outline, &results))?;
        value["out"] = out.display().to_string().into();
        value["counts"] = serde_json::to_value(Counts::of(&results))?;
        super::print_json(&value)?;
    } else {
        print!("{summary}");
    }
    if let Some(path) = &args.report {
        let title = format!("stackflow sweep: study {}", study.outline.name);
        let mut page = super::report::Report::new(&title, &super::command_line());
        let c = Counts::of(&results);
        page.headline(&format!(
            "{} points evaluated: {} feasible, {} infeasible, {} could not run; results in {}",
            c.evaluated,
            c.feasible,
            c.infeasible,
            c.could_not_run,
            out.display()
        ));
        if !written.plots.is_empty() {
            page.heading("Plots");
        }
        for svg in &written.plots {
            page.chart(svg, None);
        }
        page.text("Summary", &format!("{preamble}\n{summary}"));
        page.heading("Every point");
        page.csv("results.csv", &written.csv);
        let study_file = super::report::Input::Given("study", Some(&args.study));
        super::report::add_inputs(&mut page, &[study_file]);
        page.write(path)?;
    }
    Ok(if results.iter().any(|r| r.feasible) {
        Outcome::Done
    } else {
        Outcome::NothingFeasible
    })
}

/// What a sweep folder holds results of (`sweep.json`): the shard, the study's number of
/// points, and the base files by role, path relative to the study's folder and content hash.
/// Nothing in it depends on where the checkout or the folder sits, so shards run from
/// anywhere merge, and a resumed run names a base file that changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    /// The format of this file.
    version: u32,
    /// This folder holds the points whose index is `shard[0] - 1` modulo `shard[1]`.
    shard: [usize; 2],
    /// The study's points, all shards together.
    points: usize,
    inputs: Vec<InputRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct InputRecord {
    role: String,
    /// Relative to the study file's folder.
    file: String,
    sha256: String,
}

/// A sweep folder's manifest.
const MANIFEST: &str = "sweep.json";

impl Manifest {
    /// The manifest of shard `(k, n)` of `study`, read from `path`.
    fn of(study: &Study, path: &Path, (k, n): (usize, usize)) -> anyhow::Result<Manifest> {
        use sha2::{Digest, Sha256};
        // A study held in memory (the Python package's dict) sits in the working directory.
        let folder = std::path::absolute(path)
            .with_context(|| format!("resolving {}", path.display()))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let inputs = study
            .base_files()?
            .into_iter()
            .map(|f| {
                let file = relative(&folder, &std::path::absolute(&f.path)?);
                Ok(InputRecord {
                    role: f.role,
                    file: file.display().to_string(),
                    sha256: format!("{:x}", Sha256::digest(f.text.as_bytes())),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Manifest {
            version: 1,
            shard: [k, n],
            points: study.len(),
            inputs,
        })
    }

    /// Reads the manifest of sweep folder `dir`, checked against the study's `points`.
    fn read(dir: &Path, points: usize) -> anyhow::Result<Manifest> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (a sweep folder has one from its start; one by an earlier \
                 stackflow has none: run the sweep again)",
                path.display()
            )
        })?;
        let m: Manifest =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let [k, n] = m.shard;
        let file = path.display();
        ensure!(
            m.version == 1,
            "{file}: version = {}: expected 1",
            m.version
        );
        ensure!(
            n >= 1 && (1..=n).contains(&k),
            "{file}: shard = [{k}, {n}]: expected [K, N] with 1 <= K <= N"
        );
        ensure!(
            m.points == points,
            "{file}: points = {}: expected {points}, the points of the study beside it \
             (study.yaml)",
            m.points
        );
        Ok(m)
    }

    fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        write_atomic(&dir.join(MANIFEST), text.as_bytes())?;
        Ok(())
    }

    /// The point indices of this shard.
    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let [k, n] = self.shard;
        (0..self.points).filter(move |i| i % n == k - 1)
    }

    /// How the base files of `self` differ from `now`'s, one line per file.
    fn changed_inputs(&self, now: &Manifest) -> Vec<String> {
        let mut lines = Vec::new();
        for before in &self.inputs {
            match now.inputs.iter().find(|i| i.role == before.role) {
                None => lines.push(format!("{} ({}): no longer read", before.file, before.role)),
                Some(i) if i.file != before.file => {
                    lines.push(format!("{} ({}): now {}", before.file, before.role, i.file))
                }
                Some(i) if i.sha256 != before.sha256 => {
                    lines.push(format!("{} ({}): its content changed", i.file, i.role))
                }
                Some(_) => {}
            }
        }
        for i in &now.inputs {
            if !self.inputs.iter().any(|b| b.role == i.role) {
                lines.push(format!("{} ({}): newly read", i.file, i.role));
            }
        }
        lines
    }
}

/// `path` relative to `base` (both absolute), lexically: `..` for each folder of `base` that
/// `path` is not under.
fn relative(base: &Path, path: &Path) -> PathBuf {
    let (base, path) = (
        crate::config::normalize(base),
        crate::config::normalize(path),
    );
    let common = base
        .components()
        .zip(path.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in base.components().skip(common) {
        out.push("..");
    }
    for part in path.components().skip(common) {
        out.push(part);
    }
    out
}

/// Creates the output folder, checks any results there are this study's and this shard's on
/// the same base files, and records the study and its manifest.
fn prepare_out(
    args: &Args,
    study: &Study,
    manifest: &Manifest,
    out: &Path,
    journal: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let saved = out.join("study.yaml");
    if saved.exists() {
        let before = std::fs::read_to_string(&saved)?;
        ensure!(
            before == study.outline.text,
            "{} holds results of another study (its study.yaml differs from {}); use another --out",
            out.display(),
            args.study.display()
        );
    }
    if journal.exists() && !args.resume {
        bail!(
            "{} already holds results ({JOURNAL}); add --resume to finish them or use another --out",
            out.display()
        );
    }
    if journal.exists() || out.join(MANIFEST).exists() {
        let before = Manifest::read(out, study.len())?;
        ensure!(
            before.shard == manifest.shard,
            "{} holds shard {}/{} of the study, not {}/{}; use its --shard or another --out",
            out.display(),
            before.shard[0],
            before.shard[1],
            manifest.shard[0],
            manifest.shard[1]
        );
        let changed = before.changed_inputs(manifest);
        ensure!(
            changed.is_empty(),
            "{}: base files of the study changed since these results were computed:\n  {}\n\
             use another --out (or put the files back)",
            out.display(),
            changed.join("\n  ")
        );
    }
    write_atomic(&saved, study.outline.text.as_bytes())?;
    manifest.write(out)
}

/// Evaluates the points `todo` on `jobs` worker threads, appending each to the journal.
fn evaluate_points(
    study: &Study,
    todo: &[usize],
    journal: &Path,
    jobs: Option<usize>,
    quiet: bool,
) -> anyhow::Result<()> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(todo.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} points {elapsed}/{duration}")
            .expect("static template"),
    );
    let file = Mutex::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(journal)
            .with_context(|| format!("opening {}", journal.display()))?,
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.unwrap_or(0))
        .build()
        .context("starting the worker threads")?;
    let failed: Vec<anyhow::Error> = pool.install(|| {
        todo.par_iter()
            .filter_map(|&i| {
                let r = study.evaluate(i);
                let line = match serde_json::to_string(&r) {
                    Ok(l) => l + "\n",
                    Err(e) => return Some(anyhow::anyhow!("point {i}: {e}")),
                };
                // One write per line, in append mode: a line is whole or absent.
                let written = file
                    .lock()
                    .map_err(|_| anyhow::anyhow!("journal lock poisoned"))
                    .and_then(|mut f| {
                        f.write_all(line.as_bytes())?;
                        f.flush()?;
                        Ok(())
                    });
                bar.inc(1);
                written.err()
            })
            .collect()
    });
    bar.finish_and_clear();
    if let Some(e) = failed.into_iter().next() {
        return Err(e.context(format!("writing {}", journal.display())));
    }
    Ok(())
}

/// `stackflow merge`: joins the journals of shard folders into one result.
pub fn merge(dirs: &[PathBuf], out: &Path, allow_partial: bool, json: bool) -> anyhow::Result<()> {
    ensure!(!dirs.is_empty(), "merge needs at least one shard folder");
    ensure!(
        dirs.len() <= MAX_MERGED_FOLDERS,
        "{} folders: merge joins at most {MAX_MERGED_FOLDERS}",
        dirs.len()
    );
    // Each folder once, however it is spelled.
    let mut seen = Vec::new();
    let mut folders = Vec::new();
    for d in dirs {
        let key = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        if !seen.contains(&key) {
            seen.push(key);
            folders.push(d.as_path());
        }
    }
    // A folder whose sweep never started (no study.yaml or sweep.json yet) is a gap.
    let mut gaps = Vec::new();
    let mut read = Vec::new();
    for d in &folders {
        match read_folder(d) {
            Ok(r) => read.push((*d, r)),
            Err(e) if allow_partial => {
                gaps.push(format!("{}: {}", d.display(), super::describe(&e)))
            }
            Err(e) => return Err(e),
        }
    }
    let Some((first_dir, (text, outline, expected))) = read.first().cloned() else {
        bail!("no folder given holds a sweep:\n  {}", gaps.join("\n  "));
    };
    let n = expected.shard[1];
    if n > 1 {
        let target = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_path_buf());
        ensure!(
            !seen.contains(&target),
            "--out {}: a shard folder; merge into a folder of its own",
            out.display()
        );
    }
    let mut all: BTreeMap<usize, PointResult> = BTreeMap::new();
    let mut held: BTreeMap<usize, &Path> = BTreeMap::new();
    for (d, (t, _, m)) in &read {
        ensure!(
            *t == text,
            "{} holds another study than {}",
            d.display(),
            first_dir.display()
        );
        let [k, this_n] = m.shard;
        ensure!(
            this_n == n,
            "{} holds shard {k}/{this_n} and {} holds shard {}/{n}: the shards of one run share N",
            d.display(),
            first_dir.display(),
            expected.shard[0]
        );
        let changed = expected.changed_inputs(m);
        ensure!(
            changed.is_empty(),
            "{} ran on other base files than {}:\n  {}",
            d.display(),
            first_dir.display(),
            changed.join("\n  ")
        );
        if let Some(other) = held.insert(k, d) {
            bail!(
                "{} and {} both hold shard {k}/{n}",
                other.display(),
                d.display()
            );
        }
        let journal = read_journal(&d.join(JOURNAL))?;
        for (i, p) in &journal {
            ensure!(
                i % n == k - 1 && *i < m.points,
                "{}: point {i} is not one of shard {k}/{n}'s",
                d.display()
            );
            if let Some(q) = all.get(i) {
                ensure!(q == p, "point {i} differs between shards");
            }
        }
        let missing = m.indices().filter(|i| !journal.contains_key(i)).count();
        if missing > 0 {
            gaps.push(format!(
                "{}: shard {k}/{n} lacks {missing} of its {} points (finish it with `stackflow \
                 sweep STUDY --shard {k}/{n} --out {} --resume`)",
                d.display(),
                m.indices().count(),
                d.display()
            ));
        }
        all.extend(journal);
    }
    for k in (1..=n).filter(|k| !held.contains_key(k)) {
        gaps.push(format!("shard {k}/{n}: no folder given holds it"));
    }
    let missing = expected.points - all.len();
    if !gaps.is_empty() && !allow_partial {
        bail!(
            "the folders hold {} of the study's {} points ({missing} missing):\n  {}\n\
             (--allow-partial merges what there is)",
            all.len(),
            expected.points,
            gaps.join("\n  ")
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    write_atomic(&out.join("study.yaml"), text.as_bytes())?;
    Manifest {
        shard: [1, 1],
        ..expected
    }
    .write(out)?;
    let results: Vec<PointResult> = all.into_values().collect();
    write_results(&outline, out, &results)?;
    if json {
        let mut value = serde_json::to_value(results_file(&outline, &results))?;
        value["out"] = out.display().to_string().into();
        value["merged_folders"] = read.len().into();
        value["missing_points"] = missing.into();
        value["counts"] = serde_json::to_value(Counts::of(&results))?;
        super::print_json(&value)?;
        return Ok(());
    }
    println!(
        "merged {} folders: {} of {} points{}, results in {}",
        read.len(),
        results.len(),
        outline.len(),
        if missing > 0 {
            format!(" ({missing} missing)")
        } else {
            String::new()
        },
        out.display()
    );
    Ok(())
}

/// A sweep folder's study text, its outline and its manifest (checked against the study).
fn read_folder(dir: &Path) -> anyhow::Result<(String, Outline, Manifest)> {
    let path = dir.join("study.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is {} a sweep folder?)",
            path.display(),
            dir.display()
        )
    })?;
    let outline = Outline::parse(&path.display().to_string(), text.clone())?;
    let manifest = Manifest::read(dir, outline.len())?;
    Ok((text, outline, manifest))
}

/// The most folders one `merge` joins.
pub const MAX_MERGED_FOLDERS: usize = 65_536;

#[derive(Serialize)]
struct ResultsFile<'a> {
    study: &'a str,
    description: Option<&'a str>,
    action: String,
    axes: Vec<(&'a str, &'a [String])>,
    points: &'a [PointResult],
}

/// A sweep's results as `results.json` holds them.
fn results_file<'a>(study: &'a Outline, results: &'a [PointResult]) -> ResultsFile<'a> {
    ResultsFile {
        study: &study.name,
        description: study.description.as_deref(),
        action: format!("{:?}", study.action).to_lowercase(),
        axes: study
            .axes
            .iter()
            .map(|a| (a.name.as_str(), a.labels.as_slice()))
            .collect(),
        points: results,
    }
}

fn write_results(study: &Outline, out: &Path, results: &[PointResult]) -> anyhow::Result<Written> {
    // The journal in index order: a folder's files depend on its points, not on the order
    // its workers finished them.
    let journal: String = results
        .iter()
        .map(|r| serde_json::to_string(r).map(|l| l + "\n"))
        .collect::<Result<_, _>>()?;
    write_atomic(&out.join(JOURNAL), journal.as_bytes())?;
    let file = results_file(study, results);
    write_atomic(
        &out.join("results.json"),
        serde_json::to_string_pretty(&file)?.as_bytes(),
    )?;
    let mut csv = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = vec!["index".into()];
    header.extend(study.axes.iter().map(|a| a.name.clone()));
    header.extend(crate::study::RESULT_COLUMNS.map(String::from));
    csv.write_record(&header)?;
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    for r in results {
        let mut row = vec![r.index.to_string()];
        row.extend(r.labels.iter().cloned());
        row.extend([
            r.baseline_strategy.clone(),
            r.strategy.clone(),
            opt(r.initial_time_per_iteration_s),
            r.initial_violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; "),
            opt(r.time_per_iteration_s),
            opt(r.speedup),
            r.feasible.to_string(),
            r.peak_flops_per_s.to_string(),
            r.memory_bandwidth_bytes_per_s.to_string(),
            r.memory_capacity_bytes.to_string(),
            opt(r.network_bandwidth_bytes_per_s),
            opt(r.local_bandwidth_bytes_per_s),
            opt(r.compute_s),
            opt(r.exposed_communication_s),
            opt(r.pipeline_bubble_s),
            opt(r.host_tables_s),
            opt(r.serving_latency_s),
            opt(r.bisection_bytes_per_s),
            opt(r.sparse_core_s),
            opt(r.memory_per_device_bytes),
            opt(r.samples_per_s),
            opt(r.goodput),
            r.bound_by.clone(),
            opt(r.strategy_only_speedup),
            opt(r.budgets_only_speedup),
            opt(r.both_speedup),
            r.error.clone().unwrap_or_default(),
        ]);
        csv.write_record(&row)?;
    }
    let csv = String::from_utf8(csv.into_inner()?)?;
    write_atomic(&out.join("results.csv"), csv.as_bytes())?;
    let mut plots = Vec::new();
    for (i, p) in study.plots.iter().enumerate() {
        let svg = plot(study, p, results)?;
        let name = format!("plot-{}-{}.svg", i + 1, p.x);
        write_atomic(&out.join(name), svg.as_bytes())?;
        plots.push(svg);
    }
    Ok(Written { csv, plots })
}

/// What [`write_results`] wrote that a report shows: the results as CSV, the plots.
struct Written {
    csv: String,
    plots: Vec<String>,
}

/// What a sweep's points came to.
#[derive(Serialize)]
struct Counts {
    evaluated: usize,
    feasible: usize,
    infeasible: usize,
    could_not_run: usize,
}

impl Counts {
    fn of(results: &[PointResult]) -> Counts {
        let could_not_run = results.iter().filter(|r| r.error.is_some()).count();
        let feasible = results.iter().filter(|r| r.feasible).count();
        Counts {
            evaluated: results.len(),
            feasible,
            infeasible: results.len() - feasible - could_not_run,
            could_not_run,
        }
    }
}

/// The counts and a table of the fastest feasible points (at most [`TABLE_ROWS`]): each
/// point's axis values, strategy, time per iteration and speedup over its start.
fn summarize(study: &Outline, results: &[PointResult]) -> String {
    let counts = Counts::of(results);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} evaluated: {} feasible, {} infeasible, {} could not run",
        counts.evaluated,
        if counts.evaluated == 1 {
            "point"
        } else {
            "points"
        },
        counts.feasible,
        counts.infeasible,
        counts.could_not_run
    );
    // Why points could not run, each reason once with its count (the first few).
    let mut reasons: Vec<(&str, usize)> = Vec::new();
    for e in results.iter().filter_map(|r| r.error.as_deref()) {
        match reasons.iter_mut().find(|(r, _)| *r == e) {
            Some((_, n)) => *n += 1,
            None => reasons.push((e, 1)),
        }
    }
    for (reason, n) in reasons.iter().take(3) {
        let _ = writeln!(
            s,
            "  could not run ({n} {}): {reason}",
            if *n == 1 { "point" } else { "points" }
        );
    }
    if reasons.len() > 3 {
        let _ = writeln!(
            s,
            "  ... {} more reasons (the error column of results.csv)",
            reasons.len() - 3
        );
    }
    let mut fastest: Vec<(f64, &PointResult)> = results
        .iter()
        .filter(|r| r.feasible)
        .filter_map(|r| r.time_per_iteration_s.map(|t| (t, r)))
        .collect();
    fastest.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.index.cmp(&b.1.index)));
    if fastest.is_empty() {
        return s;
    }
    // A prediction, a collective or a slice's goodput has no speedup over its start.
    let speedups = !matches!(
        study.action,
        StudyAction::Predict | StudyAction::Collective | StudyAction::Availability
    );
    let mut header: Vec<String> = study.axes.iter().map(|a| a.name.clone()).collect();
    header.extend(["strategy", "time / iter"].map(String::from));
    if speedups {
        header.push("speedup".into());
    }
    let rows: Vec<Vec<String>> = fastest
        .iter()
        .take(TABLE_ROWS)
        .map(|(t, r)| {
            let mut row = r.labels.clone();
            row.push(r.strategy.clone());
            row.push(super::predict::seconds(*t));
            if speedups {
                // Only over a start that fits.
                row.push(
                    r.speedup
                        .filter(|_| r.initial_violations.is_empty())
                        .map_or("-".to_string(), |x| format!("{x:.2}x")),
                );
            }
            row
        })
        .collect();
    let _ = writeln!(
        s,
        "\n{} fastest feasible {} by time per iteration (all in results.csv):",
        rows.len(),
        if rows.len() == 1 { "point" } else { "points" }
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let right: Vec<bool> = (0..header.len()).map(|c| c > study.axes.len()).collect();
    s.push_str(&super::table::aligned(&header, &rows, &right));
    s
}

/// Points whose coordinates are the first value on every axis but `free`.
fn slice<'a>(
    study: &Outline,
    results: &'a [PointResult],
    free: &[usize],
) -> Vec<(Vec<usize>, &'a PointResult)> {
    results
        .iter()
        .map(|r| (study.coords(r.index), r))
        .filter(|(c, _)| {
            c.iter()
                .enumerate()
                .all(|(i, &v)| free.contains(&i) || v == 0)
        })
        .collect()
}

fn axis_index(study: &Outline, name: &str) -> usize {
    study
        .axes
        .iter()
        .position(|a| a.name == name)
        .expect("checked when the study loaded")
}

/// A line of a lines plot: its legend name and its points (x index, y, feasible).
type Line = (String, Vec<(usize, f64, bool)>);

/// What a bar shows of a point.
type Measure = Box<dyn Fn(&PointResult) -> Option<f64>>;

/// What every panel of a plot shares: the study, the kind and the axes the plot uses.
struct PlotAxes<'a> {
    study: &'a Outline,
    kind: StudyPlotKind,
    /// The axis along x, and its labels.
    x: usize,
    xs: &'a [String],
    /// The axis whose values are the lines of a line plot, if any.
    series: Option<usize>,
    /// The axis a line plot's speedups are over (see `StudyPlot::over`), and each point's.
    over: Option<usize>,
    over_speedup: &'a dyn Fn(&[usize], &PointResult) -> Option<f64>,
    /// The slowest time per iteration of the plot (every panel), s: a line plot's 1.0.
    slowest: f64,
    /// The top of a line plot's y axis (every panel).
    top: f64,
    /// The tallest bar of a bar plot (every panel): panels share a y range.
    tallest: f64,
    /// What y shows.
    metric: StudyMetric,
}

/// A quantity's name, its unit on the plot and the factor from SI to that unit (`None` for
/// the speedup, which the plots derive from the time per iteration).
fn metric_scale(m: StudyMetric) -> Option<(&'static str, &'static str, f64)> {
    Some(match m {
        StudyMetric::Speedup => return None,
        StudyMetric::ActionSpeedup => ("speedup of the action over the starting point", "x", 1.0),
        StudyMetric::TimePerIterationS => ("time per iteration", "ms", 1e3),
        StudyMetric::BisectionBytesPerS => ("bisection bandwidth, each way", "TB/s", 1e-12),
        StudyMetric::SparseCoreS => ("SparseCores busy per iteration", "ms", 1e3),
        StudyMetric::HostTablesS => ("hosts' table work per iteration", "ms", 1e3),
        StudyMetric::ServingLatencyS => ("latency per batch", "ms", 1e3),
        StudyMetric::SamplesPerS => ("throughput", "samples/s", 1.0),
        StudyMetric::MemoryPerDeviceBytes => ("memory per device", "GiB", 1.0 / GIB),
        StudyMetric::LocalToGlobalBandwidth => ("local over global bandwidth", "x", 1.0),
        StudyMetric::Goodput => ("goodput: share of the pod running slices", "%", 100.0),
    })
}

/// A point's value of `m` in the plot's unit ([`metric_scale`]); `None` for the speedup.
fn metric_value(m: StudyMetric, r: &PointResult) -> Option<f64> {
    let (_, _, scale) = metric_scale(m)?;
    let v = match m {
        StudyMetric::Speedup => None,
        StudyMetric::ActionSpeedup => r.speedup,
        StudyMetric::TimePerIterationS => r.time_per_iteration_s,
        StudyMetric::BisectionBytesPerS => r.bisection_bytes_per_s,
        StudyMetric::SparseCoreS => r.sparse_core_s,
        StudyMetric::HostTablesS => r.host_tables_s,
        StudyMetric::ServingLatencyS => r.serving_latency_s,
        StudyMetric::SamplesPerS => r.samples_per_s,
        StudyMetric::MemoryPerDeviceBytes => r.memory_per_device_bytes,
        StudyMetric::Goodput => r.goodput,
        StudyMetric::LocalToGlobalBandwidth => {
            Some(r.local_bandwidth_bytes_per_s? / r.network_bandwidth_bytes_per_s?)
        }
    }?;
    Some(v * scale)
}

/// A point of a plot's slice: its coordinates on every axis, and its result.
type Placed<'a> = (Vec<usize>, &'a PointResult);

/// The drawing area of one panel.
type Panel<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn plot(study: &Outline, p: &StudyPlot, results: &[PointResult]) -> anyhow::Result<String> {
    let x = axis_index(study, &p.x);
    let series = p.series.as_deref().map(|s| axis_index(study, s));
    let panels = p.panels.as_deref().map(|s| axis_index(study, s));
    let over = p.over.as_deref().map(|s| axis_index(study, s));
    let free: Vec<usize> = [Some(x), series, panels, over]
        .into_iter()
        .flatten()
        .collect();
    let points = slice(study, results, &free);
    let xs = &study.axes[x].labels;
    let panel_count = panels.map_or(1, |i| study.axes[i].values.len());
    // The axes the plot does not use are held at their first values: the title says so.
    let held: Vec<String> = study
        .axes
        .iter()
        .enumerate()
        .filter(|(i, a)| !free.contains(i) && a.values.len() > 1)
        .map(|(_, a)| format!("{} = {}", a.name, a.labels[0]))
        .collect();
    let title = p.title.clone().unwrap_or_else(|| study.name.clone());
    // Every panel of a line plot relative to the slowest point of the whole plot, on one
    // y range, so that what the panel axis buys shows as a shift between panels; the
    // feasible points' where any is (an infeasible design is no reference).
    let any_feasible = points.iter().any(|(_, r)| r.feasible);
    let times = || {
        points
            .iter()
            .filter(move |(_, r)| r.feasible || !any_feasible)
            .filter_map(|(_, r)| r.time_per_iteration_s)
    };
    let slowest = times().fold(0.0f64, f64::max);
    // The y range holds every point drawn, infeasible ones too.
    let fastest = points
        .iter()
        .filter_map(|(_, r)| r.time_per_iteration_s)
        .fold(f64::INFINITY, f64::min);
    // With `over`, each point's time against its reference's: the same coordinates but
    // the first value of that axis.
    let reference: BTreeMap<Vec<usize>, f64> = over.map_or_else(BTreeMap::new, |o| {
        points
            .iter()
            .filter(|(c, _)| c[o] == 0)
            .filter_map(|(c, r)| Some((c.clone(), r.time_per_iteration_s?)))
            .collect()
    });
    let over_speedup = |c: &[usize], r: &PointResult| -> Option<f64> {
        let o = over?;
        let mut at = c.to_vec();
        at[o] = 0;
        Some(reference.get(&at)? / r.time_per_iteration_s?)
    };
    let top = match metric_scale(p.y) {
        None if over.is_some() => {
            points
                .iter()
                .filter_map(|(c, r)| over_speedup(c, r))
                .fold(1.0f64, f64::max)
                * 1.1
        }
        None => (slowest / fastest).max(1.0) * 1.1,
        Some(_) => {
            let most = points
                .iter()
                .filter_map(|(_, r)| metric_value(p.y, r))
                .fold(0.0f64, f64::max);
            if most > 0.0 {
                most * 1.1
            } else {
                1.0
            }
        }
    };
    let mut axes = PlotAxes {
        study,
        kind: p.kind,
        x,
        xs,
        series,
        over,
        over_speedup: &over_speedup,
        slowest,
        top,
        tallest: if metric_scale(p.y).is_some() {
            0.0
        } else {
            1.0
        },
        metric: p.y,
    };
    let by_panel: Vec<Vec<&Placed>> = (0..panel_count)
        .map(|pi| {
            points
                .iter()
                .filter(|(c, _)| panels.map_or(true, |i| c[i] == pi))
                .collect()
        })
        .collect();
    for in_panel in &by_panel {
        for (_, measure) in bar_groups(&axes, in_panel) {
            for (_, r) in in_panel {
                if let Some(y) = measure(r).filter(|y| y.is_finite()) {
                    axes.tallest = axes.tallest.max(y);
                }
            }
        }
    }
    let mut svg = String::new();
    {
        // At most three panels a row, so that each stays readable (four as two by two).
        let columns = if panel_count == 4 {
            2
        } else {
            panel_count.min(3)
        };
        let rows = panel_count.div_ceil(columns);
        let width = 420 * columns as u32 + 40;
        let height = 430 * rows as u32 + 30;
        let root = SVGBackend::with_string(&mut svg, (width.max(640), height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut root = root.titled(&title, (FONT, 20))?;
        if !held.is_empty() {
            // A line under the title: the axes the plot holds at their first values.
            let (line, rest) = root.split_vertically(20);
            line.draw(&Text::new(
                format!("other axes at their first values: {}", held.join(", ")),
                (12, 2),
                (FONT, 13),
            ))?;
            root = rest;
        }
        let areas = root.split_evenly((rows, columns));
        for (pi, (area, in_panel)) in areas.iter().zip(&by_panel).enumerate() {
            let mut caption = panels.map_or(String::new(), |i| {
                format!("{} = {}", study.axes[i].name, study.axes[i].labels[pi])
            });
            // Only a partial merge leaves a panel without points: say so, not "nothing fits".
            if in_panel.is_empty() {
                caption = format!("{caption} (no points: not in the merged shards)")
                    .trim_start()
                    .to_string();
            }
            match p.kind {
                StudyPlotKind::Lines => draw_lines(area, &axes, in_panel, &caption)?,
                StudyPlotKind::Pareto => draw_pareto(area, &axes, &points, in_panel, &caption)?,
                StudyPlotKind::GroupedBars | StudyPlotKind::Bars => {
                    draw_bars(area, &axes, in_panel, &caption)?
                }
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// The width of a panel's y label area: wide enough for tick labels of `top`'s size
/// (20000.0 beside the axis title).
fn y_label_area(top: f64) -> u32 {
    let digits = top.abs().max(1.0).log10().floor() as u32 + 1;
    50 + 8 * digits.saturating_sub(2)
}

/// The x tick labels' font size: 12 where they fit, smaller where many long labels share
/// a panel (15 slices of TPU v4 Fig. 8), never below 7.
fn tick_font(area: &Panel, y_area: u32, labels: &[String]) -> u32 {
    let width = area.dim_in_pixel().0.saturating_sub(y_area + 20) as f64;
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(1) as f64;
    // A label's width is about 0.6 of the font size per character, with a gap of one.
    let fits = width / (labels.len().max(1) as f64 * (longest + 1.0) * 0.6);
    fits.clamp(7.0, 12.0) as u32
}

/// Draws one panel of a line plot: performance along x, a line per series value.
fn draw_lines(
    area: &Panel,
    axes: &PlotAxes,
    in_panel: &[&Placed],
    caption: &str,
) -> anyhow::Result<()> {
    let PlotAxes {
        study,
        x,
        xs,
        series,
        over,
        over_speedup,
        slowest,
        top,
        metric,
        ..
    } = *axes;
    // A line per series value, and per value of the `over` axis but its first (the
    // reference every point of those lines is taken against).
    let series_count = series.map_or(1, |s| study.axes[s].values.len());
    let over_values = over.map_or(0..1, |o| 1..study.axes[o].values.len());
    let keys: Vec<(usize, usize)> = (0..series_count)
        .flat_map(|si| over_values.clone().map(move |oi| (si, oi)))
        .collect();
    let lines: Vec<Line> = keys
        .into_iter()
        .map(|(si, oi)| {
            // The series axis names its values: "nvlink = 600 GB/s (x2)".
            let mut name = series.map_or(String::new(), |s| {
                format!("{} = {}", study.axes[s].name, study.axes[s].labels[si])
            });
            if let Some(o) = over.filter(|o| study.axes[*o].values.len() > 2) {
                name = format!("{name} {}", study.axes[o].labels[oi]);
            }
            let mut pts: Vec<(usize, f64, bool)> = in_panel
                .iter()
                .filter(|(c, _)| series.map_or(true, |s| c[s] == si))
                .filter(|(c, _)| over.map_or(true, |o| c[o] == oi))
                .filter_map(|(c, r)| {
                    let y = match metric_scale(metric) {
                        None if over.is_some() => over_speedup(c, r),
                        None => r.time_per_iteration_s.map(|t| slowest / t),
                        Some(_) => metric_value(metric, r),
                    };
                    y.map(|y| (c[x], y, r.feasible))
                })
                .collect();
            pts.sort_by_key(|p| p.0);
            (name, pts)
        })
        .collect();
    // Infeasible points: hollow markers off the lines, and the caption says so.
    let infeasible = lines.iter().flat_map(|l| &l.1).any(|p| !p.2);
    let caption = if infeasible {
        format!("{caption} (hollow: infeasible)")
            .trim_start()
            .to_string()
    } else {
        caption.to_string()
    };
    let y_desc = match (metric_scale(metric), over) {
        (None, Some(o)) => format!(
            "speedup over {} = {}",
            study.axes[o].name, study.axes[o].labels[0]
        ),
        (None, None) => format!("performance (x the slowest point, {slowest:.4} s)"),
        (Some((name, unit, _)), _) => format!("{name} ({unit})"),
    };
    let y_area = y_label_area(top);
    let mut chart = ChartBuilder::on(area)
        .caption(&caption, (FONT, 15))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(y_area)
        // A segmented range includes its end: one segment per label, none after the last.
        .build_cartesian_2d((0..xs.len().saturating_sub(1)).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc(&study.axes[x].name)
        .y_desc(&y_desc)
        .x_label_style((FONT, tick_font(area, y_area, xs)))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => xs.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    // Where the legend hides the fewest points (as shares of the plot).
    let shares: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|l| &l.1)
        .map(|&(i, y, _)| {
            (
                (i as f64 + 0.5) / xs.len().max(1) as f64,
                if top > 0.0 { y / top } else { 0.0 },
            )
        })
        .collect();
    let legend_rows = lines.len() as f64;
    for (si, (name, pts)) in lines.into_iter().enumerate() {
        let color = distinct(si);
        chart
            .draw_series(LineSeries::new(
                pts.iter()
                    .filter(|p| p.2)
                    .map(|&(i, y, _)| (SegmentValue::CenterOf(i), y)),
                color.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 18, b)], color));
        // Every point a marker (a line of one feasible point draws no line): filled where
        // it fits, hollow where it does not.
        chart.draw_series(pts.iter().map(|&(i, y, feasible)| {
            let style = if feasible {
                color.filled()
            } else {
                color.stroke_width(1)
            };
            Circle::new(
                (SegmentValue::CenterOf(i), y),
                if feasible { 3 } else { 4 },
                style,
            )
        }))?;
    }
    if series.is_some() || over.is_some_and(|o| study.axes[o].values.len() > 2) {
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            // Speedups over a reference fall toward 1 at one end: the legend prefers high.
            .position(least_crowded(
                &shares,
                (0.4, (0.06 * legend_rows + 0.04).min(0.6)),
                if over.is_some() {
                    [
                        SeriesLabelPosition::UpperRight,
                        SeriesLabelPosition::UpperLeft,
                        SeriesLabelPosition::LowerRight,
                        SeriesLabelPosition::LowerLeft,
                    ]
                } else {
                    [
                        SeriesLabelPosition::LowerRight,
                        SeriesLabelPosition::UpperRight,
                        SeriesLabelPosition::UpperLeft,
                        SeriesLabelPosition::LowerLeft,
                    ]
                },
            ))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// The corner of a chart whose legend box (about `width` x `height` of the plot, as shares)
/// covers the fewest of `points` (x and y as shares of the plot, from the lower left); on a
/// tie, the first of `corners` in the order given.
fn least_crowded(
    points: &[(f64, f64)],
    (width, height): (f64, f64),
    corners: [SeriesLabelPosition; 4],
) -> SeriesLabelPosition {
    let covered = |c: &SeriesLabelPosition| {
        let (left, low) = match c {
            SeriesLabelPosition::UpperLeft => (true, false),
            SeriesLabelPosition::LowerLeft => (true, true),
            SeriesLabelPosition::LowerRight => (false, true),
            _ => (false, false),
        };
        points
            .iter()
            .filter(|&&(x, y)| {
                let in_x = if left { x <= width } else { x >= 1.0 - width };
                let in_y = if low { y <= height } else { y >= 1.0 - height };
                in_x && in_y
            })
            .count()
    };
    let mut best = corners[0].clone();
    let mut fewest = usize::MAX;
    for c in corners {
        let n = covered(&c);
        if n < fewest {
            fewest = n;
            best = c;
        }
    }
    best
}

/// A tick label with an SI prefix: 2.5M, 750k, 12.5.
fn compact(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.1}G", v / 1e9),
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e3 => format!("{:.0}k", v / 1e3),
        _ => format!("{v:.1}"),
    }
}

/// Bytes per GiB: memory axes are in GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// The front of `(x, y)` points where less x and more y are better: those no other point
/// matches or beats on both, by increasing x.
fn pareto_front(points: &[(f64, f64, usize)]) -> Vec<(f64, f64, usize)> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut front: Vec<(f64, f64, usize)> = Vec::new();
    for p in sorted {
        if front.last().map_or(true, |l| p.1 > l.1) {
            front.push(p);
        }
    }
    front
}

/// Draws one panel of a Pareto plot: a dot per point at (memory per device, y), a colour
/// per series, each series' front as a line with its points named by their `x` label, and
/// the devices' memory as a dashed line (points right of it do not fit).
fn draw_pareto(
    area: &Panel,
    axes: &PlotAxes,
    every: &[Placed],
    in_panel: &[&Placed],
    caption: &str,
) -> anyhow::Result<()> {
    let PlotAxes {
        study,
        x,
        xs,
        series,
        metric,
        ..
    } = *axes;
    let (name, unit, _) = metric_scale(metric).unwrap_or(("", "", 1.0));
    let at = |r: &PointResult| -> Option<(f64, f64)> {
        Some((r.memory_per_device_bytes? / GIB, metric_value(metric, r)?))
    };
    // One range for every panel, so that panels compare.
    let (right, top) = every
        .iter()
        .filter_map(|(_, r)| at(r))
        .fold((0.0f64, 0.0f64), |(m, t), (a, b)| (m.max(a), t.max(b)));
    let capacity = every
        .iter()
        .map(|(_, r)| r.memory_capacity_bytes / GIB)
        .fold(0.0f64, f64::max);
    let least = every
        .iter()
        .filter_map(|(_, r)| at(r))
        .map(|(a, _)| a)
        .fold(f64::INFINITY, f64::min);
    let right = right.max(capacity) * 1.1;
    // From zero unless every point sits far from it (tables that every strategy shards
    // alike put every DLRM point within a few GiB).
    let left = if least.is_finite() && least > 0.3 * right {
        (least * 0.9).floor()
    } else {
        0.0
    };
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(left..right, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("memory per device (GiB)")
        .y_desc(format!("{name} ({unit})"))
        .y_label_formatter(&|v| compact(*v))
        .draw()?;
    if capacity > 0.0 {
        chart.draw_series(DashedLineSeries::new(
            [(capacity, 0.0), (capacity, top)],
            6,
            4,
            BLACK.mix(0.6).stroke_width(1),
        ))?;
        // Half way up: the corners are the legend's.
        chart.draw_series(std::iter::once(Text::new(
            format!("device memory {capacity:.0} GiB"),
            (capacity, top * 0.5),
            (FONT, 11),
        )))?;
    }
    let count = series.map_or(1, |s| study.axes[s].values.len());
    for si in 0..count {
        let color = distinct(si);
        let pts: Vec<(f64, f64, usize, bool)> = in_panel
            .iter()
            .filter(|(c, _)| series.map_or(true, |s| c[s] == si))
            .filter_map(|(c, r)| at(r).map(|(a, b)| (a, b, c[x], r.feasible)))
            .collect();
        // The front of what runs: a point that does not fit is drawn hollow, off the front.
        let fits: Vec<(f64, f64, usize)> = pts
            .iter()
            .filter(|p| p.3)
            .map(|&(a, b, k, _)| (a, b, k))
            .collect();
        let front = pareto_front(&fits);
        let label = series.map_or(String::new(), |s| study.axes[s].labels[si].clone());
        chart.draw_series(pts.iter().map(|&(a, b, _, feasible)| {
            let style = if feasible {
                color.mix(0.5).filled()
            } else {
                color.mix(0.6).stroke_width(1)
            };
            Circle::new((a, b), 4, style)
        }))?;
        chart
            .draw_series(LineSeries::new(
                front.iter().map(|&(a, b, _)| (a, b)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 18, b)], color));
        chart.draw_series(front.iter().map(|&(a, b, k)| {
            EmptyElement::at((a, b))
                + Text::new(xs[k].clone(), (7, -5), (FONT, 11).into_font().color(&color))
        }))?;
    }
    if every.iter().any(|(_, r)| !r.feasible) {
        chart.draw_series(std::iter::once(Text::new(
            "hollow: does not fit (off the fronts)",
            (left + (right - left) * 0.02, top * 0.91),
            (FONT, 11),
        )))?;
    }
    if series.is_some() {
        let shares: Vec<(f64, f64)> = in_panel
            .iter()
            .filter_map(|(_, r)| at(r))
            .map(|(a, b)| ((a - left) / (right - left).max(1e-12), b / top))
            .collect();
        let rows = series.map_or(1, |s| study.axes[s].values.len()) as f64;
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            .position(least_crowded(
                &shares,
                (0.35, (0.06 * rows + 0.04).min(0.6)),
                [
                    SeriesLabelPosition::LowerRight,
                    SeriesLabelPosition::UpperRight,
                    SeriesLabelPosition::UpperLeft,
                    SeriesLabelPosition::LowerLeft,
                ],
            ))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// Draws one panel of a bar plot: a group of bars (speedups) at each x value.
fn draw_bars(
    area: &Panel,
    axes: &PlotAxes,
    in_panel: &[&Placed],
    caption: &str,
) -> anyhow::Result<()> {
    let PlotAxes { study, x, xs, .. } = *axes;
    let groups = bar_groups(axes, in_panel);
    let width = groups.len();
    // (x, group, height, feasible): an infeasible point's bar is drawn pale.
    let bars: Vec<(usize, usize, f64, bool)> = in_panel
        .iter()
        .flat_map(|(c, r)| {
            groups
                .iter()
                .enumerate()
                .filter_map(move |(g, (_, f))| f(r).map(|y| (c[x], g, y, r.feasible)))
        })
        .collect();
    // Headroom above the tallest bar for the legend, which sits there.
    let top = axes.tallest * if width > 1 { 1.4 } else { 1.1 };
    let y_desc = match (metric_scale(axes.metric), bar_reference(axes, in_panel)) {
        (Some((name, unit, _)), _) => format!("{name} ({unit})"),
        (None, Some((label, _))) if width == 1 => {
            format!("speedup over {} = {label}", study.axes[x].name)
        }
        _ => "speedup".to_string(),
    };
    // Group i centred on x = i, its bars side by side within 0.8 of a unit: the ticks at
    // the integers fall under each group's centre (a single bar's centre).
    let bar = 0.8 / width as f64;
    let y_area = y_label_area(top);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(y_area)
        .build_cartesian_2d(-0.5..xs.len() as f64 - 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&study.axes[x].name)
        .y_desc(&y_desc)
        .x_label_style((FONT, tick_font(area, y_area, xs)))
        .x_labels(xs.len())
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                xs.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    for (g, (name, _)) in groups.iter().enumerate() {
        let color = Palette99::pick(g).to_rgba();
        let offset = (g as f64 - (width as f64 - 1.0) / 2.0) * bar;
        chart
            .draw_series(
                bars.iter()
                    .filter(|b| b.1 == g)
                    .map(|&(xi, _, y, feasible)| {
                        let centre = xi as f64 + offset;
                        let fill = if feasible { color } else { color.mix(0.3) };
                        Rectangle::new(
                            [(centre - 0.48 * bar, 0.0), (centre + 0.48 * bar, y)],
                            fill.filled(),
                        )
                    }),
            )?
            .label(*name)
            .legend(move |(a, b)| Rectangle::new([(a, b - 5), (a + 12, b + 5)], color.filled()));
    }
    // Pale bars are infeasible points (out of memory, over budget): the caption says so.
    if bars.iter().any(|b| !b.3) {
        chart.draw_series(std::iter::once(Text::new(
            "pale: infeasible (see the CSV's violations)",
            (-0.45, top * 0.97),
            (FONT, 12),
        )))?;
    }
    // One series needs no legend (the y axis names it).
    if width > 1 {
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// The first x value of a panel and its time: what single bars are speedups over.
fn bar_reference(axes: &PlotAxes, in_panel: &[&Placed]) -> Option<(String, f64)> {
    let (c, r) = in_panel.iter().find(|(c, _)| c[axes.x] == 0)?;
    Some((axes.xs[c[axes.x]].clone(), r.time_per_iteration_s?))
}

/// The bars of each group: the co-optimization speedups, or the speedup over the first x.
fn bar_groups(axes: &PlotAxes, in_panel: &[&Placed]) -> Vec<(&'static str, Measure)> {
    if axes.kind == StudyPlotKind::GroupedBars {
        vec![
            (
                "(a) strategy search",
                Box::new(|r: &PointResult| r.strategy_only_speedup),
            ),
            (
                "(b) budget optimization",
                Box::new(|r: &PointResult| r.budgets_only_speedup),
            ),
            ("(c) both", Box::new(|r: &PointResult| r.both_speedup)),
        ]
    } else if let Some((name, _, _)) = metric_scale(axes.metric) {
        let metric = axes.metric;
        vec![(
            name,
            Box::new(move |r: &PointResult| metric_value(metric, r)),
        )]
    } else {
        let first = bar_reference(axes, in_panel).map(|(_, t)| t);
        vec![(
            "speedup over the first",
            Box::new(move |r: &PointResult| Some(first? / r.time_per_iteration_s?)),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legend goes to the preferred corner unless data sits there, then to the corner
    /// that hides the fewest points.
    #[test]
    fn the_legend_goes_where_it_hides_the_fewest_points() {
        use SeriesLabelPosition::{LowerLeft, LowerRight, UpperLeft, UpperRight};
        let order = [LowerRight, UpperRight, UpperLeft, LowerLeft];
        let name = |p: SeriesLabelPosition| format!("{p:?}");
        assert_eq!(
            name(least_crowded(&[], (0.4, 0.3), order.clone())),
            "LowerRight"
        );
        // Goodput falling to zero at the largest slices (TPU v4 Fig. 4): lower right is
        // taken, upper right is free.
        let falling = [(0.1, 0.9), (0.5, 0.7), (0.9, 0.05), (0.95, 0.0)];
        assert_eq!(
            name(least_crowded(&falling, (0.4, 0.3), order.clone())),
            "UpperRight"
        );
        // Every corner but the lower left holds a point.
        let corners = [(0.9, 0.9), (0.1, 0.9), (0.9, 0.1)];
        assert_eq!(
            name(least_crowded(&corners, (0.4, 0.3), order)),
            "LowerLeft"
        );
    }
}
