//! Foreign-key joins through the test driver: inner and left results as orders and customers
//! change, a foreign key that changes (the old result retracted, the new one joined), orders
//! without a foreign key, tombstones of either side, a random workload checked against a model
//! after every update, stale and malformed messages on the internal topics, empty and huge rows,
//! and `kill -9` at every batch boundary.

use std::collections::BTreeMap;

use crate::processor::StoreHandle;
use crate::serdes::StringSerde;
use crate::testing::{OutputRecord, TestRecord, TopologyTestDriver};
use crate::topology::{ForeignKeyJoin, JoinKind, Topology};

const ORDERS: &str = "orders";
const CUSTOMERS: &str = "customers";
const OUT: &str = "enriched";

type Driver = TopologyTestDriver<Topology>;

fn result_store() -> StoreHandle<String, String> {
    StoreHandle::new("enriched-orders", StringSerde, StringSerde)
}

/// An order's value is `customer:item`; `-:item` names no customer.
#[allow(clippy::ptr_arg)] // the extractor's signature: Fn(&V) with V = String
fn customer_of(order: &String) -> Option<String> {
    order
        .split_once(':')
        .map(|(c, _)| c.to_string())
        .filter(|c| c != "-")
}

fn join(kind: JoinKind) -> ForeignKeyJoin<String, String, String, String, String> {
    let (l, r, out) = (
        StoreHandle::new("fk-orders", StringSerde, StringSerde),
        StoreHandle::new("fk-customers", StringSerde, StringSerde),
        result_store(),
    );
    match kind {
        JoinKind::Inner => {
            ForeignKeyJoin::inner(l, r, out, customer_of, |_k, o: &String, c: &String| {
                Some(format!("{o}@{c}"))
            })
        }
        _ => ForeignKeyJoin::left(
            l,
            r,
            out,
            customer_of,
            |_k, o: &String, c: Option<&String>| {
                Some(format!("{o}@{}", c.map_or("?", String::as_str)))
            },
        ),
    }
}

fn topology(kind: JoinKind) -> Topology {
    topology_answering(kind, crate::topology::fk_join::DEFAULT_FAN_OUT_PER_CALL)
}

/// The join answering at most `fan_out` subscribers of a right row per call.
fn topology_answering(kind: JoinKind, fan_out: usize) -> Topology {
    Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_source("customers", &[CUSTOMERS], StringSerde, StringSerde)
        .add_foreign_key_join(
            "joined",
            join(kind).fan_out_per_call(fan_out),
            &["orders"],
            &["customers"],
        )
        .add_sink("out", OUT, StringSerde, StringSerde, &["joined"])
        .build()
        .expect("valid topology")
}

fn driver(kind: JoinKind) -> Driver {
    TopologyTestDriver::new(topology(kind)).expect("driver")
}

fn row(d: &mut Driver, topic: &str, key: &str, value: Option<&str>, at: i64) {
    d.pipe(TestRecord::new(topic, Some(key), value).timestamp(at))
        .expect("pipe");
}

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

fn result(d: &mut Driver, order: &str) -> Option<String> {
    d.store_get(&result_store(), &order.to_string())
        .expect("result store")
}

#[test]
fn inner_join_follows_both_sides_and_retracts_when_the_foreign_key_moves_or_a_row_goes() {
    let mut d = driver(JoinKind::Inner);
    row(&mut d, ORDERS, "o1", Some("c1:book"), 1); // no customer c1 yet
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 2);
    row(&mut d, CUSTOMERS, "c2", Some("Bob"), 3);
    row(&mut d, ORDERS, "o1", Some("c2:book"), 4); // moves to c2
    row(&mut d, CUSTOMERS, "c1", Some("Ann B."), 5); // o1 no longer follows c1
    row(&mut d, CUSTOMERS, "c2", None, 6); // its customer goes: retracted
    row(&mut d, CUSTOMERS, "c2", Some("Bob 2"), 7); // and comes back
    row(&mut d, ORDERS, "o1", None, 8); // the order goes
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![
            set("o1", "c1:book@Ann"),
            set("o1", "c2:book@Bob"),
            gone("o1"),
            set("o1", "c2:book@Bob 2"),
            gone("o1"),
        ]
    );
    assert_eq!(result(&mut d, "o1"), None);
}

