//! The fused attention kernel against its CPU twin, on random data over ragged sequence
//! lengths (1, 7, 80, 197 = ViT-B/16 at 224, 257, 1024, 1030), every instantiated head dim, f16
//! and bf16, with Q, K and V read in place out of one fused QKV tensor (and, for some cases,
//! out of three head-major tensors), and O written with heads side by side into rows that
//! are sometimes padded. Outputs are poisoned before each run (0xFF bytes: NaN in f16 and
//! bf16): every element of the view must be written, and nothing else in the buffer (the
//! padding between rows, guards on both sides) touched.
//!
//! Tolerance, as |gpu - twin| <= rtol · |twin| + atol with the twin's f32 result rounded to the
//! storage dtype: the kernel rounds the probabilities to the storage type before P·V (the
//! twin keeps them f32), which moves an output by at most u · max|V| (u = 2^-11 in f16, 2^-8
//! in bf16: each weight is off by a relative u, and the weights sum to 1 after the division),
//! and the two results round to the storage type separately (up to an ulp, 2u · |twin|).
//! So rtol = atol / max|V| = 2e-3 in f16 and 1e-2 in bf16, over 2u in both.
//!
//! The causal programs (text towers: query row i attends to keys 0..=i) run the same cases
//! over the sequence lengths of `CAUSAL_SEQUENCE_LENGTHS` (CLIP's 77 among them): query blocks
//! that end inside a key block, key blocks wholly after a warp's rows, a diagonal block that
//! is also the partial last one.
//!
//! The key padding mask (per-batch key lengths, SigLIP 2's NaFlex) runs every non-causal
//! program against the twin given the same lengths: `key_padding_matches_its_twin`.
//!
//! Needs a CUDA GPU: `cargo test --release -p vitrt-kernels --test gpu_attention -- --ignored`.

mod common;

use common::{gpu, random, tolerance, upload, GUARD_BYTES, POISON};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use vitrt_kernels::attention::gpu::{AttentionProgram, ATTENTION_HEAD_DIMS};
use vitrt_kernels::attention::{self, cpu::AttentionTiles};
use vitrt_kernels::{AttentionProblem, DType, Operand};

const SEQUENCE_LENGTHS: [usize; 7] = [1, 7, 80, 197, 257, 1024, 1030];
/// Causal: one token; fewer than a warp's 16 rows; exactly one key block (64); CLIP's 77 (a
/// partial second key block); 130 (three key blocks, the last of 2 keys, and a last query
/// block whose warps mostly lie past T).
const CAUSAL_SEQUENCE_LENGTHS: [usize; 5] = [1, 7, 64, 77, 130];
/// Causal: the smallest head dim, CLIP's and SigLIP's 64 (two row groups where the CTAs are
/// many), and 80 (one row group only).
const CAUSAL_HEAD_DIMS: [usize; 3] = [16, 64, 80];

/// Heads of a [batch, tokens, width] tensor starting at `column` (as the runtime lowers them).
fn token_major(tokens: usize, width: usize, head_dim: usize, column: usize) -> Operand {
    Operand {
        offset: column,
        row_stride: width,
        batch_stride: tokens * width,
        head_stride: head_dim,
    }
}

/// A [batch, heads, tokens, head_dim] tensor.
fn head_major(heads: usize, tokens: usize, head_dim: usize) -> Operand {
    Operand {
        offset: 0,
        row_stride: head_dim,
        batch_stride: heads * tokens * head_dim,
        head_stride: tokens * head_dim,
    }
}

struct Layout {
    /// Q, K and V in one fused QKV tensor (else three head-major tensors).
    fused_qkv: bool,
    /// Elements of padding after every output row (left poisoned).
    o_row_pad: usize,
}

