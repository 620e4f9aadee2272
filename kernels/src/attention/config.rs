//! Every meta-parameter of one attention instantiation ([`AttentionConfig`]): its selection
//! for a problem on a GPU, and the instantiation (source, parameters, architecture) NVRTC
//! compiles.

use super::problem::AttentionProblem;
use super::program::*;
use crate::cuda::{kernel_params, ArchRequirement, DevPtr, Instantiation, KernelParam};
use crate::types::DType;

pub(super) const SOURCE: &str = include_str!("attention.cu");
pub(super) const WGMMA_SOURCE: &str = include_str!("attention_wgmma.cu");

/// The batch batch-invariant selection chooses the attention program for (see
/// `Gpu::batch_invariant`): past every CTA-count threshold of [`AttentionConfig::select`].
pub(super) const INVARIANT_BATCH: usize = 1 << 16;

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
    pub(super) fn select(
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
        // The Hopper program where it has work: at least 4 CTAs an SM, or long sequences (CLIP
        // L/14 at 336 and SigLIP so400m at 384 gain from batch 1). Below that the mma.sync
        // program was as fast or faster (benchmarks/NOTES.md, 2026-11-25 "Hopper attention").
        // Above head dim 80 (three stages, one CTA an SM) it takes the Hopper program since
        // that has a producer warp (2026-11-28 "A producer warp for the Hopper attention").
        let hopper_ctas = base.ctas(p);
        if AttentionProgram::WGMMA
            .check(p.head_dim, p.causal, cc)
            .is_ok()
            && AttentionProgram::WGMMA.check_scale(p.scale).is_ok()
            && (hopper_ctas >= WGMMA_MIN_CTAS_PER_SM * multiprocessors as u64
                || p.tokens >= WGMMA_LONG_SEQUENCE)
        {
            // Two query blocks a CTA where there are two and every key stays resident, while
            // enough CTAs remain to fill the SMs.
            let two_passes = AttentionConfig {
                program: AttentionProgram::Wgmma {
                    warpgroups: WGMMA_WARPGROUPS,
                    block_n: WGMMA_BLOCK_N,
                    query_passes: 2,
                },
                ..base
            };
            let two_pass_ctas = two_passes.ctas(p);
            if p.tokens > base.block_m() as usize
                && two_passes.program.check(p.head_dim, p.causal, cc).is_ok()
                && two_passes
                    .program
                    .check_tokens(p.head_dim, p.tokens)
                    .is_ok()
                && two_pass_ctas >= WGMMA_TWO_PASSES_MIN_CTAS_PER_SM * multiprocessors as u64
            {
                return two_passes;
            }
            return base;
        }
        let two_groups = AttentionConfig {
            program: AttentionProgram::MmaSync { row_groups: 2 },
            ..base
        };
        let ctas = two_groups.ctas(p);
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

    pub(super) fn threads(&self) -> u32 {
        match self.program {
            AttentionProgram::MmaSync { .. } => WARPS * 32,
            // The warpgroups, then with one CTA an SM the producer warp, persistent a producer
            // warpgroup that gives its registers to the others (attention_wgmma.cu).
            AttentionProgram::Wgmma { warpgroups, .. } => {
                warpgroups * 128
                    + if self.wgmma_persistent() {
                        128
                    } else if self.wgmma_producer_warp() {
                        32
                    } else {
                        0
                    }
            }
        }
    }

    /// The CTAs this configuration launches for `p` (saturating: a count to compare with).
    fn ctas(&self, p: &AttentionProblem) -> u64 {
        (p.batch as u64)
            .saturating_mul(p.heads as u64)
            .saturating_mul(p.tokens.div_ceil(self.block_m() as usize) as u64)
    }

    /// Query rows per CTA.
    pub(super) fn block_m(&self) -> u32 {
        match self.program {
            AttentionProgram::MmaSync { row_groups } => WARPS * 16 * row_groups,
            AttentionProgram::Wgmma {
                warpgroups,
                query_passes,
                ..
            } => warpgroups * 64 * query_passes,
        }
    }

    /// K/V buffers of the Hopper program ([`AttentionProgram::wgmma_stages`]).
    pub(super) fn wgmma_stages(&self) -> u32 {
        self.program.wgmma_stages(self.head_dim as usize)
    }

    /// Whether the Hopper program loads through a producer warp: where it holds an SM alone
    /// ([`AttentionProgram::wgmma_two_ctas_an_sm`]).
    pub(super) fn wgmma_producer_warp(&self) -> bool {
        matches!(self.program, AttentionProgram::Wgmma { .. })
            && !self.program.wgmma_two_ctas_an_sm(self.head_dim as usize)
    }

    /// Whether the Hopper program runs on a persistent grid (attention_wgmma.cu, PERSISTENT):
    /// where it holds an SM alone (the producer warp's configurations), at the head dims
    /// where that measured faster ([`WGMMA_PERSISTENT_HEAD_DIMS`]).
    pub(super) fn wgmma_persistent(&self) -> bool {
        self.wgmma_producer_warp() && WGMMA_PERSISTENT_HEAD_DIMS.contains(&self.head_dim)
    }

    /// The CTAs to launch for `programs` tiles on `multiprocessors` SMs: one a tile, or
    /// persistent, one an SM.
    pub(super) fn grid(&self, programs: u32, multiprocessors: u32) -> u32 {
        if self.wgmma_persistent() {
            programs.min(multiprocessors.max(1))
        } else {
            programs
        }
    }

    /// mma.sync: Q, then two K and two V buffers, rows padded by 8 elements (as attention.cu).
    /// Hopper: Q (persistent: two buffers), then the K and V rings unpadded, the mbarriers, and
    /// 256 bytes to align the tiles to the swizzle's period (as attention_wgmma.cu).
    pub(super) fn shared_bytes(&self) -> u32 {
        let size = self.dtype.size_bytes() as u32;
        match self.program {
            AttentionProgram::MmaSync { .. } => {
                (self.block_m() + 4 * BLOCK_N) * (self.head_dim + 8) * size
            }
            AttentionProgram::Wgmma { block_n, .. } => {
                let stages = self.wgmma_stages();
                // Persistent: a second Q buffer, its q_full and the two q_empty barriers.
                let (q_buffers, more_barriers) = if self.wgmma_persistent() {
                    (2, 3)
                } else {
                    (1, 0)
                };
                (q_buffers * self.block_m() + 2 * stages * block_n) * self.head_dim * size
                    + 8 * (1 + 2 * stages + more_barriers)
                    + 256
            }
        }
    }

    /// The wrapper's parameters: Q, K and V as pointers and views (mma.sync) or as tensor
    /// maps (Hopper), then O as a pointer and a view, the extents and the scale.
    pub(super) fn params(&self) -> Vec<KernelParam> {
        let o = DevPtr::of_type(self.dtype);
        match self.program {
            AttentionProgram::MmaSync { .. } => {
                let q = DevPtr::of_type(self.dtype);
                let view = [0; 4];
                AttentionParams::new([q, q, q], o, [0, 0], [view; 4], 0.0, 0).params()
            }
            AttentionProgram::Wgmma { .. } => {
                HopperAttentionParams::new([[0; 16]; 3], o, [0, 0, 0], [0; 4], 0.0, 0).params()
            }
        }
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
                query_passes,
            } => {
                let stages = self.wgmma_stages();
                let passes = match query_passes {
                    1 => String::new(),
                    n => format!("_p{n}"),
                };
                let producer_warp = self.wgmma_producer_warp();
                let producer = if producer_warp { "_pw" } else { "" };
                let persistent = self.wgmma_persistent();
                let persist = if persistent { "_persist" } else { "" };
                Instantiation {
                    name: format!(
                        "attention_wgmma_{dtype}_d{head_dim}_bn{block_n}_wg{warpgroups}_s{stages}{passes}{producer}{persist}"
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
                        query_passes.to_string(),
                        producer_warp.to_string(),
                        persistent.to_string(),
                    ],
                    params,
                    block_threads: self.threads(),
                    // Two CTAs an SM need at most 128 registers a thread: said to ptxas, which
                    // is otherwise free to take more and halve the CTAs an SM (it took 185 at
                    // d80 for a draft of the persistent grid's loop).
                    min_blocks_per_sm: if persistent {
                        1
                    } else if producer_warp {
                        0
                    } else {
                        2
                    },
                    // wgmma and TMA exist on sm_90a only.
                    arch: ArchRequirement::Exactly(9, 0),
                }
            }
        }
    }
}

