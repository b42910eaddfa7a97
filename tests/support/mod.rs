//! What integration tests share: finding the real broker, database and registry, fresh topic
//! names, and waits that always end.
//!
//! A broker is found in this order: `EOSFLOW_KAFKA_BOOTSTRAP`; else Redpanda through
//! testcontainers where a Docker engine answers; else the local stack's default address
//! (`dev/stack up`). Exactly-once tests need Apache Kafka (some compatible brokers let
//! `read_committed` readers see aborted records), which is what `make test` provides.
#![allow(dead_code)]

pub mod http;
pub mod kill;
pub mod pipeline;
pub mod proxy;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::ToBytes;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use rdkafka::{Message, Offset, TopicPartitionList};

/// The broker's bootstrap address for this test process.
pub fn bootstrap() -> String {
    static BOOTSTRAP: OnceLock<String> = OnceLock::new();
    BOOTSTRAP
        .get_or_init(|| {
            if let Ok(b) = std::env::var("EOSFLOW_KAFKA_BOOTSTRAP") {
                if !b.is_empty() {
                    return b;
                }
            }
            if let Some(b) = redpanda::start() {
                return b;
            }
            let local = "127.0.0.1:19092".to_string();
            if std::net::TcpStream::connect_timeout(
                &local.parse().expect("literal address"),
                Duration::from_secs(2),
            )
            .is_err()
            {
                panic!(
                    "no Kafka broker: set EOSFLOW_KAFKA_BOOTSTRAP, start Docker, or run `dev/stack up` (make test does)"
                );
            }
            local
        })
        .clone()
}

/// Postgres URL of the local stack (or `EOSFLOW_POSTGRES_URL`).
pub fn postgres_url() -> String {
    std::env::var("EOSFLOW_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://eosflow:eosflow@127.0.0.1:15432/eosflow".into())
}

/// Schema registry URL of the local stack (or `EOSFLOW_SCHEMA_REGISTRY_URL`).
pub fn registry_url() -> String {
    std::env::var("EOSFLOW_SCHEMA_REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:18081/apis/ccompat/v7".into())
}

/// A config pointing at the test broker, with defaults for everything else.
pub fn config() -> Config {
    let mut c = Config::default();
    c.kafka.bootstrap = bootstrap();
    c
}

/// Clients for the test broker.
pub fn clients() -> KafkaClients {
    KafkaClients::new(config().kafka)
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Creates topics with `partitions` each (`compact` when the name ends in `-changelog`).
pub fn create_topics(names: &[&str], partitions: i32) {
    let specs: Vec<TopicSpec> = names
        .iter()
        .map(|n| {
            let policy = if n.ends_with("-changelog") {
                "compact"
            } else {
                "delete"
            };
            TopicSpec::new(*n, partitions, policy)
        })
        .collect();
    topics::apply_blocking(&clients(), &specs, Duration::from_secs(30)).expect("creating topics");
}

/// Creates an application's input and output topics (`<app>.in`, `<app>.out`) and the
/// internal topics of `topology` (retry levels, DLT, changelogs), `partitions` each.
pub fn create_app_topics(app: &str, topology: &eosflow::topology::Topology, partitions: i32) {
    let mut c = config();
    c.app.id = app.to_string();
    let mut specs = vec![
        TopicSpec::new(format!("{app}.in"), partitions, "delete"),
        TopicSpec::new(format!("{app}.out"), partitions, "delete"),
    ];
    specs.extend(topology.internal_topics(&c, partitions));
    topics::apply_blocking(&clients(), &specs, Duration::from_secs(30)).expect("creating topics");
}

/// One record to produce with [`produce_timed`]: partition (`None`: by key), key, value and
/// Kafka timestamp (ms).
pub type Timed = (Option<i32>, String, String, i64);

/// Produces `records` to `topic` in order with an idempotent producer and waits for them all.
pub fn produce_timed(topic: &str, records: &[Timed]) {
    let producer = test_producer();
    for (partition, key, value, ts) in records {
        let mut r = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .timestamp(*ts);
        if let Some(p) = partition {
            r = r.partition(*p);
        }
        send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// The idempotent producer tests write their workloads with.
pub fn test_producer() -> ThreadedProducer<DefaultProducerContext> {
    clients()
        .config(ClientRole::Idempotent)
        .create()
        .expect("producer")
}

/// Sends `r`; a full queue waits for deliveries (large workloads, up to a minute), any other
/// error fails the test.
pub fn send_waiting<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut r: BaseRecord<'_, K, P>,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err((e, back)) = producer.send(r) {
        let full = e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull);
        assert!(full && Instant::now() < deadline, "send: {e}");
        let _ = producer.flush(Duration::from_millis(50));
        r = back;
    }
}

