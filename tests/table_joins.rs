//! Table-table joins against the real broker, written with the DSL: two compacted topics read
//! as tables (`users`, `addresses`) and a table of order counts (an aggregation of `orders`),
//! co-partitioned on 4 partitions, joined three ways by one topology — users left- and
//! outer-joined with addresses, order counts inner-joined with users — each into a result
//! table whose change stream goes to an output topic.
//!
//! The whole first workload is produced before the instance starts (a backlog): upserts and
//! tombstones of both tables (empty rows and a 400 kB row among them) and orders, each record
//! with the next timestamp. The instance is `kill -9`ed in the middle of the backlog and
//! restarted on a wiped state directory (its stores rebuilt from their changelogs alone); once
//! it has caught up it is killed again, the state directory wiped again, a second workload
//! produced while nothing runs, and a third instance started. After each catch-up the
//! read_committed outputs must equal, key by key and in order, the changes computed from the
//! workload alone (every change once, a tombstone where a joined row disappears), and the
//! folded outputs and the result stores' changelogs must both equal the final tables the
//! workload gives.
//!
//! The killed instance is this test binary re-executed in child mode (`TABLE_JOINS_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::Topology;
use eosflow_verify::group_lag;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::Message;

const CHILD: &str = "TABLE_JOINS_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: u64 = 40;
/// Events of the first workload (the backlog the first instance starts on) and the second.
const FIRST: usize = 3_000;
const SECOND: usize = 600;
const HUGE: usize = 400_000;

fn key(k: u64) -> String {
    format!("user-{k:02}")
}

/// `users ⟕ addresses` to `<app>.left`, `users ⟗ addresses` to `<app>.outer`, and
/// `order counts ⋈ users` to `<app>.inner`.
fn topology(app: &str) -> Topology {
    let b = StreamsBuilder::new();
    let strings = || Consumed::with(StringSerde, StringSerde);
    let users = b.table(format!("{app}.users"), strings().named("users"));
    let addresses = b.table(format!("{app}.addresses"), strings().named("addresses"));
    let counts = b
        .stream(format!("{app}.orders"), strings())
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("order-counts"));
    let out = |name: &str| Materialized::with(StringSerde, StringSerde).named(name);
    let to = |name: &str| {
        (
            format!("{app}.{name}"),
            Produced::with(StringSerde, StringSerde),
        )
    };
    let (topic, produced) = to("left");
    users
        .left_join(&addresses, left, out("left"))
        .to_stream()
        .to(topic, produced);
    let (topic, produced) = to("outer");
    users
        .outer_join(&addresses, outer, out("outer"))
        .to_stream()
        .to(topic, produced);
    let (topic, produced) = to("inner");
    counts
        .join(&users, |n, u| inner(*n, u), out("inner"))
        .to_stream()
        .to(topic, produced);
    b.build().expect("valid topology")
}

fn left(user: &String, address: Option<&String>) -> String {
    format!("{user}@{}", address.map_or("-", String::as_str))
}

fn outer(user: Option<&String>, address: Option<&String>) -> String {
    let or = |v: Option<&String>| v.map_or("-".to_string(), String::clone);
    format!("{}@{}", or(user), or(address))
}

fn inner(orders: i64, user: &String) -> String {
    format!("{user}:{orders}")
}

fn config(app: &str) -> Config {
    // Small transactions, so the first kill lands in the middle of the backlog.
    support::instance_config(app, 20)
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(config(&app), topology(&app));
}

/// One record of the workload: a row of `users` or `addresses` (`None`: a tombstone), or an
/// order.
#[derive(Debug, Clone)]
enum Event {
    User(String, Option<String>),
    Address(String, Option<String>),
    Order(String),
}

/// `n` events numbered from `first`, deterministic: half orders, a quarter rows of each table,
/// a fifth of the rows tombstones, some rows empty; event 50 a 400 kB user row.
fn workload(first: usize, n: usize) -> Vec<Event> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ first as u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (first..first + n)
        .map(|i| {
            let k = key(next(KEYS));
            // A fifth of the rows tombstones, a tenth empty.
            let row = |kind: &str, r: u64| match r {
                0 | 1 => None,
                2 => Some(String::new()),
                _ => Some(format!("{kind}-{i}")),
            };
            if i == 50 {
                return Event::User(k, Some("h".repeat(HUGE)));
            }
            match next(4) {
                0 | 1 => Event::Order(k),
                2 => Event::User(k, row("name", next(10))),
                _ => Event::Address(k, row("city", next(10))),
            }
        })
        .collect()
}

