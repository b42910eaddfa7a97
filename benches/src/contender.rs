//! The contenders and how each runs as OS processes: the raw pipe (`eosflow bench-pipe`),
//! eosflow's counting topology at-least-once and exactly-once (`eosflow run`), the same
//! exactly-once run by a second eosflow binary (`--baseline-exe`, another commit), and Kafka
//! Streams `exactly_once_v2` (the Java peer in `benches/peer/`) in three configurations (as it
//! comes, with KIP-892 transactional state stores, with the KIP-1071 streams rebalance
//! protocol); each in the count, the windowed or the join shape.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{join, windowed, BenchError, Shape};

/// Who is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Contender {
    /// rdkafka consume → produce, no transaction, no state: the ceiling.
    Raw,
    /// eosflow, `processor.guarantee = "at_least_once"`.
    EosflowAlo,
    /// eosflow, exactly-once (transactions, RocksDB state, dedup).
    EosflowEos,
    /// [`Contender::EosflowEos`] exactly as configured, but run by the `--baseline-exe` binary
    /// (an older commit's build): the same run's comparison between two commits.
    EosflowEosBaseline,
    /// Kafka Streams `exactly_once_v2`, the same topology.
    KafkaStreams,
    /// [`Contender::KafkaStreams`] with KIP-892 transactional state stores
    /// (`enable.transactional.statestores=true`, `statestore.uncommitted.max.bytes` at its
    /// 64 MiB default).
    KafkaStreamsTxn,
    /// [`Contender::KafkaStreams`] on the streams rebalance protocol of KIP-1071
    /// (`group.protocol=streams`; session timeout, heartbeat and standbys from the broker).
    KafkaStreamsStreams,
}

impl Contender {
    /// Every contender, in report order.
    pub const ALL: [Contender; 7] = [
        Contender::Raw,
        Contender::EosflowAlo,
        Contender::EosflowEos,
        Contender::EosflowEosBaseline,
        Contender::KafkaStreams,
        Contender::KafkaStreamsTxn,
        Contender::KafkaStreamsStreams,
    ];

    /// The Kafka Streams configurations: every eosflow ÷ Kafka Streams ratio of a report is
    /// against the best of those measured at the point.
    pub const KAFKA_STREAMS: [Contender; 3] = [
        Contender::KafkaStreams,
        Contender::KafkaStreamsTxn,
        Contender::KafkaStreamsStreams,
    ];

    /// Name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Raw => "raw-pipe",
            Contender::EosflowAlo => "eosflow-alo",
            Contender::EosflowEos => "eosflow-eos",
            Contender::EosflowEosBaseline => "eosflow-eos-baseline",
            Contender::KafkaStreams => "kstreams-eos",
            Contender::KafkaStreamsTxn => "kstreams-eos-txn",
            Contender::KafkaStreamsStreams => "kstreams-eos-streams",
        }
    }

    /// Parses a name from [`Contender::name`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Whether the contender keeps state in a changelog topic it needs created.
    pub fn is_eosflow(self) -> bool {
        matches!(
            self,
            Contender::EosflowAlo | Contender::EosflowEos | Contender::EosflowEosBaseline
        )
    }

    /// Whether the contender is one of the Kafka Streams configurations (the Java peer).
    pub fn is_kafka_streams(self) -> bool {
        Self::KAFKA_STREAMS.contains(&self)
    }

    /// Whether the contender runs exactly-once (the shapes other than count measure only
    /// these).
    pub fn is_exactly_once(self) -> bool {
        matches!(self, Contender::EosflowEos | Contender::EosflowEosBaseline)
            || self.is_kafka_streams()
    }
}

/// The contract the Kafka Streams peer decodes Avro values with (relative to the repository).
pub const SCHEMA: &str = "schemas/orders/order-placed.v1.avsc";

