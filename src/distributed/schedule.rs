//! Event-driven pipeline schedule (DeepFlow Sec. 6.5): every stage runs its forward and
//! backward micro-batch steps in a fixed order on its compute stream; a step starts when
//! its stage is free and its input has arrived from the neighbouring stage. Orders:
//! GPipe (all forwards, then all backwards), 1F1B and interleaved 1F1B (Narayanan et al.
//! 2021), which is 1F1B with `chunks` model chunks per stage.

/// Durations of one stage's steps for one micro-batch of one chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageSteps {
    pub forward_s: f64,
    pub backward_s: f64,
}

/// When each stage's compute stream starts and ends its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Per stage: end of its last step.
    pub end_s: Vec<f64>,
    /// Per stage and chunk: start and end of the last backward step of that chunk (when
    /// the chunk's weight gradients are complete, layer by layer).
    pub last_backward: Vec<Vec<(f64, f64)>>,
}

/// One step of the schedule: a micro-batch's forward or backward through one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub micro_batch: usize,
    pub chunk: usize,
    pub backward: bool,
}

/// When one step ran on its stage's compute stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSpan {
    pub stage: usize,
    pub step: Step,
    pub start_s: f64,
    pub end_s: f64,
}

/// The order one stage runs its steps in.
fn order(
    stage: usize,
    stages: usize,
    micro_batches: usize,
    chunks: usize,
    gpipe: bool,
) -> Vec<Step> {
    let total = micro_batches * chunks;
    let at = |k: usize, backward: bool| {
        let group = stages * chunks;
        let within = k % group;
        let chunk = within / stages;
        Step {
            micro_batch: (k / group) * stages + within % stages,
            chunk: if backward { chunks - 1 - chunk } else { chunk },
            backward,
        }
    };
    let step = |k: usize, backward: bool| {
        if chunks == 1 {
            Step {
                micro_batch: k,
                chunk: 0,
                backward,
            }
        } else {
            at(k, backward)
        }
    };
    if gpipe {
        return (0..total)
            .map(|k| step(k, false))
            .chain((0..total).map(|k| step(k, true)))
            .collect();
    }
    let warmup = if chunks == 1 {
        (stages - stage - 1).min(total)
    } else {
        ((stages - stage - 1) * 2 + (chunks - 1) * stages).min(total)
    };
    let mut out = Vec::with_capacity(2 * total);
    out.extend((0..warmup).map(|k| step(k, false)));
    for i in 0..total - warmup {
        out.push(step(warmup + i, false));
        out.push(step(i, true));
    }
    out.extend((total - warmup..total).map(|k| step(k, true)));
    out
}

/// Simulates one iteration. `steps[s][c]` are stage `s`'s durations for chunk `c`;
/// `transfer_s` is the time to hand one micro-batch's activations (or their gradients) to
/// the neighbouring stage.
pub fn simulate(
    steps: &[Vec<StageSteps>],
    micro_batches: usize,
    transfer_s: f64,
    gpipe: bool,
) -> Timeline {
    simulate_recorded(steps, micro_batches, transfer_s, gpipe, None)
}

