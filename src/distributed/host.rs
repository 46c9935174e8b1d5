//! Embedding tables in the CPUs' DDR memory (Zion Sec. IV, Table I; TPU v4 Sec. 3.5, Fig. 9):
//! where each table lives, and what the hosts spend on the tables they hold.
//!
//! Placement ([`place`]): the system's `host.tables` puts every table on the devices, every
//! table in host memory, or (auto) the hottest tables, most lookups per row first, on the
//! devices while they fit beside the dense model (its weights, gradients and optimizer state
//! replicated, and its activations split over every device, as data parallelism holds them),
//! whole tables at a time; the rest in host memory. A model whose tables all fit stays as it
//! was.
//!
//! Price ([`HostReport::of`]), per iteration of the whole batch, the tables spread evenly
//! over every socket of the system: each socket gathers its tables' rows from DDR and pools
//! them for every sample; the pooled vectors cross the links to the devices that socket
//! serves (an equal share of them per device), which exchange them all-to-all over the
//! devices' fabric with the other tables' (priced in the devices' step, as for tables on
//! the devices); in training their gradients come back the same way and the socket updates
//! the touched rows and their optimizer state in DDR. DDR traffic: the rows gathered, the pooled vectors written and read again by
//! the DMA; in training the gradients written by the DMA and read, the rows and their state
//! read and written. Transfers staged through host memory copy each transfer once more
//! through DDR and pay the link's latency twice ([`Host`]). The lookups of a socket, its
//! transfers and its update run one after another, beside the devices' dense step a batch
//! ahead (as embedding engines do, TPU v4 Fig. 10): the iteration takes the longer of the
//! two.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;

use super::timeline::Eval;
use crate::domain::{TablePlacement, Transfers};
use crate::generator::Architecture;
use crate::network::host::Host;
use crate::network::Network;
use crate::violation::Violation;
use crate::workload::{Graph, Workload};

/// `workload` with its tables placed as `net`'s host places them ([`place`]); the workload
/// itself when it has no tables, the system no host, or every table stays on the devices.
/// What every prediction on a system prices.
pub fn placed<'a>(workload: &'a Workload, arch: &Architecture, net: &Network) -> Cow<'a, Workload> {
    placed_with(workload, arch, net, || Arc::new(workload.graph()))
}

/// [`placed`] with the workload's graph (every table on the devices) from `graph`, built
/// only when a host may place tables: a prediction takes it from its workspace.
pub(super) fn placed_with<'a>(
    workload: &'a Workload,
    arch: &Architecture,
    net: &Network,
    graph: impl FnOnce() -> Arc<Graph>,
) -> Cow<'a, Workload> {
    let Some(host) = &net.host else {
        return Cow::Borrowed(workload);
    };
    if workload.table_groups().is_none() || !workload.host_tables().is_empty() {
        return Cow::Borrowed(workload);
    }
    let per_group = place(workload, &graph(), arch, net.devices, host);
    if per_group.is_empty() {
        Cow::Borrowed(workload)
    } else {
        Cow::Owned(workload.with_host_tables(&per_group))
    }
}

/// The tables of each group to keep in host memory for `workload` on `devices` devices of
/// `arch` beside `host`; `graph` is the workload's graph with every table on the devices.
/// Empty when every table stays on the devices.
pub(super) fn place(
    workload: &Workload,
    graph: &Graph,
    arch: &Architecture,
    devices: u64,
    host: &Host,
) -> Vec<u64> {
    let Some(groups) = workload.table_groups() else {
        return Vec::new();
    };
    let placed = match host.tables {
        TablePlacement::Device => return Vec::new(),
        TablePlacement::Host => groups.iter().map(|g| g.tables).collect(),
        TablePlacement::Auto => {
            let m = &graph.memory;
            let weight_bytes = graph.precisions.weights.bytes();
            let dense_weights = graph.parameters_by_position.iter().sum::<f64>() * weight_bytes;
            let tables = (m.weights_bytes - dense_weights).max(0.0);
            let dense = m.weights_bytes - tables + m.gradients_bytes + m.optimizer_state_bytes
                - graph.table_state_bytes
                + m.activations_bytes / devices as f64;
            let room = (arch.memory_capacity_bytes - dense).max(0.0) * devices as f64;
            workload.tables_beyond(room)
        }
    };
    if placed.iter().all(|&h| h == 0) {
        Vec::new()
    } else {
        placed
    }
}

