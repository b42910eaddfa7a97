//! The fulfilment saga as a state machine: reserve stock → charge payment (the pivot) → ship.
//!
//! Before the pivot every completed step has a compensation (a reservation is released); after
//! it there is no way back, only retries (a failed shipment is tried again). A compensation
//! that keeps failing is not swallowed: the saga ends `CompensationFailed` with an alert. The
//! machine is pure — it returns [`Action`]s — so the processor persists it after every step
//! in the same transaction as the commands it sends.

use serde::{Deserialize, Serialize};

use super::messages::{
    Outcome, PaymentCommand, PaymentReply, SagaOutcome, StockAction, StockCommand, StockReply,
};
use super::model::{Order, OrderCancelled, OrderEvent, OrderPaid, OrderShipped};

/// How many times a release is tried before the saga alerts.
pub const MAX_RELEASE_ATTEMPTS: u32 = 3;

/// Where a saga is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Waiting for the stock reservation.
    Reserving,
    /// Stock reserved; waiting for the payment (the pivot).
    Charging,
    /// Paid; shipping (retried until it succeeds).
    Shipping {
        /// Current attempt, from 1.
        attempt: u32,
    },
    /// Undoing the reservation.
    Releasing {
        /// Current attempt, from 1.
        attempt: u32,
        /// The cancellation reason once released (`PAYMENT_FAILED`, `CUSTOMER_REQUEST`).
        reason: String,
        /// Whether the order is already cancelled (the customer cancelled it).
        order_cancelled: bool,
    },
    /// Ended.
    Ended {
        /// How.
        outcome: SagaOutcome,
    },
}

/// The saga's persisted state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saga {
    /// The order it fulfils.
    pub order_id: String,
    /// Where it is.
    pub step: Step,
    /// Steps taken, for the saga-ended event and the operator.
    pub steps: Vec<String>,
}

/// A reply from a service, as the saga sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// From the stock service.
    Stock(StockReply),
    /// From the payment service.
    Payment(PaymentReply),
}

/// What the processor must do, in order, in the same transaction as the saga's new state.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send a command to the stock service.
    Stock(StockCommand),
    /// Send a command to the payment service.
    Payment(PaymentCommand),
    /// Apply an event to the order aggregate.
    Order(OrderEvent),
    /// Publish the saga's end.
    End(SagaOutcome),
    /// A compensation failed for good: alert (metric + dead letter) with this reason.
    Alert(String),
}

/// A reply the saga does not expect where it is (late, duplicate): ignored, counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stale reply for order {order_id}: {what} while {step}")]
pub struct Stale {
    /// The order.
    pub order_id: String,
    /// The reply.
    pub what: String,
    /// The saga's step.
    pub step: String,
}

fn cancel(order_id: &str, reason: &str, note: Option<String>, now: i64) -> Action {
    Action::Order(OrderEvent::Cancelled(OrderCancelled {
        order_id: order_id.to_string(),
        cancelled_at: now,
        reason: reason.to_string(),
        note,
    }))
}

impl Saga {
    /// Starts the saga of a freshly placed order: reserve its stock.
    pub fn start(order: &Order) -> (Self, Vec<Action>) {
        let saga = Self {
            order_id: order.order_id.clone(),
            step: Step::Reserving,
            steps: vec!["reserve".into()],
        };
        let cmd = StockCommand {
            order_id: order.order_id.clone(),
            action: StockAction::Reserve,
            attempt: 1,
            lines: order.lines.clone(),
        };
        (saga, vec![Action::Stock(cmd)])
    }

    /// Whether the saga has ended.
    pub fn ended(&self) -> Option<SagaOutcome> {
        match self.step {
            Step::Ended { outcome } => Some(outcome),
            _ => None,
        }
    }

    fn step_name(&self) -> String {
        match &self.step {
            Step::Reserving => "reserving".into(),
            Step::Charging => "charging".into(),
            Step::Shipping { attempt } => format!("shipping (attempt {attempt})"),
            Step::Releasing { attempt, .. } => format!("releasing (attempt {attempt})"),
            Step::Ended { outcome } => format!("ended ({})", outcome.as_str()),
        }
    }

