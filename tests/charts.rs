//! Charts (issue 31): the roofline's data (ceilings, roofs and kernels where the model
//! puts them) and `predict --plot`; the search's Pareto chart (`search --plot`).

mod common;

use common::{root, stackflow, Scratch};
use stackflow::config::Source;
use stackflow::domain::Precision;
use stackflow::network::System;
use stackflow::perf::roofline::Roofline;
use stackflow::perf::{Bound, Evaluator};
use stackflow::workload::Workload;

/// A GEMM sweep on H100 from skinny (one row) to square (8192 rows) against 8192 x 8192
/// weights: the points climb the HBM line, then sit under the BF16 roof; none is above
/// what the roofline allows at its intensity.
#[test]
fn gemm_sweep_moves_from_the_memory_line_to_the_compute_roof() {
    let arch = System::load(Source::Disk, &root().join("templates/dgx-h100.yaml"))
        .unwrap()
        .accelerator()
        .unwrap();
    let mut ev = Evaluator::new(&arch);
    let rows = [1u64, 8, 64, 256, 1024, 4096, 8192];
    let points: Vec<_> = rows
        .iter()
        .map(|m| {
            let text =
                format!("version: 1\nkind: gemm\nm: {m}\nk: 8192\nn: 8192\nprecision: bf16\n");
            let g = Workload::from_yaml("gemm.yaml", &text).unwrap().graph();
            let p = ev.predict(&g, &[]);
            let r = Roofline::of(&ev.machine, &p.kernels);
            assert_eq!(r.points.len(), 1);
            (r.points[0].clone(), r)
        })
        .collect();
    for (m, (p, _)) in rows.iter().zip(&points) {
        println!(
            "m {m:>5}: {:8.2} FLOP/B, {:.3e} FLOP/s, {}",
            p.intensity_flop_per_byte, p.achieved_flops_per_s, p.bound
        );
    }
    let (first, r) = &points[0];
    let hbm = r.main_memory().unwrap();
    assert_eq!(hbm.level, "dram");
    let roof = r
        .roofs
        .iter()
        .find(|x| x.precision == Precision::Bf16)
        .unwrap()
        .flops_per_s;
    // Skinny: bound by HBM, on the products' line (the launch keeps it a little under),
    // which the stack's product cap puts below the streaming kernels' line.
    assert_eq!(first.bound, Bound::Memory("dram".into()));
    let products = r
        .product_memory
        .as_ref()
        .expect("H100 caps its products apart");
    assert!(products.bandwidth_bytes_per_s < hbm.bandwidth_bytes_per_s);
    let line = products.bandwidth_bytes_per_s * first.intensity_flop_per_byte;
    assert!(first.achieved_flops_per_s <= line * (1.0 + 1e-9));
    assert!(first.achieved_flops_per_s > 0.8 * line, "{first:?}");
    assert!(first.achieved_flops_per_s < 0.01 * roof);
    // Square: bound by compute, under the BF16 roof.
    let (last, _) = points.last().unwrap();
    assert_eq!(last.bound, Bound::Compute);
    assert!(last.achieved_flops_per_s <= roof * (1.0 + 1e-9));
    assert!(last.achieved_flops_per_s > 0.8 * roof, "{last:?}");
    // Intensity grows with the rows while the product is bound by memory, and never falls
    // (once tiles, not the operands, set the traffic it stays); the bound turns from memory
    // to compute once; every point is under the roofline at its intensity.
    for w in points.windows(2) {
        let (a, b) = (&w[0].0, &w[1].0);
        assert!(b.intensity_flop_per_byte >= a.intensity_flop_per_byte);
        if a.bound != Bound::Compute {
            assert!(b.intensity_flop_per_byte > a.intensity_flop_per_byte);
        }
    }
    let turns = points
        .windows(2)
        .filter(|w| (w[0].0.bound == Bound::Compute) != (w[1].0.bound == Bound::Compute))
        .count();
    assert_eq!(turns, 1);
    for (p, r) in &points {
        let allowed = r.attainable(Precision::Bf16, p.intensity_flop_per_byte);
        assert!(p.achieved_flops_per_s <= allowed * (1.0 + 1e-9), "{p:?}");
    }
}

