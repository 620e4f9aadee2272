//! Bad input is an error, never a panic or a launch.

use super::*;
use vitrt_kernels::gather::{self, EndToken};
use vitrt_kernels::{add, layernorm, patchify, rmsnorm, softmax};

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_arguments_are_errors() {
    let g = gpu();
    let buffer = g.alloc(4096).unwrap();
    let f16 = buffer.view(0, 1024, DType::F16).unwrap();
    let f32 = buffer.view(0, 1024, DType::F32).unwrap();
    let short = buffer.view(0, 10, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    assert!(
        invalid(add::gpu::add(g, DType::F16, f16, f32, 16, f16)),
        "mixed dtypes"
    );
    assert!(
        invalid(add::gpu::add(g, DType::F16, f16, f16, 1025, f16)),
        "n past the views"
    );
    assert!(
        invalid(softmax::gpu::softmax(
            g,
            DType::F16,
            f16,
            4,
            256,
            1.0,
            short
        )),
        "output too short"
    );
    assert!(
        invalid(softmax::gpu::softmax(g, DType::F16, f16, 4, 0, 1.0, f16)),
        "empty rows"
    );
    assert!(
        invalid(layernorm::gpu::layernorm(
            g,
            DType::F16,
            f16,
            short,
            f16,
            2,
            16,
            1e-5,
            f16
        )),
        "gamma too short"
    );
    assert!(
        invalid(layernorm::gpu::layernorm(
            g,
            DType::F16,
            f16,
            f16,
            f16,
            2,
            16,
            f32::NAN,
            f16
        )),
        "NaN eps"
    );
    assert!(
        invalid(rmsnorm::gpu::rmsnorm(
            g,
            DType::F16,
            f16,
            buffer.view(0, 8, DType::F32).unwrap(),
            2,
            16,
            1e-5,
            f16
        )),
        "rmsnorm weight too short"
    );
    assert!(
        invalid(rmsnorm::gpu::rmsnorm(
            g,
            DType::F16,
            f16,
            f32,
            2,
            16,
            -1.0,
            f16
        )),
        "rmsnorm negative eps"
    );
    assert!(
        invalid(patchify::gpu::patchify_with_prefix(
            g,
            DType::F16,
            f32,
            1,
            3,
            8,
            8,
            16,
            PrefixRows {
                rows: f16,
                count: 1
            },
            f16,
            8,
            1,
            f16,
            f16
        )),
        "patch > image"
    );
    assert!(
        invalid(patchify::gpu::patchify_with_prefix(
            g,
            DType::F16,
            f16,
            1,
            1,
            8,
            8,
            4,
            PrefixRows {
                rows: f16,
                count: 1
            },
            f16,
            8,
            5,
            f16,
            f16
        )),
        "f16 pixels"
    );
    assert!(
        buffer.view(4000, 100, DType::F32).is_err(),
        "view past the end"
    );
    let mut too_long = vec![0u8; 5000];
    assert!(
        invalid(g.download(&buffer, 0, &mut too_long)),
        "download past the end"
    );
    assert!(
        invalid(g.upload(&buffer, 4090, &[0u8; 7])),
        "upload past the end"
    );
    // Zero-sized work is a no-op, not an error.
    add::gpu::add(g, DType::F16, f16, f16, 0, f16).unwrap();
    softmax::gpu::softmax(g, DType::F16, f16, 0, 7, 1.0, f16).unwrap();
    g.alloc(0).unwrap();
    g.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn text_tower_kernels_refuse_bad_arguments() {
    let g = gpu();
    let buffer = g.alloc(1 << 16).unwrap();
    let f16 = buffer.view(0, 8192, DType::F16).unwrap();
    let f32 = buffer.view(0, 4096, DType::F32).unwrap();
    let short_f32 = buffer.view(0, 10, DType::F32).unwrap();
    let short_f16 = buffer.view(0, 10, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    let causal = |rows, cols, queries, out| {
        softmax::gpu::softmax_causal(g, DType::F16, f16, rows, cols, queries, 1.0, out)
    };
    assert!(invalid(causal(77, 77, 7, f16)), "queries != cols");
    assert!(invalid(causal(78, 77, 77, f16)), "rows no whole matrices");
    assert!(invalid(causal(77, 77, 77, short_f16)), "output too short");
    assert!(invalid(causal(7, 0, 0, f16)), "empty rows");
    causal(0, 77, 77, f16).unwrap();

    // token_embedding(table, out, ids, table, positions, rows, tokens, dim, vocab, out)
    let embed = |table_dtype, out_dtype, ids, table, out, rows, tokens, dim, vocab| {
        gather::gpu::token_embedding(
            g,
            table_dtype,
            out_dtype,
            ids,
            table,
            table,
            rows,
            tokens,
            dim,
            vocab,
            out,
        )
    };
    let (f, h) = (DType::F32, DType::F16);
    embed(h, h, f32, f16, f16, 8, 4, 16, 64).unwrap();
    embed(h, f, f32, f16, f32, 8, 4, 16, 64).unwrap();
    assert!(
        invalid(embed(h, DType::BF16, f32, f16, f16, 8, 4, 16, 64)),
        "f16 to bf16"
    );
    assert!(
        invalid(embed(f, h, f32, f32, f16, 8, 4, 16, 64)),
        "f32 to f16"
    );
    assert!(invalid(embed(h, h, f16, f16, f16, 8, 4, 16, 64)), "f16 ids");
    assert!(
        invalid(embed(h, h, short_f32, f16, f16, 16, 4, 16, 64)),
        "ids too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, 1000)),
        "table too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, short_f16, 8, 4, 16, 64)),
        "output too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 9, 4, 16, 64)),
        "ragged sequences"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 0, 16, 64)),
        "0 tokens"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, 0)),
        "empty vocabulary"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, (1 << 24) + 1)),
        "vocabulary > 2^24"
    );

    let pick = |hidden, ids, batch, tokens, dim, rule, out| {
        gather::gpu::end_token_rows(g, DType::F16, hidden, ids, batch, tokens, dim, rule, out)
    };
    let rule = EndToken::FirstOf(3);
    pick(f16, f32, 2, 77, 16, rule, f16).unwrap();
    assert!(
        invalid(pick(short_f16, f32, 2, 77, 16, rule, f16)),
        "hidden too short"
    );
    assert!(
        invalid(pick(f16, short_f32, 2, 77, 16, rule, f16)),
        "ids too short"
    );
    assert!(invalid(pick(f16, f16, 2, 77, 16, rule, f16)), "f16 ids");
    assert!(
        invalid(pick(f16, f32, 2, 77, 16, rule, short_f16)),
        "output too short"
    );
    assert!(invalid(pick(f16, f32, 2, 0, 16, rule, f16)), "0 tokens");
    assert!(
        invalid(pick(f16, f32, 2, 77, 16, EndToken::FirstOf(1 << 25), f16)),
        "end id past 2^24"
    );
    pick(f16, f32, 0, 77, 16, EndToken::HighestId, f16).unwrap();
    g.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn out_of_memory_says_how_much() {
    match gpu().alloc(1 << 50) {
        Err(KernelError::OutOfMemory { requested, free }) => {
            assert_eq!(requested, 1 << 50);
            assert!(free > 0 && free < requested, "free {free}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}
