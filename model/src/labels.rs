//! From logits to the top-k (index, label, probability).

use crate::config::ModelConfig;

#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub index: usize,
    pub label: String,
    pub probability: f32,
}

/// Softmax over one row of logits (in f64, so tiny probabilities are not lost), then the
/// `k` most probable classes, ties broken by the lower index.
pub fn top_k(logits: &[f32], k: usize, config: &ModelConfig) -> Vec<Prediction> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    top_indices(logits, k)
        .into_iter()
        .map(|index| Prediction {
            index,
            label: config.label(index),
            probability: ((logits[index] as f64 - max).exp() / sum) as f32,
        })
        .collect()
}

/// The indices of the `k` largest values (by `total_cmp`), largest first, ties broken by the
/// lower index: what a stable descending sort would put first, in one pass (k is a handful,
/// rows are a thousand classes).
pub fn top_indices(values: &[f32], k: usize) -> Vec<usize> {
    let mut top: Vec<usize> = Vec::with_capacity(k + 1);
    for (index, value) in values.iter().enumerate() {
        if top.len() == k
            && top
                .last()
                .is_none_or(|&last| value.total_cmp(&values[last]).is_le())
        {
            continue;
        }
        // After every kept value at least as large: equal values stay in index order.
        let at = top.partition_point(|&kept| values[kept].total_cmp(value).is_ge());
        top.insert(at, index);
        top.truncate(k);
    }
    top
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_sorts_and_normalises() {
        let config =
            ModelConfig::from_json_str(r#"{"id2label": {"0": "a", "1": "b", "2": "c"}}"#).unwrap();
        let p = top_k(&[1.0, 3.0, 2.0], 2, &config);
        assert_eq!((p[0].index, p[0].label.as_str(), p[1].index), (1, "b", 2));
        let e = [1.0f64.exp(), 3.0f64.exp(), 2.0f64.exp()];
        assert!((p[0].probability as f64 - e[1] / e.iter().sum::<f64>()).abs() < 1e-6);
        assert_eq!(
            top_k(&[0.0, 0.0], 5, &config).len(),
            2,
            "k larger than the classes"
        );
    }

    #[test]
    fn top_indices_are_a_stable_descending_sorts_first() {
        let mut state = 12345u64;
        for len in [0usize, 1, 2, 7, 100, 1000] {
            for k in [0usize, 1, 3, 5, 20] {
                let values: Vec<f32> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                        // Few distinct values, so ties are common.
                        ((state >> 59) as f32) - 8.0
                    })
                    .collect();
                let mut order: Vec<usize> = (0..len).collect();
                order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
                order.truncate(k);
                assert_eq!(top_indices(&values, k), order, "len {len} k {k}");
            }
        }
    }
}
