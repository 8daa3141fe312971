//! Rollout strategies: what a reload writes (template), how (per workload kind, against the API
//! server), pause periods, and the single rate-limited, coalescing write queue with its fair scheduler
//! across tenants.

pub mod events;
mod eviction;
pub mod halts;
mod limiter;
pub mod pause;
mod queue;
mod scheduler;
mod tenants;
pub mod wave_runner;
mod width;
mod writer;

pub use self::writer::{KubeWriter, ViewCheck};
pub use limiter::{TurnPriority, WriteLimiter, write_limiter};
pub use queue::{
    Drained, Hold, QueueObserver, QueueSettings, QueuedChange, ReloadQueue, WorkloadWriter,
    WriteError, WriteOutcome, WriteTurn, classify,
};
pub use scheduler::{Priority, QueueStats, WorkloadQueueState};
pub use tenants::Tenants;
