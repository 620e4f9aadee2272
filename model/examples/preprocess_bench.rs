//! Per-stage time of one `ImageLoader` (one thread) over a folder of images:
//! `cargo run --release -p vitrt-model --example preprocess_bench -- DIR [SIZE] [ROUNDS]`.
//! Each image is loaded ROUNDS times (after one warm-up round) for bilinear and bicubic.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use vitrt_model::preprocess::{
    normalization_table, normalize_into, ImageLimits, ImageLoader, PreprocessConfig,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: preprocess_bench DIR [SIZE] [ROUNDS]"),
    );
    let size: usize = args.next().map_or(224, |s| s.parse().expect("SIZE"));
    let rounds: usize = args.next().map_or(20, |s| s.parse().expect("ROUNDS"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("readable folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| ["jpg", "jpeg", "png", "webp"].contains(&&*e.to_string_lossy()))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no images in {}", dir.display());
    for resample in [2, 3] {
        let cfg = PreprocessConfig::from_json_str(&format!(
            r#"{{"size": {size}, "resample": {resample}}}"#
        ))
        .expect("config");
        let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
        let table = normalization_table(&cfg);
        let mut hwc = vec![0u8; loader.output_bytes()];
        let mut chw = vec![0f32; hwc.len()];
        let (mut read, mut decode, mut resize, mut normalize) = Default::default();
        let mut count = 0u32;
        for round in 0..=rounds {
            for file in &files {
                let times = loader.load_file_into(file, &mut hwc).expect("loads");
                let start = Instant::now();
                normalize_into(&hwc, cfg.num_channels(), &table, &mut chw);
                let normalized = start.elapsed();
                std::hint::black_box(&chw);
                if round > 0 {
                    read += times.read;
                    decode += times.decode;
                    resize += times.resize;
                    normalize += normalized;
                    count += 1;
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / f64::from(count);
        let total = read + decode + resize;
        println!(
            "resample {resample}: read {:.3} decode {:.3} resize {:.3} ms/image \
             (load total {:.3} ms, {:.0} images/s on one thread); normalize_into {:.3} ms \
             ({count} loads of {} images)",
            ms(read),
            ms(decode),
            ms(resize),
            ms(total),
            f64::from(count) / total.as_secs_f64(),
            ms(normalize),
            files.len(),
        );
    }
}
