//! Outgoing HTTP notifications: `--webhook-url` (Reloader's "call this instead of reloading")
//! and, after reloads, alerts to Slack, Teams, Google Chat or a webhook. Sending never blocks the
//! write path: each send runs on its own task with a timeout and a bounded retry. URLs often
//! embed tokens, so they are never logged.

use std::time::Duration;

use tracing::{info, warn};

use crate::model::ConfigKey;

mod sink;

pub use sink::{AlertConfig, AlertSink, Alerter, alert_text, payload};

/// A small HTTP client with a timeout and an optional proxy.
#[derive(Clone)]
pub struct HttpPoster {
    client: reqwest::Client,
    attempts: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("invalid proxy URL: {0}")]
    Proxy(String),
    #[error("building the HTTP client: {0}")]
    Client(String),
}

impl HttpPoster {
    pub fn new(proxy: Option<&str>, timeout: Duration, attempts: u32) -> Result<Self, AlertError> {
        // Redirects are refused, as in Reloader: a redirected webhook usually means a bad token.
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        if let Some(p) = proxy.filter(|p| !p.is_empty()) {
            builder = builder
                .proxy(reqwest::Proxy::all(p).map_err(|e| AlertError::Proxy(e.to_string()))?);
        }
        let client = builder
            .build()
            .map_err(|e| AlertError::Client(e.to_string()))?;
        Ok(Self {
            client,
            attempts: attempts.max(1),
        })
    }

    /// POSTs `body` with `content_type`, retrying with backoff; logs the outcome without the URL.
    pub async fn post(
        &self,
        url: &str,
        content_type: &'static str,
        body: String,
        what: &str,
    ) -> bool {
        let mut backoff = Duration::from_millis(200);
        for attempt in 1..=self.attempts {
            let result = self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body.clone())
                .send()
                .await;
            match result {
                Ok(resp) if resp.status().is_success() => return true,
                Ok(resp) => warn!(
                    what,
                    status = resp.status().as_u16(),
                    attempt,
                    "notification refused"
                ),
                // `without_url`: the URL may carry a token.
                Err(e) => {
                    warn!(what, error = %e.without_url(), attempt, "notification not delivered")
                }
            }
            if attempt < self.attempts {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        false
    }
}

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
