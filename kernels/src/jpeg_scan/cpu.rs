//! The CPU twin of scan.cu: the same four phases over the same chunks and runs (one run of
//! chunks per "thread"), so the tests exercise the synchronisation itself, not only its
//! result. It also reports how many rounds phase 2 took, what the chunk size was chosen by.

use super::batch::{ScanBatch, ScanImage, ScanSegment, CHUNK_BYTES, TABLE_BYTES, THREADS};
use crate::jpeg::batch::{JpegComponent, STATUS_ENTROPY};

/// A Huffman table as jdhuff.c's `jpeg_make_d_derived_tbl` derives it (the program adds a
/// lookup of the first bits, which gives the same symbols).
struct Derived {
    maxcode: [i32; 18],
    valoffset: [i32; 18],
    values: [u8; 256],
}

impl Derived {
    fn new(table: &[u8]) -> Self {
        let mut d = Derived {
            maxcode: [-1; 18],
            valoffset: [0; 18],
            values: [0; 256],
        };
        d.values.copy_from_slice(&table[16..TABLE_BYTES]);
        let (mut p, mut code) = (0i32, 0i32);
        for l in 1..=16 {
            let n = i32::from(table[l - 1]);
            if n > 0 {
                d.valoffset[l] = p - code;
                p += n;
                code += n;
                d.maxcode[l] = code - 1;
            }
            code <<= 1;
        }
        d.maxcode[17] = 0xFFFFF;
        d
    }

    /// The symbol of the next code in `bits` (MSB first) and its length; `None` for a code no
    /// entry holds (consuming 16 bits, as the program does).
    fn symbol(&self, bits: u32) -> (Option<u8>, u32) {
        for l in 1..=16 {
            let code = (bits >> (32 - l)) as i32;
            if code <= self.maxcode[l] {
                let at = (code + self.valoffset[l]) as usize & 255;
                return (Some(self.values[at]), l as u32);
            }
        }
        (None, 16)
    }
}

/// jpeg_natural_order with jdhuff.c's 16 extra entries.
const NATURAL_ORDER: [u8; 80] = {
    let zigzag: [u8; 64] = [
        0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
        20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
        58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    ];
    let mut out = [63u8; 80];
    let mut i = 0;
    while i < 64 {
        out[i] = zigzag[i];
        i += 1;
    }
    out
};

fn extend(x: u32, s: u32) -> i32 {
    if s == 0 {
        0
    } else if (x as i32) < (1 << (s - 1)) {
        x as i32 - (1 << s) + 1
    } else {
        x as i32
    }
}

/// One chunk's decoding state, as scan.cu's `ChunkState`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ChunkState {
    exit_pos: u32,
    exit_bk: u32,
    blocks: i32,
    dc: [i32; 3],
    flags: u32,
}

/// Where phase 4 writes.
struct Writer<'a> {
    coefs: &'a mut [i16],
    next_block: i32,
    end_block: i32,
    first_block: i32,
    pred: [i32; 3],
    /// The block being filled (its first coefficient's index), if it is inside its component.
    block: Option<usize>,
}

/// One image's decoding context: its stream, tables and components.
struct Image<'a> {
    scan: &'a ScanImage,
    stream: &'a [u8],
    tables: Vec<Derived>,
    components: Vec<&'a JpegComponent>,
}

