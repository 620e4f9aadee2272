//! The device: one [`Gpu`] (context, compute and copy streams, NVRTC, the module cache),
//! allocation, plain copies, and the launch of one instantiation. Streams, events, capture,
//! timing and the cuBLAS yardstick extend it in files of their own.

use super::cache::DiskCache;
use super::compile::Compiler;
use super::error::{invalid, KernelError};
use super::memory::{AllocatedBytes, AllocationCounter, DeviceBuffer};
use super::registry::{Instantiation, KernelArg, ParamSlot};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DevicePtr as _};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Grid and block of one launch. Blocks are one-dimensional: kernels index threads by
/// `threadIdx.x` and derive any 2-D layout themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchDims {
    pub grid: (u32, u32, u32),
    pub block: u32,
    /// Dynamic shared memory, bytes.
    pub shared_bytes: u32,
    /// CTAs per cluster along x (1: no clusters); the grid's x a multiple of it.
    pub cluster: u32,
}

/// One loaded kernel and what the driver says it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedKernel {
    pub name: String,
    pub registers: u32,
    pub static_shared_bytes: u32,
    /// Local memory per thread: stack frame and spills.
    pub local_bytes: u32,
}

/// Which of the Gpu's streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Kernels, the forward pass, downloads.
    Compute,
    /// Uploads from page-locked memory.
    Copy,
}

/// One CUDA device: a context, one stream every op is queued on, NVRTC, and the kernels
/// loaded so far.
pub struct Gpu {
    pub(super) context: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// Host-to-device copies that overlap the compute stream (staging.rs).
    pub(super) copy_stream: Arc<CudaStream>,
    pub(super) name: String,
    pub(super) compute_capability: (u32, u32),
    pub(super) multiprocessors: u32,
    pub(super) compiler: Compiler,
    pub(super) disk_cache: Option<DiskCache>,
    pub(super) kernels: Mutex<HashMap<String, CudaFunction>>,
    /// The dynamic shared-memory limit per kernel, as the driver first reported it or as
    /// raised since: raised once, not per launch (so that a CUDA graph capture sees only
    /// launches).
    pub(super) shared_limits: Mutex<HashMap<String, u32>>,
    /// `max_active_clusters`' answers, by instantiation, cluster size and shared memory.
    pub(super) cluster_occupancy: Mutex<HashMap<String, u32>>,
    /// Tags the buffers (and graphs) this Gpu makes.
    pub(super) id: usize,
    /// A CUDA graph capture is open on the stream (capture.rs).
    pub(super) capturing: AtomicBool,
    /// Kernel launches recorded by the open capture.
    pub(super) captured_launches: AtomicUsize,
    /// State of the kernel families outside the device layer (the matmul), one value per
    /// type, made on first use (see [`Gpu::family_state`]).
    pub(super) family_states: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Launch with programmatic stream serialization (see [`Gpu::set_dependent_launch`]).
    pub(super) dependent_launch: AtomicBool,
    /// Kernels are queued on the copy stream (see [`Gpu::launching_on`]).
    pub(super) launch_on_copy_stream: AtomicBool,
    /// Programs are chosen whatever the batch size (see [`Gpu::set_batch_invariant`]).
    pub(super) batch_invariant: AtomicBool,
    /// The name of the last kernel queued, for errors that surface at a later wait.
    pub(super) last_kernel: Mutex<String>,
    /// The device memory this Gpu's buffers hold (see [`Gpu::allocated_bytes`]).
    pub(super) allocations: Arc<AllocationCounter>,
    /// How the kernels loaded so far got here (see [`Gpu::kernel_loads`]).
    pub(super) kernel_loads: Mutex<KernelLoads>,
}

/// How the kernels a Gpu loaded got there, and the host time it took: what a cold start
/// (empty kernel cache) spends compiling, against a warm one's cache loads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelLoads {
    /// Compiled by NVRTC (not in the disk cache, or refused from it by the driver).
    pub compiled: usize,
    /// Compiling and loading them (a failed cache load before included).
    pub compile_time: Duration,
    /// Loaded from the disk cache.
    pub cached: usize,
    /// Reading and loading them.
    pub cache_time: Duration,
}

