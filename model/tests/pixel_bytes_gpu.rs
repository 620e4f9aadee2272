//! The overlapped 8-bit input path on the GPU (`Runner::submit_bytes` / `finish`): batches
//! whose copies overlap the previous forward pass must give exactly the bits of the plain
//! path (host expansion through the same table, `Runner::run`), in f32 and f16, on one- and
//! three-channel models, with batch sizes that change under the staging buffers. Run on the
//! GPU machine (scripts/gpu/gpu-check.sh).

mod common;

use common::{bits, fixture};
use vitrt_kernels::pixels;
use vitrt_model::preprocess::PixelExpansion;
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::backend::cuda::CudaBackend;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::DType;

fn runner(model: &str, dtype: DType) -> Runner {
    let model = VisionModel::load(&fixture(model)).unwrap();
    let backend = CudaBackend::new(0, dtype).unwrap();
    Runner::new(model, Box::new(backend), Fusion::ALL)
}

/// Pseudo-random bytes, different for every seed.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(7);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

/// A table like a processor's: (v / 255 - mean) / std per channel, but with channel-specific
/// values so a channel mix-up shows.
fn table(channels: usize) -> Vec<f32> {
    (0..channels)
        .flat_map(|c| {
            let (mean, std) = (0.4 + 0.05 * c as f32, 0.2 + 0.03 * c as f32);
            (0..256).map(move |v| ((v as f64 / 255.0) as f32 - mean) / std)
        })
        .collect()
}

fn host_pixels(pixels: &[u8], channels: usize, plane: usize, table: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; pixels.len()];
    pixels::cpu::expand_pixels(pixels, channels, plane, table, &mut out);
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn overlapped_byte_batches_match_the_plain_path_bitwise() {
    for (model, dtype) in [
        ("tiny-gelu", DType::F16),
        ("tiny-gelu", DType::F32),
        ("headdim80-silu-1ch", DType::F16),
    ] {
        let mut overlapped = runner(model, dtype);
        let mut plain = runner(model, dtype);
        let [_, channels, height, width] = overlapped.input_shape(1);
        let image = channels * height * width;
        let table = table(channels);
        // Full batches of 6, then 2, 6, 1 (the arena and upload buffers change size).
        let schedule = [6, 6, 6, 2, 6, 1, 6];
        let inputs: Vec<Vec<u8>> = schedule
            .iter()
            .enumerate()
            .map(|(k, &batch)| bytes(batch * image, k as u64))
            .collect();
        let mut staging = overlapped.alloc_staging(6 * image).unwrap();
        let mut pending = None;
        let mut results = Vec::new();
        for (k, (&batch, input)) in schedule.iter().zip(&inputs).enumerate() {
            staging.as_mut_slice()[..input.len()].copy_from_slice(input);
            let submitted = overlapped
                .submit_bytes(
                    &staging.as_slice()[..input.len()],
                    batch,
                    &PixelExpansion::Table(table.clone()),
                )
                .unwrap();
            // Overwrite the staging at once: the submission must have copied it already.
            staging.as_mut_slice().fill(0xA5);
            if let Some((previous, p)) = pending.replace((k, submitted)) {
                results.push((previous, overlapped.finish(p).unwrap()));
            }
        }
        let (last, p) = pending.take().unwrap();
        results.push((last, overlapped.finish(p).unwrap()));
        for (k, ours) in results {
            let batch = schedule[k];
            let reference = plain
                .run(
                    &host_pixels(&inputs[k], channels, height * width, &table),
                    batch,
                    false,
                )
                .unwrap();
            assert_eq!(
                bits(&ours),
                bits(&reference),
                "{model} {dtype} batch {k} ({batch} images): the byte path differs"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gpu_expansion_is_the_host_one_bitwise() {
    use vitrt_kernels::cuda::Gpu;
    use vitrt_kernels::PixelBatch;
    let gpu = Gpu::new(0).unwrap();
    for (channels, height, width, batch) in [(3, 224, 224, 5), (1, 28, 28, 3), (3, 7, 5, 2)] {
        let shape = PixelBatch {
            batch,
            height,
            width,
            channels,
        };
        let src = bytes(shape.len(), (height * width) as u64);
        let table = table(channels);
        let want = host_pixels(&src, channels, height * width, &table);
        let src_buffer = gpu.alloc(src.len()).unwrap();
        gpu.upload(&src_buffer, 0, &src).unwrap();
        let table_buffer = gpu.alloc(table.len() * 4).unwrap();
        gpu.upload(&table_buffer, 0, &DType::F32.encode(&table))
            .unwrap();
        let out = gpu.alloc(want.len() * 4).unwrap();
        pixels::gpu::expand_pixels(
            &gpu,
            &src_buffer,
            shape,
            table_buffer.view(0, table.len(), DType::F32).unwrap(),
            out.view(0, want.len(), DType::F32).unwrap(),
        )
        .unwrap();
        let mut got = vec![0u8; want.len() * 4];
        gpu.download(&out, 0, &mut got).unwrap();
        let got = DType::F32.decode(&got);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{channels}x{height}x{width} x{batch}: the GPU expansion differs"
        );
    }
}
