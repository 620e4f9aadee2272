//! A backend runs one node at a time on buffers the executor has placed. It owns its
//! parameters (uploaded once, shared by every executor on it) and one arena that grows to the
//! largest plan it has run.

pub mod cpu;
pub mod cuda;

use crate::error::RuntimeError;
use crate::graph::Op;
use crate::image_decode::DeviceDecode;
use vitrt_kernels::cuda::PinnedBuffer;
use vitrt_kernels::{DType, PixelBatch};

/// Where to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// `cpu`, `cuda` (device 0) or `cuda:N`.
    pub fn parse(s: &str) -> Result<Device, RuntimeError> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| {
                    RuntimeError::Unsupported(format!(
                        "unknown device \"{s}\" (use cpu, cuda or cuda:N)"
                    ))
                }),
        }
    }
}

/// Opens a backend for `device` computing in `dtype`.
/// The CUDA devices this process sees; an error naming why where there is no driver.
pub fn cuda_device_count() -> Result<usize, RuntimeError> {
    vitrt_kernels::cuda::Gpu::device_count().map_err(|e| RuntimeError::Backend(e.to_string()))
}

pub fn open(device: Device, dtype: DType) -> Result<Box<dyn Backend>, RuntimeError> {
    match device {
        // f16 / bf16 on the CPU: f32 arithmetic with every stored value rounded, as the GPU.
        Device::Cpu => Ok(Box::new(cpu::CpuBackend::emulating(dtype))),
        Device::Cuda(ordinal) => Ok(Box::new(cuda::CudaBackend::new(ordinal, dtype)?)),
    }
}

/// A backend opened by [`open_with_defaults`].
pub struct Opened {
    pub backend: Box<dyn Backend>,
    pub device: Device,
    /// Why the first CUDA GPU was not taken, when no device was asked for and the CPU was.
    pub fallback: Option<RuntimeError>,
}

/// The device and dtype asked for, each defaulted: without a device, the first CUDA GPU that
/// opens, else the CPU (saying why in [`Opened::fallback`]); without a dtype, f16 on a GPU and
/// f32 on the CPU. The rule of `vitrt` and of the Python module.
pub fn open_with_defaults(
    device: Option<Device>,
    dtype: Option<DType>,
) -> Result<Opened, RuntimeError> {
    let default_dtype = |device: Device| match device {
        Device::Cpu => DType::F32,
        Device::Cuda(_) => DType::F16,
    };
    if let Some(device) = device {
        let backend = open(device, dtype.unwrap_or(default_dtype(device)))?;
        return Ok(Opened {
            backend,
            device,
            fallback: None,
        });
    }
    let gpu = Device::Cuda(0);
    match open(gpu, dtype.unwrap_or(default_dtype(gpu))) {
        Ok(backend) => Ok(Opened {
            backend,
            device: gpu,
            fallback: None,
        }),
        Err(why) => Ok(Opened {
            backend: open(Device::Cpu, dtype.unwrap_or(default_dtype(Device::Cpu)))?,
            device: Device::Cpu,
            fallback: Some(why),
        }),
    }
}

/// Where a tensor lives on a backend, in elements of `dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferRef {
    Arena {
        offset_bytes: usize,
        len: usize,
        dtype: DType,
    },
    Param {
        id: usize,
        len: usize,
        dtype: DType,
    },
}

