//! How graph ops become kernel problems. Both backends lower through here, so the CPU twin
//! and the GPU kernel always see the same strides.

use crate::graph::{Graph, Op};
use crate::plan::Plan;
use vitrt_kernels::{AttentionProblem, DType, Epilogue, MatmulProblem, Operand, WeightLayout};

/// `[.., K] · W[N, K]ᵀ` over every leading row.
pub fn linear(x_shape: &[usize], w_shape: &[usize], epilogue: Epilogue) -> MatmulProblem {
    let k = w_shape[1];
    let m = x_shape.iter().product::<usize>() / k.max(1);
    MatmulProblem::linear(m, w_shape[0], k, epilogue)
}

/// Heads of a `[B, T, width]` tensor starting at `column_offset`.
fn head_view(tokens: usize, width: usize, head_dim: usize, column_offset: usize) -> Operand {
    Operand {
        offset: column_offset,
        row_stride: width,
        batch_stride: tokens * width,
        head_stride: head_dim,
    }
}

/// Where attention reads Q (or K, or V): the width of its tensor, the column its heads start
/// at, and its token count.
#[derive(Clone, Copy, Debug)]
pub struct HeadSource {
    pub tokens: usize,
    pub width: usize,
    pub offset: usize,
}

/// `S[b, h] = scale · Q[b, :, h] · K[b, :, h]ᵀ`, written as `[B, heads, Tq, Tk]`. With
/// `q_shared`, one Q serves every image (batch stride 0). With `key_mask`, the residual is
/// the additive key padding mask `[B, Tk]`, read for every head and query row of item b
/// (strides 0), so a padded key's score is -inf.
pub fn attention_scores(
    batch: usize,
    heads: usize,
    head_dim: usize,
    scale: f32,
    (q, q_shared): (HeadSource, bool),
    k: HeadSource,
    key_mask: bool,
) -> MatmulProblem {
    let mut a = head_view(q.tokens, q.width, head_dim, q.offset);
    if q_shared {
        a.batch_stride = 0;
    }
    MatmulProblem {
        batch,
        heads,
        m: q.tokens,
        n: k.tokens,
        k: head_dim,
        a,
        b: head_view(k.tokens, k.width, head_dim, k.offset),
        b_layout: WeightLayout::NK,
        c: Operand {
            offset: 0,
            row_stride: k.tokens,
            batch_stride: heads * q.tokens * k.tokens,
            head_stride: q.tokens * k.tokens,
        },
        r: if key_mask {
            Operand {
                offset: 0,
                row_stride: 0,
                batch_stride: k.tokens,
                head_stride: 0,
            }
        } else {
            Operand::contiguous(0)
        },
        epilogue: Epilogue {
            alpha: scale,
            residual: key_mask,
            ..Epilogue::NONE
        },
    }
}

/// `O[b, :, h] = P[b, h] · V[b, :, h]`, written into `[B, Tq, heads·head_dim]`.
pub fn attention_context(
    batch: usize,
    q_tokens: usize,
    heads: usize,
    head_dim: usize,
    v: HeadSource,
) -> MatmulProblem {
    let hidden = heads * head_dim;
    MatmulProblem {
        batch,
        heads,
        m: q_tokens,
        n: head_dim,
        k: v.tokens,
        a: Operand {
            offset: 0,
            row_stride: v.tokens,
            batch_stride: heads * q_tokens * v.tokens,
            head_stride: q_tokens * v.tokens,
        },
        b: head_view(v.tokens, v.width, head_dim, v.offset),
        b_layout: WeightLayout::KN,
        c: head_view(q_tokens, hidden, head_dim, 0),
        r: Operand::contiguous(0),
        epilogue: Epilogue::NONE,
    }
}

/// The projection matmul of an `Op::PatchEmbed` from its inputs' shapes (pixels first) and
/// its output's: patch rows times the weight, plus the bias and the patches' positions,
/// written after the prefix rows.
pub fn patch_projection(op: &Op, pixels: &[usize], tokens: &[usize]) -> Option<MatmulProblem> {
    let Op::PatchEmbed {
        patch,
        prefix_tokens,
    } = op
    else {
        return None;
    };
    let (batch, channels) = (pixels[0], pixels[1]);
    Some(MatmulProblem::patch_projection(
        batch,
        *prefix_tokens,
        tokens[1] - prefix_tokens,
        channels * patch * patch,
        tokens[2],
    ))
}

/// The matmul an op runs, for the ops that are one matmul (Linear and both attention
/// products), from its inputs' shapes; None for every other op. Each backend then only binds
/// buffers: `inputs[0]` is A, `inputs[1]` is B, and for Linear the bias and residual follow.
pub fn matmul_for(op: &Op, input_shapes: &[&[usize]]) -> Option<MatmulProblem> {
    match op {
        Op::Linear { epilogue } => Some(linear(input_shapes[0], input_shapes[1], *epilogue)),
        Op::AttentionScores {
            heads,
            head_dim,
            scale,
            q,
            k,
            key_padding,
        } => {
            let (qs, ks) = (input_shapes[0], input_shapes[1]);
            let source = |shape: &[usize], offset| HeadSource {
                tokens: shape[1],
                width: shape[2],
                offset,
            };
            Some(attention_scores(
                ks[0],
                *heads,
                *head_dim,
                *scale,
                (source(qs, q.column_offset), qs[0] != ks[0]),
                source(ks, k.column_offset),
                *key_padding,
            ))
        }
        Op::AttentionContext { heads, head_dim, v } => {
            let (ps, vs) = (input_shapes[0], input_shapes[1]);
            Some(attention_context(
                vs[0],
                ps[2],
                *heads,
                *head_dim,
                HeadSource {
                    tokens: vs[1],
                    width: vs[2],
                    offset: v.column_offset,
                },
            ))
        }
        _ => None,
    }
}

