//! The shadow report: verdict counts, per kind, and the newest examples of each verdict, as
//! `/debug/shadow` serves it (JSON) and `kube-reloader shadow report` prints it.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::judge::{Judge, Judgement, Verdict};
use super::marks::Mark;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub window_seconds: u64,
    pub late_after_seconds: u64,
    /// Pairs with a prediction or a write still waiting for the other half.
    pub pending: usize,
    /// Verdicts so far, every verdict named (0 when none).
    pub counts: BTreeMap<String, u64>,
    /// Verdicts by workload kind: `{verdict: {kind: count}}`.
    pub by_kind: BTreeMap<String, BTreeMap<String, u64>>,
    /// Predicted restarts (`spec.restartAt`), which the pod template cannot show.
    pub unjudged: u64,
    /// The newest examples of each verdict, oldest first.
    pub latest: BTreeMap<String, Vec<Example>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    pub workload: String,
    pub config: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    pub predicted: Vec<Mark>,
    pub written: Vec<Mark>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl From<&Judgement> for Example {
    fn from(j: &Judgement) -> Self {
        Example {
            workload: j.workload.to_string(),
            config: j.config.to_string(),
            delay_ms: j.delay_ms,
            predicted: j.predicted.clone(),
            written: j.written.clone(),
            detail: j.detail.clone(),
        }
    }
}

impl Report {
    pub fn of(judge: &Judge, unjudged: u64) -> Self {
        let mut counts: BTreeMap<String, u64> = Verdict::ALL
            .iter()
            .map(|v| (v.as_str().to_string(), 0))
            .collect();
        let mut by_kind: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((verdict, kind), n) in judge.counts() {
            *counts.entry(verdict.as_str().into()).or_default() += n;
            *by_kind
                .entry(verdict.as_str().into())
                .or_default()
                .entry(kind.to_string())
                .or_default() += n;
        }
        let latest = judge
            .latest()
            .iter()
            .map(|(v, examples)| {
                let examples = examples.iter().map(Example::from).collect();
                (v.as_str().to_string(), examples)
            })
            .collect();
        let settings = judge.settings();
        Report {
            window_seconds: settings.window.as_secs(),
            late_after_seconds: settings.late_after.as_secs(),
            pending: judge.pending(),
            counts,
            by_kind,
            unjudged,
            latest,
        }
    }

    /// Verdicts that are not `agree`: what to read before switching.
    pub fn disagreements(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(v, _)| v.as_str() != Verdict::Agree.as_str())
            .map(|(_, n)| n)
            .sum()
    }

    /// The report for a terminal: counts, then the examples of every verdict but `agree`.
    pub fn text(&self) -> String {
        let judged: u64 = self.counts.values().sum();
        let mut out = format!(
            "shadow report: {judged} judged, {} pending (window {} s, late after {} s)\n",
            self.pending, self.window_seconds, self.late_after_seconds
        );
        for verdict in Verdict::ALL {
            let name = verdict.as_str();
            let n = self.counts.get(name).copied().unwrap_or(0);
            let kinds = self.by_kind.get(name).map(kinds_text).unwrap_or_default();
            let _ = writeln!(out, "  {name:<12} {n:>6}{kinds}");
        }
        if self.unjudged > 0 {
            let _ = writeln!(
                out,
                "  {} predicted restarts (spec.restartAt) not judged",
                self.unjudged
            );
        }
        for verdict in Verdict::ALL.iter().filter(|v| **v != Verdict::Agree) {
            let Some(examples) = self.latest.get(verdict.as_str()) else {
                continue;
            };
            let _ = writeln!(out, "\nlatest {}:", verdict.as_str());
            for e in examples {
                let _ = writeln!(out, "  {} <- {}: {}", e.workload, e.config, e.detail);
            }
        }
        match self.disagreements() {
            0 if judged > 0 => out.push_str("\nevery judged write agrees\n"),
            _ => {}
        }
        out
    }
}

fn kinds_text(kinds: &BTreeMap<String, u64>) -> String {
    let items: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("   ({})", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShadowSettings;
    use crate::model::{ConfigKey, ConfigKind, WorkloadKey, WorkloadKind};
    use crate::shadow::judge::{Prediction, Written};
    use std::time::{Duration, Instant};

    #[test]
    fn counts_every_verdict_and_shows_the_examples_of_disagreements() {
        let mut judge = Judge::new(ShadowSettings {
            window: Duration::from_secs(60),
            late_after: Duration::from_secs(10),
        });
        let t0 = Instant::now();
        let web = WorkloadKey::new(WorkloadKind::Deployment, "ns", "web");
        let config = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
        let marks = |v: &str| {
            [Mark::EnvVar {
                container: "app".into(),
                name: "STAKATER_APP_CONFIGMAP".into(),
                value: v.into(),
            }]
            .into()
        };
        let pair = (web.clone(), config.clone());
        let prediction = Prediction {
            marks: marks("a"),
            changed_at: t0,
        };
        judge.predict(pair.clone(), prediction, t0);
        let written = Written {
            marks: marks("a"),
            at: t0,
        };
        judge.observe(pair, written, t0);
        let db = WorkloadKey::new(WorkloadKind::StatefulSet, "ns", "db");
        let prediction = Prediction {
            marks: marks("b"),
            changed_at: t0,
        };
        judge.predict((db, config), prediction, t0);
        judge.expire(t0 + Duration::from_secs(60));
        let report = Report::of(&judge, 0);
        assert_eq!(report.counts["agree"], 1);
        assert_eq!(report.counts["not-done"], 1);
        assert_eq!(report.counts["differ"], 0);
        assert_eq!(report.disagreements(), 1);
        assert_eq!(report.by_kind["not-done"]["StatefulSet"], 1);
        let text = report.text();
        assert!(text.contains("latest not-done:"), "{text}");
        assert!(text.contains("STAKATER_APP_CONFIGMAP=b"), "{text}");
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
    }
}
