//! Strategy search (DeepFlow Sec. 9.2): every valid way to spread a workload over the devices
//! (kernel RC/CR or tensor parallelism, data, pipeline; micro-batching, sequence
//! parallelism, ZeRO stages), each mapped in every ordering of its parallel dimensions, is
//! predicted; the fastest that fits is kept, with the Pareto front of time against memory
//! per device.

use rayon::prelude::*;
use serde::Serialize;

use crate::distributed::predict;
use crate::generator::Architecture;
use crate::network::Network;
use crate::parallel::strategy::KernelSplit;
use crate::parallel::Strategy;
use crate::workload::Workload;

/// One strategy evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub strategy: String,
    pub time_per_iteration_s: f64,
    pub memory_per_device_bytes: f64,
    pub feasible: bool,
    #[serde(skip)]
    pub parsed: Strategy,
}

/// The outcome of a search.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    /// Strategies generated.
    pub enumerated: usize,
    /// Those the workload cannot run (indivisible batch or layers, no such layers).
    pub rejected: usize,
    /// The fastest strategy that fits in memory; `None` when none fits.
    pub best: Option<Candidate>,
    /// The fastest strategy, fitting or not.
    pub fastest: Option<Candidate>,
    /// Strategies no other beats in both time and memory per device, by time.
    pub pareto: Vec<Candidate>,
    /// Every strategy that ran, by time.
    pub candidates: Vec<Candidate>,
}

/// Powers of two and the other divisors of `n`.
fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n % d == 0).collect()
}

/// Every strategy for `devices` devices of which the kinds fit `workload`: transformers get
/// tensor parallelism (with and without sequence parallelism), other graphs DeepFlow's RC
/// and CR kernel parallelism; pipelines get micro-batches of 1, 2, 4 and 8; data
/// parallelism gets ZeRO 0, 1 and 3.
pub fn enumerate(workload: &Workload, devices: u64) -> Vec<Strategy> {
    let transformer = matches!(workload, Workload::Transformer(_));
    let mut out = Vec::new();
    for model in divisors(devices) {
        let rest = devices / model;
        for pipeline in divisors(rest) {
            let data = rest / pipeline;
            let mut kinds: Vec<(u64, Option<KernelSplit>, bool)> = Vec::new();
            if model == 1 {
                kinds.push((1, None, false));
            } else if transformer {
                kinds.push((model, None, false));
                kinds.push((model, None, true));
            } else {
                for kp1 in divisors(model) {
                    kinds.push((
                        1,
                        Some(KernelSplit::Rc {
                            kp1,
                            kp2: model / kp1,
                        }),
                        false,
                    ));
                }
                kinds.push((1, Some(KernelSplit::Cr { kp1: model }), false));
            }
            let micro: &[u64] = if pipeline > 1 { &[1, 2, 4, 8] } else { &[0] };
            let zeros: &[u8] = if data > 1 { &[0, 1, 3] } else { &[0] };
            for &(tensor, kernel, sp) in &kinds {
                for &micro_batch in micro {
                    for &zero in zeros {
                        out.push(Strategy {
                            data,
                            tensor,
                            pipeline,
                            kernel,
                            micro_batch,
                            sequence_parallel: sp,
                            zero,
                            ..Strategy::default()
                        });
                    }
                }
            }
        }
    }
    out
}

/// A baseline for a search: pure data parallelism where the workload runs that way, else
/// the first enumerated strategy that runs at all.
pub fn baseline(
    workload: &Workload,
    arch: &Architecture,
    network: &Network,
    devices: u64,
) -> Option<Strategy> {
    let data = Strategy {
        data: devices,
        ..Strategy::default()
    };
    std::iter::once(data)
        .chain(enumerate(workload, devices))
        .find(|s| predict(workload, arch, network, s).is_ok())
}

/// Predicts every strategy in parallel on one accelerator and network.
pub fn search(
    workload: &Workload,
    arch: &Architecture,
    network: &Network,
    strategies: &[Strategy],
) -> SearchResult {
    let results: Vec<Option<Candidate>> = strategies
        .par_iter()
        .map(|s| {
            let p = predict(workload, arch, network, s).ok()?;
            Some(Candidate {
                strategy: p.strategy.clone(),
                time_per_iteration_s: p.time_per_iteration_s,
                memory_per_device_bytes: p.memory_per_device_bytes,
                feasible: p.feasible,
                parsed: *s,
            })
        })
        .collect();
    let rejected = results.iter().filter(|r| r.is_none()).count();
    let mut candidates: Vec<Candidate> = results.into_iter().flatten().collect();
    // Ties go to the strategy enumerated first (stable sort): deterministic.
    candidates.sort_by(|a, b| a.time_per_iteration_s.total_cmp(&b.time_per_iteration_s));
    let best = candidates.iter().find(|c| c.feasible).cloned();
    let mut pareto: Vec<Candidate> = Vec::new();
    for c in &candidates {
        if pareto
            .iter()
            .all(|p| p.memory_per_device_bytes > c.memory_per_device_bytes)
        {
            pareto.push(c.clone());
        }
    }
    SearchResult {
        enumerated: strategies.len(),
        rejected,
        best,
        fastest: candidates.first().cloned(),
        pareto,
        candidates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enumerated_strategy_uses_all_devices() {
        let text = "version: 1\nkind: lstm_lm\nname: l\nhidden: 1024\nbatch: 64\nvocab: 1000\n\
                    layers: 2\nsequence: 4\nprecision: fp16\n";
        let w = Workload::from_yaml("l.yaml", text).unwrap();
        let all = enumerate(&w, 16);
        assert!(all.iter().all(|s| s.devices() == 16));
        assert!(all
            .iter()
            .any(|s| matches!(s.kernel, Some(KernelSplit::Cr { kp1: 16 }))));
        assert!(
            all.iter().all(|s| s.tensor == 1),
            "no tensor parallelism for an LSTM"
        );
    }
}
