//! A baseline JPEG's scan made ready for entropy decoding on the GPU
//! (`vitrt_kernels::jpeg_scan`): its Huffman tables, restart interval and MCU layout from the
//! markers before the scan, and the entropy-coded bytes with the stuffed zero bytes taken out,
//! split at the restart markers. No bit is decoded here.
//!
//! Only files whose decoding libjpeg-turbo would do without a word are taken: one interleaved
//! scan (or a lone grey component) of 8-bit baseline or extended sequential Huffman coding,
//! every table valid, restart markers in their order and number, and the scan ended by EOI.
//! Anything else returns `None`, and the caller reads coefficients with libjpeg instead, which
//! gives libjpeg's own answer. What only decoding can find (a code no table holds, data that
//! ends early) the GPU marks, and the host decodes that image again.

use vitrt_runtime::image_kernels::jpeg_scan::batch::{
    McuBlock, ScanSegment, MAX_BLOCKS_IN_MCU, MAX_STREAM_BYTES, TABLE_BYTES,
};

/// A Huffman table as a DHT segment defines it: the number of codes of each length 1 to 16,
/// and the symbols in code order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HuffmanTable {
    pub counts: [u8; 16],
    pub values: Vec<u8>,
}

impl HuffmanTable {
    /// Whether libjpeg's `jpeg_make_d_derived_tbl` accepts it (else it fails the file with
    /// JERR_BAD_HUFF_TABLE): at most 256 codes, no length's codes running out of bit
    /// patterns, and DC symbols at most 15.
    pub fn is_valid(&self, dc: bool) -> bool {
        let total: usize = self.counts.iter().map(|&c| c as usize).sum();
        if total > 256 || total != self.values.len() {
            return false;
        }
        // jpeg_make_d_derived_tbl's loop: from the shortest length with codes to the longest.
        let (Some(first), Some(last)) = (
            self.counts.iter().position(|&c| c > 0),
            self.counts.iter().rposition(|&c| c > 0),
        ) else {
            return !dc || self.values.iter().all(|&v| v <= 15);
        };
        let mut code = 0u32;
        for length in first..=last {
            code += u32::from(self.counts[length]);
            if code >= 1 << (length + 1) {
                return false;
            }
            code <<= 1;
        }
        !dc || self.values.iter().all(|&v| v <= 15)
    }

    /// The table as the kernels read it: 16 counts, then 256 values.
    pub fn write(&self, out: &mut [u8]) {
        out[..16].copy_from_slice(&self.counts);
        out[16..TABLE_BYTES].fill(0);
        out[16..16 + self.values.len()].copy_from_slice(&self.values);
    }
}

/// What the markers before the scan say, for one sequential Huffman scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanHeader {
    /// Per component of the scan (in its order): the index of the frame component (libjpeg's
    /// `comp_info`), its DC and AC table.
    pub components: Vec<(usize, HuffmanTable, HuffmanTable)>,
    pub restart_interval: u32,
}

/// Reads the markers of `bytes` from SOI to the start of the scan at `scan_start` (where
/// libjpeg's header reading stopped): `None` unless the frame is 8-bit baseline or extended
/// sequential Huffman with every component in the one scan, each with a valid table.
pub fn scan_header(bytes: &[u8], scan_start: usize) -> Option<ScanHeader> {
    let mut dc: [Option<HuffmanTable>; 4] = Default::default();
    let mut ac: [Option<HuffmanTable>; 4] = Default::default();
    let mut restart_interval = 0u32;
    let mut frame_ids: Vec<u8> = Vec::new();
    let mut at = 2usize;
    while at < scan_start {
        // A marker, after any fill bytes.
        if bytes.get(at) != Some(&0xFF) {
            return None;
        }
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let marker = *bytes.get(at)?;
        at += 1;
        let length = u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]) as usize;
        let body = bytes.get(at + 2..at + length)?;
        at += length;
        match marker {
            // SOF0 (baseline) and SOF1 (extended sequential), Huffman coded.
            0xC0 | 0xC1 => {
                if body.first() != Some(&8) {
                    return None;
                }
                let count = *body.get(5)? as usize;
                frame_ids = (0..count)
                    .map(|i| body.get(6 + 3 * i).copied())
                    .collect::<Option<_>>()?;
            }
            // Progressive, lossless, hierarchical or arithmetic-coded frames.
            0xC2..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => return None,
            0xC4 => {
                let mut rest = body;
                while !rest.is_empty() {
                    let class_id = rest[0];
                    let counts: [u8; 16] = rest.get(1..17)?.try_into().ok()?;
                    let total: usize = counts.iter().map(|&c| c as usize).sum();
                    let values = rest.get(17..17 + total)?.to_vec();
                    let slot = (class_id & 15) as usize;
                    if slot > 3 || class_id >> 4 > 1 {
                        return None;
                    }
                    let table = Some(HuffmanTable { counts, values });
                    if class_id >> 4 == 0 {
                        dc[slot] = table;
                    } else {
                        ac[slot] = table;
                    }
                    rest = &rest[17 + total..];
                }
            }
            0xDD => {
                restart_interval = u32::from(u16::from_be_bytes([*body.first()?, *body.get(1)?]))
            }
            0xDA => {
                let count = *body.first()? as usize;
                if count != frame_ids.len() || at != scan_start {
                    return None;
                }
                let spectral = body.get(1 + 2 * count..4 + 2 * count)?;
                if spectral != [0, 63, 0] {
                    return None;
                }
                let mut components = Vec::with_capacity(count);
                for i in 0..count {
                    let id = *body.get(1 + 2 * i)?;
                    let tables = *body.get(2 + 2 * i)?;
                    let index = frame_ids.iter().position(|&f| f == id)?;
                    let (d, a) = ((tables >> 4) as usize, (tables & 15) as usize);
                    let dc_table = dc.get(d)?.clone()?;
                    let ac_table = ac.get(a)?.clone()?;
                    if !dc_table.is_valid(true) || !ac_table.is_valid(false) {
                        return None;
                    }
                    components.push((index, dc_table, ac_table));
                }
                return Some(ScanHeader {
                    components,
                    restart_interval,
                });
            }
            _ => {}
        }
    }
    None
}

