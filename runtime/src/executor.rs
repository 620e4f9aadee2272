//! The executor walks a planned graph on a backend: parameters are bound once when it is
//! built, inputs are copied in and outputs copied out at the graph's edges, and every node
//! writes into the arena region the plan gave it.
//!
//! Graph replay: on a backend that can capture (CUDA), the first forward pass runs eagerly,
//! node by node, which compiles and loads every kernel; the second is captured into one
//! graph and replayed, and every later pass replays it with one launch. The graph is kept by
//! the backend under this executor's key, and dropped there when the arena moves; the next
//! pass then captures anew. Passes timed node by node always run eagerly. When capture fails,
//! the executor says why once (per process) on stderr and runs eagerly from then on.

use crate::backend::{Backend, Binding, BufferRef, DeviceInput, PendingRead};
use crate::error::RuntimeError;
use crate::graph::{Graph, ParamSource, Value, ValueKind};
use crate::plan::{Plan, Precision};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vitrt_kernels::DType;

mod encoded;
pub use encoded::EncodedParams;

/// Supplies checkpoint tensors by name, converted to f32 and checked against `shape`. Shared
/// between threads: an executor reads several tensors at once.
pub trait ParamStore: Sync {
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError>;
}

/// A named host tensor, f32.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

pub struct Executor {
    graph: Graph,
    plan: Plan,
    bindings: Vec<BufferRef>,
    /// Whether to capture and replay the forward pass where the backend can.
    graph_replay: bool,
    /// Names this executor's captured graph on the backend: unique in the process, so a
    /// new plan never replays an old plan's graph.
    graph_key: u64,
    replay_state: Cell<ReplayState>,
}

/// Where an executor stands with graph replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayState {
    /// No forward pass has run yet: the next runs eagerly, to compile and load its kernels.
    Cold,
    /// An eager pass has run: the next captures (unless the backend already holds the
    /// graph) and replays.
    WarmedUp,
    /// Capture failed once: every pass runs eagerly.
    Failed,
}

static NEXT_GRAPH_KEY: AtomicU64 = AtomicU64::new(1);
static CAPTURE_FAILURE_REPORTED: AtomicBool = AtomicBool::new(false);

impl Executor {
    /// Plans `graph` under `precision` (whose compute type must be the backend's) and binds
    /// every parameter a node reads (uploading those the backend does not hold yet).
    pub fn new(
        graph: Graph,
        backend: &mut dyn Backend,
        params: &dyn ParamStore,
        precision: Precision,
    ) -> Result<Executor, RuntimeError> {
        Executor::new_with_encoded(graph, backend, params, precision, &EncodedParams::empty())
    }

    /// As [`Executor::new`], taking the parameters `encoded` holds from there instead of
    /// reading them from `params` (see [`EncodedParams`]).
    pub fn new_with_encoded(
        graph: Graph,
        backend: &mut dyn Backend,
        params: &dyn ParamStore,
        precision: Precision,
        encoded: &EncodedParams,
    ) -> Result<Executor, RuntimeError> {
        graph.validate()?;
        if precision.compute != backend.dtype() {
            return Err(RuntimeError::Unsupported(format!(
                "a {} plan on a {} backend",
                precision.compute,
                backend.dtype()
            )));
        }
        let plan = Plan::new(&graph, precision);
        let read = read_params(&graph);
        preload_params(&graph, &plan, &read, backend, params, encoded)?;
        let mut bindings = Vec::with_capacity(graph.values.len());
        for (v, value) in graph.values.iter().enumerate() {
            let binding = match &value.kind {
                // A parameter no node reads (the separate Q, K and V projections once the
                // fusion pass has concatenated them) is bound empty and never uploaded.
                ValueKind::Param(_) if !read[v] => BufferRef::Arena {
                    offset_bytes: 0,
                    len: 0,
                    dtype: plan.dtypes[v],
                },
                ValueKind::Param(source) => {
                    let dtype = plan.dtypes[v];
                    let mut load = || load_param(source, &value.shape, params);
                    let id = backend.load_param(&source.key(), &value.shape, dtype, &mut load)?;
                    BufferRef::Param {
                        id,
                        len: value.numel(),
                        dtype,
                    }
                }
                _ => {
                    // A value no node reads nor produces has no region; bind it empty.
                    let offset_bytes = plan.values[v].map_or(0, |r| r.offset);
                    BufferRef::Arena {
                        offset_bytes,
                        len: if plan.values[v].is_some() {
                            value.numel()
                        } else {
                            0
                        },
                        dtype: plan.dtypes[v],
                    }
                }
            };
            bindings.push(binding);
        }
        backend.reserve_arena(plan.arena_bytes)?;
        Ok(Executor {
            graph,
            plan,
            bindings,
            graph_replay: true,
            graph_key: NEXT_GRAPH_KEY.fetch_add(1, Ordering::Relaxed),
            replay_state: Cell::new(ReplayState::Cold),
        })
    }

