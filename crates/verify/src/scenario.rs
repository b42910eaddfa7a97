//! The named fault scenarios of `eosflow verify --scenario <name> [--short]`: each a fixed,
//! documented shape (records, partitions, instances, faults), a long version that earns trust
//! and a short one small enough for `make test`, and one closing line a person or CI can read.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::cluster::{self, Cluster};
use super::faults::Fault;
use super::stack::PrivateStack;
use super::{VerifyOptions, VerifyReport, Workload};
use eosflow::config::Config;

/// A named scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Random `kill -9` of processor instances.
    KillProcessors,
    /// The broker is stopped and restarted mid-run (a private broker).
    BrokerRestart,
    /// An instance is frozen past the session timeout, then resumed: it must be fenced.
    Zombie,
    /// The outbox router is killed many times and Postgres restarted once (private Postgres).
    OutboxCrash,
    /// A corpus of bad-input classes interleaved with good records.
    Poison,
    /// The broker process is frozen past the transaction timeout, several times, under load.
    BrokerPause,
    /// Now and then a handler call takes longer than the transaction timeout (plus kill -9s).
    SlowHandler,
    /// Outbox rows the router cannot write (oversize, unwritable topic) among good ones.
    OutboxOversize,
    /// One key's head dead-lettered under `park` while thousands of its followers arrive.
    ParkedFlood,
    /// An instance kept away past its changelog's delete retention while its keys are deleted.
    StaleStore,
    /// Event-time windows: on-close counts with out-of-order and late records, kill -9s.
    Windows,
    /// A stream-table join whose table updates race the stream, kill -9s.
    Joins,
    /// Instances joining and leaving every few seconds under load: graceful stops, starts and
    /// kill -9s picked by a seeded RNG.
    RebalanceStorm,
    /// A join → re-key → window topology over a backlog produced before the instances start,
    /// two instances kill -9ed in turn: no record may be made late.
    RepartitionBacklog,
    /// Three-broker cluster: the broker leading most partitions is stopped and restarted, again
    /// and again, cleanly and then with `kill -9`.
    LeaderBounce,
    /// Three-broker cluster: the transaction coordinator of the instances is `kill -9`ed
    /// mid-transaction and restarted, again and again.
    CoordinatorBounce,
    /// Three-broker cluster: one broker at a time frozen past the transaction timeout.
    BrokerPauseOne,
    /// Every record schedules a wall-clock timeout whose callback emits its result; the
    /// partitions fall silent one after the other, the (private) broker is frozen past the
    /// transaction timeout while timers are due, and instances are kill -9ed.
    SagaTimeouts,
    /// Three-broker cluster: a follower frozen until it is out of the ISR, then the leader
    /// killed: no partition writable (unclean election off) until the follower is back in sync.
    IsrShrink,
    /// Three-broker cluster and a private Postgres: the outbox router publishing while the
    /// broker leading most of its topics' partitions is stopped and restarted, cleanly and with
    /// `kill -9`.
    OutboxLeaderBounce,
}

impl Scenario {
    /// Every scenario, in the order `--scenario all` runs them.
    pub const ALL: [Scenario; 20] = [
        Scenario::KillProcessors,
        Scenario::BrokerRestart,
        Scenario::Zombie,
        Scenario::OutboxCrash,
        Scenario::Poison,
        Scenario::BrokerPause,
        Scenario::SlowHandler,
        Scenario::OutboxOversize,
        Scenario::ParkedFlood,
        Scenario::StaleStore,
        Scenario::Windows,
        Scenario::Joins,
        Scenario::RebalanceStorm,
        Scenario::RepartitionBacklog,
        Scenario::SagaTimeouts,
        Scenario::LeaderBounce,
        Scenario::CoordinatorBounce,
        Scenario::BrokerPauseOne,
        Scenario::IsrShrink,
        Scenario::OutboxLeaderBounce,
    ];

