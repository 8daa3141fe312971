//! The webhook's HTTPS endpoint: `POST /mutate` takes an `AdmissionReview` (v1) and answers
//! one. The API server only calls webhooks over TLS; the certificate and key are read once at
//! start from the files given (the chart mounts a Secret it generates, or cert-manager's).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info};

use super::handler::Admission;

/// The serving certificate (PEM, leaf first) and its key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("reading {path}: {error}")]
    Pem { path: String, error: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

pub struct AdmissionServer {
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    admission: Arc<Admission>,
}

impl AdmissionServer {
    pub fn new(
        addr: SocketAddr,
        files: &TlsFiles,
        admission: Admission,
    ) -> Result<Self, ServerError> {
        let pem_error = |path: &PathBuf| {
            let path = path.display().to_string();
            move |e: rustls::pki_types::pem::Error| ServerError::Pem {
                path,
                error: e.to_string(),
            }
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
            .map_err(pem_error(&files.cert))?
            .collect::<Result<_, _>>()
            .map_err(pem_error(&files.cert))?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(pem_error(&files.key))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        // HTTP/1.1 only: the API server then speaks it too.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            addr,
            tls: Arc::new(tls),
            admission: Arc::new(admission),
        })
    }

    /// Serves until the listener fails; one task per connection.
    pub async fn serve(self) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        info!(addr = %self.addr, "serving the admission webhook (POST /mutate)");
        let acceptor = TlsAcceptor::from(self.tls);
        let app = Router::new()
            .route("/mutate", post(mutate))
            .with_state(self.admission);
        loop {
            let (stream, peer) = listener.accept().await?;
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let tls = match acceptor.accept(stream).await {
                    Ok(tls) => tls,
                    Err(e) => return debug!(%peer, error = %e, "admission: TLS handshake failed"),
                };
                let service = TowerToHyperService::new(app);
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service);
                if let Err(e) = connection.await {
                    debug!(%peer, error = %e, "admission: connection ended with an error");
                }
            });
        }
    }
}

async fn mutate(
    State(admission): State<Arc<Admission>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    Json(admission.review(review).await)
}
