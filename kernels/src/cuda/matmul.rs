//! The matmul launcher: picks a tile configuration for a [`MatmulProblem`] and launches
//! kernels/cuda/matmul.cu, the block program behind every linear layer, the patch embedding and
//! both attention products.
//!
//! A configuration is a tile shape ([`MatmulTile`]: BLOCK_M, BLOCK_N, BLOCK_K, pipeline stages,
//! warps), the storage dtype of A, B and the bias, those of the residual and of C (f32 where a
//! half-precision run keeps its residual stream in f32, see [`MixedOutput`]), the activation, B's layout, and whether A and B rows allow
//! 16-byte copies. Bias and residual are run-time arguments (null when absent); see the note at
//! `matmul_block` in the source. Every combination the launcher can pick is registered in
//! [`instantiations`], so CI compiles all of them.
//!
//! Choosing a tile: a small cost model ([`MatmulTile::cost`]) estimates how long the busiest SM
//! takes, from the number of tiles, how many CTAs of the shape one SM holds, and the shape's
//! measured speed. Large tiles win on large problems (fewer bytes moved per FLOP) unless their
//! last wave leaves SMs idle; small ones win when large tiles would leave most SMs idle
//! (batch-1 shapes, attention with few heads).

use super::{
    invalid, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::{Activation, DType, MatmulProblem, Operand, WeightLayout};
use cudarc::driver::sys::CUdevice_attribute;

pub(crate) const SOURCE: &str = include_str!("../../cuda/matmul.cu");

/// Tile rows per group of the grouped program order (Triton's GROUP_SIZE_M).
const GROUP_M: u32 = 8;

/// The dynamic shared memory an sm_90 CTA may opt into.
const SM90_SHARED_BYTES: u32 = 227 * 1024;

/// The ping-pong residual variant's residual buffers, 32 KB for each consumer warpgroup: half a
/// 128 x 128 tile of f32, or a whole one of 16-bit values (see `load_residual_parts` in
/// matmul.cu).
const PINGPONG_RESIDUAL_BYTES: u32 = 2 * 128 * 128 / 2 * 4;

/// One tile shape of the block program, and what it costs the SM that runs it.
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
    /// (H200, session 7: same M and N, K 768 and 3072): 742 for the cooperative 128x192, 348
    /// for the ping-pong tile, whose epilogue runs under the other warpgroup's main loop.
    pub overhead_k: u32,
    /// A Hopper tile (`matmul_block_wgmma`, sm_90a): warpgroup MMA from shared memory. Only
    /// for f16/bf16 with B as [N, K] and 16-byte aligned rows; `warps_m` counts its warps.
    pub wgmma: bool,
    /// A warp-specialised Hopper tile (`matmul_block_tma`, sm_90a): TMA copies on mbarriers, a
    /// persistent grid, BLOCK_M 128, 384 threads. Only for single [M, K] x [N, K] matrices
    /// with 16-byte aligned rows (every linear layer); `wgmma` is set too.
    pub tma: bool,
    /// A TMA tile whose two consumer warpgroups take alternate tiles (`matmul_block_tma_pingpong`):
    /// 288 threads, a producer warp; one warpgroup's epilogue overlaps the other's MMAs.
    pub pingpong: bool,
}

impl MatmulTile {
    pub fn threads(&self) -> u32 {
        self.warps_m * self.warps_n * 32
    }

    /// A short name: `128x128x32_s4_w2x2`, or `wg128x192x64_s5` for a Hopper tile.
    pub fn name(&self) -> String {
        if self.tma {
            return format!(
                "{}{}x{}x{}_s{}",
                if self.pingpong { "tmapp" } else { "tma" },
                self.block_m,
                self.block_n,
                self.block_k,
                self.stages
            );
        }
        if self.wgmma {
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

    /// Estimated run time (arbitrary units) of `programs` tiles on `sms` SMs: the busiest SM
    /// gets `ceil(programs / sms)` tiles and runs them in rounds of up to `ctas_per_sm`
    /// sharing it; a round takes as long as its tiles' work at the shape's speed, and a last,
    /// partial round as long as a full one (its CTAs run no faster for having the SM to
    /// themselves only in part).
    /// Whether a device of compute capability `cc` can run this tile.
    pub fn runs_on(&self, cc: (u32, u32)) -> bool {
        !(self.wgmma || self.tma) || cc == (9, 0)
    }

    fn cost(&self, programs: u64, sms: u64, k: u64) -> u64 {
        let per_sm = programs.div_ceil(sms);
        let concurrent = per_sm.min(self.ctas_per_sm as u64);
        let rounds = per_sm.div_ceil(self.ctas_per_sm as u64);
        let tile_work = (self.block_m * self.block_n) as u64 * (k + self.overhead_k as u64);
        rounds * concurrent * tile_work * 1000 / self.speed as u64
    }
}

const fn tile(
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
        wgmma: false,
        tma: false,
        pingpong: false,
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
        wgmma: true,
        tma: false,
        pingpong: false,
    }
}

/// A warp-specialised Hopper tile: 128 x BLOCK_N, BLOCK_K 64, one CTA per SM. Cooperative: a
/// producer warpgroup and two consumers sharing each tile (384 threads, `warps_m` 12);
/// ping-pong: two consumers on alternate tiles and a producer warp (288 threads, `warps_m` 9).
const fn tma_tile(block_n: u32, stages: u32, pingpong: bool, speed: u32) -> MatmulTile {
    MatmulTile {
        block_m: 128,
        block_n,
        block_k: 64,
        stages,
        warps_m: if pingpong { 9 } else { 12 },
        warps_n: 1,
        ctas_per_sm: 1,
        speed,
        overhead_k: if pingpong { 348 } else { SERIAL_EPILOGUE_K },
        wgmma: true,
        tma: true,
        pingpong,
    }
}

/// Tensor-core tiles (f16, bf16). Measured on an H100 (f16, ViT-B/16 shapes, see
/// `matmul_speed_report` in kernels/tests/gpu_matmul.rs), 128x128x32 with four warps of 64x64
/// was the fastest on every batch-64 GEMM (qkv, proj, fc1, fc2: 309 / 249 / 317 / 333 TFLOP/s),
/// ahead of 128x192x32 (8 warps; 240 / 220 / 246 / 303) and 128x128x64 in three stages (265 /
/// 216 / 278 / 274); an earlier build also tried 128x256 (BK 32 and 64, 8 warps) and 128x128
/// with eight warps of 64x32 (one CTA per SM for registers), both slower. 64x64x32 (32x32 warp tiles, ~250 TFLOP/s when the GPU is full) wins
/// whenever 128x128 tiles leave SMs idle: every batch-1 GEMM (M = 197) by 1.4-1.8x.
/// The small tile is also the one for operands whose rows do not allow 16-byte copies (see
/// [`configure`]); the deep one takes small single-matrix products (see [`DEEP_SMALL_TILE`]).
pub const TENSOR_CORE_TILES: [MatmulTile; 3] = [
    tile((128, 128, 32), 4, (2, 2), 2, 100),
    SMALL_TENSOR_CORE_TILE,
    DEEP_SMALL_TILE,
];

/// The tensor-core tile for small problems and for operands that need element loads.
const SMALL_TENSOR_CORE_TILE: MatmulTile = tile((64, 64, 32), 4, (2, 2), 4, 78);

/// The small tile with 6 stages of BK 64 (96 KB, two CTAs per SM) instead of 4 of BK 32: at
/// batch 1 every linear layer makes at most two 64 x 64 tiles per SM and each CTA streams its
/// weights with a memory latency per (stages - 1) k-tiles, so five 16 KB k-tiles in flight
/// instead of three 8 KB ones cut the latencies per tile by 3.3x. Measured (H200, f16, ViT-B/16,
/// same run): batch 1 0.722 -> 0.644 ms. It takes only what fits in one round of its CTAs
/// (see `select_tile`): at batch 8 proj and fc2 make 300 tiles, and with it 1.59 -> 1.92 ms.
/// Single [N, K] matrices with 16-byte rows only (see [`configure`]).
const DEEP_SMALL_TILE: MatmulTile = tile((64, 64, 64), 6, (2, 2), 2, 90);

/// CUDA-core FMA tiles (f32): 256 threads, 8x8 or 4x4 outputs per thread. Their speeds are
/// estimates, not yet measured: f32 is the parity path, not the fast one.
pub const FMA_TILES: [MatmulTile; 2] = [
    tile((128, 128, 16), 2, (2, 4), 1, 100),
    tile((64, 64, 16), 2, (2, 4), 3, 70),
];

/// Hopper tiles (sm_90a), for f16/bf16 linear layers. Speeds from their first measurement
/// (H200, f16, ViT-B/16 batch 64, no epilogue: 128x256 418 / 445 TFLOP/s on qkv / fc1,
/// 128x192 337 / 546 on proj / fc2, 128x128 385-422; the mma.sync 128x128 tile 250-330), set
/// so that the cost model picks what measured fastest on each of the four shapes; `vitrt tune`
/// measures instead. 128x192 and 128x256 take most of the SM's shared memory (one CTA per SM);
/// 128x128 in three stages fits twice (registers capped at 128 for it), so one CTA's epilogue
/// overlaps the other's main loop.
pub const WGMMA_TILES: [MatmulTile; 3] = [
    wgmma_tile((128, 192), 5, 1, 190),
    wgmma_tile((128, 256), 4, 1, 220),
    wgmma_tile((128, 128), 3, 2, 200),
];

/// Warp-specialised Hopper tiles (see [`MatmulTile::tma`] and [`MatmulTile::pingpong`]). The
/// ping-pong tile takes products whose C is in the operands' type without residual, and the
/// f32 residual stream (see `pingpong_takes`). Measured (H200, f16, batch 64, ms, against the
/// cooperative 128x192, session 7): qkv 0.0778 / 0.0933 without epilogue and 0.0779 / 0.0978
/// with bias; fc1 0.0973 / 0.1201 without and 0.1317 / 0.1700 with bias+GELU; proj 0.0339 /
/// 0.0371 without and 0.0509 / 0.0531 adding into the f32 stream in place; but fc2 (K = 3072)
/// 0.1039 / 0.0937 without and 0.1132 / 0.1106 into the stream: where the main loop is long the
/// overlapped epilogue saves less than the cooperative tile's fewer, larger tiles gain (N = 768
/// makes 4 columns of 192 against 6 of 128). `overhead_k` and the speeds let the cost model
/// draw that line (ping-pong for all four at batch 256, where nothing has been measured yet).
/// 128x256 fits only three stages beside the epilogue buffers.
pub const TMA_TILES: [MatmulTile; 3] = [
    tma_tile(192, 4, false, 240),
    tma_tile(256, 3, false, 200),
    tma_tile(128, 5, true, 220),
];

/// Every half-precision tile: the mma.sync ones (sm_80 and later), then the Hopper ones.
const HALF_TILES: [MatmulTile; 9] = [
    TENSOR_CORE_TILES[0],
    TENSOR_CORE_TILES[1],
    TENSOR_CORE_TILES[2],
    WGMMA_TILES[0],
    WGMMA_TILES[1],
    WGMMA_TILES[2],
    TMA_TILES[0],
    TMA_TILES[1],
    TMA_TILES[2],
];

/// The tile shapes the launcher chooses among for `dtype`, on any device (see
/// [`MatmulTile::runs_on`]).
pub fn tiles_for(dtype: DType) -> &'static [MatmulTile] {
    match dtype {
        DType::F32 => &FMA_TILES,
        DType::F16 | DType::BF16 => &HALF_TILES,
    }
}

