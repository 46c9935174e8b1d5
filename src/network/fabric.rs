//! A fabric: one level of the network as a per-dimension building block (ASTRA-sim's
//! analytical backend). Every template topology becomes one of three blocks:
//! - direct links to grid neighbours ([`super::direct`]: routes, and the all-pairs traffic
//!   of groups inside one fabric over every shortest path): ring, mesh, torus, twisted torus;
//! - a switch: one non-blocking switch, or a fat tree of `levels`;
//! - fully connected: like a switch, a pair's traffic takes one link.
//!
//! The all-pairs traffic of groups across fabrics, or in one switch or full mesh, is counted
//! by member coordinates in [`super::counted`].
//!
//! A new topology kind: a `Topology` variant in `crate::domain`, its block in
//! [`Fabric::new`], and, if it is none of the three, a variant of [`Shape`] with its
//! routing step (`Network::route`), its ports and port bandwidth here, and its arm in
//! `Network::all_pairs_counted`.

use std::hash::BuildHasher;

use serde::Serialize;

use crate::domain::{Forwarding, PlaneCollectives, Topology};

/// How a fabric connects its members.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
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
    /// Fixed cost of one collective on this fabric (launch and synchronisation), s: what
    /// a collective whose outermost fabric this is costs beside its hops and bytes.
    pub collective_latency_s: f64,
    /// How members of a direct fabric pass on others' traffic: what an all-to-all's
    /// latency is (its longest path through routers, its summed hops when relayed).
    pub forwarding: Forwarding,
    /// Which of a direct fabric's planes run a collective along both dimensions at once.
    pub plane_collectives: PlaneCollectives,
}

impl Fabric {
    /// Everything the fabric is, bit for bit, appended to `out`: fabrics with equal
    /// fingerprints time every collective alike.
    pub fn fingerprint(&self, out: &mut Vec<u64>) {
        let Fabric {
            name,
            shape,
            size,
            egress_bytes_per_s,
            hop_s,
            collective_latency_s,
            forwarding,
            plane_collectives,
        } = self;
        out.extend([
            rustc_hash::FxBuildHasher.hash_one(name),
            rustc_hash::FxBuildHasher.hash_one(shape),
            *size,
            egress_bytes_per_s.to_bits(),
            hop_s.to_bits(),
            collective_latency_s.to_bits(),
            rustc_hash::FxBuildHasher.hash_one(forwarding),
            rustc_hash::FxBuildHasher.hash_one(plane_collectives),
        ]);
    }

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
            collective_latency_s: 0.0,
            forwarding: Forwarding::Router,
            plane_collectives: PlaneCollectives::Any,
        }
    }

    /// The fabric with its members forwarding others' traffic as `forwarding` says.
    pub fn with_forwarding(self, forwarding: Forwarding) -> Fabric {
        Fabric { forwarding, ..self }
    }

    /// The fabric with its planes running collectives along both dimensions as `planes`
    /// says.
    pub fn with_plane_collectives(self, planes: PlaneCollectives) -> Fabric {
        Fabric {
            plane_collectives: planes,
            ..self
        }
    }

    /// Whether a collective over parts of `extents` along two or more of this fabric's
    /// dimensions may run along all of them at once: any shape unless only square planes
    /// do and the group spans exactly two dimensions of unequal extent.
    pub(super) fn runs_dimensionally(&self, extents: &[u64]) -> bool {
        !(self.plane_collectives == PlaneCollectives::Square
            && extents.len() == 2
            && extents[0] != extents[1])
    }

    /// Whether an all-to-all across this fabric waits for every hop in turn (a direct
    /// fabric whose members relay).
    pub(super) fn relays(&self) -> bool {
        matches!(self.shape, Shape::Direct { .. }) && self.forwarding == Forwarding::Relay
    }

    /// The fabric with a fixed cost of `seconds` per collective.
    pub fn with_collective_latency(self, seconds: f64) -> Fabric {
        Fabric {
            collective_latency_s: seconds,
            ..self
        }
    }

    /// Ports per device in this fabric.
    pub(super) fn ports(&self) -> usize {
        match &self.shape {
            Shape::Direct { dims, .. } => 2 * dims.len(),
            Shape::Switch { .. } => 2,
            Shape::FullyConnected => self.size as usize,
        }
    }

    /// Bandwidth of one port, per direction.
    pub(super) fn port_bytes_per_s(&self) -> f64 {
        match &self.shape {
            Shape::Direct { dims, .. } => {
                let used = dims.iter().filter(|&&d| d > 1).count().max(1);
                self.egress_bytes_per_s / (2 * used) as f64
            }
            Shape::Switch { .. } => self.egress_bytes_per_s,
            Shape::FullyConnected => self.egress_bytes_per_s / (self.size.max(2) - 1) as f64,
        }
    }

    pub(super) fn switch_s(&self, levels: u64) -> f64 {
        self.hop_s * (2 * levels - 1) as f64
    }
}