/// [`simulate`], recording every step's span into `record` (when given) in the order the
/// steps are scheduled.
pub fn simulate_recorded(
    steps: &[Vec<StageSteps>],
    micro_batches: usize,
    transfer_s: f64,
    gpipe: bool,
    mut record: Option<&mut Vec<StepSpan>>,
) -> Timeline {
    let stages = steps.len();
    let chunks = steps[0].len();
    let orders: Vec<Vec<Step>> = (0..stages)
        .map(|s| order(s, stages, micro_batches, chunks, gpipe))
        .collect();
    // finish[((stage * chunks + chunk) * micro_batches + mb) * 2 + backward]
    let index = |s: usize, st: Step| {
        ((s * chunks + st.chunk) * micro_batches + st.micro_batch) * 2 + usize::from(st.backward)
    };
    let mut finish = vec![f64::NAN; stages * chunks * micro_batches * 2];
    let mut next = vec![0usize; stages];
    let mut free = vec![0.0f64; stages];
    let mut last_backward = vec![vec![(0.0, 0.0); chunks]; stages];
    let mut remaining: usize = orders.iter().map(Vec::len).sum();
    while remaining > 0 {
        let mut progressed = false;
        for s in 0..stages {
            while let Some(&st) = orders[s].get(next[s]) {
                // The step this one waits for, and whether a transfer lies between them.
                let dep = if !st.backward {
                    if s > 0 {
                        Some((s - 1, Step { ..st }, true))
                    } else if st.chunk > 0 {
                        Some((
                            stages - 1,
                            Step {
                                chunk: st.chunk - 1,
                                ..st
                            },
                            stages > 1,
                        ))
                    } else {
                        None
                    }
                } else if s + 1 < stages {
                    Some((s + 1, st, true))
                } else if st.chunk + 1 < chunks {
                    Some((
                        0,
                        Step {
                            chunk: st.chunk + 1,
                            ..st
                        },
                        stages > 1,
                    ))
                } else {
                    Some((
                        s,
                        Step {
                            backward: false,
                            ..st
                        },
                        false,
                    ))
                };
                let ready = match dep {
                    None => 0.0,
                    Some((ds, dst, hop)) => {
                        let f = finish[index(ds, dst)];
                        if f.is_nan() {
                            break;
                        }
                        f + if hop { transfer_s } else { 0.0 }
                    }
                };
                let c = &steps[s][st.chunk];
                let start = free[s].max(ready);
                let end = start
                    + if st.backward {
                        c.backward_s
                    } else {
                        c.forward_s
                    };
                finish[index(s, st)] = end;
                free[s] = end;
                if st.backward {
                    last_backward[s][st.chunk] = (start, end);
                }
                if let Some(r) = record.as_deref_mut() {
                    r.push(StepSpan {
                        stage: s,
                        step: st,
                        start_s: start,
                        end_s: end,
                    });
                }
                next[s] += 1;
                remaining -= 1;
                progressed = true;
            }
        }
        assert!(
            progressed,
            "pipeline schedule deadlocked: a bug in the step order"
        );
    }
    Timeline {
        end_s: free,
        last_backward,
    }
}

/// One piece of a backward step, in the order the compute stream meets it.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Kernels, s.
    Compute(f64),
    /// A collective compute waits for: its phases, (fabric, s) alone on the network.
    Blocking(Vec<(usize, f64)>),
    /// A gradient bucket (or a weight gather) handed to the communication stream here,
    /// which runs it beside compute, in the order handed over.
    Bucket(Vec<(usize, f64)>),
    /// Compute waits until the step's bucket of this index (counting from 0 in the order
    /// handed over) is done: a layer waiting for its gathered weights.
    Await(usize),
}

/// How one backward step and the gradient stream share the network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedStep {
    /// When the compute stream finishes the step.
    pub end_s: f64,
    /// Time the step's blocking collectives lost to gradient traffic on the same fabric.
    pub delay_s: f64,
    /// When the gradient stream has sent every bucket of the step.
    pub sync_end_s: f64,
}

/// A collective under way: its phases and the work left in the current one.
struct Flow<'a> {
    phases: &'a [(usize, f64)],
    phase: usize,
    left: f64,
}

