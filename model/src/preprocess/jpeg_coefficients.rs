//! A JPEG file entropy-decoded into quantised DCT coefficients by libjpeg-turbo's own
//! `jpeg_read_coefficients` (Huffman or arithmetic coding, baseline or progressive), with what
//! the rest of the decoder needs: sampling, multipliers, colour space and EXIF orientation. The
//! kernels of `vitrt_kernels::jpeg` finish the decoding on the GPU (their CPU twins on the
//! host), bit for bit as libjpeg-turbo's full decoder.
//!
//! A file is only taken here when that is certain; anything else is left to the host decoder
//! ([`super::decode`]), which then gives its usual pixels or its usual error. Left to it: files
//! libjpeg warns about or refuses (truncated, corrupt, 12-bit), CMYK and YCCK, sampling
//! libjpeg cannot upsample, progressive files whose coefficients are not all refined (libjpeg
//! smooths those blocks), any block outside the exactness guard
//! (`vitrt_kernels::jpeg::cpu::block_is_exact`), and images past the limits.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mozjpeg_sys as ffi;
use vitrt_runtime::image_kernels::jpeg::cpu::block_is_exact;
use vitrt_runtime::image_kernels::jpeg::{upright_size, JpegColour, Upsample};

use vitrt_runtime::image_kernels::jpeg_scan::batch::{
    McuBlock, ScanSegment, STREAM_PADDING, TABLE_BYTES,
};

use super::error::ImageLimits;
use super::{jpeg_scan, ArenaReserve};

/// One component's data as [`read_jpeg_into`] wrote it: byte offsets (from the region's
/// start offset, as the reserve gave it) of its coefficients (i16, little-endian, block after
/// block) and its 64 multipliers (i32), and its geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenComponent {
    pub coefs_at: usize,
    pub quant_at: usize,
    pub blocks_wide: u32,
    pub blocks_high: u32,
    pub downsampled_width: u32,
    pub downsampled_height: u32,
    pub upsample: Upsample,
}

/// An image whose coefficients (or, with [`EntropyOn::Device`], whose scan) [`read_jpeg_into`]
/// wrote into a reserved region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenJpeg {
    pub width: u32,
    pub height: u32,
    pub colour: JpegColour,
    pub orientation: u8,
    /// In the frame's order. For a scan, their `coefs_at` are 0: the device decodes the
    /// coefficients into space of its own.
    pub components: Vec<WrittenComponent>,
    /// The entropy-coded scan, where the device decodes it.
    pub scan: Option<WrittenScan>,
}

/// A baseline scan written for the device's entropy decoding (`vitrt_kernels::jpeg_scan`):
/// byte offsets as the components' (from the region's start offset), the MCU and the restart
/// segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenScan {
    /// The stream without its stuffed bytes, 4-byte aligned, with readable padding after it.
    pub stream_at: usize,
    pub stream_bytes: usize,
    /// `tables` Huffman tables of `jpeg_scan::batch::TABLE_BYTES` each.
    pub tables_at: usize,
    pub tables: usize,
    /// Per component of the scan (its slot): the frame component, its DC and AC tables
    /// (among these), and its sampling factors in the MCU.
    pub slots: Vec<usize>,
    pub dc_table: Vec<u8>,
    pub ac_table: Vec<u8>,
    pub sampling: Vec<(u8, u8)>,
    pub mcu: Vec<McuBlock>,
    pub mcus_per_row: u32,
    pub segments: Vec<ScanSegment>,
}

/// Where a JPEG's entropy decoding is done, when the file allows the device to do it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntropyOn {
    /// libjpeg reads the coefficients on the host.
    Host,
    /// The device decodes baseline scans; other files are read as with `Host`.
    Device,
}

impl WrittenJpeg {
    /// (height, width) once upright.
    pub fn upright_size(&self) -> (usize, usize) {
        upright_size(self.width, self.height, self.orientation)
    }

