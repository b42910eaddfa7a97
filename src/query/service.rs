//! The HTTP side of interactive queries: the stores an application serves, and the answers the
//! operations server gives on `/stores/...`.
//!
//! | request | answer |
//! |---|---|
//! | `GET /stores` | the served stores, their kinds, and the partitions open here |
//! | `GET /stores/<store>/keys/<key>` | the key's committed value (404 when absent) |
//! | `GET /stores/<store>/keys/<key>/windows?from=&to=` | the key's windows starting in `from..=to` (ms) |
//! | `GET /stores/<store>?from=&to=&prefix=&limit=` | the entries of the partitions open **here** (a range is per instance, as in Kafka Streams) |
//!
//! A key is written in the URL as its JSON (`42`, `"a b"` percent-encoded) or, for a string
//! key, as the bare text. Answers are JSON with the key, the value (the serde's value rendered
//! with `serde_json`), the partition and `positions`: the next input offset of each
//! (topic, partition) the answer reflects, also in the `Eosflow-Positions` header.
//!
//! A key owned by another instance is **proxied**: this instance asks the owner's advertised
//! address and passes its answer on, with `Eosflow-Owner` naming it (one hop: a forwarded
//! request is never forwarded again). A key whose partition is restoring here, whose owner is
//! not known now (a rebalance, an owner without `processor.application_server`) or does not
//! answer (killed, not yet replaced in the group), answers `503` with `Retry-After: 1`. Never
//! stale data: a store is read only while its task is open and owned here.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::local::{LocalStores, Positions};
use super::read::{fetch_windows, partition_of, read_partition, scan_local, QueryError};
use super::routing::{Owner, Router};
use crate::processor::StoreHandle;
use crate::state::merge::prefix_bounds;
use crate::topology::windows::WindowStoreHandle;

/// An HTTP answer, independent of the server that sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// Status code.
    pub status: u16,
    /// Extra headers (the content type is JSON).
    pub headers: Vec<(String, String)>,
    /// JSON body.
    pub body: String,
}

impl HttpAnswer {
    fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: format!("{body}\n"),
        }
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    fn error(status: u16, message: impl std::fmt::Display) -> Self {
        Self::json(status, json!({ "error": message.to_string() }))
    }
}

/// How a served store turns URL text into key bytes and stored bytes into JSON.
trait Rendered: Send + Sync {
    fn kind(&self) -> &'static str;
    fn key_bytes(&self, text: &str) -> Result<Vec<u8>, String>;
    fn key_json(&self, bytes: &[u8]) -> Result<Value, String>;
    fn value_json(&self, bytes: &[u8]) -> Result<Value, String>;
}

struct Typed<K, V> {
    kind: &'static str,
    handle: StoreHandle<K, V>,
}

impl<K, V> Rendered for Typed<K, V>
where
    K: Serialize + DeserializeOwned + 'static,
    V: Serialize + 'static,
{
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn key_bytes(&self, text: &str) -> Result<Vec<u8>, String> {
        let key: K = serde_json::from_str(text)
            .or_else(|_| serde_json::from_value(Value::String(text.to_string())))
            .map_err(|e| format!("{text:?} is not a key of this store (its JSON, or the bare text of a string key): {e}"))?;
        self.handle
            .key_serde()
            .serialize(&key)
            .map_err(|e| e.to_string())
    }

    fn key_json(&self, bytes: &[u8]) -> Result<Value, String> {
        let k = self
            .handle
            .key_serde()
            .deserialize(bytes)
            .map_err(|e| e.to_string())?;
        serde_json::to_value(k).map_err(|e| e.to_string())
    }

    fn value_json(&self, bytes: &[u8]) -> Result<Value, String> {
        let v = self
            .handle
            .value_serde()
            .deserialize(bytes)
            .map_err(|e| e.to_string())?;
        serde_json::to_value(v).map_err(|e| e.to_string())
    }
}

