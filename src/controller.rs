//! Wires the stages together and runs them until a signal or a fatal error.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use tracing::{error, info, warn};

use crate::access::review::allowed_in_scope;
use crate::access::{AccessPlan, Fallback};
use crate::alert::{AlertConfig, Alerter, ReloadWebhook};
use crate::config::{Flags, Settings};
use crate::digest::DigestPool;
use crate::engine::Engine;
use crate::handover::acted::ActedTracker;
use crate::handover::config_view::ConfigViews;
use crate::handover::follow::ShardLink;
use crate::handover::listener::Handover;
use crate::http::{AdminState, parse_listen_addr};
use crate::index::ReverseIndex;
use crate::rollout::events::EventSink;
use crate::rollout::halts::HaltStore;
use crate::rollout::pause::PauseKeeper;
use crate::rollout::wave_runner::{KubeReader, WaveNotice, WaveRunner};
use crate::rollout::{
    Drained, KubeWriter, QueueObserver, QueueSettings, ReloadQueue, Tenants, WorkloadWriter,
    write_limiter,
};
use crate::shadow::guard::ReadOnlyLayer;
use crate::shadow::{Shadow, VerdictSink};
use crate::shard::coordinator::{Coordinator, ShardError};
use crate::shard::leader_lock::LeaderLock;
use crate::shard::server_sharding::SelectorFeed;
use crate::shard::{Ownership, ShardState};
use crate::telemetry::api_requests::CountRequestsLayer;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::outcomes::Outcomes;
use crate::watch::WatchContext;
use crate::watch::WatchError;

/// What the API server (its audit log, its request logs) sees as the client.
pub const USER_AGENT: &str = concat!("kube-reloader/", env!("CARGO_PKG_VERSION"));

/// How long in-flight writes may take to finish on SIGTERM.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// How long a leaving replica waits for others to take its namespaces over (the default pod
/// termination grace period is 30 s: hand-over plus drain fit in it).
const HANDOVER_DEADLINE: Duration = Duration::from_secs(15);

/// The most writes in flight while the API server answers slowly (32 at rest), when one
/// replica writes for every namespace: 4 x the floor carries the default 50 writes a second at
/// up to 2.5 s a write. Each is an HTTP/1.1 connection (kube-client speaks no HTTP/2), so the
/// ceiling bounds the connections too.
const MAX_WRITES_IN_FLIGHT: usize = 128;

/// Widen the write slots only where one replica writes for every namespace (one replica, or
/// the `--enable-ha` leader). Measured on chaos seed 25, medium, 3 replicas, one run after the
/// other: with `--enable-ha` the width took the p90 from 1,377 to 424 ms and the reloads over
/// 9 s that a `latency` fault alone held from 517 to 0 (`chaos-medium-3r-ha-ce38f45`); with
/// `--sharding`, where each replica writes a third, it made the reloads no fault touched
/// slower (p90 / p99 159 / 2,170 ms, `chaos-medium-3r-4d29c37`, against 67 / 337 ms with a
/// fixed 32, `chaos-medium-3r-4d29c37-fixed-32-slots`).
fn widens_write_slots(settings: &Settings) -> bool {
    settings.shard.as_ref().is_none_or(|shard| !shard.sharding)
}

fn queue_settings(settings: &Settings) -> QueueSettings {
    QueueSettings {
        min_reload_interval: settings.min_reload_interval,
        max_per_second: settings
            .max_patches_per_second
            .try_into()
            .expect("validated non-zero"),
        burst: settings.patch_burst.try_into().expect("validated non-zero"),
        per_tenant_rate: settings.per_tenant_rate,
        backoff_cap: settings.max_retry_backoff,
        max_concurrency: widens_write_slots(settings).then_some(MAX_WRITES_IN_FLIGHT),
        ..QueueSettings::default()
    }
}

