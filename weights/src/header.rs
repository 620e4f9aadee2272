//! The header of one `.safetensors` file: an 8-byte little-endian length, then that many bytes
//! of JSON mapping each tensor name to its dtype, shape and byte range in the data section.
//!
//! We read it ourselves instead of through `safetensors::SafeTensors::read_metadata` for three
//! reasons: its messages do not name the offending tensor; it rejects a whole file as soon as
//! one tensor has a dtype it does not know, where we want to open such a file and refuse only a
//! load of that tensor; and its final size check adds untrusted offsets without overflow
//! checking, which panics in debug builds on a crafted file. Every check here is on checked
//! arithmetic, so no input panics.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;

use crate::dtype::FileDType;
use crate::error::WeightsError;
use crate::unique_keys::UniqueKeys;

const LENGTH_PREFIX_BYTES: usize = 8;

/// One tensor as the header describes it, with its byte range resolved to absolute file offsets.
#[derive(Debug, Clone)]
pub(crate) struct TensorEntry {
    pub(crate) name: String,
    pub(crate) dtype: FileDType,
    pub(crate) shape: Vec<usize>,
    pub(crate) file_range: Range<usize>,
}

#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// Parses and validates the header of `file_bytes` (the whole file), returning the tensors in
/// the order of their data.
pub(crate) fn parse_header(
    path: &Path,
    file_bytes: &[u8],
) -> Result<Vec<TensorEntry>, WeightsError> {
    let corrupt = |reason: String| WeightsError::CorruptFile {
        path: path.to_path_buf(),
        reason,
    };
    let file_len = file_bytes.len();
    let Some(length_bytes) = file_bytes.get(..LENGTH_PREFIX_BYTES) else {
        return Err(corrupt(format!(
            "the file is {file_len} bytes, too short to hold the 8-byte header length"
        )));
    };
    let mut length_array = [0u8; LENGTH_PREFIX_BYTES];
    length_array.copy_from_slice(length_bytes);
    let declared_header_len = u64::from_le_bytes(length_array);
    let room_for_header = (file_len - LENGTH_PREFIX_BYTES) as u64;
    if declared_header_len > room_for_header {
        return Err(corrupt(format!(
            "the header length {declared_header_len} goes beyond the end of the file \
             ({file_len} bytes): the file is truncated or not a safetensors file"
        )));
    }
    // Fits in usize: it is at most the file length.
    let header_end = LENGTH_PREFIX_BYTES + declared_header_len as usize;
    let header_text = std::str::from_utf8(&file_bytes[LENGTH_PREFIX_BYTES..header_end])
        .map_err(|e| corrupt(format!("the header is not UTF-8: {e}")))?;
    // Each name at most once: a second entry would silently replace the first (Python's
    // safetensors refuses such a file).
    let UniqueKeys(header) = serde_json::from_str::<UniqueKeys<serde_json::Value>>(header_text)
        .map_err(|e| {
            corrupt(format!(
                "the header is not a JSON object with unique names: {e}"
            ))
        })?;

    let data_len = file_len - header_end;
    let mut entries = Vec::with_capacity(header.len());
    for (name, value) in header {
        // Free-form string metadata ("format": "pt", ...), not a tensor.
        if name == "__metadata__" {
            continue;
        }
        let raw: RawEntry = serde_json::from_value(value).map_err(|e| {
            corrupt(format!(
                "the header entry of tensor `{name}` is malformed: {e}"
            ))
        })?;
        let (start, end) = raw.data_offsets;
        if end < start {
            return Err(corrupt(format!(
                "tensor `{name}` has data offsets [{start}, {end}]: the end comes before the start"
            )));
        }
        if end > data_len {
            return Err(corrupt(format!(
                "tensor `{name}` has data offsets [{start}, {end}] past the end of the data \
                 section ({data_len} bytes): the file is truncated"
            )));
        }
        let dtype = FileDType::parse(&raw.dtype);
        if let Some(bits) = dtype.bits_per_element() {
            let expected_bytes = raw
                .shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .and_then(|n| n.checked_mul(bits))
                .map(|total_bits| total_bits.div_ceil(8));
            if expected_bytes != Some(end - start) {
                let needed = match expected_bytes {
                    Some(bytes) => format!("{bytes} bytes"),
                    None => "more bytes than can be addressed".to_string(),
                };
                return Err(corrupt(format!(
                    "tensor `{name}` spans {} bytes but its shape {:?} of {} needs {needed}",
                    end - start,
                    raw.shape,
                    dtype.name()
                )));
            }
        }
        entries.push(TensorEntry {
            name,
            dtype,
            shape: raw.shape,
            // Cannot overflow: both offsets are within the data section, which is within the file.
            file_range: header_end + start..header_end + end,
        });
    }

    entries.sort_by_key(|entry| (entry.file_range.start, entry.file_range.end));
    for pair in entries.windows(2) {
        let (first, second) = (&pair[0], &pair[1]);
        if second.file_range.start < first.file_range.end {
            return Err(corrupt(format!(
                "the data of tensors `{}` (file bytes {:?}) and `{}` (file bytes {:?}) overlap",
                first.name, first.file_range, second.name, second.file_range
            )));
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with_header(header: &str, data_len: usize) -> Vec<u8> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.resize(bytes.len() + data_len, 0);
        bytes
    }

    fn error_text(bytes: &[u8]) -> String {
        match parse_header(Path::new("x.safetensors"), bytes) {
            Ok(entries) => panic!("expected an error, parsed {entries:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn resolves_offsets_to_absolute_file_ranges_in_data_order() {
        let header = r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},
                         "a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},
                         "__metadata__":{"format":"pt"}}"#;
        let bytes = file_with_header(header, 12);
        let entries = parse_header(Path::new("x"), &bytes).unwrap();
        let start = 8 + header.len();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name, "a");
        assert_eq!(entries[0].file_range, start..start + 4);
        assert_eq!(entries[1].name, "b");
        assert_eq!(entries[1].file_range, start + 4..start + 12);
        assert_eq!(entries[1].shape, vec![2]);
    }

    #[test]
    fn huge_offsets_are_an_error_not_an_overflow() {
        let max = usize::MAX;
        let header =
            format!(r#"{{"a":{{"dtype":"U8","shape":[{max}],"data_offsets":[0,{max}]}}}}"#);
        let text = error_text(&file_with_header(&header, 0));
        assert!(text.contains("past the end"), "{text}");

        let header =
            format!(r#"{{"a":{{"dtype":"F32","shape":[{max},{max}],"data_offsets":[0,0]}}}}"#);
        let text = error_text(&file_with_header(&header, 0));
        assert!(text.contains("more bytes than can be addressed"), "{text}");
    }

    #[test]
    fn header_length_is_checked_before_use() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let text = error_text(&bytes);
        assert!(text.contains("beyond the end of the file"), "{text}");
        assert!(text.contains("x.safetensors"), "{text}");
    }

    #[test]
    fn an_unknown_dtype_name_is_kept_for_a_later_error() {
        let header = r#"{"q":{"dtype":"Q4_K","shape":[3],"data_offsets":[0,5]}}"#;
        let entries = parse_header(Path::new("x"), &file_with_header(header, 5)).unwrap();
        assert_eq!(entries[0].dtype, FileDType::Other("Q4_K".into()));
    }

    #[test]
    fn a_tensor_named_twice_is_refused() {
        let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                         "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        let text = error_text(&file_with_header(header, 8));
        assert!(text.contains("`a` is named twice"), "{text}");
    }
}
