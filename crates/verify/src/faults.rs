//! The faults a verifier run delivers, and the watch that times how long the consumer group
//! takes to recover from each: a fault is recovered when every input partition that had
//! records waiting at that moment has its committed offset move again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;

use super::cluster::Cluster;
use super::stack::PrivateStack;
use super::storm::StormPlan;
use eosflow::kafka::{ClientRole, KafkaClients};

/// A recovery slower than this is a stall: the group stopped making progress.
pub const STALL_AFTER: Duration = Duration::from_secs(60);

/// What is done to the run while it processes.
#[derive(Debug, Clone)]
pub enum Fault {
    /// `kill -9` of a random instance, restarted after 0.1–1 s.
    Kill9,
    /// SIGSTOP of a random instance for this long (past the session timeout), then SIGCONT:
    /// the frozen instance is a zombie the group and the transaction coordinator must fence.
    Freeze(Duration),
    /// The (private) broker is stopped and started again.
    BrokerRestart(PrivateStack),
    /// The (private) broker process is frozen (SIGSTOP) this long, then resumed: longer than the
    /// transaction timeout, so the coordinator aborts the open transactions when it wakes and
    /// commits in flight have an unknown outcome.
    BrokerPause(PrivateStack, Duration),
    /// On the three-node cluster: the broker leading the most partitions of the run's topics is
    /// stopped and started again, cleanly (controlled shutdown) for the first half of the
    /// faults, with `kill -9` for the second.
    LeaderBounce(Cluster),
    /// On the three-node cluster: the broker that is the transaction coordinator of the most
    /// instances' transactional ids is `kill -9`ed (always mid-transaction: at a 100 ms commit
    /// interval one is always open) and started again.
    CoordinatorBounce(Cluster),
    /// On the three-node cluster: one broker (each in turn) is frozen (SIGSTOP) this long, past
    /// the transaction timeout, while the other two serve; then resumed.
    BrokerPauseOne(Cluster, Duration),
    /// On the three-node cluster: a follower frozen (SIGSTOP) until it is out of every ISR, then
    /// the leader of the most partitions `kill -9`ed while it is still frozen: no partition is
    /// writable until the follower is back in sync ([`crate::isr_shrink`]).
    IsrShrink(Cluster),
    /// A rebalance storm: every few seconds a graceful stop, a start of a stopped slot or a
    /// `kill -9` with restart, picked by a seeded RNG ([`crate::storm`]).
    Storm(StormPlan),
}

impl Fault {
    /// Whether the fault acts on a three-broker cluster (`dev/cluster`), not on the stack's
    /// one broker.
    pub fn on_cluster(&self) -> bool {
        matches!(
            self,
            Fault::LeaderBounce(_)
                | Fault::CoordinatorBounce(_)
                | Fault::BrokerPauseOne(..)
                | Fault::IsrShrink(_)
        )
    }
}

/// A fault whose recovery is still awaited.
struct Pending {
    at: Instant,
    /// Partition → committed offset when the fault hit, for partitions with records waiting.
    waiting: BTreeMap<i32, i64>,
    stalled: bool,
}

/// Watches the group's committed offsets on the input to time recoveries.
pub struct Monitor {
    consumer: BaseConsumer,
    topic: String,
    partitions: i32,
    pending: Vec<Pending>,
    last_tick: Option<Instant>,
    /// Recovery time of each fault, in the order they recovered.
    pub recoveries: Vec<Duration>,
    /// Faults that took longer than [`STALL_AFTER`] to recover (or never did).
    pub stalls: u32,
    /// Broker outages (stop to ready), for broker restarts.
    pub outages: Vec<Duration>,
    /// Progress checks that got no answer (broker away or slow).
    pub misses: u32,
}

impl Monitor {
    /// A watch of `group`'s committed offsets on `topic`.
    pub fn new(
        clients: &KafkaClients,
        group: &str,
        topic: &str,
        partitions: i32,
    ) -> Result<Self, String> {
        // read_uncommitted: a read_committed client asks for *stable* offsets, and while any
        // transaction of the group is open (always, at a 100 ms commit interval) the broker
        // answers UNSTABLE_OFFSET_COMMIT until the call times out — the monitor would see no
        // progress at all. The offsets it is given are the committed ones either way.
        let consumer: BaseConsumer = clients
            .config(ClientRole::Reader)
            .set("group.id", group)
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(|e| format!("creating the progress monitor: {e}"))?;
        Ok(Self {
            consumer,
            topic: topic.to_string(),
            partitions,
            pending: Vec::new(),
            last_tick: None,
            recoveries: Vec::new(),
            stalls: 0,
            outages: Vec::new(),
            misses: 0,
        })
    }

