//! Device-side timing for benchmarks: CUDA events recorded on the Gpu's stream around queued
//! work, so launch overhead and host scheduling stay out of the figure.

use super::{Gpu, KernelError};
use cudarc::driver::sys::CUevent_flags;

impl Gpu {
    /// Queues `work` (ops on this Gpu) between two events and returns the device time it took,
    /// in milliseconds. Waits for the work to finish.
    pub fn time_ms(
        &self,
        work: impl FnOnce() -> Result<(), KernelError>,
    ) -> Result<f32, KernelError> {
        self.bind()?;
        let event = || {
            self.context
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| KernelError::driver("cuEventCreate", e))
        };
        let (start, end) = (event()?, event()?);
        start
            .record(&self.stream)
            .map_err(|e| KernelError::driver("cuEventRecord", e))?;
        work()?;
        end.record(&self.stream)
            .map_err(|e| KernelError::driver("cuEventRecord", e))?;
        start
            .elapsed_ms(&end)
            .map_err(|e| KernelError::driver("cuEventElapsedTime", e))
    }
}