    /// The same image with its region moved `bytes` (a multiple of 16) further into the
    /// arena: a region prepared on its own (offsets from 0), then copied into a batch's.
    pub fn moved_by(mut self, bytes: usize) -> WrittenJpeg {
        debug_assert_eq!(bytes % 16, 0, "regions are 16-byte aligned");
        for c in &mut self.components {
            // A scan's coefficients are decoded into the device's own space (`coefs_at` 0).
            if self.scan.is_none() {
                c.coefs_at += bytes;
            }
            c.quant_at += bytes;
        }
        if let Some(scan) = &mut self.scan {
            scan.stream_at += bytes;
            scan.tables_at += bytes;
        }
        self
    }
}

/// A JPEG read on its own: its description and its region's bytes (offsets from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadJpeg {
    pub image: WrittenJpeg,
    pub data: Vec<u8>,
}

/// Bytes one component's data takes in a region: its coefficients, 16-byte aligned, then its
/// multipliers.
fn component_bytes(blocks: usize) -> usize {
    (blocks * 128).next_multiple_of(16) + 64 * 4
}

/// Why a file is left to the host decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostReason {
    /// libjpeg refused the file or warned about it (truncated or corrupt data).
    LibjpegObjected,
    /// CMYK, YCCK or another colour space the kernels do not convert.
    ColourSpace,
    /// Sampling factors libjpeg cannot upsample, or an unusual component count.
    Sampling,
    /// A progressive file with coefficients left unrefined: libjpeg smooths those blocks.
    Unrefined,
    /// A block outside the exactness guard.
    Guard,
    /// Larger than the limits (the host decoder says which).
    Limits,
    /// No room left where its coefficients were to go.
    NoRoom,
    /// Metadata Pillow refuses the file for (its EXIF block).
    Metadata,
}

impl HostReason {
    pub fn describe(self) -> &'static str {
        match self {
            HostReason::LibjpegObjected => "libjpeg warned about or refused the file",
            HostReason::ColourSpace => "a colour space other than grey, YCbCr or RGB",
            HostReason::Sampling => "sampling factors the upsampling kernels do not take",
            HostReason::Unrefined => "a progressive file with unrefined coefficients",
            HostReason::Guard => "coefficients outside the exactness guard",
            HostReason::Limits => "larger than the image limits",
            HostReason::NoRoom => "the batch's coefficient staging was full",
            HostReason::Metadata => "metadata Pillow refuses",
        }
    }
}

/// Reads `bytes` (a JPEG, by its content) into coefficients in a buffer of its own, or says
/// why the host decoder must take it. Never panics and never fails otherwise: every refusal is
/// the host's to make.
pub fn read_jpeg_coefficients(bytes: &[u8], limits: &ImageLimits) -> Result<ReadJpeg, HostReason> {
    read_jpeg(bytes, limits, EntropyOn::Host)
}

/// As [`read_jpeg_coefficients`], leaving the entropy decoding to `entropy`.
pub fn read_jpeg(
    bytes: &[u8],
    limits: &ImageLimits,
    entropy: EntropyOn,
) -> Result<ReadJpeg, HostReason> {
    let region = OneRegion::default();
    let image = read_jpeg_into(bytes, limits, &region, entropy)?;
    Ok(ReadJpeg {
        image,
        data: region.buffer.into_inner(),
    })
}