/// Interactive queries over HTTP for one instance: which stores are served and how requests
/// are answered. Get it from [`crate::Instance::queries`].
///
/// | request | answer |
/// |---|---|
/// | `GET /stores` | the served stores, their kinds, and the partitions open here |
/// | `GET /stores/<store>/keys/<key>` | the key's committed value (404 when absent) |
/// | `GET /stores/<store>/keys/<key>/windows?from=&to=` | the key's windows starting in `from..=to` (ms) |
/// | `GET /stores/<store>?from=&to=&prefix=&limit=` | the entries of the partitions open here |
///
/// A key owned by another instance is proxied to it (`Eosflow-Owner` names it); a partition
/// restoring or rebalancing, or an owner that does not answer, gives `503` + `Retry-After: 1`.
///
/// ```
/// # use eosflow::processor::StoreHandle;
/// # use eosflow::serdes::{I64Serde, StringSerde};
/// # fn serve(queries: &eosflow::query::QueryService) {
/// let counts: StoreHandle<String, i64> = StoreHandle::new("counts", StringSerde, I64Serde);
/// queries.serve_store(&counts); // GET /stores/counts/keys/ann → {"value": 17, ...}
/// # }
/// ```
pub struct QueryService {
    local: Arc<LocalStores>,
    router: Option<Router>,
    served: RwLock<HashMap<String, Arc<dyn Rendered>>>,
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("router", &self.router)
            .finish()
    }
}

/// The most entries a range request returns (`limit` above it is lowered to it).
pub const MAX_RANGE_LIMIT: usize = 10_000;
const DEFAULT_RANGE_LIMIT: usize = 1_000;

fn positions_json(positions: &Positions) -> Value {
    Value::Array(
        positions
            .iter()
            .map(|((t, p), o)| json!({ "topic": t, "partition": p, "next_offset": o }))
            .collect(),
    )
}

fn positions_header(positions: &Positions) -> String {
    positions
        .iter()
        .map(|((t, p), o)| format!("{t}:{p}={o}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `%xx`-decodes `s` (and `+` stays `+`): `None` when an escape is malformed or the result is
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn query_params(query: Option<&str>) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).ok_or_else(|| format!("query parameter {k}: bad %-escape"))?;
        out.insert(k.to_string(), v);
    }
    Ok(out)
}

/// The request being answered, as far as forwarding it needs.
struct Hop<'a> {
    path: &'a str,
    query: Option<&'a str>,
    forwarded: bool,
}

/// The header that marks a request one instance forwarded to another.
pub const FORWARDED_HEADER: &str = "Eosflow-Forwarded";

/// Asks `endpoint` (the owner) the same request, marked as forwarded; its status, JSON body and
/// `Eosflow-*` headers.
fn forward(endpoint: &str, hop: &Hop<'_>) -> Result<HttpAnswer, String> {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::time::Duration;
    let addr = endpoint
        .to_socket_addrs()
        .map_err(|e| format!("resolving {endpoint}: {e}"))?
        .next()
        .ok_or_else(|| format!("{endpoint} resolves to no address"))?;
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connecting: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| c.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| e.to_string())?;
    let target = match hop.query {
        Some(q) => format!("{}?{q}", hop.path),
        None => hop.path.to_string(),
    };
    c.write_all(
        format!("GET {target} HTTP/1.0\r\nHost: {endpoint}\r\n{FORWARDED_HEADER}: 1\r\n\r\n")
            .as_bytes(),
    )
    .map_err(|e| format!("sending: {e}"))?;
    let mut raw = Vec::new();
    c.take(64 * 1024 * 1024)
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading the answer: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("the answer has no header end")?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or("the answer has no status line")?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| {
            n.trim().to_ascii_lowercase().starts_with("eosflow-")
                || n.trim().eq_ignore_ascii_case("retry-after")
        })
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(HttpAnswer {
        status,
        headers,
        body: body.to_string(),
    })
}

/// `max_standby_lag=N`: also answer from a standby copy at most N changelog records behind.
fn standby_param(params: &BTreeMap<String, String>) -> Result<Option<i64>, String> {
    params
        .get("max_standby_lag")
        .map(|v| match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(n),
            _ => Err(format!(
                "max_standby_lag={v:?} is not a number of records ≥ 0"
            )),
        })
        .transpose()
}

