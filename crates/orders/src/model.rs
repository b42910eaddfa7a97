//! The order aggregate: its events (the `orders` contracts), its states and the transition
//! rules. placed → paid → shipped, or placed → cancelled; anything else is a [`Rejection`]
//! with a stable code and a reason a person can act on.

use apache_avro::types::Value as Avro;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::messages::types;
use eosflow::contracts::{Event, Payload};

/// Lifecycle states of an order (the `OrderStatus` enum of the contracts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Placed by the customer, fulfilment running.
    Placed,
    /// Payment captured (the saga passed its pivot).
    Paid,
    /// Handed to the carrier: final.
    Shipped,
    /// Will not be fulfilled: final.
    Cancelled,
}

impl OrderStatus {
    /// Shipped and cancelled end an order.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Shipped | Self::Cancelled)
    }
}

/// One product line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Stock keeping unit.
    pub sku: String,
    /// Units, at least 1.
    pub quantity: i32,
    /// Price of one unit, minor units.
    pub unit_price_minor: i64,
}

/// `orders.order-placed.v2` (v1 has no `channel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPlaced {
    /// The order (the key).
    pub order_id: String,
    /// Who placed it.
    pub customer_id: String,
    /// When, ms since the epoch.
    pub placed_at: i64,
    /// ISO 4217.
    pub currency: String,
    /// Sum of the lines, minor units.
    pub total_minor: i64,
    /// What was ordered.
    pub lines: Vec<Line>,
    /// web, app, store; absent in v1.
    #[serde(default)]
    pub channel: Option<String>,
}

/// `orders.order-cancelled.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCancelled {
    /// The order.
    pub order_id: String,
    /// When, ms since the epoch.
    pub cancelled_at: i64,
    /// `CUSTOMER_REQUEST`, `PAYMENT_FAILED`, `OUT_OF_STOCK`, `FRAUD_SUSPECTED`, `OTHER`.
    pub reason: String,
    /// Free text.
    #[serde(default)]
    pub note: Option<String>,
}

/// `orders.order-paid.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPaid {
    /// The order.
    pub order_id: String,
    /// When, ms since the epoch.
    pub paid_at: i64,
    /// The provider's reference.
    pub payment_id: String,
    /// ISO 4217.
    pub currency: String,
    /// Captured amount.
    pub amount_minor: i64,
}

/// `orders.order-shipped.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderShipped {
    /// The order.
    pub order_id: String,
    /// When, ms since the epoch.
    pub shipped_at: i64,
    /// Who carries it.
    pub carrier: String,
    /// The carrier's reference.
    pub tracking_number: String,
}

/// Something that happened to an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderEvent {
    /// Placed.
    Placed(OrderPlaced),
    /// Paid.
    Paid(OrderPaid),
    /// Shipped.
    Shipped(OrderShipped),
    /// Cancelled.
    Cancelled(OrderCancelled),
}

impl OrderEvent {
    /// The order it is about.
    pub fn order_id(&self) -> &str {
        match self {
            Self::Placed(e) => &e.order_id,
            Self::Paid(e) => &e.order_id,
            Self::Shipped(e) => &e.order_id,
            Self::Cancelled(e) => &e.order_id,
        }
    }

    /// Its contract's short name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Placed(_) => "order-placed",
            Self::Paid(_) => "order-paid",
            Self::Shipped(_) => "order-shipped",
            Self::Cancelled(_) => "order-cancelled",
        }
    }
}

/// The aggregate as kept in state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order.
    pub order_id: String,
    /// Who placed it.
    pub customer_id: String,
    /// Where it is in its life.
    pub status: OrderStatus,
    /// 1 after placement, +1 per transition: orders the read model's updates.
    pub version: u64,
    /// ISO 4217.
    pub currency: String,
    /// Total, minor units.
    pub total_minor: i64,
    /// What was ordered.
    pub lines: Vec<Line>,
}

