//! Serving search (issue 29): for a served transformer, a device count, arrivals and an SLO,
//! the deployment with the highest goodput per device ([`Deployment::goodput`]): the
//! replicas' split (tensor and pipeline degrees; the devices left give the replica count),
//! the batch cap, chunked prefill or not, and prefill/decode disaggregation (a prefill pool
//! and a decode pool of their own splits and counts, every division of the devices).
//!
//! Exact over that space with pruning that cannot change the top N: every deployment's
//! swamped capacity is simulated first, and as goodput never exceeds it (the bisection's
//! upper end: no higher rate is sustained), deployments are searched in order of capacity
//! per device, a chunk at a time, and one whose capacity is below the N-th best goodput per
//! device so far is *pruned by capacity*. Engines are priced once per split and reused for every batch cap
//! and pool. Chunks are fixed and the incumbent moves only between them: the same inputs
//! give the same answer on any number of threads.
//!
//! A new axis of the serving space (a swap policy, a KV format) enters in
//! [`deployments`]; what a deployment does under load is [`crate::distributed::load`]'s.

use rayon::prelude::*;
use serde::Serialize;

use super::space::divisors;
use crate::config::ConfigError;
use crate::distributed::load::{Arrivals, Deployment, Engine, Goodput, Lengths, Load, Slo};
use crate::generator::Architecture;
use crate::network::collective::GroupLink;
use crate::network::System;
use crate::parallel::Strategy;
use crate::workload::Transformer;

/// Deployments searched per chunk between incumbent updates.
const CHUNK: usize = 16;

/// Batch caps tried (at most the policy's).
pub const BATCH_CAPS: [u64; 6] = [256, 128, 64, 32, 16, 8];

/// What the serving search varies and how it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingSettings {
    pub slo: Slo,
    /// Requests per simulated run.
    pub requests: u64,
    /// Deployments listed.
    pub top: usize,
    /// Try prefill/decode disaggregation.
    pub disaggregate: bool,
    /// Try chunked prefill (colocated deployments).
    pub chunked: bool,
    /// Prune by capacity (the same top N either way; off to test it).
    pub prune: bool,
}

/// One deployment's goodput.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServingCandidate {
    pub layout: String,
    pub max_batch: u64,
    pub chunked_prefill: bool,
    pub devices: u64,
    pub goodput_requests_per_s: f64,
    pub goodput_requests_per_s_per_device: f64,
    pub output_tokens_per_s: f64,
    pub capacity_requests_per_s: f64,
    pub binding: String,
    pub ttft_p99_s: f64,
    pub tpot_p99_s: f64,
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServingResult {
    /// The best deployment's full goodput (with its run), if any keeps the SLO.
    pub best: Option<Goodput>,
    pub best_layout: Option<ServingCandidate>,
    /// The top N by goodput per device.
    pub top: Vec<ServingCandidate>,
    /// Replica splits tried, and those that cannot serve (memory, divisibility, network)
    /// with the first reason.
    pub splits: usize,
    pub splits_unfit: usize,
    pub unfit_example: Option<String>,
    /// Deployments built, searched for goodput, pruned by capacity, and searched but whose
    /// SLO not even 1% of capacity keeps.
    pub deployments: usize,
    pub searched: usize,
    pub pruned_by_capacity: usize,
    pub slo_unmet: usize,
    /// Deployments whose simulation failed (their swamped run, or a run of the goodput
    /// search: an engine that stalls), left out.
    pub failed: usize,
    /// When none keeps the SLO: why the one with the most capacity does not.
    pub infeasible: Option<String>,
}

/// A deployment and its policy.
struct Choice {
    deployment: Deployment,
    max_batch: u64,
    chunked: bool,
}

/// The link a prefill pool ships a prompt's cache to a decode pool over, in a deployment of
/// `devices` devices: the node's fabric when it fits one node, else the fabric between nodes.
pub fn transfer_link(
    system: &System,
    arch: &Architecture,
    devices: u64,
) -> Result<GroupLink, ConfigError> {
    let node = system.devices_per_node().max(1);
    let net = system.network(arch, devices)?;
    let stride = if devices > node { node } else { 1 };
    Ok(net.strided_link(2, stride).0)
}

