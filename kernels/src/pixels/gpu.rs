//! Pixel expansion launcher: 8-bit HWC images into the model's f32 NCHW input through a
//! per-channel table (pixels.cu; CPU twin `cpu::expand_pixels`).

use super::batch::PixelBatch;
use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, DeviceBuffer, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("pixels.cu");
const THREADS: u32 = 256;
/// Channel counts the models take: greyscale and RGB.
const CHANNELS: [usize; 2] = [1, 3];

kernel_params! {
    /// expand_pixels's parameters.
    struct ExpandPixelsParams {
        src: byte_ptr,
        table: const_ptr,
        dst: mut_ptr,
        plane: i32,
    }
}

fn instantiation(channels: usize, vec: u32) -> Instantiation {
    Instantiation {
        name: format!("expand_pixels_c{channels}_v{vec}_t{THREADS}"),
        family: "pixels",
        source: SOURCE,
        headers: &[],
        function: "expand_pixels",
        template_args: vec![channels.to_string(), vec.to_string(), THREADS.to_string()],
        params: ExpandPixelsParams {
            src: 0,
            table: DevPtr::of_type(DType::F32),
            dst: DevPtr::of_type(DType::F32),
            plane: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

/// Four pixels a thread (16-byte stores into each plane) when every plane starts 16-byte
/// aligned; else one.
fn select_vec(plane: usize, dst: DevPtr) -> u32 {
    if plane.is_multiple_of(4) && dst.is_aligned(16) {
        4
    } else {
        1
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    CHANNELS
        .iter()
        .flat_map(|&c| [4, 1].map(|vec| instantiation(c, vec)))
        .collect()
}

/// `dst[b, c, y, x] = table[c * 256 + src[b, y, x, c]]`: expands the 8-bit images at the
/// start of `src` into f32 planes (as `cpu::expand_pixels`). `table` holds 256 values per
/// channel.
pub fn expand_pixels(
    gpu: &Gpu,
    src: &DeviceBuffer,
    shape: PixelBatch,
    table: DevPtr,
    dst: DevPtr,
) -> Result<(), KernelError> {
    gpu.check_owner(src)?;
    let PixelBatch {
        batch,
        height,
        width,
        channels,
    } = shape;
    if !CHANNELS.contains(&channels) {
        return Err(invalid!(
            "pixel expansion takes 1 or 3 channels, not {channels}"
        ));
    }
    let plane = height
        .checked_mul(width)
        .filter(|&p| {
            p.checked_mul(channels)
                .is_some_and(|n| n <= i32::MAX as usize)
        })
        .ok_or_else(|| invalid!("a {height}x{width} image is too large to expand"))?;
    let total = plane
        .checked_mul(channels)
        .and_then(|n| n.checked_mul(batch))
        .ok_or_else(|| invalid!("{batch} images of {plane} pixels overflow"))?;
    src.check_range(0, total, "pixel expansion source")?;
    table.expect("pixel table", DType::F32, channels * 256)?;
    dst.expect("expanded pixels", DType::F32, total)?;
    if total == 0 {
        return Ok(());
    }
    if batch > 65_535 {
        return Err(invalid!(
            "pixel expansion of {batch} images: at most 65535 a launch"
        ));
    }
    let vec = select_vec(plane, dst);
    let per_block = THREADS as usize * vec as usize;
    gpu.launch(
        &instantiation(channels, vec),
        LaunchDims {
            grid: (plane.div_ceil(per_block) as u32, batch as u32, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &ExpandPixelsParams {
            src: src.ptr,
            table,
            dst,
            plane: to_i32(plane, "pixels per image")?,
        }
        .args(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_selectable_config_is_registered() {
        let registered: Vec<String> = instantiations().into_iter().map(|i| i.name).collect();
        for channels in CHANNELS {
            for vec in [4, 1] {
                assert!(registered.contains(&instantiation(channels, vec).name));
            }
        }
        assert_eq!(registered.len(), 4);
    }
}
