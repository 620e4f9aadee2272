//! Turning repeated timings into one figure. The timings themselves come from
//! `vitrt_kernels::cuda::Timer`.

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
}
