//! CUDA graphs: the kernels a caller queues between [`Gpu::begin_capture`] and
//! [`Gpu::end_capture`] are recorded on the Gpu's stream instead of run, and the resulting
//! [`GpuGraph`] replays all of them with one launch. A ViT-B/16 forward pass at batch 1 is
//! about a hundred short kernels; launching them one by one costs more host time than the GPU
//! spends on several of them, and one graph launch removes that.
//!
//! A graph holds every kernel's arguments as they were when captured: device addresses,
//! shapes, the chosen instantiation. It stays valid as long as those buffers stay where they
//! are; keeping that promise is the caller's job (the runtime drops its graphs whenever the
//! arena moves).
//!
//! Capture must only see work that can be recorded: launches of kernels that are already
//! loaded, whose attributes are already set. While a capture is open, [`Gpu`] refuses to
//! compile or load a kernel, to allocate and to synchronise, with an error that names what
//! was asked for, so that a forward pass that was not warmed up fails to capture (and the
//! caller runs it eagerly) instead of stalling or corrupting the capture.

use super::device::Gpu;
use super::error::KernelError;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;
use std::sync::atomic::Ordering;

/// A captured, instantiated sequence of kernel launches, replayed on the Gpu's stream.
pub struct GpuGraph {
    graph: CudaGraph,
    /// The Gpu that captured it: a graph replays only on its own device and stream.
    owner: usize,
    kernels: usize,
}

impl GpuGraph {
    /// Kernel launches recorded in the graph.
    pub fn kernels(&self) -> usize {
        self.kernels
    }
}

impl Gpu {
    /// Starts recording the work queued on this Gpu's stream into a graph instead of running
    /// it. Every call must be followed by [`Gpu::end_capture`] (also when queuing failed),
    /// which leaves the stream as it was.
    pub fn begin_capture(&self) -> Result<(), KernelError> {
        if self.capturing.swap(true, Ordering::SeqCst) {
            return Err(KernelError::Cuda("a graph capture is already open".into()));
        }
        self.captured_launches.store(0, Ordering::SeqCst);
        // Thread-local mode: a call of this thread that capture cannot record (a synchronous
        // copy, an allocation) fails and invalidates the capture instead of running.
        self.bind()
            .and_then(|()| {
                self.stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(|e| KernelError::driver("cuStreamBeginCapture", e))
            })
            .inspect_err(|_| self.capturing.store(false, Ordering::SeqCst))
    }

    /// Ends the capture begun by [`Gpu::begin_capture`] and instantiates the graph. Errors when
    /// the capture was invalidated (something was queued that a graph cannot hold), when
    /// nothing was captured, or when instantiation fails; the stream is usable eagerly after
    /// either outcome.
    pub fn end_capture(&self) -> Result<GpuGraph, KernelError> {
        if !self.capturing.load(Ordering::SeqCst) {
            return Err(KernelError::Cuda("no graph capture is open".into()));
        }
        let ended = self.bind().and_then(|()| {
            self.stream
                .end_capture(CUgraphInstantiate_flags(0))
                .map_err(|e| KernelError::driver("cuStreamEndCapture / cuGraphInstantiate", e))
        });
        self.capturing.store(false, Ordering::SeqCst);
        let kernels = self.captured_launches.swap(0, Ordering::SeqCst);
        match ended? {
            Some(graph) => Ok(GpuGraph {
                graph,
                owner: self.id,
                kernels,
            }),
            None => Err(KernelError::Cuda("the capture recorded nothing".into())),
        }
    }

    /// Whether a capture is open: launches are being recorded, not run.
    pub fn is_capturing(&self) -> bool {
        self.capturing.load(Ordering::SeqCst)
    }

    /// Queues one replay of `graph` on the Gpu's stream.
    pub fn replay(&self, graph: &GpuGraph) -> Result<(), KernelError> {
        if graph.owner != self.id {
            return Err(KernelError::InvalidArgument(
                "the graph was captured on another Gpu".into(),
            ));
        }
        if self.is_capturing() {
            return Err(KernelError::Cuda(
                "cannot replay a graph while a capture is open".into(),
            ));
        }
        self.bind()?;
        graph
            .graph
            .launch()
            .map_err(|e| KernelError::driver("cuGraphLaunch", e))
    }

    /// The error for an operation a capture cannot hold, or `Ok` outside a capture.
    pub(crate) fn refuse_while_capturing(&self, what: &str) -> Result<(), KernelError> {
        if self.is_capturing() {
            Err(KernelError::Cuda(format!(
                "{what} while a CUDA graph is being captured (the forward pass was not warmed up)"
            )))
        } else {
            Ok(())
        }
    }
}
