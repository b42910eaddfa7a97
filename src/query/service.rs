//! What the query listener answers, independent of the HTTP stack that carries it
//! ([`super::http`]): the stores an application serves, and the answer to each kind of request.
//!
//! | request | answer |
//! |---|---|
//! | `GET /stores` | the served stores, their kinds, and the partitions open here |
//! | `GET /stores/<store>/keys/<key>` | the key's committed value (404 when absent) |
//! | `GET /stores/<store>/keys/<key>/windows?from=&to=` | the key's windows starting in `from..=to` (ms) |
//! | `GET /stores/<store>?from=&to=&prefix=&after=&limit=` | at most `limit` entries of the partitions open **here**, in key order (a range is per instance, as in Kafka Streams) |
//!
//! A key is written in the URL as its JSON (`42`, `"a b"` percent-encoded) or, for a string
//! key, as the bare text. Answers are JSON with the key, the value (the serde's value rendered
//! with `serde_json`), the partition and `positions`: the next input offset of each
//! (topic, partition) the answer reflects, also in the `Eosflow-Positions` header.
//!
//! A key owned by another instance is **proxied** ([`Step::Forward`]: the HTTP layer asks the
//! owner, authenticated as this instance, and passes its answer on with `Eosflow-Owner` naming
//! it; one hop: a forwarded request is never forwarded again). A key whose partition is
//! restoring here, whose owner is not known now (a rebalance, an owner without
//! `processor.application_server`) or does not answer (killed, not yet replaced in the group),
//! answers `503` with `Retry-After: 1`. Never stale data: a store is read only while its task is
//! open and owned here.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::local::{LocalStores, Positions};
use super::read::{
    fetch_windows, get_live, partition_of, read_partition, scan_local, Expiry, QueryError,
    ScanBudget,
};
use super::routing::{Owner, Router};
use crate::processor::{StoreHandle, TtlClock};
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
    pub(crate) fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: format!("{body}\n"),
        }
    }

    pub(crate) fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    pub(crate) fn error(status: u16, message: impl std::fmt::Display) -> Self {
        Self::json(status, json!({ "error": message.to_string() }))
    }
}

/// How a served store turns URL text into key bytes and stored bytes into JSON.
trait Rendered: Send + Sync {
    fn kind(&self) -> &'static str;
    fn key_bytes(&self, text: &str) -> Result<Vec<u8>, String>;
    fn key_json(&self, bytes: &[u8]) -> Result<Value, String>;
    fn value_json(&self, bytes: &[u8]) -> Result<Value, String>;
    /// The clock of the store's TTL, if its handle has one: expired keys are not served.
    fn ttl(&self) -> Option<TtlClock>;
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

    fn ttl(&self) -> Option<TtlClock> {
        self.handle.ttl().map(|(_, clock)| clock)
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

/// Interactive queries over HTTP for one instance: which stores are served (on the query
/// listener, `queries.listen`) and how requests are answered. Get it from
/// [`crate::Instance::queries`].
///
/// | request | answer |
/// |---|---|
/// | `GET /stores` | the served stores, their kinds, and the partitions open here |
/// | `GET /stores/<store>/keys/<key>` | the key's committed value (404 when absent) |
/// | `GET /stores/<store>/keys/<key>/windows?from=&to=` | the key's windows starting in `from..=to` (ms) |
/// | `GET /stores/<store>?from=&to=&prefix=&after=&limit=` | at most `limit` entries of the partitions open here, in key order |
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
    /// The most entries one range request returns (`queries.max_limit`).
    max_limit: usize,
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("router", &self.router)
            .finish()
    }
}

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

/// The header that marks a request one instance forwarded to another: such a request is
/// answered from this instance's partitions only, never forwarded again. Only an
/// authenticated request reaches the code that reads it (see the `query::http` module).
pub const FORWARDED_HEADER: &str = "Eosflow-Forwarded";

/// A keyed request's served store, `max_standby_lag`, key bytes and partition.
type Keyed = (Arc<dyn Rendered>, Option<i64>, Vec<u8>, i32);

/// The query parameters of a request, decoded.
pub(crate) type Params = BTreeMap<String, String>;

