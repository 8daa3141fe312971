//! Prometheus metrics: Reloader's names and labels (existing alerts and dashboards keep working)
//! plus kube-reloader's own (end-to-end latency, queue, limiter, index sizes, watch restarts).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::engine::ConfigObserver;
use crate::index::ReverseIndex;
use crate::model::{ConfigKey, WorkloadKey};
use crate::rollout::{QueueObserver, QueueStats, QueuedChange, WriteError, WriteOutcome};
use crate::watch::WatchObserver;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Success {
    success: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SuccessNamespace {
    success: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindResult {
    workload_kind: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadKindLabel {
    workload_kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabel {
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

/// A reload latency sample's exemplar: the trace of the config change it measures, so a
/// dashboard goes from a slow bucket to the trace that shows where the time went.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceLabel {
    trace_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
    kind: String,
}

/// `group/version/resource` of an optional API.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabel {
    api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WireFormatLabels {
    resource: String,
    format: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabel {
    fallback: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiRequestLabels {
    verb: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event_type: String,
    resource_type: String,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ]
    .into_iter()
}

pub struct Metrics {
    registry: Registry,
    count_by_namespace: bool,
    reloaded: Family<Success, Counter>,
    reloaded_by_namespace: Family<SuccessNamespace, Counter>,
    action_total: Family<KindResult, Counter>,
    action_latency: Family<WorkloadKindLabel, Histogram>,
    skipped: Family<Reason, Counter>,
    errors: Family<TypeLabel, Counter>,
    retries: Counter,
    events_received: Family<EventLabels, Counter>,
    queue_depth: Gauge,
    queue_adds: Counter,
    coalesced: Counter,
    limiter_wait: Histogram,
    queue_wait: Histogram,
    queue_tenants: Gauge,
    queue_in_backoff: Gauge,
    write_slots: Gauge,
    events_dropped: Counter,
    reload_latency: HistogramWithExemplars<TraceLabel>,
    watch_restarts: Family<ResourceLabel, Counter>,
    backfill_list_failures: Family<ResourceLabel, Counter>,
    catch_ups: Family<ResultLabel, Counter>,
    catch_up_changes: Counter,
    backfill_duration: Family<StageLabel, Histogram>,
    wave_sequences: Family<ResultLabel, Counter>,
    wave_held: Counter,
    index_configs: Gauge,
    index_workloads: Gauge,
    index_edges: Gauge,
    owned_namespaces: Gauge,
    selected_namespaces: Gauge,
    ready: Gauge,
    access_fallbacks: Family<FallbackLabel, Gauge>,
    api_requests: Family<ApiRequestLabels, Counter>,
    api_received_bytes: Family<ResourceLabel, Counter>,
    reconcile_total: Family<ResultLabel, Counter>,
    reconcile_duration: Family<ResultLabel, Histogram>,
    workloads_matched: Family<KindLabel, Counter>,
    breaker_trips: Counter,
    breakers_open: Gauge,
    server_side_sharding: Gauge,
    breaker_held_changes: Counter,
    api_served: Family<ApiLabel, Gauge>,
    wire_format: Family<WireFormatLabels, Gauge>,
    shadow_verdicts: Family<VerdictLabel, Counter>,
}

impl Metrics {
    /// One shadow verdict (`kube_reloader_shadow_verdicts_total`).
    pub fn shadow_verdict(
        &self,
        verdict: crate::shadow::judge::Verdict,
        kind: crate::model::WorkloadKind,
    ) {
        self.shadow_verdicts
            .get_or_create(&VerdictLabel {
                verdict: verdict.as_str().into(),
                kind: kind.as_str().into(),
            })
            .inc();
    }

    pub fn new(count_by_namespace: bool) -> Arc<Self> {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            count_by_namespace,
            reloaded: Family::default(),
            reloaded_by_namespace: Family::default(),
            action_total: Family::default(),
            action_latency: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            skipped: Family::default(),
            errors: Family::default(),
            retries: Counter::default(),
            events_received: Family::default(),
            queue_depth: Gauge::default(),
            queue_adds: Counter::default(),
            coalesced: Counter::default(),
            limiter_wait: Histogram::new([0.0, 0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
            queue_wait: Histogram::new(latency_buckets()),
            queue_tenants: Gauge::default(),
            queue_in_backoff: Gauge::default(),
            write_slots: Gauge::default(),
            events_dropped: Counter::default(),
            reload_latency: HistogramWithExemplars::new(latency_buckets()),
            watch_restarts: Family::default(),
            backfill_list_failures: Family::default(),
            catch_ups: Family::default(),
            catch_up_changes: Counter::default(),
            backfill_duration: Family::new_with_constructor(|| {
                Histogram::new([0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0])
            }),
            wave_sequences: Family::default(),
            wave_held: Counter::default(),
            index_configs: Gauge::default(),
            index_workloads: Gauge::default(),
            index_edges: Gauge::default(),
            owned_namespaces: Gauge::default(),
            selected_namespaces: Gauge::default(),
            ready: Gauge::default(),
            access_fallbacks: Family::default(),
            api_requests: Family::default(),
            api_received_bytes: Family::default(),
            reconcile_total: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new([0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0])
            }),
            workloads_matched: Family::default(),
            breaker_trips: Counter::default(),
            breakers_open: Gauge::default(),
            server_side_sharding: Gauge::default(),
            breaker_held_changes: Counter::default(),
            api_served: Family::default(),
            wire_format: Family::default(),
            shadow_verdicts: Family::default(),
        };
        m.create_series();
        m.register_reloader_metrics(&mut registry);
        m.register_own_metrics(&mut registry);
        Arc::new(Metrics { registry, ..m })
    }

    /// Series exist from the start (Reloader does this for success="true|false"), so rate()
    /// and dashboards work before the first event of each kind.
    fn create_series(&self) {
        for t in ["conflict", "transient", "permanent"] {
            let _ = self.errors.get_or_create(&TypeLabel { r#type: t.into() });
        }
        for r in [
            "ignored_workload_type",
            "config_ignored",
            "excluded",
            "not_referenced",
            "not_opted_in",
            "keys_unchanged",
            "already_current",
        ] {
            let _ = self.skipped.get_or_create(&Reason { reason: r.into() });
        }
        for r in [
            "configmap",
            "secret",
            "secretproviderclasspodstatus",
            "namespace",
        ]
        .into_iter()
        .chain(
            crate::model::WorkloadKind::all()
                .into_iter()
                .map(|k| k.as_str()),
        ) {
            let _ = self
                .watch_restarts
                .get_or_create(&ResourceLabel { resource: r.into() });
        }
        for r in ["queued", "no_match"] {
            let _ = self
                .reconcile_total
                .get_or_create(&ResultLabel { result: r.into() });
        }
        for s in ["true", "false"] {
            let _ = self.reloaded.get_or_create(&Success { success: s.into() });
        }
    }

    /// Reloader's metric names, with Reloader's meaning.
    fn register_reloader_metrics(&self, registry: &mut Registry) {
        let reloader = registry.sub_registry_with_prefix("reloader");
        reloader.register(
            "reload_executed",
            "Counter of reloads executed by Reloader.",
            self.reloaded.clone(),
        );
        if self.count_by_namespace {
            reloader.register(
                "reload_executed_total_by_namespace",
                "Counter of reloads executed by Reloader by namespace.",
                self.reloaded_by_namespace.clone(),
            );
        }
        reloader.register(
            "action",
            "Total number of reload actions by workload kind and result.",
            self.action_total.clone(),
        );
        reloader.register(
            "action_latency_seconds",
            "Time from event received to action applied in seconds.",
            self.action_latency.clone(),
        );
        reloader.register(
            "skipped",
            "Total number of skipped operations by reason.",
            self.skipped.clone(),
        );
        reloader.register(
            "errors",
            "Total number of errors by type.",
            self.errors.clone(),
        );
        reloader.register(
            "retries",
            "Total number of retry attempts.",
            self.retries.clone(),
        );
        reloader.register(
            "events_received",
            "Total number of events received by type and resource.",
            self.events_received.clone(),
        );
        reloader.register(
            "workqueue_depth",
            "Current depth of the work queue.",
            self.queue_depth.clone(),
        );
        reloader.register(
            "workqueue_adds",
            "Total number of items added to the work queue.",
            self.queue_adds.clone(),
        );
        reloader.register(
            "reconcile",
            "Total number of reconcile/handler invocations by result.",
            self.reconcile_total.clone(),
        );
        reloader.register(
            "reconcile_duration_seconds",
            "Time spent in reconcile/handler in seconds.",
            self.reconcile_duration.clone(),
        );
        reloader.register(
            "workloads_matched",
            "Total number of workloads matched for reload by config kind.",
            self.workloads_matched.clone(),
        );
    }

    /// kube-reloader's own metrics (queue, index, sharding, API requests).
    fn register_own_metrics(&self, registry: &mut Registry) {
        let own = registry.sub_registry_with_prefix("kube_reloader");
        self.register_write_metrics(own);
        self.register_state_metrics(own);
    }

    /// How writes went: the queue, the limiter, latency, and the access fallbacks.
    fn register_write_metrics(&self, own: &mut Registry) {
        own.register(
            "access_fallback",
            "1 for each fallback RBAC made necessary at start (list-<kind>: workloads found by LIST, not watched; core-events; leader-lock-only; meta-info-by-update); none: every preferred permission is granted.",
            self.access_fallbacks.clone(),
        );
        own.register(
            "reloads_coalesced",
            "Changes merged into a write already pending for the same workload.",
            self.coalesced.clone(),
        );
        own.register(
            "rate_limiter_wait_seconds",
            "Time a write waited for the patch rate limiter.",
            self.limiter_wait.clone(),
        );
        own.register(
            "queue_wait_seconds",
            "Time a write waited, ready, in its tenant's queue (backoff and holds not counted).",
            self.queue_wait.clone(),
        );
        own.register(
            "queue_tenants",
            "Tenants with at least one write pending or in flight.",
            self.queue_tenants.clone(),
        );
        own.register(
            "queue_writes_in_backoff",
            "Writes that failed and wait out a backoff before their retry.",
            self.queue_in_backoff.clone(),
        );
        own.register(
            "write_slots",
            "Writes that may be in flight at once: 32, more while the API server answers slowly.",
            self.write_slots.clone(),
        );
        own.register(
            "events_dropped",
            "Reloaded Events dropped because 1,000 were already waiting to be sent (a slow API server).",
            self.events_dropped.clone(),
        );
        own.register(
            "reload_latency_seconds",
            "End-to-end reload latency: config change observed to write acknowledged.",
            self.reload_latency.clone(),
        );
        self.register_breaker_metrics(own);
    }

    /// The churn breaker (`--churn-limit`).
    fn register_breaker_metrics(&self, own: &mut Registry) {
        own.register(
            "churn_breaker_trips",
            "Times a config changed more than --churn-limit times within --churn-window, holding its workloads.",
            self.breaker_trips.clone(),
        );
        own.register(
            "churn_breakers_open",
            "Configs whose workloads the churn breaker holds now.",
            self.breakers_open.clone(),
        );
        own.register(
            "shard_server_side",
            "1 when the API server sends this replica only its namespaces (sharded list and \
             watch), 0 when every object arrives and is filtered here.",
            self.server_side_sharding.clone(),
        );
        own.register(
            "churn_breaker_held_changes",
            "Config changes that rolled nothing because the churn breaker was open.",
            self.breaker_held_changes.clone(),
        );
    }

    /// What the controller holds and watches: watches, the index, namespaces, readiness, and
    /// the requests it sends.
    fn register_state_metrics(&self, own: &mut Registry) {
        own.register(
            "shadow_verdicts",
            "Shadow mode (--shadow): the incumbent's writes judged against kube-reloader's \
             predictions, by verdict (agree, late, differ, not-done, unpredicted) and workload kind.",
            self.shadow_verdicts.clone(),
        );
        own.register(
            "optional_api_served",
            "1 when the API of a CRD-backed kind a flag turns on (CSI, Argo Rollouts, \
             DeploymentConfigs, a --custom-kind) is served, 0 while it is not (its watch waits for it).",
            self.api_served.clone(),
        );
        own.register(
            "wire_format",
            "1 for the format each watched resource is read in (protobuf or json), 0 for the \
             other (--wire-format; auto reads JSON where the server does not serve protobuf).",
            self.wire_format.clone(),
        );
        own.register(
            "watch_restarts",
            "Watch streams that failed and were restarted, by resource.",
            self.watch_restarts.clone(),
        );
        own.register(
            "backfill_list_failures",
            "LISTs of a shard handover or namespace backfill that failed and were retried, by \
             resource (the namespaces count as synced only once they succeed).",
            self.backfill_list_failures.clone(),
        );
        own.register(
            "catch_ups",
            "Catch-ups of changes nobody acted on (after a takeover from a replica that left, or \
             a restart), per config kind, by result: compared (listed at the version the \
             previous owner had acted up to), compacted (that history was gone: configs newer \
             than it counted as changed), failed (the list kept failing).",
            self.catch_ups.clone(),
        );
        own.register(
            "catch_up_changes",
            "Configs a catch-up found changed while nobody acted on them (each rolled as a \
             change).",
            self.catch_up_changes.clone(),
        );
        own.register(
            "backfill_duration_seconds",
            "How long each stage of indexing gained namespaces (a shard hand-over, or namespaces \
             entering the selection) took, by stage: workloads and configs (listed; live \
             config changes there wait for both), catch_up (compared with the versions the \
             previous owners acted up to).",
            self.backfill_duration.clone(),
        );
        own.register(
            "wave_sequences",
            "Changes rolled in waves (docs/safe-reloads.md) that ended, by result: completed \
             (every wave healthy), halted (a wave failed: the rest held), released (a halt \
             released by the resume annotation).",
            self.wave_sequences.clone(),
        );
        own.register(
            "wave_held_workloads",
            "Workloads held by halted changes (counted when the halt happens).",
            self.wave_held.clone(),
        );
        own.register(
            "index_configs",
            "Configs held in the reverse index (digests only).",
            self.index_configs.clone(),
        );
        own.register(
            "index_workloads",
            "Workloads held in the reverse index.",
            self.index_workloads.clone(),
        );
        own.register(
            "index_edges",
            "Config-to-workload edges in the reverse index.",
            self.index_edges.clone(),
        );
        own.register(
            "owned_namespaces",
            "Namespaces this replica acts on (with a selector or sharding).",
            self.owned_namespaces.clone(),
        );
        own.register(
            "selected_namespaces",
            "Namespaces selected (namespace selector, ignore list) whatever the shard assignment; \
             with sharding the replicas' owned_namespaces add up to at least this.",
            self.selected_namespaces.clone(),
        );
        own.register(
            "ready",
            "1 once the caches are synced and the controller acts (what /ready answers), else 0.",
            self.ready.clone(),
        );
        own.register(
            "api_requests",
            "Requests sent to the Kubernetes API server, by verb, resource and status code (0: no response).",
            self.api_requests.clone(),
        );
        own.register(
            "api_received_bytes",
            "Response body bytes received from the Kubernetes API server, by resource (watches \
             included, as they stream).",
            self.api_received_bytes.clone(),
        );
    }

    /// The counter of `Reloaded` Events dropped, for the Event sink to count into.
    pub fn events_dropped(&self) -> Counter {
        self.events_dropped.clone()
    }

    /// The fallbacks the access review turned on (set once at start).
    pub fn set_access_fallbacks(&self, fallbacks: impl IntoIterator<Item = String>) {
        for fallback in fallbacks {
            self.access_fallbacks
                .get_or_create(&FallbackLabel { fallback })
                .set(1);
        }
    }

    /// Sets the gauges read from the controller's state at scrape time.
    pub fn set_state(&self, ready: bool, selected_namespaces: Option<usize>) {
        self.ready.set(i64::from(ready));
        if let Some(n) = selected_namespaces {
            self.selected_namespaces.set(n as i64);
        }
    }

    /// Refreshes gauges derived from the index, then renders the text exposition.
    pub fn render(&self, index: &ReverseIndex, owned_namespaces: Option<usize>) -> String {
        let sizes = index.sizes();
        self.index_configs.set(sizes.configs as i64);
        self.index_workloads.set(sizes.workloads as i64);
        self.index_edges.set(sizes.edges as i64);
        if let Some(n) = owned_namespaces {
            self.owned_namespaces.set(n as i64);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }

    fn record_reload(&self, key: &WorkloadKey, success: bool) {
        let s = success.to_string();
        self.reloaded
            .get_or_create(&Success { success: s.clone() })
            .inc();
        if self.count_by_namespace {
            self.reloaded_by_namespace
                .get_or_create(&SuccessNamespace {
                    success: s,
                    namespace: key.namespace.to_string(),
                })
                .inc();
        }
    }
}

impl QueueObserver for Arc<Metrics> {
    fn coalesced(&self, _key: &WorkloadKey) {
        self.coalesced.inc();
    }

    fn limiter_wait(&self, waited: Duration) {
        self.limiter_wait.observe(waited.as_secs_f64());
    }

    fn finished(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        result: &Result<WriteOutcome, WriteError>,
        _attempts: u32,
    ) {
        let kind = key.kind.as_str().to_string();
        let label = match result {
            Ok(WriteOutcome::Reloaded) => "success",
            Ok(WriteOutcome::UpToDate) => "no_change",
            Ok(WriteOutcome::Dropped(_)) => "dropped",
            Ok(WriteOutcome::Predicted) => "predicted",
            Err(_) => "failed",
        };
        self.action_total
            .get_or_create(&KindResult {
                workload_kind: kind.clone(),
                result: label.into(),
            })
            .inc();
        match result {
            Ok(WriteOutcome::Reloaded) => {
                self.record_reload(key, true);
                if let Some(first) = changes.iter().min_by_key(|c| c.observed_at) {
                    let secs = first.observed_at.elapsed().as_secs_f64();
                    let trace = crate::spans::trace_id_of(&first.span)
                        .map(|trace_id| TraceLabel { trace_id });
                    self.reload_latency.observe(secs, trace, None);
                    self.action_latency
                        .get_or_create(&WorkloadKindLabel {
                            workload_kind: kind,
                        })
                        .observe(secs);
                }
            }
            Err(e) => {
                self.record_reload(key, false);
                self.errors
                    .get_or_create(&TypeLabel {
                        r#type: e.metric_label().into(),
                    })
                    .inc();
            }
            Ok(_) => {}
        }
    }

    fn retry(&self, _key: &WorkloadKey, error: &WriteError) {
        self.retries.inc();
        self.errors
            .get_or_create(&TypeLabel {
                r#type: error.metric_label().into(),
            })
            .inc();
    }

    fn failing(
        &self,
        key: &WorkloadKey,
        _changes: &[QueuedChange],
        _error: &WriteError,
        _failures: u32,
    ) {
        // Reloader counts a failed reload once; a write retried for long counts once per
        // reported backoff step (the retries themselves are in reloader_retries_total).
        self.record_reload(key, false);
    }

    fn depth(&self, depth: usize) {
        self.queue_adds.inc();
        self.queue_depth.set(depth as i64);
    }

    fn queue_wait(&self, waited: Duration) {
        self.queue_wait.observe(waited.as_secs_f64());
    }

    fn queue_stats(&self, stats: &QueueStats) {
        self.queue_depth.set(stats.workloads as i64);
        self.queue_tenants.set(stats.tenants as i64);
        self.queue_in_backoff.set(stats.in_backoff as i64);
        self.write_slots.set(stats.slots as i64);
    }
}

impl ConfigObserver for Arc<Metrics> {
    fn config_changed(&self, config: &ConfigKey, affected: usize, took: Duration) {
        // Reloader's reconcile = handling one config event; here it is the fan-out to the queue.
        let result = if affected > 0 { "queued" } else { "no_match" };
        self.reconcile_total
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .observe(took.as_secs_f64());
        self.workloads_matched
            .get_or_create(&KindLabel {
                kind: config.kind.as_str().into(),
            })
            .inc_by(affected as u64);
        self.events_received
            .get_or_create(&EventLabels {
                event_type: "update".into(),
                resource_type: config.kind.as_str().into(),
            })
            .inc();
    }

    fn skipped(&self, _config: &ConfigKey, reason: &'static str) {
        self.skipped
            .get_or_create(&Reason {
                reason: reason.into(),
            })
            .inc();
    }

    fn breaker(&self, notice: &crate::engine::BreakerNotice) {
        use crate::engine::BreakerNotice;
        match notice {
            BreakerNotice::Opened { .. } => {
                self.breaker_trips.inc();
                self.breakers_open.inc();
            }
            BreakerNotice::Released { held, .. } => {
                self.breakers_open.dec();
                self.breaker_held_changes.inc_by(u64::from(*held));
            }
        }
    }
}

impl WatchObserver for Arc<Metrics> {
    fn server_side_sharding(&self, on: bool) {
        self.server_side_sharding.set(i64::from(on));
    }

    fn watch_restarted(&self, resource: &'static str) {
        self.watch_restarts
            .get_or_create(&ResourceLabel {
                resource: resource.into(),
            })
            .inc();
    }

    fn backfill_list_failed(&self, resource: &'static str) {
        self.backfill_list_failures
            .get_or_create(&ResourceLabel {
                resource: resource.into(),
            })
            .inc();
    }

    fn api_served(&self, api: crate::resources::OptionalApi, served: bool) {
        self.api_served
            .get_or_create(&ApiLabel { api: api.label() })
            .set(i64::from(served));
    }

    fn wire_format(&self, resource: &'static str, format: &'static str) {
        for other in ["protobuf", "json"] {
            let labels = WireFormatLabels {
                resource: resource.into(),
                format: other.into(),
            };
            self.wire_format
                .get_or_create(&labels)
                .set(i64::from(other == format));
        }
    }

    fn catch_up(&self, result: &'static str, changed: usize) {
        self.catch_ups
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
        self.catch_up_changes.inc_by(changed as u64);
    }

    fn backfill_stage(&self, stage: &'static str, took: std::time::Duration) {
        self.backfill_duration
            .get_or_create(&StageLabel {
                stage: stage.into(),
            })
            .observe(took.as_secs_f64());
    }
}

impl Metrics {
    /// A change rolled in waves completed, halted or was released.
    pub fn wave_notice(&self, notice: &crate::rollout::wave_runner::WaveNotice) {
        use crate::rollout::wave_runner::WaveNotice;
        let result = match notice {
            WaveNotice::Completed { .. } => "completed",
            WaveNotice::Halted(halt) => {
                self.wave_held.inc_by(halt.held.len() as u64);
                "halted"
            }
            WaveNotice::Released { .. } => "released",
        };
        self.wave_sequences
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }
}

impl crate::telemetry::api_requests::RequestSink for Metrics {
    fn request(&self, verb: &'static str, resource: &str, code: u16) {
        self.api_requests
            .get_or_create(&ApiRequestLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
    }

    fn receiver(&self, resource: &str) -> crate::telemetry::api_requests::ByteCounter {
        let counter = self
            .api_received_bytes
            .get_or_create(&ResourceLabel {
                resource: resource.to_string(),
            })
            .clone();
        Box::new(move |bytes| {
            counter.inc_by(bytes);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloader_names_are_exposed_from_the_start() {
        let m = Metrics::new(true);
        let text = m.render(&ReverseIndex::new(), None);
        assert!(
            text.contains("reloader_reload_executed_total{success=\"true\"} 0"),
            "{text}"
        );
        assert!(text.contains("reloader_reload_executed_total{success=\"false\"} 0"));
        assert!(text.contains("kube_reloader_index_workloads 0"));
        assert!(
            text.contains("reloader_reconcile_total{result=\"queued\"} 0"),
            "{text}"
        );
        assert!(text.contains("kube_reloader_ready 0"), "{text}");
        m.set_state(true, Some(3));
        let text = m.render(&ReverseIndex::new(), None);
        assert!(text.contains("kube_reloader_ready 1"), "{text}");
        assert!(
            text.contains("kube_reloader_selected_namespaces 3"),
            "{text}"
        );
    }
}
