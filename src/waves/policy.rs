//! The wave policy: how a change that affects many workloads is rolled. Written as
//! `threshold=20,canary=5%,growth=2,deadline=5m` (any part may be left out: the default's value
//! stays), or `off`, in the flag `--waves` (the default), on a namespace and on the config
//! (`kube-reloader.io/waves`); the nearest one that is set wins. Nothing set anywhere: every
//! affected workload is queued at once, as Reloader does.

use std::time::Duration;

use crate::go_values::{format_go_duration, parse_go_duration};

/// The annotation, on a config or a namespace.
pub const WAVES_ANNOTATION: &str = "kube-reloader.io/waves";
/// On a config: a new value releases its halted change (`kube-reloader resume` sets it).
pub const RESUME_ANNOTATION: &str = "kube-reloader.io/resume";

/// The size of the first wave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Canary {
    Count(usize),
    /// A share of the affected workloads, in percent (at least one workload).
    Percent(f64),
}

impl Canary {
    pub fn size(self, total: usize) -> usize {
        let n = match self {
            Canary::Count(n) => n,
            Canary::Percent(p) => ((total as f64) * p / 100.0).ceil() as usize,
        };
        n.clamp(1, total.max(1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WavePolicy {
    /// A change affecting more workloads than this is rolled in waves.
    pub threshold: usize,
    pub canary: Canary,
    /// Each wave after the first is this many times the size of the one before.
    pub growth: f64,
    /// How long a wave's workloads have to become healthy on the new template.
    pub deadline: Duration,
}

impl Default for WavePolicy {
    fn default() -> Self {
        Self {
            threshold: 10,
            canary: Canary::Count(1),
            growth: 2.0,
            deadline: Duration::from_secs(300),
        }
    }
}

/// A policy as written: `Off`, or parts over a base.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyText {
    Off,
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Threshold(usize),
    Canary(Canary),
    Growth(f64),
    Deadline(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("'{0}' is not key=value (threshold, canary, growth, deadline) or off")]
    Malformed(String),
    #[error("unknown key '{0}' (threshold, canary, growth, deadline)")]
    UnknownKey(String),
    #[error("{key}: '{value}' is not {expected}")]
    BadValue {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl PolicyText {
    pub fn parse(raw: &str) -> Result<PolicyText, PolicyError> {
        let raw = raw.trim();
        if raw.eq_ignore_ascii_case("off") || raw.eq_ignore_ascii_case("false") {
            return Ok(PolicyText::Off);
        }
        if raw.eq_ignore_ascii_case("on") || raw.eq_ignore_ascii_case("true") {
            return Ok(PolicyText::Parts(Vec::new()));
        }
        raw.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(parse_part)
            .collect::<Result<_, _>>()
            .map(PolicyText::Parts)
    }

    /// The policy this text makes over `base` (`None`: off).
    pub fn over(&self, base: WavePolicy) -> Option<WavePolicy> {
        let PolicyText::Parts(parts) = self else {
            return None;
        };
        let mut policy = base;
        for part in parts {
            match *part {
                Part::Threshold(n) => policy.threshold = n,
                Part::Canary(c) => policy.canary = c,
                Part::Growth(g) => policy.growth = g,
                Part::Deadline(d) => policy.deadline = d,
            }
        }
        Some(policy)
    }
}

fn parse_part(part: &str) -> Result<Part, PolicyError> {
    let (key, value) = part
        .split_once('=')
        .ok_or_else(|| PolicyError::Malformed(part.to_string()))?;
    let (key, value) = (key.trim(), value.trim());
    let bad = |key, expected| PolicyError::BadValue {
        key,
        value: value.to_string(),
        expected,
    };
    match key {
        "threshold" => value
            .parse()
            .map(Part::Threshold)
            .map_err(|_| bad("threshold", "a whole number")),
        "canary" => parse_canary(value)
            .map(Part::Canary)
            .ok_or_else(|| bad("canary", "a count (3) or a share (5%) above 0")),
        "growth" => value
            .parse::<f64>()
            .ok()
            .filter(|g| g.is_finite() && *g >= 1.0)
            .map(Part::Growth)
            .ok_or_else(|| bad("growth", "a number of at least 1")),
        "deadline" => parse_go_duration(value)
            .ok()
            .filter(|d| !d.is_zero())
            .map(Part::Deadline)
            .ok_or_else(|| bad("deadline", "a duration above 0 (5m, 90s)")),
        other => Err(PolicyError::UnknownKey(other.to_string())),
    }
}

fn parse_canary(value: &str) -> Option<Canary> {
    match value.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| *p > 0.0 && *p <= 100.0)
            .map(Canary::Percent),
        None => value
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(Canary::Count),
    }
}

/// The policy for one change: the config's annotation, else the namespace's, else the flag's.
/// A malformed annotation is skipped (the caller reports it) and the next one applies.
pub fn resolve(
    flag: Option<&PolicyText>,
    namespace: Option<&PolicyText>,
    config: Option<&PolicyText>,
) -> Option<WavePolicy> {
    let text = config.or(namespace).or(flag)?;
    // The flag's parts are the base an annotation's parts refine.
    let base = flag
        .and_then(|f| f.over(WavePolicy::default()))
        .unwrap_or_default();
    text.over(base)
}

impl std::fmt::Display for WavePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let canary = match self.canary {
            Canary::Count(n) => n.to_string(),
            Canary::Percent(p) => format!("{p}%"),
        };
        write!(
            f,
            "threshold={},canary={canary},growth={},deadline={}",
            self.threshold,
            self.growth,
            format_go_duration(self.deadline)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> PolicyText {
        PolicyText::parse(raw).unwrap()
    }

    #[test]
    fn parts_refine_the_default_and_off_turns_waves_off() {
        let p = parse("threshold=50, canary=5%,deadline=2m")
            .over(WavePolicy::default())
            .unwrap();
        assert_eq!(p.threshold, 50);
        assert_eq!(p.canary, Canary::Percent(5.0));
        assert_eq!(p.growth, 2.0);
        assert_eq!(p.deadline, Duration::from_secs(120));
        assert_eq!(parse("off").over(WavePolicy::default()), None);
        assert_eq!(
            parse("on").over(WavePolicy::default()),
            Some(WavePolicy::default())
        );
        assert_eq!(
            p.to_string(),
            "threshold=50,canary=5%,growth=2,deadline=2m0s"
        );
    }

    #[test]
    fn malformed_policies_say_what_is_wrong() {
        for (raw, says) in [
            ("threshold", "not key=value"),
            ("speed=3", "unknown key 'speed'"),
            ("threshold=-1", "a whole number"),
            ("canary=0", "above 0"),
            ("canary=150%", "above 0"),
            ("growth=0.5", "at least 1"),
            ("deadline=0s", "above 0"),
            ("deadline=soon", "a duration"),
        ] {
            let error = PolicyText::parse(raw).unwrap_err().to_string();
            assert!(error.contains(says), "{raw}: {error}");
        }
    }

    #[test]
    fn the_config_wins_over_the_namespace_which_wins_over_the_flag() {
        let flag = parse("threshold=100,deadline=10m");
        let namespace = parse("threshold=20");
        let config = parse("canary=3");
        let p = resolve(Some(&flag), Some(&namespace), Some(&config)).unwrap();
        assert_eq!(p.canary, Canary::Count(3));
        assert_eq!(p.threshold, 100, "an annotation refines the flag's parts");
        assert_eq!(p.deadline, Duration::from_secs(600));
        let p = resolve(Some(&flag), Some(&namespace), None).unwrap();
        assert_eq!(p.threshold, 20);
        assert_eq!(resolve(Some(&flag), Some(&parse("off")), None), None);
        assert_eq!(
            resolve(None, None, None),
            None,
            "nothing set: Reloader's behaviour"
        );
        assert!(resolve(None, None, Some(&parse("on"))).is_some());
    }

    #[test]
    fn a_canary_is_at_least_one_workload_and_at_most_all() {
        assert_eq!(Canary::Percent(5.0).size(200), 10);
        assert_eq!(Canary::Percent(5.0).size(3), 1);
        assert_eq!(Canary::Count(10).size(4), 4);
        assert_eq!(Canary::Count(2).size(0), 1);
    }
}
