//! The `--json` document of `vitrt bench` (schema `vitrt-bench/1`), read by scripts as well:
//! field names and their order are part of the format.
//!
//! ```text
//! {"schema": "vitrt-bench/1", "tool": "vitrt 0.1.0", "date": "2026-11-22T12:34:56Z",
//!  "device": {"name", "driver", "compute_capability", "l2_bytes"}, "dtype": "f16",
//!  "kernels": [{"op", "case", "provider", "epilogue" (null but for matmul), "shape", "reps",
//!               "median_ms", "min_ms", "max_ms", "tflops" (or null), "gbps" (or null)}],
//!  "models": [], "skipped": [{"op", "case", "provider", "epilogue" (null but for matmul), "reason"}]}
//! ```

use super::stats::Stats;
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

pub const SCHEMA: &str = "vitrt-bench/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub tool: String,
    pub date: String,
    pub device: DeviceInfo,
    pub dtype: String,
    pub kernels: Vec<KernelRow>,
    /// Whole-model timings; `vitrt bench kernels` leaves it empty.
    pub models: Vec<serde_json::Value>,
    pub skipped: Vec<Skipped>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    /// The driver's release ("580.159.04") where the kernel module says it, else the CUDA
    /// version of its API ("CUDA 13.0").
    pub driver: String,
    /// "9.0".
    pub compute_capability: String,
    pub l2_bytes: u64,
}

/// One timed kernel (or sequence of kernels) by one provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRow {
    pub op: String,
    pub case: String,
    /// "vitrt", "cublas", "copy", or a baseline of ours (benchmarks/SCHEMA.md).
    pub provider: String,
    /// "none" or "bias+gelu" for matmul rows, "bias" or "bias+gelu" for matmul-layernorm,
    /// "bias+residual" for matmul-row-stats; null for the others (benchmarks/SCHEMA.md).
    #[serde(default)]
    pub epilogue: Option<String>,
    pub shape: Vec<u64>,
    pub reps: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub tflops: Option<f64>,
    pub gbps: Option<f64>,
}

impl KernelRow {
    /// A row from timings, with TFLOP/s when `flops` is given and GB/s when `bytes` is.
    /// Times are kept to the nanosecond and rates to three decimals: CUDA events resolve
    /// about half a microsecond, so more digits would only be noise.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        op: &str,
        case: &str,
        provider: &str,
        epilogue: Option<&str>,
        shape: Vec<u64>,
        stats: &Stats,
        flops: Option<f64>,
        bytes: Option<f64>,
    ) -> KernelRow {
        KernelRow {
            op: op.into(),
            case: case.into(),
            provider: provider.into(),
            epilogue: epilogue.map(Into::into),
            shape,
            reps: stats.reps,
            median_ms: round_to(stats.median_ms, 6),
            min_ms: round_to(stats.min_ms, 6),
            max_ms: round_to(stats.max_ms, 6),
            tflops: flops.map(|f| round_to(stats.tflops(f), 3)),
            gbps: bytes.map(|b| round_to(stats.gbps(b), 3)),
        }
    }

    /// The figure rows are compared by: TFLOP/s for matmuls, GB/s for the rest.
    pub fn rate(&self) -> Option<f64> {
        self.tflops.or(self.gbps)
    }
}

/// A case that could not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub op: String,
    pub case: String,
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilogue: Option<String>,
    pub reason: String,
}

fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

