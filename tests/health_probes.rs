//! Reloader v2's probe server (`--health-addr`, `/healthz` and `/readyz`, the probes of its
//! chart 3.0) beside kube-reloader's own `/live` and `/ready`, and its leader-election flags
//! (`--leader-election-id`, `--leader-election-namespace`, `--leader-election-release-on-cancel`,
//! the `--leader-election-*` timings), against the real API server.

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{Controller, TestNamespace, free_port, http_get, wait_for};

/// The Lease's holder (`None`: nobody holds it).
async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get(name)
        .await
        .expect("reading the leader Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

async fn status(port: u16, path: &str) -> u16 {
    http_get(&format!("http://127.0.0.1:{port}{path}"))
        .await
        .map_or(0, |(code, _)| code)
}

/// `/healthz` and `/readyz` on `--health-addr` (set here through `HEALTH_ADDR`, as Reloader v2
/// reads every flag from the environment) answer as `/live` and `/ready` do: a standby is live
/// but not ready, and becomes ready once it holds the leader Lease named by
/// `--leader-election-id` in `--leader-election-namespace`. On a graceful exit the Lease is
/// handed back, unless `--leader-election-release-on-cancel=false`.
#[tokio::test]
async fn health_addr_serves_healthz_and_readyz_and_leader_election_flags_name_the_lease() {
    let ns = TestNamespace::new("health-probes").await;
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let lock = "reloader-leader-election";
    // Held by a replica that is not there: the controller under test waits as a standby.
    let held: Lease = serde_json::from_value(json!({
        "metadata": {"name": lock},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                 "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &held).await.unwrap();

    let health_port = free_port();
    let health_addr = format!("127.0.0.1:{health_port}");
    let namespaces = format!("--namespaces={}", ns.name);
    let lease_ns = format!("--leader-election-namespace={}", ns.name);
    let args = [
        namespaces.as_str(),
        "--enable-ha",
        "--leader-election-id=reloader-leader-election",
        lease_ns.as_str(),
        "--leader-election-lease-duration=4s",
        "--leader-election-renew-deadline=3s",
        "--leader-election-retry-period=1s",
    ];
    // POD_NAMESPACE is not where the Lease lives: --leader-election-namespace wins.
    let env = [
        ("HEALTH_ADDR", health_addr.as_str()),
        ("POD_NAME", "probe-r0"),
        ("POD_NAMESPACE", "default"),
    ];
    let controller = Controller::launch(&args, &env);

    wait_for(
        "/healthz to answer 200",
        Duration::from_secs(30),
        || async {
            match status(health_port, "/healthz").await {
                200 => Ok(()),
                other => Err(format!("/healthz: {other}")),
            }
        },
    )
    .await;
    // A standby: live, not ready, on both servers alike.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status(health_port, "/readyz").await, 503);
    assert_eq!(status(controller.metrics_port, "/ready").await, 503);
    assert_eq!(status(controller.metrics_port, "/live").await, 200);
    assert_eq!(status(health_port, "/healthz/healthz").await, 200);
    // The probe server serves probes only.
    assert_eq!(status(health_port, "/metrics").await, 404);
    assert_eq!(holder(&leases, lock).await.as_deref(), Some("someone-else"));

    // The other holder lets go: the standby takes the Lease and turns ready.
    leases
        .patch(
            lock,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": null}})),
        )
        .await
        .unwrap();
    wait_for("/readyz to answer 200", Duration::from_secs(30), || async {
        match status(health_port, "/readyz").await {
            200 => Ok(()),
            other => Err(format!("/readyz: {other}")),
        }
    })
    .await;
    assert_eq!(status(health_port, "/readyz/readyz").await, 200);
    assert_eq!(status(controller.metrics_port, "/ready").await, 200);
    assert_eq!(holder(&leases, lock).await.as_deref(), Some("probe-r0"));
    assert!(
        leases
            .get_opt("stakater-reloader-lock")
            .await
            .unwrap()
            .is_none(),
        "the default Lease name must not be used when --leader-election-id is set"
    );
    // Graceful exit: the Lease is handed back (release-on-cancel defaults to true).
    assert!(controller.stop().await.success());
    assert_eq!(holder(&leases, lock).await, None);

    // With release-on-cancel off (from the environment), the Lease is left to expire.
    let health_port = free_port();
    let health_addr = format!("127.0.0.1:{health_port}");
    let env = [
        ("HEALTH_ADDR", health_addr.as_str()),
        ("POD_NAME", "probe-r1"),
        ("POD_NAMESPACE", "default"),
        ("LEADER_ELECTION_RELEASE_ON_CANCEL", "false"),
    ];
    let mut controller = Controller::launch(&args, &env);
    controller.wait_ready().await;
    assert_eq!(status(health_port, "/readyz").await, 200);
    assert_eq!(holder(&leases, lock).await.as_deref(), Some("probe-r1"));
    assert!(controller.stop().await.success());
    assert_eq!(holder(&leases, lock).await.as_deref(), Some("probe-r1"));
}

/// `--health-addr=0` turns the probe server off (as in controller-runtime); the admin endpoint
/// stays. A taken `--health-addr` stops the process, as a taken `--metrics-addr` does.
#[tokio::test]
async fn health_addr_zero_is_off_and_a_taken_port_is_fatal() {
    let ns = TestNamespace::new("health-probes-off").await;
    let namespaces = format!("--namespaces={}", ns.name);
    let controller = Controller::start(&[namespaces.as_str(), "--health-addr=0"]).await;
    assert_eq!(status(controller.metrics_port, "/ready").await, 200);
    assert_eq!(status(controller.health_port, "/healthz").await, 0);
    controller.stop().await;

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("--health-addr={}", taken.local_addr().unwrap());
    let mut controller = Controller::launch(&[namespaces.as_str(), addr.as_str()], &[]);
    let exited = wait_for("the controller to exit", Duration::from_secs(30), || {
        let status = controller.exited();
        async move { status.ok_or_else(|| "still running".to_string()) }
    })
    .await;
    assert!(!exited.success());
    assert!(
        controller.logs().contains("admin endpoint stopped"),
        "{}",
        controller.logs()
    );
}
