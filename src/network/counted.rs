//! All-pairs traffic of groups spanning several fabrics (or one switched or fully connected
//! fabric), counted by member coordinates instead of routed pair by pair. Pair (a, b)
//! crosses fabric f inside the copy of f that has b's coordinates below f and a's above
//! (dimension-order routing, innermost first), from a's coordinate in f to b's: through a
//! switch (one egress and one ingress port; a fat tree with full bisection), one direct
//! link (fully connected), or the dimension-order route of a ring, mesh or torus. So a
//! port's load is a product of two member counts, and each distinct pair of coordinates is
//! routed once per copy. A test pins the loads to those of routing every pair.

use rustc_hash::FxHashMap;

use super::direct::hops_along;
use super::{Network, Shape};

impl Network {
    /// All-pairs loads of `groups` (handed to `add` as port and load) and the longest pair
    /// latency, in time linear in the ports touched for switched fabrics and in the
    /// distinct coordinate pairs times their hops for direct ones. Memory grows with the
    /// groups' members, not with the network's devices.
    pub(super) fn all_pairs_counted(
        &self,
        groups: &[Vec<u64>],
        mut add: impl FnMut(usize, f64),
    ) -> f64 {
        // Member counts by coordinates from f up (`high`), below f (`low`), above f
        // (`top`) and up to f (`base`), and by those with the coordinate in f.
        let [mut high, mut low, mut low_at, mut top, mut top_at, mut base] =
            std::array::from_fn(|_| Tally::new(self.devices));
        let mut longest = 0.0_f64;
        for g in groups {
            let spans = self.spanned_fabrics(g);
            for &f in &spans {
                let fabric = &self.fabrics[f];
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
                // The targets' and sources' counts, listed once for the loops below.
                let (lows, low_ats, tops): (Vec<_>, Vec<_>, Vec<_>) = (
                    low.iter().collect(),
                    low_at.iter().collect(),
                    top.iter().collect(),
                );
                // Leaving: sources a (by `high`) times targets b (by `low`) that differ
                // from a in f.
                for (h, na) in high.iter() {
                    let xa = h % size;
                    match &fabric.shape {
                        Shape::FullyConnected => {
                            for &(key, nb) in &low_ats {
                                let (l, xb) = (key / size, key % size);
                                if xb != xa {
                                    add(self.port(h * stride + l, f, xb as usize), na * nb);
                                }
                            }
                        }
                        Shape::Switch { .. } => {
                            for &(l, nb) in &lows {
                                let same = low_at.get(l * size + xa);
                                add(self.port(h * stride + l, f, 0), na * (nb - same));
                            }
                        }
                        // Routed copy by copy below.
                        Shape::Direct { .. } => {}
                    }
                }
                if let Shape::Direct { dims, wrap, .. } = &fabric.shape {
                    self.direct_pairs(f, (dims, *wrap), (&high, &low_at), &mut add);
                }
                // Entering a switch: targets b (by `base`) times sources a (by `top`)
                // that differ from b in f.
                if let Shape::Switch { .. } = fabric.shape {
                    for (b, nb) in base.iter() {
                        let xb = (b / stride) % size;
                        for &(t, na) in &tops {
                            let same = top_at.get(t * size + xb);
                            add(self.port(t * outer + b, f, 1), (na - same) * nb);
                        }
                    }
                }
            }
            longest = longest.max(self.longest_pair(g, &spans));
        }
        longest
    }

