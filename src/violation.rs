//! Why a design or a mapping cannot be used: an infeasible outcome is a value, never a
//! panic and never "feasible" (Timeloop's readable reasons; Calculon's "legitimate but
//! infeasible"). Every stage that can find one (the generator, the single-device model, the
//! distributed model, the optimizer) reports a [`Violation`] with the quantities behind it;
//! searches count and skip them and the optimizer's penalty reads their fields.
//!
//! In JSON a violation is an object with its `kind`, its fields in SI units and the
//! `message` a person reads (`{"kind": "out_of_memory", "needed_bytes": ..., "message":
//! "out of memory: ..."}`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::domain::Scope;

const GIB: f64 = 1073741824.0;

/// One reason a design or a mapping cannot run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", remote = "Self")]
#[non_exhaustive]
pub enum Violation {
    /// The core's share of area or power cannot hold one compute unit.
    NoComputeUnit { area_mm2: f64, power_w: f64 },
    /// An on-chip memory level cannot give each of its instances one bank.
    NoBank {
        level: String,
        instances: u64,
        scope: Scope,
        area_mm2: f64,
        power_w: f64,
    },
    /// No main-memory device fits the main memory's shares.
    NoMemoryDevice { memory: String, limit: String },
    /// A component uses more than its share of a budget (`unit`: mm2, W or mm).
    OverBudget {
        component: String,
        unit: String,
        used: f64,
        allocated: f64,
    },
    /// What one device must hold exceeds its memory. Parts that do not apply are zero
    /// (`kv_cache_bytes` in training, gradients and optimizer state in serving).
    OutOfMemory {
        needed_bytes: f64,
        capacity_bytes: f64,
        weights_bytes: f64,
        gradients_bytes: f64,
        optimizer_state_bytes: f64,
        activations_bytes: f64,
        kv_cache_bytes: f64,
        /// ZeRO-3's working set: the layers it gathers whole and a layer's gradient (absent
        /// from reports written before it was counted).
        #[serde(default)]
        gathered_bytes: f64,
    },
    /// Embedding tables (with their optimizer state) exceed the memory of every device
    /// together, however they are sharded.
    TablesExceedSystem {
        tables_bytes: f64,
        with_optimizer_state: bool,
        capacity_bytes: f64,
        devices: u64,
    },
    /// Embedding tables placed in host memory (with their optimizer state) exceed the
    /// memory of every CPU socket together.
    HostMemoryExceeded {
        tables_bytes: f64,
        capacity_bytes: f64,
        sockets: f64,
    },
    /// A kernel needs a memory level or compute unit that has no bandwidth or throughput in
    /// this design, so the time is endless.
    NoBandwidth,
    /// The design cannot be evaluated under this strategy at all (the strategy does not fit
    /// the workload, or the system's network cannot be built for the design).
    CannotRun { reason: String },
    /// A derived quantity came out infinite or NaN (an input at the edge of its range, a
    /// share of zero): the result means nothing, so it is never feasible.
    NonFinite { quantity: String, value: String },
}

impl Violation {
    /// [`Violation::NonFinite`] when `value` is infinite or NaN.
    pub fn unless_finite(quantity: &str, value: f64) -> Option<Violation> {
        (!value.is_finite()).then(|| Violation::NonFinite {
            quantity: quantity.to_string(),
            value: value.to_string(),
        })
    }

