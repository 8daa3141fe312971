//! One change rolled in waves: the state machine, pure and clock-injected. The runner reads the
//! current wave's workloads and hands their health here; this says what to do next.
//!
//! ```text
//!  start -> Rolling(1) --every workload healthy--> Rolling(2) -> ... -> Rolling(n) -> Done
//!               |                                     |
//!               +--a workload failed, or the wave's deadline passed--> Halted (the rest held)
//! ```

use std::time::Duration;

use tokio::time::Instant;

use crate::model::{ConfigKey, WorkloadKey};

use super::health::Health;

/// Why a change stopped rolling, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub config: ConfigKey,
    /// 1-based, as people count waves.
    pub wave: usize,
    pub waves: usize,
    /// `deployment/web ProgressDeadlineExceeded`, or what was not healthy at the deadline.
    pub reason: String,
    /// The workloads of the waves not started: held until the halt is released or the config
    /// changes again.
    pub held: Vec<WorkloadKey>,
}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wave {} of {} of the change of {}/{} failed: {}; {} workloads held",
            self.wave,
            self.waves,
            self.config.kind.as_str(),
            self.config.name,
            self.reason,
            self.held.len()
        )
    }
}

/// What the runner does after an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The wave is still rolling: look again later.
    Wait,
    /// The wave is healthy: roll these next.
    Next(Vec<WorkloadKey>),
    /// Stop: hold the rest.
    Halt(Halt),
    /// Every wave is healthy.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Rolling,
    Halted(Halt),
    Done,
}

#[derive(Debug, Clone)]
pub struct Sequence {
    pub config: ConfigKey,
    waves: Vec<Vec<WorkloadKey>>,
    /// Index of the wave rolling now.
    current: usize,
    wave_started: Instant,
    deadline: Duration,
    state: State,
}

impl Sequence {
    /// Starts with the first wave (returned by [`Sequence::current_wave`]).
    pub fn start(
        config: ConfigKey,
        waves: Vec<Vec<WorkloadKey>>,
        deadline: Duration,
        now: Instant,
    ) -> Self {
        let state = match waves.is_empty() {
            true => State::Done,
            false => State::Rolling,
        };
        Self {
            config,
            waves,
            current: 0,
            wave_started: now,
            deadline,
            state,
        }
    }

    pub fn current_wave(&self) -> &[WorkloadKey] {
        self.waves.get(self.current).map_or(&[], Vec::as_slice)
    }

    /// 1-based number of the wave rolling now, and how many there are.
    pub fn progress(&self) -> (usize, usize) {
        (self.current + 1, self.waves.len())
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// When the current wave's deadline passes.
    pub fn deadline_at(&self) -> Instant {
        self.wave_started + self.deadline
    }

    /// Takes the health of the current wave's workloads (in any order; a workload missing from
    /// `health` counts as not healthy yet, one that is gone counts as healthy: nothing to wait for).
    pub fn observe(&mut self, health: &[(WorkloadKey, Health)], now: Instant) -> Step {
        if self.state != State::Rolling {
            return Step::Wait;
        }
        let mut waiting: Option<String> = None;
        for key in self.current_wave() {
            match health.iter().find(|(k, _)| k == key).map(|(_, h)| h) {
                Some(Health::Healthy) => {}
                Some(Health::Failed(reason)) => {
                    let reason = format!("{} {reason}", describe(key));
                    return self.halt(reason);
                }
                Some(Health::Progressing(why)) => {
                    waiting.get_or_insert_with(|| format!("{}: {why}", describe(key)));
                }
                None => {
                    waiting.get_or_insert_with(|| format!("{}: not read yet", describe(key)));
                }
            }
        }
        match waiting {
            Some(why) if now >= self.deadline_at() => {
                let after = crate::go_values::format_go_duration(self.deadline);
                self.halt(format!("not healthy after {after}: {why}"))
            }
            Some(_) => Step::Wait,
            None => self.advance(now),
        }
    }

    fn advance(&mut self, now: Instant) -> Step {
        self.current += 1;
        self.wave_started = now;
        match self.waves.get(self.current) {
            Some(next) => Step::Next(next.clone()),
            None => {
                self.state = State::Done;
                Step::Done
            }
        }
    }

    fn halt(&mut self, reason: String) -> Step {
        let halt = Halt {
            config: self.config.clone(),
            wave: self.current + 1,
            waves: self.waves.len(),
            reason,
            held: self.waves[self.current + 1..].concat(),
        };
        self.state = State::Halted(halt.clone());
        Step::Halt(halt)
    }
}

/// `deployment/web` (namespace left out: a change's waves are read per config, and a config
/// belongs to one namespace).
pub fn describe(key: &WorkloadKey) -> String {
    format!("{}/{}", key.kind.as_str().to_lowercase(), key.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConfigKind, WorkloadKind};

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey::new(WorkloadKind::Deployment, "ns", name)
    }