/// The headers every read answer carries: its partition, positions and (from a standby) lag.
fn with_read_headers(
    a: HttpAnswer,
    p: i32,
    positions: &Positions,
    standby_lag: Option<i64>,
) -> HttpAnswer {
    let a = a
        .header("Eosflow-Partition", p.to_string())
        .header("Eosflow-Positions", positions_header(positions));
    match standby_lag {
        Some(lag) => a.header("Eosflow-Standby-Lag", lag.to_string()),
        None => a,
    }
}

/// What a request's answer was, for `eosflow_query_requests_total`.
fn outcome(a: &HttpAnswer) -> &'static str {
    let has = |name: &str| a.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    match a.status {
        200 | 404 if has("Eosflow-Owner") => "proxied",
        200 | 404 if has("Eosflow-Standby-Lag") => "standby",
        200 | 404 => "local",
        503 => "unavailable",
        400 => "bad-request",
        _ => "error",
    }
}

fn time_param(params: &BTreeMap<String, String>, name: &str, default: i64) -> Result<i64, String> {
    params.get(name).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| format!("{name}={v:?} is not a time in ms since the epoch"))
    })
}

impl QueryService {
    pub(crate) fn new(local: Arc<LocalStores>, router: Option<Router>) -> Self {
        Self {
            local,
            router,
            served: RwLock::new(HashMap::new()),
        }
    }

