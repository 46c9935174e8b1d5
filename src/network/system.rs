//! System templates: an accelerator design (a budget file), replicated, and the fabrics that
//! join the copies, innermost first (NVLink inside a node, InfiniBand between nodes; or one
//! 3D torus). A fabric's bandwidth and latency come from the generated accelerator's
//! network, or from a link family of the technology library times a lane count, unless the
//! file pins them.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::host::Host;
use super::{Fabric, Network};
use crate::budget::Budget;
use crate::config::raw::SystemFile;
use crate::config::{parse_yaml, Checker, ConfigError, Source};
use crate::design::{Design, DesignFiles};
use crate::domain::{Component, Forwarding, PlaneCollectives, Topology};
use crate::generator::Architecture;
use crate::tech::TechLibrary;
use crate::template::check_topology;

pub use crate::domain::MAX_DEVICES;

/// Members a direct fabric (ring, mesh, torus) may join: its all-pairs traffic is routed
/// from every member over every shortest path (the largest built are a few thousand:
/// TPU v4's 4,096, TPU v5p's 8,960).
pub const MAX_DIRECT_MEMBERS: u64 = 1 << 14;

/// Members a fully connected fabric may join: each has a port to every other (the
/// largest built join 8 or 16).
pub const MAX_FULLY_CONNECTED_MEMBERS: u64 = 64;

/// Where a fabric's bandwidth and latency come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum LinkSource {
    /// The generated accelerator's `intra_package` or `inter_package` network.
    Network { name: Component },
    /// A link family of the accelerator's technology library, `lanes` per device; its
    /// rate is resolved from the library when the system is loaded.
    Technology {
        name: String,
        lanes: u64,
        #[serde(skip)]
        rate: Option<LinkRate>,
    },
    /// Only pinned values.
    Pinned,
}

