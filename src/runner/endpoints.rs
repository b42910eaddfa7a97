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
/// is empty. The port is bound before this returns: a taken one is an error naming the key.
/// Installs the process-wide metrics recorder, so call it once per process.
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
    // Bound here, before anything runs: a taken port fails the start naming metrics.listen.
    let listener = runtime.block_on(http::bind(addr))?;
    let handle = http::install_recorder()?;
    runtime.spawn(http::serve(listener, handle, health, queries));
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz and /stores");
    Ok(Some(Endpoints { _runtime: runtime }))
}