impl BufferRef {
    pub fn len(&self) -> usize {
        match *self {
            BufferRef::Arena { len, .. } | BufferRef::Param { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type its elements are stored as.
    pub fn dtype(&self) -> DType {
        match *self {
            BufferRef::Arena { dtype, .. } | BufferRef::Param { dtype, .. } => dtype,
        }
    }
}

/// f32 values in device memory another library owns: a graph input handed over without a
/// copy through the host (`Backend::write_from_device`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInput {
    /// The first value's device address.
    pub ptr: u64,
    /// f32 values from `ptr` on, contiguous.
    pub len: usize,
}

/// Host memory that inputs are staged in before a backend copies them: page-locked on CUDA,
/// where copies from it run asynchronously at full link speed; ordinary memory elsewhere.
pub struct HostStaging {
    memory: StagingMemory,
}

enum StagingMemory {
    Heap(Box<[u8]>),
    Pinned(PinnedBuffer),
}

impl HostStaging {
    /// `bytes` of zeroed ordinary memory.
    pub fn heap(bytes: usize) -> HostStaging {
        HostStaging {
            memory: StagingMemory::Heap(vec![0; bytes].into_boxed_slice()),
        }
    }

    /// [`HostStaging::heap`], or an error when the host cannot give that much memory.
    pub fn try_heap(bytes: usize) -> Result<HostStaging, RuntimeError> {
        let mut memory = Vec::new();
        memory.try_reserve_exact(bytes).map_err(|_| {
            RuntimeError::Backend(format!(
                "cannot allocate {} MiB of host memory to stage images in",
                bytes >> 20
            ))
        })?;
        memory.resize(bytes, 0);
        Ok(HostStaging {
            memory: StagingMemory::Heap(memory.into_boxed_slice()),
        })
    }

    pub fn pinned(buffer: PinnedBuffer) -> HostStaging {
        HostStaging {
            memory: StagingMemory::Pinned(buffer),
        }
    }

    pub fn is_pinned(&self) -> bool {
        matches!(self.memory, StagingMemory::Pinned(_))
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.memory {
            StagingMemory::Heap(bytes) => bytes,
            StagingMemory::Pinned(buffer) => buffer.as_slice(),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.memory {
            StagingMemory::Heap(bytes) => bytes,
            StagingMemory::Pinned(buffer) => buffer.as_mut_slice(),
        }
    }
}

/// A copy to the host that a backend may still be running: [`Backend::finish_read`] waits for
/// it and returns the values.
#[derive(Debug)]
pub struct PendingRead {
    state: PendingState,
}

#[derive(Debug)]
enum PendingState {
    Ready(Vec<f32>),
    Queued(u64),
}

impl PendingRead {
    /// A read that is already complete.
    pub fn ready(values: Vec<f32>) -> PendingRead {
        PendingRead {
            state: PendingState::Ready(values),
        }
    }

    /// A read a backend queued, known to it by `token`.
    pub fn queued(token: u64) -> PendingRead {
        PendingRead {
            state: PendingState::Queued(token),
        }
    }

    /// The values of a complete read, or the token of a queued one.
    pub fn into_parts(self) -> Result<Vec<f32>, u64> {
        match self.state {
            PendingState::Ready(values) => Ok(values),
            PendingState::Queued(token) => Err(token),
        }
    }
}

/// A stage of the overlapped input path, as a backend's timeline records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimelineStage {
    /// The host-to-device copy of 8-bit pixels (copy stream).
    CopyIn,
    /// Device decoding's Huffman decoding of JPEG scans into coefficients (on the copy
    /// stream after the copy, overlapping the compute stream; only batches with scans have
    /// it).
    Entropy,
    /// Device decoding: JPEG coefficients to upright 8-bit RGB (IDCT, upsampling, colour,
    /// orientation; copy stream; batches with no image decoded on the device have none).
    Decode,
    /// Device decoding's resize and crop into the batch's 8-bit images (copy stream).
    Resize,
    /// Their expansion into the model's input (compute stream).
    Expand,
    /// What the compute stream ran between the expansion and the output copy: the forward
    /// pass.
    Forward,
    /// The device-to-host copy of the outputs (compute stream).
    CopyOut,
}

/// One recorded interval on the device, in milliseconds from the timeline's first event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelineSpan {
    pub stage: TimelineStage,
    pub start_ms: f32,
    pub end_ms: f32,
}

/// The memory a backend holds, by use: an account of its own allocations (device memory on
/// CUDA, host memory on the CPU), as [`Backend::memory_account`] gives it. It leaves out what
/// the backend did not allocate itself: on CUDA the context, the loaded kernels' code and the
/// captured graphs, which only the driver's figure ([`Backend::device_memory_used`]) sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryAccount {
    /// The parameters as stored (in their storage types, once per key and type).
    pub params_bytes: usize,
    /// The arena as reserved: the largest plan this backend has run so far (one arena,
    /// shared by every executor on the backend).
    pub arena_bytes: usize,
    /// Buffers the inputs and outputs pass through: on CUDA the device buffers 8-bit pixels
    /// are copied into and the expansion table.
    pub staging_bytes: usize,
    /// Device decoding's buffers: each pixel slot's uploads of JPEG data and tables (the
    /// coefficients decoded on the device included), and the image kernels' scratch
    /// (component planes, upright RGB, the resize's intermediate, the entropy decoder's
    /// chunk states), each grown to the largest batch so far.
    pub decode_bytes: usize,
    /// Everything else the backend's allocator holds: the kernels' own scratch (the matmul's
    /// split-K partial tiles and counters).
    pub workspace_bytes: usize,
    /// Page-locked host memory the backend keeps for copies of outputs to the host (host
    /// memory, not counted in [`MemoryAccount::total_bytes`]).
    pub pinned_host_bytes: usize,
    /// The most the backend's allocations held at once since it opened or
    /// [`Backend::reset_memory_peak`]; `None` where it is not tracked (the CPU).
    pub peak_bytes: Option<usize>,
    /// Captured forward passes (CUDA graphs) the backend keeps.
    pub graphs: usize,
}

