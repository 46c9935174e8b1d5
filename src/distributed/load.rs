//! Serving under load: requests arriving over time at a continuously batching engine (vLLM's
//! scheduler, Kwon et al. SOSP 2023), one replica of a served transformer under a strategy.
//!
//! Requests arrive as a Poisson process (seeded) with the workload's prompt and output
//! lengths. Each engine step either runs a prefill of waiting requests (as many as the batch
//! cap, the step's token budget and the free KV blocks admit, oldest first: prefills first,
//! as vLLM schedules by default) or one decode step of every running sequence. The KV cache
//! is paged: a sequence holds whole blocks of `block_tokens`; when a decode step needs a
//! block and none is free, the newest running sequence is preempted and recomputed later
//! (vLLM's recompute policy; its recomputing prefill is priced as a prompt's). The capacity is the devices' memory at the engine's
//! `memory_utilization` (vLLM's `gpu_memory_utilization`, 0.9 by default) less the
//! weights.
//!
//! Step times come from the model ([`predict_inference`]) at a few anchors, interpolated:
//! a prefill of `k` prompts linearly between powers of two of `k`; a decode step of `b`
//! sequences linearly in `b` between powers of two, and linearly in their mean context
//! between the prompt and the prompt plus the output (a decode step's time is affine in the
//! bytes it streams). So a run of thousands of requests prices a few dozen designs.
//!
//! What is not here yet (issue 29): chunked prefill mixed into decode steps, swapping,
//! arrival traces, SLO goodput, prefill/decode disaggregation, a serving search.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::fit::FitError;
use super::serve::predict_inference;
use crate::generator::Architecture;
use crate::network::Network;
use crate::parallel::Strategy;
use crate::workload::inference::InferenceSpec;
use crate::workload::Transformer;

/// The most requests one run simulates.
pub const MAX_REQUESTS: u64 = 1_000_000;

/// The arrivals and the engine's policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Load {
    /// Mean arrival rate, requests per second (Poisson).
    pub rate_per_s: f64,
    /// Requests simulated.
    pub requests: u64,
    /// Seed of the arrival times.
    pub seed: u64,
    /// Most sequences running at once.
    pub max_batch: u64,
    /// Most prompt tokens one prefill step takes.
    pub max_step_tokens: u64,
    /// Tokens per KV-cache block.
    pub block_tokens: u64,
    /// Share of device memory the engine may use (weights and KV cache).
    pub memory_utilization: f64,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            rate_per_s: 1.0,
            requests: 1000,
            seed: 0,
            max_batch: 256,          // vLLM's max_num_seqs default
            max_step_tokens: 8192, // a prefill step's token budget (vLLM's max_num_batched_tokens for 8K models)
            block_tokens: 16,      // vLLM's default block size
            memory_utilization: 0.9, // vLLM's gpu_memory_utilization default
        }
    }
}

/// Percentiles of a latency, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (none: zeros).
    fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                mean: 0.0,
            };
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            mean: values.iter().sum::<f64>() / values.len() as f64,
        }
    }
}

/// What a run under load came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    pub workload: String,
    pub strategy: String,
    pub load: Load,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens per second from the first arrival to the last completion.
    pub output_tokens_per_s: f64,
    /// Requests completed per second over the same span.
    pub requests_per_s: f64,
    pub ttft_s: Percentiles,
    /// Per request: (completion - first token) / (output - 1).
    pub tpot_s: Percentiles,
    pub end_to_end_s: Percentiles,
    /// Tokens the KV cache holds (whole blocks), and the most sequences that ran at once.
    pub kv_capacity_tokens: u64,
    pub most_running: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// The single request's latency on an idle engine (batch 1), for reference.
    pub idle_ttft_s: f64,
}