/// The config of a kill test's instance of application `app`: instance `a`, a 6 s session,
/// 100 ms commits, and small transactions (`max_batch_records`) so that a kill lands between
/// two of them; its state under the temp dir.
pub fn instance_config(app: &str, max_batch_records: usize) -> Config {
    let mut c = config();
    c.app.id = app.to_string();
    c.app.instance_id = "a".into();
    c.processor.session_timeout_ms = 6000;
    c.processor.commit_interval_ms = 100;
    c.processor.max_batch_records = max_batch_records;
    c.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    c
}

/// The body of a `child_instance` test: runs `processor` with `config` (static membership,
/// so a restarted child takes its partitions back at once) until the parent kills it.
pub fn run_until_killed<P: eosflow::processor::Application + 'static>(
    mut config: Config,
    processor: P,
) {
    config.processor.static_membership = true;
    eosflow::init_logging();
    let runtime =
        eosflow::internals::processor::Runtime::new(&config, processor).expect("runtime starts");
    runtime
        .run(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            false,
        )))
        .expect("runs until killed");
}

/// Re-executes this test binary running only its `child_instance` test, with `env` set to
/// `value`: an instance a test can kill as a process (SIGKILL with `Child::kill`). Its logs go
/// to a file under the temp dir, whose tail a failed [`wait_for`] prints; it is killed when
/// dropped, so a failing test leaves no instance behind.
pub fn spawn_child(env: &str, value: &str) -> pipeline::Running {
    let log = child_log_path(value);
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("child log file");
    use std::io::Write as _;
    writeln!(out, "=== an instance of {value} starts ===").expect("child log file");
    watch_log(&log);
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "child_instance",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, value)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info,rdkafka=warn".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(out)
        .spawn()
        .map(pipeline::Running)
        .expect("spawn the instance")
}

/// Where the instances of `app` spawned by this test process log (one file per app, appended
/// to by each instance in turn).
fn child_log_path(app: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("eosflow-test-logs");
    std::fs::create_dir_all(&dir).expect("test log dir");
    dir.join(format!("{app}.log"))
}

/// The time between the first line of `app`'s instance log containing `from` and the last one
/// containing `to`, from the lines' UTC timestamps (within one day); `None` without both.
#[allow(dead_code)] // not every test binary measures its instances' logs
pub fn log_span(app: &str, from: &str, to: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(child_log_path(app)).ok()?;
    let first = text.lines().find(|l| l.contains(from)).and_then(log_time)?;
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains(to))
        .and_then(log_time)?;
    Some(Duration::from_secs_f64((last - first).rem_euclid(86_400.0)))
}

/// The seconds of the day a child's log line was written at (`2026-12-05T15:36:26.394447Z`
/// after ANSI colour codes).
fn log_time(line: &str) -> Option<f64> {
    let t = line.find('T').map(|i| &line[i + 1..])?;
    let hms = t.split('Z').next()?;
    let mut parts = hms.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// The lines of `app`'s child log containing `needle`, each with the time since the first line
/// containing `from` (ANSI colour codes removed).
pub fn log_lines_since(app: &str, from: &str, needle: &str) -> Vec<(Duration, String)> {
    let Ok(text) = std::fs::read_to_string(child_log_path(app)) else {
        return Vec::new();
    };
    let Some(start) = text.lines().find(|l| l.contains(from)).and_then(log_time) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            let at = log_time(l)?;
            let plain = without_colours(l);
            Some((
                Duration::from_secs_f64((at - start).rem_euclid(86_400.0)),
                plain,
            ))
        })
        .collect()
}