/// Turns on DeploymentConfig support when the OpenShift API is served (as Reloader detects it) and
/// this identity may read and patch DeploymentConfigs: the chart grants them only with `isOpenshift`,
/// and a watch that can never list would keep `/ready` false forever.
async fn detect_openshift(client: &Client, settings: &mut Settings) {
    if settings.openshift {
        return;
    }
    match client.list_api_groups().await {
        Ok(groups) if groups.groups.iter().any(|g| g.name == "apps.openshift.io") => {
            let verbs = ["list", "watch", "get", "patch"];
            match allowed_in_scope(
                client,
                &settings.scope,
                "apps.openshift.io",
                "deploymentconfigs",
                &verbs,
            )
            .await
            {
                Ok(true) => {
                    info!("apps.openshift.io is served: DeploymentConfigs will be reloaded");
                    settings.openshift = true;
                }
                Ok(false) => warn!(
                    "apps.openshift.io is served but RBAC does not allow list/watch/get/patch on \
                     deploymentconfigs: DeploymentConfigs will not be reloaded (grant them, e.g. \
                     Helm value isOpenshift=true, or pass --is-openshift to require them)"
                ),
                Err(e) => warn!(
                    error = %e,
                    "could not review access to deploymentconfigs; DeploymentConfigs only with --is-openshift"
                ),
            }
        }
        Ok(_) => {}
        Err(e) => {
            warn!(error = %e, "API discovery failed; DeploymentConfigs only with --is-openshift")
        }
    }
}

/// What start-up found before anything runs: the settings with what the API server told about
/// them, the access plan, and the process-wide parts.
struct Started {
    settings: Arc<Settings>,
    access: AccessPlan,
    client: Client,
    /// The same client without kube-rs's own retries, for the writer (see [`ClientRetries`]).
    write_client: Client,
    metrics: Arc<Metrics>,
    leader_lock: Option<Arc<LeaderLock>>,
    environment: crate::config::Environment,
    pod_name: Option<String>,
    /// The shard selector the client sends, published by the shard view.
    selector: SelectorFeed,
    /// The threads every config payload is hashed on (watches, view checks, admission).
    digests: DigestPool,
}

pub async fn run(flags: Flags) -> anyhow::Result<()> {
    let metrics_addr = parse_listen_addr(&flags.metrics_addr)
        .with_context(|| format!("--metrics-addr: '{}' is not host:port", flags.metrics_addr))?;
    let pprof_addr = flags
        .enable_pprof
        .then(|| parse_listen_addr(&flags.pprof_addr))
        .transpose()
        .with_context(|| format!("--pprof-addr: '{}' is not host:port", flags.pprof_addr))?;
    let health_addr = crate::http::parse_health_addr(&flags.health_addr)
        .with_context(|| format!("--health-addr: '{}' is not host:port", flags.health_addr))?;
    let admission = admission_endpoint(&flags)?;
    let started = start(flags).await?;
    let ownership = ownership_for(&started.settings, &started.selector);
    let shard_link = join_replica_set(&started.client, &started.settings, &ownership);
    let coordinator = shard_link.as_ref().map(|link| link.coordinator.clone());
    let index = Arc::new(ReverseIndex::new());
    let acted = shard_link
        .as_ref()
        .map(|link| link.handover.acted().clone())
        .unwrap_or_default();
    let shadow = started.settings.shadow.map(|settings| {
        let metrics = started.metrics.clone();
        let sink: VerdictSink = Box::new(move |verdict, kind| metrics.shadow_verdict(verdict, kind));
        let shadow = Arc::new(Shadow::new(settings, sink));
        tokio::spawn(shadow.clone().run_expiry());
        warn!("--shadow: nothing is written to the cluster; reloads are predicted and judged against the incumbent's (/debug/shadow)");
        shadow
    });
    let (engine, watches) = build_pipeline(&started, &ownership, &index, acted, shadow.clone())?;
    let ready_probe = watches.clone();
    let admin = Arc::new(AdminState {
        metrics: started.metrics.clone(),
        index: index.clone(),
        ownership: ownership.clone(),
        ready: Box::new(move || ready_probe.is_ready()),
        explain: Some(crate::explain::live::LiveExplainer {
            index,
            ownership,
            settings: started.settings.clone(),
            access: started.access,
            ignored_secrets: watches.ignored_secret_types(),
            served: watches.served_apis(),
            wire_formats: watches.wire_formats(),
            queue: Box::new(crate::explain::live::queue_inspector(
                engine.queue().clone(),
            )),
            timing: {
                let engine = engine.clone();
                Box::new(move |key: &crate::model::WorkloadKey| {
                    crate::explain::live::timing_report(
                        &engine.timing_of(key),
                        engine.held_for(key),
                    )
                })
            },
            breaker: engine.breaker().cloned(),
            waves: engine.wave_runner().cloned(),
        }),
        shadow,
    });
    let admin_server = serve_admin(metrics_addr, health_addr, pprof_addr, admin);
    let admin_server = match admission {
        None => admin_server,
        Some((addr, files)) => {
            let handler = crate::admission::Admission::new(
                started.client.clone(),
                started.settings.clone(),
                started.digests.clone(),
            );
            let server = crate::admission::AdmissionServer::new(addr, &files, handler)
                .context("--admission-addr: the webhook cannot start")?;
            with_admission(admin_server, server)
        }
    };
    let leader_lock = started.leader_lock;
    let (leading, lead) = tokio::sync::watch::channel(leader_lock.is_none());
    let tasks = CriticalTasks {
        watching: tokio::spawn(async move {
            // A standby starts nothing until it leads (as in Reloader).
            let _ = lead.clone().wait_for(|leads| *leads).await;
            watches.run(shard_link).await
        }),
        admin_server,
        coordinating: match (&coordinator, &leader_lock) {
            (Some(c), _) => tokio::spawn(crate::handover::steps::coordinate(c.clone())),
            (None, Some(lock)) => tokio::spawn(lead_while_held(lock.clone(), leading)),
            (None, None) => tokio::spawn(std::future::pending()),
        },
    };
    let leaving = Leaving {
        coordinator,
        leader_lock,
    };
    supervise(tasks, leaving, engine.queue()).await
}

