//! Instantiations: one kernel template with all its meta-parameters fixed, exposed to the
//! driver through a generated `extern "C"` wrapper whose name says what it is.
//!
//! NVRTC mangles template names, and looking mangled names up needs extra round trips
//! (name expressions). Instead each instantiation gets a plain C symbol:
//!
//! ```text
//! extern "C" __global__ void __launch_bounds__(128) layernorm_f16_v8_w1_r4_c3(
//!         const __half* x, const __half* gamma, const __half* beta, __half* out,
//!         int rows, int cols, float eps) {
//!     layernorm_rows<__half, 8, 1, 4, 3>(x, gamma, beta, out, rows, cols, eps);
//! }
//! ```
//!
//! The family's `.cu` source defines the templated `__device__` function; the wrapper is
//! appended to it and the two compile as one NVRTC program.

use super::error::{invalid, KernelError};
use crate::types::DType;

/// The shared header every family source may `#include "common.cuh"`.
pub const COMMON_HEADER: &str = include_str!("common.cuh");
pub const COMMON_HEADER_NAME: &str = "common.cuh";

/// The type of one kernel parameter, as the wrapper declares it and as a launch must pass it.
/// Pointers carry no `__restrict__`: outputs may alias inputs (an in-place residual add).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// `const T*` for a storage dtype.
    ConstPtr(DType),
    /// `T*` for a storage dtype.
    MutPtr(DType),
    /// `unsigned int*`: counters a kernel keeps in device memory.
    CounterPtr,
    /// `const unsigned char*`: 8-bit image bytes, or a table of records the kernel reads.
    BytePtr,
    /// `const int*`: 32-bit integers a kernel reads (the attention's per-batch key lengths);
    /// 0 passes a null pointer.
    I32Ptr,
    /// `unsigned char*`: 8-bit samples a kernel writes.
    MutBytePtr,
    I32,
    U32,
    I64,
    U64,
    F32,
    /// A TMA tensor map (`CUtensorMap`, 128 bytes), passed by value as `__grid_constant__`.
    TensorMap,
    /// A struct of a program's parameters, passed by value as `__grid_constant__` (read in
    /// place, never copied), built on the host as a [`ParamStruct`].
    Struct(StructType),
}

/// A C++ struct a wrapper takes by value: its name as the program's source spells it, and its
/// size, which the host-side struct must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StructType {
    pub cuda_name: &'static str,
    pub bytes: usize,
}

/// A host-side mirror of a program's parameter struct ([`ParamKind::Struct`]), passed as
/// [`KernelArg::Struct`].
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of integers, floats and device addresses with no
/// padding, laid out as the C++ struct they mirror: their bytes are handed to the driver as is.
pub unsafe trait ParamStruct: Copy {
    const TYPE: StructType;

    /// The struct as a launch argument.
    fn arg(&self) -> KernelArg {
        const { assert!(std::mem::size_of::<Self>() <= STRUCT_ARG_BYTES) };
        assert_eq!(std::mem::size_of::<Self>(), Self::TYPE.bytes);
        let mut words = [0u64; STRUCT_ARG_BYTES / 8];
        // SAFETY: the trait's contract: `Self` is plain bytes without padding, and fits.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self as *const Self).cast::<u8>(),
                words.as_mut_ptr().cast::<u8>(),
                std::mem::size_of::<Self>(),
            );
        }
        KernelArg::Struct(Self::TYPE, words)
    }
}

/// The largest parameter struct a launch passes.
pub const STRUCT_ARG_BYTES: usize = 256;

impl ParamKind {
    fn declaration(self) -> String {
        match self {
            ParamKind::ConstPtr(d) => format!("const {}*", d.cuda_type()),
            ParamKind::MutPtr(d) => format!("{}*", d.cuda_type()),
            ParamKind::CounterPtr => "unsigned int*".into(),
            ParamKind::BytePtr => "const unsigned char*".into(),
            ParamKind::I32Ptr => "const int*".into(),
            ParamKind::MutBytePtr => "unsigned char*".into(),
            ParamKind::I32 => "int".into(),
            ParamKind::U32 => "unsigned int".into(),
            ParamKind::I64 => "long long".into(),
            ParamKind::U64 => "unsigned long long".into(),
            ParamKind::F32 => "float".into(),
            ParamKind::TensorMap => "const __grid_constant__ TmaDescriptor".into(),
            ParamKind::Struct(t) => format!("const __grid_constant__ {}", t.cuda_name),
        }
    }
}

/// One parameter of a wrapper.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelParam {
    pub name: &'static str,
    pub kind: ParamKind,
}

impl KernelParam {
    pub fn new(name: &'static str, kind: ParamKind) -> KernelParam {
        KernelParam { name, kind }
    }
}

