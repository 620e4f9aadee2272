//! The vocabulary shared by every kernel and its CPU twin.

use std::fmt;

/// Storage type of a tensor. Accumulation is always fp32, whatever the storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    /// FP8 E4M3 codes (`crate::e4m3`): a run's weights of an FP8 linear layer, never a run's
    /// compute type (not in [`DType::ALL`], not parsed from a name). Its values are the
    /// unscaled codes; the scales live beside them in f32.
    E4M3,
}

/// Values per parallel chunk in [`DType::encode`] and [`DType::decode`].
const CONVERT_CHUNK: usize = 1 << 16;

/// Values from which [`DType::decode`] splits its work over the thread pool.
const PARALLEL_DECODE_VALUES: usize = 1 << 22;

impl DType {
    /// The types a run computes in.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::E4M3 => 1,
        }
    }

    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::E4M3 => "e4m3",
        }
    }

    /// The CUDA C++ type that stores one element.
    pub fn cuda_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "__half",
            DType::BF16 => "__nv_bfloat16",
            DType::E4M3 => "__nv_fp8_e4m3",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        match s {
            "f32" | "float32" | "fp32" => Some(DType::F32),
            "f16" | "float16" | "fp16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }

    /// f32 values as the little-endian bytes of this storage type (round to nearest even):
    /// what is uploaded to a device buffer of this type. Large inputs (a model's weights at
    /// load time) are converted in parallel chunks.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        use rayon::prelude::*;
        let size = self.size_bytes();
        let mut bytes = vec![0u8; values.len() * size];
        if values.len() < CONVERT_CHUNK {
            self.encode_into(values, &mut bytes);
        } else {
            bytes
                .par_chunks_mut(CONVERT_CHUNK * size)
                .zip(values.par_chunks(CONVERT_CHUNK))
                .for_each(|(out, values)| self.encode_into(values, out));
        }
        bytes
    }

    /// As [`DType::encode`], without the copy where there is nothing to convert: f32 values
    /// on a little-endian host are already their own encoding.
    pub fn encoded(self, values: &[f32]) -> std::borrow::Cow<'_, [u8]> {
        if self == DType::F32 && cfg!(target_endian = "little") {
            // SAFETY: an f32 slice is valid as its bytes (no padding; every byte is a u8), and
            // on a little-endian host they are the bytes `encode` would copy them into.
            let bytes = unsafe {
                std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values))
            };
            std::borrow::Cow::Borrowed(bytes)
        } else {
            std::borrow::Cow::Owned(self.encode(values))
        }
    }

    fn encode_into(self, values: &[f32], out: &mut [u8]) {
        match self {
            DType::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(values) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            DType::F16 => {
                for (o, v) in out.chunks_exact_mut(2).zip(values) {
                    o.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
            }
            DType::BF16 => {
                for (o, v) in out.chunks_exact_mut(2).zip(values) {
                    o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
                }
            }
            DType::E4M3 => {
                for (o, v) in out.iter_mut().zip(values) {
                    *o = crate::e4m3::encode(*v);
                }
            }
        }
    }

    /// The inverse of [`DType::encode`]: little-endian bytes of this type as f32 values.
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        use rayon::prelude::*;
        let size = self.size_bytes();
        let mut values = vec![0f32; bytes.len() / size];
        // Outputs read back batch by batch (a batch's logits or embeddings, a few hundred
        // thousand values) convert here in a fraction of a millisecond; handed to the thread
        // pool while every core decodes images, they waited ~10 ms for its threads, which held
        // the GPU idle (NOTES, 2026-11-27). Only tensors of millions of values are split.
        if values.len() < PARALLEL_DECODE_VALUES {
            self.decode_into(bytes, &mut values);
        } else {
            values
                .par_chunks_mut(CONVERT_CHUNK)
                .zip(bytes.par_chunks(CONVERT_CHUNK * size))
                .for_each(|(out, bytes)| self.decode_into(bytes, out));
        }
        values
    }

    fn decode_into(self, bytes: &[u8], out: &mut [f32]) {
        match self {
            DType::F32 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            DType::F16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            DType::BF16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            DType::E4M3 => {
                for (o, b) in out.iter_mut().zip(bytes) {
                    *o = crate::e4m3::decode(*b);
                }
            }
        }
    }

    /// Rounds an f32 to this storage type and back: what a value looks like after a store.
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::F16 => half::f16::from_f32(x).to_f32(),
            DType::BF16 => half::bf16::from_f32(x).to_f32(),
            DType::E4M3 => crate::e4m3::round(x),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The activations Hugging Face ViT configs can name, after aliases are resolved:
/// `gelu` is the exact (erf) form; `gelu_new`, `gelu_fast` and `gelu_pytorch_tanh` are all
/// the tanh approximation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    None,
    Gelu,
    GeluTanh,
    QuickGelu,
    Relu,
    Silu,
    /// tanh, as the pooler of ViT and DeiT applies it. Not a matmul epilogue: the pooler's
    /// matmul is one row per image, so its activation runs as its own pass.
    Tanh,
    /// The logistic function, SigLIP's per-label probability. Not a matmul epilogue either.
    Sigmoid,
}

impl Activation {
    pub const ALL: [Activation; 8] = [
        Activation::None,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::QuickGelu,
        Activation::Relu,
        Activation::Silu,
        Activation::Tanh,
        Activation::Sigmoid,
    ];

    /// The activations the matmul epilogue applies (and CI compiles into it).
    pub const EPILOGUE: [Activation; 6] = [
        Activation::None,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::QuickGelu,
        Activation::Relu,
        Activation::Silu,
    ];

