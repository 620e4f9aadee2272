//! Runs everywhere: without a driver or a device, opening a GPU is a clear error.

use super::*;

#[test]
fn opening_a_missing_gpu_is_an_error_not_a_panic() {
    match Gpu::new(1000) {
        Err(KernelError::NoDevice { ordinal: 1000, .. }) | Err(KernelError::NoDriver(_)) => {}
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("no machine has 1001 GPUs"),
    }
}
