//! Row gathers:
//!
//! - a strided row gather, `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]`:
//!   the CLS token of every sequence, ahead of the classifier. [`gpu::gather_rows`]: gather.cu,
//!   one block per row. No CPU twin: the CPU backend copies the rows itself
//!   (runtime/src/backend/cpu.rs, `Op::SelectToken`).
//! - a text tower's (CLIP's, SigLIP's) token embedding, `out[r, :] = table[ids[r], :] +
//!   positions[r % tokens, :]`, ids given as f32, an id outside the vocabulary giving a NaN
//!   row: [`gpu::token_embedding`] and its twin [`cpu::token_embedding`].
//! - a text tower's pooled token, the row of each sequence at the position an [`EndToken`]
//!   rule picks from its ids: [`gpu::end_token_rows`] and its twin [`cpu::end_token_rows`].
//!
//! Tests: kernels/tests/gpu_kernels/gather.rs (`token_embedding_matches_its_twin`,
//! `end_token_rows_match_their_twin`); `gather_rows` through the runtime's CUDA backend. No
//! bench case.

pub mod cpu;
pub mod gpu;

/// How a text tower picks the pooled token of a sequence from its ids (transformers'
/// CLIPTextTransformer): the row at that position is the sequence's pooled output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndToken {
    /// The first position of the largest id (torch's `argmax`): CLIP's end-of-text token is
    /// the last of its vocabulary (the legacy configs, `eos_token_id == 2`).
    HighestId,
    /// The first position whose id is this one (the configs' `eos_token_id`), or position 0
    /// when no id is (torch's argmax of an all-false row).
    FirstOf(u32),
}
