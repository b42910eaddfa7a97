//! The `isr-shrink` fault (issue 33) on the three-node cluster: a follower is frozen (SIGSTOP)
//! until the cluster drops it from the ISR of every partition of the run, then the leader of the
//! most partitions is `kill -9`ed while the follower is still frozen (the instances paused for
//! the 2 s before it, so it lands on a backlog they must write through). Unclean leader election is
//! off, so what it led has no eligible leader but the third broker, whose ISR alone is below
//! `min.insync.replicas=2`: no write is accepted anywhere until the follower is back in sync.
//!
//! On `dev/cluster` every node is also a controller voter, so with the follower frozen and the
//! leader dead the controller quorum (2 of 3) is gone too: no leader election, no ISR change,
//! for as long as both are away. That is a stronger fault than on a cluster with dedicated
//! controllers, never a weaker one.
//!
//! Then the follower is resumed (the quorum is back, it catches up and rejoins the ISR: the
//! partitions take writes again), the instances must resume by themselves with the leader
//! still dead, and only then is the dead leader started again.

use std::time::{Duration, Instant};

use super::cluster::{self, Cluster};
use super::Fleet;
use eosflow::kafka::KafkaClients;

/// How long the frozen follower and the dead leader are both kept away once the leader is dead:
/// the time no partition takes a write and no controller answers.
pub const BOTH_AWAY: Duration = Duration::from_secs(8);

/// How long the instances are paused before the leader's kill, the load still being written:
/// the backlog they find when they resume into the outage.
const BACKLOG: Duration = Duration::from_secs(2);

/// The longest wait for the cluster to drop the frozen follower from the ISR.
const SHRINK_TIMEOUT: Duration = Duration::from_secs(90);

/// The longest wait for the cluster to name the group's coordinator.
const COORDINATOR_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest wait, with the leader still dead, for the instances to resume.
const RESUME_TIMEOUT: Duration = Duration::from_secs(120);

/// What the isr-shrink faults measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IsrShrinkTally {
    /// Faults delivered (follower frozen out of the ISR, then the leader killed).
    pub shrinks: u32,
    /// The longest time from the SIGSTOP until the follower was out of every ISR, ms.
    pub shrink_max_ms: u64,
    /// The longest time with no partition writable: from the leader's kill until the follower
    /// was back in the ISR of every partition (with the leader still dead), ms.
    pub unwritable_max_ms: u64,
    /// The longest time from the follower's SIGCONT until every partition with records waiting
    /// had committed progress again, ms (with the leader still dead).
    pub resume_max_ms: u64,
    /// Faults after which the instances resumed before the dead leader was started again.
    pub resumed_without_leader: u32,
    /// Faults whose leader kill landed with records still to process: only those make the
    /// instances wait (and say so on `/healthz`).
    pub mid_stream: u32,
}

/// The partitions of `topics` as a fresh client's metadata shows them (5 s per topic: the
/// questions run while brokers are frozen).
fn isr_of(clients: &KafkaClients, topics: &[String]) -> Result<cluster::PartitionStates, String> {
    cluster::partitions(clients, topics, Duration::from_secs(5))
}

/// Whether `node` is out of the ISR (and leads nothing) of every partition of `topics`.
fn out_of_every_isr(clients: &KafkaClients, topics: &[String], node: i32) -> bool {
    isr_of(clients, topics).is_ok_and(|parts| {
        !parts.is_empty()
            && parts
                .values()
                .all(|p| p.leader != node && !p.isr.contains(&node))
    })
}

/// Whether `node` is back in the ISR of every partition of `topics`, in metadata that knows
/// `dead` is gone (no partition led by it): the resumed follower answers metadata from its
/// cache of before the SIGSTOP, where it was in every ISR.
fn in_every_isr(clients: &KafkaClients, topics: &[String], node: i32, dead: i32) -> bool {
    isr_of(clients, topics).is_ok_and(|parts| {
        !parts.is_empty()
            && parts
                .values()
                .all(|p| p.leader >= 0 && p.leader != dead && p.isr.contains(&node))
    })
}

