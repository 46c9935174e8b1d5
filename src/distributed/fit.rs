//! Whether a strategy fits a workload at all: devices, pipeline stages, tensor and expert
//! parallelism, batch and micro-batch splits.

/// A strategy that does not fit the workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strategy {strategy} does not fit workload {workload}: {message}")]
pub struct FitError {
    pub strategy: String,
    pub workload: String,
    pub message: String,
}
