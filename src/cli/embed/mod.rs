//! `vitrt embed`: image files and folders in, one embedding per image out (safetensors, NPY or
//! JSON Lines), through the same pipeline and batch consumer as `vitrt classify`
//! (`vitrt_engine::batched`), with the runner's graphs outputting only the chosen pooled vector.

pub(crate) mod output;
mod sharded;

use super::common::{flow_after, ModelArgs};
use super::images::ImageArgs;
use super::output_dir::{OutputDir, OutputDirArgs};
use crate::output_file::{write_unit, Contents, OutputFile};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use output::{Format, Sink, WriteError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vitrt_engine::batched::{self, BatchResults};
use vitrt_engine::pipeline::{Flow, InputList};
use vitrt_engine::results::{named_output, normalize};
use vitrt_model::{Output, OutputSet, Pool, VisionModel};
use vitrt_runtime::HostTensor;

#[derive(Args, Debug)]
pub struct EmbedArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Which vector: `projected` (CLIP's projected embedding, SigLIP's attention-pooling head), `pooler`
    /// (transformers' pooler_output), `cls` (the CLS token after the final layernorm) or
    /// `mean` (the mean of the patch tokens). Default: the first of these the checkpoint has.
    #[arg(long, value_parser = parse_pool)]
    pool: Option<Pool>,
    /// Scale each embedding to unit length (L2).
    #[arg(long)]
    normalize: bool,
    /// Where to write the embeddings; the extension (.safetensors, .npy, .jsonl) gives the
    /// format unless --format does. `-`: standard output (JSON Lines unless --format says).
    #[arg(
        long,
        short,
        required_unless_present = "output_dir",
        conflicts_with = "output_dir"
    )]
    output: Option<PathBuf>,
    /// With --output-dir, each shard is a STEM.npy of [n, D] f32 (zeros for an input that
    /// could not be embedded) and a STEM.parquet of each row's key, source, error and a
    /// webdataset sample's .json/.txt members.
    #[command(flatten)]
    sharded: OutputDirArgs,
    /// safetensors: `embeddings` [N, D] f32 and the image paths in its metadata; npy: the
    /// [N, D] array and FILE.images.txt with one path a row; jsonl: one line per image
    /// (embedding or error), written batch by batch. The first two are written whole when
    /// the run ends, holding the images that could be embedded.
    #[arg(long, value_enum, conflicts_with = "output_dir")]
    format: Option<Format>,
    /// Replace --output (and the .npy's paths file) even if read-only.
    #[arg(long, conflicts_with = "output_dir")]
    force: bool,
    #[command(flatten)]
    images: ImageArgs,
}

/// `--pool`'s value: a name of [`Pool::ALL`].
fn parse_pool(name: &str) -> std::result::Result<Pool, String> {
    Pool::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Pool::ALL.iter().map(|p| p.name()).collect();
        format!("not a pool; use one of {}", names.join(", "))
    })
}

/// Where `vitrt embed` runs: a fixed-size model's image pipeline, or SigLIP 2 NaFlex's.
enum RunOn {
    Naflex(vitrt_engine::naflex::NaflexPlacement),
    Pipeline(vitrt_engine::devices::Placement),
}

impl RunOn {
    /// The model the flags name, where it runs.
    fn open(model: &ModelArgs) -> Result<RunOn> {
        Ok(match model.naflex_placement()? {
            Some(placement) => RunOn::Naflex(placement),
            None => RunOn::Pipeline(model.placement()?),
        })
    }

    /// The pool `--pool` asks for, or the checkpoint's default; an error names the ones it
    /// has.
    fn pool(&self, asked: Option<Pool>, name: &str) -> Result<Pool> {
        match self {
            RunOn::Naflex(_) => naflex_pool(asked, name),
            RunOn::Pipeline(placement) => choose_pool(asked, placement.model(), name),
        }
    }

