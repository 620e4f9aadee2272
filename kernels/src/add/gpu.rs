//! Element-wise add: `out = a + b`, any n, 16-byte vectors where every pointer allows.

use crate::cuda::{
    invalid, kernel_params, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("add.cu");
const THREADS: u32 = 256;
/// Vectors per thread: four 16-byte loads of each input in flight.
const UNROLL: u32 = 4;

kernel_params! {
    /// add_program's parameters.
    struct AddParams {
        a: const_ptr,
        b: const_ptr,
        out: mut_ptr,
        n: i64,
    }
}

/// (a, b, out) storage types: one dtype throughout, or a half-precision branch added into an
/// f32 residual stream, either way round.
const STORAGE: [[DType; 3]; 7] = [
    [DType::F32, DType::F32, DType::F32],
    [DType::F16, DType::F16, DType::F16],
    [DType::BF16, DType::BF16, DType::BF16],
    [DType::F32, DType::F16, DType::F32],
    [DType::F16, DType::F32, DType::F32],
    [DType::F32, DType::BF16, DType::F32],
    [DType::BF16, DType::F32, DType::F32],
];

/// The add kernel's meta-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AddConfig {
    /// Storage types of a, b and out.
    pub types: [DType; 3],
    /// Elements per access: 16 bytes' worth of the widest type, or 1 when a pointer is not
    /// 16-byte aligned.
    pub vec: u32,
}

impl AddConfig {
    fn widest_vec(types: [DType; 3]) -> u32 {
        16 / types.iter().map(|d| d.size_bytes()).max().unwrap_or(4) as u32
    }

    pub fn select(a: DevPtr, b: DevPtr, out: DevPtr) -> AddConfig {
        let types = [a.dtype, b.dtype, out.dtype];
        let aligned = [a, b, out].iter().all(|p| p.is_aligned(16));
        AddConfig {
            types,
            vec: if aligned { Self::widest_vec(types) } else { 1 },
        }
    }

    pub fn elements_per_block(&self) -> u64 {
        (THREADS * self.vec * UNROLL) as u64
    }

    pub fn instantiation(&self) -> Instantiation {
        let [a, b, out] = self.types;
        // One name per type when they agree (the common case), else all three.
        let types = if a == b && b == out {
            a.name().to_string()
        } else {
            format!("{}_{}_{}", a.name(), b.name(), out.name())
        };
        Instantiation {
            name: format!("add_{types}_v{}_t{THREADS}_u{UNROLL}", self.vec),
            family: "add",
            source: SOURCE,
            headers: &[],
            function: "add_program",
            template_args: vec![
                a.cuda_type().into(),
                b.cuda_type().into(),
                out.cuda_type().into(),
                self.vec.to_string(),
                THREADS.to_string(),
                UNROLL.to_string(),
            ],
            params: AddParams {
                a: DevPtr::of_type(a),
                b: DevPtr::of_type(b),
                out: DevPtr::of_type(out),
                n: 0,
            }
            .params(),
            block_threads: THREADS,
            min_blocks_per_sm: 0,
            arch: ArchRequirement::AtLeast(7, 0),
        }
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    STORAGE
        .into_iter()
        .flat_map(|types| {
            [AddConfig::widest_vec(types), 1].map(|vec| AddConfig { types, vec }.instantiation())
        })
        .collect()
}

/// `out = a + b` over `n` elements; `out` may be `a` or `b`. All three hold `dtype`, or a
/// half-precision operand is added into f32 (a, or b, and out f32), as `STORAGE` lists.
pub fn add(
    gpu: &Gpu,
    dtype: DType,
    a: DevPtr,
    b: DevPtr,
    n: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    let types = [a.dtype, b.dtype, out.dtype];
    if !STORAGE.contains(&types) || !types.iter().all(|&t| t == dtype || t == DType::F32) {
        return Err(invalid!(
            "add of {} and {} into {} in a {dtype} run: operands hold one dtype, or a \
             half-precision one is added into f32",
            a.dtype,
            b.dtype,
            out.dtype
        ));
    }
    a.expect("add input a", a.dtype, n)?;
    b.expect("add input b", b.dtype, n)?;
    out.expect("add output", out.dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    let config = AddConfig::select(a, b, out);
    let blocks = (n as u64).div_ceil(config.elements_per_block());
    let blocks =
        u32::try_from(blocks).map_err(|_| invalid!("add of {n} elements needs too many blocks"))?;
    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &AddParams {
            a,
            b,
            out,
            n: to_i64(n)?,
        }
        .args(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_only_picks_registered_instantiations() {
        let registered = instantiations();
        for dtype in DType::ALL {
            for address in [0u64, 2, 4, 8, 16, 256] {
                let p = DevPtr {
                    ptr: 0x10000 + address,
                    len: 1,
                    dtype,
                };
                let q = DevPtr {
                    ptr: 0x20000,
                    len: 1,
                    dtype,
                };
                let config = AddConfig::select(p, q, q);
                assert_eq!(config.vec > 1, address % 16 == 0);
                assert!(registered.contains(&config.instantiation()), "{config:?}");
                if dtype != DType::F32 {
                    let stream = DevPtr {
                        dtype: DType::F32,
                        ..q
                    };
                    for (a, b) in [(p, stream), (stream, p)] {
                        let config = AddConfig::select(a, b, stream);
                        assert_eq!(config.vec > 1, address % 16 == 0);
                        assert!(config.vec <= 4, "16 bytes of f32 at most");
                        assert!(registered.contains(&config.instantiation()), "{config:?}");
                    }
                }
            }
        }
    }
}