/// The blocks of one MCU for components of sampling factors `factors` (in scan order), as
/// libjpeg orders them (each component's `v` rows of `h` blocks in turn); a lone component's
/// MCU is one block. `None` past JPEG's 10 blocks.
pub fn mcu_layout(factors: &[(u8, u8)]) -> Option<Vec<McuBlock>> {
    if factors.len() == 1 {
        return Some(vec![McuBlock {
            slot: 0,
            dx: 0,
            dy: 0,
        }]);
    }
    let mut blocks = Vec::new();
    for (slot, &(h, v)) in factors.iter().enumerate() {
        for dy in 0..v {
            for dx in 0..h {
                blocks.push(McuBlock {
                    slot: slot as u8,
                    dx,
                    dy,
                });
            }
        }
    }
    (blocks.len() <= MAX_BLOCKS_IN_MCU).then_some(blocks)
}

/// Copies the entropy-coded data from `scan` (the bytes after the SOS segment) into `out`
/// without its stuffed zero bytes, one segment per restart interval: `None` unless the
/// restart markers come in order, `segments` of them less one, each segment holds data, and
/// EOI ends the scan. Segment `i` holds `mcus(i)` MCUs.
pub fn destuff(
    scan: &[u8],
    out: &mut Vec<u8>,
    segments: usize,
    mcus: impl Fn(usize) -> u32,
) -> Option<Vec<ScanSegment>> {
    out.clear();
    let mut found = Vec::with_capacity(segments);
    let mut segment_start = 0usize;
    let mut first_mcu = 0u32;
    let mut at = 0usize;
    loop {
        let ff = memchr::memchr(0xFF, &scan[at..])?;
        out.extend_from_slice(&scan[at..at + ff]);
        at += ff + 1;
        // Fill bytes: any number of 0xFF before the byte that says what this is.
        while scan.get(at) == Some(&0xFF) {
            at += 1;
        }
        let next = *scan.get(at)?;
        at += 1;
        let restart = (0xD0..=0xD7).contains(&next);
        match next {
            0x00 => out.push(0xFF),
            _ if restart || next == 0xD9 => {
                let n = found.len();
                if out.len() == segment_start
                    || (restart && (n + 1 >= segments || usize::from(next - 0xD0) != n % 8))
                    || (!restart && n + 1 != segments)
                    || out.len() > MAX_STREAM_BYTES
                {
                    return None;
                }
                found.push(ScanSegment {
                    start: segment_start as u32,
                    end: out.len() as u32,
                    first_mcu,
                    mcus: mcus(n),
                });
                first_mcu += mcus(n);
                segment_start = out.len();
                if !restart {
                    return Some(found);
                }
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_checked_as_libjpeg_checks_them() {
        let table = |counts: &[(usize, u8)], values: Vec<u8>| {
            let mut c = [0u8; 16];
            for &(length, n) in counts {
                c[length - 1] = n;
            }
            HuffmanTable { counts: c, values }
        };
        // Two codes of length 2 and one of 3: 00, 01, 100.
        assert!(table(&[(2, 2), (3, 1)], vec![0, 1, 2]).is_valid(true));
        // Four codes of length 2 use every pattern, the all-ones one included: refused.
        assert!(!table(&[(2, 4)], vec![0, 1, 2, 3]).is_valid(true));
        // A DC symbol past 15.
        assert!(!table(&[(1, 1)], vec![16]).is_valid(true));
        assert!(table(&[(1, 1)], vec![16]).is_valid(false));
    }

    #[test]
    fn stuffed_bytes_and_restart_markers_split_the_data() {
        let scan = [
            0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xFF, 0xFF, 0x00, 0xFF, 0xD1, 0x78, 0xFF,
            0xD9,
        ];
        let mut out = Vec::new();
        let segments = destuff(&scan, &mut out, 3, |i| if i < 2 { 4 } else { 1 }).unwrap();
        assert_eq!(out, [0x12, 0xFF, 0x34, 0x56, 0xFF, 0x78]);
        assert_eq!(
            segments,
            vec![
                ScanSegment {
                    start: 0,
                    end: 3,
                    first_mcu: 0,
                    mcus: 4
                },
                ScanSegment {
                    start: 3,
                    end: 5,
                    first_mcu: 4,
                    mcus: 4
                },
                ScanSegment {
                    start: 5,
                    end: 6,
                    first_mcu: 8,
                    mcus: 1
                },
            ]
        );
        // Out of order, too few, too many, a truncated scan, another marker: refused.
        let mut wrong = scan;
        wrong[5] = 0xD1;
        assert!(destuff(&wrong, &mut out, 3, |_| 1).is_none());
        assert!(destuff(&scan, &mut out, 4, |_| 1).is_none());
        assert!(destuff(&scan, &mut out, 2, |_| 1).is_none());
        assert!(destuff(&scan[..12], &mut out, 3, |_| 1).is_none());
        assert!(destuff(&[0x12, 0xFF, 0xC4], &mut out, 1, |_| 1).is_none());
    }
}
