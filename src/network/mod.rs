//! The physical network of a system: fabrics from the innermost (inside a node) to the
//! outermost, each a topology over the groups of the fabric inside it; dimension-order
//! (X-Y) routing of logical edges onto physical links; the load each link carries when all
//! groups of a parallel dimension communicate at once, which derates its bandwidth
//! (DeepFlow Sec. 5.2, 6.4).
//!
//! Device `i` has, in fabric `f`, the local index `(i / stride_f) % size_f`; inside a direct
//! fabric (ring, mesh, torus) the local index splits into coordinates, first dimension
//! fastest.
//!
//! Owns: [`Fabric`] (a topology block, `fabric.rs`; direct fabrics' routes and their
//! all-pairs traffic in `direct.rs`; all-pairs traffic counted across fabrics in
//! `counted.rs`), [`Network`] (the stack of fabrics, routing,
//! the link loads of groups communicating at once, memoised per group set; a parallel
//! axis's groups priced from a few of them through the network's symmetries, `Symmetry`,
//! so that the cost follows the distinct group shapes, not the device count), [`collective`]
//! (collective algorithms and their cost on a group's link, DeepFlow Sec. 6.4 and Zion
//! Eqs. 1-4), [`system`] (a system file: accelerator and fabrics, links resolved at load), [`host`]
//! (the CPUs beside the accelerators: their memory and link, for host-resident tables), [`scale`]
//! (what-if multipliers on a generated machine's resources).
//! Imports the generator and configuration stages only.
//!
//! A new topology kind: see `fabric.rs`. A new collective: a [`collective::Collective`]
//! variant with its time on a `GroupLink` and its per-fabric phases.

pub mod availability;
pub mod collective;
mod counted;
mod direct;
mod fabric;
pub mod host;
pub mod scale;
pub mod system;

pub use fabric::{Fabric, Shape};

pub use system::System;

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use collective::GroupLink;

/// The whole network: fabrics innermost first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub fabrics: Vec<Fabric>,
    pub devices: u64,
    /// The CPUs beside the devices, whose memory may hold embedding tables.
    pub host: Option<host::Host>,
    #[serde(skip)]
    stride: Vec<u64>,
    #[serde(skip)]
    port_base: Vec<usize>,
    #[serde(skip)]
    ports: usize,
    #[serde(skip)]
    port_bw: Vec<f64>,
    /// Every device's coordinate in every fabric, device-major, on networks of at most
    /// [`CACHED_COORDINATES`] devices (larger ones compute them): routing reads them often.
    #[serde(skip)]
    locals: Option<Arc<[u32]>>,
    /// Group shapes already computed, shared by networks of the same topology.
    #[serde(skip)]
    memo: Memo,
    /// Each twisted torus's route order, by fabric ([`direct::Twist`]).
    #[serde(skip)]
    twists: Vec<Option<direct::Twist>>,
}

/// Networks of at most this many devices keep their devices' coordinates (1 MiB for four
/// fabrics); larger ones compute them, so that a network's memory stays independent of its
/// device count.
const CACHED_COORDINATES: u64 = 1 << 16;

/// What a set of simultaneous groups loads, independent of bandwidth: the peak load on each
/// kind of port for ring, chain and all-pairs traffic, and the latencies.
#[derive(Debug, Default)]
struct GroupShape {
    p: u64,
    /// The outermost fabric the groups span: the ports their traffic is bound by.
    level: usize,
    ring: Vec<f64>,
    ring_step_s: f64,
    pair: Vec<f64>,
    pair_step_s: f64,
    all_to_all_s: f64,
    next: Vec<f64>,
    next_s: f64,
    hierarchy: Option<Box<(Arc<GroupShape>, Arc<GroupShape>)>>,
    /// The groups' parts along each dimension of the one direct fabric they span, when
    /// they span several of its dimensions, each group as the whole product of its
    /// coordinates; innermost dimension first ([`collective::GroupLink::dims`]).
    dims: Vec<Arc<GroupShape>>,
}

/// Group shapes by group set. Clones share it; it never changes a result, so networks
/// compare equal whatever it holds.
#[derive(Debug, Clone, Default)]
struct Memo(Arc<Mutex<Memos>>);

#[derive(Debug, Default)]
struct Memos {
    shapes: FxHashMap<Groups, Arc<GroupShape>>,
    /// Strided group sets ([`Network::strided_link`]) by (degree, stride): their shape and
    /// the fabrics a group spans.
    strided: FxHashMap<(u64, u64), (Arc<GroupShape>, Vec<String>)>,
}

/// Groups of devices communicating at once, each in ring order.
type Groups = Vec<Vec<u64>>;

/// The symmetry of the groups of `degree` devices `stride` apart on a network whose
/// boundaries nest ([`Network::symmetry`]). A device index is read as digits between
/// consecutive boundaries. Shifting the values of a digit inside a switch cyclically, or
/// translating the upper digits of a torus dimension, maps the network (routes and ports
/// included) and the groups onto themselves. So the loads of a device depend only on its other digits,
/// the held ones: its position in its group (the digits from `stride` up to `stride x
/// degree`), the digits of fabrics that have no translations (meshes, twisted tori, full
/// meshes) and those between the lower boundary of a torus dimension and a stride inside
/// it. The groups fall into classes, one per value of the held digits outside the position
/// (each class's first group has its free digits 0), and a class holds as many groups as
/// devices share a value of every held digit: summed over the classes' first groups, the
/// routes put on a held value's ports the load of each device with that value. Position
/// digits inside a switch are freed too ([`Kind::Spread`]): the sum is then shared by the
/// devices that differ only there.
#[derive(Debug)]
struct Symmetry {
    stride: u64,
    degree: u64,
    /// The held digits, lowest first.
    digits: Vec<Digit>,
}

/// The digit of a device index `d` between two boundaries: `(d / low) % size`.
#[derive(Debug)]
struct Digit {
    low: u64,
    size: u64,
    kind: Kind,
}

/// What a [`Symmetry`] does with a digit that is not free.
#[derive(Debug, PartialEq)]
enum Kind {
    /// A digit of the position in a group: 0 in every first group, held.
    Position,
    /// A digit of the position inside a switch: permuting its values maps every group onto
    /// itself, so the devices differing only there carry the same loads. Free, but each
    /// first group's routes then land on `size` times the devices of a held value.
    Spread,
    /// Held, and enumerated by the first groups.
    Held,
}

impl Symmetry {
    /// The digits held (not free), lowest first.
    fn held(&self) -> impl Iterator<Item = &Digit> {
        self.digits.iter().filter(|d| d.kind != Kind::Spread)
    }

    /// The number of distinct values of the held digits (spread ones not).
    fn classes(&self) -> usize {
        self.held().map(|d| d.size as usize).product()
    }

    /// How many devices of a held value the first groups' routes load per device that
    /// carries that load ([`Kind::Spread`]).
    fn spread(&self) -> f64 {
        self.digits
            .iter()
            .filter(|d| d.kind == Kind::Spread)
            .map(|d| d.size as f64)
            .product()
    }

