//! DeepFlow Fig. 1: the compute intensity one device sees when a matrix product is split
//! over many. A split cuts `m` (the rows: data parallelism), `n` (the output columns:
//! column, or tensor, parallelism) and `k` (the reduction: row parallelism, whose partial
//! sums a reduction then adds) into `a x b x c` parts over `a b c` devices; each device runs
//! its shard's product, tiled by the performance model. Intensity is the shard's FLOPs over
//! the bytes it moves to and from main memory: what the model's tiling reads and writes
//! there, and never less than reading every operand and writing the result once.
//!
//! Owns: [`splits`] (every split of a device count) and [`shard_points`] (each split priced
//! on one architecture). The command line prints, writes and plots them.

use serde::Serialize;

use crate::error::ModelError;
use crate::generator::Architecture;
use crate::perf::{Bound, Evaluator};
use crate::workload::{Gemm, Workload};

/// Device counts one call prices at most.
pub const MAX_DEVICE_COUNTS: usize = 64;

/// The most devices one count may have (the distributed model's own cap).
pub const MAX_DEVICES: u64 = crate::network::system::MAX_DEVICES;

/// Sizes along the product's three dimensions: parts of each (a split) or elements (a shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dims {
    pub m: u64,
    pub k: u64,
    pub n: u64,
}

/// One split of the product over `devices`, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardPoint {
    pub devices: u64,
    /// Parts of each dimension (`m k n` of them multiply to `devices`).
    pub split: Dims,
    /// The shard one device multiplies.
    pub shard: Dims,
    pub flops: f64,
    /// Bytes to and from main memory.
    pub main_memory_bytes: f64,
    pub intensity_flops_per_byte: f64,
    /// The shard's product alone (no communication).
    pub time_s: f64,
    pub bound: Bound,
}

impl ShardPoint {
    /// `m4.n2.k1`: the parts of each dimension.
    pub fn label(&self) -> String {
        let Dims { m, k, n } = self.split;
        format!("m{m}.n{n}.k{k}")
    }
}

/// Every split `[a, b, c]` of `devices` (`a b c = devices`), `a` then `b` ascending.
pub fn splits(devices: u64) -> Vec<[u64; 3]> {
    let divisors: Vec<u64> = (1..=devices).filter(|d| devices % d == 0).collect();
    let mut out = Vec::new();
    for &a in &divisors {
        for &b in &divisors {
            if (devices / a) % b == 0 {
                out.push([a, b, devices / a / b]);
            }
        }
    }
    out
}

/// Prices every split of the product `gemm` over each count of `devices` (sorted, each
/// once) on `arch`; a split cutting a dimension into more parts than it has is skipped.
/// Counts outside 1 to [`MAX_DEVICES`], or more than [`MAX_DEVICE_COUNTS`] of them, are
/// errors.
pub fn shard_points(
    arch: &Architecture,
    gemm: &Gemm,
    devices: &[u64],
) -> Result<Vec<ShardPoint>, ModelError> {
    if devices.is_empty() || devices.len() > MAX_DEVICE_COUNTS {
        return Err(ModelError::Setting {
            setting: "devices",
            value: devices.len().to_string(),
            expected: "between 1 and 64 device counts",
        });
    }
    if let Some(&bad) = devices.iter().find(|&&d| d == 0 || d > MAX_DEVICES) {
        return Err(ModelError::Setting {
            setting: "devices",
            value: bad.to_string(),
            expected: "device counts from 1 to 1,048,576",
        });
    }
    let mut counts = devices.to_vec();
    counts.sort_unstable();
    counts.dedup();
    let mut evaluator = Evaluator::new(arch);
    let mut out = Vec::new();
    for p in counts {
        let before = out.len();
        for split in splits(p) {
            let [a, b, c] = split;
            if a > gemm.m || b > gemm.n || c > gemm.k {
                continue;
            }
            let shard = Gemm {
                m: gemm.m.div_ceil(a),
                k: gemm.k.div_ceil(c),
                n: gemm.n.div_ceil(b),
                precision: gemm.precision,
            };
            let split = Dims { m: a, k: c, n: b };
            out.push(price(&mut evaluator, p, split, &shard));
        }
        if out.len() == before {
            // No way to give every device a part: each dimension splits into at most its
            // size.
            return Err(ModelError::Setting {
                setting: "devices",
                value: format!("{p} (for a {} x {} x {} GEMM)", gemm.m, gemm.k, gemm.n),
                expected: "a device count the GEMM splits over whole: m, n and k each into at \
                           most their size, the parts multiplying to the count",
            });
        }
    }
    Ok(out)
}

fn price(evaluator: &mut Evaluator, devices: u64, split: Dims, g: &Gemm) -> ShardPoint {
    let graph = Workload::Gemm(g.clone()).graph();
    let t = evaluator.kernel(&graph.kernels[0]);
    let (m, k, n) = (g.m as f64, g.k as f64, g.n as f64);
    let flops = 2.0 * m * k * n;
    let compulsory = (m * k + k * n + m * n) * g.precision.bytes();
    let main_memory_bytes = t.level_bytes.last().copied().unwrap_or(0.0).max(compulsory);
    ShardPoint {
        devices,
        split,
        shard: Dims {
            m: g.m,
            k: g.k,
            n: g.n,
        },
        flops,
        main_memory_bytes,
        intensity_flops_per_byte: flops / main_memory_bytes,
        time_s: t.time_s,
        bound: t.bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_split_multiplies_to_the_count_once() {
        for p in [1u64, 6, 64, 65536] {
            let s = splits(p);
            assert!(s.iter().all(|[a, b, c]| a * b * c == p));
            let mut sorted = s.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), s.len());
        }
        // Powers of two: (e + 1)(e + 2) / 2 ordered triples of exponents.
        assert_eq!(splits(65536).len(), 17 * 18 / 2);
        assert_eq!(splits(6).len(), 9);
    }
}
