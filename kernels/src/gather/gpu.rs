//! The row gather launchers: one block per output row (a text tower's pooled token: one block
//! per sequence), threads striding across its columns.

use super::EndToken;
use crate::cuda::{
    invalid, kernel_params, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("gather.cu");
const THREADS: u32 = 256;
/// Threads of a token-embedding row: CLIP's and SigLIP's text widths are 512 to 1152.
const EMBEDDING_THREADS: u32 = 128;
/// Threads of a pooled-token block: one position each of a 77- or 64-token sequence, then the
/// row copy. A multiple of 32 (whole warps in the reduction), at most 32 warps.
const END_TOKEN_THREADS: u32 = 128;
/// The largest vocabulary whose ids are all exact in f32.
pub const MAX_VOCAB: usize = 1 << 24;

kernel_params! {
    /// gather_rows_program's parameters.
    struct GatherRowsParams {
        src: const_ptr,
        out: mut_ptr,
        src_row_stride: i64,
        src_offset: i64,
        cols: i32,
    }
}

kernel_params! {
    /// token_embedding_program's parameters.
    struct TokenEmbeddingParams {
        ids: const_ptr,
        table: const_ptr,
        positions: const_ptr,
        out: mut_ptr,
        tokens: i32,
        dim: i32,
        vocab: i32,
    }
}

kernel_params! {
    /// end_token_rows_program's parameters.
    struct EndTokenParams {
        hidden: const_ptr,
        ids: const_ptr,
        out: mut_ptr,
        tokens: i32,
        dim: i32,
        end_id: f32,
    }
}

fn gather_instantiation(dtype: DType) -> Instantiation {
    Instantiation {
        name: format!("gather_rows_{}", dtype.name()),
        family: "gather",
        source: SOURCE,
        headers: &[],
        function: "gather_rows_program",
        template_args: vec![dtype.cuda_type().into()],
        params: GatherRowsParams {
            src: DevPtr::of_type(dtype),
            out: DevPtr::of_type(dtype),
            src_row_stride: 0,
            src_offset: 0,
            cols: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// `out`: the table's type, or f32 (a residual stream kept in f32).
fn token_embedding_instantiation(table: DType, out: DType) -> Instantiation {
    let out_suffix = if out == table {
        String::new()
    } else {
        format!("_to_{}", out.name())
    };
    Instantiation {
        name: format!("token_embedding_{}{out_suffix}", table.name()),
        family: "gather",
        source: SOURCE,
        headers: &[],
        function: "token_embedding_program",
        template_args: vec![table.cuda_type().into(), out.cuda_type().into()],
        params: TokenEmbeddingParams {
            ids: DevPtr::of_type(DType::F32),
            table: DevPtr::of_type(table),
            positions: DevPtr::of_type(table),
            out: DevPtr::of_type(out),
            tokens: 0,
            dim: 0,
            vocab: 0,
        }
        .params(),
        block_threads: EMBEDDING_THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

fn end_token_instantiation(dtype: DType, rule: EndToken) -> Instantiation {
    let highest = matches!(rule, EndToken::HighestId);
    Instantiation {
        name: format!(
            "end_token_rows_{}_{}",
            dtype.name(),
            if highest { "highest_id" } else { "first_of" }
        ),
        family: "gather",
        source: SOURCE,
        headers: &[],
        function: "end_token_rows_program",
        template_args: vec![dtype.cuda_type().into(), highest.to_string()],
        params: EndTokenParams {
            hidden: DevPtr::of_type(dtype),
            ids: DevPtr::of_type(DType::F32),
            out: DevPtr::of_type(dtype),
            tokens: 0,
            dim: 0,
            end_id: 0.0,
        }
        .params(),
        block_threads: END_TOKEN_THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// The (table, out) storage pairs [`token_embedding`] takes: out is the table's type or f32.
pub const TOKEN_EMBEDDING_TYPES: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::F16, DType::F32),
    (DType::BF16, DType::BF16),
    (DType::BF16, DType::F32),
];

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all: Vec<Instantiation> = DType::ALL.into_iter().map(gather_instantiation).collect();
    all.extend(
        TOKEN_EMBEDDING_TYPES
            .into_iter()
            .map(|(table, out)| token_embedding_instantiation(table, out)),
    );
    for dtype in DType::ALL {
        for rule in [EndToken::HighestId, EndToken::FirstOf(0)] {
            all.push(end_token_instantiation(dtype, rule));
        }
    }
    all
}

/// `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]` for `r < rows`: the CLS
/// token of every sequence, say.
#[allow(clippy::too_many_arguments)]
pub fn gather_rows(
    gpu: &Gpu,
    dtype: DType,
    src: DevPtr,
    src_row_stride: usize,
    src_offset: usize,
    rows: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    src.expect(
        "gather source",
        dtype,
        (rows - 1) * src_row_stride + src_offset + cols,
    )?;
    out.expect("gather output", dtype, rows * cols)?;
    let blocks = u32::try_from(rows).map_err(|_| invalid!("gather of {rows} rows"))?;
    gpu.launch(
        &gather_instantiation(dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &GatherRowsParams {
            src,
            out,
            src_row_stride: to_i64(src_row_stride)?,
            src_offset: to_i64(src_offset)?,
            cols: i32::try_from(cols).map_err(|_| invalid!("gather of {cols} columns"))?,
        }
        .args(),
    )
}

/// A text tower's input embedding: `out[r, :] = table[ids[r], :] + positions[r % tokens, :]`
/// for the `rows = batch · tokens` token ids of `[batch, tokens]` sequences (as
/// `cpu::token_embedding`), summed in f32 and rounded once to `out_dtype`: the table's type,
/// or f32 (a residual stream kept in f32; [`TOKEN_EMBEDDING_TYPES`]).
///
/// - `ids`: f32 `[rows]`, each an integer id (the runtime's graph inputs are f32; ids are
///   exact up to 2^24, and `vocab` may be at most [`MAX_VOCAB`]).
/// - `table`: `[vocab, dim]`; `positions`: `[tokens, dim]` (at least), both `table_dtype`.
/// - `out`: `[rows, dim]` of `out_dtype`.
///
/// An id that is not an integer in `0..vocab` (NaN, ±inf, 3.5, -1, `vocab`) is never read
/// with: its row of `out` is written as NaN, so bad input never passes for a valid answer.
/// The device cannot report it; callers that can see the ids should check them first.
/// No alignment requirement (element accesses).
#[allow(clippy::too_many_arguments)]
pub fn token_embedding(
    gpu: &Gpu,
    table_dtype: DType,
    out_dtype: DType,
    ids: DevPtr,
    table: DevPtr,
    positions: DevPtr,
    rows: usize,
    tokens: usize,
    dim: usize,
    vocab: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    check_token_embedding(table_dtype, out_dtype, rows, tokens, dim, vocab)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    ids.expect("token embedding ids", DType::F32, rows)?;
    table.expect("token embedding table", table_dtype, vocab * dim)?;
    positions.expect("token embedding positions", table_dtype, tokens * dim)?;
    out.expect("token embedding output", out_dtype, rows * dim)?;
    let blocks = u32::try_from(rows)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| invalid!("token embedding of {rows} rows"))?;
    gpu.launch(
        &token_embedding_instantiation(table_dtype, out_dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: EMBEDDING_THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &TokenEmbeddingParams {
            ids,
            table,
            positions,
            out,
            tokens: to_i32(tokens, "token embedding tokens")?,
            dim: to_i32(dim, "token embedding width")?,
            vocab: to_i32(vocab, "token embedding vocabulary")?,
        }
        .args(),
    )
}

/// The shapes and types [`token_embedding`] takes (the views are checked at launch).
pub(crate) fn check_token_embedding(
    table_dtype: DType,
    out_dtype: DType,
    rows: usize,
    tokens: usize,
    dim: usize,
    vocab: usize,
) -> Result<(), KernelError> {
    if !TOKEN_EMBEDDING_TYPES.contains(&(table_dtype, out_dtype)) {
        return Err(invalid!(
            "token embedding writes the table's type or f32: not a {table_dtype} table into \
             {out_dtype}"
        ));
    }
    if vocab == 0 || vocab > MAX_VOCAB {
        return Err(invalid!(
            "token embedding vocabulary of {vocab}: ids are f32, exact for 1 to 2^24 entries"
        ));
    }
    if tokens == 0 || !rows.is_multiple_of(tokens) {
        return Err(invalid!(
            "token embedding: {rows} ids are no whole number of sequences of {tokens} tokens"
        ));
    }
    let elements = |a: usize, b: usize, what: &str| {
        a.checked_mul(b)
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or_else(|| invalid!("token embedding {what} {a} x {b} overflows"))
    };
    elements(rows, dim, "output")?;
    elements(vocab, dim, "table")?;
    Ok(())
}

/// A text tower's pooled token: for every sequence b of `hidden` `[batch, tokens, dim]`, the
/// row at the position `rule` picks from its ids (as `cpu::end_token_rows`), `out[b, :] =
/// hidden[b, p, :]`:
///
/// - [`EndToken::HighestId`]: the first position of the largest id (torch's `argmax`, as
///   transformers' CLIPTextTransformer pools when its config's `eos_token_id` is 2);
/// - [`EndToken::FirstOf`]`(e)`: the first position whose id is `e`, or 0 when none is (torch's
///   argmax of an all-false row), as CLIPTextTransformer pools otherwise.
///
/// `ids`: f32 `[batch, tokens]`; `hidden` and `out` of `dtype` (`out` `[batch, dim]`). A NaN
/// id is never the largest (torch would take it). No alignment requirement.
#[allow(clippy::too_many_arguments)]
pub fn end_token_rows(
    gpu: &Gpu,
    dtype: DType,
    hidden: DevPtr,
    ids: DevPtr,
    batch: usize,
    tokens: usize,
    dim: usize,
    rule: EndToken,
    out: DevPtr,
) -> Result<(), KernelError> {
    let end_id = check_end_token_rows(batch, tokens, dim, rule)?;
    if batch == 0 || dim == 0 {
        return Ok(());
    }
    hidden.expect("end token hidden states", dtype, batch * tokens * dim)?;
    ids.expect("end token ids", DType::F32, batch * tokens)?;
    out.expect("end token output", dtype, batch * dim)?;
    let blocks = u32::try_from(batch)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| invalid!("end token rows of {batch} sequences"))?;
    gpu.launch(
        &end_token_instantiation(dtype, rule),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: END_TOKEN_THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &EndTokenParams {
            hidden,
            ids,
            out,
            tokens: to_i32(tokens, "end token sequence length")?,
            dim: to_i32(dim, "end token width")?,
            end_id,
        }
        .args(),
    )
}

/// The shapes [`end_token_rows`] takes; the end id as the kernel compares it (0 for
/// [`EndToken::HighestId`], which does not read it).
pub(crate) fn check_end_token_rows(
    batch: usize,
    tokens: usize,
    dim: usize,
    rule: EndToken,
) -> Result<f32, KernelError> {
    if batch > 0 && tokens == 0 {
        return Err(invalid!(
            "end token rows: sequences of 0 tokens have no row to pick"
        ));
    }
    batch
        .checked_mul(tokens)
        .and_then(|n| n.checked_mul(dim.max(1)))
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| invalid!("end token rows: {batch} x {tokens} x {dim} overflows"))?;
    match rule {
        EndToken::HighestId => Ok(0.0),
        EndToken::FirstOf(e) if (e as usize) <= MAX_VOCAB => Ok(e as f32),
        EndToken::FirstOf(e) => Err(invalid!(
            "end token id {e}: ids are f32, exact up to 2^24 only"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedding_and_end_token_program_is_registered() {
        let names: Vec<String> = instantiations().into_iter().map(|i| i.name).collect();
        for name in [
            "gather_rows_f16",
            "token_embedding_f32",
            "token_embedding_f16",
            "token_embedding_f16_to_f32",
            "token_embedding_bf16",
            "token_embedding_bf16_to_f32",
            "end_token_rows_f32_highest_id",
            "end_token_rows_bf16_first_of",
        ] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        // 3 row gathers, 5 embeddings, 3 dtypes x 2 rules.
        assert_eq!(names.len(), 3 + 5 + 6);
    }

    #[test]
    fn token_embedding_refuses_what_it_cannot_take() {
        let ok = check_token_embedding(DType::BF16, DType::F32, 2 * 77, 77, 512, 49_408);
        assert!(ok.is_ok());
        let refused = |r: Result<(), KernelError>| match r {
            Err(KernelError::InvalidArgument(e)) => e,
            other => panic!("expected an invalid argument, got {other:?}"),
        };
        let e = refused(check_token_embedding(
            DType::F16,
            DType::BF16,
            77,
            77,
            8,
            10,
        ));
        assert!(e.contains("f16 table into bf16"), "{e}");
        let e = refused(check_token_embedding(DType::F32, DType::F16, 77, 77, 8, 10));
        assert!(e.contains("f32 table into f16"), "{e}");
        let e = refused(check_token_embedding(DType::F16, DType::F16, 78, 77, 8, 10));
        assert!(e.contains("78 ids"), "{e}");
        let e = refused(check_token_embedding(DType::F16, DType::F16, 0, 0, 8, 10));
        assert!(e.contains("0 tokens"), "{e}");
        let e = refused(check_token_embedding(DType::F16, DType::F16, 77, 77, 8, 0));
        assert!(e.contains("vocabulary of 0"), "{e}");
        let e = refused(check_token_embedding(
            DType::F16,
            DType::F16,
            77,
            77,
            8,
            MAX_VOCAB + 1,
        ));
        assert!(e.contains("2^24"), "{e}");
        let e = refused(check_token_embedding(
            DType::F16,
            DType::F16,
            77,
            77,
            usize::MAX,
            10,
        ));
        assert!(e.contains("overflows"), "{e}");
    }

    #[test]
    fn end_token_rows_refuses_what_it_cannot_take() {
        assert_eq!(
            check_end_token_rows(2, 77, 512, EndToken::HighestId).unwrap(),
            0.0
        );
        assert_eq!(
            check_end_token_rows(2, 77, 512, EndToken::FirstOf(49_407)).unwrap(),
            49_407.0
        );
        assert!(check_end_token_rows(0, 0, 512, EndToken::HighestId).is_ok());
        let e = check_end_token_rows(2, 0, 512, EndToken::HighestId).unwrap_err();
        assert!(e.to_string().contains("0 tokens"), "{e}");
        let e = check_end_token_rows(2, 77, 512, EndToken::FirstOf(1 << 25)).unwrap_err();
        assert!(e.to_string().contains("2^24"), "{e}");
        let e = check_end_token_rows(usize::MAX, 77, 512, EndToken::HighestId).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
    }
}
