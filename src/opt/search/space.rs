//! The strategy space as a grammar: one table, [`GRAMMAR`], lists every axis of a
//! [`Strategy`], says whether the search varies it or takes it from the user's base
//! strategy, and gives the rule that expands a partial strategy along it. [`enumerate`]
//! folds the table, so a new axis enters the enumeration by a new row, not a second list.
//!
//! The rules keep only values the workload can take by construction (degrees that divide
//! the devices, tensor degrees that divide the attention heads, pipeline stages the layers
//! split over (evenly, or with the ends one fewer) and chunks that divide them, context
//! degrees that split the sequence into 2 x cp chunks (no ZeRO-3 or experts beside them),
//! micro-batches that divide a replica's batch, ZeRO only with data (or context)
//! parallelism, prefetching only under ZeRO-3); what is left for the fit to reject is
//! counted as invalid by the search. Context parallelism's key/value exchange (ring or
//! all-gather) is not an axis here: each mapping prices both and keeps the cheaper.

use crate::domain::Recompute;
use crate::parallel::strategy::KernelSplit;
use crate::parallel::Strategy;
use crate::workload::{Split, Workload};

/// Who sets an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The search tries every value the rule gives.
    Searched,
    /// The user's base strategy (or the workload) fixes it: precisions and the schedule.
    User,
}

/// What the rules need to know about the workload and the machine.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub devices: u64,
    /// Samples per iteration (the global batch).
    pub samples: u64,
    /// Repeated layers (0: the graph has none to pipeline).
    pub layers: u64,
    /// Megatron column/row linear layers (tensor parallelism); else RC/CR kernel splits.
    pub tensor_layers: bool,
    /// Activation recomputation is a choice (transformers).
    pub recompute: bool,
    /// Experts per MoE layer (1: dense).
    pub experts: u64,
    /// Attention heads, which tensor parallelism splits whole (Megatron: t divides the
    /// heads); 0 when the workload has none.
    pub heads: u64,
    /// Devices per node: hybrid sharding's shard groups stay inside one (with the tensor
    /// group); 0 when unknown (no hybrid sharding is tried).
    pub node: u64,
    /// Tokens per training sequence, which context parallelism splits into 2 x cp chunks;
    /// 0 when the workload has no sequence to split.
    pub sequence: u64,
}

impl Shape {
    /// The shape of `workload` on `devices` devices, `node` per node (0: unknown).
    pub fn of(workload: &Workload, devices: u64, node: u64) -> Shape {
        let graph = workload.graph();
        Shape {
            devices,
            samples: graph.samples.round().max(1.0) as u64,
            layers: graph.layers,
            tensor_layers: graph
                .kernels
                .iter()
                .any(|k| matches!(k.split, Split::Column | Split::Row)),
            recompute: matches!(workload, Workload::Transformer(_)),
            experts: graph.experts,
            heads: match workload {
                Workload::Transformer(t) => t.heads,
                _ => 0,
            },
            node,
            sequence: graph.attention.map_or(0, |a| a.sequence),
        }
    }
}

/// One axis of the grammar.
pub struct Rule {
    pub name: &'static str,
    pub role: Role,
    /// Appends `partial` with every value of this axis to `out`.
    expand: fn(&Shape, &Strategy, &mut Vec<Strategy>),
}

/// Every axis, in the order the enumeration fixes them (later rules read earlier axes).
pub const GRAMMAR: &[Rule] = &[
    Rule {
        name: "model split: tensor t (transformers), else kernel RC-kp1-kp2 / CR-kp1",
        role: Role::Searched,
        expand: model,
    },
    Rule {
        name: "pipeline stages p",
        role: Role::Searched,
        expand: pipeline,
    },
    Rule {
        name: "context parallelism cp (sequences split into 2 x cp chunks)",
        role: Role::Searched,
        expand: context,
    },
    Rule {
        name: "data replicas d (the devices left)",
        role: Role::Searched,
        expand: data,
    },
    Rule {
        name: "expert parallelism e",
        role: Role::Searched,
        expand: expert,
    },
    Rule {
        name: "micro-batch mb (every size dividing a replica's batch)",
        role: Role::Searched,
        expand: micro_batch,
    },
    Rule {
        name: "interleaved chunks i",
        role: Role::Searched,
        expand: interleave,
    },
    Rule {
        name: "activation recomputation rc (none, selective, full)",
        role: Role::Searched,
        expand: recompute,
    },
    Rule {
        name: "sequence parallelism sp",
        role: Role::Searched,
        expand: sequence_parallel,
    },
    Rule {
        name: "ZeRO stage z (0-3)",
        role: Role::Searched,
        expand: zero,
    },
    Rule {
        name: "ZeRO-3 hybrid shard group hs (data ranks inside a node, with the tensor group)",
        role: Role::Searched,
        expand: shard,
    },
    Rule {
        name: "ZeRO-3 prefetch",
        role: Role::Searched,
        expand: prefetch,
    },
    Rule {
        name: "schedule (1F1B or GPipe), gradient and send overlap",
        role: Role::User,
        expand: keep,
    },
    Rule {
        name: "precisions and overlap (the workload's)",
        role: Role::User,
        expand: keep,
    },
    Rule {
        name: "placement (every ordering of the used axes, by the mapping search)",
        role: Role::Searched,
        expand: keep,
    },
];

