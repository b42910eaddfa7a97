//! Sweeping the expiry index of stores with a TTL ([`super::StoreHandle::with_ttl`]) inside
//! the open batch.
//!
//! Each write through a handle with a TTL keeps one entry per key in its store's expiry
//! index: the durable timers' queue layout (`processor::timers`) in the store's *own* timer
//! columns — lane = the TTL's clock and the writing task's sub-topology, name empty, the store
//! key as the timer key, due = the clock's time at the write plus the TTL (saturating). The
//! index is written through the store's overlay and goes to the store's changelog with its
//! state, so a store restored from the changelog, or kept warm by a standby, holds the index
//! the active store held at the same offset; nothing is rebuilt on restore.
//!
//! The sweep reads a lane in due order from where nothing earlier is pending up to its clock
//! (event time: the task's stream time; wall clock: the batch's time), and for each due entry
//! deletes the key (a changelog tombstone) and the entry, in the batch's transaction — so a
//! key expires exactly once, with the batch that committed it, or again after a crash. It
//! runs where timers fire: event-time lanes right after each record's partition fired its
//! event-time timers, wall-clock lanes (and event-time leftovers) at the start of each batch,
//! also on a partition that receives nothing (an idle instance checks once per commit
//! interval, as for wall-clock timers).
//!
//! Work is bounded: at most [`MAX_EXPIRED_PER_BATCH`] entries per partition and batch, and
//! they count like records against `processor.max_batch_records`; what is left stays due and
//! the next batch (started at once, as for timers a full batch left) goes on from there.
//! Expired entries are counted in `eosflow_state_expired_total{store}` (a batch that aborts
//! and is redone counts its expiry again).

use std::ops::Bound;

use super::engine::{Engine, NamedStore, Output};
use super::timers::{self, Lane, TimerKind};
use super::Application;
use crate::sink::SinkError;
use crate::state::{Column, StateError};
use crate::telemetry;

/// docs/ttl.md, whose example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/ttl.md")]
pub struct TtlPage;

/// The most store entries one batch expires on one partition: a burst of expiry (a clock
/// jump, a restore of an old store) is spread over several transactions instead of growing
/// one past its timeout.
pub const MAX_EXPIRED_PER_BATCH: usize = 1_000;

impl<P: Application, O: Output> Engine<'_, P, O> {
    /// Expires the due entries of `kind` in `partition`'s named stores (event time: up to each
    /// task's stream time; wall clock: up to `now`), at most `budget` and what is left of
    /// [`MAX_EXPIRED_PER_BATCH`] this batch. Returns how many expired.
    pub(crate) fn expire(
        &mut self,
        partition: i32,
        kind: TimerKind,
        budget: usize,
        now: i64,
    ) -> Result<usize, SinkError> {
        let Some(task) = self.tasks.get_mut(&partition) else {
            return Ok(0);
        };
        // Called after every record: a partition without a TTL store costs one pass over its
        // stores' flags, no allocation.
        let mut left = budget.min(MAX_EXPIRED_PER_BATCH.saturating_sub(task.expired_in_batch));
        let mut total = 0;
        let (named, expiry, clocks) = (&mut task.named, &mut task.expiry, &task.clocks);
        for (n, e) in named.iter_mut().zip(expiry.iter_mut()) {
            if !e.indexed || n.table {
                continue;
            }
            let mut expired = 0;
            for (sub, from) in e.scan_from.iter_mut().enumerate() {
                let up_to = match kind {
                    TimerKind::EventTime => clocks.get(sub).and_then(|c| c.stream_time),
                    TimerKind::WallClock => Some(now),
                };
                let Some(up_to) = up_to else {
                    continue;
                };
                let lane = Lane::new(kind, sub);
                let swept = sweep(n, &mut from[kind.index()], lane, up_to, left)?;
                expired += swept;
                left -= swept.min(left);
            }
            if expired > 0 {
                telemetry::state_expired(&n.name, expired);
                total += expired;
            }
        }
        task.expired_in_batch += total;
        Ok(total)
    }
}

