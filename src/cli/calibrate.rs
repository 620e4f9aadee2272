//! `vitrt calibrate`: the static activation scales of a model's FP8 linear layers. The model
//! runs in f32 on calibration images; each FP8 candidate's input has its largest magnitude
//! taken over all of them, and the file `--out` names gets `margin · amax / 448` for each
//! (`vitrt_model::fp8_scales` says why the margin), for `--dtype fp8 --fp8-scales FILE`.
//! With `--max-cosine-drop`, it then chooses which layers run in FP8 with those scales, as
//! `vitrt quantize-report --fp8-scales` does, and saves the choice in the same file: a run
//! given the file follows it.

use super::common::ModelArgs;
use super::quantize_report::{
    check_max_cosine_drop, choose, read_calibration_images, ChoiceRequest,
};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_engine::ModelOptions;
use vitrt_model::fp8_scales::{Fp8ScalesFile, LayerScale, DEFAULT_MARGIN};
use vitrt_runtime::fp8::Fp8Layers;
use vitrt_runtime::DType;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Write the scales here (JSON), for `--dtype fp8 --fp8-scales FILE`.
    #[arg(long)]
    out: PathBuf,
    /// Each scale is MARGIN · amax / 448: the largest input seen maps to 448 / MARGIN, so an
    /// unseen image's inputs up to MARGIN times larger are represented rather than saturated.
    #[arg(long, default_value_t = DEFAULT_MARGIN)]
    margin: f32,
    /// Also choose the layers to run in FP8 with these scales, for this budget (the largest
    /// drop of the mean cosine similarity to f32 over the images, as `quantize-report
    /// --max-cosine-drop`), and save the choice in the file. It runs the model in f16 and
    /// FP8 too, so the device must run FP8 (a Hopper GPU, or the CPU's emulation).
    #[arg(long)]
    max_cosine_drop: Option<f64>,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16, value_parser = super::common::parse_batch_size)]
    batch_size: usize,
    /// Calibration images: files (JPEG, PNG, WebP) and folders of them. A file that cannot be
    /// read is reported and skipped.
    #[arg(long, required = true, num_args = 1..)]
    images: Vec<PathBuf>,
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    if !(args.margin >= 1.0 && args.margin.is_finite()) {
        bail!(
            "--margin {} would saturate the largest calibrated input: use a finite value of at \
             least 1",
            args.margin
        );
    }
    let options = args.model.options()?;
    if options.dtype.is_some() || options.fp8.is_some() {
        bail!("calibrate runs the model in f32 itself: leave --dtype and the FP8 flags out");
    }
    // Checked before the calibration runs, not after it.
    if let Some(budget) = args.max_cosine_drop {
        check_max_cosine_drop(budget)?;
    }
    let opened = ModelOptions {
        dtype: Some(DType::F32),
        cuda_graphs: false,
        ..options.clone()
    }
    .open()?;
    let (mut runner, dir) = (opened.runner, opened.dir);
    let pre =
        vitrt_engine::batched::preprocessing(&mut runner, &dir, options.image_size.is_some())?;
    let candidates = runner.fp8_candidate_shapes()?;
    if candidates.is_empty() {
        bail!(
            "no linear layer of this model can run in FP8 (candidates are the transformer \
             blocks' layers with K a multiple of 16): there is nothing to calibrate"
        );
    }
    let (pixels, names) = read_calibration_images(&args.images, &pre, "calibrate")?;
    if names.is_empty() {
        bail!("calibrate read no image: every file given was skipped");
    }
    eprintln!(
        "vitrt: calibrating the inputs of {} linear layers on {} images",
        candidates.len(),
        names.len()
    );
    let per_image = pixels.len() / names.len();
    let mut amax = vec![0f32; candidates.len()];
    for chunk in pixels.chunks(per_image * args.batch_size) {
        let batch = chunk.len() / per_image;
        let seen = runner.fp8_input_amax(chunk, batch)?;
        for ((total, seen), (name, _)) in amax.iter_mut().zip(seen).zip(&candidates) {
            if !seen.is_finite() {
                bail!(
                    "the f32 run gives the input of {name} a magnitude of {seen}: no finite \
                     scale covers it"
                );
            }
            *total = total.max(seen);
        }
    }
    let layers: Vec<LayerScale> = candidates
        .into_iter()
        .zip(amax)
        .map(|((name, shape), amax)| LayerScale::new(name, shape, amax, args.margin))
        .collect();
    for layer in &layers {
        println!(
            "{:<60} amax {:>10.4}  scale {:.6e}",
            layer.name, layer.input_amax, layer.scale
        );
    }
    drop(runner);
    let mut file = Fp8ScalesFile::new(
        args.model.name().to_string(),
        names.len(),
        args.margin,
        layers,
    );
    let mut met = true;
    if let Some(budget) = args.max_cosine_drop {
        eprintln!("vitrt: choosing the FP8 layers with these scales");
        let report = choose(&ChoiceRequest {
            options: &options,
            images: &args.images,
            batch_size: args.batch_size,
            budget,
            considered: Fp8Layers::All,
            static_scales: Some(file.clone()),
            command: "calibrate",
        })?;
        outln!("");
        report.print()?;
        met = report.met;
        file.choice = Some(report.choice());
    }
    file.write(&args.out)?;
    eprintln!("vitrt: wrote {}", args.out.display());
    Ok(if met {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