#[test]
fn left_join_keeps_orders_without_a_customer_or_a_foreign_key() {
    let mut d = driver(JoinKind::Left);
    row(&mut d, ORDERS, "o1", Some("c1:book"), 1);
    row(&mut d, ORDERS, "o2", Some("-:gift"), 2); // names no customer
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 3);
    row(&mut d, ORDERS, "o1", Some("-:book"), 4); // loses its foreign key
    row(&mut d, CUSTOMERS, "c1", Some("Ann B."), 5); // nothing follows c1 now
    row(&mut d, ORDERS, "o2", None, 6);
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        vec![
            set("o1", "c1:book@?"),
            set("o2", "-:gift@?"),
            set("o1", "c1:book@Ann"),
            set("o1", "-:book@?"),
            gone("o2"),
        ]
    );
    assert_eq!(result(&mut d, "o1").as_deref(), Some("-:book@?"));
}

#[test]
fn results_carry_the_later_rows_timestamp() {
    let mut d = driver(JoinKind::Inner);
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 10);
    row(&mut d, ORDERS, "o1", Some("c1:book"), 5);
    row(&mut d, CUSTOMERS, "c1", Some("Ann B."), 20);
    let at: Vec<Option<i64>> = d.read_raw_output(OUT).iter().map(|r| r.timestamp).collect();
    assert_eq!(at, vec![Some(10), Some(20)]);
}

#[test]
fn many_orders_of_one_customer_all_follow_its_updates() {
    let mut d = driver(JoinKind::Inner);
    for i in 0..50 {
        row(
            &mut d,
            ORDERS,
            &format!("o{i:02}"),
            Some(&format!("c1:item{i}")),
            i,
        );
    }
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 100);
    let out = changes(&d.read_raw_output(OUT));
    assert_eq!(out.len(), 50);
    assert!(out
        .iter()
        .all(|(_, v)| v.as_deref().is_some_and(|v| v.ends_with("@Ann"))));
    assert_eq!(result(&mut d, "o37").as_deref(), Some("c1:item37@Ann"));
}

/// A driver whose join answers at most `fan_out` subscribers per call, with `orders` orders
/// `o0000…` of customer c1 (not yet known) piped in.
fn hot_customer(kind: JoinKind, fan_out: usize, orders: usize) -> Driver {
    let mut d = TopologyTestDriver::new(topology_answering(kind, fan_out)).expect("driver");
    for i in 0..orders {
        let order = format!("c1:item{i}");
        row(&mut d, ORDERS, &format!("o{i:04}"), Some(&order), i as i64);
    }
    d.read_raw_output(OUT);
    d
}

/// Moves the wall clock on 1 ms at a time until a call adds no output: the changes of each
/// call, in order.
fn fan_out_calls(d: &mut Driver) -> Vec<Vec<(String, Option<String>)>> {
    let mut calls = Vec::new();
    for _ in 0..10_000 {
        d.advance_wall_clock(std::time::Duration::from_millis(1))
            .expect("timers fire");
        let out = changes(&d.read_raw_output(OUT));
        if out.is_empty() {
            return calls;
        }
        calls.push(out);
    }
    panic!("the fan-out never ends");
}

#[test]
fn a_hot_customers_update_answers_its_orders_a_bounded_page_per_call() {
    let mut d = hot_customer(JoinKind::Inner, 100, 2_345);
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 10_000);
    let first = changes(&d.read_raw_output(OUT));
    assert_eq!(
        first.len(),
        100,
        "the right update's own call answers one page"
    );
    let mut all = first;
    let calls = fan_out_calls(&mut d);
    assert_eq!(calls.len(), 23, "23 more pages of at most 100");
    assert!(calls.iter().all(|c| c.len() <= 100));
    all.extend(calls.into_iter().flatten());
    let want: Vec<(String, Option<String>)> = (0..2_345)
        .map(|i| set(&format!("o{i:04}"), &format!("c1:item{i}@Ann")))
        .collect();
    assert_eq!(all, want, "every order answered once, in key order");
    // Finished: a later tick answers nobody again.
    d.advance_wall_clock(std::time::Duration::from_secs(60))
        .expect("timers fire");
    assert!(d.read_raw_output(OUT).is_empty());
}

