//! The CUDA backend: every op in our NVRTC-compiled kernels, through `vitrt_kernels::cuda`.
//! Weights are uploaded once, converted to the run dtype; activations live in one arena
//! sized by the plan, so a steady-state run allocates nothing; host copies happen only for
//! the graph's inputs and outputs.

use super::{
    check_pixel_write, Backend, Binding, BufferRef, DeviceInput, HostStaging, MemoryAccount,
    PendingRead, TimelineSpan, TimelineStage,
};
use crate::error::RuntimeError;
use crate::graph::Op;
use crate::image_decode::DeviceDecode;
use crate::lowering;
use std::collections::HashMap;
use vitrt_kernels::attention::gpu::{attention_rows_aligned, fused_attention_support};
use vitrt_kernels::cuda::{
    DevPtr, DeviceBuffer, Gpu, GpuEvent, GpuGraph, KernelError, PinnedBuffer, Stream, StreamEvent,
};
use vitrt_kernels::jpeg_scan::batch::CHUNK_STATE_BYTES;
use vitrt_kernels::patchify::gpu::PrefixRows;
use vitrt_kernels::{
    activation, add, attention, gather, jpeg, jpeg_scan, layernorm, matmul, normalize, patchify,
    pixels, pool, resample, rmsnorm, rope, softmax,
};
use vitrt_kernels::{DType, PixelBatch};

pub struct CudaBackend {
    gpu: Gpu,
    ordinal: usize,
    dtype: DType,
    params: Vec<DeviceBuffer>,
    param_ids: HashMap<(String, DType), usize>,
    arena: Option<DeviceBuffer>,
    marks: Vec<GpuEvent>,
    /// Captured forward passes by executor key; they hold arena addresses, so they are
    /// dropped whenever the arena is reallocated.
    graphs: HashMap<u64, GpuGraph>,
    /// 8-bit pixel uploads in flight (`write_pixel_bytes`), alternating between two device
    /// buffers so that batch k + 1's copy overlaps batch k's forward pass.
    pixel_uploads: [Option<PixelUpload>; 2],
    next_pixel_upload: usize,
    /// The expansion table last uploaded, and where.
    pixel_table: Option<(Vec<f32>, DeviceBuffer)>,
    /// Reads queued by `start_read`, by token: the page-locked buffer they land in, the
    /// download's event, and the values' count and type.
    pending_reads: HashMap<u64, QueuedRead>,
    next_read_token: u64,
    /// Page-locked buffers of finished reads, for the next ones.
    spare_read_buffers: Vec<PinnedBuffer>,
    /// When recording (`record_timeline`): events around each step, in order.
    timeline: Option<Vec<(TimelineStage, StreamEvent, StreamEvent)>>,
    /// The end of the last expansion, where the next forward pass starts.
    last_expanded: Option<StreamEvent>,
    /// Pixel copies queued and not yet waited for (`wait_for_input_copies`).
    input_copies: Vec<StreamEvent>,
    /// The image kernels' buffers for device decoding (component planes, upright RGB, the
    /// resize's intermediate), grown to the largest batch so far.
    decode_scratch: Option<DecodeScratch>,
}

/// A device buffer that receives 8-bit pixels, with the buffer receiving the same batch's
/// device-decoding upload, and the event after the expansion that last read them (the next
/// copies into them wait for that).
struct PixelUpload {
    bytes: DeviceBuffer,
    /// The device decoding's data and tables.
    decode_inputs: Option<(DeviceBuffer, DeviceBuffer)>,
    expanded: Option<StreamEvent>,
}

struct DecodeScratch {
    planes: DeviceBuffer,
    rgb: DeviceBuffer,
    mid: DeviceBuffer,
    /// The entropy decoder's per-chunk states.
    states: DeviceBuffer,
}

struct QueuedRead {
    buffer: PinnedBuffer,
    done: StreamEvent,
    len: usize,
    dtype: DType,
}

impl CudaBackend {
    pub fn new(ordinal: usize, dtype: DType) -> Result<CudaBackend, RuntimeError> {
        let gpu = Gpu::new(ordinal).map_err(|e| RuntimeError::Backend(e.to_string()))?;
        Ok(CudaBackend {
            gpu,
            ordinal,
            dtype,
            params: Vec::new(),
            param_ids: HashMap::new(),
            arena: None,
            marks: Vec::new(),
            graphs: HashMap::new(),
            pixel_uploads: [None, None],
            next_pixel_upload: 0,
            pixel_table: None,
            pending_reads: HashMap::new(),
            next_read_token: 1,
            spare_read_buffers: Vec::new(),
            timeline: None,
            last_expanded: None,
            input_copies: Vec::new(),
            decode_scratch: None,
        })
    }

    /// Makes the device-decoding buffers at least as large as `decode` needs. Growing waits
    /// for the queued work, which may still read the old ones.
    fn grow_decode_scratch(&mut self, decode: &DeviceDecode<'_>) -> Result<(), RuntimeError> {
        let need = [
            decode.jpeg.planes_len().max(1),
            decode.jpeg.rgb_len().max(1),
            decode.resample.intermediate_len().max(1),
            (decode.scan_at.chunks * CHUNK_STATE_BYTES).max(1),
        ];
        let have = self.decode_scratch.as_ref().map_or([0; 4], |s| {
            [&s.planes, &s.rgb, &s.mid, &s.states].map(|b| b.len_bytes())
        });
        if need.iter().zip(&have).all(|(n, h)| n <= h) {
            return Ok(());
        }
        self.gpu.synchronize().map_err(backend_error)?;
        self.decode_scratch = None;
        let alloc = |i: usize| self.gpu.alloc(need[i].max(have[i])).map_err(backend_error);
        self.decode_scratch = Some(DecodeScratch {
            planes: alloc(0)?,
            rgb: alloc(1)?,
            mid: alloc(2)?,
            states: alloc(3)?,
        });
        Ok(())
    }

