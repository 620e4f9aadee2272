//! cuBLAS as the yardstick of the matmul benchmarks, and nothing else: no op of a model ever
//! runs through it (the runtime calls `vitrt_kernels::matmul::gpu::matmul`). `vitrt bench kernels` times
//! [`Cublas::gemm_nt`] beside our kernel on the same operands, in the same run.
//!
//! Settings, so that the comparison is like for like: f16 and bf16 operands with fp32
//! accumulation (`CUBLAS_COMPUTE_32F`), as our tensor-core kernels do; f32 with
//! `CUBLAS_COMPUTE_32F` and the default math mode, which never uses TF32 (only the
//! `_FAST_TF32` compute types or `CUBLAS_TF32_TENSOR_OP_MATH` would), as our f32 kernel does
//! not. The default math mode also leaves cuBLAS free to reduce split-K partial sums in the
//! output type, as PyTorch leaves it by default.
//!
//! libcublas is found as libnvrtc is (see discovery.rs): on the loader's path, else in a CUDA
//! toolkit or a pip wheel (`nvidia-cublas`), or at `VITRT_CUBLAS_LIB`.

use super::device::{guarded, to_i32, Gpu};
use super::discovery::{keep_loaded, list_paths, python_site_dirs, toolkit_roots};
use super::error::{invalid, KernelError};
use super::memory::DevPtr;
use crate::types::DType;
use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasMath_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::cublas::CudaBlas;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;

/// A cuBLAS handle bound to one [`Gpu`]'s stream.
pub struct Cublas<'g> {
    gpu: &'g Gpu,
    blas: CudaBlas,
}

impl std::fmt::Debug for Cublas<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cublas")
            .field("gpu", &self.gpu.name())
            .finish()
    }
}

impl Gpu {
    /// Opens cuBLAS on this Gpu's stream, for benchmarks only (see the module notes). Fails
    /// with a message saying where it looked when libcublas cannot be found.
    pub fn cublas(&self) -> Result<Cublas<'_>, KernelError> {
        load_cublas().map_err(|e| KernelError::Cuda(format!("cuBLAS is not available: {e}")))?;
        self.bind()?;
        let blas = guarded("cublasCreate", || CudaBlas::new(self.stream.clone()))
            .map_err(KernelError::Cuda)?
            .map_err(|e| KernelError::Cuda(format!("cublasCreate: {e}")))?;
        unsafe {
            cudarc::cublas::sys::cublasSetMathMode(
                *blas.handle(),
                cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
        }
        .result()
        .map_err(|e| KernelError::Cuda(format!("cublasSetMathMode: {e}")))?;
        Ok(Cublas { gpu: self, blas })
    }
}

impl Cublas<'_> {
    /// `c[m, n] = a[m, k] · w[n, k]ᵀ`, every matrix row-major and contiguous: an nn.Linear
    /// without bias, the problem of `MatmulProblem::linear` with no epilogue.
    ///
    /// cuBLAS is column-major, where a row-major `[r, c]` matrix reads as its transpose
    /// `[c, r]`. So it computes `cᵀ[n, m] = w · aᵀ`: its first operand is `w`, read `[k, n]`
    /// and transposed (op T, ld k); its second is `a`, read `[k, m]` as is (op N, ld k); the
    /// result `cᵀ` has leading dimension n, which is `c` row-major.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_nt(
        &self,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        a: DevPtr,
        w: DevPtr,
        c: DevPtr,
    ) -> Result<(), KernelError> {
        let elements = |rows: usize, cols: usize, what: &str| {
            rows.checked_mul(cols)
                .ok_or_else(|| super::error::invalid!("cuBLAS {what} of {rows} x {cols} overflows"))
        };
        a.expect("cuBLAS A", dtype, elements(m, k, "A")?)?;
        w.expect("cuBLAS W", dtype, elements(n, k, "W")?)?;
        c.expect("cuBLAS C", dtype, elements(m, n, "C")?)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (m, n, k) = (
            to_i32(m, "cuBLAS m")?,
            to_i32(n, "cuBLAS n")?,
            to_i32(k, "cuBLAS k")?,
        );
        let data_type = match dtype {
            DType::F32 => cudaDataType_t::CUDA_R_32F,
            DType::F16 => cudaDataType_t::CUDA_R_16F,
            DType::BF16 => cudaDataType_t::CUDA_R_16BF,
            DType::E4M3 => {
                return Err(invalid!(
                    "the cuBLAS yardstick multiplies f32, f16 or bf16, not e4m3"
                ))
            }
        };
        // Host scalars of the compute type (fp32).
        let (alpha, beta) = (1.0f32, 0.0f32);
        self.gpu.bind()?;
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                n,
                m,
                k,
                &alpha as *const f32 as *const c_void,
                w.ptr as *const c_void,
                data_type,
                k,
                a.ptr as *const c_void,
                data_type,
                k,
                &beta as *const f32 as *const c_void,
                c.ptr as *mut c_void,
                data_type,
                n,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| KernelError::Cuda(format!("cublasGemmEx: {e}")))
    }
}

/// Makes libcublas loadable by cudarc (which opens it by name), once per process: a copy off
/// the loader's path is opened first by its full path, with the libcublasLt beside it.
pub(super) fn load_cublas() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED.get_or_init(find_and_load_cublas).clone()
}

fn find_and_load_cublas() -> Result<(), String> {
    if let Some(explicit) = std::env::var_os("VITRT_CUBLAS_LIB") {
        let explicit = PathBuf::from(explicit);
        keep_loaded_with_lt(&explicit)
            .map_err(|e| format!("VITRT_CUBLAS_LIB={}: {e}", explicit.display()))?;
    } else if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        let candidates = cublas_candidates();
        let found = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
            format!(
                "libcublas is not on the loader's path (LD_LIBRARY_PATH, ldconfig) and no CUDA \
                 toolkit or pip wheel nvidia-cublas was found; looked in: {}. Install one, or \
                 set VITRT_CUBLAS_LIB",
                list_paths(&candidates)
            )
        })?;
        keep_loaded_with_lt(found).map_err(|e| format!("{}: {e}", found.display()))?;
    }
    if unsafe { cudarc::cublas::sys::is_culib_present() } {
        Ok(())
    } else {
        Err("libcublas was opened, but cudarc could not then find it by name".into())
    }
}

/// libcublas needs libcublasLt; outside the loader's path it is found only if already open.
fn keep_loaded_with_lt(cublas: &std::path::Path) -> Result<(), String> {
    let dir = cublas.parent().unwrap_or(std::path::Path::new("."));
    for name in ["libcublasLt.so.13", "libcublasLt.so.12"] {
        let lt = dir.join(name);
        if lt.is_file() {
            keep_loaded(&lt).map_err(|e| format!("{}: {e}", lt.display()))?;
        }
    }
    keep_loaded(cublas)
}

fn cublas_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    for root in toolkit_roots() {
        for lib in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            candidates.push(root.join(lib).join("libcublas.so.13"));
            candidates.push(root.join(lib).join("libcublas.so"));
        }
    }
    for site in python_site_dirs() {
        candidates.push(site.join("nvidia/cu13/lib/libcublas.so.13"));
        candidates.push(site.join("nvidia/cublas/lib/libcublas.so.12"));
    }
    candidates
}
