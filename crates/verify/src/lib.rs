//! `eosflow verify`: the proof behind "exactly once". A workload with known ids goes in, the
//! counting topology runs as separate OS processes, random instances are `kill -9`ed and
//! restarted mid-stream, and the committed output and changelog must account for every input
//! exactly once.

pub mod check;
pub mod cluster;
pub mod count;
pub mod faults;
mod group;
pub mod health_probe;
pub mod isr_shrink;
pub mod joins;
pub mod outbox_crash;
pub mod outbox_leader_bounce;
pub mod outbox_oversize;
pub mod parked_flood;
pub mod poison;
pub mod query;
pub mod repartition_backlog;
pub mod saga_timeouts;
pub mod scenario;
pub mod slow;
pub mod stack;
pub mod stale_store;
pub mod storm;
pub mod windows;
pub mod workload;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

pub use check::Verdict;
use eosflow::config::Config;
use eosflow::kafka::topics::{self, TopicOutcome, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
pub use faults::{Fault, Monitor};
pub use health_probe::free_local_port;
pub use scenario::{Scenario, ScenarioReport};
pub use workload::Workload;

/// `text` without its ANSI colour sequences (`ESC [ … m`): what a log line says. The
/// instances log in colour; the scenarios and the integration tests read their lines.
pub fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How big and how violent a run is.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The workload.
    pub workload: Workload,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Processor processes.
    pub instances: usize,
    /// Faults to deliver while the workload is being processed.
    pub kills: u32,
    /// Which fault: `kill -9` (default), a SIGSTOP freeze, a broker restart.
    pub fault: Fault,
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
    /// Further settings of every instance (`EOSFLOW_*` variables), e.g. a scenario's fault.
    pub extra_env: Vec<(String, String)>,
    /// A test of the verifier itself: every n-th record is sent where it cannot go, so its
    /// sends fail and it must be reported as not produced, never as lost (0 = none).
    pub unsendable_every: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The verdict from the committed output and state.
    pub verdict: Verdict,
    /// Sends the broker acknowledged (records and their duplicates, each counted once).
    pub produced: u64,
    /// What the workload producer's delivery reports said (sends, retries, records with no
    /// acknowledged send).
    pub produce: workload::Produced,
    /// kill -9s delivered.
    pub kills: u32,
    /// Of the `kill -9`s (plain, or a storm's), those that landed while records were left: the
    /// workload still being written, or a lag above 0.
    pub kills_mid_stream: u32,
    /// Wall time from the first record to an empty lag.
    pub elapsed: Duration,
    /// Recovery time after each fault: until every partition with records waiting when the
    /// fault hit had its committed offset move again.
    pub recoveries: Vec<Duration>,
    /// Faults whose recovery took longer than the stall threshold.
    pub stalls: u32,
    /// Instances that exited by themselves after being fenced (zombies), restarted.
    pub fenced_exits: u32,
    /// Producers recreated in place (an epoch the coordinator bumped, an unknown commit outcome),
    /// counted from the instances' logs: the recovery a broker pause or slow call must cause.
    pub in_place_recoveries: u32,
    /// Zombie resumes whose log then shows it losing its partitions or its transaction (session
    /// timeout, revocation, abort, fencing): the evidence it was fenced, not merely lucky.
    pub zombies_fenced: u32,
    /// Records in the input's dead-letter topic.
    pub dlt: u64,
    /// How long each broker restart kept the broker away (stop to ready).
    pub outages: Vec<Duration>,
    /// Progress checks of the fault monitor that got no answer.
    pub monitor_misses: u32,
    /// Topics of the run.
    pub input_topic: String,
    /// Output topic of the run.
    pub output_topic: String,
    /// What a rebalance storm did (`Fault::Storm` runs only).
    pub storm: Option<storm::Tally>,
    /// What was done to the cluster's brokers (cluster faults only).
    pub cluster: Option<cluster::ClusterTally>,
    /// What the isr-shrink faults measured (`Fault::IsrShrink` runs only).
    pub isr: Option<isr_shrink::IsrShrinkTally>,
    /// What the instances' `/healthz` said they waited for (cluster faults only: elsewhere
    /// the instances serve no endpoint).
    pub waits_seen: health_probe::WaitsSeen,
}

impl VerifyReport {
    /// The one closing line.
    pub fn line(&self) -> String {
        format!(
            "{} kills={} produced={} retried_sends={} elapsed_s={:.1}",
            self.verdict,
            self.kills,
            self.produced,
            self.produce.retried,
            self.elapsed.as_secs_f64()
        )
    }

    /// The longest recovery after a fault, in seconds (0 without faults).
    pub fn max_recovery_s(&self) -> f64 {
        self.recoveries
            .iter()
            .map(Duration::as_secs_f64)
            .fold(0.0, f64::max)
    }

