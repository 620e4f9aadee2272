//! Quantisation launcher: checks the operands, picks quantize.cu's entry point by the scale's
//! kind and, for per-row scales, a row layout (`crate::rows`) by shape and alignment.

use super::{ActivationScale, QuantizeProblem, E4M3_HEADER};
use crate::cuda::{
    invalid, kernel_params, to_i32, to_i64, ArchRequirement, DevPtr, E4m3Ptr, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::rows::RowConfig;
use crate::types::DType;

const SOURCE: &str = include_str!("quantize.cu");
const HEADERS: &[(&str, &str)] = &[E4M3_HEADER];

/// `cvt.rn.satfinite.e4m3x2.f32` (e4m3.cuh) needs compute capability 8.9 (Ada, Hopper).
pub(crate) const E4M3_ARCH: ArchRequirement = ArchRequirement::AtLeast(8, 9);

/// Threads per block of the per-tensor (element-wise) entry point.
const STATIC_THREADS: u32 = 256;

kernel_params! {
    /// quantize_rows_dynamic's parameters.
    struct DynamicParams {
        x: const_ptr,
        codes: mut_byte_ptr,
        scales: mut_ptr,
        rows: i32,
        cols: i32,
    }
}

kernel_params! {
    /// quantize_static's parameters.
    struct StaticParams {
        x: const_ptr,
        codes: mut_byte_ptr,
        scale: const_ptr,
        elements: i64,
    }
}

/// The per-row entry point for one row layout.
fn dynamic_instantiation(input: DType, config: RowConfig) -> Instantiation {
    let mut template_args = vec![input.cuda_type().to_string()];
    template_args.extend(config.template_args());
    Instantiation {
        name: format!("quantize_rows_{}_{}", input.name(), config.tag()),
        family: "quantize",
        source: SOURCE,
        headers: HEADERS,
        function: "quantize_rows_dynamic",
        template_args,
        params: DynamicParams {
            x: DevPtr::of_type(input),
            codes: 0,
            scales: DevPtr::of_type(DType::F32),
            rows: 0,
            cols: 0,
        }
        .params(),
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
        arch: E4M3_ARCH,
    }
}

/// The per-tensor entry point, `vec` elements an access (16 bytes' worth, or 1).
fn static_instantiation(input: DType, vec: u32) -> Instantiation {
    Instantiation {
        name: format!("quantize_tensor_{}_v{vec}_t{STATIC_THREADS}", input.name()),
        family: "quantize",
        source: SOURCE,
        headers: HEADERS,
        function: "quantize_static",
        template_args: vec![input.cuda_type().to_string(), vec.to_string()],
        params: StaticParams {
            x: DevPtr::of_type(input),
            codes: 0,
            scale: DevPtr::of_type(DType::F32),
            elements: 0,
        }
        .params(),
        block_threads: STATIC_THREADS,
        min_blocks_per_sm: 0,
        arch: E4M3_ARCH,
    }
}

/// Elements a vector access of `input`: 16 bytes' worth.
fn wide_vec(input: DType) -> u32 {
    16 / input.size_bytes() as u32
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    DType::ALL
        .into_iter()
        .flat_map(|input| {
            RowConfig::all(input)
                .into_iter()
                .map(move |config| dynamic_instantiation(input, config))
                .chain([wide_vec(input), 1].map(|vec| static_instantiation(input, vec)))
        })
        .collect()
}

/// Whether x and the codes allow 16-byte vector accesses (cols is a multiple of 16, so every
/// row then starts aligned too).
fn aligned(x: DevPtr, codes: E4m3Ptr) -> bool {
    x.is_aligned(16) && codes.ptr.is_multiple_of(16)
}

/// Quantises `p.rows` rows of `p.cols` values of `p.input` (x) into e4m3 `codes` (one a value)
/// and, per row, `scales` (f32, one a row, written); per tensor, `scales` holds the one given
/// scale, read. Codes and scales are `cpu::quantize_rows`'s, bit for bit (the module's
/// documentation has the formulas). Needs compute capability 8.9 or later, as the FP8 matmul
/// that reads them.
pub fn quantize_rows(
    gpu: &Gpu,
    p: &QuantizeProblem,
    x: DevPtr,
    codes: E4m3Ptr,
    scales: DevPtr,
) -> Result<(), KernelError> {
    p.check().map_err(KernelError::InvalidArgument)?;
    let elements = p.elements().map_err(KernelError::InvalidArgument)?;
    if p.input != x.dtype {
        return Err(invalid!(
            "e4m3 quantisation of {} values: x holds {}",
            p.input,
            x.dtype
        ));
    }
    x.expect("quantisation input", p.input, elements)?;
    if codes.len < elements {
        return Err(invalid!(
            "quantisation codes need {elements} e4m3 elements, the view has {}",
            codes.len
        ));
    }
    let scales_what = match p.scale {
        ActivationScale::PerRow => "per-row quantisation scales",
        ActivationScale::PerTensor => "the per-tensor quantisation scale",
    };
    scales.expect(scales_what, DType::F32, p.scales())?;
    if p.rows == 0 {
        return Ok(());
    }
    let vec = if aligned(x, codes) {
        wide_vec(p.input)
    } else {
        1
    };
    match p.scale {
        ActivationScale::PerRow => {
            let (rows, cols) = (
                to_i32(p.rows, "quantisation rows")?,
                to_i32(p.cols, "quantisation cols")?,
            );
            let config = RowConfig::for_alignment(p.input, p.cols, aligned(x, codes));
            // As the layernorm: one block per ROWS rows, up to as many blocks as the GPU runs
            // at once (a full SM's 2048 threads each); past that, each group walks several rows.
            let resident =
                gpu.multiprocessors() as usize * (2048 / config.block_threads() as usize).max(1);
            gpu.launch(
                &dynamic_instantiation(p.input, config),
                LaunchDims {
                    grid: (config.blocks(p.rows).min(resident) as u32, 1, 1),
                    block: config.block_threads(),
                    shared_bytes: 0,
                    cluster: 1,
                },
                &DynamicParams {
                    x,
                    codes: codes.ptr,
                    scales,
                    rows,
                    cols,
                }
                .args(),
            )
        }
        ActivationScale::PerTensor => {
            // A vector a thread, up to what the GPU runs at once; past that, a thread walks
            // several vectors.
            let vectors = elements / vec as usize;
            let resident = gpu.multiprocessors() as usize * (2048 / STATIC_THREADS as usize);
            let blocks = vectors.div_ceil(STATIC_THREADS as usize).min(resident);
            gpu.launch(
                &static_instantiation(p.input, vec),
                LaunchDims {
                    grid: (blocks as u32, 1, 1),
                    block: STATIC_THREADS,
                    shared_bytes: 0,
                    cluster: 1,
                },
                &StaticParams {
                    x,
                    codes: codes.ptr,
                    scale: scales,
                    elements: to_i64(elements)?,
                }
                .args(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_the_launcher_picks_is_registered() {
        let registered = instantiations();
        let names: Vec<&str> = registered.iter().map(|i| i.name.as_str()).collect();
        for input in DType::ALL {
            for cols in [16, 64, 768, 1024, 3072, 4096, 16384, 16400, 65536] {
                for aligned in [true, false] {
                    let config = RowConfig::for_alignment(input, cols, aligned);
                    let name = dynamic_instantiation(input, config).name;
                    assert!(names.contains(&name.as_str()), "{name} is not registered");
                }
            }
            for vec in [wide_vec(input), 1] {
                let name = static_instantiation(input, vec).name;
                assert!(names.contains(&name.as_str()), "{name} is not registered");
            }
        }
        assert!(registered.iter().all(|i| i.arch == E4M3_ARCH));
    }
}
