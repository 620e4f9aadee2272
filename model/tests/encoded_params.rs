//! Parameters read and encoded before the backend opens (what `vitrt classify` does while the
//! GPU's driver starts) give the runner the very bytes it would have read itself: outputs
//! bit for bit those of a runner that read every parameter, on committed fixtures (a fused
//! QKV concatenation, layernorm parameters kept in f32, resampled position embeddings) in
//! each storage type, fused and unfused. No GPU needed: the CPU backend stores what the
//! plan says.

use std::path::{Path, PathBuf};
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{CpuBackend, DType, HostTensor};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}

fn pixels(runner: &Runner, batch: usize) -> Vec<f32> {
    let n: usize = runner.input_shape(batch).iter().product();
    (0..n)
        .map(|i| ((i * 7919) % 251) as f32 / 125.0 - 1.0)
        .collect()
}

fn bits(outputs: &[HostTensor]) -> Vec<(String, Vec<u32>)> {
    outputs
        .iter()
        .map(|t| (t.name.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

#[test]
fn encoded_parameters_give_the_outputs_of_parameters_read_by_the_runner() {
    for name in [
        "tiny-gelu",
        "dinov2-registers-swiglu",
        "clip-classifier",
        "sharded",
    ] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for fusion in [Fusion::ALL, Fusion::NONE] {
                let case = format!("{name} {dtype} {fusion:?}");
                let model = VisionModel::load(&fixture(name)).unwrap();
                let encoded = Runner::encode_params(&model, fusion, dtype);
                assert!(!encoded.is_empty(), "{case}: nothing encoded");
                let mut ahead = Runner::new(model, Box::new(CpuBackend::emulating(dtype)), fusion)
                    .with_encoded_params(encoded);
                let model = VisionModel::load(&fixture(name)).unwrap();
                let mut plain = Runner::new(model, Box::new(CpuBackend::emulating(dtype)), fusion);
                let input = pixels(&plain, 2);
                let want = plain.run(&input, 2, true).unwrap();
                let got = ahead.run(&input, 2, true).unwrap();
                assert_eq!(bits(&got), bits(&want), "{case}");
                assert_eq!(
                    ahead.backend().memory_account().params_bytes,
                    plain.backend().memory_account().params_bytes,
                    "{case}: the same parameters held"
                );
            }
        }
    }
}

/// Encoded for the checkpoint's input size, the position embeddings do not fit a runner moved
/// to another size: they are read (resampled) as before, and the rest are still taken.
#[test]
fn position_embeddings_of_another_input_size_are_read_again() {
    let dtype = DType::F16;
    let model = VisionModel::load(&fixture("tiny-gelu")).unwrap();
    let size = model.input_size();
    let encoded = Runner::encode_params(&model, Fusion::ALL, dtype);
    let bigger = (size.0 * 2, size.1 * 2);
    let mut ahead = Runner::new(model, Box::new(CpuBackend::emulating(dtype)), Fusion::ALL)
        .with_encoded_params(encoded);
    ahead.set_input_size(bigger).unwrap();
    let mut plain = Runner::new(
        VisionModel::load(&fixture("tiny-gelu")).unwrap(),
        Box::new(CpuBackend::emulating(dtype)),
        Fusion::ALL,
    );
    plain.set_input_size(bigger).unwrap();
    let input = pixels(&plain, 1);
    let want = plain.run(&input, 1, false).unwrap();
    assert_eq!(bits(&ahead.run(&input, 1, false).unwrap()), bits(&want));
}
