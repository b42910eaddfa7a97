//! Foreign-key table joins (KIP-213), against Kafka Streams' `KTableKTableForeignKeyJoinScenarioTest`
//! and the `TopologyTestDriver`-based `KTableKTableForeignKeyJoinIntegrationTest` and
//! `KTableKTableForeignKeyJoinMaterializationIntegrationTest`.
//!
//! Kafka Streams' integration tests are parameterized by `leftJoin`, `optimization`,
//! `materialized`, `rejoin` and versioned sides. Here each method runs for inner and left joins,
//! with and without the rejoin (the foreign-key join's result joined back with the left table);
//! eosflow has no topology optimization setting, and its join result is always materialized
//! (the `store` assertions hold for every case). Versioned tables cannot be joined table-table
//! in eosflow (the builder refuses them), so the versioned cases are not expressible.
//!
//! Deliberate difference (docs/coming-from-kafka-streams.md, "Foreign-key joins"): eosflow keeps
//! the join's result table, so it knows whether a left key had a result; its inner join forwards
//! no tombstone for a key that never had one (Kafka Streams, which cannot tell, forwards an
//! "unnecessary tombstone", its tests' own words). The tables folded from the outputs are the
//! same.

use std::collections::BTreeMap;

use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use eosflow::processor::StoreHandle;
use eosflow::serdes::{BytesSerde, I64Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::Topology;

const LEFT_TABLE: &str = "left_table";
const RIGHT_TABLE: &str = "right_table";
const OUTPUT: &str = "output";
const REJOIN_OUTPUT: &str = "rejoin-output";
/// Kafka Streams' `baseTimestamp`.
const BASE: i64 = 1_600_000_000_000;

type Driver = TopologyTestDriver<Topology>;
type Map = BTreeMap<String, Option<String>>;

fn s(v: &str) -> String {
    v.to_string()
}

/// Kafka Streams' default extractor: the part after `|`.
#[allow(clippy::ptr_arg)] // the extractor's signature: Fn(&V) with V = String
fn after_bar(v: &String) -> Option<String> {
    v.split('|').nth(1).map(str::to_string)
}

/// Kafka Streams' `getTopology`: `left_table` joined (or left-joined) on `extractor` with
/// `right_table`, joiner `(l,r)`, result materialized as `store`, to `output`; with `rejoin`,
/// the result joined back with the left table by key (`rejoin(result,left)`), to
/// `rejoin-output`.
fn topology(left_join: bool, rejoin: bool, extractor: fn(&String) -> Option<String>) -> Topology {
    let b = StreamsBuilder::new();
    let left = b.table(LEFT_TABLE, Consumed::with(StringSerde, StringSerde));
    let right = b.table(RIGHT_TABLE, Consumed::with(StringSerde, StringSerde));
    let m = Materialized::with(StringSerde, StringSerde).named("store");
    let joined = if left_join {
        left.left_join_on_foreign_key(
            &right,
            extractor,
            |l, r| format!("({l},{})", r.map_or("null", String::as_str)),
            m,
        )
    } else {
        left.join_on_foreign_key(&right, extractor, |l, r| format!("({l},{r})"), m)
    };
    joined
        .to_stream()
        .to(OUTPUT, Produced::with(StringSerde, StringSerde));
    if rejoin {
        let m = Materialized::with(StringSerde, StringSerde).named("store-rejoin");
        let rejoined = if left_join {
            joined.left_join(
                &left,
                |j, l| format!("rejoin({j},{})", l.map_or("null", String::as_str)),
                m,
            )
        } else {
            joined.join(&left, |j, l| format!("rejoin({j},{l})"), m)
        };
        rejoined
            .to_stream()
            .to(REJOIN_OUTPUT, Produced::with(StringSerde, StringSerde));
    }
    b.build().expect("valid topology")
}

struct Fk {
    d: Driver,
    store: StoreHandle<String, String>,
    rejoin: bool,
}

impl Fk {
    fn new(left_join: bool, rejoin: bool) -> Self {
        Self::with_extractor(left_join, rejoin, after_bar)
    }

    fn with_extractor(
        left_join: bool,
        rejoin: bool,
        extractor: fn(&String) -> Option<String>,
    ) -> Self {
        Self {
            d: TopologyTestDriver::new(topology(left_join, rejoin, extractor)).expect("driver"),
            store: StoreHandle::new("store", StringSerde, StringSerde),
            rejoin,
        }
    }

    fn left(&mut self, key: &str, value: Option<&str>, ts: i64) {
        self.d
            .pipe(TestRecord::new(LEFT_TABLE, Some(key), value).timestamp(ts))
            .expect("pipe");
    }

    fn right(&mut self, key: &str, value: Option<&str>, ts: i64) {
        self.d
            .pipe(TestRecord::new(RIGHT_TABLE, Some(key), value).timestamp(ts))
            .expect("pipe");
    }

    /// Kafka Streams' `readKeyValuesToMap`: the outputs since the last read, the last per key.
    fn read(&mut self, topic: &str) -> Map {
        self.d
            .read_output(topic, &StringSerde, &StringSerde)
            .expect("output")
            .into_iter()
            .map(|(k, v)| (k.expect("key"), v))
            .collect()
    }

    fn output(&mut self) -> Map {
        self.read(OUTPUT)
    }

    /// The rejoin output since the last read (empty without the rejoin).
    fn rejoined(&mut self) -> Map {
        if self.rejoin {
            self.read(REJOIN_OUTPUT)
        } else {
            Map::new()
        }
    }

    fn store(&mut self) -> BTreeMap<String, String> {
        self.d
            .store_entries(&self.store)
            .expect("store")
            .into_iter()
            .collect()
    }
}

fn map(entries: &[(&str, Option<&str>)]) -> Map {
    entries.iter().map(|(k, v)| (s(k), v.map(s))).collect()
}

fn rows(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries.iter().map(|(k, v)| (s(k), s(v))).collect()
}

/// Every (left join?, rejoin?) case.
fn cases() -> [(bool, bool); 4] {
    [(false, false), (false, true), (true, false), (true, true)]
}

// KTableKTableForeignKeyJoinIntegrationTest#doJoinFromLeftThenDeleteLeftEntity
#[test]
fn fk_integration_do_join_from_left_then_delete_left_entity() {
    for (left_join, rejoin) in cases() {
        let mut t = Fk::new(left_join, rejoin);
        t.right("rhs1", Some("rhsValue1"), BASE);
        t.right("rhs2", Some("rhsValue2"), BASE + 1);
        t.right("rhs3", Some("rhsValue3"), BASE + 2);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.rejoined(), map(&[]));
        assert_eq!(t.store(), rows(&[]));
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE + 3);
        t.left("lhs2", Some("lhsValue2|rhs2"), BASE + 4);
        let expected = [
            ("lhs1", "(lhsValue1|rhs1,rhsValue1)"),
            ("lhs2", "(lhsValue2|rhs2,rhsValue2)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        if rejoin {
            assert_eq!(
                t.rejoined(),
                map(&[
                    (
                        "lhs1",
                        Some("rejoin((lhsValue1|rhs1,rhsValue1),lhsValue1|rhs1)")
                    ),
                    (
                        "lhs2",
                        Some("rejoin((lhsValue2|rhs2,rhsValue2),lhsValue2|rhs2)")
                    ),
                ])
            );
        }
        assert_eq!(t.store(), rows(&expected));
        t.left("lhs3", Some("lhsValue3|rhs1"), BASE + 5);
        assert_eq!(
            t.output(),
            map(&[("lhs3", Some("(lhsValue3|rhs1,rhsValue1)"))])
        );
        if rejoin {
            assert_eq!(
                t.rejoined(),
                map(&[(
                    "lhs3",
                    Some("rejoin((lhsValue3|rhs1,rhsValue1),lhsValue3|rhs1)")
                )])
            );
        }
        assert_eq!(
            t.store(),
            rows(&[
                ("lhs1", "(lhsValue1|rhs1,rhsValue1)"),
                ("lhs2", "(lhsValue2|rhs2,rhsValue2)"),
                ("lhs3", "(lhsValue3|rhs1,rhsValue1)"),
            ])
        );
        t.left("lhs1", None, BASE + 6);
        assert_eq!(t.output(), map(&[("lhs1", None)]));
        if rejoin {
            assert_eq!(t.rejoined(), map(&[("lhs1", None)]));
        }
        assert_eq!(
            t.store(),
            rows(&[
                ("lhs2", "(lhsValue2|rhs2,rhsValue2)"),
                ("lhs3", "(lhsValue3|rhs1,rhsValue1)")
            ])
        );
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#doJoinFromRightThenDeleteRightEntity
#[test]
fn fk_integration_do_join_from_right_then_delete_right_entity() {
    for (left_join, rejoin) in cases() {
        let mut t = Fk::new(left_join, rejoin);
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE);
        t.left("lhs2", Some("lhsValue2|rhs2"), BASE + 1);
        t.left("lhs3", Some("lhsValue3|rhs1"), BASE + 2);
        let halves = [
            ("lhs1", "(lhsValue1|rhs1,null)"),
            ("lhs2", "(lhsValue2|rhs2,null)"),
            ("lhs3", "(lhsValue3|rhs1,null)"),
        ];
        if left_join {
            assert_eq!(t.output(), map(&halves.map(|(k, v)| (k, Some(v)))));
            assert_eq!(t.store(), rows(&halves));
        } else {
            assert_eq!(t.output(), map(&[]));
            assert_eq!(t.store(), rows(&[]));
        }
        t.right("rhs1", Some("rhsValue1"), BASE + 3);
        assert_eq!(
            t.output(),
            map(&[
                ("lhs1", Some("(lhsValue1|rhs1,rhsValue1)")),
                ("lhs3", Some("(lhsValue3|rhs1,rhsValue1)"))
            ])
        );
        let mut want = vec![
            ("lhs1", "(lhsValue1|rhs1,rhsValue1)"),
            ("lhs3", "(lhsValue3|rhs1,rhsValue1)"),
        ];
        if left_join {
            want.push(("lhs2", "(lhsValue2|rhs2,null)"));
        }
        assert_eq!(t.store(), rows(&want));
        t.right("rhs2", Some("rhsValue2"), BASE + 4);
        assert_eq!(
            t.output(),
            map(&[("lhs2", Some("(lhsValue2|rhs2,rhsValue2)"))])
        );
        let all = [
            ("lhs1", "(lhsValue1|rhs1,rhsValue1)"),
            ("lhs2", "(lhsValue2|rhs2,rhsValue2)"),
            ("lhs3", "(lhsValue3|rhs1,rhsValue1)"),
        ];
        assert_eq!(t.store(), rows(&all));
        t.right("rhs3", Some("rhsValue3"), BASE + 5);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), rows(&all));
        t.right("rhs1", None, BASE + 6);
        if left_join {
            assert_eq!(
                t.output(),
                map(&[
                    ("lhs1", Some("(lhsValue1|rhs1,null)")),
                    ("lhs3", Some("(lhsValue3|rhs1,null)"))
                ])
            );
            assert_eq!(
                t.store(),
                rows(&[
                    ("lhs1", "(lhsValue1|rhs1,null)"),
                    ("lhs2", "(lhsValue2|rhs2,rhsValue2)"),
                    ("lhs3", "(lhsValue3|rhs1,null)"),
                ])
            );
        } else {
            assert_eq!(t.output(), map(&[("lhs1", None), ("lhs3", None)]));
            assert_eq!(t.store(), rows(&[("lhs2", "(lhsValue2|rhs2,rhsValue2)")]));
        }
    }
}

