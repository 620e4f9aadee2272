//! The image kernels on the GPU against their CPU twins: the generated JPEG corpora
//! (tests/common/jpeg_corpus.rs), baseline files as scans and progressive ones as
//! coefficients, with corrupted scans among them, in one batch through
//! `jpeg_scan::gpu::decode_scans`, `jpeg::gpu::decode` and `resample::gpu::resample`, which
//! must give the twins' coefficients, status words and bytes (and so the host decoder's,
//! which model/tests/jpeg_coefficients.rs checks in CI); and blocks at the exactness guard's
//! limit, where the kernels' 32-bit sums are closest to overflowing, and past it. Run on the
//! GPU machine (scripts/gpu/gpu-check.sh).

mod common;

use common::jpeg_corpus::{config, corpus, restart_corpus, Xorshift};
use vitrt_kernels::cuda::{DeviceBuffer, Gpu};
use vitrt_kernels::jpeg::batch::STATUS_GUARD;
use vitrt_kernels::jpeg::gpu::JpegInputs;
use vitrt_kernels::jpeg::{cpu as jpeg_twin, gpu as jpeg_gpu};
use vitrt_kernels::jpeg::{JpegBatch, JpegColour, JpegComponent, JpegData, JpegImage, Upsample};
use vitrt_kernels::jpeg_scan::batch::CHUNK_STATE_BYTES;
use vitrt_kernels::jpeg_scan::{gpu as scan_gpu, ScanBatch};
use vitrt_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_kernels::resample::{cpu as resample_twin, gpu as resample_gpu};
use vitrt_model::preprocess::device_batch::{jpeg_batch, resample_batch, resample_plan};
use vitrt_model::preprocess::jpeg_coefficients::{read_jpeg, EntropyOn, ReadJpeg};
use vitrt_model::preprocess::ImageLimits;

fn buffer(gpu: &Gpu, bytes: usize) -> DeviceBuffer {
    gpu.alloc(bytes.max(1)).unwrap()
}

fn download(gpu: &Gpu, buffer: &DeviceBuffer, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    gpu.download(buffer, 0, &mut out).unwrap();
    out
}

/// What the GPU made of a batch: coefficients (the data buffer after the upload), status
/// words, planes and upright RGB (also left on the device).
struct OnGpu {
    coefs: Vec<i16>,
    status: Vec<u32>,
    planes: Vec<u8>,
    rgb: Vec<u8>,
    rgb_buffer: DeviceBuffer,
}

/// Runs the entropy decoder (for `scans`) and the JPEG kernels on `data` (the upload, then
/// `extra` bytes of coefficient space, coefficients counting from byte 0).
fn decode_on_gpu(
    gpu: &Gpu,
    jpeg: &JpegBatch,
    scans: &ScanBatch,
    data: &[u8],
    extra: usize,
) -> OnGpu {
    let mut tables = Vec::new();
    let (mut at, end) = JpegInputs::write_tables(jpeg, &mut tables, 0);
    let (scan_at, _) = scans.write_tables(&mut tables, end);
    let tables_buffer = buffer(gpu, tables.len());
    gpu.upload(&tables_buffer, 0, &tables).unwrap();
    let data_buffer = buffer(gpu, data.len() + extra);
    gpu.upload(&data_buffer, 0, data).unwrap();
    let states = buffer(gpu, scan_at.chunks * CHUNK_STATE_BYTES);
    let planes = buffer(gpu, jpeg.planes_len());
    let rgb = buffer(gpu, jpeg.rgb_len());
    at.coefs_at = 0;
    at.quant_at = 0;
    scan_gpu::decode_scans(
        gpu,
        scans,
        jpeg,
        (&tables_buffer, &data_buffer, &states),
        &scan_at,
        &at,
    )
    .unwrap();
    jpeg_gpu::decode(
        gpu,
        jpeg,
        (&tables_buffer, &data_buffer),
        &at,
        &planes,
        &rgb,
    )
    .unwrap();
    let bytes = download(gpu, &data_buffer, data.len() + extra);
    let status = download(gpu, &tables_buffer, tables.len())[at.status_at..]
        [..jpeg.images.len() * 4]
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    OnGpu {
        coefs: JpegData::from_le_bytes(&bytes).coefs,
        status,
        planes: download(gpu, &planes, jpeg.planes_len()),
        rgb: download(gpu, &rgb, jpeg.rgb_len()),
        rgb_buffer: rgb,
    }
}

fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    (0..a.len().min(b.len())).find(|&i| a[i] != b[i])
}

