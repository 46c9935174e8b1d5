//! `--report FILE.html` (issue 31): one self-contained page per run of predict, optimize,
//! search and sweep. Each test checks the page is well-formed (every element closed in
//! order), fetches nothing (no script, stylesheet, image or font by address) and holds
//! every chart the run draws. That the pages read well in a browser was checked by hand in
//! headless Chromium (screenshots of the README's main command and of GPT-3 175B on 1024
//! A100s); that check needs a browser and is not run here.

mod common;

use common::{stackflow, Scratch};

/// Elements HTML closes by itself.
const VOID: [&str; 6] = ["meta", "br", "hr", "img", "input", "link"];

/// Checks that every element of `html` is closed, innermost first, and returns the names of
/// the elements opened, in order. Text between tags must not hold a bare `<` (escaped as
/// `&lt;`).
fn well_formed(html: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut opened = Vec::new();
    let mut rest = html;
    assert!(rest.starts_with("<!DOCTYPE html>"), "no doctype");
    rest = &rest["<!DOCTYPE html>".len()..];
    while let Some(at) = rest.find('<') {
        let after = &rest[at + 1..];
        let end = after.find('>').expect("a tag left open at the end");
        let tag = &after[..end];
        rest = &after[end + 1..];
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim().to_lowercase();
            let open = stack
                .pop()
                .unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(open, name, "</{name}> closes <{open}>");
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect::<String>()
            .to_lowercase();
        assert!(!name.is_empty(), "a bare '<' in the text: <{tag}>");
        // Attribute values are quoted whole.
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        opened.push(name.clone());
        if !self_closing && !VOID.contains(&name.as_str()) {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "left open: {stack:?}");
    opened
}

/// Nothing fetched: no script, no external stylesheet, image, frame or font, no address in
/// an attribute or a style. Addresses may appear as text (an input file's citations),
/// never as something to load.
fn self_contained(html: &str) {
    let lower = html.to_lowercase();
    for banned in [
        "<script", "<link", "<img", "<iframe", "<object", "<embed", " src=", " href=", "url(",
        "@import", "xmlns", "xlink",
    ] {
        assert!(!lower.contains(banned), "the page holds {banned}");
    }
    // Outside the text of <pre> blocks (the inputs shown), no address at all.
    let mut outside = String::new();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("<pre>") {
        outside.push_str(&rest[..at]);
        let end = rest[at..].find("</pre>").expect("pre closed") + at;
        rest = &rest[end..];
    }
    outside.push_str(rest);
    assert!(
        !outside.contains("http://") && !outside.contains("https://"),
        "an address outside the inputs"
    );
}

/// Runs `args` with `--report` into a scratch file and returns the page, checked well
/// formed and self-contained.
fn report_of(test: &str, args: &[&str]) -> String {
    let scratch = Scratch::new(test);
    let file = scratch.path().join("report.html");
    let path = file.display().to_string();
    let (code, _, err) = stackflow(&[args, &["--report", &path]].concat());
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&file).unwrap();
    let opened = well_formed(&html);
    self_contained(&html);
    for needed in ["html", "head", "title", "style", "body", "h1"] {
        assert!(opened.iter().any(|o| o == needed), "no <{needed}>");
    }
    // The command line that produced it.
    let quoted = args.join(" ");
    assert!(html.contains(&format!("stackflow {}", &quoted[..quoted.len().min(40)])));
    html
}

fn charts(html: &str) -> usize {
    html.matches("<svg ").count()
}

