//! Single-accelerator performance model (DeepFlow Sec. 6.1-6.3): a hierarchical roofline for
//! every kernel of a [`Graph`].
//!
//! Kernel time = max(compute time, bytes_L / bandwidth_L at every memory level L) + launch
//! overhead. Operands live at their *home*: the innermost device-wide (global-scope) level
//! whose capacity holds the kernel's working set, or main memory. Levels outside the home
//! see no traffic.
//! - GEMMs: compute at the sustained rate for their precision, stretched by wave
//!   quantisation over the bundles; per-level bytes from the tiling search of [`tiling`].
//! - Streaming kernels (element-wise, norms, softmax, optimizer): every byte read and written
//!   once at the home level; FLOPs at the fp32 (vector) rate.
//! - Gathers (embedding lookups): bytes at the level that holds the table.
//!
//! GEMM results are cached by shape and precision in the [`Evaluator`], which belongs to one
//! architecture, so a transformer's repeated shapes are searched once.
//!
//! Owns: the machine model of one architecture, kernel timing, the single-device
//! [`Prediction`] (training and serving), energy rates. Imports the generator and workload
//! stages. A new kind of kernel: an `Op` variant in `crate::workload` and its time here in
//! `Evaluator::kernel`.

pub mod roofline;
pub mod tiling;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use serde::Serialize;

use crate::domain::{McuShape, Precision, Scope, StorageFormat};
use crate::generator::{Architecture, Pinned};
use crate::violation::Violation;
use crate::workload::{Graph, Kernel, KernelClass, Op, Phase};
use tiling::{Hierarchy, Problem, Tile};

/// One memory level as the roofline sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    pub name: String,
    pub scope: Scope,
    /// Total capacity over all instances.
    pub capacity_bytes: f64,
    pub instances: u64,
    /// Aggregate bandwidth over all instances.
    pub bandwidth_bytes_per_s: f64,
}

/// What the roofline needs from an [`Architecture`].
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// From the innermost level to main memory.
    pub levels: Vec<Level>,
    pub peak_flops_per_s: f64,
    pub max_utilization: f64,
    /// The share of the peak FP8 products sustain (`max_utilization` unless the stack caps
    /// FP8 apart).
    pub fp8_utilization: f64,
    pub throughput_by_precision: BTreeMap<Precision, f64>,
    pub kernel_launch_s: f64,
    /// A serving engine's host work per step (the template's `stack.step_overhead_us`).
    pub step_overhead_s: f64,
    hierarchy: Hierarchy,
    /// A pinned processor's efficiency curves (`None`: a generated design).
    pub pinned: Option<Pinned>,
}

impl Machine {
    /// Every input of the roofline, bit for bit, appended to `out`: machines with equal
    /// fingerprints time every kernel alike. (Destructured whole: a new field must be
    /// added here to compile.)
    pub fn fingerprint(&self, out: &mut Vec<u64>) {
        let h = |x: &dyn Fn(&mut rustc_hash::FxHasher)| {
            let mut hasher = rustc_hash::FxHasher::default();
            x(&mut hasher);
            std::hash::Hasher::finish(&hasher)
        };
        let Machine {
            levels,
            peak_flops_per_s,
            max_utilization,
            fp8_utilization,
            throughput_by_precision,
            kernel_launch_s,
            step_overhead_s,
            hierarchy,
            pinned,
        } = self;
        out.push(levels.len() as u64);
        for level in levels {
            let Level {
                name,
                scope,
                capacity_bytes,
                instances,
                bandwidth_bytes_per_s,
            } = level;
            out.extend([
                h(&|s| std::hash::Hash::hash(name, s)),
                *scope as u64,
                capacity_bytes.to_bits(),
                *instances,
                bandwidth_bytes_per_s.to_bits(),
            ]);
        }
        out.extend([
            peak_flops_per_s.to_bits(),
            max_utilization.to_bits(),
            fp8_utilization.to_bits(),
            kernel_launch_s.to_bits(),
            step_overhead_s.to_bits(),
            throughput_by_precision.len() as u64,
        ]);
        for (precision, rate) in throughput_by_precision {
            out.extend([h(&|s| std::hash::Hash::hash(precision, s)), rate.to_bits()]);
        }
        let Hierarchy {
            capacity_bytes,
            bandwidth_bytes_per_s,
            bundle_level,
            bundles,
            mcu,
            operand_tile,
            dataflow,
            systolic,
        } = hierarchy;
        out.extend(capacity_bytes.iter().map(|c| c.to_bits()));
        out.extend(bandwidth_bytes_per_s.iter().map(|b| b.to_bits()));
        out.extend([
            bundle_level.map_or(u64::MAX, |l| l as u64),
            *bundles,
            mcu.0,
            mcu.1,
            mcu.2,
            operand_tile.0,
            operand_tile.1,
            *dataflow as u64,
            u64::from(*systolic),
        ]);
        if let Some(p) = pinned {
            let Pinned {
                matrix,
                vector_flops_per_s,
                vector,
                memory,
                serial,
            } = p;
            for (precision, curve) in matrix {
                out.push(h(&|s| std::hash::Hash::hash(precision, s)));
                out.extend(curve.bits());
            }
            out.push(vector_flops_per_s.to_bits());
            out.extend(vector.bits());
            out.extend(memory.bits());
            out.push(*serial as u64);
        }
    }