/// Strategies the enumeration may produce before it stops (a count bound, not a target).
pub const MAX_STRATEGIES: usize = 4_000_000;

/// The space is larger than [`MAX_STRATEGIES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the strategy space for {devices} devices has more than {limit} strategies; pin axes in \
     the base strategy or search fewer devices"
)]
pub struct TooLarge {
    pub devices: u64,
    pub limit: usize,
}

/// Every strategy of the grammar for `shape`, the user's axes taken from `base`.
pub fn enumerate(shape: &Shape, base: &Strategy) -> Result<Vec<Strategy>, TooLarge> {
    let start = Strategy {
        gpipe: base.gpipe,
        grad_overlap: base.grad_overlap,
        send_overlap: base.send_overlap,
        scatter_sends: base.scatter_sends,
        tp_overlap: base.tp_overlap,
        ..Strategy::default()
    };
    let mut partial = vec![start];
    for rule in GRAMMAR.iter().filter(|r| r.role == Role::Searched) {
        let mut next = Vec::with_capacity(partial.len());
        for s in &partial {
            (rule.expand)(shape, s, &mut next);
            if next.len() > MAX_STRATEGIES {
                return Err(TooLarge {
                    devices: shape.devices,
                    limit: MAX_STRATEGIES,
                });
            }
        }
        partial = next;
    }
    // Without data parallelism there is no gradient synchronisation to overlap, without
    // pipeline parallelism no send, without tensor and sequence parallelism no tensor
    // collective to run beside the linear layers.
    for s in partial.iter_mut() {
        s.grad_overlap |= s.gradient_replicas() <= 1;
        s.send_overlap |= s.pipeline <= 1;
        s.scatter_sends &= s.pipeline > 1 && s.tensor > 1 && !s.sequence_parallel;
        s.tp_overlap &= s.tensor > 1 && s.sequence_parallel;
    }
    Ok(partial)
}

