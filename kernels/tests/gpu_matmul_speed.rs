//! The matmul's speed on ViT-B/16 shapes, per tile shape (a table printed with `--nocapture`),
//! and filling the kernel disk cache with every instantiation for a later GPU run. The
//! attention problems come from the matmul tests' harness (`common::matmul`).
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_matmul_speed --
//! --ignored --test-threads=1 --nocapture`.

mod common;

use common::matmul::{attention_cases, random};
use common::new_gpu;
use rand::{rngs::StdRng, SeedableRng};
use vitrt_kernels::cuda::{DeviceBuffer, Gpu, Timer};
use vitrt_kernels::matmul::{self, tiles_for, MatmulTile};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, Operand, WeightLayout};

/// Device buffers of random values for timing: A, B, bias, residual and C of one problem, all
/// in `dtype`, or (`stream`) the residual and C f32 and C the residual itself, as the model
/// adds into its residual stream.
struct TimedProblem {
    p: MatmulProblem,
    buffers: Vec<(DeviceBuffer, usize)>,
    stream: bool,
}

impl TimedProblem {
    fn new(
        gpu: &Gpu,
        dtype: DType,
        p: MatmulProblem,
        stream: bool,
        rng: &mut StdRng,
    ) -> TimedProblem {
        let (b_rows, b_cols) = match p.b_layout {
            WeightLayout::NK => (p.n, p.k),
            WeightLayout::KN => (p.k, p.n),
        };
        let lens = [
            p.a.extent(p.batch, p.heads, p.m, p.k),
            p.b.extent(p.batch, p.heads, b_rows, b_cols),
            p.n,
            p.r.extent(p.batch, p.heads, p.m, p.n),
            p.c.extent(p.batch, p.heads, p.m, p.n),
        ];
        let buffers = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let dtype = if stream && i >= 3 { DType::F32 } else { dtype };
                let buffer = gpu.alloc(len.max(1) * dtype.size_bytes()).unwrap();
                gpu.upload(
                    &buffer,
                    0,
                    &dtype.encode(&random(dtype, len, -1.0..1.0, rng)),
                )
                .unwrap();
                (buffer, len)
            })
            .collect();
        TimedProblem { p, buffers, stream }
    }

    /// Median device time of one launch, in ms: `tile` forced, or the launcher's choice.
    fn median_ms(&self, gpu: &Gpu, dtype: DType, tile: Option<MatmulTile>) -> f64 {
        let view = |i: usize| {
            let dtype = if self.stream && i >= 3 {
                DType::F32
            } else {
                dtype
            };
            self.buffers[i].0.view(0, self.buffers[i].1, dtype).unwrap()
        };
        let (a, b, bias, c) = (view(0), view(1), view(2), view(4));
        let r = if self.stream { c } else { view(3) };
        let timer = Timer {
            warmup: 10,
            reps: 30,
            spin_nanoseconds: 50_000,
        };
        timer
            .median_ms(gpu, 1, |_| match tile {
                Some(tile) => matmul::gpu::matmul_with_tile(
                    gpu,
                    dtype,
                    &self.p,
                    tile,
                    a,
                    b,
                    Some(bias),
                    Some(r),
                    c,
                ),
                None => matmul::gpu::matmul(gpu, dtype, &self.p, a, b, Some(bias), Some(r), c),
            })
            .unwrap()
            .expect("30 timed runs")
    }
}

