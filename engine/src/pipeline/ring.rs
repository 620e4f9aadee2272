//! The staging ring: worker threads decode images straight into their places in `depth`
//! staging slots of `batch_size` images; the calling thread consumes whole batches in order.
//! See the module note in `mod.rs` for the layout and the bounds it gives.

use super::InputList;
use anyhow::Result;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vitrt_model::preprocess::{ArenaReserve, DeviceImage, HostDecoded, Loaded, StageTimes};
use vitrt_runtime::HostStaging;

/// Loads one image into its place: the preprocessing loader in the CLI, mocks in tests. Each
/// worker owns one, so it may keep buffers from image to image.
pub trait ImageLoad: Send {
    /// Writes exactly `out.len()` bytes of input `index`'s preprocessed pixels into `out`, or
    /// says why it cannot (the message names the input). `path` is the input's path: the
    /// file, or the dataset shard holding the sample.
    fn load(&mut self, index: usize, path: &Path, out: &mut [u8]) -> Result<StageTimes, String>;

    /// As [`ImageLoad::load`], or prepares the image for device decoding in `arena` (then
    /// `out` is left as it was).
    fn load_for_device(
        &mut self,
        index: usize,
        path: &Path,
        out: &mut [u8],
        arena: &dyn ArenaReserve,
    ) -> Result<(StageTimes, Loaded), String> {
        let _ = arena;
        Ok((
            self.load(index, path, out)?,
            Loaded::Host(HostDecoded::NotJpeg),
        ))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Images per batch (the last batch may hold fewer).
    pub batch_size: usize,
    /// Staging slots, each holding one batch.
    pub depth: usize,
    /// Decoding threads.
    pub workers: usize,
    /// Bytes of one preprocessed image.
    pub image_bytes: usize,
    /// Load no image after the first that fails, and end with the batch holding it.
    pub fail_fast: bool,
    /// Bytes of each slot's arena for images decoded on the device (0: all on the host).
    pub arena_bytes: usize,
    /// Batches the consumer may still be reading when it returns: once `batch` returns for
    /// batch b, the slot of batch b - release_lag goes back to the workers (0: batch b's own).
    /// Several devices copy their batches at once (`crate::devices`); `depth` must exceed it
    /// by 2, so that workers always have slots to fill.
    pub release_lag: usize,
}

/// One batch handed to the consumer: images `first .. first + count` in input order.
pub struct Batch<'a> {
    pub first: usize,
    pub count: usize,
    /// `count` images of `image_bytes`, in order; a failed image's bytes are meaningless.
    pub pixels: &'a [u8],
    /// The images of this batch that failed, by input index, in order, with why.
    pub failures: Vec<(usize, String)>,
    /// The images of this batch left to device decoding, by input index, in order: their
    /// bytes in `pixels` are meaningless until the device writes them.
    pub device: Vec<(usize, DeviceImage)>,
    /// The arena their data is in, up to the last byte used.
    pub arena: &'a [u8],
}

/// What takes the batches, on the calling thread.
pub trait Consumer {
    /// Takes one batch. Its slot is handed back to the workers when this returns (or
    /// `release_lag` batches later), so the pixels must have been copied (or used) by then.
    /// An error hands no slot back: the run ends with the staging as the consumer left it.
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow>;

    /// Called after each batch's slot has been handed back, before waiting for the next batch:
    /// the place for work that need not hold a slot (waiting for the previous batch's results).
    fn after_release(&mut self) -> Result<Flow> {
        Ok(Flow::Continue)
    }
}

impl<F: FnMut(Batch<'_>) -> Result<Flow>> Consumer for F {
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow> {
        self(batch)
    }
}

/// What the consumer wants after a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Totals of one run.
#[derive(Clone, Debug, Default)]
pub struct PipelineStats {
    /// Images handed to the consumer (loaded or failed).
    pub images: usize,
    pub failed: usize,
    pub batches: usize,
    /// Summed over images.
    pub stages: StageTimes,
    /// Summed over workers: time spent loading images.
    pub worker_busy: Duration,
    /// Time the consumer waited for a batch to be complete.
    pub consumer_waiting: Duration,
    /// Time the consumer spent in `batch` (holding a slot).
    pub consumer_busy: Duration,
    /// Time the consumer spent in `after_release`.
    pub consumer_after_release: Duration,
    pub wall: Duration,
    /// The most images decoded (or being decoded) and not yet released by the consumer.
    pub max_in_flight: usize,
    /// Images prepared for device decoding.
    pub device_decoded: usize,
    /// Of those, the images whose entropy decoding is left to the device too.
    pub device_entropy_decoded: usize,
    /// Images decoded on the host, by why (when device decoding was on).
    pub host_decoded: Vec<(HostDecoded, usize)>,
}

