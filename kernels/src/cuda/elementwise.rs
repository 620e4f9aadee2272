//! Element-wise add: `out = a + b`, any n, 16-byte vectors where every pointer allows.

use super::{
    to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError, KernelParam,
    LaunchDims, ParamKind,
};
use crate::DType;

const SOURCE: &str = include_str!("../../cuda/elementwise.cu");
const THREADS: u32 = 256;
/// Vectors per thread: four 16-byte loads of each input in flight.
const UNROLL: u32 = 4;

/// The add kernel's meta-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AddConfig {
    pub dtype: DType,
    /// Elements per access: 16 bytes' worth, or 1 when a pointer is not 16-byte aligned.
    pub vec: u32,
}

impl AddConfig {
    pub fn select(dtype: DType, pointers: &[DevPtr]) -> AddConfig {
        let aligned = pointers.iter().all(|p| p.is_aligned(16));
        AddConfig {
            dtype,
            vec: if aligned {
                16 / dtype.size_bytes() as u32
            } else {
                1
            },
        }
    }

    pub fn elements_per_block(&self) -> u64 {
        (THREADS * self.vec * UNROLL) as u64
    }

    pub fn instantiation(&self) -> Instantiation {
        let d = self.dtype;
        Instantiation {
            name: format!("add_{}_v{}_t{THREADS}_u{UNROLL}", d.name(), self.vec),
            family: "elementwise",
            source: SOURCE,
            function: "add_program",
            template_args: vec![
                d.cuda_type().into(),
                self.vec.to_string(),
                THREADS.to_string(),
                UNROLL.to_string(),
            ],
            params: vec![
                KernelParam::new("a", ParamKind::ConstPtr(d)),
                KernelParam::new("b", ParamKind::ConstPtr(d)),
                KernelParam::new("out", ParamKind::MutPtr(d)),
                KernelParam::new("n", ParamKind::I64),
            ],
            block_threads: THREADS,
            arch: ArchRequirement::AtLeast(7, 0),
        }
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    DType::ALL
        .into_iter()
        .flat_map(|dtype| {
            [16 / dtype.size_bytes() as u32, 1].map(|vec| AddConfig { dtype, vec }.instantiation())
        })
        .collect()
}

pub(crate) fn launch_add(
    gpu: &Gpu,
    dtype: DType,
    a: DevPtr,
    b: DevPtr,
    n: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    a.expect("add input a", dtype, n)?;
    b.expect("add input b", dtype, n)?;
    out.expect("add output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    let config = AddConfig::select(dtype, &[a, b, out]);
    let blocks = (n as u64).div_ceil(config.elements_per_block());
    let blocks = u32::try_from(blocks)
        .map_err(|_| super::invalid!("add of {n} elements needs too many blocks"))?;
    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
        },
        &[
            KernelArg::Ptr(a.ptr),
            KernelArg::Ptr(b.ptr),
            KernelArg::Ptr(out.ptr),
            KernelArg::I64(to_i64(n)?),
        ],
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
                let config = AddConfig::select(dtype, &[p, q, q]);
                assert_eq!(config.vec > 1, address % 16 == 0);
                assert!(registered.contains(&config.instantiation()), "{config:?}");
            }
        }
    }
}
