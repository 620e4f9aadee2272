//! A `Model` on several devices (`device="cuda:all"`, `"cuda:0,2"`, or a list of names): an
//! engine per device, each opened and used on a thread of its own (its CUDA graphs stay
//! there), as `vitrt classify --device cuda:all` runs; each batch goes to the device with
//! the fewest batches outstanding, and the outputs come back in input order.
//!
//! ```text
//! the calling thread: images → batches ──► device thread k: decode, submit, collect the
//!     previous batch ──► (batch, outputs) ──► the calling thread, in input order
//! ```
//!
//! Each device thread keeps one batch in flight (its outputs collected when the next is
//! submitted, or when the call drains), so a device's decoding overlaps its forward pass as
//! on one device.

use crate::failure::{Failure, Result};
use crate::images::ImageSource;
use crate::{panic_message, without_gil, Engine, SameThread};
use anyhow::anyhow;
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use vitrt_engine::ModelOptions;
use vitrt_model::{OutputSet, VisionModel};
use vitrt_runtime::{DType, HostTensor, PendingOutputs};

/// Work for a device's thread, run there on its state.
type Work = Box<dyn FnOnce(&mut DeviceState) + Send>;

/// What a device's thread owns: its engine and the batch it has in flight.
struct DeviceState {
    engine: Engine,
    in_flight: Option<InFlightBatch>,
}

/// A batch submitted on a device whose outputs are not yet collected.
struct InFlightBatch {
    index: usize,
    first: usize,
    count: usize,
    pending: PendingOutputs,
    sources: Vec<ImageSource>,
}

/// A batch's outputs, or its error, as a device's thread reports it.
struct Finished {
    /// The device that ran it, by place among the engines.
    device: usize,
    index: usize,
    first: usize,
    count: usize,
    outputs: Result<Vec<HostTensor>>,
}

/// One device's thread and the queue of its work.
struct DeviceThread {
    name: String,
    work: Option<Sender<Work>>,
    thread: Option<JoinHandle<()>>,
}

/// The engines of a `Model` on several devices.
pub struct SeveralEngines {
    devices: Vec<DeviceThread>,
    /// The model as each device opened it, read on the calling thread: what the methods
    /// check before a run (its head, labels and pools).
    pub model: VisionModel,
    /// The storage type every device runs in.
    pub dtype: DType,
    /// (height, width) of the images the preprocessing makes.
    pub image_size: (usize, usize),
    /// The preprocessing converts images to RGB (PIL images are converted as it says).
    pub convert_rgb: bool,
    /// The label set every device scores zero-shot against now.
    pub zero_shot: Option<(Vec<String>, Vec<String>)>,
}

/// Runs `work`, turning a panic into a `RuntimeError` naming the device.
fn guarded<T>(device: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        Err(Failure::Runtime(anyhow!(
            "vitrt failed inside on {device} (a bug, please report it): {}",
            panic_message(panic.as_ref())
        )))
    })
}

/// `error` with the device's name before its message when the device or the runtime failed
/// (an error in the input names the input, wherever it ran).
fn on_device(device: &str, error: Failure) -> Failure {
    match error {
        Failure::Value(e) => Failure::Value(e),
        Failure::Runtime(e) => Failure::Runtime(e.context(device.to_string())),
    }
}

/// The error for work whose device thread ended without reporting it.
fn thread_ended() -> Failure {
    Failure::Runtime(anyhow!("a device's thread ended before finishing its work"))
}

/// Waits, without the GIL, for the `expected` results `done` brings (each tagged with its
/// device's place), and returns them in the devices' order.
fn every_result<T: Send>(
    py: Python<'_>,
    done: Receiver<(usize, Result<T>)>,
    expected: usize,
) -> Result<Vec<Result<T>>> {
    let done = SameThread(done);
    let mut results: Vec<(usize, Result<T>)> =
        without_gil(py, move || Ok(done.into_inner().into_iter().collect()))?;
    if results.len() != expected {
        return Err(thread_ended());
    }
    results.sort_by_key(|(k, _)| *k);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}

