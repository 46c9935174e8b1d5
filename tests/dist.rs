//! Distributed performance: collectives, mapping, schedules, and validation against
//! published measurements (../shared/reference/published-measurements.md).

mod common;

use common::{assert_close, root, Scratch};
use stackflow::config::Source;
use stackflow::distributed::predict;
use stackflow::generator::Architecture;
use stackflow::network::System;
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

/// Predicts on 16 devices of a system file `text` written beside the shipped templates (its
/// accelerator path is relative to them): exit 2; returns the error.
fn refused_system(name: &str, text: &str) -> String {
    let beside = root().join(format!("templates/{name}.tmp.yaml"));
    std::fs::write(&beside, text).unwrap();
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        &beside.display().to_string(),
        "--devices",
        "16",
    ]);
    let _ = std::fs::remove_file(&beside);
    assert_eq!(code, 2, "{err}");
    err
}

fn system(file: &str) -> (System, Architecture) {
    let s = System::load(Source::Disk, &root().join(file)).unwrap();
    let a = s.accelerator().unwrap();
    (s, a)
}

/// LLaMA-2-70B served (`workloads/llama2-70b-decode.yaml`): the model and its batch.
fn llama2_70b_decode() -> (
    stackflow::workload::Transformer,
    stackflow::workload::inference::InferenceSpec,
) {
    let Workload::Transformer(t) = Workload::load(
        Source::Disk,
        &root().join("workloads/llama2-70b-decode.yaml"),
    )
    .unwrap() else {
        unreachable!()
    };
    let spec = t.inference.unwrap();
    (t, spec)
}

/// A GPT-style transformer (Megatron: 4h FFN, GELU, vocabulary 51200, sequence 2048).
fn gpt(heads: u64, hidden: u64, layers: u64, batch: u64, recompute: &str) -> Workload {
    let text = format!(
        "version: 1\nkind: transformer\nname: gpt-{hidden}x{layers}\nhidden: {hidden}\nlayers: {layers}\n\
         heads: {heads}\nffn_hidden: {}\nsequence: 2048\nvocab: 51200\nglobal_batch: {batch}\n\
         precision: bf16\nrecompute: {recompute}\n",
        4 * hidden
    );
    Workload::from_yaml("test.yaml", &text).unwrap()
}

// ------------------------------------------------------------------ collectives

use stackflow::domain::{Forwarding, Topology};
use stackflow::network::collective::Collective;
use stackflow::network::scale::Scaling;
use stackflow::network::{Fabric, Network};
use stackflow::parallel::{mapping, Axis};

fn one_fabric(topology: Topology, size: u64, egress: f64, hop: f64) -> Network {
    Network::new(vec![Fabric::new("f", &topology, size, egress, hop)])
}

fn everyone(net: &Network) -> Vec<Vec<u64>> {
    vec![(0..net.devices).collect()]
}

/// Zion Eq. 1-4 at p = 8, equal per-node bandwidth B.
#[test]
fn zion_ring_versus_fully_connected() {
    let (b, alpha) = (100e9, 1e-6);
    // Zion's OAMs relay an all-to-all a hop a step (Sec. IV-C).
    let ring_net = Network::new(vec![
        Fabric::new("f", &Topology::Ring, 8, b, alpha).with_forwarding(Forwarding::Relay)
    ]);
    let ring = ring_net.group_link(&everyone(&ring_net));
    let fc_net = one_fabric(Topology::FullyConnected, 8, b, alpha);
    let fc = fc_net.group_link(&everyone(&fc_net));
    let m = 1e9;
    // Exact equations.
    assert_close(
        "Eq. 1",
        ring.time(Collective::AllReduce, m),
        2.0 * m / b * 7.0 / 8.0 + 14.0 * alpha,
        1e-12,
    );
    assert_close(
        "Eq. 2",
        fc.time(Collective::AllReduce, m),
        2.0 * m / (b / 7.0) / 8.0 + 2.0 * alpha,
        1e-12,
    );
    assert_close(
        "Eq. 3",
        ring.time(Collective::AllToAll, m),
        16.0 * (m / b / 8.0 + alpha),
        1e-12,
    );
    assert_close(
        "Eq. 4",
        fc.time(Collective::AllToAll, m),
        m / b * 7.0 / 8.0 + alpha,
        1e-12,
    );
    // Large messages: all-to-all ratio 16/7, all-reduce equal.
    let ratio = |c, m| ring.time(c, m) / fc.time(c, m);
    assert_close(
        "all-to-all, large",
        ratio(Collective::AllToAll, 1e12),
        16.0 / 7.0,
        0.01,
    );
    assert_close(
        "all-reduce, large",
        ratio(Collective::AllReduce, 1e12),
        1.0,
        0.01,
    );
    // Small messages: the latency terms, 16 alpha / alpha and 14 alpha / 2 alpha.
    assert_close(
        "all-to-all, small",
        ratio(Collective::AllToAll, 1.0),
        16.0,
        0.01,
    );
    assert_close(
        "all-reduce, small",
        ratio(Collective::AllReduce, 1.0),
        7.0,
        0.01,
    );
}

/// A contention-free ring pays 2(p-1)/p M/B + 2(p-1) alpha; when the mapping makes two
/// logical rings share every link, each gets half the bandwidth.
#[test]
fn ring_all_reduce_and_link_sharing_derate() {
    let (b, alpha, m) = (50e9, 2e-6, 256e6);
    let net = one_fabric(Topology::Torus { dims: vec![8] }, 8, b, alpha);
    let free = net.group_link(&everyone(&net));
    assert_close(
        "contention-free ring",
        free.time(Collective::AllReduce, m),
        2.0 * 7.0 / 8.0 * m / b + 14.0 * alpha,
        1e-12,
    );
    assert_close(
        "contention-free ring bandwidth",
        free.ring_bytes_per_s,
        b,
        1e-12,
    );
    // t2-d4 on the same 8-device ring with tensor parallelism innermost: each data group
    // sits on every other device, so the two data rings share every link.
    let s = Strategy::parse("t2-d4").unwrap();
    let shared = mapping::place(&net, &s, &[Axis::Tensor, Axis::Data]);
    let sh = shared.link(Axis::Data);
    assert_close(
        "two rings share each link",
        sh.ring_bytes_per_s,
        b / 2.0,
        1e-12,
    );
    let p4 = 4.0;
    assert_close(
        "derated all-reduce",
        sh.time(Collective::AllReduce, m),
        2.0 * (p4 - 1.0) / p4 * m / (b / 2.0) + 2.0 * (p4 - 1.0) * 2.0 * alpha,
        1e-12,
    );
}

/// TPU v4 Fig. 6: all-to-all is faster on the twisted torus (measured 1.63x at 4x4x8 and
/// 1.31x at 4x8x8).
#[test]
fn twisted_torus_all_to_all_beats_the_regular_torus() {
    for dims in [vec![4, 4, 8], vec![4, 8, 8]] {
        let n: u64 = dims.iter().product();
        let regular = one_fabric(Topology::Torus { dims: dims.clone() }, n, 150e9, 1e-6);
        let twisted = one_fabric(
            Topology::TwistedTorus { dims: dims.clone() },
            n,
            150e9,
            1e-6,
        );
        let m = 64e9;
        let r = regular
            .group_link(&everyone(&regular))
            .time(Collective::AllToAll, m);
        let t = twisted
            .group_link(&everyone(&twisted))
            .time(Collective::AllToAll, m);
        println!("{dims:?}: twisted speed-up {:.2}", r / t);
        assert!(r / t > 1.1, "{dims:?}: regular {r} s, twisted {t} s");
    }
}

// ------------------------------------------------------------------ validation

#[test]
fn mapping_tries_every_ordering_and_reports_the_breakdown() {
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 64).unwrap();
    let w = gpt(32, 4096, 32, 64, "full");
    let p = predict(&w, &arch, &net, &Strategy::parse("t4-p2-d8-mb1").unwrap()).unwrap();
    assert_eq!(p.mappings_tried, 6);
    // The best mapping keeps tensor parallelism inside the NVLink node.
    let tensor = p
        .mapping
        .spans
        .iter()
        .find(|(a, _)| *a == Axis::Tensor)
        .unwrap();
    assert_eq!(tensor.1, vec!["nvlink".to_string()]);
    assert!(p.pipeline_bubble_s > 0.0 && p.exposed_communication_s > 0.0);
    assert!(p
        .communication
        .iter()
        .any(|c| c.collective == Collective::AllReduce && c.blocking));
    assert!(p.model_flops_utilization > 0.2 && p.model_flops_utilization < 0.7);
}

#[test]
fn a_model_too_big_for_memory_is_infeasible_with_reasons() {
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 8).unwrap();
    let w = Workload::load(Source::Disk, &root().join("workloads/gpt3-175b.yaml")).unwrap();
    let mut s = Strategy::parse("t8").unwrap();
    s.micro_batch = 1;
    let w = match w {
        Workload::Transformer(mut t) => {
            t.global_batch = 8;
            Workload::Transformer(t)
        }
        _ => unreachable!(),
    };
    let p = predict(&w, &arch, &net, &s).unwrap();
    assert!(!p.feasible);
    assert!(
        p.violations[0].memory_excess().is_some(),
        "{:?}",
        p.violations
    );
}

// ------------------------------------------------------------------ bad input

