//! Where `vitrt classify` writes its results: a table per image, one JSON document, JSON Lines
//! or CSV. Table, JSON Lines and CSV stream: each batch's records are written and flushed as
//! the batch completes. A closed standard output (a reader such as `head` that has read
//! enough) is not an error: the run ends quietly.

use clap::ValueEnum;
use serde::Serialize;
use std::io::{self, Write};
use vitrt_model::labels::Prediction;

pub use crate::cli::common::WriteError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table per image.
    Table,
    /// One JSON document when the run ends.
    Json,
    /// One JSON object a line, written as each batch completes.
    Jsonl,
    /// One row per prediction (and per failed image), written as each batch completes.
    Csv,
}

/// One image's outcome.
pub enum Record<'a> {
    Classified {
        image: &'a str,
        predictions: &'a [Prediction],
    },
    Failed {
        image: &'a str,
        error: &'a str,
    },
}

impl From<csv::Error> for WriteError {
    fn from(error: csv::Error) -> Self {
        match error.into_kind() {
            csv::ErrorKind::Io(io) => io.into(),
            other => WriteError::Failed(io::Error::other(format!("{other:?}"))),
        }
    }
}

/// The run's description, written before (table) or around (JSON) the results.
pub struct RunInfo {
    pub model: String,
    pub device: String,
    pub dtype: String,
}

#[derive(Serialize)]
struct JsonPrediction<'a> {
    index: usize,
    label: &'a str,
    probability: f32,
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonRecord<'a> {
    Classified {
        image: &'a str,
        predictions: Vec<JsonPrediction<'a>>,
    },
    Failed {
        image: &'a str,
        error: &'a str,
    },
}

impl<'a> From<&Record<'a>> for JsonRecord<'a> {
    fn from(record: &Record<'a>) -> Self {
        match *record {
            Record::Classified { image, predictions } => JsonRecord::Classified {
                image,
                predictions: predictions
                    .iter()
                    .map(|p| JsonPrediction {
                        index: p.index,
                        label: &p.label,
                        probability: p.probability,
                    })
                    .collect(),
            },
            Record::Failed { image, error } => JsonRecord::Failed { image, error },
        }
    }
}

/// Writes records in one format.
pub struct Sink<W: Write> {
    format: Format,
    target: Target<W>,
    info: RunInfo,
    /// JSON: the records so far, for the document at the end.
    json_records: Vec<serde_json::Value>,
}

enum Target<W: Write> {
    Plain(W),
    Csv(Box<csv::Writer<W>>),
}

impl<W: Write> Sink<W> {
    /// A sink writing to `out`; writes the table's header line or the CSV header at once.
    pub fn new(format: Format, out: W, info: RunInfo) -> Result<Self, WriteError> {
        let target = match format {
            Format::Csv => {
                let mut writer = csv::Writer::from_writer(out);
                writer.write_record(["image", "rank", "index", "label", "probability", "error"])?;
                Target::Csv(Box::new(writer))
            }
            Format::Table => {
                let mut out = out;
                writeln!(
                    out,
                    "model {} on {} ({})",
                    info.model, info.device, info.dtype
                )?;
                Target::Plain(out)
            }
            Format::Json | Format::Jsonl => Target::Plain(out),
        };
        Ok(Sink {
            format,
            target,
            info,
            json_records: Vec::new(),
        })
    }

    pub fn write(&mut self, record: &Record<'_>) -> Result<(), WriteError> {
        match (&mut self.target, self.format) {
            (Target::Csv(writer), _) => match *record {
                Record::Classified { image, predictions } => {
                    for (rank, p) in predictions.iter().enumerate() {
                        writer.write_record([
                            image,
                            &(rank + 1).to_string(),
                            &p.index.to_string(),
                            &p.label,
                            &p.probability.to_string(),
                            "",
                        ])?;
                    }
                }
                Record::Failed { image, error } => {
                    writer.write_record([image, "", "", "", "", error])?
                }
            },
            (Target::Plain(out), Format::Table) => write_table(out, record)?,
            (Target::Plain(out), Format::Jsonl) => {
                serde_json::to_writer(&mut *out, &JsonRecord::from(record))?;
                out.write_all(b"\n")?;
            }
            (Target::Plain(_), _) => self
                .json_records
                .push(serde_json::to_value(JsonRecord::from(record))?),
        }
        Ok(())
    }

    /// Pushes what the batch wrote out to the reader.
    pub fn end_batch(&mut self) -> Result<(), WriteError> {
        match &mut self.target {
            Target::Csv(writer) => writer.flush()?,
            Target::Plain(out) => out.flush()?,
        }
        Ok(())
    }

    /// Writes what is left (the JSON document) and flushes.
    pub fn finish(mut self) -> Result<(), WriteError> {
        if let (Format::Json, Target::Plain(out)) = (self.format, &mut self.target) {
            let document = serde_json::json!({
                "model": self.info.model,
                "device": self.info.device,
                "dtype": self.info.dtype,
                "results": self.json_records,
            });
            serde_json::to_writer_pretty(&mut *out, &document)?;
            out.write_all(b"\n")?;
        }
        self.end_batch()
    }
}

fn write_table(out: &mut impl Write, record: &Record<'_>) -> io::Result<()> {
    match *record {
        Record::Failed { image, error } => {
            writeln!(out, "\n{image}\n  error: {error}")
        }
        Record::Classified { image, predictions } => {
            writeln!(out, "\n{image}")?;
            let width = predictions
                .iter()
                .map(|p| p.label.chars().count())
                .max()
                .unwrap_or(5)
                .max(5);
            // Padded by hand: a label may be longer than the 65,535 characters a format
            // width can be (a hub config's id2label, a labels file's line).
            let padded = |label: &str| {
                let spaces = width - label.chars().count();
                format!("{label}{}", " ".repeat(spaces))
            };
            writeln!(
                out,
                "  {:>4}  {:>6}  {}  {:>11}",
                "rank",
                "class",
                padded("label"),
                "probability"
            )?;
            for (rank, p) in predictions.iter().enumerate() {
                writeln!(
                    out,
                    "  {:>4}  {:>6}  {}  {:>10.2}%",
                    rank + 1,
                    p.index,
                    padded(&p.label),
                    100.0 * p.probability
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_take_labels_longer_than_a_format_width() {
        let long = "x".repeat(70_000);
        let predictions = [
            Prediction {
                index: 3,
                label: long.clone(),
                probability: 0.75,
            },
            Prediction {
                index: 1,
                label: "cat".into(),
                probability: 0.25,
            },
        ];
        let mut out = Vec::new();
        write_table(
            &mut out,
            &Record::Classified {
                image: "a.png",
                predictions: &predictions,
            },
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[3], format!("     1       3  {long}       75.00%"));
        // The short label is padded to the long one's width.
        assert_eq!(lines[4].len(), lines[3].len());
        assert!(
            lines[4].starts_with("     2       1  cat   "),
            "{}",
            &lines[4][..30]
        );
    }
}
