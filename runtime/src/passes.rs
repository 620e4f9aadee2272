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
    /// Attention scores, softmax and context into one fused attention node.
    pub attention: AttentionFusion,
    /// A layernorm read only by linear layers folded into them
    /// (`crate::layernorm_fold`), where the run's precision and the backend allow it. Applied
    /// by whoever knows the precision (the model's runner), not by [`apply_for`].
    pub layernorms: bool,
}

/// When [`fuse_attention`] fuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionFusion {
    /// Never: three nodes, the scores and probabilities stored in between.
    Off,
    /// Wherever the backend has a kernel for the case (the default); the rest stays unfused.
    WhereSupported,
    /// Everywhere: a case the backend has no kernel for is an error.
    Required,
}

impl Fusion {
    pub const ALL: Fusion = Fusion {
        epilogues: true,
        qkv: true,
        attention: AttentionFusion::WhereSupported,
        layernorms: true,
    };
    pub const NONE: Fusion = Fusion {
        epilogues: false,
        qkv: false,
        attention: AttentionFusion::Off,
        layernorms: false,
    };
}

/// What a backend answers when asked whether it runs an op on inputs of given shapes
/// (`Backend::supports`): Ok, or the reason it does not.
pub type Supports<'a> = &'a dyn Fn(&Op, &[&[usize]]) -> Result<(), String>;

/// Applies the passes for a backend that runs every op.
pub fn apply(graph: &mut Graph, fusion: Fusion) {
    apply_for(graph, fusion, &|_, _| Ok(())).expect("every op is supported");
}

/// Applies the passes, fusing attention only where `supports` allows; fails only when
/// `fusion.attention` is `Required` and some attention cannot be fused.
pub fn apply_for(graph: &mut Graph, fusion: Fusion, supports: Supports) -> Result<(), String> {
    // After fuse_qkv, which recognises attention by its three unfused nodes.
    if fusion.qkv {
        fuse_qkv(graph);
    }
    if fusion.attention != AttentionFusion::Off {
        fuse_attention(
            graph,
            fusion.attention == AttentionFusion::Required,
            supports,
        )?;
    }
    if fusion.epilogues {
        fuse_epilogues(graph);
    }
    Ok(())
}

/// `AttentionScores → Softmax → AttentionContext` becomes one `Attention` node, where the
/// scores and the probabilities are read by nothing else and are no named output: the
/// fused kernel never stores them. A chain the backend cannot fuse (`supports` says why) is
/// left as it is, or, with `required`, is an error naming the node and the reason. Returns
/// the number of nodes fused.
pub fn fuse_attention(
    graph: &mut Graph,
    required: bool,
    supports: Supports,
) -> Result<usize, String> {
    let users = graph.consumers();
    let mut fused = 0;
    let mut dead = vec![false; graph.nodes.len()];
    let mut rewrites = Vec::new();
    for (softmax_id, node) in graph.nodes.iter().enumerate() {
        let Op::Softmax { causal } = node.op else {
            continue;
        };
        let scores = node.inputs[0];
        let probabilities = node.output;
        let Some(scores_id) = graph.nodes.iter().position(|n| n.output == scores) else {
            continue;
        };
        let Op::AttentionScores {
            heads,
            head_dim,
            scale,
            q,
            k,
            key_padding,
        } = graph.nodes[scores_id].op
        else {
            continue;
        };
        let [context_id] = users[probabilities][..] else {
            continue;
        };
        let context = &graph.nodes[context_id];
        let Op::AttentionContext {
            heads: context_heads,
            head_dim: context_head_dim,
            v,
        } = context.op
        else {
            continue;
        };
        let private = users[scores] == [softmax_id]
            && context.inputs[0] == probabilities
            && context.inputs[1] != probabilities
            && !graph.is_output(scores)
            && !graph.is_output(probabilities);
        if !private || (context_heads, context_head_dim) != (heads, head_dim) {
            continue;
        }
        let op = Op::Attention {
            heads,
            head_dim,
            scale,
            q,
            k,
            v,
            causal,
            key_padding,
        };
        let scores_node = &graph.nodes[scores_id];
        let mut inputs = vec![
            scores_node.inputs[0],
            scores_node.inputs[1],
            context.inputs[1],
        ];
        // The fused kernel reads the key lengths; the additive mask is the unfused chain's.
        if key_padding {
            inputs.push(scores_node.inputs[3]);
        }
        let shapes: Vec<&[usize]> = inputs
            .iter()
            .map(|&v| graph.values[v].shape.as_slice())
            .collect();
        // The fused kernel is self-attention: Q, K and V of one batch and one sequence. Other
        // chains (a shared probe query against every image's tokens) stay unfused, even when
        // fusion is required.
        if shapes[0][..2] != shapes[1][..2] || shapes[2][..2] != shapes[1][..2] {
            continue;
        }
        if let Err(reason) = supports(&op, &shapes) {
            if required {
                return Err(format!(
                    "attention {} cannot be fused: {reason}",
                    scores_node.name
                ));
            }
            continue;
        }
        let name = match scores_node.name.strip_suffix(".scores") {
            Some(prefix) => format!("{prefix}.fused"),
            None => format!("{}+softmax+context", scores_node.name),
        };
        rewrites.push((scores_id, softmax_id, context_id, op, inputs, name));
    }
    for (scores_id, softmax_id, context_id, op, inputs, name) in rewrites {
        // The context node becomes the fused node: it keeps its place (after Q's, K's and V's
        // producers) and its output value, so later readers see no change.
        let context = &mut graph.nodes[context_id];
        context.op = op;
        context.inputs = inputs;
        context.name = name;
        dead[scores_id] = true;
        dead[softmax_id] = true;
        fused += 1;
    }
    let mut id = 0;
    graph.nodes.retain(|_| {
        id += 1;
        !dead[id - 1]
    });
    Ok(fused)
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
                    // An activation can follow only a bare accumulation + bias, and only one
                    // the epilogue applies.
                    Op::Activation(act) => {
                        act.in_matmul_epilogue()
                            && epilogue.activation == vitrt_kernels::Activation::None
                            && !epilogue.residual
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
        // Q and K now come from the fused output; a key padding mask's inputs stay.
        graph.nodes[scores_id].inputs[..2].copy_from_slice(&[qkv, qkv]);
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
        row_statistics: false,
    });
    graph.values.len() - 1
}

