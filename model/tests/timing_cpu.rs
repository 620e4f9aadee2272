//! Forward-pass timing through the Runner on the CPU backend, whose marks are host times: the
//! counts and the sums must add up (the CUDA path is the same code with events).

use std::path::Path;
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::CpuBackend;

#[test]
fn forward_and_per_node_times_add_up() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/tiny-gelu");
    let model = VisionModel::load(&dir).unwrap();
    let mut runner = Runner::new(model, Box::new(CpuBackend::new()), Fusion::ALL);
    let batch = 2;
    let pixels: Vec<f32> = (0..runner.input_shape(batch).iter().product::<usize>())
        .map(|i| ((i * 7919) % 255) as f32 / 127.0 - 1.0)
        .collect();
    let mut passes = 0;
    let times = runner
        .time_forward(&pixels, batch, (1, 3), false, &mut || passes += 1)
        .unwrap();
    assert_eq!(passes, 4, "warm-up and timed passes report progress");
    assert_eq!(times.forward_ms.len(), 3);
    assert!(times.node_ms.is_empty());
    assert!(times.forward_ms.iter().all(|&t| t > 0.0 && t.is_finite()));

    let nodes = runner.prepare(batch, false).unwrap().graph().nodes.len();
    let times = runner
        .time_forward(&pixels, batch, (0, 2), true, &mut || {})
        .unwrap();
    assert_eq!(times.node_ms.len(), 2);
    for (pass, per_node) in times.node_ms.iter().enumerate() {
        assert_eq!(per_node.len(), nodes);
        let sum: f32 = per_node.iter().sum();
        assert!((sum - times.forward_ms[pass]).abs() <= 1e-3 * sum.max(1e-3));
    }

    // Timing leaves the runner usable, and bad pixels are still refused.
    assert!(runner.run(&pixels, batch, false).is_ok());
    assert!(runner
        .time_forward(&pixels[1..], batch, (0, 1), false, &mut || {})
        .is_err());
}
