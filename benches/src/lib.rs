//! `eosflow bench`: throughput per partition and end-to-end latency of eosflow against the raw
//! ceiling (an rdkafka pipe) and Kafka Streams `exactly_once_v2` (as it comes, with
//! transactional state stores, and on the streams rebalance protocol; each ratio is against the
//! best of these at its point: [`report::best_kafka_streams`]), all measured in one run on the
//! same broker, each point repeated, written up as `report.md` with SVG charts.
//!
//! One point: fresh topics → one probe per partition → the backlog in an open transaction →
//! the contender's instances start and process the probes (warm, joined) → the backlog is
//! committed and the clock starts → its outputs' arrival times give records/s at steady state
//! (10th to 90th percentile of arrivals) → a paced stream gives the latencies (send →
//! `read_committed` visibility of the output) → instances killed, topics deleted.
//!
//! The windowed shape ([`windowed`]) runs the same backlog with event times through a tumbling
//! window count and sum emitted on window close, for eosflow and Kafka Streams exactly-once,
//! and measures records/s from the group's committed offsets instead of the outputs. The
//! stream-table join shape ([`join`]) measures the same way an inner join of the backlog with a
//! co-partitioned table of customers.
//!
//! With `--baseline-exe`, a second eosflow binary (another commit's build) runs as
//! [`Contender::EosflowEosBaseline`] beside eosflow exactly-once in the same rounds, and the
//! report gives eosflow exactly-once ÷ that baseline per shape ([`report::baseline_ratios`]).

pub mod contender;
pub mod join;
pub mod load;
pub mod pipe;
pub mod reader;
pub mod recovery;
pub mod report;
pub mod restore;
pub mod windowed;
pub mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use contender::Contender;
use contender::{Instance, Launch};
use eosflow::config::Config;
use eosflow::kafka::topics::TopicSpec;
use eosflow::kafka::KafkaClients;
use reader::Reader;

/// Why a benchmark point or run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Talking to Kafka failed.
    #[error("kafka: {0}")]
    Kafka(String),
    /// An instance could not start or died.
    #[error("instance: {0}")]
    Instance(String),
    /// A deadline passed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Writing the report failed.
    #[error("report: {0}")]
    Report(String),
    /// The command line asks for something impossible (checked before anything runs).
    #[error("usage: {0}")]
    Usage(String),
}

/// The command line of `eosflow bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Backlog records per point (enough for a few seconds of steady state at the raw pipe's
    /// rate: shorter backlogs made single rounds swing by ±30 %).
    #[arg(long, default_value_t = 300_000)]
    pub records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    pub keys: u64,
    /// Partition counts to sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub partitions: Vec<i32>,
    /// Instance counts to sweep (a count above the partitions is skipped).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub instances: Vec<usize>,
    /// Commit intervals swept for eosflow exactly-once (at the middle partition count, one
    /// instance); every other point uses 100 ms.
    #[arg(long, value_delimiter = ',', default_value = "50,100,500")]
    pub commit_intervals: Vec<u64>,
    /// Contenders: raw-pipe, eosflow-alo, eosflow-eos, and Kafka Streams `exactly_once_v2` as
    /// it comes (kstreams-eos), with KIP-892 transactional state stores (kstreams-eos-txn) and
    /// on the KIP-1071 streams rebalance protocol (kstreams-eos-streams); and
    /// eosflow-eos-baseline, which needs `--baseline-exe` (and is added by it when not listed).
    /// Every eosflow ÷ Kafka Streams ratio is against the best Kafka Streams configuration
    /// measured at its point. Recovery runs kstreams-eos only; restore and failover also
    /// kstreams-eos-txn.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "raw-pipe,eosflow-alo,eosflow-eos,kstreams-eos,kstreams-eos-txn,kstreams-eos-streams"
    )]
    pub contenders: Vec<String>,
    /// Times each point runs (rounds interleave the contenders).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Paced records per second in the latency phase.
    #[arg(long, default_value_t = 1_000)]
    pub latency_rate: u64,
    /// Seconds of the latency phase.
    #[arg(long, default_value_t = 5)]
    pub latency_secs: u64,
    /// Keys in state for the recovery benchmark (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub recovery_keys: u64,
    /// Restarts timed per contender in the recovery benchmark.
    #[arg(long, default_value_t = 3)]
    pub recovery_restarts: u64,
    /// Partitions of the recovery benchmark.
    #[arg(long, default_value_t = 4)]
    pub recovery_partitions: i32,
    /// Keys in the one partition's state of the restore benchmark (0 skips it): kill -9 the
    /// only instance, restart it, time assignment received → restored → processing, eosflow
    /// from its checkpoint and cold (state directory wiped) against Kafka Streams; see
    /// [`restore`].
    #[arg(long, default_value_t = 1_000_000)]
    pub restore_keys: u64,
    /// Restarts timed per case in the restore benchmark.
    #[arg(long, default_value_t = 2)]
    pub restore_restarts: usize,
    /// Keys in state, over `--failover-partitions`, of the failover benchmark (0 skips it):
    /// two instances, kill -9 one, time until every partition processes again, with and
    /// without standby replicas; see [`restore::failover`].
    #[arg(long, default_value_t = 1_000_000)]
    pub failover_keys: u64,
    /// Partitions of the failover benchmark.
    #[arg(long, default_value_t = 4)]
    pub failover_partitions: i32,
    /// Failovers timed per case (each on freshly loaded state).
    #[arg(long, default_value_t = 2)]
    pub failover_repeats: usize,
    /// Processing threads per instance in the count shape (eosflow `processor.threads`,
    /// Kafka Streams `num.stream.threads`); 1 is what every published figure used.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// RocksDB memory of each Kafka Streams instance, bytes; 0 (the default) leaves Kafka
    /// Streams' defaults, where every store has its own 50 MiB block cache and up to 3 × 16 MiB
    /// memtables, so an instance's memory grows with the partitions it owns. Above 0 the peer
    /// runs Kafka Streams' documented bounded-memory configuration (`RocksDBConfigSetter`: one
    /// LRU cache of this size shared by all the instance's stores, a write-buffer manager
    /// charging the memtables, up to half of it, to that cache): how eosflow's
    /// `state.memory_bytes` (default 128 MiB, 134217728) bounds its stores, so memory per
    /// instance at many partitions can be compared at the same budget.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub kstreams_memory_bytes: u64,
    /// Where report.md, results.json, the charts and instance logs go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// The repository (for benches/peer/build).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Input values: `avro` (order events in the registry's wire format, ~300 B) or `text`
    /// (padded decimal amounts, no registry needed).
    #[arg(long, default_value = "avro")]
    pub payload: String,
    /// How the binary was built (for the report): `release` or `dev-opt` (see benches/run).
    #[arg(long, default_value = "release")]
    pub build: String,
    /// Profile the exactly-once instance of one point with `perf` (report in the output dir);
    /// with the windowed and join shapes, also one exactly-once instance of each.
    #[arg(long)]
    pub perf: bool,
    /// Shapes: `count` (per-key running count and sum, one output per input), `windowed`
    /// (tumbling 10 s windows with 2 s grace, count and sum per key, emitted on close) and
    /// `join` (each record inner-joined with its key's row of a co-partitioned table); the last
    /// two for eosflow and Kafka Streams exactly-once only. Also `restore` and `failover`
    /// (see [`restore`]; sized by `--restore-keys` and `--failover-keys`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "count,windowed,join,restore,failover"
    )]
    pub shapes: Vec<String>,
    /// Partition counts of the windowed shape (each with the `--instances` counts).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub windowed_partitions: Vec<i32>,
    /// Event time between consecutive backlog records of the windowed shape (ms). With 1 ms,
    /// 1 000 keys and 10 s windows a key has about 10 records per window.
    #[arg(long, default_value_t = 1)]
    pub event_time_step_ms: i64,
    /// Partition counts of the stream-table join shape (each with the `--instances` counts).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub join_partitions: Vec<i32>,
    /// Rows of the join shape's table (`k0 …`); 0: one per key (`--keys`). A million shows the
    /// memory and disk a large table takes per instance.
    #[arg(long, default_value_t = 0)]
    pub join_table_rows: u64,
    /// A second eosflow binary (e.g. the previous commit's release build) measured in the same
    /// run as the contender `eosflow-eos-baseline`: what eosflow-eos runs at 100 ms commits
    /// (count, windowed, join; same topology and configuration), rounds interleaved, right
    /// after eosflow-eos at each point. Added to `--contenders` when not listed there. The
    /// report gives eosflow exactly-once ÷ the baseline per shape.
    #[arg(long, value_name = "PATH")]
    pub baseline_exe: Option<PathBuf>,
    /// The baseline's name in the report (e.g. its commit id); default: the file name of
    /// `--baseline-exe`.
    #[arg(long, value_name = "TEXT")]
    pub baseline_label: Option<String>,
}

