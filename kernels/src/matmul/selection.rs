//! Which tile a matmul runs on: the tile tables, the cost model that picks among them for a
//! problem on a device, and split-K. What each tile costs an SM is measured; the cost model
//! estimates how long the busiest SM takes, from the number of tiles, how many CTAs of the
//! shape one SM holds, and the shape's speed. Large tiles win on large problems (fewer bytes
//! moved per FLOP) unless their last wave leaves SMs idle; small ones win when large tiles would
//! leave most SMs idle (batch-1 shapes, attention with few heads). A tuned tile (tuning.rs)
//! wins over this choice; the launcher is handed the tile (gpu.rs).

use crate::cuda::{Gpu, KernelError};
use crate::matmul::problem::{MatmulProblem, WeightLayout};
use crate::types::{DType, Operand};
use cudarc::driver::sys::CUdevice_attribute;

/// The block programs a tile runs on, one `.cu` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Program {
    /// f16/bf16 on tensor cores through `mma.sync`, fed by a cp.async pipeline (mma_sync.cu,
    /// `matmul_block`, sm_80 and later).
    MmaSync,
    /// f32 on CUDA cores (fma.cu, `matmul_block`, any arch).
    Fma,
    /// f16/bf16 warpgroup MMA from shared memory, fed by cp.async (wgmma.cu,
    /// `matmul_block_wgmma`, sm_90a). Only for B as [N, K] and 16-byte aligned rows;
    /// `warps_m` counts its warps.
    Wgmma,
    /// Warp-specialised wgmma: TMA copies on mbarriers, a persistent grid, BLOCK_M 128, a
    /// producer warpgroup and two consumers sharing each tile, 384 threads
    /// (tma_cooperative.cu, `matmul_block_tma`, sm_90a). Only for single [M, K] x [N, K]
    /// matrices with 16-byte aligned rows (every linear layer).
    TmaCooperative,
    /// The TMA program whose two consumer warpgroups take alternate tiles, so that one's
    /// epilogue overlaps the other's MMAs, with a producer warpgroup (384 threads) or, 64 wide,
    /// a producer warp (288) (tma_pingpong.cu,
    /// `matmul_block_tma_pingpong` and its residual and 16-bit stream variants, sm_90a).
    TmaPingPong,
}

impl Program {
    /// A Hopper program (sm_90a): warpgroup MMA, with or without TMA.
    pub fn is_hopper(self) -> bool {
        matches!(
            self,
            Program::Wgmma | Program::TmaCooperative | Program::TmaPingPong
        )
    }

    /// A warp-specialised program: A and B (and C or R on the ping-pong tile) through TMA
    /// tensor maps, one matrix, a persistent grid.
    pub fn uses_tma(self) -> bool {
        matches!(self, Program::TmaCooperative | Program::TmaPingPong)
    }
}

/// One tile shape of a block program, and what it costs the SM that runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulTile {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    /// Shared-memory pipeline depth (cp.async stages; the f32 body always double-buffers).
    pub stages: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    /// CTAs of this shape one SM holds at once (from registers and shared memory on sm_90;
    /// the resource report of the CI compile test shows the inputs).
    pub ctas_per_sm: u32,
    /// Relative speed of one fully occupied SM running this shape's main loop, for the cost
    /// model.
    pub speed: u32,
    /// What a tile costs besides its main loop (pipeline fill, and the epilogue where no other
    /// tile's MMAs overlap it), in k-columns of main loop. Fitted to the batch-64 proj and fc2
    /// (same M and N, K 768 and 3072): 742 for the cooperative 128x192, 348 for the ping-pong
    /// tile, whose epilogue runs under the other warpgroup's main loop (measured:
    /// benchmarks/NOTES.md, 2026-11-22 "K-aware cost model").
    pub overhead_k: u32,
    /// The program that runs the tile.
    pub program: Program,
    /// CTAs a cluster (1, or 2 for the clustered ping-pong tile, whose two CTAs share A's
    /// loads: `CtaTiles` in tma.cuh).
    pub cluster: u32,
}

impl MatmulTile {
    pub fn threads(&self) -> u32 {
        self.warps_m * self.warps_n * 32
    }

