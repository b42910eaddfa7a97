//! Table-table joins through the test driver: what a topology author sees — inner, left and
//! outer results as either side changes, tombstones where a result disappears (and nowhere
//! else), the result store holding the final table, timestamps and causation, arrival order
//! between the sides, empty and huge rows, bad input in the DLT, a random workload against a
//! model, `kill -9` at every batch boundary, and the builder's refusals.

use std::collections::BTreeMap;

use crate::processor::StoreHandle;
use crate::serdes::StringSerde;
use crate::testing::{OutputRecord, TestRecord, TopologyTestDriver};
use crate::topology::{JoinKind, TableJoin, Topology};

const LEFT: &str = "users";
const RIGHT: &str = "addresses";
const OUT: &str = "profiles";

type Driver = TopologyTestDriver<Topology>;
type Join = TableJoin<String, String, String, String>;
/// A change of the result table: a key and its new row, `None` when it was deleted.
type Change = (String, Option<String>);

fn result_store() -> StoreHandle<String, String> {
    StoreHandle::new("profiles", StringSerde, StringSerde)
}

fn side(name: &str) -> StoreHandle<String, String> {
    StoreHandle::new(name, StringSerde, StringSerde)
}

fn or_dash(v: Option<&String>) -> &str {
    v.map_or("-", String::as_str)
}

fn join(kind: JoinKind) -> Join {
    let (l, r, out) = (side("users-rows"), side("addresses-rows"), result_store());
    match kind {
        JoinKind::Inner => TableJoin::inner(l, r, out, |_k, l: &String, r: &String| {
            Some(format!("{l}+{r}"))
        }),
        JoinKind::Left => TableJoin::left(l, r, out, |_k, l: &String, r: Option<&String>| {
            Some(format!("{l}+{}", or_dash(r)))
        }),
        JoinKind::Outer => {
            TableJoin::outer(l, r, out, |_k, l: Option<&String>, r: Option<&String>| {
                Some(format!("{}+{}", or_dash(l), or_dash(r)))
            })
        }
    }
}

fn topology(kind: JoinKind) -> Topology {
    Topology::builder()
        .add_source("users", &[LEFT], StringSerde, StringSerde)
        .add_source("addresses", &[RIGHT], StringSerde, StringSerde)
        .add_table_table_join("profile", join(kind), &["users"], &["addresses"])
        .add_sink("out", OUT, StringSerde, StringSerde, &["profile"])
        .build()
        .expect("valid topology")
}

fn driver(kind: JoinKind) -> Driver {
    TopologyTestDriver::new(topology(kind)).expect("driver")
}

/// Pipes the row `value` (`None`: a tombstone) of `key` at `at` to `topic`, with id `id`.
fn row(d: &mut Driver, topic: &str, key: &str, value: Option<&str>, at: i64, id: &str) {
    d.pipe(
        TestRecord::new(topic, Some(key), value)
            .timestamp(at)
            .id(id),
    )
    .expect("pipe");
}

/// The output's changes as (key, value or None for a tombstone).
fn changes(out: &[OutputRecord]) -> Vec<(String, Option<String>)> {
    out.iter()
        .map(|r| (r.key_text(), r.value.as_ref().map(|_| r.value_text())))
        .collect()
}

fn set(k: &str, v: &str) -> (String, Option<String>) {
    (k.to_string(), Some(v.to_string()))
}

fn gone(k: &str) -> (String, Option<String>) {
    (k.to_string(), None)
}

fn final_table(d: &mut Driver) -> Vec<(String, String)> {
    d.store_entries(&result_store()).expect("result store")
}

