//! The three-node Kafka cluster of the cluster scenarios (`dev/cluster`: KRaft, replication
//! factor 3, `min.insync.replicas=2`), the faults done to its brokers (a clean stop or `kill -9`
//! of the broker leading most partitions, of the transaction coordinator, a SIGSTOP), and the
//! independent judge: Apache Kafka's own console consumer reading input and output back with
//! `read_committed`.
//!
//! The cluster is private to a scenario: its own run dir and ports, started by the scenario and
//! stopped (data deleted) when the guard drops, also on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use eosflow::kafka::{ClientRole, KafkaClients};

/// Brokers of the cluster (node ids 1..=3, which are also the broker ids).
pub const BROKERS: i32 = 3;

/// Kafka's transaction log topic, whose partition leaders are the transaction coordinators.
const TRANSACTION_LOG: &str = "__transaction_state";
/// The group coordinators' log.
const OFFSETS_LOG: &str = "__consumer_offsets";

/// A cluster started by `dev/cluster` in its own run dir and ports.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The `dev/cluster` script.
    pub script: PathBuf,
    /// Its `EOSFLOW_CLUSTER_DIR`.
    pub run_dir: PathBuf,
    /// Node 1's PLAINTEXT port; node n listens on `port + 10 * (n - 1)`.
    pub port: u16,
}

/// What was done to a cluster's brokers during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterTally {
    /// Clean stops (controlled shutdown) followed by a restart.
    pub clean_bounces: u32,
    /// `kill -9`s followed by a restart.
    pub hard_bounces: u32,
    /// Of the bounces, those of the broker coordinating the instances' transactions.
    pub coordinator_bounces: u32,
    /// SIGSTOPs of one broker (then SIGCONT).
    pub pauses: u32,
    /// The longest wait, after a broker came back, for every partition to have its full ISR
    /// again (the next fault waits for it), in milliseconds.
    pub isr_wait_max_ms: u64,
}

impl Cluster {
    /// A cluster run by `script` in `run_dir` from `port` on; nothing is started yet.
    pub fn new(script: PathBuf, run_dir: PathBuf, port: u16) -> Self {
        Self {
            script,
            run_dir,
            port,
        }
    }

    /// The bootstrap list: every node.
    pub fn bootstrap(&self) -> String {
        (0..BROKERS)
            .map(|n| format!("127.0.0.1:{}", self.port + 10 * n as u16))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs `dev/cluster <args>` against this cluster; its stdout, trimmed.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        std::fs::create_dir_all(&self.run_dir)
            .map_err(|e| format!("{}: {e}", self.run_dir.display()))?;
        let log = self.run_dir.join("cluster-commands.log");
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let out = Command::new(&self.script)
            .args(args)
            .env("EOSFLOW_CLUSTER_DIR", &self.run_dir)
            .env("EOSFLOW_CLUSTER_PORT", self.port.to_string())
            .stdin(Stdio::null())
            .stderr(err)
            .output()
            .map_err(|e| format!("running {}: {e}", self.script.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "{} {} failed ({}); see {}",
                self.script.display(),
                args.join(" "),
                out.status,
                log.display()
            ))
        }
    }

    /// Starts `dev/cluster <args>` without waiting for it (stdout dropped, stderr to the
    /// commands' log): the caller keeps watching the run while a broker stops or starts.
    pub fn spawn(&self, args: &[&str]) -> Result<std::process::Child, String> {
        std::fs::create_dir_all(&self.run_dir)
            .map_err(|e| format!("{}: {e}", self.run_dir.display()))?;
        let log = self.run_dir.join("cluster-commands.log");
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        Command::new(&self.script)
            .args(args)
            .env("EOSFLOW_CLUSTER_DIR", &self.run_dir)
            .env("EOSFLOW_CLUSTER_PORT", self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.script.display()))
    }

    /// Runs `dev/cluster <args>` to its end (at most 300 s, then killed), calling `watch`
    /// every 200 ms meanwhile: a broker's stop or start takes seconds, and the run must be
    /// supervised all along. `watch`'s error ends the wait.
    pub fn run_watching(
        &self,
        args: &[&str],
        mut watch: impl FnMut() -> Result<(), String>,
    ) -> Result<(), String> {
        let mut child = self.spawn(args)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        loop {
            match child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => {
                    return Err(format!(
                        "dev/cluster {} failed ({st}); see {}",
                        args.join(" "),
                        self.run_dir.join("cluster-commands.log").display()
                    ))
                }
                Ok(None) if std::time::Instant::now() < deadline => {}
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("dev/cluster {} took over 300 s", args.join(" ")));
                }
                Err(e) => return Err(format!("dev/cluster {}: {e}", args.join(" "))),
            }
            watch()?;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts the three nodes and returns a guard that stops them (and deletes their data).
    pub fn up(&self) -> Result<ClusterGuard, String> {
        let guard = ClusterGuard {
            cluster: self.clone(),
        };
        self.run(&["up"])?;
        Ok(guard)
    }

    /// Clean stop of broker `node` (controlled shutdown: its leaderships move first).
    pub fn stop(&self, node: i32) -> Result<(), String> {
        self.run(&["stop", &node.to_string()]).map(drop)
    }

    /// `kill -9` of broker `node`.
    pub fn kill(&self, node: i32) -> Result<(), String> {
        self.run(&["kill", &node.to_string()]).map(drop)
    }

    /// Starts broker `node` again and waits until it is ready.
    pub fn start(&self, node: i32) -> Result<(), String> {
        self.run(&["start", &node.to_string()]).map(drop)
    }

    /// SIGSTOP (`pause`) or SIGCONT (`resume`) of broker `node`.
    pub fn signal(&self, verb: &str, node: i32) -> Result<(), String> {
        self.run(&[verb, &node.to_string()]).map(drop)
    }

    /// The Kafka distribution the cluster runs (its `libs/`), for Kafka's own tools.
    pub fn kafka_home(&self) -> Result<PathBuf, String> {
        self.run(&["kafka-home"]).map(PathBuf::from)
    }
}

