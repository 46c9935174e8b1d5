//! Issue 23's fuzz harness: a structure-aware mutation driver over the shipped input files
//! and the command line, on stable Rust. Each execution takes one shipped file (technology,
//! template, budget, system, workload, study), mutates its YAML text (numbers swapped for
//! edge values, lines dropped, duplicated, swapped, re-indented, truncated, bytes spliced)
//! and runs what the CLI runs on it in process; or mutates a documented command line and
//! runs the binary. Invariants: no panic, no hang (a watchdog aborts past
//! [`HANG_S`]), no feasible answer holding a non-finite number, and no feasible answer
//! whose memory exceeds its capacity or whose components exceed their budget.
//!
//! `cargo test --release --test fuzz` runs a short campaign (a minute or less); the full
//! one: `STACKFLOW_FUZZ_EXECUTIONS=1000000 STACKFLOW_FUZZ_SEED=1 cargo test --release
//! --test fuzz -- --nocapture`. Every execution's input follows from the seed and its
//! index, so a finding replays by index (`STACKFLOW_FUZZ_FIRST`); findings are written to
//! `target/fuzz-findings/` and fixed as regression tests named after them.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use stackflow::config::{to_yaml, Source};
use stackflow::design::{Design, DesignFiles};
use stackflow::distributed::predict::predict;
use stackflow::generator::{generate, Architecture};
use stackflow::network::System;
use stackflow::parallel::Strategy;
use stackflow::perf::{as_run, Evaluator};
use stackflow::study::Study;
use stackflow::workload::Workload;

/// Seconds one execution may take before the watchdog calls it a hang.
const HANG_S: u64 = 60;

/// Executions of the short campaign run by `cargo test`.
const SHORT: u64 = 30_000;

/// One command line in this many executions runs the binary (a process each).
const CLI_EVERY: u64 = 40;

const KINDS: [&str; 7] = [
    "technology",
    "template",
    "budget",
    "system",
    "workload",
    "study",
    "strategy",
];

/// The shipped files the mutations start from, by kind.
fn corpus(kind: &str) -> Vec<PathBuf> {
    let dir = match kind {
        "technology" => "tech_libs",
        "template" => "templates",
        "budget" => "budgets",
        "system" => "templates",
        "workload" => "workloads",
        "study" => "studies",
        _ => return Vec::new(),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(common::root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| {
            // Systems are the templates with fabrics; accelerator templates the others.
            let text = std::fs::read_to_string(p).unwrap();
            match kind {
                "system" => text.contains("\nfabrics:"),
                "template" => !text.contains("\nfabrics:"),
                _ => true,
            }
        })
        .map(|p| p.strip_prefix(common::root()).unwrap().to_path_buf())
        .collect();
    files.sort();
    files
}

/// Values a number may become: edges of every range the inputs have.
const EDGES: [&str; 22] = [
    "0",
    "-1",
    "1",
    "2",
    "0.5",
    "1e308",
    "-1e308",
    "1e-308",
    "5e-324",
    ".nan",
    ".inf",
    "-.inf",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1048577",
    "65536",
    "3",
    "1e6",
    "1e-9",
    "-0",
    "7",
];

/// One mutation of YAML `text`.
fn mutate(text: &str, rng: &mut StdRng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return "x".into();
    }
    let rounds = if rng.gen_bool(0.7) {
        1
    } else {
        2 + rng.gen_range(0..3)
    };
    for _ in 0..rounds {
        let i = rng.gen_range(0..lines.len());
        match rng.gen_range(0..14) {
            // A number becomes an edge value, or is scaled by a power of ten.
            0..=7 => {
                let numbers: Vec<(usize, usize, usize)> = lines
                    .iter()
                    .enumerate()
                    .flat_map(|(n, l)| number_spans(l).into_iter().map(move |(a, b)| (n, a, b)))
                    .collect();
                if numbers.is_empty() {
                    continue;
                }
                let (n, a, b) = numbers[rng.gen_range(0..numbers.len())];
                let new = if rng.gen_bool(0.7) {
                    EDGES[rng.gen_range(0..EDGES.len())].to_string()
                } else {
                    format!("{}e{}", &lines[n][a..b], rng.gen_range(-12..13))
                };
                lines[n].replace_range(a..b, &new);
            }
            8 => {
                if lines.len() > 1 {
                    lines.remove(i);
                }
            }
            9 => {
                let copy = lines[i].clone();
                lines.insert(i, copy);
            }
            10 => {
                let j = rng.gen_range(0..lines.len());
                lines.swap(i, j);
            }
            11 => {
                let indent = ["", "  ", "    ", "\t", "      "][rng.gen_range(0..5)];
                let trimmed = lines[i].trim_start().to_string();
                lines[i] = format!("{indent}{trimmed}");
            }
            // A value becomes another type.
            12 => {
                if let Some(colon) = lines[i].find(": ") {
                    let value = ["[]", "{}", "[1, 2]", "\"x\"", "null", "{a: 1}", "- 1", "~"]
                        [rng.gen_range(0..8)];
                    lines[i].replace_range(colon + 2.., value);
                }
            }
            _ => {
                let cut = rng.gen_range(0..=lines[i].len());
                let junk = [
                    "\u{0}", "\u{feff}", "&a", "*a", "!!binary", "<<: *a", "\"", "'", "#",
                ][rng.gen_range(0..9)];
                if lines[i].is_char_boundary(cut) {
                    lines[i].insert_str(cut, junk);
                }
            }
        }
    }
    let mut out = lines.join("\n");
    if rng.gen_bool(0.05) {
        let cut = rng.gen_range(0..=out.len());
        if out.is_char_boundary(cut) {
            out.truncate(cut);
        }
    }
    out
}

