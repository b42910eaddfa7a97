//! Asks the instances of a cluster scenario what they wait for: each one serves `/healthz` on
//! a local port of its own, and a waiting loop prints `waiting on <what> for <s> s: <detail>`
//! there (see `eosflow::internals::telemetry::Waits`). The verifier polls it through the faults and
//! tallies what it saw, so a scenario can require that an instance said what it waited for
//! (isr-shrink: a partition's leader or its in-sync replicas).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A local port nobody listens on now, for an instance to bind shortly after; never the same
/// one twice in this process.
///
/// A port the kernel hands out for `127.0.0.1:0` is free again once probed, so two callers
/// running side by side (tests of one binary, a scenario's instances) could both get it, and the
/// second instance to bind would refuse to start. The ports come from below the kernel's
/// ephemeral range (32768 and up), so a client's outgoing connection cannot take one between
/// the probe and the bind either; the walk starts where this process's id points, so processes
/// running side by side do not walk the same sequence.
pub fn free_local_port() -> Result<u16, String> {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    const FIRST: usize = 22_000;
    const SPAN: usize = 10_000;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let start = std::process::id() as usize * 7_919 % SPAN;
    (0..SPAN)
        .map(|i| (FIRST + (start + i) % SPAN) as u16)
        .find(|port| !given.contains(port) && TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .inspect(|port| {
            given.insert(*port);
        })
        .ok_or_else(|| {
            format!(
                "finding a free port: none free on 127.0.0.1 from {FIRST} to {}",
                FIRST + SPAN - 1
            )
        })
}

/// `/healthz`'s body from `addr`, or `None` when it does not answer within a second (the
/// instance restarting, or not listening yet).
pub(crate) fn healthz(addr: &str) -> Option<String> {
    let addr: SocketAddr = addr.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(
        out.split_once("\r\n\r\n")
            .map_or(out.clone(), |(_, b)| b.to_string()),
    )
}

/// What the `waiting on …` lines of a `/healthz` body name.
pub(crate) fn waits_in(body: &str) -> impl Iterator<Item = (&str, &str)> {
    body.lines().filter_map(|l| {
        let rest = l.strip_prefix("waiting on ")?;
        let (on, _) = rest.split_once(" for ")?;
        let detail = rest.split_once(": ").map_or("", |(_, d)| d);
        Some((on, detail))
    })
}

/// The waits the instances reported over a run.
#[derive(Debug, Default, Clone)]
pub struct WaitsSeen {
    /// Observations per `on` label (one per poll of one instance that named it).
    pub by_on: BTreeMap<String, u32>,
    /// The first few distinct details seen per label (a partition, a call), each logged when
    /// first seen.
    pub details: BTreeMap<String, Vec<String>>,
    next_poll: Option<Instant>,
}

impl WaitsSeen {
    /// Polls `addrs` if a second has passed since the last poll.
    pub(crate) fn poll<'a>(&mut self, addrs: impl Iterator<Item = &'a str>) {
        if self.next_poll.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.next_poll = Some(Instant::now() + Duration::from_secs(1));
        for addr in addrs {
            let Some(body) = healthz(addr) else { continue };
            for (on, detail) in waits_in(&body) {
                *self.by_on.entry(on.to_string()).or_default() += 1;
                // Details without their numbers (sizes, milliseconds): one line per kind.
                let kind: String = detail.chars().filter(|c| !c.is_ascii_digit()).collect();
                let seen = self.details.entry(on.to_string()).or_default();
                if seen.len() < 8 && !seen.contains(&kind) {
                    tracing::info!(%addr, on, detail, "an instance says what it waits for");
                    seen.push(kind);
                }
            }
        }
    }

    /// `partition-leader:12,txn-coordinator:3`, or `none`.
    pub fn summary(&self) -> String {
        if self.by_on.is_empty() {
            return "none".into();
        }
        self.by_on
            .iter()
            .map(|(on, n)| format!("{on}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether any instance said it waited on a partition (no leader, too few in-sync
    /// replicas).
    pub fn saw_partition_wait(&self) -> bool {
        ["partition-leader", "in-sync-replicas"]
            .iter()
            .any(|on| self.by_on.contains_key(*on))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_never_handed_out_twice_and_lies_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50)
            .map(|_| free_local_port().expect("a port"))
            .collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        assert!(
            ports.iter().all(|p| (22_000..32_000).contains(p)),
            "{ports:?}"
        );
    }

    #[test]
    fn the_waiting_lines_of_healthz_are_read_back() {
        let body =
            "ok\nwaiting on in-sync-replicas for 3.2 s: t-1: in sync [2] of replicas [1, 2, 3]\n";
        let got: Vec<_> = waits_in(body).collect();
        assert_eq!(
            got,
            vec![("in-sync-replicas", "t-1: in sync [2] of replicas [1, 2, 3]")]
        );
        assert_eq!(waits_in("ok\n").count(), 0);
    }
}
