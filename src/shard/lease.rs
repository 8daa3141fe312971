//! Lease primitives: one membership Lease per replica (renewed on a timer, carrying the
//! generation this replica has synced), and leader election on the leader Lease
//! (`--leader-election-id`, by default Reloader's `stakater-reloader-lock`, so `--enable-ha`
//! keeps its meaning). Optimistic concurrency on the Lease's
//! resourceVersion makes the API server the only arbiter.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::liveness::{LeaseRecord, Liveness};

pub const MEMBER_LABEL: &str = "kube-reloader.io/member";
pub const SYNCED_ANNOTATION: &str = "kube-reloader.io/synced-generation";
/// The generation whose previous assignment this replica no longer acts on.
pub const RELEASED_ANNOTATION: &str = "kube-reloader.io/released-generation";
/// Set by a replica shutting down: the leader reassigns its namespaces while it keeps acting.
pub const LEAVING_ANNOTATION: &str = "kube-reloader.io/leaving";
/// The ownership schemes this replica computes (`hash-ranges`): the leader publishes hash ranges
/// only when every member says so, so replicas of an older release never disagree on owners.
pub const OWNERSHIP_ANNOTATION: &str = "kube-reloader.io/ownership";
/// How far the member has acted on config changes, per kind. The hand-over writes and reads its
/// value (`handover::acted`); the Lease only carries it.
pub const ACTED_ANNOTATION: &str = "kube-reloader.io/acted-versions";
const HASH_RANGES: &str = "hash-ranges";
const FIELD_MANAGER: &str = "kube-reloader";

pub fn member_lease_name(me: &str) -> String {
    format!("kube-reloader-member-{me}")
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// Renews (or creates) this replica's membership Lease.
pub async fn renew_member(
    api: &Api<Lease>,
    me: &str,
    duration_secs: i32,
    synced_generation: u64,
    released_generation: u64,
    leaving: bool,
    acted: &str,
) -> Result<(), kube::Error> {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": member_lease_name(me),
            "labels": {MEMBER_LABEL: "true"},
            "annotations": {
                SYNCED_ANNOTATION: synced_generation.to_string(),
                RELEASED_ANNOTATION: released_generation.to_string(),
                LEAVING_ANNOTATION: leaving.to_string(),
                OWNERSHIP_ANNOTATION: HASH_RANGES
            }
        },
        "spec": {
            "holderIdentity": me,
            "leaseDurationSeconds": duration_secs,
            "renewTime": micro_time(now()),
        }
    });
    // Left out while nothing is known (server-side apply then drops an older value, which a
    // start-up read before its first renewal: `acted_before_start`).
    if !acted.is_empty() {
        lease["metadata"]["annotations"][ACTED_ANNOTATION] = json!(acted);
    }
    api.patch(
        &member_lease_name(me),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(lease),
    )
    .await?;
    Ok(())
}

/// What this replica's Lease says it had acted up to before this process started (a restart
/// under the same name), as the annotation's value: the start-up catches up from there. Empty
/// without a Lease.
pub async fn acted_before_start(api: &Api<Lease>, me: &str) -> Result<String, kube::Error> {
    let lease = api.get_opt(&member_lease_name(me)).await?;
    Ok(lease
        .and_then(|l| l.metadata.annotations)
        .and_then(|mut a| a.remove(ACTED_ANNOTATION))
        .unwrap_or_default())
}

/// Removes this replica's membership (graceful shutdown: the leader reassigns at once).
pub async fn leave(api: &Api<Lease>, me: &str) {
    let _ = api
        .delete(&member_lease_name(me), &DeleteParams::default())
        .await;
}

/// A member as seen in its Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub identity: String,
    pub live: bool,
    pub synced_generation: u64,
    pub released_generation: u64,
    pub leaving: bool,
    /// It computes hash-range owners ([`OWNERSHIP_ANNOTATION`]).
    pub hash_ranges: bool,
    /// How far it had acted when it last renewed ([`ACTED_ANNOTATION`]'s value, empty when
    /// absent).
    pub acted: String,
}