    fn sequence(now: Instant) -> Sequence {
        let waves = vec![vec![key("a")], vec![key("b"), key("c")], vec![key("d")]];
        let config = ConfigKey::new(ConfigKind::ConfigMap, "ns", "shared");
        Sequence::start(config, waves, Duration::from_secs(60), now)
    }

    fn healthy(names: &[&str]) -> Vec<(WorkloadKey, Health)> {
        names.iter().map(|n| (key(n), Health::Healthy)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn each_wave_starts_only_when_the_one_before_is_healthy() {
        let mut s = sequence(Instant::now());
        assert_eq!(s.current_wave(), [key("a")]);
        let rolling = vec![(key("a"), Health::Progressing("1 of 2 updated".into()))];
        assert_eq!(s.observe(&rolling, Instant::now()), Step::Wait);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            s.observe(&healthy(&["a"]), Instant::now()),
            Step::Next(vec![key("b"), key("c")])
        );
        assert_eq!(s.progress(), (2, 3));
        // One of the wave is healthy, the other not read yet: wait.
        assert_eq!(s.observe(&healthy(&["b"]), Instant::now()), Step::Wait);
        assert_eq!(
            s.observe(&healthy(&["c", "b"]), Instant::now()),
            Step::Next(vec![key("d")])
        );
        assert_eq!(s.observe(&healthy(&["d"]), Instant::now()), Step::Done);
        assert_eq!(s.state(), &State::Done);
        assert_eq!(
            s.observe(&healthy(&["d"]), Instant::now()),
            Step::Wait,
            "done stays done"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_workload_halts_at_once_and_holds_the_later_waves() {
        let mut s = sequence(Instant::now());
        s.observe(&healthy(&["a"]), Instant::now());
        let failing = vec![
            (key("b"), Health::Healthy),
            (key("c"), Health::Failed("ProgressDeadlineExceeded".into())),
        ];
        let Step::Halt(halt) = s.observe(&failing, Instant::now()) else {
            panic!("expected a halt");
        };
        assert_eq!((halt.wave, halt.waves), (2, 3));
        assert_eq!(halt.held, [key("d")]);
        assert_eq!(
            halt.to_string(),
            "wave 2 of 3 of the change of configmap/shared failed: deployment/c \
             ProgressDeadlineExceeded; 1 workloads held"
        );
        assert!(matches!(s.state(), State::Halted(_)));
        assert_eq!(
            s.observe(&healthy(&["b", "c"]), Instant::now()),
            Step::Wait,
            "a halt stays"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wave_not_healthy_by_its_deadline_halts_and_says_what_it_waited_for() {
        let mut s = sequence(Instant::now());
        let slow = vec![(key("a"), Health::Progressing("0 of 2 updated".into()))];
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(s.observe(&slow, Instant::now()), Step::Wait);
        tokio::time::advance(Duration::from_secs(1)).await;
        let Step::Halt(halt) = s.observe(&slow, Instant::now()) else {
            panic!("expected a halt at the deadline");
        };
        assert_eq!(halt.wave, 1);
        assert_eq!(
            halt.reason,
            "not healthy after 1m0s: deployment/a: 0 of 2 updated"
        );
        assert_eq!(halt.held, [key("b"), key("c"), key("d")]);
    }

    #[tokio::test(start_paused = true)]
    async fn each_wave_has_a_deadline_of_its_own() {
        let mut s = sequence(Instant::now());
        tokio::time::advance(Duration::from_secs(50)).await;
        s.observe(&healthy(&["a"]), Instant::now());
        tokio::time::advance(Duration::from_secs(50)).await;
        let slow = vec![
            (key("b"), Health::Healthy),
            (key("c"), Health::Progressing("x".into())),
        ];
        assert_eq!(
            s.observe(&slow, Instant::now()),
            Step::Wait,
            "100 s in, 50 s into wave 2"
        );
    }
}
