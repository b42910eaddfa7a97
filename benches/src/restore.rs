//! Restore alone and failover: what a takeover of large state costs, split into its phases.
//!
//! The recovery benchmark ([`super::recovery`]) times restart → every partition processing,
//! which is mostly the group's 6 s session timeout. These two time the phases apart, from each
//! contender's own timestamps (wall clock, µs, the driver's clock: one machine):
//!
//! - **assigned**: eosflow logs `partitions assigned` (JSON log lines); the Kafka Streams peer
//!   prints `ASSIGNED` from its main consumer's rebalance listener (`benches/peer/Peer.java`);
//! - **restored**: eosflow logs `restored partition=…` with the restore's duration and the
//!   changelog records it replayed; the peer prints `RESTORE_START` / `RESTORE_END` from a
//!   `StateRestoreListener` (only for a store that had something to restore);
//! - **processing**: a probe written to every partition at the restart (or kill) reaches the
//!   `read_committed` output.
//!
//! [`run`] (restore alone): K keys in one partition's state, one instance, `kill -9`, restart:
//! eosflow from its checkpointed RocksDB, eosflow cold (state directory wiped before the
//! restart: what a takeover without a local copy costs), Kafka Streams `exactly_once_v2`
//! (which wipes a store that was not closed cleanly and replays its whole changelog), and,
//! when `kstreams-eos-txn` is among the contenders, Kafka Streams with KIP-892 transactional
//! state stores (which should keep the store and replay only what followed its last commit).
//! [`failover`]: K keys over P partitions, two instances, `kill -9` of one, the survivor takes
//! its partitions over; eosflow and Kafka Streams with 0 and 1 standby replicas.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::contender::{self, Contender, Instance, Launch};
use super::reader::Reader;
use super::workload::{self, now_us};
use super::{wait_until, BenchArgs, BenchError, Point, Shape};
use eosflow::kafka::KafkaClients;

/// One timed takeover: a restart (restore alone) or a kill (failover), its phases in seconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Takeover {
    /// `restore` or `failover`.
    pub scenario: String,
    /// Who and how, e.g. `eosflow-eos, checkpoint` or `kstreams-eos, 1 standby`.
    pub case: String,
    /// Keys in state (over every partition).
    pub keys: u64,
    /// Partitions.
    pub partitions: i32,
    /// Round (1-based).
    pub round: usize,
    /// Restart (or kill) → the group assigned the partitions to the new (or surviving)
    /// instance: process start and joining (restore), detection of the dead member (failover).
    pub to_assigned_s: Option<f64>,
    /// The longest partition restore, as the contender timed it; `None`: no restore reported
    /// (Kafka Streams reports none when a store had nothing to replay).
    pub restore_s: Option<f64>,
    /// Changelog records the restores replayed.
    pub replayed: u64,
    /// Assignment received → every partition processing (its probe's output visible).
    pub assigned_to_processing_s: Option<f64>,
    /// Restart (or kill) → every partition processing.
    pub total_s: f64,
}

/// What a contender's log says happened after a point in it.
#[derive(Debug, Default, PartialEq)]
struct Events {
    /// Times (µs) the instance was assigned a non-empty set of partitions.
    assigned: Vec<u64>,
    /// Restores: (start µs, end µs, records replayed).
    restores: Vec<(u64, u64, u64)>,
}

/// Parses the log text of one instance (eosflow JSON lines or the peer's event lines).
fn events(text: &str) -> Events {
    let mut ev = Events::default();
    let mut started: HashMap<(String, String), u64> = HashMap::new();
    for line in text.lines() {
        if line.starts_with('{') {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let Some(at) = v["timestamp"].as_str().and_then(parse_rfc3339_us) else {
                continue;
            };
            let f = &v["fields"];
            let msg = f["message"].as_str().unwrap_or_default();
            if msg == "partitions assigned" {
                if f["partitions"].as_str().is_some_and(|p| p != "[]") {
                    ev.assigned.push(at);
                }
            } else if msg.starts_with("restored partition=") {
                let millis = f["millis"].as_u64().unwrap_or(0);
                let replayed = f["replayed"].as_u64().unwrap_or(0);
                ev.restores
                    .push((at.saturating_sub(millis * 1000), at, replayed));
            }
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let at = w.get(1).and_then(|t| t.parse::<u64>().ok());
        match (w.first().copied(), at) {
            (Some("ASSIGNED"), Some(at)) if w.get(2).is_some_and(|n| *n != "0") => {
                ev.assigned.push(at)
            }
            (Some("RESTORE_START"), Some(at)) if w.len() >= 4 => {
                started.insert((w[2].to_string(), w[3].to_string()), at);
            }
            (Some("RESTORE_END"), Some(at)) if w.len() >= 5 => {
                let from = started
                    .remove(&(w[2].to_string(), w[3].to_string()))
                    .unwrap_or(at);
                ev.restores
                    .push((from, at, w[4].parse::<u64>().unwrap_or(0)));
            }
            _ => {}
        }
    }
    ev
}

/// `2026-12-04T11:12:26.113002Z` → µs since the epoch (UTC only, as tracing writes it).
fn parse_rfc3339_us(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let mut digits: String = frac.chars().take(6).collect();
    while digits.len() < 6 {
        digits.push('0');
    }
    let micros = digits.parse::<i64>().ok()?;
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3_600 + mm * 60 + ss;
    u64::try_from(secs * 1_000_000 + micros).ok()
}

/// The log's length now: what is written after it belongs to the next takeover.
fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The log's text from byte `from`.
fn log_from(log: &Path, from: u64) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let from = (from as usize).min(text.len());
    String::from_utf8_lossy(&text[from..]).into_owned()
}

