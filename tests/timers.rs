//! Durable timers against the real broker: a topology node schedules an event-time timer per
//! record (and a wall-clock one for values starting with `w`) and forwards `fired:<due>` when
//! one fires. The read_committed output must hold every timer the workload implies exactly
//! once — across `kill -9`, across a partition moving to another instance — and event-time
//! timers must never fire before stream time reaches them, even with out-of-order records.
//!
//! The killed instance is this test binary re-executed in child mode (`TIMERS_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::pipeline::Running;

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::processor::Runtime;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::processor::{ProcessError, Timer};
use eosflow::serdes::StringSerde;
use eosflow::topology::{ProcessorContext, StreamProcessor, Topology, TypedRecord};
use eosflow_verify::group_lag;
use rdkafka::Message;
use support::pipeline::Instance;

const CHILD: &str = "TIMERS_CHILD";
/// Event-time delay of every record's timer.
const DELAY_MS: i64 = 200;
/// Wall-clock delay of the timers of values starting with `w`.
const WALL_DELAY_MS: i64 = 3_000;

/// Schedules the timers of each record and forwards `seen:<value>`; a fired timer forwards
/// `fired:<due>` keyed by the timer's key (`<record key>/<value>`, `/w` for wall-clock).
struct Reminders;

impl StreamProcessor<String, String, String, String> for Reminders {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let key = r.key.unwrap_or_default();
        let value = r.value.unwrap_or_default();
        let t = ctx
            .event_time_ms()
            .ok_or_else(|| ProcessError::permanent("no event time"))?;
        if value != "flush" {
            ctx.schedule_event_time(format!("{key}/{value}").as_bytes(), t + DELAY_MS)?;
        }
        if value.starts_with('w') {
            let at = ctx.wall_clock_ms() + WALL_DELAY_MS;
            ctx.schedule_wall_clock(format!("{key}/{value}/w").as_bytes(), at)?;
        }
        ctx.forward(TypedRecord::new(Some(key), Some(format!("seen:{value}"))));
        Ok(())
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        t: &Timer,
    ) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(&t.key).to_string();
        ctx.forward(TypedRecord::new(
            Some(key),
            Some(format!("fired:{}", t.due_ms)),
        ));
        Ok(())
    }
}

fn topology(app: &str) -> Topology {
    Topology::builder()
        .add_source("in", &[&format!("{app}.in")], StringSerde, StringSerde)
        .add_processor("reminders", Reminders, &["in"])
        .add_sink(
            "out",
            format!("{app}.out"),
            StringSerde,
            StringSerde,
            &["reminders"],
        )
        .build()
        .expect("valid topology")
}

fn config(app: &str, instance: &str) -> Config {
    let mut c = support::config();
    c.app.id = app.to_string();
    c.app.instance_id = instance.into();
    c.processor.session_timeout_ms = 6000;
    c.processor.commit_interval_ms = 100;
    c.processor.max_batch_records = 50;
    c.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    c
}

