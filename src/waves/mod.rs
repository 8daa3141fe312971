//! Safe reloads: a change that affects many workloads is rolled in waves, each started only
//! when the one before is healthy on the new template, and halted (the rest held) when a wave
//! fails. Opt-in (`--waves`, the `kube-reloader.io/waves` annotation on a config or namespace);
//! with nothing set every affected workload is queued at once, as Reloader does. The policy,
//! the plan, the health reading and the state machine here are pure; the runner that does the
//! I/O is part of the write path (`rollout/wave_runner.rs`).

mod health;
mod plan;
mod policy;
mod record;
mod sequence;

pub use health::{Health, assess};
pub use plan::{CANARY_LABEL, Candidate, plan_waves};
pub use policy::{PolicyText, RESUME_ANNOTATION, WAVES_ANNOTATION, WavePolicy, resolve};
pub use record::{HALTS_CONFIGMAP, HELD_PREFIX, HaltRecord, data_key, kept_key, records_from};
pub use sequence::{Halt, Sequence, Step};
