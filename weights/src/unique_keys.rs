//! A JSON object read with its keys in order and every key at most once. `serde_json`'s maps
//! keep the last of two equal keys without a word; in a safetensors header that would let a
//! second entry of a tensor silently replace the first (and hide the first from the overlap
//! check), where Python's safetensors refuses the file, and in a sharded index it would let a
//! later line move a tensor to another shard.

use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

/// The entries of a JSON object, in file order; deserializing fails on a key named twice.
#[derive(Debug)]
pub(crate) struct UniqueKeys<V>(pub(crate) Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueKeys<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = UniqueKeys<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = HashSet::new();
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    if !seen.insert(key.clone()) {
                        return Err(A::Error::custom(format!("`{key}` is named twice")));
                    }
                    entries.push((key, value));
                }
                Ok(UniqueKeys(entries))
            }
        }

        deserializer.deserialize_map(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_in_order_and_a_repeated_key_is_refused() {
        let UniqueKeys(entries) =
            serde_json::from_str::<UniqueKeys<u32>>(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(entries, [("b".to_string(), 1), ("a".to_string(), 2)]);
        let error = serde_json::from_str::<UniqueKeys<u32>>(r#"{"a": 1, "b": 2, "a": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("`a` is named twice"), "{error}");
        assert!(serde_json::from_str::<UniqueKeys<u32>>("[1]").is_err());
    }
}
