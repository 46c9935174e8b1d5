//! Slice availability of a TPU v4 supercomputer with and without optical circuit switches
//! (TPU v4 paper Sec. 2.3, Fig. 4). The pod is [`POD_CHIPS`] chips in blocks of
//! [`BLOCK_CHIPS`] (4x4x4), [`CHIPS_PER_HOST`] chips to a CPU host; a block serves only when
//! all its hosts are up, and hosts fail independently.
//!
//! With OCS a slice of `k` blocks takes any `k` blocks that are up, so the pod runs
//! `floor(B / k)` slices when `B` blocks are up. Statically cabled, the pod is cut once into
//! fixed slices, each of which runs only when every host in it is up. Goodput is the
//! expected share of the pod's chips that run slices (Fig. 4's y axis): at 99.0% and 99.5%
//! host availability, slices of 1K chips give 75% with OCS (three of the four fit beside the
//! failed blocks), 2K chips 50% and 3K chips 75% (the paper's own reading of Fig. 4).
//!
//! Owns: [`goodput`]. A different pod (another block or host size): the constants.

use serde::Serialize;

use crate::config::ConfigError;

/// Chips in a TPU v4 supercomputer (TPU v4 paper Sec. 2: 4096).
pub const POD_CHIPS: u64 = 4096;
/// Chips in one electrically cabled block, 4x4x4 (TPU v4 paper Sec. 2.1).
pub const BLOCK_CHIPS: u64 = 64;
/// TPU v4 chips per CPU host (TPU v4 paper Sec. 2.3: 4 per host, 1K hosts).
pub const CHIPS_PER_HOST: u64 = 4;

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

/// The goodput of slices of `slice_chips` (a multiple of [`BLOCK_CHIPS`] up to
/// [`POD_CHIPS`]) when each host is up with probability `host_availability` (0 to 1).
/// Errors name the command line's option.
pub fn goodput(slice_chips: u64, host_availability: f64) -> Result<Goodput, ConfigError> {
    if !(host_availability > 0.0 && host_availability <= 1.0) {
        return Err(ConfigError::invalid(
            "(command line)",
            "--host-availability",
            host_availability,
            "a probability above 0 and at most 1 (e.g. 0.995)",
        ));
    }
    if slice_chips == 0 || slice_chips % BLOCK_CHIPS != 0 || slice_chips > POD_CHIPS {
        return Err(ConfigError::invalid(
            "(command line)",
            "--slices",
            slice_chips,
            "a multiple of the 64-chip block, at most the pod's 4096 chips",
        ));
    }
    let blocks = (POD_CHIPS / BLOCK_CHIPS) as usize;
    let k = (slice_chips / BLOCK_CHIPS) as usize;
    let block_up = host_availability.powi((BLOCK_CHIPS / CHIPS_PER_HOST) as i32);
    // Binomial(blocks, block_up), in log space.
    let ln_choose =
        |n: usize, r: usize| -> f64 { (1..=r).map(|i| ((n - r + i) as f64 / i as f64).ln()).sum() };
    let pmf: Vec<f64> = (0..=blocks)
        .map(|b| {
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
            (ln_choose(blocks, b) + up + down).exp()
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
    let slice_up = host_availability.powi((slice_chips / CHIPS_PER_HOST) as i32);
    let slices = (POD_CHIPS / slice_chips) as i32;
    Ok(Goodput {
        slice_chips,
        host_availability,
        with_ocs,
        static_cabled: slice_up * (slices as f64 * slice_chips as f64) / POD_CHIPS as f64,
        one_slice_with_ocs,
        one_slice_static: 1.0 - (1.0 - slice_up).powi(slices),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_sum_to_one_and_full_availability_is_full_goodput() {
        let g = goodput(1024, 1.0).unwrap();
        assert!((g.with_ocs - 1.0).abs() < 1e-12 && (g.static_cabled - 1.0).abs() < 1e-12);
        assert!(goodput(64, 0.0).is_err() && goodput(100, 0.99).is_err());
        assert!(goodput(8192, 0.99).is_err() && goodput(1024, f64::NAN).is_err());
    }
}
