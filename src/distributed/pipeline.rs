//! The standard pipeline schedules solved without stepping through every micro-batch.
//!
//! [`super::schedule::simulate`] is the reference: it runs every step of every stage. An
//! iteration of 1F1B with `m` micro-batches on `p` stages has `2 m v p` steps (`v` chunks),
//! 12,288 for GPT-3 175B on 16 stages with 192 micro-batches and two chunks, too many for a
//! search. [`solve`] gives the same timeline (a property test pins it to the simulation to a
//! relative 1e-9) in a fraction of the steps:
//!
//! - **GPipe** is two flow shops of identical jobs: the forward pass finishes on stage `s` at
//!   `sum_{i<=s} f_i + s t + (m - 1) max_{i<=s} f_i`, and the backward pass's last step on
//!   stage `s` at `max_{j>=s} [R_j + sum_{i=s..j} b_i + (j - s) t + (m - 1) max_{i=s..j} b_i]`
//!   (`R_j` the end of stage `j`'s forwards): the longest path through the grid of steps
//!   spends every extra micro-batch on the slowest stage it can reach. Closed form, O(p^2).
//! - **1F1B and interleaved 1F1B** run in rounds. Stage `s` runs `w_s` warm-up forwards,
//!   then pairs (forward `w_s + i`, backward `i`), then cool-down backwards. Round `r` is
//!   pair `r` of every stage (plain 1F1B: forwards first, then backwards from the last
//!   stage up) or pair `r + s` of stage `s` (interleaved), the warm-up and cool-down being
//!   the rounds where a stage has only a forward or only a backward. Every step then waits
//!   only for the round before or for earlier steps of its own round: one pass over the
//!   stages per round, no searching. In the steady rounds the map from one round to the
//!   next is the same (every `p v` rounds when interleaved, as the chunks cycle): a max-plus
//!   linear recurrence `x(r) = M x(r - 1)`, which turns periodic, `x(r + c) = x(r) +
//!   c lambda` (`lambda` the mean of its critical cycle: the slowest stage's `f + b`, or a
//!   round trip through the pipeline with its transfers). Once one round repeats an earlier
//!   one shifted by the same amount in every component, every later steady round does
//!   (max-plus homogeneity), so whole periods are jumped. Where no repeat appears every
//!   round runs: still exact.
//!
//! Schedules of another shape (truncated warm-ups with few micro-batches, interleaving with
//! micro-batches not a multiple of the stages, chunks of unequal length) are simulated.

use super::schedule::{simulate, StageSteps, Timeline};

/// The timeline of [`simulate`]`(steps, micro_batches, transfer_s, gpipe)`, without
/// stepping through every micro-batch where the schedule is a standard one (every chunk of
/// a stage equally long).
pub fn solve(
    steps: &[Vec<StageSteps>],
    micro_batches: usize,
    transfer_s: f64,
    gpipe: bool,
) -> Timeline {
    let chunks = steps.first().map_or(0, Vec::len);
    let uniform = chunks > 0
        && steps
            .iter()
            .all(|st| st.len() == chunks && st.iter().all(|c| *c == st[0]));
    if !uniform || micro_batches == 0 {
        return simulate(steps, micro_batches, transfer_s, gpipe);
    }
    if gpipe {
        return if chunks == 1 {
            gpipe_closed_form(steps, micro_batches, transfer_s)
        } else {
            simulate(steps, micro_batches, transfer_s, gpipe)
        };
    }
    if chunks == 1 && micro_batches + 1 >= steps.len() {
        return plain_1f1b(steps, micro_batches, transfer_s);
    }
    interleaved_1f1b(steps, micro_batches, transfer_s)
        .map(|(timeline, _)| timeline)
        .unwrap_or_else(|| simulate(steps, micro_batches, transfer_s, gpipe))
}