    /// A page-locked buffer of at least `bytes` for a read: a finished read's, else a new one.
    fn take_read_buffer(&mut self, bytes: usize) -> Result<PinnedBuffer, RuntimeError> {
        match self
            .spare_read_buffers
            .iter()
            .position(|b| b.len() >= bytes)
        {
            Some(i) => Ok(self.spare_read_buffers.swap_remove(i)),
            None => self.gpu.alloc_pinned(bytes.max(1)).map_err(backend_error),
        }
    }

    /// Keeps a queued download for `finish_read`.
    fn queue_read(&mut self, read: QueuedRead) -> PendingRead {
        let token = self.next_read_token;
        self.next_read_token += 1;
        self.pending_reads.insert(token, read);
        PendingRead::queued(token)
    }

    /// Uploads one parameter's encoded bytes into a buffer of its own and records its id.
    fn upload_param(
        &mut self,
        key: &str,
        dtype: DType,
        bytes: &[u8],
    ) -> Result<usize, RuntimeError> {
        // Weights do not shrink with the batch: their errors say so, out of memory included.
        let uploading = |e: KernelError| RuntimeError::Param {
            name: key.into(),
            message: format!("uploading it to the GPU: {e}"),
        };
        let buffer = self.gpu.alloc(bytes.len().max(1)).map_err(uploading)?;
        self.gpu.upload(&buffer, 0, bytes).map_err(uploading)?;
        self.params.push(buffer);
        self.param_ids
            .insert((key.to_string(), dtype), self.params.len() - 1);
        Ok(self.params.len() - 1)
    }

