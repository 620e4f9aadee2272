//! Runs a model on a backend, one executor per (batch size, outputs) so that the graph is
//! built and planned once and parameters are uploaded once for all of them.

use crate::error::ModelError;
use crate::vit::{GraphOptions, VitModel};
use std::collections::HashMap;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{Backend, Executor, HostTensor};

pub struct Runner {
    pub model: VitModel,
    backend: Box<dyn Backend>,
    fusion: Fusion,
    executors: HashMap<(usize, bool), Executor>,
}

impl Runner {
    pub fn new(model: VitModel, backend: Box<dyn Backend>, fusion: Fusion) -> Runner {
        Runner {
            model,
            backend,
            fusion,
            executors: HashMap::new(),
        }
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Shape every pixel tensor must have for `batch` images.
    pub fn input_shape(&self, batch: usize) -> [usize; 4] {
        let c = &self.model.config;
        [batch, c.num_channels, c.image_size.0, c.image_size.1]
    }

    /// Runs `batch` images of pixels (NCHW, f32). Returns the main output (`logits` or
    /// `last_hidden_state`) and, with `hidden_states`, every `hidden_states.{i}` before it.
    pub fn run(
        &mut self,
        pixels: &[f32],
        batch: usize,
        hidden_states: bool,
    ) -> Result<Vec<HostTensor>, ModelError> {
        let shape = self.input_shape(batch);
        if batch == 0 || pixels.len() != shape.iter().product::<usize>() {
            return Err(ModelError::Usage(format!(
                "pixel_values must be {:?} for {batch} images; got {} values",
                shape,
                pixels.len()
            )));
        }
        let key = (batch, hidden_states);
        if !self.executors.contains_key(&key) {
            let options = GraphOptions {
                hidden_states,
                fusion: self.fusion,
            };
            let graph = self.model.build_graph(batch, options)?;
            let executor = Executor::new(graph, self.backend.as_mut(), &self.model)?;
            self.executors.insert(key, executor);
        }
        let executor = &self.executors[&key];
        let mut outputs = executor.run(self.backend.as_mut(), &[("pixel_values", pixels)])?;
        // Hidden states in layer order first, then the main output.
        outputs.sort_by_key(|t| match t.name.strip_prefix("hidden_states.") {
            Some(i) => i.parse::<usize>().unwrap_or(usize::MAX - 1),
            None => usize::MAX,
        });
        Ok(outputs)
    }
}
