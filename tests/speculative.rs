//! Speculative decoding (issue 30): a draft proposes tokens, the served model verifies them
//! in one pass (Leviathan et al. 2023; Chen et al. 2023).

mod common;

use common::{root, stackflow, Scratch};
use serde_json::Value;

const DRAFT: &str = "{name: llama2-7b, hidden: 4096, layers: 32, heads: 32, ffn_hidden: 11008}";

/// Llama-2-70B in FP8 on 8 H100s (workloads/llama2-70b-decode.yaml) with `speculative`.
fn workload(dir: &Scratch, name: &str, speculative: &str) -> String {
    let text = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml")).unwrap();
    let inference = if speculative.is_empty() {
        "inference: {batch: 1, prompt_tokens: 2048, output_tokens: 256}".to_string()
    } else {
        format!(
            "inference: {{batch: 1, prompt_tokens: 2048, output_tokens: 256, speculative: {speculative}}}"
        )
    };
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("inference:") {
                inference.clone()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    dir.write(name, &text)
}

fn predict(w: &str) -> (i32, Value, String) {
    let (code, out, err) = stackflow(&[
        "predict",
        "--workload",
        w,
        "--system",
        "templates/dgx-h100.yaml",
        "--strategy",
        "t8",
        "--json",
    ]);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

/// The speed-up is the expected tokens per verification over the cost ratio of a step:
/// `E x t_target / (g x t_draft + t_verify)`, with the draft's and the target's steps as
/// the two models predict alone; within 5% of that formula.
#[test]
fn the_speedup_is_the_expected_tokens_over_the_cost_ratio() {
    let dir = Scratch::new("speculative-formula");
    let spec = workload(
        &dir,
        "spec.yaml",
        &format!("{{draft: {DRAFT}, tokens: 4, acceptance: 0.7}}"),
    );
    let (code, r, err) = predict(&spec);
    assert_eq!(code, 0, "{err}");
    let sp = &r["speculative"];
    let (_, plain, _) = predict(&workload(&dir, "plain.yaml", ""));
    // The draft alone: Llama-2-7B's shape in the served model's precision and vocabulary.
    let draft_text = std::fs::read_to_string(root().join("workloads/llama2-70b-decode.yaml"))
        .unwrap()
        .replace("hidden: 8192", "hidden: 4096")
        .replace("layers: 80", "layers: 32")
        .replace("heads: 64", "heads: 32")
        .replace("kv_heads: 8 ", "kv_heads: 32 ")
        .replace("ffn_hidden: 28672", "ffn_hidden: 11008");
    let (_, draft, _) = predict(&dir.write("draft.yaml", &draft_text));
    let e = (1.0 - 0.7f64.powi(5)) / (1.0 - 0.7);
    assert!((sp["expected_tokens"].as_f64().unwrap() - e).abs() < 1e-12);
    let target = plain["time_per_output_token_s"].as_f64().unwrap();
    let draft_step = draft["time_per_output_token_s"].as_f64().unwrap();
    let verify = sp["verify_step_s"].as_f64().unwrap();
    let formula = e * target / (4.0 * draft_step + verify);
    let speedup = sp["speedup"].as_f64().unwrap();
    assert!(
        (speedup / formula - 1.0).abs() < 0.05,
        "{speedup} vs {formula}: {sp}"
    );
    let tpot = r["time_per_output_token_s"].as_f64().unwrap();
    assert!((target / tpot - speedup).abs() < 1e-9);
    // Verifying 5 positions streams the weights once: it costs about one decode step.
    assert!(
        verify >= target && verify < 1.2 * target,
        "{verify} vs {target}"
    );
    // The draft's weights and cache sit beside the model's.
    assert!(r["weights_bytes"].as_f64().unwrap() > plain["weights_bytes"].as_f64().unwrap());
}

/// Never above the acceptance bound: the speed-up stays below the expected tokens per
/// verification (at most tokens + 1), grows with the acceptance rate, and a draft that is
/// never right slows decoding down.
#[test]
fn the_speedup_never_exceeds_the_acceptance_bound() {
    let dir = Scratch::new("speculative-bound");
    for tokens in [1u64, 4, 8] {
        let mut last = 0.0;
        for (i, acceptance) in [0.0, 0.3, 0.7, 0.95, 1.0].into_iter().enumerate() {
            let w = workload(
                &dir,
                &format!("g{tokens}-{i}.yaml"),
                &format!("{{draft: {DRAFT}, tokens: {tokens}, acceptance: {acceptance}}}"),
            );
            let (code, r, err) = predict(&w);
            assert_eq!(code, 0, "{err}");
            let sp = &r["speculative"];
            let (x, e) = (
                sp["speedup"].as_f64().unwrap(),
                sp["expected_tokens"].as_f64().unwrap(),
            );
            assert!(x < e && e <= (tokens + 1) as f64 + 1e-12, "{sp}");
            assert!(
                x > last,
                "{tokens} tokens at {acceptance}: {x} after {last}"
            );
            if acceptance == 0.0 {
                assert!(x < 1.0, "a draft never accepted only costs: {sp}");
            }
            last = x;
        }
    }
}

/// A draft that is never right spends energy for nothing: each token then costs the
/// drafting and a verification of five positions, more than the plain decode step, in
/// time and in joules. One that is mostly right saves both: fewer passes over the weights
/// and less time on the chips' floor per token.
#[test]
fn a_draft_never_accepted_costs_energy_per_token() {
    let dir = Scratch::new("speculative-energy");
    let (_, plain, _) = predict(&workload(&dir, "plain.yaml", ""));
    let joules = |r: &Value| r["joules_per_token"].as_f64().unwrap();
    for (acceptance, dearer) in [(0.0, true), (0.9, false)] {
        let w = workload(
            &dir,
            &format!("a{acceptance}.yaml"),
            &format!("{{draft: {DRAFT}, tokens: 4, acceptance: {acceptance}}}"),
        );
        let (code, r, err) = predict(&w);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            joules(&r) > joules(&plain),
            dearer,
            "acceptance {acceptance}: {} J against plain {} J",
            joules(&r),
            joules(&plain)
        );
    }
}

/// Bad speculative settings exit 2 naming the field: an acceptance rate outside [0, 1], no
/// or too many proposals, a draft as large as the model, a draft whose heads do not divide
/// its width; and a pipelined replica, which the model does not price.
#[test]
fn bad_speculative_settings_are_refused_by_name() {
    let dir = Scratch::new("speculative-bad");
    for (i, (speculative, says)) in [
        (format!("{{draft: {DRAFT}, tokens: 4, acceptance: 1.5}}"), "inference.speculative.acceptance = 1.5"),
        (format!("{{draft: {DRAFT}, tokens: 4, acceptance: -0.1}}"), "inference.speculative.acceptance = -0.1"),
        (format!("{{draft: {DRAFT}, tokens: 0, acceptance: 0.5}}"), "inference.speculative.tokens = 0"),
        (format!("{{draft: {DRAFT}, tokens: 65, acceptance: 0.5}}"), "inference.speculative.tokens = 65"),
        (
            "{draft: {hidden: 8192, layers: 80, heads: 64, kv_heads: 8, ffn_hidden: 28672}, tokens: 4, acceptance: 0.5}".to_string(),
            "inference.speculative.draft = 6.898e10 parameters: a draft smaller than the model",
        ),
        (
            "{draft: {hidden: 4096, layers: 32, heads: 30, ffn_hidden: 11008}, tokens: 4, acceptance: 0.5}".to_string(),
            "inference.speculative.draft.heads = 30: a divisor of inference.speculative.draft.hidden (4096)",
        ),
        (format!("{{draft: {DRAFT}, tokens: 4, acceptance: 0.5, extra: 1}}"), "unknown field `extra`"),
    ]
    .iter()
    .enumerate()
    {
        let w = workload(&dir, &format!("bad{i}.yaml"), speculative);
        let (code, _, err) = predict(&w);
        assert_eq!(code, 2, "{speculative}: {err}");
        assert!(err.contains(&w) && err.contains(says), "{says}: {err}");
    }
    let w = workload(
        &dir,
        "pipelined.yaml",
        &format!("{{draft: {DRAFT}, tokens: 4, acceptance: 0.5}}"),
    );
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        &w,
        "--system",
        "templates/dgx-h100.yaml",
        "--strategy",
        "t4-p2",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("speculative decoding is priced on replicas without pipeline stages"),
        "{err}"
    );
    // One accelerator without a system, and serving under load, do not price it: refused.
    let (code, _, err) = stackflow(&["predict", "--workload", &w, "--budget", "budgets/h100.yaml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("inference.speculative is priced by the distributed serving model"),
        "{err}"
    );
    let (code, _, err) = stackflow(&[
        "serve",
        "--workload",
        &w,
        "--system",
        "templates/dgx-h100.yaml",
        "--strategy",
        "t8",
        "--rate",
        "1",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("speculative decoding under load"), "{err}");
}