static NEXT_GPU_ID: AtomicUsize = AtomicUsize::new(1);

/// Runs a cudarc call that may panic (it does when a library or symbol is missing) and turns
/// the panic into an error.
pub(super) fn guarded<T>(what: &str, call: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        format!("{what}: {message}")
    })
}

/// The driver started on another thread ([`DriverWarmUp::start`]): `cuInit` and the device's
/// primary context, about 0.2 s on an H100, which is what opening a [`Gpu`] mostly waits for.
/// A process that has host work to do before it needs the GPU (reading and encoding a
/// checkpoint) starts this first, does that work, then opens the [`Gpu`], which finds the
/// driver up and retains the same primary context. Dropping the warm-up waits for its thread
/// and releases its hold on the context (the Gpu's own hold keeps the context alive).
/// Failures are not reported here: opening the Gpu meets them again and says what they are.
/// Measured: benchmarks/NOTES.md, 2026-11-25 "Warm start: the driver behind the weights".
pub struct DriverWarmUp {
    thread: Option<std::thread::JoinHandle<Option<Arc<CudaContext>>>>,
}

impl DriverWarmUp {
    /// Starts the driver and device `ordinal`'s primary context on a new thread; `None`
    /// where no driver library loads (a machine without an NVIDIA driver).
    pub fn start(ordinal: usize) -> Option<DriverWarmUp> {
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return None;
        }
        let thread = std::thread::Builder::new()
            .name("vitrt-driver-warm-up".into())
            .spawn(move || guarded("cuCtx", || CudaContext::new(ordinal)).ok()?.ok())
            .ok()?;
        Some(DriverWarmUp {
            thread: Some(thread),
        })
    }
}

impl Drop for DriverWarmUp {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            // The context's last release, if the Gpu was never opened, happens here.
            drop(thread.join());
        }
    }
}