/// The second eosflow binary of a run (`--baseline-exe`) and its name in the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Baseline {
    /// The binary, as an absolute path.
    pub exe: PathBuf,
    /// Its name in the report: `--baseline-label`, else the binary's file name.
    pub label: String,
}

/// Checks `--baseline-exe`, `--baseline-label` and the `eosflow-eos-baseline` contender
/// before anything runs: the binary must be an executable file; the label (or the file name)
/// must be non-empty and fit in a markdown table cell; the label and the contender need the
/// binary. `None` without `--baseline-exe`.
pub fn baseline(args: &BenchArgs) -> Result<Option<Baseline>, BenchError> {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(given) = &args.baseline_exe else {
        if args.baseline_label.is_some() {
            return Err(BenchError::Usage(
                "--baseline-label names the --baseline-exe binary: give --baseline-exe <PATH> too"
                    .into(),
            ));
        }
        if args
            .contenders
            .iter()
            .any(|c| c == Contender::EosflowEosBaseline.name())
        {
            return Err(BenchError::Usage(
                "contender eosflow-eos-baseline needs --baseline-exe <PATH> (the other eosflow binary to measure)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let bad = |why: String| BenchError::Usage(format!("--baseline-exe {}: {why}", given.display()));
    let meta = std::fs::metadata(given).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(bad("not executable (chmod +x)".into()));
    }
    // Absolute: `Command::new` would look a bare name up in PATH.
    let exe = std::fs::canonicalize(given).map_err(|e| bad(e.to_string()))?;
    let label = match &args.baseline_label {
        Some(l) => l.trim().to_string(),
        None => given
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if label.is_empty() || label.contains(['|', '\n', '\r']) {
        return Err(BenchError::Usage(format!(
            "--baseline-label {label:?}: give a non-empty name without `|` or line breaks (it labels the report's rows)"
        )));
    }
    Ok(Some(Baseline { exe, label }))
}

/// The contenders of `--contenders`, in order (unknown names left out: [`run`] refuses them),
/// with `eosflow-eos-baseline` added when `--baseline-exe` is given and it is not listed:
/// right after `eosflow-eos`, so that the two run one after the other at each point, else last.
pub fn contenders(args: &BenchArgs) -> Vec<Contender> {
    let mut list: Vec<Contender> = args
        .contenders
        .iter()
        .filter_map(|c| Contender::parse(c))
        .collect();
    if args.baseline_exe.is_some() && !list.contains(&Contender::EosflowEosBaseline) {
        let at = list
            .iter()
            .position(|c| *c == Contender::EosflowEos)
            .map_or(list.len(), |i| i + 1);
        list.insert(at, Contender::EosflowEosBaseline);
    }
    list
}

/// What the contenders compute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Per-key running count and sum, one output per input (`--topology count`, `CountPeer`).
    #[default]
    Count,
    /// Count and sum per key in tumbling event-time windows, one output per window when it
    /// closes (`--topology windowed-sum`, `WindowPeer`): see [`windowed`].
    Windowed,
    /// Each record inner-joined by key with a co-partitioned table, one output per input
    /// (`--topology stream-table-join`, `JoinPeer`): see [`join`].
    Join,
}

impl Shape {
    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Count => "count",
            Shape::Windowed => "windowed",
            Shape::Join => "join",
        }
    }

    /// Parses a name from [`Shape::name`].
    pub fn parse(s: &str) -> Option<Self> {
        [Shape::Count, Shape::Windowed, Shape::Join]
            .into_iter()
            .find(|c| c.name() == s)
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Point {
    /// What is computed.
    pub shape: Shape,
    /// Who.
    #[serde(serialize_with = "ser_contender")]
    pub contender: Contender,
    /// Partitions of input and output.
    pub partitions: i32,
    /// Instances (processes).
    pub instances: usize,
    /// Commit interval (ms) of eosflow and Kafka Streams.
    pub commit_interval_ms: u64,
}

fn ser_contender<S: serde::Serializer>(c: &Contender, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// What one run of one point measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    /// The point.
    pub point: Point,
    /// Round (1-based).
    pub round: usize,
    /// Steady-state records/s over all partitions.
    pub records_per_sec: f64,
    /// Per partition.
    pub per_partition: f64,
    /// Latencies of the paced records, ms, sorted.
    pub latencies_ms: Vec<f64>,
    /// Outputs seen more than once (at-least-once repeats).
    pub repeats: u64,
    /// Peak resident memory of the largest instance (MiB, `VmHWM`): the memory bound per
    /// instance, reported beside its throughput.
    pub peak_rss_mib: f64,
    /// The windowed shape's per-partition rates and its check of the window results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<WindowCheck>,
    /// The join shape's per-partition rates and its check of the join results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinCheck>,
}

/// What a windowed point measured beside its throughput.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WindowCheck {
    /// Steady-state records/s of each partition (committed offsets, 10th→90th percentile).
    pub partition_rates: Vec<f64>,
    /// The window results the input implies.
    pub expected: windowed::Expected,
    /// The committed window results once every window was closed.
    pub emitted: windowed::Emitted,
    /// Whether they are exactly the expected ones.
    pub ok: bool,
}

/// What a join point measured beside its throughput.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JoinCheck {
    /// Steady-state records/s of each partition (committed offsets, 10th→90th percentile).
    pub partition_rates: Vec<f64>,
    /// Rows in the table.
    pub table_rows: u64,
    /// Results the backlog implies (one per record) and the sum of their amounts.
    pub expected: (u64, i64),
    /// The committed results.
    pub joined: join::Joined,
    /// Whether they are exactly the expected ones.
    pub ok: bool,
    /// Disk used by the largest instance's state directory at the end (MiB).
    pub state_disk_mib: f64,
}

/// The whole run's results.
#[derive(Debug, Default, serde::Serialize)]
pub struct Results {
    /// Settings, for the report header.
    pub settings: Vec<(String, String)>,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Points that failed, with why.
    pub failures: Vec<(String, String)>,
    /// Recovery: contender → seconds from restart to all partitions processing, per round.
    pub recovery: Vec<(String, Vec<f64>)>,
    /// Restore alone and failover: one entry per timed takeover.
    pub takeovers: Vec<restore::Takeover>,
    /// The second eosflow binary measured (`--baseline-exe`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// eosflow exactly-once ÷ the baseline per shape, partitions and instances (filled in
    /// before the report is written; empty without a baseline).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub baseline_ratios: Vec<report::BaselineRatio>,
    /// eosflow exactly-once ÷ the best Kafka Streams configuration per shape, partitions and
    /// instances (filled in before the report is written; empty without Kafka Streams samples).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kafka_streams_ratios: Vec<report::KafkaStreamsRatio>,
}

/// The `--shapes` entries that are takeover benchmarks rather than throughput shapes.
const TAKEOVERS: [&str; 2] = ["restore", "failover"];

/// The grid of points, in run order within a round.
pub fn plan(args: &BenchArgs) -> Vec<Point> {
    let contenders = contenders(args);
    let shapes: Vec<Shape> = args.shapes.iter().filter_map(|s| Shape::parse(s)).collect();
    let mut points = vec![];
    let count = shapes.contains(&Shape::Count);
    for &p in args.partitions.iter().filter(|_| count) {
        for &n in &args.instances {
            if n as i32 > p {
                continue;
            }
            for &c in &contenders {
                points.push(Point {
                    shape: Shape::Count,
                    contender: c,
                    partitions: p,
                    instances: n,
                    commit_interval_ms: 100,
                });
            }
        }
    }
    for (shape, partitions) in [
        (Shape::Windowed, &args.windowed_partitions),
        (Shape::Join, &args.join_partitions),
    ] {
        if !shapes.contains(&shape) {
            continue;
        }
        for &p in partitions {
            for &n in &args.instances {
                if n as i32 > p {
                    continue;
                }
                for &c in &contenders {
                    if c.is_exactly_once() {
                        points.push(Point {
                            shape,
                            contender: c,
                            partitions: p,
                            instances: n,
                            commit_interval_ms: 100,
                        });
                    }
                }
            }
        }
    }
    if count && contenders.contains(&Contender::EosflowEos) {
        let mid = args.partitions[args.partitions.len() / 2];
        for &ci in &args.commit_intervals {
            if ci != 100 {
                points.push(Point {
                    shape: Shape::Count,
                    contender: Contender::EosflowEos,
                    partitions: mid,
                    instances: 1,
                    commit_interval_ms: ci,
                });
            }
        }
    }
    points
}

/// Runs the whole benchmark and writes the report; returns the results.
pub fn run(config: &Config, args: &BenchArgs) -> Result<Results, BenchError> {
    if args.partitions.is_empty()
        || args.windowed_partitions.is_empty()
        || args.join_partitions.is_empty()
        || args.instances.is_empty()
        || args.repeats == 0
        || args.restore_restarts == 0
        || args.failover_repeats == 0
        || args.failover_partitions < 2
        || args.threads == 0
    {
        return Err(BenchError::Instance(
            "--partitions, --windowed-partitions, --join-partitions, --instances and --repeats need at least one value; --restore-restarts, --failover-repeats and --threads at least 1, --failover-partitions at least 2"
                .into(),
        ));
    }
    if args.records < 10 || args.latency_rate == 0 || args.latency_secs == 0 {
        return Err(BenchError::Instance(
            "--records must be ≥ 10, --latency-rate and --latency-secs ≥ 1".into(),
        ));
    }
    if !(1..=1_000).contains(&args.event_time_step_ms) {
        return Err(BenchError::Instance(
            "--event-time-step-ms must be 1 to 1000: the backlog's event times stay in the past"
                .into(),
        ));
    }
    for c in &args.contenders {
        if Contender::parse(c).is_none() {
            return Err(BenchError::Instance(format!(
                "unknown contender {c:?}: use raw-pipe, eosflow-alo, eosflow-eos, eosflow-eos-baseline, kstreams-eos, kstreams-eos-txn, kstreams-eos-streams"
            )));
        }
    }
    let baseline = baseline(args)?;
    for s in &args.shapes {
        if Shape::parse(s).is_none() && !TAKEOVERS.contains(&s.as_str()) {
            return Err(BenchError::Instance(format!(
                "unknown shape {s:?}: use count, windowed, join, restore, failover"
            )));
        }
    }
    let clients = KafkaClients::new(config.kafka.clone());
    let payload = match args.payload.as_str() {
        "avro" => {
            let id = workload::use_avro(&config.schema_registry.url)?;
            format!(
                "Avro orders.order-placed.v1 (schema id {id}, {} B)",
                workload::value(0)?.len()
            )
        }
        "text" => format!("padded decimal text ({} B)", workload::VALUE_BYTES),
        other => {
            return Err(BenchError::Instance(format!(
                "--payload {other:?}: use `avro` or `text`"
            )))
        }
    };
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Instance(format!("locating the eosflow binary: {e}")))?;
    let wants_peer = contenders(args).iter().any(|c| c.is_kafka_streams());
    let peer = if wants_peer {
        eprintln!("bench: building the Kafka Streams peer (benches/peer/build)");
        Some(contender::build_peer(&args.repo)?)
    } else {
        None
    };
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::Report(e.to_string()))?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut results = Results {
        settings: vec![
            ("run".into(), run_id.clone()),
            ("records per point".into(), args.records.to_string()),
            ("keys".into(), args.keys.to_string()),
            ("values".into(), payload),
            ("build".into(), args.build.clone()),
        ]
        .into_iter()
        .chain(baseline.iter().map(|b| {
            (
                "baseline".into(),
                format!(
                    "{} = `{}` (contender eosflow-eos-baseline)",
                    b.label,
                    b.exe.display()
                ),
            )
        }))
        .chain([
            ("repeats".into(), args.repeats.to_string()),
            (
                "latency phase".into(),
                format!("{} rec/s for {} s", args.latency_rate, args.latency_secs),
            ),
            ("bootstrap".into(), config.kafka.bootstrap.clone()),
            ("broker".into(), broker_version(&args.repo)),
        ])
        // Each contender's RocksDB memory per instance, beside the peak RSS the tables give.
        .chain(wants_peer.then(|| {
            (
                "Kafka Streams".into(),
                report::kstreams_setting(
                    contender::peer_version(&args.repo).as_deref(),
                    args.kstreams_memory_bytes,
                ),
            )
        }))
        .chain(wants_peer.then(|| {
            (
                "Kafka Streams configurations".into(),
                format!(
                    "{}; every eosflow ÷ Kafka Streams ratio is against the best of those measured at its point",
                    report::kstreams_configurations(&contenders(args))
                ),
            )
        }))
        .chain(contenders(args).iter().any(|c| c.is_eosflow()).then(|| {
            (
                "eosflow state".into(),
                report::eosflow_memory_setting(eosflow_state_memory_bytes()),
            )
        }))
        .chain([
            (
                "windowed shape".into(),
                format!(
                    "tumbling {} s windows, {} s grace, count + sum per key, emitted on close; event time {} ms per record",
                    windowed::SIZE_MS / 1000,
                    windowed::GRACE_MS / 1000,
                    args.event_time_step_ms
                ),
            ),
            (
                "join shape".into(),
                format!(
                    "inner join with a table of {} rows of {} B, co-partitioned",
                    join_rows(args),
                    join::ROW_BYTES
                ),
            ),
            (
                "restore / failover".into(),
                format!(
                    "{} keys in 1 partition, {} restarts per case / {} keys over {} partitions, 2 instances, {} rounds per case",
                    args.restore_keys,
                    args.restore_restarts,
                    args.failover_keys,
                    args.failover_partitions,
                    args.failover_repeats
                ),
            ),
        ])
        .collect(),
        baseline: baseline.clone(),
        ..Results::default()
    };
    let points = plan(args);
    let mut profiled = !args.perf;
    let mut profiled_windowed = !args.perf;
    let mut profiled_join = !args.perf;
    let mut load = load::LoadSamples::default();
    for round in 1..=args.repeats {
        for (i, point) in points.iter().enumerate() {
            load.sample();
            let launch = Launch {
                shape: point.shape,
                exe: exe.clone(),
                baseline_exe: baseline.as_ref().map(|b| b.exe.clone()),
                peer_classpath: peer.clone(),
                schema: args.repo.join(contender::SCHEMA),
                bootstrap: config.kafka.bootstrap.clone(),
                app_id: format!("bench-{run_id}-{round}-{i}"),
                input: format!("bench-{run_id}-{round}-{i}.input"),
                output: format!("bench-{run_id}-{round}-{i}.output"),
                commit_interval_ms: point.commit_interval_ms,
                dir: args.out.join("runs").join(format!("{run_id}-{round}-{i}")),
                standby_replicas: 0,
                threads: if point.shape == Shape::Count {
                    args.threads
                } else {
                    1
                },
                kstreams_memory_bytes: args.kstreams_memory_bytes,
            };
            let started = Instant::now();
            let outcome = if point.shape == Shape::Join {
                let profile = !profiled_join
                    && point.contender == Contender::EosflowEos
                    && point.partitions == args.join_partitions[args.join_partitions.len() / 2]
                    && point.instances == 1;
                profiled_join |= profile;
                run_polled_point(config, &clients, args, (*point, round), &launch, profile)
            } else if point.shape == Shape::Windowed {
                let profile = !profiled_windowed
                    && point.contender == Contender::EosflowEos
                    && point.partitions
                        == args.windowed_partitions[args.windowed_partitions.len() / 2]
                    && point.instances == 1;
                profiled_windowed |= profile;
                run_polled_point(config, &clients, args, (*point, round), &launch, profile)
            } else {
                let profile = !profiled
                    && point.contender == Contender::EosflowEos
                    && point.partitions == args.partitions[args.partitions.len() / 2]
                    && point.instances == 1;
                profiled |= profile;
                run_point(&clients, args, *point, round, &launch, profile)
            };
            let deleted = workload::delete_topics_with_prefix(&clients, &launch.app_id);
            if let Err(e) = &deleted {
                eprintln!("bench: {e}");
            }
            let _ = std::fs::remove_dir_all(launch.dir.join("state-i0"));
            let _ = std::fs::remove_dir_all(launch.dir.join("state-i1"));
            match outcome {
                Ok(s) if point.shape == Shape::Windowed => {
                    eprintln!(
                        "bench: round {round} windowed {:<13} P={} inst={}: {:>9.0} rec/s/partition, {} ({:.0} s)",
                        point.contender.name(),
                        point.partitions,
                        point.instances,
                        s.per_partition,
                        s.windows.as_ref().map_or_else(String::new, |w| format!(
                            "{} of {} window results{}",
                            w.emitted.windows,
                            w.expected.windows,
                            if w.ok { "" } else { " — WRONG" }
                        )),
                        started.elapsed().as_secs_f64()
                    );
                    results.samples.push(s);
                }
                Ok(s) if point.shape == Shape::Join => {
                    eprintln!(
                        "bench: round {round} join {:<13} P={} inst={}: {:>9.0} rec/s/partition, {} ({:.0} s)",
                        point.contender.name(),
                        point.partitions,
                        point.instances,
                        s.per_partition,
                        s.join.as_ref().map_or_else(String::new, |j| format!(
                            "{} of {} join results{}",
                            j.joined.results,
                            j.expected.0,
                            if j.ok { "" } else { " — WRONG" }
                        )),
                        started.elapsed().as_secs_f64()
                    );
                    results.samples.push(s);
                }
                Ok(s) => {
                    eprintln!(
                        "bench: round {round} {:<13} P={} inst={} ci={:>3}ms: {:>9.0} rec/s/partition, p50 {:.1} ms, p99 {:.1} ms ({:.0} s)",
                        point.contender.name(),
                        point.partitions,
                        point.instances,
                        point.commit_interval_ms,
                        s.per_partition,
                        report::percentile(&s.latencies_ms, 50.0),
                        report::percentile(&s.latencies_ms, 99.0),
                        started.elapsed().as_secs_f64()
                    );
                    results.samples.push(s);
                }
                Err(e) => {
                    eprintln!("bench: round {round} {point:?} FAILED: {e}");
                    results
                        .failures
                        .push((format!("round {round} {point:?}"), e.to_string()));
                }
            }
        }
    }
    if args.recovery_keys > 0 {
        results.recovery = recovery::run(&clients, args, &exe, peer.as_deref(), &run_id)?;
    }
    let wants = |s: &str| args.shapes.iter().any(|x| x == s);
    if args.restore_keys > 0 && wants("restore") {
        let (done, failed) = restore::run(&clients, args, &exe, peer.as_deref(), &run_id);
        results.takeovers.extend(done);
        results.failures.extend(failed);
    }
    if args.failover_keys > 0 && wants("failover") {
        let (done, failed) = restore::failover(&clients, args, &exe, peer.as_deref(), &run_id);
        results.takeovers.extend(done);
        results.failures.extend(failed);
    }
    load.sample();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    if let Some(line) = load.summary(cores) {
        results.settings.push(("machine load".into(), line));
    }
    results.baseline_ratios = report::baseline_ratios(&results);
    results.kafka_streams_ratios = report::kafka_streams_ratios(&results);
    report::write(args, &results)?;
    Ok(results)
}

