//! The FP8 ping-pong programs (tma_pingpong.cu's `matmul_block_tma_pingpong_fp8` and
//! `matmul_block_tma_pingpong_fp8_residual`): one instantiation's meta-parameters
//! ([`Fp8Config`]), its instantiation, shared memory and arguments, and the launch of an
//! [`Fp8Problem`] on a [`Gpu`]. The public entry is `gpu::matmul_fp8`.

use crate::cuda::{
    encode_tiled, invalid, kernel_params, to_i32, ArchRequirement, DevPtr, E4m3Ptr, Gpu,
    Instantiation, KernelError, KernelParam, LaunchDims, MapElement, Swizzle,
};
#[cfg(test)]
use crate::matmul::config::SM90_SHARED_BYTES;
use crate::matmul::config::{program_source, GROUP_M, HEADERS};
use crate::matmul::fp8::{Fp8Output, Fp8Problem};
use crate::matmul::launch::{split_k_scratch, DECLARED_MAP};
use crate::matmul::problem::{Epilogue, MatmulProblem};
use crate::matmul::selection::{
    pingpong_split_k, sm_count, MatmulTile, SplitK, FP8_NARROW_PINGPONG_TILE, FP8_TILES,
};
use crate::types::{Activation, DType};

kernel_params! {
    /// matmul_block_tma_pingpong_fp8's parameters: no residual, C through a tensor map.
    struct Fp8Params {
        a_map: tensor_map,
        b_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        a_scale: const_ptr,
        a_scale_stride: i32,
        b_scale: const_ptr,
        out_scale: const_ptr,
        m: i32,
        n: i32,
        k: i32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

kernel_params! {
    /// matmul_block_tma_pingpong_fp8_residual's parameters: a 16-bit residual, R and C through
    /// tensor maps.
    struct Fp8ResidualParams {
        a_map: tensor_map,
        b_map: tensor_map,
        r_map: tensor_map,
        c_map: tensor_map,
        bias: const_ptr,
        a_scale: const_ptr,
        a_scale_stride: i32,
        b_scale: const_ptr,
        m: i32,
        n: i32,
        k: i32,
        splits: i32,
        split_k_tiles: i32,
        partials: mut_ptr,
        counters: counter_ptr,
    }
}

/// Every meta-parameter of one FP8 instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fp8Config {
    /// The 16-bit type of the bias, the residual and a 16-bit C.
    pub half: DType,
    pub output: Fp8Output,
    /// A 16-bit residual is added (the residual entry point).
    pub residual: bool,
    pub activation: Activation,
    /// One of [`FP8_TILES`].
    pub tile: MatmulTile,
}

impl Fp8Config {
    pub(crate) fn of(p: &Fp8Problem, tile: MatmulTile) -> Fp8Config {
        Fp8Config {
            half: p.half,
            output: p.output,
            residual: p.residual,
            activation: p.activation,
            tile,
        }
    }

    /// Whether the instantiation can split K: the narrow tile's, as the 16-bit one.
    fn splits_k(&self) -> bool {
        self.tile == FP8_NARROW_PINGPONG_TILE
    }

    /// Bytes of one element of C.
    fn output_bytes(&self) -> u32 {
        match self.output {
            Fp8Output::Half => 2,
            Fp8Output::E4m3 => 1,
        }
    }

    /// Dynamic shared memory (formulas as in tma_pingpong.cu): 1024 bytes to align the stages
    /// to the swizzle's period, the stages (128-byte rows of A's 128 and B's BN rows), each
    /// consumer warpgroup's output tile (which a residual arrives in), then its tiles of bias
    /// (16-bit) and of weight scales (f32).
    pub(crate) fn shared_bytes(&self) -> u32 {
        let t = &self.tile;
        1024 + t.stages * (t.block_m + t.block_n) * 128
            + 2 * t.block_m * t.block_n * self.output_bytes()
            + 2 * t.block_n * 2
            + 2 * t.block_n * 4
    }

    /// Threads per CTA: two consumer warpgroups and the producer warpgroup (128 wide) or warp
    /// (64 wide), and with a warp the residual loader's for the residual entry point.
    pub(crate) fn threads(&self) -> u32 {
        // The residual loader: a warp of its own beside a producer warp, one of the producer
        // warpgroup's otherwise.
        let loader = self.residual && !self.tile.pingpong_producer_warpgroup();
        self.tile.threads() + if loader { 32 } else { 0 }
    }

    fn params(&self) -> Vec<KernelParam> {
        let bias = DevPtr::of_type(self.half);
        let f32_ptr = DevPtr::of_type(DType::F32);
        if self.residual {
            Fp8ResidualParams {
                a_map: DECLARED_MAP,
                b_map: DECLARED_MAP,
                r_map: DECLARED_MAP,
                c_map: DECLARED_MAP,
                bias,
                a_scale: f32_ptr,
                a_scale_stride: 0,
                b_scale: f32_ptr,
                m: 0,
                n: 0,
                k: 0,
                splits: 0,
                split_k_tiles: 0,
                partials: f32_ptr,
                counters: 0,
            }
            .params()
        } else {
            Fp8Params {
                a_map: DECLARED_MAP,
                b_map: DECLARED_MAP,
                c_map: DECLARED_MAP,
                bias,
                a_scale: f32_ptr,
                a_scale_stride: 0,
                b_scale: f32_ptr,
                out_scale: f32_ptr,
                m: 0,
                n: 0,
                k: 0,
                splits: 0,
                split_k_tiles: 0,
                partials: f32_ptr,
                counters: 0,
            }
            .params()
        }
    }

    /// The instantiation: `matmul_e4m3_tmapp_bn128_s5_g8_gelu_f16` (C in f16), `.._bf16_res`
    /// (with a bf16 residual), `.._bf16_ce4m3` (bias in bf16, C in e4m3).
    pub(crate) fn instantiation(&self) -> Instantiation {
        let t = &self.tile;
        let h = self.half;
        let tail = match (self.output, self.residual) {
            (Fp8Output::E4m3, _) => "_ce4m3",
            (Fp8Output::Half, true) => "_res",
            (Fp8Output::Half, false) => "",
        };
        let mut template_args = vec![h.cuda_type().to_string()];
        if !self.residual {
            template_args.push(match self.output {
                Fp8Output::Half => h.cuda_type().to_string(),
                Fp8Output::E4m3 => "vitrt_matmul::E4m3".to_string(),
            });
        }
        template_args.extend([
            t.block_n.to_string(),
            t.stages.to_string(),
            GROUP_M.to_string(),
            self.activation.cuda_name().to_string(),
            self.splits_k().to_string(),
        ]);
        Instantiation {
            name: format!(
                "matmul_e4m3_tmapp_bn{}_s{}_g{GROUP_M}{}_{}_{}{tail}",
                t.block_n,
                t.stages,
                if self.splits_k() { "_sk" } else { "" },
                self.activation.short_name(),
                h.name(),
            ),
            family: "matmul",
            source: program_source(t.program),
            headers: HEADERS,
            function: if self.residual {
                "matmul_block_tma_pingpong_fp8_residual"
            } else {
                "matmul_block_tma_pingpong_fp8"
            },
            template_args,
            params: self.params(),
            block_threads: self.threads(),
            min_blocks_per_sm: 1,
            arch: ArchRequirement::Exactly(9, 0),
        }
    }
}

/// Every FP8 instantiation the launcher can pick: both tiles, both 16-bit types, every
/// epilogue activation, C in the 16-bit type (with and without a residual) or in e4m3.
pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for tile in FP8_TILES {
        for half in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                for (output, residual) in [
                    (Fp8Output::Half, false),
                    (Fp8Output::Half, true),
                    (Fp8Output::E4m3, false),
                ] {
                    let config = Fp8Config {
                        half,
                        output,
                        residual,
                        activation,
                        tile,
                    };
                    all.push(config.instantiation());
                }
            }
        }
    }
    all
}

