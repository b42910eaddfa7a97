//! The `outbox-leader-bounce` scenario (issue 33): a writer commits outbox rows to a PRIVATE
//! Postgres while two `eosflow outbox` (CDC) routers — one streaming, one waiting for the slot —
//! publish them to a private three-node cluster, and a broker leading partitions of the router's
//! topics (the routed topic and its offsets topic, whose write is the exactly-once checkpoint)
//! is stopped and started again, again and again: cleanly (controlled shutdown) for the first
//! half of the bounces, with `kill -9` for the second. Each bounce takes the leader bounced
//! least recently (the one leading the most on a tie), so the bounces go round the brokers, the
//! router's transaction coordinator among them; always bouncing the busiest leader hit the same
//! broker ten times out of ten (preferred leaders move back to it after each restart).
//!
//! Judged from the rows in Postgres against the routed topic read `read_committed`: every row
//! exactly once, in per-aggregate commit order; and a second time by Apache Kafka's own console
//! consumer. A router must never exit during a bounce: it can always recover.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use super::cluster::{self, Cluster};
use super::faults::STALL_AFTER;
use super::outbox_crash::{read_routed, row_id, wait_until, writer, Pg, Routers};
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::stack::PrivateStack;
use eosflow::config::Config;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Shape of an outbox-leader-bounce run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Outbox rows written.
    pub rows: u64,
    /// Broker bounces: the first half clean, the rest `kill -9`.
    pub bounces: u32,
    /// How long writing the rows takes (bounces are spread over it).
    pub duration: Duration,
}

impl Options {
    /// The `make test` version: one clean and one hard bounce.
    pub fn short() -> Self {
        Self {
            rows: 10_000,
            bounces: 2,
            duration: Duration::from_secs(30),
        }
    }

    /// The long version.
    pub fn long() -> Self {
        Self {
            rows: 200_000,
            bounces: 10,
            duration: Duration::from_secs(300),
        }
    }
}

/// The run's moving parts, watched while a broker is away.
struct Watch<'a> {
    routers: Routers<'a>,
    probe: Pg,
    slot: String,
    /// A bounce whose recovery is awaited: when, Postgres' WAL position then, and the last
    /// row number (`n`) written by then.
    pending: Option<(Instant, u64, i64)>,
    /// Tails the routed topic `read_committed`: the highest row number published so far.
    tail: BaseConsumer,
    published_n: i64,
    /// The writer has written every row.
    writer_done: Arc<AtomicBool>,
    recoveries: Vec<Duration>,
    stalls: u32,
    router_exits: u32,
}

impl Watch<'_> {
    fn confirmed(&mut self) -> Option<u64> {
        self.probe
            .text(&format!(
                "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = '{}'",
                self.slot
            ))
            .and_then(|t| eosflow_outbox::publish::parse_lsn(&t))
    }

    /// Postgres' current WAL position.
    fn wal_now(&mut self) -> Option<u64> {
        self.probe
            .text("select pg_current_wal_lsn()::text")
            .and_then(|t| eosflow_outbox::publish::parse_lsn(&t))
    }

    /// The highest row number written to the outbox table so far (-1: none).
    fn written_n(&mut self, table: &str) -> Option<i64> {
        self.probe
            .text(&format!(
                "select coalesce(max((payload->>'n')::bigint), -1)::text from {table}"
            ))
            .and_then(|t| t.parse().ok())
    }

    /// Reads what the routed topic committed since the last call (bounded per call). An
    /// error event (a fetch from a bounced leader) is passed over, never a reason to stop:
    /// stopping at the first one let such events queue up ahead of the messages, and the tail
    /// fell minutes behind the router (every bounce after the first was reported as a stall
    /// while the slot's confirmed LSN kept up with Postgres).
    fn drain_tail(&mut self) {
        for _ in 0..20_000 {
            match self.tail.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    let n = m
                        .payload()
                        .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                        .and_then(|v| v["n"].as_i64());
                    if let Some(n) = n {
                        self.published_n = self.published_n.max(n);
                    }
                }
                Some(Err(e)) => tracing::debug!(error = %e, "the routed topic's tail"),
                None => break,
            }
        }
    }

    /// Restarts a router that exited (counted: a bounce must never make one exit) and times
    /// the pending recovery: until a row written *after* the bounce is visible `read_committed`
    /// in the routed topic (published by a transaction that began after the bounce, never by
    /// the one in flight then; the figure includes up to one pause of the writer, whose
    /// statements come about 1.5 s apart), or, once the writer is done with nothing after the
    /// bounce, until the slot is confirmed past Postgres' WAL position at the bounce.
    fn poll(&mut self) -> Result<(), String> {
        for i in 0..self.routers.children.len() {
            if let Ok(Some(st)) = self.routers.children[i].try_wait() {
                tracing::warn!(status = %st, "a router exited by itself; restarting it");
                self.router_exits += 1;
                self.routers.children[i] = self.routers.spawn()?;
            }
        }
        self.drain_tail();
        if let Some((at, lsn, n_at)) = self.pending {
            let committed_since = self.published_n > n_at;
            let drained = self.writer_done.load(std::sync::atomic::Ordering::Relaxed)
                && self.confirmed().is_some_and(|c| c >= lsn);
            if committed_since || drained {
                self.recoveries.push(at.elapsed());
                self.pending = None;
            } else if at.elapsed() > STALL_AFTER {
                tracing::warn!(
                    "stall: no row written after a bounce was visible read_committed within {} s",
                    STALL_AFTER.as_secs()
                );
                self.stalls += 1;
                self.pending = None;
            }
        }
        Ok(())
    }

    /// Runs `dev/cluster <args>` to its end (at most 300 s), polling all along.
    fn cluster_op(&mut self, c: &Cluster, args: &[&str]) -> Result<(), String> {
        c.run_watching(args, || self.poll())
    }
}