/// The app's topics: input, output and the topology's internal ones.
fn create(app: &str, partitions: i32) {
    let mut specs = vec![
        TopicSpec::new(format!("{app}.in"), partitions, "delete"),
        TopicSpec::new(format!("{app}.out"), partitions, "delete"),
    ];
    specs.extend(topology(app).internal_topics(&config(app, "a"), partitions));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// One input record: partition (`None`: by key), key, value, event time.
type Input = (Option<i32>, String, String, i64);

fn produce(topic: &str, records: &[Input]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for (partition, key, value, ts) in records {
        let mut r = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .timestamp(*ts);
        if let Some(p) = partition {
            r = r.partition(*p);
        }
        producer.send(r).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Every output as (key, value, timestamp), read_committed, each partition in order.
fn outputs(app: &str) -> Vec<(String, String, Option<i64>)> {
    let mut out = Vec::new();
    read_all(
        &support::clients(),
        &format!("{app}.out"),
        Duration::from_secs(60),
        |m| {
            let text =
                |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).to_string();
            out.push((text(m.key()), text(m.payload()), m.timestamp().to_millis()));
            Ok(())
        },
    )
    .expect("read");
    out
}

/// The fired timers: key → how many times, with the output's timestamp.
fn fired(app: &str) -> BTreeMap<String, Vec<(String, Option<i64>)>> {
    let mut got: BTreeMap<String, Vec<(String, Option<i64>)>> = BTreeMap::new();
    for (k, v, ts) in outputs(app) {
        if let Some(due) = v.strip_prefix("fired:") {
            got.entry(k).or_default().push((due.to_string(), ts));
        }
    }
    got
}

fn lag(app: &str, partitions: i32) -> i64 {
    group_lag(&support::clients(), app, &format!("{app}.in"), partitions).unwrap_or(i64::MAX)
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    let mut c = config(&app, "a");
    c.processor.static_membership = true;
    let runtime = Runtime::new(&c, topology(&app)).expect("runtime starts");
    runtime
        .run(Arc::new(AtomicBool::new(false)))
        .expect("runs until killed");
}

fn spawn(app: &str) -> Running {
    support::spawn_child(CHILD, app)
}

#[test]
fn event_time_timers_fire_exactly_once_across_kill_9() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    const PARTITIONS: i32 = 4;
    const RECORDS: i64 = 3_000;
    let app = support::unique("timers-kill");
    create(&app, PARTITIONS);
    // Event times ascend with the index (10 ms apart, an hour ago); a last record per
    // partition an hour later passes every timer's due time.
    let base = now_ms() - 2 * 3_600_000;
    let mut input: Vec<Input> = (0..RECORDS)
        .map(|i| (None, format!("k{}", i % 24), i.to_string(), base + i * 10))
        .collect();
    let end = base + 3_600_000;
    input.extend((0..PARTITIONS).map(|p| (Some(p), "flush".to_string(), "flush".to_string(), end)));
    produce(&format!("{app}.in"), &input);
    let total = input.len() as i64;

    let mut kills = 0;
    for fraction in [5, 4, 3, 2] {
        let mut child = spawn(&app);
        support::wait_for("progress", Duration::from_secs(60), || {
            (lag(&app, PARTITIONS) <= total * (fraction - 1) / 6).then_some(())
        });
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        kills += 1;
    }
    let left = lag(&app, PARTITIONS);
    println!("{kills} kills; {left} of {total} records left for the last instance");
    let mut last = spawn(&app);
    // The input's offsets can be committed before every due timer fired: a batch that reaches
    // `max_batch_records` leaves the rest of what the flush made due to the next (empty)
    // batch. So the last instance runs until every timer's output is committed, or the
    // deadline, and the checks below say what is missing.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut got = fired(&app);
    while (got.len() < RECORDS as usize || lag(&app, PARTITIONS) != 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        got = fired(&app);
    }
    last.kill().expect("kill -9");
    last.wait().expect("reaped");
    assert_eq!(lag(&app, PARTITIONS), 0, "the whole input processed");
    // Read again after the kill: what was committed since the last look counts too.
    let got = fired(&app);
    let mut wrong = Vec::new();
    for i in 0..RECORDS {
        let key = format!("k{}/{i}", i % 24);
        let due = base + i * 10 + DELAY_MS;
        let want = vec![(due.to_string(), Some(due))];
        if got.get(&key) != Some(&want) {
            wrong.push(format!("{key}: {:?}", got.get(&key)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} timers not fired exactly once with their due time as timestamp, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert_eq!(
        got.len(),
        RECORDS as usize,
        "no timer the workload did not schedule"
    );
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

#[test]
fn event_time_timers_do_not_fire_early_when_records_arrive_out_of_order() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("timers-order");
    create(&app, 1);
    let t0 = now_ms() - 3_600_000;
    let at = |v: &str, ts: i64| (Some(0), "k".to_string(), v.to_string(), ts);
    produce(
        &format!("{app}.in"),
        &[
            at("a", t0),           // due t0+200
            at("b", t0 + 100),     // due t0+300
            at("late", t0 - 1000), // due t0-800: already passed, fires right after it
            at("c", t0 + 199),     // stream time t0+199: a is not due yet
            at("d", t0 + 250),     // passes a only
            at("e", t0 + 1000),    // passes b, c (t0+399) and d (t0+450)
        ],
    );
    let instance = Instance::start(&config(&app, "a"), topology(&app));
    support::wait_for("the input processed", Duration::from_secs(60), || {
        (lag(&app, 1) == 0).then_some(())
    });
    let summary = instance.stop();
    let got: Vec<String> = outputs(&app)
        .into_iter()
        .map(|(k, v, _)| match v.strip_prefix("fired:") {
            Some(_) => format!("fired {k}"),
            None => v,
        })
        .collect();
    assert_eq!(
        got,
        [
            "seen:a",
            "seen:b",
            "seen:late",
            "fired k/late",
            "seen:c",
            "seen:d",
            "fired k/a",
            "seen:e",
            "fired k/b",
            "fired k/c",
            "fired k/d",
        ]
    );
    assert_eq!(summary.timers_fired, 5);
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

#[test]
fn a_wall_clock_timer_fires_on_a_partition_that_receives_nothing_more() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("timers-wall");
    create(&app, 2);
    let instance = Instance::start(&config(&app, "a"), topology(&app));
    produce(
        &format!("{app}.in"),
        &[(Some(1), "idle".to_string(), "w1".to_string(), now_ms())],
    );
    let got = support::wait_for("the wall-clock timer", Duration::from_secs(60), || {
        fired(&app).remove("idle/w1/w")
    });
    instance.stop();
    assert_eq!(got.len(), 1, "fired once: {got:?}");
    assert!(
        !fired(&app).contains_key("idle/w1"),
        "its event-time timer waits: stream time did not move"
    );
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

#[test]
fn timers_move_with_their_partition_to_another_instance_and_fire_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    const PARTITIONS: i32 = 4;
    let app = support::unique("timers-move");
    create(&app, PARTITIONS);
    let base = now_ms() - 3_600_000;
    // Each record schedules an event-time timer and a wall-clock one (values start with `w`).
    let first: Vec<Input> = (0..200)
        .map(|i| (None, format!("k{}", i % 16), format!("w{i}"), base + i))
        .collect();
    produce(&format!("{app}.in"), &first);
    let a = Instance::start(&config(&app, "a"), topology(&app));
    support::wait_for(
        "a processed the first records",
        Duration::from_secs(60),
        || (lag(&app, PARTITIONS) == 0).then_some(()),
    );
    // b joins and takes some partitions; then a stops and b has them all.
    let b = Instance::start(&config(&app, "b"), topology(&app));
    let summary_a = a.stop();
    // Event time passes every due time on every partition, on b.
    let flush: Vec<Input> = (0..PARTITIONS)
        .map(|p| {
            (
                Some(p),
                "flush".to_string(),
                "flush".to_string(),
                base + 60_000,
            )
        })
        .collect();
    produce(&format!("{app}.in"), &flush);
    let want = 400;
    let got = support::wait_for("every timer fired", Duration::from_secs(90), || {
        let got = fired(&app);
        (got.len() >= want && lag(&app, PARTITIONS) == 0).then_some(got)
    });
    let summary_b = b.stop();
    let twice: Vec<_> = got.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(twice.is_empty(), "timers fired more than once: {twice:?}");
    assert_eq!(got.len(), want);
    println!(
        "a fired {}, b fired {} (b restored {} partitions)",
        summary_a.timers_fired,
        summary_b.timers_fired,
        summary_b.restores.len()
    );
    assert!(
        summary_b.timers_fired > 0,
        "b fired the moved partitions' timers"
    );
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

/// Sends a timer of key `bad` to a sink whose topic does not exist, the others to `out`.
struct Misrouted;

impl StreamProcessor<String, String, String, String> for Misrouted {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let t = ctx.event_time_ms().unwrap_or_default();
        ctx.schedule_event_time(r.key.unwrap_or_default().as_bytes(), t + DELAY_MS)
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        t: &Timer,
    ) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(&t.key).to_string();
        let sink = if key == "bad" { "nowhere" } else { "out" };
        ctx.forward_to(
            sink,
            TypedRecord::new(Some(key), Some(format!("fired:{}", t.due_ms))),
        );
        Ok(())
    }
}

#[test]
fn a_timer_whose_output_cannot_be_written_is_dead_lettered_and_the_partition_goes_on() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("timers-unwritable");
    create(&app, 1);
    let topology = Topology::builder()
        .add_source("in", &[&format!("{app}.in")], StringSerde, StringSerde)
        .add_processor("misrouted", Misrouted, &["in"])
        .add_sink(
            "out",
            format!("{app}.out"),
            StringSerde,
            StringSerde,
            &["misrouted"],
        )
        .add_sink(
            "nowhere",
            format!("{app}.nowhere"),
            StringSerde,
            StringSerde,
            &["misrouted"],
        )
        .build()
        .expect("valid topology");
    let t0 = now_ms() - 3_600_000;
    let at = |k: &str, ts: i64| (Some(0), k.to_string(), "x".to_string(), ts);
    produce(
        &format!("{app}.in"),
        &[at("bad", t0), at("good", t0 + 1), at("tick", t0 + 1_000)],
    );
    let instance = Instance::start(&config(&app, "a"), topology);
    support::wait_for("the input processed", Duration::from_secs(60), || {
        (lag(&app, 1) == 0).then_some(())
    });
    instance.stop();
    assert_eq!(fired(&app).keys().collect::<Vec<_>>(), ["good"]);
    let mut dead = Vec::new();
    read_all(
        &support::clients(),
        &format!("{app}.in.DLT"),
        Duration::from_secs(60),
        |m| {
            use rdkafka::message::Headers;
            let header = |name: &str| {
                m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == name)
                        .map(|h| String::from_utf8_lossy(h.value.unwrap_or_default()).to_string())
                })
            };
            dead.push((
                String::from_utf8_lossy(m.key().unwrap_or_default()).to_string(),
                header("eosflow.dlt.timer.kind").is_some(),
                header("eosflow.dlt.error.class"),
            ));
            Ok(())
        },
    )
    .expect("read the DLT");
    // Refused by the broker, like a record's unwritable output: not a failure of the callback.
    assert_eq!(
        dead,
        [("bad".to_string(), true, Some("unwritable".to_string()))]
    );
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