    /// The group's committed offset per partition (0 when none): one request to the group
    /// coordinator; `None` while it does not answer.
    fn committed(&self) -> Option<BTreeMap<i32, i64>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, Duration::from_secs(5))
            .ok()?;
        Some(
            (0..self.partitions)
                .map(|p| (p, crate::committed_at(&committed, &self.topic, p)))
                .collect(),
        )
    }

    /// Committed offset (0 when none) and high watermark per partition; `None` while the broker
    /// does not answer.
    fn snapshot(&self) -> Option<BTreeMap<i32, (i64, i64)>> {
        let committed = self.committed()?;
        let mut out = BTreeMap::new();
        for (p, at) in committed {
            let (_, high) = self
                .consumer
                .fetch_watermarks(&self.topic, p, Duration::from_secs(5))
                .ok()?;
            out.insert(p, (at, high));
        }
        Some(out)
    }

    /// Marks a fault now: its recovery is awaited on the partitions with records waiting.
    pub fn fault_now(&mut self) {
        let waiting = match self.snapshot() {
            Some(s) => s
                .into_iter()
                .filter(|(_, (at, high))| high > at)
                .map(|(p, (at, _))| (p, at))
                .collect(),
            None => BTreeMap::new(),
        };
        self.pending.push(Pending {
            at: Instant::now(),
            waiting,
            stalled: false,
        });
    }

    /// [`Monitor::fault_now`], asking again for up to `wait` while the broker does not answer
    /// (a client whose metadata still names a frozen or dead broker as a leader times out once,
    /// then refreshes it): a fault marked with no partition waiting would count as recovered at
    /// once. Whether a snapshot came.
    pub fn fault_now_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(s) = self.snapshot() {
                let waiting = s
                    .into_iter()
                    .filter(|(_, (at, high))| high > at)
                    .map(|(p, (at, _))| (p, at))
                    .collect();
                self.pending.push(Pending {
                    at: Instant::now(),
                    waiting,
                    stalled: false,
                });
                return true;
            }
            self.misses += 1;
            if Instant::now() >= deadline {
                self.fault_now();
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// How many partitions had records waiting when the latest fault was marked (0 also when
    /// it was marked blind: no snapshot could be read).
    pub fn waiting_at_last_fault(&self) -> usize {
        self.pending.last().map_or(0, |p| p.waiting.len())
    }

    /// Restarts the clock of the latest fault (a broker restart counts from the broker's return).
    pub fn restart_clock(&mut self) {
        if let Some(p) = self.pending.last_mut() {
            p.at = Instant::now();
        }
    }

    /// Checks progress (at most every 500 ms): records recoveries and stalls.
    pub fn tick(&mut self) {
        if self.pending.is_empty()
            || self
                .last_tick
                .is_some_and(|t| t.elapsed() < Duration::from_millis(500))
        {
            return;
        }
        self.last_tick = Some(Instant::now());
        // Committed offsets only: the high watermarks (one request per partition leader, each
        // up to 5 s against a leader that died and is not fenced yet) are needed when a fault
        // hits, not to see progress. Asking for them here stretched the measured recoveries by
        // the monitor's own waits (issue 33: coordinator-bounce's 48.5 s).
        let Some(now) = self.committed() else {
            self.misses += 1;
            self.mark_stalls();
            return;
        };
        let mut still = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            p.waiting
                .retain(|part, at| now.get(part).is_none_or(|c| c <= at));
            if p.waiting.is_empty() {
                self.recoveries.push(p.at.elapsed());
            } else {
                still.push(p);
            }
        }
        self.pending = still;
        self.mark_stalls();
    }

    fn mark_stalls(&mut self) {
        for p in &mut self.pending {
            if !p.stalled && p.at.elapsed() > STALL_AFTER {
                p.stalled = true;
                self.stalls += 1;
                tracing::warn!(
                    waiting = ?p.waiting,
                    misses = self.misses,
                    "stall: partitions with records waiting made no committed progress for {} s",
                    STALL_AFTER.as_secs()
                );
            }
        }
    }

    /// Waits (up to `timeout`) for every fault to be recovered; the rest count as stalls.
    pub fn settle(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.pending.is_empty() && Instant::now() < deadline {
            self.last_tick = None;
            self.tick();
            std::thread::sleep(Duration::from_millis(200));
        }
        for p in std::mem::take(&mut self.pending) {
            if !p.stalled {
                self.stalls += 1;
            }
        }
    }
}
