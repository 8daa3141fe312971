//! The churn breaker (`--churn-limit`, off by default): a config whose content changes more
//! than `limit` times within `window` stops rolling its workloads (a certificate rotated every
//! minute, a generator rewriting a Secret on every sync). Once the config has been stable for
//! `quiet`, its workloads are rolled once, to its latest value. The state is kept here; the
//! engine asks [`ChurnBreaker::admit`] on every content change, and its release task calls
//! [`ChurnBreaker::due`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::BreakerSettings;
use crate::index::ConfigState;
use crate::model::ConfigKey;

/// A churn breaker opened or closed (an Event on the config and an alert follow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakerNotice {
    /// `changes` content changes within the window: the config's workloads are held.
    Opened { config: ConfigKey, changes: usize },
    /// Stable for the quiet period: `affected` workloads rolled once, `held` changes skipped.
    Released {
        config: ConfigKey,
        held: u32,
        affected: usize,
    },
}

impl BreakerNotice {
    pub fn config(&self) -> &ConfigKey {
        match self {
            BreakerNotice::Opened { config, .. } | BreakerNotice::Released { config, .. } => config,
        }
    }

    /// The Event note and alert text.
    pub fn describe(&self, settings: BreakerSettings) -> String {
        let quiet = crate::go_values::format_go_duration(settings.quiet);
        match self {
            BreakerNotice::Opened { config, changes } => format!(
                "{} {}/{} changed {changes} times within {} (--churn-limit {}): reloads of its \
                 workloads are held until it has not changed for {quiet}",
                config.kind,
                config.namespace,
                config.name,
                crate::go_values::format_go_duration(settings.window),
                settings.limit,
            ),
            BreakerNotice::Released {
                config,
                held,
                affected,
            } => format!(
                "{} {}/{} unchanged for {quiet}: {held} held changes, {affected} workloads \
                 rolled once to its latest value",
                config.kind, config.namespace, config.name,
            ),
        }
    }
}

/// What the engine does with one content change of a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Roll the workloads, as without a breaker.
    Pass,
    /// This change opened the breaker: held, with `changes` seen within the window.
    Trip { changes: usize },
    /// The breaker is open: held.
    Hold,
}

/// An open breaker, for explain and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub opened: Instant,
    pub last_change: Instant,
    /// Changes held since the breaker opened (the one that opened it included).
    pub held_changes: u32,
    /// What the workloads were last rolled to (the state before the first held change): a
    /// key-precise workload whose keys are back where they were rolls nothing on release.
    pub before: Option<ConfigState>,
}

impl Held {
    pub fn releases_at(&self, quiet: Duration) -> Instant {
        self.last_change + quiet
    }
}

#[derive(Default)]
struct Churn {
    /// Times of the recent content changes, oldest first, at most `limit + 1` of them.
    changes: VecDeque<Instant>,
    held: Option<Held>,
}

pub struct ChurnBreaker {
    settings: BreakerSettings,
    configs: Mutex<HashMap<ConfigKey, Churn, ahash::RandomState>>,
    /// Woken when a breaker opens, so the release task computes its next deadline.
    opened: Notify,
}

