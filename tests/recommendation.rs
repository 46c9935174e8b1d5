//! Recommendation models beyond the devices' memory and served (issue 21): embedding tables
//! in the CPUs' DDR (Zion Sec. IV, Table I; TPU v4 Sec. 3.5, Fig. 9), GPU-direct against
//! host-staged transfers (Zion Sec. V-B), and DLRM inference (MAD Max Fig. 11b).

mod common;

use common::root;
use stackflow::config::Source;
use stackflow::distributed::predict;
use stackflow::domain::{TablePlacement, Transfers};
use stackflow::generator::Architecture;
use stackflow::network::System;
use stackflow::parallel::Strategy;
use stackflow::violation::Violation;
use stackflow::workload::{Phase, Workload};

fn system(file: &str) -> (System, Architecture) {
    let s = System::load(Source::Disk, &root().join(file)).unwrap();
    let a = s.accelerator().unwrap();
    (s, a)
}

fn workload(file: &str) -> Workload {
    Workload::load(Source::Disk, &root().join(file)).unwrap()
}

/// `system` with its host's placement and transfers set.
fn hosted(mut s: System, tables: TablePlacement, transfers: Transfers) -> System {
    let host = s.host.as_mut().expect("the system has CPUs");
    host.tables = tables;
    host.transfers = transfers;
    s
}

#[test]
fn dlrm_b_trains_on_zion_with_its_tables_in_cpu_ddr_and_staging_is_slower() {
    let (sys, v100) = system("templates/zion.yaml");
    let dlrm = workload("workloads/dlrm-b.yaml");
    let d8 = Strategy::parse("d8").unwrap();
    let run = |tables, transfers| {
        let s = hosted(sys.clone(), tables, transfers);
        predict(&dlrm, &v100, &s.network(&v100, 8).unwrap(), &d8).unwrap()
    };
    // On the devices alone the 1.2 TiB of tables cannot fit the 8 x 16 GiB of HBM.
    let device = run(TablePlacement::Device, Transfers::Direct);
    assert!(!device.feasible);
    assert!(device
        .violations
        .iter()
        .any(|v| matches!(v, Violation::TablesExceedSystem { .. })));
    assert!(device.host_tables.is_none());

    // With the CPUs' 2 TB of DDR beside them it trains: the hottest tables fill the HBM the
    // dense model leaves, the rest live in DDR, and the hosts pace the iteration.
    let direct = run(TablePlacement::Auto, Transfers::Direct);
    assert!(direct.feasible, "{:?}", direct.violations);
    let host = direct.host_tables.as_ref().unwrap();
    assert!(host.tables > 0 && host.tables < 400, "{}", host.tables);
    assert!(host.tables_bytes < host.memory_capacity_bytes);
    assert!(direct.memory_per_device_bytes <= direct.memory_capacity_bytes);
    assert_eq!(direct.time_per_iteration_s, host.time_s);
    assert!(host.update_s > host.gather_s && host.gather_s > host.transfer_s);

    // Host-staged transfers copy through a bounce buffer: slower than GPU-direct by one
    // more DDR read and write of every pooled vector and gradient, and one more link
    // latency per transfer (Zion Sec. V-B, Fig. 14).
    let staged = run(TablePlacement::Auto, Transfers::Staged);
    let s = hosted(sys.clone(), TablePlacement::Auto, Transfers::Direct);
    let net = s.network(&v100, 8).unwrap();
    let graph = stackflow::distributed::placed(&dlrm, &v100, &net).graph();
    let pooled: f64 = graph.host_tables.iter().map(|t| t.pooled_bytes).sum();
    let h = s.host.unwrap();
    let ddr = 8.0 * h.sockets_per_device * h.memory_bandwidth_bytes_per_s_per_socket;
    let extra = 2.0 * (2.0 * pooled / ddr + h.link_latency_s);
    println!(
        "DLRM-B on Zion: {:.3} s direct, {:.3} s staged; {} of 400 tables in DDR",
        direct.time_per_iteration_s, staged.time_per_iteration_s, host.tables
    );
    assert!(extra > 0.0);
    common::assert_close(
        "staged over direct",
        staged.time_per_iteration_s - direct.time_per_iteration_s,
        extra,
        1e-9,
    );

    // Every table in DDR: more host work than keeping the hottest on the devices.
    let all_host = run(TablePlacement::Host, Transfers::Direct);
    assert_eq!(all_host.host_tables.as_ref().unwrap().tables, 400);
    assert!(all_host.time_per_iteration_s > direct.time_per_iteration_s);
}

