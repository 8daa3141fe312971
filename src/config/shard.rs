//! The replica set's settings: `--enable-ha`, `--sharding`, `--server-side-sharding`, the leader
//! Lease and its timings. Read by `shard` (which sits above `config`).

use std::time::Duration;

/// The leader Lease's name unless `--leader-election-id` says otherwise: Reloader v1's, so
/// `--enable-ha` keeps its meaning (and the Lease Reloader's chart lets it write).
pub const DEFAULT_LEADER_LEASE: &str = "stakater-reloader-lock";

/// The replica set's settings (`--enable-ha`, `--sharding`, the Lease timings).
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// Where the Leases and the shard assignment live.
    pub namespace: String,
    pub me: String,
    /// The leader Lease (`--leader-election-id`).
    pub leader_lease: String,
    /// Hand the leader Lease back on a graceful exit (`--leader-election-release-on-cancel`).
    pub release_on_cancel: bool,
    /// Split namespaces over all live replicas; false: plain `--enable-ha` (the leader does all).
    pub sharding: bool,
    /// `--server-side-sharding`.
    pub server_sharding: ServerSharding,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Whether to ask the API server to shard (`--server-side-sharding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerSharding {
    /// When a probe list comes back with `metadata.shardInfo` (the server applied the selector).
    #[default]
    Auto,
    /// Always send the selector (objects are still checked on arrival).
    On,
    /// Never: every replica receives everything and keeps its own namespaces.
    Off,
}