/// `predict --plot DIR` writes the chart and its data; a file where the directory should be
/// exits 2 naming it.
#[test]
fn predict_plot_writes_the_chart_and_its_data() {
    let scratch = Scratch::new("roofline-plot");
    let dir = scratch.path().join("charts");
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--budget",
        "budgets/h100.yaml",
        "--plot",
        &dir.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(dir.join("roofline.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for text in [
        "dram 2.680 TB/s",
        "bf16, fp16",
        "gemm",
        "attention",
        "pointwise",
    ] {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
    let csv = std::fs::read_to_string(dir.join("roofline.csv")).unwrap();
    let kernels = csv.lines().filter(|l| l.contains(",kernel,")).count();
    assert!(kernels > 10, "{csv}");
    assert!(csv.contains("step,ceiling,dram,"));
    // A served model gets one chart per phase.
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/llama2-70b-decode.yaml",
        "--budget",
        "budgets/h100.yaml",
        "--plot",
        &dir.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(dir.join("roofline-prefill.svg").is_file());
    assert!(dir.join("roofline-decode.svg").is_file());
    // A file in the directory's place.
    let file = scratch.write("not-a-dir", "x");
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--budget",
        "budgets/h100.yaml",
        "--plot",
        &file,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not-a-dir") && err.contains("not a directory"),
        "{err}"
    );
}

/// `search --plot DIR`: the Pareto chart of time against memory per device, with the
/// chosen strategy, the base and the capacity marked, and its data.
#[test]
fn search_plot_draws_the_pareto_front() {
    let scratch = Scratch::new("pareto-plot");
    let dir = scratch.path().join("search");
    let (code, out, err) = stackflow(&[
        "search",
        "--workload",
        "workloads/gpt-1.7b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "8",
        "--plot",
        &dir.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let best = out
        .split_whitespace()
        .skip_while(|w| *w != "best")
        .nth(1)
        .unwrap()
        .to_string();
    let svg = std::fs::read_to_string(dir.join("pareto.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains(&format!("chosen: {best}")),
        "{best} not marked"
    );
    for text in [
        "base",
        "capacity 80 GiB",
        "Pareto front",
        "memory per device (GiB)",
    ] {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
    let csv = std::fs::read_to_string(dir.join("pareto.csv")).unwrap();
    assert!(csv.lines().any(|l| l.starts_with("pareto,1,")), "{csv}");
}

/// `predict --system --plot DIR`: one roofline per kind of pipeline stage (first, middle,
/// last), each kernel at its micro-batch's size on one device; Megatron's GPT-3 175B on
/// 1024 A100s.
#[test]
fn system_plot_draws_each_kind_of_stage() {
    let scratch = Scratch::new("stage-rooflines");
    let dir = scratch.path().join("gpt3");
    let (code, _, err) = stackflow(&[
        "predict",
        "--workload",
        "workloads/gpt3-175b.yaml",
        "--system",
        "templates/dgx-a100.yaml",
        "--devices",
        "1024",
        "--strategy",
        "t8-p16-d8-mb1-i2-sp-rc=selective",
        "--plot",
        &dir.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mut charts: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    charts.sort();
    assert_eq!(
        charts,
        [
            "roofline-stage-0.svg",
            "roofline-stage-15.svg",
            "roofline-stages-1-14.svg"
        ],
        "{charts:?}"
    );
    // A micro-batch of one 2048-token sequence, the QKV product split 8 ways (2048 rows,
    // 12288 by 4608): a compute-bound product under A100's 312 TFLOP/s BF16 peak.
    let csv = std::fs::read_to_string(dir.join("roofline.csv")).unwrap();
    let qkv = csv
        .lines()
        .find(|l| l.starts_with("stages 1-14,kernel,qkv projection,"))
        .unwrap_or_else(|| panic!("{csv}"));
    let fields: Vec<&str> = qkv.split(',').collect();
    let (count, achieved): (u64, f64) = (fields[4].parse().unwrap(), fields[6].parse().unwrap());
    // 96 layers over 16 stages: 6 per device.
    assert_eq!(count, 6, "{qkv}");
    assert!(achieved > 1e14 && achieved < 312e12, "{qkv}");
}