    /// Turns graph replay on (the default) or off; off, every pass runs node by node.
    pub fn with_graph_replay(mut self, enabled: bool) -> Executor {
        self.graph_replay = enabled;
        self
    }

    pub fn graph_replay(&self) -> bool {
        self.graph_replay
    }

    /// Where this executor stands with graph replay.
    pub fn replay_state(&self) -> ReplayState {
        self.replay_state.get()
    }

    /// Whether `backend` holds this executor's captured graph (so the next forward pass
    /// replays it).
    pub fn has_captured_graph(&self, backend: &dyn Backend) -> bool {
        backend.has_graph(self.graph_key)
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs the graph on `inputs` (by input name) and returns every graph output, in the
    /// order they were marked.
    pub fn run(
        &self,
        backend: &mut dyn Backend,
        inputs: &[(&str, &[f32])],
    ) -> Result<Vec<HostTensor>, RuntimeError> {
        self.write_inputs(backend, inputs)?;
        self.launch(backend, Marks::None)?;
        self.read_outputs(backend)
    }

    /// Runs the graph on its one input read from device memory another library owns (see
    /// [`Backend::write_from_device`]), and reads the outputs back.
    ///
    /// # Safety
    /// `input` must stay allocated and unwritten until this returns.
    pub unsafe fn run_from_device(
        &self,
        backend: &mut dyn Backend,
        input: DeviceInput,
    ) -> Result<Vec<HostTensor>, RuntimeError> {
        let inputs: Vec<usize> = self.graph.inputs().collect();
        let [v] = inputs.as_slice() else {
            return Err(RuntimeError::Unsupported(format!(
                "a device input goes into a graph with one input, not {}",
                inputs.len()
            )));
        };
        let value = &self.graph.values[*v];
        check_input_len(value, input.len)?;
        // SAFETY: the caller keeps `input` alive and unwritten until the outputs are read.
        unsafe { backend.write_from_device(self.bindings[*v], input) }.map_err(|e| match e {
            RuntimeError::Input { name, message } if name.is_empty() => RuntimeError::Input {
                name: value.name.clone(),
                message,
            },
            other => other,
        })?;
        self.launch(backend, Marks::None)?;
        self.read_outputs(backend)
    }

    /// Copies `inputs` (by input name) into their arena buffers.
    pub fn write_inputs(
        &self,
        backend: &mut dyn Backend,
        inputs: &[(&str, &[f32])],
    ) -> Result<(), RuntimeError> {
        for v in self.graph.inputs() {
            let value = &self.graph.values[v];
            let data = inputs
                .iter()
                .find(|(name, _)| *name == value.name)
                .map(|(_, d)| *d)
                .ok_or_else(|| RuntimeError::Input {
                    name: value.name.clone(),
                    message: "not given".into(),
                })?;
            check_input_len(value, data.len())?;
            backend.write(self.bindings[v], data)?;
        }
        Ok(())
    }

    /// Writes a batch of 8-bit images into the graph's one input, which must be
    /// [B, C, H, W] for `shape`: see [`Backend::write_pixel_bytes`]; `pixels` may be reused
    /// once [`Backend::wait_for_input_copies`] has returned.
    pub fn write_pixel_bytes(
        &self,
        backend: &mut dyn Backend,
        pixels: &[u8],
        shape: vitrt_kernels::PixelBatch,
        table: &[f32],
        decode: Option<&crate::DeviceDecode<'_>>,
    ) -> Result<Option<PendingRead>, RuntimeError> {
        let inputs: Vec<usize> = self.graph.inputs().collect();
        let [v] = inputs.as_slice() else {
            return Err(RuntimeError::Unsupported(format!(
                "8-bit pixels go into a graph with one input, not {}",
                inputs.len()
            )));
        };
        let value = &self.graph.values[*v];
        let want = [shape.batch, shape.channels, shape.height, shape.width];
        if value.shape != want {
            return Err(RuntimeError::Input {
                name: value.name.clone(),
                message: format!(
                    "8-bit images of shape {want:?} (as B, C, H, W) for an input of {:?}",
                    value.shape
                ),
            });
        }
        backend.write_pixel_bytes(self.bindings[*v], pixels, shape, table, decode)
    }

    /// Queues copies of every graph output to the host, after the work queued so far;
    /// [`Executor::finish_outputs`] waits for them. Later passes may overwrite the outputs'
    /// buffers once this returns: the copies are ordered before them.
    pub fn start_outputs(&self, backend: &mut dyn Backend) -> Result<PendingOutputs, RuntimeError> {
        let mut reads = Vec::with_capacity(self.graph.outputs.len());
        for (name, v) in &self.graph.outputs {
            reads.push((
                name.clone(),
                self.graph.values[*v].shape.clone(),
                backend.start_read(self.bindings[*v])?,
            ));
        }
        Ok(PendingOutputs {
            reads,
            decode_status: None,
        })
    }

    /// Waits for the copies [`Executor::start_outputs`] queued; the outputs in the order they
    /// were marked.
    pub fn finish_outputs(
        backend: &mut dyn Backend,
        pending: PendingOutputs,
    ) -> Result<Vec<HostTensor>, RuntimeError> {
        if let Some(status) = pending.decode_status {
            backend.finish_read(status)?;
        }
        pending
            .reads
            .into_iter()
            .map(|(name, shape, read)| {
                Ok(HostTensor {
                    name,
                    shape,
                    data: backend.finish_read(read)?,
                })
            })
            .collect()
    }

    /// Takes the device decoding's status words out of `pending` (one an image of its JPEG
    /// batch; none when nothing was decoded on the device), waiting for them.
    pub fn finish_decode_status(
        backend: &mut dyn Backend,
        pending: &mut PendingOutputs,
    ) -> Result<Vec<u32>, RuntimeError> {
        Ok(match pending.decode_status.take() {
            Some(read) => backend
                .finish_read(read)?
                .into_iter()
                .map(f32::to_bits)
                .collect(),
            None => Vec::new(),
        })
    }

    /// Queues the forward pass on the backend, on the inputs last written: the captured graph
    /// where there is one (see the module's note), else every node. With `marks`, also
    /// records timing marks (see [`Backend::mark`]) around the forward pass or around each
    /// node; the caller collects them with [`Backend::take_mark_intervals`]. Passes marked per
    /// node run node by node.
    pub fn launch(&self, backend: &mut dyn Backend, marks: Marks) -> Result<(), RuntimeError> {
        // Capture happens before the first mark, so a timed pass never counts it.
        if marks != Marks::EachNode && self.graph_ready(backend) {
            if marks == Marks::Forward {
                backend.mark()?;
            }
            backend.replay_graph(self.graph_key)?;
            if marks == Marks::Forward {
                backend.mark()?;
            }
            return Ok(());
        }
        self.queue_nodes(backend, marks)?;
        if self.replay_state.get() == ReplayState::Cold {
            self.replay_state.set(ReplayState::WarmedUp);
        }
        Ok(())
    }

    /// Whether the backend holds this executor's graph, ready to replay, capturing it first
    /// if this is the pass to do so. Never an error: a failed capture means eager passes.
    fn graph_ready(&self, backend: &mut dyn Backend) -> bool {
        if !self.graph_replay || !backend.can_capture() {
            return false;
        }
        match self.replay_state.get() {
            ReplayState::Cold | ReplayState::Failed => false,
            ReplayState::WarmedUp if backend.has_graph(self.graph_key) => true,
            ReplayState::WarmedUp => {
                let captured = backend.capture_graph(self.graph_key, &mut |backend| {
                    self.queue_nodes(backend, Marks::None)
                });
                match captured {
                    Ok(()) => true,
                    Err(reason) => {
                        self.replay_state.set(ReplayState::Failed);
                        if !CAPTURE_FAILURE_REPORTED.swap(true, Ordering::Relaxed) {
                            eprintln!(
                                "vitrt: running kernel by kernel: capturing a CUDA graph of \
                                 the forward pass failed: {reason}"
                            );
                        }
                        false
                    }
                }
            }
        }
    }

    /// Queues every node on the backend, one by one.
    fn queue_nodes(&self, backend: &mut dyn Backend, marks: Marks) -> Result<(), RuntimeError> {
        let describe = backend.describe();
        if marks != Marks::None {
            backend.mark()?;
        }
        for (step, node) in self.graph.nodes.iter().enumerate() {
            let bind = |v: usize| Binding {
                buffer: self.bindings[v],
                shape: self.graph.values[v].shape.clone(),
                row_statistics: self.graph.values[v].row_statistics,
            };
            let inputs: Vec<Binding> = node.inputs.iter().map(|&v| bind(v)).collect();
            let workspace = self.plan.workspaces[step].map(|r| BufferRef::Arena {
                offset_bytes: r.offset,
                len: r.bytes / self.plan.precision.compute.size_bytes(),
                dtype: self.plan.precision.compute,
            });
            backend
                .execute(&node.op, &inputs, &bind(node.output), workspace)
                .map_err(|message| RuntimeError::Node {
                    backend: describe.clone(),
                    node: node.name.clone(),
                    message,
                })?;
            if marks == Marks::EachNode {
                backend.mark()?;
            }
        }
        if marks == Marks::Forward {
            backend.mark()?;
        }
        Ok(())
    }

    /// Copies every graph output back, in the order they were marked.
    pub fn read_outputs(&self, backend: &mut dyn Backend) -> Result<Vec<HostTensor>, RuntimeError> {
        let mut outputs = Vec::with_capacity(self.graph.outputs.len());
        for (name, v) in &self.graph.outputs {
            outputs.push(HostTensor {
                name: name.clone(),
                shape: self.graph.values[*v].shape.clone(),
                data: backend.read(self.bindings[*v])?,
            });
        }
        Ok(outputs)
    }
}

/// Outputs whose copies to the host are queued ([`Executor::start_outputs`]).
#[derive(Debug)]
pub struct PendingOutputs {
    reads: Vec<(String, Vec<usize>, PendingRead)>,
    /// The device decoding's status words, when the pass's inputs were decoded on the device.
    decode_status: Option<PendingRead>,
}

impl PendingOutputs {
    /// Adds the read of the status words [`Executor::write_pixel_bytes`] returned, for
    /// [`Executor::finish_decode_status`].
    pub fn set_decode_status(&mut self, read: Option<PendingRead>) {
        self.decode_status = read;
    }
}

/// Where [`Executor::launch`] records timing marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marks {
    None,
    /// Before the first node and after the last: one interval, the forward pass.
    Forward,
    /// Before the first node and after every node: one interval per node.
    EachNode,
}

