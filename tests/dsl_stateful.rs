//! The DSL's stateful operators of issue #48 on the real broker, under `kill -9`: a cogroup of
//! three streams (one re-keyed through a repartition topic), a windowed `reduce` on time
//! windows emitted on close, one on session windows (re-keyed) emitted on update, and
//! `to_table` followed by a table-table join.
//!
//! Each test runs the shape of `tests/dsl.rs` ([`support::kill::KillTest`]):
//! - **a backlog**: two thirds of the workload are produced before any instance starts;
//! - **kill -9** of the first instance mid-backlog (asserted: input or repartition records
//!   left) and of its replacement once it has written results of its own, the rest of the
//!   workload produced while it runs;
//! - a third instance on a **wiped state directory** (stores and timers restored from their
//!   changelogs) finishing the work.
//!
//! The read_committed output — and where the operator keeps a key-value store, that store's
//! changelog — must equal what the workload alone says, and no DLT may hold a record.
//!
//! The instances are this test binary re-executed in child mode (`DSL_STATEFUL_CHILD`, its
//! value the application id, whose prefix names the topology).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::topology::windows::{EmitStrategy, SessionWindows, TimeWindows, WindowedSerde};
use eosflow::topology::Topology;
use rdkafka::producer::BaseRecord;

const CHILD: &str = "DSL_STATEFUL_CHILD";
const PARTITIONS: i32 = 4;
/// Records of each workload, and how many of them are produced before the first instance
/// starts (the backlog).
const RECORDS: u64 = 3000;
const BACKLOG: u64 = 2000;
/// Input records the first instance consumes before it is killed.
const CONSUMED_BEFORE_KILL: i64 = 300;
/// Each record is 10 ms after the one before: a workload spans 30 s of event time.
const STEP_MS: i64 = 10;

/// One record to produce: key, value (`None`: a tombstone) and offset from the base time.
type Rec = (String, Option<Vec<u8>>, i64);

/// Produces `records` to `topic` in order, each at `base` plus its offset.
fn produce(topic: &str, base: i64, records: &[Rec]) {
    let producer = support::test_producer();
    for (key, value, at) in records {
        let r = BaseRecord::<[u8], [u8]>::to(topic)
            .key(key.as_bytes())
            .timestamp(base + at);
        let r = match value {
            Some(v) => r.payload(v.as_slice()),
            None => r,
        };
        support::send_waiting(&producer, r);
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");
}

fn text(s: impl Into<String>) -> Option<Vec<u8>> {
    Some(s.into().into_bytes())
}

/// Now, rounded down to `unit` ms: recent timestamps (older ones would be past the topics'
/// retention), window-aligned.
fn base(unit: i64) -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        / unit
        * unit
}

fn config(app: &str) -> Config {
    // Small transactions (10 records): the kill lands mid-backlog.
    let mut c = support::instance_config(app, 10);
    c.processor.repartition_purge_interval_ms = 0;
    c
}

/// Child mode: runs the topology the application id's prefix names until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    let topology = match app.split('-').next() {
        Some("cogroup") => cogroup::topology(&app),
        Some("tumbling") => tumbling::topology(&app),
        Some("sessions") => sessions::topology(&app),
        Some("totable") => to_table::topology(&app),
        _ => panic!("no topology for {app}"),
    };
    support::run_until_killed(config(&app), topology);
}

/// A test's application: its own topics created, its config and topology, ready to run.
struct App {
    name: String,
    config: Config,
    internal: Vec<TopicSpec>,
}

impl App {
    /// Creates `app`'s own topics (`<app>.<input>` for each of `inputs`, compacted when
    /// marked so, and `<app>.out`); the instances create the internal ones.
    fn new(prefix: &str, topology: fn(&str) -> Topology, inputs: &[(&str, bool)]) -> Self {
        let name = support::unique(prefix);
        let config = config(&name);
        let mut specs: Vec<TopicSpec> = inputs
            .iter()
            .map(|(input, compact)| {
                let policy = if *compact { "compact" } else { "delete" };
                TopicSpec::new(format!("{name}.{input}"), PARTITIONS, policy)
            })
            .collect();
        specs.push(TopicSpec::new(format!("{name}.out"), PARTITIONS, "delete"));
        topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
            .expect("creating the application's own topics");
        let internal = topology(&name).internal_topics(&config, PARTITIONS);
        Self {
            name,
            config,
            internal,
        }
    }

