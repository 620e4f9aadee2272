//! Device-side timing for benchmarks: CUDA events recorded on the Gpu's stream around queued
//! work, so launch overhead and host scheduling stay out of the figure, and a spin kernel that
//! keeps the stream busy while the host queues the work to be timed (see [`Gpu::spin`]).

use super::device::{Gpu, LaunchDims};
use super::error::KernelError;
use super::registry::{ArchRequirement, Instantiation, KernelArg, KernelParam, ParamKind};
use cudarc::driver::sys::CUevent_flags;

const SOURCE: &str = include_str!("timing.cu");
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
    /// queueing the work: see timing.cu.
    pub fn spin(&self, nanoseconds: u64) -> Result<(), KernelError> {
        self.launch(
            &spin_instantiation(),
            LaunchDims {
                grid: (1, 1, 1),
                block: SPIN_THREADS,
                shared_bytes: 0,
                cluster: 1,
            },
            &[KernelArg::U64(nanoseconds)],
        )
    }
}

/// The one way vitrt times queued GPU work: `vitrt bench`, `vitrt tune`, `vitrt profile` and
/// the timing tests all go through it. Each timed run is queued behind a spin of
/// `spin_nanoseconds` (see [`Gpu::spin`]) and bracketed by CUDA events, so host queueing and
/// launch overhead stay out of the figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    /// Untimed runs first; at least one is made whatever this says, because the first run
    /// compiles and loads the kernels (and lets cuBLAS pick its algorithm).
    pub warmup: usize,
    /// Timed runs.
    pub reps: usize,
    /// The spin queued before each timed run.
    pub spin_nanoseconds: u64,
}

impl Timer {
    /// The device time of each of the `reps` timed runs of `work`, in milliseconds, in run
    /// order. Run `rep` (warm-up runs count, so the timed ones go on from where they left off)
    /// is handed `copy_for_rep(rep, copies)`: the copy of its inputs to read, so that inputs
    /// rotated over more than L2 (see [`copies_beyond_l2`]) are never found in L2.
    pub fn samples_ms(
        &self,
        gpu: &Gpu,
        copies: usize,
        mut work: impl FnMut(usize) -> Result<(), KernelError>,
    ) -> Result<Vec<f64>, KernelError> {
        let warmup = self.warmup.max(1);
        for rep in 0..warmup {
            work(copy_for_rep(rep, copies))?;
        }
        gpu.synchronize()?;
        let mut samples = Vec::with_capacity(self.reps);
        for rep in warmup..warmup + self.reps {
            gpu.spin(self.spin_nanoseconds)?;
            samples.push(gpu.time_ms(|| work(copy_for_rep(rep, copies)))? as f64);
        }
        Ok(samples)
    }

    /// The median of [`Timer::samples_ms`], or `None` when `reps` is zero.
    pub fn median_ms(
        &self,
        gpu: &Gpu,
        copies: usize,
        work: impl FnMut(usize) -> Result<(), KernelError>,
    ) -> Result<Option<f64>, KernelError> {
        let mut samples = self.samples_ms(gpu, copies, work)?;
        samples.sort_by(f64::total_cmp);
        Ok(samples.get(samples.len() / 2).copied())
    }
}

/// How many distinct copies of a set of inputs of `set_bytes` to rotate through so that they
/// total more than twice the L2 cache (`l2_bytes`): by the time a copy comes round again, at
/// least an L2's worth of other data has passed through, so nothing of it is left there
/// (LRU-like caches keep the most recent). A set already larger than that needs one copy.
pub fn copies_beyond_l2(set_bytes: usize, l2_bytes: usize) -> usize {
    if set_bytes == 0 {
        return 1;
    }
    (2 * l2_bytes) / set_bytes + 1
}

/// The copy that run `rep` reads, of `copies`.
pub fn copy_for_rep(rep: usize, copies: usize) -> usize {
    rep % copies.max(1)
}

/// Where copy `i` of an operand of `bytes` starts inside one allocation holding every copy:
/// slots are rounded up to 256 bytes, so every copy is as aligned as a fresh allocation (the
/// kernels pick their vector width from the alignment).
pub fn slot_offset(i: usize, bytes: usize) -> usize {
    i * bytes.next_multiple_of(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_exceeds_twice_the_l2() {
        let l2 = 50 << 20;
        for set in [
            1usize,
            4096,
            300_000,
            3 << 20,
            50 << 20,
            100 << 20,
            101 << 20,
            1 << 30,
        ] {
            let copies = copies_beyond_l2(set, l2);
            assert!(copies * set > 2 * l2, "{set} bytes x {copies}");
            // And no more copies than needed: one fewer would not do (unless one is the least).
            assert!(
                copies == 1 || (copies - 1) * set <= 2 * l2,
                "{set} bytes x {copies}"
            );
        }
        assert_eq!(copies_beyond_l2(1 << 30, l2), 1);
        assert_eq!(copies_beyond_l2(0, l2), 1);
        assert_eq!(
            copies_beyond_l2(1000, 0),
            1,
            "no L2 reported: no rotation needed"
        );
    }

    #[test]
    fn every_copy_comes_round_in_turn() {
        let copies = 3;
        let used: Vec<usize> = (0..7).map(|rep| copy_for_rep(rep, copies)).collect();
        assert_eq!(used, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(copy_for_rep(5, 0), 0, "zero copies is treated as one");
    }

    #[test]
    fn slots_are_256_byte_aligned() {
        assert_eq!(slot_offset(0, 1000), 0);
        assert_eq!(slot_offset(1, 1000), 1024);
        assert_eq!(slot_offset(3, 512), 1536);
        assert_eq!(slot_offset(2, 1), 512);
    }
}
