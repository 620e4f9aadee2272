//! An image's EXIF orientation as Pillow finds it, and what Pillow refuses, or does not
//! check, in a PNG's chunks and a WebP's structure, where the image decoder judges otherwise.
//!
//! `ImageOps.exif_transpose` applies the Orientation tag (0x0112) of `Image.getexif()`, which
//! reads the EXIF block each format plugin keeps (JPEG: the APP1 "Exif" segments, joined;
//! PNG: the last eXIf chunk, else a "Raw profile type exif" text chunk; WebP: the EXIF chunk)
//! through TIFF's first IFD, and falls back to the XMP packet's `tiff:Orientation` when that IFD
//! has no such tag. Damaged blocks are read as Pillow reads them: an entry that cannot be read
//! ends the IFD (the entries before it count), an out-of-line value past the end is skipped,
//! and a block whose TIFF header Pillow rejects makes `exif_transpose`, so `load_image`, fail.

use image::metadata::Orientation;

/// Pillow's `PngImagePlugin.MAX_TEXT_CHUNK`: the most a zTXt or iTXt chunk may inflate to.
const MAX_TEXT_CHUNK: usize = 1 << 20;

/// The orientation to apply, from the EXIF block and the XMP packet a file carries; an error
/// (Pillow's reason) where Pillow's `getexif` raises.
pub(super) fn pil_orientation(
    exif: Option<&[u8]>,
    xmp: Option<&[u8]>,
) -> Result<Orientation, String> {
    let tag = match exif {
        Some(exif) => orientation_tag(exif)?,
        None => None,
    };
    let value = match tag {
        Some(value) => Some(value),
        None => xmp.and_then(xmp_orientation),
    };
    Ok(value
        .filter(|v| (2..=8).contains(v))
        .and_then(Orientation::from_exif)
        .unwrap_or(Orientation::NoTransforms))
}

/// Pillow's `Exif.load` of `data` and its Orientation tag: None when the first IFD has no
/// readable entry 0x0112; Some(value) when it has one, the value being the integer it equals
/// (Pillow compares the first value of any numeric type with 2..8: 6, 6.0 and 12/2 all rotate)
/// or 0 for a value that equals none (text, bytes, 6.5, x/0).
pub(super) fn orientation_tag(data: &[u8]) -> Result<Option<u8>, String> {
    let mut data = data;
    for _ in 0..2 {
        data = data.strip_prefix(b"Exif\0\0").unwrap_or(data);
    }
    if data.is_empty() {
        return Ok(None);
    }
    let head = &data[..data.len().min(8)];
    const PREFIXES: [&[u8]; 6] = [
        b"MM\x00\x2a",
        b"II\x2a\x00",
        b"MM\x2a\x00",
        b"II\x00\x2a",
        b"MM\x00\x2b",
        b"II\x2b\x00",
    ];
    if !PREFIXES.iter().any(|p| head.starts_with(p)) {
        return Err(format!(
            "its EXIF block is not TIFF data (header {:02x?})",
            head
        ));
    }
    // Pillow reads the next IFD's offset from the 8-byte header (a BigTIFF one from bytes the
    // header does not have, so it fails).
    if head.len() < 8 || head[2] == 0x2b {
        return Err("its EXIF block's TIFF header is cut short".into());
    }
    let big_endian = &head[..2] == b"MM";
    let u16_at = |at: usize| -> Option<u64> {
        let b = data.get(at..at.checked_add(2)?)?;
        let v = [b[0], b[1]];
        Some(u64::from(if big_endian {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        }))
    };
    let u32_of = |b: &[u8]| -> u64 {
        let v = [b[0], b[1], b[2], b[3]];
        u64::from(if big_endian {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        })
    };
    let ifd = u32_of(&head[4..8]) as usize;
    let Some(entries) = u16_at(ifd) else {
        return Ok(None);
    };
    let mut out_of_line_total = 0u64;
    // Tags already kept: Pillow passes a later entry of the same tag by before anything else.
    let mut kept: Vec<u64> = Vec::new();
    for i in 0..entries as usize {
        let at = ifd + 2 + 12 * i;
        let Some(entry) = data.get(at..at + 12) else {
            // Pillow stops at an entry it cannot read whole, keeping those before it.
            return Ok(None);
        };
        let (tag, kind, count) = (
            u16_at(at).unwrap(),
            u16_at(at + 2).unwrap(),
            u32_of(&entry[4..8]),
        );
        if kept.contains(&tag) {
            continue;
        }
        let Some(unit) = unit_size(kind) else {
            continue; // a type Pillow does not know is skipped
        };
        let size = count * unit;
        let value = if size > 4 {
            let offset = u32_of(&entry[8..12]);
            out_of_line_total += size;
            if out_of_line_total > data.len() as u64 {
                continue; // "Tag data larger than file": skipped
            }
            match data.get(offset as usize..(offset + size) as usize) {
                Some(value) => value,
                // A short read ends the IFD there.
                None => return Ok(None),
            }
        } else {
            &entry[8..8 + size as usize]
        };
        if value.is_empty() {
            continue; // a count of 0 keeps nothing
        }
        if tag != 0x0112 {
            kept.push(tag);
            continue;
        }
        return Ok(Some(
            first_value_as_integer(kind, value, big_endian).unwrap_or(0),
        ));
    }
    Ok(None)
}

