//! Benchmark plots in the manner of Triton's `perf_report`, drawn with `plotters` into one
//! self-contained SVG file: one panel per (op, case family), size on a log2 x axis,
//! throughput on a linear y axis from zero, one line with markers per provider, a legend, and
//! dashed horizontal lines for ceilings (the copy bandwidth on the GB/s panels), the panels in
//! a grid under the figure's title.

use std::fmt;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

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

#[derive(Debug, PartialEq, Eq)]
pub enum PlotError {
    /// No panel had a single point that can be drawn.
    NoData,
    /// `plotters` failed to lay out or draw the figure.
    Draw(String),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::NoData => f.write_str("nothing to plot: no case produced a timing"),
            PlotError::Draw(why) => write!(f, "drawing the plot: {why}"),
        }
    }
}

impl std::error::Error for PlotError {}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for PlotError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        PlotError::Draw(e.to_string())
    }
}

// Geometry, in SVG pixels. Font sizes below are 1.24 times the pixels wanted (15, 12 and 11
// px): plotters' SVG backend writes a font's size divided by 1.24.
const PANEL_WIDTH: u32 = 360;
const PANEL_HEIGHT: u32 = 270;
const FIGURE_TITLE_HEIGHT: u32 = 36;
/// At most this many ticks on an axis.
const MAX_TICKS: usize = 9;

/// Line colours by series index (matplotlib's first six), and the ceilings' grey.
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];
const CEILING_COLOUR: RGBColor = RGBColor(0x55, 0x55, 0x55);
const GRID_COLOUR: RGBColor = RGBColor(0xe5, 0xe5, 0xe5);

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
    let size = (
        columns as u32 * PANEL_WIDTH,
        FIGURE_TITLE_HEIGHT + rows as u32 * PANEL_HEIGHT,
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        let (title, grid) = root.split_vertically(FIGURE_TITLE_HEIGHT);
        title.titled(
            &figure.title,
            ("sans-serif", 18.6).into_font().style(FontStyle::Bold),
        )?;
        let cells = grid.split_evenly((rows, columns));
        for (panel, cell) in panels.iter().zip(&cells) {
            draw_panel(panel, cell)?;
        }
        root.present()?;
    }
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

