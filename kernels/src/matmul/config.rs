//! One matmul instantiation's meta-parameters ([`MatmulConfig`]), the program it names (one
//! `.cu` a program), its threads and shared memory, the storage rules of [`MixedOutput`], and
//! [`configure`], which picks the configuration for a launch. Each program's parameters and
//! arguments are built in its own file (mma_sync.rs, wgmma.rs, tma_cooperative.rs,
//! tma_pingpong.rs).

use crate::cuda::DevPtr;
use crate::matmul::problem::{MatmulProblem, WeightLayout};
use crate::matmul::selection::{
    pipeline_bytes, rows_aligned, single_nk_matrix, staged_bytes, MatmulTile, Program,
    DEEP_SMALL_TILE, SMALL_TENSOR_CORE_TILE, TENSOR_CORE_TILES, TMA_TILES, WGMMA_TILES,
};
use crate::types::{Activation, DType, Operand};

/// The programs' sources, one `.cu` a program.
pub(crate) const MMA_SYNC_SOURCE: &str = include_str!("mma_sync.cu");
pub(crate) const FMA_SOURCE: &str = include_str!("fma.cu");
pub(crate) const WGMMA_SOURCE: &str = include_str!("wgmma.cu");
pub(crate) const TMA_COOPERATIVE_SOURCE: &str = include_str!("tma_cooperative.cu");
pub(crate) const TMA_PINGPONG_SOURCE: &str = include_str!("tma_pingpong.cu");

/// The source of `program`'s `.cu`.
pub(crate) fn program_source(program: Program) -> &'static str {
    match program {
        Program::MmaSync => MMA_SYNC_SOURCE,
        Program::Fma => FMA_SOURCE,
        Program::Wgmma => WGMMA_SOURCE,
        Program::TmaCooperative => TMA_COOPERATIVE_SOURCE,
        Program::TmaPingPong => TMA_PINGPONG_SOURCE,
    }
}

/// The headers the programs share, which NVRTC receives in memory beside common.cuh.
pub(crate) const HEADERS: &[(&str, &str)] = &[
    ("epilogue.cuh", include_str!("epilogue.cuh")),
    ("copy.cuh", include_str!("copy.cuh")),
    ("wgmma.cuh", include_str!("wgmma.cuh")),
    ("tma.cuh", include_str!("tma.cuh")),
    ("params.cuh", include_str!("params.cuh")),
];

/// Every source and header of the matmul, in one order: what its tuning entries hash.
pub(crate) const ALL_SOURCES: [&str; 5] = [
    MMA_SYNC_SOURCE,
    FMA_SOURCE,
    WGMMA_SOURCE,
    TMA_COOPERATIVE_SOURCE,
    TMA_PINGPONG_SOURCE,
];

/// Tile rows per group of the grouped program order (Triton's GROUP_SIZE_M).
pub(crate) const GROUP_M: u32 = 8;

/// The dynamic shared memory an sm_90 CTA may opt into.
pub(crate) const SM90_SHARED_BYTES: u32 = 227 * 1024;