/// Why an event cannot be applied. Every variant is permanent: retrying cannot change it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The event itself is malformed.
    #[error("invalid-order: order {order_id}: {reason}")]
    Invalid {
        /// The order.
        order_id: String,
        /// What is wrong.
        reason: String,
    },
    /// An event about an order that was never placed.
    #[error("unknown-order: {event} for order {order_id}, which was never placed")]
    Unknown {
        /// The order.
        order_id: String,
        /// The event's name.
        event: &'static str,
    },
    /// A second placement of an existing order under another event id.
    #[error("duplicate-order: order {order_id} was already placed (now {status:?}); a second order-placed with a new event id is refused")]
    Duplicate {
        /// The order.
        order_id: String,
        /// Its status.
        status: OrderStatus,
    },
    /// The transition is not in placed → paid → shipped / placed → cancelled.
    #[error("impossible-transition: order {order_id} is {from:?}; {event} is not allowed from there ({why})")]
    Impossible {
        /// The order.
        order_id: String,
        /// Its status.
        from: OrderStatus,
        /// The event refused.
        event: &'static str,
        /// Why.
        why: &'static str,
    },
}

/// Checks a placement: lines present, quantities ≥ 1, prices ≥ 0, total = sum of lines.
pub fn validate(p: &OrderPlaced) -> Result<(), Rejection> {
    let bad = |reason: String| Rejection::Invalid {
        order_id: p.order_id.clone(),
        reason,
    };
    if p.order_id.trim().is_empty() || p.customer_id.trim().is_empty() {
        return Err(bad("order_id and customer_id must not be empty".into()));
    }
    if p.currency.len() != 3 || !p.currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(bad(format!(
            "currency {:?} is not an ISO 4217 code",
            p.currency
        )));
    }
    if p.lines.is_empty() {
        return Err(bad("an order needs at least one line".into()));
    }
    let mut sum: i64 = 0;
    for (i, l) in p.lines.iter().enumerate() {
        if l.quantity < 1 {
            return Err(bad(format!(
                "line {i} ({}) has quantity {}, at least 1 is needed",
                l.sku, l.quantity
            )));
        }
        if l.unit_price_minor < 0 {
            return Err(bad(format!("line {i} ({}) has a negative price", l.sku)));
        }
        sum = sum.saturating_add(l.unit_price_minor.saturating_mul(i64::from(l.quantity)));
    }
    if sum != p.total_minor {
        return Err(bad(format!(
            "total_minor {} is not the sum of the lines ({sum})",
            p.total_minor
        )));
    }
    Ok(())
}

/// Applies `event` to the order's current state (`None`: never placed); the new state or why not.
pub fn apply(current: Option<&Order>, event: &OrderEvent) -> Result<Order, Rejection> {
    let Some(order) = current else {
        return match event {
            OrderEvent::Placed(p) => {
                validate(p)?;
                Ok(Order {
                    order_id: p.order_id.clone(),
                    customer_id: p.customer_id.clone(),
                    status: OrderStatus::Placed,
                    version: 1,
                    currency: p.currency.clone(),
                    total_minor: p.total_minor,
                    lines: p.lines.clone(),
                })
            }
            other => Err(Rejection::Unknown {
                order_id: other.order_id().to_string(),
                event: other.name(),
            }),
        };
    };
    use OrderStatus::*;
    let to = match (order.status, event) {
        (_, OrderEvent::Placed(_)) => {
            return Err(Rejection::Duplicate {
                order_id: order.order_id.clone(),
                status: order.status,
            })
        }
        (Placed, OrderEvent::Paid(_)) => Paid,
        (Paid, OrderEvent::Shipped(_)) => Shipped,
        (Placed, OrderEvent::Cancelled(_)) => Cancelled,
        (from, e) => {
            let why = match (from, e) {
                (Placed, OrderEvent::Shipped(_)) => "an order ships only after it is paid",
                (Paid, OrderEvent::Paid(_)) => "it is already paid",
                (Paid, OrderEvent::Cancelled(_)) => {
                    "a paid order is past the saga's pivot: it can only ship"
                }
                (Shipped, _) => "a shipped order is final",
                (Cancelled, _) => "a cancelled order is final",
                _ => "not in placed → paid → shipped / placed → cancelled",
            };
            return Err(Rejection::Impossible {
                order_id: order.order_id.clone(),
                from,
                event: e.name(),
                why,
            });
        }
    };
    Ok(Order {
        status: to,
        version: order.version + 1,
        ..order.clone()
    })
}

