//! Interactive queries against the real broker: two instances of a counting topology, each
//! serving its `counts` store on its operations port and advertising it as
//! `processor.application_server`. The whole first workload is produced before either starts
//! (a backlog); every key must then be answered with its count — computed here from the
//! workload alone — from *either* instance (the one that does not own the key's partition
//! proxies to the one that does). Then a second workload is produced and the owner of half the
//! partitions is `kill -9`ed: queries for its keys answer 503 (owner gone, or rebalancing) and
//! then the right total from the survivor, and no answer, ever, shows a count that decreases
//! (a value from a batch that never committed would be undone by the survivor's restore) or
//! exceeds the workload's. The final answers' positions equal the inputs' end offsets: the
//! client can tell its writes are in. With `processor.standby_replicas = 1`, a query that allows
//! a standby (`max_standby_lag`) is answered by the survivor's warm copy of the other's
//! partitions, without a hop.
//!
//! Every query travels over TLS to the query listener (`queries.listen`, not the operations
//! port), authenticated by a bearer token (the instances forward to each other with it) or,
//! in process, by a client certificate. The certificates are made for each test by the
//! `openssl` CLI (a CA and one certificate for `127.0.0.1`). A request without credentials gets
//! `401` and is never proxied, even with a forged `Eosflow-Forwarded` header.
//!
//! A third test produces its input with librdkafka's default partitioner (`consistent_random`,
//! CRC-32) and runs the instances with `queries.partitioner = "consistent_random"`: every key
//! is found from either instance.
//!
//! A fourth test counts per customer behind a repartition: a client writes an order, takes its
//! offset, and asks either instance for the customer's count with `position=` (read your own
//! write): the answer reflects it, and a position not written yet answers `503`.
//!
//! The instances are this test binary re-executed in child mode (`QUERIES_CHILD`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use eosflow::config::Secret;
use eosflow::processor::{ProcessError, StoreHandle};
use eosflow::query::{Partitioner, QueriesConfig, QueryClient};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
use rdkafka::producer::{BaseRecord, Producer};
use support::http::free_addr;
use support::pipeline::Running;

const CHILD: &str = "QUERIES_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: usize = 40;
const TOKEN: &str = "a-test-token-0123456789";

/// Where the TLS material of `app` lives (the same for its parent and its children).
fn tls_dir(app: &str) -> PathBuf {
    std::env::temp_dir().join(format!("eosflow-test-{app}-tls"))
}

/// A CA and a certificate for 127.0.0.1/localhost it signed (server and client use), by the
/// `openssl` CLI, in `dir`.
fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).expect("tls dir");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=eosflow test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .expect("leaf.ext");
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        "leaf.pem",
    ]);
}

/// `[queries]` over TLS with the certificates in `dir`: a token, or client certificates.
fn queries_config(dir: &Path, listen: &str, token: bool, client_certs: bool) -> QueriesConfig {
    QueriesConfig {
        listen: listen.to_string(),
        ssl_certificate_location: dir.join("leaf.pem"),
        ssl_key_location: dir.join("leaf.key"),
        ssl_ca_location: dir.join("ca.pem"),
        ssl_client_auth: client_certs,
        token: if token {
            Secret::new(TOKEN)
        } else {
            Secret::default()
        },
        ..QueriesConfig::default()
    }
}

/// A client over TLS verifying the instances with the test CA, with what `c` authenticates.
fn client(c: &QueriesConfig) -> QueryClient {
    QueryClient::from_config(c).expect("query client")
}

/// A client over TLS that presents neither a token nor a certificate.
fn anonymous_client(dir: &Path) -> QueryClient {
    client(&queries_config(dir, "", false, false))
}

fn counts() -> StoreHandle<String, i64> {
    StoreHandle::new("counts", StringSerde, I64Serde)
}