/// Settings, the API client, OpenShift detection, the access review (and the fallbacks it
/// turns on), and the meta-info ConfigMap.
async fn start(flags: Flags) -> anyhow::Result<Started> {
    // Shadow mode publishes no meta-info ConfigMap: the incumbent's stays as it is.
    let meta_info =
        crate::telemetry::meta_info::MetaInfo::from_flags(&flags).filter(|_| !flags.shadow);
    let environment = flags.environment.clone();
    let pod_name = flags.pod_name.clone();
    let mut settings = Settings::try_from(flags)?;
    let metrics = Metrics::new(environment.counts_by_namespace());
    let selector = SelectorFeed::default();
    let shadow = settings.shadow.is_some();
    let client = kube_client(&metrics, &selector, shadow, ClientRetries::Kube).await?;
    let write_client = kube_client(&metrics, &selector, shadow, ClientRetries::Off).await?;
    detect_openshift(&client, &mut settings).await;
    let meta_namespace = meta_info.as_ref().map(|m| m.namespace().to_string());
    let access = review_access(&client, &settings, meta_namespace.as_deref()).await?;
    settings.rbac_listed_kinds = access.listed_kinds();
    metrics.set_access_fallbacks(
        access
            .active_fallbacks()
            .into_iter()
            .map(|f| f.metric_label()),
    );
    if settings.list_workloads {
        warn!("--list-workloads: every workload kind is found by LIST, not watched");
    }
    // Active/standby on the leader Lease alone: one replica, unsharded, while it leads.
    let leader_lock = match access.uses(Fallback::LeaderLockOnly) {
        true => settings
            .shard
            .take()
            .map(|s| Arc::new(LeaderLock::new(client.clone(), s))),
        false => None,
    };
    if let Some(meta_info) = meta_info {
        let by_update = access.uses(Fallback::MetaInfoByUpdate);
        meta_info.publish(&client, by_update).await;
    }
    let digests = match settings.digest_workers {
        0 => DigestPool::for_available_parallelism(),
        n => DigestPool::new(n),
    };
    Ok(Started {
        digests,
        settings: Arc::new(settings),
        access,
        client,
        write_client,
        metrics,
        leader_lock,
        environment,
        pod_name,
        selector,
    })
}

type KubeEngine = Engine<Arc<KubeWriter>, Arc<Outcomes>, Arc<Metrics>>;

