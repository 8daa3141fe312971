//! Secrets of an ignored type (`--ignore-secret-types`, by default Helm's release records) are
//! excluded server-side from every list and watch, so their changes never reach the index. A
//! workload that does use one would silently never reload for it: it gets one Warning (log line
//! and Event) instead.
//!
//! Kept off the data path: nothing is checked while the first lists run; once ready, one sweep
//! of the index finds the Secrets used but never indexed, and later a workload event only looks
//! its own Secrets up in the index (the check follows [`SETTLE`] later). Each such Secret is asked about once (re-asked at most every
//! [`RECHECK_AFTER`]), by one metadata-only list of that name and type (no payload crosses the
//! wire), at most [`PROBES_PER_SECOND`]; most are simply not created yet.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, warn};

use crate::engine::intake::SecretNotice;
use crate::model::{ConfigKey, ConfigKind, WorkloadKey};
use crate::resources::api_resource;
use crate::resources::workload_reference;

use super::context::WatchContext;
use super::context::WatchError;

/// The API server gets at most this many probes per second from this check.
pub const PROBES_PER_SECOND: u32 = 5;
/// A Secret found absent (or of a watched type) is asked about again only after this long.
pub const RECHECK_AFTER: Duration = Duration::from_secs(600);
/// A workload event is checked this long after it arrived: a workload of a namespace just
/// gained (shard handover, namespace selection) is indexed before its namespace's configs are
/// listed, and by then they are, so nothing is asked about them.
pub const SETTLE: Duration = Duration::from_secs(30);

/// What the check knows of each referenced Secret the index does not hold, and whom it warned.
/// Owned by the check's task alone.
#[derive(Default)]
struct Verdicts {
    /// `Some(type)`: exists with an ignored type (immutable in Kubernetes); `None`: was not, at
    /// that time.
    by_config: HashMap<ConfigKey, (Option<String>, Instant)>,
    warned: HashSet<(WorkloadKey, ConfigKey)>,
}

impl Verdicts {
    fn needs_probe(&self, config: &ConfigKey, now: Instant) -> bool {
        match self.by_config.get(config) {
            None => true,
            Some((Some(_), _)) => false,
            Some((None, at)) => now.duration_since(*at) >= RECHECK_AFTER,
        }
    }

    fn record(&mut self, config: ConfigKey, ignored_type: Option<String>, now: Instant) {
        self.by_config.insert(config, (ignored_type, now));
    }

    fn ignored_type(&self, config: &ConfigKey) -> Option<&str> {
        self.by_config.get(config)?.0.as_deref()
    }

    /// True the first time `workload` is warned about `config`.
    fn first_warning(&mut self, workload: &WorkloadKey, config: &ConfigKey) -> bool {
        self.warned.insert((workload.clone(), config.clone()))
    }
}

impl WatchContext {
    /// The check's task: sweeps the index once, then follows workload notices.
    pub(super) async fn check_ignored_secrets(
        self: Arc<Self>,
        mut notices: mpsc::UnboundedReceiver<SecretNotice>,
    ) -> Result<(), WatchError> {
        let mut verdicts = Verdicts::default();
        let mut pace = tokio::time::interval(Duration::from_secs(1) / PROBES_PER_SECOND);
        pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let swept = self.index.unresolved_configs(ConfigKind::Secret);
        debug!(
            count = swept.len(),
            "Secrets used but not indexed, checking their types"
        );
        for key in swept {
            self.check_one(key, &mut verdicts, &mut pace).await;
        }
        while let Some((key, seen_at)) = notices.recv().await {
            tokio::time::sleep_until(seen_at + SETTLE).await;
            self.check_one(key, &mut verdicts, &mut pace).await;
        }
        Err(WatchError::Ended("ignored-Secret-type check".into()))
    }

