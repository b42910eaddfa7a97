//! The operations endpoints on one port: `/metrics` (Prometheus text format), `/healthz`
//! (the loop is turning) and `/readyz` (every assigned partition restored). A deliberately small
//! HTTP/1.1 responder: three GETs, no bodies in, `Connection: close`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Health;

/// Why the endpoints could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The recorder could not be installed (one per process).
    #[error("metrics recorder: {0}")]
    Recorder(String),
    /// The port could not be bound.
    #[error("binding {addr} (metrics.listen): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Installs the global metrics recorder; `_seconds` metrics become histograms.
pub fn install_recorder() -> Result<PrometheusHandle, HttpError> {
    let buckets = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("eosflow_batch_records".into()),
                &[1.0, 10.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0],
            )
        })
        .map_err(|e| HttpError::Recorder(e.to_string()))?
        .install_recorder()
        .map_err(|e| HttpError::Recorder(e.to_string()))
}

/// Serves the endpoints on `addr` until the runtime stops.
pub async fn serve(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    health: Arc<Health>,
) -> Result<(), HttpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let n = match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await
            {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let (status, content_type, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                "/healthz" if health.healthy() => ("200 OK", "text/plain", "ok\n".to_string()),
                "/healthz" => (
                    "503 Service Unavailable",
                    "text/plain",
                    "processing loop stuck\n".to_string(),
                ),
                "/readyz" if health.ready() => ("200 OK", "text/plain", "ready\n".to_string()),
                "/readyz" => (
                    "503 Service Unavailable",
                    "text/plain",
                    "restoring or rebalancing\n".to_string(),
                ),
                _ => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics, /healthz or /readyz\n".to_string(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
