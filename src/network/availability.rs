//! Slice availability of a TPU v4 supercomputer with and without optical circuit switches
//! (TPU v4 paper Sec. 2.3, Fig. 4). A [`Pod`] is `chips` chips in electrically cabled
//! blocks (4x4x4 = 64 on TPU v4), `chips_per_host` chips to a CPU host (4 on TPU v4): the
//! block shape is the system file's fabric `block`, the chips per host its `host.devices`
//! ([`Pod::of`]); a block serves only when all its hosts are up, and hosts fail
//! independently.
//!
//! With OCS a slice of `k` blocks takes any `k` blocks that are up, so the pod runs
//! `floor(B / k)` slices when `B` blocks are up. Statically cabled, the pod is cut once into
//! fixed slices, each of which runs only when every host in it is up. Goodput is the
//! expected share of the pod's chips that run slices (Fig. 4's y axis): at 99.0% and 99.5%
//! host availability, slices of 1K chips give 75% with OCS (three of the four fit beside the
//! failed blocks), 2K chips 50% and 3K chips 75% (the paper's own reading of Fig. 4).
//!
//! Owns: [`Pod`], [`goodput`]. Another pod: a system file with a `block` and a `host:`.

use serde::Serialize;

use super::System;
use crate::config::ConfigError;

/// Chips in a TPU v4 supercomputer (TPU v4 paper Sec. 2: 4096).
pub const TPU_V4_POD_CHIPS: u64 = 4096;

/// A supercomputer of blocks that optical circuit switches compose into slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pod {
    pub chips: u64,
    /// Chips in one electrically cabled block.
    pub block_chips: u64,
    /// Chips one CPU host carries.
    pub chips_per_host: u64,
}

impl Pod {
    /// The pod of `chips` chips of `system`: its first fabric with a `block` gives the block,
    /// its `host.devices` the chips per host. Errors name the system file's field, or for
    /// `chips` the file and field in `chips_from` (the command line's `--pod-chips`, a
    /// study's `availability.pod_chips`).
    pub fn of(system: &System, chips: u64, chips_from: (&str, &str)) -> Result<Pod, ConfigError> {
        let file = &system.file;
        let block: u64 = match system.fabrics.iter().find_map(|f| f.block.as_ref()) {
            Some(b) => b.iter().product(),
            None => {
                return Err(ConfigError::invalid(
                    file,
                    "fabrics[0].block",
                    "(missing)",
                    "a torus built of blocks that optical circuit switches join (TPU v4: \
                     block: [4, 4, 4]); without blocks there are no slices to compose",
                ))
            }
        };
        let Some(host) = &system.host else {
            return Err(ConfigError::invalid(
                file,
                "host",
                "(missing)",
                "a host: section whose devices gives the chips per CPU host (TPU v4: 4)",
            ));
        };
        let per_host = host.devices_per_host;
        if block % per_host != 0 {
            return Err(ConfigError::invalid(
                file,
                "host.devices",
                per_host,
                format!("a divisor of the {block}-chip block: a block holds whole hosts"),
            ));
        }
        if chips == 0 || chips % block != 0 || chips / block > MAX_BLOCKS {
            return Err(ConfigError::invalid(
                chips_from.0,
                chips_from.1,
                chips,
                format!(
                    "a positive multiple of the {block}-chip block, at most {MAX_BLOCKS} blocks"
                ),
            ));
        }
        Ok(Pod {
            chips,
            block_chips: block,
            chips_per_host: per_host,
        })
    }
}

/// Blocks a pod may hold (a bound on the binomial's terms).
pub const MAX_BLOCKS: u64 = 1 << 16;

/// Goodput of one slice size at one host availability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goodput {
    pub slice_chips: u64,
    pub host_availability: f64,
    /// Expected share of the pod's chips running slices, with OCS.
    pub with_ocs: f64,
    /// The same, statically cabled.
    pub static_cabled: f64,
    /// Probability that at least one slice of this size can run, with OCS and statically.
    pub one_slice_with_ocs: f64,
    pub one_slice_static: f64,
}

