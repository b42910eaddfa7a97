//! The orders application's contracts, compiled in: the Avro schemas of `schemas/orders` and
//! `schemas/fulfilment` as a [`Catalog`] (so its processors need no schema directory at run
//! time), and the upcasters that bring older versions up to what the processors are written for.
//! The core codec knows none of this; it decodes with whatever catalog and upcasters it is given.

use apache_avro::types::Value;
use eosflow::contracts::{Catalog, CatalogError, Upcasters};

/// The contracts, by path under `schemas/` (which names each type) and text.
const SCHEMAS: &[(&str, &str)] = &[
    (
        "orders/order-placed.v1.avsc",
        include_str!("../../../schemas/orders/order-placed.v1.avsc"),
    ),
    (
        "orders/order-placed.v2.avsc",
        include_str!("../../../schemas/orders/order-placed.v2.avsc"),
    ),
    (
        "orders/order-paid.v1.avsc",
        include_str!("../../../schemas/orders/order-paid.v1.avsc"),
    ),
    (
        "orders/order-shipped.v1.avsc",
        include_str!("../../../schemas/orders/order-shipped.v1.avsc"),
    ),
    (
        "orders/order-cancelled.v1.avsc",
        include_str!("../../../schemas/orders/order-cancelled.v1.avsc"),
    ),
    (
        "orders/order-status-changed.v1.avsc",
        include_str!("../../../schemas/orders/order-status-changed.v1.avsc"),
    ),
    (
        "orders/customer-order-updated.v1.avsc",
        include_str!("../../../schemas/orders/customer-order-updated.v1.avsc"),
    ),
    (
        "fulfilment/stock-command.v1.avsc",
        include_str!("../../../schemas/fulfilment/stock-command.v1.avsc"),
    ),
    (
        "fulfilment/stock-reply.v1.avsc",
        include_str!("../../../schemas/fulfilment/stock-reply.v1.avsc"),
    ),
    (
        "fulfilment/payment-command.v1.avsc",
        include_str!("../../../schemas/fulfilment/payment-command.v1.avsc"),
    ),
    (
        "fulfilment/payment-reply.v1.avsc",
        include_str!("../../../schemas/fulfilment/payment-reply.v1.avsc"),
    ),
    (
        "fulfilment/saga-ended.v1.avsc",
        include_str!("../../../schemas/fulfilment/saga-ended.v1.avsc"),
    ),
];

/// The application's contracts (`schemas/orders`, `schemas/fulfilment`) as built in.
///
/// ```
/// let c = eosflow_orders::contracts::catalog()?;
/// let v2 = c.get("orders.order-placed.v2").expect("built in");
/// assert_eq!(v2.previous_type().as_deref(), Some("orders.order-placed.v1"));
/// # Ok::<(), eosflow::contracts::CatalogError>(())
/// ```
pub fn catalog() -> Result<Catalog, CatalogError> {
    Catalog::from_texts(SCHEMAS.iter().copied())
}

/// The upcasters of the orders domain: `orders.order-placed.v1` → v2.
pub fn upcasters() -> Upcasters {
    let mut u = Upcasters::new();
    u.register(
        "orders.order-placed.v1",
        "orders.order-placed.v2",
        order_placed_v1_to_v2,
    );
    u
}

/// `orders.order-placed.v1` → v2: v2 adds `channel` (optional), unknown for v1 orders.
pub fn order_placed_v1_to_v2(v: Value) -> Result<Value, String> {
    match v {
        Value::Record(mut fields) => {
            if !fields.iter().any(|(n, _)| n == "channel") {
                fields.push(("channel".into(), Value::Union(0, Box::new(Value::Null))));
            }
            Ok(Value::Record(fields))
        }
        other => Err(format!("expected a record, got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosflow::contracts::{check, Rule, SubjectStrategy};

    fn schemas_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas")
    }

    #[test]
    fn the_built_in_contracts_are_the_schemas_directory() {
        let on_disk = Catalog::from_dir(&schemas_dir()).expect("schemas/ loads");
        let built = catalog().expect("built-ins load");
        let a: Vec<_> = on_disk.iter().map(|c| &c.type_name).collect();
        let b: Vec<_> = built.iter().map(|c| &c.type_name).collect();
        assert_eq!(
            a, b,
            "add new schemas to SCHEMAS in crates/orders/src/contracts.rs"
        );
        for c in built.iter() {
            let disk = on_disk.get(&c.type_name).expect("same types");
            assert_eq!(c.text, disk.text, "{} differs from its file", c.type_name);
        }
        let v2 = built.get("orders.order-placed.v2").expect("v2");
        assert_eq!(
            SubjectStrategy::TopicRecord.subject("orders", v2),
            "orders-orders.v2.OrderPlaced"
        );
    }

    #[test]
    fn every_contract_is_backward_compatible_with_its_previous_version() {
        let cat = catalog().expect("catalog");
        for c in cat.iter() {
            if let Some(prev) = c.previous_type().and_then(|p| cat.get(&p)) {
                let reasons = check(Rule::Backward, &c.text, &prev.text).expect("JSON schemas");
                assert!(reasons.is_empty(), "{}: {reasons:?}", c.type_name);
            }
        }
    }

    #[test]
    fn a_v1_placement_upcasts_to_a_valid_v2_with_no_channel() {
        let cat = catalog().expect("catalog");
        let v1 = Value::Record(vec![
            ("order_id".into(), Value::String("o-1".into())),
            ("customer_id".into(), Value::String("c-1".into())),
            ("placed_at".into(), Value::TimestampMillis(1)),
            ("currency".into(), Value::String("EUR".into())),
            ("total_minor".into(), Value::Long(1250)),
            (
                "lines".into(),
                Value::Array(vec![Value::Record(vec![
                    ("sku".into(), Value::String("sku-1".into())),
                    ("quantity".into(), Value::Int(2)),
                    ("unit_price_minor".into(), Value::Long(625)),
                ])]),
            ),
        ]);
        let (t, v2) = upcasters()
            .apply("orders.order-placed.v1", v1)
            .expect("upcasts");
        assert_eq!(t, "orders.order-placed.v2");
        let schema =
            apache_avro::Schema::parse_str(&cat.get("orders.order-placed.v2").expect("v2").text)
                .expect("parses");
        assert!(
            v2.validate(&schema),
            "the upcast value is a valid v2 record"
        );
        let e = upcasters()
            .apply("orders.order-placed.v1", Value::Null)
            .expect_err("not a record");
        assert!(
            e.to_string()
                .starts_with("upcast-failed: orders.order-placed.v1"),
            "{e}"
        );
    }
}