/// Turns a decoded record (JSON or Avro, any known version) into an order event; an unknown
/// type or a payload that does not fit its contract is bad input.
pub fn from_event(e: &Event) -> Result<OrderEvent, String> {
    let json = match &e.payload {
        Payload::Json(j) => j.clone(),
        Payload::Avro(v) => avro_to_json(v),
    };
    let field_err = |t: &str, err: serde_json::Error| {
        format!("bad-payload: {t} does not match its contract: {err}")
    };
    let t = e.type_name.as_str();
    Ok(match t {
        types::ORDER_PLACED_V1 | types::ORDER_PLACED_V2 => {
            OrderEvent::Placed(serde_json::from_value(json).map_err(|err| field_err(t, err))?)
        }
        types::ORDER_CANCELLED => {
            OrderEvent::Cancelled(serde_json::from_value(json).map_err(|err| field_err(t, err))?)
        }
        types::ORDER_PAID => {
            OrderEvent::Paid(serde_json::from_value(json).map_err(|err| field_err(t, err))?)
        }
        types::ORDER_SHIPPED => {
            OrderEvent::Shipped(serde_json::from_value(json).map_err(|err| field_err(t, err))?)
        }
        other => {
            return Err(format!(
                "unknown-type: {other} is not an order event this processor handles"
            ))
        }
    })
}

