//! The order-totals example's unit tests: the topology in `TopologyTestDriver`, no broker.
//! `cargo test --locked --example dsl_order_totals` runs them.

use eosflow::processor::StoreHandle;
use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::testing::DltClass;
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::{TableHandle, Topology};

use super::{topology, Customer, CustomerTotal, Order, CUSTOMERS, ORDERS, TOTALS};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Driver = TopologyTestDriver<Topology>;

fn customers() -> TableHandle<String, Customer> {
    TableHandle::new(CUSTOMERS, CUSTOMERS, StringSerde, JsonSerde::new())
}

fn driver_with_customers(rows: &[(&str, &str)]) -> Result<Driver, Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    for (id, name) in rows {
        let row = Customer {
            name: name.to_string(),
        };
        driver.pipe_table(&customers(), &id.to_string(), Some(&row))?;
    }
    Ok(driver)
}

/// An order record: key = order id, value = the order as JSON.
fn order(id: &str, customer_id: &str, amount_cents: i64) -> TestRecord {
    let order = Order {
        customer_id: customer_id.to_string(),
        amount_cents,
    };
    let json = serde_json::to_vec(&order).expect("an order serializes");
    TestRecord::new(ORDERS, Some(id), Some(json))
}

fn total(customer_id: &str, name: Option<&str>, orders: i64, cents: i64) -> CustomerTotal {
    CustomerTotal {
        customer_id: customer_id.to_string(),
        name: name.map(str::to_string),
        orders,
        total_cents: cents,
    }
}

/// The totals written since the last read, keyed by customer id.
fn totals(driver: &mut Driver) -> Result<Vec<(String, CustomerTotal)>, Box<dyn std::error::Error>> {
    let out = driver.read_output(TOTALS, &StringSerde, &JsonSerde::<CustomerTotal>::new())?;
    Ok(out
        .into_iter()
        .filter_map(|(k, v)| Some((k?, v?)))
        .collect())
}

#[test]
fn each_order_adds_to_its_customers_total_whatever_partition_it_came_in_on() -> TestResult {
    let mut driver = driver_with_customers(&[("c-1", "Ann"), ("c-2", "Bob")])?;
    driver.pipe(order("o-1", "c-1", 1_250).partition(0))?;
    driver.pipe(order("o-2", "c-2", 500).partition(2))?;
    driver.pipe(order("o-3", "c-1", 1_750).partition(3))?;
    assert_eq!(
        totals(&mut driver)?,
        vec![
            ("c-1".into(), total("c-1", Some("Ann"), 1, 1_250)),
            ("c-2".into(), total("c-2", Some("Bob"), 1, 500)),
            ("c-1".into(), total("c-1", Some("Ann"), 2, 3_000)),
        ]
    );
    // Every order went through the repartition topic, keyed by its customer.
    let rekeyed = driver.read_raw_output("test-orders-by-customer-repartition");
    let keys: Vec<String> = rekeyed.iter().map(|r| r.key_text()).collect();
    assert_eq!(keys, ["c-1", "c-2", "c-1"]);
    let store = StoreHandle::new("customer-totals", StringSerde, JsonSerde::new());
    assert_eq!(
        driver.store_get(&store, &"c-1".to_string())?,
        Some(total("c-1", Some("Ann"), 2, 3_000))
    );
    Ok(())
}

#[test]
fn a_total_goes_out_as_the_json_the_module_doc_shows() -> TestResult {
    let mut driver = driver_with_customers(&[("c-1", "Ann")])?;
    driver.pipe(order("o-1", "c-1", 1_250))?;
    driver.pipe(order("o-2", "c-1", 1_750))?;
    let out = driver.read_raw_output(TOTALS);
    let last = out.last().ok_or("no total")?;
    assert_eq!(last.key_text(), "c-1");
    assert_eq!(
        last.value_text(),
        r#"{"customer_id":"c-1","name":"Ann","orders":2,"total_cents":3000}"#
    );
    Ok(())
}