    pub fn new(arch: &Architecture) -> Self {
        let mut levels: Vec<Level> = arch
            .on_chip
            .iter()
            .map(|l| Level {
                name: l.name.clone(),
                scope: l.scope,
                capacity_bytes: l.capacity_bytes,
                instances: l.instances,
                bandwidth_bytes_per_s: l.bandwidth_bytes_per_s,
            })
            .collect();
        levels.push(Level {
            name: arch.main_memory.name.clone(),
            scope: Scope::Global,
            capacity_bytes: arch.main_memory.capacity_bytes,
            instances: 1,
            bandwidth_bytes_per_s: arch.achieved_memory_bandwidth(),
        });
        let core = &arch.core;
        let mcu = match core.mcu {
            McuShape::TensorCore { m, n, k } => (m, n, k),
            McuShape::SystolicArray { rows, cols } => (rows, cols, 1),
        };
        let hierarchy = Hierarchy {
            capacity_bytes: levels
                .iter()
                .map(|l| {
                    if l.instances == 0 {
                        0.0
                    } else {
                        l.capacity_bytes / l.instances as f64
                    }
                })
                .collect(),
            // Only products are tiled: their tiles are chosen for the main-memory bandwidth
            // they are priced at (the stack's product cap).
            bandwidth_bytes_per_s: levels
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    if i + 1 == levels.len() {
                        arch.achieved_product_bandwidth()
                    } else {
                        l.bandwidth_bytes_per_s
                    }
                })
                .collect(),
            bundle_level: levels.iter().position(|l| l.scope == Scope::Bundle),
            bundles: core.bundles,
            mcu,
            operand_tile: (core.operand_tile.rows, core.operand_tile.cols),
            dataflow: core.dataflow,
            systolic: matches!(core.mcu, McuShape::SystolicArray { .. }),
        };
        Machine {
            levels,
            peak_flops_per_s: core.peak_flops_per_s,
            max_utilization: arch.achieved_utilization(),
            fp8_utilization: arch.achieved_fp8_utilization(),
            throughput_by_precision: core.throughput_by_precision.clone(),
            kernel_launch_s: core.kernel_launch_s,
            step_overhead_s: arch.caps.step_overhead_s(),
            hierarchy,
            pinned: arch.pinned.clone(),
        }
    }

    /// Main memory's bandwidth for products (GEMMs), B/s: the stack's product cap, which
    /// may lie below what streaming kernels reach (`levels`' last). The tiling hierarchy
    /// holds it, as only products are tiled.
    pub fn product_bandwidth_bytes_per_s(&self) -> f64 {
        self.hierarchy
            .bandwidth_bytes_per_s
            .last()
            .copied()
            .unwrap_or(0.0)
    }

    /// Sustained matrix FLOP/s in `precision`, or None if the units do not support it.
    pub fn matrix_rate(&self, precision: Precision) -> Option<f64> {
        self.throughput_by_precision
            .get(&precision)
            .map(|r| r * self.peak_flops_per_s * self.utilization(precision))
    }

    /// The share of the peak matrix products in `precision` sustain.
    pub fn utilization(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Fp8 => self.fp8_utilization,
            _ => self.max_utilization,
        }
    }

    /// FLOP/s of element-wise work (the fp32 vector rate; a pinned processor's vector
    /// unit).
    pub fn vector_rate(&self) -> f64 {
        if let Some(p) = &self.pinned {
            return p.vector_flops_per_s;
        }
        self.throughput_by_precision
            .get(&Precision::Fp32)
            .copied()
            .unwrap_or(1.0)
            * self.peak_flops_per_s
    }

    /// Innermost global level that holds `bytes`, else main memory.
    pub fn home(&self, bytes: f64) -> usize {
        let last = self.levels.len() - 1;
        self.levels
            .iter()
            .position(|l| l.scope == Scope::Global && l.capacity_bytes >= bytes)
            .unwrap_or(last)
    }
}

/// The resource that sets a kernel's time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "level")]
pub enum Bound {
    Compute,
    Memory(String),
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Compute => write!(f, "compute"),
            Bound::Memory(level) => write!(f, "{level}"),
        }
    }
}

