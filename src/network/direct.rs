//! Direct fabrics: rings, meshes, tori and twisted tori, every member linked to its grid
//! neighbours (two ports per dimension). Dimension-order routing, and all-pairs traffic
//! split evenly over every shortest path (minimal adaptive routing; this is where a twisted
//! torus gains, TPU v4 Sec. 2.5).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::{Network, Shape};

impl Network {
    /// The dimension-order route inside direct fabric `f` from `cur` (local index `from`)
    /// to local index `to` ([`direct_route`]); `visit` sees every traversed port.
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
        let origin = cur - from * stride;
        direct_route(
            dims,
            (wrap, self.twists[f].as_ref()),
            (from, to),
            |x, port| visit(self.port(origin + x * stride, f, port), hop_s),
        );
    }

    /// All-pairs traffic inside direct fabric `f`, split evenly over shortest paths
    /// (Brandes' edge loads, restricted to members as sources and targets): the peak load
    /// on each kind of port, the longest pair latency and the longest all-pairs exchange.
    /// Every group lies in one copy of the fabric (it spans no other), so the copies whose
    /// groups have the same local indices load alike: each distinct pattern is routed once,
    /// in one copy's ports.
    pub(super) fn all_pairs_direct(&self, f: usize, groups: &[Vec<u64>]) -> (Vec<f64>, f64, f64) {
        let inner = self.stride[f];
        let outer = inner * self.fabrics[f].size;
        let mut copies: FxHashMap<(u64, u64), Vec<Vec<u64>>> = FxHashMap::default();
        for g in groups {
            let copy = (g[0] % inner, g[0] / outer);
            let local = g.iter().map(|&d| self.local(d, f)).collect();
            copies.entry(copy).or_default().push(local);
        }
        let mut patterns: Vec<Vec<Vec<u64>>> = copies.into_values().collect();
        patterns.iter_mut().for_each(|p| p.sort_unstable());
        patterns.sort_unstable();
        patterns.dedup();
        let mut peak = vec![0.0_f64; self.ports];
        let (mut diameter, mut exchange) = (0.0_f64, 0.0_f64);
        for pattern in &patterns {
            let (ports, d, e) = self.all_pairs_in_copy(f, pattern);
            for (p, l) in peak[self.port_base[f]..].iter_mut().zip(ports) {
                *p = p.max(l);
            }
            diameter = diameter.max(d);
            exchange = exchange.max(e);
        }
        (peak, diameter, exchange)
    }

    /// [`Network::all_pairs_direct`] of the groups (by local index) in one copy of direct
    /// fabric `f`: the peak load on each of the fabric's port kinds and the two latencies.
    /// A torus maps onto itself, ports included, under every translation, so two shortcuts
    /// hold there: groups that are translates of the first by a subgroup of the coordinate
    /// grid load every member as the first group's loads summed over that subgroup's coset;
    /// and a group that is itself such a coset sends from every member what its first
    /// member sends, translated. Elsewhere each group is searched from every member.
    fn all_pairs_in_copy(&self, f: usize, groups: &[Vec<u64>]) -> (Vec<f64>, f64, f64) {
        self.all_pairs_searched(f, groups, true)
    }

    /// [`Network::all_pairs_in_copy`], searching every group from every member when
    /// `symmetric` is false.
    fn all_pairs_searched(
        &self,
        f: usize,
        groups: &[Vec<u64>],
        symmetric: bool,
    ) -> (Vec<f64>, f64, f64) {
        let (loads, diameter, exchange) = self.all_pairs_loads(f, groups, symmetric);
        let ports = self.fabrics[f].ports();
        (super::peak_by_kind(&loads, ports), diameter, exchange)
    }

    /// The loads [`Network::all_pairs_searched`] peaks: every port of one copy of direct
    /// fabric `f` (its ports per local index), the longest pair latency and the latency of
    /// the longest all-pairs exchange (the longest path, or the summed hops when the fabric
    /// relays, [`super::Fabric::relays`]).
    pub(super) fn all_pairs_loads(
        &self,
        f: usize,
        groups: &[Vec<u64>],
        symmetric: bool,
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
        let ports = fabric.ports();
        let torus = symmetric && *wrap && !*twisted;
        let mut search = Brandes::new(direct_adjacency(dims, *wrap, *twisted));
        let mut loads = vec![0.0; n * ports];
        let (mut diameter, mut sum_worst) = (0u32, 0u32);
        let translates = torus.then(|| translation_steps(dims, groups)).flatten();
        let searched = match &translates {
            Some(_) => &groups[..1],
            None => groups,
        };
        for g in searched {
            let steps = torus.then(|| coset_steps(dims, g)).flatten();
            let (d, sum) = search.group(g, dims, steps.as_deref(), ports, &mut loads);
            diameter = diameter.max(d);
            sum_worst = sum_worst.max(sum);
        }
        if let Some(steps) = translates {
            loads = summed_over_cosets(&loads, dims, &steps, ports);
        }
        // Relayed, an exchange waits for every hop in turn; routed, for its longest path.
        let exchange = if fabric.relays() { sum_worst } else { diameter };
        (
            loads,
            f64::from(diameter) * fabric.hop_s,
            f64::from(exchange) * fabric.hop_s,
        )
    }
}