/// Step times from the model at anchors, interpolated.
struct Costs {
    prompt: u64,
    output: u64,
    /// (k, prefill time of k prompts) at k = 1, 2, 4, ..., the batch cap.
    prefill: Vec<(u64, f64)>,
    /// (b, decode step at the prompt's context, at the prompt plus the output).
    decode: Vec<(u64, f64, f64)>,
}

fn anchors(most: u64) -> Vec<u64> {
    let mut a: Vec<u64> = std::iter::successors(Some(1u64), |k| k.checked_mul(2))
        .take_while(|&k| k < most)
        .collect();
    a.push(most);
    a
}

/// Linear interpolation of `(x, y)` points (sorted by x) at `x`.
fn lerp(points: &[(u64, f64)], x: f64) -> f64 {
    let i = points.partition_point(|p| (p.0 as f64) < x);
    if i == 0 {
        return points[0].1;
    }
    if i >= points.len() {
        return points[points.len() - 1].1;
    }
    let (x0, y0) = (points[i - 1].0 as f64, points[i - 1].1);
    let (x1, y1) = (points[i].0 as f64, points[i].1);
    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
}

impl Costs {
    fn prefill_s(&self, k: u64) -> f64 {
        lerp(&self.prefill, k as f64)
    }

    fn decode_s(&self, b: u64, mean_context: f64) -> f64 {
        let at_prompt: Vec<(u64, f64)> = self.decode.iter().map(|d| (d.0, d.1)).collect();
        let at_end: Vec<(u64, f64)> = self.decode.iter().map(|d| (d.0, d.2)).collect();
        let (a, z) = (lerp(&at_prompt, b as f64), lerp(&at_end, b as f64));
        let span = self.output.max(1) as f64;
        let f = ((mean_context - self.prompt as f64) / span).clamp(0.0, 1.0);
        a + (z - a) * f
    }
}

struct Seq {
    arrival: f64,
    first_token: f64,
    generated: u64,
    blocks: u64,
}

/// A replica's engine for `w` under `s` with the prompt and output lengths of `spec` and
/// `policy`'s batch cap, step budget, block size and memory share: its KV capacity and step
/// costs, priced once for any number of runs ([`Engine::run`]).
pub struct Engine {
    workload: String,
    strategy: String,
    replicas: u64,
    prompt: u64,
    output: u64,
    policy: Load,
    blocks_total: u64,
    most: u64,
    capacity_tokens: u64,
    costs: Costs,
}

impl Engine {
    /// Prices the engine (its arrival fields of `policy` are not used).
    pub fn new(
        w: &Transformer,
        spec: &InferenceSpec,
        arch: &Architecture,
        net: &Network,
        s: &Strategy,
        policy: &Load,
    ) -> Result<Engine, FitError> {
        let load = policy;
        let fail = |message: String| FitError {
            strategy: s.to_string(),
            workload: w.name.clone(),
            message,
        };
        let (prompt, output) = (spec.prompt_tokens, spec.output_tokens);
        let price = |batch: u64, prompt_tokens: u64| {
            predict_inference(
                w,
                &InferenceSpec {
                    batch,
                    prompt_tokens,
                    output_tokens: 1,
                },
                arch,
                net,
                s,
            )
        };
        // KV capacity of the replica's fullest device, in tokens of whole blocks.
        let one = price(1, prompt + output)?;
        let per_token = one.kv_cache_bytes / (prompt + output) as f64 / s.pipeline as f64;
        let free = one.memory_capacity_bytes * load.memory_utilization - one.weights_bytes;
        let capacity_tokens = if per_token > 0.0 && free > 0.0 {
            (free / per_token) as u64 / load.block_tokens * load.block_tokens
        } else {
            0
        };
        let blocks_total = capacity_tokens / load.block_tokens;
        let blocks_for = |tokens: u64| tokens.div_ceil(load.block_tokens);
        if blocks_for(prompt + output) > blocks_total {
            return Err(fail(format!(
                "one request of {} tokens needs {} KV blocks of {}; the devices hold {} after the \
             weights at {:.0}% of their memory",
                prompt + output,
                blocks_for(prompt + output),
                load.block_tokens,
                blocks_total,
                load.memory_utilization * 100.0
            )));
        }
        // The most sequences that can run: the batch cap, and prompts in the cache (admission
        // looks at what a request needs now; a cache that fills as they decode preempts).
        let most = load
            .max_batch
            .min(blocks_total / blocks_for(prompt + 1).max(1))
            .max(1);
        let mut prefill = Vec::new();
        for k in anchors(most.min((load.max_step_tokens / prompt.max(1)).max(1))) {
            prefill.push((k, price(k, prompt)?.time_to_first_token_s));
        }
        let mut decode = Vec::new();
        for b in anchors(most) {
            let a = price(b, prompt)?.time_per_output_token_s;
            let z = price(b, prompt + output.saturating_sub(1))?.time_per_output_token_s;
            decode.push((b, a, z));
        }
        let costs = Costs {
            prompt,
            output,
            prefill,
            decode,
        };

        Ok(Engine {
            workload: w.name.clone(),
            strategy: s.to_string(),
            replicas: s.data,
            prompt,
            output,
            policy: *policy,
            blocks_total,
            most,
            capacity_tokens,
            costs,
        })
    }

