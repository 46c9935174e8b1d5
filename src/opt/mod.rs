//! Search and optimization (DeepFlow Sec. 7, 9.2): the budget problem and its projected
//! gradient solver, strategy search, co-optimization and sensitivities.

pub mod budget;
pub mod problem;
pub mod simplex;
pub mod solver;

pub use problem::{BudgetProblem, Resource, Share};
pub use simplex::{SimplexGroup, Simplices};
pub use solver::ProjectedGradient;
