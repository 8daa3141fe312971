//! The published shard assignment: a generation and the live members. Owners follow from the
//! rendezvous hash, so the assignment stays small whatever the number of namespaces.

use serde::{Deserialize, Serialize};

use super::ring;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Increases with every change; replicas ignore older generations.
    pub generation: u64,
    /// Sorted member identities (POD_NAME).
    pub members: Vec<String>,
}

impl Assignment {
    pub fn owner(&self, namespace: &str) -> Option<&str> {
        ring::owner(namespace, &self.members)
    }
}