/// Bytes per value of each TIFF type Pillow reads (BYTE, ASCII, SHORT, LONG, RATIONAL,
/// SBYTE, UNDEFINED, SSHORT, SLONG, SRATIONAL, FLOAT, DOUBLE, IFD, LONG8).
fn unit_size(kind: u64) -> Option<u64> {
    Some(match kind {
        1 | 2 | 6 | 7 => 1,
        3 | 8 => 2,
        4 | 9 | 11 | 13 => 4,
        5 | 10 | 12 | 16 => 8,
        _ => return None,
    })
}

/// The first value of a numeric entry when it equals an integer from 1 to 9, as Python's
/// `==` between it and an int says; None otherwise (and for BYTE, ASCII and UNDEFINED, which
/// Pillow keeps as bytes or text).
fn first_value_as_integer(kind: u64, value: &[u8], big_endian: bool) -> Option<u8> {
    // The n-byte unsigned integer at `at`.
    let unsigned = |at: usize, n: usize| -> u64 {
        let field = &value[at..at + n];
        let fold = |v: u64, &b: &u8| (v << 8) | u64::from(b);
        if big_endian {
            field.iter().fold(0, fold)
        } else {
            field.iter().rev().fold(0, fold)
        }
    };
    let signed = |at: usize, n: usize| -> i64 {
        let shift = 64 - 8 * n as u32;
        ((unsigned(at, n) << shift) as i64) >> shift
    };
    let integer: i128 = match kind {
        3 => unsigned(0, 2).into(),
        4 | 13 => unsigned(0, 4).into(),
        16 => unsigned(0, 8).into(),
        6 => signed(0, 1).into(),
        8 => signed(0, 2).into(),
        9 => signed(0, 4).into(),
        5 | 10 => {
            let (numerator, denominator): (i128, i128) = if kind == 5 {
                (unsigned(0, 4).into(), unsigned(4, 4).into())
            } else {
                (signed(0, 4).into(), signed(4, 4).into())
            };
            // Pillow's IFDRational of x/0 is NaN, equal to nothing.
            if denominator == 0 || numerator % denominator != 0 {
                return None;
            }
            numerator / denominator
        }
        11 | 12 => {
            let float = if kind == 11 {
                f64::from(f32::from_bits(unsigned(0, 4) as u32))
            } else {
                f64::from_bits(unsigned(0, 8))
            };
            if float.fract() != 0.0 || !(1.0..=9.0).contains(&float) {
                return None;
            }
            float as i128
        }
        _ => return None,
    };
    u8::try_from(integer).ok().filter(|v| (1..=9).contains(v))
}

/// Pillow's XMP fallback: the digit of the first match of `tiff:Orientation(="|>)([0-9])`.
pub(super) fn xmp_orientation(xmp: &[u8]) -> Option<u8> {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut rest = xmp;
    while let Some(at) = rest.windows(KEY.len()).position(|w| w == KEY) {
        let after = &rest[at + KEY.len()..];
        let digit = match after {
            [b'=', b'"', d, ..] | [b'>', d, ..] if d.is_ascii_digit() => Some(d - b'0'),
            _ => None,
        };
        if digit.is_some() {
            return digit;
        }
        rest = &rest[at + 1..];
    }
    None
}

/// A JPEG's orientation as Pillow finds it in its APP0 and APP1 `segments` (marker number,
/// data). Pillow keeps the first APP1 "Exif" segment whole, with every later one's data after
/// its "Exif\0\0" appended, and the last APP1 XMP packet. When no JFIF APP0 segment gives a
/// density in dots per inch or cm, Pillow's `open` reads the DPI from the EXIF block and
/// swallows the error of a block it cannot read, which leaves an empty EXIF (and no XMP
/// fallback) for `exif_transpose`; with one, the error reaches `load_image`.
pub(super) fn jpeg_orientation<'a>(
    segments: impl Iterator<Item = (u8, &'a [u8])>,
) -> Result<Orientation, String> {
    const XMP_HEADER: &[u8] = b"http://ns.adobe.com/xap/1.0/\0";
    let (mut exif, mut xmp): (Option<Vec<u8>>, Option<&[u8]>) = (None, None);
    let mut jfif_dpi = false;
    for (marker, segment) in segments {
        if marker == 0 {
            // "JFIF", version, then the density unit (1: inch, 2: cm) and two densities.
            jfif_dpi |=
                segment.starts_with(b"JFIF") && segment.len() >= 12 && matches!(segment[7], 1 | 2);
        } else if let Some(data) = segment.strip_prefix(b"Exif\0\0") {
            match &mut exif {
                Some(joined) => joined.extend_from_slice(data),
                None => exif = Some(segment.to_vec()),
            }
        } else if let Some(data) = segment.strip_prefix(XMP_HEADER) {
            xmp = Some(data);
        }
    }
    match exif.as_deref().map(orientation_tag) {
        Some(Err(_)) if !jfif_dpi => Ok(Orientation::NoTransforms),
        _ => pil_orientation(exif.as_deref(), xmp),
    }
}

