//! The load test's plots, drawn with plotters' SVG backend: a run's reload-latency CDF, and
//! latency and RSS against the number of workloads (`--scaling-plot`). Text goes into the SVG as
//! `<text>` elements, sized by plotters' built-in estimate (no `ttf` feature), so drawing needs
//! no font files, fontconfig or other system library; the viewer renders the text.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::report::percentile;

/// Series colours, in order (matplotlib's first five).
const COLORS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The x axis of a latency CDF, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CdfAxis {
    pub log: bool,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl CdfAxis {
    /// Linear from 0 to a round ceiling, or logarithmic over whole decades when a long tail
    /// (restart, burst) would squeeze the bulk into a corner.
    pub fn of(sorted_ms: &[f64]) -> Self {
        let max = sorted_ms.last().copied().unwrap_or(0.0).max(0.0);
        let p50 = if sorted_ms.is_empty() {
            1.0
        } else {
            percentile(sorted_ms, 50.0)
        };
        if max > 20.0 * p50.max(0.1) && max > 10.0 {
            let first = sorted_ms.iter().copied().find(|&x| x > 0.0).unwrap_or(1.0);
            CdfAxis {
                log: true,
                min_ms: 10f64.powf(first.max(0.1).log10().floor()),
                max_ms: 10f64.powf(max.log10().ceil()),
            }
        } else {
            CdfAxis {
                log: false,
                min_ms: 0.0,
                max_ms: nice_ceiling(max.max(1.0)),
            }
        }
    }
}

/// The points of a step CDF of sorted values (each value raised to `floor`, which a log axis
/// needs above 0).
pub fn cdf_steps(sorted: &[f64], floor: f64) -> Vec<(f64, f64)> {
    let n = sorted.len() as f64;
    let mut pts = Vec::with_capacity(2 * sorted.len() + 1);
    if let Some(&first) = sorted.first() {
        pts.push((first.max(floor), 0.0));
    }
    for (i, x) in sorted.iter().enumerate() {
        let x = x.max(floor);
        pts.push((x, i as f64 / n));
        pts.push((x, (i + 1) as f64 / n));
    }
    pts
}

/// An SVG CDF of latencies (seconds), one curve per series.
pub fn cdf_svg(title: &str, series: &[(String, Vec<f64>)]) -> Result<String> {
    let sorted: Vec<(&str, Vec<f64>)> = series
        .iter()
        .map(|(name, v)| {
            let mut ms: Vec<f64> = v.iter().map(|x| x * 1000.0).collect();
            ms.sort_by(f64::total_cmp);
            (name.as_str(), ms)
        })
        .collect();
    let mut all: Vec<f64> = sorted.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    all.sort_by(f64::total_cmp);
    let axis = CdfAxis::of(&all);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let x = axis.min_ms..axis.max_ms;
        match axis.log {
            true => draw_cdf(&root, title, x.log_scale(), &axis, &sorted)?,
            false => draw_cdf(&root, title, x, &axis, &sorted)?,
        }
        root.present()?;
    }
    Ok(svg)
}