#[test]
fn a_newer_right_row_mid_fan_out_restarts_it_and_no_order_gets_the_older_one_after() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        let mut d = hot_customer(kind, 50, 420);
        row(&mut d, CUSTOMERS, "c1", Some("Ann"), 10_000);
        let mut out = changes(&d.read_raw_output(OUT));
        for _ in 0..3 {
            d.advance_wall_clock(std::time::Duration::from_millis(1))
                .expect("timers fire");
            out.extend(changes(&d.read_raw_output(OUT)));
        }
        assert_eq!(
            out.len(),
            200,
            "{kind:?}: four pages of Ann before the update"
        );
        row(&mut d, CUSTOMERS, "c1", Some("Bob"), 10_001);
        let restarted = changes(&d.read_raw_output(OUT));
        assert_eq!(restarted.len(), 50, "{kind:?}");
        assert_eq!(
            restarted[0],
            set("o0000", "c1:item0@Bob"),
            "{kind:?}: from the first"
        );
        out.extend(restarted);
        out.extend(fan_out_calls(&mut d).into_iter().flatten());
        // Per order: Ann at most once, then Bob exactly once and last.
        let mut per_order: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in out {
            per_order
                .entry(k)
                .or_default()
                .push(v.expect("no retraction"));
        }
        assert_eq!(per_order.len(), 420, "{kind:?}");
        for (k, seen) in &per_order {
            let i = &k[1..].trim_start_matches('0');
            let bob = format!("c1:item{}@Bob", if i.is_empty() { "0" } else { i });
            let ann = bob.replace("@Bob", "@Ann");
            let want = if seen.len() == 2 {
                vec![ann, bob]
            } else {
                vec![bob]
            };
            assert_eq!(seen, &want, "{kind:?} {k}");
        }
        assert_eq!(result(&mut d, "o0419").as_deref(), Some("c1:item419@Bob"));
    }
}

#[test]
fn a_deleted_hot_row_retracts_every_result_page_by_page() {
    let mut d = hot_customer(JoinKind::Inner, 64, 300);
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 10_000);
    fan_out_calls(&mut d);
    d.read_raw_output(OUT);
    row(&mut d, CUSTOMERS, "c1", None, 10_001);
    let mut out = changes(&d.read_raw_output(OUT));
    assert_eq!(out.len(), 64);
    out.extend(fan_out_calls(&mut d).into_iter().flatten());
    assert_eq!(out.len(), 300);
    assert!(out.iter().all(|(_, v)| v.is_none()), "all retracted");
    assert_eq!(result(&mut d, "o0123"), None);
}

#[test]
fn an_order_subscribing_mid_fan_out_is_answered_once() {
    let mut d = hot_customer(JoinKind::Inner, 10, 100);
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 10_000);
    assert_eq!(d.read_raw_output(OUT).len(), 10);
    // Ahead of the cursor (o0050 > o0009): the fan-out answers it; behind it (o0005): at once.
    row(&mut d, ORDERS, "o0050", Some("c1:again"), 10_001);
    row(&mut d, ORDERS, "o0005", Some("c1:again"), 10_002);
    assert_eq!(
        changes(&d.read_raw_output(OUT)),
        [set("o0005", "c1:again@Ann")]
    );
    let rest: Vec<_> = fan_out_calls(&mut d).into_iter().flatten().collect();
    assert_eq!(rest.len(), 90);
    assert_eq!(
        rest.iter()
            .filter(|(k, _)| k == "o0050")
            .collect::<Vec<_>>(),
        [&set("o0050", "c1:again@Ann")]
    );
}

#[test]
fn kill_9_mid_fan_out_gives_the_crash_free_results() {
    let mut crash_test = TopologyTestDriver::with_crashes(11, || {
        Ok::<_, std::convert::Infallible>(topology_answering(JoinKind::Inner, 7))
    })
    .max_crashes(30);
    for i in 0..60 {
        let order = format!("c{}:item{i}", i % 2);
        crash_test.pipe(
            TestRecord::new(
                ORDERS,
                Some(format!("o{i:02}").as_str()),
                Some(order.as_str()),
            )
            .timestamp(i)
            .id(&format!("o{i}")),
        );
    }
    let customers = [("c0", "Ann"), ("c1", "Bob"), ("c0", "Cid"), ("c1", "Dan")];
    for (n, (c, name)) in customers.into_iter().enumerate() {
        crash_test.pipe(
            TestRecord::new(CUSTOMERS, Some(c), Some(name))
                .timestamp(100 + n as i64)
                .id(&format!("c{n}")),
        );
        // Two pages, then the next update lands mid-fan-out; the last one runs to its end.
        let ticks = if n == 3 { 6 } else { 2 };
        for _ in 0..ticks {
            crash_test.advance_wall_clock(std::time::Duration::from_millis(1));
        }
    }
    let summary = crash_test
        .run()
        .expect("every crash matches the crash-free run");
    assert!(!summary.crashes.is_empty());
    assert!(
        summary.written.get(OUT).copied().unwrap_or(0) >= 60,
        "{summary:?}"
    );
}