/// Runs one case (with the causal mask when `causal`) through every program that can run it
/// on this GPU; returns the worst error as a fraction of the tolerance.
fn run_case(
    rng: &mut SmallRng,
    dtype: DType,
    (batch, heads): (usize, usize),
    tokens: usize,
    head_dim: usize,
    layout: &Layout,
    causal: bool,
) -> f32 {
    let hidden = heads * head_dim;
    let case = format!(
        "attention {dtype} T={tokens} d={head_dim} causal={causal} fused_qkv={} o_pad={}",
        layout.fused_qkv, layout.o_row_pad
    );
    // Scores spread over a few units, so the running maximum moves between key blocks.
    let (q_view, k_view, v_view, q, k, v);
    if layout.fused_qkv {
        let width = 3 * hidden;
        let mut qkv = random(rng, batch * tokens * width, -2.0, 2.0, dtype);
        // V in [-1, 1]: the columns after Q and K.
        for row in qkv.chunks_mut(width) {
            row[2 * hidden..].iter_mut().for_each(|x| *x *= 0.5);
        }
        q_view = token_major(tokens, width, head_dim, 0);
        k_view = token_major(tokens, width, head_dim, hidden);
        v_view = token_major(tokens, width, head_dim, 2 * hidden);
        (q, k, v) = (qkv.clone(), qkv.clone(), qkv);
    } else {
        let n = batch * heads * tokens * head_dim;
        q_view = head_major(heads, tokens, head_dim);
        (k_view, v_view) = (q_view, q_view);
        q = random(rng, n, -2.0, 2.0, dtype);
        k = random(rng, n, -2.0, 2.0, dtype);
        v = random(rng, n, -1.0, 1.0, dtype);
    }
    let o_width = hidden + layout.o_row_pad;
    let o_view = Operand {
        offset: 0,
        row_stride: o_width,
        batch_stride: tokens * o_width,
        head_stride: head_dim,
    };
    let p = AttentionProblem {
        batch,
        heads,
        tokens,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        causal,
        key_padding: false,
        q: q_view,
        k: k_view,
        v: v_view,
        o: o_view,
    };

    let (qb, kb, vb) = (
        upload(gpu(), dtype, &q, 0).0,
        upload(gpu(), dtype, &k, 0).0,
        upload(gpu(), dtype, &v, 0).0,
    );
    let o_len = batch * tokens * o_width;
    let size = dtype.size_bytes();
    let total = GUARD_BYTES + o_len * size + GUARD_BYTES;
    let ob = gpu().alloc(total).unwrap();
    let mut want = vec![f32::NAN; o_len];
    attention::cpu::attention(&p, AttentionTiles::default(), &q, &k, &v, &mut want);
    let max_v = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let rtol = tolerance(dtype);
    let atol = rtol * max_v;
    let mut worst = 0.0f32;

    // Every program that runs this case here: mma.sync with one and two groups of 16 query
    // rows a warp, and on Hopper (non-causal) the wgmma program's shapes.
    let programs = AttentionProgram::all_for(head_dim, causal, gpu().compute_capability());
    for program in programs {
        let case = format!("{case} {program:?}");
        gpu().upload(&ob, 0, &vec![POISON; total]).unwrap();
        let launched = attention::gpu::attention_with_program(
            gpu(),
            dtype,
            &p,
            program,
            qb.view(0, q.len(), dtype).unwrap(),
            kb.view(0, k.len(), dtype).unwrap(),
            vb.view(0, v.len(), dtype).unwrap(),
            ob.view(GUARD_BYTES, o_len, dtype).unwrap(),
        );
        // A program whose keys would not stay resident refuses the case, and writes nothing.
        if program.check_tokens(head_dim, tokens).is_err() {
            let e = launched.expect_err(&format!("{case}: ran keys it cannot hold"));
            assert!(e.to_string().contains("resident"), "{case}: {e}");
            let mut raw = vec![0u8; total];
            gpu().download(&ob, 0, &mut raw).unwrap();
            assert!(
                raw.iter().all(|&b| b == POISON),
                "{case}: refused but wrote"
            );
            continue;
        }
        launched.unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut raw = vec![0u8; total];
        gpu().download(&ob, 0, &mut raw).unwrap();
        let guards_hold = raw[..GUARD_BYTES]
            .iter()
            .chain(&raw[GUARD_BYTES + o_len * size..])
            .all(|&b| b == POISON);
        assert!(guards_hold, "{case}: wrote outside the output buffer");
        let got = dtype.decode(&raw[GUARD_BYTES..GUARD_BYTES + o_len * size]);
        let mut failures = Vec::new();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let column = i % o_width;
            if column >= hidden {
                // Row padding: must still hold the poison.
                let bytes = &raw[GUARD_BYTES + i * size..GUARD_BYTES + (i + 1) * size];
                if bytes.iter().any(|&b| b != POISON) && failures.len() < 8 {
                    failures.push(format!("[{i}] padding written"));
                }
                continue;
            }
            let w = dtype.round(w);
            let d = (g - w).abs();
            let allowed = rtol * w.abs() + atol;
            if d.is_nan() || d > allowed {
                if failures.len() < 8 {
                    let (row, col) = (i / o_width, column);
                    failures.push(format!(
                        "[batch·token {row}, head {}, dim {}] gpu {g} twin {w}",
                        col / head_dim,
                        col % head_dim
                    ));
                }
            } else {
                worst = worst.max(d / allowed);
            }
        }
        assert!(
            failures.is_empty(),
            "{case}: mismatches (NaN = never written):\n{}",
            failures.join("\n")
        );
    }
    worst
}

