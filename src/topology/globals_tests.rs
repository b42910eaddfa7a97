//! Global tables and stream-global-table joins through the test driver: the key extractor
//! choosing the row, inner and left results, tombstones deleting rows, an extractor with no
//! key, the stream key, timestamp and causation on results, and the builder's refusals.

use crate::serdes::StringSerde;
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::{GlobalTableHandle, ProcessorContext, TableHandle, Topology, TypedRecord};

const ORDERS: &str = "orders";
const COUNTRIES: &str = "countries";

type Driver = TopologyTestDriver<Topology>;

fn countries() -> GlobalTableHandle<String, String> {
    GlobalTableHandle::new("countries", COUNTRIES, StringSerde, StringSerde)
}

/// The country code of an order's value `code:item`; none for a value without a colon.
#[allow(clippy::ptr_arg)] // the key extractor takes the stream key and value types
fn code(_order: Option<&String>, value: &String) -> Option<String> {
    value.split_once(':').map(|(c, _)| c.to_string())
}

/// Orders (keyed by order id, valued `code:item`) joined with the countries by code: inner
/// results to `inner`, left results to `left`.
fn topology() -> Topology {
    let countries = countries();
    Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_global_table(&countries)
        .add_stream_global_table_join(
            "inner-join",
            &countries,
            code,
            |_order: Option<&String>, value: &String, name: &String| {
                Some(format!("{value} to {name}"))
            },
            &["orders"],
        )
        .add_stream_global_table_left_join(
            "left-join",
            &countries,
            code,
            |_order: Option<&String>, value: &String, name: Option<&String>| {
                Some(format!("{value} to {}", name.map_or("?", String::as_str)))
            },
            &["orders"],
        )
        .add_sink("inner", "inner", StringSerde, StringSerde, &["inner-join"])
        .add_sink("left", "left", StringSerde, StringSerde, &["left-join"])
        .build()
        .expect("valid topology")
}

fn driver() -> Driver {
    TopologyTestDriver::new(topology()).expect("driver")
}

fn row(d: &mut Driver, code: &str, name: Option<&str>) {
    d.pipe_global(
        &countries(),
        &code.to_string(),
        name.map(str::to_string).as_ref(),
    )
    .expect("pipe global");
}

fn order(d: &mut Driver, id: &str, value: &str) {
    d.pipe(TestRecord::new(ORDERS, Some(id), Some(value)).id(id))
        .expect("pipe order");
}

