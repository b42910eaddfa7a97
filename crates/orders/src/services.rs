//! The simulated stock and payment services behind their command topics. Each answers on
//! `<ns>.saga-replies`, remembers what it did per order (so a repeated command gets the same
//! answer and a release never frees stock twice), and fails at a configured rate decided by a
//! hash of (order, step, attempt) — the same question always gets the same answer.
//!
//! They also misbehave the way remote services do, at [`FailureRates::lost_reply_rate`] and
//! [`FailureRates::late_reply_rate`]: a *lost* reply is a command carried out but never
//! answered (the saga's timeout fires, and must assume the work may have been done); a *late*
//! reply is held back in a durable wall-clock timer and sent `late_reply_delay_ms` later.

use serde::{Deserialize, Serialize};

use super::messages::{
    self, types, Outcome, PaymentAction, PaymentCommand, PaymentReply, StockAction, StockCommand,
    StockReply,
};
use super::{draw, FailureRates, Topics};
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record, Timer};

/// The name of the services' timers holding a late reply (payload: the reply's JSON).
pub const LATE_REPLY_TIMER: &str = "late-reply";

/// How a service answers one command: now, never, or late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Answered at once.
    Now,
    /// Carried out, never answered.
    Lost,
    /// Answered after the delay.
    Late,
}

/// How `(order, step, attempt)` is answered at `rates` (a hash: the same every time).
pub fn delivery(rates: &FailureRates, order: &str, step: &str, attempt: u32) -> Delivery {
    let d = draw(order, &format!("delivery-{step}"), attempt);
    if d < rates.lost_reply_rate {
        Delivery::Lost
    } else if d < rates.lost_reply_rate + rates.late_reply_rate {
        Delivery::Late
    } else {
        Delivery::Now
    }
}

/// Sends `reply` now, never, or schedules it, as `delivery` says.
fn deliver<T: serde::Serialize>(
    ctx: &mut Context<'_>,
    topics: &Topics,
    rates: &FailureRates,
    (order_id, step, attempt): (String, &str, u32),
    type_name: &str,
    reply: &T,
) -> Result<(), ProcessError> {
    match delivery(rates, &order_id, step, attempt) {
        Delivery::Now => reply_to(ctx, topics, order_id, type_name, reply),
        Delivery::Lost => {
            tracing::debug!(order = %order_id, step, attempt, "reply lost (simulated)");
        }
        Delivery::Late => {
            let (payload, _) = messages::encode(type_name, reply);
            let delay = i64::try_from(rates.late_reply_delay_ms).unwrap_or(i64::MAX);
            let due = ctx.wall_clock_ms().saturating_add(delay);
            let key = format!("{step}#{attempt}/{order_id}");
            ctx.schedule(
                Timer::wall_clock(key.into_bytes(), due)
                    .named(LATE_REPLY_TIMER)
                    .with_payload(payload),
            )?;
        }
    }
    Ok(())
}

/// A late reply's timer fired: send the reply it holds.
fn send_late(
    ctx: &mut Context<'_>,
    topics: &Topics,
    timer: &Timer,
    type_name: &str,
) -> Result<(), ProcessError> {
    if timer.name != LATE_REPLY_TIMER {
        return Ok(());
    }
    let order_id = String::from_utf8_lossy(&timer.key)
        .split_once('/')
        .map(|(_, o)| o.to_string())
        .ok_or_else(|| ProcessError::permanent("bad-timer: a late reply's key without an order"))?;
    ctx.emit(
        topics.replies.clone(),
        Some(order_id.into_bytes()),
        Some(timer.payload.clone()),
        vec![("type".into(), type_name.as_bytes().to_vec())],
    );
    Ok(())
}

fn parse<T: serde::de::DeserializeOwned>(
    r: &Record<'_>,
    type_name: &str,
) -> Result<T, ProcessError> {
    if r.header("type") != Some(type_name.as_bytes()) {
        return Err(ProcessError::Permanent(format!(
            "unknown-type: expected {type_name}, got {:?}",
            r.header("type").map(String::from_utf8_lossy)
        )));
    }
    let v = r
        .value
        .ok_or_else(|| ProcessError::permanent("missing-value: a command without a value"))?;
    serde_json::from_slice(v).map_err(|e| {
        ProcessError::Permanent(format!(
            "bad-payload: {type_name} does not match its contract: {e}"
        ))
    })
}

