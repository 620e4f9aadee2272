//! Comparison with a reference (PyTorch) tensor by tensor, in layer order, so that a
//! failure names the first layer that drifts.

use vitrt_runtime::{DType, HostTensor};

/// The largest relative error each run dtype may show against PyTorch's float64 reference:
/// f32 1e-4, f16 1e-2, bf16 2e-2 (rounding ViT-B's weights to bf16 alone costs about 1e-2).
/// A bf16 run must also be no worse than PyTorch's own bf16 on the same inputs, where the
/// reference records that (`vitrt parity`, beside the reference: torch-bf16.json).
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        DType::BF16 => 2e-2,
        // Never a run's dtype (an FP8 run computes in f16, its linear layers in e4m3): one
        // e4m3 rounding, 2^-4 of a value.
        DType::E4M3 => 6.25e-2,
    }
}

#[derive(Clone, Debug)]
pub struct Comparison {
    pub name: String,
    pub shape: Vec<usize>,
    /// Our shape, when it differs from the reference's (then both errors are infinite).
    pub shape_mismatch: Option<Vec<usize>>,
    pub max_abs_error: f64,
    /// `max |ours - reference| / max |reference|`: an error relative to the tensor's scale,
    /// which does not blow up on elements near zero.
    pub relative_error: f64,
    /// For logits: whether every row's arg-max agrees.
    pub same_top1: Option<bool>,
}

/// Compares `ours` against every reference tensor (by name). A reference tensor the run did
/// not produce is an error; a shape mismatch is a row with infinite error, so the table still
/// shows every other layer.
pub fn compare(ours: &[HostTensor], reference: &[HostTensor]) -> Result<Vec<Comparison>, String> {
    let mut rows = Vec::new();
    for r in reference {
        let Some(o) = ours.iter().find(|o| o.name == r.name) else {
            return Err(format!(
                "the reference holds {} but the run did not produce it",
                r.name
            ));
        };
        if o.shape != r.shape {
            rows.push(Comparison {
                name: r.name.clone(),
                shape: r.shape.clone(),
                shape_mismatch: Some(o.shape.clone()),
                max_abs_error: f64::INFINITY,
                relative_error: f64::INFINITY,
                same_top1: None,
            });
            continue;
        }
        let mut max_abs = 0.0f64;
        let mut scale = 0.0f64;
        for (&a, &b) in o.data.iter().zip(&r.data) {
            let err = (a as f64 - b as f64).abs();
            max_abs = if err.is_nan() {
                f64::INFINITY
            } else {
                max_abs.max(err)
            };
            scale = scale.max((b as f64).abs());
        }
        let same_top1 = (r.name == "logits").then(|| {
            let cols = *r.shape.last().unwrap_or(&1);
            o.data
                .chunks(cols)
                .zip(r.data.chunks(cols))
                .all(|(a, b)| argmax(a) == argmax(b))
        });
        rows.push(Comparison {
            name: r.name.clone(),
            shape: r.shape.clone(),
            shape_mismatch: None,
            max_abs_error: max_abs,
            relative_error: max_abs / scale.max(f64::MIN_POSITIVE),
            same_top1,
        });
    }
    rows.sort_by_key(|c| layer_order(&c.name));
    Ok(rows)
}

/// hidden_states.0, .1, ... then the final outputs.
pub fn layer_order(name: &str) -> (usize, String) {
    match name
        .strip_prefix("hidden_states.")
        .and_then(|i| i.parse().ok())
    {
        Some(i) => (i, String::new()),
        None => (usize::MAX, name.to_string()),
    }
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, data: Vec<f32>) -> HostTensor {
        HostTensor {
            name: name.into(),
            shape: vec![1, data.len()],
            data,
        }
    }

    #[test]
    fn reports_scale_relative_error_and_top1() {
        let ours = [
            t("logits", vec![1.0, 2.1]),
            t("hidden_states.1", vec![0.0, 1.0]),
        ];
        let refs = [
            t("logits", vec![1.0, 2.0]),
            t("hidden_states.1", vec![0.0, 1.0]),
        ];
        let rows = compare(&ours, &refs).unwrap();
        assert_eq!(rows[0].name, "hidden_states.1");
        assert!((rows[1].relative_error - 0.05).abs() < 1e-6);
        assert_eq!(rows[1].same_top1, Some(true));
        let flipped = compare(&[t("logits", vec![2.0, 1.0])], &refs[..1]).unwrap();
        assert_eq!(flipped[0].same_top1, Some(false));
    }

    #[test]
    fn nan_is_an_infinite_error_and_missing_tensors_are_errors() {
        let rows = compare(
            &[t("logits", vec![f32::NAN, 1.0])],
            &[t("logits", vec![1.0, 1.0])],
        )
        .unwrap();
        assert!(rows[0].relative_error.is_infinite());
        assert!(compare(&[], &[t("logits", vec![1.0])]).is_err());
        let wrong = compare(&[t("logits", vec![1.0])], &[t("logits", vec![1.0, 2.0])]).unwrap();
        assert_eq!(wrong[0].shape_mismatch, Some(vec![1, 1]));
        assert!(wrong[0].relative_error.is_infinite());
    }
}
