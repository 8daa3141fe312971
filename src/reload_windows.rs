//! When a workload may be reloaded: a maintenance window (`kube-reloader.io/reload-window`) and
//! a delay before the first reload of a change (`kube-reloader.io/reload-delay`), read from the
//! workload or, where kube-reloader watches namespaces, its namespace. Pure: the time is passed
//! in.
//!
//! A window is one or more spans separated by `;`, each `[days] HH:MM-HH:MM`, then an optional
//! zone, `UTC` (the default) or a fixed offset such as `+02:00`:
//!
//! ```text
//! mon-fri 22:00-06:00          weeknights, each span running past midnight into the next day
//! sat,sun 00:00-24:00; 12:00-13:00 +01:00
//! ```
//!
//! Days are `mon`..`sun`, as a list (`sat,sun`), a range (`mon-fri`, wrapping: `fri-mon`) or
//! `*`; without days a span is every day. A span whose end is not after its start runs past
//! midnight and belongs to the day it starts on. Fixed offsets only: a named zone would need a
//! time-zone database the controller's image does not carry, and a window that moves with
//! daylight saving is the one case it does not cover.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{ConfigKey, ConfigKind, WorkloadKey, WorkloadKind};
use crate::waves::{HELD_PREFIX, kept_key};

/// Minutes in a day and in a week.
const DAY: i64 = 24 * 60;
const WEEK: i64 = 7 * DAY;

/// A maintenance window: reloads of the workloads it covers run only while it is open.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReloadWindow {
    spans: Vec<Span>,
    /// The zone's offset from UTC, in minutes.
    offset: i32,
    /// As written (normalised), for logs, Events and explain.
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Span {
    /// Bit `d` set: the span starts on weekday `d` (0 = Monday).
    days: u8,
    /// Minutes after midnight.
    start: u16,
    end: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("no span: expected '[days] HH:MM-HH:MM [UTC|+HH:MM]'")]
    Empty,
    #[error("'{0}' is not HH:MM-HH:MM")]
    Times(String),
    #[error("'{0}' is not a day (mon..sun, a list, a range or *)")]
    Days(String),
    #[error("'{0}' is not a zone: UTC or a fixed offset such as +02:00")]
    Zone(String),
    #[error("spans disagree on the zone: one zone for the whole window")]
    MixedZones,
}

impl ReloadWindow {
    pub fn parse(raw: &str) -> Result<Self, WindowError> {
        let mut spans = Vec::new();
        let mut offset = None;
        for part in raw.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (span, zone) = parse_span(part)?;
            match (offset, zone) {
                (Some(a), Some(b)) if a != b => return Err(WindowError::MixedZones),
                (None, Some(b)) => offset = Some(b),
                _ => {}
            }
            spans.push(span);
        }
        if spans.is_empty() {
            return Err(WindowError::Empty);
        }
        let offset = offset.unwrap_or(0);
        let text = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(Self {
            spans,
            offset,
            text,
        })
    }

    /// Whether reloads may run at `now`.
    pub fn is_open(&self, now: Timestamp) -> bool {
        let minute = self.minute_of_week(now);
        self.spans.iter().any(|span| span.covers(minute))
    }

    /// The first moment at or after `now` when the window is open.
    pub fn next_open(&self, now: Timestamp) -> Timestamp {
        if self.is_open(now) {
            return now;
        }
        let minute = self.minute_of_week(now);
        let wait = self
            .spans
            .iter()
            .flat_map(|span| span.starts())
            .map(|start| (start - minute).rem_euclid(WEEK))
            .min()
            .unwrap_or(0);
        // From the start of the current minute (`now` may be mid-minute, mid-second).
        let minute_start = now.as_second().div_euclid(60) * 60;
        Timestamp::from_second(minute_start + wait * 60).unwrap_or(now)
    }

    /// Minutes since Monday 00:00 in the window's zone.
    fn minute_of_week(&self, now: Timestamp) -> i64 {
        // 1970-01-01 was a Thursday, three days into its week.
        let minutes = now.as_second().div_euclid(60) + i64::from(self.offset) + 3 * DAY;
        minutes.rem_euclid(WEEK)
    }
}

