//! One matrix product (DeepFlow Sec. 6.1): `{version, kind: gemm, m, k, n, precision}`, its
//! forward kernel alone.

use serde::Serialize;

use super::graph::{Footprint, Graph, Kernel, KernelClass, LayerType, Op, Phase, Position, Split};
use crate::domain::{Precision, Precisions};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemm {
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub precision: Precision,
}

pub(super) fn gemm_graph(g: &Gemm) -> Graph {
    let b = g.precision.bytes();
    let (m, k, n) = (g.m as f64, g.k as f64, g.n as f64);
    Graph {
        name: format!("gemm {}x{}x{}", g.m, g.k, g.n),
        kernels: vec![Kernel {
            name: "gemm".into(),
            class: KernelClass::Gemm,
            phase: Phase::Forward,
            precision: g.precision,
            math: g.precision,
            wire: g.precision,
            weights: None,
            count: 1,
            op: Op::Gemm {
                batch: 1,
                m: g.m,
                k: g.k,
                n: g.n,
            },
            split: Split::Replicated,
            position: Position::Head,
            layer: LayerType::Dense,
        }],
        parameters: 0.0,
        samples: 1.0,
        tokens: 1.0,
        memory: Footprint {
            // Inputs and output; nothing is trained.
            activations_bytes: (m * k + k * n + m * n) * b,
            ..Footprint::default()
        },
        layers: 0,
        boundary_bytes: 0.0,
        parameters_by_position: [0.0; 3],
        expert_parameters: 0.0,
        table_state_bytes: 0.0,
        trainable_share: 1.0,
        trainable_layers: 0,
        trains: false,
        optimizer_state_per_parameter_bytes: 0.0,
        precisions: Precisions::uniform(g.precision),
        experts: 1,
        heads: 0,
        attention: None,
        parallel_blocks: false,
        layer_parts: Vec::new(),
        part_of: None,
        host_tables: Vec::new(),
        served: false,
        adapter_parameters: 0.0,
        adapter_replicated: 0.0,
        tied_parameters: 0.0,
    }
}