#[test]
fn bad_strategies_and_systems_fail_with_exit_2_and_a_clear_message() {
    use common::stackflow;
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "16",
        "--strategy",
        "t8-d4",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("must multiply to the device count"), "{err}");
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--strategy",
        "t8-q2",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("expected a string such as RC-4-2-d8-p2"),
        "{err}"
    );
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/tpu-v4-pod.yaml",
        "--devices",
        "256",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("a topology matching the 256 devices"), "{err}");
    // TPU v4 slices are whole 4x4x4 blocks.
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/tpu-v4-pod.yaml",
        "--slice",
        "4x6x16",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("compose from [4, 4, 4] blocks: 4i x 4j x 4k"),
        "{err}"
    );
    // A block is checked by its own field: an extent of 0 or beyond its dimension, one
    // extent per dimension, and only on a dimensional topology.
    let dir = Scratch::new("dist-block");
    let pod = std::fs::read_to_string(root().join("templates/tpu-v4-pod.yaml"))
        .unwrap()
        .replace(
            "accelerator: ../",
            &format!("accelerator: {}/", root().display()),
        );
    for (i, (from, to, says)) in [
        (
            "block: [4, 4, 4]",
            "block: [0, 4, 4]",
            "fabrics[0].block[0] = 0: expected an integer from 1 to 8",
        ),
        (
            "block: [4, 4, 4]",
            "block: [4, 16, 4]",
            "fabrics[0].block[1] = 16: expected an integer from 1 to 8",
        ),
        (
            "block: [4, 4, 4]",
            "block: [4, 4]",
            "fabrics[0].block = [4, 4]: one extent per dimension of topology.dims ([8, 8, 8]: 3)",
        ),
        (
            "{kind: torus, dims: [8, 8, 8]}",
            "{kind: ring}",
            "fabrics[0].block = [4, 4, 4]: no block: blocks compose slices of a torus",
        ),
        // A topology takes the fields of its kind and no others.
        (
            "{kind: torus, dims: [8, 8, 8]}",
            "{kind: switch, size: 8}",
            "fabrics[0].topology.size: unknown field `size`, expected one of `kind`, `dims`, `levels`",
        ),
        (
            "{kind: torus, dims: [8, 8, 8]}",
            "{kind: fat_tree, dims: [8, 8, 8]}",
            "fabrics[0].topology: a fat tree takes no dims",
        ),
        (
            "{kind: torus, dims: [8, 8, 8]}",
            "{kind: torus, levels: 2}",
            "fabrics[0].topology: a torus takes no levels (only a fat tree does)",
        ),
        (
            "{kind: torus, dims: [8, 8, 8]}",
            "{kind: mesh}",
            "fabrics[0].topology: a mesh needs its dims",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(pod.contains(from));
        let f = dir.write(&format!("pod{i}.yaml"), &pod.replace(from, to));
        let (code, _, err) = stackflow(&["predict", "--system", &f]);
        assert_eq!(code, 2, "{to}: {err}");
        assert!(err.contains(says), "{to}: {err}");
    }
    let (code, out, err) = stackflow(&[
        "predict",
        "--system",
        "templates/tpu-v4-pod.yaml",
        "--slice",
        "4x8x16",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--strategy",
        "p16-d4-t8-mb1-rc=full",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"], 512);
    let (code, _, err) = stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "12",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("multiple of the 8 devices per node"), "{err}");
}

#[test]
fn strategy_files_match_strings() {
    let s = Strategy::from_yaml(
        "s.yaml",
        "data: 16\ntensor: 8\npipeline: 8\nmicro_batch: 1\ninterleave: 3\nsequence_parallel: true\nrecompute: selective\n",
    )
    .unwrap();
    assert_eq!(
        s,
        Strategy::parse("t8-p8-d16-mb1-i3-sp-rc=selective").unwrap()
    );
    let rc = Strategy::from_yaml(
        "s.yaml",
        "kernel: {type: rc, kp1: 4, kp2: 2}\ndata: 8\npipeline: 2\n",
    )
    .unwrap();
    assert_eq!(rc, Strategy::parse("RC-4-2-d8-p2").unwrap());
    let e = Strategy::from_yaml("s.yaml", "data: 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("s.yaml: data = 0"), "{e}");
}

#[test]
fn mad_max_hierarchical_strategies_place_their_levels() {
    // The 1.7B GPT of Narayanan Table 1 at its batch of 512.
    let dir = common::Scratch::new("madmax");
    let text = std::fs::read_to_string(root().join("workloads/gpt-1.7b.yaml")).unwrap();
    let workload = dir.write(
        "gpt.yaml",
        &text.replace("global_batch: 4 ", "global_batch: 512 "),
    );
    let span = |strategy: &str| -> serde_json::Value {
        let (code, out, err) = common::stackflow(&[
            "predict",
            "--system",
            "templates/dgx-a100.yaml",
            "--devices",
            "32",
            "--workload",
            &workload,
            "--strategy",
            strategy,
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v
    };
    // (TP, DDP): tensor parallelism on the NVSwitch, data parallelism over InfiniBand;
    // (DDP, TP) the other way round, and slower: per-layer all-reduces cross the slow fabric.
    let tp_ddp = span("(TP, DDP)");
    let ddp_tp = span("(DDP, TP)");
    let spans = |v: &serde_json::Value| v["mapping"]["spans"].to_string();
    assert_eq!(
        spans(&tp_ddp),
        r#"[["tensor",["nvlink"]],["data",["infiniband"]]]"#
    );
    assert_eq!(
        spans(&ddp_tp),
        r#"[["tensor",["infiniband"]],["data",["nvlink"]]]"#
    );
    let time = |v: &serde_json::Value| v["time_per_iteration_s"].as_f64().unwrap();
    assert!(time(&tp_ddp) < time(&ddp_tp));
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--strategy",
        "(DDP, FSDP)",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("expected MAD Max's (INTRA, INTER)"), "{err}");
}

#[test]
fn the_cli_prints_mapping_and_breakdown() {
    let (code, out, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "16",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--strategy",
        "t2-p2-d4-mb1",
        "--grid-kg-per-kwh",
        "0.4",
        "--pue",
        "1.2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Operational CO2e of all 16 devices' energy (TPU v4 paper Sec. 7.6).
    let energy = v["energy_j"].as_f64().unwrap();
    let kg = v["co2e_kg_per_iteration"].as_f64().unwrap();
    assert!(energy > 0.0 && (kg / (energy / 3.6e6 * 1.2 * 0.4) - 1.0).abs() < 1e-12);
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/dgx-a100.yaml",
        "--grid-kg-per-kwh=-1",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--grid-kg-per-kwh -1: expected"), "{err}");
    for key in [
        "mapping",
        "exposed_communication_s",
        "pipeline_bubble_s",
        "model_flops_utilization",
    ] {
        assert!(v.get(key).is_some(), "{key} missing");
    }
}

#[test]
fn dlrm_a_on_zionex_serialized_iteration_and_exposed_communication() {
    // MAD Max Table 1 (V2): DLRM-A on 128 A100-40GB (ZionEX), serialized iteration 67.40 ms,
    // 82.37% of communication exposed. Tables sharded table-wise over all 128 GPUs, dense
    // layers data parallel, pooled embeddings all-to-all in fp16 (workloads/dlrm-a.yaml).
    let (system, a100) = system("templates/zionex.yaml");
    let net = system.network(&a100, 128).unwrap();
    let dlrm = Workload::load(Source::Disk, &root().join("workloads/dlrm-a.yaml")).unwrap();
    let pr = predict(&dlrm, &a100, &net, &Strategy::parse("d128").unwrap()).unwrap();
    println!(
        "DLRM-A: serialized {:.2} ms (measured 67.40), exposed {:.1}% (measured 82.37%), iteration {:.2} ms",
        pr.serialized_time_s * 1e3,
        pr.exposed_communication_fraction * 100.0,
        pr.time_per_iteration_s * 1e3
    );
    assert!(pr.feasible, "{:?}", pr.violations);
    assert_close(
        "DLRM-A serialized iteration",
        pr.serialized_time_s,
        67.40e-3,
        0.15,
    );
    // The dense-gradient all-reduce shares the RoCE ports with the backward all-to-all
    // it overlaps: the all-to-all, and compute waiting on it, run late.
    let exposed = pr.exposed_communication_fraction * 100.0;
    assert!((exposed - 82.37).abs() <= 10.0, "exposed {exposed:.1}%");
    // Energy from the technology energies stays under the 128 GPUs' 400 W TDP.
    let per_gpu = pr.average_power_w / 128.0;
    assert!(per_gpu > 10.0 && per_gpu < 400.0, "{per_gpu} W");
    let a2a = pr
        .communication
        .iter()
        .find(|c| c.collective == Collective::AllToAll)
        .expect("pooled embeddings cross all-to-all");
    assert!(a2a.blocking && a2a.calls == 2.0, "{a2a:?}");
}

#[test]
fn zion_all_to_all_of_100_kb_is_faster_fully_connected() {
    // Zion Sec. IV-C: DLRM all-to-all messages are ~100 KB, where the fully connected
    // fabric beats the ring (up to ~3x) through its diameter of one.
    let path = root().join("templates/zion.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let budget = root().join("budgets/v100.yaml");
    let time = |topology: &str| {
        let t = text
            .replace("../budgets/v100.yaml", &budget.display().to_string())
            .replace("{kind: ring}", topology);
        let s = System::from_yaml(&path.display().to_string(), &t).unwrap();
        let a = s.accelerator().unwrap();
        let net = s.network(&a, 8).unwrap();
        let groups = vec![(0..8).collect::<Vec<u64>>()];
        net.group_link(&groups).time(Collective::AllToAll, 100e3)
    };
    let (ring, fc) = (time("{kind: ring}"), time("{kind: fully_connected}"));
    println!(
        "all-to-all of 100 KB on 8 OAMs: ring {:.2} us, fully connected {:.2} us",
        ring * 1e6,
        fc * 1e6
    );
    assert!(fc < ring, "{fc} vs {ring}");
    assert!(ring / fc > 2.0, "{}", ring / fc);
}

/// `stackflow validate` on `text` written as `validation/{name}` (beside the index, so its
/// relative paths resolve), the file removed after; with the file's path.
fn validate_beside(name: &str, text: &str) -> ((i32, String, String), String) {
    let beside = root().join("validation").join(name);
    std::fs::write(&beside, text).unwrap();
    let path = beside.display().to_string();
    let run = common::stackflow(&["validate", &path]);
    let _ = std::fs::remove_file(&beside);
    (run, path)
}

/// Every published measurement the model replays (validation/cases.yaml: LLaMA-65B,
/// DLRM-A, Megatron weak scaling, TPU v4 Table 3, twisted torus, TPU v4 over v3, GEMM
/// ceilings), through the CLI as a user runs it; it exits non-zero when a case leaves its
/// tolerance.
#[test]
fn stackflow_validate_replays_the_published_measurements() {
    let (code, out, err) = common::stackflow(&["validate"]);
    println!("{out}");
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, json, _) = common::stackflow(&["validate", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in ["V1", "V2", "V3", "V4/V5", "V6", "V7", "TPU Fig. 9", "GEMM"] {
        assert!(ids.contains(&id), "{id} missing");
    }
    // TPU v4 Fig. 9: SparseCores over embeddings in CPU memory (5-7x) is counted, within
    // 10% of 6x.
    let fig9 = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "TPU Fig. 9" && c["name"].as_str().unwrap().contains("CPU memory"))
        .expect("Fig. 9's CPU-hosted bar");
    assert_eq!(fig9["within"], true, "{fig9}");
    // Families of three or more cases carry their mean signed error.
    let megatron: Vec<f64> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "V3")
        .map(|c| c["error"].as_f64().unwrap())
        .collect();
    let family = v["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "V3")
        .expect("the Megatron family");
    assert_eq!(family["cases"], 10);
    // Every Megatron row on its own within 8%; no count of rows passes the family.
    assert!(v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "V3")
        .all(|c| c["within"] == true && c["error"].as_f64().unwrap().abs() <= 8.0));
    assert!(
        v.get("groups").is_none(),
        "no group rule: {}",
        v["families"]
    );
    assert_eq!(family["limit"], 3.0);
    assert_eq!(family["within"], true);
    assert_close(
        "Megatron mean signed error",
        family["mean_signed_error"].as_f64().unwrap(),
        megatron.iter().sum::<f64>() / 10.0,
        1e-12,
    );
    assert!(
        !v["families"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "V2" || f["id"] == "V1"),
        "families of fewer than three cases are not summarised"
    );
    let printed = format!(
        "V3: mean signed error {:+.1}% over 10 cases (bound +-3.0%): ok",
        megatron.iter().sum::<f64>() / 10.0
    );
    assert!(out.contains(&printed), "{printed} in {out}");
    // Mean power per chip sits above the idle floor (Table 4: 90 W v4, 123 W v3), and
    // performance per watt is the speedup times the power ratio of the same runs.
    let case = |name: &str| -> f64 {
        v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing"))["predicted"]
            .as_f64()
            .unwrap()
    };
    let (v4_w, v3_w) = (
        case("TPU v4 mean power per chip"),
        case("TPU v3 mean power per chip"),
    );
    // Above idle plus active power (90 + 31 W, 123 + 52 W): the work adds to the floor.
    assert!(v4_w > 121.0 && v3_w > 175.0, "{v4_w} {v3_w}");
    assert_close(
        "perf/W",
        case("TPU v4 over v3 performance per watt"),
        case("TPU v4 over TPU v3, GPT-3") * v3_w / v4_w,
        1e-9,
    );
    // The GEMM ceilings set the templates' max_utilization, NeMo's FP8 pre-training H100's
    // FP8 cap and TPU v4's mean power the N7 systolic array's power: the calibration cases,
    // judged apart from the held-out rest.
    let counted: Vec<&serde_json::Value> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["known_gap"].is_null() && c["unit"] != "%")
        .collect();
    let split = |calibration: bool| -> (usize, f64) {
        let e: Vec<f64> = counted
            .iter()
            .filter(|c| c["calibrates"].is_null() != calibration)
            .map(|c| c["error"].as_f64().unwrap().abs())
            .collect();
        (e.len(), e.iter().sum::<f64>() / e.len() as f64)
    };
    let (cal, held) = (split(true), split(false));
    assert!(counted
        .iter()
        .filter(|c| !c["calibrates"].is_null())
        .all(|c| c["id"] == "GEMM"
            || c["id"] == "NeMo H100"
            || c["name"].as_str().unwrap().starts_with("TPU v4 mean power")
            || (c["id"] == "ServingLoad" && c["name"].as_str().unwrap().contains(" L1 "))));
    // Three GEMMs, NeMo's FP8 pre-training, TPU v4's mean power and L1 under load (its ITL,
    // and its throughput and request latency, which follow from it).
    assert_eq!(cal.0, 8);
    assert_eq!(v["calibration"]["cases"], 8);
    assert_eq!(v["held_out"]["cases"], held.0);
    assert_close(
        "held-out mean",
        v["held_out"]["mean_abs_error_pct"].as_f64().unwrap(),
        held.1,
        1e-12,
    );
    assert_close(
        "calibration mean",
        v["calibration"]["mean_abs_error_pct"].as_f64().unwrap(),
        cal.1,
        1e-12,
    );
    // The training families (every counted case outside the two serving families): their
    // mean |error| over the same counted cases.
    let training: Vec<f64> = counted
        .iter()
        .filter(|c| c["id"] != "Serving" && c["id"] != "ServingLoad")
        .map(|c| c["error"].as_f64().unwrap().abs())
        .collect();
    assert_eq!(v["training"]["all"]["cases"], training.len());
    assert_close(
        "training mean",
        v["training"]["all"]["mean_abs_error_pct"].as_f64().unwrap(),
        training.iter().sum::<f64>() / training.len() as f64,
        1e-12,
    );
    assert_eq!(
        v["training"]["calibration"]["cases"].as_u64().unwrap()
            + v["training"]["held_out"]["cases"].as_u64().unwrap(),
        training.len() as u64
    );
    let gaps = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["known_gap"].is_null() && c["id"] != "Serving" && c["id"] != "ServingLoad")
        .count();
    assert_eq!(v["training"]["known_gaps"], gaps);
    let printed = format!(
        "training families (all but serving): {} cases, mean |error| {:.1}% (bound 4.0%: ok)",
        training.len(),
        training.iter().sum::<f64>() / training.len() as f64
    );
    assert!(out.contains(&printed), "{printed} in {out}");
    // Issue 18's bounds on the training families: mean |error| at most 4% (judged), the
    // held-out mean at most 1.5x the calibration mean (reported as met or not).
    let (t_cal, t_held) = (
        v["training"]["calibration"]["mean_abs_error_pct"]
            .as_f64()
            .unwrap(),
        v["training"]["held_out"]["mean_abs_error_pct"]
            .as_f64()
            .unwrap(),
    );
    let met = t_held <= 1.5 * t_cal;
    assert_eq!(v["training"]["held_out_within"], met);
    assert_eq!(v["training"]["mean_within"], true);
    let verdict = format!(
        "{:.1}x the calibration's; issue 18 asks at most 1.5x: {}",
        t_held / t_cal,
        if met { "met" } else { "not met" }
    );
    assert!(out.contains(&verdict), "{verdict} in {out}");
    // A case outside its tolerance fails the run. The index refers to ../templates and
    // its siblings, so the stricter copy sits beside it.
    let text = std::fs::read_to_string(root().join("validation/cases.yaml"))
        .unwrap()
        .replace(
            "measured: 20.83\n    tolerance: 0.08",
            "measured: 20.83\n    tolerance: 0.001",
        );
    assert!(text.contains("tolerance: 0.001"));
    let ((code, out, err), _) = validate_beside("strict-cases.tmp.yaml", &text);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("OUTSIDE") && err.contains("validation failed"),
        "{out}\n{err}"
    );
    // Every case within its tolerance, and still the run fails when the training cases'
    // mean |error| passes 4%: TPU v3's power against 250 W is -10.9%, inside 15%.
    let lone = "version: 1\ncases:\n  - id: TPU Table 4\n    name: \"TPU v3 mean power\"\n    \
                source: \"a test\"\n    kind: mean_power_w\n    system: ../templates/tpu-v3-pod.yaml\n    \
                devices: 512\n    workload: ../workloads/gpt3-175b.yaml\n    \
                strategy: p16-d4-t8-mb1-rc=full\n    measured: 250\n    tolerance: 0.15\n";
    let ((code, out, err), _) = validate_beside("lone-case.tmp.yaml", lone);
    assert_ne!(code, 0, "{out}");
    assert!(
        !out.contains("OUTSIDE")
            && out.contains("(bound 4.0%: FAILED)")
            && err.contains("validation failed"),
        "{out}\n{err}"
    );
    // A training case's tolerance is capped by what it measures (times and throughputs 8%,
    // ratios 10%, power 15%): a wider one is bad input naming the case's field.
    for (from, to, field, says) in [
        (
            "measured: 20.83\n    tolerance: 0.08",
            "measured: 20.83\n    tolerance: 0.15",
            "validation/wide-cases.tmp.yaml: cases[0].tolerance = 0.15",
            "8% at most",
        ),
        (
            "measured: 2.1\n    tolerance: 0.10",
            "measured: 2.1\n    tolerance: 0.2",
            "validation/wide-cases.tmp.yaml: cases[9].tolerance = 0.2",
            "a ratio is held to 10% at most",
        ),
        (
            "batch: 1536\n    tolerance: 0.10",
            "batch: 1536\n    tolerance: 0.3",
            "validation/wide-cases.tmp.yaml: cases[6].tolerance = 0.3",
            "a ratio is held to 10% at most",
        ),
        (
            "measured: 170\n    tolerance: 0.15",
            "measured: 170\n    tolerance: 0.2",
            "validation/wide-cases.tmp.yaml: cases[14].tolerance = 0.2",
            "a power is held to 15% at most",
        ),
        (
            "file: gemm.yaml",
            "file: gemm-wide.tmp.yaml",
            "validation/gemm-wide.tmp.yaml: cases[1].tolerance = 0.09",
            "a throughput is held to 8% at most",
        ),
    ] {
        let text = std::fs::read_to_string(root().join("validation/cases.yaml"))
            .unwrap()
            .replacen(from, to, 1);
        assert!(text.contains(to), "{to}");
        let beside = root().join("validation/wide-cases.tmp.yaml");
        std::fs::write(&beside, text).unwrap();
        // The GEMM rows' own file, its second row widened, for the last entry.
        let gemms = root().join("validation/gemm-wide.tmp.yaml");
        let rows = std::fs::read_to_string(root().join("validation/gemm.yaml")).unwrap();
        let (first, rest) = rows.split_at(rows.find("tolerance: 0.08").unwrap() + 1);
        std::fs::write(
            &gemms,
            format!(
                "{first}{}",
                rest.replacen("tolerance: 0.08", "tolerance: 0.09", 1)
            ),
        )
        .unwrap();
        let (code, _, err) = common::stackflow(&["validate", &beside.display().to_string()]);
        let _ = std::fs::remove_file(&beside);
        let _ = std::fs::remove_file(&gemms);
        assert_eq!(code, 2, "{err}");
        for piece in [field, says] {
            assert!(err.contains(piece), "expected {piece:?} in: {err}");
        }
    }
    // A family whose errors lean one way beyond its bound fails the run with every case
    // within its tolerance (the Megatron rows' mean lies above 0.1%); a bound that is no
    // bound is bad input.
    let index = std::fs::read_to_string(root().join("validation/cases.yaml")).unwrap();
    let bound = |b: &str| {
        let text = index.replacen(
            "    tolerance: 0.08\n    mean_signed_within: 0.03",
            &format!("    tolerance: 0.08\n    mean_signed_within: {b}"),
            1,
        );
        assert!(text.contains(&format!("mean_signed_within: {b}")));
        validate_beside(&format!("bias-{b}.tmp.yaml"), &text)
    };
    let ((code, out, err), _) = bound("0.001");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("(bound +-0.1%): FAILED")
            && !out.contains("OUTSIDE")
            && err.contains("validation failed"),
        "{out}\n{err}"
    );
    let ((code, _, err), file) = bound("-0.03");
    assert_eq!(code, 2, "{err}");
    for piece in [
        file.as_str(),
        "cases[V3].mean_signed_within",
        "-0.03",
        "> 0",
    ] {
        assert!(err.contains(piece), "expected {piece:?} in: {err}");
    }
    // A training family of three counted cases is held to +-3% without asking: a third
    // twisted-torus point (both lean high, +6-7%) makes V6 fail as a family.
    let third = "  - id: V6\n    name: \"all-to-all, twisted over regular torus\"\n    \
                 source: \"TPU v4 paper Fig. 6 (1.63x)\"\n    kind: twisted_torus\n    \
                 dims: [4, 4, 8]\n    measured: 1.63\n    tolerance: 0.10\n";
    let at = index.find("  - id: V7").unwrap();
    let text = format!("{}{third}{}", &index[..at], &index[at..]);
    let ((code, out, err), _) = validate_beside("lean-v6.tmp.yaml", &text);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("V6: mean signed error +6.8% over 3 cases (bound +-3.0%): FAILED")
            && err.contains("validation failed"),
        "{out}\n{err}"
    );
}

#[test]
fn experts_spread_over_expert_parallel_groups_with_all_to_all() {
    // MAD Max's LLM-MoE (16 experts, 2 active) on 1024 A100s: expert parallelism shards the
    // experts and adds blocking all-to-all dispatch and combine; without it, none.
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 1024).unwrap();
    let moe = Workload::load(Source::Disk, &root().join("workloads/llm-moe.yaml")).unwrap();
    let run = |s: &str| predict(&moe, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let (plain, spread) = (run("t8-p8-d16-mb1"), run("t8-p8-d16-e16-mb1"));
    let a2a = |p: &stackflow::distributed::DistPrediction| {
        p.communication
            .iter()
            .filter(|c| c.collective == Collective::AllToAll)
            .map(|c| c.time_s)
            .sum::<f64>()
    };
    println!(
        "LLM-MoE: weights {:.1} -> {:.1} GiB per GPU, all-to-all {:.3} s, iteration {:.2} -> {:.2} s",
        plain.weights_bytes / 2f64.powi(30),
        spread.weights_bytes / 2f64.powi(30),
        a2a(&spread),
        plain.time_per_iteration_s,
        spread.time_per_iteration_s
    );
    assert_eq!(a2a(&plain), 0.0);
    assert!(a2a(&spread) > 0.0);
    assert!(spread.weights_bytes < plain.weights_bytes / 4.0);
    // Bad input: more active experts than experts, experts that do not split over e.
    let dir = common::Scratch::new("moe-bad");
    let text = std::fs::read_to_string(root().join("workloads/llm-moe.yaml")).unwrap();
    let bad = dir.write("bad.yaml", &text.replace("top_k: 2", "top_k: 17"));
    let (code, _, err) = common::stackflow(&["predict", "--workload", &bad]);
    assert_eq!(code, 2);
    assert!(
        err.contains("moe.top_k = 17: at most moe.experts (16)"),
        "{err}"
    );
    let e = predict(
        &moe,
        &arch,
        &net,
        &Strategy::parse("t8-p4-d32-e32-mb1").unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("16 experts do not split evenly over expert parallelism e32"),
        "{e}"
    );
}

