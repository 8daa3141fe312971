//! Reload latency and controller RSS against the number of workloads, from the result files of
//! runs at several sizes (`--scaling-plot out.svg --from a.json b.json ...`): one SVG with two
//! panels (log-scaled workload axis) and a Markdown table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::plot::{self, Line, Panel};

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
    std::fs::write(out, svg(&points)?).with_context(|| format!("writing {}", out.display()))?;
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

/// The SVG: reload latency (p50, p99) and controller RSS (peak, steady) against workloads.
pub fn svg(points: &[Point]) -> Result<String> {
    let xs = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().map(|p| (p.workloads, f(p))).collect()
    };
    let line = |name, f| Line {
        name,
        points: xs(f),
    };
    let panels = [
        Panel {
            title: "reload latency",
            y_label: "ms",
            lines: vec![line("p50", |p| p.p50_ms), line("p99", |p| p.p99_ms)],
        },
        Panel {
            title: "controller RSS",
            y_label: "MiB",
            lines: vec![
                line("peak", |p| p.rss_peak_mib),
                line("steady", |p| p.rss_steady_mib),
            ],
        },
    ];
    plot::panels_svg(&panels, decades(points.iter().map(|p| p.workloads)))
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
        let out = svg(&[a, b]).unwrap();
        // Two panels, two series each, two points per series (a circle and its value each).
        assert_eq!(out.matches("<circle").count(), 8);
        assert!(out.contains("\n53\n") && out.contains("controller RSS against workloads"));
        assert_eq!(decades([200.0, 100_000.0].into_iter()), (100.0, 100_000.0));
    }
}
