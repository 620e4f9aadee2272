//! The matmul on a [`Gpu`]: checks the views, turns the chosen tile into a configuration from
//! the pointers' alignment (config.rs) and launches it, with the arguments and grid its
//! program's file builds (mma_sync.rs for mma.sync and FMA, wgmma.rs, tma_cooperative.rs,
//! tma_pingpong.rs, each beside the instantiation it launches). The tile is an input:
//! [`matmul`] takes the tuned one (tuning.rs) or the cost model's (selection.rs), and
//! [`matmul_with_tile`] the caller's. Also every instantiation the launcher can pick
//! (`instantiations`), generated from the tile tables.

use crate::cuda::{invalid, DevPtr, Gpu, Instantiation, KernelError};
use crate::matmul::config::{configure, MatmulConfig, MixedOutput};
use crate::matmul::fp8::Fp8Problem;
use crate::matmul::launch::MatmulLaunch;
use crate::matmul::layernorm_matmul::{LayernormMatmulProblem, ROW_STATISTICS_BLOCK};
use crate::matmul::problem::{MatmulProblem, WeightLayout};
use crate::matmul::selection::{
    rows_aligned, tiles_for, MatmulTile, Program, DEEP_SMALL_TILE, SMALL_TENSOR_CORE_TILE,
};
use crate::matmul::selection::{
    select_fp8_tile, select_layernorm_tile, select_row_statistics_tile, selection_rows,
    single_nk_matrix, sm_count, FP8_TILES, LAYERNORM_TILES, ROW_STATISTICS_TILES,
};
use crate::matmul::tma_pingpong_fp8::{self, Fp8Operands};
use crate::matmul::tuning::{matmul_choice, MatmulStorage};
use crate::matmul::{mma_sync, tma_cooperative, tma_pingpong, tma_pingpong_layernorm, wgmma};
use crate::types::{Activation, DType};

/// `c = epilogue(A · B)` for every (batch, head) of `p`; see [`MatmulProblem`]. A, B and
/// the bias hold `dtype`; with f16/bf16 operands, C and the residual may hold f32 (a
/// residual stream kept in f32: C and R f32 on [N, K] weights; or C f32 with the residual
/// in `dtype` and no activation, as the patch projection writes the stream's start). Runs on
/// the tile the tuning table holds for `p` on this device, else on the cost model's.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    let storage = MatmulStorage {
        output: c.dtype,
        residual: residual.filter(|_| p.epilogue.residual).map(|r| r.dtype),
    };
    let (tile, _) = matmul_choice(gpu, dtype, p, storage)?;
    launch_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c, None)
}

/// [`matmul`] with the tile shape forced instead of chosen: for tuning and for
/// benchmarks that compare tile shapes. `tile` must be one of [`tiles_for`]`(dtype)`.
/// f16/bf16 operands whose rows are not 16-byte aligned still run on the small tile.
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_tile(
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
    if !tiles_for(dtype).contains(&tile) {
        return Err(invalid!(
            "tile {} is not one of the {dtype} matmul tiles",
            tile.name()
        ));
    }
    if !tile.runs_on(gpu.compute_capability()) {
        let (major, minor) = gpu.compute_capability();
        return Err(invalid!(
            "tile {} needs an sm_90 GPU (wgmma); this one is sm_{major}{minor}",
            tile.name()
        ));
    }
    launch_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c, None)
}

