//! The attention's launch: the configuration chosen (or forced) for a problem, its checks,
//! its arguments (strides, or the Hopper program's tensor maps) and the grid.

use super::config::*;
use super::problem::{attention_rows_aligned, fused_attention_support, AttentionProblem};
use super::program::AttentionProgram;
use crate::cuda::{
    encode_tiled, invalid, to_i32, to_i64, DevPtr, Gpu, KernelError, LaunchDims, Swizzle,
};
use crate::types::{DType, Operand};

/// `key_lengths`: with `p.key_padding`, the buffer of `p.batch` i32 key lengths (a view of
/// 4-byte elements, typed F32: the device memory layer has no integer type); none without.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    program: Option<AttentionProgram>,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
    key_lengths: Option<DevPtr>,
) -> Result<(), KernelError> {
    fused_attention_support(dtype, p.head_dim).map_err(KernelError::InvalidArgument)?;
    for (what, view) in [("Q", q), ("K", k), ("V", v), ("O", o)] {
        view.expect(&format!("attention {what}"), dtype, 0)?;
    }
    p.check_masks().map_err(KernelError::InvalidArgument)?;
    let key_lengths = match (p.key_padding, key_lengths) {
        (true, Some(lengths)) => {
            lengths.expect("attention key lengths (i32)", DType::F32, p.batch)?;
            lengths.ptr
        }
        (false, None) => 0,
        (true, None) => {
            return Err(invalid!(
                "attention with a key padding mask needs the key lengths"
            ))
        }
        (false, Some(_)) => {
            return Err(invalid!(
                "attention given key lengths without a key padding mask"
            ))
        }
    };
    p.check_bounds(q.len, k.len, v.len, o.len)
        .map_err(KernelError::InvalidArgument)?;
    if !p.scale.is_finite() {
        return Err(invalid!("attention scale must be finite, got {}", p.scale));
    }
    if p.batch == 0 || p.heads == 0 || p.tokens == 0 {
        return Ok(());
    }
    let extents = (p.batch, p.heads, p.tokens);
    for (what, ptr, view) in [
        ("Q", q, &p.q),
        ("K", k, &p.k),
        ("V", v, &p.v),
        ("O", o, &p.o),
    ] {
        if !attention_rows_aligned(ptr.ptr, dtype, view, extents) {
            return Err(invalid!(
                "fused attention needs every {what} row on a 16-byte boundary \
                 (offset {}, strides {}/{}/{} elements of {dtype})",
                view.offset,
                view.row_stride,
                view.batch_stride,
                view.head_stride
            ));
        }
    }
    let cc = gpu.compute_capability();
    let config = match program {
        // Batch-invariant selection: the program a large batch gets, whatever this one's size.
        None if gpu.batch_invariant() => {
            let many = AttentionProblem {
                batch: p.batch.max(INVARIANT_BATCH),
                ..*p
            };
            AttentionConfig::select(dtype, &many, gpu.multiprocessors(), cc)
        }
        None => AttentionConfig::select(dtype, p, gpu.multiprocessors(), cc),
        Some(program) => {
            program
                .check(p.head_dim, p.causal, cc)
                .map_err(KernelError::InvalidArgument)?;
            AttentionConfig {
                dtype,
                head_dim: p.head_dim as u32,
                program,
                causal: p.causal,
            }
        }
    };
    config
        .program
        .check_tokens(p.head_dim, p.tokens)
        .map_err(KernelError::InvalidArgument)?;
    config
        .program
        .check_scale(p.scale)
        .map_err(KernelError::InvalidArgument)?;
    let programs = (p.batch as u64)
        .checked_mul(p.heads as u64)
        .and_then(|x| x.checked_mul(p.tokens.div_ceil(config.block_m() as usize) as u64))
        .filter(|&x| x <= i32::MAX as u64)
        .ok_or_else(|| {
            invalid!(
                "attention over {} x {} heads of {} tokens needs more than 2^31 programs",
                p.batch,
                p.heads,
                p.tokens
            )
        })?;
    let view = |o: &Operand| -> Result<[i64; 4], KernelError> {
        Ok([
            to_i64(o.offset)?,
            to_i64(o.row_stride)?,
            to_i64(o.batch_stride)?,
            to_i64(o.head_stride)?,
        ])
    };
    let extents_arg = [
        to_i32(p.heads, "attention heads")?,
        to_i32(p.tokens, "attention tokens")?,
    ];
    let args = match config.program {
        AttentionProgram::MmaSync { .. } => AttentionParams::new(
            [q, k, v],
            o,
            extents_arg,
            [view(&p.q)?, view(&p.k)?, view(&p.v)?, view(&p.o)?],
            p.scale,
            key_lengths,
        )
        .args(),
        AttentionProgram::Wgmma { .. } => {
            let map = |ptr, view| view_tensor_map(dtype, ptr, view, p.head_dim, extents);
            HopperAttentionParams::new(
                [map(q, &p.q)?, map(k, &p.k)?, map(v, &p.v)?],
                o,
                [
                    to_i32(p.batch, "attention batch")?,
                    extents_arg[0],
                    extents_arg[1],
                ],
                view(&p.o)?,
                p.scale,
                key_lengths,
            )
            .args()
        }
    };
    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: (config.grid(programs as u32, gpu.multiprocessors()), 1, 1),
            block: config.threads(),
            shared_bytes: config.shared_bytes(),
            cluster: 1,
        },
        &args,
    )
}

/// The Hopper program's tensor map over a Q, K or V view: 4-D, [batch][head][token][dim]
/// innermost last, read in boxes of 64 tokens x 16 dims in the 32-byte swizzle
/// (attention_wgmma.cu), tokens past the view's read as zeros. Strides of dimensions of extent
/// 1 are never used and may be anything: they are given as 16 bytes, which TMA accepts.
pub(super) fn view_tensor_map(
    dtype: DType,
    ptr: DevPtr,
    view: &Operand,
    head_dim: usize,
    (batch, heads, tokens): (usize, usize, usize),
) -> Result<[u64; 16], KernelError> {
    let size = dtype.size_bytes() as u64;
    let stride = |extent: usize, elements: usize| match extent {
        0 | 1 => 16,
        _ => elements as u64 * size,
    };
    encode_tiled(
        dtype,
        ptr.ptr + view.offset as u64 * size,
        &[head_dim as u64, tokens as u64, heads as u64, batch as u64],
        &[
            stride(tokens, view.row_stride),
            stride(heads, view.head_stride),
            stride(batch, view.batch_stride),
        ],
        &[16, 64, 1, 1],
        Swizzle::Bytes32,
    )
}