/// The data path, from the watches to the writes: one write budget, the queue, the engine and
/// its intake, the watches.
fn build_pipeline(
    started: &Started,
    ownership: &Arc<Ownership>,
    index: &Arc<ReverseIndex>,
    acted: ActedTracker,
    shadow: Option<Arc<Shadow>>,
) -> anyhow::Result<(Arc<KubeEngine>, Arc<WatchContext>)> {
    let Started {
        settings, client, ..
    } = started;
    let queue_settings = queue_settings(settings);
    // One write budget for reloads, their Events and pause resumes.
    let limiter = write_limiter(queue_settings.max_per_second, queue_settings.burst);
    let shadowing = shadow.is_some();
    let events = EventSink::new(client.clone(), started.pod_name.clone())
        .core_events(started.access.uses(Fallback::CoreEvents))
        .gated(ownership.clone(), limiter.clone())
        .counting_drops(started.metrics.events_dropped())
        .muted(shadowing);
    let pauses = PauseKeeper::new(
        client.clone(),
        ownership.clone(),
        limiter.clone(),
        settings.keys.paused_at.clone(),
    )
    .muted(shadowing);
    let writer = KubeWriter::new(
        started.write_client.clone(),
        settings.clone(),
        ownership.clone(),
        events.clone(),
        pauses.clone(),
    )
    .checking_views(Arc::new(ConfigViews::new(
        client.clone(),
        index.clone(),
        started.digests.clone(),
    )));
    let writer = Arc::new(match &shadow {
        Some(shadow) => writer.shadowing(shadow.clone()),
        None => writer,
    });
    // Shadow mode alerts nobody: the incumbent does.
    let alerter = AlertConfig::from_vars(|k| started.environment.alert_var(k))
        .filter(|_| !shadowing)
        .map(Alerter::new)
        .transpose()
        .context("ALERT_WEBHOOK_PROXY")?;
    let breaker_alerter = alerter.clone();
    let wave_alerter = alerter.clone();
    let outcomes = Arc::new(Outcomes {
        metrics: started.metrics.clone(),
        alerter,
    });
    let tenants = Arc::new(Tenants::new(settings.tenant_label.clone()));
    let queue = ReloadQueue::start_with(writer, outcomes, queue_settings, limiter, tenants);
    let mut engine = Engine::new(
        index.clone(),
        settings.clone(),
        ownership.clone(),
        queue,
        started.metrics.clone(),
    )
    .with_acted(acted);
    if let Some(url) = settings.webhook_url.as_ref().filter(|_| !shadowing) {
        engine = engine.with_webhook(ReloadWebhook::new(url.clone())?);
    }
    if let Some(breaker) = settings.churn_breaker {
        let (notices, received) = tokio::sync::mpsc::unbounded_channel();
        engine = engine.with_breaker_notices(notices);
        tokio::spawn(publish_breaker_notices(
            received,
            events.clone(),
            breaker_alerter,
            breaker,
        ));
    }
    let (runner, wave_notices) = WaveRunner::new(
        KubeReader(client.clone()),
        settings.keys.clone(),
        settings.wave_poll_interval,
    );
    let runner = match &settings.halts_namespace {
        Some(namespace) if started.access.keeps_halts() => {
            runner.with_halts(HaltStore::start(client.clone(), namespace))
        }
        _ => runner,
    };
    engine = engine.with_waves(Arc::new(runner));
    tokio::spawn(publish_wave_notices(
        wave_notices,
        events.clone(),
        wave_alerter,
        started.metrics.clone(),
    ));
    let engine = Arc::new(engine);
    tokio::spawn(engine.clone().run_breaker_releases());
    tokio::spawn(engine.clone().run_hold_releases());
    let intake = crate::engine::intake::Intake::new(engine.clone(), events, pauses);
    let intake = Arc::new(match shadow {
        Some(shadow) => intake.with_shadow(shadow),
        None => intake,
    });
    let watches = WatchContext::new(
        client.clone(),
        intake,
        started.digests.clone(),
        started.metrics.clone(),
    );
    Ok((engine, watches))
}

