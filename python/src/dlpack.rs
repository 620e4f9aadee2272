//! Tensors handed over through DLPack (`__dlpack__` / `__dlpack_device__`, the Python array
//! API's exchange protocol): where a tensor lives, and for a CUDA tensor its device address,
//! shape and layout, read from the capsule without copying the data.
//!
//! The structs are DLPack's C ABI (dlpack.h, v0.8, the unversioned `"dltensor"` capsule that
//! `__dlpack__` returns when not asked for `max_version`): six plain fields, declared here
//! rather than through a crate, since the crates that wrap them each pin their own PyO3.

use crate::failure::{FailAs, Failure, Result};
use anyhow::anyhow;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};
use std::ffi::c_void;

/// DLDeviceType: host memory.
pub const DL_CPU: i32 = 1;
/// DLDeviceType: CUDA device memory.
pub const DL_CUDA: i32 = 2;
/// DLDataTypeCode: IEEE floating point.
const DL_FLOAT: u8 = 2;

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    /// Null for a compact row-major tensor; else one stride (in elements) per dimension.
    strides: *const i64,
    byte_offset: u64,
}

/// The producer's fields past `dl_tensor` are its own: its capsule destructor reads them.
#[repr(C)]
#[allow(dead_code)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

// The layouts dlpack.h gives on a 64-bit target, what a producer writes: checked when this
// compiles (the extension module has no Rust test harness).
const _: () = {
    assert!(std::mem::size_of::<DlDevice>() == 8);
    assert!(std::mem::size_of::<DlDataType>() == 4);
    assert!(std::mem::offset_of!(DlTensor, device) == 8);
    assert!(std::mem::offset_of!(DlTensor, ndim) == 16);
    assert!(std::mem::offset_of!(DlTensor, dtype) == 20);
    assert!(std::mem::offset_of!(DlTensor, shape) == 24);
    assert!(std::mem::offset_of!(DlTensor, strides) == 32);
    assert!(std::mem::offset_of!(DlTensor, byte_offset) == 40);
    assert!(std::mem::size_of::<DlTensor>() == 48);
    assert!(std::mem::size_of::<DlManagedTensor>() == 64);
};

/// Where `object` lives by `__dlpack_device__` (device type, device id), or `None` when it
/// does not speak DLPack (a numpy array does, as host memory).
pub fn device_of(object: &Bound<'_, PyAny>) -> Result<Option<(i32, i32)>> {
    if !object.hasattr("__dlpack_device__").or_runtime()? {
        return Ok(None);
    }
    let device: (i32, i32) = object
        .call_method0("__dlpack_device__")
        .and_then(|d| d.extract())
        .map_err(|e| Failure::Value(anyhow!("__dlpack_device__() failed: {e}")))?;
    Ok(Some(device))
}

/// A contiguous float32 CUDA tensor, borrowed: `capsule` keeps it alive (and frees it when
/// dropped, through the producer's deleter, as the protocol has it for a capsule the
/// consumer has not renamed).
pub struct CudaF32Tensor<'py> {
    pub ptr: u64,
    pub shape: Vec<usize>,
    _capsule: Bound<'py, PyCapsule>,
}

/// Runs `export` with torch's current device set to `device_id` when `object` is a torch
/// tensor: torch exports a CUDA tensor with a stream only from its own device ("Can't export
/// tensors on a different CUDA device index"), and a model on cuda:1 (or a Model on several
/// devices) takes tensors on devices other than the caller's current one.
fn on_torch_device<'py, T>(
    object: &Bound<'py, PyAny>,
    device_id: i32,
    export: impl FnOnce() -> PyResult<T>,
) -> PyResult<T> {
    let module: String = object.get_type().getattr("__module__")?.extract()?;
    if module != "torch" && !module.starts_with("torch.") {
        return export();
    }
    let guard = object
        .py()
        .import("torch")?
        .getattr("cuda")?
        .call_method1("device", (device_id,))?;
    guard.call_method0("__enter__")?;
    let exported = export();
    let none = object.py().None();
    guard.call_method1("__exit__", (&none, &none, &none))?;
    exported
}

/// Takes `object`'s DLPack capsule, asking its producer to order the tensor's writes before
/// `stream` (a CUstream handle), and reads a float32, compact row-major CUDA tensor out of
/// it; anything else is a `ValueError` saying what to change. `device_id` is the CUDA device
/// the object said it is on (`__dlpack_device__`).
pub fn cuda_f32_tensor<'py>(
    object: &Bound<'py, PyAny>,
    stream: u64,
    device_id: i32,
) -> Result<CudaF32Tensor<'py>> {
    let kwargs = PyDict::new(object.py());
    kwargs.set_item("stream", stream).or_runtime()?;
    let capsule = on_torch_device(object, device_id, || {
        object.call_method("__dlpack__", (), Some(&kwargs))
    })
    .map_err(|e| Failure::Value(anyhow!("__dlpack__(stream=...) failed: {e}")))?;
    let capsule = capsule
        .downcast_into::<PyCapsule>()
        .map_err(|_| Failure::Value(anyhow!("__dlpack__() did not return a capsule")))?;
    let name = capsule.name().or_runtime()?;
    if name.map(|n| n.to_bytes()) != Some(b"dltensor".as_slice()) {
        return Err(Failure::Value(anyhow!(
            "__dlpack__() returned a capsule named {name:?}, not \"dltensor\""
        )));
    }
    let managed = capsule.pointer() as *const DlManagedTensor;
    if managed.is_null() {
        return Err(Failure::Value(anyhow!(
            "__dlpack__() returned an empty capsule"
        )));
    }
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor, alive as long as the capsule.
    let tensor = unsafe { &(*managed).dl_tensor };
    if tensor.device.device_type != DL_CUDA {
        return Err(Failure::Value(anyhow!(
            "the tensor's DLPack device type is {}, not CUDA ({DL_CUDA})",
            tensor.device.device_type
        )));
    }
    let dtype = &tensor.dtype;
    if (dtype.code, dtype.bits, dtype.lanes) != (DL_FLOAT, 32, 1) {
        let what = match (dtype.code, dtype.bits) {
            (DL_FLOAT, 16) => "float16".to_string(),
            (4, 16) => "bfloat16".to_string(),
            (code, bits) => format!("type code {code} of {bits} bits"),
        };
        return Err(Failure::Value(anyhow!(
            "pixel_values on the GPU must be float32; got {what} (convert it with .float())"
        )));
    }
    let ndim = usize::try_from(tensor.ndim).unwrap_or(0);
    // SAFETY: `shape` holds `ndim` extents (and `strides`, when not null, `ndim` strides).
    let shape: Vec<i64> = unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }.to_vec();
    if shape.iter().any(|&e| e < 0) {
        return Err(Failure::Value(anyhow!(
            "the tensor has a negative extent: {shape:?}"
        )));
    }
    let shape: Vec<usize> = shape.iter().map(|&e| e as usize).collect();
    if !tensor.strides.is_null() {
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let mut expected = 1i64;
        for (axis, &extent) in shape.iter().enumerate().rev() {
            // A stride of an axis of extent 1 is never used: any value is contiguous.
            if extent > 1 && strides[axis] != expected {
                return Err(Failure::Value(anyhow!(
                    "pixel_values on the GPU must be contiguous; got strides {strides:?} for \
                     shape {shape:?} (call .contiguous())"
                )));
            }
            expected *= extent as i64;
        }
    }
    Ok(CudaF32Tensor {
        ptr: tensor.data as u64 + tensor.byte_offset,
        shape,
        _capsule: capsule,
    })
}
