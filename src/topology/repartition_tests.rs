//! Repartitioning through the test driver: orders keyed by order id re-keyed by customer and
//! counted per customer, the repartition record and the count keeping the event time, the
//! causation chain and the correlation, dropped records, and the internal topics.

use crate::config::Config;
use crate::processor::{ProcessError, StoreHandle};
use crate::serdes::{I64Serde, StringSerde};
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::{ProcessorContext, Topology, TypedRecord};

const ORDERS: &str = "orders";
const REPARTITION: &str = "test-by-customer-repartition";

/// Orders (key: order id, value `customer:item`) re-keyed by customer, counted per customer
/// (store `counts`), each new count written to `counts`.
fn topology() -> Topology {
    let counts = StoreHandle::new("counts", StringSerde, I64Serde);
    let store = counts.clone();
    let count = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                      r: TypedRecord<String, String>| {
        let customer = r
            .key
            .ok_or_else(|| ProcessError::permanent("no customer"))?;
        let mut s = ctx.store(&store)?;
        let n = s.get(&customer)?.unwrap_or(0) + 1;
        s.put(&customer, &n)?;
        ctx.forward(TypedRecord::new(Some(customer), Some(n)));
        Ok(())
    };
    Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_repartition(
            "by-customer",
            |_order: Option<&String>, value: &String| {
                value.split_once(':').map(|(c, _)| c.to_string())
            },
            StringSerde,
            StringSerde,
            &["orders"],
        )
        .add_processor("count", count, &["by-customer"])
        .add_state_store(&counts, &["count"])
        .add_sink("out", "counts", StringSerde, I64Serde, &["count"])
        .build()
        .expect("a valid topology")
}

fn order(partition: i32, id: &str, value: &str) -> TestRecord {
    TestRecord::new(ORDERS, Some(id), Some(value))
        .partition(partition)
        .id(&format!("event-{id}"))
}

#[test]
fn orders_rekeyed_by_customer_are_counted_per_customer_within_pipe() {
    let mut d = TopologyTestDriver::new(topology()).expect("driver");
    // Orders of one customer arrive on different input partitions.
    let orders = [
        (0, "o-1", "alice:book"),
        (1, "o-2", "bob:pen"),
        (2, "o-3", "alice:ink"),
        (3, "o-4", "alice:pad"),
        (1, "o-5", "bob:cup"),
    ];
    for (p, id, v) in orders {
        d.pipe(order(p, id, v)).expect("pipe");
    }
    let out = d
        .read_output("counts", &StringSerde, &I64Serde)
        .expect("typed output");
    let want: Vec<(Option<String>, Option<i64>)> = [
        ("alice", 1),
        ("bob", 1),
        ("alice", 2),
        ("alice", 3),
        ("bob", 2),
    ]
    .iter()
    .map(|(k, n)| (Some(k.to_string()), Some(*n)))
    .collect();
    assert_eq!(out, want);
    // The repartition topic holds one record per order, keyed by its customer.
    let rekeyed = d.read_raw_output(REPARTITION);
    let keys: Vec<String> = rekeyed.iter().map(|r| r.key_text()).collect();
    assert_eq!(keys, vec!["alice", "bob", "alice", "alice", "bob"]);
    assert!(d.read_raw_output("orders.DLT").is_empty());
}

#[test]
fn the_rekeyed_record_and_its_result_keep_the_event_time_and_the_causation_chain() {
    let mut d = TopologyTestDriver::new(topology()).expect("driver");
    d.pipe(order(2, "o-7", "carol:lamp").timestamp(1_700_000_042_000))
        .expect("pipe");
    let rekeyed = d.read_raw_output(REPARTITION);
    assert_eq!(rekeyed.len(), 1);
    assert_eq!(rekeyed[0].key_text(), "carol");
    assert_eq!(rekeyed[0].value_text(), "carol:lamp");
    assert_eq!(rekeyed[0].timestamp, Some(1_700_000_042_000));
    assert_eq!(rekeyed[0].header("causation_id"), Some("event-o-7"));
    let repartition_id = rekeyed[0].header("id").expect("a fresh id").to_string();
    assert_ne!(repartition_id, "event-o-7");
    let out = d.read_raw_output("counts");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key_text(), "carol");
    assert_eq!(out[0].timestamp, Some(1_700_000_042_000));
    // The count is caused by the repartition record, correlated with the order's event.
    assert_eq!(out[0].header("causation_id"), Some(repartition_id.as_str()));
    assert_eq!(out[0].header("correlation_id"), Some("event-o-7"));
}

#[test]
fn tombstones_and_records_without_a_new_key_are_not_repartitioned() {
    let mut d = TopologyTestDriver::new(topology()).expect("driver");
    d.pipe(TestRecord::new(ORDERS, Some("o-1"), None::<&[u8]>).id("e-1"))
        .expect("tombstone");
    d.pipe(order(0, "o-2", "no customer")).expect("no key");
    d.pipe(order(0, "o-3", "dave:hat")).expect("keyed");
    assert_eq!(d.read_raw_output(REPARTITION).len(), 1);
    let out = d
        .read_output("counts", &StringSerde, &I64Serde)
        .expect("typed output");
    assert_eq!(out, vec![(Some("dave".to_string()), Some(1))]);
}