/// [`matmul`] of a 16-bit residual stream that also writes each row's partial statistics
/// beside C, for the layernorm-folded matmul that reads C next ([`matmul_layernorm`]): C =
/// act(alpha·A·B + bias) + R exactly as [`matmul`] on the same tile writes it, and for every row
/// r of C and every 64-column block b, `row_stats[2 · (b · M + r)]` and `[… + 1]` = (mean_b,
/// m2_b) of the block's values as stored (`crate::matmul::cpu::row_statistics` is the twin;
/// `[N / 64][M]` f32 pairs, block-major). `p` must have a residual epilogue; the residual and C
/// hold `dtype` (f16 or bf16), `row_stats` is F32 with at least 2 · (N / 64) · M values on an
/// 8-byte boundary; see [`row_statistics_support`] for the rest. Runs on one of the 16-bit
/// ping-pong tiles ([`ROW_STATISTICS_TILES`]): the tuned tile or the cost model's where it is
/// one of them, else the cheapest of them by the cost model ([`row_statistics_tile_for`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_row_statistics(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: DevPtr,
    c: DevPtr,
    row_stats: DevPtr,
) -> Result<(), KernelError> {
    row_statistics_support(gpu, dtype, p).map_err(KernelError::InvalidArgument)?;
    let tile = row_statistics_tile_for(gpu, dtype, p, residual, c)?;
    matmul_with_row_statistics_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c, row_stats)
}

/// [`matmul_with_row_statistics`] on a tile of the caller's, one of [`ROW_STATISTICS_TILES`]:
/// for benchmarks and tests.
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_row_statistics_with_tile(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: DevPtr,
    c: DevPtr,
    row_stats: DevPtr,
) -> Result<(), KernelError> {
    if !ROW_STATISTICS_TILES.contains(&tile) {
        return Err(invalid!(
            "tile {} is not one of the row-statistics matmul's tiles",
            tile.name()
        ));
    }
    row_statistics_support(gpu, dtype, p).map_err(KernelError::InvalidArgument)?;
    for (what, ptr) in [("residual", residual), ("C", c)] {
        if ptr.dtype != dtype {
            return Err(invalid!(
                "the row-statistics matmul keeps the stream in {dtype}: its {what} holds {}",
                ptr.dtype
            ));
        }
    }
    tma_pingpong_layernorm::check_row_statistics("the row-statistics matmul", row_stats, p.m, p.n)?;
    launch_with_tile(
        gpu,
        dtype,
        p,
        tile,
        a,
        b,
        bias,
        Some(residual),
        c,
        Some(row_stats),
    )
}

/// Whether [`matmul_with_row_statistics`] runs `p` on `gpu` with `dtype` operands: an sm_90
/// GPU (the program is sm_90a), f16 or bf16, one [M, K] x [N, K] product with K > 0, a residual
/// epilogue with an activation the epilogue applies, N a multiple of 64 (every row statistics
/// block whole). Else the reason, in words. Operands are checked at the launch (the stream in
/// `dtype`, rows on 16-byte boundaries as the tensor maps need).
pub fn row_statistics_support(gpu: &Gpu, dtype: DType, p: &MatmulProblem) -> Result<(), String> {
    require_sm90(gpu, "the row-statistics matmul")?;
    row_statistics_problem_support(dtype, p)
}

/// [`row_statistics_support`] less the GPU: what the program takes of `p`.
pub(crate) fn row_statistics_problem_support(
    dtype: DType,
    p: &MatmulProblem,
) -> Result<(), String> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(format!(
            "the row-statistics matmul runs on f16 or bf16 operands, not {dtype}"
        ));
    }
    if !p.epilogue.residual {
        return Err(
            "the row-statistics matmul writes a residual stream: its epilogue needs a \
                    residual"
                .into(),
        );
    }
    if !p.epilogue.activation.in_matmul_epilogue() {
        return Err(format!(
            "the matmul epilogue does not apply {:?}",
            p.epilogue.activation
        ));
    }
    if !single_nk_matrix(p) {
        return Err(
            "the row-statistics matmul runs one [M, K] x [N, K] product with K > 0 (TMA \
             tiles)"
                .into(),
        );
    }
    if !p.n.is_multiple_of(ROW_STATISTICS_BLOCK) {
        return Err(format!(
            "the row-statistics matmul needs N to be a multiple of {ROW_STATISTICS_BLOCK} \
             (whole blocks of row statistics); N is {}",
            p.n
        ));
    }
    Ok(())
}

