//! `stackflow serve`: a served transformer under load ([`crate::distributed::load`]): Poisson
//! arrivals on a continuously batching engine, throughput and latency percentiles.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::distributed::{load_strategy, load_system, HostFlags};
use super::Outcome;
use crate::config::Source;
use crate::distributed::load::{Engine, Goodput, Load, LoadReport, Slo, MAX_REQUESTS};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A served transformer (its `inference:` gives the prompt and output lengths; the
    /// batch is the engine's to choose). Default: the embedded workloads/llama2-7b-serve.yaml.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// The system serving it.
    #[arg(long)]
    system: PathBuf,
    /// Devices (default: the system's); part of a node where its fabric allows.
    #[arg(long)]
    devices: Option<u64>,
    /// One replica's split (t and p; d replicas share the arrivals). Default: data
    /// parallelism over the devices (a replica per device).
    #[arg(long, allow_hyphen_values = true)]
    strategy: Option<String>,
    /// Mean arrival rate, requests per second (Poisson).
    #[arg(long)]
    rate: f64,
    /// Requests simulated.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    requests: u64,
    /// Seed of the arrivals.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most sequences running at once (vLLM's max_num_seqs).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_batch: u64,
    /// Most prompt tokens one prefill step takes (vLLM's max_num_batched_tokens).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    max_step_tokens: u64,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = 16)]
    block_tokens: u64,
    /// Share of device memory the engine uses for weights and KV cache (vLLM's
    /// gpu_memory_utilization).
    #[arg(long, default_value_t = 0.9)]
    memory_utilization: f64,
    /// With --slo-tpot-ms: the p99 TTFT bound, ms; the report adds the goodput (the highest
    /// rate that keeps both bounds) and exits 3 when no rate does.
    #[arg(long, requires = "slo_tpot_ms")]
    slo_ttft_ms: Option<f64>,
    /// With --slo-ttft-ms: the p99 TPOT bound, ms.
    #[arg(long, requires = "slo_ttft_ms")]
    slo_tpot_ms: Option<f64>,
    #[command(flatten)]
    host: HostFlags,
    /// Print JSON (a stable interface for scripts) instead of tables.
    #[arg(long)]
    json: bool,
}

/// The embedded workload `serve` runs without `--workload`.
const DEFAULT_WORKLOAD: &str = "workloads/llama2-7b-serve.yaml";

pub fn run(a: Args) -> anyhow::Result<Outcome> {
    if !(a.rate.is_finite() && a.rate > 0.0) {
        bail!("--rate {}: expected requests per second > 0", a.rate);
    }
    if a.block_tokens == 0 || a.block_tokens > 1 << 20 {
        bail!(
            "--block-tokens {}: expected tokens per KV-cache block from 1 to 1048576",
            a.block_tokens
        );
    }
    if !(a.memory_utilization > 0.0 && a.memory_utilization <= 1.0) {
        bail!(
            "--memory-utilization {}: expected a share of device memory in (0, 1]",
            a.memory_utilization
        );
    }
    let (source, file) = match &a.workload {
        Some(p) => (Source::Disk, p.clone()),
        None => (Source::Embedded, PathBuf::from(DEFAULT_WORKLOAD)),
    };
    let workload = crate::workload::Workload::load(source, &file)?;
    let Some((t, spec)) = workload.serving() else {
        bail!(
            "{}: a served transformer (a transformer with `inference:`) is what `serve` runs",
            file.display()
        );
    };
    let system = load_system(&a.system, None, &a.host)?;
    let arch = system.accelerator()?;
    super::check_precision(Path::new(&file), &workload, &arch)?;
    let devices = a.devices.unwrap_or_else(|| system.default_devices());
    let net = system.network(&arch, devices)?;
    let strategy = load_strategy(a.strategy.as_deref(), &system, devices)?;
    let load = Load {
        rate_per_s: a.rate,
        requests: a.requests,
        seed: a.seed,
        max_batch: a.max_batch,
        max_step_tokens: a.max_step_tokens,
        block_tokens: a.block_tokens,
        memory_utilization: a.memory_utilization,
    };
    let engine = Engine::new(t, spec, &arch, &net, &strategy, &load)?;
    let report = engine.run(load.rate_per_s, load.requests, load.seed)?;
    let slo = match (a.slo_ttft_ms, a.slo_tpot_ms) {
        (Some(ttft), Some(tpot)) => {
            for (flag, v) in [("--slo-ttft-ms", ttft), ("--slo-tpot-ms", tpot)] {
                if !(v.is_finite() && v > 0.0) {
                    bail!("{flag} {v}: expected a latency bound in ms > 0");
                }
            }
            Some(Slo {
                ttft_p99_s: ttft * 1e-3,
                tpot_p99_s: tpot * 1e-3,
            })
        }
        _ => None,
    };
    let goodput = slo
        .map(|slo| engine.goodput(&slo, load.requests, load.seed, devices))
        .transpose()?;
    if a.json {
        let mut value = serde_json::to_value(&report)?;
        if let Some(g) = &goodput {
            value["goodput"] = match g {
                Ok(g) => serde_json::to_value(g)?,
                Err(why) => serde_json::json!({ "infeasible": why }),
            };
        }
        super::print_json(&value)?;
    } else {
        print!("{}", render(&report, devices));
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
        Ok(g) => format!(
            "goodput           {:.3} requests/s ({:.3} per device, {:.1} output tokens/s) within \
             p99 TTFT {:.1} ms and p99 TPOT {:.1} ms; {} binds (swamped: {:.3} requests/s)\n",
            g.requests_per_s,
            g.requests_per_s_per_device,
            g.output_tokens_per_s,
            g.slo.ttft_p99_s * 1e3,
            g.slo.tpot_p99_s * 1e3,
            g.binding,
            g.capacity_requests_per_s
        ),
        Err(why) => format!("goodput           none: {why}\n"),
    }
}

fn render(r: &LoadReport, devices: u64) -> String {
    let ms = |p: &crate::distributed::load::Percentiles| {
        format!(
            "p50 {:.2}  p90 {:.2}  p99 {:.2}  mean {:.2} ms",
            p.p50 * 1e3,
            p.p90 * 1e3,
            p.p99 * 1e3,
            p.mean * 1e3
        )
    };
    format!(
        "workload          {} ({} prompt, {} output tokens) under {} on {devices} devices\n\
         arrivals          {} requests at {:.3}/s (Poisson, seed {})\n\
         throughput        {:.1} output tokens/s, {:.3} requests/s\n\
         TTFT              {}\n\
         TPOT              {}\n\
         end to end        {}\n\
         idle TTFT         {:.2} ms (one request alone)\n\
         engine            KV cache {} tokens, at most {} running, {} preemptions, {} steps\n",
        r.workload,
        r.prompt_tokens,
        r.output_tokens,
        r.strategy,
        r.load.requests,
        r.load.rate_per_s,
        r.load.seed,
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
