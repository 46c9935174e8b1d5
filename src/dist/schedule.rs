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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    micro_batch: usize,
    chunk: usize,
    backward: bool,
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
}
