//! Workload watches: each object becomes a [`WorkloadEntry`] in the index; bad annotations get
//! one Warning event; pause periods in progress get their resume timer (also after a restart).

use std::collections::HashSet;
use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::config::NamespaceScope;
use crate::engine::ConfigObserver;
use crate::index::workload_entry_from_dynamic;
use crate::model::{WorkloadKey, WorkloadKind};
use crate::rollout::kube::api_resource;
use crate::rollout::{QueueObserver, WorkloadWriter};
use crate::telemetry::events::workload_reference;

use futures::StreamExt;

use super::{SyncGate, WatchContext, WatchObserver, watch_error, watch_streams};

/// One dynamic API per watched namespace in scoped mode, one cluster-wide otherwise.
pub(super) fn dynamic_apis(
    client: &kube::Client,
    scope: &NamespaceScope,
    ar: &kube::core::ApiResource,
) -> Vec<Api<DynamicObject>> {
    match scope {
        NamespaceScope::All => vec![Api::all_with(client.clone(), ar)],
        NamespaceScope::Only(nss) => nss
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, ar))
            .collect(),
    }
}

pub(super) fn spawn_all<W, O, C, M>(
    ctx: &Arc<WatchContext<W, O, C, M>>,
    tasks: &mut JoinSet<anyhow::Result<()>>,
    streaming_lists: bool,
) -> SyncGate
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    let kinds: Vec<WorkloadKind> = WorkloadKind::ALL
        .into_iter()
        .filter(|k| ctx.settings.handles_workload(*k))
        .collect();
    let streams: usize = kinds.len() * scope_len(&ctx.settings.scope);
    let gate = SyncGate::new(streams);
    let config = super::list_strategy::initial_list(
        streaming_lists,
        super::list_strategy::WORKLOAD_PAGE_SIZE,
    );
    for kind in kinds {
        let (ctx, gate, config) = (ctx.clone(), gate.clone(), config.clone());
        tasks.spawn(async move { watch_kind(ctx, kind, gate, config).await });
    }
    gate
}

pub(super) fn scope_len(scope: &NamespaceScope) -> usize {
    match scope {
        NamespaceScope::All => 1,
        NamespaceScope::Only(n) => n.len(),
    }
}

async fn watch_kind<W, O, C, M>(
    ctx: Arc<WatchContext<W, O, C, M>>,
    kind: WorkloadKind,
    gate: SyncGate,
    config: watcher::Config,
) -> anyhow::Result<()>
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    let apis = dynamic_apis(&ctx.client, &ctx.settings.scope, &api_resource(kind));
    let mut synced = vec![false; apis.len()];
    let mut relisting: Vec<Option<HashSet<WorkloadKey>>> = vec![None; apis.len()];
    let mut stream = watch_streams(apis, config);
    while let Some((i, event)) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => relisting[i] = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(key) = ctx.apply_workload(kind, obj).await
                    && let Some(seen) = relisting[i].as_mut()
                {
                    seen.insert(key);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relisting[i].take() {
                    // Workloads deleted while the watch was down.
                    let ns_of_stream = stream_namespace(&ctx.settings.scope, i);
                    ctx.engine.index.retain_workloads(kind, |k| {
                        seen.contains(k) || ns_of_stream.is_some_and(|ns| ns != &*k.namespace)
                    });
                }
                if !synced[i] {
                    synced[i] = true;
                    gate.done_one();
                }
            }
            Ok(watcher::Event::Apply(obj)) => {
                ctx.apply_workload(kind, obj).await;
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let (Some(ns), Some(name)) = (
                    obj.metadata.namespace.as_deref(),
                    obj.metadata.name.as_deref(),
                ) {
                    ctx.engine
                        .index
                        .delete_workload(&WorkloadKey::new(kind, ns, name));
                }
            }
            Err(e) => watch_error(&ctx.observer, kind.as_str(), &e),
        }
    }
    anyhow::bail!("the {kind} watch ended")
}

/// The namespace a scoped stream watches (`None`: cluster-wide).
pub(super) fn stream_namespace(scope: &NamespaceScope, stream: usize) -> Option<&str> {
    match scope {
        NamespaceScope::All => None,
        NamespaceScope::Only(nss) => nss.get(stream).map(String::as_str),
    }
}

impl<W, O, C, M> WatchContext<W, O, C, M>
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    /// Indexes one workload object; returns its key when it was taken in.
    pub(crate) async fn apply_workload(
        &self,
        kind: WorkloadKind,
        obj: DynamicObject,
    ) -> Option<WorkloadKey> {
        let ns = obj.metadata.namespace.as_deref()?;
        if !self.engine.ownership.owns(ns) {
            return None;
        }
        let entry = match workload_entry_from_dynamic(kind, &obj, &self.settings.keys) {
            Ok(e) => e,
            Err(e) => {
                warn!(kind = kind.as_str(), error = %e, "workload skipped");
                return None;
            }
        };
        let key = entry.key.clone();
        for problem in &entry.policy.problems {
            if self.reported.insert((key.clone(), problem.clone())) {
                warn!(workload = %key, %problem, "bad annotation");
                let uid = obj.metadata.uid.clone();
                self.events
                    .bad_annotation(&workload_reference(&key, uid), problem.to_string())
                    .await;
            }
        }
        if let (Some(paused_at), Some(period)) = (entry.paused_at, entry.policy.pause_period)
            && kind == WorkloadKind::Deployment
        {
            self.pauses
                .schedule(key.clone(), paused_at, period.as_secs() as i64);
        }
        debug!(workload = %key, uses = entry.uses.len(), "workload indexed");
        // Before ready the configs are not listed yet; the check sweeps the index once then.
        let secrets: Vec<_> = if self.is_ready() && self.ignored_secret_notices.is_some() {
            let mut edges = entry.edge_configs();
            edges.retain(|c| c.kind == crate::model::ConfigKind::Secret);
            edges
        } else {
            Vec::new()
        };
        self.engine.index.apply_workload(entry);
        self.notice_unindexed_secrets(secrets);
        Some(key)
    }
}
