//! GEMM tiling search over the memory hierarchy (DeepFlow Sec. 6.2-6.3).
//!
//! For each level below the one that holds the operands ("home"), a tile `(m, k, n)` that fits
//! the level's per-instance capacity (both input tiles AND the output tile) sets how many
//! bytes the level fetches from the level above it. Three loop orders are considered at every
//! level:
//! - output stationary (k innermost): A is read `ceil(N/n)` times, B `ceil(M/m)` times, C
//!   written once;
//! - A stationary: A read once, B `ceil(M/m)` times, partial sums of C written `ceil(K/k)`
//!   times and read back `ceil(K/k) - 1` times;
//! - B stationary: the mirror image.
//!
//! Output write-back is counted at every level. The innermost level's own accesses follow the
//! dataflow reuse of DeepFlow Eq. 5, whose reuse K counts what shares the stationary block: a
//! tensor core's instructions, a systolic array's streamed rows ([`Hierarchy::systolic`]). The level whose instances are the bundles also sets the
//! compute time: with fewer units of work than bundles, the rest stand idle.
//!
//! The search is separable: a level's tile changes only its own row of costs (the traffic it
//! asks of the level above, plus Eq. 5 or the idle bundles where they apply), so each level is
//! optimised on its own and the kernel time is the max over levels. Within a level, the
//! tiles on the capacity frontier are tried: for each candidate size of one dimension, the
//! other is the largest that fits, shrunk to the smallest size with the same number of
//! reloads (ceilings). The level spread over the bundles also tries output-stationary tiles
//! cut below the frontier until they fill every bundle: the frontier's largest tiles may
//! leave bundles idle, where smaller ones move more but run at the full rate.

use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::rc::Rc;

use crate::domain::Dataflow;

/// What the search needs to know about the machine, per level from the innermost.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    /// Per-instance capacity of each level, in bytes.
    pub capacity_bytes: Vec<f64>,
    /// Aggregate bandwidth of each level, in bytes/s.
    pub bandwidth_bytes_per_s: Vec<f64>,
    /// Index of the level whose instances are the bundles (work is spread over them).
    pub bundle_level: Option<usize>,
    pub bundles: u64,
    /// MCU dimensions (m, n, k): the smallest useful tile, and Nz of Eq. 5.
    pub mcu: (u64, u64, u64),
    /// Nx x Ny of Eq. 5.
    pub operand_tile: (u64, u64),
    pub dataflow: Dataflow,
    /// A systolic array: each cycle takes one row (or column, or reduction element) of the
    /// streamed operands through its Nx x Ny cells, so Eq. 5's reuse K counts rows streamed
    /// past the stationary block; a tensor core's counts instructions, each `operand_tile`
    /// rows (or columns, or `mcu.2` of the reduction).
    pub systolic: bool,
}

/// Problem: `batch` products (m x k) (k x n) with elements of `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Problem {
    pub batch: u64,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    /// Element size in bytes (1, 2 or 4).
    pub bytes: u64,
}

/// Loop order at one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopOrder {
    OutputStationary,
    AStationary,
    BStationary,
}

/// The chosen tile at one level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tile {
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub order: LoopOrder,
}

/// Result of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCost {
    /// Bytes accessed at each level (index as in [`Hierarchy`]).
    pub level_bytes: Vec<f64>,
    /// Compute time at the full sustained rate, stretched when units of work are fewer
    /// than bundles.
    pub compute_s: f64,
    /// The work itself at the full sustained rate, every unit busy: what the units spend
    /// energy on (those without a tile in the last wave idle, on the chip's floor).
    pub work_s: f64,
    /// Chosen tile per level below home (None at and above home).
    pub tiles: Vec<Option<Tile>>,
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// Tile sizes worth trying for a dimension of `dim` with smallest tile `min`, each with its
/// reload count `q = ceil(dim / tile)`: one per distinct `q` on a roughly geometric grid.
fn sizes(dim: u64, min: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let qmax = ceil_div(dim, min.max(1));
    let mut q = 1u64;
    loop {
        let q_now = q.min(qmax);
        let t = ceil_div(dim, q_now);
        // The smallest reload count that this tile size gives.
        let q_exact = ceil_div(dim, t);
        if out.last().map(|&(last, _)| last) != Some(t) {
            out.push((t, q_exact));
        }
        if q_now == qmax {
            break out;
        }
        q = if q < 8 { q + 1 } else { q + q.div_ceil(4) };
    }
}

