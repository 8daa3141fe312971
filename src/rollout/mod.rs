//! Rollout strategies: what a reload writes (template), how (per workload kind), and the single
//! rate-limited, coalescing write queue everything goes through.

pub mod naming;
pub mod queue;
pub mod template;

pub use queue::{
    QueueObserver, QueueSettings, QueuedChange, ReloadQueue, WorkloadWriter, WriteError,
    WriteOutcome,
};
