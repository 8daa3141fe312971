//! `--webhook-url`: Reloader's "call this instead of reloading".

use std::time::Duration;

use tracing::info;

use super::poster::{AlertError, HttpPoster};
use crate::model::ConfigKey;

/// `--webhook-url`: on a config change, POST this instead of rolling workloads (Reloader's mode).
#[derive(Clone)]
pub struct ReloadWebhook {
    poster: HttpPoster,
    url: String,
}

impl ReloadWebhook {
    pub fn new(url: String) -> Result<Self, AlertError> {
        Ok(Self {
            poster: HttpPoster::new(None, Duration::from_secs(10), 3)?,
            url,
        })
    }

    /// Sends in the background; returns at once.
    pub fn config_changed(&self, config: &ConfigKey) {
        let this = self.clone();
        let config = config.clone();
        tokio::spawn(async move {
            info!(config = %config, "changes detected, calling the reload webhook instead of reloading");
            let body = r#"{"webhook":"update successful"}"#.to_string();
            this.poster
                .post(&this.url, "application/json", body, "reload webhook")
                .await;
        });
    }
}