/// How to start a point's instances.
#[derive(Debug, Clone)]
pub struct Launch {
    /// What the instances compute.
    pub shape: Shape,
    /// The `eosflow` binary.
    pub exe: PathBuf,
    /// The second `eosflow` binary [`Contender::EosflowEosBaseline`] runs (`--baseline-exe`).
    pub baseline_exe: Option<PathBuf>,
    /// Classpath of the Kafka Streams peer, when it was built.
    pub peer_classpath: Option<String>,
    /// The order-placed schema file (the peer's reader and writer schema).
    pub schema: PathBuf,
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// Group / application id.
    pub app_id: String,
    /// Input topic.
    pub input: String,
    /// Output topic.
    pub output: String,
    /// Commit interval of eosflow and Kafka Streams.
    pub commit_interval_ms: u64,
    /// Where instance state and logs go.
    pub dir: PathBuf,
    /// Standby replicas per partition: eosflow `processor.standby_replicas`, Kafka Streams
    /// `num.standby.replicas` (the failover benchmark; 0 elsewhere).
    pub standby_replicas: u32,
    /// Processing threads per instance: eosflow `processor.threads` (set only above 1),
    /// Kafka Streams `num.stream.threads`.
    pub threads: usize,
    /// RocksDB memory of each Kafka Streams instance (`--kstreams-memory-bytes`): above 0, the
    /// peer's bounded-memory configuration of that size (system property
    /// `bench.rocksdb.memory.bytes`); 0, Kafka Streams' defaults.
    pub kstreams_memory_bytes: u64,
}

impl Launch {
    /// The count shape for application `app` (topics `<app>.input` / `<app>.output`, state
    /// and logs under `<out>/runs/<app>`), one processing thread, 100 ms commits: what the
    /// recovery, restore and failover benchmarks start.
    pub fn count(
        bootstrap: &str,
        args: &super::BenchArgs,
        (exe, peer): (&Path, Option<&str>),
        app: &str,
        standby_replicas: u32,
    ) -> Self {
        Self {
            shape: Shape::Count,
            exe: exe.to_path_buf(),
            baseline_exe: None,
            peer_classpath: peer.map(str::to_string),
            schema: args.repo.join(SCHEMA),
            bootstrap: bootstrap.to_string(),
            app_id: app.to_string(),
            input: format!("{app}.input"),
            output: format!("{app}.output"),
            commit_interval_ms: 100,
            dir: args.out.join("runs").join(app),
            standby_replicas,
            threads: 1,
            kstreams_memory_bytes: args.kstreams_memory_bytes,
        }
    }
}

/// One running instance; killed (SIGKILL) on drop.
pub struct Instance {
    /// Name in logs.
    pub name: String,
    child: Option<Child>,
    /// Its log file.
    pub log: PathBuf,
}

