//! What `vitrt bench` does with its timings, none of which needs a GPU: statistics and the
//! input rotation ([`stats`]), the JSON document ([`schema`]), the table ([`table`]) and the
//! SVG plot ([`plot`], fed by [`figure`]); and the GPU's clocks while it times ([`clocks`],
//! through NVML where the driver has it).

pub mod clocks;
pub mod plot;
pub mod schema;
pub mod stats;
pub mod table;

use plot::{Ceiling, Figure, Panel, Series};
use schema::{BenchReport, KernelRow};

/// Tokens per image of the `vit-b16` cases (ViT-B/16 at 224x224: 196 patches and CLS).
const VIT_B16_TOKENS: f64 = 197.0;

/// Where a row goes on its panel's x axis: M = batch·197 tokens for the ViT-B/16 cases
/// (named `.../b{batch}`), the size s for the squares (`square/{s}`, shape [s, s, s]).
fn plot_x(row: &KernelRow) -> Option<f64> {
    let last = row.case.rsplit('/').next()?;
    match last.strip_prefix('b').map(str::parse::<u64>) {
        Some(Ok(batch)) => Some(batch as f64 * VIT_B16_TOKENS),
        _ => row.shape.first().map(|&s| s as f64),
    }
}

/// The panel a timed row belongs to: matmuls by case family (the case without its size) and
/// epilogue, every other op by op and family. Copy rows are not plotted as points.
fn panel_key(row: &KernelRow) -> Option<(String, String)> {
    if row.op == "copy" {
        return None;
    }
    let family = row.case.rsplit_once('/').map_or("", |(family, _)| family);
    let title = match &row.epilogue {
        Some(epilogue) => format!("{} {family}, {epilogue}", row.op),
        None => format!("{} {family}", row.op),
    };
    let x_label = if family == "square" {
        "s (M = N = K)"
    } else {
        "M = batch x 197 tokens"
    };
    Some((title, x_label.into()))
}

/// The plot of a report: a panel per (op, case family[, epilogue]) in the order the cases ran,
/// a line per provider, and on the GB/s panels the copy's best bandwidth as a ceiling.
pub fn figure(report: &BenchReport) -> Figure {
    let mut panels: Vec<Panel> = Vec::new();
    for row in &report.kernels {
        let (Some((title, x_label)), Some(x), Some(y)) = (panel_key(row), plot_x(row), row.rate())
        else {
            continue;
        };
        let index = match panels.iter().position(|p| p.title == title) {
            Some(i) => i,
            None => {
                let y_label = if row.tflops.is_some() {
                    "TFLOP/s"
                } else {
                    "GB/s"
                };
                panels.push(Panel {
                    title: title.clone(),
                    x_label,
                    y_label: y_label.into(),
                    series: Vec::new(),
                    ceilings: Vec::new(),
                });
                panels.len() - 1
            }
        };
        let panel = &mut panels[index];
        match panel.series.iter_mut().find(|s| s.name == row.provider) {
            Some(series) => series.points.push((x, y)),
            None => panel.series.push(Series {
                name: row.provider.clone(),
                points: vec![(x, y)],
            }),
        }
    }
    // Copy rows are named `{op}/{case}`: the best copy of an op's cases is its ceiling.
    for panel in panels.iter_mut().filter(|p| p.y_label == "GB/s") {
        let op = panel
            .title
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        let best = report
            .kernels
            .iter()
            .filter(|r| r.op == "copy" && r.case.starts_with(&format!("{op}/")))
            .filter_map(|r| r.gbps)
            .fold(None, |best: Option<f64>, g| {
                Some(best.map_or(g, |b| b.max(g)))
            });
        if let Some(y) = best {
            panel.ceilings.push(Ceiling {
                name: "copy (best)".into(),
                y,
            });
        }
    }
    Figure {
        title: format!(
            "vitrt kernels, {} on {} (median of {} reps)",
            report.dtype,
            report.device.name,
            report.kernels.first().map_or(0, |r| r.reps)
        ),
        columns: 5,
        panels,
    }
}