fn topology(app: &str) -> Topology {
    let store = counts();
    let handle = store.clone();
    let count = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                      r: TypedRecord<String, String>| {
        let user = r.key.ok_or_else(|| ProcessError::permanent("no user"))?;
        let mut s = ctx.store(&handle)?;
        let n = s.get(&user)?.unwrap_or(0) + 1;
        s.put(&user, &n)?;
        ctx.forward(TypedRecord::new(Some(user), Some(n)));
        Ok(())
    };
    Topology::builder()
        .add_source(
            "clicks",
            &[&format!("{app}.clicks")],
            StringSerde,
            StringSerde,
        )
        .add_processor("count", count, &["clicks"])
        .add_state_store(&store, &["count"])
        .add_sink(
            "out",
            format!("{app}.counts"),
            StringSerde,
            I64Serde,
            &["count"],
        )
        .build()
        .expect("valid topology")
}

/// Child mode: `app~instance~query host:port~metrics host:port~partitioner`; runs one instance
/// serving `counts` over TLS with the test token until killed.
#[test]
fn child_instance() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let [app, instance, addr, metrics, partitioner]: [&str; 5] = spec
        .split('~')
        .collect::<Vec<_>>()
        .try_into()
        .expect("app~instance~addr~metrics~partitioner");
    let mut config = support::instance_config(app, 20);
    config.app.instance_id = instance.into();
    config.metrics.listen = metrics.into();
    config.queries = queries_config(&tls_dir(app), addr, true, false);
    config.queries.partitioner = partitioner.parse().expect("partitioner");
    config.processor.application_server = addr.into();
    config.processor.standby_replicas = 1;
    eosflow::init_logging();
    // A `…rekey…` app counts its orders per customer behind a repartition (issue 49).
    let topology = if app.contains("rekey") {
        support::rekeyed_count(&format!("{app}.clicks"), &format!("{app}.counts"))
    } else {
        topology(app)
    };
    let running = eosflow::start(&config, topology).expect("instance starts");
    running.queries().serve_store(&counts());
    running.wait().expect("runs until killed");
}

/// One child instance: its query and metrics addresses.
fn spawn(app: &str, instance: &str, addr: &str, metrics: &str, p: Partitioner) -> Running {
    support::spawn_child(CHILD, &format!("{app}~{instance}~{addr}~{metrics}~{p}"))
}

fn user(i: usize) -> String {
    format!("user-{i}")
}

/// Produces `per_key(i)` clicks for every user and adds them to `expected`.
fn produce(input: &str, expected: &mut BTreeMap<String, i64>, per_key: impl Fn(usize) -> i64) {
    let producer = support::test_producer();
    for i in 0..KEYS {
        for _ in 0..per_key(i) {
            support::send_waiting(
                &producer,
                BaseRecord::to(input).key(&user(i)).payload("click"),
            );
        }
        *expected.entry(user(i)).or_default() += per_key(i);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// One answer: status, the `Eosflow-*` headers (lower-cased names) and the JSON body.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: serde_json::Value,
}

/// `GET path` of the instance at `addr` with `client`; `None` while it does not answer.
fn ask_with(client: &QueryClient, addr: &str, path: &str) -> Option<Answer> {
    let a = client.get_blocking(addr, path).ok()?;
    Some(Answer {
        status: a.status,
        headers: a
            .headers
            .into_iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v))
            .collect(),
        body: serde_json::from_str(&a.body).unwrap_or(serde_json::Value::Null),
    })
}

/// Every count seen per user, checked as it arrives: never down, never above the workload's.
struct Seen {
    client: QueryClient,
    last: BTreeMap<String, i64>,
    unavailable: usize,
    proxied_by: BTreeMap<String, usize>,
}

impl Seen {
    /// Asks `addr` for `u`'s count; `Some(count)` on a 200 or 404 (0; checked), `None`
    /// otherwise.
    fn new(client: QueryClient) -> Self {
        Self {
            client,
            last: BTreeMap::new(),
            unavailable: 0,
            proxied_by: BTreeMap::new(),
        }
    }

