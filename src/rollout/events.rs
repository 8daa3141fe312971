//! Kubernetes Events on workloads, with Reloader's reasons and message texts.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::model::{ConfigKey, WorkloadKey};
use crate::shard::Ownership;

use super::{TurnPriority, WriteLimiter};

/// Publishes each Event as its own object. kube's `Recorder` folds every Event with the same
/// type, reason and object into one series that keeps the first note, so a second reload (another
/// config) or a second bad annotation would show the first one's text: each publish gets a fresh
/// recorder, whose cache is empty.
#[derive(Clone)]
pub struct EventSink {
    client: Client,
    reporter: Reporter,
    gate: Option<EventGate>,
    /// Write core/v1 Events (Reloader's API, all its RBAC grants) instead of events.k8s.io/v1.
    core: bool,
    /// Shadow mode: publish nothing.
    muted: bool,
    backlog: Backlog,
}

/// `Reloaded` Events queued or being sent at most; more are dropped and counted (client-go's
/// event broadcaster keeps 1,000 too).
const BACKLOG: usize = 1_000;
/// `Reloaded` Events sent at once (each an HTTP/1.1 connection while the API server is slow).
const SENDING: usize = 8;

/// A reload's `Reloaded` Event goes out after the write, off its write slot: a slot held for
/// the Event's round trip as well as the GET and the PATCH carried a third fewer writes when
/// every response was late (`super::width`). Bounded, so a slow API server costs dropped
/// Events (counted in `events_dropped_total`, logged), never memory or connections.
#[derive(Clone)]
struct Backlog {
    queued: Arc<Semaphore>,
    sending: Arc<Semaphore>,
    dropped: Counter,
}

impl Default for Backlog {
    fn default() -> Self {
        Self {
            queued: Arc::new(Semaphore::new(BACKLOG)),
            sending: Arc::new(Semaphore::new(SENDING)),
            dropped: Counter::default(),
        }
    }
}

/// Events are writes too: only the replica that owns the namespace and may write (not fenced)
/// publishes them, and they spend the write limiter's budget. A reload's `Reloaded` Event rides
/// on the turn its reload took (as a Job's delete and create share one): `--max-patches-per-second`
/// keeps meaning reloads per second, and a reload never waits twice. Any other Event (a failure
/// reported, a bad annotation) takes a turn of its own, so a storm of them stays bounded.
#[derive(Clone)]
struct EventGate {
    ownership: Arc<Ownership>,
    limiter: WriteLimiter,
}

/// Reloader's success message, plus the trace id when tracing is on.
pub fn reloaded_message(
    config: &ConfigKey,
    workload: &WorkloadKey,
    trace_id: Option<&str>,
) -> String {
    let mut m = format!(
        "Changes detected in '{}' of type '{}' in namespace '{}', Updated '{}' of type '{}' in namespace '{}'",
        config.name,
        config.kind.env_suffix(),
        config.namespace,
        workload.name,
        workload.kind,
        workload.namespace
    );
    if let Some(id) = trace_id {
        m.push_str(&format!(" (trace_id={id})"));
    }
    m
}

/// Reloader's failure message.
pub fn failed_message(workload: &WorkloadKey, error: &str) -> String {
    format!(
        "Update for '{}' of type '{}' in namespace '{}' failed with error {}",
        workload.name, workload.kind, workload.namespace, error
    )
}

