//! The table `vitrt bench` prints: one line per timed case, ours beside its yardstick (cuBLAS
//! for matmuls, a device-to-device copy of the same traffic for the rest), the ratio first
//! after the case's name because it is the figure the run is for.

use comfy_table::{presets, CellAlignment, Table};

use super::schema::{KernelRow, Skipped};

/// One line of the table: our row and its baseline, either of which may have been skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison<'a> {
    pub op: &'a str,
    pub case: &'a str,
    pub epilogue: Option<&'a str>,
    pub ours: Option<&'a KernelRow>,
    pub baseline: Option<&'a KernelRow>,
}

impl Comparison<'_> {
    /// Our rate over the baseline's: above 1 we are faster.
    pub fn ratio(&self) -> Option<f64> {
        let (ours, baseline) = (self.ours?.rate()?, self.baseline?.rate()?);
        (baseline > 0.0).then(|| ours / baseline)
    }
}

/// Whether `row` is `provider`'s on the same matmul case, or for any other op the copy whose
/// case is `op/case`.
fn is_baseline_of(
    row: &KernelRow,
    provider: &str,
    op: &str,
    case: &str,
    epilogue: Option<&str>,
) -> bool {
    if matmul_baselines(op).is_empty() {
        row.op == "copy" && row.provider == "copy" && row.case == format!("{op}/{case}")
    } else {
        row.op == op
            && row.provider == provider
            && row.case == case
            && row.epilogue.as_deref() == epilogue
    }
}

/// The row a case of `op` is compared with: cuBLAS on the same matmul case; for an FP8 matmul
/// cuBLASLt's FP8 GEMM, else (cuBLASLt skipped) our 16-bit program on the same case; the copy
/// whose case is `op/case` for the others.
fn baseline<'a>(
    rows: &'a [KernelRow],
    op: &str,
    case: &str,
    epilogue: Option<&str>,
) -> Option<&'a KernelRow> {
    let providers = match matmul_baselines(op) {
        [] => &["copy"][..],
        providers => providers,
    };
    providers.iter().find_map(|provider| {
        rows.iter()
            .find(|r| is_baseline_of(r, provider, op, case, epilogue))
    })
}

/// Pairs every case (ours timed or skipped) with its baseline, in the order the cases ran.
pub fn comparisons<'a>(rows: &'a [KernelRow], skipped: &'a [Skipped]) -> Vec<Comparison<'a>> {
    // Every (op, case, epilogue) of ours, whether it ran or not.
    let mut keys: Vec<(&str, &str, Option<&str>)> = Vec::new();
    let ours = rows
        .iter()
        .filter(|r| r.provider == "vitrt")
        .map(|r| (r.op.as_str(), r.case.as_str(), r.epilogue.as_deref()));
    let ours_skipped = skipped
        .iter()
        .filter(|s| s.provider == "vitrt")
        .map(|s| (s.op.as_str(), s.case.as_str(), s.epilogue.as_deref()));
    for key in ours.chain(ours_skipped) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(op, case, epilogue)| Comparison {
            op,
            case,
            epilogue,
            ours: rows.iter().find(|r| {
                r.provider == "vitrt"
                    && r.op == op
                    && r.case == case
                    && r.epilogue.as_deref() == epilogue
            }),
            baseline: baseline(rows, op, case, epilogue),
        })
        .collect()
}

/// The providers a matmul op's rows are compared with, the first present (none: not a
/// matmul op).
fn matmul_baselines(op: &str) -> &'static [&'static str] {
    match op {
        "matmul" => &["cublas"],
        "matmul-fp8" => &["cublas", "vitrt-16bit"],
        "matmul-layernorm" => &["vitrt-unfused"],
        "matmul-row-stats" => &["vitrt-plain"],
        _ => &[],
    }
}

fn rate_text(row: Option<&KernelRow>) -> String {
    match row {
        Some(r) => match (r.tflops, r.gbps) {
            (Some(t), _) => format!("{t:.1} TFLOP/s"),
            (None, Some(g)) => format!("{g:.0} GB/s"),
            (None, None) => "-".into(),
        },
        None => "skipped".into(),
    }
}

fn ms_text(row: Option<&KernelRow>) -> String {
    row.map_or("-".into(), |r| format!("{:.4}", r.median_ms))
}