    /// The all-pairs loads in direct fabric `f` (of `dims`, wrapping or not): pairs from
    /// sources counted by coordinates from f up (`high`) to targets counted by coordinate
    /// below f and in f (`low_at`), each distinct coordinate pair routed once per copy of
    /// the fabric into that copy's own ports, which are then handed to `add`.
    fn direct_pairs(
        &self,
        f: usize,
        (dims, wrap): (&[u64], bool),
        (high, low_at): (&Tally, &Tally),
        add: &mut impl FnMut(usize, f64),
    ) {
        let (stride, size) = (self.stride[f], self.fabrics[f].size);
        let twist = self.twists[f].as_ref();
        let ports = self.fabrics[f].ports();
        // Copies whose sources (and targets) sit alike load alike: route each distinct
        // pair of patterns once.
        let patterns = |by_copy: FxHashMap<u64, Vec<(u64, f64)>>| {
            let mut alike: FxHashMap<Vec<(u64, u64)>, Vec<u64>> = FxHashMap::default();
            for (copy, mut at) in by_copy {
                at.sort_unstable_by_key(|&(x, _)| x);
                let key = at.iter().map(|&(x, n)| (x, n as u64)).collect();
                alike.entry(key).or_default().push(copy);
            }
            alike.into_iter().collect::<Vec<_>>()
        };
        let mut sources: FxHashMap<u64, Vec<(u64, f64)>> = FxHashMap::default();
        for (h, na) in high.iter() {
            sources.entry(h / size).or_default().push((h % size, na));
        }
        let mut targets: FxHashMap<u64, Vec<(u64, f64)>> = FxHashMap::default();
        for (key, nb) in low_at.iter() {
            targets
                .entry(key / size)
                .or_default()
                .push((key % size, nb));
        }
        let (sources, targets) = (patterns(sources), patterns(targets));
        let mut copy = vec![0.0; size as usize * ports];
        for (from, aboves) in &sources {
            for (to, belows) in &targets {
                copy.iter_mut().for_each(|l| *l = 0.0);
                for &(xa, na) in from {
                    for &(xb, nb) in to.iter().filter(|&&(xb, _)| xb != xa) {
                        super::direct::direct_route(dims, (wrap, twist), (xa, xb), |x, port| {
                            copy[x as usize * ports + port] += (na * nb) as f64;
                        });
                    }
                }
                for (i, &l) in copy.iter().enumerate().filter(|(_, &l)| l != 0.0) {
                    let (x, port) = ((i / ports) as u64, i % ports);
                    for &above in aboves {
                        for &below in belows {
                            add(self.port((above * size + x) * stride + below, f, port), l);
                        }
                    }
                }
            }
        }
    }

    /// The longest route latency between two members of `g`, which differ in the fabrics
    /// `spans`. Members forming every combination of their coordinates in those fabrics
    /// (as strided groups do) include a pair as far apart in each fabric as any: the sum of
    /// each fabric's longest. Otherwise every pair is measured.
    fn longest_pair(&self, g: &[u64], spans: &[usize]) -> f64 {
        let every_pair = |members: &[u64]| {
            // Each member's coordinate in each spanned fabric, computed once.
            let at: Vec<u64> = members
                .iter()
                .flat_map(|&d| spans.iter().map(move |&f| self.local(d, f)))
                .collect();
            let k = spans.len();
            let mut longest = 0.0_f64;
            for (i, a) in at.chunks_exact(k).enumerate() {
                for b in at[(i + 1) * k..].chunks_exact(k) {
                    let latency: f64 = spans
                        .iter()
                        .zip(a.iter().zip(b))
                        .map(|(&f, (&x, &y))| self.distance_s(f, x, y))
                        .sum();
                    longest = longest.max(latency);
                }
            }
            longest
        };
        match spans {
            // Through one switch or full mesh every pair takes the same time.
            [f] if !matches!(self.fabrics[*f].shape, Shape::Direct { .. }) => {
                return self.distance_s(*f, 0, 1);
            }
            // Small groups: measuring every pair is cheaper than sorting coordinates.
            _ if g.len() <= SMALL_GROUP => return every_pair(g),
            _ => {}
        }
        let coordinates: Vec<Vec<u64>> = spans
            .iter()
            .map(|&f| super::distinct(g.iter().map(|&d| self.local(d, f))))
            .collect();
        let combinations: f64 = coordinates.iter().map(|c| c.len() as f64).product();
        let members = super::distinct(g.iter().copied());
        if combinations == members.len() as f64 {
            return spans
                .iter()
                .zip(&coordinates)
                .map(|(&f, xs)| match &self.fabrics[f].shape {
                    // A twisted torus's distances are not a sum over dimensions: every
                    // pair is measured.
                    Shape::Direct {
                        dims,
                        wrap,
                        twisted,
                    } => (!twisted)
                        .then(|| self.farthest_by_dimension(f, dims, *wrap, xs))
                        .flatten()
                        .unwrap_or_else(|| {
                            xs.iter()
                                .flat_map(|&x| xs.iter().map(move |&y| (x, y)))
                                .map(|(x, y)| self.distance_s(f, x, y))
                                .fold(0.0, f64::max)
                        }),
                    _ => self.distance_s(f, xs[0], xs[1]),
                })
                .sum();
        }
        every_pair(&members)
    }

