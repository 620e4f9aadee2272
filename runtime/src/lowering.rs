//! How graph ops become kernel problems. Both backends lower through here, so the CPU twin
//! and the GPU kernel always see the same strides.

use crate::graph::Op;
use vitrt_kernels::{AttentionProblem, Epilogue, MatmulProblem, Operand, WeightLayout};

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

/// `S[b, h] = scale · Q[b, :, h] · K[b, :, h]ᵀ`, written as `[B, heads, T, T]`.
#[allow(clippy::too_many_arguments)]
pub fn attention_scores(
    batch: usize,
    tokens: usize,
    heads: usize,
    head_dim: usize,
    scale: f32,
    (q_width, q_offset): (usize, usize),
    (k_width, k_offset): (usize, usize),
) -> MatmulProblem {
    MatmulProblem {
        batch,
        heads,
        m: tokens,
        n: tokens,
        k: head_dim,
        a: head_view(tokens, q_width, head_dim, q_offset),
        b: head_view(tokens, k_width, head_dim, k_offset),
        b_layout: WeightLayout::NK,
        c: Operand {
            offset: 0,
            row_stride: tokens,
            batch_stride: heads * tokens * tokens,
            head_stride: tokens * tokens,
        },
        r: Operand::contiguous(0),
        epilogue: Epilogue {
            alpha: scale,
            ..Epilogue::NONE
        },
    }
}

/// `O[b, :, h] = P[b, h] · V[b, :, h]`, written into `[B, T, heads·head_dim]`.
pub fn attention_context(
    batch: usize,
    tokens: usize,
    heads: usize,
    head_dim: usize,
    (v_width, v_offset): (usize, usize),
) -> MatmulProblem {
    let hidden = heads * head_dim;
    MatmulProblem {
        batch,
        heads,
        m: tokens,
        n: head_dim,
        k: tokens,
        a: Operand {
            offset: 0,
            row_stride: tokens,
            batch_stride: heads * tokens * tokens,
            head_stride: tokens * tokens,
        },
        b: head_view(tokens, v_width, head_dim, v_offset),
        b_layout: WeightLayout::KN,
        c: head_view(tokens, hidden, head_dim, 0),
        r: Operand::contiguous(0),
        epilogue: Epilogue::NONE,
    }
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
        } => {
            let (qs, ks) = (input_shapes[0], input_shapes[1]);
            Some(attention_scores(
                qs[0],
                qs[1],
                *heads,
                *head_dim,
                *scale,
                (qs[2], q.column_offset),
                (ks[2], k.column_offset),
            ))
        }
        Op::AttentionContext { heads, head_dim, v } => {
            let vs = input_shapes[1];
            Some(attention_context(
                vs[0],
                vs[1],
                *heads,
                *head_dim,
                (vs[2], v.column_offset),
            ))
        }
        _ => None,
    }
}

/// The fused attention an `Op::Attention` runs, from its inputs' shapes (Q, K, V, each
/// `[B, T, width]`); None for every other op. O is `[B, T, heads·head_dim]`.
pub fn attention_for(op: &Op, input_shapes: &[&[usize]]) -> Option<AttentionProblem> {
    let Op::Attention {
        heads,
        head_dim,
        scale,
        q,
        k,
        v,
    } = op
    else {
        return None;
    };
    let [qs, ks, vs] = input_shapes else {
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
        q: view(qs, q.column_offset),
        k: view(ks, k.column_offset),
        v: view(vs, v.column_offset),
        o: head_view(tokens, heads * head_dim, *head_dim, 0),
    })
}