/// Time of one instance of a kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelTime {
    pub time_s: f64,
    pub compute_s: f64,
    /// The work in `compute_s` with every compute unit busy, what the units spend energy
    /// on: below `compute_s` where a product's tiles leave units idle in its last wave
    /// (they draw the chip's floor, which is charged over the whole iteration).
    #[serde(skip)]
    pub work_s: f64,
    /// Bytes accessed at each level, innermost first.
    pub level_bytes: Vec<f64>,
    /// bytes / bandwidth at each level.
    pub level_s: Vec<f64>,
    pub launch_s: f64,
    pub bound: Bound,
    /// Index of the level holding the operands.
    pub home: usize,
    /// For GEMMs, the tile chosen at each level below home.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiles: Vec<Option<Tile>>,
    /// The share of the peak the compute energy is scaled by (the compute units spend
    /// energy on the work alone): a product's the share its `compute_s` was stretched by
    /// (the machine's, or the FP8 cap for FP8 products); every other kernel's the machine's
    /// share, as energy has always been priced.
    #[serde(skip)]
    pub utilization: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GemmKey {
    problem: Problem,
    precision: Precision,
    weight_bytes: u64,
    /// Weights stored narrower than the product (weight-only), widened inside it.
    widen: Option<StorageFormat>,
}

/// Evaluates kernels on one machine, caching GEMM searches by shape and precision and
/// streaming kernels by their bytes and FLOPs (each cache starts over past
/// [`Evaluator::KEPT`] entries).
#[derive(Debug, Clone)]
pub struct Evaluator {
    pub machine: Machine,
    cache: FxHashMap<GemmKey, KernelTime>,
    /// Streams and gathers by (kind, the op's three numbers' bits).
    streams: FxHashMap<[u64; 5], KernelTime>,
}

/// `arch` as `graph` runs on it: a lone kernel that does not train (a `gemm` workload, as a
/// GEMM microbenchmark measures it) at the template's ceiling and full bandwidth
/// ([`Architecture::alone`]); a whole step under the stack's caps. Time and energy both
/// read the result.
pub fn as_run(arch: &Architecture, graph: &Graph) -> Architecture {
    if graph.is_lone_kernel() {
        arch.alone()
    } else {
        arch.clone()
    }
}

impl Evaluator {
    pub fn new(arch: &Architecture) -> Self {
        Evaluator {
            machine: Machine::new(arch),
            cache: FxHashMap::default(),
            streams: FxHashMap::default(),
        }
    }

    /// Moves to another machine: forgets the kernel times, keeps the caches' room.
    pub fn retarget(&mut self, machine: Machine) {
        self.machine = machine;
        self.clear_cache();
    }

    /// Kernel times each cache keeps before it starts over.
    pub const KEPT: usize = 100_000;

    /// Time of one instance of `kernel`. A precision the compute units lack gives an
    /// infinite compute time (callers check precisions first, see [`unsupported`]).
    pub fn kernel(&mut self, kernel: &Kernel) -> KernelTime {
        self.kernel_ref(kernel).clone()
    }

    /// [`Evaluator::kernel`], borrowed from the cache.
    pub fn kernel_ref(&mut self, kernel: &Kernel) -> &KernelTime {
        match kernel.op {
            Op::Gemm { batch, m: mm, k, n } => {
                // Operands at the width of the precision the product runs in (an FP8
                // product reads the FP8 copies its casts wrote; its BF16 output is counted
                // at that width too, a small underestimate where the product is bound by
                // memory).
                let problem = Problem {
                    batch,
                    m: mm,
                    k,
                    n,
                    bytes: kernel.math.bytes() as u64,
                };
                // Weights stored narrower (weight-only int8/int4) cross memory at their width.
                let widen = kernel.weights.filter(|f| f.bytes() < problem.bytes as f64);
                let elements = kernel.weight_elements();
                let weight_bytes = match widen {
                    Some(f) => (elements as f64 * f.bytes()).round() as u64,
                    None => elements * problem.bytes,
                };
                let key = GemmKey {
                    problem,
                    precision: kernel.math,
                    weight_bytes,
                    widen,
                };
                if !self.cache.contains_key(&key) {
                    if self.cache.len() >= Self::KEPT {
                        self.cache.clear();
                    }
                    let mut t = match widen {
                        None => self.gemm(problem, kernel.math, weight_bytes as f64),
                        Some(f) => self.gemm_widened(problem, kernel.math, elements as f64, f),
                    };
                    t.utilization = self.machine.utilization(kernel.math);
                    self.cache.insert(key, t);
                }
                &self.cache[&key]
            }
            Op::Stream {
                read_bytes,
                write_bytes,
                flops,
            }
            | Op::Fused {
                read_bytes,
                write_bytes,
                flops,
                ..
            } => {
                let resident = match kernel.op {
                    Op::Fused { resident_bytes, .. } => resident_bytes,
                    _ => 0.0,
                };
                // A stream computes at the vector rate; a fused kernel's products at the
                // matrix rate of its precision (its key tagged by it).
                let fused = matches!(kernel.op, Op::Fused { .. });
                let tag = if fused { 2 + kernel.math as u64 } else { 0 };
                let key = [
                    tag,
                    read_bytes.to_bits(),
                    write_bytes.to_bits(),
                    flops.to_bits(),
                    resident.to_bits(),
                ];
                if !self.streams.contains_key(&key) {
                    let m = &self.machine;
                    let rate = if fused {
                        m.matrix_rate(kernel.math).unwrap_or(0.0)
                    } else {
                        m.vector_rate()
                    };
                    let bytes = read_bytes + write_bytes;
                    // State kept in main memory between steps is read from there.
                    let home = if resident > 0.0 {
                        m.levels.len() - 1
                    } else {
                        m.home(bytes)
                    };
                    let efficiency = match &m.pinned {
                        Some(p) if fused => p.matrix_efficiency(kernel.math, flops),
                        Some(p) => p.vector.at(flops),
                        None => 1.0,
                    };
                    let mut t = self.finish(flops / (rate * efficiency), home, bytes, Vec::new());
                    if fused {
                        t.utilization = self.machine.utilization(kernel.math);
                    }
                    self.keep_stream(key, t);
                }
                &self.streams[&key]
            }
            Op::Gather {
                read_bytes,
                write_bytes,
                table_bytes,
            } => {
                let key = [
                    1,
                    read_bytes.to_bits(),
                    write_bytes.to_bits(),
                    table_bytes.to_bits(),
                    0,
                ];
                if !self.streams.contains_key(&key) {
                    let home = self.machine.home(table_bytes + write_bytes);
                    let t = self.finish(0.0, home, read_bytes + write_bytes, Vec::new());
                    self.keep_stream(key, t);
                }
                &self.streams[&key]
            }
        }
    }

