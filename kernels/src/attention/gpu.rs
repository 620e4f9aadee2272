//! The fused attention launcher, for f16 and bf16 storage and head dims that are multiples of 16
//! from 16 to 128 (ViT-B/16's 64, ViT-L's 64, ViT-H's 80, ...), with two programs:
//! - attention_wgmma.cu on Hopper (sm_90a), non-causal: both matrix products on warpgroup MMAs,
//!   one CTA per (batch, head, block of 64 query rows a warpgroup);
//! - attention.cu elsewhere and for the causal mask: FlashAttention-2 style on mma.sync, one
//!   CTA per (batch, head, block of 128 query rows; 64 for head dims above 64).
//!
//! f32 has no fused kernel: its attention runs unfused (the matmul's exact fp32 FMA path), and
//! the runtime asks [`fused_attention_support`] before it fuses.

use super::problem::AttentionProblem;
use crate::cuda::{
    encode_tiled, invalid, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg,
    KernelError, KernelParam, LaunchDims, ParamKind, Swizzle,
};
use crate::types::{DType, Operand};

const SOURCE: &str = include_str!("attention.cu");
const WGMMA_SOURCE: &str = include_str!("attention_wgmma.cu");

/// The head dims the kernel is instantiated for: every multiple of 16 up to 128 (16 for the
/// small test fixtures). A multiple of 16 is what one m16n8k16 step of Q·Kᵀ takes; past 128
/// the output accumulator (head_dim / 2 registers per thread) and the Q fragments would
/// spill (128 already takes 243 registers on sm_90).
pub const ATTENTION_HEAD_DIMS: [usize; 8] = [16, 32, 48, 64, 80, 96, 112, 128];

/// Keys per streamed K/V tile of the mma.sync program.
const BLOCK_N: u32 = 64;
/// The Hopper program's shape: warpgroups (of 64 query rows) a CTA and keys a K/V tile.
/// Measured: benchmarks/NOTES.md, 2026-11-25 "Hopper attention".
const WGMMA_WARPGROUPS: u32 = 2;
const WGMMA_BLOCK_N: u32 = 64;
/// The Hopper program is taken from this many CTAs an SM, or from this many tokens.
const WGMMA_MIN_CTAS_PER_SM: u64 = 4;
const WGMMA_LONG_SEQUENCE: usize = 512;
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

/// Which program runs an attention, and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionProgram {
    /// attention.cu (mma.sync, sm_80 and later): 4 warps, each owning `row_groups` groups of
    /// 16 query rows (1, or 2 for head dims up to 64).
    MmaSync { row_groups: u32 },
    /// attention_wgmma.cu (sm_90a, not causal): `warpgroups` warpgroups of 64 query rows a
    /// CTA, K and V streamed in tiles of `block_n` keys (64 or 128).
    Wgmma { warpgroups: u32, block_n: u32 },
}

impl AttentionProgram {
    /// The Hopper program as the launcher picks it.
    pub const WGMMA: AttentionProgram = AttentionProgram::Wgmma {
        warpgroups: WGMMA_WARPGROUPS,
        block_n: WGMMA_BLOCK_N,
    };

    /// Whether this program can run an attention of `head_dim` (one of
    /// [`ATTENTION_HEAD_DIMS`]), causal or not, on a GPU of compute capability `cc`; the
    /// reason when it cannot.
    pub fn check(self, head_dim: usize, causal: bool, cc: (u32, u32)) -> Result<(), String> {
        match self {
            AttentionProgram::MmaSync { row_groups: 1 } => Ok(()),
            AttentionProgram::MmaSync { row_groups: 2 }
                if head_dim as u32 <= TWO_ROW_GROUPS_UP_TO =>
            {
                Ok(())
            }
            AttentionProgram::MmaSync { row_groups } => Err(format!(
                "the mma.sync attention takes 1 row group a warp, or 2 for head dims up to \
                 {TWO_ROW_GROUPS_UP_TO}; not {row_groups} at head dim {head_dim}"
            )),
            AttentionProgram::Wgmma { .. } if causal => {
                Err("the Hopper attention has no causal mask".into())
            }
            AttentionProgram::Wgmma { .. } if cc != (9, 0) => Err(format!(
                "the Hopper attention needs compute capability 9.0 (wgmma), not {}.{}",
                cc.0, cc.1
            )),
            // Key tiles of 128 were slower at every measured shape (benchmarks/NOTES.md,
            // 2026-11-25 "Hopper attention"): only 64 is instantiated.
            AttentionProgram::Wgmma {
                warpgroups: 1 | 2,
                block_n: 64,
            } => Ok(()),
            AttentionProgram::Wgmma {
                warpgroups,
                block_n,
            } => Err(format!(
                "the Hopper attention takes 1 or 2 warpgroups and key tiles of 64, not \
                 {warpgroups} and {block_n}"
            )),
        }
    }

