//! Saga timeouts on the drivers: a step whose reply never comes is compensated before the
//! pivot and alerted (and tried again) after it; a release that goes unanswered counts as a
//! failed release; a reply that comes after its timeout changes nothing but is reported; a
//! reply in time cancels its timeout. The drivers' wall clocks only move when a test moves
//! them, so "no reply for 30 s" is one call.

use std::time::Duration;

use eosflow::processor::{Application, ProcessorSpec, TimerKind};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow_orders::aggregate::OrderProcessor;
use eosflow_orders::messages::types;
use eosflow_orders::saga::TIMER_NAME;
use eosflow_orders::services::{delivery, Delivery, PaymentService, StockService};
use eosflow_orders::{FailureRates, SagaTimeouts, Topics};
use serde_json::{json, Value};

use crate::support::*;

/// The order processor's default timeout of every step.
const TIMEOUT: Duration = Duration::from_millis(30_000);

/// The order processor and the two services, each on its own driver, wired by their topics.
struct Wired {
    t: Topics,
    orders: TopologyTestDriver<ProcessorSpec<OrderProcessor>>,
    stock: TopologyTestDriver<ProcessorSpec<StockService>>,
    payment: TopologyTestDriver<ProcessorSpec<PaymentService>>,
}

impl Wired {
    fn new(stock_rates: FailureRates, payment_rates: FailureRates) -> Self {
        Self {
            t: topics(),
            orders: orders(),
            stock: stock(stock_rates),
            payment: payment(payment_rates),
        }
    }

    /// Carries commands and replies until nothing moves.
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
    }

    /// Moves every driver's clock on by `by` (due timers fire), then settles.
    fn wait(&mut self, by: Duration) {
        self.orders.advance_wall_clock(by).expect("orders clock");
        self.stock.advance_wall_clock(by).expect("stock clock");
        self.payment.advance_wall_clock(by).expect("payment clock");
        self.settle();
    }
}

/// The saga's pending timeouts, as their keys (`reserve#1/o-1`).
fn saga_timers<P: Application>(d: &mut TopologyTestDriver<P>) -> Vec<String> {
    d.pending_timers(0)
        .expect("timers")
        .into_iter()
        .filter(|t| t.kind == TimerKind::WallClock && t.name == TIMER_NAME)
        .map(|t| String::from_utf8_lossy(&t.key).to_string())
        .collect()
}

