//! `stackflow serve`: a served transformer under load ([`crate::distributed::load`]): Poisson
//! arrivals on a continuously batching engine, throughput and latency percentiles.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::distributed::{load_strategy, load_system, HostFlags};
use super::Outcome;
use crate::config::Source;
use crate::distributed::load::{
    Arrivals, Deployment, Engine, Goodput, Load, LoadReport, Slo, Trace, MAX_REQUESTS,
};
use crate::opt::search::serving::{pool_engine, transfer_link};
use crate::workload::inference::InferenceSpec;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A served transformer (its `inference:` gives the prompt and output lengths; the
    /// batch is the engine's to choose). Default: the embedded workloads/llama2-7b-serve.yaml.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// The system serving it.
    #[arg(long)]
    system: PathBuf,
    /// Devices (default: the system's, or the pools' with --prefill and --decode); part of a
    /// node where its fabric allows.
    #[arg(long)]
    devices: Option<u64>,
    /// One replica's split (t and p; d replicas share the arrivals in turn). Default: data
    /// parallelism over the devices (a replica per device).
    #[arg(long, allow_hyphen_values = true, conflicts_with_all = ["prefill", "decode"])]
    strategy: Option<String>,
    /// Disaggregated serving: the prefill pool's replica split and count (t, p and d, e.g.
    /// t2-d2); with --decode.
    #[arg(long, requires = "decode", allow_hyphen_values = true)]
    prefill: Option<String>,
    /// The decode pool's replica split and count; with --prefill.
    #[arg(long, requires = "prefill", allow_hyphen_values = true)]
    decode: Option<String>,
    /// Mean arrival rate, requests per second (Poisson; with --trace, the trace replayed at
    /// this rate). Required without --trace.
    #[arg(long)]
    rate: Option<f64>,
    /// A closed loop of this many clients instead of arrivals at a rate: each sends its next
    /// request when its last completes (AIPerf's and genai-perf's concurrency mode); the
    /// workload's lengths, --requests in all.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536),
          conflicts_with_all = ["rate", "trace", "slo_ttft_ms", "prefill"])]
    concurrency: Option<u64>,
    #[command(flatten)]
    engine: EngineFlags,
    #[command(flatten)]
    host: HostFlags,
    /// Print JSON (a stable interface for scripts) instead of tables.
    #[arg(long)]
    json: bool,
}

/// The engine flags' defaults, in one place for clap and for [`EngineFlags::given`].
struct EngineDefaults {
    requests: u64,
    seed: u64,
    max_batch: u64,
    max_step_tokens: u64,
    block_tokens: u64,
    memory_utilization: f64,
}

const ENGINE_DEFAULTS: EngineDefaults = EngineDefaults {
    requests: 1000,
    seed: 0,
    max_batch: 256,
    max_step_tokens: 8192,
    block_tokens: 16,
    memory_utilization: 0.9,
};

/// The arrivals, the engine's policy and the SLO: `serve`'s and a serving `search`'s.
#[derive(clap::Args, Debug)]
pub struct EngineFlags {
    /// Arrivals from a CSV file (arrival_s,prompt_tokens,output_tokens, or the Azure LLM
    /// inference trace's TIMESTAMP,ContextTokens,GeneratedTokens) instead of Poisson
    /// arrivals of the workload's lengths.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Requests simulated (Poisson arrivals; a trace runs all its rows).
    #[arg(long, default_value_t = ENGINE_DEFAULTS.requests, value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    pub requests: u64,
    /// Seed of the arrivals.
    #[arg(long, default_value_t = ENGINE_DEFAULTS.seed)]
    seed: u64,
    /// Most sequences running at once per engine (vLLM's max_num_seqs): a replica, or each of
    /// a pipelined replica's engines, one per stage.
    #[arg(long, default_value_t = ENGINE_DEFAULTS.max_batch, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_batch: u64,
    /// Most tokens one step takes (vLLM's max_num_batched_tokens): prompt tokens, and with
    /// --chunked-prefill decoding sequences too.
    #[arg(long, default_value_t = ENGINE_DEFAULTS.max_step_tokens, value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    max_step_tokens: u64,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = ENGINE_DEFAULTS.block_tokens)]
    block_tokens: u64,
    /// Share of device memory the engine uses for weights and KV cache (vLLM's
    /// gpu_memory_utilization).
    #[arg(long, default_value_t = ENGINE_DEFAULTS.memory_utilization)]
    memory_utilization: f64,
    /// Mix prompt chunks into decode steps up to --max-step-tokens (Sarathi-Serve, vLLM V1).
    #[arg(long)]
    pub chunked_prefill: bool,
    /// Admit a request only when the KV cache holds all of it, prompt and output
    /// (TensorRT-LLM's GUARANTEED_NO_EVICT): no preemption. Default: admit on the prompt and
    /// preempt the newest when the cache fills (vLLM).
    #[arg(long)]
    pub no_evict: bool,
    /// With --slo-tpot-ms: the p99 TTFT bound, ms. `serve` adds the goodput (the highest
    /// rate that keeps both bounds); a serving `search` ranks deployments by it. No rate
    /// keeping them exits 3.
    #[arg(long, requires = "slo_tpot_ms")]
    pub slo_ttft_ms: Option<f64>,
    /// With --slo-ttft-ms: the p99 TPOT bound, ms.
    #[arg(long, requires = "slo_ttft_ms")]
    slo_tpot_ms: Option<f64>,
}

