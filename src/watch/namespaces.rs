//! The namespace selector: a label-selected Namespace watch decides which namespaces are
//! watched. A namespace leaving the selection is forgotten; one entering it is listed once
//! (no reloads for what exists) and reconciled against recorded hashes.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use tracing::info;

use crate::engine::Phase;
use crate::handover::backfill::Indexing;

use crate::shard::ListMark;

use super::context::{SyncGate, WatchContext, WatchError, watch_error, watch_streams};
use super::driver::{IndexVerbs, drive};
use crate::protobuf::Decode;
use crate::protobuf::FromProtobuf;

pub(super) async fn run(ctx: Arc<WatchContext>, gate: SyncGate) -> Result<(), WatchError> {
    let selector = ctx.settings.namespace_selector.clone().unwrap_or_default();
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let config = watcher::Config::default().labels(&selector);
    let decode: Decode<Namespace> = Arc::new(Namespace::from_protobuf);
    let stream = ctx.wire_streams("namespace", vec![api], config, Some(decode));
    let mut verbs = SelectionVerbs { ctx: ctx.clone() };
    drive(stream, vec![None], &mut verbs, &gate).await;
    Err(WatchError::Ended("namespace".into()))
}

/// The selected namespaces into the ownership (and, with `--tenant-label`, their tenants).
struct SelectionVerbs {
    ctx: Arc<WatchContext>,
}

impl IndexVerbs<Namespace> for SelectionVerbs {
    type Key = String;

    /// A namespace selected after start-up is indexed as a start-up would, and the configs
    /// changed since the event that selected it are acted on; during the first list the
    /// start-up lists that follow cover it.
    async fn apply(&mut self, ns: Namespace, phase: Phase) -> Option<String> {
        let name = ns.name_any();
        let ctx = &self.ctx;
        ctx.engine.namespace_seen(&name, &ns.metadata);
        if ctx.engine.namespace_selected(&name)
            && phase.after_startup()
            && ctx.ownership.owns(&name)
        {
            let selected_at = crate::index::resource_version(&ns.metadata);
            Indexing::new(&**ctx)
                .namespace_entered(&name, selected_at)
                .await;
        }
        Some(name)
    }

    async fn delete(&mut self, ns: Namespace) {
        self.ctx.engine.namespace_deleted(&ns.name_any());
        self.ctx.engine.namespace_unselected(&ns.name_any());
    }

    /// Namespaces are the ownership's input, not filtered by it.
    fn list_mark(&self) -> ListMark {
        ListMark::default()
    }

    fn reset(&mut self, _: Option<&str>, seen: Option<HashSet<String>>, first: bool, _: ListMark) {
        // Collected on every list: this watch diffs its first list too.
        let seen = seen.unwrap_or_default();
        self.ctx.engine.namespaces_listed(&seen);
        if !first {
            // Namespaces that left the selection while the watch was down (also those holding
            // nothing indexed: they still count as selected in the metrics and ownership).
            for name in self.ctx.ownership.selected_namespaces() {
                if !seen.contains(&*name) {
                    self.ctx.engine.namespace_unselected(&name);
                }
            }
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        watch_error(self.ctx.observer.as_ref(), "namespace", error);
    }
}

/// `--tenant-label` without a namespace selector: watches only the namespaces carrying the label
/// (metadata only), to group them into tenants; the others are their own tenant anyway.
pub(super) async fn run_tenants(
    ctx: Arc<WatchContext>,
    label: String,
    gate: SyncGate,
) -> Result<(), WatchError> {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(ctx.client.clone());
    let stream = watch_streams(vec![api], watcher::Config::default().labels(&label));
    let mut verbs = TenantVerbs {
        label,
        ctx: ctx.clone(),
    };
    drive(stream, vec![None], &mut verbs, &gate).await;
    Err(WatchError::Ended("tenant namespace".into()))
}

/// Labelled namespaces into the tenant groups.
struct TenantVerbs {
    label: String,
    ctx: Arc<WatchContext>,
}

impl IndexVerbs<PartialObjectMeta<Namespace>> for TenantVerbs {
    type Key = String;

    async fn apply(&mut self, ns: PartialObjectMeta<Namespace>, _: Phase) -> Option<String> {
        let name = ns.name_any();
        self.ctx.engine.namespace_seen(&name, &ns.metadata);
        Some(name)
    }

    async fn delete(&mut self, ns: PartialObjectMeta<Namespace>) {
        self.ctx.engine.namespace_deleted(&ns.name_any());
    }

    fn list_mark(&self) -> ListMark {
        ListMark::default()
    }

    fn reset(&mut self, _: Option<&str>, seen: Option<HashSet<String>>, _: bool, _: ListMark) {
        // Collected on every list: this watch diffs its first list too.
        let grouped = self.ctx.engine.namespaces_listed(&seen.unwrap_or_default());
        info!(grouped, label = self.label, "tenants known");
    }

    fn failed(&mut self, error: &watcher::Error) {
        watch_error(self.ctx.observer.as_ref(), "namespace", error);
    }
}