/// Issue #32 (1): a wall-clock timer fires in a batch that consumed no input, and that
/// commit's answer is lost (reported unknown after it landed). The runtime cannot ask the
/// group's offsets about a batch without any: it restores the partitions from their
/// changelogs, which hold the timer's removal because the commit landed, so the timer does not
/// fire a second time. (Before, such a batch counted as not committed and fired again: two
/// results, each with its own envelope id.)
#[test]
fn a_timer_whose_offsetless_commit_outcome_is_unknown_fires_exactly_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("timers-unknown");
    create(&app, 2);
    eosflow::internals::processor::runtime::faults::report_next_offsetless_commit_unknown(&app);
    let instance = Instance::start(&config(&app, "a"), topology(&app));
    produce(
        &format!("{app}.in"),
        &[(Some(1), "idle".to_string(), "w1".to_string(), now_ms())],
    );
    support::wait_for(
        "the timer's batch reported unknown",
        Duration::from_secs(60),
        || {
            (!eosflow::internals::processor::runtime::faults::offsetless_commit_unknown_armed(&app))
                .then_some(())
        },
    );
    // A later record: processed after any second firing would have happened (due timers fire
    // at the start of each batch), so its output closes the window for a duplicate.
    produce(
        &format!("{app}.in"),
        &[(Some(1), "idle".to_string(), "x2".to_string(), now_ms())],
    );
    support::wait_for("the later record's output", Duration::from_secs(60), || {
        outputs(&app)
            .iter()
            .any(|(_, v, _)| v == "seen:x2")
            .then_some(())
    });
    instance.stop();
    let got = fired(&app).remove("idle/w1/w").unwrap_or_default();
    assert_eq!(got.len(), 1, "the wall-clock timer fired once: {got:?}");
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}