/// Elements moved between a level and the one above it for one product, given the reload
/// counts of a tile (`q_x = ceil(X / x)`).
#[inline]
fn traffic_q(p: &Problem, order: LoopOrder, qm: u64, qn: u64, qk: u64) -> f64 {
    let (mm, kk, nn) = (p.m as f64, p.k as f64, p.n as f64);
    let (qm, qn, qk) = (qm as f64, qn as f64, qk as f64);
    match order {
        LoopOrder::OutputStationary => mm * kk * qn + kk * nn * qm + mm * nn,
        LoopOrder::AStationary => mm * kk + kk * nn * qm + mm * nn * (2.0 * qk - 1.0),
        LoopOrder::BStationary => kk * nn + mm * kk * qn + mm * nn * (2.0 * qk - 1.0),
    }
}

/// Elements moved between a level and the one above it for one product, under `tile`.
#[cfg(test)]
fn traffic(p: &Problem, t: &Tile) -> f64 {
    traffic_q(
        p,
        t.order,
        ceil_div(p.m, t.m),
        ceil_div(p.n, t.n),
        ceil_div(p.k, t.k),
    )
}

/// Units of work a tile cuts the product into, consistent with its traffic: an output
/// tile per unit (output stationary), or a stationary block per unit that streams the
/// whole other dimension (split-K, whose partial sums the traffic pays).
#[inline]
fn units_q(p: &Problem, order: LoopOrder, qm: u64, qn: u64, qk: u64) -> u64 {
    let per_product = match order {
        LoopOrder::OutputStationary => qm.saturating_mul(qn),
        LoopOrder::AStationary => qm.saturating_mul(qk),
        LoopOrder::BStationary => qn.saturating_mul(qk),
    };
    p.batch.saturating_mul(per_product)
}

/// Innermost-level accesses (elements) by DeepFlow Eq. 5 for a tile held at that level.
fn eq5_accesses(h: &Hierarchy, p: &Problem, t: &Tile) -> f64 {
    let flops = 2.0 * p.m as f64 * p.k as f64 * p.n as f64;
    let (nx, ny) = (h.operand_tile.0 as f64, h.operand_tile.1 as f64);
    let nz = h.mcu.2 as f64;
    // Reuse of the stationary operand: rows of A streamed past a stationary B block (weight
    // stationary), columns of B past a stationary A block (activation stationary), or the
    // reduction length an output block accumulates over (output stationary; the whole K
    // when k is the innermost loop).
    let os_extent = if t.order == LoopOrder::OutputStationary {
        p.k
    } else {
        t.k
    };
    let (sx, sy, sz) = if h.systolic {
        (1.0, 1.0, 1.0)
    } else {
        (nx, ny, nz)
    };
    let ws = (t.m as f64 / sx).max(1.0);
    let as_ = (t.n as f64 / sy).max(1.0);
    let os = (os_extent as f64 / sz).max(1.0);
    let reuse = match h.dataflow {
        Dataflow::WeightStationary => ws,
        Dataflow::ActivationStationary => as_,
        Dataflow::OutputStationary => os,
        Dataflow::Best => ws.max(as_).max(os),
    };
    flops * (nx * ny + reuse * nx + reuse * ny) / (2.0 * reuse * nx * ny)
}

/// Compute time of the product cut into `units` pieces spread over `bundles`: with fewer
/// units than bundles the rest stand idle; with more, the last wave is assumed balanced
/// (stream-K style work splitting), so the rate is the full rate.
#[derive(Debug, Clone, Copy)]
struct Waves {
    bundles: u64,
    /// The product at the full rate, and that times the bundles.
    whole_s: f64,
    stretched_s: f64,
}

impl Waves {
    fn new(p: &Problem, bundles: u64, rate: f64) -> Waves {
        let flops = 2.0 * p.batch as f64 * p.m as f64 * p.k as f64 * p.n as f64;
        let whole_s = flops / rate;
        Waves {
            bundles,
            whole_s,
            stretched_s: whole_s * bundles as f64,
        }
    }

    #[inline]
    fn time(&self, units: u64) -> f64 {
        if units == 0 || units >= self.bundles {
            self.whole_s
        } else {
            self.stretched_s / units as f64
        }
    }
}

/// A [`Frontier`]'s listing of output-stationary tiles cut to fill the bundles, and its
/// loop order once every tile is listed.
const FILLING: u8 = 3;
const LISTED: u8 = 4;

/// Tile sizes with their reload counts, shared.
type Sizes = Rc<[(u64, u64)]>;

/// The tile candidates every level draws from: the sizes of m and n worth trying with
/// their reload counts, the smallest tile, and the reload count of k at its minimum.
struct Candidates {
    cand_m: Sizes,
    cand_n: Sizes,
    mins: (u64, u64, u64),
    qk_min: u64,
}

impl Candidates {
    fn of(p: &Problem, mins: (u64, u64, u64)) -> Candidates {
        Candidates {
            cand_m: candidates(p.m, mins.0),
            cand_n: candidates(p.n, mins.1),
            mins,
            qk_min: ceil_div(p.k, mins.2),
        }
    }
}

