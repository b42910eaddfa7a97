//! The `outbox-crash` scenario: a writer commits outbox rows to a PRIVATE Postgres while two
//! `eosflow outbox` (CDC) routers — one streaming, one waiting for the slot — are `kill -9`ed
//! again and again, and Postgres itself is restarted once. Every row must reach Kafka exactly
//! once (`read_committed`), in per-aggregate commit order.
//!
//! Row ids are derived from the row number and inserted with `ON CONFLICT DO NOTHING`, so the
//! writer can retry a transaction whose commit was cut off by the restart without adding rows.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::message::Headers;
use rdkafka::Message;

use super::faults::STALL_AFTER;
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::stack::PrivateStack;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::KafkaClients;

/// Shape of an outbox-crash run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Outbox rows written.
    pub rows: u64,
    /// kill -9s of a router.
    pub kills: u32,
    /// How long writing the rows takes (kills are spread over it).
    pub duration: Duration,
}

impl Options {
    /// The `make test` version.
    pub fn short() -> Self {
        Self {
            rows: 5_000,
            kills: 3,
            duration: Duration::from_secs(8),
        }
    }

    /// The long version: ≥ 200k rows, ≥ 20 router kills, one Postgres restart.
    pub fn long() -> Self {
        Self {
            rows: 200_000,
            kills: 24,
            duration: Duration::from_secs(120),
        }
    }
}

/// The id of row `i`.
pub(crate) fn row_id(i: u64) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

/// A blocking Postgres connection that reconnects (the server restarts mid-run).
pub(crate) struct Pg {
    url: String,
    rt: tokio::runtime::Runtime,
    client: Option<tokio_postgres::Client>,
}

impl Pg {
    pub(crate) fn new(url: &str) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            url: url.to_string(),
            rt,
            client: None,
        })
    }

    /// Runs `sql`, reconnecting and retrying until `deadline` (the statement must be idempotent).
    fn exec(&mut self, sql: &str, deadline: Instant) -> Result<(), String> {
        loop {
            let r = self.try_exec(sql);
            match r {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "postgres statement failed; retrying");
                    self.client = None;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn connect(&mut self) -> Result<(), String> {
        if self.client.is_none() {
            let (client, conn) = self
                .rt
                .block_on(tokio_postgres::connect(&self.url, tokio_postgres::NoTls))
                .map_err(|e| format!("connecting to {}: {e}", self.url))?;
            self.rt.spawn(conn);
            self.client = Some(client);
        }
        Ok(())
    }

    fn try_exec(&mut self, sql: &str) -> Result<(), String> {
        self.connect()?;
        let c = self.client.as_ref().ok_or("no connection")?;
        self.rt
            .block_on(c.batch_execute(sql))
            .map_err(|e| format!("{sql}: {e}"))
    }

    /// The first column of the first row as text, if any (errors are `None`: it is a probe).
    pub(crate) fn text(&mut self, sql: &str) -> Option<String> {
        self.connect().ok()?;
        let c = self.client.as_ref()?;
        match self.rt.block_on(c.query_opt(sql, &[])) {
            Ok(r) => r.and_then(|r| r.get::<_, Option<String>>(0)),
            Err(_) => {
                self.client = None;
                None
            }
        }
    }
}

/// Names and processes of the run.
pub(crate) struct Routers<'a> {
    pub(crate) env: &'a ScenarioEnv,
    pub(crate) bootstrap: String,
    pub(crate) pg_url: String,
    pub(crate) app: String,
    pub(crate) table: String,
    pub(crate) logs: std::path::PathBuf,
    pub(crate) children: Vec<Child>,
    pub(crate) started: usize,
}

