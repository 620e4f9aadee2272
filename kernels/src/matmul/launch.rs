//! What the programs' launches share: the operands gpu.rs hands a program's file
//! ([`MatmulLaunch`]), the split-K scratch, the TMA tensor maps and the persistent grid.

use crate::cuda::{
    encode_tiled, to_i32, DevPtr, DeviceBuffer, Gpu, Instantiation, KernelError, LaunchDims,
    Swizzle,
};
use crate::matmul::config::MatmulConfig;
use crate::matmul::problem::MatmulProblem;
use crate::matmul::selection::{sm_count, split_k_partial_bytes};
use crate::types::DType;
use std::sync::Mutex;

/// One launch as `launch_with_tile` hands it to the program's file: the checked operands,
/// the configuration it picked for them, and what it derived from them.
#[derive(Clone, Copy)]
pub(crate) struct MatmulLaunch<'a> {
    pub gpu: &'a Gpu,
    pub dtype: DType,
    pub p: &'a MatmulProblem,
    pub config: &'a MatmulConfig,
    /// The configuration's instantiation, built once for the launch.
    pub instantiation: &'a Instantiation,
    pub a: DevPtr,
    pub b: DevPtr,
    /// The bias and residual the epilogue reads (`None` where it asks for none).
    pub bias: Option<DevPtr>,
    pub residual: Option<DevPtr>,
    pub c: DevPtr,
    /// C's rows, R's and the bias start on four-element boundaries.
    pub vector_epilogue: bool,
    /// Output tiles over every matrix (at most 2^31).
    pub programs: u64,
}

/// Split-K scratch of one Gpu (partial tiles, then per-tile counters kept at zero between
/// launches), allocated by the first split launch.
type SplitKScratch = Mutex<Option<(DeviceBuffer, DeviceBuffer)>>;

/// The split-K scratch: device addresses of room for every partial tile this GPU can
/// have in flight and of one zeroed counter per SM (split-K runs only with fewer tiles
/// than SMs). Allocated once, outside any CUDA graph capture: the executor's eager
/// warm-up pass makes every launch its captured pass will.
pub(crate) fn split_k_scratch(gpu: &Gpu) -> Result<(u64, u64), KernelError> {
    let cell = gpu.family_state(|| -> SplitKScratch { Mutex::new(None) });
    let mut scratch = cell.lock().unwrap_or_else(|e| e.into_inner());
    if scratch.is_none() {
        let partials = gpu.alloc(split_k_partial_bytes(gpu.multiprocessors()))?;
        let counters = gpu.alloc(gpu.multiprocessors() as usize * 4)?;
        gpu.upload(&counters, 0, &vec![0u8; counters.len_bytes()])?;
        *scratch = Some((partials, counters));
    }
    let (partials, counters) = scratch.as_ref().expect("allocated above");
    Ok((partials.ptr, counters.ptr))
}

/// What both TMA programs take alike: A and B as tensor maps, the bias (a view of no elements
/// at address 0 where the epilogue reads none), the sizes and alpha.
pub(crate) struct TmaOperands {
    pub a_map: [u64; 16],
    pub b_map: [u64; 16],
    pub bias: DevPtr,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub alpha: f32,
}

/// A tensor map's place in an instantiation's declared parameters (its bytes are the launch's).
pub(crate) const DECLARED_MAP: [u64; 16] = [0; 16];

/// A and B as tensor maps of one matrix each (boxes of the tile's rows), the bias, the sizes
/// and alpha.
pub(crate) fn tma_operands(l: &MatmulLaunch) -> Result<TmaOperands, KernelError> {
    let MatmulLaunch {
        dtype,
        p,
        config,
        a,
        b,
        bias,
        ..
    } = *l;
    let tile = config.tile;
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
    };
    // A clustered tile's CTAs load half of A's box each (`load_stages` in tma.cuh).
    let a_map = map(
        a.ptr,
        p.a.offset,
        p.m,
        p.a.row_stride,
        tile.block_m / tile.cluster,
    )?;
    let b_map = map(b.ptr, p.b.offset, p.n, p.b.row_stride, tile.block_n)?;
    Ok(TmaOperands {
        a_map,
        b_map,
        bias: bias.unwrap_or(DevPtr::of_type(dtype)),
        m: to_i32(p.m, "matmul m")?,
        n: to_i32(p.n, "matmul n")?,
        k: to_i32(p.k, "matmul k")?,
        alpha: p.epilogue.alpha,
    })
}

/// The TMA programs' launch: persistent, one CTA per SM, each walking the tiles in steps of
/// the grid. A clustered tile's grid is as many clusters as the GPU holds at once (a cluster's
/// CTAs share a GPC, so that can be fewer than the SMs allow) and no more than its walks (its
/// clusters take pairs of n-tiles: `CtaTiles` in tma.cuh).
pub(crate) fn persistent_dims(l: &MatmulLaunch) -> Result<LaunchDims, KernelError> {
    let tile = l.config.tile;
    let mut dims = LaunchDims {
        grid: (l.programs.min(sm_count(l.gpu)? as u64) as u32, 1, 1),
        block: l.config.threads(),
        shared_bytes: l.config.shared_bytes(),
        cluster: tile.cluster,
    };
    if tile.cluster > 1 {
        let cluster = tile.cluster as u64;
        let walks = l.p.m.div_ceil(tile.block_m as usize) as u64
            * (l.p.n.div_ceil(tile.block_n as usize) as u64).div_ceil(cluster);
        let resident = l.gpu.max_active_clusters(l.instantiation, dims)? as u64;
        dims.grid.0 = (walks.min(resident) * cluster) as u32;
    }
    Ok(dims)
}

/// A 2-D TMA tensor map over `rows` rows of `cols` elements starting at `base` (bytes),
/// rows `row_stride` elements apart, read in 128-byte-swizzled boxes of 64 x `box_rows`
/// (zero-filled past the edges).
pub(crate) fn tensor_map(
    dtype: DType,
    base: u64,
    rows: usize,
    cols: usize,
    row_stride: usize,
    box_rows: u32,
) -> Result<[u64; 16], KernelError> {
    let size = dtype.size_bytes() as u64;
    // One 128-byte swizzle row per box row.
    encode_tiled(
        dtype,
        base,
        &[cols as u64, rows as u64],
        &[row_stride as u64 * size],
        &[128 / size as u32, box_rows],
        Swizzle::Bytes128,
    )
}