/// What a level's [`Frontier`] reads: the problem, the level's capacity in elements, the
/// smallest tile, Eq. 5's operand tile and dataflow for the innermost level, and the
/// bundles a level spread over them fills. One slot per value (none packed), 0 where the
/// level does not read it: the dataflow's code is at least 1, so the innermost level never
/// shares a frontier with another.
type FrontierKey = [u64; 14];

// What each thread remembers of its searches, in two memos of pure functions (neither
// changes a result): tile sizes by (dimension, smallest size), and each level's frontier by
// what it reads. A search over budgets moves one share at a time, so a new machine mostly
// differs from the last in bandwidths and rates, which price a frontier but do not change
// it; the shapes recur on every machine.
thread_local! {
    static SIZES: RefCell<FxHashMap<(u64, u64), Sizes>> = RefCell::default();
    static FRONTIERS: RefCell<FxHashMap<FrontierKey, Frontier>> = RefCell::default();
}

/// Tile-size lists a thread remembers before it starts over.
const SIZES_REMEMBERED: usize = 4096;

/// Frontiers a thread remembers before it starts over: a frontier lists at most one tile
/// per candidate size in each of three loop orders (about a hundred for dimensions near
/// 10^5), and at the level spread over the bundles, for each size of m cut fewer times
/// than there are bundles, the sizes of n down to the first that fills them (about 200 for
/// a 2048-square output on 132 SMs; at most the product of the two size lists), 80 bytes
/// each: tens of kilobytes a frontier, so at worst tens of megabytes per thread.
const FRONTIERS_REMEMBERED: usize = 1024;

/// The tile sizes worth trying for a dimension (see [`sizes`]), remembered by the thread.
fn candidates(dim: u64, min: u64) -> Sizes {
    SIZES.with(|known| {
        let known = &mut *known.borrow_mut();
        if known.len() >= SIZES_REMEMBERED && !known.contains_key(&(dim, min)) {
            known.clear();
        }
        known
            .entry((dim, min))
            .or_insert_with(|| sizes(dim, min).into())
            .clone()
    })
}

/// The key of `level`'s frontier.
fn frontier_key(h: &Hierarchy, p: &Problem, level: usize, mins: (u64, u64, u64)) -> FrontierKey {
    let innermost = level == 0;
    // A systolic array's reuse counts rows, a tensor core's instructions: codes 5-8.
    let dataflow = match h.dataflow {
        Dataflow::WeightStationary => 1,
        Dataflow::ActivationStationary => 2,
        Dataflow::OutputStationary => 3,
        Dataflow::Best => 4,
    } + if h.systolic { 4 } else { 0 };
    [
        p.batch,
        p.m,
        p.k,
        p.n,
        p.bytes,
        elements(h, p, level),
        if innermost { h.operand_tile.0 } else { 0 },
        if innermost { h.operand_tile.1 } else { 0 },
        if innermost { h.mcu.2 } else { 0 },
        if innermost { dataflow } else { 0 },
        mins.0,
        mins.1,
        mins.2,
        spread(h, level).unwrap_or(0),
    ]
}

/// The bundles `level` spreads its tiles over, where it is the per-bundle level.
fn spread(h: &Hierarchy, level: usize) -> Option<u64> {
    (h.bundle_level == Some(level) && h.bundles > 0).then_some(h.bundles)
}

/// The n of the output-stationary frontier tile for rows `m` (k at its minimum): the
/// largest that fits `elements` with its inputs and output, shrunk to the smallest with the
/// same number of reloads; none where no n from `nmin` fits.
fn widest_n(p: &Problem, m: u64, (nmin, kmin): (u64, u64), elements: u64) -> Option<u64> {
    let used = kmin * m;
    if used >= elements {
        return None;
    }
    let n_max = ((elements - used) / (m + kmin)).min(p.n);
    if n_max < nmin {
        return None;
    }
    let n = ceil_div(p.n, ceil_div(p.n, n_max));
    (nmin..=n_max).contains(&n).then_some(n)
}

/// Elements of the problem's type that one instance of `level` holds.
fn elements(h: &Hierarchy, p: &Problem, level: usize) -> u64 {
    (h.capacity_bytes[level] / p.bytes as f64).floor() as u64
}

/// A tile a level's search considers, with what its cost reads (from its reload counts):
/// the elements it moves from the level above, Eq. 5's accesses (innermost level only,
/// else 0) and the units of work it cuts the product into.
#[derive(Debug, Clone, Copy)]
struct Considered {
    tile: Tile,
    traffic: f64,
    accesses: f64,
    units: u64,
}

