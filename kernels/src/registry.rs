//! Every instantiation any launcher can pick, collected from the families (and the device
//! layer's own spin kernel): what CI compiles for sm_80 and sm_90 without a GPU
//! (kernels/tests/nvrtc_compile.rs). It lives above the families so that the device layer
//! (`crate::cuda`) never imports one.

use crate::cuda::Instantiation;

/// Every instantiation any launcher can pick, for every dtype: what CI compiles.
pub fn all_instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    all.extend(crate::layernorm::gpu::instantiations());
    all.extend(crate::quantize::gpu::instantiations());
    all.extend(crate::rmsnorm::gpu::instantiations());
    all.extend(crate::softmax::gpu::instantiations());
    all.extend(crate::add::gpu::instantiations());
    all.extend(crate::patchify::gpu::instantiations());
    all.extend(crate::pixels::gpu::instantiations());
    all.extend(crate::jpeg::gpu::instantiations());
    all.extend(crate::jpeg_scan::gpu::instantiations());
    all.extend(crate::resample::gpu::instantiations());
    all.extend(crate::rope::gpu::instantiations());
    all.extend(crate::matmul::instantiations());
    all.extend(crate::activation::gpu::instantiations());
    all.extend(crate::gather::gpu::instantiations());
    all.extend(crate::pool::gpu::instantiations());
    all.extend(crate::normalize::gpu::instantiations());
    all.extend(crate::attention::gpu::instantiations());
    all.extend(crate::cuda::timing::instantiations());
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
