//! The parallel dimensions a strategy lays onto the devices, and the groups a mapping
//! measures that are not strategy dimensions (every device, expert groups and replicas).

use serde::Serialize;

/// A parallel dimension of a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    Tensor,
    /// RC rows or CR's shared dimension.
    Kp1,
    /// RC columns.
    Kp2,
    Data,
    Pipeline,
    /// Context parallelism: the ranks that each hold one share of every sequence's tokens.
    Context,
    /// Every device of the system as one group (all-to-all of table-wise sharded
    /// embeddings); not a parallel dimension of the strategy.
    Every,
    /// Expert-parallel groups: runs of `expert` consecutive ranks of each data-parallel
    /// group.
    Expert,
    /// The replicas of one expert: every `expert`-th rank of a data-parallel group (they
    /// synchronise that expert's gradients).
    ExpertReplica,
    /// Hybrid sharding's shard groups: runs of `shard` consecutive data-parallel ranks.
    Shard,
    /// The replicas of one shard: every `shard`-th data-parallel rank (they all-reduce the
    /// shard's gradients).
    ShardReplica,
}

impl Axis {
    /// The strategy's parallel dimensions, in declaration order (`axis as usize` indexes
    /// them, and a mapping's group links).
    pub const ALL: [Axis; 6] = [
        Axis::Tensor,
        Axis::Kp1,
        Axis::Kp2,
        Axis::Data,
        Axis::Pipeline,
        Axis::Context,
    ];

    /// The short-form letter (`order=t.d.p`).
    pub fn letter(self) -> &'static str {
        match self {
            Axis::Tensor => "t",
            Axis::Kp1 => "k1",
            Axis::Kp2 => "k2",
            Axis::Data => "d",
            Axis::Pipeline => "p",
            Axis::Context => "c",
            Axis::Every => "all",
            Axis::Expert => "e",
            Axis::ExpertReplica => "er",
            Axis::Shard => "hs",
            Axis::ShardReplica => "hr",
        }
    }

    pub fn from_letter(letter: &str) -> Option<Axis> {
        Axis::ALL.into_iter().find(|a| a.letter() == letter)
    }

    pub fn name(self) -> &'static str {
        match self {
            Axis::Tensor => "tensor",
            Axis::Kp1 => "kp1",
            Axis::Kp2 => "kp2",
            Axis::Data => "data",
            Axis::Pipeline => "pipeline",
            Axis::Context => "context",
            Axis::Every => "all devices",
            Axis::Expert => "expert",
            Axis::ExpertReplica => "expert replicas",
            Axis::Shard => "shard group",
            Axis::ShardReplica => "shard replicas",
        }
    }
}