/// Where an FP8 matmul writes C: a 16-bit matrix (the problem's `half`), or e4m3 codes with
/// the output scale (one f32 on the device) they are divided by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Destination {
    Half(DevPtr),
    E4m3 { c: E4m3Ptr, scale: DevPtr },
}

/// The device operands of an FP8 matmul ([`Fp8Problem`] says what each holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Operands {
    /// `[M, K]` e4m3 activations.
    pub a: E4m3Ptr,
    /// `[N, K]` e4m3 weights.
    pub b: E4m3Ptr,
    /// f32: M values, or one (see [`crate::matmul::ActivationScale`]).
    pub a_scale: DevPtr,
    /// f32: N values.
    pub b_scale: DevPtr,
    /// N values of the problem's `half`, read when the problem asks for a bias.
    pub bias: Option<DevPtr>,
    /// `[M, N]` of the problem's `half`, read when the problem asks for a residual; may be C.
    pub residual: Option<DevPtr>,
    pub c: Fp8Destination,
}

/// Checks the operands against the problem, returning C's address and the bias and residual
/// the epilogue reads.
fn validate(
    p: &Fp8Problem,
    ops: &Fp8Operands,
) -> Result<(u64, Option<DevPtr>, Option<DevPtr>), KernelError> {
    p.check().map_err(KernelError::InvalidArgument)?;
    let bias = if p.bias { ops.bias } else { None };
    let residual = if p.residual { ops.residual } else { None };
    ops.a_scale
        .expect("FP8 matmul activation scale", DType::F32, 0)?;
    ops.b_scale
        .expect("FP8 matmul weight scale", DType::F32, 0)?;
    for (what, view) in [("bias", bias), ("residual", residual)] {
        if let Some(view) = view {
            view.expect(&format!("FP8 matmul {what}"), p.half, 0)?;
        }
    }
    let (c, c_len) = match (p.output, ops.c) {
        (Fp8Output::Half, Fp8Destination::Half(c)) => {
            c.expect("FP8 matmul C", p.half, 0)?;
            (c.ptr, c.len)
        }
        (Fp8Output::E4m3, Fp8Destination::E4m3 { c, scale }) => {
            scale.expect("FP8 matmul output scale", DType::F32, 1)?;
            (c.ptr, c.len)
        }
        _ => {
            return Err(invalid!(
                "FP8 matmul: the problem writes C in {}, the destination given is {:?}",
                p.output_name(),
                ops.c
            ))
        }
    };
    p.check_bounds(
        ops.a.len,
        ops.b.len,
        ops.a_scale.len,
        ops.b_scale.len,
        bias.map(|v| v.len),
        residual.map(|v| v.len),
        c_len,
    )
    .map_err(KernelError::InvalidArgument)?;
    // TMA reads and writes A, B, C and R from 16-byte aligned bases with rows a multiple of
    // 16 bytes apart (K's multiple is `check`'s).
    let c_row_bytes = p.n
        * match p.output {
            Fp8Output::Half => 2,
            Fp8Output::E4m3 => 1,
        };
    if !c_row_bytes.is_multiple_of(16) {
        return Err(invalid!(
            "FP8 matmul: C's rows are {c_row_bytes} bytes ({} columns of {}); TMA needs a \
             multiple of 16 bytes (N a multiple of {})",
            p.n,
            p.output_name(),
            16 / (c_row_bytes / p.n.max(1)).max(1)
        ));
    }
    let bases = [
        ("A", ops.a.ptr),
        ("B", ops.b.ptr),
        ("C", c),
        ("the residual", residual.map_or(0, |r| r.ptr)),
    ];
    for (what, ptr) in bases {
        if !ptr.is_multiple_of(16) {
            return Err(invalid!(
                "FP8 matmul: {what} starts at {ptr:#x}, not on the 16-byte boundary TMA needs"
            ));
        }
    }
    Ok((c, bias, residual))
}