#[test]
fn inner_join_has_a_row_while_both_sides_do_and_a_tombstone_when_either_goes() {
    let mut d = driver(JoinKind::Inner);
    row(&mut d, LEFT, "u1", Some("ann"), 1, "l1");
    assert!(d.read_raw_output(OUT).is_empty(), "one side only: no row");
    row(&mut d, RIGHT, "u1", Some("paris"), 2, "r1");
    row(&mut d, LEFT, "u1", Some("anne"), 3, "l2"); // an update of the left side
    row(&mut d, RIGHT, "u1", Some("lyon"), 4, "r2"); // of the right side
    row(&mut d, RIGHT, "u1", None, 5, "r3"); // the right row deleted: the result goes
    row(&mut d, LEFT, "u1", None, 6, "l3"); // the left one too: no result was left
    row(&mut d, RIGHT, "u1", Some("nice"), 7, "r4"); // no left row: nothing
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![
            set("u1", "ann+paris"),
            set("u1", "anne+paris"),
            set("u1", "anne+lyon"),
            gone("u1"),
        ]
    );
    assert!(final_table(&mut d).is_empty());
    row(&mut d, LEFT, "u1", Some("bea"), 8, "l4");
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![set("u1", "bea+nice")]
    );
    assert_eq!(final_table(&mut d), vec![("u1".into(), "bea+nice".into())]);
}

#[test]
fn left_join_keeps_the_left_row_without_a_right_one_and_goes_only_with_the_left_row() {
    let mut d = driver(JoinKind::Left);
    row(&mut d, RIGHT, "u1", Some("paris"), 1, "r1"); // no left row: nothing
    assert!(d.read_raw_output(OUT).is_empty());
    row(&mut d, LEFT, "u1", Some("ann"), 2, "l1");
    row(&mut d, RIGHT, "u1", None, 3, "r2"); // the right row goes: back to ann alone
    row(&mut d, RIGHT, "u1", None, 4, "r3"); // a tombstone of a row already gone
    row(&mut d, LEFT, "u1", None, 5, "l2"); // the left row goes: the result goes
    row(&mut d, LEFT, "u1", None, 6, "l3"); // again: nothing left to delete
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![
            set("u1", "ann+paris"),
            set("u1", "ann+-"),
            set("u1", "ann+-"), // recomputed, unchanged: emitted again (Kafka Streams does)
            gone("u1"),
        ]
    );
    assert!(final_table(&mut d).is_empty());
}

#[test]
fn outer_join_has_a_row_while_either_side_does_and_a_tombstone_when_both_are_gone() {
    let mut d = driver(JoinKind::Outer);
    row(&mut d, RIGHT, "u1", Some("paris"), 1, "r1");
    row(&mut d, LEFT, "u1", Some("ann"), 2, "l1");
    row(&mut d, LEFT, "u1", None, 3, "l2");
    row(&mut d, RIGHT, "u1", None, 4, "r2");
    row(&mut d, LEFT, "u2", None, 5, "l3"); // a key never seen: nothing
    row(&mut d, LEFT, "u2", Some("bob"), 6, "l4");
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![
            set("u1", "-+paris"),
            set("u1", "ann+paris"),
            set("u1", "-+paris"),
            gone("u1"),
            set("u2", "bob+-"),
        ]
    );
    assert_eq!(final_table(&mut d), vec![("u2".into(), "bob+-".into())]);
}

#[test]
fn results_carry_the_later_rows_timestamp_and_the_triggering_update_as_cause() {
    let mut d = driver(JoinKind::Inner);
    // The right row arrives first and is stamped later than the left one that follows it.
    row(&mut d, RIGHT, "u1", Some("paris"), 9_000, "r1");
    row(&mut d, LEFT, "u1", Some("ann"), 2_000, "l1");
    row(&mut d, LEFT, "u1", Some("anne"), 12_000, "l2");
    row(&mut d, RIGHT, "u1", None, 10_000, "r2");
    let out = d.read_raw_output(OUT);
    let seen: Vec<(Option<String>, Option<i64>, Option<&str>)> = out
        .iter()
        .map(|r| {
            let v = r.value.as_ref().map(|_| r.value_text());
            (v, r.timestamp, r.header("causation_id"))
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("ann+paris".into()), Some(9_000), Some("l1")),
            (Some("anne+paris".into()), Some(12_000), Some("l2")),
            // The tombstone too: the later of the right update (10 s) and the left row (12 s).
            (None, Some(12_000), Some("r2")),
        ]
    );
}

