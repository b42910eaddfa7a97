//! Event time and timers through the test driver: what a processor author sees — when timers
//! fire, in which order, what their outputs carry, and what a failing callback leaves behind.

use std::time::Duration;

use crate::processor::{Context, ProcessError, Processor, ProcessorSpec, Record, Timer, TimerKind};
use crate::serdes::StringSerde;
use crate::testing::{TestRecord, TopologyTestDriver, START_MS};
use crate::topology::{
    ProcessorContext, StreamProcessor, TimestampExtractor, Topology, TypedRecord,
};

/// Schedules an event-time timer per record at `event time + delay`, keyed by the value; the
/// value `cancel:<k>` cancels `<k>`, `wall:<k>` schedules a wall-clock timer a second ahead,
/// `fail:<k>` a timer whose callback fails. A firing timer emits `fired:<key>@<due>`.
struct Reminders {
    delay: i64,
    /// How many more calls of a `flaky:<k>` timer's callback fail transiently.
    flaky: u32,
}

impl Processor for Reminders {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let value = String::from_utf8_lossy(r.value.unwrap_or_default()).to_string();
        let now = ctx
            .event_time_ms()
            .ok_or_else(|| ProcessError::permanent("no event time"))?;
        match value.split_once(':') {
            Some(("cancel", k)) => {
                ctx.cancel_event_time(k.as_bytes())?;
            }
            Some(("wall", k)) => {
                ctx.schedule_wall_clock(k.as_bytes(), ctx.wall_clock_ms() + 1_000)?
            }
            Some(("fail", k)) => ctx.schedule(
                Timer::event_time(k.as_bytes(), now + self.delay).with_payload(b"boom".to_vec()),
            )?,
            Some(("flaky", k)) => ctx.schedule(
                Timer::event_time(k.as_bytes(), now + self.delay).with_payload(b"flaky".to_vec()),
            )?,
            _ => ctx.schedule_event_time(value.as_bytes(), now + self.delay)?,
        }
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, t: &Timer) -> Result<(), ProcessError> {
        if t.payload == b"boom" {
            ctx.emit("out", None, Some(b"never".to_vec()), vec![]);
            return Err(ProcessError::permanent("the callback failed"));
        }
        if t.payload == b"flaky" && self.flaky > 0 {
            self.flaky -= 1;
            ctx.emit("out", None, Some(b"half-done".to_vec()), vec![]);
            return Err(ProcessError::transient("the store blinked"));
        }
        if t.key.starts_with(b"chain") && t.key.len() < 8 {
            // A timer scheduled from a callback, already due: it fires in the same round.
            let mut next = t.key.clone();
            next.push(b'+');
            ctx.schedule_event_time(&next, t.due_ms)?;
        }
        let text = format!("fired:{}@{}", String::from_utf8_lossy(&t.key), t.due_ms);
        ctx.emit("out", Some(t.key.clone()), Some(text.into_bytes()), vec![]);
        Ok(())
    }
}

fn driver(delay: i64) -> TopologyTestDriver<ProcessorSpec<Reminders>> {
    TopologyTestDriver::new(ProcessorSpec::new(Reminders { delay, flaky: 0 }).inputs(["in"]))
        .expect("driver")
}

fn at(d: &mut TopologyTestDriver<ProcessorSpec<Reminders>>, value: &str, ms: i64) {
    d.pipe(TestRecord::new("in", None::<Vec<u8>>, Some(value)).timestamp(ms))
        .expect("pipe");
}

fn fired(d: &mut TopologyTestDriver<ProcessorSpec<Reminders>>) -> Vec<(String, Option<i64>)> {
    d.read_raw_output("out")
        .into_iter()
        .map(|r| (r.value_text(), r.timestamp))
        .collect()
}

#[test]
fn event_time_timers_fire_in_due_order_once_stream_time_passes_never_early() {
    let mut d = driver(100);
    at(&mut d, "a", 1_000); // due 1100
    at(&mut d, "b", 1_050); // due 1150
    at(&mut d, "late", 900); // out of order: due 1000, stream time stays 1050
    assert_eq!(d.partition_stream_time_ms(0), Some(1_050));
    // 1000 < 1050: the late record's own timer is already due and fires right after it.
    assert_eq!(
        fired(&mut d),
        [("fired:late@1000".to_string(), Some(1_000))]
    );
    at(&mut d, "c", 1_099); // stream time 1099: a (1100) is not due yet
    assert!(
        fired(&mut d).is_empty(),
        "nothing fires before its due time"
    );
    at(&mut d, "d", 1_200); // passes a, b and c (1199) at once, in due order
    assert_eq!(
        fired(&mut d),
        [
            ("fired:a@1100".to_string(), Some(1_100)),
            ("fired:b@1150".to_string(), Some(1_150)),
            ("fired:c@1199".to_string(), Some(1_199)),
        ]
    );
    let pending = d.pending_timers(0).expect("timers");
    assert_eq!(pending, [Timer::event_time(b"d".to_vec(), 1_300)]);
    assert_eq!(d.summary().timers_fired, 4);
}

