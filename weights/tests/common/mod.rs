//! Builders for safetensors files written byte by byte, so tests control every header field.
#![allow(dead_code)] // each test file uses a different part

use std::path::Path;

/// One tensor entry of a hand-built file: name, dtype name, shape, raw data bytes.
pub struct RawTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

pub fn f32_tensor(name: &str, shape: &[usize], values: &[f32]) -> RawTensor {
    RawTensor {
        name: name.to_string(),
        dtype: "F32".to_string(),
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub fn f16_tensor(name: &str, shape: &[usize], values: &[f32]) -> RawTensor {
    RawTensor {
        name: name.to_string(),
        dtype: "F16".to_string(),
        shape: shape.to_vec(),
        data: values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
    }
}

pub fn bf16_tensor(name: &str, shape: &[usize], values: &[f32]) -> RawTensor {
    RawTensor {
        name: name.to_string(),
        dtype: "BF16".to_string(),
        shape: shape.to_vec(),
        data: values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
    }
}

pub fn raw_tensor(name: &str, dtype: &str, shape: &[usize], data: Vec<u8>) -> RawTensor {
    RawTensor {
        name: name.to_string(),
        dtype: dtype.to_string(),
        shape: shape.to_vec(),
        data,
    }
}

/// The bytes of a safetensors file holding `tensors` in the given order. `header_padding`
/// spaces are appended to the JSON header; an odd count puts the data at an odd file offset.
pub fn safetensors_bytes(tensors: &[RawTensor], header_padding: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".to_string(),
        serde_json::json!({ "format": "pt" }),
    );
    let mut offset = 0usize;
    for tensor in tensors {
        let end = offset + tensor.data.len();
        header.insert(
            tensor.name.clone(),
            serde_json::json!({
                "dtype": tensor.dtype,
                "shape": tensor.shape,
                "data_offsets": [offset, end],
            }),
        );
        offset = end;
    }
    let mut header_text = serde_json::to_string(&header).unwrap();
    header_text.push_str(&" ".repeat(header_padding));
    with_header(
        &header_text,
        &tensors
            .iter()
            .flat_map(|t| t.data.clone())
            .collect::<Vec<_>>(),
    )
}

/// The bytes of a file with this exact header text and data section.
pub fn with_header(header_text: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header_text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header_text.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

pub fn write_file(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// A sharded-checkpoint index mapping each tensor name to its shard file name.
pub fn index_json(entries: &[(&str, &str)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .map(|(tensor, shard)| (tensor.to_string(), serde_json::json!(shard)))
        .collect();
    serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map }).to_string()
}

/// Values with a recognisable pattern: i * scale + offset.
pub fn ramp(len: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..len).map(|i| i as f32 * scale + offset).collect()
}
