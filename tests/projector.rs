//! Exactly-once projections into Postgres (issue 51) on the real broker and the stack's
//! Postgres: projectors killed with `kill -9` mid-stream while the input is still being
//! written, and the tables equal the fold of the workload — sums and counts per account, and an
//! append table where a record applied twice would show as a second row.
//!
//! The killed projectors are this test binary re-executed in child mode
//! (`PROJECTOR_CHILD=<name>`, see [`child_instance`]).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eosflow::projection::{Projected, Projector, ProjectorOptions, RowOp, Value};
use eosflow::record::{ProcessError, Record};
use rdkafka::producer::BaseRecord;

const CHILD: &str = "PROJECTOR_CHILD";
const PARTITIONS: i32 = 4;
const ACCOUNTS: usize = 40;

/// Table and topic names of one run, from a name Postgres accepts as an identifier.
struct Names {
    name: String,
    topic: String,
    balances: String,
    events: String,
}

impl Names {
    fn of(name: &str) -> Self {
        Self {
            name: name.to_string(),
            topic: format!("{name}.events"),
            balances: format!("{name}_balances"),
            events: format!("{name}_events"),
        }
    }
}

/// What record `seq` is: `Some(amount)` for a valid event, `None` for a value the projection
/// function rejects (not a number). Amount 13 passes the function but breaks a CHECK
/// constraint in Postgres.
fn amount_of(seq: usize) -> Option<i64> {
    if seq % 97 == 5 {
        None
    } else if seq % 89 == 7 {
        Some(13)
    } else {
        Some((seq % 11) as i64 - 3)
    }
}

fn payload(seq: usize) -> String {
    match amount_of(seq) {
        Some(a) => format!("{seq} {a}"),
        None => format!("{seq} not-a-number"),
    }
}

/// The projection: each event adds its amount to its account's balance and appends a row.
fn project(names: &Names) -> impl Fn(&Record<'_>) -> Result<Projected, ProcessError> {
    let (balances, events) = (names.balances.clone(), names.events.clone());
    move |r: &Record<'_>| {
        let account = std::str::from_utf8(r.key.unwrap_or_default())
            .map_err(ProcessError::permanent)?
            .to_string();
        let text =
            std::str::from_utf8(r.value.unwrap_or_default()).map_err(ProcessError::permanent)?;
        let mut parts = text.split(' ');
        let seq: i64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ProcessError::permanent(format!("no sequence number in {text:?}")))?;
        let amount: i64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ProcessError::permanent(format!("no amount in {text:?}")))?;
        Ok(Projected::ops(vec![
            RowOp::Sql {
                statement: format!(
                    "INSERT INTO {balances} AS b (account, total, n) VALUES ($1, $2, 1) \
                     ON CONFLICT (account) DO UPDATE SET total = b.total + $2, n = b.n + 1"
                ),
                params: vec![Value::from(account.as_str()), Value::Int(amount)],
            },
            RowOp::Insert {
                table: events.clone(),
                columns: vec![
                    ("seq".into(), Value::Int(seq)),
                    ("account".into(), Value::from(account.as_str())),
                    ("amount".into(), Value::Int(amount)),
                ],
            },
        ]))
    }
}

fn options(names: &Names) -> ProjectorOptions {
    let mut o = ProjectorOptions::new(&names.name, &[&names.topic], &support::postgres_url());
    // Small batches, so every kill lands between two commits and mid-stream.
    o.max_batch_records = 40;
    o.session_timeout = Duration::from_secs(6);
    o
}