impl Considered {
    /// Tile `tile` with reload counts `q`, and what its cost reads (Eq. 5's accesses
    /// where `innermost`).
    fn of(h: &Hierarchy, p: &Problem, innermost: bool, tile: Tile, q: [u64; 3]) -> Considered {
        Considered {
            tile,
            traffic: traffic_q(p, tile.order, q[0], q[1], q[2]),
            accesses: if innermost {
                eq5_accesses(h, p, &tile)
            } else {
                0.0
            },
            units: units_q(p, tile.order, q[0], q[1], q[2]),
        }
    }
}

/// The tiles one level's search considers, in the order it considers them, listed as far as
/// a search has needed: none of them depends on the bandwidths, rate or floor that price
/// them, so one list serves every machine with the level's capacity (and, innermost,
/// Eq. 5's parameters). Searches stop at the first tile that reaches their floor, so most
/// read only the head of the list.
struct Frontier {
    tiles: Vec<Considered>,
    candidates: Candidates,
    /// Elements the level holds.
    elements: u64,
    innermost: bool,
    /// Where the listing goes on: the loop order (0 output stationary, 1 A stationary,
    /// 2 B stationary, [`FILLING`], [`LISTED`] done) and the candidate size within it.
    order: u8,
    next: usize,
    /// In [`FILLING`], the candidate size of n for the m at `next`.
    next_n: usize,
    /// The bundles the level spreads its tiles over, where it is the per-bundle level.
    bundles: Option<u64>,
    /// Every tile's index, by the elements it moves from the level above (then by index):
    /// listed once the list is complete, for the least-traffic choice among tiles that
    /// reach the floor.
    by_traffic: Vec<usize>,
}

impl Frontier {
    fn new(h: &Hierarchy, p: &Problem, level: usize, candidates: Candidates) -> Frontier {
        Frontier {
            // At most one tile per candidate size and loop order.
            tiles: Vec::with_capacity(2 * candidates.cand_m.len() + candidates.cand_n.len()),
            candidates,
            elements: elements(h, p, level),
            innermost: level == 0,
            order: 0,
            next: 0,
            next_n: 0,
            bundles: spread(h, level),
            by_traffic: Vec::new(),
        }
    }

    /// Lists the next tile the search considers; false when there is none.
    fn extend(&mut self, h: &Hierarchy, p: &Problem) -> bool {
        let Candidates {
            cand_m,
            cand_n,
            mins: (mmin, nmin, kmin),
            qk_min,
        } = &self.candidates;
        let (mmin, nmin, kmin, elements) = (*mmin, *nmin, *kmin, self.elements);
        while self.order < LISTED {
            if self.order == FILLING {
                // Output stationary with n cut so that the tiles fill every bundle: the
                // largest tile a level spread over bundles holds may leave some idle (a
                // 2048 x 2048 output in 128 x 683 tiles: 48 units on 132 SMs), where a
                // smaller one moves more from the level above but runs at the full rate.
                // For each m, the sizes of n below the frontier's down to the first that
                // fills the bundles: a list that only grows with the bundles, so that more
                // of them never make a product slower.
                let Some(bundles) = self.bundles else {
                    self.order = LISTED;
                    continue;
                };
                let Some(&(m, qm)) = cand_m.get(self.next) else {
                    self.order = LISTED;
                    continue;
                };
                let frontier_n = widest_n(p, m, (nmin, kmin), elements).unwrap_or(0);
                let Some(&(n, qn)) = cand_n.get(self.next_n).filter(|_| qm < bundles) else {
                    (self.next, self.next_n) = (self.next + 1, 0);
                    continue;
                };
                self.next_n += 1;
                if n >= frontier_n || n < nmin {
                    continue;
                }
                if qm.saturating_mul(qn) >= bundles {
                    (self.next, self.next_n) = (self.next + 1, 0);
                }
                let tile = Tile {
                    m,
                    k: kmin,
                    n,
                    order: LoopOrder::OutputStationary,
                };
                self.tiles.push(Considered::of(
                    h,
                    p,
                    self.innermost,
                    tile,
                    [qm, qn, *qk_min],
                ));
                return true;
            }
            let sizes = if self.order == 2 { cand_n } else { cand_m };
            let Some(&(size, q_size)) = sizes.get(self.next) else {
                (self.order, self.next) = (self.order + 1, 0);
                continue;
            };
            self.next += 1;
            let found = match self.order {
                // Output stationary: k at its minimum, the largest n that fits each m.
                0 => {
                    let m = size;
                    let Some(n) = widest_n(p, m, (nmin, kmin), elements) else {
                        continue;
                    };
                    let tile = Tile {
                        m,
                        k: kmin,
                        n,
                        order: LoopOrder::OutputStationary,
                    };
                    (tile, [q_size, ceil_div(p.n, n), *qk_min])
                }
                // A stationary: an m x k block of A stays, n at its minimum streams.
                1 => {
                    let m = size;
                    let used = m * nmin;
                    if used >= elements {
                        continue;
                    }
                    let k_max = ((elements - used) / (m + nmin)).min(p.k);
                    if k_max < kmin {
                        continue;
                    }
                    let qk = ceil_div(p.k, k_max);
                    let tile = Tile {
                        m,
                        k: ceil_div(p.k, qk),
                        n: nmin,
                        order: LoopOrder::AStationary,
                    };
                    (tile, [q_size, ceil_div(p.n, nmin), qk])
                }
                // B stationary: a k x n block of B stays, m at its minimum streams.
                _ => {
                    let n = size;
                    let used = n * mmin;
                    if used >= elements {
                        continue;
                    }
                    let k_max = ((elements - used) / (n + mmin)).min(p.k);
                    if k_max < kmin {
                        continue;
                    }
                    let qk = ceil_div(p.k, k_max);
                    let tile = Tile {
                        m: mmin,
                        k: ceil_div(p.k, qk),
                        n,
                        order: LoopOrder::BStationary,
                    };
                    (tile, [ceil_div(p.m, mmin), q_size, qk])
                }
            };
            let (tile, q) = found;
            self.tiles
                .push(Considered::of(h, p, self.innermost, tile, q));
            return true;
        }
        false
    }