/// `2026-11-22T12:34:56Z`: the UTC time of `now`, to the second (no time-zone database
/// needed: UTC is days and seconds since 1970, and the calendar does the rest).
pub fn utc_timestamp(now: SystemTime) -> String {
    let seconds = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

fn is_leap(year: u64) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

/// (year, month, day) of the day `days` after 1970-01-01, in the Gregorian calendar: whole
/// years off first, then whole months. At most a few hundred steps for any date a clock gives.
fn civil_date(mut days: u64) -> (u64, u64, u64) {
    let mut year = 1970;
    loop {
        let length = if is_leap(year) { 366 } else { 365 };
        if days < length {
            break;
        }
        days -= length;
        year += 1;
    }
    let february = if is_leap(year) { 29 } else { 28 };
    let months = [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut month = 1;
    for length in months {
        if days < length {
            break;
        }
        days -= length;
        month += 1;
    }
    (year, month, days + 1)
}

/// The driver release from the text of /proc/driver/nvidia/version, whose first line reads
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build ...` (or `...
/// Open Kernel Module for x86_64  580.159.04 ...`): the first word made of digits and dots.
pub fn driver_release(proc_version: &str) -> Option<String> {
    let first = proc_version.lines().next()?;
    first
        .split_whitespace()
        .find(|word| {
            word.contains('.')
                && word
                    .split('.')
                    .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
        })
        .map(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(seconds: u64) -> String {
        utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn timestamps_are_utc_civil_dates() {
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        // Values from `date -u -d @N`.
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(at(1_709_251_200), "2024-03-01T00:00:00Z");
        assert_eq!(at(1_798_761_599), "2026-12-31T23:59:59Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(at(1_795_351_696), "2026-11-22T12:48:16Z");
    }

    #[test]
    fn driver_release_from_the_kernel_module() {
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build  (dvs-builder@U16)  Thu Oct  2 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(driver_release(proprietary).as_deref(), Some("580.159.04"));
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n";
        assert_eq!(driver_release(open).as_deref(), Some("570.86.15"));
        assert_eq!(driver_release(""), None);
        assert_eq!(driver_release("NVRM version: unknown\n"), None);
    }

    #[test]
    fn rows_serialise_in_the_schema_order_with_nulls() {
        let stats = Stats::from_samples(&[0.1, 0.09, 0.12]).unwrap();
        let row = KernelRow::new(
            "matmul",
            "vit-b16/qkv/b64",
            "vitrt",
            Some("none"),
            vec![12608, 2304, 768],
            &stats,
            Some(2.0 * 12608.0 * 2304.0 * 768.0),
            None,
        );
        let json = serde_json::to_string(&row).unwrap();
        assert!(
            json.starts_with(
                r#"{"op":"matmul","case":"vit-b16/qkv/b64","provider":"vitrt","epilogue":"none","shape":[12608,2304,768],"reps":3,"median_ms":0.1,"min_ms":0.09,"max_ms":0.12,"tflops":446."#
            ),
            "{json}"
        );
        assert!(json.ends_with(r#","gbps":null}"#), "{json}");
        let copy = KernelRow::new(
            "copy",
            "add/vit-b16/b1",
            "copy",
            None,
            vec![1 << 20],
            &stats,
            None,
            Some(2e6),
        );
        let json = serde_json::to_string(&copy).unwrap();
        assert!(json.contains(r#""epilogue":null"#), "{json}");
        assert!(json.contains(r#""tflops":null,"gbps":20.0"#), "{json}");
        assert_eq!(copy.rate(), Some(20.0));
    }

    #[test]
    fn a_report_round_trips() {
        let report = BenchReport {
            schema: SCHEMA.into(),
            tool: "vitrt 0.1.0".into(),
            date: at(0),
            device: DeviceInfo {
                name: "NVIDIA H200".into(),
                driver: "580.159.04".into(),
                compute_capability: "9.0".into(),
                l2_bytes: 62_914_560,
            },
            dtype: "f16".into(),
            kernels: Vec::new(),
            models: Vec::new(),
            skipped: vec![Skipped {
                op: "matmul".into(),
                case: "square/8192".into(),
                provider: "cublas".into(),
                epilogue: Some("bias+gelu".into()),
                reason: "out of GPU memory".into(),
            }],
        };
        let text = serde_json::to_string(&report).unwrap();
        assert!(text.starts_with(r#"{"schema":"vitrt-bench/1","tool":"vitrt 0.1.0","date":"1970-01-01T00:00:00Z","device":{"name":"NVIDIA H200","driver":"580.159.04","compute_capability":"9.0","l2_bytes":62914560},"dtype":"f16","kernels":[],"models":[],"skipped":[{"#), "{text}");
        let back: BenchReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
    }
}