    /// Where a write into `dst` lands: the arena, the byte offset, the length in values and
    /// the dtype; only arena buffers are written.
    fn arena_target(
        &self,
        dst: BufferRef,
    ) -> Result<(&DeviceBuffer, usize, usize, DType), RuntimeError> {
        let BufferRef::Arena {
            offset_bytes,
            len,
            dtype,
        } = dst
        else {
            return Err(RuntimeError::Backend(
                "only arena buffers can be written".into(),
            ));
        };
        let arena = self
            .arena
            .as_ref()
            .ok_or_else(|| RuntimeError::Backend("no arena reserved".into()))?;
        Ok((arena, offset_bytes, len, dtype))
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn ptr(&self, buffer: BufferRef) -> Result<DevPtr, KernelError> {
        match buffer {
            BufferRef::Arena {
                offset_bytes,
                len,
                dtype,
            } => {
                let arena = self
                    .arena
                    .as_ref()
                    .ok_or_else(|| KernelError::InvalidArgument("no arena reserved".into()))?;
                arena.view(offset_bytes, len, dtype)
            }
            BufferRef::Param { id, len, dtype } => self
                .params
                .get(id)
                .ok_or_else(|| KernelError::InvalidArgument(format!("unknown parameter {id}")))?
                .view(0, len, dtype),
        }
    }
}

/// A view the plan types e4m3, as the FP8 kernels take it (a pointer type of their own).
fn e4m3_view(p: DevPtr) -> vitrt_kernels::matmul::E4m3Ptr {
    vitrt_kernels::matmul::E4m3Ptr {
        ptr: p.ptr,
        len: p.len,
    }
}

fn backend_error(e: KernelError) -> RuntimeError {
    match e {
        KernelError::OutOfMemory { requested, free } => {
            RuntimeError::OutOfMemory { requested, free }
        }
        other => RuntimeError::Backend(other.to_string()),
    }
}

impl Backend for CudaBackend {
    fn describe(&self) -> String {
        // Dependent launches are the default from sm_90; an A/B run with them off says so.
        let off = self.gpu.compute_capability().0 >= 9 && !self.gpu.dependent_launch();
        let note = if off { ", dependent launches off" } else { "" };
        format!("cuda:{} ({}{note})", self.ordinal, self.gpu.name())
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn has_param(&self, key: &str, dtype: DType) -> bool {
        self.param_ids.contains_key(&(key.to_string(), dtype))
    }

    fn load_param(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        load: &mut dyn FnMut() -> Result<Vec<f32>, RuntimeError>,
    ) -> Result<usize, RuntimeError> {
        if let Some(&id) = self.param_ids.get(&(key.to_string(), dtype)) {
            return Ok(id);
        }
        let data = load()?;
        if data.len() != shape.iter().product::<usize>() {
            return Err(RuntimeError::Param {
                name: key.into(),
                message: format!("{} values for shape {shape:?}", data.len()),
            });
        }
        self.upload_param(key, dtype, &dtype.encoded(&data))
    }

    fn load_param_encoded(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        bytes: Vec<u8>,
    ) -> Result<usize, RuntimeError> {
        if let Some(&id) = self.param_ids.get(&(key.to_string(), dtype)) {
            return Ok(id);
        }
        let expected = shape.iter().product::<usize>() * dtype.size_bytes();
        if bytes.len() != expected {
            return Err(RuntimeError::Param {
                name: key.into(),
                message: format!(
                    "{} bytes for shape {shape:?} of {dtype}; expected {expected}",
                    bytes.len()
                ),
            });
        }
        self.upload_param(key, dtype, &bytes)
    }

    fn param_count(&self) -> usize {
        self.params.len()
    }

    fn truncate_params(&mut self, count: usize) {
        // The work that read them is done: the executor that ran them read its outputs back.
        self.params.truncate(count);
        self.param_ids.retain(|_, id| *id < count);
    }

    fn reserve_arena(&mut self, bytes: usize) -> Result<(), RuntimeError> {
        let have = self.arena.as_ref().map_or(0, DeviceBuffer::len_bytes);
        if have < bytes {
            // Free the old arena first so its memory counts for the new one. Graphs captured on
            // it would read and write freed memory: drop them, their executors capture anew.
            self.graphs.clear();
            self.arena = None;
            self.arena = Some(self.gpu.alloc(bytes).map_err(backend_error)?);
        }
        Ok(())
    }

    fn memory_account(&self) -> MemoryAccount {
        let params_bytes = self.params.iter().map(DeviceBuffer::len_bytes).sum();
        let arena_bytes = self.arena.as_ref().map_or(0, DeviceBuffer::len_bytes);
        let staging_bytes = self
            .pixel_uploads
            .iter()
            .flatten()
            .map(|u| u.bytes.len_bytes())
            .chain(self.pixel_table.iter().map(|(_, b)| b.len_bytes()))
            .sum();
        let decode_bytes = self
            .pixel_uploads
            .iter()
            .flatten()
            .filter_map(|u| u.decode_inputs.as_ref())
            .map(|(data, tables)| data.len_bytes() + tables.len_bytes())
            .chain(self.decode_scratch.iter().map(|s| {
                [&s.planes, &s.rgb, &s.mid, &s.states]
                    .iter()
                    .map(|b| b.len_bytes())
                    .sum::<usize>()
            }))
            .sum();
        let allocated = self.gpu.allocated_bytes();
        let pinned_host_bytes = self
            .spare_read_buffers
            .iter()
            .map(PinnedBuffer::len)
            .chain(self.pending_reads.values().map(|r| r.buffer.len()))
            .sum();
        MemoryAccount {
            params_bytes,
            arena_bytes,
            staging_bytes,
            decode_bytes,
            // Whatever else this Gpu allocated: buffers the kernel families keep themselves.
            workspace_bytes: allocated
                .live
                .saturating_sub(params_bytes + arena_bytes + staging_bytes + decode_bytes),
            pinned_host_bytes,
            peak_bytes: Some(allocated.peak),
            graphs: self.graphs.len(),
        }
    }

    fn reset_memory_peak(&mut self) {
        self.gpu.reset_allocated_peak();
    }

    fn device_memory_used(&self) -> Result<Option<usize>, RuntimeError> {
        let (free, total) = self.gpu.memory_info().map_err(backend_error)?;
        Ok(Some(total.saturating_sub(free)))
    }

    fn kernel_loads(&self) -> Option<vitrt_kernels::cuda::KernelLoads> {
        Some(self.gpu.kernel_loads())
    }

    fn device_pci_bus_id(&self) -> Option<String> {
        self.gpu.pci_bus_id().ok()
    }

    fn write(&mut self, dst: BufferRef, data: &[f32]) -> Result<(), RuntimeError> {
        let (arena, offset_bytes, len, dtype) = self.arena_target(dst)?;
        if len != data.len() {
            return Err(RuntimeError::Backend(format!(
                "write of {} values into {len}",
                data.len()
            )));
        }
        self.gpu
            .upload(arena, offset_bytes, &dtype.encoded(data))
            .map_err(backend_error)
    }

    fn device_input_stream(&self) -> Option<(usize, u64)> {
        Some((self.ordinal, self.gpu.stream_handle()))
    }

    unsafe fn write_from_device(
        &mut self,
        dst: BufferRef,
        src: DeviceInput,
    ) -> Result<(), RuntimeError> {
        let (arena, offset_bytes, len, dtype) = self.arena_target(dst)?;
        if dtype != DType::F32 || len != src.len {
            return Err(RuntimeError::Backend(format!(
                "a device input of {} f32 values into {len} values of {dtype}",
                src.len
            )));
        }
        let device = self.gpu.device_of(src.ptr).map_err(backend_error)?;
        if device != self.ordinal {
            return Err(RuntimeError::Input {
                // Filled in by the executor, which knows the graph's input.
                name: String::new(),
                message: format!(
                    "the tensor is on cuda:{device}; this model runs on cuda:{}",
                    self.ordinal
                ),
            });
        }
        // SAFETY: the caller keeps `src` allocated and unwritten until the outputs are read,
        // which waits for this copy.
        unsafe {
            self.gpu
                .copy_from_device(arena, offset_bytes, src.ptr, src.len * 4)
                .map_err(backend_error)
        }
    }

    fn read(&mut self, src: BufferRef) -> Result<Vec<f32>, RuntimeError> {
        let (buffer, offset, len, dtype) = match src {
            BufferRef::Arena {
                offset_bytes,
                len,
                dtype,
            } => (
                self.arena
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Backend("no arena reserved".into()))?,
                offset_bytes,
                len,
                dtype,
            ),
            BufferRef::Param { id, len, dtype } => (&self.params[id], 0, len, dtype),
        };
        let mut bytes = vec![0u8; len * dtype.size_bytes()];
        self.gpu
            .download(buffer, offset, &mut bytes)
            .map_err(backend_error)?;
        Ok(dtype.decode(&bytes))
    }

    fn alloc_staging(&mut self, bytes: usize) -> Result<HostStaging, RuntimeError> {
        Ok(HostStaging::pinned(
            self.gpu.alloc_pinned(bytes).map_err(backend_error)?,
        ))
    }

