//! Serving under load: requests arriving over time at continuously batching engines (vLLM's
//! scheduler, Kwon et al. SOSP 2023), as replicas of one served transformer or as separate
//! prefill and decode pools (DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al.
//! ISCA 2024).
//!
//! **Requests** arrive as a Poisson process (seeded) with the workload's prompt and output
//! lengths, or from a [`Trace`] (arrival time, prompt and output lengths per request; scaled
//! in time to any rate). A load balancer hands them to the replicas in turn.
//!
//! **An engine** (one replica) runs steps. Without chunked prefill (vLLM's default before
//! V1) a step is either a prefill of waiting requests (as many as the batch cap, the step's
//! token budget and the free KV blocks admit, oldest first; prefills go first) or one decode
//! step of every running sequence. With chunked prefill (Sarathi-Serve, Agrawal et al. OSDI
//! 2024; vLLM V1) every step decodes every running sequence and fills the rest of the
//! token budget with prompt chunks, oldest first, so decodes never wait behind a long
//! prompt. The KV cache is paged: a sequence holds whole blocks of `block_tokens`; when a
//! step needs a block and none is free the newest running sequence is preempted and
//! recomputed later (vLLM's recompute policy: its prompt and what it had generated are
//! prefilled again). The capacity is the devices' memory at `memory_utilization` (vLLM's
//! `gpu_memory_utilization`) less the weights.
//!
//! **Step times** come from the model ([`predict_inference`]) at anchors, interpolated: a
//! prefill of `k` prompts of mean length `p` bilinearly between powers of two of `k` and
//! `p`; a decode step of `b` sequences linearly in `b` between powers of two and affinely in
//! their mean context (a decode step streams the weights once and each sequence's KV
//! cache). A mixed step (chunked prefill) is a prefill of its `n` tokens (prompt chunks plus
//! one per decoding sequence: the weights are read once for all of them) plus the decodes'
//! KV reads. So a run of thousands of requests prices a few dozen designs. Not modelled: a
//! chunk's attention to the earlier chunks of its prompt, and the spread of prompt lengths
//! within one prefill step (priced at their mean).
//!
//! **Disaggregated** serving ([`Deployment::Disaggregated`]): a prefill pool produces each
//! first token; the prompt's KV cache then crosses the fabric to the decode pool (one
//! point-to-point message per device of the prefill replica, in parallel) and joins a decode
//! engine's batch there without a prefill.
//!
//! Swapping preempted sequences to host memory is not modelled (they are recomputed).

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::fit::FitError;
use super::serve::predict_inference;
use crate::config::{ConfigError, Source};
use crate::generator::Architecture;
use crate::network::collective::{Collective, GroupLink};
use crate::network::Network;
use crate::parallel::Strategy;
use crate::workload::inference::InferenceSpec;
use crate::workload::Transformer;

/// The most requests one run simulates.
pub const MAX_REQUESTS: u64 = 1_000_000;
/// The most tokens one request's prompt or output may have.
pub const MAX_REQUEST_TOKENS: u64 = 1 << 22;

/// One request: when it arrives and how long its prompt and output are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Request {
    pub arrival_s: f64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

/// `requests` Poisson arrivals at `rate_per_s` (seeded), each of `prompt` and `output` tokens.
pub fn poisson(
    rate_per_s: f64,
    requests: u64,
    seed: u64,
    prompt: u64,
    output: u64,
) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0;
    (0..requests.min(MAX_REQUESTS))
        .map(|_| {
            let u: f64 = rng.gen_range(f64::EPSILON..1.0);
            t += -u.ln() / rate_per_s;
            Request {
                arrival_s: t,
                prompt_tokens: prompt,
                output_tokens: output,
            }
        })
        .collect()
}

/// Recorded arrivals: a CSV file with a header and one request per row, either
/// `arrival_s,prompt_tokens,output_tokens` (seconds from any origin) or the Azure LLM
/// inference trace's `TIMESTAMP,ContextTokens,GeneratedTokens` (timestamps
/// `YYYY-MM-DD HH:MM:SS.fffffff`). Arrivals are sorted and not negative.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub file: String,
    pub requests: Vec<Request>,
}

/// Seconds since 1970-01-01 of a `YYYY-MM-DD HH:MM:SS[.f]` timestamp (UTC, proleptic
/// Gregorian), or `None` when it is not one.
fn timestamp_s(text: &str) -> Option<f64> {
    let (date, time) = text.trim().split_once([' ', 'T'])?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || !(1..=days_in_month[(m - 1) as usize]).contains(&day) {
        return None;
    }
    let mut t = time.trim_end_matches('Z').splitn(3, ':');
    let (h, min, s) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    if !(0..24).contains(&h) || !(0..60).contains(&min) || !(0.0..61.0).contains(&s) {
        return None;
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60) as f64 + s)
}

impl Trace {
    /// Reads a trace file.
    pub fn load(source: Source, path: &Path) -> Result<Trace, ConfigError> {
        let text = source.read(path)?;
        Trace::parse(&path.display().to_string(), &text)
    }

    /// Parses a trace's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Trace, ConfigError> {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| ConfigError::invalid(file, "header", "?", e.to_string()))?
            .iter()
            .map(str::to_string)
            .collect();
        let find = |names: [&str; 2]| header.iter().position(|h| names.contains(&h.as_str()));
        let columns = (
            find(["arrival_s", "TIMESTAMP"]),
            find(["prompt_tokens", "ContextTokens"]),
            find(["output_tokens", "GeneratedTokens"]),
        );
        let (Some(at), Some(pc), Some(oc)) = columns else {
            return Err(ConfigError::invalid(
                file,
                "header",
                header.join(","),
                "columns arrival_s,prompt_tokens,output_tokens (or the Azure trace's \
                 TIMESTAMP,ContextTokens,GeneratedTokens)",
            ));
        };
        let stamped = header[at] == "TIMESTAMP";
        let mut requests = Vec::new();
        let mut origin = None;
        for row in reader.records() {
            let row = row.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                ConfigError::invalid(file, format!("line {line}"), "a row", e.to_string())
            })?;
            let line = row.position().map_or(0, |p| p.line());
            if requests.len() as u64 >= MAX_REQUESTS {
                return Err(ConfigError::invalid(
                    file,
                    format!("line {line}"),
                    "a row",
                    format!("at most {MAX_REQUESTS} requests"),
                ));
            }
            let cell = |c: usize| row.get(c).unwrap_or("");
            let arrival = if stamped {
                let s = timestamp_s(cell(at)).ok_or_else(|| {
                    ConfigError::invalid(
                        file,
                        format!("line {line}: TIMESTAMP"),
                        cell(at),
                        "a timestamp YYYY-MM-DD HH:MM:SS.fffffff",
                    )
                })?;
                s - *origin.get_or_insert(s)
            } else {
                cell(at)
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        ConfigError::invalid(
                            file,
                            format!("line {line}: {}", header[at]),
                            cell(at),
                            "an arrival time in seconds >= 0",
                        )
                    })?
            };
            let count = |c: usize| {
                cell(c)
                    .parse::<u64>()
                    .ok()
                    .filter(|v| (1..=MAX_REQUEST_TOKENS).contains(v))
                    .ok_or_else(|| {
                        ConfigError::invalid(
                            file,
                            format!("line {line}: {}", header[c]),
                            cell(c),
                            format!("a whole number of tokens from 1 to {MAX_REQUEST_TOKENS}"),
                        )
                    })
            };
            let (prompt_tokens, output_tokens) = (count(pc)?, count(oc)?);
            if let Some(last) = requests.last().map(|r: &Request| r.arrival_s) {
                if arrival < last {
                    return Err(ConfigError::invalid(
                        file,
                        format!("line {line}: {}", header[at]),
                        cell(at),
                        format!("arrivals in order (the row before arrives at {last} s)"),
                    ));
                }
            }
            requests.push(Request {
                arrival_s: arrival,
                prompt_tokens,
                output_tokens,
            });
        }
        if requests.is_empty() {
            return Err(ConfigError::invalid(
                file,
                "rows",
                0,
                "at least one request",
            ));
        }
        Ok(Trace {
            file: file.to_string(),
            requests,
        })
    }

    /// Its mean arrival rate: requests after the first over the span (requests per second;
    /// infinite when all arrive at once).
    pub fn rate_per_s(&self) -> f64 {
        let n = self.requests.len();
        let span = self.requests[n - 1].arrival_s - self.requests[0].arrival_s;
        if n < 2 || span <= 0.0 {
            f64::INFINITY
        } else {
            (n - 1) as f64 / span
        }
    }

    /// The trace replayed at `rate_per_s`: every gap scaled by its rate over `rate_per_s`.
    pub fn at_rate(&self, rate_per_s: f64) -> Vec<Request> {
        let own = self.rate_per_s();
        let first = self.requests[0].arrival_s;
        let scale = if own.is_finite() {
            own / rate_per_s
        } else {
            1.0
        };
        self.requests
            .iter()
            .map(|r| Request {
                arrival_s: (r.arrival_s - first) * scale,
                ..*r
            })
            .collect()
    }
}

