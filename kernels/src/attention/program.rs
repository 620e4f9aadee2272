//! Which attention program runs a problem, and the shapes each takes: the mma.sync program
//! (attention.cu) and the Hopper one (attention_wgmma.cu).

/// Keys per streamed K/V tile of the mma.sync program.
pub(super) const BLOCK_N: u32 = 64;
/// The Hopper program's shape: warpgroups (of 64 query rows) a CTA and keys a K/V tile.
/// Measured: benchmarks/NOTES.md, 2026-11-25 "Hopper attention".
pub(super) const WGMMA_WARPGROUPS: u32 = 2;
pub(super) const WGMMA_BLOCK_N: u32 = 64;
/// The Hopper program takes two query blocks a CTA (`query_passes: 2`) where every key fits
/// its stages and this leaves at least this many CTAs an SM. Measured: benchmarks/NOTES.md,
/// 2026-11-28 "Two query blocks a CTA".
pub(super) const WGMMA_TWO_PASSES_MIN_CTAS_PER_SM: u64 = 2;
/// Two query passes are instantiated up to this head dim: at 80 they take three stages and
/// 179 registers (one CTA an SM, against 120 and two with one pass).
pub(super) const WGMMA_TWO_PASSES_UP_TO: u32 = 64;
/// Head dims at which the Hopper program's one-CTA-an-SM configurations run on a persistent
/// grid, one CTA an SM taking tile after tile: 1.07x at 128 and 1.28-1.31x at 96 (batches 8 to
/// 256); benchmarks/NOTES.md, 2026-11-28 "A persistent grid for the Hopper attention". Its
/// producer warpgroup gives the consumers its registers, so 112 no longer spills and runs
/// persistent too (1.09-1.11x there); 2026-11-29 "The persistent attention's producer gives
/// its registers".
pub(super) const WGMMA_PERSISTENT_HEAD_DIMS: [u32; 3] = [96, 112, 128];
/// The Hopper program is taken from this many CTAs an SM, or from this many tokens.
pub(super) const WGMMA_MIN_CTAS_PER_SM: u64 = 4;
pub(super) const WGMMA_LONG_SEQUENCE: usize = 512;
/// Warps per CTA.
pub(super) const WARPS: u32 = 4;
/// Head dims up to this can give each warp two groups of 16 query rows (FlashAttention-2's
/// shape: each K and V fragment feeds two MMAs); larger ones take one group, since two would
/// hold 2 x head_dim / 2 accumulator registers a thread besides the scores and spill (d64
/// with two groups already takes 255 registers on sm_90).
pub(super) const TWO_ROW_GROUPS_UP_TO: u32 = 64;
/// Two row groups halve the CTAs, each twice as long: taken when they still give at least
/// this many CTAs an SM. On ViT-B/16 they win at batches 64 and 256 (1536 and 6144 CTAs of
/// two groups on 132 SMs) and lose at batches 8 and 1 (192 and 24 CTAs). Measured:
/// benchmarks/NOTES.md, 2026-11-24 "Attention, two row groups a warp".
pub(super) const TWO_ROW_GROUPS_MIN_CTAS_PER_SM: u64 = 4;

/// Which program runs an attention, and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionProgram {
    /// attention.cu (mma.sync, sm_80 and later): 4 warps, each owning `row_groups` groups of
    /// 16 query rows (1, or 2 for head dims up to 64).
    MmaSync { row_groups: u32 },
    /// attention_wgmma.cu (sm_90a, not causal): `warpgroups` warpgroups of 64 query rows a
    /// CTA, K and V streamed in tiles of `block_n` keys (64 or 128); with `query_passes` 2
    /// the CTA takes two such blocks of query rows in turn against keys loaded once, which
    /// must all fit its K/V stages ([`AttentionProgram::check_tokens`]).
    Wgmma {
        warpgroups: u32,
        block_n: u32,
        query_passes: u32,
    },
}

impl AttentionProgram {
    /// The Hopper program as the launcher picks it.
    pub const WGMMA: AttentionProgram = AttentionProgram::Wgmma {
        warpgroups: WGMMA_WARPGROUPS,
        block_n: WGMMA_BLOCK_N,
        query_passes: 1,
    };