    fn topic(&self, input: &str) -> String {
        format!("{}.{input}", self.name)
    }

    fn output(&self) -> String {
        self.topic("out")
    }

    /// `<app>-<name>-repartition`, asserted to be one of the topology's internal topics.
    fn repartition(&self, name: &str) -> String {
        let topic = format!("{}-{name}-repartition", self.name);
        assert!(
            self.internal.iter().any(|s| s.name == topic),
            "{topic} is an internal topic: {:?}",
            self.internal.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        topic
    }

    /// Runs the kill test: the backlog (`produce(0..BACKLOG)`) before the first instance, the
    /// rest while the second runs, a third on a wiped state directory to the end.
    fn run(&self, inputs: &[&str], repartition: &[&str], produce: impl Fn(std::ops::Range<u64>)) {
        let inputs: Vec<String> = inputs.iter().map(|i| self.topic(i)).collect();
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let run = support::kill::KillTest::new(
            CHILD,
            &self.config,
            PARTITIONS,
            (&inputs, repartition),
            &self.output(),
        );
        produce(0..BACKLOG);
        run.kill_first_mid_backlog(BACKLOG as i64, CONSUMED_BEFORE_KILL);
        let second = run.start_second();
        produce(BACKLOG..RECORDS);
        run.kill_then_drain_on_wiped_state(second);
        support::kill::assert_no_dead_letters(&self.internal);
    }
}

/// A windowed output key (`key bytes · start · end`) as (key, start, end).
fn windowed_key(bytes: &[u8]) -> (String, i64, i64) {
    let (key, times) = bytes.split_at(bytes.len() - 16);
    let be = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    (
        String::from_utf8_lossy(key).to_string(),
        be(&times[..8]),
        be(&times[8..]),
    )
}

fn utf8(v: &[u8]) -> String {
    String::from_utf8(v.to_vec()).expect("text values")
}

/// Two `count:sum` pairs added: the reducer of both windowed reduces (commutative, so the
/// result does not depend on the order a repartition delivers the records in; a record
/// reduced twice or lost changes it).
fn add_pairs(a: String, b: &str) -> String {
    let parse = |s: &str| -> (i64, i64) {
        let (n, sum) = s.split_once(':').unwrap_or(("0", "0"));
        (n.parse().unwrap_or(0), sum.parse().unwrap_or(0))
    };
    let ((n1, s1), (n2, s2)) = (parse(&a), parse(b));
    format!("{}:{}", n1 + n2, s1 + s2)
}

/// Record `i`'s amount: small, some negative.
fn amount(i: u64) -> i64 {
    (i % 97) as i64 - 20
}

mod cogroup {
    //! orders (keyed by customer) + payments (keyed by payment, re-keyed by customer) +
    //! refunds (keyed by customer, i64 values) → one (orders, paid, refunded) per customer.
    //!
    //! The aggregating task reads three topics, one of them the repartition topic its own
    //! instance is writing, in timestamp alignment (the default `max_task_idle_ms = 0`): the
    //! slowest test of the file (on 2026-12-07, under load, 2.3× the CPU time and 3× the wall
    //! time of the same run with `-1`), kept so because it is what a user runs.
    use super::*;

    const CUSTOMERS: u64 = 60;

    pub fn customer(i: u64) -> String {
        format!("c-{:02}", (i * 7 + i / 3) % CUSTOMERS)
    }

