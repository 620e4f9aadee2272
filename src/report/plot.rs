//! A small SVG writer for benchmark plots in the manner of Triton's `perf_report`: one panel
//! per (op, case family), size on a log2 x axis, throughput on a linear y axis from zero, one
//! line with markers per provider, a legend, and dashed horizontal lines for ceilings (the
//! copy bandwidth on the GB/s panels). Panels sit in a grid in one self-contained SVG file.
//!
//! No plotting crate: the file is a few hundred elements of text, and writing them directly
//! keeps the output stable and the dependency list short.

use std::fmt::{self, Write as _};

/// A grid of panels under one title.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figure {
    pub title: String,
    /// Panels per row of the grid.
    pub columns: usize,
    pub panels: Vec<Panel>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub ceilings: Vec<Ceiling>,
}

/// One provider's line: (x, y) points, x > 0 (the axis is logarithmic).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A horizontal reference line across a panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceiling {
    pub name: String,
    pub y: f64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlotError {
    /// No panel had a single point that can be drawn.
    NoData,
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::NoData => f.write_str("nothing to plot: no case produced a timing"),
        }
    }
}

impl std::error::Error for PlotError {}

// Geometry, in SVG user units (pixels at 100%).
const PANEL_WIDTH: f64 = 360.0;
const PANEL_HEIGHT: f64 = 270.0;
const FIGURE_TITLE_HEIGHT: f64 = 36.0;
/// Plot area inside a panel: room for the title above, tick labels and axis titles around.
const MARGIN_LEFT: f64 = 62.0;
const MARGIN_RIGHT: f64 = 16.0;
const MARGIN_TOP: f64 = 30.0;
const MARGIN_BOTTOM: f64 = 46.0;
/// At most this many ticks on an axis.
const MAX_TICKS: usize = 9;

/// Line colours, then marker shapes, by series index.
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];
const CEILING_COLOUR: &str = "#555555";

/// Renders the figure. Points that a log-x, zero-based-y plot cannot show (x <= 0, anything
/// not finite, y < 0) are left out; panels left with no point are dropped; a figure left
/// with no panel is [`PlotError::NoData`].
pub fn render(figure: &Figure) -> Result<String, PlotError> {
    let panels: Vec<Panel> = figure.panels.iter().filter_map(drawable).collect();
    if panels.is_empty() {
        return Err(PlotError::NoData);
    }
    let columns = figure.columns.clamp(1, panels.len());
    let rows = panels.len().div_ceil(columns);
    let width = columns as f64 * PANEL_WIDTH;
    let height = FIGURE_TITLE_HEIGHT + rows as f64 * PANEL_HEIGHT;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        width / 2.0,
        escape(&figure.title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let left = (i % columns) as f64 * PANEL_WIDTH;
        let top = FIGURE_TITLE_HEIGHT + (i / columns) as f64 * PANEL_HEIGHT;
        draw_panel(&mut svg, panel, left, top);
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// The panel with only what can be drawn, or `None` if no point is left.
fn drawable(panel: &Panel) -> Option<Panel> {
    let series: Vec<Series> = panel
        .series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| x.is_finite() && x > 0.0 && y.is_finite() && y >= 0.0)
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        return None;
    }
    Some(Panel {
        series,
        ceilings: panel
            .ceilings
            .iter()
            .filter(|c| c.y.is_finite() && c.y >= 0.0)
            .cloned()
            .collect(),
        ..panel.clone()
    })
}

/// A log2 x axis spanning whole powers of two around the data.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Log2Axis {
    lo: i32,
    hi: i32,
}

impl Log2Axis {
    fn around(xs: impl Iterator<Item = f64>) -> Log2Axis {
        let (mut min, mut max) = (f64::INFINITY, 0.0f64);
        for x in xs {
            min = min.min(x);
            max = max.max(x);
        }
        let (mut lo, mut hi) = (min.log2().floor() as i32, max.log2().ceil() as i32);
        // One point (or one power of two): widen so it sits in the middle of a real range.
        if hi <= lo {
            lo -= 1;
            hi += 1;
        }
        Log2Axis { lo, hi }
    }

