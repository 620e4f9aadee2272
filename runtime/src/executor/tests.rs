//! The executor on the CPU backend: graph replay (warm-up, capture, a grown arena, a failed
//! capture) and node-by-node timing.

use super::*;
use crate::backend::cpu::CpuBackend;
use crate::graph::Op;
use crate::{Activation, DType, Epilogue};
use std::collections::HashMap;

/// Deterministic weights: every parameter is a ramp scaled by its length.
struct RampParams;

impl ParamStore for RampParams {
    fn load(&self, _name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        let n: usize = shape.iter().product();
        Ok((0..n).map(|i| (i as f32 * 0.37).sin() / n as f32).collect())
    }
}

/// `z = gelu(x · wᵀ + b) + x · wᵀ + b` over `batch` rows of 8 features.
fn small_graph(batch: usize) -> Graph {
    let mut g = Graph::default();
    let x = g.add_input("x", &[batch, 4, 8]);
    let w = g.add_param("w", &[8, 8]);
    let b = g.add_param("b", &[8]);
    let y = g
        .add_node(
            "fc",
            Op::Linear {
                epilogue: Epilogue {
                    bias: true,
                    ..Epilogue::NONE
                },
            },
            &[x, w, b],
        )
        .unwrap();
    let a = g
        .add_node("act", Op::Activation(Activation::Gelu), &[y])
        .unwrap();
    let z = g.add_node("add", Op::Add, &[a, y]).unwrap();
    g.mark_output("z", z);
    g
}

fn pixels(batch: usize, seed: usize) -> Vec<f32> {
    (0..batch * 32)
        .map(|i| ((i * 7919 + seed * 104_729) % 251) as f32 / 125.0 - 1.0)
        .collect()
}

/// One op as recorded during a capture.
struct RecordedOp {
    op: Op,
    inputs: Vec<Binding>,
    output: Binding,
    workspace: Option<BufferRef>,
}

/// A CPU backend that captures as CUDA does: ops queued during a capture are recorded,
/// not run; a replay runs the recorded ops on the buffers' current contents; graphs are
/// dropped when the arena grows.
struct CapturingCpu {
    inner: CpuBackend,
    arena_bytes: usize,
    recording: Option<Vec<RecordedOp>>,
    graphs: HashMap<u64, Vec<RecordedOp>>,
    refuse_capture: bool,
    /// What `write_from_device` answers: an input error without the input's name, as the
    /// CUDA backend answers a tensor on another device.
    device_input_refusal: Option<String>,
    captures: usize,
    replays: usize,
    eager_ops: usize,
}

impl CapturingCpu {
    fn new() -> CapturingCpu {
        CapturingCpu {
            inner: CpuBackend::new(),
            arena_bytes: 0,
            recording: None,
            graphs: HashMap::new(),
            refuse_capture: false,
            device_input_refusal: None,
            captures: 0,
            replays: 0,
            eager_ops: 0,
        }
    }
}

