//! The order processor and its fulfilment saga: alone (what one placement emits and stores),
//! and wired to the stock and payment services and the read model through their topics, each
//! on its own driver, the way the four processors run in production.

use eosflow::processor::ProcessorSpec;
use eosflow::testing::TopologyTestDriver;
use eosflow_orders::aggregate::OrderProcessor;
use eosflow_orders::messages::types;
use eosflow_orders::projection::CustomersProcessor;
use eosflow_orders::services::{PaymentService, StockService};
use eosflow_orders::{draw, FailureRates, Topics};
use serde_json::{json, Value};

use crate::support::{self, *};

#[test]
fn a_placed_order_is_stored_and_its_saga_asks_the_stock_service_to_reserve() {
    let t = topics();
    let mut d = orders();
    place(&mut d, "o-1", "c-1", "e-1");

    let commands = d.read_raw_output(&t.stock);
    assert_eq!(commands.len(), 1);
    let cmd = &commands[0];
    assert_eq!(cmd.key_text(), "o-1");
    assert_eq!(cmd.header("type"), Some(types::STOCK_COMMAND));
    assert_eq!(
        cmd.header("causation_id"),
        Some("row-e-1"),
        "the envelope names its cause"
    );
    assert_eq!(cmd.header("aggregate_id"), Some("o-1"));
    let v = body(cmd);
    assert_eq!(
        (v["action"].as_str(), v["attempt"].as_u64()),
        (Some("RESERVE"), Some(1))
    );
    assert_eq!(v["lines"].as_array().map(Vec::len), Some(2));

    let feed = d.read_raw_output(&t.feed);
    assert_eq!(feed.len(), 1);
    assert_eq!(
        feed[0].key_text(),
        "c-1",
        "the read model's feed is keyed by customer"
    );
    assert_eq!(body(&feed[0])["status"], "PLACED");
    assert!(
        d.pending_outputs().is_empty(),
        "nothing else: {:?}",
        d.pending_outputs()
    );

    let order = stored(&mut d, "order/o-1").expect("the aggregate");
    assert_eq!(
        (order["status"].as_str(), order["version"].as_u64()),
        (Some("PLACED"), Some(1))
    );
    let saga = stored(&mut d, "saga/o-1").expect("the saga");
    assert_eq!(saga["step"]["step"], "reserving");
}

#[test]
fn avro_placements_v1_and_v2_from_the_registry_are_accepted_and_v1_is_upcast() {
    let t = topics();
    let mut d = orders();
    let mut v1 = placed("o-1", "c-1");
    v1.as_object_mut().expect("object").remove("channel");
    d.pipe(avro_event(
        types::ORDER_PLACED_V1,
        PLACED_V1_ID,
        "o-1",
        &v1,
        "e-1",
    ))
    .expect("pipe");
    place_avro(&mut d, "o-2", "c-2", "e-2");

    assert_eq!(keys(&mut d, &t.stock), ["o-1", "o-2"]);
    for id in ["o-1", "o-2"] {
        let order = stored(&mut d, &format!("order/{id}")).expect("stored");
        assert_eq!(order["total_minor"], 1299);
        assert_eq!(order["lines"][0]["sku"], "sku-1");
    }
    assert_eq!(d.summary().dead_lettered, 0);
}

/// The four processors of the application, each on its own driver, wired by their topics.
struct Shop {
    t: Topics,
    orders: TopologyTestDriver<ProcessorSpec<OrderProcessor>>,
    stock: TopologyTestDriver<ProcessorSpec<StockService>>,
    payment: TopologyTestDriver<ProcessorSpec<PaymentService>>,
    customers: TopologyTestDriver<ProcessorSpec<CustomersProcessor>>,
}

impl Shop {
    fn new(rates: FailureRates) -> Self {
        Self {
            t: topics(),
            orders: orders(),
            stock: stock(rates),
            payment: payment(rates),
            customers: customers(),
        }
    }

    /// Places `order` and carries commands and replies between the processors until the saga
    /// is quiet, then feeds the read model.
    fn place(&mut self, order: &str, customer: &str) {
        let e = event(
            types::ORDER_PLACED_V2,
            order,
            &placed(order, customer),
            order,
        );
        self.orders.pipe(e).expect("pipe");
        self.settle();
    }

