//! The layernorm-folded matmul (`vitrt_kernels::matmul::gpu::matmul_layernorm`, the ping-pong
//! program's layernorm entry) against its CPU twin (`matmul::cpu::matmul_layernorm`), and
//! against the pair of kernels it replaces (our layernorm, then our matmul with the unfolded
//! weights) on the GPU; and the producer of its row statistics
//! (`matmul::gpu::matmul_with_row_statistics`, the residual matmul that writes x): its C equal
//! bit for bit to the plain matmul's on every tile, its statistics against the twin's
//! (`matmul::cpu::row_statistics`) of the device's C, and the whole chain, producer then
//! layernorm matmul, against the twin and the unfolded pair. Where a test has no producer, the
//! row statistics are the twin's of x, uploaded. Operands like a ViT block's: rows of x uniform in [-2, 2], some shifted
//! by a mean offset (8 or 50) to exercise the statistics under a large mean; W in [-0.05, 0.05], gamma in
//! [0.5, 1.5], beta and b in [-0.5, 0.5], folded by `matmul::layernorm_fold` and rounded to the
//! 16-bit type as the runtime stores them. Every output is poisoned first (0xFF bytes, NaN in
//! f16 and bf16) between guard regions that must still hold the poison afterwards.
//!
//! Tolerance against the twin, per element: |gpu - twin| <= tol · max(1, |twin|), tol 4e-3 for
//! f16 and 2e-2 for bf16. The two see the same 16-bit operands and differ only by (a) the
//! order of the f32 sums (the tensor core's accumulation against the twin's tiles; the row statistics
//! are the same formulas in the same order on both, up to rsqrtf), which the epilogue's cancellation
//! mean · cs[n] - acc amplifies by rstd: at most about 2^-24 · √K · rstd · Σ_k |x_k · W'[n, k]|,
//! below 1e-3 here even on rows of mean 50; (b) rsqrtf's 2 ulp and the 16-bit epilogue's
//! activation (1e-6 absolute); (c) the store's rounding, which may land one ulp apart where
//! the two values straddle a rounding boundary: 2^-10 (f16) or 2^-7 (bf16) of the value. The
//! tolerance is several times their sum (four f16 ulps, two and a half bf16 ulps at 1; on an
//! H200 the worst difference seen was one ulp), and a layout mistake, a lost k-step or a wrong
//! row's statistics errs by a sizeable part of |twin| (O(1) here) and fails it.
//!
//! Folded against unfolded (both on the GPU) adds the folding's roundings on each path: W' and
//! b' in the 16-bit type on one, the layernorm's output y in it on the other, each about
//! u · √K · |y| · |W| ≈ 2e-3 (bf16, u = 2^-8) per element, with extremes over 10^7 outputs a
//! few times that, and one ulp of the output: tol 1e-2 (f16) and 3e-2 (bf16) · max(1, |v|).
//!
//! Run on an H100 or H200: `cargo test --release -p vitrt-kernels --test gpu_matmul_layernorm
//! -- --ignored --test-threads=1 --nocapture` (prints each case's worst error as a share of its
//! tolerance).

mod common;

use common::{new_gpu, upload, Poisoned};
use rand::{rngs::StdRng, Rng, SeedableRng};
use vitrt_kernels::cuda::{DevPtr, Gpu, KernelError};
use vitrt_kernels::layernorm::gpu as layernorm_gpu;
use vitrt_kernels::matmul::layernorm_fold::{column_sums, fold_bias, fold_weight};
use vitrt_kernels::matmul::{
    cpu, gpu as matmul_gpu, layernorm_matmul_support, row_statistics_support,
    LayernormMatmulProblem, MatmulTile, LAYERNORM_TILES, ROW_STATISTICS_TILES,
};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem};

const EPS: f32 = 1e-6;

/// One layer's host operands: the raw rows, the model's unfolded parameters (f32, W and b
/// rounded to the 16-bit type as a checkpoint holds them), and the folded ones.
struct Case {
    label: String,
    dtype: DType,
    p: LayernormMatmulProblem,
    x: Vec<f32>,
    weight: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    bias: Vec<f32>,
    folded_weight: Vec<f32>,
    folded_bias: Vec<f32>,
    column_sums: Vec<f32>,
}