/// Stops the cluster when dropped and deletes its data; the logs stay for a post-mortem.
#[derive(Debug)]
pub struct ClusterGuard {
    cluster: Cluster,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        // kill -9: the data is deleted next, and a clean stop of the last node of a quorum
        // waits for a controller that is gone.
        if let Err(e) = self.cluster.run(&["down", "--now"]) {
            tracing::warn!(error = %e, "stopping the cluster");
            return;
        }
        for n in 1..=BROKERS {
            let _ = std::fs::remove_dir_all(self.cluster.run_dir.join(format!("node{n}/data")));
        }
    }
}

/// How long the cluster's own metadata questions wait per topic.
const METADATA_WAIT: Duration = Duration::from_secs(10);

/// One partition as the metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionState {
    /// The leading broker (-1: none).
    pub(crate) leader: i32,
    /// The brokers holding a replica.
    pub(crate) replicas: Vec<i32>,
    /// The replicas in sync.
    pub(crate) isr: Vec<i32>,
}

/// Partition (topic, number) → its state.
pub(crate) type PartitionStates = BTreeMap<(String, i32), PartitionState>;

/// The leader, replicas and ISR of every partition of `topics`, from the metadata of a fresh
/// client (each topic asked within `timeout`).
pub(crate) fn partitions(
    clients: &KafkaClients,
    topics: &[String],
    timeout: Duration,
) -> Result<PartitionStates, String> {
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .create()
        .map_err(|e| format!("creating a metadata client: {e}"))?;
    let mut out = BTreeMap::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| format!("metadata of {topic}: {e}"))?;
        for t in md.topics().iter().filter(|t| t.name() == topic) {
            for p in t.partitions() {
                let state = PartitionState {
                    leader: p.leader(),
                    replicas: p.replicas().to_vec(),
                    isr: p.isr().to_vec(),
                };
                out.insert((topic.clone(), p.id()), state);
            }
        }
    }
    Ok(out)
}

/// The broker leading the most partitions of `topics`; on a tie, the one bounced least recently
/// (`recent`: the brokers bounced so far, oldest first), so that repeated bounces do not all
/// hit the same broker when leaderships are balanced.
pub fn busiest_leader(
    clients: &KafkaClients,
    topics: &[String],
    recent: &[i32],
) -> Result<i32, String> {
    pick_leader(clients, topics, |id, n| (n, -last_bounced(recent, id), -id))
}

/// [`busiest_leader`] among the brokers other than `except` (a coordinator a fault must spare).
pub fn busiest_leader_except(
    clients: &KafkaClients,
    topics: &[String],
    recent: &[i32],
    except: i32,
) -> Result<i32, String> {
    pick_leader(clients, topics, |id, n| {
        (id != except, n, -last_bounced(recent, id), -id)
    })
    .and_then(|id| {
        if id == except {
            Err(format!(
                "only broker {except} leads partitions of {topics:?}"
            ))
        } else {
            Ok(id)
        }
    })
}

/// Of the brokers leading at least one partition of `topics`, the one bounced least recently
/// (never bounced first; `recent`: the brokers bounced so far, oldest first), the one leading
/// the most on a tie. Repeated bounces go round every leader, so each broker — the transaction
/// coordinator among them — is bounced in turn, even when one broker always leads the most
/// (preferred leaders come back to it after each restart).
pub fn least_recently_bounced_leader(
    clients: &KafkaClients,
    topics: &[String],
    recent: &[i32],
) -> Result<i32, String> {
    pick_leader(clients, topics, |id, n| {
        (-last_bounced(recent, id), i64::from(n), -id)
    })
}

