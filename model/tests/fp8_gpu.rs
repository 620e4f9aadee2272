//! FP8 linear layers on the GPU against the CPU's emulation of them (`vitrt_runtime::fp8`):
//! the same e4m3 weights and scales, each input row quantised by the same formula; the two
//! differ by the order of their sums, the tensor core's FP8 accumulator (about 13 mantissa
//! bits, benchmarks/NOTES.md 2026-11-28 "An FP8 ping-pong program") and the codes those move
//! across a rounding boundary. Also: the FP8 graph replays to the bits of its eager passes,
//! and the same with calibrated static input scales (`--fp8-scales`).
//! Run on the GPU machine (scripts/gpu/gpu-check.sh).

mod common;

use common::{bits, fixture, pixels};
use vitrt_model::fp8_scales::{Fp8ScalesFile, LayerScale, DEFAULT_MARGIN};
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::backend::cuda::CudaBackend;
use vitrt_runtime::fp8::Fp8Layers;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{Backend, CpuBackend, DType, HostTensor};

const FIXTURES: [&str; 4] = [
    "tiny-gelu",
    "dinov2-registers-swiglu",
    "clip-classifier",
    "timm-vit-layerscale",
];

fn runner(name: &str, backend: Box<dyn Backend>, fp8: bool, replay: bool) -> Runner {
    let model = VisionModel::load(&fixture(name)).unwrap();
    let runner = Runner::new(model, backend, Fusion::ALL).with_graph_replay(replay);
    if fp8 {
        runner.with_fp8(Fp8Layers::All).unwrap()
    } else {
        runner
    }
}

/// ‖a - b‖ / ‖b‖ over one output.
fn relative(a: &HostTensor, b: &HostTensor) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&x, &y) in a.data.iter().zip(&b.data) {
        diff += (x as f64 - y as f64).powi(2);
        norm += (y as f64).powi(2);
    }
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90 for the FP8 matmul)"]
fn fp8_models_match_their_cpu_emulation() {
    for name in FIXTURES {
        for dtype in [DType::F16, DType::BF16] {
            let gpu = || Box::new(CudaBackend::new(0, dtype).unwrap());
            let cpu = || Box::new(CpuBackend::emulating(dtype));
            let mut on_gpu = runner(name, gpu(), true, true);
            let mut emulated = runner(name, cpu(), true, false);
            let mut half_gpu = runner(name, gpu(), false, true);
            let mut half_cpu = runner(name, cpu(), false, false);
            for batch in [1, 9] {
                let len: usize = on_gpu.input_shape(batch).iter().product();
                let input = pixels(len, batch as u64);
                let ours = on_gpu.run(&input, batch, false).unwrap();
                let twin = emulated.run(&input, batch, false).unwrap();
                let sixteen = half_gpu.run(&input, batch, false).unwrap();
                let sixteen_cpu = half_cpu.run(&input, batch, false).unwrap();
                for (((o, t), h), hc) in ours.iter().zip(&twin).zip(&sixteen).zip(&sixteen_cpu) {
                    let what = format!("{name} {dtype} batch {batch} {}", o.name);
                    assert!(o.data.iter().all(|v| v.is_finite()), "{what}: not finite");
                    // FP8 rounds each value to 2^-4 of its row's scale: inputs that differ in
                    // their last 16-bit bit (the GPU sums in another order) move codes across
                    // rounding boundaries, and the output moves by about FP8's own error (a
                    // 1e-3 perturbation of tiny-gelu's pixels moves its FP8 logits by 3.2e-2,
                    // its f16 ones by 1e-3). So the GPU is held to its twin's own distance
                    // from the 16-bit model, not to a fixed tolerance.
                    let fp8_error = relative(t, hc);
                    let against_twin = relative(o, t);
                    let against_half = relative(o, h);
                    println!(
                        "{what}: GPU FP8 against its CPU twin {against_twin:.3e}; FP8 against \
                         {dtype}: GPU {against_half:.3e}, CPU {fp8_error:.3e}"
                    );
                    assert!(fp8_error > 0.0, "{what}: the CPU's FP8 run equals {dtype}");
                    assert!(
                        against_twin <= 1.5 * fp8_error.max(1e-2),
                        "{what}: GPU FP8 {against_twin:.3e} from its CPU emulation, whose own \
                         FP8 error is {fp8_error:.3e}"
                    );
                    assert!(
                        against_half <= 2.0 * fp8_error.max(1e-2),
                        "{what}: GPU FP8 {against_half:.3e} from {dtype}; the CPU's FP8 \
                         {fp8_error:.3e}"
                    );
                }
                // Replayed (the second and third passes) to the bits of the first.
                let again = on_gpu.run(&input, batch, false).unwrap();
                let third = on_gpu.run(&input, batch, false).unwrap();
                assert_eq!(bits(&again), bits(&ours), "{name} {dtype} batch {batch}");
                assert_eq!(bits(&third), bits(&ours), "{name} {dtype} batch {batch}");
            }
        }
    }
}

