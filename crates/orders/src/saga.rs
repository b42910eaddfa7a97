//! The fulfilment saga as a state machine: reserve stock → charge payment (the pivot) → ship.
//!
//! Before the pivot every completed step has a compensation (a reservation is released); after
//! it there is no way back, only retries (a failed shipment is tried again). A compensation
//! that keeps failing is not swallowed: the saga ends `CompensationFailed` with an alert. The
//! machine is pure — it returns [`Action`]s — so the processor persists it after every step
//! in the same transaction as the commands it sends.
//!
//! Every command it sends has a timeout ([`Timeout`], one per order, step and attempt): the
//! saga asks for it with [`Action::ScheduleTimeout`] and drops it with [`Action::CancelTimeout`]
//! when the reply comes; the processor turns both into durable wall-clock timers. A step that
//! times out is handled by [`Saga::on_timeout`]: before the pivot the saga compensates (a
//! reservation may exist although its reply was lost, so it is released; an unanswered charge
//! is voided), after it the saga alerts and tries again, and a release that times out counts as
//! a failed release. A reply that arrives after its step timed out is a *late reply*: the saga
//! has moved on, so it changes nothing but is recorded in the steps and reported
//! ([`Action::LateReply`]).

use serde::{Deserialize, Serialize};

use super::messages::{
    Outcome, PaymentAction, PaymentCommand, PaymentReply, SagaOutcome, StockAction, StockCommand,
    StockReply,
};
use super::model::{Order, OrderCancelled, OrderEvent, OrderPaid, OrderShipped};

/// How many times a release is tried before the saga alerts.
pub const MAX_RELEASE_ATTEMPTS: u32 = 3;

/// The name of the saga's timers ([`eosflow::processor::Timer::name`]), so the processor tells
/// them from any other timer it may have.
pub const TIMER_NAME: &str = "saga-timeout";

/// A step of the saga that waits for a reply, and so has a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimedStep {
    /// Reserving stock (before the pivot).
    Reserve,
    /// Charging the payment (the pivot).
    Charge,
    /// Shipping (after the pivot).
    Ship,
    /// Releasing a reservation (the compensation).
    Release,
}

impl TimedStep {
    /// Every step, in saga order.
    pub const ALL: [TimedStep; 4] = [Self::Reserve, Self::Charge, Self::Ship, Self::Release];

    /// `reserve`, `charge`, `ship`, `release`: the metric label and the name in the steps.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserve => "reserve",
            Self::Charge => "charge",
            Self::Ship => "ship",
            Self::Release => "release",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The timeout of one command: which order, which step, which attempt. It is the identity of
/// the timer ([`Timeout::timer_key`]), so a timer left from an earlier step or attempt is
/// recognised when it fires and ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeout {
    /// The order.
    pub order_id: String,
    /// The step waiting for its reply.
    pub step: TimedStep,
    /// The step's attempt, from 1.
    pub attempt: u32,
}

impl Timeout {
    /// `reserve#1`, `ship#2`: how the saga's steps name it.
    pub fn label(&self) -> String {
        format!("{}#{}", self.step.as_str(), self.attempt)
    }

    /// The timer key: `<step>#<attempt>/<order id>`.
    ///
    /// ```
    /// use eosflow_orders::saga::{TimedStep, Timeout};
    ///
    /// let t = Timeout { order_id: "o/7".into(), step: TimedStep::Ship, attempt: 2 };
    /// assert_eq!(t.timer_key(), b"ship#2/o/7");
    /// assert_eq!(Timeout::from_timer_key(&t.timer_key()), Some(t));
    /// assert_eq!(Timeout::from_timer_key(b"nap#1/o-1"), None);
    /// ```
    pub fn timer_key(&self) -> Vec<u8> {
        format!("{}/{}", self.label(), self.order_id).into_bytes()
    }