/// Where requests come from: Poisson arrivals of the workload's lengths, a trace, or a
/// closed loop of clients (a benchmark client at a fixed concurrency, as AIPerf, genai-perf
/// and vLLM's benchmark run: each client sends its next request when its last completes).
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    Poisson {
        prompt_tokens: u64,
        output_tokens: u64,
        seed: u64,
    },
    Trace(Trace),
    Closed {
        clients: u64,
        prompt_tokens: u64,
        output_tokens: u64,
    },
}

impl Arrivals {
    /// `requests` arrivals at `rate_per_s` (a trace: all of its requests, its gaps scaled).
    pub fn at(&self, rate_per_s: f64, requests: u64) -> Vec<Request> {
        match self {
            Arrivals::Poisson {
                prompt_tokens,
                output_tokens,
                seed,
            } => poisson(rate_per_s, requests, *seed, *prompt_tokens, *output_tokens),
            Arrivals::Trace(t) => t.at_rate(rate_per_s),
            // The first request of each client at once; the rest when one completes.
            Arrivals::Closed {
                clients,
                prompt_tokens,
                output_tokens,
            } => (0..requests.min(MAX_REQUESTS))
                .map(|i| Request {
                    arrival_s: if i < *clients { 0.0 } else { f64::INFINITY },
                    prompt_tokens: *prompt_tokens,
                    output_tokens: *output_tokens,
                })
                .collect(),
        }
    }

    /// Every request at once (a swamped engine), `requests` of them (a trace: all).
    pub fn at_once(&self, requests: u64) -> Vec<Request> {
        let mut r = self.at(1.0, requests);
        for q in &mut r {
            q.arrival_s = 0.0;
        }
        r
    }

    /// The range of lengths the requests have.
    pub fn lengths(&self) -> Lengths {
        match self {
            Arrivals::Poisson {
                prompt_tokens,
                output_tokens,
                ..
            }
            | Arrivals::Closed {
                prompt_tokens,
                output_tokens,
                ..
            } => Lengths {
                prompt_min: *prompt_tokens,
                prompt_max: *prompt_tokens,
                total_max: prompt_tokens + output_tokens,
            },
            Arrivals::Trace(t) => Lengths {
                prompt_min: t
                    .requests
                    .iter()
                    .map(|r| r.prompt_tokens)
                    .min()
                    .unwrap_or(1),
                prompt_max: t
                    .requests
                    .iter()
                    .map(|r| r.prompt_tokens)
                    .max()
                    .unwrap_or(1),
                total_max: t
                    .requests
                    .iter()
                    .map(|r| r.prompt_tokens + r.output_tokens)
                    .max()
                    .unwrap_or(2),
            },
        }
    }

    /// What a report calls them.
    pub fn name(&self) -> String {
        match self {
            Arrivals::Poisson { seed, .. } => format!("Poisson, seed {seed}"),
            Arrivals::Trace(t) => format!("trace {}", t.file),
            Arrivals::Closed { clients, .. } => format!("{clients} clients in a closed loop"),
        }
    }
}

/// The range of request lengths an engine is priced for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Lengths {
    pub prompt_min: u64,
    pub prompt_max: u64,
    /// The longest prompt plus output.
    pub total_max: u64,
}

impl From<&InferenceSpec> for Lengths {
    fn from(spec: &InferenceSpec) -> Lengths {
        Lengths {
            prompt_min: spec.prompt_tokens,
            prompt_max: spec.prompt_tokens,
            total_max: spec.prompt_tokens + spec.output_tokens,
        }
    }
}

/// The arrivals and the engine's policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Load {
    /// Mean arrival rate, requests per second.
    pub rate_per_s: f64,
    /// Requests simulated.
    pub requests: u64,
    /// Seed of the arrival times.
    pub seed: u64,
    /// Most sequences running at once, per replica.
    pub max_batch: u64,
    /// Most tokens one step takes (prompt tokens; with chunked prefill, prompt chunks and
    /// decoding sequences together).
    pub max_step_tokens: u64,
    /// Tokens per KV-cache block.
    pub block_tokens: u64,
    /// Share of device memory the engine may use (weights and KV cache).
    pub memory_utilization: f64,
    /// Mix prompt chunks into decode steps (Sarathi-Serve; vLLM V1).
    pub chunked_prefill: bool,
    /// Admit a request only when the cache holds all of it, prompt and output (TensorRT-LLM's
    /// GUARANTEED_NO_EVICT capacity policy): never preempts. Otherwise admission looks at
    /// the prompt and a full cache preempts (vLLM).
    pub no_evict: bool,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            rate_per_s: 1.0,
            requests: 1000,
            seed: 0,
            max_batch: 256,          // vLLM's max_num_seqs default
            max_step_tokens: 8192, // a step's token budget (vLLM's max_num_batched_tokens for 8K models)
            block_tokens: 16,      // vLLM's default block size
            memory_utilization: 0.9, // vLLM's gpu_memory_utilization default
            chunked_prefill: false,
            no_evict: false,
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
    /// The replicas' split: one strategy, or a prefill and a decode pool.
    pub layout: String,
    /// "Poisson, seed N" or "trace FILE".
    pub arrivals: String,
    pub load: Load,
    pub mean_prompt_tokens: f64,
    pub mean_output_tokens: f64,
    /// Output tokens per second from the first arrival to the last completion (a closed
    /// loop: in its steady state, see `requests_per_s`).
    pub output_tokens_per_s: f64,
    /// Requests completed per second over the same span (a closed loop: the rate its
    /// clients send at between the first and the last request sent on a completion; its
    /// latencies are of those requests, the first burst left out).
    pub requests_per_s: f64,
    pub ttft_s: Percentiles,
    /// Per request with more than one output token: (completion - first token) / (output - 1).
    pub tpot_s: Percentiles,
    pub end_to_end_s: Percentiles,
    /// Tokens one (decode) engine's KV cache holds (whole blocks: a replica's, or with
    /// pipeline stages each of its engines' share), and the most sequences that ran at once
    /// on one.
    pub kv_capacity_tokens: u64,
    pub most_running: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// A request of the mean prompt alone on an idle engine: its TTFT, for reference.
    pub idle_ttft_s: f64,
}