impl Case {
    /// Every third row of x is shifted by `offset`.
    fn new(dtype: DType, p: LayernormMatmulProblem, offset: f32, rng: &mut StdRng) -> Case {
        let k = p.k;
        let x: Vec<f32> = (0..p.m * k)
            .map(|i| {
                let shift = if (i / k) % 3 == 1 { offset } else { 0.0 };
                dtype.round(rng.random_range(-2.0f32..2.0) + shift)
            })
            .collect();
        Case::with_x(dtype, p, x, &format!("mean offset {offset}"), rng)
    }

    /// A case on rows `x` given (in `dtype` already), random layer parameters.
    fn with_x(
        dtype: DType,
        p: LayernormMatmulProblem,
        x: Vec<f32>,
        what: &str,
        rng: &mut StdRng,
    ) -> Case {
        let (m, n, k) = (p.m, p.n, p.k);
        let uniform = |len: usize, lo: f32, hi: f32, rng: &mut StdRng| -> Vec<f32> {
            (0..len).map(|_| rng.random_range(lo..hi)).collect()
        };
        let round = |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| dtype.round(x)).collect() };
        let weight = round(uniform(n * k, -0.05, 0.05, rng));
        let gamma = uniform(k, 0.5, 1.5, rng);
        let beta = uniform(k, -0.5, 0.5, rng);
        let bias = round(uniform(n, -0.5, 0.5, rng));
        let folded_weight = round(fold_weight(&weight, &gamma, n, k));
        let folded_bias = round(fold_bias(&weight, &beta, Some(&bias), n, k));
        let column_sums = column_sums(&folded_weight, n, k);
        Case {
            label: format!("{m}x{n}x{k} {dtype} {} {what}", p.activation.short_name()),
            dtype,
            p,
            x,
            weight,
            gamma,
            beta,
            bias,
            folded_weight,
            folded_bias,
            column_sums,
        }
    }

    fn twin(&self) -> Vec<f32> {
        let p = &self.p;
        let mut out = vec![f32::NAN; p.m * p.n];
        cpu::matmul_layernorm(
            p,
            &self.x,
            &self.folded_weight,
            &self.folded_bias,
            &self.column_sums,
            &mut out,
        );
        out.into_iter().map(|v| self.dtype.round(v)).collect()
    }

    /// The twin's row statistics of x (`[K / 64][M]` f32 pairs).
    fn row_stats(&self) -> Vec<f32> {
        let p = &self.p;
        let mut stats = vec![f32::NAN; p.row_stats_len()];
        cpu::row_statistics(&self.x, p.m, p.k, &mut stats);
        stats
    }

    /// The folded layer on the GPU (`tile` forced, else the launcher's), on x and the twin's
    /// row statistics of it, uploaded.
    fn folded(&self, gpu: &Gpu, tile: Option<MatmulTile>) -> Vec<f32> {
        let (_x, x) = upload(gpu, self.dtype, &self.x, 0);
        let (_s, row_stats) = upload(gpu, DType::F32, &self.row_stats(), 0);
        self.folded_on(gpu, tile, x, row_stats)
    }

    /// The folded layer on the GPU on device rows `x` (holding self.x) and their row
    /// statistics `row_stats`.
    fn folded_on(
        &self,
        gpu: &Gpu,
        tile: Option<MatmulTile>,
        x: DevPtr,
        row_stats: DevPtr,
    ) -> Vec<f32> {
        let (p, dtype) = (&self.p, self.dtype);
        let (_w, w) = upload(gpu, dtype, &self.folded_weight, 0);
        let (_b, bias) = upload(gpu, dtype, &self.folded_bias, 0);
        let (_cs, cs) = upload(gpu, DType::F32, &self.column_sums, 0);
        let out = Poisoned::new(gpu, dtype, p.m * p.n, 0);
        match tile {
            Some(tile) => matmul_gpu::matmul_layernorm_with_tile(
                gpu,
                dtype,
                p,
                tile,
                x,
                row_stats,
                w,
                bias,
                cs,
                out.view(),
            ),
            None => {
                matmul_gpu::matmul_layernorm(gpu, dtype, p, x, row_stats, w, bias, cs, out.view())
            }
        }
        .unwrap_or_else(|e| panic!("{}: {e}", self.label));
        gpu.synchronize().unwrap();
        out.read(gpu, &self.label)
    }

    /// Our layernorm kernel, then our matmul with the unfolded W and b, on the GPU.
    fn unfolded(&self, gpu: &Gpu) -> Vec<f32> {
        let (p, dtype) = (&self.p, self.dtype);
        let (_x, x) = upload(gpu, dtype, &self.x, 0);
        let (_g, gamma) = upload(gpu, DType::F32, &self.gamma, 0);
        let (_be, beta) = upload(gpu, DType::F32, &self.beta, 0);
        let (_w, w) = upload(gpu, dtype, &self.weight, 0);
        let (_b, bias) = upload(gpu, dtype, &self.bias, 0);
        let y = Poisoned::new(gpu, dtype, p.m * p.k, 0);
        let out = Poisoned::new(gpu, dtype, p.m * p.n, 0);
        layernorm_gpu::layernorm(gpu, dtype, x, gamma, beta, p.m, p.k, p.eps, y.view())
            .unwrap_or_else(|e| panic!("{} layernorm: {e}", self.label));
        let product = MatmulProblem::linear(
            p.m,
            p.n,
            p.k,
            Epilogue {
                bias: true,
                activation: p.activation,
                ..Epilogue::NONE
            },
        );
        matmul_gpu::matmul(
            gpu,
            dtype,
            &product,
            y.view(),
            w,
            Some(bias),
            None,
            out.view(),
        )
        .unwrap_or_else(|e| panic!("{} matmul: {e}", self.label));
        gpu.synchronize().unwrap();
        out.read(gpu, &self.label)
    }
}