#[test]
fn keys_are_joined_apart_and_the_result_store_is_the_fold_of_the_change_stream() {
    let mut d = driver(JoinKind::Left);
    let steps: [(&str, &str, Option<&str>); 9] = [
        (LEFT, "a", Some("1")),
        (LEFT, "b", Some("2")),
        (RIGHT, "b", Some("x")),
        (RIGHT, "c", Some("y")),
        (LEFT, "c", Some("3")),
        (LEFT, "a", None),
        (RIGHT, "c", Some("z")),
        (LEFT, "d", Some("4")),
        (RIGHT, "d", None),
    ];
    for (i, (topic, key, value)) in steps.into_iter().enumerate() {
        row(&mut d, topic, key, value, i as i64, &format!("m{i}"));
    }
    let mut folded = BTreeMap::new();
    for (k, v) in changes(&d.read_raw_output(OUT)) {
        match v {
            Some(v) => folded.insert(k, v),
            None => folded.remove(&k),
        };
    }
    let expected = vec![
        ("b".to_string(), "2+x".to_string()),
        ("c".to_string(), "3+z".to_string()),
        ("d".to_string(), "4+-".to_string()),
    ];
    assert_eq!(folded.into_iter().collect::<Vec<_>>(), expected);
    assert_eq!(final_table(&mut d), expected);
}

#[test]
fn empty_and_huge_rows_are_rows_like_any_other() {
    let mut d = driver(JoinKind::Inner);
    let huge = "h".repeat(4 << 20);
    row(&mut d, LEFT, "u1", Some(""), 1, "l1");
    row(&mut d, RIGHT, "u1", Some(""), 2, "r1");
    row(&mut d, RIGHT, "u1", Some(&huge), 3, "r2");
    row(&mut d, LEFT, "", Some("empty key"), 4, "l2");
    row(&mut d, RIGHT, "", Some(""), 5, "r3");
    let out = changes(&d.read_raw_output(OUT));
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], set("u1", "+"));
    assert_eq!(out[1], set("u1", &format!("+{huge}")));
    assert_eq!(out[2], set("", "empty key+"));
    let table = final_table(&mut d);
    assert_eq!(table[0], (String::new(), "empty key+".to_string()));
    assert_eq!(table[1].1.len(), huge.len() + 1);
}

#[test]
fn an_update_without_a_key_is_dropped_and_an_undecodable_one_is_dead_lettered() {
    let mut d = driver(JoinKind::Outer);
    d.pipe(TestRecord::new(LEFT, None::<&str>, Some("no key")).id("k0"))
        .expect("pipe");
    // Not UTF-8: the source cannot read the row.
    d.pipe(TestRecord::new(LEFT, Some("u1"), Some(&[0xff, 0xfe][..])).id("bad"))
        .expect("pipe");
    row(&mut d, RIGHT, "u1", Some("paris"), 3, "r1");
    assert_eq!(changes(&d.read_raw_output(OUT)), vec![set("u1", "-+paris")]);
    let dead = d.dead_letters(LEFT);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].class, crate::retry::dlt::DltClass::Permanent);
    assert!(dead[0].reason.contains("users"), "{}", dead[0].reason);
}

#[test]
fn each_partition_joins_its_own_rows() {
    let mut d = driver(JoinKind::Inner);
    let at =
        |topic: &str, v: &str, p: i32| TestRecord::new(topic, Some("u1"), Some(v)).partition(p);
    d.pipe(at(LEFT, "ann", 0)).expect("pipe");
    d.pipe(at(RIGHT, "lyon", 1)).expect("pipe"); // the same key on another partition
    assert!(d.read_raw_output(OUT).is_empty());
    d.pipe(at(RIGHT, "paris", 0)).expect("pipe");
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![set("u1", "ann+paris")]
    );
}

/// A small deterministic generator (the workload must be the same on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// The model: each side's rows and the results after every update, computed from the
/// workload alone (no store, no join node).
fn model(
    kind: JoinKind,
    updates: &[(bool, String, Option<String>)],
) -> (Vec<Change>, BTreeMap<String, String>) {
    let (mut left, mut right) = (BTreeMap::new(), BTreeMap::new());
    let mut results: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for (is_left, key, value) in updates {
        let side = if *is_left { &mut left } else { &mut right };
        match value {
            Some(v) => side.insert(key.clone(), v.clone()),
            None => side.remove(key),
        };
        let (l, r) = (left.get(key), right.get(key));
        let new = match (kind, l, r) {
            (JoinKind::Inner, Some(l), Some(r)) => Some(format!("{l}+{r}")),
            (JoinKind::Left, Some(l), r) => Some(format!("{l}+{}", or_dash(r))),
            (JoinKind::Outer, l, r) if l.is_some() || r.is_some() => {
                Some(format!("{}+{}", or_dash(l), or_dash(r)))
            }
            _ => None,
        };
        match new {
            Some(v) => {
                results.insert(key.clone(), v.clone());
                out.push((key.clone(), Some(v)));
            }
            None => {
                if results.remove(key).is_some() {
                    out.push((key.clone(), None));
                }
            }
        }
    }
    (out, results)
}

