//! The HTTP client every notification goes through: a timeout, an optional proxy, no
//! redirects, a bounded retry, and logs that never carry the URL.

use std::time::Duration;

use tracing::warn;

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