/// Every member Lease, live when it changed within its duration by this replica's monotonic
/// clock (see [`Liveness`]): the holders' wall clocks never decide who is alive. A Lease without
/// a duration counts with `default_duration` (`--lease-duration`). With them, the revision the
/// list was read at (0 when the server gave none): a list read without a resourceVersion is
/// consistent, so every write the Leases show happened at or before it.
pub async fn members(
    api: &Api<Lease>,
    liveness: &Mutex<Liveness>,
    default_duration: std::time::Duration,
) -> Result<(Vec<Member>, u64), kube::Error> {
    let default_secs = i32::try_from(default_duration.as_secs()).unwrap_or(i32::MAX);
    let leases = api
        .list(&ListParams::default().labels(&format!("{MEMBER_LABEL}=true")))
        .await?;
    let now = Instant::now();
    let mut liveness = liveness.lock().expect("liveness lock");
    let names: Vec<String> = leases
        .items
        .iter()
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    liveness.retain(|name| names.iter().any(|n| n == name));
    let revision = leases
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let members = leases
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name.clone()?;
            let spec = l.spec?;
            let record = lease_record(&spec, default_secs)?;
            let live = liveness.observe(&name, record.clone(), now);
            let annotations = l.metadata.annotations.unwrap_or_default();
            let generation = |key: &str| {
                annotations
                    .get(key)
                    .and_then(|g| g.parse().ok())
                    .unwrap_or(0)
            };
            Some(Member {
                identity: record.holder,
                live,
                synced_generation: generation(SYNCED_ANNOTATION),
                released_generation: generation(RELEASED_ANNOTATION),
                leaving: annotations
                    .get(LEAVING_ANNOTATION)
                    .is_some_and(|v| v == "true"),
                hash_ranges: annotations
                    .get(OWNERSHIP_ANNOTATION)
                    .is_some_and(|v| v.split(',').any(|s| s.trim() == HASH_RANGES)),
                acted: annotations
                    .get(ACTED_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
            })
        })
        .collect();
    Ok((members, revision))
}

/// The parts of a Lease whose change means "renewed"; None without a holder.
fn lease_record(spec: &LeaseSpec, default_secs: i32) -> Option<LeaseRecord> {
    let seconds = spec.lease_duration_seconds.unwrap_or(default_secs).max(1);
    Some(LeaseRecord {
        holder: spec.holder_identity.clone()?,
        renew_time: spec.renew_time.as_ref().map(|t| micro_time(t.0)),
        duration: Duration::from_secs(u64::try_from(seconds).unwrap_or(1)),
    })
}

fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// One leader-election round: returns whether `me` holds the leader Lease afterwards. Another
/// holder's Lease counts as expired once it has not changed for its duration by this replica's
/// monotonic clock (`liveness`), never by comparing its `renewTime` with our wall clock.
pub async fn try_lead(
    api: &Api<Lease>,
    name: &str,
    me: &str,
    duration_secs: i32,
    liveness: &Mutex<Liveness>,
) -> Result<bool, kube::Error> {
    let now = now();
    let current = api.get_opt(name).await?;
    let Some(lease) = current else {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "holderIdentity": me,
                "leaseDurationSeconds": duration_secs,
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0
            }
        }))
        .expect("a valid Lease");
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let expired = lease_record(&spec, duration_secs).is_none_or(|record| {
        !liveness
            .lock()
            .expect("liveness lock")
            .observe(name, record, Instant::now())
    });
    if holder != me && !holder.is_empty() && !expired {
        return Ok(false);
    }
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder != me);
    let mut next = lease.clone();
    next.spec = Some(serde_json::from_value(json!({
        "holderIdentity": me,
        "leaseDurationSeconds": duration_secs,
        "acquireTime": if holder == me { spec.acquire_time.map(|t| micro_time(t.0)).unwrap_or_else(|| micro_time(now)) } else { micro_time(now) },
        "renewTime": micro_time(now),
        "leaseTransitions": transitions
    }))
    .expect("a valid LeaseSpec"));
    // `replace` carries the resourceVersion we read: a concurrent candidate gets 409.
    match api.replace(name, &PostParams::default(), &next).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives up leadership so another replica takes over without waiting for expiry.
pub async fn resign(api: &Api<Lease>, name: &str, me: &str) {
    if let Ok(Some(mut lease)) = api.get_opt(name).await
        && lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(me)
    {
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        let _ = api.replace(name, &PostParams::default(), &lease).await;
    }
}