fn workload(seed: u64, n: usize) -> Vec<(bool, String, Option<String>)> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|i| {
            let is_left = rng.next(2) == 0;
            let key = format!("k{}", rng.next(7));
            let value = (rng.next(3) != 0).then(|| format!("v{i}"));
            (is_left, key, value)
        })
        .collect()
}

#[test]
fn a_random_workload_gives_the_models_changes_and_final_table_for_every_kind() {
    for kind in [JoinKind::Inner, JoinKind::Left, JoinKind::Outer] {
        for seed in 1..=5 {
            let updates = workload(seed, 300);
            let mut d = driver(kind);
            for (i, (is_left, key, value)) in updates.iter().enumerate() {
                let topic = if *is_left { LEFT } else { RIGHT };
                row(
                    &mut d,
                    topic,
                    key,
                    value.as_deref(),
                    i as i64,
                    &format!("m{i}"),
                );
            }
            let (expected_out, expected_table) = model(kind, &updates);
            assert_eq!(
                changes(&d.read_raw_output(OUT)),
                expected_out,
                "{kind:?} seed {seed}"
            );
            assert_eq!(
                final_table(&mut d),
                expected_table.into_iter().collect::<Vec<_>>(),
                "{kind:?} seed {seed}"
            );
        }
    }
}

#[test]
fn kill_9_at_every_batch_boundary_gives_the_crash_free_results_and_table() {
    for kind in [JoinKind::Inner, JoinKind::Left, JoinKind::Outer] {
        let mut crash_test = TopologyTestDriver::with_crashes(7, move || {
            Ok::<_, std::convert::Infallible>(topology(kind))
        })
        .max_crashes(24);
        for (i, (is_left, key, value)) in workload(11, 40).into_iter().enumerate() {
            let topic = if is_left { LEFT } else { RIGHT };
            crash_test.pipe(
                TestRecord::new(topic, Some(key.as_str()), value.as_deref())
                    .timestamp(i as i64)
                    .id(&format!("m{i}")),
            );
        }
        let summary = crash_test
            .run()
            .expect("every crash matches the crash-free run");
        assert!(
            summary.written.get(OUT).copied().unwrap_or(0) > 5,
            "{summary:?}"
        );
        assert!(!summary.crashes.is_empty());
    }
}

#[test]
fn the_builder_refuses_shared_stores_and_changelogs_all_three() {
    let shared = TableJoin::inner(
        side("rows"),
        side("rows"),
        result_store(),
        |_k, l: &String, r: &String| Some(format!("{l}{r}")),
    );
    let err = Topology::builder()
        .add_source("users", &[LEFT], StringSerde, StringSerde)
        .add_source("addresses", &[RIGHT], StringSerde, StringSerde)
        .add_table_table_join("profile", shared, &["users"], &["addresses"])
        .build()
        .expect_err("two sides in one store");
    assert!(err.to_string().contains("each needs its own"), "{err}");

    let t = topology(JoinKind::Outer);
    assert_eq!(
        t.changelog_topics("app"),
        [
            "app-state-changelog",
            "app-users-rows-changelog",
            "app-addresses-rows-changelog",
            "app-profiles-changelog"
        ]
    );
    // Both sides and the join are one sub-topology: one task per partition, aligned.
    assert_eq!(t.sub_topologies().len(), 1);
}