/// The SLO of `--slo-ttft-ms` and `--slo-tpot-ms` (both ms), each checked.
impl EngineFlags {
    /// The engine flags set away from their defaults, or that take no default, by name: a
    /// search of a training workload refuses them (it runs no engine).
    pub fn given(&self) -> Vec<&'static str> {
        let d = &ENGINE_DEFAULTS;
        [
            (self.trace.is_some(), "--trace"),
            (self.requests != d.requests, "--requests"),
            (self.seed != d.seed, "--seed"),
            (self.max_batch != d.max_batch, "--max-batch"),
            (
                self.max_step_tokens != d.max_step_tokens,
                "--max-step-tokens",
            ),
            (self.block_tokens != d.block_tokens, "--block-tokens"),
            (
                self.memory_utilization != d.memory_utilization,
                "--memory-utilization",
            ),
            (self.chunked_prefill, "--chunked-prefill"),
            (self.no_evict, "--no-evict"),
            (self.slo_ttft_ms.is_some(), "--slo-ttft-ms"),
            (self.slo_tpot_ms.is_some(), "--slo-tpot-ms"),
        ]
        .into_iter()
        .filter_map(|(given, name)| given.then_some(name))
        .collect()
    }
}

pub fn slo_of((ttft_ms, tpot_ms): (f64, f64)) -> anyhow::Result<Slo> {
    for (flag, v) in [("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms)] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{flag} {v}: expected a latency bound in ms > 0");
        }
    }
    Ok(Slo {
        ttft_p99_s: ttft_ms * 1e-3,
        tpot_p99_s: tpot_ms * 1e-3,
    })
}

/// What [`EngineFlags`] say, checked.
pub struct EngineSetup {
    pub arrivals: Arrivals,
    pub policy: Load,
    pub slo: Option<Slo>,
}

impl EngineFlags {
    /// Checks the flags and reads the trace; `spec` gives Poisson arrivals their lengths, `t`
    /// the context every request must fit. `scaled`: the trace will be replayed at other rates
    /// (`--rate`, a goodput search), which needs two different arrival times. `searched`: a
    /// serving search, which tries deployments without chunked prefill whatever the flag.
    pub fn setup(
        &self,
        t: &crate::workload::Transformer,
        spec: &InferenceSpec,
        scaled: bool,
        searched: bool,
    ) -> anyhow::Result<EngineSetup> {
        if self.block_tokens == 0 || self.block_tokens > 1 << 20 {
            bail!(
                "--block-tokens {}: expected tokens per KV-cache block from 1 to 1048576",
                self.block_tokens
            );
        }
        if !(self.memory_utilization > 0.0 && self.memory_utilization <= 1.0) {
            bail!(
                "--memory-utilization {}: expected a share of device memory in (0, 1]",
                self.memory_utilization
            );
        }
        let slo = self
            .slo_ttft_ms
            .zip(self.slo_tpot_ms)
            .map(slo_of)
            .transpose()?;
        let arrivals = match &self.trace {
            Some(path) => {
                let trace = Trace::load(Source::Disk, path)?;
                if !trace.rate_per_s().is_finite() && (scaled || slo.is_some()) {
                    bail!(
                        "{}: every request arrives at the same time; a trace is replayed at \
                         other rates (--rate, a goodput within an SLO) by scaling its gaps, so \
                         that needs two different arrival times",
                        path.display()
                    );
                }
                // Each request's prompt and answer share the model's context, as a served
                // workload's must.
                if let Some((row, r)) = trace
                    .requests
                    .iter()
                    .enumerate()
                    .find(|(_, r)| r.prompt_tokens.saturating_add(r.output_tokens) > t.sequence)
                {
                    bail!(
                        "{}: request {} (data row {} after the header): prompt_tokens + \
                         output_tokens = {} + {}: at most the model's {}-token sequence ({})",
                        path.display(),
                        row + 1,
                        row + 1,
                        r.prompt_tokens,
                        r.output_tokens,
                        t.sequence,
                        t.name
                    );
                }
                Arrivals::Trace(trace)
            }
            None => Arrivals::Poisson {
                prompt_tokens: spec.prompt_tokens,
                output_tokens: spec.output_tokens,
                seed: self.seed,
            },
        };
        // A step takes at least one whole prompt without chunking: a budget the user sets
        // below the longest would not be kept, so it is refused (the default gives way).
        let longest = arrivals.lengths().prompt_max;
        if (searched || !self.chunked_prefill)
            && self.max_step_tokens != ENGINE_DEFAULTS.max_step_tokens
            && self.max_step_tokens < longest
        {
            bail!(
                "--max-step-tokens {}: at least the longest prompt ({longest} tokens) {}, where \
                 a step prefills whole prompts (vLLM refuses max_num_batched_tokens below the \
                 model's length likewise)",
                self.max_step_tokens,
                if searched {
                    "in a serving search, which also tries deployments without chunked prefill"
                } else {
                    "without --chunked-prefill"
                }
            );
        }
        let policy = Load {
            rate_per_s: 1.0,
            requests: self.requests,
            seed: self.seed,
            max_batch: self.max_batch,
            max_step_tokens: self.max_step_tokens,
            block_tokens: self.block_tokens,
            memory_utilization: self.memory_utilization,
            chunked_prefill: self.chunked_prefill,
            no_evict: self.no_evict,
        };
        Ok(EngineSetup {
            arrivals,
            policy,
            slo,
        })
    }
}

