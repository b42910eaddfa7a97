//! The query listener (`queries.listen`): axum's router over hyper (HTTP/1.1), optionally
//! behind rustls (the `ring` provider), separate from the operations port.
//!
//! Every request is checked before anything else happens — before routing, before a store
//! is read, before a request is forwarded to another instance:
//!
//! 1. **Authentication** (unless `queries.allow_anonymous`): a bearer token equal to
//!    `queries.token` (compared in constant time), or — with `queries.ssl_client_auth` — a
//!    client certificate the TLS handshake verified against `queries.ssl_ca_location`. Either
//!    one is enough. Otherwise `401` with `WWW-Authenticate: Bearer`: an unauthenticated request
//!    is never proxied, whatever headers (`Eosflow-Forwarded`) it carries.
//! 2. **Concurrency**: at most `queries.max_concurrent` requests at once; one more gets `429`
//!    with `Retry-After: 1`. A request holds its slot until its store read has ended, even
//!    past its deadline.
//! 3. **Deadline**: `queries.request_timeout_ms`; a scan checks it before every chunk, and
//!    a request past it answers `504`.
//!
//! A request for a key another instance owns is forwarded by [`QueryClient`] with this
//! instance's credentials (its token, its certificate) and marked [`FORWARDED_HEADER`], so the
//! owner answers from its own partitions and never forwards it again.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path as UrlPath, RawQuery, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tower::ServiceExt;

use super::config::QueriesConfig;
use super::service::{outcome, owner_unreachable, HttpAnswer, Params, QueryService, Step};
use super::FORWARDED_HEADER;
use crate::config::{env_name, Secret};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to another instance may take when forwarding.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read from another instance.
const MAX_FORWARDED_BODY: usize = 64 * 1024 * 1024;

/// Why the query listener could not start, or a query could not be sent: names the setting.
#[derive(Debug, thiserror::Error)]
pub enum QueryListenerError {
    /// A `[queries]` setting names a file that cannot be used.
    #[error("`{key}` (env {env}): {reason}")]
    Setting {
        /// The dotted key, e.g. `queries.ssl_certificate_location`.
        key: &'static str,
        /// Its environment variable.
        env: String,
        /// What is wrong.
        reason: String,
    },
    /// The port could not be bound.
    #[error("binding {addr} (queries.listen): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn setting(key: &'static str, reason: impl std::fmt::Display) -> QueryListenerError {
    QueryListenerError::Setting {
        key,
        env: env_name(key),
        reason: reason.to_string(),
    }
}

/// Why a request to an instance's query listener failed (no HTTP answer came back).
#[derive(Debug, thiserror::Error)]
#[error("asking {endpoint}: {what}")]
pub struct QueryClientError {
    /// The `host:port` asked.
    pub endpoint: String,
    /// What failed: connecting, the TLS handshake, the exchange.
    pub what: String,
}

/// rustls' `ring` provider: the one the rest of the tree's rustls (pgwire-replication) uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_certs(
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, QueryListenerError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| setting(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(setting(
            key,
            format!("{}: no PEM certificate in it", path.display()),
        ));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, QueryListenerError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        setting(
            "queries.ssl_key_location",
            format!("{}: {e}", path.display()),
        )
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, QueryListenerError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs("queries.ssl_ca_location", path)? {
        roots.add(cert).map_err(|e| {
            setting(
                "queries.ssl_ca_location",
                format!("{}: {e}", path.display()),
            )
        })?;
    }
    Ok(roots)
}