/// The key of local index `v`'s coset of the subgroup `s_0 Z x s_1 Z x ...` of a torus's
/// grid: its coordinates modulo the steps.
fn coset_key(v: u64, dims: &[u64], steps: &[u64]) -> usize {
    let (mut key, mut scale, mut radix) = (0, 1, 1);
    for (&d, &s) in dims.iter().zip(steps) {
        key += (v / scale) % d % s * radix;
        scale *= d;
        radix *= s;
    }
    key as usize
}

/// Every member's loads replaced by the sum of `loads` over its coset of the subgroup with
/// `steps` (`ports` per member).
fn summed_over_cosets(loads: &[f64], dims: &[u64], steps: &[u64], ports: usize) -> Vec<f64> {
    let classes: u64 = steps.iter().product();
    let mut by_class = vec![0.0; classes as usize * ports];
    for (v, member) in loads.chunks_exact(ports).enumerate() {
        let c = coset_key(v as u64, dims, steps);
        for (sum, &l) in by_class[c * ports..(c + 1) * ports].iter_mut().zip(member) {
            *sum += l;
        }
    }
    (0..loads.len() / ports)
        .flat_map(|v| {
            let c = coset_key(v as u64, dims, steps);
            by_class[c * ports..(c + 1) * ports].iter().copied()
        })
        .collect()
}

/// When every group (local indices of a torus) is the first one translated, by
/// translations forming a subgroup `s_0 Z x s_1 Z x ...` of the grid, the steps `s_j`.
fn translation_steps(dims: &[u64], groups: &[Vec<u64>]) -> Option<Vec<u64>> {
    let coords = |v: u64| {
        let mut scale = 1;
        dims.iter()
            .map(|&d| {
                let x = (v / scale) % d;
                scale *= d;
                x
            })
            .collect::<Vec<u64>>()
    };
    let shifted = |v: u64, t: &[u64]| {
        let (mut out, mut scale) = (0, 1);
        for ((&d, x), &s) in dims.iter().zip(coords(v)).zip(t) {
            out += (x + s) % d * scale;
            scale *= d;
        }
        out
    };
    let g0 = groups.first()?;
    let mut first = g0.clone();
    first.sort_unstable();
    let origin = coords(g0[0]);
    let mut translations = Vec::with_capacity(groups.len());
    for g in groups {
        let t: Vec<u64> = coords(g[0])
            .iter()
            .zip(&origin)
            .zip(dims)
            .map(|((&x, &o), &d)| (x + d - o) % d)
            .collect();
        let mut moved: Vec<u64> = first.iter().map(|&v| shifted(v, &t)).collect();
        moved.sort_unstable();
        let mut members = g.clone();
        members.sort_unstable();
        if moved != members {
            return None;
        }
        translations.push(shifted(0, &t));
    }
    coset_steps(dims, &translations)
}

