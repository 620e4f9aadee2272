//! The matmul tests' harness (gpu_matmul.rs, gpu_matmul_views.rs, gpu_matmul_speed.rs,
//! gpu_tuning.rs): one matmul `Case` run on the GPU and on its CPU twin
//! (`vitrt_kernels::matmul::cpu::matmul`), the checks of its output, and the cases the files
//! share (linear layers, attention's two products).
//!
//! Its helpers differ from the general ones of `common` beside it, and the matmul tests keep
//! theirs: `tolerance` is f64 (the scaled error of `run`), `random` takes a range, `upload`
//! returns an `Uploaded` that owns its buffer, `Worst` keeps the worst error per dtype, and C's
//! guard after the output is 512 bytes.
//!
//! `run` poisons the whole output buffer first (0xFF bytes: NaN in f32, f16 and bf16), then
//! checks that every element the problem writes holds the right value and that every other
//! byte, the gaps between strided rows and a guard region after the last one, still holds the
//! poison. Its tolerances are explained in gpu_matmul.rs's header.
//!
//! Every file uses only part of it.
#![allow(dead_code)]

use super::POISON;
use rand::{rngs::StdRng, Rng};
use vitrt_kernels::cuda::{DevPtr, DeviceBuffer, Gpu};
use vitrt_kernels::matmul::cpu::{self, MatmulTiles};
use vitrt_kernels::matmul::{self, MatmulTile};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, Operand, WeightLayout};

/// Bytes of poison after C's last element (`common::GUARD_BYTES` is 256).
const GUARD_BYTES: usize = 512;

pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        // One e4m3 rounding: 2^-4 of a value.
        DType::E4M3 => 6.25e-2,
    }
}

/// Uniform values in [lo, hi), already rounded to `dtype` so that the twin sees exactly what the
/// GPU reads.
pub fn random(dtype: DType, n: usize, range: std::ops::Range<f32>, rng: &mut StdRng) -> Vec<f32> {
    (0..n)
        .map(|_| dtype.round(rng.random_range(range.clone())))
        .collect()
}

/// Device copies of one input, `shift` elements into its buffer so the base address can be
/// misaligned on purpose.
pub struct Uploaded {
    pub _buffer: DeviceBuffer,
    pub view: DevPtr,
}

pub fn upload(gpu: &Gpu, dtype: DType, values: &[f32], shift: usize) -> Uploaded {
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
pub struct Case {
    pub label: String,
    pub dtype: DType,
    pub problem: MatmulProblem,
    /// Force a tile shape instead of letting the launcher choose.
    pub tile: Option<MatmulTile>,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub residual: Option<Vec<f32>>,
    /// Elements of C's buffer (at least the problem's extent; more leaves a tail to check).
    pub c_len: usize,
    /// Elements every input and output view starts into its buffer (misaligns base pointers).
    pub shift: usize,
    /// The residual is read from C itself (`x += f(x)` in place): C starts out holding it.
    pub residual_in_place: bool,
    /// Storage types of C and of the residual: `dtype`, or f32 for a residual stream kept in
    /// f32 (see `matmul::gpu::matmul`).
    pub c_dtype: DType,
    pub residual_dtype: DType,
}

/// The worst scaled error of one case; panics with the case's label on any failed check.
pub fn run(gpu: &Gpu, case: &Case) -> f64 {
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
pub struct Worst {
    by_dtype: Vec<(DType, f64, String)>,
}

impl Worst {
    pub fn record(&mut self, dtype: DType, err: f64, label: &str) {
        match self.by_dtype.iter_mut().find(|(d, _, _)| *d == dtype) {
            Some(entry) if entry.1 >= err => {}
            Some(entry) => *entry = (dtype, err, label.to_string()),
            None => self.by_dtype.push((dtype, err, label.to_string())),
        }
    }

    pub fn print(&self, test: &str) {
        for (dtype, err, label) in &self.by_dtype {
            println!(
                "{test}: worst {dtype} error {err:.2e} (tolerance {:.0e}) in {label}",
                tolerance(*dtype)
            );
        }
    }
}

/// An operand of `rows` x `cols` with `pad` extra elements per row and `offset` in front.
pub fn strided(cols: usize, pad: usize, offset: usize) -> Operand {
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
pub fn linear_case(
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
pub fn epilogue_number(i: usize) -> Epilogue {
    Epilogue {
        alpha: if i % 5 == 4 { 0.125 } else { 1.0 },
        bias: i.is_multiple_of(2),
        activation: Activation::EPILOGUE[(i / 4) % Activation::EPILOGUE.len()],
        residual: (i / 2).is_multiple_of(2),
    }
}

/// Q·Kᵀ and P·V for `heads` heads of `dim` over `tokens` tokens of `batch` images, reading Q,
/// K and V in place: from one fused [B, T, 3·hidden] activation, or from three [B, T, hidden]
/// ones.
pub fn attention_cases(
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
