//! Direct fabrics: rings, meshes, tori and twisted tori, every member linked to its grid
//! neighbours (two ports per dimension). Dimension-order routing, and all-pairs traffic
//! split evenly over every shortest path (minimal adaptive routing; this is where a twisted
//! torus gains, TPU v4 Sec. 2.5).

use std::collections::VecDeque;

use super::{Network, Shape};

impl Network {
    /// The dimension-order route inside direct fabric `f` from `cur` (local index `from`)
    /// to local index `to`: the first dimension first, each the shorter way round when the
    /// dimension wraps (ties go forward).
    pub(super) fn route_direct(
        &self,
        f: usize,
        cur: u64,
        (from, to): (u64, u64),
        dims: &[u64],
        wrap: bool,
        visit: &mut impl FnMut(usize, f64),
    ) {
        let stride = self.stride[f];
        let hop_s = self.fabrics[f].hop_s;
        let mut node = cur;
        let mut scale = 1;
        for (j, &n) in dims.iter().enumerate() {
            let x = (from / scale) % n;
            let y = (to / scale) % n;
            if x != y {
                let ahead = (y + n - x) % n;
                let (forward, steps) = if wrap {
                    (ahead <= n - ahead, ahead.min(n - ahead))
                } else {
                    (y > x, x.abs_diff(y))
                };
                let mut xi = x;
                for _ in 0..steps {
                    visit(self.port(node, f, 2 * j + usize::from(!forward)), hop_s);
                    let nx = if forward {
                        (xi + 1) % n
                    } else {
                        (xi + n - 1) % n
                    };
                    node = node + nx * scale * stride - xi * scale * stride;
                    xi = nx;
                }
            }
            scale *= n;
        }
    }

    /// All-pairs traffic inside direct fabric `f`, split evenly over shortest paths
    /// (Brandes' edge loads, restricted to members as sources and targets).
    pub(super) fn all_pairs_direct(
        &self,
        f: usize,
        groups: &[Vec<u64>],
        loads: &mut [f64],
    ) -> (Vec<f64>, f64, f64) {
        let fabric = &self.fabrics[f];
        let Shape::Direct {
            dims,
            wrap,
            twisted,
        } = &fabric.shape
        else {
            unreachable!("checked by the caller")
        };
        let n = fabric.size as usize;
        let adjacency = direct_adjacency(dims, *wrap, *twisted);
        let mut dist = vec![u32::MAX; n];
        let mut sigma = vec![0.0; n];
        let mut delta = vec![0.0; n];
        let mut order = Vec::with_capacity(n);
        let mut member = vec![false; n];
        let (mut diameter, mut sum_worst) = (0u32, 0u32);
        for g in groups {
            member.iter_mut().for_each(|m| *m = false);
            for &d in g {
                member[self.local(d, f) as usize] = true;
            }
            for &src in g {
                let s = self.local(src, f) as usize;
                dist.iter_mut().for_each(|d| *d = u32::MAX);
                sigma.iter_mut().for_each(|x| *x = 0.0);
                delta.iter_mut().for_each(|x| *x = 0.0);
                order.clear();
                dist[s] = 0;
                sigma[s] = 1.0;
                let mut queue = VecDeque::from([s]);
                while let Some(v) = queue.pop_front() {
                    order.push(v);
                    for &(w, _) in &adjacency[v] {
                        if dist[w] == u32::MAX {
                            dist[w] = dist[v] + 1;
                            queue.push_back(w);
                        }
                        if dist[w] == dist[v] + 1 {
                            sigma[w] += sigma[v];
                        }
                    }
                }
                let mut sum = 0;
                for &v in order.iter().rev() {
                    if member[v] && v != s {
                        diameter = diameter.max(dist[v]);
                        sum += dist[v];
                    }
                    for &(w, port) in &adjacency[v] {
                        if dist[w] == dist[v] + 1 {
                            let share =
                                sigma[v] / sigma[w] * (f64::from(u8::from(member[w])) + delta[w]);
                            delta[v] += share;
                            let device = self.with_local(src, f, v as u64);
                            loads[self.port(device, f, port)] += share;
                        }
                    }
                }
                sum_worst = sum_worst.max(sum);
            }
        }
        (
            self.peak(loads),
            f64::from(diameter) * fabric.hop_s,
            f64::from(sum_worst) * fabric.hop_s,
        )
    }
}

/// Neighbours (and the port reaching each) of every member of a direct fabric.
fn direct_adjacency(dims: &[u64], wrap: bool, twisted: bool) -> Vec<Vec<(usize, usize)>> {
    let n: u64 = dims.iter().product();
    let mut adjacency = vec![Vec::new(); n as usize];
    for v in 0..n {
        let mut scale = 1;
        for (j, &size) in dims.iter().enumerate() {
            let x = (v / scale) % size;
            for (dir, port) in [(1i64, 2 * j), (-1, 2 * j + 1)] {
                let nx = x as i64 + dir;
                let crosses = nx < 0 || nx >= size as i64;
                if size < 2 || (crosses && !wrap) {
                    continue;
                }
                let nx = nx.rem_euclid(size as i64) as u64;
                let mut w = v - x * scale + nx * scale;
                // Twisted torus (Camarero et al. 2014; TPU v4 n x n x 2n and n x 2n x 2n):
                // the wraparound links of a dimension shorter than the longest also advance
                // every longer dimension by half its length.
                if twisted && crosses {
                    let mut below = 1;
                    for &other in dims {
                        if other > size {
                            let o = (w / below) % other;
                            let shift = (other / 2) as i64;
                            let no = (o as i64 + dir * shift).rem_euclid(other as i64) as u64;
                            w = w - o * below + no * below;
                        }
                        below *= other;
                    }
                }
                adjacency[v as usize].push((w as usize, port));
            }
            scale *= size;
        }
    }
    adjacency
}
