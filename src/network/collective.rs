//! Alpha-beta costs of collectives on a group of `p` devices, given what the group's
//! embedding in the physical network offers: the effective bandwidth of its ring, of its
//! all-pairs exchange, and the per-step latency (DeepFlow Sec. 6.4, Zion Sec. IV-C); and,
//! for a group spanning several dimensions of a torus or mesh, its parts along each
//! dimension, which the dimension-wise algorithm runs on at once (Ying et al. 2018).
//!
//! Message sizes `m` are the full tensor a device holds before (all-reduce, reduce-scatter,
//! all-to-all) or after (all-gather) the collective.

use serde::Serialize;

/// The communication patterns of distributed training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    AllToAll,
    /// One message to the next device of the group (pipeline stages).
    PointToPoint,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllGather => "all-gather",
            Collective::AllToAll => "all-to-all",
            Collective::PointToPoint => "point-to-point",
        }
    }
}

/// What one parallel group's placement on the network offers (all groups of the same
/// parallel dimension communicate at once, so the bandwidths already include the sharing of
/// physical links between groups).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupLink {
    /// Devices in the group.
    pub p: u64,
    /// Index of the outermost fabric the group spans (innermost is 0): the device ports
    /// its traffic is bound by, which other collectives on that fabric share.
    pub level: usize,
    /// Bandwidth of the group's bidirectional ring, per device, B/s: Zion's B.
    pub ring_bytes_per_s: f64,
    /// Latency of one ring step (the longest routed neighbour path), s.
    pub ring_step_s: f64,
    /// Bandwidth of one pair when every device sends to all others at once, B/s (the link
    /// load of the all-pairs pattern already divided out): Zion's b on a fully connected
    /// network, B / (p - 1) on a ring.
    pub pair_bytes_per_s: f64,
    /// Latency of the longest path between two members, s (one tree step).
    pub pair_step_s: f64,
    /// Latency of one all-pairs exchange, s: the longest path where every message is in
    /// flight at once (switches, full meshes, direct fabrics with routers), the summed hop
    /// distances where a direct fabric's members relay a hop a step (Zion's gamma times
    /// alpha, Eq. 3).
    pub all_to_all_s: f64,
    /// Bandwidth one device has to its pipeline successor, B/s, and the path latency.
    pub next_bytes_per_s: f64,
    pub next_s: f64,
    /// Hierarchical decomposition (inner group inside a node, outer group across nodes),
    /// when the group spans fabrics.
    pub hierarchy: Option<(Box<GroupLink>, Box<GroupLink>)>,
    /// The group's parts along each dimension of a torus or mesh, when it spans several of
    /// one fabric's as a whole product of coordinates, innermost first (every group's part
    /// along one dimension communicating at once): what the dimension-wise algorithm runs
    /// on ([`GroupLink::dimensional_s`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<GroupLink>,
    /// Fixed cost of one collective (launch and synchronisation), s: the outermost fabric's.
    pub launch_s: f64,
}

impl GroupLink {
    /// A group of one device: every collective is free.
    pub fn single() -> GroupLink {
        GroupLink {
            p: 1,
            level: 0,
            ring_bytes_per_s: f64::INFINITY,
            ring_step_s: 0.0,
            pair_bytes_per_s: f64::INFINITY,
            pair_step_s: 0.0,
            all_to_all_s: 0.0,
            next_bytes_per_s: f64::INFINITY,
            next_s: 0.0,
            hierarchy: None,
            dims: Vec::new(),
            launch_s: 0.0,
        }
    }

    /// Time of `collective` on a message of `m` bytes: the best of the ring, all-pairs
    /// (direct), tree and hierarchical algorithms the group supports.
    /// Every collective also pays the group's fixed cost once ([`GroupLink::launch_s`]).
    pub fn time(&self, collective: Collective, m: f64) -> f64 {
        if self.p <= 1 || m <= 0.0 {
            return 0.0;
        }
        self.transfer_s(collective, m) + self.launch_s
    }

