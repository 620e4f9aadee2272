//! Patchify + prefix rows launcher.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("patchify.cu");
const THREADS: u32 = 256;
/// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
const MAX_BLOCKS: usize = 4096;

kernel_params! {
    /// patchify_with_prefix's parameters.
    struct PatchifyParams {
        pixels: const_ptr,
        batch: i32,
        channels: i32,
        height: i32,
        width: i32,
        patch: i32,
        prefix: const_ptr,
        prefix_rows: i32,
        pos: const_ptr,
        hidden: i32,
        tokens_per_image: i32,
        patches: mut_ptr,
        tokens: mut_ptr,
    }
}

/// The pixel tensor's shape and the patch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Image {
    pub batch: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub patch: usize,
}

impl Image {
    fn patches_per_image(&self) -> usize {
        (self.height / self.patch) * (self.width / self.patch)
    }

    fn row_len(&self) -> usize {
        self.channels * self.patch * self.patch
    }
}

/// `tokens`: the token tensor's storage type, `dtype` or f32 (a residual stream kept in f32).
fn instantiation(dtype: DType, tokens: DType, vec: u32) -> Instantiation {
    let tokens_suffix = if tokens == dtype {
        String::new()
    } else {
        format!("_t{}", tokens.name())
    };
    Instantiation {
        name: format!(
            "patchify_with_prefix_{}_v{vec}_t{THREADS}{tokens_suffix}",
            dtype.name()
        ),
        family: "patchify",
        source: SOURCE,
        headers: &[],
        function: "patchify_with_prefix",
        template_args: vec![
            dtype.cuda_type().into(),
            tokens.cuda_type().into(),
            vec.to_string(),
            THREADS.to_string(),
        ],
        params: PatchifyParams {
            pixels: DevPtr::of_type(DType::F32),
            batch: 0,
            channels: 0,
            height: 0,
            width: 0,
            patch: 0,
            prefix: DevPtr::of_type(dtype),
            prefix_rows: 0,
            pos: DevPtr::of_type(dtype),
            hidden: 0,
            tokens_per_image: 0,
            patches: DevPtr::of_type(dtype),
            tokens: DevPtr::of_type(tokens),
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// 4 pixels (16 bytes) per access when every patch row starts 16-byte aligned in the image
/// and its 4 outputs are aligned in the patch rows; else 1.
fn select_vec(dtype: DType, image: &Image, pixels: DevPtr, patches: DevPtr) -> u32 {
    let vectorisable = image.patch.is_multiple_of(4)
        && image.width.is_multiple_of(4)
        && pixels.is_aligned(16)
        && patches.is_aligned(4 * dtype.size_bytes() as u64);
    if vectorisable {
        4
    } else {
        1
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        let token_types: &[DType] = match dtype {
            DType::F32 => &[DType::F32],
            _ => &[dtype, DType::F32],
        };
        for &tokens in token_types {
            all.extend([4, 1].map(|vec| instantiation(dtype, tokens, vec)));
        }
    }
    all
}

/// The `prefix_rows` tokens ahead of the patches (`[S, hidden]`, S may be 0, and then `rows`
/// is not read).
#[derive(Clone, Copy, Debug)]
pub struct PrefixRows {
    pub rows: DevPtr,
    pub count: usize,
}

/// Pixels are f32 `[B, C, H, W]`; writes the patch rows `[B·N, C·P·P]` in `dtype` (as
/// `cpu::patchify`) and the S prefix rows of every image of the token tensor `[B, T, hidden]`:
/// `tokens[b, j, :] = prefix[j, :] + pos[j, :]` for `j < S` (as `cpu::write_prefix_rows`).
/// The token tensor holds `dtype` or f32.
#[allow(clippy::too_many_arguments)]
pub fn patchify_with_prefix(
    gpu: &Gpu,
    dtype: DType,
    pixels: DevPtr,
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    patch: usize,
    prefix: PrefixRows,
    pos: DevPtr,
    hidden: usize,
    tokens_per_image: usize,
    patches: DevPtr,
    tokens: DevPtr,
) -> Result<(), KernelError> {
    let image = Image {
        batch,
        channels,
        height,
        width,
        patch,
    };
    launch(
        gpu,
        dtype,
        pixels,
        image,
        prefix,
        pos,
        hidden,
        tokens_per_image,
        patches,
        tokens,
    )
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    dtype: DType,
    pixels: DevPtr,
    image: Image,
    prefix: PrefixRows,
    pos: DevPtr,
    hidden: usize,
    tokens_per_image: usize,
    patches: DevPtr,
    tokens: DevPtr,
) -> Result<(), KernelError> {
    let Image {
        batch,
        channels,
        height,
        width,
        patch,
    } = image;
    if patch == 0 || channels == 0 || hidden == 0 || tokens_per_image == 0 {
        return Err(invalid!(
            "patchify needs patch, channels, hidden and tokens per image of at least 1 \
             (got {patch}, {channels}, {hidden}, {tokens_per_image})"
        ));
    }
    if height < patch || width < patch {
        return Err(invalid!(
            "a {height}x{width} image holds no {patch}x{patch} patch"
        ));
    }
    if batch == 0 {
        return Ok(());
    }
    let product = |factors: &[usize], what: &str| {
        factors
            .iter()
            .try_fold(1usize, |acc, &f| acc.checked_mul(f))
            .ok_or_else(|| invalid!("patchify {what} overflows"))
    };
    pixels.expect(
        "patchify pixels",
        DType::F32,
        product(&[batch, channels, height, width], "pixels")?,
    )?;
    let patch_elements = product(
        &[batch, image.patches_per_image(), image.row_len()],
        "patches",
    )?;
    patches.expect("patchify patch rows", dtype, patch_elements)?;
    let prefix_elements = product(&[prefix.count, hidden], "prefix rows")?;
    if prefix.count > 0 {
        prefix.rows.expect("prefix rows", dtype, prefix_elements)?;
    }
    if tokens_per_image != prefix.count + image.patches_per_image() {
        return Err(invalid!(
            "{tokens_per_image} tokens per image are not {} prefix rows and {} patches",
            prefix.count,
            image.patches_per_image()
        ));
    }
    pos.expect(
        "position embedding",
        dtype,
        product(&[tokens_per_image, hidden], "positions")?,
    )?;
    // The token tensor holds dtype, or f32 (the residual stream of a half-precision run).
    let tokens_dtype = if tokens.dtype == DType::F32 {
        DType::F32
    } else {
        dtype
    };
    tokens.expect(
        "token tensor",
        tokens_dtype,
        product(&[batch, tokens_per_image, hidden], "tokens")?,
    )?;

    let vec = select_vec(dtype, &image, pixels, patches);
    // The copy walks patch rows (one per block, gridDim.x apart) with 32-bit row indices.
    let rows = product(&[batch, image.patches_per_image()], "patch rows")?;
    if rows > i32::MAX as usize {
        return Err(invalid!(
            "patchify of {rows} patch rows: at most 2^31 - 1 a launch (split the batch)"
        ));
    }
    let prefix_total = product(&[batch, prefix_elements], "prefix rows")?;
    let blocks = rows
        .max(prefix_total.div_ceil(THREADS as usize))
        .min(MAX_BLOCKS) as u32;
    // The second row of blocks writes the prefix rows; without any, one row of blocks.
    let grid_y = if prefix.count > 0 { 2 } else { 1 };
    gpu.launch(
        &instantiation(dtype, tokens_dtype, vec),
        LaunchDims {
            grid: (blocks, grid_y, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &PatchifyParams {
            pixels,
            batch: to_i32(batch, "batch")?,
            channels: to_i32(channels, "channels")?,
            height: to_i32(height, "height")?,
            width: to_i32(width, "width")?,
            patch: to_i32(patch, "patch")?,
            prefix: prefix.rows,
            prefix_rows: to_i32(prefix.count, "prefix rows")?,
            pos,
            hidden: to_i32(hidden, "hidden")?,
            tokens_per_image: to_i32(tokens_per_image, "tokens per image")?,
            patches,
            tokens,
        }
        .args(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_only_picks_registered_instantiations() {
        let registered = instantiations();
        for dtype in DType::ALL {
            for (patch, width, address) in [
                (16, 224, 0x1000u64),
                (14, 224, 0x1000),
                (16, 226, 0x1000),
                (16, 224, 0x1004),
            ] {
                let image = Image {
                    batch: 1,
                    channels: 3,
                    height: 224,
                    width,
                    patch,
                };
                let pixels = DevPtr {
                    ptr: address,
                    len: 0,
                    dtype: DType::F32,
                };
                let patches = DevPtr {
                    ptr: 0x10000,
                    len: 0,
                    dtype,
                };
                let vec = select_vec(dtype, &image, pixels, patches);
                assert_eq!(vec == 4, patch == 16 && width == 224 && address == 0x1000);
                for tokens in [dtype, DType::F32] {
                    assert!(registered.contains(&instantiation(dtype, tokens, vec)));
                }
            }
        }
    }
}