/// Produces the events in order with the next timestamp each (`base + i`) and an `id` header,
/// waiting for every acknowledgment: each topic's partitions are in timestamp order, and the
/// runtime aligns a partition number's three topics by timestamp.
fn produce(app: &str, events: &[Event], first: usize, base: i64) {
    let producer = support::test_producer();
    for (i, e) in events.iter().enumerate() {
        let n = first + i;
        let (topic, k, v) = match e {
            Event::User(k, v) => ("users", k, v.as_deref()),
            Event::Address(k, v) => ("addresses", k, v.as_deref()),
            Event::Order(k) => ("orders", k, Some("order")),
        };
        let topic = format!("{app}.{topic}");
        let id = format!("event-{n}");
        let mut r = BaseRecord::<str, str>::to(&topic)
            .key(k.as_str())
            .timestamp(base + n as i64)
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            }));
        if let Some(v) = v {
            r = r.payload(v);
        }
        support::send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// What the three outputs must hold, computed from the events alone: per output and key,
/// every change in order (`None`: a tombstone), and the final tables.
#[derive(Debug, Default)]
struct Model {
    users: BTreeMap<String, String>,
    addresses: BTreeMap<String, String>,
    orders: BTreeMap<String, i64>,
    /// Per output (`left`, `outer`, `inner`): each key's changes.
    changes: BTreeMap<&'static str, BTreeMap<String, Vec<Option<String>>>>,
    /// Per output: the result table.
    tables: BTreeMap<&'static str, BTreeMap<String, String>>,
}

impl Model {
    fn apply(&mut self, event: &Event) {
        let k = match event {
            Event::User(k, v) | Event::Address(k, v) => {
                let side = match event {
                    Event::User(..) => &mut self.users,
                    _ => &mut self.addresses,
                };
                match v {
                    Some(v) => side.insert(k.clone(), v.clone()),
                    None => side.remove(k),
                };
                k
            }
            Event::Order(k) => {
                *self.orders.entry(k.clone()).or_default() += 1;
                k
            }
        };
        let (u, a) = (self.users.get(k), self.addresses.get(k));
        let left_row = u.map(|u| left(u, a));
        let outer_row = (u.is_some() || a.is_some()).then(|| outer(u, a));
        let inner_row = match (self.orders.get(k), u) {
            (Some(n), Some(u)) => Some(inner(*n, u)),
            _ => None,
        };
        let user_row = matches!(event, Event::User(..));
        // An address changes the left and outer joins, a user all three, an order the inner.
        if !matches!(event, Event::Order(_)) {
            self.change("left", k, left_row);
            self.change("outer", k, outer_row);
        }
        if user_row || matches!(event, Event::Order(_)) {
            self.change("inner", k, inner_row);
        }
    }

    /// A key's recomputed row: emitted when there is one, a tombstone when one was there.
    fn change(&mut self, output: &'static str, k: &str, row: Option<String>) {
        let table = self.tables.entry(output).or_default();
        let emitted = match row {
            Some(r) => {
                table.insert(k.to_string(), r.clone());
                Some(Some(r))
            }
            None => table.remove(k).map(|_| None),
        };
        if let Some(change) = emitted {
            self.changes
                .entry(output)
                .or_default()
                .entry(k.to_string())
                .or_default()
                .push(change);
        }
    }
}

fn lag(app: &str) -> i64 {
    ["users", "addresses", "orders"]
        .iter()
        .map(|t| {
            group_lag(&support::clients(), app, &format!("{app}.{t}"), PARTITIONS)
                .unwrap_or(i64::MAX / 4)
        })
        .sum()
}

/// Every record of `topic`, read_committed: per key, the values in order (`None`: a
/// tombstone).
fn changes(topic: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let mut got: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = m.payload().map(|v| String::from_utf8_lossy(v).to_string());
        got.entry(key).or_default().push(value);
        Ok(())
    })
    .expect("read a topic");
    got
}

/// The table a change stream leaves: each key's last value, tombstoned keys gone.
fn fold(changes: &BTreeMap<String, Vec<Option<String>>>) -> BTreeMap<String, String> {
    changes
        .iter()
        .filter_map(|(k, list)| list.last().cloned().flatten().map(|v| (k.clone(), v)))
        .collect()
}

