//! Alerts after each successful reload (`ALERT_ON_RELOAD=true`), with Reloader's text and
//! payloads for each sink.

use std::time::Duration;

use serde_json::json;

use super::{AlertError, HttpPoster};
use crate::model::{ConfigKey, WorkloadKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertSink {
    Slack,
    Teams,
    GoogleChat,
    /// Plain text with `*` removed (Reloader's default).
    Webhook,
}

impl AlertSink {
    /// Reloader's `ALERT_SINK`: unknown or empty values mean the raw webhook.
    pub fn parse(value: &str) -> AlertSink {
        match value.trim().to_ascii_lowercase().as_str() {
            "slack" => AlertSink::Slack,
            "teams" => AlertSink::Teams,
            "gchat" => AlertSink::GoogleChat,
            _ => AlertSink::Webhook,
        }
    }
}

/// Reloader's alert text, with `ALERT_ADDITIONAL_INFO` in front when set.
pub fn alert_text(
    config: &ConfigKey,
    workload: &WorkloadKey,
    additional_info: Option<&str>,
) -> String {
    let text = format!(
        "Reloader detected changes in *{}* of type *{}* in namespace *{}*. Hence reloaded *{}* of type *{}* in namespace *{}*",
        config.name,
        config.kind.env_suffix(),
        config.namespace,
        workload.name,
        workload.kind,
        workload.namespace
    );
    match additional_info.map(str::trim) {
        Some(info) => format!("{info} : {text}"),
        None => text,
    }
}

/// The alert for a reload that failed, in the words of Reloader's failure Event.
pub fn failure_text(workload: &WorkloadKey, error: &str, additional_info: Option<&str>) -> String {
    let text = format!(
        "Reloader failed to reload *{}* of type *{}* in namespace *{}*: {}",
        workload.name, workload.kind, workload.namespace, error
    );
    match additional_info.map(str::trim) {
        Some(info) => format!("{info} : {text}"),
        None => text,
    }
}

/// The request body and content type for a sink.
pub fn payload(sink: AlertSink, text: &str) -> (&'static str, String) {
    match sink {
        AlertSink::Slack => (
            "application/json",
            json!({"attachments": [{"color": "good", "author_name": "Reloader", "text": text}]})
                .to_string(),
        ),
        AlertSink::Teams | AlertSink::GoogleChat => {
            ("application/json", json!({"text": text}).to_string())
        }
        AlertSink::Webhook => ("text/plain", text.replace('*', "")),
    }
}

/// Alert settings from Reloader's environment variables.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    pub sink: AlertSink,
    pub url: String,
    pub proxy: Option<String>,
    pub additional_info: Option<String>,
}

impl AlertConfig {
    /// `None` unless `ALERT_ON_RELOAD=true` and `ALERT_WEBHOOK_URL` is set.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Option<AlertConfig> {
        if get("ALERT_ON_RELOAD").as_deref().map(str::trim) != Some("true") {
            return None;
        }
        let url = get("ALERT_WEBHOOK_URL")
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty());
        let Some(url) = url else {
            tracing::error!("ALERT_ON_RELOAD is true but ALERT_WEBHOOK_URL is not set: no alerts");
            return None;
        };
        Some(AlertConfig {
            sink: AlertSink::parse(&get("ALERT_SINK").unwrap_or_default()),
            url,
            proxy: get("ALERT_WEBHOOK_PROXY")
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
            additional_info: get("ALERT_ADDITIONAL_INFO"),
        })
    }
}

/// Sends alerts in the background: a slow or failing receiver never delays a reload.
#[derive(Clone)]
pub struct Alerter {
    config: AlertConfig,
    poster: HttpPoster,
}

impl Alerter {
    pub fn new(config: AlertConfig) -> Result<Self, AlertError> {
        let poster = HttpPoster::new(config.proxy.as_deref(), Duration::from_secs(5), 3)?;
        Ok(Self { config, poster })
    }

    pub fn reloaded(&self, config: &ConfigKey, workload: &WorkloadKey) {
        let text = alert_text(config, workload, self.config.additional_info.as_deref());
        self.send(text, "reload alert");
    }

    /// A reload that keeps failing (or cannot succeed), with the error.
    pub fn failed(&self, workload: &WorkloadKey, error: &str) {
        let text = failure_text(workload, error, self.config.additional_info.as_deref());
        self.send(text, "reload failure alert");
    }

    /// The churn breaker opened or closed on a config.
    pub fn churn_breaker(&self, text: &str) {
        self.send(self.with_info(text), "churn breaker alert");
    }

    /// A change rolled in waves halted (or its halt was released).
    pub fn wave_halt(&self, text: &str) {
        self.send(self.with_info(text), "reload halt alert");
    }

    fn with_info(&self, text: &str) -> String {
        match self.config.additional_info.as_deref().map(str::trim) {
            Some(info) => format!("{info} : {text}"),
            None => text.to_string(),
        }
    }

    fn send(&self, text: String, what: &'static str) {
        let (content_type, body) = payload(self.config.sink, &text);
        let this = self.clone();
        tokio::spawn(async move {
            this.poster
                .post(&this.config.url, content_type, body, what)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConfigKind, WorkloadKind};
    use std::collections::HashMap;

    fn text() -> String {
        alert_text(
            &ConfigKey::new(ConfigKind::ConfigMap, "ns", "cfg"),
            &WorkloadKey::new(WorkloadKind::Deployment, "ns", "web"),
            Some(" prod "),
        )
    }

    #[test]
    fn reference_text_and_payloads() {
        assert_eq!(
            text(),
            "prod : Reloader detected changes in *cfg* of type *CONFIGMAP* in namespace *ns*. Hence reloaded *web* of type *Deployment* in namespace *ns*"
        );
        let (ct, body) = payload(AlertSink::Webhook, &text());
        assert_eq!(ct, "text/plain");
        assert!(!body.contains('*'));
        let (_, slack) = payload(AlertSink::Slack, "hi");
        let v: serde_json::Value = serde_json::from_str(&slack).unwrap();
        assert_eq!(
            v,
            json!({"attachments": [{"color": "good", "author_name": "Reloader", "text": "hi"}]})
        );
        let (_, teams) = payload(AlertSink::Teams, "hi");
        assert_eq!(teams, r#"{"text":"hi"}"#);
    }

    #[test]
    fn config_from_env() {
        let env: HashMap<&str, &str> = [
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_WEBHOOK_URL", "http://x"),
            ("ALERT_SINK", "Slack"),
        ]
        .into();
        let c = AlertConfig::from_vars(|k| env.get(k).map(|s| s.to_string())).unwrap();
        assert_eq!(c.sink, AlertSink::Slack);
        assert!(AlertConfig::from_vars(|_| None).is_none());
        assert_eq!(AlertSink::parse("unknown"), AlertSink::Webhook);
    }
}
