//! Test-only faults (hidden), each armed per application and fired once:
//! - the next transaction that commits *without input offsets* (due wall-clock timers on an
//!   idle partition, parked followers draining) is reported as
//!   [`crate::sink::SinkError::CommitUnknown`] right after it landed — what a lost `EndTxn`
//!   answer looks like — so a test can prove such a batch is neither lost nor repeated;
//! - the next commit *with* input offsets is reported unknown as if the group membership had
//!   changed meanwhile (a rebalance between `send_offsets` and the check): the group's offsets
//!   then no longer tell the outcome and every task is restored.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// One fault: the applications it is armed for.
struct Switch(Mutex<BTreeSet<String>>);

impl Switch {
    const fn new() -> Self {
        Self(Mutex::new(BTreeSet::new()))
    }

    fn arm(&self, app_id: &str) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(app_id.to_string());
        }
    }

    fn armed(&self, app_id: &str) -> bool {
        self.0.lock().is_ok_and(|s| s.contains(app_id))
    }

    fn take(&self, app_id: &str) -> bool {
        self.0.lock().is_ok_and(|mut s| s.remove(app_id))
    }
}

static OFFSETLESS_COMMIT_UNKNOWN: Switch = Switch::new();
static MEMBERSHIP_CHANGED_UNKNOWN: Switch = Switch::new();

/// Arms the offset-less fault for application `app_id` (once).
pub fn report_next_offsetless_commit_unknown(app_id: &str) {
    OFFSETLESS_COMMIT_UNKNOWN.arm(app_id);
}

/// Whether the offset-less fault is still armed for `app_id` (not yet fired).
pub fn offsetless_commit_unknown_armed(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN.armed(app_id)
}

/// Fires the offset-less fault for `app_id` if armed.
pub(crate) fn take_offsetless_commit_unknown(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN.take(app_id)
}

/// Arms the membership-change fault for application `app_id` (once): its next commit with
/// input offsets lands, is reported unknown, and the check that follows sees another group
/// generation than the one the offsets were sent under.
pub fn report_next_commit_unknown_after_membership_change(app_id: &str) {
    MEMBERSHIP_CHANGED_UNKNOWN.arm(app_id);
}

/// Whether the membership-change fault is still armed for `app_id` (not yet fired).
pub fn membership_change_armed(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN.armed(app_id)
}

/// Fires the membership-change fault for `app_id` if armed.
pub(crate) fn take_membership_change(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN.take(app_id)
}