impl fmt::Display for ReloadWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Span {
    fn covers(&self, minute_of_week: i64) -> bool {
        self.starts().any(|start| {
            let into = (minute_of_week - start).rem_euclid(WEEK);
            into < self.length()
        })
    }

    /// Minutes from start to end: past midnight when the end is not after the start.
    fn length(&self) -> i64 {
        let (start, end) = (i64::from(self.start), i64::from(self.end));
        if end > start {
            end - start
        } else {
            end + DAY - start
        }
    }

    /// Each start, as minutes since Monday 00:00.
    fn starts(&self) -> impl Iterator<Item = i64> + '_ {
        (0..7)
            .filter(|d| self.days & (1 << d) != 0)
            .map(|d| i64::from(d) * DAY + i64::from(self.start))
    }
}

/// `[days] HH:MM-HH:MM [zone]`, and the zone's offset when it names one.
fn parse_span(part: &str) -> Result<(Span, Option<i32>), WindowError> {
    let words: Vec<&str> = part.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.contains(':') && w.contains('-') && !is_offset(w))
        .ok_or_else(|| WindowError::Times(part.to_string()))?;
    let days = match at {
        0 => 0x7f,
        1 => parse_days(words[0])?,
        _ => return Err(WindowError::Days(words[..at].join(" "))),
    };
    let (start, end) = parse_times(words[at])?;
    let zone = match &words[at + 1..] {
        [] => None,
        [zone] => Some(parse_zone(zone)?),
        more => return Err(WindowError::Zone(more.join(" "))),
    };
    Ok((Span { days, start, end }, zone))
}

fn parse_times(raw: &str) -> Result<(u16, u16), WindowError> {
    let bad = || WindowError::Times(raw.to_string());
    let (start, end) = raw.split_once('-').ok_or_else(bad)?;
    let minutes = |t: &str| -> Option<u16> {
        let (h, m) = t.split_once(':')?;
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
    };
    let (start, end) = (
        minutes(start).ok_or_else(bad)?,
        minutes(end).ok_or_else(bad)?,
    );
    if start == DAY as u16 {
        return Err(bad());
    }
    Ok((start, end))
}

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn parse_days(raw: &str) -> Result<u8, WindowError> {
    if raw == "*" {
        return Ok(0x7f);
    }
    let bad = || WindowError::Days(raw.to_string());
    let day = |d: &str| {
        DAYS.iter()
            .position(|name| name.eq_ignore_ascii_case(d))
            .ok_or_else(bad)
    };
    let mut days = 0u8;
    for item in raw.split(',') {
        match item.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (day(from)?, day(to)?);
                let len = (to + 7 - from) % 7;
                for d in 0..=len {
                    days |= 1 << ((from + d) % 7);
                }
            }
            None => days |= 1 << day(item)?,
        }
    }
    Ok(days)
}

fn is_offset(word: &str) -> bool {
    word.starts_with(['+', '-'])
}

/// `UTC`, `Z` or `+HH:MM` / `-HH:MM`, as minutes east of UTC.
fn parse_zone(raw: &str) -> Result<i32, WindowError> {
    if raw.eq_ignore_ascii_case("utc") || raw == "Z" {
        return Ok(0);
    }
    let bad = || WindowError::Zone(raw.to_string());
    let (sign, rest) = match raw.split_at_checked(1).ok_or_else(bad)? {
        ("+", rest) => (1, rest),
        ("-", rest) => (-1, rest),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 14 || m >= 60 {
        return Err(bad());
    }
    Ok(sign * (h * 60 + m))
}

/// A workload's reloads held by its window or its delay: the configs whose changes wait, and
/// since when. Kept in the halts ConfigMap (one data key per workload, under [`HELD_PREFIX`]), so
/// a restarted replica or the namespace's next owner holds and then rolls what this one held.
/// When it is due, the workload rolls once, to each config's value then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldReload {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `<kind>/<name>` of each config, in the workload's namespace.
    pub configs: Vec<String>,
    /// When the first held change was seen: the delay counts from it.
    pub since: Timestamp,
}

