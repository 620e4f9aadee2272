//! FP8 E4M3 on the host: the 8-bit format of the FP8 matmul's operands (and of its e4m3
//! output), as Hopper's tensor cores and `cvt.rn.satfinite.e4m3x2.f32` read and write it.
//!
//! One sign bit, four exponent bits (bias 7) and three mantissa bits, with no infinities: the
//! code `S.1111.111` is NaN and `S.1111.110` the largest finite value, ±448. Exponent 0 holds
//! the subnormals, `m · 2^-9`. (The OCP "E4M3FN" format, PyTorch's `float8_e4m3fn`.)
//!
//! [`encode`] rounds to nearest, ties to even, and saturates: a finite value or an infinity
//! past ±448 becomes ±448, as the device's `.satfinite` conversion does. NaN becomes 0x7F (the
//! sign of a NaN is not kept). Every code decodes exactly to an f32 ([`decode`]).
//!
//! Written here rather than taken from a crate: the codec is a few lines, its tests below
//! cover all 256 codes and every rounding boundary between them, and the kernels crate keeps
//! its dependencies few.

/// The largest finite E4M3 value.
pub const MAX: f32 = 448.0;

/// The code of the largest finite value (0x7E); with the sign bit, of its negative.
pub const MAX_CODE: u8 = 0x7E;

/// The NaN code [`encode`] writes.
pub const NAN_CODE: u8 = 0x7F;