impl MemoryAccount {
    /// Parameters, arena, staging, decoding and workspace: what the backend holds now.
    pub fn total_bytes(&self) -> usize {
        self.params_bytes
            + self.arena_bytes
            + self.staging_bytes
            + self.decode_bytes
            + self.workspace_bytes
    }
}

/// A node operand: where it is and its shape.
#[derive(Clone, Debug)]
pub struct Binding {
    pub buffer: BufferRef,
    pub shape: Vec<usize>,
    /// The value's storage carries row statistics after its elements
    /// (`crate::layernorm_fold::StatisticsLayout`): its producer writes them, a folded
    /// layernorm reads them.
    pub row_statistics: bool,
}

pub trait Backend {
    /// "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)".
    fn describe(&self) -> String;

    /// The compute type: what the weights and most activations are stored as.
    fn dtype(&self) -> DType;

    /// Uploads a parameter stored as `dtype` (the plan's choice: the compute type, or f32 for
    /// a layernorm's gamma and beta) once per key and dtype and returns its id; `load` runs
    /// only on a miss.
    fn load_param(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        load: &mut dyn FnMut() -> Result<Vec<f32>, RuntimeError>,
    ) -> Result<usize, RuntimeError>;

    /// As [`Backend::load_param`], with the values already encoded: `bytes` holds them as
    /// little-endian `dtype` (see [`crate::EncodedParams`]). Backends that store another
    /// form decode them; the CUDA backend uploads them as they are.
    fn load_param_encoded(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        bytes: Vec<u8>,
    ) -> Result<usize, RuntimeError> {
        let mut values = Some(dtype.decode(&bytes));
        drop(bytes);
        self.load_param(key, shape, dtype, &mut || {
            values.take().ok_or_else(|| RuntimeError::Param {
                name: key.into(),
                message: "loaded twice".into(),
            })
        })
    }

    /// Whether a parameter is held under `key` as `dtype` already (so `load_param` would not
    /// load it).
    fn has_param(&self, key: &str, dtype: DType) -> bool {
        let _ = (key, dtype);
        false
    }

    /// How many parameters the backend holds: their ids are `0..param_count()`.
    fn param_count(&self) -> usize;

    /// Frees every parameter loaded after the first `count` (ids `count..`), for a graph run
    /// once on a shared backend (a zero-shot run's text tower) whose executor is gone. An
    /// executor still bound to one of them would read freed memory: only its owner may call
    /// this.
    fn truncate_params(&mut self, count: usize);

    /// Makes the arena at least `bytes` long. Called once per plan, never per run.
    fn reserve_arena(&mut self, bytes: usize) -> Result<(), RuntimeError>;

    /// What this backend holds, by use (see [`MemoryAccount`]).
    fn memory_account(&self) -> MemoryAccount;

    /// Starts a new [`MemoryAccount::peak_bytes`] from what is held now.
    fn reset_memory_peak(&mut self) {}

    /// The device's used memory as its driver reports it (total less free, every process on
    /// the device included), where the backend runs on one; `None` on the CPU.
    fn device_memory_used(&self) -> Result<Option<usize>, RuntimeError> {
        Ok(None)
    }