    /// Reads a timer key written by [`Timeout::timer_key`]; `None` if it is not one.
    pub fn from_timer_key(key: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(key).ok()?;
        let (label, order_id) = s.split_once('/')?;
        let (step, attempt) = label.split_once('#')?;
        Some(Self {
            order_id: order_id.to_string(),
            step: TimedStep::parse(step)?,
            attempt: attempt.parse().ok()?,
        })
    }
}

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
    /// Steps taken, for the saga-ended event and the operator: `timeout:<step>#<n>` where a
    /// step timed out, `late:<step>#<n>` where its reply came after that.
    pub steps: Vec<String>,
    /// The labels (`reserve#1`, …) of the steps that timed out: a reply to one is late.
    #[serde(default)]
    pub timed_out: Vec<String>,
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
    /// After the pivot a step went unanswered: alert (dead letter) with this reason; the saga
    /// carries on (it has already retried).
    TimeoutAlert(String),
    /// Start the timeout of the command just sent.
    ScheduleTimeout(Timeout),
    /// The command's reply came: drop its timeout.
    CancelTimeout(Timeout),
    /// A reply arrived after its step had timed out: it changed nothing; report it (metric +
    /// dead letter with this reason) for the operator.
    LateReply {
        /// The step it answered.
        step: TimedStep,
        /// Why it was ignored.
        reason: String,
    },
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
            timed_out: Vec::new(),
        };
        let cmd = StockCommand {
            order_id: order.order_id.clone(),
            action: StockAction::Reserve,
            attempt: 1,
            lines: order.lines.clone(),
        };
        let actions = saga.timed(None, vec![Action::Stock(cmd)]);
        (saga, actions)
    }

    /// The timeout pending for where the saga is: the reply it waits for.
    pub fn current_timeout(&self) -> Option<Timeout> {
        let (step, attempt) = match self.step {
            Step::Reserving => (TimedStep::Reserve, 1),
            Step::Charging => (TimedStep::Charge, 1),
            Step::Shipping { attempt } => (TimedStep::Ship, attempt),
            Step::Releasing { attempt, .. } => (TimedStep::Release, attempt),
            Step::Ended { .. } => return None,
        };
        Some(Timeout {
            order_id: self.order_id.clone(),
            step,
            attempt,
        })
    }

    /// `actions` of a move from where `before` was pending, with the timeouts it implies: the
    /// old one cancelled first, the new step's scheduled last.
    fn timed(&self, before: Option<Timeout>, actions: Vec<Action>) -> Vec<Action> {
        let after = self.current_timeout();
        if before == after {
            return actions;
        }
        before
            .map(Action::CancelTimeout)
            .into_iter()
            .chain(actions)
            .chain(after.map(Action::ScheduleTimeout))
            .collect()
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
                let before = self.current_timeout();
                self.step = Step::Releasing {
                    attempt: 1,
                    reason: "CUSTOMER_REQUEST".into(),
                    order_cancelled: true,
                };
                self.steps.push("release".into());
                Ok(self.timed(before, vec![Action::Stock(self.release(1))]))
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

    /// Advances on a service's reply; `Stale` when the reply does not fit the current step and
    /// did not answer a step that timed out (a duplicate). A reply to a step that timed out is
    /// late: recorded in the steps, reported with [`Action::LateReply`], nothing else.
    pub fn on_reply(
        &mut self,
        reply: &Reply,
        order: &Order,
        now: i64,
    ) -> Result<Vec<Action>, Stale> {
        let before = self.current_timeout();
        let actions = self.advance(reply, order, now)?;
        Ok(self.timed(before, actions))
    }

    fn advance(&mut self, reply: &Reply, order: &Order, now: i64) -> Result<Vec<Action>, Stale> {
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
                    Ok(vec![Action::Payment(payment(order, PaymentAction::Charge))])
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
            (Step::Releasing { attempt, .. }, Reply::Stock(r))
                if r.action == StockAction::Release && r.attempt == *attempt =>
            {
                if r.outcome == Outcome::Ok {
                    Ok(self.end_release(SagaOutcome::Compensated, Vec::new(), now))
                } else {
                    Ok(self.release_failed(r.reason.as_deref().unwrap_or("no reason given"), now))
                }
            }
            (_, r) => {
                let answered = match r {
                    Reply::Stock(s) => Timeout {
                        order_id: self.order_id.clone(),
                        step: match s.action {
                            StockAction::Reserve => TimedStep::Reserve,
                            StockAction::Release => TimedStep::Release,
                            StockAction::Ship => TimedStep::Ship,
                        },
                        attempt: s.attempt,
                    },
                    Reply::Payment(_) => Timeout {
                        order_id: self.order_id.clone(),
                        step: TimedStep::Charge,
                        attempt: 1,
                    },
                };
                let label = answered.label();
                if self.timed_out.contains(&label) {
                    let reason = format!(
                        "late-reply: the {label} reply ({}) for order {} came after its timeout fired; the saga had moved on ({}), so it changes nothing",
                        describe(r),
                        self.order_id,
                        self.step_name()
                    );
                    self.steps.push(format!("late:{label}"));
                    return Ok(vec![Action::LateReply {
                        step: answered.step,
                        reason,
                    }]);
                }
                Err(stale(self, describe(r)))
            }
        }
    }

    /// A release failed (its reply said so, or it timed out): try again, or after
    /// [`MAX_RELEASE_ATTEMPTS`] alert and end `CompensationFailed`.
    fn release_failed(&mut self, why: &str, now: i64) -> Vec<Action> {
        let Step::Releasing {
            attempt,
            reason,
            order_cancelled,
        } = self.step.clone()
        else {
            return Vec::new();
        };
        if attempt < MAX_RELEASE_ATTEMPTS {
            let next = attempt + 1;
            self.step = Step::Releasing {
                attempt: next,
                reason,
                order_cancelled,
            };
            self.steps.push(format!("release#{next}"));
            return vec![Action::Stock(self.release(next))];
        }
        let alert = Action::Alert(format!(
            "compensation-failed: releasing the stock of order {} failed {attempt} times ({why}); the reservation is still held and needs an operator",
            self.order_id,
        ));
        self.end_release(SagaOutcome::CompensationFailed, vec![alert], now)
    }

    /// Ends a release with `outcome`: the order cancelled (unless the customer's cancel already
    /// did), then `extra`, then the saga's end.
    fn end_release(&mut self, outcome: SagaOutcome, extra: Vec<Action>, now: i64) -> Vec<Action> {
        let Step::Releasing {
            reason,
            order_cancelled,
            ..
        } = self.step.clone()
        else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        if !order_cancelled {
            let note = (outcome == SagaOutcome::CompensationFailed)
                .then(|| "stock release failed; see the saga-replies DLT".to_string());
            actions.push(cancel(&self.order_id, &reason, note, now));
        }
        actions.extend(extra);
        self.step = Step::Ended { outcome };
        actions.push(Action::End(outcome));
        actions
    }

    /// A timeout fired. `Stale` when it is not the one pending for where the saga is (a timer
    /// of an earlier step or attempt, or of an ended saga): ignored. Otherwise:
    ///
    /// - reserving: the stock service did not answer, but it may have reserved (the reply may
    ///   be what was lost): release, then cancel the order `STOCK_TIMEOUT`;
    /// - charging: the charge's outcome is unknown. The saga has not passed its pivot (only a
    ///   charge *reply* moves it there), so it stays on the compensating side: it voids the
    ///   payment (the payment service refunds a charge it made, and refuses the charge if it
    ///   comes later), releases the stock, and cancels the order `PAYMENT_TIMEOUT`;
    /// - shipping (after the pivot): no way back: alert ([`Action::TimeoutAlert`]) and ship
    ///   again as the next attempt;
    /// - releasing: counts as a failed release: retried, then alerted.
    pub fn on_timeout(
        &mut self,
        fired: &Timeout,
        order: &Order,
        now: i64,
    ) -> Result<Vec<Action>, Stale> {
        if self.current_timeout().as_ref() != Some(fired) {
            return Err(Stale {
                order_id: self.order_id.clone(),
                what: format!("timeout {}", fired.label()),
                step: self.step_name(),
            });
        }
        let label = fired.label();
        self.timed_out.push(label.clone());
        self.steps.push(format!("timeout:{label}"));
        let actions = match self.step.clone() {
            Step::Reserving => self.compensate("STOCK_TIMEOUT", Vec::new()),
            Step::Charging => {
                let void = Action::Payment(payment(order, PaymentAction::Void));
                self.compensate("PAYMENT_TIMEOUT", vec![void])
            }
            Step::Shipping { attempt } => {
                let next = attempt + 1;
                self.step = Step::Shipping { attempt: next };
                self.steps.push(format!("ship#{next}"));
                vec![
                    Action::TimeoutAlert(format!(
                        "ship-timeout: order {} is paid but shipment attempt {attempt} got no answer; past the pivot there is no compensation: shipping again as attempt {next}",
                        self.order_id
                    )),
                    Action::Stock(StockCommand {
                        order_id: order.order_id.clone(),
                        action: StockAction::Ship,
                        attempt: next,
                        lines: order.lines.clone(),
                    }),
                ]
            }
            Step::Releasing { attempt, .. } => {
                let why = format!("attempt {attempt} timed out");
                self.release_failed(&why, now)
            }
            Step::Ended { .. } => Vec::new(),
        };
        Ok(self.timed(None, actions))
    }

    /// Before the pivot: `first` (a void), then release the stock; the order is cancelled
    /// with `reason` once it is released.
    fn compensate(&mut self, reason: &str, first: Vec<Action>) -> Vec<Action> {
        self.step = Step::Releasing {
            attempt: 1,
            reason: reason.into(),
            order_cancelled: false,
        };
        self.steps.push("release".into());
        first
            .into_iter()
            .chain([Action::Stock(self.release(1))])
            .collect()
    }
}

