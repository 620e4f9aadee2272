//! The CPU twins: each GPU kernel's computation in plain Rust, f32, with the same signature
//! and the same block decomposition. They are the reference in GPU tests and the CPU backend.
//! Written for clarity first; rayon spreads the programs over cores.

mod attention;
mod elementwise;
mod pixels;

pub use crate::matmul::cpu::{matmul, MatmulTiles};
pub use attention::{attention, AttentionTiles};
pub use elementwise::{add, bias_activation, layernorm, patchify, softmax, write_cls_rows};
pub use pixels::expand_pixels;
