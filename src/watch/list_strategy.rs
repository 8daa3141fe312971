//! How the config and workload watches get their initial state.
//!
//! A paginated list holds a whole page of objects at once, and a list at resourceVersion 0 is
//! served from the API server's watch cache, which ignores the page size: with large Secrets the
//! start-up peak was several times the steady memory (50 Secrets of 1 MiB: 225 MiB peak for
//! 64 MiB steady), and every replica receives the whole cluster's workloads in one response. A
//! streaming list (`sendInitialEvents`, KEP-3157) sends the objects one by one as watch events,
//! so memory stays at one object plus the index. Servers that do not serve it (the WatchList
//! feature is off before Kubernetes 1.32) get paginated lists instead.
//!
//! Every initial list asks for the most recent state, not "any version": a list at
//! `resourceVersion=0` may be served from a watch cache that lags, and what a start-up or a
//! relist reads is what its catch-up acts on (`tests/watch_faults.rs` serves such a list).
//! Streaming lists start at kube-runtime's resourceVersion 0, which the API server serves from
//! its watch cache.

use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::resources::CONFIG_PAGE_SIZE;

/// A label no object carries: the probe lists nothing, it only asks whether the server streams.
const PROBE_SELECTOR: &str = "kube-reloader.io/streaming-list-probe";
const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// The initial-list part of a watch's settings: streaming, or pages of `page_size`.
pub fn initial_list(streaming: bool, page_size: u32) -> watcher::Config {
    if streaming {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default().page_size(page_size)
    }
}

/// The initial-list part of a config watch's settings.
pub fn config_watch(streaming: bool) -> watcher::Config {
    initial_list(streaming, CONFIG_PAGE_SIZE)
}

/// Whether the API server completes a streaming list for `api` (one empty watch request).
pub async fn streaming_lists_served<K>(api: Api<K>, fields: Option<&str>) -> bool
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut config = watcher::Config::default()
        .streaming_lists()
        .labels(PROBE_SELECTOR)
        .timeout(5);
    if let Some(fields) = fields {
        config = config.fields(fields);
    }
    let probe = async {
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::InitDone) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the watch ended before the initial events".to_owned())
    };
    match tokio::time::timeout(PROBE_DEADLINE, probe).await {
        Ok(Ok(())) => {
            info!(
                "the API server streams initial lists: config and workload watches use streaming lists"
            );
            true
        }
        Ok(Err(error)) => {
            warn!(%error, page_size = CONFIG_PAGE_SIZE, "no streaming lists: config and workload watches list in pages");
            false
        }
        Err(_) => {
            warn!(
                page_size = CONFIG_PAGE_SIZE,
                "no end of initial events within {PROBE_DEADLINE:?}: config and workload watches list in pages"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::{InitialListStrategy, ListSemantic};

    #[test]
    fn paginated_config_lists_are_bounded_pages_and_streaming_lists_are_not_paged() {
        let paged = config_watch(false);
        assert_eq!(paged.initial_list_strategy, InitialListStrategy::ListWatch);
        assert_eq!(paged.page_size, Some(CONFIG_PAGE_SIZE));
        assert_eq!(paged.list_semantic, ListSemantic::MostRecent);
        let streaming = config_watch(true);
        assert_eq!(
            streaming.initial_list_strategy,
            InitialListStrategy::StreamingList
        );
        assert!(streaming.bookmarks, "streaming lists end on a bookmark");
    }
}