#[test]
fn expert_gradients_synchronise_among_the_experts_replicas() {
    // An expert lives on every e-th rank of the data group, so its gradients are all-reduced
    // over those d/e replicas, not over the whole data group; with e = d nothing is
    // replicated and nothing synchronised. ZeRO shards an expert's state over its replicas.
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 1024).unwrap();
    let moe = Workload::load(Source::Disk, &root().join("workloads/llm-moe.yaml")).unwrap();
    let graph = moe.graph();
    let run = |s: &str| predict(&moe, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let (whole, half) = (run("t8-p8-d16-e16-mb1"), run("t8-p8-d16-e8-mb1"));
    let line = |p: &stackflow::distributed::DistPrediction, name: &str| {
        p.communication
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.axis, c.group, c.bytes * c.calls))
    };
    // Per device of the first stage: 12 of 96 layers, 1/8 of the experts, 1/8 of the width.
    let experts = graph.expert_parameters * 12.0 / 96.0 / 8.0 / 8.0 * 2.0;
    assert_eq!(line(&whole, "expert gradient sync"), None);
    let (axis, group, sent) = line(&half, "expert gradient sync").unwrap();
    assert_eq!((axis, group), (Axis::ExpertReplica, 2));
    assert_close("expert gradient bytes", sent, experts, 1e-9);
    // The dense gradients are the same either way, over all 16 data ranks.
    let (dense, dense_half) = (
        line(&whole, "gradient sync").unwrap(),
        line(&half, "gradient sync").unwrap(),
    );
    assert_eq!((dense.0, dense.1), (Axis::Data, 16));
    assert_close("dense gradient bytes", dense_half.2, dense.2, 1e-9);
    // ZeRO-1: the experts' Adam state (12 B per weight) splits over 2 replicas, the dense
    // state over 16.
    // ZeRO-2 shards gradients the same way; ZeRO-3 gathers an expert among its replicas.
    let z2 = run("t8-p8-d16-e8-mb1-z2");
    let dense_grads = half.gradients_bytes - experts;
    assert_close(
        "ZeRO-2 gradients",
        z2.gradients_bytes,
        dense_grads / 16.0 + experts / 2.0,
        1e-9,
    );
    let z3 = run("t8-p8-d16-e8-mb1-z3");
    let gather = line(&z3, "expert weight gather").unwrap();
    assert_eq!((gather.0, gather.1), (Axis::ExpertReplica, 2));
    // Without repeated layers (DLRM-A-MoE, 16 experts over e16 of d128), each weight's
    // gradient leaves on its own: the experts' among their 8 replicas, bytes exact.
    let (zsys, zarch) = system("templates/zionex.yaml");
    let znet = zsys.network(&zarch, 128).unwrap();
    let dmoe = Workload::load(Source::Disk, &root().join("workloads/dlrm-a-moe.yaml")).unwrap();
    let p = predict(&dmoe, &zarch, &znet, &Strategy::parse("d128-e16").unwrap()).unwrap();
    let (axis, group, sent) = line(&p, "expert gradient sync").unwrap();
    assert_eq!((axis, group), (Axis::ExpertReplica, 8));
    assert_close(
        "DLRM expert gradient bytes",
        sent,
        dmoe.graph().expert_parameters / 16.0 * 2.0,
        1e-9,
    );
    // RC/CR kernel parallelism does not split experts: refused.
    let rc = predict(
        &moe,
        &arch,
        &net,
        &Strategy::parse("RC-8-8-d16-e8").unwrap(),
    )
    .unwrap_err();
    assert!(rc.message.contains("not with RC/CR"), "{rc}");
    let z1 = run("t8-p8-d16-e8-mb1-z1");
    let (adam, expert_weights) = (12.0, experts / 2.0);
    let dense_weights = half.optimizer_state_bytes / adam - expert_weights;
    assert_close(
        "ZeRO-1 optimizer state",
        z1.optimizer_state_bytes,
        (dense_weights / 16.0 + expert_weights / 2.0) * adam,
        1e-9,
    );
}

#[test]
fn fine_tuning_frozen_layers_skip_their_backward_and_gradients() {
    // LLaMA-65B with only the last 8 of 80 layers (and the head) trained: the forward is
    // whole, the backward a tenth, frozen weights keep no gradients, optimizer state or
    // gradient traffic.
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 2048).unwrap();
    let text = std::fs::read_to_string(root().join("workloads/llama-65b.yaml")).unwrap();
    let full = Workload::from_yaml("llama-65b.yaml", &text).unwrap();
    let tuned = Workload::from_yaml(
        "ft.yaml",
        &format!("{text}fine_tuning: {{trainable_layers: 8}}\n"),
    )
    .unwrap();
    let s = Strategy::parse("t8-p4-d64-mb1-sp-rc=selective").unwrap();
    let (a, b) = (
        predict(&full, &arch, &net, &s).unwrap(),
        predict(&tuned, &arch, &net, &s).unwrap(),
    );
    let ratio = b.time_per_iteration_s / a.time_per_iteration_s;
    // The 8 trainable layers all sit on the last of 4 stages (20 layers each): that stage
    // runs its forward and 8/20 of its backward, ~1/3 + 2/3 x 0.4 = 0.6 of before.
    println!("fine-tuning 8 of 80 layers over 4 stages: {ratio:.3} of the pre-training iteration");
    assert!((0.5..0.7).contains(&ratio), "{ratio}");
    // Without pipelining every device runs the whole forward and a tenth of the backward.
    let flat = Strategy::parse("t8-d256-mb1-sp-rc=selective").unwrap();
    let unpiped = predict(&tuned, &arch, &net, &flat)
        .unwrap()
        .time_per_iteration_s
        / predict(&full, &arch, &net, &flat)
            .unwrap()
            .time_per_iteration_s;
    println!("without pipelining: {unpiped:.3}");
    assert!((0.33..0.5).contains(&unpiped), "{unpiped}");
    // The busiest device (last stage) trains 8 of its 20 layers.
    assert!(b.gradients_bytes < 0.5 * a.gradients_bytes);
    assert!(b.optimizer_state_bytes < 0.5 * a.optimizer_state_bytes);
    assert_eq!(b.weights_bytes, a.weights_bytes);
    let sync = |p: &stackflow::distributed::DistPrediction| {
        p.communication
            .iter()
            .find(|c| c.name == "gradient sync")
            .map_or(0.0, |c| c.bytes)
    };
    assert!(sync(&b) < 0.15 * sync(&a));
    let e = Workload::from_yaml(
        "ft.yaml",
        &format!("{text}fine_tuning: {{trainable_layers: 81}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("fine_tuning.trainable_layers = 81: at most layers (80)"),
        "{e}"
    );
}

#[test]
fn dlrm_dense_layers_split_by_tensor_parallelism() {
    // MAD Max's ((TP, DDP), (MP)) on ZionEX: the MLPs split over the 8 GPUs of a node in
    // Megatron pairs, replicas across nodes, tables sharded over all 128.
    let (sys, arch) = system("templates/zionex.yaml");
    let net = sys.network(&arch, 128).unwrap();
    let dlrm = Workload::load(Source::Disk, &root().join("workloads/dlrm-a.yaml")).unwrap();
    let run = |s: Strategy| predict(&dlrm, &arch, &net, &s).unwrap();
    let ddp = run(Strategy::parse("d128").unwrap());
    let tp = run(Strategy::from_madmax("(TP, DDP)", 8, 128).unwrap());
    let fsdp = run(Strategy::from_madmax("(FSDP, FSDP)", 8, 128).unwrap());
    println!(
        "DLRM-A: DDP {:.1} ms, (TP, DDP) {:.1} ms, FSDP {:.1} ms",
        ddp.time_per_iteration_s * 1e3,
        tp.time_per_iteration_s * 1e3,
        fsdp.time_per_iteration_s * 1e3
    );
    assert!(tp.feasible && fsdp.feasible && ddp.feasible);
    // Dense gradients and optimizer state split 8 ways; partial sums cross NVLink.
    assert!(tp.gradients_bytes < ddp.gradients_bytes / 7.0);
    assert!(tp
        .communication
        .iter()
        .any(|c| c.name == "tensor all-reduce" && c.blocking && c.group == 8));
}

#[test]
fn hybrid_sharding_gathers_inside_a_node_and_holds_a_node_s_share() {
    // LLaMA-65B on 8 DGX A100 nodes: FSDP over all 64 GPUs against MAD Max's (FSDP, DDP),
    // weights sharded over a node's 8 GPUs (NVLink) and the 8 nodes replicating them.
    let (sys, arch) = system("templates/dgx-a100.yaml");
    let net = sys.network(&arch, 64).unwrap();
    let llama = Workload::load(Source::Disk, &root().join("workloads/llama-65b.yaml")).unwrap();
    let run = |s: Strategy| predict(&llama, &arch, &net, &s).unwrap();
    let full = run(Strategy::parse("d64-mb1-z3-rc=full").unwrap());
    let hybrid = run(Strategy::parse("d64-mb1-z3-hs8-rc=full").unwrap());
    let madmax = Strategy::from_madmax("(FSDP, DDP)", 8, 64).unwrap();
    assert_eq!((madmax.shard, madmax.zero), (8, 3));
    // A node's share of the weights, gradients and optimizer state: 8 times FSDP's.
    let ratio = hybrid.weights_bytes / full.weights_bytes;
    assert!((ratio - 8.0).abs() < 1e-9, "{ratio}");
    assert!((hybrid.optimizer_state_bytes / full.optimizer_state_bytes - 8.0).abs() < 1e-9);
    let comm = |p: &stackflow::distributed::DistPrediction, name: &str| {
        p.communication
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .clone()
    };
    // Gathers and reduce-scatters stay inside a node, on NVLink: faster per byte.
    let (g_full, g_hybrid) = (comm(&full, "weight gather"), comm(&hybrid, "weight gather"));
    assert_eq!((g_full.group, g_hybrid.group), (64, 8));
    assert!(
        g_hybrid.time_s < g_full.time_s,
        "{g_hybrid:?} vs {g_full:?}"
    );
    // The nodes then all-reduce their shards: 1/8 of the gradients over 8 replicas.
    let sync = comm(&hybrid, "gradient sync");
    assert_eq!((sync.group, sync.collective), (8, Collective::AllReduce));
    let per_device = sync.bytes * sync.calls;
    assert!(
        (per_device / hybrid.gradients_bytes - 1.0).abs() < 1e-6,
        "{per_device}"
    );
    assert!(hybrid
        .mapping
        .spans
        .iter()
        .any(|(a, s)| *a == stackflow::parallel::Axis::Shard && s == &["nvlink".to_string()]));
}

/// `arch` and `net` with one resource (a [`Scaling`] name) scaled by `f` (MAD Max Fig. 14).
fn scaled(arch: &Architecture, net: &Network, resource: &str, f: f64) -> (Architecture, Network) {
    let mut scaling = Scaling::default();
    scaling.set(resource, f).unwrap();
    let mut a = arch.clone();
    scaling.architecture(&mut a);
    let mut fabrics = net.fabrics.clone();
    scaling.fabrics(&mut fabrics);
    (a, Network::new(fabrics))
}

#[test]
fn mad_max_insights_on_dlrm_a() {
    let dlrm = Workload::load(Source::Disk, &root().join("workloads/dlrm-a.yaml")).unwrap();
    let time = |arch: &Architecture, net: &Network, s: &Strategy| {
        let p = predict(&dlrm, arch, net, s).unwrap();
        assert!(p.feasible, "{:?}", p.violations);
        p.time_per_iteration_s
    };
    let tp_ddp = Strategy::from_madmax("(TP, DDP)", 8, 128).unwrap();
    let ddp = Strategy::parse("d128").unwrap();

    // Insight 1 (Fig. 9): on ZionEX, ((TP, DDP), (MP)) beats the FSDP baseline (1.14x in
    // the paper), whether FSDP prefetches its gathers or not.
    let (sys, a100) = system("templates/zionex.yaml");
    let zionex = sys.network(&a100, 128).unwrap();
    let tp = time(&a100, &zionex, &tp_ddp);
    for fsdp in ["d128-z3", "d128-z3-prefetch=off"] {
        let f = time(&a100, &zionex, &Strategy::parse(fsdp).unwrap());
        println!(
            "(TP, DDP) {:.1} ms against {fsdp} {:.1} ms",
            tp * 1e3,
            f * 1e3
        );
        assert!(tp < f, "{fsdp}: {f} <= {tp}");
    }

    // Insight 6 (Fig. 13): H100 nodes joined by an NVLink network instead of InfiniBand,
    // MAD Max's ~4.5x the inter-node bandwidth, speed DLRM-A up 1.82x. As MAD Max varies it:
    // the DGX H100 with 4.5x the bandwidth into its inter-node fabric.
    let (sys, h100) = system("templates/dgx-h100.yaml");
    let dgx = sys.network(&h100, 128).unwrap();
    let (h100_inter, dgx_inter) = scaled(&h100, &dgx, "inter_node", 4.5);
    // Here it gains 1.48x (DDP) and 1.6x ((TP, DDP)): the lookups alone, HBM-bound, take
    // 13.2 ms of DDP's 18.7 ms of compute, so even a free network would give DDP 1.79x of
    // its 33.5 ms, less than the paper's 1.82x. The speed-up is significant and below
    // that ceiling.
    for s in [&ddp, &tp_ddp] {
        let p = predict(&dlrm, &h100, &dgx, s).unwrap();
        let ceiling = p.time_per_iteration_s / p.compute_s;
        let speedup = p.time_per_iteration_s / time(&h100_inter, &dgx_inter, s);
        println!(
            "{s}: 4.5x inter-node bandwidth {speedup:.2}x (MAD Max 1.82x; no network {ceiling:.2}x)"
        );
        assert!(
            speedup > 1.4 && speedup < ceiling,
            "{s}: {speedup}, {ceiling}"
        );
    }
    // The SuperPOD template gives less: its NVLink network runs at NVLink's 0.65 of 225
    // GB/s (Calculon's efficiency), 146 GB/s against NDR InfiniBand's 0.9 of 48.5, 3.35x and
    // not 4.5x; its speed-up lies between the DGX's and the 4.5x what-if's.
    let (sys, h100_nvl) = system("templates/h100-superpod-nvl.yaml");
    let superpod = sys.network(&h100_nvl, 128).unwrap();
    for s in [&ddp, &tp_ddp] {
        let base = time(&h100, &dgx, s);
        let (nvl, inter) = (
            time(&h100_nvl, &superpod, s),
            time(&h100_inter, &dgx_inter, s),
        );
        println!("{s}: NVLink network {:.2}x", base / nvl);
        assert!(inter < nvl && nvl < base, "{s}: {inter} < {nvl} < {base}");
    }

    // Insight 7 (Fig. 14): 10x on any one resource but inter-node bandwidth gives DLRM-A
    // less than 2.5x (1.64x at most in the paper for training, 2.12x for inference);
    // inter-node bandwidth speeds the blocking all-to-all. Here 10x HBM bandwidth also
    // gains, as the table lookups are bound by it. Served, DLRM-A behaves the same: the
    // blocking all-to-all sets its latency.
    let serve = Workload::load(
        Source::Disk,
        &root().join("workloads/dlrm-a-inference.yaml"),
    )
    .unwrap();
    for (task, w) in [("training", &dlrm), ("inference", &serve)] {
        let time = |arch: &Architecture, net: &Network| {
            let p = predict(w, arch, net, &tp_ddp).unwrap();
            assert!(p.feasible, "{task}: {:?}", p.violations);
            p.time_per_iteration_s
        };
        let base = time(&a100, &zionex);
        let mut speedups = Vec::new();
        for r in Scaling::NAMES {
            let (a, n) = scaled(&a100, &zionex, r, 10.0);
            let x = base / time(&a, &n);
            println!("{task}, 10x {r}: {x:.2}x");
            speedups.push((r, x));
        }
        let (inter, others) = speedups.split_last().unwrap();
        for (r, x) in others {
            assert!(*x >= 1.0 - 1e-9 && *x < 2.5, "{task}, 10x {r}: {x}");
        }
        assert!(inter.1 > 1.5, "{task}, 10x inter-node: {}", inter.1);
        // Compute and intra-node bandwidth barely matter; capacity, at a fixed strategy,
        // not at all.
        let of = |r: &str| speedups.iter().find(|x| x.0 == r).unwrap().1;
        assert!(of("compute") < 1.1 && of("intra_node") < 1.1, "{task}");
        assert!((of("memory_capacity") - 1.0).abs() < 1e-9, "{task}");
    }
}

#[test]
fn tpu_v4_over_v3_on_a_dlrm_with_sparse_cores() {
    // TPU v4 paper Fig. 12: at the same slice size most applications run 1.5-2x faster on
    // v4, DLRM0 more. SparseCores run the embeddings beside the TensorCores (Sec. 3.5) and
    // the step takes the longer of the two (Fig. 10).
    let dlrm0 = Workload::load(Source::Disk, &root().join("workloads/dlrm0-tpu.yaml")).unwrap();
    let run = |file: &str, slice: &[u64]| {
        let (sys, arch) = system(file);
        let sys = sys.with_slice(slice).unwrap();
        let net = sys.network(&arch, slice.iter().product()).unwrap();
        predict(&dlrm0, &arch, &net, &Strategy::parse("d128").unwrap()).unwrap()
    };
    let v3 = run("templates/tpu-v3-pod.yaml", &[8, 16]);
    let v4 = run("templates/tpu-v4-pod.yaml", &[4, 4, 8]);
    assert!(v3.feasible && v4.feasible);
    // The workload's calibration: on v4 the SparseCores idle ~25% of the step (Fig. 10).
    let idle = 1.0 - v4.sparse_core_s / v4.time_per_iteration_s;
    let speedup = v3.time_per_iteration_s / v4.time_per_iteration_s;
    println!(
        "DLRM0-like on 128 chips: v3 {:.1} ms, v4 {:.1} ms ({speedup:.2}x); v4 SparseCores idle {:.0}%",
        v3.time_per_iteration_s * 1e3,
        v4.time_per_iteration_s * 1e3,
        idle * 100.0
    );
    assert!((0.15..=0.35).contains(&idle), "{idle}");
    assert!((1.5..=2.5).contains(&speedup), "{speedup}");
    // The pooled all-to-all runs on the SparseCores, not in the dense step.
    assert!(v4
        .communication
        .iter()
        .any(|c| c.name == "sparse-core all-to-all" && !c.blocking));
}

