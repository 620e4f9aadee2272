//! GPU faults end in clear errors, never a hang or a panic. Run on the GPU machine
//! (scripts/gpu/gpu-check.sh).

mod common;

use common::fixture;
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::backend::cuda::CudaBackend;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::DType;

/// A batch whose activations cannot fit says what it asked, what is free and which batch
/// size would fit; a batch that fits still runs afterwards.
#[test]
#[ignore = "needs a CUDA GPU"]
fn out_of_memory_names_a_batch_size_that_fits() {
    let model = VisionModel::load(&fixture("tiny-gelu")).unwrap();
    let backend = CudaBackend::new(0, DType::F16).unwrap();
    let mut runner = Runner::new(model, Box::new(backend), Fusion::ALL);
    // The largest batch vitrt takes fits the tiny model on any GPU: all but 256 MiB of the
    // device is held here first (its activations at this batch are over 1 GiB).
    let huge = vitrt_model::limits::MAX_BATCH_SIZE;
    let gpu = vitrt_kernels::cuda::Gpu::new(0).unwrap();
    let (free, _) = gpu.memory_info().unwrap();
    let held = gpu.alloc(free.saturating_sub(256 << 20)).unwrap();
    let error = match runner.prepare(huge, false) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{huge} images fit in 256 MiB"),
    };
    drop(held);
    assert!(
        error.starts_with(&format!("out of device memory at batch size {huge}")),
        "{error}"
    );
    let fits: usize = error
        .split("--batch-size ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no batch size suggested: {error}"));
    assert!(fits > 0 && fits < huge, "{error}");
    let len: usize = runner.input_shape(2).iter().product();
    let outputs = runner.run(&vec![0.25; len], 2, false).unwrap();
    assert!(outputs[0].data.iter().all(|v| v.is_finite()));
}