kernel_params! {
    /// attention_block's parameters (attention.cu): Q, K, V and O as pointers, the extents,
    /// each view's offset and strides (elements), the scale, the per-batch key lengths (0: no
    /// key padding mask).
    pub(super) struct AttentionParams {
        q: const_ptr,
        k: const_ptr,
        v: const_ptr,
        o: mut_ptr,
        heads: i32,
        tokens: i32,
        q_offset: i64,
        q_row_stride: i64,
        q_batch_stride: i64,
        q_head_stride: i64,
        k_offset: i64,
        k_row_stride: i64,
        k_batch_stride: i64,
        k_head_stride: i64,
        v_offset: i64,
        v_row_stride: i64,
        v_batch_stride: i64,
        v_head_stride: i64,
        o_offset: i64,
        o_row_stride: i64,
        o_batch_stride: i64,
        o_head_stride: i64,
        scale: f32,
        key_lengths: i32_ptr,
    }
}

kernel_params! {
    /// attention_wgmma_block's parameters (attention_wgmma.cu): Q, K and V as tensor maps, O
    /// as a pointer with its view, the extents (batch items, heads, tokens), the scale, the
    /// per-batch key lengths (0: no key padding mask).
    pub(super) struct HopperAttentionParams {
        q_map: tensor_map,
        k_map: tensor_map,
        v_map: tensor_map,
        o: mut_ptr,
        batches: i32,
        heads: i32,
        tokens: i32,
        o_offset: i64,
        o_row_stride: i64,
        o_batch_stride: i64,
        o_head_stride: i64,
        scale: f32,
        key_lengths: i32_ptr,
    }
}

