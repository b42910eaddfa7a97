//! eosflow's outbox router next to Debezium's embedded engine with the Outbox Event Router
//! (`benches/debezium-peer`), on the same Postgres and broker, in one run. For each router:
//!
//! - how fast a backlog of 200k rows written while it was down reaches a `read_committed`
//!   reader (start-up included, and from the first row to the last), and its peak memory;
//! - commit → `read_committed` visible latency of single-row transactions at a steady rate;
//! - the duplicates and losses after 10 `kill -9` of the router under a steady stream of writes.
//!
//! Not part of `make test` (`#[ignore]`, a few minutes); `make bench` runs it and puts its lines
//! in the report. Debezium stores its offsets every second here (`offset.flush.interval.ms`,
//! its default is a minute): the setting most favourable to it that production uses.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::Message;

use super::{count_by_id, support, Outbox, PG_RESTART};

/// The two routers measured.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Router {
    Eosflow,
    Debezium,
}

impl Router {
    fn name(self) -> &'static str {
        match self {
            Router::Eosflow => "eosflow",
            Router::Debezium => "Debezium embedded",
        }
    }

    /// For the test's unique names.
    fn slug(self) -> &'static str {
        match self {
            Router::Eosflow => "eosflow",
            Router::Debezium => "debezium",
        }
    }
}

/// Debezium stores its offsets (the LSN) this often.
const DEBEZIUM_OFFSET_FLUSH_MS: &str = "1000";

/// The Debezium peer's classpath (fetched from Maven Central and compiled once, cached).
fn debezium_classpath() -> String {
    let build = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benches/debezium-peer/build"
    );
    let out = Command::new(build)
        .stderr(Stdio::inherit())
        .output()
        .expect("run benches/debezium-peer/build");
    assert!(out.status.success(), "benches/debezium-peer/build failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Outbox {
    /// A migrated outbox for `router`, with its routed topic (`<app>.Order`, 4 partitions)
    /// created up front: Debezium's producer does not create topics.
    fn for_router(name: &str) -> Self {
        let o = Outbox::new(name);
        o.migrate();
        support::create_topics(&[&o.topic("Order")], 4);
        o
    }

    /// Starts `router` (its log goes to the test's log dir).
    fn spawn_router(&mut self, router: Router, classpath: &str) {
        match router {
            Router::Eosflow => self.spawn("cdc", &[("EOSFLOW_OUTBOX_BATCH_SIZE", "5000")]),
            Router::Debezium => {
                let n = self.routers.len();
                let log = std::fs::File::create(self.logs.join(format!("debezium-{n}.log")))
                    .expect("log");
                let child = Command::new("java")
                    .args(["-cp", classpath, "DebeziumPeer"])
                    .arg(support::bootstrap())
                    .arg(support::postgres_url())
                    .arg(format!("public.{}", self.table))
                    .arg(&self.slot)
                    .arg(&self.publication)
                    .arg(format!("{}.${{routedByValue}}", self.app))
                    .arg(self.logs.join("debezium.offsets"))
                    .arg(DEBEZIUM_OFFSET_FLUSH_MS)
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log)
                    .spawn()
                    .expect("spawn java (the Debezium peer)");
                self.routers.push(child);
            }
        }
    }

    /// Starts `router`, waits until it streams from the slot (creating the slot and the
    /// publication the first time), and stops it: rows written now wait in the slot.
    fn create_slot_with(&mut self, router: Router, classpath: &str) {
        self.spawn_router(router, classpath);
        self.wait_streaming();
        let last = self.routers.len() - 1;
        self.kill(last);
    }

    /// Inserts `rows` rows over 1000 aggregates (`aggregate_type` `Order`, ≈300 B payload) in
    /// transactions of 10 000.
    fn insert_backlog(&self, rows: usize) {
        for b in 0..rows.div_ceil(10_000) {
            let n = (rows - b * 10_000).min(10_000);
            self.pg.exec(&format!(
                "insert into {} (id, aggregate_type, aggregate_id, type, payload) \
                 select gen_random_uuid(), 'Order', 'agg-' || (i % 1000), 'Order.Changed', \
                        jsonb_build_object('n', {b} * 10000 + i, 'pad', repeat('x', 200)) \
                 from generate_series(0, {}) i",
                self.table,
                n - 1
            ));
        }
    }

    /// Commits one row of aggregate `agg` (`aggregate_type` `Order`); returns its id.
    fn insert_order(&self, agg: &str) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.pg.exec(&format!(
            "insert into {} (id, aggregate_type, aggregate_id, type, payload) \
             values ('{id}', 'Order', '{agg}', 'Order.Created', '{{}}'::jsonb)",
            self.table
        ));
        id
    }

    /// A `read_committed` consumer of the routed topic from `offset` (all 4 partitions).
    fn order_consumer(&self, offset: rdkafka::Offset) -> BaseConsumer {
        let consumer: BaseConsumer = support::clients()
            .config(eosflow::kafka::ClientRole::Reader)
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "10")
            .create()
            .expect("consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..4 {
            tpl.add_partition_offset(&self.topic("Order"), p, offset)
                .expect("partition");
        }
        consumer.assign(&tpl).expect("assign");
        consumer
    }
}