/// The x axis's ends as exponents of two: whole powers of two around the data, widened by
/// one each way when the data is a single power of two so it sits in the middle of a range.
fn log2_range(panel: &Panel) -> (f64, f64) {
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let (min, max) = xs.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let (lo, hi) = (min.log2().floor(), max.log2().ceil());
    if hi <= lo {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
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

fn draw_panel<DB: DrawingBackend>(
    panel: &Panel,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    // The x axis is log2, ticked at powers of two (labelled 128, 1K, ...); the y axis starts
    // at zero and leaves a little room above the highest point or ceiling.
    let (lo, hi) = log2_range(panel);
    let y_max = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(panel.ceilings.iter().map(|c| c.y))
        .fold(0.0f64, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    // A tick at every power of two, or every few so at most MAX_TICKS remain.
    let step = ((hi - lo) as usize).div_ceil(MAX_TICKS - 1).max(1);
    let x_ticks: Vec<f64> = (lo as i32..=hi as i32)
        .step_by(step)
        .map(|e| 2f64.powi(e))
        .collect();
    let (lo, hi) = (2f64.powf(lo), 2f64.powf(hi));
    let mut chart = ChartBuilder::on(area)
        .caption(
            &panel.title,
            ("sans-serif", 14.9).into_font().style(FontStyle::Bold),
        )
        .margin(4)
        .margin_right(16)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(
            (lo..hi).log_scale().base(2.0).with_key_points(x_ticks),
            0.0..y_top,
        )?;
    chart
        .configure_mesh()
        .bold_line_style(GRID_COLOUR)
        .light_line_style(TRANSPARENT)
        .max_light_lines(0)
        .y_labels(MAX_TICKS)
        .x_label_formatter(&|x| power_of_two_label(x.log2().round() as i32))
        // Round numbers without the trailing ".0" (and without 0.30000000000000004).
        .y_label_formatter(&|v| format!("{}", (v * 1e6).round() / 1e6))
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style(("sans-serif", 13.6))
        .draw()?;
    // A frame around the plot area, as matplotlib draws.
    chart.draw_series([Rectangle::new([(lo, 0.0), (hi, y_top)], BLACK)])?;

    // Ceilings under the data; their legend entries come after the series' (below).
    let dashed = CEILING_COLOUR.stroke_width(2);
    for ceiling in &panel.ceilings {
        let line = [(lo, ceiling.y), (hi, ceiling.y)];
        chart.draw_series(DashedLineSeries::new(line, 6, 4, dashed))?;
    }
    let mut drawn = Vec::new();
    for (i, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points: Vec<(f64, f64)> = series.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pixels: Vec<(f64, f64)> = points
            .iter()
            .map(|p| chart.backend_coord(p))
            .map(|(x, y)| (x as f64, y as f64))
            .collect();
        drawn.extend(along(&pixels));
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(&series.name)
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(0, 0), (20, 0)], colour.stroke_width(2))
                    + marker(i, (10, 0), colour)
            });
        chart.draw_series(
            points
                .iter()
                .map(|&p| EmptyElement::at(p) + marker(i, (0, 0), colour)),
        )?;
    }
    for ceiling in &panel.ceilings {
        // Nothing to draw: only the legend entry.
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(&ceiling.name)
            .legend(move |(x, y)| DashedPathElement::new([(x, y), (x + 20, y)], 6, 4, dashed));
        let (left, y) = chart.backend_coord(&(lo, ceiling.y));
        let (right, _) = chart.backend_coord(&(hi, ceiling.y));
        drawn.extend(along(&[(left as f64, y as f64), (right as f64, y as f64)]));
    }

    // The legend in the corner of the plot area where it hides the least.
    let entries = panel.series.len() + panel.ceilings.len();
    let longest = panel
        .series
        .iter()
        .map(|s| s.name.chars().count())
        .chain(panel.ceilings.iter().map(|c| c.name.chars().count()))
        .max()
        .unwrap_or(0);
    let size = (34.0 + 6.5 * longest as f64, 6.0 + 14.0 * entries as f64);
    let ((x0, y0), (x1, y1)) = (
        chart.backend_coord(&(lo, y_top)),
        chart.backend_coord(&(hi, 0.0)),
    );
    let area = (x0 as f64, y0 as f64, x1 as f64, y1 as f64);
    let position = match legend_corner(area, size, &drawn) {
        0 => SeriesLabelPosition::UpperLeft,
        1 => SeriesLabelPosition::UpperRight,
        2 => SeriesLabelPosition::LowerRight,
        _ => SeriesLabelPosition::LowerLeft,
    };
    chart
        .configure_series_labels()
        .position(position)
        .margin(6)
        .legend_area_size(24)
        .label_font(("sans-serif", 13.6))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0xbb, 0xbb, 0xbb))
        .draw()
}

/// The marker of series `i`, centred at pixel offset `at`: circle, square, triangle, cross,
/// in turn.
fn marker<DB: DrawingBackend>(
    i: usize,
    at: (i32, i32),
    colour: RGBColor,
) -> DynElement<'static, DB, (i32, i32)> {
    let style = colour.filled();
    let (x, y) = at;
    match i % 4 {
        0 => Circle::new(at, 3.5, style).into_dyn(),
        1 => Rectangle::new([(x - 3, y - 3), (x + 4, y + 4)], style).into_dyn(),
        2 => TriangleMarker::new(at, 4.5, style).into_dyn(),
        _ => Cross::new(at, 4, colour.stroke_width(2)).into_dyn(),
    }
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