    /// Whether the ping-pong program's producer is a whole warpgroup (`warps_m` 12), which gives
    /// the consumers its registers with `setmaxnreg` and holds the residual loader's warp: the
    /// 128-wide tiles, 1.04-1.06x without epilogue at batches 64 and 256. The narrow tile keeps
    /// a producer warp, the warpgroup measured 1-2% slower there (benchmarks/NOTES.md, 2026-11-29
    /// "The ping-pong matmul's producer gives its registers").
    pub(crate) fn pingpong_producer_warpgroup(&self) -> bool {
        self.program == Program::TmaPingPong && self.warps_m == 12
    }

    /// A short name: `128x128x32_s4_w2x2`, or `wg128x192x64_s5` for a Hopper tile.
    pub fn name(&self) -> String {
        if self.program.uses_tma() {
            return format!(
                "{}{}x{}x{}_s{}{}",
                if self.program == Program::TmaPingPong {
                    "tmapp"
                } else {
                    "tma"
                },
                self.block_m,
                self.block_n,
                self.block_k,
                self.stages,
                if self.cluster > 1 {
                    format!("_c{}", self.cluster)
                } else {
                    String::new()
                }
            );
        }
        if self.program == Program::Wgmma {
            return format!(
                "wg{}x{}x{}_s{}",
                self.block_m, self.block_n, self.block_k, self.stages
            );
        }
        format!(
            "{}x{}x{}_s{}_w{}x{}",
            self.block_m, self.block_n, self.block_k, self.stages, self.warps_m, self.warps_n
        )
    }

    /// Whether a device of compute capability `cc` can run this tile.
    pub fn runs_on(&self, cc: (u32, u32)) -> bool {
        !self.program.is_hopper() || cc == (9, 0)
    }

    /// Estimated run time (arbitrary units) of `programs` tiles on `sms` SMs: the busiest SM
    /// gets `ceil(programs / sms)` tiles and runs them in rounds of up to `ctas_per_sm`
    /// sharing it; a round takes as long as its tiles' work at the shape's speed, and a last,
    /// partial round as long as a full one (its CTAs run no faster for having the SM to
    /// themselves only in part).
    pub(crate) fn cost(&self, programs: u64, sms: u64, k: u64) -> u64 {
        let per_sm = programs.div_ceil(sms);
        let concurrent = per_sm.min(self.ctas_per_sm as u64);
        let rounds = per_sm.div_ceil(self.ctas_per_sm as u64);
        let tile_work = (self.block_m * self.block_n) as u64 * (k + self.overhead_k as u64);
        rounds * concurrent * tile_work * 1000 / self.speed as u64
    }
}

const fn tile(
    program: Program,
    (block_m, block_n, block_k): (u32, u32, u32),
    stages: u32,
    (warps_m, warps_n): (u32, u32),
    ctas_per_sm: u32,
    speed: u32,
) -> MatmulTile {
    MatmulTile {
        block_m,
        block_n,
        block_k,
        stages,
        warps_m,
        warps_n,
        ctas_per_sm,
        speed,
        overhead_k: SERIAL_EPILOGUE_K,
        program,
        cluster: 1,
    }
}

/// `overhead_k` of every tile whose epilogue no MMA of its own CTA overlaps (all but the
/// ping-pong tile).
const SERIAL_EPILOGUE_K: u32 = 742;

/// A Hopper tile: BLOCK_M / 64 warpgroups of four warps, BLOCK_K 64 (128-byte swizzled rows).
const fn wgmma_tile(
    (block_m, block_n): (u32, u32),
    stages: u32,
    ctas_per_sm: u32,
    speed: u32,
) -> MatmulTile {
    MatmulTile {
        block_m,
        block_n,
        block_k: 64,
        stages,
        warps_m: block_m / 16,
        warps_n: 1,
        ctas_per_sm,
        speed,
        overhead_k: SERIAL_EPILOGUE_K,
        program: Program::Wgmma,
        cluster: 1,
    }
}

