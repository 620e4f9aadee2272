//! Zero-shot labels as text: the label lists (`--labels`, `--labels-file`), the templates a
//! label is put into, and each label's text embedding from its templates' (CLIP's prompt
//! ensembling). Shared by `vitrt zero-shot` and the Python module's `Model.zero_shot`.

use crate::error::ModelError;
use std::collections::HashSet;

/// The labels of a comma-separated list ("cat, dog,a red car"), trimmed; an error for an
/// empty one (naming its place), none at all, or one named twice.
pub fn labels_from_list(list: &str) -> Result<Vec<String>, ModelError> {
    let labels: Vec<String> = list.split(',').map(|l| l.trim().to_string()).collect();
    if let Some(i) = labels.iter().position(String::is_empty) {
        return Err(ModelError::Usage(format!(
            "--labels: label {} is empty (in {list:?})",
            i + 1
        )));
    }
    check_label_list(labels)
}

/// The labels of a labels file's text, one a line, trimmed, blank lines skipped; an error for
/// none at all or one named twice.
pub fn labels_from_lines(text: &str) -> Result<Vec<String>, ModelError> {
    check_label_list(
        text.lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect(),
    )
}

/// The labels trimmed; an error for an empty list, an empty label (by its place, from 1) or a
/// label named twice (found through a set: a hundred thousand labels are checked in
/// milliseconds). The Python module's `Model.zero_shot` checks its list here too.
pub fn check_label_list(labels: Vec<String>) -> Result<Vec<String>, ModelError> {
    if labels.is_empty() {
        return Err(ModelError::Usage(
            "the label list is empty: zero-shot needs at least one label".into(),
        ));
    }
    let labels: Vec<String> = labels.into_iter().map(|l| l.trim().to_string()).collect();
    if let Some(i) = labels.iter().position(String::is_empty) {
        return Err(ModelError::Usage(format!("label {} is empty", i + 1)));
    }
    let mut seen = HashSet::with_capacity(labels.len());
    if let Some(label) = labels.iter().find(|label| !seen.insert(label.as_str())) {
        let shown: String = label.chars().take(200).collect();
        let cut = if shown.len() < label.len() { "..." } else { "" };
        return Err(ModelError::Usage(format!(
            "label {shown:?}{cut} is named twice"
        )));
    }
    Ok(labels)
}

/// transformers' zero-shot image classification pipeline's template.
pub const DEFAULT_TEMPLATE: &str = "This is a photo of {}.";

/// A template must hold exactly one `{}`, where the label goes.
pub fn check_template(template: &str) -> Result<(), ModelError> {
    match template.matches("{}").count() {
        1 => Ok(()),
        0 => Err(ModelError::Usage(format!(
            "template {template:?} has no {{}} to put the label in"
        ))),
        n => Err(ModelError::Usage(format!(
            "template {template:?} has {n} {{}}; it takes one label"
        ))),
    }
}

/// Each label's text embedding: the mean of its templates' unit embeddings, scaled back to
/// unit length, summed in f64 on the host (one pass over labels x templates x width values,
/// once per label set). `embeds` holds the rows label by label, each label's templates in
/// order.
pub fn average_templates(
    embeds: &[f32],
    labels: usize,
    templates: usize,
    width: usize,
) -> Result<Vec<f32>, ModelError> {
    if embeds.len() != labels * templates * width {
        return Err(ModelError::Usage(format!(
            "the text tower gave {} values for {labels} labels x {templates} templates of {width}",
            embeds.len()
        )));
    }
    let mut out = Vec::with_capacity(labels * width);
    for (label, rows) in embeds.chunks(templates * width).enumerate() {
        let mut mean = vec![0.0f64; width];
        for row in rows.chunks(width) {
            for (m, &v) in mean.iter_mut().zip(row) {
                *m += f64::from(v);
            }
        }
        let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !norm.is_finite() || norm == 0.0 {
            return Err(ModelError::Usage(format!(
                "the text embedding of label {} is not finite or zero",
                label + 1
            )));
        }
        out.extend(mean.iter().map(|v| (v / norm) as f32));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_lists_are_checked() {
        assert_eq!(
            labels_from_list(" cat, dog ,a red car").unwrap(),
            ["cat", "dog", "a red car"]
        );
        let err = labels_from_list("cat,,dog").unwrap_err().to_string();
        assert!(err.contains("label 2 is empty"), "{err}");
        let err = labels_from_list("cat,cat").unwrap_err().to_string();
        assert!(err.contains("named twice"), "{err}");
        assert!(labels_from_list("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert_eq!(
            labels_from_lines("cat\n\n  dog \r\n").unwrap(),
            ["cat", "dog"]
        );
        assert!(labels_from_lines("\n \n")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        // A hundred thousand labels, one repeated at the end: found at once.
        let mut many: String = (0..100_000).map(|i| format!("label {i}\n")).collect();
        many.push_str("label 7\n");
        let err = labels_from_lines(&many).unwrap_err().to_string();
        assert!(err.contains("\"label 7\" is named twice"), "{err}");
        let list = |labels: &[&str]| labels.iter().map(|l| l.to_string()).collect();
        assert_eq!(
            check_label_list(list(&[" cat ", "dog"])).unwrap(),
            ["cat", "dog"]
        );
        let err = check_label_list(list(&["cat", "  "]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("label 2 is empty"), "{err}");
    }

    #[test]
    fn templates_take_one_label() {
        assert!(check_template("a photo of a {}.").is_ok());
        let err = check_template("a photo").unwrap_err().to_string();
        assert!(err.contains("no {}"), "{err}");
        assert!(check_template("{} and {}").is_err());
    }

    #[test]
    fn templates_are_averaged_then_normalised() {
        // One label, two templates: (1, 0) and (0, 1) average to (0.5, 0.5), unit length
        // (1/√2, 1/√2).
        let out = average_templates(&[1.0, 0.0, 0.0, 1.0], 1, 2, 2).unwrap();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((out[0] - h).abs() < 1e-7 && (out[1] - h).abs() < 1e-7);
        assert!(average_templates(&[0.0, 0.0], 1, 1, 2).is_err());
    }
}
