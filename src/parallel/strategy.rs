//! Parallelism strategies: DeepFlow's kernel (RC / CR distributed GEMM), data and pipeline
//! parallelism (Sec. 3.3), Megatron tensor and sequence parallelism, ZeRO / FSDP sharding
//! and expert parallelism.
//!
//! A strategy comes from a YAML file, from the paper's notation (`RC-4-2-d8-p2`,
//! `CR-16-d4-p1`) or from a short form (`t8-p8-d16-mb1-i3-sp-rc=selective`); all three give
//! the same [`Strategy`].

use std::fmt;

use serde::Serialize;

use super::axis::Axis;
use crate::config::raw::StrategyRaw;
use crate::config::{parse_yaml, Checker, ConfigError};
use crate::domain::KernelSplitKind;
use crate::domain::Recompute;

/// Examples printed with every strategy-string error.
pub const EXAMPLES: &str = "RC-4-2-d8-p2, CR-16-d4-p1 or t8-p8-d16-mb1-i3-sp-rc=selective";

/// Distributed GEMM (DeepFlow Sec. 3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KernelSplit {
    /// Row-column (inner product): the first operand's rows over `kp1` devices, the second's
    /// columns over `kp2`.
    Rc { kp1: u64, kp2: u64 },
    /// Column-row (outer product): the first operand's columns and the second's rows over
    /// `kp1` devices; partial products are summed.
    Cr { kp1: u64 },
}

impl KernelSplit {
    pub fn degree(self) -> u64 {
        match self {
            KernelSplit::Rc { kp1, kp2 } => kp1.saturating_mul(kp2),
            KernelSplit::Cr { kp1 } => kp1,
        }
    }
}

/// How context parallelism gives each rank the keys and values of the whole sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextAttention {
    /// Ring attention (Liu et al. 2023; Megatron-LM's context parallelism): the key/value
    /// chunks travel round the group, each step's send beside the attention on the chunk
    /// before; backward sends the chunks and their gradients round again.
    Ring,
    /// All-gather (Llama 3, Dubey et al. 2024, Sec. 3.3.2): the keys and values of the
    /// whole sequence gathered before the attention, their gradients reduce-scattered after
    /// its backward; both on the critical path.
    AllGather,
}

impl ContextAttention {
    pub fn name(self) -> &'static str {
        match self {
            ContextAttention::Ring => "ring",
            ContextAttention::AllGather => "all_gather",
        }
    }
}

/// How one training iteration is spread over devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Strategy {
    /// Model replicas, each on its own share of the batch.
    pub data: u64,
    /// Megatron tensor parallelism: column-parallel then row-parallel linear layers.
    pub tensor: u64,
    /// Pipeline stages (layer parallelism).
    pub pipeline: u64,
    /// Context parallelism: ranks that each hold 1/context of every sequence's tokens
    /// (two chunks of 1/(2 context), one from each end, so that causal attention loads them
    /// evenly), exchanging keys and values for the attention.
    pub context: u64,
    /// How the context-parallel ranks exchange keys and values; `None` prices both under
    /// each mapping and takes the cheaper.
    pub context_attention: Option<ContextAttention>,
    /// DeepFlow kernel parallelism, instead of `tensor`.
    pub kernel: Option<KernelSplit>,
    /// Samples per micro-batch; 0 means the whole per-replica batch at once.
    pub micro_batch: u64,
    /// Model chunks per pipeline stage (interleaved 1F1B when > 1).
    pub interleave: u64,
    /// GPipe (all forwards, then all backwards) instead of 1F1B.
    pub gpipe: bool,
    /// Megatron sequence parallelism in the tensor-parallel group.
    pub sequence_parallel: bool,
    /// Recomputation override; `None` keeps the workload's.
    pub recompute: Option<Recompute>,
    /// ZeRO stage over the data-parallel group: 1 shards optimizer state, 2 also gradients,
    /// 3 also weights (FSDP).
    pub zero: u8,
    /// Expert-parallel degree (inside the data-parallel group).
    pub expert: u64,
    /// ZeRO-3 only: hybrid sharding (PyTorch HSDP; MAD Max's `(FSDP, DDP)`): weights are
    /// sharded over groups of this many consecutive data-parallel ranks, which replicate
    /// each other and all-reduce their gradient shards; 0 shards over the whole data group.
    pub shard: u64,
    /// ZeRO-3 only: whether a stage's weights are gathered ahead of its compute, beside the
    /// previous step (PyTorch FSDP's prefetching), or just in time, on the critical path
    /// (a compiler that cannot hoist the gather out of the layer loop).
    pub prefetch: bool,
    /// Whether data-parallel gradient synchronisation runs beside the backward pass, bucket
    /// by bucket (PyTorch DDP, FSDP; the default), or after it as one flat all-reduce (or
    /// ZeRO-3's reduce-scatters on the critical path), as Megatron-era stacks ran it.
    pub grad_overlap: bool,
    /// Whether a pipeline stage sends its activations (and gradients) to the next beside
    /// its compute (asynchronous send/receive; the default) or blocks until the send is done.
    pub send_overlap: bool,
    /// Whether each tensor-parallel rank of a pipeline stage sends its 1/t share of the
    /// activations handed to the next stage, which all-gathers them over its own
    /// tensor-parallel group (Megatron-LM's scatter/gather optimisation, Narayanan et al.
    /// 2021 Sec. 4.1, on by default in its 2021 releases), or every rank sends them whole
    /// (the default). Sequence parallelism already hands them on sharded.
    pub scatter_sends: bool,
    /// Whether tensor-parallel collectives run beside the linear layers next to them,
    /// decomposed and pipelined with the products (Megatron-LM's `--tp-comm-overlap` with
    /// Transformer Engine's userbuffers), or block them (the default, as Megatron-LM's own
    /// default).
    pub tp_overlap: bool,
    /// A pinned placement of the parallel dimensions, innermost (nearest devices) first;
    /// `None` tries every ordering and keeps the best.
    pub placement: Option<Placement>,
    /// Layers of the first and last pipeline stages, the stages between sharing the rest
    /// evenly (`ends=7.7`); `None`: an even split, or where the layers do not divide, the
    /// one [`Strategy::stage_layers`] chooses.
    /// (16 bits each: the strategy is copied and hashed throughout a search.)
    pub ends: Option<(u16, u16)>,
}

