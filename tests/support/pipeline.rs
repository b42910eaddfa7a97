//! A test pipeline: the counting topology's topics (input with its retry ladder and DLT,
//! output, changelog), in-process instances, and producers of known records.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::processor::Runtime;
use eosflow::processor::{Application, RunSummary};
use eosflow_verify::{group_lag, Workload};

/// Topics of one test pipeline.
pub struct Pipeline {
    pub app: String,
    pub input: String,
    pub output: String,
    pub changelog: String,
    pub dlt: String,
    pub partitions: i32,
    pub state_root: PathBuf,
}

impl Pipeline {
    pub fn new(name: &str, partitions: i32) -> Self {
        let app = super::unique(name);
        let p = Self {
            input: format!("{app}.input"),
            output: format!("{app}.output"),
            changelog: format!("{app}-count-changelog"),
            dlt: format!("{app}.input.DLT"),
            state_root: std::env::temp_dir().join(format!("eosflow-test-{app}")),
            app,
            partitions,
        };
        let mut topics =
            eosflow::internals::retry::ladder_topics(std::slice::from_ref(&p.input), 3);
        topics.extend([p.output.clone(), p.changelog.clone()]);
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        super::create_topics(&names, partitions);
        p
    }

    pub fn config(&self, instance: &str) -> Config {
        let mut c = super::config();
        c.app.id = self.app.clone();
        c.app.instance_id = instance.into();
        c.processor.input_topics = vec![self.input.clone()];
        c.processor.session_timeout_ms = 6000;
        c.state.dir = self.state_root.clone();
        c
    }

    /// Records not yet committed by the group, on the input and every retry level.
    pub fn lag(&self) -> i64 {
        eosflow::internals::retry::ladder_topics(std::slice::from_ref(&self.input), 3)
            .iter()
            .filter(|t| !t.ends_with(".DLT"))
            .map(|t| group_lag(&super::clients(), &self.app, t, self.partitions).expect("lag"))
            .sum()
    }

    pub fn wait_drained(&self, timeout: Duration) {
        super::wait_for("the group's lag to reach 0", timeout, || {
            (self.lag() == 0).then_some(())
        });
    }

    /// Judges the output and changelog against `w` and fails the test unless exactly-once holds.
    pub fn assert_exactly_once(&self, w: &Workload) -> eosflow_verify::Verdict {
        let v = eosflow_verify::check::verify(
            &super::clients(),
            w,
            &self.output,
            &self.changelog,
            Duration::from_secs(60),
        )
        .expect("reading output and changelog");
        assert!(v.ok(), "{v}");
        v
    }

    /// Starts `eosflow run` for this pipeline as a separate process (so it can be `kill -9`ed or
    /// sent SIGTERM), appending its logs to `log`; `env` adds or overrides settings.
    pub fn spawn(&self, instance: &str, log: &std::path::Path, env: &[(&str, &str)]) -> Running {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let err = out.try_clone().expect("log file");
        super::watch_log(log);
        std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
            .args(["run", "--topology", "count", "--output", &self.output])
            .env("EOSFLOW_KAFKA_BOOTSTRAP", super::bootstrap())
            .env("EOSFLOW_APP_ID", &self.app)
            .env("EOSFLOW_APP_INSTANCE_ID", instance)
            .env("EOSFLOW_PROCESSOR_INPUT_TOPICS", &self.input)
            .env("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "6000")
            .env("EOSFLOW_STATE_DIR", &self.state_root)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map(Running)
            .expect("spawn eosflow run")
    }

    /// The counting topology's outputs as (key, output), in each partition's order.
    pub fn count_outputs(&self) -> Vec<(String, eosflow_verify::count::CountOutput)> {
        let mut out = Vec::new();
        read_all(
            &super::clients(),
            &self.output,
            Duration::from_secs(60),
            |m| {
                use rdkafka::Message;
                let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
                let v = serde_json::from_slice(m.payload().unwrap_or_default())
                    .map_err(|e| e.to_string())?;
                out.push((key, v));
                Ok(())
            },
        )
        .expect("read output");
        out
    }

    /// The input's dead letters.
    pub fn dead_letters(&self) -> Vec<eosflow::internals::retry::tooling::DeadLetter> {
        eosflow::internals::retry::tooling::read(
            &super::clients(),
            &self.dlt,
            &eosflow::internals::retry::tooling::Selector::default(),
        )
        .expect("read DLT")
    }

    /// A config of instance `a` with a ladder of `delays_ms` and no jitter.
    pub fn retry_config(&self, delays_ms: &[u64]) -> Config {
        let mut c = self.config("a");
        c.retry.delays_ms = delays_ms.to_vec();
        c.retry.jitter_percent = 0;
        c
    }

    pub fn count(&self, topic: &str) -> usize {
        let mut n = 0;
        read_all(&super::clients(), topic, Duration::from_secs(60), |_| {
            n += 1;
            Ok(())
        })
        .expect("read");
        n
    }
}

/// An in-process instance.
pub struct Instance {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<RunSummary>,
}

impl Instance {
    pub fn start<P: Application + 'static>(config: &Config, processor: P) -> Self {
        // `EOSFLOW_TEST_LOG=eosflow=debug cargo test …` shows the runtime's logs per test.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("EOSFLOW_TEST_LOG"))
            .with_test_writer()
            .try_init();
        let runtime = Runtime::new(config, processor).expect("runtime starts");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle =
            std::thread::spawn(move || runtime.run(s).expect("runtime runs without error"));
        Self { stop, handle }
    }

