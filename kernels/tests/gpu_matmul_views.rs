//! The GPU matmul against its CPU twin on the products beside the linear layers: attention's
//! two products reading heads in place, the patch embedding, the f32 residual stream, a
//! residual that is the output itself, and split-K. The checks and tolerances are those of
//! gpu_matmul.rs (see its header), whose helpers are copied here.
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_matmul_views --
//! --ignored --test-threads=1`.

use rand::{rngs::StdRng, Rng, SeedableRng};
use vitrt_kernels::cuda::{DevPtr, DeviceBuffer, Gpu};
use vitrt_kernels::matmul::cpu::{self, MatmulTiles};
use vitrt_kernels::matmul::{self, tiles_for, MatmulTile};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, Operand, WeightLayout};

const POISON: u8 = 0xFF;
const GUARD_BYTES: usize = 512;
fn gpu() -> Gpu {
    Gpu::new(0).unwrap_or_else(|e| panic!("this test needs a CUDA GPU: {e}"))
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
    }
}

/// Uniform values in [lo, hi), already rounded to `dtype` so that the twin sees exactly what the
/// GPU reads.
fn random(dtype: DType, n: usize, range: std::ops::Range<f32>, rng: &mut StdRng) -> Vec<f32> {
    (0..n)
        .map(|_| dtype.round(rng.random_range(range.clone())))
        .collect()
}

/// Device copies of one input, `shift` elements into its buffer so the base address can be
/// misaligned on purpose.
struct Uploaded {
    _buffer: DeviceBuffer,
    view: DevPtr,
}

fn upload(gpu: &Gpu, dtype: DType, values: &[f32], shift: usize) -> Uploaded {
    let size = dtype.size_bytes();
    let buffer = gpu.alloc((shift + values.len()).max(1) * size).unwrap();
    gpu.upload(&buffer, shift * size, &dtype.encode(values))
        .unwrap();
    let view = buffer.view(shift * size, values.len(), dtype).unwrap();
    Uploaded {
        _buffer: buffer,
        view,
    }
}

/// One matmul to run on both sides.
struct Case {
    label: String,
    dtype: DType,
    problem: MatmulProblem,
    /// Force a tile shape instead of letting the launcher choose.
    tile: Option<MatmulTile>,
    a: Vec<f32>,
    b: Vec<f32>,
    bias: Option<Vec<f32>>,
    residual: Option<Vec<f32>>,
    /// Elements of C's buffer (at least the problem's extent; more leaves a tail to check).
    c_len: usize,
    /// Elements every input and output view starts into its buffer (misaligns base pointers).
    shift: usize,
    /// The residual is read from C itself (`x += f(x)` in place): C starts out holding it.
    residual_in_place: bool,
    /// Storage types of C and of the residual: `dtype`, or f32 for a residual stream kept in
    /// f32 (see `matmul::gpu::matmul`).
    c_dtype: DType,
    residual_dtype: DType,
}

