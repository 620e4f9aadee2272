//! TMA tensor maps: the 128 opaque bytes `cuTensorMapEncodeTiled` writes, passed to a kernel
//! as a `__grid_constant__ TmaDescriptor` ([`crate::cuda::KernelArg::TensorMap`]).

use super::error::KernelError;
use crate::types::DType;

/// How TMA lays a box's rows out in shared memory: the swizzle span in bytes (the box's inner
/// dimension may be at most that wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Swizzle {
    Bytes32,
    Bytes64,
    Bytes128,
}

/// What a tensor map's elements are: a storage type, or bytes (E4M3 codes, which TMA copies
/// as 8-bit integers: it never converts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapElement {
    Storage(DType),
    Byte,
}

impl From<DType> for MapElement {
    fn from(dtype: DType) -> MapElement {
        MapElement::Storage(dtype)
    }
}

/// A tiled tensor map of rank `dims.len()` (1 to 5) over the tensor at `base` (bytes, 16-byte
/// aligned): `dims` elements per dimension, innermost first and contiguous; `strides` the byte
/// strides of the outer dimensions (multiples of 16); boxes of `boxes` elements, zero-filled
/// wherever they reach past `dims`.
pub(crate) fn encode_tiled(
    element: impl Into<MapElement>,
    base: u64,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
    swizzle: Swizzle,
) -> Result<[u64; 16], KernelError> {
    use cudarc::driver::sys::{
        cuTensorMapEncodeTiled, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
        CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
    };
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(KernelError::InvalidArgument(format!(
            "a tensor map takes 1 to 5 dims with one stride fewer and a box extent each: {} dims, \
             {} strides, {} box extents",
            rank,
            strides.len(),
            boxes.len()
        )));
    }
    let data_type = match element.into() {
        MapElement::Storage(DType::F16) => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        MapElement::Storage(DType::BF16) => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        MapElement::Storage(DType::F32) => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        MapElement::Byte | MapElement::Storage(DType::E4M3) => {
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8
        }
    };
    let swizzle = match swizzle {
        Swizzle::Bytes32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::Bytes64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::Bytes128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let element_strides = [1u32; 5];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: `dims` and `boxes` have `rank` entries, `strides` rank - 1, `element_strides` at
    // least rank; `map` is the output.
    let result = unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            rank as u32,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    result
        .result()
        .map_err(|e| KernelError::driver("cuTensorMapEncodeTiled", e))?;
    // SAFETY: the driver wrote the map.
    Ok(unsafe { map.assume_init() }.opaque)
}
