//! Prometheus metrics over HTTP (`/metrics`), behind the same credential
//! as the reads: the metrics name every worker identity and what it
//! reported. With [`crate::CoordinatorConfig::public_metrics`] a scraper
//! without a credential is served too, with the per-identity series left
//! out; a reader or operator token still sees everything.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::Coordinator;
use crate::auth::Need;

/// Renders the process's metrics in Prometheus's text format (the
/// exporter's handle, which lives in the binary).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

impl Coordinator {
    /// Serves `/metrics` on `listener` until `shutdown` completes.
    pub async fn serve_metrics(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        render: RenderMetrics,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = axum::Router::new().route("/metrics", get(metrics)).with_state((self, render));
        axum::serve(listener, router).with_graceful_shutdown(shutdown).await
    }
}

async fn metrics(
    State((coordinator, render)): State<(Arc<Coordinator>, RenderMetrics)>,
    headers: HeaderMap,
) -> Response {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    let anonymous = metadata.get("authorization").is_none();
    let text = if anonymous && coordinator.config.public_metrics {
        without_identities(&render())
    } else {
        match crate::auth::authorize(&coordinator.config.auth, coordinator.store.as_ref(), &metadata, Need::Read).await
        {
            Ok(_) => render(),
            Err(refused) => {
                let code = match refused.code() {
                    tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                    tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
                    _ => StatusCode::SERVICE_UNAVAILABLE,
                };
                return (code, refused.message().to_string()).into_response();
            }
        }
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The metrics without any series labelled with a worker identity.
pub fn without_identities(text: &str) -> String {
    text.lines().filter(|line| !line.contains("worker=\"")).flat_map(|line| [line, "\n"]).collect()
}
