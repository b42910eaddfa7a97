//! Tables and stream-table joins through the test driver: what a topology author sees — inner
//! and left results, tombstones deleting rows, table updates that join nothing by themselves
//! and never change a result already sent, one partition's order, the envelope's causation,
//! and the table store staying read-only.

use crate::processor::ProcessError;
use crate::serdes::StringSerde;
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::{ProcessorContext, TableHandle, Topology, TypedRecord};

const CLICKS: &str = "clicks";
const USERS: &str = "users";

type Driver = TopologyTestDriver<Topology>;

fn users() -> TableHandle<String, String> {
    TableHandle::new("users", USERS, StringSerde, StringSerde)
}

/// Clicks joined with the users table: inner results to `inner`, left results to `left`.
fn topology() -> Topology {
    let users = users();
    Topology::builder()
        .add_source("clicks", &[CLICKS], StringSerde, StringSerde)
        .add_table(&users)
        .add_stream_table_join(
            "inner-join",
            &users,
            |_user: &String, page: &String, name: &String| Some(format!("{page} by {name}")),
            &["clicks"],
        )
        .add_stream_table_left_join(
            "left-join",
            &users,
            |_user: &String, page: &String, name: Option<&String>| {
                Some(format!("{page} by {}", name.map_or("?", String::as_str)))
            },
            &["clicks"],
        )
        .add_sink("inner", "inner", StringSerde, StringSerde, &["inner-join"])
        .add_sink("left", "left", StringSerde, StringSerde, &["left-join"])
        .build()
        .expect("valid topology")
}

fn driver() -> Driver {
    TopologyTestDriver::new(topology()).expect("driver")
}

fn row(d: &mut Driver, user: &str, name: Option<&str>) {
    d.pipe_table(
        &users(),
        &user.to_string(),
        name.map(str::to_string).as_ref(),
    )
    .expect("pipe table");
}

fn click(d: &mut Driver, user: &str, page: &str) {
    d.pipe(TestRecord::new(CLICKS, Some(user), Some(page)))
        .expect("pipe click");
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
fn inner_joins_only_keys_in_the_table_and_left_joins_every_stream_record() {
    let mut d = driver();
    row(&mut d, "ann", Some("Ann"));
    click(&mut d, "ann", "/home");
    click(&mut d, "bob", "/cart");
    assert_eq!(texts(&mut d, "inner"), pairs(&[("ann", "/home by Ann")]));
    assert_eq!(
        texts(&mut d, "left"),
        pairs(&[("ann", "/home by Ann"), ("bob", "/cart by ?")])
    );
    assert_eq!(
        d.table_get(&users(), &"ann".into()).expect("get"),
        Some("Ann".into())
    );
    // Table records reach no node: nothing went to a DLT, and the handler saw two records.
    assert!(d.read_raw_output("users.DLT").is_empty());
    assert!(d.read_raw_output("clicks.DLT").is_empty());
    assert_eq!(d.summary().table_updates, 1);
}

#[test]
fn a_tombstone_deletes_the_row_for_later_stream_records() {
    let mut d = driver();
    row(&mut d, "ann", Some("Ann"));
    click(&mut d, "ann", "/a");
    row(&mut d, "ann", None);
    click(&mut d, "ann", "/b");
    assert_eq!(d.table_get(&users(), &"ann".into()).expect("get"), None);
    assert_eq!(texts(&mut d, "inner"), pairs(&[("ann", "/a by Ann")]));
    assert_eq!(
        texts(&mut d, "left"),
        pairs(&[("ann", "/a by Ann"), ("ann", "/b by ?")])
    );
}

#[test]
fn a_table_update_joins_nothing_and_leaves_results_already_sent() {
    let mut d = driver();
    click(&mut d, "ann", "/early");
    row(&mut d, "ann", Some("Ann"));
    row(&mut d, "ann", Some("Ann B."));
    // Only the stream side triggers output: the two updates produced nothing, and the early
    // click's left result stays what it was when it was processed.
    assert!(texts(&mut d, "inner").is_empty());
    assert_eq!(texts(&mut d, "left"), pairs(&[("ann", "/early by ?")]));
    click(&mut d, "ann", "/late");
    assert_eq!(texts(&mut d, "inner"), pairs(&[("ann", "/late by Ann B.")]));
    assert_eq!(texts(&mut d, "left"), pairs(&[("ann", "/late by Ann B.")]));
}

#[test]
fn one_partition_interleaved_joins_each_click_with_the_row_current_at_its_position() {
    let mut d = driver();
    // Per partition, table rows and clicks in a known order; partitions are separate tasks
    // with separate tables.
    let steps: &[(i32, &str, &str, Option<&str>)] = &[
        (0, "row", "ann", Some("A1")),
        (1, "row", "ann", Some("other partition")),
        (0, "click", "ann", Some("/1")),
        (0, "row", "ann", Some("A2")),
        (0, "click", "ann", Some("/2")),
        (1, "click", "ann", Some("/x")),
        (0, "click", "ann", Some("/3")),
        (0, "row", "ann", None),
        (0, "click", "ann", Some("/4")),
        (0, "row", "ann", Some("A3")),
        (0, "click", "ann", Some("/5")),
    ];
    for (p, what, key, value) in steps {
        let topic = if *what == "row" { USERS } else { CLICKS };
        d.pipe(TestRecord::new(topic, Some(*key), *value).partition(*p))
            .expect("pipe");
    }
    let out: Vec<(i32, String)> = d
        .read_raw_output("left")
        .iter()
        .map(|r| (r.partition.unwrap_or(-1), r.value_text()))
        .collect();
    let values: Vec<&str> = out.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        values,
        vec![
            "/1 by A1",
            "/2 by A2",
            "/x by other partition",
            "/3 by A2",
            "/4 by ?",
            "/5 by A3"
        ]
    );
    let inner: Vec<String> = texts(&mut d, "inner").into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        inner,
        vec![
            "/1 by A1",
            "/2 by A2",
            "/x by other partition",
            "/3 by A2",
            "/5 by A3"
        ]
    );
}