    /// The `kind` tag of the JSON form.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::NoComputeUnit { .. } => "no_compute_unit",
            Violation::NoBank { .. } => "no_bank",
            Violation::NoMemoryDevice { .. } => "no_memory_device",
            Violation::OverBudget { .. } => "over_budget",
            Violation::OutOfMemory { .. } => "out_of_memory",
            Violation::TablesExceedSystem { .. } => "tables_exceed_system",
            Violation::HostMemoryExceeded { .. } => "host_memory_exceeded",
            Violation::NoBandwidth => "no_bandwidth",
            Violation::CannotRun { .. } => "cannot_run",
            Violation::NonFinite { .. } => "non_finite",
        }
    }

    /// Needed over available memory when this is [`Violation::OutOfMemory`].
    pub fn memory_excess(&self) -> Option<f64> {
        match self {
            Violation::OutOfMemory {
                needed_bytes,
                capacity_bytes,
                ..
            } => Some(needed_bytes / capacity_bytes),
            _ => None,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::NoComputeUnit { area_mm2, power_w } => write!(
                f,
                "core: no compute unit fits (area share {area_mm2:.3} mm2, power share \
                 {power_w:.3} W)"
            ),
            Violation::NoBank {
                level,
                instances,
                scope,
                area_mm2,
                power_w,
            } => write!(
                f,
                "{level}: cannot give each of its {instances} {} instance(s) a bank \
                 ({area_mm2:.4} mm2, {power_w:.4} W)",
                scope.name()
            ),
            Violation::NoMemoryDevice { memory, limit } => {
                write!(f, "{memory}: no memory device fits (limited by {limit})")
            }
            Violation::OverBudget {
                component,
                unit,
                used,
                allocated,
            } => write!(
                f,
                "{component}: uses {used:.6} of {allocated:.6} {unit} allocated"
            ),
            Violation::OutOfMemory {
                needed_bytes,
                capacity_bytes,
                weights_bytes,
                gradients_bytes,
                optimizer_state_bytes,
                activations_bytes,
                kv_cache_bytes,
                gathered_bytes,
            } => {
                write!(
                    f,
                    "out of memory: {:.1} GiB per device (weights {:.1}",
                    needed_bytes / GIB,
                    weights_bytes / GIB
                )?;
                for (name, bytes) in [
                    ("gradients", gradients_bytes),
                    ("optimizer", optimizer_state_bytes),
                    ("activations", activations_bytes),
                    ("KV cache", kv_cache_bytes),
                    ("ZeRO-3 gathers", gathered_bytes),
                ] {
                    if *bytes > 0.0 {
                        write!(f, ", {name} {:.1}", bytes / GIB)?;
                    }
                }
                write!(f, ") > {:.1} GiB", capacity_bytes / GIB)
            }
            Violation::TablesExceedSystem {
                tables_bytes,
                with_optimizer_state,
                capacity_bytes,
                devices,
            } => write!(
                f,
                "embedding tables of {:.1} GiB{} exceed the {:.1} GiB of all {devices} devices \
                 together: more devices, or smaller tables",
                tables_bytes / GIB,
                if *with_optimizer_state {
                    " (with their optimizer state)"
                } else {
                    ""
                },
                capacity_bytes / GIB,
            ),
            Violation::HostMemoryExceeded {
                tables_bytes,
                capacity_bytes,
                sockets,
            } => write!(
                f,
                "embedding tables of {:.1} GiB in host memory (with their optimizer state) \
                 exceed the {:.1} GiB of all {sockets} CPU sockets together: more hosts, or \
                 more tables on the devices",
                tables_bytes / GIB,
                capacity_bytes / GIB,
            ),
            Violation::NoBandwidth => f.write_str(
                "time: a kernel needs a memory level or compute unit that has no bandwidth or \
                 throughput in this design",
            ),
            Violation::CannotRun { reason } => f.write_str(reason),
            Violation::NonFinite { quantity, value } => write!(
                f,
                "{quantity} is {value}: a non-finite result (an input at the edge of its range, \
                 or a share of zero), so nothing here can be trusted"
            ),
        }
    }
}

/// The variant's fields, tagged with its kind (serde's derive, `remote = "Self"`).
struct Fields<'a>(&'a Violation);

impl Serialize for Fields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Violation::serialize(self.0, serializer)
    }
}

#[derive(Serialize)]
struct WithMessage<'a> {
    #[serde(flatten)]
    fields: Fields<'a>,
    message: String,
}

impl Serialize for Violation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WithMessage {
            fields: Fields(self),
            message: self.to_string(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Violation {
    /// Reads the JSON form back (`message` is derived, so it is ignored).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Violation, D::Error> {
        Violation::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_kind_fields_and_message_and_reads_back() {
        let v = Violation::OutOfMemory {
            needed_bytes: 2.0 * GIB,
            capacity_bytes: GIB,
            weights_bytes: 1.5 * GIB,
            gradients_bytes: 0.0,
            optimizer_state_bytes: 0.0,
            activations_bytes: 0.0,
            kv_cache_bytes: 0.5 * GIB,
            gathered_bytes: 0.0,
        };
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["kind"], "out_of_memory");
        assert_eq!(json["needed_bytes"], 2.0 * GIB);
        assert_eq!(
            json["message"],
            "out of memory: 2.0 GiB per device (weights 1.5, KV cache 0.5) > 1.0 GiB"
        );
        let back: Violation = serde_json::from_value(json).unwrap();
        assert_eq!(back, v);
        assert_eq!(v.memory_excess(), Some(2.0));
        let unit = serde_json::to_value(Violation::NoBandwidth).unwrap();
        assert_eq!(unit["kind"], "no_bandwidth");
        assert_eq!(Violation::NoBandwidth.kind(), "no_bandwidth");
    }
}
