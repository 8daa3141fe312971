//! What a request is, in the API server's own terms: Kubernetes' request verb (watch, list, get,
//! create, ...) and resource, as the audit log and `apiserver_request_total` name them.

use axum::http::Method;

/// One request as the hooks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub verb: String,
    /// `configmaps`, `deployments/status`; `discovery` for an API group's index and
    /// `nonresource:<path>` outside the resource APIs (`/version`, `/healthz`).
    pub resource: String,
    /// The namespace of a namespaced request (`/namespaces/<ns>/<resource>...`).
    pub namespace: Option<String>,
    pub query: Option<String>,
    /// The `Accept` header: which format the client asked for (JSON or protobuf).
    pub accept: Option<String>,
}

/// The verb and resource of a request.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Call {
    let (verb, resource) = verb_and_resource(method, path, query);
    Call {
        verb,
        resource,
        namespace: namespace_of(path),
        query: query.map(str::to_string),
        accept: None,
    }
}

fn namespace_of(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    match rest {
        ["namespaces", ns, more @ ..] if !more.is_empty() => Some(ns.to_string()),
        _ => None,
    }
}

fn verb_and_resource(method: &Method, path: &str, query: Option<&str>) -> (String, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => {
            return (
                method.as_str().to_lowercase(),
                format!("nonresource:{path}"),
            );
        }
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let (resource, named) = match rest {
        [] => return ("get".into(), "discovery".into()),
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let verb = match *method {
        Method::GET if is_watch(query) => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => method.as_str(),
    };
    (verb.to_lowercase(), resource)
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(m: Method, p: &str, q: Option<&str>) -> (String, String) {
        let call = classify(&m, p, q);
        (call.verb, call.resource)
    }

    #[test]
    fn verbs_and_resources() {
        assert_eq!(
            c(
                Method::GET,
                "/api/v1/configmaps",
                Some("watch=true&resourceVersion=1")
            ),
            ("watch".into(), "configmaps".into())
        );
        assert_eq!(
            c(
                Method::GET,
                "/api/v1/namespaces/a/secrets",
                Some("limit=500")
            ),
            ("list".into(), "secrets".into())
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/w",
                None
            ),
            ("patch".into(), "deployments".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/a", None),
            ("get".into(), "namespaces".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces", Some("watch=1")),
            ("watch".into(), "namespaces".into())
        );
        assert_eq!(
            c(
                Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/w/status",
                None
            ),
            ("update".into(), "deployments/status".into())
        );
        assert_eq!(
            c(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/a/events",
                None
            ),
            ("create".into(), "events".into())
        );
        assert_eq!(c(Method::GET, "/version", None).1, "nonresource:/version");
        assert_eq!(c(Method::GET, "/apis/apps/v1", None).1, "discovery");
    }

    #[test]
    fn a_namespaced_request_names_its_namespace() {
        let ns = |p: &str| classify(&Method::PATCH, p, None).namespace;
        assert_eq!(
            ns("/apis/apps/v1/namespaces/a/deployments/w").as_deref(),
            Some("a")
        );
        assert_eq!(ns("/api/v1/namespaces/a/configmaps").as_deref(), Some("a"));
        assert_eq!(
            ns("/api/v1/namespaces/a"),
            None,
            "the namespace object itself"
        );
        assert_eq!(ns("/api/v1/configmaps"), None);
        assert_eq!(ns("/version"), None);
    }

    #[test]
    fn the_query_is_kept_for_the_hooks() {
        let call = classify(
            &Method::GET,
            "/api/v1/configmaps",
            Some("fieldSelector=metadata.name%3Da"),
        );
        assert_eq!(
            call.query.as_deref(),
            Some("fieldSelector=metadata.name%3Da")
        );
        assert_eq!(
            classify(&Method::GET, "/api/v1/configmaps", None).query,
            None
        );
    }
}
