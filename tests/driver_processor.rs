//! The test driver runs today's plain processors too (no topology, no broker): the shipped
//! counting processor, with its default store, dedup and dead letters.

use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow_verify::count::{CountOutput, CountProcessor, CountState};

#[test]
fn the_counting_processor_counts_dedups_and_dead_letters_without_a_broker() {
    let mut d = TopologyTestDriver::new(CountProcessor::new("counts")).expect("driver");
    for (key, value, id) in [
        ("k", "5", "1"),
        ("k", "7", "2"),
        ("k", "7", "2"),
        ("j", "x", "3"),
    ] {
        d.pipe(TestRecord::new("in", Some(key), Some(value)).id(id))
            .expect("pipe");
    }
    let out = d
        .read_output("counts", &StringSerde, &JsonSerde::<CountOutput>::new())
        .expect("typed output");
    let counts: Vec<(String, i64)> = out
        .into_iter()
        .filter_map(|(k, v)| Some((k?, v?.count)))
        .collect();
    assert_eq!(counts, vec![("k".into(), 1), ("k".into(), 2)]);
    assert_eq!(d.summary().dedup_hits, 1);
    let state = d
        .state_get(b"k")
        .expect("state")
        .and_then(|b| CountState::decode(&b));
    assert_eq!(state, Some(CountState { count: 2, sum: 12 }));
    let dead = d.read_raw_output("in.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
}