#[test]
fn embedding_optimizer_state_sits_beside_the_tables() {
    // DLRM-A's 3.1B rows on 128 A100s: row-wise Adagrad keeps one fp32 accumulator per row
    // (under 0.1 GiB a device); element-wise Adagrad one per element, as large as the fp32
    // tables themselves, which no longer fit. The fused update also moves the state of
    // every row it touches, so the iteration slows.
    let (sys, arch) = system("templates/zionex.yaml");
    let net = sys.network(&arch, 128).unwrap();
    let text: String = std::fs::read_to_string(root().join("workloads/dlrm-a.yaml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("embedding_optimizer:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = common::Scratch::new("embedding-optimizer");
    let with = |opt: &str| {
        let file = dir.write(
            &format!("{opt}.yaml"),
            &format!("{text}embedding_optimizer: {opt}\n"),
        );
        let w = Workload::load(Source::Disk, std::path::Path::new(&file)).unwrap();
        predict(&w, &arch, &net, &Strategy::parse("d128").unwrap()).unwrap()
    };
    let (sgd, rowwise, adagrad) = (with("sgd"), with("rowwise_adagrad"), with("adagrad"));
    let rows = 1000.0 * 3_100_000.0;
    assert_close(
        "row-wise Adagrad state per device",
        rowwise.optimizer_state_bytes - sgd.optimizer_state_bytes,
        rows * 4.0 / 128.0,
        1e-9,
    );
    assert_close(
        "Adagrad state per device",
        adagrad.optimizer_state_bytes - sgd.optimizer_state_bytes,
        rows * 256.0 * 4.0 / 128.0,
        1e-9,
    );
    assert!(sgd.feasible && rowwise.feasible);
    assert!(
        !adagrad.feasible
            && adagrad
                .violations
                .iter()
                .any(|v| v.memory_excess().is_some()),
        "{:?}",
        adagrad.violations
    );
    assert!(adagrad.time_per_iteration_s > rowwise.time_per_iteration_s);
    assert!(rowwise.time_per_iteration_s >= sgd.time_per_iteration_s);
    // The default is row-wise Adagrad.
    let plain = dir.write("default.yaml", &text);
    let default = predict(
        &Workload::load(Source::Disk, std::path::Path::new(&plain)).unwrap(),
        &arch,
        &net,
        &Strategy::parse("d128").unwrap(),
    )
    .unwrap();
    assert_eq!(default.optimizer_state_bytes, rowwise.optimizer_state_bytes);
    // An unknown optimizer is refused with the field.
    let bad = dir.write("bad.yaml", &format!("{text}embedding_optimizer: lamb\n"));
    let (code, _, err) = common::stackflow(&["predict", "--workload", &bad]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("embedding_optimizer") && err.contains("lamb"),
        "{err}"
    );
}

#[test]
fn dlrm_transformer_and_moe_variants() {
    // MAD Max Table 2 variants of DLRM-A on ZionEX (Insight 4): transformer layers add
    // compute, experts add blocking all-to-all and, replicated, memory.
    let (sys, arch) = system("templates/zionex.yaml");
    let net = sys.network(&arch, 128).unwrap();
    let load = |f: &str| Workload::load(Source::Disk, &root().join(f)).unwrap();
    let run =
        |w: &Workload, s: &str| predict(w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let base = run(&load("workloads/dlrm-a.yaml"), "d128");
    let transformer = run(&load("workloads/dlrm-a-transformer.yaml"), "d128");
    assert!(transformer.feasible, "{:?}", transformer.violations);
    assert!(transformer.compute_s > base.compute_s * 1.2);
    assert!(transformer.time_per_iteration_s > base.time_per_iteration_s);

    let moe = load("workloads/dlrm-a-moe.yaml");
    // Every device holding all 16 experts (1.3B weights with Adam) runs out of memory.
    let replicated = run(&moe, "d128");
    assert!(!replicated.feasible);
    assert!(
        replicated.violations[0].memory_excess().is_some(),
        "{:?}",
        replicated.violations
    );
    let spread = run(&moe, "d128-e16");
    assert!(spread.feasible, "{:?}", spread.violations);
    assert!(spread.weights_bytes < replicated.weights_bytes);
    let a2a = spread
        .communication
        .iter()
        .find(|c| c.name == "expert all-to-all")
        .expect("dispatch and combine");
    // Dispatch and combine, forward and backward, over the 16 devices of an expert group.
    assert!(
        a2a.blocking && a2a.group == 16 && a2a.calls == 4.0,
        "{a2a:?}"
    );
    assert!(spread.time_per_iteration_s > base.time_per_iteration_s);
    println!(
        "DLRM-A {:.1} ms, -Transformer {:.1} ms, -MoE e16 {:.1} ms (d128 on 128 A100s)",
        base.time_per_iteration_s * 1e3,
        transformer.time_per_iteration_s * 1e3,
        spread.time_per_iteration_s * 1e3
    );
}

#[test]
fn bad_dlrm_variants_fail_with_a_clear_message() {
    let base = std::fs::read_to_string(root().join("workloads/dlrm-a.yaml")).unwrap();
    let bad = |edit: &dyn Fn(&str) -> String| Workload::from_yaml("bad.yaml", &edit(&base));
    let e = bad(&|s| s.replace("interaction: concat", "interaction: transformer"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.yaml") && e.contains("transformer: {layers"),
        "{e}"
    );
    let e = bad(&|s| format!("{s}moe: {{experts: 4, top_k: 8}}\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("moe.top_k = 8: at most moe.experts (4)"), "{e}");
    let e = bad(&|s| {
        format!("{s}moe: {{experts: 4, top_k: 2}}\n").replace("[1216, 2048, 1024, 1]", "[1216, 1]")
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("top_mlp") && e.contains("at least 3 layers"),
        "{e}"
    );
}

#[test]
fn serving_splits_weights_and_kv_cache_over_tensor_parallel_devices() {
    use stackflow::distributed::predict_inference;
    let (t, spec) = llama2_70b_decode();
    let t = &t;
    let (sys, h100) = system("templates/dgx-h100.yaml");
    let net = sys.network(&h100, 8).unwrap();
    let serve =
        |s: &str| predict_inference(t, &spec, &h100, &net, &Strategy::parse(s).unwrap()).unwrap();
    let tp = serve("t8");
    let replicas = serve("d8");
    assert!(tp.feasible && replicas.feasible);
    // Decode at batch 1 reads every weight once per token: 8-way tensor parallelism reads
    // an eighth per device (8.75 GB of FP8 weights, 3.3 ms at the capped 2.68 TB/s), plus two
    // small all-reduces per layer over NVLink, each at least the fabric's 10 us floor
    // (Calculon's NVLink latency): 160 of them, 1.6 ms, so the speed-up is about 5x, not 8x.
    let speedup = replicas.time_per_output_token_s / tp.time_per_output_token_s;
    println!(
        "LLaMA-2-70B decode on 8 H100: t8 {:.2} ms/token, 8 replicas {:.2} ms/token ({speedup:.1}x); \
         TTFT {:.1} vs {:.1} ms",
        tp.time_per_output_token_s * 1e3,
        replicas.time_per_output_token_s * 1e3,
        tp.time_to_first_token_s * 1e3,
        replicas.time_to_first_token_s * 1e3
    );
    assert!((4.5..=6.0).contains(&speedup), "{speedup}");
    let floors = 2.0 * t.layers as f64 * net.fabrics[0].collective_latency_s;
    assert!(floors > 1e-3, "{floors}");
    assert!(
        tp.decode_communication_s >= floors
            && tp.decode_communication_s < 0.5 * tp.time_per_output_token_s,
        "{} s of {} s",
        tp.decode_communication_s,
        tp.time_per_output_token_s
    );
    assert_close(
        "weights per device",
        tp.weights_bytes,
        replicas.weights_bytes / 8.0,
        0.01,
    );
    // Energy: every device's work, network bytes and leakage; average power stays under
    // the 8 x 700 W TDP, and splitting a replica over 8 devices costs about the same energy
    // per token as keeping it whole.
    for p in [&tp, &replicas] {
        let w = p.average_power_w;
        assert!(w > 0.0 && w < 8.0 * 700.0, "{w}");
    }
    assert_close(
        "energy per token",
        tp.joules_per_token,
        replicas.joules_per_token,
        0.5,
    );
    // Eight replicas serve eight batches: throughput counts them all.
    assert_close(
        "replica throughput",
        replicas.tokens_per_s,
        8.0 * 256.0 / (replicas.time_to_first_token_s + 255.0 * replicas.time_per_output_token_s),
        1e-9,
    );
    // A pipelined replica keeps a batch per stage in flight: p2-t4 serves twice the
    // tokens of one batch in about t4's time per token, and holds two batches' caches.
    let (pp, t4) = (serve("p2-t4-d1"), serve("t4-d2"));
    assert_eq!((pp.batches_in_flight, t4.batches_in_flight), (2, 1));
    let one_batch = 256.0 / (pp.time_to_first_token_s + 255.0 * pp.time_per_output_token_s);
    assert!(
        pp.tokens_per_s > 1.9 * one_batch && pp.tokens_per_s <= 2.0 * one_batch,
        "{} vs {one_batch}",
        pp.tokens_per_s
    );
    println!(
        "p2-t4: {:.2} ms/token, {:.0} tokens/s; t4 x 2 replicas: {:.2} ms/token, {:.0} tokens/s",
        pp.time_per_output_token_s * 1e3,
        pp.tokens_per_s,
        t4.time_per_output_token_s * 1e3,
        t4.tokens_per_s
    );
    assert_close(
        "pipelined TPOT",
        pp.time_per_output_token_s,
        t4.time_per_output_token_s,
        0.15,
    );
    // Two stages of 40 layers, two batches each: the cache per device is a t4 replica's.
    assert_close(
        "pipelined KV cache",
        pp.kv_cache_bytes,
        t4.kv_cache_bytes,
        1e-9,
    );
    // Both serve two batches on 8 devices: about the same energy per token and power.
    assert_close(
        "pipelined energy per token",
        pp.joules_per_token,
        t4.joules_per_token,
        0.1,
    );
    assert_close(
        "pipelined power",
        pp.average_power_w,
        t4.average_power_w,
        0.1,
    );
    // A KV cache too large for one device is an infeasible result with the reason.
    let mut big = t.clone();
    big.inference = Some(stackflow::workload::inference::InferenceSpec { batch: 64, ..spec });
    let p = predict_inference(
        &big,
        &big.inference.unwrap(),
        &h100,
        &net,
        &Strategy::parse("d8").unwrap(),
    )
    .unwrap();
    assert!(
        !p.feasible
            && matches!(p.violations[0], stackflow::violation::Violation::OutOfMemory { kv_cache_bytes, .. } if kv_cache_bytes > 0.0),
        "{:?}",
        p.violations
    );
    // Training-only parallelism is refused.
    let e =
        predict_inference(t, &spec, &h100, &net, &Strategy::parse("d8-z1").unwrap()).unwrap_err();
    assert!(
        e.message.contains("serving splits a model by tensor"),
        "{e}"
    );
}

#[test]
fn zion_scales_out_through_the_cpus_nics() {
    // Zion Sec. V: two Zions exchange through the CPUs' 100 GbE NICs (12.5 GB/s per
    // accelerator), far below the accelerator fabric: an all-to-all over 16 OAMs sends half
    // of each device's message to the other Zion.
    let (sys, v100) = system("templates/zion.yaml");
    let net = sys.network(&v100, 16).unwrap();
    let all = net.group_link(&[(0..16).collect::<Vec<u64>>()]);
    let m = 1e9;
    let t = all.time(Collective::AllToAll, m);
    assert_close("all-to-all over 2 Zions", t, m / 2.0 / 12.5e9, 0.05);
    let one = sys.network(&v100, 8).unwrap();
    let inside = one.group_link(&[(0..8).collect::<Vec<u64>>()]);
    assert!(inside.time(Collective::AllToAll, m) * 2.0 < t);
}

#[test]
fn dlrm_tables_beyond_all_device_memory_are_an_infeasible_result() {
    // DLRM-A's 793B fp32 parameters (2.9 TiB) on 64 A100-40GB (2.5 TiB in all).
    let (code, out, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zionex.yaml",
        "--devices",
        "64",
        "--workload",
        "workloads/dlrm-a.yaml",
        "--strategy",
        "d64",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("INFEASIBLE")
            && out
                .contains("embedding tables of 2967.9 GiB (with their optimizer state) exceed the 2560.0 GiB of all 64 devices"),
        "{out}"
    );
}

#[test]
fn predict_is_the_best_of_evaluating_every_mapping() {
    // The model prices one mapping; predict is the search over orderings above it.
    let (s, a100) = system("templates/dgx-a100.yaml");
    let net = s.network(&a100, 1024).unwrap();
    let gpt3 = Workload::load(
        Source::Embedded,
        std::path::Path::new("workloads/gpt3-175b.yaml"),
    )
    .unwrap();
    let strategy = Strategy::parse("t8-p8-d16-mb1-i2-sp").unwrap();
    let best = predict(&gpt3, &a100, &net, &strategy).unwrap();
    let orders = mapping::orderings(&strategy);
    assert_eq!(best.mappings_tried, orders.len());
    let times: Vec<f64> = orders
        .iter()
        .map(|order| {
            let p = stackflow::distributed::evaluate(&gpt3, &a100, &net, &strategy, order).unwrap();
            assert_eq!(p.mappings_tried, 1);
            assert_eq!(p.mapping.order, *order);
            p.time_per_iteration_s
        })
        .collect();
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(best.time_per_iteration_s, fastest);
    // The orderings differ, or the search would be pointless here.
    assert!(times.iter().any(|&t| t > fastest * 1.01), "{times:?}");
}

/// The stack's caps are the accelerator's (its template's `stack:`): the architecture keeps
/// its derived numbers and carries them; the machine model applies them; a lone kernel
/// measured alone runs without them.
#[test]
fn stack_caps_apply_in_the_machine_model_and_not_to_a_lone_kernel() {
    let (s, capped) = system("templates/dgx-a100.yaml");
    let alone = capped.alone();
    assert!(alone.caps.is_none());
    assert_eq!(
        capped.main_memory.bandwidth_bytes_per_s,
        alone.main_memory.bandwidth_bytes_per_s
    );
    assert_eq!(capped.core.max_utilization, alone.core.max_utilization);
    let template = s.design().unwrap().stack;
    let memory = template.memory_utilization.expect("gpu-a100 caps memory");
    assert_eq!(capped.caps, template);
    assert_eq!(
        capped.achieved_memory_bandwidth(),
        alone.main_memory.bandwidth_bytes_per_s * memory
    );
    let compute = template.compute_utilization.expect("gpu-a100 caps compute");
    assert_eq!(
        capped.achieved_utilization(),
        alone.core.max_utilization.min(compute)
    );
    // A memory-bound kernel runs slower capped; as a lone kernel it runs uncapped.
    let w = Workload::from_yaml(
        "stream.yaml",
        "version: 1\nkind: gemm\nm: 8192\nk: 8\nn: 8192\nprecision: bf16\n",
    )
    .unwrap();
    let graph = w.graph();
    let kernel = &graph.kernels[0];
    let t = |a: &Architecture| stackflow::perf::Evaluator::new(a).kernel(kernel).time_s;
    assert!(
        t(&capped) > t(&alone) * 1.05,
        "{} vs {}",
        t(&capped),
        t(&alone)
    );
    assert_eq!(t(&stackflow::perf::as_run(&capped, &graph)), t(&alone));
}

/// Activations in flight on the first stage (Narayanan et al. 2021): 1F1B holds p
/// micro-batches, interleaving p (1 + (p - 1) / (p v)), GPipe all m, and never more than the
/// micro-batches there are.
#[test]
fn pipeline_schedules_hold_their_micro_batches_in_flight() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    let net = system.network(&arch, 128).unwrap();
    let w = gpt(32, 4096, 32, 512, "selective");
    let act = |s: &str| {
        predict(&w, &arch, &net, &Strategy::parse(s).unwrap())
            .unwrap()
            .activations_bytes
    };
    // 128 samples per replica: activations scale with the samples in flight.
    let plain = act("t4-p8-d4-mb1");
    let ratio = |s: &str| act(s) / plain;
    assert_close(
        "GPipe holds all m = 128, 1F1B p = 8",
        ratio("t4-p8-d4-mb1-gpipe"),
        16.0,
        1e-12,
    );
    assert_close(
        "interleaving holds p (1 + (p - 1) / (p v))",
        ratio("t4-p8-d4-mb1-i2"),
        1.0 + 7.0 / 16.0,
        1e-12,
    );
    // 8 micro-batches of 16: all 8 in flight (128 samples); 4 of 32: all 4 (128 samples).
    assert_close("1F1B with m = p", ratio("t4-p8-d4-mb16"), 16.0, 1e-12);
    assert_close("1F1B with m < p", ratio("t4-p8-d4-mb32"), 16.0, 1e-12);
    assert_close(
        "interleaved with m = p",
        ratio("t4-p8-d4-mb16-i2"),
        16.0,
        1e-12,
    );
}

/// Gradients synchronised after the backward pass (`grad=after`, Megatron-era stacks) add
/// exactly their time: the flat all-reduce (or ZeRO-3's reduce-scatters) is all exposed.
#[test]
fn gradients_synchronised_after_the_backward_pass_add_exactly_their_time() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    let net = system.network(&arch, 64).unwrap();
    let w = gpt(32, 4096, 32, 512, "selective");
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    for (on, off, sync) in [
        ("d64", "d64-grad=after", "gradient sync"),
        ("d64-z3", "d64-z3-grad=after", "gradient reduce-scatter"),
    ] {
        let (a, b) = (run(on), run(off));
        let time: f64 = b
            .communication
            .iter()
            .filter(|c| c.name == sync)
            .map(|c| c.time_s)
            .sum();
        assert!(time > 0.0, "{off}: {:?}", b.communication);
        assert_close(off, b.exposed_communication_s, time, 1e-9);
        assert_close(
            off,
            b.time_per_iteration_s - a.time_per_iteration_s,
            time - a.exposed_communication_s,
            1e-9,
        );
    }
    // The switch needs data parallelism, and reads back.
    let e = Strategy::parse("t8-grad=after").unwrap_err().to_string();
    assert!(e.contains("needs data parallelism"), "{e}");
    let e = Strategy::parse("d8-grad=later").unwrap_err().to_string();
    assert!(
        e.contains("grad=overlap") && e.contains("grad=after"),
        "{e}"
    );
    let s = Strategy::parse("t8-d8-grad=after").unwrap();
    assert!(!s.grad_overlap);
    assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
    let y = Strategy::from_yaml("s.yaml", "data: 8\ntensor: 8\ngradient_overlap: false\n").unwrap();
    assert_eq!(y, s);
}

/// MFU against the dense 16-bit peak and against the peak of the precision the matrix
/// products use, each labelled: FP8 on H100 runs at twice the 16-bit peak.
#[test]
fn utilization_is_reported_against_both_peaks() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 64).unwrap();
    let s = Strategy::parse("t8-d8-mb1").unwrap();
    let fp8_ratio = arch.core.throughput_by_precision[&stackflow::domain::Precision::Fp8];
    assert!(fp8_ratio > 1.0);
    for (precision, ratio) in [("bf16", 1.0), ("fp8", fp8_ratio)] {
        let text = format!(
            "version: 1\nkind: transformer\nname: gpt-{precision}\nhidden: 4096\nlayers: 32\n\
             heads: 32\nffn_hidden: 16384\nsequence: 2048\nvocab: 51200\nglobal_batch: 64\n\
             precision: {precision}\n"
        );
        let w = Workload::from_yaml("w.yaml", &text).unwrap();
        let p = predict(&w, &arch, &net, &s).unwrap();
        assert_eq!(p.gemm_precision.name(), precision);
        assert_close(
            precision,
            p.model_flops_utilization_at_precision,
            p.model_flops_utilization / ratio,
            1e-12,
        );
        assert!(p.model_flops_utilization_at_precision < 1.0);
    }
}

/// FP8 training the Transformer Engine way: only the linear layers' products run in FP8, so
/// the speed-up over BF16 stays under Amdahl's bound 1 / (1 - g / 2), g the share of the
/// BF16 step in those products; weights and messages stay BF16, the linear layers keep
/// their inputs in FP8 for the weight gradients. GPT-3 175B on 256 H100s.
#[test]
fn fp8_training_speeds_up_only_the_linear_layers() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 256).unwrap();
    let s = Strategy::parse("t8-p8-d4-mb1-i4-sp-z1-rc=selective").unwrap();
    let text = std::fs::read_to_string(root().join("workloads/gpt3-175b.yaml")).unwrap();
    let fp8 = text.replace("precision: bf16", "precision: fp8");
    assert_ne!(fp8, text);
    let bf16 = predict(
        &Workload::from_yaml("bf16.yaml", &text).unwrap(),
        &arch,
        &net,
        &s,
    )
    .unwrap();
    let fp8 = predict(
        &Workload::from_yaml("fp8.yaml", &fp8).unwrap(),
        &arch,
        &net,
        &s,
    )
    .unwrap();
    let gemm: f64 = bf16
        .compute
        .iter()
        .filter(|c| c.class == stackflow::workload::KernelClass::Gemm)
        .map(|c| c.time_s)
        .sum();
    let g = gemm / bf16.time_per_iteration_s;
    let speedup = bf16.time_per_iteration_s / fp8.time_per_iteration_s;
    let amdahl = 1.0 / (1.0 - g / 2.0);
    assert!(
        speedup > 1.2 && speedup <= amdahl,
        "FP8 {speedup:.3}x, bound {amdahl:.3}x (g = {g:.3})"
    );
    assert_eq!(fp8.gemm_precision.name(), "fp8");
    for p in [&bf16, &fp8] {
        assert!(p.model_flops_utilization < 1.0 && p.model_flops_utilization_at_precision < 1.0);
    }
    assert_eq!(fp8.weights_bytes, bf16.weights_bytes);
    assert_eq!(fp8.gradients_bytes, bf16.gradients_bytes);
    assert!(fp8.activations_bytes < bf16.activations_bytes);
    // Messages stay BF16: the same tensor-parallel bytes.
    let tp = |p: &stackflow::distributed::DistPrediction| {
        p.communication
            .iter()
            .find(|c| c.name.starts_with("tensor"))
            .map(|c| c.bytes)
    };
    assert_eq!(tp(&fp8), tp(&bf16));
    // Serving keeps FP8's inference meaning: weights and caches in FP8.
    let serving = Workload::load(
        Source::Disk,
        &root().join("workloads/llama2-70b-decode.yaml"),
    )
    .unwrap();
    let (t, spec) = serving.serving().unwrap();
    let decode = stackflow::workload::inference::decode_graph(t, spec, 1024);
    assert!(decode
        .kernels
        .iter()
        .filter(|k| k.is_matmul())
        .all(|k| k.precision.name() == "fp8" && k.math.name() == "fp8"));
}

/// Blocking pipeline sends (`send=blocking`): a stage that hands its activations on is busy
/// until the send is done. With one micro-batch every send is on the critical path anyway:
/// the same time; with many, at most every step's send more, and never less.
#[test]
fn blocking_pipeline_sends_cost_at_most_every_send() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    let net = system.network(&arch, 64).unwrap();
    let w = gpt(32, 4096, 32, 64, "selective");
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let one = run("t8-p2-d4");
    let one_blocking = run("t8-p2-d4-send=blocking");
    assert_close(
        "one micro-batch",
        one_blocking.time_per_iteration_s,
        one.time_per_iteration_s,
        1e-12,
    );
    for s in ["t8-p4-d2-mb1", "t8-p4-d2-mb1-i2", "t8-p4-d2-mb1-gpipe"] {
        let (a, b) = (run(s), run(&format!("{s}-send=blocking")));
        let sends: f64 = a
            .communication
            .iter()
            .filter(|c| c.name == "pipeline activations")
            .map(|c| c.time_s)
            .sum();
        let extra = b.time_per_iteration_s - a.time_per_iteration_s;
        assert!(
            sends > 0.0 && extra > 0.0 && extra <= sends * (1.0 + 1e-9),
            "{s}: {extra} of {sends}"
        );
    }
    let e = Strategy::parse("t8-d8-send=blocking")
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs p > 1"), "{e}");
    let s = Strategy::parse("t8-p2-d4-send=blocking").unwrap();
    assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
    let y = Strategy::from_yaml(
        "s.yaml",
        "data: 4\ntensor: 8\npipeline: 2\nsend_overlap: false\n",
    )
    .unwrap();
    assert_eq!(y, s);
}

/// Scattered pipeline sends (`p2p=scatter`, Megatron-LM's scatter/gather optimisation):
/// each of a stage's t tensor-parallel ranks sends 1/t of the activations over the
/// pipeline's fabric and the receiving stage all-gathers them whole over its own
/// tensor-parallel group, once per send. With the stages on InfiniBand and the tensor group
/// on NVLink, a step gets faster. Without tensor or pipeline parallelism, beside sequence
/// parallelism (which sends shards already) and in serving, it is refused by name.
#[test]
fn scattered_pipeline_sends_send_a_share_and_gather_it_on_arrival() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    let net = system.network(&arch, 64).unwrap();
    let w = gpt(32, 4096, 32, 64, "selective");
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let whole = run("t8-p4-d2-mb1-send=blocking");
    let scattered = run("t8-p4-d2-mb1-send=blocking-p2p=scatter");
    let comm = |p: &stackflow::distributed::DistPrediction, name: &str| {
        p.communication
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .clone()
    };
    let (sent, share) = (
        comm(&whole, "pipeline activations"),
        comm(&scattered, "pipeline activations"),
    );
    assert_close("a rank's share", share.bytes, sent.bytes / 8.0, 1e-12);
    let gather = comm(&scattered, "pipeline gather");
    assert_eq!(gather.collective, Collective::AllGather);
    assert_eq!((gather.axis, gather.group), (Axis::Tensor, 8));
    assert_close("gathered whole", gather.bytes, sent.bytes, 1e-12);
    assert_eq!(gather.calls, share.calls);
    assert!(whole
        .communication
        .iter()
        .all(|c| c.name != "pipeline gather"));
    assert!(
        scattered.time_per_iteration_s < whole.time_per_iteration_s,
        "{} against {}",
        scattered.time_per_iteration_s,
        whole.time_per_iteration_s
    );
    // With the tensor group placed outermost (on InfiniBand) and the stages innermost, the
    // gather costs what the split saves and more: slower, so the gather is priced.
    let (whole_ib, scattered_ib) = (
        run("t8-p4-d2-mb1-send=blocking-order=p.d.t"),
        run("t8-p4-d2-mb1-send=blocking-p2p=scatter-order=p.d.t"),
    );
    assert!(
        scattered_ib.time_per_iteration_s > whole_ib.time_per_iteration_s,
        "{} against {}",
        scattered_ib.time_per_iteration_s,
        whole_ib.time_per_iteration_s
    );
    // Under context parallelism each rank sends 1/(t c) and gathers its 1/c: sequence
    // parallelism sends the same share, without the gather.
    let (sharded_cp, scattered_cp) = (
        run("t8-p2-cp2-d2-mb1-sp"),
        run("t8-p2-cp2-d2-mb1-p2p=scatter"),
    );
    let share = comm(&sharded_cp, "pipeline activations").bytes;
    assert_close(
        "cp share",
        comm(&scattered_cp, "pipeline activations").bytes,
        share,
        1e-12,
    );
    assert_close(
        "cp gather",
        comm(&scattered_cp, "pipeline gather").bytes,
        share * 8.0,
        1e-12,
    );
    // Per layer type, only the part that opens a stage hands on: one gather listed.
    let layered = stackflow::distributed::predict_layered(
        &w,
        &arch,
        &net,
        8,
        &stackflow::distributed::LayerStrategy::parse(
            "embedding:t8-p4-d2-mb1-p2p=scatter,attention:t8-p4-d2-mb1-p2p=scatter,\
             dense:t8-p4-d2-mb1-p2p=scatter",
        )
        .unwrap(),
        &mut stackflow::distributed::Workspace::new(&arch),
    )
    .unwrap();
    let gathers = layered
        .communication
        .iter()
        .filter(|c| c.name.ends_with("pipeline gather"))
        .count();
    assert_eq!(gathers, 1, "{:?}", layered.communication);
    let s = Strategy::parse("t8-p4-d2-mb1-p2p=scatter").unwrap();
    assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
    let y = Strategy::from_yaml(
        "s.yaml",
        "data: 2\ntensor: 8\npipeline: 4\nmicro_batch: 1\nscatter_sends: true\n",
    )
    .unwrap();
    assert_eq!(y, s);
    for (bad, says) in [
        ("t1-p2-d32-p2p=scatter", "needs p > 1 and t > 1"),
        ("t8-d8-p2p=scatter", "needs p > 1 and t > 1"),
        ("t8-p2-d4-sp-p2p=scatter", "sequence parallelism"),
        ("t8-p2-d4-p2p=half", "p2p=half"),
    ] {
        let e = Strategy::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let (t, spec) = llama2_70b_decode();
    let (dgx, h100) = self::system("templates/dgx-h100.yaml");
    let e = stackflow::distributed::predict_inference(
        &t,
        &spec,
        &h100,
        &dgx.network(&h100, 8).unwrap(),
        &Strategy::parse("t4-p2-p2p=scatter").unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("training pipelines"), "{e}");
}

/// Tensor-parallel collectives beside the linear layers (`tp=overlap`): never slower than
/// blocking, never faster than with the collectives free, and the GPT-3 case of issue 18
/// gains. The share of compute units they hold comes from the template; a template without
/// it, a strategy without tensor or sequence parallelism, and a share out of [0, 1) are
/// refused by name.
#[test]
fn tensor_collectives_beside_linear_layers_never_slow_a_step() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    assert_eq!(arch.core.collective_compute_share, Some(0.08));
    let net = system.network(&arch, 64).unwrap();
    let w = gpt(32, 4096, 32, 64, "selective");
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    // Without pipelining (one stage, whose collectives are all listed) and with the
    // placement pinned, a step saves at most its tensor-parallel collectives' time; with
    // pipelining the best mapping and the critical stage may change, so only the gain is
    // checked.
    for s in [
        "t8-d8-sp-order=t.d",
        "t2-d32-sp-z1-order=t.d",
        "t8-p2-d4-mb1-sp",
        "t4-p4-d4-mb1-i2-sp",
    ] {
        let (blocking, beside) = (run(s), run(&format!("{s}-tp=overlap")));
        let tensor: f64 = blocking
            .communication
            .iter()
            .filter(|c| c.name.starts_with("tensor "))
            .map(|c| c.time_s)
            .sum();
        let saved = blocking.time_per_iteration_s - beside.time_per_iteration_s;
        let pipelined = s.contains("-p");
        assert!(
            tensor > 0.0 && saved > 0.0 && (pipelined || saved <= tensor * (1.0 + 1e-9)),
            "{s}: saved {saved} of {tensor}"
        );
        // The linear layers' collectives are listed apart, as not blocking; the
        // embedding's reduce-scatter still blocks.
        let listed = |beside_products: bool| {
            beside
                .communication
                .iter()
                .filter(|c| {
                    c.name.starts_with("tensor ")
                        && c.name.ends_with(" beside products") == beside_products
                })
                .map(|c| c.blocking)
                .collect::<Vec<bool>>()
        };
        assert!(
            !listed(true).is_empty() && listed(true).iter().all(|b| !b),
            "{s}"
        );
        assert!(listed(false).iter().all(|b| *b), "{s}");
    }
    // GPT-3 175B on 256 H100s (issue 18): 27.40 s blocking.
    let gpt3 = Workload::load(Source::Disk, &root().join("workloads/gpt3-175b.yaml")).unwrap();
    let net = system.network(&arch, 256).unwrap();
    let base = "t8-p8-d4-mb1-i4-sp-z1-rc=selective";
    let time = |s: &str| {
        predict(&gpt3, &arch, &net, &Strategy::parse(s).unwrap())
            .unwrap()
            .time_per_iteration_s
    };
    let (blocking, beside) = (time(base), time(&format!("{base}-tp=overlap")));
    assert!(beside < 0.9 * blocking, "{beside} vs {blocking}");

    // A chip without the share cannot price the switch.
    let mut unshared = arch.clone();
    unshared.core.collective_compute_share = None;
    let unshared_net = system.network(&unshared, 64).unwrap();
    let e = predict(
        &w,
        &unshared,
        &unshared_net,
        &Strategy::parse("t8-d8-sp-tp=overlap").unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("compute.collective_compute_share"), "{e}");
    for (bad, says) in [
        ("t1-d8-sp-tp=overlap", "needs t > 1"),
        ("t8-d8-tp=overlap", "needs sp"),
    ] {
        let e = Strategy::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    // Serving, and a workload without repeated layers, are refused by name (exit 2).
    for (workload, says) in [
        (
            "workloads/llama2-70b-decode.yaml",
            "priced for training steps",
        ),
        ("workloads/dlrm-a.yaml", "no repeated layers"),
    ] {
        let (code, _, err) = common::stackflow(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--workload",
            workload,
            "--devices",
            "8",
            "--strategy",
            "t8-sp-tp=overlap",
        ]);
        assert!(code == 2 && err.contains(says), "{workload}: {err}");
    }
    let s = Strategy::parse("t8-d8-sp-tp=overlap").unwrap();
    assert_eq!(Strategy::parse(&s.to_string()).unwrap(), s);
    let y = Strategy::from_yaml(
        "s.yaml",
        "data: 8\ntensor: 8\nsequence_parallel: true\ntensor_overlap: true\n",
    )
    .unwrap();
    assert_eq!(y, s);
}