impl SeveralEngines {
    /// Opens the model on each of `devices` (names as `--device` takes them), in parallel,
    /// each on its own thread with `workers` decoding threads; the first device that fails
    /// to open fails the whole, naming it.
    pub fn open(
        options: &ModelOptions,
        devices: &[String],
        workers: usize,
        decode: Option<&str>,
    ) -> Result<SeveralEngines> {
        let (model, _) = options.load_model().map_err(Failure::Value)?;
        let (opened_tx, opened_rx) = channel();
        let mut threads = Vec::new();
        for (k, name) in devices.iter().enumerate() {
            let options = ModelOptions {
                device: Some(name.clone()),
                announce_device: false,
                ..options.clone()
            };
            let decode = decode.map(str::to_string);
            let opened = opened_tx.clone();
            let (work_tx, work_rx) = channel::<Work>();
            let device = name.clone();
            let thread = std::thread::Builder::new()
                .name(format!("vitrt {name}"))
                .spawn(move || {
                    let engine = guarded(&device, || {
                        Engine::open(&options, Some(workers), decode.as_deref(), k == 0)
                    });
                    let mut state = match engine {
                        Ok(engine) => {
                            let described = (
                                engine.runner.backend().dtype(),
                                engine.preprocess.output_size(),
                                engine.converts_to_rgb(),
                            );
                            let _ = opened.send((k, Ok(described)));
                            drop(opened);
                            DeviceState {
                                engine,
                                in_flight: None,
                            }
                        }
                        Err(e) => {
                            let _ = opened.send((k, Err(on_device(&device, e))));
                            return;
                        }
                    };
                    for work in work_rx {
                        work(&mut state);
                    }
                })
                .map_err(|e| Failure::Runtime(anyhow!("cannot start a thread for {name}: {e}")))?;
            threads.push(DeviceThread {
                name: name.clone(),
                work: Some(work_tx),
                thread: Some(thread),
            });
        }
        drop(opened_tx);
        let mut engines = SeveralEngines {
            devices: threads,
            model,
            dtype: DType::F32,
            image_size: (0, 0),
            convert_rgb: false,
            zero_shot: None,
        };
        let mut first_error: Option<(usize, Failure)> = None;
        // Each thread says once how its opening went.
        for (k, opened) in opened_rx {
            match opened {
                Ok((dtype, size, convert_rgb)) if k == 0 => {
                    engines.dtype = dtype;
                    engines.image_size = size;
                    engines.convert_rgb = convert_rgb;
                }
                Ok(_) => {}
                Err(e) => {
                    if first_error.as_ref().is_none_or(|(j, _)| k < *j) {
                        first_error = Some((k, e));
                    }
                }
            }
        }
        if let Some((_, e)) = first_error {
            return Err(e);
        }
        Ok(engines)
    }

    /// The devices' names, in the order they were given.
    pub fn names(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }

    /// Sends `work` to device `k`'s thread.
    fn send(&self, k: usize, work: Work) -> Result<()> {
        let device = &self.devices[k];
        device
            .work
            .as_ref()
            .and_then(|w| w.send(work).ok())
            .ok_or_else(|| Failure::Runtime(anyhow!("{}: its thread has ended", device.name)))
    }