/// What the hosts spend per iteration on the tables they hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostReport {
    /// Tables in host memory, and their bytes with their optimizer state.
    pub tables: u64,
    pub tables_bytes: f64,
    /// CPU sockets of the system, and the memory they have together.
    pub sockets: f64,
    pub memory_capacity_bytes: f64,
    pub transfers: Transfers,
    /// The lookups and pooling in DDR, the pooled vectors read by the DMA (and copied, when
    /// staged).
    pub gather_s: f64,
    /// Each device's pooled vectors over its host link, and in training their gradients
    /// back.
    pub transfer_s: f64,
    /// Training: the pooled gradients written by the DMA (and copied, when staged) and read,
    /// the touched rows and their optimizer state read and written in DDR.
    pub update_s: f64,
    /// All of it, one after another: the time the hosts take per iteration.
    pub time_s: f64,
    /// Energy of the sockets while they work (0 when the system gives no socket power).
    pub energy_j: f64,
}

impl HostReport {
    /// The hosts' work on `graph`'s host tables on `net` (`None` when the graph keeps no
    /// table in host memory); an error when it keeps some and `net` has no host.
    pub(super) fn on(graph: &Graph, net: &Network) -> Result<Option<Self>, String> {
        match &net.host {
            _ if graph.host_tables.is_empty() => Ok(None),
            Some(h) => Ok(Self::of(graph, h, net.devices)),
            None => Err(
                "the workload keeps embedding tables in host memory and the system \
                         has no host: section (CPUs) to hold them"
                    .into(),
            ),
        }
    }

    /// The iteration with the hosts' work beside the devices' schedule in `eval` (a batch
    /// ahead: the longer of the two), and one batch's latency with it before them.
    pub(super) fn beside(host: Option<&Self>, eval: &mut Eval) {
        if let Some(h) = host {
            eval.serial_s += h.time_s;
            eval.time_s = eval.time_s.max(h.time_s);
        }
    }

    /// The hosts' work on `graph`'s host tables on `devices` devices (`None` when the graph
    /// keeps no table in host memory); a training graph adds the gradients and the update.
    fn of(graph: &Graph, host: &Host, devices: u64) -> Option<Self> {
        if graph.host_tables.is_empty() {
            return None;
        }
        let trains = graph.trains;
        let sockets = devices as f64 * host.sockets_per_device;
        let ddr = sockets * host.memory_bandwidth_bytes_per_s_per_socket;
        let copy = host.copy_bytes_per_byte();
        let (mut gather, mut update, mut pooled, mut tables, mut bytes) = (0.0, 0.0, 0.0, 0, 0.0);
        for t in &graph.host_tables {
            let rows = t.lookups * t.row_bytes;
            // Pooled vectors written, then read by the DMA; gradients written by the DMA,
            // then read; a staged transfer copies each once more.
            let pooled_ddr = t.pooled_bytes * (2.0 + copy);
            gather += rows + pooled_ddr;
            update += pooled_ddr + 2.0 * rows + 2.0 * t.lookups * t.state_row_bytes;
            pooled += t.pooled_bytes;
            tables += t.tables;
            bytes += t.table_bytes + t.state_bytes;
        }
        // Each socket hands its tables' pooled vectors, every sample's, to the devices it
        // serves; the devices exchange them all-to-all as they do their own tables'.
        let per_device = pooled / devices as f64;
        let one_way = per_device / host.transfer_bytes_per_s() + host.transfer_latency_s();
        let passes = if trains { 2.0 } else { 1.0 };
        let gather_s = gather / ddr;
        let update_s = if trains { update / ddr } else { 0.0 };
        let transfer_s = passes * one_way;
        let time_s = gather_s + transfer_s + update_s;
        Some(HostReport {
            tables,
            tables_bytes: bytes,
            sockets,
            memory_capacity_bytes: sockets * host.memory_bytes_per_socket,
            transfers: host.transfers,
            gather_s,
            transfer_s,
            update_s,
            time_s,
            energy_j: host.power_w_per_socket.unwrap_or(0.0) * sockets * time_s,
        })
    }

    /// The host tables beyond the sockets' memory, if they are.
    pub(super) fn violation(&self) -> Option<Violation> {
        (self.tables_bytes > self.memory_capacity_bytes).then_some(Violation::HostMemoryExceeded {
            tables_bytes: self.tables_bytes,
            capacity_bytes: self.memory_capacity_bytes,
            sockets: self.sockets,
        })
    }
}