/// Each churn breaker notice as an Event on the config and an alert.
async fn publish_breaker_notices(
    mut notices: tokio::sync::mpsc::UnboundedReceiver<crate::engine::BreakerNotice>,
    events: EventSink,
    alerter: Option<Alerter>,
    settings: crate::config::BreakerSettings,
) {
    while let Some(notice) = notices.recv().await {
        let text = notice.describe(settings);
        let opened = matches!(notice, crate::engine::BreakerNotice::Opened { .. });
        let reference = crate::resources::config_reference(notice.config());
        events.churn_breaker(&reference, opened, text.clone()).await;
        if let Some(alerter) = &alerter {
            alerter.churn_breaker(&text);
        }
    }
}

/// Each halt of a change rolled in waves as a Warning Event on the config and on every
/// workload it holds, an alert and a metric; a release and a completion likewise.
async fn publish_wave_notices(
    mut notices: tokio::sync::mpsc::UnboundedReceiver<WaveNotice>,
    events: EventSink,
    alerter: Option<Alerter>,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
) {
    use crate::resources::{config_reference, workload_reference};
    while let Some(notice) = notices.recv().await {
        metrics.wave_notice(&notice);
        let (config, text, halted, held) = match notice {
            WaveNotice::Halted(halt) => {
                let text = format!(
                    "Reload halted: {halt}. Fix the config (a new change starts \
                    again), or release the held workloads with `kube-reloader resume`."
                );
                (halt.config.clone(), text, true, halt.held)
            }
            WaveNotice::Released { config, held } => {
                let text = format!(
                    "Reload resumed: the {} workloads held by the halted change \
                    of {}/{} are rolled.",
                    held.len(),
                    config.kind.as_str(),
                    config.name
                );
                (config, text, false, Vec::new())
            }
            WaveNotice::Completed { .. } => continue,
        };
        events
            .wave_halt(&config_reference(&config), halted, text.clone())
            .await;
        for workload in &held {
            events
                .wave_halt(&workload_reference(workload, None), true, text.clone())
                .await;
        }
        if let Some(alerter) = &alerter {
            alerter.wave_halt(&text);
        }
    }
}

/// The admin endpoint and the probe server of `--health-addr` (one critical task: either one
/// stopping, e.g. its port taken, ends the process, as Reloader's manager does) and, with
/// `--enable-pprof`, the profiling endpoint.
fn serve_admin(
    metrics_addr: std::net::SocketAddr,
    health_addr: Option<std::net::SocketAddr>,
    pprof_addr: Option<std::net::SocketAddr>,
    admin: Arc<AdminState>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    if let Some(addr) = pprof_addr {
        tokio::spawn(async move {
            if let Err(e) = crate::http::pprof::serve(addr).await {
                error!(error = %e, %addr, "the profiling endpoint stopped");
            }
        });
    }
    tokio::spawn(async move {
        match health_addr {
            None => crate::http::serve(metrics_addr, admin).await,
            Some(addr) => {
                tokio::select! {
                    r = crate::http::serve(metrics_addr, admin.clone()) => r,
                    r = crate::http::serve_health(addr, admin) => r,
                }
            }
        }
    })
}

/// `--admission-addr` and its certificate files, when the webhook is on.
fn admission_endpoint(
    flags: &Flags,
) -> anyhow::Result<Option<(std::net::SocketAddr, crate::admission::TlsFiles)>> {
    let addr = flags.admission_addr.trim();
    if addr.is_empty() {
        return Ok(None);
    }
    let addr = parse_listen_addr(addr)
        .with_context(|| format!("--admission-addr: '{addr}' is not host:port"))?;
    let files = crate::admission::TlsFiles {
        cert: flags.admission_cert_file.clone(),
        key: flags.admission_key_file.clone(),
    };
    Ok(Some((addr, files)))
}

/// The admin endpoints and the admission webhook as one critical task: either stopping ends
/// the process.
fn with_admission(
    admin: tokio::task::JoinHandle<std::io::Result<()>>,
    server: crate::admission::AdmissionServer,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        tokio::select! {
            r = admin => r.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            r = server.serve() => r,
        }
    })
}

/// Acquires the leader Lease, lets the watches start, and holds it until it is lost.
async fn lead_while_held(
    lock: Arc<LeaderLock>,
    leading: tokio::sync::watch::Sender<bool>,
) -> Result<(), ShardError> {
    lock.acquire().await;
    leading.send_replace(true);
    let lost = lock.hold().await;
    Err(ShardError::LeaderLock(lost))
}

