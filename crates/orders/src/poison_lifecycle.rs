//! The `order-lifecycle` topology, the fault suite's `poison` target — not the reference
//! application (that is [`crate::aggregate`]: the order aggregate with its saga). Avro order
//! events (Confluent-framed, schemas from the registry) decoded through the contracts decoder,
//! a per-order status machine in state (PLACED → PAID → SHIPPED, PLACED|PAID → CANCELLED), one
//! JSON output per accepted event.
//!
//! As the `poison` target, every kind of bad input must reach the DLT with its reason, illegal
//! transitions are permanent failures, and an order's `customer_id` can ask the handler to
//! misbehave (`poison:panic`, `poison:transient:<k>`, `poison:always-transient`).

use apache_avro::types::Value;
use serde::{Deserialize, Serialize};

use eosflow::contracts::{Decoder, Limits, Payload};
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
use eosflow::serdes::{Registry, RegistrySource};

/// Largest value the topology accepts (bigger is `oversize` bad input).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Per-order state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleState {
    /// PLACED, PAID, SHIPPED or CANCELLED.
    pub status: String,
    /// Accepted events for the order.
    pub events: i64,
}

/// What one output record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderOutput {
    /// The input's message id.
    pub id: String,
    /// The event type after upcasting.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The order's status after the event.
    pub status: String,
    /// Accepted events for the order so far.
    pub events: i64,
}

/// Why building the topology failed.
#[derive(Debug, thiserror::Error)]
pub enum PoisonLifecycleError {
    /// The built-in contracts did not load.
    #[error("loading the built-in contracts: {0}")]
    Catalog(String),
    /// The registry client could not be built.
    #[error("schema registry client: {0}")]
    Registry(#[from] std::io::Error),
}

/// The handler.
pub struct PoisonLifecycleProcessor {
    decoder: Decoder,
    output: String,
}

impl PoisonLifecycleProcessor {
    /// Emits to `output`; writer schemas come from the registry at `registry_url`.
    pub fn new(
        registry_url: &str,
        output: impl Into<String>,
    ) -> Result<Self, PoisonLifecycleError> {
        let catalog = crate::contracts::catalog()
            .map_err(|e| PoisonLifecycleError::Catalog(e.to_string()))?;
        let source = RegistrySource::new(Registry::new(registry_url))?;
        let decoder = Decoder::new(source, catalog)
            .with_upcasters(crate::contracts::upcasters())
            .with_limits(Limits {
                max_value_bytes: MAX_VALUE_BYTES,
                require_key: true,
                allow_json: true,
            });
        Ok(Self {
            decoder,
            output: output.into(),
        })
    }
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn string(fields: &[(String, Value)], name: &str) -> String {
    match field(fields, name) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Enum(_, s)) => s.clone(),
        _ => String::new(),
    }
}

/// The `poison:*` markers of an order's `customer_id`.
fn misbehave(customer: &str, record: &Record<'_>) -> Result<(), ProcessError> {
    let Some(marker) = customer.strip_prefix("poison:") else {
        return Ok(());
    };
    let attempt = i64::from(record.attempt());
    if marker == "panic" {
        panic!("poison:panic marker: the handler panics on purpose");
    }
    if marker == "always-transient" {
        return Err(ProcessError::transient(format!(
            "simulated outage that never ends (attempt {})",
            attempt + 1
        )));
    }
    if let Some(k) = marker.strip_prefix("transient:") {
        let k: i64 = k.parse().unwrap_or(i64::MAX);
        if attempt < k {
            return Err(ProcessError::transient(format!(
                "simulated outage (attempt {} of the {k} that fail)",
                attempt + 1
            )));
        }
    }
    Ok(())
}

/// The next status, or why the event is not allowed now.
fn transition(
    type_name: &str,
    fields: &[(String, Value)],
    current: Option<&str>,
    record: &Record<'_>,
) -> Result<&'static str, ProcessError> {
    let illegal = |what: &str| {
        ProcessError::permanent(format!(
            "illegal-transition: {what} for an order that is {}",
            current.unwrap_or("unknown")
        ))
    };
    match type_name {
        "orders.order-placed.v2" => {
            misbehave(&string(fields, "customer_id"), record)?;
            if let Some(Value::Array(lines)) = field(fields, "lines") {
                for line in lines {
                    if let Value::Record(l) = line {
                        if let Some(Value::Int(q)) = field(l, "quantity") {
                            if *q < 1 {
                                return Err(ProcessError::permanent(format!(
                                    "invalid-order: a line has quantity {q}, at least 1 is required"
                                )));
                            }
                        }
                    }
                }
            }
            match current {
                None => Ok("PLACED"),
                Some(_) => Err(illegal("order-placed")),
            }
        }
        "orders.order-paid.v1" => match current {
            Some("PLACED") => Ok("PAID"),
            _ => Err(illegal("order-paid")),
        },
        "orders.order-shipped.v1" => match current {
            Some("PAID") => Ok("SHIPPED"),
            _ => Err(illegal("order-shipped")),
        },
        "orders.order-cancelled.v1" => match current {
            Some("PLACED" | "PAID") => Ok("CANCELLED"),
            _ => Err(illegal("order-cancelled")),
        },
        "orders.order-status-changed.v1" => {
            let from = string(fields, "from_status");
            let to = string(fields, "to_status");
            if current != Some(from.as_str()) {
                return Err(illegal(&format!("status-changed from {from}")));
            }
            match (from.as_str(), to.as_str()) {
                ("PLACED", "PAID") => Ok("PAID"),
                ("PAID", "SHIPPED") => Ok("SHIPPED"),
                ("PLACED" | "PAID", "CANCELLED") => Ok("CANCELLED"),
                _ => Err(illegal(&format!("status-changed {from} → {to}"))),
            }
        }
        other => Err(ProcessError::permanent(format!(
            "unhandled-type: {other} is a known contract this topology does not handle"
        ))),
    }
}

