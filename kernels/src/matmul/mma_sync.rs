//! The block entry point `matmul_block`, which mma_sync.cu (f16/bf16 tensor cores) and fma.cu
//! (f32, CUDA cores) both define with one parameter list and one list of template arguments:
//! `Program::MmaSync` and `Program::Fma` differ only in the source they compile. Its
//! parameters and its arguments, each beside the other; the first part of both (pointers,
//! sizes, views, alpha, `vector_epilogue`) is also wgmma.cu's entry's (wgmma.rs), which lacks
//! the split-K parameters.

use crate::cuda::{
    to_i32, to_i64, ArchRequirement, Instantiation, KernelArg, KernelError, KernelParam,
    LaunchDims, ParamKind,
};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{split_k_scratch, MatmulLaunch};
use crate::matmul::problem::WeightLayout;
use crate::matmul::selection::{split_k, SplitK};
use crate::types::DType;

/// The wrapper's stride parameters, one group per operand view (A, B, C, residual).
const VIEW_PARAM_NAMES: [[&str; 4]; 4] = [
    [
        "a_offset",
        "a_row_stride",
        "a_batch_stride",
        "a_head_stride",
    ],
    [
        "b_offset",
        "b_row_stride",
        "b_batch_stride",
        "b_head_stride",
    ],
    [
        "c_offset",
        "c_row_stride",
        "c_batch_stride",
        "c_head_stride",
    ],
    [
        "r_offset",
        "r_row_stride",
        "r_batch_stride",
        "r_head_stride",
    ],
];

impl MatmulConfig {
    /// The parameters `matmul_block` and `matmul_block_wgmma` share, up to `vector_epilogue`.
    pub(crate) fn block_params(&self) -> Vec<KernelParam> {
        let d = self.dtype;
        let mut params = vec![
            KernelParam::new("a", ParamKind::ConstPtr(d)),
            KernelParam::new("b", ParamKind::ConstPtr(d)),
            KernelParam::new("bias", ParamKind::ConstPtr(d)),
            KernelParam::new("residual", ParamKind::ConstPtr(self.residual)),
            KernelParam::new("c", ParamKind::MutPtr(self.output)),
            KernelParam::new("heads", ParamKind::I32),
            KernelParam::new("m", ParamKind::I32),
            KernelParam::new("n", ParamKind::I32),
            KernelParam::new("k", ParamKind::I32),
        ];
        for names in VIEW_PARAM_NAMES {
            params.extend(
                names
                    .iter()
                    .map(|&name| KernelParam::new(name, ParamKind::I64)),
            );
        }
        params.push(KernelParam::new("alpha", ParamKind::F32));
        params.push(KernelParam::new("vector_epilogue", ParamKind::I32));
        params
    }
}

/// The arguments to [`MatmulConfig::block_params`], in its order.
pub(crate) fn block_args(l: &MatmulLaunch) -> Result<Vec<KernelArg>, KernelError> {
    let MatmulLaunch {
        p,
        a,
        b,
        bias,
        residual,
        c,
        vector_epilogue,
        ..
    } = *l;
    let mut args = vec![
        KernelArg::Ptr(a.ptr),
        KernelArg::Ptr(b.ptr),
        KernelArg::Ptr(bias.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(c.ptr),
        KernelArg::I32(to_i32(p.heads, "matmul heads")?),
        KernelArg::I32(to_i32(p.m, "matmul m")?),
        KernelArg::I32(to_i32(p.n, "matmul n")?),
        KernelArg::I32(to_i32(p.k, "matmul k")?),
    ];
    for view in [&p.a, &p.b, &p.c, &p.r] {
        for value in [
            view.offset,
            view.row_stride,
            view.batch_stride,
            view.head_stride,
        ] {
            args.push(KernelArg::I64(to_i64(value)?));
        }
    }
    args.push(KernelArg::F32(p.epilogue.alpha));
    args.push(KernelArg::I32(vector_epilogue as i32));
    Ok(args)
}

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

    /// The mma.sync or FMA instantiation (`matmul_block`): the shared parameters, then split-K's.
    /// `layout` names B's layout, `mixed` R's and C's types where they are not the operands'.
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
        let mut params = self.block_params();
        let mut template_args = self.block_template_args();
        template_args.extend([
            t.warps_m.to_string(),
            t.warps_n.to_string(),
            self.activation.cuda_name().into(),
            (self.b_layout == WeightLayout::KN).to_string(),
            self.vec16.to_string(),
        ]);
        params.extend([
            KernelParam::new("splits", ParamKind::I32),
            KernelParam::new("split_k", ParamKind::I32),
            KernelParam::new("split_partials", ParamKind::MutPtr(DType::F32)),
            KernelParam::new("split_counters", ParamKind::CounterPtr),
        ]);
        Instantiation {
            name,
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: "matmul_block",
            template_args,
            params,
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
    let mut args = block_args(l)?;
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
    args.extend([
        KernelArg::I32(split.splits as i32),
        KernelArg::I32(split.k as i32),
        KernelArg::Ptr(partials),
        KernelArg::Ptr(counters),
    ]);
    let dims = LaunchDims {
        grid: ((programs * split.splits as u64) as u32, 1, 1),
        block: tile.threads(),
        shared_bytes: config.shared_bytes(),
        cluster: 1,
    };
    Ok((args, dims))
}