impl Backend for CapturingCpu {
    fn describe(&self) -> String {
        "capturing cpu".into()
    }
    fn dtype(&self) -> DType {
        self.inner.dtype()
    }
    fn load_param(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        load: &mut dyn FnMut() -> Result<Vec<f32>, RuntimeError>,
    ) -> Result<usize, RuntimeError> {
        self.inner.load_param(key, shape, dtype, load)
    }
    fn param_count(&self) -> usize {
        self.inner.param_count()
    }
    fn truncate_params(&mut self, count: usize) {
        self.inner.truncate_params(count)
    }
    fn memory_account(&self) -> crate::backend::MemoryAccount {
        crate::backend::MemoryAccount {
            graphs: self.graphs.len(),
            ..self.inner.memory_account()
        }
    }
    fn reserve_arena(&mut self, bytes: usize) -> Result<(), RuntimeError> {
        if bytes > self.arena_bytes {
            self.graphs.clear();
            self.arena_bytes = bytes;
        }
        self.inner.reserve_arena(bytes)
    }
    fn write(&mut self, dst: BufferRef, data: &[f32]) -> Result<(), RuntimeError> {
        assert!(
            self.recording.is_none(),
            "inputs are written outside captures"
        );
        self.inner.write(dst, data)
    }
    unsafe fn write_from_device(
        &mut self,
        _dst: BufferRef,
        _src: crate::backend::DeviceInput,
    ) -> Result<(), RuntimeError> {
        Err(match &self.device_input_refusal {
            Some(message) => RuntimeError::Input {
                name: String::new(),
                message: message.clone(),
            },
            None => RuntimeError::Unsupported("no device memory".into()),
        })
    }
    fn read(&mut self, src: BufferRef) -> Result<Vec<f32>, RuntimeError> {
        assert!(
            self.recording.is_none(),
            "outputs are read outside captures"
        );
        self.inner.read(src)
    }
    fn execute(
        &mut self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
        workspace: Option<BufferRef>,
    ) -> Result<(), String> {
        match &mut self.recording {
            Some(recorded) => {
                recorded.push(RecordedOp {
                    op: op.clone(),
                    inputs: inputs.to_vec(),
                    output: output.clone(),
                    workspace,
                });
                Ok(())
            }
            None => {
                self.eager_ops += 1;
                self.inner.execute(op, inputs, output, workspace)
            }
        }
    }
    fn synchronize(&mut self) -> Result<(), RuntimeError> {
        self.inner.synchronize()
    }
    fn mark(&mut self) -> Result<(), RuntimeError> {
        assert!(self.recording.is_none(), "marks are never captured");
        self.inner.mark()
    }
    fn take_mark_intervals(&mut self) -> Result<Vec<f32>, RuntimeError> {
        self.inner.take_mark_intervals()
    }
    fn can_capture(&self) -> bool {
        true
    }
    fn capture_graph(
        &mut self,
        key: u64,
        queue: &mut dyn FnMut(&mut dyn Backend) -> Result<(), RuntimeError>,
    ) -> Result<(), String> {
        self.captures += 1;
        self.graphs.remove(&key);
        if self.refuse_capture {
            return Err("capture refused by the test".into());
        }
        self.recording = Some(Vec::new());
        let queued = queue(self);
        let recorded = self.recording.take().unwrap();
        queued.map_err(|e| e.to_string())?;
        self.graphs.insert(key, recorded);
        Ok(())
    }
    fn has_graph(&self, key: u64) -> bool {
        self.graphs.contains_key(&key)
    }
    fn replay_graph(&mut self, key: u64) -> Result<(), RuntimeError> {
        self.replays += 1;
        let recorded = self.graphs.get(&key).expect("replay of a graph not held");
        for op in recorded {
            self.inner
                .execute(&op.op, &op.inputs, &op.output, op.workspace)
                .map_err(RuntimeError::Backend)?;
        }
        Ok(())
    }
}

fn executor(batch: usize, backend: &mut dyn Backend) -> Executor {
    Executor::new(
        small_graph(batch),
        backend,
        &RampParams,
        Precision::uniform(DType::F32),
    )
    .unwrap()
}

/// The outputs of a plain CPU run, node by node.
fn eager_reference(batch: usize, input: &[f32]) -> Vec<HostTensor> {
    let mut cpu = CpuBackend::new();
    let plain = executor(batch, &mut cpu);
    plain.run(&mut cpu, &[("x", input)]).unwrap()
}

fn bits(outputs: &[HostTensor]) -> Vec<u32> {
    outputs
        .iter()
        .flat_map(|t| t.data.iter().map(|v| v.to_bits()))
        .collect()
}

