//! Fusion passes: graph rewrites, so the fused and unfused forms of one model can be run side
//! by side and compared. Each pass keeps every named output intact.

use crate::graph::{Graph, HeadSlice, Node, Op, ParamSource, ValueKind};

/// Which passes to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fusion {
    /// Activation and residual add into the producing matmul's epilogue.
    pub epilogues: bool,
    /// Q, K and V projections of one input into one matmul with concatenated weights.
    pub qkv: bool,
}

impl Fusion {
    pub const ALL: Fusion = Fusion {
        epilogues: true,
        qkv: true,
    };
    pub const NONE: Fusion = Fusion {
        epilogues: false,
        qkv: false,
    };
}

pub fn apply(graph: &mut Graph, fusion: Fusion) {
    if fusion.qkv {
        fuse_qkv(graph);
    }
    if fusion.epilogues {
        fuse_epilogues(graph);
    }
}

/// `Linear → Activation` and `Linear → Add` become one Linear whose epilogue applies the
/// activation and adds the residual: the intermediate never touches memory. A Linear whose
/// output is read elsewhere too, or is a named output, is left alone.
pub fn fuse_epilogues(graph: &mut Graph) {
    loop {
        let users = graph.consumers();
        let producer = producers(graph);
        let mut fused = None;
        for (id, node) in graph.nodes.iter().enumerate() {
            let candidates: Vec<usize> = match node.op {
                Op::Activation(_) => vec![node.inputs[0]],
                Op::Add => node.inputs.clone(),
                _ => continue,
            };
            for (slot, v) in candidates.into_iter().enumerate() {
                let Some(p) = producer[v] else { continue };
                let Op::Linear { epilogue } = graph.nodes[p].op else {
                    continue;
                };
                if users[v].len() != 1 || graph.is_output(v) {
                    continue;
                }
                let can = match node.op {
                    // An activation can follow only a bare accumulation + bias.
                    Op::Activation(_) => {
                        epilogue.activation == vitrt_kernels::Activation::None && !epilogue.residual
                    }
                    _ => !epilogue.residual && node.inputs[0] != node.inputs[1],
                };
                if can {
                    fused = Some((p, id, slot));
                    break;
                }
            }
            if fused.is_some() {
                break;
            }
        }
        let Some((linear, consumer, slot)) = fused else {
            return;
        };
        let consumer_node = graph.nodes[consumer].clone();
        let lin = &mut graph.nodes[linear];
        let Op::Linear { mut epilogue } = lin.op else {
            unreachable!()
        };
        match consumer_node.op {
            Op::Activation(act) => epilogue.activation = act,
            _ => {
                epilogue.residual = true;
                lin.inputs.push(consumer_node.inputs[1 - slot]);
            }
        }
        lin.op = Op::Linear { epilogue };
        // The fused Linear now produces the consumer's value, so outputs and later readers see
        // no change; its old output value is left unread and unplanned.
        lin.output = consumer_node.output;
        lin.name = format!("{}+{}", lin.name, consumer_node.op.kind_name());
        graph.nodes.remove(consumer);
        // The residual input must be produced before the fused node runs.
        reorder(graph);
    }
}

