//! Stream-stream windowed joins against the real broker: two co-partitioned streams (`left`,
//! `right`, 4 partitions) joined inner, left and outer by one topology within an asymmetric window (a
//! right record joins a left one at `t` when it is in `[t - 500 ms, t + 1000 ms]`), over a
//! workload with known event times, out of order by up to 300 ms. The instance is `kill -9`ed
//! twice while the producer is still sending — once restarting on its own state directory, once
//! on a wiped one (both buffers and the timers restored from their changelogs alone). After the
//! input is consumed, one record per partition far in the future closes every window. The
//! read_committed outputs must equal, as multisets of `(key, left value, right value)`, what
//! the workload alone says: every pair within the window once (all three), every left record
//! without a pair once as `(left, -)` (left and outer), every right record without a pair once
//! as `(-, right)` (outer), each result caused by one of its records.
//!
//! Grace covers the whole workload: the two topics are consumed independently (stream-stream
//! joins are not timestamp-aligned), so no record may depend on which topic was polled first.
//!
//! The killed instance is this test binary re-executed in child mode (`STREAM_JOINS_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::ClientRole;
use eosflow::serdes::StringSerde;
use eosflow::topology::windows::WindowStoreHandle;
use eosflow::topology::{JoinWindows, StreamJoin, Topology};
use eosflow_verify::group_lag;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

const CHILD: &str = "STREAM_JOINS_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: u64 = 24;
const RECORDS: usize = 3_000;
const BEFORE_MS: i64 = 500;
const AFTER_MS: i64 = 1_000;
/// Longer than the workload's span: no record is late whatever the topics' poll order.
const GRACE_MS: i64 = 3_600_000;

fn windows() -> JoinWindows {
    JoinWindows::of_time_difference_and_grace(
        Duration::ZERO,
        Duration::from_millis(GRACE_MS as u64),
    )
    .before(Duration::from_millis(BEFORE_MS as u64))
    .after(Duration::from_millis(AFTER_MS as u64))
}

fn buffers(
    prefix: &str,
) -> (
    WindowStoreHandle<String, String>,
    WindowStoreHandle<String, String>,
) {
    (
        WindowStoreHandle::new(format!("{prefix}-left-buffer"), StringSerde, StringSerde),
        WindowStoreHandle::new(format!("{prefix}-right-buffer"), StringSerde, StringSerde),
    )
}

/// `left ⋈ right` to `<app>.inner`, `left ⟕ right` to `<app>.leftjoin` and `left ⟗ right` to
/// `<app>.outer`, values `l|r` (`-` for a missing side).
fn topology(app: &str) -> Topology {
    let (l, r) = buffers("inner");
    let inner = StreamJoin::inner(windows(), l, r, |_: &String, l: &String, r: &String| {
        Some(format!("{l}|{r}"))
    });
    let (l, r) = buffers("leftjoin");
    let left = StreamJoin::left(
        windows(),
        l,
        r,
        |_: &String, l: &String, r: Option<&String>| {
            Some(format!("{l}|{}", r.map_or("-", String::as_str)))
        },
    );
    let (l, r) = buffers("outer");
    let outer = StreamJoin::outer(
        windows(),
        l,
        r,
        |_: &String, l: Option<&String>, r: Option<&String>| {
            let side = |v: Option<&String>| v.map_or("-", String::as_str).to_string();
            Some(format!("{}|{}", side(l), side(r)))
        },
    );
    let (lt, rt) = (format!("{app}.left"), format!("{app}.right"));
    Topology::builder()
        .add_source("left", &[lt.as_str()], StringSerde, StringSerde)
        .add_source("right", &[rt.as_str()], StringSerde, StringSerde)
        .add_stream_stream_join("inner", inner, &["left"], &["right"])
        .add_stream_stream_join("leftjoin", left, &["left"], &["right"])
        .add_stream_stream_join("outer", outer, &["left"], &["right"])
        .add_sink(
            "inner-out",
            format!("{app}.inner"),
            StringSerde,
            StringSerde,
            &["inner"],
        )
        .add_sink(
            "left-out",
            format!("{app}.leftjoin"),
            StringSerde,
            StringSerde,
            &["leftjoin"],
        )
        .add_sink(
            "outer-out",
            format!("{app}.outer"),
            StringSerde,
            StringSerde,
            &["outer"],
        )
        .build()
        .expect("valid topology")
}