    fn keep_stream(&mut self, key: [u64; 5], t: KernelTime) {
        if self.streams.len() >= Self::KEPT {
            self.streams.clear();
        }
        self.streams.insert(key, t);
    }

    /// Forgets every cached kernel time.
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.streams.clear();
    }

    /// Number of cached GEMM searches.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// A GEMM whose operands live at their home; a layer weight of `weight_bytes` lives in
    /// main memory between uses, so it crosses main memory once even when the working set
    /// fits a level closer in (decode steps, small recommendation MLPs).
    fn gemm(&self, p: Problem, precision: Precision, weight_bytes: f64) -> KernelTime {
        let m = &self.machine;
        let rate = m.matrix_rate(precision).unwrap_or(0.0);
        let b = p.bytes as f64;
        let footprint = p.batch as f64
            * (p.m as f64 * p.k as f64 + p.k as f64 * p.n as f64 + p.m as f64 * p.n as f64)
            * b;
        let home = m.home(footprint);
        if let Some(pinned) = &m.pinned {
            // A pinned processor has no levels to tile over: the operands cross main
            // memory once, at the efficiencies its curves give for this size.
            let flops = 2.0 * p.batch as f64 * p.m as f64 * p.k as f64 * p.n as f64;
            let efficiency = pinned.matrix_efficiency(precision, flops);
            return self.finish(flops / (rate * efficiency), home, footprint, Vec::new());
        }
        let mut cost = tiling::search(&m.hierarchy, &p, home, rate);
        let main = m.levels.len() - 1;
        if home < main {
            cost.level_bytes[main] += weight_bytes;
        }
        let level_s = self.product_level_s(&cost.level_bytes);
        let mut t = self.assemble(cost.compute_s, home, cost.level_bytes, level_s, cost.tiles);
        t.work_s = cost.work_s;
        t
    }

    /// A product whose `elements` weights are stored in `f`, narrower than the product's
    /// precision (weight-only quantization, as Marlin, AWQ and TensorRT-LLM's W4A16/W8A16
    /// kernels run it): the weights travel at their width to the registers, where every
    /// weight tile is widened on the vector units each time a block of 128 rows of the
    /// input passes it (`f.widen_ops()` operations per element), which the product's
    /// compute time carries.
    fn gemm_widened(
        &self,
        p: Problem,
        precision: Precision,
        elements: f64,
        f: StorageFormat,
    ) -> KernelTime {
        let b = p.bytes as f64;
        let narrow = elements * f.bytes();
        let widen_s = elements * f.widen_ops() * (p.batch * p.m).div_ceil(128) as f64
            / self.machine.vector_rate();
        // Priced at the product's width, then every level's traffic scaled below.
        let whole = self.gemm(p, precision, elements * b);
        // At small batches (64 rows or fewer) a tensor-core machine runs the product with
        // the input's rows padded to a multiple of 16 (the MMA instruction's m, as Marlin
        // pads a batch of 1), not to the machine's tile: these kernels are written to stay
        // bound by the weights' traffic there. Larger products, systolic arrays and pinned
        // processors (their measured curves) are priced as any product.
        let rate = self.machine.matrix_rate(precision).unwrap_or(0.0);
        let rows = p.batch * p.m;
        let padded = rows.div_ceil(16) * 16;
        let product_s = 2.0 * padded as f64 * p.k as f64 * p.n as f64 / rate;
        let tensor_core = self.machine.hierarchy.mcu.2 > 1;
        // The padded rows pass through the MMAs and spend their energy; idle units do not.
        let (compute_s, work_s) = if rows <= 64
            && tensor_core
            && self.machine.pinned.is_none()
            && product_s < whole.compute_s
        {
            (product_s + widen_s, product_s + widen_s)
        } else {
            (whole.compute_s + widen_s, whole.work_s + widen_s)
        };
        // Every level the weights cross at their width (all but the per-unit registers,
        // where tiles are widened) carries them so: its traffic scales as the operands'
        // compulsory bytes do; main memory, when the operands live on chip, streams just
        // the narrow weights.
        let others = p.batch as f64 * (p.m as f64 * p.k as f64 + p.m as f64 * p.n as f64) * b;
        let ratio = (others + narrow) / (others + elements * b);
        let main = self.machine.levels.len() - 1;
        let mut level_bytes = whole.level_bytes.clone();
        for (i, bytes) in level_bytes.iter_mut().enumerate() {
            if self.machine.levels[i].scope == Scope::Mcu {
                continue;
            }
            if i == main && whole.home < main {
                *bytes = narrow;
            } else {
                *bytes *= ratio;
            }
        }
        if self.machine.pinned.is_some() {
            // No levels: the operands cross main memory once.
            let home = whole.home;
            return self.finish(compute_s, home, whole.level_bytes[home] * ratio, Vec::new());
        }
        let level_s = self.product_level_s(&level_bytes);
        let mut t = self.assemble(
            compute_s,
            whole.home,
            level_bytes,
            level_s,
            whole.tiles.clone(),
        );
        t.work_s = work_s;
        t
    }

    /// A product's time at each level for its bytes there: main memory at the products'
    /// bandwidth, every level closer in at its own.
    fn product_level_s(&self, level_bytes: &[f64]) -> Vec<f64> {
        let main = self.machine.levels.len() - 1;
        level_bytes
            .iter()
            .zip(&self.machine.levels)
            .enumerate()
            .map(|(i, (bytes, l))| {
                let bandwidth = if i == main {
                    self.machine.product_bandwidth_bytes_per_s()
                } else {
                    l.bandwidth_bytes_per_s
                };
                transfer_time(*bytes, bandwidth)
            })
            .collect()
    }

    /// A streaming kernel: all bytes at the home level.
    fn finish(
        &self,
        compute_s: f64,
        home: usize,
        bytes: f64,
        tiles: Vec<Option<Tile>>,
    ) -> KernelTime {
        let levels = self.machine.levels.len();
        let mut level_bytes = vec![0.0; levels];
        level_bytes[home] = bytes;
        let efficiency = self
            .machine
            .pinned
            .as_ref()
            .map_or(1.0, |p| p.memory.at(bytes));
        let level_s = level_bytes
            .iter()
            .zip(&self.machine.levels)
            .map(|(b, l)| transfer_time(*b, l.bandwidth_bytes_per_s * efficiency))
            .collect();
        self.assemble(compute_s, home, level_bytes, level_s, tiles)
    }

    fn assemble(
        &self,
        compute_s: f64,
        home: usize,
        level_bytes: Vec<f64>,
        level_s: Vec<f64>,
        tiles: Vec<Option<Tile>>,
    ) -> KernelTime {
        let mut bound = Bound::Compute;
        let mut longest = compute_s;
        for (i, &t) in level_s.iter().enumerate() {
            if t > longest {
                longest = t;
                bound = Bound::Memory(self.machine.levels[i].name.clone());
            }
        }
        if self.machine.pinned.as_ref().is_some_and(|p| p.serial) {
            // Compute and memory one after the other (the bound names the larger part).
            longest = compute_s + level_s.iter().sum::<f64>();
        }
        let launch_s = self.machine.kernel_launch_s;
        KernelTime {
            time_s: longest + launch_s,
            compute_s,
            work_s: compute_s,
            level_bytes,
            level_s,
            launch_s,
            bound,
            home,
            tiles,
            utilization: self.machine.max_utilization,
        }
    }

    /// Predicts one iteration of `graph` on this machine. `arch_violations` are the
    /// architecture's own (over-budget) problems, carried into the result.
    pub fn predict(&mut self, graph: &Graph, arch_violations: &[Violation]) -> Prediction {
        let mut kernels = Vec::with_capacity(graph.kernels.len());
        let mut total = 0.0;
        for k in &graph.kernels {
            let t = self.kernel(k);
            total += t.time_s * k.count as f64;
            kernels.push(KernelReport::of(k, k.count, t));
        }
        let mut breakdown = Vec::new();
        for class in KernelClass::ALL {
            let of_class: Vec<&KernelReport> =
                kernels.iter().filter(|k| k.class == class).collect();
            if of_class.is_empty() {
                continue;
            }
            let time_s: f64 = of_class.iter().map(|k| k.time_s).sum();
            let mut by_bound: BTreeMap<Bound, f64> = BTreeMap::new();
            for k in &of_class {
                *by_bound.entry(k.bound.clone()).or_default() += k.time_s;
            }
            let bound = by_bound
                .into_iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(b, _)| b)
                .unwrap_or(Bound::Compute);
            breakdown.push(ClassTime {
                class,
                kernels: of_class.len(),
                flops: of_class.iter().map(|k| k.flops).sum(),
                time_s,
                fraction: if total > 0.0 { time_s / total } else { 0.0 },
                bound,
            });
        }
        let flops = graph.flops();
        let memory = MemoryReport {
            weights_bytes: graph.memory.weights_bytes,
            gradients_bytes: graph.memory.gradients_bytes,
            optimizer_state_bytes: graph.memory.optimizer_state_bytes,
            activations_bytes: graph.memory.activations_bytes + graph.memory.rebuilt_bytes,
            capacity_bytes: self.machine.levels.last().map_or(0.0, |l| l.capacity_bytes),
        };
        let footprint = graph.memory.total_bytes();
        let mut violations: Vec<Violation> = arch_violations.to_vec();
        if footprint > memory.capacity_bytes {
            violations.push(Violation::OutOfMemory {
                needed_bytes: footprint,
                capacity_bytes: memory.capacity_bytes,
                weights_bytes: memory.weights_bytes,
                gradients_bytes: memory.gradients_bytes,
                optimizer_state_bytes: memory.optimizer_state_bytes,
                activations_bytes: memory.activations_bytes,
                kv_cache_bytes: 0.0,
                gathered_bytes: 0.0,
            });
        }
        if !total.is_finite() {
            violations.push(Violation::NoBandwidth);
        }
        let achieved = if total > 0.0 { flops / total } else { 0.0 };
        Prediction {
            workload: graph.name.clone(),
            time_per_iteration_s: total,
            achieved_flops_per_s: achieved,
            utilization: achieved / self.machine.peak_flops_per_s,
            flops_per_iteration: flops,
            matmul_flops_per_iteration: graph.matmul_flops(),
            parameters: graph.parameters,
            tokens_per_iteration: graph.tokens,
            feasible: violations.is_empty(),
            violations,
            memory_per_device_bytes: footprint,
            memory,
            breakdown,
            kernels,
        }
    }
}