#[cfg(test)]
mod tests {
    use super::schema::{DeviceInfo, SCHEMA};
    use super::stats::Stats;
    use super::*;

    fn row(
        op: &str,
        case: &str,
        provider: &str,
        epilogue: Option<&str>,
        shape: &[u64],
        ms: f64,
    ) -> KernelRow {
        let stats = Stats::from_samples(&[ms]).unwrap();
        let flops = (op == "matmul").then_some(1e9);
        let bytes = (op != "matmul").then_some(1e9);
        KernelRow::new(
            op,
            case,
            provider,
            epilogue,
            shape.to_vec(),
            &stats,
            flops,
            bytes,
        )
    }

    fn report(kernels: Vec<KernelRow>) -> BenchReport {
        BenchReport {
            schema: SCHEMA.into(),
            tool: "vitrt 0.1.0".into(),
            date: "2026-11-22T12:34:56Z".into(),
            device: DeviceInfo {
                name: "NVIDIA H200".into(),
                driver: "580.159.04".into(),
                compute_capability: "9.0".into(),
                l2_bytes: 62_914_560,
            },
            dtype: "f16".into(),
            kernels,
            models: Vec::new(),
            skipped: Vec::new(),
        }
    }

    #[test]
    fn panels_by_family_and_epilogue_lines_by_provider() {
        let rows = vec![
            row(
                "matmul",
                "vit-b16/qkv/b1",
                "vitrt",
                Some("none"),
                &[197, 2304, 768],
                1.0,
            ),
            row(
                "matmul",
                "vit-b16/qkv/b1",
                "cublas",
                Some("none"),
                &[197, 2304, 768],
                1.0,
            ),
            row(
                "matmul",
                "vit-b16/qkv/b1",
                "vitrt",
                Some("bias+gelu"),
                &[197, 2304, 768],
                1.0,
            ),
            row(
                "matmul",
                "vit-b16/qkv/b8",
                "vitrt",
                Some("none"),
                &[1576, 2304, 768],
                1.0,
            ),
            row(
                "matmul",
                "square/4096",
                "vitrt",
                Some("none"),
                &[4096, 4096, 4096],
                1.0,
            ),
            row("softmax", "vit-b16/b8", "vitrt", None, &[18912, 197], 1.0),
            row("copy", "softmax/vit-b16/b8", "copy", None, &[100], 0.5),
            row("copy", "softmax/vit-b16/b1", "copy", None, &[100], 0.25),
        ];
        let f = figure(&report(rows));
        let titles: Vec<&str> = f.panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "matmul vit-b16/qkv, none",
                "matmul vit-b16/qkv, bias+gelu",
                "matmul square, none",
                "softmax vit-b16"
            ]
        );
        let qkv = &f.panels[0];
        assert_eq!(qkv.series.len(), 2);
        assert_eq!(qkv.series[0].name, "vitrt");
        assert_eq!(
            qkv.series[0].points,
            vec![(197.0, 1.0), (1576.0, 1.0)],
            "1e9 FLOP in 1 ms: 1 TFLOP/s"
        );
        assert_eq!(qkv.y_label, "TFLOP/s");
        assert_eq!(f.panels[2].series[0].points[0].0, 4096.0, "squares by s");
        let softmax = &f.panels[3];
        assert_eq!(softmax.y_label, "GB/s");
        assert_eq!(
            softmax.series[0].points,
            vec![(1576.0, 1000.0)],
            "x is M = 8 x 197"
        );
        assert_eq!(
            softmax.ceilings,
            vec![Ceiling {
                name: "copy (best)".into(),
                y: 4000.0
            }]
        );
        assert!(plot::render(&f).is_ok());
    }

    #[test]
    fn a_report_with_nothing_timed_has_nothing_to_plot() {
        assert_eq!(
            plot::render(&figure(&report(Vec::new()))),
            Err(plot::PlotError::NoData)
        );
    }
}