#[test]
fn placement_keeps_the_hottest_tables_on_the_devices() {
    // Two groups of equal bytes; the second is read 8x as often per row. Room for one group.
    let text = "version: 1\nkind: dlrm\nname: two-heats\nbatch: 8192\ndense_features: 64\n\
                bottom_mlp: [64]\ntop_mlp: [64, 1]\nembeddings:\n\
                - {tables: 10, rows: 10000000, dim: 64, lookups_per_sample: 1}\n\
                - {tables: 10, rows: 10000000, dim: 64, lookups_per_sample: 8}\n\
                interaction: dot\nprecision: fp16\nembedding_precision: fp32\n";
    let w = Workload::from_yaml("two.yaml", text).unwrap();
    let Workload::Dlrm(d) = &w else {
        unreachable!()
    };
    let group = 10.0 * d.table_bytes(0);
    assert_eq!(w.tables_beyond(group * 1.05), vec![10, 0]);
    assert_eq!(w.tables_beyond(group * 1.55), vec![5, 0]);
    assert_eq!(w.tables_beyond(0.0), vec![10, 10]);
    assert_eq!(w.tables_beyond(f64::INFINITY), vec![0, 0]);
    // The devices then run lookups of the hot group only; the host holds the cold one.
    let placed = w.with_host_tables(&[10, 0]).graph();
    assert_eq!(placed.host_tables.len(), 1);
    assert_eq!(placed.host_tables[0].tables, 10);
    assert_eq!(placed.host_tables[0].lookups, (8192 * 10) as f64);
}

#[test]
fn sparse_cores_beat_cpu_hosted_embeddings_five_to_seven_times_on_dlrm0() {
    // TPU v4 Fig. 9 and Sec. 3.5: "When embeddings are placed in CPU memory on TPU v4,
    // performance drops by 5x-7x, with bottlenecks due to CPU memory bandwidth."
    let (sys, v4) = system("templates/tpu-v4-pod.yaml");
    let sys = sys.with_slice(&[4, 4, 8]).unwrap();
    let dlrm0 = workload("workloads/dlrm0-tpu.yaml");
    let d128 = Strategy::parse("d128").unwrap();
    let run = |tables| {
        let s = hosted(sys.clone(), tables, Transfers::Direct);
        predict(&dlrm0, &v4, &s.network(&v4, 128).unwrap(), &d128).unwrap()
    };
    let sparse = run(TablePlacement::Device);
    let cpu = run(TablePlacement::Host);
    // With the tables on the hosts the SparseCores only exchange the pooled vectors.
    assert!(sparse.sparse_core_s > cpu.sparse_core_s && cpu.sparse_core_s > 0.0);
    let h = cpu.host_tables.as_ref().unwrap();
    let drop = cpu.time_per_iteration_s / sparse.time_per_iteration_s;
    println!(
        "DLRM0 on 128 TPU v4: SparseCore {:.1} ms, embeddings in CPU memory {:.1} ms ({drop:.2}x; \
         hosts: lookups {:.1} ms, transfers {:.1} ms, update {:.1} ms)",
        sparse.time_per_iteration_s * 1e3,
        cpu.time_per_iteration_s * 1e3,
        h.gather_s * 1e3,
        h.transfer_s * 1e3,
        h.update_s * 1e3
    );
    assert!((5.0..=7.0).contains(&drop), "{drop}");
    // The bottleneck is the CPUs' memory bandwidth, as the paper says.
    assert!(h.gather_s + h.update_s > 2.0 * h.transfer_s);
}

#[test]
fn tables_beyond_every_socket_are_infeasible_with_the_reason() {
    // DLRM-A's 3 TiB of fp32 tables exceed Zion's 2 TiB of DDR however they are placed.
    let (sys, v100) = system("templates/zion.yaml");
    let dlrm = workload("workloads/dlrm-a.yaml");
    let net = sys.network(&v100, 8).unwrap();
    let p = predict(&dlrm, &v100, &net, &Strategy::parse("d8").unwrap()).unwrap();
    assert!(!p.feasible);
    let v = p
        .violations
        .iter()
        .find(|v| matches!(v, Violation::HostMemoryExceeded { .. }))
        .expect("host memory exceeded");
    assert!(v.to_string().contains("CPU sockets"), "{v}");
}