/// The corpora read for the device (baseline files as scans), and corrupted copies of some
/// baseline files: (what, read).
fn device_reads() -> Vec<(String, ReadJpeg)> {
    let limits = ImageLimits::default();
    let mut rng = Xorshift(0xfeed_beef);
    let mut reads = Vec::new();
    for (n, file) in corpus().into_iter().chain(restart_corpus()).enumerate() {
        let read = read_jpeg(&file.bytes, &limits, EntropyOn::Device).unwrap();
        if read.image.scan.is_some() && n % 5 == 0 && file.bytes.len() > 600 {
            let mut bytes = file.bytes.clone();
            let at = bytes.len() / 2 + (rng.next() as usize) % (bytes.len() / 3);
            bytes[at] ^= 1 << (rng.next() % 8);
            if let Ok(corrupt) = read_jpeg(&bytes, &limits, EntropyOn::Device) {
                reads.push((format!("{} with byte {at} corrupted", file.what), corrupt));
            }
        }
        reads.push((file.what, read));
    }
    reads
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_corpus_decodes_resizes_and_crops_on_the_gpu_as_the_twins_do() {
    let gpu = Gpu::new(0).unwrap();
    let limits = ImageLimits::default();
    let reads = device_reads();
    let host = jpeg_batch(&reads.iter().map(|(_, r)| r).collect::<Vec<_>>());
    assert!(
        host.scans.images.len() > 300,
        "{} scans",
        host.scans.images.len()
    );
    let batch = &host.jpeg;
    let on_gpu = decode_on_gpu(
        &gpu,
        batch,
        &host.scans,
        &host.data,
        host.decoded_coefficient_bytes,
    );
    let (data, mut twin_status) = host.decoded();
    let mut twin_planes = vec![0; batch.planes_len()];
    let mut twin_rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(batch, &data, &mut twin_planes, &mut twin_status);
    jpeg_twin::colour(batch, &twin_planes, &mut twin_rgb);
    assert_eq!(on_gpu.status, twin_status, "status words");
    let marked = twin_status.iter().filter(|&&s| s != 0).count();
    assert!(marked > 0, "no corrupted scan was marked");
    for (n, (image, (what, _))) in batch.images.iter().zip(&reads).enumerate() {
        if twin_status[n] != 0 {
            continue;
        }
        for &c in &image.components {
            let c = &batch.components[c];
            let range = c.coef_offset..c.coef_offset + c.blocks() * 64;
            assert_eq!(
                first_difference(&on_gpu.coefs[range.clone()], &data.coefs[range]),
                None,
                "{what}: coefficients"
            );
            let range = c.plane_offset..c.plane_offset + c.plane_len();
            assert_eq!(
                first_difference(&on_gpu.planes[range.clone()], &twin_planes[range]),
                None,
                "{what}: IDCT planes"
            );
        }
        let range = image.rgb_offset..image.rgb_offset + image.rgb_len();
        assert_eq!(
            first_difference(&on_gpu.rgb[range.clone()], &twin_rgb[range]),
            None,
            "{what}"
        );
    }
    eprintln!(
        "{} images, {} scans, {marked} marked for the host",
        batch.images.len(),
        host.scans.images.len()
    );
    let rgb = on_gpu.rgb;
    let _ = &rgb;
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
        resample_gpu::resample(
            &gpu,
            &resample,
            &inputs,
            &layout,
            (&on_gpu.rgb_buffer, &mid, &dst),
        )
        .unwrap();
        let out = download(&gpu, &dst, resample.output_len());
        let mut twin_mid = vec![0; resample.intermediate_len()];
        let mut twin_out = vec![0; resample.output_len()];
        resample_twin::resample(&resample, &twin_rgb, &mut twin_mid, &mut twin_out);
        for (n, (what, _)) in reads.iter().enumerate() {
            if twin_status[n] != 0 {
                continue;
            }
            let range = n * h * w * 3..(n + 1) * h * w * 3;
            assert_eq!(
                first_difference(&out[range.clone()], &twin_out[range]),
                None,
                "{what} resized by {json}"
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
                image: batch.images.len(),
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
    // One more image, a copy of the first, with one block past the guard: marked, on the
    // GPU as by the twin.
    let mut outside = batch.images[0].clone();
    let past = batch.images.len();
    outside.components = outside
        .components
        .iter()
        .map(|&c| {
            let mut component = batch.components[c].clone();
            let start = data.coefs.len();
            data.coefs.extend_from_within(
                component.coef_offset..component.coef_offset + component.blocks() * 64,
            );
            component.coef_offset = start;
            component.image = past;
            batch.components.push(component);
            batch.components.len() - 1
        })
        .collect();
    let first = batch.components[outside.components[0]].coef_offset;
    data.coefs[first] = 2000;
    outside.rgb_offset = rgb_at;
    batch.images.push(outside);
    batch.validate(data.coefs.len(), data.quant.len()).unwrap();
    let (layout, staged) = JpegInputs::pack(&batch, &data);
    let on_gpu = decode_on_gpu_packed(&gpu, &batch, &layout, &staged);
    let mut twin_planes = vec![0; batch.planes_len()];
    let mut twin_rgb = vec![0; batch.rgb_len()];
    let mut twin_status = vec![0; batch.images.len()];
    jpeg_twin::idct(&batch, &data, &mut twin_planes, &mut twin_status);
    jpeg_twin::colour(&batch, &twin_planes, &mut twin_rgb);
    assert_eq!(twin_status[past], STATUS_GUARD);
    assert_eq!(on_gpu.status, twin_status);
    let inside = batch.images[past].rgb_offset;
    let planes_inside = batch.components[batch.images[past].components[0]].plane_offset;
    assert_eq!(
        first_difference(
            &on_gpu.planes[..planes_inside],
            &twin_planes[..planes_inside]
        ),
        None
    );
    assert_eq!(
        first_difference(&on_gpu.rgb[..inside], &twin_rgb[..inside]),
        None
    );
}

/// The JPEG kernels alone on coefficients packed with their tables (`JpegInputs::pack`).
fn decode_on_gpu_packed(gpu: &Gpu, batch: &JpegBatch, layout: &JpegInputs, staged: &[u8]) -> OnGpu {
    let inputs = buffer(gpu, staged.len());
    gpu.upload(&inputs, 0, staged).unwrap();
    let planes = buffer(gpu, batch.planes_len());
    let rgb = buffer(gpu, batch.rgb_len());
    jpeg_gpu::decode(gpu, batch, (&inputs, &inputs), layout, &planes, &rgb).unwrap();
    let bytes = download(gpu, &inputs, staged.len());
    OnGpu {
        coefs: Vec::new(),
        status: bytes[layout.status_at..][..batch.images.len() * 4]
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect(),
        planes: download(gpu, &planes, batch.planes_len()),
        rgb: download(gpu, &rgb, batch.rgb_len()),
        rgb_buffer: rgb,
    }
}