    /// The longest route latency between the local indices `xs` of direct fabric `f` when
    /// they hold every combination of their coordinates along the dimensions (as strided
    /// groups do): the sum of each dimension's longest hop count. `None` otherwise.
    fn farthest_by_dimension(&self, f: usize, dims: &[u64], wrap: bool, xs: &[u64]) -> Option<f64> {
        let mut scale = 1;
        let mut combinations = 1usize;
        let mut hops = 0;
        for &n in dims {
            let along = super::distinct(xs.iter().map(|&x| (x / scale) % n));
            combinations = combinations.saturating_mul(along.len());
            hops += along
                .iter()
                .flat_map(|&a| along.iter().map(move |&b| hops_along(n, wrap, a, b)))
                .max()
                .unwrap_or(0);
            scale *= n;
        }
        (combinations == xs.len()).then(|| hops as f64 * self.fabrics[f].hop_s)
    }

    /// Latency of the route inside fabric `f` from coordinate `x` to `y`.
    fn distance_s(&self, f: usize, x: u64, y: u64) -> f64 {
        let fabric = &self.fabrics[f];
        if x == y {
            return 0.0;
        }
        match &fabric.shape {
            Shape::Switch { levels } => fabric.switch_s(*levels),
            Shape::FullyConnected => fabric.hop_s,
            Shape::Direct { dims, wrap, .. } => {
                // The route's hops (a twisted torus's route follows its twisted links).
                let twist = self.twists[f].as_ref();
                super::direct::direct_hops(dims, (*wrap, twist), (x, y)) as f64 * fabric.hop_s
            }
        }
    }
}

/// Groups of at most this many members measure their longest pair pair by pair.
const SMALL_GROUP: usize = 16;

/// Networks of at most this many devices count members in arrays indexed by key (six of
/// them, 3 MiB at most); larger ones in hash maps holding only the keys counted.
const DENSE_TALLY_DEVICES: u64 = 1 << 16;

/// Member counts by integer key (below the device count), cleared in time proportional to
/// the keys used: an array on small networks, a hash map on large ones (as many entries as
/// members at most, whatever the network's size).
enum Tally {
    Dense { counts: Vec<f64>, used: Vec<u64> },
    Sparse(FxHashMap<u64, f64>),
}

impl Tally {
    fn new(devices: u64) -> Tally {
        if devices <= DENSE_TALLY_DEVICES {
            Tally::Dense {
                counts: vec![0.0; devices as usize],
                used: Vec::new(),
            }
        } else {
            Tally::Sparse(FxHashMap::default())
        }
    }

    fn add(&mut self, key: u64) {
        match self {
            Tally::Dense { counts, used } => {
                let c = &mut counts[key as usize];
                if *c == 0.0 {
                    used.push(key);
                }
                *c += 1.0;
            }
            Tally::Sparse(map) => *map.entry(key).or_insert(0.0) += 1.0,
        }
    }

    fn get(&self, key: u64) -> f64 {
        match self {
            Tally::Dense { counts, .. } => counts[key as usize],
            Tally::Sparse(map) => map.get(&key).copied().unwrap_or(0.0),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (u64, f64)> + '_> {
        match self {
            Tally::Dense { counts, used } => {
                Box::new(used.iter().map(|&k| (k, counts[k as usize])))
            }
            Tally::Sparse(map) => Box::new(map.iter().map(|(&k, &n)| (k, n))),
        }
    }

    fn clear(&mut self) {
        match self {
            Tally::Dense { counts, used } => {
                for &k in used.iter() {
                    counts[k as usize] = 0.0;
                }
                used.clear();
            }
            Tally::Sparse(map) => map.clear(),
        }
    }
}
