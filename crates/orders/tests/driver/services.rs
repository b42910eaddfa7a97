//! The stock and payment services and the customers read model on their own drivers: what
//! they answer on the replies topic, what they remember per order, and how they treat repeated,
//! stale and malformed input.

use eosflow::testing::TestRecord;
use eosflow_orders::messages::types;
use eosflow_orders::FailureRates;
use serde_json::{json, Value};

use crate::support::*;

fn command(topic: &str, typ: &str, v: Value, id: &str) -> TestRecord {
    let key = v["order_id"].as_str().unwrap_or_default().to_string();
    TestRecord::new(
        topic,
        Some(key),
        Some(serde_json::to_vec(&v).expect("json")),
    )
    .id(id)
    .header("type", typ)
}

fn stock_command(action: &str, attempt: u32, id: &str) -> TestRecord {
    let v = json!({"order_id": "o-1", "action": action, "attempt": attempt,
                   "lines": [{"sku": "sku-1", "quantity": 1, "unit_price_minor": 100}]});
    command(&topics().stock, types::STOCK_COMMAND, v, id)
}

#[test]
fn the_stock_service_reserves_ships_and_never_releases_twice() {
    let t = topics();
    let mut d = stock(never_fail());
    for (i, (action, attempt)) in [
        ("RESERVE", 1),
        ("RESERVE", 1),
        ("RELEASE", 1),
        ("RELEASE", 2),
        ("SHIP", 1),
    ]
    .into_iter()
    .enumerate()
    {
        d.pipe(stock_command(action, attempt, &format!("c-{i}")))
            .expect("pipe");
    }
    let replies = d.read_raw_output(&t.replies);
    assert!(replies
        .iter()
        .all(|r| r.key_text() == "o-1" && r.header("type") == Some(types::STOCK_REPLY)));
    let answers: Vec<(String, String)> = replies
        .iter()
        .map(body)
        .map(|v| {
            (
                v["action"].as_str().unwrap_or_default().into(),
                v["outcome"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    let expected = [
        ("RESERVE", "OK"),
        ("RESERVE", "OK"),
        ("RELEASE", "OK"),
        ("RELEASE", "OK"),
        ("SHIP", "FAILED"),
    ];
    assert_eq!(
        answers,
        expected.map(|(a, o)| (a.to_string(), o.to_string()))
    );
    assert_eq!(
        body(&replies[4])["reason"],
        "nothing reserved to ship",
        "released goods do not ship"
    );
    assert_eq!(
        stored(&mut d, "reservation/o-1"),
        Some(json!("released")),
        "released once, still released"
    );
}

#[test]
fn the_stock_service_answers_out_of_stock_at_its_failure_rate_and_keeps_that_answer() {
    let t = topics();
    let mut d = stock(FailureRates {
        stock_failure_rate: 1.0,
        ..never_fail()
    });
    d.pipe(stock_command("RESERVE", 1, "c-1")).expect("pipe");
    d.pipe(stock_command("RESERVE", 1, "c-2")).expect("pipe");
    let replies = bodies(&mut d, &t.replies);
    assert_eq!(replies.len(), 2);
    for r in &replies {
        assert_eq!(r["outcome"], "REJECTED");
        assert!(
            r["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("out of stock"),
            "{r}"
        );
    }
    assert_eq!(stored(&mut d, "reservation/o-1"), Some(json!("rejected")));
}

#[test]
fn the_payment_service_charges_an_order_once_and_repeats_its_answer() {
    let t = topics();
    let mut d = payment(never_fail());
    let charge =
        json!({"order_id": "o-1", "customer_id": "c-1", "amount_minor": 1299, "currency": "EUR"});
    d.pipe(command(
        &t.payment,
        types::PAYMENT_COMMAND,
        charge.clone(),
        "p-1",
    ))
    .expect("pipe");
    d.pipe(command(&t.payment, types::PAYMENT_COMMAND, charge, "p-2"))
        .expect("pipe");
    let replies = bodies(&mut d, &t.replies);
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0]["outcome"], "OK");
    assert!(replies[0]["payment_id"]
        .as_str()
        .unwrap_or_default()
        .starts_with("pay-"));
    assert_eq!(
        replies[0], replies[1],
        "the order id is the idempotency key"
    );
    assert_eq!(stored(&mut d, "charge/o-1"), Some(replies[0].clone()));
}

#[test]
fn a_service_dead_letters_a_command_it_does_not_understand() {
    let t = topics();
    let mut d = payment(never_fail());
    let wrong = command(
        &t.payment,
        types::STOCK_COMMAND,
        json!({"order_id": "o-1"}),
        "p-1",
    );
    let broken = command(
        &t.payment,
        types::PAYMENT_COMMAND,
        json!({"order_id": "o-1"}),
        "p-2",
    );
    d.pipe(wrong).expect("pipe");
    d.pipe(broken).expect("pipe");
    let dead = dead_letters(&mut d, &t.payment);
    let reasons: Vec<&str> = dead
        .iter()
        .map(|r| r.dlt_reason().unwrap_or_default())
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(
        reasons[0].starts_with("unknown-type: expected fulfilment.payment-command.v1"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1]
            .starts_with("bad-payload: fulfilment.payment-command.v1 does not match its contract"),
        "{}",
        reasons[1]
    );
    assert!(dead.iter().all(|r| r.dlt_class() == Some("permanent")));
    assert!(d.read_raw_output(&t.replies).is_empty());
}

fn update(order: &str, status: &str, version: u64) -> TestRecord {
    let v = json!({"customer_id": "c-1", "order_id": order, "status": status,
                   "version": version, "total_minor": 500});
    TestRecord::new(
        topics().feed,
        Some("c-1"),
        Some(serde_json::to_vec(&v).expect("json")),
    )
    .header("type", types::CUSTOMER_ORDER_UPDATED)
}

#[test]
fn the_read_model_applies_newer_updates_and_ignores_replayed_or_late_ones() {
    let t = topics();
    let mut d = customers();
    for r in [
        update("o-1", "PLACED", 1),
        update("o-1", "SHIPPED", 3),
        update("o-1", "PAID", 2),
        update("o-1", "SHIPPED", 3),
        update("o-2", "PLACED", 1),
    ] {
        d.pipe(r).expect("pipe");
    }
    let views = bodies(&mut d, &t.customers);
    assert_eq!(
        views.len(),
        3,
        "the late PAID and the replayed SHIPPED change nothing"
    );
    let last = &views[2];
    assert_eq!(last["orders"]["o-1"]["status"], "SHIPPED");
    assert_eq!(last["orders"]["o-2"]["status"], "PLACED");
    assert_eq!(last["shipped_total_minor"], 500);
    assert_eq!(stored(&mut d, "customer/c-1").as_ref(), Some(last));

    d.pipe(
        TestRecord::new(t.feed.clone(), Some("c-1"), Some(b"{}".to_vec()))
            .header("type", types::STATUS_CHANGED),
    )
    .expect("pipe");
    let dead = dead_letters(&mut d, &t.feed);
    assert_eq!(dead.len(), 1);
    assert!(dead[0]
        .dlt_reason()
        .unwrap_or_default()
        .starts_with("unknown-type: expected orders.customer-order-updated.v1"));
}