/// The tile [`matmul_with_row_statistics`] picks for `p` on `gpu` with this residual and C:
/// the tile [`matmul`] would take (tuned or the cost model's) where it is one of
/// [`ROW_STATISTICS_TILES`], so that C is [`matmul`]'s bit for bit; else the cheapest of those
/// by the cost model's rule for them (`select_row_statistics_tile`); with batch-invariant
/// selection, as if M were large (the tuning table is ignored then too).
pub fn row_statistics_tile_for(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    residual: DevPtr,
    c: DevPtr,
) -> Result<MatmulTile, KernelError> {
    let storage = MatmulStorage {
        output: c.dtype,
        residual: Some(residual.dtype),
    };
    let (tile, _) = matmul_choice(gpu, dtype, p, storage)?;
    if ROW_STATISTICS_TILES.contains(&tile) {
        return Ok(tile);
    }
    let m = selection_rows(gpu, p.m);
    Ok(select_row_statistics_tile(m, p.n, p.k, sm_count(gpu)?))
}

/// The FP8 matmul ([`Fp8Problem`]): e4m3 A and B, the scales, bias, activation and residual
/// in the epilogue, C in f16, bf16 or e4m3, on the Hopper ping-pong program (sm_90 only). The
/// tile is the cost model's ([`fp8_tile_for`]). Refuses, with the reason, what the program
/// cannot take: K not a multiple of 16, C's rows not a multiple of 16 bytes, operands not on
/// 16-byte boundaries, a GPU other than sm_90.
pub fn matmul_fp8(gpu: &Gpu, p: &Fp8Problem, ops: &Fp8Operands) -> Result<(), KernelError> {
    let tile = fp8_tile_for(gpu, p)?;
    matmul_fp8_with_tile(gpu, p, tile, ops)
}

/// [`matmul_fp8`] on a tile of the caller's, one of [`FP8_TILES`]: for benchmarks and tests.
pub fn matmul_fp8_with_tile(
    gpu: &Gpu,
    p: &Fp8Problem,
    tile: MatmulTile,
    ops: &Fp8Operands,
) -> Result<(), KernelError> {
    if !FP8_TILES.contains(&tile) {
        return Err(invalid!("tile {} is not one of the FP8 tiles", tile.name()));
    }
    if !tile.runs_on(gpu.compute_capability()) {
        let (major, minor) = gpu.compute_capability();
        return Err(invalid!(
            "the FP8 matmul needs an sm_90 GPU (e4m3 wgmma); this one is sm_{major}{minor}"
        ));
    }
    tma_pingpong_fp8::launch(gpu, p, tile, ops)
}

/// The tile [`matmul_fp8`] picks for `p` on `gpu`: the narrow FP8 tile while its tiles fit in
/// one wave, else the 128 x 128 one; with batch-invariant selection always the latter (as if
/// M were large), so that a row's result never depends on the batch.
pub fn fp8_tile_for(gpu: &Gpu, p: &Fp8Problem) -> Result<MatmulTile, KernelError> {
    let m = selection_rows(gpu, p.m);
    Ok(select_fp8_tile(m, p.n, p.k, sm_count(gpu)?))
}

