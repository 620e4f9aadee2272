//! `vitrt quantize-report`: what FP8 costs a model, layer by layer, and which linear layers
//! to keep in f16 for a budget. The model runs in f32 (the reference), in f16, with every
//! candidate linear layer in FP8, and with each candidate alone in FP8, on calibration
//! images; the output compared is the logits of a classifier, else the embedding `vitrt
//! embed` writes by default. Each layer's cost is how much its FP8 lowers the mean cosine
//! similarity to f32 below f16's; the most costly are kept in f16 until the rest fit the
//! budget, and the choice is checked by running it (more layers are kept while it misses).

use super::common::ModelArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_engine::pipeline::{collect_inputs_with, DatasetOptions};
use vitrt_engine::ModelOptions;
use vitrt_model::fp8_choice::{
    first_guess, Fp8Choice, Fp8ChoiceFile, Fp8Measurement, FORMAT, VERSION,
};
use vitrt_model::fp8_scales::Fp8ScalesFile;
use vitrt_model::preprocess::preprocess_file;
use vitrt_model::{Output, OutputSet, Pool, Runner};
use vitrt_runtime::fp8::Fp8Layers;
use vitrt_runtime::DType;

#[derive(Args, Debug)]
pub struct QuantizeReportArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The largest drop of the mean cosine similarity to f32 the chosen model may show over
    /// the calibration images (0.002: a mean cosine of at least 0.998). Classifiers must also
    /// keep f16's top-1 agreement with f32.
    #[arg(long, default_value_t = 2e-3)]
    max_cosine_drop: f64,
    /// Write the choice here, for `--dtype fp8 --fp8-layers FILE`.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16, value_parser = super::common::parse_batch_size)]
    batch_size: usize,
    /// Weigh every linear layer of the blocks, not only those whose input a layernorm
    /// quantises (the default's: the others gain no speed in FP8, their input's quantisation
    /// pass costs what the product saves). With --fp8-scales every layer is weighed anyway:
    /// static scales make those passes free or cheap.
    #[arg(long)]
    all_layers: bool,
    /// Calibration images: files (JPEG, PNG, WebP) and folders of them.
    #[arg(required = true)]
    images: Vec<PathBuf>,
}

/// The preprocessed pixels of the image files and folders `images` names, and the files read;
/// a file that cannot be read is reported and skipped. Dataset shards are refused (`command`
/// names the command in the message).
pub(super) fn read_calibration_images(
    images: &[PathBuf],
    pre: &vitrt_model::preprocess::PreprocessConfig,
    command: &str,
) -> Result<(Vec<f32>, Vec<PathBuf>)> {
    let inputs = collect_inputs_with(images, None, &DatasetOptions::default())?;
    let mut pixels = Vec::new();
    let mut names = Vec::new();
    for (path, sample) in inputs.paths.iter().zip(
        inputs
            .samples
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None)),
    ) {
        if sample.is_some_and(|s| s.is_some()) {
            bail!(
                "{}: {command} reads image files and folders, not dataset shards",
                path.display()
            );
        }
        match preprocess_file(path, pre) {
            Ok(p) => {
                pixels.extend(p);
                names.push(path.clone());
            }
            Err(e) => eprintln!("vitrt: skipping {}: {e}", path.display()),
        }
    }
    Ok((pixels, names))
}