/// What the stock service holds for an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reservation {
    /// Refused (out of stock): nothing held.
    Rejected,
    /// Held for the order.
    Reserved,
    /// Given back (compensated).
    Released,
    /// Shipped.
    Shipped,
}

/// The stock / warehouse service.
#[derive(Debug, Clone)]
pub struct StockService {
    topics: Topics,
    rates: FailureRates,
}

impl StockService {
    /// Replies on `topics.replies`; fails at `rates`.
    pub fn new(topics: Topics, rates: FailureRates) -> Self {
        Self { topics, rates }
    }

    fn decide(
        &self,
        cmd: &StockCommand,
        held: Option<Reservation>,
    ) -> (Option<Reservation>, Outcome, Option<String>) {
        let id = &cmd.order_id;
        match cmd.action {
            StockAction::Reserve => match held {
                Some(Reservation::Rejected) => {
                    (None, Outcome::Rejected, Some("out of stock".into()))
                }
                Some(_) => (None, Outcome::Ok, None), // a repeated reserve: same answer
                None if draw(id, "reserve", 0) < self.rates.stock_failure_rate => {
                    let sku = cmd.lines.first().map(|l| l.sku.as_str()).unwrap_or("?");
                    (
                        Some(Reservation::Rejected),
                        Outcome::Rejected,
                        Some(format!("out of stock: {sku}")),
                    )
                }
                None => (Some(Reservation::Reserved), Outcome::Ok, None),
            },
            StockAction::Release => {
                if draw(id, "release", cmd.attempt) < self.rates.release_failure_rate {
                    return (
                        None,
                        Outcome::Failed,
                        Some("warehouse system unavailable (simulated)".into()),
                    );
                }
                match held {
                    // Idempotent: releasing twice, or what was never reserved, frees nothing.
                    Some(Reservation::Reserved) => (Some(Reservation::Released), Outcome::Ok, None),
                    Some(Reservation::Shipped) => {
                        (None, Outcome::Failed, Some("already shipped".into()))
                    }
                    _ => (None, Outcome::Ok, None),
                }
            }
            StockAction::Ship => match held {
                Some(Reservation::Shipped) => (None, Outcome::Ok, None),
                Some(Reservation::Reserved)
                    if draw(id, "ship", cmd.attempt) < self.rates.ship_failure_rate =>
                {
                    (
                        None,
                        Outcome::Failed,
                        Some("carrier unavailable (simulated)".into()),
                    )
                }
                Some(Reservation::Reserved) => (Some(Reservation::Shipped), Outcome::Ok, None),
                _ => (
                    None,
                    Outcome::Failed,
                    Some("nothing reserved to ship".into()),
                ),
            },
        }
    }
}

impl Processor for StockService {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let cmd: StockCommand = parse(r, types::STOCK_COMMAND)?;
        let key = format!("reservation/{}", cmd.order_id);
        let held: Option<Reservation> = ctx
            .get(key.as_bytes())?
            .and_then(|b| serde_json::from_slice(&b).ok());
        let (next, outcome, reason) = self.decide(&cmd, held);
        if let Some(n) = next {
            ctx.put(key.as_bytes(), serde_json::to_vec(&n).unwrap_or_default());
        }
        let reply = StockReply {
            order_id: cmd.order_id.clone(),
            action: cmd.action,
            attempt: cmd.attempt,
            outcome,
            reason,
            tracking_number: (cmd.action == StockAction::Ship && outcome == Outcome::Ok).then(
                || {
                    format!(
                        "TRK-{:010}",
                        (draw(&cmd.order_id, "tracking", 0) * 1e10) as u64
                    )
                },
            ),
        };
        let step = match cmd.action {
            StockAction::Reserve => "reserve",
            StockAction::Release => "release",
            StockAction::Ship => "ship",
        };
        deliver(
            ctx,
            &self.topics,
            &self.rates,
            (cmd.order_id, step, cmd.attempt),
            types::STOCK_REPLY,
            &reply,
        )
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        send_late(ctx, &self.topics, timer, types::STOCK_REPLY)
    }
}

impl StockService {
    /// The service as it runs: its reservations in the stock topology's store.
    pub fn spec(self) -> ProcessorSpec<Self> {
        ProcessorSpec::new(self).store_name(super::Topology::Stock.store())
    }
}

