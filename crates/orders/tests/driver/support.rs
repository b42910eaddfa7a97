//! What every driver test needs: the application's topics and configuration under one
//! namespace, a driver per processor, order events in their wire formats, and a shuttle that
//! carries one driver's outputs to the next, as the broker would.

use std::collections::HashMap;

use apache_avro::Schema;
use eosflow::internals::codec::decode::encode_wire;
use eosflow::processor::{Application, ProcessorSpec};
use eosflow::serdes::{FixedSource, SchemaSource};
use eosflow::testing::{OutputRecord, TestRecord, TopologyTestDriver};
use eosflow::Config;
use eosflow_orders::aggregate::{OrderProcessor, EVENT_ID_HEADER};
use eosflow_orders::messages::types;
use eosflow_orders::projection::CustomersProcessor;
use eosflow_orders::services::{PaymentService, StockService};
use eosflow_orders::{configure, contracts, FailureRates, Topics, Topology};
use serde_json::{json, Value};

/// The topic namespace of every test: `shop.orders`, `shop.stock-commands`, …
pub const NS: &str = "shop";

/// Schema ids of the Avro contracts in [`schemas`], as a registry would have assigned them.
pub const PLACED_V1_ID: u32 = 1;
/// `orders.order-placed.v2`.
pub const PLACED_V2_ID: u32 = 2;

/// The topics under [`NS`].
pub fn topics() -> Topics {
    Topics::new(NS)
}

/// The configuration `eosflow run --topology <t>` would use (group `shop-<t>`, its inputs).
pub fn config(t: Topology) -> Config {
    let mut base = Config::default();
    base.app.id = NS.into();
    configure(&base, t, &topics())
}

/// A driver for `processor`, configured as topology `t`.
pub fn driver<P: Application>(t: Topology, processor: P) -> TopologyTestDriver<P> {
    TopologyTestDriver::with_config(processor, config(t)).expect("driver")
}

/// The writer schemas the registry would hold for the order events, by id.
pub fn schemas() -> FixedSource {
    let c = contracts::catalog().expect("contracts");
    let text = |t: &str| c.get(t).expect("contract").text.clone();
    FixedSource(HashMap::from([
        (PLACED_V1_ID, text(types::ORDER_PLACED_V1)),
        (PLACED_V2_ID, text(types::ORDER_PLACED_V2)),
    ]))
}

/// The order processor, its writer schemas from `source`.
pub fn orders_with(
    source: impl SchemaSource + 'static,
) -> TopologyTestDriver<ProcessorSpec<OrderProcessor>> {
    let c = config(Topology::Orders);
    let p = OrderProcessor::with_schemas(topics(), &c.app.id, source).expect("processor");
    driver(Topology::Orders, p.spec())
}

/// The order processor with the Avro contracts of [`schemas`].
pub fn orders() -> TopologyTestDriver<ProcessorSpec<OrderProcessor>> {
    orders_with(schemas())
}

/// Failure rates of zero: every service call succeeds.
pub fn never_fail() -> FailureRates {
    FailureRates {
        stock_failure_rate: 0.0,
        payment_failure_rate: 0.0,
        ship_failure_rate: 0.0,
        release_failure_rate: 0.0,
        lost_reply_rate: 0.0,
        late_reply_rate: 0.0,
        late_reply_delay_ms: 0,
    }
}

/// The stock service failing at `rates`.
pub fn stock(rates: FailureRates) -> TopologyTestDriver<ProcessorSpec<StockService>> {
    driver(Topology::Stock, StockService::new(topics(), rates).spec())
}

/// The payment service failing at `rates`.
pub fn payment(rates: FailureRates) -> TopologyTestDriver<ProcessorSpec<PaymentService>> {
    driver(
        Topology::Payment,
        PaymentService::new(topics(), rates).spec(),
    )
}

/// The customers read model.
pub fn customers() -> TopologyTestDriver<ProcessorSpec<CustomersProcessor>> {
    driver(
        Topology::Customers,
        CustomersProcessor::new(topics()).spec(),
    )
}

/// `orders.order-placed.v2` as the order service writes it: two lines, total 1299.
pub fn placed(order: &str, customer: &str) -> Value {
    json!({
        "order_id": order, "customer_id": customer, "placed_at": 1_700_000_000_000_i64,
        "currency": "EUR", "total_minor": 1299,
        "lines": [
            {"sku": "sku-1", "quantity": 2, "unit_price_minor": 150},
            {"sku": "sku-2", "quantity": 1, "unit_price_minor": 999}
        ],
        "channel": "web"
    })
}

/// `orders.order-cancelled.v1` at the customer's request.
pub fn cancelled(order: &str) -> Value {
    json!({"order_id": order, "cancelled_at": 1_700_000_001_000_i64,
           "reason": "CUSTOMER_REQUEST", "note": null})
}