fn payment(order: &Order, action: PaymentAction) -> PaymentCommand {
    PaymentCommand {
        order_id: order.order_id.clone(),
        customer_id: order.customer_id.clone(),
        amount_minor: order.total_minor,
        currency: order.currency.clone(),
        action,
    }
}

fn describe(r: &Reply) -> String {
    match r {
        Reply::Stock(s) => format!("stock {:?} #{} {:?}", s.action, s.attempt, s.outcome),
        Reply::Payment(p) => format!("payment {:?}", p.outcome),
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

    /// The actions but the timeouts.
    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .filter_map(|a| {
                Some(match a {
                    Action::Stock(c) => match c.action {
                        StockAction::Reserve => "reserve",
                        StockAction::Release => "release",
                        StockAction::Ship => "ship",
                    },
                    Action::Payment(p) => match p.action {
                        PaymentAction::Charge => "charge",
                        PaymentAction::Void => "void",
                    },
                    Action::Order(e) => e.name(),
                    Action::End(_) => "end",
                    Action::Alert(_) => "alert",
                    Action::TimeoutAlert(_) => "timeout-alert",
                    Action::LateReply { .. } => "late",
                    Action::ScheduleTimeout(_) | Action::CancelTimeout(_) => return None,
                })
            })
            .collect()
    }

    /// The timeouts: `+reserve#1` scheduled, `-reserve#1` cancelled.
    fn timers(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ScheduleTimeout(t) => Some(format!("+{}", t.label())),
                Action::CancelTimeout(t) => Some(format!("-{}", t.label())),
                _ => None,
            })
            .collect()
    }

    fn timeout(step: TimedStep, attempt: u32) -> Timeout {
        Timeout {
            order_id: "o-1".into(),
            step,
            attempt,
        }
    }

    fn cancelled_reason(actions: &[Action]) -> Option<String> {
        actions.iter().find_map(|a| match a {
            Action::Order(OrderEvent::Cancelled(c)) => Some(c.reason.clone()),
            _ => None,
        })
    }

    #[test]
    fn every_command_schedules_its_timeout_and_its_reply_cancels_it() {
        let o = order();
        let (mut s, a) = Saga::start(&o);
        assert_eq!(timers(&a), ["+reserve#1"]);
        let a = s
            .on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        assert_eq!(timers(&a), ["-reserve#1", "+charge#1"]);
        let a = s.on_reply(&pay(Outcome::Ok), &o, 2).expect("charged");
        assert_eq!(timers(&a), ["-charge#1", "+ship#1"]);
        let a = s
            .on_reply(&stock(StockAction::Ship, 1, Outcome::Failed), &o, 3)
            .expect("retried");
        assert_eq!(timers(&a), ["-ship#1", "+ship#2"]);
        let a = s
            .on_reply(&stock(StockAction::Ship, 2, Outcome::Ok), &o, 4)
            .expect("shipped");
        assert_eq!(timers(&a), ["-ship#2"], "an ended saga waits for nothing");
        assert_eq!(s.current_timeout(), None);
        assert!(
            s.on_timeout(&timeout(TimedStep::Ship, 2), &o, 5).is_err(),
            "a timer that fires anyway (cancelled too late) is stale"
        );
    }

    #[test]
    fn a_reservation_that_times_out_is_released_and_the_order_cancelled() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        let a = s
            .on_timeout(&timeout(TimedStep::Reserve, 1), &o, 10)
            .expect("fires");
        assert_eq!(
            kinds(&a),
            ["release"],
            "a reservation may exist although its reply was lost"
        );
        assert_eq!(timers(&a), ["+release#1"]);
        let a = s
            .on_reply(&stock(StockAction::Release, 1, Outcome::Ok), &o, 11)
            .expect("released");
        assert_eq!(kinds(&a), ["order-cancelled", "end"]);
        assert_eq!(cancelled_reason(&a).as_deref(), Some("STOCK_TIMEOUT"));
        assert_eq!(s.ended(), Some(SagaOutcome::Compensated));
        assert_eq!(s.steps, ["reserve", "timeout:reserve#1", "release"]);

        // The reservation's reply, late: counted, in the steps, nothing else (no second release).
        let a = s
            .on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 12)
            .expect("late, not stale");
        assert_eq!(kinds(&a), ["late"]);
        match &a[0] {
            Action::LateReply { step, reason } => {
                assert_eq!(*step, TimedStep::Reserve);
                assert!(
                    reason.starts_with("late-reply: the reserve#1 reply"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.ended(), Some(SagaOutcome::Compensated));
        assert_eq!(s.steps.last().map(String::as_str), Some("late:reserve#1"));
        assert!(
            s.on_reply(&stock(StockAction::Release, 1, Outcome::Ok), &o, 13)
                .is_err(),
            "a duplicate of an answered step is merely stale"
        );
    }

    #[test]
    fn a_charge_that_times_out_is_voided_the_stock_released_and_a_late_charge_changes_nothing() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        s.on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        assert!(
            s.on_timeout(&timeout(TimedStep::Reserve, 1), &o, 2)
                .is_err(),
            "the reservation's timer, were it still to fire, is stale"
        );
        let a = s
            .on_timeout(&timeout(TimedStep::Charge, 1), &o, 3)
            .expect("fires");
        assert_eq!(kinds(&a), ["void", "release"]);
        assert_eq!(timers(&a), ["+release#1"]);
        // The charge went through after all: late. The void refunds it; the saga stays put.
        let a = s.on_reply(&pay(Outcome::Ok), &o, 4).expect("late");
        assert_eq!(kinds(&a), ["late"]);
        assert!(matches!(s.step, Step::Releasing { attempt: 1, .. }));
        let a = s
            .on_reply(&stock(StockAction::Release, 1, Outcome::Ok), &o, 5)
            .expect("released");
        assert_eq!(kinds(&a), ["order-cancelled", "end"]);
        assert_eq!(cancelled_reason(&a).as_deref(), Some("PAYMENT_TIMEOUT"));
        assert_eq!(
            s.steps,
            [
                "reserve",
                "charge",
                "timeout:charge#1",
                "release",
                "late:charge#1"
            ]
        );
    }

    #[test]
    fn past_the_pivot_a_shipment_that_times_out_alerts_and_ships_again() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        s.on_reply(&stock(StockAction::Reserve, 1, Outcome::Ok), &o, 1)
            .expect("reserved");
        s.on_reply(&pay(Outcome::Ok), &o, 2).expect("charged");
        let a = s
            .on_timeout(&timeout(TimedStep::Ship, 1), &o, 3)
            .expect("fires");
        assert_eq!(kinds(&a), ["timeout-alert", "ship"], "no compensation");
        assert_eq!(timers(&a), ["+ship#2"]);
        match &a[0] {
            Action::TimeoutAlert(m) => assert!(m.starts_with("ship-timeout: order o-1"), "{m}"),
            other => panic!("{other:?}"),
        }
        // The first attempt's reply comes late (it shipped): recorded; attempt 2's ends it.
        let a = s
            .on_reply(&stock(StockAction::Ship, 1, Outcome::Ok), &o, 4)
            .expect("late");
        assert_eq!(kinds(&a), ["late"]);
        assert_eq!(s.step, Step::Shipping { attempt: 2 });
        let a = s
            .on_reply(&stock(StockAction::Ship, 2, Outcome::Ok), &o, 5)
            .expect("shipped");
        assert_eq!(kinds(&a), ["order-shipped", "end"]);
        assert_eq!(
            s.steps,
            [
                "reserve",
                "charge",
                "ship",
                "timeout:ship#1",
                "ship#2",
                "late:ship#1"
            ]
        );
    }

    #[test]
    fn a_release_that_times_out_counts_as_a_failed_release() {
        let o = order();
        let (mut s, _) = Saga::start(&o);
        s.on_timeout(&timeout(TimedStep::Reserve, 1), &o, 1)
            .expect("reserve timed out");
        for attempt in 1..MAX_RELEASE_ATTEMPTS {
            let a = s
                .on_timeout(&timeout(TimedStep::Release, attempt), &o, 2)
                .expect("fires");
            assert_eq!(kinds(&a), ["release"], "retried");
            assert_eq!(timers(&a), [format!("+release#{}", attempt + 1)]);
        }
        let a = s
            .on_timeout(&timeout(TimedStep::Release, MAX_RELEASE_ATTEMPTS), &o, 3)
            .expect("gives up");
        assert_eq!(kinds(&a), ["order-cancelled", "alert", "end"]);
        assert!(timers(&a).is_empty());
        match &a[1] {
            Action::Alert(m) => assert!(m.contains("failed 3 times (attempt 3 timed out)"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.ended(), Some(SagaOutcome::CompensationFailed));
        // A late release reply: recorded, nothing more.
        let a = s
            .on_reply(&stock(StockAction::Release, 2, Outcome::Ok), &o, 4)
            .expect("late");
        assert_eq!(kinds(&a), ["late"]);
        assert_eq!(s.ended(), Some(SagaOutcome::CompensationFailed));
    }

    #[test]
    fn a_saga_stored_before_timeouts_existed_still_loads() {
        let old = r#"{"order_id":"o-1","step":{"step":"charging"},"steps":["reserve","charge"]}"#;
        let s: Saga = serde_json::from_str(old).expect("loads");
        assert!(s.timed_out.is_empty());
        assert_eq!(s.current_timeout(), Some(timeout(TimedStep::Charge, 1)));
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
        assert_eq!(cancelled_reason(&a).as_deref(), Some("PAYMENT_FAILED"));
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
        let alert = a.iter().find_map(|a| match a {
            Action::Alert(m) => Some(m.as_str()),
            _ => None,
        });
        assert!(
            alert.is_some_and(|m| m.starts_with(
                "compensation-failed: releasing the stock of order o-1 failed 3 times"
            )),
            "{alert:?}"
        );
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
