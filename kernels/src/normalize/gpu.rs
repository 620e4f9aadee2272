//! The row-normalisation launcher: normalize.cu, 8 rows (warps) a block.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("normalize.cu");
const WARPS: u32 = 8;

kernel_params! {
    /// l2_normalize_rows's parameters.
    struct NormalizeParams {
        x: const_ptr,
        out: mut_ptr,
        rows: i32,
        cols: i32,
    }
}

fn instantiation(input: DType, output: DType) -> Instantiation {
    let name = if input == output {
        format!("l2_normalize_{}", input.name())
    } else {
        format!("l2_normalize_{}_{}", input.name(), output.name())
    };
    Instantiation {
        name,
        family: "normalize",
        source: SOURCE,
        headers: &[],
        function: "l2_normalize_rows",
        template_args: vec![input.cuda_type().into(), output.cuda_type().into()],
        params: NormalizeParams {
            x: DevPtr::of_type(input),
            out: DevPtr::of_type(output),
            rows: 0,
            cols: 0,
        }
        .params(),
        block_threads: WARPS * 32,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// Every (input, output) pair of a run in `dtype`: each of the two is `dtype` or f32.
fn pairs(dtype: DType) -> Vec<(DType, DType)> {
    let mut all = vec![(dtype, dtype)];
    if dtype != DType::F32 {
        all.extend([
            (DType::F32, dtype),
            (dtype, DType::F32),
            (DType::F32, DType::F32),
        ]);
    }
    all
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all: Vec<Instantiation> = Vec::new();
    for dtype in DType::ALL {
        for (input, output) in pairs(dtype) {
            let inst = instantiation(input, output);
            if !all.iter().any(|i| i.name == inst.name) {
                all.push(inst);
            }
        }
    }
    all
}

/// `out[r, :] = x[r, :] / ||x[r, :]||` for `rows` rows of `cols` (as `cpu::l2_normalize`), in
/// a run of `dtype`: x and out each hold `dtype` or f32.
pub fn l2_normalize(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    if !pairs(dtype).contains(&(x.dtype, out.dtype)) {
        return Err(invalid!(
            "l2 normalisation of {} into {} in a {dtype} run: each holds {dtype} or f32",
            x.dtype,
            out.dtype
        ));
    }
    let elements = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("l2 normalisation of {rows} x {cols} overflows"))?;
    x.expect("l2 normalisation input", x.dtype, elements)?;
    out.expect("l2 normalisation output", out.dtype, elements)?;
    if rows == 0 {
        return Ok(());
    }
    if cols == 0 {
        return Err(invalid!("l2 normalisation of rows of 0 elements"));
    }
    let blocks = u32::try_from(rows.div_ceil(WARPS as usize))
        .map_err(|_| invalid!("l2 normalisation of {rows} rows"))?;
    gpu.launch(
        &instantiation(x.dtype, out.dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: WARPS * 32,
            shared_bytes: 0,
            cluster: 1,
        },
        &NormalizeParams {
            x,
            out,
            rows: to_i32(rows, "rows")?,
            cols: to_i32(cols, "columns")?,
        }
        .args(),
    )
}
