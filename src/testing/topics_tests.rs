//! The topic-shaped driver API and the crash simulation, as a test author uses them.

use std::collections::HashMap;
use std::time::Duration;

use super::{CrashPoint, CrashTestError, TestRecord, TopologyTestDriver};
use crate::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use crate::processor::{Application, Context, ProcessError, Processor, StoreHandle};
use crate::record::Record;
use crate::retry::dlt::DltClass;
use crate::serdes::{I64Serde, StringSerde};
use crate::topology::windows::{TimeWindows, WindowStoreHandle, WindowedSerde};
use crate::topology::{ProcessorContext, Topology, TopologyError, TypedRecord};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// amounts → running total per key (store `totals`) → totals; a negative amount is permanent.
fn sums() -> (Topology, StoreHandle<String, i64>) {
    let totals = StoreHandle::new("totals", StringSerde, I64Serde);
    let store = totals.clone();
    let sum = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                    r: TypedRecord<String, i64>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let amount = r
            .value
            .ok_or_else(|| ProcessError::permanent("no amount"))?;
        if amount < 0 {
            return Err(ProcessError::permanent("negative amount"));
        }
        let mut s = ctx.store(&store)?;
        let total = s.get(&key)?.unwrap_or(0) + amount;
        s.put(&key, &total)?;
        ctx.forward(TypedRecord::new(Some(key), Some(total)));
        Ok(())
    };
    let topology = Topology::builder()
        .add_source("amounts", &["amounts"], StringSerde, I64Serde)
        .add_processor("sum", sum, &["amounts"])
        .add_state_store(&totals, &["sum"])
        .add_sink("out", "totals", StringSerde, I64Serde, &["sum"])
        .build()
        .expect("valid topology");
    (topology, totals)
}

#[test]
fn typed_topics_pipe_in_and_read_out_one_record_at_a_time() -> TestResult {
    let (topology, _) = sums();
    let mut driver = TopologyTestDriver::new(topology)?;
    let amounts = driver.input_topic("amounts", StringSerde, I64Serde);
    let totals = driver.output_topic("totals", StringSerde, I64Serde);
    amounts.pipe(&mut driver, "a", 5)?;
    amounts.pipe_at(&mut driver, "a", 7, 1_000)?;
    amounts.pipe(&mut driver, "b", 1)?;
    assert_eq!(totals.len(&driver), 3);
    assert_eq!(
        totals.read_key_value(&mut driver)?,
        Some((Some("a".to_string()), Some(5)))
    );
    let rest = totals.read_records(&mut driver)?;
    assert_eq!(rest.len(), 2);
    assert_eq!(
        (rest[0].key.as_deref(), rest[0].value, rest[0].timestamp),
        (Some("a"), Some(12), Some(1_000))
    );
    assert_eq!(rest[1].value, Some(1));
    assert!(totals.is_empty(&driver));
    assert_eq!(totals.read_key_value(&mut driver)?, None);
    amounts.pipe_all(&mut driver, [("c".to_string(), 2), ("c".to_string(), 3)])?;
    assert_eq!(totals.read_values(&mut driver)?, vec![Some(2), Some(5)]);
    Ok(())
}

#[test]
fn a_key_value_store_view_reads_what_the_next_record_would_see() -> TestResult {
    let (topology, handle) = sums();
    let mut driver = TopologyTestDriver::new(topology)?;
    let amounts = driver.input_topic("amounts", StringSerde, I64Serde);
    for (k, v) in [("a", 5), ("b", 1), ("a", 7), ("c", 4)] {
        amounts.pipe(&mut driver, k, v)?;
    }
    let mut store = driver.key_value_store(&handle);
    assert_eq!(store.get(&"a".to_string())?, Some(12));
    assert_eq!(store.get(&"z".to_string())?, None);
    assert_eq!(
        store.all()?,
        vec![("a".into(), 12), ("b".into(), 1), ("c".into(), 4)]
    );
    assert_eq!(
        store.range(&"b".to_string(), &"c".to_string())?,
        vec![("b".into(), 1)]
    );
    Ok(())
}

