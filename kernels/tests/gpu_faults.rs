//! A kernel that faults while running (here: an add through unmapped addresses) is an error at
//! the next wait that says a kernel failed, names the last one queued and says the context is
//! lost; never a hang or a panic. The fault poisons the process's context, so this file holds
//! this one test. Run on the GPU machine (scripts/gpu/gpu-check.sh).

mod common;

use vitrt_kernels::add;
use vitrt_kernels::cuda::DevPtr;
use vitrt_kernels::DType;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_faulting_kernel_is_an_error_naming_it_not_a_hang() {
    // A Gpu of its own: the fault poisons its context.
    let gpu = common::new_gpu();
    let n = 1 << 20;
    // Aligned, so the launcher's checks pass, and far from any allocation.
    let unmapped = DevPtr {
        ptr: 0x1000,
        len: n,
        dtype: DType::F32,
    };
    add::gpu::add(&gpu, DType::F32, unmapped, unmapped, n, unmapped)
        .expect("the launch itself is accepted");
    let error = gpu.synchronize().unwrap_err().to_string();
    assert!(
        error.contains("a kernel failed while running") && error.contains("kernel add_f32"),
        "{error}"
    );
    assert!(error.contains("cannot be used again"), "{error}");
    // Later calls fail as clearly: the context stays poisoned.
    let again = gpu.synchronize().unwrap_err().to_string();
    assert!(again.contains("a kernel failed while running"), "{again}");
}