/// The phases of a takeover that started at `t0` (µs) and ended when the last probe arrived.
fn phases(t0: u64, ev: &Events, done: u64) -> (Option<f64>, Option<f64>, u64, Option<f64>, f64) {
    let s = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
    let assigned = ev.assigned.iter().copied().find(|a| *a >= t0);
    let restore = ev
        .restores
        .iter()
        .map(|(a, b, _)| s(*a, *b))
        .reduce(f64::max);
    let replayed = ev.restores.iter().map(|r| r.2).sum();
    (
        assigned.map(|a| s(t0, a)),
        restore,
        replayed,
        assigned.map(|a| s(a, done)),
        s(t0, done),
    )
}

/// Fresh topics with `keys` records of distinct keys in the input, and a reader of the output.
fn load(
    clients: &KafkaClients,
    who: Contender,
    launch: &Launch,
    partitions: i32,
    keys: u64,
) -> Result<Reader, BenchError> {
    let point = Point {
        shape: Shape::Count,
        contender: who,
        partitions,
        instances: 1,
        commit_interval_ms: 100,
    };
    let levels = eosflow::internals::retry::ladder_topics(
        std::slice::from_ref(&launch.input),
        eosflow::internals::retry::RetryPolicy::default().levels(),
    );
    workload::create_topics(clients, &super::topic_specs(&point, launch, &levels))?;
    workload::preload(clients, &launch.input, keys, keys)?;
    Reader::start(clients, &launch.output, partitions)
}

/// How long loading `keys` records may take (the slowest contender, on a busy machine).
fn load_timeout(keys: u64) -> Duration {
    Duration::from_secs(300 + keys / 200)
}

/// Waits until probes `base..base + partitions` came out; the time (µs) the last one did.
fn probes_done(
    reader: &Reader,
    instances: &mut [Instance],
    base: u64,
    partitions: i32,
    what: &str,
) -> Result<u64, BenchError> {
    wait_until(what, Duration::from_secs(600), instances, || {
        reader.probes_arrived(base, partitions as u64).is_some()
    })?;
    Ok(reader
        .probes_arrived(base, partitions as u64)
        .and_then(|v| v.into_iter().max())
        .unwrap_or_else(now_us))
}

fn cleanup(clients: &KafkaClients, launch: &Launch) {
    if let Err(e) = workload::delete_topics_with_prefix(clients, &launch.app_id) {
        eprintln!("bench: {e}");
    }
    for i in 0..2 {
        let _ = std::fs::remove_dir_all(launch.dir.join(format!("state-i{i}")));
    }
}

fn print(t: &Takeover) {
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    eprintln!(
        "bench: {} {} round {} ({} keys, P={}): → assigned {} s, restore {} s ({} records), assigned → processing {} s, total {:.2} s",
        t.scenario,
        t.case,
        t.round,
        t.keys,
        t.partitions,
        f(t.to_assigned_s),
        f(t.restore_s),
        t.replayed,
        f(t.assigned_to_processing_s),
        t.total_s
    );
}

/// Restore alone: `--restore-keys` keys in one partition, one instance, `kill -9` and restart,
/// `--restore-restarts` times per case. eosflow alternates a restart from its checkpoint and a
/// cold one (state directory wiped) on the same loaded state; Kafka Streams, as it comes and
/// with transactional state stores (`kstreams-eos-txn`), restarts as it is.
/// Returns the takeovers timed and the cases that failed.
pub fn run(
    clients: &KafkaClients,
    args: &BenchArgs,
    exe: &Path,
    peer: Option<&str>,
    run_id: &str,
) -> (Vec<Takeover>, Vec<(String, String)>) {
    let mut done = vec![];
    let mut failed = vec![];
    for who in [
        Contender::EosflowEos,
        Contender::KafkaStreams,
        Contender::KafkaStreamsTxn,
    ] {
        if !args.contenders.iter().any(|c| c == who.name()) {
            continue;
        }
        let app = format!("bench-{run_id}-rs-{}", who.name());
        let l = Launch::count(clients.bootstrap(), args, (exe, peer), &app, 0);
        let result = restore_one(clients, args, who, &l, &mut done);
        cleanup(clients, &l);
        if let Err(e) = result {
            eprintln!("bench: restore {} FAILED: {e}", who.name());
            failed.push((format!("restore {}", who.name()), e.to_string()));
        }
    }
    (done, failed)
}