/// An Avro value as the JSON its record would be written as (unions unwrapped, enums as
/// their symbol, timestamps as numbers).
pub fn avro_to_json(v: &Avro) -> Json {
    match v {
        Avro::Null => Json::Null,
        Avro::Boolean(b) => Json::Bool(*b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Json::from(*i),
        Avro::Long(i)
        | Avro::TimestampMillis(i)
        | Avro::TimestampMicros(i)
        | Avro::TimeMicros(i)
        | Avro::LocalTimestampMillis(i)
        | Avro::LocalTimestampMicros(i) => Json::from(*i),
        Avro::Float(f) => Json::from(f64::from(*f)),
        Avro::Double(f) => Json::from(*f),
        Avro::String(s) | Avro::Enum(_, s) => Json::String(s.clone()),
        Avro::Uuid(u) => Json::String(u.to_string()),
        Avro::Union(_, inner) => avro_to_json(inner),
        Avro::Array(items) => Json::Array(items.iter().map(avro_to_json).collect()),
        Avro::Map(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), avro_to_json(v)))
                .collect(),
        ),
        Avro::Record(fields) => Json::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), avro_to_json(v)))
                .collect(),
        ),
        other => Json::String(format!("{other:?}")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn placed(id: &str) -> OrderPlaced {
        OrderPlaced {
            order_id: id.into(),
            customer_id: "c-1".into(),
            placed_at: 1,
            currency: "EUR".into(),
            total_minor: 2 * 150 + 999,
            lines: vec![
                Line {
                    sku: "sku-1".into(),
                    quantity: 2,
                    unit_price_minor: 150,
                },
                Line {
                    sku: "sku-2".into(),
                    quantity: 1,
                    unit_price_minor: 999,
                },
            ],
            channel: Some("web".into()),
        }
    }

    fn paid(id: &str) -> OrderEvent {
        OrderEvent::Paid(OrderPaid {
            order_id: id.into(),
            paid_at: 2,
            payment_id: "p".into(),
            currency: "EUR".into(),
            amount_minor: 1299,
        })
    }

    fn shipped(id: &str) -> OrderEvent {
        OrderEvent::Shipped(OrderShipped {
            order_id: id.into(),
            shipped_at: 3,
            carrier: "c".into(),
            tracking_number: "t".into(),
        })
    }

    fn cancelled(id: &str) -> OrderEvent {
        OrderEvent::Cancelled(OrderCancelled {
            order_id: id.into(),
            cancelled_at: 4,
            reason: "CUSTOMER_REQUEST".into(),
            note: None,
        })
    }

    #[test]
    fn the_happy_path_moves_placed_paid_shipped_and_counts_versions() {
        let o = apply(None, &OrderEvent::Placed(placed("o-1"))).expect("placed");
        assert_eq!((o.status, o.version), (OrderStatus::Placed, 1));
        let o = apply(Some(&o), &paid("o-1")).expect("paid");
        assert_eq!((o.status, o.version), (OrderStatus::Paid, 2));
        let o = apply(Some(&o), &shipped("o-1")).expect("shipped");
        assert_eq!((o.status, o.version), (OrderStatus::Shipped, 3));
        assert!(o.status.is_final());
    }

    #[test]
    fn a_placed_order_can_be_cancelled_but_a_paid_or_final_one_cannot() {
        let placed_o = apply(None, &OrderEvent::Placed(placed("o-1"))).expect("placed");
        let c = apply(Some(&placed_o), &cancelled("o-1")).expect("cancel from placed");
        assert_eq!(c.status, OrderStatus::Cancelled);
        let paid_o = apply(Some(&placed_o), &paid("o-1")).expect("paid");
        let e = apply(Some(&paid_o), &cancelled("o-1")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("impossible-transition: order o-1 is Paid; order-cancelled")
                && e.to_string().contains("past the saga's pivot"),
            "{e}"
        );
        for (state, ev) in [
            (&c, paid("o-1")),
            (&c, shipped("o-1")),
            (&c, cancelled("o-1")),
        ] {
            let e = apply(Some(state), &ev).unwrap_err();
            assert!(e.to_string().contains("a cancelled order is final"), "{e}");
        }
        let e = apply(Some(&placed_o), &shipped("o-1")).unwrap_err();
        assert!(e.to_string().contains("ships only after it is paid"), "{e}");
    }

    #[test]
    fn events_for_unknown_orders_and_second_placements_are_refused_with_codes() {
        let e = apply(None, &cancelled("o-9")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown-order: order-cancelled for order o-9, which was never placed"
        );
        let o = apply(None, &OrderEvent::Placed(placed("o-1"))).expect("placed");
        let e = apply(Some(&o), &OrderEvent::Placed(placed("o-1"))).unwrap_err();
        assert!(
            e.to_string().starts_with("duplicate-order: order o-1"),
            "{e}"
        );
    }

    #[test]
    fn invalid_placements_name_what_is_wrong() {
        let mut p = placed("o-1");
        p.lines[0].quantity = 0;
        let e = apply(None, &OrderEvent::Placed(p)).unwrap_err();
        assert!(
            e.to_string().contains("line 0 (sku-1) has quantity 0"),
            "{e}"
        );
        let mut p = placed("o-1");
        p.total_minor += 1;
        let e = apply(None, &OrderEvent::Placed(p)).unwrap_err();
        assert!(
            e.to_string().contains("is not the sum of the lines (1299)"),
            "{e}"
        );
        let mut p = placed("o-1");
        p.lines.clear();
        assert!(apply(None, &OrderEvent::Placed(p)).is_err());
    }

    #[test]
    fn avro_records_convert_to_the_contract_json() {
        let v = Avro::Record(vec![
            ("order_id".into(), Avro::String("o-1".into())),
            ("placed_at".into(), Avro::TimestampMillis(5)),
            ("channel".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("reason".into(), Avro::Enum(1, "OUT_OF_STOCK".into())),
        ]);
        assert_eq!(
            avro_to_json(&v),
            serde_json::json!({"order_id": "o-1", "placed_at": 5, "channel": null, "reason": "OUT_OF_STOCK"})
        );
    }
}
