//! Versioned tables and temporal stream-table joins against the real broker: a compacted
//! `users` table topic read as a versioned table (5 s of history) and a `clicks` stream,
//! co-partitioned on 4 partitions, joined inner and left *as of each click's timestamp*.
//!
//! The race: every event gets the next logical time (10 ms apart), a row change its own time,
//! a click its time less a random lag of up to 2 s — so clicks keep arriving after row changes
//! with later timestamps, and out of timestamp order among themselves. A plain table would join
//! such a click with whatever row its key has when the click is processed; a versioned table
//! must join it with the row valid at the click's timestamp. Row changes are in timestamp
//! order (the runtime's alignment assumes each partition is), and each is acknowledged before
//! any later click is sent, so which rows a click must see follows from the workload alone:
//! per key, the change with the greatest timestamp not after the click's (a tombstone: none).
//!
//! The events are produced from a paced thread over about 12 s; the instance is `kill -9`ed
//! twice while it still sends — restarted once on its own state directory (the table replays
//! its topic's tail from its checkpoint, as versions) and once on a wiped one (the versions are
//! rebuilt from the topic alone, up to the committed offset). The read_committed outputs must
//! equal, key by key and in order, the results computed from the workload: every click once,
//! each caused by its click. With 5 s of history over about 30 s of logical time, the history
//! is pruned as the run goes, and no click is old enough to fall outside it.
//!
//! A second test runs the join **with a grace period** (`Joined::with_grace_period`): row
//! changes are out of order too (up to 1 s late), clicks up to 1 s late, and each click waits
//! 1.5 s of stream time in the durable buffer (the partition's event-time timers) before it
//! joins, so it sees every row change stamped at or before it — a late one included. A third of
//! the events is a backlog produced before the first start; two `kill -9`s land mid-stream
//! (one restart on a wiped state dir: the buffered clicks come back from the changelog). Every
//! click must be joined exactly once, with the row valid at its timestamp over the *whole*
//! workload, per key in timestamp order.
//!
//! The killed instance is this test binary re-executed in child mode (`VTAB_CHILD`); an app id
//! starting with `vgrace` runs the graced topology.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::pipeline::Running;

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Joined, Produced, StreamsBuilder};
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::StringSerde;
use eosflow::topology::{TableHandle, Topology};
use eosflow_verify::group_lag;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::Message;

const CHILD: &str = "VTAB_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: u64 = 24;
const EVENTS: usize = 3_000;
/// Logical time between two events.
const STEP_MS: i64 = 10;
/// A click's timestamp lies up to this much before its event's time.
const MAX_LAG_MS: i64 = 2_000;
/// The table's history: longer than any click's lag, shorter than the run's logical time.
const HISTORY: Duration = Duration::from_secs(5);

fn key(k: u64) -> String {
    format!("user-{k:02}")
}

/// Clicks joined as of their timestamps with the versioned users table: `click|name` to
/// `<app>.inner` when the user had a row then, and to `<app>.left` always (`click|-`).
fn topology(app: &str) -> Topology {
    let users = TableHandle::versioned(
        "users",
        format!("{app}.users"),
        StringSerde,
        StringSerde,
        HISTORY,
    );
    let clicks = format!("{app}.clicks");
    Topology::builder()
        .add_source("clicks", &[clicks.as_str()], StringSerde, StringSerde)
        .add_table(&users)
        .add_stream_table_join(
            "inner-join",
            &users,
            |_: &String, click: &String, name: &String| Some(format!("{click}|{name}")),
            &["clicks"],
        )
        .add_stream_table_left_join(
            "left-join",
            &users,
            |_: &String, click: &String, name: Option<&String>| {
                Some(format!("{click}|{}", name.map_or("-", String::as_str)))
            },
            &["clicks"],
        )
        .add_sink(
            "inner",
            format!("{app}.inner"),
            StringSerde,
            StringSerde,
            &["inner-join"],
        )
        .add_sink(
            "left",
            format!("{app}.left"),
            StringSerde,
            StringSerde,
            &["left-join"],
        )
        .build()
        .expect("valid topology")
}

