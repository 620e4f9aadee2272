//! Runs a model on a backend, one executor per (batch size, outputs) so that the graph is
//! built and planned once and parameters are uploaded once for all of them.

use crate::error::ModelError;
use crate::fp8_scales::{Candidate, Fp8ScalesFile};
use crate::model::{GraphOptions, OutputSet, VisionModel, ZeroShotLabels};
use crate::preprocess::{floats_of_bytes, PixelExpansion};
use crate::text::{self, TextModel};
use std::collections::HashMap;
use vitrt_runtime::fp8::{self, Fp8Layers};
use vitrt_runtime::layernorm_fold;
use vitrt_runtime::passes::{Fusion, Supports};
use vitrt_runtime::RuntimeError;
use vitrt_runtime::{
    Backend, DType, DeviceDecode, DeviceInput, EncodedParams, Executor, HostStaging, HostTensor,
    Marks, PendingOutputs, PixelBatch, Precision, TimelineSpan,
};

pub struct Runner {
    pub model: VisionModel,
    backend: Box<dyn Backend>,
    fusion: Fusion,
    precision: Precision,
    /// Replay each plan's forward pass as one captured graph where the backend can.
    graph_replay: bool,
    /// What the graphs output (empty: the model's primary output).
    outputs: OutputSet,
    /// One executor per (batch size, hidden states, outputs): switching outputs and back (a
    /// server's classify and embed requests) reuses the executors built before; parameters
    /// are the backend's, shared by all of them, and the arena is one.
    executors: HashMap<(usize, bool, OutputSet), Executor>,
    /// Parameters read and encoded before the backend opened, for the first executor.
    encoded: Option<EncodedParams>,
    /// The linear layers that run in FP8 (`vitrt_runtime::fp8`), if any.
    fp8: Option<Fp8Layers>,
    /// Their calibrated static input scales (`--fp8-scales`); without, a scale a row.
    fp8_scales: Option<Fp8ScalesFile>,
    /// The kernels' programs are chosen whatever the batch size (`with_batch_invariance`).
    batch_invariant: bool,
}

/// `graph`'s FP8 candidates with their weights' shapes, in graph order.
fn candidate_shapes(graph: &vitrt_runtime::Graph) -> Vec<Candidate> {
    fp8::candidates(graph)
        .into_iter()
        .map(|id| {
            let node = &graph.nodes[id];
            (
                node.name.clone(),
                graph.values[node.inputs[1]].shape.clone(),
            )
        })
        .collect()
}