fn config(app: &str) -> Config {
    // The kills land mid-stream because the producer is still sending, whatever the batch
    // size; after the flush each batch fires up to this many of the outer sides' timers.
    support::instance_config(app, 200)
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(config(&app), topology(&app));
}

fn lag(app: &str) -> i64 {
    ["left", "right"]
        .iter()
        .map(|t| {
            group_lag(&support::clients(), app, &format!("{app}.{t}"), PARTITIONS)
                .unwrap_or(i64::MAX / 4)
        })
        .sum()
}

/// One input record: side (`true`: left), key, value (also its id) and event time.
#[derive(Debug, Clone)]
struct Event {
    left: bool,
    key: String,
    value: String,
    ts: i64,
}

/// `RECORDS` events, deterministic: 40 ms apart in production order, each moved by up to
/// ±300 ms (so partitions are out of order), sides and keys pseudo-random.
fn workload(base: i64) -> Vec<Event> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (0..RECORDS)
        .map(|i| {
            let left = next(2) == 0;
            let key = format!("k{:02}", next(KEYS));
            let jitter = next(601) as i64 - 300;
            let value = format!("{}{i}", if left { "L" } else { "R" });
            Event {
                left,
                key,
                value,
                ts: base + i as i64 * 40 + jitter,
            }
        })
        .collect()
}

type PerKey = BTreeMap<String, Vec<String>>;

/// What the joins must write, from the workload alone: per key, the sorted `l|r` values of the
/// inner, left and outer join.
fn expected(events: &[Event]) -> (PerKey, PerKey, PerKey) {
    let mut inner = PerKey::new();
    let mut left = PerKey::new();
    for l in events.iter().filter(|e| e.left) {
        let mut paired = false;
        for r in events.iter().filter(|e| !e.left && e.key == l.key) {
            if r.ts >= l.ts - BEFORE_MS && r.ts <= l.ts + AFTER_MS {
                paired = true;
                let v = format!("{}|{}", l.value, r.value);
                inner.entry(l.key.clone()).or_default().push(v.clone());
                left.entry(l.key.clone()).or_default().push(v);
            }
        }
        if !paired {
            let v = format!("{}|-", l.value);
            left.entry(l.key.clone()).or_default().push(v);
        }
    }
    let mut outer = left.clone();
    for r in events.iter().filter(|e| !e.left) {
        let paired = events
            .iter()
            .filter(|l| l.left && l.key == r.key)
            .any(|l| r.ts >= l.ts - BEFORE_MS && r.ts <= l.ts + AFTER_MS);
        if !paired {
            let v = format!("-|{}", r.value);
            outer.entry(r.key.clone()).or_default().push(v);
        }
    }
    for list in inner
        .values_mut()
        .chain(left.values_mut())
        .chain(outer.values_mut())
    {
        list.sort();
    }
    (inner, left, outer)
}

/// A transactional producer, its transactions initialised.
fn transactional_producer() -> ThreadedProducer<DefaultProducerContext> {
    let id = support::unique("stream-joins-producer");
    let timeout = Duration::from_secs(60);
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Transactional { id: &id, timeout })
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(timeout)
        .expect("init transactions");
    producer
}

/// Produces `events` in one transaction, each with its id header and event time.
fn produce(producer: &ThreadedProducer<DefaultProducerContext>, app: &str, events: &[Event]) {
    let timeout = Duration::from_secs(60);
    producer.begin_transaction().expect("begin");
    let (lt, rt) = (format!("{app}.left"), format!("{app}.right"));
    for e in events {
        let topic = if e.left { &lt } else { &rt };
        let r = BaseRecord::<str, str>::to(topic)
            .key(e.key.as_str())
            .payload(e.value.as_str())
            .timestamp(e.ts)
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(e.value.as_bytes()),
            }));
        support::send_waiting(producer, r);
    }
    producer.commit_transaction(timeout).expect("commit");
}