/// `shouldEmitTombstoneWhenDeletingNonJoiningRecords`, in both test classes. Kafka Streams'
/// inner join forwards `(lhs1,null)` when a left row that never joined is deleted; eosflow's
/// forwards nothing (DELIBERATE, see the module docs).
fn tombstone_when_deleting_non_joining_records(left_join: bool, rejoin: bool) {
    let mut t = Fk::new(left_join, rejoin);
    t.left("lhs1", Some("lhsValue1|rhs1"), BASE);
    if left_join {
        assert_eq!(t.output(), map(&[("lhs1", Some("(lhsValue1|rhs1,null)"))]));
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,null)")]));
    } else {
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), rows(&[]));
    }
    t.left("lhs1", None, BASE + 1);
    if left_join {
        assert_eq!(t.output(), map(&[("lhs1", None)]));
    } else {
        // Kafka Streams: {lhs1=null}.
        assert_eq!(t.output(), map(&[]));
    }
    assert_eq!(t.store(), rows(&[]));
    t.left("lhs1", None, BASE + 2);
    assert_eq!(t.output(), map(&[]));
    assert_eq!(t.store(), rows(&[]));
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldEmitTombstoneWhenDeletingNonJoiningRecords
// DIFFERENT for the inner join (see `tombstone_when_deleting_non_joining_records`).
#[test]
fn fk_integration_should_emit_tombstone_when_deleting_non_joining_records() {
    for (left_join, rejoin) in cases() {
        tombstone_when_deleting_non_joining_records(left_join, rejoin);
    }
}

