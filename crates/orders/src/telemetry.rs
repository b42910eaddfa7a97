//! Every metric the orders application emits, one function each (names and labels in one place).

use super::messages::SagaOutcome;

/// An order event was refused (`code`: invalid-order, unknown-order, impossible-transition, …).
pub fn rejected(code: &str) {
    metrics::counter!("eosflow_orders_rejected_total", "code" => code.to_string()).increment(1);
}

/// An order changed status.
pub fn transitioned(to: &'static str) {
    metrics::counter!("eosflow_orders_transitions_total", "to" => to).increment(1);
}

/// A saga ended.
pub fn saga_ended(outcome: SagaOutcome) {
    metrics::counter!("eosflow_saga_ended_total", "outcome" => outcome.as_str()).increment(1);
}

/// A compensation failed for good: the alert an operator pages on.
pub fn compensation_failed() {
    metrics::counter!("eosflow_saga_compensation_failed_total").increment(1);
}

/// A reply that did not fit the saga's step (late or duplicate) was ignored.
pub fn stale_reply() {
    metrics::counter!("eosflow_saga_stale_replies_total").increment(1);
}

/// The read model ignored an update older than what it holds.
pub fn stale_projection_update() {
    metrics::counter!("eosflow_readmodel_stale_updates_total").increment(1);
}
