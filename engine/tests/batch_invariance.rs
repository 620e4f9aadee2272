//! Batch invariance on the CPU backend: an image's outputs are the same bytes alone and in
//! batches of several sizes beside other images, through the in-memory batches `vitrt serve`
//! runs, and the same bytes as the file pipeline of `vitrt classify` and `vitrt embed` gives
//! for the same file.

use std::path::{Path, PathBuf};
use vitrt_engine::batched::{self, BatchResults, BatchSetup, ImageOptions};
use vitrt_engine::memory::{ImageDecoder, MemoryBatches};
use vitrt_engine::pipeline::{collect_inputs, Flow};
use vitrt_engine::ModelOptions;
use vitrt_model::{Output, OutputSet, Runner};
use vitrt_runtime::HostTensor;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fixture images, decoded for the model in `dir`.
fn images(decoder: &mut ImageDecoder, files: &[PathBuf]) -> Vec<Vec<u8>> {
    files
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).unwrap();
            decoder.decode(&bytes, &path.display().to_string()).unwrap()
        })
        .collect()
}

/// Runs `batch` and returns the rows of `output` as bytes, one per image.
fn rows(
    runner: &mut Runner,
    batches: &mut MemoryBatches,
    batch: &[&[u8]],
    output: Output,
) -> Vec<Vec<u8>> {
    let pending = batches.submit(runner, batch).unwrap();
    let outputs = runner.finish(pending).unwrap();
    let (width, data) =
        vitrt_engine::results::output_rows(outputs, output.name(), batch.len()).unwrap();
    data.chunks(width)
        .map(|row| row.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect()
}

/// Collects the file pipeline's rows of one output.
struct Collect {
    output: &'static str,
    rows: Vec<Vec<u8>>,
}

impl BatchResults for Collect {
    fn batch(
        &mut self,
        _first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> anyhow::Result<Flow> {
        assert!(failures.is_empty(), "{failures:?}");
        let (width, data) =
            vitrt_engine::results::output_rows(outputs.unwrap(), self.output, count)?;
        self.rows.extend(data.chunks(width).map(|row| {
            row.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
        }));
        Ok(Flow::Continue)
    }
}

fn check_model(model: &str, output: Output) {
    let files: Vec<PathBuf> = [
        "cat.jpg",
        "coffee.png",
        "astronaut.webp",
        "camera_gray.png",
        "coffee_exif6.jpg",
        "astronaut_rgba.png",
        "levels_16.png",
        "cat_palette.png",
    ]
    .iter()
    .map(|name| root().join("tests/fixtures/images").join(name))
    .collect();
    let options = ModelOptions {
        device: Some("cpu".to_string()),
        ..ModelOptions::new(root().join(model).display().to_string())
    };
    let opened = options.open().unwrap();
    let mut runner = opened.runner;
    let pre = batched::preprocessing(&mut runner, &opened.dir, false).unwrap();
    runner.set_outputs(OutputSet::of(&[output]));
    let mut decoder = ImageDecoder::new(&pre, Default::default());
    let decoded = images(&mut decoder, &files);
    let mut batches = MemoryBatches::new(&pre, decoder.image_bytes());

    // Each image alone.
    let alone: Vec<Vec<u8>> = decoded
        .iter()
        .map(|image| rows(&mut runner, &mut batches, &[image], output).remove(0))
        .collect();
    // The images should not all give one row, or the comparison proves nothing.
    assert!(
        alone.iter().any(|row| row != &alone[0]),
        "{model}: every image gave one row"
    );

    // In batches of several sizes, each image at several places beside different others.
    for size in [2, 3, 5, 8] {
        for start in 0..decoded.len() {
            let order: Vec<usize> = (0..size).map(|k| (start + k * 3) % decoded.len()).collect();
            let batch: Vec<&[u8]> = order.iter().map(|&i| decoded[i].as_slice()).collect();
            let got = rows(&mut runner, &mut batches, &batch, output);
            for (row, &i) in got.iter().zip(&order) {
                assert!(
                    row == &alone[i],
                    "{model}: {} in a batch of {size} differs from it alone",
                    files[i].display()
                );
            }
        }
    }

    // The file pipeline (classify's and embed's path), in batches of 3 with 2 workers.
    let inputs = collect_inputs(&files, None).unwrap();
    let image_options = ImageOptions {
        batch_size: Some(3),
        workers: Some(2),
        quiet: true,
        ..ImageOptions::default()
    };
    let setup = BatchSetup::new(&runner, pre, &image_options, files.len()).unwrap();
    let mut collected = Collect {
        output: output.name(),
        rows: Vec::new(),
    };
    batched::run_batches(&mut runner, &inputs, &setup, &mut collected, false).unwrap();
    assert_eq!(collected.rows.len(), files.len());
    for (i, row) in collected.rows.iter().enumerate() {
        assert!(
            row == &alone[i],
            "{model}: {} through the file pipeline differs from it served alone",
            files[i].display()
        );
    }
}

#[test]
fn a_classifiers_logits_do_not_depend_on_the_batch() {
    check_model("examples/digits-vit", Output::Logits);
}

#[test]
fn clip_image_embeddings_do_not_depend_on_the_batch() {
    check_model("tests/fixtures/models/clip-zero-shot", Output::ImageEmbeds);
}
