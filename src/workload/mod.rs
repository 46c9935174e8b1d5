//! Workloads (DeepFlow Sec. 4.1 and 6; MAD Max Sec. 3 and 4.2): what one training iteration
//! computes, read from `workloads/*.yaml` and lowered to a [`Graph`] of kernels.
//!
//! Four kinds, chosen by the file's `kind` key:
//! - `gemm`: one matrix product, exactly `{version, kind, m, k, n, precision}`;
//! - `lstm_lm`: the LSTM language model of DeepFlow Sec. 9;
//! - `transformer`: a decoder-only language model (GPT-3, LLaMA, Megatron);
//! - `dlrm`: a recommendation model with embedding tables, MLPs and feature interaction.
//!
//! Owns: one file per kind (`gemm.rs`, `lstm.rs`, `transformer.rs`, `dlrm.rs`: the checked
//! struct, its checks and its lowering), the [`Graph`] and its `Builder` (`graph.rs`: the
//! kernels of forward, backward, recomputation and update, with the memory they keep),
//! serving graphs ([`inference`]; a recommendation model serves through `dlrm.rs`, forward
//! only). Imports the configuration stage only.
//!
//! A new workload kind: a raw struct in `crate::config::raw`, a file here with its checked
//! struct, its checks and its lowering through the `Builder`, a [`Workload`] variant, its
//! `kind` in `Workload::from_yaml`. Whatever the later stages need to know of it travels in
//! the [`Graph`] (parameters by position, experts, optimizer state, trainable layers and
//! adapters), not as a match on the kind.

mod dlrm;
mod gemm;
mod graph;
pub mod inference;
mod lstm;
mod transformer;

use std::path::Path;

use serde::Serialize;

pub use graph::{
    optimizer_state_bytes, AdapterGemms, AttentionShape, Footprint, Graph, HostTables, Kernel,
    KernelClass, LayerPart, LayerType, Op, Phase, Position, Split,
};

use crate::config::raw::{GemmRaw, PrecisionsRaw, WorkloadHeader};
use crate::config::{parse_yaml, Checker, ConfigError, Source};
use crate::domain::{Precision, Precisions, Recompute};
pub use dlrm::{Dlrm, DlrmInference, FeatureTransformer, TableGroup};
pub use gemm::Gemm;
pub use lstm::Lstm;
pub use transformer::{Lora, LoraTarget, Moe, Speculative, Transformer};

use dlrm::{dlrm, dlrm_graph};
use gemm::gemm_graph;
use lstm::{lstm, lstm_graph};
use transformer::transformer_pass;
use transformer::{transformer, transformer_graph};
/// A checked workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Gemm(Gemm),
    LstmLm(Lstm),
    Transformer(Transformer),
    Dlrm(Dlrm),
}

const KINDS: &str = "gemm, lstm_lm, transformer, dlrm";

impl Workload {
    /// Reads and checks a workload file.
    pub fn load(source: Source, path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        Self::from_yaml(&file, &source.read(path)?)
    }

    /// Parses and checks workload YAML text; `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let header: WorkloadHeader = parse_yaml(file, text)?;
        let check = Checker { file };
        check.version(header.version)?;
        let stem = Path::new(file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match header.kind.as_str() {
            "gemm" => {
                let raw: GemmRaw = parse_yaml(file, text)?;
                Ok(Workload::Gemm(Gemm {
                    m: check.positive_count("m", raw.m)?,
                    k: check.positive_count("k", raw.k)?,
                    n: check.positive_count("n", raw.n)?,
                    precision: raw.precision,
                }))
            }
            "lstm_lm" => lstm(&check, parse_yaml(file, text)?, stem),
            "transformer" => transformer(&check, parse_yaml(file, text)?, stem),
            "dlrm" => dlrm(&check, parse_yaml(file, text)?, stem),
            other => Err(ConfigError::invalid(
                file,
                "kind",
                other,
                format!("one of {KINDS}"),
            )),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Workload::Gemm(g) => format!("gemm {}x{}x{} {}", g.m, g.k, g.n, g.precision.name()),
            Workload::LstmLm(w) => w.name.clone(),
            Workload::Transformer(w) => w.name.clone(),
            Workload::Dlrm(w) => w.name.clone(),
        }
    }

