//! The CPUs beside the accelerators (Zion Sec. IV and Table I; TPU v4 Sec. 3.5): their DDR
//! memory as a home for embedding tables, and the host link (PCIe) each accelerator reaches
//! it by. A system file's `host:` section; a system without one has no CPUs to hold tables.
//!
//! Transfers between a host's memory and an accelerator go one of two ways: GPU-direct, a
//! DMA straight between the buffer the CPU pooled into and the device's memory; or
//! host-staged, through a bounce buffer: the CPU copies the data once more through DDR (a
//! read and a write) and the DMA starts after the copy, so each transfer pays the link's
//! latency twice. Zion Sec. V-B (Fig. 14) measures the same extra copy for scale-out
//! traffic, where it also halves the PCIe bandwidth because the NIC and the GPU share one
//! link to the CPU; table traffic crosses the device's link to the CPU once either way, so
//! it keeps the link's rate.

use serde::Serialize;

use crate::config::raw::HostRaw;
use crate::config::{Checker, ConfigError};
pub use crate::domain::{TablePlacement, Transfers};

/// The CPUs of a system, per accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Host {
    /// CPU sockets per accelerator (Zion: 8 beside 8; TPU v4: a two-socket host per 4 chips).
    pub sockets_per_device: f64,
    /// Accelerators one host machine carries (the file's `devices`: TPU v4, 4 chips).
    pub devices_per_host: u64,
    pub memory_bytes_per_socket: f64,
    pub memory_bandwidth_bytes_per_s_per_socket: f64,
    /// Each accelerator's link to its host, each way.
    pub link_bytes_per_s: f64,
    /// One transfer's fixed cost over that link.
    pub link_latency_s: f64,
    pub transfers: Transfers,
    pub tables: TablePlacement,
    /// Power of one socket while it works (counted in the energy when given).
    pub power_w_per_socket: Option<f64>,
}

impl Host {
    /// Checks a `host:` section of `check.file`.
    pub fn from_raw(check: &Checker, raw: &HostRaw) -> Result<Host, ConfigError> {
        let sockets = check.positive_count("host.sockets", raw.sockets)?;
        let devices = check.positive_count("host.devices", raw.devices)?;
        Ok(Host {
            sockets_per_device: sockets as f64 / devices as f64,
            devices_per_host: devices,
            memory_bytes_per_socket: check
                .positive("host.memory_gib_per_socket", raw.memory_gib_per_socket)?
                * (1u64 << 30) as f64,
            memory_bandwidth_bytes_per_s_per_socket: check.positive(
                "host.memory_bandwidth_gb_per_s_per_socket",
                raw.memory_bandwidth_gb_per_s_per_socket,
            )? * 1e9,
            link_bytes_per_s: check.positive("host.link_gb_per_s", raw.link_gb_per_s)? * 1e9,
            link_latency_s: check.non_negative("host.link_latency_us", raw.link_latency_us)? * 1e-6,
            transfers: raw.transfers,
            tables: raw.tables,
            power_w_per_socket: raw
                .power_w_per_socket
                .map(|p| check.positive("host.power_w_per_socket", p))
                .transpose()?,
        })
    }

    /// The link's rate for table traffic, each way (staged or not: the data crosses the
    /// device's link to the CPU once).
    pub fn transfer_bytes_per_s(&self) -> f64 {
        self.link_bytes_per_s
    }

    /// One transfer's fixed cost: a staged one pays the link twice (the copy's hand-off,
    /// then the DMA).
    pub fn transfer_latency_s(&self) -> f64 {
        match self.transfers {
            Transfers::Direct => self.link_latency_s,
            Transfers::Staged => 2.0 * self.link_latency_s,
        }
    }

    /// DDR bytes per byte transferred: a staged transfer copies through the bounce buffer
    /// (one read and one write more).
    pub fn copy_bytes_per_byte(&self) -> f64 {
        match self.transfers {
            Transfers::Direct => 0.0,
            Transfers::Staged => 2.0,
        }
    }
}
