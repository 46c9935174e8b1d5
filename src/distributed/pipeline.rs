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
//! - **1F1B and interleaved 1F1B**: between its warm-up forwards and its cool-down
//!   backwards, stage `s` alternates one forward and one backward, pair `i` being forward
//!   `w_s + i` and backward `i`. Taking pair `r + s` of every stage `s` as round `r`, every
//!   step of a round depends only on the round before and on earlier stages of its own
//!   round, the same way in every round (every `p v` rounds when interleaved, as the chunks
//!   cycle): the steady phase is a max-plus linear recurrence `x(r) = M x(r - 1)`. Such a
//!   recurrence turns periodic, `x(r + c) = x(r) + c lambda` (`lambda` the mean of its
//!   critical cycle, the slowest stage's `f + b` or a round trip through the pipeline with
//!   its transfers), and once one round repeats an earlier one shifted by the same amount
//!   in every component, every later round does (max-plus homogeneity). So the rounds run
//!   until a repeat appears, jump whole periods to the end of the steady phase, and the
//!   warm-up and cool-down are stepped as in the simulation. Where no repeat appears the
//!   rounds run to the end: still exact, and still without the simulation's searching.

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
    Rounds::new(steps, micro_batches, transfer_s)
        .and_then(|r| r.run())
        .unwrap_or_else(|| simulate(steps, micro_batches, transfer_s, gpipe))
}

/// 1F1B without interleaving, `m >= p - 1` (full warm-ups): round `r` (from `-(p - 1)`
/// to `m - 1`) is forward `w_s + r` of every stage `s` (`w_s = p - 1 - s` warm-up
/// forwards) that has one, then backward `r` of every stage from the last up. A forward
/// waits for the stage before in the round before, a backward for the stage after in the
/// same round: two passes per round and no searching. The rounds where every stage runs
/// both repeat periodically and are jumped as in [`Rounds`].
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
    let kept = 2 * p + 1;
    let mut history: Vec<Vec<f64>> = Vec::new();
    let mut jumped = false;
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
        if !jumped && (0..steady).contains(&r) {
            let i = r as usize;
            if let Some(c) = repeat(&history, &x, i, 1, 2 * p) {
                // Whole periods up to the last round in which every stage runs both.
                let jumps = (steady as usize - 1 - i) / c;
                if jumps > 0 {
                    let then = &history[(i - c) % kept];
                    let shift: Vec<f64> = x.iter().zip(then).map(|(a, b)| a - b).collect();
                    for (v, d) in x.iter_mut().zip(&shift) {
                        *v += jumps as f64 * d;
                    }
                    for s in 0..p {
                        free[s] = x[2 * s + 1];
                        last_backward[s][0] = (free[s] - b[s], free[s]);
                    }
                    r += (jumps * c) as i64;
                    jumped = true;
                }
            }
            if history.len() < kept {
                history.push(x.clone());
            } else {
                history[i % kept].clone_from(&x);
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

/// A step of one stage: forward or backward number `k` in the stage's chunk-major order
/// (the micro-batch and chunk follow from `k` the same way on every stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    k: usize,
    backward: bool,
}

/// 1F1B (interleaved when `v > 1`) by rounds of the steady phase (module doc).
struct Rounds<'a> {
    p: usize,
    v: usize,
    total: usize,
    hop: f64,
    steps: &'a [Vec<StageSteps>],
    /// Warm-up forwards of each stage.
    warm: Vec<usize>,
    /// Steady rounds in which every stage runs a forward-backward pair.
    rounds: usize,
    /// Finish times by (stage, direction, `k`), `k` below `head` or from `tail` on (the
    /// steps in between are never looked up).
    finish: Vec<f64>,
    head: usize,
    tail: usize,
    /// Slots per (stage, direction).
    row: usize,
    /// The chunk group of every step number `k` when interleaved (`(k mod p v) / p`),
    /// tabled: the stepping's inner loop then divides nothing.
    groups: Vec<u32>,
    next: Vec<usize>,
    free: Vec<f64>,
    last_backward: Vec<Vec<(f64, f64)>>,
    /// Steady rounds run one by one (the rest jumped).
    ran: usize,
}

