//! The `outbox-oversize` scenario: a normal outbox workload on the configured Postgres with
//! rows the router cannot write mixed in — payloads far over, just over and just under the
//! producer's `message.max.bytes`, and rows routed to a topic Kafka refuses to create — while
//! the CDC router is `kill -9`ed. Every good row (the just-under ones included) must reach its
//! routed topic exactly once in per-aggregate commit order (`read_committed`), and every bad
//! row the outbox's dead-letter topic exactly once with the reason that names its cause.
//!
//! Before the fix of issue #17 the first bad row blocked the outbox for good: the router
//! aborted, reconnected and replayed it forever, and nothing after it was published.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::message::Headers;
use rdkafka::Message;

use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::KafkaClients;
use eosflow_outbox::publish::DEFAULT_MESSAGE_MAX_BYTES;

/// Shape of an outbox-oversize run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Outbox rows written (good and bad).
    pub rows: u64,
    /// One row in `bad_every` is a bad (or just-under) one, cycling through the kinds of bad row.
    pub bad_every: u64,
    /// kill -9s of the router, spread over the writing.
    pub kills: u32,
    /// How long writing the rows takes.
    pub duration: Duration,
}

impl Options {
    /// The `make test` version: a few seconds of writing, two kills.
    pub fn short() -> Self {
        Self {
            rows: 2_000,
            bad_every: 100,
            kills: 2,
            duration: Duration::from_secs(6),
        }
    }

    /// The long version: 40 000 rows (200 of them at or over the limit), 10 kills.
    pub fn long() -> Self {
        Self {
            rows: 40_000,
            bad_every: 200,
            kills: 10,
            duration: Duration::from_secs(90),
        }
    }
}

/// What row `i` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A small event.
    Good,
    /// About 1.2× the limit.
    Oversize,
    /// A few hundred bytes over the limit.
    JustOver,
    /// A few hundred bytes under the limit: must be routed like any other.
    JustUnder,
    /// Routed to `<app>.Bad.X`, which collides with an existing `<app>.Bad_X`.
    Unwritable,
}

impl Kind {
    fn of(i: u64, every: u64) -> Self {
        if i % every != every / 2 {
            return Kind::Good;
        }
        match (i / every) % 4 {
            0 => Kind::Oversize,
            1 => Kind::JustOver,
            2 => Kind::JustUnder,
            _ => Kind::Unwritable,
        }
    }

    /// The start of the dead letter's reason, or `None` for a row that must be routed.
    fn reason(self) -> Option<&'static str> {
        match self {
            Kind::Good | Kind::JustUnder => None,
            Kind::Oversize | Kind::JustOver => Some("oversize: "),
            Kind::Unwritable => Some("unwritable: cannot create topic"),
        }
    }

    /// SQL of the row's `(id, aggregate_type, aggregate_id, type, payload)`; `pad` is the
    /// payload padding that puts a limit-sized row where it belongs.
    fn values(self, i: u64, aggregates: u64, limit: usize) -> String {
        let (route, pad) = match self {
            Kind::Good => ("null", 0),
            Kind::Oversize => ("null", limit + limit / 5),
            Kind::JustOver => ("null", limit + 300),
            Kind::JustUnder => ("null", limit - 700),
            Kind::Unwritable => ("'Bad.X'", 0),
        };
        format!(
            "('{}'::uuid, {route}, 'agg-{}', 'Order.Changed', \
             jsonb_build_object('n', {i}, 'pad', repeat('x', {pad})))",
            row_id(i),
            i % aggregates
        )
    }
}

/// The id of row `i`.
fn row_id(i: u64) -> String {
    format!("00000000-0000-4000-9000-{i:012}")
}

/// Aggregates the rows are spread over.
const AGGREGATES: u64 = 50;

/// One record as the checks need it.
struct Got {
    id: String,
    key: String,
    n: i64,
    reason: Option<String>,
    original_topic: Option<String>,
}

/// Every committed record of `topic`, in offset order.
fn read(clients: &KafkaClients, topic: &str) -> Result<Vec<Got>, String> {
    let mut out = vec![];
    read_all(clients, topic, Duration::from_secs(60), |m| {
        let header = |name: &str| {
            m.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == name)
                    .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
            })
        };
        // A dead letter's payload is cut to a prefix: its `n` is read from the text.
        let text = m
            .payload()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let n = text
            .strip_prefix("{\"n\": ")
            .and_then(|t| t.split([',', '}']).next())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(-1);
        out.push(Got {
            id: header("id").unwrap_or_default(),
            key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
            n,
            reason: header("eosflow.dlt.reason"),
            original_topic: header("eosflow.dlt.original.topic"),
        });
        Ok(())
    })
    .map_err(|e| format!("reading {topic}: {e}"))?;
    Ok(out)
}

/// The router process and how it is started.
struct Router {
    cmd_env: Vec<(String, String)>,
    exe: std::path::PathBuf,
    logs: std::path::PathBuf,
    started: u32,
    child: Option<Child>,
}

