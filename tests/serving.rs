//! Serving under load beyond its core (issue 29): arrivals from traces, a closed loop of
//! clients, chunked prefill, prefill/decode disaggregation, the serving search and a budget
//! optimized for serving.

mod common;

use common::{root, stackflow, Scratch};
use serde_json::Value;
use stackflow::config::Source;
use stackflow::distributed::load::{Arrivals, Deployment, Engine, Load, Slo};
use stackflow::parallel::Strategy;
use stackflow::workload::Workload;

fn json(args: &[&str]) -> Value {
    let (code, out, err) = stackflow(&[args, &["--json"]].concat());
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().unwrap_or_else(|| panic!("{path:?} in {v}"))
}

const ONE_H100: [&str; 5] = [
    "serve",
    "--system",
    "templates/dgx-h100.yaml",
    "--devices",
    "1",
];

/// A trace of mixed lengths is served request by request: every row completes, the mean
/// lengths are the trace's, and replaying it at twice its rate loads the engine more. A
/// trace with a negative, unsorted or non-numeric field, or without the columns, exits 2
/// naming the file, the line and the field.
#[test]
fn a_trace_is_served_and_bad_traces_are_refused_by_line() {
    let dir = Scratch::new("serving-trace");
    let mut text = String::from("arrival_s,prompt_tokens,output_tokens\n");
    for i in 0..200u64 {
        text += &format!(
            "{},{},{}\n",
            i as f64 * 0.02,
            64 + (i * 37) % 900,
            16 + (i * 11) % 240
        );
    }
    let trace = dir.write("trace.csv", &text);
    let args = [&ONE_H100[..], &["--trace", &trace]].concat();
    let own = json(&args);
    assert_eq!(own["load"]["requests"], 200);
    let prompts: f64 = (0..200u64)
        .map(|i| (64 + (i * 37) % 900) as f64)
        .sum::<f64>()
        / 200.0;
    assert!((f(&own, &["mean_prompt_tokens"]) - prompts).abs() < 1e-9);
    assert!((f(&own, &["load", "rate_per_s"]) - 199.0 / 3.98).abs() < 1e-6);
    assert!(own["arrivals"].as_str().unwrap().starts_with("trace "));
    let faster = json(&[&args[..], &["--rate", "200"]].concat());
    assert!(f(&faster, &["ttft_s", "p99"]) > f(&own, &["ttft_s", "p99"]));
    assert!(f(&faster, &["requests_per_s"]) > f(&own, &["requests_per_s"]));
    // The Azure trace's columns are read as they are published.
    let azure = dir.write(
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n\
         2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.2043000,879,4\n",
    );
    let a = json(&[&ONE_H100[..], &["--trace", &azure]].concat());
    assert_eq!(a["load"]["requests"], 3);
    for (body, says) in [
        (
            "arrival_s,prompt_tokens,output_tokens\n0,10,5\n-1,10,5\n",
            "line 3: arrival_s = -1: an arrival time in seconds >= 0",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n2,10,5\n1,10,5\n",
            "line 3: arrival_s = 1: arrivals in order",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,0,5\n",
            "line 2: prompt_tokens = 0",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,10,many\n",
            "line 2: output_tokens = many",
        ),
        (
            "when,prompt,output\n0,10,5\n",
            "header = when,prompt,output",
        ),
    ] {
        let bad = dir.write("bad.csv", body);
        let (code, _, err) = stackflow(&[&ONE_H100[..], &["--trace", &bad]].concat());
        assert_eq!(code, 2, "{body}: {err}");
        assert!(err.contains(&format!("{bad}: {says}")), "{says}: {err}");
    }
}

