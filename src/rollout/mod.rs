//! Rollout strategies: what a reload writes (template), how (per workload kind, against the API
//! server), pause periods, and the single rate-limited, coalescing write queue.

pub mod config_view;
pub mod kube;
pub mod naming;
pub mod pause;
pub mod queue;
pub mod template;

pub use self::kube::KubeWriter;
pub use queue::{
    QueueObserver, QueueSettings, QueuedChange, ReloadQueue, WorkloadWriter, WriteError,
    WriteOutcome, WriteTurn,
};