    /// Runs every image of `inputs`, handing each batch's `pool` vectors to `results` in input
    /// order: whether the results stopped the run, and how many images could not be read.
    fn run(
        &mut self,
        inputs: &InputList,
        model: &ModelArgs,
        images: &ImageArgs,
        pool: Pool,
        results: &mut impl BatchResults,
    ) -> Result<(bool, usize)> {
        let outcome = match self {
            RunOn::Naflex(placement) => placement.run(
                inputs,
                &images.options(),
                &|_| Ok(()),
                &[pool.output().name()],
                results,
            )?,
            RunOn::Pipeline(placement) => {
                let outputs = |runner: &mut vitrt_model::Runner| -> Result<()> {
                    runner.set_outputs(OutputSet::of(&[pool.output()]));
                    Ok(())
                };
                placement.run(
                    inputs,
                    &images.options(),
                    model.image_size().is_some(),
                    &outputs,
                    results,
                    false,
                )?
            }
        };
        Ok((outcome.stopped, outcome.stats.failed))
    }
}

/// The pool of a SigLIP 2 NaFlex checkpoint: its attention-pooling head's vector, which
/// Siglip2Model's `image_embeds` and `pooler_output` both are (`projected`, the default, or
/// `pooler`), or `mean`, each image's mean of `last_hidden_state` over its own patches (as
/// `Siglip2ForImageClassification` pools). It has no CLS token.
fn naflex_pool(asked: Option<Pool>, name: &str) -> Result<Pool> {
    match asked {
        None | Some(Pool::Projected) => Ok(Pool::Projected),
        Some(Pool::Pooler) => Ok(Pool::Pooler),
        Some(Pool::Mean) => Ok(Pool::Mean),
        Some(pool) => bail!(
            "--pool {}: {name} (SigLIP 2 NaFlex) has no {}; it has --pool projected, pooler, \
             mean",
            pool.name(),
            pool.output().name()
        ),
    }
}

/// The pool `--pool` asks for, or the checkpoint's default; an error names the ones it has.
fn choose_pool(asked: Option<Pool>, model: &VisionModel, name: &str) -> Result<Pool> {
    Pool::choose(asked, model).map_err(|e| match asked {
        Some(pool) => {
            let names: Vec<&str> = e.available.iter().map(|p| p.name()).collect();
            anyhow!(
                "--pool {}: {name} (a {} checkpoint) has no {}; it has --pool {}",
                pool.name(),
                e.family,
                pool.output().name(),
                names.join(", ")
            )
        }
        None => anyhow!("the checkpoint has no vector to embed images as"),
    })
}

impl Format {
    /// The format `--format` names, else the one `path`'s extension names.
    pub(crate) fn of(asked: Option<Format>, path: &Path) -> Result<Format> {
        if let Some(format) = asked {
            return Ok(format);
        }
        if path.as_os_str() == "-" {
            return Ok(Format::Jsonl);
        }
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match extension.to_ascii_lowercase().as_str() {
            "safetensors" => Ok(Format::Safetensors),
            "npy" => Ok(Format::Npy),
            "jsonl" => Ok(Format::Jsonl),
            _ => bail!(
                "cannot tell the format of {} from its extension: name a .safetensors, .npy or \
                 .jsonl file, or use --format",
                path.display()
            ),
        }
    }
}

/// The NPY file's list of paths: `FILE.images.txt`.
fn paths_file(npy: &Path) -> PathBuf {
    names_file(npy, "images")
}

/// The NPY file's list of row names, `FILE.{what}.txt`.
pub(crate) fn names_file(npy: &Path, what: &str) -> PathBuf {
    let mut name = npy.as_os_str().to_owned();
    name.push(format!(".{what}.txt"));
    PathBuf::from(name)
}