    /// Queues `work` on device `k`'s engine; its result, tagged with `k`, goes to `done` (a
    /// panic, or a failure of the device or the runtime, naming the device).
    fn queue<T: Send + 'static>(
        &self,
        k: usize,
        done: &Sender<(usize, Result<T>)>,
        work: impl FnOnce(&mut Engine) -> Result<T> + Send + 'static,
    ) -> Result<()> {
        let (done, name) = (done.clone(), self.devices[k].name.clone());
        self.send(
            k,
            Box::new(move |state: &mut DeviceState| {
                let result = guarded(&name, || work(&mut state.engine));
                let _ = done.send((k, result.map_err(|e| on_device(&name, e))));
            }),
        )
    }

    /// Runs `work` on every device at once, waiting for all; the first device's error (in the
    /// order given) is the one returned.
    pub fn on_each<T: Send + 'static>(
        &self,
        py: Python<'_>,
        work: impl Fn(&mut Engine) -> Result<T> + Send + Clone + 'static,
    ) -> Result<Vec<T>> {
        let (done_tx, done_rx) = channel();
        for k in 0..self.devices.len() {
            self.queue(k, &done_tx, work.clone())?;
        }
        drop(done_tx);
        every_result(py, done_rx, self.devices.len())?
            .into_iter()
            .collect()
    }

    /// Sets every device up for images as the preprocessing makes them, producing `outputs`.
    pub fn prepare_for_images(&self, py: Python<'_>, outputs: OutputSet) -> Result<()> {
        self.on_each(py, move |engine| engine.prepare_for_images(outputs))?;
        Ok(())
    }

    /// A run of batches over the devices: see [`BatchDealer`].
    pub fn dealer(&self) -> BatchDealer<'_> {
        let (done, finished) = channel();
        BatchDealer {
            engines: self,
            outstanding: vec![0; self.devices.len()],
            done,
            finished: SameThread(finished),
            arrived: BTreeMap::new(),
            next: 0,
            dealt: 0,
            failed: false,
        }
    }

    /// Runs `pixels` ([B, C, H, W] of `shape`, checked finite by the caller) on the devices,
    /// the batch cut into one run of rows per device, and joins the outputs along the batch.
    pub fn forward_host(
        &self,
        py: Python<'_>,
        shape: Vec<usize>,
        pixels: Vec<f32>,
    ) -> Result<Vec<HostTensor>> {
        let rows = shape.first().copied().unwrap_or(0);
        let per_row: usize = shape.iter().skip(1).product();
        let per_device = rows.div_ceil(self.devices.len()).max(1);
        let pixels = std::sync::Arc::new(pixels);
        let (done_tx, done_rx) = channel();
        let mut parts = 0;
        for (k, start) in (0..rows).step_by(per_device).enumerate() {
            let end = (start + per_device).min(rows);
            let mut part_shape = shape.clone();
            part_shape[0] = end - start;
            let pixels = pixels.clone();
            self.queue(k, &done_tx, move |engine| {
                let part = &pixels[start * per_row..end * per_row];
                crate::forward_pixels(&mut engine.runner, &part_shape, part, None)
            })?;
            parts += 1;
        }
        drop(done_tx);
        let mut joined: Vec<HostTensor> = Vec::new();
        for outputs in every_result(py, done_rx, parts)? {
            let outputs = outputs?;
            if joined.is_empty() {
                joined = outputs;
                continue;
            }
            for (whole, part) in joined.iter_mut().zip(outputs) {
                whole.shape[0] += part.shape[0];
                whole.data.extend_from_slice(&part.data);
            }
        }
        Ok(joined)
    }

    /// Device `k`'s index among these engines for `cuda:ORDINAL`, if it is one of them.
    pub fn device_of_ordinal(&self, ordinal: i32) -> Option<usize> {
        let name = format!("cuda:{ordinal}");
        self.devices.iter().position(|d| d.name == name)
    }

    /// Runs `work` on device `k`'s engine and waits for it.
    pub fn on_device<T: Send + 'static>(
        &self,
        py: Python<'_>,
        k: usize,
        work: impl FnOnce(&mut Engine) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (done, result) = channel();
        self.queue(k, &done, work)?;
        drop(done);
        every_result(py, result, 1)?
            .pop()
            .unwrap_or_else(|| Err(thread_ended()))
    }

    /// A CUDA tensor's pixels (f32 [B, C, H, W] of `shape` from device address `ptr`) run on
    /// device `k`: see `Model.forward`.
    pub fn forward_device(
        &self,
        py: Python<'_>,
        k: usize,
        shape: Vec<usize>,
        ptr: u64,
    ) -> Result<Vec<HostTensor>> {
        self.on_device(py, k, move |engine| {
            // SAFETY: the caller keeps the tensor alive until this returns (it waits), and
            // its producer ordered its writes before this device's stream.
            unsafe { crate::forward_device_pixels(&mut engine.runner, &shape, ptr) }
        })
    }
}

