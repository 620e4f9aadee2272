//! The fused attention launcher: attention.cu, FlashAttention-2 style, one CTA
//! per (batch, head, block of 128 query rows; 64 for head dims above 64), for f16 and bf16 storage and head dims that are
//! multiples of 16 from 16 to 128 (ViT-B/16's 64, ViT-L's 64, ViT-H's 80, ...). f32 has no
//! fused kernel: its attention runs unfused (the matmul's exact fp32 FMA path), and the
//! runtime asks [`fused_attention_support`] before it fuses.

use super::problem::AttentionProblem;
use crate::cuda::{
    invalid, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::types::{DType, Operand};

const SOURCE: &str = include_str!("attention.cu");

/// The head dims the kernel is instantiated for: every multiple of 16 up to 128 (16 for the
/// small test fixtures). A multiple of 16 is what one m16n8k16 step of Q·Kᵀ takes; past 128
/// the output accumulator (head_dim / 2 registers per thread) and the Q fragments would
/// spill (128 already takes 243 registers on sm_90).
pub const ATTENTION_HEAD_DIMS: [usize; 8] = [16, 32, 48, 64, 80, 96, 112, 128];

/// Keys per streamed K/V tile.
const BLOCK_N: u32 = 64;
/// Warps per CTA.
const WARPS: u32 = 4;
/// Head dims up to this can give each warp two groups of 16 query rows (FlashAttention-2's
/// shape: each K and V fragment feeds two MMAs); larger ones take one group, since two would
/// hold 2 x head_dim / 2 accumulator registers a thread besides the scores and spill (d64
/// with two groups already takes 255 registers on sm_90).
const TWO_ROW_GROUPS_UP_TO: u32 = 64;
/// Two row groups halve the CTAs, each twice as long: taken when they still give at least
/// this many CTAs an SM. On ViT-B/16 they win at batches 64 and 256 (1536 and 6144 CTAs of
/// two groups on 132 SMs) and lose at batches 8 and 1 (192 and 24 CTAs). Measured:
/// benchmarks/NOTES.md, 2026-11-24 "Attention, two row groups a warp".
const TWO_ROW_GROUPS_MIN_CTAS_PER_SM: u64 = 4;

/// Every meta-parameter of one attention instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttentionConfig {
    pub dtype: DType,
    pub head_dim: u32,
    /// Groups of 16 query rows per warp: 1, or 2 for head dims up to TWO_ROW_GROUPS_UP_TO.
    pub row_groups: u32,
    /// Query row i attends to keys 0..=i only (`AttentionProblem::causal`).
    pub causal: bool,
}

impl AttentionConfig {
    /// The configuration for `p` on a GPU of `multiprocessors` SMs.
    fn select(dtype: DType, p: &AttentionProblem, multiprocessors: u32) -> AttentionConfig {
        let two_groups = AttentionConfig {
            dtype,
            head_dim: p.head_dim as u32,
            row_groups: 2,
            causal: p.causal,
        };
        let ctas = (p.batch as u64)
            .saturating_mul(p.heads as u64)
            .saturating_mul(p.tokens.div_ceil(two_groups.block_m() as usize) as u64);
        let row_groups = if two_groups.head_dim <= TWO_ROW_GROUPS_UP_TO
            && ctas >= TWO_ROW_GROUPS_MIN_CTAS_PER_SM * multiprocessors as u64
        {
            2
        } else {
            1
        };
        AttentionConfig {
            row_groups,
            ..two_groups
        }
    }

    fn threads(&self) -> u32 {
        WARPS * 32
    }

    /// Query rows per CTA.
    fn block_m(&self) -> u32 {
        WARPS * 16 * self.row_groups
    }

    /// Q, then two K and two V buffers, rows padded by 8 elements (as attention.cu).
    fn shared_bytes(&self) -> u32 {
        let pitch = self.head_dim + 8;
        (self.block_m() + 4 * BLOCK_N) * pitch * self.dtype.size_bytes() as u32
    }