pub fn run(args: EmbedArgs) -> Result<ExitCode> {
    args.model.count_devices_ahead();
    let output = match (&args.output, args.sharded.dir()?) {
        (_, Some(dir)) => return run_sharded(&args, dir),
        (Some(output), None) => output.clone(),
        (None, None) => bail!("name an --output file or an --output-dir"),
    };
    // Before any work: a run that cannot keep its result should not start.
    let format = Format::of(args.format, &output)?;
    let target = match format {
        Format::Jsonl => OutputFile::check(&output, Contents::Text, true, args.force)?,
        Format::Safetensors => OutputFile::check(&output, Contents::Binary, true, args.force)?,
        Format::Npy => {
            if output.as_os_str() == "-" {
                bail!(
                    "--format npy cannot go to `-`: it writes a second file beside the array \
                     (FILE.images.txt); name a file"
                );
            }
            OutputFile::check(&output, Contents::Binary, false, args.force)?
        }
    };
    let paths_target = match format {
        Format::Npy => Some(OutputFile::check(
            &paths_file(&output),
            Contents::Text,
            false,
            args.force,
        )?),
        _ => None,
    };
    let inputs = args.images.collect()?;
    target.check_not_among(&inputs.paths)?;
    if let Some(paths_target) = &paths_target {
        paths_target.check_not_among(&inputs.paths)?;
    }
    if format == Format::Npy {
        // The names the paths file holds: a file's path, a sample's shard and key.
        if let Some(name) = (0..inputs.len())
            .map(|i| inputs.name(i))
            .find(|name| name.contains('\n'))
        {
            bail!(
                "{name:?} holds a line break, which the .npy's paths file (one a line) cannot \
                 hold: use .safetensors or .jsonl"
            );
        }
    }
    let mut run_on = RunOn::open(&args.model)?;
    let pool = run_on.pool(args.pool, args.model.name())?;
    let sink = match format {
        Format::Jsonl => Sink::lines(target.open_streaming()?),
        Format::Safetensors | Format::Npy => Sink::whole(),
    };
    let mut embedder = Embedder {
        sink,
        inputs: &inputs,
        output: pool.output(),
        normalize: args.normalize,
        fail_fast: args.images.fail_fast,
        not_finite: 0,
    };
    let (stopped, unread) = run_on.run(&inputs, &args.model, &args.images, pool, &mut embedder)?;
    // Stopped by the results: the reader closed the output, unless --fail-fast stopped at an
    // image whose embedding is not finite (the count below fails).
    if stopped && !(args.images.fail_fast && embedder.not_finite > 0) {
        return Ok(ExitCode::SUCCESS);
    }
    let failed = unread + embedder.not_finite;
    let total = inputs.paths.len();
    match embedder.sink {
        Sink::Lines(lines) => lines.finish()?,
        Sink::Whole(whole) => {
            if whole.images.is_empty() {
                bail!(
                    "{failed} of {total} images could not be embedded; nothing written to {}",
                    target.display()
                );
            }
            let bytes = match format {
                Format::Safetensors => {
                    let metadata = output::Metadata {
                        model: args.model.name(),
                        pool: pool.name(),
                        normalized: args.normalize,
                        rows: "images",
                    };
                    whole.safetensors_bytes(&metadata)?
                }
                _ => whole.npy_bytes(),
            };
            // The array and its paths file as a unit, the array (what readers open first)
            // renamed last.
            let names = whole.paths_lines();
            match &paths_target {
                Some(paths_target) => {
                    write_unit(&[(paths_target, names.as_bytes()), (&target, &bytes)])?
                }
                None => target.write(&bytes)?,
            }
            if !target.is_stdout() {
                eprintln!(
                    "wrote {} ({} embeddings of {}, --pool {})",
                    target.display(),
                    whole.images.len(),
                    whole.dim,
                    pool.name()
                );
            }
        }
    }
    batched::check_failures(failed, total, args.images.fail_fast, "embedded")?;
    Ok(ExitCode::SUCCESS)
}