fn texts(d: &mut Driver, topic: &str) -> Vec<(String, String)> {
    d.read_raw_output(topic)
        .iter()
        .map(|r| (r.key_text(), r.value_text()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_key_extractor_picks_the_row_inner_drops_a_miss_and_left_joins_none() {
    let mut d = driver();
    row(&mut d, "fr", Some("France"));
    row(&mut d, "de", Some("Germany"));
    order(&mut d, "o-1", "fr:book");
    order(&mut d, "o-2", "de:pen");
    order(&mut d, "o-3", "xx:cup");
    assert_eq!(
        texts(&mut d, "inner"),
        pairs(&[("o-1", "fr:book to France"), ("o-2", "de:pen to Germany")])
    );
    assert_eq!(
        texts(&mut d, "left"),
        pairs(&[
            ("o-1", "fr:book to France"),
            ("o-2", "de:pen to Germany"),
            ("o-3", "xx:cup to ?")
        ])
    );
    assert_eq!(
        d.global_get(&countries(), &"fr".to_string()).expect("get"),
        Some("France".to_string())
    );
}

#[test]
fn an_update_is_seen_by_later_records_and_a_tombstone_deletes_the_row() {
    let mut d = driver();
    row(&mut d, "fr", Some("France"));
    order(&mut d, "o-1", "fr:a");
    row(&mut d, "fr", Some("République française"));
    order(&mut d, "o-2", "fr:b");
    row(&mut d, "fr", None);
    assert_eq!(
        d.global_get(&countries(), &"fr".to_string()).expect("get"),
        None
    );
    order(&mut d, "o-3", "fr:c");
    assert_eq!(
        texts(&mut d, "inner"),
        pairs(&[
            ("o-1", "fr:a to France"),
            ("o-2", "fr:b to République française")
        ]),
        "a result already sent does not change; a deleted row joins nothing"
    );
    assert_eq!(
        texts(&mut d, "left"),
        pairs(&[
            ("o-1", "fr:a to France"),
            ("o-2", "fr:b to République française"),
            ("o-3", "fr:c to ?")
        ])
    );
}

#[test]
fn no_key_from_the_extractor_drops_the_record_and_a_keyless_record_still_joins() {
    let mut d = driver();
    row(&mut d, "fr", Some("France"));
    // A key but no table key: both joins drop it (Kafka Streams' rule).
    order(&mut d, "o-1", "no colon here");
    assert!(texts(&mut d, "inner").is_empty());
    assert!(texts(&mut d, "left").is_empty());
    // A stream record without a value joins nothing, in either join.
    d.pipe(TestRecord::new(ORDERS, Some("o-2"), None::<&str>))
        .expect("pipe tombstone");
    assert!(texts(&mut d, "inner").is_empty());
    assert!(texts(&mut d, "left").is_empty());
    // A keyless record is joined by the table key its value names (KIP-962), its result
    // keyless; with no table key the left join still joins it with `None`.
    d.pipe(TestRecord::new(ORDERS, None::<&str>, Some("fr:x")))
        .expect("pipe keyless");
    d.pipe(TestRecord::new(ORDERS, None::<&str>, Some("nothing")))
        .expect("pipe keyless without a table key");
    let keyless = |d: &mut Driver, topic: &str| -> Vec<(Option<Vec<u8>>, String)> {
        d.read_raw_output(topic)
            .iter()
            .map(|r| (r.key.clone(), r.value_text()))
            .collect()
    };
    assert_eq!(
        keyless(&mut d, "inner"),
        vec![(None, "fr:x to France".to_string())]
    );
    assert_eq!(
        keyless(&mut d, "left"),
        vec![
            (None, "fr:x to France".to_string()),
            (None, "nothing to ?".to_string())
        ]
    );
}

#[test]
fn results_keep_the_stream_key_and_timestamp_and_are_caused_by_the_stream_record() {
    let mut d = driver();
    row(&mut d, "fr", Some("France"));
    d.pipe(
        TestRecord::new(ORDERS, Some("o-9"), Some("fr:z"))
            .id("order-event-9")
            .timestamp(1_700_000_123_000),
    )
    .expect("pipe");
    let out = d.read_raw_output("inner");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key_text(), "o-9");
    assert_eq!(out[0].timestamp, Some(1_700_000_123_000));
    assert_eq!(out[0].header("causation_id"), Some("order-event-9"));
}

#[test]
fn the_builder_names_global_table_mistakes_and_the_driver_refuses_an_unknown_one() {
    let countries = countries();
    let noop = |_: &mut ProcessorContext<'_, '_, '_, String, String>,
                _: TypedRecord<String, String>| Ok(());
    // A join of a global table not added, a global table read by a source too, a global table
    // named like a table, one added twice.
    let users = TableHandle::new("countries", "users", StringSerde, StringSerde);
    let err = Topology::builder()
        .add_source("orders", &[ORDERS, COUNTRIES], StringSerde, StringSerde)
        .add_processor("p", noop, &["orders"])
        .add_stream_global_table_join(
            "j",
            &GlobalTableHandle::new("other", "other", StringSerde, StringSerde),
            code,
            |_: Option<&String>, v: &String, _: &String| Some(v.clone()),
            &["orders"],
        )
        .add_table(&users)
        .add_global_table(&countries)
        .add_global_table(&countries)
        .build()
        .expect_err("invalid");
    let text = err.to_string();
    for part in [
        "join \"j\" reads global table \"other\"",
        "topic \"countries\" of global table \"countries\" is also read by a source",
        "global table \"countries\" has the name of a store or table",
        "global table \"countries\" is added twice",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    // The driver of a topology without that global table refuses to pipe into it.
    let plain = Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_processor("p", noop, &["orders"])
        .build()
        .expect("valid");
    let mut d = TopologyTestDriver::new(plain).expect("driver");
    let err = d
        .pipe_global(&countries, &"fr".to_string(), Some(&"France".to_string()))
        .expect_err("not part of the topology");
    assert!(
        err.to_string().contains("not part of the topology"),
        "{err}"
    );
}