    pub fn stop(self) -> RunSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("runtime thread")
    }
}

/// Produces one record with an `id` header of `raw-<value>`.
pub fn produce_raw(topic: &str, key: &str, value: &str) {
    produce(topic, key, value, &format!("raw-{value}"));
}

/// Produces one record with the given `id` header.
pub fn produce(topic: &str, key: &str, value: &str, id: &str) {
    produce_with(topic, key, value, &[("id", id)]);
}

/// Produces one record with the given headers.
pub fn produce_with(topic: &str, key: &str, value: &str, headers: &[(&str, &str)]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = super::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    let mut h = rdkafka::message::OwnedHeaders::new();
    for (k, v) in headers {
        h = h.insert(rdkafka::message::Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    producer
        .send(BaseRecord::to(topic).key(key).payload(value).headers(h))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Produces records `range` of a workload (same ids, keys and amounts as `Workload::produce`).
pub fn produce_range(topic: &str, w: &Workload, range: std::ops::Range<u64>) {
    produce_range_with(&super::clients(), topic, w, range);
}

/// As [`produce_range`], through `clients` (another broker).
pub fn produce_range_with(
    clients: &eosflow::kafka::KafkaClients,
    topic: &str,
    w: &Workload,
    range: std::ops::Range<u64>,
) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = clients
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for i in range {
        let key = w.key(i);
        let value = Workload::amount(i).to_string();
        let id = Workload::id(i);
        producer
            .send(
                BaseRecord::to(topic)
                    .key(key.as_bytes())
                    .payload(value.as_bytes())
                    .headers(rdkafka::message::OwnedHeaders::new().insert(
                        rdkafka::message::Header {
                            key: "id",
                            value: Some(id.as_bytes()),
                        },
                    )),
            )
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Produces records `range` of `w` (as `produce_range` does) at about 2 000 records/s, with
/// one producer: 100 records, then 50 ms.
pub fn produce_paced(topic: &str, w: &Workload, range: std::ops::Range<u64>) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = super::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for i in range {
        let (key, value, id) = (w.key(i), Workload::amount(i).to_string(), Workload::id(i));
        let headers = OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id.as_bytes()),
        });
        producer
            .send(
                BaseRecord::to(topic)
                    .key(key.as_bytes())
                    .payload(value.as_bytes())
                    .headers(headers),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// [`produce_paced`] on a thread of its own: the flag stays set while it produces.
pub fn produce_paced_in_background(
    topic: &str,
    w: &Workload,
    range: std::ops::Range<u64>,
) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let producing = Arc::new(AtomicBool::new(true));
    let (topic, w, flag) = (topic.to_string(), *w, producing.clone());
    let thread = std::thread::spawn(move || {
        produce_paced(&topic, &w, range);
        flag.store(false, Ordering::Relaxed);
    });
    (producing, thread)
}

/// A spawned `eosflow run`, killed when dropped: a failing test never leaves a processor behind.
pub struct Running(pub std::process::Child);

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