/// 1F1B without interleaving, `m >= p - 1` (full warm-ups): round `r` (from `-(p - 1)`
/// to `m - 1`) is forward `w_s + r` of every stage `s` (`w_s = p - 1 - s` warm-up
/// forwards) that has one, then backward `r` of every stage from the last up. A forward
/// waits for the stage before in the round before, a backward for the stage after in the
/// same round: two passes per round and no searching. The rounds where every stage runs
/// both repeat periodically and are jumped ([`Periods`]).
fn plain_1f1b(steps: &[Vec<StageSteps>], m: usize, transfer_s: f64) -> Timeline {
    let p = steps.len();
    let t = if p > 1 { transfer_s } else { 0.0 };
    let (f, b): (Vec<f64>, Vec<f64>) = steps
        .iter()
        .map(|s| (s[0].forward_s, s[0].backward_s))
        .unzip();
    // (forward end, backward end) per stage in the last round; `free`: each stage's last
    // step's end.
    let mut x = vec![0.0f64; 2 * p];
    let mut free = vec![0.0f64; p];
    let mut last_backward = vec![vec![(0.0, 0.0)]; p];
    let first = -(p as i64 - 1);
    // Rounds 0 .. m - p + 1 run a forward and a backward on every stage.
    let steady = (m + 1 - p) as i64;
    let mut periods = Periods::new(1, 2 * p, steady as usize);
    let mut r = first;
    while r < m as i64 {
        for s in (0..p).rev() {
            let k = (p - 1 - s) as i64 + r;
            if (0..m as i64).contains(&k) {
                // Stage s - 1's forward of the same micro-batch ended in the last round.
                let ready = if s > 0 { x[2 * (s - 1)] + t } else { 0.0 };
                let end = free[s].max(ready) + f[s];
                x[2 * s] = end;
                free[s] = end;
            }
        }
        if r >= 0 {
            for s in (0..p).rev() {
                let ready = if s + 1 < p {
                    x[2 * (s + 1) + 1] + t
                } else {
                    x[2 * s]
                };
                let start = free[s].max(ready);
                let end = start + b[s];
                x[2 * s + 1] = end;
                free[s] = end;
                last_backward[s][0] = (start, end);
            }
        }
        if (0..steady).contains(&r) {
            let skipped = periods.jump(r as usize, &mut x);
            if skipped > 0 {
                r += skipped as i64;
                for s in 0..p {
                    free[s] = x[2 * s + 1];
                    last_backward[s][0] = (free[s] - b[s], free[s]);
                }
            }
        }
        r += 1;
    }
    Timeline {
        end_s: free,
        last_backward,
    }
}

/// GPipe without interleaving: two flow shops of `m` identical jobs (module doc).
fn gpipe_closed_form(steps: &[Vec<StageSteps>], m: usize, transfer_s: f64) -> Timeline {
    let p = steps.len();
    let t = if p > 1 { transfer_s } else { 0.0 };
    let extra = (m - 1) as f64;
    let (f, b): (Vec<f64>, Vec<f64>) = steps
        .iter()
        .map(|s| (s[0].forward_s, s[0].backward_s))
        .unzip();
    // End of each stage's last forward.
    let mut forwards = Vec::with_capacity(p);
    let (mut sum, mut slowest) = (0.0, 0.0f64);
    for (s, &fs) in f.iter().enumerate() {
        sum += fs;
        slowest = slowest.max(fs);
        forwards.push(sum + s as f64 * t + extra * slowest);
    }
    let mut end_s = Vec::with_capacity(p);
    let mut last_backward = Vec::with_capacity(p);
    for s in 0..p {
        let (mut sum, mut slowest, mut end) = (0.0, 0.0f64, f64::NEG_INFINITY);
        for j in s..p {
            sum += b[j];
            slowest = slowest.max(b[j]);
            end = end.max(forwards[j] + sum + (j - s) as f64 * t + extra * slowest);
        }
        end_s.push(end);
        last_backward.push(vec![(end - b[s], end)]);
    }
    Timeline {
        end_s,
        last_backward,
    }
}

