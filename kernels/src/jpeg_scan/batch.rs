//! A batch of baseline JPEG scans as the host leaves them (entropy-coded bytes with the
//! stuffed zero bytes taken out, split at restart markers, and the Huffman tables as the file
//! defines them), and the descriptor tables scan.cu reads: the Rust side of the structs at the
//! top of scan.cu, written byte for byte.

/// Bytes of entropy-coded data one chunk holds: the unit one thread of the program decodes
/// before it meets the next chunk's decoder (see scan.cu). Measured in
/// benchmarks/NOTES.md, "JPEG entropy decoding on the GPU".
pub const CHUNK_BYTES: usize = 128;
/// Threads of the program's CTA, one CTA an image; the twin splits an image's chunks into the
/// same ranges, so both find the same synchronisation points. 1024: a 12-megapixel scan's
/// 25,000 chunks are 25 a thread (benchmarks/NOTES.md, 2026-11-27 "JPEG entropy decoding on
/// the GPU").
pub const THREADS: usize = 1024;
/// Bytes of one Huffman table in the data: the counts of codes of each length 1 to 16, then
/// 256 symbol values (as the file's DHT segment lists them, zero-padded).
pub const TABLE_BYTES: usize = 16 + 256;
/// Bytes the kernel may read past an image's stream: its 64-bit reads of aligned words.
pub const STREAM_PADDING: usize = 8;
/// Bytes of one image record, one segment record and one chunk record in scan.cu's tables,
/// and of one chunk's decoding state in the program's scratch buffer.
pub const IMAGE_RECORD_BYTES: usize = 80;
pub const SEGMENT_RECORD_BYTES: usize = 16;
pub const CHUNK_RECORD_BYTES: usize = 8;
pub const CHUNK_STATE_BYTES: usize = 32;
/// The most blocks one MCU holds (JPEG's limit, libjpeg's `D_MAX_BLOCKS_IN_MCU`).
pub const MAX_BLOCKS_IN_MCU: usize = 10;
/// The largest stream a scan may hold: bit positions are 32-bit.
pub const MAX_STREAM_BYTES: usize = (1 << 28) - 64;

/// One restart interval of a scan: bytes `start .. end` of the image's stream (from its
/// first byte), holding MCUs `first_mcu .. first_mcu + mcus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanSegment {
    pub start: u32,
    pub end: u32,
    pub first_mcu: u32,
    pub mcus: u32,
}

/// One block of the MCU: which of the scan's components (its slot, 0 to 2) and where in that
/// component's `h` x `v` blocks of the MCU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McuBlock {
    pub slot: u8,
    pub dx: u8,
    pub dy: u8,
}

/// One image's scan: every component interleaved in one baseline sequential scan (or a lone
/// grey component), entropy-coded with Huffman tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanImage {
    /// Its index in the JPEG batch (`jpeg::JpegBatch::images`): its status word.
    pub image: usize,
    /// The JPEG batch's components (indices into its component list) in the scan's order;
    /// their coefficient blocks are where the decoded coefficients go.
    pub components: Vec<usize>,
    /// Per slot: its DC and AC table (indices among this image's tables), and its sampling
    /// factors in the MCU (1 and 1 for a lone component).
    pub dc_table: Vec<u8>,
    pub ac_table: Vec<u8>,
    pub sampling: Vec<(u8, u8)>,
    /// The blocks of one MCU in the order the scan codes them.
    pub mcu: Vec<McuBlock>,
    pub mcus_per_row: u32,
    /// Byte offset of the stream in the data buffer: a multiple of 4, with
    /// [`STREAM_PADDING`] readable bytes past its end.
    pub stream_at: usize,
    pub stream_bytes: usize,
    /// Byte offset of its `tables` Huffman tables ([`TABLE_BYTES`] each) in the data buffer.
    pub tables_at: usize,
    pub tables: usize,
    pub segments: Vec<ScanSegment>,
}

impl ScanImage {
    /// Its chunks: for each segment, [`CHUNK_BYTES`] at a time to its end; each as (start
    /// byte, segment index within the image, first of its segment).
    pub fn chunks(&self) -> impl Iterator<Item = (u32, usize, bool)> + '_ {
        self.segments.iter().enumerate().flat_map(|(s, seg)| {
            (seg.start..seg.end)
                .step_by(CHUNK_BYTES)
                .map(move |start| (start, s, start == seg.start))
        })
    }

    pub fn chunk_count(&self) -> usize {
        self.segments
            .iter()
            .map(|s| (s.end - s.start).div_ceil(CHUNK_BYTES as u32) as usize)
            .sum()
    }
}

/// A batch's scans, in the order of their CTAs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanBatch {
    pub images: Vec<ScanImage>,
}

