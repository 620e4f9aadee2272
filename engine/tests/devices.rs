//! The multi-device scheduler (`--device cuda:all`) with CPU runners standing in for GPUs:
//! outputs in input order and equal to one device's, a device that fails mid-run stopping the
//! run with what came before it handed over, and the parsing of device lists.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use vitrt_engine::batched::{self, BatchResults, BatchSetup, ImageOptions};
use vitrt_engine::devices::{run_on_devices, several_devices, DeviceRun};
use vitrt_engine::pipeline::{collect_inputs, Flow, InputList};
use vitrt_engine::ModelOptions;
use vitrt_model::{Output, OutputSet, Runner};
use vitrt_runtime::HostTensor;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A batch handed over: (first, count, failed indices, rows as bytes).
type Handed = (usize, usize, Vec<usize>, Vec<Vec<u8>>);

/// Every batch handed over, in the order it came.
#[derive(Default)]
struct Collect {
    batches: Vec<Handed>,
}

impl BatchResults for Collect {
    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> anyhow::Result<Flow> {
        let rows = match outputs {
            Some(outputs) => {
                let (width, data) = vitrt_engine::results::output_rows(outputs, "logits", count)?;
                data.chunks(width)
                    .map(|row| row.iter().flat_map(|v| v.to_le_bytes()).collect())
                    .collect()
            }
            None => Vec::new(),
        };
        let failed = failures.iter().map(|(i, _)| *i).collect();
        self.batches.push((first, count, failed, rows));
        Ok(Flow::Continue)
    }
}

fn inputs() -> InputList {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples/digits"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.truncate(9);
    let images = root().join("tests/fixtures/images");
    files.insert(3, images.join("cat.jpg"));
    // A file that is no image: one failure in its batch, the run goes on.
    files.insert(6, root().join("examples/digits-vit/config.json"));
    files.push(images.join("coffee_exif6.jpg"));
    collect_inputs(&files, None).unwrap()
}

fn model() -> ModelOptions {
    ModelOptions {
        device: Some("cpu".to_string()),
        ..ModelOptions::new(root().join("examples/digits-vit").display().to_string())
    }
}

fn image_options() -> ImageOptions {
    ImageOptions {
        batch_size: Some(2),
        workers: Some(2),
        quiet: true,
        ..ImageOptions::default()
    }
}

fn logits(runner: &mut Runner) -> anyhow::Result<()> {
    runner.set_outputs(OutputSet::of(&[Output::Logits]));
    Ok(())
}

/// The rows one device gives, through the single-device path.
fn one_device(inputs: &InputList) -> Collect {
    let opened = model().open().unwrap();
    let mut runner = opened.runner;
    let pre = batched::preprocessing(&mut runner, &opened.dir, false).unwrap();
    logits(&mut runner).unwrap();
    let setup = BatchSetup::new(&runner, pre, &image_options(), inputs.paths.len()).unwrap();
    let mut collected = Collect::default();
    batched::run_batches(&mut runner, inputs, &setup, &mut collected, false).unwrap();
    collected
}

#[test]
fn several_devices_hand_over_in_input_order_what_one_device_gives() {
    let inputs = inputs();
    let want = one_device(&inputs);
    let devices = vec!["cpu".to_string(); 3];
    let run = DeviceRun {
        model: &model(),
        devices: &devices,
        images: &image_options(),
        size_was_asked: false,
        prepare: &logits,
        before_submit: None,
    };
    let mut got = Collect::default();
    let outcome = run_on_devices(&run, &inputs, &mut got).unwrap();
    assert_eq!(got.batches.len(), want.batches.len());
    for (got, want) in got.batches.iter().zip(&want.batches) {
        assert_eq!((got.0, got.1, &got.2), (want.0, want.1, &want.2));
        assert!(
            got.3 == want.3,
            "batch at {}: rows differ from one device's",
            got.0
        );
    }
    assert_eq!(outcome.stats.images, inputs.paths.len());
    let failed: usize = want.batches.iter().map(|b| b.2.len()).sum();
    assert!(failed >= 1, "the non-image file fails");
    assert_eq!(outcome.stats.failed, failed);
    let ran: usize = outcome.devices.iter().map(|d| d.images).sum();
    assert_eq!(ran, inputs.paths.len(), "{:?}", outcome.devices);
    assert!(
        outcome.devices.iter().filter(|d| d.batches > 0).count() >= 2,
        "the batches were not dealt to several devices: {:?}",
        outcome.devices
    );
}

#[test]
fn a_device_failing_mid_run_stops_it_with_what_came_before_handed_over() {
    let inputs = inputs();
    let want = one_device(&inputs);
    let devices = vec!["cpu".to_string(); 2];
    let taken = AtomicUsize::new(0);
    // Device 1 fails at its first batch, as a GPU lost mid-run would (both devices are free
    // when the first batch comes, so each gets one of the first two).
    let fail = |device: usize, batches: usize| {
        taken.fetch_add(1, Ordering::Relaxed);
        if device == 1 && batches == 0 {
            anyhow::bail!("the stand-in GPU fell off the bus");
        }
        Ok(())
    };
    let run = DeviceRun {
        model: &model(),
        devices: &devices,
        images: &image_options(),
        size_was_asked: false,
        prepare: &logits,
        before_submit: Some(&fail),
    };
    let mut got = Collect::default();
    let error = run_on_devices(&run, &inputs, &mut got)
        .err()
        .expect("the run fails");
    let message = format!("{error:#}");
    assert!(
        message.contains("fell off the bus") && message.contains("cpu"),
        "{message}"
    );
    // What was handed over is a prefix of the run, in order, with the right rows.
    assert!(got.batches.len() < want.batches.len());
    for (got, want) in got.batches.iter().zip(&want.batches) {
        assert_eq!((got.0, got.1), (want.0, want.1));
        assert!(got.3 == want.3);
    }
    assert!(taken.load(Ordering::Relaxed) >= 1);
}

#[test]
fn device_lists_are_parsed_and_checked() {
    assert_eq!(
        several_devices(Some("cuda:0,2")).unwrap(),
        Some(vec!["cuda:0".to_string(), "cuda:2".to_string()])
    );
    assert_eq!(
        several_devices(Some("cuda: 1, 3")).unwrap(),
        Some(vec!["cuda:1".to_string(), "cuda:3".to_string()])
    );
    for one in [None, Some("cpu"), Some("cuda"), Some("cuda:1")] {
        assert_eq!(several_devices(one).unwrap(), None, "{one:?}");
    }
    for bad in ["cuda:0,0", "cuda:0,x", "cuda:0,"] {
        let error = several_devices(Some(bad)).unwrap_err().to_string();
        assert!(error.contains(bad), "{bad}: {error}");
    }
    // Without a driver (CI), cuda:all says so; with GPUs, it lists them.
    match several_devices(Some("cuda:all")) {
        Ok(Some(devices)) => assert!(devices.iter().all(|d| d.starts_with("cuda:"))),
        Ok(None) => panic!("cuda:all names devices"),
        Err(e) => assert!(e.to_string().contains("cuda:all"), "{e}"),
    }
}