/// The listener's TLS configuration from `[queries]`, or `None` without TLS.
fn server_tls(c: &QueriesConfig) -> Result<Option<TlsAcceptor>, QueryListenerError> {
    if !c.uses_tls() {
        return Ok(None);
    }
    let certs = load_certs(
        "queries.ssl_certificate_location",
        &c.ssl_certificate_location,
    )?;
    let key = load_key(&c.ssl_key_location)?;
    let verifier = if c.ssl_client_auth {
        // A missing certificate is let through the handshake so that the request gets a 401
        // that says why; a presented one must verify.
        WebPkiClientVerifier::builder_with_provider(
            Arc::new(load_roots(&c.ssl_ca_location)?),
            provider(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| setting("queries.ssl_ca_location", e))?
    } else {
        WebPkiClientVerifier::no_client_auth()
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| setting("queries.ssl_certificate_location", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| setting("queries.ssl_key_location", e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// Who may ask.
#[derive(Clone)]
struct Auth {
    token: Option<Secret>,
    client_certs: bool,
    anonymous: bool,
}

impl Auth {
    fn from_config(c: &QueriesConfig) -> Self {
        Self {
            token: (!c.token.is_empty()).then(|| c.token.clone()),
            client_certs: c.ssl_client_auth,
            anonymous: c.allow_anonymous,
        }
    }

    /// Whether a request with `headers`, over a connection whose client presented a verified
    /// certificate (`verified_cert`), is authenticated.
    fn admits(&self, headers: &HeaderMap, verified_cert: bool) -> bool {
        if self.anonymous || (self.client_certs && verified_cert) {
            return true;
        }
        let Some(token) = &self.token else {
            return false;
        };
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        // Constant time in the token's contents (a length mismatch answers at once).
        presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(token.expose().as_bytes())))
    }
}

/// A client of instances' query listeners: TLS and credentials from `[queries]` (what an
/// instance uses to forward a request to the owner of a key; tests and tools use it too).
///
/// ```no_run
/// let config = eosflow::Config::load(None)?;
/// let client = eosflow::query::QueryClient::from_config(&config.queries)?;
/// let answer = client.get_blocking("orders-1.orders:9465", "/stores/counts/keys/ann")?;
/// println!("{} {}", answer.status, answer.body);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct QueryClient {
    tls: Option<Arc<ClientConfig>>,
    token: Option<Secret>,
}

impl std::fmt::Debug for QueryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryClient")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token.is_some())
            .finish()
    }
}

impl QueryClient {
    /// TLS when `ssl_certificate_location` is set (verifying the server against
    /// `ssl_ca_location`, presenting this instance's certificate under `ssl_client_auth`),
    /// and the bearer token when `token` is set.
    pub fn from_config(c: &QueriesConfig) -> Result<Self, QueryListenerError> {
        let token = (!c.token.is_empty()).then(|| c.token.clone());
        if !c.uses_tls() {
            return Ok(Self { tls: None, token });
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| setting("queries.ssl_ca_location", e))?
            .with_root_certificates(load_roots(&c.ssl_ca_location)?);
        let mut config = if c.ssl_client_auth {
            builder
                .with_client_auth_cert(
                    load_certs(
                        "queries.ssl_certificate_location",
                        &c.ssl_certificate_location,
                    )?,
                    load_key(&c.ssl_key_location)?,
                )
                .map_err(|e| setting("queries.ssl_key_location", e))?
        } else {
            builder.with_no_client_auth()
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            tls: Some(Arc::new(config)),
            token,
        })
    }

    /// `GET path_and_query` of the instance at `endpoint` (`host:port`): its status,
    /// `Eosflow-*`, `Retry-After` and `WWW-Authenticate` headers, and body.
    pub async fn get(
        &self,
        endpoint: &str,
        path_and_query: &str,
    ) -> Result<HttpAnswer, QueryClientError> {
        self.request(endpoint, path_and_query, &[]).await
    }

    /// [`QueryClient::get`] with extra request headers.
    pub async fn request(
        &self,
        endpoint: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<HttpAnswer, QueryClientError> {
        let fail = |what: String| QueryClientError {
            endpoint: endpoint.to_string(),
            what,
        };
        let mut req = Request::get(path_and_query).header(HOST, endpoint);
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {}", t.expose()));
        }
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| fail(format!("building the request: {e}")))?;
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(endpoint))
            .await
            .map_err(|_| fail("connecting: timed out".into()))?
            .map_err(|e| fail(format!("connecting: {e}")))?;
        match &self.tls {
            Some(config) => {
                let host = endpoint
                    .rsplit_once(':')
                    .map_or(endpoint, |(h, _)| h)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| fail(format!("{host:?} is not a TLS server name: {e}")))?;
                let tls = tokio::time::timeout(
                    HANDSHAKE_TIMEOUT,
                    TlsConnector::from(config.clone()).connect(name, tcp),
                )
                .await
                .map_err(|_| fail("TLS handshake: timed out".into()))?
                .map_err(|e| fail(format!("TLS handshake: {e}")))?;
                exchange(TokioIo::new(tls), req).await.map_err(fail)
            }
            None => exchange(TokioIo::new(tcp), req).await.map_err(fail),
        }
    }

    /// [`QueryClient::get`] from synchronous code (a runtime of its own per call).
    pub fn get_blocking(
        &self,
        endpoint: &str,
        path_and_query: &str,
    ) -> Result<HttpAnswer, QueryClientError> {
        self.request_blocking(endpoint, path_and_query, &[])
    }

    /// [`QueryClient::request`] from synchronous code (a runtime of its own per call).
    pub fn request_blocking(
        &self,
        endpoint: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<HttpAnswer, QueryClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| QueryClientError {
                endpoint: endpoint.to_string(),
                what: format!("a runtime for the request: {e}"),
            })?;
        runtime.block_on(self.request(endpoint, path_and_query, headers))
    }
}