/// The fused attention an `Op::Attention` runs, from its inputs' shapes (Q, K, V, each
/// `[B, T, width]`, then the key lengths with `key_padding`); None for every other op. O is
/// `[B, T, heads·head_dim]`.
pub fn attention_for(op: &Op, input_shapes: &[&[usize]]) -> Option<AttentionProblem> {
    let Op::Attention {
        heads,
        head_dim,
        scale,
        q,
        k,
        v,
        causal,
        key_padding,
    } = op
    else {
        return None;
    };
    let [qs, ks, vs, ..] = input_shapes else {
        return None;
    };
    let (batch, tokens) = (qs[0], qs[1]);
    let view = |shape: &[usize], column: usize| head_view(tokens, shape[2], *head_dim, column);
    Some(AttentionProblem {
        batch,
        heads: *heads,
        tokens,
        head_dim: *head_dim,
        scale: *scale,
        causal: *causal,
        key_padding: *key_padding,
        q: view(qs, q.column_offset),
        k: view(ks, k.column_offset),
        v: view(vs, v.column_offset),
        o: head_view(tokens, heads * head_dim, *head_dim, 0),
    })
}

/// One matmul a planned graph launches, with the storage types the backend will hand it.
#[derive(Clone, Debug)]
pub struct MatmulLaunch {
    /// The node that launches it.
    pub node: String,
    pub problem: MatmulProblem,
    /// The operands' type (A, B, bias): the plan's compute type.
    pub dtype: DType,
    /// C's type.
    pub output: DType,
    /// The residual's type, when the epilogue adds one.
    pub residual: Option<DType>,
}

/// Every matmul a forward pass of `graph` under `plan` launches, in execution order, as the
/// CUDA backend launches them: the patch projection of the patch embedding (its residual the
/// position embeddings), and every op [`matmul_for`] lowers. For the tuner, which times the
/// problems a model really runs.
pub fn matmul_launches(graph: &Graph, plan: &Plan) -> Vec<MatmulLaunch> {
    let compute = plan.precision.compute;
    let mut launches = Vec::new();
    for node in &graph.nodes {
        let shape = |i: usize| graph.values[node.inputs[i]].shape.as_slice();
        let output = plan.dtypes[node.output];
        let launch = match &node.op {
            Op::PatchEmbed { .. } => {
                let problem =
                    patch_projection(&node.op, shape(0), &graph.values[node.output].shape)
                        .expect("a patch embedding");
                // The residual is the position embedding.
                Some((problem, Some(plan.dtypes[node.inputs[3]])))
            }
            op => {
                let shapes: Vec<&[usize]> = (0..node.inputs.len()).map(shape).collect();
                matmul_for(op, &shapes).map(|problem| {
                    let epilogue = problem.epilogue;
                    let residual = epilogue
                        .residual
                        .then(|| plan.dtypes[node.inputs[2 + epilogue.bias as usize]]);
                    (problem, residual)
                })
            }
        };
        if let Some((problem, residual)) = launch {
            launches.push(MatmulLaunch {
                node: node.name.clone(),
                problem,
                dtype: compute,
                output,
                residual,
            });
        }
    }
    launches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Precision;
    use crate::Activation;

    #[test]
    fn a_planned_graph_lists_its_matmuls_with_their_storage() {
        let mut g = Graph::default();
        let x = g.add_input("x", &[2, 5, 16]);
        let w1 = g.add_param("w1", &[32, 16]);
        let w2 = g.add_param("w2", &[16, 32]);
        let b2 = g.add_param("b2", &[16]);
        let h = g
            .add_node(
                "fc1",
                Op::Linear {
                    epilogue: Epilogue {
                        activation: Activation::Gelu,
                        ..Epilogue::NONE
                    },
                },
                &[x, w1],
            )
            .unwrap();
        let y = g
            .add_node(
                "fc2",
                Op::Linear {
                    epilogue: Epilogue {
                        bias: true,
                        residual: true,
                        ..Epilogue::NONE
                    },
                },
                &[h, w2, b2, x],
            )
            .unwrap();
        let z = g
            .add_node("act", Op::Activation(Activation::Gelu), &[y])
            .unwrap();
        g.mark_output("z", z);
        let plan = Plan::new(&g, Precision::with_f32_residual(DType::F16));
        let launches = matmul_launches(&g, &plan);
        let names: Vec<&str> = launches.iter().map(|l| l.node.as_str()).collect();
        assert_eq!(names, ["fc1", "fc2"], "the activation is no matmul");
        let (fc1, fc2) = (&launches[0], &launches[1]);
        assert_eq!((fc1.problem.m, fc1.problem.n, fc1.problem.k), (10, 32, 16));
        assert_eq!(fc1.problem.epilogue.activation, Activation::Gelu);
        assert_eq!(
            (fc1.dtype, fc1.output, fc1.residual),
            (DType::F16, DType::F16, None)
        );
        assert_eq!((fc2.problem.m, fc2.problem.n, fc2.problem.k), (10, 16, 32));
        // The residual is the graph's input, stored in f32.
        assert_eq!(fc2.residual, Some(DType::F32));
        assert_eq!(fc2.output, plan.dtypes[y]);
    }
}
