//! Distributed training (DeepFlow Sec. 5-6, MAD Max Sec. 4.3, Zion Sec. IV-C): strategies,
//! systems and their networks, device mapping, collectives and the pipeline schedule.
pub mod collective;
pub mod mapping;
pub mod network;
pub mod predict;
pub mod schedule;
pub mod serve;
pub mod strategy;
pub mod system;

pub use predict::{predict, DistPrediction, FitError};
pub use serve::{predict_inference, DistInference};
pub use strategy::Strategy;
pub use system::System;
