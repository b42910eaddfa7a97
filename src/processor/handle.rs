//! One record inside the open transaction: dedup, per-key order behind the retry ladder, the
//! handler call (panics caught), and routing a failure up the ladder or to the DLT. Kafka-free:
//! records go to the [`Engine`]'s [`Output`], so the runtime and the test driver share it.

use super::engine::{Engine, Output, Task};
use super::{Application, ProcessError, Record};
use crate::codec::envelope::EnvelopeRef;
use crate::retry::dlt::{self, DltClass};
use crate::retry::headers::{self as rh, History};
use crate::retry::parked::{self, Follower, HeadAt};
use crate::retry::{base_and_level, retry_topic, OnDeadLetter, Parked};
use crate::sink::SinkError;
use crate::state::dedup::{self, Seen};
use crate::state::Column;
use crate::telemetry;

/// What became of a failed record's key.
enum AfterFailure {
    /// The key is settled (not parked, or parked and saved).
    Settled,
    /// The head was dead-lettered under `continue`: the key's followers go on.
    DrainFollowers(Parked),
}

/// Counts one record of `topic` in a per-batch tally without a `String` per record: the name
/// is copied once per batch, when first seen.
fn tally(counts: &mut std::collections::BTreeMap<String, u64>, topic: &str) {
    match counts.get_mut(topic) {
        Some(n) => *n += 1,
        None => {
            counts.insert(topic.to_string(), 1);
        }
    }
}

/// `key`'s parked entry as the open batch sees it; a store read error aborts the batch.
fn load_parked(task: &mut Task, key: &[u8]) -> Result<Option<Parked>, SinkError> {
    Ok(parked::load(
        &task.store,
        &mut task.overlay,
        key,
        task.store_has_parked,
    )?)
}

/// Writes `key`'s parked entry; a key left draining is remembered for the next batch.
fn save_parked(task: &mut Task, key: &[u8], parked: Option<&Parked>) {
    parked::save(&mut task.overlay, key, parked);
    if parked.is_some_and(|p| p.head_at == HeadAt::Draining) && !task.draining.contains(key) {
        task.draining.insert(key.to_vec());
    }
}

/// What the dedup column says of `id` for a record with `digest`; a store read error aborts
/// the batch instead of reading as "not seen".
fn seen(task: &Task, id: &[u8], digest: u64) -> Result<Seen, SinkError> {
    Ok(dedup::lookup(&task.store, &task.overlay, id, digest)?)
}

