//! The distributed evaluator (DeepFlow Sec. 5-6, MAD Max Sec. 4.3, Zion Sec. IV-C): one
//! workload, one architecture, one network, one strategy and one mapping priced as a
//! training iteration (per-stage kernel work, collectives, memory, the pipeline schedule)
//! or as distributed serving.
//!
//! Owns: [`predict`] (the best mapping of a strategy), the per-stage work and memory,
//! [`schedule`] (the pipeline schedules and the shared communication stream), [`serve`].
//! Imports [`crate::parallel`], [`crate::network`], [`crate::perf`] and nothing downstream.
mod fit;
mod memory;
pub mod predict;
mod report;
pub mod schedule;
pub mod serve;
mod timeline;
mod work;

pub use fit::FitError;
pub use predict::{predict, Plan};
pub use report::{CommReport, ComputeReport, DistPrediction};
pub use serve::{predict_inference, DistInference};
