//! The GPU test harness the kernels/tests files share (`mod common;`): the device, random
//! data rounded to a dtype, uploads at a chosen misalignment, poisoned outputs between guard
//! regions, and the comparison against a CPU twin with its tolerance.
//!
//! Every file uses only part of it. The matmul tests' own harness is `common::matmul`.
#![allow(dead_code)]

pub mod matmul;

use rand::Rng;
use std::sync::OnceLock;
use vitrt_kernels::cuda::{DevPtr, DeviceBuffer, Gpu};
use vitrt_kernels::DType;

/// Bytes of poison on each side of every output.
pub const GUARD_BYTES: usize = 256;
/// 0xFF bytes read as NaN in f32, f16 and bf16: an element left unwritten shows.
pub const POISON: u8 = 0xFF;

/// One Gpu shared by every test of the file (they queue on its one stream).
pub fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let gpu = new_gpu();
        let (major, minor) = gpu.compute_capability();
        eprintln!("GPU: {} (sm_{major}{minor})", gpu.name());
        gpu
    })
}

/// A Gpu of the test's own: for tests that time the stream, or that need a fresh one.
pub fn new_gpu() -> Gpu {
    Gpu::new(0).unwrap_or_else(|e| panic!("this test needs a CUDA GPU: {e}"))
}

/// `n` values uniform in `lo..hi`, each rounded to `dtype`.
pub fn random(rng: &mut impl Rng, n: usize, lo: f32, hi: f32, dtype: DType) -> Vec<f32> {
    (0..n)
        .map(|_| dtype.round(rng.random_range(lo..hi)))
        .collect()
}

/// `values` on the device, `misalign` elements past a 256-byte boundary: (buffer, view).
pub fn upload(gpu: &Gpu, dtype: DType, values: &[f32], misalign: usize) -> (DeviceBuffer, DevPtr) {
    let offset = misalign * dtype.size_bytes();
    let bytes = dtype.encode(values);
    let buffer = gpu.alloc((offset + bytes.len()).max(1)).unwrap();
    gpu.upload(&buffer, offset, &bytes).unwrap();
    let view = buffer.view(offset, values.len(), dtype).unwrap();
    (buffer, view)
}

/// An output of `len` elements between two guard regions, all poisoned.
pub struct Poisoned {
    pub buffer: DeviceBuffer,
    pub dtype: DType,
    pub offset: usize,
    pub len: usize,
}

impl Poisoned {
    /// The output starts `misalign` elements past the guard.
    pub fn new(gpu: &Gpu, dtype: DType, len: usize, misalign: usize) -> Poisoned {
        let offset = GUARD_BYTES + misalign * dtype.size_bytes();
        let total = offset + len * dtype.size_bytes() + GUARD_BYTES;
        let buffer = gpu.alloc(total).unwrap();
        gpu.upload(&buffer, 0, &vec![POISON; total]).unwrap();
        Poisoned {
            buffer,
            dtype,
            offset,
            len,
        }
    }

    pub fn view(&self) -> DevPtr {
        self.buffer.view(self.offset, self.len, self.dtype).unwrap()
    }

    /// The output's values, after checking that the guards still hold only poison.
    pub fn read(&self, gpu: &Gpu, case: &str) -> Vec<f32> {
        let mut bytes = vec![0u8; self.buffer.len_bytes()];
        gpu.download(&self.buffer, 0, &mut bytes).unwrap();
        let end = self.offset + self.len * self.dtype.size_bytes();
        let before = bytes[..self.offset].iter().position(|&b| b != POISON);
        let after = bytes[end..].iter().position(|&b| b != POISON);
        assert!(
            before.is_none(),
            "{case}: wrote {} bytes before the output",
            self.offset - before.unwrap()
        );
        assert!(
            after.is_none(),
            "{case}: wrote byte {} past the end of the output",
            after.unwrap()
        );
        self.dtype.decode(&bytes[self.offset..end])
    }

    /// Whether element `i` still holds the poison (was not written).
    pub fn untouched(raw: &[u8], dtype: DType, i: usize) -> bool {
        let size = dtype.size_bytes();
        raw[i * size..(i + 1) * size].iter().all(|&b| b == POISON)
    }
}

/// The relative tolerance of a result reduced in another order than its twin's, or rounded
/// once more: a few ulps of `dtype` (f16: 2^-10 each, bf16: up to 2^-7).
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        // One e4m3 rounding: 2^-4 of a value.
        DType::E4M3 => 6.25e-2,
    }
}

/// The worst error seen in one comparison.
#[derive(Default, Clone, Copy)]
pub struct Worst {
    pub abs: f32,
    /// The largest |d| / (rtol |want| + atol): must stay at or under 1.
    pub of_tolerance: f32,
}

/// Checks |got - want| <= rtol |want| + atol everywhere (a NaN wanted is a NaN got), and
/// panics with the first mismatches (a NaN got: never written).
pub fn compare(case: &str, got: &[f32], want: &[f32], rtol: f32, atol: f32) -> Worst {
    assert_eq!(got.len(), want.len(), "{case}");
    let mut worst = Worst::default();
    let mut failures = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        let allowed = rtol * w.abs() + atol;
        let bad = if w.is_nan() {
            !g.is_nan()
        } else {
            d.is_nan() || d > allowed
        };
        if bad {
            if failures.len() < 8 {
                failures.push(format!("[{i}] gpu {g} twin {w}"));
            }
        } else if !w.is_nan() {
            worst.abs = worst.abs.max(d);
            if allowed > 0.0 {
                worst.of_tolerance = worst.of_tolerance.max(d / allowed);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{case}: mismatches (NaN = never written):\n{}",
        failures.join("\n")
    );
    worst
}

pub fn largest(values: &[f32]) -> f32 {
    values.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

pub fn report(op: &str, dtype: DType, cases: usize, worst: Worst) {
    println!(
        "RESULT {op:<10} {dtype:<5} cases {cases:>4}  worst |d| {:>10.3e}  worst |d|/tol {:>6.3}",
        worst.abs, worst.of_tolerance
    );
}

pub fn merge(a: Worst, b: Worst) -> Worst {
    Worst {
        abs: a.abs.max(b.abs),
        of_tolerance: a.of_tolerance.max(b.of_tolerance),
    }
}
