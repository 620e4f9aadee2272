//! Patchify with prefix rows (class and distillation tokens) and position embeddings against its twins, exactly.

use super::*;
use vitrt_kernels::patchify;

#[test]
#[ignore = "needs a CUDA GPU"]
fn patchify_with_prefix_matches_its_twins_exactly() {
    let mut rng = SmallRng::seed_from_u64(5);
    // (batch, channels, height, width, patch, hidden, prefix rows): ViT-B/16 (CLS), small with
    // no prefix (SigLIP), odd patch with CLS and distillation tokens (DeiT), a size that drops a
    // remainder (as Conv2d does) with CLS and 4 registers (DINOv2), non-square.
    let shapes = [
        (2, 3, 224, 224, 16, 768, 1),
        (1, 3, 32, 32, 4, 54, 0),
        (3, 3, 30, 30, 6, 20, 2),
        (1, 1, 9, 9, 2, 7, 5),
        (2, 3, 64, 48, 8, 33, 1),
    ];
    // (operand dtype, token dtype): one dtype, or tokens in f32 (the start of a residual stream
    // kept in f32).
    let storage = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F32),
    ];
    for (dtype, token_dtype) in storage {
        let mut cases = 0;
        for &(batch, channels, height, width, patch, hidden, prefix_rows) in &shapes {
            for misalign in [0, 1] {
                let case = format!("patchify {dtype} tokens {token_dtype} {batch}x{channels}x{height}x{width} p{patch} prefix {prefix_rows} misalign {misalign}");
                let n = (height / patch) * (width / patch);
                let tokens_per_image = n + prefix_rows;
                let pixels = random(
                    &mut rng,
                    batch * channels * height * width,
                    -2.0,
                    2.0,
                    DType::F32,
                );
                // At least one row is uploaded, so that the buffer exists; `count` says how
                // many the kernel reads.
                let prefix_buffer = random(&mut rng, prefix_rows.max(1) * hidden, -1.0, 1.0, dtype);
                let prefix = &prefix_buffer[..prefix_rows * hidden];
                let pos = random(&mut rng, tokens_per_image * hidden, -1.0, 1.0, dtype);
                let (_pb, pv) = upload(gpu(), DType::F32, &pixels, misalign);
                let (_cb, cv) = upload(gpu(), dtype, &prefix_buffer, 0);
                let (_ob, ov) = upload(gpu(), dtype, &pos, misalign);
                let patches =
                    Poisoned::new(gpu(), dtype, batch * n * channels * patch * patch, misalign);
                let tokens =
                    Poisoned::new(gpu(), token_dtype, batch * tokens_per_image * hidden, 0);
                patchify::gpu::patchify_with_prefix(
                    gpu(),
                    dtype,
                    pv,
                    batch,
                    channels,
                    height,
                    width,
                    patch,
                    PrefixRows {
                        rows: cv,
                        count: prefix_rows,
                    },
                    ov,
                    hidden,
                    tokens_per_image,
                    patches.view(),
                    tokens.view(),
                )
                .unwrap();

                let mut want = vec![0.0; batch * n * channels * patch * patch];
                patchify::cpu::patchify(&pixels, batch, channels, height, width, patch, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                compare(&case, &patches.read(gpu(), &case), &want, 0.0, 0.0);

                // Prefix rows are written; every other token row is left to the projection matmul.
                tokens.read(gpu(), &case);
                let mut raw = vec![0u8; tokens.buffer.len_bytes()];
                gpu().download(&tokens.buffer, 0, &mut raw).unwrap();
                let raw =
                    &raw[tokens.offset..tokens.offset + tokens.len * token_dtype.size_bytes()];
                let got = token_dtype.decode(raw);
                let mut want_tokens = vec![f32::NAN; batch * tokens_per_image * hidden];
                patchify::cpu::write_prefix_rows(
                    prefix,
                    &pos,
                    batch,
                    tokens_per_image,
                    hidden,
                    &mut want_tokens,
                );
                for (i, w) in want_tokens.iter().enumerate() {
                    if i % (tokens_per_image * hidden) < prefix_rows * hidden {
                        assert_eq!(got[i], token_dtype.round(*w), "{case}: prefix element {i}");
                    } else {
                        assert!(
                            Poisoned::untouched(raw, token_dtype, i),
                            "{case}: token element {i} was written"
                        );
                    }
                }
                cases += 1;
            }
        }
        report(
            &format!("patchify into {token_dtype}"),
            dtype,
            cases,
            Worst::default(),
        );
    }
}