/// The payment service: one charge per order, ever.
#[derive(Debug, Clone)]
pub struct PaymentService {
    topics: Topics,
    rates: FailureRates,
}

impl PaymentService {
    /// Replies on `topics.replies`; declines at `rates.payment_failure_rate`.
    pub fn new(topics: Topics, rates: FailureRates) -> Self {
        Self { topics, rates }
    }
}

/// What a void did, stored as `void/<order>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Voided {
    /// The charge had been made: refunded.
    Refunded,
    /// No charge yet: none will be made (a later charge is declined).
    Blocked,
}

impl PaymentService {
    /// Voids the order's charge (the saga's charge timed out): refunds it, or blocks it by
    /// storing a declined answer a later charge command gets. Idempotent; not answered.
    fn void(
        &self,
        ctx: &mut Context<'_>,
        cmd: &PaymentCommand,
        charge_key: &str,
    ) -> Result<(), ProcessError> {
        let void_key = format!("void/{}", cmd.order_id);
        if ctx.get(void_key.as_bytes())?.is_some() {
            return Ok(());
        }
        let charged = ctx
            .get(charge_key.as_bytes())?
            .and_then(|b| serde_json::from_slice::<PaymentReply>(&b).ok());
        let done = match charged {
            Some(c) if c.outcome == Outcome::Ok => Voided::Refunded,
            Some(_) => Voided::Blocked, // declined already: nothing to refund
            None => {
                let declined = PaymentReply {
                    order_id: cmd.order_id.clone(),
                    outcome: Outcome::Rejected,
                    payment_id: None,
                    reason: Some("voided before it was charged (the saga timed out)".into()),
                };
                ctx.put(
                    charge_key.as_bytes(),
                    serde_json::to_vec(&declined).unwrap_or_default(),
                );
                Voided::Blocked
            }
        };
        ctx.put(
            void_key.as_bytes(),
            serde_json::to_vec(&done).unwrap_or_default(),
        );
        Ok(())
    }
}

impl Processor for PaymentService {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let cmd: PaymentCommand = parse(r, types::PAYMENT_COMMAND)?;
        let key = format!("charge/{}", cmd.order_id);
        if cmd.action == PaymentAction::Void {
            return self.void(ctx, &cmd, &key);
        }
        let reply = match ctx
            .get(key.as_bytes())?
            .and_then(|b| serde_json::from_slice::<PaymentReply>(&b).ok())
        {
            Some(done) => done, // the order id is the idempotency key: never charged twice
            None => {
                let reply = if draw(&cmd.order_id, "charge", 0) < self.rates.payment_failure_rate {
                    PaymentReply {
                        order_id: cmd.order_id.clone(),
                        outcome: Outcome::Rejected,
                        payment_id: None,
                        reason: Some("card declined (simulated)".into()),
                    }
                } else {
                    PaymentReply {
                        order_id: cmd.order_id.clone(),
                        outcome: Outcome::Ok,
                        payment_id: Some(format!(
                            "pay-{:012}",
                            (draw(&cmd.order_id, "payment-id", 0) * 1e12) as u64
                        )),
                        reason: None,
                    }
                };
                ctx.put(
                    key.as_bytes(),
                    serde_json::to_vec(&reply).unwrap_or_default(),
                );
                reply
            }
        };
        deliver(
            ctx,
            &self.topics,
            &self.rates,
            (cmd.order_id, "charge", 1),
            types::PAYMENT_REPLY,
            &reply,
        )
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        send_late(ctx, &self.topics, timer, types::PAYMENT_REPLY)
    }
}

impl PaymentService {
    /// The service as it runs: its charges in the payment topology's store.
    pub fn spec(self) -> ProcessorSpec<Self> {
        ProcessorSpec::new(self).store_name(super::Topology::Payment.store())
    }
}

/// Sends a service's reply to the saga, keyed by order id (the saga's partition).
fn reply_to<T: serde::Serialize>(
    ctx: &mut Context<'_>,
    topics: &Topics,
    order_id: String,
    type_name: &str,
    reply: &T,
) {
    let (v, h) = messages::encode(type_name, reply);
    ctx.emit(
        topics.replies.clone(),
        Some(order_id.into_bytes()),
        Some(v),
        h,
    );
}