/// Parallel dimensions in placement order, innermost first (at most the six axes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    axes: [Axis; Axis::ALL.len()],
    len: usize,
}

impl Placement {
    /// `None` when an axis repeats or the list is empty.
    pub fn new(axes: &[Axis]) -> Option<Placement> {
        let repeats = axes.iter().enumerate().any(|(i, a)| axes[..i].contains(a));
        if axes.is_empty() || repeats {
            return None;
        }
        let mut all = Axis::ALL;
        all[..axes.len()].copy_from_slice(axes);
        Some(Placement {
            axes: all,
            len: axes.len(),
        })
    }

    pub fn axes(&self) -> &[Axis] {
        &self.axes[..self.len]
    }
}

impl Serialize for Placement {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.axes().serialize(serializer)
    }
}

/// Repeated layers per pipeline stage: `first` on the first stage, `last` on the last,
/// `middle` on each between ([`Strategy::stage_split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageSplit {
    pub first: u64,
    pub middle: u64,
    pub last: u64,
    pub stages: u64,
}

impl StageSplit {
    /// Layers of stage `stage`.
    pub fn layers(&self, stage: u64) -> u64 {
        match stage {
            0 => self.first,
            s if s + 1 == self.stages => self.last,
            _ => self.middle,
        }
    }

    /// The first repeated layer of stage `stage`.
    pub fn start(&self, stage: u64) -> u64 {
        match stage {
            0 => 0,
            s => self.first + (s - 1) * self.middle,
        }
    }
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy {
            data: 1,
            tensor: 1,
            pipeline: 1,
            context: 1,
            context_attention: None,
            kernel: None,
            micro_batch: 0,
            interleave: 1,
            gpipe: false,
            sequence_parallel: false,
            recompute: None,
            zero: 0,
            expert: 1,
            shard: 0,
            prefetch: true,
            grad_overlap: true,
            send_overlap: true,
            scatter_sends: false,
            tp_overlap: false,
            placement: None,
            ends: None,
        }
    }
}

/// A strategy that does not parse or does not fit the system and workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strategy {input:?}: {message}")]
pub struct StrategyError {
    pub input: String,
    pub message: String,
}

impl Strategy {
    /// The degree of every axis of [`Axis::ALL`] (1 where unused).
    pub fn degrees(&self) -> [u64; Axis::ALL.len()] {
        let (kp1, kp2) = match self.kernel {
            Some(KernelSplit::Rc { kp1, kp2 }) => (kp1, kp2),
            Some(KernelSplit::Cr { kp1 }) => (kp1, 1),
            None => (1, 1),
        };
        [
            self.tensor,
            kp1,
            kp2,
            self.data,
            self.pipeline,
            self.context,
        ]
    }

    /// Devices a layer's weights are sharded over: RC's columns, CR's shared dimension, or
    /// the tensor-parallel group.
    pub fn weight_shards(&self) -> u64 {
        match self.kernel {
            Some(KernelSplit::Rc { kp2, .. }) => kp2,
            Some(KernelSplit::Cr { kp1 }) => kp1,
            None => self.tensor,
        }
    }

    /// Devices holding the same weight shard: the data replicas, and RC's row groups.
    pub fn weight_replicas(&self) -> u64 {
        match self.kernel {
            Some(KernelSplit::Rc { kp1, .. }) => self.data * kp1,
            _ => self.data,
        }
    }

    /// How many ways a layer's activations split: (activations in general, those every
    /// tensor-parallel rank keeps whole unless sequence parallelism splits them).
    pub fn activation_split(&self) -> (f64, f64) {
        match self.kernel {
            Some(KernelSplit::Rc { kp1, kp2 }) => ((kp1 * kp2) as f64, kp1 as f64),
            Some(KernelSplit::Cr { .. }) => (1.0, 1.0),
            None => (
                self.tensor as f64,
                if self.sequence_parallel {
                    self.tensor as f64
                } else {
                    1.0
                },
            ),
        }
    }

    /// Devices whose gradients of one weight shard are summed: its replicas
    /// ([`Strategy::weight_replicas`]) and the context-parallel ranks, each of which saw
    /// its own share of the tokens.
    pub fn gradient_replicas(&self) -> u64 {
        self.weight_replicas() * self.context
    }

    /// Data-parallel ranks ZeRO-1/2 shard optimizer state (and gradients) over, with the
    /// context-parallel ranks (Megatron-LM's distributed optimizer shards over both).
    pub fn zero_group(&self) -> u64 {
        self.shard_group() * self.context
    }

    /// The axes a stage's gradients synchronise over after the backward steps (RC's rows
    /// too; the context-parallel ranks first, then the replicas). Under ZeRO-3 the shard
    /// group already reduce-scattered every micro-batch's; with hybrid sharding the shard
    /// groups then all-reduce their shards.
    pub fn gradient_sync_axes(&self) -> Vec<Axis> {
        match (self.kernel, self.zero >= 3) {
            (Some(KernelSplit::Rc { .. }), false) => vec![Axis::Kp1, Axis::Data],
            (Some(KernelSplit::Rc { .. }), true) => vec![Axis::Kp1],
            (_, false) if self.context > 1 => vec![Axis::Context, Axis::Data],
            (_, false) => vec![Axis::Data],
            (_, true) if self.shard > 0 => vec![Axis::ShardReplica],
            (_, true) => vec![],
        }
    }

    /// Data-parallel ranks ZeRO shards a weight over: the shard group under hybrid
    /// sharding, else every data-parallel rank.
    pub fn shard_group(&self) -> u64 {
        if self.shard > 0 {
            self.shard
        } else {
            self.data
        }
    }

    /// The axis ZeRO-3 gathers weights and reduce-scatters gradients over.
    pub fn shard_axis(&self) -> Axis {
        if self.shard > 0 {
            Axis::Shard
        } else {
            Axis::Data
        }
    }

    /// Whether context parallelism splits a sequence of `sequence` tokens: into 2 x context
    /// chunks, each rank taking one from either end (Megatron-LM's causal load balance).
    pub fn splits_sequence(&self, sequence: u64) -> bool {
        sequence % self.context == 0 && (sequence / self.context) % 2 == 0
    }