/// Runs the scenario: the private Postgres (`stack`) and the cluster (`c`) must be up.
pub fn run(
    config: &Config,
    stack: &PrivateStack,
    c: &Cluster,
    env: &ScenarioEnv,
    opts: &Options,
) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let mut on_cluster = config.clone();
    on_cluster.kafka.bootstrap = c.bootstrap();
    let clients = KafkaClients::new(on_cluster.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app = format!("outbox-bounce-{run_id}");
    let table = format!("bounce_{run_id}_outbox");
    let topic = format!("{app}.Order");
    let offsets_topic = format!("{app}-outbox-offsets");
    let logs = env.work_dir.join(&app);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    // The routed topic up front, with the cluster's replication factor: the first bounce must
    // find it (a router creating it during a bounce waits for the broker: issue 33).
    topics::apply_blocking(
        &clients,
        &[TopicSpec::new(topic.clone(), 8, "delete")],
        Duration::from_secs(30),
    )
    .map_err(|e| format!("creating {topic}: {e}"))?;
    let routers = Routers::start(env, c.bootstrap(), stack, &app, &table, &logs, 2)?;
    let slot = format!("{table}_slot");
    let done = Arc::new(AtomicBool::new(false));
    let tail: BaseConsumer = clients
        .config(ClientRole::Reader)
        .set("isolation.level", "read_committed")
        // The tail never waits for a partition's end: no end-of-partition events to wade
        // through (one per fetch that reaches the end, dozens a second while rows flow).
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("creating the routed topic's tail: {e}"))?;
    let mut from_start = TopicPartitionList::new();
    for p in 0..8 {
        from_start
            .add_partition_offset(&topic, p, Offset::Beginning)
            .map_err(|e| format!("tail of {topic}: {e}"))?;
    }
    tail.assign(&from_start)
        .map_err(|e| format!("tail of {topic}: {e}"))?;
    let mut w = Watch {
        tail,
        published_n: -1,
        writer_done: done.clone(),
        routers,
        probe: Pg::new(&stack.postgres_url())?,
        slot: slot.clone(),
        pending: None,
        recoveries: Vec::new(),
        stalls: 0,
        router_exits: 0,
    };
    wait_until(
        "the router streaming from its slot",
        Duration::from_secs(60),
        || {
            w.probe
                .text(&format!(
                    "select active::text from pg_replication_slots where slot_name = '{slot}'"
                ))
                .is_some_and(|a| a == "true")
        },
    )?;
    // The offsets topic exists by now: the router creates it before it streams.
    let bounced_topics = vec![topic.clone(), offsets_topic.clone()];

    let writer = {
        let (url, table, done) = (stack.postgres_url(), table.clone(), done.clone());
        let (rows, duration) = (opts.rows, opts.duration);
        std::thread::spawn(move || writer(&url, &table, rows, duration, &done))
    };
    let mut rng = rand::thread_rng();
    let interval = opts.duration.as_secs_f64() / f64::from(opts.bounces + 1);
    let mut next = Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
    let (mut clean, mut hard, mut isr_wait_max) = (0u32, 0u32, Duration::ZERO);
    let mut bounced: Vec<i32> = Vec::new();
    let deadline = Instant::now() + opts.duration + Duration::from_secs(600);
    while clean + hard < opts.bounces || !writer.is_finished() {
        if Instant::now() > deadline {
            return Err(format!(
                "the run did not finish in time; logs in {}",
                logs.display()
            ));
        }
        w.poll()?;
        if clean + hard < opts.bounces && Instant::now() >= next && w.pending.is_none() {
            let node = cluster::least_recently_bounced_leader(&clients, &bounced_topics, &bounced)?;
            bounced.push(node);
            let is_hard = clean + hard >= opts.bounces / 2;
            let lsn = w.wal_now().ok_or("reading pg_current_wal_lsn()")?;
            let n_at = w
                .written_n(&table)
                .ok_or("reading the outbox table's last row")?;
            w.pending = Some((Instant::now(), lsn, n_at));
            let id = node.to_string();
            w.cluster_op(c, &[if is_hard { "kill" } else { "stop" }, &id])?;
            tracing::info!(node, hard = is_hard, "outbox-leader-bounce: broker stopped");
            let away = Instant::now() + Duration::from_millis(rng.gen_range(1000..4000));
            while Instant::now() < away {
                w.poll()?;
                std::thread::sleep(Duration::from_millis(200));
            }
            w.cluster_op(c, &["start", &id])?;
            tracing::info!(node, "outbox-leader-bounce: broker back");
            if is_hard {
                hard += 1;
            } else {
                clean += 1;
            }
            // The full ISR again before the next bounce takes a second replica away.
            let t = Instant::now();
            loop {
                let short = cluster::isr_shortfall(&clients, &bounced_topics);
                if short.is_empty() {
                    break;
                }
                if t.elapsed() > Duration::from_secs(180) {
                    return Err(format!(
                        "partitions still short of their ISR after 180 s: {}",
                        short.join(", ")
                    ));
                }
                w.poll()?;
                std::thread::sleep(Duration::from_millis(500));
            }
            isr_wait_max = isr_wait_max.max(t.elapsed());
            next = Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The last bounce's recovery (the writer may have ended meanwhile: then the LSN moves only
    // if the router publishes what was left).
    let settle = Instant::now() + STALL_AFTER;
    while w.pending.is_some() && Instant::now() < settle {
        w.poll()?;
        std::thread::sleep(Duration::from_millis(200));
    }
    let txs = writer
        .join()
        .map_err(|_| "the writer panicked".to_string())??;
    let written: u64 = w
        .probe
        .text(&format!("select count(*)::text from {table}"))
        .and_then(|t| t.parse().ok())
        .ok_or("counting the outbox rows")?;

    // Every row in Kafka (or the deadline), then the verdict.
    let want: HashSet<String> = (0..opts.rows).map(row_id).collect();
    let drain = Instant::now() + Duration::from_secs(300);
    let (counts, order_breaks) = loop {
        w.poll()?;
        let (counts, breaks) = read_routed(&clients, &topic)?;
        let have = want.iter().filter(|id| counts.contains_key(*id)).count() as u64;
        if have == opts.rows || Instant::now() > drain {
            break (counts, breaks);
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let lost = want.iter().filter(|id| !counts.contains_key(*id)).count() as u64;
    let duplicated: u64 = counts.values().map(|n| u64::from(n - 1)).sum();
    let strangers = counts.keys().filter(|id| !want.contains(*id)).count() as u64;

    // The second judge: Apache Kafka's console consumer, read_committed, ids from the header.
    let home = c.kafka_home()?;
    let (console, other_lines) = cluster::console_ids_by_header(&home, &c.bootstrap(), &topic)?;
    let console_lost = want.iter().filter(|id| !console.contains_key(*id)).count() as u64;
    let console_duplicated: u64 = console.values().map(|n| n.saturating_sub(1)).sum();
    let agrees = console_lost == lost
        && console_duplicated == duplicated
        && console.values().sum::<u64>() == counts.values().map(|n| u64::from(*n)).sum::<u64>();

    let max = w
        .recoveries
        .iter()
        .map(Duration::as_secs_f64)
        .fold(0.0, f64::max);
    Ok(ScenarioReport {
        scenario: Scenario::OutboxLeaderBounce,
        records: opts.rows,
        lost,
        duplicated,
        dlt: 0,
        stalls: w.stalls + u32::from(w.pending.is_some()),
        checks_ok: written == opts.rows
            && order_breaks == 0
            && strangers == 0
            && w.router_exits == 0
            && agrees,
        extra: vec![
            ("clean_bounces".into(), clean.to_string()),
            ("hard_bounces".into(), hard.to_string()),
            ("router_exits".into(), w.router_exits.to_string()),
            (
                "bounced".into(),
                bounced
                    .iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("rows_in_table".into(), written.to_string()),
            ("sql_transactions".into(), txs.to_string()),
            ("order_breaks".into(), order_breaks.to_string()),
            ("longest_stall_s".into(), format!("{max:.1}")),
            (
                "isr_wait_max_s".into(),
                format!("{:.1}", isr_wait_max.as_secs_f64()),
            ),
            (
                "console_outputs".into(),
                console.values().sum::<u64>().to_string(),
            ),
            ("console_lost".into(), console_lost.to_string()),
            ("console_duplicated".into(), console_duplicated.to_string()),
            ("console_other_lines".into(), other_lines.to_string()),
            ("console_agrees".into(), agrees.to_string()),
            (
                "elapsed_s".into(),
                format!("{:.1}", started.elapsed().as_secs_f64()),
            ),
        ],
    })
}
