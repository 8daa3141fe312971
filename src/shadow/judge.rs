//! Judges kube-reloader's predicted writes against the incumbent's actual ones. Pure: every
//! operation takes `now`, so the verdict rules are unit-tested step by step.
//!
//! A prediction and an observed write meet on the same (workload, config) pair, in either
//! order (the incumbent is often faster than the prediction). Equal marks agree at once. Marks
//! that differ do not settle anything yet: a config changed twice quickly is written twice by
//! the incumbent but predicted once (coalesced), so the pair stays open for the window and the
//! last write seen is judged when it closes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Instant;

use serde::Serialize;

use super::marks::{Mark, difference};
use crate::config::ShadowSettings;
use crate::model::{ConfigKey, WorkloadKey, WorkloadKind};

/// The judgement of one (workload, config) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The incumbent wrote what kube-reloader would have written.
    Agree,
    /// As `agree`, but the write came more than `late_after` after the change.
    Late,
    /// Both wrote (or would have) for the change, but not the same thing.
    Differ,
    /// kube-reloader would have reloaded; the incumbent wrote nothing within the window.
    NotDone,
    /// The incumbent reloaded where kube-reloader would not have.
    Unpredicted,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Agree,
        Verdict::Late,
        Verdict::Differ,
        Verdict::NotDone,
        Verdict::Unpredicted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::Late => "late",
            Verdict::Differ => "differ",
            Verdict::NotDone => "not-done",
            Verdict::Unpredicted => "unpredicted",
        }
    }
}

/// What kube-reloader would have written for one config into one workload.
#[derive(Debug, Clone)]
pub struct Prediction {
    pub marks: BTreeSet<Mark>,
    /// When the controller saw the config change.
    pub changed_at: Instant,
}

/// What the incumbent wrote for one config into one workload (its marks after the write).
#[derive(Debug, Clone)]
pub struct Written {
    pub marks: BTreeSet<Mark>,
    pub at: Instant,
}

/// One verdict with its detail, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub verdict: Verdict,
    pub workload: WorkloadKey,
    pub config: ConfigKey,
    /// From the config change to the incumbent's write (`agree`, `late`, `differ`).
    pub delay_ms: Option<u64>,
    pub predicted: Vec<Mark>,
    pub written: Vec<Mark>,
    /// What differs, or why nothing met (empty for `agree`).
    pub detail: String,
}

type Pair = (WorkloadKey, ConfigKey);

/// A pair with a prediction, a write, or both, not judged yet.
#[derive(Debug)]
struct Open {
    opened: Instant,
    prediction: Option<Prediction>,
    written: Option<Written>,
}

/// How many examples of each verdict the report keeps (the newest).
pub const EXAMPLES_PER_VERDICT: usize = 5;

pub struct Judge {
    settings: ShadowSettings,
    open: HashMap<Pair, Open>,
    counts: BTreeMap<(Verdict, WorkloadKind), u64>,
    latest: BTreeMap<Verdict, VecDeque<Judgement>>,
}

impl Judge {
    pub fn new(settings: ShadowSettings) -> Self {
        Self {
            settings,
            open: HashMap::new(),
            counts: BTreeMap::new(),
            latest: BTreeMap::new(),
        }
    }

    /// kube-reloader would have written `prediction`; a newer prediction for the same pair
    /// replaces the older (the write queue coalesces them the same way).
    pub fn predict(
        &mut self,
        pair: Pair,
        prediction: Prediction,
        now: Instant,
    ) -> Option<Judgement> {
        let open = self.open.entry(pair.clone()).or_insert_with(|| Open {
            opened: now,
            prediction: None,
            written: None,
        });
        open.prediction = Some(prediction);
        self.settle_if_equal(pair)
    }

    /// The incumbent wrote `written` (the pair's marks after its write).
    pub fn observe(&mut self, pair: Pair, written: Written, now: Instant) -> Option<Judgement> {
        let open = self.open.entry(pair.clone()).or_insert_with(|| Open {
            opened: now,
            prediction: None,
            written: None,
        });
        open.written = Some(written);
        self.settle_if_equal(pair)
    }