/// Checks |got - want| <= tol · max(1, |want|) everywhere (a NaN got: never written) and
/// returns the worst error as a share of its tolerance.
fn compare(label: &str, got: &[f32], want: &[f32], tol: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{label}");
    let mut worst = 0.0f64;
    let mut failures = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let allowed = tol * (w.abs() as f64).max(1.0);
        let d = (g as f64 - w as f64).abs();
        if d.is_nan() || d > allowed {
            if failures.len() < 8 {
                failures.push(format!("[{i}]: got {g}, want {w} (allowed {allowed:.3e})"));
            }
            worst = f64::INFINITY;
        } else {
            worst = worst.max(d / allowed);
        }
    }
    assert!(
        failures.is_empty(),
        "{label}: outputs out of tolerance:\n{}",
        failures.join("\n")
    );
    worst
}

fn twin_tolerance(dtype: DType) -> f64 {
    if dtype == DType::F16 {
        4e-3
    } else {
        2e-2
    }
}

fn unfolded_tolerance(dtype: DType) -> f64 {
    if dtype == DType::F16 {
        1e-2
    } else {
        3e-2
    }
}

fn problem(m: usize, n: usize, k: usize, activation: Activation) -> LayernormMatmulProblem {
    LayernormMatmulProblem {
        m,
        n,
        k,
        activation,
        eps: EPS,
    }
}

