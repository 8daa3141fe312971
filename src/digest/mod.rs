//! Reduces a config payload to what the controller keeps, on a worker pool off the async
//! runtime: a blake3 change detector and the Reloader SHA-1 that is written into workloads
//! (the recipes are [`crate::reloader_format::hash`]). Payloads are consumed here and never
//! stored.

mod pool;
mod source;

pub use pool::{DigestPool, DigestPoolClosed, Reservation};
pub use source::ConfigSource;
