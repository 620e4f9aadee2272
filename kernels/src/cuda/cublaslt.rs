//! cuBLASLt's FP8 GEMM as the yardstick of the FP8 matmul benchmark, and nothing else (see
//! cublas.rs): `vitrt bench kernels` times [`Fp8GemmPlan::run`] beside our FP8 program on the
//! same shapes. cuBLAS's FP8 GEMM exists only in cuBLASLt (`cublasLtMatmul`), which is found
//! beside libcublas as cublas.rs finds it.
//!
//! Settings, so that the comparison is like for like: e4m3 A and B with fp32 accumulation
//! (`CUBLAS_COMPUTE_32F`), C in f16 or bf16, the scales as device pointers (one value each:
//! cuBLASLt's per-tensor scaling) and its fast accumulation on (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`),
//! which keeps the sums in the tensor core's FP8 accumulator over the whole of K, as our program
//! does; the algorithm is cuBLASLt's first heuristic choice with a 32 MiB workspace.

use super::device::{guarded, to_i32, Gpu};
use super::error::{invalid, KernelError};
use super::memory::{DevPtr, DeviceBuffer, E4m3Ptr};
use crate::types::DType;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use std::ffi::c_void;

/// The workspace cuBLASLt's algorithms may use.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLASLt handle bound to one [`Gpu`]'s stream, and its workspace.
pub struct CublasLt<'g> {
    gpu: &'g Gpu,
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuffer,
}

impl std::fmt::Debug for CublasLt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CublasLt")
            .field("gpu", &self.gpu.name())
            .finish()
    }
}

impl Drop for CublasLt<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `Gpu::cublaslt` and is destroyed once, here.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

impl Gpu {
    /// Opens cuBLASLt for this Gpu, for benchmarks only (see the module notes). Fails with a
    /// message saying where it looked when libcublasLt cannot be found.
    pub fn cublaslt(&self) -> Result<CublasLt<'_>, KernelError> {
        super::cublas::load_cublas()
            .map_err(|e| KernelError::Cuda(format!("cuBLASLt is not available: {e}")))?;
        // SAFETY: only asks whether the library can be opened.
        if !unsafe { sys::is_culib_present() } {
            return Err(KernelError::Cuda(
                "cuBLASLt is not available: libcublasLt was not found beside libcublas".into(),
            ));
        }
        self.bind()?;
        let handle = guarded("cublasLtCreate", lt::create_handle)
            .map_err(KernelError::Cuda)?
            .map_err(|e| KernelError::Cuda(format!("cublasLtCreate: {e}")))?;
        let workspace = self.alloc(WORKSPACE_BYTES)?;
        Ok(CublasLt {
            gpu: self,
            handle,
            workspace,
        })
    }
}

/// One FP8 GEMM shape, its descriptors and its algorithm, made once and run many times.
pub struct Fp8GemmPlan<'l, 'g> {
    lt: &'l CublasLt<'g>,
    m: usize,
    n: usize,
    k: usize,
    output: DType,
    desc: sys::cublasLtMatmulDesc_t,
    /// The layouts of cuBLASLt's A (our W), B (our A), and C = D.
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for Fp8GemmPlan<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: made by `plan_fp8_nt`, destroyed once, here.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for layout in self.layouts {
                let _ = lt::destroy_matrix_layout(layout);
            }
        }
    }
}

fn lt_error(what: &str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> KernelError + '_ {
    move |e| KernelError::Cuda(format!("{what}: {e}"))
}

/// Sets one attribute of a matmul descriptor to `value`, passed with its own size: each
/// attribute has one C type (cublasLtMatmulDescAttributes_t's table) and cuBLASLt refuses a
/// value of any other size with CUBLAS_STATUS_INVALID_VALUE. TRANSA and TRANSB are int32_t
/// (a cublasOperation_t), FAST_ACCUM is int8_t, the scale pointers are `void*`.
///
/// # Safety
/// `desc` must be a live descriptor and `T` the attribute's C type.
unsafe fn set_desc_attribute<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<(), KernelError> {
    // SAFETY: the caller's contract; `value` is read for its size only.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            attr,
            value as *const T as *const c_void,
            std::mem::size_of::<T>(),
        )
    }
    .map_err(|e| KernelError::Cuda(format!("cublasLtMatmulDescSetAttribute ({attr:?}): {e}")))
}

