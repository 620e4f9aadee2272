//! A kernel's parameters declared once: [`kernel_params!`] makes a struct of their values, in
//! the order the program takes them, from which both the instantiation's parameters
//! ([`KernelParam`](crate::cuda::KernelParam): names and C types, what the generated wrapper
//! declares) and a launch's arguments ([`KernelArg`](crate::cuda::KernelArg)) come, so the two
//! cannot drift apart. A pointer's C type is its view's storage type: the instantiation reads
//! it from a [`DevPtr::of_type`](crate::cuda::DevPtr::of_type) view, the launch from the view
//! it was handed.
//!
//! ```ignore
//! kernel_params! {
//!     /// add_program's parameters.
//!     struct AddParams { a: const_ptr, b: const_ptr, out: mut_ptr, n: i64 }
//! }
//! let params = AddParams { a, b, out, n: to_i64(n)? };
//! Instantiation { params: params.params(), .. };   // declared
//! gpu.launch(&instantiation, dims, &params.args()); // passed
//! ```
//!
//! Kinds: `const_ptr` and `mut_ptr` (a [`DevPtr`](crate::cuda::DevPtr) of a storage type),
//! `byte_ptr`, `mut_byte_ptr`, `counter_ptr` and `i32_ptr` (8-bit data, device counters or
//! 32-bit integers read, a `u64` address), `i32`, `u32`, `i64`, `u64`, `f32`, `tensor_map` (a TMA tensor map's 128 bytes,
//! `[u64; 16]`, declared `__grid_constant__`), and `optional_i32` (an `Option<i32>`: a
//! parameter only the instantiations given `Some` take, as softmax's causal programs take the
//! query count).

/// Declares a kernel's parameters once; see the module's documentation.
macro_rules! kernel_params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field:ident : $kind:ident),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        $vis struct $name {
            $($(#[$field_meta])* pub $field: kernel_params!(@type $kind),)*
        }

        impl $name {
            /// The parameters as the instantiation declares them, in order.
            pub fn params(&self) -> Vec<$crate::cuda::KernelParam> {
                let mut params = Vec::new();
                $(
                    if kernel_params!(@present $kind, self.$field) {
                        params.push($crate::cuda::KernelParam::new(
                            stringify!($field),
                            kernel_params!(@kind $kind, self.$field),
                        ));
                    }
                )*
                params
            }

            /// The launch's arguments, in the same order.
            pub fn args(&self) -> Vec<$crate::cuda::KernelArg> {
                let mut args = Vec::new();
                $(
                    if kernel_params!(@present $kind, self.$field) {
                        args.push(kernel_params!(@arg $kind, self.$field));
                    }
                )*
                args
            }
        }
    };
    (@type const_ptr) => { $crate::cuda::DevPtr };
    (@type mut_ptr) => { $crate::cuda::DevPtr };
    (@type byte_ptr) => { u64 };
    (@type mut_byte_ptr) => { u64 };
    (@type i32) => { i32 };
    (@type u32) => { u32 };
    (@type i64) => { i64 };
    (@type u64) => { u64 };
    (@type f32) => { f32 };
    (@type counter_ptr) => { u64 };
    (@type i32_ptr) => { u64 };
    (@type optional_i32) => { Option<i32> };
    (@type tensor_map) => { [u64; 16] };
    (@present optional_i32, $value:expr) => { $value.is_some() };
    (@present $kind:ident, $value:expr) => { true };
    (@kind const_ptr, $value:expr) => { $crate::cuda::ParamKind::ConstPtr($value.dtype) };
    (@kind mut_ptr, $value:expr) => { $crate::cuda::ParamKind::MutPtr($value.dtype) };
    (@kind byte_ptr, $value:expr) => { $crate::cuda::ParamKind::BytePtr };
    (@kind mut_byte_ptr, $value:expr) => { $crate::cuda::ParamKind::MutBytePtr };
    (@kind i32, $value:expr) => { $crate::cuda::ParamKind::I32 };
    (@kind u32, $value:expr) => { $crate::cuda::ParamKind::U32 };
    (@kind i64, $value:expr) => { $crate::cuda::ParamKind::I64 };
    (@kind u64, $value:expr) => { $crate::cuda::ParamKind::U64 };
    (@kind f32, $value:expr) => { $crate::cuda::ParamKind::F32 };
    (@kind counter_ptr, $value:expr) => { $crate::cuda::ParamKind::CounterPtr };
    (@kind i32_ptr, $value:expr) => { $crate::cuda::ParamKind::I32Ptr };
    (@kind optional_i32, $value:expr) => { $crate::cuda::ParamKind::I32 };
    (@kind tensor_map, $value:expr) => { $crate::cuda::ParamKind::TensorMap };
    (@arg const_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value.ptr) };
    (@arg mut_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value.ptr) };
    (@arg byte_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value) };
    (@arg mut_byte_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value) };
    (@arg i32, $value:expr) => { $crate::cuda::KernelArg::I32($value) };
    (@arg u32, $value:expr) => { $crate::cuda::KernelArg::U32($value) };
    (@arg i64, $value:expr) => { $crate::cuda::KernelArg::I64($value) };
    (@arg u64, $value:expr) => { $crate::cuda::KernelArg::U64($value) };
    (@arg f32, $value:expr) => { $crate::cuda::KernelArg::F32($value) };
    (@arg counter_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value) };
    (@arg i32_ptr, $value:expr) => { $crate::cuda::KernelArg::Ptr($value) };
    (@arg optional_i32, $value:expr) => { $crate::cuda::KernelArg::I32($value.unwrap_or(0)) };
    (@arg tensor_map, $value:expr) => { $crate::cuda::KernelArg::TensorMap($value) };
}

