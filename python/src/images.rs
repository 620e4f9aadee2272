//! The images of a call, read out of their Python objects while the GIL is held, so that
//! decoding and preprocessing can run without it.

use numpy::{PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::path::PathBuf;
use vitrt_model::preprocess::{ArenaReserve, DeviceImage, ImageLoader, Loaded, PreprocessError};

/// The images argument as a list of image objects: a sequence of images, a uint8 array
/// [N, H, W, C] (each of its N rows an image), or a one-dimensional numpy array of objects
/// (as Ray Data hands over a column of images of different sizes, or of file contents). A
/// single image is refused rather than taken apart (a string would be iterated by
/// character, an [H, W, 3] array by row).
pub fn collect<'py>(images: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let single = if images.is_instance_of::<PyString>() || images.hasattr("__fspath__")? {
        Some("a path")
    } else if images.is_instance_of::<PyBytes>() {
        Some("bytes")
    } else if let Ok(array) = images.downcast::<PyUntypedArray>() {
        let objects =
            array.ndim() == 1 && array.dtype().getattr("kind")?.extract::<String>()? == "O";
        (array.ndim() != 4 && !objects)
            .then_some("a numpy array that is neither [N, H, W, C] nor one of objects")
    } else if is_pil_image(images)? {
        Some("a PIL image")
    } else {
        None
    };
    if let Some(what) = single {
        return Err(PyTypeError::new_err(format!(
            "images is {what}; give a list of images (paths, file contents as bytes, PIL \
             images or uint8 numpy arrays), e.g. [image], or a uint8 array [N, H, W, C]"
        )));
    }
    images
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(
                "images must be a list of images (paths, file contents as bytes, PIL images or \
                 uint8 numpy arrays)",
            )
        })?
        .collect()
}

/// Whether `object` is a PIL image (told by its class's module, so that PIL is imported only
/// when one is given).
fn is_pil_image(object: &Bound<'_, PyAny>) -> PyResult<bool> {
    let module: String = object.get_type().getattr("__module__")?.extract()?;
    Ok(module.starts_with("PIL.") && object.hasattr("convert")?)
}

/// One image, owned by Rust.
pub enum ImageSource {
    /// An image file: PNG, JPEG or WebP, decoded here.
    File(PathBuf),
    /// The contents of an image file, decoded here as a file's.
    Encoded(Vec<u8>),
    /// Pixels already decoded: HWC 8-bit, `channels` 1 (grey) or 3 (RGB).
    Pixels {
        pixels: Vec<u8>,
        height: usize,
        width: usize,
        channels: usize,
        /// What the caller gave, as errors name it: "from a numpy array" or "from a PIL
        /// image".
        what: &'static str,
    },
}

impl ImageSource {
    /// Reads `images[index]`: a path (str or os.PathLike), the contents of an image file
    /// (bytes), a PIL image (oriented by its EXIF
    /// tag and converted to RGB as transformers' `load_image` does; grey "L" images stay
    /// grey, which the model's conversion replicates to the same RGB), or a uint8 numpy array
    /// [H, W, 3], [H, W, 1] or [H, W].
    ///
    /// `convert_rgb` is the processor's `do_convert_rgb` for an RGB model: a PIL image that
    /// carries a transparent colour (`info["transparency"]`) is then composited onto white,
    /// as transformers' `convert_to_rgb` does and as the decoder does for files.
    pub fn of(
        py: Python<'_>,
        image: &Bound<'_, PyAny>,
        index: usize,
        convert_rgb: bool,
    ) -> PyResult<ImageSource> {
        if image.is_instance_of::<PyString>() || image.hasattr("__fspath__")? {
            return Ok(ImageSource::File(image.extract()?));
        }
        if let Ok(bytes) = image.downcast::<PyBytes>() {
            return Ok(ImageSource::Encoded(bytes.as_bytes().to_vec()));
        }
        if image.downcast::<PyUntypedArray>().is_ok() {
            return Self::from_array(image, index, "from a numpy array");
        }
        if is_pil_image(image)? {
            let array = pil_pixels(py, image, convert_rgb)?;
            return Self::from_array(&array, index, "from a PIL image");
        }
        let type_name = image.get_type().name()?;
        Err(PyTypeError::new_err(format!(
            "images[{index}] is a {type_name}; give a path, the file's contents as bytes, a PIL \
             image or a uint8 numpy array [H, W, 3] or [H, W]"
        )))
    }
}