/// Byte spans of the numbers in a line's value part (after the first `: ` or `- `).
fn number_spans(line: &str) -> Vec<(usize, usize)> {
    let code = line.split('#').next().unwrap_or("");
    let bytes = code.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if starts {
            let a = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || b".eE+-".contains(&bytes[i])) {
                i += 1;
            }
            spans.push((a, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// What one execution found wrong, if anything.
#[derive(Default)]
struct Tally {
    executions: AtomicU64,
    refused: AtomicU64,
    infeasible: AtomicU64,
    feasible: AtomicU64,
    findings: Mutex<Vec<String>>,
    longest_ms: AtomicU64,
    by_kind: [AtomicU64; 8],
}

/// Non-finite numbers in a report: its YAML writes them as the whole value `.inf`, `-.inf`
/// or `.nan` (a string that reads so is quoted, and a name holding one is more than it).
fn non_finite<T: serde::Serialize>(value: &T) -> bool {
    to_yaml(value).lines().any(|line| {
        let value = match line.split_once(": ") {
            Some((_, v)) => v,
            None => line.trim_start().trim_start_matches("- "),
        };
        matches!(value.trim(), ".inf" | "-.inf" | ".nan" | ".NaN")
    })
}

/// The invariants of a training prediction that says it is feasible: a finite positive
/// time, no non-finite number anywhere, memory within capacity.
fn check_feasible<T: serde::Serialize>(
    report: &T,
    time_s: f64,
    memory_bytes: f64,
    capacity_bytes: f64,
    what: &str,
) -> Result<(), String> {
    if non_finite(report) || !positive(time_s) {
        return Err(format!("a feasible {what} holds a non-finite number"));
    }
    if memory_bytes > capacity_bytes * (1.0 + 1e-9) {
        return Err(format!("a feasible {what} exceeds the memory capacity"));
    }
    Ok(())
}

/// The invariants of a generated accelerator: one with no violations holds finite numbers
/// and keeps every component within its allocation.
fn check_architecture(arch: &Architecture) -> Result<bool, String> {
    if !arch.violations.is_empty() {
        return Ok(false);
    }
    if non_finite(arch) {
        return Err("a feasible architecture holds a non-finite number".into());
    }
    for (what, usage) in [
        ("area", arch.chip_area_mm2),
        ("power", arch.power_w),
        ("perimeter", arch.perimeter_mm),
    ] {
        if usage.used > usage.allocated * (1.0 + 1e-9) + 1e-12 {
            return Err(format!(
                "a feasible architecture uses {} of {} {what}",
                usage.used, usage.allocated
            ));
        }
    }
    Ok(true)
}

/// Runs one mutated file of `kind` (written at `path` in a scratch copy of the repository)
/// through what the CLI runs on it. `Ok(None)`: refused with an error (exit 2);
/// `Ok(Some(feasible))`: an answer.
fn run_file(kind: &str, root: &Path, path: &Path) -> Result<Option<bool>, String> {
    let design_of = |budget: &Path, template: Option<&Path>, tech: Option<&Path>| {
        Design::load(DesignFiles {
            source: Source::Disk,
            budget,
            template,
            tech,
        })
    };
    let single = |design: Design, workload: &Workload| -> Result<Option<bool>, String> {
        let arch = generate(&design);
        check_architecture(&arch)?;
        let graph = workload.graph();
        let arch = as_run(&arch, &graph);
        let mut evaluator = Evaluator::new(&arch);
        if let Some((t, spec)) = workload.serving() {
            let p = evaluator.predict_inference(t, spec, &arch.violations);
            if p.feasible && non_finite(&p) {
                return Err("a feasible serving prediction holds a non-finite number".into());
            }
            return Ok(Some(p.feasible));
        }
        let p = evaluator.predict(&graph, &arch.violations);
        if p.feasible {
            let (time, memory) = (p.time_per_iteration_s, p.memory_per_device_bytes);
            check_feasible(&p, time, memory, arch.memory_capacity_bytes, "prediction")?;
        }
        Ok(Some(p.feasible))
    };
    let gpt = || Workload::load(Source::Disk, &root.join("workloads/gpt-1.7b.yaml"));
    let h100 = root.join("budgets/h100.yaml");
    let outcome = match kind {
        "technology" => {
            let design = match design_of(&h100, None, Some(path)) {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
            single(design, &gpt().map_err(|e| e.to_string())?)
        }
        "template" => {
            let budget = budget_naming(root, path);
            let design = match design_of(&budget, Some(path), None) {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
            single(design, &gpt().map_err(|e| e.to_string())?)
        }
        "budget" => {
            let design = match design_of(path, None, None) {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
            single(design, &gpt().map_err(|e| e.to_string())?)
        }
        "workload" => {
            let workload = match Workload::load(Source::Disk, path) {
                Ok(w) => w,
                Err(_) => return Ok(None),
            };
            let design = design_of(&h100, None, None).map_err(|e| e.to_string())?;
            single(design, &workload)
        }
        "system" => {
            let Ok(system) = System::load(Source::Disk, path) else {
                return Ok(None);
            };
            distributed(&system, system.default_devices(), None, root)
        }
        // A study that loads (its base and every axis value checked) is counted with the
        // answers that are not feasible designs.
        "study" => Ok(Study::load(path).ok().map(|_| false)),
        _ => unreachable!("{kind}"),
    };
    outcome
}

/// The budget in `root` naming the template at `path` (else the H100's).
fn budget_naming(root: &Path, path: &Path) -> PathBuf {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(root.join("budgets"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|b| {
            std::fs::read_to_string(b)
                .is_ok_and(|t| t.contains(&format!("template: ../templates/{name}")))
        })
        .unwrap_or_else(|| root.join("budgets/h100.yaml"))
}

/// A distributed prediction of GPT-1.7B on `system` (data parallel unless `strategy`),
/// with its invariants.
fn distributed(
    system: &System,
    devices: u64,
    strategy: Option<Strategy>,
    root: &Path,
) -> Result<Option<bool>, String> {
    let Ok(design) = system.design() else {
        return Ok(None);
    };
    let arch = generate(&design);
    check_architecture(&arch)?;
    let Ok(net) = system.network(&arch, devices) else {
        return Ok(None);
    };
    let workload = Workload::load(Source::Disk, &root.join("workloads/gpt-1.7b.yaml"))
        .map_err(|e| e.to_string())?;
    let strategy = match strategy {
        Some(s) => s,
        None => match Strategy::parse(&format!("d{devices}")) {
            Ok(s) => s,
            Err(_) => return Ok(None),
        },
    };
    let Ok(p) = predict(&workload, &arch, &net, &strategy) else {
        return Ok(None);
    };
    if p.feasible {
        let (time, memory) = (p.time_per_iteration_s, p.memory_per_device_bytes);
        let capacity = p.memory_capacity_bytes;
        check_feasible(&p, time, memory, capacity, "distributed prediction")?;
    }
    Ok(Some(p.feasible))
}

/// A mutated strategy string on a 64-device DGX A100 system.
fn run_strategy(rng: &mut StdRng, root: &Path) -> (String, Result<Option<bool>, String>) {
    let bases = [
        "t8-p8-d1",
        "t8-d8",
        "d64",
        "t4-p4-d4-mb4-i2-sp-rc=selective",
        "t8-p2-d4-z3",
        "RC-4-2-d8-p1",
        "CR-16-d4-p1",
        "(TP, DDP)",
        "t2-c2-d16",
    ];
    let mut text = bases[rng.gen_range(0..bases.len())].to_string();
    for _ in 0..rng.gen_range(1..4) {
        let spans = number_spans(&text);
        match rng.gen_range(0..4) {
            0 | 1 if !spans.is_empty() => {
                let (a, b) = spans[rng.gen_range(0..spans.len())];
                text.replace_range(a..b, EDGES[rng.gen_range(0..EDGES.len())]);
            }
            2 => {
                let piece = [
                    "-sp", "-z3", "-mb0", "-i0", "-rc=full", "-p0", "-x", "--", "-d",
                ][rng.gen_range(0..9)];
                text.push_str(piece);
            }
            _ => {
                let cut = rng.gen_range(0..=text.len());
                if text.is_char_boundary(cut) {
                    text.truncate(cut);
                }
            }
        }
    }
    let outcome = (|| {
        let Ok(strategy) = Strategy::parse(&text) else {
            return Ok(None);
        };
        let system = System::load(Source::Disk, &root.join("templates/dgx-a100.yaml"))
            .map_err(|e| e.to_string())?;
        distributed(&system, 64, Some(strategy), root)
    })();
    (text, outcome)
}

/// A mutated documented command line, run by the binary: exit 0, 2 or 3 only, and no
/// non-finite number in a JSON answer that says it is feasible.
fn run_cli(rng: &mut StdRng) -> (String, Result<Option<bool>, String>) {
    let bases: [&[&str]; 8] = [
        &["generate", "--budget", "budgets/a100.yaml", "--json"],
        &["predict", "--workload", "workloads/gpt-1.7b.yaml", "--json"],
        &[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "64",
            "--strategy",
            "t8-d8",
            "--json",
        ],
        &[
            "optimize",
            "--restarts",
            "2",
            "--steps",
            "5",
            "--seed",
            "1",
            "--json",
        ],
        &[
            "predict",
            "--system",
            "templates/tpu-v4-pod.yaml",
            "--slice",
            "4x4x8",
            "--json",
        ],
        &[
            "predict",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--system",
            "templates/dgx-h100.yaml",
            "--strategy",
            "t8",
            "--json",
        ],
        &["search", "--devices", "16", "--json"],
        &[
            "predict",
            "--grid-kg-per-kwh",
            "0.4",
            "--pue",
            "1.2",
            "--json",
        ],
    ];
    let mut args: Vec<String> = bases[rng.gen_range(0..bases.len())]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for _ in 0..rng.gen_range(1..3) {
        let i = rng.gen_range(0..args.len());
        match rng.gen_range(0..4) {
            0 => args[i] = EDGES[rng.gen_range(0..EDGES.len())].to_string(),
            1 => {
                args.remove(i);
            }
            2 => {
                let flag = [
                    "--devices",
                    "--strategy",
                    "--slice",
                    "--tables",
                    "--jobs",
                    "-",
                ][rng.gen_range(0..6)];
                args.insert(i, flag.to_string());
            }
            _ => {
                let j = rng.gen_range(0..args.len());
                args.swap(i, j);
            }
        }
    }
    if args.is_empty() {
        args.push("predict".into());
    }
    let line = args.join(" ");
    let Some(out) = run_bounded(&args) else {
        return (line, Err(format!("no answer within {HANG_S} s")));
    };
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let outcome = match code {
        0 => {
            let says_feasible = stdout.contains("\"feasible\": true");
            // JSON writes a non-finite number as null: a feasible answer has no null time.
            if says_feasible && stdout.contains("\"time_per_iteration_s\": null") {
                Err("exit 0, feasible, with a non-finite time".into())
            } else {
                Ok(Some(says_feasible))
            }
        }
        2 => Ok(None),
        3 => Ok(Some(false)),
        _ => Err(format!(
            "exit {code}: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
    };
    (line, outcome)
}

/// The binary run on `args`, killed past [`HANG_S`] (then `None`).
fn run_bounded(args: &[String]) -> Option<std::process::Output> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackflow"))
        .args(args)
        .current_dir(common::root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Readers drain the pipes so that a long report cannot block the child.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(HANG_S) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    status.map(|status| std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// Sets a flag when dropped, so the watchdog stops even when the campaign panics.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A scratch copy of the shipped inputs for one worker.
fn scratch(worker: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackflow-fuzz-{}-{worker}", std::process::id()));
    for sub in ["tech_libs", "templates", "budgets", "workloads", "studies"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for entry in std::fs::read_dir(common::root().join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dir.join(sub).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    dir
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fuzz_campaign() {
    let executions = env_u64("STACKFLOW_FUZZ_EXECUTIONS", SHORT);
    let seed = env_u64("STACKFLOW_FUZZ_SEED", 1);
    let first = env_u64("STACKFLOW_FUZZ_FIRST", 0);
    let corpora: Vec<Vec<PathBuf>> = KINDS.iter().map(|k| corpus(k)).collect();
    let texts: Vec<Vec<String>> = corpora
        .iter()
        .map(|files| {
            files
                .iter()
                .map(|f| std::fs::read_to_string(common::root().join(f)).unwrap())
                .collect()
        })
        .collect();
    let workers = rayon::current_num_threads().max(1);
    let roots: Vec<PathBuf> = (0..=workers).map(scratch).collect();
    let tally = Tally::default();
    // Watchdog: each worker's current input and start; past HANG_S the run aborts.
    let current: Vec<Mutex<(Instant, String)>> = (0..=workers)
        .map(|_| Mutex::new((Instant::now(), String::new())))
        .collect();
    let busy: Vec<AtomicU64> = (0..=workers).map(|_| AtomicU64::new(0)).collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                for (w, slot) in current.iter().enumerate() {
                    if busy[w].load(Ordering::Relaxed) == 0 {
                        continue;
                    }
                    let (start, input) = &*slot.lock().unwrap();
                    if start.elapsed() > Duration::from_secs(HANG_S) {
                        eprintln!("fuzz: HANG over {HANG_S} s on {input}");
                        std::process::abort();
                    }
                }
            }
        });
        let _stop = SetOnDrop(&done);
        (first..first + executions).into_par_iter().for_each(|i| {
            let w = rayon::current_thread_index().unwrap_or(workers);
            let root = &roots[w];
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i);
            let start = Instant::now();
            let cli = i % CLI_EVERY == CLI_EVERY - 1;
            let k = (i % KINDS.len() as u64) as usize;
            let kind = if cli { "cli" } else { KINDS[k] };
            let (input, restore, outcome) = if cli {
                *current[w].lock().unwrap() = (start, format!("#{i} command line"));
                busy[w].store(1, Ordering::Relaxed);
                let (line, outcome) = run_cli(&mut rng);
                (line, None, Some(outcome))
            } else if kind == "strategy" {
                *current[w].lock().unwrap() = (start, format!("#{i} strategy"));
                busy[w].store(1, Ordering::Relaxed);
                let (text, outcome) = catch(|| run_strategy(&mut rng, root))
                    .unwrap_or_else(|panic| (String::from("?"), Err(panic)));
                (format!("strategy {text:?}"), None, Some(outcome))
            } else {
                let f = rng.gen_range(0..corpora[k].len());
                let rel = &corpora[k][f];
                let text = mutate(&texts[k][f], &mut rng);
                let path = root.join(rel);
                std::fs::write(&path, &text).unwrap();
                *current[w].lock().unwrap() = (start, format!("#{i} {}", rel.display()));
                busy[w].store(1, Ordering::Relaxed);
                let outcome = catch(|| run_file(kind, root, &path)).and_then(|r| r);
                (
                    format!("{}:\n{text}", rel.display()),
                    Some((path, texts[k][f].clone())),
                    Some(outcome.map_err(|e| e.to_string())),
                )
            };
            busy[w].store(0, Ordering::Relaxed);
            if let Some((path, original)) = restore {
                std::fs::write(path, original).unwrap();
            }
            let ms = start.elapsed().as_millis() as u64;
            tally.longest_ms.fetch_max(ms, Ordering::Relaxed);
            tally.executions.fetch_add(1, Ordering::Relaxed);
            let slot = if cli { 7 } else { k };
            tally.by_kind[slot].fetch_add(1, Ordering::Relaxed);
            match outcome.expect("every execution has an outcome") {
                Ok(None) => tally.refused.fetch_add(1, Ordering::Relaxed),
                Ok(Some(false)) => tally.infeasible.fetch_add(1, Ordering::Relaxed),
                Ok(Some(true)) => tally.feasible.fetch_add(1, Ordering::Relaxed),
                Err(why) => {
                    let finding = format!("#{i} {kind}: {why}\n{input}");
                    tally.findings.lock().unwrap().push(finding);
                    0
                }
            };
        });
    });
    std::panic::set_hook(previous_hook);
    for root in &roots {
        let _ = std::fs::remove_dir_all(root);
    }
    let findings = tally.findings.into_inner().unwrap();
    let kinds: Vec<String> = KINDS
        .iter()
        .chain(["cli"].iter())
        .zip(&tally.by_kind)
        .map(|(k, n)| format!("{k} {}", n.load(Ordering::Relaxed)))
        .collect();
    eprintln!(
        "fuzz: seed {seed}, {} executions ({}); refused {}, infeasible {}, feasible {}; \
         longest {} ms; {} findings",
        tally.executions.load(Ordering::Relaxed),
        kinds.join(", "),
        tally.refused.load(Ordering::Relaxed),
        tally.infeasible.load(Ordering::Relaxed),
        tally.feasible.load(Ordering::Relaxed),
        tally.longest_ms.load(Ordering::Relaxed),
        findings.len()
    );
    if !findings.is_empty() {
        let dir = common::root().join("target/fuzz-findings");
        std::fs::create_dir_all(&dir).unwrap();
        for (n, f) in findings.iter().enumerate() {
            std::fs::write(dir.join(format!("finding-{n}.txt")), f).unwrap();
        }
        panic!(
            "{} findings (written to {}); the first:\n{}",
            findings.len(),
            dir.display(),
            findings[0]
        );
    }
    // A whole campaign (not a replay of a few) ran every kind, and the mutations reached
    // feasible designs as well as refusals.
    if executions >= 1000 {
        assert!(tally.by_kind.iter().all(|n| n.load(Ordering::Relaxed) > 0));
        assert!(tally.feasible.load(Ordering::Relaxed) > 0);
        assert!(tally.refused.load(Ordering::Relaxed) > 0);
    }
}

/// A finite time above zero.
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Runs `f`, turning a panic into an error naming it.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("panic: {message}")
    })
}