/// What answering a request takes: an answer now, or the same request asked of the owner.
#[derive(Debug)]
pub(crate) enum Step {
    /// The answer.
    Done(HttpAnswer),
    /// Another instance owns the key's partition: ask it (authenticated as this instance,
    /// marked [`FORWARDED_HEADER`]), and pass its answer on.
    Forward {
        /// The owner's advertised `host:port`.
        endpoint: String,
        /// The owner's client id.
        member: String,
        /// The key's partition.
        partition: i32,
    },
}

impl From<HttpAnswer> for Step {
    fn from(a: HttpAnswer) -> Self {
        Self::Done(a)
    }
}

/// The answer when the owner of `partition` at `endpoint` did not answer a forwarded request.
pub(crate) fn owner_unreachable(
    partition: i32,
    member: &str,
    endpoint: &str,
    why: impl std::fmt::Display,
) -> HttpAnswer {
    HttpAnswer::error(
        503,
        format!("partition {partition} is owned by {member} at {endpoint}, which does not answer: {why}"),
    )
    .header("Retry-After", "1")
    .header("Eosflow-Partition", partition.to_string())
    .header("Eosflow-Owner", endpoint)
}

/// `max_standby_lag=N`: also answer from a standby copy at most N changelog records behind.
fn standby_param(params: &Params) -> Result<Option<i64>, String> {
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

/// `position=<topic>:<partition>:<offset>`: answer only once the record at that offset is
/// reflected (read your own write); until then `503` with `Retry-After`.
fn position_param(params: &Params) -> Result<Option<(String, i32, i64)>, String> {
    let Some(v) = params.get("position") else {
        return Ok(None);
    };
    let bad = || format!("position={v:?} is not <topic>:<partition>:<offset>");
    let (rest, offset) = v.rsplit_once(':').ok_or_else(bad)?;
    let (topic, partition) = rest.rsplit_once(':').ok_or_else(bad)?;
    match (partition.parse(), offset.parse()) {
        (Ok(p), Ok(o)) if !topic.is_empty() => Ok(Some((topic.to_string(), p, o))),
        _ => Err(bad()),
    }
}

/// `Err(503)` when a read reflecting `positions` does not reach the request's `position=`.
fn check_position(
    wanted: Option<&(String, i32, i64)>,
    p: i32,
    positions: &Positions,
) -> Result<(), Step> {
    let Some((topic, partition, offset)) = wanted else {
        return Ok(());
    };
    let next = positions.get(&(topic.clone(), *partition));
    if next.is_some_and(|n| n > offset) {
        return Ok(());
    }
    let a = HttpAnswer::error(
        503,
        format!("partition {p} does not reflect {topic}:{partition}:{offset} yet (next offset reflected: {}); ask again in a moment", next.map_or("none".to_string(), i64::to_string)),
    )
    .header("Retry-After", "1");
    Err(with_read_headers(a, p, positions, None).into())
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
pub(crate) fn outcome(a: &HttpAnswer) -> &'static str {
    let has = |name: &str| a.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    match a.status {
        200 | 404 if has("Eosflow-Owner") => "proxied",
        200 | 404 if has("Eosflow-Standby-Lag") => "standby",
        200 | 404 => "local",
        503 => "unavailable",
        400 => "bad-request",
        401 => "unauthorized",
        429 => "too-many-requests",
        504 => "deadline-exceeded",
        _ => "error",
    }
}

fn time_param(params: &Params, name: &str, default: i64) -> Result<i64, String> {
    params.get(name).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| format!("{name}={v:?} is not a time in ms since the epoch"))
    })
}

impl QueryService {
    pub(crate) fn new(local: Arc<LocalStores>, router: Option<Router>, max_limit: usize) -> Self {
        Self {
            local,
            router,
            served: RwLock::new(HashMap::new()),
            max_limit: max_limit.max(1),
        }
    }

