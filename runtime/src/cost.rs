//! What a graph node costs: its arithmetic and the bytes it must move at the least (each input
//! read once, the output written once, in their planned storage types). A profile divides its
//! times by these to say how close each node comes to the GPU's ceilings.

use crate::graph::{Graph, Op};
use crate::lowering;
use crate::plan::{workspace_bytes, Plan};
use vitrt_kernels::MatmulProblem;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeCost {
    /// Multiply-adds count two; element-wise arithmetic is not counted.
    pub flops: f64,
    pub bytes: f64,
    /// The matmul the node runs, if it is one (the patch embedding: its projection).
    pub matmul: Option<MatmulProblem>,
}

pub fn node_cost(graph: &Graph, plan: &Plan, node: usize) -> NodeCost {
    let n = &graph.nodes[node];
    let value_bytes = |v: usize| crate::plan::value_bytes(&graph.values[v], plan.dtypes[v]) as f64;
    let mut bytes: f64 =
        n.inputs.iter().map(|&v| value_bytes(v)).sum::<f64>() + value_bytes(n.output);
    let shapes: Vec<&[usize]> = n
        .inputs
        .iter()
        .map(|&v| graph.values[v].shape.as_slice())
        .collect();
    let matmul = match n.op {
        Op::PatchEmbed { .. } => {
            // The patch rows go through the workspace: written once, read once.
            bytes +=
                2.0 * workspace_bytes(graph, node, plan.precision.compute, &plan.dtypes) as f64;
            lowering::patch_projection(&n.op, shapes[0], &graph.values[n.output].shape)
        }
        Op::Fp8Linear { epilogue, .. } => {
            // The quantised input goes through the workspace: written once, read once.
            bytes +=
                2.0 * workspace_bytes(graph, node, plan.precision.compute, &plan.dtypes) as f64;
            Some(lowering::linear(shapes[0], shapes[1], epilogue))
        }
        Op::LayerNormLinear { activation, .. } => {
            // The product of the layernorm's input and the folded weight, with its bias.
            let epilogue = vitrt_kernels::Epilogue {
                bias: true,
                activation,
                ..vitrt_kernels::Epilogue::NONE
            };
            Some(lowering::linear(shapes[0], shapes[1], epilogue))
        }
        _ => lowering::matmul_for(&n.op, &shapes),
    };
    let mut flops = matmul.as_ref().map_or(0.0, MatmulProblem::flops);
    if let Some(p) = lowering::attention_for(&n.op, &shapes) {
        // Q, K and V are head slices of their tensors (often one fused QKV tensor, which the
        // node lists three times): the least it reads is each slice once.
        let slice = (p.batch * p.tokens * p.heads * p.head_dim) as f64;
        bytes = n
            .inputs
            .iter()
            .map(|&v| slice * plan.dtypes[v].size_bytes() as f64)
            .sum::<f64>()
            + value_bytes(n.output);
        flops = p.flops();
    }
    NodeCost {
        flops,
        bytes,
        matmul,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Precision;
    use crate::{DType, Epilogue, ValueKind};

    #[test]
    fn a_linear_layer_costs_its_matmul_and_its_operands() {
        let mut g = Graph::default();
        let x = g.add_input("x", &[2, 10, 16]);
        let w = g.add_param("w", &[32, 16]);
        let y = g
            .add_node(
                "fc",
                Op::Linear {
                    epilogue: Epilogue::NONE,
                },
                &[x, w],
            )
            .unwrap();
        let z = g.add_node("add", Op::Add, &[y, y]).unwrap();
        g.mark_output("z", z);
        let plan = Plan::new(&g, Precision::uniform(DType::F16));
        assert!(matches!(g.values[w].kind, ValueKind::Param(_)));
        let fc = node_cost(&g, &plan, 0);
        assert_eq!(fc.flops, 2.0 * 20.0 * 32.0 * 16.0);
        // x (an input read as the matmul's A), w and y in f16.
        assert_eq!(fc.bytes, (20 * 16 * 2 + 32 * 16 * 2 + 20 * 32 * 2) as f64);
        let add = node_cost(&g, &plan, 1);
        assert_eq!((add.flops, add.bytes), (0.0, (3 * 20 * 32 * 2) as f64));
        assert!(add.matmul.is_none());
    }

    #[test]
    fn fused_attention_costs_its_two_products_and_q_k_v_o_once() {
        let (b, t, heads, d) = (2, 197, 12, 64);
        let hidden = heads * d;
        let mut g = Graph::default();
        let qkv = g.add_input("qkv", &[b, t, 3 * hidden]);
        let slice = |column_offset| crate::graph::HeadSlice { column_offset };
        let o = g
            .add_node(
                "attention",
                Op::Attention {
                    heads,
                    head_dim: d,
                    scale: 0.125,
                    q: slice(0),
                    k: slice(hidden),
                    v: slice(2 * hidden),
                    causal: false,
                    key_padding: false,
                },
                &[qkv, qkv, qkv],
            )
            .unwrap();
        g.mark_output("o", o);
        let plan = Plan::new(&g, Precision::uniform(DType::F16));
        let cost = node_cost(&g, &plan, 0);
        assert_eq!(cost.flops, 4.0 * (b * heads * t * t * d) as f64);
        // Q, K, V from the input (stored in f16, as the kernel reads it), O in f16.
        assert_eq!(cost.bytes, (4 * b * t * hidden * 2) as f64);
        assert!(cost.matmul.is_none());
    }
}