/// Per value: whether it is a parameter some node reads or the graph outputs. The others are
/// left behind by the fusion passes, which add new parameters (concatenated QKV weights) in
/// place of the ones they fuse; uploaded, ViT-B/16's separate Q, K and V weights would add 41
/// MiB in f16 to the 165 MiB the model needs.
fn read_params(graph: &Graph) -> Vec<bool> {
    let mut read = vec![false; graph.values.len()];
    for &v in graph.nodes.iter().flat_map(|n| &n.inputs) {
        read[v] = true;
    }
    for (_, v) in &graph.outputs {
        read[*v] = true;
    }
    graph
        .values
        .iter()
        .zip(read)
        .map(|(value, read)| read && matches!(value.kind, ValueKind::Param(_)))
        .collect()
}

/// An input's values must fill its shape exactly.
fn check_input_len(value: &Value, len: usize) -> Result<(), RuntimeError> {
    if len == value.numel() {
        return Ok(());
    }
    Err(RuntimeError::Input {
        name: value.name.clone(),
        message: format!(
            "expected {} values for shape {:?}, got {len}",
            value.numel(),
            value.shape
        ),
    })
}

/// f32 bytes read from the store at once, at most, while parameters load in parallel.
const PRELOAD_GROUP_BYTES: usize = 256 << 20;