/// A tensor map over `rows` rows of `cols` elements of `element_bytes` bytes each at `base`,
/// contiguous, read or written in boxes of `box_cols` x `box_rows` laid out with `swizzle`.
fn map(
    element: MapElement,
    element_bytes: u64,
    base: u64,
    (rows, cols): (usize, usize),
    (box_cols, box_rows): (u32, u32),
    swizzle: Swizzle,
) -> Result<[u64; 16], KernelError> {
    encode_tiled(
        element,
        base,
        &[cols as u64, rows as u64],
        &[cols as u64 * element_bytes],
        &[box_cols, box_rows],
        swizzle,
    )
}

/// Launches `p` on `tile` (one of [`FP8_TILES`]) after checking the operands.
pub(crate) fn launch(
    gpu: &Gpu,
    p: &Fp8Problem,
    tile: MatmulTile,
    ops: &Fp8Operands,
) -> Result<(), KernelError> {
    let (c, bias, residual) = validate(p, ops)?;
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    let config = Fp8Config::of(p, tile);
    let instantiation = config.instantiation();
    let programs =
        p.m.div_ceil(tile.block_m as usize) as u64 * p.n.div_ceil(tile.block_n as usize) as u64;
    if programs > i32::MAX as u64 {
        return Err(invalid!(
            "FP8 matmul {}x{}x{}: too many tiles",
            p.m,
            p.n,
            p.k
        ));
    }
    let sms = sm_count(gpu)?;
    // Split-K as the 16-bit narrow tile's (never with batch-invariant selection, whose sums
    // must not depend on the batch).
    let split = if config.splits_k() && !gpu.batch_invariant() {
        pingpong_split_k(
            &MatmulProblem::linear(p.m, p.n, p.k, Epilogue::NONE),
            tile,
            programs,
            sms,
        )
    } else {
        SplitK::NONE
    };
    let (partials, counters) = if split.splits > 1 {
        split_k_scratch(gpu)?
    } else {
        (0, 0)
    };
    let partials = DevPtr {
        ptr: partials,
        len: 0,
        dtype: DType::F32,
    };
    // A and B: 128 e4m3 values (one 128-byte swizzle row) by the tile's rows.
    let a_map = map(
        MapElement::Byte,
        1,
        ops.a.ptr,
        (p.m, p.k),
        (128, tile.block_m),
        Swizzle::Bytes128,
    )?;
    let b_map = map(
        MapElement::Byte,
        1,
        ops.b.ptr,
        (p.n, p.k),
        (128, tile.block_n),
        Swizzle::Bytes128,
    )?;
    // A 16-bit C or R: boxes of 64 x 128 swizzled over 128 bytes, as the 16-bit program's; an
    // e4m3 C: one box of the tile's BN bytes x 128, swizzled over as many bytes.
    let half_map = |ptr: u64| {
        map(
            MapElement::Storage(p.half),
            2,
            ptr,
            (p.m, p.n),
            (64, tile.block_m),
            Swizzle::Bytes128,
        )
    };
    let c_map = match p.output {
        Fp8Output::Half => half_map(c)?,
        Fp8Output::E4m3 => map(
            MapElement::Byte,
            1,
            c,
            (p.m, p.n),
            (tile.block_n, tile.block_m),
            if tile.block_n == 128 {
                Swizzle::Bytes128
            } else {
                Swizzle::Bytes64
            },
        )?,
    };
    let bias = bias.unwrap_or(DevPtr::of_type(p.half));
    let (m, n, k) = (
        to_i32(p.m, "FP8 matmul m")?,
        to_i32(p.n, "FP8 matmul n")?,
        to_i32(p.k, "FP8 matmul k")?,
    );
    let a_scale_stride = p.activation_scale_stride();
    let splits = split.splits as i32;
    let split_k_tiles = (split.k / tile.block_k) as i32;
    let args = match residual {
        Some(r) => Fp8ResidualParams {
            a_map,
            b_map,
            r_map: half_map(r.ptr)?,
            c_map,
            bias,
            a_scale: ops.a_scale,
            a_scale_stride,
            b_scale: ops.b_scale,
            m,
            n,
            k,
            splits,
            split_k_tiles,
            partials,
            counters,
        }
        .args(),
        None => Fp8Params {
            a_map,
            b_map,
            c_map,
            bias,
            a_scale: ops.a_scale,
            a_scale_stride,
            b_scale: ops.b_scale,
            out_scale: match ops.c {
                Fp8Destination::E4m3 { scale, .. } => scale,
                Fp8Destination::Half(_) => DevPtr::of_type(DType::F32),
            },
            m,
            n,
            k,
            splits,
            split_k_tiles,
            partials,
            counters,
        }
        .args(),
    };
    // Persistent: one CTA an SM walking the tiles (every split's with split-K, which keeps
    // them to the SMs).
    let dims = LaunchDims {
        grid: (
            (programs * split.splits as u64).min(sms as u64) as u32,
            1,
            1,
        ),
        block: config.threads(),
        shared_bytes: config.shared_bytes(),
        cluster: 1,
    };
    gpu.launch(&instantiation, dims, &args)
}

/// Whether every FP8 configuration's shared memory fits what an sm_90 CTA may have beside its
/// static barriers (checked by the unit tests).
#[cfg(test)]
pub(crate) fn fits_sm90(config: &Fp8Config) -> bool {
    config.shared_bytes() + 256 <= SM90_SHARED_BYTES
}