#[test]
fn an_order_of_an_unknown_customer_counts_and_the_name_comes_with_the_customer() -> TestResult {
    let mut driver = driver_with_customers(&[])?;
    driver.pipe(order("o-1", "c-9", 400))?;
    let row = Customer { name: "Zoe".into() };
    driver.pipe_table(&customers(), &"c-9".to_string(), Some(&row))?;
    driver.pipe(order("o-2", "c-9", 600))?;
    // The customer deleted: the total keeps the last name it knew.
    driver.pipe_table(&customers(), &"c-9".to_string(), None)?;
    driver.pipe(order("o-3", "c-9", 1))?;
    assert_eq!(
        totals(&mut driver)?,
        vec![
            ("c-9".into(), total("c-9", None, 1, 400)),
            ("c-9".into(), total("c-9", Some("Zoe"), 2, 1_000)),
            ("c-9".into(), total("c-9", Some("Zoe"), 3, 1_001)),
        ]
    );
    Ok(())
}

#[test]
fn an_order_without_a_customer_a_positive_amount_or_a_json_value_is_dead_lettered() -> TestResult {
    let mut driver = driver_with_customers(&[("c-1", "Ann")])?;
    driver.pipe(order("o-1", "", 100))?;
    driver.pipe(order("o-2", "c-1", 0))?;
    driver.pipe(order("o-3", "c-1", -50))?;
    driver.pipe(TestRecord::new(ORDERS, Some("o-4"), Some(b"".as_slice())))?;
    driver.pipe(TestRecord::new(ORDERS, Some("o-5"), None::<&[u8]>))?; // a tombstone
    driver.pipe(order("o-6", "c-1", 100))?;
    assert_eq!(
        totals(&mut driver)?,
        vec![("c-1".into(), total("c-1", Some("Ann"), 1, 100))]
    );
    let dead = driver.dead_letters(ORDERS);
    let keys: Vec<String> = dead.iter().map(|d| d.record.key_text()).collect();
    assert_eq!(keys, ["o-1", "o-2", "o-3", "o-4"]);
    assert!(dead.iter().all(|d| d.class == DltClass::Permanent));
    assert_eq!(
        dead[0].reason,
        "an order needs a customer id and a positive amount"
    );
    assert!(dead[3].reason.contains("not JSON"), "{}", dead[3].reason);
    // The tombstone has no customer to re-key by: it goes nowhere, not even to the DLT; only
    // the valid order was re-keyed.
    let rekeyed = driver.read_raw_output("test-orders-by-customer-repartition");
    let keys: Vec<String> = rekeyed.iter().map(|r| r.key_text()).collect();
    assert_eq!(keys, ["c-1"]);
    Ok(())
}

#[test]
fn an_order_sent_twice_with_one_id_counts_once() -> TestResult {
    let mut driver = driver_with_customers(&[("c-1", "Ann")])?;
    driver.pipe(order("o-1", "c-1", 700).id("order-o-1"))?;
    driver.pipe(order("o-1", "c-1", 700).id("order-o-1"))?;
    assert_eq!(
        totals(&mut driver)?,
        vec![("c-1".into(), total("c-1", Some("Ann"), 1, 700))]
    );
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed total, store entry or dead letter: the customers
/// table, the re-keyed orders and the totals all live in stores and topics.
#[test]
fn a_crash_anywhere_changes_no_committed_total() -> TestResult {
    for seed in [1, 2] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        let rows = crash_test.input_topic(CUSTOMERS, StringSerde, JsonSerde::<Customer>::new());
        crash_test.pipe_input(&rows, "c-1", Customer { name: "Ann".into() })?;
        crash_test.pipe_input(&rows, "c-2", Customer { name: "Bob".into() })?;
        for (i, (customer, cents, partition)) in [
            ("c-1", 1_250, 0),
            ("c-2", 500, 1),
            ("c-1", 1_750, 2),
            ("c-3", 99, 3),
            ("c-1", -1, 0), // dead-lettered
            ("c-2", 250, 1),
        ]
        .into_iter()
        .enumerate()
        {
            crash_test.pipe(order(&format!("o-{i}"), customer, cents).partition(partition));
        }
        crash_test.pipe(order("o-1", "c-2", 500).partition(1).id("o-1")); // twice: once
        crash_test.pipe(order("o-1", "c-2", 500).partition(1).id("o-1"));
        let summary = crash_test.run()?;
        assert!(summary.crashes.len() >= summary.batches);
        assert_eq!(summary.written.get(TOTALS), Some(&6));
        assert_eq!(summary.written.get("dsl-order-totals.orders.DLT"), Some(&1));
    }
    Ok(())
}