    /// [`GroupLink::time`] without the fixed cost: the hops and the bytes.
    fn transfer_s(&self, collective: Collective, m: f64) -> f64 {
        if self.p <= 1 || m <= 0.0 {
            return 0.0;
        }
        let p = self.p as f64;
        let flat = match collective {
            Collective::AllReduce => {
                // Ring: reduce-scatter then all-gather (Zion Eq. 1); direct: each phase
                // one all-pairs exchange of m/p (Zion Eq. 2); double binary tree.
                let ring = 2.0 * (p - 1.0) / p * m / self.ring_bytes_per_s
                    + 2.0 * (p - 1.0) * self.ring_step_s;
                let direct = 2.0 * (m / p / self.pair_bytes_per_s + self.all_to_all_s);
                let tree =
                    2.0 * m / self.ring_bytes_per_s + 2.0 * p.log2().ceil() * self.pair_step_s;
                let dimensional = self
                    .dimensional_s(Collective::ReduceScatter, m)
                    .zip(self.dimensional_s(Collective::AllGather, m))
                    .map_or(f64::INFINITY, |(rs, ag)| rs + ag);
                ring.min(direct).min(tree).min(dimensional)
            }
            Collective::ReduceScatter | Collective::AllGather => {
                let ring = (p - 1.0) / p * m / self.ring_bytes_per_s + (p - 1.0) * self.ring_step_s;
                let direct = m / p / self.pair_bytes_per_s + self.all_to_all_s;
                let dimensional = self.dimensional_s(collective, m);
                ring.min(direct).min(dimensional.unwrap_or(f64::INFINITY))
            }
            // Every device sends m/p to every other (Zion Eq. 3-4).
            Collective::AllToAll => m / p / self.pair_bytes_per_s + self.all_to_all_s,
            Collective::PointToPoint => m / self.next_bytes_per_s + self.next_s,
        };
        match (&self.hierarchy, collective) {
            (Some((inner, outer)), Collective::AllReduce) => {
                let pi = inner.p as f64;
                let h = inner.transfer_s(Collective::ReduceScatter, m)
                    + outer.transfer_s(Collective::AllReduce, m / pi)
                    + inner.transfer_s(Collective::AllGather, m);
                flat.min(h)
            }
            (Some((inner, outer)), Collective::ReduceScatter) => {
                let pi = inner.p as f64;
                flat.min(
                    inner.transfer_s(Collective::ReduceScatter, m)
                        + outer.transfer_s(Collective::ReduceScatter, m / pi),
                )
            }
            (Some((inner, outer)), Collective::AllGather) => {
                let pi = inner.p as f64;
                flat.min(
                    outer.transfer_s(Collective::AllGather, m / pi)
                        + inner.transfer_s(Collective::AllGather, m),
                )
            }
            _ => flat,
        }
    }
}

impl GroupLink {
    /// A reduce-scatter or all-gather of `m` bytes along the group's dimensions at once
    /// ([`GroupLink::dims`]): the 2-D torus all-reduce of Ying et al. (2018, "Image
    /// classification at supercomputer scale", arXiv:1811.06992) on TPU v3 pods, half the
    /// payload along X then Y and half along Y then X, extended to any number of
    /// dimensions. The message is cut into one chunk per dimension; chunk `c`
    /// runs the collective along dimensions `c, c + 1, ...` (cyclically) in turn, each
    /// stage on what the previous ones left, so at every stage each dimension's links carry
    /// exactly one chunk and all of a device's ports work. A stage lasts as long as its
    /// slowest chunk. None when the group spans fewer than two dimensions.
    fn dimensional_s(&self, collective: Collective, m: f64) -> Option<f64> {
        let d = self.dims.len();
        if d < 2 {
            return None;
        }
        let chunk = m / d as f64;
        let stage = |k: usize| {
            (0..d)
                .map(|c| {
                    let done: f64 = (0..k).map(|i| self.dims[(c + i) % d].p as f64).product();
                    self.dims[(c + k) % d].transfer_s(collective, chunk / done)
                })
                .fold(0.0, f64::max)
        };
        Some((0..d).map(stage).sum())
    }