    /// The PCI address of the device the backend runs on ("0000:19:00.0"), by which NVML finds
    /// it (clocks and power for `vitrt bench model`); `None` on the CPU or where the driver does
    /// not tell.
    fn device_pci_bus_id(&self) -> Option<String> {
        None
    }

    /// How the kernels loaded so far got there (compiled, or read from the disk cache) and the
    /// host time each took, where the backend compiles kernels; `None` on the CPU.
    fn kernel_loads(&self) -> Option<vitrt_kernels::cuda::KernelLoads> {
        None
    }

    /// Copies f32 host data into an arena buffer (converting to its dtype).
    fn write(&mut self, dst: BufferRef, data: &[f32]) -> Result<(), RuntimeError>;

    /// Where a graph input may come from device memory another library owns (a CUDA tensor
    /// handed over through DLPack): the device ordinal, and the stream that library must order
    /// its writes before (DLPack's `__dlpack__(stream=...)`). `None`: host memory only.
    fn device_input_stream(&self) -> Option<(usize, u64)> {
        None
    }

    /// Copies `src` (f32 device memory on this backend's device) into an arena buffer of
    /// the same length and dtype f32, on the device: no host round trip. Backends without
    /// device memory refuse. A `RuntimeError::Input` it returns leaves `name` empty: the
    /// backend does not know it, and the executor fills in the graph's input name.
    ///
    /// # Safety
    /// `src` must stay allocated and unwritten until the next output read has returned.
    unsafe fn write_from_device(
        &mut self,
        dst: BufferRef,
        src: DeviceInput,
    ) -> Result<(), RuntimeError> {
        let _ = (dst, src);
        Err(RuntimeError::Unsupported(
            "this backend reads inputs from host memory only".into(),
        ))
    }

    /// Copies a buffer back to the host as f32.
    fn read(&mut self, src: BufferRef) -> Result<Vec<f32>, RuntimeError>;

    /// Host memory for staging inputs, `bytes` long, zeroed: page-locked where the backend
    /// copies from that faster (CUDA).
    fn alloc_staging(&mut self, bytes: usize) -> Result<HostStaging, RuntimeError> {
        HostStaging::try_heap(bytes)
    }

    /// Writes 8-bit images into an f32 arena buffer: `pixels` holds `shape.batch` images of
    /// `height x width` pixels of `channels` interleaved bytes ([B, H, W, C]); `dst` receives
    /// [B, C, H, W] with byte `v` of channel `c` becoming `table[c * 256 + v]`. With `decode`,
    /// some images' bytes are made first from JPEG coefficients (`DeviceDecode`), replacing
    /// what `pixels` holds at their places. The copy and the expansion may still be queued
    /// when this returns, ordered before any work queued afterwards; `pixels` (and `decode`'s
    /// upload) may be reused once [`Backend::wait_for_input_copies`] has returned. CUDA copies
    /// the bytes on its copy stream (overlapping the work already queued), decodes and expands
    /// them on the device; the default runs the CPU twins on the host and writes the floats at
    /// once. With `decode`, returns the read of the JPEG images' status words (one an image of
    /// its JPEG batch, as f32 bit patterns: `f32::to_bits` gives the word), for
    /// [`finish_read`](Backend::finish_read).
    fn write_pixel_bytes(
        &mut self,
        dst: BufferRef,
        pixels: &[u8],
        shape: PixelBatch,
        table: &[f32],
        decode: Option<&DeviceDecode<'_>>,
    ) -> Result<Option<PendingRead>, RuntimeError> {
        check_pixel_write(dst, pixels, shape, table)?;
        let decoded;
        let mut status = None;
        let pixels = match decode {
            Some(decode) => {
                let mut bytes = pixels.to_vec();
                let words = decode.run_on_host(&mut bytes)?;
                status = Some(PendingRead::ready(
                    words.into_iter().map(f32::from_bits).collect(),
                ));
                decoded = bytes;
                &decoded[..]
            }
            None => pixels,
        };
        let mut values = vec![0f32; pixels.len()];
        vitrt_kernels::pixels::cpu::expand_pixels(
            pixels,
            shape.channels,
            shape.height * shape.width,
            table,
            &mut values,
        );
        self.write(dst, &values)?;
        Ok(status)
    }