#[test]
fn empty_and_huge_rows_are_rows_like_any_other() {
    let mut d = driver(JoinKind::Left);
    let huge = "x".repeat(4 * 1024 * 1024);
    row(&mut d, CUSTOMERS, "c1", Some(&huge), 1);
    row(&mut d, CUSTOMERS, "", Some(""), 2); // an empty key and value
    row(&mut d, ORDERS, "o1", Some("c1:big"), 3);
    row(&mut d, ORDERS, "o2", Some(":empty"), 4); // foreign key "": the empty customer
    assert_eq!(result(&mut d, "o1"), Some(format!("c1:big@{huge}")));
    assert_eq!(result(&mut d, "o2").as_deref(), Some(":empty@"));
}

#[test]
fn a_stale_or_malformed_internal_message_changes_nothing() {
    let mut d = driver(JoinKind::Inner);
    row(&mut d, CUSTOMERS, "c1", Some("Ann"), 1);
    row(&mut d, ORDERS, "o1", Some("c1:book"), 2);
    assert_eq!(d.read_raw_output(OUT).len(), 1); // (reading takes what was written)
                                                 // A response for a row o1 no longer has (another hash), as a late one from an old
                                                 // foreign key's partition would be.
    let mut stale = 12345u64.to_be_bytes().to_vec();
    stale.push(0);
    d.pipe(
        TestRecord::new("test-joined-response-repartition", Some("o1"), Some(stale)).timestamp(3),
    )
    .expect("a stale response is dropped, not an error");
    assert!(d.read_raw_output(OUT).is_empty());
    assert_eq!(result(&mut d, "o1").as_deref(), Some("c1:book@Ann"));
    // Garbage on the subscription topic is dead-lettered with a reason.
    d.pipe(
        TestRecord::new(
            "test-joined-subscription-repartition",
            Some("c1"),
            Some("junk"),
        )
        .timestamp(4),
    )
    .expect("dead-lettered");
    let dlt = d.read_raw_output("test-joined-subscription-repartition.DLT");
    assert_eq!(dlt.len(), 1, "{dlt:?}");
    assert!(dlt[0]
        .header("eosflow.dlt.error.message")
        .is_some_and(|m| m.contains("malformed")));
    assert_eq!(result(&mut d, "o1").as_deref(), Some("c1:book@Ann"));
}

/// A small deterministic generator.
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

/// (is an order, key, value): orders o0..o7 naming customers c0..c3 (or none), customers'
/// names; a third of the updates are tombstones.
fn workload(seed: u64, n: usize) -> Vec<(bool, String, Option<String>)> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|i| {
            let is_order = rng.next(2) == 0;
            let tombstone = rng.next(3) == 0;
            if is_order {
                let customer = match rng.next(5) {
                    4 => "-".to_string(),
                    c => format!("c{c}"),
                };
                let v = (!tombstone).then(|| format!("{customer}:i{i}"));
                (true, format!("o{}", rng.next(8)), v)
            } else {
                let v = (!tombstone).then(|| format!("n{i}"));
                (false, format!("c{}", rng.next(4)), v)
            }
        })
        .collect()
}

/// The joined table the workload says after each of its updates, from the rows alone.
fn expected(
    kind: JoinKind,
    orders: &BTreeMap<String, String>,
    customers: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    orders
        .iter()
        .filter_map(|(k, o)| {
            let c = customer_of(o).and_then(|c| customers.get(&c));
            match (kind, c) {
                (JoinKind::Inner, Some(c)) => Some((k.clone(), format!("{o}@{c}"))),
                (JoinKind::Inner, None) => None,
                (_, c) => Some((k.clone(), format!("{o}@{}", c.map_or("?", String::as_str)))),
            }
        })
        .collect()
}

#[test]
fn a_random_workload_gives_the_models_table_after_every_update() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        for seed in 1..=4 {
            let mut d = driver(kind);
            let (mut orders, mut customers) = (BTreeMap::new(), BTreeMap::new());
            for (i, (is_order, key, value)) in workload(seed, 250).into_iter().enumerate() {
                let (topic, side) = if is_order {
                    (ORDERS, &mut orders)
                } else {
                    (CUSTOMERS, &mut customers)
                };
                row(&mut d, topic, &key, value.as_deref(), i as i64);
                match value {
                    Some(v) => side.insert(key, v),
                    None => side.remove(&key),
                };
                let want = expected(kind, &orders, &customers);
                for o in 0..8 {
                    let k = format!("o{o}");
                    assert_eq!(
                        result(&mut d, &k),
                        want.get(&k).cloned(),
                        "{kind:?} seed {seed} after update {i}, order {k}"
                    );
                }
            }
            // The change stream folds into the same table.
            let mut folded = BTreeMap::new();
            for (k, v) in changes(&d.read_raw_output(OUT)) {
                match v {
                    Some(v) => folded.insert(k, v),
                    None => folded.remove(&k),
                };
            }
            assert_eq!(
                folded,
                expected(kind, &orders, &customers),
                "{kind:?} seed {seed}"
            );
        }
    }
}