#[test]
fn rescheduling_moves_a_keys_timer_and_cancelling_removes_it() {
    let mut d = driver(100);
    at(&mut d, "k", 1_000);
    at(&mut d, "k", 1_050); // moved to 1150
    at(&mut d, "x", 1_060);
    at(&mut d, "cancel:x", 1_070);
    at(&mut d, "y", 1_120); // stream time 1120: k's old 1100 must not fire
    assert!(fired(&mut d).is_empty());
    assert_eq!(
        d.pending_timers(0)
            .expect("timers")
            .iter()
            .map(|t| (String::from_utf8_lossy(&t.key).to_string(), t.due_ms))
            .collect::<Vec<_>>(),
        [("k".to_string(), 1_150), ("y".to_string(), 1_220)]
    );
    at(&mut d, "z", 10_000);
    assert_eq!(fired(&mut d).len(), 2);
}

#[test]
fn a_timer_scheduled_by_a_callback_at_a_passed_time_fires_in_the_same_round() {
    let mut d = driver(10);
    at(&mut d, "chain", 0);
    at(&mut d, "go", 100);
    let got: Vec<String> = fired(&mut d).into_iter().map(|(v, _)| v).collect();
    assert_eq!(
        got,
        [
            "fired:chain@10",
            "fired:chain+@10",
            "fired:chain++@10",
            "fired:chain+++@10"
        ]
    );
}

#[test]
fn wall_clock_timers_fire_when_the_driver_clock_passes_them_without_any_record() {
    let mut d = driver(100);
    at(&mut d, "wall:w", 5);
    let due = START_MS + 1_000;
    assert_eq!(
        d.pending_timers(0).expect("timers"),
        [Timer::wall_clock(b"w".to_vec(), due)]
    );
    d.advance_wall_clock(Duration::from_millis(999))
        .expect("advance");
    assert!(fired(&mut d).is_empty());
    d.advance_wall_clock(Duration::from_millis(1))
        .expect("advance");
    assert_eq!(fired(&mut d), [(format!("fired:w@{due}"), Some(due))]);
    assert!(d.pending_timers(0).expect("timers").is_empty());
}

