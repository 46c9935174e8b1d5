//! Calculon's input files (calculon-ai/calculon): models (`models/*.json`), systems
//! (`systems/*.json`) and executions (`examples/*.json`).
//!
//! - A model becomes a `transformer` workload: `attn_size` is `head_dim` (the attention's
//!   width `attn_heads x attn_size` may differ from `hidden`), a GeLU feed-forward without
//!   gating, and `vocab: 0`, since Calculon simulates no embedding or output layer. The batch,
//!   precision and recomputation come from an execution when one is given.
//! - A system becomes a system file whose accelerator is a pinned `processor:` (matrix and
//!   vector FLOP/s with their efficiency by operation size, main memory with its efficiency
//!   by size, compute and memory overlapped or not) and whose fabrics are Calculon's network
//!   tiers, innermost first.
//! - An execution becomes a strategy: degrees, micro-batch, interleaving, recomputation,
//!   sequence parallelism (`rs_ag`), ZeRO (`optimizer_sharding`), overlap switches, and the
//!   placement its network tiers imply.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Deserialize;

use super::{line, num, stem, FileKind, Imported, ImportedFile};
use crate::config::{parse_json, Checker, ConfigError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelRaw {
    hidden: u64,
    feedforward: u64,
    seq_size: u64,
    attn_heads: u64,
    attn_size: u64,
    num_blocks: u64,
}

/// A Calculon execution, checked: what a model import takes from it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    num_procs: u64,
    tensor_par: u64,
    pipeline_par: u64,
    data_par: u64,
    tensor_par_net: usize,
    pipeline_par_net: usize,
    data_par_net: usize,
    batch_size: u64,
    microbatch_size: u64,
    datatype: String,
    fused_activation: bool,
    attention_type: String,
    activation_recompute: String,
    pipeline_interleaving: u64,
    optimizer_sharding: bool,
    tensor_par_comm_type: String,
    tensor_par_overlap: String,
    seq_par_ag_redo: bool,
    data_par_overlap: bool,
    weight_offload: bool,
    activations_offload: bool,
    optimizer_offload: bool,
    training: bool,
}

