//! What the order processor does with input it cannot use (each kind dead-lettered with its
//! reason, good records behind it unaffected), with the schema registry down (the retry
//! ladder, and the order's later events waiting behind it), and with re-sent events (dedup by
//! the business event id).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eosflow::serdes::{FixedSource, SchemaSource, SourceError};
use eosflow::testing::TestRecord;
use eosflow_orders::messages::types;
use serde_json::json;

use crate::support::*;

/// The registry as the processor sees it: the writer schemas of [`schemas`], unreachable while
/// `up` is false (a transient failure, as a refused connection or a timeout is).
struct Registry {
    up: Arc<AtomicBool>,
    schemas: FixedSource,
}

impl SchemaSource for Registry {
    fn schema(&mut self, id: u32) -> Result<String, SourceError> {
        if self.up.load(Ordering::SeqCst) {
            self.schemas.schema(id)
        } else {
            Err(SourceError::Unavailable("connection refused".into()))
        }
    }
}

#[test]
fn each_kind_of_bad_order_event_is_dead_lettered_with_its_reason_and_good_ones_flow() {
    let t = topics();
    let mut d = orders();
    let mut bad_payload = placed("o-6", "c-1");
    bad_payload.as_object_mut().expect("object").remove("lines");
    let mut untyped = event(types::ORDER_PLACED_V2, "o-8", &placed("o-8", "c-1"), "e-8");
    untyped.headers.retain(|(k, _)| k != "type");
    let mut unknown_id = avro_event(
        types::ORDER_PLACED_V2,
        PLACED_V2_ID,
        "o-9",
        &placed("o-9", "c-1"),
        "e-9",
    );
    if let Some(v) = unknown_id.value.as_mut() {
        v[1..5].copy_from_slice(&99u32.to_be_bytes());
    }
    let mut wrong_total = placed("o-3", "c-1");
    wrong_total["total_minor"] = json!(1);
    let paid = json!({"order_id": "o-7", "paid_at": 1, "payment_id": "p-1", "currency": "EUR", "amount_minor": 1299});
    let cases: Vec<(TestRecord, &str)> = vec![
        (
            event(types::ORDER_CANCELLED, "o-1", &cancelled("o-1"), "e-1"),
            "unknown-order: order-cancelled for order o-1, which was never placed",
        ),
        (
            event(types::ORDER_PLACED_V2, "o-3", &wrong_total, "e-3"),
            "invalid-order: order o-3: total_minor 1 is not the sum of the lines (1299)",
        ),
        (
            event(types::ORDER_PLACED_V2, "o-4", &placed("o-5", "c-1"), "e-4"),
            "key-mismatch: the record's key \"o-4\" is not its order id \"o-5\"",
        ),
        (
            event(types::ORDER_PLACED_V2, "o-6", &bad_payload, "e-6"),
            "bad-payload: orders.order-placed.v2 does not match its contract",
        ),
        (
            event(types::ORDER_PAID, "o-7", &paid, "e-7"),
            "not-accepted: order-paid for order o-7 is decided by the fulfilment saga",
        ),
        (
            untyped,
            "untyped-json: a JSON payload needs a `type` header",
        ),
        (unknown_id, "unknown-schema-id: schema id 99"),
        (
            event(
                "orders.order-refunded.v1",
                "o-10",
                &json!({"order_id": "o-10"}),
                "e-10",
            ),
            "unknown-type: orders.order-refunded.v1",
        ),
        (
            TestRecord::new(t.orders.clone(), Some("o-11"), None::<Vec<u8>>)
                .header("event_id", "e-11"),
            "missing-value:",
        ),
        (
            TestRecord::new(t.orders.clone(), None::<Vec<u8>>, Some(b"{}".to_vec()))
                .header("event_id", "e-12"),
            "null-key:",
        ),
    ];
    let n = cases.len();
    for (record, _) in &cases {
        d.pipe(record.clone()).expect("pipe");
    }
    place(&mut d, "o-2", "c-1", "e-2");

    let dead = dead_letters(&mut d, &t.orders);
    assert_eq!(dead.len(), n);
    for (r, (sent, reason)) in dead.iter().zip(&cases) {
        let got = r.dlt_reason().unwrap_or_default();
        assert!(got.starts_with(reason), "expected {reason:?}, got {got:?}");
        assert_eq!(r.dlt_class(), Some("permanent"), "{got}");
        assert_eq!(
            r.header("eosflow.dlt.original.topic"),
            Some(t.orders.as_str())
        );
        assert_eq!(
            (&r.key, &r.value),
            (&sent.key, &sent.value),
            "the record as it came in"
        );
    }
    assert_eq!(d.summary().dead_lettered, n as u64);
    assert_eq!(d.summary().retried, 0, "bad input is never retried");
    assert_eq!(
        keys(&mut d, &t.stock),
        ["o-2"],
        "only the good order reached the saga"
    );
    assert_eq!(stored(&mut d, "order/o-3"), None);
}