/// Log files whose tails a failed [`wait_for`] prints: the instances this test started.
fn watched_logs() -> &'static std::sync::Mutex<Vec<std::path::PathBuf>> {
    static LOGS: OnceLock<std::sync::Mutex<Vec<std::path::PathBuf>>> = OnceLock::new();
    LOGS.get_or_init(Default::default)
}

/// Adds `log` to the files a failed [`wait_for`] prints the tail of.
pub fn watch_log(log: &std::path::Path) {
    let mut logs = watched_logs().lock().unwrap_or_else(|e| e.into_inner());
    if !logs.iter().any(|l| l == log) {
        logs.push(log.to_path_buf());
    }
}

/// Prints the last lines of every watched log: what the instances said before a wait failed.
fn print_log_tails() {
    const LINES: usize = 60;
    let logs = watched_logs()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for log in logs {
        let Ok(text) = std::fs::read_to_string(&log) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        println!(
            "--- last {} of {} lines of {} ---",
            LINES.min(lines.len()),
            lines.len(),
            log.display()
        );
        for line in &lines[lines.len().saturating_sub(LINES)..] {
            println!("{line}");
        }
    }
}

/// Polls `f` every 100 ms until it returns `Some`, failing the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            print_log_tails();
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

mod redpanda {
    //! Redpanda through testcontainers, only where a Docker engine answers.
    use std::sync::OnceLock;

    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, GenericImage, ImageExt};

    const HOST_PORT: u16 = 29092;

    static CONTAINER: OnceLock<Container<GenericImage>> = OnceLock::new();

    fn docker_answers() -> bool {
        std::path::Path::new("/var/run/docker.sock").exists()
            && std::process::Command::new("docker")
                .args(["info", "--format", "{{.ServerVersion}}"])
                .output()
                .is_ok_and(|o| o.status.success())
    }

    pub fn start() -> Option<String> {
        if !docker_answers() {
            return None;
        }
        let container = GenericImage::new("docker.redpanda.com/redpandadata/redpanda", "v25.3.9")
            .with_wait_for(WaitFor::message_on_stderr("Successfully started Redpanda!"))
            .with_mapped_port(HOST_PORT, 9092.tcp())
            .with_cmd(
                [
                    "redpanda",
                    "start",
                    "--mode",
                    "dev-container",
                    "--smp",
                    "1",
                    "--kafka-addr",
                    "0.0.0.0:9092",
                    "--advertise-kafka-addr",
                ]
                .into_iter()
                .map(String::from)
                .chain([format!("127.0.0.1:{HOST_PORT}")]),
            )
            .start()
            .ok()?;
        let _ = CONTAINER.set(container);
        Some(format!("127.0.0.1:{HOST_PORT}"))
    }
}

/// Produces `payload` to partition 0 of `topic` and reads it back: the client's connection works
/// for both directions (used over the SASL and TLS listeners).
pub fn round_trip(clients: &KafkaClients, topic: &str, payload: &str) {
    let producer: BaseProducer = clients
        .config(ClientRole::Idempotent)
        .create()
        .expect("producer");
    producer
        .send(BaseRecord::to(topic).key("k").payload(payload))
        .map_err(|(e, _)| e)
        .expect("enqueue");
    producer.flush(Duration::from_secs(20)).expect("flush");
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let got = wait_for(
        "the record back",
        Duration::from_secs(30),
        || match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => m.payload().map(|p| p.to_vec()),
            _ => None,
        },
    );
    assert_eq!(got, payload.as_bytes());
}

/// The local stack's run dir (`dev/stack`: `$EOSFLOW_STACK_DIR`, default `/tmp/eosflow-stack-$UID`).
pub fn stack_run_dir() -> String {
    std::env::var("EOSFLOW_STACK_DIR").unwrap_or_else(|_| {
        format!(
            "/tmp/eosflow-stack-{}",
            String::from_utf8_lossy(
                &std::process::Command::new("id")
                    .arg("-u")
                    .output()
                    .map(|o| o.stdout)
                    .unwrap_or_default()
            )
            .trim()
        )
    })
}

