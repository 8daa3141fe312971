//! Workload watches: each object becomes a [`WorkloadEntry`] in the index; bad annotations get
//! one Warning event; pause periods in progress get their resume timer (also after a restart).

use std::collections::HashSet;
use std::sync::Arc;

use kube::runtime::watcher;
use tokio::task::JoinSet;

use crate::engine::Phase;
use crate::index::WorkloadObject;
use crate::model::{WorkloadKey, WorkloadKind};
use crate::resources::api_resource;
use crate::shard::ListMark;

use super::context::{
    SyncGate, WatchContext, WatchError, dynamic_apis, scope_len, stream_namespaces, watch_error,
};
use super::driver::{IndexVerbs, drive};
use crate::protobuf::workload_decoder;
use crate::resources::OptionalApi;

pub(super) fn spawn_all(
    ctx: &Arc<WatchContext>,
    tasks: &mut JoinSet<Result<(), WatchError>>,
    streaming_lists: bool,
) -> SyncGate {
    let kinds: Vec<WorkloadKind> = WorkloadKind::all()
        .into_iter()
        .filter(|k| ctx.settings.handles_workload(*k))
        .collect();
    let streams: usize = kinds.len() * scope_len(&ctx.settings.scope);
    let gate = SyncGate::new(streams);
    let config =
        super::list_strategy::initial_list(streaming_lists, crate::resources::WORKLOAD_PAGE_SIZE);
    for kind in kinds {
        let (watcher, gate, config) = (ctx.clone(), gate.clone(), config.clone());
        let run = move |gate: SyncGate| {
            let (ctx, config) = (watcher.clone(), config.clone());
            async move {
                match ctx.listed.contains(kind) {
                    true => super::listed::poll_kind(ctx, kind, gate).await,
                    false => watch_kind(ctx, kind, gate, config).await,
                }
            }
        };
        match OptionalApi::of_workload(kind) {
            Some(api) => {
                let streams = scope_len(&ctx.settings.scope);
                tasks.spawn(ctx.clone().while_served(api, gate, streams, run));
            }
            None => {
                tasks.spawn(run(gate));
            }
        }
    }
    gate
}

async fn watch_kind(
    ctx: Arc<WatchContext>,
    kind: WorkloadKind,
    gate: SyncGate,
    config: watcher::Config,
) -> Result<(), WatchError> {
    let apis = dynamic_apis(&ctx.client, &ctx.settings.scope, &api_resource(kind));
    let config = match crate::resources::workload_label_selector(kind) {
        Some(selector) => config.labels(selector),
        None => config,
    };
    let stream = ctx.wire_streams(kind.as_str(), apis, config, workload_decoder(kind));
    let mut verbs = WorkloadVerbs {
        ctx: ctx.clone(),
        kind,
    };
    drive(
        stream,
        stream_namespaces(&ctx.settings.scope),
        &mut verbs,
        &gate,
    )
    .await;
    Err(WatchError::Ended(kind.to_string()))
}

/// Workloads of one kind into the index.
struct WorkloadVerbs {
    ctx: Arc<WatchContext>,
    kind: WorkloadKind,
}

impl IndexVerbs<WorkloadObject> for WorkloadVerbs {
    type Key = WorkloadKey;

    async fn apply(&mut self, obj: WorkloadObject, _phase: Phase) -> Option<WorkloadKey> {
        self.ctx.apply_workload(self.kind, obj).await
    }

    async fn delete(&mut self, obj: WorkloadObject) {
        let meta = &obj.metadata;
        if let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) {
            if self.kind == WorkloadKind::Rollout {
                self.ctx.workload_refs.forget(ns, name);
            }
            let key = WorkloadKey::new(self.kind, ns, name);
            self.ctx.engine.workload_deleted(&key);
        }
    }

    /// Workloads deleted while the watch was down.
    fn list_mark(&self) -> ListMark {
        self.ctx.ownership.list_mark()
    }

    /// Nothing of this kind indexed yet (the first stream's first list at start-up): nothing
    /// the list could find gone. A stream started again later diffs its first list, and so
    /// does each scoped stream after the first: the others' workloads are in the index.
    fn diffs_first_list(&self) -> bool {
        self.ctx.index.holds_workloads_of(self.kind)
    }

    fn reset(
        &mut self,
        namespace: Option<&str>,
        seen: Option<HashSet<WorkloadKey>>,
        _first: bool,
        mark: ListMark,
    ) {
        if let Some(seen) = seen {
            self.ctx.forget_unlisted(self.kind, namespace, &seen, mark);
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        watch_error(self.ctx.observer.as_ref(), self.kind.as_str(), error);
    }
}

impl WatchContext {
    /// After a list of `kind` in `namespace` (`None`: all) returned `seen`: the workloads it did
    /// not return were deleted meanwhile.
    pub(super) fn forget_unlisted(
        &self,
        kind: WorkloadKind,
        namespace: Option<&str>,
        seen: &HashSet<WorkloadKey>,
        mark: ListMark,
    ) {
        let ownership = &self.ownership;
        self.engine.workloads_listed(kind, namespace, seen, |ns| {
            ownership.listed_throughout(ns, mark)
        });
    }

    /// Hands one workload object to the engine; returns its key when it was taken in. A
    /// Rollout using a Deployment's template (`workloadRef`) goes in with it, and a Deployment
    /// such Rollouts use takes them in again with its new template.
    pub(crate) async fn apply_workload(
        &self,
        kind: WorkloadKind,
        obj: WorkloadObject,
    ) -> Option<WorkloadKey> {
        let obj = match kind {
            WorkloadKind::Rollout => self.resolve_rollout(obj).await,
            WorkloadKind::Deployment => {
                self.refresh_template_users(&obj).await;
                obj
            }
            _ => obj,
        };
        self.engine
            .workload_applied(kind, obj, self.is_ready())
            .await
    }
}