/// Three Linear nodes reading one input, whose outputs feed only attention as Q, K and V,
/// become one Linear with stacked weights; attention reads its heads out of the fused output.
pub fn fuse_qkv(graph: &mut Graph) {
    let producer = producers(graph);
    let users = graph.consumers();
    let mut rewrites = Vec::new();
    for (scores_id, node) in graph.nodes.iter().enumerate() {
        let Op::AttentionScores { .. } = node.op else {
            continue;
        };
        let (q, k) = (node.inputs[0], node.inputs[1]);
        // The context node reading the same probabilities.
        let Some(&softmax) = users[node.output].first() else {
            continue;
        };
        let Some(&context_id) = users[graph.nodes[softmax].output].first() else {
            continue;
        };
        let Op::AttentionContext { .. } = graph.nodes[context_id].op else {
            continue;
        };
        let v = graph.nodes[context_id].inputs[1];
        let (Some(pq), Some(pk), Some(pv)) = (producer[q], producer[k], producer[v]) else {
            continue;
        };
        let projections = [pq, pk, pv];
        let same_input = projections
            .iter()
            .all(|&p| graph.nodes[p].inputs[0] == graph.nodes[pq].inputs[0]);
        let all_linear = projections.iter().all(|&p| {
            matches!(graph.nodes[p].op, Op::Linear { epilogue } if epilogue == linear_epilogue(graph, pq))
        });
        let only_attention = [q, k, v]
            .iter()
            .all(|&x| users[x].len() == 1 && !graph.is_output(x));
        if same_input && all_linear && only_attention && q != k && k != v {
            rewrites.push((projections, scores_id, context_id));
        }
    }
    for (projections, scores_id, context_id) in rewrites {
        let [pq, pk, pv] = projections;
        let param_names = |slot: usize| -> Option<Vec<String>> {
            projections
                .iter()
                .map(|&p| match &graph.values[graph.nodes[p].inputs[slot]].kind {
                    ValueKind::Param(ParamSource::Tensor(name)) => Some(name.clone()),
                    _ => None,
                })
                .collect()
        };
        let Some(weights) = param_names(1) else {
            continue;
        };
        let epilogue = linear_epilogue(graph, pq);
        let biases = if epilogue.bias {
            param_names(2)
        } else {
            Some(Vec::new())
        };
        let Some(biases) = biases else { continue };
        let widths: Vec<usize> = projections
            .iter()
            .map(|&p| graph.values[graph.nodes[p].output].shape[2])
            .collect();
        let k_dim = graph.values[graph.nodes[pq].inputs[1]].shape[1];
        let total: usize = widths.iter().sum();
        let weight = push_param(graph, ParamSource::Concat(weights), vec![total, k_dim]);
        let mut inputs = vec![graph.nodes[pq].inputs[0], weight];
        if epilogue.bias {
            inputs.push(push_param(graph, ParamSource::Concat(biases), vec![total]));
        }
        // The fused projection reuses Q's node and value, widened.
        let qkv = graph.nodes[pq].output;
        graph.values[qkv].shape[2] = total;
        let name = graph.nodes[pq].name.replace("query", "qkv");
        graph.values[qkv].name = name.clone();
        graph.nodes[pq].name = name;
        graph.nodes[pq].inputs = inputs;
        if let Op::AttentionScores { q, k, .. } = &mut graph.nodes[scores_id].op {
            *q = HeadSlice { column_offset: 0 };
            *k = HeadSlice {
                column_offset: widths[0],
            };
        }
        graph.nodes[scores_id].inputs = vec![qkv, qkv];
        if let Op::AttentionContext { v, .. } = &mut graph.nodes[context_id].op {
            *v = HeadSlice {
                column_offset: widths[0] + widths[1],
            };
        }
        graph.nodes[context_id].inputs[1] = qkv;
        // Mark the K and V projections dead; removed below.
        graph.nodes[pk].name.clear();
        graph.nodes[pv].name.clear();
    }
    graph.nodes.retain(|n| !n.name.is_empty());
}

fn linear_epilogue(graph: &Graph, node: usize) -> vitrt_kernels::Epilogue {
    match graph.nodes[node].op {
        Op::Linear { epilogue } => epilogue,
        _ => vitrt_kernels::Epilogue::NONE,
    }
}

fn push_param(graph: &mut Graph, source: ParamSource, shape: Vec<usize>) -> usize {
    graph.values.push(crate::graph::Value {
        name: source.key(),
        shape,
        kind: ValueKind::Param(source),
    });
    graph.values.len() - 1
}

fn producers(graph: &Graph) -> Vec<Option<usize>> {
    let mut p = vec![None; graph.values.len()];
    for (id, n) in graph.nodes.iter().enumerate() {
        p[n.output] = Some(id);
    }
    p
}

/// Restores an order in which every node runs after its inputs' producers (a stable
/// topological sort: nodes keep their relative order where they can).
fn reorder(graph: &mut Graph) {
    let producer = producers(graph);
    let n = graph.nodes.len();
    let mut done = vec![false; n];
    let mut order: Vec<Node> = Vec::with_capacity(n);
    while order.len() < n {
        let before = order.len();
        for id in 0..n {
            if done[id] {
                continue;
            }
            let ready = graph.nodes[id]
                .inputs
                .iter()
                .all(|&v| producer[v].is_none_or(|p| done[p]));
            if ready {
                done[id] = true;
                order.push(graph.nodes[id].clone());
                break;
            }
        }
        assert!(order.len() > before, "graph has a cycle");
    }
    graph.nodes = order;
}
