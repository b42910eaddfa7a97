//! `eosflow verify`: the proof behind "exactly once". A workload with known ids goes in, the
//! counting topology runs as separate OS processes, random instances are `kill -9`ed and
//! restarted mid-stream, and the committed output and changelog must account for every input
//! exactly once.

pub mod check;
pub mod workload;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::kafka::topics::{self, TopicOutcome, TopicSpec};
use crate::kafka::{ClientRole, KafkaClients};
pub use check::Verdict;
pub use workload::Workload;

/// How big and how violent a run is.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The workload.
    pub workload: Workload,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Processor processes.
    pub instances: usize,
    /// `kill -9`s to deliver while the workload is being processed.
    pub kills: u32,
    /// How long producing the workload takes (kills are spread over it).
    pub duration: Duration,
    /// `processor.commit_interval_ms` of the instances.
    pub commit_interval_ms: u64,
    /// The `eosflow` binary to run instances with.
    pub exe: PathBuf,
    /// Where instances keep their stores and logs.
    pub work_dir: PathBuf,
    /// Deadline for everything to be processed after the workload is in.
    pub drain_timeout: Duration,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The verdict from the committed output and state.
    pub verdict: Verdict,
    /// Records produced, duplicates included.
    pub produced: u64,
    /// kill -9s delivered.
    pub kills: u32,
    /// Wall time from the first record to an empty lag.
    pub elapsed: Duration,
    /// Topics of the run.
    pub input_topic: String,
    /// Output topic of the run.
    pub output_topic: String,
}

impl VerifyReport {
    /// The one closing line.
    pub fn line(&self) -> String {
        format!(
            "{} kills={} produced={} elapsed_s={:.1}",
            self.verdict,
            self.kills,
            self.produced,
            self.elapsed.as_secs_f64()
        )
    }
}