    fn settle(&mut self) {
        let t = &self.t;
        loop {
            let moved = shuttle(&mut self.orders, "orders", &t.stock, &mut self.stock)
                + shuttle(&mut self.orders, "orders", &t.payment, &mut self.payment)
                + shuttle(&mut self.stock, "stock", &t.replies, &mut self.orders)
                + shuttle(&mut self.payment, "payment", &t.replies, &mut self.orders);
            if moved == 0 {
                break;
            }
        }
        shuttle(&mut self.orders, "orders", &t.feed, &mut self.customers);
    }

    /// The status changes of the order processor, as `from→to`.
    fn transitions(&mut self) -> Vec<String> {
        bodies(&mut self.orders, &self.t.status)
            .iter()
            .map(|v| format!("{}→{}", str_of(&v["from_status"]), str_of(&v["to_status"])))
            .collect()
    }

    /// What the order went through: its status changes, how its saga ended and its steps.
    fn assert_story(&mut self, transitions: &[&str], outcome: &str, steps: &[&str]) {
        assert_eq!(self.transitions(), transitions);
        let (got, taken) = self.ended();
        assert_eq!(
            (got.as_str(), taken),
            (outcome, steps.iter().map(|s| s.to_string()).collect())
        );
    }

    /// The stock service's reservation of `order`.
    fn reservation(&mut self, order: &str) -> Option<Value> {
        stored(&mut self.stock, &format!("reservation/{order}"))
    }