/// Child mode: one projector, until killed.
#[test]
fn child_instance() {
    let Ok(name) = std::env::var(CHILD) else {
        return;
    };
    eosflow::init_logging();
    let names = Names::of(&name);
    let handle = Projector::start(support::clients(), options(&names), project(&names))
        .expect("projector starts");
    loop {
        assert!(!handle.is_finished(), "the projector loop ended by itself");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pg() -> (tokio::runtime::Runtime, tokio_postgres::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(async {
        let (client, conn) =
            tokio_postgres::connect(&support::postgres_url(), tokio_postgres::NoTls)
                .await
                .expect("connecting to the stack's Postgres");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    });
    (rt, client)
}

/// Rows of the append table, and the partitions' committed positions summed.
fn progress(rt: &tokio::runtime::Runtime, c: &tokio_postgres::Client, names: &Names) -> (i64, i64) {
    rt.block_on(async {
        let rows: i64 = c
            .query_one(&format!("SELECT count(*) FROM {}", names.events), &[])
            .await
            .expect("count")
            .get(0);
        let pos: Option<i64> = c
            .query_one(
                "SELECT sum(next_offset)::bigint FROM eosflow_offsets WHERE projection = $1",
                &[&names.name],
            )
            .await
            .ok()
            .and_then(|r| r.get(0));
        (rows, pos.unwrap_or(0))
    })
}

/// Each partition's stored next offset.
fn positions(
    rt: &tokio::runtime::Runtime,
    c: &tokio_postgres::Client,
    names: &Names,
) -> BTreeMap<i32, i64> {
    rt.block_on(c.query(
        "SELECT partition, next_offset FROM eosflow_offsets WHERE projection = $1 AND next_offset IS NOT NULL",
        &[&names.name],
    ))
    .expect("positions")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Freezes `instance` (SIGSTOP) — maybe mid-transaction, holding its partitions' offset rows —
/// until every partition with records left has moved on without it, then resumes it: a zombie
/// whose partitions moved. Postgres ends its idle transaction, the group reassigns its
/// partitions, the new owners' claims fence it.
fn zombie(
    rt: &tokio::runtime::Runtime,
    c: &tokio_postgres::Client,
    names: &Names,
    instance: &support::pipeline::Running,
) {
    let pid = instance.id().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    let before = positions(rt, c, names);
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, support::written_partition(&names.topic, p)))
        .collect();
    signal("-STOP");
    let frozen = std::time::Instant::now();
    support::wait_for(
        "every partition with records left to move on while one projector is frozen",
        Duration::from_secs(90),
        || {
            let now = positions(rt, c, names);
            ends.iter()
                .all(|(p, end)| {
                    let was = before.get(p).copied().unwrap_or(0);
                    was >= *end || now.get(p).is_some_and(|n| *n > was)
                })
                .then_some(())
        },
    );
    eprintln!(
        "zombie: every partition moved on {:?} after the SIGSTOP",
        frozen.elapsed()
    );
    signal("-CONT");
}

/// Produces records `range` (account = seq % ACCOUNTS), `per_tick` every 20 ms.
fn produce(topic: &str, range: std::ops::Range<usize>, per_tick: usize) {
    let producer = support::test_producer();
    for (i, seq) in range.enumerate() {
        let key = format!("acct-{}", seq % ACCOUNTS);
        let value = payload(seq);
        support::send_waiting(&producer, BaseRecord::to(topic).key(&key).payload(&value));
        if per_tick > 0 && i % per_tick == per_tick - 1 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");
}

#[test]
fn projectors_killed_mid_stream_leave_every_valid_record_applied_exactly_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let name = support::unique("proj").replace('-', "_");
    let names = Names::of(&name);
    let dlt = format!("{}.DLT", names.topic);
    support::create_topics(&[&names.topic, &dlt], PARTITIONS);
    let (rt, pg) = pg();
    rt.block_on(pg.batch_execute(&format!(
        "CREATE TABLE {b} (account text PRIMARY KEY, total bigint NOT NULL, n bigint NOT NULL);
         CREATE TABLE {e} (seq bigint NOT NULL, account text NOT NULL,
                           amount bigint NOT NULL CHECK (amount <> 13));",
        b = names.balances,
        e = names.events
    )))
    .expect("tables");

    // A backlog before any projector starts, then a paced stream while they are killed.
    const BACKLOG: usize = 3_000;
    const TOTAL: usize = 12_000;
    produce(&names.topic, 0..BACKLOG, 0);
    let producing = Arc::new(AtomicBool::new(true));
    let streamer = {
        let (topic, producing) = (names.topic.clone(), producing.clone());
        std::thread::spawn(move || {
            produce(&topic, BACKLOG..TOTAL, 25);
            producing.store(false, Ordering::Relaxed);
        })
    };

    let spawn = || support::spawn_child(CHILD, &name);
    let mut instances: Vec<support::pipeline::Running> = (0..3).map(|_| spawn()).collect();
    support::wait_for(
        "the first rows in Postgres",
        Duration::from_secs(90),
        || (progress(&rt, &pg, &names).0 > 0).then_some(()),
    );

    // Kills while the stream is still being written: each one asserted mid-stream (records
    // left to apply) and after progress since the one before.
    const KILLS: usize = 8;
    let mut kills = 0;
    let mut last_rows = progress(&rt, &pg, &names).0;
    let mut mid_stream = 0;
    while kills < KILLS {
        support::wait_for(
            "progress since the last kill",
            Duration::from_secs(90),
            || {
                let (rows, _) = progress(&rt, &pg, &names);
                (rows > last_rows).then_some(())
            },
        );
        let victim = kills % instances.len();
        if kills == KILLS / 2 {
            zombie(&rt, &pg, &names, &instances[victim]);
        }
        let (rows, positions) = progress(&rt, &pg, &names);
        let written = support::written(&names.topic, PARTITIONS);
        if positions < written {
            mid_stream += 1;
        }
        instances[victim].kill().expect("kill -9");
        let _ = instances[victim].wait();
        instances[victim] = spawn();
        last_rows = rows;
        kills += 1;
        eprintln!("kill {kills}: {rows} rows, positions {positions} of {written} written");
    }
    assert_eq!(
        mid_stream, KILLS,
        "every kill landed with records still to apply"
    );
    streamer.join().expect("producer thread");
    assert!(!producing.load(Ordering::Relaxed));

    // Drained: the stored positions reach the topic's end.
    let written = support::written(&names.topic, PARTITIONS);
    support::wait_for(
        "the projection to reach the input's end",
        Duration::from_secs(120),
        || (progress(&rt, &pg, &names).1 >= written).then_some(()),
    );
    drop(instances);

    // The expected tables, from the workload alone.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut valid = 0i64;
    let mut rejected = 0usize;
    for seq in 0..TOTAL {
        match amount_of(seq) {
            Some(13) | None => rejected += 1,
            Some(a) => {
                valid += 1;
                let e = expected
                    .entry(format!("acct-{}", seq % ACCOUNTS))
                    .or_default();
                e.0 += a;
                e.1 += 1;
            }
        }
    }
    let (rows, dupes, balances) = rt.block_on(async {
        let rows: i64 = pg
            .query_one(&format!("SELECT count(*) FROM {}", names.events), &[])
            .await
            .expect("count")
            .get(0);
        let dupes: i64 = pg
            .query_one(
                &format!(
                    "SELECT count(*) - count(DISTINCT seq) FROM {}",
                    names.events
                ),
                &[],
            )
            .await
            .expect("dupes")
            .get(0);
        let balances: BTreeMap<String, (i64, i64)> = pg
            .query(
                &format!("SELECT account, total, n FROM {}", names.balances),
                &[],
            )
            .await
            .expect("balances")
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect();
        (rows, dupes, balances)
    });
    assert_eq!(dupes, 0, "no event applied twice");
    assert_eq!(rows, valid, "every valid event applied once");
    assert_eq!(balances, expected, "balances equal the workload's fold");

    // Every rejected record reached the DLT with its reason (at least once: a record the
    // function rejects is published before the commit that passes it).
    let dead: BTreeMap<String, String> = support::read_payloads(&dlt)
        .into_iter()
        .map(|(_, v)| {
            let text = String::from_utf8_lossy(&v).to_string();
            (text.split(' ').next().unwrap_or_default().to_string(), text)
        })
        .collect();
    assert_eq!(dead.len(), rejected, "each rejected record dead-lettered");
    let left = rt.block_on(async {
        pg.query_one(
            "SELECT count(*) FROM eosflow_dead_letters WHERE projection = $1 AND sqlstate = '23514'",
            &[&names.name],
        )
        .await
        .expect("dead letters")
        .get::<_, i64>(0)
    });
    let constraint = (0..TOTAL).filter(|s| amount_of(*s) == Some(13)).count();
    assert_eq!(
        left as usize, constraint,
        "the constraint failures kept in Postgres"
    );
}

/// `eosflow project`, the built-in JSON upsert projection, as a process: killed twice while it
/// works through a backlog with updates and deletes, its table ends as the workload's last
/// value per key, and the one value that is not JSON is on the DLT.
#[test]
fn eosflow_project_upserts_json_by_key_through_kills() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let name = support::unique("projcli").replace('-', "_");
    let topic = format!("{name}.customers");
    let dlt = format!("{topic}.DLT");
    let table = format!("{name}_view");
    support::create_topics(&[&topic, &dlt], 2);
    let (rt, pg) = pg();
    rt.block_on(pg.batch_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, doc jsonb NOT NULL)"
    )))
    .expect("table");

    // 300 keys, 8 000 records: updates, every 7th record a delete, one value not JSON.
    const RECORDS: usize = 8_000;
    let mut last: BTreeMap<String, Option<i64>> = BTreeMap::new();
    let producer = support::test_producer();
    for seq in 0..RECORDS {
        let key = format!("c{}", (seq * 7919) % 300);
        let r = BaseRecord::to(&topic).key(&key);
        if seq == 4_321 {
            support::send_waiting(&producer, r.payload("{not json"));
        } else if seq % 7 == 3 {
            support::send_waiting(&producer, r);
            last.insert(key, None);
        } else {
            let v = format!("{{\"seq\": {seq}}}");
            support::send_waiting(&producer, r.payload(&v));
            last.insert(key, Some(seq as i64));
        }
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");

    let start = || {
        support::pipeline::Running(
            std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
                .args([
                    "project", "--name", &name, "--topics", &topic, "--table", &table,
                ])
                .args([
                    "--max-batch-records",
                    "10",
                    "--postgres-url",
                    &support::postgres_url(),
                ])
                .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("eosflow project"),
        )
    };
    let positions = |rt: &tokio::runtime::Runtime| -> i64 {
        rt.block_on(pg.query_one(
            "SELECT coalesce(sum(next_offset), 0)::bigint FROM eosflow_offsets WHERE projection = $1",
            &[&name],
        ))
        .map(|r| r.get(0))
        .unwrap_or(0)
    };
    let mut running = start();
    for kill in 0..2 {
        let before = positions(&rt);
        support::wait_for("progress before the kill", Duration::from_secs(90), || {
            (positions(&rt) > before).then_some(())
        });
        let at = positions(&rt);
        assert!(
            at < RECORDS as i64,
            "kill {kill} landed mid-backlog ({at} of {RECORDS})"
        );
        running.kill().expect("kill -9");
        let _ = running.wait();
        running = start();
    }
    support::wait_for(
        "the whole backlog applied",
        Duration::from_secs(120),
        || (positions(&rt) >= RECORDS as i64).then_some(()),
    );
    drop(running);

    let rows: BTreeMap<String, i64> = rt
        .block_on(pg.query(
            &format!("SELECT key, (doc->>'seq')::bigint FROM {table}"),
            &[],
        ))
        .expect("rows")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: BTreeMap<String, i64> = last
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    assert_eq!(rows, expected, "the table is the last value per key");
    let dead = support::read_payloads(&dlt);
    assert!(
        !dead.is_empty() && dead.iter().all(|(_, v)| v.as_slice() == b"{not json"),
        "the value that is not JSON is on the DLT: {dead:?}"
    );
}