/// Compares one output with the model: every change of every key, the folded table, and the
/// result store's changelog folded.
fn check(app: &str, model: &Model, output: &'static str) {
    let got = changes(&format!("{app}.{output}"));
    let want = model.changes.get(output).cloned().unwrap_or_default();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{output}: keys"
    );
    for (k, list) in &want {
        let short = |l: &[Option<String>]| -> Vec<Option<String>> {
            l.iter()
                .map(|v| v.as_ref().map(|v| v.chars().take(40).collect()))
                .collect()
        };
        let g = got.get(k).cloned().unwrap_or_default();
        assert!(
            g == *list,
            "{output} of {k}: got {:?}, want {:?}",
            short(&g),
            short(list)
        );
    }
    let table = model.tables.get(output).cloned().unwrap_or_default();
    assert_eq!(fold(&got), table, "{output}: the folded outputs");
    // A store's changelog keys are its column's tag (`s`: the rows) then the key.
    let store: BTreeMap<String, Vec<Option<String>>> =
        changes(&format!("{app}-{output}-changelog"))
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix('s').map(|k| (k.to_string(), v)))
            .collect();
    assert_eq!(
        fold(&store),
        table,
        "{output}: the result store's changelog"
    );
}

fn spawn(app: &str) -> support::pipeline::Running {
    support::spawn_child(CHILD, app)
}

fn wait_caught_up(app: &str) {
    support::wait_for(
        "every table row and order processed",
        Duration::from_secs(180),
        || (lag(app) == 0).then_some(()),
    );
}