impl<P: Application, O: Output> Engine<'_, P, O> {
    /// A table topic's record: written into the table's store in the open batch (a null value
    /// deletes the key), committed with the topic's offset. No handler, dedup or retry ladder:
    /// the topic is the table's changelog, and restore applies its records the same way. A
    /// record without a key cannot be a table row: it is skipped and counted.
    ///
    /// A versioned table keeps the record as a version at its timestamp
    /// ([`crate::state::versioned`]); one without a timestamp, or older than the table's
    /// history, is skipped and counted the same way. A store that cannot be read aborts the
    /// batch.
    fn update_table(&mut self, name: &str, record: &Record<'_>) -> Result<(), SinkError> {
        let Some(task) = self.tasks.get_mut(&record.partition) else {
            return Ok(());
        };
        let Some(table) = task.named.iter_mut().find(|n| n.table && n.name == name) else {
            return Ok(());
        };
        let Some(key) = record.key else {
            tracing::warn!(
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                "table record without a key skipped"
            );
            telemetry::table_record_skipped(name);
            return Ok(());
        };
        if let Some(history_ms) = table.history_ms {
            if update_versioned(table, name, record, key, history_ms)? {
                self.summary.table_updates += 1;
            }
            return Ok(());
        }
        match record.value {
            Some(v) => table.overlay.put(Column::State, key, v.to_vec()),
            None => table.overlay.delete(Column::State, key),
        }
        self.summary.table_updates += 1;
        Ok(())
    }

    /// Processes one record inside the open transaction.
    pub(crate) fn handle(&mut self, record: &Record<'_>, now: i64) -> Result<(), SinkError> {
        let record = *record;
        let opts = self.opts;
        if let Some((name, _)) = opts.tables.iter().find(|(_, t)| t == record.topic) {
            return self.update_table(name, &record);
        }
        let ordered = self.processor.ordered() && record.key.is_some();
        let key = record.key.unwrap_or_default();
        let sub = self.processor.sub_topology(record.topic);
        if !self.tasks.contains_key(&record.partition) {
            return Ok(());
        }
        let event_time = match self.processor.checked_event_time(&record) {
            Ok(t) => t,
            Err(bad) => return self.bad_event_time(&record, &bad, now),
        };
        let Some(task) = self.tasks.get_mut(&record.partition) else {
            return Ok(());
        };
        // A repartition record says how far its writer's stream time is: the reading task's
        // stream time is the least of its writers' (see `Task::observe_upstream`). A record
        // only carrying that is done. It is read by a sub-topology other than the first, or by
        // the first when a store shared with a raw input ties them (a table-table join of a
        // table read from a topic with one aggregated behind a repartition).
        let mark = if sub > 0 || self.processor.sub_topology_count() > 1 {
            super::engine::Mark::of(&record)
        } else {
            None
        };
        match mark {
            Some(m) if m.only => {
                if base_and_level(record.topic).1 == 0 {
                    task.observe_upstream(sub, &m, event_time);
                }
                return Ok(());
            }
            Some(m) if base_and_level(record.topic).1 == 0 => {
                task.observe_upstream(sub, &m, event_time);
            }
            // A repartition record back from a retry level: its writer's progress was taken
            // when it was first read, and its own time must not run ahead of the watermark.
            Some(_) => {}
            None => task.observe(sub, event_time),
        }
        if mark.is_some() {
            // Which input record this one comes from: the queries' positions behind a
            // repartition (docs/interactive-queries.md).
            if let Some(origin) = super::engine::Origin::of(&record) {
                task.note_origin(sub, origin);
            }
        }
        let parked = if ordered {
            load_parked(task, key)?
        } else {
            None
        };
        if let Some(mut p) = parked {
            let history = History::of(&record);
            let unparks = history.redriven && p.head_at == HeadAt::DeadLetter;
            if !unparks && !p.is_head(history.seq) {
                // A later record of a key whose head is in the ladder (or the DLT, or whose
                // followers are still draining): it waits, unless too many wait already.
                let max = self
                    .opts
                    .retry_for(base_and_level(record.topic).0)
                    .max_parked_followers;
                if p.waiting() >= max {
                    let reason = format!(
                        "{} records already wait behind this key's parked head (retry.max_parked_followers_per_key = {max})",
                        p.waiting()
                    );
                    tracing::error!(
                        topic = record.topic,
                        partition = record.partition,
                        offset = record.offset,
                        id = %message_id(&record),
                        waiting = p.waiting(),
                        max,
                        "parked key full; record dead-lettered as parked-overflow"
                    );
                    telemetry::parked_overflow(base_and_level(record.topic).0);
                    return self.dead_letter(
                        &record,
                        &history,
                        DltClass::ParkedOverflow,
                        reason,
                        Vec::new(),
                        now,
                    );
                }
                parked::push(&mut task.overlay, key, &mut p, &Follower::of(&record));
                save_parked(task, key, Some(&p));
                self.summary.parked_followers += 1;
                telemetry::parked_follower(base_and_level(record.topic).0);
                return Ok(());
            }
            return match self.attempt(&record, now)? {
                Some(Ok(())) | None => self.drain(key, record.partition, p, now),
                Some(Err(err)) => match self.fail(&record, &history, err, Some(p), ordered, now)? {
                    AfterFailure::Settled => Ok(()),
                    AfterFailure::DrainFollowers(p) => self.drain(key, record.partition, p, now),
                },
            };
        }
        // The retry headers are read only when they matter: a record that succeeds never needs them.
        match self.attempt(&record, now)? {
            Some(Ok(())) | None => Ok(()),
            Some(Err(err)) => {
                match self.fail(&record, &History::of(&record), err, None, ordered, now)? {
                    AfterFailure::Settled => Ok(()),
                    AfterFailure::DrainFollowers(p) => self.drain(key, record.partition, p, now),
                }
            }
        }
    }

    /// Runs the handler on one record: `None` if its id was already processed (skipped),
    /// `Some(Ok)` with its writes, dedup mark and emits in the transaction, `Some(Err)` untouched.
    fn attempt(
        &mut self,
        record: &Record<'_>,
        now: i64,
    ) -> Result<Option<Result<(), ProcessError>>, SinkError> {
        if !self.isolated.is_empty() {
            let key = (record.topic.to_string(), record.partition, record.offset);
            if let Some(i) = self.isolated.get(&key) {
                // It made a batch fail before: dead-letter it without running the handler.
                *self.forced_dead_letter = Some((i.class, i.stage));
                return Ok(Some(Err(ProcessError::Permanent(i.reason.clone()))));
            }
        }
        let id = self.processor.message_id(record);
        let Some(task) = self.tasks.get_mut(&record.partition) else {
            return Ok(None);
        };
        let digest = id.as_ref().map(|_| dedup::digest(record.key, record.value));
        if let (Some(id), Some(digest)) = (&id, digest) {
            match seen(task, id, digest)? {
                Seen::New => {}
                Seen::Duplicate => {
                    self.summary.dedup_hits += 1;
                    telemetry::dedup_hit(record.topic);
                    tracing::debug!(
                        topic = record.topic,
                        partition = record.partition,
                        offset = record.offset,
                        "duplicate id skipped"
                    );
                    return Ok(None);
                }
                Seen::Conflict { stored } => {
                    self.id_conflict(record, id, stored, digest, now)?;
                    return Ok(None);
                }
            }
        }
        let event_time = self.processor.event_time(record);
        let sub = self.processor.sub_topology(record.topic);
        let processor = &mut self.processor;
        let outcome = task.call(sub, id.as_deref(), now, event_time, "handler", |ctx| {
            processor.process(ctx, record)
        });
        let (writes, named, emits, dead_letter) = match outcome {
            Ok(parts) => parts,
            Err(e) => return Ok(Some(Err(e))),
        };
        task.absorb(sub, writes, named);
        // A record the call dead-lettered (a late record) was not processed: no dedup mark, so
        // `eosflow dlt redrive` of it (after the grace was raised, say) runs the handler. The
        // redrive that is processed marks the id, so a second redrive is a duplicate.
        if let (Some(id), Some(digest), None) = (&id, digest, &dead_letter) {
            task.overlay
                .put(Column::Dedup, id, dedup::mark(now, digest));
        }
        self.send_emits(emits, record.headers, event_time)?;
        tally(self.processed, record.topic);
        if let Some(d) = dead_letter {
            // The call succeeded and asked for its input in the DLT (a late record): no retry,
            // no parked key; the dead letter commits with the call's writes.
            if d.class == DltClass::LateRecord {
                self.summary.late += 1;
            }
            let history = History::of(record);
            self.dead_letter(record, &history, d.class, d.reason, d.headers, now)?;
        }
        Ok(Some(Ok(())))
    }

    /// Sends a call's emits in the open transaction, each stamped with `event_time` unless it
    /// has its own timestamp, and each carrying the envelope of an output caused by an input
    /// with `input_headers`.
    pub(crate) fn send_emits(
        &mut self,
        emits: Vec<crate::record::Emit>,
        input_headers: &[(String, Vec<u8>)],
        event_time: Option<i64>,
    ) -> Result<(), SinkError> {
        // Every output carries the envelope (docs/contracts.md): a fresh id, occurred_at, aggregate_id
        // (its key), causation = the input's id, correlation/tenant carried, and the input's
        // trace continued as a child span. Headers the handler set itself win. Built from
        // borrowed bytes: this runs for every output.
        let input = EnvelopeRef::of(input_headers);
        let child_trace = input
            .traceparent
            .and_then(telemetry::trace::child_traceparent);
        for e in emits {
            let id = self.stamps.new_id();
            let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let id_text: &[u8] = id.hyphenated().encode_lower(&mut id_text).as_bytes();
            let occurred_at = self.stamps.occurred_at();
            let aggregate = e
                .key
                .as_deref()
                .filter(|k| !k.is_empty())
                .map(String::from_utf8_lossy);
            let envelope = input.child_headers(
                id_text,
                occurred_at.as_bytes(),
                aggregate.as_deref().map(str::as_bytes),
                child_trace.as_deref().map(str::as_bytes),
            );
            let own = e.headers.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
            let stamped = envelope.into_iter().filter_map(|(k, v)| {
                let v = v?;
                (!e.headers.iter().any(|(name, _)| name == k)).then_some((k, v))
            });
            self.out.emit(
                &e.topic,
                e.timestamp.or(event_time),
                e.key.as_deref(),
                e.value.as_deref(),
                own.chain(stamped),
            )?;
            tally(self.produced, &e.topic);
        }
        Ok(())
    }

    /// The key's head is done: its followers are processed in order until one fails (and
    /// becomes the new head) or none is left (the key is free). At most
    /// [`parked::DRAIN_CHUNK`] of them per call: a key with more left is saved as draining and
    /// continued by [`Engine::drain_parked`] at the start of the next batch.
    fn drain(
        &mut self,
        key: &[u8],
        partition: i32,
        mut p: Parked,
        now: i64,
    ) -> Result<(), SinkError> {
        let mut budget = parked::DRAIN_CHUNK;
        loop {
            let Some(task) = self.tasks.get_mut(&partition) else {
                return Ok(());
            };
            if p.waiting() == 0 {
                save_parked(task, key, None);
                return Ok(());
            }
            if budget == 0 {
                p.head_at = HeadAt::Draining;
                save_parked(task, key, Some(&p));
                return Ok(());
            }
            budget -= 1;
            let Some(f) = parked::pop(&task.store, &mut task.overlay, key, &mut p)? else {
                continue;
            };
            let record = f.record(key);
            let history = History::of(&record);
            match self.attempt(&record, now)? {
                Some(Ok(())) | None => {}
                Some(Err(err)) => match self.fail(&record, &history, err, Some(p), true, now)? {
                    AfterFailure::Settled => return Ok(()),
                    AfterFailure::DrainFollowers(rest) => p = rest,
                },
            }
        }
    }

    /// Continues draining the keys left draining by earlier batches, a chunk each; called at
    /// the start of every batch, when the overlays are empty and the store is the truth. A key
    /// the committed store no longer has draining is forgotten.
    pub(crate) fn drain_parked(&mut self, now: i64) -> Result<(), SinkError> {
        let pending: Vec<(i32, Vec<u8>)> = self
            .tasks
            .iter()
            .flat_map(|(p, t)| t.draining.iter().map(move |k| (*p, k.clone())))
            .collect();
        for (partition, key) in pending {
            let Some(task) = self.tasks.get_mut(&partition) else {
                continue;
            };
            match load_parked(task, &key)? {
                Some(p) if p.head_at == HeadAt::Draining => self.drain(&key, partition, p, now)?,
                _ => {
                    task.draining.remove(&key);
                }
            }
        }
        Ok(())
    }

    /// A record whose event time is outside the supported range: dead-lettered as
    /// `bad-timestamp` in the open transaction (value and extractor in headers), logged and
    /// counted, before it can move stream time or reach a node. It is not marked processed, so
    /// a redrive after the producer or extractor is fixed goes through; its key is not parked.
    fn bad_event_time(
        &mut self,
        record: &Record<'_>,
        bad: &crate::topology::time::BadEventTime,
        now: i64,
    ) -> Result<(), SinkError> {
        tracing::error!(
            topic = record.topic,
            partition = record.partition,
            offset = record.offset,
            id = %message_id(record),
            event_time = bad.value,
            extractor = %bad.extractor,
            "event time out of range; record dead-lettered as bad-timestamp"
        );
        let extra = vec![
            (
                format!("{}bad.timestamp", dlt::PREFIX),
                bad.value.to_string().into_bytes(),
            ),
            (
                format!("{}bad.timestamp.extractor", dlt::PREFIX),
                bad.extractor.clone().into_bytes(),
            ),
        ];
        self.dead_letter(
            record,
            &History::of(record),
            DltClass::BadTimestamp,
            bad.to_string(),
            extra,
            now,
        )
    }

    /// A record whose id was processed before with another key or value: dead-lettered as
    /// `id-conflict` with both digests, in the open transaction, and counted.
    fn id_conflict(
        &mut self,
        record: &Record<'_>,
        id: &[u8],
        stored: u64,
        received: u64,
        now: i64,
    ) -> Result<(), SinkError> {
        let id_text = String::from_utf8_lossy(id);
        tracing::warn!(
            topic = record.topic,
            partition = record.partition,
            offset = record.offset,
            id = %id_text,
            stored = format!("{stored:016x}"),
            received = format!("{received:016x}"),
            "message id reused with another key or value; dead-lettered as id-conflict"
        );
        telemetry::id_conflict(base_and_level(record.topic).0);
        let extra = vec![
            (
                format!("{}id.digest.stored", dlt::PREFIX),
                format!("{stored:016x}").into_bytes(),
            ),
            (
                format!("{}id.digest.received", dlt::PREFIX),
                format!("{received:016x}").into_bytes(),
            ),
        ];
        self.dead_letter(
            record,
            &History::of(record),
            DltClass::IdConflict,
            format!("message id {id_text} was processed before with another key or value"),
            extra,
            now,
        )
    }

    /// Sends `record` to its DLT with `class`, `reason` and `extra` headers, in the open
    /// transaction (records that never reached the handler: overflow and id conflicts).
    fn dead_letter(
        &mut self,
        record: &Record<'_>,
        history: &History,
        class: DltClass,
        reason: String,
        extra: Vec<(String, Vec<u8>)>,
        now: i64,
    ) -> Result<(), SinkError> {
        let err = ProcessError::permanent(reason);
        let mut h = dlt::headers(record, history, &self.opts.app_id, class, Some(&err), now);
        h.extend(extra);
        let dlt_topic = dlt::topic_for(record.topic);
        self.send_dead_letter(record, &dlt_topic, &h, 0)
    }

    /// A failed record goes up the ladder (transient, levels left) or to the DLT; its key is
    /// parked behind it when order matters.
    fn fail(
        &mut self,
        record: &Record<'_>,
        history: &History,
        err: ProcessError,
        parked: Option<Parked>,
        ordered: bool,
        now: i64,
    ) -> Result<AfterFailure, SinkError> {
        let (base, _) = base_and_level(record.topic);
        let key = record.key.unwrap_or_default();
        let next = history.attempt + 1;
        let forced = self.forced_dead_letter.take();
        let delay = match &err {
            _ if forced.is_some() => None,
            ProcessError::Transient(_) => self.opts.retry_for(base).delay(next),
            ProcessError::Permanent(_) => None,
        };
        if let Some(delay) = delay {
            let due_at = now + delay.as_millis() as i64;
            let seq = if ordered {
                let (p, seq) = match parked {
                    Some(mut p) => {
                        let s = p.new_head();
                        (p, s)
                    }
                    None => Parked::behind_ladder(0),
                };
                if let Some(task) = self.tasks.get_mut(&record.partition) {
                    save_parked(task, key, Some(&p));
                }
                Some(seq)
            } else {
                None
            };
            tracing::info!(
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                id = %message_id(record),
                level = next,
                delay_ms = delay.as_millis() as u64,
                error = err.message(),
                "transient failure; retrying"
            );
            let h = rh::forward(record, history, next, due_at, seq, Some((&err, now)));
            let event_time = self.processor.event_time(record);
            self.out.forward(
                &retry_topic(base, next),
                record.partition,
                event_time,
                record.key,
                record.value,
                &h,
            )?;
            self.summary.retried += 1;
            telemetry::retried(base, next);
            return Ok(AfterFailure::Settled);
        }
        let (class, stage) = forced.unwrap_or((DltClass::of(&err), 0));
        tracing::warn!(
            topic = record.topic,
            partition = record.partition,
            offset = record.offset,
            id = %message_id(record),
            class = class.as_str(),
            error = err.message(),
            "record dead-lettered"
        );
        let h = dlt::headers(record, history, &self.opts.app_id, class, Some(&err), now);
        self.send_dead_letter(record, &dlt::topic_for(base), &h, stage)?;
        if !ordered {
            return Ok(AfterFailure::Settled);
        }
        match (self.opts.retry_for(base).on_dead_letter, parked) {
            (OnDeadLetter::Continue, Some(p)) => Ok(AfterFailure::DrainFollowers(p)),
            (OnDeadLetter::Continue, None) => Ok(AfterFailure::Settled),
            (OnDeadLetter::Park, parked) => {
                let mut p = parked.unwrap_or_else(|| Parked::behind_ladder(0).0);
                p.head_at = HeadAt::DeadLetter;
                if let Some(task) = self.tasks.get_mut(&record.partition) {
                    save_parked(task, key, Some(&p));
                }
                Ok(AfterFailure::Settled)
            }
        }
    }
}

