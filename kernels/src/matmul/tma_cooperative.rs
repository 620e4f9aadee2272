//! The Hopper TMA cooperative program `matmul_block_tma` (tma_cooperative.cu): its parameters
//! and its arguments, each beside the other. A and B are tensor maps of one matrix each; C and
//! the residual are pointers with their offsets and row strides.

use crate::cuda::{
    to_i64, ArchRequirement, Instantiation, KernelArg, KernelError, KernelParam, LaunchDims,
    ParamKind,
};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{persistent_dims, tma_args, MatmulLaunch, TmaArgs};

impl MatmulConfig {
    /// The TMA cooperative Hopper instantiation: A and B as tensor maps, one [N, K] matrix.
    /// `mixed` names R's and C's types where they are not the operands'.
    pub(crate) fn tma_instantiation(&self, mixed: String) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let name = format!(
            "matmul_{}_tma_bn{}_s{}_g{GROUP_M}_{}_nk{mixed}",
            d.name(),
            t.block_n,
            t.stages,
            self.activation.short_name(),
        );
        let params = vec![
            KernelParam::new("a_map", ParamKind::TensorMap),
            KernelParam::new("b_map", ParamKind::TensorMap),
            KernelParam::new("bias", ParamKind::ConstPtr(d)),
            KernelParam::new("residual", ParamKind::ConstPtr(self.residual)),
            KernelParam::new("c", ParamKind::MutPtr(self.output)),
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
            KernelParam::new("c_offset", ParamKind::I64),
            KernelParam::new("c_row_stride", ParamKind::I64),
            KernelParam::new("r_offset", ParamKind::I64),
            KernelParam::new("r_row_stride", ParamKind::I64),
            KernelParam::new("alpha", ParamKind::F32),
            KernelParam::new("vector_epilogue", ParamKind::I32),
        ];
        Instantiation {
            name,
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: "matmul_block_tma",
            template_args: vec![
                d.cuda_type().into(),
                self.residual.cuda_type().into(),
                self.output.cuda_type().into(),
                t.block_n.to_string(),
                t.stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().into(),
            ],
            params,
            block_threads: t.threads(),
            // setmaxnreg moves registers between the warpgroups only under a cap at entry.
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// The arguments to [`MatmulConfig::tma_instantiation`]'s parameters, and its persistent grid.
pub(crate) fn launch_args(l: &MatmulLaunch) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    let MatmulLaunch {
        p,
        residual,
        c,
        vector_epilogue,
        ..
    } = *l;
    let TmaArgs {
        a_map,
        b_map,
        bias,
        m,
        n,
        k,
        alpha,
    } = tma_args(l)?;
    let args = vec![
        a_map,
        b_map,
        bias,
        KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(c.ptr),
        m,
        n,
        k,
        KernelArg::I64(to_i64(p.c.offset)?),
        KernelArg::I64(to_i64(p.c.row_stride)?),
        KernelArg::I64(to_i64(p.r.offset)?),
        KernelArg::I64(to_i64(p.r.row_stride)?),
        alpha,
        KernelArg::I32(vector_epilogue as i32),
    ];
    Ok((args, persistent_dims(l)?))
}