    /// Whether this program can run an attention of `head_dim` (one of
    /// [`ATTENTION_HEAD_DIMS`](super::problem::ATTENTION_HEAD_DIMS)), causal or not, on a GPU of compute capability `cc`; the
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
                query_passes: 1,
            } => Ok(()),
            AttentionProgram::Wgmma {
                warpgroups: 2,
                block_n: 64,
                query_passes: 2,
            } if head_dim as u32 <= WGMMA_TWO_PASSES_UP_TO => Ok(()),
            AttentionProgram::Wgmma {
                query_passes: 2, ..
            } if head_dim as u32 > WGMMA_TWO_PASSES_UP_TO => Err(format!(
                "the Hopper attention takes two query passes up to head dim \
                 {WGMMA_TWO_PASSES_UP_TO} (two CTAs an SM), not {head_dim}"
            )),
            AttentionProgram::Wgmma {
                warpgroups,
                block_n,
                query_passes,
            } => Err(format!(
                "the Hopper attention takes 1 or 2 warpgroups, key tiles of 64 and 1 query \
                 pass (2 with 2 warpgroups), not {warpgroups}, {block_n} and {query_passes}"
            )),
        }
    }

    /// Whether two CTAs of the Hopper program share an SM at `head_dim`: four K/V stages and
    /// its Q tiles in at most ~100 KiB (head dims up to 80 with two warpgroups). Otherwise one
    /// CTA holds the SM, with three stages and a producer warp (attention_wgmma.cu).
    pub fn wgmma_two_ctas_an_sm(self, head_dim: usize) -> bool {
        self.wgmma_bytes(head_dim, 4) <= 100 * 1024
    }

    /// K/V buffers of the Hopper program at `head_dim`: 4 where two CTAs share an SM, else 3,
    /// the fewest it runs with (five or six, with the producer warp, measured no faster:
    /// benchmarks/NOTES.md, 2026-11-28 "A producer warp for the Hopper attention"); 0 for
    /// mma.sync.
    pub fn wgmma_stages(self, head_dim: usize) -> u32 {
        match self {
            AttentionProgram::MmaSync { .. } => 0,
            _ if self.wgmma_two_ctas_an_sm(head_dim) => 4,
            _ => 3,
        }
    }

    /// The Hopper program's 16-bit Q tiles and `stages` K/V buffers, in bytes.
    fn wgmma_bytes(self, head_dim: usize, stages: u32) -> usize {
        let AttentionProgram::Wgmma {
            warpgroups,
            block_n,
            query_passes,
        } = self
        else {
            return 0;
        };
        let query_rows = 64 * warpgroups * query_passes;
        (query_rows + 2 * stages * block_n) as usize * head_dim * 2
    }

    /// Whether this program takes the softmax scale `scale` (finite): the Hopper program scales
    /// each block's maximum instead of every score, which needs a positive scale (every model's
    /// is 1/√head_dim or a learned positive one); the reason when it cannot.
    pub fn check_scale(self, scale: f32) -> Result<(), String> {
        match self {
            AttentionProgram::Wgmma { .. }
                if scale.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) =>
            {
                Err(format!(
                    "the Hopper attention takes a positive softmax scale, not {scale}"
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether this program runs sequences of `tokens` at `head_dim`: two query passes keep
    /// every key resident, so the keys must fit the stages; the reason when they do not.
    pub fn check_tokens(self, head_dim: usize, tokens: usize) -> Result<(), String> {
        match self {
            AttentionProgram::Wgmma {
                block_n,
                query_passes,
                ..
            } if query_passes > 1 => {
                let resident = self.wgmma_stages(head_dim) as usize * block_n as usize;
                if tokens <= resident {
                    Ok(())
                } else {
                    Err(format!(
                        "the Hopper attention with {query_passes} query passes keeps every key \
                         resident: at most {resident} tokens at head dim {head_dim}, not {tokens}"
                    ))
                }
            }
            _ => Ok(()),
        }
    }

    /// Every program that can run an attention of `head_dim` on compute capability `cc`
    /// (each still subject to [`AttentionProgram::check_tokens`]): for tests and benchmarks
    /// that compare them.
    pub fn all_for(head_dim: usize, causal: bool, cc: (u32, u32)) -> Vec<AttentionProgram> {
        let mut all = vec![
            AttentionProgram::MmaSync { row_groups: 1 },
            AttentionProgram::MmaSync { row_groups: 2 },
        ];
        for (warpgroups, query_passes) in [(1, 1), (2, 1), (2, 2)] {
            all.push(AttentionProgram::Wgmma {
                warpgroups,
                block_n: 64,
                query_passes,
            });
        }
        all.retain(|program| program.check(head_dim, causal, cc).is_ok());
        all
    }
}
