//! Throughput, for the record (prints; asserts only that the kernels run). Bytes are the
//! fewest the op must move: each input read once, each output written once. Tests named
//! bench_* must run alone (scripts/gpu/gpu-check.sh does: `bench_ --ignored --test-threads=1`):
//! run beside the other tests, they time the GPU shared with them.

use super::*;
use vitrt_kernels::{add, layernorm, patchify, softmax};

#[test]
#[ignore = "needs a CUDA GPU"]
fn bench_bandwidth_of_vit_shapes() {
    let g = gpu();
    let mut rng = SmallRng::seed_from_u64(6);
    let dtype = DType::F16;
    let size = dtype.size_bytes();
    let time = |run: &dyn Fn()| {
        for _ in 0..5 {
            run();
        }
        g.synchronize().unwrap();
        let mut times: Vec<f64> = (0..7)
            .map(|_| {
                let t = Instant::now();
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

    let (rows, cols) = (12_608usize, 768usize);
    let x = random(&mut rng, rows * cols, -3.0, 3.0, dtype);
    let (_xb, xv) = upload(gpu(), dtype, &x, 0);
    // gamma and beta are f32 in every run.
    let (_gb, gv) = upload(gpu(), DType::F32, &x[..cols], 0);
    let out = g.alloc(rows * cols * size).unwrap();
    let ov = out.view(0, rows * cols, dtype).unwrap();
    let t =
        time(&|| layernorm::gpu::layernorm(g, dtype, xv, gv, gv, rows, cols, 1e-6, ov).unwrap());
    println!(
        "BANDWIDTH layernorm f16 [{rows},{cols}]: {:.1} us, {:.0} GB/s",
        t * 1e6,
        (2 * rows * cols * size) as f64 / t / 1e9
    );

    // Attention probabilities at batch 64 (12 heads x 197 queries x 197 keys) in f16 and bf16
    // (the span program on sm_80+), at batch 1 (2364 rows: a partial last span), and at batch
    // 64 with x and out one element off alignment: the row program with scalar accesses, what
    // every such shape ran before the span program, for an A/B within one run.
    for (softmax_dtype, rows, misalign, label) in [
        (DType::F16, 151_296usize, 0usize, ""),
        (DType::BF16, 151_296, 0, ""),
        (DType::F16, 12 * 197, 0, ""),
        (DType::F16, 151_296, 1, " misaligned (row program)"),
    ] {
        let cols = 197usize;
        let size = softmax_dtype.size_bytes();
        let x = random(&mut rng, rows * cols, -8.0, 8.0, softmax_dtype);
        let (_sb, sv) = upload(gpu(), softmax_dtype, &x, misalign);
        let out = Poisoned::new(gpu(), softmax_dtype, rows * cols, misalign);
        let ov = out.view();
        let t =
            time(&|| softmax::gpu::softmax(g, softmax_dtype, sv, rows, cols, 0.125, ov).unwrap());
        println!(
            "BANDWIDTH softmax {softmax_dtype} [{rows},{cols}]{label}: {:.1} us, {:.0} GB/s",
            t * 1e6,
            (2 * rows * cols * size) as f64 / t / 1e9
        );
    }

    let n = 12_608 * 768;
    let a = random(&mut rng, n, -3.0, 3.0, dtype);
    let (_ab, av) = upload(gpu(), dtype, &a, 0);
    let (_bb, bv) = upload(gpu(), dtype, &a, 0);
    let out = g.alloc(n * size).unwrap();
    let ov = out.view(0, n, dtype).unwrap();
    let t = time(&|| add::gpu::add(g, dtype, av, bv, n, ov).unwrap());
    println!(
        "BANDWIDTH add f16 n={n}: {:.1} us, {:.0} GB/s",
        t * 1e6,
        (3 * n * size) as f64 / t / 1e9
    );

    let (batch, hidden) = (64usize, 768usize);
    let pixels = random(&mut rng, batch * 3 * 224 * 224, -2.0, 2.0, DType::F32);
    let (_pb, pv) = upload(gpu(), DType::F32, &pixels, 0);
    let (_cb, cv) = upload(gpu(), dtype, &a[..197 * hidden], 0);
    let patches = g.alloc(batch * 196 * 768 * size).unwrap();
    let tokens = g.alloc(batch * 197 * hidden * size).unwrap();
    let patches_view = patches.view(0, batch * 196 * 768, dtype).unwrap();
    let tokens_view = tokens.view(0, batch * 197 * hidden, dtype).unwrap();
    let t = time(&|| {
        patchify::gpu::patchify_with_prefix(
            g,
            dtype,
            pv,
            batch,
            3,
            224,
            224,
            16,
            PrefixRows { rows: cv, count: 1 },
            cv,
            hidden,
            197,
            patches_view,
            tokens_view,
        )
        .unwrap()
    });
    let bytes = pixels.len() * 4 + batch * 196 * 768 * size;
    println!(
        "BANDWIDTH patchify f16 batch {batch}: {:.1} us, {:.0} GB/s",
        t * 1e6,
        bytes as f64 / t / 1e9
    );

    for k in g.loaded_kernels() {
        println!(
            "LOADED {:<40} regs {:>3} static smem {:>5} local {:>4}",
            k.name, k.registers, k.static_shared_bytes, k.local_bytes
        );
    }
}