    /// The name on the command line and in the closing line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::KillProcessors => "kill-processors",
            Scenario::BrokerRestart => "broker-restart",
            Scenario::Zombie => "zombie",
            Scenario::OutboxCrash => "outbox-crash",
            Scenario::Poison => "poison",
            Scenario::BrokerPause => "broker-pause",
            Scenario::SlowHandler => "slow-handler",
            Scenario::OutboxOversize => "outbox-oversize",
            Scenario::ParkedFlood => "parked-flood",
            Scenario::StaleStore => "stale-store",
            Scenario::Windows => "windows",
            Scenario::Joins => "joins",
            Scenario::RebalanceStorm => "rebalance-storm",
            Scenario::RepartitionBacklog => "repartition-backlog",
            Scenario::LeaderBounce => "leader-bounce",
            Scenario::CoordinatorBounce => "coordinator-bounce",
            Scenario::BrokerPauseOne => "broker-pause-one",
            Scenario::SagaTimeouts => "saga-timeouts",
            Scenario::IsrShrink => "isr-shrink",
            Scenario::OutboxLeaderBounce => "outbox-leader-bounce",
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scenario {s:?}: expected one of {}",
                    Scenario::ALL.map(Scenario::name).join(", ")
                )
            })
    }
}

/// What a scenario proved, ending in one line.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// The scenario.
    pub scenario: Scenario,
    /// Distinct records (or outbox rows) that had to come through.
    pub records: u64,
    /// Records with no committed output.
    pub lost: u64,
    /// Committed outputs beyond one per record.
    pub duplicated: u64,
    /// Records in the dead-letter topic.
    pub dlt: u64,
    /// Faults after which the group made no progress for a minute.
    pub stalls: u32,
    /// Every other check passed (state, sequences, DLT reasons, …).
    pub checks_ok: bool,
    /// Further figures, in order: `name=value`.
    pub extra: Vec<(String, String)>,
}

