//! Turning repeated timings into one figure, and sizing the input rotation that keeps every
//! repetition's operands out of L2.

/// Median, fastest and slowest of the timed repetitions, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub reps: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl Stats {
    /// `None` for no samples, or for any sample that is not a finite, non-negative time (a
    /// broken measurement should not pass for a figure).
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        // The median of an even count is the mean of the middle two, so that it does not lean
        // towards either neighbour.
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Stats {
            reps: n,
            median_ms: median,
            min_ms: sorted[0],
            max_ms: sorted[n - 1],
        })
    }

    /// Trillions of floating-point operations per second at the median time.
    pub fn tflops(&self, flops: f64) -> f64 {
        flops / (self.median_ms * 1e-3) / 1e12
    }

    /// Gigabytes (10^9) per second at the median time.
    pub fn gbps(&self, bytes: f64) -> f64 {
        bytes / (self.median_ms * 1e-3) / 1e9
    }
}

/// How many distinct copies of a set of inputs of `set_bytes` to rotate through so that they
/// total more than twice the L2 cache: by the time a copy comes round again, at least an L2's
/// worth of other data has passed through, so nothing of it is left there (LRU-like caches
/// keep the most recent). A set already larger than that needs one copy: it cannot fit.
pub fn copies_for(set_bytes: usize, l2_bytes: usize) -> usize {
    if set_bytes == 0 {
        return 1;
    }
    (2 * l2_bytes) / set_bytes + 1
}

/// The copy repetition `rep` reads (warm-up repetitions count too, so the timed ones go on
/// from where they left off).
pub fn copy_for_rep(rep: usize, copies: usize) -> usize {
    rep % copies.max(1)
}

/// Where copy `i` of an operand of `bytes` starts inside one allocation holding every copy:
/// slots are rounded up to 256 bytes, so every copy is as aligned as a fresh allocation (the
/// kernels pick their vector width from the alignment).
pub fn slot_offset(i: usize, bytes: usize) -> usize {
    i * bytes.next_multiple_of(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_and_max() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0, 10.0, 4.0]).unwrap();
        assert_eq!(
            (s.reps, s.median_ms, s.min_ms, s.max_ms),
            (5, 3.0, 1.0, 10.0)
        );
        let even = Stats::from_samples(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(even.median_ms, 2.5);
        assert_eq!(Stats::from_samples(&[0.5]).unwrap().median_ms, 0.5);
    }

    #[test]
    fn broken_samples_make_no_figure() {
        assert_eq!(Stats::from_samples(&[]), None);
        assert_eq!(Stats::from_samples(&[1.0, f64::NAN]), None);
        assert_eq!(Stats::from_samples(&[1.0, -1.0]), None);
        assert_eq!(Stats::from_samples(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn throughput_at_the_median() {
        let s = Stats::from_samples(&[2.0, 1.0, 3.0]).unwrap();
        // 2e12 operations in 2 ms: 1000 TFLOP/s; 4e9 bytes in 2 ms: 2000 GB/s.
        assert!((s.tflops(2e12) - 1000.0).abs() < 1e-9);
        assert!((s.gbps(4e9) - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn rotation_exceeds_twice_the_l2() {
        let l2 = 50 << 20;
        for set in [
            1usize,
            4096,
            300_000,
            3 << 20,
            50 << 20,
            100 << 20,
            101 << 20,
            1 << 30,
        ] {
            let copies = copies_for(set, l2);
            assert!(copies * set > 2 * l2, "{set} bytes x {copies}");
            // And no more copies than needed: one fewer would not do (unless one is the least).
            assert!(
                copies == 1 || (copies - 1) * set <= 2 * l2,
                "{set} bytes x {copies}"
            );
        }
        assert_eq!(copies_for(1 << 30, l2), 1);
        assert_eq!(copies_for(0, l2), 1);
        assert_eq!(copies_for(1000, 0), 1, "no L2 reported: no rotation needed");
    }

    #[test]
    fn every_copy_comes_round_in_turn() {
        let copies = 3;
        let used: Vec<usize> = (0..7).map(|rep| copy_for_rep(rep, copies)).collect();
        assert_eq!(used, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(copy_for_rep(5, 0), 0, "zero copies is treated as one");
    }

    #[test]
    fn slots_are_256_byte_aligned() {
        assert_eq!(slot_offset(0, 1000), 0);
        assert_eq!(slot_offset(1, 1000), 1024);
        assert_eq!(slot_offset(3, 512), 1536);
        assert_eq!(slot_offset(2, 1), 512);
    }
}
