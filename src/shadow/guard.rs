//! Shadow mode's promise, kept in the client: every request that would change the cluster is
//! refused before it leaves the process, except those of the replica set's own coordination
//! (Leases, the shard assignment ConfigMap) and access reviews (which persist nothing). A code
//! path that tries to write anyway gets an error and a WARN line naming it, and the API server
//! sees nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request};
use tower::{BoxError, Layer, Service};
use tracing::warn;

use crate::shard::coordinator::ASSIGNMENT_CONFIGMAP;

/// The write a shadow replica refused to send.
#[derive(Debug, thiserror::Error)]
#[error("shadow mode: {method} {path} refused (kube-reloader --shadow writes nothing)")]
pub struct WriteRefused {
    pub method: Method,
    pub path: String,
}

/// True when `method` on `path` may leave a shadow replica.
pub fn allowed(method: &Method, path: &str) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments[..] {
        ["apis", "coordination.k8s.io", ..] => true,
        ["apis", "authorization.k8s.io", ..] => *method == Method::POST,
        ["api", "v1", "namespaces", _, "configmaps", name] => name == ASSIGNMENT_CONFIGMAP,
        _ => false,
    }
}

#[derive(Clone, Default)]
pub struct ReadOnlyLayer {
    refused: Arc<AtomicU64>,
}

impl ReadOnlyLayer {
    /// Writes refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl<S> Layer<S> for ReadOnlyLayer {
    type Service = ReadOnly<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ReadOnly {
            inner,
            refused: self.refused.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReadOnly<S> {
    inner: S,
    refused: Arc<AtomicU64>,
}

type Pending<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, ReqBody> Service<Request<ReqBody>> for ReadOnly<S>
where
    S: Service<Request<ReqBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pending<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (method, path) = (req.method(), req.uri().path());
        if !allowed(method, path) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            let refused = WriteRefused {
                method: method.clone(),
                path: path.to_string(),
            };
            warn!(error = %refused, "a write was attempted in shadow mode and refused");
            return Box::pin(async move { Err(refused.into()) });
        }
        let pending = self.inner.call(req);
        Box::pin(async move { pending.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_coordination_pass_and_every_other_write_is_refused() {
        let passes = [
            (Method::GET, "/apis/apps/v1/namespaces/ns/deployments/web"),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/r/leases/kube-reloader-0",
            ),
            (
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            ),
            (
                Method::PATCH,
                &format!("/api/v1/namespaces/r/configmaps/{ASSIGNMENT_CONFIGMAP}"),
            ),
        ];
        for (method, path) in passes {
            assert!(allowed(&method, path), "{method} {path}");
        }
        let refused = [
            (Method::PATCH, "/apis/apps/v1/namespaces/ns/deployments/web"),
            (Method::POST, "/apis/batch/v1/namespaces/ns/jobs"),
            (Method::DELETE, "/apis/batch/v1/namespaces/ns/jobs/j"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"),
            (Method::POST, "/api/v1/namespaces/ns/events"),
            (
                Method::PUT,
                "/api/v1/namespaces/r/configmaps/reloader-meta-info",
            ),
            (Method::POST, "/api/v1/namespaces/r/configmaps"),
            (
                Method::PATCH,
                "/api/v1/namespaces/r/configmaps/kube-reloader-halts",
            ),
        ];
        for (method, path) in refused {
            assert!(!allowed(&method, path), "{method} {path}");
        }
    }
}