/// The dimension-order route in a direct fabric of `dims` from local index `from` to `to`:
/// the first dimension first, each the shorter way round when the dimension wraps (ties
/// go forward). `visit` sees the local index and port of every hop's start.
///
/// On a twisted torus (`twisted`) a wraparound link of a dimension shorter than the longest
/// also advances every longer dimension by half its length ([`direct_adjacency`]): the
/// route takes the dimensions shortest first, so that each twist moves only dimensions
/// still to come, reads every dimension's remaining distance from where it stands, and of
/// the ways round the twisting dimensions takes those with the fewest hops in all (the
/// shorter ways where they tie).
pub(super) fn direct_route(
    dims: &[u64],
    (wrap, twist): (bool, Option<&Twist>),
    (from, to): (u64, u64),
    mut visit: impl FnMut(u64, usize),
) {
    let Some(twist) = twist else {
        // Every dimension in order, the shorter way round, nothing moving the others.
        let (mut node, mut scale) = (from, 1);
        for (j, &n) in dims.iter().enumerate() {
            let (x, y) = ((node / scale) % n, (to / scale) % n);
            if x != y {
                let ahead = (y + n - x) % n;
                let forward = if wrap { ahead <= n - ahead } else { y > x };
                let mut xi = x;
                for _ in 0..hops_along(n, wrap, x, y) {
                    visit(node, 2 * j + usize::from(!forward));
                    let nx = if forward {
                        (xi + 1) % n
                    } else {
                        (xi + n - 1) % n
                    };
                    node = node + nx * scale - xi * scale;
                    xi = nx;
                }
            }
            scale *= n;
        }
        return;
    };
    let flips = twist.ways((from, to)).1;
    twist.legs((from, to), flips, |start, j, forward, steps| {
        let mut node = start;
        for _ in 0..steps {
            visit(node, 2 * j + usize::from(!forward));
            node = twist.step(node, j, forward);
        }
    });
}

/// Hops of [`direct_route`] on a direct fabric of `dims`.
pub(super) fn direct_hops(
    dims: &[u64],
    (wrap, twist): (bool, Option<&Twist>),
    (from, to): (u64, u64),
) -> u64 {
    if let Some(twist) = twist {
        return twist.ways((from, to)).0;
    }
    let mut scale = 1;
    dims.iter()
        .map(|&n| {
            let hops = hops_along(n, wrap, (from / scale) % n, (to / scale) % n);
            scale *= n;
            hops
        })
        .sum()
}

/// A twisted torus's dimensions as its routes take them: a wraparound link of a dimension
/// shorter than the longest (`below`) also advances every longer dimension by half its
/// length ([`direct_adjacency`]), so routes take the dimensions shortest first (`order`,
/// ties in order): each twist then moves only dimensions still to come.
/// Computed once per twisted fabric (`Network::twists`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Twist {
    dims: Vec<u64>,
    scales: Vec<u64>,
    order: Vec<usize>,
    below: u64,
}

impl Twist {
    pub(super) fn new(dims: &[u64]) -> Twist {
        let scales = strides(dims);
        let mut order: Vec<usize> = (0..dims.len()).collect();
        order.sort_by_key(|&j| dims[j]);
        Twist {
            dims: dims.to_vec(),
            scales,
            order,
            below: dims.iter().copied().max().unwrap_or(1),
        }
    }

    /// The ways round the twisting dimensions (bit k set: the k-th, shortest first, goes
    /// the other way than the shorter) that give the route from `from` to `to` the fewest
    /// hops, and those hops (ties: the shorter ways).
    fn ways(&self, pair: (u64, u64)) -> (u64, u32) {
        let twisting = self.dims.iter().filter(|&&n| n < self.below).count() as u32;
        (0..1u32 << twisting)
            .map(|flips| (self.legs(pair, flips, |_, _, _, _| {}), flips))
            .min()
            .unwrap_or((0, 0))
    }

    /// The route from `from` to `to` with the twisting dimensions' ways `flips` (as
    /// [`Twist::ways`] gives them), a dimension at a time: `leg` sees the member the run
    /// along dimension `j` starts from, `j`, the way (forward or back) and its hops. Counted
    /// from the coordinates alone: a way round crosses the wraparound exactly when it
    /// passes the target going that way (forward when the target lies behind), and only a
    /// crossing of a twisting dimension moves the longer ones, which the route takes later.
    /// Returns the hops.
    fn legs(
        &self,
        (from, to): (u64, u64),
        flips: u32,
        mut leg: impl FnMut(u64, usize, bool, u64),
    ) -> u64 {
        let (mut node, mut hops, mut twisting) = (from, 0, 0);
        for &j in &self.order {
            let (n, scale) = (self.dims[j], self.scales[j]);
            let (x, y) = ((node / scale) % n, (to / scale) % n);
            if x == y {
                continue;
            }
            let ahead = (y + n - x) % n;
            let mut forward = ahead <= n - ahead;
            if n < self.below {
                forward ^= flips >> twisting & 1 == 1;
                twisting += 1;
            }
            let steps = if forward { ahead } else { n - ahead };
            leg(node, j, forward, steps);
            hops += steps;
            node = node + y * scale - x * scale;
            if forward == (y < x) {
                node = self.wrapped(node, n, forward);
            }
        }
        hops
    }

