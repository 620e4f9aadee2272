//! The GPU's SM clock, power draw and throttle reasons while a benchmark runs, read through
//! NVML every few milliseconds on a thread of its own, and their summary per run. At batch 256
//! an H200 runs ViT-B/16 at its 700 W cap, its SM clock near 1.4 GHz against 1.8-1.95 GHz for
//! one kernel timed alone (benchmarks/NOTES.md, 2026-11-29 "The pass at batch 256 runs under
//! the power cap"): a time means little without the clock it ran at.
//!
//! NVML is loaded at run time (`libnvidia-ml.so`, installed with the driver). Where it cannot
//! be loaded, or does not know the device, the benchmark runs without these figures and says
//! why once.

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the sampler reads the GPU: an NVML query takes tens of microseconds, and a
/// forward pass at batch 256 about 20 ms.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// One reading of the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockSample {
    pub sm_mhz: u32,
    /// The driver's power figure, milliwatts (on Hopper an average over about a second).
    pub power_mw: Option<u32>,
    /// NVML's clock throttle reasons, as its bit mask (`nvmlClocksThrottleReason*`).
    pub reasons: Option<u64>,
}

/// The readings of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockSummary {
    pub samples: usize,
    pub sm_mhz_p10: u32,
    pub sm_mhz_median: u32,
    pub sm_mhz_p90: u32,
    pub power_w_median: Option<f64>,
    /// Of the samples whose reasons were read, the share held back by power: the software
    /// power cap or the hardware power brake.
    pub power_limited_share: Option<f64>,
    /// The same for temperature (software or hardware thermal slowdown, or hardware slowdown).
    pub thermal_limited_share: Option<f64>,
}

fn power_limited(reasons: u64) -> bool {
    let power = ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN;
    reasons & power.bits() != 0
}

fn thermal_limited(reasons: u64) -> bool {
    let thermal = ThrottleReasons::SW_THERMAL_SLOWDOWN
        | ThrottleReasons::HW_THERMAL_SLOWDOWN
        | ThrottleReasons::HW_SLOWDOWN;
    reasons & thermal.bits() != 0
}

/// The value at quantile `q` of `sorted` (nearest rank).
fn quantile(sorted: &[u32], q: f64) -> u32 {
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The summary of `samples`; `None` for none.
pub fn summarize(samples: &[ClockSample]) -> Option<ClockSummary> {
    if samples.is_empty() {
        return None;
    }
    let mut clocks: Vec<u32> = samples.iter().map(|s| s.sm_mhz).collect();
    clocks.sort_unstable();
    let mut watts: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.power_mw.map(|mw| mw as f64 / 1000.0))
        .collect();
    watts.sort_by(f64::total_cmp);
    let reasons: Vec<u64> = samples.iter().filter_map(|s| s.reasons).collect();
    let share = |held: fn(u64) -> bool| {
        (!reasons.is_empty())
            .then(|| reasons.iter().filter(|&&r| held(r)).count() as f64 / reasons.len() as f64)
    };
    Some(ClockSummary {
        samples: samples.len(),
        sm_mhz_p10: quantile(&clocks, 0.1),
        sm_mhz_median: quantile(&clocks, 0.5),
        sm_mhz_p90: quantile(&clocks, 0.9),
        power_w_median: (!watts.is_empty()).then(|| median(&watts)),
        power_limited_share: share(power_limited),
        thermal_limited_share: share(thermal_limited),
    })
}

impl ClockSummary {
    /// The `clocks` object of a `vitrt-bench/1` model row (benchmarks/SCHEMA.md).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "samples": self.samples,
            "interval_ms": SAMPLE_INTERVAL.as_millis() as u64,
            "sm_mhz_p10": self.sm_mhz_p10,
            "sm_mhz_median": self.sm_mhz_median,
            "sm_mhz_p90": self.sm_mhz_p90,
            "power_w_median": self.power_w_median,
            "power_limited_share": self.power_limited_share,
            "thermal_limited_share": self.thermal_limited_share,
        })
    }
}

/// NVML, opened on one device.
pub struct ClockSource {
    nvml: Arc<Nvml>,
    pci_bus_id: String,
}

impl ClockSource {
    /// Loads NVML and finds the device at `pci_bus_id` (as CUDA writes it), and reads its SM
    /// clock once; the error says which step failed.
    pub fn open(pci_bus_id: &str) -> Result<ClockSource, String> {
        // The driver installs the versioned name; the bare one is a development link that
        // containers often lack.
        let nvml = Nvml::builder()
            .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
            .init()
            .or_else(|_| Nvml::init())
            .map_err(|e| format!("NVML could not start: {e}"))?;
        nvml.device_by_pci_bus_id(pci_bus_id)
            .map_err(|e| format!("NVML does not know the device at {pci_bus_id}: {e}"))?
            .clock_info(Clock::SM)
            .map_err(|e| format!("NVML cannot read the SM clock: {e}"))?;
        Ok(ClockSource {
            nvml: Arc::new(nvml),
            pci_bus_id: pci_bus_id.to_string(),
        })
    }