/// One request/response over `io`.
async fn exchange<I>(
    io: TokioIo<I>,
    req: Request<http_body_util::Empty<Bytes>>,
) -> Result<HttpAnswer, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let driver = tokio::spawn(connection);
    let response = sender
        .send_request(req)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter(|(n, _)| {
            n.as_str().starts_with("eosflow-") || *n == RETRY_AFTER || *n == WWW_AUTHENTICATE
        })
        .filter_map(|(n, v)| Some((canonical(n.as_str()), v.to_str().ok()?.to_string())))
        .collect();
    let body = http_body_util::Limited::new(response.into_body(), MAX_FORWARDED_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    driver.abort();
    Ok(HttpAnswer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// `eosflow-owner` → `Eosflow-Owner`, as the answers name them.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// What the listener shares between its connections.
pub(crate) struct Shared {
    service: Arc<QueryService>,
    client: QueryClient,
    auth: Auth,
    slots: Arc<Semaphore>,
    timeout: Duration,
}

impl Shared {
    /// The listener's shared state from `[queries]`.
    pub(crate) fn new(
        service: Arc<QueryService>,
        c: &QueriesConfig,
    ) -> Result<Arc<Self>, QueryListenerError> {
        Ok(Arc::new(Self {
            service,
            client: QueryClient::from_config(c)?,
            auth: Auth::from_config(c),
            slots: Arc::new(Semaphore::new(c.max_concurrent)),
            timeout: Duration::from_millis(c.request_timeout_ms),
        }))
    }
}

/// A request's slot and deadline, handed to the blocking read that answers it: the slot is
/// free only once the read has ended.
#[derive(Clone)]
struct Budget {
    deadline: Instant,
    _slot: Arc<OwnedSemaphorePermit>,
}

/// The listener's TLS acceptor from `[queries]`: the files are read and checked here, so a bad
/// certificate fails the start naming its key.
pub(crate) fn acceptor(c: &QueriesConfig) -> Result<Option<TlsAcceptor>, QueryListenerError> {
    server_tls(c)
}

/// Binds `addr` (`queries.listen`), so that a taken port fails the start naming the key.
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener, QueryListenerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| QueryListenerError::Bind { addr, source })
}