/// A technology link's bandwidth per device in each direction and its latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkRate {
    pub bytes_per_s_per_direction: f64,
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricSpec {
    pub name: String,
    pub topology: Topology,
    pub size: Option<u64>,
    pub source: LinkSource,
    pub bandwidth_bytes_per_s: Option<f64>,
    pub latency_s: Option<f64>,
    /// Share of the link bandwidth transfers achieve (1: none given).
    pub bandwidth_efficiency: f64,
    /// Fixed cost of one collective on the fabric, s (0: none given).
    pub collective_latency_s: f64,
    /// How a direct fabric's members forward others' traffic (router: none given).
    pub forwarding: Forwarding,
    /// Which planes run a collective along both dimensions at once (any: none given).
    pub plane_collectives: PlaneCollectives,
    /// Block shape slices are composed of, if any.
    pub block: Option<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct System {
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    /// The accelerator's budget file (empty for a pinned processor).
    pub accelerator: PathBuf,
    /// A processor pinned by its rates (`processor:`) instead of a budget.
    pub pinned: Option<Box<Architecture>>,
    pub devices: Option<u64>,
    pub fabrics: Vec<FabricSpec>,
    /// The CPUs beside the accelerators (`None`: no CPU memory to hold tables).
    pub host: Option<Host>,
    #[serde(skip)]
    source: Source,
    /// Template and technology files overriding those the accelerator's budget names.
    #[serde(skip)]
    overrides: (Option<PathBuf>, Option<PathBuf>),
}

impl System {
    pub fn load(source: Source, path: &Path) -> Result<System, ConfigError> {
        Self::parse(source, path, &source.read(path)?)
    }

    /// As `load`, from `text` standing for the file at `path` (an edited copy).
    pub fn parse(source: Source, path: &Path, text: &str) -> Result<System, ConfigError> {
        let file = path.display().to_string();
        let mut system = Self::from_yaml(&file, text)?;
        if system.pinned.is_none() {
            system.accelerator = source.referenced(
                path,
                "accelerator",
                &system.accelerator.display().to_string(),
            )?;
        }
        system.source = source;
        if system
            .fabrics
            .iter()
            .any(|f| matches!(f.source, LinkSource::Technology { .. }))
        {
            let budget = Budget::load(source, &system.accelerator)?;
            system.resolve_links(&TechLibrary::load(source, &budget.technology)?)?;
        }
        Ok(system)
    }

    /// Takes the rate of every technology-sourced fabric from `library` (the accelerator's
    /// technology library), once, so that building a network reads no file.
    pub fn resolve_links(&mut self, library: &TechLibrary) -> Result<(), ConfigError> {
        for (i, f) in self.fabrics.iter_mut().enumerate() {
            let LinkSource::Technology { name, lanes, rate } = &mut f.source else {
                continue;
            };
            let link = library.links.get(name.as_str()).ok_or_else(|| {
                ConfigError::invalid(
                    &self.file,
                    format!("fabrics[{i}].technology"),
                    &*name,
                    format!(
                        "a link family of {}: one of [{}]",
                        library.file,
                        library.links.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            *rate = Some(LinkRate {
                bytes_per_s_per_direction: *lanes as f64 / 2.0
                    * link.data_rate_bit_per_s
                    * link.encoding_efficiency
                    / 8.0,
                latency_s: link.latency_s,
            });
        }
        Ok(())
    }

    /// Parses system YAML; the accelerator path is taken as written.
    pub fn from_yaml(file: &str, text: &str) -> Result<System, ConfigError> {
        let raw: SystemFile = parse_yaml(file, text)?;
        let check = Checker { file };
        check.version(raw.version)?;
        // The stack's caps belong to the accelerator, so that one device gives one answer
        // alone (`--budget`) and in any system.
        for (key, value) in [
            ("compute_utilization", raw.compute_utilization),
            ("memory_utilization", raw.memory_utilization),
        ] {
            if let Some(u) = value {
                return Err(ConfigError::invalid(
                    file,
                    key,
                    u,
                    format!(
                        "no {key} here: it moved to the accelerator template's `stack:` \
                         section (stack.{key}), which every path reads"
                    ),
                ));
            }
        }
        if raw.fabrics.is_empty() {
            return Err(ConfigError::invalid(
                file,
                "fabrics",
                "[]",
                "at least one fabric joining the devices",
            ));
        }
        if let Some(d) = raw.devices {
            check.positive_count("devices", d)?;
        }
        let pinned = match (&raw.accelerator, &raw.processor) {
            (Some(_), None) => None,
            (None, Some(p)) => Some(Box::new(processor(&check, &raw.name, p)?)),
            (a, _) => {
                return Err(ConfigError::invalid(
                    file,
                    "accelerator",
                    if a.is_some() {
                        "(with processor)"
                    } else {
                        "(missing)"
                    },
                    "either accelerator (a budget file) or processor (pinned rates), not both",
                ))
            }
        };
        let last = raw.fabrics.len() - 1;
        let mut fabrics = Vec::new();
        for (i, f) in raw.fabrics.into_iter().enumerate() {
            let path = |key: &str| format!("fabrics[{i}].{key}");
            let dims_size = check_topology(&check, &path("topology"), &f.topology)?;
            let size = match (f.size, dims_size) {
                (Some(s), Some(d)) if s != d => {
                    return Err(ConfigError::invalid(
                        file,
                        path("size"),
                        s,
                        format!("the product of topology.dims ({d})"),
                    ))
                }
                (Some(s), _) => Some(check.positive_count(&path("size"), s)?),
                (None, d) => d,
            };
            if size.is_none() && i != last {
                return Err(ConfigError::invalid(
                    file,
                    path("size"),
                    "(missing)",
                    "a size (members joined) for every fabric but the outermost",
                ));
            }
            if pinned.is_some() && (f.network.is_some() || f.technology.is_some()) {
                return Err(ConfigError::invalid(
                    file,
                    path(if f.network.is_some() {
                        "network"
                    } else {
                        "technology"
                    }),
                    f.network
                        .as_deref()
                        .or(f.technology.as_deref())
                        .unwrap_or(""),
                    "pinned bandwidth_gb_per_s and latency_us: a pinned processor has no \
                     networks or technology to derive a fabric from",
                ));
            }
            let source = match (f.network, f.technology, f.lanes_per_device) {
                (Some(n), None, None) => {
                    let name = Component::from_name(&n);
                    if !name.is_network() {
                        return Err(ConfigError::invalid(
                            file,
                            path("network"),
                            n,
                            "intra_package or inter_package (a network of the accelerator)",
                        ));
                    }
                    LinkSource::Network { name }
                }
                (None, Some(t), Some(l)) => LinkSource::Technology {
                    name: t,
                    lanes: check.positive_count(&path("lanes_per_device"), l)?,
                    rate: None,
                },
                (None, None, None) => LinkSource::Pinned,
                _ => {
                    return Err(ConfigError::invalid(
                        file,
                        path("network"),
                        "(conflicting sources)",
                        "either network, or technology with lanes_per_device, or neither \
                         (then bandwidth_gb_per_s and latency_us pin the fabric)",
                    ))
                }
            };
            let bandwidth = f
                .bandwidth_gb_per_s
                .map(|b| {
                    check
                        .positive(&path("bandwidth_gb_per_s"), b)
                        .map(|b| b * 1e9)
                })
                .transpose()?;
            let latency = f
                .latency_us
                .map(|l| check.non_negative(&path("latency_us"), l).map(|l| l * 1e-6))
                .transpose()?;
            let collective_latency = f
                .collective_latency_us
                .map(|l| {
                    check
                        .non_negative(&path("collective_latency_us"), l)
                        .map(|l| l * 1e-6)
                })
                .transpose()?
                .unwrap_or(0.0);
            let bandwidth_efficiency = f
                .bandwidth_efficiency
                .map(|e| check.within(&path("bandwidth_efficiency"), e, 1e-3, 1.0))
                .transpose()?
                .unwrap_or(1.0);
            if source == LinkSource::Pinned && (bandwidth.is_none() || latency.is_none()) {
                return Err(ConfigError::invalid(
                    file,
                    path("bandwidth_gb_per_s"),
                    "(missing)",
                    "a fabric with no network or technology pins bandwidth_gb_per_s and latency_us",
                ));
            }
            if let Some(b) = &f.block {
                check_block(&check, &path, &f.topology, b)?;
                check_slice(file, &path("topology.dims"), &f.topology, b)?;
            }
            fabrics.push(FabricSpec {
                name: f.name,
                topology: f.topology,
                size,
                source,
                bandwidth_bytes_per_s: bandwidth,
                latency_s: latency,
                bandwidth_efficiency,
                collective_latency_s: collective_latency,
                forwarding: f.forwarding.unwrap_or_default(),
                plane_collectives: f.plane_collectives.unwrap_or_default(),
                block: f.block,
            });
        }
        let host = raw
            .host
            .as_ref()
            .map(|h| Host::from_raw(&check, h))
            .transpose()?;
        Ok(System {
            file: file.to_string(),
            name: raw.name,
            description: raw.description,
            accelerator: PathBuf::from(raw.accelerator.unwrap_or_default()),
            pinned,
            devices: raw.devices,
            fabrics,
            host,
            source: Source::Disk,
            overrides: (None, None),
        })
    }

    /// The same system with its first direct fabric (a mesh or torus) reshaped to `dims`,
    /// e.g. a TPU v4 slice of 4x8x16; the shape must be one the system can compose.
    pub fn with_slice(&self, dims: &[u64]) -> Result<System, ConfigError> {
        let mut s = self.clone();
        let (i, f) = s
            .fabrics
            .iter_mut()
            .enumerate()
            .find(|(_, f)| {
                matches!(
                    f.topology,
                    Topology::Torus { .. } | Topology::TwistedTorus { .. } | Topology::Mesh { .. }
                )
            })
            .ok_or_else(|| {
                ConfigError::invalid(
                    &self.file,
                    "fabrics",
                    "(no mesh or torus)",
                    "a mesh or torus fabric to reshape into the slice",
                )
            })?;
        match &mut f.topology {
            Topology::Torus { dims: d }
            | Topology::TwistedTorus { dims: d }
            | Topology::Mesh { dims: d } => {
                if d.len() != dims.len() {
                    return Err(ConfigError::invalid(
                        &self.file,
                        format!("fabrics[{i}].topology.dims"),
                        format!("{dims:?}"),
                        format!("a slice with {} dimensions like {d:?}", d.len()),
                    ));
                }
                *d = dims.to_vec();
            }
            _ => unreachable!("matched above"),
        }
        if let Some(b) = &f.block {
            check_slice(
                &self.file,
                &format!("fabrics[{i}].topology.dims"),
                &f.topology,
                b,
            )?;
        }
        f.size = Some(dims.iter().product());
        s.devices = Some(s.fabrics.iter().filter_map(|f| f.size).product());
        Ok(s)
    }

    /// Where the system's files are read from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The same system with another accelerator: the budget file `budget` (an optimized
    /// one, say) in place of the one the system names, and template and technology files
    /// overriding those the budget names; all read from disk.
    pub fn with_accelerator(
        mut self,
        budget: Option<&Path>,
        template: Option<&Path>,
        tech: Option<&Path>,
    ) -> System {
        if budget.is_none() && template.is_none() && tech.is_none() {
            return self;
        }
        if let Some(b) = budget {
            self.accelerator = b.to_path_buf();
            self.pinned = None;
        }
        self.overrides = (template.map(Path::to_path_buf), tech.map(Path::to_path_buf));
        self.source = Source::Disk;
        self
    }

    /// The accelerator's budget file (a pinned processor has none: an error saying so).
    pub fn budget_file(&self) -> Result<&Path, ConfigError> {
        match self.pinned {
            Some(_) => Err(ConfigError::invalid(
                &self.file,
                "processor",
                "(pinned)",
                "a system whose accelerator is a budget (accelerator: budget.yaml): a pinned \
                 processor has no budget to generate or optimize",
            )),
            None => Ok(&self.accelerator),
        }
    }

    /// Loads the accelerator design the system names (a pinned processor has none).
    pub fn design(&self) -> Result<Design, ConfigError> {
        Design::load(DesignFiles {
            source: self.source,
            budget: self.budget_file()?,
            template: self.overrides.0.as_deref(),
            tech: self.overrides.1.as_deref(),
        })
    }

    /// Generates the accelerator (with its template's stack caps: one device gives one
    /// answer, alone or in any system).
    pub fn accelerator(&self) -> Result<Architecture, ConfigError> {
        if let Some(arch) = &self.pinned {
            return Ok((**arch).clone());
        }
        Ok(crate::generator::generate(&self.design()?))
    }

    /// The device count to use when none is asked for: the file's `devices`, else every
    /// device the fabrics join (one node when the outermost fabric has no size).
    pub fn default_devices(&self) -> u64 {
        self.devices.unwrap_or_else(|| {
            self.devices_per_node() * self.fabrics.last().and_then(|f| f.size).unwrap_or(1)
        })
    }

    /// Devices per copy of the innermost fabrics: the smallest unit `--devices` counts in.
    pub fn devices_per_node(&self) -> u64 {
        self.fabrics.iter().filter_map(|f| f.size).product::<u64>()
            / self.fabrics.last().and_then(|f| f.size).unwrap_or(1)
    }

    /// [`System::network`] built from `like`, a network of this system for the same device
    /// count (another design's): its device coordinates and group shapes are reused
    /// ([`Network::rebuilt`]).
    pub fn network_like(
        &self,
        arch: &Architecture,
        devices: u64,
        like: &Network,
    ) -> Result<Network, ConfigError> {
        self.check_hosts(devices)?;
        Ok(like
            .rebuilt(self.fabrics_for(arch, devices)?)
            .with_host(self.host))
    }

    /// The network for `devices` devices of `arch` (at most [`MAX_DEVICES`]).
    pub fn network(&self, arch: &Architecture, devices: u64) -> Result<Network, ConfigError> {
        self.check_hosts(devices)?;
        Ok(Network::new(self.fabrics_for(arch, devices)?).with_host(self.host))
    }

    /// Devices per node when `devices` are used: the node's, or `devices` when they are part
    /// of one node ([`System::fabrics_for`]).
    pub fn node_size(&self, devices: u64) -> u64 {
        if matches!(self.partial_node(devices), Ok(true)) {
            devices
        } else {
            self.devices_per_node()
        }
    }

    /// Whether a node is one fabric that joins any subset of its devices as it joins all of
    /// them (a switch, a fat tree, full connection) inside one more fabric.
    fn switched_node(&self) -> bool {
        self.fabrics.len() == 2
            && matches!(
                self.fabrics[0].topology,
                Topology::Switch | Topology::FatTree { .. } | Topology::FullyConnected
            )
    }

    /// Whether `devices` are part of one node: fewer than a node's, dividing it, on a node
    /// whose one fabric lets any subset talk as the whole does (a switch, a fat tree or full
    /// connection; a ring or torus of 8 has no ring of 3 or of 2 of its own links). A count
    /// that cannot be part of the node is an error naming what can.
    fn partial_node(&self, devices: u64) -> Result<bool, ConfigError> {
        let node = self.devices_per_node();
        if devices == 0 || devices >= node {
            return Ok(false);
        }
        if node % devices == 0 && self.switched_node() {
            return Ok(true);
        }
        Err(ConfigError::invalid(
            &self.file,
            "devices",
            devices,
            format!(
                "a positive multiple of the {node} devices per node{}",
                self.partial_choices()
            ),
        ))
    }

    /// What part of a node `--devices` may take, for error messages.
    fn partial_choices(&self) -> String {
        let node = self.devices_per_node();
        // (A node of more than 1024 devices lists no divisors: the list would be long, and a
        // mistyped size would take that long to list.)
        if !self.switched_node() || !(2..=1024).contains(&node) {
            return String::new();
        }
        // Whole hosts only, where the system has hosts.
        let per_host = self.host.as_ref().map_or(1, |h| h.devices_per_host.max(1));
        let parts: Vec<String> = (1..node)
            .filter(|d| node % d == 0 && d % per_host == 0)
            .map(|d| d.to_string())
            .collect();
        if parts.is_empty() {
            return String::new();
        }
        format!(
            ", or part of one node: {} of its devices (its {} fabric joins any of them)",
            parts.join(", "),
            self.fabrics[0].name
        )
    }

    /// Whole host machines: `devices` a multiple of the devices one host carries.
    fn check_hosts(&self, devices: u64) -> Result<(), ConfigError> {
        match &self.host {
            Some(h) if devices % h.devices_per_host != 0 => Err(ConfigError::invalid(
                &self.file,
                "host.devices",
                h.devices_per_host,
                format!(
                    "a divisor of the {devices} devices asked for: every host carries the \
                     same number of devices"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The fabrics joining `devices` devices of `arch`, innermost first (what
    /// [`System::network`] builds its network of).
    pub fn fabrics_for(
        &self,
        arch: &Architecture,
        devices: u64,
    ) -> Result<Vec<Fabric>, ConfigError> {
        let file = &self.file;
        if devices > MAX_DEVICES {
            return Err(ConfigError::invalid(
                file,
                "devices",
                devices,
                format!("at most {MAX_DEVICES} devices (2^20)"),
            ));
        }
        let last = self.fabrics.len() - 1;
        let inner: u64 = self.fabrics[..last].iter().filter_map(|f| f.size).product();
        let partial = self.partial_node(devices)?;
        let outer = match self.fabrics[last].size {
            _ if partial => 1,
            Some(s) => {
                if inner * s != devices {
                    return Err(ConfigError::invalid(
                        file,
                        format!("fabrics[{last}].topology"),
                        format!("{} devices", inner * s),
                        format!(
                            "a topology matching the {devices} devices asked for \
                             (the fabrics join {inner} x {s})"
                        ),
                    ));
                }
                s
            }
            None => {
                if devices % inner != 0 || devices == 0 {
                    return Err(ConfigError::invalid(
                        file,
                        "devices",
                        devices,
                        format!(
                            "a positive multiple of the {inner} devices per node{}",
                            self.partial_choices()
                        ),
                    ));
                }
                devices / inner
            }
        };
        let mut fabrics = Vec::new();
        for (i, f) in self.fabrics.iter().enumerate() {
            let size = match (partial, i == last) {
                (true, false) => devices,
                (true, true) => 1,
                _ => f.size.unwrap_or(outer),
            };
            let (most, kind) = match f.topology {
                Topology::FullyConnected => (MAX_FULLY_CONNECTED_MEMBERS, "a fully connected"),
                Topology::FatTree { .. } | Topology::Switch => (MAX_DEVICES, "a switched"),
                _ => (MAX_DIRECT_MEMBERS, "a direct (ring, mesh or torus)"),
            };
            if size > most {
                return Err(ConfigError::invalid(
                    file,
                    format!("fabrics[{i}].topology"),
                    format!("{size} members"),
                    format!("at most {most} members in {kind} fabric"),
                ));
            }
            let (egress, hop) = match &f.source {
                LinkSource::Network { name } => {
                    let n = match name {
                        Component::IntraPackage => arch.intra_package.as_ref(),
                        _ => arch.inter_package.as_ref(),
                    };
                    let n = n.ok_or_else(|| {
                        ConfigError::invalid(
                            file,
                            format!("fabrics[{i}].network"),
                            name,
                            format!("a network the accelerator template {} has", arch.template),
                        )
                    })?;
                    (n.bandwidth_bytes_per_s / 2.0, n.latency_s)
                }
                LinkSource::Technology { name, rate, .. } => {
                    let rate = rate.ok_or_else(|| {
                        ConfigError::invalid(
                            file,
                            format!("fabrics[{i}].technology"),
                            name,
                            "a link resolved from the accelerator's technology library \
                             (System::load, or System::resolve_links after System::from_yaml)",
                        )
                    })?;
                    (rate.bytes_per_s_per_direction, rate.latency_s)
                }
                LinkSource::Pinned => (0.0, 0.0),
            };
            let egress = f.bandwidth_bytes_per_s.unwrap_or(egress) * f.bandwidth_efficiency;
            let hop = f.latency_s.unwrap_or(hop);
            fabrics.push(
                Fabric::new(&f.name, &f.topology, size, egress, hop)
                    .with_collective_latency(f.collective_latency_s)
                    .with_forwarding(f.forwarding)
                    .with_plane_collectives(f.plane_collectives),
            );
        }
        Ok(fabrics)
    }
}

/// A fabric's `block` itself: on a torus, twisted torus or mesh, one extent per dimension of
/// its `dims`, each from 1 to that dimension (whether the dims compose from it is
/// [`check_slice`]'s).
fn check_block(
    check: &Checker,
    path: &dyn Fn(&str) -> String,
    topology: &Topology,
    block: &[u64],
) -> Result<(), ConfigError> {
    let Some(dims) = topology.dims() else {
        return Err(ConfigError::invalid(
            check.file,
            path("block"),
            format!("{block:?}"),
            "no block: blocks compose slices of a torus, twisted torus or mesh \
             (topology.kind), which this fabric is not",
        ));
    };
    if block.len() != dims.len() {
        return Err(ConfigError::invalid(
            check.file,
            path("block"),
            format!("{block:?}"),
            format!(
                "one extent per dimension of topology.dims ({dims:?}: {})",
                dims.len()
            ),
        ));
    }
    for (j, (&b, &d)) in block.iter().zip(dims).enumerate() {
        check.count_in(&path(&format!("block[{j}]")), b, d)?;
    }
    Ok(())
}

/// Checks that a mesh or torus is made of whole `block`s.
fn check_slice(
    file: &str,
    path: &str,
    topology: &Topology,
    block: &[u64],
) -> Result<(), ConfigError> {
    let Some(dims) = topology.dims() else {
        return Ok(());
    };
    let fits = dims.len() == block.len()
        && block.iter().all(|&b| b > 0)
        && dims.iter().zip(block).all(|(d, b)| d % b == 0);
    if fits {
        Ok(())
    } else {
        let shape: Vec<String> = block
            .iter()
            .zip(["i", "j", "k", "l", "m", "n"].iter().cycle())
            .map(|(b, v)| format!("{b}{v}"))
            .collect();
        Err(ConfigError::invalid(
            file,
            path,
            format!("{dims:?}"),
            format!(
                "a slice the system can compose from {block:?} blocks: {} (e.g. {:?})",
                shape.join(" x "),
                block.iter().map(|b| b * 2).collect::<Vec<_>>()
            ),
        ))
    }
}

/// The architecture of a pinned processor (`processor:`), checked.
fn processor(
    check: &Checker,
    name: &str,
    raw: &crate::config::raw::ProcessorRaw,
) -> Result<Architecture, ConfigError> {
    use crate::generator::{Curve, Pinned, PinnedSpec};
    use std::collections::BTreeMap;
    let curve = |path: &str, steps: &[[f64; 2]], unit: f64| -> Result<Curve, ConfigError> {
        Ok(Curve {
            steps: check.steps(path, steps, unit)?,
        })
    };
    if raw.matrix.is_empty() {
        return Err(ConfigError::invalid(
            check.file,
            "processor.matrix",
            "{}",
            "a matrix unit for at least one precision",
        ));
    }
    let (mut rates, mut curves) = (BTreeMap::new(), BTreeMap::new());
    for (precision, unit) in &raw.matrix {
        let path = format!("processor.matrix.{}", precision.name());
        let rate = check.positive(&format!("{path}.tflop_per_s"), unit.tflop_per_s)? * 1e12;
        rates.insert(*precision, rate);
        curves.insert(
            *precision,
            curve(
                &format!("{path}.efficiency_by_gflop"),
                &unit.efficiency_by_gflop,
                1e9,
            )?,
        );
    }
    let spec = PinnedSpec {
        name: name.to_string(),
        matrix_flops_per_s: rates,
        memory_capacity_bytes: check
            .positive("processor.memory.capacity_gib", raw.memory.capacity_gib)?
            * (1u64 << 30) as f64,
        memory_bandwidth_bytes_per_s: check.positive(
            "processor.memory.bandwidth_gb_per_s",
            raw.memory.bandwidth_gb_per_s,
        )? * 1e9,
        kernel_launch_s: check.non_negative("processor.kernel_launch_us", raw.kernel_launch_us)?
            * 1e-6,
        collective_compute_share: raw
            .collective_compute_share
            .map(|f| check.within("processor.collective_compute_share", f, 0.0, 0.999))
            .transpose()?,
        curves: Pinned {
            matrix: curves,
            vector_flops_per_s: check
                .positive("processor.vector.tflop_per_s", raw.vector.tflop_per_s)?
                * 1e12,
            vector: curve(
                "processor.vector.efficiency_by_gflop",
                &raw.vector.efficiency_by_gflop,
                1e9,
            )?,
            memory: curve(
                "processor.memory.efficiency_by_mb",
                &raw.memory.efficiency_by_mb,
                1e6,
            )?,
            serial: !raw.compute_memory_overlap,
        },
    };
    Ok(crate::generator::pinned(&spec))
}