    pub fn topology(app: &str) -> Topology {
        let b = StreamsBuilder::new();
        let orders = b
            .stream(
                format!("{app}.orders"),
                Consumed::with(StringSerde, StringSerde),
            )
            .group_by_key();
        let payments = b
            .stream(
                format!("{app}.payments"),
                Consumed::with(StringSerde, StringSerde),
            )
            .group_by(
                |_payment, v: &String| v.split(':').next().unwrap_or_default().to_string(),
                Grouped::with(StringSerde, StringSerde).named("payments-by-customer"),
            );
        let refunds = b
            .stream(
                format!("{app}.refunds"),
                Consumed::with(StringSerde, I64Serde),
            )
            .group_by_key();
        orders
            .cogroup(|_, _order: &String, (n, paid, refunded): (i64, i64, i64)| {
                (n + 1, paid, refunded)
            })
            .cogroup(&payments, |_, v: &String, (n, paid, refunded)| {
                let amount: i64 = v
                    .split(':')
                    .nth(1)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                (n, paid + amount, refunded)
            })
            .cogroup(&refunds, |_, amount: &i64, (n, paid, refunded)| {
                (n, paid, refunded + amount)
            })
            .named("summary")
            .aggregate(
                || (0, 0, 0),
                Materialized::with(StringSerde, JsonSerde::new()).named("summaries"),
            )
            .to_stream()
            .map_values(|(n, paid, refunded)| format!("{n}:{paid}:{refunded}"))
            .to(
                format!("{app}.out"),
                Produced::with(StringSerde, StringSerde),
            );
        b.build().expect("the DSL topology builds")
    }
}

#[test]
fn a_cogroup_of_three_streams_one_rekeyed_killed_mid_backlog_folds_each_record_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    use cogroup::customer;
    let app = App::new(
        "cogroup",
        cogroup::topology,
        &[("orders", false), ("payments", false), ("refunds", false)],
    );
    let repartition = app.repartition("payments-by-customer");
    let base = base(1);
    // Record i: an order (i % 3 == 0), a payment keyed by its own id, or a refund.
    let (orders, payments, refunds) = (
        app.topic("orders"),
        app.topic("payments"),
        app.topic("refunds"),
    );
    app.run(
        &["orders", "payments", "refunds"],
        &[&repartition],
        |range| {
            let at = |i: u64| i as i64 * STEP_MS;
            let of = |r: u64| range.clone().filter(move |i| i % 3 == r);
            let o: Vec<Rec> = of(0)
                .map(|i| (customer(i), text(format!("o-{i}")), at(i)))
                .collect();
            let p: Vec<Rec> = of(1)
                .map(|i| {
                    (
                        format!("p-{i}"),
                        text(format!("{}:{}", customer(i), amount(i))),
                        at(i),
                    )
                })
                .collect();
            let r: Vec<Rec> = of(2)
                .map(|i| (customer(i), Some(amount(i).to_be_bytes().to_vec()), at(i)))
                .collect();
            produce(&orders, base, &o);
            produce(&payments, base, &p);
            produce(&refunds, base, &r);
        },
    );

    let mut expected: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for i in 0..RECORDS {
        let e = expected.entry(customer(i)).or_default();
        match i % 3 {
            0 => e.0 += 1,
            1 => e.1 += amount(i),
            _ => e.2 += amount(i),
        }
    }
    let as_text = |(n, p, r): &(i64, i64, i64)| format!("{n}:{p}:{r}");
    let want: BTreeMap<String, String> = expected
        .iter()
        .map(|(c, e)| (c.clone(), as_text(e)))
        .collect();
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (customer, v) in support::read_payloads(&app.output()) {
        got.insert(customer, utf8(&v));
    }
    assert_eq!(got, want, "each customer's last (orders, paid, refunded)");
    let store: BTreeMap<String, String> =
        support::kill::store_from_changelog(&app.name, "summaries")
            .into_iter()
            .map(|(k, v)| {
                let e: (i64, i64, i64) = serde_json::from_slice(&v).expect("a JSON summary");
                (utf8(&k), as_text(&e))
            })
            .collect();
    assert_eq!(store, want, "the cogroup's store, from its changelog");
}

