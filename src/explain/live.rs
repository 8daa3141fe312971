//! `/debug/explain`: the same verdicts, answered by the running controller from its live index,
//! with which replica owns the namespace and the workload's state in the write queue.

use std::sync::Arc;

use serde::Serialize;

use crate::access::AccessPlan;
use crate::config::Settings;
use crate::index::ReverseIndex;
use crate::model::{ConfigKind, WorkloadKey, WorkloadKind};
use crate::rollout::{QueueObserver, ReloadQueue, WorkloadWriter};
use crate::shard::Ownership;

use super::report::{ConfigSeen, ExplainContext, Explanation, NamespaceFacts, explain};

/// A workload's state in the write queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum QueueState {
    /// Nothing queued for it.
    Idle,
    /// Changes wait for their write.
    Pending,
    /// A write is in flight.
    InFlight,
    /// The last write failed; retried at `until` (RFC 3339).
    Backoff { until: String, last_error: String },
    /// Held (minimum reload interval, pause) until `until` (RFC 3339).
    Held { until: String },
    /// A write done in steps (a restart by eviction): the last step made, the next at `next`.
    InProgress { step: String, next: String },
}

/// Where the queue state comes from: today the queue's pending / in-flight sets; the queue's
/// fuller `inspect` (backoff and holds) plugs in here without touching this module.
pub trait QueueInspect: Send + Sync + 'static {
    fn queue_state(&self, key: &WorkloadKey) -> QueueState;
}

impl<F> QueueInspect for F
where
    F: Fn(&WorkloadKey) -> QueueState + Send + Sync + 'static,
{
    fn queue_state(&self, key: &WorkloadKey) -> QueueState {
        self(key)
    }
}

/// When a workload may be reloaded, and what waits for it (`reload_windows`), as the engine
/// has it: the workload's own window and delay, else its namespace's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimingReport {
    pub window: Option<String>,
    /// Whether the window is open now (true without one).
    pub open_now: bool,
    pub delay: Option<String>,
    /// The configs whose changes wait, and when the workload rolls (RFC 3339).
    pub held: Vec<String>,
    pub due: Option<String>,
}

/// Where a workload's timing comes from (the engine).
pub trait TimingInspect: Send + Sync + 'static {
    fn timing(&self, key: &WorkloadKey) -> Option<TimingReport>;
}

impl<F> TimingInspect for F
where
    F: Fn(&WorkloadKey) -> Option<TimingReport> + Send + Sync + 'static,
{
    fn timing(&self, key: &WorkloadKey) -> Option<TimingReport> {
        self(key)
    }
}

/// The report of `timing` and what `held` keeps (`None` when reloads run at any time and
/// nothing waits).
pub fn timing_report(
    timing: &crate::reload_policy::ReloadTiming,
    held: Option<(Vec<crate::model::ConfigKey>, jiff::Timestamp)>,
) -> Option<TimingReport> {
    if timing.is_any_time() && held.is_none() {
        return None;
    }
    let (held, due) = match held {
        Some((configs, due)) => (
            configs
                .iter()
                .map(|c| format!("{}/{}", c.kind.as_str(), c.name))
                .collect(),
            Some(due.to_string()),
        ),
        None => (Vec::new(), None),
    };
    Some(TimingReport {
        window: timing.window.as_ref().map(|w| w.to_string()),
        open_now: timing
            .window
            .as_ref()
            .is_none_or(|w| w.is_open(jiff::Timestamp::now())),
        delay: timing.delay.map(crate::go_values::format_go_duration),
        held,
        due,
    })
}