#[test]
fn a_failing_callback_leaves_nothing_but_a_dead_letter_and_the_partition_goes_on() {
    let mut d = driver(100);
    at(&mut d, "fail:f", 1_000);
    at(&mut d, "ok", 1_001);
    at(&mut d, "tick", 2_000);
    assert_eq!(
        fired(&mut d),
        [("fired:ok@1101".to_string(), Some(1_101))],
        "the failed callback's emit is discarded"
    );
    let dead = d.read_raw_output("in.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key_text(), "f");
    assert_eq!(dead[0].value_text(), "boom");
    assert_eq!(dead[0].dlt_reason(), Some("the callback failed"));
    assert_eq!(dead[0].header("eosflow.dlt.timer.kind"), Some("event-time"));
    assert_eq!(dead[0].header("eosflow.dlt.timer.due"), Some("1100"));
    assert_eq!(dead[0].timestamp, Some(1_100));
    assert_eq!(
        dead[0].header("eosflow.dlt.redrivable"),
        Some("false"),
        "its key and value are the timer's, not an input record's"
    );
    assert_eq!(d.pending_timers(0).expect("timers").len(), 1, "only tick's");
}

/// Issue 32, item 4: a callback that failed transiently was dead-lettered at once, so the
/// timer's result was lost. It is called again (with a short backoff); the result comes out
/// once, and the failed calls' effects never.
#[test]
fn a_callback_failing_transiently_twice_is_called_again_and_its_result_comes_out_once() {
    let mut d = TopologyTestDriver::new(
        ProcessorSpec::new(Reminders {
            delay: 100,
            flaky: 2,
        })
        .inputs(["in"]),
    )
    .expect("driver");
    at(&mut d, "flaky:f", 1_000);
    at(&mut d, "tick", 2_000);
    assert_eq!(fired(&mut d), [("fired:f@1100".to_string(), Some(1_100))]);
    assert!(d.read_raw_output("in.DLT").is_empty());
    assert_eq!(d.processor().processor().flaky, 0);
}

/// Issue 32, item 4: a callback that keeps failing transiently is dead-lettered after the
/// bounded attempts, as `transient-exhausted`, marked not redrivable, and the partition goes on.
#[test]
fn a_callback_that_keeps_failing_transiently_is_dead_lettered_after_bounded_attempts() {
    let mut d = TopologyTestDriver::new(
        ProcessorSpec::new(Reminders {
            delay: 100,
            flaky: 100,
        })
        .inputs(["in"]),
    )
    .expect("driver");
    at(&mut d, "flaky:f", 1_000);
    at(&mut d, "ok", 1_050);
    at(&mut d, "tick", 2_000);
    assert_eq!(fired(&mut d), [("fired:ok@1150".to_string(), Some(1_150))]);
    let attempts = crate::processor::TIMER_CALL_ATTEMPTS as u32;
    assert_eq!(d.processor().processor().flaky, 100 - attempts);
    let dead = d.read_raw_output("in.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("transient-exhausted"));
    assert_eq!(dead[0].header("eosflow.dlt.timer.due"), Some("1100"));
    assert_eq!(dead[0].header("eosflow.dlt.redrivable"), Some("false"));
}

/// A topology node closing a "session" per key 50 ms of event time after its last record.
struct Sessions;

impl StreamProcessor<String, String, String, String> for Sessions {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let key = r.key.unwrap_or_default();
        let at = r.timestamp.unwrap_or_default() + 50;
        ctx.schedule_event_time(key.as_bytes(), at)?;
        ctx.forward(TypedRecord::new(Some(key), Some("seen".to_string())));
        Ok(())
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        t: &Timer,
    ) -> Result<(), ProcessError> {
        assert_eq!(t.kind, TimerKind::EventTime);
        let key = String::from_utf8_lossy(&t.key).to_string();
        ctx.forward(TypedRecord::new(Some(key), Some("closed".to_string())));
        Ok(())
    }
}

#[test]
fn a_topology_reads_event_time_from_a_header_and_its_node_gets_its_own_timers() {
    let topology = Topology::builder()
        .add_source("events", &["events"], StringSerde, StringSerde)
        .timestamp_extractor("events", TimestampExtractor::header("ts"))
        .add_processor("sessions", Sessions, &["events"])
        .add_sink("out", "sessions", StringSerde, StringSerde, &["sessions"])
        .build()
        .expect("topology");
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    let rec = |k: &str, ts: &str| {
        TestRecord::new("events", Some(k), Some("x"))
            .header("ts", ts)
            .timestamp(1)
    };
    d.pipe(rec("s1", "1000")).expect("pipe");
    d.pipe(rec("s2", "1040")).expect("pipe");
    d.pipe(rec("s1", "1030")).expect("pipe"); // out of order: s1's session moves to 1080
    d.pipe(TestRecord::new("events", Some("s3"), Some("x")).header("ts", 1_100i64.to_be_bytes()))
        .expect("pipe");
    let out: Vec<(String, String, Option<i64>)> = d
        .read_raw_output("sessions")
        .into_iter()
        .map(|r| (r.key_text(), r.value_text(), r.timestamp))
        .collect();
    let want = [
        ("s1", "seen", 1_000),
        ("s2", "seen", 1_040),
        ("s1", "seen", 1_030),
        ("s3", "seen", 1_100),
        ("s1", "closed", 1_080),
        ("s2", "closed", 1_090),
    ];
    let want: Vec<(String, String, Option<i64>)> = want
        .iter()
        .map(|(k, v, t)| (k.to_string(), v.to_string(), Some(*t)))
        .collect();
    assert_eq!(out, want);
    assert_eq!(d.stream_time_ms(), Some(1_100));
}

#[test]
fn a_record_forwarded_up_the_retry_ladder_keeps_its_event_time() {
    let flaky = |_: &mut ProcessorContext<'_, '_, '_, String, String>,
                 _: TypedRecord<String, String>| {
        Err::<(), _>(ProcessError::transient("down"))
    };
    let topology = Topology::builder()
        .add_source("src", &["src"], StringSerde, StringSerde)
        .add_processor("p", flaky, &["src"])
        .build()
        .expect("topology");
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(TestRecord::new("src", Some("k"), Some("v")).timestamp(77))
        .expect("pipe");
    let forwarded = d.read_raw_output("src.retry.1");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].timestamp, Some(77));
}

