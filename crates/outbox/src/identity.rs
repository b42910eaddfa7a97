//! Whether the stored LSN belongs to the Postgres the router reconnected to.
//!
//! An LSN is a position in one cluster's WAL history. Resumed on another cluster (a database
//! URL now pointing elsewhere, a cluster re-created from a dump) or on another timeline (a
//! failover, a point-in-time recovery) the stored LSN silently skips rows or repeats them; a
//! server whose WAL ends before the stored LSN (restored from a backup) would skip every row
//! up to it. Each checkpoint therefore carries the cluster's system identifier and timeline,
//! and a session compares them (and the LSN) with `IDENTIFY_SYSTEM` before streaming. On a
//! mismatch the router stops naming both sides; the operator accepts the server explicitly
//! with `outbox.discard_checkpoint`, which matches exactly one stored checkpoint, so a value
//! left in the configuration can never wave through a later mismatch.

use super::publish::{lsn_text, ClusterId, LsnCheckpoint};
use super::OutboxError;

/// What the server's `IDENTIFY_SYSTEM` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// System identifier and current timeline.
    pub cluster: ClusterId,
    /// The server's WAL flush position.
    pub wal_end: u64,
}

/// How the session goes on after the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The stored LSN belongs to this server's history: resume after it. `record_identity`:
    /// the checkpoint lacks the identity (written by an older version) and should get it.
    After {
        /// The stored LSN (0: nothing stored).
        lsn: u64,
        /// Write a checkpoint with this server's identity at once.
        record_identity: bool,
    },
    /// The operator accepted this server over the mismatching checkpoint: the stored LSN is
    /// discarded and streaming resumes from the slot's position on this server.
    Discard,
}

/// The value of `outbox.discard_checkpoint` that accepts discarding `c`:
/// `<system id>:<timeline>:<LSN>` (`unknown` for what an older checkpoint lacks).
pub fn discard_token(c: &LsnCheckpoint) -> String {
    format!(
        "{}:{}:{}",
        c.system_id.as_deref().unwrap_or("unknown"),
        c.timeline
            .map_or_else(|| "unknown".to_string(), |t| t.to_string()),
        lsn_text(c.lsn)
    )
}

/// Compares the stored checkpoint with the server. `discard` is `outbox.discard_checkpoint`;
/// `slot` is named in the error.
pub fn check(
    stored: Option<&LsnCheckpoint>,
    server: &Server,
    discard: &str,
    slot: &str,
) -> Result<Resume, OutboxError> {
    let Some(c) = stored else {
        return Ok(Resume::After {
            lsn: 0,
            record_identity: false,
        });
    };
    let here = &server.cluster;
    let mut why = vec![];
    if let Some(sid) = c.system_id.as_deref().filter(|s| *s != here.system_id) {
        why.push(format!(
            "the stored LSN {} belongs to Postgres system {sid}, but this server is system {} \
             (another cluster: a re-created or restored database, or a database URL pointing \
             elsewhere); its LSNs mean nothing here",
            lsn_text(c.lsn),
            here.system_id
        ));
    } else if let Some(tl) = c.timeline.filter(|t| *t != here.timeline) {
        why.push(format!(
            "the stored LSN {} was read on timeline {tl}, but this server is on timeline {} \
             (a failover or point-in-time recovery): rows committed after the fork may differ",
            lsn_text(c.lsn),
            here.timeline
        ));
    }
    if why.is_empty() && c.lsn > server.wal_end {
        why.push(format!(
            "the stored LSN {} is ahead of this server's WAL end {} (the LSN went backwards: \
             a server restored from a backup?); resuming would skip every row up to it",
            lsn_text(c.lsn),
            lsn_text(server.wal_end)
        ));
    }
    if why.is_empty() {
        return Ok(Resume::After {
            lsn: c.lsn,
            record_identity: c.system_id.is_none() || c.timeline.is_none(),
        });
    }
    let token = discard_token(c);
    if discard == token {
        tracing::warn!(
            stored = %token,
            system_id = %here.system_id,
            timeline = here.timeline,
            reason = %why.join("; "),
            "outbox.discard_checkpoint accepts this server: the stored checkpoint is discarded, \
             streaming resumes from the slot's position"
        );
        return Ok(Resume::Discard);
    }
    Err(OutboxError::ClusterMismatch(format!(
        "{}. The router stops rather than skip or repeat rows. Once you have checked what \
         reached Kafka, accept this server (system {} timeline {}) by restarting with \
         outbox.discard_checkpoint = \"{token}\" (EOSFLOW_OUTBOX_DISCARD_CHECKPOINT={token}): \
         the stored checkpoint is discarded and slot {slot} streams from its own position",
        why.join("; "),
        here.system_id,
        here.timeline
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(sid: Option<&str>, tl: Option<u32>, lsn: u64) -> LsnCheckpoint {
        LsnCheckpoint {
            slot: "s".into(),
            lsn,
            lsn_text: lsn_text(lsn),
            system_id: sid.map(str::to_string),
            timeline: tl,
            snapshot: None,
            partial: None,
        }
    }

    fn server() -> Server {
        Server {
            cluster: ClusterId {
                system_id: "7400000000000000001".into(),
                timeline: 1,
            },
            wal_end: 0x100_0000,
        }
    }

    #[test]
    fn the_same_history_resumes_and_an_old_checkpoint_gets_the_identity() {
        let s = server();
        let same = stored(Some("7400000000000000001"), Some(1), 0x50);
        assert_eq!(
            check(Some(&same), &s, "", "s").ok(),
            Some(Resume::After {
                lsn: 0x50,
                record_identity: false
            })
        );
        assert_eq!(
            check(Some(&stored(None, None, 0x50)), &s, "", "s").ok(),
            Some(Resume::After {
                lsn: 0x50,
                record_identity: true
            })
        );
        assert_eq!(
            check(None, &s, "", "s").ok(),
            Some(Resume::After {
                lsn: 0,
                record_identity: false
            })
        );
    }

    #[test]
    fn another_system_timeline_or_a_backwards_lsn_stops_unless_that_checkpoint_is_discarded() {
        let s = server();
        for (c, names) in [
            (
                stored(Some("42"), Some(1), 0x50),
                ["system 42", "system 7400000000000000001"],
            ),
            (
                stored(Some("7400000000000000001"), Some(3), 0x50),
                ["timeline 3", "timeline 1"],
            ),
            (
                stored(Some("7400000000000000001"), Some(1), 0x200_0000),
                ["0/2000000", "0/1000000"],
            ),
        ] {
            let err = check(Some(&c), &s, "", "s")
                .expect_err("mismatch")
                .to_string();
            for n in names {
                assert!(err.contains(n), "{n} in {err}");
            }
            let token = discard_token(&c);
            assert!(
                err.contains(&format!("outbox.discard_checkpoint = \"{token}\"")),
                "{err}"
            );
            assert_eq!(check(Some(&c), &s, &token, "s").ok(), Some(Resume::Discard));
            // A token for another checkpoint accepts nothing.
            assert!(check(Some(&c), &s, "42:1:0/49", "s").is_err());
        }
    }

    #[test]
    fn checkpoints_of_older_versions_still_parse() {
        let old: LsnCheckpoint =
            serde_json::from_str(r#"{"slot":"s","lsn":80,"lsn_text":"0/50"}"#).expect("parses");
        assert_eq!((old.lsn, old.system_id, old.timeline), (80, None, None));
    }
}