/// A value passed at launch. Pointers are raw device addresses (see `DevPtr::ptr`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    /// The 128 opaque bytes cuTensorMapEncodeTiled wrote.
    TensorMap([u64; 16]),
    /// A parameter struct's bytes (see [`ParamStruct::arg`]), zero past its size.
    Struct(StructType, [u64; STRUCT_ARG_BYTES / 8]),
}

/// One launch parameter's bytes, aligned as the widest parameter (a tensor map) needs.
#[repr(C, align(64))]
pub(crate) struct ParamSlot(pub [u64; STRUCT_ARG_BYTES / 8]);

impl KernelArg {
    fn fits(self, kind: ParamKind) -> bool {
        matches!(
            (self, kind),
            (
                KernelArg::Ptr(_),
                ParamKind::ConstPtr(_)
                    | ParamKind::MutPtr(_)
                    | ParamKind::CounterPtr
                    | ParamKind::BytePtr
                    | ParamKind::I32Ptr
                    | ParamKind::MutBytePtr
            ) | (KernelArg::I32(_), ParamKind::I32)
                | (KernelArg::U32(_), ParamKind::U32)
                | (KernelArg::I64(_), ParamKind::I64)
                | (KernelArg::U64(_), ParamKind::U64)
                | (KernelArg::F32(_), ParamKind::F32)
                | (KernelArg::TensorMap(_), ParamKind::TensorMap)
        ) || matches!((self, kind), (KernelArg::Struct(given, _), ParamKind::Struct(wanted)) if given == wanted)
    }

    /// The argument's bytes in a slot, as cuLaunchKernel reads them (little-endian, value
    /// first: the driver reads as many bytes as the parameter is wide).
    pub(crate) fn to_slot(self) -> ParamSlot {
        let mut slot = [0u64; STRUCT_ARG_BYTES / 8];
        slot[0] = match self {
            KernelArg::Ptr(v) | KernelArg::U64(v) => v,
            KernelArg::I64(v) => v as u64,
            KernelArg::I32(v) => v as u32 as u64,
            KernelArg::U32(v) => v as u64,
            KernelArg::F32(v) => v.to_bits() as u64,
            KernelArg::TensorMap(map) => {
                slot[..16].copy_from_slice(&map);
                return ParamSlot(slot);
            }
            KernelArg::Struct(_, words) => return ParamSlot(words),
        };
        ParamSlot(slot)
    }
}

/// The target a program is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arch {
    pub major: u32,
    pub minor: u32,
    /// `sm_90a`-style targets: arch-specific instructions (wgmma, setmaxnreg) that run on
    /// exactly this major.minor and nothing later.
    pub specific: bool,
}

impl Arch {
    pub fn new(major: u32, minor: u32) -> Arch {
        Arch {
            major,
            minor,
            specific: false,
        }
    }

    /// The `--gpu-architecture` value: `sm_90`, or `sm_90a` for arch-specific code.
    pub fn sm_name(&self) -> String {
        format!(
            "sm_{}{}{}",
            self.major,
            self.minor,
            if self.specific { "a" } else { "" }
        )
    }
}

/// What device an instantiation needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArchRequirement {
    /// Runs on compute capability `min` and later.
    AtLeast(u32, u32),
    /// Uses arch-specific instructions: compiled as `sm_XYa`, runs only on exactly that major.minor.
    Exactly(u32, u32),
}

impl ArchRequirement {
    /// The target to compile for on a device of compute capability `cc`, or `None` when the
    /// instantiation cannot run there.
    pub fn target_for(self, cc: (u32, u32)) -> Option<Arch> {
        match self {
            ArchRequirement::AtLeast(major, minor) if cc >= (major, minor) => {
                Some(Arch::new(cc.0, cc.1))
            }
            ArchRequirement::Exactly(major, minor) if cc == (major, minor) => Some(Arch {
                major,
                minor,
                specific: true,
            }),
            _ => None,
        }
    }
}

/// One kernel template with every meta-parameter fixed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Instantiation {
    /// The `extern "C"` symbol; unique across the whole registry.
    pub name: String,
    /// The op family (`layernorm`, `softmax`, `matmul`, ...): names the `.cu` file.
    pub family: &'static str,
    /// The family's `.cu` source, which defines `function`.
    pub source: &'static str,
    /// Headers the source may `#include` besides common.cuh, as (name, text): NVRTC receives
    /// them in memory, as it does common.cuh.
    pub headers: &'static [(&'static str, &'static str)],
    /// The templated `__device__` function the wrapper calls.
    pub function: &'static str,
    /// Template arguments, in order, as C++ text (`__half`, `8`, `Act::Gelu`).
    pub template_args: Vec<String>,
    pub params: Vec<KernelParam>,
    /// Threads per block; also the wrapper's `__launch_bounds__`.
    pub block_threads: u32,
    /// CTAs per SM the compiler must leave room for (the second `__launch_bounds__`
    /// argument, which caps registers); 0 leaves the compiler free.
    pub min_blocks_per_sm: u32,
    pub arch: ArchRequirement,
}

