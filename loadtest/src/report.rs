//! Figures: latency percentiles, the controller's resources, request counts; written as JSON,
//! a Markdown table (markdown.rs) and an SVG latency CDF (plot.rs).

use std::collections::BTreeMap;

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
}
