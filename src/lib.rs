//! # stackflow
//!
//! Cross-stack pathfinding for machine-learning hardware, after DeepFlow (Ardalani, Pal,
//! Gupta). A technology library, an architecture template and area/power/perimeter budgets
//! become a derived accelerator ([`generator`]); a workload becomes a graph of kernels
//! ([`workload`]), each timed on that accelerator by a hierarchical roofline ([`perf`]).
//!
//! ```
//! use std::path::Path;
//! use stackflow::config::Source;
//! use stackflow::design::{Design, DesignFiles};
//!
//! let design = Design::load(DesignFiles {
//!     source: Source::Embedded,
//!     budget: Path::new("budgets/v100.yaml"),
//!     template: None,
//!     tech: None,
//! })
//! .unwrap();
//! let arch = stackflow::generator::generate(&design);
//! assert!(arch.feasible());
//! // V100: 125 TFLOP/s dense fp16 tensor peak, 900 GB/s HBM2.
//! assert!((arch.peak_flops_per_s / 125e12 - 1.0).abs() < 0.10);
//! assert!((arch.memory_bandwidth_bytes_per_s / 900e9 - 1.0).abs() < 0.10);
//!
//! // One training iteration of the LSTM language model on it.
//! let lstm = stackflow::workload::Workload::load(Source::Embedded, Path::new("workloads/lstm-o1.yaml"))
//!     .unwrap();
//! let prediction = stackflow::perf::Evaluator::new(&arch).predict(&lstm.graph(), &arch.violations);
//! assert!(prediction.time_per_iteration_s > 0.0);
//! assert!(!prediction.feasible); // 38 billion parameters do not fit in 16 GiB
//! ```
//!
//! ## The pipeline, upstream first
//!
//! Imports flow one way, down this list (`tests/architecture.rs` fails on an import against
//! it, and on `anyhow` or `indicatif` outside the command line):
//!
//! | module | owns |
//! |---|---|
//! | [`domain`] | the shared vocabulary: precisions, topologies, optimizers, recomputation |
//! | [`violation`] | typed reasons a design or mapping cannot run |
//! | [`config`] | the one place that parses YAML/JSON; raw unit-suffixed file structs, errors |
//! | [`import`] | DeepFlow's and Calculon's input files turned into stackflow's |
//! | [`tech`] | technology libraries |
//! | [`template`] | architecture templates |
//! | [`budget`] | area, power and perimeter budgets and their split |
//! | [`design`] | a budget with its template and technology, loaded together |
//! | [`generator`] | voltage-frequency-area scaling: a design -> an [`Architecture`] |
//! | [`workload`] | GEMM, LSTM, transformer, DLRM lowered to a graph of kernels |
//! | [`perf`] | the single-device hierarchical roofline with tiling |
//! | [`network`] | fabrics, topologies, routing, link loads, collectives, system files |
//! | [`parallel`] | strategies, parallel axes, device mapping |
//! | [`distributed`] | the evaluator of one strategy and mapping; serving |
//! | [`error`] | the library's error for work above the model |
//! | [`opt`] | budget optimization, strategy search, co-optimization |
//! | [`study`] | sweeps over roadmap axes |
//! | [`validate`] | replays published measurements |
//!
//! | [`cli`] | the front end: arguments, printing, `anyhow`; the binary and the Python package call it |
//!
//! The command line ([`cli`]) sits on top and alone reads arguments, prints and uses `anyhow`
//! and `indicatif`; `src/main.rs` runs it, and the Python package (`python/`) calls
//! [`cli::capture`] to get a command's `--json` answer as a value, in-process.
//!
//! Units: SI inside the model (seconds, bytes, FLOP/s, watts, volts, hertz), except areas
//! in mm2 and lengths in mm, which every field name says. Input files carry the unit in
//! every key (`area_mm2`, `data_rate_gbps` = 1e9 bit/s, `device_capacity_gib` = 2^30 bytes).

pub mod budget;
pub mod cli;
pub mod config;
pub mod design;
pub mod distributed;
pub mod domain;
pub mod error;
pub mod generator;
pub mod import;
pub mod network;
pub mod opt;
pub mod parallel;
pub mod perf;
pub mod study;
pub mod tech;
pub mod template;
pub mod validate;
pub mod violation;
pub mod workload;

pub use design::{Design, DesignFiles};

pub use generator::{generate, Architecture};