    fn write_pixel_bytes(
        &mut self,
        dst: BufferRef,
        pixels: &[u8],
        shape: PixelBatch,
        table: &[f32],
        decode: Option<&DeviceDecode<'_>>,
    ) -> Result<Option<PendingRead>, RuntimeError> {
        check_pixel_write(dst, pixels, shape, table)?;
        if let Some(decode) = decode {
            decode.check(pixels.len())?;
        }
        self.upload_pixel_table(table)?;
        let slot = self.next_pixel_upload;
        self.next_pixel_upload = 1 - slot;
        // The slot's buffers, grown if this batch is larger; a buffer being replaced may still
        // be read by its last expansion.
        let decode_len = decode.map_or((0, 0), |d| (d.device_data_len(), d.tables.len()));
        let inputs_len = |u: &PixelUpload| {
            u.decode_inputs
                .as_ref()
                .map_or((0, 0), |(d, t)| (d.len_bytes(), t.len_bytes()))
        };
        let fits = self.pixel_uploads[slot].as_ref().is_some_and(|u| {
            let have = inputs_len(u);
            u.bytes.len_bytes() >= pixels.len() && have.0 >= decode_len.0 && have.1 >= decode_len.1
        });
        if !fits {
            let old = self.pixel_uploads[slot].take();
            if let Some(expanded) = old.as_ref().and_then(|old| old.expanded.as_ref()) {
                expanded.wait().map_err(backend_error)?;
            }
            let old_bytes = old.as_ref().map_or(0, |o| o.bytes.len_bytes());
            let old_inputs = old.as_ref().map_or((0, 0), inputs_len);
            drop(old);
            let want = (
                old_inputs.0.max(decode_len.0),
                old_inputs.1.max(decode_len.1),
            );
            let decode_inputs = if want == (0, 0) {
                None
            } else {
                Some((
                    self.gpu.alloc(want.0.max(1)).map_err(backend_error)?,
                    self.gpu.alloc(want.1.max(1)).map_err(backend_error)?,
                ))
            };
            self.pixel_uploads[slot] = Some(PixelUpload {
                bytes: self
                    .gpu
                    .alloc(old_bytes.max(pixels.len()))
                    .map_err(backend_error)?,
                decode_inputs,
                expanded: None,
            });
        }
        if let Some(decode) = decode {
            self.grow_decode_scratch(decode)?;
        }
        // Where the status words come back to (a read's page-locked buffer).
        let mut status_buffer = match decode {
            Some(d) => Some(self.take_read_buffer(d.jpeg.images.len() * 4)?),
            None => None,
        };
        let upload = self.pixel_uploads[slot].as_ref().expect("filled above");
        // Copy stream: wait until the buffers' last expansion has read them, then copy.
        if let Some(expanded) = &upload.expanded {
            self.gpu
                .stream_wait(Stream::Copy, expanded)
                .map_err(backend_error)?;
        }
        let copy_start = self.timeline_mark(Stream::Copy)?;
        let mut copied = self
            .gpu
            .upload_on_copy_stream(&upload.bytes, 0, pixels)
            .map_err(backend_error)?;
        if let (Some(decode), Some((data, tables))) = (decode, &upload.decode_inputs) {
            // After the pixels on the same stream: the last event covers every copy.
            self.gpu
                .upload_on_copy_stream(data, 0, decode.data)
                .map_err(backend_error)?;
            copied = self
                .gpu
                .upload_on_copy_stream(tables, 0, decode.tables)
                .map_err(backend_error)?;
        }
        // Copy stream, after the copies: the device decoding, which so overlaps the forward
        // pass of the batch before on the compute stream (benchmarks/NOTES.md, 2026-11-27
        // "JPEG entropy decoding on the GPU"). The scratch buffers are the copy stream's alone.
        let mut decoded = None;
        let mut ready = copied.clone();
        if let (Some(decode), Some((data, tables)), Some(scratch)) =
            (decode, &upload.decode_inputs, &self.decode_scratch)
        {
            let entropy_start = self.timeline_mark(Stream::Copy)?;
            let gpu = &self.gpu;
            gpu.launching_on(Stream::Copy, || {
                jpeg_scan::gpu::decode_scans(
                    gpu,
                    decode.scans,
                    decode.jpeg,
                    (tables, data, &scratch.states),
                    &decode.scan_at,
                    &decode.jpeg_at,
                )
            })
            .map_err(backend_error)?;
            let decode_start = self.timeline_mark(Stream::Copy)?;
            gpu.launching_on(Stream::Copy, || {
                jpeg::gpu::decode(
                    gpu,
                    decode.jpeg,
                    (tables, data),
                    &decode.jpeg_at,
                    &scratch.planes,
                    &scratch.rgb,
                )
            })
            .map_err(backend_error)?;
            let resize_start = self.timeline_mark(Stream::Copy)?;
            gpu.launching_on(Stream::Copy, || {
                resample::gpu::resample(
                    gpu,
                    decode.resample,
                    tables,
                    &decode.resample_at,
                    (&scratch.rgb, &scratch.mid, &upload.bytes),
                )
            })
            .map_err(backend_error)?;
            ready = self.gpu.record_on(Stream::Copy).map_err(backend_error)?;
            decoded = Some((
                entropy_start.filter(|_| !decode.scans.images.is_empty()),
                decode_start,
                resize_start,
                ready.clone(),
            ));
        }
        // Compute stream: after the work queued so far (the previous forward pass, which read
        // the input buffer) and the copies and decoding, expand into the input buffer.
        self.gpu
            .stream_wait(Stream::Compute, &ready)
            .map_err(backend_error)?;
        let mut status_read = None;
        if let (Some(decode), Some((_, tables)), Some(mut buffer)) =
            (decode, &upload.decode_inputs, status_buffer.take())
        {
            // The status words, copied back behind the kernels that wrote them.
            let images = decode.jpeg.images.len();
            let done = self
                .gpu
                .download_on_compute_stream(
                    tables,
                    decode.jpeg_at.status_at,
                    &mut buffer,
                    images * 4,
                )
                .map_err(backend_error)?;
            status_read = Some(QueuedRead {
                buffer,
                done,
                len: images,
                dtype: DType::F32,
            });
        }
        let (_, table_buffer) = self.pixel_table.as_ref().expect("uploaded above");
        let table_ptr = table_buffer
            .view(0, table.len(), DType::F32)
            .map_err(backend_error)?;
        let dst_ptr = self.ptr(dst).map_err(backend_error)?;
        let expand_start = self.timeline_mark(Stream::Compute)?;
        pixels::gpu::expand_pixels(&self.gpu, &upload.bytes, shape, table_ptr, dst_ptr)
            .map_err(backend_error)?;
        let expanded = self.gpu.record_on(Stream::Compute).map_err(backend_error)?;
        if let (Some(timeline), Some(copy_start), Some(expand_start)) =
            (self.timeline.as_mut(), copy_start, expand_start)
        {
            timeline.push((TimelineStage::CopyIn, copy_start, copied.clone()));
            if let Some((entropy_start, Some(decode_start), Some(resize_start), ready)) = decoded {
                if let Some(entropy_start) = entropy_start {
                    timeline.push((TimelineStage::Entropy, entropy_start, decode_start.clone()));
                }
                timeline.push((TimelineStage::Decode, decode_start, resize_start.clone()));
                timeline.push((TimelineStage::Resize, resize_start, ready));
            }
            timeline.push((TimelineStage::Expand, expand_start, expanded.clone()));
            self.last_expanded = Some(expanded.clone());
        }
        self.pixel_uploads[slot]
            .as_mut()
            .expect("filled above")
            .expanded = Some(expanded);
        // The caller may reuse `pixels` once the copy has read them: wait_for_input_copies.
        self.input_copies.push(copied);
        if let Some(unused) = status_buffer {
            self.spare_read_buffers.push(unused);
        }
        Ok(status_read.map(|read| self.queue_read(read)))
    }