/// Points of a range for interpolation: `lo`, the powers of two between, `hi`.
fn anchors_between(lo: u64, hi: u64) -> Vec<u64> {
    let lo = lo.max(1);
    let mut a = vec![lo];
    a.extend(
        std::iter::successors(Some(1u64), |k| k.checked_mul(2))
            .skip_while(|&k| k <= lo)
            .take_while(|&k| k < hi),
    );
    if hi > lo {
        a.push(hi);
    }
    a
}

/// The index of the segment of sorted `xs` holding `x` and the fraction along it (clamped
/// to the ends).
fn segment(xs: &[u64], x: f64) -> (usize, f64) {
    if xs.len() < 2 {
        return (0, 0.0);
    }
    let i = xs
        .partition_point(|&a| (a as f64) < x)
        .clamp(1, xs.len() - 1);
    let (x0, x1) = (xs[i - 1] as f64, xs[i] as f64);
    (i - 1, ((x - x0) / (x1 - x0)).clamp(0.0, 1.0))
}

/// Step times from the model at anchors, interpolated.
#[derive(Debug, Clone)]
struct Costs {
    /// Prefill: batch anchors × prompt-length anchors, seconds (row-major by batch).
    ks: Vec<u64>,
    ps: Vec<u64>,
    prefill: Vec<f64>,
    /// Decode: batch anchors; the step at contexts `c0` and `c1` per anchor.
    bs: Vec<u64>,
    c0: f64,
    c1: f64,
    decode: Vec<(f64, f64)>,
}

impl Costs {
    /// A prefill step of `k` prompts of mean length `p`.
    fn prefill_s(&self, k: f64, p: f64) -> f64 {
        let (i, fk) = segment(&self.ks, k);
        let (j, fp) = segment(&self.ps, p);
        let n = self.ps.len();
        let at = |a: usize, b: usize| self.prefill[a.min(self.ks.len() - 1) * n + b.min(n - 1)];
        let lo = at(i, j) + (at(i, j + 1) - at(i, j)) * fp;
        let hi = at(i + 1, j) + (at(i + 1, j + 1) - at(i + 1, j)) * fp;
        lo + (hi - lo) * fk
    }

    /// A decode step of `b` sequences of mean context `context`: (the step, its part that
    /// grows with the context).
    fn decode_s(&self, b: f64, context: f64) -> (f64, f64) {
        let (i, f) = segment(&self.bs, b);
        let pick = |j: usize| self.decode[j.min(self.decode.len() - 1)];
        let (a0, z0) = pick(i);
        let (a1, z1) = pick(i + 1);
        let (a, z) = (a0 + (a1 - a0) * f, z0 + (z1 - z0) * f);
        let slope = ((z - a) / (self.c1 - self.c0)).max(0.0);
        let step = (a + slope * (context - self.c0)).max(0.0);
        (step, (slope * context).min(step))
    }
}

/// One request in an engine.
#[derive(Debug, Clone)]
struct Seq {
    index: usize,
    arrival: f64,
    prompt: u64,
    output: u64,
    first_token: f64,
    generated: u64,
    /// Tokens whose keys and values are in the cache.
    computed: u64,
    blocks: u64,
}

impl Seq {
    /// Tokens a prefill must compute before the next token: the prompt and what it had
    /// generated (a recomputation after preemption).
    fn target(&self) -> u64 {
        self.prompt + self.generated
    }

    /// Whether it decodes (its cache holds everything but the last token).
    fn decoding(&self) -> bool {
        self.generated >= 1 && self.computed + 1 == self.target()
    }
}

/// When each request got its first token and finished, and what the engines did.
struct Served {
    /// When each request was sent (a closed loop's when its client's last completed).
    arrival: Vec<f64>,
    first_token: Vec<f64>,
    done: Vec<f64>,
    steps: u64,
    preemptions: u64,
    most_running: u64,
}

impl Served {
    fn new(n: usize) -> Served {
        Served {
            arrival: vec![f64::NAN; n],
            first_token: vec![f64::NAN; n],
            done: vec![f64::NAN; n],
            steps: 0,
            preemptions: 0,
            most_running: 0,
        }
    }
}

/// One replica's engine for a served transformer under a strategy and a policy: its KV
/// capacity and step costs, priced once for any number of runs.
#[derive(Debug, Clone)]
pub struct Engine {
    workload: String,
    strategy: String,
    /// Replicas sharing the requests.
    replicas: u64,
    /// Engines per replica: a replica of `p` pipeline stages runs `p` engines, each with its
    /// own batch and a `p`-th of the cache, so that every stage works on one of them (vLLM's
    /// virtual engines); each engine's step is one batch's pass through all stages.
    engines: u64,
    /// Devices of one replica.
    replica_devices: u64,
    policy: Load,
    blocks_total: u64,
    most: u64,
    capacity_tokens: u64,
    /// KV bytes per token on each device of a replica.
    kv_bytes_per_token: f64,
    costs: Costs,
}

impl Engine {
    /// Prices the engine for requests of `lengths` (the arrival fields of `policy` are not
    /// used). Its `s.data` replicas share the requests.
    pub fn new(
        w: &Transformer,
        lengths: Lengths,
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
        if w.speculative.is_some() {
            return Err(fail(
                "speculative decoding under load (a draft's steps among other sequences' \
                 prefills and chunks) is not modelled; `predict` prices a static batch of it"
                    .into(),
            ));
        }
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
        let Lengths {
            prompt_min,
            prompt_max,
            total_max,
        } = lengths;
        // KV capacity of the replica's fullest device, in tokens of whole blocks.
        // Priced as a prompt of total_max and one output token: a cache of total_max + 1.
        let one = price(1, total_max)?;
        let per_token = one.kv_cache_bytes / (total_max + 1) as f64 / s.pipeline as f64;
        let free = one.memory_capacity_bytes * load.memory_utilization - one.weights_bytes;
        // The replica's cache, split over its pipeline engines.
        let engines = s.pipeline.max(1);
        let capacity_tokens = if per_token > 0.0 && free > 0.0 {
            ((free / per_token) as u64).min(u64::MAX / 2) / engines / load.block_tokens
                * load.block_tokens
        } else {
            0
        };
        let blocks_total = capacity_tokens / load.block_tokens;
        let blocks_for = |tokens: u64| tokens.div_ceil(load.block_tokens);
        if blocks_for(total_max) > blocks_total {
            return Err(fail(format!(
                "one request of {total_max} tokens needs {} KV blocks of {}; the devices hold {} \
                 after the weights at {:.0}% of their memory{}",
                blocks_for(total_max),
                load.block_tokens,
                blocks_total,
                load.memory_utilization * 100.0,
                if engines > 1 {
                    format!(" (for each of the replica's {engines} pipeline engines)")
                } else {
                    String::new()
                }
            )));
        }
        // The most sequences that can run: the batch cap, and the shortest prompts in the
        // cache (admission looks at what a request needs now; a cache that fills as they
        // decode preempts).
        let most = load
            .max_batch
            .min(blocks_total / blocks_for(prompt_min + 1).max(1))
            .max(1);
        // Prefill anchors: up to the most prompts one step holds; lengths from a short chunk
        // (chunked prefill) to the longest recomputation or step.
        let p_lo = if load.chunked_prefill {
            prompt_min.min(16)
        } else {
            prompt_min
        };
        let p_hi = total_max.max(prompt_max).max(if load.chunked_prefill {
            load.max_step_tokens
        } else {
            0
        });
        let ks = anchors_between(1, most.min((load.max_step_tokens / p_lo.max(1)).max(1)));
        let ps = anchors_between(p_lo, p_hi);
        let mut prefill = Vec::with_capacity(ks.len() * ps.len());
        for &k in &ks {
            for &p in &ps {
                prefill.push(price(k, p)?.time_to_first_token_s);
            }
        }
        let bs = anchors_between(1, most);
        let (c0, c1) = (prompt_min, total_max.max(prompt_min + 1));
        let mut decode = Vec::with_capacity(bs.len());
        for &b in &bs {
            decode.push((
                price(b, c0)?.time_per_output_token_s,
                price(b, c1)?.time_per_output_token_s,
            ));
        }
        Ok(Engine {
            workload: w.name.clone(),
            strategy: Strategy { data: 1, ..*s }.to_string(),
            replicas: s.data,
            engines,
            replica_devices: s.tensor * s.pipeline * s.context.max(1),
            policy: *policy,
            blocks_total,
            most,
            capacity_tokens,
            kv_bytes_per_token: per_token,
            costs: Costs {
                ks,
                ps,
                prefill,
                bs,
                c0: c0 as f64,
                c1: c1 as f64,
                decode,
            },
        })
    }

