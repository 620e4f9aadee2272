//! Per-stage time of one `ImageLoader` (one thread) over a folder of images:
//! `cargo run --release -p vitrt-model --example preprocess_bench -- DIR [SIZE] [ROUNDS]`.
//! Each round loads every image once, for bilinear then bicubic, after one warm-up round.
//! Prints each stage's mean over all rounds and its fastest round (per image), the second
//! being the steadier figure on a machine shared with other work.

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
        // Per round: [read, decode, resize, normalize].
        let mut per_round: Vec<[Duration; 4]> = Vec::new();
        for round in 0..=rounds {
            let mut stages = [Duration::ZERO; 4];
            for file in &files {
                let times = loader.load_file_into(file, &mut hwc).expect("loads");
                let start = Instant::now();
                normalize_into(&hwc, cfg.num_channels(), &table, &mut chw);
                stages[3] += start.elapsed();
                std::hint::black_box(&chw);
                stages[0] += times.read;
                stages[1] += times.decode;
                stages[2] += times.resize;
            }
            if round > 0 {
                per_round.push(stages);
            }
        }
        let n = files.len() as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n;
        let mean = |s: usize| ms(per_round.iter().map(|r| r[s]).sum::<Duration>()) / rounds as f64;
        let best = |s: usize| ms(per_round.iter().map(|r| r[s]).min().unwrap());
        let names = ["read", "decode", "resize", "normalize_into"];
        let line = |f: &dyn Fn(usize) -> f64| {
            let parts: Vec<String> = (0..4)
                .map(|s| format!("{} {:.3}", names[s], f(s)))
                .collect();
            parts.join(", ")
        };
        println!(
            "resample {resample}, {} images x {rounds} rounds, ms per image: mean {}; fastest round {}",
            files.len(),
            line(&mean),
            line(&best)
        );
    }
}