#[test]
fn dead_letters_come_back_typed_with_class_reason_and_origin() -> TestResult {
    let (topology, _) = sums();
    let mut driver = TopologyTestDriver::new(topology)?;
    let amounts = driver.input_topic("amounts", StringSerde, I64Serde);
    amounts.pipe(&mut driver, "a", 5)?;
    amounts.pipe(&mut driver, "a", -1)?;
    let dead = driver.dead_letters("amounts");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].class, DltClass::Permanent);
    assert_eq!(dead[0].reason, "negative amount");
    assert_eq!(dead[0].original_topic, "amounts");
    assert_eq!(dead[0].original_offset, Some(1));
    // Taken: a second read (by the DLT's own name) finds nothing new.
    assert!(driver.dead_letters("amounts.DLT").is_empty());
    Ok(())
}

/// clicks → 100 ms windows (grace 50 ms) counted per user, store `clicks-per-window`.
fn windowed() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by(TimeWindows::of_size_with_grace(
            Duration::from_millis(100),
            Duration::from_millis(50),
        ))
        .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-window"))
        .to_stream()
        .to(
            "counts",
            Produced::with(WindowedSerde::new(StringSerde), I64Serde),
        );
    builder.build()
}

#[test]
fn a_window_store_view_fetches_windows_and_a_late_click_is_a_typed_late_record() -> TestResult {
    let mut driver = TopologyTestDriver::new(windowed()?)?;
    let clicks = driver.input_topic("clicks", StringSerde, StringSerde);
    clicks.pipe_at(&mut driver, "ann", "/", 10)?;
    clicks.pipe_at(&mut driver, "ann", "/", 50)?;
    clicks.pipe_at(&mut driver, "ann", "/", 120)?;
    let handle = WindowStoreHandle::new("clicks-per-window", StringSerde, I64Serde);
    let mut windows = driver.window_store(&handle);
    assert_eq!(windows.fetch(&"ann".to_string(), 0)?, Some(2));
    assert_eq!(windows.fetch(&"ann".to_string(), 50)?, None);
    let range = windows.fetch_range(&"ann".to_string(), 0, 100)?;
    assert_eq!(
        range.iter().map(|(w, n)| (w.start, *n)).collect::<Vec<_>>(),
        vec![(0, 2), (100, 1)]
    );
    assert_eq!(windows.all()?.len(), 2);
    clicks.pipe_at(&mut driver, "ann", "/", 200)?; // [0, 100) closes at 150
    clicks.pipe_at(&mut driver, "ann", "/", 20)?;
    let dead = driver.dead_letters("clicks");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].class, DltClass::LateRecord);
    assert!(!dead[0].reason.is_empty());
    Ok(())
}

/// The planted bug: counts kept in a struct field. Right until the process dies.
#[derive(Default)]
struct FieldCount {
    counts: HashMap<Vec<u8>, i64>,
}

impl Processor for FieldCount {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let key = record
            .key
            .ok_or_else(|| ProcessError::permanent("no key"))?
            .to_vec();
        let n = self.counts.entry(key.clone()).or_insert(0);
        *n += 1;
        ctx.emit(
            "counts",
            Some(key),
            Some(n.to_string().into_bytes()),
            vec![],
        );
        Ok(())
    }
}

/// The same count kept in the processor's store: survives a crash.
#[derive(Default)]
struct StoreCount;

impl Processor for StoreCount {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let key = record
            .key
            .ok_or_else(|| ProcessError::permanent("no key"))?
            .to_vec();
        let n = match ctx.get(&key)? {
            Some(v) => String::from_utf8_lossy(&v)
                .parse::<i64>()
                .map_err(|e| ProcessError::permanent(e.to_string()))?,
            None => 0,
        } + 1;
        ctx.put(&key, n.to_string().into_bytes());
        ctx.emit(
            "counts",
            Some(key),
            Some(n.to_string().into_bytes()),
            vec![],
        );
        Ok(())
    }
}

const USERS: [&str; 7] = ["ann", "bob", "ann", "ann", "cid", "bob", "ann"];

