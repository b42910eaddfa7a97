//! Starting the operations endpoints (`/metrics`, `/healthz`, `/readyz`,
//! [`crate::telemetry::http`]) and the interactive query listener (`/stores/...`,
//! `queries.listen`) on background runtimes for as long as a process runs.

use std::sync::Arc;

use super::RunError;
use crate::config::Config;
use crate::query::QueryService;
use crate::telemetry::{http, Health};

/// The running endpoints; they stop when this is dropped.
pub struct Endpoints {
    _runtime: tokio::runtime::Runtime,
}

/// The running query listener; it stops when this is dropped.
pub struct QueryListener {
    _runtime: tokio::runtime::Runtime,
}

fn runtime(name: &str, blocking: usize) -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(blocking)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "building an endpoint runtime",
            source,
        })
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `metrics.listen`, or nothing (`None`) when it
/// is empty. The port is bound before this returns: a taken one is an error naming the key.
/// Installs the process-wide metrics recorder, so call it once per process.
pub fn serve_endpoints(
    config: &Config,
    health: Arc<Health>,
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
    let runtime = runtime("endpoints", 4)?;
    // Bound here, before anything runs: a taken port fails the start naming metrics.listen.
    let listener = runtime.block_on(http::bind(addr))?;
    let handle = http::install_recorder()?;
    runtime.spawn(http::serve(listener, handle, health));
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    Ok(Some(Endpoints { _runtime: runtime }))
}

/// Serves interactive queries (`/stores/...`, [`QueryService`]) on `queries.listen`, or nothing
/// (`None`) when it is empty. Its certificates are read and the port bound before this
/// returns: an unusable file or a taken port is an error naming its key.
pub fn serve_queries(
    config: &Config,
    queries: Arc<QueryService>,
) -> Result<Option<QueryListener>, RunError> {
    let c = &config.queries;
    if c.listen.is_empty() {
        return Ok(None);
    }
    // A configuration built in code never went through Config::load's checks: the listener
    // is never started unauthenticated or unencrypted unless the configuration says so.
    c.validate()
        .and_then(|()| c.validate_auth())
        .map_err(|e| match e {
            crate::config::ConfigError::Invalid { key, env, reason } => {
                crate::query::QueryListenerError::Setting { key, env, reason }
            }
            other => crate::query::QueryListenerError::Setting {
                key: "queries",
                env: crate::config::env_name("queries"),
                reason: other.to_string(),
            },
        })?;
    let addr: std::net::SocketAddr =
        c.listen
            .parse()
            .map_err(|e| crate::query::QueryListenerError::Setting {
                key: "queries.listen",
                env: crate::config::env_name("queries.listen"),
                reason: format!("{:?}: {e}", c.listen),
            })?;
    let tls = crate::query::http::acceptor(c)?;
    let shared = crate::query::http::Shared::new(queries, c)?;
    // Store reads run on the blocking pool; a slot (queries.max_concurrent) bounds them.
    let runtime = runtime("queries", c.max_concurrent + 1)?;
    let listener = runtime.block_on(crate::query::http::bind(addr))?;
    runtime.spawn(crate::query::http::serve(listener, tls.clone(), shared));
    tracing::info!(%addr, tls = tls.is_some(), token = !c.token.is_empty(), client_certificates = c.ssl_client_auth, anonymous = c.allow_anonymous, "serving interactive queries (/stores)");
    Ok(Some(QueryListener { _runtime: runtime }))
}