impl Instantiation {
    /// The family source followed by the generated wrapper: one NVRTC program.
    pub fn program_source(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("{} {}", p.kind.declaration(), p.name))
            .collect();
        let args: Vec<&str> = self.params.iter().map(|p| p.name).collect();
        let bounds = match self.min_blocks_per_sm {
            0 => self.block_threads.to_string(),
            blocks => format!("{}, {blocks}", self.block_threads),
        };
        // Programmatic dependent launch (sm_90+, see `Gpu::launch`): the next kernel on the
        // stream may be launched as soon as every CTA of this one has exited, before this
        // grid's completion is flushed, so it waits here until every kernel before it has
        // finished and its writes are visible; nothing touches global memory before the wait.
        // No explicit `griddepcontrol.launch_dependents`: triggering early let the next
        // kernel's CTAs wait on SMs beside this grid's last ones, and was slower at every batch
        // (measured: benchmarks/NOTES.md, 2026-11-22 "Programmatic dependent launch"). The wait is a no-op for a launch without the
        // attribute; sm_80 has no such instruction.
        format!(
            "{source}\n\n// Generated wrapper: {function}<{targs}>\n\
             extern \"C\" __global__ void __launch_bounds__({bounds}) {name}({params}) {{\n\
             #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n    \
             asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n\
             #endif\n    \
             {function}<{targs}>({args});\n}}\n",
            source = self.source,
            function = self.function,
            targs = self.template_args.join(", "),
            name = self.name,
            params = params.join(", "),
            args = args.join(", "),
        )
    }

    /// Checks a launch's arguments against the wrapper's parameters.
    pub(crate) fn check_args(&self, args: &[KernelArg]) -> Result<(), KernelError> {
        if args.len() != self.params.len() {
            return Err(invalid!(
                "kernel {} takes {} arguments, launch passed {}",
                self.name,
                self.params.len(),
                args.len()
            ));
        }
        for (param, arg) in self.params.iter().zip(args) {
            if !arg.fits(param.kind) {
                return Err(invalid!(
                    "kernel {} parameter {} is {:?}, launch passed {:?}",
                    self.name,
                    param.name,
                    param.kind,
                    arg
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_calls_the_template_with_every_parameter() {
        let inst = Instantiation {
            name: "demo_f16".into(),
            family: "demo",
            source: "template <typename T, int N> __device__ void demo(const T* x, T* y, int n) {}",
            headers: &[],
            function: "demo",
            template_args: vec!["__half".into(), "4".into()],
            params: vec![
                KernelParam::new("x", ParamKind::ConstPtr(DType::F16)),
                KernelParam::new("y", ParamKind::MutPtr(DType::F16)),
                KernelParam::new("n", ParamKind::I32),
            ],
            block_threads: 64,
            min_blocks_per_sm: 0,
            arch: ArchRequirement::AtLeast(8, 0),
        };
        let src = inst.program_source();
        assert!(src.contains(
            "extern \"C\" __global__ void __launch_bounds__(64) demo_f16(const __half* x, __half* y, int n)"
        ));
        assert!(src.contains("demo<__half, 4>(x, y, n);"));
        assert!(inst
            .check_args(&[KernelArg::Ptr(0), KernelArg::Ptr(0), KernelArg::I32(3)])
            .is_ok());
        assert!(inst
            .check_args(&[KernelArg::Ptr(0), KernelArg::Ptr(0)])
            .is_err());
        assert!(inst
            .check_args(&[KernelArg::Ptr(0), KernelArg::Ptr(0), KernelArg::F32(3.0)])
            .is_err());
    }

    #[test]
    fn arch_specific_code_runs_only_on_its_own_arch() {
        assert_eq!(
            ArchRequirement::Exactly(9, 0)
                .target_for((9, 0))
                .unwrap()
                .sm_name(),
            "sm_90a"
        );
        assert_eq!(ArchRequirement::Exactly(9, 0).target_for((10, 0)), None);
        assert_eq!(
            ArchRequirement::AtLeast(8, 0)
                .target_for((9, 0))
                .unwrap()
                .sm_name(),
            "sm_90"
        );
        assert_eq!(ArchRequirement::AtLeast(8, 0).target_for((7, 5)), None);
    }
}