    /// The cheapest tile under `lc` with its reload counts and what its cost read. Tiles
    /// that reach `floor_s` are all equally fast (no level can make the kernel faster):
    /// among them, the one moving the least from the level above (the kernel's traffic,
    /// energy and compute intensity are those of a real tiler, which would not reload what
    /// it need not).
    fn best(&mut self, h: &Hierarchy, p: &Problem, lc: &LevelCost, floor_s: f64) -> Considered {
        let mut best: Option<(f64, usize)> = None;
        let mut i = 0;
        while i < self.tiles.len() || self.extend(h, p) {
            let incumbent = best.map_or(f64::INFINITY, |b| b.0);
            let cost = lc.cost(&self.tiles[i], incumbent);
            if cost < incumbent {
                best = Some((cost, i));
            }
            if cost <= floor_s {
                best = Some((cost, self.least_traffic(h, p, lc, floor_s, i)));
                break;
            }
            i += 1;
        }
        // A level too small for even the smallest tile streams everything through it.
        match best {
            Some((_, i)) => self.tiles[i],
            None => {
                let (tile, q) = smallest(p, self.candidates.mins);
                Considered::of(h, p, self.innermost, tile, q)
            }
        }
    }
    /// Of the tiles whose cost under `lc` reaches `floor_s`, the index of one moving the
    /// least from the level above; `reached` is one of them.
    fn least_traffic(
        &mut self,
        h: &Hierarchy,
        p: &Problem,
        lc: &LevelCost,
        floor_s: f64,
        reached: usize,
    ) -> usize {
        if self.by_traffic.len() != self.tiles.len() || self.order < LISTED {
            while self.extend(h, p) {}
            let tiles = &self.tiles;
            let mut order: Vec<usize> = (0..tiles.len()).collect();
            order.sort_by(|&a, &b| {
                tiles[a]
                    .traffic
                    .total_cmp(&tiles[b].traffic)
                    .then(a.cmp(&b))
            });
            self.by_traffic = order;
        }
        let limit = self.tiles[reached].traffic;
        for &j in &self.by_traffic {
            let t = &self.tiles[j];
            if t.traffic >= limit {
                break;
            }
            if lc.cost(t, f64::INFINITY) <= floor_s {
                return j;
            }
        }
        reached
    }
}

/// What a tile costs at one level: its traffic from the level above, Eq. 5's accesses at
/// the innermost level, and wave quantisation where the level spreads over the bundles.
struct LevelCost {
    level: usize,
    /// Seconds per element moved from the level above, and at this level.
    to_above_s: f64,
    to_own_s: f64,
    /// Where the level is per bundle, its tiles spread over the bundles in waves.
    waves: Option<Waves>,
}

impl LevelCost {
    fn new(h: &Hierarchy, p: &Problem, level: usize, rate: f64) -> LevelCost {
        let per_element = p.batch as f64 * p.bytes as f64;
        LevelCost {
            level,
            to_above_s: per_element / h.bandwidth_bytes_per_s[level + 1],
            to_own_s: per_element / h.bandwidth_bytes_per_s[level],
            waves: (h.bundle_level == Some(level) && h.bundles > 0)
                .then(|| Waves::new(p, h.bundles, rate)),
        }
    }