pub(crate) use kernel_params;

#[cfg(test)]
mod tests {
    use crate::cuda::{DevPtr, KernelArg, KernelParam, ParamKind};
    use crate::types::DType;

    kernel_params! {
        /// Every kind once.
        struct Every {
            x: const_ptr,
            out: mut_ptr,
            bytes: byte_ptr,
            written: mut_byte_ptr,
            a: i32,
            b: u32,
            c: i64,
            d: u64,
            e: f32,
            status: counter_ptr,
            lengths: i32_ptr,
            queries: optional_i32,
        }
    }

    #[test]
    fn names_kinds_and_values_come_from_one_declaration() {
        let every = Every {
            x: DevPtr {
                ptr: 0x100,
                len: 4,
                dtype: DType::BF16,
            },
            out: DevPtr::of_type(DType::F32),
            bytes: 0x200,
            written: 0x300,
            a: -1,
            b: 2,
            c: -3,
            d: 4,
            e: 0.5,
            status: 0x400,
            lengths: 0x500,
            queries: Some(7),
        };
        let want = [
            ("x", ParamKind::ConstPtr(DType::BF16)),
            ("out", ParamKind::MutPtr(DType::F32)),
            ("bytes", ParamKind::BytePtr),
            ("written", ParamKind::MutBytePtr),
            ("a", ParamKind::I32),
            ("b", ParamKind::U32),
            ("c", ParamKind::I64),
            ("d", ParamKind::U64),
            ("e", ParamKind::F32),
            ("status", ParamKind::CounterPtr),
            ("lengths", ParamKind::I32Ptr),
            ("queries", ParamKind::I32),
        ];
        let params: Vec<KernelParam> = want
            .iter()
            .map(|&(name, kind)| KernelParam::new(name, kind))
            .collect();
        assert_eq!(every.params(), params);
        assert_eq!(
            every.args(),
            [
                KernelArg::Ptr(0x100),
                KernelArg::Ptr(0),
                KernelArg::Ptr(0x200),
                KernelArg::Ptr(0x300),
                KernelArg::I32(-1),
                KernelArg::U32(2),
                KernelArg::I64(-3),
                KernelArg::U64(4),
                KernelArg::F32(0.5),
                KernelArg::Ptr(0x400),
                KernelArg::Ptr(0x500),
                KernelArg::I32(7),
            ]
        );
        // Without the optional parameter, neither declared nor passed.
        let without = Every {
            queries: None,
            ..every
        };
        assert_eq!(without.params(), params[..params.len() - 1]);
        assert_eq!(without.args().len(), every.args().len() - 1);
    }
}