#[test]
fn kill_9_at_every_batch_boundary_gives_the_crash_free_results() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        let mut crash_test = TopologyTestDriver::with_crashes(7, move || {
            Ok::<_, std::convert::Infallible>(topology(kind))
        })
        .max_crashes(24);
        for (i, (is_order, key, value)) in workload(21, 40).into_iter().enumerate() {
            let topic = if is_order { ORDERS } else { CUSTOMERS };
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
            summary.written.get(OUT).copied().unwrap_or(0) > 3,
            "{summary:?}"
        );
        assert!(!summary.crashes.is_empty());
    }
}

#[test]
fn the_builder_refuses_stores_shared_between_the_joins_roles() {
    let shared = StoreHandle::new("same", StringSerde, StringSerde);
    let join = ForeignKeyJoin::inner(
        shared.clone(),
        shared,
        result_store(),
        customer_of,
        |_k, o: &String, c: &String| Some(format!("{o}{c}")),
    );
    let err = Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_source("customers", &[CUSTOMERS], StringSerde, StringSerde)
        .add_foreign_key_join("joined", join, &["orders"], &["customers"])
        .build()
        .expect_err("shared store");
    assert!(err.to_string().contains("each needs its own"), "{err}");
}

/// The example of docs/tables-and-joins.md ("Foreign-key joins"), word for word.
#[test]
fn the_pages_example_joins_orders_with_their_customers() -> Result<(), Box<dyn std::error::Error>> {
    // Orders ("customer:item" by order id) with their customer's name (by customer id).
    let join = ForeignKeyJoin::left(
        StoreHandle::new("order-rows", StringSerde, StringSerde),
        StoreHandle::new("customer-rows", StringSerde, StringSerde),
        StoreHandle::new("orders-with-customer", StringSerde, StringSerde),
        |order: &String| {
            order
                .split_once(':')
                .map(|(customer, _)| customer.to_string())
        },
        |_id: &String, order: &String, name: Option<&String>| {
            Some(format!("{order} for {}", name.map_or("?", String::as_str)))
        },
    );
    let topology = Topology::builder()
        .add_source("orders", &["orders"], StringSerde, StringSerde)
        .add_source("customers", &["customers"], StringSerde, StringSerde)
        .add_foreign_key_join("with-customer", join, &["orders"], &["customers"])
        .add_sink(
            "out",
            "orders-with-customer",
            StringSerde,
            StringSerde,
            &["with-customer"],
        )
        .build()?;

    let mut d = TopologyTestDriver::new(topology)?;
    row(&mut d, "orders", "o1", Some("c1:book"), 1);
    row(&mut d, "customers", "c1", Some("Ann"), 2);
    assert_eq!(
        changes(&d.read_raw_output("orders-with-customer")),
        vec![set("o1", "c1:book for ?"), set("o1", "c1:book for Ann")]
    );
    Ok(())
}

#[test]
fn the_foreign_key_join_section_of_the_page_is_in_these_tests() {
    let page = include_str!("../../docs/tables-and-joins.md");
    let section = page
        .split("\n## Foreign-key joins\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the page has a Foreign-key joins section");
    crate::testing::assert_rust_blocks_are_in(
        "docs/tables-and-joins.md",
        section,
        "src/topology/fk_join_tests.rs",
        include_str!("fk_join_tests.rs"),
        1,
    );
}

mod dsl {
    //! The same joins written with the DSL: two compacted topics read as tables, joined by the
    //! orders' customer into a table whose change stream a sink reads.

    use super::*;
    use crate::dsl::{Consumed, Materialized, Produced, StreamsBuilder};