    /// The cost of tile `t` with reload counts `q`. The cost is a max: terms stop being
    /// added once it cannot beat `incumbent`.
    #[inline]
    fn cost(&self, c: &Considered, incumbent: f64) -> f64 {
        let mut cost = c.traffic * self.to_above_s;
        if self.level == 0 && cost < incumbent {
            cost = cost.max(c.accesses * self.to_own_s);
        }
        if let Some(waves) = &self.waves {
            if cost < incumbent {
                cost = cost.max(waves.time(c.units));
            }
        }
        cost
    }
}

/// Bytes at the innermost level of a product whose operands already sit there: Eq. 5's
/// accesses of the whole product as one tile.
fn in_registers(h: &Hierarchy, p: &Problem) -> f64 {
    let whole = Tile {
        m: p.m,
        k: p.k,
        n: p.n,
        order: LoopOrder::OutputStationary,
    };
    p.batch as f64 * eq5_accesses(h, p, &whole) * p.bytes as f64
}

/// No level can make the kernel faster than this: the compute bound `compute_s`, and the
/// compulsory traffic at home. A level whose cost falls to it cannot set the kernel time, so
/// its search stops there (the kernel time is then exactly that of the full search).
fn floor(h: &Hierarchy, p: &Problem, home: usize, compute_s: f64) -> f64 {
    let (m, k, n) = (p.m as f64, p.k as f64, p.n as f64);
    let compulsory = p.batch as f64 * (m * k + k * n + m * n) * p.bytes as f64;
    compute_s.max(compulsory / h.bandwidth_bytes_per_s[home])
}

/// The smallest tile and its reload counts: what a level too small for any tile streams
/// everything through.
fn smallest(p: &Problem, (mmin, nmin, kmin): (u64, u64, u64)) -> (Tile, [u64; 3]) {
    (
        Tile {
            m: mmin,
            k: kmin,
            n: nmin,
            order: LoopOrder::OutputStationary,
        },
        [
            ceil_div(p.m, mmin),
            ceil_div(p.n, nmin),
            ceil_div(p.k, kmin),
        ],
    )
}