/// A slot's memory, written by workers at disjoint places and read by the consumer once the
/// slot's batch is complete; the ring's state, under its mutex, orders the two.
#[derive(Clone, Copy)]
struct SlotPtr(*mut u8);
// SAFETY: see `Shared`: every access goes through the protocol that makes writes disjoint and
// orders them before the consumer's reads.
unsafe impl Send for SlotPtr {}
unsafe impl Sync for SlotPtr {}

/// An arena as the decoding threads share it: a bump allocator over `capacity` bytes from
/// `base`; regions reserved are disjoint, and its owner resets `used` only when no region is
/// in use (the ring: when the consumer releases the slot; `memory.rs`: after the batch).
pub(crate) struct BumpArena<'a> {
    base: SlotPtr,
    capacity: usize,
    used: &'a AtomicUsize,
}

impl<'a> BumpArena<'a> {
    /// An arena over `bytes`, `used` of them already reserved.
    pub(crate) fn new(bytes: &'a mut [u8], used: &'a AtomicUsize) -> BumpArena<'a> {
        BumpArena {
            base: SlotPtr(bytes.as_mut_ptr()),
            capacity: bytes.len(),
            used,
        }
    }
}

impl ArenaReserve for BumpArena<'_> {
    #[allow(clippy::mut_from_ref)] // each reserved region is handed out once
    fn reserve(&self, bytes: usize) -> Option<(usize, &mut [u8])> {
        let bytes = bytes.next_multiple_of(16);
        let mut at = self.used.load(Ordering::Relaxed);
        loop {
            let end = at.checked_add(bytes).filter(|&end| end <= self.capacity)?;
            match self
                .used
                .compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // SAFETY: [at, end) lies inside the arena (checked above) and no other
                // reservation overlaps it (the compare-exchange gave it to this one).
                Ok(_) => {
                    return Some((at, unsafe {
                        std::slice::from_raw_parts_mut(self.base.0.add(at), bytes)
                    }))
                }
                Err(now) => at = now,
            }
        }
    }
}

struct State {
    /// Batches the consumer has released: batch b may use its slot once b < released + depth.
    released: usize,
    /// Per slot: images of the slot's current batch finished (loaded, failed or skipped).
    done: Vec<usize>,
    /// Per slot: images of the slot's current batch a worker started loading.
    started: Vec<usize>,
    failures: Vec<Vec<(usize, String)>>,
    /// Per slot: the images its batch left to device decoding.
    device: Vec<Vec<(usize, DeviceImage)>>,
    device_decoded: usize,
    device_entropy_decoded: usize,
    host_decoded: Vec<(HostDecoded, usize)>,
    /// With fail_fast, the first failing index: no later image is loaded.
    stop_after: Option<usize>,
    /// The consumer has stopped: workers exit.
    cancelled: bool,
    in_flight: usize,
    max_in_flight: usize,
    stages: StageTimes,
    worker_busy: Duration,
}

/// The ring's protocol. Image i belongs to batch b = i / batch_size, slot b % depth, byte range
/// (i % batch_size) * image_bytes of that slot. A worker writes that range only while batch b
/// owns the slot (b < released + depth, checked under the lock) and counts the image done under
/// the lock afterwards. The consumer reads a slot only once every image of its batch is done,
/// and releases it (under the lock) before any worker of batch b + depth may write it.
struct Shared<'a> {
    inputs: &'a InputList,
    config: PipelineConfig,
    slots: Vec<SlotPtr>,
    /// Per slot: its arena and the bytes of it reserved so far (reset when it is released).
    arenas: Vec<(SlotPtr, AtomicUsize)>,
    next: AtomicUsize,
    state: Mutex<State>,
    slot_free: Condvar,
    batch_done: Condvar,
}

