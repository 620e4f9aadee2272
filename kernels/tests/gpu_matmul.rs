//! The GPU matmul against its CPU twin (`vitrt_kernels::matmul::cpu::matmul`), on random data.
//!
//! Every run poisons the whole output buffer first (0xFF bytes: NaN in f32, f16 and bf16), then
//! checks that every element the problem writes holds the right value and that every other
//! byte, the gaps between strided rows and a guard region after the last one, still holds the
//! poison.
//!
//! Tolerances, as the largest `|gpu - twin| / max(|twin|, rms(twin) / 10)` over the output (the
//! floor keeps cancellation-sized values from dividing by ~0):
//! - f32: 1e-4. Both sides accumulate in fp32 (the GPU with CUDA-core FMA, no TF32); what is
//!   left is summation order, ~1e-6 here.
//! - f16: 2e-3; bf16: 1e-2. The twin runs in f32 on the same f16/bf16-rounded inputs, so the
//!   products and sums match to fp32 rounding; the difference is the one cast of the result to
//!   the storage type, at most half an ulp: 2^-11 = 4.9e-4 (f16) and 2^-8 = 3.9e-3 (bf16)
//!   relative. The bounds leave 4x and 2.5x room for fp32 summation order and for the
//!   activation's slope (at most 1.13).
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_matmul -- --ignored
//! --test-threads=1` (add `--nocapture` to see worst errors and the speed table).

use rand::{rngs::StdRng, Rng, SeedableRng};
use vitrt_kernels::cuda::{DevPtr, DeviceBuffer, Gpu};
use vitrt_kernels::matmul::cpu::{self, MatmulTiles};
use vitrt_kernels::matmul::{self, tiles_for, MatmulTile};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, Operand, WeightLayout};

const POISON: u8 = 0xFF;
const GUARD_BYTES: usize = 512;
/// The shapes every dimension is drawn from: tiny, prime-ish, around 197 (ViT tokens), large.
const RAGGED: [usize; 6] = [1, 7, 197, 198, 257, 1000];

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

