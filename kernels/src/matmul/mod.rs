//! The matmul family: the block program behind every linear layer, the patch embedding and
//! both attention products, on the CPU ([`cpu`]) and on a [`crate::cuda::Gpu`] ([`gpu`]).
//!
//! - problem.rs: what a matmul computes ([`MatmulProblem`], [`Epilogue`], [`WeightLayout`]).
//! - selection.rs: the tile tables and the cost model that picks a tile; split-K.
//! - config.rs: one instantiation's meta-parameters, its program (one `.cu` a program, sharing epilogue.cuh, copy.cuh, wgmma.cuh and tma.cuh), and every
//!   instantiation the launcher can pick, generated from the tile tables.
//! - tuning.rs: the tuning table and its file; the tuned tile wins over the cost model's.
//! - tune.rs: the tuner that fills the table.
//! - gpu.rs: the launcher; it is handed the tile and never looks it up itself.
//!
//! Dependencies run one way: problem, selection, config, tuning, gpu, tune; each file uses only
//! those before it (and the device layer, `crate::cuda`).

mod config;
pub mod cpu;
pub mod gpu;
mod problem;
pub mod selection;
#[cfg(test)]
mod tests;
pub mod tune;
pub mod tuning;

pub use problem::{Epilogue, MatmulProblem, WeightLayout};
pub use selection::{
    matmul_tile_for, tiles_for, MatmulTile, Program, FMA_TILES, TENSOR_CORE_TILES, WGMMA_TILES,
};
pub use tune::{
    store_matmul_tuning, tune_matmul, CandidateTime, MatmulCase, MatmulTuning, TuneSettings,
};
pub use tuning::{
    matmul_candidates, matmul_choice, matmul_signature, matmul_source_hash, resolve_tuned_tile,
    tuning_file, use_tuning_file, MatmulStorage, TileSource, TunedChoice, TuningKey, TuningTable,
    TUNING_FILE_NAME, TUNING_FORMAT,
};

/// Every instantiation the matmul launcher can pick, for every dtype: what CI compiles.
pub fn instantiations() -> Vec<crate::cuda::Instantiation> {
    config::instantiations()
}
