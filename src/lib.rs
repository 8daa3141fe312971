//! kube-reloader: rolls Kubernetes workloads when the ConfigMaps, Secrets or CSI secrets they use
//! change. The modules below follow a config change: the shared leaves and the settings, the
//! pure rules, then the stages an event passes through (watch -> digest -> index -> engine ->
//! rollout), then the edges. The data path and each module's concern: docs/architecture.md.

// Shared leaves: identities, Kubernetes resources, Go-format values, span attributes, the watch
// backoff.
/// Kinds declared with `--custom-kind`: resources with a pod template somewhere.
pub mod custom_kinds;
/// Booleans and durations as Reloader's Go flags and annotations write them.
pub mod go_values;
/// Plain identities (config and workload keys, kinds) every stage shares.
pub mod model;
/// The API resource of each kind read or written.
pub mod resources;
/// Span attributes of a reload (OpenTelemetry semantic conventions).
pub mod spans;
/// How long a broken watch waits before it tries again (the stages' watches and the shard
/// assignment's).
pub mod watch_backoff;

// Settings and what follows from them.
/// What RBAC lets this identity do, reviewed at start, and the fallbacks that follows.
pub mod access;
/// Reloader's flags and the validated settings built from them.
pub mod config;
/// Which namespaces this replica acts on: selectors, Leases, the shard assignment and its view.
pub mod shard;

// Pure rules.
/// The reload decision for one (changed config, workload) pair.
pub mod decide;
/// Pod-level restarts by eviction: the record kept on a workload and the next step. Pure.
pub mod pod_restart;
/// Which configs a pod template uses and which container gets the reload env var.
pub mod references;
/// A workload's reload policy, parsed once from its annotations.
pub mod reload_policy;
/// When a workload may be reloaded: maintenance windows and a delay after a change.
pub mod reload_windows;
/// What Reloader writes: hash recipes, env var and annotation names, template edits.
pub mod reloader_format;
/// Safe reloads: the wave policy, the plan, workload health and the wave state machine.
pub mod waves;

// The data path, in the order a config event meets it.
/// The optional mutating admission webhook: current hashes written at create and update.
pub mod admission;
/// Alerts after reloads (Slack, Teams, Google Chat, webhook) and `--webhook-url`.
pub mod alert;
/// Payload digests on a worker pool off the async runtime; payloads are never kept.
pub mod digest;
/// Index events -> decisions -> queued writes.
pub mod engine;
/// The hand-over: gaining and losing namespaces without a gap or a double roll.
pub mod handover;
/// The reverse index: config -> workloads, with what is remembered of each.
pub mod index;
/// Kubernetes' protobuf wire format, decoded straight into what the watches hand on. Pure.
pub mod protobuf;
/// The one write path: the fair, coalescing, rate-limited queue, the writer, Events, pauses.
pub mod rollout;
/// Shadow mode: decide beside the incumbent, write nothing, judge its writes.
pub mod shadow;
/// The watches (and listed fallbacks) that feed the engine.
pub mod watch;

// Edges: what the outside sees and asks.
/// Wires the stages together and runs them.
pub mod controller;
/// `explain`, `lint` and `/debug/explain`: verdicts from the controller's own code.
pub mod explain;
/// The admin endpoint: metrics, probes, `/debug/explain`, profiles.
pub mod http;
/// Logs, trace export, metrics, the meta-info ConfigMap.
pub mod telemetry;