fn draw_cdf<X>(
    root: &Area<'_>,
    title: &str,
    x: X,
    axis: &CdfAxis,
    series: &[(&str, Vec<f64>)],
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(x, 0f64..1f64)?;
    let scale = if axis.log { " (log scale)" } else { "" };
    chart
        .configure_mesh()
        .x_desc(format!(
            "reload latency{scale}: config write acknowledged -> template change seen"
        ))
        .y_desc("fraction of reloads")
        .x_label_formatter(&|ms| fmt_ms(*ms))
        .y_labels(11)
        .y_label_formatter(&|q| format!("{q:.1}"))
        .draw()?;
    for (k, (name, v)) in series.iter().enumerate() {
        if v.is_empty() {
            continue;
        }
        let color = COLORS[k % COLORS.len()];
        let floor = if axis.log { axis.min_ms } else { 0.0 };
        chart
            .draw_series(LineSeries::new(cdf_steps(v, floor), color.stroke_width(2)))?
            .label(format!(
                "{name} (n={}, p50 {}, p99 {})",
                v.len(),
                fmt_ms(percentile(v, 50.0)),
                fmt_ms(percentile(v, 99.0))
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// One line of a panel against workloads: its name and (workloads, value) points.
pub struct Line<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// A panel: x = workloads (log, whole decades), y = linear from 0, one line per series.
pub struct Panel<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub lines: Vec<Line<'a>>,
}

/// Panels side by side (440 x 380 each), sharing the workload axis `x_decades`.
pub fn panels_svg(panels: &[Panel<'_>], x_decades: (f64, f64)) -> Result<String> {
    let mut svg = String::new();
    {
        let size = (440 * panels.len().max(1) as u32, 380);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        let areas = root.split_evenly((1, panels.len().max(1)));
        let mut color = 0;
        for (panel, area) in panels.iter().zip(&areas) {
            draw_panel(area, panel, x_decades, &mut color)?;
        }
        root.present()?;
    }
    Ok(svg)
}

fn draw_panel(
    area: &Area<'_>,
    p: &Panel<'_>,
    (lo, hi): (f64, f64),
    color: &mut usize,
) -> Result<()> {
    let y_max = p
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|(_, y)| *y))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} against workloads", p.title), ("sans-serif", 16))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("workloads (log)")
        .y_desc(p.y_label)
        .x_label_formatter(&|x| fmt_count(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for line in &p.lines {
        let c = COLORS[*color % COLORS.len()];
        *color += 1;
        let pts: Vec<(f64, f64)> = line
            .points
            .iter()
            .copied()
            .filter(|(_, y)| y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(line.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&(x, y)| {
            EmptyElement::at((x, y))
                + Circle::new((0, 0), 3, c.filled())
                + Text::new(
                    format!("{y:.0}"),
                    (4, -14),
                    ("sans-serif", 10).into_font().color(&c),
                )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// `950 ms`, `1.5 s`, `12 s`.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.0} s", ms / 1000.0)
    } else if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// `200`, `10k`, `1M`.
fn fmt_count(x: f64) -> String {
    match x {
        x if x >= 1e6 => format!("{}M", x / 1e6),
        x if x >= 1e3 => format!("{}k", x / 1e3),
        x => format!("{x}"),
    }
}

/// The smallest 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k at or above `x`.
fn nice_ceiling(x: f64) -> f64 {
    let mag = 10f64.powf(x.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * mag >= x {
            return m * mag;
        }
    }
    10.0 * mag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_tail_gets_a_log_axis_over_whole_decades() {
        let even = CdfAxis::of(&[100.0, 200.0, 300.0]);
        assert_eq!((even.log, even.min_ms, even.max_ms), (false, 0.0, 300.0));
        let tail = CdfAxis::of(&[10.0, 10.0, 10.0, 5000.0]);
        assert_eq!((tail.log, tail.min_ms, tail.max_ms), (true, 10.0, 10_000.0));
        assert!(!CdfAxis::of(&[]).log);
        assert_eq!(nice_ceiling(2600.0), 3000.0);
    }

    #[test]
    fn steps_rise_by_one_nth_at_each_value() {
        let s = cdf_steps(&[0.0, 2.0], 0.5);
        assert_eq!(
            s,
            vec![(0.5, 0.0), (0.5, 0.0), (0.5, 0.5), (2.0, 0.5), (2.0, 1.0)]
        );
        assert!(cdf_steps(&[], 0.0).is_empty());
    }

    #[test]
    fn the_cdf_is_an_svg_with_one_line_per_series_and_escaped_text() {
        let s = cdf_svg(
            "a <b> & c",
            &[("x".into(), vec![0.1, 0.2, 0.3]), ("y".into(), vec![])],
        )
        .unwrap();
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        // One line in the plot and one in the legend for x; none for y (no values).
        assert_eq!(s.matches(r##"stroke="#1F77B4""##).count(), 2, "{s}");
        assert_eq!(s.matches(r##"stroke="#D62728""##).count(), 0);
        assert!(s.contains("a &lt;b&gt; &amp; c") && !s.contains("log scale"));
        assert!(s.contains("x (n=3, p50 200 ms, p99 300 ms)"));
        let tail = cdf_svg("t", &[("a".into(), vec![0.01, 0.01, 0.01, 5.0])]).unwrap();
        assert!(tail.contains("log scale"));
    }
}