    /// The held digits of device `d`, as one index (below [`Symmetry::classes`] without the
    /// spread digits); with them when `spread`.
    fn class(&self, d: u64, spread: bool) -> usize {
        self.class_where(d, |_, digit| spread || digit.kind != Kind::Spread)
    }

    /// The digits of device `d` that `keep` (by index and digit) keeps, as one index.
    fn class_where(&self, d: u64, keep: impl Fn(usize, &Digit) -> bool) -> usize {
        let (mut class, mut radix) = (0, 1);
        for (i, digit) in self.digits.iter().enumerate() {
            if keep(i, digit) {
                class += ((d / digit.low) % digit.size) as usize * radix;
                radix *= digit.size as usize;
            }
        }
        class
    }

    /// The highest position digit, when it lies inside a switch: shifting its values
    /// cyclically rotates every group's ring by whole blocks of members, so every device
    /// that differs from another only there carries the same ring loads. Its index.
    fn rotating(&self) -> Option<usize> {
        let (i, top) = self
            .digits
            .iter()
            .enumerate()
            .rev()
            .find(|(_, d)| d.kind != Kind::Held)?;
        (top.kind == Kind::Spread).then_some(i)
    }

    /// The first group of each class: every value of the held digits outside the position,
    /// the other digits 0.
    fn firsts(&self) -> Groups {
        let mut bases = vec![0u64];
        for digit in self.digits.iter().filter(|d| d.kind == Kind::Held) {
            bases = bases
                .iter()
                .flat_map(|&b| (0..digit.size).map(move |v| b + v * digit.low))
                .collect();
        }
        bases
            .iter()
            .map(|&b| (0..self.degree).map(|c| b + c * self.stride).collect())
            .collect()
    }
}

impl Memo {
    fn get(&self, groups: &[Vec<u64>]) -> Option<Arc<GroupShape>> {
        self.0.lock().ok()?.shapes.get(groups).cloned()
    }

    fn get_strided(&self, key: (u64, u64)) -> Option<(Arc<GroupShape>, Vec<String>)> {
        self.0.lock().ok()?.strided.get(&key).cloned()
    }

    fn insert_strided(&self, key: (u64, u64), value: (Arc<GroupShape>, Vec<String>)) {
        if let Ok(mut memos) = self.0.lock() {
            memos.strided.insert(key, value);
        }
    }