/// A WebP file's first EXIF and XMP chunks as libwebp's demuxer, which Pillow asks for them,
/// keeps them: only in an extended file (a VP8X chunk first) whose VP8X flags announce them
/// (EXIF 0x08, XMP 0x04), and only a chunk that lies within the file with its padding byte.
pub(super) fn webp_exif_and_xmp(bytes: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let (mut exif, mut xmp) = (None, None);
    if bytes.get(12..16) != Some(b"VP8X") {
        return (exif, xmp);
    }
    let flags = bytes.get(20).copied().unwrap_or(0);
    let mut at = 12usize;
    while let Some(header) = bytes.get(at..at + 8) {
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let padded = size + (size & 1);
        if bytes.len() - (at + 8) < padded {
            break;
        }
        let data = &bytes[at + 8..at + 8 + size];
        match &header[..4] {
            b"EXIF" if exif.is_none() && flags & 0x08 != 0 => exif = Some(data),
            b"XMP " if xmp.is_none() && flags & 0x04 != 0 => xmp = Some(data),
            _ => {}
        }
        at += 8 + padded;
    }
    (exif, xmp)
}

/// Why libwebp's demuxer, through which Pillow opens every WebP, rejects the file's chunk
/// structure, if it does: the RIFF size runs past the end of the file, or a chunk (with its
/// padding byte) runs past the RIFF data. The image decoder reads some such files anyway.
pub(super) fn webp_structure_error(bytes: &[u8]) -> Option<String> {
    let riff_size = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let riff_end = riff_size.checked_add(8)?;
    if riff_end > bytes.len() {
        return Some("the RIFF data runs past the end of the file".into());
    }
    let mut at = 12usize;
    while let Some(header) = bytes[..riff_end].get(at..at + 8) {
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let end = (at + 8).saturating_add(size + (size & 1));
        if end > riff_end {
            return Some(format!(
                "its {} chunk runs past the end of the RIFF data",
                String::from_utf8_lossy(&header[..4]).trim_end()
            ));
        }
        if &header[..4] == b"VP8 " {
            if let Some(reason) = vp8_frame_tag_error(&bytes[at + 8..at + 8 + size]) {
                return Some(reason);
            }
        }
        at = end;
    }
    None
}

/// libwebp's checks of a lossy image's frame tag (`VP8GetInfo`), which the image decoder
/// does not make: a key frame, shown, of profile 0 to 3, whose first partition fits the chunk.
fn vp8_frame_tag_error(chunk: &[u8]) -> Option<String> {
    let [a, b, c, ..] = *chunk else {
        return None; // too short to decode: the decoder refuses it
    };
    let bits = u32::from(a) | u32::from(b) << 8 | u32::from(c) << 16;
    let (key_frame, profile, shown) = (bits & 1 == 0, (bits >> 1) & 7, (bits >> 4) & 1 == 1);
    let fits = ((bits >> 5) as usize) < chunk.len();
    (!(key_frame && profile <= 3 && shown && fits)).then(|| {
        format!("its VP8 frame tag is not a shown key frame of a known profile ({bits:#08x})")
    })
}

/// What Pillow keeps of a PNG's metadata for `getexif`, read from every chunk up to IEND.
#[derive(Debug, Default)]
pub(super) struct PngMetadata {
    /// The last eXIf chunk, or a text chunk keyed "exif".
    pub(super) exif: Option<Vec<u8>>,
    /// The last "Raw profile type exif" text chunk's value.
    pub(super) raw_profile_exif: Option<Vec<u8>>,
    /// The last iTXt "XML:com.adobe.xmp" value.
    pub(super) xmp: Option<Vec<u8>>,
}

impl PngMetadata {
    /// The EXIF block `getexif` reads: `exif`, else the raw profile's hex digits after its
    /// third line; an error where Python's `bytes.fromhex` refuses them.
    pub(super) fn exif_block(&self) -> Result<Option<Vec<u8>>, String> {
        if let Some(exif) = &self.exif {
            return Ok(Some(exif.clone()));
        }
        let Some(profile) = &self.raw_profile_exif else {
            return Ok(None);
        };
        let hex: Vec<u8> = profile
            .split(|&b| b == b'\n')
            .skip(3)
            .flatten()
            .copied()
            .collect();
        python_from_hex(&hex)
            .map(Some)
            .ok_or_else(|| "its \"Raw profile type exif\" text is not hexadecimal".into())
    }
}

/// Python's `bytes.fromhex`: pairs of hex digits, with ASCII whitespace allowed between them.
fn python_from_hex(text: &[u8]) -> Option<Vec<u8>> {
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut rest = text;
    while let [first, tail @ ..] = rest {
        if matches!(first, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            rest = tail;
            continue;
        }
        let [second, tail @ ..] = tail else {
            return None;
        };
        out.push(digit(*first)? * 16 + digit(*second)?);
        rest = tail;
    }
    Some(out)
}

