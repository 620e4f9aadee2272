//! Upper bounds on the sizes a caller may ask for: images per batch and an image's size. Every
//! entry point checks against these same constants (the CLI's flags parse against them, and
//! the model and runner refuse anything beyond them), so that a size from a command line, a
//! config file, a Python call or a request from a stranger can neither overflow an index nor
//! ask for terabytes. What is inside the bounds may still not fit in memory: the allocations
//! a size makes (staging, activations, input tensors) are fallible and end in a one-line error.

/// Most images in one forward pass.
pub const MAX_BATCH_SIZE: usize = 65_536;

/// Longest side, in pixels, of the images a model runs on (the preprocessing's own bound on
/// its output size).
pub const MAX_IMAGE_SIDE: usize = crate::preprocess::MAX_OUTPUT_SIDE;

/// Most patches per image: 128 x 128, a 2,048-pixel square at patch size 16. The position
/// table is resampled to this many rows, and attention is quadratic in it.
pub const MAX_PATCHES: usize = 16_384;

/// Checks a batch size against [`MAX_BATCH_SIZE`]; the message says what was asked.
pub fn check_batch_size(batch: usize) -> Result<(), String> {
    if batch == 0 || batch > MAX_BATCH_SIZE {
        return Err(format!(
            "a batch of {batch} images is outside 1 to {MAX_BATCH_SIZE}"
        ));
    }
    Ok(())
}

/// Checks an image size (height, width) for a model of `patch` pixels a patch side against
/// [`MAX_IMAGE_SIDE`] and [`MAX_PATCHES`].
pub fn check_image_size((height, width): (usize, usize), patch: usize) -> Result<(), String> {
    if height == 0 || width == 0 || height > MAX_IMAGE_SIDE || width > MAX_IMAGE_SIDE {
        return Err(format!(
            "images of {height}x{width}: each side must be 1 to {MAX_IMAGE_SIDE} pixels"
        ));
    }
    let patches = (height / patch.max(1)) * (width / patch.max(1));
    if patches > MAX_PATCHES {
        return Err(format!(
            "images of {height}x{width} hold {patches} patches of {patch}x{patch}, more than \
             the limit of {MAX_PATCHES}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_the_bounds_are_refused_without_overflow() {
        assert!(check_batch_size(1).is_ok());
        assert!(check_batch_size(MAX_BATCH_SIZE).is_ok());
        assert!(check_batch_size(0).is_err());
        assert!(check_batch_size(usize::MAX).is_err());
        assert!(check_image_size((224, 224), 16).is_ok());
        assert!(check_image_size((2048, 2048), 16).is_ok());
        let err = check_image_size((2064, 2048), 16).unwrap_err();
        assert!(err.contains("more than the limit of 16384"), "{err}");
        let err = check_image_size((usize::MAX, usize::MAX), 16).unwrap_err();
        assert!(err.contains("1 to 16384 pixels"), "{err}");
        assert!(check_image_size((16_384, 16), 16).is_ok());
    }
}