    /// The source a benchmark reads: NVML on its device (`pci_bus_id`; none on the CPU)
    /// unless `off` (`--no-clocks`). Where NVML cannot be read, says why once on stderr.
    pub fn for_run(pci_bus_id: Option<String>, off: bool) -> Option<ClockSource> {
        pci_bus_id.filter(|_| !off).and_then(|id| {
            ClockSource::open(&id)
                .map_err(|e| eprintln!("clocks: not sampled ({e})"))
                .ok()
        })
    }

    /// Starts reading the device every [`SAMPLE_INTERVAL`] until [`Sampler::finish`].
    fn start(&self) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (nvml, id, flag) = (self.nvml.clone(), self.pci_bus_id.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("vitrt-clocks".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let Ok(device) = nvml.device_by_pci_bus_id(id) else {
                    return samples;
                };
                while !flag.load(Ordering::Relaxed) {
                    // A failed clock read drops the sample; power and reasons may be missing
                    // alone (some boards do not report them).
                    if let Ok(sm_mhz) = device.clock_info(Clock::SM) {
                        samples.push(ClockSample {
                            sm_mhz,
                            power_mw: device.power_usage().ok(),
                            reasons: device.current_throttle_reasons().ok().map(|r| r.bits()),
                        });
                    }
                    std::thread::sleep(SAMPLE_INTERVAL);
                }
                samples
            })
            .ok();
        Sampler { stop, thread }
    }
}

/// Runs `work` while `source` (where there is one) reads the device: its result, and what was
/// read (`None` without a source).
pub fn sampled<T>(
    source: Option<&ClockSource>,
    work: impl FnOnce() -> T,
) -> (T, Option<ClockSummary>) {
    let sampler = source.map(ClockSource::start);
    let result = work();
    (result, sampler.and_then(Sampler::finish))
}

/// A share as a whole percentage, "-" where it is unknown.
pub fn percent(share: Option<f64>) -> String {
    share.map_or("-".into(), |s| format!("{:.0}%", 100.0 * s))
}

/// A running sampler (see [`sampled`]).
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<ClockSample>>>,
}

impl Sampler {
    /// Stops it and summarises what it read (`None`: nothing, or the thread did not start).
    fn finish(self) -> Option<ClockSummary> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread?.join().ok()?;
        summarize(&samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sm_mhz: u32, watts: Option<u32>, reasons: Option<ThrottleReasons>) -> ClockSample {
        ClockSample {
            sm_mhz,
            power_mw: watts.map(|w| w * 1000),
            reasons: reasons.map(|r| r.bits()),
        }
    }

    #[test]
    fn a_run_is_summarised_by_its_clock_quantiles_power_and_limits() {
        let cap = Some(ThrottleReasons::SW_POWER_CAP);
        let idle = Some(ThrottleReasons::GPU_IDLE);
        let samples: Vec<ClockSample> = (0..10)
            .map(|i| match i {
                0..=5 => sample(1400 + i * 10, Some(700), cap),
                6 | 7 => sample(1980, Some(300), idle),
                _ => sample(1800, None, Some(ThrottleReasons::SW_THERMAL_SLOWDOWN)),
            })
            .collect();
        let s = summarize(&samples).expect("ten samples");
        assert_eq!(s.samples, 10);
        // Sorted: 1400 1410 1420 1430 1440 1450 1800 1800 1980 1980.
        assert_eq!(
            (s.sm_mhz_p10, s.sm_mhz_median, s.sm_mhz_p90),
            (1410, 1450, 1980)
        );
        // Power of the eight samples that have it: six at 700 W, two at 300.
        assert_eq!(s.power_w_median, Some(700.0));
        assert_eq!(s.power_limited_share, Some(0.6));
        assert_eq!(s.thermal_limited_share, Some(0.2));
        let json = s.to_json();
        assert_eq!(json["sm_mhz_median"], 1450);
        assert_eq!(json["interval_ms"], 10);
    }

    #[test]
    fn missing_readings_leave_their_figures_empty_not_zero() {
        assert_eq!(summarize(&[]), None);
        let s = summarize(&[sample(1500, None, None), sample(1700, None, None)]).unwrap();
        assert_eq!(s.sm_mhz_median, 1700);
        assert_eq!(s.power_w_median, None);
        assert_eq!(s.power_limited_share, None);
        assert!(s.to_json()["power_w_median"].is_null());
        // The hardware power brake counts as power, hardware slowdown as temperature.
        let s = summarize(&[
            sample(
                1000,
                Some(700),
                Some(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
            ),
            sample(1000, Some(700), Some(ThrottleReasons::HW_SLOWDOWN)),
        ])
        .unwrap();
        assert_eq!(s.power_limited_share, Some(0.5));
        assert_eq!(s.thermal_limited_share, Some(0.5));
    }

    #[test]
    fn an_unknown_device_is_refused_with_the_reason() {
        // On a machine without the driver NVML does not load; with one, no GPU sits at this
        // address. Either way `open` says why instead of sampling nothing.
        let e = ClockSource::open("ffff:ff:1f.7").err().expect("refused");
        assert!(e.starts_with("NVML"), "{e}");
    }
}
