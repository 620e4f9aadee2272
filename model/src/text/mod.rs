//! Text towers of the dual-tower families (CLIP, SigLIP): their config, their tokenizer
//! (label prompts into the token ids the towers read), their graph, and a runner that turns
//! token ids into text embeddings, for zero-shot labels and `vitrt embed-text`.

pub mod config;
pub mod labels;
mod spiece;
mod tokenizer;
pub mod tower;

pub use config::{TextConfig, TextFamily};
pub use tokenizer::{TextTokenizer, TokenBatch};
pub use tower::{ScoreRule, TextGraphOptions, TextModel, INPUT_IDS};

use crate::error::ModelError;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{Backend, Executor, HostTensor, Precision};

/// Sequences encoded per forward pass: many labels times many templates run in chunks of
/// this many, so memory stays bounded however long the label list.
pub const TEXT_BATCH: usize = 256;

/// What one run of the text tower writes besides `text_embeds`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextRun {
    /// Every hidden state, `last_hidden_state` and `pooler_output` too.
    pub all_outputs: bool,
    /// `text_embeds` of unit length.
    pub normalize: bool,
}

/// A text tower on a backend.
pub struct TextEncoder {
    pub model: TextModel,
    backend: Box<dyn Backend>,
    fusion: Fusion,
    precision: Precision,
}

impl TextEncoder {
    /// Computing in the backend's dtype, the residual stream stored as
    /// `Precision::default_for` says (as the vision runner).
    pub fn new(model: TextModel, backend: Box<dyn Backend>, fusion: Fusion) -> TextEncoder {
        let precision = Precision::default_for(backend.dtype());
        TextEncoder {
            model,
            backend,
            fusion,
            precision,
        }
    }

    pub fn with_precision(mut self, precision: Precision) -> TextEncoder {
        self.precision = precision;
        self
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Runs `batch` sequences of [`TextModel::context`] token ids (row-major): the
    /// `text_embeds` [batch, embedding size], and with `options.all_outputs` every hidden
    /// state, `last_hidden_state` and `pooler_output` too.
    pub fn run(
        &mut self,
        ids: &[u32],
        batch: usize,
        options: TextRun,
    ) -> Result<Vec<HostTensor>, ModelError> {
        let backend = self.backend.as_mut();
        run_text(
            &self.model,
            backend,
            self.fusion,
            self.precision,
            ids,
            batch,
            options,
        )
    }

    /// The text embeddings of every sequence, [n, embedding size] row-major (each of unit
    /// length with `normalize`), encoded in chunks of [`TEXT_BATCH`].
    pub fn embed(
        &mut self,
        ids: &[u32],
        n: usize,
        normalize: bool,
    ) -> Result<Vec<f32>, ModelError> {
        let backend = self.backend.as_mut();
        embed_texts(
            &self.model,
            backend,
            self.fusion,
            self.precision,
            ids,
            n,
            normalize,
        )
    }
}

/// [`TextEncoder::run`] on a borrowed backend (also `Runner::embed_texts`, zero-shot's text
/// tower on the vision runner's backend).
pub(crate) fn run_text(
    model: &TextModel,
    backend: &mut dyn Backend,
    fusion: Fusion,
    precision: Precision,
    ids: &[u32],
    batch: usize,
    options: TextRun,
) -> Result<Vec<HostTensor>, ModelError> {
    let context = model.context();
    if ids.len() != batch * context {
        return Err(ModelError::Usage(format!(
            "{batch} sequences of {context} token ids are {} ids, got {}",
            batch * context,
            ids.len()
        )));
    }
    let vocab = model.config.vocab_size;
    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ModelError::Usage(format!(
            "token id {bad} is outside the text tower's vocabulary of {vocab} (is the \
             tokenizer the checkpoint's own?)"
        )));
    }
    let options = TextGraphOptions {
        all_outputs: options.all_outputs,
        normalize: options.normalize,
        fusion,
    };
    let graph = {
        let probe: &dyn Backend = backend;
        model.build_graph(batch, options, &|op, shapes| probe.supports(op, shapes))?
    };
    let executor = Executor::new(graph, backend, model, precision)?.with_graph_replay(false);
    // Ids below 2^24 are exact in f32, the type of every graph input.
    let values: Vec<f32> = ids.iter().map(|&id| id as f32).collect();
    Ok(executor.run(backend, &[(INPUT_IDS, &values)])?)
}

/// [`TextEncoder::embed`] on a borrowed backend.
pub(crate) fn embed_texts(
    model: &TextModel,
    backend: &mut dyn Backend,
    fusion: Fusion,
    precision: Precision,
    ids: &[u32],
    n: usize,
    normalize: bool,
) -> Result<Vec<f32>, ModelError> {
    let context = model.context();
    let mut embeds = Vec::with_capacity(n * model.embedding_size());
    for start in (0..n).step_by(TEXT_BATCH) {
        let count = TEXT_BATCH.min(n - start);
        let chunk = &ids[start * context..(start + count) * context];
        let options = TextRun {
            all_outputs: false,
            normalize,
        };
        let outputs = run_text(model, backend, fusion, precision, chunk, count, options)?;
        let text = outputs
            .into_iter()
            .find(|t| t.name == "text_embeds")
            .ok_or_else(|| ModelError::Usage("the text graph wrote no text_embeds".into()))?;
        embeds.extend_from_slice(&text.data);
    }
    Ok(embeds)
}