/// Schedules 600 timers in a scrambled order (`load`), or cancels every tenth of them and adds
/// one between each pair (`edit`); a firing timer emits its due time.
struct Bulk;

impl Processor for Bulk {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        match r.value.unwrap_or_default() {
            b"load" => {
                for i in 0..600i64 {
                    let due = i * 7 % 600 * 10;
                    ctx.schedule_event_time(format!("t{due:05}").as_bytes(), due)?;
                }
            }
            b"edit" => {
                for due in (0..6_000i64).step_by(100) {
                    ctx.cancel_event_time(format!("t{due:05}").as_bytes())?;
                }
                for due in (5..6_000i64).step_by(10) {
                    ctx.schedule_event_time(format!("u{due:05}").as_bytes(), due)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, t: &Timer) -> Result<(), ProcessError> {
        ctx.emit("out", None, Some(t.due_ms.to_string().into_bytes()), vec![]);
        Ok(())
    }
}

#[test]
fn committed_and_uncommitted_timers_fire_merged_in_due_order_past_the_read_ahead() {
    let mut d = TopologyTestDriver::new(ProcessorSpec::new(Bulk).inputs(["in"])).expect("driver");
    let pipe = |d: &mut TopologyTestDriver<ProcessorSpec<Bulk>>, v: &str, ts: i64| {
        d.pipe(TestRecord::new("in", None::<Vec<u8>>, Some(v)).timestamp(ts))
            .expect("pipe")
    };
    pipe(&mut d, "load", -1);
    assert_eq!(d.pending_timers(0).expect("timers").len(), 600); // committed
    pipe(&mut d, "edit", -1); // uncommitted: 60 cancelled, 600 added
    pipe(&mut d, "go", 10_000);
    let got: Vec<i64> = d
        .read_raw_output("out")
        .iter()
        .filter_map(|r| r.value_text().parse().ok())
        .collect();
    let mut want: Vec<i64> = (0..6_000).step_by(10).filter(|d| d % 100 != 0).collect();
    want.extend((5..6_000).step_by(10));
    want.sort();
    assert_eq!(got, want);
    assert!(d.pending_timers(0).expect("timers").is_empty());
}

/// Not a test of behaviour: how fast the driver fires timers, and what a million pending
/// timers cost on disk. `cargo test --release -p eosflow --lib timer_throughput -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn timer_throughput_and_size() {
    struct Many;
    impl Processor for Many {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            let n: i64 = std::str::from_utf8(r.value.unwrap_or_default())
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            for i in 0..1_000 {
                let key = format!("key-{n:06}-{i:04}");
                ctx.schedule_event_time(key.as_bytes(), 1_000_000 + n * 1_000 + i)?;
            }
            Ok(())
        }
        fn on_timer(&mut self, _: &mut Context<'_>, _: &Timer) -> Result<(), ProcessError> {
            Ok(())
        }
    }
    let rss_mb = || {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |pages| pages * 4096.0 / 1e6)
    };
    let mut d = TopologyTestDriver::new(ProcessorSpec::new(Many).inputs(["in"])).expect("driver");
    let rss_before = rss_mb();
    let started = std::time::Instant::now();
    for n in 0..1_000 {
        d.pipe(TestRecord::new("in", None::<Vec<u8>>, Some(n.to_string())).timestamp(0))
            .expect("pipe");
        if n % 10 == 9 {
            d.state_get(b"commit").expect("commit");
        }
    }
    let scheduled = started.elapsed();
    let bytes = d.flushed_state_bytes().expect("size");
    println!(
        "scheduled 1,000,000 timers in {scheduled:?} ({:.0}/s); store on disk {:.1} MB; RSS {rss_before:.0} MB before, {:.0} MB after",
        1e6 / scheduled.as_secs_f64(),
        bytes as f64 / 1e6,
        rss_mb()
    );
    let started = std::time::Instant::now();
    d.pipe(TestRecord::new("in", None::<Vec<u8>>, Some("x")).timestamp(i64::MAX / 2))
        .expect("pipe");
    let took = started.elapsed();
    println!(
        "fired {} timers in {took:?} ({:.0}/s); RSS {:.0} MB",
        d.summary().timers_fired,
        d.summary().timers_fired as f64 / took.as_secs_f64(),
        rss_mb()
    );
}