impl<'a> Routers<'a> {
    /// Creates the outbox table (`table`) and starts `n` routers of application `app` on it,
    /// publishing to `bootstrap` (one of them takes the slot, the others stand by).
    pub(crate) fn start(
        env: &'a ScenarioEnv,
        bootstrap: String,
        stack: &PrivateStack,
        app: &str,
        table: &str,
        logs: &std::path::Path,
        n: usize,
    ) -> Result<Self, String> {
        let mut routers = Routers {
            env,
            bootstrap,
            pg_url: stack.postgres_url(),
            app: app.to_string(),
            table: table.to_string(),
            logs: logs.to_path_buf(),
            children: Vec::new(),
            started: 0,
        };
        routers.migrate()?;
        for _ in 0..n {
            let c = routers.spawn()?;
            routers.children.push(c);
        }
        Ok(routers)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.env.exe);
        cmd.arg("outbox")
            .env("RUST_LOG", "info,rdkafka=warn")
            .env("EOSFLOW_APP_ID", &self.app)
            .env("EOSFLOW_KAFKA_BOOTSTRAP", &self.bootstrap)
            .env("EOSFLOW_POSTGRES_URL", &self.pg_url)
            .env("EOSFLOW_OUTBOX_MODE", "cdc")
            .env("EOSFLOW_OUTBOX_TABLE", &self.table)
            .env("EOSFLOW_OUTBOX_SLOT", format!("{}_slot", self.table))
            .env("EOSFLOW_OUTBOX_PUBLICATION", format!("{}_pub", self.table))
            .env(
                "EOSFLOW_OUTBOX_TOPIC_TEMPLATE",
                format!("{}.${{routedByValue}}", self.app),
            )
            .env("EOSFLOW_OUTBOX_TOPIC_PARTITIONS", "8")
            .env("EOSFLOW_OUTBOX_COMMIT_INTERVAL_MS", "50")
            .env("EOSFLOW_OUTBOX_STATUS_INTERVAL_MS", "200")
            .env("EOSFLOW_OUTBOX_HEARTBEAT_INTERVAL_MS", "500")
            .env("EOSFLOW_METRICS_LISTEN", "")
            .stdin(Stdio::null());
        cmd
    }

    pub(crate) fn migrate(&self) -> Result<(), String> {
        let out = self
            .command()
            .arg("migrate")
            .output()
            .map_err(|e| format!("eosflow outbox migrate: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "eosflow outbox migrate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub(crate) fn spawn(&mut self) -> Result<Child, String> {
        let log = self.logs.join(format!("router-{}.log", self.started));
        self.started += 1;
        let f = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let f2 = f.try_clone().map_err(|e| e.to_string())?;
        self.command()
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| format!("starting a router: {e}"))
    }
}

impl Drop for Routers<'_> {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn writer(
    url: &str,
    table: &str,
    rows: u64,
    duration: Duration,
    done_flag: &AtomicBool,
) -> Result<u64, String> {
    let mut pg = Pg::new(url)?;
    let started = Instant::now();
    let mut done = 0u64;
    let mut n = 0u64;
    let mut txs = 0u64;
    while done < rows {
        n += 1;
        let size = ((n * 7919) % 500 + 1).min(rows - done);
        let sql = format!(
            "insert into {table} (id, aggregate_id, type, payload) \
             select ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, \
                    'agg-' || (i % 200), 'Order.Changed', jsonb_build_object('n', i) \
             from generate_series({done}, {}) i on conflict (id) do nothing",
            done + size - 1
        );
        // A restart of Postgres cuts some statements off: retried (idempotently) for 2 minutes.
        pg.exec(&sql, Instant::now() + Duration::from_secs(120))?;
        done += size;
        txs += 1;
        let target = duration.mul_f64(done as f64 / rows as f64);
        if let Some(wait) = target.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    done_flag.store(true, Ordering::Relaxed);
    Ok(txs)
}

/// Reads the routed topic: per id, how often; and whether per-aggregate order held.
pub(crate) fn read_routed(
    clients: &KafkaClients,
    topic: &str,
) -> Result<(HashMap<String, u32>, u64), String> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut order_breaks = 0u64;
    read_all(clients, topic, Duration::from_secs(60), |m| {
        let id = m
            .headers()
            .and_then(|h| {
                h.iter()
                    .find(|h| h.key == "id")
                    .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).to_string()))
            })
            .unwrap_or_default();
        *counts.entry(id).or_default() += 1;
        let n = m
            .payload()
            .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
            .and_then(|v| v["n"].as_i64())
            .unwrap_or(-1);
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        if let Some(prev) = last.insert(key, n) {
            if prev >= n {
                order_breaks += 1;
            }
        }
        Ok(())
    })
    .map_err(|e| format!("reading {topic}: {e}"))?;
    Ok((counts, order_breaks))
}