impl Execution {
    /// Total processors of the execution (its device count).
    pub fn devices(&self) -> u64 {
        self.num_procs
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemRaw {
    matrix: BTreeMap<String, UnitRaw>,
    vector: BTreeMap<String, UnitRaw>,
    mem1: MemRaw,
    mem2: Option<MemRaw>,
    processing_mode: String,
    networks: Vec<NetworkRaw>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnitRaw {
    tflops: f64,
    gflops_efficiency: Vec<[f64; 2]>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(non_snake_case)]
struct MemRaw {
    GiB: f64,
    GBps: f64,
    MB_efficiency: Vec<[f64; 2]>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkRaw {
    bandwidth: f64,
    efficiency: f64,
    size: u64,
    latency: f64,
    ops: BTreeMap<String, [Option<f64>; 2]>,
    must_be_filled: bool,
    processor_usage: f64,
}

fn fail(file: &str, path: &str, value: impl std::fmt::Display, expected: &str) -> ConfigError {
    ConfigError::invalid(file, path, value, expected)
}

/// A Calculon datatype as a stackflow precision.
fn precision(file: &str, path: &str, datatype: &str) -> Result<&'static str, ConfigError> {
    Ok(match datatype {
        "float8" => "fp8",
        "float16" => "fp16",
        "bfloat16" => "bf16",
        "float32" => "fp32",
        other => {
            return Err(fail(
                file,
                path,
                other,
                "one of float8, float16, bfloat16, float32",
            ))
        }
    })
}

/// Reads and checks a Calculon execution.
pub fn read_execution(file: &str, text: &str) -> Result<Execution, ConfigError> {
    let e: Execution = parse_json(file, text)?;
    for (key, v) in [
        ("num_procs", e.num_procs),
        ("tensor_par", e.tensor_par),
        ("pipeline_par", e.pipeline_par),
        ("data_par", e.data_par),
        ("batch_size", e.batch_size),
        ("microbatch_size", e.microbatch_size),
        ("pipeline_interleaving", e.pipeline_interleaving),
    ] {
        if v == 0 {
            return Err(fail(file, key, 0, "an integer > 0"));
        }
    }
    let product = e
        .tensor_par
        .saturating_mul(e.pipeline_par)
        .saturating_mul(e.data_par);
    if product != e.num_procs {
        return Err(fail(
            file,
            "num_procs",
            e.num_procs,
            &format!(
                "tensor_par x pipeline_par x data_par = {} x {} x {} = {product}",
                e.tensor_par, e.pipeline_par, e.data_par
            ),
        ));
    }
    if e.batch_size % e.data_par != 0 {
        return Err(fail(
            file,
            "batch_size",
            e.batch_size,
            &format!("a multiple of data_par {}", e.data_par),
        ));
    }
    if (e.batch_size / e.data_par) % e.microbatch_size != 0 {
        return Err(fail(
            file,
            "microbatch_size",
            e.microbatch_size,
            &format!(
                "a divisor of the batch per data-parallel rank {}",
                e.batch_size / e.data_par
            ),
        ));
    }
    precision(file, "datatype", &e.datatype)?;
    if !["full", "attn_only", "none"].contains(&e.activation_recompute.as_str()) {
        return Err(fail(
            file,
            "activation_recompute",
            &e.activation_recompute,
            "one of full, attn_only, none",
        ));
    }
    if !["ar", "p2p_rs_ag", "rs_ag"].contains(&e.tensor_par_comm_type.as_str()) {
        return Err(fail(
            file,
            "tensor_par_comm_type",
            &e.tensor_par_comm_type,
            "one of ar, p2p_rs_ag, rs_ag",
        ));
    }
    if !["none", "ring", "pipe"].contains(&e.tensor_par_overlap.as_str()) {
        return Err(fail(
            file,
            "tensor_par_overlap",
            &e.tensor_par_overlap,
            "one of none, ring, pipe",
        ));
    }
    if !["multihead", "multiquery"].contains(&e.attention_type.as_str()) {
        return Err(fail(
            file,
            "attention_type",
            &e.attention_type,
            "multihead or multiquery",
        ));
    }
    for (key, on) in [
        ("weight_offload", e.weight_offload),
        ("activations_offload", e.activations_offload),
        ("optimizer_offload", e.optimizer_offload),
    ] {
        if on {
            return Err(fail(
                file,
                key,
                true,
                "false: stackflow does not model offloading to a second memory tier",
            ));
        }
    }
    if !e.training {
        return Err(fail(
            file,
            "training",
            false,
            "true: a Calculon inference execution has no prompt and output lengths; write a \
             stackflow workload with inference: {batch, prompt_tokens, output_tokens}",
        ));
    }
    if e.optimizer_sharding && e.data_par == 1 {
        return Err(fail(
            file,
            "optimizer_sharding",
            true,
            "false with data_par 1 (nothing to shard over)",
        ));
    }
    Ok(e)
}

/// Imports a Calculon model as a transformer workload. Calculon's models carry no batch or
/// precision: they come from `execution` (a global batch of its `batch_size` sequences, its
/// datatype and recomputation), else a batch of 1 sequence in fp16, which the note says.
pub fn import_model(
    file: &str,
    text: &str,
    execution: Option<(&str, &Execution)>,
) -> Result<Imported, ConfigError> {
    let m: ModelRaw = parse_json(file, text)?;
    for (key, v) in [
        ("hidden", m.hidden),
        ("feedforward", m.feedforward),
        ("seq_size", m.seq_size),
        ("attn_heads", m.attn_heads),
        ("attn_size", m.attn_size),
        ("num_blocks", m.num_blocks),
    ] {
        if v == 0 {
            return Err(fail(file, key, 0, "an integer > 0"));
        }
    }
    let stem = stem(file);
    let mut notes = Vec::new();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Calculon's {file}, imported by `stackflow import calculon`. Calculon simulates the\n\
         # transformer blocks alone (no embedding or output layer: vocab 0), with a GeLU\n\
         # feed-forward and Adam in mixed precision.\nversion: 1"
    );
    line(&mut out, 0, "kind", "transformer", "");
    line(&mut out, 0, "name", &stem, "");
    line(&mut out, 0, "hidden", &m.hidden.to_string(), "hidden");
    line(
        &mut out,
        0,
        "layers",
        &m.num_blocks.to_string(),
        "num_blocks",
    );
    line(
        &mut out,
        0,
        "heads",
        &m.attn_heads.to_string(),
        "attn_heads",
    );
    line(
        &mut out,
        0,
        "head_dim",
        &m.attn_size.to_string(),
        "attn_size (per head)",
    );
    line(
        &mut out,
        0,
        "ffn_hidden",
        &m.feedforward.to_string(),
        "feedforward",
    );
    line(&mut out, 0, "sequence", &m.seq_size.to_string(), "seq_size");
    line(
        &mut out,
        0,
        "vocab",
        "0",
        "Calculon simulates no embedding or output layer",
    );
    match execution {
        Some((exec_file, e)) => {
            if e.attention_type == "multiquery" {
                line(
                    &mut out,
                    0,
                    "kv_heads",
                    "1",
                    &format!("{exec_file} attention_type = multiquery"),
                );
            }
            line(
                &mut out,
                0,
                "global_batch",
                &e.batch_size.to_string(),
                &format!("{exec_file} batch_size"),
            );
            let p = precision(exec_file, "datatype", &e.datatype)?;
            line(
                &mut out,
                0,
                "precision",
                p,
                &format!("{exec_file} datatype = {}", e.datatype),
            );
            let recompute = match e.activation_recompute.as_str() {
                "full" => "full",
                "attn_only" => "selective",
                _ => "none",
            };
            line(
                &mut out,
                0,
                "recompute",
                recompute,
                &format!(
                    "{exec_file} activation_recompute = {}",
                    e.activation_recompute
                ),
            );
            for (name, divisor) in [
                ("hidden", m.hidden),
                ("feedforward", m.feedforward),
                ("attn_heads", m.attn_heads),
            ] {
                if divisor % e.tensor_par != 0 {
                    return Err(fail(
                        file,
                        name,
                        divisor,
                        &format!("a multiple of {exec_file}'s tensor_par {}", e.tensor_par),
                    ));
                }
            }
        }
        None => {
            line(
                &mut out,
                0,
                "global_batch",
                "1",
                "Calculon's models carry no batch: set it, or import with an execution",
            );
            line(
                &mut out,
                0,
                "precision",
                "fp16",
                "Calculon's models carry no datatype: set it, or import with an execution",
            );
            notes.push(format!(
                "{file}: no execution given, so global_batch 1 and fp16; import it with an \
                 execution (`stackflow import calculon model.json execution.json`) for its \
                 batch_size, datatype and activation_recompute"
            ));
        }
    }
    Ok(Imported {
        files: vec![ImportedFile {
            name: format!("{stem}.yaml"),
            kind: FileKind::Workload,
            text: out,
        }],
        notes,
    })
}

/// Imports a Calculon system as a stackflow system with a pinned processor; an execution
/// given beside it must name its network tiers.
pub fn import_system(
    file: &str,
    text: &str,
    execution: Option<(&str, &Execution)>,
) -> Result<Imported, ConfigError> {
    let s: SystemRaw = parse_json(file, text)?;
    let stem = stem(file);
    let mut notes = Vec::new();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Calculon's {file}, imported by `stackflow import calculon`: a processor given by its\n\
         # rates (no budget), its efficiency by operation size, and Calculon's network tiers as\n\
         # fabrics, innermost first.\nversion: 1\nname: {stem}\nprocessor:\n  matrix:"
    );
    if s.matrix.is_empty() {
        return Err(fail(
            file,
            "matrix",
            "{}",
            "a matrix unit for at least one datatype",
        ));
    }
    let check = Checker { file };
    // A table as the system file writes it, checked as the system file checks it.
    let steps = |path: &str, table: &[[f64; 2]]| -> Result<String, ConfigError> {
        let parts: Vec<String> = check
            .steps(path, table, 1.0)?
            .iter()
            .map(|(from, e)| format!("[{}, {}]", num(*from), num(*e)))
            .collect();
        Ok(format!("[{}]", parts.join(", ")))
    };
    for (datatype, unit) in &s.matrix {
        let path = format!("matrix.{datatype}");
        let p = precision(file, &path, datatype)?;
        check.positive(&format!("{path}.tflops"), unit.tflops)?;
        let _ = writeln!(out, "    {p}:   # {path}");
        line(
            &mut out,
            6,
            "tflop_per_s",
            &num(unit.tflops),
            &format!("{path}.tflops"),
        );
        line(
            &mut out,
            6,
            "efficiency_by_gflop",
            &steps(
                &format!("{path}.gflops_efficiency"),
                &unit.gflops_efficiency,
            )?,
            &format!("{path}.gflops_efficiency"),
        );
    }
    // One vector unit: the 16-bit one where given (element-wise work runs at the
    // activations' width), else the first.
    let (vector_type, vector) = ["float16", "bfloat16"]
        .iter()
        .find_map(|t| s.vector.get_key_value(*t))
        .or_else(|| s.vector.iter().next())
        .ok_or_else(|| {
            fail(
                file,
                "vector",
                "{}",
                "a vector unit for at least one datatype",
            )
        })?;
    for (other, unit) in &s.vector {
        if other != vector_type
            && (unit.tflops != vector.tflops || unit.gflops_efficiency != vector.gflops_efficiency)
        {
            notes.push(format!(
                "vector.{other}: stackflow's element-wise work runs on one vector unit, \
                 vector.{vector_type}; the {other} rate {} TFLOP/s is not carried",
                num(unit.tflops)
            ));
        }
    }
    let _ = writeln!(out, "  vector:   # vector.{vector_type}");
    check.positive(&format!("vector.{vector_type}.tflops"), vector.tflops)?;
    line(
        &mut out,
        4,
        "tflop_per_s",
        &num(vector.tflops),
        &format!("vector.{vector_type}.tflops"),
    );
    line(
        &mut out,
        4,
        "efficiency_by_gflop",
        &steps(
            &format!("vector.{vector_type}.gflops_efficiency"),
            &vector.gflops_efficiency,
        )?,
        &format!("vector.{vector_type}.gflops_efficiency"),
    );
    let _ = writeln!(out, "  memory:   # mem1");
    for (key, v) in [("mem1.GiB", s.mem1.GiB), ("mem1.GBps", s.mem1.GBps)] {
        check.positive(key, v)?;
    }
    line(&mut out, 4, "capacity_gib", &num(s.mem1.GiB), "mem1.GiB");
    line(
        &mut out,
        4,
        "bandwidth_gb_per_s",
        &num(s.mem1.GBps),
        "mem1.GBps",
    );
    line(
        &mut out,
        4,
        "efficiency_by_mb",
        &steps("mem1.MB_efficiency", &s.mem1.MB_efficiency)?,
        "mem1.MB_efficiency (MB = 1e6 bytes)",
    );
    let overlap = match s.processing_mode.as_str() {
        "roofline" => "true",
        "no_overlap" => "false",
        other => {
            return Err(fail(
                file,
                "processing_mode",
                other,
                "roofline or no_overlap",
            ))
        }
    };
    line(
        &mut out,
        2,
        "compute_memory_overlap",
        overlap,
        &format!("processing_mode = {}", s.processing_mode),
    );
    // The share an overlapped collective takes: the tier tensor parallelism runs on (the
    // execution's tensor_par_net; the innermost without one), where `tp=overlap` hides
    // its collectives.
    let share_tier = execution
        .map(|(_, e)| e.tensor_par_net)
        .filter(|&i| i < s.networks.len())
        .unwrap_or(0);
    if let Some(n) = s.networks.get(share_tier) {
        let path = format!("networks[{share_tier}].processor_usage");
        let usage = check.within(&path, n.processor_usage, 0.0, 0.999)?;
        line(
            &mut out,
            2,
            "collective_compute_share",
            &num(usage),
            &format!("{path} (the tier tensor parallelism's collectives run on)"),
        );
    }
    if let Some(m) = &s.mem2 {
        notes.push(format!(
            "mem2 ({} GiB at {} GB/s): offload memory, which stackflow does not model (the \
             executions that offload are refused)",
            num(m.GiB),
            num(m.GBps)
        ));
    }
    if s.networks.is_empty() {
        return Err(fail(file, "networks", "[]", "at least one network tier"));
    }
    if let Some((exec_file, e)) = execution {
        check_tiers(exec_file, e, s.networks.len())?;
    }
    let _ = writeln!(out, "fabrics:");
    let last = s.networks.len() - 1;
    for (i, n) in s.networks.iter().enumerate() {
        let path = format!("networks[{i}]");
        check.positive(&format!("{path}.bandwidth"), n.bandwidth)?;
        check.within(&format!("{path}.efficiency"), n.efficiency, 1e-6, 1.0)?;
        check.non_negative(&format!("{path}.latency"), n.latency)?;
        check.within(
            &format!("{path}.processor_usage"),
            n.processor_usage,
            0.0,
            0.999,
        )?;
        // Each tier's size counts devices; a stackflow fabric's size counts copies of the
        // fabrics inside it.
        let inner: u64 = s.networks[..i].iter().map(|n| n.size.max(1)).product();
        let _ = writeln!(out, "  - name: net{i}   # {path}");
        line(
            &mut out,
            4,
            "topology",
            "{kind: switch}",
            "Calculon prices every tier as one switch",
        );
        if i != last {
            if n.size == 0 || n.size % inner != 0 {
                return Err(fail(
                    file,
                    &format!("{path}.size"),
                    n.size,
                    &format!("a multiple of the {inner} devices of the tiers inside it"),
                ));
            }
            line(
                &mut out,
                4,
                "size",
                &(n.size / inner).to_string(),
                &format!("{path}.size {} devices", n.size),
            );
        } else {
            notes.push(format!(
                "{path}.size = {}: the outermost fabric takes whatever the device count leaves",
                n.size
            ));
        }
        line(
            &mut out,
            4,
            "bandwidth_gb_per_s",
            &num(n.bandwidth),
            &format!("{path}.bandwidth (GB/s per device)"),
        );
        line(
            &mut out,
            4,
            "bandwidth_efficiency",
            &num(n.efficiency),
            &format!("{path}.efficiency"),
        );
        line(
            &mut out,
            4,
            "latency_us",
            "0",
            "Calculon adds its latency once per collective (below)",
        );
        line(
            &mut out,
            4,
            "collective_latency_us",
            &num(n.latency * 1e6),
            &format!("{path}.latency (s) x 1e6"),
        );
        // What Calculon moves per collective of S bytes over n members: S x scalar x (1 +
        // offset / n); stackflow's rings on a switch move 2S(n-1)/n for an all-reduce and
        // S(n-1)/n for the others.
        for (op, ring) in [
            ("all_reduce", [2.0, -1.0]),
            ("reduce_scatter", [1.0, -1.0]),
            ("all_gather", [1.0, -1.0]),
        ] {
            match n.ops.get(op) {
                Some([Some(a), Some(b)]) if [*a, *b] == ring => {}
                Some([Some(a), Some(b)]) => notes.push(format!(
                    "{path}.ops.{op} = [{}, {}]: Calculon moves {} of a collective's S bytes; \
                     stackflow prices a ring on the switch ({}), so this tier's {op} differs \
                     by their ratio",
                    num(*a),
                    num(*b),
                    traffic(*a, *b),
                    traffic(ring[0], ring[1])
                )),
                _ => {
                    return Err(fail(
                        file,
                        &format!("{path}.ops.{op}"),
                        "(missing)",
                        "[scalar, offset]",
                    ))
                }
            }
        }
        if n.must_be_filled {
            notes.push(format!(
                "{path}.must_be_filled = true: a constraint on Calculon's executions (the \
                 degrees on this tier must fill it); stackflow places any degrees"
            ));
        }
        if i != share_tier && n.processor_usage > 0.0 {
            notes.push(format!(
                "{path}.processor_usage = {}: the compute a collective on this tier takes \
                 while it overlaps; stackflow's pinned processor carries one share, \
                 networks[{share_tier}]'s (the tier tensor parallelism runs on), which \
                 `tp=overlap` uses",
                num(n.processor_usage)
            ));
        }
    }
    Ok(Imported {
        files: vec![ImportedFile {
            name: format!("{stem}.yaml"),
            kind: FileKind::System,
            text: out,
        }],
        notes,
    })
}

/// Imports a Calculon execution as a strategy.
pub fn import_execution(file: &str, text: &str) -> Result<Imported, ConfigError> {
    Ok(strategy(file, &read_execution(file, text)?))
}

/// The strategy of an execution read from `file` ([`read_execution`]).
pub fn strategy(file: &str, e: &Execution) -> Imported {
    let stem = stem(file);
    let mut notes = Vec::new();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Calculon's {file}, imported by `stackflow import calculon`: {} processors\n\
         # (num_procs); its batch, datatype and recomputation go to the workload.\nversion: 1",
        e.num_procs
    );
    line(
        &mut out,
        0,
        "tensor",
        &e.tensor_par.to_string(),
        "tensor_par",
    );
    line(
        &mut out,
        0,
        "pipeline",
        &e.pipeline_par.to_string(),
        "pipeline_par",
    );
    line(&mut out, 0, "data", &e.data_par.to_string(), "data_par");
    line(
        &mut out,
        0,
        "micro_batch",
        &e.microbatch_size.to_string(),
        "microbatch_size",
    );
    line(
        &mut out,
        0,
        "interleave",
        &e.pipeline_interleaving.to_string(),
        "pipeline_interleaving",
    );
    let sp = e.tensor_par_comm_type == "rs_ag";
    let sp_why = match e.tensor_par_comm_type.as_str() {
        "rs_ag" => "reduce-scatter and all-gather: sequence parallelism",
        "ar" => "all-reduces: no sequence parallelism",
        _ => "see the note",
    };
    line(
        &mut out,
        0,
        "sequence_parallel",
        &sp.to_string(),
        &format!(
            "tensor_par_comm_type = {} ({sp_why})",
            e.tensor_par_comm_type
        ),
    );
    if e.tensor_par_comm_type == "p2p_rs_ag" {
        let split = e.pipeline_par > 1 && e.tensor_par > 1;
        if split {
            line(
                &mut out,
                0,
                "scatter_sends",
                "true",
                "tensor_par_comm_type = p2p_rs_ag (pipeline sends split over the tensor ranks)",
            );
        }
        notes.push(format!(
            "tensor_par_comm_type = p2p_rs_ag: all-reduces inside a pipeline chunk and \
             reduce-scatter/all-gather at its edges, sequence-split sends; imported as \
             all-reduces (sequence_parallel: false){}",
            if split {
                " with the sends split over the tensor ranks and gathered on arrival \
                 (scatter_sends: true)"
            } else {
                ""
            }
        ));
    }
    let zero = if e.optimizer_sharding { "2" } else { "0" };
    line(
        &mut out,
        0,
        "zero",
        zero,
        &format!(
            "optimizer_sharding = {} (Calculon shards optimizer state and gradients)",
            e.optimizer_sharding
        ),
    );
    // The overlap switches concern an axis only where it exists (a degree above 1): an
    // execution without that parallelism keeps the default.
    if e.data_par > 1 {
        line(
            &mut out,
            0,
            "gradient_overlap",
            &e.data_par_overlap.to_string(),
            "data_par_overlap",
        );
    }
    if e.tensor_par_overlap != "none" {
        if e.tensor_par > 1 && sp {
            line(
                &mut out,
                0,
                "tensor_overlap",
                "true",
                &format!("tensor_par_overlap = {}", e.tensor_par_overlap),
            );
        } else {
            notes.push(format!(
                "tensor_par_overlap = {}: stackflow overlaps the tensor-parallel collectives \
                 with the products beside them only with t > 1 and sequence parallelism \
                 (tensor_par {}, tensor_par_comm_type {}); imported without overlap",
                e.tensor_par_overlap, e.tensor_par, e.tensor_par_comm_type
            ));
        }
    }
    if e.pipeline_par > 1 {
        line(
            &mut out,
            0,
            "send_overlap",
            "false",
            "Calculon exposes every pipeline send",
        );
    }
    // Placement: axes on inner network tiers first; on one tier, Megatron-LM's order
    // (tensor, data, pipeline).
    let mut axes = [
        (e.tensor_par_net, 0, "t", e.tensor_par, "tensor_par_net"),
        (e.data_par_net, 1, "d", e.data_par, "data_par_net"),
        (
            e.pipeline_par_net,
            2,
            "p",
            e.pipeline_par,
            "pipeline_par_net",
        ),
    ];
    axes.sort();
    let order: Vec<&str> = axes.iter().filter(|a| a.3 > 1).map(|a| a.2).collect();
    if !order.is_empty() {
        line(
            &mut out,
            0,
            "order",
            &format!("[{}]", order.join(", ")),
            &format!(
                "innermost first: tensor_par_net {}, data_par_net {}, pipeline_par_net {}",
                e.tensor_par_net, e.data_par_net, e.pipeline_par_net
            ),
        );
    }
    if e.seq_par_ag_redo {
        notes.push(
            "seq_par_ag_redo = true: redoing the sequence-parallel all-gather in the backward \
             pass; stackflow keeps its output"
                .into(),
        );
    }
    if !e.fused_activation {
        notes.push(
            "fused_activation = false: stackflow's GeLU is one element-wise kernel either way"
                .into(),
        );
    }
    Imported {
        files: vec![ImportedFile {
            name: format!("{stem}.yaml"),
            kind: FileKind::Strategy,
            text: out,
        }],
        notes,
    }
}

/// Checks an execution's network tiers against a system's: each index names a tier.
fn check_tiers(exec_file: &str, e: &Execution, tiers: usize) -> Result<(), ConfigError> {
    for (key, tier) in [
        ("tensor_par_net", e.tensor_par_net),
        ("pipeline_par_net", e.pipeline_par_net),
        ("data_par_net", e.data_par_net),
    ] {
        if tier >= tiers {
            return Err(fail(
                exec_file,
                key,
                tier,
                &format!(
                    "a network tier of the system: 0 to {}",
                    tiers.saturating_sub(1)
                ),
            ));
        }
    }
    Ok(())
}

/// Calculon's traffic `S x scalar x (1 + offset / n)` as text.
fn traffic(scalar: f64, offset: f64) -> String {
    let s = if scalar == 1.0 {
        String::new()
    } else {
        format!("{} ", num(scalar))
    };
    if offset == 0.0 {
        format!("{s}S")
    } else if offset < 0.0 {
        format!("{s}S (n - {})/n", num(-offset))
    } else {
        format!("{s}S (n + {})/n", num(offset))
    }
}
