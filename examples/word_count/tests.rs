//! The word count's unit tests: the topology in `TopologyTestDriver`, no broker, milliseconds.
//! `cargo test --locked --workspace --examples` runs them (and `make test`).

use std::time::Duration;

use eosflow::serdes::StringSerde;
use eosflow::testing::{DriverError, TestRecord, TopologyTestDriver};
use eosflow::topology::Topology;

use super::{stores, topology, LINES, SUMMARIES};

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
