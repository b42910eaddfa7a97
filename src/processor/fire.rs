//! Firing due timers inside the open batch: the queue of one kind is scanned in due order from
//! where nothing earlier is pending up to the clock, each timer is removed and handed to
//! [`super::Processor::on_timer`], and its writes, emits and new timers join the batch — so a
//! timer fires exactly once with its effects, or again after a crash.
//!
//! A callback that fails (an error or a panic) cannot go up a retry ladder: there is no record
//! to forward. Its effects are discarded and the timer is dead-lettered to the DLT of the
//! first input topic, on the task's partition, keyed by the timer's key with its payload as the
//! value and `eosflow.dlt.timer.{kind,name,due}` headers (offset `-1`), logged at ERROR and
//! counted in `eosflow_timers_failed_total{kind}`. No timer can stall its partition.
//!
//! In the runtime, timers fired count like records against `processor.max_batch_records`: at
//! the start of each batch the due wall-clock timers (and event-time ones a full batch left)
//! fire, then each record's partition fires what its stream time reached. An idle instance
//! checks each task's next wall-clock due time (kept exact at every commit) once per commit
//! interval, so a wall-clock timer fires within about `processor.commit_interval_ms` of its
//! due time. An output of a timer callback the broker refuses outright (over the size limit,
//! an unknown topic) dead-letters the timer too, class `unwritable` as for a record; unlike a
//! record's, the callback's writes and the outputs sent before that one stay in the batch
//! (there is no record to isolate and run again without).

use std::ops::Bound;

use super::engine::{Engine, Output};
use super::timers::{self, Lane, Timer, TimerKind};
use super::{Application, ProcessError, Record};
use crate::retry::dlt::{self, DltClass};
use crate::retry::headers::History;
use crate::sink::SinkError;
use crate::telemetry;

/// Calls of a timer callback that fails transiently before the timer is dead-lettered as
/// `transient-exhausted`: a store read that hiccups, a dependency that blinks.
pub const TIMER_CALL_ATTEMPTS: usize = 3;

/// The waits (ms) between a transiently failing timer callback's calls, inside the open
/// batch: short, so the transaction stays well inside its timeout.
pub const TIMER_RETRY_BACKOFF_MS: [u64; 2] = [20, 200];

