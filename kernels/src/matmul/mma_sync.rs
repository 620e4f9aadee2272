//! The block entry point `matmul_block`, which mma_sync.cu (f16/bf16 tensor cores) and fma.cu
//! (f32, CUDA cores) both define with one list of template arguments and one parameter, the
//! launch's [`MatmulParams`] (params.rs): `Program::MmaSync` and `Program::Fma` differ only in
//! the source they compile. Its instantiation and its arguments, each beside the other; the
//! template arguments' first part is also wgmma.cu's entry's (wgmma.rs).

use crate::cuda::{ArchRequirement, Instantiation, KernelArg, KernelError, LaunchDims};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{split_k_scratch, MatmulLaunch};
use crate::matmul::params::{MatmulParams, SplitKParams};
use crate::matmul::problem::WeightLayout;
use crate::matmul::selection::{split_k, SplitK};

impl MatmulConfig {
    /// The template arguments `matmul_block` and `matmul_block_wgmma` share, up to STAGES.
    pub(crate) fn block_template_args(&self) -> Vec<String> {
        let d = self.dtype;
        let t = &self.tile;
        vec![
            d.cuda_type().into(),
            self.residual.cuda_type().into(),
            self.output.cuda_type().into(),
            t.block_m.to_string(),
            t.block_n.to_string(),
            t.block_k.to_string(),
            GROUP_M.to_string(),
            t.stages.to_string(),
        ]
    }

    /// The mma.sync or FMA instantiation (`matmul_block`). `layout` names B's layout, `mixed`
    /// R's and C's types where they are not the operands'.
    pub(crate) fn mma_sync_instantiation(&self, layout: &str, mixed: String) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let name = format!(
            "matmul_{}_bm{}_bn{}_bk{}_g{GROUP_M}_s{}_w{}x{}_{}_{layout}_{}{mixed}",
            d.name(),
            t.block_m,
            t.block_n,
            t.block_k,
            t.stages,
            t.warps_m,
            t.warps_n,
            self.activation.short_name(),
            if self.vec16 { "v16" } else { "v1" },
        );
        let mut template_args = self.block_template_args();
        template_args.extend([
            t.warps_m.to_string(),
            t.warps_n.to_string(),
            self.activation.cuda_name().into(),
            (self.b_layout == WeightLayout::KN).to_string(),
            self.vec16.to_string(),
        ]);
        Instantiation {
            name,
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: "matmul_block",
            template_args,
            params: vec![MatmulParams::param()],
            block_threads: t.threads(),
            min_blocks_per_sm: 0,
            // cp.async, ldmatrix and bf16 mma.sync need sm_80.
            arch: ArchRequirement::AtLeast(8, 0),
        }
    }
}

/// The arguments to [`MatmulConfig::mma_sync_instantiation`]'s parameters, and its grid: one
/// CTA per output tile and K split.
pub(crate) fn launch_args(l: &MatmulLaunch) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    let MatmulLaunch {
        gpu,
        dtype,
        p,
        config,
        programs,
        ..
    } = *l;
    let tile = config.tile;
    // Split-K sums a row's partials in another order: never with batch-invariant selection.
    let split = if gpu.batch_invariant() {
        SplitK::NONE
    } else {
        split_k(dtype, p, tile, programs, gpu.multiprocessors())
    };
    let (partials, counters) = if split.splits > 1 {
        split_k_scratch(gpu)?
    } else {
        (0, 0)
    };
    let params = MatmulParams::of(l)?.split(SplitKParams {
        splits: split.splits as i32,
        k: split.k as i32,
        partials,
        counters,
    });
    let dims = LaunchDims {
        grid: ((programs * split.splits as u64) as u32, 1, 1),
        block: tile.threads(),
        shared_bytes: config.shared_bytes(),
        cluster: 1,
    };
    Ok((params.args(), dims))
}