    fn wait_for_input_copies(&mut self) -> Result<(), RuntimeError> {
        for copied in self.input_copies.drain(..) {
            copied.wait().map_err(backend_error)?;
        }
        Ok(())
    }

    fn start_read(&mut self, src: BufferRef) -> Result<PendingRead, RuntimeError> {
        let BufferRef::Arena {
            offset_bytes,
            len,
            dtype,
        } = src
        else {
            return Ok(PendingRead::ready(self.read(src)?));
        };
        let bytes = len * dtype.size_bytes();
        let mut buffer = self.take_read_buffer(bytes)?;
        let arena = self
            .arena
            .as_ref()
            .ok_or_else(|| RuntimeError::Backend("no arena reserved".into()))?;
        // The forward pass ends where the copy starts.
        let read_start = self.timeline_mark(Stream::Compute)?;
        let done = self
            .gpu
            .download_on_compute_stream(arena, offset_bytes, &mut buffer, bytes)
            .map_err(backend_error)?;
        if let (Some(timeline), Some(read_start)) = (self.timeline.as_mut(), read_start) {
            if let Some(forward_start) = self.last_expanded.take() {
                timeline.push((TimelineStage::Forward, forward_start, read_start.clone()));
            }
            timeline.push((TimelineStage::CopyOut, read_start, done.clone()));
        }
        Ok(self.queue_read(QueuedRead {
            buffer,
            done,
            len,
            dtype,
        }))
    }

    fn set_batch_invariant(&mut self, on: bool) {
        self.gpu.set_batch_invariant(on);
    }

    fn record_timeline(&mut self, on: bool) {
        self.timeline = on.then(Vec::new);
        self.last_expanded = None;
    }

    fn take_timeline(&mut self) -> Result<Vec<TimelineSpan>, RuntimeError> {
        let Some(timeline) = self.timeline.as_mut() else {
            return Ok(Vec::new());
        };
        let recorded = std::mem::take(timeline);
        let Some((_, origin, _)) = recorded.first() else {
            return Ok(Vec::new());
        };
        let mut spans = Vec::with_capacity(recorded.len());
        for (stage, start, end) in &recorded {
            spans.push(TimelineSpan {
                stage: *stage,
                start_ms: start.ms_since(origin).map_err(backend_error)?,
                end_ms: end.ms_since(origin).map_err(backend_error)?,
            });
        }
        Ok(spans)
    }

    fn finish_read(&mut self, pending: PendingRead) -> Result<Vec<f32>, RuntimeError> {
        let token = match pending.into_parts() {
            Ok(values) => return Ok(values),
            Err(token) => token,
        };
        let read = self.pending_reads.remove(&token).ok_or_else(|| {
            RuntimeError::Backend(format!("{} queued no read {token}", self.describe()))
        })?;
        read.done.wait().map_err(backend_error)?;
        let bytes = read.len * read.dtype.size_bytes();
        let values = read.dtype.decode(&read.buffer.as_slice()[..bytes]);
        self.spare_read_buffers.push(read.buffer);
        Ok(values)
    }

    fn supports(&self, op: &Op, input_shapes: &[&[usize]]) -> Result<(), String> {
        if let Some(p) = crate::layernorm_fold::problem_for(op, input_shapes) {
            return matmul::layernorm_matmul_support(&self.gpu, self.dtype, &p);
        }
        let Some(p) = lowering::attention_for(op, input_shapes) else {
            return Ok(());
        };
        fused_attention_support(self.dtype, p.head_dim)?;
        // The plan puts every value on a 256-byte boundary, so the strides decide.
        let extents = (p.batch, p.heads, p.tokens);
        for (what, view) in [("Q", &p.q), ("K", &p.k), ("V", &p.v), ("O", &p.o)] {
            if !attention_rows_aligned(0, self.dtype, view, extents) {
                return Err(format!(
                    "the fused attention kernel needs 16-byte aligned rows; {what} rows are {} \
                     elements apart from column {}",
                    view.row_stride, view.offset
                ));
            }
        }
        Ok(())
    }