impl HeldReload {
    pub fn new<'a>(
        workload: &WorkloadKey,
        configs: impl IntoIterator<Item = &'a ConfigKey>,
        since: Timestamp,
    ) -> Self {
        Self {
            kind: workload.kind.as_str().to_string(),
            namespace: workload.namespace.to_string(),
            name: workload.name.to_string(),
            configs: configs
                .into_iter()
                .map(|c| format!("{}/{}", c.kind.as_str(), c.name))
                .collect(),
            since,
        }
    }

    /// The ConfigMap data key of `workload`'s held reloads.
    pub fn data_key(workload: &WorkloadKey) -> String {
        kept_key(
            HELD_PREFIX,
            workload.kind.as_str(),
            &workload.namespace,
            &workload.name,
        )
    }

    /// The workload; `None` for a kind this release does not know.
    pub fn workload(&self) -> Option<WorkloadKey> {
        let kind = WorkloadKind::named(&self.kind)?;
        Some(WorkloadKey::new(kind, &self.namespace, &self.name))
    }

    /// The configs that are known kinds.
    pub fn config_keys(&self) -> Vec<ConfigKey> {
        self.configs
            .iter()
            .filter_map(|c| {
                let (kind, name) = c.split_once('/')?;
                let kind = ConfigKind::ALL.into_iter().find(|k| k.as_str() == kind)?;
                Some(ConfigKey::new(kind, &self.namespace, name))
            })
            .collect()
    }
}

