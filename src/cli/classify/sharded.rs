//! `vitrt classify --output-dir DIR` and `vitrt zero-shot --output-dir DIR`: the results
//! written shard by shard (see `cli/output_dir.rs`): per output shard a `.parquet` of each
//! input's `key`, `source`, `error`, a webdataset sample's `json` and `txt`, and its top-k
//! `labels` with their `probabilities`, most probable first (empty lists for an input that
//! could not be classified).

use super::Scores;
use crate::cli::output_dir::{
    metadata_parquet, OutputDir, OutputShard, ResultColumn, RowMeta, ShardRows,
};
use anyhow::Result;
use vitrt_engine::batched::BatchResults;
use vitrt_engine::pipeline::datasets::SidecarReader;
use vitrt_engine::pipeline::{Flow, InputList};
use vitrt_engine::results::named_output;
use vitrt_model::labels::Prediction;
use vitrt_runtime::HostTensor;

pub struct ShardedClassifier<'a> {
    out: &'a OutputDir,
    inputs: &'a InputList,
    /// Reads the webdataset samples' `.json` and `.txt` members as their rows are written.
    sidecars: SidecarReader<'a>,
    rows: ShardRows<Vec<Prediction>>,
    scores: Scores<'a>,
    top_k: usize,
    /// Shards written.
    pub written: usize,
}

impl<'a> ShardedClassifier<'a> {
    pub fn new(
        out: &'a OutputDir,
        inputs: &'a InputList,
        shards: Vec<OutputShard>,
        scores: Scores<'a>,
        top_k: usize,
    ) -> Self {
        ShardedClassifier {
            out,
            inputs,
            sidecars: SidecarReader::new(&inputs.shards),
            rows: ShardRows::new(shards),
            scores,
            top_k,
            written: 0,
        }
    }

    /// Inputs that could not be classified.
    pub fn failed(&self) -> usize {
        self.rows.failed
    }

    fn push(&mut self, meta: RowMeta, predictions: Vec<Prediction>) -> Result<()> {
        let Some((shard, meta, rows)) = self.rows.push(meta, predictions) else {
            return Ok(());
        };
        let labels = rows
            .iter()
            .map(|p| p.iter().map(|p| p.label.clone()).collect())
            .collect();
        let probabilities = rows
            .iter()
            .map(|p| p.iter().map(|p| p.probability).collect())
            .collect();
        let parquet = metadata_parquet(
            &meta,
            &[
                ("labels", ResultColumn::Texts(labels)),
                ("probabilities", ResultColumn::Floats(probabilities)),
            ],
        )?;
        self.out.write_shard(&shard, &[parquet])?;
        self.written += 1;
        Ok(())
    }
}

impl BatchResults for ShardedClassifier<'_> {
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
        let wanted = self.scores.output();
        let logits = outputs.map(|o| named_output(o, wanted)).transpose()?;
        for k in 0..count {
            let index = first + k;
            let mut meta = RowMeta::of(self.inputs, index, &mut self.sidecars);
            if let Some((_, why)) = failures.iter().find(|(i, _)| *i == index) {
                meta.error = Some(why.clone());
                self.push(meta, Vec::new())?;
                continue;
            }
            let Some(logits) = &logits else {
                unreachable!("a batch with images to classify is submitted")
            };
            let classes = *logits.shape.last().unwrap_or(&1);
            let row = &logits.data[k * classes..][..classes];
            if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
                let why = format!(
                    "{}: the model gave a non-finite score ({bad})",
                    self.inputs.name(index)
                );
                eprintln!("vitrt: {why}");
                meta.error = Some(why);
                self.push(meta, Vec::new())?;
                continue;
            }
            let predictions = self.scores.top_k(row, self.top_k);
            self.push(meta, predictions)?;
        }
        Ok(Flow::Continue)
    }
}