/// The grace period of the graced joins, the table's history, and how late (at most) a row
/// change or a click is stamped before its logical time: both lags are under the grace, so
/// every row change stamped at or before a click is in the table when the click leaves the
/// buffer, and no click is ever later than the grace (all are buffered).
const GRACE: Duration = Duration::from_millis(1_500);
const GRACE_HISTORY: Duration = Duration::from_secs(10);
const GRACE_LAG_MS: i64 = 1_000;

/// The same joins through the DSL, each with `GRACE` on the versioned users table.
fn grace_topology(app: &str) -> Topology {
    let b = StreamsBuilder::new();
    let users = b.versioned_table(
        format!("{app}.users"),
        Consumed::with(StringSerde, StringSerde).named("users"),
        GRACE_HISTORY,
    );
    let clicks = b.stream(
        format!("{app}.clicks"),
        Consumed::with(StringSerde, StringSerde),
    );
    let joined = |name: &str| {
        Joined::with(StringSerde, StringSerde)
            .with_grace_period(GRACE)
            .named(name)
    };
    clicks
        .join_table_with(&users, |c, n| format!("{c}|{n}"), joined("inner-join"))
        .to(
            format!("{app}.inner"),
            Produced::with(StringSerde, StringSerde),
        );
    clicks
        .left_join_table_with(
            &users,
            |c, n| format!("{c}|{}", n.map_or("-", String::as_str)),
            joined("left-join"),
        )
        .to(
            format!("{app}.left"),
            Produced::with(StringSerde, StringSerde),
        );
    b.build().expect("valid topology")
}

fn config(app: &str) -> Config {
    support::instance_config(app, 50)
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("EOSFLOW_TEST_LOG"))
        .with_writer(std::io::stderr)
        .try_init();
    let topology = if app.starts_with("vgrace") {
        grace_topology(&app)
    } else {
        topology(&app)
    };
    support::run_until_killed(config(&app), topology);
}

fn lag(app: &str, topic: &str) -> i64 {
    group_lag(
        &support::clients(),
        app,
        &format!("{app}.{topic}"),
        PARTITIONS,
    )
    .unwrap_or(i64::MAX)
}

/// One event: a row change (`Some(name)` or a tombstone) or a click, with its timestamp.
enum Event {
    Row(String, Option<String>, i64),
    Click(String, String, i64),
}

/// Runs of 1–3 row changes and of 5–30 clicks over the keys, deterministic. Event `i` has the
/// logical time `base + i · STEP_MS`: a row change that time, a click that time less a lag of
/// up to `MAX_LAG_MS`.
fn workload(base: i64) -> Vec<Event> {
    let mut out = Vec::with_capacity(EVENTS);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut clicks = 0;
    while out.len() < EVENTS {
        for _ in 0..1 + next(3) {
            let i = out.len() as i64;
            let name = (next(6) != 0).then(|| format!("name-{i}"));
            out.push(Event::Row(key(next(KEYS)), name, base + i * STEP_MS));
        }
        for _ in 0..5 + next(26) {
            let i = out.len() as i64;
            let at = base + i * STEP_MS - next(MAX_LAG_MS as u64 + 1) as i64;
            out.push(Event::Click(key(next(KEYS)), format!("click-{clicks}"), at));
            clicks += 1;
        }
    }
    out
}

/// Per key, the results the joins must give, from the workload alone: each click with the
/// row change of its key with the greatest timestamp not after the click's (a tombstone, or
/// none: no row). Row changes come in timestamp order, so a later one of the same timestamp
/// replaces an earlier one.
type Want = BTreeMap<String, Vec<String>>;
fn expected(events: &[Event]) -> (Want, Want) {
    let mut versions: BTreeMap<&str, BTreeMap<i64, Option<&str>>> = BTreeMap::new();
    for e in events {
        if let Event::Row(k, v, at) = e {
            versions.entry(k).or_default().insert(*at, v.as_deref());
        }
    }
    let (mut inner, mut left) = (Want::new(), Want::new());
    for e in events {
        let Event::Click(k, c, at) = e else { continue };
        let row = versions
            .get(k.as_str())
            .and_then(|v| v.range(..=*at).next_back())
            .and_then(|(_, v)| *v);
        if let Some(name) = row {
            inner
                .entry(k.clone())
                .or_default()
                .push(format!("{c}|{name}"));
        }
        left.entry(k.clone())
            .or_default()
            .push(format!("{c}|{}", row.unwrap_or("-")));
    }
    (inner, left)
}

