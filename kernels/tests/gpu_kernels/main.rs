//! The non-matmul CUDA kernels against their CPU twins, on random data over ragged shapes, in
//! every dtype, with aligned and misaligned operands (which select the vector and the scalar
//! instantiations). Outputs are poisoned before each run (0xFF bytes: NaN in f32, f16 and
//! bf16) inside a guard region: every element must be written, and the guards untouched.
//!
//! Tolerances, as |gpu - twin| <= rtol * |twin| + atol, the twin's f32 result rounded to the
//! storage dtype:
//! - add, patchify and the token embedding do the same f32 arithmetic and one rounding on
//!   both sides, and the end-token gather copies: exact.
//! - layernorm, rmsnorm and softmax reduce in a different order than the twin: f32 rtol 1e-4; f16 rtol
//!   2e-3 (two f16 ulps, 2^-10 each: the f32 results may straddle a rounding boundary); bf16
//!   rtol 1e-2 (a bf16 ulp is up to 2^-7 = 7.8e-3). Layernorm's (and rmsnorm's) atol is rtol times the
//!   largest output: its outputs near zero carry the rounding error of the row statistics,
//!   which are O(1) (and the twin's sequential f32 sum is the less accurate of the two on
//!   rows with a large mean: 2e-5 absolute seen on a row of 768 around 50). Softmax's atol is
//!   1e-6: its small outputs are computed with relative accuracy.
//!
//! Needs a CUDA GPU: `cargo test --release -p vitrt-kernels --test gpu_kernels -- --ignored`.
//!
//! One module per kernel family (`layernorm`, `rmsnorm`, `softmax`, `add`, `patchify`, `activation`,
//! `normalize`, `gather`), then the argument checks of every family (`arguments`), the
//! bandwidth record (`bandwidth`) and opening a device (`device`).

// What every family's module uses (each takes it with `use super::*`).
#[path = "../common/mod.rs"]
mod common;

use common::{compare, gpu, largest, merge, random, report, tolerance, upload, Poisoned, Worst};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use vitrt_kernels::cuda::{Gpu, KernelError};
use vitrt_kernels::patchify::gpu::PrefixRows;
use vitrt_kernels::{Activation, DType};

mod activation;
mod add;
mod arguments;
mod bandwidth;
mod device;
mod gather;
mod layernorm;
mod normalize;
mod patchify;
mod rmsnorm;
mod rope;
mod softmax;
