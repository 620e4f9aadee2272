//! The block programs' parameters (mma_sync.cu, fma.cu, wgmma.cu): [`MatmulParams`], the
//! host-side mirror of params.cuh's struct, which every wrapper of those programs takes as its
//! one parameter. Built here from a launch, once for the three programs.

use crate::cuda::{
    to_i32, to_i64, KernelArg, KernelError, KernelParam, ParamKind, ParamStruct, StructType,
};
use crate::matmul::launch::MatmulLaunch;
use crate::types::Operand;
use std::mem::{offset_of, size_of};

/// params.cuh's `MatmulParams`, field for field: the operands (device addresses; the bias and
/// residual 0 when absent), the sizes, the four views (A, B, C, residual), alpha, whether the
/// epilogue may use four-column accesses, and split-K's part.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatmulParams {
    a: u64,
    b: u64,
    bias: u64,
    residual: u64,
    c: u64,
    heads: i32,
    m: i32,
    n: i32,
    k: i32,
    views: [ViewParams; 4],
    alpha: f32,
    vector_epilogue: i32,
    split: SplitKParams,
}

/// params.cuh's `View` (epilogue.cuh): an operand's offset and strides, in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ViewParams {
    offset: i64,
    row_stride: i64,
    batch_stride: i64,
    head_stride: i64,
}

/// params.cuh's `SplitK`: 1 split, or more with the k-columns of each and the scratch.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct SplitKParams {
    pub splits: i32,
    pub k: i32,
    pub partials: u64,
    pub counters: u64,
}

impl SplitKParams {
    /// No split: the other fields are unused.
    pub const NONE: SplitKParams = SplitKParams {
        splits: 1,
        k: 0,
        partials: 0,
        counters: 0,
    };
}

// The size params.cuh asserts, the offsets its field order gives, and no padding.
const _: () = {
    assert!(size_of::<MatmulParams>() == 216);
    assert!(offset_of!(MatmulParams, heads) == 40);
    assert!(offset_of!(MatmulParams, views) == 56);
    assert!(offset_of!(MatmulParams, alpha) == 184);
    assert!(offset_of!(MatmulParams, split) == 192);
    assert!(size_of::<SplitKParams>() == 24);
};

// SAFETY: repr(C), integers, floats and addresses only, no padding (checked above), laid out
// as params.cuh's struct.
unsafe impl ParamStruct for MatmulParams {
    const TYPE: StructType = StructType {
        cuda_name: "vitrt_matmul::MatmulParams",
        bytes: 216,
    };
}

impl MatmulParams {
    /// The wrapper's one parameter.
    pub(crate) fn param() -> KernelParam {
        KernelParam::new("params", ParamKind::Struct(MatmulParams::TYPE))
    }

    /// A launch's parameters, unsplit.
    pub(crate) fn of(l: &MatmulLaunch) -> Result<MatmulParams, KernelError> {
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
        let view = |o: &Operand| -> Result<ViewParams, KernelError> {
            Ok(ViewParams {
                offset: to_i64(o.offset)?,
                row_stride: to_i64(o.row_stride)?,
                batch_stride: to_i64(o.batch_stride)?,
                head_stride: to_i64(o.head_stride)?,
            })
        };
        Ok(MatmulParams {
            a: a.ptr,
            b: b.ptr,
            bias: bias.map_or(0, |v| v.ptr),
            residual: residual.map_or(0, |v| v.ptr),
            c: c.ptr,
            heads: to_i32(p.heads, "matmul heads")?,
            m: to_i32(p.m, "matmul m")?,
            n: to_i32(p.n, "matmul n")?,
            k: to_i32(p.k, "matmul k")?,
            views: [view(&p.a)?, view(&p.b)?, view(&p.c)?, view(&p.r)?],
            alpha: p.epilogue.alpha,
            vector_epilogue: vector_epilogue as i32,
            split: SplitKParams::NONE,
        })
    }

    /// The same parameters, split as `split` says.
    pub(crate) fn split(self, split: SplitKParams) -> MatmulParams {
        MatmulParams { split, ..self }
    }

    /// As the launch passes them.
    pub(crate) fn args(&self) -> Vec<KernelArg> {
        vec![self.arg()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{ParamKind, STRUCT_ARG_BYTES};

    #[test]
    fn the_struct_reaches_the_driver_as_its_bytes_in_field_order() {
        let mut params = MatmulParams {
            a: 0x1111,
            b: 0x2222,
            bias: 0,
            residual: 0x4444,
            c: 0x5555,
            heads: 12,
            m: 197,
            n: 2304,
            k: 768,
            views: [ViewParams {
                offset: 7,
                row_stride: 768,
                batch_stride: 151_296,
                head_stride: 64,
            }; 4],
            alpha: 0.125,
            vector_epilogue: 1,
            split: SplitKParams::NONE,
        };
        params.views[3].offset = -1;
        params = params.split(SplitKParams {
            splits: 3,
            k: 256,
            partials: 0x6666,
            counters: 0x7777,
        });
        let KernelArg::Struct(kind, words) = params.arg() else {
            panic!("a struct argument")
        };
        assert_eq!(kind, MatmulParams::TYPE);
        assert_eq!(words.len() * 8, STRUCT_ARG_BYTES);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let half = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!(
            [word(0), word(8), word(16), word(24), word(32)],
            [0x1111, 0x2222, 0, 0x4444, 0x5555]
        );
        assert_eq!(
            [half(40), half(44), half(48), half(52)],
            [12, 197, 2304, 768]
        );
        assert_eq!(
            [word(56), word(64), word(72), word(80)],
            [7, 768, 151_296, 64]
        );
        assert_eq!(word(152) as i64, -1);
        assert_eq!(f32::from_bits(half(184)), 0.125);
        assert_eq!([half(188), half(192), half(196)], [1, 3, 256]);
        assert_eq!([word(200), word(208)], [0x6666, 0x7777]);
        assert!(bytes[216..].iter().all(|&b| b == 0));
        assert!(matches!(MatmulParams::param().kind, ParamKind::Struct(t) if t.bytes == 216));
    }
}