/// `vitrt embed --output-dir DIR`: the shards not yet written, each written as it completes.
fn run_sharded(args: &EmbedArgs, dir: &Path) -> Result<ExitCode> {
    let all = args.images.collect()?;
    let model = args.model.batch_invariant();
    let mut options = model.recorded();
    options.push((
        "pool",
        args.pool.map_or("default", |p| p.name()).to_string(),
    ));
    options.push(("normalize", args.normalize.to_string()));
    options.extend(args.images.recorded());
    let out = OutputDir::open(
        dir,
        "embed",
        &options,
        &all,
        args.sharded.shard_size(),
        &["npy", "parquet"],
    )?;
    if !out.announce() {
        return Ok(ExitCode::SUCCESS);
    }
    let to_do = out.to_do();
    let ranges: Vec<_> = to_do.iter().map(|s| s.inputs.clone()).collect();
    let inputs = all.select(&ranges);
    let mut run_on = RunOn::open(&model)?;
    let pool = run_on.pool(args.pool, model.name())?;
    let mut embedder =
        sharded::ShardedEmbedder::new(&out, &inputs, to_do, pool.output(), args.normalize);
    let (stopped, _) = run_on.run(&inputs, &model, &args.images, pool, &mut embedder)?;
    if !stopped {
        embedder.finish()?;
    }
    eprintln!(
        "wrote {} shards to {} ({} of {} inputs could not be embedded, --pool {})",
        embedder.written,
        dir.display(),
        embedder.failed(),
        inputs.len(),
        pool.name()
    );
    batched::check_failures(
        embedder.failed(),
        inputs.len(),
        args.images.fail_fast,
        "embedded",
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Turns each image's pooled vector into its embedding and hands it to the sink.
struct Embedder<'a> {
    sink: Sink<'a>,
    inputs: &'a InputList,
    output: Output,
    normalize: bool,
    /// Stop at the first image that fails, a non-finite embedding included.
    fail_fast: bool,
    /// Images whose embedding held a value that is not finite (reported as failures).
    not_finite: usize,
}

/// A batch's pooled vectors, `[count, dim]`, and `dim` (0 when no image of the batch ran).
pub(crate) fn pooled_rows(
    outputs: Option<Vec<HostTensor>>,
    output: Output,
    count: usize,
) -> Result<(Option<HostTensor>, usize)> {
    let name = output.name();
    let pooled = outputs.map(|o| named_output(o, name)).transpose()?;
    let dim = match &pooled {
        Some(t) if t.shape.len() == 2 && t.shape[0] == count => t.shape[1],
        Some(t) => bail!(
            "the model's {name} has shape {:?}, not [{count}, dim]",
            t.shape
        ),
        None => 0,
    };
    Ok((pooled, dim))
}

impl BatchResults for Embedder<'_> {
    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> Result<Flow> {
        let (pooled, dim) = pooled_rows(outputs, self.output, count)?;
        let not_finite = self.not_finite;
        let written = self
            .write_rows(first, count, failures, pooled.as_ref(), dim)
            .and_then(|()| self.sink.end_batch());
        let flow = flow_after(written, "writing the embeddings")?;
        if self.fail_fast && self.not_finite > not_finite {
            return Ok(Flow::Stop);
        }
        Ok(flow)
    }
}

impl Embedder<'_> {
    fn write_rows(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        pooled: Option<&HostTensor>,
        dim: usize,
    ) -> Result<(), WriteError> {
        for k in 0..count {
            let index = first + k;
            let image = self.inputs.name(index);
            if let Some((_, why)) = failures.iter().find(|(i, _)| *i == index) {
                self.sink.failed(&image, why)?;
                continue;
            }
            let Some(pooled) = pooled else {
                unreachable!("a batch with images to embed is submitted")
            };
            let mut row = pooled.data[k * dim..][..dim].to_vec();
            if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
                let why = format!(
                    "{image}: the model gave a non-finite value ({bad}); `vitrt parity` finds \
                     the first layer that does"
                );
                eprintln!("vitrt: {why}");
                self.not_finite += 1;
                self.sink.failed(&image, &why)?;
                if self.fail_fast {
                    // The first failure in input order: nothing after it.
                    return Ok(());
                }
                continue;
            }
            if self.normalize {
                normalize(&mut row);
            }
            self.sink.embedded(&image, &row)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_comes_from_the_flag_then_the_extension() {
        let of = |asked, path: &str| Format::of(asked, Path::new(path));
        assert_eq!(of(None, "a.safetensors").unwrap(), Format::Safetensors);
        assert_eq!(of(None, "a.NPY").unwrap(), Format::Npy);
        assert_eq!(of(None, "a.jsonl").unwrap(), Format::Jsonl);
        assert_eq!(of(None, "-").unwrap(), Format::Jsonl);
        assert_eq!(of(Some(Format::Npy), "a.bin").unwrap(), Format::Npy);
        let err = of(None, "a.bin").unwrap_err().to_string();
        assert!(err.contains("--format"), "{err}");
    }
}