/// The worst scaled error of one case; panics with the case's label on any failed check.
fn run(gpu: &Gpu, case: &Case) -> f64 {
    let p = &case.problem;
    let dtype = case.dtype;
    let size = case.c_dtype.size_bytes();
    let a = upload(gpu, dtype, &case.a, case.shift);
    let b = upload(gpu, dtype, &case.b, case.shift);
    let bias = case
        .bias
        .as_ref()
        .map(|v| upload(gpu, dtype, v, case.shift));
    let external_residual = match (&case.residual, case.residual_in_place) {
        (Some(r), false) => Some(upload(gpu, case.residual_dtype, r, case.shift)),
        _ => None,
    };

    // C: poison everywhere (before the view, inside it, and the guard after it).
    let c_bytes = (case.shift + case.c_len) * size + GUARD_BYTES;
    let c_buffer = gpu.alloc(c_bytes).unwrap();
    let mut initial = vec![POISON; c_bytes];
    if case.residual_in_place {
        let r = case
            .residual
            .as_ref()
            .expect("an in-place residual needs residual values");
        let start = case.shift * size;
        initial[start..start + r.len() * size].copy_from_slice(&case.c_dtype.encode(r));
    }
    gpu.upload(&c_buffer, 0, &initial).unwrap();
    let c_view = c_buffer
        .view(case.shift * size, case.c_len, case.c_dtype)
        .unwrap();
    let residual_view = if case.residual_in_place {
        Some(c_view)
    } else {
        external_residual.as_ref().map(|r| r.view)
    };

    let bias_view = bias.as_ref().map(|x| x.view);
    match case.tile {
        Some(tile) => matmul::gpu::matmul_with_tile(
            gpu,
            dtype,
            p,
            tile,
            a.view,
            b.view,
            bias_view,
            residual_view,
            c_view,
        ),
        None => matmul::gpu::matmul(
            gpu,
            dtype,
            p,
            a.view,
            b.view,
            bias_view,
            residual_view,
            c_view,
        ),
    }
    .unwrap_or_else(|e| panic!("{}: launch failed: {e}", case.label));
    let mut out = vec![0u8; c_bytes];
    gpu.download(&c_buffer, 0, &mut out)
        .unwrap_or_else(|e| panic!("{}: the kernel failed: {e}", case.label));

    // The twin, on the same (rounded) values.
    let mut want = vec![f32::NAN; case.c_len];
    cpu::matmul(
        p,
        MatmulTiles::default(),
        &case.a,
        &case.b,
        case.bias.as_deref(),
        case.residual.as_deref(),
        &mut want,
    );

    let mut written = vec![false; case.c_len];
    for bt in 0..p.batch {
        for h in 0..p.heads {
            for i in 0..p.m {
                for j in 0..p.n {
                    written[p.c.index(bt, h, i, j)] = true;
                }
            }
        }
    }
    let got = case
        .c_dtype
        .decode(&out[case.shift * size..(case.shift + case.c_len) * size]);
    let sum_sq: f64 = want
        .iter()
        .zip(&written)
        .filter(|(_, &w)| w)
        .map(|(&v, _)| (v as f64).powi(2))
        .sum();
    let count = written.iter().filter(|&&w| w).count().max(1);
    let floor = ((sum_sq / count as f64).sqrt() / 10.0).max(1e-30);

    let mut worst = (0.0f64, 0usize);
    for (idx, &is_written) in written.iter().enumerate() {
        let bytes = &out[(case.shift + idx) * size..(case.shift + idx + 1) * size];
        if is_written {
            let (g, w) = (got[idx] as f64, want[idx] as f64);
            assert!(
                g.is_finite(),
                "{}: C[{idx}] was not written (or is not finite: {g})",
                case.label
            );
            let err = (g - w).abs() / w.abs().max(floor);
            if err > worst.0 {
                worst = (err, idx);
            }
        } else if !case.residual_in_place {
            assert!(
                bytes.iter().all(|&x| x == POISON),
                "{}: C[{idx}] lies outside the problem and was written",
                case.label
            );
        }
    }
    let outside = [
        &out[..case.shift * size],
        &out[(case.shift + case.c_len) * size..],
    ];
    for region in outside {
        assert!(
            region.iter().all(|&x| x == POISON),
            "{}: bytes before or after C were written",
            case.label
        );
    }
    let (err, idx) = worst;
    assert!(
        err <= tolerance(dtype),
        "{}: C[{idx}] = {}, twin says {} (scaled error {err:.2e} > {:.0e})",
        case.label,
        got[idx],
        want[idx],
        tolerance(dtype)
    );
    err
}

/// Worst errors per dtype, printed at the end of a test.
#[derive(Default)]
struct Worst {
    by_dtype: Vec<(DType, f64, String)>,
}

impl Worst {
    fn record(&mut self, dtype: DType, err: f64, label: &str) {
        match self.by_dtype.iter_mut().find(|(d, _, _)| *d == dtype) {
            Some(entry) if entry.1 >= err => {}
            Some(entry) => *entry = (dtype, err, label.to_string()),
            None => self.by_dtype.push((dtype, err, label.to_string())),
        }
    }