/// The parameters of `graph` that `read` marks, each once per key and storage type
/// (`dtypes`, the plan's), in graph order: what an executor loads, and what
/// [`EncodedParams`] encodes ahead of it.
fn params_read<'g>(
    graph: &'g Graph,
    read: &[bool],
    dtypes: &[DType],
) -> Vec<(&'g ParamSource, &'g [usize], DType)> {
    let mut seen = std::collections::HashSet::new();
    graph
        .values
        .iter()
        .enumerate()
        .filter_map(|(v, value)| match &value.kind {
            ValueKind::Param(source) if read[v] => {
                Some((source, value.shape.as_slice(), dtypes[v]))
            }
            _ => None,
        })
        .filter(|(source, _, dtype)| seen.insert((source.key(), *dtype)))
        .collect()
}

/// Hands the backend every parameter of `graph` that `read` marks and it does not hold yet:
/// those `encoded` holds as they are, the others read from the store on all cores, a group
/// of at most [`PRELOAD_GROUP_BYTES`] at a time (reading and converting a checkpoint is most
/// of a model's preparation; one tensor after another, a ViT-B/16 took 0.3 s before its
/// first batch on the GPU machine, 2026-11-24 NOTES entry).
fn preload_params(
    graph: &Graph,
    plan: &Plan,
    read: &[bool],
    backend: &mut dyn Backend,
    params: &dyn ParamStore,
    encoded: &EncodedParams,
) -> Result<(), RuntimeError> {
    use rayon::prelude::*;
    let mut missing = Vec::new();
    for (source, shape, dtype) in params_read(graph, read, &plan.dtypes) {
        let key = source.key();
        if backend.has_param(&key, dtype) {
            continue;
        }
        match encoded.take(&key, shape, dtype) {
            Some(bytes) => {
                backend.load_param_encoded(&key, shape, dtype, bytes)?;
            }
            None => missing.push((source, shape, dtype)),
        }
    }
    let mut start = 0;
    while start < missing.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < missing.len() && (end == start || bytes < PRELOAD_GROUP_BYTES) {
            bytes += missing[end].1.iter().product::<usize>() * 4;
            end += 1;
        }
        let loaded: Vec<Result<Vec<f32>, RuntimeError>> = missing[start..end]
            .par_iter()
            .map(|(source, shape, _)| load_param(source, shape, params))
            .collect();
        for ((source, shape, dtype), data) in missing[start..end].iter().zip(loaded) {
            let mut data = Some(data?);
            let mut take = || {
                data.take().ok_or_else(|| RuntimeError::Param {
                    name: source.key(),
                    message: "loaded twice".into(),
                })
            };
            backend.load_param(&source.key(), shape, *dtype, &mut take)?;
        }
        start = end;
    }
    Ok(())
}

