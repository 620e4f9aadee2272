//! The device layer: one [`Gpu`] (context, streams, compiler, module cache, launch, CUDA
//! graph capture), device memory ([`DeviceBuffer`], [`DevPtr`]), NVRTC and the caches, and
//! the vocabulary of instantiations. The ops live in their families (`crate::<family>::gpu`),
//! as free functions taking `&Gpu`; nothing here imports a family. The runtime uses only this
//! API and the families', never cudarc.
//!
//! # How a kernel family plugs in
//!
//! 1. **Source.** `kernels/src/<family>/<family>.cu` defines the program as a templated
//!    `__device__` function whose template parameters are the meta-parameters (dtype, block
//!    shape, vector width, ...); it may `#include "common.cuh"` (this folder: dtype
//!    conversions, vector loads, warp and block reductions), which NVRTC is given in memory.
//!    The family's gpu.rs embeds the file: `const SOURCE: &str = include_str!("<family>.cu");`.
//! 2. **Instantiations.** A Rust `Config` struct mirrors the meta-parameters and turns one
//!    choice into an [`Instantiation`]: a unique wrapper name that spells the meta-parameters
//!    (`layernorm_f16_v8_w1_r4_c3`), the template arguments as C++ text, the wrapper's
//!    parameters ([`KernelParam`], [`ParamKind`]), the block size (which becomes
//!    `__launch_bounds__`) and the arch it needs. [`Instantiation::program_source`] appends
//!    the generated `extern "C" __global__` wrapper that calls the template, so the driver
//!    finds the kernel by that plain name.
//! 3. **Registry.** The family's `pub(crate) fn instantiations() -> Vec<Instantiation>` lists
//!    every instantiation its launcher can ever pick, for every dtype;
//!    `crate::all_instantiations` (kernels/src/registry.rs) concatenates the families. CI
//!    compiles every entry for sm_80 and sm_90 without a GPU (kernels/tests/nvrtc_compile.rs),
//!    and each family has a unit test that its selection over many shapes only picks
//!    registered instantiations.
//! 4. **Launch.** The family's launcher (`<family>::gpu::<op>(gpu, ...)`) checks every
//!    [`DevPtr`] (dtype, length) against the problem, picks a config from the shape and the
//!    pointers' alignment, and calls
//!    `gpu.launch(&instantiation, LaunchDims { .. }, &[KernelArg::Ptr(..), ...])`. `launch`
//!    checks the arguments against the parameters, compiles on first use (NVRTC, then the
//!    in-memory and disk caches), raises the dynamic shared-memory limit when a launch asks
//!    for more than 48 KiB, and enqueues on the Gpu's stream. Errors surface as
//!    [`KernelError`]; execution errors surface at the next [`Gpu::synchronize`] or download.

mod bench_support;
mod cache;
mod capture;
mod compile;
mod cublas;
mod cublaslt;
mod device;
mod discovery;
pub(crate) mod error;
mod events;
mod memory;
mod params;
mod registry;
mod staging;
mod tensor_map;
pub(crate) mod timing;

pub use cache::DiskCache;
pub(crate) use cache::{default_dir as cache_dir, write_atomically};
pub use capture::GpuGraph;
pub(crate) use compile::fnv_checksum;
pub use compile::{parse_ptxas_report, CompiledKernel, Compiler, KernelResources};
pub use cublas::Cublas;
pub use cublaslt::{CublasLt, Fp8GemmPlan};
pub(crate) use device::{to_i32, to_i64, LaunchDims};
pub use device::{DriverWarmUp, Gpu, KernelLoads, LoadedKernel, Stream};
pub use discovery::{cuda_include_dir, load_nvrtc, NvrtcLibrary};
pub(crate) use error::invalid;
pub use error::KernelError;
pub use events::GpuEvent;
pub use memory::{AllocatedBytes, DevPtr, DeviceBuffer, E4m3Ptr};
pub(crate) use params::kernel_params;
pub(crate) use registry::COMMON_HEADER;
pub use registry::{
    Arch, ArchRequirement, Instantiation, KernelArg, KernelParam, ParamKind, ParamStruct,
    StructType, STRUCT_ARG_BYTES,
};
pub use staging::{PinnedBuffer, StreamEvent};
pub(crate) use tensor_map::{encode_tiled, MapElement, Swizzle};
pub use timing::{copies_beyond_l2, copy_for_rep, slot_offset, Timer};
