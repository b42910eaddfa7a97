//! The order processor (`eosflow run --topology orders`): the reference application's order
//! aggregate ([`crate::model`]) and its fulfilment saga ([`crate::saga`]), on the exactly-once
//! runtime. Not to be confused with [`crate::poison_lifecycle`], the fault suite's small
//! stand-alone order-status machine. Inputs: `<ns>.orders` (placed/cancelled from the order service's outbox, JSON or
//! Confluent-framed Avro) and `<ns>.saga-replies` (the services' answers), co-partitioned by
//! order id, so every decision about one order — a customer's cancel racing the payment, a
//! late reply — is taken in one partition, in one transaction with the state it changes.
//!
//! State per order: `order/<id>` (the aggregate) and `saga/<id>` (the saga), both written after
//! every step. Outputs: `orders.order-status-changed.v1` on every transition, the read model's
//! feed (keyed by customer), saga commands, and one `fulfilment.saga-ended.v1` per saga.
//!
//! Every saga command starts a durable wall-clock timer (named [`saga::TIMER_NAME`], keyed by
//! [`Timeout::timer_key`]: order, step, attempt) due after [`SagaTimeouts`]; its reply cancels
//! it. A timer that fires calls [`Saga::on_timeout`] in the transaction of what it causes, so a
//! timeout's compensation is sent exactly once even across `kill -9`. Alerts (a shipment that
//! timed out, a compensation that failed) and late replies go to `<ns>.saga-replies.DLT` with
//! their reason, in the same transaction.

use serde::de::DeserializeOwned;

use super::catalog::{self, Product};
use super::messages::{
    self, types, CustomerOrderUpdated, OrderedProduct, PaymentReply, SagaEnded, StatusChanged,
    StockReply,
};
use super::model::{self, Order, OrderEvent, Rejection};
use super::saga::{self, Action, Reply, Saga, Timeout};
use super::{contracts, telemetry, SagaTimeouts, Topics};
use eosflow::contracts::Decoder;
use eosflow::kafka::topics::dlt_topic;
use eosflow::processor::{
    dead_letter_headers, Context, ProcessError, Processor, ProcessorSpec, Record, Timer, TimerKind,
};
use eosflow::serdes::{Registry, RegistrySource, SchemaSource};
use eosflow::topology::GlobalTableHandle;

/// The header naming a business event id: a re-sent event keeps it, so dedup drops it.
pub const EVENT_ID_HEADER: &str = "event_id";

/// The aggregate + saga processor.
pub struct OrderProcessor {
    topics: Topics,
    group: String,
    decoder: Decoder,
    timeouts: SagaTimeouts,
    /// The product catalog (`<ns>.products`), read when an order is placed.
    products: GlobalTableHandle<String, Product>,
}

