//! Where start-up time goes, on stderr when `VITRT_STARTUP_TIMES=1`: the time between marks
//! set along the way of a command over image files (model files read, backend opened, the
//! first batch decoded, plan and weights, the first pass queued, its results back), the
//! kernels compiled by NVRTC or loaded from the disk cache and the host time each took, and
//! the teardown after the command's work. For cold-start measurements
//! (scripts/bench/cold_start.py); off, every call here returns at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use vitrt_kernels::cuda::KernelLoads;

/// The environment variable that turns the breakdown on ("1").
pub const VARIABLE: &str = "VITRT_STARTUP_TIMES";

struct Clock {
    start: Instant,
    last: Instant,
    phases: Vec<(&'static str, Duration)>,
    kernels: Option<KernelLoads>,
}

static CLOCK: Mutex<Option<Clock>> = Mutex::new(None);

fn clock() -> std::sync::MutexGuard<'static, Option<Clock>> {
    CLOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts the clock if the breakdown was asked for: call first thing in `main`.
pub fn start() {
    if std::env::var_os(VARIABLE).is_some_and(|v| v == "1") {
        let now = Instant::now();
        *clock() = Some(Clock {
            start: now,
            last: now,
            phases: Vec::new(),
            kernels: None,
        });
    }
}

/// Ends the phase `what` now (the time since the previous mark). A phase marked again is
/// added to (only the first batch's marks are set, so that happens only for teardown-like
/// phases of commands that repeat a step).
pub fn mark(what: &'static str) {
    if let Some(clock) = clock().as_mut() {
        let now = Instant::now();
        let took = now - clock.last;
        clock.last = now;
        match clock.phases.iter_mut().find(|(name, _)| *name == what) {
            Some((_, total)) => *total += took,
            None => clock.phases.push((what, took)),
        }
    }
}

/// Keeps the backend's kernel loads for the report (`None`: a backend that compiles none).
pub fn note_kernel_loads(loads: Option<KernelLoads>) {
    if let Some(clock) = clock().as_mut() {
        clock.kernels = loads;
    }
}

/// Prints the breakdown on stderr, if it was asked for.
pub fn report() {
    let Some(clock) = clock().take() else {
        return;
    };
    let total = clock.start.elapsed();
    eprintln!(
        "vitrt: start-up times ({VARIABLE}=1), from main to exit {:.3} s:",
        total.as_secs_f64()
    );
    for (what, took) in &clock.phases {
        eprintln!("  {:>9.3} s  {what}", took.as_secs_f64());
    }
    if let Some(k) = clock.kernels {
        eprintln!(
            "  kernels: {} compiled by NVRTC in {:.3} s, {} loaded from the disk cache in {:.3} s",
            k.compiled,
            k.compile_time.as_secs_f64(),
            k.cached,
            k.cache_time.as_secs_f64()
        );
    }
}