impl Image<'_> {
    /// scan.cu's `scan_peek`: 32 bits from `pos`, zeros at and past `end`.
    fn peek(&self, pos: u32, end: u32) -> u32 {
        let byte = (pos / 8) as usize;
        let mut window = [0u8; 8];
        for (i, w) in window.iter_mut().enumerate() {
            *w = self.stream.get(byte + i).copied().unwrap_or(0);
        }
        let v = ((u64::from_be_bytes(window) << (pos % 8)) >> 32) as u32;
        if pos + 32 > end {
            let valid = end.saturating_sub(pos);
            if valid == 0 {
                0
            } else {
                v & (u32::MAX << (32 - valid))
            }
        } else {
            v
        }
    }

    fn block_at(&self, block_in_scan: i32) -> Option<usize> {
        let scan = self.scan;
        let per_mcu = scan.mcu.len() as i32;
        let (m, b) = (block_in_scan / per_mcu, block_in_scan % per_mcu);
        let code = scan.mcu[b as usize];
        let slot = code.slot as usize;
        let (h, v) = scan.sampling[slot];
        let c = self.components[slot];
        let row = (m as i64 / i64::from(scan.mcus_per_row)) * i64::from(v) + i64::from(code.dy);
        let col = (m as i64 % i64::from(scan.mcus_per_row)) * i64::from(h) + i64::from(code.dx);
        if row >= i64::from(c.blocks_high) || col >= i64::from(c.blocks_wide) {
            return None;
        }
        Some(c.coef_offset + (row as usize * c.blocks_wide as usize + col as usize) * 64)
    }

    /// scan.cu's `scan_chunk`.
    fn chunk(
        &self,
        (seg_end, end): (u32, u32),
        (pos, b, k): (&mut u32, &mut usize, &mut usize),
        out: &mut ChunkState,
        mut w: Option<&mut Writer<'_>>,
    ) {
        let scan = self.scan;
        while *pos < end {
            let slot = scan.mcu[*b].slot as usize;
            let bits = self.peek(*pos, seg_end);
            if *k == 0 {
                if let Some(w) = w.as_deref_mut() {
                    if w.next_block >= w.end_block {
                        return;
                    }
                    w.block = self.block_at(w.first_block + w.next_block);
                    w.next_block += 1;
                }
                let (symbol, len) = self.tables[scan.dc_table[slot] as usize].symbol(bits);
                let s = u32::from(symbol.unwrap_or_else(|| {
                    out.flags |= STATUS_ENTROPY;
                    0
                }));
                let diff = if s == 0 {
                    0
                } else {
                    extend((bits << len) >> (32 - s), s)
                };
                *pos += len + s;
                out.blocks += 1;
                out.dc[slot] = out.dc[slot].wrapping_add(diff);
                if let Some(w) = w.as_deref_mut() {
                    w.pred[slot] = w.pred[slot].wrapping_add(diff);
                    if let Some(at) = w.block {
                        w.coefs[at] = w.pred[slot] as i16;
                    }
                }
                *k = 1;
            } else {
                let (symbol, len) = self.tables[scan.ac_table[slot] as usize].symbol(bits);
                let rs = u32::from(symbol.unwrap_or_else(|| {
                    out.flags |= STATUS_ENTROPY;
                    0
                }));
                let (r, s) = ((rs >> 4) as usize, rs & 15);
                if s != 0 {
                    *k += r;
                    let value = extend((bits << len) >> (32 - s), s);
                    if let Some(w) = w.as_deref_mut() {
                        if let Some(at) = w.block {
                            w.coefs[at + NATURAL_ORDER[*k] as usize] = value as i16;
                        }
                    }
                    *pos += len + s;
                    *k += 1;
                } else if r == 15 {
                    *pos += len;
                    *k += 16;
                } else {
                    *pos += len;
                    *k = 64;
                }
            }
            if w.is_some() && *pos > seg_end {
                out.flags |= STATUS_ENTROPY;
            }
            if *k >= 64 {
                *k = 0;
                *b = if *b + 1 == scan.mcu.len() { 0 } else { *b + 1 };
            }
        }
    }
}

/// What one image's decoding did besides its coefficients: for tuning and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Rounds of phase 2 before every run's entry settled (the last finds nothing to change).
    pub rounds: usize,
    /// Chunks decoded in phase 2, beyond phase 1's one decoding of each.
    pub redecoded_chunks: usize,
}

/// Decodes every scan of `batch` (as the `jpeg_scan` launch): coefficients into `coefs` (i16s,
/// where `components`' offsets say, each image's zeroed first), marking `status` (one word a
/// JPEG image) for images whose data libjpeg would warn about. `data` holds the streams and
/// tables. One report an image.
pub fn decode(
    batch: &ScanBatch,
    components: &[JpegComponent],
    data: &[u8],
    coefs: &mut [i16],
    status: &mut [u32],
) -> Vec<ScanReport> {
    batch
        .images
        .iter()
        .map(|scan| {
            let image = Image {
                scan,
                stream: &data[scan.stream_at..scan.stream_at + scan.stream_bytes],
                tables: (0..scan.tables)
                    .map(|t| Derived::new(&data[scan.tables_at + t * TABLE_BYTES..]))
                    .collect(),
                components: scan.components.iter().map(|&c| &components[c]).collect(),
            };
            for c in &image.components {
                coefs[c.coef_offset..][..c.blocks() * 64].fill(0);
            }
            let (report, bad) = decode_image(&image, coefs);
            if bad {
                status[scan.image] |= STATUS_ENTROPY;
            }
            report
        })
        .collect()
}

