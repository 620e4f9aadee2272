//! The Hopper TMA ping-pong programs (tma_pingpong.cu): their parameters, declared once, and
//! their instantiations and arguments, for its three entry points: `matmul_block_tma_pingpong`
//! (C through a tensor map, no residual), `matmul_block_tma_pingpong_residual` (the f32
//! residual stream: R through a tensor map, C a pointer) and
//! `matmul_block_tma_pingpong_stream16` (a residual in the operands' type: R and C through
//! tensor maps), and `matmul_block_tma_pingpong_stream16_stats`, the latter that also writes
//! each row's partial statistics of every 64-column block of C (the producer's half of the
//! layernorm-folded matmul, see `gpu::matmul_with_row_statistics`).

use crate::cuda::{
    kernel_params, to_i64, ArchRequirement, DevPtr, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims,
};
use crate::matmul::config::{program_source, MatmulConfig, GROUP_M, HEADERS};
use crate::matmul::launch::{
    persistent_dims, split_k_scratch, tensor_map, tma_operands, MatmulLaunch, TmaOperands,
    DECLARED_MAP,
};
use crate::matmul::selection::{pingpong_split_k, sm_count, SplitK, NARROW_PINGPONG_TILE};
use crate::types::DType;

kernel_params! {
    /// matmul_block_tma_pingpong's parameters: no residual, C through a tensor map.
    struct PingPongParams {
        a_map: tensor_map,
        b_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

kernel_params! {
    /// matmul_block_tma_pingpong_residual's parameters: the f32 residual stream, R through a
    /// tensor map and C (f32, from its first element) a pointer with its row stride.
    struct PingPongResidualParams {
        a_map: tensor_map,
        b_map: tensor_map,
        r_map: tensor_map,
        bias: const_ptr,
        c: mut_ptr,
        c_row_stride: i64,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

kernel_params! {
    /// matmul_block_tma_pingpong_stream16's parameters: a residual in the operands' type, R
    /// and C through tensor maps.
    struct PingPongStream16Params {
        a_map: tensor_map,
        b_map: tensor_map,
        r_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

kernel_params! {
    /// matmul_block_tma_pingpong_stream16_stats's parameters: the 16-bit stream's, and the
    /// row statistics (f32 pairs, [N / 64][M]).
    struct PingPongStream16StatsParams {
        a_map: tensor_map,
        b_map: tensor_map,
        r_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        row_stats: mut_ptr,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

/// Which of the three entry points a configuration is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PingPongEntry {
    Plain,
    Residual,
    Stream16,
}

impl MatmulConfig {
    /// Whether the instantiation can split K (`SPLIT_K` in tma_pingpong.cu): the narrow tile's,
    /// which takes batch 1's products (see `pingpong_split_k`).
    fn pingpong_splits_k(&self) -> bool {
        self.tile == NARROW_PINGPONG_TILE
    }

    fn pingpong_entry(&self) -> PingPongEntry {
        match (self.pingpong_residual(), self.output) {
            (false, _) => PingPongEntry::Plain,
            (true, DType::F32) => PingPongEntry::Residual,
            (true, _) => PingPongEntry::Stream16,
        }
    }

    /// The entry point's parameters, as its instantiation declares them.
    fn pingpong_params(&self) -> Vec<KernelParam> {
        let bias = DevPtr::of_type(self.dtype);
        match self.pingpong_entry() {
            PingPongEntry::Plain => PingPongParams {
                a_map: DECLARED_MAP,
                b_map: DECLARED_MAP,
                c_map: DECLARED_MAP,
                bias,
                m: 0,
                n: 0,
                k: 0,
                alpha: 0.0,
                splits: 0,
                split_k_tiles: 0,
                partials: DevPtr::of_type(DType::F32),
                counters: 0,
            }
            .params(),
            PingPongEntry::Residual => PingPongResidualParams {
                a_map: DECLARED_MAP,
                b_map: DECLARED_MAP,
                r_map: DECLARED_MAP,
                bias,
                c: DevPtr::of_type(DType::F32),
                c_row_stride: 0,
                m: 0,
                n: 0,
                k: 0,
                alpha: 0.0,
                splits: 0,
                split_k_tiles: 0,
                partials: DevPtr::of_type(DType::F32),
                counters: 0,
            }
            .params(),
            PingPongEntry::Stream16 => PingPongStream16Params {
                a_map: DECLARED_MAP,
                b_map: DECLARED_MAP,
                r_map: DECLARED_MAP,
                c_map: DECLARED_MAP,
                bias,
                m: 0,
                n: 0,
                k: 0,
                alpha: 0.0,
                splits: 0,
                split_k_tiles: 0,
                partials: DevPtr::of_type(DType::F32),
                counters: 0,
            }
            .params(),
        }
    }

    /// The ping-pong Hopper instantiation: A, B and C as tensor maps, one matrix, no residual,
    /// C in the operands' type; or R as a tensor map and C as a pointer for the f32 residual
    /// stream (see `pingpong_takes` for what the launcher sends it).
    pub(crate) fn pingpong_instantiation(&self) -> Instantiation {
        let d = self.dtype;
        let t = &self.tile;
        let stages = if self.pingpong_residual() {
            self.pingpong_residual_stages()
        } else {
            t.stages
        };
        Instantiation {
            name: format!(
                "matmul_{}_tmapp_bn{}_s{stages}_g{GROUP_M}{}{}_{}_nk{}",
                d.name(),
                t.block_n,
                if t.cluster > 1 {
                    format!("_c{}", t.cluster)
                } else {
                    String::new()
                },
                if self.pingpong_splits_k() { "_sk" } else { "" },
                self.activation.short_name(),
                match self.pingpong_entry() {
                    PingPongEntry::Plain => "",
                    PingPongEntry::Residual => "_rf32_cf32",
                    PingPongEntry::Stream16 => "_res",
                },
            ),
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: match self.pingpong_entry() {
                PingPongEntry::Plain => "matmul_block_tma_pingpong",
                PingPongEntry::Residual => "matmul_block_tma_pingpong_residual",
                PingPongEntry::Stream16 => "matmul_block_tma_pingpong_stream16",
            },
            template_args: vec![
                d.cuda_type().into(),
                t.block_n.to_string(),
                stages.to_string(),
                GROUP_M.to_string(),
                self.activation.cuda_name().into(),
                t.cluster.to_string(),
                self.pingpong_splits_k().to_string(),
            ],
            params: self.pingpong_params(),
            block_threads: self.threads(),
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }

    /// The row-statistics instantiation of a 16-bit-stream configuration
    /// (`matmul_block_tma_pingpong_stream16_stats`): the stream16 one's template arguments,
    /// name with `_stats`, and the row statistics among its parameters.
    pub(crate) fn row_stats_instantiation(&self) -> Instantiation {
        debug_assert!(self.pingpong_entry() == PingPongEntry::Stream16);
        let plain = self.pingpong_instantiation();
        let params = PingPongStream16StatsParams {
            a_map: DECLARED_MAP,
            b_map: DECLARED_MAP,
            r_map: DECLARED_MAP,
            c_map: DECLARED_MAP,
            bias: DevPtr::of_type(self.dtype),
            row_stats: DevPtr::of_type(DType::F32),
            m: 0,
            n: 0,
            k: 0,
            alpha: 0.0,
            splits: 0,
            split_k_tiles: 0,
            partials: DevPtr::of_type(DType::F32),
            counters: 0,
        }
        .params();
        Instantiation {
            name: format!("{}_stats", plain.name),
            function: "matmul_block_tma_pingpong_stream16_stats",
            params,
            ..plain
        }
    }

    /// Whether this configuration runs on `matmul_block_tma_pingpong_stream16` (what
    /// [`MatmulConfig::row_stats_instantiation`] takes).
    pub(crate) fn is_pingpong_stream16(&self) -> bool {
        self.tile.program == crate::matmul::selection::Program::TmaPingPong
            && self.pingpong_entry() == PingPongEntry::Stream16
    }
}

/// The arguments to [`MatmulConfig::pingpong_instantiation`]'s parameters, for each entry
/// point, and its persistent grid.
pub(crate) fn launch_args(l: &MatmulLaunch) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    launch_args_with(l, None)
}

/// The arguments to [`MatmulConfig::row_stats_instantiation`]'s parameters (a 16-bit-stream
/// configuration) with `row_stats` (f32 pairs, [N / 64][M]), and its persistent grid.
pub(crate) fn row_stats_launch_args(
    l: &MatmulLaunch,
    row_stats: DevPtr,
) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    launch_args_with(l, Some(row_stats))
}

fn launch_args_with(
    l: &MatmulLaunch,
    row_stats: Option<DevPtr>,
) -> Result<(Vec<KernelArg>, LaunchDims), KernelError> {
    let MatmulLaunch {
        gpu,
        dtype,
        p,
        config,
        residual,
        c,
        programs,
        ..
    } = *l;
    let tile = config.tile;
    // Split-K sums a tile's partials in another order than one CTA would: never with
    // batch-invariant selection (which never picks the narrow tile, but may be forced onto it).
    let sms = sm_count(gpu)?;
    let split = if config.pingpong_splits_k() && !gpu.batch_invariant() {
        pingpong_split_k(p, tile, programs, sms)
    } else {
        SplitK::NONE
    };
    let (partials, counters) = if split.splits > 1 {
        split_k_scratch(gpu)?
    } else {
        (0, 0)
    };
    let splits = split.splits as i32;
    let split_k_tiles = (split.k / tile.block_k) as i32;
    let partials = DevPtr {
        ptr: partials,
        len: 0,
        dtype: DType::F32,
    };
    let size = dtype.size_bytes() as u64;
    let TmaOperands {
        a_map,
        b_map,
        bias,
        m,
        n,
        k,
        alpha,
    } = tma_operands(l)?;
    // C (and a 16-bit R) through tensor maps of boxes of 64 columns x 128 rows.
    let c_map = || {
        tensor_map(
            dtype,
            c.ptr + p.c.offset as u64 * size,
            p.m,
            p.n,
            p.c.row_stride,
            tile.block_m,
        )
    };
    let args = match config.pingpong_entry() {
        PingPongEntry::Plain => PingPongParams {
            a_map,
            b_map,
            c_map: c_map()?,
            bias,
            m,
            n,
            k,
            alpha,
            splits,
            split_k_tiles,
            partials,
            counters,
        }
        .args(),
        PingPongEntry::Stream16 => {
            let r = residual.expect("a residual variant has R");
            let r_map = tensor_map(
                dtype,
                r.ptr + p.r.offset as u64 * size,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?;
            match row_stats {
                None => PingPongStream16Params {
                    a_map,
                    b_map,
                    r_map,
                    c_map: c_map()?,
                    bias,
                    m,
                    n,
                    k,
                    alpha,
                    splits,
                    split_k_tiles,
                    partials,
                    counters,
                }
                .args(),
                Some(row_stats) => PingPongStream16StatsParams {
                    a_map,
                    b_map,
                    r_map,
                    c_map: c_map()?,
                    bias,
                    row_stats,
                    m,
                    n,
                    k,
                    alpha,
                    splits,
                    split_k_tiles,
                    partials,
                    counters,
                }
                .args(),
            }
        }
        PingPongEntry::Residual => {
            let r = residual.expect("a residual variant has R");
            // R is read through a tensor map of boxes of 32 columns x 128 rows.
            let r_map = tensor_map(
                DType::F32,
                r.ptr + p.r.offset as u64 * 4,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?;
            PingPongResidualParams {
                a_map,
                b_map,
                r_map,
                bias,
                c: DevPtr {
                    ptr: c.ptr + p.c.offset as u64 * 4,
                    ..c
                },
                c_row_stride: to_i64(p.c.row_stride)?,
                m,
                n,
                k,
                alpha,
                splits,
                split_k_tiles,
                partials,
                counters,
            }
            .args()
        }
    };
    let mut dims = persistent_dims(l)?;
    if split.splits > 1 {
        // The walk's tiles over every split, one CTA each (pingpong_split_k keeps them to the
        // SMs).
        dims.grid.0 = (programs * split.splits as u64).min(sms as u64) as u32;
    }
    Ok((args, dims))
}