pub(crate) fn topic_specs(
    point: &Point,
    launch: &Launch,
    config_levels: &[String],
) -> Vec<TopicSpec> {
    let p = point.partitions;
    let mut specs: Vec<TopicSpec> = vec![
        TopicSpec::new(launch.input.clone(), p, "delete"),
        TopicSpec::new(launch.output.clone(), p, "delete"),
    ];
    if point.contender.is_eosflow() {
        specs.extend(
            config_levels
                .iter()
                .filter(|t| **t != launch.input)
                .map(|t| TopicSpec::new(t.clone(), p, "delete")),
        );
        specs.push(TopicSpec::new(
            format!("{}-count-changelog", launch.app_id),
            p,
            "compact",
        ));
    }
    specs
}

/// Waits for `cond` (checked every 20 ms) while every instance stays alive.
pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    instances: &mut [Instance],
    mut cond: impl FnMut() -> bool,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return Ok(());
        }
        for i in instances.iter_mut() {
            i.check_alive()?;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout(format!(
                "{what} (after {} s)",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long a point's instances get to join the group, and then to process their probes.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `point`'s instances of its contender and waits until every one has joined the group.
fn start_joined(point: Point, launch: &Launch) -> Result<Vec<Instance>, BenchError> {
    let mut instances: Vec<Instance> = (0..point.instances)
        .map(|i| contender::spawn(point.contender, launch, i))
        .collect::<Result<_, _>>()?;
    let logs: Vec<PathBuf> = instances.iter().map(|i| i.log.clone()).collect();
    wait_until("instances joined", START_TIMEOUT, &mut instances, || {
        all_joined(&logs)
    })?;
    Ok(instances)
}

/// Whether every instance's log shows it took part in a rebalance (joined the group).
pub(crate) fn all_joined(logs: &[PathBuf]) -> bool {
    logs.iter().all(|log| {
        std::fs::read_to_string(log)
            .map(|s| s.contains("partitions assigned") || s.contains("RUNNING"))
            .unwrap_or(false)
    })
}

fn run_point(
    clients: &KafkaClients,
    args: &BenchArgs,
    point: Point,
    round: usize,
    launch: &Launch,
    profile: bool,
) -> Result<Sample, BenchError> {
    let levels = eosflow::internals::retry::ladder_topics(
        std::slice::from_ref(&launch.input),
        eosflow::internals::retry::RetryPolicy::default().levels(),
    );
    workload::create_topics(clients, &topic_specs(&point, launch, &levels))?;
    workload::probes(clients, &launch.input, point.partitions, 0)?;
    let backlog = workload::Backlog::write(
        clients,
        &launch.input,
        (args.records, args.keys),
        &format!("{}-backlog", launch.app_id),
        None,
    )?;
    let reader = Reader::start(clients, &launch.output, point.partitions)?;
    let mut instances = start_joined(point, launch)?;
    wait_until("probes processed", START_TIMEOUT, &mut instances, || {
        reader.counts().2 >= point.partitions as usize
    })?;
    // A second member's rebalance may still be settling: give it a moment.
    std::thread::sleep(Duration::from_secs(if point.instances > 1 { 3 } else { 1 }));
    let perf = if profile {
        instances
            .first()
            .and_then(Instance::pid)
            .and_then(|pid| report::start_perf(pid, &args.out.join("perf-eosflow-eos.data")))
    } else {
        None
    };
    backlog.release()?;
    let n = args.records as usize;
    let drain_timeout = Duration::from_secs(120 + args.records / 500);
    wait_until("backlog processed", drain_timeout, &mut instances, || {
        reader.counts().0 >= n
    })?;
    if let Some(perf) = perf {
        report::stop_perf(
            perf,
            &args.out.join("perf-eosflow-eos.data"),
            &args.out.join("perf-eosflow-eos.txt"),
        );
    }
    let paced_n = args.latency_rate * args.latency_secs;
    let sent = workload::paced(
        clients,
        &launch.input,
        paced_n,
        args.latency_rate,
        args.keys,
    )?;
    wait_until(
        "paced records processed",
        Duration::from_secs(120),
        &mut instances,
        || reader.counts().1 >= paced_n as usize,
    )?;
    let peak_rss_mib = peak_rss(&instances);
    for i in instances.iter_mut() {
        i.kill9();
    }
    let seen = reader.finish()?;
    let mut arrivals = seen.backlog.clone();
    arrivals.sort_unstable();
    let lo = arrivals[(n / 10).min(n - 1)];
    let hi = arrivals[(n * 9 / 10).min(n - 1)];
    let span = (hi.saturating_sub(lo)) as f64 / 1e6;
    let counted = (n * 9 / 10 - n / 10) as f64;
    let records_per_sec = if span > 0.0 { counted / span } else { 0.0 };
    let mut latencies_ms: Vec<f64> = sent
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            seen.paced
                .get(&(i as u64))
                .map(|a| a.saturating_sub(*s) as f64 / 1000.0)
        })
        .collect();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(Sample {
        point,
        round,
        records_per_sec,
        per_partition: records_per_sec / point.partitions as f64,
        latencies_ms,
        repeats: seen.repeats,
        peak_rss_mib,
        windows: None,
        join: None,
    })
}

/// The peak RSS of the largest instance, MiB.
fn peak_rss(instances: &[Instance]) -> f64 {
    instances
        .iter()
        .filter_map(Instance::peak_rss_bytes)
        .max()
        .map_or(0.0, |b| b as f64 / (1024.0 * 1024.0))
}

/// The join shape's table rows: `--join-table-rows`, else one per key.
pub(crate) fn join_rows(args: &BenchArgs) -> u64 {
    if args.join_table_rows > 0 {
        args.join_table_rows
    } else {
        args.keys
    }
}

/// Disk used under `dir` (MiB), files only.
fn disk_mib(dir: &std::path::Path) -> f64 {
    fn walk(dir: &std::path::Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    walk(dir) as f64 / (1024.0 * 1024.0)
}

/// One point of a shape measured from committed offsets — windowed (see [`windowed`]) or join
/// (see [`join`]): fresh topics (the join's table loaded and committed) → a probe per
/// partition at the first event time → the backlog, event times `--event-time-step-ms` apart,
/// in an open transaction → instances start, join and commit the probes → the backlog is
/// committed and the committed offsets are polled until it is all processed → windowed: one
/// record per partition far ahead in event time closes every window → the committed results
/// are checked.
fn run_polled_point(
    config: &Config,
    clients: &KafkaClients,
    args: &BenchArgs,
    (point, round): (Point, usize),
    launch: &Launch,
    profile: bool,
) -> Result<Sample, BenchError> {
    let p = point.partitions;
    let table = join::table_topic(&launch.input);
    let mut specs = vec![
        TopicSpec::new(launch.input.clone(), p, "delete"),
        TopicSpec::new(launch.output.clone(), p, "delete"),
    ];
    if point.shape == Shape::Join {
        specs.push(TopicSpec::new(table.clone(), p, "compact"));
    }
    if point.contender.is_eosflow() {
        let mut app = config.clone();
        app.app.id = launch.app_id.clone();
        let url = &config.schema_registry.url;
        let topology = if point.shape == Shape::Join {
            join::topology(&launch.input, &launch.output, url)
        } else {
            windowed::topology(&launch.input, &launch.output, url)
        }
        .map_err(|e| BenchError::Instance(format!("the {} topology: {e}", point.shape.name())))?;
        specs.extend(topology.internal_topics(&app, p));
    }
    workload::create_topics(clients, &specs)?;
    // Three hours back, on a window boundary: every event time is in the past (the broker
    // refuses timestamps too far ahead) and well inside the topics' retention.
    let base = windowed::window_start(eosflow::internals::clock::now_ms() - 3 * 3_600_000);
    if point.shape == Shape::Join {
        // Before every input record in time: a stream record waits for the table's rows.
        join::load_table(clients, &table, join_rows(args), base - 1_000)?;
    }
    workload::probes_at(clients, &launch.input, p, 0, Some(base))?;
    let backlog = workload::Backlog::write(
        clients,
        &launch.input,
        (args.records, args.keys),
        &format!("{}-backlog", launch.app_id),
        Some((base, args.event_time_step_ms)),
    )?;
    let poller = windowed::OffsetPoller::start(clients, &launch.app_id, &launch.input, p)?;
    let mut instances = start_joined(point, launch)?;
    let at_least = |want: &[i64], got: &[i64]| {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g >= w)
    };
    // Every probe processed and its offset committed (the backlog is not visible yet).
    let probed = vec![1; p as usize];
    wait_until("probes committed", START_TIMEOUT, &mut instances, || {
        at_least(&probed, &poller.latest())
    })?;
    std::thread::sleep(Duration::from_secs(if point.instances > 1 { 3 } else { 1 }));
    let from = poller.latest();
    let perf_data = args
        .out
        .join(format!("perf-eosflow-{}.data", point.shape.name()));
    let perf = if profile {
        instances
            .first()
            .and_then(Instance::pid)
            .and_then(|pid| report::start_perf(pid, &perf_data))
    } else {
        None
    };
    backlog.release()?;
    // The backlog ends before its transaction's commit marker (the high watermark's last offset).
    let high = |part: i32| {
        eosflow::internals::kafka::reader::watermarks(
            clients,
            &launch.input,
            part,
            Duration::from_secs(30),
        )
        .map(|(_, h)| h)
        .map_err(|e| BenchError::Kafka(format!("watermarks of {}: {e}", launch.input)))
    };
    let ends: Vec<i64> = (0..p)
        .map(|part| high(part).map(|h| h - 1))
        .collect::<Result<_, _>>()?;
    let drain_timeout = Duration::from_secs(120 + args.records / 500);
    wait_until("backlog processed", drain_timeout, &mut instances, || {
        at_least(&ends, &poller.latest())
    })?;
    if let Some(perf) = perf {
        report::stop_perf(
            perf,
            &perf_data,
            &args
                .out
                .join(format!("perf-eosflow-{}.txt", point.shape.name())),
        );
    }
    let (peak_rss_mib, windows, join) = if point.shape == Shape::Join {
        let peak = peak_rss(&instances);
        let state_disk_mib = (0..point.instances)
            .map(|i| disk_mib(&launch.dir.join(format!("state-i{i}"))))
            .fold(0.0, f64::max);
        let want = join::expected(args.records);
        // Everything is committed once the offsets are: read until the results are complete (a
        // mismatch is reported, not retried forever).
        let deadline = Instant::now() + Duration::from_secs(20);
        let got = loop {
            let got = join::joined(clients, &launch.output)?;
            if got.results >= want.0 || Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let ok = got.results == want.0 && got.amount == want.1 && got.wrong_rows == 0;
        let check = JoinCheck {
            partition_rates: Vec::new(),
            table_rows: join_rows(args),
            expected: want,
            joined: got,
            ok,
            state_disk_mib,
        };
        (peak, None, Some(check))
    } else {
        // Close every window: one record per partition a minute of event time past the last.
        let last = base + (args.records.saturating_sub(1) as i64) * args.event_time_step_ms;
        workload::probes_at(
            clients,
            &launch.input,
            p,
            p as u64,
            Some(last + windowed::CLOSE_AHEAD_MS),
        )?;
        let closed: Vec<i64> = (0..p).map(high).collect::<Result<_, _>>()?;
        wait_until(
            "the closing records processed",
            Duration::from_secs(120),
            &mut instances,
            || at_least(&closed, &poller.latest()),
        )?;
        let peak = peak_rss(&instances);
        let want = windowed::expected(
            (args.records, args.keys),
            p,
            (base, args.event_time_step_ms),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let got = loop {
            let got = windowed::emitted(clients, &launch.output)?;
            if got.windows >= want.windows || Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let check = WindowCheck {
            partition_rates: Vec::new(),
            expected: want,
            emitted: got,
            ok: got.matches(&want),
        };
        (peak, Some(check), None)
    };
    for i in instances.iter_mut() {
        i.kill9();
    }
    let polls = poller.finish();
    let rates = windowed::rates(&polls, &from, &ends)?;
    let total = windowed::total_rate(&polls, &from, &ends)?;
    let per_partition = total / f64::from(p);
    Ok(Sample {
        point,
        round,
        records_per_sec: total,
        per_partition,
        latencies_ms: Vec::new(),
        repeats: windows.as_ref().map_or(0, |w| w.emitted.duplicates),
        peak_rss_mib,
        windows: windows.map(|w| WindowCheck {
            partition_rates: rates.clone(),
            ..w
        }),
        join: join.map(|j| JoinCheck {
            partition_rates: rates.clone(),
            ..j
        }),
    })
}

/// `state.memory_bytes` of the eosflow instances a run starts, for the report. They get no
/// `--config`: they load the defaults, `EOSFLOW_CONFIG_FILE` and the `EOSFLOW_*` environment
/// they inherit from this process (`EOSFLOW_STATE_MEMORY_BYTES`), so that is loaded here too,
/// not the configuration `eosflow bench` itself was given.
pub fn eosflow_state_memory_bytes() -> Result<u64, String> {
    let file = std::env::var_os("EOSFLOW_CONFIG_FILE")
        .filter(|f| !f.is_empty())
        .map(PathBuf::from);
    Config::load(file.as_deref())
        .map(|c| c.state.memory_bytes)
        .map_err(|e| e.to_string())
}

/// The broker the report ran on, for its header: `EOSFLOW_BENCH_BROKER` when set (a broker
/// other than the local stack's), else the Apache Kafka version of the distribution
/// `dev/stack` runs (`dev/stack kafka-home`: `…/kafka-<version>`, holding
/// `libs/kafka-server-<version>.jar`).
pub fn broker_version(repo: &std::path::Path) -> String {
    if let Ok(b) = std::env::var("EOSFLOW_BENCH_BROKER") {
        if !b.trim().is_empty() {
            return b.trim().to_string();
        }
    }
    let home = std::process::Command::new(repo.join("dev/stack"))
        .arg("kafka-home")
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let version = home.as_deref().and_then(|h| {
        std::fs::read_dir(std::path::Path::new(h).join("libs"))
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find_map(|n| {
                n.strip_prefix("kafka-server-")?
                    .strip_suffix(".jar")
                    .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                    .map(str::to_string)
            })
    });
    match version {
        Some(v) => format!("Apache Kafka {v} (dev/stack, one KRaft node)"),
        None => {
            "unknown (dev/stack kafka-home gave no Kafka distribution; set EOSFLOW_BENCH_BROKER)"
                .to_string()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `eosflow bench <argv>` as clap parses it.
    pub(crate) fn args(argv: &[&str]) -> BenchArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
            .expect("the arguments parse")
            .bench
    }

    /// A scratch directory of this test process, created empty.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("eosflow-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    fn file(dir: &std::path::Path, name: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    fn usage(args: &BenchArgs) -> String {
        match baseline(args) {
            Err(BenchError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn kafka_streams_keeps_its_rocksdb_defaults_unless_given_a_budget() {
        assert_eq!(args(&[]).kstreams_memory_bytes, 0);
        assert_eq!(
            args(&["--kstreams-memory-bytes", "134217728"]).kstreams_memory_bytes,
            134_217_728
        );
        for bad in ["-1", "128MiB", ""] {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                bench: BenchArgs,
            }
            assert!(
                <Cli as clap::Parser>::try_parse_from(["bench", "--kstreams-memory-bytes", bad])
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn without_a_baseline_nothing_changes() {
        let a = args(&[]);
        assert_eq!(baseline(&a).ok(), Some(None));
        assert_eq!(
            contenders(&a),
            [
                Contender::Raw,
                Contender::EosflowAlo,
                Contender::EosflowEos,
                Contender::KafkaStreams,
                Contender::KafkaStreamsTxn,
                Contender::KafkaStreamsStreams
            ]
        );
        assert!(plan(&a)
            .iter()
            .all(|p| p.contender != Contender::EosflowEosBaseline));
    }

    #[test]
    fn the_baseline_needs_an_executable_file() {
        let dir = scratch("baseline-args");
        let exe = file(&dir, "eosflow-6bf8937", 0o755);
        let plain = file(&dir, "not-executable", 0o644);

        // The label and the contender need the binary.
        let m = usage(&args(&["--baseline-label", "old"]));
        assert!(m.contains("--baseline-exe"), "{m}");
        let m = usage(&args(&["--contenders", "eosflow-eos,eosflow-eos-baseline"]));
        assert!(
            m.contains("eosflow-eos-baseline") && m.contains("--baseline-exe"),
            "{m}"
        );
        // Missing, a directory, not executable: each names the flag and the path.
        for (path, why) in [
            (dir.join("missing"), "No such file"),
            (dir.clone(), "not a file"),
            (plain, "not executable"),
        ] {
            let m = usage(&args(&["--baseline-exe", &path.to_string_lossy()]));
            assert!(
                m.starts_with(&format!("--baseline-exe {}", path.display())) && m.contains(why),
                "{m}"
            );
        }
        // The label defaults to the file name; the path is made absolute.
        let b = baseline(&args(&["--baseline-exe", &exe.to_string_lossy()]))
            .expect("valid")
            .expect("a baseline");
        assert_eq!(b.label, "eosflow-6bf8937");
        assert!(b.exe.is_absolute(), "{b:?}");
        assert_eq!(b.exe, std::fs::canonicalize(&exe).expect("canonical"));
        let b = baseline(&args(&[
            "--baseline-exe",
            &exe.to_string_lossy(),
            "--baseline-label",
            " 6bf8937 ",
        ]))
        .expect("valid")
        .expect("a baseline");
        assert_eq!(b.label, "6bf8937");
        // A label that would break the report's tables.
        for bad in ["", "a|b", "a\nb"] {
            let m = usage(&args(&[
                "--baseline-exe",
                &exe.to_string_lossy(),
                "--baseline-label",
                bad,
            ]));
            assert!(m.contains("--baseline-label"), "{m}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_baseline_runs_right_after_eosflow_eos_wherever_it_runs_at_100_ms() {
        let a = args(&["--baseline-exe", "/bin/true"]);
        assert_eq!(
            contenders(&a),
            [
                Contender::Raw,
                Contender::EosflowAlo,
                Contender::EosflowEos,
                Contender::EosflowEosBaseline,
                Contender::KafkaStreams,
                Contender::KafkaStreamsTxn,
                Contender::KafkaStreamsStreams
            ]
        );
        // Listed explicitly: kept where it is, not added twice; without eosflow-eos: last.
        let a = args(&[
            "--baseline-exe",
            "/bin/true",
            "--contenders",
            "eosflow-eos-baseline,eosflow-eos",
        ]);
        assert_eq!(
            contenders(&a),
            [Contender::EosflowEosBaseline, Contender::EosflowEos]
        );
        let a = args(&["--baseline-exe", "/bin/true", "--contenders", "raw-pipe"]);
        assert_eq!(
            contenders(&a),
            [Contender::Raw, Contender::EosflowEosBaseline]
        );

        let a = args(&["--baseline-exe", "/bin/true"]);
        let points = plan(&a);
        let eos: Vec<Point> = points
            .iter()
            .filter(|p| p.contender == Contender::EosflowEos && p.commit_interval_ms == 100)
            .copied()
            .collect();
        let base: Vec<Point> = points
            .iter()
            .filter(|p| p.contender == Contender::EosflowEosBaseline)
            .copied()
            .collect();
        // Every shape, partitions and instances of eosflow-eos at 100 ms, and nothing else:
        // the commit interval sweep is eosflow-eos's alone.
        let same = |p: &Point| Point {
            contender: Contender::EosflowEos,
            ..*p
        };
        assert_eq!(base.iter().map(same).collect::<Vec<_>>(), eos);
        for shape in [Shape::Count, Shape::Windowed, Shape::Join] {
            assert!(base.iter().any(|p| p.shape == shape), "{shape:?}");
        }
        // Each right after eosflow-eos's point (interleaved within every round).
        for (i, p) in points.iter().enumerate() {
            if p.contender == Contender::EosflowEosBaseline {
                assert_eq!(points[i - 1], same(p));
            }
        }
        // Without it, the plan is the same minus its points.
        let without: Vec<Point> = points
            .into_iter()
            .filter(|p| p.contender != Contender::EosflowEosBaseline)
            .collect();
        assert_eq!(without, plan(&args(&[])));
    }
}
