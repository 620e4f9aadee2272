//! `vitrt embed-text`: texts in, one embedding per text out (safetensors, NPY or JSON Lines),
//! from the text tower of a CLIP or SigLIP checkpoint: the checkpoint's tokenizer, then the
//! tower's graph in batches (`vitrt_model::text::TextEncoder`). Text longer than the tower's
//! context is cut to it, keeping the end token, as transformers' tokenizer cuts it.

use super::common::ModelArgs;
use super::embed::names_file;
use super::embed::output::{Format, Metadata, Whole};
use crate::output_file::{write_unit, Contents, OutputFile};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vitrt_model::text::TextTokenizer;

#[derive(Args, Debug)]
pub struct EmbedTextArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A text to embed (repeatable).
    #[arg(long = "text", value_name = "TEXT")]
    texts: Vec<String>,
    /// More texts, one a line (`-`: standard input); empty lines are texts too.
    #[arg(long, value_name = "FILE")]
    texts_file: Option<PathBuf>,
    /// Scale each embedding to unit length (L2), as zero-shot scores use them.
    #[arg(long)]
    normalize: bool,
    /// Where to write the embeddings; the extension (.safetensors, .npy, .jsonl) gives the
    /// format unless --format does. `-`: standard output (JSON Lines unless --format says).
    #[arg(long, short)]
    output: PathBuf,
    /// safetensors: `embeddings` [N, D] f32 and the texts in its metadata; npy: the [N, D]
    /// array and FILE.texts.txt with one text a line; jsonl: one line per text.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Replace --output (and the .npy's texts file) even if read-only.
    #[arg(long)]
    force: bool,
}

pub fn run(args: EmbedTextArgs) -> Result<ExitCode> {
    let format = Format::of(args.format, &args.output)?;
    let mut texts = args.texts.clone();
    if let Some(path) = &args.texts_file {
        texts.extend(read_lines(path)?);
    }
    if texts.is_empty() {
        bail!("no texts given: use --text TEXT (repeatable) or --texts-file FILE");
    }
    let target = match format {
        Format::Jsonl => OutputFile::check(&args.output, Contents::Text, true, args.force)?,
        Format::Safetensors => OutputFile::check(&args.output, Contents::Binary, true, args.force)?,
        Format::Npy => {
            if args.output.as_os_str() == "-" {
                bail!("--format npy cannot go to `-`: it writes FILE.texts.txt beside it");
            }
            if let Some(text) = texts.iter().find(|t| t.contains('\n')) {
                bail!(
                    "{text:?} holds a line break, which the .npy's texts file (one a line) \
                     cannot hold: use .safetensors or .jsonl"
                );
            }
            OutputFile::check(&args.output, Contents::Binary, false, args.force)?
        }
    };
    let texts_target = match format {
        Format::Npy => Some(OutputFile::check(
            &names_file(&args.output, "texts"),
            Contents::Text,
            false,
            args.force,
        )?),
        _ => None,
    };

    let (mut encoder, dir) = args.model.open_text_only()?;
    let context = encoder.model.context();
    let tokenizer = TextTokenizer::from_checkpoint(&dir, context, encoder.model.config.family)?;
    let tokens = tokenizer.encode(&texts)?;
    let full = tokens.lengths.iter().filter(|&&n| n >= context).count();
    if full > 0 {
        eprintln!(
            "vitrt: {full} of {} texts fill the tower's context of {} tokens and may have been \
             cut to it (as transformers cuts them, keeping the end token)",
            texts.len(),
            context
        );
    }
    let width = encoder.model.embedding_size();
    let rows = encoder.embed(&tokens.ids, texts.len(), args.normalize)?;
    if let Some(i) = rows
        .chunks(width)
        .position(|r| r.iter().any(|v| !v.is_finite()))
    {
        bail!(
            "the text tower gave a non-finite embedding for text {} ({:?}); `vitrt parity` \
             finds the first layer that does",
            i + 1,
            texts[i]
        );
    }

    match format {
        Format::Jsonl => {
            let mut out = std::io::BufWriter::new(target.open_streaming()?);
            for (text, row) in texts.iter().zip(rows.chunks(width)) {
                serde_json::to_writer(
                    &mut out,
                    &serde_json::json!({"text": text, "embedding": row}),
                )
                .context("writing the embeddings")?;
                out.write_all(b"\n").context("writing the embeddings")?;
            }
            let out = out
                .into_inner()
                .map_err(|e| e.into_error())
                .context("writing the embeddings")?;
            out.commit()?;
        }
        Format::Safetensors | Format::Npy => {
            let whole = Whole {
                rows,
                images: texts.clone(),
                dim: width,
            };
            let bytes = match format {
                Format::Safetensors => whole.safetensors_bytes(&Metadata {
                    model: args.model.name(),
                    pool: "text",
                    normalized: args.normalize,
                    rows: "texts",
                })?,
                _ => whole.npy_bytes(),
            };
            // The array and its texts file as a unit, the array renamed last.
            let names = whole.paths_lines();
            match &texts_target {
                Some(texts_target) => {
                    write_unit(&[(texts_target, names.as_bytes()), (&target, &bytes)])?
                }
                None => target.write(&bytes)?,
            }
            if !target.is_stdout() {
                eprintln!(
                    "wrote {} ({} text embeddings of {width})",
                    target.display(),
                    texts.len()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines of `path` (`-`: standard input), without their line ends.
fn read_lines(path: &Path) -> Result<Vec<String>> {
    let read =
        |reader: &mut dyn BufRead| -> std::io::Result<Vec<String>> { reader.lines().collect() };
    let lines = if path.as_os_str() == "-" {
        read(&mut std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening --texts-file {}", path.display()))?;
        read(&mut std::io::BufReader::new(file))
    };
    lines.with_context(|| format!("reading --texts-file {}", path.display()))
}
