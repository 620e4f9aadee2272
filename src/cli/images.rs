//! The flags of the commands over many image files (`vitrt classify`, `vitrt embed`, `vitrt
//! zero-shot`): which images, and how the engine's pipeline reads and batches them
//! (`vitrt_engine::batched::ImageOptions`).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use vitrt_engine::batched::{DecodeOn, ImageOptions};
use vitrt_engine::pipeline::{self, DatasetOptions, InputList};
use vitrt_model::preprocess::ImageLimits;

/// Where JPEGs are decoded (`--decode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DecodeArg {
    Cpu,
    Gpu,
    GpuIdct,
}

impl From<DecodeArg> for DecodeOn {
    fn from(arg: DecodeArg) -> DecodeOn {
        match arg {
            DecodeArg::Cpu => DecodeOn::Cpu,
            DecodeArg::Gpu => DecodeOn::Gpu,
            DecodeArg::GpuIdct => DecodeOn::GpuIdct,
        }
    }
}

/// The images to run on and how they are read.
#[derive(Args, Debug)]
pub struct ImageArgs {
    /// Images per forward pass. Default: 64 on a GPU, 8 on the CPU.
    #[arg(long, value_parser = super::common::parse_batch_size)]
    batch_size: Option<usize>,
    /// Decoding threads. Default: the available cores on a GPU, half of them on the CPU (whose
    /// forward pass needs them too).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: Option<u32>,
    /// Read more image paths from this file, one a line (`-`: standard input).
    #[arg(long, value_name = "LIST")]
    files_from: Option<PathBuf>,
    /// Stop at the first image that cannot be read (in input order) instead of reporting it
    /// and going on.
    #[arg(long)]
    pub fail_fast: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// No progress bar (it is shown only when stderr is a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Where JPEGs are decoded: `gpu` reads the files on the host and decodes them on the GPU
    /// (Huffman decoding of baseline files, IDCT, upsampling, colour, orientation, resize,
    /// crop) with the host's exact pixels; `gpu-idct` leaves the Huffman decoding to the host
    /// and the rest to the GPU; `cpu` decodes everything on the host. Default: `gpu` on a CUDA
    /// device (files the GPU path cannot decode exactly go through the host decoder), `cpu`
    /// elsewhere.
    #[arg(long, value_enum)]
    decode: Option<DecodeArg>,
    /// The Parquet column of the images: a struct with a binary `bytes` field (Hugging Face
    /// `datasets`) or a binary column (img2dataset). Default: the first such column.
    #[arg(long, value_name = "NAME")]
    image_column: Option<String>,
    /// Image files (JPEG, PNG, WebP) and folders, walked for .jpg, .jpeg, .png and .webp
    /// files in name order; webdataset shards (.tar: each sample's .jpg, .jpeg, .png or .webp
    /// member) and Parquet files of image bytes (.parquet), by path, glob or brace range
    /// (`shards/{00000..00099}.tar`, quoted so that the shell leaves it to vitrt).
    images: Vec<PathBuf>,
}

/// The limits an image is held to before it is decoded (decompression bombs): shared by the
/// commands over files and `vitrt serve`.
#[derive(Args, Debug, Clone, Copy)]
pub struct LimitArgs {
    /// Refuse images of more pixels than this before decoding them (decompression bombs).
    #[arg(long, default_value_t = ImageLimits::default().max_pixels)]
    max_pixels: u64,
    /// Refuse image files larger than this many bytes without reading them whole.
    #[arg(long, default_value_t = ImageLimits::default().max_file_bytes)]
    max_file_size: u64,
    /// Refuse images whose decoded pixels would take more bytes than this (width x height x
    /// channels x bytes per sample), before decoding them.
    #[arg(long, default_value_t = ImageLimits::default().max_decoded_bytes)]
    max_decoded_bytes: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> ImageLimits {
        ImageLimits {
            max_pixels: self.max_pixels,
            max_file_bytes: self.max_file_size,
            max_decoded_bytes: self.max_decoded_bytes,
        }
    }
}

impl ImageArgs {
    /// The images named and listed, in order; an error when there are none.
    pub fn collect(&self) -> Result<InputList> {
        let datasets = DatasetOptions {
            image_column: self.image_column.clone(),
        };
        let inputs =
            pipeline::collect_inputs_with(&self.images, self.files_from.as_deref(), &datasets)?;
        if inputs.paths.is_empty() {
            bail!(if self.images.is_empty() && self.files_from.is_none() {
                "no images given: name image files or folders, or use --files-from".to_string()
            } else {
                "no images found (folders are searched for .jpg, .jpeg, .png and .webp files; \
                 .tar and .parquet shards give their samples)"
                    .to_string()
            });
        }
        Ok(inputs)
    }

    /// The flags that decide which inputs are read and how, by name, for `--output-dir`'s
    /// manifest (the inputs themselves are recorded by their names).
    pub fn recorded(&self) -> Vec<(&'static str, String)> {
        let limits = self.limits.limits();
        vec![
            (
                "image-column",
                self.image_column
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            ),
            ("max-pixels", limits.max_pixels.to_string()),
            ("max-file-size", limits.max_file_bytes.to_string()),
            ("max-decoded-bytes", limits.max_decoded_bytes.to_string()),
        ]
    }

    /// The engine's options for what the flags say.
    pub fn options(&self) -> ImageOptions {
        ImageOptions {
            batch_size: self.batch_size,
            workers: self.workers.map(|w| w as usize),
            fail_fast: self.fail_fast,
            limits: self.limits.limits(),
            quiet: self.quiet,
            decode: self.decode.map(DecodeOn::from),
        }
    }
}