    /// The mean recovery after a fault, in seconds (0 without faults).
    pub fn mean_recovery_s(&self) -> f64 {
        if self.recoveries.is_empty() {
            return 0.0;
        }
        self.recoveries
            .iter()
            .map(Duration::as_secs_f64)
            .sum::<f64>()
            / self.recoveries.len() as f64
    }
}

/// `kill -<signal> <pid>`: how the verifier freezes, thaws and kills the processes it owns.
pub(crate) fn send_signal(pid: &str, signal: &str) -> Result<(), String> {
    let st = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .map_err(|e| format!("kill -{signal}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("kill -{signal} {pid} failed: {st}"))
    }
}

/// A processor process the verifier owns.
pub(crate) struct Instance {
    pub(crate) name: String,
    child: Option<Child>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) log: PathBuf,
    pub(crate) topology: String,
}

impl Instance {
    /// An instance of `topology` that is not started yet.
    pub(crate) fn new(
        name: String,
        topology: &str,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Self {
        Self {
            name,
            child: None,
            env,
            log,
            topology: topology.to_string(),
        }
    }

    pub(crate) fn spawn(&mut self, exe: &PathBuf, output_topic: &str) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("log {}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args([
                "run",
                "--topology",
                &self.topology,
                "--output",
                output_topic,
            ])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", instance_log_filter())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {} ({}): {e}", self.name, exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Where the instance serves `/healthz`, if it serves it (cluster scenarios).
    pub(crate) fn metrics_addr(&self) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, v)| k == "EOSFLOW_METRICS_LISTEN" && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// Drops the handle of a process that has exited (seen by [`Instance::exited`]).
    pub(crate) fn forget(&mut self) {
        self.child = None;
    }

    /// SIGKILL: no shutdown hook, no commit, no leave-group.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process, if it runs.
    pub(crate) fn signal(&self, signal: &str) -> Result<(), String> {
        let Some(c) = &self.child else {
            return Err(format!("{} is not running", self.name));
        };
        send_signal(&c.id().to_string(), signal)
    }

    /// Whether the process died on its own (a bug, reported).
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether the instance's log says it stopped because it was fenced (a zombie's right end).
    fn log_says_fenced(&self) -> bool {
        std::fs::read_to_string(&self.log)
            .map(|l| {
                l.lines()
                    .rev()
                    .take(50)
                    .any(|line| line.contains("fenced") || line.contains("Fenced"))
            })
            .unwrap_or(false)
    }
}

/// The `RUST_LOG` of the instances: `info,rdkafka=warn`, or the verifier's own
/// `VERIFY_INSTANCE_RUST_LOG` (say `info,eosflow::processor=debug` for a post-mortem).
fn instance_log_filter() -> String {
    std::env::var("VERIFY_INSTANCE_RUST_LOG").unwrap_or_else(|_| "info,rdkafka=warn".into())
}

/// Lines of the logs of `instances` that contain `needle`.
pub(crate) fn log_lines_containing(instances: &[Instance], needle: &str) -> u32 {
    instances
        .iter()
        .filter_map(|i| std::fs::read(&i.log).ok())
        .map(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .filter(|l| l.contains(needle))
                .count() as u32
        })
        .sum()
}

impl Drop for Instance {
    fn drop(&mut self) {
        // A frozen process must be thawed to die promptly and release its resources.
        let _ = self.signal("CONT");
        self.kill9();
    }
}

/// The instances of a run and the faults done to them.
struct Fleet<'a> {
    instances: Vec<Instance>,
    opts: &'a VerifyOptions,
    output: String,
    rng: rand::rngs::ThreadRng,
    monitor: Monitor,
    faults: u32,
    next_fault: Instant,
    interval: f64,
    /// The frozen instance and when it is resumed.
    frozen: Option<(usize, Instant)>,
    fenced_exits: u32,
    /// Each resumed zombie and its log's length when it resumed.
    thaws: Vec<(usize, u64)>,
    /// The rebalance storm's slots and tally (`Fault::Storm` runs only).
    churn: Option<storm::Churn>,
    /// The run's group (and transactional id prefix) and its topics, for the cluster faults.
    app_id: String,
    topics: Vec<String>,
    clients: KafkaClients,
    /// What the cluster faults did.
    cluster: cluster::ClusterTally,
    /// The brokers bounced so far, in order.
    bounced: Vec<i32>,
    /// Records still to be processed as last seen (`i64::MAX` while the workload is being
    /// written: the stream is flowing): a kill with some left lands mid-stream.
    left: i64,
    /// `kill -9`s (plain or in a storm) that landed with records left.
    kills_mid_stream: u32,
    /// What the isr-shrink faults measured.
    isr: isr_shrink::IsrShrinkTally,
    /// What the instances' `/healthz` said they waited for, polled while supervising.
    waits_seen: health_probe::WaitsSeen,
}