#[test]
fn replay_follows_one_eager_warm_up_and_matches_it_bitwise() {
    let mut backend = CapturingCpu::new();
    let exec = executor(2, &mut backend);
    let nodes = exec.graph().nodes.len();
    assert_eq!(exec.replay_state(), ReplayState::Cold);

    let first = exec.run(&mut backend, &[("x", &pixels(2, 0))]).unwrap();
    assert_eq!(
        (backend.captures, backend.replays),
        (0, 0),
        "warm-up is eager"
    );
    assert_eq!(backend.eager_ops, nodes);
    assert_eq!(exec.replay_state(), ReplayState::WarmedUp);

    let second = exec.run(&mut backend, &[("x", &pixels(2, 0))]).unwrap();
    assert_eq!((backend.captures, backend.replays), (1, 1));
    assert_eq!(
        backend.eager_ops, nodes,
        "the captured pass runs only as a replay"
    );
    assert_eq!(bits(&first), bits(&second));

    // New inputs, written outside the graph, are what the replay reads.
    let third = exec.run(&mut backend, &[("x", &pixels(2, 1))]).unwrap();
    assert_eq!((backend.captures, backend.replays), (1, 2), "captured once");
    assert_eq!(bits(&third), bits(&eager_reference(2, &pixels(2, 1))));
    assert_ne!(bits(&third), bits(&first));
}

#[test]
fn a_grown_arena_drops_the_graph_and_the_next_pass_captures_again() {
    let mut backend = CapturingCpu::new();
    let small = executor(1, &mut backend);
    for _ in 0..2 {
        small.run(&mut backend, &[("x", &pixels(1, 0))]).unwrap();
    }
    assert_eq!((backend.captures, backend.replays), (1, 1));
    assert!(backend.has_graph(small.graph_key));

    // A larger plan on the same backend grows (moves) the arena.
    let large = executor(8, &mut backend);
    assert!(
        !backend.has_graph(small.graph_key),
        "the old arena's graph is gone"
    );
    let out = small.run(&mut backend, &[("x", &pixels(1, 2))]).unwrap();
    assert_eq!((backend.captures, backend.replays), (2, 2), "captured anew");
    assert_eq!(bits(&out), bits(&eager_reference(1, &pixels(1, 2))));

    // Two plans alternate, each replaying its own graph.
    for round in 0..3 {
        for (exec, batch) in [(&large, 8), (&small, 1)] {
            let input = pixels(batch, 10 + round);
            let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
            assert_eq!(
                bits(&out),
                bits(&eager_reference(batch, &input)),
                "b{batch}"
            );
        }
    }
    assert_eq!(
        backend.captures, 3,
        "the large plan captured once, after its warm-up"
    );
    assert_ne!(small.graph_key, large.graph_key);
}

/// Plans of several batch sizes on one backend share its one arena, sized for the largest
/// plan whatever the order they come in: no executor holds an arena of its own, so a run over
/// batch sizes 1, 8, 64, 256 holds the batch-256 plan's bytes, not their sum.
#[test]
fn executors_of_several_batch_sizes_share_one_arena_the_size_of_the_largest_plan() {
    let mut backend = CapturingCpu::new();
    let mut largest = 0;
    let mut executors = Vec::new();
    for batch in [4, 1, 16, 2] {
        let exec = executor(batch, &mut backend);
        largest = largest.max(exec.plan().arena_bytes);
        // f32 on the CPU: a plan's byte is an arena byte.
        assert_eq!(backend.memory_account().arena_bytes, largest, "b{batch}");
        executors.push((batch, exec));
    }
    assert!(
        largest > executors[0].1.plan().arena_bytes,
        "16 rows need more than 4"
    );
    for (batch, exec) in &executors {
        for _ in 0..3 {
            let input = pixels(*batch, 3);
            let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
            assert_eq!(
                bits(&out),
                bits(&eager_reference(*batch, &input)),
                "b{batch}"
            );
        }
    }
    let account = backend.memory_account();
    assert_eq!(account.arena_bytes, largest, "running them grew nothing");
    assert_eq!(
        account.graphs,
        executors.len(),
        "a graph per plan, on the one arena"
    );
    // The parameters were uploaded once for all of them: w [8, 8] and b [8], f32.
    assert_eq!(account.params_bytes, (64 + 8) * 4);
}

