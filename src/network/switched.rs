//! Switched and fully connected fabrics: a pair's traffic crosses one egress and one
//! ingress port per fabric (a switch of `levels` stages, a fat tree with full bisection),
//! or one direct link (fully connected). All-pairs loads are counted per port instead of
//! routed pair by pair; a test pins them to the routed loads.

use super::{Fabric, Network, Shape};

impl Network {
    /// All-pairs loads when every fabric the groups span is a switch or fully connected,
    /// counted per port rather than routed pair by pair (the same loads as
    /// `all_pairs_routed`, in time linear in the ports touched). Pair (a, b) leaves fabric
    /// f from the device with b's coordinates below f and a's from f up, and enters the
    /// device with b's coordinates up to f and a's above; so each port's load is a product
    /// of two member counts.
    pub(super) fn all_pairs_switched(&self, groups: &[Vec<u64>], loads: &mut [f64]) -> f64 {
        // Member counts by coordinates from f up (`high`), below f (`low`), above f
        // (`top`) and up to f (`base`), and by those with the coordinate in f.
        let n = self.devices as usize;
        let [mut high, mut low, mut low_at, mut top, mut top_at, mut base] =
            std::array::from_fn(|_| Tally::new(n));
        let mut longest = 0.0_f64;
        for g in groups {
            for (f, fabric) in self.fabrics.iter().enumerate() {
                if g.iter().all(|&d| self.local(d, f) == self.local(g[0], f)) {
                    continue;
                }
                let (stride, size) = (self.stride[f], fabric.size);
                let outer = stride * size;
                for t in [
                    &mut high,
                    &mut low,
                    &mut low_at,
                    &mut top,
                    &mut top_at,
                    &mut base,
                ] {
                    t.clear();
                }
                for &d in g {
                    let x = self.local(d, f);
                    high.add(d / stride);
                    low.add(d % stride);
                    low_at.add(d % stride * size + x);
                    top.add(d / outer);
                    top_at.add(d / outer * size + x);
                    base.add(d % outer);
                }
                // Leaving: sources a (by `high`) times targets b (by `low`) that differ
                // from a in f.
                for (h, na) in high.iter() {
                    let xa = h % size;
                    match fabric.shape {
                        Shape::FullyConnected => {
                            for (key, nb) in low_at.iter() {
                                let (l, xb) = (key / size, key % size);
                                if xb != xa {
                                    loads[self.port(h * stride + l, f, xb as usize)] += na * nb;
                                }
                            }
                        }
                        _ => {
                            for (l, nb) in low.iter() {
                                let same = low_at.get(l * size + xa);
                                loads[self.port(h * stride + l, f, 0)] += na * (nb - same);
                            }
                        }
                    }
                }
                // Entering a switch: targets b (by `base`) times sources a (by `top`)
                // that differ from b in f.
                if let Shape::Switch { .. } = fabric.shape {
                    for (b, nb) in base.iter() {
                        let xb = (b / stride) % size;
                        for (t, na) in top.iter() {
                            let same = top_at.get(t * size + xb);
                            loads[self.port(t * outer + b, f, 1)] += (na - same) * nb;
                        }
                    }
                }
            }
            let hop = |fabric: &Fabric| match fabric.shape {
                Shape::Switch { levels } => fabric.switch_s(levels),
                _ => fabric.hop_s,
            };
            let spans: Vec<usize> = (0..self.fabrics.len())
                .filter(|&f| g.iter().any(|&d| self.local(d, f) != self.local(g[0], f)))
                .collect();
            if let [f] = spans[..] {
                longest = longest.max(hop(&self.fabrics[f]));
                continue;
            }
            for (i, &a) in g.iter().enumerate() {
                for &b in &g[i + 1..] {
                    let latency: f64 = self
                        .fabrics
                        .iter()
                        .enumerate()
                        .filter(|&(f, _)| self.local(a, f) != self.local(b, f))
                        .map(|(_, fabric)| hop(fabric))
                        .sum();
                    longest = longest.max(latency);
                }
            }
        }
        longest
    }
}

/// Counts by small integer keys (below the device count), cleared in time proportional
/// to the keys used.
struct Tally {
    counts: Vec<f64>,
    used: Vec<u64>,
}

impl Tally {
    fn new(n: usize) -> Tally {
        Tally {
            counts: vec![0.0; n],
            used: Vec::new(),
        }
    }

    fn add(&mut self, key: u64) {
        let c = &mut self.counts[key as usize];
        if *c == 0.0 {
            self.used.push(key);
        }
        *c += 1.0;
    }

    fn get(&self, key: u64) -> f64 {
        self.counts[key as usize]
    }

    fn iter(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        self.used.iter().map(|&k| (k, self.counts[k as usize]))
    }

    fn clear(&mut self) {
        for &k in &self.used {
            self.counts[k as usize] = 0.0;
        }
        self.used.clear();
    }
}
