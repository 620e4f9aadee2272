//! `GET /metrics` in Prometheus' text format (version 0.0.4): requests by route and status,
//! request latency and batch size as histograms, the queue's depth, images run (a counter, and
//! a gauge of images/s over the last ten seconds), and the device memory the backend holds.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bounds of the latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// The window of the images/s gauge.
const RATE_WINDOW: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Histogram {
    /// Per bucket (same order as the bounds), observations at or below its bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (count, bound) in self.counts.iter_mut().zip(bounds) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (count, bound) in self.counts.iter().zip(bounds) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

#[derive(Default)]
struct State {
    /// (route, status) to count.
    requests: BTreeMap<(&'static str, u16), u64>,
    latency: BTreeMap<&'static str, Histogram>,
    batch_sizes: Histogram,
    images: u64,
    /// Images the device decoded (JPEGs), and images decoded again on the host because the
    /// device marked their batch.
    decoded_on_device: u64,
    redone_on_host: u64,
    /// Images run per batch, with when, for the images/s gauge.
    recent: VecDeque<(Instant, usize)>,
    /// What the backend held after the last batch (`None`: not yet known).
    device_bytes: Option<usize>,
    /// Requests a route began to handle.
    started: u64,
}

/// The server's counters, shared by the routes and the batching thread.
pub struct Metrics {
    state: Mutex<State>,
    /// Bounds of the batch-size histogram: powers of two up to the largest batch.
    batch_bounds: Vec<f64>,
}

impl Metrics {
    pub fn new(max_batch_size: usize) -> Metrics {
        let mut batch_bounds = Vec::new();
        let mut bound = 1;
        while bound < max_batch_size {
            batch_bounds.push(bound as f64);
            bound *= 2;
        }
        batch_bounds.push(max_batch_size as f64);
        Metrics {
            state: Mutex::new(State::default()),
            batch_bounds,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request began to be handled.
    pub fn started(&self) {
        self.lock().started += 1;
    }

    /// (requests begun, requests answered) so far.
    pub fn begun_and_answered(&self) -> (u64, u64) {
        let state = self.lock();
        (state.started, state.requests.values().sum())
    }

    /// A request to `route` answered with `status` after `took`.
    pub fn request(&self, route: &'static str, status: u16, took: Duration) {
        let mut state = self.lock();
        *state.requests.entry((route, status)).or_default() += 1;
        state
            .latency
            .entry(route)
            .or_default()
            .observe(&LATENCY_BUCKETS, took.as_secs_f64());
    }

    /// A batch of `size` images submitted.
    pub fn batch(&self, size: usize) {
        let bounds = &self.batch_bounds;
        self.lock().batch_sizes.observe(bounds, size as f64);
    }

    /// A batch submitted whose device decodes `count` of its images.
    pub fn decoded_on_device(&self, count: usize) {
        self.lock().decoded_on_device += count as u64;
    }

    /// `count` images decoded again on the host (their batch marked by the device).
    pub fn redone_on_host(&self, count: usize) {
        self.lock().redone_on_host += count as u64;
    }

    /// `count` images' results back.
    pub fn images_done(&self, count: usize) {
        let mut state = self.lock();
        state.images += count as u64;
        let now = Instant::now();
        state.recent.push_back((now, count));
        while state
            .recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            state.recent.pop_front();
        }
    }

    /// The memory the backend holds now.
    pub fn device_bytes(&self, bytes: usize) {
        self.lock().device_bytes = Some(bytes);
    }

    /// The text exposition, with `queue_depth` images waiting.
    pub fn render(&self, queue_depth: usize) -> String {
        let state = self.lock();
        let device_bytes = state.device_bytes;
        let mut out = String::new();
        out.push_str("# HELP vitrt_requests_total Requests answered, by route and status.\n");
        out.push_str("# TYPE vitrt_requests_total counter\n");
        for ((route, status), count) in &state.requests {
            let _ = writeln!(
                out,
                "vitrt_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}"
            );
        }
        out.push_str(
            "# HELP vitrt_request_duration_seconds Time from a request's arrival to its answer.\n",
        );
        out.push_str("# TYPE vitrt_request_duration_seconds histogram\n");
        for (route, histogram) in &state.latency {
            histogram.write(
                &mut out,
                "vitrt_request_duration_seconds",
                &format!("route=\"{route}\""),
                &LATENCY_BUCKETS,
            );
        }
        out.push_str("# HELP vitrt_batch_size Images per forward pass.\n");
        out.push_str("# TYPE vitrt_batch_size histogram\n");
        let batches = Histogram {
            counts: vec![0; self.batch_bounds.len()],
            ..Histogram::default()
        };
        let batch_sizes = if state.batch_sizes.counts.is_empty() {
            &batches
        } else {
            &state.batch_sizes
        };
        batch_sizes.write(&mut out, "vitrt_batch_size", "", &self.batch_bounds);
        out.push_str("# HELP vitrt_queue_depth Images admitted and not yet in a batch.\n");
        out.push_str("# TYPE vitrt_queue_depth gauge\n");
        let _ = writeln!(out, "vitrt_queue_depth {queue_depth}");
        out.push_str("# HELP vitrt_images_total Images run through the model.\n");
        out.push_str("# TYPE vitrt_images_total counter\n");
        let _ = writeln!(out, "vitrt_images_total {}", state.images);
        out.push_str(
            "# HELP vitrt_images_decoded_on_device_total Images whose JPEG the device decoded.\n",
        );
        out.push_str("# TYPE vitrt_images_decoded_on_device_total counter\n");
        let _ = writeln!(
            out,
            "vitrt_images_decoded_on_device_total {}",
            state.decoded_on_device
        );
        out.push_str(
            "# HELP vitrt_images_redone_on_host_total Images decoded again on the host because \
             the device marked an image of their batch (damaged data).\n",
        );
        out.push_str("# TYPE vitrt_images_redone_on_host_total counter\n");
        let _ = writeln!(
            out,
            "vitrt_images_redone_on_host_total {}",
            state.redone_on_host
        );
        let now = Instant::now();
        let recent: usize = state
            .recent
            .iter()
            .filter(|(at, _)| now.duration_since(*at) <= RATE_WINDOW)
            .map(|(_, n)| n)
            .sum();
        out.push_str(
            "# HELP vitrt_images_per_second Images run per second over the last 10 seconds.\n",
        );
        out.push_str("# TYPE vitrt_images_per_second gauge\n");
        let _ = writeln!(
            out,
            "vitrt_images_per_second {}",
            recent as f64 / RATE_WINDOW.as_secs_f64()
        );
        if let Some(bytes) = device_bytes {
            out.push_str(
                "# HELP vitrt_device_memory_bytes Memory the backend holds (parameters, arena, \
                 staging, workspace).\n",
            );
            out.push_str("# TYPE vitrt_device_memory_bytes gauge\n");
            let _ = writeln!(out, "vitrt_device_memory_bytes {bytes}");
        }
        out
    }
}