    /// Devices one copy of the strategy occupies (saturating: degrees whose product
    /// overflows match no system).
    pub fn devices(&self) -> u64 {
        self.data
            .saturating_mul(self.model_degree())
            .saturating_mul(self.pipeline)
            .saturating_mul(self.context)
    }

    /// Devices one layer's kernels are split over (tensor or kernel parallelism).
    pub fn model_degree(&self) -> u64 {
        self.kernel.map_or(self.tensor, KernelSplit::degree)
    }

    /// Parses the paper's notation or the short form.
    pub fn parse(text: &str) -> Result<Strategy, StrategyError> {
        let fail = |message: String| StrategyError {
            input: text.to_string(),
            message: format!("{message}; expected a string such as {EXAMPLES}"),
        };
        let mut s = Strategy::default();
        let tokens: Vec<&str> = text.trim().split('-').collect();
        if tokens.iter().any(|t| t.is_empty()) {
            return Err(fail("empty field between dashes".into()));
        }
        let number = |token: &str, what: &str| -> Result<u64, StrategyError> {
            match token.parse::<u64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(fail(format!(
                    "{what} = {token:?} is not an integer from 1 to {}",
                    u64::MAX
                ))),
            }
        };
        let mut i = 0;
        let mut seen: Vec<String> = Vec::new();
        while i < tokens.len() {
            let token = tokens[i];
            let lower = token.to_ascii_lowercase();
            let (key, value) = split_key(&lower);
            if seen.iter().any(|k| k == key) {
                return Err(fail(format!("{key:?} given twice")));
            }
            match key {
                "rc" | "cr" if value.is_empty() && !lower.contains('=') => {
                    let kp1 = number(tokens.get(i + 1).copied().unwrap_or(""), "KP1")?;
                    if key == "rc" {
                        let kp2 = number(tokens.get(i + 2).copied().unwrap_or(""), "KP2")?;
                        s.kernel = Some(KernelSplit::Rc { kp1, kp2 });
                        i += 2;
                    } else {
                        s.kernel = Some(KernelSplit::Cr { kp1 });
                        i += 1;
                    }
                    seen.push("kernel".into());
                }
                "d" => s.data = number(value, "d (data parallelism)")?,
                "t" => s.tensor = number(value, "t (tensor parallelism)")?,
                "p" => s.pipeline = number(value, "p (pipeline stages)")?,
                "cp" => s.context = number(value, "cp (context parallelism)")?,
                "cp=" => {
                    s.context_attention = Some(match value {
                        "ring" => ContextAttention::Ring,
                        "gather" => ContextAttention::AllGather,
                        _ => {
                            return Err(fail(format!(
                                "cp={value}: context-parallel attention passes keys and \
                                 values round a ring (cp=ring) or all-gathers them (cp=gather)"
                            )))
                        }
                    })
                }
                "mb" => s.micro_batch = number(value, "mb (micro-batch)")?,
                "i" => s.interleave = number(value, "i (interleave)")?,
                "e" => s.expert = number(value, "e (expert parallelism)")?,
                "hs" => s.shard = number(value, "hs (hybrid shard group)")?,
                "z" => {
                    let z = value.parse::<u8>().ok().filter(|z| *z <= 3);
                    s.zero = z.ok_or_else(|| fail(format!("z{value}: ZeRO stage must be 0-3")))?;
                }
                "sp" if value.is_empty() => s.sequence_parallel = true,
                "order=" => {
                    let axes: Option<Vec<Axis>> = value.split('.').map(Axis::from_letter).collect();
                    match axes.as_deref().and_then(Placement::new) {
                        Some(p) => s.placement = Some(p),
                        _ => {
                            return Err(fail(format!(
                                "order={value}: list distinct axes innermost first from t, k1, \
                                 k2, d, p, c, joined by dots (order=t.d)"
                            )))
                        }
                    }
                }
                "prefetch=" => {
                    s.prefetch = switch(value, ("on", "off"), || {
                        format!("prefetch={value}: must be on or off")
                    })
                    .map_err(fail)?
                }
                "grad=" => {
                    s.grad_overlap = switch(value, ("overlap", "after"), || {
                        format!(
                            "grad={value}: gradients synchronise beside the backward pass \
                             (grad=overlap) or after it (grad=after)"
                        )
                    })
                    .map_err(fail)?
                }
                "send=" => {
                    s.send_overlap = switch(value, ("overlap", "blocking"), || {
                        format!(
                            "send={value}: pipeline stages send beside their compute \
                             (send=overlap) or block until the send is done (send=blocking)"
                        )
                    })
                    .map_err(fail)?
                }
                "p2p=" => {
                    s.scatter_sends = switch(value, ("scatter", "full"), || {
                        format!(
                            "p2p={value}: each tensor-parallel rank sends its share of a \
                             stage's activations, gathered on arrival (p2p=scatter), or all \
                             of them (p2p=full)"
                        )
                    })
                    .map_err(fail)?
                }
                "tp=" => {
                    s.tp_overlap = switch(value, ("overlap", "blocking"), || {
                        format!(
                            "tp={value}: tensor-parallel collectives run beside the linear \
                             layers (tp=overlap) or block them (tp=blocking)"
                        )
                    })
                    .map_err(fail)?
                }
                "gpipe" if value.is_empty() => s.gpipe = true,
                "ends=" => {
                    let counts: Vec<Option<u16>> = value
                        .split('.')
                        .map(|n| n.parse::<u16>().ok().filter(|n| *n > 0))
                        .collect();
                    match counts.as_slice() {
                        [Some(first), Some(last)] => s.ends = Some((*first, *last)),
                        _ => {
                            return Err(fail(format!(
                                "ends={value}: the layers of the first and last stages, two \
                                 integers from 1 to 65535 joined by a dot (ends=7.7)"
                            )))
                        }
                    }
                }
                "rc=" => {
                    s.recompute = Some(match value {
                        "none" => Recompute::None,
                        "selective" => Recompute::Selective,
                        "full" => Recompute::Full,
                        _ => {
                            return Err(fail(format!(
                                "rc={value}: recompute must be none, selective or full"
                            )))
                        }
                    })
                }
                _ => return Err(fail(format!("unknown field {token:?}"))),
            }
            seen.push(key.to_string());
            i += 1;
        }
        // The fields parsed; how they fit together is its own message, without examples.
        s.structure().map_err(|(_, _, message)| StrategyError {
            input: text.to_string(),
            message,
        })?;
        Ok(s)
    }

    /// Reads a strategy file (keys `data`, `tensor`, `pipeline`, `context`,
    /// `context_attention`, `kernel`, `micro_batch`, `interleave`, `schedule`,
    /// `sequence_parallel`, `recompute`, `zero`, `expert`, `weight_prefetch`, `shard_group`,
    /// `gradient_overlap`, `send_overlap`, `tensor_overlap`, `stage_ends`, `order`).
    pub fn from_yaml(file: &str, text: &str) -> Result<Strategy, ConfigError> {
        let raw: StrategyRaw = parse_yaml(file, text)?;
        let check = Checker { file };
        if let Some(v) = raw.version {
            check.version(v)?;
        }
        let count = |path: &str, v: Option<u64>| -> Result<u64, ConfigError> {
            v.map_or(Ok(1), |v| check.positive_count(path, v))
        };
        let kernel = match raw.kernel {
            None => None,
            Some(k) => {
                let kp1 = check.positive_count("kernel.kp1", k.kp1)?;
                Some(match k.kind {
                    KernelSplitKind::Rc => KernelSplit::Rc {
                        kp1,
                        kp2: check.positive_count(
                            "kernel.kp2",
                            k.kp2.ok_or_else(|| {
                                ConfigError::invalid(
                                    file,
                                    "kernel.kp2",
                                    "(missing)",
                                    "rc needs kp2",
                                )
                            })?,
                        )?,
                    },
                    KernelSplitKind::Cr => {
                        if let Some(kp2) = k.kp2 {
                            return Err(ConfigError::invalid(
                                file,
                                "kernel.kp2",
                                kp2,
                                "cr takes only kp1 (the shared dimension is cut kp1 ways)",
                            ));
                        }
                        KernelSplit::Cr { kp1 }
                    }
                })
            }
        };
        let tensor = count("tensor", raw.tensor)?;
        let zero = raw.zero.unwrap_or(0);
        if zero > 3 {
            return Err(ConfigError::invalid(file, "zero", zero, "a ZeRO stage 0-3"));
        }
        let s = Strategy {
            data: count("data", raw.data)?,
            tensor,
            pipeline: count("pipeline", raw.pipeline)?,
            context: count("context", raw.context)?,
            context_attention: match raw.context_attention.as_deref() {
                None => None,
                Some("ring") => Some(ContextAttention::Ring),
                Some("all_gather" | "gather") => Some(ContextAttention::AllGather),
                Some(other) => {
                    return Err(ConfigError::invalid(
                        file,
                        "context_attention",
                        other,
                        "ring, or all_gather (also written gather); omit it to price both and \
                         take the cheaper",
                    ))
                }
            },
            kernel,
            micro_batch: raw
                .micro_batch
                .map_or(Ok(0), |v| check.positive_count("micro_batch", v))?,
            interleave: count("interleave", raw.interleave)?,
            gpipe: match raw.schedule.as_deref() {
                None | Some("1f1b") => false,
                Some("gpipe") => true,
                Some(other) => {
                    return Err(ConfigError::invalid(
                        file,
                        "schedule",
                        other,
                        "gpipe or 1f1b (interleave > 1 makes 1f1b interleaved)",
                    ))
                }
            },
            sequence_parallel: raw.sequence_parallel,
            recompute: raw.recompute,
            zero: zero as u8,
            expert: count("expert", raw.expert)?,
            shard: raw
                .shard_group
                .map_or(Ok(0), |v| check.positive_count("shard_group", v))?,
            prefetch: raw.weight_prefetch.unwrap_or(true),
            grad_overlap: raw.gradient_overlap.unwrap_or(true),
            send_overlap: raw.send_overlap.unwrap_or(true),
            scatter_sends: raw.scatter_sends.unwrap_or(false),
            tp_overlap: raw.tensor_overlap.unwrap_or(false),
            placement: match &raw.order {
                None => None,
                Some(order) => {
                    let axes: Option<Vec<Axis>> =
                        order.iter().map(|a| Axis::from_letter(a)).collect();
                    Some(axes.as_deref().and_then(Placement::new).ok_or_else(|| {
                        ConfigError::invalid(
                            file,
                            "order",
                            format!("[{}]", order.join(", ")),
                            "distinct axes innermost first from t, k1, k2, d, p, c ([t, d, p])",
                        )
                    })?)
                }
            },
            ends: match raw.stage_ends {
                None => None,
                Some([first, last]) => {
                    let count = |i: usize, n: u64| -> Result<u16, ConfigError> {
                        let key = format!("stage_ends[{i}]");
                        check.positive_count(&key, n)?;
                        u16::try_from(n)
                            .map_err(|_| ConfigError::invalid(file, key, n, "at most 65535 layers"))
                    };
                    Some((count(0, first)?, count(1, last)?))
                }
            },
        };
        s.structure()
            .map_err(|(field, value, message)| ConfigError::invalid(file, field, value, message))?;
        Ok(s)
    }

    /// MAD Max's hierarchical notation `(INTRA, INTER)`: how the devices inside a node and
    /// the nodes are used, each one of `TP` (tensor parallelism), `DDP` (data parallelism)
    /// or `FSDP` (data parallelism with ZeRO-3), e.g. `(TP, DDP)`. The placement is pinned:
    /// the intra-node dimension on the devices of a node.
    pub fn from_madmax(
        text: &str,
        devices_per_node: u64,
        devices: u64,
    ) -> Result<Strategy, StrategyError> {
        let fail = |message: String| StrategyError {
            input: text.to_string(),
            message: format!(
                "{message}; expected MAD Max's (INTRA, INTER) with each of TP, DDP or FSDP, \
                 such as (TP, DDP)"
            ),
        };
        let cleaned: String = text
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
            .collect();
        let levels: Vec<&str> = cleaned.split(',').collect();
        let [intra, inter] = levels[..] else {
            return Err(fail(format!("{} levels given", levels.len())));
        };
        let per_node = devices_per_node.max(1);
        let sizes = [per_node, (devices / per_node).max(1)];
        let mut s = Strategy::default();
        let mut order = Vec::new();
        let mut kinds = Vec::new();
        for (name, size) in [intra, inter].into_iter().zip(sizes) {
            let kind = name.to_ascii_uppercase();
            let axis = match kind.as_str() {
                "TP" => {
                    s.tensor *= size;
                    Axis::Tensor
                }
                "DDP" | "FSDP" => {
                    s.data *= size;
                    Axis::Data
                }
                _ => return Err(fail(format!("unknown level {name:?}"))),
            };
            if !order.contains(&axis) {
                order.push(axis);
            }
            kinds.push(kind);
        }
        if kinds.iter().any(|k| k == "FSDP") {
            s.zero = 3;
            match (kinds[0].as_str(), kinds[1].as_str()) {
                // Hybrid sharding: weights sharded inside a node, nodes replicate.
                // One device per node: nothing to shard, plain data parallelism.
                ("FSDP", "DDP") if per_node == 1 => s.zero = 0,
                ("FSDP", "DDP") if sizes[1] > 1 => s.shard = per_node,
                ("DDP", "FSDP") => {
                    return Err(fail(
                        "(DDP, FSDP) would shard across nodes and replicate inside one; use \
                         (FSDP, DDP) for hybrid sharding"
                            .into(),
                    ))
                }
                _ => {}
            }
        }
        s.placement = Placement::new(&order);
        s.structure().map_err(|(_, _, message)| fail(message))?;
        Ok(s)
    }

    /// The strategy in MAD Max's `(INTRA, INTER)` notation over nodes of `devices_per_node`
    /// devices (what [`Strategy::from_madmax`] reads back), when it is one of the
    /// notation's: no pipeline, kernel or expert parallelism, ZeRO 0 or 3, and tensor
    /// parallelism over a whole level. The micro-batch, sequence parallelism and
    /// recomputation are not part of the notation.
    pub fn madmax(&self, devices_per_node: u64) -> Option<String> {
        if self.pipeline > 1 || self.kernel.is_some() || self.expert > 1 || self.context > 1 {
            return None;
        }
        let n = devices_per_node.max(1);
        let nodes = self.devices() / n;
        if nodes * n != self.devices() {
            return None;
        }
        let dp = match self.zero {
            0 => "DDP",
            3 => "FSDP",
            _ => return None,
        };
        let inner = self.placement.map(|p| p.axes()[0]);
        let pair = match (self.tensor, self.shard) {
            (1, 0) => (dp, dp),
            (1, h) if h == n && nodes > 1 => ("FSDP", "DDP"),
            (t, 0) if t == self.devices() => ("TP", "TP"),
            (t, 0) if t == n && inner != Some(Axis::Data) => ("TP", dp),
            (t, 0) if t == nodes && inner == Some(Axis::Data) => (dp, "TP"),
            _ => return None,
        };
        Some(format!("({}, {})", pair.0, pair.1))
    }

    /// The one check of a strategy's axes against each other, whichever front end built it
    /// (the short form, a YAML file, MAD Max's notation, a search): on failure the YAML key
    /// at fault, its value and what is expected.
    pub fn structure(&self) -> Result<(), (&'static str, String, String)> {
        let bad = |field, value: &dyn std::fmt::Display, message: &str| {
            Err((field, value.to_string(), message.to_string()))
        };
        if let Some(a) = self.context_attention.filter(|_| self.context <= 1) {
            return bad(
                "context_attention",
                &a.name(),
                "how context-parallel ranks exchange keys and values; it needs cp > 1",
            );
        }
        if self.context > 1 {
            let why = if self.kernel.is_some() {
                Some(
                    "context parallelism (cp) is modelled beside tensor parallelism (t), not RC/CR",
                )
            } else if self.zero >= 3 {
                Some(
                    "ZeRO-3 with context parallelism (cp) is not modelled; use z1 or z2, which \
                     shard over the data and context ranks together (Megatron-LM's distributed \
                     optimizer)",
                )
            } else if self.expert > 1 {
                Some("context parallelism (cp) with expert parallelism (e) is not modelled")
            } else {
                None
            };
            if let Some(why) = why {
                return bad("context", &self.context, why);
            }
        }
        if self.kernel.is_some() && self.tensor > 1 {
            return bad(
                "tensor",
                &self.tensor,
                "kernel parallelism (RC/CR) and tensor parallelism (t) exclude each other",
            );
        }
        if self.zero > 3 {
            return bad("zero", &self.zero, "a ZeRO stage 0-3");
        }
        if self.data % self.expert != 0 {
            return bad(
                "expert",
                &self.expert,
                &format!(
                    "expert parallelism e{} must divide data parallelism d{}",
                    self.expert, self.data
                ),
            );
        }
        if self.sequence_parallel && self.tensor == 1 {
            return bad(
                "sequence_parallel",
                &true,
                "sequence parallelism (sp) splits the tensor-parallel group; it needs t > 1",
            );
        }
        if self.interleave > 1 && self.gpipe {
            return bad(
                "schedule",
                &"gpipe",
                "interleaving (i > 1) is a 1F1B schedule, not GPipe",
            );
        }
        if !self.grad_overlap && self.gradient_replicas() <= 1 {
            return bad(
                "gradient_overlap",
                &false,
                "grad=after concerns the data-parallel gradient synchronisation; it needs \
                 data parallelism (d > 1, RC's row groups or cp > 1)",
            );
        }
        if !self.send_overlap && self.pipeline <= 1 {
            return bad(
                "send_overlap",
                &false,
                "send=blocking concerns the sends between pipeline stages; it needs p > 1",
            );
        }
        if self.scatter_sends && (self.pipeline <= 1 || self.tensor <= 1) {
            return bad(
                "scatter_sends",
                &true,
                "p2p=scatter splits the sends between pipeline stages over the tensor-parallel \
                 ranks; it needs p > 1 and t > 1",
            );
        }
        if self.scatter_sends && self.sequence_parallel {
            return bad(
                "scatter_sends",
                &true,
                "p2p=scatter is what sequence parallelism already does (its stages hand on \
                 sharded activations); drop one",
            );
        }
        if self.tp_overlap && self.tensor <= 1 {
            return bad(
                "tensor_overlap",
                &true,
                "tp=overlap concerns the tensor-parallel collectives; it needs t > 1",
            );
        }
        if self.tp_overlap && !self.sequence_parallel {
            return bad(
                "tensor_overlap",
                &true,
                "tp=overlap overlaps the all-gathers and reduce-scatters of sequence-parallel \
                 layers (as Megatron-LM's --tp-comm-overlap); it needs sp",
            );
        }
        if !self.prefetch && self.zero < 3 {
            return bad(
                "weight_prefetch",
                &false,
                "prefetch=off concerns the weight gathers of ZeRO-3; it needs z3",
            );
        }
        if self.shard > 0 {
            let why = if self.zero < 3 {
                Some("hybrid sharding (hs) shards ZeRO-3 weights; it needs z3".to_string())
            } else if self.data % self.shard != 0 || self.shard >= self.data || self.shard < 2 {
                Some(format!(
                    "the shard group hs{} must divide data parallelism d{}, be smaller and \
                     hold at least 2 ranks (omit hs to shard over all of it)",
                    self.shard, self.data
                ))
            } else if self.expert > 1 || self.kernel.is_some() {
                Some("hybrid sharding (hs) is modelled without expert or RC/CR parallelism".into())
            } else {
                None
            };
            if let Some(why) = why {
                return bad("shard_group", &self.shard, &why);
            }
        }
        if self.interleave > 1 && self.pipeline == 1 {
            return bad(
                "interleave",
                &self.interleave,
                "an interleaved schedule (i > 1) needs pipeline parallelism (p > 1)",
            );
        }
        if let Some((first, last)) = self.ends {
            if self.pipeline < 2 || self.interleave > 1 {
                return bad(
                    "stage_ends",
                    &format!("{first}.{last}"),
                    "the layers of the first and last stages (ends=) need pipeline stages \
                     (p > 1) of one chunk each (no i)",
                );
            }
        }
        Ok(())
    }

    /// Layers of each pipeline stage for a model of `layers` repeated layers
    /// ([`Strategy::stage_split`]).
    pub fn stage_layers(&self, layers: u64) -> Result<Vec<u64>, String> {
        let split = self.stage_split(layers)?;
        Ok((0..self.pipeline)
            .map(|stage| split.layers(stage))
            .collect())
    }

    /// How `layers` repeated layers split over the pipeline stages ([`Strategy::split_of`]),
    /// or why no split fits.
    pub fn stage_split(&self, layers: u64) -> Result<StageSplit, String> {
        let (p, v) = (self.pipeline, self.interleave);
        self.split_of(layers).ok_or_else(|| match self.ends {
            Some((first, last)) => format!(
                "ends={first}.{last}: the first and last stages' layers must leave the {} \
                 stages between an equal share of the other {} of {layers} layers",
                p.saturating_sub(2),
                layers.saturating_sub(u64::from(first) + u64::from(last))
            ),
            None if v > 1 || layers < p => {
                format!("{layers} layers do not split evenly into {p} stages x {v} chunks")
            }
            None => format!("{layers} layers do not split over {p} stages"),
        })
    }

    /// How `layers` repeated layers split over the pipeline stages: the `ends` given, the
    /// stages between sharing the rest evenly; else an even split; else, with one chunk
    /// per stage, the first and last stages (which also hold the embedding and the loss)
    /// one layer fewer or more than the stages between, so that no stage holds more than
    /// the layers / stages rounded up (30 over 4: 7/8/8/7); `None` when no split fits.
    /// Allocates nothing: a search asks it of every candidate.
    pub fn split_of(&self, layers: u64) -> Option<StageSplit> {
        let (p, v) = (self.pipeline, self.interleave);
        let with_ends = |first: u64, last: u64| -> Option<StageSplit> {
            let rest = layers.checked_sub(first + last)?;
            let middle = match p {
                1 => return None,
                2 if rest == 0 => 0,
                2 => return None,
                _ if rest % (p - 2) == 0 && rest / (p - 2) > 0 => rest / (p - 2),
                _ => return None,
            };
            Some(StageSplit {
                first,
                middle,
                last,
                stages: p,
            })
        };
        if let Some((first, last)) = self.ends {
            return with_ends(u64::from(first), u64::from(last));
        }
        if layers % (p * v) == 0 {
            let n = layers / p;
            return Some(StageSplit {
                first: n,
                middle: n,
                last: n,
                stages: p,
            });
        }
        if v > 1 || layers < p {
            return None;
        }
        // The fullest stage holds no more than needed: the stages between take the
        // rounded-up share (or one less), the ends what is left, split as evenly as they can.
        let most = layers.div_ceil(p);
        (1..=most).rev().find_map(|middle| {
            let rest = layers.checked_sub(middle * p.saturating_sub(2))?;
            let last = rest / 2;
            let first = rest - last;
            (last > 0 && first <= most)
                .then(|| with_ends(first, last))
                .flatten()
        })
    }

    /// Checks the strategy against a device count: degrees multiply to it, expert divides
    /// data, sequence parallelism needs tensor parallelism.
    pub fn check_devices(&self, devices: u64) -> Result<(), StrategyError> {
        let fail = |message: String| StrategyError {
            input: self.to_string(),
            message,
        };
        if self.devices() != devices {
            let (name, degree) = if self.context > 1 {
                (" x context", format!(" x {}", self.context))
            } else {
                ("", String::new())
            };
            // An example that does multiply to the count: tensor up to 8, pipeline up to 4,
            // data the rest.
            let gcd = |mut a: u64, mut b: u64| {
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                a
            };
            let t = gcd(devices, 8).max(1);
            let p = gcd(devices / t, 4).max(1);
            let example = Strategy {
                tensor: t,
                pipeline: p,
                data: (devices / (t * p)).max(1),
                ..Strategy::default()
            };
            return Err(fail(format!(
                "data x model x pipeline{name} = {} x {} x {}{degree} = {} devices, but the \
                 system has {devices}; the degrees must multiply to the device count (e.g. \
                 {example} for {devices} device{})",
                self.data,
                self.model_degree(),
                self.pipeline,
                self.devices(),
                if devices == 1 { "" } else { "s" }
            )));
        }
        self.structure().map_err(|(_, _, message)| fail(message))
    }
}