    /// Where `x` falls, from 0 (left end) to 1 (right end): linear in log2 x.
    fn fraction(&self, x: f64) -> f64 {
        (x.log2() - self.lo as f64) / (self.hi - self.lo) as f64
    }

    /// The exponents of the ticked powers of two: every one, or every few so at most
    /// `MAX_TICKS` remain.
    fn tick_exponents(&self) -> Vec<i32> {
        let span = (self.hi - self.lo) as usize;
        let step = span.div_ceil(MAX_TICKS - 1).max(1);
        (self.lo..=self.hi).step_by(step).collect()
    }
}

/// `2^e` written short: 128, 1K, 64K, 2M.
fn power_of_two_label(e: i32) -> String {
    match e {
        e if e < 0 => format!("{}", 2f64.powi(e)),
        e if e < 10 => format!("{}", 1u64 << e),
        e if e < 20 => format!("{}K", 1u64 << (e - 10)),
        e if e < 30 => format!("{}M", 1u64 << (e - 20)),
        e => format!("2^{e}"),
    }
}

/// Ticks for a linear axis from 0 past `max`: a step of 1, 2 or 5 times a power of ten, the
/// smallest that needs no more than `MAX_TICKS` ticks, so labels are round numbers.
fn linear_ticks(max: f64) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let mut magnitude = 10f64.powf((max / MAX_TICKS as f64).log10().floor());
    let step = loop {
        if let Some(step) = [1.0, 2.0, 5.0]
            .iter()
            .map(|m| m * magnitude)
            // ceil(max / step) steps above zero: one tick more than that.
            .find(|step| ((max / step).ceil() as usize) < MAX_TICKS)
        {
            break step;
        }
        magnitude *= 10.0;
    };
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// A tick value with as many decimals as its step needs.
fn tick_label(value: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{value:.decimals$}")
}

