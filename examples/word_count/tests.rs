//! The word count's unit tests: the topology in `TopologyTestDriver`, no broker, milliseconds.
//! `cargo test --locked --workspace --examples` runs them (and `make test`).

use std::time::Duration;

use eosflow::processor::{ProcessError, Timer};
use eosflow::serdes::StringSerde;
use eosflow::testing::{DriverError, TestRecord, TopologyTestDriver};
use eosflow::topology::{
    ProcessorContext, StreamProcessor, TimestampExtractor, Topology, TypedRecord,
};

use super::{stores, topology, topology_by_hand, DAY_MS, LINES, SUMMARIES};

type Driver = TopologyTestDriver<Topology>;

/// Pipes `text` as a line written by `author`.
fn write(driver: &mut Driver, author: &str, text: &str) -> Result<(), DriverError> {
    let (author, text) = (author.to_string(), text.to_string());
    driver.pipe_input(LINES, &StringSerde, &StringSerde, &author, &text)
}

/// Takes the summaries written since the last read, as text.
fn summaries(driver: &mut Driver) -> Result<Vec<String>, DriverError> {
    let out = driver.read_output(SUMMARIES, &StringSerde, &StringSerde)?;
    Ok(out
        .into_iter()
        .map(|(author, summary)| {
            format!(
                "{}: {}",
                author.unwrap_or_default(),
                summary.unwrap_or_default()
            )
        })
        .collect())
}

#[test]
fn each_line_updates_its_authors_counts() -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    write(&mut driver, "alice", "the cat and the hat")?;
    write(&mut driver, "bob", "hello")?;
    write(&mut driver, "alice", "The end")?;
    assert_eq!(
        summaries(&mut driver)?,
        [
            "alice: words=5 distinct=4 top=the:2 week=1",
            "bob: words=1 distinct=1 top=hello:1 week=1",
            "alice: words=7 distinct=5 top=the:3 week=2",
        ]
    );
    // The stores, as the next record will see them.
    let (words, _) = stores();
    assert_eq!(driver.store_get(&words, &"alice/the".to_string())?, Some(3));
    let alice = driver.store_prefix(&words, &"alice/".to_string())?;
    assert_eq!(alice.len(), 5);
    Ok(())
}

#[test]
fn the_dsl_and_the_builder_give_the_same_topology() -> Result<(), Box<dyn std::error::Error>> {
    let mut outputs = Vec::new();
    for built in [topology()?, topology_by_hand()?] {
        assert_eq!(
            built.changelog_topics("wc"),
            [
                "wc-state-changelog",
                "wc-words-changelog",
                "wc-days-changelog"
            ]
        );
        let mut driver = TopologyTestDriver::new(built)?;
        write(&mut driver, "alice", "the cat and the hat")?;
        write(&mut driver, "bob", "hello")?;
        driver.advance_wall_clock(Duration::from_secs(2 * 86_400))?;
        write(&mut driver, "alice", "The end")?;
        outputs.push(summaries(&mut driver)?);
    }
    assert_eq!(outputs[0].len(), 3);
    assert_eq!(outputs[0], outputs[1]);
    Ok(())
}

#[test]
fn bad_input_goes_to_the_dlt_with_its_reason_and_the_next_line_is_counted(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe_raw(
        LINES,
        Some("alice".as_bytes()),
        Some(b"\xff\xfe".as_slice()),
    )?;
    driver.pipe_raw(LINES, None, Some("nobody wrote this".as_bytes()))?;
    write(&mut driver, "alice", "still here")?;
    let dead = driver.read_raw_output("word-count.lines.DLT");
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
    assert!(dead[0]
        .dlt_reason()
        .unwrap_or_default()
        .contains("not UTF-8"));
    assert_eq!(dead[1].dlt_reason(), Some("a line needs an author"));
    assert_eq!(
        summaries(&mut driver)?,
        ["alice: words=2 distinct=2 top=here:1 week=1"]
    );
    Ok(())
}

#[test]
fn a_line_sent_twice_with_one_id_counts_once() -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    let line = TestRecord::new(LINES, Some("alice"), Some("hello")).id("line-1");
    driver.pipe(line.clone())?;
    driver.pipe(line)?;
    assert_eq!(summaries(&mut driver)?.len(), 1);
    assert_eq!(driver.summary().dedup_hits, 1);
    Ok(())
}