    fn print(&self, test: &str) {
        for (dtype, err, label) in &self.by_dtype {
            println!(
                "{test}: worst {dtype} error {err:.2e} (tolerance {:.0e}) in {label}",
                tolerance(*dtype)
            );
        }
    }
}

/// An operand of `rows` x `cols` with `pad` extra elements per row and `offset` in front.
fn strided(cols: usize, pad: usize, offset: usize) -> Operand {
    Operand {
        offset,
        row_stride: cols + pad,
        batch_stride: 0,
        head_stride: 0,
    }
}

/// A linear-layer case: A [m, k], B [n, k] or [k, n], C [m, n], each possibly with padded rows
/// and offsets.
#[allow(clippy::too_many_arguments)]
fn linear_case(
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    layout: WeightLayout,
    epilogue: Epilogue,
    pad: usize,
    shift: usize,
    tile: Option<MatmulTile>,
    rng: &mut StdRng,
) -> Case {
    let (b_rows, b_cols) = match layout {
        WeightLayout::NK => (n, k),
        WeightLayout::KN => (k, n),
    };
    let problem = MatmulProblem {
        batch: 1,
        heads: 1,
        m,
        n,
        k,
        a: strided(k, pad, pad / 2),
        b: strided(b_cols, pad, pad),
        b_layout: layout,
        c: strided(n, pad, pad / 3),
        r: strided(n, pad / 2, pad),
        epilogue,
    };
    let a = random(dtype, problem.a.extent(1, 1, m, k), -1.0..1.0, rng);
    let b = random(
        dtype,
        problem.b.extent(1, 1, b_rows, b_cols),
        -1.0..1.0,
        rng,
    );
    let bias = epilogue.bias.then(|| random(dtype, n, -1.0..1.0, rng));
    let residual = epilogue
        .residual
        .then(|| random(dtype, problem.r.extent(1, 1, m, n), -2.0..2.0, rng));
    Case {
        label: format!(
            "{dtype} {m}x{n}x{k} {layout:?} pad {pad} shift {shift} {:?} bias {} residual {} alpha {}{}",
            epilogue.activation,
            epilogue.bias,
            epilogue.residual,
            epilogue.alpha,
            tile.map(|t| format!(" tile {}", t.name())).unwrap_or_default()
        ),
        dtype,
        c_len: problem.c.extent(1, 1, m, n),
        problem,
        tile,
        a,
        b,
        bias,
        residual,
        shift,
        residual_in_place: false,
        c_dtype: dtype,
        residual_dtype: dtype,
    }
}

/// The `i`-th epilogue of a cycle through every activation, bias and residual on and off, and
/// alpha 1 or not.
fn epilogue_number(i: usize) -> Epilogue {
    Epilogue {
        alpha: if i % 5 == 4 { 0.125 } else { 1.0 },
        bias: i.is_multiple_of(2),
        activation: Activation::ALL[(i / 4) % Activation::ALL.len()],
        residual: (i / 2).is_multiple_of(2),
    }
}

