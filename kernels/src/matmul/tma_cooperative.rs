//! The Hopper TMA cooperative program `matmul_block_tma` (tma_cooperative.cu): its parameters,
//! declared once, and its instantiation and arguments. A and B are tensor maps of one matrix
//! each; C and the residual are pointers with their offsets and row strides.

use crate::cuda::{
    kernel_params, to_i64, ArchRequirement, DevPtr, Instantiation, KernelArg, KernelError,
    LaunchDims,
};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{
    persistent_dims, tma_operands, MatmulLaunch, TmaOperands, DECLARED_MAP,
};

kernel_params! {
    /// matmul_block_tma's parameters.
    struct TmaCooperativeParams {
        a_map: tensor_map,
        b_map: tensor_map,
        bias: const_ptr,
        residual: const_ptr,
        c: mut_ptr,
        m: i32,
        n: i32,
        k: i32,
        c_offset: i64,
        c_row_stride: i64,
        r_offset: i64,
        r_row_stride: i64,
        alpha: f32,
        vector_epilogue: i32,
    }
}

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
        let declared = TmaCooperativeParams {
            a_map: DECLARED_MAP,
            b_map: DECLARED_MAP,
            bias: DevPtr::of_type(d),
            residual: DevPtr::of_type(self.residual),
            c: DevPtr::of_type(self.output),
            m: 0,
            n: 0,
            k: 0,
            c_offset: 0,
            c_row_stride: 0,
            r_offset: 0,
            r_row_stride: 0,
            alpha: 0.0,
            vector_epilogue: 0,
        };
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
            params: declared.params(),
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
        config,
        residual,
        c,
        vector_epilogue,
        ..
    } = *l;
    let TmaOperands {
        a_map,
        b_map,
        bias,
        m,
        n,
        k,
        alpha,
    } = tma_operands(l)?;
    let params = TmaCooperativeParams {
        a_map,
        b_map,
        bias,
        residual: residual.unwrap_or(DevPtr::of_type(config.residual)),
        c,
        m,
        n,
        k,
        c_offset: to_i64(p.c.offset)?,
        c_row_stride: to_i64(p.c.row_stride)?,
        r_offset: to_i64(p.r.offset)?,
        r_row_stride: to_i64(p.r.row_stride)?,
        alpha,
        vector_epilogue: vector_epilogue as i32,
    };
    Ok((params.args(), persistent_dims(l)?))
}
