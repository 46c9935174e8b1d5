//! # stackflow
//!
//! Cross-stack pathfinding for machine-learning hardware, after DeepFlow (Ardalani, Pal,
//! Gupta). This release holds the first stage of the pipeline: a technology library, an
//! architecture template and area/power/perimeter budgets become a derived accelerator
//! (compute throughput, memory capacities and bandwidths, network bandwidths), with the
//! constraint that binds each component.
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
//! ```
//!
//! Units: SI inside the model (seconds, bytes, FLOP/s, watts, volts, hertz), except areas
//! in mm2 and lengths in mm, which every field name says. Input files carry the unit in
//! every key (`area_mm2`, `data_rate_gbps` = 1e9 bit/s, `device_capacity_gib` = 2^30 bytes).

pub mod budget;
pub mod config;
pub mod design;
pub mod generator;
pub mod perf;
pub mod tech;
pub mod template;
pub mod workload;

pub use design::{Design, DesignFiles};
pub use generator::{generate, Architecture};
