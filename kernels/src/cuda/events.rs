//! Events on the Gpu's stream for timing work queued by someone else: the runtime records one
//! before and after each graph node of a profiled run, and reads the intervals once the run is
//! done, so the timing adds no synchronisation between nodes.

use super::device::Gpu;
use super::device::Stream;
use super::error::KernelError;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

/// A point on the Gpu's stream: it completes when the work queued before it has.
pub struct GpuEvent {
    event: CudaEvent,
}

impl Gpu {
    /// Records an event after the work queued so far.
    pub fn record_event(&self) -> Result<GpuEvent, KernelError> {
        let event = self.new_recorded_event(Stream::Compute, CUevent_flags::CU_EVENT_DEFAULT)?;
        Ok(GpuEvent { event })
    }
}

impl GpuEvent {
    /// Device milliseconds from `start` to this event; waits for both to complete.
    pub fn ms_since(&self, start: &GpuEvent) -> Result<f32, KernelError> {
        start
            .event
            .elapsed_ms(&self.event)
            .map_err(|e| KernelError::driver("cuEventElapsedTime", e))
    }
}