#[test]
fn a_table_source_forwards_its_topics_rows_and_is_declared_compacted() {
    use crate::topology::TableHandle;
    let users = TableHandle::new("users", LEFT, StringSerde, StringSerde);
    let addresses = TableHandle::new("addresses", RIGHT, StringSerde, StringSerde);
    let t = Topology::builder()
        .add_table_source("users", &users)
        .add_table_source("addresses", &addresses)
        .add_table_table_join("profile", join(JoinKind::Inner), &["users"], &["addresses"])
        .add_sink("out", OUT, StringSerde, StringSerde, &["profile"])
        .build()
        .expect("valid topology");
    let mut config = crate::config::Config::default();
    config.app.id = "app".into();
    let (specs, group) = t.topics(&config, 4);
    let policy = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.cleanup_policy.clone())
    };
    assert_eq!(policy(LEFT).as_deref(), Some("compact"));
    assert_eq!(policy(RIGHT).as_deref(), Some("compact"));
    assert_eq!(policy(OUT).as_deref(), Some("delete"));
    assert_eq!(policy("app-profiles-changelog").as_deref(), Some("compact"));
    // Both tables' topics are checked for co-partitioning with the rest.
    assert!(group.topics.contains(&LEFT.to_string()) && group.topics.contains(&RIGHT.to_string()));

    let mut d = TopologyTestDriver::new(t).expect("driver");
    row(&mut d, LEFT, "u1", Some("ann"), 1, "l1");
    row(&mut d, RIGHT, "u1", Some("paris"), 2, "r1");
    row(&mut d, LEFT, "u1", None, 3, "l2");
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![set("u1", "ann+paris"), gone("u1")]
    );

    let versioned = TableHandle::versioned(
        "prices",
        "prices",
        StringSerde,
        StringSerde,
        std::time::Duration::from_secs(1),
    );
    let err = Topology::builder()
        .add_table_source("prices", &versioned)
        .build()
        .expect_err("versioned");
    assert!(err.to_string().contains("is versioned"), "{err}");
}

/// The example of docs/tables-and-joins.md ("Table-table joins"), word for word.
#[test]
fn the_pages_example_chains_two_table_joins() -> Result<(), Box<dyn std::error::Error>> {
    use crate::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    use crate::serdes::I64Serde;

    // Each customer's name and city beside their order count: two compacted topics and an
    // aggregation, joined into tables.
    let builder = StreamsBuilder::new();
    let names = builder.table("customers", Consumed::with(StringSerde, StringSerde));
    let cities = builder.table("cities", Consumed::with(StringSerde, StringSerde));
    let orders = builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("order-counts"));
    let located = names.left_join(
        &cities,
        |name, city| format!("{name} in {}", city.map_or("?", String::as_str)),
        Materialized::with(StringSerde, StringSerde).named("located"),
    );
    let summaries = located.join(
        &orders,
        |who, n| format!("{who}: {n} orders"),
        Materialized::with(StringSerde, StringSerde).named("summaries"),
    );
    summaries
        .to_stream()
        .to("summaries", Produced::with(StringSerde, StringSerde));
    let store = summaries.store().clone();

    let mut d = TopologyTestDriver::new(builder.build()?)?;
    let c1 = "c1".to_string();
    d.pipe_input("orders", &StringSerde, &StringSerde, &c1, &"o-1".into())?; // no name: nothing
    d.pipe_input("customers", &StringSerde, &StringSerde, &c1, &"Ann".into())?;
    d.pipe_input("cities", &StringSerde, &StringSerde, &c1, &"Paris".into())?;
    d.pipe(TestRecord::new("customers", Some("c1"), None::<&str>))?; // Ann deleted
    let out = d.read_output("summaries", &StringSerde, &StringSerde)?;
    assert_eq!(
        out,
        vec![
            (Some(c1.clone()), Some("Ann in ?: 1 orders".to_string())),
            (Some(c1.clone()), Some("Ann in Paris: 1 orders".to_string())),
            (Some(c1.clone()), None), // the joined row is gone: a tombstone
        ]
    );
    assert_eq!(d.store_get(&store, &c1)?, None);
    Ok(())
}

#[test]
fn the_table_table_join_section_of_the_page_is_in_these_tests() {
    let page = include_str!("../../docs/tables-and-joins.md");
    let section = page
        .split("\n## Table-table joins\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the page has a Table-table joins section");
    crate::testing::assert_rust_blocks_are_in(
        "docs/tables-and-joins.md",
        section,
        "src/topology/table_joins_tests.rs",
        include_str!("table_joins_tests.rs"),
        1,
    );
}