/// The `id` header of a routed record (both routers set it to the row's id).
fn id_of(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<String> {
    m.headers()
        .and_then(|h| h.iter().find(|h| h.key == "id"))
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Peak resident memory of a process, from `/proc/<pid>/status` (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// What one router's backlog drain measured.
struct Backlog {
    /// Rows per second from the router's start to the last row visible.
    with_start: f64,
    /// Rows per second from the first row visible to the last.
    steady: f64,
    /// The router's peak resident memory at the end.
    rss_mib: Option<f64>,
}

fn backlog(router: Router, classpath: &str, rows: usize) -> Backlog {
    let mut o = Outbox::for_router(&format!("dbz-backlog-{}", router.slug()));
    o.create_slot_with(router, classpath);
    o.insert_backlog(rows);
    let consumer = o.order_consumer(rdkafka::Offset::Beginning);
    let start = Instant::now();
    o.spawn_router(router, classpath);
    let mut ids: HashSet<String> = HashSet::with_capacity(rows);
    let mut first: Option<Instant> = None;
    let deadline = start + Duration::from_secs(600);
    while ids.len() < rows {
        assert!(
            Instant::now() < deadline,
            "{}: {} of {rows} rows after 10 minutes (logs in {})",
            router.name(),
            ids.len(),
            o.logs.display()
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(Instant::now);
            if let Some(id) = id_of(&m) {
                ids.insert(id);
            }
        }
    }
    let end = Instant::now();
    let last = o.routers.len() - 1;
    let rss_mib = peak_rss_mib(o.routers[last].id());
    let first = first.unwrap_or(start);
    Backlog {
        with_start: rows as f64 / end.duration_since(start).as_secs_f64(),
        steady: rows as f64 / end.duration_since(first).as_secs_f64().max(1e-3),
        rss_mib,
    }
}

/// p50 and p99 commit → `read_committed` latency (ms) of `n` single-row transactions, 10 ms
/// apart.
fn latency(router: Router, classpath: &str, n: usize) -> (f64, f64) {
    let mut o = Outbox::for_router(&format!("dbz-latency-{}", router.slug()));
    o.spawn_router(router, classpath);
    o.wait_streaming();
    // The first row (connections, metadata) is not measured.
    let warm = o.insert_order("w");
    o.wait_for_ids(&["Order"], &HashSet::from([warm]), Duration::from_secs(120));
    let consumer = o.order_consumer(rdkafka::Offset::End);
    let reader = std::thread::spawn(move || {
        let mut arrived: HashMap<String, Instant> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(90);
        while arrived.len() < n && Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                if let Some(id) = id_of(&m) {
                    arrived.insert(id, Instant::now());
                }
            }
        }
        arrived
    });
    // Wait on the assignment's first fetch: a row committed before it would be missed.
    std::thread::sleep(Duration::from_secs(1));
    let mut committed: HashMap<String, Instant> = HashMap::new();
    for i in 0..n {
        let id = o.insert_order(&format!("a-{}", i % 20));
        committed.insert(id, Instant::now());
        std::thread::sleep(Duration::from_millis(10));
    }
    let arrived = reader.join().expect("reader");
    assert_eq!(arrived.len(), n, "{}: every row arrived", router.name());
    let mut lat: Vec<f64> = committed
        .iter()
        .map(|(id, t)| arrived[id].saturating_duration_since(*t).as_secs_f64() * 1000.0)
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    (p(0.5), p(0.99))
}

/// Duplicates and losses after `kills` `kill -9` of the router while a writer commits `rows`
/// rows in transactions of 1–100 rows.
fn kills(router: Router, classpath: &str, rows: usize, kills: usize) -> (usize, usize) {
    use rand::Rng;
    let mut o = Outbox::for_router(&format!("dbz-kills-{}", router.slug()));
    o.spawn_router(router, classpath);
    o.wait_streaming();
    let table = o.table.clone();
    let writer = std::thread::spawn(move || {
        let pg = super::Pg::connect();
        let mut done = 0usize;
        let mut n = 0u64;
        while done < rows {
            n += 1;
            let size = ((n * 7919) % 100 + 1).min((rows - done) as u64) as usize;
            pg.exec(&format!(
                "insert into {table} (id, aggregate_type, aggregate_id, type, payload) \
                 select gen_random_uuid(), 'Order', 'agg-' || ((i + {done}) % 200), \
                        'Order.Changed', jsonb_build_object('n', i + {done}) \
                 from generate_series(0, {}) i",
                size - 1
            ));
            done += size;
            std::thread::sleep(Duration::from_millis(60));
        }
    });
    let mut rng = rand::thread_rng();
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < kills || !writer.is_finished() {
        assert!(Instant::now() < deadline, "{}: kill loop", router.name());
        o.wait_streaming();
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..2000)));
        let last = o.routers.len() - 1;
        o.kill(last);
        done += 1;
        o.spawn_router(router, classpath);
    }
    writer.join().expect("writer");
    let all = o.all_ids();
    assert_eq!(all.len(), rows);
    let seen = o.wait_for_ids(&["Order"], &all, Duration::from_secs(300));
    let counts = count_by_id(&seen);
    let duplicates = seen.len() - counts.len();
    let missing = all.iter().filter(|id| !counts.contains_key(*id)).count();
    (duplicates, missing)
}