/// Each value's producing node, if a node produces it.
pub(crate) fn producers(graph: &Graph) -> Vec<Option<usize>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores → softmax → context over three [2, 5, 32] inputs, 2 heads of 16.
    fn attention_graph() -> Graph {
        let mut g = Graph::default();
        let [q, k, v] = ["q", "k", "v"].map(|name| g.add_input(name, &[2, 5, 32]));
        let slice = HeadSlice { column_offset: 0 };
        let scores = g
            .add_node(
                "layer.0.attention.scores",
                Op::AttentionScores {
                    heads: 2,
                    head_dim: 16,
                    scale: 0.25,
                    q: slice,
                    k: slice,
                    key_padding: false,
                },
                &[q, k],
            )
            .unwrap();
        let probs = g
            .add_node(
                "layer.0.attention.softmax",
                Op::Softmax { causal: false },
                &[scores],
            )
            .unwrap();
        let context = g
            .add_node(
                "layer.0.attention.context",
                Op::AttentionContext {
                    heads: 2,
                    head_dim: 16,
                    v: slice,
                },
                &[probs, v],
            )
            .unwrap();
        g.mark_output("context", context);
        g
    }

    #[test]
    fn scores_softmax_context_become_one_node() {
        let mut g = attention_graph();
        let context = g.nodes[2].output;
        assert_eq!(fuse_attention(&mut g, true, &|_, _| Ok(())), Ok(1));
        g.validate().unwrap();
        assert_eq!(g.nodes.len(), 1);
        let node = &g.nodes[0];
        assert_eq!(node.name, "layer.0.attention.fused");
        assert_eq!(node.inputs, vec![0, 1, 2]);
        assert_eq!(node.output, context);
        assert!(matches!(
            node.op,
            Op::Attention {
                heads: 2,
                head_dim: 16,
                scale: 0.25,
                ..
            }
        ));
    }

    #[test]
    fn probabilities_someone_reads_are_not_fused_away() {
        let mut g = attention_graph();
        let probs = g.nodes[1].output;
        g.mark_output("probs", probs);
        assert_eq!(fuse_attention(&mut g, false, &|_, _| Ok(())), Ok(0));
        assert_eq!(g.nodes.len(), 3);
    }

    #[test]
    fn unsupported_attention_stays_unfused_unless_required() {
        let refuse: Supports = &|op, _| match op {
            Op::Attention { head_dim, .. } => Err(format!("no kernel for head dim {head_dim}")),
            _ => Ok(()),
        };
        let mut g = attention_graph();
        assert_eq!(fuse_attention(&mut g, false, refuse), Ok(0));
        assert_eq!(g.nodes.len(), 3);
        let required = Fusion {
            attention: AttentionFusion::Required,
            ..Fusion::NONE
        };
        let e = apply_for(&mut g, required, refuse).unwrap_err();
        assert!(
            e.contains("layer.0.attention.scores") && e.contains("head dim 16"),
            "{e}"
        );
        // Fusion::NONE leaves attention alone, whatever the backend supports.
        apply_for(&mut g, Fusion::NONE, &|_, _| Ok(())).unwrap();
        assert_eq!(g.nodes.len(), 3);
    }
}