/// The goodput of slices of `slice_chips` (a multiple of the pod's block, at most the pod)
/// when each host is up with probability `host_availability` (0 to 1). Errors name the
/// command line's option.
pub fn goodput(
    pod: &Pod,
    slice_chips: u64,
    host_availability: f64,
) -> Result<Goodput, ConfigError> {
    let Pod {
        chips: pod_chips,
        block_chips,
        chips_per_host,
    } = *pod;
    if !(host_availability > 0.0 && host_availability <= 1.0) {
        return Err(ConfigError::invalid(
            "(command line)",
            "--host-availability",
            host_availability,
            "a probability above 0 and at most 1 (e.g. 0.995)",
        ));
    }
    if slice_chips == 0 || slice_chips % block_chips != 0 || slice_chips > pod_chips {
        return Err(ConfigError::invalid(
            "(command line)",
            "--slices",
            slice_chips,
            format!(
                "a multiple of the {block_chips}-chip block, at most the pod's {pod_chips} chips"
            ),
        ));
    }
    let blocks = (pod_chips / block_chips) as usize;
    let k = (slice_chips / block_chips) as usize;
    let block_up = host_availability.powi((block_chips / chips_per_host) as i32);
    // Binomial(blocks, block_up), in log space; ln C(n, b) from ln C(n, b - 1), so the
    // whole distribution costs O(blocks).
    let mut ln_choose = 0.0f64;
    let pmf: Vec<f64> = (0..=blocks)
        .map(|b| {
            if b > 0 {
                ln_choose += ((blocks - b + 1) as f64 / b as f64).ln();
            }
            let up = if b == 0 {
                0.0
            } else {
                b as f64 * block_up.ln()
            };
            let down = if b == blocks {
                0.0
            } else {
                (blocks - b) as f64 * (1.0 - block_up).ln()
            };
            (ln_choose + up + down).exp()
        })
        .collect();
    let with_ocs = pmf
        .iter()
        .enumerate()
        .map(|(b, p)| p * (b / k) as f64)
        .sum::<f64>()
        * k as f64
        / blocks as f64;
    let one_slice_with_ocs = pmf[k..].iter().sum::<f64>().min(1.0);
    // Statically: each fixed slice needs all its hosts; fixed slices fail independently.
    let slice_up = host_availability.powi((slice_chips / chips_per_host) as i32);
    let slices = (pod_chips / slice_chips) as i32;
    let static_cabled = slice_up * (slices as f64 * slice_chips as f64) / pod_chips as f64;
    let one_slice_static = 1.0 - (1.0 - slice_up).powi(slices);
    // Whatever fixed slices are up, the switches compose at least as many from the blocks
    // that are up: with OCS never below static. The sums over tens of thousands of blocks
    // round a few 1e-12 below that, which would read as OCS losing.
    // Only rounding is absorbed (1e-9 of the share): a larger shortfall would be an error
    // in the model, and shows.
    let at_least = |ocs: f64, fixed: f64| {
        if ocs < fixed && fixed - ocs <= 1e-9 {
            fixed
        } else {
            ocs
        }
    };
    Ok(Goodput {
        slice_chips,
        host_availability,
        with_ocs: at_least(with_ocs, static_cabled),
        static_cabled,
        one_slice_with_ocs: at_least(one_slice_with_ocs, one_slice_static),
        one_slice_static,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TPU_V4: Pod = Pod {
        chips: 4096,
        block_chips: 64,
        chips_per_host: 4,
    };

    #[test]
    fn probabilities_sum_to_one_and_full_availability_is_full_goodput() {
        let pod = &TPU_V4;
        let g = goodput(pod, 1024, 1.0).unwrap();
        assert!((g.with_ocs - 1.0).abs() < 1e-12 && (g.static_cabled - 1.0).abs() < 1e-12);
        assert!(goodput(pod, 64, 0.0).is_err() && goodput(pod, 100, 0.99).is_err());
        assert!(goodput(pod, 8192, 0.99).is_err() && goodput(pod, 1024, f64::NAN).is_err());
    }

    /// OCS never does worse than static cabling, even where 65,536 blocks' sums round.
    #[test]
    fn ocs_is_never_below_static_cabling() {
        let pod = Pod {
            chips: 4_194_304,
            ..TPU_V4
        };
        for (slice, availability) in [(64, 0.9999), (64, 0.999), (4096, 0.99999)] {
            let g = goodput(&pod, slice, availability).unwrap();
            assert!(g.with_ocs >= g.static_cabled, "{g:?}");
            assert!(g.one_slice_with_ocs >= g.one_slice_static, "{g:?}");
        }
    }
}