impl Shared<'_> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn batch_len(&self, batch: usize) -> usize {
        let first = batch * self.config.batch_size;
        self.config.batch_size.min(self.inputs.len() - first)
    }

    fn work(&self, loader: &mut dyn ImageLoad) {
        let PipelineConfig {
            batch_size,
            depth,
            image_bytes,
            fail_fast,
            ..
        } = self.config;
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.inputs.len() {
                return;
            }
            let batch = index / batch_size;
            let slot = batch % depth;
            // Wait for the batch's slot, unless the run stops before this image.
            let skip = {
                let mut state = self.lock();
                loop {
                    if state.cancelled {
                        return;
                    }
                    if let Some(stop) = state.stop_after.filter(|&stop| index > stop) {
                        // The failing image's batch still waits for all its images.
                        if stop / batch_size == batch {
                            state.done[slot] += 1;
                            self.batch_done.notify_all();
                        }
                        break true;
                    }
                    if batch < state.released + depth {
                        state.started[slot] += 1;
                        state.in_flight += 1;
                        state.max_in_flight = state.max_in_flight.max(state.in_flight);
                        break false;
                    }
                    state = self
                        .slot_free
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            };
            if skip {
                continue;
            }
            // SAFETY: the slot is batch's (checked above under the lock) and this range is
            // index's alone; the slot holds batch_size * image_bytes bytes (checked in `run`).
            let out = unsafe {
                std::slice::from_raw_parts_mut(
                    self.slots[slot].0.add((index % batch_size) * image_bytes),
                    image_bytes,
                )
            };
            let started = Instant::now();
            let path = &self.inputs.paths[index];
            let arena = self
                .arenas
                .get(slot)
                .filter(|_| self.config.arena_bytes > 0);
            let loaded = catch_unwind(AssertUnwindSafe(|| match arena {
                Some((base, used)) => {
                    let arena = BumpArena {
                        base: *base,
                        capacity: self.config.arena_bytes,
                        used,
                    };
                    loader
                        .load_for_device(index, path, out, &arena)
                        .map(|(times, loaded)| (times, Some(loaded)))
                }
                None => loader.load(index, path, out).map(|times| (times, None)),
            }))
            .unwrap_or_else(|_| Err(format!("{}: the decoder panicked", self.inputs.name(index))));
            let busy = started.elapsed();
            let mut state = self.lock();
            state.worker_busy += busy;
            match loaded {
                Ok((times, outcome)) => {
                    state.stages.read += times.read;
                    state.stages.decode += times.decode;
                    state.stages.resize += times.resize;
                    match outcome {
                        Some(Loaded::Device(image)) => {
                            state.device_decoded += 1;
                            state.device_entropy_decoded += usize::from(image.jpeg.scan.is_some());
                            state.device[slot].push((index, *image));
                        }
                        Some(Loaded::Host(why)) => {
                            match state.host_decoded.iter_mut().find(|(w, _)| *w == why) {
                                Some((_, count)) => *count += 1,
                                None => state.host_decoded.push((why, 1)),
                            }
                        }
                        None => {}
                    }
                }
                Err(reason) => {
                    state.failures[slot].push((index, reason));
                    if fail_fast && state.stop_after.is_none_or(|stop| index < stop) {
                        state.stop_after = Some(index);
                        self.slot_free.notify_all();
                    }
                }
            }
            state.done[slot] += 1;
            if state.done[slot] == self.batch_len(batch) {
                self.batch_done.notify_all();
            }
        }
    }
}