    fn serve(&self, name: &str, r: Arc<dyn Rendered>) {
        self.local.mark_queried();
        self.served
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), r);
    }

    /// Serves key-value store `handle` on `/stores/<name>`: keys are read from the URL as JSON
    /// (or a string key's bare text), values rendered as JSON.
    pub fn serve_store<K, V>(&self, handle: &StoreHandle<K, V>)
    where
        K: Serialize + DeserializeOwned + 'static,
        V: Serialize + 'static,
    {
        self.serve(
            handle.name(),
            Arc::new(Typed {
                kind: "key-value",
                handle: handle.clone(),
            }),
        );
    }

    /// Serves windowed store `handle` on `/stores/<name>/keys/<key>/windows`.
    pub fn serve_window_store<K, V>(&self, handle: &WindowStoreHandle<K, V>)
    where
        K: Serialize + DeserializeOwned + 'static,
        V: Serialize + 'static,
    {
        self.serve(
            handle.name(),
            Arc::new(Typed {
                kind: "window",
                handle: handle.store_handle().clone(),
            }),
        );
    }

    /// The answer to `GET path?query`, or `None` when `path` is not under `/stores`;
    /// `forwarded`: the request came from another instance (`Eosflow-Forwarded`), so a key
    /// not open here is not forwarded again. Blocking (store reads, a group lookup and a
    /// request to the owner for a key owned elsewhere): call it off async threads.
    pub fn answer(&self, path: &str, query: Option<&str>, forwarded: bool) -> Option<HttpAnswer> {
        let hop = Hop {
            path,
            query,
            forwarded,
        };
        let rest = path.strip_prefix("/stores")?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        let answer = self.route(&parts, &hop);
        if let Some(store) = parts.first() {
            // Only served stores' names become labels: a probe of made-up names must not
            // grow the metric's series.
            let served = percent_decode(store).filter(|n| {
                self.served
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains_key(n)
            });
            crate::telemetry::query_request(served.as_deref().unwrap_or("-"), outcome(&answer));
        }
        Some(answer)
    }

    fn route(&self, parts: &[&str], hop: &Hop<'_>) -> HttpAnswer {
        let query = hop.query;
        match parts {
            [] => self.list(),
            [store] => self.with_store(store, |r| self.range(store, r, query)),
            [store, "keys", key] => self.with_store(store, |r| self.key(store, r, key, hop)),
            [store, "keys", key, "windows"] => {
                self.with_store(store, |r| self.windows(store, r, key, hop))
            }
            _ => HttpAnswer::error(404, "try /stores, /stores/<store>/keys/<key>, /stores/<store>/keys/<key>/windows?from=&to= or /stores/<store>?from=&to=&prefix="),
        }
    }

    fn list(&self) -> HttpAnswer {
        let served = self.served.read().unwrap_or_else(PoisonError::into_inner);
        let mut stores: Vec<Value> = served
            .iter()
            .map(|(n, r)| json!({ "name": n, "kind": r.kind() }))
            .collect();
        stores.sort_by_key(|v| v["name"].as_str().map(str::to_string));
        HttpAnswer::json(
            200,
            json!({
                "stores": stores,
                "partitions": self.local.partitions(),
                "active": self.local.active(),
                "endpoint": self.router.as_ref().and_then(|r| r.endpoint()),
            }),
        )
    }

    fn with_store(
        &self,
        store: &str,
        f: impl FnOnce(Arc<dyn Rendered>) -> HttpAnswer,
    ) -> HttpAnswer {
        let Some(name) = percent_decode(store) else {
            return HttpAnswer::error(400, "store name: bad %-escape");
        };
        let found = self
            .served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name)
            .cloned();
        match found {
            Some(r) => f(r),
            None => HttpAnswer::error(
                404,
                format!("store {name:?} is not served here: the application serves a store with instance.queries().serve_store(&handle)"),
            ),
        }
    }

    /// Why a partition cannot answer here, as HTTP: its owner's answer, or 503.
    fn elsewhere(&self, e: QueryError, hop: &Hop<'_>) -> HttpAnswer {
        let p = match e {
            QueryError::NotLocal { partition } => partition,
            QueryError::Restoring { partition } => {
                return HttpAnswer::error(
                    503,
                    format!("partition {partition} is restoring here; ask again"),
                )
                .header("Retry-After", "1")
                .header("Eosflow-Partition", partition.to_string());
            }
            QueryError::NotStarted => {
                return HttpAnswer::error(503, e).header("Retry-After", "1");
            }
            QueryError::UnknownStore { .. } => return HttpAnswer::error(404, e),
            QueryError::Serde { .. } | QueryError::Layout { .. } => {
                return HttpAnswer::error(500, e)
            }
            QueryError::State(_) => return HttpAnswer::error(500, e),
        };
        let unavailable = |why: String| {
            HttpAnswer::error(503, why)
                .header("Retry-After", "1")
                .header("Eosflow-Partition", p.to_string())
        };
        if hop.forwarded {
            return unavailable(format!(
                "partition {p} is not open here (a forwarded request is not forwarded again)"
            ));
        }
        let (Some(router), Some(input)) = (&self.router, self.local.input()) else {
            return HttpAnswer::error(503, format!("partition {p} is not open here and this instance has no processor.application_server to find its owner with"))
                .header("Retry-After", "1")
                .header("Eosflow-Partition", p.to_string());
        };
        match router.owner(&input, p) {
            Owner::Other { endpoint, member } => match forward(&endpoint, hop) {
                Ok(answer) => answer.header("Eosflow-Owner", endpoint),
                Err(e) => unavailable(format!(
                    "partition {p} is owned by {member} at {endpoint}, which does not answer: {e}"
                ))
                .header("Eosflow-Owner", endpoint),
            },
            Owner::Me => HttpAnswer::error(
                503,
                format!("partition {p} is being assigned to this instance; ask again"),
            )
            .header("Retry-After", "1")
            .header("Eosflow-Partition", p.to_string()),
            Owner::Unknown(why) => {
                HttpAnswer::error(503, format!("partition {p}: owner unknown now: {why}"))
                    .header("Retry-After", "1")
                    .header("Eosflow-Partition", p.to_string())
            }
        }
    }

    /// The URL's key: its text, its bytes and its partition, or the answer saying why not.
    fn locate(
        &self,
        r: &dyn Rendered,
        key_text: &str,
        hop: &Hop<'_>,
    ) -> Result<(String, Vec<u8>, i32), HttpAnswer> {
        let text =
            percent_decode(key_text).ok_or_else(|| HttpAnswer::error(400, "key: bad %-escape"))?;
        let k = r.key_bytes(&text).map_err(|e| HttpAnswer::error(400, e))?;
        let p = partition_of(&self.local, &k).map_err(|e| self.elsewhere(e, hop))?;
        Ok((text, k, p))
    }

    fn key(&self, store: &str, r: Arc<dyn Rendered>, key_text: &str, hop: &Hop<'_>) -> HttpAnswer {
        let (text, k, p) = match self.locate(r.as_ref(), key_text, hop) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let standby = match query_params(hop.query).and_then(|q| standby_param(&q)) {
            Ok(s) => s,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let name = percent_decode(store).unwrap_or_default();
        match read_partition(&self.local, &name, p, standby, |reader| Ok(reader.get(&k)?)) {
            Ok(read) => {
                let (status, value) = match read.value.map(|b| r.value_json(&b)).transpose() {
                    Ok(Some(v)) => (200, v),
                    Ok(None) => (404, Value::Null),
                    Err(e) => return HttpAnswer::error(500, format!("store {name}: {e}")),
                };
                let key = r.key_json(&k).unwrap_or(Value::String(text));
                let body = json!({ "store": name, "key": key, "value": value, "partition": p, "positions": positions_json(&read.positions), "standby_lag": read.standby_lag });
                with_read_headers(
                    HttpAnswer::json(status, body),
                    p,
                    &read.positions,
                    read.standby_lag,
                )
            }
            Err(e) => self.elsewhere(e, hop),
        }
    }

    fn windows(
        &self,
        store: &str,
        r: Arc<dyn Rendered>,
        key_text: &str,
        hop: &Hop<'_>,
    ) -> HttpAnswer {
        let query = hop.query;
        if r.kind() != "window" {
            return HttpAnswer::error(
                400,
                format!(
                    "store {store} is a {} store: ask /stores/{store}/keys/<key>",
                    r.kind()
                ),
            );
        }
        let params = match query_params(query) {
            Ok(p) => p,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let (from, to) = match (
            time_param(&params, "from", i64::MIN),
            time_param(&params, "to", i64::MAX),
        ) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return HttpAnswer::error(400, e),
        };
        let (text, k, p) = match self.locate(r.as_ref(), key_text, hop) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let standby = match standby_param(&params) {
            Ok(s) => s,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let name = percent_decode(store).unwrap_or_default();
        match read_partition(&self.local, &name, p, standby, |reader| {
            fetch_windows(reader, &name, &k, from, to)
        }) {
            Ok(read) => {
                let mut out = Vec::with_capacity(read.value.len());
                for (w, bytes) in read.value {
                    match r.value_json(&bytes) {
                        Ok(v) => out.push(json!({ "start": w.start, "end": w.end, "value": v })),
                        Err(e) => return HttpAnswer::error(500, format!("store {name}: {e}")),
                    }
                }
                let key = r.key_json(&k).unwrap_or(Value::String(text));
                let body = json!({ "store": name, "key": key, "windows": out, "partition": p, "positions": positions_json(&read.positions), "standby_lag": read.standby_lag });
                with_read_headers(
                    HttpAnswer::json(200, body),
                    p,
                    &read.positions,
                    read.standby_lag,
                )
            }
            Err(e) => self.elsewhere(e, hop),
        }
    }

    fn range(&self, store: &str, r: Arc<dyn Rendered>, query: Option<&str>) -> HttpAnswer {
        if r.kind() != "key-value" {
            return HttpAnswer::error(
                400,
                format!(
                    "store {store} is a {} store: ask /stores/{store}/keys/<key>/windows",
                    r.kind()
                ),
            );
        }
        let params = match query_params(query) {
            Ok(p) => p,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let key = |name: &str| -> Result<Option<Vec<u8>>, String> {
            params.get(name).map(|t| r.key_bytes(t)).transpose()
        };
        let bounds = match (key("prefix"), key("from"), key("to")) {
            (Ok(Some(prefix)), Ok(None), Ok(None)) => prefix_bounds(&prefix),
            (Ok(None), Ok(from), Ok(to)) => (
                from.map_or(Bound::Unbounded, Bound::Included),
                to.map_or(Bound::Unbounded, Bound::Included),
            ),
            (Ok(Some(_)), _, _) => {
                return HttpAnswer::error(400, "prefix= goes without from= and to=")
            }
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return HttpAnswer::error(400, e),
        };
        let limit = match params.get("limit").map(|l| l.parse::<usize>()) {
            None => DEFAULT_RANGE_LIMIT,
            Some(Ok(l)) if l > 0 => l.min(MAX_RANGE_LIMIT),
            Some(_) => {
                return HttpAnswer::error(400, format!("limit must be 1..={MAX_RANGE_LIMIT}"))
            }
        };
        let name = percent_decode(store).unwrap_or_default();
        let standby = match standby_param(&params) {
            Ok(s) => s,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let q = match scan_local(&self.local, &name, &bounds, limit, standby) {
            Ok(q) => q,
            Err(e @ QueryError::NotStarted) => {
                return HttpAnswer::error(503, e).header("Retry-After", "1")
            }
            Err(e @ QueryError::UnknownStore { .. }) => return HttpAnswer::error(404, e),
            Err(e) => return HttpAnswer::error(500, e),
        };
        let (entries, mut more) = q.value;
        let mut out = Vec::new();
        for (p, k, v) in entries {
            if out.len() == limit {
                more = true;
                break;
            }
            match (r.key_json(&k), r.value_json(&v)) {
                (Ok(k), Ok(v)) => out.push(json!({ "key": k, "value": v, "partition": p })),
                (Err(e), _) | (_, Err(e)) => {
                    return HttpAnswer::error(500, format!("store {name}: {e}"))
                }
            }
        }
        HttpAnswer::json(
            200,
            json!({
                "store": name,
                "entries": out,
                "more": more,
                "partitions": q.partitions,
                "positions": positions_json(&q.positions),
                "standby_lags": q.standby_lags,
                "note": "entries of the partitions open on this instance only; ask every instance for the whole store",
            }),
        )
        .header("Eosflow-Positions", positions_header(&q.positions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl QueryService {
        fn answer_plain(&self, path: &str, query: Option<&str>) -> Option<HttpAnswer> {
            self.answer(path, query, false)
        }
    }

    #[test]
    fn percent_escapes_decode_and_bad_ones_are_refused() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("%22x%22").as_deref(), Some("\"x\""));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%2"), None);
    }

    #[test]
    fn an_unknown_path_is_not_ours_and_an_unserved_store_says_how_to_serve_it() {
        let svc = QueryService::new(LocalStores::new(), None);
        assert!(svc.answer_plain("/metrics", None).is_none());
        assert!(svc.answer_plain("/storesx", None).is_none());
        let a = svc
            .answer_plain("/stores/counts/keys/a", None)
            .expect("ours");
        assert_eq!(a.status, 404);
        assert!(a.body.contains("serve_store"), "{}", a.body);
        let list = svc.answer_plain("/stores", None).expect("ours");
        assert_eq!(list.status, 200);
    }

    #[test]
    fn before_the_group_is_joined_a_key_answers_503_with_retry_after() {
        let svc = QueryService::new(LocalStores::new(), None);
        let h: StoreHandle<String, i64> = StoreHandle::new(
            "counts",
            crate::serdes::StringSerde,
            crate::serdes::I64Serde,
        );
        svc.serve_store(&h);
        let a = svc
            .answer_plain("/stores/counts/keys/ann", None)
            .expect("ours");
        assert_eq!(a.status, 503, "{a:?}");
        assert!(
            a.headers.contains(&("Retry-After".into(), "1".into())),
            "{a:?}"
        );
        let bad = svc
            .answer_plain("/stores/counts", Some("limit=0"))
            .expect("ours");
        assert_eq!(bad.status, 400, "{bad:?}");
    }
}