fn draw_panel(svg: &mut String, panel: &Panel, left: f64, top: f64) {
    let (x0, x1) = (left + MARGIN_LEFT, left + PANEL_WIDTH - MARGIN_RIGHT);
    let (y0, y1) = (top + PANEL_HEIGHT - MARGIN_BOTTOM, top + MARGIN_TOP);
    let x_axis = Log2Axis::around(
        panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0)),
    );
    let y_max = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(panel.ceilings.iter().map(|c| c.y))
        .fold(0.0f64, f64::max);
    let y_ticks = linear_ticks(y_max);
    let y_top = *y_ticks.last().unwrap_or(&1.0);
    let px = |x: f64| x0 + x_axis.fraction(x) * (x1 - x0);
    let py = |y: f64| y0 - y / y_top * (y0 - y1);

    let _ = writeln!(svg, r#"<g class="panel">"#);
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12" font-weight="bold">{}</text>"#,
        (x0 + x1) / 2.0,
        top + 18.0,
        escape(&panel.title)
    );
    // Grid and ticks.
    for &e in &x_axis.tick_exponents() {
        let x = px(2f64.powi(e));
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y0:.1}" stroke="#e5e5e5"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text class="x-tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            y0 + 14.0,
            power_of_two_label(e)
        );
    }
    let step = y_ticks.get(1).copied().unwrap_or(1.0);
    for &value in &y_ticks {
        let y = py(value);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#e5e5e5"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text class="y-tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 5.0,
            y + 4.0,
            tick_label(value, step)
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{x0:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y0 - y1
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        y0 + 32.0,
        escape(&panel.x_label)
    );
    let (label_x, label_y) = (left + 14.0, (y0 + y1) / 2.0);
    let _ = writeln!(
        svg,
        r#"<text x="{label_x:.1}" y="{label_y:.1}" text-anchor="middle" transform="rotate(-90 {label_x:.1} {label_y:.1})">{}</text>"#,
        escape(&panel.y_label)
    );

    // Ceilings under the data, dashed.
    for ceiling in &panel.ceilings {
        let y = py(ceiling.y);
        let _ = writeln!(
            svg,
            r#"<g class="ceiling"><line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="{CEILING_COLOUR}" stroke-width="1.5" stroke-dasharray="6 4"/></g>"#
        );
    }
    // Every line in pixels, left to right; also what the legend should not cover.
    let lines: Vec<Vec<(f64, f64)>> = panel
        .series
        .iter()
        .map(|series| {
            let mut points: Vec<(f64, f64)> =
                series.points.iter().map(|&(x, y)| (px(x), py(y))).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points
        })
        .collect();
    let mut drawn: Vec<(f64, f64)> = lines.iter().flat_map(|l| along(l)).collect();
    for ceiling in &panel.ceilings {
        drawn.extend(along(&[(x0, py(ceiling.y)), (x1, py(ceiling.y))]));
    }
    for (i, (series, points)) in panel.series.iter().zip(&lines).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            svg,
            r#"<g class="series" data-name="{}"><polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            escape(&series.name),
            path.join(" ")
        );
        for &(x, y) in points {
            svg.push_str(&marker(i, x, y, colour));
        }
        svg.push_str("</g>\n");
    }

    // Legend inside the plot area, in the corner where it hides the least: series first,
    // then ceilings.
    let entries = panel.series.len() + panel.ceilings.len();
    let longest = panel
        .series
        .iter()
        .map(|s| s.name.chars().count())
        .chain(panel.ceilings.iter().map(|c| c.name.chars().count()))
        .max()
        .unwrap_or(0);
    let size = (34.0 + 6.5 * longest as f64, 6.0 + 14.0 * entries as f64);
    let (lx, ly) = legend_corner((x0, y1, x1, y0), size, &drawn);
    let _ = writeln!(
        svg,
        r##"<g class="legend"><rect x="{lx:.1}" y="{ly:.1}" width="{:.1}" height="{:.1}" fill="white" fill-opacity="0.85" stroke="#bbbbbb"/>"##,
        size.0, size.1
    );
    for (i, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let y = ly + 13.0 + 14.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"/>"#,
            lx + 4.0,
            lx + 24.0
        );
        svg.push_str(&marker(i, lx + 14.0, y, colour));
        let _ = writeln!(
            svg,
            r#"<text class="legend-entry" x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 29.0,
            y + 4.0,
            escape(&series.name)
        );
    }
    for (j, ceiling) in panel.ceilings.iter().enumerate() {
        let y = ly + 13.0 + 14.0 * (panel.series.len() + j) as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{CEILING_COLOUR}" stroke-width="1.5" stroke-dasharray="6 4"/>"#,
            lx + 4.0,
            lx + 24.0
        );
        let _ = writeln!(
            svg,
            r#"<text class="legend-entry" x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 29.0,
            y + 4.0,
            escape(&ceiling.name)
        );
    }
    svg.push_str("</g>\n</g>\n");
}

/// Points along a polyline, eight per segment (and its ends): enough to tell whether a box
/// would cover part of the line.
fn along(line: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = line.to_vec();
    for pair in line.windows(2) {
        let ((ax, ay), (bx, by)) = (pair[0], pair[1]);
        points.extend((1..8).map(|i| {
            let t = i as f64 / 8.0;
            (ax + t * (bx - ax), ay + t * (by - ay))
        }));
    }
    points
}

/// The top-left corner of a legend box of `size` in the plot area `(left, top, right,
/// bottom)`: the corner (top left, top right, bottom right, bottom left, preferred in that
/// order on a tie) whose box, inset a little, covers the fewest of the `drawn` points, counting
/// those within a marker's size of its edge (a line just outside still shows through).
fn legend_corner(
    (left, top, right, bottom): (f64, f64, f64, f64),
    (width, height): (f64, f64),
    drawn: &[(f64, f64)],
) -> (f64, f64) {
    let inset = 6.0;
    let corners = [
        (left + inset, top + inset),
        (right - inset - width, top + inset),
        (right - inset - width, bottom - inset - height),
        (left + inset, bottom - inset - height),
    ];
    let covered = |&(x, y): &(f64, f64)| {
        drawn
            .iter()
            .filter(|&&(px, py)| {
                let margin = 5.0;
                (x - margin..=x + width + margin).contains(&px)
                    && (y - margin..=y + height + margin).contains(&py)
            })
            .count()
    };
    let mut best = corners[0];
    let mut fewest = covered(&best);
    for corner in &corners[1..] {
        let count = covered(corner);
        if count < fewest {
            best = *corner;
            fewest = count;
        }
    }
    best
}