/// A warp-specialised Hopper tile: 128 x BLOCK_N, BLOCK_K 64, one CTA per SM. Cooperative: a
/// producer warpgroup and two consumers sharing each tile (384 threads, `warps_m` 12);
/// ping-pong: two consumers on alternate tiles and, 128 wide, a producer warpgroup that gives
/// them its registers (384 threads), 64 wide a producer warp (288, `warps_m` 9; see
/// `pingpong_producer_warpgroup`).
const fn tma_tile(
    block_n: u32,
    stages: u32,
    pingpong: bool,
    cluster: u32,
    speed: u32,
) -> MatmulTile {
    MatmulTile {
        block_m: 128,
        block_n,
        block_k: 64,
        stages,
        warps_m: if pingpong && block_n == 64 { 9 } else { 12 },
        warps_n: 1,
        ctas_per_sm: 1,
        speed,
        overhead_k: if pingpong { 348 } else { SERIAL_EPILOGUE_K },
        program: if pingpong {
            Program::TmaPingPong
        } else {
            Program::TmaCooperative
        },
        cluster,
    }
}

/// Tensor-core tiles (f16, bf16) of the mma.sync program. 128x128x32 with four warps of 64x64
/// is the fastest on every batch-64 ViT-B/16 GEMM (`matmul_speed_report` in
/// kernels/tests/gpu_matmul_speed.rs); 64x64x32 (32x32 warp tiles) wins whenever 128x128 tiles
/// leave SMs idle, as every batch-1 GEMM (M = 197) does. The small tile is also the one for
/// operands whose rows do not allow 16-byte copies (see `config::configure`); the deep one
/// takes small single-matrix products (see `DEEP_SMALL_TILE`).
pub const TENSOR_CORE_TILES: [MatmulTile; 3] = [
    tile(Program::MmaSync, (128, 128, 32), 4, (2, 2), 2, 100),
    SMALL_TENSOR_CORE_TILE,
    DEEP_SMALL_TILE,
];

/// The tensor-core tile for small problems and for operands that need element loads.
pub(crate) const SMALL_TENSOR_CORE_TILE: MatmulTile =
    tile(Program::MmaSync, (64, 64, 32), 4, (2, 2), 4, 78);

/// The small tile with 6 stages of BK 64 (96 KB, two CTAs per SM) instead of 4 of BK 32: at
/// batch 1 every linear layer makes at most two 64 x 64 tiles per SM and each CTA streams its
/// weights with a memory latency per (stages - 1) k-tiles, so five 16 KB k-tiles in flight
/// instead of three 8 KB ones cut the latencies per tile by 3.3x. It takes only what fits in
/// one round of its CTAs (see `select_tile`): at batch 8 proj and fc2 make 300 tiles, and it is
/// slower there (measured: benchmarks/NOTES.md, 2026-11-22 "a deep small tile"). Single [N, K]
/// matrices with 16-byte rows only (see [`configure`]).
pub(crate) const DEEP_SMALL_TILE: MatmulTile =
    tile(Program::MmaSync, (64, 64, 64), 6, (2, 2), 2, 90);

/// CUDA-core FMA tiles (f32): 256 threads, 8x8 or 4x4 outputs per thread. Their speeds are
/// estimates, not yet measured: f32 is the parity path, not the fast one.
pub const FMA_TILES: [MatmulTile; 2] = [
    tile(Program::Fma, (128, 128, 16), 2, (2, 4), 1, 100),
    tile(Program::Fma, (64, 64, 16), 2, (2, 4), 3, 70),
];

/// Hopper tiles (sm_90a) of the wgmma program, for f16/bf16 linear layers. Their speeds are set
/// so that the cost model picks what measured fastest on each of the four batch-64 ViT-B/16
/// shapes (measured: benchmarks/NOTES.md, 2026-11-22 "wgmma matmul"); `vitrt tune` measures
/// instead. 128x192 and 128x256 take most of the SM's shared memory (one CTA per SM);
/// 128x128 in three stages fits twice (registers capped at 128 for it), so one CTA's epilogue
/// overlaps the other's main loop.
pub const WGMMA_TILES: [MatmulTile; 3] = [
    wgmma_tile((128, 192), 5, 1, 190),
    wgmma_tile((128, 256), 4, 1, 220),
    wgmma_tile((128, 128), 3, 2, 200),
];