/// Searches tiles for `p` on `h` with operands living at level `home`; `rate` is the
/// sustained FLOP/s for the problem's precision.
pub fn search(h: &Hierarchy, p: &Problem, home: usize, rate: f64) -> GemmCost {
    let levels = h.capacity_bytes.len();
    let b = p.bytes as f64;
    let batch = p.batch as f64;
    let mut level_bytes = vec![0.0; levels];
    let mut tiles = vec![None; levels];
    let flops = 2.0 * batch * p.m as f64 * p.k as f64 * p.n as f64;
    let work_s = flops / rate;
    let mut compute_s = work_s;
    if home == 0 {
        level_bytes[0] = in_registers(h, p);
        return GemmCost {
            level_bytes,
            compute_s,
            work_s,
            tiles,
        };
    }
    let mins = (
        h.mcu.0.min(p.m).max(1),
        h.mcu.1.min(p.n).max(1),
        h.mcu.2.min(p.k).max(1),
    );
    let floor_s = floor(h, p, home, flops / rate);
    for level in 0..home {
        let lc = LevelCost::new(h, p, level, rate);
        let key = frontier_key(h, p, level, mins);
        let chosen = FRONTIERS.with(|frontiers| {
            let frontiers = &mut *frontiers.borrow_mut();
            if frontiers.len() >= FRONTIERS_REMEMBERED && !frontiers.contains_key(&key) {
                frontiers.clear();
            }
            frontiers
                .entry(key)
                .or_insert_with(|| Frontier::new(h, p, level, Candidates::of(p, mins)))
                .best(h, p, &lc, floor_s)
        });
        // What the search priced the chosen tile with (Eq. 5's accesses at the innermost).
        level_bytes[level + 1] = batch * chosen.traffic * b;
        if level == 0 {
            level_bytes[0] = batch * chosen.accesses * b;
        }
        if let Some(waves) = &lc.waves {
            compute_s = waves.time(chosen.units);
        }
        tiles[level] = Some(chosen.tile);
    }
    GemmCost {
        level_bytes,
        compute_s,
        work_s,
        tiles,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A searched GEMM on a fresh thread, whose memo is empty: the search itself.
    fn cold(h: &Hierarchy, p: &Problem, home: usize, rate: f64) -> GemmCost {
        let (h, p) = (h.clone(), *p);
        std::thread::spawn(move || search(&h, &p, home, rate))
            .join()
            .expect("the search does not panic")
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
        /// The thread's memo never changes a result: hierarchies that differ in one input
        /// at a time (any level's capacity or bandwidth, the bundles and the level they
        /// spread over, the rate, the MCU's three sizes, Eq. 5's operand tile, the dataflow,
        /// the problem's shape, batch and element size, the operands' home), searched one
        /// after another on one thread, give what each gives searched alone.
        #[test]
        fn remembered_searches_are_the_searches(
            dims in proptest::collection::vec(1u64..3000, 4),
            caps in proptest::collection::vec(1e3f64..1e7, 4),
            bws in proptest::collection::vec(1e9f64..1e13, 4),
            changes in proptest::collection::vec((0usize..21, 0.1f64..10.0), 1..12),
        ) {
            let mut h = Hierarchy {
                capacity_bytes: caps.clone(),
                bandwidth_bytes_per_s: bws.clone(),
                bundle_level: Some(1),
                bundles: 80,
                mcu: (8, 8, 4),
                operand_tile: (4, 4),
                dataflow: Dataflow::Best,
                systolic: false,
            };
            // The innermost level slow enough for Eq. 5's accesses to choose its tiles.
            h.bandwidth_bytes_per_s[0] /= 1e3;
            let mut p = Problem { batch: dims[3] % 7 + 1, m: dims[0], k: dims[1], n: dims[2], bytes: 2 };
            let mut rate = 1e14;
            let mut home = 3;
            for (what, by) in changes {
                let level = what % 4;
                match what {
                    0..=3 => h.capacity_bytes[level] *= by,
                    4..=7 => h.bandwidth_bytes_per_s[level] *= by,
                    8 => h.bundles = (h.bundles as f64 * by) as u64 + 1,
                    9 => rate *= by,
                    10 => {
                        h.dataflow = match h.dataflow {
                            Dataflow::Best => Dataflow::WeightStationary,
                            Dataflow::WeightStationary => Dataflow::ActivationStationary,
                            Dataflow::ActivationStationary => Dataflow::OutputStationary,
                            Dataflow::OutputStationary => Dataflow::Best,
                        }
                    }
                    // Values past 32 bits too: no two of them may share a key.
                    11 if by > 5.0 => h.operand_tile.0 += 1 << 32,
                    11 => h.operand_tile = ((by * 8.0) as u64 + 1, (by * 3.0) as u64 + 1),
                    12 if by > 5.0 => h.mcu.2 += 1 << 56,
                    12 => h.mcu.2 = (by * 8.0) as u64 + 1,
                    13 => p.n = (p.n as f64 * by) as u64 + 1,
                    14 => p.m = (p.m as f64 * by) as u64 + 1,
                    15 => p.k = (p.k as f64 * by) as u64 + 1,
                    16 => p.batch = (p.batch as f64 * by) as u64 + 1,
                    17 => p.bytes = [1, 2, 4][(by * 3.0) as usize % 3],
                    18 => h.mcu = ((by * 16.0) as u64 + 1, (by * 5.0) as u64 + 1, h.mcu.2),
                    19 => h.bundle_level = [None, Some(0), Some(1), Some(2)][(by * 4.0) as usize % 4],
                    _ => home = 2 + (by > 1.0) as usize,
                }
                let warm = search(&h, &p, home, rate);
                proptest::prop_assert_eq!(&warm, &cold(&h, &p, home, rate));
                // Searched again: now from the memo.
                proptest::prop_assert_eq!(&search(&h, &p, home, rate), &warm);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Stopping at the floor never changes a level's verdict: the tile it stops at costs
        /// no more than the floor (so the level cannot set the kernel time) or is the
        /// cheapest of the whole frontier; listing the frontier lazily lists it in full.
        #[test]
        fn the_floor_stop_keeps_the_kernel_time(
            dims in proptest::collection::vec(1u64..5000, 4),
            caps in proptest::collection::vec(1e3f64..1e8, 3),
            bws in proptest::collection::vec(1e9f64..1e14, 3),
            rate in 1e12f64..1e16,
        ) {
            let mut capacity_bytes = caps.clone();
            capacity_bytes.push(1e12);
            let mut bandwidth_bytes_per_s = bws.clone();
            bandwidth_bytes_per_s.push(1e12);
            let h = Hierarchy {
                capacity_bytes,
                bandwidth_bytes_per_s,
                bundle_level: Some(1),
                bundles: 80,
                mcu: (8, 8, 4),
                operand_tile: (4, 4),
                dataflow: Dataflow::Best,
                systolic: false,
            };
            let p = Problem { batch: dims[3] % 5 + 1, m: dims[0], k: dims[1], n: dims[2], bytes: 2 };
            let mins = (h.mcu.0.min(p.m), h.mcu.1.min(p.n), h.mcu.2.min(p.k));
            let flops = 2.0 * p.batch as f64 * p.m as f64 * p.k as f64 * p.n as f64;
            let floor_s = floor(&h, &p, 3, flops / rate);
            for level in 0..3 {
                let lc = LevelCost::new(&h, &p, level, rate);
                let mut lazy = Frontier::new(&h, &p, level, Candidates::of(&p, mins));
                let stopped = lazy.best(&h, &p, &lc, floor_s);
                let mut full = Frontier::new(&h, &p, level, Candidates::of(&p, mins));
                let unstopped = full.best(&h, &p, &lc, f64::NEG_INFINITY);
                while lazy.extend(&h, &p) {}
                proptest::prop_assert_eq!(lazy.tiles.len(), full.tiles.len());
                let cost = |c: Considered| lc.cost(&c, f64::INFINITY);
                let (at_stop, cheapest) = (cost(stopped), cost(unstopped));
                proptest::prop_assert!(cheapest <= at_stop);
                proptest::prop_assert!(at_stop <= floor_s || at_stop == cheapest,
                    "level {}: stopped at {} above the floor {} and the cheapest {}",
                    level, at_stop, floor_s, cheapest);
                // No tile at the floor moves less from the level above than the one chosen.
                if at_stop <= floor_s {
                    let least = lazy
                        .tiles
                        .iter()
                        .filter(|t| cost(**t) <= floor_s)
                        .map(|t| t.traffic)
                        .fold(f64::INFINITY, f64::min);
                    proptest::prop_assert_eq!(stopped.traffic, least);
                }
            }
        }
    }

    /// Operand tiles that agree in their low 32 bits choose different tiles (a key that
    /// packed both sizes into one number gave the second the first's).
    #[test]
    fn wide_operand_tiles_are_remembered_apart() {
        let mut h = Hierarchy {
            capacity_bytes: vec![670.0, 1e5, 1e7, 1e10],
            bandwidth_bytes_per_s: vec![2.8e9, 1e10, 1e12, 1e12],
            bundle_level: Some(1),
            bundles: 80,
            mcu: (8, 8, 4),
            operand_tile: (26, 62),
            dataflow: Dataflow::Best,
            systolic: false,
        };
        let p = Problem {
            batch: 1,
            m: 818,
            k: 2630,
            n: 20,
            bytes: 2,
        };
        let narrow = search(&h, &p, 3, 1e14);
        h.operand_tile.0 += 1 << 32;
        let wide = search(&h, &p, 3, 1e14);
        assert_eq!(wide, cold(&h, &p, 3, 1e14));
        assert_ne!(
            wide.tiles[0], narrow.tiles[0],
            "the example must tell them apart"
        );
    }

    #[test]
    fn candidates_cover_every_reload_count_endpoint() {
        let c = sizes(1000, 8);
        assert_eq!(c[0], (1000, 1));
        assert_eq!(*c.last().unwrap(), (8, 125));
        assert!(c.windows(2).all(|w| w[0].0 > w[1].0 && w[0].1 < w[1].1));
        assert!(c.iter().all(|&(t, q)| q == 1000u64.div_ceil(t)));
    }

    #[test]
    fn traffic_counts_compulsory_and_reloads() {
        let p = Problem {
            batch: 1,
            m: 100,
            k: 50,
            n: 30,
            bytes: 2,
        };
        let whole = Tile {
            m: 100,
            k: 50,
            n: 30,
            order: LoopOrder::OutputStationary,
        };
        assert_eq!(
            traffic(&p, &whole),
            100.0 * 50.0 + 50.0 * 30.0 + 100.0 * 30.0
        );
        // Halving n (with ceiling: 30 / 16 -> 2 passes) reads A twice.
        let half = Tile { n: 16, ..whole };
        assert_eq!(
            traffic(&p, &half),
            2.0 * 100.0 * 50.0 + 50.0 * 30.0 + 100.0 * 30.0
        );
        // Splitting k with A stationary writes C twice and reads it back once.
        let split = Tile {
            k: 25,
            order: LoopOrder::AStationary,
            ..whole
        };
        assert_eq!(
            traffic(&p, &split),
            100.0 * 50.0 + 50.0 * 30.0 + 3.0 * 100.0 * 30.0
        );
    }

    #[test]
    fn eq5_matches_the_paper_formula() {
        let h = Hierarchy {
            capacity_bytes: vec![1e6, 1e9],
            bandwidth_bytes_per_s: vec![1e12, 1e12],
            bundle_level: None,
            bundles: 1,
            mcu: (4, 4, 4),
            operand_tile: (4, 4),
            dataflow: Dataflow::WeightStationary,
            systolic: false,
        };
        let p = Problem {
            batch: 1,
            m: 64,
            k: 64,
            n: 64,
            bytes: 2,
        };
        let t = Tile {
            m: 32,
            k: 64,
            n: 64,
            order: LoopOrder::OutputStationary,
        };
        // K = 32 / 4 = 8: flops * (16 + 8*4 + 8*4) / (2*8*16).
        let flops = 2.0 * 64.0f64.powi(3);
        assert!((eq5_accesses(&h, &p, &t) - flops * 80.0 / 256.0).abs() < 1e-9);
    }
}