    async fn check_one(
        &self,
        key: ConfigKey,
        verdicts: &mut Verdicts,
        pace: &mut tokio::time::Interval,
    ) {
        // Indexed meanwhile (created, or a backfill caught up): it is watched.
        if self.index.config(&key).is_some() || !self.ownership.owns(&key.namespace) {
            return;
        }
        if verdicts.needs_probe(&key, Instant::now()) {
            pace.tick().await;
            let found = match self.ignored_type_of(&key).await {
                Ok(found) => found,
                Err(e) => {
                    debug!(config = %key, error = %e, "could not check the Secret's type");
                    None
                }
            };
            verdicts.record(key.clone(), found, Instant::now());
        }
        let Some(secret_type) = verdicts.ignored_type(&key).map(str::to_owned) else {
            return;
        };
        self.ignored_types.insert(key.clone(), secret_type.clone());
        for entry in self.index.candidates(&key) {
            if entry.edge_configs().contains(&key) && verdicts.first_warning(&entry.key, &key) {
                self.warn_ignored(&entry.key, &key, &secret_type).await;
            }
        }
    }

    /// The ignored type `config` has, if it exists with one (a metadata-only list of that one
    /// name and type per ignored type; the resource label selector applies as to the watch).
    async fn ignored_type_of(&self, config: &ConfigKey) -> Result<Option<String>, kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &config.namespace);
        for secret_type in &self.settings.ignored_secret_types {
            let mut params = ListParams::default()
                .match_any()
                .fields(&format!("metadata.name={},type={secret_type}", config.name));
            if let Some(selector) = &self.settings.resource_label_selector {
                params = params.labels(selector);
            }
            if !api.list_metadata(&params).await?.items.is_empty() {
                return Ok(Some(secret_type.clone()));
            }
        }
        Ok(None)
    }

    async fn warn_ignored(&self, workload: &WorkloadKey, config: &ConfigKey, secret_type: &str) {
        let message = ignored_message(config, secret_type);
        warn!(workload = %workload, secret = %config.name, secret_type, "{message}");
        // The Event carries the workload's uid, or `kubectl describe` would not show it.
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &workload.namespace,
            &api_resource(workload.kind),
        );
        let uid = match api.get_metadata_opt(&workload.name).await {
            Ok(meta) => meta.and_then(|m| m.metadata.uid),
            Err(e) => {
                debug!(workload = %workload, error = %e, "no uid for the Event");
                None
            }
        };
        self.engine
            .warn_ignored_secret(&workload_reference(workload, uid), message)
            .await;
    }
}

/// The Warning's text: what is not watched, why, and what to do.
fn ignored_message(config: &ConfigKey, secret_type: &str) -> String {
    format!(
        "Secret '{}' in namespace '{}' has type '{secret_type}', which is never watched \
         (--ignore-secret-types / Helm value reloader.ignoreSecretTypes): its changes will not \
         reload this workload",
        config.name, config.namespace
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkloadKind;

    fn secret(name: &str) -> ConfigKey {
        ConfigKey::new(ConfigKind::Secret, "ns", name)
    }

    #[test]
    fn a_secret_is_probed_once_and_an_absent_one_again_only_after_a_while() {
        let mut v = Verdicts::default();
        let t0 = Instant::now();
        assert!(v.needs_probe(&secret("helm"), t0));
        v.record(secret("helm"), Some("helm.sh/release.v1".into()), t0);
        v.record(secret("later"), None, t0);
        let much_later = t0 + RECHECK_AFTER * 10;
        assert!(
            !v.needs_probe(&secret("helm"), much_later),
            "types never change"
        );
        assert!(!v.needs_probe(&secret("later"), t0 + RECHECK_AFTER / 2));
        assert!(v.needs_probe(&secret("later"), t0 + RECHECK_AFTER));
        assert_eq!(v.ignored_type(&secret("helm")), Some("helm.sh/release.v1"));
        assert_eq!(v.ignored_type(&secret("later")), None);
    }

    #[test]
    fn each_workload_is_warned_once_per_secret() {
        let mut v = Verdicts::default();
        let (a, b) = (
            WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"),
            WorkloadKey::new(WorkloadKind::Deployment, "ns", "b"),
        );
        assert!(v.first_warning(&a, &secret("helm")));
        assert!(!v.first_warning(&a, &secret("helm")));
        assert!(v.first_warning(&b, &secret("helm")));
        assert!(v.first_warning(&a, &secret("other")));
    }

    #[test]
    fn the_message_names_the_secret_its_type_and_the_setting() {
        let m = ignored_message(&secret("release"), "helm.sh/release.v1");
        assert!(m.contains("'release'") && m.contains("'ns'"), "{m}");
        assert!(m.contains("helm.sh/release.v1") && m.contains("--ignore-secret-types"));
    }
}