// KTableKTableForeignKeyJoinMaterializationIntegrationTest#shouldEmitTombstoneWhenDeletingNonJoiningRecords
// (inner join, materialized and queryable or not: eosflow's result is always materialized.)
// DIFFERENT as above.
#[test]
fn fk_materialization_should_emit_tombstone_when_deleting_non_joining_records() {
    tombstone_when_deleting_non_joining_records(false, false);
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldNotEmitTombstonesWhenDeletingNonExistingRecords
#[test]
fn fk_integration_should_not_emit_tombstones_when_deleting_non_existing_records() {
    for (left_join, rejoin) in cases() {
        let mut t = Fk::new(left_join, rejoin);
        t.left("lhs1", None, BASE);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), rows(&[]));
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#joinShouldProduceNullsWhenValueHasNonMatchingForeignKey
// DIFFERENT for the inner join: Kafka Streams forwards `(lhs1,null)` when lhs1 moves from one
// missing foreign key to another (twice here), "an unnecessary tombstone" its test says;
// eosflow forwards nothing (lhs1 had no result).
#[test]
fn fk_integration_join_should_produce_nulls_when_value_has_non_matching_foreign_key() {
    for (left_join, rejoin) in cases() {
        let mut t = Fk::new(left_join, rejoin);
        let half = |v: &'static str| {
            if left_join {
                map(&[("lhs1", Some(v))])
            } else {
                map(&[])
            }
        };
        let half_rows = |v: &'static str| {
            if left_join {
                rows(&[("lhs1", v)])
            } else {
                rows(&[])
            }
        };
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE);
        assert_eq!(t.output(), half("(lhsValue1|rhs1,null)"));
        assert_eq!(t.store(), half_rows("(lhsValue1|rhs1,null)"));
        t.left("lhs1", Some("lhsValue1|rhs2"), BASE + 1);
        // Kafka Streams' inner join: {lhs1=null}.
        assert_eq!(t.output(), half("(lhsValue1|rhs2,null)"));
        assert_eq!(t.store(), half_rows("(lhsValue1|rhs2,null)"));
        t.left("lhs1", Some("lhsValue1|rhs3"), BASE + 2);
        // Kafka Streams' inner join: {lhs1=null}.
        assert_eq!(t.output(), half("(lhsValue1|rhs3,null)"));
        assert_eq!(t.store(), half_rows("(lhsValue1|rhs3,null)"));
        t.right("rhs1", Some("rhsValue1"), BASE + 3);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), half_rows("(lhsValue1|rhs3,null)"));
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE + 4);
        assert_eq!(
            t.output(),
            map(&[("lhs1", Some("(lhsValue1|rhs1,rhsValue1)"))])
        );
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,rhsValue1)")]));
        t.left("lhs1", Some("lhsValue1|rhs2"), BASE + 5);
        // Here lhs1 had a result: the inner join's tombstone is Kafka Streams' too.
        assert_eq!(
            t.output(),
            map(&[(
                "lhs1",
                if left_join {
                    Some("(lhsValue1|rhs2,null)")
                } else {
                    None
                }
            )])
        );
        assert_eq!(t.store(), half_rows("(lhsValue1|rhs2,null)"));
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldUnsubscribeOldForeignKeyIfLeftSideIsUpdated
#[test]
fn fk_integration_should_unsubscribe_old_foreign_key_if_left_side_is_updated() {
    for (left_join, rejoin) in cases() {
        let mut t = Fk::new(left_join, rejoin);
        t.right("rhs1", Some("rhsValue1"), BASE);
        t.right("rhs2", Some("rhsValue2"), BASE + 1);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), rows(&[]));
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE + 2);
        assert_eq!(
            t.output(),
            map(&[("lhs1", Some("(lhsValue1|rhs1,rhsValue1)"))])
        );
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,rhsValue1)")]));
        t.left("lhs1", Some("lhsValue1|rhs2"), BASE + 3);
        assert_eq!(
            t.output(),
            map(&[("lhs1", Some("(lhsValue1|rhs2,rhsValue2)"))])
        );
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs2,rhsValue2)")]));
        t.right("rhs1", Some("rhsValue1Delta"), BASE + 4);
        assert_eq!(t.output(), map(&[]));
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs2,rhsValue2)")]));
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldEmitRecordOnNullForeignKeyForLeftJoins
#[test]
fn fk_integration_should_emit_record_on_null_foreign_key_for_left_joins() {
    for rejoin in [false, true] {
        let mut t = Fk::with_extractor(true, rejoin, |_| None);
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE);
        assert_eq!(t.output(), map(&[("lhs1", Some("(lhsValue1|rhs1,null)"))]));
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,null)")]));
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldEmitRecordWhenOldAndNewFkDiffer
// The subscription store is `store-subscriptions`, keyed as Kafka Streams' is:
// `foreign key length (4 bytes) · foreign key · left key`.
#[test]
fn fk_integration_should_emit_record_when_old_and_new_fk_differ() {
    #[allow(clippy::ptr_arg)] // the extractor's signature
    fn extractor(v: &String) -> Option<String> {
        after_bar(v).filter(|fk| fk != "returnNull")
    }
    let subscriptions = StoreHandle::new("store-subscriptions", BytesSerde, BytesSerde);
    let mut key = (b"rhs1".len() as u32).to_be_bytes().to_vec();
    key.extend_from_slice(b"rhs1");
    key.extend_from_slice(b"lhs1");
    for rejoin in [false, true] {
        let mut t = Fk::with_extractor(true, rejoin, extractor);
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE);
        assert_eq!(t.output(), map(&[("lhs1", Some("(lhsValue1|rhs1,null)"))]));
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,null)")]));
        assert!(t
            .d
            .store_get(&subscriptions, &key)
            .expect("subscriptions")
            .is_some());
        t.left("lhs1", Some("lhsValue1|returnNull"), BASE);
        assert_eq!(
            t.output(),
            map(&[("lhs1", Some("(lhsValue1|returnNull,null)"))])
        );
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|returnNull,null)")]));
        assert!(t
            .d
            .store_get(&subscriptions, &key)
            .expect("subscriptions")
            .is_none());
    }
}