/// A record the function rejects whose dead letter is over the producer's limit (a value the
/// broker took, plus the `eosflow.dlt.*` headers): it reaches the DLT cut down to a truncated
/// copy, as the runtime's dead letters are, and the partition moves on. (Before, the failed
/// publish failed the batch, which was tried again for ever.)
#[test]
fn a_rejected_record_too_large_for_its_dead_letter_reaches_the_dlt_truncated() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let name = support::unique("projbig").replace('-', "_");
    let names = Names::of(&name);
    let dlt = format!("{}.DLT", names.topic);
    support::create_topics(&[&names.topic, &dlt], 1);
    let (rt, pg) = pg();
    rt.block_on(pg.batch_execute(&format!(
        "CREATE TABLE {b} (account text PRIMARY KEY, total bigint NOT NULL, n bigint NOT NULL);
         CREATE TABLE {e} (seq bigint NOT NULL, account text NOT NULL,
                           amount bigint NOT NULL CHECK (amount <> 13));",
        b = names.balances,
        e = names.events
    )))
    .expect("tables");
    let producer: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
        support::clients()
            .config(eosflow::kafka::ClientRole::Idempotent)
            .set("message.max.bytes", "1048588")
            .create()
            .expect("producer");
    let big = vec![b'x'; 1_040_000];
    for seq in 0..20usize {
        let key = format!("acct-{}", seq % 3);
        let value = if seq == 10 {
            big.clone()
        } else {
            format!("{seq} 1").into_bytes()
        };
        support::send_waiting(
            &producer,
            BaseRecord::to(&names.topic).key(&key).payload(&value),
        );
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");

    let handle = Projector::start(support::clients(), options(&names), project(&names))
        .expect("projector starts");
    support::wait_for(
        "the partition past the big record",
        Duration::from_secs(60),
        || (progress(&rt, &pg, &names).1 >= 20).then_some(()),
    );
    let summary = handle.stop().expect("stops");
    assert_eq!(summary.dead_lettered, 1, "{summary:?}");
    assert_eq!(
        progress(&rt, &pg, &names).0,
        19,
        "every other record applied"
    );
    let mut letters = Vec::new();
    eosflow::internals::kafka::reader::read_all(
        &support::clients(),
        &dlt,
        Duration::from_secs(30),
        |m| {
            use rdkafka::message::{Headers as _, Message as _};
            let truncated_from = m.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == eosflow::internals::retry::dlt::TRUNCATED_FROM)
                    .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).to_string()))
            });
            letters.push((m.payload().map(<[u8]>::len), truncated_from));
            Ok(())
        },
    )
    .expect("read the DLT");
    assert_eq!(
        letters,
        vec![(
            Some(eosflow::internals::retry::dlt::TRUNCATE_VALUE_TO),
            Some("1040000".to_string())
        )],
        "one truncated dead letter naming the original size"
    );
}