/// The four phases of scan.cu for one image; whether it is bad. Its loops run over chunk
/// indices, as the program's threads do.
#[allow(clippy::needless_range_loop)]
fn decode_image(image: &Image<'_>, coefs: &mut [i16]) -> (ScanReport, bool) {
    let scan = image.scan;
    let chunks: Vec<(u32, usize, bool)> = scan.chunks().collect();
    let n = chunks.len();
    let segment = |j: usize| -> ScanSegment { scan.segments[chunks[j].1] };
    let first = |j: usize| chunks[j].2;
    let ends = |j: usize| {
        let s = segment(j);
        (s.end * 8, (chunks[j].0 + CHUNK_BYTES as u32).min(s.end) * 8)
    };
    let per = n.div_ceil(THREADS);
    let runs: Vec<(usize, usize)> = (0..THREADS)
        .map(|t| {
            let lo = (t * per).min(n);
            (lo, (lo + per).min(n))
        })
        .collect();
    let mut states = vec![ChunkState::default(); n];
    let mut report = ScanReport::default();

    // Phase 1.
    for &(lo, hi) in &runs {
        let (mut pos, mut b, mut k) = (chunks[lo.min(n - 1)].0 * 8, 0usize, 0usize);
        for j in lo..hi {
            if first(j) {
                (pos, b, k) = (chunks[j].0 * 8, 0, 0);
            }
            let mut s = ChunkState::default();
            image.chunk(ends(j), (&mut pos, &mut b, &mut k), &mut s, None);
            s.exit_pos = pos;
            s.exit_bk = b as u32 | (k as u32) << 8;
            states[j] = s;
        }
    }

    // Phase 2: every "thread" reads its entry, then all decode (as between two barriers).
    let mut used: Vec<(u32, u32)> = runs
        .iter()
        .map(|&(lo, _)| (if lo < n { chunks[lo].0 * 8 } else { 0 }, 0))
        .collect();
    loop {
        report.rounds += 1;
        let entries: Vec<Option<(u32, u32)>> = runs
            .iter()
            .map(|&(lo, hi)| {
                (lo < hi && !first(lo)).then(|| (states[lo - 1].exit_pos, states[lo - 1].exit_bk))
            })
            .collect();
        let mut changed = false;
        for (t, &(lo, hi)) in runs.iter().enumerate() {
            let Some(entry) = entries[t] else { continue };
            if entry == used[t] {
                continue;
            }
            used[t] = entry;
            let (mut pos, mut b, mut k) =
                (entry.0, (entry.1 & 255) as usize, (entry.1 >> 8) as usize);
            for j in lo..hi {
                if first(j) {
                    break;
                }
                report.redecoded_chunks += 1;
                let mut s = ChunkState::default();
                image.chunk(ends(j), (&mut pos, &mut b, &mut k), &mut s, None);
                s.exit_pos = pos;
                s.exit_bk = b as u32 | (k as u32) << 8;
                let same = s.exit_pos == states[j].exit_pos && s.exit_bk == states[j].exit_bk;
                states[j] = s;
                if same {
                    break;
                }
                if j == hi - 1 {
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }

    // Phase 3 (a sequential pass gives the segmented scan's result).
    let per_mcu = scan.mcu.len() as i64;
    let mut bad = false;
    let mut carry = [0i32; 4];
    for j in 0..n {
        if first(j) {
            carry = [0; 4];
        }
        let s = &mut states[j];
        let counts = [s.blocks, s.dc[0], s.dc[1], s.dc[2]];
        s.blocks = carry[0];
        s.dc.copy_from_slice(&carry[1..]);
        for (c, v) in carry.iter_mut().zip(counts) {
            *c = c.wrapping_add(v);
        }
        if (j + 1 == n || first(j + 1))
            && i64::from(carry[0]) < i64::from(segment(j).mcus) * per_mcu
        {
            bad = true;
        }
    }

    // Phase 4.
    for j in 0..n {
        let seg = segment(j);
        let (mut pos, mut b, mut k) = if first(j) {
            (chunks[j].0 * 8, 0usize, 0usize)
        } else {
            let e = &states[j - 1];
            (
                e.exit_pos,
                (e.exit_bk & 255) as usize,
                (e.exit_bk >> 8) as usize,
            )
        };
        let mut w = Writer {
            coefs: &mut *coefs,
            next_block: states[j].blocks,
            end_block: (seg.mcus as i64 * per_mcu) as i32,
            first_block: (seg.first_mcu as i64 * per_mcu) as i32,
            pred: states[j].dc,
            block: None,
        };
        if k != 0 {
            if w.next_block > w.end_block {
                continue;
            }
            w.block = image.block_at(w.first_block + w.next_block - 1);
        }
        let mut s = ChunkState::default();
        image.chunk(ends(j), (&mut pos, &mut b, &mut k), &mut s, Some(&mut w));
        bad |= s.flags != 0;
        let last_of_segment = j + 1 == n || first(j + 1);
        bad |= last_of_segment && k != 0 && w.next_block <= w.end_block;
    }
    (report, bad)
}