impl Gpu {
    /// The CUDA devices this process sees (after `CUDA_VISIBLE_DEVICES`); an error where
    /// there is no driver.
    pub fn device_count() -> Result<usize, KernelError> {
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(KernelError::NoDriver(
                "libcuda.so could not be loaded: is the NVIDIA driver installed?".into(),
            ));
        }
        match guarded("cuDeviceGetCount", CudaContext::device_count)
            .map_err(KernelError::NoDriver)?
        {
            Ok(count) => Ok(count.max(0) as usize),
            Err(e) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
            Err(e) => Err(KernelError::NoDriver(format!(
                "the driver would not initialise: {e:?}"
            ))),
        }
    }

    /// Opens device `ordinal`, and finds NVRTC and the CUDA headers, so that a machine that
    /// cannot compile kernels fails here rather than at the first op.
    pub fn new(ordinal: usize) -> Result<Gpu, KernelError> {
        let count = Gpu::device_count()?;
        if ordinal >= count {
            return Err(KernelError::NoDevice { ordinal, count });
        }
        let compiler = Compiler::new()?;
        let context = guarded("cuCtx", || CudaContext::new(ordinal))
            .map_err(KernelError::NoDriver)?
            .map_err(|e| KernelError::driver("creating the context", e))?;
        // One stream orders everything, so cudarc's per-buffer event tracking is pure overhead.
        unsafe { context.disable_event_tracking() };
        let stream = context
            .new_stream()
            .map_err(|e| KernelError::driver("cuStreamCreate", e))?;
        let copy_stream = context
            .new_stream()
            .map_err(|e| KernelError::driver("cuStreamCreate", e))?;
        let name = context
            .name()
            .map_err(|e| KernelError::driver("cuDeviceGetName", e))?;
        let attribute = |a| {
            context
                .attribute(a)
                .map_err(|e| KernelError::driver("cuDeviceGetAttribute", e))
        };
        let major = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let multiprocessors =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Gpu {
            context,
            stream,
            copy_stream,
            name,
            compute_capability: (major as u32, minor as u32),
            multiprocessors: multiprocessors.max(1) as u32,
            compiler,
            disk_cache: DiskCache::from_env(),
            kernels: Mutex::new(HashMap::new()),
            shared_limits: Mutex::new(HashMap::new()),
            cluster_occupancy: Mutex::new(HashMap::new()),
            id: NEXT_GPU_ID.fetch_add(1, Ordering::Relaxed),
            capturing: AtomicBool::new(false),
            captured_launches: AtomicUsize::new(0),
            family_states: Mutex::new(HashMap::new()),
            last_kernel: Mutex::new(String::new()),
            allocations: Arc::new(AllocationCounter::default()),
            kernel_loads: Mutex::new(KernelLoads::default()),
            launch_on_copy_stream: AtomicBool::new(false),
            batch_invariant: AtomicBool::new(false),
            dependent_launch: AtomicBool::new(
                major >= 9 && std::env::var_os("VITRT_DEPENDENT_LAUNCH").is_none_or(|v| v != "0"),
            ),
        })
    }

    /// Whether kernels are launched as programmatic dependents of the kernel before them:
    /// on by default from compute capability 9.0, off when `VITRT_DEPENDENT_LAUNCH=0`.
    ///
    /// A dependent launch is processed as soon as the previous grid's CTAs have exited,
    /// overlapping its completion flush (every wrapper waits with `griddepcontrol.wait` before
    /// it touches memory, see [`Instantiation::program_source`]); in CUDA graphs too. Measured:
    /// benchmarks/NOTES.md, 2026-11-22 "Programmatic dependent launch".
    pub fn dependent_launch(&self) -> bool {
        self.dependent_launch.load(Ordering::Relaxed)
    }

    /// Whether the kernels choose their programs whatever the batch size: the matmul's tile
    /// and program as for a problem of many rows (no tuned tile, no split-K) and the
    /// attention's program as for a large batch, so that an output row is summed in the same
    /// order whatever else shares its launch (`vitrt serve`'s batch invariance; its cost at
    /// small batches: benchmarks/NOTES.md, 2026-11-27 "Batch invariance on the GPU").
    pub fn batch_invariant(&self) -> bool {
        self.batch_invariant.load(Ordering::Relaxed)
    }

    /// Turns batch-invariant selection on or off (see [`Gpu::batch_invariant`]).
    pub fn set_batch_invariant(&self, on: bool) {
        self.batch_invariant.store(on, Ordering::Relaxed);
    }

    /// Runs `work` with every kernel it launches queued on `stream` (the compute stream
    /// otherwise): work that should overlap the compute stream's, such as decoding the next
    /// batch's images during the forward pass. Launches on the copy stream are never
    /// dependent launches, and none may happen during a capture.
    pub fn launching_on<T>(
        &self,
        stream: Stream,
        work: impl FnOnce() -> Result<T, KernelError>,
    ) -> Result<T, KernelError> {
        let copy = stream == Stream::Copy;
        if copy {
            self.refuse_while_capturing("launching on the copy stream")?;
        }
        let before = self.launch_on_copy_stream.swap(copy, Ordering::SeqCst);
        let result = work();
        self.launch_on_copy_stream.store(before, Ordering::SeqCst);
        result
    }

    /// Turns dependent launches on or off (they stay off below compute capability 9.0, which
    /// has none): for A/B measurements and for tests that compare both.
    pub fn set_dependent_launch(&self, on: bool) {
        self.dependent_launch
            .store(on && self.compute_capability.0 >= 9, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn compute_capability(&self) -> (u32, u32) {
        self.compute_capability
    }

    /// Streaming multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// The compiler this device uses (NVRTC version, header directory).
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    pub(crate) fn bind(&self) -> Result<(), KernelError> {
        self.context
            .bind_to_thread()
            .map_err(|e| KernelError::driver("cuCtxSetCurrent", e))
    }

    /// Allocates `bytes` of uninitialised device memory.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, KernelError> {
        if bytes == 0 {
            return Ok(DeviceBuffer {
                _allocation: None,
                ptr: 0,
                len_bytes: 0,
                owner: self.id,
                counter: None,
            });
        }
        self.refuse_while_capturing("allocating device memory")?;
        self.bind()?;
        let slice = unsafe { self.stream.alloc::<u8>(bytes) }.map_err(|e| {
            if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                let free = self
                    .context
                    .mem_get_info()
                    .map(|(free, _)| free)
                    .unwrap_or(0);
                KernelError::OutOfMemory {
                    requested: bytes,
                    free,
                }
            } else {
                KernelError::driver("cuMemAlloc", e)
            }
        })?;
        let (ptr, _) = slice.device_ptr(&self.stream);
        self.allocations.add(bytes);
        Ok(DeviceBuffer {
            ptr,
            _allocation: Some(slice),
            len_bytes: bytes,
            owner: self.id,
            counter: Some(Arc::clone(&self.allocations)),
        })
    }

    /// The device memory held by the buffers this Gpu allocated (weights, arena, kernels'
    /// scratch: everything `alloc` handed out and not yet dropped), and the most held at once
    /// since it was opened or [`Gpu::reset_allocated_peak`]. Our account; the driver's view
    /// of the device is [`Gpu::memory_info`].
    pub fn allocated_bytes(&self) -> AllocatedBytes {
        self.allocations.get()
    }

    /// Starts a new peak for [`Gpu::allocated_bytes`] from what is held now.
    pub fn reset_allocated_peak(&self) {
        self.allocations.reset_peak();
    }

    /// `(free, total)` bytes of the device as the driver reports them (`cuMemGetInfo`): used
    /// memory counts every process on the device, this one's context, loaded modules and CUDA
    /// graphs included.
    pub fn memory_info(&self) -> Result<(usize, usize), KernelError> {
        self.context
            .mem_get_info()
            .map_err(|e| KernelError::driver("cuMemGetInfo", e))
    }

    /// How many kernels were compiled and how many loaded from the disk cache so far, and the
    /// host time each took.
    pub fn kernel_loads(&self) -> KernelLoads {
        *self
            .kernel_loads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn check_owner(&self, buffer: &DeviceBuffer) -> Result<(), KernelError> {
        if buffer.owner == self.id {
            Ok(())
        } else {
            Err(invalid!("the buffer belongs to another Gpu"))
        }
    }

    /// Copies `src` into `dst` at `offset_bytes`. `src` may be reused as soon as this returns.
    pub fn upload(
        &self,
        dst: &DeviceBuffer,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), KernelError> {
        self.check_owner(dst)?;
        dst.check_range(offset_bytes, src.len(), "upload")?;
        if src.is_empty() {
            return Ok(());
        }
        self.refuse_while_capturing("a host-to-device copy")?;
        self.bind()?;
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                dst.ptr + offset_bytes as u64,
                src,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| KernelError::driver("cuMemcpyHtoDAsync", e))
    }

    /// The compute stream's handle (a `CUstream` as an integer): what a producer of device
    /// memory is told to order its writes before, as DLPack's `__dlpack__(stream=...)` is.
    pub fn stream_handle(&self) -> u64 {
        self.stream.cu_stream() as u64
    }

    /// The CUDA device ordinal of `ptr` when it is device memory this process can address
    /// (`cuPointerGetAttribute`), or why not: what to check before reading memory someone
    /// else allocated.
    pub fn device_of(&self, ptr: u64) -> Result<usize, KernelError> {
        use cudarc::driver::sys::{cuPointerGetAttribute, CUmemorytype, CUpointer_attribute};
        self.bind()?;
        let mut memory_type: u32 = 0;
        // SAFETY: the attribute is a 32-bit value written into `memory_type`.
        let kind = unsafe {
            cuPointerGetAttribute(
                (&mut memory_type as *mut u32).cast(),
                CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            )
        };
        if kind != CUresult::CUDA_SUCCESS
            || memory_type != CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
        {
            return Err(invalid!(
                "{ptr:#x} is not device memory this process can read ({kind:?})"
            ));
        }
        let mut ordinal: i32 = -1;
        // SAFETY: the attribute is a 32-bit value written into `ordinal`.
        let result = unsafe {
            cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast(),
                CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        };
        if result != CUresult::CUDA_SUCCESS || ordinal < 0 {
            return Err(invalid!("the device of {ptr:#x} is unknown ({result:?})"));
        }
        Ok(ordinal as usize)
    }

    /// Copies `bytes` from device memory someone else owns (`src`, on this GPU) into `dst` at
    /// `offset_bytes`, queued on the compute stream: no host round trip.
    ///
    /// # Safety
    /// `src..src + bytes` must be device memory on this GPU that stays allocated and unwritten
    /// until the copy has run (the next [`Gpu::synchronize`] or download).
    pub unsafe fn copy_from_device(
        &self,
        dst: &DeviceBuffer,
        offset_bytes: usize,
        src: u64,
        bytes: usize,
    ) -> Result<(), KernelError> {
        self.check_owner(dst)?;
        dst.check_range(offset_bytes, bytes, "device copy")?;
        if bytes == 0 {
            return Ok(());
        }
        self.refuse_while_capturing("a device-to-device copy")?;
        self.bind()?;
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst.ptr + offset_bytes as u64,
                src,
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| KernelError::driver("cuMemcpyDtoDAsync", e))
    }

    /// Copies from `src` at `offset_bytes` into `dst`, after all queued work has finished.
    pub fn download(
        &self,
        src: &DeviceBuffer,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), KernelError> {
        self.check_owner(src)?;
        src.check_range(offset_bytes, dst.len(), "download")?;
        if dst.is_empty() {
            return self.synchronize();
        }
        self.refuse_while_capturing("a device-to-host copy")?;
        self.bind()?;
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(
                dst,
                src.ptr + offset_bytes as u64,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| KernelError::at_wait("cuMemcpyDtoHAsync", e, &self.last_kernel()))?;
        self.synchronize()
    }

    /// The last kernel queued (empty before the first), for errors found at a later wait.
    pub(crate) fn last_kernel(&self) -> String {
        self.last_kernel
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(super) fn set_last_kernel(&self, name: &str) {
        let mut last = self
            .last_kernel
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if *last != name {
            last.clear();
            last.push_str(name);
        }
    }

    /// The value of type `T` this Gpu keeps for a kernel family, made by `init` on first use:
    /// per-device state of a family outside the device layer (the matmul's tuning table and
    /// split-K scratch) without the device layer knowing the family.
    pub(crate) fn family_state<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut states = self
            .family_states
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let state = states
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()));
        Arc::clone(state)
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("family states are keyed by their type"))
    }

    /// The driver context, for device queries of the families outside the device layer.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// Waits for every queued op; reports any error a kernel raised while running.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.refuse_while_capturing("waiting for the stream")?;
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| KernelError::at_wait("cuStreamSynchronize", e, &self.last_kernel()))
    }

    /// Loads (compiling on first use) and launches one instantiation on the Gpu's stream.
    pub(crate) fn launch(
        &self,
        inst: &Instantiation,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<(), KernelError> {
        inst.check_args(args)?;
        if dims.block != inst.block_threads {
            return Err(invalid!(
                "kernel {} is built for blocks of {} threads, launch asked for {}",
                inst.name,
                inst.block_threads,
                dims.block
            ));
        }
        let (gx, gy, gz) = dims.grid;
        if gx == 0 || gy == 0 || gz == 0 {
            return Ok(());
        }
        if gy > 65_535 || gz > 65_535 || gx > i32::MAX as u32 {
            return Err(invalid!(
                "grid {:?} for kernel {} is beyond CUDA's limits",
                dims.grid,
                inst.name
            ));
        }
        let function = self.kernel_with_shared(inst, dims.shared_bytes)?;
        let mut slots: Vec<ParamSlot> = args.iter().map(|a| a.to_slot()).collect();
        let mut params: Vec<*mut std::ffi::c_void> = slots
            .iter_mut()
            .map(|s| s as *mut ParamSlot as *mut _)
            .collect();
        self.bind()?;
        let on_copy_stream = self.launch_on_copy_stream.load(Ordering::SeqCst);
        let mut attributes =
            launch_attributes(dims.cluster, self.dependent_launch() && !on_copy_stream);
        let mut config = self.launch_config(dims, &mut attributes);
        if on_copy_stream {
            config.hStream = self.copy_stream.cu_stream();
        }
        unsafe {
            cudarc::driver::sys::cuLaunchKernelEx(
                &config,
                function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(|e| {
            KernelError::at_wait(&format!("launching {}", inst.name), e, &self.last_kernel())
        })?;
        self.set_last_kernel(&inst.name);
        if self.is_capturing() {
            self.captured_launches.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The loaded function for `inst`, allowed `shared_bytes` of dynamic shared memory.
    fn kernel_with_shared(
        &self,
        inst: &Instantiation,
        shared_bytes: u32,
    ) -> Result<CudaFunction, KernelError> {
        let function = self.kernel(inst)?;
        if self.shared_limit(&inst.name, &function) < shared_bytes {
            self.refuse_while_capturing(&format!(
                "raising the shared-memory limit of {}",
                inst.name
            ))?;
            unsafe {
                cudarc::driver::result::function::set_function_attribute(
                    function.cu_function(),
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }
            .map_err(|e| {
                KernelError::driver(
                    &format!("raising the shared-memory limit of {}", inst.name),
                    e,
                )
            })?;
            self.shared_limits
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(inst.name.clone(), shared_bytes);
        }
        Ok(function)
    }

    /// How many clusters of `cluster` CTAs of `inst`, launched with `dims`, the GPU holds at
    /// once (the driver's occupancy answer: a cluster's CTAs must share a GPC, so this can be
    /// less than the SMs over `cluster`). Asked once per instantiation and kept.
    pub(crate) fn max_active_clusters(
        &self,
        inst: &Instantiation,
        dims: LaunchDims,
    ) -> Result<u32, KernelError> {
        let key = format!("{}/{}/{}", inst.name, dims.cluster, dims.shared_bytes);
        if let Some(&known) = self
            .cluster_occupancy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
        {
            return Ok(known);
        }
        let function = self.kernel_with_shared(inst, dims.shared_bytes)?;
        // The occupancy query reads the cluster and block shape; the grid is one cluster.
        let one_cluster = LaunchDims {
            grid: (dims.cluster.max(1), 1, 1),
            ..dims
        };
        let mut attributes = launch_attributes(dims.cluster, false);
        let config = self.launch_config(one_cluster, &mut attributes);
        self.bind()?;
        let mut clusters: std::ffi::c_int = 0;
        unsafe {
            cudarc::driver::sys::cuOccupancyMaxActiveClusters(
                &mut clusters,
                function.cu_function(),
                &config,
            )
        }
        .result()
        .map_err(|e| {
            KernelError::driver(&format!("cuOccupancyMaxActiveClusters({})", inst.name), e)
        })?;
        if clusters <= 0 {
            return Err(invalid!(
                "kernel {} cannot run in clusters of {} CTAs on {}",
                inst.name,
                dims.cluster,
                self.name()
            ));
        }
        self.cluster_occupancy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(key, clusters as u32);
        Ok(clusters as u32)
    }

    /// The driver's launch configuration for `dims` on the Gpu's stream, with `attributes`
    /// (which must outlive its use).
    fn launch_config(
        &self,
        dims: LaunchDims,
        attributes: &mut [cudarc::driver::sys::CUlaunchAttribute],
    ) -> cudarc::driver::sys::CUlaunchConfig {
        let (gx, gy, gz) = dims.grid;
        cudarc::driver::sys::CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: dims.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: dims.shared_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attributes.as_mut_ptr(),
            numAttrs: attributes.len() as u32,
        }
    }

    /// The dynamic shared memory `name` may use now: what was raised so far, else the driver's
    /// default, 48 KiB less the kernel's static shared memory (a kernel with 2 KB of static
    /// shared memory cannot take 48 KB of dynamic without asking: a six-stage small tile failed
    /// to launch so; benchmarks/NOTES.md, 2026-11-22 "Launcher fix after the closing run").
    pub(super) fn shared_limit(&self, name: &str, function: &CudaFunction) -> u32 {
        let mut limits = self
            .shared_limits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *limits.entry(name.to_string()).or_insert_with(|| {
            unsafe {
                cudarc::driver::result::function::get_function_attribute(
                    function.cu_function(),
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                )
            }
            .map_or(0, |bytes| bytes.max(0) as u32)
        })
    }

    /// The loaded function for `inst`: from memory, else from the disk cache, else compiled.
    pub(super) fn kernel(&self, inst: &Instantiation) -> Result<CudaFunction, KernelError> {
        let mut kernels = self
            .kernels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(function) = kernels.get(&inst.name) {
            return Ok(function.clone());
        }
        self.refuse_while_capturing(&format!("compiling or loading kernel {}", inst.name))?;
        let cc = self.compute_capability;
        let arch = inst.arch.target_for(cc).ok_or_else(|| {
            invalid!(
                "kernel {} needs {:?}; {} is compute capability {}.{}",
                inst.name,
                inst.arch,
                self.name,
                cc.0,
                cc.1
            )
        })?;
        let key = self.compiler.cache_key(inst, arch);
        let started = Instant::now();
        let cached = self
            .disk_cache
            .as_ref()
            .and_then(|cache| cache.load(&inst.name, &key));
        let (function, from_cache) = match cached.map(|cubin| self.load(inst, cubin)) {
            Some(Ok(function)) => (function, true),
            // Not cached, or cached but the driver refused it: compile afresh.
            _ => {
                let compiled = self.compiler.compile(inst, arch)?;
                let function = self.load(inst, compiled.cubin.clone())?;
                if let Some(cache) = &self.disk_cache {
                    cache.store(&inst.name, &key, &compiled.cubin);
                }
                (function, false)
            }
        };
        {
            let mut loads = self
                .kernel_loads
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if from_cache {
                loads.cached += 1;
                loads.cache_time += started.elapsed();
            } else {
                loads.compiled += 1;
                loads.compile_time += started.elapsed();
            }
        }
        kernels.insert(inst.name.clone(), function.clone());
        Ok(function)
    }

    pub(super) fn load(
        &self,
        inst: &Instantiation,
        cubin: Vec<u8>,
    ) -> Result<CudaFunction, KernelError> {
        let module = self
            .context
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| KernelError::driver(&format!("loading the module of {}", inst.name), e))?;
        module
            .load_function(&inst.name)
            .map_err(|e| KernelError::driver(&format!("finding {} in its module", inst.name), e))
    }

    /// Every kernel loaded so far, with the driver's view of its resources.
    pub fn loaded_kernels(&self) -> Vec<LoadedKernel> {
        let kernels = self
            .kernels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let attribute = |f: &CudaFunction, a| {
            unsafe { cudarc::driver::result::function::get_function_attribute(f.cu_function(), a) }
                .unwrap_or(-1) as u32
        };
        let mut loaded: Vec<LoadedKernel> = kernels
            .iter()
            .map(|(name, f)| LoadedKernel {
                name: name.clone(),
                registers: attribute(f, CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS),
                static_shared_bytes: attribute(
                    f,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                ),
                local_bytes: attribute(f, CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            })
            .collect();
        loaded.sort_by(|a, b| a.name.cmp(&b.name));
        loaded
    }
}

/// A length as the `long long` the element-wise kernels index with.
pub(crate) fn to_i64(value: usize) -> Result<i64, KernelError> {
    i64::try_from(value).map_err(|_| invalid!("{value} elements exceed the kernels' 64-bit index"))
}

/// A count as the `int` the row kernels index with.
pub(crate) fn to_i32(value: usize, what: &str) -> Result<i32, KernelError> {
    i32::try_from(value).map_err(|_| invalid!("{what} = {value} exceeds the kernels' 32-bit limit"))
}

/// The launch attributes of a launch in clusters of `cluster` CTAs (none for 1), and of a
/// dependent launch (programmatic stream serialisation) when `dependent`.
fn launch_attributes(cluster: u32, dependent: bool) -> Vec<cudarc::driver::sys::CUlaunchAttribute> {
    use cudarc::driver::sys::{CUlaunchAttribute, CUlaunchAttributeID};
    let mut attributes = Vec::with_capacity(2);
    if dependent {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: unsafe { std::mem::zeroed() },
        };
        a.value.programmaticStreamSerializationAllowed = 1;
        attributes.push(a);
    }
    if cluster > 1 {
        let mut a = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            pad: [0; 4],
            value: unsafe { std::mem::zeroed() },
        };
        a.value.clusterDim.x = cluster;
        a.value.clusterDim.y = 1;
        a.value.clusterDim.z = 1;
        attributes.push(a);
    }
    attributes
}
