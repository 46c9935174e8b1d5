//! Device mapping (DeepFlow Sec. 5.2): the parallel dimensions of a strategy are laid onto
//! the device numbering one after the other, the first one on neighbouring devices of the
//! innermost physical dimension, wrapping into the next; every ordering of the parallel
//! dimensions is a candidate (4! = 24 for four).

use serde::Serialize;

use super::axis::Axis;
use super::strategy::Strategy;
use crate::network::collective::GroupLink;
use crate::network::Network;

/// One placement: the axis order (innermost first) and what each axis's groups get.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mapping {
    /// Axes with degree > 1, in the order they were laid onto the devices.
    pub order: Vec<Axis>,
    /// Per axis, indexed by `axis as usize`: [`Axis::ALL`], then every device as one group,
    /// the expert groups, the expert replicas, the shard groups and the shard replicas.
    #[serde(skip)]
    pub links: Vec<GroupLink>,
    /// Per used axis: the physical fabrics its groups span.
    pub spans: Vec<(Axis, Vec<String>)>,
}

impl Mapping {
    pub fn link(&self, axis: Axis) -> &GroupLink {
        &self.links[axis as usize]
    }
}

/// Every ordering of the used axes (one, if there are none).
pub fn orderings(s: &Strategy) -> Vec<Vec<Axis>> {
    let d = s.degrees();
    let used: Vec<Axis> = Axis::ALL
        .iter()
        .copied()
        .filter(|&a| d[a as usize] > 1)
        .collect();
    if let Some(pinned) = &s.placement {
        // The pinned axes innermost, in their order; any other used axis outside them.
        let pinned = pinned.axes();
        let mut order: Vec<Axis> = pinned
            .iter()
            .copied()
            .filter(|a| used.contains(a))
            .collect();
        order.extend(used.iter().filter(|a| !pinned.contains(a)));
        return vec![order];
    }
    let mut out = Vec::new();
    permute(&mut used.clone(), 0, &mut out);
    debug_assert_eq!(out.len(), ordering_count(s));
    out
}

/// How many orderings [`orderings`] gives, without listing them.
pub fn ordering_count(s: &Strategy) -> usize {
    if s.placement.is_some() {
        return 1;
    }
    let used = s.degrees().iter().filter(|&&d| d > 1).count();
    (1..=used).product()
}

fn permute(v: &mut Vec<Axis>, i: usize, out: &mut Vec<Vec<Axis>>) {
    if i + 1 >= v.len() {
        out.push(v.clone());
        return;
    }
    for j in i..v.len() {
        v.swap(i, j);
        permute(v, i + 1, out);
        v.swap(i, j);
    }
}

/// Places the strategy's axes in `order` onto the network and measures every axis's groups.
pub fn place(net: &Network, s: &Strategy, order: &[Axis]) -> Mapping {
    place_cached(net, s, order, false, &mut Vec::new())
}

