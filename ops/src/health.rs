//! `/healthz` (the process is alive) and `/readyz` (it can do its work), plus
//! an optional `/metrics` body supplied by the binary.

use axum::{Router, http::StatusCode, response::IntoResponse, routing::get};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::RwLock;

/// A named condition and its current value.
type Named = (&'static str, Arc<AtomicBool>);

/// Named readiness conditions; ready when all are true.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<RwLock<Vec<Named>>>,
}

/// One readiness condition, set by the component that owns it.
#[derive(Clone)]
pub struct Check(Arc<AtomicBool>);

impl Check {
    /// Records whether this condition holds now.
    pub fn set(&self, ok: bool) {
        self.0.store(ok, Ordering::Relaxed);
    }
}

impl Readiness {
    /// Registers a condition, initially false.
    pub async fn check(&self, name: &'static str) -> Check {
        let flag = Arc::new(AtomicBool::new(false));
        self.checks.write().await.push((name, flag.clone()));
        Check(flag)
    }

    /// The conditions that do not hold.
    pub async fn failing(&self) -> Vec<&'static str> {
        self.checks
            .read()
            .await
            .iter()
            .filter(|(_, f)| !f.load(Ordering::Relaxed))
            .map(|(n, _)| *n)
            .collect()
    }
}

/// Renders the Prometheus text exposition for `/metrics`.
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves the health (and metrics) endpoints until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    metrics: Option<MetricsFn>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let r = readiness.clone();
                async move {
                    let failing = r.failing().await;
                    if failing.is_empty() {
                        (StatusCode::OK, "ok".to_string()).into_response()
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {}", failing.join(", ")),
                        )
                            .into_response()
                    }
                }
            }),
        );
    if let Some(m) = metrics {
        app = app.route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| {
                let m = m.clone();
                async move {
                    let accept = headers
                        .get(axum::http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok());
                    if crate::metrics::wants_openmetrics(accept) {
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                crate::metrics::OPENMETRICS,
                            )],
                            m(),
                        )
                    } else {
                        (
                            [(axum::http::header::CONTENT_TYPE, crate::metrics::TEXT_004)],
                            crate::metrics::to_text_004(&m()),
                        )
                    }
                }
            }),
        );
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz and /readyz");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