/// Every output of `topic`, read_committed, per key, sorted; each result's `causation_id` must
/// be one of the records it joins (a left record alone: that record).
fn outputs(topic: &str) -> BTreeMap<String, Vec<String>> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let cause = m
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "causation_id"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).to_string())
            .unwrap_or_default();
        if !value.split('|').any(|part| part == cause) {
            return Err(format!("{topic}: {value} has causation {cause:?}"));
        }
        got.entry(key).or_default().push(value);
        Ok(())
    })
    .expect("read outputs");
    for list in got.values_mut() {
        list.sort();
    }
    got
}

fn count(map: &BTreeMap<String, Vec<String>>) -> usize {
    map.values().map(Vec::len).sum()
}

#[test]
fn stream_stream_joins_killed_mid_stream_give_every_pair_and_every_unmatched_record_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("sjoin");
    let cfg = config(&app);
    let t = topology(&app);
    let mut specs: Vec<TopicSpec> = ["left", "right", "inner", "leftjoin", "outer"]
        .iter()
        .map(|s| TopicSpec::new(format!("{app}.{s}"), PARTITIONS, "delete"))
        .collect();
    specs.extend(t.internal_topics(&cfg, PARTITIONS));
    assert!(
        specs
            .iter()
            .any(|s| s.name == format!("{app}-leftjoin-left-buffer-changelog")),
        "each buffer has its changelog"
    );
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    let base = eosflow::internals::clock::now_ms() - 3 * 3_600_000;
    let events = workload(base);
    let (want_inner, want_left, want_outer) = expected(&events);
    let unmatched = want_left
        .values()
        .flatten()
        .filter(|v| v.ends_with("|-"))
        .count();
    println!(
        "{RECORDS} records: {} pairs, {unmatched} left and {} right records without a pair",
        count(&want_inner),
        count(&want_outer) - count(&want_left)
    );
    assert!(
        count(&want_inner) > 500 && unmatched > 100,
        "a workload with both"
    );

    // The first chunk is processed before the rest is sent: the instance has joined the group.
    // Then a producer thread sends the rest in three phases of paced transactions of 50; it
    // starts phase k only once the test has seen the instance of that phase make progress, and
    // the test kills that instance two transactions into phase k (k = 1, 2): every kill lands
    // while the instance works and the producer still sends.
    let mut instance = support::spawn_child(CHILD, &app);
    let (first, rest) = events.split_at(50);
    produce(&transactional_producer(), &app, first);
    support::wait_for("the first chunk processed", Duration::from_secs(60), || {
        (lag(&app) == 0).then_some(())
    });
    println!("instance up at {:.1} s", started.elapsed().as_secs_f64());
    let sent = Arc::new(AtomicUsize::new(first.len()));
    let phase_len = rest.len().div_ceil(3);
    let released = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (sent, released) = (Arc::clone(&sent), Arc::clone(&released));
        let (app, rest) = (app.clone(), rest.to_vec());
        std::thread::spawn(move || {
            let producer = transactional_producer();
            let deadline = Instant::now() + Duration::from_secs(120);
            for (i, chunk) in rest.chunks(50).enumerate() {
                while released.load(Ordering::SeqCst) < i * 50 / phase_len {
                    assert!(Instant::now() < deadline, "phase never released");
                    std::thread::sleep(Duration::from_millis(20));
                }
                produce(&producer, &app, chunk);
                sent.fetch_add(chunk.len(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // At the last kill: records sent, and the lag then.
    let (mut sent_then, mut lag_then) = (first.len(), 0);
    for (kill, wipe) in [(1, false), (2, true)] {
        // Had this instance processed nothing, the lag would be at least the last one plus
        // what was sent since (commit markers only add to it): a smaller lag is progress.
        support::wait_for("this instance processing", Duration::from_secs(60), || {
            let out = sent.load(Ordering::SeqCst);
            let backlog = lag_then + (out - sent_then) as i64;
            (lag(&app) < backlog).then_some(())
        });
        released.store(kill, Ordering::SeqCst);
        let into_phase = first.len() + kill * phase_len + 100;
        support::wait_for(
            "two transactions into the phase",
            Duration::from_secs(60),
            || (sent.load(Ordering::SeqCst) >= into_phase).then_some(()),
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        let out = sent.load(Ordering::SeqCst);
        (sent_then, lag_then) = (out, lag(&app));
        println!(
            "kill {kill} at {:.1} s with {out} of {RECORDS} records sent, lag {lag_then} (state wiped: {wipe})",
            started.elapsed().as_secs_f64()
        );
        assert!(out < RECORDS, "the instance must die mid-stream");
        assert!(lag_then > 0, "the instance must die with work left");
        if wipe {
            // The replacement restores both buffers and its timers from the changelogs alone.
            std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
        }
        instance = support::spawn_child(CHILD, &app);
    }
    producer.join().expect("the producer thread");
    println!("input sent at {:.1} s", started.elapsed().as_secs_f64());
    support::wait_for("the input consumed", Duration::from_secs(90), || {
        (lag(&app) == 0).then_some(())
    });
    // Stream time far past every window: the unmatched left records come out.
    let flush: Vec<Event> = (0..PARTITIONS)
        .map(|p| Event {
            left: true,
            key: format!("flush-{p}"),
            value: format!("F{p}"),
            ts: base + 2 * GRACE_MS,
        })
        .collect();
    println!("input consumed at {:.1} s", started.elapsed().as_secs_f64());
    produce_to_partitions(&app, &flush);
    support::wait_for("the flush consumed", Duration::from_secs(60), || {
        (lag(&app) == 0).then_some(())
    });
    let outer_topic = format!("{app}.outer");
    // Timers a full batch left fire at the start of the next batches (the outer join's are
    // the most).
    support::wait_for("every outer-join result", Duration::from_secs(60), || {
        (count(&outputs(&outer_topic)) >= count(&want_outer)).then_some(())
    });
    println!(
        "every result out at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let inner = outputs(&format!("{app}.inner"));
    let left = outputs(&format!("{app}.leftjoin"));
    let outer = outputs(&outer_topic);
    assert_eq!(count(&inner), count(&want_inner), "inner: every pair once");
    assert_eq!(inner, want_inner, "inner results per key");
    assert_eq!(
        count(&left),
        count(&want_left),
        "left: every pair and unmatched left once"
    );
    assert_eq!(left, want_left, "left results per key");
    assert_eq!(
        count(&outer),
        count(&want_outer),
        "outer: every pair and unmatched record once"
    );
    assert_eq!(outer, want_outer, "outer results per key");
    let mut dead = 0;
    for t in ["left", "right"] {
        read_all(
            &support::clients(),
            &format!("{app}.{t}.DLT"),
            Duration::from_secs(30),
            |_| {
                dead += 1;
                Ok(())
            },
        )
        .expect("read the DLT");
    }
    assert_eq!(dead, 0, "nothing late, nothing dead-lettered");
    println!(
        "{} inner, {} left and {} outer results exact after 2 kills, {:.1} s",
        count(&inner),
        count(&left),
        count(&outer),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

/// Produces one flush record per partition (the record's index is its partition).
fn produce_to_partitions(app: &str, events: &[Event]) {
    let producer = support::test_producer();
    let topic = format!("{app}.left");
    for (p, e) in events.iter().enumerate() {
        let r = BaseRecord::<str, str>::to(&topic)
            .key(e.key.as_str())
            .payload(e.value.as_str())
            .timestamp(e.ts)
            .partition(p as i32);
        support::send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}