/// Warp-specialised Hopper tiles ([`Program::TmaCooperative`] and [`Program::TmaPingPong`]). The
/// ping-pong tile takes products whose C is in the operands' type (with or without a residual
/// in that type) and the f32 residual stream (see `pingpong_takes`). With an f32 stream at
/// batch 64 the cooperative 128x192 beat it on fc2 (K = 3072: the overlapped epilogue saves
/// less where the main loop is long, and N = 768 makes 4 columns of 192 against 6 of 128;
/// benchmarks/NOTES.md, 2026-11-22 "residual stream on the ping-pong tile"). 128x256 fits
/// only three stages beside the epilogue buffers.
/// The clustered ping-pong tile (last) is the same tile launched in clusters of two CTAs that
/// take adjacent n-tiles and load A's box once for both, half each, by TMA multicast: 25% less
/// L2-to-SM traffic a tile. On the H100 the single-CTA tile kept L2 85-88% busy with the
/// tensor pipe at 66% on the batch-256 qkv and fc2, and the clustered one runs them 9% and 13%
/// faster; from four waves (see `select_tile`) it also takes the batch-64 fc2 into a 16-bit
/// stream, 15% faster than the cooperative 128x192 (measured: benchmarks/NOTES.md,
/// 2026-11-25 "A multicast across a cluster of two").
pub const TMA_TILES: [MatmulTile; 5] = [
    tma_tile(192, 4, false, 1, 240),
    tma_tile(256, 3, false, 1, 200),
    tma_tile(128, 5, true, 1, 220),
    tma_tile(128, 5, true, 2, 250),
    NARROW_PINGPONG_TILE,
];

/// The ping-pong tile at half its width, 128 x 64, for products whose 128 x 128 tiles leave
/// most SMs idle (batch 1: qkv makes 36 of them and fc1 48 on 132 SMs, each CTA's main loop
/// a long chain of MMAs). Twice the tiles, each half the work; eight stages of 24 KB keep as
/// many bytes in flight as five of 32 KB.
pub(crate) const NARROW_PINGPONG_TILE: MatmulTile = tma_tile(64, 8, true, 1, 180);

/// The FP8 tiles (e4m3 operands: the ping-pong program's FP8 entry points, sm_90a): the
/// ping-pong tile and its narrow variant with k-tiles of 128 e4m3 values, the same 128 bytes a
/// row as the 16-bit tiles' 64, so that stages, boxes and swizzle are the 16-bit tiles' byte for
/// byte. Their speeds and overheads are the 16-bit tiles' in k-columns of e4m3 (twice as many
/// a second: the FP8 wgmma's rate is twice the 16-bit one's); estimates until measured, and
/// only ever compared with each other (see `select_fp8_tile`).
pub const FP8_TILES: [MatmulTile; 2] = [FP8_PINGPONG_TILE, FP8_NARROW_PINGPONG_TILE];

/// The FP8 ping-pong tile, 128 x 128, five stages of 32 KB.
pub(crate) const FP8_PINGPONG_TILE: MatmulTile = MatmulTile {
    block_k: 128,
    speed: 440,
    overhead_k: 696,
    ..tma_tile(128, 5, true, 1, 220)
};

/// The narrow FP8 ping-pong tile, 128 x 64, eight stages of 24 KB, for products whose
/// 128-wide tiles leave most SMs idle (batch 1), with split-K as the 16-bit narrow tile's.
pub(crate) const FP8_NARROW_PINGPONG_TILE: MatmulTile = MatmulTile {
    block_k: 128,
    speed: 360,
    overhead_k: 696,
    ..NARROW_PINGPONG_TILE
};

