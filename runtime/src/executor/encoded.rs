//! Parameters read and encoded before the executor that uploads them exists: a process that
//! starts the GPU's driver on another thread (about 0.2 s on an H100) reads and converts its
//! checkpoint meanwhile, so that building the executor later is mostly uploads (measured:
//! benchmarks/NOTES.md, 2026-11-25 "Warm start: the driver behind the weights").
//!
//! The set is what [`Executor::new`](super::Executor::new) would load for the same graph:
//! every parameter a node reads, in the storage type the plan gives it. An entry is handed
//! out once, to the executor whose parameter has the same key, shape and type; what no
//! executor takes is freed with the set.

use super::{load_param, params_read, read_params, ParamStore};
use crate::graph::Graph;
use crate::plan::{value_dtypes, Precision};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Mutex;
use vitrt_kernels::DType;

/// A parameter as an executor asks for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EncodedKey {
    key: String,
    shape: Vec<usize>,
    dtype: DType,
}

/// Parameters as little-endian bytes of their storage type, ready to upload.
#[derive(Debug, Default)]
pub struct EncodedParams {
    entries: Mutex<HashMap<EncodedKey, Vec<u8>>>,
}

impl EncodedParams {
    /// No parameters: every one is read when the executor binds it.
    pub fn empty() -> EncodedParams {
        EncodedParams::default()
    }

    /// Reads and encodes every parameter `graph` reads, stored as a plan under `precision`
    /// stores it, on all cores, in graph order until the next one would pass `budget_bytes`
    /// of encoded bytes (the rest load as usual, a group at a time, when the executor is
    /// built). A parameter the store cannot read is left out: the executor reads it again and
    /// reports the error where it always has.
    pub fn encode(
        graph: &Graph,
        precision: Precision,
        params: &dyn ParamStore,
        budget_bytes: usize,
    ) -> EncodedParams {
        let dtypes = value_dtypes(graph, precision);
        let mut wanted = Vec::new();
        let mut bytes = 0usize;
        for (source, shape, dtype) in params_read(graph, &read_params(graph), &dtypes) {
            let size = shape.iter().product::<usize>() * dtype.size_bytes();
            if bytes + size > budget_bytes {
                break;
            }
            bytes += size;
            let key = EncodedKey {
                key: source.key(),
                shape: shape.to_vec(),
                dtype,
            };
            wanted.push((source, key));
        }
        let entries = wanted
            .into_par_iter()
            .filter_map(|(source, key)| {
                let values = load_param(source, &key.shape, params).ok()?;
                let encoded = key.dtype.encode(&values);
                Some((key, encoded))
            })
            .collect();
        EncodedParams {
            entries: Mutex::new(entries),
        }
    }

    /// How many parameters are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The encoded bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// Hands out the parameter `key` of `shape` stored as `dtype`, once.
    pub(crate) fn take(&self, key: &str, shape: &[usize], dtype: DType) -> Option<Vec<u8>> {
        self.lock().remove(&EncodedKey {
            key: key.to_string(),
            shape: shape.to_vec(),
            dtype,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EncodedKey, Vec<u8>>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
