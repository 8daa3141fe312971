//! Counts every request the kube client sends, by verb, resource and status code, and the bytes
//! of every response body, by resource, as a tower layer under the client, so nothing that talks
//! to the API server can bypass it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

/// Receives one observation per request, and the bytes of its response as they arrive.
pub trait RequestSink: Send + Sync + 'static {
    fn request(&self, verb: &'static str, resource: &str, code: u16);
    /// Where the response bytes of one request to `resource` are added, looked up once per
    /// request (a watch body counts every chunk it streams).
    fn receiver(&self, resource: &str) -> ByteCounter;
}

/// Adds response bytes to one resource's count.
pub type ByteCounter = Box<dyn Fn(u64) + Send + Sync>;

/// The verb as the API server would name it: watches are GETs with `watch=true`, lists are GETs
/// of a collection.
pub fn verb_of(method: &http::Method, path: &str, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *method {
        http::Method::GET if watch => "WATCH",
        http::Method::GET if is_collection(path) => "LIST",
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// `/api/v1/configmaps`, `/api/v1/namespaces/a/configmaps`: no object named.
fn is_collection(path: &str) -> bool {
    matches!(resource_path(path)[..], [_] | ["namespaces", _, _])
}

/// The path after `api/v1` or `apis/<group>/<version>`, split at `/` (empty for discovery).
fn resource_path(path: &str) -> Vec<&str> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    };
    rest.unwrap_or_default().to_vec()
}

/// The resource (plural) of an API path: `/api/v1/namespaces/ns/configmaps/x` -> `configmaps`.
pub fn resource_of(path: &str) -> &str {
    match resource_path(path)[..] {
        ["namespaces", _, resource, ..] => resource,
        [resource, ..] => resource,
        [] => "discovery",
    }
}

#[derive(Clone)]
pub struct CountRequestsLayer {
    sink: Arc<dyn RequestSink>,
}

impl CountRequestsLayer {
    pub fn new(sink: Arc<dyn RequestSink>) -> Self {
        Self { sink }
    }
}

impl<S> Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            sink: self.sink.clone(),
        }
    }
}

#[derive(Clone)]
pub struct CountRequests<S> {
    inner: S,
    sink: Arc<dyn RequestSink>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for CountRequests<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let verb = verb_of(req.method(), req.uri().path(), req.uri().query());
        let resource = resource_of(req.uri().path()).to_string();
        let sink = self.sink.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            // 0: no response (connection error, timeout).
            let code = result.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
            sink.request(verb, &resource, code);
            result.map(|response| {
                response.map(|body| CountedBody {
                    inner: Box::pin(body),
                    count: sink.receiver(&resource),
                })
            })
        })
    }
}

/// A response body whose data frames are counted as they pass.
pub struct CountedBody<B> {
    inner: Pin<Box<B>>,
    count: ByteCounter,
}

impl<B: Body<Data = Bytes>> Body for CountedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = this.inner.as_mut().poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            (this.count)(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_and_resources() {
        let get = http::Method::GET;
        let watch = Some("watch=true&resourceVersion=1");
        assert_eq!(verb_of(&get, "/api/v1/configmaps", watch), "WATCH");
        assert_eq!(
            verb_of(&get, "/api/v1/configmaps", Some("limit=500")),
            "LIST"
        );
        assert_eq!(verb_of(&get, "/api/v1/namespaces/a/secrets", None), "LIST");
        assert_eq!(verb_of(&get, "/api/v1/namespaces", None), "LIST");
        assert_eq!(verb_of(&get, "/api/v1/namespaces/a", None), "GET");
        assert_eq!(verb_of(&get, "/api/v1/namespaces/a/secrets/s", None), "GET");
        assert_eq!(
            verb_of(
                &get,
                "/apis/apps/v1/namespaces/a/deployments/d/status",
                None
            ),
            "GET"
        );
        assert_eq!(
            resource_of("/api/v1/namespaces/ns/configmaps/x"),
            "configmaps"
        );
        assert_eq!(resource_of("/apis/apps/v1/deployments"), "deployments");
        assert_eq!(
            resource_of("/apis/apps/v1/namespaces/a/deployments/b/status"),
            "deployments"
        );
        assert_eq!(resource_of("/api/v1/namespaces"), "namespaces");
        assert_eq!(resource_of("/apis"), "discovery");
    }
}