/// Which replica acts on the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardReport {
    /// This replica (POD_NAME), when sharding or HA is on.
    pub me: Option<String>,
    /// The namespace's owner in the current assignment (`None`: no assignment yet, or a single
    /// unsharded replica, which owns everything it selects).
    pub owner: Option<String>,
    /// This replica acts on the namespace now.
    pub owned_here: bool,
    /// Not ignored and selected by the namespace selector.
    pub selected: bool,
    /// The API server sends this replica only its namespaces (`--server-side-sharding`); false:
    /// every object arrives and this replica keeps its own.
    pub server_side: bool,
    /// The shard selector sent with cluster-wide lists and watches, in ranges (0: none).
    pub selector_ranges: usize,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveAnswer {
    /// The workload is in this replica's index.
    pub indexed: bool,
    pub shard: ShardReport,
    pub queue: QueueState,
    /// A Deployment paused by kube-reloader (pause period): when it is resumed (RFC 3339).
    pub paused_until: Option<String>,
    /// Its maintenance window and delay, and the reloads they hold (`None`: any time).
    pub timing: Option<TimingReport>,
    /// The verdicts, when indexed (no container names or annotation sources: the index keeps
    /// neither the pod spec nor the raw annotations; `kube-reloader explain` shows them).
    pub explanation: Option<Explanation>,
    pub access: AccessReport,
    /// The CRD-backed kinds the settings turn on, and whether the cluster serves each (one not
    /// served is skipped until its CRD is installed).
    pub optional_apis: Vec<OptionalApiReport>,
    /// The format each watched resource is read in (`--wire-format` and what the server
    /// serves): resource -> `protobuf` or `json`.
    pub wire_formats: std::collections::BTreeMap<&'static str, &'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionalApiReport {
    /// `group/version/resource`.
    pub api: String,
    pub feature: &'static str,
    pub served: bool,
}

/// How this replica works around missing RBAC permissions (empty `fallbacks`: it does not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessReport {
    /// How this workload's kind is found: `watch`, or `list` (RBAC grants no watch, or
    /// `--list-workloads`): listed at start, every resync and before each config change.
    pub workload_source: &'static str,
    /// Each fallback in use: its name, the permissions missing and what it costs.
    pub fallbacks: Vec<FallbackReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FallbackReport {
    pub fallback: String,
    pub missing: Vec<String>,
    pub cost: &'static str,
}

fn access_report(settings: &Settings, plan: &AccessPlan, kind: WorkloadKind) -> AccessReport {
    let fallbacks = plan
        .active_fallbacks()
        .into_iter()
        .map(|f| FallbackReport {
            fallback: f.metric_label(),
            missing: plan.missing_for(f),
            cost: f.cost(),
        })
        .collect();
    let listed = settings.listed_workload_kinds().contains(&kind);
    AccessReport {
        workload_source: if listed { "list" } else { "watch" },
        fallbacks,
    }
}

/// Answers `/debug/explain` from the controller's own state.
pub struct LiveExplainer {
    pub index: Arc<ReverseIndex>,
    pub ownership: Arc<Ownership>,
    pub settings: Arc<Settings>,
    /// What the access review at start found (fallbacks and the rules they stand in for).
    pub access: AccessPlan,
    /// Used Secrets of an ignored type (never indexed): the verdict for them is no, as for the
    /// controller, which never sees them.
    pub ignored_secrets: crate::watch::IgnoredSecretTypes,
    pub queue: Box<dyn QueueInspect>,
    pub timing: Box<dyn TimingInspect>,
    /// The churn breaker, with `--churn-limit`.
    pub breaker: Option<Arc<crate::engine::ChurnBreaker>>,
    /// The changes rolled in waves, with their halts.
    pub waves: Option<Arc<crate::rollout::wave_runner::WaveRunner>>,
    /// Which optional APIs the cluster serves, as the watches last checked.
    pub served: crate::watch::ServedApis,
    /// The format each watch reads.
    pub wire_formats: crate::watch::WireFormats,
}

/// Parses `kind` as the Kubernetes kind, case-insensitively, or its plural.
pub fn parse_workload_kind(kind: &str) -> Option<WorkloadKind> {
    let lower = kind.to_ascii_lowercase();
    WorkloadKind::all().into_iter().find(|k| {
        let name = k.as_str().to_ascii_lowercase();
        let plural = crate::resources::api_resource(*k).plural;
        lower == name || lower == format!("{name}s") || lower == plural
    })
}

impl LiveExplainer {
    /// What holds the workloads of `key` (a halted change, the churn breaker), in words.
    fn held(&self, key: &crate::model::ConfigKey) -> Option<String> {
        self.halted(key).or_else(|| self.breaker_held(key))
    }

    /// The halted change of `key`, in words.
    fn halted(&self, key: &crate::model::ConfigKey) -> Option<String> {
        use crate::rollout::wave_runner::WaveStatus;
        let WaveStatus::Halted { halt, at } = self.waves.as_ref()?.status(key)? else {
            return None;
        };
        Some(format!(
            "reload halted: wave {} of {} of the change of {}/{} at {at} failed: {}; {} \
             workloads held until `kube-reloader resume {}/{} -n {}` or a new change",
            halt.wave,
            halt.waves,
            key.kind.as_str(),
            key.name,
            halt.reason,
            halt.held.len(),
            key.kind.as_str(),
            key.name,
            key.namespace
        ))
    }

    /// What the churn breaker holds for `key`, in words.
    fn breaker_held(&self, key: &crate::model::ConfigKey) -> Option<String> {
        let breaker = self.breaker.as_ref()?;
        let held = breaker.held(key)?;
        let quiet = breaker.settings().quiet;
        let ago = |t: tokio::time::Instant| t.elapsed().as_secs();
        let release_in = held
            .releases_at(quiet)
            .saturating_duration_since(tokio::time::Instant::now());
        Some(format!(
            "churn breaker open for {}s ({} changes held, the last {}s ago): its workloads roll \
             once to its latest value when it has not changed for {} (in {}s if it stays so)",
            ago(held.opened),
            held.held_changes,
            ago(held.last_change),
            crate::go_values::format_go_duration(quiet),
            release_in.as_secs()
        ))
    }

    fn shard(&self, namespace: &str) -> ShardReport {
        let shard = self.ownership.shard();
        ShardReport {
            me: shard.map(|s| s.me.clone()),
            owner: shard.and_then(|s| {
                let view = s.view();
                view.current
                    .as_ref()
                    .and_then(|a| a.owner(namespace).map(String::from))
            }),
            owned_here: self.ownership.owns(namespace),
            selected: self.ownership.selects(namespace),
            server_side: shard.is_some_and(|s| s.server_sharding()),
            selector_ranges: shard
                .and_then(|s| s.selector())
                .map_or(0, |s| s.matches("shardRange(").count()),
        }
    }

    fn namespace_facts(&self, namespace: &str) -> NamespaceFacts {
        let mut facts = NamespaceFacts {
            selected: self.ownership.selects(namespace),
            ..Default::default()
        };
        for entry in self.ignored_secrets.iter() {
            if &*entry.key().namespace == namespace {
                facts
                    .unwatched_secret_types
                    .insert(entry.key().name.to_string(), entry.value().clone());
            }
        }
        for kind in ConfigKind::ALL {
            for key in self.index.config_keys(kind, Some(namespace)) {
                let Some(state) = self.index.config(&key) else {
                    continue;
                };
                facts.configs.insert(
                    (kind, key.name.to_string()),
                    ConfigSeen {
                        ignore: state.ignore,
                        matched: state.matched,
                        // Only configs the label selector selects reach the index.
                        selected: true,
                        hash: Some(state.digest.reloader_hash()),
                        held: self.held(&key),
                        keys: state.keys,
                    },
                );
            }
        }
        facts
    }

    /// The answer for one workload; `only`: for that config alone (listed or not).
    pub fn answer(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        only: Option<(ConfigKind, &str)>,
    ) -> LiveAnswer {
        let key = WorkloadKey::new(kind, namespace, name);
        let entry = self.index.workload(&key);
        let ns = self.namespace_facts(namespace);
        let no_recorded = |_: ConfigKind, _: &str| None;
        let explanation = entry.as_ref().map(|entry| {
            let ctx = ExplainContext {
                settings: &self.settings,
                namespace: &ns,
                spec: None,
                recorded: &no_recorded,
            };
            explain(&ctx, entry, Vec::new(), only)
        });
        let paused_until = entry.as_ref().and_then(|e| {
            let period = i64::try_from(e.policy.pause_period?.as_secs()).ok()?;
            let until = jiff::Timestamp::from_second(e.paused_at?.checked_add(period)?).ok()?;
            Some(until.to_string())
        });
        LiveAnswer {
            indexed: entry.is_some(),
            paused_until,
            timing: self.timing.timing(&key),
            shard: self.shard(namespace),
            queue: self.queue.queue_state(&key),
            explanation,
            access: access_report(&self.settings, &self.access, kind),
            optional_apis: self
                .served
                .snapshot()
                .into_iter()
                .map(|(api, served)| OptionalApiReport {
                    api: api.label(),
                    feature: api.feature,
                    served,
                })
                .collect(),
            wire_formats: self.wire_formats.snapshot().into_iter().collect(),
        }
    }
}

/// The write queue as a [`QueueInspect`]: its [`ReloadQueue::inspect`] in the endpoint's words,
/// with the scheduler's relative times turned into wall-clock instants.
pub fn queue_inspector<W, O>(queue: ReloadQueue<W, O>) -> impl QueueInspect
where
    W: WorkloadWriter,
    O: QueueObserver,
{
    move |key: &WorkloadKey| queue_state(queue.inspect(key))
}

fn queue_state(state: Option<crate::rollout::WorkloadQueueState>) -> QueueState {
    let Some(state) = state else {
        return QueueState::Idle;
    };
    let at = |seconds: f64| {
        let offset = jiff::SignedDuration::try_from_secs_f64(seconds).unwrap_or_default();
        jiff::Timestamp::now()
            .checked_add(offset)
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_string()
    };
    if state.in_flight {
        return QueueState::InFlight;
    }
    if let Some(retry_in) = state.backoff_retry_in_seconds {
        return QueueState::Backoff {
            until: at(retry_in),
            last_error: state.last_error.unwrap_or_default(),
        };
    }
    if let (Some(step), Some(next)) = (&state.progress, state.next_step_in_seconds) {
        return QueueState::InProgress {
            step: step.clone(),
            next: at(next),
        };
    }
    match state
        .min_interval_hold_in_seconds
        .or(state.handover_hold_in_seconds)
    {
        Some(hold) => QueueState::Held { until: at(hold) },
        None => QueueState::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AnnotationKeys, Flags};
    use crate::index::{ConfigState, workload_entry};
    use crate::model::ConfigKey;
    use crate::reloader_format::hash::{ConfigPayload, digest_payload};
    use clap::Parser;
    use serde_json::json;

    fn explainer(queue: QueueState) -> LiveExplainer {
        let index = Arc::new(ReverseIndex::new());
        let obj = json!({
            "metadata": {"name": "web", "namespace": "ns",
                         "annotations": {"reloader.stakater.com/auto": "true"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}]}
            ]}}}
        });
        index.apply_workload(
            workload_entry(WorkloadKind::Deployment, &obj, &AnnotationKeys::default()).unwrap(),
        );
        let digest = digest_payload(ConfigPayload::ConfigMap {
            data: [("k".to_string(), "v".to_string())].into(),
            binary_data: Default::default(),
        });
        index.apply_config(
            ConfigKey::new(ConfigKind::ConfigMap, "ns", "cfg"),
            ConfigState {
                keys: Default::default(),
                digest,
                ignore: true,
                matched: false,
                resource_version: 1,
                waves: None,
            },
        );
        let flags = Flags::try_parse_from(["kube-reloader", "--namespaces-to-ignore=other"]);
        LiveExplainer {
            index,
            ownership: Arc::new(Ownership::new(["other".to_string()], false)),
            settings: Arc::new(Settings::try_from(flags.unwrap()).unwrap()),
            access: AccessPlan::default(),
            ignored_secrets: Default::default(),
            queue: Box::new(move |_: &WorkloadKey| queue.clone()),
            timing: Box::new(|_: &WorkloadKey| None),
            breaker: None,
            waves: None,
            served: Default::default(),
            wire_formats: Default::default(),
        }
    }

    #[test]
    fn answers_from_the_index_with_shard_and_queue_state() {
        let live = explainer(QueueState::Pending);
        let a = live.answer(WorkloadKind::Deployment, "ns", "web", None);
        assert!(a.indexed && a.shard.owned_here && a.shard.selected);
        assert_eq!(a.shard.owner, None, "unsharded");
        assert_eq!(a.queue, QueueState::Pending);
        let e = a.explanation.unwrap();
        assert_eq!(e.configs.len(), 1);
        assert_eq!(
            (e.configs[0].reload, e.configs[0].reason),
            (false, "config_ignored")
        );
        assert_eq!(
            e.configs[0].hash_state,
            super::super::report::HashState::NeverReloaded
        );
        let a = live.answer(WorkloadKind::Deployment, "other", "web", None);
        assert!(!a.indexed && !a.shard.selected && a.explanation.is_none());
        assert_eq!(
            parse_workload_kind("statefulsets"),
            Some(WorkloadKind::StatefulSet)
        );
        assert_eq!(parse_workload_kind("pods"), Some(WorkloadKind::Pod));
        assert_eq!(parse_workload_kind("ReplicaSet"), None);
    }

    #[test]
    fn a_used_secret_of_an_ignored_type_says_no_as_the_controller_does() {
        let live = explainer(QueueState::Idle);
        let obj = json!({
            "metadata": {"name": "api", "namespace": "ns",
                         "annotations": {"reloader.stakater.com/auto": "true"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "envFrom": [{"secretRef": {"name": "release"}}]}
            ]}}}
        });
        let entry = workload_entry(WorkloadKind::Deployment, &obj, &AnnotationKeys::default());
        live.index.apply_workload(entry.unwrap());
        let key = ConfigKey::new(ConfigKind::Secret, "ns", "release");
        let only = Some((ConfigKind::Secret, "release"));
        let before = live.answer(WorkloadKind::Deployment, "ns", "api", only);
        assert!(
            before.explanation.unwrap().configs[0].reload,
            "not known to be ignored yet"
        );
        live.ignored_secrets
            .insert(key, "helm.sh/release.v1".to_string());
        let after = live.answer(WorkloadKind::Deployment, "ns", "api", only);
        let verdict = &after.explanation.unwrap().configs[0];
        assert_eq!(
            (verdict.reload, verdict.reason),
            (false, "secret_type_ignored")
        );
    }

    #[test]
    fn reports_how_workloads_are_found_and_each_fallback_with_its_rules() {
        let mut live = explainer(QueueState::Idle);
        let a = live.answer(WorkloadKind::Deployment, "ns", "web", None);
        assert_eq!(a.access.workload_source, "watch");
        assert!(a.access.fallbacks.is_empty());
        let mut settings = (*live.settings).clone();
        let requirements = crate::access::requirements(&settings, None);
        live.access = crate::access::plan(&requirements, |r| {
            !(r.resource == "deployments" && r.verb == "watch")
        });
        settings.rbac_listed_kinds = live.access.listed_kinds();
        live.settings = Arc::new(settings);
        let a = live.answer(WorkloadKind::Deployment, "ns", "web", None);
        assert_eq!(a.access.workload_source, "list");
        assert_eq!(a.access.fallbacks.len(), 1);
        assert_eq!(a.access.fallbacks[0].fallback, "list-deployment");
        assert_eq!(
            a.access.fallbacks[0].missing,
            vec!["watch deployments.apps in all namespaces".to_string()]
        );
        let sts = live.answer(WorkloadKind::StatefulSet, "ns", "web", None);
        assert_eq!(sts.access.workload_source, "watch");
    }
}