/// The aligned table: text columns left-aligned, figures right-aligned, two spaces apart, no
/// borders (comfy-table without its terminal feature: never wrapped to a terminal's width).
pub fn render(rows: &[KernelRow], skipped: &[Skipped]) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header([
        "op", "case", "epilogue", "ratio", "ours", "baseline", "vs", "ours ms", "base ms",
    ]);
    for c in comparisons(rows, skipped) {
        table.add_row([
            c.op.to_string(),
            c.case.to_string(),
            c.epilogue.unwrap_or("").to_string(),
            c.ratio().map_or("-".into(), |r| format!("{r:.2}x")),
            rate_text(c.ours),
            rate_text(c.baseline),
            match c.baseline.map(|b| b.provider.as_str()) {
                Some("cublas") => "cuBLAS",
                Some("vitrt-16bit") => "ours 16-bit",
                Some("vitrt-unfused") => "ours unfused",
                Some("vitrt-plain") => "ours plain",
                _ if c.op.starts_with("matmul") => "cuBLAS",
                _ => "copy",
            }
            .to_string(),
            ms_text(c.ours),
            ms_text(c.baseline),
        ]);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 2));
        if [3, 4, 5, 7, 8].contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.trim_fmt() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::Stats;

    fn row(op: &str, case: &str, provider: &str, epilogue: Option<&str>, ms: f64) -> KernelRow {
        let stats = Stats::from_samples(&[ms]).unwrap();
        let matmul = op.starts_with("matmul");
        KernelRow::new(
            op,
            case,
            provider,
            epilogue,
            vec![1],
            &stats,
            matmul.then_some(2e9),
            (!matmul).then_some(2e9),
        )
    }

    #[test]
    fn ours_is_paired_with_cublas_or_the_copy_of_the_same_case() {
        let rows = vec![
            row("matmul", "square/256", "vitrt", Some("none"), 2.0),
            row("matmul", "square/256", "cublas", Some("none"), 1.0),
            row("matmul", "square/256", "vitrt", Some("bias+gelu"), 2.0),
            row("matmul", "square/256", "cublas", Some("bias+gelu"), 4.0),
            row("add", "vit-b16/b1", "vitrt", None, 1.0),
            row("copy", "layernorm/vit-b16/b1", "copy", None, 0.5),
            row("copy", "add/vit-b16/b1", "copy", None, 0.8),
        ];
        let c = comparisons(&rows, &[]);
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[0].ratio(),
            Some(0.5),
            "twice cuBLAS's time: half its rate"
        );
        assert_eq!(c[1].epilogue, Some("bias+gelu"));
        assert_eq!(c[1].ratio(), Some(2.0));
        assert_eq!(c[2].baseline.unwrap().case, "add/vit-b16/b1");
        assert!((c[2].ratio().unwrap() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn fp8_matmuls_are_paired_with_cublaslt_else_our_16_bit_program() {
        let mut rows = vec![
            row("matmul-fp8", "vit-b16/fc1/b64", "vitrt", Some("none"), 1.0),
            row(
                "matmul-fp8",
                "vit-b16/fc1/b64",
                "vitrt-16bit",
                Some("none"),
                2.0,
            ),
            row("matmul-fp8", "vit-b16/fc1/b64", "cublas", Some("none"), 0.8),
            // The 16-bit matmul case of the same name is not the FP8 one's baseline.
            row(
                "matmul",
                "vit-b16/fc1/b64",
                "cublas",
                Some("bias+gelu"),
                9.0,
            ),
            row(
                "matmul-fp8",
                "vit-b16/fc1/b64",
                "vitrt",
                Some("bias+gelu"),
                1.0,
            ),
            row(
                "matmul-fp8",
                "vit-b16/fc1/b64",
                "vitrt-16bit",
                Some("bias+gelu"),
                1.5,
            ),
        ];
        let c = comparisons(&rows, &[]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].baseline.unwrap().provider, "cublas");
        // Rates are kept to three decimals.
        assert!((c[0].ratio().unwrap() - 0.8).abs() < 1e-3);
        assert_eq!(c[1].baseline.unwrap().provider, "vitrt-16bit");
        assert!((c[1].ratio().unwrap() - 1.5).abs() < 1e-3);
        let table = render(&rows, &[]);
        assert!(
            table.contains("ours 16-bit") && table.contains("cuBLAS"),
            "{table}"
        );
        rows.retain(|r| r.provider != "cublas");
        let c = comparisons(&rows, &[]);
        assert_eq!(c[0].baseline.unwrap().provider, "vitrt-16bit");
    }

    #[test]
    fn layernorm_folded_matmuls_are_paired_with_our_unfused_pair() {
        let rows = vec![
            row(
                "matmul-layernorm",
                "vit-b16/qkv/b8",
                "vitrt",
                Some("bias"),
                2.0,
            ),
            row(
                "matmul-layernorm",
                "vit-b16/qkv/b8",
                "vitrt-unfused",
                Some("bias"),
                1.0,
            ),
            // The plain matmul case of the same name is not its baseline.
            row("matmul", "vit-b16/qkv/b8", "cublas", Some("none"), 0.5),
        ];
        let c = comparisons(&rows, &[]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].baseline.unwrap().provider, "vitrt-unfused");
        assert!((c[0].ratio().unwrap() - 0.5).abs() < 1e-3);
        assert!(render(&rows, &[]).contains("ours unfused"));
    }

    #[test]
    fn skipped_cases_still_get_a_line() {
        let rows = vec![row("matmul", "square/8192", "cublas", Some("none"), 1.0)];
        let skipped = vec![Skipped {
            op: "matmul".into(),
            case: "square/8192".into(),
            provider: "vitrt".into(),
            epilogue: Some("none".into()),
            reason: "out of GPU memory".into(),
        }];
        let c = comparisons(&rows, &skipped);
        assert_eq!(c.len(), 1);
        assert!(c[0].ours.is_none() && c[0].baseline.is_some());
        assert_eq!(c[0].ratio(), None);
        let table = render(&rows, &skipped);
        assert!(table.contains("skipped"), "{table}");
    }

    #[test]
    fn the_table_is_aligned() {
        let rows = vec![
            row("matmul", "vit-b16/qkv/b1", "vitrt", Some("none"), 0.01),
            row("matmul", "vit-b16/qkv/b1", "cublas", Some("none"), 0.02),
            row("layernorm", "vit-b16/b256", "vitrt", None, 0.5),
            row("copy", "layernorm/vit-b16/b256", "copy", None, 0.4),
        ];
        let table = render(&rows, &[]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("op "), "{table}");
        // The ratio column ends at the same place on every line.
        let end = lines[0].find("ratio").unwrap() + "ratio".len();
        assert_eq!(&lines[1][end - 5..end], "2.00x", "{table}");
        assert_eq!(&lines[2][end - 5..end], "0.80x", "{table}");
        assert!(lines[1].contains("200.0 TFLOP/s") && lines[1].contains("cuBLAS"));
        assert!(lines[2].contains("4000 GB/s") && lines[2].contains("copy"));
    }
}