/// A chip with a measured idle power (TPU v4 Table 4: 90 W) draws it for the whole step:
/// mean power is that floor plus the work's, and removing the figure leaves the SRAM leakage
/// the generator models, lower by exactly (idle - leakage) x time on every device. The
/// active power a running chip draws whatever its rates (31 W) adds exactly 31 W x time on
/// every device, and moves no time.
#[test]
fn a_measured_idle_power_is_the_floor_of_a_run() {
    let (system, arch) = system("templates/tpu-v4-pod.yaml");
    assert_eq!(arch.core.idle_power_w, Some(90.0));
    assert_eq!(arch.core.active_power_w, Some(31.0));
    let net = system.network(&arch, 512).unwrap();
    let strategy = Strategy::parse("t4-d128-sp").unwrap();
    let workload = gpt(32, 4096, 8, 1024, "selective");
    let with_idle = predict(&workload, &arch, &net, &strategy).unwrap();
    let per_device = with_idle.average_power_w / 512.0;
    assert!(per_device > 90.0, "{per_device} W per chip, idle 90 W");
    let mut leaky = arch.clone();
    leaky.core.idle_power_w = None;
    let leakage: f64 = arch.on_chip.iter().map(|l| l.static_power_w).sum();
    assert!(leakage < 90.0, "{leakage}");
    let without = predict(&workload, &leaky, &net, &strategy).unwrap();
    assert_eq!(without.time_per_iteration_s, with_idle.time_per_iteration_s);
    assert_close(
        "idle floor energy",
        with_idle.energy_j - without.energy_j,
        (90.0 - leakage) * with_idle.time_per_iteration_s * 512.0,
        1e-9,
    );
    let mut at_rest = arch.clone();
    at_rest.core.active_power_w = None;
    let inactive = predict(&workload, &at_rest, &net, &strategy).unwrap();
    assert_eq!(
        inactive.time_per_iteration_s,
        with_idle.time_per_iteration_s
    );
    assert_close(
        "active power energy",
        with_idle.energy_j - inactive.energy_j,
        31.0 * with_idle.time_per_iteration_s * 512.0,
        1e-9,
    );
    // Serving pays the same floor: a DGX H100 serving at t8, given an active power of 31 W,
    // draws 8 x 31 W more at the same times.
    use stackflow::distributed::predict_inference;
    let (t, spec) = llama2_70b_decode();
    let t = &t;
    let (dgx, h100) = self::system("templates/dgx-h100.yaml");
    let net = dgx.network(&h100, 8).unwrap();
    let mut running = h100.clone();
    running.core.active_power_w = Some(31.0);
    let t8 = Strategy::parse("t8").unwrap();
    let served = predict_inference(t, &spec, &running, &net, &t8).unwrap();
    let resting = predict_inference(t, &spec, &h100, &net, &t8).unwrap();
    assert!(served.feasible, "{:?}", served.violations);
    assert_eq!(
        served.time_per_output_token_s,
        resting.time_per_output_token_s
    );
    assert_close(
        "serving active power",
        served.average_power_w - resting.average_power_w,
        8.0 * 31.0,
        1e-9,
    );
}

/// A fabric's fixed cost per collective (`collective_latency_us`; Calculon's system files
/// give 10 us on NVLink, 20 us on InfiniBand) is paid once per collective, the outermost
/// fabric's, whatever the algorithm; the phases add up to the time. A negative value is
/// refused by name.
#[test]
fn a_collective_pays_its_outermost_fabrics_fixed_cost_once() {
    let fabrics = |nvlink: f64, ib: f64| {
        Network::new(vec![
            Fabric::new("nvlink", &Topology::Switch, 8, 300e9, 1e-6)
                .with_collective_latency(nvlink),
            Fabric::new("ib", &Topology::FatTree { levels: 2 }, 4, 25e9, 5e-6)
                .with_collective_latency(ib),
        ])
    };
    let (bare, costly) = (fabrics(0.0, 0.0), fabrics(10e-6, 20e-6));
    let inside: Vec<Vec<u64>> = (0..4).map(|n| (8 * n..8 * n + 8).collect()).collect();
    let across: Vec<Vec<u64>> = (0..8)
        .map(|i| (0..4).map(|n| 8 * n + i).collect())
        .collect();
    let everyone = vec![(0..32).collect::<Vec<u64>>()];
    for (groups, fixed) in [(&inside, 10e-6), (&across, 20e-6), (&everyone, 20e-6)] {
        let (a, b) = (bare.group_link(groups), costly.group_link(groups));
        for c in [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::AllToAll,
            Collective::PointToPoint,
        ] {
            for m in [4e3, 64e6] {
                assert_close("fixed cost", b.time(c, m) - a.time(c, m), fixed, 1e-6);
                let phases: f64 = b.phases(c, m).iter().map(|p| p.1).sum();
                assert_close("phases", phases, b.time(c, m), 1e-12);
            }
            assert_eq!(b.time(c, 0.0), 0.0);
        }
    }
    let text = std::fs::read_to_string(root().join("templates/dgx-a100.yaml"))
        .unwrap()
        .replacen(
            "collective_latency_us: 20 ",
            "collective_latency_us: -20 ",
            1,
        );
    assert!(text.contains("collective_latency_us: -20"));
    let err = refused_system("negative-latency", &text);
    assert!(
        err.contains("fabrics[1].collective_latency_us = -20"),
        "{err}"
    );
}