    /// The one saga-ended event: (outcome, steps).
    fn ended(&mut self) -> (String, Vec<String>) {
        let ended = bodies(&mut self.orders, &self.t.saga_events);
        assert_eq!(ended.len(), 1, "one saga-ended per saga: {ended:?}");
        let steps = ended[0]["steps"].as_array().expect("steps");
        (
            str_of(&ended[0]["outcome"]),
            steps.iter().map(str_of).collect(),
        )
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn with_every_service_up_the_order_is_reserved_charged_and_shipped() {
    let mut shop = Shop::new(never_fail());
    shop.place("o-1", "c-1");

    shop.assert_story(
        &["PLACED→PAID", "PAID→SHIPPED"],
        "COMPLETED",
        &["reserve", "charge", "ship"],
    );
    assert_eq!(shop.reservation("o-1"), Some(json!("shipped")));
    let charge = stored(&mut shop.payment, "charge/o-1").expect("charged");
    assert_eq!(charge["outcome"], "OK");
    let order = stored(&mut shop.orders, "order/o-1").expect("order");
    assert_eq!(
        (order["status"].as_str(), order["version"].as_u64()),
        (Some("SHIPPED"), Some(3))
    );

    // The read model: one view per update, the last one shows the shipped total.
    let c = shop.t.customers.clone();
    let views = bodies(&mut shop.customers, &c);
    assert_eq!(views.len(), 3, "placed, paid, shipped");
    assert_eq!(views[2]["orders"]["o-1"]["status"], "SHIPPED");
    assert_eq!(views[2]["shipped_total_minor"], 1299);
    assert_eq!(
        stored(&mut shop.customers, "customer/c-1"),
        Some(views[2].clone())
    );
    for d in [
        shop.orders.summary(),
        shop.stock.summary(),
        shop.payment.summary(),
    ] {
        assert_eq!(d.dead_lettered, 0);
    }
}

#[test]
fn out_of_stock_cancels_the_order_with_nothing_to_compensate() {
    let mut shop = Shop::new(FailureRates {
        stock_failure_rate: 1.0,
        ..never_fail()
    });
    shop.place("o-1", "c-1");

    shop.assert_story(&["PLACED→CANCELLED"], "COMPENSATED", &["reserve"]);
    assert_eq!(shop.reservation("o-1"), Some(json!("rejected")));
    assert_eq!(
        stored(&mut shop.payment, "charge/o-1"),
        None,
        "never charged"
    );
}

#[test]
fn a_declined_payment_releases_the_reserved_stock_and_cancels() {
    let mut shop = Shop::new(FailureRates {
        payment_failure_rate: 1.0,
        ..never_fail()
    });
    shop.place("o-1", "c-1");

    shop.assert_story(
        &["PLACED→CANCELLED"],
        "COMPENSATED",
        &["reserve", "charge", "release"],
    );
    assert_eq!(shop.reservation("o-1"), Some(json!("released")));
    let order = stored(&mut shop.orders, "order/o-1").expect("order");
    assert_eq!(order["status"], "CANCELLED");
}

#[test]
fn a_failed_shipment_is_tried_again_until_it_ships() {
    let rate = 0.5;
    // An order whose first shipping attempt fails and second succeeds (the draw is a hash).
    let id = (0..1000)
        .map(|i| format!("o-{i}"))
        .find(|o| draw(o, "ship", 1) < rate && draw(o, "ship", 2) >= rate)
        .expect("such an order id");
    let mut shop = Shop::new(FailureRates {
        ship_failure_rate: rate,
        ..never_fail()
    });
    shop.place(&id, "c-1");

    let steps = ["reserve", "charge", "ship", "ship#2"];
    shop.assert_story(&["PLACED→PAID", "PAID→SHIPPED"], "COMPLETED", &steps);
}

#[test]
fn a_release_that_keeps_failing_ends_the_saga_with_an_alert_in_the_replies_dlt() {
    let mut shop = Shop::new(FailureRates {
        payment_failure_rate: 1.0,
        release_failure_rate: 1.0,
        ..never_fail()
    });
    shop.place("o-1", "c-1");

    let steps = ["reserve", "charge", "release", "release#2", "release#3"];
    shop.assert_story(&["PLACED→CANCELLED"], "COMPENSATION_FAILED", &steps);
    let alert = dead_letters(&mut shop.orders, &shop.t.replies);
    assert_eq!(
        alert.len(),
        1,
        "the last failed release reply, for an operator"
    );
    assert_eq!(alert[0].dlt_class(), Some("permanent"));
    let reason = alert[0].dlt_reason().unwrap_or_default();
    assert!(
        reason.starts_with("compensation-failed: releasing the stock of order o-1 failed 3 times"),
        "{reason}"
    );
    assert_eq!(
        shop.reservation("o-1"),
        Some(json!("reserved")),
        "still held"
    );
}

#[test]
fn a_customer_can_cancel_while_stock_is_reserved_but_not_once_payment_is_in_flight() {
    let t = topics();
    let mut d = orders();
    place(&mut d, "o-1", "c-1", "e-1");
    cancel(&mut d, "o-1", "e-2");
    let changes = bodies(&mut d, &t.status);
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (
            changes[0]["from_status"].as_str(),
            changes[0]["to_status"].as_str()
        ),
        (Some("PLACED"), Some("CANCELLED"))
    );
    let release = bodies(&mut d, &t.stock);
    assert_eq!(
        release
            .iter()
            .map(|c| str_of(&c["action"]))
            .collect::<Vec<_>>(),
        ["RESERVE", "RELEASE"]
    );

    // o-2's stock is reserved and its charge requested: the pivot is near, a cancel is refused.
    let mut shop = Shop::new(never_fail());
    let e = event(types::ORDER_PLACED_V2, "o-2", &placed("o-2", "c-2"), "e-3");
    shop.orders.pipe(e).expect("pipe");
    let to_stock = shop.t.stock.clone();
    shuttle(&mut shop.orders, "orders", &to_stock, &mut shop.stock);
    let replies = shop.t.replies.clone();
    shuttle(&mut shop.stock, "stock", &replies, &mut shop.orders);
    cancel(&mut shop.orders, "o-2", "e-4");
    let dead = dead_letters(&mut shop.orders, &shop.t.orders);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
    let reason = dead[0].dlt_reason().unwrap_or_default();
    assert!(
        reason.starts_with("impossible-transition: order o-2 is Placed; order-cancelled"),
        "{reason}"
    );
    assert!(reason.contains("payment is in flight"), "{reason}");
    assert_eq!(dead[0].key_text(), "o-2");
    assert_eq!(
        support::body(&dead[0]),
        cancelled("o-2"),
        "the event as it came in"
    );
    shop.settle();
    assert_eq!(shop.ended().0, "COMPLETED", "the saga went on");
}