    /// Closes the pairs open for the whole window.
    pub fn expire(&mut self, now: Instant) -> Vec<Judgement> {
        let window = self.settings.window;
        let due: Vec<Pair> = self
            .open
            .iter()
            .filter(|(_, open)| now.saturating_duration_since(open.opened) >= window)
            .map(|(pair, _)| pair.clone())
            .collect();
        due.into_iter()
            .filter_map(|pair| {
                let open = self.open.remove(&pair)?;
                Some(self.record(pair, open.prediction, open.written))
            })
            .collect()
    }

    /// Pairs waiting for their other half.
    pub fn pending(&self) -> usize {
        self.open.len()
    }

    pub fn counts(&self) -> &BTreeMap<(Verdict, WorkloadKind), u64> {
        &self.counts
    }

    pub fn latest(&self) -> &BTreeMap<Verdict, VecDeque<Judgement>> {
        &self.latest
    }

    pub fn settings(&self) -> ShadowSettings {
        self.settings
    }

    fn settle_if_equal(&mut self, pair: Pair) -> Option<Judgement> {
        let open = self.open.get(&pair)?;
        let (Some(p), Some(w)) = (&open.prediction, &open.written) else {
            return None;
        };
        if p.marks != w.marks {
            return None;
        }
        let open = self.open.remove(&pair)?;
        Some(self.record(pair, open.prediction, open.written))
    }

    fn record(
        &mut self,
        (workload, config): Pair,
        prediction: Option<Prediction>,
        written: Option<Written>,
    ) -> Judgement {
        let delay = match (&prediction, &written) {
            (Some(p), Some(w)) => Some(w.at.saturating_duration_since(p.changed_at)),
            _ => None,
        };
        let predicted = prediction.map(|p| p.marks).unwrap_or_default();
        let (written, write_seen) = match written {
            Some(w) => (w.marks, true),
            None => (BTreeSet::new(), false),
        };
        let (verdict, detail) = match (delay, write_seen) {
            (Some(delay), _) if predicted == written => match delay > self.settings.late_after {
                true => (
                    Verdict::Late,
                    format!("written {} ms after the change", delay.as_millis()),
                ),
                false => (Verdict::Agree, String::new()),
            },
            (Some(_), _) => (Verdict::Differ, difference(&predicted, &written)),
            (None, false) => (
                Verdict::NotDone,
                format!(
                    "predicted {}; nothing written within {} s",
                    describe(&predicted),
                    self.settings.window.as_secs()
                ),
            ),
            (None, true) => (
                Verdict::Unpredicted,
                format!(
                    "written {}; kube-reloader would not have reloaded",
                    describe(&written)
                ),
            ),
        };
        let judgement = Judgement {
            verdict,
            delay_ms: delay.map(|d| d.as_millis() as u64),
            predicted: predicted.into_iter().collect(),
            written: written.into_iter().collect(),
            detail,
            workload,
            config,
        };
        *self
            .counts
            .entry((verdict, judgement.workload.kind))
            .or_default() += 1;
        let examples = self.latest.entry(verdict).or_default();
        if examples.len() == EXAMPLES_PER_VERDICT {
            examples.pop_front();
        }
        examples.push_back(judgement.clone());
        judgement
    }
}

