//! Pooling over tokens: `out[b, :] = mean(x[b, start.., :])`, the mean of a range of token rows
//! of every sequence. DINOv2's classifier reads the mean of the patch tokens (after the CLS
//! token and any registers), CLIP's and SigLIP's classifiers and `vitrt embed --pool mean`
//! the mean of all tokens or of the patches.
//!
//! - [`gpu::token_mean`]: pool.cu, one thread per column of one image; tokens in the run's
//!   dtype or in f32 (a residual stream kept in f32), the mean in the run's dtype.
//! - [`cpu::token_mean`]: the CPU twin, same summation order.
//!
//! Tests: kernels/tests/gpu_kernels/activation.rs (`swiglu_and_token_mean_match_their_twins`). No bench case: one
//! read of the last hidden state, a few microseconds at batch 256.

pub mod cpu;
pub mod gpu;
