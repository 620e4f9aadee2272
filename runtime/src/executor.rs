//! The executor walks a planned graph on a backend: parameters are bound once when it is
//! built, inputs are copied in and outputs copied out at the graph's edges, and every node
//! writes into the arena region the plan gave it.

use crate::backend::{Backend, Binding, BufferRef};
use crate::error::RuntimeError;
use crate::graph::{Graph, ParamSource, ValueKind};
use crate::plan::{Plan, Precision};

/// Supplies checkpoint tensors by name, converted to f32 and checked against `shape`.
pub trait ParamStore {
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
}

impl Executor {
    /// Plans `graph` under `precision` (whose compute type must be the backend's) and binds
    /// every parameter (uploading those the backend does not hold yet).
    pub fn new(
        graph: Graph,
        backend: &mut dyn Backend,
        params: &dyn ParamStore,
        precision: Precision,
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
        let mut bindings = Vec::with_capacity(graph.values.len());
        for (v, value) in graph.values.iter().enumerate() {
            let binding = match &value.kind {
                ValueKind::Param(source) => {
                    let mut load = || load_param(source, &value.shape, params);
                    let id = backend.load_param(&source.key(), &value.shape, &mut load)?;
                    BufferRef::Param {
                        id,
                        len: value.numel(),
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
        })
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
            if data.len() != value.numel() {
                return Err(RuntimeError::Input {
                    name: value.name.clone(),
                    message: format!(
                        "expected {} values for shape {:?}, got {}",
                        value.numel(),
                        value.shape,
                        data.len()
                    ),
                });
            }
            backend.write(self.bindings[v], data)?;
        }
        Ok(())
    }

    /// Queues every node on the backend, on the inputs last written. With `marks`, also
    /// records timing marks (see [`Backend::mark`]) around the forward pass or around each
    /// node; the caller collects them with [`Backend::take_mark_intervals`].
    pub fn launch(&self, backend: &mut dyn Backend, marks: Marks) -> Result<(), RuntimeError> {
        let describe = backend.describe();
        if marks != Marks::None {
            backend.mark()?;
        }
        for (step, node) in self.graph.nodes.iter().enumerate() {
            let bind = |v: usize| Binding {
                buffer: self.bindings[v],
                shape: self.graph.values[v].shape.clone(),
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

/// Where [`Executor::launch`] records timing marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marks {
    None,
    /// Before the first node and after the last: one interval, the forward pass.
    Forward,
    /// Before the first node and after every node: one interval per node.
    EachNode,
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
    }
}