#[test]
#[ignore = "needs a CUDA GPU"]
fn linear_layers_match_the_twin_on_ragged_shapes() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    // Every size of RAGGED appears as m, as n and as k, against small and large partners.
    let shapes = [
        (1, 1, 1),
        (1, 7, 197),
        (7, 1, 1000),
        (7, 257, 7),
        (197, 198, 257),
        (198, 197, 7),
        (257, 1000, 1),
        (1000, 257, 198),
        (7, 1000, 257),
        (257, 7, 198),
        (198, 1, 1000),
        (1, 257, 198),
        (197, 1000, 197),
        (1000, 198, 257),
        (1000, 1000, 1000),
    ];
    for &(m, n, k) in &shapes {
        assert!([m, n, k].iter().all(|d| RAGGED.contains(d)));
    }
    let mut worst = Worst::default();
    let mut number = 0;
    for dtype in DType::ALL {
        for layout in [WeightLayout::NK, WeightLayout::KN] {
            for &shape in &shapes {
                // Plain rows; padded rows and offsets (16-byte copies off, gaps in C); then
                // misaligned base pointers.
                let (pad, shift) = [(0, 0), (5, 0), (0, 1)][number % 3];
                let case = linear_case(
                    dtype,
                    shape,
                    layout,
                    epilogue_number(number),
                    pad,
                    shift,
                    None,
                    &mut rng,
                );
                worst.record(dtype, run(&gpu, &case), &case.label);
                number += 1;
            }
        }
    }
    worst.print("linear");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_tile_shape_matches_the_twin() {
    // The launcher's choice covers only some tiles on the shapes above; force each one, with
    // the whole epilogue, on plain and padded rows. (Rows that rule out 16-byte copies send
    // every f16/bf16 tile to the small one; the other tests cover that path.)
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(12);
    let mut worst = Worst::default();
    let full = Epilogue {
        alpha: 0.5,
        bias: true,
        activation: Activation::Gelu,
        residual: true,
    };
    for dtype in DType::ALL {
        for &tile in tiles_for(dtype) {
            for layout in [WeightLayout::NK, WeightLayout::KN] {
                for (shape, pad) in [((197, 198, 257), 0), ((257, 1000, 197), 8), ((7, 1, 64), 0)] {
                    let case =
                        linear_case(dtype, shape, layout, full, pad, 0, Some(tile), &mut rng);
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    worst.print("tiles");
}

/// One unit in the last place of `v` stored as `dtype` (16-bit types only), with the smallest
/// subnormal's spacing as the floor.
fn ulp(dtype: DType, v: f64) -> f64 {
    let (mantissa_bits, min_exponent) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 => unreachable!("16-bit outputs only"),
    };
    let exponent = (v.abs().log2().floor() as i32).max(min_exponent);
    2f64.powi(exponent - mantissa_bits)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn activations_into_16_bit_outputs_are_within_an_ulp_of_exact() {
    // The epilogues of 16-bit outputs compute GELU with an approximate erf (Abramowitz-Stegun
    // 7.1.26 on MUFU operations) and SiLU/QuickGELU with approximate exp and reciprocal. The
    // twin tests bound errors relative to the output's scale, which cannot see a tail value
    // (GELU(-4) = -1.3e-4) gone wrong. Here every tile computes act(x_m + y_n) on a dense
    // sweep of x in [-10, 10] (A[m] = (x_m, 1, 0...), B[n] = (1, y_n, 0...): exact sums), and
    // each output must lie within one ulp of the exact activation rounded to nothing, plus
    // 1e-6 absolute for the approximations' own error (A-S: 1.5e-7 of erf).
    let gpu = gpu();
    let (m, n, k) = (2048usize, 128usize, 64usize);
    for dtype in [DType::F16, DType::BF16] {
        let xs: Vec<f32> = (0..m)
            .map(|i| dtype.round(-10.0 + 20.0 * i as f32 / (m - 1) as f32))
            .collect();
        let ys: Vec<f32> = (0..n)
            .map(|j| dtype.round(0.01 * j as f32 / n as f32))
            .collect();
        let mut a = vec![0.0f32; m * k];
        for (i, &x) in xs.iter().enumerate() {
            a[i * k] = x;
            a[i * k + 1] = 1.0;
        }
        let mut b = vec![0.0f32; n * k];
        for (j, &y) in ys.iter().enumerate() {
            b[j * k] = 1.0;
            b[j * k + 1] = y;
        }
        let a_dev = upload(&gpu, dtype, &a, 0);
        let b_dev = upload(&gpu, dtype, &b, 0);
        let c_buffer = gpu.alloc(m * n * dtype.size_bytes()).unwrap();
        let c_view = c_buffer.view(0, m * n, dtype).unwrap();
        for activation in [
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::QuickGelu,
            Activation::Silu,
        ] {
            for &tile in tiles_for(dtype) {
                if !tile.runs_on(gpu.compute_capability()) {
                    continue;
                }
                let problem = MatmulProblem {
                    batch: 1,
                    heads: 1,
                    m,
                    n,
                    k,
                    a: strided(k, 0, 0),
                    b: strided(k, 0, 0),
                    b_layout: WeightLayout::NK,
                    c: strided(n, 0, 0),
                    r: strided(n, 0, 0),
                    epilogue: Epilogue {
                        alpha: 1.0,
                        bias: false,
                        activation,
                        residual: false,
                    },
                };
                matmul::gpu::matmul_with_tile(
                    &gpu, dtype, &problem, tile, a_dev.view, b_dev.view, None, None, c_view,
                )
                .unwrap_or_else(|e| panic!("{dtype} {activation:?} tile {}: {e}", tile.name()));
                let mut bytes = vec![0u8; m * n * dtype.size_bytes()];
                gpu.download(&c_buffer, 0, &mut bytes).unwrap();
                let got = dtype.decode(&bytes);
                let mut worst = (0.0f64, 0.0f32, 0.0f64, 0.0f32);
                for (i, &x) in xs.iter().enumerate() {
                    for (j, &y) in ys.iter().enumerate() {
                        let v = x + y;
                        let exact = activation.apply(v) as f64;
                        let g = got[i * n + j] as f64;
                        let allowed = ulp(dtype, exact) + 1e-6;
                        let ratio = (g - exact).abs() / allowed;
                        if ratio > worst.0 || ratio.is_nan() {
                            worst = (ratio, v, exact, got[i * n + j]);
                        }
                    }
                }
                let (ratio, v, exact, g) = worst;
                println!(
                    "{dtype} {activation:?} tile {}: worst {ratio:.2} of the allowance (x = {v}: exact {exact:e}, got {g:e})",
                    tile.name()
                );
                assert!(
                    ratio <= 1.0,
                    "{dtype} {activation:?} tile {}: at x = {v} got {g:e}, exact {exact:e} (more than an ulp + 1e-6 away)",
                    tile.name()
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hopper_tiles_match_the_twin() {
    // The wgmma tiles take only 16-byte aligned rows of [N, K] weights, so their shapes keep
    // every row stride and A/B offset a multiple of 8 elements (pads of 16 and 32 offset A by
    // pad / 2) while M, N and K stay ragged: K past the last whole 64-wide k-tile, N inside the
    // last column tile, M inside the last row tile, padded rows, C and residual views that rule
    // out vector epilogues, every epilogue, C and residual in the operands' type or in f32.
    let gpu = gpu();
    if gpu.compute_capability() != (9, 0) {
        eprintln!("SKIPPED: the Hopper tiles need an sm_90 GPU");
        return;
    }
    let mut rng = StdRng::seed_from_u64(19);
    let mut worst = Worst::default();
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for &tile in tiles_for(dtype).iter().filter(|t| t.program.is_hopper()) {
            for (shape, pad) in [
                ((197, 200, 264), 0),
                ((257, 1000, 200), 32),
                ((1, 8, 8), 0),
                ((300, 2304, 768), 0),
                ((129, 200, 3072), 16),
                ((64, 64, 0), 0),
            ] {
                for f32_stream in [false, true] {
                    let epilogue = epilogue_number(number);
                    number += 1;
                    let mut case = linear_case(
                        dtype,
                        shape,
                        WeightLayout::NK,
                        epilogue,
                        pad,
                        0,
                        Some(tile),
                        &mut rng,
                    );
                    if f32_stream && epilogue.residual {
                        case.c_dtype = DType::F32;
                        case.residual_dtype = DType::F32;
                        if let Some(r) = case.residual.as_mut() {
                            *r = random(DType::F32, r.len(), -2.0..2.0, &mut rng);
                        }
                        case.label = format!("{} into an f32 stream", case.label);
                    }
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    let loaded = gpu.loaded_kernels();
    assert!(
        loaded.iter().any(|k| k.name.contains("_wg_")),
        "no wgmma instantiation was loaded: the forced Hopper tiles fell back to mma.sync"
    );
    worst.print("hopper tiles");
}