    /// The phases of `collective` on `m` bytes as [`time`](Self::time) prices it: (fabric,
    /// seconds) in order. A hierarchical algorithm runs its inner and outer steps on
    /// different fabrics; any other runs on the group's outermost fabric.
    pub fn phases(&self, collective: Collective, m: f64) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        self.push_phases(collective, m, &mut out);
        // The fixed cost, on the group's outermost fabric.
        if !out.is_empty() && self.launch_s > 0.0 {
            out.push((self.level, self.launch_s));
        }
        out
    }

    /// The phases of the hops and bytes ([`GroupLink::transfer_s`]).
    fn push_phases(&self, collective: Collective, m: f64, out: &mut Vec<(usize, f64)>) {
        let total = self.transfer_s(collective, m);
        if total <= 0.0 {
            return;
        }
        if let Some((inner, outer)) = &self.hierarchy {
            let pi = inner.p as f64;
            let steps: &[(&GroupLink, Collective, f64)] = match collective {
                Collective::AllReduce => &[
                    (inner, Collective::ReduceScatter, m),
                    (outer, Collective::AllReduce, m / pi),
                    (inner, Collective::AllGather, m),
                ],
                Collective::ReduceScatter => &[
                    (inner, Collective::ReduceScatter, m),
                    (outer, Collective::ReduceScatter, m / pi),
                ],
                Collective::AllGather => &[
                    (outer, Collective::AllGather, m / pi),
                    (inner, Collective::AllGather, m),
                ],
                _ => &[],
            };
            let h: f64 = steps.iter().map(|(l, c, b)| l.transfer_s(*c, *b)).sum();
            // `time` took the hierarchical algorithm exactly when it is no slower.
            if !steps.is_empty() && h <= total {
                for (l, c, b) in steps {
                    l.push_phases(*c, *b, out);
                }
                return;
            }
        }
        out.push((self.level, total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zion's 8-node ring and fully connected systems at equal per-node bandwidth `b`.
    fn zion(b: f64, alpha: f64) -> (GroupLink, GroupLink) {
        let p = 8;
        let ring = GroupLink {
            p,
            level: 0,
            ring_bytes_per_s: b,
            ring_step_s: alpha,
            // All-pairs on a ring: link load 8 on links of b/2 (Zion's gamma = 16).
            pair_bytes_per_s: b / 2.0 / 8.0,
            pair_step_s: 4.0 * alpha,
            all_to_all_s: 16.0 * alpha,
            next_bytes_per_s: b / 2.0,
            next_s: alpha,
            hierarchy: None,
            dims: Vec::new(),
            launch_s: 0.0,
        };
        let fc = GroupLink {
            pair_bytes_per_s: b / 7.0,
            pair_step_s: alpha,
            all_to_all_s: alpha,
            ..ring.clone()
        };
        (ring, fc)
    }

    #[test]
    fn zion_equations_one_to_four() {
        let (b, a, m) = (100e9, 1e-6, 64e6);
        let (ring, fc) = zion(b, a);
        let rel = |x: f64, y: f64| (x / y - 1.0).abs() < 1e-12;
        assert!(rel(
            ring.time(Collective::AllReduce, m),
            2.0 * m / b * 7.0 / 8.0 + 14.0 * a
        ));
        assert!(rel(
            fc.time(Collective::AllReduce, m),
            2.0 * m / (b / 7.0) / 8.0 + 2.0 * a
        ));
        assert!(rel(
            ring.time(Collective::AllToAll, m),
            16.0 * (m / b / 8.0 + a)
        ));
        assert!(rel(fc.time(Collective::AllToAll, m), m / b * 7.0 / 8.0 + a));
    }

    #[test]
    fn phases_follow_the_algorithm_time_picks() {
        // 4 nodes of 8: a fast inner fabric (level 0) and a slow outer one (level 1).
        let (inner, _) = zion(300e9, 1e-6);
        let mut outer = zion(25e9, 5e-6).1;
        outer.p = 4;
        outer.level = 1;
        let mut flat = zion(25e9, 5e-6).0;
        flat.p = 32;
        flat.level = 1;
        flat.hierarchy = Some((Box::new(inner), Box::new(outer)));
        let m = 256e6;
        for c in [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::AllToAll,
        ] {
            let phases = flat.phases(c, m);
            let sum: f64 = phases.iter().map(|p| p.1).sum();
            assert!((sum / flat.time(c, m) - 1.0).abs() < 1e-12, "{c:?}");
        }
        // The hierarchical all-reduce: inner reduce-scatter, outer all-reduce, inner gather.
        let levels: Vec<usize> = flat
            .phases(Collective::AllReduce, m)
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(levels, [0, 1, 0]);
        assert_eq!(flat.phases(Collective::AllToAll, m).len(), 1);
    }
}