    /// The same engine with `replicas` replicas.
    pub fn with_replicas(mut self, replicas: u64) -> Engine {
        self.replicas = replicas.max(1);
        self
    }

    /// The same engine under a lower batch cap (the costs priced for the higher one serve).
    pub fn capped(&self, max_batch: u64) -> Engine {
        let mut e = self.clone();
        e.policy.max_batch = max_batch.min(self.policy.max_batch);
        e.most = e.most.min(max_batch).max(1);
        e
    }

    /// Replicas, and devices per replica.
    pub fn replicas(&self) -> (u64, u64) {
        (self.replicas, self.replica_devices)
    }

    /// The policy it runs.
    pub fn policy(&self) -> &Load {
        &self.policy
    }

    /// The most sequences one replica runs at once.
    pub fn most(&self) -> u64 {
        self.most
    }

    /// A request of `prompt` tokens alone: its time to first token.
    pub fn idle_ttft_s(&self, prompt: u64) -> f64 {
        self.costs.prefill_s(1.0, prompt as f64)
    }

    /// Steady-state goodput of the replicas for requests of `prompt` and `output` tokens
    /// within `slo`, as a fluid approximation (smooth in the design, for the budget
    /// optimizer; [`Deployment::goodput`] simulates). With `b` sequences decoding, a decode
    /// step takes `d(b)` at the mean context and a prompt `c` (a prefill step of the `k`
    /// prompts that arrive during one, over `k`); arrivals at `λ` spend `λ c` of the time in
    /// prefill, so each decode round takes `τ = d(b) + b c / (output - 1)` and Little's law
    /// gives `λ(b) = b / ((output - 1) d(b) + b c)`. TPOT is `τ`, TTFT a decode step plus
    /// the prefill. Prompts alone (one output token) are priced in the batches the engine
    /// fills at the goodput: as many as a step holds. The largest `b` (continuous, from an
    /// occupancy below one to the batch cap and the cache) whose means keep the bounds gives
    /// the goodput; `Err` names the bound
    /// a lone sequence breaks. Means against p99 bounds: where a rare interruption decides
    /// the tail (a short output behind long prompts) the simulation finds less.
    pub fn steady_goodput(
        &self,
        slo: &Slo,
        prompt: u64,
        output: u64,
    ) -> Result<SteadyState, String> {
        let (p, r) = (prompt as f64, output.saturating_sub(1) as f64);
        let k_max = *self.costs.ks.last().unwrap_or(&1) as f64;
        // Prompts alone (one output token): arrivals at the goodput queue for the prefill
        // steps, which the engine fills with the waiting prompts, as many as a step holds
        // (without decodes to pace them, Little's law leaves the batch undetermined).
        let k_full = (self.policy.max_step_tokens as f64 / p.max(1.0))
            .floor()
            .clamp(1.0, k_max);
        let at = |b: f64| {
            let d = self.costs.decode_s(b.max(1.0), p + r / 2.0).0;
            // With decodes, the batch arriving during a prefill settles in a few rounds;
            // prompts alone take the full one at once.
            let (mut k, rounds) = if r > 0.0 { (1.0, 6) } else { (k_full, 1) };
            let (mut rate, mut tpot, mut ttft) = (0.0, d, d);
            for _ in 0..rounds {
                let c = self.costs.prefill_s(k, p) / k;
                if r > 0.0 {
                    rate = b / (r * d + b * c);
                    tpot = d + b * c / r;
                } else {
                    rate = 1.0 / c;
                    tpot = 0.0;
                }
                ttft = d + self.costs.prefill_s(k, p);
                if r > 0.0 {
                    k = (rate * tpot.max(c)).clamp(1.0, k_max);
                }
            }
            SteadyState {
                batch: b,
                requests_per_s: rate * (self.replicas * self.engines) as f64,
                tpot_s: tpot,
                ttft_s: ttft,
            }
        };
        let keeps = |s: &SteadyState| s.tpot_s <= slo.tpot_p99_s && s.ttft_s <= slo.ttft_p99_s;
        // Light load (b -> 0): a decode step alone, and a prompt's prefill after one.
        let (d1, c1) = (
            self.costs.decode_s(1.0, p + r / 2.0).0,
            self.costs.prefill_s(1.0, p),
        );
        if r > 0.0 && d1 > slo.tpot_p99_s {
            return Err(format!(
                "TPOT {:.2} ms > {:.2} ms with one sequence",
                d1 * 1e3,
                slo.tpot_p99_s * 1e3
            ));
        }
        if d1 + c1 > slo.ttft_p99_s {
            return Err(format!(
                "TTFT {:.2} ms > {:.2} ms with one sequence",
                (d1 + c1) * 1e3,
                slo.ttft_p99_s * 1e3
            ));
        }
        // The batch the cache holds as sequences grow: half their output on average (all of
        // it reserved without eviction).
        let held = if self.policy.no_evict {
            p + r + 1.0
        } else {
            p + r / 2.0 + 1.0
        };
        let blocks_each = (held / self.policy.block_tokens as f64).ceil().max(1.0);
        let most = (self.most as f64)
            .min(self.blocks_total as f64 / blocks_each)
            .max(1.0);
        let top = at(most);
        if keeps(&top) {
            return Ok(top);
        }
        // Occupancy below one sequence is the share of time one decodes.
        let (mut lo, mut hi) = (0.0, most);
        for _ in 0..50 {
            let mid = 0.5 * (lo + hi);
            if keeps(&at(mid)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if lo <= 0.0 {
            return Err("no load keeps the SLO".into());
        }
        Ok(at(lo))
    }

    /// Runs `reqs` (sorted by arrival) on the replicas in turn; `first_token[i]` of requests
    /// that arrive prefilled (their KV cache shipped from a prefill pool) is given, else NaN.
    fn serve(
        &self,
        reqs: &[Request],
        prefilled: Option<&[f64]>,
        out: &mut Served,
    ) -> Result<(), FitError> {
        // Every engine of every replica takes requests in turn.
        let mut d = (self.replicas.max(1) * self.engines.max(1)) as usize;
        // A closed loop's clients start one idle request's time apart in turn, as a
        // benchmark ramps up (identical requests started at once would stay in lockstep in
        // a simulation without jitter).
        let staggered: Vec<Request>;
        let reqs = if reqs.iter().any(|r| r.arrival_s.is_infinite()) {
            // Each replica's clients stay with it: every replica needs one. A replica's
            // pipeline engines beyond its clients stand idle (one client: one engine).
            let clients = reqs.iter().filter(|r| r.arrival_s.is_finite()).count();
            let replicas = self.replicas.max(1) as usize;
            if clients < replicas {
                return Err(FitError {
                    strategy: self.strategy.clone(),
                    workload: self.workload.clone(),
                    message: format!(
                        "a closed loop of {clients} clients on {replicas} replicas: each replica \
                         needs a client of its own (at least {replicas})"
                    ),
                });
            }
            d = d.min(clients);
            let first: Vec<usize> = (0..reqs.len())
                .filter(|&i| reqs[i].arrival_s.is_finite())
                .collect();
            let per_replica = first.len().div_ceil(d).max(1) as f64;
            staggered = reqs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    if r.arrival_s.is_infinite() {
                        return *r;
                    }
                    let idle = self.idle_ttft_s(r.prompt_tokens)
                        + r.output_tokens.saturating_sub(1) as f64
                            * self
                                .costs
                                .decode_s(1.0, (r.prompt_tokens + r.output_tokens / 2) as f64)
                                .0;
                    let k = (i / d) as f64;
                    Request {
                        arrival_s: r.arrival_s + idle * k / per_replica,
                        ..*r
                    }
                })
                .collect();
            &staggered[..]
        } else {
            reqs
        };
        for j in 0..d.min(reqs.len()) {
            let mine: Vec<usize> = (j..reqs.len()).step_by(d).collect();
            self.replica(reqs, &mine, prefilled, out)?;
        }
        Ok(())
    }