/// The FP8 tile for an `m` x `n` x `k` product on `sms` SMs: the narrow one while its tiles fit
/// in one wave (as the 16-bit narrow tile is chosen), else the cheaper by the cost model.
pub(crate) fn select_fp8_tile(m: usize, n: usize, k: usize, sms: u32) -> MatmulTile {
    let programs = |t: &MatmulTile| {
        m.div_ceil(t.block_m as usize) as u64 * n.div_ceil(t.block_n as usize) as u64
    };
    let sms = sms.max(1) as u64;
    FP8_TILES
        .iter()
        .filter(|t| **t != FP8_NARROW_PINGPONG_TILE || programs(t) <= sms)
        .min_by_key(|t| t.cost(programs(t), sms, k as u64))
        .copied()
        .unwrap_or(FP8_PINGPONG_TILE)
}

/// The tiles of the layernorm-folded matmul (the ping-pong program's layernorm entry, sm_90a):
/// the 16-bit ping-pong tile and its narrow variant, never split nor clustered (the entry is
/// built without either).
pub const LAYERNORM_TILES: [MatmulTile; 2] = [TMA_TILES[2], NARROW_PINGPONG_TILE];

/// The layernorm matmul's tile for an `m` x `n` x `k` product on `sms` SMs: the narrow one
/// only within one wave, as `select_tile` allows it for the 16-bit ping-pong program, and
/// then the cheaper of the two by the cost model.
pub(crate) fn select_layernorm_tile(m: usize, n: usize, k: usize, sms: u32) -> MatmulTile {
    let programs = |t: &MatmulTile| {
        m.div_ceil(t.block_m as usize) as u64 * n.div_ceil(t.block_n as usize) as u64
    };
    let sms = sms.max(1) as u64;
    LAYERNORM_TILES
        .iter()
        .filter(|t| **t != NARROW_PINGPONG_TILE || programs(t) <= sms)
        .min_by_key(|t| t.cost(programs(t), sms, k as u64))
        .copied()
        .unwrap_or(LAYERNORM_TILES[0])
}

/// Every half-precision tile: the mma.sync ones (sm_80 and later), then the Hopper ones.
const HALF_TILES: [MatmulTile; 11] = [
    TENSOR_CORE_TILES[0],
    TENSOR_CORE_TILES[1],
    TENSOR_CORE_TILES[2],
    WGMMA_TILES[0],
    WGMMA_TILES[1],
    WGMMA_TILES[2],
    TMA_TILES[0],
    TMA_TILES[1],
    TMA_TILES[2],
    TMA_TILES[3],
    TMA_TILES[4],
];

/// The tile shapes the launcher chooses among for `dtype`, on any device (see
/// [`MatmulTile::runs_on`]). None for e4m3, which only the FP8 matmul reads (its own tiles,
/// `FP8_TILES`).
pub fn tiles_for(dtype: DType) -> &'static [MatmulTile] {
    match dtype {
        DType::F32 => &FMA_TILES,
        DType::F16 | DType::BF16 => &HALF_TILES,
        DType::E4M3 => &[],
    }
}

/// Shared memory of the main loop's stages (formulas as in the programs). Hopper tiles ask for
/// 1024 bytes more, to align their stages to the 128-byte swizzle's 1024-byte period.
pub(crate) fn pipeline_bytes(dtype: DType, t: &MatmulTile) -> u32 {
    match dtype {
        DType::F32 => 2 * t.block_k * (t.block_m + 1 + t.block_n + 1) * 4,
        DType::F16 | DType::BF16 if t.program.is_hopper() => {
            1024 + t.stages * (t.block_m + t.block_n) * t.block_k * 2
        }
        DType::F16 | DType::BF16 => t.stages * (t.block_m + t.block_n) * t.block_k * 2,
        // No tile of this launcher takes e4m3 (`tiles_for`); the FP8 program sizes its own.
        DType::E4M3 => 0,
    }
}

/// Shared memory of the epilogue's fp32 tile, rows padded (formulas as in epilogue.cuh).
pub(crate) fn staged_bytes(dtype: DType, t: &MatmulTile) -> u32 {
    match dtype {
        DType::F32 => t.block_m * (t.block_n + 16) * 4,
        DType::F16 | DType::BF16 => t.block_m * (t.block_n + 8) * 4,
        DType::E4M3 => 0,
    }
}