/// Loads every input with `workers` threads (each with a loader from `make_loader`) into the
/// `staging` slots (at least `depth`, each of at least `batch_size * image_bytes` bytes) and
/// hands each batch, in order, to `consumer` on the calling thread. The consumer may keep
/// nothing of a batch's pixels past its `batch` call: the slot is refilled after it returns.
pub fn run<'l>(
    inputs: &InputList,
    config: PipelineConfig,
    staging: &mut [HostStaging],
    arenas: &mut [HostStaging],
    make_loader: &(dyn Fn() -> Box<dyn ImageLoad + 'l> + Sync),
    consumer: &mut dyn Consumer,
) -> Result<PipelineStats> {
    let PipelineConfig {
        batch_size,
        depth,
        workers,
        image_bytes,
        ..
    } = config;
    anyhow::ensure!(
        batch_size > 0 && depth > 0 && workers > 0,
        "the pipeline needs a batch size, a depth and workers of at least 1"
    );
    anyhow::ensure!(
        config.release_lag == 0 || depth >= config.release_lag + 2,
        "the pipeline needs a depth of at least {} to release its slots {} batches late",
        config.release_lag + 2,
        config.release_lag
    );
    anyhow::ensure!(
        staging.len() >= depth
            && staging
                .iter()
                .all(|s| s.len() >= batch_size.saturating_mul(image_bytes)),
        "the pipeline needs {depth} staging slots of {batch_size} x {image_bytes} bytes"
    );
    anyhow::ensure!(
        config.arena_bytes == 0
            || (arenas.len() >= depth && arenas.iter().all(|a| a.len() >= config.arena_bytes)),
        "the pipeline needs {depth} arenas of {} bytes",
        config.arena_bytes
    );
    let start = Instant::now();
    let shared = Shared {
        inputs,
        config,
        slots: staging
            .iter_mut()
            .take(depth)
            .map(|s| SlotPtr(s.as_mut_slice().as_mut_ptr()))
            .collect(),
        arenas: arenas
            .iter_mut()
            .take(depth)
            .map(|a| (SlotPtr(a.as_mut_slice().as_mut_ptr()), AtomicUsize::new(0)))
            .collect(),
        next: AtomicUsize::new(0),
        state: Mutex::new(State {
            released: 0,
            done: vec![0; depth],
            started: vec![0; depth],
            failures: vec![Vec::new(); depth],
            device: (0..depth).map(|_| Vec::new()).collect(),
            device_decoded: 0,
            device_entropy_decoded: 0,
            host_decoded: Vec::new(),
            stop_after: None,
            cancelled: false,
            in_flight: 0,
            max_in_flight: 0,
            stages: StageTimes::default(),
            worker_busy: Duration::ZERO,
        }),
        slot_free: Condvar::new(),
        batch_done: Condvar::new(),
    };
    let mut stats = PipelineStats::default();
    let batches = inputs.len().div_ceil(batch_size);
    let outcome = std::thread::scope(|scope| -> Result<()> {
        for _ in 0..workers.min(inputs.len().max(1)) {
            let shared = &shared;
            scope.spawn(move || {
                let mut loader = make_loader();
                shared.work(loader.as_mut());
            });
        }
        // Whatever happens below, the workers must hear of it and exit.
        let finish = |shared: &Shared<'_>| {
            shared.lock().cancelled = true;
            shared.slot_free.notify_all();
        };
        for number in 0..batches {
            let slot = number % depth;
            let first = number * batch_size;
            let len = shared.batch_len(number);
            let waiting = Instant::now();
            let (failures, mut device, stop) = {
                let mut state = shared.lock();
                while state.done[slot] < len {
                    state = shared
                        .batch_done
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                let mut failures = std::mem::take(&mut state.failures[slot]);
                failures.sort_by_key(|(index, _)| *index);
                let mut device = std::mem::take(&mut state.device[slot]);
                device.sort_by_key(|(index, _)| *index);
                let stop = state.stop_after.filter(|&s| s < first + len);
                (failures, device, stop)
            };
            stats.consumer_waiting += waiting.elapsed();
            let count = stop.map_or(len, |s| s - first + 1);
            let failures: Vec<(usize, String)> = failures
                .into_iter()
                .filter(|(index, _)| *index < first + count)
                .collect();
            stats.images += count;
            stats.failed += failures.len();
            stats.batches += 1;
            // SAFETY: every image of this batch is done (above, under the lock) and no worker
            // writes the slot again before it is released below.
            let pixels =
                unsafe { std::slice::from_raw_parts(shared.slots[slot].0, count * image_bytes) };
            device.retain(|(index, _)| *index < first + count);
            let arena = match shared.arenas.get(slot) {
                // SAFETY: as the pixels: the workers that reserved these bytes are done.
                Some((base, used)) if config.arena_bytes > 0 => unsafe {
                    std::slice::from_raw_parts(base.0, used.load(Ordering::Relaxed))
                },
                _ => &[],
            };
            let busy = Instant::now();
            let flow = consumer.batch(Batch {
                first,
                count,
                pixels,
                failures,
                device,
                arena,
            });
            stats.consumer_busy += busy.elapsed();
            let flow = match flow {
                Ok(flow) => flow,
                Err(error) => {
                    // The consumer did not say it is done with its slots (a device may still
                    // be reading one): nothing is released, and the workers stop.
                    finish(&shared);
                    return Err(error);
                }
            };
            {
                let mut state = shared.lock();
                // The slot's counters are reset now (no worker touches it before it is
                // released); its bytes go back to the workers `release_lag` batches later.
                state.released = (number + 1).saturating_sub(config.release_lag);
                state.done[slot] = 0;
                if let Some((_, used)) = shared.arenas.get(slot) {
                    used.store(0, Ordering::Relaxed);
                }
                state.in_flight -= std::mem::take(&mut state.started[slot]);
                shared.slot_free.notify_all();
            }
            let after = Instant::now();
            let next = consumer.after_release();
            stats.consumer_after_release += after.elapsed();
            let flow = next.map(|next| if flow == Flow::Stop { flow } else { next });
            match flow {
                Ok(Flow::Continue) if stop.is_none() => {}
                Ok(_) => break,
                Err(error) => {
                    finish(&shared);
                    return Err(error);
                }
            }
        }
        finish(&shared);
        Ok(())
    });
    outcome?;
    let state = shared.lock();
    stats.stages = state.stages;
    stats.worker_busy = state.worker_busy;
    stats.max_in_flight = state.max_in_flight;
    stats.device_decoded = state.device_decoded;
    stats.device_entropy_decoded = state.device_entropy_decoded;
    stats.host_decoded = state.host_decoded.clone();
    stats.wall = start.elapsed();
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Fills an image with its index (from the path "img-<i>"), after a delay that varies
    /// with the index so workers finish out of order; paths with "bad" fail, "boom" panics.
    struct Mock;

    impl ImageLoad for Mock {
        fn load(&mut self, _: usize, path: &Path, out: &mut [u8]) -> Result<StageTimes, String> {
            let name = path.to_string_lossy();
            let index: usize = name.rsplit('-').next().unwrap().parse().unwrap();
            std::thread::sleep(Duration::from_micros((index * 7919 % 13) as u64 * 50));
            if name.contains("boom") {
                panic!("mock decoder panic");
            }
            if name.contains("bad") {
                return Err(format!("{name}: bad file"));
            }
            out.fill((index % 251) as u8);
            Ok(StageTimes {
                read: Duration::from_micros(1),
                ..StageTimes::default()
            })
        }
    }

    fn paths(n: usize, bad: &[usize]) -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let tag = if bad.contains(&i) { "bad" } else { "img" };
                PathBuf::from(format!("{tag}-{i}"))
            })
            .collect()
    }

    fn listed(paths: &[PathBuf]) -> InputList {
        InputList {
            paths: paths.to_vec(),
            ..InputList::default()
        }
    }

    /// Per image consumed: its index, and its first byte or why it failed.
    type Seen = Vec<(usize, Result<u8, String>)>;

    /// Runs the ring and returns, per image in the order consumed: Ok(first byte) or the
    /// failure, plus the stats.
    fn consume_all(paths: &[PathBuf], config: PipelineConfig) -> (Seen, PipelineStats) {
        let mut staging: Vec<HostStaging> = (0..config.depth)
            .map(|_| HostStaging::heap(config.batch_size * config.image_bytes))
            .collect();
        let mut seen = Vec::new();
        let stats = run(
            &listed(paths),
            config,
            &mut staging,
            &mut [],
            &|| Box::new(Mock),
            &mut |batch: Batch<'_>| {
                for k in 0..batch.count {
                    let index = batch.first + k;
                    let image = &batch.pixels[k * config.image_bytes..][..config.image_bytes];
                    match batch.failures.iter().find(|(i, _)| *i == index) {
                        Some((_, why)) => seen.push((index, Err(why.clone()))),
                        None => {
                            assert!(image.iter().all(|&b| b == image[0]), "torn image {index}");
                            seen.push((index, Ok(image[0])));
                        }
                    }
                }
                Ok(Flow::Continue)
            },
        )
        .unwrap();
        (seen, stats)
    }

    fn config(batch_size: usize, depth: usize, workers: usize) -> PipelineConfig {
        PipelineConfig {
            release_lag: 0,
            batch_size,
            depth,
            workers,
            image_bytes: 64,
            fail_fast: false,
            arena_bytes: 0,
        }
    }

    #[test]
    fn batches_come_in_input_order_with_many_workers() {
        for (n, batch, depth, workers) in
            [(100, 7, 2, 8), (64, 16, 3, 16), (5, 8, 2, 4), (1, 1, 1, 1)]
        {
            let (seen, stats) = consume_all(&paths(n, &[]), config(batch, depth, workers));
            let want: Vec<(usize, Result<u8, String>)> =
                (0..n).map(|i| (i, Ok((i % 251) as u8))).collect();
            assert_eq!(
                seen, want,
                "n={n} batch={batch} depth={depth} workers={workers}"
            );
            assert_eq!(stats.images, n);
            assert_eq!(stats.batches, n.div_ceil(batch));
            assert_eq!(stats.stages.read, Duration::from_micros(n as u64));
        }
    }

    #[test]
    fn images_in_flight_never_exceed_the_staging_ring() {
        for (batch, depth, workers) in [(4, 2, 16), (8, 3, 32), (1, 1, 8)] {
            let (seen, stats) = consume_all(&paths(200, &[]), config(batch, depth, workers));
            assert_eq!(seen.len(), 200);
            assert!(
                stats.max_in_flight <= batch * depth,
                "{} images in flight for {depth} slots of {batch}",
                stats.max_in_flight
            );
            assert!(stats.max_in_flight >= batch.min(workers));
        }
    }

    #[test]
    fn bad_files_are_reported_in_place_and_the_rest_go_on() {
        let bad = [0, 5, 6, 39];
        let (seen, stats) = consume_all(&paths(40, &bad), config(6, 2, 5));
        assert_eq!(seen.len(), 40);
        for (index, result) in &seen {
            match result {
                Err(why) => {
                    assert!(bad.contains(index));
                    assert_eq!(why, &format!("bad-{index}: bad file"));
                }
                Ok(byte) => assert_eq!(*byte, (*index % 251) as u8),
            }
        }
        assert_eq!(stats.failed, bad.len());
    }

    #[test]
    fn a_panicking_decoder_is_one_failed_image() {
        let mut list = paths(10, &[]);
        list[3] = PathBuf::from("boom-3");
        let (seen, stats) = consume_all(&list, config(4, 2, 3));
        assert_eq!(seen.len(), 10);
        assert_eq!(
            seen[3],
            (3, Err("boom-3: the decoder panicked".to_string()))
        );
        assert_eq!(stats.failed, 1);
    }

    #[test]
    fn fail_fast_ends_with_the_first_failure_in_input_order() {
        for workers in [1, 4, 16] {
            let mut cfg = config(5, 2, workers);
            cfg.fail_fast = true;
            let (seen, stats) = consume_all(&paths(50, &[23, 12, 40]), cfg);
            let indices: Vec<usize> = seen.iter().map(|(i, _)| *i).collect();
            assert_eq!(indices, (0..=12).collect::<Vec<_>>(), "workers={workers}");
            assert!(seen[12].1.is_err());
            assert!(seen[..12].iter().all(|(_, r)| r.is_ok()));
            assert_eq!(stats.failed, 1);
        }
    }

    #[test]
    fn a_consumer_error_stops_the_workers() {
        let list = paths(1000, &[]);
        let cfg = config(4, 2, 8);
        let mut staging: Vec<HostStaging> = (0..2).map(|_| HostStaging::heap(4 * 64)).collect();
        let mut calls = 0;
        let error = run(
            &listed(&list),
            cfg,
            &mut staging,
            &mut [],
            &|| Box::new(Mock),
            &mut |_: Batch<'_>| {
                calls += 1;
                if calls == 3 {
                    anyhow::bail!("the GPU fell over")
                }
                Ok(Flow::Continue)
            },
        )
        .unwrap_err();
        assert_eq!(error.to_string(), "the GPU fell over");
        assert_eq!(calls, 3);
    }
}