/// An all-to-all's latency on a direct fabric is what its members' forwarding makes it:
/// with routers (TPU ICI) every message is in flight at once and the exchange waits for its
/// longest path; relayed a hop a step (Zion Sec. IV-C) it waits for the summed hops, Zion's
/// gamma (16 on a ring of 8). The bandwidth is the same links' either way.
#[test]
fn an_all_to_all_waits_for_its_longest_path_through_routers_and_every_hop_when_relayed() {
    let hop = 1e-6;
    let link = |topology: &Topology, n: u64, forwarding: Forwarding| {
        let net = Network::new(vec![
            Fabric::new("f", topology, n, 100e9, hop).with_forwarding(forwarding)
        ]);
        net.group_link(&[(0..n).collect()])
    };
    let tiny = 8.0; // bytes: the hops alone
    for (topology, n, diameter, summed) in [
        (Topology::Ring, 8, 4.0, 16.0),
        (
            Topology::Torus {
                dims: vec![8, 8, 8],
            },
            512,
            12.0,
            3072.0,
        ),
        (Topology::Mesh { dims: vec![4, 4] }, 16, 6.0, 48.0),
    ] {
        let routed = link(&topology, n, Forwarding::Router);
        let relayed = link(&topology, n, Forwarding::Relay);
        assert_close("routed", routed.all_to_all_s, diameter * hop, 1e-12);
        assert_close("relayed", relayed.all_to_all_s, summed * hop, 1e-12);
        assert_close(
            "links",
            routed.pair_bytes_per_s,
            relayed.pair_bytes_per_s,
            1e-12,
        );
        let (a, b) = (
            routed.time(Collective::AllToAll, tiny),
            relayed.time(Collective::AllToAll, tiny),
        );
        assert!(a < b, "{topology:?}: {a} vs {b}");
    }
    // A network that relays never takes over a routed one's group shapes (their latencies
    // differ), though every bandwidth is the same.
    let ring = |f| {
        Network::new(vec![
            Fabric::new("f", &Topology::Ring, 8, 100e9, hop).with_forwarding(f)
        ])
    };
    let routed = ring(Forwarding::Router);
    let everyone: Vec<Vec<u64>> = vec![(0..8).collect()];
    let before = routed.group_link(&everyone).all_to_all_s;
    let mut relayed = ring(Forwarding::Relay);
    assert!(!relayed.share_shapes(&routed));
    assert_close(
        "relayed",
        relayed.group_link(&everyone).all_to_all_s,
        4.0 * before,
        1e-12,
    );
    // A full mesh has no member between two others: relaying changes nothing.
    let full = |f| link(&Topology::FullyConnected, 8, f).time(Collective::AllToAll, tiny);
    assert_eq!(full(Forwarding::Router), full(Forwarding::Relay));
}

/// TPU v4 Table 3's novice pick spreads its 32-way tensor group over a 4 x 8 plane of the
/// [4, 8, 16] slice, where XLA has no 2-D collective (square planes only): the TPU pod's
/// `plane_collectives: square` prices it as one ring, slower than both dimensions at once;
/// a value the key does not know is bad input naming file, field and value.
#[test]
fn a_tpu_pods_non_square_plane_runs_its_collectives_as_one_ring() {
    let dir = Scratch::new("plane-collectives");
    let text = std::fs::read_to_string(root().join("templates/tpu-v4-pod.yaml"))
        .unwrap()
        .replace("../budgets", &root().join("budgets").display().to_string());
    assert!(text.contains("plane_collectives: square"));
    let args = |system: &str| -> Vec<String> {
        [
            "predict",
            "--system",
            system,
            "--slice",
            "4x8x16",
            "--workload",
            "workloads/gpt3-175b.yaml",
            "--strategy",
            "d16-t32-sp-z3-prefetch=off-mb4-rc=full",
            "--json",
        ]
        .map(String::from)
        .to_vec()
    };
    let time = |system: &str| -> f64 {
        let a = args(system);
        let (code, out, err) = common::stackflow(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["time_per_iteration_s"].as_f64().unwrap()
    };
    let square = dir.write("square.yaml", &text);
    let any = dir.write(
        "any.yaml",
        &text.replace("plane_collectives: square", "plane_collectives: any"),
    );
    let (ring, plane) = (time(&square), time(&any));
    assert!(
        ring > 1.1 * plane,
        "one ring {ring} s, both dimensions {plane} s"
    );
    let bad = dir.write(
        "bad.yaml",
        &text.replace("plane_collectives: square", "plane_collectives: hexagon"),
    );
    let a = args(&bad);
    let (code, _, err) = common::stackflow(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.yaml")
            && err.contains("fabrics[0].plane_collectives")
            && err.contains("hexagon")
            && err.contains("`any` or `square`"),
        "{err}"
    );
}

/// Precision per tensor role (`precisions:`): `precision: fp8` is exactly BF16 with FP8 GEMM
/// inputs, and each other role moves its own tensors only: messages, gradients (held and
/// reduced), weights (held, with a copy cast for the products) and optimizer state.
#[test]
fn each_precision_role_moves_only_its_own_tensors() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 256).unwrap();
    let s = Strategy::parse("t8-p8-d4-mb1-i4-sp-z1-rc=selective").unwrap();
    let text = std::fs::read_to_string(root().join("workloads/gpt3-175b.yaml")).unwrap();
    assert!(text.contains("precision: bf16\n"));
    let run = |replace: &str| {
        let w = Workload::from_yaml("w.yaml", &text.replace("precision: bf16\n", replace)).unwrap();
        predict(&w, &arch, &net, &s).unwrap()
    };
    let comm = |p: &stackflow::distributed::DistPrediction, prefix: &str| -> f64 {
        p.communication
            .iter()
            .filter(|c| c.name.starts_with(prefix))
            .map(|c| c.bytes)
            .sum()
    };
    let bf16 = run("precision: bf16\n");
    let fp8 = run("precision: fp8\n");
    let roles = run("precision: bf16\nprecisions: {gemm_inputs: fp8}\n");
    assert_eq!(
        serde_json::to_string(&fp8).unwrap(),
        serde_json::to_string(&roles).unwrap()
    );

    let wire = run("precision: bf16\nprecisions: {communication: fp8}\n");
    assert!(comm(&bf16, "tensor") > 0.0 && comm(&bf16, "pipeline") > 0.0);
    assert_close(
        "tensor bytes",
        comm(&wire, "tensor"),
        comm(&bf16, "tensor") / 2.0,
        1e-12,
    );
    assert_close(
        "pipeline bytes",
        comm(&wire, "pipeline"),
        comm(&bf16, "pipeline") / 2.0,
        1e-12,
    );
    assert_eq!(comm(&wire, "gradient"), comm(&bf16, "gradient"));
    assert_eq!(comm(&wire, "updated"), comm(&bf16, "updated"));
    assert_eq!(wire.compute_s, bf16.compute_s);
    assert_eq!(wire.weights_bytes, bf16.weights_bytes);
    assert_eq!(wire.activations_bytes, bf16.activations_bytes);
    assert!(wire.time_per_iteration_s < bf16.time_per_iteration_s);

    let grads = run("precision: bf16\nprecisions: {gradients: fp32}\n");
    assert!(comm(&bf16, "gradient") > 0.0 && comm(&bf16, "updated") > 0.0);
    assert_close(
        "gradients",
        grads.gradients_bytes,
        2.0 * bf16.gradients_bytes,
        1e-12,
    );
    let sync = |p| comm(p, "gradient");
    assert_close("gradient sync", sync(&grads), 2.0 * sync(&bf16), 1e-12);
    assert_eq!(comm(&grads, "updated"), comm(&bf16, "updated"));
    assert_eq!(comm(&grads, "tensor"), comm(&bf16, "tensor"));
    assert_eq!(grads.weights_bytes, bf16.weights_bytes);
    assert_eq!(grads.optimizer_state_bytes, bf16.optimizer_state_bytes);

    // Adam in BF16 beside BF16 weights: two 2-byte moments, no master copy (4 bytes per
    // parameter against mixed precision's 12).
    let state = run("precision: bf16\nprecisions: {optimizer_state: bf16}\n");
    assert_close(
        "optimizer state",
        state.optimizer_state_bytes,
        bf16.optimizer_state_bytes * 4.0 / 12.0,
        1e-12,
    );
    assert_eq!(state.gradients_bytes, bf16.gradients_bytes);

    // FP32 weights are their own master copy (8 bytes of moments per parameter), and the
    // BF16 products read BF16 copies of them, written once per iteration.
    let weights = run("precision: bf16\nprecisions: {weights: fp32}\n");
    assert_close(
        "weights",
        weights.weights_bytes,
        2.0 * bf16.weights_bytes,
        1e-12,
    );
    let gather = |p| comm(p, "updated");
    assert_close(
        "weight gather",
        gather(&weights),
        2.0 * gather(&bf16),
        1e-12,
    );
    assert_eq!(comm(&weights, "gradient"), comm(&bf16, "gradient"));
    assert_close(
        "optimizer state",
        weights.optimizer_state_bytes,
        bf16.optimizer_state_bytes * 8.0 / 12.0,
        1e-12,
    );
    assert!(weights.compute_s > bf16.compute_s);
    let copies = |replace: &str, name: &str| {
        let w = Workload::from_yaml("w.yaml", &text.replace("precision: bf16\n", replace)).unwrap();
        w.graph().kernels.iter().any(|k| k.name == name)
    };
    assert!(copies(
        "precision: bf16\nprecisions: {weights: fp32}\n",
        "bf16 weight copies"
    ));
    assert!(!copies("precision: bf16\n", "bf16 weight copies"));
    assert!(copies("precision: fp8\n", "fp8 weight copies"));
}

/// A fabric's `bandwidth_efficiency` scales the bandwidth its transfers achieve: a large
/// all-reduce inside a DGX A100 node takes 1/0.65 of the time at full link rate, one across
/// nodes 1/0.9 (Calculon's NVLink and InfiniBand tiers); out of (0, 1] exits 2.
#[test]
fn a_fabrics_bandwidth_efficiency_scales_what_its_transfers_achieve() {
    let shipped = std::fs::read_to_string(root().join("templates/dgx-a100.yaml")).unwrap();
    assert!(
        shipped.contains("bandwidth_efficiency: 0.65")
            && shipped.contains("bandwidth_efficiency: 0.9")
    );
    let full = shipped
        .replace("bandwidth_efficiency: 0.65", "bandwidth_efficiency: 1.0")
        .replace("bandwidth_efficiency: 0.9", "bandwidth_efficiency: 1.0");
    let beside = root().join("templates/full-rate.tmp.yaml");
    std::fs::write(&beside, &full).unwrap();
    let at_full = System::load(Source::Disk, &beside);
    let _ = std::fs::remove_file(&beside);
    let at_full = at_full.unwrap();
    let (shipped_system, arch) = system("templates/dgx-a100.yaml");
    let (a, b) = (
        shipped_system.network(&arch, 16).unwrap(),
        at_full.network(&arch, 16).unwrap(),
    );
    let inside = vec![(0..8).collect::<Vec<u64>>(), (8..16).collect()];
    let across: Vec<Vec<u64>> = (0..8).map(|i| vec![i, i + 8]).collect();
    for (groups, efficiency) in [(&inside, 0.65), (&across, 0.9)] {
        let bytes = 4e9;
        let t = |n: &Network| n.group_link(groups).time(Collective::AllReduce, bytes);
        assert_close("bandwidth term", t(&b) / t(&a), efficiency, 1e-3);
    }
    let bad = shipped.replacen("bandwidth_efficiency: 0.65", "bandwidth_efficiency: 1.5", 1);
    let err = refused_system("bad-efficiency", &bad);
    assert!(
        err.contains("fabrics[0].bandwidth_efficiency = 1.5"),
        "{err}"
    );
}

/// A 30-layer model on 4 stages runs 7/8/8/7 (the ends, which also hold the embedding and
/// the loss, one fewer); with one micro-batch the step is the stages' work in sequence, so
/// it lies between the 28- and 32-layer models' on the same stages, two layers' work above
/// the 28-layer one; the weights held follow the fullest stage. Interleaving needs layers
/// that divide; `ends=` that leaves the middle stages unequal exits 2.
#[test]
fn uneven_pipeline_stages_run_and_follow_their_layers() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 8).unwrap();
    let s = Strategy::parse("t1-p4-d2-mb1").unwrap();
    let run = |layers: u64| predict(&gpt(16, 1024, layers, 2, "none"), &arch, &net, &s).unwrap();
    let (a, b, c) = (run(28), run(30), run(32));
    assert_eq!(b.micro_batches, 1);
    assert!(a.time_per_iteration_s < b.time_per_iteration_s);
    assert!(b.time_per_iteration_s < c.time_per_iteration_s);
    // Two layers' forward and backward, as the 32-layer model's four more take twice that.
    assert_close(
        "two layers",
        b.time_per_iteration_s - a.time_per_iteration_s,
        (c.time_per_iteration_s - a.time_per_iteration_s) / 2.0,
        0.05,
    );
    // The first stage (embedding + 7 layers) is the fullest in both 28 and 30.
    assert_close("weights held", b.weights_bytes, a.weights_bytes, 1e-6);
    let interleaved = Strategy::parse("t1-p4-d2-mb1-i2").unwrap();
    let e = predict(&gpt(16, 1024, 30, 2, "none"), &arch, &net, &interleaved).unwrap_err();
    assert!(
        e.to_string()
            .contains("30 layers do not split evenly into 4 stages x 2 chunks"),
        "{e}"
    );
    let text = "version: 1\nkind: transformer\nname: g\nhidden: 1024\nlayers: 30\nheads: 16\n\
                ffn_hidden: 4096\nsequence: 2048\nvocab: 51200\nglobal_batch: 2\nprecision: bf16\n";
    let scratch = root().join("target/uneven-stages.tmp.yaml");
    std::fs::write(&scratch, text).unwrap();
    let path = scratch.display().to_string();
    let args = |strategy: &str| {
        common::stackflow(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "8",
            "--workload",
            &path,
            "--strategy",
            strategy,
        ])
    };
    let (code, out, err) = args("t1-p4-d2-mb1-ends=8.6");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ends=8.6"), "{out}");
    let (code, _, err) = args("t1-p4-d2-mb1-ends=8.5");
    let _ = std::fs::remove_file(&scratch);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ends=8.5") && err.contains("equal share"),
        "{err}"
    );
}

/// The per-layer report: each stage's times by layer type, the busiest stage's adding up
/// with the optimizer step to the step's compute time; one layer's times are its type's
/// over the stage's layers and micro-batches; stages of equal layers report alike.
#[test]
fn per_layer_times_add_up_to_the_compute_time() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    for (devices, strategy, workload) in [
        (
            1024,
            "t8-p16-d8-mb1-i2-sp-rc=selective",
            "workloads/gpt3-175b.yaml",
        ),
        (
            2048,
            "t8-p4-d64-mb1-sp-rc=selective",
            "workloads/llama-65b.yaml",
        ),
        (64, "t8-d8-rc=full", "workloads/gpt3-175b.yaml"),
    ] {
        let net = system.network(&arch, devices).unwrap();
        let w = Workload::load(Source::Disk, &root().join(workload)).unwrap();
        let p = predict(&w, &arch, &net, &Strategy::parse(strategy).unwrap()).unwrap();
        let stages = p.per_layer.iter().map(|l| l.stage).max().unwrap() + 1;
        let stage_sum = |stage: u64| -> f64 {
            p.per_layer
                .iter()
                .filter(|l| l.stage == stage)
                .map(|l| l.forward_s + l.backward_s + l.recompute_s)
                .sum()
        };
        let busiest = (0..stages).map(stage_sum).fold(0.0, f64::max);
        assert_close(strategy, busiest + p.optimizer_step_s, p.compute_s, 1e-9);
        // The first stage's collectives by layer type are its blocking collectives.
        let by_type: f64 = p
            .per_layer
            .iter()
            .filter(|l| l.stage == 0)
            .map(|l| l.collectives_s)
            .sum();
        let blocking: f64 = p
            .communication
            .iter()
            .filter(|c| c.blocking)
            .map(|c| c.time_s)
            .sum();
        assert!(blocking > 0.0);
        assert_close("collectives", by_type, blocking, 1e-9);
        let m = p.micro_batches as f64;
        for l in p.per_layer.iter().filter(|l| l.layers > 0) {
            assert_close(
                "one layer forward",
                l.per_layer_forward_s * l.layers as f64 * m,
                l.forward_s,
                1e-9,
            );
        }
        let attention: Vec<f64> = p
            .per_layer
            .iter()
            .filter(|l| l.layer == stackflow::workload::LayerType::Attention)
            .map(|l| l.forward_s)
            .collect();
        assert_eq!(attention.len() as u64, stages);
        assert!(attention.iter().all(|&t| t == attention[0]));
    }
}

/// Tensor parallelism gives each rank whole attention heads: a degree that does not divide
/// them is refused by name, here and through the command line (exit 2).
#[test]
fn a_tensor_degree_that_splits_a_head_is_refused() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 48).unwrap();
    let s = Strategy::parse("t3-d16").unwrap();
    let e = predict(&gpt(16, 1024, 4, 16, "none"), &arch, &net, &s).unwrap_err();
    assert!(
        e.to_string()
            .contains("t3 does not divide the 16 attention heads"),
        "{e}"
    );
    let ok = Strategy::parse("t2-d24").unwrap();
    assert!(predict(&gpt(16, 1024, 4, 48, "none"), &arch, &net, &ok).is_ok());
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "48",
        "--workload",
        "workloads/llama-65b.yaml",
        "--strategy",
        "t3-d16",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("t3 does not divide the 64 attention heads"),
        "{err}"
    );
}

