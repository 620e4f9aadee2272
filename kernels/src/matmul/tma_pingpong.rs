//! The Hopper TMA ping-pong programs (tma_pingpong.cu): their parameters and their arguments,
//! each beside the other, for its three entry points: `matmul_block_tma_pingpong` (C through a
//! tensor map, no residual), `matmul_block_tma_pingpong_residual` (the f32 residual stream: R
//! through a tensor map, C a pointer) and `matmul_block_tma_pingpong_stream16` (a residual in
//! the operands' type: R and C through tensor maps).

use crate::cuda::{
    to_i64, ArchRequirement, Instantiation, KernelArg, KernelError, KernelParam, LaunchDims,
    ParamKind,
};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{persistent_dims, tensor_map, tma_args, MatmulLaunch, TmaArgs};
use crate::types::DType;

impl MatmulConfig {
    /// The ping-pong Hopper instantiation: A, B and C as tensor maps, one matrix, no residual,
    /// C in the operands' type; or R as a tensor map and C as a pointer for the f32 residual
    /// stream (see `pingpong_takes` for what the launcher sends it).
    pub(crate) fn pingpong_instantiation(&self) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let residual = self.pingpong_residual();
        let stages = if residual {
            self.pingpong_residual_stages()
        } else {
            t.stages
        };
        let mut params = vec![
            KernelParam::new("a_map", ParamKind::TensorMap),
            KernelParam::new("b_map", ParamKind::TensorMap),
        ];
        let stream16 = residual && self.output != DType::F32;
        if stream16 {
            params.extend([
                KernelParam::new("r_map", ParamKind::TensorMap),
                KernelParam::new("c_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
            ]);
        } else if residual {
            params.extend([
                KernelParam::new("r_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
                KernelParam::new("c", ParamKind::MutPtr(DType::F32)),
                KernelParam::new("c_row_stride", ParamKind::I64),
            ]);
        } else {
            params.extend([
                KernelParam::new("c_map", ParamKind::TensorMap),
                KernelParam::new("bias", ParamKind::ConstPtr(d)),
            ]);
        }
        params.extend([
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
            KernelParam::new("alpha", ParamKind::F32),
        ]);
        Instantiation {
            name: format!(
                "matmul_{}_tmapp_bn{}_s{stages}_g{GROUP_M}{}_{}_nk{}",
                d.name(),
                t.block_n,
                if t.cluster > 1 {
                    format!("_c{}", t.cluster)
                } else {
                    String::new()
                },
                self.activation.short_name(),
                match (residual, self.output) {
                    (false, _) => "",
                    (true, DType::F32) => "_rf32_cf32",
                    (true, _) => "_res",
                },
            ),
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: if stream16 {
                "matmul_block_tma_pingpong_stream16"
            } else if residual {
                "matmul_block_tma_pingpong_residual"
            } else {
                "matmul_block_tma_pingpong"
            },
            template_args: vec![
                d.cuda_type().into(),
                t.block_n.to_string(),
                stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().into(),
                t.cluster.to_string(),
            ],
            params,
            block_threads: self.threads(),
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// The arguments to [`MatmulConfig::pingpong_instantiation`]'s parameters, in the same three
/// cases, and its persistent grid.
pub(crate) fn launch_args(l: &MatmulLaunch) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    let MatmulLaunch {
        dtype,
        p,
        config,
        residual,
        c,
        ..
    } = *l;
    let tile = config.tile;
    let size = dtype.size_bytes() as u64;
    let TmaArgs {
        a_map,
        b_map,
        bias,
        m,
        n,
        k,
        alpha,
    } = tma_args(l)?;
    // C written through a tensor map of boxes of 64 columns x 128 rows.
    let c_map = || {
        tensor_map(
            dtype,
            c.ptr + p.c.offset as u64 * size,
            p.m,
            p.n,
            p.c.row_stride,
            tile.block_m,
        )
        .map(KernelArg::TensorMap)
    };
    let args = if config.pingpong_residual() && c.dtype != DType::F32 {
        // A 16-bit stream: R and C both through tensor maps, as C's layout.
        let r = residual.expect("a residual variant has R");
        let r_map = KernelArg::TensorMap(tensor_map(
            dtype,
            r.ptr + p.r.offset as u64 * size,
            p.m,
            p.n,
            p.r.row_stride,
            tile.block_m,
        )?);
        vec![a_map, b_map, r_map, c_map()?, bias, m, n, k, alpha]
    } else if config.pingpong_residual() {
        let (r, c_row_stride) = (residual.expect("a residual variant has R"), p.c.row_stride);
        // R is read through a tensor map of boxes of 32 columns x 128 rows.
        let r_map = KernelArg::TensorMap(tensor_map(
            DType::F32,
            r.ptr + p.r.offset as u64 * 4,
            p.m,
            p.n,
            p.r.row_stride,
            tile.block_m,
        )?);
        vec![
            a_map,
            b_map,
            r_map,
            bias,
            KernelArg::Ptr(c.ptr + p.c.offset as u64 * 4),
            KernelArg::I64(to_i64(c_row_stride)?),
            m,
            n,
            k,
            alpha,
        ]
    } else {
        vec![a_map, b_map, c_map()?, bias, m, n, k, alpha]
    };
    Ok((args, persistent_dims(l)?))
}
