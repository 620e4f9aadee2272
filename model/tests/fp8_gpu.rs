//! FP8 linear layers on the GPU against the CPU's emulation of them (`vitrt_runtime::fp8`):
//! the same e4m3 weights and scales, each input row quantised by the same formula, so the two
//! differ only by the order of their sums and the tensor core's FP8 accumulator (about 13
//! mantissa bits, benchmarks/NOTES.md 2026-11-28 "An FP8 ping-pong program") and by the codes
//! that order moves across a rounding boundary. Also: the FP8 graph replays to the bits of
//! its eager passes, and stays close to the 16-bit model. Run on the GPU machine
//! (scripts/gpu/gpu-check.sh).

mod common;

use common::{bits, fixture};
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
        runner.with_fp8(Fp8Layers::all()).unwrap()
    } else {
        runner
    }
}

fn pixels(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
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
            let gpu = Box::new(CudaBackend::new(0, dtype).unwrap());
            let mut on_gpu = runner(name, gpu, true, true);
            let mut emulated = runner(name, Box::new(CpuBackend::emulating(dtype)), true, false);
            let mut half = runner(
                name,
                Box::new(CudaBackend::new(0, dtype).unwrap()),
                false,
                true,
            );
            for batch in [1, 9] {
                let len: usize = on_gpu.input_shape(batch).iter().product();
                let input = pixels(len, batch as u64);
                let ours = on_gpu.run(&input, batch, false).unwrap();
                let twin = emulated.run(&input, batch, false).unwrap();
                let sixteen = half.run(&input, batch, false).unwrap();
                for ((o, t), h) in ours.iter().zip(&twin).zip(&sixteen) {
                    assert!(
                        o.data.iter().all(|v| v.is_finite()),
                        "{name} {dtype} batch {batch}: {} is not finite",
                        o.name
                    );
                    let against_twin = relative(o, t);
                    let against_half = relative(o, h);
                    println!(
                        "{name} {dtype} batch {batch} {}: GPU FP8 against its CPU twin \
                         {against_twin:.3e}, against the {dtype} model {against_half:.3e}",
                        o.name
                    );
                    assert!(
                        against_twin < 2e-2,
                        "{name} {dtype} batch {batch} {}: GPU FP8 {against_twin:.3e} from its \
                         CPU emulation",
                        o.name
                    );
                    assert!(
                        against_half < 1e-1,
                        "{name} {dtype} batch {batch} {}: FP8 {against_half:.3e} from {dtype}",
                        o.name
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