impl<'a> Rounds<'a> {
    /// `None` when the warm-up does not leave two steady rounds (few micro-batches: the
    /// simulation is cheap then).
    fn new(steps: &'a [Vec<StageSteps>], m: usize, transfer_s: f64) -> Option<Rounds<'a>> {
        let (p, v) = (steps.len(), steps[0].len());
        let total = m * v;
        let warm: Vec<usize> = (0..p)
            .map(|s| {
                if v == 1 {
                    p - s - 1
                } else {
                    (p - s - 1) * 2 + (v - 1) * p
                }
            })
            .collect();
        // Interleaving runs whole groups of p micro-batches (the fit's rule); the
        // simulation takes anything else.
        if v > 1 && m % p != 0 {
            return None;
        }
        let rounds = total.checked_sub(warm[0])?;
        if rounds < 2 {
            return None;
        }
        // Stepped: the warm-up (k below the head) and the last two steady rounds on.
        let head = warm[0] + p + 1;
        let tail = (rounds - 2).max(head);
        let row = head + total - tail;
        Some(Rounds {
            p,
            v,
            total,
            hop: if p > 1 { transfer_s } else { 0.0 },
            steps,
            warm,
            rounds,
            finish: vec![f64::NAN; 2 * p * row],
            head,
            tail,
            row,
            groups: if v > 1 {
                let mut g = Vec::with_capacity(total);
                while g.len() < total {
                    for c in 0..v as u32 {
                        g.extend(std::iter::repeat(c).take(p));
                    }
                }
                g.truncate(total);
                g
            } else {
                Vec::new()
            },
            next: vec![0; p],
            free: vec![0.0; p],
            last_backward: vec![vec![(0.0, 0.0); v]; p],
            ran: 0,
        })
    }

    fn slot(&self, s: usize, step: Step) -> usize {
        let row = self.row;
        let i = if step.k < self.head {
            step.k
        } else {
            debug_assert!(step.k >= self.tail, "a skipped step looked up");
            self.head + step.k - self.tail
        };
        (2 * s + usize::from(step.backward)) * row + i
    }

    /// The step at position `pos` of stage `s`'s order.
    fn step_at(&self, s: usize, pos: usize) -> Step {
        let w = self.warm[s];
        if pos < w {
            return Step {
                k: pos,
                backward: false,
            };
        }
        let j = pos - w;
        if j < 2 * (self.total - w) {
            Step {
                k: if j % 2 == 0 { w + j / 2 } else { j / 2 },
                backward: j % 2 == 1,
            }
        } else {
            Step {
                k: pos - self.total,
                backward: true,
            }
        }
    }

    /// The chunk group of step `k` (forwards run chunk `c`, backwards chunk `v - 1 - c`).
    fn group(&self, k: usize) -> usize {
        if self.v == 1 {
            0
        } else {
            debug_assert_eq!(self.groups[k] as usize, (k % (self.p * self.v)) / self.p);
            self.groups[k] as usize
        }
    }

    /// The chunk a step runs.
    fn chunk(&self, step: Step) -> usize {
        let c = self.group(step.k);
        if step.backward {
            self.v - 1 - c
        } else {
            c
        }
    }

    /// The step `step` of stage `s` waits for, and whether a transfer lies between.
    fn dependency(&self, s: usize, step: Step) -> Option<(usize, Step, bool)> {
        let (p, k) = (self.p, step.k);
        if !step.backward {
            if s > 0 {
                return Some((s - 1, step, true));
            }
            return (self.group(k) > 0).then(|| (p - 1, Step { k: k - p, ..step }, true));
        }
        if s + 1 < p {
            return Some((s + 1, step, true));
        }
        Some(if self.group(k) > 0 {
            (0, Step { k: k - p, ..step }, true)
        } else {
            let k = k + (self.v - 1) * p;
            (s, Step { k, backward: false }, false)
        })
    }

    fn duration(&self, s: usize, backward: bool) -> f64 {
        let c = &self.steps[s][0];
        if backward {
            c.backward_s
        } else {
            c.forward_s
        }
    }

    /// Runs each stage's steps in order up to position `caps[s]`, each as soon as its
    /// dependency has finished; `None` if that deadlocks (a bug: the caller simulates).
    fn step_until(&mut self, caps: &[usize]) -> Option<()> {
        // Forwards wait for the stage before, backwards for the stage after: sweeps go
        // down and up the pipeline in turn.
        let mut down = true;
        loop {
            let mut progressed = false;
            for i in 0..self.p {
                let s = if down { i } else { self.p - 1 - i };
                while self.next[s] < caps[s] {
                    let step = self.step_at(s, self.next[s]);
                    let ready = match self.dependency(s, step) {
                        None => 0.0,
                        Some((ds, dstep, transfer)) => {
                            let f = self.finish[self.slot(ds, dstep)];
                            if f.is_nan() {
                                break;
                            }
                            f + if transfer { self.hop } else { 0.0 }
                        }
                    };
                    self.finish_step(s, step, ready);
                    self.next[s] += 1;
                    progressed = true;
                }
            }
            if (0..self.p).all(|s| self.next[s] >= caps[s]) {
                return Some(());
            }
            if !progressed {
                debug_assert!(false, "pipeline rounds deadlocked");
                return None;
            }
            down = !down;
        }
    }

    /// Runs `step` of stage `s` once it is ready at `ready`: its start and end.
    fn finish_step(&mut self, s: usize, step: Step, ready: f64) -> (f64, f64) {
        let start = self.free[s].max(ready);
        let end = start + self.duration(s, step.backward);
        let slot = self.slot(s, step);
        self.finish[slot] = end;
        self.free[s] = end;
        if step.backward {
            let c = self.chunk(step);
            self.last_backward[s][c] = (start, end);
        }
        (start, end)
    }

    fn run(self) -> Option<Timeline> {
        self.run_counted().map(|(t, _)| t)
    }

    /// The timeline and the steady rounds run one by one.
    fn run_counted(mut self) -> Option<(Timeline, usize)> {
        let p = self.p;
        // The warm-up and every stage's pairs before its first round.
        let caps: Vec<usize> = (0..p).map(|s| self.warm[s] + 2 * s).collect();
        self.step_until(&caps)?;
        let state = self.steady()?;
        // Hand the last two steady rounds to the stepping, which runs the cool-down.
        for (r, round) in [self.rounds - 2, self.rounds - 1].into_iter().zip(state) {
            for s in 0..p {
                let (forward, backward) = (
                    Step {
                        k: self.warm[s] + r + s,
                        backward: false,
                    },
                    Step {
                        k: r + s,
                        backward: true,
                    },
                );
                let f_slot = self.slot(s, forward);
                let b_slot = self.slot(s, backward);
                self.finish[f_slot] = round[2 * s];
                self.finish[b_slot] = round[2 * s + 1];
            }
        }
        for s in 0..p {
            self.next[s] = self.warm[s] + 2 * (self.rounds + s);
        }
        let caps = vec![2 * self.total; p];
        self.step_until(&caps)?;
        let ran = self.ran;
        let timeline = Timeline {
            end_s: self.free,
            last_backward: self.last_backward,
        };
        Some((timeline, ran))
    }

    /// The steady rounds: returns the last two, each as (forward end, backward end) per
    /// stage, with `free` and `last_backward` as after the last.
    fn steady(&mut self) -> Option<[Vec<f64>; 2]> {
        let (p, pv) = (self.p, self.p * self.v);
        // Round -1: stage s's pair s - 1 (its last warm-up forward for stage 0).
        let mut prev = vec![f64::NAN; 2 * p];
        for s in 0..p {
            if self.warm[s] + s > 0 {
                let k = self.warm[s] + s - 1;
                prev[2 * s] = self.finish[self.slot(s, Step { k, backward: false })];
            }
            if s > 0 {
                let k = s - 1;
                prev[2 * s + 1] = self.finish[self.slot(s, Step { k, backward: true })];
            }
        }
        // Periods tried: any for plain 1F1B; whole chunk cycles when interleaved, as the
        // dependencies repeat only every p v rounds.
        let (unit, longest) = if self.v == 1 {
            (1, 2 * p)
        } else {
            (pv, 2 * pv)
        };
        let kept = longest + 1;
        let mut history: Vec<Vec<f64>> = Vec::with_capacity(kept.min(self.rounds));
        let mut cur = vec![0.0; 2 * p];
        for r in 0..self.rounds {
            self.round(r, &prev, &mut cur);
            self.ran += 1;
            if let Some(c) = repeat(&history, &cur, r, unit, longest) {
                // x(r - c + j + a c) = x(r - c + j) + a (x(r) - x(r - c)), 0 <= j < c.
                let then = &history[(r - c) % kept];
                let shift: Vec<f64> = cur.iter().zip(then).map(|(x, y)| x - y).collect();
                let at = |q: usize| -> Vec<f64> {
                    let (a, j) = ((q - (r - c)) / c, (q - (r - c)) % c);
                    let base = &history[(r - c + j) % kept];
                    base.iter()
                        .zip(&shift)
                        .map(|(x, d)| x + a as f64 * d)
                        .collect()
                };
                let last = self.rounds - 1;
                let (before, after) = (at(last - 1), at(last));
                for s in 0..p {
                    let k = last + s;
                    let backward = Step { k, backward: true };
                    let end = after[2 * s + 1];
                    let chunk = self.chunk(backward);
                    self.last_backward[s][chunk] = (end - self.duration(s, true), end);
                    self.free[s] = end;
                }
                return Some([before, after]);
            }
            if history.len() < kept {
                history.push(cur.clone());
            } else {
                history[r % kept].clone_from(&cur);
            }
            std::mem::swap(&mut prev, &mut cur);
        }
        // No repeat: every round ran; `prev` holds the last.
        Some([cur, prev])
    }

    /// Round `r` from round `r - 1` (`prev`): pair `r + s` of every stage `s`.
    fn round(&mut self, r: usize, prev: &[f64], cur: &mut [f64]) {
        let p = self.p;
        let hop = self.hop;
        for s in 0..p {
            let i = r + s;
            let (kf, kb) = (self.warm[s] + i, i);
            let dep_f = if s > 0 {
                // Stage s - 1's forward of the same k: this round (1F1B), the last
                // (interleaved, two warm-up steps more).
                (if self.v == 1 {
                    cur[2 * (s - 1)]
                } else {
                    prev[2 * (s - 1)]
                }) + hop
            } else if self.group(kf) > 0 {
                prev[2 * (p - 1)] + hop
            } else {
                f64::NEG_INFINITY
            };
            let (fs, bs) = (self.duration(s, false), self.duration(s, true));
            let f_end = self.free[s].max(dep_f) + fs;
            let dep_b = if s + 1 < p {
                prev[2 * (s + 1) + 1] + hop
            } else if self.group(kb) > 0 {
                prev[1] + hop
            } else {
                f_end
            };
            let b_start = f_end.max(dep_b);
            let b_end = b_start + bs;
            self.free[s] = b_end;
            let chunk = self.chunk(Step {
                k: kb,
                backward: true,
            });
            self.last_backward[s][chunk] = (b_start, b_end);
            cur[2 * s] = f_end;
            cur[2 * s + 1] = b_end;
        }
    }
}

/// The period `c` (a multiple of `unit`, at most `longest`) for which round `r` (`cur`)
/// repeats round `r - c` shifted by the same time in every component, if any.
fn repeat(
    history: &[Vec<f64>],
    cur: &[f64],
    r: usize,
    unit: usize,
    longest: usize,
) -> Option<usize> {
    let kept = longest + 1;
    let scale = cur.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    // A few units in the last place: rounding in the recurrence, not a different state.
    // Each jump of n periods carries the error n times, far below 1e-9 for any batch.
    let tolerance = 8.0 * f64::EPSILON * scale;
    (unit..=longest.min(r)).step_by(unit).find(|&c| {
        let then = &history[(r - c) % kept];
        let shift = cur[0] - then[0];
        shift > 0.0
            && cur
                .iter()
                .zip(then)
                .all(|(x, y)| (x - y - shift).abs() <= tolerance)
    })
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
        for (v, m, t) in [(2, 192, 0.05), (1, 192, 0.05), (1, 512, 0.0), (2, 64, 0.3)] {
            let st = stages(&raw, v);
            let (solved, ran) = Rounds::new(&st, m, t).unwrap().run_counted().unwrap();
            close(&solved, &simulate(&st, m, t, false)).unwrap();
            let steady = m * v - Rounds::new(&st, m, t).unwrap().warm[0];
            assert!(ran < steady, "v {v} m {m}: {ran} of {steady} rounds run");
            eprintln!("v {v} m {m} t {t}: {ran} of {steady} steady rounds run");
        }
    }

    proptest! {
        #[test]
        fn solved_schedules_equal_the_simulation(
            raw in proptest::collection::vec((0.01f64..3.0, 0.01f64..5.0), 1..9),
            same in proptest::bool::ANY,
            m in 1usize..80,
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