/// The layernorm-folded linear layer ([`LayernormMatmulProblem`]): `out = act(LayerNorm(x) ·
/// Wᵀ + b)` from the raw rows `x` `[M, K]`, their partial statistics `row_stats` (F32,
/// `[K / 64][M]` pairs (mean_b, m2_b) as [`matmul_with_row_statistics`] wrote them when it
/// wrote x; 8-byte aligned), which the epilogue combines into each row's mean and rstd, the
/// folded weights `w` = W' `[N, K]`, the folded
/// bias b' (N values) and the column sums of W' (N f32; see
/// [`crate::matmul::layernorm_fold`]), x, W', the bias and `out` `[M, N]` in `dtype` (f16 or
/// bf16), on the ping-pong program's layernorm entry (sm_90 only). The tile is the cost
/// model's ([`layernorm_matmul_tile_for`]). Refuses, with the reason, what the program cannot
/// take: see [`layernorm_matmul_support`], wrong dtypes or lengths, x, W' or out not on
/// 16-byte boundaries.
#[allow(clippy::too_many_arguments)]
pub fn matmul_layernorm(
    gpu: &Gpu,
    dtype: DType,
    p: &LayernormMatmulProblem,
    x: DevPtr,
    row_stats: DevPtr,
    w: DevPtr,
    bias: DevPtr,
    column_sums: DevPtr,
    out: DevPtr,
) -> Result<(), KernelError> {
    let tile = layernorm_matmul_tile_for(gpu, p)?;
    matmul_layernorm_with_tile(gpu, dtype, p, tile, x, row_stats, w, bias, column_sums, out)
}

/// [`matmul_layernorm`] on a tile of the caller's, one of [`LAYERNORM_TILES`]: for benchmarks
/// and tests.
#[allow(clippy::too_many_arguments)]
pub fn matmul_layernorm_with_tile(
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
    if !LAYERNORM_TILES.contains(&tile) {
        return Err(invalid!(
            "tile {} is not one of the layernorm matmul tiles",
            tile.name()
        ));
    }
    layernorm_matmul_support(gpu, dtype, p).map_err(KernelError::InvalidArgument)?;
    tma_pingpong_layernorm::launch(gpu, dtype, p, tile, x, row_stats, w, bias, column_sums, out)
}

/// Whether [`matmul_layernorm`] runs `p` on `gpu` with `dtype` operands: an sm_90 GPU (the
/// program is sm_90a), f16 or bf16, and a problem the program takes
/// ([`LayernormMatmulProblem::check`]: K a positive multiple of 64, N a multiple of 8, an
/// epilogue activation). Else the reason, in words. Operands are checked at the launch.
pub fn layernorm_matmul_support(
    gpu: &Gpu,
    dtype: DType,
    p: &LayernormMatmulProblem,
) -> Result<(), String> {
    require_sm90(gpu, "the layernorm matmul")?;
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(format!(
            "the layernorm matmul runs on f16 or bf16 operands, not {dtype}"
        ));
    }
    p.check()
}

/// Ok on an sm_90 GPU, which the ping-pong program's entries (`what`) need: TMA and wgmma.
fn require_sm90(gpu: &Gpu, what: &str) -> Result<(), String> {
    match gpu.compute_capability() {
        (9, 0) => Ok(()),
        (major, minor) => Err(format!(
            "{what} needs an sm_90 GPU (TMA and wgmma); this one is sm_{major}{minor}"
        )),
    }
}

/// The tile [`matmul_layernorm`] picks for `p` on `gpu`: the narrow ping-pong tile while its
/// tiles fit in one wave and it is the cheaper, else the 128 x 128 one; with batch-invariant
/// selection always the latter (as if M were large), so that a row's result never depends on
/// the batch.
pub fn layernorm_matmul_tile_for(
    gpu: &Gpu,
    p: &LayernormMatmulProblem,
) -> Result<MatmulTile, KernelError> {
    let m = selection_rows(gpu, p.m);
    Ok(select_layernorm_tile(m, p.n, p.k, sm_count(gpu)?))
}