mod dsl {
    //! The same joins written with the DSL: tables from aggregations, from `filter` and from
    //! compacted topics, joined into a table whose change stream a sink reads.

    use crate::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    use crate::serdes::{I64Serde, StringSerde};
    use crate::testing::{TestRecord, TopologyTestDriver};

    fn s(v: &str) -> String {
        v.to_string()
    }

    type Changes = Vec<(Option<String>, Option<String>)>;

    fn set(k: &str, v: &str) -> (Option<String>, Option<String>) {
        (Some(s(k)), Some(s(v)))
    }

    fn gone(k: &str) -> (Option<String>, Option<String>) {
        (Some(s(k)), None)
    }

    #[test]
    fn two_topic_tables_outer_joined_forward_every_change_and_keep_the_final_table() {
        let builder = StreamsBuilder::new();
        let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
        let addresses = builder.table("addresses", Consumed::with(StringSerde, StringSerde));
        let profiles = users.outer_join(
            &addresses,
            |name, city| {
                let or = |v: Option<&String>| v.cloned().unwrap_or_else(|| s("?"));
                format!("{}@{}", or(name), or(city))
            },
            Materialized::with(StringSerde, StringSerde).named("profiles"),
        );
        profiles
            .to_stream()
            .to("profiles", Produced::with(StringSerde, StringSerde));
        let store = profiles.store().clone();
        let topology = builder.build().expect("valid");
        // Joined with a table, each topic is read by a source, not materialized by the runtime.
        assert!(topology.table_topics().is_empty());
        assert_eq!(topology.source_topics(), ["users", "addresses"]);
        assert_eq!(
            topology.changelog_topics("app"),
            [
                "app-state-changelog",
                "app-profiles-left-rows-changelog",
                "app-profiles-right-rows-changelog",
                "app-profiles-changelog"
            ]
        );

        let mut d = TopologyTestDriver::new(topology).expect("driver");
        let put = |d: &mut TopologyTestDriver<_>, topic: &str, k: &str, v: Option<&str>| {
            d.pipe(TestRecord::new(topic, Some(k), v)).expect("pipe");
        };
        put(&mut d, "users", "u1", Some("ann"));
        put(&mut d, "addresses", "u2", Some("rome"));
        put(&mut d, "addresses", "u1", Some("paris"));
        put(&mut d, "users", "u1", None);
        put(&mut d, "addresses", "u1", None);
        put(&mut d, "addresses", "u3", None); // never there: nothing
        let out = d
            .read_output("profiles", &StringSerde, &StringSerde)
            .expect("read");
        let expected: Changes = vec![
            set("u1", "ann@?"),
            set("u2", "?@rome"),
            set("u1", "ann@paris"),
            set("u1", "?@paris"),
            gone("u1"),
        ];
        assert_eq!(out, expected);
        assert_eq!(
            d.store_entries(&store).expect("store"),
            vec![(s("u2"), s("?@rome"))]
        );
    }

    #[test]
    fn an_aggregation_left_joined_with_a_filtered_table_follows_both() {
        let builder = StreamsBuilder::new();
        let totals = builder
            .stream("payments", Consumed::with(StringSerde, I64Serde))
            .group_by_key()
            .reduce(
                |a, b| a + b,
                Materialized::with(StringSerde, I64Serde).named("totals"),
            );
        let vip = builder
            .stream("tiers", Consumed::with(StringSerde, StringSerde))
            .group_by_key()
            .reduce(
                |_, latest| latest.clone(),
                Materialized::with(StringSerde, StringSerde).named("tiers"),
            )
            .filter(
                |_, tier| tier == "vip",
                Materialized::with(StringSerde, StringSerde).named("vip"),
            );
        let labelled = totals.left_join(
            &vip,
            |total, tier| format!("{total}{}", if tier.is_some() { " (vip)" } else { "" }),
            Materialized::with(StringSerde, StringSerde).named("labelled"),
        );
        labelled
            .to_stream()
            .to("labelled", Produced::with(StringSerde, StringSerde));
        let store = labelled.store().clone();
        let mut d = TopologyTestDriver::new(builder.build().expect("valid")).expect("driver");
        let ann = s("ann");
        d.pipe_input("payments", &StringSerde, &I64Serde, &ann, &10)
            .expect("pipe");
        d.pipe_input("tiers", &StringSerde, &StringSerde, &ann, &s("vip"))
            .expect("pipe");
        d.pipe_input("payments", &StringSerde, &I64Serde, &ann, &5)
            .expect("pipe");
        // No longer vip: the filtered table forwards a tombstone, the join drops the label.
        d.pipe_input("tiers", &StringSerde, &StringSerde, &ann, &s("basic"))
            .expect("pipe");
        d.pipe_input("tiers", &StringSerde, &StringSerde, &s("bob"), &s("vip"))
            .expect("pipe"); // no total for bob: nothing in a left join
        let out = d
            .read_output("labelled", &StringSerde, &StringSerde)
            .expect("read");
        let expected: Changes = vec![
            set("ann", "10"),
            set("ann", "10 (vip)"),
            set("ann", "15 (vip)"),
            set("ann", "15"),
        ];
        assert_eq!(out, expected);
        assert_eq!(
            d.store_entries(&store).expect("store"),
            vec![(s("ann"), s("15"))]
        );
    }