impl ScenarioReport {
    /// Nothing lost, nothing duplicated, no stall, every other check passed — and, for a run
    /// that reports `kills_mid_stream`, at least one of its kills landed mid-stream: a crash
    /// test that crashed nothing in flight must not pass.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.stalls == 0
            && self.checks_ok
            && !self.crashed_nothing_in_flight()
    }

    /// Kills were done (`kills`, a storm's `kill9s`, the outbox's `router_kills`, or the
    /// `faults` of a run that reports `kills_mid_stream`, > 0) but none landed mid-stream
    /// (`kills_mid_stream=0`).
    pub fn crashed_nothing_in_flight(&self) -> bool {
        let figure = |name: &str| {
            self.extra
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        let kills = figure("kills")
            .or_else(|| figure("kill9s"))
            .or_else(|| figure("router_kills"))
            .or_else(|| figure("faults"));
        matches!(
            (kills, figure("kills_mid_stream")),
            (Some(k), Some(0)) if k > 0
        )
    }

    /// From a processor run's report.
    fn from_run(scenario: Scenario, r: &VerifyReport) -> Self {
        let v = &r.verdict;
        let mut extra = vec![
            ("faults".to_string(), r.kills.to_string()),
            (
                "recovery_max_s".to_string(),
                format!("{:.1}", r.max_recovery_s()),
            ),
            (
                "recovery_mean_s".to_string(),
                format!("{:.1}", r.mean_recovery_s()),
            ),
            ("state_mismatches".into(), v.state_mismatches.to_string()),
            ("sequence_breaks".into(), v.sequence_breaks.to_string()),
            ("malformed".into(), v.malformed.to_string()),
            (
                "forward_duplicates".into(),
                v.forward_duplicates.to_string(),
            ),
            ("produced".into(), r.produced.to_string()),
            ("not_produced".into(), v.not_produced.to_string()),
            ("retried_sends".into(), r.produce.retried.to_string()),
            ("monitor_misses".into(), r.monitor_misses.to_string()),
        ];
        if !r.outages.is_empty()
            && matches!(scenario, Scenario::BrokerRestart | Scenario::BrokerPause)
        {
            let max = r
                .outages
                .iter()
                .map(Duration::as_secs_f64)
                .fold(0.0, f64::max);
            extra.push(("broker_outage_max_s".into(), format!("{max:.1}")));
        }
        if matches!(scenario, Scenario::BrokerPause | Scenario::SlowHandler) {
            extra.push((
                "in_place_recoveries".into(),
                r.in_place_recoveries.to_string(),
            ));
        }
        if matches!(scenario, Scenario::Zombie) {
            extra.push(("zombies_fenced".into(), r.zombies_fenced.to_string()));
            extra.push(("fenced_exits".into(), r.fenced_exits.to_string()));
        }
        if matches!(scenario, Scenario::KillProcessors | Scenario::SlowHandler) {
            extra.push(("kills".into(), r.kills.to_string()));
        }
        if let Some(t) = &r.storm {
            extra.extend(super::storm::figures(t, r));
        }
        if matches!(
            scenario,
            Scenario::KillProcessors | Scenario::SlowHandler | Scenario::RebalanceStorm
        ) {
            extra.push(("kills_mid_stream".into(), r.kills_mid_stream.to_string()));
        }
        if let Some(c) = &r.cluster {
            extra.extend([
                ("clean_bounces".into(), c.clean_bounces.to_string()),
                ("hard_bounces".into(), c.hard_bounces.to_string()),
                (
                    "coordinator_bounces".into(),
                    c.coordinator_bounces.to_string(),
                ),
                ("pauses".into(), c.pauses.to_string()),
                (
                    "longest_stall_s".into(),
                    format!("{:.1}", r.max_recovery_s()),
                ),
                (
                    "isr_wait_max_s".into(),
                    format!("{:.1}", c.isr_wait_max_ms as f64 / 1000.0),
                ),
            ]);
        }
        if r.cluster.is_some() {
            extra.push(("waits_seen".into(), r.waits_seen.summary()));
        }
        if let Some(t) = &r.isr {
            let s = |ms: u64| format!("{:.1}", ms as f64 / 1000.0);
            extra.extend([
                ("isr_shrinks".into(), t.shrinks.to_string()),
                ("isr_shrink_max_s".into(), s(t.shrink_max_ms)),
                ("unwritable_max_s".into(), s(t.unwritable_max_ms)),
                ("resume_max_s".into(), s(t.resume_max_ms)),
                (
                    "resumed_without_leader".into(),
                    t.resumed_without_leader.to_string(),
                ),
                ("isr_mid_stream".into(), t.mid_stream.to_string()),
            ]);
        }
        extra.push((
            "elapsed_s".into(),
            format!("{:.1}", r.elapsed.as_secs_f64()),
        ));
        Self {
            scenario,
            records: v.records,
            lost: v.lost,
            duplicated: v.duplicated,
            dlt: r.dlt,
            stalls: r.stalls,
            // A zombie that resumed without any sign of being fenced proves nothing.
            checks_ok: v.ok()
                && (!matches!(scenario, Scenario::Zombie) || r.zombies_fenced == r.kills)
                && r.storm
                    .is_none_or(|t| t.crashes == 0 && t.unclean_stops == 0)
                // Every isr-shrink fault must have been followed by progress with the leader
                // still dead: the instances resumed by themselves.
                && r.isr
                    .is_none_or(|t| t.resumed_without_leader == t.shrinks && t.shrinks == r.kills)
                // ... and an instance's /healthz must have said it waited on a partition (its
                // leader, its in-sync replicas) meanwhile: an operator must see what it waits for.
                && (r.isr.is_none() || r.waits_seen.saw_partition_wait())
                // A shrink on a drained stream proves nothing: every leader kill mid-stream.
                && r.isr.is_none_or(|t| t.mid_stream == t.shrinks),
            extra,
        }
    }
}

impl fmt::Display for ScenarioReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scenario={} records={} lost={} duplicated={} dlt={} stalls={}",
            self.scenario.name(),
            self.records,
            self.lost,
            self.duplicated,
            self.dlt,
            self.stalls
        )?;
        for (k, v) in &self.extra {
            write!(f, " {k}={v}")?;
        }
        write!(f, " ok={}", self.ok())
    }
}