/// Interleaved 1F1B (`v > 1` chunks, whole groups of `p` micro-batches, full warm-ups), all
/// in rounds: round `r` is, on every stage `s`, forward `w_s + r + s` and then backward
/// `r + s` where they exist (`w_s = 2 (p - 1 - s) + (v - 1) p` warm-up forwards; steps are
/// numbered chunk-major, the same micro-batch and chunk on every stage). Every step then
/// waits only for a step of the round before (the stage before or after, or the last
/// stage's forward of the chunk before for stage 0's next chunk) or for its own stage's
/// forward of the same round, so a round is one pass over the stages. The rounds where
/// every stage runs both (those of the steady phase) repeat with a period of whole chunk
/// cycles (`p v` rounds) and are jumped. Also returns the rounds run one by one. `None`
/// where the schedule is not of that shape (the simulation takes it).
fn interleaved_1f1b(
    steps: &[Vec<StageSteps>],
    m: usize,
    transfer_s: f64,
) -> Option<(Timeline, usize)> {
    let (p, v) = (steps.len(), steps[0].len());
    let (total, pv) = (m * v, p * v);
    let warm = |s: usize| 2 * (p - 1 - s) + (v - 1) * p;
    if v < 2 || p < 2 || m % p != 0 || total < warm(0) + 2 {
        return None;
    }
    let t = transfer_s;
    let (f, b): (Vec<f64>, Vec<f64>) = steps
        .iter()
        .map(|s| (s[0].forward_s, s[0].backward_s))
        .unzip();
    // The chunk group of step k, (k mod p v) / p, tabled: no division in the rounds.
    let mut group: Vec<u32> = Vec::with_capacity(total);
    while group.len() < total {
        for c in 0..v as u32 {
            group.extend(std::iter::repeat(c).take(p));
        }
    }
    group.truncate(total);
    // (forward end, backward end) per stage, last round and this one.
    let mut prev = vec![f64::NAN; 2 * p];
    let mut cur = vec![f64::NAN; 2 * p];
    let mut free = vec![0.0f64; p];
    let mut last_backward = vec![vec![(0.0, 0.0); v]; p];
    let steady = (total - warm(0)) as i64;
    let mut periods = Periods::new(pv, 2 * pv, steady as usize);
    let mut r = -(warm(0) as i64);
    while r < total as i64 {
        for s in 0..p {
            let i = r + s as i64;
            let kf = (warm(s) as i64 + i) as usize;
            if (0..total as i64).contains(&(warm(s) as i64 + i)) {
                let ready = if s > 0 {
                    prev[2 * (s - 1)] + t
                } else if group[kf] > 0 {
                    prev[2 * (p - 1)] + t
                } else {
                    0.0
                };
                let end = free[s].max(ready) + f[s];
                cur[2 * s] = end;
                free[s] = end;
            }
            if (0..total as i64).contains(&i) {
                let kb = i as usize;
                let g = group[kb] as usize;
                let ready = if s + 1 < p {
                    prev[2 * (s + 1) + 1] + t
                } else if g > 0 {
                    prev[1] + t
                } else {
                    cur[2 * s]
                };
                let start = free[s].max(ready);
                let end = start + b[s];
                cur[2 * s + 1] = end;
                free[s] = end;
                last_backward[s][v - 1 - g] = (start, end);
            }
        }
        if (0..steady).contains(&r) {
            let skipped = periods.jump(r as usize, &mut cur);
            if skipped > 0 {
                // The rounds after the jump read only the round jumped to.
                r += skipped as i64;
                for s in 0..p {
                    free[s] = cur[2 * s + 1];
                    let g = group[r as usize + s] as usize;
                    last_backward[s][v - 1 - g] = (free[s] - b[s], free[s]);
                }
            }
        }
        std::mem::swap(&mut prev, &mut cur);
        r += 1;
    }
    let timeline = Timeline {
        end_s: free,
        last_backward,
    };
    Some((timeline, periods.ran))
}

/// The steady rounds seen so far, to find when they start repeating (module doc).
struct Periods {
    /// The last `longest + 1` rounds, round `i` at `i mod (longest + 1)`.
    history: Vec<Vec<f64>>,
    /// Periods tried: multiples of `unit` up to `longest`.
    unit: usize,
    longest: usize,
    /// Steady rounds in all.
    steady: usize,
    /// Steady rounds run one by one.
    ran: usize,
    jumped: bool,
}

impl Periods {
    fn new(unit: usize, longest: usize, steady: usize) -> Periods {
        Periods {
            history: Vec::new(),
            unit,
            longest,
            steady,
            ran: 0,
            jumped: false,
        }
    }

    /// Takes steady round `i` (`x`). Once it repeats round `i - c` shifted by the same
    /// time in every component, moves `x` ahead by the whole periods that fit before the
    /// last steady round (`x(i + a c) = x(i) + a (x(i) - x(i - c))`) and returns the
    /// rounds skipped (`a c`); else records it and returns 0. Jumps once.
    fn jump(&mut self, i: usize, x: &mut [f64]) -> usize {
        if self.jumped {
            return 0;
        }
        self.ran += 1;
        let kept = self.longest + 1;
        if let Some(c) = self.repeat(x, i) {
            let jumps = (self.steady - 1 - i) / c;
            if jumps > 0 {
                let then = &self.history[(i - c) % kept];
                for (v, y) in x.iter_mut().zip(then) {
                    *v += jumps as f64 * (*v - y);
                }
                self.jumped = true;
                return jumps * c;
            }
        }
        if self.history.len() < kept {
            self.history.push(x.to_vec());
        } else {
            self.history[i % kept].copy_from_slice(x);
        }
        0
    }