    /// Waits until every `write_pixel_bytes` so far has read its bytes (their copies are done;
    /// the work after them may still run).
    fn wait_for_input_copies(&mut self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Queues a copy of a buffer to the host, after the work queued so far; [`finish_read`]
    /// waits for it. The default reads at once.
    ///
    /// [`finish_read`]: Backend::finish_read
    fn start_read(&mut self, src: BufferRef) -> Result<PendingRead, RuntimeError> {
        Ok(PendingRead::ready(self.read(src)?))
    }

    /// Chooses kernel programs whatever the batch size (on) or by it (off, the default): see
    /// `Gpu::set_batch_invariant`. Backends whose kernels never choose by the batch size (the
    /// CPU's twins) are invariant either way.
    fn set_batch_invariant(&mut self, on: bool) {
        let _ = on;
    }

    /// Starts (or stops) recording device timestamps around the steps of `write_pixel_bytes`
    /// and `start_read` and the work between them, for [`Backend::take_timeline`]. Backends
    /// that run everything at once on the host record nothing.
    fn record_timeline(&mut self, on: bool) {
        let _ = on;
    }

    /// The intervals recorded since the last call, in order; waits for the recorded work.
    fn take_timeline(&mut self) -> Result<Vec<TimelineSpan>, RuntimeError> {
        Ok(Vec::new())
    }

    /// Waits for a read [`start_read`](Backend::start_read) queued and returns its values as
    /// f32.
    fn finish_read(&mut self, pending: PendingRead) -> Result<Vec<f32>, RuntimeError> {
        pending.into_parts().map_err(|token| {
            RuntimeError::Backend(format!(
                "{} queued no read {token} to finish",
                self.describe()
            ))
        })
    }

    /// Whether this backend has a kernel for `op` on inputs of these shapes, or why not. Every
    /// backend runs every op but the fused attention, whose GPU kernel takes only some dtypes
    /// and head dims: the fusion pass asks before it fuses (`passes::apply_for`).
    fn supports(&self, op: &Op, input_shapes: &[&[usize]]) -> Result<(), String> {
        let _ = (op, input_shapes);
        Ok(())
    }

    /// Runs one op. Errors are plain messages; the executor adds the node's name.
    fn execute(
        &mut self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
        workspace: Option<BufferRef>,
    ) -> Result<(), String>;

    /// Waits for queued work.
    fn synchronize(&mut self) -> Result<(), RuntimeError>;

    /// Records a timing mark after the work queued so far (a CUDA event; on the CPU, where
    /// work runs as it is called, the time now), without waiting for anything.
    fn mark(&mut self) -> Result<(), RuntimeError>;

    /// The milliseconds between consecutive marks since the last call (n marks give n - 1
    /// intervals), and forgets the marks. Waits for the marked work.
    fn take_mark_intervals(&mut self) -> Result<Vec<f32>, RuntimeError>;

    /// Whether this backend can record the ops of a forward pass into a graph and replay
    /// it with one launch (CUDA graphs). The CPU cannot: it runs ops as they are called.
    fn can_capture(&self) -> bool {
        false
    }

    /// Records the ops `queue` issues on this backend into a graph kept under `key`
    /// (replacing one there) without running them. Recorded ops read and write the buffers
    /// where they are now, so the backend drops every graph when its arena moves. On failure
    /// nothing is kept and the backend runs ops eagerly as before; the message says why.
    fn capture_graph(
        &mut self,
        key: u64,
        queue: &mut dyn FnMut(&mut dyn Backend) -> Result<(), RuntimeError>,
    ) -> Result<(), String> {
        let _ = (key, queue);
        Err(format!("{} cannot capture graphs", self.describe()))
    }

    /// Whether a graph is kept under `key` (captured, and not dropped since).
    fn has_graph(&self, key: u64) -> bool {
        let _ = key;
        false
    }

    /// Queues the graph kept under `key`: the ops it recorded, on the buffers' current
    /// contents.
    fn replay_graph(&mut self, key: u64) -> Result<(), RuntimeError> {
        Err(RuntimeError::Backend(format!(
            "{} holds no graph {key} to replay",
            self.describe()
        )))
    }
}

/// Checks the operands of [`Backend::write_pixel_bytes`].
pub(crate) fn check_pixel_write(
    dst: BufferRef,
    pixels: &[u8],
    shape: PixelBatch,
    table: &[f32],
) -> Result<(), RuntimeError> {
    let fail = |message: String| Err(RuntimeError::Backend(message));
    match dst {
        BufferRef::Arena {
            dtype: DType::F32, ..
        } => {}
        _ => return fail("8-bit pixels expand only into an f32 arena buffer".into()),
    }
    if pixels.len() != shape.len() || dst.len() != shape.len() {
        return fail(format!(
            "{} pixel bytes into a buffer of {} values for {shape:?}",
            pixels.len(),
            dst.len()
        ));
    }
    if table.len() != shape.channels * 256 {
        return fail(format!(
            "a pixel table of {} values for {} channels (256 a channel)",
            table.len(),
            shape.channels
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse() {
        assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
        assert_eq!(Device::parse("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(Device::parse("cuda:3").unwrap(), Device::Cuda(3));
        for bad in ["tpu", "cuda:", "cuda:x", "CUDA"] {
            assert!(Device::parse(bad).is_err(), "{bad}");
        }
    }

    /// Parameters are kept per key and storage type; truncating frees those loaded last and
    /// keeps the rest where they were.
    #[test]
    fn parameters_are_kept_per_key_and_dtype_and_truncated_from_the_end() {
        let mut b = open(Device::Cpu, DType::BF16).unwrap();
        let values = [1.0f32 + 1.0 / 512.0, 2.0];
        let mut load = || Ok(values.to_vec());
        let kept = b.load_param("w", &[2], DType::BF16, &mut load).unwrap();
        let exact = b.load_param("w", &[2], DType::F32, &mut load).unwrap();
        assert_ne!(kept, exact);
        assert_eq!(
            b.load_param("w", &[2], DType::BF16, &mut load).unwrap(),
            kept
        );
        let read = |b: &mut Box<dyn Backend>, id, dtype| {
            b.read(BufferRef::Param { id, len: 2, dtype }).unwrap()
        };
        assert_eq!(
            read(&mut b, kept, DType::BF16),
            [1.0, 2.0],
            "rounded to bf16"
        );
        assert_eq!(read(&mut b, exact, DType::F32), values, "kept exact");
        let held = b.param_count();
        b.load_param("text", &[2], DType::BF16, &mut load).unwrap();
        assert_eq!(b.param_count(), held + 1);
        b.truncate_params(held);
        assert_eq!(b.param_count(), held);
        assert!(!b.has_param("text", DType::BF16));
        assert!(b.has_param("w", DType::BF16) && b.has_param("w", DType::F32));
        assert_eq!(read(&mut b, kept, DType::BF16), [1.0, 2.0]);
    }

    /// Without a device, the first GPU, else the CPU saying why; the dtype defaults by device.
    /// (The GPU side of the rule runs in the GPU check's CLI rows.)
    #[test]
    fn devices_and_dtypes_default_by_rule() {
        let cpu = open_with_defaults(Some(Device::Cpu), None).unwrap();
        assert_eq!((cpu.device, cpu.backend.dtype()), (Device::Cpu, DType::F32));
        assert!(cpu.fallback.is_none());
        let bf16 = open_with_defaults(Some(Device::Cpu), Some(DType::BF16)).unwrap();
        assert_eq!(bf16.backend.dtype(), DType::BF16);
        let any = open_with_defaults(None, None).unwrap();
        match any.device {
            Device::Cpu => {
                assert_eq!(any.backend.dtype(), DType::F32);
                assert!(any.fallback.is_some(), "the CPU without saying why");
            }
            Device::Cuda(0) => assert_eq!(any.backend.dtype(), DType::F16),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cpu_emulates_half_precision() {
        for dtype in DType::ALL {
            assert_eq!(open(Device::Cpu, dtype).unwrap().dtype(), dtype);
        }
    }
}
