//! Watermarks across repartition topics: how a task reading a repartition topic knows how far
//! the tasks writing to it have got.
//!
//! Every partition of a repartition topic is written by the upstream tasks of *every*
//! partition number, each at its own pace: after a restart, a backlog or a slow instance,
//! partition 0's task may have re-keyed ten minutes of input while partition 3's has re-keyed
//! one. If the reading task's stream time were the largest event time it had read (Kafka
//! Streams' rule), partition 3's records would arrive behind a stream time ten minutes ahead and
//! be dropped as late by every window downstream. So the reading task's stream time is instead
//! the **least stream time of its upstream tasks** (a watermark, as Flink's): each repartition
//! record carries its writer's partition number and stream time in headers
//! (`eosflow.wm.from`, `eosflow.wm`), and the reader keeps the latest of each writer in its
//! store (changelogged with the batch, so it survives a crash and a restore).
//!
//! A writer that has written nothing to some partition would hold it back for good, so each
//! upstream task also *broadcasts* its stream time to every partition of the repartition topics
//! it writes — a record with no key or value and `eosflow.wm.only: 1`, in the batch's
//! transaction — when it moved (at most every [`MIN_INTERVAL`]). A writer whose inputs are
//! read to their end says it is **idle** (`eosflow.wm.idle: 1`): readers stop waiting for it
//! (when every writer is idle, the greatest of their stream times counts), until it writes
//! again. A record read from a writer that was idle may so be late, as in Kafka Streams when
//! an input lags. Readers wait for a writer they have never heard from.
//!
//! Broadcasts cost a record per (task, repartition topic, partition) when a stream time moved,
//! and only topologies with repartitions pay them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::engine::{Mark, Task, Upstream};
use crate::sink::SinkError;

/// The least time between two broadcasts of one task to one repartition topic.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// How often a task that handled nothing is asked whether its inputs are read to their end.
pub(crate) const IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Writes one watermark-only record: (topic, partition, headers, timestamp).
pub(crate) type SendMark<'s> =
    dyn FnMut(&str, i32, &[(String, Vec<u8>)], Option<i64>) -> Result<(), SinkError> + 's;

/// The repartition topics this loop's upstream tasks write, and what they last broadcast.
#[derive(Debug, Default)]
pub(crate) struct Watermarks {
    /// Each repartition topic written, with its writing sub-topology.
    writers: Vec<(String, usize)>,
    /// Per (partition number, repartition topic): what was last broadcast, and when.
    sent: HashMap<(i32, String), (Upstream, Instant)>,
    /// Per (partition number, sub-topology): when its idleness was last checked, and the
    /// answer.
    checked: HashMap<(i32, usize), (Instant, bool)>,
}

impl Watermarks {
    /// Broadcasts of the upstream tasks writing `writers` (each repartition topic with its
    /// writing sub-topology).
    pub(crate) fn new(writers: Vec<(String, usize)>) -> Self {
        Self {
            writers,
            ..Self::default()
        }
    }

    /// Whether this loop writes any repartition topic (only then are marks broadcast).
    pub(crate) fn is_on(&self) -> bool {
        !self.writers.is_empty()
    }

    /// Broadcasts, in the open transaction, the stream time of each upstream task of `tasks`
    /// that moved since its last broadcast (or became idle, or busy again) to every one of the
    /// `partitions` partitions of each repartition topic it writes. `busy` the (partition number,
    /// sub-topology) tasks that handled a record in this batch (never idle); `caught_up`
    /// answers whether a task's inputs are read to their end; `send` writes one mark-only
    /// record (topic, partition, headers, timestamp). Returns how many records were sent.
    pub(crate) fn broadcast(
        &mut self,
        tasks: &BTreeMap<i32, Task>,
        partitions: usize,
        busy: &BTreeSet<(i32, usize)>,
        caught_up: &mut dyn FnMut(i32, usize) -> bool,
        send: &mut SendMark<'_>,
    ) -> Result<usize, SinkError> {
        let mut sent = 0;
        let now = Instant::now();
        for (&p, task) in tasks {
            for (topic, sub) in &self.writers {
                let stream_time = task.stream_time(*sub);
                let idle = if busy.contains(&(p, *sub)) {
                    self.checked.remove(&(p, *sub));
                    false
                } else {
                    match self.checked.get(&(p, *sub)) {
                        Some((at, answer)) if now.duration_since(*at) < IDLE_CHECK_INTERVAL => {
                            *answer
                        }
                        _ => {
                            let answer = caught_up(p, *sub);
                            self.checked.insert((p, *sub), (now, answer));
                            answer
                        }
                    }
                };
                let said = Upstream { stream_time, idle };
                let last = self.sent.get(&(p, topic.clone()));
                let changed = last.is_none_or(|(l, _)| *l != said);
                let may = last.is_none_or(|(l, at)| {
                    l.idle != said.idle || now.duration_since(*at) >= MIN_INTERVAL
                });
                // Nothing to say before a first event time, unless to stop being waited for.
                if !changed || !may || (stream_time.is_none() && !idle) {
                    continue;
                }
                let headers = Mark::headers(p, said, true);
                for q in 0..partitions {
                    let q = i32::try_from(q).unwrap_or(i32::MAX);
                    send(topic, q, &headers, stream_time)?;
                    sent += 1;
                }
                self.sent.insert((p, topic.clone()), (said, now));
            }
        }
        Ok(sent)
    }

    /// Forgets what was broadcast (a batch that did not commit, or a rebalance): the next
    /// batch says it again.
    pub(crate) fn forget(&mut self) {
        self.sent.clear();
        self.checked.clear();
    }
}