impl EventSink {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: "kube-reloader".into(),
            instance,
        };
        Self {
            client,
            reporter,
            gate: None,
            core: false,
            muted: false,
            backlog: Backlog::default(),
        }
    }

    /// Counts the `Reloaded` Events dropped because too many were waiting in `dropped`.
    pub fn counting_drops(mut self, dropped: Counter) -> Self {
        self.backlog.dropped = dropped;
        self
    }

    /// Waits until the `Reloaded` Events queued are sent, or `deadline` passes (shutdown).
    pub async fn flush(&self, deadline: Duration) -> bool {
        let all = u32::try_from(BACKLOG).expect("small");
        let queued = self.backlog.queued.acquire_many(all);
        matches!(tokio::time::timeout(deadline, queued).await, Ok(Ok(_)))
    }

    /// `true` (shadow mode): every Event is dropped (logged at debug).
    pub fn muted(self, muted: bool) -> Self {
        Self { muted, ..self }
    }

    /// `true`: publish core/v1 Events (see [`crate::access::Fallback::CoreEvents`]).
    pub fn core_events(self, core: bool) -> Self {
        Self { core, ..self }
    }

    /// Publishes only in owned namespaces while writes are allowed, within the write limiter.
    pub fn gated(self, ownership: Arc<Ownership>, limiter: WriteLimiter) -> Self {
        Self {
            gate: Some(EventGate { ownership, limiter }),
            ..self
        }
    }

    /// Whether this replica may publish an Event on `reference` now (not muted, and with a
    /// gate: the namespace owned and writes allowed).
    fn admitted(&self, reference: &ObjectReference, reason: &str) -> bool {
        if self.muted {
            debug!(reason, "event not published: shadow mode");
            return false;
        }
        let Some(gate) = &self.gate else { return true };
        let namespace = reference.namespace.as_deref().unwrap_or_default();
        let admitted = gate.ownership.owns(namespace) && gate.ownership.may_write();
        if !admitted {
            debug!(
                namespace,
                reason, "event not published: namespace not owned or writes fenced"
            );
        }
        admitted
    }

    async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        needs_turn: bool,
    ) {
        if !self.admitted(reference, reason) {
            return;
        }
        if let (Some(gate), true) = (&self.gate, needs_turn) {
            gate.limiter.until_ready(TurnPriority::Notice).await;
        }
        self.send(reference, type_, reason, note).await;
    }

    async fn send(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        // Event notes are limited to 1 kB by the API server.
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reload".into(),
            secondary: None,
        };
        let published = match self.core {
            true => self.publish_core(&event, reference).await,
            false => {
                let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                recorder.publish(&event, reference).await
            }
        };
        if let Err(e) = published {
            warn!(
                error = %e,
                reason,
                object = %ObjectName(reference),
                "could not publish a Kubernetes event"
            );
        }
    }

    /// The same Event as a core/v1 Event, as Reloader writes them.
    async fn publish_core(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let namespace = reference.namespace.clone().unwrap_or_default();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        let object = CoreEvent {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!(
                    "{}.",
                    reference.name.as_deref().unwrap_or("kube-reloader")
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: reference.clone(),
            reason: Some(event.reason.clone()),
            message: event.note.clone(),
            type_: Some(match event.type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            action: Some(event.action.clone()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            source: Some(EventSource {
                component: Some(self.reporter.controller.clone()),
                host: None,
            }),
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            ..Default::default()
        };
        let api: kube::Api<CoreEvent> = kube::Api::namespaced(self.client.clone(), &namespace);
        api.create(&Default::default(), &object).await.map(drop)
    }

    /// Sent in the background ([`Backlog`]), within the reload's own limiter turn (see
    /// [`EventGate`]); admitted now, while the write that it reports is known to be this
    /// replica's.
    pub fn reloaded(&self, reference: &ObjectReference, note: String) {
        const REASON: &str = "Reloaded";
        if !self.admitted(reference, REASON) {
            return;
        }
        let Ok(queued) = self.backlog.queued.clone().try_acquire_owned() else {
            // A slow API server drops many: the 1st, 2nd, 4th, 8th... are logged, all counted.
            let dropped = self.backlog.dropped.inc() + 1;
            if dropped.is_power_of_two() {
                warn!(
                    object = %ObjectName(reference),
                    dropped,
                    backlog = BACKLOG,
                    "Reloaded event dropped: too many waiting to be sent"
                );
            }
            return;
        };
        let sink = self.clone();
        let reference = reference.clone();
        let sending = async move {
            let _queued = queued;
            let _sending = sink.backlog.sending.acquire().await;
            sink.send(&reference, EventType::Normal, REASON, note).await;
        };
        // Not in the write's span: that span (and the reload's) would stay open, and show as
        // slow, for as long as the Event waited here.
        tokio::spawn(sending);
    }

    pub async fn reload_failed(&self, reference: &ObjectReference, note: String) {
        self.publish(reference, EventType::Warning, "ReloadFail", note, true)
            .await;
    }

    /// The workload uses a Secret whose type is never watched (`--ignore-secret-types`).
    pub async fn ignored_secret_type(&self, reference: &ObjectReference, note: String) {
        self.publish(
            reference,
            EventType::Warning,
            "SecretTypeIgnored",
            note,
            true,
        )
        .await;
    }

    /// The churn breaker opened on a config (Warning `ReloadsHeld`) or closed (`ReloadsReleased`).
    pub async fn churn_breaker(&self, config: &ObjectReference, opened: bool, note: String) {
        let (type_, reason) = match opened {
            true => (EventType::Warning, "ReloadsHeld"),
            false => (EventType::Normal, "ReloadsReleased"),
        };
        self.publish(config, type_, reason, note, true).await;
    }

    /// A change rolled in waves halted (Warning `ReloadHalted`, on the config and on each
    /// workload it holds) or its halt was released (`ReloadResumed`).
    pub async fn wave_halt(&self, reference: &ObjectReference, halted: bool, note: String) {
        let (type_, reason) = match halted {
            true => (EventType::Warning, "ReloadHalted"),
            false => (EventType::Normal, "ReloadResumed"),
        };
        self.publish(reference, type_, reason, note, true).await;
    }

    /// A bad annotation value (invalid regex, pause period, rollout strategy).
    pub async fn bad_annotation(&self, reference: &ObjectReference, note: String) {
        self.publish(
            reference,
            EventType::Warning,
            "InvalidAnnotation",
            note,
            true,
        )
        .await;
    }
}

/// An Event's object as `namespace/name` in log lines.
struct ObjectName<'a>(&'a ObjectReference);

impl std::fmt::Display for ObjectName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespace = self.0.namespace.as_deref().unwrap_or_default();
        let name = self.0.name.as_deref().unwrap_or_default();
        write!(f, "{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConfigKind, WorkloadKind};

    fn sink_to(address: std::net::SocketAddr, dropped: &Counter) -> EventSink {
        let url = format!("http://{address}").parse().unwrap();
        let client = Client::try_from(kube::Config::new(url)).unwrap();
        EventSink::new(client, None).counting_drops(dropped.clone())
    }

    fn web() -> ObjectReference {
        ObjectReference {
            namespace: Some("ns".into()),
            name: Some("web".into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn reloaded_events_wait_in_a_bounded_backlog_and_the_excess_is_counted() {
        // An API server that takes connections and never answers: every send hangs.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        let dropped = Counter::default();
        let sink = sink_to(address, &dropped);
        for _ in 0..BACKLOG + 3 {
            sink.reloaded(&web(), "note".into());
        }
        assert_eq!(dropped.get(), 3);
        assert!(
            !sink.flush(Duration::from_millis(200)).await,
            "1,000 Events are still waiting"
        );
    }

    #[tokio::test]
    async fn flush_returns_once_the_backlog_is_sent_or_given_up() {
        // Nothing listens: each send fails at once (and is logged), which ends it too.
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let dropped = Counter::default();
        let sink = sink_to(address, &dropped);
        for _ in 0..20 {
            sink.reloaded(&web(), "note".into());
        }
        assert!(sink.flush(Duration::from_secs(10)).await);
        assert_eq!(dropped.get(), 0);
    }

    #[test]
    fn messages_match_reloader() {
        let c = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cfg");
        let w = WorkloadKey::new(WorkloadKind::Deployment, "ns", "web");
        assert_eq!(
            reloaded_message(&c, &w, None),
            "Changes detected in 'cfg' of type 'CONFIGMAP' in namespace 'ns', Updated 'web' of type 'Deployment' in namespace 'ns'"
        );
        assert_eq!(
            failed_message(&w, "boom"),
            "Update for 'web' of type 'Deployment' in namespace 'ns' failed with error boom"
        );
    }
}
