//! What benchmarks need from a [`Gpu`] besides the ops: facts about the device (L2 size,
//! driver version) and a plain device-to-device copy, the yardstick for memory-bound kernels.

use super::device::Gpu;
use super::error::{invalid, KernelError};
use super::memory::DevPtr;
use crate::types::DType;
use cudarc::driver::sys::CUdevice_attribute;

impl Gpu {
    /// The size of the L2 cache, bytes. Benchmarks rotate through more input than this (twice
    /// over) so that no repetition finds its operands left in L2 by the one before.
    pub fn l2_cache_bytes(&self) -> Result<usize, KernelError> {
        self.context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map(|bytes| bytes.max(0) as usize)
            .map_err(|e| KernelError::driver("cuDeviceGetAttribute(L2 cache size)", e))
    }

    /// The CUDA version the driver supports, as (major, minor): 13000 from cuDriverGetVersion
    /// is (13, 0). Not the driver's release number (580.x), which only the kernel module tells.
    pub fn driver_version(&self) -> Result<(u32, u32), KernelError> {
        let mut version = 0i32;
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        status
            .result()
            .map_err(|e| KernelError::driver("cuDriverGetVersion", e))?;
        let version = version.max(0) as u32;
        Ok((version / 1000, (version % 1000) / 10))
    }

    /// The device's PCI address as the driver writes it ("0000:19:00.0"): what NVML finds the
    /// same device by, whatever order either numbers the GPUs in.
    pub fn pci_bus_id(&self) -> Result<String, KernelError> {
        let mut text = [0 as std::ffi::c_char; 32];
        let status = unsafe {
            cudarc::driver::sys::cuDeviceGetPCIBusId(
                text.as_mut_ptr(),
                text.len() as i32,
                self.context.cu_device(),
            )
        };
        status
            .result()
            .map_err(|e| KernelError::driver("cuDeviceGetPCIBusId", e))?;
        let text = unsafe { std::ffi::CStr::from_ptr(text.as_ptr()) };
        Ok(text.to_string_lossy().into_owned())
    }

    /// `out[..n] = src[..n]` with cuMemcpyDtoDAsync on the Gpu's stream: moves the bytes with
    /// no kernel of ours, the yardstick the memory-bound kernels are measured against. The two
    /// ranges must not overlap.
    pub fn copy(
        &self,
        dtype: DType,
        src: DevPtr,
        n: usize,
        out: DevPtr,
    ) -> Result<(), KernelError> {
        src.expect("copy source", dtype, n)?;
        out.expect("copy destination", dtype, n)?;
        if n == 0 {
            return Ok(());
        }
        let bytes = n * dtype.size_bytes();
        let overlap = src.ptr < out.ptr + bytes as u64 && out.ptr < src.ptr + bytes as u64;
        if overlap {
            return Err(invalid!(
                "copy of {bytes} bytes from {:#x} to {:#x}: the ranges overlap",
                src.ptr,
                out.ptr
            ));
        }
        self.bind()?;
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                out.ptr,
                src.ptr,
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| KernelError::driver("cuMemcpyDtoDAsync", e))
    }
}