    /// Every program that can run an attention of `head_dim` on compute capability `cc`: for
    /// tests and benchmarks that compare them.
    pub fn all_for(head_dim: usize, causal: bool, cc: (u32, u32)) -> Vec<AttentionProgram> {
        let mut all = vec![
            AttentionProgram::MmaSync { row_groups: 1 },
            AttentionProgram::MmaSync { row_groups: 2 },
        ];
        for warpgroups in [1, 2] {
            all.push(AttentionProgram::Wgmma {
                warpgroups,
                block_n: 64,
            });
        }
        all.retain(|program| program.check(head_dim, causal, cc).is_ok());
        all
    }
}

/// The batch batch-invariant selection chooses the attention program for (see
/// `Gpu::batch_invariant`): past every CTA-count threshold of [`AttentionConfig::select`].
const INVARIANT_BATCH: usize = 1 << 16;

/// Every meta-parameter of one attention instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttentionConfig {
    pub dtype: DType,
    pub head_dim: u32,
    pub program: AttentionProgram,
    /// Query row i attends to keys 0..=i only (`AttentionProblem::causal`).
    pub causal: bool,
}

impl AttentionConfig {
    /// The configuration for `p` on a GPU of `multiprocessors` SMs of compute capability `cc`.
    fn select(
        dtype: DType,
        p: &AttentionProblem,
        multiprocessors: u32,
        cc: (u32, u32),
    ) -> AttentionConfig {
        let base = AttentionConfig {
            dtype,
            head_dim: p.head_dim as u32,
            program: AttentionProgram::WGMMA,
            causal: p.causal,
        };
        // The Hopper program where it can run with two CTAs an SM (head dims up to 80, four
        // K/V stages) and has work for them: at least 4 CTAs an SM, or long sequences (CLIP
        // L/14 at 336 and SigLIP so400m at 384 gain from batch 1). Below that, and above head
        // dim 80 (three stages, one CTA an SM), the mma.sync program was as fast or faster
        // (benchmarks/NOTES.md, 2026-11-25 "Hopper attention").
        let hopper_ctas = (p.batch as u64)
            .saturating_mul(p.heads as u64)
            .saturating_mul(p.tokens.div_ceil(base.block_m() as usize) as u64);
        if AttentionProgram::WGMMA
            .check(p.head_dim, p.causal, cc)
            .is_ok()
            && base.wgmma_stages() == 4
            && (hopper_ctas >= WGMMA_MIN_CTAS_PER_SM * multiprocessors as u64
                || p.tokens >= WGMMA_LONG_SEQUENCE)
        {
            return base;
        }
        let two_groups = AttentionConfig {
            program: AttentionProgram::MmaSync { row_groups: 2 },
            ..base
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
            program: AttentionProgram::MmaSync { row_groups },
            ..base
        }
    }

    fn threads(&self) -> u32 {
        match self.program {
            AttentionProgram::MmaSync { .. } => WARPS * 32,
            AttentionProgram::Wgmma { warpgroups, .. } => warpgroups * 128,
        }
    }

    /// Query rows per CTA.
    fn block_m(&self) -> u32 {
        match self.program {
            AttentionProgram::MmaSync { row_groups } => WARPS * 16 * row_groups,
            AttentionProgram::Wgmma { warpgroups, .. } => warpgroups * 64,
        }
    }

    /// K/V buffers of the Hopper program: 4 where a CTA still takes at most ~100 KiB (two
    /// CTAs an SM), else 3, the fewest it runs with (attention_wgmma.cu).
    fn wgmma_stages(&self) -> u32 {
        let AttentionProgram::Wgmma { block_n, .. } = self.program else {
            return 0;
        };
        let bytes = |stages: u32| (self.block_m() + 2 * stages * block_n) * self.head_dim * 2;
        if bytes(4) <= 100 * 1024 {
            4
        } else {
            3
        }
    }