    fn insert(&self, groups: &[Vec<u64>], shape: GroupShape) -> Arc<GroupShape> {
        let shape = Arc::new(shape);
        if let Ok(mut map) = self.0.lock() {
            map.shapes.insert(groups.to_vec(), shape.clone());
        }
        shape
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl Network {
    /// Fabrics whose members cannot send at all (no bandwidth: a network of 0 lanes or
    /// no power), by name and members: any bytes across them take forever.
    pub fn dead_fabrics(&self) -> Vec<String> {
        self.fabrics
            .iter()
            .filter(|f| {
                f.size > 1 && (f.egress_bytes_per_s.is_nan() || f.egress_bytes_per_s <= 0.0)
            })
            .map(|f| {
                format!(
                    "{} ({} members, {} B/s per device)",
                    f.name, f.size, f.egress_bytes_per_s
                )
            })
            .collect()
    }

    /// Bisection bandwidth, bytes per second each way: the least bandwidth across any cut
    /// of the devices into halves along one fabric (every device of a member has its own
    /// ports). A torus or mesh is cut across its longest dimension (the wraparound doubles
    /// the links cut), a twisted torus where it crosses the fewest links (its twisted
    /// wraparounds cross a longer dimension's cut too), a switch passes half its ports'
    /// bandwidth, a full mesh the links between its halves. One device has none (0).
    pub fn bisection_bytes_per_s(&self) -> f64 {
        let mut inside = 1.0; // devices per member of the fabric
        let mut best = f64::INFINITY;
        for f in &self.fabrics {
            let size = f.size as f64;
            let outside = self.devices as f64 / (inside * size); // copies of this fabric
            let links = match &f.shape {
                Shape::Direct {
                    dims,
                    twisted: true,
                    ..
                } => direct::twisted_bisection_links(dims),
                Shape::Direct { dims, wrap, .. } => {
                    let longest = dims.iter().copied().max().unwrap_or(1);
                    if longest < 2 {
                        f64::INFINITY
                    } else {
                        let wraps = if *wrap && longest > 2 { 2.0 } else { 1.0 };
                        size / longest as f64 * wraps
                    }
                }
                Shape::Switch { .. } => (size / 2.0).floor(),
                Shape::FullyConnected => (size / 2.0).floor() * (size / 2.0).ceil(),
            };
            if f.size >= 2 && links.is_finite() {
                best = best.min(outside * inside * links * f.port_bytes_per_s());
            }
            inside *= size;
        }
        if best.is_finite() {
            best
        } else {
            0.0
        }
    }

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
        let locals = (devices <= CACHED_COORDINATES).then(|| {
            (0..devices)
                .flat_map(|d| {
                    let stride = &stride;
                    fabrics
                        .iter()
                        .enumerate()
                        .map(move |(f, fabric)| ((d / stride[f]) % fabric.size) as u32)
                })
                .collect::<Vec<u32>>()
                .into()
        });
        let twists = fabrics
            .iter()
            .map(|f| match &f.shape {
                Shape::Direct {
                    dims,
                    twisted: true,
                    ..
                } => Some(direct::Twist::new(dims)),
                _ => None,
            })
            .collect();
        Network {
            fabrics,
            devices,
            locals,
            twists,
            host: None,
            stride,
            port_base,
            ports,
            port_bw,
            memo: Memo::default(),
        }
    }

    /// The network of `fabrics`, reusing this one's group shapes when the topology and
    /// latencies are the same (only bandwidths differ, as between the designs of a budget
    /// optimization).
    pub fn rebuilt(&self, fabrics: Vec<Fabric>) -> Network {
        let same_topology = self.fabrics.len() == fabrics.len()
            && self
                .fabrics
                .iter()
                .zip(&fabrics)
                .all(|(a, b)| a.shape == b.shape && a.size == b.size);
        if !same_topology {
            return Network::new(fabrics).with_host(self.host);
        }
        let port_bw = fabrics
            .iter()
            .flat_map(|f| std::iter::repeat(f.port_bytes_per_s()).take(f.ports()))
            .collect();
        let mut net = Network {
            fabrics,
            port_bw,
            memo: Memo::default(),
            ..self.clone()
        };
        net.share_shapes(self);
        net
    }

    /// The same network with `host` beside its devices.
    pub fn with_host(mut self, host: Option<host::Host>) -> Network {
        self.host = host;
        self
    }

    /// A copy that has computed no group shapes yet.
    pub fn fresh(&self) -> Network {
        Network {
            memo: Memo::default(),
            ..self.clone()
        }
    }

    /// Takes over `other`'s computed group shapes when both networks have the same
    /// topology, latencies and forwarding (only bandwidths differ), so that a search over
    /// designs routes each group set once. Returns whether it did.
    pub fn share_shapes(&mut self, other: &Network) -> bool {
        let same = self.fabrics.len() == other.fabrics.len()
            && self.fabrics.iter().zip(&other.fabrics).all(|(a, b)| {
                a.shape == b.shape
                    && a.size == b.size
                    && a.hop_s == b.hop_s
                    && a.forwarding == b.forwarding
                    && a.plane_collectives == b.plane_collectives
            });
        if same {
            self.memo = other.memo.clone();
        }
        same
    }

    fn local(&self, device: u64, f: usize) -> u64 {
        match &self.locals {
            Some(locals) => locals[device as usize * self.fabrics.len() + f] as u64,
            None => (device / self.stride[f]) % self.fabrics[f].size,
        }
    }

    fn port(&self, device: u64, f: usize, port: usize) -> usize {
        device as usize * self.ports + self.port_base[f] + port
    }

    /// Dimension-order route from `a` to `b`: innermost fabric first, and inside a direct
    /// fabric the first dimension first, each the shorter way round (ties go forward).
    /// `visit` sees every traversed port with its latency, in order.
    fn route(&self, a: u64, b: u64, mut visit: impl FnMut(usize, f64)) {
        let mut cur = a;
        for (f, fabric) in self.fabrics.iter().enumerate() {
            // `cur` differs from `a` only in fabrics already traversed.
            let (from, to) = (self.local(a, f), self.local(b, f));
            if from == to {
                continue;
            }
            let stride = self.stride[f];
            let next = cur + to * stride - from * stride;
            match &fabric.shape {
                Shape::Direct { dims, wrap, .. } => {
                    self.route_direct(f, cur, (from, to), dims, *wrap, &mut visit)
                }
                Shape::Switch { levels } => {
                    visit(self.port(cur, f, 0), fabric.switch_s(*levels));
                    visit(self.port(next, f, 1), 0.0);
                }
                Shape::FullyConnected => {
                    visit(self.port(cur, f, to as usize), fabric.hop_s);
                }
            }
            cur = next;
        }
    }

    /// Adds one unit of load on every port the routes of `edges` traverse; returns the
    /// latency of the longest route.
    fn load(&self, edges: impl Iterator<Item = (u64, u64)>, loads: &mut [f64]) -> f64 {
        let mut longest = 0.0_f64;
        for (a, b) in edges {
            let mut latency = 0.0;
            self.route(a, b, |port, hop_s| {
                loads[port] += 1.0;
                latency += hop_s;
            });
            longest = longest.max(latency);
        }
        longest
    }

    /// The highest load on each kind of port (a device's ports are numbered alike).
    fn peak(&self, loads: &[f64]) -> Vec<f64> {
        peak_by_kind(loads, self.ports)
    }

    /// Bandwidth each unit of load gets on the most loaded port.
    fn share_of(&self, peak: &[f64]) -> f64 {
        peak.iter()
            .zip(&self.port_bw)
            .filter(|(&l, _)| l > 0.0)
            .map(|(&l, &bw)| bw / l)
            .fold(f64::INFINITY, f64::min)
    }

    /// Names of the fabrics a group's members differ in.
    pub fn spanned(&self, group: &[u64]) -> Vec<String> {
        self.spanned_fabrics(group)
            .into_iter()
            .map(|f| self.fabrics[f].name.clone())
            .collect()
    }

    /// The fabrics (innermost first) a group's members differ in.
    fn spanned_fabrics(&self, group: &[u64]) -> Vec<usize> {
        (0..self.fabrics.len())
            .filter(|&f| self.differ_in(group, f))
            .collect()
    }

    /// Whether a group's members differ in fabric `f`.
    fn differ_in(&self, group: &[u64], f: usize) -> bool {
        group
            .iter()
            .any(|&d| self.local(d, f) != self.local(group[0], f))
    }

    /// What the groups (each listed in ring order; all the same size) get from the
    /// network when they communicate at the same time.
    pub fn group_link(&self, groups: &[Vec<u64>]) -> GroupLink {
        self.link_of(&self.group_shape(groups))
    }

    /// What the groups of `degree` devices `stride` apart (device `d` with the `degree - 1`
    /// devices `d + stride`, `d + 2 stride`, ... for every `d` whose digit in base `stride`
    /// and `degree` is 0) get when they communicate at once, and the fabrics one group
    /// spans: how a parallel axis's groups lie. Memoised by (degree, stride).
    pub fn strided_link(&self, degree: u64, stride: u64) -> (GroupLink, Vec<String>) {
        let (shape, span) = self.strided_shape(degree, stride);
        (self.link_of(&shape), span)
    }

    /// The shape of the groups of [`Network::strided_link`] and the fabrics one spans;
    /// symmetric ones ([`Network::symmetric`]) without listing the groups.
    fn strided_shape(&self, degree: u64, stride: u64) -> (Arc<GroupShape>, Vec<String>) {
        if let Some(found) = self.memo.get_strided((degree, stride)) {
            return found;
        }
        let (shape, span) = if let Some(symmetry) = self.symmetry(degree, stride) {
            let g0: Vec<u64> = (0..degree).map(|c| c * stride).collect();
            let span = self.spanned(&g0);
            (Arc::new(self.symmetric_shape(&symmetry)), span)
        } else {
            let groups: Groups = (0..self.devices)
                .filter(|dev| (dev / stride) % degree == 0)
                .map(|base| (0..degree).map(|c| base + c * stride).collect())
                .collect();
            (self.group_shape(&groups), self.spanned(&groups[0]))
        };
        self.memo
            .insert_strided((degree, stride), (shape.clone(), span.clone()));
        (shape, span)
    }

    /// Prices a group shape with this network's port bandwidths.
    fn link_of(&self, shape: &GroupShape) -> GroupLink {
        if shape.p <= 1 {
            return GroupLink::single();
        }
        GroupLink {
            p: shape.p,
            level: shape.level,
            // Bidirectional ring: half the message each way.
            ring_bytes_per_s: 2.0 * self.share_of(&shape.ring),
            ring_step_s: shape.ring_step_s,
            pair_bytes_per_s: self.share_of(&shape.pair),
            pair_step_s: shape.pair_step_s,
            all_to_all_s: shape.all_to_all_s,
            next_bytes_per_s: self.share_of(&shape.next),
            next_s: shape.next_s,
            hierarchy: shape
                .hierarchy
                .as_ref()
                .map(|h| (Box::new(self.link_of(&h.0)), Box::new(self.link_of(&h.1)))),
            dims: shape.dims.iter().map(|d| self.link_of(d)).collect(),
            launch_s: self.fabrics[shape.level].collective_latency_s,
        }
    }

    /// Port loads and latencies of the groups communicating at once: what does not depend
    /// on bandwidth, computed once per group set and network topology.
    fn group_shape(&self, groups: &[Vec<u64>]) -> Arc<GroupShape> {
        if let Some(shape) = self.memo.get(groups) {
            return shape;
        }
        let shape = match self.symmetric(groups) {
            Some(symmetry) => self.symmetric_shape(&symmetry),
            None => self.enumerated_shape(groups),
        };
        self.memo.insert(groups, shape)
    }

    /// [`Network::group_shape`] by routing every edge of every group.
    fn enumerated_shape(&self, groups: &[Vec<u64>]) -> GroupShape {
        let p = groups.first().map_or(1, |g| g.len() as u64);
        if p <= 1 {
            return GroupShape {
                p,
                ..GroupShape::default()
            };
        }
        let mut loads = vec![0.0; self.devices as usize * self.ports];
        let ring_step_s = self.load(
            groups.iter().flat_map(|g| {
                let n = g.len();
                (0..n).flat_map(move |i| [(g[i], g[(i + 1) % n]), (g[(i + 1) % n], g[i])])
            }),
            &mut loads,
        );
        let ring = self.peak(&loads);
        // Pipeline successor: the open chain.
        loads.iter_mut().for_each(|l| *l = 0.0);
        let next_s = self.load(
            groups
                .iter()
                .flat_map(|g| g.windows(2).map(|w| (w[0], w[1]))),
            &mut loads,
        );
        let next = self.peak(&loads);
        let (pair, pair_step_s, all_to_all_s) = self.all_pairs(groups, &mut loads);
        GroupShape {
            p,
            level: self.outermost(&groups[0]).unwrap_or(0),
            ring,
            ring_step_s,
            pair,
            pair_step_s,
            all_to_all_s,
            next,
            next_s,
            hierarchy: self.hierarchy(groups),
            dims: self.dimension_parts(groups),
        }
    }

    /// The [`Symmetry`] of `groups` when they are the groups of `degree` devices `stride`
    /// apart (as [`Network::strided_link`] lists them) and the fabrics', the tori's
    /// dimensions' and the groups' boundaries nest (each of the strides, `stride` and
    /// `stride x degree` divides the next larger): it gives every device's loads from a few
    /// groups' routes.
    fn symmetric(&self, groups: &[Vec<u64>]) -> Option<Symmetry> {
        let g0 = groups.first()?;
        let degree = g0.len() as u64;
        let stride = g0.get(1)?.checked_sub(g0[0])?;
        if g0[0] != 0 || groups.len() as u64 * degree != self.devices {
            return None;
        }
        let symmetry = self.symmetry(degree, stride)?;
        let mut bases = (0..self.devices).filter(|d| (d / stride) % degree == 0);
        let strided = groups.iter().all(|g| {
            bases.next().is_some_and(|base| {
                g.len() as u64 == degree
                    && g.iter()
                        .enumerate()
                        .all(|(c, &d)| d == base + c as u64 * stride)
            })
        });
        strided.then_some(symmetry)
    }

    /// The symmetry of the groups of `degree` devices `stride` apart ([`Symmetry`]), when
    /// the boundaries between the fabrics, the torus dimensions and the groups nest (each
    /// of them divides the next larger).
    fn symmetry(&self, degree: u64, stride: u64) -> Option<Symmetry> {
        self.symmetry_with(degree, stride, true)
            .or_else(|| self.symmetry_with(degree, stride, false))
    }

    /// [`Network::symmetry`], reading a mesh's dimensions as digits of their own when
    /// `mesh_dims` (they nest less often than the mesh as a whole).
    fn symmetry_with(&self, degree: u64, stride: u64, mesh_dims: bool) -> Option<Symmetry> {
        if degree < 2 || stride == 0 {
            return None;
        }
        let period = stride.checked_mul(degree)?;
        if self.devices % period != 0 {
            return None;
        }
        let mut bounds: Vec<u64> = self.stride.clone();
        // A torus translates a dimension's coordinate as a whole, so the digits between a
        // dimension's lower boundary and a stride inside it cannot move alone (a ring of 8
        // in pairs 2 apart: devices 0 and 1 carry different loads): they are held too.
        let mut window = stride;
        // Ranges without translations (a mesh's dimensions, twisted tori, full meshes)
        // that the groups span: held whole. Those they do not span carry none of their
        // traffic, and relabelling them moves every route elsewhere alike.
        let mut held = vec![];
        let mut hold = |low: u64, high: u64| {
            if low < period && stride < high {
                held.push((low, high));
            }
        };
        let mut switches = Vec::new();
        for (f, fabric) in self.fabrics.iter().enumerate() {
            let outer = self.stride[f] * fabric.size;
            match &fabric.shape {
                Shape::Direct {
                    dims,
                    wrap,
                    twisted,
                } if !*twisted && (*wrap || mesh_dims) => {
                    let mut inside = self.stride[f];
                    for d in dims {
                        if !*wrap {
                            hold(inside, inside * d);
                        } else if inside < stride && stride < inside * d {
                            window = inside;
                        }
                        inside *= d;
                        bounds.push(inside);
                    }
                }
                Shape::Switch { .. } => switches.push((self.stride[f], outer)),
                _ => hold(self.stride[f], outer),
            }
        }
        bounds.extend([self.devices, stride, period]);
        bounds.sort_unstable();
        bounds.dedup();
        if !bounds.windows(2).all(|w| w[1] % w[0] == 0) {
            return None;
        }
        let digits = bounds
            .windows(2)
            .filter_map(|w| {
                let (low, high) = (w[0], w[1]);
                let within =
                    |ranges: &[(u64, u64)]| ranges.iter().any(|&(a, b)| a <= low && high <= b);
                let kind = if stride <= low && high <= period {
                    if within(&switches) {
                        Kind::Spread
                    } else {
                        Kind::Position
                    }
                } else if (window <= low && high <= stride) || within(&held) {
                    Kind::Held
                } else {
                    return None;
                };
                Some(Digit {
                    low,
                    size: high / low,
                    kind,
                })
            })
            .collect();
        Some(Symmetry {
            stride,
            degree,
            digits,
        })
    }

    /// [`Network::enumerated_shape`] of symmetric groups ([`Network::symmetric`]) from the
    /// first group of each class ([`Symmetry`]): a port's load at a device is the load those
    /// groups' routes put on that port of all devices with the same held digits.
    fn symmetric_shape(&self, symmetry: &Symmetry) -> GroupShape {
        let (stride, degree) = (symmetry.stride, symmetry.degree);
        let firsts = symmetry.firsts();
        let g0 = &firsts[0];
        let ports = self.ports;
        // Ring and chain traffic follow the members' order, so the position digits are held
        // (a few ports each: counted sparsely), but for the highest when it lies inside a
        // switch ([`Symmetry::rotating`]): the ring's loads are summed over its values and
        // shared by them. All-pairs traffic follows no order: position digits inside a
        // switch are spread ([`Kind::Spread`]).
        let rotating = symmetry.rotating();
        let share = rotating.map_or(1.0, |i| symmetry.digits[i].size as f64);
        let key = |port: usize| {
            let d = (port / ports) as u64;
            symmetry.class_where(d, |i, _| Some(i) != rotating) * ports + port % ports
        };
        let route = |edges: &mut dyn Iterator<Item = (u64, u64)>,
                     by: &mut FxHashMap<usize, f64>| {
            let mut longest = 0.0_f64;
            for (a, b) in edges {
                let mut latency = 0.0;
                self.route(a, b, |port, hop_s| {
                    *by.entry(key(port)).or_insert(0.0) += 1.0;
                    latency += hop_s;
                });
                longest = longest.max(latency);
            }
            longest
        };
        let peak_of = |by: &FxHashMap<usize, f64>| {
            let mut peak = vec![0.0_f64; ports];
            for (&k, &l) in by {
                peak[k % ports] = peak[k % ports].max(l / share);
            }
            peak
        };
        let n = g0.len();
        let mut by = FxHashMap::default();
        let ring_step_s = route(
            &mut firsts.iter().flat_map(|g| {
                (0..n).flat_map(move |i| [(g[i], g[(i + 1) % n]), (g[(i + 1) % n], g[i])])
            }),
            &mut by,
        );
        let ring = peak_of(&by);
        by.clear();
        let next_s = route(
            &mut firsts
                .iter()
                .flat_map(|g| g.windows(2).map(|w| (w[0], w[1]))),
            &mut by,
        );
        // With a rotating digit, the chain is priced as the forward ring (rotation-symmetric):
        // the wrap edge, last member to first, adds one unit on ports where the chain's peak
        // is not. It leaves from the rotating digit's last value (inner fabrics' hops and the
        // switch's up-port) and enters at its first (the switch's down-port), so on each
        // port kind some value of the rotating digit carries the chain's load without it.
        if rotating.is_some() {
            for g in &firsts {
                self.route(g[n - 1], g[0], |port, _| {
                    *by.entry(key(port)).or_insert(0.0) += 1.0;
                });
            }
        }
        let next = peak_of(&by);
        let position =
            |port: usize| symmetry.class((port / ports) as u64, false) * ports + port % ports;
        let mut by_position = vec![0.0; symmetry.classes() * ports];
        let spanned = self.spanned_fabrics(g0);
        let direct = |f: usize| matches!(self.fabrics[f].shape, Shape::Direct { .. });
        let (longest, exchange) = match spanned[..] {
            // Inside one torus: every shortest path, searched in the first groups' copy.
            [f] if direct(f) => {
                // The first groups by copy of the fabric (their other coordinates).
                let (inner, outer) = (self.stride[f], self.stride[f] * self.fabrics[f].size);
                let mut copies: Vec<(u64, Vec<Vec<u64>>)> = Vec::new();
                for g in &firsts {
                    let copy = g[0] % inner + g[0] / outer * outer;
                    let locals = g.iter().map(|&d| self.local(d, f)).collect();
                    match copies.iter_mut().find(|(c, _)| *c == copy) {
                        Some((_, groups)) => groups.push(locals),
                        None => copies.push((copy, vec![locals])),
                    }
                }
                let fabric_ports = self.fabrics[f].ports();
                let (mut longest, mut exchange) = (0.0_f64, 0.0_f64);
                for (copy, groups) in &copies {
                    let (loads, l, e) = self.all_pairs_loads(f, groups, true);
                    for (i, &l) in loads.iter().enumerate().filter(|(_, &l)| l != 0.0) {
                        let device = copy + (i / fabric_ports) as u64 * inner;
                        by_position[position(self.port(device, f, i % fabric_ports))] += l;
                    }
                    longest = longest.max(l);
                    exchange = exchange.max(e);
                }
                (longest, exchange)
            }
            _ => {
                let longest = self.all_pairs_counted(&firsts, |port, l| {
                    by_position[position(port)] += l;
                });
                (longest, self.exchange_s(&spanned, longest, n))
            }
        };
        GroupShape {
            p: degree,
            level: self.outermost(g0).unwrap_or(0),
            ring,
            ring_step_s,
            // The load per device of a held value.
            pair: self
                .peak(&by_position)
                .into_iter()
                .map(|l| l / symmetry.spread())
                .collect(),
            pair_step_s: longest,
            all_to_all_s: exchange,
            next,
            next_s,
            hierarchy: self.symmetric_hierarchy(g0, stride, degree),
            dims: self.symmetric_dimension_parts(g0, stride, degree),
        }
    }

    /// [`Network::dimension_parts`] of symmetric groups: a group's part along dimension `j`
    /// of the direct fabric it spans is the strided group between the larger of `stride`
    /// and the dimension's lower boundary and the smaller of `stride x degree` and its
    /// upper one (the boundaries nest, [`Network::symmetry`]).
    fn symmetric_dimension_parts(
        &self,
        g0: &[u64],
        stride: u64,
        degree: u64,
    ) -> Vec<Arc<GroupShape>> {
        let [f] = self.spanned_fabrics(g0)[..] else {
            return Vec::new();
        };
        let Shape::Direct { dims, .. } = &self.fabrics[f].shape else {
            return Vec::new();
        };
        let period = stride * degree;
        let mut low = self.stride[f];
        let mut parts = Vec::new();
        for &size in dims {
            let (from, to) = (stride.max(low), period.min(low * size));
            if to > from {
                // Every group's part a line along this dimension alone: steps of whole
                // coordinates, and lines that never straddle the dimension's end (a mesh
                // or twisted torus is held whole by the symmetry, so its dimensions need
                // not nest with the groups).
                if to % from != 0 || from % low != 0 || (low * size) % to != 0 {
                    return Vec::new();
                }
                parts.push((to / from, from));
            }
            low *= size;
        }
        let lines: u64 = parts.iter().map(|&(degree, _)| degree).product();
        let extents: Vec<u64> = parts.iter().map(|&(degree, _)| degree).collect();
        if parts.len() < 2 || lines != degree || !self.fabrics[f].runs_dimensionally(&extents) {
            return Vec::new();
        }
        parts
            .into_iter()
            .map(|(degree, stride)| self.strided_shape(degree, stride).0)
            .collect()
    }

    /// The groups' parts along each dimension of the direct fabric they span, when every
    /// group spans the same two or more of its dimensions and is the whole product of its
    /// coordinates there: for each spanned dimension, every group's lines along it (the
    /// members that differ only there, in coordinate order), the lines in order of their
    /// first member. Empty otherwise.
    fn dimension_parts(&self, groups: &[Vec<u64>]) -> Vec<Arc<GroupShape>> {
        let [f] = self.spanned_fabrics(&groups[0])[..] else {
            return Vec::new();
        };
        let Shape::Direct { dims, .. } = &self.fabrics[f].shape else {
            return Vec::new();
        };
        let lows = direct::strides(dims);
        let coordinate = |d: u64, j: usize| (self.local(d, f) / lows[j]) % dims[j];
        let spanned = |g: &[u64]| -> Vec<(usize, usize)> {
            (0..dims.len())
                .map(|j| (j, distinct(g.iter().map(|&d| coordinate(d, j))).len()))
                .filter(|&(_, count)| count > 1)
                .collect()
        };
        let first = spanned(&groups[0]);
        let extents: Vec<u64> = first.iter().map(|&(_, count)| count as u64).collect();
        if first.len() < 2 || !self.fabrics[f].runs_dimensionally(&extents) {
            return Vec::new();
        }
        let product: usize = first.iter().map(|&(_, count)| count).product();
        let mut parts: Vec<Groups> = vec![Vec::new(); first.len()];
        for g in groups {
            if spanned(g) != first || product != distinct(g.iter().copied()).len() {
                return Vec::new();
            }
            for (part, &(j, _)) in parts.iter_mut().zip(&first) {
                let step = self.stride[f] * lows[j];
                let mut lines: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
                for &d in g {
                    lines
                        .entry(d - coordinate(d, j) * step)
                        .or_default()
                        .push(d);
                }
                for mut line in lines.into_values() {
                    line.sort_unstable_by_key(|&d| coordinate(d, j));
                    part.push(line);
                }
            }
        }
        parts
            .iter_mut()
            .map(|part| {
                part.sort_unstable();
                self.group_shape(part)
            })
            .collect()
    }

    /// [`Network::hierarchy`] of symmetric groups: the members sharing the outermost
    /// spanned fabric's coordinate are `block / stride` devices `stride` apart, and the
    /// groups across those blocks `degree x stride / block` devices `block` apart.
    fn symmetric_hierarchy(
        &self,
        g0: &[u64],
        stride: u64,
        degree: u64,
    ) -> Option<Box<(Arc<GroupShape>, Arc<GroupShape>)>> {
        let block = self.stride[self.outermost(g0)?];
        if stride >= block {
            return None;
        }
        let (inner, outer) = (block / stride, degree * stride / block);
        if inner < 2 || outer < 2 {
            return None;
        }
        Some(Box::new((
            self.strided_shape(inner, stride).0,
            self.strided_shape(outer, block).0,
        )))
    }

    /// Bandwidth per pair, the longest pair latency and the latency of one all-pairs
    /// exchange. Groups inside one direct fabric spread each pair's traffic evenly over all
    /// its shortest paths (minimal adaptive routing; this is where a twisted torus gains);
    /// elsewhere pairs follow the dimension-order route.
    fn all_pairs(&self, groups: &[Vec<u64>], loads: &mut [f64]) -> (Vec<f64>, f64, f64) {
        loads.iter_mut().for_each(|l| *l = 0.0);
        let g0 = &groups[0];
        let spanned = self.spanned_fabrics(g0);
        if let [f] = spanned[..] {
            if matches!(self.fabrics[f].shape, Shape::Direct { .. }) {
                return self.all_pairs_direct(f, groups);
            }
        }
        let longest = self.all_pairs_counted(groups, |port, l| loads[port] += l);
        let a2a = self.exchange_s(&spanned, longest, g0.len());
        (self.peak(loads), longest, a2a)
    }

    /// The latency of one all-pairs exchange among `members` across the fabrics `spanned`,
    /// whose longest path takes `longest`: that path where every message is in flight at
    /// once, one such path per other member where a spanned fabric relays.
    fn exchange_s(&self, spanned: &[usize], longest: f64, members: usize) -> f64 {
        if spanned.iter().any(|&f| self.fabrics[f].relays()) {
            longest * (members as f64 - 1.0)
        } else {
            longest
        }
    }

    /// All-pairs loads by routing every pair (what `all_pairs_counted` counts).
    #[cfg(test)]
    fn all_pairs_routed(&self, groups: &[Vec<u64>], loads: &mut [f64]) -> f64 {
        self.load(
            groups.iter().flat_map(|g| {
                g.iter()
                    .flat_map(move |&a| g.iter().filter(move |&&b| b != a).map(move |&b| (a, b)))
            }),
            loads,
        )
    }

    /// The outermost fabric whose coordinate differs between members of `group`.
    fn outermost(&self, group: &[u64]) -> Option<usize> {
        (0..self.fabrics.len())
            .rev()
            .find(|&f| self.differ_in(group, f))
    }

    /// Splits groups that span more than one fabric into an inner part (members sharing
    /// the outermost spanned fabric's coordinate) and an outer part, when that split is
    /// regular.
    fn hierarchy(&self, groups: &[Vec<u64>]) -> Option<Box<(Arc<GroupShape>, Arc<GroupShape>)>> {
        let outermost = self.outermost(&groups[0])?;
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
        Some(Box::new((
            self.group_shape(&inner_groups),
            self.group_shape(&outer_groups),
        )))
    }
}

/// The distinct `values`, in increasing order.
fn distinct(values: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out: Vec<u64> = values.collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The highest load on each of `ports` kinds of port in `loads`, `ports` per member.
fn peak_by_kind(loads: &[f64], ports: usize) -> Vec<f64> {
    let mut peak = vec![0.0_f64; ports];
    for member in loads.chunks_exact(ports) {
        for (p, &l) in peak.iter_mut().zip(member) {
            *p = p.max(l);
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{PlaneCollectives, Topology};

    /// Counted all-pairs loads equal those of routing every pair, on switched, fully
    /// connected, mesh and torus fabrics stacked in every order the systems use, for the
    /// strided groups the mappings make and irregular ones.
    #[test]
    fn counted_all_pairs_loads_equal_routed_ones() {
        let nets = [
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 4, 8e9, 1e-6),
                Fabric::new("mesh", &Topology::FullyConnected, 3, 6e9, 2e-6),
                Fabric::new("ib", &Topology::FatTree { levels: 2 }, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("ici", &Topology::Torus { dims: vec![3, 4] }, 12, 8e9, 1e-6),
                Fabric::new("dcn", &Topology::FatTree { levels: 3 }, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("board", &Topology::FullyConnected, 2, 8e9, 1e-6),
                Fabric::new("ring", &Topology::Ring, 3, 4e9, 2e-6),
                Fabric::new("grid", &Topology::Mesh { dims: vec![2, 2] }, 4, 1e9, 3e-6),
            ]),
        ];
        for net in &nets {
            assert_eq!(net.devices, 24);
            // Strided groups as the mapping makes them, plus irregular ones.
            let mut cases: Vec<Vec<Vec<u64>>> = Vec::new();
            for (deg, stride) in [
                (2, 1),
                (4, 1),
                (3, 4),
                (6, 4),
                (2, 12),
                (6, 1),
                (4, 3),
                (8, 3),
                (24, 1),
            ] {
                cases.push(
                    (0..24u64)
                        .filter(|d| (d / stride) % deg == 0)
                        .map(|d| (0..deg).map(|k| d + k * stride).collect())
                        .collect(),
                );
            }
            cases.push(vec![vec![0, 5, 13, 22], vec![1, 7, 12, 18]]);
            for groups in cases {
                let mut routed = vec![0.0; 24 * net.ports];
                let mut counted = routed.clone();
                let slow = net.all_pairs_routed(&groups, &mut routed);
                let fast = net.all_pairs_counted(&groups, |port, l| counted[port] += l);
                assert_eq!(routed, counted, "{groups:?}");
                assert!((slow - fast).abs() < 1e-15, "{groups:?}: {slow} vs {fast}");
            }
        }
    }

    fn same(a: &GroupShape, b: &GroupShape, case: &str) {
        // Loads split over shortest paths sum fractions in another order: 1e-12.
        for (what, x, y) in [
            ("ring", &a.ring, &b.ring),
            ("next", &a.next, &b.next),
            ("pair", &a.pair, &b.pair),
        ] {
            assert_eq!(x.len(), y.len(), "{what}: {case}");
            for (u, v) in x.iter().zip(y) {
                assert!(
                    (u - v).abs() <= 1e-12 * v.abs(),
                    "{what}: {case}: {x:?} vs {y:?}"
                );
            }
        }
        for (x, y) in [
            (a.ring_step_s, b.ring_step_s),
            (a.next_s, b.next_s),
            (a.pair_step_s, b.pair_step_s),
            (a.all_to_all_s, b.all_to_all_s),
        ] {
            assert!((x - y).abs() <= 1e-15 * y.abs(), "{case}: {x} vs {y}");
        }
        assert_eq!((a.p, a.level), (b.p, b.level), "{case}");
        match (&a.hierarchy, &b.hierarchy) {
            (None, None) => {}
            (Some(x), Some(y)) => {
                same(&x.0, &y.0, &format!("{case}, inner"));
                same(&x.1, &y.1, &format!("{case}, outer"));
            }
            _ => panic!("{case}: hierarchy {:?} vs {:?}", a.hierarchy, b.hierarchy),
        }
        assert_eq!(a.dims.len(), b.dims.len(), "{case}: dimensions");
        for (j, (x, y)) in a.dims.iter().zip(&b.dims).enumerate() {
            same(x, y, &format!("{case}, dimension {j}"));
        }
    }

    /// Symmetric groups priced from their first group equal every group routed, on
    /// switched networks of one, two and three levels and every strided group the
    /// mappings make.
    #[test]
    fn symmetric_shapes_equal_enumerated_ones() {
        let nets = [
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 8, 8e9, 1e-6),
                Fabric::new("ib", &Topology::FatTree { levels: 2 }, 16, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 4, 8e9, 1e-6),
                Fabric::new("leaf", &Topology::Switch, 2, 2e9, 2e-6),
                Fabric::new("spine", &Topology::FatTree { levels: 3 }, 6, 1e9, 5e-6),
            ]),
            Network::new(vec![Fabric::new("one", &Topology::Switch, 12, 8e9, 1e-6)]),
            Network::new(vec![
                Fabric::new(
                    "ici",
                    &Topology::Torus {
                        dims: vec![4, 2, 4],
                    },
                    32,
                    8e9,
                    1e-6,
                ),
                Fabric::new("dcn", &Topology::FatTree { levels: 3 }, 4, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 2, 8e9, 1e-6),
                Fabric::new("ring", &Topology::Ring, 6, 2e9, 2e-6),
            ]),
            Network::new(vec![Fabric::new(
                "torus",
                &Topology::Torus { dims: vec![4, 6] },
                24,
                8e9,
                1e-6,
            )]),
            Network::new(vec![Fabric::new("ring", &Topology::Ring, 8, 8e9, 1e-6)]),
            Network::new(vec![
                Fabric::new(
                    "torus",
                    &Topology::Torus { dims: vec![8, 4] },
                    32,
                    8e9,
                    1e-6,
                ),
                Fabric::new("dcn", &Topology::Switch, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![Fabric::new(
                "torus",
                &Topology::Torus {
                    dims: vec![2, 2, 8],
                },
                32,
                8e9,
                1e-6,
            )]),
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 2, 8e9, 1e-6),
                Fabric::new(
                    "torus",
                    &Topology::Torus { dims: vec![8, 4] },
                    32,
                    2e9,
                    2e-6,
                ),
                Fabric::new("dcn", &Topology::FatTree { levels: 2 }, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![Fabric::new("ring", &Topology::Ring, 16, 8e9, 1e-6)]),
            // Fabrics without translations: held whole.
            Network::new(vec![
                Fabric::new("mesh", &Topology::Mesh { dims: vec![4, 2] }, 8, 8e9, 1e-6),
                Fabric::new("dcn", &Topology::FatTree { levels: 2 }, 4, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 2, 8e9, 1e-6),
                Fabric::new(
                    "twisted",
                    &Topology::TwistedTorus {
                        dims: vec![2, 2, 4],
                    },
                    16,
                    2e9,
                    2e-6,
                ),
            ]),
            Network::new(vec![
                Fabric::new("torus", &Topology::Torus { dims: vec![4] }, 4, 8e9, 1e-6),
                Fabric::new("full", &Topology::FullyConnected, 4, 2e9, 2e-6),
                Fabric::new("dcn", &Topology::Switch, 2, 1e9, 5e-6),
            ]),
            // A mesh of three dimensions that do not nest with the groups: their parts are
            // not lines (stride 3 steps across x and y).
            Network::new(vec![Fabric::new(
                "mesh",
                &Topology::Mesh {
                    dims: vec![2, 6, 4],
                },
                48,
                8e9,
                1e-6,
            )]),
            // A mesh whose dimensions do not nest with the groups (held whole), a window
            // below a held mesh, a window of 3, a twisted torus between switches.
            Network::new(vec![
                Fabric::new("mesh", &Topology::Mesh { dims: vec![3, 2] }, 6, 8e9, 1e-6),
                Fabric::new("dcn", &Topology::Switch, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("ring", &Topology::Ring, 4, 8e9, 1e-6),
                Fabric::new("mesh", &Topology::Mesh { dims: vec![2, 2] }, 4, 4e9, 2e-6),
                Fabric::new("dcn", &Topology::Switch, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new(
                    "torus",
                    &Topology::Torus { dims: vec![6, 2] },
                    12,
                    8e9,
                    1e-6,
                ),
                Fabric::new("dcn", &Topology::Switch, 2, 1e9, 5e-6),
            ]),
            Network::new(vec![
                Fabric::new("nvswitch", &Topology::Switch, 2, 8e9, 1e-6),
                Fabric::new(
                    "twisted",
                    &Topology::TwistedTorus {
                        dims: vec![2, 2, 4],
                    },
                    16,
                    2e9,
                    2e-6,
                ),
                Fabric::new("dcn", &Topology::FatTree { levels: 2 }, 2, 1e9, 5e-6),
            ]),
        ];
        let (mut symmetric, mut windowed, mut dimensioned) = (0, 0, 0);
        for net in &nets {
            let n = net.devices;
            for degree in (2..=n).filter(|d| n % d == 0) {
                for stride in (1..=n / degree).filter(|s| n % (s * degree) == 0) {
                    let groups: Groups = (0..n)
                        .filter(|d| (d / stride) % degree == 0)
                        .map(|d| (0..degree).map(|c| d + c * stride).collect())
                        .collect();
                    let Some(symmetry) = net.symmetric(&groups) else {
                        continue;
                    };
                    symmetric += 1;
                    windowed += usize::from(symmetry.firsts().len() > 1);
                    let a = net.symmetric_shape(&symmetry);
                    let b = net.enumerated_shape(&groups);
                    dimensioned += usize::from(!a.dims.is_empty());
                    same(
                        &a,
                        &b,
                        &format!("{n} devices, degree {degree}, stride {stride}"),
                    );
                }
            }
        }
        assert!(symmetric >= 60, "{symmetric} symmetric cases");
        // Groups spanning several dimensions of a torus or mesh, priced along each.
        assert!(
            dimensioned >= 10,
            "{dimensioned} cases with dimension parts"
        );
        // Held digits outside the position (a stride inside a torus dimension, spanned
        // meshes and twisted tori): more than one first group.
        assert!(
            windowed >= 20,
            "{windowed} cases with more than one first group"
        );
        // Groups straddling a node irregularly are not symmetric: 3 of 8 per node.
        let net = &nets[0];
        let groups: Groups = (0..128u64)
            .filter(|d| (d / 3) % 2 == 0 && d + 3 < 128)
            .map(|d| vec![d, d + 3])
            .collect();
        assert!(net.symmetric(&groups).is_none());
    }

    /// A group spanning several torus dimensions reduces along all of them at once (Ying
    /// et al. 2018's 2-D torus all-reduce): on a 4 x 8 plane, half the message
    /// reduce-scatters along x then y and the other half along y then x, where one ring
    /// through the plane works 2 of each device's 4 ports.
    #[test]
    fn a_plane_reduces_along_both_dimensions_at_once() {
        use collective::Collective;
        let (b, hop, m) = (10e9, 1e-6, 64e6); // port bandwidth per direction
        let torus = |dims: Vec<u64>| torus_of(dims, b, hop, PlaneCollectives::Any);
        let rel = |x: f64, y: f64| (x / y - 1.0).abs();
        let (plane, _) = torus(vec![4, 8]).strided_link(32, 1);
        assert_eq!(plane.dims.iter().map(|d| d.p).collect::<Vec<_>>(), [4, 8]);
        // Stage 1: the y-first half (7/8 of m/2 on a ring of 2b each way) outlasts the
        // x-first half (3/4 of m/2); stage 2: the x-first half along y (7/8 of m/8)
        // outlasts the other along x (3/4 of m/16).
        let stage1 = 7.0 / 8.0 * (m / 2.0) / (2.0 * b) + 7.0 * hop;
        let stage2 = 7.0 / 8.0 * (m / 8.0) / (2.0 * b) + 7.0 * hop;
        let rs = plane.time(Collective::ReduceScatter, m);
        assert!(
            rel(rs, stage1 + stage2) < 1e-12,
            "{rs} vs {}",
            stage1 + stage2
        );
        assert!(rel(plane.time(Collective::AllGather, m), rs) < 1e-12);
        assert!(rel(plane.time(Collective::AllReduce, m), 2.0 * rs) < 1e-12);
        // One ring through the plane in device order: 31/32 of m over 2b, 2 hops a step
        // where it turns a row.
        let ring = 31.0 / 32.0 * m / (2.0 * b);
        assert!(rs < 0.6 * ring, "{rs} vs one ring's {ring}");
        // An 8 x 8 x 8 cube: three chunks, each 8 ways per stage, reach the all-reduce's
        // bandwidth bound, 2 (p - 1)/p m over a device's 6 ports.
        let (cube, _) = torus(vec![8, 8, 8]).strided_link(512, 1);
        let bound = 2.0 * 511.0 / 512.0 * m / (6.0 * b);
        let hops = 2.0 * 3.0 * 7.0 * hop;
        let ar = cube.time(Collective::AllReduce, m);
        assert!(rel(ar, bound + hops) < 1e-12, "{ar} vs {}", bound + hops);
        // A group along one dimension has no parts: its ring is already the best.
        assert!(torus(vec![4, 8]).strided_link(4, 1).0.dims.is_empty());
    }

    /// One torus fabric of `dims`, each device with 2 ports per dimension of `port_b` each
    /// way, links of `hop` seconds, its planes running collectives as `planes` says.
    fn torus_of(dims: Vec<u64>, port_b: f64, hop: f64, planes: PlaneCollectives) -> Network {
        let n = dims.iter().product();
        let ports = 2.0 * dims.len() as f64;
        Network::new(vec![Fabric::new(
            "ici",
            &Topology::Torus { dims },
            n,
            ports * port_b,
            hop,
        )
        .with_plane_collectives(planes)])
    }

    /// Where only square planes run a collective along both dimensions (XLA on TPUs), a
    /// group on a 4 x 8 plane runs one ring through it, as fast as on a fabric without
    /// dimensions; a 4 x 4 plane and a group over three dimensions keep their parts.
    #[test]
    fn square_planes_only_leave_a_four_by_eight_plane_one_ring() {
        use collective::Collective;
        let (b, hop, m) = (10e9, 1e-6, 64e6);
        let torus = |dims: Vec<u64>, planes| torus_of(dims, b, hop, planes);
        let (any, square) = (PlaneCollectives::Any, PlaneCollectives::Square);
        let rs = |net: &Network| net.strided_link(32, 1).0.time(Collective::ReduceScatter, m);
        let (plane, ring) = (torus(vec![4, 8], any), torus(vec![4, 8], square));
        assert!(ring.strided_link(32, 1).0.dims.is_empty());
        // One ring through the plane: at least 31/32 of m over a ring's 2b, where both
        // dimensions at once take under 0.6 of that.
        let one_ring = 31.0 / 32.0 * m / (2.0 * b);
        assert!(rs(&ring) >= one_ring, "{} vs {one_ring}", rs(&ring));
        assert!(rs(&plane) < 0.6 * one_ring);
        // Groups that are no strided set (one plane of a 4 x 8 x 2 torus, the second) are
        // split into their dimensions member by member, and take the same rule.
        let (stacked, stacked_ring) = (torus(vec![4, 8, 2], any), torus(vec![4, 8, 2], square));
        let groups: Vec<Vec<u64>> = vec![(32..64).collect()];
        assert!(stacked.symmetric(&groups).is_none());
        assert_eq!(stacked.group_shape(&groups).dims.len(), 2);
        assert!(stacked_ring.group_shape(&groups).dims.is_empty());
        // A square plane, and three dimensions of unequal extent, keep their parts.
        let square_plane = torus(vec![4, 4], square);
        assert_eq!(square_plane.strided_link(16, 1).0.dims.len(), 2);
        let block = torus(vec![4, 4, 8], square);
        assert_eq!(block.strided_link(128, 1).0.dims.len(), 3);
        // The fabrics differ, so a search does not share their routed shapes.
        let mut shared = torus(vec![4, 8], square);
        assert!(!shared.share_shapes(&plane));
    }

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
        net.route(0, 3 + 4 * 2, |port, hop_s| hops.push((port, hop_s)));
        assert_eq!(hops.len(), 3);
        assert_eq!(hops[0].0, 1); // device 0, port x-
        assert_eq!(hops[1].0, 3 * 4 + 2); // device 3, port y+
    }
}