impl Fleet<'_> {
    /// Sends `SIG<sig>` to every running instance (`STOP`, `CONT`): all of them are tried, the
    /// first failure returned.
    fn signal_instances(&self, sig: &str) -> Result<(), String> {
        let mut first = Ok(());
        for inst in &self.instances {
            let r = inst.signal(sig);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Supervises the instances (no progress check: one would block on the frozen broker) for
    /// `d`, or until `done` holds (checked every 500 ms); whether it held.
    fn watch_frozen(
        &mut self,
        d: Duration,
        mut done: impl FnMut(&KafkaClients) -> bool,
    ) -> Result<bool, String> {
        let until = Instant::now() + d;
        let mut next_check = Instant::now();
        while Instant::now() < until {
            self.supervise()?;
            if Instant::now() >= next_check {
                if done(&self.clients) {
                    return Ok(true);
                }
                next_check = Instant::now() + Duration::from_millis(500);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(false)
    }

    /// The group's coordinator, asked until the cluster can say (at most
    /// [`COORDINATOR_TIMEOUT`]): the first fault lands 3–9 s into the load, and a clean-clone
    /// CI run asked while the offsets log was still being created (`__consumer_offsets does not
    /// exist yet`), which failed the scenario before any fault.
    fn await_group_coordinator(&mut self) -> Result<i32, String> {
        let deadline = Instant::now() + COORDINATOR_TIMEOUT;
        loop {
            match cluster::group_coordinator(&self.clients, &self.app_id) {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() < deadline => {
                    tracing::info!(error = %e, "isr-shrink: the group's coordinator is not known yet");
                    self.supervise()?;
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(format!("the group's coordinator: {e}")),
            }
        }
    }

    /// One isr-shrink fault (see the module). Neither broker hit is the group's coordinator:
    /// with it frozen or dead the group rebalances, the instances hold no partition through the
    /// outage and have nothing to wait on (runs whose coordinator landed there saw
    /// `waits_seen=none`), and the verifier's progress checks, which ask it, go blind. So the
    /// killed leader is the busiest leader other than the coordinator, and the frozen follower
    /// the broker that is neither.
    pub(crate) fn isr_shrink(&mut self, c: &Cluster) -> Result<(), String> {
        let coordinator = self.await_group_coordinator()?;
        let leader = cluster::busiest_leader_except(
            &self.clients,
            &self.topics,
            &self.bounced,
            coordinator,
        )?;
        self.bounced.push(leader);
        let follower = (1..=cluster::BROKERS)
            .find(|b| *b != leader && *b != coordinator)
            .ok_or("a three-broker cluster has a third broker")?;
        tracing::info!(
            leader,
            follower,
            coordinator,
            "isr-shrink: the group's coordinator is spared"
        );
        let topics = self.topics.clone();

        // 1. The follower frozen until it is out of every ISR.
        let t0 = Instant::now();
        c.signal("pause", follower)?;
        tracing::info!(follower, leader, "isr-shrink: follower SIGSTOP");
        let shrunk =
            self.watch_frozen(SHRINK_TIMEOUT, |cl| out_of_every_isr(cl, &topics, follower));
        let shrunk = match shrunk {
            Ok(s) => s,
            Err(e) => {
                let _ = c.signal("resume", follower);
                return Err(e);
            }
        };
        if !shrunk {
            let _ = c.signal("resume", follower);
            return Err(format!(
                "broker {follower} frozen for {} s is still in an ISR of {topics:?}",
                SHRINK_TIMEOUT.as_secs()
            ));
        }
        let shrink = t0.elapsed();
        tracing::info!(
            follower,
            secs = shrink.as_secs_f64(),
            "isr-shrink: the follower is out of every ISR"
        );

        // 2. The instances paused for a moment while the load goes on, so the leader's kill
        //    lands with records written (acknowledged by the leader and the third broker, so
        //    readable) and not yet processed. Without it the kill's instant decided the run:
        //    instances keeping up with the load had no commit open when the cluster went,
        //    nothing to wait on, and their `/healthz` never named a partition (a CI run with
        //    other tests beside it: `waits_seen=none`). The pause stays well inside the
        //    group's session timeout (10 s): no rebalance takes their partitions meanwhile.
        if let Err(e) = self.signal_instances("STOP") {
            let _ = self.signal_instances("CONT");
            let _ = c.signal("resume", follower);
            return Err(e);
        }
        tracing::info!(
            secs = BACKLOG.as_secs_f64(),
            "isr-shrink: instances SIGSTOP, a backlog builds"
        );
        std::thread::sleep(BACKLOG);

        // 3. The leader killed while the follower is still frozen: no eligible leader, no
        //    quorum, no write anywhere. The fault's baseline is taken now (the frozen follower
        //    leads nothing any more, so the monitor's requests do not hang on it): progress
        //    made while only the follower was away must not count as the recovery.
        //    At most 3 s for it: the instances are paused meanwhile.
        let mid_stream = if self.monitor.fault_now_within(Duration::from_secs(3)) {
            // Partitions with records not yet committed, read now.
            self.monitor.waiting_at_last_fault() > 0
        } else {
            tracing::warn!("isr-shrink: no progress baseline before the leader's kill");
            // Blind: records are left while the load is still being written (`i64::MAX`).
            self.left > 0
        };
        // The coordinator may have moved since it was looked up (the shrink takes 8-15 s, and
        // `dev/cluster` gives preferred leaderships back every 10 s, the offsets log's with
        // them): a kill of the coordinator turns the fault into a coordinator failover, and two
        // runs (a clean-clone CI, one by hand) stalled 60 s on it with the verifier sure the
        // coordinator was spared. Asked again now, and if it moved to the broker about to be
        // killed, the other broker (neither the follower nor the coordinator) is killed.
        let mut leader = leader;
        match cluster::group_coordinator_within(&self.clients, &self.app_id, Duration::from_secs(2))
        {
            Ok(now) if now == leader => {
                if let Some(other) = (1..=cluster::BROKERS).find(|b| *b != leader && *b != follower)
                {
                    tracing::warn!(
                        coordinator = now,
                        instead = other,
                        "isr-shrink: the group's coordinator moved to the broker chosen for the kill; killing the other one"
                    );
                    if let Some(last) = self.bounced.last_mut() {
                        *last = other;
                    }
                    leader = other;
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "isr-shrink: the coordinator could not be asked again before the kill")
            }
        }
        let killed = Instant::now();
        let kill = c.kill(leader);
        let resumed_instances = self.signal_instances("CONT");
        if let Err(e) = kill.and(resumed_instances) {
            let _ = c.signal("resume", follower);
            return Err(e);
        }
        tracing::info!(
            leader,
            mid_stream,
            waiting_partitions = self.monitor.waiting_at_last_fault(),
            "isr-shrink: leader kill -9, instances SIGCONT"
        );
        self.isr.mid_stream += u32::from(mid_stream);
        let away = self.watch_frozen(BOTH_AWAY, |_| false);
        c.signal("resume", follower)?;
        away?;
        let resumed = Instant::now();
        tracing::info!(follower, "isr-shrink: follower SIGCONT");
        // Recovery counts from the follower's return: before it nothing can be written.
        self.monitor.outages.push(resumed - t0);
        self.monitor.restart_clock();

        // 4. With the leader still dead: the follower back in sync, the instances resuming.
        let pending_before = self.monitor.recoveries.len();
        let deadline = Instant::now() + RESUME_TIMEOUT;
        let mut back_in_sync = None;
        let mut resumed_at = None;
        while Instant::now() < deadline && (back_in_sync.is_none() || resumed_at.is_none()) {
            self.monitor.tick();
            self.supervise()?;
            if back_in_sync.is_none() && in_every_isr(&self.clients, &topics, follower, leader) {
                back_in_sync = Some(killed.elapsed());
                tracing::info!(follower, "isr-shrink: the follower is back in every ISR");
            }
            if resumed_at.is_none() && self.monitor.recoveries.len() > pending_before {
                resumed_at = Some(resumed.elapsed());
                tracing::info!(
                    secs = resumed.elapsed().as_secs_f64(),
                    "isr-shrink: committed progress again, the leader still dead"
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        let t = &mut self.isr;
        t.shrinks += 1;
        t.shrink_max_ms = t.shrink_max_ms.max(shrink.as_millis() as u64);
        if let Some(u) = back_in_sync {
            t.unwritable_max_ms = t.unwritable_max_ms.max(u.as_millis() as u64);
        }
        if let Some(r) = resumed_at {
            t.resume_max_ms = t.resume_max_ms.max(r.as_millis() as u64);
            t.resumed_without_leader += 1;
        }
        self.cluster.pauses += 1;
        self.cluster.hard_bounces += 1;

        // 5. The dead leader back, and the full ISR before the next fault.
        self.cluster_op(c, &["start", &leader.to_string()])?;
        tracing::info!(leader, "isr-shrink: leader back");
        self.await_isr()
    }
}