    pub fn instantiation(&self) -> Instantiation {
        let mut params = vec![
            KernelParam::new("q", ParamKind::ConstPtr(self.dtype)),
            KernelParam::new("k", ParamKind::ConstPtr(self.dtype)),
            KernelParam::new("v", ParamKind::ConstPtr(self.dtype)),
            KernelParam::new("o", ParamKind::MutPtr(self.dtype)),
            KernelParam::new("heads", ParamKind::I32),
            KernelParam::new("tokens", ParamKind::I32),
        ];
        for names in VIEW_PARAM_NAMES {
            params.extend(
                names
                    .iter()
                    .map(|&name| KernelParam::new(name, ParamKind::I64)),
            );
        }
        params.push(KernelParam::new("scale", ParamKind::F32));
        Instantiation {
            name: format!(
                "attention_{}_d{}_bn{BLOCK_N}_w{WARPS}_g{}{}",
                self.dtype.name(),
                self.head_dim,
                self.row_groups,
                if self.causal { "_causal" } else { "" }
            ),
            family: "attention",
            source: SOURCE,
            headers: &[],
            function: "attention_block",
            template_args: vec![
                self.dtype.cuda_type().into(),
                self.head_dim.to_string(),
                BLOCK_N.to_string(),
                WARPS.to_string(),
                self.row_groups.to_string(),
                self.causal.to_string(),
            ],
            params,
            block_threads: self.threads(),
            min_blocks_per_sm: 0,
            // cp.async, ldmatrix and bf16 mma.sync need sm_80.
            arch: ArchRequirement::AtLeast(8, 0),
        }
    }
}

/// The wrapper's stride parameters, one group per view (Q, K, V, O).
const VIEW_PARAM_NAMES: [[&str; 4]; 4] = [
    [
        "q_offset",
        "q_row_stride",
        "q_batch_stride",
        "q_head_stride",
    ],
    [
        "k_offset",
        "k_row_stride",
        "k_batch_stride",
        "k_head_stride",
    ],
    [
        "v_offset",
        "v_row_stride",
        "v_batch_stride",
        "v_head_stride",
    ],
    [
        "o_offset",
        "o_row_stride",
        "o_batch_stride",
        "o_head_stride",
    ],
];

/// Every instantiation [`launch`] can pick: non-causal, then causal (a text tower's runtime
/// can ask for any head dim and row-group count with the causal mask).
pub(crate) fn instantiations() -> Vec<Instantiation> {
    [false, true]
        .into_iter()
        .flat_map(|causal| {
            [DType::F16, DType::BF16]
                .into_iter()
                .flat_map(move |dtype| {
                    ATTENTION_HEAD_DIMS.into_iter().flat_map(move |head_dim| {
                        let head_dim = head_dim as u32;
                        let groups: &[u32] = if head_dim <= TWO_ROW_GROUPS_UP_TO {
                            &[1, 2]
                        } else {
                            &[1]
                        };
                        groups.iter().map(move |&row_groups| {
                            AttentionConfig {
                                dtype,
                                head_dim,
                                row_groups,
                                causal,
                            }
                            .instantiation()
                        })
                    })
                })
        })
        .collect()
}

/// Whether the fused kernel takes `dtype` and `head_dim`; the reason when it does not. What the
/// runtime asks before it fuses attention for a CUDA run.
pub fn fused_attention_support(dtype: DType, head_dim: usize) -> Result<(), String> {
    if dtype == DType::F32 {
        return Err("the fused attention kernel has no f32 variant (f16 and bf16 only)".into());
    }
    if !ATTENTION_HEAD_DIMS.contains(&head_dim) {
        return Err(format!(
            "the fused attention kernel takes head dims {ATTENTION_HEAD_DIMS:?}, not {head_dim}"
        ));
    }
    Ok(())
}

/// Whether every row a walk over (batch, heads, tokens) of `view` touches starts 16 bytes
/// after a 16-byte boundary: what the kernel's 16-byte copies need. Strides of dimensions of
/// extent 1 are never used, so they do not count.
pub fn attention_rows_aligned(
    base: u64,
    dtype: DType,
    view: &Operand,
    (batch, heads, tokens): (usize, usize, usize),
) -> bool {
    let size = dtype.size_bytes();
    let elements = 16 / size;
    (base + (view.offset * size) as u64).is_multiple_of(16)
        && (tokens <= 1 || view.row_stride.is_multiple_of(elements))
        && (batch <= 1 || view.batch_stride.is_multiple_of(elements))
        && (heads <= 1 || view.head_stride.is_multiple_of(elements))
}