    /// Requests per second the engine serves when swamped (every request at once).
    pub fn capacity_requests_per_s(&self) -> Result<f64, FitError> {
        let requests = (4 * self.most).clamp(64, 4096);
        Ok(self.run(1e12, requests, 0)?.requests_per_s)
    }

    /// `requests` arriving at `rate_per_s` (Poisson, `seed`), on every replica.
    pub fn run(&self, rate_per_s: f64, requests: u64, seed: u64) -> Result<LoadReport, FitError> {
        let load = &Load {
            rate_per_s,
            requests,
            seed,
            ..self.policy
        };
        let fail = |message: String| FitError {
            strategy: self.strategy.clone(),
            workload: self.workload.clone(),
            message,
        };
        let (prompt, output, most, blocks_total) =
            (self.prompt, self.output, self.most, self.blocks_total);
        let blocks_for = |tokens: u64| tokens.div_ceil(load.block_tokens);
        let costs = &self.costs;
        // Arrivals: exponential gaps at the replica's share of the rate.
        let rate = load.rate_per_s / self.replicas as f64;
        let mut rng = StdRng::seed_from_u64(load.seed);
        let mut t = 0.0;
        let arrivals: Vec<f64> = (0..load.requests)
            .map(|_| {
                let u: f64 = rng.gen_range(f64::EPSILON..1.0);
                t += -u.ln() / rate;
                t
            })
            .collect();

        let mut waiting: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let mut running: Vec<usize> = Vec::new();
        let mut seqs: Vec<Seq> = arrivals
            .iter()
            .map(|&a| Seq {
                arrival: a,
                first_token: f64::NAN,
                generated: 0,
                blocks: 0,
            })
            .collect();
        let mut done_at = vec![f64::NAN; arrivals.len()];
        let (mut next, mut now, mut used) = (0usize, 0.0f64, 0u64);
        let (mut steps, mut preemptions, mut most_running, mut finished) =
            (0u64, 0u64, 0u64, 0usize);
        // Every request is prefilled once and decoded output - 1 times, plus recomputations.
        let step_cap = load.requests.saturating_mul(output + 2).saturating_mul(4) + 1000;
        while finished < arrivals.len() {
            if steps > step_cap {
                return Err(fail(format!(
                    "the engine made no progress in {step_cap} steps (preemptions {preemptions})"
                )));
            }
            while next < arrivals.len() && arrivals[next] <= now {
                waiting.push_back(next);
                next += 1;
            }
            if waiting.is_empty() && running.is_empty() {
                match arrivals.get(next) {
                    Some(&a) => now = a,
                    None => break,
                }
                continue;
            }
            // A prefill of the oldest waiting requests that fit.
            let mut admitted = Vec::new();
            let mut free = blocks_total - used;
            while let Some(&r) = waiting.front() {
                // A preempted sequence's prefill recomputes what it had generated too.
                let need = blocks_for(prompt + seqs[r].generated + 1);
                let fits = (running.len() + admitted.len()) < most as usize
                    && (admitted.len() as u64 + 1) * prompt <= load.max_step_tokens.max(prompt)
                    && need <= free;
                if !fits {
                    break;
                }
                free -= need;
                admitted.push(r);
                waiting.pop_front();
            }
            steps += 1;
            if !admitted.is_empty() {
                now += costs.prefill_s(admitted.len() as u64);
                for &r in &admitted {
                    let q = &mut seqs[r];
                    if q.first_token.is_nan() {
                        q.first_token = now;
                    }
                    q.generated += 1;
                    q.blocks = blocks_for(prompt + q.generated);
                    used += q.blocks;
                    if q.generated >= output {
                        used -= q.blocks;
                        done_at[r] = now;
                        finished += 1;
                    } else {
                        running.push(r);
                    }
                }
                most_running = most_running.max(running.len() as u64);
                continue;
            }
            // A decode step of every running sequence; the newest give way when blocks run out.
            loop {
                let need: u64 = running
                    .iter()
                    .map(|&r| blocks_for(prompt + seqs[r].generated + 1) - seqs[r].blocks)
                    .sum();
                if need <= blocks_total - used || running.len() <= 1 {
                    break;
                }
                let r = running.pop().expect("more than one running");
                used -= seqs[r].blocks;
                seqs[r].blocks = 0;
                waiting.push_front(r);
                preemptions += 1;
            }
            let b = running.len() as u64;
            let context: f64 = running
                .iter()
                .map(|&r| (prompt + seqs[r].generated) as f64)
                .sum::<f64>()
                / b as f64;
            now += costs.decode_s(b, context);
            let mut still = Vec::with_capacity(running.len());
            for &r in &running {
                let q = &mut seqs[r];
                q.generated += 1;
                let blocks = blocks_for(prompt + q.generated);
                used += blocks - q.blocks;
                q.blocks = blocks;
                if q.generated >= output {
                    used -= q.blocks;
                    q.blocks = 0;
                    done_at[r] = now;
                    finished += 1;
                } else {
                    still.push(r);
                }
            }
            running = still;
        }

        let first = arrivals.first().copied().unwrap_or(0.0);
        let last = done_at.iter().copied().fold(0.0, f64::max);
        let span = (last - first).max(f64::MIN_POSITIVE);
        let mut ttft: Vec<f64> = seqs.iter().map(|q| q.first_token - q.arrival).collect();
        let mut tpot: Vec<f64> = seqs
            .iter()
            .zip(&done_at)
            .filter(|_| output > 1)
            .map(|(q, d)| (d - q.first_token) / (output - 1) as f64)
            .collect();
        let mut e2e: Vec<f64> = seqs
            .iter()
            .zip(&done_at)
            .map(|(q, d)| d - q.arrival)
            .collect();
        Ok(LoadReport {
            workload: self.workload.clone(),
            strategy: self.strategy.clone(),
            load: *load,
            prompt_tokens: prompt,
            output_tokens: output,
            output_tokens_per_s: self.replicas as f64 * (load.requests * output) as f64 / span,
            requests_per_s: self.replicas as f64 * load.requests as f64 / span,
            ttft_s: Percentiles::of(&mut ttft),
            tpot_s: Percentiles::of(&mut tpot),
            end_to_end_s: Percentiles::of(&mut e2e),
            kv_capacity_tokens: self.capacity_tokens,
            most_running,
            preemptions,
            steps,
            idle_ttft_s: costs.prefill_s(1),
        })
    }
}

