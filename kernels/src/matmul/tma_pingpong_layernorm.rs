//! The layernorm-folded matmul on the ping-pong program (tma_pingpong.cu's
//! `matmul_block_tma_pingpong_layernorm`): one instantiation's meta-parameters
//! ([`LayernormConfig`]), its instantiation, shared memory and arguments, and the launch of a
//! [`LayernormMatmulProblem`] on a [`Gpu`]. The public entry is `gpu::matmul_layernorm`. The
//! rows' statistics are an input: per-block partials of x ([K / 64][M] f32 pairs) that x's
//! producer wrote (`gpu::matmul_with_row_statistics`), which the program's epilogue combines.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    KernelParam, LaunchDims,
};
#[cfg(test)]
use crate::matmul::config::SM90_SHARED_BYTES;
use crate::matmul::config::{program_source, GROUP_M, HEADERS};
use crate::matmul::launch::{tensor_map, DECLARED_MAP};
use crate::matmul::layernorm_matmul::{row_statistics_len, LayernormMatmulProblem};
use crate::matmul::selection::{sm_count, MatmulTile, LAYERNORM_TILES};
use crate::types::{Activation, DType};

kernel_params! {
    /// matmul_block_tma_pingpong_layernorm's parameters: x, W' and C through tensor maps, the
    /// folded bias in T, the weights' column sums in f32, x's row statistics (f32 pairs).
    struct LayernormParams {
        a_map: tensor_map,
        b_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        column_sums: const_ptr,
        row_stats: const_ptr,
        m: i32,
        n: i32,
        k: i32,
        eps: f32,
    }
}

/// Every meta-parameter of one layernorm matmul instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LayernormConfig {
    /// F16 or BF16: x, W', the bias and C.
    pub dtype: DType,
    pub activation: Activation,
    /// One of [`LAYERNORM_TILES`].
    pub tile: MatmulTile,
}

impl LayernormConfig {
    /// Dynamic shared memory (formulas as in tma_pingpong.cu): 1024 bytes to align the stages
    /// to the swizzle's period, the stages (128-byte rows of A's 128 and B's BN rows), each
    /// consumer warpgroup's 16-bit output tile, then its tiles of bias (16-bit) and of column
    /// sums (f32, where the FP8 program keeps its column scales). The rows' statistics come
    /// from global memory and pass between lanes by shuffles: no shared memory.
    pub(crate) fn shared_bytes(&self) -> u32 {
        let t = &self.tile;
        1024 + t.stages * (t.block_m + t.block_n) * 128
            + 2 * t.block_m * t.block_n * 2
            + 2 * t.block_n * 2
            + 2 * t.block_n * 4
    }

    /// Threads per CTA: two consumer warpgroups and the producer warp.
    pub(crate) fn threads(&self) -> u32 {
        self.tile.threads()
    }

    fn params(&self) -> Vec<KernelParam> {
        LayernormParams {
            a_map: DECLARED_MAP,
            b_map: DECLARED_MAP,
            c_map: DECLARED_MAP,
            bias: DevPtr::of_type(self.dtype),
            column_sums: DevPtr::of_type(DType::F32),
            row_stats: DevPtr::of_type(DType::F32),
            m: 0,
            n: 0,
            k: 0,
            eps: 0.0,
        }
        .params()
    }

    /// The instantiation: `matmul_bf16_tmapp_ln_bn128_s5_g8_gelu`.
    pub(crate) fn instantiation(&self) -> Instantiation {
        let t = &self.tile;
        let d = self.dtype;
        Instantiation {
            name: format!(
                "matmul_{}_tmapp_ln_bn{}_s{}_g{GROUP_M}_{}",
                d.name(),
                t.block_n,
                t.stages,
                self.activation.short_name(),
            ),
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: "matmul_block_tma_pingpong_layernorm",
            template_args: vec![
                d.cuda_type().to_string(),
                t.block_n.to_string(),
                t.stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().to_string(),
            ],
            params: self.params(),
            block_threads: self.threads(),
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// Every layernorm matmul instantiation the launcher can pick: both tiles, both 16-bit types,
/// every epilogue activation.
pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for tile in LAYERNORM_TILES {
        for dtype in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                all.push(
                    LayernormConfig {
                        dtype,
                        activation,
                        tile,
                    }
                    .instantiation(),
                );
            }
        }
    }
    all
}