/// Static scales for `name`, calibrated as `vitrt calibrate` does: an f32 CPU run over
/// `batch` images of `input`, each candidate's input amax, a margin of 2.
fn calibrated_scales(name: &str, input: &[f32], batch: usize) -> Fp8ScalesFile {
    let mut reference = runner(name, Box::new(CpuBackend::new()), false, false);
    let amax = reference.fp8_input_amax(input, batch).unwrap();
    let layers = reference
        .fp8_candidate_shapes()
        .unwrap()
        .into_iter()
        .zip(amax)
        .map(|((layer, shape), amax)| LayerScale::new(layer, shape, amax, DEFAULT_MARGIN))
        .collect();
    Fp8ScalesFile::new(name.into(), batch, DEFAULT_MARGIN, layers)
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90 for the FP8 matmul)"]
fn fp8_models_with_static_scales_match_their_cpu_emulation() {
    // Every layer in FP8 with static scales: the layernorms write e4m3 with them
    // (layernorm_rows_e4m3_static), the first MLP layer writes the second's input in e4m3
    // from its epilogue, and the attention output is quantised by the per-tensor pass.
    for name in FIXTURES {
        for dtype in [DType::F16, DType::BF16] {
            let gpu = || Box::new(CudaBackend::new(0, dtype).unwrap());
            let cpu = || Box::new(CpuBackend::emulating(dtype));
            let calibration_len: usize = runner(name, cpu(), false, false)
                .input_shape(4)
                .iter()
                .product();
            let scales = calibrated_scales(name, &pixels(calibration_len, 99), 4);
            let with_scales = |r: Runner| r.with_fp8_scales(scales.clone()).unwrap();
            let mut on_gpu = with_scales(runner(name, gpu(), true, true));
            let mut emulated = with_scales(runner(name, cpu(), true, false));
            let mut half_cpu = runner(name, cpu(), false, false);
            for batch in [1, 9] {
                let len: usize = on_gpu.input_shape(batch).iter().product();
                let input = pixels(len, batch as u64);
                let ours = on_gpu.run(&input, batch, false).unwrap();
                let twin = emulated.run(&input, batch, false).unwrap();
                let sixteen_cpu = half_cpu.run(&input, batch, false).unwrap();
                for ((o, t), hc) in ours.iter().zip(&twin).zip(&sixteen_cpu) {
                    let what = format!("{name} {dtype} batch {batch} {} static", o.name);
                    assert!(o.data.iter().all(|v| v.is_finite()), "{what}: not finite");
                    // As fp8_models_match_their_cpu_emulation: held to the twin's own FP8
                    // error, which codes moved across a rounding boundary add to.
                    let fp8_error = relative(t, hc);
                    let against_twin = relative(o, t);
                    println!(
                        "{what}: GPU FP8 against its CPU twin {against_twin:.3e}; the CPU's \
                         FP8 against {dtype} {fp8_error:.3e}"
                    );
                    assert!(fp8_error > 0.0, "{what}: the CPU's FP8 run equals {dtype}");
                    assert!(
                        against_twin <= 1.5 * fp8_error.max(1e-2),
                        "{what}: GPU FP8 {against_twin:.3e} from its CPU emulation, whose own \
                         FP8 error is {fp8_error:.3e}"
                    );
                }
                let again = on_gpu.run(&input, batch, false).unwrap();
                assert_eq!(
                    bits(&again),
                    bits(&ours),
                    "{name} {dtype} batch {batch} static"
                );
            }
        }
    }
}