/// Where scenarios find their tools.
#[derive(Debug, Clone)]
pub struct ScenarioEnv {
    /// The `eosflow` binary instances and queries run as.
    pub exe: PathBuf,
    /// Logs and stores of the run.
    pub work_dir: PathBuf,
    /// `dev/stack`, for the private stack of broker and Postgres restarts.
    pub stack_script: PathBuf,
    /// First port of the private stack (Kafka: +0..+2, Postgres: +10).
    pub private_port: u16,
    /// Settings given to every instance of the scenarios that run the counting topology
    /// (`EOSFLOW_PROCESSOR_STANDBY_REPLICAS`, `EOSFLOW_PROCESSOR_THREADS`, …).
    pub instance_env: Vec<(String, String)>,
    /// The rebalance storm's RNG seed (`None`: a random one, printed in the closing line).
    pub storm_seed: Option<u64>,
}

/// The first port of a scenario's three-node cluster, above its private stack's ports: node n
/// listens on it + 10 (n − 1) and the next port (its controller).
const CLUSTER_PORT_OFFSET: u16 = 40;

impl ScenarioEnv {
    /// The scenario's private three-node cluster (`dev/cluster`, beside `dev/stack`).
    fn cluster(&self, scenario: Scenario) -> Cluster {
        let run_dir = std::env::temp_dir().join(format!(
            "eosflow-{}-{}-{}-cluster",
            scenario.name(),
            self.private_port,
            std::process::id()
        ));
        Cluster::new(
            self.stack_script.with_file_name("cluster"),
            run_dir,
            self.private_port + CLUSTER_PORT_OFFSET,
        )
    }

    fn private_stack(&self, scenario: Scenario) -> PrivateStack {
        let run_dir = std::env::temp_dir().join(format!(
            "eosflow-{}-{}-{}",
            scenario.name(),
            self.private_port,
            std::process::id()
        ));
        PrivateStack::new(
            self.stack_script.clone(),
            run_dir,
            self.private_port,
            self.private_port + 10,
        )
    }
}

/// A processor run of the counting topology: shared defaults, the scenario's shape.
fn count_run(
    env: &ScenarioEnv,
    records: u64,
    instances: usize,
    faults: u32,
    duration_secs: u64,
    fault: Fault,
) -> VerifyOptions {
    VerifyOptions {
        workload: Workload {
            records,
            keys: 1_000.min(records / 10).max(1),
            duplicate_every: 50,
            transient_every: 0,
        },
        partitions: 8,
        instances,
        kills: faults,
        fault,
        duration: Duration::from_secs(duration_secs),
        commit_interval_ms: 100,
        exe: env.exe.clone(),
        work_dir: env.work_dir.clone(),
        drain_timeout: Duration::from_secs(600),
        extra_env: env.instance_env.clone(),
        unsendable_every: 0,
    }
}

/// Runs `scenario` (its short version when `short`).
pub fn run(
    config: &Config,
    scenario: Scenario,
    short: bool,
    env: &ScenarioEnv,
) -> Result<ScenarioReport, String> {
    let mut report = run_scenario(config, scenario, short, env)?;
    // The processor settings the instances ran with (threads, standby replicas), first.
    let settings = env.instance_env.iter().filter_map(|(k, v)| {
        let key = k.strip_prefix("EOSFLOW_PROCESSOR_")?.to_lowercase();
        Some((key, v.clone()))
    });
    report.extra.splice(0..0, settings);
    Ok(report)
}

