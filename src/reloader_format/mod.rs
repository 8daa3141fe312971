//! What Reloader writes, byte for byte: the hash recipes of a config's payload, the names of
//! the env vars and annotations, and the pod template edits of each strategy. Pure: the index
//! reads recorded hashes with it, the writer computes its edits with it, explain shows both,
//! so all three agree with each other and with stakater/Reloader.

pub mod hash;
pub mod naming;
pub mod precise;
pub mod template;