pub fn run(args: QuantizeReportArgs) -> Result<ExitCode> {
    // With --fp8-scales, every FP8 run quantises its layers' inputs with the static scales.
    let static_scales = args.model.fp8_scales()?;
    let options = args.model.without_fp8_scales().options()?;
    if options.dtype.is_some() || options.fp8.is_some() {
        bail!(
            "quantize-report runs the model in f32, f16 and FP8 itself: leave --dtype and \
             --fp8-layers out"
        );
    }
    // Static scales make the attention output's and second MLP layer's input quantisation
    // free or cheap, so every layer is weighed with them.
    let considered = if args.all_layers || static_scales.is_some() {
        Fp8Layers::All
    } else {
        Fp8Layers::default_choice()
    };
    let report = choose(&ChoiceRequest {
        options: &options,
        images: &args.images,
        batch_size: args.batch_size,
        budget: args.max_cosine_drop,
        considered,
        static_scales,
        command: "quantize-report",
    })?;
    report.print()?;
    if let Some(path) = &args.output {
        Fp8ChoiceFile {
            format: FORMAT.into(),
            version: VERSION,
            model: args.model.name().to_string(),
            choice: report.choice(),
        }
        .write(path)?;
        eprintln!("vitrt: wrote the choice to {}", path.display());
    }
    Ok(if report.met {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--max-cosine-drop`'s value must be a drop of a cosine similarity, in [0, 1).
pub(super) fn check_max_cosine_drop(budget: f64) -> Result<()> {
    if !(0.0..1.0).contains(&budget) {
        bail!(
            "--max-cosine-drop {budget} is not a drop of a cosine similarity: use a value in [0, 1)"
        );
    }
    Ok(())
}

/// What [`choose`] is asked.
pub(super) struct ChoiceRequest<'a> {
    /// The model (no dtype, no FP8 choice: the runs set their own).
    pub options: &'a ModelOptions,
    /// Calibration images: files and folders.
    pub images: &'a [PathBuf],
    pub batch_size: usize,
    /// The largest drop of the mean cosine to f32 allowed.
    pub budget: f64,
    /// The candidates weighed.
    pub considered: Fp8Layers,
    /// Static scales every FP8 run quantises its inputs with, else per-row scales.
    pub static_scales: Option<Fp8ScalesFile>,
    /// The command, for messages.
    pub command: &'static str,
}

/// What [`choose`] measured and chose.
pub(super) struct ChoiceReport {
    /// Whether the output compared is a classifier's logits (else an embedding).
    pub classes: bool,
    /// Each candidate's cost: how much it alone in FP8 lowers the mean cosine below f16's.
    pub costs: Vec<(String, f64)>,
    /// The candidates kept in f16.
    pub keep: Vec<String>,
    pub budget: f64,
    pub f16: Fp8Measurement,
    /// Every candidate in FP8.
    pub all: Fp8Measurement,
    pub chosen: Fp8Measurement,
    /// Whether the choice meets the budget (and, for a classifier, f16's top-1 agreement).
    pub met: bool,
}

/// Runs the model on the images in f32, in f16, with every candidate in FP8 and with each alone
/// in FP8, and chooses the layers to keep in f16 for the budget (see the module's
/// documentation); the choice is checked by running it.
pub(super) fn choose(request: &ChoiceRequest) -> Result<ChoiceReport> {
    let budget = request.budget;
    check_max_cosine_drop(budget)?;
    let opened = |dtype| -> Result<(Runner, PathBuf)> {
        let opened = ModelOptions {
            dtype: Some(dtype),
            fp8: None,
            fp8_scales: None,
            cuda_graphs: false,
            ..request.options.clone()
        }
        .open()?;
        Ok((opened.runner, opened.dir))
    };
    let (mut reference_runner, dir) = opened(DType::F32)?;
    let (mut runner, _) = opened(DType::F16)?;
    let size_was_asked = request.options.image_size.is_some();
    let pre = vitrt_engine::batched::preprocessing(&mut reference_runner, &dir, size_was_asked)?;
    vitrt_engine::batched::preprocessing(&mut runner, &dir, size_was_asked)?;

    let classes = runner.model.primary_output() == Output::Logits;
    let output = if classes {
        Output::Logits
    } else {
        Pool::choose(None, &runner.model)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .output()
    };
    for r in [&mut reference_runner, &mut runner] {
        r.set_outputs(OutputSet::of(&[output]));
    }

    let (pixels, names) = read_calibration_images(request.images, &pre, request.command)?;
    if names.len() < 2 {
        bail!(
            "{} needs at least two readable images to choose FP8 layers (it compares \
             neighbours), got {}",
            request.command,
            names.len()
        );
    }
    let per_image = pixels.len() / names.len();
    let run_all = |runner: &mut Runner| -> Result<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(names.len());
        for chunk in pixels.chunks(per_image * request.batch_size) {
            let batch = chunk.len() / per_image;
            let outputs = runner.run(chunk, batch, false)?;
            let out = outputs
                .iter()
                .find(|t| t.name == output.name())
                .context("the model did not write its output")?;
            vectors.extend(out.data.chunks(out.data.len() / batch).map(<[f32]>::to_vec));
        }
        Ok(vectors)
    };
    eprintln!(
        "vitrt: {} images; comparing {} in f32, f16 and FP8",
        names.len(),
        output.name()
    );
    let reference = run_all(&mut reference_runner)?;
    drop(reference_runner);
    let f16 = Fp8Measurement::of(&reference, &run_all(&mut runner)?, classes);

    let candidates = runner.fp8_candidates(&request.considered)?;
    if candidates.is_empty() {
        bail!(
            "no linear layer of this model can run in FP8{} (candidates are the transformer \
             blocks' layers with K a multiple of 16)",
            if request.considered == Fp8Layers::default_choice() {
                " with its input quantised by a layernorm; --all-layers weighs the others"
            } else {
                ""
            }
        );
    }
    // The model with every candidate but `keep` in FP8.
    let measure = |runner: Runner, keep: &[String]| -> Result<(Runner, Fp8Measurement)> {
        let fp8 = candidates.iter().filter(|c| !keep.contains(c)).cloned();
        let mut runner = runner.with_fp8(Fp8Layers::only(fp8))?;
        if let Some(scales) = &request.static_scales {
            runner = runner.with_fp8_scales(scales.clone())?;
        }
        let outputs = run_all(&mut runner)?;
        Ok((runner, Fp8Measurement::of(&reference, &outputs, classes)))
    };
    let (mut runner, all) = measure(runner, &[])?;
    let mut costs = Vec::with_capacity(candidates.len());
    let progress = std::io::stderr().is_terminal();
    for (i, layer) in candidates.iter().enumerate() {
        if progress {
            eprint!("\rvitrt: layer {}/{} alone in FP8", i + 1, candidates.len());
        }
        let others: Vec<String> = candidates.iter().filter(|c| *c != layer).cloned().collect();
        let (r, alone) = measure(runner, &others)?;
        runner = r;
        costs.push((layer.clone(), alone.cosine_drop() - f16.cosine_drop()));
    }
    if progress {
        eprintln!();
    }

    // Keep the most costly layers until the rest are predicted to fit, then check by running.
    let fits = |m: &Fp8Measurement| {
        m.cosine_drop() <= budget && (!classes || m.same_top1 >= f16.same_top1)
    };
    let mut keep = first_guess(&costs, budget - f16.cosine_drop());
    let mut by_cost: Vec<&(String, f64)> = costs.iter().collect();
    by_cost.sort_by(|a, b| b.1.total_cmp(&a.1));
    let chosen = loop {
        if keep.len() == candidates.len() {
            // Nothing left in FP8: the model is the f16 one.
            break f16;
        }
        let (r, m) = measure(runner, &keep)?;
        runner = r;
        if fits(&m) {
            break m;
        }
        let next = by_cost
            .iter()
            .find(|(name, _)| !keep.contains(name))
            .map(|(name, _)| name.clone())
            .context("every layer is kept")?;
        keep.push(next);
    };
    let met = fits(&chosen);
    if !met {
        eprintln!(
            "vitrt: no choice meets the budget: f16 alone drops the mean cosine by {:.3e}, more \
             than --max-cosine-drop {budget}",
            f16.cosine_drop()
        );
    }
    Ok(ChoiceReport {
        classes,
        costs,
        keep,
        budget,
        f16,
        all,
        chosen,
        met,
    })
}

impl ChoiceReport {
    /// The choice, as the files save it.
    pub fn choice(&self) -> Fp8Choice {
        Fp8Choice {
            fp8: self
                .costs
                .iter()
                .map(|(name, _)| name)
                .filter(|name| !self.keep.contains(name))
                .cloned()
                .collect(),
            keep: self.keep.clone(),
            max_cosine_drop: self.budget,
            measured: self.chosen,
        }
    }

    /// A row per layer (cost, fp8 or f16), then the f16, all-FP8 and chosen runs' mean and worst
    /// cosine and agreement, on standard output.
    pub fn print(&self) -> Result<()> {
        let agreement = if self.classes {
            "same top-1 class"
        } else {
            "same nearest neighbour"
        };
        outln!("{:<48} {:>12}  {}", "linear layer", "cosine cost", "choice");
        for (name, cost) in &self.costs {
            let choice = if self.keep.contains(name) {
                "f16"
            } else {
                "fp8"
            };
            outln!("{name:<48} {cost:>12.3e}  {choice}");
        }
        outln!("");
        outln!(
            "{:<28} {:>12} {:>12} {:>24}",
            "run (against f32)",
            "mean cosine",
            "worst cosine",
            agreement
        );
        let candidates = self.costs.len();
        let fp8_count = candidates - self.keep.len();
        let rows = [
            ("f16".to_string(), self.f16),
            (format!("every candidate fp8 ({candidates})"), self.all),
            (
                format!("chosen ({fp8_count} of {candidates} fp8)"),
                self.chosen,
            ),
        ];
        for (name, m) in &rows {
            outln!(
                "{name:<28} {:>12.6} {:>12.6} {:>24}",
                m.mean_cosine,
                m.worst_cosine,
                format!("{}/{}", m.same_top1, m.images)
            );
        }
        Ok(())
    }
}