/// Reads `bytes` (a JPEG, by its content) as [`read_jpeg_coefficients`] does, writing each
/// component's coefficients and multipliers straight into one region `reserve(bytes)` gives
/// (its offset, a multiple of 16, and the bytes), asked for once the header has said how much
/// is needed. A refused file may leave a reserved region unused.
pub fn read_jpeg_into(
    bytes: &[u8],
    limits: &ImageLimits,
    reserve: &dyn ArenaReserve,
    entropy: EntropyOn,
) -> Result<WrittenJpeg, HostReason> {
    let mut err: Box<ffi::jpeg_error_mgr> = Box::new(unsafe { std::mem::zeroed() });
    let mut cinfo: Box<ffi::jpeg_decompress_struct> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: the error manager and the decompressor live in boxes that outlive every libjpeg
    // call below; libjpeg's fatal errors unwind out of `error_exit` (mozjpeg-sys' "unwinding"
    // feature), are caught here, and the decompressor is destroyed on every path.
    unsafe {
        ffi::jpeg_std_error(&mut err);
        err.error_exit = Some(unwind_on_error);
        err.emit_message = Some(count_warnings);
        cinfo.common.err = &mut *err;
        ffi::jpeg_create_decompress(&mut *cinfo);
    }
    let result = catch_unwind(AssertUnwindSafe(|| unsafe {
        read_started(&mut cinfo, bytes, limits, reserve, entropy)
    }));
    // SAFETY: created above; destroying also frees every array libjpeg allocated.
    unsafe { ffi::jpeg_destroy_decompress(&mut cinfo) };
    match result {
        Ok(Ok(image)) if err.num_warnings == 0 => Ok(image),
        Ok(Ok(_)) | Err(_) => Err(HostReason::LibjpegObjected),
        Ok(Err(reason)) => Err(reason),
    }
}

/// A region of its own for one image: what [`read_jpeg_coefficients`] reads into.
#[derive(Default)]
struct OneRegion {
    buffer: std::cell::UnsafeCell<Vec<u8>>,
    taken: std::cell::Cell<bool>,
}

impl ArenaReserve for OneRegion {
    fn reserve(&self, bytes: usize) -> Option<(usize, &mut [u8])> {
        if self.taken.replace(true) {
            return None;
        }
        // SAFETY: the buffer is handed out once (`taken`), so this is its only borrow.
        let buffer = unsafe { &mut *self.buffer.get() };
        buffer.resize(bytes, 0);
        Some((0, &mut buffer[..]))
    }
}

unsafe extern "C-unwind" fn unwind_on_error(_cinfo: &mut ffi::jpeg_common_struct) {
    std::panic::resume_unwind(Box::new("libjpeg error"));
}

unsafe extern "C-unwind" fn count_warnings(cinfo: &mut ffi::jpeg_common_struct, level: c_int) {
    if level < 0 {
        // SAFETY: `err` points at the manager set up in read_jpeg_coefficients.
        unsafe { (*cinfo.err).num_warnings += 1 };
    }
}