    fn count(&mut self, addr: &str, u: &str, ceiling: i64) -> Option<(i64, Answer)> {
        let a = ask_with(&self.client, addr, &format!("/stores/counts/keys/{u}"))?;
        if a.status == 503 {
            assert!(
                a.headers.contains_key("retry-after"),
                "503 without Retry-After: {}",
                a.body
            );
            self.unavailable += 1;
            return None;
        }
        // 404: no count yet (the key's first record is not processed).
        assert!(
            a.status == 200 || a.status == 404,
            "{u} from {addr}: {} {}",
            a.status,
            a.body
        );
        if a.headers.contains_key("eosflow-owner") {
            *self.proxied_by.entry(addr.to_string()).or_default() += 1;
        }
        let n = a.body["value"].as_i64().unwrap_or(0);
        let last = self.last.entry(u.to_string()).or_insert(0);
        assert!(
            n >= *last,
            "{u}'s count went from {last} down to {n}: a value that never committed was shown"
        );
        assert!(
            n <= ceiling,
            "{u}'s count {n} exceeds the workload's {ceiling}"
        );
        *last = n;
        Some((n, a))
    }
}

#[test]
fn every_key_is_answered_from_either_instance_and_a_killed_owner_s_keys_move() {
    let app = support::unique("queries");
    let input = format!("{app}.clicks");
    support::create_topics(&[&input, &format!("{app}.counts")], PARTITIONS);
    let mut expected = BTreeMap::new();
    produce(&input, &mut expected, |i| (i % 5) as i64 + 1);
    let dir = tls_dir(&app);
    make_certificates(&dir);
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let b_metrics = free_addr();
    let _a = spawn(&app, "a", &a_addr, &free_addr(), Partitioner::Murmur2);
    let mut b = spawn(&app, "b", &b_addr, &b_metrics, Partitioner::Murmur2);
    let authenticated = client(&queries_config(&dir, "", true, false));
    let mut seen = Seen::new(authenticated.clone());
    let ceiling = |u: &str, e: &BTreeMap<String, i64>| e.get(u).copied().unwrap_or(0) + 2;

    // Phase 1: every key, from both instances, once both hold partitions.
    let mut owned_by_b = BTreeSet::new();
    support::wait_for(
        "every key answered with its count from both instances",
        Duration::from_secs(120),
        || {
            owned_by_b.clear();
            for addr in [&a_addr, &b_addr] {
                for (u, want) in &expected {
                    let (n, a) = seen.count(addr, u, ceiling(u, &expected))?;
                    if n != *want {
                        return None;
                    }
                    let p = a.body["partition"].as_i64().expect("partition");
                    let proxied = a.headers.get("eosflow-owner");
                    if (addr == &a_addr && proxied == Some(&b_addr))
                        || (addr == &b_addr && proxied.is_none())
                    {
                        owned_by_b.insert(p);
                    }
                }
            }
            (!owned_by_b.is_empty() && owned_by_b.len() < PARTITIONS as usize).then_some(())
        },
    );
    assert!(
        seen.proxied_by.get(&a_addr).copied().unwrap_or(0) > 0,
        "a never proxied"
    );
    assert!(
        seen.proxied_by.get(&b_addr).copied().unwrap_or(0) > 0,
        "b never proxied"
    );

    // Without credentials (or with a wrong token), even with a forged Eosflow-Forwarded
    // header: 401 from a for every key, and none of those requests reaches b (b's request
    // counter does not move).
    let b_requests = || {
        let (_, text) = support::http::get(&b_metrics, "/metrics").expect("b's metrics");
        support::http::metric(&text, "eosflow_query_requests_total", &[]).unwrap_or(0.0)
    };
    let before = b_requests();
    let nobody = anonymous_client(&dir);
    let mut wrong = queries_config(&dir, "", true, false);
    wrong.token = Secret::new("not-the-token");
    let wrong = client(&wrong);
    for u in expected.keys() {
        let path = format!("/stores/counts/keys/{u}");
        for (c, headers) in [
            (&nobody, &[][..]),
            (&nobody, &[(eosflow::query::FORWARDED_HEADER, "1")][..]),
            (&wrong, &[][..]),
        ] {
            let a = c
                .request_blocking(&a_addr, &path, headers)
                .expect("an answer");
            assert_eq!(a.status, 401, "{u} without credentials: {a:?}");
            assert!(
                !a.headers.iter().any(|(n, _)| n == "Eosflow-Owner"),
                "{a:?}"
            );
        }
    }
    assert_eq!(
        b_requests(),
        before,
        "an unauthenticated request reached b: it was proxied"
    );

    // Opted in, a answers b's keys from its warm standby copies, without asking b.
    support::wait_for(
        "a answering b's keys from its standby copies",
        Duration::from_secs(60),
        || {
            let mut from_standby = 0;
            for (u, want) in &expected {
                let a = ask_with(
                    &authenticated,
                    &a_addr,
                    &format!("/stores/counts/keys/{u}?max_standby_lag=1000000"),
                )?;
                if a.status != 200 || a.body["value"].as_i64() != Some(*want) {
                    return None;
                }
                assert!(
                    !a.headers.contains_key("eosflow-owner"),
                    "proxied although a standby copy was allowed: {}",
                    a.body
                );
                if let Some(lag) = a.headers.get("eosflow-standby-lag") {
                    assert_eq!(
                        a.body["standby_lag"].as_i64(),
                        lag.parse().ok(),
                        "{}",
                        a.body
                    );
                    from_standby += 1;
                }
            }
            (from_standby > 0).then_some(())
        },
    );

    // Phase 2: two more clicks per key, and b is killed while they are processed.
    produce(&input, &mut expected, |_| 2);
    b.kill().expect("kill -9 b");
    let _ = b.wait();
    let before = seen.unavailable;
    let ends: BTreeMap<i64, i64> = (0..PARTITIONS)
        .map(|p| {
            let (_, high) = eosflow::internals::kafka::reader::watermarks(
                &support::clients(),
                &input,
                p,
                Duration::from_secs(10),
            )
            .expect("input watermarks");
            (i64::from(p), high)
        })
        .collect();
    support::wait_for(
        "every key answered with its new total by the survivor",
        Duration::from_secs(120),
        || {
            for (u, want) in &expected {
                let (n, a) = seen.count(&a_addr, u, *want)?;
                if n != *want {
                    return None;
                }
                assert!(
                    !a.headers.contains_key("eosflow-owner"),
                    "a proxied {u} after b died: {}",
                    a.body
                );
                let p = a.body["partition"].as_i64().expect("partition");
                let next = a.body["positions"]
                    .as_array()
                    .and_then(|ps| {
                        ps.iter()
                            .find(|x| x["topic"] == input.as_str() && x["partition"] == p)
                    })
                    .and_then(|x| x["next_offset"].as_i64());
                if next != ends.get(&p).copied() {
                    return None;
                }
            }
            Some(())
        },
    );
    assert!(
        seen.unavailable > before,
        "b's keys never answered 503 while b was gone: {} 503s before the kill, {} after",
        before,
        seen.unavailable
    );
}