    /// mma.sync: Q, then two K and two V buffers, rows padded by 8 elements (as attention.cu).
    /// Hopper: Q, then the K and V rings unpadded, the mbarriers, and 256 bytes to align the
    /// tiles to the swizzle's period (as attention_wgmma.cu).
    fn shared_bytes(&self) -> u32 {
        let size = self.dtype.size_bytes() as u32;
        match self.program {
            AttentionProgram::MmaSync { .. } => {
                (self.block_m() + 4 * BLOCK_N) * (self.head_dim + 8) * size
            }
            AttentionProgram::Wgmma { block_n, .. } => {
                let stages = self.wgmma_stages();
                (self.block_m() + 2 * stages * block_n) * self.head_dim * size
                    + 8 * (1 + 2 * stages)
                    + 256
            }
        }
    }

    /// The wrapper's parameters: Q, K and V as pointers and views (mma.sync) or as tensor
    /// maps (Hopper), then O as a pointer and a view, the extents and the scale.
    fn params(&self) -> Vec<KernelParam> {
        let hopper = matches!(self.program, AttentionProgram::Wgmma { .. });
        let mut params: Vec<KernelParam> = match hopper {
            true => ["q_map", "k_map", "v_map"]
                .map(|name| KernelParam::new(name, ParamKind::TensorMap))
                .to_vec(),
            false => ["q", "k", "v"]
                .map(|name| KernelParam::new(name, ParamKind::ConstPtr(self.dtype)))
                .to_vec(),
        };
        params.push(KernelParam::new("o", ParamKind::MutPtr(self.dtype)));
        params.push(KernelParam::new("heads", ParamKind::I32));
        params.push(KernelParam::new("tokens", ParamKind::I32));
        let views: &[[&str; 4]] = match hopper {
            true => &VIEW_PARAM_NAMES[3..],
            false => &VIEW_PARAM_NAMES,
        };
        for names in views {
            params.extend(
                names
                    .iter()
                    .map(|&name| KernelParam::new(name, ParamKind::I64)),
            );
        }
        params.push(KernelParam::new("scale", ParamKind::F32));
        params
    }

