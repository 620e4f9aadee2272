//! The block layout shared by the row-wise kernels (layernorm, softmax): how many threads own
//! a row, how many rows a block holds, and how much of the row each thread keeps in registers.

use crate::cuda::DevPtr;
use crate::types::DType;

/// (input, output) storage types a row kernel reads and writes: every dtype to itself, and f32
/// into each half type (a half-precision run's f32 residual stream into a layernorm, a bf16
/// run's f32 attention scores into a softmax).
pub(crate) const ROW_STORAGE: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::BF16, DType::BF16),
    (DType::F32, DType::F16),
    (DType::F32, DType::BF16),
];

/// The input storage type of a row kernel writing `dtype` from `x`: f32 where `x` holds f32,
/// else `dtype` (the operand checks then refuse any other pair, none of [`ROW_STORAGE`]).
pub(crate) fn row_input_dtype(x: DevPtr, dtype: DType) -> DType {
    if x.dtype == DType::F32 {
        DType::F32
    } else {
        dtype
    }
}

/// The type whose 16 bytes set a row kernel's vector width: the wider of input and output.
pub(crate) fn widest(input: DType, dtype: DType) -> DType {
    if input.size_bytes() >= dtype.size_bytes() {
        input
    } else {
        dtype
    }
}

/// A row kernel's storage in its instantiation's name: `f16`, or `f32tof16` from an f32 input.
pub(crate) fn row_storage_name(input: DType, dtype: DType) -> String {
    if input == dtype {
        dtype.name().to_string()
    } else {
        format!("{}to{}", input.name(), dtype.name())
    }
}

/// Meta-parameters of a row kernel: the template arguments after the dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RowConfig {
    /// Elements per access: 16 bytes' worth, or 1.
    pub vec: u32,
    /// Warps that share one row.
    pub group_warps: u32,
    /// Rows per block (only with one warp per row).
    pub rows_per_block: u32,
    /// Vectors per thread kept in registers; 0: the row is streamed, and re-read per pass.
    pub cached: u32,
}

/// One warp per row, four rows per block: rows of up to 32 × 8 vectors. Besides the powers of
/// two, 3 and 6 vectors a thread: ViT's hidden size 768 is 6 × 32 vectors of four f32 (the
/// residual stream) and 3 × 32 of eight halves, and registers held for masked-off vectors
/// cost occupancy (measured: benchmarks/NOTES.md, 2026-11-22 "Layernorm").
const WARP_ROWS_PER_BLOCK: u32 = 4;
const WARP_CACHED: [u32; 6] = [1, 2, 3, 4, 6, 8];
/// Eight warps per row: rows of up to 256 × 8 vectors.
const BLOCK_WARPS: u32 = 8;
const BLOCK_CACHED: [u32; 3] = [2, 4, 8];
/// Longer rows: sixteen warps stream the row.
const STREAM_WARPS: u32 = 16;

impl RowConfig {
    /// The layout for rows of `cols` elements whose operands are `pointers`.
    pub fn select(dtype: DType, cols: usize, pointers: &[DevPtr]) -> RowConfig {
        RowConfig::for_alignment(dtype, cols, pointers.iter().all(|p| p.is_aligned(16)))
    }

    /// The layout for rows of `cols` elements whose operands are all 16-byte aligned
    /// (`aligned`) or not: what [`RowConfig::select`] picks, for launchers whose operands are
    /// not all [`DevPtr`]s (e4m3 codes) and for twins that reduce in the program's order.
    pub fn for_alignment(dtype: DType, cols: usize, aligned: bool) -> RowConfig {
        let wide = 16 / dtype.size_bytes();
        let aligned = aligned && cols.is_multiple_of(wide);
        let vec = if aligned { wide } else { 1 };
        let vectors = cols.div_ceil(vec);
        // The smallest power-of-two number of vectors per thread that covers the row.
        let per_thread = |threads: usize| vectors.div_ceil(threads).next_power_of_two() as u32;
        let vec = vec as u32;
        if vectors <= 32 * 8 {
            let needed = vectors.div_ceil(32) as u32;
            RowConfig {
                vec,
                group_warps: 1,
                rows_per_block: WARP_ROWS_PER_BLOCK,
                cached: WARP_CACHED.into_iter().find(|&c| c >= needed).unwrap_or(8),
            }
        } else if vectors <= 32 * BLOCK_WARPS as usize * 8 {
            RowConfig {
                vec,
                group_warps: BLOCK_WARPS,
                rows_per_block: 1,
                cached: per_thread(32 * BLOCK_WARPS as usize),
            }
        } else {
            RowConfig {
                vec,
                group_warps: STREAM_WARPS,
                rows_per_block: 1,
                cached: 0,
            }
        }
    }