/// Checks every view's dtype and length against the problem; returns the bias and residual
/// the epilogue actually reads (`None` where the epilogue does not ask for one, even if given).
pub(crate) fn validate(
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
    if !p.epilogue.activation.in_matmul_epilogue() {
        return Err(invalid!(
            "the matmul epilogue does not apply {:?}: run it as an activation pass",
            p.epilogue.activation
        ));
    }
    super::check_storage(
        dtype,
        p,
        a.dtype,
        b.dtype,
        bias.map(|v| v.dtype),
        residual.map(|r| r.dtype),
        c.dtype,
    )
    .map_err(KernelError::InvalidArgument)?;
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
    row_stats: Option<DevPtr>,
) -> Result<(), KernelError> {
    let (bias, residual) = validate(dtype, p, a, b, bias, residual, c)?;
    if p.batch == 0 || p.heads == 0 || p.m == 0 || p.n == 0 {
        return Ok(());
    }

    let config = configure(dtype, p, tile, a, b, residual, c);
    if row_stats.is_some() && !config.is_pingpong_stream16() {
        return Err(invalid!(
            "the row-statistics matmul needs A, B, R and C as the ping-pong tile's tensor maps \
             take them (rows on 16-byte boundaries, R and C in {dtype}); these fall back to tile \
             {}",
            config.tile.name()
        ));
    }
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

    let instantiation = match row_stats {
        Some(_) => config.row_stats_instantiation(),
        None => config.instantiation(),
    };
    let launch = MatmulLaunch {
        gpu,
        dtype,
        p,
        config: &config,
        instantiation: &instantiation,
        a,
        b,
        bias,
        residual,
        c,
        vector_epilogue,
        programs,
    };
    let (args, dims) = match tile.program {
        Program::MmaSync | Program::Fma => mma_sync::launch_args(&launch)?,
        Program::Wgmma => wgmma::launch_args(&launch)?,
        Program::TmaCooperative => tma_cooperative::launch_args(&launch)?,
        Program::TmaPingPong => match row_stats {
            Some(row_stats) => tma_pingpong::row_stats_launch_args(&launch, row_stats)?,
            None => tma_pingpong::launch_args(&launch)?,
        },
    };
    gpu.launch(&instantiation, dims, &args)
}

impl MatmulConfig {
    /// The instantiation of this configuration's program, built in the program's file beside
    /// its arguments.
    pub fn instantiation(&self) -> Instantiation {
        let d = self.dtype;
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
        match self.tile.program {
            Program::MmaSync | Program::Fma => self.mma_sync_instantiation(layout, mixed),
            Program::Wgmma => self.wgmma_instantiation(layout, mixed),
            Program::TmaCooperative => self.tma_instantiation(mixed),
            Program::TmaPingPong => self.pingpong_instantiation(),
        }
    }
}

/// Every instantiation `launch_with_tile`, `matmul_fp8` and `matmul_layernorm` can pick.
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
            let layouts: &[WeightLayout] = if tile.program.is_hopper() || tile == DEEP_SMALL_TILE {
                &[WeightLayout::NK]
            } else {
                &[WeightLayout::NK, WeightLayout::KN]
            };
            for activation in Activation::EPILOGUE {
                for &b_layout in layouts {
                    for &(residual, output) in storage {
                        if MixedOutput::of(dtype, residual, output)
                            .is_some_and(|mixed| !mixed.allows(activation, b_layout))
                            || (tile.program == Program::TmaPingPong
                                && (residual, output) != (dtype, dtype)
                                && (residual, output) != (DType::F32, DType::F32))
                        {
                            continue;
                        }
                        // The ping-pong tile has a program without and one with a residual in
                        // the operands' type; the f32 stream always has one.
                        let with_residual: &[bool] = if tile.program != Program::TmaPingPong {
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
    all.extend(tma_pingpong_fp8::instantiations());
    all.extend(tma_pingpong_layernorm::instantiations());
    all.extend(row_statistics_instantiations());
    all
}

/// Every instantiation [`matmul_with_row_statistics`] can pick: the 16-bit-stream ping-pong
/// configuration of each of [`ROW_STATISTICS_TILES`], both 16-bit types, every epilogue
/// activation.
pub(crate) fn row_statistics_instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for tile in ROW_STATISTICS_TILES {
        for dtype in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                let config = MatmulConfig {
                    dtype,
                    residual: dtype,
                    output: dtype,
                    tile,
                    activation,
                    b_layout: WeightLayout::NK,
                    vec16: true,
                    with_residual: true,
                };
                all.push(config.row_stats_instantiation());
            }
        }
    }
    all
}