/// The README's main command: the chip's budgets before and after, the sensitivities, the
/// strategies' Pareto front and the convergence, the numbers and the inputs.
#[test]
fn optimize_report_of_the_main_command() {
    let html = report_of("report-optimize", &["optimize"]);
    assert_eq!(charts(&html), 4);
    for text in [
        "the budgets&apos; split, given and optimized",
        "sensitivities at the optimum",
        "strategies at the optimized budget",
        "time per iteration by restart",
        "<h2>The numbers (as --json gives them)</h2>",
        "workload: workloads/lstm-sec9.yaml (embedded default)",
        "system: templates/deepflow-sec9.yaml (embedded default)",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

/// GPT-3 175B on 1024 A100s: the timeline whole and zoomed on the filling and draining
/// pipeline, a roofline per kind of stage with its data, the prediction's tables.
#[test]
fn predict_report_of_gpt3_on_1024_a100s() {
    let html = report_of(
        "report-gpt3",
        &[
            "predict",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "1024",
            "--strategy",
            "t8-p16-d8-mb1-i2-sp-rc=selective",
        ],
    );
    for text in [
        "one iteration",
        "zoomed on the pipeline filling",
        "zoomed on the pipeline draining",
        "Roofline: gpt3-175b (stage 0)",
        "the data behind the chart",
        "<h3>communication</h3>",
        "stage 15 compute",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    // Three timelines and a roofline per kind of stage (first, middle, last).
    assert_eq!(charts(&html), 3 + 3);
}

/// A per-layer-type strategy: a roofline per kind of stage, each layer type's kernels split
/// its own way.
#[test]
fn predict_report_per_layer_type() {
    let html = report_of(
        "report-layered",
        &[
            "predict",
            "--workload",
            "workloads/llama2-70b.yaml",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "64",
            "--strategy",
            "embedding:t8-p2-d4,attention:t8-p2-d4,dense:t4-p2-d8",
        ],
    );
    assert_eq!(charts(&html), 2);
    assert!(html.contains("Roofline: llama2-70b (stage 1)"));
    assert!(html.contains("per iteration"));
}

/// One accelerator, a served model (a roofline per phase) and training (one roofline).
#[test]
fn predict_report_on_one_accelerator() {
    let html = report_of(
        "report-single",
        &[
            "predict",
            "--workload",
            "workloads/gpt-1.7b.yaml",
            "--budget",
            "budgets/h100.yaml",
        ],
    );
    assert_eq!(charts(&html), 1);
    assert!(html.contains("budget: budgets/h100.yaml"));
    let html = report_of(
        "report-decode",
        &[
            "predict",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--budget",
            "budgets/h100.yaml",
        ],
    );
    assert_eq!(charts(&html), 2);
    assert!(html.contains("time to first token"));
}

/// A strategy search: the Pareto front with its data, the candidates as tables.
#[test]
fn search_report() {
    let html = report_of(
        "report-search",
        &[
            "search",
            "--workload",
            "workloads/gpt-1.7b.yaml",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "8",
        ],
    );
    assert_eq!(charts(&html), 1);
    for text in [
        "time against memory per device",
        "<h3>pareto</h3>",
        "<h3>top</h3>",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

/// A sweep: its plots, its summary and every point.
#[test]
fn sweep_report() {
    let scratch = Scratch::new("report-sweep-out");
    let out = scratch.path().display().to_string();
    let html = report_of(
        "report-sweep",
        &[
            "sweep",
            "studies/madmax-fig10.yaml",
            "--out",
            &out,
            "--jobs",
            "1",
        ],
    );
    assert_eq!(charts(&html), 2);
    for text in [
        "speedup over FSDP",
        "results.csv (15 rows)",
        "study: studies/madmax-fig10.yaml",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

/// `--report` into a folder that does not exist or onto a directory: exit 2 naming it,
/// before any work, nothing written.
#[test]
fn report_into_a_missing_folder_or_a_directory_is_refused() {
    let scratch = Scratch::new("report-bad");
    let missing = scratch.path().join("nowhere/report.html");
    let dir = scratch.path().display().to_string();
    for args in [
        vec!["optimize"],
        vec![
            "search",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "8",
        ],
        vec!["predict"],
        vec!["sweep", "studies/madmax-fig10.yaml", "--out", &dir],
    ] {
        let (code, _, err) =
            stackflow(&[&args[..], &["--report", missing.to_str().unwrap()]].concat());
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("nowhere") && err.contains("does not exist"),
            "{err}"
        );
        assert!(!missing.exists());
        let (code, _, err) = stackflow(&[&args[..], &["--report", &dir]].concat());
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("a directory, not a file"), "{err}");
    }
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
