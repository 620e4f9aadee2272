//! Device-side timing for benchmarks: CUDA events recorded on the Gpu's stream around queued
//! work, so launch overhead and host scheduling stay out of the figure, and a spin kernel that
//! keeps the stream busy while the host queues the work to be timed (see [`Gpu::spin`]).

use super::{
    ArchRequirement, Gpu, Instantiation, KernelArg, KernelError, KernelParam, LaunchDims, ParamKind,
};
use cudarc::driver::sys::CUevent_flags;

const SOURCE: &str = include_str!("../../cuda/timing.cu");
const SPIN_THREADS: u32 = 32;

fn spin_instantiation() -> Instantiation {
    Instantiation {
        name: "spin_globaltimer".into(),
        family: "timing",
        source: SOURCE,
        headers: &[],
        function: "spin_program",
        template_args: vec![SPIN_THREADS.to_string()],
        params: vec![KernelParam::new("nanoseconds", ParamKind::U64)],
        block_threads: SPIN_THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    vec![spin_instantiation()]
}

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

impl Gpu {
    /// Queues a kernel that keeps the stream busy for `nanoseconds` of device time (one thread
    /// of one block; the rest of the GPU stays idle). Queue it before [`Gpu::time_ms`] so the
    /// start event waits for the spin rather than firing on an idle GPU while the host is still
    /// queueing the work: see kernels/cuda/timing.cu.
    pub fn spin(&self, nanoseconds: u64) -> Result<(), KernelError> {
        self.launch(
            &spin_instantiation(),
            LaunchDims {
                grid: (1, 1, 1),
                block: SPIN_THREADS,
                shared_bytes: 0,
            },
            &[KernelArg::U64(nanoseconds)],
        )
    }
}