fn restore_one(
    clients: &KafkaClients,
    args: &BenchArgs,
    who: Contender,
    l: &Launch,
    done: &mut Vec<Takeover>,
) -> Result<(), BenchError> {
    let n = args.restore_keys;
    let reader = load(clients, who, l, 1, n)?;
    let mut instances = vec![contender::spawn(who, l, 0)?];
    wait_until(
        "the state was loaded",
        load_timeout(n),
        &mut instances,
        || reader.counts().0 >= n as usize,
    )?;
    // The last commit (and Kafka Streams' cache flush) lands.
    std::thread::sleep(Duration::from_secs(2));
    let colds: &[bool] = if who.is_eosflow() {
        &[false, true]
    } else {
        &[false]
    };
    let mut base = 1_000;
    let mut written = n;
    let churn = (n / 10).max(1);
    let mut first = true;
    for round in 1..=args.restore_restarts {
        for &cold in colds {
            if !first {
                // The state changes after the last restore (a tenth of the keys updated), as
                // it would in a running instance: a restore that trusts a checkpoint written
                // at its own end would otherwise replay nothing.
                workload::preload_more(clients, &l.input, (written, churn), n)?;
                written += churn;
                wait_until(
                    "the updates processed",
                    load_timeout(churn),
                    &mut instances,
                    || reader.counts().0 >= written as usize,
                )?;
                std::thread::sleep(Duration::from_secs(2));
            }
            first = false;
            instances[0].kill9();
            if cold {
                let state = l.dir.join("state-i0");
                std::fs::remove_dir_all(&state).map_err(|e| {
                    BenchError::Instance(format!("wiping {}: {e}", state.display()))
                })?;
            }
            let log = instances[0].log.clone();
            let from = log_len(&log);
            let t0 = now_us();
            instances[0] = contender::spawn(who, l, 0)?;
            workload::probes(clients, &l.input, 1, base)?;
            let end = probes_done(
                &reader,
                &mut instances,
                base,
                1,
                "the partition processing after the restart",
            )?;
            base += 1;
            let (to_assigned_s, restore_s, replayed, assigned_to_processing_s, total_s) =
                phases(t0, &events(&log_from(&log, from)), end);
            let case = match (who, cold) {
                (Contender::KafkaStreams, _) => {
                    format!("{}, default (wipes the store)", who.name())
                }
                (Contender::KafkaStreamsTxn, _) => {
                    format!("{}, transactional stores", who.name())
                }
                (_, false) => format!("{}, checkpoint", who.name()),
                (_, true) => format!("{}, cold (state dir wiped)", who.name()),
            };
            let t = Takeover {
                scenario: "restore".into(),
                case,
                keys: n,
                partitions: 1,
                round,
                to_assigned_s,
                restore_s,
                replayed,
                assigned_to_processing_s,
                total_s,
            };
            print(&t);
            done.push(t);
        }
    }
    for i in instances.iter_mut() {
        i.kill9();
    }
    reader.finish()?;
    Ok(())
}

/// Failover: `--failover-keys` keys over `--failover-partitions` partitions, two instances;
/// `kill -9` of instance 0 (each holds half the partitions) and the time until every partition
/// processes again, timed on the survivor. Cases: eosflow, Kafka Streams exactly-once and Kafka
/// Streams with transactional state stores (KIP-892), with 0 and 1 standby replicas;
/// `--failover-repeats` each, every one on freshly loaded state. Kafka Streams on the streams
/// protocol is not among them: the broker sets its session timeout (at least 45 s by default),
/// so its detection alone would dwarf what is measured here.
pub fn failover(
    clients: &KafkaClients,
    args: &BenchArgs,
    exe: &Path,
    peer: Option<&str>,
    run_id: &str,
) -> (Vec<Takeover>, Vec<(String, String)>) {
    let mut done = vec![];
    let mut failed = vec![];
    let cases = [
        (Contender::EosflowEos, 0),
        (Contender::EosflowEos, 1),
        (Contender::KafkaStreams, 0),
        (Contender::KafkaStreams, 1),
        // KIP-892 transactional state stores: what a standby and a restore of its changelog
        // cost with them.
        (Contender::KafkaStreamsTxn, 0),
        (Contender::KafkaStreamsTxn, 1),
    ];
    for round in 1..=args.failover_repeats {
        for (who, standby) in cases {
            if !args.contenders.iter().any(|c| c == who.name()) {
                continue;
            }
            let app = format!("bench-{run_id}-fo-{}-{standby}-{round}", who.name());
            let l = Launch::count(clients.bootstrap(), args, (exe, peer), &app, standby);
            let result = failover_one(clients, args, who, &l, round);
            cleanup(clients, &l);
            match result {
                Ok(t) => {
                    print(&t);
                    done.push(t);
                }
                Err(e) => {
                    eprintln!("bench: failover {app} FAILED: {e}");
                    failed.push((format!("failover {app}"), e.to_string()));
                }
            }
        }
    }
    (done, failed)
}

