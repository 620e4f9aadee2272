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
    let exps: Vec<f64> = logits.iter().map(|&v| (v as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(k)
        .map(|index| Prediction {
            index,
            label: config.label(index),
            probability: (exps[index] / sum) as f32,
        })
        .collect()
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
}
