//! Where `vitrt embed` writes: JSON Lines streamed batch by batch (into a temporary file
//! renamed over the target when the run ends, see `OutputFile::open_streaming`), or
//! safetensors and NPY built whole in memory once the run ends (the caller writes them with
//! `OutputFile`, whole or not at all).

use crate::output_file::Streaming;
use anyhow::Context;
use clap::ValueEnum;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{BufWriter, Write};

pub use crate::cli::common::WriteError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `embeddings` [N, D] f32, and the paths (in row order), model, pool and normalisation
    /// in the metadata.
    Safetensors,
    /// The [N, D] f32 array, and FILE.images.txt with one path a row.
    Npy,
    /// One JSON object a line, per image in input order: its embedding or its error.
    Jsonl,
}

/// Where embeddings go as they come.
pub enum Sink<'a> {
    Lines(Lines<'a>),
    Whole(Whole),
}

impl<'a> Sink<'a> {
    pub fn lines(out: Streaming<'a>) -> Sink<'a> {
        Sink::Lines(Lines {
            out: BufWriter::new(out),
        })
    }

    pub fn whole() -> Sink<'a> {
        Sink::Whole(Whole::default())
    }

    pub fn embedded(&mut self, image: &str, embedding: &[f32]) -> Result<(), WriteError> {
        match self {
            Sink::Lines(lines) => lines.write(&Line::Embedded { image, embedding }),
            Sink::Whole(whole) => {
                whole.dim = embedding.len();
                whole.rows.extend_from_slice(embedding);
                whole.images.push(image.to_string());
                Ok(())
            }
        }
    }

    /// An image that could not be embedded: a line of its own in JSON Lines; no row in the
    /// whole formats (its line on stderr says why).
    pub fn failed(&mut self, image: &str, error: &str) -> Result<(), WriteError> {
        match self {
            Sink::Lines(lines) => lines.write(&Line::Failed { image, error }),
            Sink::Whole(_) => Ok(()),
        }
    }

    /// Pushes what the batch wrote out to the reader.
    pub fn end_batch(&mut self) -> Result<(), WriteError> {
        match self {
            Sink::Lines(lines) => Ok(lines.out.flush()?),
            Sink::Whole(_) => Ok(()),
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Line<'a> {
    Embedded {
        image: &'a str,
        embedding: &'a [f32],
    },
    Failed {
        image: &'a str,
        error: &'a str,
    },
}

/// JSON Lines, written as the batches complete.
pub struct Lines<'a> {
    out: BufWriter<Streaming<'a>>,
}

impl Lines<'_> {
    fn write(&mut self, line: &Line<'_>) -> Result<(), WriteError> {
        serde_json::to_writer(&mut self.out, line)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    /// Flushes the lines and makes them the output (the temporary file renamed over it).
    pub fn finish(self) -> anyhow::Result<()> {
        let out = self
            .out
            .into_inner()
            .map_err(|e| e.into_error())
            .context("writing the embeddings")?;
        out.commit()
    }
}

/// The embeddings of the images that succeeded (or of the texts), in input order.
#[derive(Default)]
pub struct Whole {
    /// [images.len(), dim], row-major.
    pub rows: Vec<f32>,
    /// The rows' names: image paths, or texts.
    pub images: Vec<String>,
    pub dim: usize,
}

/// What the safetensors metadata says besides the rows' names.
pub struct Metadata<'a> {
    pub model: &'a str,
    pub pool: &'a str,
    pub normalized: bool,
    /// The metadata key of the rows' names: `images` (their paths) or `texts`.
    pub rows: &'a str,
}

impl Whole {
    fn row_bytes(&self) -> Vec<u8> {
        self.rows.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// safetensors: `embeddings` [N, D] f32; metadata `images` (a JSON list of the paths, in
    /// row order; `texts` for text embeddings: `metadata.rows`), `model`, `pool` and
    /// `normalized` ("true" or "false").
    pub fn safetensors_bytes(&self, metadata: &Metadata<'_>) -> anyhow::Result<Vec<u8>> {
        let bytes = self.row_bytes();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![self.images.len(), self.dim],
            &bytes,
        )?;
        let info = HashMap::from([
            (
                metadata.rows.to_string(),
                serde_json::to_string(&self.images)?,
            ),
            ("model".to_string(), metadata.model.to_string()),
            ("pool".to_string(), metadata.pool.to_string()),
            ("normalized".to_string(), metadata.normalized.to_string()),
        ]);
        Ok(safetensors::serialize([("embeddings", view)], Some(info))?)
    }

    /// NPY version 1.0: a little-endian f32 [N, D] array in C order, its header padded with
    /// spaces to a multiple of 64 bytes as numpy writes it.
    pub fn npy_bytes(&self) -> Vec<u8> {
        const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";
        let dict = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
            self.images.len(),
            self.dim
        );
        // Magic and version (8), header length (2), the dictionary, its newline.
        let unpadded = MAGIC.len() + 2 + dict.len() + 1;
        let padding = unpadded.div_ceil(64) * 64 - unpadded;
        let header = format!("{dict}{}\n", " ".repeat(padding));
        let mut bytes = Vec::with_capacity(MAGIC.len() + 2 + header.len() + self.rows.len() * 4);
        bytes.extend_from_slice(MAGIC);
        // The dictionary is short: its length always fits in two bytes.
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&self.row_bytes());
        bytes
    }

    /// The NPY's paths file: one path a line, in row order.
    pub fn paths_lines(&self) -> String {
        self.images.iter().map(|p| format!("{p}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_describes_the_array() {
        let whole = Whole {
            rows: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            images: vec!["a.png".into(), "b.png".into()],
            dim: 3,
        };
        let bytes = whole.npy_bytes();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
        assert!(header.ends_with('\n'));
        let data = &bytes[10 + header_len..];
        assert_eq!(data.len(), 6 * 4);
        assert_eq!(f32::from_le_bytes(data[20..24].try_into().unwrap()), 6.0);
    }
}
