//! A forwarding proxy between a controller and the API server: plain HTTP on loopback in front,
//! the real credentials behind (a kube `Client`). Bodies stream through unbuffered in the
//! response direction, so watches flow as they would directly. What a proxy does beyond
//! forwarding (counting, injecting faults) is a [`Hooks`] implementation.

mod call;
mod forward;
mod framing;
pub mod ports;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::response;
use axum::response::Response;

pub use call::{Call, classify};
pub use framing::WatchFraming;

/// What a proxy adds to forwarding. Every method has a pass-through default.
pub trait Hooks: Send + Sync + 'static {
    /// Sees each request before it is forwarded; a response returned here is sent to the client
    /// instead, and the API server never sees the request.
    fn request(&self, _call: &Call) -> Option<Response> {
        None
    }

    /// Sees the head of the API server's response; the body returned is what the client gets.
    /// The head keeps the API server's `Content-Length`, so a body of another length suits only
    /// a response without one, such as a watch's chunked stream.
    fn response(&self, _call: &Call, _head: &response::Parts, body: Body) -> Body {
        body
    }

    /// The API server could not be reached; the client gets a 502.
    fn upstream_error(&self, _call: &Call) {}
}

/// A running proxy; dropping it stops serving.
pub struct ApiProxy {
    name: &'static str,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ApiProxy {
    /// Serves on an ephemeral loopback port. `name` appears in its kubeconfig and in its own
    /// error responses, so a reader can tell them from the API server's.
    pub async fn start<H: Hooks>(
        name: &'static str,
        client: kube::Client,
        hooks: Arc<H>,
    ) -> std::io::Result<Self> {
        let app = forward::router(name, client, hooks);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { name, addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig that points at the proxy, with no credentials: the proxy holds them.
    pub fn kubeconfig(&self) -> String {
        let (name, addr) = (self.name, self.addr);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: http://{addr}\nusers:\n- name: {name}\n  user: {{}}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n"
        )
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