fn describe(marks: &BTreeSet<Mark>) -> String {
    match marks.is_empty() {
        true => "the reload marks removed".to_string(),
        false => marks
            .iter()
            .map(Mark::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigKind;
    use std::time::Duration;

    const WINDOW: Duration = Duration::from_secs(60);

    fn judge() -> Judge {
        Judge::new(ShadowSettings {
            window: WINDOW,
            late_after: Duration::from_secs(10),
        })
    }

    fn pair() -> Pair {
        (
            WorkloadKey::new(WorkloadKind::Deployment, "ns", "web"),
            ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"),
        )
    }

    fn env(value: &str) -> BTreeSet<Mark> {
        [Mark::EnvVar {
            container: "app".into(),
            name: "STAKATER_APP_CONFIGMAP".into(),
            value: value.into(),
        }]
        .into()
    }

    fn predicted(value: &str, changed_at: Instant) -> Prediction {
        Prediction {
            marks: env(value),
            changed_at,
        }
    }

    fn written(value: &str, at: Instant) -> Written {
        Written {
            marks: env(value),
            at,
        }
    }

    #[test]
    fn equal_marks_agree_in_either_order_with_the_delay_from_the_change() {
        let t0 = Instant::now();
        let mut j = judge();
        assert_eq!(j.predict(pair(), predicted("h", t0), t0), None);
        let first = j.observe(pair(), written("h", t0 + Duration::from_millis(40)), t0);
        let first = first.expect("judged at once");
        assert_eq!((first.verdict, first.delay_ms), (Verdict::Agree, Some(40)));
        // The incumbent first: the prediction that follows settles it.
        assert_eq!(j.observe(pair(), written("h2", t0), t0), None);
        let second = j.predict(pair(), predicted("h2", t0), t0).expect("judged");
        assert_eq!(second.verdict, Verdict::Agree);
        assert_eq!(j.pending(), 0);
        assert_eq!(j.counts()[&(Verdict::Agree, WorkloadKind::Deployment)], 2);
    }

    #[test]
    fn an_agreeing_write_after_late_after_is_late() {
        let t0 = Instant::now();
        let mut j = judge();
        j.predict(pair(), predicted("h", t0), t0);
        let at = t0 + Duration::from_secs(11);
        let late = j.observe(pair(), written("h", at), at).expect("judged");
        assert_eq!(late.verdict, Verdict::Late);
        assert_eq!(late.delay_ms, Some(11_000));
    }

    #[test]
    fn a_different_write_is_judged_when_the_window_closes_unless_a_later_write_agrees() {
        let t0 = Instant::now();
        let mut j = judge();
        j.predict(pair(), predicted("new", t0), t0);
        // The incumbent writes an intermediate value first, then the same: agree.
        assert_eq!(j.observe(pair(), written("mid", t0), t0), None);
        let agreed = j.observe(pair(), written("new", t0), t0).expect("judged");
        assert_eq!(agreed.verdict, Verdict::Agree);
        // Only a different value: differ, with the values, once the window is over.
        j.predict(pair(), predicted("new2", t0), t0);
        j.observe(pair(), written("other", t0), t0);
        assert!(j.expire(t0 + WINDOW - Duration::from_millis(1)).is_empty());
        let differ = j.expire(t0 + WINDOW);
        assert_eq!(differ.len(), 1);
        assert_eq!(differ[0].verdict, Verdict::Differ);
        assert!(differ[0].detail.contains("=new2") && differ[0].detail.contains("=other"));
    }

    #[test]
    fn a_lone_prediction_is_not_done_and_a_lone_write_unpredicted() {
        let t0 = Instant::now();
        let mut j = judge();
        j.predict(pair(), predicted("h", t0), t0);
        let other = (pair().0, ConfigKey::new(ConfigKind::Secret, "ns", "s"));
        j.observe(other, written("x", t0), t0);
        let mut verdicts: Vec<_> = j.expire(t0 + WINDOW).iter().map(|v| v.verdict).collect();
        verdicts.sort();
        assert_eq!(verdicts, vec![Verdict::NotDone, Verdict::Unpredicted]);
        assert_eq!(j.pending(), 0);
    }

    #[test]
    fn keeps_the_newest_examples_per_verdict() {
        let t0 = Instant::now();
        let mut j = judge();
        for i in 0..(EXAMPLES_PER_VERDICT + 2) {
            let key = WorkloadKey::new(WorkloadKind::Deployment, "ns", &format!("w{i}"));
            let config = pair().1;
            j.predict((key.clone(), config.clone()), predicted("h", t0), t0);
            j.observe((key, config), written("h", t0), t0);
        }
        let agree = &j.latest()[&Verdict::Agree];
        assert_eq!(agree.len(), EXAMPLES_PER_VERDICT);
        assert_eq!(&*agree.back().unwrap().workload.name, "w6");
    }
}