/// As [`place`], reusing group links measured for earlier orderings (an axis's groups depend
/// only on its degree and stride); `all_devices` also measures every device as one group
/// (for table-wise sharded embeddings).
pub fn place_cached(
    net: &Network,
    s: &Strategy,
    order: &[Axis],
    all_devices: bool,
    cache: &mut Vec<((u64, u64), GroupLink, Vec<String>)>,
) -> Mapping {
    let d = s.degrees();
    let mut stride = [0u64; Axis::ALL.len()];
    let mut next = 1;
    for &a in order {
        stride[a as usize] = next;
        next *= d[a as usize];
    }
    let mut links = Vec::with_capacity(Axis::ALL.len() + 5);
    let mut spans = Vec::new();
    for a in Axis::ALL {
        let (deg, st) = (d[a as usize], stride[a as usize]);
        if deg <= 1 {
            links.push(GroupLink::single());
            continue;
        }
        if let Some((_, link, span)) = cache.iter().find(|(key, ..)| *key == (deg, st)) {
            spans.push((a, span.clone()));
            links.push(link.clone());
            continue;
        }
        let (link, span) = net.strided_link(deg, st);
        cache.push(((deg, st), link.clone(), span.clone()));
        spans.push((a, span));
        links.push(link);
    }
    // Every device as one group: the key of a single group of stride 1.
    let all = net.devices;
    links.push(match cache.iter().find(|(key, ..)| *key == (all, 1)) {
        _ if !all_devices => GroupLink::single(),
        Some((_, link, _)) => link.clone(),
        None if all > 1 => {
            let (link, span) = net.strided_link(all, 1);
            cache.push(((all, 1), link.clone(), span));
            link
        }
        None => GroupLink::single(),
    });
    // Expert groups: consecutive data-parallel ranks; an expert's replicas: every e-th.
    // Hybrid shard groups and their replicas alike.
    let (e, sd) = (s.expert, stride[Axis::Data as usize]);
    let h = s.shard_group();
    for (axis, deg, st, used) in [
        (Axis::Expert, e, sd, e > 1),
        (Axis::ExpertReplica, s.data / e, sd * e, e > 1),
        (Axis::Shard, h, sd, s.shard > 0),
        (Axis::ShardReplica, s.data / h, sd * h, s.shard > 0),
    ] {
        links.push(if used && deg > 1 {
            let (link, span) = net.strided_link(deg, st);
            spans.push((axis, span));
            link
        } else {
            GroupLink::single()
        });
    }
    Mapping {
        order: order.to_vec(),
        links,
        spans,
    }
}

/// Relative rounding a lower bound may carry above the price it bounds.
pub const BOUND_SLACK: f64 = 1e-12;

/// The mapping search over orderings (Timeloop's mapper, above the model): places `s` on
/// `net` under every ordering of its used axes (or its pinned placement), prices each with
/// `price` (lower is better; the first of equal prices wins), and returns the best mapping,
/// what `price` returned for it, and the number of orderings tried. `bound` is a lower bound
/// on `price` (`|_| 0.0` for none): orderings are priced from the lowest bound up, and
/// those whose bound cannot beat the best so far are not priced, with the same result as
/// pricing all; `beat` (a price found elsewhere, `f64::INFINITY` for none) rules out every
/// ordering whose bound is above it, and `None` comes back when that is all of them.
/// `all_devices` also measures every device as one group (table-wise sharded embeddings).
pub fn best_placement<T>(
    net: &Network,
    s: &Strategy,
    all_devices: bool,
    beat: f64,
    mut bound: impl FnMut(&Mapping) -> f64,
    mut price: impl FnMut(&Mapping) -> (f64, T),
) -> Option<(Mapping, T, usize)> {
    let orders = orderings(s);
    let mut cache = Vec::new();
    let mut maps: Vec<Mapping> = orders
        .iter()
        .map(|order| place_cached(net, s, order, all_devices, &mut cache))
        .collect();
    let bounds: Vec<f64> = maps.iter().map(&mut bound).collect();
    let mut by_bound: Vec<usize> = (0..maps.len()).collect();
    by_bound.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
    // (price, ordering, value) of the best so far.
    let mut best: Option<(f64, usize, T)> = None;
    // A bound summed differently from the price may exceed an equal price by rounding:
    // only a bound clearly above rules an ordering out.
    let above = |bound: f64, price: f64| bound > price * (1.0 + BOUND_SLACK);
    for i in by_bound {
        if above(bounds[i], beat) {
            break;
        }
        if let Some((cost, at, _)) = &best {
            if above(bounds[i], *cost) {
                break;
            }
            if bounds[i] >= *cost && i > *at {
                continue;
            }
        }
        let (cost, value) = price(&maps[i]);
        let better = best
            .as_ref()
            .map_or(true, |b| cost < b.0 || (cost == b.0 && i < b.1));
        if better {
            best = Some((cost, i, value));
        }
    }
    let (_, at, value) = best?;
    Some((maps.swap_remove(at), value, orders.len()))
}
