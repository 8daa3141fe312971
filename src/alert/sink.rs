//! Alerts after each successful reload (`ALERT_ON_RELOAD=true`), with Reloader's text and
//! payloads for each sink.

use std::time::Duration;

use serde_json::json;

use super::poster::{AlertError, HttpPoster};
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

/// The Kubernetes kind of a config, as Reloader v2's structured alerts name it.
fn config_kind_name(config: &ConfigKey) -> &'static str {
    match config.kind {
        crate::model::ConfigKind::ConfigMap => "ConfigMap",
        crate::model::ConfigKind::Secret => "Secret",
        crate::model::ConfigKind::SecretProviderClass => "SecretProviderClass",
    }
}

/// `ALERT_STRUCTURED` (`--alert-structured`) on the raw webhook sink: Reloader v2's JSON body
/// for a reload, with the time in RFC 3339 (UTC).
pub fn structured_reload(
    config: &ConfigKey,
    workload: &WorkloadKey,
    additional_info: Option<&str>,
    at: jiff::Timestamp,
) -> String {
    let mut body = json!({
        "event": "reload",
        "workloadKind": workload.kind.as_str(),
        "workloadName": workload.name.as_ref() as &str,
        "workloadNamespace": workload.namespace.as_ref() as &str,
        "resourceKind": config_kind_name(config),
        "resourceName": config.name.as_ref() as &str,
        "resourceNamespace": config.namespace.as_ref() as &str,
        "timestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    if let Some(info) = additional_info.filter(|i| !i.is_empty()) {
        body["additional"] = json!(info);
    }
    body.to_string()
}

/// A structured alert that is not a reload (kube-reloader's own: a failed reload, the churn
/// breaker, a halted wave): the same envelope, with the text as `message`.
fn structured_other(
    event: &str,
    text: &str,
    additional_info: Option<&str>,
    at: jiff::Timestamp,
) -> String {
    let mut body = json!({
        "event": event,
        "message": text.replace('*', ""),
        "timestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    if let Some(info) = additional_info.filter(|i| !i.is_empty()) {
        body["additional"] = json!(info);
    }
    body.to_string()
}

/// Alert settings from Reloader's environment variables.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    pub sink: AlertSink,
    pub url: String,
    pub proxy: Option<String>,
    pub additional_info: Option<String>,
    /// `ALERT_STRUCTURED`: JSON instead of plain text on the raw webhook sink.
    pub structured: bool,
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
            structured: get("ALERT_STRUCTURED")
                .is_some_and(|v| crate::go_values::parse_go_bool(v.trim()) == Ok(true)),
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
        let info = self.config.additional_info.as_deref();
        if self.structured() {
            let body = structured_reload(config, workload, info, jiff::Timestamp::now());
            return self.post_json(body, "reload alert");
        }
        self.send(alert_text(config, workload, info), "reload alert");
    }

    /// A reload that keeps failing (or cannot succeed), with the error.
    pub fn failed(&self, workload: &WorkloadKey, error: &str) {
        if self.structured() {
            let text = failure_text(workload, error, None);
            return self.send_structured("reload-failed", &text, "reload failure alert");
        }
        let text = failure_text(workload, error, self.config.additional_info.as_deref());
        self.send(text, "reload failure alert");
    }

    /// The churn breaker opened or closed on a config.
    pub fn churn_breaker(&self, text: &str) {
        if self.structured() {
            return self.send_structured("churn-breaker", text, "churn breaker alert");
        }
        self.send(self.with_info(text), "churn breaker alert");
    }

    /// A change rolled in waves halted (or its halt was released).
    pub fn wave_halt(&self, text: &str) {
        if self.structured() {
            return self.send_structured("reload-halt", text, "reload halt alert");
        }
        self.send(self.with_info(text), "reload halt alert");
    }

    /// Structured bodies only on the raw webhook sink, as in Reloader v2 (chat sinks keep theirs).
    fn structured(&self) -> bool {
        self.config.structured && self.config.sink == AlertSink::Webhook
    }

    fn send_structured(&self, event: &str, text: &str, what: &'static str) {
        let info = self.config.additional_info.as_deref();
        let body = structured_other(event, text, info, jiff::Timestamp::now());
        self.post_json(body, what);
    }

    fn post_json(&self, body: String, what: &'static str) {
        let this = self.clone();
        tokio::spawn(async move {
            this.poster
                .post(&this.config.url, "application/json", body, what)
                .await;
        });
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
        assert!(!c.structured);
        let env: HashMap<&str, &str> = [
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_WEBHOOK_URL", "http://x"),
            ("ALERT_STRUCTURED", "true"),
        ]
        .into();
        let c = AlertConfig::from_vars(|k| env.get(k).map(|s| s.to_string())).unwrap();
        assert!(c.structured && c.sink == AlertSink::Webhook);
    }

    /// Reloader v2's structured raw-webhook body (`--alert-structured`), field for field.
    #[test]
    fn structured_reload_alert_has_reloader_v2_fields() {
        let at: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let body = structured_reload(
            &ConfigKey::new(ConfigKind::Secret, "ns", "db"),
            &WorkloadKey::new(WorkloadKind::StatefulSet, "apps", "pg"),
            Some("prod"),
            at,
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v,
            json!({"event": "reload", "workloadKind": "StatefulSet", "workloadName": "pg",
                "workloadNamespace": "apps", "resourceKind": "Secret", "resourceName": "db",
                "resourceNamespace": "ns", "timestamp": "2026-01-02T03:04:05Z",
                "additional": "prod"})
        );
        let v: serde_json::Value = serde_json::from_str(&structured_reload(
            &ConfigKey::new(ConfigKind::ConfigMap, "ns", "c"),
            &WorkloadKey::new(WorkloadKind::Deployment, "ns", "w"),
            None,
            at,
        ))
        .unwrap();
        assert!(v.get("additional").is_none(), "{v}");
        assert_eq!(v["resourceKind"], "ConfigMap");
    }
}