impl Processor for PoisonLifecycleProcessor {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let event = self.decoder.decode(record)?;
        let Payload::Avro(Value::Record(fields)) = &event.payload else {
            return Err(ProcessError::permanent(
                "json-not-accepted: the orders topology reads Avro events only",
            ));
        };
        let key = record
            .key
            .ok_or_else(|| ProcessError::permanent("null-key: orders are keyed by order id"))?;
        let mut state: Option<LifecycleState> = match ctx.get(key)? {
            Some(b) => Some(serde_json::from_slice(&b).map_err(|e| {
                ProcessError::permanent(format!("stored order state is corrupt: {e}"))
            })?),
            None => None,
        };
        let next = transition(
            &event.type_name,
            fields,
            state.as_ref().map(|s| s.status.as_str()),
            record,
        )?;
        let s = state.get_or_insert(LifecycleState {
            status: String::new(),
            events: 0,
        });
        s.status = next.to_string();
        s.events += 1;
        let bytes = serde_json::to_vec(&*s).map_err(ProcessError::permanent)?;
        ctx.put(key, bytes);
        let id = ctx
            .message_id()
            .map(|i| String::from_utf8_lossy(i).to_string())
            .unwrap_or_else(|| format!("{}-{}-{}", record.topic, record.partition, record.offset));
        let out = OrderOutput {
            id: id.clone(),
            type_name: event.type_name.clone(),
            status: s.status.clone(),
            events: s.events,
        };
        let value = serde_json::to_vec(&out).map_err(ProcessError::permanent)?;
        ctx.emit(
            self.output.clone(),
            Some(key.to_vec()),
            Some(value),
            vec![("causation_id".into(), id.into_bytes())],
        );
        Ok(())
    }
}

impl PoisonLifecycleProcessor {
    /// The processor as it runs: its lifecycles in the `orders` store.
    pub fn spec(self) -> ProcessorSpec<Self> {
        ProcessorSpec::new(self).store_name("orders")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(headers: &'a [(String, Vec<u8>)]) -> Record<'a> {
        Record {
            topic: "t",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: Some(b"o1"),
            value: Some(b""),
            headers,
        }
    }

    fn placed(customer: &str, quantity: i32) -> Vec<(String, Value)> {
        vec![
            ("customer_id".into(), Value::String(customer.into())),
            (
                "lines".into(),
                Value::Array(vec![Value::Record(vec![(
                    "quantity".into(),
                    Value::Int(quantity),
                )])]),
            ),
        ]
    }

    #[test]
    fn the_lifecycle_moves_forward_and_refuses_what_does_not_follow() {
        let r = record(&[]);
        let p = "orders.order-placed.v2";
        assert_eq!(transition(p, &placed("c", 1), None, &r), Ok("PLACED"));
        assert_eq!(
            transition("orders.order-paid.v1", &[], Some("PLACED"), &r),
            Ok("PAID")
        );
        assert_eq!(
            transition("orders.order-shipped.v1", &[], Some("PAID"), &r),
            Ok("SHIPPED")
        );
        for (t, current) in [
            ("orders.order-paid.v1", None),
            ("orders.order-shipped.v1", Some("PLACED")),
            ("orders.order-cancelled.v1", Some("SHIPPED")),
            (p, Some("PLACED")),
        ] {
            let e = transition(t, &placed("c", 1), current, &r).unwrap_err();
            assert!(
                matches!(&e, ProcessError::Permanent(m) if m.starts_with("illegal-transition:")),
                "{t} from {current:?}: {e:?}"
            );
        }
        let changed = vec![
            ("from_status".into(), Value::Enum(1, "PAID".into())),
            ("to_status".into(), Value::Enum(2, "SHIPPED".into())),
        ];
        assert!(transition(
            "orders.order-status-changed.v1",
            &changed,
            Some("PLACED"),
            &r
        )
        .is_err());
        assert_eq!(
            transition("orders.order-status-changed.v1", &changed, Some("PAID"), &r),
            Ok("SHIPPED")
        );
    }

    #[test]
    fn markers_fail_transiently_until_the_attempt_and_a_zero_quantity_is_permanent() {
        let p = "orders.order-placed.v2";
        let first = record(&[]);
        let e = transition(p, &placed("poison:transient:1", 1), None, &first).unwrap_err();
        assert!(matches!(e, ProcessError::Transient(_)), "{e:?}");
        let h = vec![(eosflow::record::ATTEMPT_HEADER.to_string(), b"1".to_vec())];
        let retried = record(&h);
        assert_eq!(
            transition(p, &placed("poison:transient:1", 1), None, &retried),
            Ok("PLACED")
        );
        let e = transition(p, &placed("poison:always-transient", 1), None, &retried).unwrap_err();
        assert!(matches!(e, ProcessError::Transient(_)), "{e:?}");
        let e = transition(p, &placed("c", 0), None, &first).unwrap_err();
        assert!(
            matches!(&e, ProcessError::Permanent(m) if m.starts_with("invalid-order:")),
            "{e:?}"
        );
    }
}