/// The ViT-B/16 GEMMs in f16 (batch 64, batch 1 and batch 256, then batch-64 attention), with and without
/// their fused epilogues, timed with the launcher's tile choice and with every tile shape:
/// device time by CUDA events, 10 warm-up runs, median of 30. Not a pass/fail test: the table
/// says where the kernel stands. cuBLAS on an H200, batch 64: 615 / 531 / 608 / 655 TFLOP/s;
/// batch 1: 79 / 29 / 111 / 80 TFLOP/s.
#[test]
#[ignore = "needs a CUDA GPU; prints a speed table"]
fn matmul_speed_report() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let dtype = DType::F16;
    let linear = |m, n, k, activation, residual| {
        MatmulProblem::linear(
            m,
            n,
            k,
            Epilogue {
                alpha: 1.0,
                bias: true,
                activation,
                residual,
            },
        )
    };
    let mut problems = Vec::new();
    for (m, batch_label, cublas) in [
        (12608, "b64", Some([615.0, 531.0, 608.0, 655.0])),
        (197, "b1", Some([79.0, 29.0, 111.0, 80.0])),
        (50432, "b256", None),
    ] {
        let gemms = [
            ("qkv", linear(m, 2304, 768, Activation::None, false)),
            ("proj", linear(m, 768, 768, Activation::None, true)),
            ("fc1", linear(m, 3072, 768, Activation::Gelu, false)),
            ("fc2", linear(m, 768, 3072, Activation::None, true)),
        ];
        for (i, (name, fused)) in gemms.into_iter().enumerate() {
            let reference = cublas.map(|c: [f64; 4]| c[i]);
            let plain = MatmulProblem {
                epilogue: Epilogue::NONE,
                ..fused
            };
            problems.push((
                format!("{name} {batch_label}"),
                "none",
                plain,
                reference,
                false,
            ));
            let epilogue = if fused.epilogue.residual {
                "bias+residual"
            } else if fused.epilogue.activation == Activation::Gelu {
                "bias+gelu"
            } else {
                "bias"
            };
            problems.push((
                format!("{name} {batch_label}"),
                epilogue,
                fused,
                reference,
                false,
            ));
            if fused.epilogue.residual {
                // What the model runs: in place on its f32 residual stream.
                problems.push((
                    format!("{name} {batch_label}"),
                    "bias+res f32",
                    fused,
                    reference,
                    true,
                ));
            }
        }
    }
    // Attention at batch 64, fused QKV [64, 197, 2304], 12 heads of 64.
    let [scores, context] =
        attention_cases(DType::F16, 1, 12, 197, 64, true, &mut rng).map(|case| case.problem);
    let (batch, tokens, hidden) = (64, 197, 768);
    let scores = MatmulProblem {
        batch,
        a: Operand {
            batch_stride: tokens * 3 * hidden,
            ..scores.a
        },
        b: Operand {
            batch_stride: tokens * 3 * hidden,
            ..scores.b
        },
        ..scores
    };
    let context = MatmulProblem {
        batch,
        b: Operand {
            batch_stride: tokens * 3 * hidden,
            ..context.b
        },
        ..context
    };
    problems.push(("Q·Kᵀ b64".into(), "alpha", scores, None, false));
    problems.push(("P·V b64".into(), "none", context, None, false));

    println!(
        "\nmatmul {dtype} on {}: median of 30 after 10 warm-up runs (CUDA events)",
        gpu.name()
    );
    println!(
        "{:<10} {:>6} {:>5} {:>5} {:<14} {:<26} {:>9} {:>8} {:>8}",
        "gemm", "M", "N", "K", "epilogue", "tile", "ms", "TFLOP/s", "/cuBLAS(H200)"
    );
    // VITRT_SPEED_FILTER=<text> keeps the rows whose name contains it (for a profiler run).
    let filter = std::env::var("VITRT_SPEED_FILTER").unwrap_or_default();
    for (name, epilogue, p, cublas, stream) in
        problems.into_iter().filter(|row| row.0.contains(&filter))
    {
        let timed = TimedProblem::new(&gpu, dtype, p, stream, &mut rng);
        let chosen = matmul::matmul_tile_for(&gpu, dtype, &p).unwrap();
        let tflops = |ms: f64| p.flops() / (ms * 1e-3) / 1e12;
        let ratio = |ms: f64| {
            cublas
                .map(|c| format!("{:.0}%", 100.0 * tflops(ms) / c))
                .unwrap_or_default()
        };
        let ms = timed.median_ms(&gpu, dtype, None);
        let label = format!("{} (chosen)", chosen.name());
        println!(
            "{name:<10} {:>6} {:>5} {:>5} {epilogue:<14} {label:<26} {ms:>9.4} {:>8.1} {:>8}",
            p.m,
            p.n,
            p.k,
            tflops(ms),
            ratio(ms)
        );
        for &tile in tiles_for(dtype) {
            let ms = timed.median_ms(&gpu, dtype, Some(tile));
            println!(
                "{:<10} {:>6} {:>5} {:>5} {:<14} {:<26} {ms:>9.4} {:>8.1} {:>8}",
                "",
                "",
                "",
                "",
                "",
                tile.name(),
                tflops(ms),
                ratio(ms)
            );
        }
    }
}

/// Compiles every matmul instantiation for one compute capability into the on-disk kernel
/// cache, so that GPU runs skip NVRTC: `VITRT_CACHE_DIR=<dir> VITRT_CACHE_ARCH=90 cargo test
/// ... -- --ignored fill_the_kernel_cache`, then carry `<dir>` along and point
/// `VITRT_CACHE_DIR` at it there (cache keys ignore where the CUDA headers live). Needs NVRTC,
/// not a GPU; fails if any instantiation does not compile.
#[test]
#[ignore = "fills the kernel disk cache for a GPU run; needs NVRTC"]
fn fill_the_kernel_cache_with_every_matmul_instantiation() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use vitrt_kernels::all_instantiations;
    use vitrt_kernels::cuda::{Arch, Compiler, DiskCache};
    let compiler = Compiler::new().expect("NVRTC and the CUDA headers");
    let cache = DiskCache::from_env().expect("a cache directory (set VITRT_CACHE_DIR)");
    let arch_digits = std::env::var("VITRT_CACHE_ARCH").unwrap_or_else(|_| "90".into());
    let (major, minor) = arch_digits.split_at(arch_digits.len() - 1);
    let arch = Arch::new(
        major.parse().expect("VITRT_CACHE_ARCH like 90"),
        minor.parse().expect("VITRT_CACHE_ARCH like 90"),
    );
    let jobs: Vec<_> = all_instantiations()
        .into_iter()
        .filter(|i| i.family == "matmul")
        .collect();
    let next = AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some(inst) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match compiler.compile(inst, arch) {
                        Ok(compiled) => {
                            // A cache that cannot be written is reported on stderr.
                            let _ = cache.store(
                                &inst.name,
                                &compiler.cache_key(inst, arch),
                                &compiled.cubin,
                            );
                        }
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    println!(
        "{} matmul kernels for {} cached in {}",
        jobs.len(),
        arch.sm_name(),
        cache.dir().display()
    );
}