impl Router {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("outbox").stdin(Stdio::null());
        for (k, v) in &self.cmd_env {
            cmd.env(k, v);
        }
        cmd
    }

    fn start(&mut self) -> Result<(), String> {
        let path = self.logs.join(format!("router-{}.log", self.started));
        self.started += 1;
        let log = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        self.child = Some(
            self.command()
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("starting the router: {e}"))?,
        );
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the router stopped by itself (it must not: bad rows are not a reason to stop).
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the scenario against the configured Kafka and Postgres (rows in a fresh table).
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app = format!("outbox-oversize-{run_id}");
    let table = format!("oversize_{run_id}_outbox");
    let slot = format!("{table}_slot");
    let logs = env.work_dir.join(&app);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let limit = config
        .kafka
        .properties
        .get("message.max.bytes")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES);
    // `<app>.Bad.X` cannot be created while this one exists (the names collide).
    eosflow::kafka::topics::apply_blocking(
        &clients,
        &[eosflow::kafka::topics::TopicSpec::new(
            format!("{app}.Bad_X"),
            1,
            "delete",
        )],
        Duration::from_secs(30),
    )
    .map_err(|e| format!("creating the colliding topic: {e}"))?;
    let mut router = Router {
        cmd_env: [
            ("RUST_LOG", "info,rdkafka=warn".to_string()),
            ("EOSFLOW_APP_ID", app.clone()),
            ("EOSFLOW_KAFKA_BOOTSTRAP", config.kafka.bootstrap.clone()),
            (
                "EOSFLOW_POSTGRES_URL",
                config.postgres.url.expose().to_string(),
            ),
            ("EOSFLOW_OUTBOX_MODE", "cdc".into()),
            ("EOSFLOW_OUTBOX_TABLE", table.clone()),
            ("EOSFLOW_OUTBOX_SLOT", slot.clone()),
            ("EOSFLOW_OUTBOX_PUBLICATION", format!("{table}_pub")),
            (
                "EOSFLOW_OUTBOX_TOPIC_TEMPLATE",
                format!("{app}.${{routedByValue}}"),
            ),
            ("EOSFLOW_OUTBOX_COMMIT_INTERVAL_MS", "50".into()),
            ("EOSFLOW_OUTBOX_STATUS_INTERVAL_MS", "200".into()),
            ("EOSFLOW_OUTBOX_HEARTBEAT_INTERVAL_MS", "500".into()),
            ("EOSFLOW_METRICS_LISTEN", String::new()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        exe: env.exe.clone(),
        logs: logs.clone(),
        started: 0,
        child: None,
    };
    let migrated = router
        .command()
        .arg("migrate")
        .output()
        .map_err(|e| format!("eosflow outbox migrate: {e}"))?;
    if !migrated.status.success() {
        return Err(format!(
            "eosflow outbox migrate: {}",
            String::from_utf8_lossy(&migrated.stderr)
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let pg = rt
        .block_on(eosflow_outbox::connect(config.postgres.url.expose()))
        .map_err(|e| e.to_string())?;
    let text = |sql: &str| -> Option<String> {
        rt.block_on(pg.query_opt(sql, &[]))
            .ok()
            .flatten()
            .and_then(|r| r.get::<_, Option<String>>(0))
    };
    router.start()?;
    let streaming = eosflow_outbox::cdc::streaming_sql(&slot);
    wait(Duration::from_secs(60), || text(&streaming).is_some()).map_err(|_| {
        format!(
            "the router did not stream within 60 s; logs in {}",
            logs.display()
        )
    })?;

    // Write in SQL transactions of 1..=40 rows at the pace of `duration`; kill the router at
    // evenly spread points, restarting it at once.
    let mut done = 0u64;
    let mut txs = 0u64;
    let mut kills = 0u32;
    let mut kills_mid_stream = 0u32;
    let mut router_exits = 0u32;
    while done < opts.rows {
        let size = ((txs * 7919) % 40 + 1).min(opts.rows - done);
        let values: Vec<String> = (done..done + size)
            .map(|i| Kind::of(i, opts.bad_every).values(i, AGGREGATES, limit))
            .collect();
        rt.block_on(pg.batch_execute(&format!(
            "insert into {table} (id, aggregate_type, aggregate_id, type, payload) values {}",
            values.join(", ")
        )))
        .map_err(|e| format!("writing rows: {e}"))?;
        done += size;
        txs += 1;
        // Kill k of n is due once k/(n+1) of the rows are written.
        let due = (u64::from(opts.kills + 1) * done / opts.rows) as u32;
        if kills < opts.kills && kills < due {
            router.kill();
            kills += 1;
            kills_mid_stream += u32::from(done < opts.rows);
            tracing::info!(kills, done, "kill -9 of the router");
            router.start()?;
        }
        if router.exited() {
            router_exits += 1;
            router.start()?;
        }
        let target = opts.duration.mul_f64(done as f64 / opts.rows as f64);
        if let Some(rest) = target.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
    }

    // Drain: until the slot confirms past the last row (nothing pinned) or the deadline.
    let end = text("select pg_current_wal_lsn()::text")
        .and_then(|t| eosflow_outbox::publish::parse_lsn(&t))
        .unwrap_or(u64::MAX);
    let confirmed = format!(
        "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = '{slot}'"
    );
    let drained = wait(Duration::from_secs(300), || {
        if router.exited() {
            router_exits += 1;
            let _ = router.start();
        }
        text(&confirmed)
            .and_then(|t| eosflow_outbox::publish::parse_lsn(&t))
            .is_some_and(|c| c >= end)
    })
    .is_ok();
    router.kill();

    // Judge: each good row once in the routed topic, each bad row once in the DLT.
    let routed = read(&clients, &format!("{app}.Order"))?;
    let dead = read(&clients, &eosflow_outbox::dlt_topic(&app))?;
    let mut order_breaks = 0u64;
    let mut last: HashMap<&str, i64> = HashMap::new();
    for g in &routed {
        if last.insert(&g.key, g.n).is_some_and(|prev| prev >= g.n) {
            order_breaks += 1;
        }
    }
    let mut routed_n: HashMap<&str, u64> = HashMap::new();
    for g in &routed {
        *routed_n.entry(&g.id).or_default() += 1;
    }
    let mut dead_n: HashMap<&str, (u64, &Got)> = HashMap::new();
    for g in &dead {
        dead_n.entry(&g.id).or_insert((0, g)).0 += 1;
    }
    let (mut lost, mut duplicated, mut wrong_reasons, mut misplaced) = (0u64, 0u64, 0u64, 0u64);
    let mut bad_rows = 0u64;
    let routed_topic = format!("{app}.Order");
    let bad_topic = format!("{app}.Bad.X");
    for i in 0..opts.rows {
        let id = row_id(i);
        let kind = Kind::of(i, opts.bad_every);
        let (here, elsewhere) = match kind.reason() {
            None => (
                routed_n.get(id.as_str()).copied().unwrap_or(0),
                dead_n.contains_key(id.as_str()),
            ),
            Some(reason) => {
                bad_rows += 1;
                let entry = dead_n.get(id.as_str());
                let want_topic = if kind == Kind::Unwritable {
                    &bad_topic
                } else {
                    &routed_topic
                };
                if let Some((_, g)) = entry {
                    let right = g.reason.as_deref().is_some_and(|r| r.starts_with(reason))
                        && g.original_topic.as_ref() == Some(want_topic)
                        && g.n == i as i64;
                    wrong_reasons += u64::from(!right);
                }
                (entry.map_or(0, |e| e.0), routed_n.contains_key(id.as_str()))
            }
        };
        match here {
            0 => lost += 1,
            n => duplicated += n - 1,
        }
        misplaced += u64::from(elsewhere);
    }
    let elapsed = started.elapsed();
    let stalls = u32::from(!drained);
    // The slot goes, or it pins WAL on the shared Postgres (its walsender may lag the kill).
    let _ = wait(Duration::from_secs(20), || {
        let _ = rt.block_on(pg.batch_execute(&eosflow_outbox::cdc::drop_released_slot_sql(&slot)));
        text(&format!(
            "select 'x' from pg_replication_slots where slot_name = '{slot}'"
        ))
        .is_none()
    });
    let _ = rt.block_on(pg.batch_execute(&format!(
        "drop publication if exists {table}_pub; drop table if exists {table}"
    )));
    Ok(ScenarioReport {
        scenario: Scenario::OutboxOversize,
        records: opts.rows,
        lost,
        duplicated,
        dlt: dead.len() as u64,
        stalls,
        checks_ok: order_breaks == 0
            && wrong_reasons == 0
            && misplaced == 0
            && router_exits == 0
            && dead.len() as u64 == bad_rows
            && routed.len() as u64 == opts.rows - bad_rows,
        extra: vec![
            ("bad_rows".into(), bad_rows.to_string()),
            ("limit_bytes".into(), limit.to_string()),
            ("router_kills".into(), kills.to_string()),
            ("kills_mid_stream".into(), kills_mid_stream.to_string()),
            ("router_exits".into(), router_exits.to_string()),
            ("sql_transactions".into(), txs.to_string()),
            ("order_breaks".into(), order_breaks.to_string()),
            ("wrong_reasons".into(), wrong_reasons.to_string()),
            ("misplaced".into(), misplaced.to_string()),
            ("elapsed_s".into(), format!("{:.1}", elapsed.as_secs_f64())),
        ],
    })
}

/// Polls `f` every 200 ms until it holds or `timeout` passes.
fn wait(timeout: Duration, mut f: impl FnMut() -> bool) -> Result<(), ()> {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