/// An order event as the outbox router publishes a JSON row: keyed by order id, headers `id`
/// (the outbox row), `type` and the business `event_id`.
pub fn event(type_name: &str, key: &str, payload: &Value, event_id: &str) -> TestRecord {
    TestRecord::new(
        topics().orders,
        Some(key),
        Some(serde_json::to_vec(payload).expect("json")),
    )
    .id(&format!("row-{event_id}"))
    .header("type", type_name)
    .header(EVENT_ID_HEADER, event_id)
}

/// The same event as the outbox router encodes it with `payload_format = "avro"`: the JSON
/// read as the contract's Avro (the router's own function), Confluent-framed under `id`.
pub fn avro_event(
    type_name: &str,
    id: u32,
    key: &str,
    payload: &Value,
    event_id: &str,
) -> TestRecord {
    let c = contracts::catalog().expect("contracts");
    let schema = Schema::parse_str(&c.get(type_name).expect("contract").text).expect("schema");
    let bytes = serde_json::to_vec(payload).expect("json");
    let value = eosflow_outbox::avro::to_avro(&bytes, &schema).expect("fits its contract");
    let wire = encode_wire(id, &schema, value).expect("encodes");
    TestRecord::new(topics().orders, Some(key), Some(wire))
        .id(&format!("row-{event_id}"))
        .header("type", type_name)
        .header(EVENT_ID_HEADER, event_id)
}

/// A record's value as JSON.
pub fn body(r: &OutputRecord) -> Value {
    serde_json::from_slice(r.value.as_deref().unwrap_or_default()).expect("a JSON value")
}

/// A JSON value from a processor's default store.
pub fn stored<P: Application>(d: &mut TopologyTestDriver<P>, key: &str) -> Option<Value> {
    d.state_get(key.as_bytes())
        .expect("store read")
        .map(|b| serde_json::from_slice(&b).expect("stored JSON"))
}

/// Carries everything `from` wrote to `topic` into `to`, as the broker would deliver it. Each
/// driver numbers its output ids from 1 (the runtime draws random UUIDs), so the shuttle
/// prefixes them with `app`, the writer's name, to keep them as unique as they are in
/// production. Returns how many records it carried.
pub fn shuttle<A: Application, B: Application>(
    from: &mut TopologyTestDriver<A>,
    app: &str,
    topic: &str,
    to: &mut TopologyTestDriver<B>,
) -> usize {
    let records = from.read_raw_output(topic);
    for r in &records {
        let headers = r
            .headers
            .iter()
            .map(|(k, v)| {
                let v = if k == "id" {
                    [app.as_bytes(), b"-".as_slice(), v.as_slice()].concat()
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect();
        to.pipe(TestRecord {
            topic: topic.to_string(),
            partition: 0,
            key: r.key.clone(),
            value: r.value.clone(),
            headers,
            timestamp: None,
        })
        .expect("pipe");
    }
    records.len()
}

/// Everything `d` wrote to `topic`, as JSON values.
pub fn bodies<P: Application>(d: &mut TopologyTestDriver<P>, topic: &str) -> Vec<Value> {
    d.read_raw_output(topic).iter().map(body).collect()
}

/// Pipes the order service's JSON placement of `order` by `customer` under `event_id`.
pub fn place(
    d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>,
    order: &str,
    customer: &str,
    event_id: &str,
) {
    d.pipe(event(
        types::ORDER_PLACED_V2,
        order,
        &placed(order, customer),
        event_id,
    ))
    .expect("pipe");
}

/// The keys of everything `d` wrote to `topic`, in order.
pub fn keys<P: Application>(d: &mut TopologyTestDriver<P>, topic: &str) -> Vec<String> {
    d.read_raw_output(topic)
        .iter()
        .map(OutputRecord::key_text)
        .collect()
}

/// The dead letters of input `topic` (`<topic>.DLT`).
pub fn dead_letters<P: Application>(
    d: &mut TopologyTestDriver<P>,
    topic: &str,
) -> Vec<OutputRecord> {
    d.read_raw_output(&format!("{topic}.DLT"))
}

/// Pipes the Avro (v2, [`PLACED_V2_ID`]) placement of `order` by `customer` under `event_id`.
pub fn place_avro(
    d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>,
    order: &str,
    customer: &str,
    event_id: &str,
) {
    let e = avro_event(
        types::ORDER_PLACED_V2,
        PLACED_V2_ID,
        order,
        &placed(order, customer),
        event_id,
    );
    d.pipe(e).expect("pipe");
}

/// Pipes the customer's cancel of `order` under `event_id`.
pub fn cancel(
    d: &mut TopologyTestDriver<ProcessorSpec<OrderProcessor>>,
    order: &str,
    event_id: &str,
) {
    d.pipe(event(
        types::ORDER_CANCELLED,
        order,
        &cancelled(order),
        event_id,
    ))
    .expect("pipe");
}