/// The one saga-ended event: (outcome, steps).
fn ended(d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>) -> (String, Vec<String>) {
    let ended = bodies(d, &topics().saga_events);
    assert_eq!(ended.len(), 1, "one saga-ended per saga: {ended:?}");
    let steps = ended[0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect();
    (
        ended[0]["outcome"].as_str().unwrap_or_default().to_string(),
        steps,
    )
}

fn transitions(d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>) -> Vec<String> {
    bodies(d, &topics().status)
        .iter()
        .map(|v| {
            format!(
                "{}→{}",
                v["from_status"].as_str().unwrap_or_default(),
                v["to_status"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The reasons of the replies' dead letters.
fn alerts(d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>) -> Vec<String> {
    dead_letters(d, &topics().replies)
        .iter()
        .map(|r| r.dlt_reason().unwrap_or_default().to_string())
        .collect()
}

/// `action #attempt` of every stock command `d` sent.
fn stock_commands(d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>) -> Vec<String> {
    bodies(d, &topics().stock)
        .iter()
        .map(|c| {
            format!(
                "{} #{}",
                c["action"].as_str().unwrap_or_default(),
                c["attempt"]
            )
        })
        .collect()
}

/// A service's reply as the broker delivers it to the order processor.
fn reply(type_name: &str, order: &str, body: Value, id: &str) -> TestRecord {
    TestRecord::new(
        topics().replies,
        Some(order),
        Some(serde_json::to_vec(&body).expect("json")),
    )
    .id(id)
    .header("type", type_name)
}

fn stock_reply(order: &str, action: &str, attempt: u32, id: &str) -> TestRecord {
    let body = json!({"order_id": order, "action": action, "attempt": attempt, "outcome": "OK"});
    reply(types::STOCK_REPLY, order, body, id)
}

/// An order id whose calls are delivered as `want` says at `rates` (the draw is a hash).
fn order_where(rates: &FailureRates, want: &[(&str, u32, Delivery)]) -> String {
    (0..10_000)
        .map(|i| format!("o-{i}"))
        .find(|o| {
            want.iter()
                .all(|(step, attempt, d)| delivery(rates, o, step, *attempt) == *d)
        })
        .expect("such an order id")
}

#[test]
fn a_reservation_whose_reply_is_lost_is_released_after_its_timeout_and_the_order_cancelled() {
    let lossy = FailureRates {
        lost_reply_rate: 0.5,
        ..never_fail()
    };
    let id = order_where(
        &lossy,
        &[
            ("reserve", 1, Delivery::Lost),
            ("release", 1, Delivery::Now),
        ],
    );
    let mut w = Wired::new(lossy, never_fail());
    place(&mut w.orders, &id, "c-1", "e-1");
    w.settle();
    assert_eq!(
        stored(&mut w.stock, &format!("reservation/{id}")),
        Some(json!("reserved")),
        "the stock service reserved; only its answer was lost"
    );
    assert_eq!(saga_timers(&mut w.orders), [format!("reserve#1/{id}")]);

    w.wait(TIMEOUT - Duration::from_millis(1));
    assert_eq!(
        saga_timers(&mut w.orders),
        [format!("reserve#1/{id}")],
        "not yet"
    );
    assert!(transitions(&mut w.orders).is_empty());
    w.wait(Duration::from_millis(1));
    assert_eq!(transitions(&mut w.orders), ["PLACED→CANCELLED"]);
    assert_eq!(
        ended(&mut w.orders),
        (
            "COMPENSATED".into(),
            vec![
                "reserve".into(),
                "timeout:reserve#1".into(),
                "release".into()
            ]
        )
    );
    assert_eq!(
        stored(&mut w.stock, &format!("reservation/{id}")),
        Some(json!("released"))
    );
    assert!(
        saga_timers(&mut w.orders).is_empty(),
        "nothing left pending"
    );
    assert!(
        stored(&mut w.payment, &format!("charge/{id}")).is_none(),
        "never charged"
    );
    assert!(alerts(&mut w.orders).is_empty());
}

#[test]
fn a_reply_after_the_timeout_is_reported_and_changes_nothing() {
    let t = topics();
    let mut d = orders();
    place(&mut d, "o-1", "c-1", "e-1");
    d.advance_wall_clock(TIMEOUT).expect("clock");
    assert_eq!(stock_commands(&mut d), ["RESERVE #1", "RELEASE #1"]);
    // The reservation's reply comes late, before the release's: the saga is releasing anyway.
    d.pipe(stock_reply("o-1", "RESERVE", 1, "late-1"))
        .expect("pipe");
    assert!(stock_commands(&mut d).is_empty(), "no second release");
    assert!(transitions(&mut d).is_empty());
    let reasons = alerts(&mut d);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("late-reply: the reserve#1 reply (stock Reserve #1 Ok) for order o-1 came after its timeout fired"),
        "{}",
        reasons[0]
    );
    d.pipe(stock_reply("o-1", "RELEASE", 1, "r-1"))
        .expect("pipe");
    assert_eq!(transitions(&mut d), ["PLACED→CANCELLED"]);
    let (outcome, steps) = ended(&mut d);
    assert_eq!(outcome, "COMPENSATED");
    assert_eq!(
        steps,
        ["reserve", "timeout:reserve#1", "release", "late:reserve#1"]
    );
    // Once more after the end: reported again, nothing else; the saga stays ended.
    d.pipe(stock_reply("o-1", "RESERVE", 1, "late-2"))
        .expect("pipe");
    assert_eq!(alerts(&mut d).len(), 1);
    assert!(d.read_raw_output(&t.saga_events).is_empty());
    assert!(d.read_raw_output(&t.status).is_empty());
    assert!(stock_commands(&mut d).is_empty());
    assert_eq!(d.summary().dead_lettered, 0, "no input failed");
}

#[test]
fn a_charge_that_times_out_is_voided_and_its_late_success_refunded() {
    let slow = FailureRates {
        late_reply_rate: 1.0,
        late_reply_delay_ms: 60_000,
        ..never_fail()
    };
    let mut w = Wired::new(never_fail(), slow);
    place(&mut w.orders, "o-1", "c-1", "e-1");
    w.settle();
    assert_eq!(saga_timers(&mut w.orders), ["charge#1/o-1"]);
    assert_eq!(
        stored(&mut w.payment, "charge/o-1").map(|c| c["outcome"].clone()),
        Some(json!("OK")),
        "charged; the answer is on its way, slowly"
    );

    w.wait(TIMEOUT);
    assert_eq!(
        stored(&mut w.payment, "void/o-1"),
        Some(json!("refunded")),
        "the void refunds the charge nobody heard of"
    );
    assert_eq!(transitions(&mut w.orders), ["PLACED→CANCELLED"]);
    assert_eq!(
        ended(&mut w.orders).1,
        ["reserve", "charge", "timeout:charge#1", "release"]
    );
    assert_eq!(
        stored(&mut w.stock, "reservation/o-1"),
        Some(json!("released"))
    );

    // The charge's answer arrives, 60 s after it was made: late, reported, nothing else.
    w.wait(Duration::from_secs(30));
    let reasons = alerts(&mut w.orders);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("late-reply: the charge#1 reply (payment Ok)"),
        "{}",
        reasons[0]
    );
    assert!(transitions(&mut w.orders).is_empty(), "never paid");
    let saga = stored(&mut w.orders, "saga/o-1").expect("saga");
    assert_eq!(
        saga["steps"].as_array().and_then(|s| s.last()),
        Some(&json!("late:charge#1"))
    );
}

#[test]
fn a_void_before_the_charge_blocks_it() {
    let t = topics();
    let mut p = payment(never_fail());
    let cmd = |action: &str, id: &str| {
        let body = json!({"order_id": "o-1", "customer_id": "c-1", "amount_minor": 1299,
                          "currency": "EUR", "action": action});
        TestRecord::new(
            t.payment.clone(),
            Some("o-1"),
            Some(serde_json::to_vec(&body).expect("json")),
        )
        .id(id)
        .header("type", types::PAYMENT_COMMAND)
    };
    p.pipe(cmd("VOID", "c-1")).expect("pipe");
    assert!(
        p.read_raw_output(&t.replies).is_empty(),
        "a void is not answered"
    );
    assert_eq!(stored(&mut p, "void/o-1"), Some(json!("blocked")));
    p.pipe(cmd("CHARGE", "c-2")).expect("pipe");
    let replies = bodies(&mut p, &t.replies);
    assert_eq!(replies.len(), 1);
    assert_eq!(
        replies[0]["outcome"], "REJECTED",
        "voided first: never charged"
    );
}

#[test]
fn past_the_pivot_a_shipment_that_times_out_is_alerted_and_shipped_again() {
    let lossy = FailureRates {
        lost_reply_rate: 0.5,
        ..never_fail()
    };
    let id = order_where(
        &lossy,
        &[
            ("reserve", 1, Delivery::Now),
            ("ship", 1, Delivery::Lost),
            ("ship", 2, Delivery::Now),
        ],
    );
    let mut w = Wired::new(lossy, never_fail());
    place(&mut w.orders, &id, "c-1", "e-1");
    w.settle();
    assert_eq!(transitions(&mut w.orders), ["PLACED→PAID"]);
    assert_eq!(saga_timers(&mut w.orders), [format!("ship#1/{id}")]);

    w.wait(TIMEOUT);
    let reasons = alerts(&mut w.orders);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with(&format!(
            "ship-timeout: order {id} is paid but shipment attempt 1 got no answer"
        )),
        "{}",
        reasons[0]
    );
    assert_eq!(
        transitions(&mut w.orders),
        ["PAID→SHIPPED"],
        "never cancelled"
    );
    assert_eq!(
        ended(&mut w.orders),
        (
            "COMPLETED".into(),
            ["reserve", "charge", "ship", "timeout:ship#1", "ship#2"]
                .map(String::from)
                .to_vec()
        )
    );
    assert!(saga_timers(&mut w.orders).is_empty());
}

#[test]
fn a_release_that_is_never_answered_is_retried_then_alerted() {
    let mut d = orders();
    place(&mut d, "o-1", "c-1", "e-1");
    for _ in 0..4 {
        d.advance_wall_clock(TIMEOUT).expect("clock");
    }
    assert_eq!(
        stock_commands(&mut d),
        ["RESERVE #1", "RELEASE #1", "RELEASE #2", "RELEASE #3"]
    );
    assert_eq!(transitions(&mut d), ["PLACED→CANCELLED"]);
    let (outcome, steps) = ended(&mut d);
    assert_eq!(outcome, "COMPENSATION_FAILED");
    assert_eq!(
        steps,
        [
            "reserve",
            "timeout:reserve#1",
            "release",
            "timeout:release#1",
            "release#2",
            "timeout:release#2",
            "release#3",
            "timeout:release#3"
        ]
    );
    let dead = dead_letters(&mut d, &topics().replies);
    assert_eq!(dead.len(), 1);
    let reason = dead[0].dlt_reason().unwrap_or_default();
    assert!(
        reason.starts_with("compensation-failed: releasing the stock of order o-1 failed 3 times (attempt 3 timed out)"),
        "{reason}"
    );
    assert_eq!(dead[0].key_text(), "o-1");
    assert!(saga_timers(&mut d).is_empty());
}

#[test]
fn a_reply_in_time_cancels_its_timeout_so_nothing_fires_later() {
    let mut w = Wired::new(never_fail(), never_fail());
    place(&mut w.orders, "o-1", "c-1", "e-1");
    w.settle();
    assert_eq!(ended(&mut w.orders).0, "COMPLETED");
    assert!(saga_timers(&mut w.orders).is_empty());
    w.orders.read_raw_output(&w.t.status);
    w.orders.read_raw_output(&w.t.feed);
    w.wait(TIMEOUT * 10);
    assert!(
        w.orders.pending_outputs().is_empty(),
        "nothing fires: {:?}",
        w.orders.pending_outputs()
    );
}

#[test]
fn each_step_has_its_own_configurable_timeout() {
    let c = config(eosflow_orders::Topology::Orders);
    let p = OrderProcessor::with_schemas(topics(), &c.app.id, schemas())
        .expect("processor")
        .with_timeouts(SagaTimeouts {
            reserve_timeout_ms: 1_000,
            ..SagaTimeouts::uniform(60_000)
        })
        .spec();
    let mut d = driver(eosflow_orders::Topology::Orders, p);
    place(&mut d, "o-1", "c-1", "e-1");
    let start = d.wall_clock_ms();
    let due: Vec<i64> = d
        .pending_timers(0)
        .expect("timers")
        .iter()
        .map(|t| t.due_ms)
        .collect();
    assert_eq!(due, [start + 1_000]);
    d.advance_wall_clock(Duration::from_secs(1)).expect("clock");
    assert_eq!(stock_commands(&mut d), ["RESERVE #1", "RELEASE #1"]);
    let due: Vec<i64> = d
        .pending_timers(0)
        .expect("timers")
        .iter()
        .map(|t| t.due_ms)
        .collect();
    assert_eq!(due, [start + 1_000 + 60_000], "the release's own timeout");
}