    fn topology(kind: JoinKind) -> Topology {
        let builder = StreamsBuilder::new();
        let orders = builder.table(ORDERS, Consumed::with(StringSerde, StringSerde));
        let customers = builder.table(CUSTOMERS, Consumed::with(StringSerde, StringSerde));
        let result = Materialized::with(StringSerde, StringSerde).named("enriched-orders");
        let joined = match kind {
            JoinKind::Inner => orders.join_on_foreign_key(
                &customers,
                customer_of,
                |o: &String, c: &String| format!("{o}@{c}"),
                result,
            ),
            _ => orders.left_join_on_foreign_key(
                &customers,
                customer_of,
                |o: &String, c: Option<&String>| format!("{o}@{}", c.map_or("?", String::as_str)),
                result,
            ),
        };
        joined
            .to_stream()
            .to(OUT, Produced::with(StringSerde, StringSerde));
        builder.build().expect("valid topology")
    }

    #[test]
    fn a_random_workload_through_the_dsl_gives_the_models_table() {
        for kind in [JoinKind::Inner, JoinKind::Left] {
            let mut d = TopologyTestDriver::new(topology(kind)).expect("driver");
            let (mut orders, mut customers) = (BTreeMap::new(), BTreeMap::new());
            for (i, (is_order, key, value)) in workload(5, 300).into_iter().enumerate() {
                let (topic, side) = if is_order {
                    (ORDERS, &mut orders)
                } else {
                    (CUSTOMERS, &mut customers)
                };
                row(&mut d, topic, &key, value.as_deref(), i as i64);
                match value {
                    Some(v) => side.insert(key, v),
                    None => side.remove(&key),
                };
            }
            let want = expected(kind, &orders, &customers);
            let mut folded = BTreeMap::new();
            for (k, v) in changes(&d.read_raw_output(OUT)) {
                match v {
                    Some(v) => folded.insert(k, v),
                    None => folded.remove(&k),
                };
            }
            assert_eq!(folded, want, "{kind:?}: the change stream");
            for o in 0..8 {
                let k = format!("o{o}");
                assert_eq!(result(&mut d, &k), want.get(&k).cloned(), "{kind:?}: {k}");
            }
        }
    }

    #[test]
    fn the_join_names_its_stores_and_topics_after_the_result() {
        let t = topology(JoinKind::Left);
        let changelogs = t.changelog_topics("shop");
        for store in [
            "enriched-orders",
            "enriched-orders-left-rows",
            "enriched-orders-right-rows",
            "enriched-orders-subscriptions",
        ] {
            let topic = format!("shop-{store}-changelog");
            assert!(changelogs.contains(&topic), "{topic} in {changelogs:?}");
        }
        let mut t = t;
        crate::processor::Application::bind_application(&mut t, "shop");
        let repartitions = crate::processor::Application::repartition_topics(&t);
        assert_eq!(repartitions.len(), 2, "{repartitions:?}");
        assert!(repartitions
            .iter()
            .any(|r| r.ends_with("-subscription-repartition")));
        assert!(repartitions
            .iter()
            .any(|r| r.ends_with("-response-repartition")));
    }
}

/// Issue #49 (1): left rows whose serde does not write the same bytes twice. The join must
/// match a response with the hash its subscription was sent with, not with a hash of the row
/// serialized again.
mod non_canonical_serdes {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::{Lcg, CUSTOMERS, ORDERS, OUT};
    use crate::codec::avro_serde::AvroSerde;
    use crate::codec::decode::FixedSource;
    use crate::processor::StoreHandle;
    use crate::serdes::{JsonSerde, Serde, SerdeError, StringSerde};
    use crate::testing::{TestRecord, TopologyTestDriver};
    use crate::topology::{ForeignKeyJoin, Topology};

    /// An order naming its customer, with tags: a `HashMap`, which JSON and Avro write in
    /// the map's iteration order — another order for each map (each has its own hasher seed).
    #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
    struct TaggedOrder {
        customer: String,
        item: String,
        tags: HashMap<String, String>,
    }

    type Values = Arc<dyn Serde<TaggedOrder>>;

