//! A batch of resizes: each image's record (the Rust side of resample.cu's `ResampleImage`)
//! and the tap tables they name.

/// One axis of a resize: for each output index, the first input index and the fixed-point
/// weights (22 fractional bits, as PIL's 8-bit resize) of the inputs from there on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapTable {
    pub first: Vec<u32>,
    /// Each output's weights; their count is the output's tap count.
    pub weights: Vec<Vec<i32>>,
}

impl TapTable {
    /// The table of a pass whose size does not change: each output copies its input, which is
    /// what skipping the pass gives (one tap of weight 1.0: (v * 2^22 + 2^21) >> 22 = v).
    pub fn identity(size: usize) -> Self {
        Self {
            first: (0..size as u32).collect(),
            weights: vec![vec![1 << 22]; size],
        }
    }

    pub fn outputs(&self) -> usize {
        self.first.len()
    }

    /// Weight slots per output in the packed table: the most taps any output has.
    fn slots(&self) -> usize {
        self.weights.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// The packed table resample.cu reads: [outputs, slots, first[], count[], weights[][slots]].
    pub fn packed(&self) -> Vec<i32> {
        let (outputs, slots) = (self.outputs(), self.slots());
        let mut out = Vec::with_capacity(2 + outputs * (2 + slots));
        out.push(outputs as i32);
        out.push(slots as i32);
        out.extend(self.first.iter().map(|&f| f as i32));
        out.extend(self.weights.iter().map(|w| w.len() as i32));
        for w in &self.weights {
            out.extend_from_slice(w);
            out.extend(std::iter::repeat_n(0, slots - w.len()));
        }
        out
    }
}

/// One image's resize and crop: where its input, intermediate and output lie, its sizes, the
/// crop window, the pass order and its two tap tables (indices into the batch's tables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResampleImage {
    pub src_offset: usize,
    pub mid_offset: usize,
    pub dst_offset: usize,
    pub channels: usize,
    /// (height, width) of the upright input.
    pub input: (usize, usize),
    /// (height, width) after the resize.
    pub resized: (usize, usize),
    /// (height, width) of the output window.
    pub crop: (usize, usize),
    /// (top, left) of the window in the resized image; negative where it starts outside.
    pub crop_start: (i64, i64),
    /// Pillow's order: the vertical pass first when the height shrinks by more than twice
    /// as many pixels as the width does.
    pub vertical_first: bool,
    /// The first pass's table (vertical when `vertical_first`) and the second's.
    pub first_table: usize,
    pub second_table: usize,
}

impl ResampleImage {
    /// (height, width) of the intermediate the first pass writes.
    pub fn intermediate(&self) -> (usize, usize) {
        if self.vertical_first {
            (self.resized.0, self.input.1)
        } else {
            (self.input.0, self.resized.1)
        }
    }

    pub fn intermediate_len(&self) -> usize {
        let (h, w) = self.intermediate();
        h * w * self.channels
    }

    pub fn output_len(&self) -> usize {
        self.crop.0 * self.crop.1 * self.channels
    }

    pub fn input_len(&self) -> usize {
        self.input.0 * self.input.1 * self.channels
    }
}

/// Bytes of one record in the table resample.cu reads.
pub const RESAMPLE_RECORD_BYTES: usize = 80;

/// A batch of resizes and the tables they use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResampleBatch {
    pub images: Vec<ResampleImage>,
    pub tables: Vec<TapTable>,
}

impl ResampleBatch {
    /// Every table packed one after another, and each one's offset (in i32s).
    pub fn packed_tables(&self) -> (Vec<i32>, Vec<usize>) {
        let mut all = Vec::new();
        let mut offsets = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            offsets.push(all.len());
            all.extend(table.packed());
        }
        (all, offsets)
    }

    /// The records as resample.cu's `ResampleImage` structs, with tables at `offsets`.
    pub fn image_table(&self, offsets: &[usize]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.images.len() * RESAMPLE_RECORD_BYTES);
        for im in &self.images {
            for v in [im.src_offset, im.mid_offset, im.dst_offset] {
                out.extend_from_slice(&(v as i64).to_le_bytes());
            }
            for v in [
                im.input.0 as i32,
                im.input.1 as i32,
                im.resized.0 as i32,
                im.resized.1 as i32,
                im.crop.0 as i32,
                im.crop.1 as i32,
                im.crop_start.0 as i32,
                im.crop_start.1 as i32,
                i32::from(im.vertical_first),
                offsets[im.first_table] as i32,
                offsets[im.second_table] as i32,
                im.channels as i32,
                0,
                0,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    pub fn intermediate_len(&self) -> usize {
        let ends = self
            .images
            .iter()
            .map(|i| i.mid_offset + i.intermediate_len());
        ends.max().unwrap_or(0)
    }

    pub fn output_len(&self) -> usize {
        let ends = self.images.iter().map(|i| i.dst_offset + i.output_len());
        ends.max().unwrap_or(0)
    }

    pub fn input_len(&self) -> usize {
        let ends = self.images.iter().map(|i| i.src_offset + i.input_len());
        ends.max().unwrap_or(0)
    }

    /// Checks every size, table and index, so the kernels stay inside their buffers: the first
    /// problem found.
    pub fn validate(&self) -> Result<(), String> {
        let fits_i32 = |v: usize| v <= i32::MAX as usize;
        for (n, im) in self.images.iter().enumerate() {
            let (Some(first), Some(second)) = (
                self.tables.get(im.first_table),
                self.tables.get(im.second_table),
            ) else {
                return Err(format!("image {n} names a tap table past the batch's"));
            };
            if !matches!(im.channels, 1 | 3) {
                return Err(format!("image {n} has {} channels", im.channels));
            }
            let (vertical, horizontal) = if im.vertical_first {
                (first, second)
            } else {
                (second, first)
            };
            if vertical.outputs() != im.resized.0 || horizontal.outputs() != im.resized.1 {
                return Err(format!(
                    "image {n}'s tap tables do not give its resized size"
                ));
            }
            let reads_inside = |t: &TapTable, size: usize| {
                t.first
                    .iter()
                    .zip(&t.weights)
                    .all(|(&f, w)| f as usize + w.len() <= size)
            };
            if !reads_inside(vertical, im.input.0) || !reads_inside(horizontal, im.input.1) {
                return Err(format!("image {n}'s taps read past its input"));
            }
            let sizes = [im.input, im.resized, im.crop];
            if !sizes
                .iter()
                .all(|&(h, w)| fits_i32(h.saturating_mul(w).saturating_mul(im.channels)))
            {
                return Err(format!("image {n} is too large"));
            }
        }
        let (packed, _) = self.packed_tables();
        if !fits_i32(packed.len()) {
            return Err("the tap tables are too large".into());
        }
        Ok(())
    }
}