/// Simulates `load` on one replica of `s` (its `d` replicas share the arrivals evenly) of
/// `w` with the prompt and output lengths of `spec`.
pub fn simulate(
    w: &Transformer,
    spec: &InferenceSpec,
    arch: &Architecture,
    net: &Network,
    s: &Strategy,
    load: &Load,
) -> Result<LoadReport, FitError> {
    Engine::new(w, spec, arch, net, s, load)?.run(load.rate_per_s, load.requests, load.seed)
}

/// Latency bounds a deployment promises: the 99th percentiles of TTFT and TPOT, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_p99_s: f64,
    pub tpot_p99_s: f64,
}

/// The highest arrival rate an engine serves within an SLO (goodput), and the run there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goodput {
    pub slo: Slo,
    /// All replicas, and per device of the system.
    pub requests_per_s: f64,
    pub requests_per_s_per_device: f64,
    pub output_tokens_per_s: f64,
    /// What the engine serves swamped, whatever the latency.
    pub capacity_requests_per_s: f64,
    /// The bound that stops a higher rate: "ttft" or "tpot".
    pub binding: String,
    /// The run at the goodput rate.
    pub at: LoadReport,
}

impl Slo {
    /// Whether `r` keeps the bounds; else the bound it breaks most, with its numbers.
    fn kept(&self, r: &LoadReport) -> Result<(), (String, String)> {
        let ttft = r.ttft_s.p99 / self.ttft_p99_s;
        let tpot = r.tpot_s.p99 / self.tpot_p99_s;
        if ttft <= 1.0 && tpot <= 1.0 {
            return Ok(());
        }
        Err(if ttft >= tpot {
            (
                "ttft".into(),
                format!(
                    "p99 TTFT {:.2} ms > {:.2} ms",
                    r.ttft_s.p99 * 1e3,
                    self.ttft_p99_s * 1e3
                ),
            )
        } else {
            (
                "tpot".into(),
                format!(
                    "p99 TPOT {:.2} ms > {:.2} ms",
                    r.tpot_s.p99 * 1e3,
                    self.tpot_p99_s * 1e3
                ),
            )
        })
    }
}

