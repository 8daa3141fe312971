//! Outgoing HTTP notifications: `--webhook-url` (Reloader's "call this instead of reloading")
//! and, after reloads, alerts to Slack, Teams, Google Chat or a webhook. Sending never blocks the
//! write path: each send runs on its own task with a timeout and a bounded retry. URLs often
//! embed tokens, so they are never logged.

mod poster;
mod sink;
mod webhook;

pub use poster::{AlertError, HttpPoster};
pub use sink::{AlertConfig, AlertSink, Alerter, alert_text, payload};
pub use webhook::ReloadWebhook;