/// Whether every row a walk over (batch, heads, rows) of `view` touches starts on an
/// `elements`-element boundary from `base`, itself `elements · size`-byte aligned. Strides of
/// dimensions of extent 1 are never used, so they do not count.
pub(crate) fn rows_aligned(
    base: u64,
    size: usize,
    view: &Operand,
    extents: (usize, usize, usize),
    elements: usize,
) -> bool {
    let (batch, heads, rows) = extents;
    let bytes = (elements * size) as u64;
    let start = base + (view.offset * size) as u64;
    start.is_multiple_of(bytes)
        && (rows <= 1 || view.row_stride.is_multiple_of(elements))
        && (batch <= 1 || view.batch_stride.is_multiple_of(elements))
        && (heads <= 1 || view.head_stride.is_multiple_of(elements))
}

/// The tile shape the cost model prefers for `p` on a GPU with `sms` multiprocessors of
/// compute capability `cc`.
pub(crate) fn select_tile(dtype: DType, p: &MatmulProblem, sms: u32, cc: (u32, u32)) -> MatmulTile {
    let matrices = (p.batch * p.heads) as u64;
    let candidates = tiles_for(dtype);
    let mut best = candidates[0];
    let mut best_cost = u64::MAX;
    let programs_of = |tile: &MatmulTile| {
        matrices
            * p.m.div_ceil(tile.block_m as usize) as u64
            * p.n.div_ceil(tile.block_n as usize) as u64
    };
    // The Hopper tiles pay a pipeline fill the cost model does not count; below one full wave
    // of them the 64x64 mma.sync tiles win, except the ping-pong tile down to a quarter wave
    // and its narrow variant below one wave (measured with `vitrt tune`: benchmarks/NOTES.md,
    // 2026-11-22 "K-aware cost model").
    let enough_tiles = |tile: &MatmulTile| hopper_tile_has_enough(tile, programs_of(tile), sms);
    let usable = |tile: &MatmulTile| {
        tile.runs_on(cc)
            && !(tile.program.is_hopper() && p.b_layout == WeightLayout::KN)
            && (!tile.program.uses_tma() || single_nk_matrix(p))
            && (!tile.program.is_hopper() || enough_tiles(tile))
            && (*tile != DEEP_SMALL_TILE
                || (single_nk_matrix(p) && programs_of(tile) <= (sms * tile.ctas_per_sm) as u64))
    };
    for &tile in candidates.iter().filter(|t| usable(t)) {
        let cost = tile.cost(programs_of(&tile), sms.max(1) as u64, p.k as u64);
        if cost < best_cost {
            best = tile;
            best_cost = cost;
        }
    }
    best
}

/// Whether a Hopper tile making `programs` tiles on `sms` SMs is one `select_tile` considers.
/// The clustered ping-pong tile only from four full waves: below that, each CTA's walk is too
/// short for the shared A loads to pay for the clusters' coupled stages (measured with `vitrt
/// tune`: benchmarks/NOTES.md, 2026-11-25 "A multicast across a cluster of two").
fn hopper_tile_has_enough(tile: &MatmulTile, programs: u64, sms: u32) -> bool {
    let sms_u64 = sms as u64;
    if tile.cluster > 1 {
        return programs >= 4 * sms_u64;
    }
    // The narrow ping-pong tile only within one wave, where the 128-wide tiles leave SMs
    // idle: at batch 1 it runs qkv and fc1 1.2-1.4x faster than the wide one and proj
    // 1.23x faster than the deep small tile (fc2 alike); at batch 8 the wide tile wins
    // (measured with `vitrt tune`: benchmarks/NOTES.md, 2026-11-28 "A narrow ping-pong
    // tile for batch 1").
    if *tile == NARROW_PINGPONG_TILE {
        return programs <= sms_u64;
    }
    programs >= sms_u64 || (tile.program == Program::TmaPingPong && 4 * programs >= sms_u64)
}

/// The tiles of the matmul that writes row statistics beside a 16-bit stream
/// (`gpu::matmul_with_row_statistics`, the ping-pong program's
/// `matmul_block_tma_pingpong_stream16_stats`): the 16-bit ping-pong tiles, wide, clustered and
/// narrow (with its split-K).
pub const ROW_STATISTICS_TILES: [MatmulTile; 3] =
    [TMA_TILES[2], TMA_TILES[3], NARROW_PINGPONG_TILE];