impl<P: Application, O: Output> Engine<'_, P, O> {
    /// Writes a dead letter (and counts it), cut down as far as it must be to be written: whole (stage 0), with
    /// its value truncated and only the `eosflow.dlt.*` headers (1), or a pointer alone — the
    /// original topic, partition and offset with the reason (2). A record whose dead letter is
    /// over the size limit (a 1 MB input plus the DLT headers) thereby still reaches the DLT. If
    /// not even the pointer can be written the record is skipped, loudly: its partition must
    /// not stall behind it.
    pub(super) fn send_dead_letter(
        &mut self,
        record: &Record<'_>,
        topic: &str,
        headers: &[(String, Vec<u8>)],
        stage: u8,
    ) -> Result<(), SinkError> {
        let mut stage = stage.min(2);
        // A dead letter keeps the record's event time as its timestamp, unless that is the
        // reason it is here (`bad-timestamp`): then its Kafka timestamp, if Kafka can take it.
        let event_time = match self.processor.checked_event_time(record) {
            Ok(t) => t,
            Err(_) => record.timestamp.filter(|t| *t >= 0),
        };
        loop {
            let sent = match stage {
                0 => self.out.forward(
                    topic,
                    record.partition,
                    event_time,
                    record.key,
                    record.value,
                    headers,
                ),
                s => {
                    let (value, h) = dlt::truncated(record.value, headers, s >= 2);
                    let key = if s >= 2 { None } else { record.key };
                    self.out
                        .forward(topic, record.partition, event_time, key, value, &h)
                }
            };
            match sent {
                Ok(()) => {
                    if stage > 0 {
                        let what = if stage == 1 { "truncated" } else { "pointer" };
                        tracing::error!(
                            topic = record.topic,
                            partition = record.partition,
                            offset = record.offset,
                            dlt = topic,
                            bytes = record.value.map_or(0, <[u8]>::len),
                            kept = what,
                            "dead letter cut down to fit; the full record stays at its original offset"
                        );
                        telemetry::dead_letter_reduced(topic, what);
                    }
                    self.summary.dead_lettered += 1;
                    telemetry::dead_lettered(base_and_level(record.topic).0);
                    return Ok(());
                }
                Err(SinkError::Unwritable { .. }) if stage < 2 => stage += 1,
                Err(SinkError::Unwritable { topic: t, source }) => {
                    tracing::error!(
                        topic = record.topic,
                        partition = record.partition,
                        offset = record.offset,
                        dlt = %t,
                        error = %source,
                        "not even a pointer could be dead-lettered: record SKIPPED so its partition moves on; redrive it from its original offset"
                    );
                    telemetry::record_skipped_unwritable(record.topic);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The `id` header for logs (never the payload).
fn message_id(record: &Record<'_>) -> String {
    record
        .header("id")
        .map(|i| String::from_utf8_lossy(i).to_string())
        .unwrap_or_default()
}

/// Applies a versioned table's record as a version at its timestamp and prunes a few expired
/// versions (bounded work per record). False when the record was skipped: no timestamp, or
/// older than the history cutoff (counted in `eosflow_table_records_skipped_total`, WARN at
/// most every [`crate::state::versioned::WARN_EVERY_MS`]).
fn update_versioned(
    table: &mut super::engine::NamedStore,
    name: &str,
    record: &Record<'_>,
    key: &[u8],
    history_ms: i64,
) -> Result<bool, crate::state::StateError> {
    use crate::state::versioned;
    let Some(ts) = record.timestamp else {
        versioned::warn_limited(|| {
            tracing::warn!(
                table = name,
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                "versioned table record without a timestamp skipped"
            );
        });
        telemetry::table_record_skipped(name);
        return Ok(false);
    };
    let applied = versioned::put(
        &mut table.overlay,
        &[],
        &table.store,
        key,
        ts,
        record.value,
        history_ms,
    )?;
    versioned::prune(
        &mut table.overlay,
        &[],
        &table.store,
        history_ms,
        versioned::PRUNE_PER_RECORD,
    )?;
    if let versioned::Applied::TooOld { cutoff } = applied {
        versioned::warn_limited(|| {
            tracing::warn!(
                table = name,
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                timestamp = ts,
                cutoff,
                "versioned table record older than the table's history skipped"
            );
        });
        telemetry::table_record_skipped(name);
        return Ok(false);
    }
    Ok(true)
}
