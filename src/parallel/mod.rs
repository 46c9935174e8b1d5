//! Parallelism: the strategy vocabulary (DeepFlow Sec. 3.3 and 5.1's RC/CR kernel splits,
//! Megatron's tensor, sequence, context and pipeline parallelism, data parallelism with
//! ZeRO, expert parallelism, MAD Max Sec. 4's hierarchical `(intra, inter)` notation) and
//! the mapping of a strategy's axes onto a network's devices (DeepFlow Sec. 5.2).
//!
//! Owns: [`Strategy`] (raw text or YAML -> checked strategy) with its derived quantities as
//! methods; [`Axis`]; [`mapping`] (orderings of the axes and their placement onto devices).
//! Imports [`crate::network`] (to measure the groups a placement makes) and nothing
//! downstream.
//!
//! A new strategy axis: a variant of [`Axis`] if it lays groups onto devices, a field of
//! [`Strategy`] with its short-form token in `Strategy::parse` and `Display`, and its
//! degree in `Strategy::degrees`.
pub mod axis;
pub mod mapping;
pub mod strategy;

pub use axis::Axis;
pub use mapping::Mapping;
pub use strategy::Strategy;
