//! `stackflow validate`: replays the published measurements and prints how close the model
//! comes; exits non-zero when a counted case leaves its tolerance, a family its mean signed
//! bound, or the training families their mean |error| bound.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::Outcome;
use crate::config::Source;
use crate::validate::{
    run as replay, CaseResult, Report, Split, DEFAULT, HELD_OUT_OVER_CALIBRATION_MAX,
    TRAINING_MEAN_ABS_ERROR_MAX_PCT,
};

pub fn run(file: Option<PathBuf>, json: bool) -> anyhow::Result<Outcome> {
    let (source, path) = match file {
        Some(p) => (Source::Disk, p),
        None => (Source::Embedded, PathBuf::from(DEFAULT)),
    };
    let report = replay(source, Path::new(&path))?;
    if json {
        super::print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.passed {
        Outcome::Done
    } else {
        Outcome::Failed(
            "validation failed: a case, a family's mean signed error or the training families' mean is \
             outside its limit (see the table)",
        )
    })
}

fn render(r: &Report) -> String {
    let mut s = String::new();
    let name = |c: &CaseResult| format!("{} ({})", c.name, c.unit);
    let width = r
        .cases
        .iter()
        .map(|c| name(c).chars().count())
        .max()
        .unwrap_or(0);
    let id_width = r
        .cases
        .iter()
        .map(|c| c.id.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(
        s,
        "{:<id_width$} {:<width$} {:>11} {:>11} {:>9} {:>16}  status",
        "case", "", "measured", "predicted", "error", "tolerance"
    );
    for c in &r.cases {
        let unit = if c.unit == "%" { " pts" } else { "%" };
        let status = match (&c.known_gap, c.within) {
            (Some(_), _) => "known gap",
            (None, true) => "ok",
            (None, false) => "OUTSIDE",
        };
        let _ = writeln!(
            s,
            "{:<id_width$} {:<width$} {:>11.3} {:>11.3} {:>+8.1}{unit} {:>16}  {status}",
            c.id,
            name(c),
            c.measured,
            c.predicted,
            c.error,
            c.tolerance
        );
    }
    for f in &r.families {
        let bound = match f.limit {
            Some(l) => format!(
                " (bound +-{l:.1}{}): {}",
                f.unit,
                if f.within { "ok" } else { "FAILED" }
            ),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "{}: mean signed error {:+.1}{} over {} cases{bound}",
            f.id, f.mean_signed_error, f.unit, f.cases
        );
    }
    let mut fitted: Vec<&str> = r
        .cases
        .iter()
        .filter_map(|c| c.calibrates.as_deref())
        .collect();
    fitted.sort_unstable();
    fitted.dedup();
    let (cal, held) = (r.calibration, r.held_out);
    let over = |held: Split, cal: Split| {
        if cal.cases > 0 && cal.mean_abs_error_pct > 0.0 {
            format!(
                "{:.1}x the calibration's",
                held.mean_abs_error_pct / cal.mean_abs_error_pct
            )
        } else {
            "no calibration error to compare".to_string()
        }
    };
    let ratio = over(held, cal);
    let _ = writeln!(
        s,
        "calibration ({}): {} cases, mean |error| {:.1}%; held out: {} cases, mean |error| \
         {:.1}% ({ratio})",
        if fitted.is_empty() {
            "no fitted constant".to_string()
        } else {
            fitted.join("; ")
        },
        cal.cases,
        cal.mean_abs_error_pct,
        held.cases,
        held.mean_abs_error_pct,
    );
    let t = r.training;
    let verdict = |ok: bool| if ok { "ok" } else { "FAILED" };
    let reported = |ok: bool| if ok { "met" } else { "not met" };
    let _ = writeln!(
        s,
        "training families (all but serving): {} cases, mean |error| {:.1}% (bound {:.1}%: {}); \
         calibration {} cases, {:.1}%; held out {} cases, {:.1}% ({}; issue 18 asks at most \
         {:.1}x: {}); {} \
         known gaps not counted",
        t.all.cases,
        t.all.mean_abs_error_pct,
        TRAINING_MEAN_ABS_ERROR_MAX_PCT,
        verdict(t.mean_within),
        t.calibration.cases,
        t.calibration.mean_abs_error_pct,
        t.held_out.cases,
        t.held_out.mean_abs_error_pct,
        over(t.held_out, t.calibration),
        HELD_OUT_OVER_CALIBRATION_MAX,
        reported(t.held_out_within),
        t.known_gaps,
    );
    for c in r.cases.iter().filter(|c| c.known_gap.is_some()) {
        let _ = writeln!(
            s,
            "known gap {}: {}",
            c.id,
            c.known_gap.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(
        s,
        "mean |error| {:.1}%, max |error| {:.1}% (relative errors of counted cases); {}",
        r.mean_abs_error_pct,
        r.max_abs_error_pct,
        if r.passed {
            "all within tolerance"
        } else {
            "FAILED"
        }
    );
    s
}