/// Deletes the entries of `lane` in store `n` due at `up_to` or before, in due order, at most
/// `budget`, each with its key; moves `scan_from` to the next pending due time.
fn sweep(
    n: &mut NamedStore,
    scan_from: &mut i64,
    lane: Lane,
    up_to: i64,
    budget: usize,
) -> Result<usize, StateError> {
    if *scan_from > up_to || budget == 0 {
        return Ok(0);
    }
    let mut expired = 0;
    let mut queue = timers::QueueReader::default();
    let mut lower = timers::from_due(lane, *scan_from);
    loop {
        let bounds = timers::due_bounds(lane, lower, i64::MAX);
        let Some((key, entry)) = queue.next(&n.overlay, &n.store, &bounds)? else {
            *scan_from = i64::MAX;
            return Ok(expired);
        };
        if entry.due_ms > up_to || expired >= budget {
            *scan_from = entry.due_ms;
            return Ok(expired);
        }
        timers::remove(&mut n.overlay, lane, &key, &entry);
        n.overlay.delete(Column::State, &entry.key);
        expired += 1;
        lower = Bound::Excluded(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::stores::{ExpiryClocks, KeyValueStore, StoreView};
    use crate::processor::{StoreHandle, TtlClock};
    use crate::serdes::StringSerde;
    use crate::state::{Overlay, Store, StoreCache};
    use std::time::Duration;

    fn store() -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("eosflow-expiry-{}", uuid::Uuid::new_v4()));
        let (s, _) = Store::open(&dir, "cl[0]", &StoreCache::new(8 << 20)).expect("open");
        (s, dir)
    }

    #[test]
    fn an_event_time_near_the_largest_saturates_and_still_expires_at_the_end_of_time() {
        let (s, dir) = store();
        let handle = StoreHandle::new("s", StringSerde, StringSerde)
            .with_ttl(crate::processor::MAX_TTL, TtlClock::EventTime)
            .expect("ttl");
        let batch = Overlay::default();
        let overlay = {
            let mut view = StoreView::new("s", &s, &batch).expiring(ExpiryClocks {
                sub: 0,
                stream_time_ms: Some(i64::MAX - 1),
                wall_clock_ms: 0,
                indexed: false,
            });
            let mut kv = KeyValueStore::new(&mut view, &handle);
            kv.put(&"k".to_string(), &"v".to_string()).expect("put");
            assert_eq!(
                kv.expires_at(&"k".to_string()).expect("read"),
                Some(i64::MAX)
            );
            view.pending
        };
        let mut n = NamedStore {
            name: "s".into(),
            store: s,
            overlay,
            table: false,
            history_ms: None,
        };
        let lane = Lane::new(TimerKind::EventTime, 0);
        let mut from = i64::MIN;
        assert_eq!(
            sweep(&mut n, &mut from, lane, i64::MAX - 1, 10).expect("sweep"),
            0
        );
        assert_eq!(from, i64::MAX, "the next due entry");
        assert_eq!(
            sweep(&mut n, &mut from, lane, i64::MAX, 10).expect("sweep"),
            1
        );
        assert_eq!(
            n.overlay.get(Column::State, b"k"),
            Some(None),
            "a tombstone"
        );
        assert_eq!(from, i64::MAX);
        drop(n);
        Store::wipe(&dir).expect("wipe");
    }

    #[test]
    fn a_sweep_stops_at_its_budget_and_resumes_where_it_stopped() {
        let (s, dir) = store();
        let handle = StoreHandle::new("s", StringSerde, StringSerde)
            .with_ttl(Duration::from_millis(10), TtlClock::WallClock)
            .expect("ttl");
        let batch = Overlay::default();
        let overlay = {
            let mut view = StoreView::new("s", &s, &batch).expiring(ExpiryClocks {
                sub: 0,
                stream_time_ms: None,
                wall_clock_ms: 100,
                indexed: false,
            });
            let mut kv = KeyValueStore::new(&mut view, &handle);
            for k in ["a", "b", "c"] {
                kv.put(&k.to_string(), &"v".to_string()).expect("put");
            }
            view.pending
        };
        let mut n = NamedStore {
            name: "s".into(),
            store: s,
            overlay,
            table: false,
            history_ms: None,
        };
        let lane = Lane::new(TimerKind::WallClock, 0);
        let mut from = i64::MIN;
        assert_eq!(sweep(&mut n, &mut from, lane, 110, 2).expect("sweep"), 2);
        assert_eq!(from, 110, "still due");
        assert_eq!(sweep(&mut n, &mut from, lane, 110, 2).expect("sweep"), 1);
        assert_eq!(from, i64::MAX);
        let gone: Vec<_> = n.overlay.column(Column::State).collect();
        assert_eq!(
            gone,
            vec![(&b"a"[..], None), (&b"b"[..], None), (&b"c"[..], None)]
        );
        drop(n);
        Store::wipe(&dir).expect("wipe");
    }
}
