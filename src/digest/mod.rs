//! Reduces a config payload to what the controller keeps: a blake3 change detector and the
//! Reloader SHA-1 that is written into workloads. Payloads are consumed here and never stored.

mod pool;
mod recipes;

pub use pool::{DigestPool, DigestPoolClosed};
pub use recipes::{ConfigPayload, DELETE_MARKER, Digest, digest_payload, reloader_sha1_hex};