    /// One replica serving the requests `mine` of `reqs`.
    fn replica(
        &self,
        reqs: &[Request],
        mine: &[usize],
        prefilled: Option<&[f64]>,
        out: &mut Served,
    ) -> Result<(), FitError> {
        let fail = |message: String| FitError {
            strategy: self.strategy.clone(),
            workload: self.workload.clone(),
            message,
        };
        let load = &self.policy;
        let (most, blocks_total) = (self.most as usize, self.blocks_total);
        let blocks_for = |tokens: u64| tokens.div_ceil(load.block_tokens);
        let costs = &self.costs;
        let mut seqs: Vec<Seq> = mine
            .iter()
            .map(|&i| {
                let r = &reqs[i];
                let first = prefilled.map_or(f64::NAN, |f| f[i]);
                let ready = first.is_finite();
                Seq {
                    index: i,
                    arrival: r.arrival_s,
                    prompt: r.prompt_tokens,
                    output: r.output_tokens,
                    first_token: first,
                    generated: u64::from(ready),
                    computed: if ready { r.prompt_tokens } else { 0 },
                    blocks: 0,
                }
            })
            .collect();
        for q in &seqs {
            if blocks_for(q.prompt + q.output) > blocks_total {
                return Err(fail(format!(
                    "a request of {} tokens needs {} KV blocks of {}; a replica holds {}",
                    q.prompt + q.output,
                    blocks_for(q.prompt + q.output),
                    load.block_tokens,
                    blocks_total
                )));
            }
        }
        let mut waiting: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let mut running: Vec<usize> = Vec::new();
        let (mut next, mut now, mut used, mut finished) = (0usize, 0.0f64, 0u64, 0usize);
        // Every request is prefilled (in chunks of at most a step's tokens) and decoded
        // output - 1 times, plus recomputations.
        let budget = load.max_step_tokens.max(1);
        let tokens: u64 = seqs
            .iter()
            .map(|q| q.output + 2 + (q.prompt + q.output).div_ceil(budget))
            .sum();
        let step_cap = tokens.saturating_mul(4).saturating_add(1000);
        let mut steps = 0u64;
        let finish = |q: &mut Seq, now: f64, used: &mut u64, out: &mut Served| {
            *used -= q.blocks;
            q.blocks = 0;
            out.done[q.index] = now;
            out.first_token[q.index] = q.first_token;
            out.arrival[q.index] = q.arrival;
        };
        // A closed loop's requests not yet sent (arriving at infinity), released in order as
        // requests complete.
        let mut unsent = seqs
            .iter()
            .position(|q| q.arrival.is_infinite())
            .unwrap_or(seqs.len());
        while finished < seqs.len() {
            if steps > step_cap {
                return Err(fail(format!(
                    "the engine made no progress in {step_cap} steps ({} preemptions)",
                    out.preemptions
                )));
            }
            while next < seqs.len() && seqs[next].arrival <= now {
                waiting.push_back(next);
                next += 1;
            }
            if waiting.is_empty() && running.is_empty() {
                now = seqs[next].arrival;
                continue;
            }
            // Requests whose cache arrived from a prefill pool join without a prefill.
            while let Some(&r) = waiting.front() {
                let need = if load.no_evict {
                    blocks_for(seqs[r].prompt + seqs[r].output)
                } else {
                    blocks_for(seqs[r].computed + 1)
                };
                if !(seqs[r].decoding() && running.len() < most && need <= blocks_total - used) {
                    break;
                }
                seqs[r].blocks = need;
                used += need;
                running.push(r);
                waiting.pop_front();
            }
            steps += 1;
            // With chunked prefill the running sequences go first (preempting the newest when
            // their next tokens need more blocks than are free), then new requests if nothing
            // was preempted (vLLM V1). Without, a prefill of the waiting requests that fit,
            // else a decode step that preempts as it must (vLLM V0).
            let mut preempted = 0;
            if load.chunked_prefill {
                preempted = preempt(
                    &mut seqs,
                    &mut running,
                    &mut waiting,
                    &mut used,
                    blocks_total,
                    load.block_tokens,
                );
                out.preemptions += preempted;
            }
            // This step's prompt work: (sequence, tokens).
            let mut chunks: Vec<(usize, u64)> = Vec::new();
            let decodes: Vec<usize> = if load.chunked_prefill {
                decoding(&seqs, &running)
            } else {
                Vec::new()
            };
            let mut budget = load.max_step_tokens.saturating_sub(decodes.len() as u64);
            if load.chunked_prefill {
                for &r in &running {
                    let q = &seqs[r];
                    if !q.decoding() && budget > 0 {
                        let c = (q.target() - q.computed).min(budget);
                        chunks.push((r, c));
                        budget -= c;
                    }
                }
            }
            // Admit the oldest waiting requests that fit (whole prompts without chunking:
            // at least one, whatever its length), keeping vLLM's watermark of 1% of the
            // blocks free while others run.
            let watermark = blocks_total / 100;
            // The decodes of this step (chunked) take their next blocks first.
            let decode_need: u64 = decodes
                .iter()
                .map(|&r| blocks_for(seqs[r].computed + 2).saturating_sub(seqs[r].blocks))
                .sum();
            let mut free = (blocks_total - used).saturating_sub(decode_need);
            while let (0, Some(&r)) = (preempted, waiting.front()) {
                let q = &seqs[r];
                // Without eviction, the whole request's blocks up front.
                let need = if load.no_evict {
                    blocks_for(q.prompt + q.output)
                } else {
                    blocks_for(q.target() + 1)
                };
                let tokens = if load.chunked_prefill {
                    q.target().min(budget)
                } else {
                    q.target()
                };
                let reserve = if running.is_empty() { 0 } else { watermark };
                let fits = !q.decoding()
                    && running.len() < most
                    && need + reserve <= free
                    && tokens > 0
                    && (tokens <= budget || chunks.is_empty() && !load.chunked_prefill);
                if !fits {
                    break;
                }
                free -= need;
                used += need;
                budget = budget.saturating_sub(tokens);
                seqs[r].blocks = need;
                chunks.push((r, tokens));
                running.push(r);
                waiting.pop_front();
            }
            let decodes: Vec<usize> = if load.chunked_prefill {
                decodes
            } else if chunks.is_empty() {
                out.preemptions += preempt(
                    &mut seqs,
                    &mut running,
                    &mut waiting,
                    &mut used,
                    blocks_total,
                    load.block_tokens,
                );
                decoding(&seqs, &running)
            } else {
                Vec::new()
            };
            out.most_running = out.most_running.max(running.len() as u64);
            if chunks.is_empty() && decodes.is_empty() {
                // Nothing fits: wait for the next arrival (a cache held by prefills cannot
                // free itself).
                match seqs.get(next) {
                    Some(q) if running.is_empty() => {
                        now = now.max(q.arrival);
                        continue;
                    }
                    _ => {
                        return Err(fail(
                            "the engine stalled: nothing it holds can run".to_string(),
                        ))
                    }
                }
            }
            let prompt_tokens: u64 = chunks.iter().map(|c| c.1).sum();
            let b = decodes.len() as f64;
            let context = decodes
                .iter()
                .map(|&r| (seqs[r].computed + 1) as f64)
                .sum::<f64>()
                / b.max(1.0);
            let k = chunks.len() as f64;
            now += if decodes.is_empty() {
                costs.prefill_s(k, prompt_tokens as f64 / k)
            } else if chunks.is_empty() {
                costs.decode_s(b, context).0
            } else {
                // The weights once for every token, plus the decodes' KV reads.
                costs.prefill_s(1.0, prompt_tokens as f64 + b) + costs.decode_s(b, context).1
            };
            for &r in &decodes {
                let q = &mut seqs[r];
                q.computed += 1;
                q.generated += 1;
                let blocks = blocks_for(q.computed + 1).max(q.blocks);
                used += blocks - q.blocks;
                q.blocks = blocks;
                if q.generated >= q.output {
                    finish(q, now, &mut used, out);
                    finished += 1;
                }
            }
            for &(r, c) in &chunks {
                let q = &mut seqs[r];
                q.computed += c;
                if q.computed == q.target() {
                    q.generated += 1;
                    if q.first_token.is_nan() {
                        q.first_token = now;
                    }
                    if !load.no_evict {
                        let blocks = blocks_for(q.computed + 1);
                        used -= q.blocks - blocks.min(q.blocks);
                        q.blocks = blocks.min(q.blocks);
                    }
                    if q.generated >= q.output {
                        finish(q, now, &mut used, out);
                        finished += 1;
                    }
                }
            }
            let before = running.len();
            running.retain(|&r| out.done[seqs[r].index].is_nan());
            debug_assert!(used <= blocks_total, "{used} of {blocks_total} blocks");
            for _ in running.len()..before {
                if unsent < seqs.len() {
                    seqs[unsent].arrival = now;
                    unsent += 1;
                }
            }
        }
        out.steps += steps;
        Ok(())
    }
}