/// The embedded workload `serve` runs without `--workload`.
const DEFAULT_WORKLOAD: &str = "workloads/llama2-7b-serve.yaml";

/// The served transformer of `--workload` (default [`DEFAULT_WORKLOAD`]) and its file.
pub fn load_served(
    workload: Option<&Path>,
) -> anyhow::Result<(crate::workload::Workload, PathBuf)> {
    let (source, file) = match workload {
        Some(p) => (Source::Disk, p.to_path_buf()),
        None => (Source::Embedded, PathBuf::from(DEFAULT_WORKLOAD)),
    };
    let workload = crate::workload::Workload::load(source, &file)?;
    if workload.serving().is_none() {
        bail!(
            "{}: a served transformer (a transformer with `inference:`) is what `serve` runs",
            file.display()
        );
    }
    Ok((workload, file))
}

pub fn run(a: Args) -> anyhow::Result<Outcome> {
    if let Some(rate) = a.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate {rate}: expected requests per second > 0");
        }
    }
    let (workload, file) = load_served(a.workload.as_deref())?;
    let (t, spec) = workload.serving().expect("checked by load_served");
    let mut setup = a.engine.setup(t, spec, a.rate.is_some(), false)?;
    if let Some(clients) = a.concurrency {
        setup.arrivals = Arrivals::Closed {
            clients,
            prompt_tokens: spec.prompt_tokens,
            output_tokens: spec.output_tokens,
        };
    }
    let rate = match (a.rate, &setup.arrivals) {
        (Some(r), _) => r,
        (None, Arrivals::Closed { .. }) => f64::INFINITY,
        (None, Arrivals::Trace(trace)) => trace.rate_per_s(),
        (None, Arrivals::Poisson { .. }) => {
            bail!("--rate: required without --trace or --concurrency")
        }
    };
    let system = load_system(&a.system, None, &a.host)?;
    let arch = system.accelerator()?;
    super::check_precision(Path::new(&file), &workload, &arch)?;
    let lengths = setup.arrivals.lengths();
    let (deployment, devices) = match (&a.prefill, &a.decode) {
        (Some(p), Some(d)) => {
            let pool = |flag: &str, text: &str| -> anyhow::Result<(Engine, u64)> {
                let s = load_strategy(Some(text), &system, 1)
                    .with_context(|| format!("--{flag} {text}"))?;
                let devices = s.tensor * s.pipeline * s.context.max(1) * s.data;
                let e = pool_engine(t, lengths, &system, &arch, &s, &setup.policy)
                    .map_err(|e| anyhow::anyhow!("--{flag} {text}: {e}"))?;
                Ok((e, devices))
            };
            let (prefill, np) = pool("prefill", p)?;
            let (decode, nd) = pool("decode", d)?;
            let devices = np + nd;
            if let Some(n) = a.devices {
                if n != devices {
                    bail!("--devices {n}: the pools use {np} + {nd} = {devices}");
                }
            }
            let transfer = transfer_link(&system, &arch, devices).map_err(|e| {
                e.given_as(
                    "command line",
                    &format!("--prefill {p} --decode {d} (their devices, {np} + {nd})"),
                )
            })?;
            (
                Deployment::Disaggregated {
                    prefill,
                    decode: Box::new(decode),
                    transfer,
                },
                devices,
            )
        }
        _ => {
            let devices = a.devices.unwrap_or_else(|| system.default_devices());
            let net = system
                .network(&arch, devices)
                .map_err(|e| super::devices_given(e, a.devices))?;
            let strategy = load_strategy(a.strategy.as_deref(), &system, devices)?;
            let engine = Engine::new(t, lengths, &arch, &net, &strategy, &setup.policy)?;
            (Deployment::Colocated(engine), devices)
        }
    };
    let report = deployment.run_at(&setup.arrivals, rate, a.engine.requests)?;
    let goodput = setup
        .slo
        .map(|slo| deployment.goodput(&setup.arrivals, &slo, a.engine.requests))
        .transpose()?;
    if a.json {
        let mut value = serde_json::to_value(&report)?;
        value["devices"] = devices.into();
        value["kv_transfer_s_mean_prompt"] = deployment
            .transfer_s(report.mean_prompt_tokens.round() as u64)
            .into();
        if let Some(g) = &goodput {
            value["goodput"] = match g {
                Ok(g) => serde_json::to_value(g)?,
                Err(why) => serde_json::json!({ "infeasible": why }),
            };
        }
        super::print_json(&value)?;
    } else {
        print!("{}", render(&report, &deployment, devices));
        if let Some(g) = &goodput {
            print!("{}", render_goodput(g));
        }
    }
    Ok(match goodput {
        Some(Err(_)) => Outcome::NothingFeasible,
        _ => Outcome::Done,
    })
}