impl Drop for SeveralEngines {
    fn drop(&mut self) {
        // Closing each queue ends its thread once its work is done; each engine is released
        // on its own thread.
        for device in &mut self.devices {
            device.work = None;
        }
        for device in &mut self.devices {
            if let Some(thread) = device.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// Deals a call's batches to the devices and hands their outputs back in input order.
pub struct BatchDealer<'a> {
    engines: &'a SeveralEngines,
    /// Batches dealt to each device and not yet reported.
    outstanding: Vec<usize>,
    done: Sender<Finished>,
    finished: SameThread<Receiver<Finished>>,
    /// Reported batches not yet handed on, by index.
    arrived: BTreeMap<usize, Finished>,
    /// The next batch to hand on.
    next: usize,
    /// Batches dealt so far.
    dealt: usize,
    /// A batch failed: no more are dealt.
    pub failed: bool,
}

/// A batch in input order: its first image's index, its count, and its outputs.
pub type InOrder = (usize, usize, Result<Vec<HostTensor>>);

impl BatchDealer<'_> {
    /// Deals the next batch (images `first ..` of the call) to the device with the fewest
    /// outstanding, after waiting (without the GIL) for one with fewer than two; returns the
    /// batches that are now next in input order.
    pub fn deal(
        &mut self,
        py: Python<'_>,
        first: usize,
        sources: Vec<ImageSource>,
    ) -> Result<Vec<InOrder>> {
        while self.outstanding.iter().all(|&n| n >= 2) {
            self.receive(py)?;
        }
        let k = (0..self.outstanding.len())
            .min_by_key(|&k| self.outstanding[k])
            .unwrap_or(0);
        let (index, count, done) = (self.dealt, sources.len(), self.done.clone());
        let name = self.engines.devices[k].name.clone();
        self.engines.send(
            k,
            Box::new(move |state: &mut DeviceState| {
                let submitted = guarded(&name, || state.engine.submit_images(&sources, first));
                if let Some(previous) = state.in_flight.take() {
                    finish_on_device(state, previous, k, &name, &done);
                }
                match submitted {
                    Ok(pending) => {
                        state.in_flight = Some(InFlightBatch {
                            index,
                            first,
                            count,
                            pending,
                            sources,
                        })
                    }
                    Err(e) => {
                        let _ = done.send(Finished {
                            device: k,
                            index,
                            first,
                            count,
                            outputs: Err(e),
                        });
                    }
                }
            }),
        )?;
        self.outstanding[k] += 1;
        self.dealt += 1;
        Ok(self.in_order())
    }

    /// Collects every batch in flight on the devices; the rest, in input order.
    pub fn drain(&mut self, py: Python<'_>) -> Result<Vec<InOrder>> {
        for (k, device) in self.engines.devices.iter().enumerate() {
            if self.outstanding[k] == 0 {
                continue;
            }
            let (done, name) = (self.done.clone(), device.name.clone());
            self.engines.send(
                k,
                Box::new(move |state: &mut DeviceState| {
                    if let Some(previous) = state.in_flight.take() {
                        finish_on_device(state, previous, k, &name, &done);
                    }
                }),
            )?;
        }
        while self.outstanding.iter().any(|&n| n > 0) {
            self.receive(py)?;
        }
        Ok(self.in_order())
    }

    /// Waits, without the GIL, for one batch's report.
    fn receive(&mut self, py: Python<'_>) -> Result<()> {
        let finished = SameThread(&self.finished);
        let report = without_gil(py, move || {
            finished.into_inner().0.recv().map_err(|_| thread_ended())
        })?;
        self.outstanding[report.device] -= 1;
        self.failed |= report.outputs.is_err();
        self.arrived.insert(report.index, report);
        Ok(())
    }

    /// Batches that are next in input order, taken from those arrived.
    fn in_order(&mut self) -> Vec<InOrder> {
        let mut ready = Vec::new();
        while let Some(report) = self.arrived.remove(&self.next) {
            ready.push((report.first, report.count, report.outputs));
            self.next += 1;
        }
        ready
    }
}

/// Collects `batch`'s outputs on its device (a batch the device marked is decoded again on
/// the host and run again, as on one device) and reports them.
fn finish_on_device(
    state: &mut DeviceState,
    batch: InFlightBatch,
    device: usize,
    name: &str,
    done: &Sender<Finished>,
) {
    let InFlightBatch {
        index,
        first,
        count,
        pending,
        sources,
    } = batch;
    let outputs = guarded(name, || state.engine.finish(pending, &sources, first));
    let _ = done.send(Finished {
        device,
        index,
        first,
        count,
        outputs,
    });
}