    /// Every precision the workload's matrix products compute in, by the key that set it
    /// (the architecture must support each): the GEMM inputs' and the activations' (which
    /// attention's products and an output layer use), named `precisions.<role>` where that
    /// overrides what `precision` implies.
    pub fn precisions(&self) -> Vec<(String, Precision)> {
        let (precision, roles) = match self {
            Workload::Gemm(g) => return vec![("precision".into(), g.precision)],
            Workload::LstmLm(w) => (w.precision, w.precisions),
            Workload::Transformer(w) if w.inference.is_some() => {
                let mut v = vec![("precision".into(), w.precision)];
                // FP8 weights: FP8 products.
                if w.weights == Some(crate::domain::StorageFormat::Fp8) {
                    v.push(("inference.weights".into(), Precision::Fp8));
                }
                return v;
            }
            Workload::Transformer(w) => (w.precision, w.precisions),
            Workload::Dlrm(w) => (w.precision, w.precisions),
        };
        let implied = Precisions::training(precision).roles();
        roles.roles()[..2]
            .iter()
            .zip(implied)
            .map(|(&(role, p), (_, default))| {
                let key = if p == default {
                    "precision".to_string()
                } else {
                    format!("precisions.{role}")
                };
                (key, p)
            })
            .collect()
    }

    /// The served model and its batch, for a transformer with an `inference:` section.
    pub fn serving(&self) -> Option<(&Transformer, &inference::InferenceSpec)> {
        match self {
            Workload::Transformer(t) => t.inference.as_ref().map(|spec| (t, spec)),
            _ => None,
        }
    }

    /// The queries a served recommendation model takes per batch (`None`: training, or
    /// another kind).
    pub fn queries_per_batch(&self) -> Option<u64> {
        match self {
            Workload::Dlrm(w) => w.inference.map(|i| i.batch),
            _ => None,
        }
    }

    /// A recommendation model's embedding table groups (`None` for other kinds).
    pub fn table_groups(&self) -> Option<&[TableGroup]> {
        match self {
            Workload::Dlrm(w) => Some(&w.embeddings),
            _ => None,
        }
    }

    /// Tables of each group kept in host memory (empty: none, or not a recommendation
    /// model).
    pub fn host_tables(&self) -> &[u64] {
        match self {
            Workload::Dlrm(w) => &w.host_tables,
            _ => &[],
        }
    }

    /// Tables of each group beyond `room_bytes` of device memory, the hottest kept
    /// ([`Dlrm::tables_beyond`]; empty for a workload without tables).
    pub fn tables_beyond(&self, room_bytes: f64) -> Vec<u64> {
        match self {
            Workload::Dlrm(w) => w.tables_beyond(room_bytes),
            _ => Vec::new(),
        }
    }

    /// The same workload with `per_group[i]` of table group i in host memory (a workload
    /// without tables unchanged).
    pub fn with_host_tables(&self, per_group: &[u64]) -> Workload {
        match self {
            Workload::Dlrm(w) => Workload::Dlrm(w.with_host_tables(per_group)),
            other => other.clone(),
        }
    }

    /// Lowers the workload to its kernels with activation recomputation `recompute` where
    /// the kind has the choice (transformers); other kinds lower as they are.
    pub fn graph_with(&self, recompute: Option<Recompute>) -> Graph {
        match (self, recompute) {
            (Workload::Transformer(t), Some(r)) => {
                let mut t = t.clone();
                t.recompute = r;
                transformer_graph(&t)
            }
            _ => self.graph(),
        }
    }

    /// Lowers the workload to its kernels.
    pub fn graph(&self) -> Graph {
        match self {
            Workload::Gemm(g) => gemm_graph(g),
            Workload::LstmLm(w) => lstm_graph(w),
            Workload::Transformer(w) => transformer_graph(w),
            Workload::Dlrm(w) => dlrm_graph(w),
        }
    }
}

/// A training workload's precision per role: what `precision` implies
/// ([`Precisions::training`]), each role `precisions:` names overridden.
pub(super) fn roles(precision: Precision, raw: Option<PrecisionsRaw>) -> Precisions {
    let implied = Precisions::training(precision);
    let Some(r) = raw else {
        return implied;
    };
    Precisions {
        gemm_inputs: r.gemm_inputs.unwrap_or(implied.gemm_inputs),
        activations: r.activations.unwrap_or(implied.activations),
        communication: r.communication.unwrap_or(implied.communication),
        weights: r.weights.unwrap_or(implied.weights),
        gradients: r.gradients.unwrap_or(implied.gradients),
        optimizer_state: r.optimizer_state.unwrap_or(implied.optimizer_state),
    }
}