/// A parameter no node reads (what fusion leaves of the separate Q, K and V projections) is
/// never loaded from the store nor uploaded; the rest run as before.
#[test]
fn parameters_no_node_reads_are_not_uploaded() {
    let mut graph = small_graph(2);
    graph.add_param("left_behind", &[1024, 8]);
    let loaded = std::sync::Mutex::new(Vec::new());
    let mut backend = CpuBackend::new();
    let exec = Executor::new(
        graph,
        &mut backend,
        &Counting {
            read: &loaded,
            broken: "",
        },
        Precision::uniform(DType::F32),
    )
    .unwrap();
    let mut names = loaded.into_inner().unwrap();
    names.sort();
    assert_eq!(names, ["b", "w"]);
    assert_eq!(backend.param_count(), 2);
    assert_eq!(backend.memory_account().params_bytes, (64 + 8) * 4);
    let input = pixels(2, 5);
    let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
    assert_eq!(bits(&out), bits(&eager_reference(2, &input)));
}

#[test]
fn a_failed_capture_runs_eagerly_and_is_not_tried_again() {
    let mut backend = CapturingCpu::new();
    backend.refuse_capture = true;
    let exec = executor(2, &mut backend);
    for seed in 0..3 {
        let input = pixels(2, seed);
        let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
        assert_eq!(bits(&out), bits(&eager_reference(2, &input)));
    }
    assert_eq!(backend.captures, 1);
    assert_eq!(backend.replays, 0);
    assert_eq!(backend.eager_ops, 3 * exec.graph().nodes.len());
    assert_eq!(exec.replay_state(), ReplayState::Failed);
}

#[test]
fn per_node_timing_and_replay_off_run_node_by_node() {
    let mut backend = CapturingCpu::new();
    let exec = executor(2, &mut backend);
    let nodes = exec.graph().nodes.len();
    exec.write_inputs(&mut backend, &[("x", &pixels(2, 0))])
        .unwrap();
    for _ in 0..3 {
        exec.launch(&mut backend, Marks::EachNode).unwrap();
        assert_eq!(backend.take_mark_intervals().unwrap().len(), nodes);
    }
    assert_eq!((backend.captures, backend.replays), (0, 0));

    let off = executor(2, &mut backend).with_graph_replay(false);
    for _ in 0..3 {
        off.run(&mut backend, &[("x", &pixels(2, 0))]).unwrap();
    }
    assert_eq!((backend.captures, backend.replays), (0, 0));
    assert_eq!(backend.eager_ops, 6 * nodes);
}

#[test]
fn a_replayed_pass_is_timed_as_one_interval() {
    let mut backend = CapturingCpu::new();
    let exec = executor(2, &mut backend);
    exec.write_inputs(&mut backend, &[("x", &pixels(2, 0))])
        .unwrap();
    for _ in 0..3 {
        exec.launch(&mut backend, Marks::Forward).unwrap();
        assert_eq!(backend.take_mark_intervals().unwrap().len(), 1);
    }
    assert_eq!((backend.captures, backend.replays), (1, 2));
}

#[test]
fn the_cpu_backend_runs_eagerly_with_replay_on() {
    let mut cpu = CpuBackend::new();
    assert!(!cpu.can_capture());
    let exec = executor(2, &mut cpu);
    assert!(exec.graph_replay());
    let input = pixels(2, 3);
    let runs: Vec<Vec<u32>> = (0..3)
        .map(|_| bits(&exec.run(&mut cpu, &[("x", &input)]).unwrap()))
        .collect();
    assert!(runs.windows(2).all(|w| w[0] == w[1]));
    assert!(cpu.capture_graph(1, &mut |_| Ok(())).is_err());
    assert!(cpu.replay_graph(1).is_err());
}

