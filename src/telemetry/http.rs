//! The operations endpoints on one port, served by hyper (HTTP/1.1): `/metrics` (Prometheus
//! text format, with `# HELP` from [`super::catalog`]), `/healthz` (the loop is turning) and
//! `/readyz` (every assigned partition restored). GET and HEAD only (others get 405 with
//! `Allow`), 404 for any other path, 503 while not healthy or not ready.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use super::{catalog, Health};

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

/// Installs the global metrics recorder (`_seconds` metrics become histograms with latency
/// buckets; the end-to-end latency's reach hours, as a record may wait out a retry ladder) and
/// describes every registered metric table ([`catalog::register`]).
pub fn install_recorder() -> Result<PrometheusHandle, HttpError> {
    let buckets = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("eosflow_end_to_end_latency_seconds".into()),
                &[
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                    900.0, 3600.0,
                ],
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("eosflow_batch_records".into()),
                &[1.0, 10.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0],
            )
        })
        .map_err(|e| HttpError::Recorder(e.to_string()))?
        .install_recorder()
        .map_err(|e| HttpError::Recorder(e.to_string()))?;
    catalog::describe_registered();
    Ok(handle)
}

/// Binds `addr` (`metrics.listen`) for [`serve`]. Separate from serving so that a taken port
/// fails the start, naming the key, instead of leaving a running instance without `/metrics`
/// and `/healthz` (a liveness probe would then restart it over and over without saying why).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })
}

/// Serves the endpoints on `listener` (from [`bind`]) until the runtime stops.
pub async fn serve(listener: TcpListener, metrics: PrometheusHandle, health: Arc<Health>) {
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    serve_on(listener, move || metrics.render(), health).await;
}

/// Serves the endpoints on a bound `listener`; `render` produces the `/metrics` body. Runs
/// until the runtime stops. Interactive queries are not served here (they have their own
/// listener, `queries.listen`, with TLS and authentication: [`crate::query`]).
pub async fn serve_on<R>(listener: TcpListener, render: R, health: Arc<Health>)
where
    R: Fn() -> String + Send + Sync + 'static,
{
    let render = Arc::new(render);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "operations endpoints: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let render = render.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let answer = respond(req.method(), req.uri().path(), &*render, &health);
                async move { Ok::<_, Infallible>(answer) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "operations endpoints: connection ended");
            }
        });
    }
}

/// The response to `method path`: the routing table of the three endpoints.
fn respond(
    method: &Method,
    path: &str,
    render: &dyn Fn() -> String,
    health: &Health,
) -> Response<Full<Bytes>> {
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    if !known {
        return text(
            StatusCode::NOT_FOUND,
            "try /metrics, /healthz or /readyz\n".into(),
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => {
            let mut r = text(StatusCode::OK, render());
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" if health.healthy() => text(StatusCode::OK, with_waits("ok\n", health)),
        "/healthz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            with_waits("processing loop stuck\n", health),
        ),
        "/readyz" if health.ready() => text(StatusCode::OK, "ready\n".into()),
        _ => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "restoring or rebalancing\n".into(),
        ),
    }
}

/// `/healthz`'s body: the verdict, then one line per open wait for the cluster (see
/// [`super::Waits`]): alive but waiting is still 200, since restarting the pod brings no
/// leader back; the lines say what it waits for.
fn with_waits(verdict: &str, health: &Health) -> String {
    let mut body = verdict.to_string();
    for w in health.waiting() {
        body.push_str(&format!(
            "waiting on {} for {:.1} s: {}\n",
            w.on.label(),
            w.seconds(),
            w.detail
        ));
    }
    body
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Starts the endpoints on a free local port and sends raw requests, as a probe would.
    async fn start(health: Health) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let render =
            || "# HELP eosflow_x An example.\n# TYPE eosflow_x counter\neosflow_x 1\n".to_string();
        tokio::spawn(serve_on(listener, render, Arc::new(health)));
        addr
    }

    async fn send(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(request.as_bytes()).await.expect("write");
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
            .await
            .expect("response within 10 s")
            .expect("read");
        out
    }

    fn status(response: &str) -> &str {
        response.split_whitespace().nth(1).unwrap_or_default()
    }

    #[tokio::test]
    async fn methods_paths_and_status_codes() {
        let addr = start(Health::always_ready()).await;
        let get = send(
            addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(get.starts_with("HTTP/1.1 200"), "{get}");
        assert!(get.contains("# HELP eosflow_x An example."), "{get}");

        let head = send(
            addr,
            "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");

        let post = send(
            addr,
            "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(
            post.to_ascii_lowercase().contains("allow: get, head"),
            "{post}"
        );

        let unknown = send(addr, "GET /nope HTTP/1.0\r\n\r\n").await;
        assert_eq!(status(&unknown), "404", "{unknown}");
        // Interactive queries have their own listener (queries.listen), never this one.
        let stores = send(addr, "GET /stores HTTP/1.0\r\n\r\n").await;
        assert_eq!(status(&stores), "404", "{stores}");
    }

    #[tokio::test]
    async fn not_ready_is_503() {
        let addr = start(Health::new(Duration::from_secs(60))).await;
        let ready = send(addr, "GET /readyz HTTP/1.0\r\n\r\n").await;
        assert_eq!(status(&ready), "503", "{ready}");
        let healthy = send(addr, "GET /healthz HTTP/1.0\r\n\r\n").await;
        assert_eq!(status(&healthy), "200", "{healthy}");
    }

    #[tokio::test]
    async fn healthz_names_what_a_waiting_loop_waits_for() {
        let health = Health::new(Duration::from_secs(60));
        let waits = health.waits();
        waits.start(
            crate::telemetry::WaitingOn::PartitionLeader,
            "orders-3: Local: Message timed out",
        );
        let addr = start(health).await;
        let healthy = send(addr, "GET /healthz HTTP/1.0\r\n\r\n").await;
        assert_eq!(status(&healthy), "200", "waiting is not stuck: {healthy}");
        assert!(
            healthy.contains("waiting on partition-leader for ")
                && healthy.contains("orders-3: Local: Message timed out"),
            "{healthy}"
        );
        waits.clear();
        let after = send(addr, "GET /healthz HTTP/1.0\r\n\r\n").await;
        assert!(!after.contains("waiting on"), "{after}");
    }
}