/// The broker leading partitions of `topics` that `rank` (broker id, partitions it leads)
/// ranks highest.
fn pick_leader<R: Ord>(
    clients: &KafkaClients,
    topics: &[String],
    rank: impl Fn(i32, u32) -> R,
) -> Result<i32, String> {
    let mut led: BTreeMap<i32, u32> = BTreeMap::new();
    for PartitionState { leader, .. } in partitions(clients, topics, METADATA_WAIT)?.values() {
        if *leader >= 0 {
            *led.entry(*leader).or_default() += 1;
        }
    }
    led.into_iter()
        .max_by_key(|(id, n)| rank(*id, *n))
        .map(|(id, _)| id)
        .ok_or_else(|| format!("no partition of {topics:?} has a leader"))
}

/// Where `id` was last bounced in `recent` (oldest first); -1 if never.
fn last_bounced(recent: &[i32], id: i32) -> i64 {
    recent
        .iter()
        .rposition(|b| *b == id)
        .map_or(-1, |i| i as i64)
}

/// Java's `String.hashCode` of `s` (UTF-16 code units, wrapping).
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The partition of the transaction log that holds `transactional_id`'s state, as the broker
/// computes it (`TransactionStateManager.partitionFor`: `Utils.abs(id.hashCode) % partitions`).
/// Kafka's `Utils.abs` is `Math.abs` with `i32::MIN` mapped to 0 — not a mask of the sign bit,
/// which this function used until a negative hash put a group's coordinator on the wrong broker
/// (`isr-shrink` then killed the coordinator it meant to spare).
pub fn transaction_log_partition(transactional_id: &str, partitions: i32) -> i32 {
    let h = java_hash(transactional_id);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// The broker that is the transaction coordinator of `transactional_id` now: the leader of its
/// transaction log partition.
pub fn transaction_coordinator(
    clients: &KafkaClients,
    transactional_id: &str,
) -> Result<i32, String> {
    coordinator(clients, TRANSACTION_LOG, transactional_id, METADATA_WAIT)
}

/// The broker that is the group coordinator of `group` now: the leader of its offsets topic
/// partition (`GroupMetadataManager.partitionFor`: the same hash as the transaction log's).
pub fn group_coordinator(clients: &KafkaClients, group: &str) -> Result<i32, String> {
    coordinator(clients, OFFSETS_LOG, group, METADATA_WAIT)
}

/// [`group_coordinator`], asking for at most `wait` (while a broker is frozen, or instances
/// are paused).
pub fn group_coordinator_within(
    clients: &KafkaClients,
    group: &str,
    wait: Duration,
) -> Result<i32, String> {
    coordinator(clients, OFFSETS_LOG, group, wait)
}

/// The leader of `log`'s partition for `id` (`Utils.abs(id.hashCode) % partitions`).
fn coordinator(clients: &KafkaClients, log: &str, id: &str, wait: Duration) -> Result<i32, String> {
    let parts = partitions(clients, &[log.to_string()], wait)?;
    let n = parts.len() as i32;
    if n == 0 {
        return Err(format!("{log} does not exist yet"));
    }
    let p = transaction_log_partition(id, n);
    match parts.get(&(log.to_string(), p)) {
        Some(PartitionState { leader, .. }) if *leader >= 0 => Ok(*leader),
        _ => Err(format!("{log}[{p}] has no leader")),
    }
}

/// The partitions of `topics` (and of the transaction and offsets logs) without a leader or
/// with fewer in-sync replicas than replicas, named with their ISR (a metadata error is one
/// entry): empty once the cluster is whole again.
pub fn isr_shortfall(clients: &KafkaClients, topics: &[String]) -> Vec<String> {
    let mut all: Vec<String> = topics.to_vec();
    all.extend([TRANSACTION_LOG.to_string(), OFFSETS_LOG.to_string()]);
    match partitions(clients, &all, METADATA_WAIT) {
        Ok(parts) => parts
            .iter()
            .filter(|(_, s)| {
                s.leader < 0
                    || s.isr.len() < s.replicas.len()
                    || s.replicas.len() < BROKERS as usize
            })
            .map(|((t, p), s)| format!("{t}[{p}] isr {}/{}", s.isr.len(), s.replicas.len()))
            .collect(),
        Err(e) => vec![e],
    }
}

/// What Apache Kafka's console consumer (`read_committed`) finds in a run's input and output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleJudgement {
    /// Distinct record ids in the input.
    pub input_ids: u64,
    /// Output records.
    pub outputs: u64,
    /// Input ids with no output.
    pub lost: u64,
    /// Outputs beyond one per id.
    pub duplicated: u64,
    /// Lines on the consumer's stdout that are no record of ours (its own log lines), skipped.
    pub other_lines: u64,
}