/// Shared memory of the main loop's stages (formulas as in matmul.cu). Hopper tiles ask for
/// 1024 bytes more, to align their stages to the 128-byte swizzle's 1024-byte period.
fn pipeline_bytes(dtype: DType, t: &MatmulTile) -> u32 {
    match dtype {
        DType::F32 => 2 * t.block_k * (t.block_m + 1 + t.block_n + 1) * 4,
        DType::F16 | DType::BF16 if t.wgmma => {
            1024 + t.stages * (t.block_m + t.block_n) * t.block_k * 2
        }
        DType::F16 | DType::BF16 => t.stages * (t.block_m + t.block_n) * t.block_k * 2,
    }
}

/// Shared memory of the epilogue's fp32 tile, rows padded (formulas as in matmul.cu).
fn staged_bytes(dtype: DType, t: &MatmulTile) -> u32 {
    match dtype {
        DType::F32 => t.block_m * (t.block_n + 16) * 4,
        DType::F16 | DType::BF16 => t.block_m * (t.block_n + 8) * 4,
    }
}

/// Every meta-parameter of one matmul instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatmulConfig {
    /// Storage type of A, B and the bias.
    pub dtype: DType,
    /// Storage type of the residual (C's when there is none).
    pub residual: DType,
    /// Storage type of C.
    pub output: DType,
    pub tile: MatmulTile,
    pub activation: Activation,
    pub b_layout: WeightLayout,
    /// A and B rows start on 16-byte boundaries: tiles are fetched with 16-byte cp.async.
    pub vec16: bool,
    /// A residual is added. Only the ping-pong tile has a separate program for it (its
    /// residual variant); every other tile reads the residual pointer at run time.
    pub with_residual: bool,
}

impl MatmulConfig {
    /// Dynamic shared memory: the pipeline's stages, or what the epilogue keeps in the same
    /// memory afterwards (the fp32 tile with padded rows, then a residual tile in the storage
    /// type), whichever is larger (formulas as in matmul.cu).
    pub fn shared_bytes(&self) -> u32 {
        let t = &self.tile;
        if self.pingpong_residual() {
            // The stages that fit, each consumer warpgroup's residual buffer, then its tile of
            // bias.
            let stages = self.pingpong_residual_stages();
            return 1024
                + stages * (t.block_m + t.block_n) * t.block_k * 2
                + PINGPONG_RESIDUAL_BYTES
                + 2 * t.block_n * 2;
        }
        if t.pingpong {
            // The stages, then each consumer warpgroup's output tile in C's (16-bit) type, then
            // its tile of bias.
            return pipeline_bytes(self.dtype, t)
                + 2 * t.block_m * t.block_n * 2
                + 2 * t.block_n * 2;
        }
        if t.tma {
            // The stages, then each consumer warpgroup's 64 x 64 fp32 epilogue buffer (row
            // pitch 68); the barriers are static shared memory.
            return pipeline_bytes(self.dtype, t) + 2 * 64 * 68 * 4;
        }
        let residual = if self.stages_residual() {
            t.block_m * t.block_n * self.residual.size_bytes() as u32
        } else {
            0
        };
        pipeline_bytes(self.dtype, t).max(staged_bytes(self.dtype, t) + residual)
    }

    /// Whether this is the ping-pong tile's residual variant (`matmul_block_tma_pingpong_residual`):
    /// R and C f32 (the residual stream), or both in the operands' type.
    fn pingpong_residual(&self) -> bool {
        self.tile.pingpong
            && (MixedOutput::of(self.dtype, self.residual, self.output)
                == Some(MixedOutput::ResidualStream)
                || (self.with_residual && (self.residual, self.output) == (self.dtype, self.dtype)))
    }

    /// The residual variant's pipeline depth: the tile's, or as many stages as fit beside its
    /// residual and bias buffers in the 227 KB an sm_90 CTA may have (the barriers take the
    /// 256 bytes).
    fn pingpong_residual_stages(&self) -> u32 {
        let t = &self.tile;
        let stage = (t.block_m + t.block_n) * t.block_k * 2;
        let buffers = PINGPONG_RESIDUAL_BYTES + 2 * t.block_n * 2;
        t.stages
            .min((SM90_SHARED_BYTES - 1024 - 256 - buffers) / stage)
    }

    /// Threads per CTA: the tile's, and a residual loader warp for the ping-pong residual variant.
    pub fn threads(&self) -> u32 {
        self.tile.threads() + if self.pingpong_residual() { 32 } else { 0 }
    }

    /// Whether the epilogue fetches residual runs into shared memory (`kStageResidual` in
    /// matmul.cu). mma.sync tiles: not for an f32 residual of a half-precision tile larger than
    /// 64x64, whose residual tile would leave no room for the SM's second CTA. Hopper tiles:
    /// where it adds at most 8 KB to what the pipeline takes.
    fn stages_residual(&self) -> bool {
        let t = &self.tile;
        if t.wgmma {
            let residual = t.block_m * t.block_n * self.residual.size_bytes() as u32;
            return staged_bytes(self.dtype, t) + residual <= pipeline_bytes(self.dtype, t) + 8192;
        }
        self.residual.size_bytes() == self.dtype.size_bytes() || t.block_m * t.block_n <= 64 * 64
    }