/// A PIL image's pixels as a uint8 array: transposed by its EXIF orientation and converted
/// to RGB (transformers' `load_image`), then with `convert_rgb` a transparent colour made
/// white (`convert_to_rgb`). A grey "L" image without one stays [H, W]: the model's
/// conversion replicates it to the same RGB.
fn pil_pixels<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    convert_rgb: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let upright = py
        .import("PIL.ImageOps")?
        .call_method1("exif_transpose", (image,))?;
    let mode: String = upright.getattr("mode")?.extract()?;
    let transparent = convert_rgb && upright.getattr("info")?.contains("transparency")?;
    let converted = if mode == "L" && !transparent {
        upright
    } else {
        let rgb = upright.call_method1("convert", ("RGB",))?;
        if convert_rgb && rgb.getattr("info")?.contains("transparency")? {
            let pil = py.import("PIL.Image")?;
            let rgba = rgb.call_method1("convert", ("RGBA",))?;
            let white = pil.call_method1(
                "new",
                ("RGBA", rgba.getattr("size")?, (255u8, 255u8, 255u8)),
            )?;
            pil.call_method1("alpha_composite", (white, rgba))?
                .call_method1("convert", ("RGB",))?
        } else {
            rgb
        }
    };
    py.import("numpy")?.call_method1("asarray", (converted,))
}

impl ImageSource {
    fn from_array(
        array: &Bound<'_, PyAny>,
        index: usize,
        what: &'static str,
    ) -> PyResult<ImageSource> {
        let Ok(bytes) = array.extract::<PyReadonlyArrayDyn<'_, u8>>() else {
            let dtype = array.getattr("dtype")?;
            return Err(PyValueError::new_err(format!(
                "images[{index}] is an image {what} of dtype {dtype}; give uint8 pixels \
                 [H, W, 3] or [H, W]"
            )));
        };
        let (height, width, channels) = match *bytes.shape() {
            [height, width] => (height, width, 1),
            [height, width, channels @ (1 | 3)] => (height, width, channels),
            ref shape => {
                return Err(PyValueError::new_err(format!(
                    "images[{index}] is an image {what} of shape {shape:?}; give uint8 pixels \
                     [H, W, 3] (RGB) or [H, W] (grey)"
                )))
            }
        };
        let pixels = standard_order(&bytes.as_array());
        Ok(ImageSource::Pixels {
            pixels,
            height,
            width,
            channels,
            what,
        })
    }

    /// Decodes (a file), converts, resizes and crops the image into `out` (HWC 8-bit, the
    /// loader's output size). Errors name the image: its path, or its index.
    pub fn load_into(
        &self,
        loader: &mut ImageLoader,
        index: usize,
        out: &mut [u8],
    ) -> Result<(), ImageError> {
        match self {
            ImageSource::File(path) => loader
                .load_file_into(path, out)
                .map(|_| ())
                .map_err(|error| ImageError { index, error }),
            ImageSource::Encoded(bytes) => loader
                .load_bytes_into(bytes, "(bytes)", out)
                .map(|_| ())
                .map_err(|error| ImageError { index, error }),
            ImageSource::Pixels {
                pixels,
                height,
                width,
                channels,
                what,
            } => loader
                .load_pixels_into(pixels, (*height, *width), *channels, what, out)
                .map_err(|error| ImageError { index, error }),
        }
    }
}

impl ImageSource {
    /// As [`ImageSource::load_into`], or, for a JPEG the device decodes, its data written into
    /// `arena` and its description returned (`out` then left to the device).
    pub fn load_for_device(
        &self,
        loader: &mut ImageLoader,
        index: usize,
        out: &mut [u8],
        arena: &dyn ArenaReserve,
    ) -> Result<Option<DeviceImage>, ImageError> {
        let loaded = match self {
            ImageSource::File(path) => loader.load_file_for_device(path, out, arena),
            ImageSource::Encoded(bytes) => {
                loader.load_bytes_for_device(bytes, "(bytes)", out, arena)
            }
            ImageSource::Pixels { .. } => return self.load_into(loader, index, out).map(|()| None),
        };
        match loaded.map_err(|error| ImageError { index, error })? {
            (_, Loaded::Device(image)) => Ok(Some(*image)),
            (_, Loaded::Host(_)) => Ok(None),
        }
    }
}