#[test]
fn the_field_counter_passes_the_plain_driver() -> TestResult {
    let mut driver = TopologyTestDriver::new(FieldCount::default())?;
    for u in USERS {
        driver.pipe(TestRecord::new("clicks", Some(u), Some("/")))?;
    }
    let out: Vec<String> = driver
        .read_raw_output("counts")
        .iter()
        .map(|r| format!("{}={}", r.key_text(), r.value_text()))
        .collect();
    assert_eq!(
        out,
        ["ann=1", "bob=1", "ann=2", "ann=3", "cid=1", "bob=2", "ann=4"]
    );
    Ok(())
}

fn crash_test_of<P: Application>(
    seed: u64,
    factory: impl FnMut() -> Result<P, std::convert::Infallible>,
) -> super::CrashTest<impl FnMut() -> Result<P, std::convert::Infallible>> {
    let mut t = TopologyTestDriver::with_crashes(seed, factory);
    for u in USERS {
        t.pipe(TestRecord::new("clicks", Some(u), Some("/")));
    }
    t
}

#[test]
fn with_crashes_catches_state_kept_in_a_struct_field() {
    let err = crash_test_of(7, || Ok(FieldCount::default()))
        .run()
        .expect_err("the field counter loses its counts in a crash");
    let CrashTestError::Diverged(d) = &err else {
        panic!("expected a divergence, got {err}");
    };
    assert!(
        d.difference.contains("\"counts\""),
        "names the output topic: {err}"
    );
    assert!(
        d.difference
            .contains("crash-free run key \"ann\" value \"2\""),
        "names the record the crash-free run wrote: {err}"
    );
    let report = err.to_string();
    assert!(
        report.contains("kill -9"),
        "names the crash point: {report}"
    );
}

#[test]
fn with_crashes_reports_the_same_crash_for_the_same_seed() {
    let first = crash_test_of(11, || Ok(FieldCount::default())).run();
    let again = crash_test_of(11, || Ok(FieldCount::default())).run();
    assert_eq!(
        first.map(|_| ()).map_err(|e| e.to_string()),
        again.map(|_| ()).map_err(|e| e.to_string())
    );
}

#[test]
fn with_crashes_passes_a_store_based_count_at_every_batch_boundary() -> TestResult {
    for seed in 0..4 {
        let summary = crash_test_of(seed, || Ok(StoreCount)).run()?;
        assert_eq!(summary.batches, USERS.len().div_ceil(summary.batch_steps));
        for batch in 0..summary.batches {
            assert!(summary.crashes.contains(&CrashPoint::AfterCommit { batch }));
            assert!(summary
                .crashes
                .contains(&CrashPoint::BeforeLocalApply { batch }));
            assert!(summary
                .crashes
                .iter()
                .any(|c| matches!(c, CrashPoint::MidBatch { batch: b, .. } if *b == batch)));
        }
    }
    Ok(())
}

#[test]
fn with_crashes_passes_a_store_based_count_with_dead_letters_and_duplicates() -> TestResult {
    let mut t =
        TopologyTestDriver::with_crashes(3, || Ok::<_, std::convert::Infallible>(StoreCount))
            .batch_steps(2);
    t.pipe(TestRecord::new("clicks", Some("ann"), Some("/")).id("c1"));
    t.pipe(TestRecord::new("clicks", None::<&str>, Some("/")));
    t.pipe(TestRecord::new("clicks", Some("ann"), Some("/")).id("c1"));
    t.pipe(TestRecord::new("clicks", Some("bob"), Some("/")).id("c2"));
    t.advance_wall_clock(Duration::from_secs(1));
    t.pipe(TestRecord::new("clicks", Some("ann"), Some("/")).id("c3"));
    let summary = t.run()?;
    assert_eq!(summary.batches, 3);
    Ok(())
}

#[test]
fn a_long_input_gets_a_seeded_sample_of_crash_points() -> TestResult {
    let long = |seed| {
        let mut t = TopologyTestDriver::with_crashes(seed, || {
            Ok::<_, std::convert::Infallible>(StoreCount)
        })
        .batch_steps(1)
        .max_crashes(8);
        for i in 0..40 {
            let user = ["ann", "bob", "cid"][i % 3];
            t.pipe(TestRecord::new("clicks", Some(user), Some("/")));
        }
        t
    };
    let first = long(21).run()?;
    assert_eq!(first.batches, 40);
    assert_eq!(first.crashes.len(), 8);
    assert!(first
        .crashes
        .windows(2)
        .all(|w| w[0].batch() <= w[1].batch()));
    assert_eq!(long(21).run()?, first, "the same seed, the same crashes");
    Ok(())
}