    #[test]
    fn the_builder_refuses_a_stream_lookup_of_a_joined_topic_table_and_a_versioned_one() {
        let builder = StreamsBuilder::new();
        let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
        let other = builder.table("addresses", Consumed::with(StringSerde, StringSerde));
        builder
            .stream("views", Consumed::with(StringSerde, StringSerde))
            .join_table(&users, |v, n| format!("{v}{n}"))
            .to("out", Produced::with(StringSerde, StringSerde));
        users.join(
            &other,
            |a, b| format!("{a}{b}"),
            Materialized::with(StringSerde, StringSerde),
        );
        let err = builder
            .build()
            .expect_err("a looked-up table read as updates");
        assert!(
            err.to_string()
                .contains("table users is also joined with a table"),
            "{err}"
        );

        let builder = StreamsBuilder::new();
        let prices = builder.versioned_table(
            "prices",
            Consumed::with(StringSerde, StringSerde),
            std::time::Duration::from_secs(60),
        );
        let other = builder.table("items", Consumed::with(StringSerde, StringSerde));
        prices.join(
            &other,
            |a, b| format!("{a}{b}"),
            Materialized::with(StringSerde, StringSerde),
        );
        let err = builder.build().expect_err("versioned");
        assert!(err.to_string().contains("prices is versioned"), "{err}");
    }
}

/// (The runtime also sends this task its writers' watermark records: `tests/table_joins.rs`
/// checks that none of them is taken for an order.)
#[test]
fn a_table_behind_a_repartition_joins_a_topic_table_declared_before_it() {
    use crate::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    use crate::serdes::I64Serde;
    let builder = StreamsBuilder::new();
    let names = builder.table("customers", Consumed::with(StringSerde, StringSerde));
    // Orders keyed by order id, valued by customer: counted per customer behind a repartition.
    let counts = builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .group_by(
            |_, customer| customer.clone(),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("counts"));
    names
        .join(
            &counts,
            |name, n| format!("{name}:{n}"),
            Materialized::with(StringSerde, StringSerde).named("named-counts"),
        )
        .to_stream()
        .to("out", Produced::with(StringSerde, StringSerde));
    let topology = builder.build().expect("valid");
    // The join ties the table's topic and the repartition topic into the first sub-topology.
    let subs = topology.sub_topologies();
    assert!(subs[0].contains(&"customers".to_string()), "{subs:?}");
    assert!(
        subs[0].contains(&"KSTREAM-REPARTITION-0000000001".to_string()),
        "{subs:?}"
    );
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(TestRecord::new("customers", Some("c1"), Some("ann")).timestamp(1))
        .expect("pipe");
    for (i, p) in [0, 1, 2, 3, 1].into_iter().enumerate() {
        d.pipe(
            TestRecord::new("orders", Some(format!("o{i}").as_str()), Some("c1"))
                .partition(p)
                .timestamp(2 + i as i64),
        )
        .expect("pipe");
    }
    let out: Vec<String> = d
        .read_output("out", &StringSerde, &StringSerde)
        .expect("read")
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect();
    assert_eq!(out, ["ann:1", "ann:2", "ann:3", "ann:4", "ann:5"]);
    assert!(d.dead_letters("orders").is_empty());
}