#[test]
fn the_repartition_topic_is_an_internal_input_named_for_the_application() {
    let t = topology();
    let mut config = Config::default();
    config.app.id = "shop".into();
    config.retry.delays_ms = vec![100];
    let specs = t.internal_topics(&config, 4);
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "shop-by-customer-repartition",
            "orders.retry.1",
            "orders.DLT",
            "shop-by-customer-repartition.retry.1",
            "shop-by-customer-repartition.DLT",
            "shop-state-changelog",
            "shop-counts-changelog",
        ]
    );
    let topic = &specs[0];
    assert_eq!(
        (topic.partitions, topic.cleanup_policy.as_str()),
        (4, "delete")
    );
    // Bound (as the runtime binds it), the topology reads it as an input.
    let mut t = t;
    crate::processor::Application::bind_application(&mut t, "shop");
    assert_eq!(
        t.source_topics(),
        vec![
            "orders".to_string(),
            "shop-by-customer-repartition".to_string()
        ]
    );
    let err = Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_repartition(
            "r",
            |_: Option<&String>, v: &String| Some(v.clone()),
            StringSerde,
            StringSerde,
            &["nowhere"],
        )
        .build()
        .expect_err("a dangling parent");
    assert!(err.to_string().contains("\"nowhere\""), "{err}");
}

/// Orders re-keyed by customer (orders valued `skip` are dropped before the re-key) and
/// counted per customer in 1-minute windows (no grace), one result per window when it closes.
fn windowed_topology() -> Topology {
    use crate::topology::windows::{
        EmitStrategy, TimeWindows, WindowStoreHandle, WindowedAggregate, WindowedSerde,
    };
    let windows = TimeWindows::of_size_with_grace(
        std::time::Duration::from_secs(60),
        std::time::Duration::ZERO,
    );
    let store = WindowStoreHandle::new("per-customer", StringSerde, I64Serde);
    let count = WindowedAggregate::time(store, windows, || 0, |_, _: &String, n: i64| n + 1)
        .emit(EmitStrategy::OnWindowClose);
    let keep = |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                r: TypedRecord<String, String>| {
        if r.value.as_deref() != Some("skip") {
            ctx.forward(r);
        }
        Ok(())
    };
    Topology::builder()
        .add_source("orders", &[ORDERS], StringSerde, StringSerde)
        .add_processor("keep", keep, &["orders"])
        .add_repartition(
            "by-customer",
            |_order: Option<&String>, value: &String| {
                value.split_once(':').map(|(c, _)| c.to_string())
            },
            StringSerde,
            StringSerde,
            &["keep"],
        )
        .add_windowed_aggregate("count", count, &["by-customer"])
        .add_sink(
            "out",
            "windows",
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["count"],
        )
        .build()
        .expect("a valid topology")
}

#[test]
fn each_sub_topology_has_its_own_stream_time_so_a_raw_input_never_closes_a_window_after_the_rekey()
{
    let t = windowed_topology();
    assert_eq!(
        t.sub_topologies(),
        vec![
            vec![
                "orders".to_string(),
                "keep".into(),
                "by-customer-select-key".into(),
                "by-customer-repartition-sink".into()
            ],
            vec!["by-customer".to_string(), "count".into(), "out".into()],
        ]
    );
    let mut d = TopologyTestDriver::new(t).expect("driver");
    // A minute boundary.
    let t0: i64 = 1_700_000_040_000;
    let at = |id: &str, value: &str, ts: i64| {
        TestRecord::new(ORDERS, Some(id), Some(value))
            .partition(0)
            .timestamp(ts)
    };
    d.pipe(at("o-1", "ann:book", t0)).expect("pipe");
    // An order ten minutes later that never reaches the re-key: the raw input's task moves,
    // the counting task does not, and the window of `o-1` stays open.
    d.pipe(at("o-2", "skip", t0 + 600_000)).expect("pipe");
    assert_eq!(d.task_stream_time_ms(0, 0), Some(t0 + 600_000));
    assert_eq!(d.task_stream_time_ms(1, 0), Some(t0));
    let keys = crate::topology::windows::WindowedSerde::new(StringSerde);
    assert!(
        d.read_output("windows", &keys, &I64Serde)
            .expect("read")
            .is_empty(),
        "a record the counting task never saw closed its window"
    );
    // The re-keyed copy of a later order closes it: one result, counted once.
    d.pipe(at("o-3", "ann:pen", t0 + 600_000)).expect("pipe");
    assert_eq!(d.task_stream_time_ms(1, 0), Some(t0 + 600_000));
    let out = d.read_output("windows", &keys, &I64Serde).expect("read");
    assert_eq!(out.len(), 1, "{out:?}");
    let (k, n) = &out[0];
    let k = k.as_ref().expect("a windowed key");
    assert_eq!((k.key.as_str(), k.window.start, *n), ("ann", t0, Some(1)));
}