// ------------------------------------------------------------------ context parallelism

/// Llama 3 70B at 131,072 tokens on `devices` H100s (templates/dgx-h100.yaml).
fn llama3_128k(devices: u64) -> (Architecture, stackflow::network::Network, Workload) {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, devices).unwrap();
    let path = root().join("workloads/llama3-70b-128k.yaml");
    (arch, net, Workload::load(Source::Disk, &path).unwrap())
}

/// `stackflow predict` of `workload` under `strategy` on `devices` H100s.
fn predict_h100(devices: &str, workload: &str, strategy: &str) -> (i32, String, String) {
    common::stackflow(&[
        "predict",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        devices,
        "--workload",
        workload,
        "--strategy",
        strategy,
    ])
}

/// Llama 3 70B at 131,072 tokens on 256 H100s (issue 19): with tensor parallelism t8 and
/// sequence parallelism, four stages and a context-parallel degree of 8 it fits, its
/// memory the arithmetic's (Korthikanti et al. 2022: 34 s b h / t bytes of activations per
/// layer with sequence parallelism and selective recomputation, here 16,384 tokens a rank;
/// 16 bytes per parameter of mixed-precision Adam); without context parallelism it is out
/// of memory, its activations alone beyond the device.
#[test]
fn llama3_70b_at_128k_tokens_fits_with_context_parallelism_only() {
    let (arch, net, w) = llama3_128k(256);
    let cp = predict(
        &w,
        &arch,
        &net,
        &Strategy::parse("t8-p4-cp8-mb1-sp").unwrap(),
    )
    .unwrap();
    assert!(cp.feasible, "{:?}", cp.violations);
    // The first stage: the embedding (128,256 x 8192) and 20 layers of attention
    // (8192 x (8192 + 2 x 1024) + 8192 x 8192) and SwiGLU (3 x 8192 x 28,672), with their
    // two norms; a tensor rank holds 1/8.
    let (h, ffn, kv) = (8192.0, 28672.0, 1024.0);
    let layer = h * (h + 2.0 * kv) + h * h + 3.0 * h * ffn + 4.0 * h;
    let stage = (20.0 * layer + 128256.0 * h) / 8.0;
    let states = 16.0 * stage;
    let tokens = 131072.0 / 8.0;
    // 1F1B: the first stage holds 4 micro-batches of its 20 layers.
    let activations = 34.0 * tokens * h / 8.0 * 20.0 * 4.0;
    assert_close(
        "weights, gradients, optimizer state",
        cp.weights_bytes + cp.gradients_bytes + cp.optimizer_state_bytes,
        states,
        0.01,
    );
    assert_close("activations", cp.activations_bytes, activations, 0.03);
    assert!(states + activations < cp.memory_capacity_bytes);
    // Exactly a rank's 16,384 tokens: the same model at that sequence without context
    // parallelism, with the same micro-batches in flight, holds the same bytes.
    let short = match w.clone() {
        Workload::Transformer(mut t) => {
            t.sequence = 16384;
            t.global_batch = 128;
            Workload::Transformer(t)
        }
        _ => unreachable!(),
    };
    let alike = predict(
        &short,
        &arch,
        &net,
        &Strategy::parse("t8-p4-d8-mb1-sp").unwrap(),
    )
    .unwrap();
    assert_close(
        "memory of 16,384 tokens",
        cp.memory_per_device_bytes,
        alike.memory_per_device_bytes,
        1e-12,
    );
    // Without context parallelism: 131,072 tokens a rank, out of memory.
    let without = predict(
        &w,
        &arch,
        &net,
        &Strategy::parse("t8-p4-d8-mb1-sp").unwrap(),
    )
    .unwrap();
    assert!(!without.feasible);
    assert!(without.activations_bytes > without.memory_capacity_bytes);
    assert!(
        without
            .violations
            .iter()
            .any(|v| v.memory_excess().is_some()),
        "{:?}",
        without.violations
    );
    // The command line prints the memory per device and the verdict.
    let run = |strategy: &str| predict_h100("256", "workloads/llama3-70b-128k.yaml", strategy);
    let (code, out, err) = run("t8-p4-cp8-mb1-sp");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("memory / device") && out.contains("of 80.00 GiB"),
        "{out}"
    );
    assert!(
        out.contains("feasible: every device holds its share"),
        "{out}"
    );
    assert!(
        out.contains("context point-to-point beside attention"),
        "{out}"
    );
    let (code, out, err) = run("t8-p4-d8-mb1-sp");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("INFEASIBLE") && out.contains("out of memory"),
        "{out}"
    );
}

/// The key and value exchange: a ring passes each rank's chunk (its 16,384 tokens' keys and
/// values for its one key/value head of 128) cp - 1 times per layer and micro-batch forward
/// and, with the gradients' partial sums, twice the bytes backward, beside the attention;
/// the all-gather gathers the 8 chunks forward and backward and reduce-scatters their
/// gradients, blocking. Left open, the model takes the cheaper under the mapping.
#[test]
fn context_parallel_attention_rings_or_gathers_and_takes_the_cheaper() {
    let (arch, net, w) = llama3_128k(256);
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let (ring, gather, open) = (
        run("t8-p4-cp8-mb1-sp-cp=ring"),
        run("t8-p4-cp8-mb1-sp-cp=gather"),
        run("t8-p4-cp8-mb1-sp"),
    );
    use stackflow::parallel::strategy::ContextAttention;
    assert_eq!(ring.context_attention, Some(ContextAttention::Ring));
    assert_eq!(gather.context_attention, Some(ContextAttention::AllGather));
    let chunk = 16384.0 * 2.0 * 128.0 * 2.0;
    let find = |p: &stackflow::distributed::DistPrediction, name: &str| {
        p.communication
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", p.communication))
            .clone()
    };
    let steps = find(&ring, "context point-to-point beside attention");
    // 20 layers x 16 micro-batches x 7 steps, forward and backward.
    assert_eq!(steps.calls, 2.0 * 20.0 * 16.0 * 7.0);
    assert_close("mean ring message", steps.bytes, 1.5 * chunk, 1e-12);
    assert!(!steps.blocking);
    let gathered = find(&gather, "context all-gather");
    assert_eq!(gathered.calls, 2.0 * 20.0 * 16.0);
    assert_close(
        "gathered keys and values",
        gathered.bytes,
        8.0 * chunk,
        1e-12,
    );
    assert!(gathered.blocking);
    assert_eq!(find(&gather, "context reduce-scatter").calls, 20.0 * 16.0);
    // Only the kind taken is listed and timed, in the per-layer report too: the first
    // stage's collectives by layer type are its tensor-parallel collectives and the ring.
    assert!(!ring
        .communication
        .iter()
        .any(|c| c.name == "context all-gather"));
    for p in [&ring, &gather] {
        let by_type: f64 = p
            .per_layer
            .iter()
            .filter(|l| l.stage == 0)
            .map(|l| l.collectives_s)
            .sum();
        let listed: f64 = p
            .communication
            .iter()
            .filter(|c| c.name.starts_with("tensor ") || c.name.starts_with("context "))
            .map(|c| c.time_s)
            .sum();
        assert_close("collectives by layer type", by_type, listed, 1e-9);
        // The busiest stage (the last, with the logits) sets the compute time.
        let layers: f64 = p
            .per_layer
            .iter()
            .filter(|l| l.stage == 3)
            .map(|l| l.forward_s + l.backward_s + l.recompute_s)
            .sum();
        assert_close(
            "per-layer compute",
            layers + p.optimizer_step_s,
            p.compute_s,
            1e-9,
        );
    }
    let fastest = ring.time_per_iteration_s.min(gather.time_per_iteration_s);
    assert_eq!(open.context_attention, Some(ContextAttention::Ring));
    assert_close("the cheaper", open.time_per_iteration_s, fastest, 1e-12);
    // Beside the attention, the ring costs less than the blocking gathers here.
    assert!(ring.time_per_iteration_s < gather.time_per_iteration_s);
    // Where gathering wins (a short sequence, its attention too short to hide the ring
    // steps' launches and messages), left open takes it, also beside tensor-parallel
    // overlap: the ring not taken adds nothing.
    let (a100, arch) = self::system("templates/dgx-a100.yaml");
    let net = a100.network(&arch, 64).unwrap();
    let small = Workload::load(Source::Disk, &root().join("workloads/gpt-1.7b.yaml")).unwrap();
    for overlap in ["", "-tp=overlap"] {
        let run = |kind: &str| {
            let s = Strategy::parse(&format!("t8-cp8-mb1-sp{kind}{overlap}")).unwrap();
            predict(&small, &arch, &net, &s).unwrap()
        };
        let (ring, gather, open) = (run("-cp=ring"), run("-cp=gather"), run(""));
        assert!(
            gather.time_per_iteration_s < ring.time_per_iteration_s,
            "{overlap}"
        );
        assert_eq!(open.context_attention, Some(ContextAttention::AllGather));
        assert_close(
            overlap,
            open.time_per_iteration_s,
            gather.time_per_iteration_s,
            1e-12,
        );
    }
    // The same compute either way.
    assert_close("compute", ring.compute_s, gather.compute_s, 1e-12);
}

/// Context-parallel ranks hold the same weights and see different tokens: their gradients
/// are summed over the context group, then over the replicas (1/cp of the bytes); ZeRO-1
/// shards the optimizer state over both (Megatron-LM's distributed optimizer).
#[test]
fn context_parallel_ranks_synchronise_gradients_and_share_zero_shards() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 16).unwrap();
    let w = gpt(16, 1024, 4, 16, "selective");
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let p = run("t2-cp4-d2-mb1");
    let sync = |axis: Axis| {
        p.communication
            .iter()
            .find(|c| c.name == "gradient sync" && c.axis == axis)
            .unwrap_or_else(|| panic!("no gradient sync over {axis:?}: {:?}", p.communication))
            .clone()
    };
    let (context, data) = (sync(Axis::Context), sync(Axis::Data));
    assert_eq!((context.group, data.group), (4, 2));
    assert_close("replicas' share", data.bytes, context.bytes / 4.0, 1e-12);
    let (z0, z1) = (run("t2-cp4-d2-mb1"), run("t2-cp4-d2-mb1-z1"));
    assert_close(
        "optimizer state over 8 ranks",
        z1.optimizer_state_bytes,
        z0.optimizer_state_bytes / 8.0,
        1e-12,
    );
    // Context parallelism alone still synchronises gradients.
    let alone = run("t2-cp8-mb2");
    assert!(alone
        .communication
        .iter()
        .any(|c| c.name == "gradient sync" && c.axis == Axis::Context));
}

/// Bad context-parallel input exits 2 naming the field, value and expectation.
#[test]
fn bad_context_parallelism_is_refused_by_name() {
    for (workload, strategy, says) in [
        (
            "workloads/gpt-1.7b.yaml",
            "t2-cp3-d8",
            "cp3 does not divide the sequence of 2048 tokens",
        ),
        (
            "workloads/gpt-1.7b.yaml",
            "t2-cp4-d6-z3",
            "ZeRO-3 with context parallelism (cp) is not modelled",
        ),
        (
            "workloads/gpt-1.7b.yaml",
            "t2-d24-cp=ring",
            "it needs cp > 1",
        ),
        (
            "workloads/gpt-1.7b.yaml",
            "t2-cp4-d6-cp=spiral",
            "cp=spiral: context-parallel attention passes keys and values round a ring",
        ),
        (
            "workloads/lstm-o1.yaml",
            "cp2-d24",
            "splits a transformer's training sequences",
        ),
    ] {
        let (code, _, err) = predict_h100("48", workload, strategy);
        assert_eq!(code, 2, "{strategy}: {err}");
        assert!(err.contains(says), "{strategy}: {err}");
    }
    // Sequence parallelism splits a rank's tokens of each sequence over the tensor ranks;
    // a device count beyond the bound is refused before any network is sized by it.
    let run = |devices: &str, strategy: &str| {
        predict_h100(devices, "workloads/llama3-70b-128k.yaml", strategy)
    };
    let (code, _, err) = run("524288", "t8-cp65536-mb1-sp");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the 2 tokens a rank holds of each sequence over t8"),
        "{err}"
    );
    let (code, _, err) = run("268435456", "t8-cp8");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("devices = 268435456: at most 1048576 devices"),
        "{err}"
    );
    let e = Strategy::from_yaml("s.yaml", "context: 4\ncontext_attention: spiral\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("s.yaml: context_attention = spiral:") && e.contains("ring, or all_gather"),
        "{e}"
    );
    let e = Strategy::from_yaml("s.yaml", "context: 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("s.yaml: context = 0"), "{e}");
    let y = Strategy::from_yaml(
        "s.yaml",
        "tensor: 8\npipeline: 4\ncontext: 8\ncontext_attention: all_gather\n",
    )
    .unwrap();
    assert_eq!(y, Strategy::parse("t8-p4-cp8-cp=gather").unwrap());
    let short = Strategy::from_yaml("s.yaml", "context: 8\ncontext_attention: gather\n");
    assert_eq!(short.unwrap().context_attention, y.context_attention);
    assert_eq!(Strategy::parse(&y.to_string()).unwrap(), y);
    assert_eq!(y.devices(), 256);
}

// ------------------------------------------------------------------ parallel blocks

/// Parallel blocks under tensor parallelism (PaLM Sec. 2): the attention and the
/// feed-forward read one all-gathered input and add into one sum, so each layer needs one
/// all-gather and one reduce-scatter forward (and one of each backward) instead of two; with
/// no sequence parallelism, one all-reduce each way instead of two. Same messages, fewer.
#[test]
fn parallel_blocks_share_their_tensor_parallel_collectives() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 8).unwrap();
    let text = "version: 1\nkind: transformer\nname: palm-small\nhidden: 1024\nlayers: 4\n\
                heads: 8\nhead_dim: 256\nkv_heads: 1\nffn_hidden: 4096\ngated_ffn: true\n\
                parallel_blocks: true\nsequence: 2048\nvocab: 32000\nglobal_batch: 8\n\
                precision: bf16\n";
    let parallel = Workload::from_yaml("palm.yaml", text).unwrap();
    let sequential = Workload::from_yaml(
        "palm.yaml",
        &text.replace("parallel_blocks: true", "parallel_blocks: false"),
    )
    .unwrap();
    let calls = |p: &stackflow::distributed::DistPrediction, name: &str| {
        p.communication
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.calls, c.bytes))
            .unwrap_or_else(|| panic!("no {name}: {:?}", p.communication))
    };
    // 4 layers x 4 micro-batches, forward and backward.
    let fewer = 2.0 * 4.0 * 4.0;
    for (strategy, names) in [
        (
            "t4-d2-mb1-sp",
            &["tensor all-gather", "tensor reduce-scatter"][..],
        ),
        ("t4-d2-mb1", &["tensor all-reduce"][..]),
    ] {
        let s = Strategy::parse(strategy).unwrap();
        let (par, seq) = (
            predict(&parallel, &arch, &net, &s).unwrap(),
            predict(&sequential, &arch, &net, &s).unwrap(),
        );
        for name in names {
            let (p, q) = (calls(&par, name), calls(&seq, name));
            assert_eq!(q.0 - p.0, fewer, "{strategy} {name}");
            assert_close(name, p.1, q.1, 1e-12);
        }
        assert!(
            par.time_per_iteration_s < seq.time_per_iteration_s,
            "{strategy}"
        );
    }
}

/// With stages of unequal layers the fullest device is one stage's, all its parts together:
/// Llama 3 70B at 131,072 tokens on two stages of 30 and 50 layers, the second (20 more
/// layers' weights, gradients and optimizer state) outweighs the first's extra micro-batch
/// of activations; the report gives the second stage's activations (one micro-batch of 50
/// layers), not the first's (two of 30) beside the second's weights.
#[test]
fn the_fullest_device_is_one_stage_with_all_its_parts() {
    let (arch, net, w) = llama3_128k(128);
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let even = run("t8-p2-cp8-mb1-sp");
    let uneven = run("t8-p2-cp8-mb1-sp-ends=30.50");
    // One micro-batch's activations per layer: the even first stage holds 2 of 40 layers.
    let per_layer = even.activations_bytes / 80.0;
    assert_close(
        "one stage's activations",
        uneven.activations_bytes,
        50.0 * per_layer,
        1e-9,
    );
    assert!(uneven.weights_bytes > even.weights_bytes);
    let parts = uneven.weights_bytes
        + uneven.gradients_bytes
        + uneven.optimizer_state_bytes
        + uneven.activations_bytes;
    assert_close("parts", parts, uneven.memory_per_device_bytes, 1e-12);
}

