//! Whether the API server shards this replica's lists and watches (`--server-side-sharding`),
//! decided before the first lists: a probe list carrying a selector that selects every
//! namespace comes back with `metadata.shardInfo` only from a server that applied it. A probe
//! that fails (a 500, a timeout) is retried in the background with backoff; turning the
//! selector on later is safe, as open watches re-open with it (`shard/server_filter.rs`).

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::config::NamespaceScope;
use crate::config::shard::ServerSharding;
use crate::model::ConfigKind;
use crate::shard::ranges::{HashRange, selector};
use crate::shard::{NAMESPACE_FIELD, with_selector};

use super::context::WatchContext;

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

impl WatchContext {
    /// Probes the server (unless `off`) and, if the decision is to shard there, turns the
    /// selector on; logs the mode once and reports it to the metrics.
    pub(super) async fn decide_server_sharding(self: &Arc<Self>) {
        let (Some(_), Some(shard)) = (self.ownership.shard(), self.settings.shard.as_ref()) else {
            return;
        };
        // Plain --enable-ha: the leader acts on everything. A fixed namespace list: one stream
        // per namespace, nothing cluster-wide to shard.
        if !shard.sharding || self.settings.scope != NamespaceScope::All {
            return;
        }
        let mode = shard.server_sharding;
        let probe = match mode {
            ServerSharding::Off => None,
            _ => Some(self.probe_shard_selector().await),
        };
        let failed = matches!(probe, Some(Err(_)));
        if let Some(Err(error)) = &probe {
            warn!(%error, "the sharded-list probe failed; retrying it in the background");
        }
        let decision = decide(mode, probe);
        self.apply_decision(mode, decision);
        if failed && mode == ServerSharding::Auto {
            tokio::spawn(self.clone().probe_again());
        }
    }

    /// Retries a failed probe with backoff until the server answers.
    async fn probe_again(self: Arc<Self>) {
        let mut delay = PROBE_RETRY_FIRST;
        loop {
            tokio::time::sleep(delay).await;
            match self.probe_shard_selector().await {
                Ok(honoured) => {
                    let decision = decide(ServerSharding::Auto, Some(Ok(honoured)));
                    self.apply_decision(ServerSharding::Auto, decision);
                    return;
                }
                Err(error) => {
                    warn!(%error, retry_in = ?delay * 2, "the sharded-list probe failed again")
                }
            }
            delay = (delay * 2).min(PROBE_RETRY_MAX);
        }
    }

    fn apply_decision(&self, mode: ServerSharding, decision: Decision) {
        let Some(state) = self.ownership.shard() else {
            return;
        };
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
            state.use_server_sharding();
        }
        self.observer
            .server_side_sharding(matches!(decision, Decision::Server { .. }));
    }

    /// One object of a watched config kind, listed with a selector of the whole hash space:
    /// true when the answer carries `metadata.shardInfo`.
    async fn probe_shard_selector(&self) -> Result<bool, String> {
        let resource = if self.settings.watches_config(ConfigKind::ConfigMap) {
            "configmaps"
        } else {
            "secrets"
        };
        let everything = [HashRange {
            start: 0,
            end: 1 << 64,
        }];
        let all = selector(NAMESPACE_FIELD, &everything).expect("one range");
        let list: http::Uri = format!("/api/v1/{resource}?limit=1")
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