    /// Whether the matmul epilogue can apply it (see [`Activation::EPILOGUE`]).
    pub fn in_matmul_epilogue(self) -> bool {
        Activation::EPILOGUE.contains(&self)
    }

    /// The value of the CUDA `enum class Act` template argument, and a stable short name.
    pub fn cuda_name(self) -> &'static str {
        match self {
            Activation::None => "Act::None",
            Activation::Gelu => "Act::Gelu",
            Activation::GeluTanh => "Act::GeluTanh",
            Activation::QuickGelu => "Act::QuickGelu",
            Activation::Relu => "Act::Relu",
            Activation::Silu => "Act::Silu",
            Activation::Tanh => "Act::Tanh",
            Activation::Sigmoid => "Act::Sigmoid",
        }
    }

    pub fn short_name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::QuickGelu => "quick_gelu",
            Activation::Relu => "relu",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
        }
    }

    /// The reference formula, in f32, as PyTorch computes it.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Gelu => 0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2)),
            Activation::GeluTanh => {
                let inner = 0.797_884_6 * (x + 0.044_715 * x * x * x);
                0.5 * x * (1.0 + inner.tanh())
            }
            Activation::QuickGelu => x / (1.0 + (-1.702 * x).exp()),
            Activation::Relu => x.max(0.0),
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }
}

/// erf in f64 arithmetic (Abramowitz-Stegun 7.1.26 is too coarse for 1e-5 parity), rounded to f32.
fn erf(x: f32) -> f32 {
    libm_erf(x as f64) as f32
}

/// W. J. Cody's rational approximations, as in most libms; accurate to a few ulp in f64.
fn libm_erf(x: f64) -> f64 {
    // erf(x) = 1 - erfc(x); use a series for small |x| and a continued fraction otherwise.
    let ax = x.abs();
    let r = if ax < 2.0 {
        // Maclaurin series: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), converges fast here.
        let mut sum = 0.0f64;
        let mut term = ax;
        let x2 = ax * ax;
        let mut n = 0.0f64;
        loop {
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
            n += 1.0;
            term *= -x2 / n;
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc via Lentz's continued fraction: erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x+ 1/2/(x+ 1/(x+ 3/2/(x+ ...))))
        let mut f = ax;
        let tiny = 1e-300;
        let mut c = f;
        let mut d = 0.0f64;
        for i in 1..200 {
            let a = i as f64 / 2.0;
            d = ax + a * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = ax + a / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt())
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// A strided view of one matrix operand inside a buffer, in elements.
/// Element (batch b, head h, row r, col c) lives at
/// `offset + b * batch_stride + h * head_stride + r * row_stride + c`.
/// Columns are always contiguous: every kernel relies on that for vector loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub offset: usize,
    pub row_stride: usize,
    pub batch_stride: usize,
    pub head_stride: usize,
}

impl Operand {
    /// A plain row-major matrix with `cols` columns.
    pub fn contiguous(cols: usize) -> Operand {
        Operand {
            offset: 0,
            row_stride: cols,
            batch_stride: 0,
            head_stride: 0,
        }
    }

    pub fn index(&self, batch: usize, head: usize, row: usize, col: usize) -> usize {
        self.offset
            + batch * self.batch_stride
            + head * self.head_stride
            + row * self.row_stride
            + col
    }

    /// One past the largest index a (batch, heads, rows, cols) walk touches; 0 when empty.
    pub fn extent(&self, batch: usize, heads: usize, rows: usize, cols: usize) -> usize {
        if batch == 0 || heads == 0 || rows == 0 || cols == 0 {
            return 0;
        }
        self.index(batch - 1, heads - 1, rows - 1, cols - 1) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Python's math.erf.
        let cases = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.5, -0.966_105_146_475_310_7),
        ];
        for (x, want) in cases {
            let got = libm_erf(x);
            assert!((got - want).abs() < 1e-14, "erf({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn activations_match_pytorch_values() {
        // The formulas evaluated in float64 by Python's math module.
        let close = |a: f32, b: f64| (a as f64 - b).abs() < 1e-6;
        assert!(close(
            Activation::Gelu.apply(-1.0),
            -0.158_655_253_931_457_05
        ));
        assert!(close(Activation::Gelu.apply(2.0), 1.954_499_736_103_642));
        assert!(close(
            Activation::GeluTanh.apply(0.5),
            0.345_714_010_294_053_3
        ));
        assert!(close(
            Activation::QuickGelu.apply(1.0),
            0.845_795_765_932_821_2
        ));
        assert!(close(
            Activation::Silu.apply(-2.0),
            -0.238_405_844_044_234_03
        ));
        assert_eq!(Activation::Relu.apply(-3.0), 0.0);
    }

    #[test]
    fn encode_and_decode_round_trip_through_each_storage_type() {
        let values = [0.0, -1.5, 3.140625, 65504.0, 1e-3];
        for d in DType::ALL {
            let bytes = d.encode(&values);
            assert_eq!(bytes.len(), values.len() * d.size_bytes());
            let back = d.decode(&bytes);
            for (v, b) in values.iter().zip(back) {
                assert_eq!(b, d.round(*v), "{d}");
            }
        }
    }

    #[test]
    fn encoded_gives_the_bytes_of_encode() {
        let values = [0.0, -1.5, 3.140625, 65504.0, 1e-3, f32::MIN_POSITIVE];
        for d in DType::ALL {
            assert_eq!(*d.encoded(&values), d.encode(&values), "{d}");
        }
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("int8"), None);
    }
}