/// The stack's development CA, and one that signed nothing (`dev/stack`: `$RUN/tls`).
pub fn stack_cas() -> (String, String) {
    let ca = std::env::var("EOSFLOW_STACK_TLS_CA")
        .unwrap_or_else(|_| format!("{}/tls/ca.pem", stack_run_dir()));
    let other = std::env::var("EOSFLOW_STACK_TLS_OTHER_CA")
        .unwrap_or_else(|_| format!("{}/tls/other-ca.pem", stack_run_dir()));
    assert!(
        std::path::Path::new(&ca).is_file(),
        "no development CA at {ca}: run `dev/stack up` (it creates $EOSFLOW_STACK_DIR/tls)"
    );
    (ca, other)
}

pub use eosflow_verify::without_colours;

/// Orders (value `customer:order`) re-keyed by customer through `<app>-by-customer-repartition`
/// and counted per customer in store `counts`; each new count goes to `output` keyed by the
/// customer (`I64Serde`). The repartitioning count of `tests/repartition.rs` and
/// `tests/topics.rs`.
pub fn rekeyed_count(input: &str, output: &str) -> eosflow::topology::Topology {
    use eosflow::processor::{ProcessError, StoreHandle};
    use eosflow::serdes::{I64Serde, StringSerde};
    use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
    let counts = StoreHandle::new("counts", StringSerde, I64Serde);
    let store = counts.clone();
    let count = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                      r: TypedRecord<String, String>| {
        let customer = r
            .key
            .ok_or_else(|| ProcessError::permanent("no customer"))?;
        let mut s = ctx.store(&store)?;
        let n = s.get(&customer)?.unwrap_or(0) + 1;
        s.put(&customer, &n)?;
        ctx.forward(TypedRecord::new(Some(customer), Some(n)));
        Ok(())
    };
    Topology::builder()
        .add_source("orders", &[input], StringSerde, StringSerde)
        .add_repartition(
            "by-customer",
            |_order: Option<&String>, value: &String| {
                value.split_once(':').map(|(c, _)| c.to_string())
            },
            StringSerde,
            StringSerde,
            &["orders"],
        )
        .add_processor("count", count, &["by-customer"])
        .add_state_store(&counts, &["count"])
        .add_sink("out", output, StringSerde, I64Serde, &["count"])
        .build()
        .expect("valid topology")
}

/// The high watermarks of `topic`'s `partitions` summed: records written, committed or not,
/// and transaction markers (a kill test's "has it written anything since").
pub fn written(topic: &str, partitions: i32) -> i64 {
    (0..partitions).map(|p| written_partition(topic, p)).sum()
}

/// The high watermark of `topic[partition]` (0 while it cannot be read).
pub fn written_partition(topic: &str, partition: i32) -> i64 {
    eosflow::internals::kafka::reader::watermarks(
        &clients(),
        topic,
        partition,
        Duration::from_secs(10),
    )
    .map_or(0, |(_, high)| high)
}

/// Group `app`'s lag on `topic` (`i64::MAX` while it cannot be read: no offsets yet, a topic
/// not created yet).
pub fn lag(app: &str, topic: &str, partitions: i32) -> i64 {
    eosflow_verify::group_lag(&clients(), app, topic, partitions).unwrap_or(i64::MAX)
}

/// Every record of `topic` with a payload as (key text, value bytes), read_committed, each
/// partition in order; watermark-only records (no key, no value) are skipped.
pub fn read_payloads(topic: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    eosflow::internals::kafka::reader::read_all(&clients(), topic, Duration::from_secs(60), |m| {
        if m.payload().is_none() {
            return Ok(());
        }
        out.push((
            String::from_utf8_lossy(m.key().unwrap_or_default()).to_string(),
            m.payload().unwrap_or_default().to_vec(),
        ));
        Ok(())
    })
    .expect("read");
    out
}

/// Peak resident memory of process `pid` so far (`VmHWM` in `/proc/<pid>/status`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
        .expect("VmHWM in /proc status")
}