/// One replica of split `s` (its data degree the replica count) as an engine: priced on a
/// network of the replica's devices.
pub fn pool_engine(
    w: &Transformer,
    lengths: Lengths,
    system: &System,
    arch: &Architecture,
    s: &Strategy,
    policy: &Load,
) -> Result<Engine, String> {
    let replica = Strategy { data: 1, ..*s };
    let devices = replica.tensor * replica.pipeline * replica.context.max(1);
    let net = system.network(arch, devices).map_err(|e| e.to_string())?;
    Engine::new(w, lengths, arch, &net, &replica, policy)
        .map(|e| e.with_replicas(s.data))
        .map_err(|e| e.to_string())
}

/// A replica split (t, p), chunked prefill or not, and its engine or why it cannot serve.
type Priced = ((u64, u64), bool, Result<Engine, String>);

/// A deployment's index and its goodput search: the goodput, or why no rate keeps the SLO;
/// or why it could not run.
type Searched = (usize, Result<Result<Goodput, String>, String>);

/// Every deployment of `devices` devices the settings allow, and the splits that cannot serve.
fn deployments(
    w: &Transformer,
    arrivals: &Arrivals,
    system: &System,
    arch: &Architecture,
    devices: u64,
    policy: &Load,
    settings: &ServingSettings,
) -> Result<(Vec<Choice>, usize, usize, Option<String>), ConfigError> {
    let node = system.devices_per_node().max(1);
    let lengths = arrivals.lengths();
    let mut shapes = Vec::new();
    for t in divisors(node.min(devices)) {
        for p in divisors(w.layers) {
            if devices % (t * p) == 0 {
                shapes.push((t, p));
            }
        }
    }
    let modes: &[bool] = if settings.chunked {
        &[false, true]
    } else {
        &[false]
    };
    // Engines per split and mode, priced in parallel.
    let priced: Vec<Priced> = shapes
        .par_iter()
        .flat_map_iter(|&(t, p)| modes.iter().map(move |&c| ((t, p), c)))
        .map(|((t, p), chunked)| {
            let s = Strategy {
                tensor: t,
                pipeline: p,
                data: 1,
                ..Strategy::default()
            };
            let policy = Load {
                chunked_prefill: chunked,
                ..*policy
            };
            let engine = pool_engine(w, lengths, system, arch, &s, &policy);
            ((t, p), chunked, engine)
        })
        .collect();
    let unfit: Vec<&String> = priced
        .iter()
        .filter(|e| !e.1)
        .filter_map(|e| e.2.as_ref().err())
        .collect();
    let caps: Vec<u64> = BATCH_CAPS
        .iter()
        .copied()
        .filter(|&c| c < policy.max_batch)
        .chain([policy.max_batch])
        .collect();
    let mut out = Vec::new();
    let fitted: Vec<(&(u64, u64), bool, &Engine)> = priced
        .iter()
        .filter_map(|(s, c, e)| e.as_ref().ok().map(|e| (s, *c, e)))
        .collect();
    for &(&(t, p), chunked, e) in &fitted {
        for &cap in &caps {
            out.push(Choice {
                deployment: Deployment::Colocated(e.capped(cap).with_replicas(devices / (t * p))),
                max_batch: cap,
                chunked,
            });
        }
    }
    if settings.disaggregate && devices >= 2 {
        let transfer = transfer_link(system, arch, devices)?;
        for &(&(ta, pa), ca, a) in &fitted {
            for &(&(tb, pb), cb, b) in &fitted {
                if ca || cb {
                    continue;
                }
                let (ra, rb) = (ta * pa, tb * pb);
                for na in 1..devices / ra {
                    let left = devices - na * ra;
                    if left == 0 || left % rb != 0 {
                        continue;
                    }
                    for &cap in &caps {
                        out.push(Choice {
                            deployment: Deployment::Disaggregated {
                                prefill: a.clone().with_replicas(na),
                                decode: Box::new(b.capped(cap).with_replicas(left / rb)),
                                transfer: transfer.clone(),
                            },
                            max_batch: cap,
                            chunked: false,
                        });
                    }
                }
            }
        }
    }
    let splits = priced.iter().filter(|e| !e.1).count();
    Ok((
        out,
        splits,
        unfit.len(),
        unfit.first().map(|s| s.to_string()),
    ))
}