/// The divisors of `n`, ascending.
pub fn divisors(n: u64) -> Vec<u64> {
    let mut low = Vec::new();
    let mut high = Vec::new();
    let mut d = 1;
    while d * d <= n {
        if n % d == 0 {
            low.push(d);
            if d * d != n {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

fn keep(_: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
}

fn model(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    for degree in divisors(shape.devices) {
        if degree == 1 {
            out.push(*s);
        } else if shape.tensor_layers {
            if shape.heads > 0 && shape.heads % degree != 0 {
                continue;
            }
            out.push(Strategy {
                tensor: degree,
                ..*s
            });
        } else {
            for kp1 in divisors(degree) {
                let kp2 = degree / kp1;
                out.push(Strategy {
                    kernel: Some(KernelSplit::Rc { kp1, kp2 }),
                    ..*s
                });
            }
            out.push(Strategy {
                kernel: Some(KernelSplit::Cr { kp1: degree }),
                ..*s
            });
        }
    }
}

/// Pipeline degrees up to the layers: an even split, or (one chunk per stage) the ends one
/// layer fewer ([`Strategy::stage_layers`]).
fn pipeline(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    for p in divisors(shape.devices / s.model_degree()) {
        let staged = Strategy { pipeline: p, ..*s };
        if p == 1 || (shape.layers > 0 && staged.split_of(shape.layers).is_some()) {
            out.push(staged);
        }
    }
}

/// Context-parallel degrees that split the sequence into 2 x cp chunks (with tensor
/// parallelism only: not beside RC/CR).
fn context(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
    if shape.sequence == 0 || s.kernel.is_some() {
        return;
    }
    for cp in divisors(shape.devices / (s.model_degree() * s.pipeline)) {
        let split = Strategy { context: cp, ..*s };
        if cp > 1 && split.splits_sequence(shape.sequence) {
            out.push(split);
        }
    }
}

fn data(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    let data = shape.devices / (s.model_degree() * s.pipeline * s.context);
    out.push(Strategy { data, ..*s });
}

fn expert(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    if shape.experts <= 1 || s.kernel.is_some() || s.context > 1 {
        return out.push(*s);
    }
    for e in divisors(s.data) {
        if shape.experts % e == 0 {
            out.push(Strategy { expert: e, ..*s });
        }
    }
}

fn micro_batch(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    if shape.samples % s.data != 0 {
        // The batch does not split over the replicas: one strategy, for the fit to reject.
        return out.push(*s);
    }
    let per_replica = shape.samples / s.data;
    for mb in divisors(per_replica) {
        // A micro-batch whose sequences split over the context ranks is no better with them:
        // cp x d replicas of mb / cp sequences each run the same tokens per device, hold the
        // same weights, state and activations, and exchange no keys and values (with ZeRO-3
        // open to them); context parallelism is for micro-batches too small to split.
        if s.context > 1 && mb % s.context == 0 {
            continue;
        }
        // A micro-batch of the whole replica batch is written mb0.
        let micro_batch = if mb == per_replica { 0 } else { mb };
        out.push(Strategy { micro_batch, ..*s });
    }
}

fn interleave(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
    if s.pipeline <= 1 || s.gpipe || shape.layers == 0 {
        return;
    }
    let per_replica = shape.samples / s.data.max(1);
    let mb = if s.micro_batch == 0 {
        per_replica
    } else {
        s.micro_batch
    };
    let m = per_replica / mb.max(1);
    // Interleaving needs micro-batches and layers that divide over the stages.
    if m % s.pipeline != 0 || shape.layers % s.pipeline != 0 {
        return;
    }
    for v in divisors(shape.layers / s.pipeline).into_iter().skip(1) {
        out.push(Strategy {
            interleave: v,
            ..*s
        });
    }
}

fn recompute(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    if !shape.recompute {
        return out.push(*s);
    }
    for r in [Recompute::None, Recompute::Selective, Recompute::Full] {
        out.push(Strategy {
            recompute: Some(r),
            ..*s
        });
    }
}

fn sequence_parallel(_: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
    if s.tensor > 1 {
        out.push(Strategy {
            sequence_parallel: true,
            ..*s
        });
    }
}

/// ZeRO over the data group (1-2 with the context ranks; 3 without context parallelism).
fn zero(_: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    let stages: &[u8] = match (s.data, s.context) {
        (1, 1) => &[0],
        (_, 1) => &[0, 1, 2, 3],
        _ => &[0, 1, 2],
    };
    for &zero in stages {
        out.push(Strategy { zero, ..*s });
    }
}

fn shard(shape: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
    if s.zero < 3 || s.expert > 1 || s.kernel.is_some() || shape.node == 0 {
        return;
    }
    // Shard groups of consecutive data ranks that fit in a node beside the tensor group.
    for h in divisors(s.data) {
        if h > 1 && h < s.data && shape.node % (s.tensor * h) == 0 {
            out.push(Strategy { shard: h, ..*s });
        }
    }
}

fn prefetch(_: &Shape, s: &Strategy, out: &mut Vec<Strategy>) {
    out.push(*s);
    if s.zero >= 3 {
        out.push(Strategy {
            prefetch: false,
            ..*s
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(devices: u64) -> Shape {
        Shape {
            devices,
            samples: 64,
            layers: 8,
            tensor_layers: true,
            recompute: true,
            experts: 1,
            heads: 8,
            node: 4,
            sequence: 0,
        }
    }

    /// Stages over layers that do not divide them: one chunk each, the ends one fewer
    /// (30 layers: 4 stages 7/8/8/7, 8 stages 3/4.../4/3); no interleaving there.
    #[test]
    fn pipelines_take_uneven_splits_with_one_chunk_per_stage() {
        let uneven = Shape {
            layers: 30,
            heads: 4,
            ..shape(8)
        };
        let all = enumerate(&uneven, &Strategy::default()).unwrap();
        let degrees: Vec<u64> = all.iter().map(|s| s.pipeline).collect();
        for p in [2, 4, 8] {
            assert!(degrees.contains(&p), "p{p}");
        }
        assert!(all
            .iter()
            .filter(|s| s.pipeline == 4 || s.pipeline == 8)
            .all(|s| s.interleave == 1));
        assert!(all.iter().any(|s| s.pipeline == 2 && s.interleave > 1));
        let few = Shape {
            layers: 5,
            ..uneven
        };
        let degrees: Vec<u64> = enumerate(&few, &Strategy::default())
            .unwrap()
            .iter()
            .map(|s| s.pipeline)
            .collect();
        assert!(!degrees.contains(&8), "8 stages need 8 layers");
    }

    /// Context parallelism is searched where the sequence splits into 2 x cp chunks, with
    /// ZeRO 0-2 (sharding over the data and context ranks) and no expert parallelism; a
    /// workload without a sequence gets none.
    #[test]
    fn context_degrees_split_the_sequence_into_two_chunks_a_rank() {
        let long = Shape {
            sequence: 24,
            ..shape(16)
        };
        let all = enumerate(&long, &Strategy::default()).unwrap();
        let degrees: Vec<u64> = all.iter().map(|s| s.context).collect();
        for cp in [1, 2, 4] {
            assert!(degrees.contains(&cp), "cp{cp}");
        }
        for cp in [8, 16] {
            assert!(
                !degrees.contains(&cp),
                "24 tokens do not split into {} chunks",
                2 * cp
            );
        }
        assert!(all.iter().all(|s| s.devices() == 16));
        assert!(all.iter().all(|s| s.context == 1 || s.zero < 3));
        assert!(all
            .iter()
            .any(|s| s.context > 1 && s.data == 1 && s.zero == 2));
        assert!(all.iter().all(|s| s.context_attention.is_none()));
        let moe = Shape { experts: 4, ..long };
        assert!(enumerate(&moe, &Strategy::default())
            .unwrap()
            .iter()
            .all(|s| s.context == 1 || s.expert == 1));
        assert!(enumerate(&shape(16), &Strategy::default())
            .unwrap()
            .iter()
            .all(|s| s.context == 1));
    }

    #[test]
    fn divisors_are_complete_and_sorted() {
        assert_eq!(divisors(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(1), vec![1]);
        assert_eq!(divisors(49), vec![1, 7, 49]);
    }

    #[test]
    fn every_strategy_uses_every_device_once_and_is_distinct() {
        let all = enumerate(&shape(16), &Strategy::default()).unwrap();
        assert!(all.iter().all(|s| s.devices() == 16));
        for (i, a) in all.iter().enumerate() {
            assert!(!all[..i].contains(a), "{a} twice");
        }
        // The searched axes all vary.
        let has = |f: fn(&Strategy) -> bool| all.iter().any(f);
        assert!(has(|s| s.interleave > 1));
        assert!(has(|s| s.recompute == Some(Recompute::Full)));
        assert!(has(|s| s.zero == 2));
        assert!(has(|s| !s.prefetch));
        assert!(has(|s| s.sequence_parallel));
        assert!(has(|s| s.shard == 2 && s.tensor == 2));
        assert!(
            !has(|s| s.shard == 4 && s.tensor == 2),
            "hs4 x t2 exceeds a 4-device node"
        );
        assert!(has(|s| s.micro_batch == 1 && s.pipeline > 1));
        assert!(!has(|s| s.gpipe), "the schedule is the user's");
        assert!(!has(|s| s.tensor == 16), "t16 does not split 8 heads");
    }

    #[test]
    fn user_axes_come_from_the_base_and_graphs_without_tensor_layers_get_rc_and_cr() {
        let base = Strategy {
            gpipe: true,
            ..Strategy::default()
        };
        let lstm = Shape {
            tensor_layers: false,
            recompute: false,
            ..shape(8)
        };
        let all = enumerate(&lstm, &base).unwrap();
        assert!(all
            .iter()
            .all(|s| s.gpipe && s.interleave == 1 && s.tensor == 1));
        assert!(all
            .iter()
            .any(|s| matches!(s.kernel, Some(KernelSplit::Rc { kp1: 2, kp2: 4 }))));
        assert!(all
            .iter()
            .any(|s| matches!(s.kernel, Some(KernelSplit::Cr { kp1: 8 }))));
    }
}