/// Issue #32 (1), second bullet: a batch with input offsets whose commit landed but is
/// reported unknown, and the group membership changed before the check (a rebalance between
/// `send_offsets` and the check; here a test fault stands for it). The group's committed
/// offsets may then be another owner's, so they do not decide: every task is restored from its
/// changelogs and the consumer sent back to the committed offsets. Every input comes out once,
/// and every timer it scheduled (stored in the landed batch) fires once.
#[test]
fn a_commit_reported_unknown_after_a_membership_change_restores_and_repeats_nothing() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("timers-membership");
    create(&app, 2);
    eosflow::internals::processor::runtime::faults::report_next_commit_unknown_after_membership_change(&app);
    let instance = Instance::start(&config(&app, "a"), topology(&app));
    let t0 = now_ms() - 60_000;
    let records: Vec<Input> = (0..40)
        .map(|i| {
            (
                Some(i % 2),
                format!("k{}", i % 2),
                format!("w{i}"),
                t0 + i as i64,
            )
        })
        .collect();
    produce(&format!("{app}.in"), &records);
    support::wait_for(
        "a batch reported unknown after a membership change",
        Duration::from_secs(60),
        || {
            (!eosflow::internals::processor::runtime::faults::membership_change_armed(&app))
                .then_some(())
        },
    );
    // Past every event-time timer, on both partitions.
    let flush: Vec<Input> = (0..2)
        .map(|p| (Some(p), format!("k{p}"), "flush".to_string(), t0 + 10_000))
        .collect();
    produce(&format!("{app}.in"), &flush);
    let wanted = |out: &[(String, String, Option<i64>)]| {
        let seen = out
            .iter()
            .filter(|(_, v, _)| v.starts_with("seen:w"))
            .count();
        let fired = out
            .iter()
            .filter(|(_, v, _)| v.starts_with("fired:"))
            .count();
        (seen >= 40 && fired >= 80).then_some(())
    };
    support::wait_for(
        "every record seen and both of its timers fired",
        Duration::from_secs(90),
        || wanted(&outputs(&app)),
    );
    instance.stop();
    let out = outputs(&app);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (_, v, _) in &out {
        if let Some(x) = v.strip_prefix("seen:w") {
            *seen.entry(x.to_string()).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 40, "every input came out: {seen:?}");
    assert!(
        seen.values().all(|n| *n == 1),
        "no input came out twice: {seen:?}"
    );
    let fired = fired(&app);
    assert_eq!(
        fired.len(),
        80,
        "an event-time and a wall-clock timer per input: {fired:?}"
    );
    assert!(
        fired.values().all(|f| f.len() == 1),
        "no timer fired twice: {fired:?}"
    );
    let _ = std::fs::remove_dir_all(&config(&app, "a").state.dir);
}
