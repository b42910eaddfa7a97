//! Every metric the orders application emits, one function each (names and labels in one place),
//! and [`METRICS`], their table with HELP texts. The application's metrics carry their own prefix
//! (`orders_`), apart from the framework's `eosflow_` metrics.

use eosflow::metric_catalog::{metric, MetricDef, MetricKind, Unit};

use super::messages::SagaOutcome;
use super::saga::TimedStep;

/// An order event was refused (`code`: invalid-order, unknown-order, impossible-transition, …).
pub fn rejected(code: &str) {
    metrics::counter!("orders_rejected_total", "code" => code.to_string()).increment(1);
}

/// An order changed status.
pub fn transitioned(to: &'static str) {
    metrics::counter!("orders_transitions_total", "to" => to).increment(1);
}

/// A saga ended.
pub fn saga_ended(outcome: SagaOutcome) {
    metrics::counter!("orders_saga_ended_total", "outcome" => outcome.as_str()).increment(1);
}

/// A compensation failed for good: the alert an operator pages on.
pub fn compensation_failed() {
    metrics::counter!("orders_saga_compensation_failed_total").increment(1);
}

/// A reply that did not fit the saga's step (late or duplicate) was ignored.
pub fn stale_reply() {
    metrics::counter!("orders_saga_stale_replies_total").increment(1);
}

/// A saga step got no reply in time (`step`: reserve, charge, ship, release).
pub fn saga_timeout(step: TimedStep) {
    metrics::counter!("orders_saga_timeouts_total", "step" => step.as_str()).increment(1);
}

/// A reply arrived after its step had timed out: it changed nothing.
pub fn late_reply(step: TimedStep) {
    metrics::counter!("orders_saga_late_replies_total", "step" => step.as_str()).increment(1);
}

/// A saga timer fired for a step the saga had already left (cancelled too late): ignored.
pub fn stale_timeout() {
    metrics::counter!("orders_saga_stale_timeouts_total").increment(1);
}

/// The read model ignored an update older than what it holds.
pub fn stale_projection_update() {
    metrics::counter!("orders_readmodel_stale_updates_total").increment(1);
}

/// An order line's sku was not in the product catalog when the order was placed: stamped
/// without a name.
pub fn unknown_product() {
    metrics::counter!("orders_unknown_products_total").increment(1);
}

/// The read model applied an update of a customer whose profile it does not have yet.
pub fn missing_profile() {
    metrics::counter!("orders_readmodel_missing_profiles_total").increment(1);
}

const fn counter(name: &'static str, help: &'static str) -> MetricDef {
    metric(name, MetricKind::Counter, Unit::Count, help)
}

/// Every metric the orders application emits, registered by [`crate::launch::run`].
pub const METRICS: &[MetricDef] = &[
    counter(
        "orders_rejected_total",
        "Order events refused, by code (invalid-order, unknown-order, impossible-transition, ...).",
    ),
    counter(
        "orders_transitions_total",
        "Order status changes, by new status.",
    ),
    counter(
        "orders_saga_ended_total",
        "Fulfilment sagas ended, by outcome.",
    ),
    counter(
        "orders_saga_compensation_failed_total",
        "Saga compensations that failed for good: page someone.",
    ),
    counter(
        "orders_saga_stale_replies_total",
        "Saga replies ignored because they did not fit the saga's step (late or duplicate).",
    ),
    counter(
        "orders_saga_timeouts_total",
        "Saga steps that got no reply in time, by step (reserve, charge, ship, release): compensated before the pivot, alerted and retried after it.",
    ),
    counter(
        "orders_saga_late_replies_total",
        "Saga replies that arrived after their step timed out, by step: recorded, nothing changed.",
    ),
    counter(
        "orders_saga_stale_timeouts_total",
        "Saga timeouts that fired for a step the saga had already left: ignored.",
    ),
    counter(
        "orders_readmodel_stale_updates_total",
        "Read-model updates ignored because they were older than the stored row.",
    ),
    counter(
        "orders_unknown_products_total",
        "Order lines whose sku the product catalog (global table) did not have when the order was placed: stamped without a name.",
    ),
    counter(
        "orders_readmodel_missing_profiles_total",
        "Read-model updates applied for a customer whose profile (customer-profiles table) was not there yet.",
    ),
];