/// `run_case` over every head dim and length given, 2 batch items of 3 heads, the layouts
/// taken in turn (Q, K and V fused or not, O's rows padded or not); the worst |d|/tol and the
/// number of cases.
fn run_case_grid(
    rng: &mut SmallRng,
    dtype: DType,
    head_dims: &[usize],
    lengths: &[usize],
    causal: bool,
) -> (f32, usize) {
    let (mut worst, mut cases) = (0.0f32, 0);
    for (n, &head_dim) in head_dims.iter().enumerate() {
        for (m, &tokens) in lengths.iter().enumerate() {
            let layout = Layout {
                fused_qkv: (n + m) % 3 != 2,
                o_row_pad: if (n + m) % 2 == 0 { 0 } else { 8 },
            };
            worst = worst.max(run_case(
                rng,
                dtype,
                (2, 3),
                tokens,
                head_dim,
                &layout,
                causal,
            ));
            cases += 1;
        }
    }
    (worst, cases)
}

/// The Hopper program's two query passes reorder nothing inside a row: at every length where
/// its keys stay resident, its output is the one-pass program's, bit for bit (so the launcher
/// may pick either by batch size without moving a result: `Gpu::batch_invariant`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_query_passes_give_the_bits_of_one() {
    if gpu().compute_capability() != (9, 0) {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(29);
    let one = AttentionProgram::Wgmma {
        warpgroups: 2,
        block_n: 64,
        query_passes: 1,
    };
    let two = AttentionProgram::Wgmma {
        warpgroups: 2,
        block_n: 64,
        query_passes: 2,
    };
    let (batch, heads) = (3, 5);
    for dtype in [DType::F16, DType::BF16] {
        for head_dim in [16, 32, 48, 64] {
            for tokens in [100, 129, 192, 193, 197, 255, 256] {
                let width = 3 * heads * head_dim;
                let qkv = random(&mut rng, batch * tokens * width, -2.0, 2.0, dtype);
                let (qb, qv) = upload(gpu(), dtype, &qkv, 0);
                let p = AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false);
                let o_bytes = batch * tokens * heads * head_dim * dtype.size_bytes();
                let run = |program| {
                    let o = gpu().alloc(o_bytes).unwrap();
                    let ov = o.view(0, batch * tokens * heads * head_dim, dtype).unwrap();
                    attention::gpu::attention_with_program(
                        gpu(),
                        dtype,
                        &p,
                        program,
                        qv,
                        qv,
                        qv,
                        ov,
                    )
                    .unwrap();
                    let mut raw = vec![0u8; o_bytes];
                    gpu().download(&o, 0, &mut raw).unwrap();
                    raw
                };
                assert!(
                    run(one) == run(two),
                    "{dtype} d{head_dim} T={tokens}: two passes differ from one"
                );
                drop(qb);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_attention_matches_its_twin_on_ragged_sequences() {
    let mut rng = SmallRng::seed_from_u64(5);
    for dtype in [DType::F16, DType::BF16] {
        let (worst, cases) = run_case_grid(
            &mut rng,
            dtype,
            &ATTENTION_HEAD_DIMS,
            &SEQUENCE_LENGTHS,
            false,
        );
        println!("RESULT attention {dtype:<5} cases {cases:>4}  worst |d|/tol {worst:>6.3}");
        // On Hopper the wgmma program ran every head dim (the case loop cannot skip it there).
        if gpu().compute_capability() == (9, 0) {
            for head_dim in ATTENTION_HEAD_DIMS {
                let name = format!("attention_wgmma_{dtype}_d{head_dim}_bn64_wg2_");
                assert!(
                    gpu()
                        .loaded_kernels()
                        .iter()
                        .any(|k| k.name.starts_with(&name)),
                    "{name}* never ran"
                );
            }
        }
    }
}

/// Where the Hopper program holds an SM alone it runs on a persistent grid at head dims 96 and
/// 128, one CTA an SM taking tile after tile: here with more tiles than SMs, so that CTAs
/// carry their K/V ring and Q over from one tile to the next, at lengths whose last query
/// block leaves the second warpgroup without a row (257) or with one (577).
#[test]
#[ignore = "needs a CUDA GPU"]
fn persistent_attention_matches_its_twin_over_many_tiles() {
    let mut rng = SmallRng::seed_from_u64(11);
    let multiprocessors = gpu().multiprocessors() as usize;
    for dtype in [DType::F16, DType::BF16] {
        for head_dim in [96, 128] {
            for tokens in [257usize, 577] {
                let (batch, heads) = (4, 16);
                let tiles = batch * heads * tokens.div_ceil(128);
                assert!(
                    tiles > multiprocessors,
                    "{tiles} tiles on {multiprocessors} SMs"
                );
                let layout = Layout {
                    fused_qkv: tokens == 257,
                    o_row_pad: 0,
                };
                let worst = run_case(
                    &mut rng,
                    dtype,
                    (batch, heads),
                    tokens,
                    head_dim,
                    &layout,
                    false,
                );
                println!("RESULT persistent {dtype:<5} d{head_dim} T={tokens} worst |d|/tol {worst:>6.3}");
            }
        }
    }
    if gpu().compute_capability() == (9, 0) {
        assert!(
            gpu()
                .loaded_kernels()
                .iter()
                .any(|k| k.name.ends_with("_persist")),
            "no persistent attention ran"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn causal_attention_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(15);
    for dtype in [DType::F16, DType::BF16] {
        let (worst, cases) = run_case_grid(
            &mut rng,
            dtype,
            &CAUSAL_HEAD_DIMS,
            &CAUSAL_SEQUENCE_LENGTHS,
            true,
        );
        println!("RESULT causal attention {dtype:<5} cases {cases:>4}  worst |d|/tol {worst:>6.3}");
        // Both row-group programs of d64 ran causal.
        for groups in [1, 2] {
            let name = format!("attention_{dtype}_d64_bn64_w4_g{groups}_causal");
            assert!(
                gpu().loaded_kernels().iter().any(|k| k.name == name),
                "{name} never ran"
            );
        }
    }
}

/// The causal mask changes the answer (the twin is not trivially the unmasked one) and no
/// later token leaks into an earlier row: the last token's K and V made huge changes only the
/// last row of the GPU's output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn causal_attention_ignores_later_tokens() {
    let dtype = DType::F16;
    let (tokens, head_dim) = (77, 64);
    let mut rng = SmallRng::seed_from_u64(16);
    let n = tokens * head_dim;
    let view = Operand::contiguous(head_dim);
    let p = AttentionProblem {
        batch: 1,
        heads: 1,
        tokens,
        head_dim,
        scale: 0.125,
        causal: true,
        key_padding: false,
        q: view,
        k: view,
        v: view,
        o: view,
    };
    let q = random(&mut rng, n, -2.0, 2.0, dtype);
    let mut k = random(&mut rng, n, -2.0, 2.0, dtype);
    let mut v = random(&mut rng, n, -1.0, 1.0, dtype);
    let run = |k: &[f32], v: &[f32], causal: bool| {
        let (_qb, qv) = upload(gpu(), dtype, &q, 0);
        let (_kb, kv) = upload(gpu(), dtype, k, 0);
        let (_vb, vv) = upload(gpu(), dtype, v, 0);
        let out = common::Poisoned::new(gpu(), dtype, n, 0);
        let p = AttentionProblem { causal, ..p };
        attention::gpu::attention(gpu(), dtype, &p, qv, kv, vv, out.view()).unwrap();
        out.read(gpu(), "causal attention")
    };
    let before = run(&k, &v, true);
    let unmasked = run(&k, &v, false);
    assert_eq!(&before[..head_dim], &v[..head_dim], "row 0 is V's row 0");
    assert_ne!(before, unmasked, "the mask changed nothing");
    let last = (tokens - 1) * head_dim;
    k[last..].iter_mut().for_each(|x| *x = 8.0);
    v[last..].iter_mut().for_each(|x| *x = -30.0);
    let after = run(&k, &v, true);
    assert_eq!(&before[..last], &after[..last]);
    assert_ne!(&before[last..], &after[last..]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_attention_refuses_what_it_cannot_take() {
    let dtype = DType::F16;
    let (tokens, head_dim, heads) = (7, 64, 2);
    let hidden = heads * head_dim;
    let buffer = gpu().alloc(4 * tokens * 3 * hidden * 2 + 64).unwrap();
    let view = |len| buffer.view(0, len, dtype).unwrap();
    let good = AttentionProblem::over_fused_qkv(1, heads, tokens, head_dim, false);
    let qkv = view(tokens * 3 * hidden);
    let o = buffer.view(0, tokens * hidden, dtype).unwrap();
    let refused = |p: &AttentionProblem, dtype: DType| {
        let err = attention::gpu::attention(gpu(), dtype, p, qkv, qkv, qkv, o);
        err.expect_err("an invalid launch must be refused")
            .to_string()
    };
    // Q one element into a 16-byte chunk: rows would not be 16-byte aligned.
    let shifted = AttentionProblem {
        q: Operand {
            offset: 1,
            ..good.q
        },
        ..good
    };
    let e = refused(&shifted, dtype);
    assert!(e.contains("16-byte"), "{e}");
    let odd_dim = AttentionProblem {
        head_dim: 72,
        ..good
    };
    let e = refused(&odd_dim, dtype);
    assert!(e.contains("72"), "{e}");
    let e = refused(&good, DType::F32);
    assert!(e.contains("f32"), "{e}");
    let too_long = AttentionProblem {
        tokens: 4 * tokens,
        ..good
    };
    let e = refused(&too_long, dtype);
    assert!(e.contains("needs"), "{e}");
    // The Hopper program scales each block's maximum: a negative scale is refused there, and
    // the launcher's own pick (mma.sync) runs it.
    if gpu().compute_capability() == (9, 0) {
        let negative = AttentionProblem {
            scale: -0.125,
            ..good
        };
        let e = attention::gpu::attention_with_program(
            gpu(),
            dtype,
            &negative,
            AttentionProgram::WGMMA,
            qkv,
            qkv,
            qkv,
            o,
        )
        .expect_err("a negative scale on the Hopper program")
        .to_string();
        assert!(e.contains("positive softmax scale"), "{e}");
        attention::gpu::attention(gpu(), dtype, &negative, qkv, qkv, qkv, o).unwrap();
    }
}

/// The causal kernel at CLIP ViT-B/32's text tower (8 heads of 64, 77 tokens, Q, K and V in
/// place out of the fused QKV tensor) at batches 1, 64 and 256, beside the same problem
/// unmasked: prints the time of each and their ratio (causal, a first query block of 64 rows
/// reads one key block instead of two, and each warp computes only the 16-key steps up to its
/// last row). For the record; asserts only that both run. Tests named bench_* must run alone (`bench_ --ignored
/// --test-threads=1`).
/// The key padding mask (SigLIP 2's NaFlex sequences padded at the end): every program that
/// runs a non-causal case, against the twin with the same per-batch key lengths, over
/// sequences with one valid key, all of them, lengths ending inside a key block and on a
/// block's boundary; every output row (padded query rows too) must be written and finite.
#[test]
#[ignore = "needs a CUDA GPU"]
fn key_padding_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(37);
    for dtype in [DType::F16, DType::BF16] {
        for head_dim in [16, 64, 80, 128] {
            for tokens in [1usize, 7, 80, 197, 256, 1030] {
                // At head dim 128 and up to 256 tokens, more tiles than SMs: the persistent
                // grid carries tiles of different lengths in one CTA.
                let heads = if head_dim == 128 && tokens <= 256 {
                    32
                } else {
                    3
                };
                let lengths: Vec<i32> = [
                    tokens,
                    1,
                    tokens / 2 + 1,
                    tokens.saturating_sub(63).max(1),
                    64,
                ]
                .iter()
                .map(|&n| n.min(tokens) as i32)
                .collect();
                let batch = lengths.len();
                let hidden = heads * head_dim;
                let width = 3 * hidden;
                let mut qkv = random(&mut rng, batch * tokens * width, -2.0, 2.0, dtype);
                for row in qkv.chunks_mut(width) {
                    row[2 * hidden..].iter_mut().for_each(|x| *x *= 0.5);
                }
                let p = AttentionProblem {
                    key_padding: true,
                    ..AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false)
                };
                let mut want = vec![f32::NAN; batch * tokens * hidden];
                attention::cpu::attention_with_key_lengths(
                    &p,
                    AttentionTiles::default(),
                    &qkv,
                    &qkv,
                    &qkv,
                    &mut want,
                    &lengths,
                );
                let qkv_buffer = upload(gpu(), dtype, &qkv, 0).0;
                let qkv_view = qkv_buffer.view(0, qkv.len(), dtype).unwrap();
                let length_bytes: Vec<u8> = lengths.iter().flat_map(|n| n.to_le_bytes()).collect();
                let length_buffer = gpu().alloc(length_bytes.len()).unwrap();
                gpu().upload(&length_buffer, 0, &length_bytes).unwrap();
                let length_view = length_buffer.view(0, batch, DType::F32).unwrap();
                let size = dtype.size_bytes();
                let o_len = want.len();
                let total = GUARD_BYTES + o_len * size + GUARD_BYTES;
                let out = gpu().alloc(total).unwrap();
                let rtol = tolerance(dtype);
                let atol = rtol * 1.0;
                for program in
                    AttentionProgram::all_for(head_dim, false, gpu().compute_capability())
                {
                    if program.check_tokens(head_dim, tokens).is_err() {
                        continue;
                    }
                    let case = format!(
                        "key padding {dtype} T={tokens} d={head_dim} {lengths:?} {program:?}"
                    );
                    gpu().upload(&out, 0, &vec![POISON; total]).unwrap();
                    attention::gpu::attention_with_key_lengths(
                        gpu(),
                        dtype,
                        &p,
                        Some(program),
                        qkv_view,
                        qkv_view,
                        qkv_view,
                        out.view(GUARD_BYTES, o_len, dtype).unwrap(),
                        length_view,
                    )
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                    let mut raw = vec![0u8; total];
                    gpu().download(&out, 0, &mut raw).unwrap();
                    let guards_hold = raw[..GUARD_BYTES]
                        .iter()
                        .chain(&raw[GUARD_BYTES + o_len * size..])
                        .all(|&b| b == POISON);
                    assert!(guards_hold, "{case}: wrote outside the output buffer");
                    let got = dtype.decode(&raw[GUARD_BYTES..GUARD_BYTES + o_len * size]);
                    let failures: Vec<String> = got
                        .iter()
                        .zip(&want)
                        .enumerate()
                        .filter(|(_, (&g, &w))| {
                            let w = dtype.round(w);
                            !g.is_finite() || (g - w).abs() > rtol * w.abs() + atol
                        })
                        .take(8)
                        .map(|(i, (g, w))| {
                            let (item, token) = (i / (tokens * hidden), i / hidden % tokens);
                            format!(
                                "[item {item}, token {token}, column {}] gpu {g} twin {w}",
                                i % hidden
                            )
                        })
                        .collect();
                    assert!(failures.is_empty(), "{case}:\n{}", failures.join("\n"));
                }
            }
        }
    }
}

/// A key padding mask is refused with the causal mask, without its lengths, or with too few
/// of them; lengths without the mask are refused too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn key_padding_refuses_what_it_cannot_take() {
    let dtype = DType::F16;
    let (batch, tokens, head_dim, heads) = (2, 7, 64, 2);
    let hidden = heads * head_dim;
    let buffer = gpu().alloc(batch * tokens * 3 * hidden * 2 + 64).unwrap();
    let qkv = buffer.view(0, batch * tokens * 3 * hidden, dtype).unwrap();
    let o = buffer.view(0, batch * tokens * hidden, dtype).unwrap();
    let lengths = gpu().alloc(4 * batch).unwrap();
    let masked = AttentionProblem {
        key_padding: true,
        ..AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false)
    };
    let with_lengths = |p: &AttentionProblem, count: usize| {
        let view = lengths.view(0, count, DType::F32).unwrap();
        attention::gpu::attention_with_key_lengths(gpu(), dtype, p, None, qkv, qkv, qkv, o, view)
            .expect_err("an invalid launch must be refused")
            .to_string()
    };
    let causal = AttentionProblem {
        causal: true,
        ..masked
    };
    let e = with_lengths(&causal, batch);
    assert!(e.contains("causal"), "{e}");
    let e = with_lengths(&masked, batch - 1);
    assert!(e.contains("key lengths"), "{e}");
    let unmasked = AttentionProblem {
        key_padding: false,
        ..masked
    };
    let e = with_lengths(&unmasked, batch);
    assert!(e.contains("without a key padding mask"), "{e}");
    let e = attention::gpu::attention(gpu(), dtype, &masked, qkv, qkv, qkv, o)
        .expect_err("a mask without its lengths must be refused")
        .to_string();
    assert!(e.contains("needs the key lengths"), "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bench_causal_attention_at_clip_text_shapes() {
    let g = gpu();
    let (tokens, heads, head_dim) = (77usize, 8usize, 64usize);
    let hidden = heads * head_dim;
    let width = 3 * hidden;
    let mut rng = SmallRng::seed_from_u64(17);
    let time = |run: &dyn Fn()| {
        for _ in 0..5 {
            run();
        }
        g.synchronize().unwrap();
        let mut times: Vec<f64> = (0..7)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..20 {
                    run();
                }
                g.synchronize().unwrap();
                t.elapsed().as_secs_f64() / 20.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    for dtype in [DType::F16, DType::BF16] {
        for batch in [1usize, 64, 256] {
            let qkv = random(&mut rng, batch * tokens * width, -2.0, 2.0, dtype);
            let (_qb, qv) = upload(g, dtype, &qkv, 0);
            let o = g
                .alloc(batch * tokens * hidden * dtype.size_bytes())
                .unwrap();
            let ov = o.view(0, batch * tokens * hidden, dtype).unwrap();
            let problem =
                |causal| AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, causal);
            let (full, causal) = (problem(false), problem(true));
            let t_full =
                time(&|| attention::gpu::attention(g, dtype, &full, qv, qv, qv, ov).unwrap());
            let t_causal =
                time(&|| attention::gpu::attention(g, dtype, &causal, qv, qv, qv, ov).unwrap());
            println!(
                "BENCH attention {dtype:<4} b{batch:<3} T=77 8x64: full {:>7.1} us, causal {:>7.1} \
                 us ({:.2}x), causal {:.1} TFLOP/s",
                t_full * 1e6,
                t_causal * 1e6,
                t_full / t_causal,
                causal.flops() / t_causal / 1e12
            );
        }
    }
    for k in g.loaded_kernels() {
        if k.name.starts_with("attention") {
            println!(
                "LOADED {:<40} regs {:>3} local {:>4}",
                k.name, k.registers, k.local_bytes
            );
        }
    }
}

/// The attention shapes of the model families, for the programs' benchmark: (name, heads,
/// tokens, head dim as the runtime runs it; SigLIP so400m's 72 is padded to 80).
const MODEL_SHAPES: [(&str, usize, usize, usize); 9] = [
    ("vit-b16-224", 12, 197, 64),
    ("dinov2-b14-224", 12, 257, 64),
    ("dinov2-l14-224", 16, 257, 64),
    ("clip-l14-336", 16, 577, 64),
    ("vit-h14-224", 16, 257, 80),
    ("so400m-14-384", 16, 729, 80),
    ("siglip2-g16-256", 16, 256, 96),
    ("d112-t577", 8, 577, 112),
    ("d128-t577", 8, 577, 128),
];

/// Every program on the model families' attention shapes at batches 1, 8, 64 and 256, f16 (and bf16
/// for ViT-B/16), over the fused QKV activation as the runtime lowers it: CUDA events, 5
/// warm-up launches, the median of 7 samples of 20 launches. Prints one tab-separated `ATTN`
/// line a measurement, each program's and then the launcher's pick as `chosen` (scripts/bench/bench_attention.py joins them with PyTorch's SDPA on the same
/// shapes) and each kernel's registers. `VITRT_ATTENTION_BENCH_ONLY=SHAPE,BATCH,PROGRAM`
/// (`PROGRAM` as the line names it, e.g. `chosen`) times that one case, for a profiler.
#[test]
#[ignore = "needs a CUDA GPU; a benchmark"]
fn bench_attention_programs_at_model_shapes() {
    let g = gpu();
    let mut rng = SmallRng::seed_from_u64(18);
    let time = |run: &dyn Fn()| -> f64 {
        for _ in 0..5 {
            run();
        }
        let mut samples: Vec<f64> = (0..7)
            .map(|_| {
                let start = g.record_event().unwrap();
                for _ in 0..20 {
                    run();
                }
                let end = g.record_event().unwrap();
                end.ms_since(&start).unwrap() as f64 / 20.0
            })
            .collect();
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let only = std::env::var("VITRT_ATTENTION_BENCH_ONLY").ok();
    let wanted = |shape: &str, batch: usize, program: &str| {
        only.as_deref()
            .is_none_or(|only| only == format!("{shape},{batch},{program}"))
    };
    for (shape, heads, tokens, head_dim) in MODEL_SHAPES {
        let dtypes: &[DType] = if shape == "vit-b16-224" {
            &[DType::F16, DType::BF16]
        } else {
            &[DType::F16]
        };
        for &dtype in dtypes {
            for batch in [1usize, 8, 64, 256] {
                // With VITRT_ATTENTION_BENCH_ONLY, the other cases make no data either (the
                // random inputs of every shape take the CPU tens of seconds).
                if only
                    .as_deref()
                    .is_some_and(|only| !only.starts_with(&format!("{shape},{batch},")))
                {
                    continue;
                }
                let hidden = heads * head_dim;
                let width = 3 * hidden;
                let qkv = random(&mut rng, batch * tokens * width, -2.0, 2.0, dtype);
                let (_qb, qv) = upload(g, dtype, &qkv, 0);
                let o = g
                    .alloc(batch * tokens * hidden * dtype.size_bytes())
                    .unwrap();
                let ov = o.view(0, batch * tokens * hidden, dtype).unwrap();
                let p = AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false);
                let mut programs =
                    AttentionProgram::all_for(head_dim, false, g.compute_capability());
                programs.retain(|program| program.check_tokens(head_dim, tokens).is_ok());
                // Every program, then the launcher's own pick (as "chosen").
                for program in programs.into_iter().map(Some).chain([None]) {
                    let name = program.map_or("chosen".to_string(), |p| format!("{p:?}"));
                    if !wanted(shape, batch, &name) {
                        continue;
                    }
                    let ms = time(&|| {
                        match program {
                            Some(program) => attention::gpu::attention_with_program(
                                g, dtype, &p, program, qv, qv, qv, ov,
                            ),
                            None => attention::gpu::attention(g, dtype, &p, qv, qv, qv, ov),
                        }
                        .unwrap()
                    });
                    println!(
                        "ATTN\t{shape}\t{batch}\t{dtype}\t{name}\t{:.2}\t{:.1}",
                        ms * 1e3,
                        p.flops() / (ms * 1e-3) / 1e12
                    );
                }
            }
        }
    }
    for k in g.loaded_kernels() {
        if k.name.starts_with("attention") {
            println!(
                "LOADED {:<40} regs {:>3} local {:>4}",
                k.name, k.registers, k.local_bytes
            );
        }
    }
}