#[test]
fn a_refused_device_input_is_named_after_the_graph_input() {
    let mut backend = CapturingCpu::new();
    backend.device_input_refusal =
        Some("the tensor is on cuda:1; this model runs on cuda:0".into());
    let exec = executor(2, &mut backend);
    let input = crate::backend::DeviceInput {
        ptr: 0x1000,
        len: 2 * 32,
    };
    // SAFETY: the backend refuses before it reads anything.
    let err = unsafe { exec.run_from_device(&mut backend, input) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "input x: the tensor is on cuda:1; this model runs on cuda:0"
    );
    // A wrong length is caught before the backend is asked, and named too.
    let short = crate::backend::DeviceInput {
        ptr: 0x1000,
        len: 5,
    };
    let err = unsafe { exec.run_from_device(&mut backend, short) }.unwrap_err();
    assert!(err.to_string().starts_with("input x"), "{err}");
}

/// Records the parameters read from a store, by name; one of them cannot be read.
struct Counting<'a> {
    read: &'a std::sync::Mutex<Vec<String>>,
    broken: &'a str,
}

impl ParamStore for Counting<'_> {
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        self.read.lock().unwrap().push(name.to_string());
        if name == self.broken {
            return Err(RuntimeError::Param {
                name: name.into(),
                message: "cannot be read".into(),
            });
        }
        RampParams.load(name, shape)
    }
}

/// Parameters encoded ahead are uploaded from there, not read from the store again, and the
/// executor computes what it computes without them, bit for bit; one past the budget, and
/// one a node does not read, are left to the store.
#[test]
fn encoded_parameters_are_taken_instead_of_read() {
    let precision = Precision::uniform(DType::F32);
    let mut graph = small_graph(2);
    graph.add_param("left_behind", &[1024, 8]);
    let all = EncodedParams::encode(&graph, precision, &RampParams, usize::MAX);
    assert_eq!((all.len(), all.bytes()), (2, (64 + 8) * 4));
    let input = pixels(2, 3);
    let read = std::sync::Mutex::new(Vec::new());
    let mut backend = CpuBackend::new();
    let exec = Executor::new_with_encoded(
        graph.clone(),
        &mut backend,
        &Counting {
            read: &read,
            broken: "",
        },
        precision,
        &all,
    )
    .unwrap();
    assert!(
        read.lock().unwrap().is_empty(),
        "{:?}",
        read.lock().unwrap()
    );
    assert!(all.is_empty(), "every entry handed out once");
    let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
    assert_eq!(bits(&out), bits(&eager_reference(2, &input)));

    // w [8, 8] comes first in the graph and fits the budget; b does not.
    let w_only = EncodedParams::encode(&graph, precision, &RampParams, 64 * 4);
    assert_eq!(w_only.len(), 1);
    let mut backend = CpuBackend::new();
    let exec = Executor::new_with_encoded(
        graph,
        &mut backend,
        &Counting {
            read: &read,
            broken: "",
        },
        precision,
        &w_only,
    )
    .unwrap();
    assert_eq!(*read.lock().unwrap(), ["b"]);
    let out = exec.run(&mut backend, &[("x", &input)]).unwrap();
    assert_eq!(bits(&out), bits(&eager_reference(2, &input)));
}

/// An entry is handed out only for its key, shape and storage type, once.
#[test]
fn an_encoded_parameter_matches_key_shape_and_type() {
    let graph = small_graph(1);
    let encoded = EncodedParams::encode(
        &graph,
        Precision::uniform(DType::F16),
        &RampParams,
        usize::MAX,
    );
    assert_eq!(encoded.bytes(), (64 + 8) * 2);
    assert_eq!(encoded.take("w", &[8, 8], DType::F32), None);
    assert_eq!(encoded.take("w", &[4, 16], DType::F16), None);
    let w = encoded.take("w", &[8, 8], DType::F16).unwrap();
    let expected = DType::F16.encode(&RampParams.load("w", &[8, 8]).unwrap());
    assert_eq!(w, expected);
    assert_eq!(encoded.take("w", &[8, 8], DType::F16), None);
}