    fn execute(
        &mut self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
        workspace: Option<BufferRef>,
    ) -> Result<(), String> {
        self.execute_op(op, inputs, output, workspace)
            .map_err(|e| e.to_string())
    }

    fn synchronize(&mut self) -> Result<(), RuntimeError> {
        self.gpu.synchronize().map_err(backend_error)
    }

    fn mark(&mut self) -> Result<(), RuntimeError> {
        self.marks
            .push(self.gpu.record_event().map_err(backend_error)?);
        Ok(())
    }

    fn take_mark_intervals(&mut self) -> Result<Vec<f32>, RuntimeError> {
        let marks = std::mem::take(&mut self.marks);
        marks
            .windows(2)
            .map(|pair| pair[1].ms_since(&pair[0]).map_err(backend_error))
            .collect()
    }

    fn can_capture(&self) -> bool {
        true
    }

    fn capture_graph(
        &mut self,
        key: u64,
        queue: &mut dyn FnMut(&mut dyn Backend) -> Result<(), RuntimeError>,
    ) -> Result<(), String> {
        self.graphs.remove(&key);
        self.gpu.begin_capture().map_err(|e| e.to_string())?;
        let queued = queue(self);
        // End the capture whatever happened, so the stream runs eagerly again.
        let ended = self.gpu.end_capture();
        queued.map_err(|e| format!("queuing the forward pass failed: {e}"))?;
        let graph = ended.map_err(|e| e.to_string())?;
        self.graphs.insert(key, graph);
        Ok(())
    }

    fn has_graph(&self, key: u64) -> bool {
        self.graphs.contains_key(&key)
    }

    fn replay_graph(&mut self, key: u64) -> Result<(), RuntimeError> {
        let graph = self
            .graphs
            .get(&key)
            .ok_or_else(|| RuntimeError::Backend(format!("no captured graph {key} to replay")))?;
        self.gpu.replay(graph).map_err(backend_error)
    }
}

impl CudaBackend {
    /// An event on `stream` when the timeline is being recorded, else none.
    fn timeline_mark(&self, stream: Stream) -> Result<Option<StreamEvent>, RuntimeError> {
        match self.timeline {
            Some(_) => Ok(Some(self.gpu.record_on(stream).map_err(backend_error)?)),
            None => Ok(None),
        }
    }

    /// Uploads the pixel expansion table unless it is the one already there.
    fn upload_pixel_table(&mut self, table: &[f32]) -> Result<(), RuntimeError> {
        if self
            .pixel_table
            .as_ref()
            .is_some_and(|(values, _)| values.as_slice() == table)
        {
            return Ok(());
        }
        // Uploads queue on the compute stream, behind any expansion still reading the old one.
        let bytes = DType::F32.encode(table);
        let buffer = self.gpu.alloc(bytes.len()).map_err(backend_error)?;
        self.gpu.upload(&buffer, 0, &bytes).map_err(backend_error)?;
        self.pixel_table = Some((table.to_vec(), buffer));
        Ok(())
    }

    /// The codes and row scales of an e4m3 activation of `rows` x `cols` at `buffer`'s offset,
    /// laid out as [`crate::fp8::InputWorkspace`] says.
    fn e4m3_activation(
        &self,
        buffer: BufferRef,
        rows: usize,
        cols: usize,
    ) -> Result<(vitrt_kernels::matmul::E4m3Ptr, DevPtr), KernelError> {
        let BufferRef::Arena { offset_bytes, .. } = buffer else {
            return Err(KernelError::InvalidArgument(
                "an e4m3 activation lies in the arena".into(),
            ));
        };
        let layout = crate::fp8::InputWorkspace::new(rows, cols);
        let codes = self.ptr(BufferRef::Arena {
            offset_bytes,
            len: layout.codes_bytes,
            dtype: DType::E4M3,
        })?;
        let scales = self.ptr(BufferRef::Arena {
            offset_bytes: offset_bytes + layout.scales_offset,
            len: rows,
            dtype: DType::F32,
        })?;
        Ok((e4m3_view(codes), scales))
    }