/// The row-statistics matmul's tile for an `m` x `n` x `k` product on `sms` SMs: among
/// [`ROW_STATISTICS_TILES`], those `select_tile` would consider (the narrow one within one
/// wave, the clustered one from four), the cheapest by its cost model; the wide tile where
/// none is (never: the narrow tile takes what the wide one leaves).
pub(crate) fn select_row_statistics_tile(m: usize, n: usize, k: usize, sms: u32) -> MatmulTile {
    let programs = |t: &MatmulTile| {
        m.div_ceil(t.block_m as usize) as u64 * n.div_ceil(t.block_n as usize) as u64
    };
    let sms = sms.max(1);
    ROW_STATISTICS_TILES
        .iter()
        .filter(|t| hopper_tile_has_enough(t, programs(t), sms))
        .min_by_key(|t| t.cost(programs(t), sms as u64, k as u64))
        .copied()
        .unwrap_or(ROW_STATISTICS_TILES[0])
}

/// Whether `p` is one [M, K] x [N, K] matrix product with K > 0: what the warp-specialised
/// tiles (one tensor map per operand) and the deep small tile (registered for [N, K] only)
/// take. Row alignment is checked from the pointers, as for every 16-byte path.
pub(crate) fn single_nk_matrix(p: &MatmulProblem) -> bool {
    p.batch == 1 && p.heads == 1 && p.b_layout == WeightLayout::NK && p.k > 0
}

/// How a launch divides K (see `SplitK` in mma_sync.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitK {
    pub splits: u32,
    /// k-columns per split, a multiple of BLOCK_K.
    pub k: u32,
}

impl SplitK {
    pub const NONE: SplitK = SplitK { splits: 1, k: 0 };
}

/// The shortest split, in k-columns: below that its pipeline never fills (4 k-tiles of the
/// small tile, 2 of the deep one).
const MIN_K_PER_SPLIT: usize = 128;
const MAX_SPLITS: usize = 16;
/// The shortest K worth splitting. A split launch pays for its partials' writes and a
/// reduction that is a chain of L2 latencies in the tile's last CTA, several µs at batch 1: it
/// pays on fc2 (K = 3072) and loses on proj (K = 768) (measured: benchmarks/NOTES.md,
/// 2026-11-22 "split-K at batch 1").
const MIN_K_TO_SPLIT: usize = 1536;

/// Split-K for single matrices on the small mma.sync tile whose tiles cannot fill the GPU
/// (batch 1: fc2 makes 48 tiles on 132 SMs and reads its 4.7 MB of weights through them at
/// 0.31 of cuBLAS). Enough splits to put one round of CTAs on every SM, each split at least
/// MIN_K_PER_SPLIT k-columns long.
pub(crate) fn split_k(
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    programs: u64,
    sms: u32,
) -> SplitK {
    if dtype == DType::F32
        || (tile != SMALL_TENSOR_CORE_TILE && tile != DEEP_SMALL_TILE)
        || p.batch * p.heads != 1
        || programs >= sms as u64
        || p.k < MIN_K_TO_SPLIT
    {
        return SplitK::NONE;
    }
    let k_tiles = p.k.div_ceil(tile.block_k as usize);
    let capacity = sms as u64 * tile.ctas_per_sm as u64;
    let wanted = (capacity / programs.max(1)) as usize;
    let min_k_tiles = MIN_K_PER_SPLIT.div_ceil(tile.block_k as usize);
    let splits = wanted.min(k_tiles / min_k_tiles).min(MAX_SPLITS);
    if splits < 2 {
        return SplitK::NONE;
    }
    let per_split = k_tiles.div_ceil(splits);
    SplitK {
        splits: k_tiles.div_ceil(per_split) as u32,
        k: (per_split * tile.block_k as usize) as u32,
    }
}

/// The fewest k-tiles a split of the narrow ping-pong tile runs: its eight stages fill from
/// the first, and each split's partial costs a store and a load of 32 KB.
const MIN_PINGPONG_K_TILES_PER_SPLIT: usize = 4;