fn transfer_time(bytes: f64, bandwidth: f64) -> f64 {
    if bytes <= 0.0 {
        0.0
    } else if bandwidth > 0.0 {
        bytes / bandwidth
    } else {
        f64::INFINITY
    }
}

/// Precisions `graph` computes in that `machine` lacks, as (precision, supported list).
pub fn unsupported(machine: &Machine, graph: &Graph) -> Option<(Precision, String)> {
    graph
        .kernels
        .iter()
        .filter(|k| k.is_matmul())
        .find(|k| machine.matrix_rate(k.math).is_none())
        .map(|k| {
            let supported: Vec<&str> = machine
                .throughput_by_precision
                .keys()
                .map(|p| p.name())
                .collect();
            (k.math, supported.join(", "))
        })
}

/// One kernel's total over its repetitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelReport {
    pub name: String,
    pub class: KernelClass,
    pub phase: Phase,
    pub count: u64,
    /// FLOPs over all repetitions.
    pub flops: f64,
    /// Time over all repetitions.
    pub time_s: f64,
    pub bound: Bound,
    pub op: Op,
    /// One repetition.
    pub detail: KernelTime,
}

impl KernelReport {
    /// `count` instances of `kernel`, each taking `t`.
    pub fn of(kernel: &Kernel, count: u64, t: KernelTime) -> KernelReport {
        let n = count as f64;
        KernelReport {
            name: kernel.name.clone(),
            class: kernel.class,
            phase: kernel.phase,
            count,
            flops: kernel.flops() * n,
            time_s: t.time_s * n,
            bound: t.bound.clone(),
            op: kernel.op,
            detail: t,
        }
    }
}