/// Bisection bandwidth (TPU v4 Sec. 3.5, Fig. 8): a torus cut across its longest dimension
/// loses twice the links of a plane; a switch passes half its ports; a full mesh the links
/// between its halves. TPU v4's 3D torus cuts 2x (64 chips) to 4x (512 chips) the links of
/// TPU v3's 2D torus: Fig. 8's 2-4x. Per link TPU v4 has 50 GB/s against TPU v3's 70
/// (Table 4), so the bandwidth ratio is that times 5/7.
#[test]
fn bisection_of_tori_switches_and_meshes() {
    let g = 1e9;
    let torus = one_fabric(
        Topology::Torus {
            dims: vec![4, 4, 4],
        },
        64,
        6.0 * g,
        1e-6,
    );
    // 16 rows of 4 cut twice (the wraparound): 32 links of 1 GB/s.
    assert_close(
        "4x4x4 torus",
        torus.bisection_bytes_per_s(),
        32.0 * g,
        1e-12,
    );
    let mesh = one_fabric(Topology::Mesh { dims: vec![8, 8] }, 64, 4.0 * g, 1e-6);
    assert_close("8x8 mesh", mesh.bisection_bytes_per_s(), 8.0 * g, 1e-12);
    let switch = one_fabric(Topology::Switch, 8, 3.0 * g, 1e-6);
    assert_close(
        "switch of 8",
        switch.bisection_bytes_per_s(),
        12.0 * g,
        1e-12,
    );
    let full = one_fabric(Topology::FullyConnected, 4, 3.0 * g, 1e-6);
    assert_close(
        "full mesh of 4",
        full.bisection_bytes_per_s(),
        4.0 * g,
        1e-12,
    );
    assert_eq!(
        one_fabric(Topology::Switch, 1, g, 1e-6).bisection_bytes_per_s(),
        0.0
    );
    // TPU v4 over TPU v3 at the same chip count.
    let ratio = |v4: &[u64], v3: &[u64]| {
        let (s4, a4) = system("templates/tpu-v4-pod.yaml");
        let (s3, a3) = system("templates/tpu-v3-pod.yaml");
        let n4 = s4
            .with_slice(v4)
            .unwrap()
            .network(&a4, v4.iter().product())
            .unwrap();
        let n3 = s3
            .with_slice(v3)
            .unwrap()
            .network(&a3, v3.iter().product())
            .unwrap();
        n4.bisection_bytes_per_s() / n3.bisection_bytes_per_s()
    };
    let per_link = {
        let (s4, a4) = system("templates/tpu-v4-pod.yaml");
        let (s3, a3) = system("templates/tpu-v3-pod.yaml");
        let f4 = s4.network(&a4, 512).unwrap().fabrics[0].egress_bytes_per_s / 6.0;
        let f3 = s3.network(&a3, 512).unwrap().fabrics[0].egress_bytes_per_s / 4.0;
        f4 / f3
    };
    assert!((0.6..0.8).contains(&per_link), "{per_link}");
    assert_close("64 chips", ratio(&[4, 4, 4], &[8, 8]), 2.0 * per_link, 1e-9);
    assert_close(
        "512 chips",
        ratio(&[8, 8, 8], &[16, 32]),
        4.0 * per_link,
        1e-9,
    );
}

/// TPU v4 Fig. 4 and its reading in Sec. 2.3: with OCS, slices of 1K chips give 75% goodput
/// at 99.0% and 99.5% host availability (three fit beside the failed blocks), 2K chips 50%
/// and 3K chips 75%; statically cabled, hosts must be 99.9% available for reasonable
/// goodput, and at 99.5% a 1K slice is far less available than with OCS.
#[test]
fn ocs_slice_goodput_matches_the_papers_reading() {
    use stackflow::network::availability::{goodput, Pod};
    // The TPU v4 pod as its template gives it: 4x4x4 blocks, 4 chips per host.
    let (sys, _) = system("templates/tpu-v4-pod.yaml");
    let pod = Pod::of(&sys, 4096, ("(test)", "chips")).unwrap();
    assert_eq!((pod.block_chips, pod.chips_per_host), (64, 4));
    let goodput = |slice, a| goodput(&pod, slice, a);
    for a in [0.99, 0.995] {
        for (slice, expected) in [(1024, 0.75), (2048, 0.50), (3072, 0.75)] {
            let g = goodput(slice, a).unwrap();
            assert!(
                (g.with_ocs - expected).abs() < 0.02,
                "{slice} at {a}: {g:?}"
            );
        }
    }
    let g = goodput(1024, 0.995).unwrap();
    assert!(g.with_ocs > 2.5 * g.static_cabled, "{g:?}");
    assert!(
        g.one_slice_with_ocs > 0.999 && g.one_slice_static < 0.75,
        "{g:?}"
    );
    // Static goodput of 1K slices is reasonable (over 75%) only at 99.9%.
    assert!(goodput(1024, 0.999).unwrap().static_cabled > 0.75);
    assert!(goodput(1024, 0.995).unwrap().static_cabled < 0.3);
    let (code, _, err) = common::stackflow(&["availability", "--host-availability", "1.5"]);
    assert_eq!(code, 2);
    assert!(err.contains("--host-availability = 1.5"), "{err}");
    let (code, _, err) = common::stackflow(&["availability", "--slices", "100"]);
    assert_eq!(code, 2);
    assert!(err.contains("multiple of the 64-chip block"), "{err}");
    // An OCS question on a torus without blocks (TPU v3's 2D torus).
    let (code, _, err) =
        common::stackflow(&["availability", "--system", "templates/tpu-v3-pod.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tpu-v3-pod.yaml") && err.contains("block") && err.contains("(missing)"),
        "{err}"
    );
    let (code, _, err) = common::stackflow(&["availability", "--pod-chips", "100"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--pod-chips = 100"), "{err}");
    // A value given twice is one row (intensity's device counts likewise).
    let (code, out, err) = common::stackflow(&[
        "availability",
        "--host-availability",
        "0.99,0.99",
        "--slices",
        "64,64,128",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 2, "{out}");
}

/// Fuzz finding (execution 16894 of seed 1): a node of 2^64 - 1 devices made the refusal of
/// `--devices 16` list every divisor of the node (a hang); it is refused at once, naming
/// the count.
#[test]
fn a_huge_node_is_refused_without_listing_its_divisors() {
    let text = std::fs::read_to_string(root().join("templates/dgx-a100.yaml"))
        .unwrap()
        .replacen("    size: 8 ", "    size: 18446744073709551615 ", 1);
    assert!(text.contains("18446744073709551615"));
    let start = std::time::Instant::now();
    let err = refused_system("huge-node", &text);
    assert!(err.contains("devices = 16"), "{err}");
    assert!(start.elapsed().as_secs() < 30);
}

/// A serving-under-load row's calibration and known gaps name metrics validate prices, each
/// once: an unknown or a repeated one exits 2 naming the file, the row and the entry.
#[test]
fn serving_load_calibrations_name_known_metrics_once() {
    let index = std::fs::read_to_string(root().join("validation/cases.yaml")).unwrap();
    let rows = std::fs::read_to_string(root().join("validation/serving-load.yaml")).unwrap();
    let fitted = r#"calibrates: [{metric: "ITL", sets:"#;
    assert!(rows.contains(fitted));
    for (tag, edited, says) in [
        (
            "unknown",
            rows.replacen(fitted, r#"calibrates: [{metric: "TPOT", sets:"#, 1),
            "rows[0] (L1).calibrates[0].metric",
        ),
        (
            "twice",
            rows.replacen(
                fitted,
                r#"calibrates: [{metric: "TTFT", sets: "x"}, {metric: "TTFT", sets:"#,
                1,
            ),
            "rows[0] (L1).calibrates[1].metric",
        ),
    ] {
        let load = root().join(format!("validation/load-{tag}.tmp.yaml"));
        let cases = root().join(format!("validation/cases-{tag}.tmp.yaml"));
        std::fs::write(&load, &edited).unwrap();
        let name = load.file_name().unwrap().to_str().unwrap().to_string();
        std::fs::write(
            &cases,
            index.replace("file: serving-load.yaml", &format!("file: {name}")),
        )
        .unwrap();
        let (code, out, err) = common::stackflow(&["validate", &cases.display().to_string()]);
        let _ = std::fs::remove_file(&load);
        let _ = std::fs::remove_file(&cases);
        assert_eq!(code, 2, "{tag}: {out}{err}");
        assert!(err.contains(&name) && err.contains(says), "{tag}: {err}");
    }
}

/// `validate` refuses what no measurement can be, by field: a measured value of 0 or below
/// (a percentage outside [0, 100]), an empty index, a case's zero devices and a strategy
/// that does not parse (`cases[i].fast.strategy` for a ratio's runs); none reaches the
/// model. A device count from `--devices` is blamed on the flag, the system named.
#[test]
fn validate_and_devices_errors_name_where_the_value_came_from() {
    let index = std::fs::read_to_string(root().join("validation/cases.yaml")).unwrap();
    for (i, (from, to, field, says)) in [
        (
            "measured: 20.83",
            "measured: 0",
            "cases[0].measured = 0",
            "a measurement > 0",
        ),
        (
            "measured: 20.83",
            "measured: -20.83",
            "cases[0].measured = -20.83",
            "> 0",
        ),
        (
            "measured: 82.37",
            "measured: 182.37",
            "cases[2].measured = 182.37",
            "[0, 100]",
        ),
        (
            "devices: 2048",
            "devices: 0",
            "cases[0].devices = 0",
            "a device count > 0",
        ),
        (
            "strategy: p16-d4-t8-mb1-rc=full}",
            "strategy: p16-d4-t8-mb1-rc=bogus}",
            "cases[9].fast.strategy = p16-d4-t8-mb1-rc=bogus",
            "recompute must be",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let text = index.replacen(from, to, 1);
        assert!(text.contains(to), "{to}");
        let beside = root().join(format!("validation/impossible-{i}.tmp.yaml"));
        std::fs::write(&beside, text).unwrap();
        let (code, _, err) = common::stackflow(&["validate", &beside.display().to_string()]);
        let _ = std::fs::remove_file(&beside);
        assert_eq!(code, 2, "{err}");
        for piece in [field, says] {
            assert!(err.contains(piece), "expected {piece:?} in: {err}");
        }
    }
    let empty = root().join("validation/empty.tmp.yaml");
    std::fs::write(&empty, "version: 1\ncases: []\n").unwrap();
    let (code, out, err) = common::stackflow(&["validate", &empty.display().to_string()]);
    let _ = std::fs::remove_file(&empty);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("cases = []: at least one validation case"),
        "{err}"
    );
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "12",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("command line: --devices = 12")
            && err.contains("the system in templates/dgx-a100.yaml"),
        "{err}"
    );
}

/// Activations per layer as Korthikanti et al. (2022, Table 2) count them, in s b h bytes:
/// with tensor parallelism t, 10 + 24 / t + 5 a s / (h t) (the inputs of the QKV and first
/// MLP products, 2 s b h each, and the first layer norm's and the dropout masks, whole on
/// every rank); with sequence parallelism all of it over t; selective recomputation drops
/// the 5 a s / h of the attention core (softmax, its dropout) and keeps its inputs Q, K, V.
/// Full recomputation keeps each layer's input (2 s b h, over t with sequence parallelism)
/// and rebuilds one layer's activations at a time for its backward, from that input (not
/// held twice), so the differences from it leave out what lies outside the layers.
#[test]
fn activations_per_layer_are_korthikanti_s() {
    let (system, arch) = system("templates/dgx-h100.yaml");
    let net = system.network(&arch, 8).unwrap();
    let (h, a, s, layers, t) = (4096.0, 32.0, 2048.0, 4.0, 8.0);
    let w = Workload::from_yaml(
        "k.yaml",
        "version: 1\nkind: transformer\nname: k\nhidden: 4096\nlayers: 4\nheads: 32\n\
         ffn_hidden: 16384\nsequence: 2048\nvocab: 51200\nglobal_batch: 1\nprecision: bf16\n\
         dropout: 0.1\n",
    )
    .unwrap();
    let act = |strategy: &str| {
        predict(&w, &arch, &net, &Strategy::parse(strategy).unwrap())
            .unwrap()
            .activations_bytes
    };
    let sbh = s * h;
    let core = 5.0 * a * s / h;
    for (sp, split, whole) in [("", t, 1.0), ("-sp", t, t)] {
        let full = act(&format!("t8-mb1{sp}-rc=full"));
        let none = act(&format!("t8-mb1{sp}-rc=none")) - full;
        let selective = act(&format!("t8-mb1{sp}-rc=selective")) - full;
        // Whole on every rank without sequence parallelism: 10 s b h; split: 24 s b h.
        let kept = 10.0 / whole + 24.0 / split;
        let input = 2.0 / whole;
        let layer = kept + core / split;
        // Full: every input, and one layer rebuilt less its input.
        let full_layers = layers * input + (layer - input);
        assert_close(
            &format!("rc=none{sp}"),
            none,
            sbh * (layers * layer - full_layers),
            1e-3,
        );
        assert_close(
            &format!("rc=selective{sp}"),
            selective,
            sbh * (layers * kept - full_layers),
            1e-3,
        );
    }
}

/// Served, a recommendation model's experts take their routed samples alone (no capacity
/// padding): DLRM-A-MoE at capacity factor 4 serves 65,536 queries with 65,536 x 2 / 16 =
/// 8192 rows an expert, as at capacity 1, where training pads to 4 x 8192.
#[test]
fn served_dlrm_experts_take_their_routed_samples() {
    let text = std::fs::read_to_string(root().join("workloads/dlrm-a-moe.yaml"))
        .unwrap()
        .replace("capacity_factor: 1.0", "capacity_factor: 4.0");
    let rows = |yaml: &str| {
        let graph = Workload::from_yaml("moe.yaml", yaml).unwrap().graph();
        let k = graph
            .kernels
            .iter()
            .find(|k| k.name == "expert up")
            .expect("the experts' first product");
        match k.op {
            stackflow::workload::Op::Gemm { m, .. } => m,
            _ => unreachable!(),
        }
    };
    assert_eq!(rows(&text), 4 * 8192);
    assert_eq!(
        rows(&format!("{text}\ninference: {{batch: 65536}}\n")),
        8192
    );
}

/// A batch that reaches fewer experts than the expert-parallel degree still runs them: 16
/// queries of DLRM-A-MoE served on 16 devices with an expert each (16 x 2 routes reach
/// about 14 of 16 experts), the experts' products and their all-to-all priced, not dropped
/// by rounding the experts a device runs down to none.
#[test]
fn experts_reached_by_a_small_batch_are_priced() {
    let (sys, arch) = system("templates/zionex.yaml");
    let net = sys.network(&arch, 16).unwrap();
    let text = std::fs::read_to_string(root().join("workloads/dlrm-a-moe.yaml")).unwrap();
    let w =
        Workload::from_yaml("moe.yaml", &format!("{text}\ninference: {{batch: 16}}\n")).unwrap();
    let p = predict(&w, &arch, &net, &Strategy::parse("d16-e16").unwrap()).unwrap();
    assert!(
        p.communication
            .iter()
            .any(|c| c.name == "expert all-to-all"),
        "{:?}",
        p.communication.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
}

/// ZeRO-3's working set: a device gathers a layer's weights whole before running it (the
/// next one too when it prefetches) and holds the layer's whole gradient until its
/// reduce-scatter, on top of its shards. GPT-3 175B at t2: a layer is 12 h^2 + 13 h
/// parameters, half of them a rank's, 1.81 GB in bf16: prefetching holds two layers and a
/// gradient, just in time one and a gradient; ZeRO-2 none.
#[test]
fn zero_3_holds_the_layers_it_gathers() {
    let (system, arch) = system("templates/dgx-a100.yaml");
    let net = system.network(&arch, 1024).unwrap();
    let w = Workload::load(Source::Disk, &root().join("workloads/gpt3-175b.yaml")).unwrap();
    let run = |s: &str| predict(&w, &arch, &net, &Strategy::parse(s).unwrap()).unwrap();
    let base = "t2-d256-p2-mb1-i48-sp-rc=selective";
    let (z2, z3, just_in_time) = (
        run(&format!("{base}-z2")),
        run(&format!("{base}-z3")),
        run(&format!("{base}-z3-prefetch=off")),
    );
    let h = 12288.0;
    // The first stage's mean layer: 48 layers and the embedding (50,257 x h), over t = 2,
    // 2 bytes a weight and a gradient.
    let layer = (48.0 * (12.0 * h * h + 13.0 * h) + 50257.0 * h) / 48.0 / 2.0 * 2.0;
    assert_eq!(z2.gathered_bytes, 0.0);
    assert_close("prefetching", z3.gathered_bytes, 3.0 * layer, 0.01);
    assert_close(
        "just in time",
        just_in_time.gathered_bytes,
        2.0 * layer,
        0.01,
    );
    // The shards themselves: 1/256 of what ZeRO-2 holds whole.
    assert_close(
        "weights under ZeRO-3",
        z3.weights_bytes,
        z2.weights_bytes / 256.0,
        0.01,
    );
    // Frozen weights have no gradient to hold: LoRA on Llama-2-70B gathers a layer (twice
    // with prefetch) but holds only its adapters' gradient, not a whole layer's.
    let h100 = System::load(Source::Disk, &root().join("templates/dgx-h100.yaml")).unwrap();
    let h100_arch = h100.accelerator().unwrap();
    let h100_net = h100.network(&h100_arch, 8).unwrap();
    let lora =
        Workload::load(Source::Disk, &root().join("workloads/llama2-70b-lora.yaml")).unwrap();
    let tuned =
        |s: &str| predict(&lora, &h100_arch, &h100_net, &Strategy::parse(s).unwrap()).unwrap();
    let (ahead, in_time) = (tuned("d8-z3"), tuned("d8-z3-prefetch=off"));
    let lora_layer = ahead.gathered_bytes - in_time.gathered_bytes;
    assert!(
        in_time.gathered_bytes < 1.01 * lora_layer,
        "{} for a layer of {lora_layer}",
        in_time.gathered_bytes
    );
    // A model without repeated layers is one unit: nothing next to prefetch (DLRM-A's dense
    // part gathered once, with its gradient).
    let zion = System::load(Source::Disk, &root().join("templates/zionex.yaml")).unwrap();
    let zion_arch = zion.accelerator().unwrap();
    let zion_net = zion.network(&zion_arch, 128).unwrap();
    let dlrm = Workload::load(Source::Disk, &root().join("workloads/dlrm-a.yaml")).unwrap();
    let run_dlrm =
        |s: &str| predict(&dlrm, &zion_arch, &zion_net, &Strategy::parse(s).unwrap()).unwrap();
    let (ahead, in_time) = (run_dlrm("d128-z3"), run_dlrm("d128-z3-prefetch=off"));
    assert!(ahead.gathered_bytes > 0.0);
    assert_close(
        "no layer to prefetch",
        ahead.gathered_bytes,
        in_time.gathered_bytes,
        1e-12,
    );
    // Experts held whole (e = d: 2 of 16 per device, not sharded) are already counted: only
    // the dense part is gathered, attention's 4 h^2 a layer and the embedding's share, twice
    // and a gradient (3 x 1.22 GB), not the 2.4 GB experts beside it.
    let moe = Workload::load(Source::Disk, &root().join("workloads/llm-moe.yaml")).unwrap();
    let whole = predict(
        &moe,
        &h100_arch,
        &h100_net,
        &Strategy::parse("d8-e8-z3").unwrap(),
    )
    .unwrap();
    let dense = 4.0 * h * h + 4.0 * h + 50257.0 * h / 96.0;
    assert_close(
        "dense layers gathered",
        whole.gathered_bytes,
        3.0 * dense * 2.0,
        0.01,
    );
}