#[test]
fn table_table_joins_from_a_backlog_across_kill_9_and_wiped_state_give_the_workloads_tables() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("table-joins");
    let cfg = config(&app);
    let t = topology(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.users"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.addresses"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
    ];
    for out in ["left", "outer", "inner"] {
        specs.push(TopicSpec::new(format!("{app}.{out}"), PARTITIONS, "delete"));
    }
    specs.extend(t.internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let base = chrono_ms() - 600_000;

    // The first workload, whole, before any instance runs.
    let first = workload(0, FIRST);
    produce(&app, &first, 0, base);
    let mut model = Model::default();
    first.iter().for_each(|e| model.apply(e));
    let total = FIRST as i64;

    // Killed in the middle of the backlog, restarted on a wiped state dir.
    let mut instance = spawn(&app);
    support::wait_for(
        "a third of the backlog processed",
        Duration::from_secs(120),
        || (lag(&app) < total * 2 / 3).then_some(()),
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");
    let left_at_kill = lag(&app);
    println!("killed with {left_at_kill} of {total} records left");
    assert!(left_at_kill > 0, "the kill must land in the backlog");
    std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
    let mut instance = spawn(&app);
    wait_caught_up(&app);
    for output in ["left", "outer", "inner"] {
        check(&app, &model, output);
    }
    let after_first = started.elapsed();

    // Killed again, state wiped; a second workload produced while nothing runs: its changes
    // are right only if the join's stores came back from their changelogs.
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");
    std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
    let second = workload(FIRST, SECOND);
    produce(&app, &second, FIRST, base);
    second.iter().for_each(|e| model.apply(e));
    let mut instance = spawn(&app);
    wait_caught_up(&app);
    for output in ["left", "outer", "inner"] {
        check(&app, &model, output);
    }
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let dead: usize = ["users", "addresses", "orders"]
        .iter()
        .map(|t| {
            let mut n = 0;
            read_all(
                &support::clients(),
                &format!("{app}.{t}.DLT"),
                Duration::from_secs(30),
                |_| {
                    n += 1;
                    Ok(())
                },
            )
            .expect("read a DLT");
            n
        })
        .sum();
    assert_eq!(dead, 0, "nothing dead-lettered");
    let sizes: Vec<String> = ["left", "outer", "inner"]
        .iter()
        .map(|o| {
            let changes: usize = model.changes[o].values().map(Vec::len).sum();
            format!("{o}: {changes} changes, {} rows", model.tables[o].len())
        })
        .collect();
    println!(
        "{} events, {}; first catch-up after {:.1} s, all {:.1} s",
        FIRST + SECOND,
        sizes.join("; "),
        after_first.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

/// Now, in ms since the epoch.
fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[test]
fn joined_tables_on_different_partition_counts_refuse_to_start() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("table-joins-copart");
    let mut cfg = config(&app);
    cfg.processor.static_membership = true;
    let mut specs = vec![
        TopicSpec::new(format!("{app}.users"), 2, "compact"),
        TopicSpec::new(format!("{app}.addresses"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
    ];
    specs.extend(topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let err = eosflow::internals::processor::Runtime::new(&cfg, topology(&app))
        .err()
        .expect("a table on 2 partitions joined with one on 4 must not start")
        .to_string();
    for part in [
        format!("{app}.users=2"),
        format!("{app}.addresses=4"),
        "not co-partitioned".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} missing from {err}");
    }
}

/// A topic's table declared before a table aggregated behind a repartition: the join ties the
/// repartition topic and the table's topic into the first sub-topology, whose task then reads
/// a repartition topic and its writers' watermark records.
fn rekeyed_topology(app: &str) -> Topology {
    let b = StreamsBuilder::new();
    let names = b.table(
        format!("{app}.customers"),
        Consumed::with(StringSerde, StringSerde).named("customers"),
    );
    // Orders keyed by order id, valued by customer: counted per customer after a re-key.
    let counts = b
        .stream(
            format!("{app}.orders"),
            Consumed::with(StringSerde, StringSerde),
        )
        .group_by(
            |_, customer| customer.clone(),
            Grouped::with(StringSerde, StringSerde).named("by-customer"),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("counts"));
    names
        .join(
            &counts,
            |name, n| inner(*n, name),
            Materialized::with(StringSerde, StringSerde).named("named-counts"),
        )
        .to_stream()
        .to(
            format!("{app}.named-counts"),
            Produced::with(StringSerde, StringSerde),
        );
    b.build().expect("valid topology")
}

#[test]
fn a_topic_table_joined_with_a_table_behind_a_repartition_takes_its_watermarks_in_stride() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("table-joins-rekey");
    let mut cfg = config(&app);
    cfg.processor.max_batch_records = 200;
    let t = rekeyed_topology(&app);
    assert_eq!(t.sub_topologies().len(), 2);
    assert!(t.sub_topologies()[0].contains(&"customers".to_string()));
    let mut specs = vec![
        TopicSpec::new(format!("{app}.customers"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.named-counts"), PARTITIONS, "delete"),
    ];
    specs.extend(t.internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let base = chrono_ms() - 600_000;
    let producer = support::test_producer();
    let mut names = BTreeMap::new();
    for c in 0..KEYS {
        let name = format!("name-{c}");
        let (topic, k) = (format!("{app}.customers"), key(c));
        let r = BaseRecord::<str, str>::to(&topic)
            .key(&k)
            .payload(&name)
            .timestamp(base);
        support::send_waiting(&producer, r);
        names.insert(key(c), name);
    }
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..2_000u64 {
        let customer = key((i * 7) % KEYS);
        *counts.entry(customer.clone()).or_default() += 1;
        let (topic, order) = (format!("{app}.orders"), format!("order-{i}"));
        let id = format!("order-id-{i}");
        let r = BaseRecord::<str, str>::to(&topic)
            .key(&order)
            .payload(&customer)
            .timestamp(base + 1 + i as i64)
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            }));
        support::send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");

    let instance = support::pipeline::Instance::start(&cfg, rekeyed_topology(&app));
    let repartition = format!("{app}-by-customer-repartition");
    support::wait_for(
        "the orders, the customers and the re-keyed orders processed",
        Duration::from_secs(180),
        || {
            let lag = support::lag(&app, &format!("{app}.orders"), PARTITIONS)
                + support::lag(&app, &format!("{app}.customers"), PARTITIONS)
                + support::lag(&app, &repartition, PARTITIONS);
            (lag == 0).then_some(())
        },
    );
    instance.stop();

    let want: BTreeMap<String, String> = counts
        .iter()
        .map(|(c, n)| (c.clone(), inner(*n, &names[c])))
        .collect();
    let got = fold(&changes(&format!("{app}.named-counts")));
    assert_eq!(got, want, "each customer's name beside its order count");
    for topic in [
        format!("{app}.orders.DLT"),
        format!("{app}.customers.DLT"),
        format!("{repartition}.DLT"),
    ] {
        let mut dead = Vec::new();
        read_all(&support::clients(), &topic, Duration::from_secs(30), |m| {
            dead.push(format!("{:?}", m.headers().map(|h| h.count())));
            Ok(())
        })
        .expect("read a DLT");
        assert!(dead.is_empty(), "{topic}: {} dead letters", dead.len());
    }
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}