#[test]
fn dlrm_inference_runs_forward_only_and_ranks_strategies() {
    let serve = workload("workloads/dlrm-a-inference.yaml");
    let train = workload("workloads/dlrm-a.yaml");
    let g = serve.graph();
    assert!(!g.trains);
    assert!(g.kernels.iter().all(|k| k.phase == Phase::Forward));
    assert_eq!(
        g.memory.gradients_bytes + g.memory.optimizer_state_bytes,
        0.0
    );
    assert_eq!(serve.queries_per_batch(), Some(65536));

    let (sys, a100) = system("templates/zionex.yaml");
    let net = sys.network(&a100, 128).unwrap();
    let time = |w: &Workload, s: &str| {
        let s = if s.starts_with('(') {
            Strategy::from_madmax(s, 8, 128).unwrap()
        } else {
            Strategy::parse(s).unwrap()
        };
        let p = predict(w, &a100, &net, &s).unwrap();
        assert!(p.feasible, "{s}: {:?}", p.violations);
        p
    };
    // Serving a batch costs its forward pass: well under a training iteration of it, and
    // with no gradient traffic listed.
    let served = time(&serve, "d128");
    let trained = time(&train, "d128");
    assert!(served.time_per_iteration_s < 0.5 * trained.time_per_iteration_s);
    assert!(served
        .communication
        .iter()
        .all(|c| !c.name.contains("gradient")));
    let qps = 65536.0 / served.time_per_iteration_s;
    assert!((served.tokens_per_s - qps).abs() < 1e-6 * qps);
    // FSDP gathers each weight once per batch, not twice as in training.
    let fsdp = time(&serve, "d128-z3");
    let gathers = fsdp
        .communication
        .iter()
        .find(|c| c.name.contains("weight gather"))
        .unwrap();
    assert_eq!(gathers.calls, 1.0);
    let tp = time(&serve, "(TP, DDP)");
    println!(
        "DLRM-A inference, 64K queries on 128 A100: (TP, DDP) {:.2} ms, FSDP {:.2} ms, DDP {:.2} ms",
        tp.time_per_iteration_s * 1e3,
        fsdp.time_per_iteration_s * 1e3,
        served.time_per_iteration_s * 1e3
    );
}

#[test]
fn bad_host_and_serving_inputs_exit_2_naming_the_field() {
    let scratch = common::Scratch::new("recommendation-bad-input");
    // A DLRM inference batch of 0.
    let text = std::fs::read_to_string(root().join("workloads/dlrm-a-inference.yaml")).unwrap();
    let zero = scratch.write("zero.yaml", &text.replace("  batch: 65536", "  batch: 0"));
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zionex.yaml",
        "--workload",
        &zero,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("inference.batch") && err.contains("zero.yaml"),
        "{err}"
    );
    // A transformer's serving keys on a recommendation model.
    let tokens = scratch.write(
        "tokens.yaml",
        &text.replace("  batch: 65536", "  batch: 64\n  prompt_tokens: 8"),
    );
    let (code, _, err) = common::stackflow(&["predict", "--workload", &tokens]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("prompt_tokens"), "{err}");
    // Host-memory tables on a system without CPUs.
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zionex.yaml",
        "--workload",
        "workloads/dlrm-b.yaml",
        "--tables",
        "host",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--tables") && err.contains("host:") && err.contains("zionex.yaml"),
        "{err}"
    );
    // --host-transfers on a system without CPUs is named, even beside --tables device.
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zionex.yaml",
        "--workload",
        "workloads/dlrm-b.yaml",
        "--tables",
        "device",
        "--host-transfers",
        "staged",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--host-transfers = staged"), "{err}");
    // The flags place tables on a system: without one they are refused.
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--workload",
        "workloads/dlrm-b.yaml",
        "--tables",
        "host",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--system"), "{err}");
    // A host section with no sockets; hosts of 3 devices, which cannot carry Zion's 8.
    for (from, to, field) in [
        ("  sockets: 8 ", "  sockets: 0 ", "host.sockets"),
        ("  devices: 8 ", "  devices: 3 ", "host.devices = 3"),
    ] {
        let err = refused_zion(from, to);
        assert!(err.contains(field), "{err}");
    }
}

