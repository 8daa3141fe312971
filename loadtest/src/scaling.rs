//! Reload latency and controller RSS against the number of workloads, from the result files of
//! runs at several sizes (`--scaling-plot out.svg --from a.json b.json ...`): one SVG with two
//! panels (log-scaled workload axis) and a Markdown table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub label: String,
    pub workloads: f64,
    pub namespaces: f64,
    pub configs: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rss_peak_mib: f64,
    pub rss_steady_mib: f64,
    pub ready_s: f64,
}

pub fn point(label: &str, r: &Value) -> Option<Point> {
    let f = |v: &Value| v.as_f64();
    Some(Point {
        label: label.to_string(),
        workloads: f(&r["population"]["workloads"])?,
        namespaces: f(&r["population"]["namespaces"])?,
        configs: f(&r["population"]["configs"])?,
        p50_ms: f(&r["latency_ms"]["p50_ms"])?,
        p99_ms: f(&r["latency_ms"]["p99_ms"])?,
        rss_peak_mib: f(&r["resources"]["rss_peak_mib"])?,
        rss_steady_mib: f(&r["resources"]["rss_steady_mib"]).unwrap_or(f64::NAN),
        ready_s: r["time_to_ready_s"].get(0).and_then(f).unwrap_or(f64::NAN),
    })
}

/// Reads the result files, plots them to `out` (SVG) and writes the table next to it (`.md`).
pub fn run(out: &Path, from: &[PathBuf]) -> Result<String> {
    let mut points = Vec::new();
    for p in from {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let r: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        let label = p
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        match point(&label, &r) {
            Some(pt) => points.push(pt),
            None => bail!("{}: no population, latency or RSS figures", p.display()),
        }
    }
    points.sort_by(|a, b| a.workloads.total_cmp(&b.workloads));
    std::fs::write(out, svg(&points)).with_context(|| format!("writing {}", out.display()))?;
    let md = table(&points);
    std::fs::write(out.with_extension("md"), &md)?;
    Ok(md)
}

pub fn table(points: &[Point]) -> String {
    let mut s = String::from(
        "| run | workloads | namespaces | configs | p50 ms | p99 ms | peak RSS MiB | steady RSS MiB | ready s |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.label,
            p.workloads,
            p.namespaces,
            p.configs,
            p.p50_ms,
            p.p99_ms,
            p.rss_peak_mib,
            p.rss_steady_mib,
            p.ready_s
        );
    }
    s
}

/// One line of a panel: name, colour, (workloads, value) points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// A panel: x = workloads (log), y = linear from 0; one polyline per series.
struct Panel<'a> {
    x0: f64,
    title: &'a str,
    y_label: &'a str,
    series: Vec<Series<'a>>,
}

const W: f64 = 440.0;
const H: f64 = 380.0;
// Margins: left, right, top, bottom.
const L: f64 = 60.0;
const R: f64 = 20.0;
const T: f64 = 40.0;
const B: f64 = 50.0;

pub fn svg(points: &[Point]) -> String {
    let xs = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().map(|p| (p.workloads, f(p))).collect()
    };
    let panels = [
        Panel {
            x0: 0.0,
            title: "reload latency",
            y_label: "ms",
            series: vec![
                ("p50", "#1f77b4", xs(|p| p.p50_ms)),
                ("p99", "#d62728", xs(|p| p.p99_ms)),
            ],
        },
        Panel {
            x0: W,
            title: "controller RSS",
            y_label: "MiB",
            series: vec![
                ("peak", "#2ca02c", xs(|p| p.rss_peak_mib)),
                ("steady", "#9467bd", xs(|p| p.rss_steady_mib)),
            ],
        },
    ];
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
"#,
        2.0 * W
    );
    let (x_lo, x_hi) = decades(points.iter().map(|p| p.workloads));
    for panel in &panels {
        draw(&mut s, panel, x_lo, x_hi);
    }
    s.push_str("</svg>\n");
    s
}

/// The enclosing powers of ten of the positive values (1..10 when there are none).
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi == 0.0 {
        return (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    (lo, hi)
}

fn draw(s: &mut String, p: &Panel, x_lo: f64, x_hi: f64) {
    let y_max = p
        .series
        .iter()
        .flat_map(|(_, _, v)| v.iter().map(|(_, y)| *y))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let px = |x: f64| {
        p.x0 + L + (x.log10() - x_lo.log10()) / (x_hi.log10() - x_lo.log10()) * (W - L - R)
    };
    let py = |y: f64| H - B - y / y_max * (H - T - B);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{} against workloads</text>"#,
        p.x0 + W / 2.0,
        p.title
    );
    for i in 0..=5 {
        let y = y_max * f64::from(i) / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{}" y1="{py}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{y:.0}</text>"##,
            p.x0 + L,
            p.x0 + W - R,
            p.x0 + L - 6.0,
            py(y) + 4.0,
            py = py(y)
        );
    }
    let mut d = x_lo;
    while d <= x_hi * 1.0001 {
        let _ = writeln!(
            s,
            r##"<line x1="{x}" x2="{x}" y1="{T}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            H - B,
            H - B + 16.0,
            fmt_count(d),
            x = px(d)
        );
        d *= 10.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">workloads (log)</text><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>"#,
        p.x0 + L + (W - L - R) / 2.0,
        H - 12.0,
        p.x0 + 16.0,
        H / 2.0,
        p.x0 + 16.0,
        H / 2.0,
        p.y_label
    );
    for (i, (name, color, pts)) in p.series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|(_, y)| y.is_finite()).collect();
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{color}">{y:.0}</text>"#,
                px(*x),
                py(*y),
                px(*x) + 4.0,
                py(*y) - 5.0
            );
        }
        let ly = T + 8.0 + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{name}</text>"#,
            p.x0 + L + 10.0,
            p.x0 + L + 30.0,
            p.x0 + L + 35.0,
            ly + 4.0
        );
    }
}

fn fmt_count(x: f64) -> String {
    match x {
        x if x >= 1e6 => format!("{}M", x / 1e6),
        x if x >= 1e3 => format!("{}k", x / 1e3),
        x => format!("{x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_result_and_plots_every_point() {
        let r = serde_json::json!({
            "population": {"workloads": 10000, "namespaces": 1000, "configs": 20000},
            "latency_ms": {"p50_ms": 9.2, "p99_ms": 53.3},
            "resources": {"rss_peak_mib": 35.9, "rss_steady_mib": 35.0},
            "time_to_ready_s": [2.4]
        });
        let a = point("medium", &r).unwrap();
        assert_eq!((a.workloads, a.p99_ms, a.ready_s), (10000.0, 53.3, 2.4));
        assert!(point("broken", &serde_json::json!({})).is_none());
        let mut b = a.clone();
        b.workloads = 100_000.0;
        let out = svg(&[a, b]);
        // Two panels, two series each, two points per series.
        assert_eq!(out.matches("<polyline").count(), 4);
        assert_eq!(out.matches("<circle").count(), 8);
        assert_eq!(decades([200.0, 100_000.0].into_iter()), (100.0, 100_000.0));
    }
}
