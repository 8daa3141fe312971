//! Workloads found by LIST instead of a watch: the RBAC fallback for an identity that may list
//! workloads but not watch them (Reloader's chart grants `list, get, update, patch`), or
//! `--list-workloads`. Each kind is listed in full at start (the start-up reconcile needs the
//! index) and every [`RESYNC`] (for explain and pause timers), and in a config's namespace
//! before a change of that config is decided, which is what Reloader does on every event: a
//! workload created or edited just before the change is seen.
//!
//! One lock per kind orders its lists, so a list taken earlier never overwrites the index after
//! one taken later.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use tracing::{info, warn};

use crate::handover::gains::PageRequest;
use crate::index::WorkloadObject;
use crate::model::{WorkloadKey, WorkloadKind};
use crate::protobuf::workload_decoder;
use crate::resources::api_resource;

use super::context::{SyncGate, WatchContext, WatchError, stream_namespaces};

/// How often a listed kind is listed in full.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Longest wait before a failed full list is tried again.
const RETRY_CAP: Duration = Duration::from_secs(30);

impl WatchContext {
    /// Lists `kind` in `namespace` (`None`: every namespace) into the index and forgets what the
    /// list did not return there.
    async fn relist(&self, kind: WorkloadKind, namespace: Option<&str>) -> Result<(), kube::Error> {
        let order = self
            .listed
            .order(kind)
            .expect("relist is called for listed kinds only");
        let _ordered = order.lock().await;
        let ar = api_resource(kind);
        let api: Api<WorkloadObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let mut params = crate::resources::workload_list_params(kind);
        let mut seen: HashSet<WorkloadKey> = HashSet::new();
        let mark = self.ownership.list_mark();
        let decode = workload_decoder(kind);
        loop {
            let page = self
                .list_page(PageRequest {
                    api: &api,
                    resource: kind.as_str(),
                    params: &params,
                    shard_selector: None,
                    decode: decode.clone(),
                })
                .await?;
            for obj in page.items {
                if let Some(key) = self.apply_workload(kind, obj).await {
                    seen.insert(key);
                }
            }
            match page.continue_token {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        self.forget_unlisted(kind, namespace, &seen, mark);
        Ok(())
    }

    /// Before a change of a config in `namespace` is decided: the listed kinds there, fresh.
    /// A failed list is logged and the change is decided on what the index holds.
    pub(super) async fn refresh_listed(&self, namespace: &str) {
        // Not gated on readiness: config watches start after every workload kind's first list,
        // and a live change must not wait for a kind still starting (or one never served).
        if self.listed.is_empty() || !self.settings.namespace_in_scope(namespace) {
            return;
        }
        // The kinds at once: the change waits for the slowest list, not for their sum.
        let lists = self
            .listed
            .kinds()
            .filter(|kind| self.lists_workloads(*kind))
            .map(|kind| async move { (kind, self.relist(kind, Some(namespace)).await) });
        for (kind, listed) in futures::future::join_all(lists).await {
            if let Err(e) = listed {
                warn!(kind = kind.as_str(), namespace, error = %e, "listing workloads before a config change failed; deciding on the last list");
                self.observer.watch_restarted(kind.as_str());
            }
        }
    }
}

/// Lists `kind` in full now and every [`RESYNC`], in each namespace of the scope; counts each
/// namespace's first list on `gate`. Runs forever.
pub(super) async fn poll_kind(
    ctx: Arc<WatchContext>,
    kind: WorkloadKind,
    gate: SyncGate,
) -> Result<(), WatchError> {
    info!(kind = kind.as_str(), resync = ?RESYNC, "workloads of this kind are found by LIST, not watched");
    let namespaces = stream_namespaces(&ctx.settings.scope);
    let mut first = true;
    loop {
        for namespace in &namespaces {
            let mut retry = Duration::from_secs(1);
            while let Err(e) = ctx.relist(kind, namespace.as_deref()).await {
                warn!(kind = kind.as_str(), error = %e, "listing workloads failed, retrying");
                ctx.observer.watch_restarted(kind.as_str());
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_CAP);
            }
            if first {
                gate.done_one();
            }
        }
        first = false;
        tokio::time::sleep(RESYNC).await;
    }
}