    /// The member one hop from `node` along dimension `j`, `forward` or back.
    fn step(&self, node: u64, j: usize, forward: bool) -> u64 {
        let (n, scale) = (self.dims[j], self.scales[j]);
        let x = (node / scale) % n;
        let (nx, crosses) = if forward {
            ((x + 1) % n, x + 1 == n)
        } else {
            ((x + n - 1) % n, x == 0)
        };
        let at = node + nx * scale - x * scale;
        if crosses {
            self.wrapped(at, n, forward)
        } else {
            at
        }
    }

    /// `node` after crossing the wraparound of a dimension of `n`, `forward` or back:
    /// every longer dimension advanced by half its length, if `n` is not the longest.
    fn wrapped(&self, node: u64, n: u64, forward: bool) -> u64 {
        if n >= self.below {
            return node;
        }
        let mut at = node;
        for (&other, &scale) in self.dims.iter().zip(&self.scales) {
            if other > n {
                let o = (at / scale) % other;
                let shift = if forward {
                    other / 2
                } else {
                    other - other / 2
                };
                at = at + (o + shift) % other * scale - o * scale;
            }
        }
        at
    }
}

/// The stride of each dimension's coordinate in a local index: the product of the
/// dimensions before it.
pub(super) fn strides(dims: &[u64]) -> Vec<u64> {
    let mut stride = 1;
    dims.iter()
        .map(|&n| {
            let here = stride;
            stride *= n;
            here
        })
        .collect()
}

/// Hops between coordinates `a` and `b` of one dimension of `n`: the shorter way round when
/// it wraps.
pub(super) fn hops_along(n: u64, wrap: bool, a: u64, b: u64) -> u64 {
    if wrap {
        let ahead = (b + n - a) % n;
        ahead.min(n - ahead)
    } else {
        a.abs_diff(b)
    }
}

/// For a group (local indices) that is a coset of a subgroup of a torus's coordinate grid
/// of the form `s_0 Z x s_1 Z x ...` (every combination of coordinates `r_j + k s_j`,
/// `s_j` dividing dimension `j`), the steps `s_j`.
fn coset_steps(dims: &[u64], group: &[u64]) -> Option<Vec<u64>> {
    let members = super::distinct(group.iter().copied());
    let mut steps = Vec::with_capacity(dims.len());
    let mut combinations = 1u64;
    let mut scale = 1;
    for &d in dims {
        let seen = super::distinct(members.iter().map(|&v| (v / scale) % d));
        let count = seen.len() as u64;
        if d % count != 0 {
            return None;
        }
        let step = d / count;
        if seen.iter().any(|&x| x % step != seen[0] % step) {
            return None;
        }
        steps.push(step);
        combinations *= count;
        scale *= d;
    }
    (combinations == members.len() as u64).then_some(steps)
}

/// Brandes' edge loads from one source over every shortest path of a direct fabric,
/// restricted to members as targets, with its buffers kept between sources.
struct Brandes {
    adjacency: Vec<Vec<(usize, usize)>>,
    dist: Vec<u32>,
    sigma: Vec<f64>,
    delta: Vec<f64>,
    order: Vec<usize>,
    member: Vec<bool>,
}

impl Brandes {
    fn new(adjacency: Vec<Vec<(usize, usize)>>) -> Brandes {
        let n = adjacency.len();
        Brandes {
            adjacency,
            dist: vec![u32::MAX; n],
            sigma: vec![0.0; n],
            delta: vec![0.0; n],
            order: Vec::with_capacity(n),
            member: vec![false; n],
        }
    }