impl ChurnBreaker {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            configs: Default::default(),
            opened: Notify::new(),
        }
    }

    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConfigKey, Churn, ahash::RandomState>> {
        self.configs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A content change of `key` at `now`; `before` is what the index held until it.
    pub fn admit(&self, key: &ConfigKey, now: Instant, before: Option<&ConfigState>) -> Admit {
        let BreakerSettings { limit, window, .. } = self.settings;
        let mut configs = self.lock();
        let churn = configs.entry(key.clone()).or_default();
        if let Some(held) = &mut churn.held {
            held.last_change = now;
            held.held_changes += 1;
            return Admit::Hold;
        }
        churn.changes.push_back(now);
        while churn
            .changes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            churn.changes.pop_front();
        }
        if churn.changes.len() <= limit as usize {
            return Admit::Pass;
        }
        let changes = churn.changes.len();
        churn.changes.clear();
        churn.held = Some(Held {
            opened: now,
            last_change: now,
            held_changes: 1,
            before: before.cloned(),
        });
        drop(configs);
        self.opened.notify_one();
        Admit::Trip { changes }
    }

    /// The open breakers quiet since `quiet` at `now`, closed and returned with the state their
    /// workloads were last rolled to; forgets configs with no recent change.
    pub fn due(&self, now: Instant) -> Vec<(ConfigKey, Held)> {
        let BreakerSettings { window, quiet, .. } = self.settings;
        let mut due = Vec::new();
        self.lock().retain(|key, churn| {
            if let Some(held) = churn.held.take_if(|h| now >= h.releases_at(quiet)) {
                due.push((key.clone(), held));
            }
            churn.held.is_some()
                || churn
                    .changes
                    .back()
                    .is_some_and(|t| now.duration_since(*t) <= window)
        });
        due
    }

    /// When the next open breaker is due (`None`: none is open).
    pub fn next_release(&self) -> Option<Instant> {
        let quiet = self.settings.quiet;
        let configs = self.lock();
        configs
            .values()
            .filter_map(|c| c.held.as_ref().map(|h| h.releases_at(quiet)))
            .min()
    }

    /// Resolves when a breaker opens.
    pub async fn opened(&self) {
        self.opened.notified().await
    }

    /// The open breaker of `key`, if any.
    pub fn held(&self, key: &ConfigKey) -> Option<Held> {
        self.lock().get(key).and_then(|c| c.held.clone())
    }

    pub fn open_count(&self) -> usize {
        self.lock().values().filter(|c| c.held.is_some()).count()
    }

    /// The config was deleted or left this replica: nothing is held for it any more.
    pub fn forget(&self, key: &ConfigKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigKind;

    fn breaker() -> ChurnBreaker {
        ChurnBreaker::new(BreakerSettings {
            limit: 3,
            window: Duration::from_secs(60),
            quiet: Duration::from_secs(30),
        })
    }

    fn key() -> ConfigKey {
        ConfigKey::new(ConfigKind::Secret, "ns", "cert")
    }

    async fn step(secs: u64) -> Instant {
        tokio::time::advance(Duration::from_secs(secs)).await;
        Instant::now()
    }

    #[tokio::test(start_paused = true)]
    async fn more_than_limit_changes_in_the_window_open_it_and_quiet_closes_it_once() {
        let b = breaker();
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(b.admit(&key(), step(2).await, None));
        }
        assert_eq!(
            seen,
            [
                Admit::Pass,
                Admit::Pass,
                Admit::Pass,
                Admit::Trip { changes: 4 },
                Admit::Hold,
                Admit::Hold
            ]
        );
        let last = Instant::now();
        assert_eq!(b.next_release(), Some(last + Duration::from_secs(30)));
        assert!(b.due(step(29).await).is_empty(), "not quiet long enough");
        let due = b.due(step(1).await);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].1.held_changes, 3);
        assert!(b.due(step(1).await).is_empty(), "released once");
        assert_eq!(b.open_count(), 0);
        assert_eq!(
            b.admit(&key(), step(1).await, None),
            Admit::Pass,
            "closed again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn changes_spread_wider_than_the_window_never_open_it() {
        let b = breaker();
        for _ in 0..20 {
            assert_eq!(b.admit(&key(), step(21).await, None), Admit::Pass);
        }
        assert_eq!(b.next_release(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn every_held_change_pushes_the_release_back() {
        let b = breaker();
        for _ in 0..4 {
            b.admit(&key(), step(1).await, None);
        }
        for _ in 0..10 {
            b.admit(&key(), step(20).await, None);
            assert!(b.due(Instant::now()).is_empty());
        }
        assert!(b.held(&key()).is_some());
        assert_eq!(b.due(step(30).await).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_configs_are_forgotten_and_a_forgotten_breaker_releases_nothing() {
        let b = breaker();
        b.admit(&key(), step(1).await, None);
        let other = ConfigKey::new(ConfigKind::Secret, "ns", "other");
        for _ in 0..4 {
            b.admit(&other, step(1).await, None);
        }
        b.forget(&other);
        assert!(b.due(step(61).await).is_empty());
        assert!(
            b.lock().is_empty(),
            "nothing kept for configs that went quiet"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_release_task_is_woken_when_a_breaker_opens() {
        let b = std::sync::Arc::new(breaker());
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.opened().await }
        });
        tokio::task::yield_now().await;
        for _ in 0..4 {
            b.admit(&key(), step(1).await, None);
        }
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