/// The device operands of a layernorm matmul ([`LayernormMatmulProblem`] says what each
/// holds), checked: dtypes, lengths, and the 16-byte bases TMA reads and writes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn validate(
    dtype: DType,
    p: &LayernormMatmulProblem,
    x: DevPtr,
    row_stats: DevPtr,
    w: DevPtr,
    bias: DevPtr,
    column_sums: DevPtr,
    out: DevPtr,
) -> Result<(), KernelError> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(invalid!(
            "the layernorm matmul runs on f16 or bf16 operands, not {dtype}"
        ));
    }
    p.check().map_err(KernelError::InvalidArgument)?;
    x.expect("layernorm matmul x", dtype, 0)?;
    w.expect("layernorm matmul weights", dtype, 0)?;
    bias.expect("layernorm matmul bias", dtype, 0)?;
    column_sums.expect("layernorm matmul column sums", DType::F32, 0)?;
    check_row_statistics("layernorm matmul", row_stats, p.m, p.k)?;
    out.expect("layernorm matmul output", dtype, 0)?;
    p.check_bounds(x.len, w.len, bias.len, column_sums.len, out.len)
        .map_err(KernelError::InvalidArgument)?;
    for (what, view) in [("x", x), ("the weights", w), ("the output", out)] {
        if !view.is_aligned(16) {
            return Err(invalid!(
                "layernorm matmul: {what} starts at {:#x}, not on the 16-byte boundary TMA \
                 needs",
                view.ptr
            ));
        }
    }
    if !column_sums.is_aligned(4) || !bias.is_aligned(2) {
        return Err(invalid!(
            "layernorm matmul: the column sums ({:#x}) or the bias ({:#x}) are not aligned \
             to their elements",
            column_sums.ptr,
            bias.ptr
        ));
    }
    Ok(())
}

/// Checks a buffer of row statistics for `rows` x `cols` values (`what`: the kernel that
/// reads or writes it): f32, long enough ([`row_statistics_len`]), on the 8-byte boundary of
/// its f32 pairs. The producer's launch and the layernorm matmul's share it.
pub(crate) fn check_row_statistics(
    what: &str,
    row_stats: DevPtr,
    rows: usize,
    cols: usize,
) -> Result<(), KernelError> {
    let need = row_statistics_len(rows, cols);
    row_stats.expect(&format!("{what}: the row statistics"), DType::F32, need)?;
    if !row_stats.is_aligned(8) {
        return Err(invalid!(
            "{what}: the row statistics start at {:#x}, not on the 8-byte boundary of their \
             f32 pairs",
            row_stats.ptr
        ));
    }
    Ok(())
}

/// Launches `p` on `tile` (one of [`LAYERNORM_TILES`]) after checking the operands.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    gpu: &Gpu,
    dtype: DType,
    p: &LayernormMatmulProblem,
    tile: MatmulTile,
    x: DevPtr,
    row_stats: DevPtr,
    w: DevPtr,
    bias: DevPtr,
    column_sums: DevPtr,
    out: DevPtr,
) -> Result<(), KernelError> {
    validate(dtype, p, x, row_stats, w, bias, column_sums, out)?;
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let config = LayernormConfig {
        dtype,
        activation: p.activation,
        tile,
    };
    let programs =
        p.m.div_ceil(tile.block_m as usize) as u64 * p.n.div_ceil(tile.block_n as usize) as u64;
    if programs > i32::MAX as u64 {
        return Err(invalid!(
            "layernorm matmul {}x{}x{}: too many tiles",
            p.m,
            p.n,
            p.k
        ));
    }
    // x, W' and C in 128-byte swizzled boxes of 64 columns: x's and C's of 128 rows, W''s of
    // the tile's BN.
    let args = LayernormParams {
        a_map: tensor_map(dtype, x.ptr, p.m, p.k, p.k, tile.block_m)?,
        b_map: tensor_map(dtype, w.ptr, p.n, p.k, p.k, tile.block_n)?,
        c_map: tensor_map(dtype, out.ptr, p.m, p.n, p.n, tile.block_m)?,
        bias,
        column_sums,
        row_stats,
        m: to_i32(p.m, "layernorm matmul m")?,
        n: to_i32(p.n, "layernorm matmul n")?,
        k: to_i32(p.k, "layernorm matmul k")?,
        eps: p.eps,
    }
    .args();
    // Persistent: one CTA an SM walking the tiles.
    let dims = LaunchDims {
        grid: (programs.min(sm_count(gpu)? as u64) as u32, 1, 1),
        block: config.threads(),
        shared_bytes: config.shared_bytes(),
        cluster: 1,
    };
    gpu.launch(&config.instantiation(), dims, &args)
}

/// Whether the configuration's shared memory fits what an sm_90 CTA may have beside its
/// static barriers (checked by the unit tests).
#[cfg(test)]
pub(crate) fn fits_sm90(config: &LayernormConfig) -> bool {
    config.shared_bytes() + 256 <= SM90_SHARED_BYTES
}