/// A processor process the verifier owns.
struct Instance {
    name: String,
    child: Option<Child>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl Instance {
    fn spawn(&mut self, exe: &PathBuf, output_topic: &str) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("log {}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(["run", "--topology", "count", "--output", output_topic])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {} ({}): {e}", self.name, exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL: no shutdown hook, no commit, no leave-group.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process died on its own (a bug, reported).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Runs one verification: topics, workload, instances, kills, verdict.
pub fn run(config: &Config, opts: &VerifyOptions) -> Result<VerifyReport, String> {
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app_id = format!("verify-{run_id}");
    let input = format!("verify-{run_id}.input");
    let output = format!("verify-{run_id}.output");
    let changelog = format!("{app_id}-count-changelog");
    let levels = config.retry.policy_for(&input).levels();
    let specs: Vec<TopicSpec> = crate::retry::ladder_topics(std::slice::from_ref(&input), levels)
        .into_iter()
        .chain([output.clone()])
        .map(|t| TopicSpec::new(t, opts.partitions, "delete"))
        .chain([TopicSpec::new(
            changelog.clone(),
            opts.partitions,
            "compact",
        )])
        .collect();
    let outcomes = topics::apply_blocking(&clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    if let Some((t, o)) = outcomes.iter().find(|(_, o)| *o != TopicOutcome::Created) {
        return Err(format!(
            "topic {t} already existed ({o:?}); a run needs fresh topics"
        ));
    }

    let logs = opts.work_dir.join(&run_id);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut instances: Vec<Instance> = (0..opts.instances)
        .map(|i| Instance {
            name: format!("i{i}"),
            child: None,
            log: logs.join(format!("i{i}.log")),
            env: vec![
                ("EOSFLOW_APP_ID".into(), app_id.clone()),
                ("EOSFLOW_APP_INSTANCE_ID".into(), format!("i{i}")),
                (
                    "EOSFLOW_KAFKA_BOOTSTRAP".into(),
                    config.kafka.bootstrap.clone(),
                ),
                ("EOSFLOW_PROCESSOR_INPUT_TOPICS".into(), input.clone()),
                (
                    "EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS".into(),
                    opts.commit_interval_ms.to_string(),
                ),
                ("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS".into(), "6000".into()),
                (
                    "EOSFLOW_PROCESSOR_TRANSACTION_TIMEOUT_MS".into(),
                    "10000".into(),
                ),
                (
                    "EOSFLOW_STATE_DIR".into(),
                    logs.join("state").display().to_string(),
                ),
                ("EOSFLOW_METRICS_LISTEN".into(), String::new()),
            ],
        })
        .collect();
    for inst in &mut instances {
        inst.spawn(&opts.exe, &output)?;
    }

    let started = Instant::now();
    let producer = {
        let clients = clients.clone();
        let workload = opts.workload;
        let input = input.clone();
        let duration = opts.duration;
        std::thread::spawn(move || workload.produce(&clients, &input, duration))
    };

    let mut rng = rand::thread_rng();
    let mut kills = 0u32;
    let interval = opts.duration.as_secs_f64() / f64::from(opts.kills + 1);
    let mut next_kill =
        Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
    let drain_deadline = Instant::now() + opts.duration + opts.drain_timeout;
    while !producer.is_finished() {
        check_alive(&mut instances)?;
        if kills < opts.kills && Instant::now() >= next_kill {
            kill_one(&mut instances, &mut rng, &opts.exe, &output)?;
            kills += 1;
            next_kill =
                Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
        }
        if Instant::now() > drain_deadline {
            return Err("the workload producer did not finish in time".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let produced = producer
        .join()
        .map_err(|_| "the workload producer panicked".to_string())?
        .map_err(|e| format!("producing the workload: {e}"))?;
    let run = Run {
        ladder: crate::retry::ladder_topics(
            std::slice::from_ref(&input),
            config.retry.policy_for(&input).levels(),
        )
        .into_iter()
        .filter(|t| !t.ends_with(".DLT"))
        .collect(),
        clients: &clients,
        opts,
        input: &input,
        output: &output,
        changelog: &changelog,
        group: &app_id,
    };
    run.finish(
        &mut instances,
        produced,
        kills,
        started,
        drain_deadline,
        &mut rng,
        next_kill,
        interval,
    )
}

/// An instance that exits by itself is a bug the run reports, never hides.
fn check_alive(instances: &mut [Instance]) -> Result<(), String> {
    for inst in instances.iter_mut() {
        if let Some(status) = inst.exited() {
            return Err(format!(
                "instance {} exited by itself ({status}); see {}",
                inst.name,
                inst.log.display()
            ));
        }
    }
    Ok(())
}

struct Run<'a> {
    /// The input and its retry levels: the group's lag is zero only when all are drained.
    ladder: Vec<String>,
    clients: &'a KafkaClients,
    opts: &'a VerifyOptions,
    input: &'a str,
    output: &'a str,
    changelog: &'a str,
    group: &'a str,
}

fn kill_one(
    instances: &mut [Instance],
    rng: &mut impl Rng,
    exe: &PathBuf,
    output: &str,
) -> Result<(), String> {
    let i = rng.gen_range(0..instances.len());
    let inst = &mut instances[i];
    inst.kill9();
    tracing::info!(instance = %inst.name, "kill -9");
    std::thread::sleep(Duration::from_millis(rng.gen_range(100..1000)));
    inst.spawn(exe, output)
}

impl Run<'_> {
    /// Keeps killing while records are still being processed (until the kill budget is spent),
    /// waits for an empty lag, stops the instances and reads the verdict.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        instances: &mut [Instance],
        produced: u64,
        mut kills: u32,
        started: Instant,
        deadline: Instant,
        rng: &mut impl Rng,
        mut next_kill: Instant,
        interval: f64,
    ) -> Result<VerifyReport, String> {
        let opts = self.opts;
        loop {
            check_alive(instances)?;
            let mut lag = 0;
            for t in &self.ladder {
                lag += group_lag(self.clients, self.group, t, opts.partitions)?;
            }
            if lag == 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "lag still {lag} at the deadline; instance logs are in {}",
                    opts.work_dir.display()
                ));
            }
            if kills < opts.kills && Instant::now() >= next_kill {
                kill_one(instances, rng, &opts.exe, self.output)?;
                kills += 1;
                next_kill =
                    Instant::now() + Duration::from_secs_f64(interval * rng.gen_range(0.5..1.5));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let elapsed = started.elapsed();
        for inst in instances.iter_mut() {
            inst.kill9();
        }
        let mut verdict = check::verify(
            self.clients,
            &opts.workload,
            self.output,
            self.changelog,
            Duration::from_secs(120),
        )
        .map_err(|e| format!("reading the results: {e}"))?;
        let levels: Vec<String> = self
            .ladder
            .iter()
            .filter(|t| *t != self.input)
            .cloned()
            .collect();
        (verdict.forwarded, verdict.forward_duplicates) =
            check::check_ladder(self.clients, &levels, Duration::from_secs(120))
                .map_err(|e| format!("reading the retry levels: {e}"))?;
        Ok(VerifyReport {
            verdict,
            produced,
            kills,
            elapsed,
            input_topic: self.input.to_string(),
            output_topic: self.output.to_string(),
        })
    }
}

fn is_retriable(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotCoordinator
                | C::CoordinatorLoadInProgress
                | C::CoordinatorNotAvailable
                | C::RequestTimedOut
                | C::OperationTimedOut
                | C::UnstableOffsetCommit
                | C::BrokerTransportFailure
                | C::AllBrokersDown
        )
    )
}

/// Records of `topic` not yet covered by `group`'s committed offsets.
pub fn group_lag(
    clients: &KafkaClients,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<i64, String> {
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .set("group.id", group)
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    // A coordinator that is loading or moving (a fresh or restarted broker) answers with a
    // retriable error: ask again until the deadline rather than fail the caller.
    let deadline = Instant::now() + Duration::from_secs(30);
    let committed = loop {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline && is_retriable(&e) => {
                tracing::debug!(error = %e, "committed offsets not available yet; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(format!("committed offsets of {group}: {e}")),
        }
    };
    let mut lag = 0;
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        let at = match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => 0,
        };
        let raw = (high - at).max(0);
        if raw == 0 || raw > 1000 {
            lag += raw;
            continue;
        }
        // On a transactional topic the last offsets may be commit markers, which a consumer
        // never "consumes": count the committed records actually left instead.
        let mut left = 0;
        let starts = std::collections::BTreeMap::from([(p, Some(at))]);
        crate::kafka::reader::read_to_end(clients, topic, &starts, Duration::from_secs(30), |_| {
            left += 1;
            Ok(())
        })
        .map_err(|e| format!("reading {topic}[{p}] from {at}: {e}"))?;
        lag += left;
    }
    Ok(lag)
}