/// Time spent in one class of kernels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassTime {
    pub class: KernelClass,
    pub kernels: usize,
    pub flops: f64,
    pub time_s: f64,
    pub fraction: f64,
    /// The bound that accounts for most of the class's time.
    pub bound: Bound,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryReport {
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_state_bytes: f64,
    /// Kept for the backward at their peak, with the layer full recomputation rebuilds.
    pub activations_bytes: f64,
    /// Main-memory capacity of the device.
    pub capacity_bytes: f64,
}

/// Prediction for one iteration on one device. Field names are a stable interface.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    pub workload: String,
    pub time_per_iteration_s: f64,
    pub achieved_flops_per_s: f64,
    /// Achieved over peak 16-bit FLOP/s.
    pub utilization: f64,
    pub flops_per_iteration: f64,
    pub matmul_flops_per_iteration: f64,
    pub parameters: f64,
    pub tokens_per_iteration: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
    pub memory_per_device_bytes: f64,
    pub memory: MemoryReport,
    pub breakdown: Vec<ClassTime>,
    pub kernels: Vec<KernelReport>,
}

/// Serving a transformer on one device: the prefill, the decode steps and what bounds them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InferencePrediction {
    pub workload: String,
    pub spec: crate::workload::inference::InferenceSpec,
    /// Time to first token: the prefill.
    pub time_to_first_token_s: f64,
    /// Time per output token: a decode step at the mean context.
    pub time_per_output_token_s: f64,
    /// Generated tokens per second over the whole request (prefill included).
    pub tokens_per_s: f64,
    pub weights_bytes: f64,
    pub kv_cache_bytes: f64,
    /// Weights one decode step reads: all of them, or of a mixture of experts those its
    /// tokens are routed to.
    pub decode_weights_bytes_per_step: f64,
    /// Main-memory bytes one decode step reads: those weights plus the mean KV cache.
    pub decode_bytes_per_step: f64,
    pub feasible: bool,
    pub violations: Vec<Violation>,
    pub prefill: Prediction,
    pub decode: Prediction,
}