mod tumbling {
    //! readings (keyed by sensor) → the (count, sum) per sensor per 2 s, emitted on close.
    use super::*;

    pub const SENSORS: u64 = 20;
    pub const WINDOW_MS: i64 = 2000;
    pub const GRACE_MS: i64 = 500;

    pub fn sensor(i: u64) -> String {
        format!("s-{:02}", (i * 7 + i / 3) % SENSORS)
    }

    pub fn topology(app: &str) -> Topology {
        let b = StreamsBuilder::new();
        b.stream(
            format!("{app}.readings"),
            Consumed::with(StringSerde, StringSerde),
        )
        .group_by_key()
        .windowed_by(TimeWindows::of_size_with_grace(
            Duration::from_millis(WINDOW_MS as u64),
            Duration::from_millis(GRACE_MS as u64),
        ))
        .emit_strategy(EmitStrategy::OnWindowClose)
        .reduce(
            |a, b: &String| add_pairs(a, b),
            Materialized::with(StringSerde, StringSerde).named("sums"),
        )
        .to_stream()
        .to(
            format!("{app}.out"),
            Produced::with(WindowedSerde::new(StringSerde), StringSerde),
        );
        b.build().expect("the DSL topology builds")
    }
}

#[test]
fn a_windowed_reduce_on_close_killed_mid_backlog_emits_each_closed_window_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    use tumbling::{sensor, GRACE_MS, SENSORS, WINDOW_MS};
    let app = App::new("tumbling", tumbling::topology, &[("readings", false)]);
    let base = base(WINDOW_MS);
    // After the readings, one per sensor a minute later: every partition's stream time passes
    // the close of every window of the readings (the closers' own windows stay open).
    let closer_at = RECORDS as i64 * STEP_MS + 60_000;
    let readings = app.topic("readings");
    app.run(&["readings"], &[], |range| {
        let mut records: Vec<Rec> = range
            .clone()
            .map(|i| {
                (
                    sensor(i),
                    text(format!("1:{}", amount(i))),
                    i as i64 * STEP_MS,
                )
            })
            .collect();
        if range.end == RECORDS {
            records.extend((0..SENSORS).map(|s| (format!("s-{s:02}"), text("1:0"), closer_at)));
        }
        produce(&readings, base, &records);
    });

    // Every window of the readings, once, with its (count, sum); none of the closers'.
    let mut windows: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for i in 0..RECORDS {
        let start = i as i64 * STEP_MS / WINDOW_MS * WINDOW_MS;
        let w = windows.entry((sensor(i), base + start)).or_default();
        *w = (w.0 + 1, w.1 + amount(i));
    }
    let want: Vec<((String, i64, i64), String)> = windows
        .into_iter()
        .map(|((s, start), (n, sum))| ((s, start, start + WINDOW_MS), format!("{n}:{sum}")))
        .collect();
    // Every record of the output, in key order: a window emitted twice shows twice.
    let mut got: Vec<((String, i64, i64), String)> = Vec::new();
    for (k, values) in support::kill::changes(&app.output()) {
        for v in values {
            got.push((windowed_key(&k), utf8(&v.expect("no tombstone on close"))));
        }
    }
    got.sort();
    println!(
        "{} windows emitted on close (grace {GRACE_MS} ms)",
        got.len()
    );
    assert_eq!(
        got, want,
        "each window of the readings, once, with its final sum"
    );
}

mod sessions {
    //! visits (keyed by visit) → re-keyed by user → (count, sum) per user session (a 255 ms
    //! gap), emitted on every update.
    use super::*;

    pub const USERS: u64 = 30;
    pub const GAP_MS: i64 = 255;

    /// Record `i`'s user: about one record in 30 each, at irregular distances, so that
    /// sessions of one to several records form.
    pub fn user(i: u64) -> String {
        format!("u-{:02}", (i * 7 + i / 3 + (i * i) % 11) % USERS)
    }

