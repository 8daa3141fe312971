//! Figures: latency percentiles, the controller's resources, request counts; written as JSON,
//! a Markdown table and an SVG latency CDF (drawn here, no plotting dependency).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use crate::controller::Sample;
use crate::proxy::Counts;

#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencySummary {
    pub count: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(latencies_s: &[f64]) -> LatencySummary {
    let mut v: Vec<f64> = latencies_s.iter().map(|s| s * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        count: v.len(),
        min_ms: round(v[0]),
        p50_ms: round(percentile(&v, 50.0)),
        p90_ms: round(percentile(&v, 90.0)),
        p99_ms: round(percentile(&v, 99.0)),
        max_ms: round(v[v.len() - 1]),
        mean_ms: round(v.iter().sum::<f64>() / v.len() as f64),
    }
}

pub fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Memory and CPU of one controller process over the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Resources {
    pub time_to_ready_s: Option<f64>,
    pub rss_at_ready_mib: f64,
    /// Median RSS while changes were driven and reloads awaited.
    pub rss_steady_mib: f64,
    pub rss_end_mib: f64,
    /// VmHWM: the peak RSS of the process's life.
    pub rss_peak_mib: f64,
    pub cpu_s_to_ready: f64,
    pub cpu_s_change_phase: f64,
    pub cpu_s_total: f64,
    pub samples: usize,
}

fn mib(kib: u64) -> f64 {
    round(kib as f64 / 1024.0)
}

pub fn resources(
    samples: &[Sample],
    ready_at: Option<f64>,
    started_at: f64,
    changes_from: f64,
) -> Resources {
    let mut r = Resources {
        time_to_ready_s: ready_at
            .map(|t| (t - started_at) * 1000.0)
            .map(|ms| ms.round() / 1000.0),
        samples: samples.len(),
        ..Default::default()
    };
    if samples.is_empty() {
        return r;
    }
    let ready = ready_at.unwrap_or(f64::INFINITY);
    let at_ready = samples
        .iter()
        .find(|s| s.t >= ready)
        .unwrap_or(&samples[samples.len() - 1]);
    r.rss_at_ready_mib = mib(at_ready.rss_kib);
    r.cpu_s_to_ready = round2(at_ready.cpu_s);
    let mut steady: Vec<u64> = samples
        .iter()
        .filter(|s| s.t >= changes_from)
        .map(|s| s.rss_kib)
        .collect();
    steady.sort();
    if !steady.is_empty() {
        r.rss_steady_mib = mib(steady[steady.len() / 2]);
    }
    let last = samples[samples.len() - 1];
    r.rss_end_mib = mib(last.rss_kib);
    r.rss_peak_mib = mib(samples.iter().map(|s| s.hwm_kib).max().unwrap_or(0));
    r.cpu_s_total = round2(last.cpu_s);
    // The first reading at or after the start of the phase, as for "to ready" (0.5 s apart).
    let before = samples
        .iter()
        .find(|s| s.t >= changes_from)
        .map(|s| s.cpu_s)
        .unwrap_or(last.cpu_s);
    r.cpu_s_change_phase = round2(last.cpu_s - before);
    r
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn counts_json(c: &Counts) -> Value {
    let m: BTreeMap<String, u64> = c
        .iter()
        .map(|((v, r), n)| (format!("{v} {r}"), *n))
        .collect();
    json!(m)
}

pub fn total(c: &Counts) -> u64 {
    c.values().sum()
}

/// `a - b` per key (counts taken at two moments).
pub fn minus(a: &Counts, b: &Counts) -> Counts {
    crate::apimetrics::delta(b, a)
}

/// The rate-limit check: for every window between two writes, the number of writes must stay
/// within `burst + rate * duration` (the token bucket's envelope), with `slack_s` of timing
/// jitter and one request of tolerance. Returns (violations, worst excess, max writes in 1 s).
pub fn rate_envelope(times: &[f64], rate: f64, burst: f64, slack_s: f64) -> (usize, f64, usize) {
    let mut violations = 0;
    let mut worst = f64::NEG_INFINITY;
    for i in 0..times.len() {
        for j in i..times.len() {
            let n = (j - i + 1) as f64;
            let allowed = burst + rate * (times[j] - times[i] + slack_s) + 1.0;
            if n > allowed {
                violations += 1;
            }
            worst = worst.max(n - (burst + rate * (times[j] - times[i])));
        }
    }
    let mut max_1s = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= 1.0 {
            lo += 1;
        }
        max_1s = max_1s.max(hi - lo + 1);
    }
    (
        violations,
        if times.is_empty() { 0.0 } else { round2(worst) },
        max_1s,
    )
}