/// Walks a PNG's chunks as Pillow's PngImagePlugin reads them (before the image data at open,
/// after it when the image loads) and keeps what `getexif` uses; an error, Pillow's reason,
/// for the chunks it refuses: an iCCP or zTXt chunk of an unknown compression method, a zTXt
/// or iTXt chunk that inflates past 1 MiB, and APNG frame chunks out of sequence.
pub(super) fn png_metadata(bytes: &[u8]) -> Result<PngMetadata, String> {
    let mut metadata = PngMetadata::default();
    let mut sequence: Option<u64> = None;
    // acTL's frame count, a frame control seen, and whether the first frame is animated (so
    // that loading it stops at the next frame), as Pillow decides it at the first IDAT.
    let (mut frames, mut frame_control): (Option<u64>, bool) = (None, false);
    let (mut animated, mut seen_image_data) = (false, false);
    let mut at = 8usize;
    while let Some(header) = bytes.get(at..at + 8) {
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = &header[4..8];
        // Pillow takes a chunk type that is not four word characters for a broken file at
        // open, and for the end of the file after the image data.
        if !kind.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') {
            if seen_image_data {
                break;
            }
            return Err(format!(
                "broken PNG file (chunk {})",
                String::from_utf8_lossy(kind)
            ));
        }
        let Some(data) = bytes.get(at + 8..(at + 8).saturating_add(length)) else {
            break; // the image decoder says what is wrong with a cut chunk
        };
        let (name, rest) = match data.iter().position(|&b| b == 0) {
            Some(i) => (&data[..i], &data[i + 1..]),
            None => (data, &data[data.len()..]),
        };
        match kind {
            b"IEND" => break,
            b"IDAT" if !seen_image_data => {
                seen_image_data = true;
                // The IDAT image counts as a frame of its own when no fcTL came before it.
                let default_image = u64::from(!frame_control);
                animated = frames.is_some_and(|n| n + default_image > 1);
            }
            b"acTL" if data.len() < 8 => return Err("APNG contains truncated acTL chunk".into()),
            b"acTL" => {
                // A second acTL makes the file a plain PNG; a count of 0 or past 2^31 is ignored.
                let count = u64::from(u32::from_be_bytes([data[0], data[1], data[2], data[3]]));
                frames = match frames {
                    Some(_) => None,
                    None => (1..=0x8000_0000).contains(&count).then_some(count),
                };
            }
            // The next frame starts: loading the first one stops here.
            b"fcTL" if seen_image_data && animated => break,
            b"fcTL" | b"fdAT" if data.len() >= 4 => {
                let number = u64::from(u32::from_be_bytes([data[0], data[1], data[2], data[3]]));
                let in_order = match sequence {
                    None => kind == b"fcTL" && number == 0,
                    Some(last) => number == last + 1,
                };
                if !in_order {
                    return Err("APNG contains frame sequence errors".into());
                }
                sequence = Some(number);
                frame_control |= kind == b"fcTL";
            }
            b"iCCP" => {
                // Pillow reads the method byte after the first NUL (the first byte when there
                // is none, as its find gives -1), then inflates the profile.
                let split = data.iter().position(|&b| b == 0).map_or(0, |i| i + 1);
                match data.get(split) {
                    None => return Err("iCCP chunk has no compression method".into()),
                    Some(&0) => {
                        inflate_text(&data[split + 1..])?;
                    }
                    Some(method) => {
                        return Err(format!("Unknown compression method {method} in iCCP chunk"))
                    }
                }
            }
            b"eXIf" => metadata.exif = Some([b"Exif\0\0", data].concat()),
            b"tEXt" => keep_text(&mut metadata, name, rest.to_vec()),
            b"zTXt" => {
                let method = rest.first().copied().unwrap_or(0);
                if method != 0 {
                    return Err(format!("Unknown compression method {method} in zTXt chunk"));
                }
                let text = inflate_text(rest.get(1..).unwrap_or(&[]))?.unwrap_or_default();
                keep_text(&mut metadata, name, text);
            }
            b"iTXt" => {
                if let Some(text) = international_text(rest)? {
                    if name == b"XML:com.adobe.xmp" {
                        metadata.xmp = Some(text.clone());
                    }
                    if name == b"Raw profile type exif" && std::str::from_utf8(&text).is_ok() {
                        metadata.raw_profile_exif = Some(text);
                    }
                }
            }
            _ => {}
        }
        // Pillow checks the CRC of every chunk it reads when it opens the file, after its
        // handler: those before the first IDAT (later ones are read without it).
        if !seen_image_data {
            let stored = bytes.get(at + 8 + length..at + 12 + length);
            let computed = crc32fast::hash(&bytes[at + 4..at + 8 + length]).to_be_bytes();
            if stored != Some(computed.as_slice()) {
                return Err(format!(
                    "broken PNG file (bad header checksum in {})",
                    String::from_utf8_lossy(kind)
                ));
            }
        }
        at = at.saturating_add(12 + length);
    }
    Ok(metadata)
}