/// A closed loop of clients: one client sees an idle engine (its TTFT the lone prefill, its
/// ITL a one-sequence decode step); many more clients than the cache holds saturate it at
/// the batch it holds: throughput flat, the queue (TTFT) growing with the clients.
#[test]
fn a_closed_loop_saturates_at_the_batch_the_cache_holds() {
    let w = "workloads/llama2-7b-serve.yaml";
    let run = |clients: u64, extra: &[&str]| {
        let c = clients.to_string();
        let n = (clients * 10).max(40).to_string();
        json(
            &[
                &ONE_H100[..],
                &["--workload", w, "--concurrency", &c, "--requests", &n],
                extra,
            ]
            .concat(),
        )
    };
    let one = run(1, &[]);
    assert!((f(&one, &["ttft_s", "p50"]) / f(&one, &["idle_ttft_s"]) - 1.0).abs() < 1e-9);
    assert!(one["arrivals"]
        .as_str()
        .unwrap()
        .contains("1 clients in a closed loop"));
    // The cap of 32 running: 64 and 128 clients are served alike, the extra ones queue.
    // Chunked prefill puts each prompt beside the running decodes: without it a prefill step
    // streams the weights for its prompts alone (a 128-token prefill costs about a decode
    // step on an H100), so the rate would follow how many prompts each prefill step batches
    // (64 staggered clients one at a time, 128 in lockstep 32 at once: 8.9 against 7.7 ms
    // per output token), not the cap.
    let cap = ["--max-batch", "32", "--chunked-prefill"];
    let (c64, c128) = (run(64, &cap), run(128, &cap));
    assert_eq!(c64["most_running"], 32);
    let ratio = f(&c128, &["output_tokens_per_s"]) / f(&c64, &["output_tokens_per_s"]);
    assert!((0.97..1.03).contains(&ratio), "{ratio}");
    let queue = f(&c128, &["ttft_s", "p50"]) / f(&c64, &["ttft_s", "p50"]);
    assert!(queue > 2.0, "{queue}");
    let ratio = f(&run(16, &cap), &["output_tokens_per_s"]) / f(&c64, &["output_tokens_per_s"]);
    assert!(
        ratio < 0.8,
        "below the cap the engine is not saturated: {ratio}"
    );
    // A closed loop takes no rate and no disaggregation.
    let (code, _, err) =
        stackflow(&[&ONE_H100[..], &["--concurrency", "4", "--rate", "2"]].concat());
    assert_eq!(code, 2, "{err}");
}

/// Chunked prefill (Sarathi-Serve) keeps decodes going behind long prompts: under the same
/// Poisson load of 2048-token prompts the p99 TPOT falls, the TTFT at light load stays the
/// lone prefill's.
#[test]
fn chunked_prefill_keeps_decodes_going_behind_long_prompts() {
    let dir = Scratch::new("serving-chunked");
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml"))
        .unwrap()
        .replace(
            "prompt_tokens: 128, output_tokens: 128",
            "prompt_tokens: 2048, output_tokens: 128",
        );
    let w = dir.write("long.yaml", &text);
    let at = |rate: &str, chunked: bool| {
        let mut args = vec![
            "--workload",
            w.as_str(),
            "--rate",
            rate,
            "--requests",
            "600",
        ];
        if chunked {
            args.extend(["--chunked-prefill", "--max-step-tokens", "512"]);
        }
        json(&[&ONE_H100[..], &args].concat())
    };
    let (whole, chunked) = (at("6", false), at("6", true));
    assert!(
        f(&chunked, &["tpot_s", "p99"]) < 0.8 * f(&whole, &["tpot_s", "p99"]),
        "{} vs {}",
        chunked["tpot_s"],
        whole["tpot_s"]
    );
    assert_eq!(chunked["load"]["chunked_prefill"], true);
    let light = at("0.05", true);
    assert!(f(&light, &["ttft_s", "p50"]) < 1.3 * f(&light, &["idle_ttft_s"]));
}

/// Prefill/decode disaggregation (DistServe): a decode pool never stalls behind a prefill,
/// so its TPOT is a decode step's, its tail as tight as its median, while colocated
/// replicas' tails carry prefills; the cache crosses NVLink in about its size over a port's
/// bandwidth. Llama-2-70B on 8 H100s at 10 requests/s: prefill t2 x2 + decode t4 against
/// t4 x2.
#[test]
fn disaggregation_spares_decodes_the_prefills_and_ships_the_cache() {
    let base = [
        "serve",
        "--workload",
        "workloads/llama2-70b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--rate",
        "10",
        "--requests",
        "600",
    ];
    let pd = json(&[&base[..], &["--prefill", "t2-d2", "--decode", "t4"]].concat());
    let colocated = json(&[&base[..], &["--strategy", "t4-d2"]].concat());
    assert_eq!(pd["devices"], 8);
    assert_eq!(pd["layout"], "prefill t2-d1-p1 x2 + decode t4-d1-p1 x1");
    assert!(
        f(&pd, &["tpot_s", "p99"]) < 0.7 * f(&colocated, &["tpot_s", "p99"]),
        "{} vs {}",
        pd["tpot_s"],
        colocated["tpot_s"]
    );
    assert!(f(&pd, &["tpot_s", "p99"]) < 1.1 * f(&pd, &["tpot_s", "p50"]));
    assert!(f(&colocated, &["tpot_s", "p99"]) > 1.1 * f(&colocated, &["tpot_s", "p50"]));
    // A prefill device's half of a 1024-token prompt's cache (2 x 80 layers x 8 heads x 128
    // x 2 bytes per token, over 2 devices) over one NVLink port (450 GB/s at 0.65) and its
    // 10 us floor.
    let bytes = 2.0 * 80.0 * 8.0 * 128.0 * 2.0 * 1024.0 / 2.0;
    let expect = bytes / (450e9 * 0.65) + 10e-6;
    let shipped = f(&pd, &["kv_transfer_s_mean_prompt"]);
    assert!(
        (shipped / expect - 1.0).abs() < 0.02,
        "{shipped} vs {expect}"
    );
    // Pools whose devices disagree with --devices are refused by name.
    let (code, _, err) = stackflow(
        &[
            &base[..],
            &["--prefill", "t2", "--decode", "t4", "--devices", "8"],
        ]
        .concat(),
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("--devices 8: the pools use 2 + 4 = 6"),
        "{err}"
    );
}

