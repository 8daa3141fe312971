//! Asks the API server what this identity may do (SelfSubjectAccessReview: every authenticated
//! identity may ask it about itself, so this works under any RBAC, Reloader's included).

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::{AccessPlan, Requirement, Rule, plan};
use crate::config::NamespaceScope;

/// Reviews asked at once: start-up waits for all of them, and the API server answers each from
/// its authorizer's cache in about a millisecond.
const REVIEWS_IN_FLIGHT: usize = 16;

/// Whose permissions are reviewed.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// The client's own identity (SelfSubjectAccessReview).
    Me,
    /// A ServiceAccount (SubjectAccessReview: the asker needs `create` on subjectaccessreviews),
    /// for `lint` to judge the controller's identity from a user's kubeconfig.
    ServiceAccount { namespace: &'a str, name: &'a str },
}

fn attributes(rule: &Rule) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(rule.group.to_owned()),
        resource: Some(rule.resource.to_owned()),
        verb: Some(rule.verb.to_owned()),
        namespace: rule.namespace.clone(),
        name: rule.name.map(str::to_owned),
        ..Default::default()
    }
}

/// Whether `rule` is allowed for this identity.
pub async fn allowed(client: &Client, rule: &Rule) -> Result<bool, kube::Error> {
    allowed_for(client, Subject::Me, rule).await
}

/// Whether `rule` is allowed for `subject`.
pub async fn allowed_for(
    client: &Client,
    subject: Subject<'_>,
    rule: &Rule,
) -> Result<bool, kube::Error> {
    let status = match subject {
        Subject::Me => {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(attributes(rule)),
                    ..Default::default()
                },
                ..Default::default()
            };
            let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
            reviews
                .create(&PostParams::default(), &review)
                .await?
                .status
        }
        Subject::ServiceAccount { namespace, name } => {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    resource_attributes: Some(attributes(rule)),
                    user: Some(format!("system:serviceaccount:{namespace}:{name}")),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                        "system:authenticated".into(),
                    ]),
                    ..Default::default()
                },
                ..Default::default()
            };
            let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
            reviews
                .create(&PostParams::default(), &review)
                .await?
                .status
        }
    };
    Ok(status.is_some_and(|s| s.allowed))
}

/// Reviews every rule of `requirements` for this identity and decides the mode.
pub async fn review(
    client: &Client,
    requirements: &[Requirement],
) -> Result<AccessPlan, kube::Error> {
    review_for(client, Subject::Me, requirements).await
}

/// Reviews every rule of `requirements` for `subject` and decides the mode.
pub async fn review_for(
    client: &Client,
    subject: Subject<'_>,
    requirements: &[Requirement],
) -> Result<AccessPlan, kube::Error> {
    let answers: HashMap<Rule, bool> = futures::stream::iter(requirements.iter().map(|r| {
        let rule = r.rule.clone();
        async move {
            let ok = allowed_for(client, subject, &rule).await?;
            Ok::<_, kube::Error>((rule, ok))
        }
    }))
    .buffer_unordered(REVIEWS_IN_FLIGHT)
    .try_collect()
    .await?;
    Ok(plan(requirements, |rule| {
        answers.get(rule).copied().unwrap_or(false)
    }))
}

/// Whether every verb on `group/resource` is allowed in every namespace of `scope` (for kinds
/// switched on by discovery rather than by a flag).
pub async fn allowed_in_scope(
    client: &Client,
    scope: &NamespaceScope,
    group: &'static str,
    resource: &'static str,
    verbs: &[&'static str],
) -> Result<bool, kube::Error> {
    let namespaces: Vec<Option<String>> = match scope {
        NamespaceScope::All => vec![None],
        NamespaceScope::Only(list) => list.iter().cloned().map(Some).collect(),
    };
    for namespace in namespaces {
        for verb in verbs {
            let rule = Rule {
                group,
                resource,
                verb,
                namespace: namespace.clone(),
                name: None,
            };
            if !allowed(client, &rule).await? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}