impl AttentionParams {
    /// From Q, K, V and O, the (heads, tokens) extents, each view's (offset, row, batch and
    /// head strides) in that order, the scale and the key lengths' address (0 for none).
    pub(super) fn new(
        [q, k, v]: [DevPtr; 3],
        o: DevPtr,
        [heads, tokens]: [i32; 2],
        [qv, kv, vv, ov]: [[i64; 4]; 4],
        scale: f32,
        key_lengths: u64,
    ) -> AttentionParams {
        AttentionParams {
            q,
            k,
            v,
            o,
            heads,
            tokens,
            q_offset: qv[0],
            q_row_stride: qv[1],
            q_batch_stride: qv[2],
            q_head_stride: qv[3],
            k_offset: kv[0],
            k_row_stride: kv[1],
            k_batch_stride: kv[2],
            k_head_stride: kv[3],
            v_offset: vv[0],
            v_row_stride: vv[1],
            v_batch_stride: vv[2],
            v_head_stride: vv[3],
            o_offset: ov[0],
            o_row_stride: ov[1],
            o_batch_stride: ov[2],
            o_head_stride: ov[3],
            scale,
            key_lengths,
        }
    }
}

impl HopperAttentionParams {
    /// From Q's, K's and V's tensor maps, O and its view (offset, row, batch and head
    /// strides), the (batch items, heads, tokens) extents, the scale and the key lengths'
    /// address (0 for none).
    pub(super) fn new(
        [q_map, k_map, v_map]: [[u64; 16]; 3],
        o: DevPtr,
        [batches, heads, tokens]: [i32; 3],
        ov: [i64; 4],
        scale: f32,
        key_lengths: u64,
    ) -> HopperAttentionParams {
        HopperAttentionParams {
            q_map,
            k_map,
            v_map,
            o,
            batches,
            heads,
            tokens,
            o_offset: ov[0],
            o_row_stride: ov[1],
            o_batch_stride: ov[2],
            o_head_stride: ov[3],
            scale,
            key_lengths,
        }
    }
}
