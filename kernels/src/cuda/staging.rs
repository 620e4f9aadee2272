//! Overlapped host transfers: page-locked host memory, a second stream for host-to-device
//! copies, and events to order the two streams and to wait on from the host.
//!
//! The compute stream runs kernels and the forward pass; the copy stream carries uploads from
//! page-locked memory, so that the copy of the next batch runs while the current one computes.
//! Copies from ordinary (pageable) memory are correct too, but the driver stages them and they
//! do not overlap.

use super::device::{Gpu, Stream};
use super::error::KernelError;
use cudarc::driver::sys::{CUevent_flags, CU_MEMHOSTALLOC_PORTABLE};
use cudarc::driver::{CudaEvent, PinnedHostSlice};
use std::sync::Arc;

use super::memory::DeviceBuffer;

/// Page-locked host memory: copies to and from it run asynchronously at full link speed.
///
/// Ordinary cached memory (not write-combined), so the host may read it back at full speed.
/// Whoever queues a copy that reads or writes it must not touch it until that copy's event has
/// completed: an upload's and a download's [`StreamEvent`] say when (see
/// [`Gpu::upload_on_copy_stream`] and [`Gpu::download_on_compute_stream`]).
pub struct PinnedBuffer {
    slice: PinnedHostSlice<u8>,
}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.slice.len())
            .finish()
    }
}

impl PinnedBuffer {
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The bytes. No copy may be in flight on this buffer (see the type's note).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is len bytes, page-locked and host-visible, and lives as long
        // as self; cudarc's own accessor would synchronise on an event we never record.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.slice.len()) }
    }

    /// The bytes, to write. No copy may be in flight on this buffer (see the type's note).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr() as *mut u8, self.slice.len()) }
    }

    fn as_ptr(&self) -> *const u8 {
        // The slice keeps its pointer private but hands it out after an event synchronise,
        // which is immediate here: no work is ever recorded on that event.
        self.slice
            .as_ptr()
            .expect("synchronising an event that never recorded work")
    }
}

/// A point on one of the Gpu's streams that the host can wait for without spinning. Clones
/// name the same point.
#[derive(Clone)]
pub struct StreamEvent {
    event: Arc<CudaEvent>,
    /// The last kernel queued before the event, named if a wait finds a kernel's fault.
    last_kernel: String,
}

impl StreamEvent {
    /// Blocks the calling thread (sleeping, not spinning) until the work before the event has
    /// finished; reports an error any of that work raised.
    pub fn wait(&self) -> Result<(), KernelError> {
        self.event
            .synchronize()
            .map_err(|e| KernelError::at_wait("cuEventSynchronize", e, &self.last_kernel))
    }

    /// Device milliseconds from `start` to this event (both recorded on this Gpu, either
    /// stream); waits for both.
    pub fn ms_since(&self, start: &StreamEvent) -> Result<f32, KernelError> {
        start
            .event
            .elapsed_ms(&self.event)
            .map_err(|e| KernelError::driver("cuEventElapsedTime", e))
    }

    /// Whether the work before the event has finished, without waiting.
    pub fn is_complete(&self) -> Result<bool, KernelError> {
        self.event
            .try_is_complete()
            .map_err(|e| KernelError::driver("cuEventQuery", e))
    }
}

impl Gpu {
    /// Allocates `bytes` of page-locked host memory, zeroed.
    pub fn alloc_pinned(&self, bytes: usize) -> Result<PinnedBuffer, KernelError> {
        self.bind()?;
        // SAFETY: the memory is zeroed below before anyone reads it.
        let slice = unsafe {
            self.context
                .alloc_pinned_with_flags::<u8>(bytes.max(1), CU_MEMHOSTALLOC_PORTABLE)
        }
        .map_err(|e| KernelError::driver("cuMemHostAlloc", e))?;
        let mut buffer = PinnedBuffer { slice };
        buffer.as_mut_slice().fill(0);
        Ok(buffer)
    }

    /// Records an event on `stream` after the work queued there so far.
    pub fn record_on(&self, stream: Stream) -> Result<StreamEvent, KernelError> {
        let event = self.new_recorded_event(stream, CUevent_flags::CU_EVENT_BLOCKING_SYNC)?;
        Ok(StreamEvent {
            event: Arc::new(event),
            last_kernel: self.last_kernel(),
        })
    }

    /// Makes `stream` wait, on the device, for `event`: work queued on it afterwards starts
    /// only once the event's work has finished. The host does not wait.
    pub fn stream_wait(&self, stream: Stream, event: &StreamEvent) -> Result<(), KernelError> {
        self.refuse_while_capturing("waiting for another stream")?;
        self.stream_of(stream)
            .wait(&event.event)
            .map_err(|e| KernelError::driver("cuStreamWaitEvent", e))
    }

    /// Queues a copy of `src` into `dst` at `offset_bytes` on the copy stream and returns its
    /// event. `src` must stay untouched until the event completes: callers wait for it (or
    /// hold `src` until then).
    pub fn upload_on_copy_stream(
        &self,
        dst: &DeviceBuffer,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<StreamEvent, KernelError> {
        self.check_owner(dst)?;
        dst.check_range(offset_bytes, src.len(), "upload")?;
        self.refuse_while_capturing("a host-to-device copy")?;
        self.bind()?;
        if !src.is_empty() {
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    dst.ptr + offset_bytes as u64,
                    src,
                    self.copy_stream.cu_stream(),
                )
            }
            .map_err(|e| KernelError::driver("cuMemcpyHtoDAsync", e))?;
        }
        self.record_on(Stream::Copy)
    }

    /// Queues a copy of `dst.len()` bytes of `src` at `offset_bytes` into `dst` on the compute
    /// stream, after the work queued there so far, and returns its event: `dst` holds the bytes
    /// once the event completes, and must not be touched before.
    pub fn download_on_compute_stream(
        &self,
        src: &DeviceBuffer,
        offset_bytes: usize,
        dst: &mut PinnedBuffer,
        len: usize,
    ) -> Result<StreamEvent, KernelError> {
        self.check_owner(src)?;
        src.check_range(offset_bytes, len, "download")?;
        if len > dst.len() {
            return Err(super::error::invalid!(
                "download of {len} bytes into a {}-byte host buffer",
                dst.len()
            ));
        }
        self.refuse_while_capturing("a device-to-host copy")?;
        self.bind()?;
        if len > 0 {
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(
                    &mut dst.as_mut_slice()[..len],
                    src.ptr + offset_bytes as u64,
                    self.stream.cu_stream(),
                )
            }
            .map_err(|e| KernelError::driver("cuMemcpyDtoHAsync", e))?;
        }
        self.record_on(Stream::Compute)
    }

    /// A new event with `flags`, recorded on `stream` after the work queued there so far.
    pub(crate) fn new_recorded_event(
        &self,
        stream: Stream,
        flags: CUevent_flags,
    ) -> Result<CudaEvent, KernelError> {
        self.bind()?;
        let event = self
            .context
            .new_event(Some(flags))
            .map_err(|e| KernelError::driver("cuEventCreate", e))?;
        event
            .record(self.stream_of(stream))
            .map_err(|e| KernelError::driver("cuEventRecord", e))?;
        Ok(event)
    }

    fn stream_of(&self, stream: Stream) -> &cudarc::driver::CudaStream {
        match stream {
            Stream::Compute => &self.stream,
            Stream::Copy => &self.copy_stream,
        }
    }
}
