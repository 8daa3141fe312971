//! Asks the API server whether this identity may read a resource before a watch depends on it.
//!
//! Used for kinds that are switched on by discovery rather than by a flag: a served API group does
//! not mean the ServiceAccount was granted it, and a watch that can never list would keep the
//! controller from ever becoming ready.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::config::NamespaceScope;

/// Whether every verb on `group/resource` is allowed in every namespace of `scope`.
pub async fn allowed_in_scope(
    client: &Client,
    scope: &NamespaceScope,
    group: &str,
    resource: &str,
    verbs: &[&str],
) -> Result<bool, kube::Error> {
    let namespaces: Vec<Option<&str>> = match scope {
        NamespaceScope::All => vec![None],
        NamespaceScope::Only(list) => list.iter().map(|ns| Some(ns.as_str())).collect(),
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for namespace in namespaces {
        for verb in verbs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(group.to_owned()),
                        resource: Some(resource.to_owned()),
                        verb: Some((*verb).to_owned()),
                        namespace: namespace.map(str::to_owned),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}