/// The f32 value of an E4M3 code (exact: every code is an f32).
pub fn decode(code: u8) -> f32 {
    let negative = code & 0x80 != 0;
    let exponent = ((code >> 3) & 0xF) as i32;
    let mantissa = (code & 0x7) as i32;
    let magnitude = if exponent == 0xF && mantissa == 0x7 {
        return f32::NAN;
    } else if exponent == 0 {
        mantissa as f32 * 2f32.powi(-9)
    } else {
        (8 + mantissa) as f32 * 2f32.powi(exponent - 10)
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// The E4M3 code nearest `x` (ties to even), saturated to ±448; NaN gives [`NAN_CODE`].
pub fn encode(x: f32) -> u8 {
    if x.is_nan() {
        return NAN_CODE;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let magnitude = x.abs();
    // Past the largest finite value (infinity included) the code saturates; checked before
    // the arithmetic below, which needs a finite exponent.
    if magnitude >= MAX {
        return sign | MAX_CODE;
    }
    // The binade's exponent, at least that of the smallest normal (2^-6): below it the
    // subnormals share the normals' quantum of 2^-9. A value of binade 2^e is a multiple of
    // 2^(e-3), so `steps` counts quanta; its rounded count lands in [8, 16] for normals (16
    // carries into the next binade, which the code's layout absorbs: (e + 7) · 8 + steps - 8
    // is then the next binade's first code) and [0, 8] for subnormals.
    let binade = (magnitude.to_bits() >> 23) as i32 - 127;
    let e = binade.max(-6);
    let steps = (magnitude * 2f32.powi(3 - e)).round_ties_even() as i32;
    let code = (e + 7) * 8 + steps - 8;
    // Rounding up from just below 448 (to 464 and past) saturates too.
    sign | (code.min(MAX_CODE as i32) as u8)
}

/// Every value of `values` as its E4M3 code: what is uploaded to an e4m3 device buffer.
pub fn encode_slice(values: &[f32]) -> Vec<u8> {
    values.iter().map(|&v| encode(v)).collect()
}

/// Every code of `codes` as its f32 value.
pub fn decode_slice(codes: &[u8]) -> Vec<f32> {
    codes.iter().map(|&c| decode(c)).collect()
}

/// Rounds an f32 to E4M3 and back: what a value looks like after an e4m3 store.
pub fn round(x: f32) -> f32 {
    decode(encode(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The non-NaN codes with a non-negative sign, in increasing order of value.
    fn positive_codes() -> impl Iterator<Item = u8> {
        0u8..=MAX_CODE
    }

    #[test]
    fn every_code_decodes_to_its_defined_value() {
        for code in 0..=255u8 {
            let (s, e, m) = (code >> 7, (code >> 3) & 0xF, code & 7);
            let value = decode(code);
            if e == 0xF && m == 7 {
                assert!(value.is_nan(), "{code:#04x}");
                continue;
            }
            let magnitude = if e == 0 {
                m as f64 / 512.0
            } else {
                (1.0 + m as f64 / 8.0) * 2f64.powi(e as i32 - 7)
            };
            let want = if s == 1 { -magnitude } else { magnitude };
            assert_eq!(value as f64, want, "{code:#04x}");
            assert_eq!(
                value.is_sign_negative(),
                s == 1,
                "{code:#04x}: sign of zero too"
            );
        }
        assert_eq!(decode(0x7E), 448.0);
        assert_eq!(decode(0xFE), -448.0);
        assert_eq!(decode(0x08), 2f32.powi(-6));
        assert_eq!(decode(0x01), 2f32.powi(-9));
        assert!(decode(0xFF).is_nan());
    }

    #[test]
    fn every_code_round_trips() {
        for code in 0..=255u8 {
            if decode(code).is_nan() {
                assert_eq!(encode(decode(code)), NAN_CODE);
            } else {
                assert_eq!(encode(decode(code)), code, "{code:#04x}");
            }
        }
    }

    #[test]
    fn values_between_codes_round_to_nearest_and_ties_to_even() {
        let codes: Vec<u8> = positive_codes().collect();
        for pair in codes.windows(2) {
            let (low, high) = (pair[0], pair[1]);
            let (a, b) = (decode(low), decode(high));
            let mid = (a + b) / 2.0; // exact: both are short binary fractions
            let even = if low % 2 == 0 { low } else { high };
            for sign in [1.0f32, -1.0] {
                let s = if sign < 0.0 { 0x80 } else { 0 };
                assert_eq!(
                    encode(sign * mid),
                    s | even,
                    "tie between {low:#04x} and {high:#04x}"
                );
                let below = f32::from_bits(mid.to_bits() - 1);
                let above = f32::from_bits(mid.to_bits() + 1);
                assert_eq!(
                    encode(sign * below),
                    s | low,
                    "below the midpoint of {low:#04x}"
                );
                assert_eq!(
                    encode(sign * above),
                    s | high,
                    "above the midpoint of {low:#04x}"
                );
                // Values strictly inside each half.
                assert_eq!(encode(sign * (a + (b - a) * 0.25)), s | low);
                assert_eq!(encode(sign * (a + (b - a) * 0.75)), s | high);
            }
        }
    }

    #[test]
    fn large_values_and_infinities_saturate_and_nan_is_0x7f() {
        // The midpoint between 448 and the next binade's first step (480) would round to 512
        // without saturation.
        for x in [
            448.0,
            449.0,
            463.9,
            464.0,
            500.0,
            1e6,
            f32::MAX,
            f32::INFINITY,
        ] {
            assert_eq!(encode(x), 0x7E, "{x}");
            assert_eq!(encode(-x), 0xFE, "{x}");
        }
        // Just below 448, between 416 and 448: nearest.
        assert_eq!(encode(431.9), encode(416.0));
        assert_eq!(encode(432.1), 0x7E);
        assert_eq!(encode(f32::NAN), NAN_CODE);
        assert_eq!(encode(-f32::NAN), NAN_CODE);
    }

    #[test]
    fn tiny_values_round_to_zero_or_the_smallest_subnormal() {
        let smallest = 2f32.powi(-9);
        assert_eq!(
            encode(smallest / 2.0),
            0x00,
            "a tie with zero goes to zero (even)"
        );
        assert_eq!(encode(-smallest / 2.0), 0x80, "keeping the sign");
        assert_eq!(encode(smallest * 0.51), 0x01);
        assert_eq!(encode(f32::from_bits(1)), 0x00, "an f32 subnormal");
        assert_eq!(encode(0.0), 0x00);
        assert_eq!(encode(-0.0), 0x80);
        // 1.5 · 2^-9 ties between codes 1 and 2: even is 2.
        assert_eq!(encode(1.5 * smallest), 0x02);
    }

    #[test]
    fn slices_encode_and_decode_elementwise() {
        let values = [0.0, 1.0, -2.5, 300.0, 1000.0, 0.001];
        let codes = encode_slice(&values);
        assert_eq!(codes, values.iter().map(|&v| encode(v)).collect::<Vec<_>>());
        let back = decode_slice(&codes);
        for (v, b) in values.iter().zip(back) {
            assert_eq!(b, round(*v));
        }
        assert_eq!(round(1000.0), 448.0);
        assert_eq!(round(-2.5), -2.5);
    }
}
