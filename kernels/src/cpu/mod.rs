//! The matmul's CPU twin (every other family keeps its twin in its own folder, as
//! `<family>::cpu`): f32, with the same signature and block decomposition as the GPU kernel.
//! It is the reference in GPU tests and the CPU backend. Written for clarity first; rayon
//! spreads the programs over cores.

mod matmul;

pub use matmul::{matmul, MatmulTiles};