/// Reviews what this identity may do and decides the mode. A required rule missing is fatal,
/// naming every such rule: a pod that is Ready and never reloads would go unnoticed.
async fn review_access(
    client: &Client,
    settings: &Settings,
    meta_namespace: Option<&str>,
) -> anyhow::Result<AccessPlan> {
    let requirements = crate::access::requirements(settings, meta_namespace);
    let plan = match crate::access::review::review(client, &requirements).await {
        Ok(plan) => plan,
        Err(e) => {
            warn!(error = %e, "could not review this identity's permissions; assuming all are granted");
            return Ok(AccessPlan::full());
        }
    };
    for fallback in plan.active_fallbacks() {
        let rules = plan.missing_for(fallback);
        warn!(
            missing = rules.join("; "),
            fallback = fallback.metric_label(),
            cost = fallback.cost(),
            "RBAC does not grant a permission kube-reloader prefers; falling back"
        );
    }
    for (rule, lost) in &plan.lost {
        warn!(missing = %rule, lost, "RBAC does not grant this permission: no {lost}");
    }
    if !plan.missing.is_empty() {
        let rules: Vec<String> = plan.missing.iter().map(ToString::to_string).collect();
        error!(
            missing = rules.join("; "),
            "RBAC does not grant what kube-reloader needs"
        );
        anyhow::bail!(
            "RBAC does not grant what kube-reloader needs, and nothing can replace it: {}",
            rules.join("; ")
        );
    }
    if plan == AccessPlan::full() {
        info!("RBAC grants every permission these settings use");
    }
    Ok(plan)
}

/// Whether the client retries 429, 503 and 504 itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientRetries {
    /// kube-rs's default: up to 15 times, honouring `Retry-After`.
    Kube,
    /// None: the writer's. A write answered 429 (API Priority and Fairness throttling a flow,
    /// or a PodDisruptionBudget blocking an eviction, `Retry-After: 10`), retried inside the
    /// client, kept its write slot for as long as the retries took, minutes, unseen by the
    /// queue: two throttled tenants held all 32 slots and every other tenant waited
    /// (`tests/tenancy.rs`, `throttled_namespaces_do_not_hold_the_write_slots`). The queue
    /// retries with its own backoff instead, frees the slot at once, and reports it.
    Off,
}

/// The client, with kube-reloader's User-Agent, every request counted in the metrics, and the
/// shard selector on cluster-wide lists and watches once one is published.
/// The API client; in shadow mode, one that refuses to send any write but the replica set's
/// own ([`ReadOnlyLayer`]).
async fn kube_client(
    metrics: &Arc<Metrics>,
    selector: &SelectorFeed,
    shadow: bool,
    retries: ClientRetries,
) -> anyhow::Result<kube::Client> {
    let mut kube_config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration found (in-cluster or KUBECONFIG)")?;
    // kube-rs sends no User-Agent; the API server's audit log and its operators see who asks.
    kube_config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    kube_config.default_retry = retries == ClientRetries::Kube;
    let builder = kube::client::ClientBuilder::try_from(kube_config)
        .context("building the Kubernetes client")?
        .with_layer(&selector.layer())
        .with_layer(&CountRequestsLayer::new(metrics.clone()));
    Ok(match shadow {
        true => builder.with_layer(&ReadOnlyLayer::default()).build(),
        false => builder.build(),
    })
}

fn ownership_for(settings: &Settings, selector: &SelectorFeed) -> Arc<Ownership> {
    let ignored = settings.namespaces_to_ignore.clone();
    Arc::new(match &settings.shard {
        Some(shard) => Ownership::sharded(
            ignored,
            Arc::new(ShardState::with_selector(
                shard.me.clone(),
                shard.renew_deadline,
                selector.clone(),
            )),
        ),
        None => Ownership::new(ignored, settings.namespace_selector.is_some()),
    })
}