/// The ping-pong residual variant's residual buffers, 32 KB for each consumer warpgroup: half a
/// 128 x 128 tile of f32, or a whole one of 16-bit values (see `load_residual_parts` in
/// tma_pingpong.cu).
pub(crate) const PINGPONG_RESIDUAL_BYTES: u32 = 2 * 128 * 128 / 2 * 4;

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
    /// type), whichever is larger (formulas as in the programs).
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
        if t.program == Program::TmaPingPong {
            // The stages, then each consumer warpgroup's output tile in C's (16-bit) type, then
            // its tile of bias.
            return pipeline_bytes(self.dtype, t)
                + 2 * t.block_m * t.block_n * 2
                + 2 * t.block_n * 2;
        }
        if t.program.uses_tma() {
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
    pub(crate) fn pingpong_residual(&self) -> bool {
        self.tile.program == Program::TmaPingPong
            && (MixedOutput::of(self.dtype, self.residual, self.output)
                == Some(MixedOutput::ResidualStream)
                || (self.with_residual && (self.residual, self.output) == (self.dtype, self.dtype)))
    }

    /// The residual variant's pipeline depth: the tile's, or as many stages as fit beside its
    /// residual and bias buffers in the 227 KB an sm_90 CTA may have (the barriers take the
    /// 256 bytes).
    pub(crate) fn pingpong_residual_stages(&self) -> u32 {
        let t = &self.tile;
        let stage = (t.block_m + t.block_n) * t.block_k * 2;
        let buffers = PINGPONG_RESIDUAL_BYTES + 2 * t.block_n * 2;
        t.stages
            .min((SM90_SHARED_BYTES - 1024 - 256 - buffers) / stage)
    }

    /// Threads per CTA: the tile's, and a residual loader warp for the ping-pong residual variant.
    pub fn threads(&self) -> u32 {
        // The ping-pong residual loader: a warp of its own beside a producer warp, one of the
        // producer warpgroup's otherwise.
        let loader = self.pingpong_residual() && !self.tile.pingpong_producer_warpgroup();
        self.tile.threads() + if loader { 32 } else { 0 }
    }

    /// Whether the epilogue fetches residual runs into shared memory (`kStageResidual` in
    /// mma_sync.cu and wgmma.cu). mma.sync tiles: not for an f32 residual of a half-precision tile larger than
    /// 64x64, whose residual tile would leave no room for the SM's second CTA. Hopper tiles:
    /// where it adds at most 8 KB to what the pipeline takes.
    pub(crate) fn stages_residual(&self) -> bool {
        let t = &self.tile;
        if t.program.is_hopper() {
            let residual = t.block_m * t.block_n * self.residual.size_bytes() as u32;
            return staged_bytes(self.dtype, t) + residual <= pipeline_bytes(self.dtype, t) + 8192;
        }
        self.residual.size_bytes() == self.dtype.size_bytes() || t.block_m * t.block_n <= 64 * 64
    }
}

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
    pub(crate) fn of(dtype: DType, residual: DType, output: DType) -> Option<MixedOutput> {
        match (residual, output) {
            (DType::F32, DType::F32) if dtype != DType::F32 => Some(MixedOutput::ResidualStream),
            (r, DType::F32) if r == dtype && dtype != DType::F32 => Some(MixedOutput::StreamStart),
            _ => None,
        }
    }

    pub(crate) fn allows(self, activation: Activation, b_layout: WeightLayout) -> bool {
        b_layout == WeightLayout::NK
            && (self == MixedOutput::ResidualStream || activation == Activation::None)
    }
}

/// The configuration for `p` with tile `tile`, from the actual pointers' alignment. Tensor-core
/// problems whose A or B rows are not 16-byte aligned (odd head dims such as 18, offsets into
/// the middle of a row) run on the small tile whatever `tile` says: element loads make them
/// slow anyway, and it keeps the big tiles to one load path, half the instantiations.
pub(crate) fn configure(
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
    } else if tile.program.is_hopper() && p.b_layout == WeightLayout::KN {
        // The Hopper body reads B K-major only: [K, N] operands (P·V) take the mma.sync tile.
        TENSOR_CORE_TILES[0]
    } else if tile == DEEP_SMALL_TILE && !single_nk_matrix(p) {
        // Registered for single [N, K] matrices only (batch 1's linear layers).
        SMALL_TENSOR_CORE_TILE
    } else if tile.program.uses_tma() && !(single_nk_matrix(p) && tma_rows(dtype, p, a, b)) {
        // Tensor maps here describe one matrix each: batched products take the cp.async body,
        // as do rows a tensor map cannot stride over.
        WGMMA_TILES[0]
    } else if tile.program == Program::TmaPingPong && !pingpong_takes(dtype, p, residual, c) {
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

/// Whether A's and B's rows can be strided over by tensor maps: a map's row stride must be a
/// multiple of 16 bytes even where the matrix has one row (the batch-1 classifier's A), which
/// `rows_aligned` does not ask of single rows.
fn tma_rows(dtype: DType, p: &MatmulProblem, a: DevPtr, b: DevPtr) -> bool {
    let size = dtype.size_bytes();
    rows_aligned(a.ptr, size, &p.a, (1, 1, p.m.max(2)), 16 / size)
        && rows_aligned(b.ptr, size, &p.b, (1, 1, p.n.max(2)), 16 / size)
}

/// Whether the ping-pong tile's epilogue can write `p`'s C: without residual, C in the
/// operands' type; with one, R and C both f32 (the residual stream) or both in the operands'
/// type. Their rows on 16-byte boundaries, what a tensor map requires, even where C has one
/// row (a batch-1 classifier's ten labels are 20 bytes a row).
pub(crate) fn pingpong_takes(
    dtype: DType,
    p: &MatmulProblem,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> bool {
    let aligned = |ptr: DevPtr, view: &Operand| {
        let size = ptr.dtype.size_bytes();
        rows_aligned(ptr.ptr, size, view, (1, 1, p.m.max(2)), 16 / size)
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