/// Windowed counts and ranges, in process: one instance started with `eosflow::start` over a
/// backlog of clicks in two one-minute windows; its `totals` (key-value) and `per-minute`
/// (windowed) stores are read through the library and over HTTP, and every answer equals what
/// the workload says.
#[test]
fn windows_and_ranges_are_answered_through_the_library_and_http() {
    use eosflow::dsl::{Consumed, Materialized, StreamsBuilder};
    use eosflow::topology::windows::TimeWindows;

    let app = support::unique("queries-windows");
    let input = format!("{app}.clicks");
    support::create_topics(&[&input], 2);
    const MINUTE: i64 = 60_000;
    let t0 = 1_700_000_000_000 / MINUTE * MINUTE;
    // user-i: i+1 clicks in the first minute, 1 in the second (users 0..12). A window is kept
    // for its grace after it ends (5 minutes here), so both are still there to read.
    let mut records = Vec::new();
    for i in 0..12usize {
        for j in 0..=i {
            records.push((None, user(i), "click".to_string(), t0 + j as i64));
        }
        records.push((None, user(i), "click".to_string(), t0 + MINUTE + 5));
    }
    support::produce_timed(&input, &records);

    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream(&input, Consumed::with(StringSerde, StringSerde))
        .group_by_key();
    let totals = grouped.count(Materialized::with(StringSerde, I64Serde).named("totals"));
    let per_minute = grouped
        .windowed_by(TimeWindows::of_size_with_grace(
            Duration::from_secs(60),
            Duration::from_secs(300),
        ))
        .count(Materialized::with(StringSerde, I64Serde).named("per-minute"));
    let (totals, per_minute) = (totals.store().clone(), per_minute.store().clone());
    let topology = builder.build().expect("topology");

    let dir = tls_dir(&app);
    make_certificates(&dir);
    let (addr, metrics) = (free_addr(), free_addr());
    let mut config = support::instance_config(&app, 500);
    config.metrics.listen = metrics.clone();
    // Client certificates only (no token); ranges of at most 5 entries.
    config.queries = queries_config(&dir, &addr, false, true);
    config.queries.max_limit = 5;
    let instance = eosflow::start(&config, topology).expect("starts");
    let with_cert = client(&config.queries);
    let ask = |addr: &str, path: &str| ask_with(&with_cert, addr, path);
    instance.queries().serve_store(&totals);
    instance.queries().serve_window_store(&per_minute);

    let kv = instance.store(&totals);
    support::wait_for("every user's total", Duration::from_secs(90), || {
        let all = kv.all().ok()?;
        (all.value.len() == 12
            && all.value.iter().all(|(u, n)| {
                let i: i64 = u.trim_start_matches("user-").parse().unwrap_or(-1);
                *n == i + 2
            }))
        .then_some(())
    });
    // Library: a key, a range, a prefix; every answer reflects both partitions' ends.
    let one = kv.get(&user(3)).expect("user-3");
    assert_eq!(one.value, Some(5));
    let range = kv.range(Some(&user(10)), Some(&user(11))).expect("range");
    let mut got: Vec<(String, i64)> = range.value.clone();
    got.sort();
    assert_eq!(got, vec![(user(10), 12), (user(11), 13)]);
    let prefix = kv.prefix(&"user-1".to_string()).expect("prefix");
    assert_eq!(
        prefix.value.len(),
        3,
        "user-1, user-10, user-11: {:?}",
        prefix.value
    );
    assert_eq!(range.partitions.len(), 2);
    let written: i64 = records.len() as i64;
    let reflected: i64 = range.positions.values().sum();
    assert_eq!(reflected, written, "positions {:?}", range.positions);
    assert!(range.reached(&input, one.partitions[0], 0));

    let windows = instance.window_store(&per_minute);
    let w = windows.fetch(&user(4), t0, t0 + MINUTE).expect("windows");
    let counts: Vec<(i64, i64)> = w.value.iter().map(|(w, n)| (w.start, *n)).collect();
    assert_eq!(counts, vec![(t0, 5), (t0 + MINUTE, 1)]);
    let none = windows
        .fetch(&user(4), t0 + 2 * MINUTE, i64::MAX)
        .expect("later windows");
    assert!(none.value.is_empty());

    // HTTP: the same answers as JSON.
    let a = ask(&addr, "/stores/totals/keys/user-3").expect("answer");
    assert_eq!(
        (a.status, a.body["value"].as_i64()),
        (200, Some(5)),
        "{}",
        a.body
    );
    assert!(a.headers.contains_key("eosflow-positions"));
    let missing = ask(&addr, "/stores/totals/keys/nobody").expect("answer");
    assert_eq!(missing.status, 404, "{}", missing.body);
    let r = ask(&addr, "/stores/totals?prefix=user-1&limit=2").expect("answer");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["entries"].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.body
    );
    assert_eq!(r.body["more"], true, "{}", r.body);
    // Pages of at most queries.max_limit (5) entries, whatever limit= asks, merged over both
    // partitions in key order; `next` resumes after the last one, until every user was seen
    // once.
    let mut pages = Vec::new();
    let mut path = "/stores/totals?limit=1000".to_string();
    loop {
        let page = ask(&addr, &path).expect("answer");
        assert_eq!(page.status, 200, "{}", page.body);
        let keys: Vec<String> = page.body["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["key"].as_str().unwrap_or_default().to_string())
            .collect();
        assert!(keys.len() <= 5, "{}", page.body);
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "not in key order: {keys:?}"
        );
        pages.push(keys);
        if page.body["more"] != true {
            break;
        }
        let next = page.body["next"].as_str().expect("next").to_string();
        path = format!("/stores/totals?limit=1000&after={next}");
    }
    let all: Vec<String> = pages.concat();
    let mut users: Vec<String> = (0..12).map(user).collect();
    users.sort();
    assert_eq!(all, users, "pages {pages:?}");
    assert_eq!(pages.len(), 3, "12 entries in pages of 5: {pages:?}");

    // Without a client certificate (and no token configured): 401, nothing read.
    let nobody = anonymous_client(&dir);
    let refused = ask_with(&nobody, &addr, "/stores/totals/keys/user-3").expect("answer");
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(refused.body.get("value").is_none(), "{}", refused.body);
    // The operations port serves no queries.
    let (code, _) = support::http::get(&metrics, "/stores/totals/keys/user-3").expect("ops");
    assert_eq!(code, 404);
    let path = format!(
        "/stores/per-minute/keys/user-4/windows?from={t0}&to={}",
        t0 + MINUTE
    );
    let wa = ask(&addr, &path).expect("answer");
    assert_eq!(wa.status, 200, "{}", wa.body);
    let starts: Vec<(i64, i64)> = wa.body["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .map(|w| {
            (
                w["start"].as_i64().unwrap_or(0),
                w["value"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(starts, vec![(t0, 5), (t0 + MINUTE, 1)]);
    let bad = ask(&addr, "/stores/per-minute/keys/user-4/windows?from=soon").expect("answer");
    assert_eq!(bad.status, 400, "{}", bad.body);
    let unknown = ask(&addr, "/stores/nope/keys/x").expect("answer");
    assert_eq!(unknown.status, 404);
    assert!(unknown.body["error"]
        .as_str()
        .unwrap_or("")
        .contains("serve_store"));
    // Each request is counted by store and outcome; an unserved name is not a label.
    let (_, text) = support::http::get(&metrics, "/metrics").expect("metrics");
    let count = |labels: &[&str]| {
        support::http::metric(&text, "eosflow_query_requests_total", labels).unwrap_or(0.0)
    };
    assert!(
        count(&["store=\"totals\"", "outcome=\"local\""]) >= 3.0,
        "{text}"
    );
    assert!(count(&["store=\"per-minute\"", "outcome=\"bad-request\""]) >= 1.0);
    assert!(count(&["store=\"-\""]) >= 1.0);
    assert!(count(&["outcome=\"unauthorized\""]) >= 1.0, "{text}");
    assert!(!text.contains("store=\"nope\""));
    instance.close().expect("stops");
}

/// Input produced by librdkafka's default partitioner (`consistent_random`: CRC-32 of the key,
/// what rust-rdkafka, confluent-kafka-python/-go and kcat use unless told otherwise), two
/// instances with `queries.partitioner = "consistent_random"`: every key is answered with its
/// count from either instance. Under murmur2 (the default, for eosflow's and Java's producers)
/// most of these keys would be looked for in another partition — checked first, so the test
/// proves the setting matters.
#[test]
fn keys_produced_by_librdkafka_s_default_partitioner_are_found_from_either_instance() {
    let app = support::unique("queries-crc32");
    let input = format!("{app}.clicks");
    support::create_topics(&[&input, &format!("{app}.counts")], PARTITIONS);
    let n = PARTITIONS as usize;
    let misplaced = (0..KEYS)
        .filter(|i| {
            let k = user(*i);
            Partitioner::Murmur2.partition(k.as_bytes(), n)
                != Partitioner::ConsistentRandom.partition(k.as_bytes(), n)
        })
        .count();
    assert!(misplaced > KEYS / 2, "only {misplaced} keys differ");

    let producer: rdkafka::producer::ThreadedProducer<_> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .set("partitioner", "consistent_random")
        .create()
        .expect("producer");
    let mut expected = BTreeMap::new();
    for i in 0..KEYS {
        for _ in 0..(i % 3 + 1) {
            support::send_waiting(
                &producer,
                BaseRecord::to(&input).key(&user(i)).payload("click"),
            );
        }
        expected.insert(user(i), (i % 3 + 1) as i64);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");

    let dir = tls_dir(&app);
    make_certificates(&dir);
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let _a = spawn(
        &app,
        "a",
        &a_addr,
        &free_addr(),
        Partitioner::ConsistentRandom,
    );
    let _b = spawn(
        &app,
        "b",
        &b_addr,
        &free_addr(),
        Partitioner::ConsistentRandom,
    );
    let mut seen = Seen::new(client(&queries_config(&dir, "", true, false)));
    support::wait_for(
        "every key answered with its count from both instances",
        Duration::from_secs(120),
        || {
            let mut proxied = 0;
            for addr in [&a_addr, &b_addr] {
                for (u, want) in &expected {
                    let (got, a) = seen.count(addr, u, *want)?;
                    if got != *want {
                        return None;
                    }
                    let p = a.body["partition"].as_i64().expect("partition");
                    assert_eq!(
                        p,
                        i64::from(Partitioner::ConsistentRandom.partition(u.as_bytes(), n)),
                        "{u}"
                    );
                    proxied += usize::from(a.headers.contains_key("eosflow-owner"));
                }
            }
            // Both instances hold partitions: some answers came from the other one.
            (proxied > 0).then_some(())
        },
    );
}

// Issue 49: positions behind a repartition. The store `counts` is written by the sub-topology
// reading the repartition topic, in whatever partition the customer hashes to; the client only
// knows its order's input offset.
#[test]
fn a_write_behind_a_repartition_is_read_back_from_either_instance() {
    let app = support::unique("queries-rekey");
    let input = format!("{app}.clicks");
    support::create_topics(&[&input, &format!("{app}.counts")], PARTITIONS);
    let dir = tls_dir(&app);
    make_certificates(&dir);
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let _a = spawn(&app, "a", &a_addr, &free_addr(), Partitioner::Murmur2);
    let _b = spawn(&app, "b", &b_addr, &free_addr(), Partitioner::Murmur2);
    let client = client(&queries_config(&dir, "", true, false));
    // Orders of five customers, all written to input partition 0; the last one is the
    // client's own write, at offset `n`.
    let producer = support::test_producer();
    for i in 0..KEYS {
        let order = format!("team-{}:order-{i}", i % 5);
        support::send_waiting(
            &producer,
            BaseRecord::to(&input)
                .partition(0)
                .key(&user(i))
                .payload(&order),
        );
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let n = support::written(&input, 1) - 1;
    let team = format!("team-{}", (KEYS - 1) % 5);
    let want = (0..KEYS).filter(|i| i % 5 == (KEYS - 1) % 5).count() as i64;
    for addr in [&a_addr, &b_addr] {
        let path = format!("/stores/counts/keys/{team}?position={input}:0:{n}");
        let a = support::wait_for(
            &format!("{team} at {input}:0:{n} from {addr}"),
            Duration::from_secs(120),
            || {
                let a = ask_with(&client, addr, &path)?;
                (a.status == 200).then_some(a)
            },
        );
        // Every order written to partition 0 up to `n` reached the store: the count is exact.
        assert_eq!(a.body["value"].as_i64(), Some(want), "{}", a.body);
        let positions = a.body["positions"].as_array().expect("positions");
        assert!(
            positions.iter().any(|q| q["topic"] == input.as_str()
                && q["partition"] == 0
                && q["next_offset"].as_i64() > Some(n)),
            "the input's position behind the repartition: {}",
            a.body
        );
        // A record not written yet is not reflected: 503 with Retry-After, as documented.
        let ahead = format!("/stores/counts/keys/{team}?position={input}:0:{}", n + 1000);
        let a = support::wait_for("an answer", Duration::from_secs(30), || {
            ask_with(&client, addr, &ahead)
        });
        assert_eq!(a.status, 503, "{}", a.body);
        assert!(a.headers.contains_key("retry-after"));
        assert!(
            a.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("does not reflect")),
            "{}",
            a.body
        );
    }
}