#[test]
fn results_carry_the_envelope_with_the_stream_record_as_cause() {
    let mut d = driver();
    row(&mut d, "ann", Some("Ann"));
    d.pipe(
        TestRecord::new(CLICKS, Some("ann"), Some("/home"))
            .id("click-1")
            .header("correlation_id", "session-9")
            .timestamp(1_234),
    )
    .expect("pipe");
    let out = d.read_raw_output("inner");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header("causation_id"), Some("click-1"));
    assert_eq!(out[0].header("correlation_id"), Some("session-9"));
    assert!(out[0].header("id").is_some_and(|id| id != "click-1"));
    assert_eq!(out[0].timestamp, Some(1_234));
}

#[test]
fn stream_records_without_key_or_value_give_no_result_and_no_dead_letter() {
    let mut d = driver();
    row(&mut d, "ann", Some("Ann"));
    d.pipe(TestRecord::new(CLICKS, None::<&str>, Some("/nokey")))
        .expect("pipe");
    d.pipe(TestRecord::new(CLICKS, Some("ann"), None::<&str>))
        .expect("pipe");
    // A table record without a key cannot be a row: skipped, the table unchanged.
    d.pipe(TestRecord::new(USERS, None::<&str>, Some("Nobody")))
        .expect("pipe");
    assert!(texts(&mut d, "inner").is_empty());
    assert!(texts(&mut d, "left").is_empty());
    assert!(d.read_raw_output("clicks.DLT").is_empty());
    assert_eq!(
        d.table_get(&users(), &"ann".into()).expect("get"),
        Some("Ann".into())
    );
}

#[test]
fn a_processor_can_read_an_attached_table_but_not_write_it() {
    let users = users();
    let (read, write) = (users.clone(), users.clone());
    let reader = move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                       r: TypedRecord<String, String>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let name = ctx.store(read.store())?.get(&key)?;
        ctx.forward(TypedRecord::new(Some(key), name));
        Ok(())
    };
    let writer = move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                       r: TypedRecord<String, String>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        ctx.store(write.store())?
            .put(&key, &"overwritten".to_string())
    };
    let topology = Topology::builder()
        .add_source("clicks", &[CLICKS], StringSerde, StringSerde)
        .add_source("edits", &["edits"], StringSerde, StringSerde)
        .add_table(&users)
        .add_processor("read", reader, &["clicks"])
        .add_processor("write", writer, &["edits"])
        .attach_table(&users, &["read", "write"])
        .add_sink("out", "names", StringSerde, StringSerde, &["read"])
        .build()
        .expect("valid topology");
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe_table(&users, &"ann".to_string(), Some(&"Ann".to_string()))
        .expect("pipe");
    click(&mut d, "ann", "/home");
    d.pipe(TestRecord::new("edits", Some("ann"), Some("x")))
        .expect("pipe");
    assert_eq!(texts(&mut d, "names"), pairs(&[("ann", "Ann")]));
    let dead = d.read_raw_output("edits.DLT");
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .dlt_reason()
            .is_some_and(|r| r.contains("is a table")),
        "{:?}",
        dead[0].dlt_reason()
    );
    assert_eq!(
        d.table_get(&users, &"ann".into()).expect("get"),
        Some("Ann".into())
    );
}

#[test]
fn build_names_a_join_on_a_table_not_added_and_a_table_topic_read_by_a_source() {
    let users = users();
    let err = Topology::builder()
        .add_source("clicks", &[CLICKS], StringSerde, StringSerde)
        .add_source("raw-users", &[USERS], StringSerde, StringSerde)
        .add_stream_table_join(
            "j",
            &users,
            |_: &String, v: &String, _: &String| Some(v.clone()),
            &["clicks"],
        )
        .add_table(&users)
        .build()
        .expect_err("invalid");
    let text = err.to_string();
    for part in [
        "join \"j\" reads table \"users\"",
        "topic \"users\" is read by a source and by table \"users\"",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
}

#[test]
fn a_table_has_no_changelog_of_its_own() {
    let t = topology();
    let mut config = crate::config::Config::default();
    config.app.id = "app".into();
    let names: Vec<String> = t
        .internal_topics(&config, 4)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(!names.iter().any(|n| n.contains("users")), "{names:?}");
    assert_eq!(t.table_topics(), vec![USERS.to_string()]);
    assert_eq!(t.source_topics(), vec![CLICKS.to_string()]);
}