    /// The period `c` (a multiple of `unit`, at most `longest`) for which round `i` (`x`)
    /// repeats round `i - c` shifted by the same time in every component, if any.
    fn repeat(&self, x: &[f64], i: usize) -> Option<usize> {
        let kept = self.longest + 1;
        let scale = x.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        // A few units in the last place: rounding in the recurrence, not a different
        // state. Each jump of n periods carries the error n times, far below 1e-9.
        let tolerance = 8.0 * f64::EPSILON * scale;
        (self.unit..=self.longest.min(i))
            .step_by(self.unit)
            .find(|&c| {
                let then = &self.history[(i - c) % kept];
                let shift = x[0] - then[0];
                shift > 0.0
                    && x.iter()
                        .zip(then)
                        .all(|(v, y)| (v - y - shift).abs() <= tolerance)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: &Timeline, b: &Timeline) -> Result<(), String> {
        let scale = a.end_s.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        let near = |x: f64, y: f64| (x - y).abs() <= 1e-9 * scale;
        let ends = a.end_s.iter().zip(&b.end_s).all(|(x, y)| near(*x, *y));
        let lasts = a.last_backward.iter().zip(&b.last_backward).all(|(x, y)| {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(u, w)| near(u.0, w.0) && near(u.1, w.1))
        });
        if ends && lasts && a.end_s.len() == b.end_s.len() {
            Ok(())
        } else {
            Err(format!("solved {a:?}\nsimulated {b:?}"))
        }
    }

    fn stages(raw: &[(f64, f64)], v: usize) -> Vec<Vec<StageSteps>> {
        raw.iter()
            .map(|&(f, b)| {
                vec![
                    StageSteps {
                        forward_s: f,
                        backward_s: b
                    };
                    v
                ]
            })
            .collect()
    }

    #[test]
    fn a_long_uniform_pipeline_jumps_and_matches() {
        // GPT-3-like: 16 stages, 192 micro-batches, two chunks, the end stages heavier.
        let mut raw = vec![(1.0, 2.0); 16];
        raw[0] = (1.3, 2.4);
        raw[15] = (1.5, 2.9);
        for (v, m, t) in [(2, 192, 0.05), (4, 192, 0.0), (2, 64, 0.3)] {
            let st = stages(&raw, v);
            let (solved, ran) = interleaved_1f1b(&st, m, t).unwrap();
            close(&solved, &simulate(&st, m, t, false)).unwrap();
            let steady = m * v - (2 * 15 + (v - 1) * 16);
            assert!(ran < steady, "v {v} m {m}: {ran} of {steady} rounds run");
            eprintln!("v {v} m {m} t {t}: {ran} of {steady} steady rounds run");
        }
        for (m, t) in [(192, 0.05), (512, 0.0)] {
            let st = stages(&raw, 1);
            close(&solve(&st, m, t, false), &simulate(&st, m, t, false)).unwrap();
        }
    }

    proptest! {
        #[test]
        fn solved_schedules_equal_the_simulation(
            raw in proptest::collection::vec((0.01f64..3.0, 0.01f64..5.0), 1..9),
            same in proptest::bool::ANY,
            m in 1usize..200,
            v in 1usize..4,
            t in prop_oneof![Just(0.0), 0.0f64..2.0],
            gpipe in proptest::bool::ANY,
        ) {
            // Uniform stages (ties between cycles) as often as random ones.
            let raw: Vec<(f64, f64)> = if same { vec![raw[0]; raw.len()] } else { raw };
            let v = if gpipe || raw.len() == 1 { 1 } else { v };
            // Interleaving needs whole groups of p micro-batches (the fit's rule).
            let m = if v > 1 { m.div_ceil(raw.len()) * raw.len() } else { m };
            let st = stages(&raw, v);
            let solved = solve(&st, m, t, gpipe);
            let simulated = simulate(&st, m, t, gpipe);
            prop_assert!(close(&solved, &simulated).is_ok(), "{}", close(&solved, &simulated).unwrap_err());
        }
    }
}