    pub fn instantiation(&self) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let layout = match self.b_layout {
            WeightLayout::NK => "nk",
            WeightLayout::KN => "kn",
        };
        // Uniform instantiations keep their short names; mixed ones spell R's and C's types.
        let mixed = if (self.residual, self.output) == (d, d) {
            String::new()
        } else {
            format!("_r{}_c{}", self.residual.name(), self.output.name())
        };
        if t.tma {
            return self.tma_instantiation(mixed);
        }
        let name = if t.wgmma {
            format!(
                "matmul_{}_wg_bm{}_bn{}_bk{}_g{GROUP_M}_s{}_{}_{layout}{mixed}",
                d.name(),
                t.block_m,
                t.block_n,
                t.block_k,
                t.stages,
                self.activation.short_name(),
            )
        } else {
            format!(
                "matmul_{}_bm{}_bn{}_bk{}_g{GROUP_M}_s{}_w{}x{}_{}_{layout}_{}{mixed}",
                d.name(),
                t.block_m,
                t.block_n,
                t.block_k,
                t.stages,
                t.warps_m,
                t.warps_n,
                self.activation.short_name(),
                if self.vec16 { "v16" } else { "v1" },
            )
        };
        let mut params = vec![
            KernelParam::new("a", ParamKind::ConstPtr(d)),
            KernelParam::new("b", ParamKind::ConstPtr(d)),
            KernelParam::new("bias", ParamKind::ConstPtr(d)),
            KernelParam::new("residual", ParamKind::ConstPtr(self.residual)),
            KernelParam::new("c", ParamKind::MutPtr(self.output)),
            KernelParam::new("heads", ParamKind::I32),
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
        ];
        for names in VIEW_PARAM_NAMES {
            params.extend(
                names
                    .iter()
                    .map(|&name| KernelParam::new(name, ParamKind::I64)),
            );
        }
        params.push(KernelParam::new("alpha", ParamKind::F32));
        params.push(KernelParam::new("vector_epilogue", ParamKind::I32));
        let mut template_args = vec![
            d.cuda_type().into(),
            self.residual.cuda_type().into(),
            self.output.cuda_type().into(),
            t.block_m.to_string(),
            t.block_n.to_string(),
            t.block_k.to_string(),
            GROUP_M.to_string(),
            t.stages.to_string(),
        ];
        if t.wgmma {
            template_args.push(self.activation.cuda_name().into());
            return Instantiation {
                name,
                family: "matmul",
                source: SOURCE,
                function: "matmul_block_wgmma",
                template_args,
                params,
                block_threads: t.threads(),
                // Tiles meant to share an SM must fit its registers twice.
                min_blocks_per_sm: if t.ctas_per_sm > 1 { t.ctas_per_sm } else { 0 },
                // wgmma exists on sm_90a only.
                arch: ArchRequirement::Exactly(9, 0),
            };
        }
        template_args.extend([
            t.warps_m.to_string(),
            t.warps_n.to_string(),
            self.activation.cuda_name().into(),
            (self.b_layout == WeightLayout::KN).to_string(),
            self.vec16.to_string(),
        ]);
        params.extend([
            KernelParam::new("splits", ParamKind::I32),
            KernelParam::new("split_k", ParamKind::I32),
            KernelParam::new("split_partials", ParamKind::MutPtr(DType::F32)),
            KernelParam::new("split_counters", ParamKind::CounterPtr),
        ]);
        Instantiation {
            name,
            family: "matmul",
            source: SOURCE,
            function: "matmul_block",
            template_args,
            params,
            block_threads: t.threads(),
            min_blocks_per_sm: 0,
            // cp.async, ldmatrix and bf16 mma.sync need sm_80.
            arch: ArchRequirement::AtLeast(8, 0),
        }
    }
}