impl Instance {
    /// The OS process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -9`: no shutdown hook, no commit, no leave-group.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Peak resident set size so far (`VmHWM` in `/proc/<pid>/status`), while it runs.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(kib * 1024)
    }

    /// An error if the process exited by itself (it never should during a point).
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(BenchError::Instance(format!(
                    "{} exited by itself ({status}); see {}",
                    self.name,
                    self.log.display()
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Starts instance `i` of `who`.
pub fn spawn(who: Contender, l: &Launch, i: usize) -> Result<Instance, BenchError> {
    std::fs::create_dir_all(&l.dir).map_err(|e| io(&l.dir, e))?;
    let name = format!("{}-i{i}", who.name());
    let log = l.dir.join(format!("{name}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| io(&log, e))?;
    let err = out.try_clone().map_err(|e| io(&log, e))?;
    let state = l.dir.join(format!("state-i{i}"));
    let mut cmd = match who {
        Contender::Raw => {
            let mut c = Command::new(&l.exe);
            c.args([
                "bench-pipe",
                "--input",
                &l.input,
                "--output",
                &l.output,
                "--group",
                &l.app_id,
            ])
            .env("EOSFLOW_KAFKA_BOOTSTRAP", &l.bootstrap);
            c
        }
        Contender::EosflowAlo | Contender::EosflowEos | Contender::EosflowEosBaseline => {
            let exe = if who == Contender::EosflowEosBaseline {
                l.baseline_exe.as_deref().ok_or_else(|| {
                    BenchError::Instance(
                        "eosflow-eos-baseline needs --baseline-exe (the other eosflow binary)"
                            .into(),
                    )
                })?
            } else {
                l.exe.as_path()
            };
            let mut c = Command::new(exe);
            let guarantee = if who == Contender::EosflowAlo {
                "at_least_once"
            } else {
                "exactly_once"
            };
            let topology = match l.shape {
                Shape::Count => "count",
                Shape::Windowed => "windowed-sum",
                Shape::Join => "stream-table-join",
            };
            c.args(["run", "--topology", topology, "--output", &l.output])
                .env("EOSFLOW_APP_ID", &l.app_id)
                .env("EOSFLOW_APP_INSTANCE_ID", format!("i{i}"))
                .env("EOSFLOW_KAFKA_BOOTSTRAP", &l.bootstrap)
                .env("EOSFLOW_PROCESSOR_INPUT_TOPICS", &l.input)
                .env(
                    "EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS",
                    l.commit_interval_ms.to_string(),
                )
                .env("EOSFLOW_PROCESSOR_GUARANTEE", guarantee)
                .env("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "6000")
                .env("EOSFLOW_STATE_DIR", &state)
                // JSON lines: the restore and failover benchmarks read the timestamps of
                // "partitions assigned" and "restored partition=…" from the log.
                .env("RUST_LOG_FORMAT", "json")
                // No endpoint (instances would share a port), unless `BENCH_METRICS_LISTEN`
                // asks for one: to watch a single instance's batches while it runs.
                .env(
                    "EOSFLOW_METRICS_LISTEN",
                    std::env::var("BENCH_METRICS_LISTEN").unwrap_or_default(),
                );
            if l.standby_replicas > 0 {
                c.env(
                    "EOSFLOW_PROCESSOR_STANDBY_REPLICAS",
                    l.standby_replicas.to_string(),
                );
            }
            if l.threads > 1 {
                c.env("EOSFLOW_PROCESSOR_THREADS", l.threads.to_string());
            }
            c
        }
        Contender::KafkaStreams | Contender::KafkaStreamsTxn | Contender::KafkaStreamsStreams => {
            let cp = l.peer_classpath.as_deref().ok_or_else(|| {
                BenchError::Instance(
                    "the Kafka Streams peer was not built (benches/peer/build failed or was skipped)"
                        .into(),
                )
            })?;
            let class = match l.shape {
                Shape::Count => "CountPeer",
                Shape::Windowed => "WindowPeer",
                Shape::Join => "JoinPeer",
            };
            let mut c = Command::new("java");
            c.args(jvm_args(l, who))
                .args(["-cp", cp, class])
                .arg(&l.bootstrap)
                .arg(&l.input)
                .arg(&l.output)
                .arg(&l.app_id)
                .arg(&state)
                .arg("exactly_once_v2")
                .arg(l.commit_interval_ms.to_string())
                .arg(&l.schema);
            match l.shape {
                Shape::Windowed => {
                    c.arg(windowed::SIZE_MS.to_string())
                        .arg(windowed::GRACE_MS.to_string());
                }
                Shape::Join => {
                    c.arg(join::table_topic(&l.input));
                }
                Shape::Count => {}
            }
            c
        }
    };
    let child = cmd
        .env("RUST_LOG", "warn,eosflow=info")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| BenchError::Instance(format!("starting {name}: {e}")))?;
    Ok(Instance {
        name,
        child: Some(child),
        log,
    })
}

/// The Kafka Streams peer's JVM options: its heap, and the system properties `Peer.java` reads
/// for what the launch sets (standby replicas, stream threads, and the RocksDB memory bound only
/// when there is one, so that without it the peer runs Kafka Streams' defaults) and for the
/// configuration `who` names (transactional state stores, the streams rebalance protocol).
fn jvm_args(l: &Launch, who: Contender) -> Vec<String> {
    let mut a = vec![
        "-Xms256m".to_string(),
        "-Xmx512m".to_string(),
        format!("-Dbench.standby.replicas={}", l.standby_replicas),
        format!("-Dbench.threads={}", l.threads.max(1)),
    ];
    if l.kstreams_memory_bytes > 0 {
        a.push(format!(
            "-Dbench.rocksdb.memory.bytes={}",
            l.kstreams_memory_bytes
        ));
    }
    match who {
        Contender::KafkaStreamsTxn => a.push("-Dbench.transactional.statestores=true".into()),
        Contender::KafkaStreamsStreams => a.push("-Dbench.group.protocol=streams".into()),
        _ => {}
    }
    a
}

/// The Kafka Streams version the peer is built against (`<kafka.version>` in
/// `benches/peer/pom.xml`), for the report: the peer's numbers mean little without it.
pub fn peer_version(repo: &Path) -> Option<String> {
    let pom = std::fs::read_to_string(repo.join("benches/peer/pom.xml")).ok()?;
    let (_, rest) = pom.split_once("<kafka.version>")?;
    let (version, _) = rest.split_once("</kafka.version>")?;
    Some(version.trim().to_string()).filter(|v| !v.is_empty())
}

fn io(path: &Path, e: std::io::Error) -> BenchError {
    BenchError::Instance(format!("{}: {e}", path.display()))
}

/// Builds the Kafka Streams peer with `benches/peer/build` (Maven + javac, cached); its classpath.
pub fn build_peer(repo: &Path) -> Result<String, BenchError> {
    let script = repo.join("benches/peer/build");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError::Instance(format!("running {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(BenchError::Instance(format!(
            "{} failed ({})",
            script.display(),
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::args;

    fn launch(argv: &[&str]) -> Launch {
        Launch::count(
            "127.0.0.1:9092",
            &args(argv),
            (Path::new("eosflow"), Some("cp")),
            "app",
            0,
        )
    }

    #[test]
    fn the_peer_is_bounded_only_when_asked() {
        // Default: no property, so the peer keeps Kafka Streams' RocksDB defaults.
        let l = launch(&[]);
        assert_eq!(l.kstreams_memory_bytes, 0);
        let a = jvm_args(&l, Contender::KafkaStreams);
        assert!(
            !a.iter().any(|a| a.contains("bench.rocksdb.memory.bytes")),
            "{a:?}"
        );
        let l = launch(&["--kstreams-memory-bytes", "134217728"]);
        assert_eq!(l.kstreams_memory_bytes, 134_217_728);
        let a = jvm_args(&l, Contender::KafkaStreams);
        assert!(
            a.contains(&"-Dbench.rocksdb.memory.bytes=134217728".to_string()),
            "{a:?}"
        );
        // Before the classpath and class: JVM options, not the peer's arguments.
        assert!(a.iter().all(|a| a.starts_with('-')), "{a:?}");
    }

    #[test]
    fn each_kafka_streams_configuration_sets_only_its_own_property() {
        let l = launch(&[]);
        let props = |who| {
            jvm_args(&l, who)
                .into_iter()
                .filter(|a| a.contains("transactional") || a.contains("group.protocol"))
                .collect::<Vec<_>>()
        };
        assert!(props(Contender::KafkaStreams).is_empty());
        assert_eq!(
            props(Contender::KafkaStreamsTxn),
            ["-Dbench.transactional.statestores=true"]
        );
        assert_eq!(
            props(Contender::KafkaStreamsStreams),
            ["-Dbench.group.protocol=streams"]
        );
        for c in Contender::ALL {
            assert_eq!(Contender::parse(c.name()), Some(c));
            assert_eq!(
                c.is_kafka_streams(),
                c.name().starts_with("kstreams-"),
                "{c:?}"
            );
            if c.is_kafka_streams() {
                assert!(c.is_exactly_once() && !c.is_eosflow(), "{c:?}");
            }
        }
    }

    #[test]
    fn the_peer_version_is_the_poms() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let v = peer_version(&repo).expect("benches/peer/pom.xml names <kafka.version>");
        assert!(v.starts_with(|c: char| c.is_ascii_digit()), "{v}");
        assert_eq!(peer_version(Path::new("/nonexistent")), None);
    }
}