/// Where a scan batch's tables lie in the tables buffer (16-byte aligned each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanTables {
    pub images_at: usize,
    pub segments_at: usize,
    pub chunks_at: usize,
    /// Every image's chunks together: the states the program keeps in its scratch buffer.
    pub chunks: usize,
}

impl ScanBatch {
    pub fn chunk_count(&self) -> usize {
        self.images.iter().map(ScanImage::chunk_count).sum()
    }

    /// Writes the image, segment and chunk tables at `at` in `out`, returning where they went
    /// and the end.
    pub fn write_tables(&self, out: &mut Vec<u8>, at: usize) -> (ScanTables, usize) {
        let segments: usize = self.images.iter().map(|i| i.segments.len()).sum();
        let chunks = self.chunk_count();
        let images_at = at.next_multiple_of(16);
        let segments_at = (images_at + self.images.len() * IMAGE_RECORD_BYTES).next_multiple_of(16);
        let chunks_at = (segments_at + segments * SEGMENT_RECORD_BYTES).next_multiple_of(16);
        let end = chunks_at + chunks * CHUNK_RECORD_BYTES;
        if out.len() < end {
            out.resize(end, 0);
        }
        let (mut image_at, mut segment_at, mut chunk_at) = (images_at, segments_at, chunks_at);
        let (mut first_segment, mut first_chunk) = (0usize, 0usize);
        for image in &self.images {
            let record = image_record(image, first_chunk, first_segment);
            out[image_at..image_at + IMAGE_RECORD_BYTES].copy_from_slice(&record);
            image_at += IMAGE_RECORD_BYTES;
            for s in &image.segments {
                for (i, v) in [s.start, s.end, s.first_mcu, s.mcus]
                    .into_iter()
                    .enumerate()
                {
                    out[segment_at + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
                }
                segment_at += SEGMENT_RECORD_BYTES;
            }
            for (start, segment, first) in image.chunks() {
                let segment = (first_segment + segment) as u32 | if first { 1 << 31 } else { 0 };
                out[chunk_at..][..4].copy_from_slice(&start.to_le_bytes());
                out[chunk_at + 4..][..4].copy_from_slice(&segment.to_le_bytes());
                chunk_at += CHUNK_RECORD_BYTES;
            }
            first_segment += image.segments.len();
            first_chunk += image.chunk_count();
        }
        let tables = ScanTables {
            images_at,
            segments_at,
            chunks_at,
            chunks,
        };
        (tables, end)
    }

    /// Checks every record against a data buffer of `data` bytes and a JPEG batch of
    /// `components` components and `images` images: a description of the first problem.
    pub fn validate(&self, data: usize, components: usize, images: usize) -> Result<(), String> {
        let mut seen = vec![false; images];
        for (n, image) in self.images.iter().enumerate() {
            let slots = image.components.len();
            if !(slots == 1 || slots == 3)
                || image.dc_table.len() != slots
                || image.ac_table.len() != slots
                || image.sampling.len() != slots
            {
                return Err(format!("scan {n} has {slots} components"));
            }
            if image.image >= images || std::mem::replace(&mut seen[image.image], true) {
                return Err(format!(
                    "scan {n} names image {} twice or past the table",
                    image.image
                ));
            }
            if image.components.iter().any(|&c| c >= components) {
                return Err(format!("scan {n} names a component past the table"));
            }
            if image.tables == 0
                || image.tables > 4
                || image
                    .dc_table
                    .iter()
                    .chain(&image.ac_table)
                    .any(|&t| t as usize >= image.tables)
            {
                return Err(format!(
                    "scan {n}'s Huffman tables do not match its components"
                ));
            }
            if image.mcu.is_empty()
                || image.mcu.len() > MAX_BLOCKS_IN_MCU
                || image.mcus_per_row == 0
                || image.mcu.iter().any(|b| {
                    let slot = b.slot as usize;
                    slot >= slots
                        || b.dx >= image.sampling[slot].0
                        || b.dy >= image.sampling[slot].1
                        || image.sampling[slot].0 > 4
                        || image.sampling[slot].1 > 4
                })
            {
                return Err(format!("scan {n}'s MCU is not one the program takes"));
            }
            if !image.stream_at.is_multiple_of(4)
                || image.stream_bytes > MAX_STREAM_BYTES
                || image.stream_at + image.stream_bytes + STREAM_PADDING > data
                || image.tables_at + image.tables * TABLE_BYTES > data
            {
                return Err(format!("scan {n}'s stream or tables run past the data"));
            }
            let mut next_mcu = 0u32;
            let mut next_byte = 0u32;
            for s in &image.segments {
                if s.start < next_byte
                    || s.end <= s.start
                    || s.end as usize > image.stream_bytes
                    || s.first_mcu != next_mcu
                    || s.mcus == 0
                {
                    return Err(format!("scan {n}'s segments are out of order or empty"));
                }
                next_mcu = s.first_mcu.saturating_add(s.mcus);
                next_byte = s.end;
            }
            if image.segments.is_empty() {
                return Err(format!("scan {n} has no segments"));
            }
        }
        Ok(())
    }
}

/// scan.cu's `ScanImage` for `image`, whose chunks and segments start at these indices of the
/// batch's tables.
fn image_record(image: &ScanImage, first_chunk: usize, first_segment: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(IMAGE_RECORD_BYTES);
    out.extend_from_slice(&(image.stream_at as i64).to_le_bytes());
    out.extend_from_slice(&(image.tables_at as i64).to_le_bytes());
    let component = |i: usize| image.components.get(i).map_or(0, |&c| c as i32);
    for v in [
        first_chunk as i32,
        image.chunk_count() as i32,
        first_segment as i32,
        image.segments.len() as i32,
        component(0),
        component(1),
        component(2),
        image.components.len() as i32,
        image.mcu.len() as i32,
        image.mcus_per_row as i32,
        image.image as i32,
        image.tables as i32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut mcu = [0u8; MAX_BLOCKS_IN_MCU];
    for (byte, b) in mcu.iter_mut().zip(&image.mcu) {
        *byte = b.slot | (b.dx << 2) | (b.dy << 4);
    }
    out.extend_from_slice(&mcu);
    for slot in 0..3 {
        let tables = match (image.dc_table.get(slot), image.ac_table.get(slot)) {
            (Some(dc), Some(ac)) => dc | (ac << 4),
            _ => 0,
        };
        out.push(tables);
    }
    for slot in 0..3 {
        let (h, v) = image.sampling.get(slot).copied().unwrap_or((1, 1));
        out.push(h | (v << 4));
    }
    debug_assert_eq!(out.len(), IMAGE_RECORD_BYTES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grey(segments: Vec<ScanSegment>, stream_bytes: usize) -> ScanImage {
        ScanImage {
            image: 0,
            components: vec![0],
            dc_table: vec![0],
            ac_table: vec![1],
            sampling: vec![(1, 1)],
            mcu: vec![McuBlock {
                slot: 0,
                dx: 0,
                dy: 0,
            }],
            mcus_per_row: 4,
            stream_at: 0,
            stream_bytes,
            tables_at: stream_bytes + STREAM_PADDING,
            tables: 2,
            segments,
        }
    }

    #[test]
    fn chunks_split_each_segment_and_records_have_the_cuda_sizes() {
        let segments = vec![
            ScanSegment {
                start: 0,
                end: 300,
                first_mcu: 0,
                mcus: 8,
            },
            ScanSegment {
                start: 300,
                end: 310,
                first_mcu: 8,
                mcus: 8,
            },
        ];
        let image = grey(segments, 310);
        let chunks: Vec<_> = image.chunks().collect();
        assert_eq!(
            chunks,
            vec![
                (0, 0, true),
                (128, 0, false),
                (256, 0, false),
                (300, 1, true)
            ]
        );
        assert_eq!(image.chunk_count(), 4);
        let batch = ScanBatch {
            images: vec![image],
        };
        let data = 310 + STREAM_PADDING + 2 * TABLE_BYTES;
        assert_eq!(batch.validate(data, 1, 1), Ok(()));
        assert!(
            batch.validate(data - 1, 1, 1).is_err(),
            "tables past the data"
        );
        let mut out = Vec::new();
        let (tables, end) = batch.write_tables(&mut out, 4);
        assert_eq!(tables.images_at, 16);
        assert_eq!(tables.segments_at, 16 + IMAGE_RECORD_BYTES);
        assert_eq!(
            tables.chunks_at,
            tables.segments_at + 2 * SEGMENT_RECORD_BYTES
        );
        assert_eq!(end, tables.chunks_at + 4 * CHUNK_RECORD_BYTES);
        // The last chunk: byte 300, segment 1, first of its segment.
        assert_eq!(out[end - 8..end - 4], 300u32.to_le_bytes());
        assert_eq!(out[end - 4..], (1u32 | 1 << 31).to_le_bytes());
    }

    #[test]
    fn segments_must_cover_the_mcus_in_order() {
        let gap = vec![ScanSegment {
            start: 0,
            end: 10,
            first_mcu: 1,
            mcus: 4,
        }];
        let batch = ScanBatch {
            images: vec![grey(gap, 10)],
        };
        assert!(batch.validate(1 << 20, 1, 1).is_err());
    }
}
