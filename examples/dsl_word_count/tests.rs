//! The DSL word count's unit tests: the topology in `TopologyTestDriver`, no broker.
//! `cargo test --locked --example dsl_word_count` runs them.

use eosflow::processor::StoreHandle;
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};

use super::{topology, COUNTS, LINES};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn counts(pairs: &[(&str, i64)]) -> Vec<(Option<String>, Option<i64>)> {
    pairs
        .iter()
        .map(|(w, n)| (Some(w.to_string()), Some(*n)))
        .collect()
}

#[test]
fn each_line_updates_the_count_of_each_of_its_words() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(TestRecord::new(LINES, None::<&str>, Some("The cat and the hat")).partition(0))?;
    driver.pipe(TestRecord::new(LINES, Some("bob"), Some("THE END")).partition(2))?;
    let out = driver.read_output(COUNTS, &StringSerde, &I64Serde)?;
    assert_eq!(
        out,
        counts(&[
            ("the", 1),
            ("cat", 1),
            ("and", 1),
            ("the", 2),
            ("hat", 1),
            ("the", 3),
            ("end", 1)
        ])
    );
    let store = StoreHandle::new("word-counts", StringSerde, I64Serde);
    assert_eq!(driver.store_get(&store, &"the".to_string())?, Some(3));
    // Every word went through the repartition topic (the driver's application id is `test`).
    assert_eq!(driver.read_raw_output("test-words-repartition").len(), 7);
    Ok(())
}

#[test]
fn a_line_that_is_not_text_is_dead_lettered_and_the_next_one_counted() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe_raw(LINES, None, Some(b"\xff\xfe".as_slice()))?;
    driver.pipe(TestRecord::new(LINES, None::<&str>, Some("hello")))?;
    let dead = driver.read_raw_output("dsl-word-count.lines.DLT");
    assert_eq!(dead.len(), 1);
    assert!(dead[0]
        .dlt_reason()
        .unwrap_or_default()
        .contains("not UTF-8"));
    let out = driver.read_output(COUNTS, &StringSerde, &I64Serde)?;
    assert_eq!(out, counts(&[("hello", 1)]));
    Ok(())
}

#[test]
fn a_line_sent_twice_with_one_id_counts_once() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    let line = TestRecord::new(LINES, None::<&str>, Some("hello world")).id("line-1");
    driver.pipe(line.clone())?;
    driver.pipe(line)?;
    let out = driver.read_output(COUNTS, &StringSerde, &I64Serde)?;
    assert_eq!(out, counts(&[("hello", 1), ("world", 1)]));
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed count, store entry or dead letter: the counts live in
/// the `word-counts` store and the re-keyed words in the repartition topic, nothing in memory.
#[test]
fn a_crash_anywhere_changes_no_committed_count() -> TestResult {
    for seed in [1, 2, 3] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        let lines = crash_test.input_topic(LINES, StringSerde, StringSerde);
        for line in ["The cat and the hat", "THE END", "the cat sat"] {
            crash_test.pipe_input(&lines, "k", line)?;
        }
        crash_test.pipe(TestRecord::new(
            LINES,
            None::<&str>,
            Some(b"\xff".as_slice()),
        ));
        crash_test.pipe(TestRecord::new(LINES, None::<&str>, Some("hello")).id("line-1"));
        crash_test.pipe(TestRecord::new(LINES, None::<&str>, Some("hello")).id("line-1"));
        let summary = crash_test.run()?;
        assert!(summary.crashes.len() >= summary.batches);
        assert_eq!(summary.written.get(COUNTS), Some(&11));
        assert_eq!(summary.written.get("dsl-word-count.lines.DLT"), Some(&1));
    }
    Ok(())
}