fn load_param(
    source: &ParamSource,
    shape: &[usize],
    params: &dyn ParamStore,
) -> Result<Vec<f32>, RuntimeError> {
    match source {
        ParamSource::Tensor(name) => params.load(name, shape),
        ParamSource::Concat(names) => {
            // Stacked along dim 0: each part has shape [shape[0] / parts, rest...].
            let parts = names.len();
            if parts == 0 || shape.is_empty() || !shape[0].is_multiple_of(parts) {
                return Err(RuntimeError::Param {
                    name: source.key(),
                    message: format!("cannot split shape {shape:?} into {parts} parts"),
                });
            }
            let mut part_shape = shape.to_vec();
            part_shape[0] /= parts;
            let mut data = Vec::with_capacity(shape.iter().product());
            for name in names {
                data.extend(params.load(name, &part_shape)?);
            }
            Ok(data)
        }
        ParamSource::Fp8Weight(weight) => {
            let [n, k] = shape else {
                return Err(RuntimeError::Param {
                    name: source.key(),
                    message: format!("an FP8 weight is [N, K], not {shape:?}"),
                });
            };
            let values = load_param(weight, shape, params)?;
            let (units, _) = crate::fp8::quantize_weight(&values, *n, *k).map_err(|message| {
                RuntimeError::Param {
                    name: source.key(),
                    message,
                }
            })?;
            Ok(units)
        }
        ParamSource::LayernormWeight { weight, gamma } => {
            let [n, k] = shape else {
                return Err(shape_error(source, "a folded weight is [N, K]", shape));
            };
            let w = load_param(weight, shape, params)?;
            let gamma = load_param(gamma, &[*k], params)?;
            Ok(vitrt_kernels::matmul::layernorm_fold::fold_weight(
                &w, &gamma, *n, *k,
            ))
        }
        ParamSource::LayernormBias {
            weight,
            bias,
            beta,
            columns,
        } => {
            let [n] = shape else {
                return Err(shape_error(source, "a folded bias is [N]", shape));
            };
            let w = load_param(weight, &[*n, *columns], params)?;
            let beta = load_param(beta, &[*columns], params)?;
            let bias = match bias {
                Some(b) => Some(load_param(b, &[*n], params)?),
                None => None,
            };
            Ok(vitrt_kernels::matmul::layernorm_fold::fold_bias(
                &w,
                &beta,
                bias.as_deref(),
                *n,
                *columns,
            ))
        }
        ParamSource::LayernormColumnSums {
            weight,
            gamma,
            columns,
            dtype,
        } => {
            let [n] = shape else {
                return Err(shape_error(source, "column sums are [N]", shape));
            };
            let w = load_param(weight, &[*n, *columns], params)?;
            let gamma = load_param(gamma, &[*columns], params)?;
            Ok(crate::layernorm_fold::column_sums(
                &w, &gamma, *n, *columns, *dtype,
            ))
        }
        ParamSource::Fp8InputScale { scale, .. } => {
            if shape != [1] {
                return Err(shape_error(source, "a static input scale is [1]", shape));
            }
            Ok(vec![*scale])
        }
        ParamSource::Fp8Scale { weight, columns } => {
            let [n] = shape else {
                return Err(RuntimeError::Param {
                    name: source.key(),
                    message: format!("FP8 weight scales are [N], not {shape:?}"),
                });
            };
            let values = load_param(weight, &[*n, *columns], params)?;
            let (_, scales) =
                crate::fp8::quantize_weight(&values, *n, *columns).map_err(|message| {
                    RuntimeError::Param {
                        name: source.key(),
                        message,
                    }
                })?;
            Ok(scales)
        }
    }
}

fn shape_error(source: &ParamSource, what: &str, shape: &[usize]) -> RuntimeError {
    RuntimeError::Param {
        name: source.key(),
        message: format!("{what}, not {shape:?}"),
    }
}

#[cfg(test)]
mod tests;