    pub fn topology(app: &str) -> Topology {
        let b = StreamsBuilder::new();
        b.stream(
            format!("{app}.visits"),
            Consumed::with(StringSerde, StringSerde),
        )
        .map(|_visit, v: &String| {
            let (user, amount) = v.split_once(':').unwrap_or_default();
            (user.to_string(), format!("1:{amount}"))
        })
        .repartition(Grouped::with(StringSerde, StringSerde).named("by-user"))
        .group_by_key()
        // A grace far beyond the workload's span: records arriving out of order through the
        // repartition topic are never late.
        .windowed_by_session(SessionWindows::with_inactivity_gap_and_grace(
            Duration::from_millis(GAP_MS as u64),
            Duration::from_secs(3600),
        ))
        .reduce(
            |a, b: &String| add_pairs(a, b),
            Materialized::with(StringSerde, StringSerde).named("session-sums"),
        )
        .to_stream()
        .to(
            format!("{app}.out"),
            Produced::with(WindowedSerde::new(StringSerde), StringSerde),
        );
        b.build().expect("the DSL topology builds")
    }
}

#[test]
fn a_session_reduce_on_update_rekeyed_and_killed_mid_backlog_ends_with_each_sessions_total() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    use sessions::{user, GAP_MS};
    let app = App::new("sessions", sessions::topology, &[("visits", false)]);
    let repartition = app.repartition("by-user");
    let base = base(1);
    let visits = app.topic("visits");
    app.run(&["visits"], &[&repartition], |range| {
        let records: Vec<Rec> = range
            .map(|i| {
                let v = format!("{}:{}", user(i), amount(i));
                (format!("v-{i}"), text(v), i as i64 * STEP_MS)
            })
            .collect();
        produce(&visits, base, &records);
    });

    // Each user's sessions: its records' times in order, split where two are more than the
    // gap apart.
    let mut times: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for i in 0..RECORDS {
        times
            .entry(user(i))
            .or_default()
            .push((base + i as i64 * STEP_MS, amount(i)));
    }
    let mut want: BTreeMap<(String, i64, i64), String> = BTreeMap::new();
    for (u, list) in &times {
        let mut session: Option<(i64, i64, i64, i64)> = None; // start, end, count, sum
        for &(t, a) in list {
            session = match session {
                Some((s, e, n, sum)) if t - e <= GAP_MS => Some((s, t, n + 1, sum + a)),
                Some((s, e, n, sum)) => {
                    want.insert((u.clone(), s, e), format!("{n}:{sum}"));
                    Some((t, t, 1, a))
                }
                None => Some((t, t, 1, a)),
            };
        }
        if let Some((s, e, n, sum)) = session {
            want.insert((u.clone(), s, e), format!("{n}:{sum}"));
        }
    }
    assert!(
        want.len() > 100 && want.keys().any(|(_, s, e)| s != e),
        "the workload makes sessions of one record and of several"
    );
    // The output folded: each session's last value, the replaced sessions' tombstones gone.
    let changes = support::kill::changes(&app.output());
    assert!(
        changes.values().flatten().any(Option::is_none),
        "sessions that grew or merged were replaced by tombstones"
    );
    let got: BTreeMap<(String, i64, i64), String> = support::kill::fold(&changes)
        .into_iter()
        .map(|(k, v)| (windowed_key(&k), utf8(&v)))
        .collect();
    println!("{} sessions", got.len());
    assert_eq!(
        got, want,
        "each session's last value, and only the final sessions"
    );
}

mod to_table {
    //! shipment statuses (keyed by order, tombstones for cancelled shipments) → to_table →
    //! joined with the orders table (order → customer) → `customer:status` per order.
    use super::*;

    pub const ORDERS: u64 = 150;
    const STATUSES: [&str; 4] = ["packed", "shipped", "in-transit", "delivered"];

    /// Status event `i`: its order and its status (`None`: the shipment cancelled).
    pub fn status(i: u64) -> (String, Option<String>) {
        let order = format!("o-{:03}", (i * 7 + i / 3) % ORDERS);
        let status = (i % 19 != 7).then(|| STATUSES[(i % 4) as usize].to_string());
        (order, status)
    }

