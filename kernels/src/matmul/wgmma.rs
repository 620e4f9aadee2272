//! The Hopper cp.async body `matmul_block_wgmma` (wgmma.cu): its instantiation and its
//! arguments, each beside the other. It takes `matmul_block`'s parameter, the launch's
//! [`MatmulParams`] (params.rs), never split: Hopper tiles never split.

use crate::cuda::{ArchRequirement, Instantiation, KernelArg, KernelError, LaunchDims};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::MatmulLaunch;
use crate::matmul::params::MatmulParams;

impl MatmulConfig {
    /// The wgmma instantiation (`matmul_block_wgmma`). `layout` names B's layout, `mixed` R's
    /// and C's types where they are not the operands'.
    pub(crate) fn wgmma_instantiation(&self, layout: &str, mixed: String) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let name = format!(
            "matmul_{}_wg_bm{}_bn{}_bk{}_g{GROUP_M}_s{}_{}_{layout}{mixed}",
            d.name(),
            t.block_m,
            t.block_n,
            t.block_k,
            t.stages,
            self.activation.short_name(),
        );
        let mut template_args = self.block_template_args();
        template_args.push(self.activation.cuda_name().into());
        Instantiation {
            name,
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: "matmul_block_wgmma",
            template_args,
            params: vec![MatmulParams::param()],
            block_threads: t.threads(),
            // Tiles meant to share an SM must fit its registers twice.
            min_blocks_per_sm: if t.ctas_per_sm > 1 { t.ctas_per_sm } else { 0 },
            // wgmma exists on sm_90a only.
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// The arguments to [`MatmulConfig::wgmma_instantiation`]'s parameters, and its grid: one CTA
/// per output tile (`split_k` splits the small mma.sync tiles only).
pub(crate) fn launch_args(l: &MatmulLaunch) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    let args = MatmulParams::of(l)?.args();
    let dims = LaunchDims {
        grid: (l.programs as u32, 1, 1),
        block: l.config.tile.threads(),
        shared_bytes: l.config.shared_bytes(),
        cluster: 1,
    };
    Ok((args, dims))
}
