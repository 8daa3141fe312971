//! Kinds a flag turns on whose API a cluster may not serve: the Secrets Store CSI driver's pod
//! statuses (`--enable-csi-integration`), Argo Rollouts (`--is-Argo-Rollouts`) and OpenShift
//! DeploymentConfigs (`--is-openshift`). A values file is often shared by clusters with and
//! without the CRD. Reloader checks once whether the CRD is installed and skips that controller
//! if not; here the kind's watch waits, asking discovery every `--optional-api-check-interval`,
//! and starts when the API appears, so installing the CRD later needs no restart. Meanwhile
//! start-up, `/ready` and every other kind's changes go on: a kind that does not exist is never
//! waited for. A CRD deleted later stops its watch the same way (instead of a watch retrying
//! 404s for ever).

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use tracing::{info, warn};

use crate::config::Settings;
use crate::model::{ConfigKind, WorkloadKind};
use crate::resources::OptionalApi;

use super::context::{SyncGate, WatchContext, WatchError};

/// What discovery said of an optional API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    Served,
    NotServed,
    /// Discovery failed (not a 404): asked again at the next check.
    Unknown(String),
}

/// Asks discovery whether `api` is served: its group version lists the resource.
pub async fn discover(client: &Client, api: OptionalApi) -> Discovery {
    match client.list_api_group_resources(api.group_version).await {
        Ok(list) => match list.resources.iter().any(|r| r.name == api.resource) {
            true => Discovery::Served,
            false => Discovery::NotServed,
        },
        Err(kube::Error::Api(status)) if status.code == 404 => Discovery::NotServed,
        Err(e) => Discovery::Unknown(e.to_string()),
    }
}

/// The optional APIs `settings` turn on (the controller watches them, lint checks them).
pub fn optional_apis(settings: &Settings) -> Vec<OptionalApi> {
    let workloads = WorkloadKind::all()
        .into_iter()
        .filter(|k| settings.handles_workload(*k))
        .filter_map(OptionalApi::of_workload);
    let configs = ConfigKind::ALL
        .into_iter()
        .filter(|k| settings.watches_config(*k))
        .filter_map(OptionalApi::of_config);
    workloads.chain(configs).collect()
}

impl WatchContext {
    /// The first check of every optional API the settings turn on, before any watch starts.
    pub(super) async fn discover_optional_apis(&self) {
        for api in optional_apis(&self.settings) {
            self.check(api).await;
        }
    }

    /// Whether the workloads of `kind` can be listed now (the settings handle them and their API
    /// is not known to be missing).
    pub(super) fn lists_workloads(&self, kind: WorkloadKind) -> bool {
        self.settings.handles_workload(kind) && self.served.allows(OptionalApi::of_workload(kind))
    }

    /// The same for configs of `kind`.
    pub(super) fn lists_configs(&self, kind: ConfigKind) -> bool {
        self.settings.watches_config(kind) && self.served.allows(OptionalApi::of_config(kind))
    }

    /// Runs `watch` (given a gate counting its `streams` first lists) while `api` is served. The
    /// kind's share of `gate` is released at its first list, or at once when the API is not
    /// served, so start-up never waits for a kind the cluster does not have.
    pub(super) async fn while_served<F, Fut>(
        self: Arc<Self>,
        api: OptionalApi,
        gate: SyncGate,
        streams: usize,
        watch: F,
    ) -> Result<(), WatchError>
    where
        F: Fn(SyncGate) -> Fut,
        Fut: Future<Output = Result<(), WatchError>>,
    {
        let mut share = Some(gate);
        let release = |share: &mut Option<SyncGate>| {
            if let Some(gate) = share.take() {
                gate.done_many(streams);
            }
        };
        loop {
            if !self.served.allows(Some(api)) {
                release(&mut share);
                self.wait_until_served(api, true).await;
            }
            let own = SyncGate::new(streams);
            let watching = watch(own.clone());
            tokio::pin!(watching);
            let gone = self.wait_until_served(api, false);
            tokio::pin!(gone);
            loop {
                tokio::select! {
                    ended = &mut watching => return ended,
                    () = own.wait(), if share.is_some() => release(&mut share),
                    () = &mut gone => break,
                }
            }
        }
    }

    /// Checks `api` every interval until its served state is `served` (it was just checked).
    async fn wait_until_served(&self, api: OptionalApi, served: bool) {
        loop {
            tokio::time::sleep(self.settings.optional_api_check_interval).await;
            if self.check(api).await == Some(served) {
                return;
            }
        }
    }

    /// One discovery check of `api`: recorded, counted, and logged when what is known changes.
    /// `None` when discovery failed (what was known stays).
    async fn check(&self, api: OptionalApi) -> Option<bool> {
        let served = match discover(&self.client, api).await {
            Discovery::Served => true,
            Discovery::NotServed => false,
            Discovery::Unknown(error) => {
                warn!(api = %api.label(), %error, "API discovery failed; checking again later");
                return None;
            }
        };
        self.observer.api_served(api, served);
        if self.served.record(api, served) {
            let interval = self.settings.optional_api_check_interval;
            match served {
                true => info!(api = %api.label(), feature = api.feature, "API served: watching it"),
                false => warn!(
                    api = %api.label(),
                    feature = api.feature,
                    check_every = ?interval,
                    "API not served (its CRD is not installed): skipped until it is; nothing else waits for it"
                ),
            }
        }
        Some(served)
    }
}