/// Q·Kᵀ and P·V for `heads` heads of `dim` over `tokens` tokens of `batch` images, reading Q,
/// K and V in place: from one fused [B, T, 3·hidden] activation, or from three [B, T, hidden]
/// ones.
fn attention_cases(
    dtype: DType,
    batch: usize,
    heads: usize,
    tokens: usize,
    dim: usize,
    fused: bool,
    rng: &mut StdRng,
) -> [Case; 2] {
    let hidden = heads * dim;
    let row = if fused { 3 * hidden } else { hidden };
    let head_view = |offset: usize| Operand {
        offset,
        row_stride: row,
        batch_stride: tokens * row,
        head_stride: dim,
    };
    // Separate Q, K, V live in one buffer each here: their offsets are 0 in their own buffers.
    let (q_offset, k_offset, v_offset) = if fused {
        (0, hidden, 2 * hidden)
    } else {
        (0, 0, 0)
    };
    let activation = random(dtype, batch * tokens * row, -1.0..1.0, rng);
    let other = if fused {
        activation.clone()
    } else {
        random(dtype, batch * tokens * row, -1.0..1.0, rng)
    };
    let scores_view = Operand {
        offset: 0,
        row_stride: tokens,
        batch_stride: heads * tokens * tokens,
        head_stride: tokens * tokens,
    };
    let scores = MatmulProblem {
        batch,
        heads,
        m: tokens,
        n: tokens,
        k: dim,
        a: head_view(q_offset),
        b: head_view(k_offset),
        b_layout: WeightLayout::NK,
        c: scores_view,
        r: Operand::contiguous(0),
        epilogue: Epilogue {
            alpha: 1.0 / (dim as f32).sqrt(),
            ..Epilogue::NONE
        },
    };
    let form = if fused { "fused QKV" } else { "separate Q/K/V" };
    let label = |what: &str| format!("{dtype} {what} {form} B{batch} H{heads} T{tokens} d{dim}");
    let qk = Case {
        label: label("Q·Kᵀ"),
        dtype,
        c_len: batch * heads * tokens * tokens,
        problem: scores,
        tile: None,
        a: activation.clone(),
        b: other.clone(),
        bias: None,
        residual: None,
        shift: 0,
        residual_in_place: false,
        c_dtype: dtype,
        residual_dtype: dtype,
    };
    // Probabilities in [0, 1): what a softmax hands P·V.
    let probabilities = random(dtype, batch * heads * tokens * tokens, 0.0..1.0, rng);
    let context = MatmulProblem {
        k: tokens,
        n: dim,
        a: scores_view,
        b: head_view(v_offset),
        b_layout: WeightLayout::KN,
        c: Operand {
            offset: 0,
            row_stride: hidden,
            batch_stride: tokens * hidden,
            head_stride: dim,
        },
        epilogue: Epilogue::NONE,
        ..scores
    };
    let pv = Case {
        label: label("P·V"),
        dtype,
        c_len: batch * tokens * hidden,
        problem: context,
        tile: None,
        a: probabilities,
        b: other,
        bias: None,
        residual: None,
        shift: 0,
        residual_in_place: false,
        c_dtype: dtype,
        residual_dtype: dtype,
    };
    [qk, pv]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn attention_products_read_heads_in_place() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(13);
    let mut worst = Worst::default();
    for dtype in DType::ALL {
        for (heads, dim) in [(3, 16), (3, 18), (2, 24), (2, 32), (12, 64), (2, 80)] {
            for fused in [true, false] {
                for tokens in [197, 7] {
                    for case in attention_cases(dtype, 2, heads, tokens, dim, fused, &mut rng) {
                        worst.record(dtype, run(&gpu, &case), &case.label);
                    }
                }
            }
        }
        // One token: m = n = k = 1 per head.
        for case in attention_cases(dtype, 3, 2, 1, 18, true, &mut rng) {
            worst.record(dtype, run(&gpu, &case), &case.label);
        }
    }
    worst.print("attention");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn patch_embedding_writes_token_rows_after_the_cls_row() {
    // tokens[b, 1 + i, :] = patches[b, i, :] · Wᵀ + bias + pos[1 + i, :]: C and R start one row
    // in, R broadcasts over the batch; row 0 of every image is left alone.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(14);
    let mut worst = Worst::default();
    let (batch, patches, patch_len, hidden) = (3, 196, 3 * 16 * 16, 96);
    let tokens = patches + 1;
    for dtype in DType::ALL {
        let problem = MatmulProblem::patch_projection(batch, patches, patch_len, hidden);
        let case = Case {
            label: format!("{dtype} patch embedding"),
            dtype,
            problem,
            tile: None,
            a: random(dtype, batch * patches * patch_len, -1.0..1.0, &mut rng),
            b: random(dtype, hidden * patch_len, -0.1..0.1, &mut rng),
            bias: Some(random(dtype, hidden, -1.0..1.0, &mut rng)),
            residual: Some(random(dtype, tokens * hidden, -1.0..1.0, &mut rng)),
            c_len: batch * tokens * hidden,
            shift: 0,
            residual_in_place: false,
            c_dtype: dtype,
            residual_dtype: dtype,
        };
        worst.record(dtype, run(&gpu, &case), &case.label);
    }
    worst.print("patch embedding");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_f32_residual_stream_matches_the_twin() {
    // Half-precision operands adding into an f32 residual stream (R and C f32), on every tile
    // (the 128x128 tile reads an f32 residual from global memory, the small one stages it),
    // every activation, plain, padded and misaligned rows, and in place; and the patch
    // projection writing f32 tokens with a half-precision residual (the position embeddings).
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let mut worst = Worst::default();
    let stream = |dtype: DType, mut case: Case, rng: &mut StdRng| {
        case.c_dtype = DType::F32;
        case.residual_dtype = DType::F32;
        // Residual values that f32 holds but f16/bf16 would round: the sum must keep them.
        if let Some(r) = case.residual.as_mut() {
            *r = random(DType::F32, r.len(), -2.0..2.0, rng);
        }
        case.label = format!("{} into an f32 stream", case.label);
        assert_ne!(dtype, DType::F32);
        case
    };
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for &tile in tiles_for(dtype) {
            for (shape, pad, shift) in [
                ((197, 198, 257), 0, 0),
                ((257, 1000, 197), 8, 0),
                ((7, 1, 64), 0, 1),
                ((1000, 768, 768), 0, 0),
            ] {
                let epilogue = Epilogue {
                    residual: true,
                    ..epilogue_number(number)
                };
                number += 1;
                let case = linear_case(
                    dtype,
                    shape,
                    WeightLayout::NK,
                    epilogue,
                    pad,
                    shift,
                    Some(tile),
                    &mut rng,
                );
                let case = stream(dtype, case, &mut rng);
                worst.record(dtype, run(&gpu, &case), &case.label);
            }
        }
        // In place: x += proj(h) with x in f32; then on the persistent Hopper tiles, with
        // enough tiles that each CTA walks several (3-4 on 132 SMs), so every barrier and
        // residual buffer goes round more than once.
        let epilogue = Epilogue {
            bias: true,
            residual: true,
            ..Epilogue::NONE
        };
        let mut in_place = vec![((197, 768, 768), None)];
        if gpu.compute_capability() == (9, 0) {
            let hopper = tiles_for(dtype).iter().filter(|t| t.program.uses_tma());
            in_place.extend(hopper.map(|&tile| ((9000, 768, 256), Some(tile))));
        }
        for (shape, tile) in in_place {
            let mut case = linear_case(
                dtype,
                shape,
                WeightLayout::NK,
                epilogue,
                0,
                0,
                tile,
                &mut rng,
            );
            case.problem.r = case.problem.c;
            let mut case = stream(dtype, case, &mut rng);
            case.residual = Some(random(DType::F32, case.c_len, -2.0..2.0, &mut rng));
            case.residual_in_place = true;
            case.label = format!("{} in place", case.label);
            worst.record(dtype, run(&gpu, &case), &case.label);
        }

        let (batch, patches, patch_len, hidden) = (2, 196, 3 * 16 * 16, 96);
        let case = Case {
            label: format!("{dtype} patch embedding into f32 tokens"),
            dtype,
            problem: MatmulProblem::patch_projection(batch, patches, patch_len, hidden),
            tile: None,
            a: random(dtype, batch * patches * patch_len, -1.0..1.0, &mut rng),
            b: random(dtype, hidden * patch_len, -0.1..0.1, &mut rng),
            bias: Some(random(dtype, hidden, -1.0..1.0, &mut rng)),
            residual: Some(random(dtype, (patches + 1) * hidden, -1.0..1.0, &mut rng)),
            c_len: batch * (patches + 1) * hidden,
            shift: 0,
            residual_in_place: false,
            c_dtype: DType::F32,
            residual_dtype: dtype,
        };
        worst.record(dtype, run(&gpu, &case), &case.label);
    }
    if gpu.compute_capability() == (9, 0) {
        assert!(
            gpu.loaded_kernels()
                .iter()
                .any(|k| k.name.contains("_tmapp_") && k.name.ends_with("_rf32_cf32")),
            "the ping-pong tile's residual variant was never loaded"
        );
    }
    worst.print("f32 residual stream");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn residual_may_be_the_output_itself() {
    // x = x + proj(h): the residual view is C's own view.
    // On sm_90 also the Hopper tiles with a 16-bit stream (R = C in the operands' type), with
    // enough tiles that each CTA walks several (3-4 on 132 SMs), so that every barrier and
    // residual buffer of the ping-pong tile's residual variant goes round more than once.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(15);
    let mut worst = Worst::default();
    for dtype in DType::ALL {
        let mut cases = vec![((197, 198, 257), 0, None), ((257, 1000, 7), 2, None)];
        if dtype != DType::F32 && gpu.compute_capability() == (9, 0) {
            let hopper = tiles_for(dtype).iter().filter(|t| t.program.uses_tma());
            cases.extend(hopper.map(|&tile| ((9000, 768, 256), 0, Some(tile))));
            cases.push(((9000, 768, 256), 0, None));
        }
        for (shape, pad, tile) in cases {
            let epilogue = Epilogue {
                bias: true,
                residual: true,
                ..Epilogue::NONE
            };
            let mut case = linear_case(
                dtype,
                shape,
                WeightLayout::NK,
                epilogue,
                pad,
                0,
                tile,
                &mut rng,
            );
            case.problem.r = case.problem.c;
            let (m, n) = (shape.0, shape.1);
            case.residual = Some(random(dtype, case.c_len, -2.0..2.0, &mut rng));
            case.residual_in_place = true;
            let tile = tile
                .map(|t| format!(" tile {}", t.name()))
                .unwrap_or_default();
            case.label = format!("{dtype} in-place residual {m}x{n} pad {pad}{tile}");
            worst.record(dtype, run(&gpu, &case), &case.label);
        }
    }
    if gpu.compute_capability() == (9, 0) {
        assert!(
            gpu.loaded_kernels()
                .iter()
                .any(|k| k.name.contains("_tmapp_") && k.name.ends_with("_res")),
            "the ping-pong tile's 16-bit residual variant was never loaded"
        );
    }
    worst.print("in-place residual");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn split_k_matches_the_twin_and_leaves_its_counters_ready() {
    // Shapes with fewer 64x64 tiles than SMs and K of at least 1536, which the launcher splits
    // along K: batch-1 fc2 into an f32 stream in place, a K that ends inside a split, [K, N]
    // weights, and an activation with a half-precision C. Each runs twice: a counter left
    // non-zero by the first launch would keep the second from writing C at all.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let mut worst = Worst::default();
    for dtype in [DType::F16, DType::BF16] {
        let small = *tiles_for(dtype)
            .iter()
            .find(|t| t.block_m == 64 && !t.program.is_hopper())
            .unwrap();
        let cases = [
            ((197, 768, 3072), WeightLayout::NK, Activation::None, true),
            ((100, 200, 2000), WeightLayout::NK, Activation::None, true),
            ((61, 100, 1999), WeightLayout::NK, Activation::Gelu, false),
            ((64, 96, 1600), WeightLayout::KN, Activation::None, false),
        ];
        for (shape, layout, activation, f32_stream) in cases {
            let epilogue = Epilogue {
                alpha: 1.0,
                bias: true,
                activation,
                residual: f32_stream,
            };
            for tile in [None, Some(small)] {
                let mut case = linear_case(dtype, shape, layout, epilogue, 0, 0, tile, &mut rng);
                if f32_stream {
                    case.problem.r = case.problem.c;
                    case.c_dtype = DType::F32;
                    case.residual_dtype = DType::F32;
                    case.residual = Some(random(DType::F32, case.c_len, -2.0..2.0, &mut rng));
                    case.residual_in_place = true;
                }
                case.label = format!("split-K {}", case.label);
                for _ in 0..2 {
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    worst.print("split-K");
}