// KTableKTableForeignKeyJoinIntegrationTest#shouldIgnoreOutOfOrderRecordsIffVersioned
// The unversioned cases only (eosflow cannot join versioned tables table-table): out-of-order
// updates are applied, as Kafka Streams' unversioned tables do.
#[test]
fn fk_integration_should_ignore_out_of_order_records_iff_versioned() {
    for left_join in [false, true] {
        let mut t = Fk::new(left_join, false);
        t.right("rhs1", Some("rhsValue1"), BASE + 4);
        assert_eq!(t.output(), map(&[]));
        t.left("lhs1", Some("lhsValue1|rhs1"), BASE + 3);
        t.left("lhs2", Some("lhsValue2|rhs1"), BASE + 5);
        let expected = [
            ("lhs1", "(lhsValue1|rhs1,rhsValue1)"),
            ("lhs2", "(lhsValue2|rhs1,rhsValue1)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        assert_eq!(t.store(), rows(&expected));
        t.left("lhs2", None, BASE + 6);
        assert_eq!(t.output(), map(&[("lhs2", None)]));
        assert_eq!(t.store(), rows(&[("lhs1", "(lhsValue1|rhs1,rhsValue1)")]));
        t.left("lhs1", Some("lhsValue1_ooo|rhs1"), BASE + 2);
        t.left("lhs2", Some("lhsValue2_ooo|rhs1"), BASE + 2);
        let expected = [
            ("lhs1", "(lhsValue1_ooo|rhs1,rhsValue1)"),
            ("lhs2", "(lhsValue2_ooo|rhs1,rhsValue1)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        assert_eq!(t.store(), rows(&expected));
        t.left("lhs1", None, BASE + 2);
        assert_eq!(t.output(), map(&[("lhs1", None)]));
        assert_eq!(
            t.store(),
            rows(&[("lhs2", "(lhsValue2_ooo|rhs1,rhsValue1)")])
        );
        t.left("lhs1", Some("lhsValue1_new|rhs1"), BASE + 8);
        t.left("lhs2", Some("lhsValue2_new|rhs1"), BASE + 8);
        let expected = [
            ("lhs1", "(lhsValue1_new|rhs1,rhsValue1)"),
            ("lhs2", "(lhsValue2_new|rhs1,rhsValue1)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        assert_eq!(t.store(), rows(&expected));
        t.right("rhs1", Some("rhsValue1_ooo"), BASE + 1);
        let expected = [
            ("lhs1", "(lhsValue1_new|rhs1,rhsValue1_ooo)"),
            ("lhs2", "(lhsValue2_new|rhs1,rhsValue1_ooo)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        assert_eq!(t.store(), rows(&expected));
        t.right("rhs1", None, BASE + 1);
        if left_join {
            let expected = [
                ("lhs1", "(lhsValue1_new|rhs1,null)"),
                ("lhs2", "(lhsValue2_new|rhs1,null)"),
            ];
            assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
            assert_eq!(t.store(), rows(&expected));
        } else {
            assert_eq!(t.output(), map(&[("lhs1", None), ("lhs2", None)]));
            assert_eq!(t.store(), rows(&[]));
        }
        t.right("rhs1", Some("rhsValue1_new"), BASE + 6);
        let expected = [
            ("lhs1", "(lhsValue1_new|rhs1,rhsValue1_new)"),
            ("lhs2", "(lhsValue2_new|rhs1,rhsValue1_new)"),
        ];
        assert_eq!(t.output(), map(&expected.map(|(k, v)| (k, Some(v)))));
        assert_eq!(t.store(), rows(&expected));
    }
}

// ---------------------------------------------------------------------------------------------
// KTableKTableForeignKeyJoinScenarioTest: `A` (Integer → "999-alpha") joined on the number before
// `-` with `B`, the result joined back with `A` by key. eosflow has no default serdes: every
// serde is explicit, so the five "default serdes" variants are one scenario; each is kept,
// named after its method.

fn scenario() {
    let b = StreamsBuilder::new();
    let a = b.table("A", Consumed::with(I64Serde, StringSerde));
    let bt = b.table("B", Consumed::with(I64Serde, StringSerde));
    let fk = a.join_on_foreign_key(
        &bt,
        |v: &String| v.split('-').next().and_then(|n| n.parse::<i64>().ok()),
        |a, b| format!("({a},{b})"),
        Materialized::with(I64Serde, StringSerde).named("asdf"),
    );
    let last = a.join(
        &fk,
        |a, j| format!("({a},{j})"),
        Materialized::with(I64Serde, StringSerde).named("final"),
    );
    last.to_stream()
        .to("output", Produced::with(I64Serde, StringSerde));
    let mut d = TopologyTestDriver::new(b.build().expect("valid topology")).expect("driver");
    let (one, nines) = (1i64.to_be_bytes(), 999i64.to_be_bytes());
    d.pipe(TestRecord::new(
        "A",
        Some(one.as_slice()),
        Some("999-alpha"),
    ))
    .expect("pipe");
    d.pipe(TestRecord::new("B", Some(nines.as_slice()), Some("beta")))
        .expect("pipe");
    let out: BTreeMap<i64, Option<String>> = d
        .read_output("output", &I64Serde, &StringSerde)
        .expect("output")
        .into_iter()
        .map(|(k, v)| (k.expect("key"), v))
        .collect();
    assert_eq!(
        out,
        BTreeMap::from([(1, Some(s("(999-alpha,(999-alpha,beta))")))])
    );
}

// KTableKTableForeignKeyJoinScenarioTest#shouldWorkWithDefaultSerdes
#[test]
fn fk_scenario_should_work_with_default_serdes() {
    scenario();
}

// KTableKTableForeignKeyJoinScenarioTest#shouldWorkWithDefaultAndConsumedSerdes
#[test]
fn fk_scenario_should_work_with_default_and_consumed_serdes() {
    scenario();
}

// KTableKTableForeignKeyJoinScenarioTest#shouldWorkWithDefaultAndJoinResultSerdes
#[test]
fn fk_scenario_should_work_with_default_and_join_result_serdes() {
    scenario();
}

// KTableKTableForeignKeyJoinScenarioTest#shouldWorkWithDefaultAndEquiJoinResultSerdes
#[test]
fn fk_scenario_should_work_with_default_and_equi_join_result_serdes() {
    scenario();
}

// KTableKTableForeignKeyJoinScenarioTest#shouldWorkWithDefaultAndProducedSerdes
#[test]
fn fk_scenario_should_work_with_default_and_produced_serdes() {
    scenario();
}

// KTableKTableForeignKeyJoinScenarioTest#shouldUseExpectedTopicsWithSerde
// Kafka Streams checks the topics its serdes were called for (no pseudo-topics beyond the
// subscription and response topics, the stores' changelogs and the output). eosflow's serdes
// get no topic name; the fact carried over is the set of topics the join uses: its two
// repartition topics and its stores' changelogs — nothing else.
#[test]
fn fk_scenario_should_use_expected_topics_with_serde() {
    let app = "ktable-ktable-joinOnForeignKey";
    let b = StreamsBuilder::new();
    let left = b.table(LEFT_TABLE, Consumed::with(I64Serde, StringSerde));
    let right = b.table(RIGHT_TABLE, Consumed::with(I64Serde, StringSerde));
    left.join_on_foreign_key(
        &right,
        |v: &String| v.split('|').nth(1).and_then(|n| n.parse::<i64>().ok()),
        |l, r| format!("({l},{r})"),
        Materialized::with(I64Serde, StringSerde).named("fk"),
    )
    .to_stream()
    .to("output-topic", Produced::with(I64Serde, StringSerde));
    let topology = b.build().expect("valid topology");
    let mut repartitions = topology.repartition_topics_for(app);
    repartitions.sort();
    assert_eq!(
        repartitions,
        vec![
            format!("{app}-KTABLE-FK-JOIN-0000000000-response-repartition"),
            format!("{app}-KTABLE-FK-JOIN-0000000000-subscription-repartition"),
        ]
    );
    let mut changelogs = topology.changelog_topics(app);
    changelogs.sort();
    assert_eq!(
        changelogs,
        // The join's four stores, and the application's default store ("state": the
        // dedup marks every eosflow topology keeps).
        [
            "fk",
            "fk-left-rows",
            "fk-right-rows",
            "fk-subscriptions",
            "state"
        ]
        .map(|st| format!("{app}-{st}-changelog"))
        .to_vec()
    );
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    let (two, one) = (2i64.to_be_bytes(), 1i64.to_be_bytes());
    d.pipe(TestRecord::new(
        LEFT_TABLE,
        Some(two.as_slice()),
        Some("lhsValue1|1"),
    ))
    .expect("pipe");
    d.pipe(TestRecord::new(
        RIGHT_TABLE,
        Some(one.as_slice()),
        Some("rhsValue1"),
    ))
    .expect("pipe");
    assert_eq!(
        d.read_output("output-topic", &I64Serde, &StringSerde)
            .expect("output"),
        vec![(Some(2), Some(s("(lhsValue1|1,rhsValue1)")))]
    );
}