    /// The orders table's rows: every order's customer before the first event, then in the
    /// second part of the workload some orders move to another customer and some are deleted.
    pub fn order_rows(late: bool) -> Vec<(String, Option<String>)> {
        (0..ORDERS)
            .filter_map(|o| {
                let order = format!("o-{o:03}");
                match (late, o % 7, o % 11) {
                    (false, _, _) => Some((order, Some(format!("c-{:02}", o % 40)))),
                    (true, _, 3) => Some((order, None)),
                    (true, 0, _) => Some((order, Some(format!("c-{:02}", (o + 1) % 40)))),
                    (true, _, _) => None,
                }
            })
            .collect()
    }

    pub fn topology(app: &str) -> Topology {
        let b = StreamsBuilder::new();
        let orders = b.table(
            format!("{app}.orders"),
            Consumed::with(StringSerde, StringSerde),
        );
        b.stream(
            format!("{app}.statuses"),
            Consumed::with(StringSerde, StringSerde),
        )
        .to_table(Materialized::with(StringSerde, StringSerde).named("latest-status"))
        .join(
            &orders,
            |status, customer| format!("{customer}:{status}"),
            Materialized::with(StringSerde, StringSerde).named("order-status"),
        )
        .to_stream()
        .to(
            format!("{app}.out"),
            Produced::with(StringSerde, StringSerde),
        );
        b.build().expect("the DSL topology builds")
    }
}

#[test]
fn to_table_then_a_table_join_killed_mid_backlog_ends_with_the_join_of_the_last_rows() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    use to_table::{order_rows, status, ORDERS};
    let app = App::new(
        "totable",
        to_table::topology,
        &[("statuses", false), ("orders", true)],
    );
    let base = base(1);
    let (statuses, orders) = (app.topic("statuses"), app.topic("orders"));
    app.run(&["statuses", "orders"], &[], |range| {
        let rows: Vec<Rec> = order_rows(range.start > 0)
            .into_iter()
            .map(|(o, c)| (o, c.map(String::into_bytes), range.start as i64 * STEP_MS))
            .collect();
        produce(&orders, base, &rows);
        let events: Vec<Rec> = range
            .map(|i| {
                let (order, s) = status(i);
                (order, s.map(String::into_bytes), i as i64 * STEP_MS)
            })
            .collect();
        produce(&statuses, base, &events);
    });

    let mut last_status: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..RECORDS {
        match status(i) {
            (order, Some(s)) => last_status.insert(order, s),
            (order, None) => last_status.remove(&order),
        };
    }
    let mut customers: BTreeMap<String, String> = BTreeMap::new();
    for (order, c) in order_rows(false).into_iter().chain(order_rows(true)) {
        match c {
            Some(c) => customers.insert(order, c),
            None => customers.remove(&order),
        };
    }
    assert!(
        (last_status.len() as u64) < ORDERS && (customers.len() as u64) < ORDERS,
        "the workload deletes statuses and orders"
    );
    let want: BTreeMap<String, String> = last_status
        .iter()
        .filter_map(|(o, s)| customers.get(o).map(|c| (o.clone(), format!("{c}:{s}"))))
        .collect();
    let text_map = |m: BTreeMap<Vec<u8>, Vec<u8>>| -> BTreeMap<String, String> {
        m.into_iter().map(|(k, v)| (utf8(&k), utf8(&v))).collect()
    };
    let got = text_map(support::kill::fold(&support::kill::changes(&app.output())));
    assert_eq!(got, want, "each order's last joined row, deleted ones gone");
    assert_eq!(
        text_map(support::kill::store_from_changelog(
            &app.name,
            "latest-status"
        )),
        last_status,
        "to_table's store, from its changelog"
    );
    assert_eq!(
        text_map(support::kill::store_from_changelog(
            &app.name,
            "order-status"
        )),
        want,
        "the join's store, from its changelog"
    );
}