/// An SVG CDF of latencies (seconds), one curve per series.
pub fn cdf_svg(title: &str, series: &[(String, Vec<f64>)]) -> String {
    let (w, h) = (720.0, 420.0);
    let (l, r, t, b) = (70.0, 20.0, 40.0, 50.0);
    let max_ms = series
        .iter()
        .flat_map(|(_, v)| v.iter())
        .fold(0.0f64, |m, &x| m.max(x * 1000.0));
    let mut all: Vec<f64> = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|x| x * 1000.0))
        .collect();
    all.sort_by(f64::total_cmp);
    let p50_all = if all.is_empty() {
        1.0
    } else {
        percentile(&all, 50.0)
    };
    // A long tail (restart, burst) squeezes the bulk into a corner: log scale then.
    let log = max_ms > 20.0 * p50_all.max(0.1) && max_ms > 10.0;
    let x_max = nice_ceiling(max_ms.max(1.0));
    let x_min = if log {
        10f64.powf(
            all.iter()
                .copied()
                .find(|&x| x > 0.0)
                .unwrap_or(1.0)
                .max(0.1)
                .log10()
                .floor(),
        )
    } else {
        0.0
    };
    let x_max = if log {
        10f64.powf(max_ms.log10().ceil())
    } else {
        x_max
    };
    let px = |ms: f64| {
        let f = if log {
            (ms.max(x_min).log10() - x_min.log10()) / (x_max.log10() - x_min.log10())
        } else {
            ms / x_max
        };
        l + f * (w - l - r)
    };
    let py = |q: f64| h - b - q * (h - t - b);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>
"#,
        w / 2.0,
        escape(title)
    );
    for i in 0..=10 {
        let q = i as f64 / 10.0;
        let _ = writeln!(
            s,
            r##"<line x1="{l}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{q:.1}</text>"##,
            w - r,
            l - 6.0,
            py(q) + 4.0,
            y = py(q)
        );
    }
    let ticks: Vec<f64> = if log {
        let mut v = Vec::new();
        let mut d = x_min;
        while d <= x_max * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                if d * m <= x_max * 1.0001 {
                    v.push(d * m);
                }
            }
            d *= 10.0;
        }
        v
    } else {
        (0..=8).map(|i| x_max * f64::from(i) / 8.0).collect()
    };
    for ms in ticks {
        let _ = writeln!(
            s,
            r##"<line x1="{x}" x2="{x}" y1="{t}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            h - b,
            h - b + 16.0,
            fmt_ms(ms),
            x = px(ms)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{}" stroke="black"/><line x1="{l}" x2="{}" y1="{y}" y2="{y}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">reload latency{}: config write acknowledged -&gt; template change seen</text>
<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">fraction of reloads</text>"##,
        h - b,
        w - r,
        (l + w - r) / 2.0,
        h - 12.0,
        if log { " (log scale)" } else { "" },
        (t + h - b) / 2.0,
        (t + h - b) / 2.0,
        y = h - b
    );
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
    for (k, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().map(|x| x * 1000.0).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        let color = colors[k % colors.len()];
        let n = v.len() as f64;
        let mut pts = format!("{:.1},{:.1}", px(v[0].max(0.0)), py(0.0));
        for (i, x) in v.iter().enumerate() {
            let _ = write!(
                pts,
                " {:.1},{:.1} {:.1},{:.1}",
                px(x.max(0.0)),
                py(i as f64 / n),
                px(x.max(0.0)),
                py((i + 1) as f64 / n)
            );
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>"#
        );
        let p50 = percentile(&v, 50.0);
        let p99 = percentile(&v, 99.0);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{color}">{} (n={}, p50 {}, p99 {})</text>"#,
            l + 10.0,
            t + 16.0 + 16.0 * k as f64,
            escape(name),
            v.len(),
            fmt_ms(p50),
            fmt_ms(p99)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.0} s", ms / 1000.0)
    } else if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

fn nice_ceiling(x: f64) -> f64 {
    let mag = 10f64.powf(x.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * mag >= x {
            return m * mag;
        }
    }
    10.0 * mag
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[3.0], 90.0), 3.0);
    }

    #[test]
    fn envelope_accepts_a_token_bucket_and_flags_excess() {
        // burst 10 at t=0, then 10/s
        let mut t: Vec<f64> = vec![0.0; 10];
        t.extend((1..=50).map(|i| i as f64 / 10.0));
        assert_eq!(rate_envelope(&t, 10.0, 10.0, 0.05).0, 0);
        let fast: Vec<f64> = (0..100).map(|i| i as f64 / 100.0).collect();
        assert!(rate_envelope(&fast, 10.0, 10.0, 0.05).0 > 0);
    }

    #[test]
    fn svg_is_well_formed_enough() {
        let s = cdf_svg("t", &[("a".into(), vec![0.1, 0.2, 0.3])]);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("polyline") && !s.contains("log scale"));
        let tail = cdf_svg("t", &[("a".into(), vec![0.01, 0.01, 0.01, 5.0])]);
        assert!(tail.contains("log scale"));
    }
}