impl MatmulConfig {
    /// The warp-specialised Hopper instantiation: A and B as tensor maps, one matrix.
    fn tma_instantiation(&self, mixed: String) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        if t.pingpong {
            return self.pingpong_instantiation();
        }
        let name = format!(
            "matmul_{}_tma_bn{}_s{}_g{GROUP_M}_{}_nk{mixed}",
            d.name(),
            t.block_n,
            t.stages,
            self.activation.short_name(),
        );
        let params = vec![
            KernelParam::new("a_map", ParamKind::TensorMap),
            KernelParam::new("b_map", ParamKind::TensorMap),
            KernelParam::new("bias", ParamKind::ConstPtr(d)),
            KernelParam::new("residual", ParamKind::ConstPtr(self.residual)),
            KernelParam::new("c", ParamKind::MutPtr(self.output)),
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
            KernelParam::new("c_offset", ParamKind::I64),
            KernelParam::new("c_row_stride", ParamKind::I64),
            KernelParam::new("r_offset", ParamKind::I64),
            KernelParam::new("r_row_stride", ParamKind::I64),
            KernelParam::new("alpha", ParamKind::F32),
            KernelParam::new("vector_epilogue", ParamKind::I32),
        ];
        Instantiation {
            name,
            family: "matmul",
            source: SOURCE,
            function: "matmul_block_tma",
            template_args: vec![
                d.cuda_type().into(),
                self.residual.cuda_type().into(),
                self.output.cuda_type().into(),
                t.block_n.to_string(),
                t.stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().into(),
            ],
            params,
            block_threads: t.threads(),
            // setmaxnreg moves registers between the warpgroups only under a cap at entry.
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

impl MatmulConfig {
    /// The ping-pong Hopper instantiation: A, B and C as tensor maps, one matrix, no residual,
    /// C in the operands' type; or R as a tensor map and C as a pointer for the f32 residual
    /// stream (see `pingpong_takes` for what the launcher sends it).
    fn pingpong_instantiation(&self) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let residual = self.pingpong_residual();
        let stages = if residual {
            self.pingpong_residual_stages()
        } else {
            t.stages
        };
        let mut params = vec![
            KernelParam::new("a_map", ParamKind::TensorMap),
            KernelParam::new("b_map", ParamKind::TensorMap),
        ];
        let stream16 = residual && self.output != DType::F32;
        if stream16 {
            params.extend([
                KernelParam::new("r_map", ParamKind::TensorMap),
                KernelParam::new("c_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
            ]);
        } else if residual {
            params.extend([
                KernelParam::new("r_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
                KernelParam::new("c", ParamKind::MutPtr(DType::F32)),
                KernelParam::new("c_row_stride", ParamKind::I64),
            ]);
        } else {
            params.extend([
                KernelParam::new("c_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
            ]);
        }
        params.extend([
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
            KernelParam::new("alpha", ParamKind::F32),
        ]);
        Instantiation {
            name: format!(
                "matmul_{}_tmapp_bn{}_s{stages}_g{GROUP_M}_{}_nk{}",
                d.name(),
                t.block_n,
                self.activation.short_name(),
                match (residual, self.output) {
                    (false, _) => "",
                    (true, DType::F32) => "_rf32_cf32",
                    (true, _) => "_res",
                },
            ),
            family: "matmul",
            source: SOURCE,
            function: if stream16 {
                "matmul_block_tma_pingpong_stream16"
            } else if residual {
                "matmul_block_tma_pingpong_residual"
            } else {
                "matmul_block_tma_pingpong"
            },
            template_args: vec![
                d.cuda_type().into(),
                t.block_n.to_string(),
                stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().into(),
            ],
            params,
            block_threads: self.threads(),
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// The wrapper's stride parameters, one group per operand view (A, B, C, residual).
const VIEW_PARAM_NAMES: [[&str; 4]; 4] = [
    [
        "a_offset",
        "a_row_stride",
        "a_batch_stride",
        "a_head_stride",
    ],
    [
        "b_offset",
        "b_row_stride",
        "b_batch_stride",
        "b_head_stride",
    ],
    [
        "c_offset",
        "c_row_stride",
        "c_batch_stride",
        "c_head_stride",
    ],
    [
        "r_offset",
        "r_row_stride",
        "r_batch_stride",
        "r_head_stride",
    ],
];

/// The (residual, C) storage types a half-precision matmul may use besides its own: a linear
/// layer that adds into an f32 residual stream (R and C f32, any activation), and the patch
/// projection, which writes the stream's first values with the position embeddings (stored
/// like the weights) as its residual (R the weights' type, C f32, no activation). Both only
/// with B as [N, K] weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MixedOutput {
    /// R and C f32.
    ResidualStream,
    /// R in the operands' type, C f32.
    StreamStart,
}

impl MixedOutput {
    fn of(dtype: DType, residual: DType, output: DType) -> Option<MixedOutput> {
        match (residual, output) {
            (DType::F32, DType::F32) if dtype != DType::F32 => Some(MixedOutput::ResidualStream),
            (r, DType::F32) if r == dtype && dtype != DType::F32 => Some(MixedOutput::StreamStart),
            _ => None,
        }
    }

    fn allows(self, activation: Activation, b_layout: WeightLayout) -> bool {
        b_layout == WeightLayout::NK
            && (self == MixedOutput::ResidualStream || activation == Activation::None)
    }
}

/// Every instantiation [`launch`] can pick.
pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        let storage: &[(DType, DType)] = match dtype {
            DType::F32 => &[(DType::F32, DType::F32)],
            _ => &[
                (dtype, dtype),
                (DType::F32, DType::F32),
                (dtype, DType::F32),
            ],
        };
        for &tile in tiles_for(dtype) {
            let vec16_choices: &[bool] = match dtype {
                DType::F32 => &[false],
                _ if tile == SMALL_TENSOR_CORE_TILE => &[true, false],
                _ => &[true],
            };
            // Hopper tiles and the deep small tile take [N, K] weights only (see `configure`).
            let layouts: &[WeightLayout] = if tile.wgmma || tile == DEEP_SMALL_TILE {
                &[WeightLayout::NK]
            } else {
                &[WeightLayout::NK, WeightLayout::KN]
            };
            for activation in Activation::ALL {
                for &b_layout in layouts {
                    for &(residual, output) in storage {
                        if MixedOutput::of(dtype, residual, output)
                            .is_some_and(|mixed| !mixed.allows(activation, b_layout))
                            || (tile.pingpong
                                && (residual, output) != (dtype, dtype)
                                && (residual, output) != (DType::F32, DType::F32))
                        {
                            continue;
                        }
                        // The ping-pong tile has a program without and one with a residual in
                        // the operands' type; the f32 stream always has one.
                        let with_residual: &[bool] = if !tile.pingpong {
                            &[false]
                        } else if output == DType::F32 {
                            &[true]
                        } else {
                            &[false, true]
                        };
                        for &vec16 in vec16_choices {
                            for &with_residual in with_residual {
                                let config = MatmulConfig {
                                    dtype,
                                    residual,
                                    output,
                                    tile,
                                    activation,
                                    b_layout,
                                    vec16,
                                    with_residual,
                                };
                                all.push(config.instantiation());
                            }
                        }
                    }
                }
            }
        }
    }
    all
}

/// Whether every row a walk over (batch, heads, rows) of `view` touches starts on an
/// `elements`-element boundary from `base`, itself `elements · size`-byte aligned. Strides of
/// dimensions of extent 1 are never used, so they do not count.
fn rows_aligned(
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
    // of them the 64x64 mma.sync tiles win (`vitrt tune` at batch 1: 1.4x on qkv and fc1),
    // except the ping-pong tile down to a quarter wave. `vitrt tune`, H200, f16, ms, against
    // the small tiles: batch-8 fc2 (78 tiles) 0.0257 / 0.0413 and proj 0.0140 / 0.0159,
    // batch-1 qkv (36) 0.0099 / 0.0116, fc1 (48) 0.0123 / 0.0124; batch-1 proj and fc2 (12)
    // stay on the deep small tile.
    let sms_u64 = sms as u64;
    let enough_tiles = |tile: &MatmulTile| {
        let programs = programs_of(tile);
        programs >= sms_u64 || (tile.pingpong && 4 * programs >= sms_u64)
    };
    let usable = |tile: &MatmulTile| {
        tile.runs_on(cc)
            && !(tile.wgmma && p.b_layout == WeightLayout::KN)
            && (!tile.tma || single_nk_matrix(p))
            && (!tile.wgmma || enough_tiles(tile))
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

/// The configuration for `p` with tile `tile`, from the actual pointers' alignment. Tensor-core
/// problems whose A or B rows are not 16-byte aligned (odd head dims such as 18, offsets into
/// the middle of a row) run on the small tile whatever `tile` says: element loads make them
/// slow anyway, and it keeps the big tiles to one load path, half the instantiations.
fn configure(
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> MatmulConfig {
    let size = dtype.size_bytes();
    let b_rows = match p.b_layout {
        WeightLayout::NK => p.n,
        WeightLayout::KN => p.k,
    };
    let vec16 = dtype != DType::F32
        && rows_aligned(a.ptr, size, &p.a, (p.batch, p.heads, p.m), 16 / size)
        && rows_aligned(b.ptr, size, &p.b, (p.batch, p.heads, b_rows), 16 / size);
    let tile = if dtype != DType::F32 && !vec16 {
        SMALL_TENSOR_CORE_TILE
    } else if tile.wgmma && p.b_layout == WeightLayout::KN {
        // The Hopper body reads B K-major only: [K, N] operands (P·V) take the mma.sync tile.
        TENSOR_CORE_TILES[0]
    } else if tile == DEEP_SMALL_TILE && !single_nk_matrix(p) {
        // Registered for single [N, K] matrices only (batch 1's linear layers).
        SMALL_TENSOR_CORE_TILE
    } else if tile.tma && !single_nk_matrix(p) {
        // Tensor maps here describe one matrix each: batched products take the cp.async body.
        WGMMA_TILES[0]
    } else if tile.pingpong && !pingpong_takes(dtype, p, residual, c) {
        // The ping-pong tile stores C through a tensor map, without residual.
        TMA_TILES[0]
    } else {
        tile
    };
    MatmulConfig {
        dtype,
        residual: residual.map_or(c.dtype, |r| r.dtype),
        output: c.dtype,
        tile,
        activation: p.epilogue.activation,
        b_layout: p.b_layout,
        vec16,
        with_residual: residual.is_some(),
    }
}

/// Whether the ping-pong tile's epilogue can write `p`'s C: without residual, C in the
/// operands' type; with one, R and C both f32 (the residual stream) or both in the operands'
/// type. Their rows on 16-byte boundaries, what a tensor map requires.
fn pingpong_takes(dtype: DType, p: &MatmulProblem, residual: Option<DevPtr>, c: DevPtr) -> bool {
    let aligned = |ptr: DevPtr, view: &Operand| {
        let size = ptr.dtype.size_bytes();
        rows_aligned(ptr.ptr, size, view, (1, 1, p.m), 16 / size)
    };
    match residual {
        None => c.dtype == dtype && aligned(c, &p.c),
        Some(r) => {
            ((r.dtype, c.dtype) == (DType::F32, DType::F32) || (r.dtype, c.dtype) == (dtype, dtype))
                && aligned(r, &p.r)
                && aligned(c, &p.c)
        }
    }
}

/// Whether `p` is one [M, K] x [N, K] matrix product with K > 0: what the warp-specialised
/// tiles (one tensor map per operand) and the deep small tile (registered for [N, K] only)
/// take. Row alignment is checked from the pointers, as for every 16-byte path.
fn single_nk_matrix(p: &MatmulProblem) -> bool {
    p.batch == 1 && p.heads == 1 && p.b_layout == WeightLayout::NK && p.k > 0
}

/// How a launch divides K (see `SplitK` in matmul.cu).
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
/// reduction that is a chain of L2 latencies in the tile's last CTA, several µs at batch 1;
/// measured (H200, f16, batch 1, small tile): fc2 (K = 3072) from 29.6 to 18.8 µs with 11
/// splits, proj (K = 768) from 11.6 to 13.3 µs with 6, a loss.
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

/// The partial tiles split-K can have in flight at once on a GPU of `sms` SMs: every CTA
/// either splitting tile fits on the GPU, 64 x 64 fp32 each.
pub(crate) fn split_k_partial_bytes(sms: u32) -> usize {
    [SMALL_TENSOR_CORE_TILE, DEEP_SMALL_TILE]
        .iter()
        .map(|t| sms as usize * t.ctas_per_sm as usize * (t.block_m * t.block_n) as usize * 4)
        .max()
        .unwrap_or(0)
}

/// A 2-D TMA tensor map over `rows` rows of `cols` elements starting at `base` (bytes),
/// rows `row_stride` elements apart, read in 128-byte-swizzled boxes of 64 x `box_rows`
/// (zero-filled past the edges).
fn tensor_map(
    dtype: DType,
    base: u64,
    rows: usize,
    cols: usize,
    row_stride: usize,
    box_rows: u32,
) -> Result<[u64; 16], KernelError> {
    use cudarc::driver::sys::{
        cuTensorMapEncodeTiled, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
        CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
    };
    let data_type = match dtype {
        DType::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let size = dtype.size_bytes() as u64;
    let dims = [cols as u64, rows as u64];
    let strides = [row_stride as u64 * size];
    // One 128-byte swizzle row per box row.
    let boxes = [128 / size as u32, box_rows];
    let element_strides = [1u32, 1];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: every array has the rank's length (strides one less), and `map` is the output.
    let result = unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    result
        .result()
        .map_err(|e| KernelError::driver("cuTensorMapEncodeTiled", e))?;
    // SAFETY: the driver wrote the map.
    Ok(unsafe { map.assume_init() }.opaque)
}

fn sm_count(gpu: &Gpu) -> Result<u32, KernelError> {
    gpu.context
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map(|count| count.max(1) as u32)
        .map_err(|e| KernelError::driver("cuDeviceGetAttribute(multiprocessor count)", e))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    // A tile tuned for this problem on this device (tuning.rs) wins over the cost model.
    let storage = super::MatmulStorage {
        output: c.dtype,
        residual: residual.filter(|_| p.epilogue.residual).map(|r| r.dtype),
    };
    let tile = match gpu.tuned_matmul_tile(dtype, p, storage) {
        Some(tile) => tile,
        None => select_tile(dtype, p, sm_count(gpu)?, gpu.compute_capability()),
    };
    launch_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c)
}

impl Gpu {
    /// The tile shape [`Gpu::matmul`] picks for `p` on this device.
    /// (The small tile instead when the operands turn out to need element loads.)
    pub fn matmul_tile_for(
        &self,
        dtype: DType,
        p: &MatmulProblem,
    ) -> Result<MatmulTile, KernelError> {
        Ok(select_tile(
            dtype,
            p,
            sm_count(self)?,
            self.compute_capability(),
        ))
    }

    /// [`Gpu::matmul`] with the tile shape forced instead of chosen: for tuning and for
    /// benchmarks that compare tile shapes. `tile` must be one of [`tiles_for`]`(dtype)`.
    /// f16/bf16 operands whose rows are not 16-byte aligned still run on the small tile.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_with_tile(
        &self,
        dtype: DType,
        p: &MatmulProblem,
        tile: MatmulTile,
        a: DevPtr,
        b: DevPtr,
        bias: Option<DevPtr>,
        residual: Option<DevPtr>,
        c: DevPtr,
    ) -> Result<(), KernelError> {
        if !tiles_for(dtype).contains(&tile) {
            return Err(invalid!(
                "tile {} is not one of the {dtype} matmul tiles",
                tile.name()
            ));
        }
        if !tile.runs_on(self.compute_capability()) {
            let (major, minor) = self.compute_capability();
            return Err(invalid!(
                "tile {} needs an sm_90 GPU (wgmma); this one is sm_{major}{minor}",
                tile.name()
            ));
        }
        launch_with_tile(self, dtype, p, tile, a, b, bias, residual, c)
    }
}

/// Checks every view's dtype and length against the problem; returns the bias and residual
/// the epilogue actually reads (`None` where the epilogue does not ask for one, even if given).
fn validate(
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(Option<DevPtr>, Option<DevPtr>), KernelError> {
    let bias = if p.epilogue.bias { bias } else { None };
    let residual = if p.epilogue.residual { residual } else { None };
    for (what, view) in [("A", Some(a)), ("B", Some(b)), ("bias", bias)] {
        if let Some(view) = view {
            view.expect(&format!("matmul {what}"), dtype, 0)?;
        }
    }
    // C, and the residual, hold the operands' type, or f32 where MixedOutput allows it.
    let residual_dtype = residual.map_or(c.dtype, |r| r.dtype);
    if (residual_dtype, c.dtype) != (dtype, dtype) {
        let allowed = MixedOutput::of(dtype, residual_dtype, c.dtype)
            .is_some_and(|mixed| mixed.allows(p.epilogue.activation, p.b_layout));
        if !allowed {
            let residual_part = match residual {
                Some(r) => format!(", residual {}", r.dtype),
                None => String::new(),
            };
            return Err(invalid!(
                "matmul C holds {}{residual_part} with {dtype} operands, {:?} and B as {:?}: \
                 not a combination the kernels are built for",
                c.dtype,
                p.epilogue.activation,
                p.b_layout
            ));
        }
    }
    p.check_bounds(
        a.len,
        b.len,
        c.len,
        bias.map(|v| v.len),
        residual.map(|v| v.len),
    )
    .map_err(KernelError::InvalidArgument)?;
    Ok((bias, residual))
}

#[allow(clippy::too_many_arguments)]
fn launch_with_tile(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    let (bias, residual) = validate(dtype, p, a, b, bias, residual, c)?;
    if p.batch == 0 || p.heads == 0 || p.m == 0 || p.n == 0 {
        return Ok(());
    }

    let config = configure(dtype, p, tile, a, b, residual, c);
    let tile = config.tile;
    let extents = (p.batch, p.heads, p.m);
    let c_rows_aligned = rows_aligned(c.ptr, c.dtype.size_bytes(), &p.c, extents, 4);
    let r_rows_aligned =
        residual.is_none_or(|r| rows_aligned(r.ptr, r.dtype.size_bytes(), &p.r, extents, 4));
    let bias_aligned = bias.is_none_or(|v| v.is_aligned(4 * dtype.size_bytes() as u64));
    let vector_epilogue = c_rows_aligned && r_rows_aligned && bias_aligned;

    let programs = (p.batch as u64)
        .checked_mul(p.heads as u64)
        .and_then(|x| x.checked_mul(p.m.div_ceil(tile.block_m as usize) as u64))
        .and_then(|x| x.checked_mul(p.n.div_ceil(tile.block_n as usize) as u64))
        .filter(|&x| x <= i32::MAX as u64)
        .ok_or_else(|| {
            invalid!(
                "matmul {}x{}x{} over {}x{} matrices needs more than 2^31 programs",
                p.m,
                p.n,
                p.k,
                p.batch,
                p.heads
            )
        })?;

    if tile.tma {
        let size = dtype.size_bytes() as u64;
        let map = |ptr: u64, offset: usize, rows, row_stride, box_rows| {
            tensor_map(
                dtype,
                ptr + offset as u64 * size,
                rows,
                p.k,
                row_stride,
                box_rows,
            )
            .map(KernelArg::TensorMap)
        };
        let a_map = map(a.ptr, p.a.offset, p.m, p.a.row_stride, tile.block_m)?;
        let b_map = map(b.ptr, p.b.offset, p.n, p.b.row_stride, tile.block_n)?;
        let bias = KernelArg::Ptr(bias.map_or(0, |v| v.ptr));
        let (m, n, k) = (
            KernelArg::I32(to_i32(p.m, "matmul m")?),
            KernelArg::I32(to_i32(p.n, "matmul n")?),
            KernelArg::I32(to_i32(p.k, "matmul k")?),
        );
        let alpha = KernelArg::F32(p.epilogue.alpha);
        // C written through a tensor map of boxes of 64 columns x 128 rows.
        let c_map = || {
            tensor_map(
                dtype,
                c.ptr + p.c.offset as u64 * size,
                p.m,
                p.n,
                p.c.row_stride,
                tile.block_m,
            )
            .map(KernelArg::TensorMap)
        };
        let args = if config.pingpong_residual() && c.dtype != DType::F32 {
            // A 16-bit stream: R and C both through tensor maps, as C's layout.
            let r = residual.expect("a residual variant has R");
            let r_map = KernelArg::TensorMap(tensor_map(
                dtype,
                r.ptr + p.r.offset as u64 * size,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?);
            vec![a_map, b_map, r_map, c_map()?, bias, m, n, k, alpha]
        } else if config.pingpong_residual() {
            let (r, c_row_stride) = (residual.expect("a residual variant has R"), p.c.row_stride);
            // R is read through a tensor map of boxes of 32 columns x 128 rows.
            let r_map = KernelArg::TensorMap(tensor_map(
                DType::F32,
                r.ptr + p.r.offset as u64 * 4,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?);
            vec![
                a_map,
                b_map,
                r_map,
                bias,
                KernelArg::Ptr(c.ptr + p.c.offset as u64 * 4),
                KernelArg::I64(to_i64(c_row_stride)?),
                m,
                n,
                k,
                alpha,
            ]
        } else if tile.pingpong {
            vec![a_map, b_map, c_map()?, bias, m, n, k, alpha]
        } else {
            vec![
                a_map,
                b_map,
                bias,
                KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
                KernelArg::Ptr(c.ptr),
                m,
                n,
                k,
                KernelArg::I64(to_i64(p.c.offset)?),
                KernelArg::I64(to_i64(p.c.row_stride)?),
                KernelArg::I64(to_i64(p.r.offset)?),
                KernelArg::I64(to_i64(p.r.row_stride)?),
                alpha,
                KernelArg::I32(vector_epilogue as i32),
            ]
        };
        // Persistent: one CTA per SM, each walking the tiles in steps of the grid.
        let grid = programs.min(sm_count(gpu)? as u64);
        return gpu.launch(
            &config.instantiation(),
            LaunchDims {
                grid: (grid as u32, 1, 1),
                block: config.threads(),
                shared_bytes: config.shared_bytes(),
            },
            &args,
        );
    }
    let mut args = vec![
        KernelArg::Ptr(a.ptr),
        KernelArg::Ptr(b.ptr),
        KernelArg::Ptr(bias.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(c.ptr),
        KernelArg::I32(to_i32(p.heads, "matmul heads")?),
        KernelArg::I32(to_i32(p.m, "matmul m")?),
        KernelArg::I32(to_i32(p.n, "matmul n")?),
        KernelArg::I32(to_i32(p.k, "matmul k")?),
    ];
    for view in [&p.a, &p.b, &p.c, &p.r] {
        for value in [
            view.offset,
            view.row_stride,
            view.batch_stride,
            view.head_stride,
        ] {
            args.push(KernelArg::I64(to_i64(value)?));
        }
    }
    args.push(KernelArg::F32(p.epilogue.alpha));
    args.push(KernelArg::I32(vector_epilogue as i32));
    // Hopper tiles never split (split_k takes the small mma.sync tile only), and their entry
    // point has no split parameters.
    let split = split_k(dtype, p, tile, programs, gpu.multiprocessors());
    if !tile.wgmma {
        let (partials, counters) = if split.splits > 1 {
            gpu.split_k_scratch()?
        } else {
            (0, 0)
        };
        args.extend([
            KernelArg::I32(split.splits as i32),
            KernelArg::I32(split.k as i32),
            KernelArg::Ptr(partials),
            KernelArg::Ptr(counters),
        ]);
    }

    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: ((programs * split.splits as u64) as u32, 1, 1),
            block: tile.threads(),
            shared_bytes: config.shared_bytes(),
        },
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Epilogue;

    /// `configure` for a problem whose C and residual hold the operands' type.
    fn configure_uniform(
        dtype: DType,
        p: &MatmulProblem,
        tile: MatmulTile,
        a: DevPtr,
        b: DevPtr,
    ) -> MatmulConfig {
        configure(dtype, p, tile, a, b, None, fake(0x3000, dtype))
    }

    fn fake(ptr: u64, dtype: DType) -> DevPtr {
        DevPtr {
            ptr,
            len: usize::MAX,
            dtype,
        }
    }

    #[test]
    fn selection_only_picks_registered_instantiations() {
        let registered = instantiations();
        let dims = [1usize, 7, 18, 64, 197, 768, 1000, 3072, 12608];
        for dtype in DType::ALL {
            for &m in &dims {
                for &n in &dims {
                    for (k, a_offset) in [(64usize, 0usize), (18, 0), (768, 3)] {
                        for layout in [WeightLayout::NK, WeightLayout::KN] {
                            for activation in Activation::ALL {
                                let mut p = MatmulProblem::linear(
                                    m,
                                    n,
                                    k,
                                    Epilogue {
                                        activation,
                                        ..Epilogue::NONE
                                    },
                                );
                                p.a.offset = a_offset;
                                p.b_layout = layout;
                                let tile = select_tile(dtype, &p, 132, (8, 0));
                                let config = configure_uniform(
                                    dtype,
                                    &p,
                                    tile,
                                    fake(0x1000, dtype),
                                    fake(0x2000, dtype),
                                );
                                assert!(registered.contains(&config.instantiation()), "{config:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sixteen_byte_copies_only_where_every_row_is_aligned() {
        let dtype = DType::F16;
        let tile = TENSOR_CORE_TILES[0];
        let aligned = MatmulProblem::linear(197, 768, 768, Epilogue::NONE);
        let config = |p: &MatmulProblem, a: u64| {
            configure_uniform(dtype, p, tile, fake(a, dtype), fake(0x2000, dtype)).vec16
        };
        assert!(config(&aligned, 0x1000));
        assert!(!config(&aligned, 0x1002), "base pointer 2 bytes off");
        let mut odd_k = MatmulProblem::linear(197, 768, 18, Epilogue::NONE);
        assert!(
            !config(&odd_k, 0x1000),
            "rows of 18 halves are 36 bytes apart"
        );
        odd_k.a.row_stride = 24;
        odd_k.b.row_stride = 24;
        assert!(
            config(&odd_k, 0x1000),
            "padded rows: K itself need not be a multiple of 8"
        );
        let mut heads = MatmulProblem::linear(197, 197, 64, Epilogue::NONE);
        heads.heads = 12;
        heads.a.head_stride = 64;
        heads.b.head_stride = 64;
        assert!(config(&heads, 0x1000));
        heads.a.head_stride = 18;
        assert!(!config(&heads, 0x1000), "head 1 starts 36 bytes in");
        heads.heads = 1;
        assert!(
            config(&heads, 0x1000),
            "the head stride of a single head is never used"
        );
        assert!(
            !configure_uniform(
                DType::F32,
                &aligned,
                FMA_TILES[0],
                fake(0x1000, DType::F32),
                fake(0x2000, DType::F32)
            )
            .vec16
        );
        // Element loads only on the small tile.
        let unaligned = configure_uniform(
            dtype,
            &aligned,
            tile,
            fake(0x1002, dtype),
            fake(0x2000, dtype),
        );
        assert_eq!(unaligned.tile, SMALL_TENSOR_CORE_TILE);
        assert_eq!(
            configure_uniform(
                dtype,
                &aligned,
                tile,
                fake(0x1000, dtype),
                fake(0x2000, dtype)
            )
            .tile,
            tile
        );
    }

    #[test]
    fn the_cost_model_prefers_full_waves_and_small_tiles_for_small_problems() {
        let big = MatmulProblem::linear(12608, 768, 768, Epilogue::NONE);
        let small = MatmulProblem::linear(197, 768, 768, Epilogue::NONE);
        let small_tile = select_tile(DType::F16, &small, 132, (8, 0));
        assert!(
            small_tile.block_m * small_tile.block_n < 128 * 128,
            "{small_tile:?}"
        );
        let big_tile = select_tile(DType::F16, &big, 132, (8, 0));
        assert!(big_tile.block_m >= 128, "{big_tile:?}");
    }

    #[test]
    fn the_cost_model_picks_the_fastest_measured_hopper_tile_on_vit_b_shapes() {
        let pick = |n, k, activation, residual| {
            let epilogue = Epilogue {
                alpha: 1.0,
                bias: true,
                activation,
                residual,
            };
            let p = MatmulProblem::linear(12608, n, k, epilogue);
            select_tile(DType::F16, &p, 132, (9, 0)).name()
        };
        // At K = 768 the ping-pong tile (its epilogue overlapped); at K = 3072, where the main
        // loop dwarfs the epilogue, the cooperative 128x192 (fewer tiles over N = 768).
        assert_eq!(
            pick(2304, 768, Activation::None, false),
            "tmapp128x128x64_s5"
        );
        assert_eq!(pick(768, 768, Activation::None, true), "tmapp128x128x64_s5");
        assert_eq!(
            pick(3072, 768, Activation::Gelu, false),
            "tmapp128x128x64_s5"
        );
        assert_eq!(pick(768, 3072, Activation::None, true), "tma128x192x64_s4");
        // Batch 8 (M = 1576): qkv and fc1 still fill the GPU with ping-pong tiles, and proj
        // and fc2 (78 tiles) take them too.
        for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
            let p = MatmulProblem::linear(1576, n, k, Epilogue::NONE);
            assert_eq!(
                select_tile(DType::F16, &p, 132, (9, 0)).name(),
                "tmapp128x128x64_s5",
                "batch 8, n {n}, k {k}"
            );
        }
        // Batch 1 (M = 197): qkv (36 tiles) and fc1 (48) on the ping-pong tile, proj and fc2
        // (12, under a quarter wave) on the deep small tile.
        let b1 = |n, k| {
            select_tile(
                DType::F16,
                &MatmulProblem::linear(197, n, k, Epilogue::NONE),
                132,
                (9, 0),
            )
        };
        assert_eq!(b1(2304, 768).name(), "tmapp128x128x64_s5");
        assert_eq!(b1(3072, 768).name(), "tmapp128x128x64_s5");
        assert_eq!(b1(768, 768), DEEP_SMALL_TILE);
        assert_eq!(b1(768, 3072), DEEP_SMALL_TILE);
    }

    #[test]
    fn split_k_fills_the_gpu_only_for_small_single_matrix_problems() {
        let small = SMALL_TENSOR_CORE_TILE;
        let plan = |m: usize, n: usize, k: usize, tile: MatmulTile| {
            let p = MatmulProblem::linear(m, n, k, Epilogue::NONE);
            let programs =
                (m.div_ceil(tile.block_m as usize) * n.div_ceil(tile.block_n as usize)) as u64;
            split_k(DType::F16, &p, tile, programs, 132)
        };
        // Batch-1 fc2 (48 tiles): 11 splits of 9 k-tiles fill the GPU's 528 CTA slots.
        assert_eq!(plan(197, 768, 3072, small), SplitK { splits: 11, k: 288 });
        // Batch-1 proj: K = 768 is too short to gain.
        assert_eq!(plan(197, 768, 768, small), SplitK::NONE);
        // A K that ends inside the last split: no split is left empty.
        let odd = plan(61, 100, 1999, small);
        assert!(odd.splits > 1 && (odd.splits - 1) * odd.k < 1999 && odd.splits * odd.k >= 1999);
        // Enough tiles, short K, another tile, f32, batched products: no split.
        assert_eq!(plan(197, 2304, 768, small), SplitK::NONE);
        assert_eq!(plan(197, 768, 96, small), SplitK::NONE);
        assert_eq!(plan(197, 768, 3072, TENSOR_CORE_TILES[0]), SplitK::NONE);
        let p = MatmulProblem::linear(197, 768, 3072, Epilogue::NONE);
        assert_eq!(split_k(DType::F32, &p, small, 48, 132), SplitK::NONE);
        let batched = MatmulProblem { heads: 12, ..p };
        assert_eq!(split_k(DType::F16, &batched, small, 48, 132), SplitK::NONE);
        // The deep tile (two CTAs per SM, BK 64): 5 splits of 10 k-tiles; the same K floor.
        let deep = DEEP_SMALL_TILE;
        assert_eq!(plan(197, 768, 3072, deep), SplitK { splits: 5, k: 640 });
        assert_eq!(plan(197, 768, 768, deep), SplitK::NONE);
        // The scratch holds every split's partial tile.
        for tile in [small, deep] {
            let fc2 = plan(197, 768, 3072, tile);
            assert!(48 * fc2.splits as usize * 64 * 64 * 4 <= split_k_partial_bytes(132));
        }
    }

    #[test]
    fn batch_one_linear_layers_take_the_deep_small_tile_and_batch_eight_the_shallow_one() {
        // On sm_80 every batch-1 layer; on sm_90 the two with N = 768 (12 ping-pong tiles, under
        // a quarter wave; qkv and fc1 take the ping-pong tile there, see the Hopper test above).
        for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
            let p = MatmulProblem::linear(197, n, k, Epilogue::NONE);
            assert_eq!(select_tile(DType::BF16, &p, 108, (8, 0)), DEEP_SMALL_TILE);
            if n == 768 {
                assert_eq!(select_tile(DType::F16, &p, 132, (9, 0)), DEEP_SMALL_TILE);
            }
        }
        // Batch 8 on sm_80: 300 tiles of 64 x 64 for proj and fc2, past one round of the deep
        // tile.
        for k in [768, 3072] {
            let p = MatmulProblem::linear(8 * 197, 768, k, Epilogue::NONE);
            assert_eq!(
                select_tile(DType::F16, &p, 108, (8, 0)),
                SMALL_TENSOR_CORE_TILE
            );
        }
        // Batched products (attention's) and [K, N] weights never take it, even when forced.
        let batched = MatmulProblem {
            batch: 1,
            heads: 12,
            ..MatmulProblem::linear(197, 197, 64, Epilogue::NONE)
        };
        assert_ne!(
            select_tile(DType::F16, &batched, 132, (9, 0)),
            DEEP_SMALL_TILE
        );
        let kn = MatmulProblem {
            b_layout: WeightLayout::KN,
            ..MatmulProblem::linear(197, 768, 768, Epilogue::NONE)
        };
        assert_ne!(select_tile(DType::F16, &kn, 132, (9, 0)), DEEP_SMALL_TILE);
        let forced = configure_uniform(
            DType::F16,
            &kn,
            DEEP_SMALL_TILE,
            fake(0x1000, DType::F16),
            fake(0x2000, DType::F16),
        );
        assert_eq!(forced.tile, SMALL_TENSOR_CORE_TILE);
    }

    #[test]
    fn hopper_tiles_are_chosen_only_on_sm90_for_nk_weights() {
        let big = MatmulProblem::linear(12608, 2304, 768, Epilogue::NONE);
        assert!(select_tile(DType::F16, &big, 132, (9, 0)).wgmma);
        assert!(!select_tile(DType::F16, &big, 132, (8, 0)).wgmma);
        assert!(!select_tile(DType::F16, &big, 132, (10, 0)).wgmma);
        let kn = MatmulProblem {
            b_layout: WeightLayout::KN,
            ..big
        };
        assert!(!select_tile(DType::BF16, &kn, 132, (9, 0)).wgmma);
        // Forced onto a [K, N] operand, a Hopper tile gives way to the mma.sync one.
        let forced = configure_uniform(
            DType::F16,
            &kn,
            WGMMA_TILES[0],
            fake(0x1000, DType::F16),
            fake(0x2000, DType::F16),
        );
        assert_eq!(forced.tile, TENSOR_CORE_TILES[0]);
        for tile in WGMMA_TILES {
            assert!(tile.runs_on((9, 0)) && !tile.runs_on((8, 0)) && !tile.runs_on((12, 0)));
            assert_eq!(tile.threads(), tile.block_m / 64 * 128);
        }
    }

    #[test]
    fn the_ping_pong_tile_gives_way_where_its_tensor_map_epilogue_cannot_write_c() {
        let pingpong = TMA_TILES[2];
        assert!(pingpong.pingpong && pingpong.threads() == 288);
        let p = MatmulProblem::linear(12608, 3072, 768, Epilogue::NONE);
        let (a, b) = (fake(0x1000, DType::F16), fake(0x2000, DType::F16));
        let c16 = fake(0x3000, DType::F16);
        assert_eq!(
            configure(DType::F16, &p, pingpong, a, b, None, c16).tile,
            pingpong
        );
        // A residual in the operands' type takes the residual variant (a 16-bit stream); an
        // f32 C without an f32 residual, or C rows off 16-byte boundaries, the cooperative tile.
        let residual = Some(fake(0x4000, DType::F16));
        let same_type = configure(DType::F16, &p, pingpong, a, b, residual, c16);
        assert_eq!(same_type.tile, pingpong);
        assert!(same_type.pingpong_residual());
        assert_eq!(same_type.threads(), 320);
        assert_eq!(
            same_type.instantiation().name,
            "matmul_f16_tmapp_bn128_s5_g8_none_nk_res"
        );
        assert_eq!(
            configure(
                DType::F16,
                &p,
                pingpong,
                a,
                b,
                Some(fake(0x4002, DType::F16)),
                c16
            )
            .tile,
            TMA_TILES[0],
            "R rows off 16-byte boundaries"
        );
        let c32 = fake(0x3000, DType::F32);
        assert_eq!(
            configure(DType::F16, &p, pingpong, a, b, None, c32).tile,
            TMA_TILES[0]
        );
        let odd_rows = MatmulProblem {
            c: Operand {
                row_stride: 3080,
                ..p.c
            },
            ..p
        };
        assert_eq!(
            configure(DType::F16, &odd_rows, pingpong, a, b, None, c16).tile,
            pingpong
        );
        let odd_rows = MatmulProblem {
            c: Operand {
                row_stride: 3073,
                ..p.c
            },
            ..p
        };
        assert_eq!(
            configure(DType::F16, &odd_rows, pingpong, a, b, None, c16).tile,
            TMA_TILES[0]
        );
        // The f32 residual stream, R and C with 16-byte rows, takes its residual variant.
        let r32 = Some(fake(0x5000, DType::F32));
        let residual_problem = MatmulProblem {
            epilogue: Epilogue {
                residual: true,
                ..p.epilogue
            },
            ..p
        };
        let config = configure(DType::F16, &residual_problem, pingpong, a, b, r32, c32);
        assert_eq!(config.tile, pingpong);
        assert!(config.pingpong_residual());
        assert_eq!(config.threads(), 320);
        assert!(config.shared_bytes() <= SM90_SHARED_BYTES);
        let odd_residual = MatmulProblem {
            r: Operand {
                row_stride: 3073,
                ..p.c
            },
            ..residual_problem
        };
        assert_eq!(
            configure(DType::F16, &odd_residual, pingpong, a, b, r32, c32).tile,
            TMA_TILES[0]
        );
        // Uniform storage and the residual stream are registered, nothing else.
        let registered: Vec<String> = instantiations().into_iter().map(|i| i.name).collect();
        assert!(registered
            .iter()
            .any(|n| n == "matmul_f16_tmapp_bn128_s5_g8_gelu_nk"));
        let stages = config.pingpong_residual_stages();
        assert!(registered
            .iter()
            .any(|n| *n == format!("matmul_f16_tmapp_bn128_s{stages}_g8_none_nk_rf32_cf32")));
        assert_eq!(stages, 5);
        assert!(registered
            .iter()
            .any(|n| *n == format!("matmul_bf16_tmapp_bn128_s{stages}_g8_none_nk_res")));
        assert!(!registered
            .iter()
            .any(|n| n.contains("tmapp") && n.contains("_rf16")));
    }

    #[test]
    fn every_tile_fits_the_shared_memory_of_sm80_and_sm90() {
        // sm_80 lets a block use up to 163 KiB of dynamic shared memory, sm_90 227 KiB (the
        // Hopper tiles run only there); an SM has 228 KiB, of which each CTA's 1 KiB is reserved.
        for config in instantiations_configs() {
            let bytes = config.shared_bytes();
            let limit = if config.tile.wgmma { 227 } else { 163 } * 1024;
            assert!(bytes <= limit, "{config:?} needs {bytes} bytes");
            let per_sm = (bytes + 1024) * config.tile.ctas_per_sm;
            assert!(
                per_sm <= 228 * 1024,
                "{config:?}: {} CTAs need {per_sm} bytes",
                config.tile.ctas_per_sm
            );
        }
    }

    fn instantiations_configs() -> Vec<MatmulConfig> {
        let mut all = Vec::new();
        for dtype in DType::ALL {
            for &tile in tiles_for(dtype) {
                for residual in [dtype, DType::F32] {
                    all.push(MatmulConfig {
                        dtype,
                        residual,
                        output: residual,
                        tile,
                        activation: Activation::None,
                        b_layout: WeightLayout::NK,
                        vec16: tile.wgmma,
                        with_residual: false,
                    });
                }
            }
        }
        all
    }

    #[test]
    fn bad_views_are_errors_before_anything_is_launched() {
        let dtype = DType::F16;
        let view = |len: usize| DevPtr {
            ptr: 0x1000,
            len,
            dtype,
        };
        let epilogue = Epilogue {
            bias: true,
            residual: true,
            ..Epilogue::NONE
        };
        let p = MatmulProblem::linear(4, 5, 6, epilogue);
        let ok = validate(
            dtype,
            &p,
            view(24),
            view(30),
            Some(view(5)),
            Some(view(20)),
            view(20),
        );
        assert!(ok.is_ok());
        let message = |r: Result<_, KernelError>| match r {
            Err(KernelError::InvalidArgument(m)) => m,
            other => panic!("expected an invalid-argument error, got {other:?}"),
        };
        let e = message(validate(
            dtype,
            &p,
            view(23),
            view(30),
            Some(view(5)),
            Some(view(20)),
            view(20),
        ));
        assert!(e.contains("A needs 24"), "{e}");
        let e = message(validate(
            dtype,
            &p,
            view(24),
            view(30),
            None,
            Some(view(20)),
            view(20),
        ));
        assert!(e.contains("bias"), "{e}");
        let e = message(validate(
            dtype,
            &p,
            view(24),
            view(30),
            Some(view(5)),
            Some(view(19)),
            view(20),
        ));
        assert!(e.contains("residual"), "{e}");
        let bf16_c = DevPtr {
            dtype: DType::BF16,
            ..view(20)
        };
        let e = message(validate(
            dtype,
            &p,
            view(24),
            view(30),
            Some(view(5)),
            Some(view(20)),
            bf16_c,
        ));
        assert!(e.contains("matmul C holds bf16"), "{e}");
        let f32_c = DevPtr {
            dtype: DType::F32,
            ..view(20)
        };
        // An epilogue without bias ignores a bias view, whatever it holds.
        let plain = MatmulProblem::linear(4, 5, 6, Epilogue::NONE);
        let (bias, residual) = validate(
            dtype,
            &plain,
            view(24),
            view(30),
            Some(f32_c),
            None,
            view(20),
        )
        .unwrap();
        assert_eq!((bias, residual), (None, None));
    }

    #[test]
    fn instantiation_names_spell_the_meta_parameters() {
        let config = MatmulConfig {
            dtype: DType::BF16,
            residual: DType::BF16,
            output: DType::BF16,
            tile: TENSOR_CORE_TILES[0],
            activation: Activation::Gelu,
            b_layout: WeightLayout::KN,
            vec16: true,
            with_residual: false,
        };
        let inst = config.instantiation();
        assert_eq!(
            inst.name,
            "matmul_bf16_bm128_bn128_bk32_g8_s4_w2x2_gelu_kn_v16"
        );
        assert!(inst.program_source().contains(
            "matmul_block<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 128, 128, 32, 8, 4, 2, 2, \
             Act::Gelu, true, true>("
        ));
        let stream = MatmulConfig {
            residual: DType::F32,
            output: DType::F32,
            activation: Activation::None,
            b_layout: WeightLayout::NK,
            ..config
        };
        assert_eq!(
            stream.instantiation().name,
            "matmul_bf16_bm128_bn128_bk32_g8_s4_w2x2_none_nk_v16_rf32_cf32"
        );
    }

    #[test]
    fn mixed_storage_is_checked_against_what_is_built() {
        let dtype = DType::BF16;
        let view = |dtype: DType| DevPtr {
            ptr: 0x1000,
            len: 1 << 20,
            dtype,
        };
        let registered = instantiations();
        let stream = Epilogue {
            bias: true,
            residual: true,
            ..Epilogue::NONE
        };
        let p = MatmulProblem::linear(197, 768, 768, stream);
        let (a, b, bias) = (view(dtype), view(dtype), Some(view(dtype)));
        for (residual, c) in [
            (DType::F32, DType::F32),
            (DType::BF16, DType::F32),
            (DType::BF16, DType::BF16),
        ] {
            validate(dtype, &p, a, b, bias, Some(view(residual)), view(c)).unwrap();
            let tile = select_tile(dtype, &p, 132, (8, 0));
            let config = configure(dtype, &p, tile, a, b, Some(view(residual)), view(c));
            assert_eq!((config.residual, config.output), (residual, c));
            assert!(registered.contains(&config.instantiation()), "{config:?}");
        }
        let e = validate(
            dtype,
            &p,
            a,
            b,
            bias,
            Some(view(DType::F32)),
            view(DType::BF16),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("C holds bf16, residual f32"), "{e}");
        let gelu = MatmulProblem::linear(
            197,
            768,
            768,
            Epilogue {
                activation: Activation::Gelu,
                ..stream
            },
        );
        validate(
            dtype,
            &gelu,
            a,
            b,
            bias,
            Some(view(DType::F32)),
            view(DType::F32),
        )
        .unwrap();
        assert!(validate(
            dtype,
            &gelu,
            a,
            b,
            bias,
            Some(view(dtype)),
            view(DType::F32)
        )
        .is_err());
        assert!(validate(
            DType::F32,
            &p,
            view(DType::F32),
            view(DType::F32),
            None,
            None,
            view(dtype)
        )
        .is_err());
    }
}