/// Split-K for the narrow ping-pong tiles (`SPLIT_K` in tma_pingpong.cu), whose walk takes at
/// most one tile a CTA: as many splits as keep every split's tile on an SM of its own
/// (`programs` tiles, `sms` SMs), an equal number of k-tiles each (the walk's k-steps are
/// counted per tile), at least MIN_PINGPONG_K_TILES_PER_SPLIT, K at least MIN_K_TO_SPLIT.
/// Batch-1 fc2 (24 tiles, 48 k-tiles): 4 splits of 12, 14.9 -> 13.3 µs; proj (K = 768) in 3
/// splits of 4 ran 7.6 -> 10.2 µs, its partials' round trip longer than the k-steps it spreads
/// (measured: benchmarks/NOTES.md, 2026-11-28 "A narrow ping-pong tile for batch 1").
pub(crate) fn pingpong_split_k(
    p: &MatmulProblem,
    tile: MatmulTile,
    programs: u64,
    sms: u32,
) -> SplitK {
    // The narrow tiles, 16-bit or FP8 (the only ping-pong tiles 64 columns wide).
    if tile.program != Program::TmaPingPong
        || tile.block_n != 64
        || p.k < MIN_K_TO_SPLIT
        || programs == 0
    {
        return SplitK::NONE;
    }
    let k_tiles = p.k.div_ceil(tile.block_k as usize);
    let fit = (sms as u64 / programs) as usize;
    let splits = (2..=fit.min(MAX_SPLITS))
        .rev()
        .find(|&s| k_tiles.is_multiple_of(s) && k_tiles / s >= MIN_PINGPONG_K_TILES_PER_SPLIT);
    match splits {
        Some(splits) => SplitK {
            splits: splits as u32,
            k: (k_tiles / splits * tile.block_k as usize) as u32,
        },
        None => SplitK::NONE,
    }
}

/// The partial tiles split-K can have in flight at once on a GPU of `sms` SMs: every CTA
/// of either splitting mma.sync tile fits on the GPU, 64 x 64 fp32 each; the narrow ping-pong
/// tile splits into at most one 128 x 64 tile an SM.
pub(crate) fn split_k_partial_bytes(sms: u32) -> usize {
    [
        SMALL_TENSOR_CORE_TILE,
        DEEP_SMALL_TILE,
        NARROW_PINGPONG_TILE,
    ]
    .iter()
    .map(|t| sms as usize * t.ctas_per_sm as usize * (t.block_m * t.block_n) as usize * 4)
    .max()
    .unwrap_or(0)
}

/// The GPU's multiprocessors, as the driver reports them now.
pub(crate) fn sm_count(gpu: &Gpu) -> Result<u32, KernelError> {
    gpu.context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map(|count| count.max(1) as u32)
        .map_err(|e| KernelError::driver("cuDeviceGetAttribute(multiprocessor count)", e))
}

/// The rows batch-invariant selection chooses a matmul's tile for, whatever its M: enough
/// for every tile to fill the GPU, so that the cost model's choice depends on N and K alone.
pub(crate) const INVARIANT_ROWS: usize = 1 << 20;

/// The rows a tile is chosen for on `gpu`: `m`, or [`INVARIANT_ROWS`] with batch-invariant
/// selection on ([`Gpu::batch_invariant`]).
pub(crate) fn selection_rows(gpu: &Gpu, m: usize) -> usize {
    if gpu.batch_invariant() {
        INVARIANT_ROWS
    } else {
        m
    }
}

/// The tile shape [`crate::matmul::gpu::matmul`] picks for `p` on `gpu` by the cost model
/// (the small tile instead when the operands turn out to need element loads); with
/// batch-invariant selection on ([`Gpu::batch_invariant`]), as for [`INVARIANT_ROWS`] rows.
pub fn matmul_tile_for(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
) -> Result<MatmulTile, KernelError> {
    let p = MatmulProblem {
        m: selection_rows(gpu, p.m),
        ..*p
    };
    Ok(select_tile(
        dtype,
        &p,
        sm_count(gpu)?,
        gpu.compute_capability(),
    ))
}