impl std::fmt::Debug for OrderProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderProcessor")
            .field("topics", &self.topics)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl OrderProcessor {
    /// A processor for `topics`, in consumer group `group` (named in its alerts), decoding Avro
    /// through the registry at `registry_url` (only asked for schema ids it has not seen).
    pub fn new(topics: Topics, group: &str, registry_url: &str) -> Result<Self, String> {
        let source = RegistrySource::new(Registry::new(registry_url))
            .map_err(|e| format!("schema registry client: {e}"))?;
        Self::with_schemas(topics, group, source)
    }

    /// As [`OrderProcessor::new`], reading Avro writer schemas from `source` instead of a
    /// registry: tests run the processor on `eosflow::testing::TopologyTestDriver` with a
    /// [`eosflow::serdes::FixedSource`] holding the ids their records were encoded with.
    pub fn with_schemas(
        topics: Topics,
        group: &str,
        source: impl SchemaSource + 'static,
    ) -> Result<Self, String> {
        let catalog = contracts::catalog().map_err(|e| format!("built-in contracts: {e}"))?;
        Ok(Self {
            products: catalog::products(&topics),
            topics,
            group: group.to_string(),
            decoder: Decoder::new(source, catalog).with_upcasters(contracts::upcasters()),
            timeouts: SagaTimeouts::default(),
        })
    }

    /// The products global table this processor reads (the test driver pipes rows with it).
    pub fn products(&self) -> &GlobalTableHandle<String, Product> {
        &self.products
    }

    /// The same processor with the saga's step timeouts `timeouts` (default: 30 s each).
    pub fn with_timeouts(mut self, timeouts: SagaTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Sends `record` (a reply, or a timeout's stand-in) to the replies' DLT with `reason`, in
    /// this transaction: what an operator sees (`eosflow dlt list`).
    fn dead_letter(&self, ctx: &mut Context<'_>, record: &Record<'_>, reason: &str) {
        let err = ProcessError::Permanent(reason.to_string());
        let headers = dead_letter_headers(record, &self.group, &err, ctx.wall_clock_ms());
        ctx.emit(
            dlt_topic(&self.topics.replies),
            record.key.map(<[u8]>::to_vec),
            record.value.map(<[u8]>::to_vec),
            headers,
        );
    }

    /// Reports what the saga asked to be reported about `record`: alerts and late replies.
    fn report(&self, ctx: &mut Context<'_>, record: &Record<'_>, actions: &[Action]) {
        for a in actions {
            match a {
                Action::Alert(reason) => {
                    self.dead_letter(ctx, record, reason);
                    telemetry::compensation_failed();
                    tracing::error!(error = %reason, "saga compensation failed; alerted");
                }
                Action::TimeoutAlert(reason) => {
                    self.dead_letter(ctx, record, reason);
                    tracing::warn!(error = %reason, "saga step timed out past the pivot; alerted");
                }
                Action::LateReply { step, reason } => {
                    self.dead_letter(ctx, record, reason);
                    telemetry::late_reply(*step);
                    tracing::warn!(%reason, "late saga reply");
                }
                _ => {}
            }
        }
    }

    /// A saga timer fired.
    fn on_saga_timeout(
        &mut self,
        ctx: &mut Context<'_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let fired = Timeout::from_timer_key(&timer.key).ok_or_else(|| {
            ProcessError::Permanent(format!(
                "bad-timer: {:?} is not a saga timeout's key",
                String::from_utf8_lossy(&timer.key)
            ))
        })?;
        let key = fired.order_id.clone();
        let Some(mut saga) = Self::load::<Saga>(ctx, &format!("saga/{key}"))? else {
            return Err(ProcessError::Permanent(format!(
                "unknown-saga: a timeout for order {key}, which has no saga"
            )));
        };
        let order: Order = Self::load(ctx, &format!("order/{key}"))?.ok_or_else(|| {
            ProcessError::permanent(format!("order/{key} is missing for a running saga"))
        })?;
        match saga.on_timeout(&fired, &order, ctx.wall_clock_ms()) {
            Ok(actions) => {
                telemetry::saga_timeout(fired.step);
                tracing::info!(order = %key, step = %fired.label(), "saga step timed out");
                // The timeout has no record of its own: an alert carries a stand-in, keyed by
                // the order, its value naming the step that went unanswered.
                let value = serde_json::json!({
                    "order_id": key,
                    "timed_out": fired.label(),
                    "due_ms": timer.due_ms,
                })
                .to_string();
                let headers = [("type".to_string(), b"fulfilment.saga-timeout".to_vec())];
                let stand_in = Record {
                    topic: &self.topics.replies,
                    partition: -1,
                    offset: -1,
                    timestamp: Some(timer.due_ms),
                    key: Some(key.as_bytes()),
                    value: Some(value.as_bytes()),
                    headers: &headers,
                };
                self.report(ctx, &stand_in, &actions);
                self.run(ctx, order, saga, actions)
            }
            Err(stale) => {
                telemetry::stale_timeout();
                tracing::debug!(%stale, "ignored");
                Ok(())
            }
        }
    }

    fn load<T: DeserializeOwned>(ctx: &Context<'_>, key: &str) -> Result<Option<T>, ProcessError> {
        match ctx.get(key.as_bytes())? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| ProcessError::permanent(format!("stored {key} is corrupt: {e}"))),
        }
    }

    fn save<T: serde::Serialize>(ctx: &mut Context<'_>, key: &str, v: &T) {
        ctx.put(key.as_bytes(), serde_json::to_vec(v).unwrap_or_default());
    }

    fn reject(r: Rejection) -> ProcessError {
        let text = r.to_string();
        telemetry::rejected(text.split(':').next().unwrap_or("rejected"));
        ProcessError::Permanent(text)
    }

    /// An order event from the order service.
    fn on_order_event(
        &mut self,
        ctx: &mut Context<'_>,
        r: &Record<'_>,
    ) -> Result<(), ProcessError> {
        let decoded = self.decoder.decode(r)?;
        let event = model::from_event(&decoded).map_err(|m| {
            telemetry::rejected(m.split(':').next().unwrap_or("bad-payload"));
            ProcessError::Permanent(m)
        })?;
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        if key != event.order_id() {
            telemetry::rejected("key-mismatch");
            return Err(ProcessError::Permanent(format!(
                "key-mismatch: the record's key {key:?} is not its order id {:?}",
                event.order_id()
            )));
        }
        let order: Option<Order> = Self::load(ctx, &format!("order/{key}"))?;
        match &event {
            OrderEvent::Placed(_) => {
                let placed = model::apply(order.as_ref(), &event).map_err(Self::reject)?;
                // Enrichment: each line's product as the catalog has it now, kept with the
                // order so every later feed update carries the same names. A sku the catalog
                // lacks is stamped without a name (counted), never a reason to lose the order.
                let products = self.stamp_products(&placed)?;
                Self::save(ctx, &format!("order/{key}"), &placed);
                Self::save(ctx, &format!("products/{key}"), &products);
                self.feed(ctx, &placed)?;
                let (saga, actions) = Saga::start(&placed);
                self.run(ctx, placed, saga, actions)
            }
            OrderEvent::Cancelled(_) => {
                // The rules of the aggregate first (unknown, final, paid), then the saga's.
                let cancelled = model::apply(order.as_ref(), &event).map_err(Self::reject)?;
                let order = order.ok_or_else(|| {
                    ProcessError::permanent(
                        "unreachable: apply accepted a cancel of an unknown order",
                    )
                })?;
                let mut saga: Saga = Self::load(ctx, &format!("saga/{key}"))?.ok_or_else(|| {
                    ProcessError::permanent(format!("saga/{key} is missing for a placed order"))
                })?;
                let actions = saga.on_customer_cancel().map_err(|why| {
                    Self::reject(Rejection::Impossible {
                        order_id: key.clone(),
                        from: order.status,
                        event: "order-cancelled",
                        why,
                    })
                })?;
                self.transition(ctx, &order, &cancelled)?;
                self.run(ctx, cancelled, saga, actions)
            }
            OrderEvent::Paid(_) | OrderEvent::Shipped(_) => {
                telemetry::rejected("not-accepted");
                Err(ProcessError::Permanent(format!(
                    "not-accepted: {} for order {key} is decided by the fulfilment saga, not accepted from the order service",
                    event.name()
                )))
            }
        }
    }

    /// A service's reply to the saga.
    fn on_reply(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let value = r
            .value
            .ok_or_else(|| ProcessError::permanent("missing-value: a reply without a value"))?;
        let parse = |what: &str, e: serde_json::Error| {
            ProcessError::Permanent(format!(
                "bad-payload: {what} does not match its contract: {e}"
            ))
        };
        let reply = match r.header("type") {
            Some(t) if t == types::STOCK_REPLY.as_bytes() => Reply::Stock(
                serde_json::from_slice::<StockReply>(value)
                    .map_err(|e| parse(types::STOCK_REPLY, e))?,
            ),
            Some(t) if t == types::PAYMENT_REPLY.as_bytes() => Reply::Payment(
                serde_json::from_slice::<PaymentReply>(value)
                    .map_err(|e| parse(types::PAYMENT_REPLY, e))?,
            ),
            other => {
                return Err(ProcessError::Permanent(format!(
                    "unknown-type: {:?} is not a saga reply",
                    other.map(String::from_utf8_lossy)
                )))
            }
        };
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        let Some(mut saga) = Self::load::<Saga>(ctx, &format!("saga/{key}"))? else {
            return Err(ProcessError::Permanent(format!(
                "unknown-saga: a reply for order {key}, which has no saga"
            )));
        };
        let order: Order = Self::load(ctx, &format!("order/{key}"))?.ok_or_else(|| {
            ProcessError::permanent(format!("order/{key} is missing for a running saga"))
        })?;
        match saga.on_reply(&reply, &order, ctx.wall_clock_ms()) {
            Ok(actions) => {
                // A failed compensation's last reply, or a late reply, goes to the DLT with the
                // reason, in this transaction: an operator sees it, it is not lost.
                self.report(ctx, r, &actions);
                self.run(ctx, order, saga, actions)
            }
            Err(stale) => {
                telemetry::stale_reply();
                tracing::debug!(%stale, "ignored");
                Ok(())
            }
        }
    }

    /// Carries out the saga's actions and persists both the aggregate and the saga.
    fn run(
        &mut self,
        ctx: &mut Context<'_>,
        mut order: Order,
        saga: Saga,
        actions: Vec<Action>,
    ) -> Result<(), ProcessError> {
        let key = order.order_id.clone();
        for a in actions {
            match a {
                Action::Stock(cmd) => {
                    let (v, h) = messages::encode(types::STOCK_COMMAND, &cmd);
                    ctx.emit(
                        self.topics.stock.clone(),
                        Some(key.clone().into_bytes()),
                        Some(v),
                        h,
                    );
                }
                Action::Payment(cmd) => {
                    let (v, h) = messages::encode(types::PAYMENT_COMMAND, &cmd);
                    ctx.emit(
                        self.topics.payment.clone(),
                        Some(key.clone().into_bytes()),
                        Some(v),
                        h,
                    );
                }
                Action::Order(ev) => {
                    // The saga only asks for transitions the rules allow; one that is refused
                    // is a bug worth a dead letter, not a silent skip.
                    let next = model::apply(Some(&order), &ev).map_err(Self::reject)?;
                    self.transition(ctx, &order, &next)?;
                    order = next;
                }
                Action::End(outcome) => {
                    let ended = SagaEnded {
                        order_id: key.clone(),
                        outcome,
                        steps: saga.steps.clone(),
                        ended_at: ctx.wall_clock_ms(),
                    };
                    let (v, h) = messages::encode(types::SAGA_ENDED, &ended);
                    ctx.emit(
                        self.topics.saga_events.clone(),
                        Some(key.clone().into_bytes()),
                        Some(v),
                        h,
                    );
                    telemetry::saga_ended(outcome);
                }
                Action::ScheduleTimeout(t) => {
                    let after = i64::try_from(self.timeouts.for_step(t.step)).unwrap_or(i64::MAX);
                    let due = ctx.wall_clock_ms().saturating_add(after);
                    ctx.schedule(Timer::wall_clock(t.timer_key(), due).named(saga::TIMER_NAME))?;
                }
                Action::CancelTimeout(t) => {
                    ctx.cancel(TimerKind::WallClock, saga::TIMER_NAME, &t.timer_key())?;
                }
                // Reported by `report`, which has the record.
                Action::Alert(_) | Action::TimeoutAlert(_) | Action::LateReply { .. } => {}
            }
        }
        Self::save(ctx, &format!("order/{key}"), &order);
        Self::save(ctx, &format!("saga/{key}"), &saga);
        Ok(())
    }

    /// Emits the status change and the read model's update of `from` → `to`.
    fn transition(
        &self,
        ctx: &mut Context<'_>,
        from: &Order,
        to: &Order,
    ) -> Result<(), ProcessError> {
        let changed = StatusChanged {
            order_id: to.order_id.clone(),
            changed_at: ctx.wall_clock_ms(),
            from_status: from.status,
            to_status: to.status,
        };
        let (v, h) = messages::encode(types::STATUS_CHANGED, &changed);
        ctx.emit(
            self.topics.status.clone(),
            Some(to.order_id.clone().into_bytes()),
            Some(v),
            h,
        );
        telemetry::transitioned(match to.status {
            model::OrderStatus::Placed => "placed",
            model::OrderStatus::Paid => "paid",
            model::OrderStatus::Shipped => "shipped",
            model::OrderStatus::Cancelled => "cancelled",
        });
        self.feed(ctx, to)
    }

    /// The lines of `order` with their products from the catalog global table.
    fn stamp_products(&self, order: &Order) -> Result<Vec<OrderedProduct>, ProcessError> {
        order
            .lines
            .iter()
            .map(|l| {
                let product = self.products.get(&l.sku)?;
                if product.is_none() {
                    telemetry::unknown_product();
                }
                Ok(OrderedProduct {
                    sku: l.sku.clone(),
                    quantity: l.quantity,
                    name: product.as_ref().map(|p| p.name.clone()),
                    category: product.map(|p| p.category),
                })
            })
            .collect()
    }

    fn feed(&self, ctx: &mut Context<'_>, o: &Order) -> Result<(), ProcessError> {
        let products: Vec<OrderedProduct> =
            Self::load(ctx, &format!("products/{}", o.order_id))?.unwrap_or_default();
        let u = CustomerOrderUpdated {
            customer_id: o.customer_id.clone(),
            order_id: o.order_id.clone(),
            status: o.status,
            version: o.version,
            total_minor: o.total_minor,
            products,
        };
        let (v, h) = messages::encode(types::CUSTOMER_ORDER_UPDATED, &u);
        ctx.emit(
            self.topics.feed.clone(),
            Some(o.customer_id.clone().into_bytes()),
            Some(v),
            h,
        );
        Ok(())
    }
}

impl Processor for OrderProcessor {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        if r.base_topic() == self.topics.replies {
            self.on_reply(ctx, r)
        } else {
            self.on_order_event(ctx, r)
        }
    }

    /// A saga timeout fired (the only timers this processor schedules).
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        if timer.name != saga::TIMER_NAME {
            return Ok(());
        }
        self.on_saga_timeout(ctx, timer)
    }
}

impl OrderProcessor {
    /// The aggregate as it runs: dedup by the business event id when the order service set one
    /// (a re-sent event keeps it), else the outbox row's id; the orders store; the product
    /// catalog as a global table, read whole before the instance joins its group.
    pub fn spec(self) -> ProcessorSpec<Self> {
        let products = self.products.clone();
        ProcessorSpec::new(self)
            .store_name(super::Topology::Orders.store())
            .message_id(|r| {
                r.header(EVENT_ID_HEADER)
                    .or_else(|| r.header("id"))
                    .map(<[u8]>::to_vec)
            })
            .global_table(&products)
    }
}