/// Runs the scenario: the private Postgres must be up (`stack`), Kafka is the configured one.
pub fn run(
    config: &Config,
    stack: &PrivateStack,
    env: &ScenarioEnv,
    opts: &Options,
) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app = format!("outbox-crash-{run_id}");
    let table = format!("crash_{run_id}_outbox");
    let logs = env.work_dir.join(&app);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut routers = Routers::start(
        env,
        config.kafka.bootstrap.clone(),
        stack,
        &app,
        &table,
        &logs,
        2,
    )?;
    let mut probe = Pg::new(&stack.postgres_url())?;
    let slot = format!("{table}_slot");
    wait_until(
        "the router streaming from its slot",
        Duration::from_secs(60),
        || {
            probe
                .text(&format!(
                    "select active::text from pg_replication_slots where slot_name = '{slot}'"
                ))
                .is_some_and(|a| a == "true")
        },
    )?;

    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (url, table, done) = (stack.postgres_url(), table.clone(), done.clone());
        let (rows, duration) = (opts.rows, opts.duration);
        std::thread::spawn(move || writer(&url, &table, rows, duration, &done))
    };
    let mut rng = rand::thread_rng();
    let interval = opts.duration.as_secs_f64() / f64::from(opts.kills + 1);
    let mut next_kill =
        Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
    let restart_after = Instant::now() + opts.duration / 2;
    let mut pg_restarted: Option<Duration> = None;
    let (mut kills, mut router_exits) = (0u32, 0u32);
    // Recovery: from a kill until the slot's confirmed LSN moves again.
    let mut pending: Option<(Instant, u64)> = None;
    let mut recoveries: Vec<Duration> = Vec::new();
    let mut stalls = 0u32;
    let confirmed = |probe: &mut Pg| {
        probe
            .text(&format!(
                "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = '{slot}'"
            ))
            .and_then(|t| eosflow_outbox::publish::parse_lsn(&t))
    };
    let deadline = Instant::now() + opts.duration + Duration::from_secs(300);
    let mut kills_mid_stream = 0u32;
    while kills < opts.kills || pg_restarted.is_none() || !writer.is_finished() {
        if Instant::now() > deadline {
            return Err(format!(
                "the run did not finish in time; logs in {}",
                logs.display()
            ));
        }
        for i in 0..routers.children.len() {
            if let Ok(Some(st)) = routers.children[i].try_wait() {
                // A router that stops by itself (e.g. during the Postgres restart) is restarted, as
                // a supervisor would; the count is reported.
                tracing::warn!(status = %st, "a router exited by itself; restarting it");
                router_exits += 1;
                routers.children[i] = routers.spawn()?;
            }
        }
        if let Some((at, lsn)) = pending {
            if confirmed(&mut probe).is_some_and(|c| c > lsn) {
                recoveries.push(at.elapsed());
                pending = None;
            } else if at.elapsed() > STALL_AFTER {
                stalls += 1;
                pending = None;
            }
        }
        if pg_restarted.is_none() && Instant::now() >= restart_after {
            tracing::info!("restarting the private Postgres");
            pg_restarted = Some(stack.restart("postgres")?);
            probe.client = None;
        }
        if kills < opts.kills && Instant::now() >= next_kill && pending.is_none() {
            let lsn = confirmed(&mut probe).unwrap_or(0);
            // Mid-stream while the writer still commits rows.
            kills_mid_stream += u32::from(!writer.is_finished());
            let victim = rng.gen_range(0..routers.children.len());
            let _ = routers.children[victim].kill();
            let _ = routers.children[victim].wait();
            kills += 1;
            tracing::info!(kills, "kill -9 of a router");
            routers.children[victim] = routers.spawn()?;
            pending = Some((Instant::now(), lsn));
            next_kill =
                Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let txs = writer
        .join()
        .map_err(|_| "the writer panicked".to_string())??;
    let written: u64 = probe
        .text(&format!("select count(*)::text from {table}"))
        .and_then(|t| t.parse().ok())
        .ok_or("counting the outbox rows")?;

    // Wait until every row is in Kafka (or the deadline), then judge.
    let topic = format!("{app}.Order");
    let want: HashSet<String> = (0..opts.rows).map(row_id).collect();
    let drain = Instant::now() + Duration::from_secs(300);
    let (counts, order_breaks) = loop {
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
    let elapsed = started.elapsed();
    let max = recoveries
        .iter()
        .map(Duration::as_secs_f64)
        .fold(0.0, f64::max);
    let mean = if recoveries.is_empty() {
        0.0
    } else {
        recoveries.iter().map(Duration::as_secs_f64).sum::<f64>() / recoveries.len() as f64
    };
    Ok(ScenarioReport {
        scenario: Scenario::OutboxCrash,
        records: opts.rows,
        lost,
        duplicated,
        dlt: 0,
        stalls,
        checks_ok: written == opts.rows && order_breaks == 0 && strangers == 0,
        extra: vec![
            ("router_kills".into(), kills.to_string()),
            ("kills_mid_stream".into(), kills_mid_stream.to_string()),
            (
                "postgres_restarts".into(),
                u32::from(pg_restarted.is_some()).to_string(),
            ),
            (
                "postgres_outage_s".into(),
                format!("{:.1}", pg_restarted.unwrap_or_default().as_secs_f64()),
            ),
            ("router_exits".into(), router_exits.to_string()),
            ("rows_in_table".into(), written.to_string()),
            ("sql_transactions".into(), txs.to_string()),
            ("order_breaks".into(), order_breaks.to_string()),
            ("recovery_max_s".into(), format!("{max:.1}")),
            ("recovery_mean_s".into(), format!("{mean:.1}")),
            ("elapsed_s".into(), format!("{:.1}", elapsed.as_secs_f64())),
        ],
    })
}

pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not after {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