/// When reloads held since `since` may go out: once `delay` has passed, at the window's next
/// opening from then.
pub fn due(
    since: Timestamp,
    window: Option<&ReloadWindow>,
    delay: Option<std::time::Duration>,
) -> Timestamp {
    let delayed = delay
        .and_then(|d| jiff::SignedDuration::try_from(d).ok())
        .and_then(|d| since.checked_add(d).ok())
        .unwrap_or(since);
    window.map_or(delayed, |w| w.next_open(delayed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-07 was a Monday.
    fn at(day: &str, time: &str) -> Timestamp {
        let date = match day {
            "mon" => "2026-12-07",
            "tue" => "2026-12-08",
            "fri" => "2026-12-11",
            "sat" => "2026-12-12",
            "sun" => "2026-12-13",
            _ => unreachable!(),
        };
        format!("{date}T{time}:00Z").parse().unwrap()
    }

    #[test]
    fn a_weeknight_window_runs_past_midnight_from_the_days_it_starts_on() {
        let w = ReloadWindow::parse("mon-fri 22:00-06:00").unwrap();
        assert!(w.is_open(at("mon", "23:30")));
        assert!(
            w.is_open(at("tue", "05:59")),
            "Monday's span, after midnight"
        );
        assert!(!w.is_open(at("tue", "06:00")));
        assert!(!w.is_open(at("mon", "05:00")), "Sunday night is not in it");
        assert!(w.is_open(at("sat", "05:00")), "Friday's span");
        assert!(!w.is_open(at("sat", "22:30")));
    }

    #[test]
    fn the_next_opening_is_the_nearest_start_of_a_span() {
        let w = ReloadWindow::parse("mon-fri 22:00-06:00").unwrap();
        assert_eq!(w.next_open(at("mon", "12:00")), at("mon", "22:00"));
        let next_monday: Timestamp = "2026-12-14T22:00:00Z".parse().unwrap();
        assert_eq!(w.next_open(at("sat", "10:00")), next_monday);
        assert_eq!(
            w.next_open(at("mon", "23:00")),
            at("mon", "23:00"),
            "open now"
        );
        let mid_minute: Timestamp = "2026-12-07T21:59:30.25Z".parse().unwrap();
        assert_eq!(w.next_open(mid_minute), at("mon", "22:00"));
    }

    #[test]
    fn several_spans_a_whole_day_and_a_fixed_offset() {
        let w = ReloadWindow::parse("sat,sun 00:00-24:00; 12:00-13:00 +01:00").unwrap();
        // 11:30 UTC is 12:30 at +01:00: the daily span.
        assert!(w.is_open(at("tue", "11:30")));
        assert!(!w.is_open(at("tue", "12:30")));
        // Saturday starts at 23:00 UTC on Friday.
        assert!(w.is_open(at("fri", "23:30")));
        assert!(!w.is_open(at("fri", "22:30")));
        assert_eq!(
            w.next_open(at("tue", "13:00")),
            "2026-12-09T11:00:00Z".parse().unwrap()
        );
    }

    #[test]
    fn day_lists_ranges_that_wrap_and_every_day() {
        let w = ReloadWindow::parse("fri-mon 09:00-10:00").unwrap();
        for day in ["fri", "sat", "sun", "mon"] {
            assert!(w.is_open(at(day, "09:30")), "{day}");
        }
        assert!(!w.is_open(at("tue", "09:30")));
        let daily = ReloadWindow::parse("* 09:00-10:00").unwrap();
        assert_eq!(
            daily,
            ReloadWindow::parse("09:00-10:00")
                .unwrap()
                .with_text("* 09:00-10:00")
        );
    }

    #[test]
    fn what_is_not_a_window_says_why() {
        let err = |raw: &str| ReloadWindow::parse(raw).unwrap_err();
        assert_eq!(err(""), WindowError::Empty);
        assert_eq!(err("mon-fri"), WindowError::Times("mon-fri".into()));
        assert_eq!(err("25:00-26:00"), WindowError::Times("25:00-26:00".into()));
        assert_eq!(
            err("someday 01:00-02:00"),
            WindowError::Days("someday".into())
        );
        assert_eq!(
            err("01:00-02:00 Europe/Paris"),
            WindowError::Zone("Europe/Paris".into())
        );
        assert_eq!(
            err("01:00-02:00 +01:00; 03:00-04:00 UTC"),
            WindowError::MixedZones
        );
    }

    #[test]
    fn a_held_reload_is_due_after_its_delay_at_the_next_opening() {
        let w = ReloadWindow::parse("mon-fri 22:00-06:00").unwrap();
        let since = at("mon", "21:00");
        let minutes = |m: u64| Some(std::time::Duration::from_secs(m * 60));
        assert_eq!(due(since, None, None), since);
        assert_eq!(due(since, None, minutes(5)), at("mon", "21:05"));
        assert_eq!(due(since, Some(&w), minutes(5)), at("mon", "22:00"));
        assert_eq!(due(since, Some(&w), minutes(90)), at("mon", "22:30"));
    }

    #[test]
    fn a_held_reload_keeps_its_workload_and_configs() {
        let workload = WorkloadKey::new(WorkloadKind::Deployment, "team-a", "api");
        let configs = [
            ConfigKey::new(ConfigKind::ConfigMap, "team-a", "settings"),
            ConfigKey::new(ConfigKind::Secret, "team-a", "tls"),
        ];
        let held = HeldReload::new(&workload, &configs, at("mon", "21:00"));
        let text = serde_json::to_string(&held).unwrap();
        let back: HeldReload = serde_json::from_str(&text).unwrap();
        assert_eq!(back.workload(), Some(workload.clone()));
        assert_eq!(back.config_keys(), configs);
        assert_eq!(
            HeldReload::data_key(&workload),
            "held.Deployment.team-a.api"
        );
    }

    impl ReloadWindow {
        fn with_text(self, text: &str) -> Self {
            Self {
                text: text.into(),
                ..self
            }
        }
    }
}
