//! `vitrt embed --output-dir DIR`: the embeddings written shard by shard (see
//! `cli/output_dir.rs`): per output shard a `.npy` of [n, D] f32, one row per input in order
//! (zeros for an input that could not be embedded), and a `.parquet` of each row's `key`,
//! `source`, `error`, and a webdataset sample's `json` and `txt` members.

use super::output::Whole;
use crate::cli::output_dir::{
    metadata_parquet, FullShard, OutputDir, OutputShard, RowMeta, ShardRows,
};
use anyhow::Result;
use vitrt_engine::batched::BatchResults;
use vitrt_engine::pipeline::datasets::SidecarReader;
use vitrt_engine::pipeline::{Flow, InputList};
use vitrt_engine::results::normalize;
use vitrt_model::Output;
use vitrt_runtime::HostTensor;

/// Collects each output shard's rows and writes the shard once its last row is in.
pub struct ShardedEmbedder<'a> {
    out: &'a OutputDir,
    /// The inputs being run: the shards to do, one after the other.
    inputs: &'a InputList,
    /// Reads the webdataset samples' `.json` and `.txt` members as their rows are written.
    sidecars: SidecarReader<'a>,
    rows: ShardRows<Option<Vec<f32>>>,
    output: Output,
    normalize: bool,
    /// The embeddings' width, once a batch gave one.
    dim: Option<usize>,
    /// Shards complete before any embedding told the width.
    waiting: Vec<FullShard<Option<Vec<f32>>>>,
    /// Shards written.
    pub written: usize,
}

impl<'a> ShardedEmbedder<'a> {
    pub fn new(
        out: &'a OutputDir,
        inputs: &'a InputList,
        shards: Vec<OutputShard>,
        output: Output,
        normalize: bool,
    ) -> Self {
        ShardedEmbedder {
            out,
            inputs,
            sidecars: SidecarReader::new(&inputs.shards),
            rows: ShardRows::new(shards),
            output,
            normalize,
            dim: None,
            waiting: Vec::new(),
            written: 0,
        }
    }

    /// Inputs that could not be embedded.
    pub fn failed(&self) -> usize {
        self.rows.failed
    }

    fn push(&mut self, meta: RowMeta, row: Option<Vec<f32>>) -> Result<()> {
        if let Some(full) = self.rows.push(meta, row) {
            self.waiting.push(full);
            if let Some(dim) = self.dim {
                self.write_waiting(dim)?;
            }
        }
        Ok(())
    }

    /// Writes the shards waiting for the width.
    fn write_waiting(&mut self, dim: usize) -> Result<()> {
        for (shard, meta, rows) in std::mem::take(&mut self.waiting) {
            let whole = Whole {
                rows: rows
                    .iter()
                    .flat_map(|r| r.clone().unwrap_or_else(|| vec![0.0; dim]))
                    .collect(),
                images: meta.iter().map(|m| m.key.clone()).collect(),
                dim,
            };
            let parquet = metadata_parquet(&meta, &[])?;
            self.out
                .write_shard(&shard, &[whole.npy_bytes(), parquet])?;
            self.written += 1;
        }
        Ok(())
    }

    /// Writes what is left (shards none of whose inputs could be embedded, when no input of
    /// the run could: then their width is 0).
    pub fn finish(&mut self) -> Result<()> {
        let dim = self.dim.unwrap_or(0);
        self.write_waiting(dim)
    }
}

impl BatchResults for ShardedEmbedder<'_> {
    fn progress_note(&self) -> Option<String> {
        Some(self.rows.progress_note(self.out.shards.len()))
    }

    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> Result<Flow> {
        let (pooled, dim) = super::pooled_rows(outputs, self.output, count)?;
        if pooled.is_some() && self.dim.is_none() {
            self.dim = Some(dim);
        }
        for k in 0..count {
            let index = first + k;
            let mut meta = RowMeta::of(self.inputs, index, &mut self.sidecars);
            if let Some((_, why)) = failures.iter().find(|(i, _)| *i == index) {
                meta.error = Some(why.clone());
                self.push(meta, None)?;
                continue;
            }
            let Some(pooled) = &pooled else {
                unreachable!("a batch with images to embed is submitted")
            };
            let mut row = pooled.data[k * dim..][..dim].to_vec();
            if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
                let why = format!(
                    "{}: the model gave a non-finite value ({bad})",
                    self.inputs.name(index)
                );
                eprintln!("vitrt: {why}");
                meta.error = Some(why);
                self.push(meta, None)?;
                continue;
            }
            if self.normalize {
                normalize(&mut row);
            }
            self.push(meta, Some(row))?;
        }
        Ok(Flow::Continue)
    }
}
