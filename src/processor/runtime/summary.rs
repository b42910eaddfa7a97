//! What a processing loop did: the counters it returns when it stops.

use crate::state::RestoreStats;

/// Counters of one run, returned when the loop stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Records handled (processed, dead-lettered or deduplicated) in committed transactions.
    pub records: u64,
    /// Records skipped as already-seen ids.
    pub dedup_hits: u64,
    /// Records sent to a dead-letter topic.
    pub dead_lettered: u64,
    /// Records a windowed aggregate or join found late (older than their window's close):
    /// dead-lettered as `late-record`, and counted in `dead_lettered` too.
    pub late: u64,
    /// Records forwarded up the retry ladder after a transient failure.
    pub retried: u64,
    /// Records forwarded behind their key's head instead of being processed.
    pub parked_followers: u64,
    /// Timers fired (their callbacks run, or dead-lettered when they failed); a batch that
    /// aborted after firing some counts them again when it is redone.
    pub timers_fired: u64,
    /// Table records written into their table's store (a batch that aborted counts its own
    /// again when it is redone).
    pub table_updates: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Transactions aborted.
    pub aborts: u64,
    /// Partition restores and what they replayed: the latest [`MAX_RESTORES_KEPT`] (an
    /// instance rebalanced for weeks must not grow without bound).
    pub restores: Vec<(i32, RestoreStats)>,
}

/// The most restores a [`RunSummary`] keeps (the latest ones).
pub const MAX_RESTORES_KEPT: usize = 1024;

impl RunSummary {
    /// Records one restore, keeping the latest [`MAX_RESTORES_KEPT`].
    pub(crate) fn restored(&mut self, partition: i32, stats: RestoreStats) {
        if self.restores.len() >= MAX_RESTORES_KEPT {
            let excess = self.restores.len() + 1 - MAX_RESTORES_KEPT;
            self.restores.drain(..excess);
        }
        self.restores.push((partition, stats));
    }

    /// Adds another processing thread's counters to these.
    pub fn absorb(&mut self, other: RunSummary) {
        self.records += other.records;
        self.dedup_hits += other.dedup_hits;
        self.dead_lettered += other.dead_lettered;
        self.late += other.late;
        self.retried += other.retried;
        self.parked_followers += other.parked_followers;
        self.timers_fired += other.timers_fired;
        self.table_updates += other.table_updates;
        self.commits += other.commits;
        self.aborts += other.aborts;
        for (p, stats) in other.restores {
            self.restored(p, stats);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_summary_keeps_only_the_latest_restores() {
        let mut s = RunSummary::default();
        for p in 0..(MAX_RESTORES_KEPT as i32 + 10) {
            s.restored(p, RestoreStats::default());
        }
        assert_eq!(s.restores.len(), MAX_RESTORES_KEPT);
        assert_eq!(s.restores.first().map(|r| r.0), Some(10));
        let mut all = RunSummary::default();
        all.absorb(s.clone());
        all.absorb(s);
        assert_eq!(all.restores.len(), MAX_RESTORES_KEPT);
    }
}