/// A replica's fluid steady state ([`Engine::steady_goodput`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SteadyState {
    /// Sequences decoding at once.
    pub batch: f64,
    /// All replicas.
    pub requests_per_s: f64,
    pub tpot_s: f64,
    pub ttft_s: f64,
}

/// The running sequences that decode this step (their prompts done).
fn decoding(seqs: &[Seq], running: &[usize]) -> Vec<usize> {
    running
        .iter()
        .copied()
        .filter(|&r| seqs[r].decoding())
        .collect()
}

/// Preempts the newest running sequences (back to the front of the queue, their cache
/// dropped for recomputation) while the decoding ones' next tokens need more blocks than
/// are free; how many.
fn preempt(
    seqs: &mut [Seq],
    running: &mut Vec<usize>,
    waiting: &mut std::collections::VecDeque<usize>,
    used: &mut u64,
    blocks_total: u64,
    block_tokens: u64,
) -> u64 {
    let blocks_for = |tokens: u64| tokens.div_ceil(block_tokens);
    let mut count = 0;
    loop {
        let need: u64 = running
            .iter()
            .filter(|&&r| seqs[r].decoding())
            .map(|&r| blocks_for(seqs[r].computed + 2).saturating_sub(seqs[r].blocks))
            .sum();
        if need <= blocks_total - *used || running.len() <= 1 {
            return count;
        }
        let r = running.pop().expect("more than one running");
        let q = &mut seqs[r];
        *used -= q.blocks;
        q.blocks = 0;
        q.computed = 0;
        waiting.push_front(r);
        count += 1;
    }
}

/// Replicas of one engine, or a prefill pool and a decode pool with the KV cache shipped
/// between them.
#[derive(Debug, Clone)]
pub enum Deployment {
    Colocated(Engine),
    Disaggregated {
        prefill: Engine,
        decode: Box<Engine>,
        /// The link a prefill device ships its part of a prompt's cache over.
        transfer: GroupLink,
    },
}

impl Deployment {
    /// Its layout: "t2-d1-p1 x4" (a replica's split and the replicas), or "prefill
    /// t2-d1-p1 x2 + decode t4-d1-p1 x1".
    pub fn layout(&self) -> String {
        match self {
            Deployment::Colocated(e) => format!("{} x{}", e.strategy, e.replicas),
            Deployment::Disaggregated {
                prefill, decode, ..
            } => format!(
                "prefill {} x{} + decode {} x{}",
                prefill.strategy, prefill.replicas, decode.strategy, decode.replicas
            ),
        }
    }

    /// Devices it uses.
    pub fn devices(&self) -> u64 {
        match self {
            Deployment::Colocated(e) => e.replicas * e.replica_devices,
            Deployment::Disaggregated {
                prefill, decode, ..
            } => {
                prefill.replicas * prefill.replica_devices
                    + decode.replicas * decode.replica_devices
            }
        }
    }

    fn serving_engine(&self) -> &Engine {
        match self {
            Deployment::Colocated(e) => e,
            Deployment::Disaggregated { decode, .. } => decode,
        }
    }

    /// Seconds to ship a prompt of `prompt` tokens' cache from the prefill pool.
    pub fn transfer_s(&self, prompt: u64) -> f64 {
        match self {
            Deployment::Colocated(_) => 0.0,
            Deployment::Disaggregated {
                prefill, transfer, ..
            } => transfer.time(
                Collective::PointToPoint,
                prefill.kv_bytes_per_token * prompt as f64,
            ),
        }
    }

    /// Each request's times when `reqs` (sorted by arrival) are served.
    fn serve_all(&self, reqs: &[Request]) -> Result<Served, FitError> {
        let n = reqs.len();
        let mut out = Served::new(n);
        match self {
            Deployment::Colocated(e) => e.serve(reqs, None, &mut out)?,
            Deployment::Disaggregated {
                prefill, decode, ..
            } => {
                if reqs.iter().any(|r| r.arrival_s.is_infinite()) {
                    return Err(FitError {
                        strategy: self.layout(),
                        workload: decode.workload.clone(),
                        message: "a closed loop of clients is simulated on colocated replicas \
                                  only"
                            .into(),
                    });
                }
                // The prefill pool makes each first token and nothing else.
                let firsts: Vec<Request> = reqs
                    .iter()
                    .map(|r| Request {
                        output_tokens: 1,
                        ..*r
                    })
                    .collect();
                let mut pre = Served::new(n);
                prefill.serve(&firsts, None, &mut pre)?;
                // Then the cache crosses to the decode pool, in the order it lands there.
                let mut order: Vec<usize> = (0..n).filter(|&i| reqs[i].output_tokens > 1).collect();
                let lands: Vec<f64> = (0..n)
                    .map(|i| pre.first_token[i] + self.transfer_s(reqs[i].prompt_tokens))
                    .collect();
                order.sort_by(|&a, &b| lands[a].total_cmp(&lands[b]).then(a.cmp(&b)));
                let moved: Vec<Request> = order
                    .iter()
                    .map(|&i| Request {
                        arrival_s: lands[i],
                        ..reqs[i]
                    })
                    .collect();
                let firsts_moved: Vec<f64> = order.iter().map(|&i| pre.first_token[i]).collect();
                let mut dec = Served::new(moved.len());
                decode.serve(&moved, Some(&firsts_moved), &mut dec)?;
                out.arrival = pre.arrival.clone();
                out.first_token = pre.first_token.clone();
                out.done = pre.done.clone();
                for (k, &i) in order.iter().enumerate() {
                    out.done[i] = dec.done[k];
                }
                out.steps = pre.steps + dec.steps;
                out.preemptions = pre.preemptions + dec.preemptions;
                out.most_running = dec.most_running;
            }
        }
        Ok(out)
    }