/// The body of [`read_jpeg_coefficients`] on a created decompressor.
///
/// # Safety
/// `cinfo` must be a created decompressor whose error manager unwinds on errors.
unsafe fn read_started(
    cinfo: &mut ffi::jpeg_decompress_struct,
    bytes: &[u8],
    limits: &ImageLimits,
    reserve: &dyn ArenaReserve,
    entropy: EntropyOn,
) -> Result<WrittenJpeg, HostReason> {
    // APP0 (JFIF's density) and APP1 (EXIF, XMP): what the orientation is read from.
    const APP0: c_int = 0xE0;
    const APP1: c_int = 0xE1;
    unsafe {
        ffi::jpeg_mem_src(cinfo, bytes.as_ptr(), bytes.len() as _);
        ffi::jpeg_save_markers(cinfo, APP0, 0xFFFF);
        ffi::jpeg_save_markers(cinfo, APP1, 0xFFFF);
        ffi::jpeg_read_header(cinfo, 1);
    }
    let (width, height) = (cinfo.image_width, cinfo.image_height);
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels || pixels * 3 > limits.max_decoded_bytes || width == 0 {
        return Err(HostReason::Limits);
    }
    let count = cinfo.num_components as usize;
    let colour = match (cinfo.jpeg_color_space, count) {
        (ffi::J_COLOR_SPACE::JCS_GRAYSCALE, 1) => JpegColour::Grey,
        (ffi::J_COLOR_SPACE::JCS_YCbCr, 3) => JpegColour::YCbCr,
        (ffi::J_COLOR_SPACE::JCS_RGB, 3) => JpegColour::Rgb,
        _ => return Err(HostReason::ColourSpace),
    };
    let orientation = orientation_of(cinfo).ok_or(HostReason::Metadata)?;
    // SAFETY: read_header succeeded, so comp_info holds num_components entries.
    let infos = unsafe { std::slice::from_raw_parts(cinfo.comp_info, count) };
    let (max_h, max_v) = (
        cinfo.max_h_samp_factor as u32,
        cinfo.max_v_samp_factor as u32,
    );
    let mut layouts = Vec::with_capacity(count);
    for info in infos {
        let (h, v) = (info.h_samp_factor as u32, info.v_samp_factor as u32);
        // libjpeg's downsampled size: ceil(image size * factor / largest factor).
        let downsampled_width = (u64::from(width) * u64::from(h)).div_ceil(u64::from(max_h)) as u32;
        let downsampled_height =
            (u64::from(height) * u64::from(v)).div_ceil(u64::from(max_v)) as u32;
        let upsample =
            Upsample::choose(h, v, max_h, max_v, downsampled_width).ok_or(HostReason::Sampling)?;
        layouts.push((downsampled_width, downsampled_height, upsample));
    }
    if entropy == EntropyOn::Device {
        // SAFETY: the source manager jpeg_mem_src set up; header reading stopped after SOS.
        let scan_start = bytes.len() - unsafe { (*cinfo.src).bytes_in_buffer };
        let frame = Frame {
            width,
            height,
            colour,
            orientation,
            max: (max_h, max_v),
            quant_tables: cinfo.quant_tbl_ptrs,
        };
        if let Some(image) = write_scan(bytes, scan_start, &frame, infos, &layouts, reserve)? {
            return Ok(image);
        }
    }
    // SAFETY: the header has been read; this consumes the rest of the file.
    let arrays = unsafe { ffi::jpeg_read_coefficients(cinfo) };
    if arrays.is_null() {
        return Err(HostReason::LibjpegObjected);
    }
    if !cinfo.coef_bits.is_null() {
        // Progressive: libjpeg smooths the blocks of any component whose first ten
        // coefficients (zigzag order) are not all known to the last bit.
        // SAFETY: coef_bits holds 64 ints per component.
        let bits =
            unsafe { std::slice::from_raw_parts(cinfo.coef_bits as *const c_int, count * 64) };
        if bits
            .chunks_exact(64)
            .any(|c| c[..10].iter().any(|&b| b != 0))
        {
            return Err(HostReason::Unrefined);
        }
    }
    let access =
        unsafe { (*cinfo.common.mem).access_virt_barray }.ok_or(HostReason::LibjpegObjected)?;
    let total: usize = infos
        .iter()
        .map(|i| component_bytes(i.width_in_blocks as usize * i.height_in_blocks as usize))
        .sum();
    let (region_at, region) = reserve.reserve(total).ok_or(HostReason::NoRoom)?;
    let mut at = 0usize;
    let mut components = Vec::with_capacity(count);
    for (c, (info, &(downsampled_width, downsampled_height, upsample))) in
        infos.iter().zip(&layouts).enumerate()
    {
        if info.quant_table.is_null() {
            return Err(HostReason::LibjpegObjected);
        }
        // SAFETY: latched by jpeg_read_coefficients for every component.
        let table = unsafe { &(*info.quant_table).quantval };
        // The islow IDCT's multiplier is the table's value as a 16-bit signed integer.
        let quant: [i32; 64] = std::array::from_fn(|i| i32::from(table[i] as i16));
        let (blocks_wide, blocks_high) = (info.width_in_blocks, info.height_in_blocks);
        let coefs_at = at;
        for row in 0..blocks_high {
            // SAFETY: one row of the component's block array, within its height.
            let rows = unsafe { access(&mut cinfo.common, *arrays.add(c), row, 1, 0) };
            let blocks = unsafe { std::slice::from_raw_parts(*rows, blocks_wide as usize) };
            let out = &mut region[at..at + blocks.len() * 128];
            for (block, out) in blocks.iter().zip(out.chunks_exact_mut(128)) {
                if !block_is_exact(block, &quant) {
                    return Err(HostReason::Guard);
                }
                for (value, bytes) in block.iter().zip(out.chunks_exact_mut(2)) {
                    bytes.copy_from_slice(&value.to_le_bytes());
                }
            }
            at += blocks.len() * 128;
        }
        at = at.next_multiple_of(16);
        let quant_at = at;
        for (value, bytes) in quant.iter().zip(region[at..at + 256].chunks_exact_mut(4)) {
            bytes.copy_from_slice(&value.to_le_bytes());
        }
        at += 256;
        components.push(WrittenComponent {
            coefs_at: region_at + coefs_at,
            quant_at: region_at + quant_at,
            blocks_wide,
            blocks_high,
            downsampled_width,
            downsampled_height,
            upsample,
        });
    }
    Ok(WrittenJpeg {
        width,
        height,
        colour,
        orientation,
        components,
        scan: None,
    })
}