/// The shapes of the brief: ViT-B/16's qkv (no activation) and fc1 (GELU), and a narrow,
/// deep one with either activation.
const SHAPES: [(usize, usize, Activation); 4] = [
    (2304, 768, Activation::None),
    (3072, 768, Activation::Gelu),
    (64, 1024, Activation::None),
    (64, 1024, Activation::Gelu),
];

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_matches_the_twin() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(51);
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for m in [1, 197, 1000, 12608] {
            for &(n, k, activation) in &SHAPES {
                let offset = [0.0, 8.0, 50.0][number % 3];
                number += 1;
                let case = Case::new(dtype, problem(m, n, k, activation), offset, &mut rng);
                let worst = compare(
                    &case.label,
                    &case.folded(&gpu, None),
                    &case.twin(),
                    twin_tolerance(dtype),
                );
                println!("{:<56} twin: worst {worst:.3} of tolerance", case.label);
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_matches_the_twin_on_both_tiles() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(52);
    let mut number = 0;
    for tile in LAYERNORM_TILES {
        for &(m, n, k) in &[
            (197, 2304, 768),
            (1000, 64, 1024),
            (130, 3072, 768),
            (1, 72, 64),
        ] {
            let dtype = [DType::F16, DType::BF16][number % 2];
            let activation = [Activation::None, Activation::Gelu][(number / 2) % 2];
            number += 1;
            let case = Case::new(dtype, problem(m, n, k, activation), 50.0, &mut rng);
            let worst = compare(
                &case.label,
                &case.folded(&gpu, Some(tile)),
                &case.twin(),
                twin_tolerance(dtype),
            );
            println!(
                "{} {:<56} twin: worst {worst:.3} of tolerance",
                tile.name(),
                case.label
            );
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_matches_our_layernorm_then_matmul() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(53);
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for m in [1, 197, 1000, 12608] {
            for &(n, k, activation) in &SHAPES {
                let offset = [0.0, 8.0, 50.0][number % 3];
                number += 1;
                let case = Case::new(dtype, problem(m, n, k, activation), offset, &mut rng);
                let worst = compare(
                    &format!("{} folded against unfolded", case.label),
                    &case.folded(&gpu, None),
                    &case.unfolded(&gpu),
                    unfolded_tolerance(dtype),
                );
                println!("{:<56} unfolded: worst {worst:.3} of tolerance", case.label);
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_refuses_what_its_program_cannot_take_with_the_reason() {
    let gpu = new_gpu();
    let dtype = DType::BF16;
    let ok = problem(197, 64, 128, Activation::Gelu);
    assert_eq!(layernorm_matmul_support(&gpu, dtype, &ok), Ok(()));
    let unsupported = [
        (DType::F32, ok, "f16 or bf16"),
        (
            dtype,
            problem(197, 64, 96, Activation::None),
            "multiple of 64",
        ),
        (
            dtype,
            problem(197, 60, 128, Activation::None),
            "multiple of 8",
        ),
        (dtype, problem(197, 64, 128, Activation::Tanh), "Tanh"),
    ];
    for (dtype, p, reason) in unsupported {
        let e = layernorm_matmul_support(&gpu, dtype, &p).unwrap_err();
        assert!(e.contains(reason), "{e}");
    }
    let (m, n, k) = (ok.m, ok.n, ok.k);
    let zeros = |len: usize| vec![0.0f32; len];
    let (_x, x) = upload(&gpu, dtype, &zeros(m * k + 1), 0);
    let (_w, w) = upload(&gpu, dtype, &zeros(n * k), 0);
    let (_b, bias) = upload(&gpu, dtype, &zeros(n), 0);
    let (_cs, cs) = upload(&gpu, DType::F32, &zeros(n), 0);
    let (_s, stats) = upload(&gpu, DType::F32, &zeros(ok.row_stats_len()), 0);
    let out = Poisoned::new(&gpu, dtype, m * n, 0);
    let attempt_with = |x: DevPtr, stats: DevPtr, cs: DevPtr| -> String {
        match matmul_gpu::matmul_layernorm(&gpu, dtype, &ok, x, stats, w, bias, cs, out.view()) {
            Err(KernelError::InvalidArgument(e)) => e,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let attempt = |x: DevPtr, cs: DevPtr| attempt_with(x, stats, cs);
    // Row statistics too short, or not f32.
    let short_stats = DevPtr {
        len: ok.row_stats_len() - 1,
        ..stats
    };
    assert!(attempt_with(x, short_stats, cs).contains("row statistics"));
    assert!(attempt_with(x, bias, cs).contains("row statistics"));
    // x one element past a 16-byte boundary.
    let shifted = DevPtr {
        ptr: x.ptr + 2,
        len: m * k,
        ..x
    };
    assert!(attempt(shifted, cs).contains("16-byte"));
    // Column sums in the operands' type, and too few of them.
    assert!(attempt(x, bias).contains("column sums"));
    let short = DevPtr { len: n - 1, ..cs };
    assert!(attempt(x, short).contains("column sums"));
    // Nothing was written.
    gpu.synchronize().unwrap();
    let raw = out.read(&gpu, "refused");
    assert!(raw.iter().all(|v| v.is_nan()));
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_speed_report() {
    // ViT-B/16's qkv and fc1 at batch 1 to 256: the folded layer on the launcher's tile and on
    // each tile, our layernorm then our matmul, and that matmul alone, each the median of 50 CUDA-event timings
    // after 10 warm-ups, operands rotated through enough copies to miss L2.
    use vitrt_kernels::cuda::{copies_beyond_l2, Timer};
    let gpu = new_gpu();
    let timer = Timer {
        warmup: 10,
        reps: 50,
        spin_nanoseconds: 200_000,
    };
    let mut rng = StdRng::seed_from_u64(54);
    for dtype in [DType::BF16, DType::F16] {
        for (name, n, activation) in [
            ("qkv", 2304, Activation::None),
            ("fc1", 3072, Activation::Gelu),
        ] {
            for batch in [1, 8, 64, 256] {
                let (m, k) = (197 * batch, 768);
                let p = problem(m, n, k, activation);
                let bytes = (m * k + n * k + n) * dtype.size_bytes() + n * 4 + 2 * k * 4;
                let copies = copies_beyond_l2(bytes, gpu.l2_cache_bytes().unwrap());
                let values = |len: usize, scale: f32, rng: &mut StdRng| -> Vec<f32> {
                    (0..len).map(|_| rng.random_range(-scale..scale)).collect()
                };
                let (x, w, bias, cs, gamma, beta) = (
                    values(m * k, 4.0, &mut rng),
                    values(n * k, 0.05, &mut rng),
                    values(n, 0.5, &mut rng),
                    values(n, 1.0, &mut rng),
                    values(k, 1.5, &mut rng),
                    values(k, 0.5, &mut rng),
                );
                let set: Vec<_> = (0..copies)
                    .map(|_| {
                        (
                            upload(&gpu, dtype, &x, 0),
                            upload(&gpu, dtype, &w, 0),
                            upload(&gpu, dtype, &bias, 0),
                            upload(&gpu, DType::F32, &cs, 0),
                            upload(&gpu, DType::F32, &gamma, 0),
                            upload(&gpu, DType::F32, &beta, 0),
                            Poisoned::new(&gpu, dtype, m * k, 0),
                            Poisoned::new(&gpu, dtype, m * n, 0),
                        )
                    })
                    .collect();
                // The row statistics of x, as its producer would have written them.
                let mut x_rounded = x.clone();
                x_rounded.iter_mut().for_each(|v| *v = dtype.round(*v));
                let mut stats = vec![0.0f32; p.row_stats_len()];
                cpu::row_statistics(&x_rounded, m, k, &mut stats);
                let stats: Vec<_> = (0..copies)
                    .map(|_| upload(&gpu, DType::F32, &stats, 0))
                    .collect();
                let folded = |tile: Option<MatmulTile>| {
                    timer
                        .median_ms(&gpu, copies, |i| {
                            let (x, w, b, cs, _, _, _, out) = &set[i];
                            match tile {
                                Some(tile) => matmul_gpu::matmul_layernorm_with_tile(
                                    &gpu,
                                    dtype,
                                    &p,
                                    tile,
                                    x.1,
                                    stats[i].1,
                                    w.1,
                                    b.1,
                                    cs.1,
                                    out.view(),
                                ),
                                None => matmul_gpu::matmul_layernorm(
                                    &gpu,
                                    dtype,
                                    &p,
                                    x.1,
                                    stats[i].1,
                                    w.1,
                                    b.1,
                                    cs.1,
                                    out.view(),
                                ),
                            }
                        })
                        .unwrap()
                        .unwrap()
                };
                let product = MatmulProblem::linear(
                    m,
                    n,
                    k,
                    Epilogue {
                        bias: true,
                        activation,
                        ..Epilogue::NONE
                    },
                );
                let unfolded = timer
                    .median_ms(&gpu, copies, |i| {
                        let (x, w, b, _, g, be, y, out) = &set[i];
                        layernorm_gpu::layernorm(&gpu, dtype, x.1, g.1, be.1, m, k, EPS, y.view())?;
                        matmul_gpu::matmul(
                            &gpu,
                            dtype,
                            &product,
                            y.view(),
                            w.1,
                            Some(b.1),
                            None,
                            out.view(),
                        )
                    })
                    .unwrap()
                    .unwrap();
                let matmul_alone = timer
                    .median_ms(&gpu, copies, |i| {
                        let (x, w, b, _, _, _, _, out) = &set[i];
                        matmul_gpu::matmul(
                            &gpu,
                            dtype,
                            &product,
                            x.1,
                            w.1,
                            Some(b.1),
                            None,
                            out.view(),
                        )
                    })
                    .unwrap()
                    .unwrap();
                let chosen = matmul_gpu::layernorm_matmul_tile_for(&gpu, &p).unwrap();
                let (ours, wide, narrow) = (
                    folded(None),
                    folded(Some(LAYERNORM_TILES[0])),
                    folded(Some(LAYERNORM_TILES[1])),
                );
                println!(
                    "SPEED {dtype:<4} {name}/b{batch:<3} folded {:.4} ms ({}; wide {wide:.4}, \
                     narrow {narrow:.4})  layernorm+matmul {unfolded:.4} ms (matmul alone \
                     {matmul_alone:.4})  speed-up {:.2}x",
                    ours,
                    chosen.name(),
                    unfolded / ours
                );
            }
        }
    }
}

/// One producer run's operands: x = A · Bᵀ + bias + R at `m` x 768 x `k`, every third row of R
/// shifted by 50 (a residual stream's large means), in `dtype`.
struct Producer {
    dtype: DType,
    p: MatmulProblem,
    a: (vitrt_kernels::cuda::DeviceBuffer, DevPtr),
    b: (vitrt_kernels::cuda::DeviceBuffer, DevPtr),
    bias: (vitrt_kernels::cuda::DeviceBuffer, DevPtr),
    residual: (vitrt_kernels::cuda::DeviceBuffer, DevPtr),
}

impl Producer {
    fn new(gpu: &Gpu, dtype: DType, m: usize, k: usize, rng: &mut StdRng) -> Producer {
        let n = 768;
        let values = |len: usize, scale: f32, rng: &mut StdRng| -> Vec<f32> {
            (0..len)
                .map(|_| dtype.round(rng.random_range(-scale..scale)))
                .collect()
        };
        let a = values(m * k, 1.0, rng);
        let b = values(n * k, 0.05, rng);
        let bias = values(n, 0.5, rng);
        let residual: Vec<f32> = (0..m * n)
            .map(|i| {
                let shift = if (i / n) % 3 == 1 { 50.0 } else { 0.0 };
                dtype.round(rng.random_range(-2.0f32..2.0) + shift)
            })
            .collect();
        Producer {
            dtype,
            p: MatmulProblem::linear(
                m,
                n,
                k,
                Epilogue {
                    bias: true,
                    residual: true,
                    ..Epilogue::NONE
                },
            ),
            a: upload(gpu, dtype, &a, 0),
            b: upload(gpu, dtype, &b, 0),
            bias: upload(gpu, dtype, &bias, 0),
            residual: upload(gpu, dtype, &residual, 0),
        }
    }

    /// C from the plain matmul on `tile` (the launcher's for `None`).
    fn plain(&self, gpu: &Gpu, tile: Option<MatmulTile>) -> Vec<f32> {
        let p = &self.p;
        let c = Poisoned::new(gpu, self.dtype, p.m * p.n, 0);
        let args = (
            self.a.1,
            self.b.1,
            Some(self.bias.1),
            Some(self.residual.1),
            c.view(),
        );
        match tile {
            Some(tile) => matmul_gpu::matmul_with_tile(
                gpu, self.dtype, p, tile, args.0, args.1, args.2, args.3, args.4,
            ),
            None => matmul_gpu::matmul(gpu, self.dtype, p, args.0, args.1, args.2, args.3, args.4),
        }
        .unwrap();
        gpu.synchronize().unwrap();
        c.read(gpu, "plain producer")
    }

    /// C and the row statistics from the row-statistics matmul on `tile` (the launcher's for
    /// `None`), with the device buffers kept for the consumer.
    fn with_statistics(
        &self,
        gpu: &Gpu,
        tile: Option<MatmulTile>,
    ) -> (Vec<f32>, Vec<f32>, Poisoned, Poisoned) {
        let p = &self.p;
        let c = Poisoned::new(gpu, self.dtype, p.m * p.n, 0);
        let stats = Poisoned::new(gpu, DType::F32, 2 * (p.n / 64) * p.m, 0);
        let (a, b, bias, r) = (self.a.1, self.b.1, Some(self.bias.1), self.residual.1);
        match tile {
            Some(tile) => matmul_gpu::matmul_with_row_statistics_with_tile(
                gpu,
                self.dtype,
                p,
                tile,
                a,
                b,
                bias,
                r,
                c.view(),
                stats.view(),
            ),
            None => matmul_gpu::matmul_with_row_statistics(
                gpu,
                self.dtype,
                p,
                a,
                b,
                bias,
                r,
                c.view(),
                stats.view(),
            ),
        }
        .unwrap();
        gpu.synchronize().unwrap();
        let (c_values, stats_values) =
            (c.read(gpu, "producer C"), stats.read(gpu, "row statistics"));
        (c_values, stats_values, c, stats)
    }
}

/// Checks the device's row statistics against the twin's of the device's C: means within
/// 1e-5 of the block's largest magnitude, m2 within 1e-4 of m2 plus 1e-6 of 64 · magnitude².
fn check_row_statistics(label: &str, c: &[f32], m: usize, n: usize, got: &[f32]) {
    let mut want = vec![f32::NAN; 2 * (n / 64) * m];
    cpu::row_statistics(c, m, n, &mut want);
    for b in 0..n / 64 {
        for r in 0..m {
            let block = &c[r * n + b * 64..r * n + b * 64 + 64];
            let scale = block.iter().map(|v| v.abs() as f64).fold(1e-30, f64::max);
            let i = 2 * (b * m + r);
            let (gm, wm) = (got[i] as f64, want[i] as f64);
            let (gq, wq) = (got[i + 1] as f64, want[i + 1] as f64);
            assert!(
                (gm - wm).abs() <= 1e-5 * scale,
                "{label}: block {b} row {r}: mean {gm} vs the twin's {wm}"
            );
            assert!(
                (gq - wq).abs() <= 1e-4 * wq + 64e-6 * scale * scale,
                "{label}: block {b} row {r}: m2 {gq} vs the twin's {wq}"
            );
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn row_statistics_producer_writes_the_plain_c_and_the_twins_statistics_on_every_tile() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(55);
    for dtype in [DType::F16, DType::BF16] {
        for m in [1, 197, 12608] {
            for k in [768, 3072] {
                let producer = Producer::new(&gpu, dtype, m, k, &mut rng);
                assert_eq!(row_statistics_support(&gpu, dtype, &producer.p), Ok(()));
                let chosen = matmul_gpu::row_statistics_tile_for(
                    &gpu,
                    dtype,
                    &producer.p,
                    producer.residual.1,
                    producer.residual.1,
                )
                .unwrap();
                let tiles = std::iter::once((None, chosen))
                    .chain(ROW_STATISTICS_TILES.iter().map(|&t| (Some(t), t)));
                for (forced, tile) in tiles {
                    let label = format!(
                        "{m}x768x{k} {dtype} {}{}",
                        tile.name(),
                        if forced.is_none() {
                            " (launcher's)"
                        } else {
                            ""
                        }
                    );
                    let plain = producer.plain(&gpu, Some(tile));
                    let (c, stats, _c, _stats) = producer.with_statistics(&gpu, forced);
                    let differing = plain
                        .iter()
                        .zip(&c)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    assert_eq!(differing, 0, "{label}: C differs from the plain matmul's");
                    check_row_statistics(&label, &c, m, 768, &stats);
                    println!("{label:<48} C bit for bit, row statistics within tolerance");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn layernorm_matmul_on_the_producers_statistics_matches_the_twin_and_the_unfolded_pair() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(56);
    for dtype in [DType::F16, DType::BF16] {
        for m in [1, 197, 12608] {
            for k_producer in [768, 3072] {
                let producer = Producer::new(&gpu, dtype, m, k_producer, &mut rng);
                let (x, _, x_device, stats_device) = producer.with_statistics(&gpu, None);
                for (n, activation) in [(2304, Activation::None), (3072, Activation::Gelu)] {
                    let case = Case::with_x(
                        dtype,
                        problem(m, n, 768, activation),
                        x.clone(),
                        &format!("on a producer's x (K {k_producer})"),
                        &mut rng,
                    );
                    let folded = case.folded_on(&gpu, None, x_device.view(), stats_device.view());
                    let worst_twin =
                        compare(&case.label, &folded, &case.twin(), twin_tolerance(dtype));
                    let worst_unfolded = compare(
                        &format!("{} folded against unfolded", case.label),
                        &folded,
                        &case.unfolded(&gpu),
                        unfolded_tolerance(dtype),
                    );
                    println!(
                        "{:<64} twin: worst {worst_twin:.3}, unfolded: worst {worst_unfolded:.3} of tolerance",
                        case.label
                    );
                }
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn row_statistics_producer_refuses_what_it_cannot_take_with_the_reason() {
    let gpu = new_gpu();
    let dtype = DType::BF16;
    let with_residual = |m: usize, n: usize, k: usize, residual: bool| {
        MatmulProblem::linear(
            m,
            n,
            k,
            Epilogue {
                bias: true,
                residual,
                ..Epilogue::NONE
            },
        )
    };
    assert_eq!(
        row_statistics_support(&gpu, dtype, &with_residual(197, 768, 768, true)),
        Ok(())
    );
    for (dtype, p, reason) in [
        (
            DType::F32,
            with_residual(197, 768, 768, true),
            "f16 or bf16",
        ),
        (dtype, with_residual(197, 768, 768, false), "residual"),
        (dtype, with_residual(197, 72, 768, true), "multiple of 64"),
    ] {
        let e = row_statistics_support(&gpu, dtype, &p).unwrap_err();
        assert!(e.contains(reason), "{e}");
    }
    let mut rng = StdRng::seed_from_u64(57);
    let producer = Producer::new(&gpu, dtype, 197, 768, &mut rng);
    let p = &producer.p;
    let c = Poisoned::new(&gpu, dtype, p.m * p.n, 0);
    let stats = Poisoned::new(&gpu, DType::F32, 2 * (p.n / 64) * p.m, 0);
    let attempt = |stats: DevPtr| -> String {
        match matmul_gpu::matmul_with_row_statistics(
            &gpu,
            dtype,
            p,
            producer.a.1,
            producer.b.1,
            Some(producer.bias.1),
            producer.residual.1,
            c.view(),
            stats,
        ) {
            Err(KernelError::InvalidArgument(e)) => e,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let short = DevPtr {
        len: 2 * (p.n / 64) * p.m - 1,
        ..stats.view()
    };
    assert!(attempt(short).contains("row statistics"));
    assert!(attempt(c.view()).contains("row statistics"));
    gpu.synchronize().unwrap();
    assert!(c.read(&gpu, "refused").iter().all(|v| v.is_nan()));
    assert!(stats.read(&gpu, "refused").iter().all(|v| v.is_nan()));
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn row_statistics_producer_speed_report() {
    // ViT-B/16's proj (K 768) and fc2 (K 3072) into a 16-bit stream at batch 1, 64 and 256:
    // the plain residual matmul and the row-statistics one on the same tile (the latter's
    // launcher's), each the median of 50 CUDA-event timings after 10 warm-ups, operands
    // rotated through enough copies to miss L2: the producer's cost of the statistics.
    use vitrt_kernels::cuda::{copies_beyond_l2, Timer};
    let gpu = new_gpu();
    let timer = Timer {
        warmup: 10,
        reps: 50,
        spin_nanoseconds: 200_000,
    };
    let mut rng = StdRng::seed_from_u64(58);
    for dtype in [DType::BF16, DType::F16] {
        for (name, k) in [("proj", 768), ("fc2", 3072)] {
            for batch in [1, 64, 256] {
                let m = 197 * batch;
                let n = 768;
                let bytes = (m * k + n * k + n + 2 * m * n) * dtype.size_bytes();
                let copies = copies_beyond_l2(bytes, gpu.l2_cache_bytes().unwrap());
                let set: Vec<_> = (0..copies)
                    .map(|_| {
                        let producer = Producer::new(&gpu, dtype, m, k, &mut rng);
                        let c = Poisoned::new(&gpu, dtype, m * n, 0);
                        let stats = Poisoned::new(&gpu, DType::F32, 2 * (n / 64) * m, 0);
                        (producer, c, stats)
                    })
                    .collect();
                let (first, _, _) = &set[0];
                let tile = matmul_gpu::row_statistics_tile_for(
                    &gpu,
                    dtype,
                    &first.p,
                    first.residual.1,
                    first.residual.1,
                )
                .unwrap();
                let plain = timer
                    .median_ms(&gpu, copies, |i| {
                        let (pr, c, _) = &set[i];
                        matmul_gpu::matmul_with_tile(
                            &gpu,
                            dtype,
                            &pr.p,
                            tile,
                            pr.a.1,
                            pr.b.1,
                            Some(pr.bias.1),
                            Some(pr.residual.1),
                            c.view(),
                        )
                    })
                    .unwrap()
                    .unwrap();
                let with_statistics = timer
                    .median_ms(&gpu, copies, |i| {
                        let (pr, c, stats) = &set[i];
                        matmul_gpu::matmul_with_row_statistics(
                            &gpu,
                            dtype,
                            &pr.p,
                            pr.a.1,
                            pr.b.1,
                            Some(pr.bias.1),
                            pr.residual.1,
                            c.view(),
                            stats.view(),
                        )
                    })
                    .unwrap()
                    .unwrap();
                println!(
                    "SPEED {dtype:<4} {name}/b{batch:<3} {}: plain {plain:.4} ms, with row \
                     statistics {with_statistics:.4} ms ({:.3}x)",
                    tile.name(),
                    with_statistics / plain
                );
            }
        }
    }
}