/// The serving search: the deployments of `devices` devices of `system` serving `w` to
/// `arrivals` under `policy`, by goodput per device within `settings.slo`.
pub fn search_serving(
    w: &Transformer,
    arrivals: &Arrivals,
    system: &System,
    arch: &Architecture,
    devices: u64,
    policy: &Load,
    settings: &ServingSettings,
) -> Result<ServingResult, ConfigError> {
    let (options, splits, splits_unfit, unfit_example) =
        deployments(w, arrivals, system, arch, devices, policy, settings)?;
    // Capacities first, in parallel; a deployment whose run fails is left out.
    let capacity: Vec<Option<f64>> = options
        .par_iter()
        .map(|o| o.deployment.capacity_requests_per_s(arrivals).ok())
        .collect();
    let mut order: Vec<usize> = (0..options.len())
        .filter(|&i| capacity[i].is_some())
        .collect();
    let per_device = |i: usize| capacity[i].unwrap_or(0.0) / options[i].deployment.devices() as f64;
    order.sort_by(|&a, &b| per_device(b).total_cmp(&per_device(a)).then(a.cmp(&b)));
    let top_n = settings.top.max(1);
    let mut found: Vec<(usize, Goodput)> = Vec::new();
    let (mut searched, mut pruned, mut unmet, mut failed) = (0usize, 0usize, 0usize, 0usize);
    let mut infeasible = None;
    for chunk in order.chunks(CHUNK) {
        let bar = if found.len() >= top_n {
            found[top_n - 1].1.requests_per_s_per_device
        } else {
            0.0
        };
        let todo: Vec<usize> = chunk
            .iter()
            .copied()
            .filter(|&i| !settings.prune || per_device(i) >= bar * (1.0 - 1e-12))
            .collect();
        pruned += chunk.len() - todo.len();
        let results: Vec<Searched> = todo
            .par_iter()
            .map(|&i| {
                let o = &options[i];
                let g = o
                    .deployment
                    .goodput_below(
                        arrivals,
                        &settings.slo,
                        settings.requests,
                        capacity[i].unwrap_or(0.0),
                    )
                    .map_err(|e| e.to_string());
                (i, g)
            })
            .collect();
        for (i, g) in results {
            searched += 1;
            match g {
                Ok(Ok(g)) => found.push((i, g)),
                Ok(Err(why)) => {
                    unmet += 1;
                    infeasible.get_or_insert_with(|| {
                        format!("{}: {why}", options[i].deployment.layout())
                    });
                }
                Err(_) => failed += 1,
            }
        }
        found.sort_by(|a, b| {
            b.1.requests_per_s_per_device
                .total_cmp(&a.1.requests_per_s_per_device)
                .then(a.0.cmp(&b.0))
        });
    }
    let describe = |i: usize, g: &Goodput| {
        let o = &options[i];
        ServingCandidate {
            layout: o.deployment.layout(),
            max_batch: o.max_batch,
            chunked_prefill: o.chunked,
            devices: o.deployment.devices(),
            goodput_requests_per_s: g.requests_per_s,
            goodput_requests_per_s_per_device: g.requests_per_s_per_device,
            output_tokens_per_s: g.output_tokens_per_s,
            capacity_requests_per_s: g.capacity_requests_per_s,
            binding: g.binding.clone(),
            ttft_p99_s: g.at.ttft_s.p99,
            tpot_p99_s: g.at.tpot_s.p99,
        }
    };
    let top: Vec<ServingCandidate> = found
        .iter()
        .take(top_n)
        .map(|(i, g)| describe(*i, g))
        .collect();
    Ok(ServingResult {
        best_layout: top.first().cloned(),
        best: found.first().map(|(_, g)| g.clone()),
        infeasible: if found.is_empty() {
            Some(infeasible.unwrap_or_else(|| {
                format!(
                    "none of the {} deployments could be priced ({})",
                    options.len(),
                    unfit_example.clone().unwrap_or_default()
                )
            }))
        } else {
            None
        },
        top,
        splits,
        splits_unfit,
        unfit_example,
        deployments: options.len(),
        searched,
        pruned_by_capacity: pruned,
        slo_unmet: unmet,
        failed: failed + capacity.iter().filter(|c| c.is_none()).count(),
    })
}