/// Which corner of the plot area `(left, top, right, bottom)` a legend box of `size` should
/// go in: 0 top left, 1 top right, 2 bottom right, 3 bottom left (preferred in that order on
/// a tie), whichever box, inset a little, covers the fewest of the `drawn` points, counting
/// those within a marker's size of its edge (a line just outside still shows through).
fn legend_corner(
    (left, top, right, bottom): (f64, f64, f64, f64),
    (width, height): (f64, f64),
    drawn: &[(f64, f64)],
) -> usize {
    let inset = 6.0;
    let corners = [
        (left + inset, top + inset),
        (right - inset - width, top + inset),
        (right - inset - width, bottom - inset - height),
        (left + inset, bottom - inset - height),
    ];
    let covered = |&(x, y): &(f64, f64)| {
        let margin = 5.0;
        drawn
            .iter()
            .filter(|&&(px, py)| {
                (x - margin..=x + width + margin).contains(&px)
                    && (y - margin..=y + height + margin).contains(&py)
            })
            .count()
    };
    // min_by_key keeps the first of equal counts: the preference order above.
    (0..corners.len())
        .min_by_key(|&i| covered(&corners[i]))
        .unwrap_or(0)
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

    /// How many `<text>` elements say exactly `text` (plotters writes it on a line of its own).
    fn texts(svg: &str, text: &str) -> usize {
        svg.matches(&format!(">\n{text}\n</text>")).count()
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
        assert_eq!(texts(&svg, "kernels"), 1);
        assert_eq!(texts(&svg, "qkv") + texts(&svg, "layernorm"), 2);
        assert_eq!(texts(&svg, "M"), 2, "an x label per panel");
        assert_eq!(texts(&svg, "TFLOP/s"), 2, "a y label per panel");
        // Legend entries: vitrt in both panels, cublas and the ceiling once.
        assert_eq!(texts(&svg, "vitrt"), 2);
        assert_eq!(texts(&svg, "cublas"), 1);
        assert_eq!(texts(&svg, "copy"), 1);
        // A line of two points per series, in its colour; and one in its legend entry.
        let line = |colour: &str| format!(r#"stroke="{colour}" stroke-width="2""#);
        assert_eq!(svg.matches(&line("#1F77B4")).count(), 2 * 2);
        assert_eq!(svg.matches(&line("#D62728")).count(), 2);
        // vitrt's markers are circles: a point each and one per legend entry.
        assert_eq!(svg.matches("<circle").count(), 2 + 1 + 1 + 1);
        // Ticks at powers of two from 128 to 16K, every other one.
        for label in ["128", "512", "2K", "8K"] {
            assert!(texts(&svg, label) >= 1, "{label}");
        }
    }

    #[test]
    fn the_x_axis_spans_whole_powers_of_two() {
        let p = |xs: &[f64]| {
            let points: Vec<(f64, f64)> = xs.iter().map(|&x| (x, 1.0)).collect();
            log2_range(&panel("p", vec![series("s", &points)]))
        };
        assert_eq!(p(&[197.0, 1576.0, 12608.0, 50432.0]), (7.0, 16.0));
        // A single power of two gets a range around it.
        assert_eq!(p(&[1024.0]), (9.0, 11.0));
        assert_eq!(power_of_two_label(8), "256");
        assert_eq!(power_of_two_label(13), "8K");
        assert_eq!(power_of_two_label(21), "2M");
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
        assert_eq!(texts(&svg, "qkv"), 1);
        assert_eq!(texts(&svg, "proj"), 0);
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
        assert_eq!(legend_corner(area, size, &[]), 0, "top left when free");
        // A line along the top: the legend moves to the bottom (right, the first of the two).
        let top_line = along(&[(0.0, 10.0), (100.0, 10.0)]);
        assert_eq!(legend_corner(area, size, &top_line), 2);
        // Points everywhere but the top right.
        let crowded: Vec<(f64, f64)> = (0..100)
            .flat_map(|x| (0..100).map(move |y| (x as f64, y as f64)))
            .filter(|&(x, y)| !(x > 60.0 && y < 40.0))
            .collect();
        assert_eq!(legend_corner(area, size, &crowded), 1);
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
        let (w, h) = (2 * PANEL_WIDTH, FIGURE_TITLE_HEIGHT + 3 * PANEL_HEIGHT);
        assert!(
            svg.starts_with(&format!(r#"<svg width="{w}" height="{h}""#)),
            "{}",
            &svg[..200]
        );
    }
}