impl Evaluator {
    /// Prefill and decode of `w` under `spec` on this machine.
    pub fn predict_inference(
        &mut self,
        w: &crate::workload::Transformer,
        spec: &crate::workload::inference::InferenceSpec,
        arch_violations: &[Violation],
    ) -> InferencePrediction {
        use crate::workload::inference::{
            decode_graph, kv_cache_bytes, mean_context, prefill_graph,
        };
        let prefill_graph = prefill_graph(w, spec);
        let weight_bytes = prefill_graph.precisions.weights.bytes();
        let mut prefill = self.predict(&prefill_graph, arch_violations);
        let context = mean_context(spec);
        // Serving stacks replay each decode step as one captured CUDA graph (vLLM,
        // TensorRT-LLM): one launch per step instead of one per kernel.
        let launch = self.machine.kernel_launch_s;
        self.machine.kernel_launch_s = 0.0;
        self.clear_cache();
        let mut decode = self.predict(&decode_graph(w, spec, context), arch_violations);
        // A served graph's activations are its KV cache: the memory check says so.
        for v in prefill.violations.iter_mut().chain(&mut decode.violations) {
            if let Violation::OutOfMemory {
                activations_bytes,
                kv_cache_bytes,
                ..
            } = v
            {
                *kv_cache_bytes += std::mem::take(activations_bytes);
            }
        }
        self.machine.kernel_launch_s = launch;
        self.clear_cache();
        decode.time_per_iteration_s += launch;
        // The engine's host work per step, which the device waits on (the template's
        // stack.step_overhead_us): once for the prefill, once per decode step.
        let overhead = self.machine.step_overhead_s;
        let ttft = prefill.time_per_iteration_s + overhead;
        let tpot = decode.time_per_iteration_s + overhead;
        // The prefill yields the first output token; each further one is a decode step.
        let total = ttft + spec.output_tokens.saturating_sub(1) as f64 * tpot;
        let weights = prefill.memory.weights_bytes;
        let kv = kv_cache_bytes(w, spec.batch, spec.prompt_tokens + spec.output_tokens);
        let weights_read = weights - w.unread_parameters(spec.batch) * weight_bytes;
        InferencePrediction {
            workload: w.name.clone(),
            spec: *spec,
            time_to_first_token_s: ttft,
            time_per_output_token_s: tpot,
            tokens_per_s: (spec.batch * spec.output_tokens) as f64 / total,
            weights_bytes: weights,
            kv_cache_bytes: kv,
            decode_weights_bytes_per_step: weights_read,
            decode_bytes_per_step: weights_read + kv_cache_bytes(w, spec.batch, context),
            feasible: prefill.feasible,
            violations: prefill.violations.clone(),
            prefill,
            decode,
        }
    }
}

/// Energy of one iteration on one device from the technology energies the generator used
/// (TPU v4 paper Sec. 7.6 for the method of turning it into carbon).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Energy {
    /// Compute units at work at their operating point: core power x the work's time at
    /// the full rate (units idle in a last wave are on the floor).
    pub compute_j: f64,
    /// Bytes moved at each memory level x that level's energy per byte (its dynamic power
    /// over its bandwidth; main memory's includes its standby share).
    pub memory_j: Vec<(String, f64)>,
    /// The chip's floor over the iteration: its measured idle power where the template
    /// gives one (which includes leakage), else the SRAM leakage of the generated design,
    /// plus the template's active power (what a running chip draws whatever its rates).
    pub static_j: f64,
    pub total_j: f64,
    pub average_power_w: f64,
    pub joules_per_token: f64,
}

/// What work costs on a generated design: the core's power while busy (at its
/// achievable utilization), each memory level's energy per byte (its dynamic power over
/// its bandwidth; main memory's includes its standby share), the power drawn whatever
/// the work (the chip's measured idle power, else SRAM leakage, plus its active power
/// while running), and a network port's
/// energy per byte. Mean power over a run is that floor plus the work's.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyRates {
    core_w: f64,
    /// The shares of the peak the compute units sustain (all precisions, FP8), which
    /// kernel times carry: kept to compare rates.
    utilization: (f64, f64),
    per_byte: Vec<(String, f64)>,
    /// Drawn for the whole iteration: the template's idle power (else SRAM leakage) plus
    /// its active power, what a running chip draws whatever its rates.
    pub floor_w: f64,
    pub link_j_per_byte: f64,
}

