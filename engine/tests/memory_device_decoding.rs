//! Images served from memory with the device's decoding (`vitrt serve` on a GPU): JPEGs made
//! ready by `ImageDecoder::prepare` on a request's thread, gathered by
//! `MemoryBatches::submit_prepared` and decoded in the batch. The CPU backend runs the device
//! kernels' twins, so here the rows must be the bytes host decoding gives, and a damaged scan
//! must mark its batch.

use std::path::{Path, PathBuf};
use vitrt_engine::batched;
use vitrt_engine::memory::{ImageDecoder, MemoryBatches, PreparedImage};
use vitrt_engine::ModelOptions;
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::PreprocessConfig;
use vitrt_model::{Output, OutputSet, Runner};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(root().join("tests/fixtures/images").join(name)).unwrap()
}

fn open(model: &str, output: Output) -> (Runner, PreprocessConfig) {
    let options = ModelOptions {
        device: Some("cpu".to_string()),
        ..ModelOptions::new(root().join(model).display().to_string())
    };
    let opened = options.open().unwrap();
    let mut runner = opened.runner;
    let pre = batched::preprocessing(&mut runner, &opened.dir, false).unwrap();
    runner.set_outputs(OutputSet::of(&[output]));
    (runner, pre)
}

/// The batch's rows as bytes, and whether the device marked an image.
fn run(
    runner: &mut Runner,
    batches: &mut MemoryBatches,
    images: &[&PreparedImage],
    output: Output,
) -> (Vec<Vec<u8>>, bool) {
    let pending = batches.submit_prepared(runner, images).unwrap();
    let (outputs, marked) = MemoryBatches::finish(runner, pending).unwrap();
    let (width, data) =
        vitrt_engine::results::output_rows(outputs, output.name(), images.len()).unwrap();
    let rows = data
        .chunks(width)
        .map(|row| row.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    (rows, marked)
}

/// `jpeg` with 32 bytes of its entropy-coded scan, from its middle, replaced by stuffed 0xFF
/// bytes: 256 one bits, a code no Huffman table holds.
fn damaged_scan(jpeg: &[u8]) -> Vec<u8> {
    let sos = jpeg
        .windows(2)
        .position(|w| w == [0xFF, 0xDA])
        .expect("a scan");
    let header = u16::from_be_bytes([jpeg[sos + 2], jpeg[sos + 3]]) as usize;
    let start = sos + 2 + header;
    let end = jpeg.len() - 2; // EOI
    let middle = start + (end - start) / 2;
    let mut damaged = jpeg.to_vec();
    for pair in damaged[middle..middle + 64].chunks_exact_mut(2) {
        pair.copy_from_slice(&[0xFF, 0x00]);
    }
    damaged
}

#[test]
fn jpegs_decoded_in_the_batch_give_the_rows_host_decoding_gives() {
    let output = Output::Logits;
    let (mut runner, pre) = open("examples/digits-vit", output);
    let limits = Default::default();
    let mut host = ImageDecoder::new(&pre, limits);
    let mut device = ImageDecoder::for_device(&pre, limits, EntropyOn::Device);
    let mut batches = MemoryBatches::new(&pre, host.image_bytes());

    let names = [
        "cat.jpg",
        "coffee.png",
        "coffee_exif6.jpg",
        "astronaut.webp",
    ];
    let prepared: Vec<PreparedImage> = names
        .iter()
        .map(|name| device.prepare(fixture(name), name).unwrap())
        .collect();
    let on_device: Vec<bool> = prepared.iter().map(PreparedImage::on_device).collect();
    assert_eq!(on_device, [true, false, true, false], "{names:?}");
    let decoded: Vec<PreparedImage> = names
        .iter()
        .map(|name| PreparedImage::Pixels(host.decode(&fixture(name), name).unwrap()))
        .collect();

    let (want, marked) = run(
        &mut runner,
        &mut batches,
        &decoded.iter().collect::<Vec<_>>(),
        output,
    );
    assert!(!marked, "host pixels are never marked");
    assert!(
        want.iter().any(|row| row != &want[0]),
        "every image gave one row"
    );
    let (got, marked) = run(
        &mut runner,
        &mut batches,
        &prepared.iter().collect::<Vec<_>>(),
        output,
    );
    assert!(!marked, "the fixtures' scans decode exactly");
    for ((name, got), want) in names.iter().zip(&got).zip(&want) {
        assert!(
            got == want,
            "{name}: decoded in the batch differs from host decoding"
        );
    }
    // Another order and a repeated image: each region lands at its own place in the arena.
    let order = [2, 0, 2, 1, 0];
    let images: Vec<&PreparedImage> = order.iter().map(|&i| &prepared[i]).collect();
    let (got, _) = run(&mut runner, &mut batches, &images, output);
    for (row, &i) in got.iter().zip(&order) {
        assert!(row == &want[i], "{} at another place differs", names[i]);
    }
    // And what a marked batch is redone from: the host's pixels of the same file.
    for (image, want) in prepared.iter().zip(&decoded) {
        let PreparedImage::Pixels(want) = want else {
            unreachable!()
        };
        assert!(&image.pixels_on_host(&mut host).unwrap() == want);
    }
}

#[test]
fn a_damaged_scan_marks_its_batch() {
    let output = Output::Logits;
    let (mut runner, pre) = open("examples/digits-vit", output);
    let limits = Default::default();
    let mut device = ImageDecoder::for_device(&pre, limits, EntropyOn::Device);
    let mut batches = MemoryBatches::new(&pre, device.image_bytes());
    let good = device.prepare(fixture("cat.jpg"), "input 0").unwrap();
    let damaged = device
        .prepare(damaged_scan(&fixture("cat.jpg")), "input 1")
        .unwrap();
    // The host reads only markers and tables: the damage is found by decoding.
    assert!(damaged.on_device());
    let (_, marked) = run(&mut runner, &mut batches, &[&good], output);
    assert!(!marked);
    let (_, marked) = run(&mut runner, &mut batches, &[&good, &damaged], output);
    assert!(
        marked,
        "the device did not mark a scan with a code no table holds"
    );
}

#[test]
fn a_host_decoder_prepares_pixels() {
    let (_, pre) = open("examples/digits-vit", Output::Logits);
    let mut host = ImageDecoder::new(&pre, Default::default());
    let prepared = host.prepare(fixture("cat.jpg"), "cat.jpg").unwrap();
    assert!(!prepared.on_device());
    // A file past the size limit is refused before anything is read, on either decoder.
    let limits = vitrt_model::preprocess::ImageLimits {
        max_file_bytes: 1000,
        ..Default::default()
    };
    for mut decoder in [
        ImageDecoder::new(&pre, limits),
        ImageDecoder::for_device(&pre, limits, EntropyOn::Device),
    ] {
        let error = decoder
            .prepare(fixture("cat.jpg"), "input 3")
            .err()
            .expect("refused");
        let message = error.to_string();
        assert!(
            message.contains("input 3") && message.contains("limit"),
            "{message}"
        );
    }
}
