//! The physical network of a system: fabrics from the innermost (inside a node) to the
//! outermost, each a topology over the groups of the fabric inside it; dimension-order
//! (X-Y) routing of logical edges onto physical links; the load each link carries when all
//! groups of a parallel dimension communicate at once, which derates its bandwidth
//! (DeepFlow Sec. 5.2, 6.4).
//!
//! Device `i` has, in fabric `f`, the local index `(i / stride_f) % size_f`; inside a direct
//! fabric (ring, mesh, torus) the local index splits into coordinates, first dimension
//! fastest.

use std::collections::VecDeque;

use serde::Serialize;

use super::collective::GroupLink;
use crate::config::raw::Topology;

/// How a fabric connects its members.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Shape {
    /// Point-to-point links to grid neighbours; `wrap` adds the wraparound links of a torus
    /// or ring; `twisted` rewires the wraparound links of the two short dimensions of an
    /// n x n x 2n torus (TPU v4).
    Direct {
        dims: Vec<u64>,
        wrap: bool,
        twisted: bool,
    },
    /// Every member has one port into a non-blocking switch (NVSwitch, a fat tree or a
    /// rail-optimised fabric with full bisection); `levels` switch stages on the longest path.
    Switch { levels: u64 },
    /// A direct link between every pair; a member's bandwidth is split over its p - 1 links.
    FullyConnected,
}

/// One level of the network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fabric {
    pub name: String,
    pub shape: Shape,
    /// Members (devices, or groups of the fabric inside).
    pub size: u64,
    /// What one device can send into this fabric, per direction, B/s.
    pub egress_bytes_per_s: f64,
    /// Latency of one link (or one switch stage), s.
    pub hop_s: f64,
}

impl Fabric {
    /// Builds a fabric from a template topology joining `size` members.
    pub fn new(name: &str, topology: &Topology, size: u64, egress: f64, hop_s: f64) -> Fabric {
        let shape = match topology {
            Topology::Ring => Shape::Direct {
                dims: vec![size],
                wrap: true,
                twisted: false,
            },
            Topology::Mesh { dims } => Shape::Direct {
                dims: dims.clone(),
                wrap: false,
                twisted: false,
            },
            Topology::Torus { dims } => Shape::Direct {
                dims: dims.clone(),
                wrap: true,
                twisted: false,
            },
            Topology::TwistedTorus { dims } => Shape::Direct {
                dims: dims.clone(),
                wrap: true,
                twisted: true,
            },
            Topology::FullyConnected => Shape::FullyConnected,
            Topology::Switch => Shape::Switch { levels: 1 },
            Topology::FatTree { levels } => Shape::Switch { levels: *levels },
        };
        Fabric {
            name: name.to_string(),
            shape,
            size,
            egress_bytes_per_s: egress,
            hop_s,
        }
    }

    /// Ports per device in this fabric.
    fn ports(&self) -> usize {
        match &self.shape {
            Shape::Direct { dims, .. } => 2 * dims.len(),
            Shape::Switch { .. } => 2,
            Shape::FullyConnected => self.size as usize,
        }
    }

    /// Bandwidth of one port, per direction.
    fn port_bytes_per_s(&self) -> f64 {
        match &self.shape {
            Shape::Direct { dims, .. } => {
                let used = dims.iter().filter(|&&d| d > 1).count().max(1);
                self.egress_bytes_per_s / (2 * used) as f64
            }
            Shape::Switch { .. } => self.egress_bytes_per_s,
            Shape::FullyConnected => self.egress_bytes_per_s / (self.size.max(2) - 1) as f64,
        }
    }

    fn switch_s(&self, levels: u64) -> f64 {
        self.hop_s * (2 * levels - 1) as f64
    }
}

/// The whole network: fabrics innermost first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub fabrics: Vec<Fabric>,
    pub devices: u64,
    #[serde(skip)]
    stride: Vec<u64>,
    #[serde(skip)]
    port_base: Vec<usize>,
    #[serde(skip)]
    ports: usize,
    #[serde(skip)]
    port_bw: Vec<f64>,
}

/// One traversed port and its latency.
type Hop = (usize, f64);

impl Network {
    pub fn new(fabrics: Vec<Fabric>) -> Network {
        let mut stride = Vec::new();
        let mut port_base = Vec::new();
        let mut port_bw = Vec::new();
        let (mut devices, mut ports) = (1, 0);
        for f in &fabrics {
            stride.push(devices);
            port_base.push(ports);
            devices *= f.size;
            ports += f.ports();
            port_bw.extend(std::iter::repeat(f.port_bytes_per_s()).take(f.ports()));
        }
        Network {
            fabrics,
            devices,
            stride,
            port_base,
            ports,
            port_bw,
        }
    }