/// `make bench`: `cargo test --test outbox -- --ignored --nocapture debezium`
#[test]
#[ignore]
fn debezium_comparison() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let classpath = debezium_classpath();
    const BACKLOG: usize = 200_000;
    const LATENCY_ROWS: usize = 300;
    const KILL_ROWS: usize = 20_000;
    const KILLS: usize = 10;
    let routers = [Router::Eosflow, Router::Debezium];
    let drained: Vec<Backlog> = routers
        .iter()
        .map(|&r| backlog(r, &classpath, BACKLOG))
        .collect();
    let latencies: Vec<(f64, f64)> = routers
        .iter()
        .map(|&r| latency(r, &classpath, LATENCY_ROWS))
        .collect();
    let crashes: Vec<(usize, usize)> = routers
        .iter()
        .map(|&r| kills(r, &classpath, KILL_ROWS, KILLS))
        .collect();
    for (i, r) in routers.iter().enumerate() {
        let b = &drained[i];
        eprintln!(
            "vs Debezium: {}: backlog of {BACKLOG} rows drained at {:.0} rows/s (start-up included), \
             {:.0} rows/s first row to last; peak RSS {}",
            r.name(),
            b.with_start,
            b.steady,
            b.rss_mib
                .map_or("unknown".to_string(), |m| format!("{m:.0} MiB"))
        );
        eprintln!(
            "vs Debezium: {}: commit→read_committed latency over {LATENCY_ROWS} single-row \
             transactions: p50 {:.0} ms, p99 {:.0} ms",
            r.name(),
            latencies[i].0,
            latencies[i].1
        );
        eprintln!(
            "vs Debezium: {}: after {KILLS} kill -9 of the router under {KILL_ROWS} rows: {} \
             duplicates, {} missing",
            r.name(),
            crashes[i].0,
            crashes[i].1
        );
    }
    eprintln!(
        "vs Debezium: backlog drain ratio eosflow / Debezium embedded = {:.2} (start-up included), \
         {:.2} (first row to last)",
        drained[0].with_start / drained[1].with_start,
        drained[0].steady / drained[1].steady
    );
    for (i, r) in routers.iter().enumerate() {
        assert_eq!(crashes[i].1, 0, "{}: rows lost across kill -9", r.name());
    }
    assert_eq!(
        crashes[0].0, 0,
        "eosflow published rows twice across kill -9"
    );
}