    pub fn instantiation(&self) -> Instantiation {
        let params = self.params();
        let causal = if self.causal { "_causal" } else { "" };
        let dtype = self.dtype.name();
        let head_dim = self.head_dim;
        match self.program {
            AttentionProgram::MmaSync { row_groups } => Instantiation {
                name: format!(
                    "attention_{dtype}_d{head_dim}_bn{BLOCK_N}_w{WARPS}_g{row_groups}{causal}"
                ),
                family: "attention",
                source: SOURCE,
                headers: &[],
                function: "attention_block",
                template_args: vec![
                    self.dtype.cuda_type().into(),
                    head_dim.to_string(),
                    BLOCK_N.to_string(),
                    WARPS.to_string(),
                    row_groups.to_string(),
                    self.causal.to_string(),
                ],
                params,
                block_threads: self.threads(),
                min_blocks_per_sm: 0,
                // cp.async, ldmatrix and bf16 mma.sync need sm_80.
                arch: ArchRequirement::AtLeast(8, 0),
            },
            AttentionProgram::Wgmma {
                warpgroups,
                block_n,
            } => {
                let stages = self.wgmma_stages();
                Instantiation {
                    name: format!(
                        "attention_wgmma_{dtype}_d{head_dim}_bn{block_n}_wg{warpgroups}_s{stages}"
                    ),
                    family: "attention",
                    source: WGMMA_SOURCE,
                    headers: &[],
                    function: "attention_wgmma_block",
                    template_args: vec![
                        self.dtype.cuda_type().into(),
                        head_dim.to_string(),
                        block_n.to_string(),
                        warpgroups.to_string(),
                        stages.to_string(),
                    ],
                    params,
                    block_threads: self.threads(),
                    min_blocks_per_sm: 0,
                    // wgmma and TMA exist on sm_90a only.
                    arch: ArchRequirement::Exactly(9, 0),
                }
            }
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

/// Every instantiation [`launch`] and [`attention_with_program`] can pick: every program for
/// every head dim, dtype and mask it takes on a Hopper GPU (the mma.sync ones also run
/// elsewhere).
pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for causal in [false, true] {
        for dtype in [DType::F16, DType::BF16] {
            for head_dim in ATTENTION_HEAD_DIMS {
                for program in AttentionProgram::all_for(head_dim, causal, (9, 0)) {
                    let config = AttentionConfig {
                        dtype,
                        head_dim: head_dim as u32,
                        program,
                        causal,
                    };
                    all.push(config.instantiation());
                }
            }
        }
    }
    all
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

/// [`attention`] with the program forced instead of chosen ([`AttentionProgram::all_for`]
/// lists those that can run a problem): for tests and benchmarks of every program.
#[allow(clippy::too_many_arguments)]
pub fn attention_with_program(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    program: AttentionProgram,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, Some(program), q, k, v, o)
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    program: Option<AttentionProgram>,
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
    let cc = gpu.compute_capability();
    let config = match program {
        // Batch-invariant selection: the program a large batch gets, whatever this one's size.
        None if gpu.batch_invariant() => {
            let many = AttentionProblem {
                batch: p.batch.max(INVARIANT_BATCH),
                ..*p
            };
            AttentionConfig::select(dtype, &many, gpu.multiprocessors(), cc)
        }
        None => AttentionConfig::select(dtype, p, gpu.multiprocessors(), cc),
        Some(program) => {
            program
                .check(p.head_dim, p.causal, cc)
                .map_err(KernelError::InvalidArgument)?;
            AttentionConfig {
                dtype,
                head_dim: p.head_dim as u32,
                program,
                causal: p.causal,
            }
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
    let hopper = matches!(config.program, AttentionProgram::Wgmma { .. });
    let mut args = Vec::new();
    for (ptr, view) in [(q, &p.q), (k, &p.k), (v, &p.v)] {
        args.push(match hopper {
            true => KernelArg::TensorMap(view_tensor_map(dtype, ptr, view, p.head_dim, extents)?),
            false => KernelArg::Ptr(ptr.ptr),
        });
    }
    args.push(KernelArg::Ptr(o.ptr));
    args.push(KernelArg::I32(to_i32(p.heads, "attention heads")?));
    args.push(KernelArg::I32(to_i32(p.tokens, "attention tokens")?));
    let views = match hopper {
        true => vec![&p.o],
        false => vec![&p.q, &p.k, &p.v, &p.o],
    };
    for view in views {
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
            cluster: 1,
        },
        &args,
    )
}

/// The Hopper program's tensor map over a Q, K or V view: 4-D, [batch][head][token][dim]
/// innermost last, read in boxes of 64 tokens x 16 dims in the 32-byte swizzle
/// (attention_wgmma.cu), tokens past the view's read as zeros. Strides of dimensions of extent
/// 1 are never used and may be anything: they are given as 16 bytes, which TMA accepts.
fn view_tensor_map(
    dtype: DType,
    ptr: DevPtr,
    view: &Operand,
    head_dim: usize,
    (batch, heads, tokens): (usize, usize, usize),
) -> Result<[u64; 16], KernelError> {
    let size = dtype.size_bytes() as u64;
    let stride = |extent: usize, elements: usize| match extent {
        0 | 1 => 16,
        _ => elements as u64 * size,
    };
    encode_tiled(
        dtype,
        ptr.ptr + view.offset as u64 * size,
        &[head_dim as u64, tokens as u64, heads as u64, batch as u64],
        &[
            stride(tokens, view.row_stride),
            stride(heads, view.head_stride),
            stride(batch, view.batch_stride),
        ],
        &[16, 64, 1, 1],
        Swizzle::Bytes32,
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

    const AMPERE: (u32, u32) = (8, 0);
    const HOPPER: (u32, u32) = (9, 0);

    #[test]
    fn every_supported_case_is_registered() {
        let registered = instantiations();
        for dtype in DType::ALL {
            for head_dim in 1..=256 {
                if fused_attention_support(dtype, head_dim).is_ok() {
                    for batch in [1, 8, 64, 256, 100_000] {
                        for causal in [false, true] {
                            for cc in [AMPERE, HOPPER] {
                                let p = AttentionProblem {
                                    causal,
                                    ..vit_b(batch, head_dim)
                                };
                                let config = AttentionConfig::select(dtype, &p, 132, cc);
                                assert_eq!(config.causal, causal);
                                assert!(registered.contains(&config.instantiation()), "{config:?}");
                            }
                        }
                    }
                }
            }
        }
        // mma.sync: every head dim with one row group, those up to 64 also with two, causal or
        // not; wgmma: non-causal, two CTA sizes for every head dim.
        assert_eq!(registered.len(), 2 * (2 * (8 + 4) + 8 * 2));
    }

    #[test]
    fn programs_are_named_apart() {
        let config = AttentionConfig {
            dtype: DType::BF16,
            head_dim: 64,
            program: AttentionProgram::MmaSync { row_groups: 2 },
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
        let hopper = AttentionConfig {
            program: AttentionProgram::WGMMA,
            head_dim: 128,
            ..config
        };
        let instantiation = hopper.instantiation();
        // Q 32 KiB and four K and V stages of 64 keys, 128 KiB: over 100 KiB, so three.
        assert_eq!(instantiation.name, "attention_wgmma_bf16_d128_bn64_wg2_s3");
        assert_eq!(instantiation.template_args[2..], ["64", "2", "3"]);
        assert_eq!(
            instantiation.params[..3]
                .iter()
                .map(|p| (p.name, p.kind))
                .collect::<Vec<_>>(),
            [
                ("q_map", ParamKind::TensorMap),
                ("k_map", ParamKind::TensorMap),
                ("v_map", ParamKind::TensorMap)
            ]
        );
        let vit_b = AttentionConfig {
            head_dim: 64,
            ..hopper
        };
        assert_eq!(
            vit_b.instantiation().name,
            "attention_wgmma_bf16_d64_bn64_wg2_s4"
        );
        assert_eq!(instantiation.block_threads, 256);
        assert_eq!(instantiation.arch, ArchRequirement::Exactly(9, 0));
    }

    #[test]
    fn hopper_takes_wgmma_where_it_was_measured_faster() {
        let program = |batch, tokens, head_dim, causal, cc| {
            let p = AttentionProblem {
                tokens,
                causal,
                ..vit_b(batch, head_dim)
            };
            AttentionConfig::select(DType::F16, &p, 132, cc).program
        };
        let wgmma = |batch, tokens, head_dim| {
            program(batch, tokens, head_dim, false, HOPPER) == AttentionProgram::WGMMA
        };
        // ViT-B/16 (12 heads, 197 tokens): 1536 and 6144 CTAs of 128 rows at batches 64 and
        // 256, 192 and 24 at 8 and 1.
        assert!(wgmma(64, 197, 64) && wgmma(256, 197, 64));
        assert!(!wgmma(8, 197, 64) && !wgmma(1, 197, 64));
        // ViT-H/14 (head dim 80): the same rule; head dim 96 and up never (one CTA an SM).
        assert!(wgmma(64, 257, 80) && !wgmma(8, 257, 80));
        assert!(!wgmma(256, 197, 96) && !wgmma(256, 577, 128));
        // Long sequences from batch 1 (CLIP L/14 at 336: 577 tokens).
        assert!(wgmma(1, 577, 64) && !wgmma(1, 511, 64));
        for batch in [1, 64, 256] {
            for head_dim in [16, 64, 80, 128] {
                assert!(matches!(
                    program(batch, 197, head_dim, true, HOPPER),
                    AttentionProgram::MmaSync { .. }
                ));
                assert!(matches!(
                    program(batch, 197, head_dim, false, AMPERE),
                    AttentionProgram::MmaSync { .. }
                ));
            }
        }
        let e = AttentionProgram::WGMMA
            .check(64, false, AMPERE)
            .unwrap_err();
        assert!(e.contains("9.0"), "{e}");
        let e = AttentionProgram::WGMMA.check(64, true, HOPPER).unwrap_err();
        assert!(e.contains("causal"), "{e}");
        for odd in [(3, 64), (2, 128)] {
            let odd = AttentionProgram::Wgmma {
                warpgroups: odd.0,
                block_n: odd.1,
            };
            assert!(odd.check(64, false, HOPPER).is_err());
        }
        assert_eq!(AttentionProgram::all_for(64, false, HOPPER).len(), 4);
        assert_eq!(AttentionProgram::all_for(80, false, HOPPER).len(), 3);
        assert_eq!(AttentionProgram::all_for(64, true, HOPPER).len(), 2);
        assert_eq!(AttentionProgram::all_for(64, false, AMPERE).len(), 2);
    }

    #[test]
    fn two_row_groups_only_for_small_heads_and_many_ctas() {
        let groups = |batch, head_dim| match AttentionConfig::select(
            DType::F16,
            &vit_b(batch, head_dim),
            132,
            AMPERE,
        )
        .program
        {
            AttentionProgram::MmaSync { row_groups } => row_groups,
            other => panic!("{other:?} on sm_80"),
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
    fn shared_memory_fits_a_block() {
        for head_dim in ATTENTION_HEAD_DIMS {
            for (cc, limit) in [(AMPERE, 163), (HOPPER, 227)] {
                for program in AttentionProgram::all_for(head_dim, false, cc) {
                    let config = AttentionConfig {
                        dtype: DType::F16,
                        head_dim: head_dim as u32,
                        program,
                        causal: false,
                    };
                    // Opt-in shared memory per block: 163 KiB on sm_80, 227 KiB on sm_90.
                    assert!(config.shared_bytes() <= limit * 1024, "{config:?}");
                }
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
