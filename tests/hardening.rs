//! Issue 23's reproducers, each named after its finding: bounded counts, a study's base
//! checked before any point runs. Each asserts the exit code and the message.

mod common;

use common::{stackflow, Scratch};

/// D1: device counts are bounded before any network is built (a system file's `devices`,
/// a torus's dims, `--devices`).
#[test]
fn d1_device_counts_are_bounded_before_the_network_is_built() {
    let dir = Scratch::new("hardening-d1");
    let root = common::root();
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "4294967296",
        "--workload",
        "workloads/gpt-1.7b.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most 1048576 devices"), "{err}");
    let text = std::fs::read_to_string(root.join("templates/tpu-v4-pod.yaml"))
        .unwrap()
        .replace("dims: [8, 8, 8]", "dims: [8000000000000, 8, 8]")
        .replace("../budgets", &root.join("budgets").display().to_string());
    let torus = dir.write("torus.yaml", &text);
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        &torus,
        "--workload",
        "workloads/gpt-1.7b.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most 1048576 devices"), "{err}");
}

/// D2: the optimizer's restarts and steps and a sweep's worker threads are bounded on the
/// command line and in a study file.
#[test]
fn d2_restarts_steps_and_jobs_are_bounded() {
    for (args, says) in [
        (
            vec!["optimize", "--restarts", "99999999999", "--steps", "1"],
            "not in 1..=10000",
        ),
        (
            vec!["optimize", "--steps", "10000000"],
            "not in 1..=1000000",
        ),
        (
            vec!["sweep", "studies/zion-fig10.yaml", "--jobs", "1000000"],
            "not in 1..=256",
        ),
    ] {
        let (code, _, err) = stackflow(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let dir = Scratch::new("hardening-d2");
    let root = common::root();
    let study = dir.write(
        "s.yaml",
        &format!(
            "version: 1\nname: s\nbase:\n  system: {}\n  workload: {}\naction: optimize\noptimizer: {{restarts: 99999999999}}\naxes:\n  - name: x\n    field: workload.global_batch\n    values: [512]\n",
            root.join("templates/deepflow-sec9.yaml").display(),
            root.join("workloads/lstm-sec9.yaml").display()
        ),
    );
    let (code, _, err) = stackflow(&["sweep", &study, "--out", &dir.write("o", "")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("optimizer.restarts") && err.contains("from 1 to 10000"),
        "{err}"
    );
}

/// D6: a study whose base cannot run (no devices) is refused before any point runs.
#[test]
fn d6_a_study_base_is_checked_before_any_point() {
    let dir = Scratch::new("hardening-d6");
    let root = common::root();
    let study = dir.write(
        "s.yaml",
        &format!(
            "version: 1\nname: s\nbase:\n  system: {}\n  workload: {}\n  devices: 0\naction: predict\naxes:\n  - name: x\n    field: workload.global_batch\n    values: [512]\n",
            root.join("templates/dgx-a100.yaml").display(),
            root.join("workloads/gpt-1.7b.yaml").display()
        ),
    );
    let out = dir.write("o", "");
    let (code, _, err) = stackflow(&["sweep", &study, "--out", &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("base.devices = 0"), "{err}");
}
