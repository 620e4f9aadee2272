//! The activation launchers: a standalone activation and a bias-plus-activation pass, for the
//! parts of a graph that fusion does not absorb (and, for the second, for the benchmark that
//! times cuBLAS followed by the epilogue it cannot fuse).

use crate::cuda::{
    invalid, kernel_params, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::types::{Activation, DType};

const SOURCE: &str = include_str!("activation.cu");
const THREADS: u32 = 256;

kernel_params! {
    /// activation_program's parameters.
    struct ActivationParams {
        x: const_ptr,
        out: mut_ptr,
        n: i64,
    }
}

kernel_params! {
    /// bias_activation_program's parameters.
    struct BiasActivationParams {
        x: const_ptr,
        bias: const_ptr,
        out: mut_ptr,
        rows: i32,
        cols: i32,
    }
}

kernel_params! {
    /// swiglu_program's parameters.
    struct SwigluParams {
        x: const_ptr,
        out: mut_ptr,
        rows: i64,
        cols: i32,
    }
}

fn activation_instantiation(dtype: DType, act: Activation) -> Instantiation {
    Instantiation {
        name: format!("activation_{}_{}", act.short_name(), dtype.name()),
        family: "activation",
        source: SOURCE,
        headers: &[],
        function: "activation_program",
        template_args: vec![dtype.cuda_type().into(), act.cuda_name().into()],
        params: ActivationParams {
            x: DevPtr::of_type(dtype),
            out: DevPtr::of_type(dtype),
            n: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// The bias-plus-activation kernel's meta-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BiasActivationConfig {
    pub dtype: DType,
    pub act: Activation,
    /// Elements per access: 16 bytes' worth when every row and pointer allows it, else 1.
    pub vec: u32,
}

impl BiasActivationConfig {
    /// 16-byte vectors need every row to start on a 16-byte boundary: `cols` a multiple of
    /// the vector and every pointer aligned (bias rows are the bias itself).
    pub fn select(dtype: DType, act: Activation, cols: usize, pointers: &[DevPtr]) -> Self {
        let wide = 16 / dtype.size_bytes();
        let aligned = cols.is_multiple_of(wide) && pointers.iter().all(|p| p.is_aligned(16));
        BiasActivationConfig {
            dtype,
            act,
            vec: if aligned { wide as u32 } else { 1 },
        }
    }

    pub fn instantiation(&self) -> Instantiation {
        let d = self.dtype;
        Instantiation {
            name: format!(
                "bias_activation_{}_{}_v{}",
                self.act.short_name(),
                d.name(),
                self.vec
            ),
            family: "activation",
            source: SOURCE,
            headers: &[],
            function: "bias_activation_program",
            template_args: vec![
                d.cuda_type().into(),
                self.act.cuda_name().into(),
                self.vec.to_string(),
            ],
            params: BiasActivationParams {
                x: DevPtr::of_type(d),
                bias: DevPtr::of_type(d),
                out: DevPtr::of_type(d),
                rows: 0,
                cols: 0,
            }
            .params(),
            block_threads: THREADS,
            min_blocks_per_sm: 0,
            arch: ArchRequirement::AtLeast(7, 0),
        }
    }
}

fn swiglu_instantiation(dtype: DType) -> Instantiation {
    Instantiation {
        name: format!("swiglu_{}", dtype.name()),
        family: "activation",
        source: SOURCE,
        headers: &[],
        function: "swiglu_program",
        template_args: vec![dtype.cuda_type().into()],
        params: SwigluParams {
            x: DevPtr::of_type(dtype),
            out: DevPtr::of_type(dtype),
            rows: 0,
            cols: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        all.push(swiglu_instantiation(dtype));
        for act in Activation::ALL {
            all.push(activation_instantiation(dtype, act));
            for vec in [16 / dtype.size_bytes() as u32, 1] {
                all.push(BiasActivationConfig { dtype, act, vec }.instantiation());
            }
        }
    }
    all
}

/// `out = act(x)` element by element (graphs run without epilogue fusion need it).
pub fn activation(
    gpu: &Gpu,
    dtype: DType,
    act: Activation,
    x: DevPtr,
    n: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    x.expect("activation input", dtype, n)?;
    out.expect("activation output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    // Enough blocks to fill the machine; the loop covers the rest.
    let blocks = (n as u64).div_ceil(THREADS as u64).min(65_535) as u32;
    gpu.launch(
        &activation_instantiation(dtype, act),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &ActivationParams {
            x,
            out,
            n: to_i64(n)?,
        }
        .args(),
    )
}

/// SwiGLU's gate (as `cpu::swiglu`): `x` is `[rows, 2·cols]`, `out[r, c] = silu(x[r, c]) ·
/// x[r, cols + c]`, `out` `[rows, cols]`.
pub fn swiglu(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("swiglu {rows} x {cols} overflows"))?;
    x.expect("swiglu input", dtype, 2 * n)?;
    out.expect("swiglu output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    let blocks = (n as u64).div_ceil(THREADS as u64).min(65_535) as u32;
    gpu.launch(
        &swiglu_instantiation(dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &SwigluParams {
            x,
            out,
            rows: to_i64(rows)?,
            cols: to_i32(cols, "swiglu columns")?,
        }
        .args(),
    )
}

/// `out[r, c] = act(x[r, c] + bias[c])` for `rows` rows of `cols` (as
/// `cpu::bias_activation`); `out` may be `x`. The bias and activation of a linear layer as
/// a pass of its own: the benchmarks add it after cuBLAS, which cannot fuse our epilogue.
#[allow(clippy::too_many_arguments)]
pub fn bias_activation(
    gpu: &Gpu,
    dtype: DType,
    act: Activation,
    x: DevPtr,
    bias: DevPtr,
    rows: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("bias_activation {rows} x {cols} overflows"))?;
    x.expect("bias_activation input", dtype, n)?;
    bias.expect("bias_activation bias", dtype, cols)?;
    out.expect("bias_activation output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    let rows_i32 = to_i32(rows, "bias_activation rows")?;
    let cols_i32 = to_i32(cols, "bias_activation cols")?;
    let config = BiasActivationConfig::select(dtype, act, cols, &[x, bias, out]);
    // One thread per vector up to 65,535 blocks; the grid-stride loop covers the rest.
    let vectors = (n / config.vec as usize) as u64;
    let blocks = vectors.div_ceil(THREADS as u64).min(65_535) as u32;
    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &BiasActivationParams {
            x,
            bias,
            out,
            rows: rows_i32,
            cols: cols_i32,
        }
        .args(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_activation_selection_only_picks_registered_instantiations() {
        let registered = instantiations();
        for dtype in DType::ALL {
            for act in Activation::ALL {
                for cols in [1usize, 7, 8, 768, 1000, 3072] {
                    for address in [0u64, 2, 4, 16] {
                        let p = DevPtr {
                            ptr: 0x10000 + address,
                            len: 1,
                            dtype,
                        };
                        let q = DevPtr {
                            ptr: 0x20000,
                            len: 1,
                            dtype,
                        };
                        let config = BiasActivationConfig::select(dtype, act, cols, &[p, q, q]);
                        let wide = 16 / dtype.size_bytes();
                        assert_eq!(
                            config.vec > 1,
                            address % 16 == 0 && cols % wide == 0,
                            "{config:?} cols {cols} address {address}"
                        );
                        assert!(registered.contains(&config.instantiation()), "{config:?}");
                    }
                }
            }
        }
    }
}