/// A two-way switch's value: `true` for `on`, `false` for `off`, else `why`.
fn switch(value: &str, (on, off): (&str, &str), why: impl Fn() -> String) -> Result<bool, String> {
    match value {
        v if v == on => Ok(true),
        v if v == off => Ok(false),
        _ => Err(why()),
    }
}

/// `mb4` -> ("mb", "4"), `rc=full` -> ("rc=", "full"), `sp` -> ("sp", "").
fn split_key(token: &str) -> (&str, &str) {
    for key in [
        "rc=",
        "cp=",
        "prefetch=",
        "grad=",
        "send=",
        "p2p=",
        "tp=",
        "order=",
        "ends=",
    ] {
        if let Some(rest) = token.strip_prefix(key) {
            return (key, rest);
        }
    }
    let cut = token
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(token.len());
    (&token[..cut], &token[cut..])
}

impl fmt::Display for Strategy {
    /// The short form, with the paper's RC/CR prefix when kernel parallelism is used.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.kernel {
            Some(KernelSplit::Rc { kp1, kp2 }) => parts.push(format!("RC-{kp1}-{kp2}")),
            Some(KernelSplit::Cr { kp1 }) => parts.push(format!("CR-{kp1}")),
            None => parts.push(format!("t{}", self.tensor)),
        }
        parts.push(format!("d{}", self.data));
        parts.push(format!("p{}", self.pipeline));
        if self.context > 1 {
            parts.push(format!("cp{}", self.context));
        }
        match self.context_attention {
            Some(ContextAttention::Ring) => parts.push("cp=ring".into()),
            Some(ContextAttention::AllGather) => parts.push("cp=gather".into()),
            None => {}
        }
        if self.micro_batch > 0 {
            parts.push(format!("mb{}", self.micro_batch));
        }
        if self.interleave > 1 {
            parts.push(format!("i{}", self.interleave));
        }
        if self.gpipe {
            parts.push("gpipe".into());
        }
        if self.sequence_parallel {
            parts.push("sp".into());
        }
        if let Some(r) = self.recompute {
            let name = match r {
                Recompute::None => "none",
                Recompute::Selective => "selective",
                Recompute::Full => "full",
            };
            parts.push(format!("rc={name}"));
        }
        if self.zero > 0 {
            parts.push(format!("z{}", self.zero));
        }
        if self.expert > 1 {
            parts.push(format!("e{}", self.expert));
        }
        if self.shard > 0 {
            parts.push(format!("hs{}", self.shard));
        }
        if !self.prefetch {
            parts.push("prefetch=off".into());
        }
        if !self.grad_overlap {
            parts.push("grad=after".into());
        }
        if !self.send_overlap {
            parts.push("send=blocking".into());
        }
        if self.scatter_sends {
            parts.push("p2p=scatter".into());
        }
        if self.tp_overlap {
            parts.push("tp=overlap".into());
        }
        if let Some((first, last)) = self.ends {
            parts.push(format!("ends={first}.{last}"));
        }
        if let Some(order) = &self.placement {
            let letters: Vec<&str> = order.axes().iter().map(|a| a.letter()).collect();
            parts.push(format!("order={}", letters.join(".")));
        }
        write!(f, "{}", parts.join("-"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stages of unequal layers: given ends, or fewer on the ends where the layers do not
    /// divide (Llama 3 405B's 126 layers over 16 stages: 7, fourteen 8s, 7).
    #[test]
    fn stage_layers_split_evenly_or_with_fewer_on_the_ends() {
        let p = |text: &str| Strategy::parse(text).unwrap();
        assert_eq!(p("p4").stage_layers(32).unwrap(), vec![8; 4]);
        assert_eq!(p("p4").stage_layers(30).unwrap(), vec![7, 8, 8, 7]);
        let mut llama = vec![8; 16];
        (llama[0], llama[15]) = (7, 7);
        assert_eq!(p("p16").stage_layers(126).unwrap(), llama);
        assert_eq!(p("p2").stage_layers(31).unwrap(), vec![16, 15]);
        assert_eq!(p("p4").stage_layers(5).unwrap(), vec![2, 1, 1, 1]);
        assert_eq!(p("p4-ends=8.6").stage_layers(30).unwrap(), vec![8, 8, 8, 6]);
        for (text, layers) in [("p4-ends=8.6", 29u64), ("p4-i2", 30), ("p4", 3)] {
            assert!(p(text).stage_layers(layers).is_err(), "{text} {layers}");
        }
        let s = p("p4-ends=8.6");
        assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
        assert!(Strategy::parse("p4-ends=8").is_err());
        assert!(Strategy::parse("p4-i2-ends=8.6").is_err());
        let y = Strategy::from_yaml("s.yaml", "pipeline: 4\nstage_ends: [8, 6]\n").unwrap();
        assert_eq!(y, s);
    }

    #[test]
    fn paper_and_short_forms_agree() {
        let rc = Strategy::parse("RC-4-2-d8-p2").unwrap();
        assert_eq!(rc.kernel, Some(KernelSplit::Rc { kp1: 4, kp2: 2 }));
        assert_eq!((rc.data, rc.pipeline, rc.devices()), (8, 2, 128));
        let cr = Strategy::parse("CR-16-d4-p1").unwrap();
        assert_eq!(cr.kernel, Some(KernelSplit::Cr { kp1: 16 }));
        assert_eq!(cr.devices(), 64);
        let s = Strategy::parse("t8-p8-d16-mb1-i3-sp-rc=selective").unwrap();
        assert_eq!((s.tensor, s.pipeline, s.data, s.micro_batch), (8, 8, 16, 1));
        assert_eq!(s.interleave, 3);
        assert!(s.sequence_parallel);
        assert_eq!(s.recompute, Some(Recompute::Selective));
        assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
        assert_eq!(Strategy::parse(&rc.to_string()).unwrap(), rc);
        let jit = Strategy::parse("d16-t32-sp-z3-prefetch=off").unwrap();
        assert!(!jit.prefetch && jit.zero == 3);
        assert_eq!(Strategy::parse(&jit.to_string()).unwrap(), jit);
        // Refused where it is written, not later when it runs.
        let e = Strategy::parse("d16-prefetch=off").unwrap_err().to_string();
        assert!(e.contains("it needs z3"), "{e}");
    }

    #[test]
    fn hybrid_sharding_needs_zero_3_and_a_shard_group_dividing_data() {
        let s = Strategy::parse("d64-z3-hs8").unwrap();
        assert_eq!(
            (s.shard, s.shard_group(), s.shard_axis()),
            (8, 8, Axis::Shard)
        );
        assert_eq!(s.to_string(), "t1-d64-p1-z3-hs8");
        let yaml = Strategy::from_yaml("s.yaml", "data: 64\nzero: 3\nshard_group: 8\n").unwrap();
        assert_eq!(yaml, s);
        for (bad, says) in [
            ("d64-z2-hs8", "it needs z3"),
            ("d64-z3-hs6", "must divide data parallelism d64"),
            ("d64-z3-hs64", "omit hs"),
            ("d64-z3-hs1", "at least 2 ranks"),
            ("d64-z3-e2-hs8", "without expert"),
        ] {
            let e = Strategy::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = Strategy::from_yaml("s.yaml", "data: 64\nzero: 1\nshard_group: 8\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.yaml: shard_group = 8:"), "{e}");
    }

    #[test]
    fn mad_max_notation_pins_the_placement() {
        let s = Strategy::from_madmax("(TP, DDP)", 8, 128).unwrap();
        assert_eq!((s.tensor, s.data, s.zero), (8, 16, 0));
        assert_eq!(s.placement.unwrap().axes(), &[Axis::Tensor, Axis::Data]);
        assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
        let f = Strategy::from_madmax("((FSDP), (FSDP))", 8, 128).unwrap();
        assert_eq!((f.tensor, f.data, f.zero), (1, 128, 3));
        let swapped = Strategy::from_madmax("(DDP,TP)", 8, 128).unwrap();
        assert_eq!(
            swapped.placement.unwrap().axes(),
            &[Axis::Data, Axis::Tensor]
        );
        // Hybrid sharding: weights sharded over a node's devices, nodes replicate.
        let h = Strategy::from_madmax("(FSDP, DDP)", 8, 128).unwrap();
        assert_eq!((h.data, h.zero, h.shard), (128, 3, 8));
        assert_eq!(h.gradient_sync_axes(), vec![Axis::ShardReplica]);
        assert_eq!(Strategy::parse(&h.to_string()).unwrap(), h);
        let one_node = Strategy::from_madmax("(FSDP, DDP)", 8, 8).unwrap();
        assert_eq!((one_node.data, one_node.shard), (8, 0));
        for (bad, says) in [
            ("(DDP, FSDP)", "use (FSDP, DDP)"),
            ("(TP, XP)", "unknown level"),
            ("(TP)", "1 levels given"),
        ] {
            let e = Strategy::from_madmax(bad, 8, 128).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("such as (TP, DDP)"),
                "{bad}: {e}"
            );
        }
        assert!(Strategy::parse("t8-d2-order=t.t").is_err());
        // The notation reads back what it wrote.
        for text in [
            "(TP, DDP)",
            "(TP, FSDP)",
            "(DDP, TP)",
            "(FSDP, TP)",
            "(FSDP, DDP)",
            "(DDP, DDP)",
            "(FSDP, FSDP)",
            "(TP, TP)",
        ] {
            let s = Strategy::from_madmax(text, 8, 128).unwrap();
            assert_eq!(s.madmax(8).as_deref(), Some(text), "{s}");
        }
        for other in ["t2-d64", "t8-d8-p2", "d128-z1", "t8-d16-order=d.t"] {
            assert_eq!(Strategy::parse(other).unwrap().madmax(8), None, "{other}");
        }
    }

    /// A string that does not parse shows the forms it could take; one that parses into
    /// axes that do not go together says which rule it breaks, without the examples.
    #[test]
    fn bad_strings_say_what_is_expected() {
        for bad in [
            "t8-x3",
            "t0",
            "RC-4",
            "t8--d2",
            "t2-t4",
            "z7",
            "rc=some",
            "prefetch=no",
            "cp=spiral",
        ] {
            let e = Strategy::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("expected a string such as RC-4-2-d8-p2"),
                "{bad}: {e}"
            );
        }
        for (bad, rule) in [
            ("CR-2-t2", "exclude each other"),
            ("t1-d8-sp", "it needs t > 1"),
            ("t2-d4-i2", "needs pipeline parallelism"),
            ("t2-p2-d2-i2-gpipe", "not GPipe"),
            ("d8-prefetch=off", "it needs z3"),
            ("d6-e4", "must divide data parallelism"),
            ("t2-cp4-z3", "ZeRO-3 with context parallelism"),
        ] {
            let e = Strategy::parse(bad).unwrap_err().to_string();
            assert!(e.contains(rule), "{bad}: {e}");
            assert!(!e.contains("expected a string such as"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_front_end_refuses_axes_that_contradict_each_other() {
        // The short form, a strategy file and a strategy built in code meet one check.
        let e = Strategy::parse("t1-d8-sp").unwrap_err().to_string();
        assert!(e.contains("sequence parallelism (sp) splits"), "{e}");
        let e = Strategy::from_yaml("s.yaml", "data: 8\nsequence_parallel: true\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "s.yaml: sequence_parallel = true: sequence parallelism (sp) splits the \
             tensor-parallel group; it needs t > 1"
        );
        let e = Strategy::from_yaml(
            "s.yaml",
            "data: 2\npipeline: 2\ninterleave: 2\nschedule: gpipe\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.yaml: schedule = gpipe: interleaving"),
            "{e}"
        );
        let e = Strategy::from_yaml("s.yaml", "tensor: 2\nkernel: {type: cr, kp1: 2}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.yaml: tensor = 2: kernel parallelism"),
            "{e}"
        );
        let coded = Strategy {
            data: 6,
            expert: 4,
            ..Strategy::default()
        };
        let e = coded.check_devices(6).unwrap_err().to_string();
        assert!(e.contains("e4 must divide data parallelism d6"), "{e}");
    }

    /// A strategy on the wrong device count is told of one that fits it, and the example
    /// itself fits: tensor up to 8, pipeline up to 4, data the rest.
    #[test]
    fn a_wrong_device_count_gets_an_example_that_fits() {
        let s = Strategy {
            data: 8,
            ..Strategy::default()
        };
        for (devices, example) in [
            (1, "t1-d1-p1 for 1 device)"),
            (6, "t2-d3-p1 for 6 devices)"),
            (24, "t8-d3-p1 for 24 devices)"),
            (512, "t8-d16-p4 for 512 devices)"),
        ] {
            let e = s.check_devices(devices).unwrap_err().to_string();
            assert!(e.contains(&format!("(e.g. {example}")), "{devices}: {e}");
            let fits = Strategy::parse(example.split(' ').next().unwrap()).unwrap();
            assert_eq!(fits.devices(), devices, "{example}");
        }
    }
}
