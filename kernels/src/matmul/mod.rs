//! The matmul family: the block program behind every linear layer, the patch embedding and
//! both attention products, on the CPU ([`cpu`]) and on a [`crate::cuda::Gpu`] ([`gpu`]).
//!
//! - problem.rs: what a matmul computes ([`MatmulProblem`], [`Epilogue`], [`WeightLayout`]).
//! - selection.rs: the tile tables and the cost model that picks a tile; split-K.
//! - config.rs: one instantiation's meta-parameters and its program (one `.cu` a program,
//!   sharing epilogue.cuh, copy.cuh, wgmma.cuh, tma.cuh and params.cuh); the configuration for a launch.
//! - tuning.rs: the tuning table and its file; the tuned tile wins over the cost model's.
//! - launch.rs: what the programs' launches share (split-K scratch, tensor maps).
//! - params.rs: the block programs' one parameter, `MatmulParams`, mirroring params.cuh.
//! - one `.rs` beside each program's `.cu`, building its instantiation and, next to it, its
//!   arguments and grid for a problem: mma_sync.rs (mma_sync.cu and fma.cu, one entry point),
//!   wgmma.rs, tma_cooperative.rs, tma_pingpong.rs.
//! - gpu.rs: the launcher, which dispatches on the program to its file; it is handed the tile
//!   and never looks it up itself. Every instantiation the launcher can pick, generated from
//!   the tile tables.
//! - tune.rs: the tuner that fills the table.
//! - fp8.rs: what the FP8 matmul computes ([`Fp8Problem`]: e4m3 operands, scales in the
//!   epilogue), for its twin (`cpu::matmul_fp8`) and its program (tma_pingpong_fp8.rs, the
//!   FP8 entry points of tma_pingpong.cu; `gpu::matmul_fp8`). Its CPU tests are in cpu.rs,
//!   its GPU tests in kernels/tests/gpu_matmul_fp8.rs, its unit tests of selection and
//!   instantiations in tests.rs.
//! - layernorm_matmul.rs: what the layernorm-folded matmul computes
//!   ([`LayernormMatmulProblem`]: a layernorm's statistics of A's rows combined in the
//!   epilogue from per-block partials that A's producer wrote, `gpu::matmul_with_row_statistics`
//!   and its twin `cpu::row_statistics`; gamma and beta folded into the weights by
//!   [`layernorm_fold`]), for its twin
//!   (`cpu::matmul_layernorm`) and its program (tma_pingpong_layernorm.rs, the layernorm entry
//!   of tma_pingpong.cu; `gpu::matmul_layernorm`). Its CPU tests are in cpu.rs, its GPU tests in
//!   kernels/tests/gpu_matmul_layernorm.rs.
//!
//! Dependencies run one way: problem, selection, config, tuning, launch, params, mma_sync,
//! wgmma, tma_cooperative, tma_pingpong, tma_pingpong_fp8, tma_pingpong_layernorm, gpu, tune
//! (fp8, layernorm_matmul and layernorm_fold beside problem);
//! each file uses only those before it (and
//! the device layer, `crate::cuda`).

mod config;
pub mod cpu;
mod fp8;
pub mod gpu;
mod launch;
pub mod layernorm_fold;
mod layernorm_matmul;
mod mma_sync;
mod params;
mod problem;
pub mod selection;
#[cfg(test)]
mod tests;
mod tma_cooperative;
mod tma_pingpong;
mod tma_pingpong_fp8;
mod tma_pingpong_layernorm;
pub mod tune;
pub mod tuning;
mod wgmma;

pub use crate::cuda::E4m3Ptr;
pub use fp8::{inverse_out_scale, ActivationScale, Fp8Output, Fp8Problem, FP8_K_MULTIPLE};
pub use gpu::{layernorm_matmul_support, row_statistics_support};
pub use layernorm_matmul::{
    block_statistics, combine_statistics, row_statistics_len, LayernormMatmulProblem,
    LAYERNORM_MATMUL_K_MULTIPLE, LAYERNORM_MATMUL_N_MULTIPLE, ROW_STATISTICS_BLOCK,
};
pub use problem::{Epilogue, MatmulProblem, WeightLayout};
pub use selection::{
    matmul_tile_for, tiles_for, MatmulTile, Program, FMA_TILES, FP8_TILES, LAYERNORM_TILES,
    ROW_STATISTICS_TILES, TENSOR_CORE_TILES, WGMMA_TILES,
};
pub use tma_pingpong_fp8::{Fp8Destination, Fp8Operands};
pub use tune::{
    store_matmul_tuning, tune_matmul, CandidateTime, MatmulCase, MatmulTuning, TuneSettings,
};
pub use tuning::{
    matmul_candidates, matmul_choice, matmul_signature, matmul_source_hash, resolve_tuned_tile,
    tuning_file, use_tuning_file, MatmulStorage, TileSource, TunedChoice, TuningKey, TuningTable,
    TUNING_FILE_NAME, TUNING_FORMAT,
};

/// Every instantiation the matmul launcher can pick, for every dtype: what CI compiles.
/// Whether the matmul programs read and write these storage types: A, B and the bias in the
/// operands' `dtype`; C and the residual (when the epilogue reads one) in `dtype`, or f32 where
/// a half-precision run's programs take it (both f32, the residual stream; or the residual in
/// `dtype` and C f32 with no activation, the stream's start), B as [N, K] only. An error says
/// which operand holds what. The GPU launcher checks every launch with it, and the CPU twin
/// too, so a plan the GPU would refuse fails on the CPU first.
pub fn check_storage(
    dtype: crate::DType,
    p: &MatmulProblem,
    a: crate::DType,
    b: crate::DType,
    bias: Option<crate::DType>,
    residual: Option<crate::DType>,
    c: crate::DType,
) -> Result<(), String> {
    for (what, held) in [("A", Some(a)), ("B", Some(b)), ("bias", bias)] {
        if let Some(held) = held.filter(|&h| h != dtype) {
            return Err(format!("matmul {what} holds {held}, the op wants {dtype}"));
        }
    }
    let residual_dtype = residual.unwrap_or(c);
    if (residual_dtype, c) == (dtype, dtype) {
        return Ok(());
    }
    let allowed = config::MixedOutput::of(dtype, residual_dtype, c)
        .is_some_and(|mixed| mixed.allows(p.epilogue.activation, p.b_layout));
    if allowed {
        return Ok(());
    }
    let residual_part = match residual {
        Some(r) => format!(", residual {r}"),
        None => String::new(),
    };
    Err(format!(
        "matmul C holds {c}{residual_part} with {dtype} operands, {:?} and B as {:?}: not a \
         combination the kernels are built for",
        p.epilogue.activation, p.b_layout
    ))
}

pub fn instantiations() -> Vec<crate::cuda::Instantiation> {
    gpu::instantiations()
}