    /// Adds to `loads` (`ports` per member) the all-pairs loads of `group`: searched from
    /// its first member and summed over cosets when the group is the coset of the subgroup
    /// with `steps` (a torus's), else from every member. Returns the longest and the
    /// largest summed hops from a member to the others.
    fn group(
        &mut self,
        group: &[u64],
        dims: &[u64],
        steps: Option<&[u64]>,
        ports: usize,
        loads: &mut [f64],
    ) -> (u32, u32) {
        self.members(group);
        let (mut diameter, mut sum_worst) = (0, 0);
        match steps {
            Some(steps) => {
                let mut first = vec![0.0; loads.len()];
                (diameter, sum_worst) = self.from(group[0] as usize, |v, port, part| {
                    first[v * ports + port] += part;
                });
                let summed = summed_over_cosets(&first, dims, steps, ports);
                loads.iter_mut().zip(summed).for_each(|(l, s)| *l += s);
            }
            None => {
                for &s in group {
                    let (d, sum) = self.from(s as usize, |v, port, part| {
                        loads[v * ports + port] += part;
                    });
                    diameter = diameter.max(d);
                    sum_worst = sum_worst.max(sum);
                }
            }
        }
        (diameter, sum_worst)
    }

    /// Makes `group` (local indices) the targets.
    fn members(&mut self, group: &[u64]) {
        self.member.iter_mut().for_each(|m| *m = false);
        for &x in group {
            self.member[x as usize] = true;
        }
    }

    /// Hands `share(v, port, load)` for every link of a shortest path from `s` to a
    /// member (a unit of traffic per member, split evenly over the paths); returns the
    /// longest and the summed hops to the members.
    fn from(&mut self, s: usize, mut share: impl FnMut(usize, usize, f64)) -> (u32, u32) {
        let Brandes {
            adjacency,
            dist,
            sigma,
            delta,
            order,
            member,
        } = self;
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
        let (mut longest, mut sum) = (0, 0);
        for &v in order.iter().rev() {
            if member[v] && v != s {
                longest = longest.max(dist[v]);
                sum += dist[v];
            }
            for &(w, port) in &adjacency[v] {
                if dist[w] == dist[v] + 1 {
                    let part = sigma[v] / sigma[w] * (f64::from(u8::from(member[w])) + delta[w]);
                    delta[v] += part;
                    share(v, port, part);
                }
            }
        }
        (longest, sum)
    }
}