/// A copy of a PNG in which what Pillow never checks cannot stop the image decoder, which
/// checks every CRC and reads up to IEND: after the first IDAT, CRCs are recomputed (Pillow
/// reads them without checking), and the file ends at a chunk type that is not four word
/// characters (where Pillow stops reading) with an IEND added. None when nothing needs it.
///
/// The image data's CRCs are recomputed only when its zlib stream inflates whole with the
/// right Adler-32 (at most `max_inflated` bytes), which Pillow's zlib checks and the image
/// decoder does not: otherwise the CRC is what stands between damaged image data and wrong
/// pixels (fuzz/corpus/image_decode/exif_3_flipped_idat.png decodes to other pixels without
/// it, where Pillow refuses it).
pub(super) fn png_with_pillows_leniency(bytes: &[u8], max_inflated: usize) -> Option<Vec<u8>> {
    let mut copy: Option<Vec<u8>> = None;
    let mut seen_image_data = false;
    // The default image's data, and where its CRCs are, while they still need checking.
    let mut image_data: Vec<u8> = Vec::new();
    let mut image_data_crcs: Vec<(usize, [u8; 4])> = Vec::new();
    let mut image_data_crc_wrong = false;
    let mut at = 8usize;
    while let Some(header) = bytes.get(at..at + 8) {
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = &header[4..8];
        seen_image_data |= kind == b"IDAT";
        if !seen_image_data {
            at = at.saturating_add(12 + length);
            continue;
        }
        if !kind.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') {
            let mut cut = copy.unwrap_or_else(|| bytes.to_vec());
            cut.truncate(at);
            cut.extend_from_slice(&[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82]);
            copy = Some(cut);
            break;
        }
        let Some(stored) = bytes.get(at + 8 + length..at + 12 + length) else {
            break; // cut short: the decoder says so
        };
        let computed = crc32fast::hash(&bytes[at + 4..at + 8 + length]).to_be_bytes();
        if kind == b"IDAT" {
            image_data.extend_from_slice(&bytes[at + 8..at + 8 + length]);
            image_data_crcs.push((at + 8 + length, computed));
            image_data_crc_wrong |= stored != computed;
        } else if stored != computed && kind != b"fdAT" {
            copy.get_or_insert_with(|| bytes.to_vec())[at + 8 + length..at + 12 + length]
                .copy_from_slice(&computed);
        }
        if kind == b"IEND" {
            break;
        }
        at += 12 + length;
    }
    if image_data_crc_wrong
        && miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(&image_data, max_inflated)
            .is_ok()
    {
        let fixed = copy.get_or_insert_with(|| bytes.to_vec());
        for (crc_at, crc) in image_data_crcs {
            if let Some(field) = fixed.get_mut(crc_at..crc_at + 4) {
                field.copy_from_slice(&crc);
            }
        }
    }
    copy
}

fn keep_text(metadata: &mut PngMetadata, name: &[u8], text: Vec<u8>) {
    match name {
        b"exif" => metadata.exif = Some(text),
        b"Raw profile type exif" => metadata.raw_profile_exif = Some(text),
        _ => {}
    }
}