/// With `--sharding` or `--enable-ha`: the coordinator and its channel to the watches.
fn join_replica_set(
    client: &kube::Client,
    settings: &Settings,
    ownership: &Arc<Ownership>,
) -> Option<ShardLink> {
    let shard = settings.shard.as_ref()?;
    let (handover, changes) = Handover::new();
    let coordinator = Coordinator::new(
        client.clone(),
        shard.clone(),
        ownership.clone(),
        settings.namespace_selector.clone(),
        handover.clone(),
    );
    info!(
        me = %shard.me,
        namespace = %shard.namespace,
        mode = if shard.sharding { "sharding" } else { "leader-only (--enable-ha)" },
        "joining the replica set"
    );
    Some(ShardLink {
        coordinator,
        handover,
        changes,
    })
}

/// The tasks without which the controller cannot do its job.
struct CriticalTasks {
    watching: tokio::task::JoinHandle<Result<(), WatchError>>,
    admin_server: tokio::task::JoinHandle<std::io::Result<()>>,
    coordinating: tokio::task::JoinHandle<Result<(), ShardError>>,
}

/// What a replica leaves on shutdown: its place in the replica set, or the leader Lease.
struct Leaving {
    coordinator: Option<Arc<Coordinator>>,
    leader_lock: Option<Arc<LeaderLock>>,
}

/// Runs until a critical task ends (an error: exit non-zero) or a shutdown signal (hand over,
/// drain the queue, leave the replica set).
async fn supervise<W: WorkloadWriter, O: QueueObserver>(
    tasks: CriticalTasks,
    leaving: Leaving,
    queue: &ReloadQueue<W, O>,
) -> anyhow::Result<()> {
    let Leaving {
        coordinator,
        leader_lock,
    } = leaving;
    let CriticalTasks {
        mut watching,
        mut admin_server,
        mut coordinating,
    } = tasks;
    // A critical task ending means the controller can no longer do its job: exit non-zero.
    tokio::select! {
        r = &mut watching => {
            let e = r.map_err(WatchError::from).and_then(|r| r).err();
            error!(error = ?e, "watches stopped");
            anyhow::bail!("watches stopped: {e:?}");
        }
        r = &mut admin_server => {
            anyhow::bail!("admin endpoint stopped: {r:?}");
        }
        r = &mut coordinating => {
            let e = r.map_err(ShardError::from).and_then(|r| r).err();
            error!(error = ?e, "the shard coordinator stopped");
            anyhow::bail!("the shard coordinator stopped: {e:?}");
        }
        _ = shutdown_signal() => {
            // Sharded: keep acting until the replicas taking over have synced our namespaces.
            if let Some(c) = &coordinator {
                info!("shutting down: handing namespaces over");
                c.hand_over(HANDOVER_DEADLINE).await;
            }
            info!("shutting down: no new work, finishing in-flight writes");
            watching.abort();
            match queue.drain(DRAIN_DEADLINE).await {
                Drained::Everything => {}
                Drained::WritesLeft(left) => {
                    warn!(left, "writes still pending at the shutdown deadline");
                }
                Drained::EventsLeft => {
                    warn!("writes done; some Reloaded Events unsent at the shutdown deadline");
                }
            }
            // Leave the replica set so the others take over now, not after the Lease expires.
            coordinating.abort();
            if let Some(c) = &coordinator {
                c.shutdown().await;
            }
            if let Some(lock) = &leader_lock {
                lock.resign().await;
            }
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_settings_for(args: &[&str]) -> QueueSettings {
        let mut argv = vec!["--pod-name=r0", "--pod-namespace=ops"];
        argv.extend_from_slice(args);
        let settings = crate::config::settings_from_flags(&argv).expect("valid flags");
        queue_settings(&settings)
    }

    /// The write slots widen only where one replica writes for every namespace.
    #[test]
    fn write_slots_widen_without_sharding_only() {
        for (args, widens) in [
            (&[][..], true),
            (&["--enable-ha"][..], true),
            (&["--sharding"][..], false),
            (&["--sharding", "--enable-ha"][..], false),
        ] {
            let expected = widens.then_some(MAX_WRITES_IN_FLIGHT);
            assert_eq!(
                queue_settings_for(args).max_concurrency,
                expected,
                "{args:?}"
            );
        }
    }
}