impl Engine {
    /// The highest Poisson rate whose run of `requests` (seeded) keeps `slo`, found by
    /// bisection to 0.5% between 1% and 150% of the swamped capacity; on a system of
    /// `devices`. `Ok(Err(why))`: not even 1% of capacity keeps it (the binding latency
    /// and its numbers).
    pub fn goodput(
        &self,
        slo: &Slo,
        requests: u64,
        seed: u64,
        devices: u64,
    ) -> Result<Result<Goodput, String>, FitError> {
        let capacity = self.capacity_requests_per_s()?;
        let mut lo = 0.01 * capacity;
        let low = self.run(lo, requests, seed)?;
        if let Err((_, why)) = slo.kept(&low) {
            return Ok(Err(format!(
                "{why} already at {:.3} requests/s (1% of the {:.3} the engine serves swamped)",
                lo, capacity
            )));
        }
        let mut hi = 1.5 * capacity;
        let (mut at, mut binding) = (low, String::from("none"));
        let high = self.run(hi, requests, seed)?;
        match slo.kept(&high) {
            Ok(()) => {
                at = high;
                lo = hi;
            }
            Err((b, _)) => binding = b,
        }
        while hi / lo > 1.005 && lo < hi {
            let mid = (lo * hi).sqrt();
            let r = self.run(mid, requests, seed)?;
            match slo.kept(&r) {
                Ok(()) => {
                    lo = mid;
                    at = r;
                }
                Err((b, _)) => {
                    hi = mid;
                    binding = b;
                }
            }
        }
        Ok(Ok(Goodput {
            slo: *slo,
            requests_per_s: lo,
            requests_per_s_per_device: lo / devices.max(1) as f64,
            output_tokens_per_s: lo * self.output as f64,
            capacity_requests_per_s: capacity,
            binding,
            at,
        }))
    }
}