/// Serves queries on `listener` until the runtime stops.
pub(crate) async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Arc<Shared>) {
    let app = router(shared.clone());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "query listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (app, shared, tls) = (app.clone(), shared.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => connection(TokioIo::new(stream), false, app, shared).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let verified = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .is_some_and(|c| !c.is_empty());
                            connection(TokioIo::new(tls), verified, app, shared).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "query listener: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!("query listener: TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

async fn connection<I>(io: TokioIo<I>, verified_cert: bool, app: Router, shared: Arc<Shared>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (app, shared) = (app.clone(), shared.clone());
        async move { Ok::<_, Infallible>(admit(app, &shared, req.map(Body::new), verified_cert).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "query listener: connection ended");
    }
}

/// Authentication, then a slot, then the routed answer within the deadline.
async fn admit(
    app: Router,
    shared: &Shared,
    mut req: Request<Body>,
    verified_cert: bool,
) -> Response<Body> {
    if !shared.auth.admits(req.headers(), verified_cert) {
        let a = HttpAnswer::error(
            401,
            "authenticate: Authorization: Bearer <queries.token>, or a client certificate (queries.ssl_client_auth)",
        )
        .header(WWW_AUTHENTICATE.as_str(), "Bearer realm=\"eosflow\"");
        crate::telemetry::query_request("-", outcome(&a));
        return response(a);
    }
    let Ok(slot) = shared.slots.clone().try_acquire_owned() else {
        let a = HttpAnswer::error(
            429,
            "too many queries at once (queries.max_concurrent); ask again",
        )
        .header(RETRY_AFTER.as_str(), "1");
        crate::telemetry::query_request("-", outcome(&a));
        return response(a);
    };
    let deadline = Instant::now() + shared.timeout;
    req.extensions_mut().insert(Budget {
        deadline,
        _slot: Arc::new(slot),
    });
    match tokio::time::timeout_at(deadline.into(), app.oneshot(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(never)) => match never {},
        Err(_) => {
            let a = HttpAnswer::error(
                504,
                "the request's deadline (queries.request_timeout_ms) passed",
            );
            crate::telemetry::query_request("-", outcome(&a));
            response(a)
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/stores", get(list))
        .route("/stores/{store}", get(range))
        .route("/stores/{store}/keys/{key}", get(keyed::<false>))
        .route("/stores/{store}/keys/{key}/windows", get(keyed::<true>))
        .fallback(|| async {
            response(HttpAnswer::error(404, "try /stores, /stores/<store>/keys/<key>, /stores/<store>/keys/<key>/windows?from=&to= or /stores/<store>?from=&to=&prefix=&after=&limit="))
        })
        .with_state(shared)
}

/// The query string's parameters, `%`-decoded.
fn params(query: Option<String>) -> Params {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// Runs a store read off the async threads, holding the request's slot until it ends.
async fn blocking(budget: Budget, f: impl FnOnce(Instant) -> Step + Send + 'static) -> Step {
    match tokio::task::spawn_blocking(move || {
        let b = budget;
        f(b.deadline)
    })
    .await
    {
        Ok(step) => step,
        Err(e) => Step::Done(HttpAnswer::error(500, format!("query failed: {e}"))),
    }
}

/// The answer of `step` (forwarding it to the owner if need be), counted under `store`.
async fn finish(shared: &Shared, store: &str, step: Step, uri: &Uri) -> Response<Body> {
    let answer = match step {
        Step::Done(a) => a,
        Step::Forward {
            endpoint,
            member,
            partition,
        } => {
            let target = uri.path_and_query().map_or("/", |p| p.as_str());
            match shared
                .client
                .request(&endpoint, target, &[(FORWARDED_HEADER, "1")])
                .await
            {
                Ok(a) => a.header("Eosflow-Owner", endpoint),
                Err(e) => {
                    shared.service.unreachable(&member);
                    owner_unreachable(partition, &member, &endpoint, e.what)
                }
            }
        }
    };
    let label = if shared.service.is_served(store) {
        store
    } else {
        "-"
    };
    crate::telemetry::query_request(label, outcome(&answer));
    response(answer)
}

fn bad_path(e: PathRejection) -> Response<Body> {
    let a = HttpAnswer::error(400, e.body_text());
    crate::telemetry::query_request("-", outcome(&a));
    response(a)
}

async fn list(State(s): State<Arc<Shared>>) -> Response<Body> {
    response(s.service.list())
}

async fn range(
    State(s): State<Arc<Shared>>,
    path: Result<UrlPath<String>, PathRejection>,
    RawQuery(q): RawQuery,
    uri: Uri,
    Extension(budget): Extension<Budget>,
) -> Response<Body> {
    let UrlPath(store) = match path {
        Ok(p) => p,
        Err(e) => return bad_path(e),
    };
    let (svc, name) = (s.service.clone(), store.clone());
    let step = blocking(budget, move |deadline| {
        Step::Done(svc.range(&name, &params(q), Some(deadline)))
    })
    .await;
    finish(&s, &store, step, &uri).await
}

/// `GET /stores/<store>/keys/<key>` (`WINDOWS` false) and `…/windows` (true).
async fn keyed<const WINDOWS: bool>(
    State(s): State<Arc<Shared>>,
    path: Result<UrlPath<(String, String)>, PathRejection>,
    RawQuery(q): RawQuery,
    uri: Uri,
    headers: HeaderMap,
    Extension(budget): Extension<Budget>,
) -> Response<Body> {
    let UrlPath((store, key)) = match path {
        Ok(p) => p,
        Err(e) => return bad_path(e),
    };
    let forwarded = headers.contains_key(FORWARDED_HEADER);
    let (svc, name) = (s.service.clone(), store.clone());
    let step = blocking(budget, move |_| {
        let params = params(q);
        if WINDOWS {
            svc.windows(&name, &key, &params, forwarded)
        } else {
            svc.key(&name, &key, &params, forwarded)
        }
    })
    .await;
    finish(&s, &store, step, &uri).await
}

/// An answer as a response: JSON, with its headers.
fn response(a: HttpAnswer) -> Response<Body> {
    let mut r = Response::new(Body::from(a.body));
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in a.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            r.headers_mut().insert(n, v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::LocalStores;

    fn config() -> QueriesConfig {
        QueriesConfig {
            listen: "127.0.0.1:0".into(),
            token: Secret::new("s3cret"),
            allow_plaintext: true,
            max_concurrent: 1,
            ..QueriesConfig::default()
        }
    }

    async fn start(c: &QueriesConfig) -> (String, Arc<Shared>) {
        let service = Arc::new(QueryService::new(LocalStores::new(), None, c.max_limit));
        let shared = Shared::new(service, c).expect("shared");
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(serve(listener, None, shared.clone()));
        (addr, shared)
    }

    fn anonymous() -> QueryClient {
        QueryClient {
            tls: None,
            token: None,
        }
    }

    #[tokio::test]
    async fn a_request_without_the_token_is_refused_and_one_with_it_answered() {
        let c = config();
        let (addr, _) = start(&c).await;
        let none = anonymous().get(&addr, "/stores").await.expect("answer");
        assert_eq!(none.status, 401, "{none:?}");
        assert!(none
            .headers
            .iter()
            .any(|(n, v)| n == "Www-Authenticate" && v.starts_with("Bearer")));
        let forged = anonymous()
            .request(&addr, "/stores/counts/keys/a", &[(FORWARDED_HEADER, "1")])
            .await
            .expect("answer");
        assert_eq!(forged.status, 401, "{forged:?}");
        let wrong = QueryClient {
            tls: None,
            token: Some(Secret::new("s3creT")),
        };
        assert_eq!(
            wrong.get(&addr, "/stores").await.expect("answer").status,
            401
        );
        let right = QueryClient::from_config(&c).expect("client");
        let ok = right.get(&addr, "/stores").await.expect("answer");
        assert_eq!(ok.status, 200, "{ok:?}");
        let unknown = right.get(&addr, "/metrics").await.expect("answer");
        assert_eq!(unknown.status, 404, "{unknown:?}");
    }

    #[tokio::test]
    async fn a_request_beyond_max_concurrent_gets_429_and_a_freed_slot_is_reused() {
        let c = config();
        let (addr, shared) = start(&c).await;
        let client = QueryClient::from_config(&c).expect("client");
        // The one slot is taken (as by a long scan).
        let held = shared
            .slots
            .clone()
            .try_acquire_owned()
            .expect("the one slot");
        let busy = client.get(&addr, "/stores").await.expect("answer");
        assert_eq!(busy.status, 429, "{busy:?}");
        assert!(busy
            .headers
            .iter()
            .any(|(n, v)| n == "Retry-After" && v == "1"));
        drop(held);
        assert_eq!(
            client.get(&addr, "/stores").await.expect("answer").status,
            200
        );
    }

    #[tokio::test]
    async fn a_request_past_its_deadline_gets_504_and_frees_its_slot() {
        let c = QueriesConfig {
            request_timeout_ms: 10,
            ..config()
        };
        let service = Arc::new(QueryService::new(LocalStores::new(), None, c.max_limit));
        let shared = Shared::new(service, &c).expect("shared");
        // A handler that never ends (as a read stuck on a slow disk).
        let stuck = Router::new().route("/stores", get(std::future::pending::<Response<Body>>));
        let request = || {
            Request::get("/stores")
                .header(AUTHORIZATION, "Bearer s3cret")
                .body(Body::empty())
                .expect("request")
        };
        let r = admit(stuck.clone(), &shared, request(), false).await;
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        // The slot came back with the request's end: the next one is admitted (and times out).
        let again = admit(stuck, &shared, request(), false).await;
        assert_eq!(again.status(), StatusCode::GATEWAY_TIMEOUT);
    }

    #[test]
    fn header_names_are_canonical() {
        assert_eq!(canonical("eosflow-standby-lag"), "Eosflow-Standby-Lag");
        assert_eq!(canonical("retry-after"), "Retry-After");
    }
}
