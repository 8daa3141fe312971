//! A client and a kubeconfig for a ServiceAccount's token, so the controller can run with
//! exactly the RBAC a test grants.
#![allow(dead_code)]

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use super::kubeconfig_path;

/// A client and a kubeconfig file for a ServiceAccount's token.
pub struct Identity {
    pub client: Client,
    pub kubeconfig: PathBuf,
}

impl Drop for Identity {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

pub async fn identity_of(admin: &Client, namespace: &str, service_account: &str) -> Identity {
    identity_at(admin, kubeconfig_path(), namespace, service_account).await
}

/// The same on the API server the admin kubeconfig `admin_kubeconfig` reaches.
pub async fn identity_at(
    admin: &Client,
    admin_kubeconfig: &std::path::Path,
    namespace: &str,
    service_account: &str,
) -> Identity {
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .unwrap();
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{service_account}: {e}"))
        .status
        .expect("a token in the TokenRequest status")
        .token;
    // Server and CA of the admin kubeconfig; the user is the token (JSON is valid YAML).
    let admin_config = Kubeconfig::read_from(admin_kubeconfig).expect("the admin kubeconfig");
    let cluster = admin_config.clusters[0].cluster.clone().expect("a cluster");
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {
            "cluster": "local", "user": service_account, "namespace": namespace}}],
        "current-context": "sa",
    });
    let path = std::env::temp_dir().join(format!(
        "kube-reloader-sa-{namespace}-{service_account}.kubeconfig"
    ));
    std::fs::write(&path, serde_json::to_vec(&kubeconfig).unwrap()).unwrap();
    let parsed = Kubeconfig::read_from(&path).expect("the token kubeconfig");
    let config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .expect("a client config for the token");
    Identity {
        client: Client::try_from(config).expect("a client for the token"),
        kubeconfig: path,
    }
}