/// Issue 29's search: Llama-2-70B on 8 H100s within p99 TTFT <= 1 s and TPOT <= 50 ms. The
/// best deployment keeps the SLO at its goodput, nothing listed beats it, and pruning by
/// capacity gives the same top 10 as searching every deployment.
#[test]
fn the_serving_search_is_exact_under_its_pruning() {
    use stackflow::opt::search::serving::{search_serving, ServingSettings};
    let w = Workload::load(
        Source::Disk,
        &root().join("workloads/llama2-70b-serve.yaml"),
    )
    .unwrap();
    let (t, spec) = w.serving().unwrap();
    let system =
        stackflow::network::System::load(Source::Disk, &root().join("templates/dgx-h100.yaml"))
            .unwrap();
    let arch = system.accelerator().unwrap();
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    let settings = ServingSettings {
        slo: Slo {
            ttft_p99_s: 1.0,
            tpot_p99_s: 0.05,
        },
        requests: 400,
        top: 10,
        disaggregate: true,
        chunked: true,
        prune: true,
    };
    let pruned =
        search_serving(t, &arrivals, &system, &arch, 8, &Load::default(), &settings).unwrap();
    let all = search_serving(
        t,
        &arrivals,
        &system,
        &arch,
        8,
        &Load::default(),
        &ServingSettings {
            prune: false,
            ..settings.clone()
        },
    )
    .unwrap();
    assert_eq!(pruned.top, all.top);
    assert!(pruned.pruned_by_capacity > 0 && all.pruned_by_capacity == 0);
    assert_eq!(pruned.searched + pruned.pruned_by_capacity, all.searched);
    let best = pruned.best.as_ref().unwrap();
    assert!(
        best.at.ttft_s.p99 <= 1.0 && best.at.tpot_s.p99 <= 0.05,
        "{best:?}"
    );
    assert_eq!(best.at.layout, pruned.top[0].layout);
    for c in &pruned.top {
        assert!(c.goodput_requests_per_s_per_device <= best.requests_per_s_per_device);
        // No rate above what a deployment serves swamped is sustained.
        assert!(
            c.goodput_requests_per_s <= c.capacity_requests_per_s,
            "{c:?}"
        );
        assert_eq!(c.devices, 8);
    }
    // One 80 GB device cannot hold 140 GB of weights: that split is reported, not searched.
    assert!(pruned.splits_unfit >= 1, "{:?}", pruned.unfit_example);
    // Both kinds of deployment were searched.
    assert!(pruned.deployments > 100);
}