/// What the paced producer has sent so far.
#[derive(Default)]
struct Sent {
    events: AtomicUsize,
    clicks: AtomicUsize,
}

/// Produces the events in order from a thread, in chunks of 25 about 100 ms apart. Before
/// switching between the two topics it waits until every record sent is acknowledged, so each
/// row change is in the log before any later click is written.
fn produce_paced(app: &str, events: Vec<Event>, sent: Arc<Sent>) -> std::thread::JoinHandle<()> {
    let (users, clicks) = (format!("{app}.users"), format!("{app}.clicks"));
    std::thread::spawn(move || {
        let producer = support::test_producer();
        let acknowledged = |producer: &rdkafka::producer::ThreadedProducer<_>| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while producer.in_flight_count() > 0 {
                assert!(
                    Instant::now() < deadline,
                    "records not acknowledged in 30 s"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        let mut last_was_row = None;
        for chunk in events.chunks(25) {
            let mut clicks_in_chunk = 0;
            for e in chunk {
                let (topic, k, v, at, row) = match e {
                    Event::Row(k, v, at) => (&users, k, v.as_deref(), *at, true),
                    Event::Click(k, c, at) => (&clicks, k, Some(c.as_str()), *at, false),
                };
                if last_was_row.is_some_and(|r| r != row) {
                    acknowledged(&producer);
                }
                last_was_row = Some(row);
                let mut r = BaseRecord::<str, str>::to(topic)
                    .key(k.as_str())
                    .timestamp(at);
                if let Some(v) = v {
                    r = r.payload(v);
                    if !row {
                        clicks_in_chunk += 1;
                        r = r.headers(OwnedHeaders::new().insert(Header {
                            key: "id",
                            value: Some(v.as_bytes()),
                        }));
                    }
                }
                support::send_waiting(&producer, r);
            }
            acknowledged(&producer);
            sent.events.fetch_add(chunk.len(), Ordering::SeqCst);
            sent.clicks.fetch_add(clicks_in_chunk, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    })
}

/// Every output of `topic`, read_committed, per key in order; each output's `causation_id`
/// must be the click it joined.
fn outputs(topic: &str) -> BTreeMap<String, Vec<String>> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let cause = m
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "causation_id"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).to_string());
        let click = value.split('|').next().unwrap_or_default();
        if cause.as_deref() != Some(click) {
            return Err(format!("{topic}: {value} has causation {cause:?}"));
        }
        got.entry(key).or_default().push(value);
        Ok(())
    })
    .expect("read outputs");
    got
}

fn spawn(app: &str) -> Running {
    support::spawn_child(CHILD, app)
}