#[test]
fn bad_replies_are_dead_lettered_on_the_replies_dlt() {
    let t = topics();
    let mut d = orders();
    let reply = |typ: &str, key: &str, v: serde_json::Value, id: &str| {
        TestRecord::new(
            t.replies.clone(),
            Some(key),
            Some(serde_json::to_vec(&v).expect("json")),
        )
        .id(id)
        .header("type", typ)
    };
    let ok = json!({"order_id": "o-1", "action": "RESERVE", "attempt": 1, "outcome": "OK"});
    d.pipe(reply(types::STOCK_REPLY, "o-1", ok, "r-1"))
        .expect("pipe");
    d.pipe(reply("fulfilment.refund-reply.v1", "o-1", json!({}), "r-2"))
        .expect("pipe");
    d.pipe(reply(
        types::PAYMENT_REPLY,
        "o-1",
        json!({"order_id": 5}),
        "r-3",
    ))
    .expect("pipe");
    let reasons: Vec<String> = dead_letters(&mut d, &t.replies)
        .iter()
        .map(|r| r.dlt_reason().unwrap_or_default().to_string())
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].starts_with("unknown-saga: a reply for order o-1, which has no saga"),
        "{}",
        reasons[0]
    );
    assert!(reasons[1].starts_with("unknown-type:"), "{}", reasons[1]);
    assert!(
        reasons[2].starts_with("bad-payload: fulfilment.payment-reply.v1"),
        "{}",
        reasons[2]
    );
}

#[test]
fn with_the_registry_down_an_avro_event_climbs_the_retry_ladder_and_its_order_waits() {
    let t = topics();
    let up = Arc::new(AtomicBool::new(false));
    let mut d = orders_with(Registry {
        up: up.clone(),
        schemas: schemas(),
    });
    let start = d.wall_clock_ms();
    place_avro(&mut d, "o-1", "c-1", "e-1");
    let retry = d.read_raw_output(&format!("{}.retry.1", t.orders));
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].retry_attempt(), Some(1));
    assert_eq!(
        retry[0].due_at(),
        Some(start + 1_000),
        "the first level waits 1 s"
    );
    assert!(d.read_raw_output(&t.stock).is_empty());

    // The customer cancels before the placement got through: the cancel must not overtake it
    // (it would be dead-lettered as an unknown order); it waits behind it.
    cancel(&mut d, "o-1", "e-2");
    assert_eq!(d.summary().parked_followers, 1);
    // Another order is not held up (JSON needs no registry).
    place(&mut d, "o-2", "c-2", "e-3");
    assert_eq!(keys(&mut d, &t.stock), ["o-2"]);

    up.store(true, Ordering::SeqCst);
    d.advance_wall_clock(Duration::from_millis(999))
        .expect("advance");
    assert!(d.read_raw_output(&t.stock).is_empty(), "not due yet");
    d.advance_wall_clock(Duration::from_millis(1))
        .expect("advance");
    let commands = bodies(&mut d, &t.stock);
    let actions: Vec<String> = commands
        .iter()
        .map(|c| c["action"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        actions,
        ["RESERVE", "RELEASE"],
        "placed, then the waiting cancel"
    );
    let order = stored(&mut d, "order/o-1").expect("order");
    assert_eq!(order["status"], "CANCELLED");
    assert_eq!(d.summary().dead_lettered, 0);
}

#[test]
fn a_registry_down_for_the_whole_ladder_dead_letters_the_event_as_transient_exhausted() {
    let t = topics();
    let up = Arc::new(AtomicBool::new(false));
    let mut d = orders_with(Registry {
        up,
        schemas: schemas(),
    });
    place_avro(&mut d, "o-1", "c-1", "e-1");
    for (secs, level) in [(1, 2), (10, 3)] {
        d.advance_wall_clock(Duration::from_secs(secs))
            .expect("advance");
        let r = d.read_raw_output(&format!("{}.retry.{level}", t.orders));
        assert_eq!(r.len(), 1, "level {level}");
    }
    d.advance_wall_clock(Duration::from_secs(60))
        .expect("advance");
    let dead = dead_letters(&mut d, &t.orders);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("transient-exhausted"));
    let reason = dead[0].dlt_reason().unwrap_or_default();
    assert!(
        reason.contains("schema registry unavailable: connection refused"),
        "{reason}"
    );
    assert_eq!(d.summary().retried, 3);
}

#[test]
fn a_re_sent_event_is_dropped_by_its_event_id_and_a_reused_id_is_a_conflict() {
    let t = topics();
    let mut d = orders();
    let first = event(types::ORDER_PLACED_V2, "o-1", &placed("o-1", "c-1"), "e-1");
    d.pipe(first.clone()).expect("pipe");
    // The order service re-sends it: a new outbox row, the same business event.
    let mut again = first.clone();
    again.headers.retain(|(k, _)| k != "id");
    d.pipe(again.id("row-e-1-resent")).expect("pipe");
    assert_eq!(d.summary().dedup_hits, 1);
    assert_eq!(d.read_raw_output(&t.stock).len(), 1, "reserved once");

    // The same event id on another payload: not a duplicate, a bug upstream.
    let mut other = placed("o-1", "c-1");
    other["channel"] = json!("app");
    d.pipe(event(types::ORDER_PLACED_V2, "o-1", &other, "e-1"))
        .expect("pipe");
    // A second placement of the order under a new event id: refused by the aggregate.
    place(&mut d, "o-1", "c-1", "e-2");
    let dead = dead_letters(&mut d, &t.orders);
    let got: Vec<(Option<&str>, &str)> = dead
        .iter()
        .map(|r| (r.dlt_class(), r.dlt_reason().unwrap_or_default()))
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, Some("id-conflict"));
    assert!(
        got[0].1.contains("message id e-1 was processed before"),
        "{}",
        got[0].1
    );
    assert_eq!(got[1].0, Some("permanent"));
    assert!(
        got[1]
            .1
            .starts_with("duplicate-order: order o-1 was already placed"),
        "{}",
        got[1].1
    );
    assert!(d.read_raw_output(&t.stock).is_empty());
}