/// The command: its answer, and a served model without an SLO refused by name.
#[test]
fn search_serves_by_goodput_and_wants_an_slo() {
    let base = [
        "search",
        "--workload",
        "workloads/llama2-70b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
    ];
    let v = json(
        &[
            &base[..],
            &[
                "--slo-ttft-ms",
                "1000",
                "--slo-tpot-ms",
                "50",
                "--requests",
                "300",
            ],
        ]
        .concat(),
    );
    assert!(f(&v, &["best", "requests_per_s_per_device"]) > 0.0, "{v}");
    assert_eq!(v["devices"], 8);
    let (code, _, err) = stackflow(&base);
    assert_eq!(code, 2);
    assert!(
        err.contains("give --slo-ttft-ms and --slo-tpot-ms"),
        "{err}"
    );
    // An SLO no deployment keeps: exit 3 naming the latency.
    let (code, out, _) = stackflow(
        &[
            &base[..],
            &[
                "--slo-ttft-ms",
                "1",
                "--slo-tpot-ms",
                "50",
                "--requests",
                "100",
                "--no-disaggregate",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 3);
    assert!(
        out.contains("NOTHING KEEPS THE SLO") && out.contains("TTFT"),
        "{out}"
    );
}

/// `optimize` with a serving goal moves the budget where the traffic needs it: decode-heavy
/// requests (128 in, 1024 out) buy memory bandwidth (the DRAM's power share grows by half
/// at least), prefill-only requests (2048 in, 1 out) buy compute (the cores' share grows, the
/// DRAM's stays below the decode-heavy optimum's); the simulated goodput confirms each gain
/// the fluid model promised (the fluid model prices prompts alone as the engine batches them:
/// as many as a step holds).
#[test]
fn optimize_for_serving_buys_bandwidth_for_decode_and_compute_for_prefill() {
    let dir = Scratch::new("serving-optimize");
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml")).unwrap();
    let share = |v: &Value, resource: &str, component: &str, which: &str| {
        v["shares"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["resource"] == resource && s["component"] == component)
            .map(|s| s[which].as_f64().unwrap())
            .unwrap()
    };
    let mut dram = Vec::new();
    for (name, lengths) in [
        ("decode.yaml", "prompt_tokens: 128, output_tokens: 1024"),
        ("prefill.yaml", "prompt_tokens: 2048, output_tokens: 1"),
    ] {
        let w = dir.write(
            name,
            &text.replace("prompt_tokens: 128, output_tokens: 128", lengths),
        );
        let v = json(&[
            "optimize",
            "--workload",
            &w,
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "1",
            "--slo-ttft-ms",
            "1000",
            "--slo-tpot-ms",
            "100",
            "--restarts",
            "2",
            "--steps",
            "25",
        ]);
        let s = &v["serving"];
        assert!(
            f(s, &["best_fluid_requests_per_s_per_device"])
                > 1.1 * f(s, &["initial_fluid_requests_per_s_per_device"]),
            "{s}"
        );
        assert!(
            f(s, &["best_simulated", "requests_per_s_per_device"])
                > 1.05 * f(s, &["initial_simulated", "requests_per_s_per_device"]),
            "{s}"
        );
        dram.push((
            share(&v, "power", "dram", "initial"),
            share(&v, "power", "dram", "best"),
            share(&v, "power", "core", "best") - share(&v, "power", "core", "initial"),
        ));
    }
    let (decode, prefill) = (dram[0], dram[1]);
    assert!(
        decode.1 > 1.5 * decode.0,
        "decode-heavy: DRAM power share {decode:?}"
    );
    assert!(
        prefill.1 < decode.1,
        "prefill-only: DRAM power share {prefill:?} against decode-heavy {decode:?}"
    );
    assert!(
        prefill.2 > 0.0,
        "prefill-only: the cores' power share grows {prefill:?}"
    );
    // A served model needs an SLO; a trained one takes none.
    let (code, _, err) = stackflow(&[
        "optimize",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "1",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("give --slo-ttft-ms and --slo-tpot-ms"),
        "{err}"
    );
    let (code, _, err) = stackflow(&["optimize", "--slo-ttft-ms", "100", "--slo-tpot-ms", "10"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not served"), "{err}");
}

/// The fluid steady state the optimizer maximises is near the simulated goodput on a plain
/// case (Llama-2-7B, 128 in and out, one H100): within 15%.
#[test]
fn the_fluid_goodput_is_near_the_simulated_one() {
    let w = Workload::load(Source::Disk, &root().join("workloads/llama2-7b-serve.yaml")).unwrap();
    let (t, spec) = w.serving().unwrap();
    let system =
        stackflow::network::System::load(Source::Disk, &root().join("templates/dgx-h100.yaml"))
            .unwrap();
    let arch = system.accelerator().unwrap();
    let net = system.network(&arch, 1).unwrap();
    let engine = Engine::new(
        t,
        spec.into(),
        &arch,
        &net,
        &Strategy::default(),
        &Load::default(),
    )
    .unwrap();
    let slo = Slo {
        ttft_p99_s: 1.0,
        tpot_p99_s: 0.03,
    };
    let fluid = engine
        .steady_goodput(&slo, spec.prompt_tokens, spec.output_tokens)
        .unwrap();
    let arrivals = Arrivals::Poisson {
        prompt_tokens: spec.prompt_tokens,
        output_tokens: spec.output_tokens,
        seed: 0,
    };
    let sim = Deployment::Colocated(engine)
        .goodput(&arrivals, &slo, 2000)
        .unwrap()
        .unwrap();
    let ratio = fluid.requests_per_s / sim.requests_per_s;
    assert!(
        (0.85..1.15).contains(&ratio),
        "fluid {fluid:?} vs simulated {}",
        sim.requests_per_s
    );
}

/// A replica of pipeline stages keeps a batch in every stage (vLLM's virtual engines, one
/// per stage, each with its share of the cache): swamped, Llama-2-7B over 2 H100s as p2
/// serves within 10% of two d2 replicas, where one batch in flight served half.
#[test]
fn a_pipelined_replica_keeps_every_stage_busy() {
    let rate = |strategy: &str| {
        let r = json(&[
            "serve",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "2",
            "--strategy",
            strategy,
            "--rate",
            "400",
            "--requests",
            "2000",
        ]);
        f(&r, &["requests_per_s"])
    };
    let (replicas, stages) = (rate("d2"), rate("p2"));
    assert!(
        stages > 0.9 * replicas && stages <= replicas * 1.01,
        "p2 {stages} requests/s against d2 {replicas}"
    );
    // One client (the latency benchmark) keeps one engine busy; the other waits.
    let one = json(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "2",
        "--strategy",
        "t1-p2",
        "--concurrency",
        "1",
        "--requests",
        "20",
    ]);
    assert_eq!(one["most_running"].as_u64(), Some(1), "{one}");
    // A serving search tries deployments without chunked prefill: a step budget below the
    // prompt is refused there whatever --chunked-prefill says.
    let (code, _, err) = stackflow(&[
        "search",
        "--workload",
        "workloads/llama2-70b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--slo-ttft-ms",
        "1000",
        "--slo-tpot-ms",
        "50",
        "--chunked-prefill",
        "--max-step-tokens",
        "512",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("in a serving search, which also tries deployments without chunked prefill"),
        "{err}"
    );
}

/// Edges a review found: a cache too small for a chunked engine's admissions preempts and
/// completes (it never holds more blocks than it has); a prompt in 32 chunks of 64 tokens
/// is not taken for a stalled engine; a closed loop needs a client per replica; a trace whose
/// requests all arrive at once cannot be replayed at a rate; engine flags on a trained
/// workload are refused.
#[test]
fn serving_edges_complete_or_are_refused_by_name() {
    let tight = json(
        &[
            &ONE_H100[..],
            &[
                "--chunked-prefill",
                "--memory-utilization",
                "0.2",
                "--rate",
                "1000",
                "--requests",
                "500",
            ],
        ]
        .concat(),
    );
    assert!(tight["preemptions"].as_u64().unwrap() > 0, "{tight}");
    assert!(f(&tight, &["end_to_end_s", "p99"]).is_finite());
    let dir = Scratch::new("serving-edges");
    let text = std::fs::read_to_string(root().join("workloads/llama2-7b-serve.yaml"))
        .unwrap()
        .replace(
            "prompt_tokens: 128, output_tokens: 128",
            "prompt_tokens: 2048, output_tokens: 1",
        );
    let w = dir.write("prompts.yaml", &text);
    let chunks = json(
        &[
            &ONE_H100[..],
            &[
                "--workload",
                &w,
                "--chunked-prefill",
                "--max-step-tokens",
                "64",
                "--rate",
                "1000",
                "--requests",
                "300",
            ],
        ]
        .concat(),
    );
    assert!(chunks["steps"].as_u64().unwrap() >= 300 * 32, "{chunks}");
    let (code, _, err) = stackflow(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--concurrency",
        "4",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("a closed loop of 4 clients on 8 replicas"),
        "{err}"
    );
    let once = dir.write(
        "once.csv",
        "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0,10,5\n",
    );
    let (code, _, err) = stackflow(&[&ONE_H100[..], &["--trace", &once, "--rate", "5"]].concat());
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{once}: every request arrives at the same time")),
        "{err}"
    );
    // The SLO holds up to what the engine serves swamped, and no higher rate is sustained
    // (short runs above it would keep the SLO): the capacity binds the goodput.
    let (code, out, err) = stackflow(
        &[
            &ONE_H100[..],
            &[
                "--rate",
                "10",
                "--requests",
                "30",
                "--slo-ttft-ms",
                "200",
                "--slo-tpot-ms",
                "20",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("the rate it serves swamped, and runs of 30 requests keep p99 TTFT 200.0 ms")
            && out.contains("capacity binds\n"),
        "{out}"
    );
    // The serving search's table marks such a deployment as bounded by its capacity.
    let (code, out, err) = stackflow(&[
        "search",
        "--workload",
        "workloads/llama2-7b-serve.yaml",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "2",
        "--slo-ttft-ms",
        "100000",
        "--slo-tpot-ms",
        "100000",
        "--requests",
        "50",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("the SLO holds up to what it serves swamped: its capacity binds")
            && out.contains("  capacity\n"),
        "{out}"
    );
    // Without a rate to scale it to, the burst runs as it is.
    let burst = json(&[&ONE_H100[..], &["--trace", &once]].concat());
    assert_eq!(burst["load"]["requests"].as_u64(), Some(2), "{burst}");
    assert_eq!(burst["most_running"].as_u64(), Some(2), "{burst}");
    // The cache holds as many tokens whatever the requests' lengths (it was priced per
    // token over one token too few: 81,152 tokens for 2-token requests, 121,712 for 4000).
    let capacity = |tokens: &str| {
        let t = dir.write(
            &format!("kv{tokens}.csv"),
            &format!("arrival_s,prompt_tokens,output_tokens\n0,{tokens},{tokens}\n0.5,{tokens},{tokens}\n"),
        );
        json(&[&ONE_H100[..], &["--trace", &t]].concat())["kv_capacity_tokens"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(capacity("1"), capacity("2000"));
    // A trace's request must fit the model's context, as a workload's must.
    let long = dir.write(
        "long.csv",
        "arrival_s,prompt_tokens,output_tokens\n0,128,128\n0.1,5000,64\n",
    );
    let (code, _, err) = stackflow(&[&ONE_H100[..], &["--trace", &long]].concat());
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!(
            "{long}: request 2 (data row 2 after the header): prompt_tokens + output_tokens = \
             5000 + 64: at most the model's 4096-token sequence"
        )),
        "{err}"
    );
    // A step budget below the longest prompt is not kept without chunking: refused.
    let (code, _, err) = stackflow(
        &[
            &ONE_H100[..],
            &["--rate", "5", "--requests", "20", "--max-step-tokens", "64"],
        ]
        .concat(),
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("--max-step-tokens 64: at least the longest prompt (128 tokens)"),
        "{err}"
    );
    // Disaggregated pools whose devices the system cannot take are the command line's.
    let (code, _, err) = stackflow(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--prefill",
        "t4",
        "--decode",
        "t8",
        "--rate",
        "10",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("command line: --prefill t4 --decode t8 (their devices, 4 + 8) = 12"),
        "{err}"
    );
    let (code, _, err) = stackflow(&[
        "search",
        "--system",
        "templates/dgx-a100.yaml",
        "--chunked-prefill",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("this one trains"), "{err}");
}

/// A training step's switches mean nothing to a served batch: `predict` and `serve` refuse
/// each by name, before the device count is checked (a decode pool's replicas carry d1,
/// which would otherwise blame the data parallelism `grad=after` needs).
#[test]
fn serving_refuses_a_training_steps_switches() {
    for switch in ["grad=after", "rc=full", "send=blocking", "gpipe", "mb2"] {
        let strategy = format!("t4-d2-p2-{switch}");
        let (code, _, err) = stackflow(&[
            "predict",
            "--system",
            "templates/dgx-h100.yaml",
            "--devices",
            "16",
            "--workload",
            "workloads/llama2-70b-decode.yaml",
            "--strategy",
            &strategy,
        ]);
        assert_eq!(code, 2, "{switch}: {err}");
        assert!(
            err.contains("concerns a training step") && err.contains(switch.trim_end_matches('2')),
            "{switch}: {err}"
        );
    }
    let (code, _, err) = stackflow(&[
        "serve",
        "--system",
        "templates/dgx-h100.yaml",
        "--devices",
        "32",
        "--workload",
        "workloads/llama2-70b-serve.yaml",
        "--prefill",
        "t8-p2",
        "--decode",
        "t8-d2-grad=after",
        "--rate",
        "1",
        "--requests",
        "10",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("grad=after") && err.contains("concerns a training step"),
        "{err}"
    );
}