/// Fused attention, `O = softmax(scale · Q·Kᵀ) · V` for every (batch, head) of `p`, in
/// f16 or bf16 with fp32 arithmetic (as `cpu::attention`; the probabilities enter P·V in
/// the storage type). Head dims: [`ATTENTION_HEAD_DIMS`]; every row 16-byte aligned. With
/// `p.causal`, query row i attends to keys 0..=i only (a text tower's causal mask).
pub fn attention(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, None, q, k, v, o)
}

/// [`attention`] with the number of 16-row query groups per warp forced instead of chosen
/// (1, or 2 for head dims up to 64): for tests and benchmarks of both programs.
#[allow(clippy::too_many_arguments)]
pub fn attention_with_row_groups(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    row_groups: u32,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, Some(row_groups), q, k, v, o)
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    row_groups: Option<u32>,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    fused_attention_support(dtype, p.head_dim).map_err(KernelError::InvalidArgument)?;
    for (what, view) in [("Q", q), ("K", k), ("V", v), ("O", o)] {
        view.expect(&format!("attention {what}"), dtype, 0)?;
    }
    p.check_bounds(q.len, k.len, v.len, o.len)
        .map_err(KernelError::InvalidArgument)?;
    if !p.scale.is_finite() {
        return Err(invalid!("attention scale must be finite, got {}", p.scale));
    }
    if p.batch == 0 || p.heads == 0 || p.tokens == 0 {
        return Ok(());
    }
    let extents = (p.batch, p.heads, p.tokens);
    for (what, ptr, view) in [
        ("Q", q, &p.q),
        ("K", k, &p.k),
        ("V", v, &p.v),
        ("O", o, &p.o),
    ] {
        if !attention_rows_aligned(ptr.ptr, dtype, view, extents) {
            return Err(invalid!(
                "fused attention needs every {what} row on a 16-byte boundary \
                 (offset {}, strides {}/{}/{} elements of {dtype})",
                view.offset,
                view.row_stride,
                view.batch_stride,
                view.head_stride
            ));
        }
    }
    let config = match row_groups {
        None => AttentionConfig::select(dtype, p, gpu.multiprocessors()),
        Some(row_groups @ 1) | Some(row_groups @ 2)
            if row_groups == 1 || p.head_dim as u32 <= TWO_ROW_GROUPS_UP_TO =>
        {
            AttentionConfig {
                dtype,
                head_dim: p.head_dim as u32,
                row_groups,
                causal: p.causal,
            }
        }
        Some(row_groups) => {
            return Err(invalid!(
                "attention takes 1 row group a warp, or 2 for head dims up to \
                 {TWO_ROW_GROUPS_UP_TO}; not {row_groups} at head dim {}",
                p.head_dim
            ))
        }
    };
    let programs = (p.batch as u64)
        .checked_mul(p.heads as u64)
        .and_then(|x| x.checked_mul(p.tokens.div_ceil(config.block_m() as usize) as u64))
        .filter(|&x| x <= i32::MAX as u64)
        .ok_or_else(|| {
            invalid!(
                "attention over {} x {} heads of {} tokens needs more than 2^31 programs",
                p.batch,
                p.heads,
                p.tokens
            )
        })?;
    let mut args = vec![
        KernelArg::Ptr(q.ptr),
        KernelArg::Ptr(k.ptr),
        KernelArg::Ptr(v.ptr),
        KernelArg::Ptr(o.ptr),
        KernelArg::I32(to_i32(p.heads, "attention heads")?),
        KernelArg::I32(to_i32(p.tokens, "attention tokens")?),
    ];
    for view in [&p.q, &p.k, &p.v, &p.o] {
        for value in [
            view.offset,
            view.row_stride,
            view.batch_stride,
            view.head_stride,
        ] {
            args.push(KernelArg::I64(to_i64(value)?));
        }
    }
    args.push(KernelArg::F32(p.scale));
    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: (programs as u32, 1, 1),
            block: config.threads(),
            shared_bytes: config.shared_bytes(),
        },
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ViT-B/16's attention (12 heads of 64, 197 tokens) at `batch` images.
    fn vit_b(batch: usize, head_dim: usize) -> AttentionProblem {
        let view = Operand {
            offset: 0,
            row_stride: 3 * 768,
            batch_stride: 197 * 3 * 768,
            head_stride: 64,
        };
        AttentionProblem {
            batch,
            heads: 12,
            tokens: 197,
            head_dim,
            scale: 0.125,
            causal: false,
            q: view,
            k: view,
            v: view,
            o: view,
        }
    }

    #[test]
    fn every_supported_case_is_registered() {
        let registered = instantiations();
        for dtype in DType::ALL {
            for head_dim in 1..=256 {
                if fused_attention_support(dtype, head_dim).is_ok() {
                    for batch in [1, 8, 64, 256, 100_000] {
                        for causal in [false, true] {
                            let p = AttentionProblem {
                                causal,
                                ..vit_b(batch, head_dim)
                            };
                            let config = AttentionConfig::select(dtype, &p, 132);
                            assert_eq!(config.causal, causal);
                            assert!(registered.contains(&config.instantiation()), "{config:?}");
                        }
                    }
                }
            }
        }
        // Every head dim with one row group, those up to 64 also with two; causal or not.
        assert_eq!(registered.len(), 2 * 2 * (8 + 4));
    }

    #[test]
    fn causal_programs_are_named_apart() {
        let config = AttentionConfig {
            dtype: DType::BF16,
            head_dim: 64,
            row_groups: 2,
            causal: false,
        };
        assert_eq!(config.instantiation().name, "attention_bf16_d64_bn64_w4_g2");
        assert_eq!(config.instantiation().template_args[5], "false");
        let causal = AttentionConfig {
            causal: true,
            ..config
        };
        assert_eq!(
            causal.instantiation().name,
            "attention_bf16_d64_bn64_w4_g2_causal"
        );
        assert_eq!(causal.instantiation().template_args[5], "true");
        // The kernel's static_assert: a warp's rows start in the key block they meet first.
        assert_eq!(BLOCK_N % (16 * 2), 0);
    }

    #[test]
    fn two_row_groups_only_for_small_heads_and_many_ctas() {
        let groups = |batch, head_dim| {
            AttentionConfig::select(DType::F16, &vit_b(batch, head_dim), 132).row_groups
        };
        // ViT-B/16 on 132 SMs: 24, 192, 1536 and 6144 CTAs of two row groups.
        assert_eq!(groups(1, 64), 1);
        assert_eq!(groups(8, 64), 1);
        assert_eq!(groups(64, 64), 2);
        assert_eq!(groups(256, 64), 2);
        assert_eq!(groups(256, 80), 1, "two groups of 80 would spill");
        assert_eq!(groups(256, 128), 1);
    }

    #[test]
    fn support_names_the_reason() {
        assert!(fused_attention_support(DType::F16, 64).is_ok());
        assert!(fused_attention_support(DType::BF16, 80).is_ok());
        let e = fused_attention_support(DType::F32, 64).unwrap_err();
        assert!(e.contains("f32"), "{e}");
        let e = fused_attention_support(DType::F16, 72).unwrap_err();
        assert!(e.contains("72"), "{e}");
    }

    #[test]
    fn shared_memory_fits_an_sm80_block() {
        for head_dim in ATTENTION_HEAD_DIMS {
            for row_groups in [1, 2] {
                let config = AttentionConfig {
                    dtype: DType::F16,
                    head_dim: head_dim as u32,
                    row_groups,
                    causal: false,
                };
                // 163 KiB of opt-in shared memory per block on sm_80, 227 KiB on sm_90.
                assert!(config.shared_bytes() <= 163 * 1024, "{config:?}");
            }
        }
    }

    #[test]
    fn rows_must_be_16_byte_aligned() {
        let qkv = Operand {
            offset: 0,
            row_stride: 3 * 768,
            batch_stride: 197 * 3 * 768,
            head_stride: 64,
        };
        let extents = (64, 12, 197);
        assert!(attention_rows_aligned(0x1000, DType::F16, &qkv, extents));
        assert!(!attention_rows_aligned(0x1002, DType::F16, &qkv, extents));
        let odd_rows = Operand {
            row_stride: 3 * 768 + 2,
            ..qkv
        };
        assert!(!attention_rows_aligned(
            0x1000,
            DType::F16,
            &odd_rows,
            extents
        ));
        assert!(
            attention_rows_aligned(0x1000, DType::F16, &odd_rows, (64, 12, 1)),
            "one token: the row stride is never used"
        );
    }
}