    fn serve(&self, name: &str, r: Arc<dyn Rendered>) {
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

    /// Whether `name` is a served store (only those become metric labels: a probe of made-up
    /// names must not grow the metric's series).
    pub(crate) fn is_served(&self, name: &str) -> bool {
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
    }

    /// A request forwarded to `member` got no answer: its endpoint is read again next time.
    pub(crate) fn unreachable(&self, member: &str) {
        if let Some(r) = &self.router {
            r.forget_endpoint(member);
        }
    }

    /// `GET /stores`.
    pub(crate) fn list(&self) -> HttpAnswer {
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
                "partitioner": self.local.partitioner().as_str(),
            }),
        )
    }

    fn served_store(&self, name: &str) -> Result<Arc<dyn Rendered>, HttpAnswer> {
        let found = self
            .served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned();
        found.ok_or_else(|| HttpAnswer::error(
            404,
            format!("store {name:?} is not served here: the application serves a store with instance.queries().serve_store(&handle)"),
        ))
    }

    /// Why a partition cannot answer here: the owner to ask, or the answer (503 and the like).
    fn elsewhere(&self, e: QueryError, forwarded: bool) -> Step {
        let p = match e {
            QueryError::NotLocal { partition } => partition,
            QueryError::Restoring { partition } => {
                return HttpAnswer::error(
                    503,
                    format!("partition {partition} is restoring here; ask again"),
                )
                .header("Retry-After", "1")
                .header("Eosflow-Partition", partition.to_string())
                .into();
            }
            e => return error_answer(e).into(),
        };
        let unavailable = |why: String| {
            HttpAnswer::error(503, why)
                .header("Retry-After", "1")
                .header("Eosflow-Partition", p.to_string())
                .into()
        };
        if forwarded {
            return unavailable(format!(
                "partition {p} is not open here (a forwarded request is not forwarded again)"
            ));
        }
        let (Some(router), Some(input)) = (&self.router, self.local.input()) else {
            return unavailable(format!("partition {p} is not open here and this instance has no processor.application_server to find its owner with"));
        };
        match router.owner(&input, p) {
            Owner::Other { endpoint, member } => Step::Forward {
                endpoint,
                member,
                partition: p,
            },
            Owner::Me => unavailable(format!(
                "partition {p} is being assigned to this instance; ask again"
            )),
            Owner::Unknown(why) => unavailable(format!("partition {p}: owner unknown now: {why}")),
        }
    }

    /// The URL's key: its bytes and its partition, or the step saying why not.
    fn locate(
        &self,
        r: &dyn Rendered,
        key_text: &str,
        forwarded: bool,
    ) -> Result<(Vec<u8>, i32), Step> {
        let k = r
            .key_bytes(key_text)
            .map_err(|e| HttpAnswer::error(400, e))?;
        let p = partition_of(&self.local, self.local.partitioner(), &k)
            .map_err(|e| self.elsewhere(e, forwarded))?;
        Ok((k, p))
    }

    /// What a keyed request needs: the served store (of `kind` when given: `window` for
    /// `/windows`), `max_standby_lag`, the key's bytes and partition — or the step that answers
    /// instead.
    fn keyed(
        &self,
        store: &str,
        key_text: &str,
        params: &Params,
        forwarded: bool,
        kind: &str,
    ) -> Result<Keyed, Step> {
        let r = self.served_store(store)?;
        if !kind.is_empty() && r.kind() != kind {
            return Err(HttpAnswer::error(
                400,
                format!(
                    "store {store} is a {} store: ask /stores/{store}/keys/<key>",
                    r.kind()
                ),
            )
            .into());
        }
        let standby = standby_param(params).map_err(|e| HttpAnswer::error(400, e))?;
        let (k, p) = self.locate(r.as_ref(), key_text, forwarded)?;
        Ok((r, standby, k, p))
    }

    /// `GET /stores/<store>/keys/<key>` (`store` and `key` decoded).
    pub(crate) fn key(
        &self,
        store: &str,
        key_text: &str,
        params: &Params,
        forwarded: bool,
    ) -> Step {
        let (r, standby, k, p) = match self.keyed(store, key_text, params, forwarded, "") {
            Ok(found) => found,
            Err(step) => return step,
        };
        let wanted = match position_param(params) {
            Ok(w) => w,
            Err(e) => return HttpAnswer::error(400, e).into(),
        };
        let ttl = r.ttl();
        match read_partition(&self.local, store, p, standby, |reader| {
            get_live(reader, ttl, &k)
        }) {
            Ok(read) => {
                if let Err(step) = check_position(wanted.as_ref(), p, &read.positions) {
                    return step;
                }
                let (value, expiry) = read.value;
                let expired =
                    Expiry::new(&self.local, p, read.standby_lag.is_some(), ttl).expired(expiry);
                let value = value.filter(|_| !expired);
                let (status, value) = match value.map(|b| r.value_json(&b)).transpose() {
                    Ok(Some(v)) => (200, v),
                    Ok(None) => (404, Value::Null),
                    Err(e) => return HttpAnswer::error(500, format!("store {store}: {e}")).into(),
                };
                let key = r
                    .key_json(&k)
                    .unwrap_or_else(|_| Value::String(key_text.to_string()));
                let body = json!({ "store": store, "key": key, "value": value, "partition": p, "positions": positions_json(&read.positions), "standby_lag": read.standby_lag });
                with_read_headers(
                    HttpAnswer::json(status, body),
                    p,
                    &read.positions,
                    read.standby_lag,
                )
                .into()
            }
            Err(e) => self.elsewhere(e, forwarded),
        }
    }

    /// `GET /stores/<store>/keys/<key>/windows?from=&to=`.
    pub(crate) fn windows(
        &self,
        store: &str,
        key_text: &str,
        params: &Params,
        forwarded: bool,
    ) -> Step {
        let (from, to) = match (
            time_param(params, "from", i64::MIN),
            time_param(params, "to", i64::MAX),
        ) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return HttpAnswer::error(400, e).into(),
        };
        let (r, standby, k, p) = match self.keyed(store, key_text, params, forwarded, "window") {
            Ok(found) => found,
            Err(step) => return step,
        };
        let wanted = match position_param(params) {
            Ok(w) => w,
            Err(e) => return HttpAnswer::error(400, e).into(),
        };
        match read_partition(&self.local, store, p, standby, |reader| {
            fetch_windows(reader, store, &k, from, to)
        }) {
            Ok(read) => {
                if let Err(step) = check_position(wanted.as_ref(), p, &read.positions) {
                    return step;
                }
                let mut out = Vec::with_capacity(read.value.len());
                for (w, bytes) in read.value {
                    match r.value_json(&bytes) {
                        Ok(v) => out.push(json!({ "start": w.start, "end": w.end, "value": v })),
                        Err(e) => {
                            return HttpAnswer::error(500, format!("store {store}: {e}")).into()
                        }
                    }
                }
                let key = r
                    .key_json(&k)
                    .unwrap_or_else(|_| Value::String(key_text.to_string()));
                let body = json!({ "store": store, "key": key, "windows": out, "partition": p, "positions": positions_json(&read.positions), "standby_lag": read.standby_lag });
                with_read_headers(
                    HttpAnswer::json(200, body),
                    p,
                    &read.positions,
                    read.standby_lag,
                )
                .into()
            }
            Err(e) => self.elsewhere(e, forwarded),
        }
    }

    /// `GET /stores/<store>?prefix=` or `?from=&to=`, `&after=`, `&limit=`: at most `limit`
    /// (capped at `queries.max_limit`) entries of the partitions open here, merged in key
    /// order; `next` is the key to pass as `after=` for the following page.
    pub(crate) fn range(
        &self,
        store: &str,
        params: &Params,
        deadline: Option<Instant>,
    ) -> HttpAnswer {
        let r = match self.served_store(store) {
            Ok(r) => r,
            Err(a) => return a,
        };
        if r.kind() != "key-value" {
            return HttpAnswer::error(
                400,
                format!(
                    "store {store} is a {} store: ask /stores/{store}/keys/<key>/windows",
                    r.kind()
                ),
            );
        }
        let key = |name: &str| -> Result<Option<Vec<u8>>, String> {
            params.get(name).map(|t| r.key_bytes(t)).transpose()
        };
        let (mut lower, upper) = match (key("prefix"), key("from"), key("to")) {
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
        match key("after") {
            Ok(Some(after)) => lower = resume_after(lower, after),
            Ok(None) => {}
            Err(e) => return HttpAnswer::error(400, e),
        }
        let max = self.max_limit;
        let limit = match params.get("limit").map(|l| l.parse::<usize>()) {
            None => max,
            Some(Ok(l)) if l > 0 => l.min(max),
            Some(_) => {
                return HttpAnswer::error(
                    400,
                    format!("limit must be a number ≥ 1 (at most {max} are returned)"),
                )
            }
        };
        let standby = match standby_param(params) {
            Ok(s) => s,
            Err(e) => return HttpAnswer::error(400, e),
        };
        let budget = ScanBudget { limit, deadline };
        let q = match scan_local(
            &self.local,
            store,
            &(lower, upper),
            budget,
            standby,
            r.ttl(),
        ) {
            Ok(q) => q,
            Err(e) => return error_answer(e),
        };
        let mut out = Vec::with_capacity(q.value.entries.len());
        let mut next = Value::Null;
        for (p, k, v) in &q.value.entries {
            match (r.key_json(k), r.value_json(v)) {
                (Ok(k), Ok(v)) => {
                    next = k.clone();
                    out.push(json!({ "key": k, "value": v, "partition": p }));
                }
                (Err(e), _) | (_, Err(e)) => {
                    return HttpAnswer::error(500, format!("store {store}: {e}"))
                }
            }
        }
        let more = q.value.more;
        HttpAnswer::json(
            200,
            json!({
                "store": store,
                "entries": out,
                "more": more,
                "next": if more { next } else { Value::Null },
                "limit": limit,
                "partitions": q.partitions,
                "positions": positions_json(&q.positions),
                "standby_lags": q.standby_lags,
                "note": "entries of the partitions open on this instance only, in key order; ask every instance for the whole store",
            }),
        )
        .header("Eosflow-Positions", positions_header(&q.positions))
    }
}