/// A parameter the store cannot read is left out of the encoded set, and the executor reads
/// it again and reports the store's error.
#[test]
fn a_parameter_that_cannot_be_read_is_reported_by_the_executor() {
    let precision = Precision::uniform(DType::F32);
    let graph = small_graph(2);
    let read = std::sync::Mutex::new(Vec::new());
    let store = Counting {
        read: &read,
        broken: "b",
    };
    let encoded = EncodedParams::encode(&graph, precision, &store, usize::MAX);
    assert_eq!(encoded.len(), 1, "w only");
    let mut backend = CpuBackend::new();
    let err = Executor::new_with_encoded(graph, &mut backend, &store, precision, &encoded)
        .err()
        .expect("the broken parameter fails the executor");
    assert!(
        matches!(&err, RuntimeError::Param { name, message } if name == "b" && message.contains("cannot be read")),
        "{err}"
    );
}

/// An RMSNorm node on the CPU backend against the f64 definition
/// `x / sqrt(mean(x²) + eps) · weight` over the last dimension, the weight a ramp.
#[test]
fn rmsnorm_node_matches_its_f64_definition() {
    let (rows, cols, eps) = (6, 40, 1e-5f32);
    let mut g = Graph::default();
    let x = g.add_input("x", &[2, rows / 2, cols]);
    let weight = g.add_param("weight", &[cols]);
    let y = g
        .add_node("norm", Op::RmsNorm { eps }, &[x, weight])
        .unwrap();
    g.mark_output("y", y);
    let mut cpu = CpuBackend::new();
    let exec = Executor::new(g, &mut cpu, &RampParams, Precision::uniform(DType::F32)).unwrap();
    // Rows with a common offset of 3: RMSNorm keeps it, where LayerNorm would subtract it.
    let input: Vec<f32> = (0..rows * cols)
        .map(|i| 3.0 + ((i * 7919) % 97) as f32 / 24.0 - 2.0)
        .collect();
    let got = &exec.run(&mut cpu, &[("x", &input)]).unwrap()[0];
    assert_eq!(got.shape, vec![2, rows / 2, cols]);
    let w = RampParams.load("weight", &[cols]).unwrap();
    for (r, row) in input.chunks(cols).enumerate() {
        let mean_square = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
        let inv_rms = 1.0 / (mean_square + eps as f64).sqrt();
        for c in 0..cols {
            let want = row[c] as f64 * inv_rms * w[c] as f64;
            let error = (got.data[r * cols + c] as f64 - want).abs();
            assert!(error <= 1e-6 * want.abs() + 1e-9, "[{r}, {c}]: {error}");
        }
    }
}

/// An RMSNorm's weight must be as wide as its rows; its weight is f32 in every run, as a
/// layernorm's gamma.
#[test]
fn rmsnorm_checks_its_weight_and_keeps_it_f32() {
    let mut g = Graph::default();
    let x = g.add_input("x", &[4, 16]);
    let narrow = g.add_param("narrow", &[8]);
    let err = g
        .add_node("norm", Op::RmsNorm { eps: 1e-6 }, &[x, narrow])
        .unwrap_err();
    assert!(err.to_string().contains("rmsnorm over 16 columns"), "{err}");
    let weight = g.add_param("weight", &[16]);
    let y = g
        .add_node("norm", Op::RmsNorm { eps: 1e-6 }, &[x, weight])
        .unwrap();
    g.mark_output("y", y);
    for dtype in DType::ALL {
        let dtypes = crate::plan::value_dtypes(&g, Precision::default_for(dtype));
        assert_eq!(dtypes[weight], DType::F32, "{dtype}");
    }
}