    /// A serde case: its name, and its serde given the switch that moves it to a new schema id.
    type Case = (&'static str, fn(&Arc<AtomicBool>) -> Values);

    /// Avro that writes with schema id 7 until `switched`, then with id 8 (the same schema
    /// registered again under a new id, as after a redeploy); reads both. Rows stored before
    /// the switch keep id 7's bytes, which the serde never writes again.
    struct SwitchingAvro {
        before: Values,
        after: Values,
        switched: Arc<AtomicBool>,
    }

    impl Serde<TaggedOrder> for SwitchingAvro {
        fn serialize(&self, o: &TaggedOrder) -> Result<Vec<u8>, SerdeError> {
            if self.switched.load(Ordering::SeqCst) {
                self.after.serialize(o)
            } else {
                self.before.serialize(o)
            }
        }

        fn deserialize(&self, bytes: &[u8]) -> Result<TaggedOrder, SerdeError> {
            self.before.deserialize(bytes)
        }
    }

    fn order(customer: &str, item: &str, tags: usize) -> TaggedOrder {
        TaggedOrder {
            customer: customer.to_string(),
            item: item.to_string(),
            tags: (0..tags)
                .map(|t| (format!("tag-{t}"), format!("{item}-value-{t}")))
                .collect(),
        }
    }

    fn results() -> StoreHandle<String, String> {
        StoreHandle::new("tagged-enriched", StringSerde, StringSerde)
    }

    /// Orders (`values` serde) inner-joined with customer names on `customer` (`-`: none).
    fn topology(values: &Values) -> Topology {
        let join = ForeignKeyJoin::inner(
            StoreHandle::new("tagged-orders", StringSerde, values.clone()),
            StoreHandle::new("tagged-customers", StringSerde, StringSerde),
            results(),
            |o: &TaggedOrder| Some(o.customer.clone()).filter(|c| c != "-"),
            |_k: &String, o: &TaggedOrder, name: &String| {
                Some(format!("{}/{} tags@{name}", o.item, o.tags.len()))
            },
        );
        Topology::builder()
            .add_source("orders", &[ORDERS], StringSerde, values.clone())
            .add_source("customers", &[CUSTOMERS], StringSerde, StringSerde)
            .add_foreign_key_join("joined", join, &["orders"], &["customers"])
            .add_sink("out", OUT, StringSerde, StringSerde, &["joined"])
            .build()
            .expect("valid topology")
    }

    fn json() -> Values {
        Arc::new(JsonSerde::<TaggedOrder>::new())
    }

    const AVRO: &str = r#"{"type":"record","name":"TaggedOrder","fields":[
        {"name":"customer","type":"string"},{"name":"item","type":"string"},
        {"name":"tags","type":{"type":"map","values":"string"}}]}"#;

    /// Avro writing with schema id `id` and reading ids 7 and 8 (the same schema, registered
    /// twice: as after a subject was re-created).
    fn avro(id: u32) -> Values {
        let source = FixedSource(HashMap::from([
            (7, AVRO.to_string()),
            (8, AVRO.to_string()),
        ]));
        Arc::new(AvroSerde::<TaggedOrder>::new(id, AVRO, source).expect("schema"))
    }

    fn pipe_order(
        d: &mut TopologyTestDriver<Topology>,
        values: &Values,
        key: &str,
        o: Option<&TaggedOrder>,
        at: i64,
    ) {
        let bytes = o.map(|o| values.serialize(o).expect("serializes"));
        d.pipe(TestRecord::new(ORDERS, Some(key.as_bytes().to_vec()), bytes).timestamp(at))
            .expect("pipe");
    }

    fn pipe_customer(d: &mut TopologyTestDriver<Topology>, key: &str, name: Option<&str>, at: i64) {
        d.pipe(TestRecord::new(CUSTOMERS, Some(key), name).timestamp(at))
            .expect("pipe");
    }

    /// The issue's case: 300 orders with 4 tags each (JSON), joined to 10 customers. Before
    /// the fix 16 of the 300 got their result; every one must.
    #[test]
    fn three_hundred_json_orders_with_hashmap_tags_all_join_their_customer() {
        let values = json();
        let mut d = TopologyTestDriver::new(topology(&values)).expect("driver");
        for c in 0..10 {
            pipe_customer(&mut d, &format!("c{c}"), Some(&format!("name-{c}")), c);
        }
        for o in 0..300 {
            let placed = order(&format!("c{}", o % 10), &format!("i{o}"), 4);
            pipe_order(&mut d, &values, &format!("o{o:03}"), Some(&placed), 100 + o);
        }
        let out = d.read_raw_output(OUT);
        assert_eq!(out.len(), 300, "one result per order");
        let store = d.store_entries(&results()).expect("results");
        assert_eq!(store.len(), 300);
        assert_eq!(
            store[7],
            ("o007".to_string(), "i7/4 tags@name-7".to_string())
        );
        // A customer's update answers each of its 30 orders again: all 30 are current.
        pipe_customer(&mut d, "c3", Some("renamed"), 1_000);
        let again = d.read_raw_output(OUT);
        assert_eq!(again.len(), 30, "every order of c3 follows its rename");
        assert!(again.iter().all(|r| r.value_text().ends_with("@renamed")));
    }

    /// The joined table the rows say (inner join), by order key.
    fn model(
        orders: &BTreeMap<String, TaggedOrder>,
        customers: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        orders
            .iter()
            .filter_map(|(k, o)| {
                let name = customers.get(&o.customer)?;
                Some((
                    k.clone(),
                    format!("{}/{} tags@{name}", o.item, o.tags.len()),
                ))
            })
            .collect()
    }

    /// Property-style: for JSON with a `HashMap`, Avro with a map, and Avro whose writer's
    /// schema id changes mid-run (the rows stored before keep the old id's bytes), random workloads of orders moving between customers, tombstones on
    /// both sides and customers renamed end with the model's table, in the store and in the
    /// folded change stream, and after every update.
    #[test]
    fn random_workloads_over_non_canonical_serdes_end_with_the_models_join() {
        let cases: [Case; 3] = [
            ("json hashmap", |_| json()),
            ("avro map", |_| avro(7)),
            ("avro, schema id 7 then 8", |switched| {
                Arc::new(SwitchingAvro {
                    before: avro(7),
                    after: avro(8),
                    switched: switched.clone(),
                })
            }),
        ];
        for (name, serde) in cases {
            for seed in 1..=3u64 {
                let switched = Arc::new(AtomicBool::new(false));
                let values = serde(&switched);
                let mut d = TopologyTestDriver::new(topology(&values)).expect("driver");
                let (mut orders, mut customers) = (BTreeMap::new(), BTreeMap::new());
                let mut rng = Lcg(seed * 31 + name.len() as u64);
                let mut folded = BTreeMap::new();
                let mut peak = 0;
                for i in 0..240i64 {
                    if i == 120 {
                        switched.store(true, Ordering::SeqCst);
                    }
                    let tombstone = rng.next(6) == 0;
                    if rng.next(3) != 0 {
                        let key = format!("o{}", rng.next(12));
                        let c = match rng.next(6) {
                            5 => "-".to_string(),
                            c => format!("c{c}"),
                        };
                        let o = (!tombstone)
                            .then(|| order(&c, &format!("i{i}"), 1 + rng.next(5) as usize));
                        pipe_order(&mut d, &values, &key, o.as_ref(), i);
                        match o {
                            Some(o) => orders.insert(key, o),
                            None => orders.remove(&key),
                        };
                    } else {
                        let key = format!("c{}", rng.next(5));
                        let n = (!tombstone).then(|| format!("n{i}"));
                        pipe_customer(&mut d, &key, n.as_deref(), i);
                        match n {
                            Some(n) => customers.insert(key, n),
                            None => customers.remove(&key),
                        };
                    }
                    for r in d.read_raw_output(OUT) {
                        match r.value {
                            Some(_) => folded.insert(r.key_text(), r.value_text()),
                            None => folded.remove(&r.key_text()),
                        };
                    }
                    let want = model(&orders, &customers);
                    assert_eq!(folded, want, "{name}, seed {seed}, after update {i}");
                    peak = peak.max(want.len());
                }
                let stored: BTreeMap<String, String> = d
                    .store_entries(&results())
                    .expect("results")
                    .into_iter()
                    .collect();
                assert_eq!(stored, model(&orders, &customers), "{name}, seed {seed}");
                assert!(
                    peak > 3,
                    "{name}, seed {seed}: a workload that joins ({peak} rows at most)"
                );
            }
        }
    }

    /// A left row kept by an eosflow that did not keep the hash (a bare stamped row) is read,
    /// its hash computed from its bytes as before.
    #[test]
    fn a_left_row_without_a_kept_hash_still_reads() {
        use crate::topology::fk_join::{LeftRow, LeftRowSerde};
        use crate::topology::table_joins::{Stamped, StampedSerde};
        let serde = LeftRowSerde(StampedSerde::<String>(Arc::new(StringSerde)));
        let row = Stamped {
            timestamp: Some(5),
            value: "c1:book".to_string(),
        };
        let old = StampedSerde::<String>(Arc::new(StringSerde))
            .serialize(&row)
            .expect("serializes");
        let read = serde.deserialize(&old).expect("reads a bare stamped row");
        assert_eq!(
            read,
            LeftRow {
                hash: None,
                row: row.clone()
            }
        );
        let kept = LeftRow {
            hash: Some(0xdead_beef),
            row,
        };
        let bytes = serde.serialize(&kept).expect("serializes");
        assert_eq!(bytes[0], 2);
        assert_eq!(serde.deserialize(&bytes).expect("round trip"), kept);
        assert!(serde.deserialize(&[2, 0, 0]).is_err(), "cut short");
    }
}
