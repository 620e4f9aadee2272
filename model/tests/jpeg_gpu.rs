//! The image kernels on the GPU against their CPU twins: the whole generated JPEG corpus
//! (tests/common/jpeg_corpus.rs) in one batch through `jpeg::gpu::decode` and
//! `resample::gpu::resample`, which must give the twins' bytes (and so the host decoder's,
//! which model/tests/jpeg_coefficients.rs checks in CI); and blocks at the exactness guard's
//! limit, where the kernels' 32-bit sums are closest to overflowing. Run on the GPU machine
//! (scripts/gpu-check.sh).

mod common;

use common::jpeg_corpus::{config, corpus, Xorshift};
use vitrt_kernels::cuda::{DeviceBuffer, Gpu};
use vitrt_kernels::jpeg::gpu::JpegInputs;
use vitrt_kernels::jpeg::{cpu as jpeg_twin, gpu as jpeg_gpu};
use vitrt_kernels::jpeg::{JpegBatch, JpegColour, JpegComponent, JpegData, JpegImage, Upsample};
use vitrt_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_kernels::resample::{cpu as resample_twin, gpu as resample_gpu};
use vitrt_model::preprocess::device_batch::{jpeg_batch, resample_batch, resample_plan};
use vitrt_model::preprocess::jpeg_coefficients::read_jpeg_coefficients;
use vitrt_model::preprocess::ImageLimits;

fn buffer(gpu: &Gpu, bytes: usize) -> DeviceBuffer {
    gpu.alloc(bytes.max(1)).unwrap()
}

fn download(gpu: &Gpu, buffer: &DeviceBuffer, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    gpu.download(buffer, 0, &mut out).unwrap();
    out
}