impl<'a> Flow<'a> {
    fn start(phases: &'a [(usize, f64)]) -> Option<Flow<'a>> {
        let mut f = Flow {
            phases,
            phase: 0,
            left: phases.first()?.1,
        };
        f.skip_empty().then_some(f)
    }

    /// Moves past finished phases; false once the last is done.
    fn skip_empty(&mut self) -> bool {
        while self.left <= 1e-15 {
            self.phase += 1;
            match self.phases.get(self.phase) {
                Some(&(_, t)) => self.left = t,
                None => return false,
            }
        }
        true
    }

    fn fabric(&self) -> usize {
        self.phases[self.phase].0
    }
}

/// Runs one backward step from `start` on a compute stream, a stream of blocking
/// collectives (compute waits for each) and the gradient stream (MAD Max Sec. 4.3: one
/// compute and one communication stream per device), free from `sync_free`. Collectives
/// running at once on the same fabric share its ports equally; on different fabrics they
/// do not meet.
pub fn shared_step(pieces: &[Piece], start: f64, sync_free: f64) -> SharedStep {
    shared_step_recorded(pieces, start, sync_free, None)
}

/// [`shared_step`], recording into `record` (when given) each bucket's span on the
/// gradient stream: (index of its piece in `pieces`, start, end).
pub fn shared_step_recorded(
    pieces: &[Piece],
    start: f64,
    sync_free: f64,
    mut record: Option<&mut Vec<(usize, f64, f64)>>,
) -> SharedStep {
    let mut now = start;
    let mut next = 0;
    let mut compute_left = 0.0f64;
    let mut block: Option<Flow> = None;
    let mut queue: std::collections::VecDeque<(usize, &[(usize, f64)])> = Default::default();
    let mut sync: Option<Flow> = None;
    // The bucket on the gradient stream: its piece and when it started.
    let mut sending = (0usize, 0.0f64);
    let mut sync_end = sync_free;
    let mut delay = 0.0;
    let mut end = None;
    // Buckets of this step finished, and the one compute waits for.
    let mut done = 0;
    let mut waiting: Option<usize> = None;
    loop {
        if waiting.is_some_and(|i| done > i) {
            waiting = None;
        }
        // The compute stream takes pieces until it has work or waits for a collective.
        while compute_left <= 0.0 && block.is_none() && waiting.is_none() {
            match pieces.get(next) {
                Some(Piece::Compute(t)) => compute_left = *t,
                Some(Piece::Blocking(p)) => block = Flow::start(p),
                Some(Piece::Bucket(p)) => queue.push_back((next, p)),
                Some(Piece::Await(i)) => waiting = (done <= *i).then_some(*i),
                None => {
                    end.get_or_insert(now);
                    break;
                }
            }
            next += 1;
        }
        if sync.is_none() && now >= sync_free {
            while let Some((k, p)) = queue.pop_front() {
                sync = Flow::start(p);
                if sync.is_some() {
                    sending = (k, now);
                    break;
                }
                done += 1;
            }
            if waiting.is_some_and(|i| done > i) {
                continue;
            }
        }
        let shared = matches!((&block, &sync), (Some(b), Some(s)) if b.fabric() == s.fabric());
        let rate = if shared { 0.5 } else { 1.0 };
        let mut dt = f64::INFINITY;
        if compute_left > 0.0 {
            dt = dt.min(compute_left);
        }
        if let Some(b) = &block {
            dt = dt.min(b.left / rate);
        }
        if let Some(s) = &sync {
            dt = dt.min(s.left / rate);
        } else if !queue.is_empty() && now < sync_free {
            dt = dt.min(sync_free - now);
        }
        if !dt.is_finite() {
            break;
        }
        now += dt;
        compute_left = (compute_left - dt).max(0.0);
        if let Some(b) = &mut block {
            b.left -= dt * rate;
            delay += dt * (1.0 - rate);
            if !b.skip_empty() {
                block = None;
            }
        }
        if let Some(s) = &mut sync {
            s.left -= dt * rate;
            if !s.skip_empty() {
                sync = None;
                sync_end = now;
                done += 1;
                if let Some(r) = record.as_deref_mut() {
                    r.push((sending.0, sending.1, now));
                }
            }
        }
    }
    // Work that can never finish (an infinite duration, a bucket never handed over) makes
    // the step endless rather than silently short.
    let stuck = compute_left > 0.0
        || block.is_some()
        || sync.is_some()
        || waiting.is_some()
        || !queue.is_empty()
        || next < pieces.len();
    if stuck {
        return SharedStep {
            end_s: f64::INFINITY,
            delay_s: delay,
            sync_end_s: f64::INFINITY,
        };
    }
    SharedStep {
        end_s: end.unwrap_or(now),
        delay_s: delay,
        sync_end_s: sync_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(stages: usize, chunks: usize, f: f64, b: f64) -> Vec<Vec<StageSteps>> {
        vec![
            vec![
                StageSteps {
                    forward_s: f,
                    backward_s: b
                };
                chunks
            ];
            stages
        ]
    }

    #[test]
    fn one_f_one_b_bubble_is_p_minus_one_steps() {
        // (m + p - 1) (f + b) for p stages and m micro-batches, no transfer time.
        let (p, m, f, b) = (4, 8, 1.0, 2.0);
        let t = simulate(&uniform(p, 1, f, b), m, 0.0, false);
        let end = t.end_s.iter().cloned().fold(0.0, f64::max);
        assert!((end - (m + p - 1) as f64 * (f + b)).abs() < 1e-9, "{end}");
        let g = simulate(&uniform(p, 1, f, b), m, 0.0, true);
        let end = g.end_s.iter().cloned().fold(0.0, f64::max);
        assert!((end - (m + p - 1) as f64 * (f + b)).abs() < 1e-9, "{end}");
    }

    #[test]
    fn interleaving_shrinks_the_bubble_by_the_chunk_count() {
        // Chunk steps take 1/v of a stage's work: bubble (p - 1)(f + b) / v.
        let (p, m, v) = (4, 8, 2);
        let t = simulate(&uniform(p, v, 0.5, 1.0), m, 0.0, false);
        let end = t.end_s.iter().cloned().fold(0.0, f64::max);
        let ideal = m as f64 * 3.0;
        let bubble = end - ideal;
        assert!(
            (bubble - (p - 1) as f64 * 3.0 / v as f64).abs() < 1e-9,
            "{bubble}"
        );
    }

    #[test]
    fn collectives_share_a_fabric_but_not_two() {
        // A 2 s bucket handed over at 1 s; a 4 s blocking collective from 1 s on.
        let pieces = |bucket_fabric| {
            vec![
                Piece::Compute(1.0),
                Piece::Bucket(vec![(bucket_fabric, 2.0)]),
                Piece::Blocking(vec![(1, 4.0)]),
                Piece::Compute(1.0),
            ]
        };
        // Same fabric: both at half rate for 4 s (the bucket ends at 5 s), then the
        // collective alone: 2 s late, and compute ends at 8 s instead of 6 s.
        let s = shared_step(&pieces(1), 0.0, 0.0);
        assert!((s.delay_s - 2.0).abs() < 1e-12, "{s:?}");
        assert!((s.sync_end_s - 5.0).abs() < 1e-12, "{s:?}");
        // Different fabrics: no delay, the bucket ends at 3 s.
        let s = shared_step(&pieces(0), 0.0, 0.0);
        assert_eq!(s.delay_s, 0.0);
        assert!((s.sync_end_s - 3.0).abs() < 1e-12, "{s:?}");
        // A gradient stream busy until 10 s: the bucket waits, nothing is shared.
        let s = shared_step(&pieces(1), 0.0, 10.0);
        assert_eq!(s.delay_s, 0.0);
        assert!((s.sync_end_s - 12.0).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn compute_waits_for_its_gathered_weights() {
        // Two 1 s gathers queued at the start; each layer (1 s) waits for its own.
        let pieces = [
            Piece::Bucket(vec![(0, 1.0)]),
            Piece::Bucket(vec![(0, 1.0)]),
            Piece::Await(0),
            Piece::Compute(1.0),
            Piece::Await(1),
            Piece::Compute(1.0),
        ];
        let s = shared_step(&pieces, 0.0, 0.0);
        // Layer 1 runs from 1 s to 2 s while gather 2 arrives at 2 s: done at 3 s.
        assert!((s.end_s - 3.0).abs() < 1e-12, "{s:?}");
        assert!((s.sync_end_s - 2.0).abs() < 1e-12, "{s:?}");
    }

    use proptest::prelude::*;

    fn pieces_from(raw: &[(u8, usize, f64)], bucket_fabric: Option<usize>) -> Vec<Piece> {
        raw.iter()
            .map(|&(kind, fabric, t)| match kind {
                0 => Piece::Compute(t),
                1 => Piece::Blocking(vec![(fabric, t), (fabric + 1, t / 2.0)]),
                _ => Piece::Bucket(vec![(bucket_fabric.unwrap_or(fabric), t)]),
            })
            .collect()
    }

    proptest! {
        #[test]
        fn shared_steps_conserve_work(
            raw in proptest::collection::vec((0u8..3, 0usize..2, 0.0f64..5.0), 0..12),
            start in 0.0f64..3.0,
            busy in 0.0f64..6.0,
        ) {
            let pieces = pieces_from(&raw, None);
            let sum = |pick: fn(&Piece) -> f64| pieces.iter().map(pick).sum::<f64>();
            let compute = sum(|p| if let Piece::Compute(t) = p { *t } else { 0.0 });
            let blocking =
                sum(|p| if let Piece::Blocking(v) = p { v.iter().map(|x| x.1).sum() } else { 0.0 });
            let buckets =
                sum(|p| if let Piece::Bucket(v) = p { v.iter().map(|x| x.1).sum() } else { 0.0 });
            let s = shared_step(&pieces, start, busy);
            // Compute waits only for blocking collectives, each late by the delay.
            prop_assert!((s.end_s - (start + compute + blocking + s.delay_s)).abs() < 1e-9, "{s:?}");
            // A blocking collective loses at most what the buckets beside it send.
            prop_assert!(s.delay_s >= 0.0 && s.delay_s <= buckets + 1e-9, "{s:?}");
            // The gradient stream starts when free and sends every bucket.
            prop_assert!(s.sync_end_s >= busy.max(start) + buckets - 1e-9 || buckets == 0.0, "{s:?}");
            // Buckets on a fabric no blocking collective uses never slow one.
            let apart = shared_step(&pieces_from(&raw, Some(7)), start, busy);
            prop_assert_eq!(apart.delay_s, 0.0);
        }
    }
}
