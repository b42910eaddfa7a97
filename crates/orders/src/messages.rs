//! What travels between the orders processors: the order events of the `orders` contracts and
//! the fulfilment saga's commands and replies (`schemas/fulfilment/`), as JSON with a `type`
//! header naming the contract.

use serde::{Deserialize, Serialize};

use super::model::{Line, OrderStatus};

/// `type` header of each message.
pub mod types {
    /// A customer placed an order.
    pub const ORDER_PLACED_V1: &str = "orders.order-placed.v1";
    /// A customer placed an order (with the sales channel).
    pub const ORDER_PLACED_V2: &str = "orders.order-placed.v2";
    /// An order was cancelled.
    pub const ORDER_CANCELLED: &str = "orders.order-cancelled.v1";
    /// An order was paid.
    pub const ORDER_PAID: &str = "orders.order-paid.v1";
    /// An order was shipped.
    pub const ORDER_SHIPPED: &str = "orders.order-shipped.v1";
    /// An order's status moved.
    pub const STATUS_CHANGED: &str = "orders.order-status-changed.v1";
    /// The read model's input: one order's new status, keyed by customer.
    pub const CUSTOMER_ORDER_UPDATED: &str = "orders.customer-order-updated.v1";
    /// A command to the stock service.
    pub const STOCK_COMMAND: &str = "fulfilment.stock-command.v1";
    /// The stock service's answer.
    pub const STOCK_REPLY: &str = "fulfilment.stock-reply.v1";
    /// A command to the payment service.
    pub const PAYMENT_COMMAND: &str = "fulfilment.payment-command.v1";
    /// The payment service's answer.
    pub const PAYMENT_REPLY: &str = "fulfilment.payment-reply.v1";
    /// A saga reached its end.
    pub const SAGA_ENDED: &str = "fulfilment.saga-ended.v1";
}

/// `orders.order-status-changed.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChanged {
    /// The order.
    pub order_id: String,
    /// When, ms since the epoch.
    pub changed_at: i64,
    /// Before.
    pub from_status: OrderStatus,
    /// After.
    pub to_status: OrderStatus,
}

/// `orders.customer-order-updated.v1`: one order's state as the read model needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerOrderUpdated {
    /// The customer (the key).
    pub customer_id: String,
    /// The order.
    pub order_id: String,
    /// Its status now.
    pub status: OrderStatus,
    /// The aggregate's version after the change: the read model's guard.
    pub version: u64,
    /// The order total, minor units.
    pub total_minor: i64,
    /// The order's lines as the product catalog names them, stamped by the order processor
    /// when the order was placed (absent in updates written before the enrichment existed).
    #[serde(default)]
    pub products: Vec<OrderedProduct>,
}

/// One order line enriched from the product catalog (a global table): name and category are
/// `None` when the catalog had no row for the sku when the order was placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderedProduct {
    /// The line's sku.
    pub sku: String,
    /// Units ordered.
    pub quantity: i32,
    /// The catalog's product name.
    pub name: Option<String>,
    /// The catalog's category.
    pub category: Option<String>,
}

/// What the stock service is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StockAction {
    /// Reserve the order's lines.
    Reserve,
    /// Release a reservation (the compensation): idempotent.
    Release,
    /// Ship reserved goods.
    Ship,
}

/// `fulfilment.stock-command.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockCommand {
    /// The order (the key).
    pub order_id: String,
    /// What to do.
    pub action: StockAction,
    /// 1 for the first attempt of this step.
    pub attempt: u32,
    /// The lines concerned.
    pub lines: Vec<Line>,
}

/// How a service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Done.
    Ok,
    /// Refused for a business reason (out of stock, card declined): final.
    Rejected,
    /// Could not be done now (warehouse or carrier down): the saga may try again.
    Failed,
}

/// `fulfilment.stock-reply.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockReply {
    /// The order (the key).
    pub order_id: String,
    /// The command answered.
    pub action: StockAction,
    /// Its attempt number.
    pub attempt: u32,
    /// The answer.
    pub outcome: Outcome,
    /// Why, when not `Ok`.
    #[serde(default)]
    pub reason: Option<String>,
    /// The tracking number of a shipment.
    #[serde(default)]
    pub tracking_number: Option<String>,
}

/// What the payment service is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentAction {
    /// Charge the order (the saga's pivot); answered with a payment reply.
    #[default]
    Charge,
    /// The charge timed out: refund it if it was made, refuse it if it comes later. Not
    /// answered (it is idempotent, and the saga does not wait for it).
    Void,
}

/// `fulfilment.payment-command.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentCommand {
    /// The order (the key, and the idempotency key of the charge).
    pub order_id: String,
    /// Who pays.
    pub customer_id: String,
    /// How much, minor units.
    pub amount_minor: i64,
    /// ISO 4217.
    pub currency: String,
    /// Charge, or void a charge that timed out (absent: charge).
    #[serde(default)]
    pub action: PaymentAction,
}

/// `fulfilment.payment-reply.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentReply {
    /// The order (the key).
    pub order_id: String,
    /// Charged (`Ok`) or declined (`Rejected`).
    pub outcome: Outcome,
    /// The provider's reference of a charge.
    #[serde(default)]
    pub payment_id: Option<String>,
    /// Why it was declined.
    #[serde(default)]
    pub reason: Option<String>,
}

/// How a saga ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SagaOutcome {
    /// Reserved, charged, shipped.
    Completed,
    /// Stopped before the pivot; every completed step was undone.
    Compensated,
    /// Stopped before the pivot, and a compensation kept failing: alerted (metric + DLT).
    CompensationFailed,
}

impl SagaOutcome {
    /// As in the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Compensated => "compensated",
            Self::CompensationFailed => "compensation-failed",
        }
    }
}

/// `fulfilment.saga-ended.v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SagaEnded {
    /// The order (the key).
    pub order_id: String,
    /// How it ended.
    pub outcome: SagaOutcome,
    /// The steps taken, in order (`reserve`, `charge`, `ship#2`, `release`, …).
    pub steps: Vec<String>,
    /// When, ms since the epoch.
    pub ended_at: i64,
}

/// A JSON value and its `type` header, ready to emit.
pub fn encode<T: Serialize>(type_name: &str, value: &T) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    // Serializing these plain structs cannot fail (no maps with non-string keys, no floats).
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    (bytes, vec![("type".into(), type_name.as_bytes().to_vec())])
}