impl EnergyRates {
    pub fn of(arch: &Architecture) -> EnergyRates {
        let mut per_byte: Vec<(String, f64)> = arch
            .on_chip
            .iter()
            .map(|l| {
                let dynamic = (l.power_w.used - l.static_power_w).max(0.0);
                (l.name.clone(), dynamic / l.bandwidth_bytes_per_s.max(1.0))
            })
            .collect();
        per_byte.push((
            arch.main_memory.name.clone(),
            arch.main_memory.power_w.used / arch.achieved_memory_bandwidth().max(1.0),
        ));
        let link_j_per_byte = arch
            .inter_package
            .as_ref()
            .or(arch.intra_package.as_ref())
            .map_or(0.0, |n| n.power_w.used / n.bandwidth_bytes_per_s.max(1.0));
        EnergyRates {
            core_w: arch.core.power_w.used,
            utilization: (arch.achieved_utilization(), arch.achieved_fp8_utilization()),
            per_byte,
            floor_w: arch
                .core
                .idle_power_w
                .unwrap_or_else(|| arch.on_chip.iter().map(|l| l.static_power_w).sum())
                + arch.core.active_power_w.unwrap_or(0.0),
            link_j_per_byte,
        }
    }

    /// Whether kernels cost the same energy under both (the floor and the network's
    /// energy may differ).
    pub fn prices_kernels_as(&self, other: &EnergyRates) -> bool {
        self.core_w == other.core_w
            && self.utilization == other.utilization
            && self.per_byte == other.per_byte
    }

    /// Compute and memory energy of one instance of a kernel, by level (compute first).
    pub fn kernel_j(&self, t: &KernelTime) -> (f64, Vec<f64>) {
        // Busy time is stretched by the achievable utilization and by idle units in a
        // product's last wave; energy is spent on the work.
        let compute = self.core_w * t.work_s * t.utilization;
        let memory = t
            .level_bytes
            .iter()
            .zip(&self.per_byte)
            .map(|(b, (_, e))| b * e)
            .collect();
        (compute, memory)
    }
}

/// Compute energy and memory energy by level of `p`'s kernels.
fn kernels_j(rates: &EnergyRates, p: &Prediction) -> (f64, Vec<(String, f64)>) {
    let mut compute_j = 0.0;
    let mut memory_j: Vec<(String, f64)> = rates
        .per_byte
        .iter()
        .map(|(n, _)| (n.clone(), 0.0))
        .collect();
    for k in &p.kernels {
        let (c, m) = rates.kernel_j(&k.detail);
        compute_j += c * k.count as f64;
        for (slot, j) in memory_j.iter_mut().zip(m) {
            slot.1 += j * k.count as f64;
        }
    }
    (compute_j, memory_j)
}

/// The parts of an energy over `time_s` for `units` tokens (or samples).
fn energy_of(
    rates: &EnergyRates,
    (compute_j, memory_j): (f64, Vec<(String, f64)>),
    time_s: f64,
    units: f64,
) -> Energy {
    let static_j = rates.floor_w * time_s;
    let total_j = compute_j + memory_j.iter().map(|m| m.1).sum::<f64>() + static_j;
    Energy {
        compute_j,
        memory_j,
        static_j,
        total_j,
        average_power_w: total_j / time_s,
        joules_per_token: total_j / units.max(1.0),
    }
}

/// Energy of `p` on `arch`.
pub fn energy(arch: &Architecture, p: &Prediction) -> Energy {
    let rates = EnergyRates::of(arch);
    let work = kernels_j(&rates, p);
    energy_of(&rates, work, p.time_per_iteration_s, p.tokens_per_iteration)
}

/// Energy of serving one batch on `arch`: the prefill's kernels, the decode step's for each
/// of the further `output_tokens - 1` tokens, and the chip's floor over the whole request
/// (the engine's host work per step included); per token, per output token of the batch.
pub fn inference_energy(arch: &Architecture, p: &InferencePrediction) -> Energy {
    let rates = EnergyRates::of(arch);
    let steps = p.spec.output_tokens.saturating_sub(1) as f64;
    let (prefill_c, prefill_m) = kernels_j(&rates, &p.prefill);
    let (decode_c, decode_m) = kernels_j(&rates, &p.decode);
    let memory = prefill_m
        .into_iter()
        .zip(decode_m)
        .map(|((name, a), (_, b))| (name, a + steps * b))
        .collect();
    let time_s = p.time_to_first_token_s + steps * p.time_per_output_token_s;
    let tokens = (p.spec.batch * p.spec.output_tokens) as f64;
    energy_of(
        &rates,
        (prefill_c + steps * decode_c, memory),
        time_s,
        tokens,
    )
}