impl<'g> CublasLt<'g> {
    /// The plan of `c[m, n] = (a_scale · w_scale) · a[m, k] · w[n, k]ᵀ`, every matrix
    /// row-major and contiguous, a and w e4m3, c `output` (f16 or bf16).
    ///
    /// cuBLASLt is column-major and takes FP8 only as "TN": its A transposed, its B not. A
    /// row-major `[r, c]` matrix reads column-major as its transpose, so it computes
    /// `cᵀ[n, m] = w · aᵀ`: its A is `w`, read `[k, n]` and transposed (op T, ld k); its B is
    /// `a`, read `[k, m]` as is (op N, ld k); `cᵀ` has leading dimension n.
    pub fn plan_fp8_nt(
        &self,
        m: usize,
        n: usize,
        k: usize,
        output: DType,
    ) -> Result<Fp8GemmPlan<'_, 'g>, KernelError> {
        let c_type = match output {
            DType::F16 => sys::cudaDataType::CUDA_R_16F,
            DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
            DType::F32 | DType::E4M3 => {
                return Err(invalid!(
                    "the cuBLASLt FP8 yardstick writes f16 or bf16 C, not {output}"
                ))
            }
        };
        // cuBLASLt takes 64-bit extents, its algorithms 32-bit ones.
        to_i32(m, "cuBLASLt m")?;
        let (ni, ki) = (
            to_i32(n, "cuBLASLt n")? as i64,
            to_i32(k, "cuBLASLt k")? as i64,
        );
        self.gpu.bind()?;
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(lt_error("cublasLtMatmulDescCreate"))?;
        let e4m3 = sys::cudaDataType::CUDA_R_8F_E4M3;
        let layouts = (|| {
            Ok::<_, KernelError>([
                lt::create_matrix_layout(e4m3, k as u64, n as u64, ki)
                    .map_err(lt_error("cublasLtMatrixLayoutCreate (W)"))?,
                lt::create_matrix_layout(e4m3, k as u64, m as u64, ki)
                    .map_err(lt_error("cublasLtMatrixLayoutCreate (A)"))?,
                lt::create_matrix_layout(c_type, n as u64, m as u64, ni)
                    .map_err(lt_error("cublasLtMatrixLayoutCreate (C)"))?,
            ])
        })();
        let layouts = match layouts {
            Ok(layouts) => layouts,
            Err(e) => {
                // SAFETY: created above, not yet owned by a plan.
                let _ = unsafe { lt::destroy_matmul_desc(desc) };
                return Err(e);
            }
        };
        let mut plan = Fp8GemmPlan {
            lt: self,
            m,
            n,
            k,
            output,
            desc,
            layouts,
            // Replaced below; a plan that fails before then is dropped, never run.
            // SAFETY: a plain C struct of integers.
            algo: unsafe { std::mem::zeroed() },
        };
        use sys::cublasLtMatmulDescAttributes_t as Attr;
        // SAFETY: the descriptor is live; each value has its attribute's C type: the two
        // operations are int32_t, the fast-accumulation flag int8_t (passed as an int32 it was
        // refused with CUBLAS_STATUS_INVALID_VALUE, at every plan).
        unsafe {
            set_desc_attribute(
                plan.desc,
                Attr::CUBLASLT_MATMUL_DESC_TRANSA,
                &(cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32),
            )?;
            set_desc_attribute(
                plan.desc,
                Attr::CUBLASLT_MATMUL_DESC_TRANSB,
                &(cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N as i32),
            )?;
            set_desc_attribute(plan.desc, Attr::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &1i8)?;
        }
        let pref = lt::create_matmul_pref().map_err(lt_error("cublasLtMatmulPreferenceCreate"))?;
        let workspace = WORKSPACE_BYTES as u64;
        // SAFETY: the preference is live; the attribute takes a uint64.
        let heuristic = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &workspace as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                lt::get_matmul_algo_heuristic(
                    self.handle,
                    plan.desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                )
            })
        };
        // SAFETY: created above, used no more.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        plan.algo = heuristic
            .map_err(lt_error("cublasLtMatmulAlgoGetHeuristic (e4m3 TN)"))?
            .algo;
        Ok(plan)
    }
}

impl Fp8GemmPlan<'_, '_> {
    /// Runs the plan on the Gpu's stream: `a` `[m, k]` and `w` `[n, k]` e4m3, one f32 scale
    /// each on the device, `c` `[m, n]` of the plan's output type.
    pub fn run(
        &self,
        a: E4m3Ptr,
        w: E4m3Ptr,
        a_scale: DevPtr,
        w_scale: DevPtr,
        c: DevPtr,
    ) -> Result<(), KernelError> {
        let (m, n, k) = (self.m, self.n, self.k);
        if a.len < m * k || w.len < n * k {
            return Err(invalid!(
                "cuBLASLt FP8: A needs {} values and W {}, the views hold {} and {}",
                m * k,
                n * k,
                a.len,
                w.len
            ));
        }
        a_scale.expect("cuBLASLt FP8 A scale", DType::F32, 1)?;
        w_scale.expect("cuBLASLt FP8 W scale", DType::F32, 1)?;
        c.expect("cuBLASLt FP8 C", self.output, m * n)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let gpu = self.lt.gpu;
        gpu.bind()?;
        use sys::cublasLtMatmulDescAttributes_t as Attr;
        // cuBLASLt's A is our W, its B our A.
        for (attr, scale) in [
            (Attr::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale.ptr),
            (Attr::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale.ptr),
        ] {
            // SAFETY: the descriptor is live; the attribute takes a device pointer (`void*`).
            unsafe { set_desc_attribute(self.desc, attr, &(scale as *const c_void)) }?;
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: every descriptor is live, the views were checked against the shape, the
        // workspace is this handle's, and the stream is the Gpu's.
        unsafe {
            lt::matmul(
                self.lt.handle,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                w.ptr as *const c_void,
                self.layouts[0],
                a.ptr as *const c_void,
                self.layouts[1],
                c.ptr as *const c_void,
                self.layouts[2],
                c.ptr as *mut c_void,
                self.layouts[2],
                &self.algo,
                self.lt.workspace.ptr as *mut c_void,
                WORKSPACE_BYTES,
                gpu.stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(lt_error("cublasLtMatmul (e4m3)"))
    }
}
