//! The optional mutating admission webhook (`--admission-addr`): one rollout per upgrade.
//!
//! When a `helm upgrade` changes a workload and a config it uses together, Reloader rolls the
//! workload twice: once for the new template, once more when it sees the config change. Here a
//! workload being created or updated gets the current hash of each config it would be reloaded
//! for written into its template by the API server's admission (the same edit the controller
//! makes), so the controller's reload that follows finds the template current and writes
//! nothing. `--admission-settle` holds every reload that long, so a config applied just before
//! its workload (Helm applies ConfigMaps and Secrets first) is not rolled ahead of it.
//!
//! The webhook is registered with `failurePolicy: Ignore`: when it is down or slow, workloads
//! are admitted unchanged and the controller reloads them as without it.

mod handler;
mod mutation;
mod server;

pub use handler::Admission;
pub use mutation::{Admitted, NothingWritten, ReadConfig, rolls};
pub use server::{AdmissionServer, TlsFiles};
