//! The multi-device scheduler (`--device cuda:all`) with CPU runners standing in for GPUs, for
//! the fixed-size models and for SigLIP 2 NaFlex: outputs in input order and equal to one
//! device's, a device that fails mid-run stopping the run with what came before it handed
//! over, and the parsing of device lists.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use vitrt_engine::batched::{self, BatchResults, BatchSetup, ImageOptions};
use vitrt_engine::devices::{run_on_devices, several_devices, DeviceModel, DeviceRun};
use vitrt_engine::naflex::NaflexPlacement;
use vitrt_engine::pipeline::{collect_inputs, Flow, InputList};
use vitrt_engine::ModelOptions;
use vitrt_model::naflex::NaflexRunner;
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
        runs: DeviceModel::Images {
            size_was_asked: false,
            prepare: &logits,
        },
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
        runs: DeviceModel::Images {
            size_was_asked: false,
            prepare: &logits,
        },
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

/// The SigLIP 2 NaFlex fixture with a pooling head and a text tower.
fn naflex_model() -> ModelOptions {
    ModelOptions {
        device: Some("cpu".to_string()),
        ..ModelOptions::new(
            root()
                .join("tests/fixtures/naflex/siglip2-naflex-zero-shot")
                .display()
                .to_string(),
        )
    }
}

/// Images of several aspect ratios (each its own patch grid), a file that is no image among
/// them.
fn naflex_inputs() -> InputList {
    let dir = root().join("tests/fixtures/naflex/siglip2-naflex-zero-shot/images");
    let mut files: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("{i}.png"))).collect();
    files.extend(inputs().paths);
    collect_inputs(&files, None).unwrap()
}

/// Every batch's `image_embeds` rows, as bytes.
#[derive(Default)]
struct Embeds {
    batches: Vec<Handed>,
}

impl BatchResults for Embeds {
    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> anyhow::Result<Flow> {
        let rows = match outputs {
            Some(outputs) => {
                let (width, data) =
                    vitrt_engine::results::output_rows(outputs, "image_embeds", count)?;
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

const NAFLEX_OUTPUTS: [&str; 1] = ["image_embeds"];

fn no_setup(_: &mut NaflexRunner) -> anyhow::Result<()> {
    Ok(())
}

/// The rows one device gives, through NaFlex's single-device path.
fn naflex_one_device(inputs: &InputList) -> Embeds {
    let mut placement = NaflexPlacement::open(&naflex_model())
        .unwrap()
        .expect("the fixture is NaFlex");
    assert!(matches!(placement, NaflexPlacement::One { .. }));
    let mut collected = Embeds::default();
    placement
        .run(
            inputs,
            &image_options(),
            &no_setup,
            &NAFLEX_OUTPUTS,
            &mut collected,
        )
        .unwrap();
    collected
}

#[test]
fn naflex_on_several_devices_hands_over_in_input_order_what_one_device_gives() {
    let inputs = naflex_inputs();
    let want = naflex_one_device(&inputs);
    assert_eq!(want.batches.len(), inputs.len().div_ceil(2));
    let devices = vec!["cpu".to_string(); 3];
    let prepared = AtomicUsize::new(0);
    let prepare = |_: &mut NaflexRunner| -> anyhow::Result<()> {
        prepared.fetch_add(1, Ordering::Relaxed);
        Ok(())
    };
    let run = DeviceRun {
        model: &naflex_model(),
        devices: &devices,
        images: &image_options(),
        runs: DeviceModel::Naflex {
            prepare: &prepare,
            outputs: &NAFLEX_OUTPUTS,
        },
        before_submit: None,
    };
    let mut got = Embeds::default();
    let outcome = run_on_devices(&run, &inputs, &mut got).unwrap();
    assert_eq!(
        prepared.load(Ordering::Relaxed),
        3,
        "each device's runner set up"
    );
    assert_eq!(got.batches.len(), want.batches.len());
    for (got, want) in got.batches.iter().zip(&want.batches) {
        assert_eq!((got.0, got.1, &got.2), (want.0, want.1, &want.2));
        assert!(
            got.3 == want.3,
            "batch at {}: rows differ from one device's",
            got.0
        );
    }
    let failed: usize = want.batches.iter().map(|b| b.2.len()).sum();
    assert!(failed >= 1, "the non-image file fails");
    assert!(
        want.batches.iter().all(|b| b.3.len() == b.1),
        "the other images of a failed one's batch run"
    );
    assert_eq!(outcome.stats.failed, failed);
    assert_eq!(outcome.stats.images, inputs.len());
    let ran: usize = outcome.devices.iter().map(|d| d.images).sum();
    assert_eq!(ran, inputs.len(), "{:?}", outcome.devices);
    assert!(
        outcome.devices.iter().filter(|d| d.batches > 0).count() >= 2,
        "the batches were not dealt to several devices: {:?}",
        outcome.devices
    );
}

#[test]
fn naflex_device_failing_mid_run_stops_it_with_what_came_before_handed_over() {
    let inputs = naflex_inputs();
    let want = naflex_one_device(&inputs);
    let devices = vec!["cpu".to_string(); 2];
    // Device 1 fails at its first batch (both devices are free when the first batch comes).
    let fail = |device: usize, batches: usize| {
        if device == 1 && batches == 0 {
            anyhow::bail!("the stand-in GPU fell off the bus");
        }
        Ok(())
    };
    let run = DeviceRun {
        model: &naflex_model(),
        devices: &devices,
        images: &image_options(),
        runs: DeviceModel::Naflex {
            prepare: &no_setup,
            outputs: &NAFLEX_OUTPUTS,
        },
        before_submit: Some(&fail),
    };
    let mut got = Embeds::default();
    let error = run_on_devices(&run, &inputs, &mut got)
        .err()
        .expect("the run fails");
    let message = format!("{error:#}");
    assert!(
        message.contains("fell off the bus") && message.contains("cpu"),
        "{message}"
    );
    assert!(got.batches.len() < want.batches.len());
    for (got, want) in got.batches.iter().zip(&want.batches) {
        assert_eq!((got.0, got.1), (want.0, want.1));
        assert!(got.3 == want.3);
    }
}

#[test]
fn naflex_on_several_devices_refuses_gpu_decoding_by_name() {
    let inputs = naflex_inputs();
    let devices = vec!["cpu".to_string(); 2];
    let images = ImageOptions {
        decode: Some(vitrt_engine::batched::DecodeOn::Gpu),
        ..image_options()
    };
    let run = DeviceRun {
        model: &naflex_model(),
        devices: &devices,
        images: &images,
        runs: DeviceModel::Naflex {
            prepare: &no_setup,
            outputs: &NAFLEX_OUTPUTS,
        },
        before_submit: None,
    };
    let error = run_on_devices(&run, &inputs, &mut Embeds::default())
        .err()
        .expect("refused");
    assert!(
        format!("{error:#}").contains("--decode gpu is not built for SigLIP 2 NaFlex"),
        "{error:#}"
    );
}