/// What the frame header said, for [`write_scan`].
struct Frame {
    width: u32,
    height: u32,
    colour: JpegColour,
    orientation: u8,
    max: (u32, u32),
    quant_tables: [*mut ffi::JQUANT_TBL; 4],
}

thread_local! {
    /// The stream without its stuffed bytes, before it is copied into its region.
    static DESTUFFED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes the scan of a file whose header libjpeg has read (`infos`, its components, with
/// their `layouts`) for the device's entropy decoding, if [`jpeg_scan`] takes it: its stream,
/// then each component's multipliers, then its Huffman tables, in one reserved region.
/// `Ok(None)`: the file is one for libjpeg to read.
fn write_scan(
    bytes: &[u8],
    scan_start: usize,
    frame: &Frame,
    infos: &[ffi::jpeg_component_info],
    layouts: &[(u32, u32, Upsample)],
    reserve: &dyn ArenaReserve,
) -> Result<Option<WrittenJpeg>, HostReason> {
    let Some(header) = jpeg_scan::scan_header(bytes, scan_start) else {
        return Ok(None);
    };
    if header.components.len() != infos.len() {
        return Ok(None);
    }
    let mut quant = Vec::with_capacity(infos.len());
    for info in infos {
        let table = frame
            .quant_tables
            .get(info.quant_tbl_no as usize)
            .copied()
            .unwrap_or(std::ptr::null_mut());
        if table.is_null() {
            return Ok(None);
        }
        // SAFETY: a table libjpeg read from a DQT segment, alive with the decompressor.
        let values = unsafe { &(*table).quantval };
        quant.push(std::array::from_fn::<i32, 64, _>(|i| {
            i32::from(values[i] as i16)
        }));
    }
    let sampling: Vec<(u8, u8)> = if infos.len() == 1 {
        vec![(1, 1)]
    } else {
        header
            .components
            .iter()
            .map(|(i, ..)| (infos[*i].h_samp_factor as u8, infos[*i].v_samp_factor as u8))
            .collect()
    };
    let Some(mcu) = jpeg_scan::mcu_layout(&sampling) else {
        return Ok(None);
    };
    let (mcus_per_row, mcu_rows) = if infos.len() == 1 {
        (infos[0].width_in_blocks, infos[0].height_in_blocks)
    } else {
        let (max_h, max_v) = frame.max;
        (
            frame.width.div_ceil(max_h * 8),
            frame.height.div_ceil(max_v * 8),
        )
    };
    let total = u64::from(mcus_per_row) * u64::from(mcu_rows);
    let interval = u64::from(header.restart_interval);
    if total == 0 || total > u64::from(u32::MAX) {
        return Ok(None);
    }
    let segment_count = if interval == 0 {
        1
    } else {
        total.div_ceil(interval)
    } as usize;
    let mcus = |i: usize| -> u32 {
        if interval == 0 {
            total as u32
        } else {
            interval.min(total - i as u64 * interval) as u32
        }
    };
    // Huffman tables, each distinct one once.
    let mut tables: Vec<&jpeg_scan::HuffmanTable> = Vec::new();
    let mut dc_table = Vec::with_capacity(infos.len());
    let mut ac_table = Vec::with_capacity(infos.len());
    for (_, dc, ac) in &header.components {
        for (table, out) in [(dc, &mut dc_table), (ac, &mut ac_table)] {
            let index = match tables.iter().position(|t| *t == table) {
                Some(i) => i,
                None => {
                    tables.push(table);
                    tables.len() - 1
                }
            };
            out.push(index as u8);
        }
    }
    if tables.len() > 4 {
        return Ok(None);
    }
    DESTUFFED.with_borrow_mut(|stream| {
        let Some(segments) = jpeg_scan::destuff(&bytes[scan_start..], stream, segment_count, mcus)
        else {
            return Ok(None);
        };
        let stream_end = (stream.len() + STREAM_PADDING).next_multiple_of(16);
        let quant_end = stream_end + 256 * infos.len();
        let total_bytes = quant_end + TABLE_BYTES * tables.len();
        let (region_at, region) = reserve.reserve(total_bytes).ok_or(HostReason::NoRoom)?;
        region[..stream.len()].copy_from_slice(stream);
        region[stream.len()..stream_end].fill(0);
        let mut components = Vec::with_capacity(infos.len());
        for (c, (q, &(downsampled_width, downsampled_height, upsample))) in
            quant.iter().zip(layouts).enumerate()
        {
            let at = stream_end + 256 * c;
            for (value, bytes) in q.iter().zip(region[at..at + 256].chunks_exact_mut(4)) {
                bytes.copy_from_slice(&value.to_le_bytes());
            }
            components.push(WrittenComponent {
                coefs_at: 0,
                quant_at: region_at + at,
                blocks_wide: infos[c].width_in_blocks,
                blocks_high: infos[c].height_in_blocks,
                downsampled_width,
                downsampled_height,
                upsample,
            });
        }
        for (t, table) in tables.iter().enumerate() {
            table.write(&mut region[quant_end + TABLE_BYTES * t..][..TABLE_BYTES]);
        }
        Ok(Some(WrittenJpeg {
            width: frame.width,
            height: frame.height,
            colour: frame.colour,
            orientation: frame.orientation,
            components,
            scan: Some(WrittenScan {
                stream_at: region_at,
                stream_bytes: stream.len(),
                tables_at: region_at + quant_end,
                tables: tables.len(),
                slots: header.components.iter().map(|(i, ..)| *i).collect(),
                dc_table,
                ac_table,
                sampling,
                mcu,
                mcus_per_row,
                segments,
            }),
        }))
    })
}

/// The EXIF orientation (1 to 8) from the saved APP0 and APP1 segments, as the host decoder
/// reads it (`pil_metadata::jpeg_orientation`); `None` where Pillow refuses the file for its
/// metadata.
fn orientation_of(cinfo: &ffi::jpeg_decompress_struct) -> Option<u8> {
    let mut segments = Vec::new();
    let mut marker = cinfo.marker_list;
    while !marker.is_null() {
        // SAFETY: libjpeg's saved-marker list, valid until the decompressor is destroyed.
        let m = unsafe { &*marker };
        if (0xE0..=0xE1).contains(&m.marker) && !m.data.is_null() {
            let data = unsafe { std::slice::from_raw_parts(m.data, m.data_length as usize) };
            segments.push((m.marker - 0xE0, data));
        }
        marker = m.next;
    }
    super::pil_metadata::jpeg_orientation(segments.into_iter())
        .ok()
        .map(|o| o.to_exif())
}