/// Schedules a wall-clock timer per value of `0..n` (`n` the record's value); each fires
/// into `fired`. Stateless but for its timers, which live in the store.
struct ManyTimers;

impl Processor for ManyTimers {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let n: u32 = std::str::from_utf8(record.value.unwrap_or_default())
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ProcessError::permanent("not a count"))?;
        for i in 0..n {
            ctx.schedule_wall_clock(format!("t{i:05}").as_bytes(), super::START_MS + 1_000)?;
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        ctx: &mut Context<'_>,
        timer: &crate::processor::Timer,
    ) -> Result<(), ProcessError> {
        ctx.emit("fired", Some(timer.key.clone()), None, vec![]);
        Ok(())
    }
}

#[test]
fn with_crashes_handles_a_clock_move_that_commits_inside_itself() -> TestResult {
    // 1 500 timers due at once: the driver commits after the first 1 000, inside the step; a
    // crash later in the batch resumes after that step, not at the batch's start.
    let mut crashed_after_the_move = false;
    for seed in 0..8 {
        let mut t = TopologyTestDriver::with_crashes(seed, || {
            Ok::<_, std::convert::Infallible>(ManyTimers)
        })
        .batch_steps(3);
        t.pipe(TestRecord::new("in", Some("k"), Some("1500")));
        t.advance_wall_clock(Duration::from_secs(2));
        t.pipe(TestRecord::new("in", Some("k"), Some("2")));
        let summary = t.run()?;
        assert_eq!(summary.written.get("fired"), Some(&1_500));
        crashed_after_the_move |= summary
            .crashes
            .iter()
            .any(|c| matches!(c, CrashPoint::MidBatch { after_steps, .. } if *after_steps >= 2));
    }
    assert!(crashed_after_the_move);
    Ok(())
}

/// The DSL word count (as in `examples/dsl_word_count`): flat_map_values → group_by → count.
fn word_count() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    builder
        .stream("lines", Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|line: &String| {
            line.split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, w| w.clone(),
            Grouped::with(StringSerde, StringSerde).named("words"),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("word-counts"))
        .to_stream()
        .to("counts", Produced::with(StringSerde, I64Serde));
    builder.build()
}

#[test]
fn with_crashes_passes_the_dsl_word_count() -> TestResult {
    let mut t = TopologyTestDriver::with_crashes(5, word_count);
    let lines = t.input_topic("lines", StringSerde, StringSerde);
    for line in ["the cat", "the hat", "THE END", "a cat and a hat"] {
        t.pipe_input(&lines, "k", line)?;
    }
    // Not UTF-8: a dead letter, in both runs alike.
    t.pipe(TestRecord::new(
        "lines",
        None::<&str>,
        Some(b"\xff\xfe".as_slice()),
    ));
    let summary = t.run()?;
    assert!(summary.crashes.len() >= 2 * summary.batches);
    Ok(())
}

#[test]
fn with_crashes_passes_a_windowed_count_with_a_late_record() -> TestResult {
    let mut t = TopologyTestDriver::with_crashes(9, windowed);
    let clicks = t.input_topic("clicks", StringSerde, StringSerde);
    for (user, at) in [
        ("ann", 10),
        ("bob", 40),
        ("ann", 150),
        ("ann", 20),
        ("bob", 260),
    ] {
        t.pipe(
            clicks
                .record(Some(&user.to_string()), Some(&"/".to_string()))?
                .timestamp(at),
        );
    }
    t.run()?;
    Ok(())
}

#[test]
fn every_rust_block_of_the_testing_page_is_in_the_tests() {
    crate::testing::assert_rust_blocks_are_in(
        "docs/testing.md",
        include_str!("../../docs/testing.md"),
        "src/testing/topics_tests.rs",
        include_str!("topics_tests.rs"),
        6,
    );
}
