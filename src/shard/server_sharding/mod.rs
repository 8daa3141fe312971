//! Server-side sharding (Kubernetes' sharded list and watch, KEP-5866), in one place: whether
//! the API server shards this replica's lists and watches (`--server-side-sharding`), decided
//! here before the first lists, and the `shardSelector` the client then sends
//! (`filter.rs`, a tower layer under the kube client).
//!
//! The decision: a probe list carrying a selector that selects every namespace comes back with
//! `metadata.shardInfo` only from a server that applied it. A probe that fails (a 500, a
//! timeout) is retried in the background with backoff; turning the selector on later is safe,
//! as open watches re-open with it.

mod filter;

pub use filter::{NAMESPACE_FIELD, SelectorFeed, with_selector};
pub(super) use filter::{covering_selector, selector_of};

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tracing::{info, warn};

use crate::config::shard::ServerSharding;
use crate::config::{NamespaceScope, Settings};
use crate::model::ConfigKind;
use crate::shard::ranges::{HashRange, selector};
use crate::shard::{Ownership, ShardState};

/// The first retry of a failed probe, doubled up to [`PROBE_RETRY_MAX`].
const PROBE_RETRY_FIRST: Duration = Duration::from_secs(5);
const PROBE_RETRY_MAX: Duration = Duration::from_secs(300);

/// What the replica found and chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The server is asked to shard (`honoured`: the probe showed it applies the selector).
    Server { honoured: bool },
    /// Every object arrives and this replica keeps its own namespaces.
    OnArrival,
}

/// The decision for `mode` given the probe's answer (`None`: not probed; `Err`: it failed).
pub fn decide(mode: ServerSharding, probe: Option<Result<bool, String>>) -> Decision {
    let honoured = matches!(probe, Some(Ok(true)));
    match mode {
        ServerSharding::On => Decision::Server { honoured },
        ServerSharding::Auto if honoured => Decision::Server { honoured },
        ServerSharding::Auto | ServerSharding::Off => Decision::OnArrival,
    }
}

/// Where the decision is reported (the `server_side_sharding` gauge): true when the server is
/// asked to shard.
pub type DecisionReport = Arc<dyn Fn(bool) + Send + Sync>;

/// Probes the server (unless `off`) and, if the decision is to shard there, turns the selector
/// on; logs the mode once and reports it. Nothing to decide with plain `--enable-ha` (the leader
/// acts on everything) or a fixed namespace list (one stream per namespace, nothing
/// cluster-wide to shard).
pub async fn decide_server_sharding(
    client: &Client,
    ownership: &Ownership,
    settings: &Settings,
    report: DecisionReport,
) {
    let (Some(state), Some(shard)) = (ownership.shard(), settings.shard.as_ref()) else {
        return;
    };
    if !shard.sharding || settings.scope != NamespaceScope::All {
        return;
    }
    let probe = Probe {
        client: client.clone(),
        resource: match settings.watches_config(ConfigKind::ConfigMap) {
            true => "configmaps",
            false => "secrets",
        },
        state: state.clone(),
        report,
    };
    let mode = shard.server_sharding;
    let answer = match mode {
        ServerSharding::Off => None,
        _ => Some(probe.shard_selector_applied().await),
    };
    let failed = matches!(answer, Some(Err(_)));
    if let Some(Err(error)) = &answer {
        warn!(%error, "the sharded-list probe failed; retrying it in the background");
    }
    probe.apply(mode, decide(mode, answer));
    if failed && mode == ServerSharding::Auto {
        tokio::spawn(probe.again());
    }
}

/// What probing and applying the decision need, owned so a failed probe can be retried in the
/// background.
struct Probe {
    client: Client,
    /// A config kind the replica watches (its RBAC allows listing it).
    resource: &'static str,
    state: Arc<ShardState>,
    report: DecisionReport,
}

impl Probe {
    /// Retries a failed probe with backoff until the server answers.
    async fn again(self) {
        let mut delay = PROBE_RETRY_FIRST;
        loop {
            tokio::time::sleep(delay).await;
            match self.shard_selector_applied().await {
                Ok(honoured) => {
                    let decision = decide(ServerSharding::Auto, Some(Ok(honoured)));
                    self.apply(ServerSharding::Auto, decision);
                    return;
                }
                Err(error) => {
                    warn!(%error, retry_in = ?delay * 2, "the sharded-list probe failed again")
                }
            }
            delay = (delay * 2).min(PROBE_RETRY_MAX);
        }
    }

    fn apply(&self, mode: ServerSharding, decision: Decision) {
        match decision {
            Decision::Server { honoured: true } => {
                info!("server-side sharding: the API server sends this replica only its namespaces")
            }
            Decision::Server { honoured: false } => warn!(
                "--server-side-sharding=on, but the API server did not apply the probe's \
                 shardSelector (feature gate ShardedListAndWatch off?): it may send everything, \
                 and this replica keeps only its own namespaces"
            ),
            Decision::OnArrival => info!(
                ?mode,
                "server-side sharding off: every replica receives every object and keeps its \
                 own namespaces"
            ),
        }
        if let Decision::Server { .. } = decision {
            self.state.use_server_sharding();
        }
        (self.report)(matches!(decision, Decision::Server { .. }));
    }

    /// One object of a watched config kind, listed with a selector of the whole hash space:
    /// true when the answer carries `metadata.shardInfo`.
    async fn shard_selector_applied(&self) -> Result<bool, String> {
        let everything = [HashRange {
            start: 0,
            end: 1 << 64,
        }];
        let all = selector(NAMESPACE_FIELD, &everything).expect("one range");
        let list: http::Uri = format!("/api/v1/{}?limit=1", self.resource)
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let url = with_selector(&list, &all).ok_or("the probe's URI could not carry a selector")?;
        let request = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let list: serde_json::Value = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(list.pointer("/metadata/shardInfo").is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_shards_on_the_server_only_when_the_probe_showed_it_applies() {
        use ServerSharding::*;
        let yes = || Some(Ok(true));
        let no = || Some(Ok(false));
        let failed = || Some(Err("500".to_string()));
        assert_eq!(decide(Auto, yes()), Decision::Server { honoured: true });
        assert_eq!(decide(Auto, no()), Decision::OnArrival);
        assert_eq!(decide(Auto, failed()), Decision::OnArrival);
        assert_eq!(decide(On, no()), Decision::Server { honoured: false });
        assert_eq!(decide(On, yes()), Decision::Server { honoured: true });
        assert_eq!(decide(Off, None), Decision::OnArrival);
    }
}