/// Predicts DLRM-B on templates/zion.yaml with `from` replaced by `to`, written beside the
/// shipped templates (its accelerator path is relative to them): exit 2; returns the error.
fn refused_zion(from: &str, to: &str) -> String {
    let zion = std::fs::read_to_string(root().join("templates/zion.yaml")).unwrap();
    assert!(zion.contains(from), "{from}");
    let beside = root().join("templates/zion-refused.tmp.yaml");
    std::fs::write(&beside, zion.replace(from, to)).unwrap();
    let (code, _, err) = common::stackflow(&[
        "predict",
        "--system",
        &beside.display().to_string(),
        "--workload",
        "workloads/dlrm-b.yaml",
    ]);
    let _ = std::fs::remove_file(&beside);
    assert_eq!(code, 2, "{err}");
    err
}

#[test]
fn the_cli_reports_host_tables_and_serving() {
    let (code, out, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zion.yaml",
        "--workload",
        "workloads/dlrm-b.yaml",
        "--host-transfers",
        "staged",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("host tables") && out.contains("host-staged"),
        "{out}"
    );
    let (code, out, err) = common::stackflow(&[
        "predict",
        "--system",
        "templates/zionex.yaml",
        "--workload",
        "workloads/dlrm-a-inference.yaml",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let latency = v["serving"]["latency_s"].as_f64().unwrap();
    let qps = v["serving"]["queries_per_s"].as_f64().unwrap();
    assert!((qps * latency - 65536.0).abs() < 1e-6 * 65536.0);
    assert!(v["serving"]["joules_per_query"].as_f64().unwrap() > 0.0);
}

#[test]
fn per_layer_type_strategies_price_the_hosts_and_serving_alike() {
    use stackflow::distributed::{predict_layered, LayerStrategy, Workspace};
    // Every table of DLRM0 in the hosts' memory: no embedding layers are left on the
    // devices, and the hosts pace the iteration as under one strategy for all.
    let (sys, v4) = system("templates/tpu-v4-pod.yaml");
    let sys = hosted(
        sys.with_slice(&[4, 4, 8]).unwrap(),
        TablePlacement::Host,
        Transfers::Direct,
    );
    let net = sys.network(&v4, 128).unwrap();
    let dlrm0 = workload("workloads/dlrm0-tpu.yaml");
    for one in ["d128", "d128-mb1024"] {
        let whole = predict(&dlrm0, &v4, &net, &Strategy::parse(one).unwrap()).unwrap();
        let text = format!("embedding:{one},dense:{one},interaction:{one}");
        let text = text.as_str();
        let s = LayerStrategy::parse(text).unwrap();
        let p = predict_layered(&dlrm0, &v4, &net, 16, &s, &mut Workspace::new(&v4)).unwrap();
        let host = p.host_tables.as_ref().expect("the hosts' tables");
        assert_eq!(host.tables, 150);
        common::assert_close(
            text,
            p.time_per_iteration_s,
            whole.time_per_iteration_s,
            1e-9,
        );
        // The hosts' time is not exposed communication.
        assert!(
            p.exposed_communication_s < 0.1 * p.time_per_iteration_s,
            "{text}: {}",
            p.exposed_communication_s
        );
    }
    // Served, a resharding between layer types runs forward only: one call per batch.
    let (sys, a100) = system("templates/zionex.yaml");
    let net = sys.network(&a100, 128).unwrap();
    let serve = workload("workloads/dlrm-a-inference.yaml");
    let s = LayerStrategy::parse("embedding:d128,dense:t8-d16,interaction:d128").unwrap();
    let p = predict_layered(&serve, &a100, &net, 8, &s, &mut Workspace::new(&a100)).unwrap();
    let reshards: Vec<_> = p
        .communication
        .iter()
        .filter(|c| c.name.starts_with("reshard"))
        .collect();
    assert!(!reshards.is_empty());
    assert!(reshards.iter().all(|c| c.calls == 1.0), "{reshards:?}");
}

#[test]
fn a_served_batch_waits_for_its_lookups_and_the_next_batch_overlaps() {
    // DLRM0 served on 128 TPU v4 chips, 4096 queries a batch: a batch's latency has its
    // lookups (SparseCores, or the hosts) before its forward; the next batch's lookups run
    // beside this one's forward, so batches come faster than one latency apart.
    let text = std::fs::read_to_string(root().join("workloads/dlrm0-tpu.yaml")).unwrap()
        + "inference: {batch: 4096}\n";
    let served = Workload::from_yaml("dlrm0-served.yaml", &text).unwrap();
    let (sys, v4) = system("templates/tpu-v4-pod.yaml");
    let sys = sys.with_slice(&[4, 4, 8]).unwrap();
    let d128 = Strategy::parse("d128").unwrap();
    for tables in [TablePlacement::Device, TablePlacement::Host] {
        let s = hosted(sys.clone(), tables, Transfers::Direct);
        let p = predict(&served, &v4, &s.network(&v4, 128).unwrap(), &d128).unwrap();
        let latency = p.serving_latency_s.expect("a served model's latency");
        let lookups = match &p.host_tables {
            Some(h) => h.gather_s + h.transfer_s,
            None => p.sparse_core_s,
        };
        assert!(lookups > 0.0, "{tables:?}");
        assert!(latency > p.time_per_iteration_s, "{tables:?}");
        assert!(latency >= lookups + 0.5 * p.compute_s.min(p.time_per_iteration_s) - 1e-12);
    }
    // A training model has no serving latency.
    let train = workload("workloads/dlrm0-tpu.yaml");
    let p = predict(&train, &v4, &sys.network(&v4, 128).unwrap(), &d128).unwrap();
    assert!(p.serving_latency_s.is_none());
}

/// The all-to-all leaves each tensor-parallel rank its slice of its replica's pooled
/// vectors. An interaction that takes every feature (DLRM-A's feature transformer) runs
/// whole on each rank, so the ranks all-gather the slices first: under t8-d16 that is each
/// replica's 4096 samples x 1000 tables x 256 x 2 bytes, once a step, blocking (it was
/// missing: each rank ran the interaction on features it never received). A concatenation
/// that DLRM-A's narrowing top layer reads row-parallel takes the slices as they come, and
/// so does an interaction run on each rank's own samples (sequence parallelism).
#[test]
fn tensor_ranks_gather_the_pooled_vectors_an_interaction_takes_whole() {
    let (sys, a100) = system("templates/zionex.yaml");
    let net = sys.network(&a100, 128).unwrap();
    let run = |file: &str, s: &str| {
        let p = predict(&workload(file), &a100, &net, &Strategy::parse(s).unwrap()).unwrap();
        assert!(p.feasible, "{file} {s}: {:?}", p.violations);
        p
    };
    let gathered = |p: &stackflow::distributed::DistPrediction| {
        p.communication
            .iter()
            .filter(|c| c.name == "tensor all-gather")
            .map(|c| (c.bytes, c.calls, c.blocking, c.time_s))
            .collect::<Vec<_>>()
    };
    let whole = run("workloads/dlrm-a-transformer.yaml", "t8-d16");
    let [(bytes, calls, blocking, time)] = gathered(&whole)[..] else {
        panic!("{:?}", whole.communication)
    };
    assert_eq!(bytes, (4096 * 1000 * 256 * 2) as f64);
    assert_eq!((calls, blocking), (1.0, true));
    assert!(time > 0.0);
    // Data parallelism alone has no tensor ranks to gather over; the concatenation
    // takes its slices.
    assert!(gathered(&run("workloads/dlrm-a-transformer.yaml", "d128")).is_empty());
    assert!(gathered(&run("workloads/dlrm-a.yaml", "t8-d16")).is_empty());
    // Under sequence parallelism each rank runs the interaction on its own samples, which
    // the all-to-all hands it whole: the tensor all-gathers are the layers' own, each paired
    // with a reduce-scatter (a gather of the pooled vectors too was one more).
    let sp = run("workloads/dlrm-a-transformer.yaml", "t8-d16-sp");
    let calls = |name: &str| {
        sp.communication
            .iter()
            .filter(|c| c.name == name)
            .map(|c| c.calls)
            .sum::<f64>()
    };
    assert!(calls("tensor all-gather") > 0.0);
    assert_eq!(calls("tensor all-gather"), calls("tensor reduce-scatter"));
}

/// Split per layer type, the pooled vectors' gather follows the interaction's split, not
/// the tables': an interaction on 8 tensor ranks gathers its replica's vectors (2.10 GB,
/// as the uniform t8-d16 does) whatever splits the tables, and one run by data
/// parallelism gathers nothing, though the tables run on 8 tensor ranks. The tables'
/// all-to-all delivers any layout of as many bytes per device.
#[test]
fn per_layer_type_splits_gather_the_pooled_vectors_for_their_reader() {
    use stackflow::distributed::{predict_layered, LayerStrategy, Workspace};
    let (sys, a100) = system("templates/zionex.yaml");
    let net = sys.network(&a100, 128).unwrap();
    let w = workload("workloads/dlrm-a-transformer.yaml");
    let run = |text: &str| {
        let s = LayerStrategy::parse(text).unwrap();
        let p = predict_layered(&w, &a100, &net, 8, &s, &mut Workspace::new(&a100)).unwrap();
        assert!(p.feasible, "{text}: {:?}", p.violations);
        p
    };
    let pooled = (4096 * 1000 * 256 * 2) as f64;
    let gathers = |p: &stackflow::distributed::LayeredPrediction| {
        p.communication
            .iter()
            .filter(|c| c.collective == stackflow::network::collective::Collective::AllGather)
            .filter(|c| c.bytes >= pooled * (1.0 - 1e-9))
            .map(|c| (c.name.clone(), c.bytes, c.calls))
            .collect::<Vec<_>>()
    };
    let uniform = run("embedding:t8-d16,interaction:t8-d16,dense:t8-d16");
    let reader = run("embedding:d128,interaction:t8-d16,dense:t8-d16");
    assert_eq!(gathers(&uniform).len(), 1, "{:?}", uniform.communication);
    let [(name, bytes, calls)] = &gathers(&reader)[..] else {
        panic!("{:?}", reader.communication)
    };
    assert_eq!(
        (name.as_str(), *bytes, *calls),
        ("reshard embedding to interaction", pooled, 1.0)
    );
    common::assert_close(
        "tables split apart",
        reader.time_per_iteration_s,
        uniform.time_per_iteration_s,
        1e-3,
    );
    let tables_only = run("embedding:t8-d16,interaction:d128,dense:d128");
    assert!(
        gathers(&tables_only).is_empty(),
        "{:?}",
        tables_only.communication
    );
}

/// With SparseCores (TPU v4) the lookups and their all-to-all run beside the dense step,
/// but the tensor ranks' gather of the pooled vectors feeds the TensorCores' interaction:
/// it blocks the dense step (DLRM0 with a dot-product interaction under t4-d32: each
/// replica's 16384 samples x 150 tables x 128 x 2 bytes).
#[test]
fn with_sparse_cores_the_pooled_vectors_gather_blocks_the_dense_step() {
    let text = std::fs::read_to_string(root().join("workloads/dlrm0-tpu.yaml")).unwrap();
    assert!(text.contains("\ninteraction: concat\n"));
    let text = text.replace("\ninteraction: concat\n", "\ninteraction: dot\n");
    let dot = Workload::from_yaml("dlrm0-dot.yaml", &text).unwrap();
    let (sys, v4) = system("templates/tpu-v4-pod.yaml");
    let net = sys
        .with_slice(&[4, 4, 8])
        .unwrap()
        .network(&v4, 128)
        .unwrap();
    let p = predict(&dot, &v4, &net, &Strategy::parse("t4-d32").unwrap()).unwrap();
    assert!(p.feasible, "{:?}", p.violations);
    let find = |name: &str| p.communication.iter().find(|c| c.name == name);
    let gather = find("tensor all-gather").unwrap_or_else(|| panic!("{:?}", p.communication));
    assert_eq!(gather.bytes, (16384 * 150 * 128 * 2) as f64);
    assert!(gather.blocking);
    assert!(!find("sparse-core all-to-all").unwrap().blocking);
    assert!(find("sparse-core all-gather").is_none());
}