    /// An FP8 linear layer: x quantised into the node's workspace (a scale a row, or with
    /// `io.static_input` its static scale) unless its producer wrote it in e4m3, then the FP8
    /// matmul with the layer's epilogue, writing the compute type or, with `io.e4m3_output`,
    /// e4m3 codes with the output scale.
    #[allow(clippy::too_many_arguments)]
    fn fp8_linear(
        &self,
        epilogue: vitrt_kernels::Epilogue,
        io: crate::graph::Fp8Io,
        inputs: &[Binding],
        output: &Binding,
        ins: &[DevPtr],
        out: DevPtr,
        workspace: Option<BufferRef>,
    ) -> Result<(), KernelError> {
        use vitrt_kernels::matmul::{
            ActivationScale, Fp8Destination, Fp8Operands, Fp8Output, Fp8Problem,
        };
        use vitrt_kernels::quantize::{self, QuantizeProblem};
        let dtypes: Vec<DType> = ins.iter().map(|p| p.dtype).collect();
        crate::fp8::check_storage(self.dtype, epilogue, io, &dtypes, out.dtype)
            .map_err(KernelError::InvalidArgument)?;
        let slots = crate::fp8::Fp8Slots::of(epilogue, io);
        let (x_shape, w_shape) = (&inputs[0].shape, &inputs[1].shape);
        let k = *x_shape.last().unwrap_or(&0);
        let (n, m) = (
            w_shape[0],
            inputs[0].shape.iter().product::<usize>() / k.max(1),
        );
        let static_scale = slots.input_scale.map(|slot| ins[slot]);
        let activation_scale = match static_scale {
            Some(_) => ActivationScale::PerTensor,
            None => ActivationScale::PerRow,
        };
        let (codes, scales) = if ins[0].dtype == DType::E4M3 {
            // Its producer wrote the codes (and, without a static scale, the row scales).
            let (codes, row_scales) = self.e4m3_activation(inputs[0].buffer, m, k)?;
            (codes, static_scale.unwrap_or(row_scales))
        } else {
            let Some(BufferRef::Arena {
                offset_bytes: base, ..
            }) = workspace
            else {
                return Err(KernelError::InvalidArgument(
                    "an FP8 linear layer needs a workspace for its quantised input".into(),
                ));
            };
            let workspace = BufferRef::Arena {
                offset_bytes: base,
                len: m * k,
                dtype: DType::E4M3,
            };
            let (codes, row_scales) = self.e4m3_activation(workspace, m, k)?;
            let scales = static_scale.unwrap_or(row_scales);
            quantize::gpu::quantize_rows(
                &self.gpu,
                &QuantizeProblem {
                    rows: m,
                    cols: k,
                    input: self.dtype,
                    scale: activation_scale,
                },
                ins[0],
                codes,
                scales,
            )?;
            (codes, scales)
        };
        let c = match slots.output_scale {
            Some(slot) => Fp8Destination::E4m3 {
                c: self.e4m3_activation(output.buffer, m, n)?.0,
                scale: ins[slot],
            },
            None => Fp8Destination::Half(out),
        };
        let problem = Fp8Problem {
            m,
            n,
            k,
            half: self.dtype,
            output: if io.e4m3_output {
                Fp8Output::E4m3
            } else {
                Fp8Output::Half
            },
            activation_scale,
            bias: epilogue.bias,
            activation: epilogue.activation,
            residual: epilogue.residual,
        };
        vitrt_kernels::matmul::gpu::matmul_fp8(
            &self.gpu,
            &problem,
            &Fp8Operands {
                a: codes,
                b: e4m3_view(ins[1]),
                a_scale: scales,
                b_scale: ins[2],
                bias: slots.bias.map(|slot| ins[slot]),
                residual: slots.residual.map(|slot| ins[slot]),
                c,
            },
        )
    }