    /// Serves `reqs` (sorted by arrival).
    pub fn run(
        &self,
        reqs: &[Request],
        arrivals: &str,
        load: Load,
    ) -> Result<LoadReport, FitError> {
        let n = reqs.len();
        let out = self.serve_all(reqs)?;
        // A closed loop is measured in its steady state: the requests sent as others
        // completed (not the first burst), at the rate they were sent (one per completion
        // from the first to the last send, before the clients drain).
        let closed: Vec<usize> = (0..n)
            .filter(|&i| reqs[i].arrival_s.is_infinite())
            .collect();
        let measured: Vec<usize> = if closed.len() >= 2 {
            closed
        } else {
            (0..n).collect()
        };
        let m = measured.len();
        let outputs: u64 = measured.iter().map(|&i| reqs[i].output_tokens).sum();
        let prompts: u64 = measured.iter().map(|&i| reqs[i].prompt_tokens).sum();
        let sent = |f: fn(f64, f64) -> f64, from: f64| {
            measured.iter().map(|&i| out.arrival[i]).fold(from, f)
        };
        let window = sent(f64::max, 0.0) - sent(f64::min, f64::INFINITY);
        let requests_per_s = if m < n && window > 0.0 {
            (m - 1) as f64 / window
        } else {
            // From the first request sent to the last completion (a closed loop whose
            // measured requests were all sent at once: theirs).
            let first = sent(f64::min, f64::INFINITY);
            let first = if first.is_finite() { first } else { 0.0 };
            let last = measured.iter().map(|&i| out.done[i]).fold(0.0, f64::max);
            m as f64 / (last - first).max(f64::MIN_POSITIVE)
        };
        let mut ttft: Vec<f64> = measured
            .iter()
            .map(|&i| out.first_token[i] - out.arrival[i])
            .collect();
        let mut tpot: Vec<f64> = measured
            .iter()
            .copied()
            .filter(|&i| reqs[i].output_tokens > 1)
            .map(|i| (out.done[i] - out.first_token[i]) / (reqs[i].output_tokens - 1) as f64)
            .collect();
        let mut e2e: Vec<f64> = measured
            .iter()
            .map(|&i| out.done[i] - out.arrival[i])
            .collect();
        let engine = self.serving_engine();
        let mean_prompt = prompts as f64 / m.max(1) as f64;
        let mean_output = outputs as f64 / m.max(1) as f64;
        let idle_ttft_s = match self {
            Deployment::Colocated(e) => e.idle_ttft_s(mean_prompt.round() as u64),
            Deployment::Disaggregated { prefill, .. } => {
                prefill.idle_ttft_s(mean_prompt.round() as u64)
            }
        };
        Ok(LoadReport {
            workload: engine.workload.clone(),
            layout: self.layout(),
            arrivals: arrivals.to_string(),
            load: Load {
                requests: n as u64,
                ..load
            },
            mean_prompt_tokens: mean_prompt,
            mean_output_tokens: mean_output,
            output_tokens_per_s: requests_per_s * mean_output,
            requests_per_s,
            ttft_s: Percentiles::of(&mut ttft),
            tpot_s: Percentiles::of(&mut tpot),
            end_to_end_s: Percentiles::of(&mut e2e),
            kv_capacity_tokens: engine.capacity_tokens,
            most_running: out.most_running,
            preemptions: out.preemptions,
            steps: out.steps,
            idle_ttft_s,
        })
    }

    /// `requests` of `arrivals` at `rate_per_s`.
    pub fn run_at(
        &self,
        arrivals: &Arrivals,
        rate_per_s: f64,
        requests: u64,
    ) -> Result<LoadReport, FitError> {
        let reqs = arrivals.at(rate_per_s, requests);
        let load = Load {
            // A closed loop has no rate of its own.
            rate_per_s: if matches!(arrivals, Arrivals::Closed { .. }) {
                0.0
            } else {
                rate_per_s
            },
            seed: match arrivals {
                Arrivals::Poisson { seed, .. } => *seed,
                Arrivals::Trace(_) | Arrivals::Closed { .. } => 0,
            },
            ..*self.serving_engine().policy()
        };
        self.run(&reqs, &arrivals.name(), load)
    }

    /// Requests per second it serves swamped: every request sent at once, the completions
    /// counted while a queue keeps every engine full. [`saturated_rate`] leaves out the ramp
    /// (the first batches' prompts, and a prefill pool's head start on its decode pool) and
    /// the drain (the last batches finishing with no one to replace them).
    pub fn capacity_requests_per_s(&self, arrivals: &Arrivals) -> Result<f64, FitError> {
        let e = self.serving_engine();
        let engines = e.replicas.max(1) * e.engines.max(1);
        let requests = (8 * e.most).clamp(64, 8192) * engines;
        let reqs = arrivals.at_once(requests);
        let served = self.serve_all(&reqs)?;
        Ok(saturated_rate(&served.done, served.most_running * engines))
    }

    /// The highest arrival rate whose run of `requests` keeps `slo`, found by bisection to
    /// 0.5% between 1% and 100% of the swamped capacity (no higher rate is sustained). `Ok(Err(why))`: not even 1% of
    /// capacity keeps it (the binding latency and its numbers).
    pub fn goodput(
        &self,
        arrivals: &Arrivals,
        slo: &Slo,
        requests: u64,
    ) -> Result<Result<Goodput, String>, FitError> {
        let capacity = self.capacity_requests_per_s(arrivals)?;
        self.goodput_below(arrivals, slo, requests, capacity)
    }

    /// [`Deployment::goodput`] with the capacity known.
    pub fn goodput_below(
        &self,
        arrivals: &Arrivals,
        slo: &Slo,
        requests: u64,
        capacity: f64,
    ) -> Result<Result<Goodput, String>, FitError> {
        let devices = self.devices();
        let mut lo = 0.01 * capacity;
        let low = self.run_at(arrivals, lo, requests)?;
        if let Err((_, why)) = slo.kept(&low) {
            return Ok(Err(format!(
                "{why} already at {lo:.3} requests/s (1% of the {capacity:.3} it serves swamped)"
            )));
        }
        // No rate above what it serves swamped is sustained, whatever a finite run's
        // latencies: the capacity binds where the SLO does not.
        let mut hi = capacity;
        let (mut at, mut binding) = (low, String::from("capacity"));
        let high = self.run_at(arrivals, hi, requests)?;
        match slo.kept(&high) {
            Ok(()) => {
                at = high;
                lo = hi;
            }
            Err((b, _)) => binding = b,
        }
        while hi / lo > 1.005 && lo < hi {
            let mid = (lo * hi).sqrt();
            let r = self.run_at(arrivals, mid, requests)?;
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
            breaks_at_requests_per_s: (binding != "capacity").then_some(hi),
            requests_per_s: lo,
            requests_per_s_per_device: lo / devices.max(1) as f64,
            output_tokens_per_s: lo * at.mean_output_tokens,
            capacity_requests_per_s: capacity,
            binding,
            at,
        }))
    }
}