/// The lower bound of a page that resumes after key `after`: whichever of the two starts later.
fn resume_after(lower: Bound<Vec<u8>>, after: Vec<u8>) -> Bound<Vec<u8>> {
    match lower {
        Bound::Included(l) if l > after => Bound::Included(l),
        Bound::Excluded(l) if l >= after => Bound::Excluded(l),
        _ => Bound::Excluded(after),
    }
}

/// A read error that is not about where the partition lives, as HTTP.
fn error_answer(e: QueryError) -> HttpAnswer {
    match e {
        QueryError::NotStarted => HttpAnswer::error(503, e).header("Retry-After", "1"),
        QueryError::UnknownStore { .. } => HttpAnswer::error(404, e),
        QueryError::DeadlineExceeded => HttpAnswer::error(504, e),
        QueryError::NotLocal { partition } | QueryError::Restoring { partition } => {
            HttpAnswer::error(503, e)
                .header("Retry-After", "1")
                .header("Eosflow-Partition", partition.to_string())
        }
        QueryError::Serde { .. } | QueryError::Layout { .. } | QueryError::State(_) => {
            HttpAnswer::error(500, e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(step: Step) -> HttpAnswer {
        match step {
            Step::Done(a) => a,
            Step::Forward { endpoint, .. } => panic!("forwarded to {endpoint}"),
        }
    }

    #[test]
    fn an_unserved_store_says_how_to_serve_it() {
        let svc = QueryService::new(LocalStores::new(), None, 1000);
        let a = done(svc.key("counts", "a", &Params::new(), false));
        assert_eq!(a.status, 404);
        assert!(a.body.contains("serve_store"), "{}", a.body);
        assert_eq!(svc.list().status, 200);
    }

    #[test]
    fn before_the_group_is_joined_a_key_answers_503_with_retry_after() {
        let svc = QueryService::new(LocalStores::new(), None, 1000);
        let h: StoreHandle<String, i64> = StoreHandle::new(
            "counts",
            crate::serdes::StringSerde,
            crate::serdes::I64Serde,
        );
        svc.serve_store(&h);
        let a = done(svc.key("counts", "ann", &Params::new(), false));
        assert_eq!(a.status, 503, "{a:?}");
        assert!(
            a.headers.contains(&("Retry-After".into(), "1".into())),
            "{a:?}"
        );
        let zero = Params::from([("limit".to_string(), "0".to_string())]);
        assert_eq!(svc.range("counts", &zero, None).status, 400);
    }

    #[test]
    fn a_page_resumes_strictly_after_the_last_key_and_never_before_the_lower_bound() {
        let (a, b) = (b"a".to_vec(), b"b".to_vec());
        assert_eq!(
            resume_after(Bound::Unbounded, a.clone()),
            Bound::Excluded(a.clone())
        );
        assert_eq!(
            resume_after(Bound::Included(a.clone()), a.clone()),
            Bound::Excluded(a.clone())
        );
        assert_eq!(
            resume_after(Bound::Included(b.clone()), a.clone()),
            Bound::Included(b.clone())
        );
        assert_eq!(
            resume_after(Bound::Excluded(a.clone()), b.clone()),
            Bound::Excluded(b)
        );
    }
}