    fn execute_op(
        &self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
        workspace: Option<BufferRef>,
    ) -> Result<(), KernelError> {
        let d = self.dtype;
        let ins: Vec<DevPtr> = inputs
            .iter()
            .map(|b| self.ptr(b.buffer))
            .collect::<Result<_, _>>()?;
        let out = self.ptr(output.buffer)?;
        let last = |s: &[usize]| *s.last().unwrap_or(&1);
        let gpu = &self.gpu;
        match op {
            Op::PatchEmbed {
                patch,
                prefix_tokens,
            } => {
                let ws = self.ptr(workspace.ok_or_else(|| {
                    KernelError::InvalidArgument("patch embedding needs a workspace".into())
                })?)?;
                let px = &inputs[0].shape;
                let (b, c, h, w) = (px[0], px[1], px[2], px[3]);
                let (tokens, hidden) = (output.shape[1], output.shape[2]);
                let prefix = PrefixRows {
                    // Not read without prefix rows; any valid pointer will do.
                    rows: if *prefix_tokens > 0 { ins[4] } else { ins[3] },
                    count: *prefix_tokens,
                };
                patchify::gpu::patchify_with_prefix(
                    gpu, d, ins[0], b, c, h, w, *patch, prefix, ins[3], hidden, tokens, ws, out,
                )?;
                let problem = lowering::patch_projection(op, px, &output.shape)
                    .ok_or_else(|| KernelError::InvalidArgument("not a patch embedding".into()))?;
                matmul::gpu::matmul(
                    gpu,
                    d,
                    &problem,
                    ws,
                    ins[1],
                    Some(ins[2]),
                    Some(ins[3]),
                    out,
                )
            }
            // Read only by FP8 linear layers: their e4m3 codes and row scales.
            Op::LayerNorm { eps } if out.dtype == DType::E4M3 => {
                let cols = last(&inputs[0].shape);
                let rows = inputs[0].shape.iter().product::<usize>() / cols.max(1);
                let (codes, scales) = self.e4m3_activation(output.buffer, rows, cols)?;
                layernorm::gpu::layernorm_e4m3(
                    gpu, ins[0], ins[1], ins[2], rows, cols, *eps, codes, scales,
                )
            }
            // Read only by FP8 linear layers with one static input scale: their e4m3 codes.
            Op::LayerNormE4m3 { eps } => {
                let cols = last(&inputs[0].shape);
                let rows = inputs[0].shape.iter().product::<usize>() / cols.max(1);
                let (codes, _) = self.e4m3_activation(output.buffer, rows, cols)?;
                layernorm::gpu::layernorm_e4m3_static(
                    gpu, ins[0], ins[1], ins[2], rows, cols, *eps, codes, ins[3],
                )
            }
            Op::LayerNorm { eps } => {
                let cols = last(&inputs[0].shape);
                let rows = inputs[0].shape.iter().product::<usize>() / cols.max(1);
                layernorm::gpu::layernorm(gpu, d, ins[0], ins[1], ins[2], rows, cols, *eps, out)
            }
            Op::RmsNorm { eps } => {
                let cols = last(&inputs[0].shape);
                let rows = inputs[0].shape.iter().product::<usize>() / cols.max(1);
                rmsnorm::gpu::rmsnorm(gpu, d, ins[0], ins[1], rows, cols, *eps, out)
            }
            Op::Linear { .. } | Op::AttentionScores { .. } | Op::AttentionContext { .. } => {
                let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape.as_slice()).collect();
                let problem = lowering::matmul_for(op, &shapes)
                    .ok_or_else(|| KernelError::InvalidArgument("not a matmul".into()))?;
                let epilogue = problem.epilogue;
                let bias = epilogue.bias.then(|| ins[2]);
                let residual = epilogue.residual.then(|| ins[2 + epilogue.bias as usize]);
                // The stream a folded layernorm reads: its row statistics beside it.
                if let Some(statistics) = crate::layernorm_fold::statistics_buffer(output) {
                    let residual = residual.ok_or_else(|| {
                        KernelError::InvalidArgument(
                            "row statistics are written by a linear layer with a residual".into(),
                        )
                    })?;
                    let statistics = self.ptr(statistics)?;
                    return matmul::gpu::matmul_with_row_statistics(
                        gpu, d, &problem, ins[0], ins[1], bias, residual, out, statistics,
                    );
                }
                matmul::gpu::matmul(gpu, d, &problem, ins[0], ins[1], bias, residual, out)
            }
            Op::Fp8Linear { epilogue, io } => {
                self.fp8_linear(*epilogue, *io, inputs, output, &ins, out, workspace)
            }
            Op::LayerNormLinear { .. } => {
                let dtypes: Vec<DType> = ins.iter().map(|p| p.dtype).collect();
                crate::layernorm_fold::check_storage(d, &dtypes, out.dtype)
                    .map_err(KernelError::InvalidArgument)?;
                let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape.as_slice()).collect();
                let problem = crate::layernorm_fold::problem_for(op, &shapes).ok_or_else(|| {
                    KernelError::InvalidArgument(
                        "not a layernorm folded into a linear layer".into(),
                    )
                })?;
                let statistics =
                    crate::layernorm_fold::statistics_buffer(&inputs[0]).ok_or_else(|| {
                        KernelError::InvalidArgument(
                            "a folded layernorm's input carries no row statistics".into(),
                        )
                    })?;
                let statistics = self.ptr(statistics)?;
                matmul::gpu::matmul_layernorm(
                    gpu, d, &problem, ins[0], statistics, ins[1], ins[2], ins[3], out,
                )
            }
            // In its input's type: the run's dtype, or f32 where its output leaves the graph.
            Op::Activation(act) => {
                activation::gpu::activation(gpu, ins[0].dtype, *act, ins[0], out.len, out)
            }
            Op::Attention { .. } => {
                let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape.as_slice()).collect();
                let problem = lowering::attention_for(op, &shapes)
                    .ok_or_else(|| KernelError::InvalidArgument("not an attention".into()))?;
                if problem.key_padding {
                    // The key lengths' slots hold i32 bit patterns (crate::key_padding).
                    attention::gpu::attention_with_key_lengths(
                        gpu, d, &problem, None, ins[0], ins[1], ins[2], out, ins[3],
                    )
                } else {
                    attention::gpu::attention(gpu, d, &problem, ins[0], ins[1], ins[2], out)
                }
            }
            Op::Add => add::gpu::add(gpu, d, ins[0], ins[1], out.len, out),
            // Written in the run's dtype from the scores' (f32 in bf16 runs), or f32 where its
            // output leaves the graph (zero-shot probabilities).
            Op::Softmax { causal: false } => {
                let cols = last(&inputs[0].shape);
                let rows = out.len / cols.max(1);
                softmax::gpu::softmax(gpu, out.dtype, ins[0], rows, cols, 1.0, out)
            }
            Op::Softmax { causal: true } => {
                let cols = last(&inputs[0].shape);
                let rows = out.len / cols.max(1);
                softmax::gpu::softmax_causal(gpu, out.dtype, ins[0], rows, cols, cols, 1.0, out)
            }
            Op::SelectToken { index } => {
                let s = &inputs[0].shape;
                let (b, t, c) = (s[0], s[1], s[2]);
                // The token keeps its tensor's type (f32 when selected from the stream).
                gather::gpu::gather_rows(gpu, ins[0].dtype, ins[0], t * c, index * c, b, c, out)
            }
            Op::MeanTokens { start } => {
                let s = &inputs[0].shape;
                pool::gpu::token_mean(gpu, d, ins[0], s[0], s[1], *start, s[2], out)
            }
            Op::Rope {
                heads,
                head_dim,
                grid,
            } => {
                let s = &inputs[0].shape;
                rope::gpu::rope(gpu, d, ins[0], s[0], s[1], *heads, *head_dim, grid, out)
            }
            Op::SwiGlu => {
                let half = last(&inputs[0].shape) / 2;
                activation::gpu::swiglu(gpu, d, ins[0], out.len / half.max(1), half, out)
            }
            // Written in the stream's type (f32 in bf16 runs): the embedding starts it.
            Op::TokenEmbedding => {
                let (ids, table) = (&inputs[0].shape, &inputs[1].shape);
                let (rows, tokens) = (ids[0] * ids[1], ids[1]);
                let (vocab, dim) = (table[0], table[1]);
                gather::gpu::token_embedding(
                    gpu, d, out.dtype, ins[0], ins[1], ins[2], rows, tokens, dim, vocab, out,
                )
            }
            Op::L2Normalize => {
                let cols = last(&inputs[0].shape);
                let rows = out.len / cols.max(1);
                normalize::gpu::l2_normalize(gpu, d, ins[0], rows, cols, out)
            }
            Op::SelectEndToken { rule } => {
                let s = &inputs[0].shape;
                let (b, t, c) = (s[0], s[1], s[2]);
                gather::gpu::end_token_rows(gpu, ins[0].dtype, ins[0], ins[1], b, t, c, *rule, out)
            }
        }
    }
}