    fn local(&self, device: u64, f: usize) -> u64 {
        (device / self.stride[f]) % self.fabrics[f].size
    }

    fn with_local(&self, device: u64, f: usize, local: u64) -> u64 {
        device - self.local(device, f) * self.stride[f] + local * self.stride[f]
    }

    fn port(&self, device: u64, f: usize, port: usize) -> usize {
        device as usize * self.ports + self.port_base[f] + port
    }

    /// Dimension-order route from `a` to `b`: innermost fabric first, and inside a direct
    /// fabric the first dimension first, each the shorter way round (ties go forward).
    fn route(&self, a: u64, b: u64, hops: &mut Vec<Hop>) {
        hops.clear();
        let mut cur = a;
        for (f, fabric) in self.fabrics.iter().enumerate() {
            let (from, to) = (self.local(cur, f), self.local(b, f));
            if from == to {
                continue;
            }
            match &fabric.shape {
                Shape::Direct { dims, wrap, .. } => {
                    let mut coord = from;
                    let mut scale = 1;
                    for (j, &n) in dims.iter().enumerate() {
                        let x = (coord / scale) % n;
                        let y = (to / scale) % n;
                        if x != y {
                            let fwd = (y + n - x) % n;
                            let forward = if *wrap { fwd <= n - fwd } else { y > x };
                            let steps = if forward {
                                if *wrap {
                                    fwd
                                } else {
                                    y - x
                                }
                            } else if *wrap {
                                n - fwd
                            } else {
                                x - y
                            };
                            let mut xi = x;
                            for _ in 0..steps {
                                let node = self.with_local(cur, f, coord);
                                hops.push((
                                    self.port(node, f, 2 * j + usize::from(!forward)),
                                    fabric.hop_s,
                                ));
                                let nx = if forward {
                                    (xi + 1) % n
                                } else {
                                    (xi + n - 1) % n
                                };
                                coord = coord - xi * scale + nx * scale;
                                xi = nx;
                            }
                        }
                        scale *= n;
                    }
                    cur = self.with_local(cur, f, to);
                }
                Shape::Switch { levels } => {
                    let next = self.with_local(cur, f, to);
                    hops.push((self.port(cur, f, 0), fabric.switch_s(*levels)));
                    hops.push((self.port(next, f, 1), 0.0));
                    cur = next;
                }
                Shape::FullyConnected => {
                    hops.push((self.port(cur, f, to as usize), fabric.hop_s));
                    cur = self.with_local(cur, f, to);
                }
            }
        }
    }

    /// Adds one to every port on the route of each edge; returns the longest path latency.
    fn load(&self, edges: impl Iterator<Item = (u64, u64)>, loads: &mut [f64]) -> f64 {
        let mut hops = Vec::new();
        let mut longest = 0.0_f64;
        for (a, b) in edges {
            self.route(a, b, &mut hops);
            longest = longest.max(hops.iter().map(|h| h.1).sum());
            for &(p, _) in &hops {
                loads[p] += 1.0;
            }
        }
        longest
    }

    /// The bandwidth every loaded port leaves one edge: min over ports of bandwidth / load.
    fn share(&self, loads: &[f64]) -> f64 {
        loads
            .iter()
            .enumerate()
            .filter(|(_, &l)| l > 0.0)
            .map(|(i, &l)| self.port_bw[i % self.ports] / l)
            .fold(f64::INFINITY, f64::min)
    }

    /// Names of the fabrics a group's members differ in.
    pub fn spanned(&self, group: &[u64]) -> Vec<String> {
        (0..self.fabrics.len())
            .filter(|&f| {
                group
                    .iter()
                    .any(|&d| self.local(d, f) != self.local(group[0], f))
            })
            .map(|f| self.fabrics[f].name.clone())
            .collect()
    }

