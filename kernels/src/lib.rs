//! vitrt's kernels: CUDA C++ block programs compiled at run time by NVRTC, and a CPU twin of
//! each with the same signature and block decomposition.
//!
//! This crate knows nothing of graphs or models: it takes buffers, shapes and
//! meta-parameters, and computes.

pub mod cpu;
pub mod cuda;
pub mod matmul;
mod types;

pub use matmul::{Epilogue, MatmulProblem, WeightLayout};
pub use types::{Activation, AttentionProblem, DType, Operand, PixelBatch};

/// Every instantiation any launcher can pick, for every dtype: what CI compiles. The device
/// layer's families, then the matmul's.
pub fn all_instantiations() -> Vec<cuda::Instantiation> {
    let mut all = cuda::family_instantiations();
    all.extend(matmul::instantiations());
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn wrapper_names_are_unique() {
        let all = all_instantiations();
        let names: HashSet<&str> = all.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names.len(),
            all.len(),
            "two instantiations share a wrapper name"
        );
    }
}
