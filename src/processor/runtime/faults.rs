//! Test-only faults (hidden): the applications whose next transaction that commits *without
//! input offsets* (due wall-clock timers on an idle partition, parked followers draining) is
//! reported as [`crate::sink::SinkError::CommitUnknown`] right after it landed — what a lost
//! `EndTxn` answer looks like — so a test can prove such a batch is neither lost nor repeated.
//! And the applications whose next commit *with* input offsets is reported unknown as if the
//! group membership had changed meanwhile (a rebalance between `send_offsets` and the check):
//! the group's offsets then no longer tell the outcome and every task is restored.

use std::collections::BTreeSet;
use std::sync::Mutex;

static OFFSETLESS_COMMIT_UNKNOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Arms the fault for application `app_id` (once).
pub fn report_next_offsetless_commit_unknown(app_id: &str) {
    if let Ok(mut s) = OFFSETLESS_COMMIT_UNKNOWN.lock() {
        s.insert(app_id.to_string());
    }
}

/// Whether the fault is still armed for `app_id` (not yet fired).
pub fn offsetless_commit_unknown_armed(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN
        .lock()
        .is_ok_and(|s| s.contains(app_id))
}

/// Fires the fault for `app_id` if armed.
pub(crate) fn take_offsetless_commit_unknown(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN
        .lock()
        .is_ok_and(|mut s| s.remove(app_id))
}

static MEMBERSHIP_CHANGED_UNKNOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Arms the membership-change fault for application `app_id` (once): its next commit with
/// input offsets lands, is reported unknown, and the check that follows sees another group
/// generation than the one the offsets were sent under.
pub fn report_next_commit_unknown_after_membership_change(app_id: &str) {
    if let Ok(mut s) = MEMBERSHIP_CHANGED_UNKNOWN.lock() {
        s.insert(app_id.to_string());
    }
}

/// Whether the membership-change fault is still armed for `app_id` (not yet fired).
pub fn membership_change_armed(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN
        .lock()
        .is_ok_and(|s| s.contains(app_id))
}

/// Fires the membership-change fault for `app_id` if armed.
pub(crate) fn take_membership_change(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN
        .lock()
        .is_ok_and(|mut s| s.remove(app_id))
}