impl Fleet<'_> {
    /// One step of the control loop: supervise, thaw, measure, and deliver a fault when due.
    fn step(&mut self) -> Result<(), String> {
        self.supervise()?;
        if let Some((i, until)) = self.frozen {
            if Instant::now() >= until {
                let at = std::fs::metadata(&self.instances[i].log).map_or(0, |m| m.len());
                self.thaws.push((i, at));
                self.instances[i].signal("CONT")?;
                tracing::info!(instance = %self.instances[i].name, "SIGCONT: the zombie resumes");
                self.frozen = None;
            }
        }
        self.monitor.tick();
        if self.faults < self.opts.kills
            && self.frozen.is_none()
            && Instant::now() >= self.next_fault
        {
            self.deliver()?;
            self.faults += 1;
            self.next_fault = Instant::now()
                + match &mut self.churn {
                    Some(churn) => churn.gap(),
                    None => Duration::from_secs_f64(self.interval * self.rng.gen_range(0.5..1.5)),
                };
        }
        Ok(())
    }

    /// An instance that exits by itself is a bug the run reports, never hides, except a zombie
    /// that stops because it was fenced: that is the right end for it, and it is restarted as a
    /// supervisor (Kubernetes) would. Under a rebalance storm every exit is counted and the
    /// instance restarted (a crash fails the storm's verdict), and a SIGTERM'ed instance exiting
    /// is the storm's to collect.
    fn supervise(&mut self) -> Result<(), String> {
        let zombies_allowed = matches!(self.opts.fault, Fault::Freeze(_) | Fault::Storm(_));
        if let Some(churn) = &mut self.churn {
            churn.reap(&mut self.instances);
        }
        for (i, inst) in self.instances.iter_mut().enumerate() {
            if self.churn.as_ref().is_some_and(|c| c.is_down(i)) {
                continue;
            }
            if let Some(status) = inst.exited() {
                if zombies_allowed && inst.log_says_fenced() {
                    if self.churn.is_some() {
                        // Under a storm nothing was frozen: a finding the closing line reports.
                        tracing::warn!(instance = %inst.name, %status, log = %inst.log.display(),
                            "the instance exited as fenced; restarting it");
                    } else {
                        tracing::info!(instance = %inst.name, "the fenced zombie exited; restarting it");
                    }
                    self.fenced_exits += 1;
                    inst.child = None;
                    inst.spawn(&self.opts.exe, &self.output)?;
                    continue;
                }
                if let Some(churn) = &mut self.churn {
                    tracing::warn!(instance = %inst.name, %status, log = %inst.log.display(),
                        "the instance exited by itself; restarting it");
                    churn.tally.crashes += 1;
                    inst.child = None;
                    inst.spawn(&self.opts.exe, &self.output)?;
                    continue;
                }
                return Err(format!(
                    "instance {} exited by itself ({status}); see {}",
                    inst.name,
                    inst.log.display()
                ));
            }
        }
        self.waits_seen
            .poll(self.instances.iter().filter_map(Instance::metrics_addr));
        Ok(())
    }

    /// Waits (bounded) until every resumed zombie's log shows it was fenced: the group can
    /// drain within a second of the thaw, before the zombie's next heartbeat or commit tells it
    /// so, and reading its log then would count a fenced zombie as a lucky one.
    fn await_fencing_evidence(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while (self.zombies_fenced() as usize) < self.thaws.len() && Instant::now() < deadline {
            self.supervise()?;
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    /// Lines of every instance's log that contain `needle`.
    fn log_lines_containing(&self, needle: &str) -> u32 {
        log_lines_containing(&self.instances, needle)
    }

    /// How many resumed zombies' logs show them being fenced after they resumed.
    fn zombies_fenced(&self) -> u32 {
        let signs = [
            "SESSTMOUT",
            "partitions revoked",
            "aborting batch",
            "recreating",
            "fenced",
        ];
        self.thaws
            .iter()
            .filter(|(i, at)| {
                std::fs::read(&self.instances[*i].log)
                    .ok()
                    .and_then(|b| {
                        b.get(*at as usize..)
                            .map(|t| String::from_utf8_lossy(t).to_string())
                    })
                    .is_some_and(|after| signs.iter().any(|s| after.contains(s)))
            })
            .count() as u32
    }

    fn deliver(&mut self) -> Result<(), String> {
        let i = self.rng.gen_range(0..self.instances.len());
        match &self.opts.fault {
            Fault::Kill9 => {
                self.monitor.fault_now();
                self.kills_mid_stream += u32::from(self.left > 0);
                let inst = &mut self.instances[i];
                inst.kill9();
                tracing::info!(instance = %inst.name, "kill -9");
                std::thread::sleep(Duration::from_millis(self.rng.gen_range(100..1000)));
                inst.spawn(&self.opts.exe, &self.output)
            }
            Fault::Freeze(d) => {
                self.monitor.fault_now();
                self.instances[i].signal("STOP")?;
                tracing::info!(instance = %self.instances[i].name, secs = d.as_secs_f64(), "SIGSTOP");
                self.frozen = Some((i, Instant::now() + *d));
                Ok(())
            }
            Fault::BrokerPause(stack, d) => {
                self.monitor.fault_now();
                stack.signal_kafka("STOP")?;
                tracing::info!(secs = d.as_secs_f64(), "broker SIGSTOP");
                // The instances keep running and are supervised while the broker is away.
                let until = Instant::now() + *d;
                while Instant::now() < until {
                    if let Err(e) = self.supervise() {
                        let _ = stack.signal_kafka("CONT");
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                stack.signal_kafka("CONT")?;
                tracing::info!("broker SIGCONT");
                self.monitor.outages.push(*d);
                self.monitor.restart_clock();
                Ok(())
            }
            Fault::LeaderBounce(c) => {
                let c = c.clone();
                let hard = self.faults >= self.opts.kills / 2;
                let node = cluster::busiest_leader(&self.clients, &self.topics, &self.bounced)?;
                self.bounced.push(node);
                self.bounce(&c, node, hard)?;
                if hard {
                    self.cluster.hard_bounces += 1;
                } else {
                    self.cluster.clean_bounces += 1;
                }
                Ok(())
            }
            Fault::CoordinatorBounce(c) => {
                let c = c.clone();
                let mut coordinating: std::collections::BTreeMap<i32, u32> = Default::default();
                for inst in &self.instances {
                    let id = format!("{}-{}", self.app_id, inst.name);
                    *coordinating
                        .entry(cluster::transaction_coordinator(&self.clients, &id)?)
                        .or_default() += 1;
                }
                let node = coordinating
                    .iter()
                    .max_by_key(|(id, n)| (**n, -**id))
                    .map(|(id, _)| *id)
                    .ok_or("no instance has a transaction coordinator")?;
                self.bounce(&c, node, true)?;
                self.cluster.hard_bounces += 1;
                self.cluster.coordinator_bounces += 1;
                Ok(())
            }
            Fault::BrokerPauseOne(c, d) => {
                let (c, d) = (c.clone(), *d);
                let node = (self.faults as i32 % cluster::BROKERS) + 1;
                self.monitor.fault_now();
                c.signal("pause", node)?;
                tracing::info!(node, secs = d.as_secs_f64(), "broker SIGSTOP");
                let until = Instant::now() + d;
                // No progress check while frozen: one can block for seconds on the frozen
                // broker and stretch the pause.
                while Instant::now() < until {
                    if let Err(e) = self.supervise() {
                        let _ = c.signal("resume", node);
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                c.signal("resume", node)?;
                tracing::info!(node, "broker SIGCONT");
                self.monitor.outages.push(d);
                self.cluster.pauses += 1;
                self.await_isr()
            }
            Fault::IsrShrink(c) => {
                let c = c.clone();
                self.isr_shrink(&c)
            }
            Fault::Storm(_) => {
                let Some(churn) = &mut self.churn else {
                    return Err("a storm run without its churn state".into());
                };
                let before = churn.tally.kills;
                churn.deliver(
                    &mut self.instances,
                    &mut self.monitor,
                    &self.opts.exe,
                    &self.output,
                )?;
                if churn.tally.kills > before && self.left > 0 {
                    self.kills_mid_stream += 1;
                }
                Ok(())
            }
            Fault::BrokerRestart(stack) => {
                self.monitor.fault_now();
                let outage = stack.restart("kafka")?;
                tracing::info!(secs = outage.as_secs_f64(), "broker restarted");
                self.monitor.outages.push(outage);
                // Recovery counts from the moment the broker answers again.
                self.monitor.restart_clock();
                Ok(())
            }
        }
    }
}

impl Fleet<'_> {
    /// Runs `dev/cluster <args>` to its end (at most 300 s) while the run goes on being watched:
    /// the monitor keeps timing progress (a bounce is no outage of the cluster) and the
    /// instances are supervised.
    fn cluster_op(&mut self, c: &cluster::Cluster, args: &[&str]) -> Result<(), String> {
        c.run_watching(args, || {
            self.monitor.tick();
            self.supervise()
        })
    }

    /// Stops broker `node` (`kill -9` when `hard`, else a clean stop), keeps it away for 1–4 s,
    /// starts it again and waits for the full ISR, watching the run all along.
    fn bounce(&mut self, c: &cluster::Cluster, node: i32, hard: bool) -> Result<(), String> {
        self.monitor.fault_now();
        let t = Instant::now();
        let id = node.to_string();
        self.cluster_op(c, &[if hard { "kill" } else { "stop" }, &id])?;
        tracing::info!(node, hard, "broker stopped");
        let until = Instant::now() + Duration::from_millis(self.rng.gen_range(1000..4000));
        while Instant::now() < until {
            self.monitor.tick();
            self.supervise()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        self.cluster_op(c, &["start", &id])?;
        tracing::info!(node, secs = t.elapsed().as_secs_f64(), "broker back");
        self.monitor.outages.push(t.elapsed());
        self.await_isr()
    }

    /// Waits (up to 180 s, watching the run) for every partition to have its full ISR again,
    /// so the next fault never takes a second replica of a partition away.
    fn await_isr(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let short = cluster::isr_shortfall(&self.clients, &self.topics);
            if short.is_empty() {
                break;
            }
            if started.elapsed() > Duration::from_secs(180) {
                return Err(format!(
                    "partitions still short of their ISR after 180 s: {}",
                    short.join(", ")
                ));
            }
            self.monitor.tick();
            self.supervise()?;
            std::thread::sleep(Duration::from_millis(500));
        }
        let waited = started.elapsed().as_millis() as u64;
        self.cluster.isr_wait_max_ms = self.cluster.isr_wait_max_ms.max(waited);
        Ok(())
    }
}

/// Environment of one processor instance of a verifier run.
pub(crate) fn instance_env(
    config: &Config,
    app_id: &str,
    instance: &str,
    input: &str,
    commit_interval_ms: u64,
    state_dir: &std::path::Path,
) -> Vec<(String, String)> {
    vec![
        ("EOSFLOW_APP_ID".into(), app_id.to_string()),
        ("EOSFLOW_APP_INSTANCE_ID".into(), instance.to_string()),
        (
            "EOSFLOW_KAFKA_BOOTSTRAP".into(),
            config.kafka.bootstrap.clone(),
        ),
        ("EOSFLOW_PROCESSOR_INPUT_TOPICS".into(), input.to_string()),
        (
            "EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS".into(),
            commit_interval_ms.to_string(),
        ),
        ("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS".into(), "6000".into()),
        (
            "EOSFLOW_PROCESSOR_TRANSACTION_TIMEOUT_MS".into(),
            "10000".into(),
        ),
        ("EOSFLOW_STATE_DIR".into(), state_dir.display().to_string()),
        ("EOSFLOW_METRICS_LISTEN".into(), String::new()),
    ]
}

/// Waits until every created topic shows all its partitions in the metadata: instances that
/// start before would find them missing and refuse to run.
pub(crate) fn wait_for_topics(clients: &KafkaClients, specs: &[TopicSpec]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for spec in specs {
        loop {
            let n = eosflow::internals::kafka::reader::partition_count(
                clients,
                &spec.name,
                Duration::from_secs(10),
            )
            .unwrap_or(0);
            if n >= spec.partitions {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "topic {} has {n} of {} partitions in the metadata after 60 s",
                    spec.name, spec.partitions
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Runs one verification: topics, workload, instances, faults, verdict.
pub fn run(config: &Config, opts: &VerifyOptions) -> Result<VerifyReport, String> {
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app_id = format!("verify-{run_id}");
    let input = format!("verify-{run_id}.input");
    let output = format!("verify-{run_id}.output");
    let changelog = format!("{app_id}-count-changelog");
    let levels = config.retry.policy_for(&input).levels();
    let specs = run_topics(&input, levels, &output, &changelog, opts.partitions);
    let outcomes = topics::apply_blocking(&clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    if let Some((t, o)) = outcomes.iter().find(|(_, o)| *o != TopicOutcome::Created) {
        return Err(format!(
            "topic {t} already existed ({o:?}); a run needs fresh topics"
        ));
    }
    wait_for_topics(&clients, &specs)?;

    let logs = opts.work_dir.join(&run_id);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let on_cluster = opts.fault.on_cluster();
    let instances: Vec<Instance> = (0..opts.instances)
        .map(|i| {
            let mut env = instance_env(
                config,
                &app_id,
                &format!("i{i}"),
                &input,
                opts.commit_interval_ms,
                &logs.join("state"),
            );
            env.extend(opts.extra_env.iter().cloned());
            if on_cluster {
                // The cluster scenarios ask each instance what it waits for (`/healthz`).
                let port = health_probe::free_local_port()?;
                for (k, v) in env.iter_mut() {
                    if k == "EOSFLOW_METRICS_LISTEN" {
                        *v = format!("127.0.0.1:{port}");
                    }
                }
            }
            Ok(Instance::new(
                format!("i{i}"),
                "count",
                env,
                logs.join(format!("i{i}.log")),
            ))
        })
        .collect::<Result<_, String>>()?;
    let mut rng = rand::thread_rng();
    let interval = opts.duration.as_secs_f64() / f64::from(opts.kills + 1);
    // An isr-shrink fault takes tens of seconds before its leader kill (the follower frozen out
    // of every ISR, then the progress baseline): drawn like the others, its kill could land
    // after the load had ended, when no instance has a write to wait on (CI saw
    // `waits_seen=none` that way). Its first one starts early in the load.
    let first = match &opts.fault {
        Fault::IsrShrink(_) => interval * rng.gen_range(0.1..0.3),
        _ => interval * rng.gen_range(0.5..1.5),
    };
    let mut fleet = Fleet {
        instances,
        opts,
        output: output.clone(),
        next_fault: Instant::now() + Duration::from_secs_f64(first),
        rng,
        monitor: Monitor::new(&clients, &app_id, &input, opts.partitions)?,
        faults: 0,
        interval,
        frozen: None,
        fenced_exits: 0,
        thaws: Vec::new(),
        churn: match &opts.fault {
            Fault::Storm(plan) => Some(storm::Churn::new(*plan, opts.instances)),
            _ => None,
        },
        app_id: app_id.clone(),
        topics: vec![input.clone(), output.clone(), changelog.clone()],
        clients: clients.clone(),
        cluster: cluster::ClusterTally::default(),
        bounced: Vec::new(),
        left: i64::MAX,
        kills_mid_stream: 0,
        isr: isr_shrink::IsrShrinkTally::default(),
        waits_seen: health_probe::WaitsSeen::default(),
    };
    for inst in &mut fleet.instances {
        inst.spawn(&opts.exe, &output)?;
    }

    let started = Instant::now();
    let producer = {
        let clients = clients.clone();
        let workload = opts.workload;
        let input = input.clone();
        let duration = opts.duration;
        let unsendable = opts.unsendable_every;
        std::thread::spawn(move || workload.produce_counted(&clients, &input, duration, unsendable))
    };

    let drain_deadline = Instant::now() + opts.duration + opts.drain_timeout;
    while !producer.is_finished() {
        fleet.step()?;
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
        ladder: eosflow::internals::retry::ladder_topics(
            std::slice::from_ref(&input),
            config.retry.policy_for(&input).levels(),
        )
        .into_iter()
        .filter(|t| !t.ends_with(".DLT"))
        .collect(),
        clients: &clients,
        bootstrap: &config.kafka.bootstrap,
        opts,
        input: &input,
        changelog: &changelog,
        group: &app_id,
    };
    run.finish(&mut fleet, produced, started, drain_deadline)
}

struct Run<'a> {
    /// The input and its retry levels: the group's lag is zero only when all are drained.
    ladder: Vec<String>,
    clients: &'a KafkaClients,
    bootstrap: &'a str,
    opts: &'a VerifyOptions,
    input: &'a str,
    changelog: &'a str,
    group: &'a str,
}

impl Run<'_> {
    /// Keeps delivering faults while records are still being processed (until the budget is
    /// spent), waits for an empty lag, stops the instances and reads the verdict.
    fn finish(
        &self,
        fleet: &mut Fleet<'_>,
        produced: workload::Produced,
        started: Instant,
        deadline: Instant,
    ) -> Result<VerifyReport, String> {
        let opts = self.opts;
        loop {
            fleet.step()?;
            let mut lag = 0;
            for t in &self.ladder {
                lag += group_lag(self.clients, self.group, t, opts.partitions)?;
            }
            fleet.left = lag;
            if lag == 0 && fleet.frozen.is_none() && fleet.faults >= opts.kills {
                break;
            }
            if lag == 0 && fleet.frozen.is_none() {
                // Lag is gone before the fault budget is spent: spend it now, so a run always
                // delivers what it says (a fault on an idle group still tests the restart path).
                fleet.next_fault = Instant::now();
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "lag still {lag} at the deadline; instance logs are in {}",
                    opts.work_dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        // Every fault's recovery is known once the lag is zero (all partitions advanced).
        fleet.monitor.settle(Duration::from_secs(30));
        fleet.await_fencing_evidence(Duration::from_secs(60))?;
        if let Some(churn) = &mut fleet.churn {
            churn.settle(&mut fleet.instances);
        }
        let elapsed = started.elapsed();
        for inst in fleet.instances.iter_mut() {
            inst.kill9();
        }
        // Judged on what the input holds, read back: a record the producer failed to write is
        // the harness's failure (not_produced), never the processor's (lost).
        let present = check::input_records(
            self.clients,
            &opts.workload,
            self.input,
            Duration::from_secs(120),
        )
        .map_err(|e| format!("reading the input back: {e}"))?;
        let mut verdict = check::verify_outputs_of(
            self.clients,
            &opts.workload,
            &present,
            &self.output(fleet),
            Duration::from_secs(120),
        )
        .map_err(|e| format!("reading the results: {e}"))?;
        if verdict.not_produced != produced.not_produced {
            tracing::warn!(
                in_input = opts.workload.records - verdict.not_produced,
                acknowledged = opts.workload.records - produced.not_produced,
                "the input holds a different set of records than the delivery reports said; \
                 judging on the input"
            );
        }
        // The final state through the query command, as an operator would read it.
        let state = query::dump_via_cli(&opts.exe, self.bootstrap, self.changelog, "count")?;
        verdict.state_mismatches = check::state_mismatches_of(&opts.workload, &present, &state);
        let levels: Vec<String> = self
            .ladder
            .iter()
            .filter(|t| *t != self.input)
            .cloned()
            .collect();
        (verdict.forwarded, verdict.forward_duplicates) =
            check::check_ladder(self.clients, &levels, Duration::from_secs(120))
                .map_err(|e| format!("reading the retry levels: {e}"))?;
        let dlt = check::count_records(
            self.clients,
            &format!("{}.DLT", self.input),
            Duration::from_secs(60),
        )
        .map_err(|e| format!("reading the DLT: {e}"))?;
        Ok(VerifyReport {
            verdict,
            produced: produced.acked,
            produce: produced,
            kills: fleet.faults,
            kills_mid_stream: fleet.kills_mid_stream,
            elapsed,
            recoveries: fleet.monitor.recoveries.clone(),
            stalls: fleet.monitor.stalls,
            fenced_exits: fleet.fenced_exits,
            zombies_fenced: fleet.zombies_fenced(),
            in_place_recoveries: fleet.log_lines_containing(
                eosflow::internals::processor::runtime::IN_PLACE_RECOVERY_LOG,
            ),
            dlt,
            outages: fleet.monitor.outages.clone(),
            monitor_misses: fleet.monitor.misses,
            input_topic: self.input.to_string(),
            output_topic: fleet.output.clone(),
            storm: fleet.churn.as_ref().map(|c| c.tally),
            cluster: opts.fault.on_cluster().then_some(fleet.cluster),
            isr: matches!(opts.fault, Fault::IsrShrink(_)).then_some(fleet.isr),
            waits_seen: fleet.waits_seen.clone(),
        })
    }

    fn output(&self, fleet: &Fleet<'_>) -> String {
        fleet.output.clone()
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

/// A run's fresh topics: the input with its retry levels and DLT, the output (delete), the
/// changelog (compact), all with `partitions`.
pub(crate) fn run_topics(
    input: &str,
    levels: u32,
    output: &str,
    changelog: &str,
    partitions: i32,
) -> Vec<TopicSpec> {
    eosflow::internals::retry::ladder_topics(&[input.to_string()], levels)
        .into_iter()
        .chain([output.to_string()])
        .map(|t| TopicSpec::new(t, partitions, "delete"))
        .chain([TopicSpec::new(changelog.to_string(), partitions, "compact")])
        .collect()
}

/// `group`'s committed offset of each partition `0..partitions` of `topic`, by partition (0
/// where it has none). A coordinator that is loading or moving is asked again for up to 30 s.
pub fn group_committed(
    clients: &KafkaClients,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>, String> {
    let consumer = offsets_client(clients, group)?;
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
    Ok((0..partitions)
        .map(|p| committed_at(&committed, topic, p))
        .collect())
}

/// The committed offset of `topic[p]` in a committed-offsets answer; 0 where the group has
/// none.
pub(crate) fn committed_at(committed: &TopicPartitionList, topic: &str, p: i32) -> i64 {
    match committed.find_partition(topic, p).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => o,
        _ => 0,
    }
}

/// A client that reads `group`'s last committed offsets without waiting.
///
/// Under read_committed librdkafka asks for stable offsets (KIP-447), and the broker holds the
/// answer while the group has a transaction with offsets open: under exactly-once nearly
/// always, and for as long as a rebalance or a broker restart keeps one open. A look took up
/// to 3.5 s in a running windows scenario, and a broker-restart run failed after 30 s of such
/// looks timing out (clean-clone CI of `5af3d0a`: "committed offsets of …: OperationTimedOut",
/// the broker alive). Every caller polls for its answer, so the last committed offsets are
/// what they want.
fn offsets_client(clients: &KafkaClients, group: &str) -> Result<BaseConsumer, String> {
    clients
        .config(ClientRole::Reader)
        .set("group.id", group)
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(|e| e.to_string())
}

/// Records of `topic` not yet covered by `group`'s committed offsets.
pub fn group_lag(
    clients: &KafkaClients,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<i64, String> {
    let committed = group_committed(clients, group, topic, partitions)?;
    let mut lag = 0;
    for (p, at) in (0..partitions).zip(committed) {
        // Right after a broker pause or restart a client may hold UnknownPartition in its
        // metadata cache for good: the reader asks in rounds, each with a new client.
        let (_, high) = eosflow::internals::kafka::reader::watermarks(
            clients,
            topic,
            p,
            Duration::from_secs(60),
        )
        .map_err(|e| format!("watermarks of {topic}[{p}]: {e}"))?;
        lag += records_left(clients, topic, p, at, high)?;
    }
    Ok(lag)
}

/// Records of `topic[p]` from offset `at` up to `high`, its high watermark.
fn records_left(
    clients: &KafkaClients,
    topic: &str,
    p: i32,
    at: i64,
    high: i64,
) -> Result<i64, String> {
    let raw = (high - at).max(0);
    if raw == 0 || raw > 1000 {
        return Ok(raw);
    }
    // On a transactional topic the last offsets may be commit markers, which a consumer
    // never "consumes": count the committed records actually left instead.
    let mut left = 0;
    let starts = std::collections::BTreeMap::from([(p, Some(at))]);
    eosflow::internals::kafka::reader::read_to_end(
        clients,
        topic,
        &starts,
        Duration::from_secs(30),
        |_| {
            left += 1;
            Ok(())
        },
    )
    .map_err(|e| format!("reading {topic}[{p}] from {at}: {e}"))?;
    Ok(left)
}

/// [`group_lag`] for a loop that looks many times a second: one client, kept across looks.
///
/// `group_lag` makes new clients on every call, and a look costs 0.4–2 s on a loaded machine:
/// long enough for a fast group to work through a whole 20 000-record backlog between two
/// looks, so kills meant to be spread over the stream all landed after it (clean-clone CI of
/// `b862d2e`: `windows --short` with `kills=3 kills_mid_stream=0`). A probe's look is two
/// requests on a connected client. After a failed look the next one starts with a new client.
pub struct LagProbe<'a> {
    clients: &'a KafkaClients,
    group: &'a str,
    topics: Vec<(&'a str, i32)>,
    consumer: Option<BaseConsumer>,
}

impl<'a> LagProbe<'a> {
    /// A probe of `group`'s lag over `topics`, each with its partition count.
    pub fn new(clients: &'a KafkaClients, group: &'a str, topics: &[(&'a str, i32)]) -> Self {
        Self {
            clients,
            group,
            topics: topics.to_vec(),
            consumer: None,
        }
    }

    /// The group's lag summed over the probe's topics; `i64::MAX` when it cannot be known now
    /// (never a reason to kill: see `group::kill_due`).
    pub fn lag(&mut self) -> i64 {
        match self.look() {
            Ok(lag) => lag,
            Err(e) => {
                tracing::debug!(error = %e, group = self.group, "lag unknown; next look with a new client");
                self.consumer = None;
                i64::MAX
            }
        }
    }

    fn look(&mut self) -> Result<i64, String> {
        let consumer = match self.consumer.take() {
            Some(c) => c,
            None => offsets_client(self.clients, self.group)?,
        };
        let mut tpl = TopicPartitionList::new();
        for (topic, partitions) in &self.topics {
            for p in 0..*partitions {
                tpl.add_partition(topic, p);
            }
        }
        let timeout = Duration::from_secs(5);
        let committed = consumer
            .committed_offsets(tpl, timeout)
            .map_err(|e| format!("committed offsets of {}: {e}", self.group))?;
        let mut ends = Vec::new();
        for (topic, partitions) in &self.topics {
            for p in 0..*partitions {
                let at = committed_at(&committed, topic, p);
                let (_, high) = consumer
                    .fetch_watermarks(topic, p, timeout)
                    .map_err(|e| format!("watermarks of {topic}[{p}]: {e}"))?;
                ends.push((*topic, p, at, high));
            }
        }
        // Offsets, not records: a transactional topic's commit markers are counted too, a few
        // per partition. Exact counts (a read) only near the end, where "drained" is decided.
        let raw: i64 = ends.iter().map(|(_, _, at, high)| (high - at).max(0)).sum();
        let mut lag = raw;
        if raw <= 1000 {
            lag = 0;
            for (topic, p, at, high) in ends {
                lag += records_left(self.clients, topic, p, at, high)?;
            }
        }
        self.consumer = Some(consumer);
        Ok(lag)
    }
}