fn render_goodput(g: &Result<Goodput, String>) -> String {
    match g {
        // The SLO held at the rate it serves swamped, which no higher rate exceeds.
        Ok(g) if g.binding == "capacity" => format!(
            "goodput           {:.3} requests/s ({:.3} per device, {:.1} output tokens/s): the \
             rate it serves swamped, and runs of {} requests keep p99 TTFT {:.1} ms and p99 \
             TPOT {:.1} ms up to it; capacity binds\n",
            g.requests_per_s,
            g.requests_per_s_per_device,
            g.output_tokens_per_s,
            g.at.load.requests,
            g.slo.ttft_p99_s * 1e3,
            g.slo.tpot_p99_s * 1e3,
        ),
        Ok(g) => format!(
            "goodput           {:.3} requests/s ({:.3} per device, {:.1} output tokens/s) within \
             p99 TTFT {:.1} ms and p99 TPOT {:.1} ms; {} binds (broken at {:.3} requests/s; \
             swamped: {:.3} requests/s)\n",
            g.requests_per_s,
            g.requests_per_s_per_device,
            g.output_tokens_per_s,
            g.slo.ttft_p99_s * 1e3,
            g.slo.tpot_p99_s * 1e3,
            g.binding,
            g.breaks_at_requests_per_s.unwrap_or(f64::NAN),
            g.capacity_requests_per_s
        ),
        Err(why) => format!("goodput           none: {why}\n"),
    }
}

fn render(r: &LoadReport, d: &Deployment, devices: u64) -> String {
    let ms = |p: &crate::distributed::load::Percentiles| {
        format!(
            "p50 {:.2}  p90 {:.2}  p99 {:.2}  mean {:.2} ms",
            p.p50 * 1e3,
            p.p90 * 1e3,
            p.p99 * 1e3,
            p.mean * 1e3
        )
    };
    let transfer = match d {
        Deployment::Colocated(_) => String::new(),
        Deployment::Disaggregated { .. } => format!(
            "KV transfer       {:.2} ms for a prompt of {:.0} tokens (prefill pool to decode pool)\n",
            d.transfer_s(r.mean_prompt_tokens.round() as u64) * 1e3,
            r.mean_prompt_tokens
        ),
    };
    format!(
        "workload          {} ({:.0} prompt, {:.0} output tokens on average) under {} on {devices} devices\n\
         arrivals          {} requests{} ({}){}\n\
         throughput        {:.1} output tokens/s, {:.3} requests/s\n\
         TTFT              {}\n\
         TPOT              {}\n\
         end to end        {}\n\
         idle TTFT         {:.2} ms (one request alone)\n\
         engine            KV cache {} tokens per engine (one per replica's pipeline stage), at most {} running on one, {} preemptions, {} steps\n\
         {transfer}",
        r.workload,
        r.mean_prompt_tokens,
        r.mean_output_tokens,
        r.layout,
        r.load.requests,
        if r.load.rate_per_s.is_infinite() {
            " all at once".to_string()
        } else if r.load.rate_per_s > 0.0 {
            format!(" at {:.3}/s", r.load.rate_per_s)
        } else {
            String::new()
        },
        r.arrivals,
        if r.load.chunked_prefill {
            ", chunked prefill"
        } else {
            ""
        },
        r.output_tokens_per_s,
        r.requests_per_s,
        ms(&r.ttft_s),
        ms(&r.tpot_s),
        ms(&r.end_to_end_s),
        r.idle_ttft_s * 1e3,
        r.kv_capacity_tokens,
        r.most_running,
        r.preemptions,
        r.steps
    )
}