/// Reads `topic` to its end with Kafka's `ConsoleConsumer` (`--isolation-level read_committed`,
/// `--from-beginning`, exits after 5 s without a record); one line per record.
fn console_read(
    kafka_home: &std::path::Path,
    bootstrap: &str,
    topic: &str,
    headers: bool,
) -> Result<Vec<String>, String> {
    let mut cmd = Command::new("timeout");
    cmd.args(["600", "java", "-Xmx256m", "-cp"])
        .arg(kafka_home.join("libs/*"))
        .args([
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--timeout-ms",
            "5000",
        ]);
    if headers {
        cmd.args(["--formatter-property", "print.headers=true"]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running Kafka's console consumer: {e}"))?;
    // It exits 0 after its timeout (a TimeoutException it reports on stderr).
    if !out.status.success() {
        return Err(format!(
            "Kafka's console consumer on {topic} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// The independent judgement: Kafka's own console consumer reads the run's input (ids from the
/// `id` header) and output (ids from the JSON value) with `read_committed`, and counts lost and
/// duplicated records on its own, to be compared with the verifier's verdict.
pub fn console_judgement(
    kafka_home: &std::path::Path,
    bootstrap: &str,
    input: &str,
    output: &str,
) -> Result<ConsoleJudgement, String> {
    // Lines read `id:r123\t<value>` (headers, a tab, the value).
    let input_ids: BTreeSet<String> = console_read(kafka_home, bootstrap, input, true)?
        .iter()
        .filter_map(|l| {
            l.split('\t')
                .next()?
                .split(',')
                .find_map(|h| h.strip_prefix("id:"))
                .map(str::to_string)
        })
        .collect();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let (mut outputs, mut other_lines) = (0, 0);
    for l in console_read(kafka_home, bootstrap, output, false)? {
        // Every output value is a JSON object naming its input id; anything else on stdout is
        // the tool's own logging (log4j's default console appender), reported, not counted.
        match serde_json::from_str::<serde_json::Value>(&l)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string))
        {
            Some(id) => {
                outputs += 1;
                *seen.entry(id).or_default() += 1;
            }
            None => {
                other_lines += 1;
                tracing::info!(line = %l, "console consumer: a line that is no output record");
            }
        }
    }
    Ok(ConsoleJudgement {
        input_ids: input_ids.len() as u64,
        outputs,
        other_lines,
        lost: input_ids
            .iter()
            .filter(|id| !seen.contains_key(*id))
            .count() as u64,
        duplicated: seen.values().map(|n| n.saturating_sub(1)).sum(),
    })
}

/// How many times Kafka's console consumer (`read_committed`) finds each `id` header value in
/// `topic`, and the lines with no `id` header (the tool's own logging): the second judge of a
/// run whose records carry their id in a header (the outbox router's).
pub fn console_ids_by_header(
    kafka_home: &std::path::Path,
    bootstrap: &str,
    topic: &str,
) -> Result<(BTreeMap<String, u64>, u64), String> {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut other_lines = 0;
    for l in console_read(kafka_home, bootstrap, topic, true)? {
        let id = l.split('\t').next().and_then(|h| {
            h.split(',')
                .find_map(|h| h.strip_prefix("id:"))
                .map(str::to_string)
        });
        match id {
            Some(id) => *seen.entry(id).or_default() += 1,
            None => other_lines += 1,
        }
    }
    Ok((seen, other_lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_log_partitions_match_java_string_hash_code() {
        // "".hashCode() == 0, "a".hashCode() == 97, "hello".hashCode() == 99162322;
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE, which Utils.abs maps to 0.
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("hello"), 99_162_322);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(transaction_log_partition("polygenelubricants", 10), 0);
        assert_eq!(transaction_log_partition("hello", 10), 2);
        // Negative hashes: Math.abs, not a mask ("verify-ffffffff".hashCode() == -351959596:
        // partition 6 of 10, where masking the sign bit gives 2).
        assert_eq!(java_hash("verify-ffffffff"), -351_959_596);
        assert_eq!(transaction_log_partition("verify-ffffffff", 10), 6);
        assert_eq!(java_hash("verify-a1b2c3d4-i0"), -615_912_960);
        assert_eq!(transaction_log_partition("verify-a1b2c3d4-i0", 10), 0);
        // "verify-abc-i0" and friends must still land in 0..partitions.
        for id in ["verify-0f3a9c1e-i0", "verify-0f3a9c1e-i1", "zzzzzzzzzzzz"] {
            assert!((0..10).contains(&transaction_log_partition(id, 10)));
        }
    }
}