fn run_scenario(
    config: &Config,
    scenario: Scenario,
    short: bool,
    env: &ScenarioEnv,
) -> Result<ScenarioReport, String> {
    match scenario {
        Scenario::KillProcessors => {
            let opts = if short {
                count_run(env, 10_000, 2, 3, 8, Fault::Kill9)
            } else {
                count_run(env, 1_000_000, 3, 50, 600, Fault::Kill9)
            };
            let r = super::run(config, &opts)?;
            Ok(ScenarioReport::from_run(scenario, &r))
        }
        Scenario::Zombie => {
            // Frozen past the 6 s session timeout (short) and also past the 10 s transaction
            // timeout (long): the group and the transaction coordinator both fence it.
            let opts = if short {
                count_run(env, 10_000, 2, 1, 10, Fault::Freeze(Duration::from_secs(9)))
            } else {
                count_run(
                    env,
                    200_000,
                    2,
                    4,
                    90,
                    Fault::Freeze(Duration::from_secs(15)),
                )
            };
            let r = super::run(config, &opts)?;
            Ok(ScenarioReport::from_run(scenario, &r))
        }
        Scenario::BrokerRestart => {
            let stack = env.private_stack(scenario);
            let _guard = stack.up("kafka")?;
            let mut private = config.clone();
            private.kafka.bootstrap = stack.bootstrap();
            let opts = if short {
                count_run(env, 5_000, 2, 1, 6, Fault::BrokerRestart(stack.clone()))
            } else {
                count_run(env, 200_000, 2, 3, 120, Fault::BrokerRestart(stack.clone()))
            };
            let r = super::run(&private, &opts)
                .map_err(|e| format!("{e}\n{}", stack.kafka_post_mortem()))?;
            Ok(ScenarioReport::from_run(scenario, &r))
        }
        Scenario::BrokerPause => {
            // Frozen for 11–13 s: past the 10 s transaction timeout, so the coordinator aborts
            // what was open when it wakes, and commits in flight meet an unknown outcome.
            let stack = env.private_stack(scenario);
            let _guard = stack.up("kafka")?;
            let mut private = config.clone();
            private.kafka.bootstrap = stack.bootstrap();
            let pause = |secs| Fault::BrokerPause(stack.clone(), Duration::from_secs(secs));
            let opts = if short {
                count_run(env, 20_000, 2, 2, 20, pause(11))
            } else {
                count_run(env, 200_000, 2, 6, 150, pause(13))
            };
            let r = super::run(&private, &opts)
                .map_err(|e| format!("{e}\n{}", stack.kafka_post_mortem()))?;
            Ok(ScenarioReport::from_run(scenario, &r))
        }
        Scenario::SlowHandler => {
            // A 3 s transaction timeout and 13 s calls: longer than the timeout plus the
            // coordinator's 10 s sweep, so every slow call's transaction is aborted under it.
            // One processing thread per instance: a 13 s call stops every partition of its
            // instance, and an eager rebalance (a kill) waits for it. Slow calls are spread so
            // that a partition still moves within the 60 s stall threshold.
            let mut opts = if short {
                count_run(env, 10_000, 2, 1, 10, Fault::Kill9)
            } else {
                count_run(env, 200_000, 2, 5, 120, Fault::Kill9)
            };
            let every = if short { 2_500 } else { 20_000 };
            let marks = env
                .work_dir
                .join(format!("slow-marks-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&marks).map_err(|e| format!("{}: {e}", marks.display()))?;
            opts.extra_env.extend([
                (super::slow::EVERY_ENV.into(), every.to_string()),
                (super::slow::MARKS_ENV.into(), marks.display().to_string()),
                (super::slow::SLEEP_ENV.into(), "13000".into()),
                (
                    "EOSFLOW_PROCESSOR_TRANSACTION_TIMEOUT_MS".into(),
                    "3000".into(),
                ),
            ]);
            let r = super::run(config, &opts)?;
            let mut report = ScenarioReport::from_run(scenario, &r);
            report.extra.insert(
                0,
                (
                    "slow_records".into(),
                    (opts.workload.records / every).to_string(),
                ),
            );
            Ok(report)
        }
        Scenario::OutboxCrash => {
            let stack = env.private_stack(scenario);
            let _guard = stack.up("postgres")?;
            let opts = if short {
                super::outbox_crash::Options::short()
            } else {
                super::outbox_crash::Options::long()
            };
            super::outbox_crash::run(config, &stack, env, &opts)
        }
        Scenario::Poison => {
            let opts = if short {
                super::poison::Options::short()
            } else {
                super::poison::Options::long()
            };
            super::poison::run(config, env, &opts)
        }
        Scenario::OutboxOversize => {
            let opts = if short {
                super::outbox_oversize::Options::short()
            } else {
                super::outbox_oversize::Options::long()
            };
            super::outbox_oversize::run(config, env, &opts)
        }
        Scenario::ParkedFlood => {
            let opts = if short {
                super::parked_flood::Options::short()
            } else {
                super::parked_flood::Options::long()
            };
            super::parked_flood::run(config, env, &opts)
        }
        Scenario::StaleStore => {
            let opts = if short {
                super::stale_store::Options::short()
            } else {
                super::stale_store::Options::long()
            };
            super::stale_store::run(config, env, &opts)
        }
        Scenario::Windows => {
            let opts = if short {
                super::windows::Options::short()
            } else {
                super::windows::Options::long()
            };
            super::windows::run(config, env, &opts)
        }
        Scenario::Joins => {
            let opts = if short {
                super::joins::Options::short()
            } else {
                super::joins::Options::long()
            };
            super::joins::run(config, env, &opts)
        }
        Scenario::RepartitionBacklog => {
            let opts = if short {
                super::repartition_backlog::Options::short()
            } else {
                super::repartition_backlog::Options::long()
            };
            super::repartition_backlog::run(config, env, &opts)
        }
        Scenario::SagaTimeouts => {
            let stack = env.private_stack(scenario);
            let _guard = stack.up("kafka")?;
            let opts = if short {
                super::saga_timeouts::Options::short()
            } else {
                super::saga_timeouts::Options::long()
            };
            super::saga_timeouts::run(config, &stack, env, &opts)
        }
        Scenario::LeaderBounce
        | Scenario::CoordinatorBounce
        | Scenario::BrokerPauseOne
        | Scenario::IsrShrink => cluster_scenario(config, scenario, short, env),
        Scenario::OutboxLeaderBounce => {
            let stack = env.private_stack(scenario);
            let _pg = stack.up("postgres")?;
            let c = env.cluster(scenario);
            let _cluster = c.up()?;
            let opts = if short {
                super::outbox_leader_bounce::Options::short()
            } else {
                super::outbox_leader_bounce::Options::long()
            };
            super::outbox_leader_bounce::run(config, &stack, &c, env, &opts)
        }
        Scenario::RebalanceStorm => {
            let plan = super::storm::StormPlan::new(env.storm_seed.unwrap_or_else(rand::random));
            // One event per mean gap over the churn, which lasts as long as the workload is
            // produced: the storm is always under load.
            let (records, instances, churn_secs) = if short {
                (30_000, 3, 36)
            } else {
                (240_000, 4, 120)
            };
            let events = (churn_secs / plan.mean_gap().as_secs().max(1)) as u32;
            let opts = count_run(
                env,
                records,
                instances,
                events,
                churn_secs,
                Fault::Storm(plan),
            );
            let r = super::run(config, &opts)?;
            Ok(ScenarioReport::from_run(scenario, &r))
        }
    }
}

/// A cluster scenario: a private three-node cluster, the counting topology under load with
/// `fault` done to its brokers, the verdict, then Kafka's console consumer as a second judge.
fn cluster_scenario(
    config: &Config,
    scenario: Scenario,
    short: bool,
    env: &ScenarioEnv,
) -> Result<ScenarioReport, String> {
    let c = env.cluster(scenario);
    let _guard = c.up()?;
    let mut on_cluster = config.clone();
    on_cluster.kafka.bootstrap = c.bootstrap();
    // (records, instances, faults, seconds of load)
    let (records, instances, faults, secs) = match (scenario, short) {
        (Scenario::LeaderBounce, true) => (20_000, 2, 2, 30),
        (Scenario::LeaderBounce, false) => (200_000, 3, 10, 300),
        (Scenario::CoordinatorBounce, true) => (20_000, 2, 2, 30),
        (Scenario::CoordinatorBounce, false) => (200_000, 3, 8, 300),
        (Scenario::IsrShrink, false) => (200_000, 3, 4, 300),
        // The leader's kill comes 10-35 s in (the fault's draw, then the follower's way out of
        // the ISR): the load must still be flowing then.
        (Scenario::IsrShrink, true) => (20_000, 2, 1, 60),
        (_, true) => (20_000, 2, 1, 30),
        (_, false) => (200_000, 3, 6, 300),
    };
    let fault = match scenario {
        Scenario::LeaderBounce => Fault::LeaderBounce(c.clone()),
        Scenario::CoordinatorBounce => Fault::CoordinatorBounce(c.clone()),
        Scenario::IsrShrink => Fault::IsrShrink(c.clone()),
        _ => Fault::BrokerPauseOne(c.clone(), Duration::from_secs(13)),
    };
    let opts = count_run(env, records, instances, faults, secs, fault);
    let r = super::run(&on_cluster, &opts)?;
    let mut report = ScenarioReport::from_run(scenario, &r);
    // The second judge: Apache Kafka's own consumer, read_committed, on input and output.
    let home = c.kafka_home()?;
    let judge = cluster::console_judgement(&home, &c.bootstrap(), &r.input_topic, &r.output_topic)?;
    let in_input = r.verdict.records - r.verdict.not_produced;
    let agrees = judge.input_ids == in_input
        && judge.outputs == r.verdict.outputs
        && judge.lost == r.verdict.lost
        && judge.duplicated == r.verdict.duplicated;
    report.extra.extend([
        ("console_inputs".into(), judge.input_ids.to_string()),
        ("console_outputs".into(), judge.outputs.to_string()),
        ("console_lost".into(), judge.lost.to_string()),
        ("console_duplicated".into(), judge.duplicated.to_string()),
        ("console_other_lines".into(), judge.other_lines.to_string()),
        ("console_agrees".into(), agrees.to_string()),
    ]);
    report.checks_ok &= agrees && r.verdict.not_produced == 0;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_round_trip_and_an_unknown_one_lists_the_known() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        let err = "kill".parse::<Scenario>().unwrap_err();
        assert!(
            err.contains("kill-processors") && err.contains("poison"),
            "{err}"
        );
    }

    #[test]
    fn the_closing_line_starts_with_the_invariants_and_ends_with_the_verdict() {
        let mut r = ScenarioReport {
            scenario: Scenario::Zombie,
            records: 10,
            lost: 0,
            duplicated: 0,
            dlt: 2,
            stalls: 0,
            checks_ok: true,
            extra: vec![("faults".into(), "1".into())],
        };
        assert_eq!(
            r.to_string(),
            "scenario=zombie records=10 lost=0 duplicated=0 dlt=2 stalls=0 faults=1 ok=true"
        );
        r.stalls = 1;
        assert!(!r.ok() && r.to_string().ends_with("ok=false"));
    }

    /// Issue 32, item 7: `windows --short` passed with `kills=3 kills_mid_stream=0`.
    #[test]
    fn a_run_whose_kills_all_landed_after_the_stream_fails() {
        let mut r = ScenarioReport {
            scenario: Scenario::Windows,
            records: 20_004,
            lost: 0,
            duplicated: 0,
            dlt: 180,
            stalls: 0,
            checks_ok: true,
            extra: vec![
                ("kills".into(), "3".into()),
                ("kills_mid_stream".into(), "0".into()),
            ],
        };
        assert!(!r.ok(), "{r}");
        assert!(r.to_string().ends_with("ok=false"));
        r.extra[1].1 = "1".into();
        assert!(r.ok(), "{r}");
        r.extra = vec![
            ("kills".into(), "0".into()),
            ("kills_mid_stream".into(), "0".into()),
        ];
        assert!(r.ok(), "no kills asked for: nothing to prove");
        r.extra = vec![
            ("kill9s".into(), "4".into()),
            ("kills_mid_stream".into(), "0".into()),
        ];
        assert!(!r.ok(), "a storm's kills count too: {r}");
        r.extra = vec![
            ("router_kills".into(), "3".into()),
            ("kills_mid_stream".into(), "2".into()),
        ];
        assert!(r.ok(), "{r}");
    }
}