/// The marker of series `i` at (x, y): circle, square, triangle, diamond, in turn.
fn marker(i: usize, x: f64, y: f64, colour: &str) -> String {
    let r = 3.5;
    match i % 4 {
        0 => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{colour}"/>"#),
        1 => format!(
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
            x - r,
            y - r,
            2.0 * r,
            2.0 * r
        ),
        2 => format!(
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{colour}"/>"#,
            x,
            y - r - 0.5,
            x - r - 0.5,
            y + r,
            x + r + 0.5,
            y + r
        ),
        _ => format!(
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{colour}"/>"#,
            x,
            y - r - 1.0,
            x + r + 1.0,
            y,
            x,
            y + r + 1.0,
            x - r - 1.0,
            y
        ),
    }
}

/// Text as SVG character data or an attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.into(),
            points: points.to_vec(),
        }
    }

    fn panel(title: &str, series: Vec<Series>) -> Panel {
        Panel {
            title: title.into(),
            x_label: "M".into(),
            y_label: "TFLOP/s".into(),
            series,
            ceilings: Vec::new(),
        }
    }

    fn figure(panels: Vec<Panel>) -> Figure {
        Figure {
            title: "kernels".into(),
            columns: 2,
            panels,
        }
    }

    #[test]
    fn one_line_per_series_and_a_legend_entry_for_each() {
        let svg = render(&figure(vec![
            panel(
                "qkv",
                vec![
                    series("vitrt", &[(197.0, 50.0), (12608.0, 600.0)]),
                    series("cublas", &[(197.0, 80.0), (12608.0, 610.0)]),
                ],
            ),
            Panel {
                ceilings: vec![Ceiling {
                    name: "copy".into(),
                    y: 4000.0,
                }],
                ..panel("layernorm", vec![series("vitrt", &[(197.0, 1000.0)])])
            },
        ]))
        .unwrap();
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r#"<g class="panel">"#).count(), 2);
        assert_eq!(svg.matches(r#"<g class="series""#).count(), 3);
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches(r#"<g class="ceiling">"#).count(), 1);
        assert_eq!(svg.matches(r#"class="legend-entry""#).count(), 4);
        // A marker per point, and one per legend entry of a series.
        assert_eq!(svg.matches("<circle").count(), 2 + 1 + 1 + 1);
        assert_eq!(
            svg.matches("<rect").count(),
            1 + 2 + 2 + 2 + 1,
            "background, 2 frames, 2 legend boxes, cublas's 2 square markers + 1 in its legend"
        );
    }

    #[test]
    fn the_x_axis_is_log2() {
        let axis = Log2Axis::around([197.0, 1576.0, 12608.0, 50432.0].into_iter());
        assert_eq!((axis.lo, axis.hi), (7, 16), "128 .. 65536 spans the data");
        let f = |x: f64| axis.fraction(x);
        assert!((f(128.0) - 0.0).abs() < 1e-12);
        assert!((f(65536.0) - 1.0).abs() < 1e-12);
        // Each doubling moves the same distance.
        let step = f(512.0) - f(256.0);
        assert!((f(1024.0) - f(512.0) - step).abs() < 1e-12);
        assert!((step - 1.0 / 9.0).abs() < 1e-12);
        // A single point gets a range around it.
        let one = Log2Axis::around([1024.0].into_iter());
        assert_eq!((one.lo, one.hi), (9, 11));
        assert!((one.fraction(1024.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn axis_ticks_are_few_and_round() {
        let axis = Log2Axis { lo: 7, hi: 16 };
        let ticks = axis.tick_exponents();
        assert!(ticks.len() <= MAX_TICKS && ticks.len() >= 2, "{ticks:?}");
        assert_eq!(ticks[0], 7);
        assert_eq!(
            Log2Axis { lo: 8, hi: 13 }.tick_exponents(),
            vec![8, 9, 10, 11, 12, 13]
        );
        assert_eq!(power_of_two_label(8), "256");
        assert_eq!(power_of_two_label(13), "8K");
        assert_eq!(power_of_two_label(21), "2M");

        for max in [0.7, 1.0, 3.3, 9.9, 47.0, 612.3, 999.0, 1000.0, 4823.0, 1e6] {
            let ticks = linear_ticks(max);
            assert_eq!(ticks[0], 0.0);
            assert!(*ticks.last().unwrap() >= max, "{max}: {ticks:?}");
            assert!((2..=MAX_TICKS).contains(&ticks.len()), "{max}: {ticks:?}");
            let step = ticks[1];
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (m - mantissa).abs() < 1e-9),
                "{max}: step {step}"
            );
            // Not needlessly coarse: the top tick is within one step of the maximum.
            assert!(
                ticks.last().unwrap() - max < step + 1e-9,
                "{max}: {ticks:?}"
            );
        }
        assert_eq!(
            linear_ticks(0.0),
            linear_ticks(1.0),
            "an all-zero panel still has an axis"
        );
        assert_eq!(tick_label(200.0, 100.0), "200");
        assert_eq!(tick_label(0.4, 0.2), "0.4");
        assert_eq!(tick_label(0.05, 0.05), "0.05");
    }

    #[test]
    fn text_is_escaped() {
        let svg = render(&Figure {
            title: r#"a<b & "c""#.into(),
            columns: 1,
            panels: vec![panel("x'y", vec![series("<cublas>", &[(2.0, 1.0)])])],
        })
        .unwrap();
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"), "{svg}");
        assert!(svg.contains("x&apos;y"));
        assert!(svg.contains("&lt;cublas&gt;"));
        assert!(!svg.contains("<cublas>") && !svg.contains("a<b"));
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        assert_eq!(render(&figure(Vec::new())), Err(PlotError::NoData));
        let empty = figure(vec![panel("qkv", vec![series("vitrt", &[])])]);
        assert_eq!(render(&empty), Err(PlotError::NoData));
        let undrawable = figure(vec![panel(
            "qkv",
            vec![series("vitrt", &[(0.0, 1.0), (-4.0, 2.0), (8.0, f64::NAN)])],
        )]);
        assert_eq!(render(&undrawable), Err(PlotError::NoData));
        // One good point is enough; the bad ones are left out and empty panels dropped.
        let mixed = figure(vec![
            panel("qkv", vec![series("vitrt", &[(0.0, 1.0), (8.0, 2.0)])]),
            panel("proj", vec![]),
        ]);
        let svg = render(&mixed).unwrap();
        assert_eq!(svg.matches(r#"<g class="panel">"#).count(), 1);
        assert_eq!(
            svg.matches("<circle").count(),
            2,
            "one point, one legend marker"
        );
    }

    #[test]
    fn the_legend_goes_where_it_hides_the_least() {
        let area = (0.0, 0.0, 100.0, 100.0);
        let size = (30.0, 20.0);
        assert_eq!(
            legend_corner(area, size, &[]),
            (6.0, 6.0),
            "top left when free"
        );
        // A line along the top: the legend moves to the bottom.
        let top_line = along(&[(0.0, 10.0), (100.0, 10.0)]);
        let (_, y) = legend_corner(area, size, &top_line);
        assert_eq!(y, 100.0 - 6.0 - 20.0);
        // Points everywhere but the top right.
        let crowded: Vec<(f64, f64)> = (0..100)
            .flat_map(|x| (0..100).map(move |y| (x as f64, y as f64)))
            .filter(|&(x, y)| !(x > 60.0 && y < 40.0))
            .collect();
        assert_eq!(legend_corner(area, size, &crowded), (64.0, 6.0));
        assert_eq!(along(&[(0.0, 0.0), (8.0, 0.0)]).len(), 2 + 7);
    }

    #[test]
    fn panels_fill_a_grid() {
        let panels: Vec<Panel> = (0..5)
            .map(|i| panel(&format!("p{i}"), vec![series("vitrt", &[(2.0, 1.0)])]))
            .collect();
        let svg = render(&Figure {
            title: String::new(),
            columns: 2,
            panels,
        })
        .unwrap();
        let (w, h) = (2.0 * PANEL_WIDTH, FIGURE_TITLE_HEIGHT + 3.0 * PANEL_HEIGHT);
        assert!(
            svg.contains(&format!(r#"width="{w}" height="{h}""#)),
            "{}",
            &svg[..200]
        );
    }
}