/// An iTXt chunk's text after its keyword: None where Pillow passes the chunk by.
fn international_text(rest: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let [compressed, method, rest @ ..] = rest else {
        return Ok(None);
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let (Some(_language), Some(_translated), Some(text)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Ok(None);
    };
    if *compressed == 0 {
        return Ok(Some(text.to_vec()));
    }
    if *method != 0 {
        return Ok(None);
    }
    inflate_text(text)
}

/// Pillow's `_safe_zlib_decompress`: what the stream inflates to (a cut stream gives what it
/// has), None for a stream zlib rejects, an error past `MAX_TEXT_CHUNK`.
fn inflate_text(stream: &[u8]) -> Result<Option<Vec<u8>>, String> {
    use miniz_oxide::inflate::{decompress_to_vec_zlib_with_limit, TINFLStatus};
    match decompress_to_vec_zlib_with_limit(stream, MAX_TEXT_CHUNK) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.status == TINFLStatus::HasMoreOutput => {
            Err("Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK".into())
        }
        Err(error) if error.status == TINFLStatus::FailedCannotMakeProgress => {
            Ok(Some(error.output))
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TIFF block (no "Exif" prefix) with one IFD of `entries` (tag, type, count, the
    /// 4-byte value field) at offset 8, then `extra` bytes for out-of-line values.
    fn tiff(big_endian: bool, entries: &[(u16, u16, u32, [u8; 4])], extra: &[u8]) -> Vec<u8> {
        let u16b = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let u32b = |v: u32| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = if big_endian {
            b"MM\x00\x2a".to_vec()
        } else {
            b"II\x2a\x00".to_vec()
        };
        out.extend(u32b(8));
        out.extend(u16b(entries.len() as u16));
        for &(tag, kind, count, value) in entries {
            out.extend(u16b(tag));
            out.extend(u16b(kind));
            out.extend(u32b(count));
            out.extend(value);
        }
        out.extend(u32b(0));
        out.extend_from_slice(extra);
        out
    }

    fn le16(v: u16) -> [u8; 4] {
        let b = v.to_le_bytes();
        [b[0], b[1], 0, 0]
    }

    // Each expectation is what Pillow 13.0.0's Exif().load(block).get(0x0112) gave.
    #[test]
    fn orientation_tags_are_read_as_pillow_reads_them() {
        let short6 = tiff(false, &[(0x112, 3, 1, le16(6))], &[]);
        assert_eq!(orientation_tag(&short6), Ok(Some(6)));
        let big_endian = tiff(true, &[(0x112, 3, 1, [0, 6, 0, 0])], &[]);
        assert_eq!(orientation_tag(&big_endian), Ok(Some(6)));
        let long8 = tiff(true, &[(0x112, 4, 1, [0, 0, 0, 8])], &[]);
        assert_eq!(orientation_tag(&long8), Ok(Some(8)));
        // Text is kept as text: present, equal to no number.
        let ascii = tiff(false, &[(0x112, 2, 2, *b"6\0\0\0")], &[]);
        assert_eq!(orientation_tag(&ascii), Ok(Some(0)));
        let two_shorts = tiff(false, &[(0x112, 3, 2, [3, 0, 6, 0])], &[]);
        assert_eq!(orientation_tag(&two_shorts), Ok(Some(3)), "the first value");
        let mut rational = [0u8; 8];
        rational[..4].copy_from_slice(&12u32.to_le_bytes());
        rational[4..].copy_from_slice(&2u32.to_le_bytes());
        let twelve_halves = tiff(false, &[(0x112, 5, 1, 26u32.to_le_bytes())], &rational);
        assert_eq!(orientation_tag(&twelve_halves), Ok(Some(6)));
        let float6 = tiff(false, &[(0x112, 11, 1, 6.0f32.to_le_bytes())], &[]);
        assert_eq!(orientation_tag(&float6), Ok(Some(6)));
        let float_half = tiff(false, &[(0x112, 11, 1, 6.5f32.to_le_bytes())], &[]);
        assert_eq!(orientation_tag(&float_half), Ok(Some(0)));
        let unknown_type = tiff(false, &[(0x112, 14, 1, le16(6))], &[]);
        assert_eq!(orientation_tag(&unknown_type), Ok(None));
        let twice = [
            b"Exif\0\0Exif\0\0".as_slice(),
            &tiff(false, &[(0x112, 3, 1, le16(3))], &[]),
        ]
        .concat();
        assert_eq!(orientation_tag(&twice), Ok(Some(3)));
        let duplicate = tiff(
            false,
            &[(0x112, 3, 1, le16(6)), (0x112, 3, 1, le16(3))],
            &[],
        );
        assert_eq!(orientation_tag(&duplicate), Ok(Some(6)));
        let count_0_first = tiff(false, &[(0x112, 3, 0, [0; 4]), (0x112, 3, 1, le16(3))], &[]);
        assert_eq!(orientation_tag(&count_0_first), Ok(Some(3)));
        assert_eq!(orientation_tag(b""), Ok(None));
        assert_eq!(orientation_tag(b"Exif\0\0"), Ok(None));
    }

    /// tests/fixtures/pil_corpus/exif_blocks.json: the EXIF blocks of the PIL corpus and seeded
    /// mutations of them, each with what Pillow 13.0.0 read
    /// (scripts/fixtures/record_exif_verdicts.py).
    #[test]
    fn every_recorded_exif_block_reads_as_pillow_read_it() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/pil_corpus/exif_blocks.json"
        );
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let blocks = record["blocks"].as_array().unwrap();
        assert!(blocks.len() >= 500, "only {} blocks", blocks.len());
        let mut differences = Vec::new();
        for block in blocks {
            let hex = block["hex"].as_str().unwrap().as_bytes();
            let bytes = python_from_hex(hex).unwrap();
            let expected = match &block["pillow"] {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::String(s) if s == "raises" => Err(()),
                value => Ok(Some(value.as_u64().unwrap() as u8)),
            };
            let ours = orientation_tag(&bytes).map_err(|_| ());
            if ours != expected {
                differences.push(format!(
                    "{}: ours {ours:?}, Pillow {expected:?}",
                    block["from"]
                ));
            }
        }
        assert!(differences.is_empty(), "{differences:#?}");
    }

    #[test]
    fn damaged_exif_blocks_end_where_pillow_stops() {
        // The second entry is cut: the first still counts.
        let two = tiff(
            false,
            &[(0x112, 3, 1, le16(6)), (0x10f, 3, 1, le16(1))],
            &[],
        );
        assert_eq!(orientation_tag(&two[..8 + 2 + 12 + 5]), Ok(Some(6)));
        // The first entry is cut: nothing.
        assert_eq!(orientation_tag(&two[..8 + 2 + 5]), Ok(None));
        // An out-of-line value past the end ends the IFD before the orientation...
        let past_end = tiff(
            false,
            &[
                (0x10f, 2, 20, 4000u32.to_le_bytes()),
                (0x112, 3, 1, le16(6)),
            ],
            &[],
        );
        assert_eq!(orientation_tag(&past_end), Ok(None));
        // ...but one larger than the whole block is skipped.
        let too_large = tiff(
            false,
            &[(0x10f, 2, 5000, 8u32.to_le_bytes()), (0x112, 3, 1, le16(6))],
            &[],
        );
        assert_eq!(orientation_tag(&too_large), Ok(Some(6)));
        // A header Pillow rejects makes getexif raise.
        assert!(orientation_tag(b"Exif\0\0\xff\xff\xff\xff\0\0\0\x08").is_err());
        assert!(orientation_tag(b"Exif\0\0MM\0*\0\0").is_err());
    }

    #[test]
    fn jpeg_exif_errors_are_swallowed_unless_jfif_gives_a_density() {
        let bad = b"Exif\0\0\xff\xff\xff\xff\0\0\0\x08".as_slice();
        let xmp = b"http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation=\"3\"/>".as_slice();
        let jfif = |unit: u8| {
            let mut s = b"JFIF\0\x01\x01".to_vec();
            s.extend([unit, 0, 72, 0, 72, 0, 0]);
            s
        };
        let no_dpi = jfif(0);
        let dpi = jfif(1);
        assert_eq!(
            jpeg_orientation([(0, no_dpi.as_slice()), (1, bad), (1, xmp)].into_iter()),
            Ok(Orientation::NoTransforms),
            "an empty EXIF and no XMP fallback"
        );
        assert!(jpeg_orientation([(0, dpi.as_slice()), (1, bad)].into_iter()).is_err());
        assert_eq!(
            jpeg_orientation([(1, xmp)].into_iter()),
            Ok(Orientation::Rotate180)
        );
        // Later EXIF segments are appended to the first.
        let block = tiff(false, &[(0x112, 3, 1, le16(6))], &[]);
        let (first, second) = block.split_at(12);
        let first = [b"Exif\0\0".as_slice(), first].concat();
        let second = [b"Exif\0\0".as_slice(), second].concat();
        assert_eq!(
            jpeg_orientation([(1, first.as_slice()), (1, second.as_slice())].into_iter()),
            Ok(Orientation::Rotate90)
        );
    }

    /// A WebP file of `chunks` (fourcc, data), sizes as given, no image data.
    fn webp_with(chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut bytes = b"RIFF\0\0\0\0WEBP".to_vec();
        for (kind, data) in chunks {
            bytes.extend_from_slice(*kind);
            bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
            bytes.extend_from_slice(data);
            if data.len() % 2 == 1 {
                bytes.push(0);
            }
        }
        bytes
    }

    #[test]
    fn webp_metadata_is_read_as_libwebps_demuxer_keeps_it() {
        let vp8x = |flags: u8| [flags, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let both = webp_with(&[(b"VP8X", &vp8x(0x0c)), (b"EXIF", b"abc"), (b"XMP ", b"x")]);
        assert_eq!(
            webp_exif_and_xmp(&both),
            (Some(b"abc".as_slice()), Some(b"x".as_slice()))
        );
        let unannounced = webp_with(&[(b"VP8X", &vp8x(0)), (b"EXIF", b"abc")]);
        assert_eq!(webp_exif_and_xmp(&unannounced), (None, None));
        let simple = webp_with(&[(b"VP8L", b"\x2f"), (b"EXIF", b"abc")]);
        assert_eq!(webp_exif_and_xmp(&simple), (None, None));
        // An odd-sized last chunk without its padding byte is not kept.
        let mut unpadded = webp_with(&[(b"VP8X", &vp8x(0x08)), (b"EXIF", b"abc")]);
        unpadded.pop();
        assert_eq!(webp_exif_and_xmp(&unpadded), (None, None));
    }

    #[test]
    fn webp_chunks_past_the_riff_data_are_refused_as_libwebp_refuses_them() {
        let mut fine = webp_with(&[(b"VP8L", b"\x2f\0")]);
        let riff_size = (fine.len() - 8) as u32;
        fine[4..8].copy_from_slice(&riff_size.to_le_bytes());
        assert_eq!(webp_structure_error(&fine), None);
        let mut long_chunk = fine.clone();
        long_chunk[16..20].copy_from_slice(&(1u32 << 29).to_le_bytes());
        assert!(webp_structure_error(&long_chunk)
            .unwrap()
            .contains("VP8L chunk"));
        // A lossy frame tag: key frame, profile 0, shown, first partition of 1 byte.
        let frame = |tag: u8| [tag, 0, 0, 0x9d, 0x01, 0x2a, 1, 0, 1, 0];
        let lossy = |tag: u8| {
            let mut file = webp_with(&[(b"VP8 ", &frame(tag))]);
            let riff_size = (file.len() - 8) as u32;
            file[4..8].copy_from_slice(&riff_size.to_le_bytes());
            file
        };
        assert_eq!(webp_structure_error(&lossy(0x30)), None);
        assert!(webp_structure_error(&lossy(0x38)).is_some(), "profile 4");
        assert!(webp_structure_error(&lossy(0x20)).is_some(), "not shown");
        assert!(
            webp_structure_error(&lossy(0x31)).is_some(),
            "not a key frame"
        );
        let mut long_riff = fine.clone();
        long_riff[4..8].copy_from_slice(&(riff_size + 2).to_le_bytes());
        assert!(webp_structure_error(&long_riff).is_some());
    }

    #[test]
    fn xmp_orientation_takes_the_first_full_match() {
        assert_eq!(xmp_orientation(b"<x tiff:Orientation=\"6\"/>"), Some(6));
        assert_eq!(
            xmp_orientation(b"<tiff:Orientation>3</tiff:Orientation>"),
            Some(3)
        );
        assert_eq!(
            xmp_orientation(b"tiff:Orientation ... tiff:Orientation=\"8\""),
            Some(8)
        );
        assert_eq!(xmp_orientation(b"<x/>"), None);
    }

    /// PNG chunks after the signature, with their CRCs.
    fn png_with(chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in chunks {
            bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let start = bytes.len();
            bytes.extend_from_slice(*kind);
            bytes.extend_from_slice(data);
            let crc = crc32fast::hash(&bytes[start..]);
            bytes.extend_from_slice(&crc.to_be_bytes());
        }
        bytes
    }

    #[test]
    fn a_bad_crc_before_the_image_data_is_refused_as_pillow_refuses_it() {
        let mut bad = png_with(&[(b"tEXt", b"k\0v"), (b"IDAT", b""), (b"tEXt", b"k\0v")]);
        assert!(png_metadata(&bad).is_ok());
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(png_metadata(&bad).is_ok(), "after IDAT the CRC is not read");
        bad[8 + 8 + 3] ^= 1;
        assert!(png_metadata(&bad).unwrap_err().contains("checksum in tEXt"));
    }

    #[test]
    fn png_chunks_pillow_refuses_are_refused() {
        let iccp = png_with(&[(b"iCCP", b"name\0\x01xx")]);
        assert!(png_metadata(&iccp).unwrap_err().contains("iCCP"));
        let no_nul = png_with(&[(b"iCCP", b"name")]);
        assert!(
            png_metadata(&no_nul).unwrap_err().contains("method 110"),
            "'n'"
        );
        let bomb = miniz_oxide::deflate::compress_to_vec_zlib(&vec![0u8; 2 << 20], 6);
        let big_profile = png_with(&[(b"iCCP", &[b"icc\0\0".as_slice(), &bomb].concat())]);
        assert!(png_metadata(&big_profile)
            .unwrap_err()
            .contains("MAX_TEXT_CHUNK"));
        let ztxt = png_with(&[(b"zTXt", b"k\0\x02xx")]);
        assert!(png_metadata(&ztxt).unwrap_err().contains("zTXt"));
        // 2 MiB of zeros, deflated.
        let bomb = miniz_oxide::deflate::compress_to_vec_zlib(&vec![0u8; 2 << 20], 6);
        let big = png_with(&[(b"zTXt", &[b"big\0\0".as_slice(), &bomb].concat())]);
        assert!(png_metadata(&big).unwrap_err().contains("MAX_TEXT_CHUNK"));
        let no_fctl = png_with(&[
            (b"acTL", &[0, 0, 0, 1, 0, 0, 0, 0]),
            (b"IDAT", b""),
            (b"fdAT", &[0; 8]),
        ]);
        assert!(png_metadata(&no_fctl).unwrap_err().contains("sequence"));
        let in_order = png_with(&[
            (b"acTL", &[0, 0, 0, 2, 0, 0, 0, 0]),
            (b"fcTL", &[0, 0, 0, 0]),
            (b"IDAT", b""),
            (b"fcTL", &[0, 0, 0, 7]),
        ]);
        assert!(
            png_metadata(&in_order).is_ok(),
            "the next frame is not read"
        );
    }

    #[test]
    fn a_chunk_type_that_is_not_four_word_characters_ends_the_file_after_the_image_data() {
        let before = png_with(&[(b"f#TL", b""), (b"IDAT", b"")]);
        assert!(png_metadata(&before).unwrap_err().contains("chunk f#TL"));
        // After the image data Pillow stops reading there, so the frame chunks after it
        // are never seen.
        let after = png_with(&[
            (b"acTL", &[0, 0, 0, 2, 0, 0, 0, 0]),
            (b"IDAT", b""),
            (b"f#TL", &[0; 26]),
            (b"fdAT", &[0, 0, 0, 1]),
        ]);
        assert!(png_metadata(&after).is_ok());
        let truncated_actl = png_with(&[(b"acTL", &[0, 0, 0, 2])]);
        assert!(png_metadata(&truncated_actl).unwrap_err().contains("acTL"));
    }

    #[test]
    fn what_pillow_does_not_check_after_the_image_data_is_made_right() {
        let stream = miniz_oxide::deflate::compress_to_vec_zlib(b"\0\x07", 6);
        let good = png_with(&[(b"IHDR", &[0; 13]), (b"IDAT", &stream), (b"IEND", b"")]);
        let lenient = |bytes: &[u8]| png_with_pillows_leniency(bytes, 1 << 20);
        assert_eq!(lenient(&good), None);
        let mut bad_crc = good.clone();
        let iend_crc = good.len() - 4;
        bad_crc[iend_crc] ^= 1;
        assert_eq!(lenient(&bad_crc), Some(good.clone()));
        // An image data CRC is made right only over a stream whose Adler-32 holds.
        let idat_crc = 8 + 25 + 8 + stream.len();
        let mut bad_idat_crc = good.clone();
        bad_idat_crc[idat_crc] ^= 1;
        assert_eq!(lenient(&bad_idat_crc), Some(good.clone()));
        let mut damaged_data = good.clone();
        damaged_data[idat_crc - 1] ^= 1; // the Adler-32's last byte
        assert_eq!(lenient(&damaged_data), None, "the CRC is left to refuse it");
        let mut garbage = good[..idat_crc + 4].to_vec();
        garbage.extend_from_slice(b"\0\0\0\0f#TLgarbage");
        assert_eq!(lenient(&garbage), Some(good));
    }

    #[test]
    fn png_exif_comes_from_exif_chunks_and_raw_profiles() {
        let block = tiff(false, &[(0x112, 3, 1, le16(6))], &[]);
        let exif = png_with(&[(b"eXIf", &block), (b"IDAT", b"")]);
        let found = png_metadata(&exif).unwrap().exif_block().unwrap().unwrap();
        assert_eq!(orientation_tag(&found), Ok(Some(6)));
        let hex: String = block.iter().map(|b| format!("{b:02x}")).collect();
        let profile = format!("Raw profile type exif\0\nexif\n  {}\n{hex}\n", block.len());
        let after_idat = png_with(&[(b"IDAT", b""), (b"tEXt", profile.as_bytes())]);
        let found = png_metadata(&after_idat)
            .unwrap()
            .exif_block()
            .unwrap()
            .unwrap();
        assert_eq!(orientation_tag(&found), Ok(Some(6)));
        let not_hex = png_with(&[(b"tEXt", b"Raw profile type exif\0\nexif\n 2\nzz\n")]);
        assert!(png_metadata(&not_hex).unwrap().exif_block().is_err());
        assert_eq!(
            python_from_hex(b"ab cd\x0b\x0cef"),
            Some(vec![0xab, 0xcd, 0xef])
        );
        assert_eq!(
            python_from_hex(b"a b"),
            None,
            "whitespace only between pairs"
        );
        assert_eq!(python_from_hex(b"abc"), None);
    }
}
