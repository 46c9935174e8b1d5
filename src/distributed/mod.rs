//! The distributed evaluator (DeepFlow Sec. 5-6, MAD Max Sec. 4.3, Zion Sec. IV-C): one
//! workload, one architecture, one network, one strategy and one mapping priced as a
//! training iteration (per-stage kernel work, collectives, memory, the pipeline schedule)
//! or as distributed serving.
//!
//! Owns, in the order an evaluation runs:
//! - `fit.rs`: whether the strategy fits the workload (a [`FitError`] when not) and the batch
//!   split into micro-batches;
//! - `work.rs`: each stage's share of every kernel under the strategy's splits (DeepFlow
//!   Sec. 5.1's super-graph: tensor and sequence parallelism after Megatron, RC/CR of Sec.
//!   3.3, experts, table-wise embeddings) and the exact bytes of the blocking collectives;
//! - `memory.rs`: the fullest device's weights, gradients, optimizer state (ZeRO 1-3) and
//!   activations in flight, and the out-of-memory violations;
//! - [`Plan`]: all of the above, once per (workload, architecture, network, strategy);
//! - `timeline.rs`: one mapping priced (collectives on its group links, ZeRO-3 gathers,
//!   gradient buckets sharing the stream, MAD Max Sec. 4.3), scheduled by [`pipeline`]
//!   (GPipe in closed form, 1F1B and interleaved 1F1B in rounds with periodic jumps;
//!   Narayanan et al. 2021), whose reference is [`schedule`]'s event simulation, reported
//!   (`report.rs`); lower bounds for a mapping and for a strategy, which searches prune with;
//!   [`trace`]: the iteration as a timeline of tracks per stage and fabric;
//! - [`predict()`]: the plan under the best mapping that
//!   [`crate::parallel::mapping::best_placement`] finds (orderings priced from the lowest
//!   bound up); [`Workspace`]: kernel times and graphs kept between predictions;
//!   [`predict::Fitted`]: a strategy's fit and memory before timing (what a search checks
//!   first); [`serve`]: serving a static batch; [`load`]: serving under load (requests over
//!   time from a rate, a trace or a closed loop of clients on continuously batching engines,
//!   chunked prefill, paged KV cache, prefill/decode pools, goodput within an SLO and its
//!   fluid steady state, priced through [`serve`]); a new engine policy (a swap policy, a
//!   scheduler) belongs in `load.rs`'s replica loop;
//! - [`host`]: embedding tables in the CPUs' DDR (Zion Sec. IV, TPU v4 Fig. 9): which
//!   tables a system's host keeps ([`placed`]) and what the hosts spend on them per
//!   iteration, beside the devices' step ([`HostReport`]);
//! - [`layered`]: per-layer-type strategies (MAD Max Sec. 4): one plan per layer type over
//!   its own kernels, composed into one iteration (`timeline::finish_parts`) with the
//!   resharding between types split differently.
//!
//! Imports [`crate::parallel`], [`crate::network`], [`crate::perf`] and nothing downstream.
//! A new strategy axis: its split of each kernel in `work.rs`, its memory in `memory.rs`,
//! its collectives in `timeline.rs`.
mod fit;
pub mod host;
pub mod layered;
pub mod load;
mod memory;
pub mod pipeline;
pub mod predict;
mod report;
pub mod schedule;
pub mod serve;
pub mod timeline;
pub mod trace;
mod work;

pub use fit::FitError;
pub use host::{placed, HostReport};
pub use layered::{predict_layered, LayerStrategy, LayeredPlan, LayeredPrediction};
pub use predict::{evaluate, evaluate_with, predict, predict_with, Plan, Workspace};
pub use report::{CommReport, ComputeReport, DistPrediction, LayerTimes};
pub use serve::{predict_inference, DistInference};
pub use trace::Trace;
pub use work::{device_kernels, micro_batch_kernels};
