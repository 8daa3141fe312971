//! Histories for the checker's and the impact report's tests: changes of configs in namespace
//! `ns`, each with hash `h<id>`, and sightings of those hashes.

use crate::ledger::{Change, Observation};
use crate::objects::{ConfigRef, Kind};

fn config(name: &str) -> ConfigRef {
    ConfigRef {
        namespace: "ns".into(),
        kind: Kind::ConfigMap,
        name: name.into(),
    }
}

pub fn change(id: usize, cfg: &str, expected: &[&str], t: f64) -> Change {
    Change {
        id,
        config: config(cfg),
        hash: format!("h{id}"),
        expected: expected.iter().map(|s| s.to_string()).collect(),
        t_sent: t,
        t_ack: Some(t + 0.1),
        // Applied in registration order unless a test says otherwise.
        applied: Some(100 + id as u64),
        error: None,
        tag: "chaos".into(),
    }
}

pub fn seen(workload: &str, change: usize, t: f64) -> Observation {
    Observation {
        workload: workload.into(),
        source: "STAKATER_CM_CONFIGMAP".into(),
        hash: format!("h{change}"),
        t,
        generation: 0,
    }
}