impl ImageSource {
    /// SigLIP 2 NaFlex's preprocessing of the image (`Siglip2ImageProcessor`'s steps): its own
    /// patch grid under the processor's `max_num_patches`, as `vitrt embed` makes it from a
    /// file. Errors name the image by its index.
    pub fn naflex(
        &self,
        processor: &vitrt_model::preprocess::naflex::NaflexProcessor,
        index: usize,
    ) -> Result<vitrt_model::preprocess::naflex::NaflexImage, ImageError> {
        let limits = vitrt_model::preprocess::ImageLimits::default();
        let made = match self {
            ImageSource::File(path) => processor.preprocess_file(path, &limits),
            ImageSource::Encoded(bytes) => processor.preprocess_bytes(bytes, "(bytes)", &limits),
            ImageSource::Pixels {
                pixels,
                height,
                width,
                channels,
                what,
            } => processor.preprocess_pixels(
                vitrt_model::preprocess::DecodedImage {
                    height: *height,
                    width: *width,
                    channels: *channels,
                    pixels: pixels.clone(),
                },
                what,
            ),
        };
        made.map_err(|error| ImageError { index, error })
    }
}

/// The elements of `array` in C (row-major) order, whatever its memory layout: numpy's own
/// "contiguous" also admits Fortran order, which `as_array` reads right but a plain slice of
/// the memory would not.
pub fn standard_order<T: Copy>(array: &numpy::ndarray::ArrayViewD<'_, T>) -> Vec<T> {
    match array.as_slice() {
        Some(slice) => slice.to_vec(),
        None => array.iter().copied().collect(),
    }
}

/// Values copied and checked per task by [`checked_pixels`] (256 KiB): a batch of images
/// spreads over every core.
const PIXEL_CHUNK: usize = 1 << 16;

/// A float32 pixel array's values in standard (C) order and the index of its first value
/// that is not finite, if any. A contiguous array is copied and checked in one pass on all
/// cores: at batch 64 and 224 pixels that is 38.5 MB, which one core of the GPU machine
/// copied and then walked for NaN in a good part of the 51 ms `forward` spent outside the
/// forward pass (benchmarks/NOTES.md, 2026-11-25 "`Model.forward` from a numpy array").
pub fn checked_pixels(array: &numpy::ndarray::ArrayViewD<'_, f32>) -> (Vec<f32>, Option<usize>) {
    use rayon::prelude::*;
    let first_bad = |chunk: usize, values: &[f32]| {
        let at = values.iter().position(|v| !v.is_finite())?;
        Some(chunk * PIXEL_CHUNK + at)
    };
    match array.as_slice() {
        Some(slice) => {
            let mut values = vec![0.0f32; slice.len()];
            let bad = values
                .par_chunks_mut(PIXEL_CHUNK)
                .zip(slice.par_chunks(PIXEL_CHUNK))
                .enumerate()
                .filter_map(|(chunk, (to, from))| {
                    to.copy_from_slice(from);
                    first_bad(chunk, from)
                })
                .min();
            (values, bad)
        }
        None => {
            let values = standard_order(array);
            let bad = values
                .par_chunks(PIXEL_CHUNK)
                .enumerate()
                .filter_map(|(chunk, part)| first_bad(chunk, part))
                .min();
            (values, bad)
        }
    }
}

/// An image that could not be preprocessed, with its index in the call.
#[derive(Debug, thiserror::Error)]
/// The message is the index; the preprocessing error follows as its cause (so that a printed
/// chain, `{:#}`, says "images[2]: image x.png is corrupt: ...").
#[error("images[{index}]")]
pub struct ImageError {
    index: usize,
    #[source]
    error: PreprocessError,
}
