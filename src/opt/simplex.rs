//! The feasible set of the budget problem: for each resource class (area, power, perimeter)
//! the shares of its components lie between per-component bounds and sum to at most the
//! class's total. Projection onto it is exact (Euclidean), not a rescale.

use serde::Serialize;

/// Coordinates `indices` of the parameter vector, each within `[lower, upper]`, summing to
/// at most `total`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimplexGroup {
    pub name: String,
    pub indices: Vec<usize>,
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
    pub total: f64,
}

/// Independent groups; every coordinate belongs to exactly one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simplices {
    pub groups: Vec<SimplexGroup>,
    pub dimension: usize,
}

impl Simplices {
    /// Checks that the set is non-empty: bounds ordered, lower bounds within the total, every
    /// coordinate in one group. The error names the group and the offending values.
    pub fn new(groups: Vec<SimplexGroup>, dimension: usize) -> Result<Simplices, String> {
        let mut seen = vec![false; dimension];
        for g in &groups {
            if g.lower.len() != g.indices.len() || g.upper.len() != g.indices.len() {
                return Err(format!(
                    "{}: one lower and one upper bound per component",
                    g.name
                ));
            }
            for (k, &i) in g.indices.iter().enumerate() {
                if i >= dimension || seen[i] {
                    return Err(format!(
                        "{}: coordinate {i} repeated or out of range",
                        g.name
                    ));
                }
                seen[i] = true;
                let (lo, hi) = (g.lower[k], g.upper[k]);
                if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) {
                    return Err(format!(
                        "{}: bounds [{lo}, {hi}] of its component {k}: expected 0 <= lower <= upper",
                        g.name
                    ));
                }
            }
            let least: f64 = g.lower.iter().sum();
            if !(g.total.is_finite() && least <= g.total + 1e-12) {
                return Err(format!(
                    "{}: lower bounds sum to {least:.4}, more than the {:.4} available",
                    g.name, g.total
                ));
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!("coordinate {i} belongs to no resource class"));
        }
        Ok(Simplices { groups, dimension })
    }

    /// The nearest point of the set (Euclidean distance).
    pub fn project(&self, x: &[f64]) -> Vec<f64> {
        let mut out = x.to_vec();
        for g in &self.groups {
            let v: Vec<f64> = g.indices.iter().map(|&i| x[i]).collect();
            let w = project_capped(&v, &g.lower, &g.upper, g.total);
            for (&i, wi) in g.indices.iter().zip(w) {
                out[i] = wi;
            }
        }
        out
    }

    /// Whether `x` lies in the set, up to `tol`.
    pub fn contains(&self, x: &[f64], tol: f64) -> bool {
        self.groups.iter().all(|g| {
            let sum: f64 = g.indices.iter().map(|&i| x[i]).sum();
            sum <= g.total + tol
                && g.indices
                    .iter()
                    .enumerate()
                    .all(|(k, &i)| x[i] >= g.lower[k] - tol && x[i] <= g.upper[k] + tol)
        })
    }
}

/// Euclidean projection of `v` onto `{lower <= w <= upper, sum w <= total}`.
///
/// The KKT conditions give `w_i = clamp(v_i - lambda, lower_i, upper_i)` with `lambda = 0`
/// when the clamped point already fits, else the `lambda > 0` at which the sum equals
/// `total`. The sum is piecewise linear and non-increasing in `lambda` with breakpoints at
/// `v_i - upper_i` and `v_i - lower_i`; the crossing segment is found among the sorted
/// breakpoints and solved exactly.
pub fn project_capped(v: &[f64], lower: &[f64], upper: &[f64], total: f64) -> Vec<f64> {
    let clamp_at = |lambda: f64| -> Vec<f64> {
        v.iter()
            .zip(lower.iter().zip(upper))
            .map(|(&x, (&lo, &hi))| (x - lambda).clamp(lo, hi))
            .collect()
    };
    let free = clamp_at(0.0);
    if free.iter().sum::<f64>() <= total {
        return free;
    }
    // The same sum as `clamp_at(lambda)`'s, in the same order, without building it.
    let sum_at = |lambda: f64| -> f64 {
        v.iter()
            .zip(lower.iter().zip(upper))
            .map(|(&x, (&lo, &hi))| (x - lambda).clamp(lo, hi))
            .sum()
    };
    let mut points: Vec<f64> = v
        .iter()
        .zip(lower.iter().zip(upper))
        .flat_map(|(&x, (&lo, &hi))| [x - hi, x - lo])
        .filter(|&b| b > 0.0)
        .collect();
    points.push(0.0);
    points.sort_by(f64::total_cmp);
    points.dedup();
    // Largest breakpoint whose sum is still above the total; the crossing lies after it.
    let mut a = 0.0;
    for &b in &points {
        if sum_at(b) > total {
            a = b;
        } else {
            break;
        }
    }
    // On [a, next breakpoint] the sum is s(a) - k (lambda - a), k = coordinates strictly
    // between their bounds there.
    let next = points
        .iter()
        .copied()
        .find(|&b| b > a)
        .unwrap_or(f64::INFINITY);
    let mid = if next.is_finite() {
        0.5 * (a + next)
    } else {
        a + 1.0
    };
    let active = v
        .iter()
        .zip(lower.iter().zip(upper))
        .filter(|(&x, (&lo, &hi))| x - mid > lo && x - mid < hi)
        .count();
    if active == 0 {
        // Only when the lower bounds alone exceed the total (refused by `Simplices::new`).
        return lower.to_vec();
    }
    let lambda = a + (sum_at(a) - total) / active as f64;
    clamp_at(lambda)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_of_a_point_inside_is_itself() {
        let w = project_capped(&[0.2, 0.3], &[0.0, 0.0], &[1.0, 1.0], 1.0);
        assert_eq!(w, vec![0.2, 0.3]);
    }

    #[test]
    fn projection_onto_the_face_subtracts_a_common_amount() {
        let w = project_capped(&[0.8, 0.6, -0.5], &[0.0; 3], &[1.0; 3], 1.0);
        assert!((w[0] - 0.6).abs() < 1e-15 && (w[1] - 0.4).abs() < 1e-15 && w[2] == 0.0);
        // Upper bounds bind: the excess goes to the others.
        let w = project_capped(&[0.9, 0.9], &[0.0, 0.0], &[0.3, 1.0], 1.0);
        assert!(
            (w[0] - 0.3).abs() < 1e-15 && (w[1] - 0.7).abs() < 1e-15,
            "{w:?}"
        );
    }

    #[test]
    fn empty_sets_are_refused() {
        let g = |lower: Vec<f64>, upper: Vec<f64>| SimplexGroup {
            name: "area".into(),
            indices: (0..lower.len()).collect(),
            lower,
            upper,
            total: 1.0,
        };
        let e = Simplices::new(vec![g(vec![0.6, 0.6], vec![1.0, 1.0])], 2).unwrap_err();
        assert!(e.contains("lower bounds sum to 1.2000"), "{e}");
        let e = Simplices::new(vec![g(vec![0.5, 0.0], vec![0.4, 1.0])], 2).unwrap_err();
        assert!(e.contains("expected 0 <= lower <= upper"), "{e}");
    }
}
