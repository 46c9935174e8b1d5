//! The library's error for work above the model (searches, optimization, studies,
//! validation): every stage's own error in one `thiserror` type, so the command line alone
//! decides how to print it (`anyhow` lives only in `src/cli/`).
//!
//! An infeasible design is not an error: it is a value with its typed violations
//! (`crate::perf::Violation`). Errors are inputs that cannot be evaluated at all.

use crate::config::ConfigError;
use crate::distributed::FitError;
use crate::parallel::strategy::StrategyError;

/// Why a search, an optimization, a study point or a validation case could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// An input file could not be read, parsed or validated.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A strategy does not parse or does not fit the system.
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    /// A strategy does not fit the workload.
    #[error(transparent)]
    Fit(#[from] FitError),
    /// A setting out of its range.
    #[error("{setting} = {value}: {expected}")]
    Setting {
        setting: &'static str,
        value: String,
        expected: &'static str,
    },
    /// The budget solver failed in one restart.
    #[error("restart {restart}: {message}")]
    Solver { restart: usize, message: String },
    /// No strategy of those tried runs the workload.
    #[error("no strategy of the {tried} tried runs workload {workload} on {devices} devices")]
    NoStrategy {
        tried: usize,
        workload: String,
        devices: u64,
    },
}