#[test]
fn lines_older_than_a_week_leave_the_weekly_count() -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    // A piped record's timestamp is the driver's clock, which moves only when told to.
    write(&mut driver, "alice", "monday")?;
    driver.advance_wall_clock(Duration::from_secs(3 * 86_400))?;
    write(&mut driver, "alice", "thursday")?;
    driver.advance_wall_clock(Duration::from_secs(5 * 86_400))?;
    write(&mut driver, "alice", "next tuesday")?;
    let weeks: Vec<String> = summaries(&mut driver)?
        .iter()
        .filter_map(|s| s.split(' ').next_back().map(str::to_string))
        .collect();
    assert_eq!(weeks, ["week=1", "week=2", "week=2"]);
    let (_, days) = stores();
    assert_eq!(driver.store_prefix(&days, &"alice/".to_string())?.len(), 3);
    Ok(())
}

/// The guide's Rust blocks are excerpts of this example, so the guide shows code that compiles
/// and passes these tests: a block edited in one place and not the other fails here.
#[test]
fn every_rust_block_of_the_guide_is_part_of_this_example() {
    let guide = include_str!("../../docs/write-your-own-topology.md");
    let sources = [include_str!("main.rs"), include_str!("tests.rs")];
    let blocks: Vec<&str> = guide
        .split("```rust\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .collect();
    assert!(
        blocks.len() >= 5,
        "the guide has {} Rust blocks",
        blocks.len()
    );
    for block in blocks {
        assert!(
            sources.iter().any(|s| s.contains(block)),
            "a Rust block of the guide is not in examples/word_count:\n{block}"
        );
    }
}

/// Tells an author who wrote nothing for a day of event time that they went quiet.
struct Quiet;

impl StreamProcessor<String, String, String, String> for Quiet {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        line: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let author = line
            .key
            .ok_or_else(|| ProcessError::permanent("a line needs an author"))?;
        // One event-time timer per author: each new line moves it a day after the line.
        let written = ctx.event_time_ms().unwrap_or(0);
        ctx.schedule_event_time(author.as_bytes(), written + DAY_MS)
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let author = String::from_utf8_lossy(&timer.key).to_string();
        ctx.forward(TypedRecord::new(
            Some(author),
            Some("quiet for a day".to_string()),
        ));
        Ok(())
    }
}

#[test]
fn an_author_quiet_for_a_day_of_event_time_is_told_so() -> Result<(), Box<dyn std::error::Error>> {
    let topology = Topology::builder()
        .add_source("lines", &[LINES], StringSerde, StringSerde)
        .timestamp_extractor("lines", TimestampExtractor::header("written-at"))
        .add_processor("quiet", Quiet, &["lines"])
        .add_sink(
            "nudges",
            "word-count.nudges",
            StringSerde,
            StringSerde,
            &["quiet"],
        )
        .build()?;
    let mut driver = TopologyTestDriver::new(topology)?;
    let line = |author: &str, at: i64| {
        TestRecord::new(LINES, Some(author), Some("hi")).header("written-at", at.to_string())
    };
    driver.pipe(line("alice", 0))?;
    driver.pipe(line("bob", 1_000))?;
    driver.pipe(line("alice", DAY_MS))?; // alice's timer moves to day 2
    assert!(driver.read_raw_output("word-count.nudges").is_empty());
    driver.pipe(line("carol", DAY_MS + 5_000))?; // stream time passes bob's timer
    let nudges = driver.read_raw_output("word-count.nudges");
    assert_eq!(nudges.len(), 1);
    assert_eq!(nudges[0].key_text(), "bob");
    assert_eq!(nudges[0].timestamp, Some(DAY_MS + 1_000)); // its due time, not the wall clock
    assert_eq!(driver.pending_timers(0)?.len(), 2); // alice's and carol's
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed summary, store entry, timer or dead letter: the
/// counts live in the two stores, nothing in the processor's fields.
#[test]
fn a_crash_anywhere_changes_no_committed_summary() -> Result<(), Box<dyn std::error::Error>> {
    let mut crash_test = TopologyTestDriver::with_crashes(4, topology);
    let lines = crash_test.input_topic(LINES, StringSerde, StringSerde);
    crash_test.pipe_input(&lines, "alice", "monday morning")?;
    crash_test.pipe_input(&lines, "bob", "hello")?;
    crash_test.advance_wall_clock(Duration::from_secs(3 * 86_400));
    crash_test.pipe_input(&lines, "alice", "thursday")?;
    crash_test.pipe(TestRecord::new(LINES, None::<&str>, Some("no author")));
    crash_test.advance_wall_clock(Duration::from_secs(5 * 86_400));
    crash_test.pipe_input(&lines, "alice", "next tuesday")?;
    let summary = crash_test.run()?;
    assert_eq!(summary.written.get(SUMMARIES), Some(&4));
    Ok(())
}