fn failover_one(
    clients: &KafkaClients,
    args: &BenchArgs,
    who: Contender,
    l: &Launch,
    round: usize,
) -> Result<Takeover, BenchError> {
    let (n, p) = (args.failover_keys, args.failover_partitions);
    let reader = load(clients, who, l, p, n)?;
    let mut instances: Vec<Instance> = (0..2)
        .map(|i| contender::spawn(who, l, i))
        .collect::<Result<_, _>>()?;
    let logs: Vec<PathBuf> = instances.iter().map(|i| i.log.clone()).collect();
    wait_until(
        "both instances joined",
        Duration::from_secs(120),
        &mut instances,
        || super::all_joined(&logs),
    )?;
    wait_until(
        "the state was loaded",
        load_timeout(n),
        &mut instances,
        || reader.counts().0 >= n as usize,
    )?;
    // Both instances processing (the second one's rebalance settled) ...
    workload::probes(clients, &l.input, p, 0)?;
    probes_done(&reader, &mut instances, 0, p, "every partition processing")?;
    // ... the last commit landed and the standby copies caught up (what the survivor replays
    // shows whether they had: `replayed`).
    let settle = 3 + if l.standby_replicas > 0 {
        5 + n / 100_000
    } else {
        0
    };
    std::thread::sleep(Duration::from_secs(settle));
    let from = log_len(&logs[1]);
    let t0 = now_us();
    instances[0].kill9();
    workload::probes(clients, &l.input, p, 1_000)?;
    let end = probes_done(
        &reader,
        &mut instances,
        1_000,
        p,
        "every partition processing after the kill",
    )?;
    let (to_assigned_s, restore_s, replayed, assigned_to_processing_s, total_s) =
        phases(t0, &events(&log_from(&logs[1], from)), end);
    for i in instances.iter_mut() {
        i.kill9();
    }
    reader.finish()?;
    Ok(Takeover {
        scenario: "failover".into(),
        case: format!("{}, {} standby", who.name(), l.standby_replicas),
        keys: n,
        partitions: p,
        round,
        to_assigned_s,
        restore_s,
        replayed,
        assigned_to_processing_s,
        total_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_to_the_epoch_microsecond() {
        assert_eq!(parse_rfc3339_us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_us("2026-12-04T11:12:26.113002Z"),
            Some(1_796_382_746_113_002)
        );
        assert_eq!(
            parse_rfc3339_us("2024-02-29T00:00:01.5Z"),
            Some(1_709_164_801_500_000)
        );
        assert_eq!(parse_rfc3339_us("garbage"), None);
    }

    #[test]
    fn both_log_formats_give_assignment_and_restores() {
        let eosflow = concat!(
            r#"{"timestamp":"1970-01-01T00:00:01Z","level":"INFO","fields":{"message":"partitions assigned","partitions":"[]"}}"#,
            "\n",
            r#"{"timestamp":"1970-01-01T00:00:02Z","level":"INFO","fields":{"message":"partitions assigned","partitions":"[(\"in\", 0)]"}}"#,
            "\n",
            r#"{"timestamp":"1970-01-01T00:00:05Z","level":"INFO","fields":{"message":"restored partition=0 replayed=7","partition":0,"replayed":7,"millis":1500}}"#,
            "\n",
        );
        assert_eq!(
            events(eosflow),
            Events {
                assigned: vec![2_000_000],
                restores: vec![(3_500_000, 5_000_000, 7)],
            }
        );
        let peer = "REBALANCING\nASSIGNED 10 0 []\nASSIGNED 20 1 [in-0]\nRESTORE_START 30 app-count-changelog 0 0 99\nRESTORE_END 90 app-count-changelog 0 99\nRUNNING\n";
        let ev = events(peer);
        assert_eq!(
            ev,
            Events {
                assigned: vec![20],
                restores: vec![(30, 90, 99)],
            }
        );
        let (to_assigned, restore, replayed, to_processing, total) = phases(10, &ev, 1_000_010);
        assert_eq!(to_assigned, Some(10e-6));
        assert_eq!(restore, Some(60e-6));
        assert_eq!(replayed, 99);
        assert_eq!(to_processing, Some(0.99999));
        assert_eq!(total, 1.0);
    }
}