/// The rate of completions of a swamped run (every request sent at time 0), `done` each
/// request's completion time, `slots` the most sequences its engines ran at once: from the
/// completion a quarter of the way in, over whole multiples of `slots` completions (a batch
/// that starts together ends together, so a window of whole batches is one of whole waves
/// wherever it starts), while more requests remain than the engines hold, so that a queue
/// keeps them full: the ramp and the drain left out. Where no whole batch fits that window
/// (requests that all fit at once, one batch of varied lengths draining), all of them over
/// the last completion.
fn saturated_rate(done: &[f64], slots: u64) -> f64 {
    let mut t: Vec<f64> = done.iter().copied().filter(|d| d.is_finite()).collect();
    t.sort_by(f64::total_cmp);
    let n = t.len();
    if n == 0 {
        return 0.0;
    }
    let slots = (slots as usize).max(1);
    // The completion after which no more than `slots` requests remain.
    let full = n.saturating_sub(slots + 1);
    let from = n / 4;
    let batches = full.saturating_sub(from) / slots;
    let to = from + batches * slots;
    if batches > 0 && t[to] - t[from] > 1e-9 * t[n - 1] {
        (to - from) as f64 / (t[to] - t[from])
    } else {
        n as f64 / t[n - 1].max(f64::MIN_POSITIVE)
    }
}

/// Simulates `load` (Poisson arrivals of `spec`'s lengths) on the `s.data` replicas of `s`.
pub fn simulate(
    w: &Transformer,
    spec: &InferenceSpec,
    arch: &Architecture,
    net: &Network,
    s: &Strategy,
    load: &Load,
) -> Result<LoadReport, FitError> {
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: load.seed,
    };
    let engine = Engine::new(w, arrivals.lengths(), arch, net, s, load)?;
    Deployment::Colocated(engine).run_at(&arrivals, load.rate_per_s, load.requests)
}

/// Latency bounds a deployment promises: the 99th percentiles of TTFT and TPOT, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_p99_s: f64,
    pub tpot_p99_s: f64,
}

/// The highest arrival rate a deployment serves within an SLO (goodput), and the run there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goodput {
    pub slo: Slo,
    /// The lowest rate the bisection ran that broke the binding bound, within 0.5% above
    /// the goodput (none where the capacity binds). A finite run's latencies need not rise
    /// with the rate everywhere, so a rate between the two may keep the SLO.
    pub breaks_at_requests_per_s: Option<f64>,
    /// All replicas, and per device of the deployment.
    pub requests_per_s: f64,
    pub requests_per_s_per_device: f64,
    pub output_tokens_per_s: f64,
    /// What it serves swamped, whatever the latency.
    pub capacity_requests_per_s: f64,
    /// The bound that stops a higher rate: "ttft", "tpot", or "capacity" (the SLO holds up
    /// to the rate it serves swamped, which no higher rate exceeds).
    pub binding: String,
    /// The run at the goodput rate.
    pub at: LoadReport,
}

impl Slo {
    /// Whether `r` keeps the bounds; else the bound it breaks most, with its numbers.
    pub fn kept(&self, r: &LoadReport) -> Result<(), (String, String)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swamped_run_is_counted_while_its_engines_are_full() {
        // Batches of 8 that take 1 s, 40 requests at once: completions at 1, 2, ..., 5 s.
        let waves: Vec<f64> = (0..40).map(|i| (i / 8 + 1) as f64).collect();
        assert!((saturated_rate(&waves, 8) - 8.0).abs() < 1e-12);
        // A pipeline that fills for 3 s before its first completion, then completes one
        // request every 0.1 s: the fill and a slow last request are left out.
        let mut piped: Vec<f64> = (0..100).map(|i| 3.0 + 0.1 * i as f64).collect();
        piped[99] = 20.0;
        assert!((saturated_rate(&piped, 10) - 10.0).abs() < 1e-9);
        // Every request in one batch: all of them over the last completion.
        assert!((saturated_rate(&[2.0; 16], 16) - 8.0).abs() < 1e-12);
        // One batch whose lengths vary drains, never full: its spread is not a rate.
        let spread: Vec<f64> = (0..20).map(|i| 1.0 + 0.01 * i as f64).collect();
        assert!((saturated_rate(&spread, 256) - 20.0 / 1.19).abs() < 1e-9);
        assert_eq!(saturated_rate(&[], 8), 0.0);
    }

    #[test]
    fn timestamps_count_days_across_months_and_years() {
        let a = timestamp_s("2023-11-16 18:15:46.6805900").unwrap();
        let b = timestamp_s("2023-11-17 18:15:46.6805900").unwrap();
        assert!((b - a - 86_400.0).abs() < 1e-6);
        let c = timestamp_s("2024-03-01 00:00:00").unwrap();
        let d = timestamp_s("2024-02-28 00:00:00").unwrap();
        assert!((c - d - 2.0 * 86_400.0).abs() < 1e-6, "2024 is a leap year");
        assert_eq!(timestamp_s("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(timestamp_s("2023-13-01 00:00:00"), None);
        assert_eq!(timestamp_s("2023-02-29 00:00:00"), None);
        assert!(timestamp_s("2024-02-29 00:00:00").is_some());
        assert_eq!(timestamp_s("yesterday"), None);
    }

    #[test]
    fn traces_are_read_in_either_format_and_refused_by_line() {
        let ours = Trace::parse(
            "t.csv",
            "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,1\n",
        )
        .unwrap();
        assert_eq!(ours.requests.len(), 2);
        assert_eq!(ours.requests[1].prompt_tokens, 20);
        assert!((ours.rate_per_s() - 2.0).abs() < 1e-12);
        let scaled = ours.at_rate(4.0);
        assert!((scaled[1].arrival_s - 0.25).abs() < 1e-12);
        let azure = Trace::parse(
            "azure.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n2023-11-16 18:15:47.0,396,109\n",
        )
        .unwrap();
        assert!((azure.requests[1].arrival_s - 0.5).abs() < 1e-9);
        for (text, says) in [
            (
                "arrival_s,prompt_tokens,output_tokens\n-1,10,5\n",
                "line 2: arrival_s = -1",
            ),
            (
                "arrival_s,prompt_tokens,output_tokens\n2,10,5\n1,10,5\n",
                "line 3: arrival_s = 1: arrivals in order",
            ),
            (
                "arrival_s,prompt_tokens,output_tokens\n0,0,5\n",
                "line 2: prompt_tokens = 0",
            ),
            (
                "arrival_s,prompt_tokens,output_tokens\n0,10,x\n",
                "line 2: output_tokens = x",
            ),
            (
                "time,prompt,output\n0,10,5\n",
                "header = time,prompt,output",
            ),
            ("arrival_s,prompt_tokens,output_tokens\n", "rows = 0"),
        ] {
            let e = Trace::parse("t.csv", text).unwrap_err().to_string();
            assert!(e.starts_with("t.csv: ") && e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn anchors_cover_the_range() {
        assert_eq!(anchors_between(1, 1), vec![1]);
        assert_eq!(anchors_between(1, 6), vec![1, 2, 4, 6]);
        assert_eq!(anchors_between(100, 1000), vec![100, 128, 256, 512, 1000]);
        assert_eq!(segment(&[1, 2, 4], 3.0), (1, 0.5));
        assert_eq!(segment(&[1, 2, 4], 9.0), (1, 1.0));
        assert_eq!(segment(&[1], 9.0), (0, 0.0));
    }
}