/// The largest magnitude of `values` (NaN ignored), as the kernels' quantiser takes it.
fn largest_magnitude(values: &[f32]) -> f32 {
    values.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

fn fp8_residual_error(precision: Precision) -> ModelError {
    ModelError::Usage(format!(
        "FP8 runs keep the residual stream in the compute type ({}), not {}: leave \
         --residual-dtype out",
        precision.compute, precision.residual
    ))
}

/// The most encoded bytes [`Runner::encode_params`] holds ahead of the first executor (the
/// rest of a larger model loads as usual, a group at a time).
const ENCODE_AHEAD_BUDGET: usize = 1 << 30;

impl Runner {
    /// A runner computing in the backend's dtype, with the residual stream stored as
    /// `Precision::default_for` that dtype says (f16 for f16 runs, else f32).
    pub fn new(model: VisionModel, backend: Box<dyn Backend>, fusion: Fusion) -> Runner {
        let precision = Precision::default_for(backend.dtype());
        Runner {
            model,
            backend,
            fusion,
            precision,
            graph_replay: true,
            outputs: OutputSet::default(),
            executors: HashMap::new(),
            encoded: None,
            fp8: None,
            fp8_scales: None,
            batch_invariant: false,
        }
    }

    /// Reads and encodes `model`'s parameters as a runner with `fusion` on a `dtype` backend
    /// will upload them, without a backend: for the time the GPU's driver takes to start
    /// (see [`EncodedParams`]). A graph that cannot be built gives an empty set; preparing
    /// the runner reports why.
    pub fn encode_params(model: &VisionModel, fusion: Fusion, dtype: DType) -> EncodedParams {
        let options = GraphOptions {
            hidden_states: false,
            fusion,
            outputs: OutputSet::default(),
        };
        // Which ops the backend fuses does not change which parameters it reads.
        // Unfolded, as the batches runs usually take are (`Runner::fold_layernorms`).
        match model.build_graph_for(1, options, &|_, _| Ok(())) {
            Ok(graph) => EncodedParams::encode(
                &graph,
                Precision::default_for(dtype),
                model,
                ENCODE_AHEAD_BUDGET,
            ),
            Err(_) => EncodedParams::empty(),
        }
    }

    /// Hands the first executor prepared the parameters `encoded` holds (what it does not
    /// take is then freed).
    pub fn with_encoded_params(mut self, encoded: EncodedParams) -> Runner {
        self.encoded = Some(encoded);
        self
    }

    /// Runs the model on images of `size` from now on (see [`VisionModel::with_input_size`]).
    pub fn set_input_size(&mut self, size: (usize, usize)) -> Result<(), ModelError> {
        if size != self.model.input_size() {
            self.model.set_input_size(size)?;
            self.executors.clear();
        }
        Ok(())
    }

    /// Outputs `outputs` instead of the model's primary output (checked when a graph is
    /// built: [`Runner::check_graph`]).
    pub fn with_outputs(mut self, outputs: OutputSet) -> Runner {
        self.set_outputs(outputs);
        self
    }

    /// [`Runner::with_outputs`] in place.
    pub fn set_outputs(&mut self, outputs: OutputSet) {
        self.outputs = outputs;
    }

    /// The executor key of `batch` images with the outputs set now.
    fn key(&self, batch: usize, hidden_states: bool) -> (usize, bool, OutputSet) {
        (batch, hidden_states, self.outputs)
    }

    /// Scores images against `labels` from now on ([`VisionModel::set_zero_shot`]); the
    /// graphs built for earlier labels are dropped, as they score against those.
    pub fn set_zero_shot(&mut self, labels: ZeroShotLabels) -> Result<(), ModelError> {
        self.model.set_zero_shot(labels)?;
        self.executors.clear();
        Ok(())
    }

    /// Turns graph replay (CUDA graphs; see `vitrt_runtime::Executor`) on, the default, or
    /// off.
    pub fn with_graph_replay(mut self, enabled: bool) -> Runner {
        self.graph_replay = enabled;
        self.executors.clear();
        self
    }

    /// Chooses the kernels' programs whatever the batch size, so that an image's outputs are
    /// the same bytes whatever else shares its batch (see `Backend::set_batch_invariant`).
    pub fn with_batch_invariance(mut self, on: bool) -> Runner {
        self.backend.set_batch_invariant(on);
        self.batch_invariant = on;
        self.executors.clear();
        self
    }

    /// Stores the residual stream as `residual` (f32, or the backend's dtype) instead.
    pub fn with_residual(mut self, residual: DType) -> Result<Runner, ModelError> {
        let precision = Precision::new(self.backend.dtype(), residual)?;
        if self.fp8.is_some() && precision.residual != precision.compute {
            return Err(fp8_residual_error(precision));
        }
        self.precision = precision;
        self.executors.clear();
        Ok(self)
    }

    /// Runs the linear layers `layers` chooses in FP8 (`vitrt_runtime::fp8`): on an f16 or
    /// bf16 backend, with the residual stream in that type (the FP8 matmul adds and writes
    /// the 16-bit compute type).
    pub fn with_fp8(mut self, layers: Fp8Layers) -> Result<Runner, ModelError> {
        let compute = self.backend.dtype();
        if compute == DType::F32 {
            return Err(ModelError::Usage(
                "FP8 linear layers run inside an f16 or bf16 model, not f32".into(),
            ));
        }
        if self.precision.residual != compute {
            if self.precision == Precision::default_for(compute) {
                self.precision = Precision::uniform(compute);
            } else {
                return Err(fp8_residual_error(self.precision));
            }
        }
        self.fp8 = Some(layers);
        self.executors.clear();
        Ok(self)
    }

    /// Quantises the FP8 layers' inputs with the calibrated static scales of `scales` (a
    /// `vitrt calibrate` file) instead of a scale a row; with [`Runner::with_fp8`] only. The
    /// file is checked against the model's candidates here and as each graph is built (a file
    /// made for another model, or missing one of its layers, is refused).
    pub fn with_fp8_scales(mut self, scales: Fp8ScalesFile) -> Result<Runner, ModelError> {
        if self.fp8.is_none() {
            return Err(ModelError::Usage(
                "static FP8 scales go with FP8 layers (--fp8-scales with --dtype fp8)".into(),
            ));
        }
        // Refused now rather than at the first batch: the file must name this model's layers.
        scales.scales_for(&self.fp8_candidate_shapes()?)?;
        self.fp8_scales = Some(scales);
        self.executors.clear();
        Ok(self)
    }

    /// The model's FP8 candidates (`vitrt_runtime::fp8::candidates`) with their weights'
    /// shapes, in graph order: what a scales file names.
    pub fn fp8_candidate_shapes(&self) -> Result<Vec<Candidate>, ModelError> {
        let options = GraphOptions {
            hidden_states: false,
            fusion: self.fusion,
            outputs: self.outputs,
        };
        let backend = self.backend.as_ref();
        let graph = self
            .model
            .build_graph_for(1, options, &|op, shapes| backend.supports(op, shapes))?;
        Ok(candidate_shapes(&graph))
    }

    /// The largest magnitude of each FP8 candidate's input over `batch` images of `pixels`
    /// (NCHW, f32), by candidate, in [`Runner::fp8_candidate_shapes`]'s order: what `vitrt
    /// calibrate` takes the static scales from. Each candidate's input is made an output of a
    /// graph of its own (the main output besides), run on this runner's backend and
    /// precision; run it on an f32 runner for the reference values.
    pub fn fp8_input_amax(&mut self, pixels: &[f32], batch: usize) -> Result<Vec<f32>, ModelError> {
        self.check_pixels(pixels, batch)?;
        crate::limits::check_batch_size(batch).map_err(ModelError::Usage)?;
        let options = GraphOptions {
            hidden_states: false,
            fusion: self.fusion,
            outputs: self.outputs,
        };
        let mut graph = {
            let backend = self.backend.as_ref();
            self.model
                .build_graph_for(batch, options, &|op, shapes| backend.supports(op, shapes))?
        };
        let inputs: Vec<usize> = fp8::candidates(&graph)
            .into_iter()
            .map(|id| graph.nodes[id].inputs[0])
            .collect();
        let mut marked: Vec<usize> = Vec::new();
        for &v in &inputs {
            if !marked.contains(&v) {
                graph.mark_output(&format!("fp8_input.{v}"), v);
                marked.push(v);
            }
        }
        let executor = Executor::new(graph, self.backend.as_mut(), &self.model, self.precision)
            .map_err(|e| out_of_memory_at(e, batch))?
            .with_graph_replay(false);
        let outputs = executor.run(self.backend.as_mut(), &[("pixel_values", pixels)])?;
        inputs
            .iter()
            .map(|v| {
                let name = format!("fp8_input.{v}");
                let tensor = outputs.iter().find(|t| t.name == name).ok_or_else(|| {
                    ModelError::Usage(format!("the calibration run did not write {name}"))
                })?;
                Ok(largest_magnitude(&tensor.data))
            })
            .collect()
    }

    /// The linear layers `layers` would run in FP8 in the graph this runner builds
    /// (`vitrt_runtime::fp8::quantize_linears`), by node name, in graph order.
    pub fn fp8_candidates(&self, layers: &Fp8Layers) -> Result<Vec<String>, ModelError> {
        let options = GraphOptions {
            hidden_states: false,
            fusion: self.fusion,
            outputs: self.outputs,
        };
        let backend = self.backend.as_ref();
        let mut graph = self
            .model
            .build_graph_for(1, options, &|op, shapes| backend.supports(op, shapes))?;
        fp8::quantize_linears(&mut graph, layers).map_err(ModelError::Usage)
    }

    /// Whether the FP8 layers quantise their inputs with calibrated static scales.
    pub fn fp8_static_scales(&self) -> bool {
        self.fp8_scales.is_some()
    }

    /// The FP8 choice, if the runner has one.
    pub fn fp8(&self) -> Option<&Fp8Layers> {
        self.fp8.as_ref()
    }

    /// The graph for `batch` images with `options`, its chosen linear layers in FP8.
    fn graph(
        &self,
        batch: usize,
        options: GraphOptions,
    ) -> Result<vitrt_runtime::Graph, ModelError> {
        let backend = self.backend.as_ref();
        let mut graph = self
            .model
            .build_graph_for(batch, options, &|op, shapes| backend.supports(op, shapes))?;
        if let Some(layers) = &self.fp8 {
            let static_scales = match &self.fp8_scales {
                Some(file) => Some(file.scales_for(&candidate_shapes(&graph))?),
                None => None,
            };
            let rewritten = fp8::quantize_linears(&mut graph, layers).map_err(ModelError::Usage)?;
            if let Some(scales) = &static_scales {
                fp8::use_static_scales(&mut graph, scales).map_err(ModelError::Usage)?;
            }
            if rewritten.is_empty() {
                let candidates = fp8::candidates(&graph).len();
                return Err(ModelError::Usage(format!(
                    "FP8 was asked for, but no linear layer of this model would run in it: {}",
                    match layers {
                        Fp8Layers::LayernormInputs => format!(
                            "none of its {candidates} candidates reads a layernorm's output \
                             (the default choice); `vitrt quantize-report --all-layers --output \
                             FILE` makes a choice to pass as --fp8-layers"
                        ),
                        _ => format!("the choice names none of its {candidates} candidates"),
                    }
                )));
            }
        }
        self.fold_layernorms(&mut graph, batch, &|op, shapes| {
            backend.supports(op, shapes)
        });
        Ok(graph)
    }

    /// Folds the layernorms read only by linear layers into them (`vitrt_runtime::
    /// layernorm_fold`) where the fusion asks for it, the run computes in f16 or bf16 with its
    /// residual stream in that type (the folded matmul reads the stream as its A operand),
    /// `supports` has the kernels, and the graph is of one image: the only batch where it
    /// measured faster on an H200 (0.459-0.463 against 0.463-0.464 ms for ViT-B/16; 2-4%
    /// slower at 8 to 256, whose folded fc1 loses more than the layernorm costs:
    /// benchmarks/NOTES.md, 2026-11-28 "Layernorms folded into the matmul"). Never with batch
    /// invariance, which needs one image's graph to compute what a batch's does, nor once a
    /// larger batch's executor exists (a run's last batch of one image would upload a second,
    /// folded copy of the weights it reads for a gain of 1%).
    fn fold_layernorms(&self, graph: &mut vitrt_runtime::Graph, batch: usize, supports: Supports) {
        let Precision { compute, residual } = self.precision;
        let larger_batches = self.executors.keys().any(|&(b, _, _)| b > 1);
        let wanted =
            self.fusion.layernorms && batch == 1 && !self.batch_invariant && !larger_batches;
        if wanted && compute != DType::F32 && residual == compute {
            layernorm_fold::fold_layernorms(graph, compute, supports);
        }
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The text embeddings of `n` token sequences (see `TextEncoder::embed`), encoded by
    /// `tower` on this runner's backend with its fusion and precision (zero-shot's labels: a
    /// second backend took longer to open than the text tower took to run, benchmarks/NOTES.md,
    /// 2026-11-25 "one backend for both towers"). The text tower's weights are freed again; an
    /// arena it grows drops the runner's captured graphs, which capture again.
    pub fn embed_texts(
        &mut self,
        tower: &TextModel,
        ids: &[u32],
        n: usize,
        normalize: bool,
    ) -> Result<Vec<f32>, ModelError> {
        let held = self.backend.param_count();
        let backend = self.backend.as_mut();
        let (fusion, precision) = (self.fusion, self.precision);
        let embeds = text::embed_texts(tower, backend, fusion, precision, ids, n, normalize);
        self.backend.truncate_params(held);
        embeds
    }

    /// Waits for the work queued on the backend.
    pub fn synchronize(&mut self) -> Result<(), ModelError> {
        Ok(self.backend.synchronize()?)
    }

    /// Starts a new peak of the backend's memory account (see
    /// `vitrt_runtime::MemoryAccount::peak_bytes`) from what it holds now.
    pub fn reset_memory_peak(&mut self) {
        self.backend.reset_memory_peak();
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Shape every pixel tensor must have for `batch` images.
    pub fn input_shape(&self, batch: usize) -> [usize; 4] {
        let (h, w) = self.model.input_size();
        [batch, self.model.config.num_channels, h, w]
    }

    /// Values of the pixel tensor for `batch` images, for a caller about to allocate it:
    /// an error for a batch outside [`limits::MAX_BATCH_SIZE`](crate::limits).
    pub fn input_len(&self, batch: usize) -> Result<usize, ModelError> {
        crate::limits::check_batch_size(batch).map_err(ModelError::Usage)?;
        // Within the bounds: at most 2^16 images of 2^28 pixels of a few channels.
        Ok(self.input_shape(batch).iter().product())
    }

    /// Runs `batch` images of pixels (NCHW, f32). Returns the main output (`logits` or
    /// `last_hidden_state`) and, with `hidden_states`, every `hidden_states.{i}` before it.
    pub fn run(
        &mut self,
        pixels: &[f32],
        batch: usize,
        hidden_states: bool,
    ) -> Result<Vec<HostTensor>, ModelError> {
        self.check_pixels(pixels, batch)?;
        self.prepare(batch, hidden_states)?;
        let executor = &self.executors[&self.key(batch, hidden_states)];
        let mut outputs = executor.run(self.backend.as_mut(), &[("pixel_values", pixels)])?;
        sort_outputs(&mut outputs);
        Ok(outputs)
    }

    /// The device and stream a pixel tensor in device memory must be ready on before
    /// [`Runner::run_from_device`] reads it (`None`: this backend reads host memory only).
    pub fn device_input_stream(&self) -> Option<(usize, u64)> {
        self.backend.device_input_stream()
    }

    /// [`Runner::run`] on pixels (NCHW, f32, contiguous) in device memory another library owns,
    /// copied into the model's input on the device.
    ///
    /// # Safety
    /// `pixels` must be device memory on the backend's device, stay allocated and unwritten
    /// until this returns, and be ready on [`Runner::device_input_stream`]'s stream.
    pub unsafe fn run_from_device(
        &mut self,
        pixels: DeviceInput,
        batch: usize,
        hidden_states: bool,
    ) -> Result<Vec<HostTensor>, ModelError> {
        let shape = self.input_shape(batch);
        if batch == 0 || pixels.len != shape.iter().product::<usize>() {
            return Err(ModelError::Usage(format!(
                "pixel_values must be {shape:?} for {batch} images; got {} values",
                pixels.len
            )));
        }
        self.prepare(batch, hidden_states)?;
        let executor = &self.executors[&self.key(batch, hidden_states)];
        // SAFETY: the caller's guarantees, passed on.
        let mut outputs = unsafe { executor.run_from_device(self.backend.as_mut(), pixels)? };
        sort_outputs(&mut outputs);
        Ok(outputs)
    }

    /// Host memory to stage 8-bit images in for [`Runner::submit_bytes`], `bytes` long:
    /// page-locked on CUDA, where the copies from it overlap the forward pass.
    pub fn alloc_staging(&mut self, bytes: usize) -> Result<HostStaging, ModelError> {
        Ok(self.backend.alloc_staging(bytes)?)
    }

    /// Queues a forward pass on `batch` preprocessed images staged in `pixels` as
    /// `expansion` says: 8-bit images ([B, H, W, C] bytes at the model's image size)
    /// expanded into the model's input through a table (byte `v` of channel `c` becomes
    /// `table[c * 256 + v]`, see `preprocess::normalization_table`), or the model's input
    /// itself as f32 values ([B, C, H, W], native byte order); and the copy of its main
    /// output to the host. Returns when `pixels` may be reused, with the pass possibly still
    /// running; its outputs come from [`Runner::finish`]. Passes run in the order submitted,
    /// and on CUDA the copy of one batch's 8-bit pixels overlaps the forward pass of the
    /// batch before it.
    pub fn submit_bytes(
        &mut self,
        pixels: &[u8],
        batch: usize,
        expansion: &PixelExpansion,
    ) -> Result<PendingOutputs, ModelError> {
        self.submit_decoding(pixels, batch, expansion, None)
    }

    /// As [`Runner::submit_bytes`], with some images first made on the device from JPEG
    /// coefficients (`decode`, see `preprocess::device_batch`) into their places in `pixels`;
    /// `decode`'s upload may be reused when this returns, as `pixels` may. Device decoding
    /// makes 8-bit images: with [`PixelExpansion::Floats`] `decode` must be `None`.
    pub fn submit_decoding(
        &mut self,
        pixels: &[u8],
        batch: usize,
        expansion: &PixelExpansion,
        decode: Option<&DeviceDecode<'_>>,
    ) -> Result<PendingOutputs, ModelError> {
        let [_, channels, height, width] = self.input_shape(batch);
        let shape = PixelBatch {
            batch,
            height,
            width,
            channels,
        };
        let (sample_bytes, what) = match expansion {
            PixelExpansion::Table(_) => (1, "bytes"),
            PixelExpansion::Floats => (4, "f32 values"),
        };
        if batch == 0 || pixels.len() != shape.len() * sample_bytes {
            return Err(ModelError::Usage(format!(
                "{batch} images of {height}x{width}x{channels} {what} are {} bytes; got {}",
                shape.len() * sample_bytes,
                pixels.len()
            )));
        }
        self.prepare(batch, false)?;
        let executor = &self.executors[&self.key(batch, false)];
        let backend = self.backend.as_mut();
        let status = match expansion {
            // Everything is queued before the host waits for the copy, so the device never
            // waits for the host between the expansion and the forward pass.
            PixelExpansion::Table(table) => {
                executor.write_pixel_bytes(backend, pixels, shape, table, decode)?
            }
            PixelExpansion::Floats => {
                if decode.is_some() {
                    return Err(ModelError::Usage(
                        "images decoded on the device are 8-bit; a batch of f32 pixel values \
                         takes none"
                            .into(),
                    ));
                }
                // Written on the compute stream, after the passes queued before it.
                let values = floats_of_bytes(pixels);
                executor.write_inputs(backend, &[("pixel_values", &values)])?;
                None
            }
        };
        executor.launch(backend, Marks::None)?;
        let mut outputs = executor.start_outputs(backend)?;
        outputs.set_decode_status(status);
        backend.wait_for_input_copies()?;
        Ok(outputs)
    }

    /// Records device timestamps of the steps of `submit_bytes` (on or off); see
    /// [`Backend::record_timeline`].
    pub fn record_timeline(&mut self, on: bool) {
        self.backend.record_timeline(on);
    }

    /// The device intervals recorded since the last call; waits for the recorded work.
    pub fn take_timeline(&mut self) -> Result<Vec<TimelineSpan>, ModelError> {
        Ok(self.backend.take_timeline()?)
    }

    /// Waits for a pass [`Runner::submit_bytes`] queued and returns its outputs (the main
    /// output, `logits` or `last_hidden_state`, unless [`Runner::with_outputs`] chose others).
    pub fn finish(&mut self, pending: PendingOutputs) -> Result<Vec<HostTensor>, ModelError> {
        Ok(Executor::finish_outputs(self.backend.as_mut(), pending)?)
    }

    /// As [`Runner::finish`], with the status words of the images [`Runner::submit_decoding`]
    /// decoded on the device (in its `decode`'s JPEG batch order; empty without one): an
    /// image whose word is not zero was not decoded exactly, and its outputs are wrong.
    pub fn finish_decoding(
        &mut self,
        mut pending: PendingOutputs,
    ) -> Result<(Vec<HostTensor>, Vec<u32>), ModelError> {
        let status = Executor::finish_decode_status(self.backend.as_mut(), &mut pending)?;
        let outputs = Executor::finish_outputs(self.backend.as_mut(), pending)?;
        Ok((outputs, status))
    }

    /// Builds, plans and binds the executor for `batch` images (once), and returns it.
    pub fn prepare(&mut self, batch: usize, hidden_states: bool) -> Result<&Executor, ModelError> {
        let key = self.key(batch, hidden_states);
        if !self.executors.contains_key(&key) {
            crate::limits::check_batch_size(batch).map_err(ModelError::Usage)?;
            let options = GraphOptions {
                hidden_states,
                fusion: self.fusion,
                outputs: self.outputs,
            };
            let graph = self.graph(batch, options)?;
            let encoded = self.encoded.take().unwrap_or_default();
            let executor = Executor::new_with_encoded(
                graph,
                self.backend.as_mut(),
                &self.model,
                self.precision,
                &encoded,
            )
            .map_err(|e| out_of_memory_at(e, batch))?
            .with_graph_replay(self.graph_replay);
            self.executors.insert(key, executor);
        }
        Ok(&self.executors[&key])
    }

    /// The executor prepared for `batch` images, if any.
    pub fn executor(&self, batch: usize, hidden_states: bool) -> Option<&Executor> {
        self.executors.get(&self.key(batch, hidden_states))
    }

    /// Builds the graph for one image on this backend, without planning or uploading
    /// anything: fails early when the fusion asks for something the backend cannot run (a
    /// required fused attention with a head dim or dtype its kernel does not take).
    pub fn check_graph(&self) -> Result<(), ModelError> {
        let options = GraphOptions {
            hidden_states: false,
            fusion: self.fusion,
            outputs: self.outputs,
        };
        self.graph(1, options).map(|_| ())
    }

    /// Times forward passes of `batch` images of `pixels` (the main output only): `warmup`
    /// untimed, then `reps` timed on the device (CUDA events; host time on the CPU), the
    /// pixels written once beforehand. With `per_node`, each graph node is timed too (the
    /// forward pass is then the sum of its nodes). `progress` is called after every pass.
    pub fn time_forward(
        &mut self,
        pixels: &[f32],
        batch: usize,
        (warmup, reps): (usize, usize),
        per_node: bool,
        progress: &mut dyn FnMut(),
    ) -> Result<ForwardTimes, ModelError> {
        self.check_pixels(pixels, batch)?;
        self.prepare(batch, false)?;
        let executor = &self.executors[&self.key(batch, false)];
        let backend = self.backend.as_mut();
        executor.write_inputs(backend, &[("pixel_values", pixels)])?;
        let marks = if per_node {
            Marks::EachNode
        } else {
            Marks::Forward
        };
        let mut times = ForwardTimes::default();
        for rep in 0..warmup + reps {
            executor.launch(backend, marks)?;
            // Reading the marks waits for the pass: passes are timed one at a time, as a
            // caller waiting for its result would see them.
            let intervals = backend.take_mark_intervals()?;
            if rep >= warmup {
                times.forward_ms.push(intervals.iter().sum());
                if per_node {
                    times.node_ms.push(intervals);
                }
            }
            progress();
        }
        Ok(times)
    }

    fn check_pixels(&self, pixels: &[f32], batch: usize) -> Result<(), ModelError> {
        let shape = self.input_shape(batch);
        if batch == 0 || pixels.len() != shape.iter().product::<usize>() {
            return Err(ModelError::Usage(format!(
                "pixel_values must be {:?} for {batch} images; got {} values",
                shape,
                pixels.len()
            )));
        }
        Ok(())
    }
}

/// Hidden states in layer order first, then the main output.
fn sort_outputs(outputs: &mut [HostTensor]) {
    outputs.sort_by_key(|t| match t.name.strip_prefix("hidden_states.") {
        Some(i) => i.parse::<usize>().unwrap_or(usize::MAX - 1),
        None => usize::MAX,
    });
}

/// An out-of-memory error while preparing `batch` images, told in batch sizes: what was asked,
/// what is free, and the batch size that would fit (activations grow with the batch; the
/// weights, already uploaded, do not).
fn out_of_memory_at(error: RuntimeError, batch: usize) -> ModelError {
    match error {
        RuntimeError::OutOfMemory { requested, free } => {
            let per_image = requested.div_ceil(batch.max(1)).max(1);
            let fits = free / per_image;
            let advice = if fits == 0 {
                "not even one image fits: free device memory, or use a smaller model or dtype"
                    .to_string()
            } else {
                format!("--batch-size {fits} or less would fit")
            };
            ModelError::Usage(format!(
                "out of device memory at batch size {batch}: its activations need {} MiB, {} MiB \
                 are free; {advice}",
                requested >> 20,
                free >> 20
            ))
        }
        other => other.into(),
    }
}

/// Device times of repeated forward passes, in milliseconds.
#[derive(Clone, Debug, Default)]
pub struct ForwardTimes {
    /// Per timed pass: the whole forward pass.
    pub forward_ms: Vec<f32>,
    /// Per timed pass, per graph node in execution order (only when timed per node).
    pub node_ms: Vec<Vec<f32>>,
}