/// The fewest links a halving cut of a twisted torus of `dims` crosses, one way: the members
/// split at the middle of one dimension, each dimension tried (a twisted wraparound crosses
/// the cut of a longer dimension as well, which is where the twist gains bisection).
pub(super) fn twisted_bisection_links(dims: &[u64]) -> f64 {
    let adjacency = direct_adjacency(dims, true, true);
    let mut scale = 1;
    let mut fewest = f64::INFINITY;
    for &n in dims {
        if n >= 2 && n % 2 == 0 {
            let side = |v: usize| (v as u64 / scale) % n < n / 2;
            let crossing = adjacency
                .iter()
                .enumerate()
                .filter(|&(v, _)| side(v))
                .map(|(_, links)| links.iter().filter(|&&(w, _)| !side(w)).count())
                .sum::<usize>();
            fewest = fewest.min(crossing as f64);
        }
        scale *= n;
    }
    fewest
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
    use crate::domain::Topology;
    use crate::network::Fabric;

    /// A twisted 4x4x8 torus's halving cuts (Camarero et al.: the twist raises the
    /// bisection of unequal tori): across z its 32 z-links and the 64 twisted x and y
    /// wraparounds, which land 4 along z; across x or y 32 links and 32 wraparounds. The
    /// fewest, 64, twice the regular torus's 2 x 16 across z.
    #[test]
    fn a_twisted_torus_doubles_the_links_its_narrowest_cut_crosses() {
        assert_eq!(twisted_bisection_links(&[4, 4, 8]), 64.0);
        let bisection = |topology: Topology| {
            Network::new(vec![Fabric::new("t", &topology, 128, 6e9, 1e-6)]).bisection_bytes_per_s()
        };
        let dims = vec![4, 4, 8];
        let ratio = bisection(Topology::TwistedTorus { dims: dims.clone() })
            / bisection(Topology::Torus { dims });
        assert!((ratio - 2.0).abs() < 1e-12, "{ratio}");
    }

    /// Routes on a twisted torus follow its links: every hop leaves where the last one
    /// arrived (the twisted wraparound included) and the route ends at its target, by a
    /// shortest path on TPU v4's 4x4x8 (its long dimension first or last), for every pair.
    #[test]
    fn twisted_routes_follow_the_twisted_links() {
        for dims in [vec![4u64, 4, 8], vec![4, 2, 4], vec![8, 4, 4]] {
            let adjacency = direct_adjacency(&dims, true, true);
            let twist = Twist::new(&dims);
            let n: u64 = dims.iter().product();
            let mut longer = 0;
            for a in 0..n {
                // Hops from a to every member, by breadth-first search of the links.
                let mut shortest = vec![u32::MAX; n as usize];
                shortest[a as usize] = 0;
                let mut queue = VecDeque::from([a as usize]);
                while let Some(v) = queue.pop_front() {
                    for &(w, _) in &adjacency[v] {
                        if shortest[w] == u32::MAX {
                            shortest[w] = shortest[v] + 1;
                            queue.push_back(w);
                        }
                    }
                }
                for b in (0..n).filter(|&b| b != a) {
                    let mut at = a;
                    direct_route(&dims, (true, Some(&twist)), (a, b), |x, port| {
                        assert_eq!(x, at, "{dims:?} {a} -> {b}");
                        at = adjacency[x as usize]
                            .iter()
                            .find(|&&(_, p)| p == port)
                            .map(|&(w, _)| w as u64)
                            .expect("a port the member has");
                    });
                    assert_eq!(at, b, "{dims:?} {a} -> {b}");
                    let mut hops = 0;
                    direct_route(&dims, (true, Some(&twist)), (a, b), |_, _| hops += 1);
                    assert_eq!(direct_hops(&dims, (true, Some(&twist)), (a, b)), hops);
                    let shortest = u64::from(shortest[b as usize]);
                    longer += usize::from(hops > shortest);
                    assert!(hops <= shortest + 2, "{dims:?} {a} -> {b}: {hops} hops");
                }
            }
            // TPU v4's k x k x 2k: every route is a shortest path. On n x 2n x 2n at n = 2
            // some shortest paths go out and back along the short dimension to take its
            // twist, which a dimension-order route does not (32 of 992 pairs, 2 hops more).
            let most = if dims == [4, 2, 4] { 32 } else { 0 };
            assert!(
                longer <= most,
                "{dims:?}: {longer} routes longer than the shortest"
            );
        }
    }

    /// Loads from the torus shortcuts (translated groups, coset groups) equal those of
    /// searching every group from every member, for every strided group set on tori and
    /// rings.
    #[test]
    fn coset_loads_equal_every_member_searched() {
        let (mut cosets, mut translates) = (0, 0);
        for dims in [vec![4, 4, 2], vec![8, 4], vec![6], vec![2, 3, 4]] {
            let n: u64 = dims.iter().product();
            let net = Network::new(vec![Fabric::new(
                "t",
                &Topology::Torus { dims: dims.clone() },
                n,
                4e9,
                1e-6,
            )]);
            for degree in (2..=n).filter(|d| n % d == 0) {
                for stride in (1..=n / degree).filter(|s| n % (s * degree) == 0) {
                    let groups: Vec<Vec<u64>> = (0..n)
                        .filter(|d| (d / stride) % degree == 0)
                        .map(|d| (0..degree).map(|c| d + c * stride).collect())
                        .collect();
                    if coset_steps(&dims, &groups[0]).is_some() {
                        cosets += 1;
                    }
                    if translation_steps(&dims, &groups).is_some() {
                        translates += 1;
                    }
                    let (a, da, ea) = net.all_pairs_searched(0, &groups, true);
                    let (b, db, eb) = net.all_pairs_searched(0, &groups, false);
                    for (x, y) in a.iter().zip(&b) {
                        assert!(
                            (x - y).abs() <= 1e-12 * y.abs(),
                            "{dims:?} {degree} {stride}"
                        );
                    }
                    assert_eq!((da, ea), (db, eb), "{dims:?} {degree} {stride}");
                }
            }
        }
        assert!(cosets >= 20, "{cosets} coset cases");
        assert!(translates >= 20, "{translates} translated cases");
    }
}
