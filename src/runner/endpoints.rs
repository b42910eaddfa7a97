//! Starting the operations endpoints (`/metrics`, `/healthz`, `/readyz`,
//! [`crate::telemetry::http`]) on a background runtime for as long as a process runs.

use std::sync::Arc;

use super::RunError;
use crate::config::Config;
use crate::telemetry::{http, Health};

/// The running endpoints; they stop when this is dropped.
pub struct Endpoints {
    _runtime: tokio::runtime::Runtime,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `metrics.listen`, or nothing (`None`) when it
/// is empty. Installs the process-wide metrics recorder, so call it once per process.
pub fn serve_endpoints(
    config: &Config,
    health: Arc<Health>,
    queries: Option<Arc<crate::query::QueryService>>,
) -> Result<Option<Endpoints>, RunError> {
    if config.metrics.listen.is_empty() {
        return Ok(None);
    }
    let addr: std::net::SocketAddr =
        config
            .metrics
            .listen
            .parse()
            .map_err(|source| RunError::Listen {
                value: config.metrics.listen.clone(),
                source,
            })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("endpoints")
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "building the endpoint runtime",
            source,
        })?;
    let handle = http::install_recorder()?;
    runtime.spawn(async move {
        if let Err(e) = http::serve(addr, handle, health, queries).await {
            tracing::error!(error = %e, "operations endpoints stopped");
        }
    });
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz and /stores");
    Ok(Some(Endpoints { _runtime: runtime }))
}