    /// Every layout `select` can return for `dtype`.
    pub fn all(dtype: DType) -> Vec<RowConfig> {
        let mut all = Vec::new();
        for vec in [16 / dtype.size_bytes() as u32, 1] {
            for cached in WARP_CACHED {
                all.push(RowConfig {
                    vec,
                    group_warps: 1,
                    rows_per_block: WARP_ROWS_PER_BLOCK,
                    cached,
                });
            }
            for cached in BLOCK_CACHED {
                all.push(RowConfig {
                    vec,
                    group_warps: BLOCK_WARPS,
                    rows_per_block: 1,
                    cached,
                });
            }
            all.push(RowConfig {
                vec,
                group_warps: STREAM_WARPS,
                rows_per_block: 1,
                cached: 0,
            });
        }
        all
    }

    pub fn block_threads(&self) -> u32 {
        32 * self.group_warps * self.rows_per_block
    }

    pub fn blocks(&self, rows: usize) -> usize {
        rows.div_ceil(self.rows_per_block as usize)
    }

    /// The part of a wrapper name after the family and dtype.
    pub fn tag(&self) -> String {
        format!(
            "v{}_w{}_r{}_c{}",
            self.vec, self.group_warps, self.rows_per_block, self.cached
        )
    }

    /// Template arguments after the dtype, in the order of the `.cu` templates.
    pub fn template_args(&self) -> Vec<String> {
        [self.vec, self.group_warps, self.rows_per_block, self.cached]
            .iter()
            .map(u32::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(address: u64, dtype: DType) -> DevPtr {
        DevPtr {
            ptr: address,
            len: 0,
            dtype,
        }
    }

    #[test]
    fn selection_covers_the_row_and_stays_in_the_registry() {
        for dtype in DType::ALL {
            let all = RowConfig::all(dtype);
            for cols in (1..=600).chain([
                768, 1000, 1024, 1536, 2047, 2048, 2049, 4096, 4099, 8192, 16384, 16385, 100_000,
            ]) {
                for address in [0x1000u64, 0x1002, 0x1004, 0x1008] {
                    let config = RowConfig::select(
                        dtype,
                        cols,
                        &[pointer(address, dtype), pointer(0x8000, dtype)],
                    );
                    assert!(
                        all.contains(&config),
                        "{dtype} cols {cols}: {config:?} is not registered"
                    );
                    let vec = config.vec as usize;
                    assert!(
                        cols.is_multiple_of(vec),
                        "{config:?} splits a vector across rows"
                    );
                    assert_eq!(
                        vec > 1,
                        address % 16 == 0 && cols.is_multiple_of(16 / dtype.size_bytes())
                    );
                    if config.cached > 0 {
                        let held = 32 * config.group_warps as usize * config.cached as usize * vec;
                        assert!(
                            held >= cols,
                            "{dtype} cols {cols}: {config:?} holds only {held}"
                        );
                    }
                    assert!(config.block_threads() <= 1024);
                }
            }
        }
    }

    #[test]
    fn vit_shapes_get_one_warp_per_row() {
        // Attention rows of 197 (odd: scalar accesses) and hidden size 768 (16-byte vectors).
        let s = RowConfig::select(DType::F16, 197, &[pointer(0x1000, DType::F16)]);
        assert_eq!((s.vec, s.group_warps, s.cached), (1, 1, 8));
        let l = RowConfig::select(DType::F16, 768, &[pointer(0x1000, DType::F16)]);
        assert_eq!((l.vec, l.group_warps, l.cached), (8, 1, 3));
        // The f32 residual stream into a half-precision layernorm: four-wide vectors.
        let stream = RowConfig::select(DType::F32, 768, &[pointer(0x1000, DType::F32)]);
        assert_eq!((stream.vec, stream.group_warps, stream.cached), (4, 1, 6));
    }
}
