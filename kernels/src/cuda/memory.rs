//! Device memory: owned buffers and the typed, checked views kernels are launched with.

use super::error::{invalid, KernelError};
use crate::types::DType;
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The device memory a `Gpu` has allocated and not yet had back (every [`DeviceBuffer`] it
/// made and that is still alive), and the highest that total has reached since the last
/// reset: an account of our own allocations, next to the driver's view of the whole device
/// (`Gpu::memory_info`), which also holds the context, the loaded modules and CUDA graphs.
#[derive(Debug, Default)]
pub(crate) struct AllocationCounter {
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl AllocationCounter {
    pub(crate) fn add(&self, bytes: usize) {
        let now = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn remove(&self, bytes: usize) {
        self.live.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> AllocatedBytes {
        AllocatedBytes {
            live: self.live.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
        }
    }

    /// Starts a new peak from what is allocated now.
    pub(crate) fn reset_peak(&self) {
        self.peak
            .store(self.live.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Bytes of device memory allocated through one `Gpu` ([`Gpu::allocated_bytes`]).
///
/// [`Gpu::allocated_bytes`]: super::Gpu::allocated_bytes
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatedBytes {
    /// Held now.
    pub live: usize,
    /// The most held at once since the Gpu was opened or its peak last reset.
    pub peak: usize,
}

/// Device memory owned by one `Gpu`; freed (stream-ordered) when dropped.
pub struct DeviceBuffer {
    /// The allocation, freed when the buffer drops; `None` for a zero-byte buffer (CUDA has
    /// no empty allocations). Kernels use `ptr`.
    pub(crate) _allocation: Option<CudaSlice<u8>>,
    pub(crate) ptr: u64,
    pub(crate) len_bytes: usize,
    /// Which `Gpu` allocated it, so a buffer is never used with another device's stream.
    pub(crate) owner: usize,
    /// The account of the Gpu that allocated it, which it leaves when dropped (`None` for a
    /// zero-byte buffer).
    pub(crate) counter: Option<Arc<AllocationCounter>>,
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(counter) = &self.counter {
            counter.remove(self.len_bytes);
        }
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}

impl DeviceBuffer {
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// A view of `len` elements of `dtype` starting `offset_bytes` into the buffer.
    /// The offset must be a multiple of the element size, and the view must fit.
    pub fn view(
        &self,
        offset_bytes: usize,
        len: usize,
        dtype: DType,
    ) -> Result<DevPtr, KernelError> {
        let size = dtype.size_bytes();
        if !offset_bytes.is_multiple_of(size) {
            return Err(invalid!(
                "view offset {offset_bytes} bytes is not a multiple of the {dtype} element size {size}"
            ));
        }
        let end = len
            .checked_mul(size)
            .and_then(|bytes| bytes.checked_add(offset_bytes))
            .ok_or_else(|| {
                invalid!("view of {len} {dtype} elements at byte {offset_bytes} overflows")
            })?;
        if end > self.len_bytes {
            return Err(invalid!(
                "view of {len} {dtype} elements at byte {offset_bytes} ends at byte {end}, \
                 past the buffer's {} bytes",
                self.len_bytes
            ));
        }
        Ok(DevPtr {
            ptr: self.ptr + offset_bytes as u64,
            len,
            dtype,
        })
    }

    /// Checks a byte range against the buffer.
    pub(crate) fn check_range(
        &self,
        offset_bytes: usize,
        bytes: usize,
        what: &str,
    ) -> Result<(), KernelError> {
        match offset_bytes.checked_add(bytes) {
            Some(end) if end <= self.len_bytes => Ok(()),
            _ => Err(invalid!(
                "{what} of {bytes} bytes at offset {offset_bytes} does not fit a buffer of {} bytes",
                self.len_bytes
            )),
        }
    }
}

/// E4M3 codes on the device (see `crate::e4m3`): `len` bytes from address `ptr`. A type of
/// its own rather than a [`DType`]: no op but the FP8 matmul reads them, and nothing writes
/// them but it and uploads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E4m3Ptr {
    pub ptr: u64,
    /// Elements, which are bytes.
    pub len: usize,
}

impl E4m3Ptr {
    /// A view of `len` e4m3 values `offset_bytes` into `buffer`, which must hold them.
    pub fn of(
        buffer: &DeviceBuffer,
        offset_bytes: usize,
        len: usize,
    ) -> Result<E4m3Ptr, KernelError> {
        buffer.check_range(offset_bytes, len, "an e4m3 view")?;
        Ok(E4m3Ptr {
            ptr: buffer.ptr + offset_bytes as u64,
            len,
        })
    }
}

/// A typed view of device memory: `len` elements of `dtype` from address `ptr`.
/// Ops check every view's dtype and length against the problem before they launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevPtr {
    pub ptr: u64,
    /// Elements, not bytes.
    pub len: usize,
    pub dtype: DType,
}

impl DevPtr {
    /// A view that only says its storage type (address 0, no elements): what an
    /// instantiation's declaration reads of a pointer parameter (`kernel_params!`).
    pub fn of_type(dtype: DType) -> DevPtr {
        DevPtr {
            ptr: 0,
            len: 0,
            dtype,
        }
    }

    /// Whether the address is a multiple of `bytes` (vector loads need 16).
    pub fn is_aligned(&self, bytes: u64) -> bool {
        self.ptr.is_multiple_of(bytes)
    }

    /// Checks that the view holds `dtype` and at least `need` elements; `what` names the
    /// operand in the error.
    pub fn expect(&self, what: &str, dtype: DType, need: usize) -> Result<(), KernelError> {
        if self.dtype != dtype {
            return Err(invalid!(
                "{what} holds {}, the op wants {dtype}",
                self.dtype
            ));
        }
        if self.len < need {
            return Err(invalid!(
                "{what} needs {need} {dtype} elements, the view has {}",
                self.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_buffer(len_bytes: usize) -> DeviceBuffer {
        DeviceBuffer {
            _allocation: None,
            ptr: 0x1000,
            len_bytes,
            owner: 0,
            counter: None,
        }
    }

    #[test]
    fn views_are_checked() {
        let buffer = fake_buffer(64);
        let v = buffer.view(16, 24, DType::F16).unwrap();
        assert_eq!((v.ptr, v.len, v.dtype), (0x1010, 24, DType::F16));
        assert!(
            buffer.view(16, 25, DType::F16).is_err(),
            "one element past the end"
        );
        assert!(buffer.view(2, 1, DType::F32).is_err(), "misaligned for f32");
        assert!(
            buffer.view(64, 0, DType::F32).is_ok(),
            "an empty view at the end"
        );
        assert!(
            buffer.view(0, usize::MAX, DType::F32).is_err(),
            "overflow is an error, not a wrap"
        );
    }

    #[test]
    fn buffers_leave_the_account_when_dropped_and_the_peak_stays() {
        let counter = Arc::new(AllocationCounter::default());
        let buffer = |bytes| {
            counter.add(bytes);
            DeviceBuffer {
                _allocation: None,
                ptr: 0x1000,
                len_bytes: bytes,
                owner: 0,
                counter: Some(Arc::clone(&counter)),
            }
        };
        let a = buffer(100);
        let b = buffer(50);
        assert_eq!(
            counter.get(),
            AllocatedBytes {
                live: 150,
                peak: 150
            }
        );
        drop(a);
        assert_eq!(
            counter.get(),
            AllocatedBytes {
                live: 50,
                peak: 150
            }
        );
        counter.reset_peak();
        let c = buffer(20);
        drop(c);
        assert_eq!(counter.get(), AllocatedBytes { live: 50, peak: 70 });
        drop(b);
        assert_eq!(counter.get().live, 0);
    }

    #[test]
    fn expect_names_the_operand() {
        let v = fake_buffer(64).view(0, 16, DType::F32).unwrap();
        assert!(v.expect("x", DType::F32, 16).is_ok());
        let e = v.expect("gamma", DType::F16, 4).unwrap_err().to_string();
        assert!(e.contains("gamma") && e.contains("f32"), "{e}");
        let e = v.expect("x", DType::F32, 17).unwrap_err().to_string();
        assert!(e.contains("17"), "{e}");
    }
}
