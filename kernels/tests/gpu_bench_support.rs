//! What `vitrt bench kernels` relies on besides the ops: cuBLAS computes the GEMM we compare
//! with (with the transposes and leading dimensions right, and no TF32 in f32), the copy
//! moves exactly the bytes asked for, the spin kernel holds the stream, and the device facts
//! are sane. The bias-plus-activation kernel is tested against its twin in gpu_kernels/activation.rs.
//!
//! Needs a CUDA GPU: `cargo test --release -p vitrt-kernels --test gpu_bench_support -- --ignored`.

mod common;

use common::{new_gpu, random, upload, Poisoned};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use vitrt_kernels::activation;
use vitrt_kernels::cuda::{DevPtr, Gpu, KernelError};
use vitrt_kernels::matmul::cpu::{self, MatmulTiles};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem};

/// A Gpu of the test's own: the spin test times the stream, which no other test may share.
fn gpu() -> Gpu {
    new_gpu()
}

/// A poisoned output of `len` elements between two guard regions: (output, view).
fn poisoned(gpu: &Gpu, dtype: DType, len: usize) -> (Poisoned, DevPtr) {
    let out = Poisoned::new(gpu, dtype, len, 0);
    let view = out.view();
    (out, view)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cublas_computes_a_linear_layer() {
    let gpu = gpu();
    let cublas = match gpu.cublas() {
        Ok(cublas) => cublas,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let mut rng = SmallRng::seed_from_u64(21);
    // Tolerances as gpu_matmul.rs: |d| <= tol * max(|twin|, rms(twin) / 10). TF32 in f32
    // (10-bit mantissas) would miss 1e-4 by an order of magnitude.
    for (dtype, tol) in [
        (DType::F32, 1e-4f32),
        (DType::F16, 2e-3),
        (DType::BF16, 1e-2),
    ] {
        for (m, n, k) in [(1, 1, 1), (7, 5, 3), (197, 96, 64), (33, 130, 257)] {
            let case = format!("cuBLAS {dtype} {m}x{n}x{k}");
            let a = random(&mut rng, m * k, -1.0, 1.0, dtype);
            let w = random(&mut rng, n * k, -1.0, 1.0, dtype);
            let (_ab, av) = upload(&gpu, dtype, &a, 0);
            let (_wb, wv) = upload(&gpu, dtype, &w, 0);
            let (cb, cv) = poisoned(&gpu, dtype, m * n);
            cublas.gemm_nt(dtype, m, n, k, av, wv, cv).unwrap();
            let got = cb.read(&gpu, &case);
            let mut want = vec![0.0; m * n];
            let p = MatmulProblem::linear(m, n, k, Epilogue::NONE);
            cpu::matmul(&p, MatmulTiles::default(), &a, &w, None, None, &mut want);
            let rms = (want.iter().map(|v| v * v).sum::<f32>() / want.len() as f32).sqrt();
            for (i, (g, t)) in got.iter().zip(&want).enumerate() {
                let allowed = tol * t.abs().max(rms / 10.0);
                assert!(
                    (g - t).abs() <= allowed,
                    "{case}: [{i}] cuBLAS {g} twin {t}"
                );
            }
        }
    }
    let buffer = gpu.alloc(64).unwrap();
    let f16 = buffer.view(0, 16, DType::F16).unwrap();
    assert!(
        matches!(
            cublas.gemm_nt(DType::F16, 4, 4, 8, f16, f16, f16),
            Err(KernelError::InvalidArgument(_))
        ),
        "A needs 32 elements, the view has 16"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_moves_exactly_the_bytes_asked_for() {
    let gpu = gpu();
    let mut rng = SmallRng::seed_from_u64(22);
    for dtype in DType::ALL {
        for n in [1usize, 7, 4096, 100_003] {
            for misalign in [0, 1] {
                let case = format!("copy {dtype} n {n} misalign {misalign}");
                let values = random(&mut rng, n + 5, -1.0, 1.0, dtype);
                let (_sb, src) = upload(&gpu, dtype, &values, misalign);
                let (out_buffer, out) = poisoned(&gpu, dtype, n);
                gpu.copy(dtype, src, n, out).unwrap();
                let got = out_buffer.read(&gpu, &case);
                assert_eq!(got, values[..n], "{case}");
            }
        }
    }
    let buffer = gpu.alloc(4096).unwrap();
    let a = buffer.view(0, 1024, DType::F16).unwrap();
    let b = buffer.view(1024, 1024, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    assert!(
        invalid(gpu.copy(DType::F16, a, 1024, b)),
        "overlapping ranges"
    );
    assert!(invalid(gpu.copy(DType::F32, a, 16, b)), "wrong dtype");
    assert!(invalid(gpu.copy(DType::F16, a, 1025, b)), "past the views");
    gpu.copy(DType::F16, a, 512, b).unwrap();
    gpu.copy(DType::F16, a, 0, a).unwrap();
    gpu.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_spin_holds_the_stream_and_the_start_event_waits_for_it() {
    let gpu = gpu();
    gpu.spin(1000).unwrap(); // compile and load it first
    gpu.synchronize().unwrap();
    let spun = gpu.time_ms(|| gpu.spin(2_000_000)).unwrap();
    assert!((1.9..50.0).contains(&spun), "a 2 ms spin took {spun} ms");
    // Queued behind a spin, the start event fires when the spin ends, so a span holding no
    // work measures (almost) nothing, however long the host took to record the end event.
    gpu.spin(1_000_000).unwrap();
    let empty = gpu
        .time_ms(|| {
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok(())
        })
        .unwrap();
    assert!(
        empty < 0.1,
        "an empty span after a spin measured {empty} ms"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_facts_are_sane() {
    let gpu = gpu();
    let l2 = gpu.l2_cache_bytes().unwrap();
    assert!((1 << 20..1 << 30).contains(&l2), "L2 of {l2} bytes");
    let (major, minor) = gpu.driver_version().unwrap();
    assert!(major >= 11 && minor < 100, "driver API {major}.{minor}");
    println!(
        "{}: L2 {} MiB, CUDA driver API {major}.{minor}",
        gpu.name(),
        l2 >> 20
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bias_activation_checks_its_operands() {
    let gpu = gpu();
    let buffer = gpu.alloc(4096).unwrap();
    let x = buffer.view(0, 1024, DType::F16).unwrap();
    let short = buffer.view(0, 10, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    let act = Activation::Gelu;
    assert!(
        invalid(activation::gpu::bias_activation(
            &gpu,
            DType::F16,
            act,
            x,
            short,
            4,
            16,
            x
        )),
        "bias too short"
    );
    assert!(
        invalid(activation::gpu::bias_activation(
            &gpu,
            DType::F16,
            act,
            x,
            x,
            64,
            17,
            x
        )),
        "rows x cols past x"
    );
    assert!(
        invalid(activation::gpu::bias_activation(
            &gpu,
            DType::F32,
            act,
            x,
            x,
            4,
            4,
            x
        )),
        "wrong dtype"
    );
    activation::gpu::bias_activation(&gpu, DType::F16, act, x, x, 0, 16, x).unwrap();
    gpu.synchronize().unwrap();
}