/// The GPU's planes and upright RGB for `batch`.
fn decode_on_gpu(
    gpu: &Gpu,
    batch: &JpegBatch,
    data: &JpegData,
) -> (Vec<u8>, Vec<u8>, DeviceBuffer) {
    let (layout, staged) = JpegInputs::pack(batch, data);
    let inputs = buffer(gpu, staged.len());
    gpu.upload(&inputs, 0, &staged).unwrap();
    let planes = buffer(gpu, batch.planes_len());
    let rgb = buffer(gpu, batch.rgb_len());
    jpeg_gpu::decode(gpu, batch, (&inputs, &inputs), &layout, &planes, &rgb).unwrap();
    (
        download(gpu, &planes, batch.planes_len()),
        download(gpu, &rgb, batch.rgb_len()),
        rgb,
    )
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    (0..a.len().min(b.len())).find(|&i| a[i] != b[i])
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_corpus_decodes_resizes_and_crops_on_the_gpu_as_the_twins_do() {
    let gpu = Gpu::new(0).unwrap();
    let limits = ImageLimits::default();
    let files = corpus();
    let images: Vec<_> = files
        .iter()
        .map(|f| read_jpeg_coefficients(&f.bytes, &limits).unwrap())
        .collect();
    let (batch, data) = jpeg_batch(&images.iter().collect::<Vec<_>>());
    let (planes, rgb, rgb_on_gpu) = decode_on_gpu(&gpu, &batch, &data);
    let mut twin_planes = vec![0; batch.planes_len()];
    let mut twin_rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(&batch, &data, &mut twin_planes);
    jpeg_twin::colour(&batch, &twin_planes, &mut twin_rgb);
    assert_eq!(first_difference(&planes, &twin_planes), None, "IDCT planes");
    for (image, file) in batch.images.iter().zip(&files) {
        let range = image.rgb_offset..image.rgb_offset + image.rgb_len();
        assert_eq!(
            first_difference(&rgb[range.clone()], &twin_rgb[range]),
            None,
            "{}",
            file.what
        );
    }
    for json in [
        r#"{"image_processor_type": "ViTImageProcessor", "size": {"height": 24, "width": 24}}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 21},
            "crop_size": {"height": 19, "width": 19}, "resample": 3}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 40},
            "crop_size": {"height": 48, "width": 44}, "resample": 1}"#,
    ] {
        let cfg = config(json);
        let (h, w) = cfg.output_size();
        let plans = batch
            .images
            .iter()
            .map(|i| resample_plan(&cfg, limits.max_pixels, i.upright_size()).unwrap())
            .collect();
        let offsets: Vec<usize> = batch.images.iter().map(|i| i.rgb_offset).collect();
        let resample = resample_batch(plans, &offsets, h * w * 3);
        let layout = DeviceResampleBatch::layout(&resample, 0);
        let mut staged = vec![0; layout.bytes];
        layout.write(&resample, &mut staged);
        let inputs = buffer(&gpu, staged.len());
        gpu.upload(&inputs, 0, &staged).unwrap();
        let mid = buffer(&gpu, resample.intermediate_len());
        let dst = buffer(&gpu, resample.output_len());
        resample_gpu::resample(&gpu, &resample, &inputs, &layout, (&rgb_on_gpu, &mid, &dst))
            .unwrap();
        let out = download(&gpu, &dst, resample.output_len());
        let mut twin_mid = vec![0; resample.intermediate_len()];
        let mut twin_out = vec![0; resample.output_len()];
        resample_twin::resample(&resample, &twin_rgb, &mut twin_mid, &mut twin_out);
        for (n, file) in files.iter().enumerate() {
            let range = n * h * w * 3..(n + 1) * h * w * 3;
            assert_eq!(
                first_difference(&out[range.clone()], &twin_out[range]),
                None,
                "{} resized by {json}",
                file.what
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn blocks_at_the_guards_limit_decode_on_the_gpu_as_the_twins_do() {
    let gpu = Gpu::new(0).unwrap();
    let mut rng = Xorshift(0x1234_5678_9abc_def1);
    let mut batch = JpegBatch::default();
    let mut data = JpegData::default();
    // Every kind of upsampling, every orientation; coefficients scaled up to the guard's
    // limit with random signs, and multipliers up to 255.
    let samplings = [
        (Upsample::Full, (1, 1)),
        (Upsample::FancyH2V1, (2, 1)),
        (Upsample::FancyH1V2, (1, 2)),
        (Upsample::FancyH2V2, (2, 2)),
        (Upsample::Replicate { h: 4, v: 1 }, (4, 1)),
        (Upsample::Replicate { h: 2, v: 2 }, (2, 2)),
    ];
    let mut plane_at = 0;
    let mut rgb_at = 0;
    for (n, &(chroma, (h, v))) in samplings.iter().cycle().take(48).enumerate() {
        let (width, height) = (8 * 4 + n as u32 % 13, 8 * 3 + n as u32 % 7);
        let mut indices = Vec::new();
        for c in 0..3 {
            let (upsample, (fh, fv)) = if c == 0 {
                (Upsample::Full, (1, 1))
            } else {
                (chroma, (h, v))
            };
            let downsampled_width = width.div_ceil(fh);
            let downsampled_height = height.div_ceil(fv);
            let component = JpegComponent {
                coef_offset: data.coefs.len(),
                plane_offset: plane_at,
                blocks_wide: downsampled_width.div_ceil(8),
                blocks_high: downsampled_height.div_ceil(8),
                quant_offset: data.quant.len(),
                downsampled_width,
                downsampled_height,
                upsample,
            };
            let quant: Vec<i32> = (0..64).map(|_| 1 + (rng.next() % 255) as i32).collect();
            for _ in 0..component.blocks() {
                let mut block = [0i16; 64];
                for _ in 0..1 + rng.next() % 12 {
                    block[(rng.next() % 64) as usize] = (rng.next() % 400) as i16 - 200;
                }
                // Scaled up to just inside the guard's limit.
                let sum = jpeg_twin::guard_sum(&block, &quant);
                if sum > 0 {
                    let scale = jpeg_twin::GUARD_LIMIT as f64 / sum as f64;
                    for value in &mut block {
                        *value = (f64::from(*value) * scale).trunc() as i16;
                    }
                }
                assert!(jpeg_twin::block_is_exact(&block, &quant));
                data.coefs.extend_from_slice(&block);
            }
            plane_at += component.plane_len();
            data.quant.extend_from_slice(&quant);
            indices.push(batch.components.len());
            batch.components.push(component);
        }
        let image = JpegImage {
            components: indices,
            colour: if n % 5 == 4 {
                JpegColour::Rgb
            } else {
                JpegColour::YCbCr
            },
            width,
            height,
            orientation: 1 + (n % 8) as u8,
            rgb_offset: rgb_at,
        };
        rgb_at += image.rgb_len();
        batch.images.push(image);
    }
    batch.validate(data.coefs.len(), data.quant.len()).unwrap();
    let (planes, rgb, _) = decode_on_gpu(&gpu, &batch, &data);
    let mut twin_planes = vec![0; batch.planes_len()];
    let mut twin_rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(&batch, &data, &mut twin_planes);
    jpeg_twin::colour(&batch, &twin_planes, &mut twin_rgb);
    assert_eq!(first_difference(&planes, &twin_planes), None);
    assert_eq!(first_difference(&rgb, &twin_rgb), None);
}