    /// The customer asks to cancel. Allowed only while the stock is being reserved (before
    /// the charge is requested): the order is cancelled and the reservation released.
    /// Otherwise the reason it cannot be, for the dead letter.
    pub fn on_customer_cancel(&mut self) -> Result<Vec<Action>, &'static str> {
        match self.step {
            Step::Reserving => {
                self.step = Step::Releasing {
                    attempt: 1,
                    reason: "CUSTOMER_REQUEST".into(),
                    order_cancelled: true,
                };
                self.steps.push("release".into());
                Ok(vec![Action::Stock(self.release(1))])
            }
            Step::Charging => {
                Err("its payment is in flight (the saga's pivot): it can no longer be cancelled")
            }
            Step::Shipping { .. } => Err("it is paid and shipping"),
            Step::Releasing { .. } => Err("it is already being cancelled"),
            Step::Ended { .. } => Err("its fulfilment has ended"),
        }
    }

    fn release(&self, attempt: u32) -> StockCommand {
        StockCommand {
            order_id: self.order_id.clone(),
            action: StockAction::Release,
            attempt,
            lines: vec![],
        }
    }

    /// Advances on a service's reply; `Stale` when the reply does not fit the current step.
    pub fn on_reply(
        &mut self,
        reply: &Reply,
        order: &Order,
        now: i64,
    ) -> Result<Vec<Action>, Stale> {
        let stale = |s: &Self, what: String| Stale {
            order_id: s.order_id.clone(),
            what,
            step: s.step_name(),
        };
        match (&self.step.clone(), reply) {
            (Step::Reserving, Reply::Stock(r)) if r.action == StockAction::Reserve => {
                if r.outcome == Outcome::Ok {
                    self.step = Step::Charging;
                    self.steps.push("charge".into());
                    Ok(vec![Action::Payment(PaymentCommand {
                        order_id: order.order_id.clone(),
                        customer_id: order.customer_id.clone(),
                        amount_minor: order.total_minor,
                        currency: order.currency.clone(),
                    })])
                } else {
                    // Nothing was reserved: nothing to compensate.
                    self.step = Step::Ended {
                        outcome: SagaOutcome::Compensated,
                    };
                    Ok(vec![
                        cancel(&self.order_id, "OUT_OF_STOCK", r.reason.clone(), now),
                        Action::End(SagaOutcome::Compensated),
                    ])
                }
            }
            (Step::Charging, Reply::Payment(p)) => {
                if p.outcome == Outcome::Ok {
                    // The pivot: from here on the saga only moves forward.
                    self.step = Step::Shipping { attempt: 1 };
                    self.steps.push("ship".into());
                    Ok(vec![
                        Action::Order(OrderEvent::Paid(OrderPaid {
                            order_id: order.order_id.clone(),
                            paid_at: now,
                            payment_id: p.payment_id.clone().unwrap_or_default(),
                            currency: order.currency.clone(),
                            amount_minor: order.total_minor,
                        })),
                        Action::Stock(StockCommand {
                            order_id: order.order_id.clone(),
                            action: StockAction::Ship,
                            attempt: 1,
                            lines: order.lines.clone(),
                        }),
                    ])
                } else {
                    self.step = Step::Releasing {
                        attempt: 1,
                        reason: "PAYMENT_FAILED".into(),
                        order_cancelled: false,
                    };
                    self.steps.push("release".into());
                    Ok(vec![Action::Stock(self.release(1))])
                }
            }
            (Step::Shipping { attempt }, Reply::Stock(r))
                if r.action == StockAction::Ship && r.attempt == *attempt =>
            {
                if r.outcome == Outcome::Ok {
                    self.step = Step::Ended {
                        outcome: SagaOutcome::Completed,
                    };
                    Ok(vec![
                        Action::Order(OrderEvent::Shipped(OrderShipped {
                            order_id: order.order_id.clone(),
                            shipped_at: now,
                            carrier: "demo-carrier".into(),
                            tracking_number: r.tracking_number.clone().unwrap_or_default(),
                        })),
                        Action::End(SagaOutcome::Completed),
                    ])
                } else {
                    let next = attempt + 1;
                    self.step = Step::Shipping { attempt: next };
                    self.steps.push(format!("ship#{next}"));
                    Ok(vec![Action::Stock(StockCommand {
                        order_id: order.order_id.clone(),
                        action: StockAction::Ship,
                        attempt: next,
                        lines: order.lines.clone(),
                    })])
                }
            }
            (
                Step::Releasing {
                    attempt,
                    reason,
                    order_cancelled,
                },
                Reply::Stock(r),
            ) if r.action == StockAction::Release && r.attempt == *attempt => {
                let mut actions = Vec::new();
                let outcome = if r.outcome == Outcome::Ok {
                    SagaOutcome::Compensated
                } else if *attempt < MAX_RELEASE_ATTEMPTS {
                    let next = attempt + 1;
                    self.step = Step::Releasing {
                        attempt: next,
                        reason: reason.clone(),
                        order_cancelled: *order_cancelled,
                    };
                    self.steps.push(format!("release#{next}"));
                    return Ok(vec![Action::Stock(self.release(next))]);
                } else {
                    actions.push(Action::Alert(format!(
                        "compensation-failed: releasing the stock of order {} failed {attempt} times ({}); the reservation is still held and needs an operator",
                        self.order_id,
                        r.reason.as_deref().unwrap_or("no reason given")
                    )));
                    SagaOutcome::CompensationFailed
                };
                if !order_cancelled {
                    let note = (outcome == SagaOutcome::CompensationFailed)
                        .then(|| "stock release failed; see the saga-replies DLT".to_string());
                    actions.insert(0, cancel(&self.order_id, reason, note, now));
                }
                self.step = Step::Ended { outcome };
                actions.push(Action::End(outcome));
                Ok(actions)
            }
            (_, r) => Err(stale(
                self,
                match r {
                    Reply::Stock(s) => {
                        format!("stock {:?} #{} {:?}", s.action, s.attempt, s.outcome)
                    }
                    Reply::Payment(p) => format!("payment {:?}", p.outcome),
                },
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{apply, tests::placed};

    fn order() -> Order {
        apply(None, &OrderEvent::Placed(placed("o-1"))).expect("placed")
    }

    fn stock(action: StockAction, attempt: u32, outcome: Outcome) -> Reply {
        Reply::Stock(StockReply {
            order_id: "o-1".into(),
            action,
            attempt,
            outcome,
            reason: (outcome != Outcome::Ok).then(|| "simulated".into()),
            tracking_number: Some("T1".into()),
        })
    }

    fn pay(outcome: Outcome) -> Reply {
        Reply::Payment(PaymentReply {
            order_id: "o-1".into(),
            outcome,
            payment_id: Some("pay-1".into()),
            reason: None,
        })
    }

    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::Stock(c) => match c.action {
                    StockAction::Reserve => "reserve",
                    StockAction::Release => "release",
                    StockAction::Ship => "ship",
                },
                Action::Payment(_) => "charge",
                Action::Order(e) => e.name(),
                Action::End(_) => "end",
                Action::Alert(_) => "alert",
            })
            .collect()
    }

    #[test]
    fn past_the_pivot_a_failed_shipment_is_retried_never_compensated() {
        let o = order();
        let (mut s, a) = Saga::start(&o);
        assert_eq!(kinds(&a), ["reserve"]);
        let a = s
            .on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        assert_eq!(kinds(&a), ["charge"]);
        let a = s.on_reply(&pay(Outcome::Ok), &o, 2).expect("charged");
        assert_eq!(
            kinds(&a),
            ["order-paid", "ship"],
            "the pivot pays the order and ships"
        );
        for attempt in 1..=3 {
            let a = s
                .on_reply(&stock(StockAction::Ship, attempt, Outcome::Failed), &o, 3)
                .expect("ship failed");
            assert_eq!(
                kinds(&a),
                ["ship"],
                "after the pivot: only a retry, no release"
            );
        }
        assert_eq!(s.step, Step::Shipping { attempt: 4 });
        let late = s.on_reply(&stock(StockAction::Ship, 2, Outcome::Ok), &o, 4);
        assert!(late.is_err(), "a reply to an older attempt is stale");
        let a = s
            .on_reply(&stock(StockAction::Ship, 4, Outcome::Ok), &o, 5)
            .expect("shipped");
        assert_eq!(kinds(&a), ["order-shipped", "end"]);
        assert_eq!(s.ended(), Some(SagaOutcome::Completed));
        assert_eq!(
            s.steps,
            ["reserve", "charge", "ship", "ship#2", "ship#3", "ship#4"]
        );
        assert!(
            s.on_reply(&pay(Outcome::Ok), &o, 6).is_err(),
            "an ended saga ignores replies"
        );
    }

    #[test]
    fn a_declined_payment_releases_the_stock_then_cancels_the_order() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        s.on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        let a = s
            .on_reply(&pay(Outcome::Rejected), &o, 2)
            .expect("declined");
        assert_eq!(kinds(&a), ["release"], "before the pivot: compensate");
        let a = s
            .on_reply(&stock(StockAction::Release, 1, Outcome::Ok), &o, 3)
            .expect("released");
        assert_eq!(kinds(&a), ["order-cancelled", "end"]);
        match &a[0] {
            Action::Order(OrderEvent::Cancelled(c)) => assert_eq!(c.reason, "PAYMENT_FAILED"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.ended(), Some(SagaOutcome::Compensated));
    }

    #[test]
    fn rejected_stock_ends_compensated_with_nothing_to_release() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        let a = s
            .on_reply(&stock(StockAction::Reserve, 1, Outcome::Rejected), &o, 1)
            .expect("rejected");
        assert_eq!(kinds(&a), ["order-cancelled", "end"]);
        assert_eq!(s.ended(), Some(SagaOutcome::Compensated));
    }

    #[test]
    fn a_compensation_that_keeps_failing_alerts_instead_of_being_swallowed() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        s.on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        s.on_reply(&pay(Outcome::Rejected), &o, 2)
            .expect("declined");
        for attempt in 1..MAX_RELEASE_ATTEMPTS {
            let a = s
                .on_reply(
                    &stock(StockAction::Release, attempt, Outcome::Failed),
                    &o,
                    3,
                )
                .expect("release failed");
            assert_eq!(kinds(&a), ["release"], "a failed compensation is retried");
        }
        let a = s
            .on_reply(
                &stock(StockAction::Release, MAX_RELEASE_ATTEMPTS, Outcome::Failed),
                &o,
                4,
            )
            .expect("gave up");
        assert_eq!(kinds(&a), ["order-cancelled", "alert", "end"]);
        match &a[1] {
            Action::Alert(m) => assert!(
                m.starts_with(
                    "compensation-failed: releasing the stock of order o-1 failed 3 times"
                ),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.ended(), Some(SagaOutcome::CompensationFailed));
    }

    #[test]
    fn a_customer_cancel_is_accepted_only_before_the_charge_is_requested() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        let a = s.on_customer_cancel().expect("cancel while reserving");
        assert_eq!(kinds(&a), ["release"]);
        // The reservation's reply arrives late: ignored; the release's ends the saga without a
        // second cancellation (the order is already cancelled).
        assert!(s
            .on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .is_err());
        let a = s
            .on_reply(&stock(StockAction::Release, 1, Outcome::Ok), &o, 2)
            .expect("released");
        assert_eq!(kinds(&a), ["end"]);
        assert_eq!(s.ended(), Some(SagaOutcome::Compensated));

        let (mut s, _) = Saga::start(&o);
        s.on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        let why = s.on_customer_cancel().unwrap_err();
        assert!(why.contains("payment is in flight"), "{why}");
    }
}