impl<P: Application, O: Output> Engine<'_, P, O> {
    /// Fires the timers of `lane` due at `up_to` or before on `partition`, in due order, at
    /// most `budget` of them (timers a callback schedules at or before `up_to` fire in the same
    /// call). Returns how many fired; what the budget left stays due for the next batch.
    pub(crate) fn fire_timers(
        &mut self,
        partition: i32,
        lane: Lane,
        up_to: i64,
        budget: usize,
        now: i64,
    ) -> Result<usize, SinkError> {
        let mut fired = 0;
        let slot = lane.kind.index();
        // Within one call the scan goes on after the last timer fired (its tombstone is in the
        // batch), unless a callback scheduled an earlier one and so lowered `scan_from`.
        let mut cursor: Option<(i64, Vec<u8>)> = None;
        let mut queue = timers::QueueReader::default();
        loop {
            let Some(task) = self.tasks.get_mut(&partition) else {
                return Ok(fired);
            };
            let Some(clock) = task.clocks.get(lane.sub) else {
                return Ok(fired);
            };
            let from = clock.scan_from[slot];
            if from > up_to {
                return Ok(fired);
            }
            let start = match cursor.take() {
                Some((due, key)) if from >= due => Bound::Excluded(key),
                _ => timers::from_due(lane, from),
            };
            let bounds = timers::due_bounds(lane, start, i64::MAX);
            let next = queue.next(&task.overlay, &task.store, &bounds)?;
            let due = next.as_ref().map_or(i64::MAX, |(_, t)| t.due_ms);
            if let Some(clock) = task.clocks.get_mut(lane.sub) {
                clock.scan_from[slot] = due;
            }
            let Some((key, timer)) = next else {
                return Ok(fired);
            };
            if timer.due_ms > up_to || fired >= budget {
                return Ok(fired);
            }
            timers::remove(&mut task.overlay, lane, &key, &timer);
            fired += 1;
            self.summary.timers_fired += 1;
            telemetry::timer_fired(lane.kind.as_str());
            self.fire(partition, lane.sub, &timer, now)?;
            cursor = Some((timer.due_ms, key));
        }
    }

    /// Fires the event-time timers of `partition`'s tasks that their stream times have reached
    /// (at most `budget`): each sub-topology's timers by its own task's stream time.
    pub(crate) fn fire_event_time(
        &mut self,
        partition: i32,
        budget: usize,
        now: i64,
    ) -> Result<usize, SinkError> {
        let Some(task) = self.tasks.get(&partition) else {
            return Ok(0);
        };
        let streams: Vec<(usize, i64)> = task
            .clocks
            .iter()
            .enumerate()
            .filter_map(|(sub, c)| Some((sub, c.stream_time?)))
            .collect();
        let mut fired = 0;
        for (sub, stream) in streams {
            let lane = Lane::new(TimerKind::EventTime, sub);
            let left = budget.saturating_sub(fired);
            fired += self.fire_timers(partition, lane, stream, left, now)?;
        }
        // Store entries whose event-time TTL the stream times reached (see `expiry`).
        let left = budget.saturating_sub(fired);
        fired += self.expire(partition, TimerKind::EventTime, left, now)?;
        Ok(fired)
    }

    /// Fires every partition's timers due at the start of a batch — wall-clock ones due at
    /// `now`, and event-time ones an earlier batch's limit left — at most `budget` in all,
    /// and expires the store entries due by the same clocks (`expiry`), counted in the same
    /// budget.
    pub(crate) fn fire_due(&mut self, budget: usize, now: i64) -> Result<usize, SinkError> {
        let due: Vec<(i32, usize)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.timer_due(now))
            .map(|(p, t)| (*p, t.clocks.len()))
            .collect();
        let mut fired = 0;
        for (p, subs) in due {
            fired += self.fire_event_time(p, budget.saturating_sub(fired), now)?;
            for sub in 0..subs {
                let left = budget.saturating_sub(fired);
                let lane = Lane::new(TimerKind::WallClock, sub);
                fired += self.fire_timers(p, lane, now, left, now)?;
            }
            let left = budget.saturating_sub(fired);
            fired += self.expire(p, TimerKind::WallClock, left, now)?;
        }
        Ok(fired)
    }

    /// Calls the processor's `on_timer` for one removed timer of sub-topology `sub`'s task and
    /// keeps its effects, or dead-letters the timer if the call fails. A transient failure is retried in place
    /// ([`TIMER_CALL_ATTEMPTS`] calls in all, with [`TIMER_RETRY_BACKOFF_MS`] between them)
    /// before the timer is dead-lettered as `transient-exhausted`. A callback that succeeds but
    /// asks for a dead letter (it gave up on what the timer owned and cleaned it up) keeps its
    /// writes and emits and dead-letters the timer with its class and reason.
    fn fire(
        &mut self,
        partition: i32,
        sub: usize,
        timer: &Timer,
        now: i64,
    ) -> Result<(), SinkError> {
        let mut attempt = 1;
        let outcome = loop {
            let Some(task) = self.tasks.get_mut(&partition) else {
                return Ok(());
            };
            let processor = &mut self.processor;
            let outcome = task.call(
                sub,
                None,
                now,
                Some(timer.due_ms),
                "timer callback",
                |ctx| processor.on_timer(ctx, timer),
            );
            match outcome {
                Err(ProcessError::Transient(e)) if attempt < TIMER_CALL_ATTEMPTS => {
                    let backoff = TIMER_RETRY_BACKOFF_MS
                        .get(attempt - 1)
                        .copied()
                        .unwrap_or(0);
                    tracing::warn!(
                        partition,
                        kind = timer.kind.as_str(),
                        name = %timer.name,
                        due_ms = timer.due_ms,
                        attempt,
                        backoff_ms = backoff,
                        error = %e,
                        "timer callback failed transiently; calling it again"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(backoff));
                    attempt += 1;
                }
                other => break other,
            }
        };
        let Some(task) = self.tasks.get_mut(&partition) else {
            return Ok(());
        };
        match outcome {
            Ok((writes, named, emits, dead_letter)) => {
                task.absorb(sub, writes, named);
                match self.send_emits(emits, &[], Some(timer.due_ms)) {
                    // No record to isolate and retry without: the timer is dead-lettered so the
                    // batch can commit (see the module doc).
                    Err(SinkError::Unwritable { topic, source }) => {
                        let e = ProcessError::permanent(format!("output to {topic}: {source}"));
                        self.timer_failed(partition, timer, &e, DltClass::Unwritable, now)
                    }
                    Err(e) => Err(e),
                    Ok(()) => match dead_letter {
                        Some(d) => {
                            let e = ProcessError::permanent(d.reason);
                            self.timer_failed(partition, timer, &e, d.class, now)
                        }
                        None => Ok(()),
                    },
                }
            }
            Err(e) => self.timer_failed(partition, timer, &e, DltClass::of(&e), now),
        }
    }

    /// A timer that failed: logged, counted and dead-lettered (see the module doc). `class` is
    /// [`DltClass::Unwritable`] when the callback ran but its output was refused (its store
    /// writes stay), otherwise the callback's own failure (its effects are discarded).
    fn timer_failed(
        &mut self,
        partition: i32,
        timer: &Timer,
        err: &ProcessError,
        class: DltClass,
        now: i64,
    ) -> Result<(), SinkError> {
        let kind = timer.kind.as_str();
        let effects = match class {
            DltClass::Unwritable => "its output was refused (its store writes stay)",
            DltClass::TransientExhausted => {
                "it failed transiently on every attempt; its effects are discarded"
            }
            _ => "its effects are discarded (a callback that gave up itself keeps its clean-up)",
        };
        tracing::error!(
            partition,
            kind,
            name = %timer.name,
            key = %String::from_utf8_lossy(&timer.key),
            due_ms = timer.due_ms,
            class = class.as_str(),
            error = %err,
            "timer failed: {effects}; the timer is dead-lettered"
        );
        telemetry::timer_failed(kind);
        let Some(input) = self.opts.input_topics.first().cloned() else {
            return Ok(());
        };
        let record = Record {
            topic: &input,
            partition,
            offset: -1,
            timestamp: Some(timer.due_ms),
            key: Some(&timer.key),
            value: Some(&timer.payload),
            headers: &[],
        };
        let mut h = dlt::headers(
            &record,
            &History::of(&record),
            &self.opts.app_id,
            class,
            Some(err),
            now,
        );
        for (k, v) in [
            ("timer.kind", kind.to_string()),
            ("timer.name", timer.name.clone()),
            ("timer.due", timer.due_ms.to_string()),
            // Its key and value are the timer's (an internal store key, a payload), not an
            // input record: `eosflow dlt redrive` refuses it.
            ("redrivable", "false".to_string()),
        ] {
            h.push((format!("{}{k}", dlt::PREFIX), v.into_bytes()));
        }
        self.send_dead_letter(&record, &dlt::topic_for(&input), &h, 0)
    }
}
