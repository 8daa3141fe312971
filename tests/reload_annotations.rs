//! Section 1 of the compatibility spec against the real API server: which annotation makes which
//! config change roll which workload. Every "not reloaded" is checked after a canary in the same
//! test was reloaded by a change made later in the same watch stream, plus a grace period, so a
//! slow controller cannot make a negative assertion pass.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

/// How long a negative assertion waits after its canary was reloaded.
const GRACE: Duration = Duration::from_secs(1);

fn ns_flag(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

/// A container spec that reads every listed ConfigMap and Secret through envFrom.
fn env_from(configmaps: &[&str], secrets: &[&str]) -> Value {
    let mut sources: Vec<Value> = configmaps
        .iter()
        .map(|n| json!({"configMapRef": {"name": n}}))
        .collect();
    sources.extend(secrets.iter().map(|n| json!({"secretRef": {"name": n}})));
    json!({"envFrom": sources})
}

fn no_refs() -> Value {
    pod_spec(json!({}), json!([]))
}

/// The names of the reload env vars a Deployment carries, sorted.
async fn reload_var_names(ns: &TestNamespace, name: &str) -> Vec<String> {
    let mut names: Vec<String> = deployment_reload_vars(&ns.client, &ns.name, name)
        .await
        .into_iter()
        .map(|(_, n, _)| n)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn auto_reloads_referenced_configmaps_and_secrets_only() {
    let ns = TestNamespace::new("ann-auto").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("app-cm", json!({"k": "v1"}))).await;
    create(c, n, configmap("other-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("app-secret", json!({"p": "s1"}))).await;
    let uses_both = pod_spec(env_from(&["app-cm"], &["app-secret"]), json!([]));
    let auto = json!({"reloader.stakater.com/auto": "true"});
    create(c, n, deployment("auto", auto.clone(), uses_both.clone())).await;
    create(c, n, deployment("plain", json!({}), uses_both)).await;
    let uses_other = pod_spec(env_from(&["other-cm"], &[]), json!([]));
    create(c, n, deployment("auto-elsewhere", auto, uses_other)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "app-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "app-secret", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "auto",
        "STAKATER_APP_CM_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "auto",
        "STAKATER_APP_SECRET_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "plain").await,
        Vec::<String>::new(),
        "no annotation: not opted in"
    );
    assert_eq!(
        reload_var_names(&ns, "auto-elsewhere").await,
        Vec::<String>::new(),
        "auto, but it does not reference the changed configs"
    );
}

#[tokio::test]
async fn typed_auto_reloads_only_its_own_type() {
    let ns = TestNamespace::new("ann-typed").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, n, secret("sec", json!({"p": "s1"}))).await;
    let uses_both = pod_spec(env_from(&["cfg"], &["sec"]), json!([]));
    create(
        c,
        n,
        deployment(
            "cm-auto",
            json!({"configmap.reloader.stakater.com/auto": "true"}),
            uses_both.clone(),
        ),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "secret-auto",
            json!({"secret.reloader.stakater.com/auto": "true"}),
            uses_both,
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    update_secret(c, n, "sec", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "cm-auto",
        "STAKATER_CFG_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "secret-auto",
        "STAKATER_SEC_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "cm-auto").await,
        ["STAKATER_CFG_CONFIGMAP"]
    );
    assert_eq!(
        reload_var_names(&ns, "secret-auto").await,
        ["STAKATER_SEC_SECRET"]
    );
}

#[tokio::test]
async fn explicit_lists_reload_unreferenced_configs_with_anchored_regexes() {
    let ns = TestNamespace::new("ann-lists").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    for name in [
        "listed-cm",
        "app-config-a",
        "app-config",
        "my-app-config-b",
        "unlisted-cm",
    ] {
        create(c, n, configmap(name, json!({"k": "v1"}))).await;
    }
    create(c, n, secret("listed-secret", json!({"p": "s1"}))).await;
    create(c, n, secret("unlisted-secret", json!({"p": "s1"}))).await;
    // The pod template references nothing: the lists alone decide.
    create(
        c,
        n,
        deployment(
            "lister",
            json!({
                "configmap.reloader.stakater.com/reload": "listed-cm, app-config-.*",
                "secret.reloader.stakater.com/reload": "listed-secret"
            }),
            no_refs(),
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    // Negatives first: each watch delivers in order, so once the canaries (changed after them)
    // are written, these were already decided.
    for name in ["app-config", "my-app-config-b", "unlisted-cm"] {
        update_configmap(c, n, name, json!({"k": "v2"})).await;
    }
    update_secret(c, n, "unlisted-secret", json!({"p": "s2"})).await;
    for name in ["listed-cm", "app-config-a"] {
        update_configmap(c, n, name, json!({"k": "v2"})).await;
    }
    update_secret(c, n, "listed-secret", json!({"p": "s2"})).await;

    let cm_hash = configmap_hash(&[("k", "v2")]);
    wait_for_deployment_env(c, n, "lister", "STAKATER_LISTED_CM_CONFIGMAP", &cm_hash).await;
    wait_for_deployment_env(c, n, "lister", "STAKATER_APP_CONFIG_A_CONFIGMAP", &cm_hash).await;
    wait_for_deployment_env(
        c,
        n,
        "lister",
        "STAKATER_LISTED_SECRET_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;

    tokio::time::sleep(GRACE).await;
    let vars = deployment_reload_vars(c, n, "lister").await;
    let mut names: Vec<&str> = vars.iter().map(|(_, n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "STAKATER_APP_CONFIG_A_CONFIGMAP",
            "STAKATER_LISTED_CM_CONFIGMAP",
            "STAKATER_LISTED_SECRET_SECRET"
        ],
        "entries are anchored: app-config and my-app-config-b do not match app-config-.*"
    );
    assert!(
        vars.iter().all(|(i, _, _)| *i == 0),
        "unreferenced: containers[0]"
    );
}

#[tokio::test]
async fn invalid_regex_entry_is_reported_and_the_valid_entry_still_works() {
    let ns = TestNamespace::new("ann-badre").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("good-1", json!({"k": "v1"}))).await;
    create(
        c,
        n,
        deployment(
            "half-valid",
            json!({"configmap.reloader.stakater.com/reload": "bad[, good-.*"}),
            no_refs(),
        ),
    )
    .await;
    let controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "good-1", json!({"k": "v2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "half-valid",
        "STAKATER_GOOD_1_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;

    let warning = wait_for(
        "a Warning Event about the invalid entry on the Deployment",
        Duration::from_secs(10),
        || async {
            let events = events_about(c, n, "Deployment", "half-valid").await;
            events
                .iter()
                .find(|e| e.type_ == "Warning" && e.note.contains("bad["))
                .cloned()
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert!(!warning.reason.is_empty(), "{warning:?}");

    // Still running and still reloading.
    update_configmap(c, n, "good-1", json!({"k": "v3"})).await;
    wait_for_deployment_env(
        c,
        n,
        "half-valid",
        "STAKATER_GOOD_1_CONFIGMAP",
        &configmap_hash(&[("k", "v3")]),
    )
    .await;
    let (code, _) = common::http_get(&format!(
        "http://127.0.0.1:{}/live",
        controller.metrics_port
    ))
    .await
    .expect("the controller still answers");
    assert_eq!(code, 200);
}

#[tokio::test]
async fn exclude_list_beats_explicit_list_and_auto() {
    let ns = TestNamespace::new("ann-exclude").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("shared", json!({"k": "v1"}))).await;
    create(c, n, secret("sec", json!({"p": "s1"}))).await;
    let uses = pod_spec(env_from(&["shared"], &["sec"]), json!([]));
    create(
        c,
        n,
        deployment(
            "listed-and-excluded",
            json!({
                "configmap.reloader.stakater.com/reload": "shared",
                "configmaps.exclude.reloader.stakater.com/reload": "shared"
            }),
            uses.clone(),
        ),
    )
    .await;
    // The exclude list is per type: the Secret still reloads this one.
    create(
        c,
        n,
        deployment(
            "auto-and-excluded",
            json!({
                "reloader.stakater.com/auto": "true",
                "configmaps.exclude.reloader.stakater.com/reload": "other, shared"
            }),
            uses.clone(),
        ),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "listed",
            json!({"configmap.reloader.stakater.com/reload": "shared"}),
            uses,
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "shared", json!({"k": "v2"})).await;
    update_secret(c, n, "sec", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "listed",
        "STAKATER_SHARED_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "auto-and-excluded",
        "STAKATER_SEC_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "listed-and-excluded").await,
        Vec::<String>::new()
    );
    assert_eq!(
        reload_var_names(&ns, "auto-and-excluded").await,
        ["STAKATER_SEC_SECRET"]
    );
}

#[tokio::test]
async fn ignore_annotation_on_the_config_wins_and_only_exact_true_counts() {
    let ns = TestNamespace::new("ann-ignore").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(
        c,
        n,
        with_annotations(
            configmap("ignored", json!({"k": "v1"})),
            json!({"reloader.stakater.com/ignore": "true"}),
        ),
    )
    .await;
    create(
        c,
        n,
        with_annotations(
            configmap("ignored-cap", json!({"k": "v1"})),
            json!({"reloader.stakater.com/ignore": "True"}),
        ),
    )
    .await;
    create(c, n, configmap("watched", json!({"k": "v1"}))).await;
    let uses = pod_spec(
        env_from(&["ignored", "ignored-cap", "watched"], &[]),
        json!([]),
    );
    create(
        c,
        n,
        deployment("auto", json!({"reloader.stakater.com/auto": "true"}), uses),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "listed",
            json!({"configmap.reloader.stakater.com/reload": "ignored, watched"}),
            no_refs(),
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    for name in ["ignored", "ignored-cap", "watched"] {
        update_configmap(c, n, name, json!({"k": "v2"})).await;
    }
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for_deployment_env(c, n, "auto", "STAKATER_WATCHED_CONFIGMAP", &hash).await;
    wait_for_deployment_env(c, n, "auto", "STAKATER_IGNORED_CAP_CONFIGMAP", &hash).await;
    wait_for_deployment_env(c, n, "listed", "STAKATER_WATCHED_CONFIGMAP", &hash).await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "auto").await,
        [
            "STAKATER_IGNORED_CAP_CONFIGMAP",
            "STAKATER_WATCHED_CONFIGMAP"
        ]
    );
    assert_eq!(
        reload_var_names(&ns, "listed").await,
        ["STAKATER_WATCHED_CONFIGMAP"],
        "ignore beats an explicit list"
    );
}

#[tokio::test]
async fn search_reloads_referenced_configs_that_carry_match() {
    let ns = TestNamespace::new("ann-search").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(
        c,
        n,
        with_annotations(
            configmap("matched", json!({"k": "v1"})),
            json!({"reloader.stakater.com/match": "true"}),
        ),
    )
    .await;
    create(c, n, configmap("unmatched", json!({"k": "v1"}))).await;
    let search = json!({"reloader.stakater.com/search": "true"});
    create(
        c,
        n,
        deployment(
            "searcher",
            search.clone(),
            pod_spec(env_from(&["matched", "unmatched"], &[]), json!([])),
        ),
    )
    .await;
    create(
        c,
        n,
        deployment("searcher-unreferencing", search, no_refs()),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "no-search",
            json!({}),
            pod_spec(env_from(&["matched"], &[]), json!([])),
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "unmatched", json!({"k": "v2"})).await;
    update_configmap(c, n, "matched", json!({"k": "v2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "searcher",
        "STAKATER_MATCHED_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "searcher").await,
        ["STAKATER_MATCHED_CONFIGMAP"],
        "unmatched has no match annotation"
    );
    assert_eq!(
        reload_var_names(&ns, "searcher-unreferencing").await,
        Vec::<String>::new(),
        "search needs a reference"
    );
    assert_eq!(
        reload_var_names(&ns, "no-search").await,
        Vec::<String>::new(),
        "match on the config alone does nothing"
    );
}

#[tokio::test]
async fn auto_reload_all_reloads_unannotated_and_respects_opt_outs() {
    let ns = TestNamespace::new("ann-all").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, n, configmap("unused", json!({"k": "v1"}))).await;
    create(c, n, secret("sec", json!({"p": "s1"}))).await;
    let uses = pod_spec(env_from(&["cfg"], &["sec"]), json!([]));
    create(c, n, deployment("default", json!({}), uses.clone())).await;
    create(
        c,
        n,
        deployment(
            "opted-out",
            json!({"reloader.stakater.com/auto": "false"}),
            uses.clone(),
        ),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "cm-opted-out",
            json!({"configmap.reloader.stakater.com/auto": "false"}),
            uses,
        ),
    )
    .await;
    create(c, n, deployment("unreferencing", json!({}), no_refs())).await;
    let _controller = Controller::start(&[&ns_flag(&ns), "--auto-reload-all"]).await;

    update_configmap(c, n, "unused", json!({"k": "v2"})).await;
    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    update_secret(c, n, "sec", json!({"p": "s2"})).await;
    let cm_hash = configmap_hash(&[("k", "v2")]);
    let secret_hash = secret_hash(&[("p", b"s2")]);
    wait_for_deployment_env(c, n, "default", "STAKATER_CFG_CONFIGMAP", &cm_hash).await;
    wait_for_deployment_env(c, n, "default", "STAKATER_SEC_SECRET", &secret_hash).await;
    wait_for_deployment_env(c, n, "cm-opted-out", "STAKATER_SEC_SECRET", &secret_hash).await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "opted-out").await,
        Vec::<String>::new(),
        "auto: \"false\" opts out of --auto-reload-all"
    );
    assert_eq!(
        reload_var_names(&ns, "cm-opted-out").await,
        ["STAKATER_SEC_SECRET"],
        "a typed \"false\" opts out of that type only"
    );
    assert_eq!(
        reload_var_names(&ns, "unreferencing").await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn pod_template_annotations_apply_when_metadata_has_none_of_the_four() {
    let ns = TestNamespace::new("ann-tmpl").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    let uses = pod_spec(env_from(&["cfg"], &[]), json!([]));
    let template_auto = json!({"reloader.stakater.com/auto": "true"});
    create(
        c,
        n,
        with_template_annotations(
            deployment("template-auto", json!({}), uses.clone()),
            template_auto.clone(),
        ),
    )
    .await;
    create(
        c,
        n,
        with_template_annotations(
            deployment("template-list", json!({}), no_refs()),
            json!({"configmap.reloader.stakater.com/reload": "cfg"}),
        ),
    )
    .await;
    // One of the four on metadata: the template is not read.
    create(
        c,
        n,
        with_template_annotations(
            deployment(
                "shadowed",
                json!({"configmap.reloader.stakater.com/reload": "something-else"}),
                uses.clone(),
            ),
            template_auto.clone(),
        ),
    )
    .await;
    create(
        c,
        n,
        with_template_annotations(
            deployment(
                "metadata-false",
                json!({"reloader.stakater.com/auto": "false"}),
                uses,
            ),
            template_auto,
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for_deployment_env(c, n, "template-auto", "STAKATER_CFG_CONFIGMAP", &hash).await;
    wait_for_deployment_env(c, n, "template-list", "STAKATER_CFG_CONFIGMAP", &hash).await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(
        reload_var_names(&ns, "shadowed").await,
        Vec::<String>::new()
    );
    assert_eq!(
        reload_var_names(&ns, "metadata-false").await,
        Vec::<String>::new()
    );
}
