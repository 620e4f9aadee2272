//! Element types a checkpoint may store, and their conversion to f32.
//!
//! Tensor data inside a memory-mapped file has no alignment guarantee (the header length is
//! arbitrary), so every element is decoded from its little-endian bytes; the byte slice is never
//! reinterpreted as a slice of wider numbers.

use std::fmt;

/// The stored element types this crate loads (each converted to f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoredDType {
    F32,
    F16,
    BF16,
}

impl StoredDType {
    /// The name the safetensors header uses for this type.
    pub fn name(self) -> &'static str {
        match self {
            StoredDType::F32 => "F32",
            StoredDType::F16 => "F16",
            StoredDType::BF16 => "BF16",
        }
    }

    pub fn size_in_bytes(self) -> usize {
        match self {
            StoredDType::F32 => 4,
            StoredDType::F16 | StoredDType::BF16 => 2,
        }
    }

    fn from_name(name: &str) -> Option<StoredDType> {
        match name {
            "F32" => Some(StoredDType::F32),
            "F16" => Some(StoredDType::F16),
            "BF16" => Some(StoredDType::BF16),
            _ => None,
        }
    }
}

impl fmt::Display for StoredDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The element type as a file declares it: one we load, or any other name, kept so that a load
/// can say what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileDType {
    Supported(StoredDType),
    Other(String),
}

impl FileDType {
    pub(crate) fn parse(name: &str) -> FileDType {
        match StoredDType::from_name(name) {
            Some(dtype) => FileDType::Supported(dtype),
            None => FileDType::Other(name.to_string()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            FileDType::Supported(dtype) => dtype.name(),
            FileDType::Other(name) => name,
        }
    }

    /// Bits per element for every dtype of the safetensors format, so that the byte length of a
    /// tensor we do not load can still be checked; `None` for names outside the format.
    pub(crate) fn bits_per_element(&self) -> Option<usize> {
        let bits = match self.name() {
            "F4" => 4,
            "F6_E2M3" | "F6_E3M2" => 6,
            "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
            "I16" | "U16" | "F16" | "BF16" => 16,
            "I32" | "U32" | "F32" => 32,
            "I64" | "U64" | "F64" => 64,
            _ => return None,
        };
        Some(bits)
    }
}

/// Decodes `bytes` (little-endian elements of `dtype`) into `out`.
///
/// The caller guarantees `bytes.len() == out.len() * dtype.size_in_bytes()`.
pub(crate) fn decode_into_f32(dtype: StoredDType, bytes: &[u8], out: &mut [f32]) {
    debug_assert_eq!(bytes.len(), out.len() * dtype.size_in_bytes());
    match dtype {
        StoredDType::F32 => {
            for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *value = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            }
        }
        StoredDType::F16 => {
            for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *value = half::f16::from_bits(u16::from_le_bytes([chunk[0], chunk[1]])).to_f32();
            }
        }
        StoredDType::BF16 => {
            for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *value = half::bf16::from_bits(u16::from_le_bytes([chunk[0], chunk[1]])).to_f32();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_f32_from_an_unaligned_slice() {
        let values = [1.5f32, -2.25, f32::INFINITY, 3.0e-39];
        // One leading byte makes the f32 data start at an odd address.
        let mut bytes = vec![0xAAu8];
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let mut out = [0f32; 4];
        decode_into_f32(StoredDType::F32, &bytes[1..], &mut out);
        assert_eq!(out, values);
    }

    #[test]
    fn decodes_f16_and_bf16_exactly_for_representable_values() {
        let values = [0.0f32, 1.0, -0.5, 65504.0, 6.103_515_6e-5];
        let mut f16_bytes = Vec::new();
        let mut bf16_bytes = Vec::new();
        for v in values {
            f16_bytes.extend_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
            bf16_bytes.extend_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
        }
        let mut out = [0f32; 5];
        decode_into_f32(StoredDType::F16, &f16_bytes, &mut out);
        assert_eq!(out, values);
        decode_into_f32(StoredDType::BF16, &bf16_bytes, &mut out);
        // bf16 keeps 8 mantissa bits: 65504 rounds to 65536, the tiny value to its nearest.
        assert_eq!(&out[..4], &[0.0, 1.0, -0.5, 65536.0]);
        assert!((out[4] - 6.103_515_6e-5).abs() < 1e-6);
    }

    #[test]
    fn bf16_is_the_top_half_of_an_f32() {
        // 0x3FC0 in bf16 is 1.5: the upper 16 bits of 1.5f32 (0x3FC00000).
        let mut out = [0f32; 1];
        decode_into_f32(StoredDType::BF16, &[0xC0, 0x3F], &mut out);
        assert_eq!(out[0], 1.5);
    }

    #[test]
    fn every_format_dtype_has_a_size_and_unknown_names_have_none() {
        assert_eq!(
            FileDType::parse("F32"),
            FileDType::Supported(StoredDType::F32)
        );
        assert_eq!(
            FileDType::parse("BF16"),
            FileDType::Supported(StoredDType::BF16)
        );
        assert_eq!(FileDType::parse("I8").bits_per_element(), Some(8));
        assert_eq!(FileDType::parse("F64").bits_per_element(), Some(64));
        assert_eq!(FileDType::parse("F4").bits_per_element(), Some(4));
        assert_eq!(FileDType::parse("Q4_K").bits_per_element(), None);
        assert_eq!(FileDType::parse("f32"), FileDType::Other("f32".into()));
    }
}