#[test]
fn temporal_joins_killed_mid_stream_join_every_click_once_with_the_row_valid_at_its_time() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("vtab");
    let cfg = config(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.clicks"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.users"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.inner"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.left"), PARTITIONS, "delete"),
    ];
    specs.extend(topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    let events = workload(eosflow::internals::clock::now_ms() - 600_000);
    let (want_inner, want_left) = expected(&events);
    let total = events.len();
    let clicks: usize = want_left.values().map(Vec::len).sum();
    // The race the test is about: clicks sent after a row change of their key with a later
    // timestamp (a plain table would join them with that change).
    let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
    let mut raced = 0;
    for e in &events {
        match e {
            Event::Row(k, _, at) => {
                latest.insert(k, *at);
            }
            Event::Click(k, _, at) => raced += usize::from(latest.get(k.as_str()) > Some(at)),
        }
    }
    assert!(
        raced > clicks / 20,
        "only {raced} of {clicks} clicks race a row change"
    );

    let sent = Arc::new(Sent::default());
    let producer = produce_paced(&app, events, Arc::clone(&sent));
    let mut instance = spawn(&app);
    let mut consumed_at_kill = 0;
    for (part, wipe) in [(1, false), (2, true)] {
        let consumed = support::wait_for(
            "part of the events sent and clicks processed since the last start",
            Duration::from_secs(60),
            || {
                let out = sent.events.load(Ordering::SeqCst);
                let consumed = sent.clicks.load(Ordering::SeqCst) as i64 - lag(&app, "clicks");
                (out >= total * part / 3 && consumed > consumed_at_kill as i64)
                    .then_some(consumed as usize)
            },
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        let out = sent.events.load(Ordering::SeqCst);
        println!(
            "killed with {out} of {total} events sent, {consumed} clicks consumed (state dir wiped: {wipe}) at {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(
            out < total,
            "the instance must die while the producer sends"
        );
        consumed_at_kill = consumed;
        if wipe {
            // The replacement has no state at all: its versions come from the topic alone.
            std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
        }
        instance = spawn(&app);
    }
    producer.join().expect("the producer thread");
    support::wait_for(
        "every click and row consumed",
        Duration::from_secs(90),
        || (lag(&app, "clicks") == 0 && lag(&app, "users") == 0).then_some(()),
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let (inner, left) = (
        outputs(&format!("{app}.inner")),
        outputs(&format!("{app}.left")),
    );
    assert_eq!(
        left.values().map(Vec::len).sum::<usize>(),
        clicks,
        "every click once, left"
    );
    for (k, list) in &want_left {
        assert_eq!(left.get(k), Some(list), "left results of {k}");
    }
    assert_eq!(inner.len(), want_inner.len());
    for (k, list) in &want_inner {
        assert_eq!(inner.get(k), Some(list), "inner results of {k}");
    }
    println!(
        "{clicks} clicks ({raced} racing a later row change) and {} row changes, {} inner results, 2 kills, {:.1} s",
        total - clicks,
        want_inner.values().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

/// The graced workload: as [`workload`], but row changes are stamped up to `GRACE_LAG_MS`
/// before their logical time too (out of order in their partition), and clicks up to
/// `GRACE_LAG_MS`.
fn grace_workload(base: i64) -> Vec<Event> {
    let mut out = Vec::with_capacity(EVENTS);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut clicks = 0;
    let lag = GRACE_LAG_MS as u64 + 1;
    while out.len() < EVENTS {
        for _ in 0..1 + next(3) {
            let i = out.len() as i64;
            let name = (next(6) != 0).then(|| format!("name-{i}"));
            let at = base + i * STEP_MS - next(lag) as i64;
            out.push(Event::Row(key(next(KEYS)), name, at));
        }
        for _ in 0..5 + next(26) {
            let i = out.len() as i64;
            let at = base + i * STEP_MS - next(lag) as i64;
            out.push(Event::Click(key(next(KEYS)), format!("click-{clicks}"), at));
            clicks += 1;
        }
    }
    out
}

/// Per key, what the graced joins must give: [`expected`]'s results (row changes of one
/// timestamp: the later sent wins, as the table applies them in log order), each key's in the
/// order clicks leave the buffer — by timestamp, then as sent.
fn grace_expected(events: &[Event]) -> (Want, Want) {
    let mut clicks: Vec<(i64, usize, &Event)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::Click(_, _, at) => Some((*at, i, e)),
            Event::Row(..) => None,
        })
        .collect();
    clicks.sort_by_key(|(at, i, _)| (*at, *i));
    let mut versions: BTreeMap<&str, BTreeMap<i64, Option<&str>>> = BTreeMap::new();
    for e in events {
        if let Event::Row(k, v, at) = e {
            versions.entry(k).or_default().insert(*at, v.as_deref());
        }
    }
    let (mut inner, mut left) = (Want::new(), Want::new());
    for (at, _, e) in clicks {
        let Event::Click(k, c, _) = e else { continue };
        let row = versions
            .get(k.as_str())
            .and_then(|v| v.range(..=at).next_back())
            .and_then(|(_, v)| *v);
        if let Some(name) = row {
            inner
                .entry(k.clone())
                .or_default()
                .push(format!("{c}|{name}"));
        }
        left.entry(k.clone())
            .or_default()
            .push(format!("{c}|{}", row.unwrap_or("-")));
    }
    (inner, left)
}

#[test]
fn graced_temporal_joins_from_a_backlog_killed_mid_stream_join_every_click_once_after_late_rows() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("vgrace");
    let cfg = config(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.clicks"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.users"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.inner"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.left"), PARTITIONS, "delete"),
    ];
    specs.extend(grace_topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    let mut events = grace_workload(eosflow::internals::clock::now_ms() - 600_000);
    let (want_inner, want_left) = grace_expected(&events);
    let total = events.len();
    let clicks: usize = want_left.values().map(Vec::len).sum();
    let last = events
        .iter()
        .map(|e| match e {
            Event::Row(_, _, at) | Event::Click(_, _, at) => *at,
        })
        .max()
        .unwrap_or_default();
    // The races the grace is for: a row change sent after a click of its key stamped at or
    // after it (joined at once, the click would miss it), and clicks out of order.
    let mut newest_click: BTreeMap<&str, i64> = BTreeMap::new();
    let mut late_rows = 0;
    for e in &events {
        match e {
            Event::Row(k, _, at) => {
                late_rows += usize::from(newest_click.get(k.as_str()) >= Some(at));
            }
            Event::Click(k, _, at) => {
                let n = newest_click.entry(k).or_insert(*at);
                *n = (*n).max(*at);
            }
        }
    }
    assert!(late_rows > 20, "only {late_rows} row changes arrive late");

    // A third of the events is a backlog, produced before the instance starts.
    let rest = events.split_off(total / 3);
    let backlog = events.len();
    let sent = Arc::new(Sent::default());
    produce_paced(&app, events, Arc::clone(&sent))
        .join()
        .expect("the backlog");
    let producer = produce_paced(&app, rest, Arc::clone(&sent));
    let mut instance = spawn(&app);
    let mut consumed_at_kill = 0;
    for (part, wipe) in [(1, false), (2, true)] {
        let consumed = support::wait_for(
            "part of the events sent and clicks processed since the last start",
            Duration::from_secs(60),
            || {
                let out = sent.events.load(Ordering::SeqCst);
                let consumed = sent.clicks.load(Ordering::SeqCst) as i64 - lag(&app, "clicks");
                (out >= backlog + (total - backlog) * part / 3
                    && consumed > consumed_at_kill as i64)
                    .then_some(consumed as usize)
            },
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        let out = sent.events.load(Ordering::SeqCst);
        println!(
            "killed with {out} of {total} events sent, {consumed} clicks consumed (state dir wiped: {wipe}) at {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(
            out < total,
            "the instance must die while the producer sends"
        );
        consumed_at_kill = consumed;
        if wipe {
            std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
        }
        instance = spawn(&app);
    }
    producer.join().expect("the producer thread");
    // One click per partition past the last event by more than the grace moves every
    // partition's stream time far enough for every buffered click to leave (these stay).
    let flush = support::test_producer();
    let clicks_topic = format!("{app}.clicks");
    for p in 0..PARTITIONS {
        let r = BaseRecord::<str, str>::to(&clicks_topic)
            .key("flush")
            .payload("flush")
            .partition(p)
            .timestamp(last + 2 * GRACE.as_millis() as i64);
        support::send_waiting(&flush, r);
    }
    flush.flush(Duration::from_secs(30)).expect("flush");
    support::wait_for(
        "every click and row consumed",
        Duration::from_secs(90),
        || (lag(&app, "clicks") == 0 && lag(&app, "users") == 0).then_some(()),
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let (inner, left) = (
        outputs(&format!("{app}.inner")),
        outputs(&format!("{app}.left")),
    );
    assert_eq!(
        left.values().map(Vec::len).sum::<usize>(),
        clicks,
        "every click once, left"
    );
    for (k, list) in &want_left {
        assert_eq!(left.get(k), Some(list), "left results of {k}");
    }
    assert_eq!(inner.len(), want_inner.len());
    for (k, list) in &want_inner {
        assert_eq!(inner.get(k), Some(list), "inner results of {k}");
    }
    println!(
        "{clicks} clicks, {} row changes ({late_rows} sent after a click of their key stamped at or after them), {} inner results, backlog {backlog}, 2 kills, {:.1} s",
        total - clicks,
        want_inner.values().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}