    /// What the groups (each listed in ring order; all the same size) get from the
    /// network when they communicate at the same time.
    pub fn group_link(&self, groups: &[Vec<u64>]) -> GroupLink {
        let p = groups.first().map_or(1, |g| g.len() as u64);
        if p <= 1 {
            return GroupLink::single();
        }
        let mut loads = vec![0.0; self.devices as usize * self.ports];
        // Bidirectional ring: half the message each way.
        let ring_step = self.load(
            groups.iter().flat_map(|g| {
                let n = g.len();
                (0..n).flat_map(move |i| [(g[i], g[(i + 1) % n]), (g[(i + 1) % n], g[i])])
            }),
            &mut loads,
        );
        let ring = 2.0 * self.share(&loads);
        // Pipeline successor: the open chain.
        loads.iter_mut().for_each(|l| *l = 0.0);
        let next_s = self.load(
            groups
                .iter()
                .flat_map(|g| g.windows(2).map(|w| (w[0], w[1]))),
            &mut loads,
        );
        let next = self.share(&loads);
        let (pair, pair_step, all_to_all) = self.all_pairs(groups, &mut loads);
        GroupLink {
            p,
            ring_bytes_per_s: ring,
            ring_step_s: ring_step,
            pair_bytes_per_s: pair,
            pair_step_s: pair_step,
            all_to_all_s: all_to_all,
            next_bytes_per_s: next,
            next_s,
            hierarchy: self.hierarchy(groups),
        }
    }

    /// Bandwidth per pair, the longest pair latency and the latency of one all-pairs
    /// exchange. Groups inside one direct fabric spread each pair's traffic evenly over all
    /// its shortest paths (minimal adaptive routing; this is where a twisted torus gains);
    /// elsewhere pairs follow the dimension-order route.
    fn all_pairs(&self, groups: &[Vec<u64>], loads: &mut [f64]) -> (f64, f64, f64) {
        loads.iter_mut().for_each(|l| *l = 0.0);
        let g0 = &groups[0];
        let spanned: Vec<usize> = (0..self.fabrics.len())
            .filter(|&f| g0.iter().any(|&d| self.local(d, f) != self.local(g0[0], f)))
            .collect();
        if let [f] = spanned[..] {
            if matches!(self.fabrics[f].shape, Shape::Direct { .. }) {
                return self.all_pairs_direct(f, groups, loads);
            }
        }
        let longest = self.load(
            groups.iter().flat_map(|g| {
                g.iter()
                    .flat_map(move |&a| g.iter().filter(move |&&b| b != a).map(move |&b| (a, b)))
            }),
            loads,
        );
        let switched = spanned
            .iter()
            .all(|&f| !matches!(self.fabrics[f].shape, Shape::Direct { .. }));
        let a2a = if switched {
            longest
        } else {
            longest * (g0.len() as f64 - 1.0)
        };
        (self.share(loads), longest, a2a)
    }

    /// All-pairs traffic inside direct fabric `f`, split evenly over shortest paths
    /// (Brandes' edge loads, restricted to members as sources and targets).
    fn all_pairs_direct(
        &self,
        f: usize,
        groups: &[Vec<u64>],
        loads: &mut [f64],
    ) -> (f64, f64, f64) {
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
            self.share(loads),
            f64::from(diameter) * fabric.hop_s,
            f64::from(sum_worst) * fabric.hop_s,
        )
    }

    /// Splits groups that span more than one fabric into an inner part (members sharing
    /// the outermost spanned fabric's coordinate) and an outer part, when that split is
    /// regular.
    fn hierarchy(&self, groups: &[Vec<u64>]) -> Option<(Box<GroupLink>, Box<GroupLink>)> {
        let g0 = &groups[0];
        let outermost = (0..self.fabrics.len())
            .rev()
            .find(|&f| g0.iter().any(|&d| self.local(d, f) != self.local(g0[0], f)))?;
        let key = |d: u64| d / self.stride[outermost];
        let mut inner_groups = Vec::new();
        let mut outer_groups = Vec::new();
        for g in groups {
            let mut inner: Vec<Vec<u64>> = Vec::new();
            for &d in g {
                match inner.iter_mut().find(|v| key(v[0]) == key(d)) {
                    Some(v) => v.push(d),
                    None => inner.push(vec![d]),
                }
            }
            let pi = inner[0].len();
            if pi == 1 || inner.len() == 1 || inner.iter().any(|v| v.len() != pi) {
                return None;
            }
            for i in 0..pi {
                outer_groups.push(inner.iter().map(|v| v[i]).collect());
            }
            inner_groups.extend(inner);
        }
        Some((
            Box::new(self.group_link(&inner_groups)),
            Box::new(self.group_link(&outer_groups)),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_dimension_order() {
        let net = Network::new(vec![Fabric::new(
            "t",
            &Topology::Torus { dims: vec![4, 4] },
            16,
            4e9,
            1e-6,
        )]);
        let mut hops = Vec::new();
        // (0,0) -> (3,2): one hop backwards in x (wraparound), two forward in y.
        net.route(0, 3 + 4 * 2, &mut hops);
        assert_eq!(hops.len(), 3);
        assert_eq!(hops[0].0, 1); // device 0, port x-
        assert_eq!(hops[1].0, 3 * 4 + 2); // device 3, port y+
    }
}
