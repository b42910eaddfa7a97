//! The `saga-timeouts` scenario (issue #32): a timer-driven topology — every input record
//! schedules a wall-clock timer [`DELAY_MS`] ahead, and the timer's callback emits the one
//! result of that record, as a saga's timeout would (`eosflow run --topology saga-timeouts`).
//!
//! The workload is paced, and the partitions fall silent one after the other (partition `p` of
//! `n` receives records during the first `(p + 1) / n` of the run only), so most timers fire on
//! partitions that receive nothing more: batches that consume no input, whose commits carry no
//! offsets. While they are due, the (private) broker process is frozen with SIGSTOP for longer
//! than the 10 s transaction timeout, and instances are `kill -9`ed, each restarted at once:
//! kills and pauses alternate, each due on observed progress (results committed), a pause only
//! once the group commits again after the last kill (a pause in a rebalance would freeze a group
//! with no transaction open).
//!
//! Proven from outside: every input has exactly one committed result (read_committed), with
//! the content computed from the workload alone (its key, `timeout:<id>`, its event time as
//! timestamp); nothing is dead-lettered; the committed timer state holds no timer at the end;
//! and no further result appears while the group is watched idle for a while after the last.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::Message;

use super::group::{self, GroupSpec, Killed, Outgoing, Run};
use super::group_lag;
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::stack::PrivateStack;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::{read_all, read_to_end};
use eosflow::internals::state::Column;
use eosflow::kafka::KafkaClients;
use eosflow::processor::{ProcessError, Timer};
use eosflow::serdes::StringSerde;
use eosflow::topology::{ProcessorContext, StreamProcessor, Topology, TopologyError, TypedRecord};

/// How far ahead (wall clock) each record's timeout is scheduled.
pub const DELAY_MS: i64 = 6_000;

/// How long after a kill a pause waits at least: the rebalance it causes (the 6 s session
/// timeout of the killed member, then the assignment) is over.
const SETTLE: Duration = Duration::from_secs(10);

/// What an instance logs when a commit without input offsets (due timers only) has an unknown
/// outcome and it restores its tasks from their changelogs (`src/processor/runtime.rs`).
const OFFSETLESS_UNKNOWN_LOG: &str = "commit without input offsets is unknown";

/// The node of [`topology`]: schedules a wall-clock timer per record (its key: the record's
/// value, a unique id; its payload: the record's key and event time) and, when it fires,
/// forwards `timeout:<id>` under the record's key with the record's event time.
pub struct Timeouts;

impl StreamProcessor<String, String, String, String> for Timeouts {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let id = r.value.ok_or_else(|| ProcessError::permanent("no value"))?;
        let ts = ctx
            .event_time_ms()
            .ok_or_else(|| ProcessError::permanent("no event time"))?;
        let due = ctx.wall_clock_ms().saturating_add(DELAY_MS);
        ctx.schedule(Timer::wall_clock(id.into_bytes(), due).with_payload(format!("{ts}|{key}")))
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        t: &Timer,
    ) -> Result<(), ProcessError> {
        let id = String::from_utf8_lossy(&t.key).to_string();
        let payload = String::from_utf8_lossy(&t.payload).to_string();
        let (ts, key) = payload
            .split_once('|')
            .and_then(|(ts, key)| Some((ts.parse::<i64>().ok()?, key.to_string())))
            .ok_or_else(|| ProcessError::permanent(format!("bad timer payload {payload:?}")))?;
        let mut out = TypedRecord::new(Some(key), Some(format!("timeout:{id}")));
        out.timestamp = Some(ts);
        ctx.forward(out);
        Ok(())
    }
}

/// The topology the instances run: `input` (key, value: a unique id) → [`Timeouts`] →
/// `output` (key: the input's key, value: `timeout:<id>`, timestamp: the input's event time).
///
/// ```
/// let t = eosflow_verify::saga_timeouts::topology("requests", "timeouts")?;
/// assert_eq!(t.sub_topologies().len(), 1);
/// # Ok::<(), eosflow::topology::TopologyError>(())
/// ```
pub fn topology(input: &str, output: &str) -> Result<Topology, TopologyError> {
    Topology::builder()
        .add_source("in", &[input], StringSerde, StringSerde)
        .add_processor("timeouts", Timeouts, &["in"])
        .add_sink("out", output, StringSerde, StringSerde, &["timeouts"])
        .build()
}

/// One input record.
#[derive(Debug, Clone)]
pub struct Input {
    /// Its partition.
    pub partition: i32,
    /// Its key.
    pub key: String,
    /// Its value: a unique id.
    pub id: String,
    /// Its event time (the Kafka timestamp).
    pub ts: i64,
    /// When it is sent, in ms after the workload starts.
    pub at_ms: u64,
}

/// The workload: `per_partition` records on each of `partitions`, partition `p`'s spread
/// evenly over the first `(p + 1) / partitions` of `span`, so the partitions fall silent one
/// after the other; event times `base + at_ms`; keys `p<p>k<n>` over 20 keys per partition.
/// Sorted by send time.
pub fn workload(base: i64, partitions: i32, per_partition: usize, span: Duration) -> Vec<Input> {
    let span_ms = span.as_millis() as u64;
    let mut out = Vec::new();
    for p in 0..partitions {
        let active = span_ms * (p as u64 + 1) / partitions.max(1) as u64;
        for i in 0..per_partition {
            let at_ms = active * i as u64 / per_partition.max(1) as u64;
            out.push(Input {
                partition: p,
                key: format!("p{p}k{}", i % 20),
                id: format!("t{p}-{i}"),
                ts: base + at_ms as i64,
                at_ms,
            });
        }
    }
    out.sort_by_key(|r| (r.at_ms, r.partition));
    out
}

/// Every committed result: id → [(key, timestamp)]; and values that are not `timeout:<id>`.
#[derive(Debug, Default)]
pub struct Results {
    /// id → each of its results' (key, timestamp).
    pub by_id: BTreeMap<String, Vec<(String, Option<i64>)>>,
    /// Results whose value is not `timeout:<id>`.
    pub malformed: u64,
}

impl Results {
    fn add(&mut self, m: &rdkafka::message::BorrowedMessage<'_>) {
        let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).to_string();
        match text(m.payload()).strip_prefix("timeout:") {
            Some(id) => self
                .by_id
                .entry(id.to_string())
                .or_default()
                .push((text(m.key()), m.timestamp().to_millis())),
            None => self.malformed += 1,
        }
    }
}

/// How the results compare with the workload.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Inputs without a result.
    pub lost: u64,
    /// Results beyond one per input.
    pub duplicated: u64,
    /// Results with the wrong key or timestamp, of an id not in the workload, or malformed.
    pub wrong: u64,
}

/// Compares `got` with what `input` implies: one result per input, its key and event time.
pub fn compare(input: &[Input], got: &Results) -> Comparison {
    let mut c = Comparison {
        wrong: got.malformed,
        ..Comparison::default()
    };
    let mut ids = BTreeSet::new();
    for r in input {
        ids.insert(r.id.as_str());
        match got.by_id.get(&r.id) {
            None => c.lost += 1,
            Some(results) => {
                c.duplicated += results.len() as u64 - 1;
                if results.iter().any(|x| *x != (r.key.clone(), Some(r.ts))) {
                    c.wrong += 1;
                }
            }
        }
    }
    c.wrong += got
        .by_id
        .keys()
        .filter(|id| !ids.contains(id.as_str()))
        .count() as u64;
    c
}

/// Reads the output's committed results incrementally (read_committed), from where the last
/// read ended.
struct Tally<'a> {
    clients: &'a KafkaClients,
    output: &'a str,
    next: BTreeMap<i32, Option<i64>>,
    results: Results,
}

impl<'a> Tally<'a> {
    fn new(clients: &'a KafkaClients, output: &'a str, partitions: i32) -> Self {
        Self {
            clients,
            output,
            next: (0..partitions).map(|p| (p, None)).collect(),
            results: Results::default(),
        }
    }

    /// Reads what was committed since the last call; inputs still without a result of
    /// `total`, or `None` when the read failed (a broker that is just back).
    fn left(&mut self, total: i64) -> Option<i64> {
        let results = &mut self.results;
        let ends = read_to_end(
            self.clients,
            self.output,
            &self.next,
            Duration::from_secs(30),
            |m| {
                results.add(m);
                Ok(())
            },
        );
        match ends {
            Ok(ends) => {
                self.next = ends.into_iter().map(|(p, o)| (p, Some(o))).collect();
                Some(total - self.results.by_id.len() as i64)
            }
            Err(e) => {
                tracing::info!(error = %e, "reading the results (retried)");
                None
            }
        }
    }

    /// Results committed beyond the first of each id so far.
    fn extra(&self) -> usize {
        self.results.by_id.values().map(|v| v.len() - 1).sum()
    }
}

/// Timers pending in the committed state: the `Column::Timer` entries of `changelog` that no
/// later tombstone deleted (read_committed).
pub fn pending_timers(clients: &KafkaClients, changelog: &str) -> Result<usize, String> {
    let mut pending = BTreeSet::new();
    read_all(clients, changelog, Duration::from_secs(60), |m| {
        if let Some((Column::Timer, k)) = m.key().and_then(Column::parse_changelog_key) {
            let k = (m.partition(), k.to_vec());
            if m.payload().is_some() {
                pending.insert(k);
            } else {
                pending.remove(&k);
            }
        }
        Ok(())
    })
    .map_err(|e| format!("reading {changelog}: {e}"))?;
    Ok(pending.len())
}

/// Shape of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Records per partition.
    pub per_partition: usize,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Processor processes.
    pub instances: usize,
    /// How long the workload is produced.
    pub span: Duration,
    /// kill -9s, one instance at a time, each restarted at once.
    pub kills: u32,
    /// Broker pauses, between the kills (kills and pauses alternate).
    pub pauses: u32,
    /// How long each pause lasts (past the 10 s transaction timeout).
    pub pause: Duration,
}

impl Options {
    /// The `make test` version: 2 000 records on 4 partitions over 20 s, 2 instances, 3 kills
    /// and two pauses of 12 s between them.
    pub fn short() -> Self {
        Self {
            per_partition: 500,
            partitions: 4,
            instances: 2,
            span: Duration::from_secs(20),
            kills: 3,
            pauses: 2,
            pause: Duration::from_secs(12),
        }
    }

    /// The long version: 40 000 records on 8 partitions over 240 s, 2 instances, 12 kills,
    /// 4 pauses of 13 s.
    pub fn long() -> Self {
        Self {
            per_partition: 5_000,
            partitions: 8,
            instances: 2,
            span: Duration::from_secs(240),
            kills: 12,
            pauses: 4,
            pause: Duration::from_secs(13),
        }
    }

    /// The faults in order: the kills in `pauses + 1` runs (the longer first) with a pause
    /// between each two, so kills and pauses alternate over the run. Each is due on observed
    /// progress, the i-th of n once the results still missing have fallen to
    /// `(n - i) / (n + 1)` of the total.
    fn plan(&self) -> Vec<Fault> {
        let runs = self.pauses + 1;
        let mut plan = Vec::new();
        for r in 0..runs {
            let n = self.kills / runs + u32::from(r < self.kills % runs);
            plan.extend((0..n).map(|_| Fault::Kill));
            if r + 1 < runs {
                plan.push(Fault::Pause);
            }
        }
        plan
    }
}

/// One fault of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `kill -9` of an instance, restarted at once.
    Kill,
    /// SIGSTOP of the broker for [`Options::pause`], then SIGCONT.
    Pause,
}

/// Runs the scenario on `stack`'s private broker (started and stopped by the caller).
pub fn run(
    config: &Config,
    stack: &PrivateStack,
    env: &ScenarioEnv,
    opts: &Options,
) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let mut config = config.clone();
    config.kafka.bootstrap = stack.bootstrap();
    let config = &config;
    let clients = KafkaClients::new(config.kafka.clone());
    let run = Run::new("saga-timeouts");
    let (app_id, input, output) = (run.app_id.as_str(), run.input.as_str(), run.output.as_str());
    let topology = topology(input, output).map_err(|e| e.to_string())?;
    let changelog = topology
        .changelog_topics(app_id)
        .into_iter()
        .next()
        .ok_or("the topology has no changelog")?;
    run.create_topics(config, &clients, &topology, opts.partitions, Vec::new())?;

    let spec = GroupSpec {
        app_id,
        topology: "saga-timeouts",
        input,
        output,
        instances: opts.instances,
        max_batch: 50,
    };
    let mut instances = group::spawn(config, env, &spec, &env.work_dir.join(app_id))?;
    let workload = workload(
        eosflow::internals::clock::now_ms(),
        opts.partitions,
        opts.per_partition,
        opts.span,
    );
    let total = workload.len() as i64;
    let t0 = Instant::now();
    let producer = {
        let clients = clients.clone();
        let records = workload.clone();
        let input = input.to_string();
        std::thread::spawn(move || {
            // Paced: each record at its send time.
            group::produce(
                &clients,
                records.iter().map(|r| {
                    let at = t0 + Duration::from_millis(r.at_ms);
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    Outgoing {
                        topic: &input,
                        partition: r.partition,
                        key: &r.key,
                        value: Some(&r.id),
                        ts: r.ts,
                    }
                }),
            )
        })
    };

    let mut tally = Tally::new(&clients, output, opts.partitions);
    let mut killed = Killed {
        kills: 0,
        left_at_kill: Vec::new(),
        stalls: 0,
    };
    let plan = opts.plan();
    let events = plan.len() as u32;
    let mut done_events = 0u32;
    let mut left_at_pause = Vec::new();
    let mut skipped_pauses = 0u32;
    let mut resumed = t0;
    let mut last_kill: Option<Instant> = None;
    let mut due_since: Option<Instant> = None;
    let deadline = t0 + opts.span + Duration::from_secs(600);
    let mut last_progress = (Instant::now(), total);
    let mut longest_wait = Duration::ZERO;
    let mut quiet_since: Option<Instant> = None;
    loop {
        for inst in instances.iter_mut() {
            if let Some(status) = inst.exited() {
                return Err(format!(
                    "instance {} exited ({status}); see {}",
                    inst.name,
                    inst.log.display()
                ));
            }
        }
        let left = tally.left(total);
        if let Some(l) = left {
            if l < last_progress.1 {
                last_progress = (Instant::now(), l);
            }
        }
        if last_progress.1 > 0 {
            longest_wait = longest_wait.max(last_progress.0.elapsed());
        }
        let left = left.unwrap_or(i64::MAX);
        // The next fault, due on observed progress; one still due once every result is in
        // (the group was faster than the checks) is a kill done then, not counted mid-stream,
        // or a pause left out.
        let next = plan.get(done_events as usize).copied();
        let due =
            next.is_some() && (group::kill_due(done_events, events, left, total) || left == 0);
        if !due {
            due_since = None;
        }
        match next {
            Some(Fault::Kill) if due => {
                let inst = &mut instances[killed.kills as usize % opts.instances];
                inst.kill9();
                inst.spawn(&env.exe, output)?;
                tracing::info!(instance = %inst.name, left, "kill -9");
                killed.kills += 1;
                killed.left_at_kill.push(left);
                last_kill = Some(Instant::now());
                done_events += 1;
                quiet_since = None;
                continue;
            }
            Some(Fault::Pause) if due && left == 0 => {
                tracing::warn!("a pause left out: every result was in before it was due");
                skipped_pauses += 1;
                done_events += 1;
                continue;
            }
            Some(Fault::Pause) if due => {
                // While results are being committed (transactions open), a timer delay after
                // the last pause ended and SETTLE after the last kill — a pause in the
                // rebalance a kill causes would freeze a group with no transaction open — or,
                // failing that, 30 s after it was due.
                let since = *due_since.get_or_insert_with(Instant::now);
                let settled = resumed.elapsed() >= Duration::from_millis(DELAY_MS as u64)
                    && last_kill.is_none_or(|k| k.elapsed() >= SETTLE)
                    && last_progress.0.elapsed() <= Duration::from_secs(1);
                if settled || since.elapsed() >= Duration::from_secs(30) {
                    left_at_pause.push(left);
                    pause_broker(stack, &mut instances, opts.pause)?;
                    resumed = Instant::now();
                    last_progress.0 = resumed;
                    done_events += 1;
                    due_since = None;
                    continue;
                }
            }
            _ => {}
        }
        match quiet_since {
            // Watched idle for a while after the end: a timer fired again (say, a commit
            // counted as not landed) would show as a further result within a few commit
            // intervals; the final read counts it.
            Some(since) if since.elapsed() >= Duration::from_secs(5) => break,
            Some(_) => {}
            None => {
                let done = left == 0
                    && done_events >= events
                    && producer.is_finished()
                    && group_lag(&clients, app_id, input, opts.partitions).unwrap_or(-1) == 0
                    && pending_timers(&clients, &changelog)? == 0;
                if done {
                    quiet_since = Some(Instant::now());
                }
            }
        }
        if Instant::now() > deadline {
            killed.stalls += 1;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let drained_s = started.elapsed().as_secs_f64();
    producer
        .join()
        .map_err(|_| "the workload producer panicked".to_string())?
        .map_err(|e| format!("producing the workload: {e}"))?;
    for inst in &mut instances {
        inst.kill9();
    }
    let extra_while_running = tally.extra();
    let mut got = Results::default();
    read_all(&clients, output, Duration::from_secs(120), |m| {
        got.add(m);
        Ok(())
    })
    .map_err(|e| format!("reading the results: {e}"))?;
    let c = compare(&workload, &got);
    let pending = pending_timers(&clients, &changelog)?;
    let dead =
        super::windows::dead_letters(&clients, &eosflow::internals::retry::dlt::topic_for(input))?;
    let mid_stream = killed.mid_stream(total);
    let pauses_with_timers_due = left_at_pause.iter().filter(|l| **l > 0).count();
    let recoveries = super::log_lines_containing(
        &instances,
        eosflow::internals::processor::runtime::IN_PLACE_RECOVERY_LOG,
    );
    let offsetless_unknown = super::log_lines_containing(&instances, OFFSETLESS_UNKNOWN_LOG);
    // Transactions of fired timers only (no record handled) aborted under a pause.
    let offsetless_aborts: usize = instances
        .iter()
        .filter_map(|i| std::fs::read(&i.log).ok())
        .map(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .map(crate::without_colours)
                .filter(|l| l.contains("batch aborted") && l.trim_end().ends_with("records=0"))
                .count()
        })
        .sum();
    // The stores go (a long run leaves many); the logs stay for a post-mortem.
    for i in 0..opts.instances {
        let _ = std::fs::remove_dir_all(env.work_dir.join(app_id).join(format!("i{i}")));
    }
    Ok(ScenarioReport {
        scenario: Scenario::SagaTimeouts,
        records: total as u64,
        lost: c.lost,
        duplicated: c.duplicated,
        dlt: dead.len() as u64,
        stalls: killed.stalls,
        // A pause with no timer pending, or kills that all landed after the work, prove nothing.
        checks_ok: c.wrong == 0
            && dead.is_empty()
            && pending == 0
            && (opts.pauses == 0 || pauses_with_timers_due > 0),
        extra: vec![
            ("wrong_results".into(), c.wrong.to_string()),
            ("pending_timers".into(), pending.to_string()),
            ("kills".into(), killed.kills.to_string()),
            ("kills_mid_stream".into(), mid_stream.to_string()),
            ("pauses".into(), left_at_pause.len().to_string()),
            ("pauses_left_out".into(), skipped_pauses.to_string()),
            (
                "pauses_with_timers_due".into(),
                pauses_with_timers_due.to_string(),
            ),
            (
                "results_left_at_pauses".into(),
                left_at_pause
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("in_place_recoveries".into(), recoveries.to_string()),
            ("offsetless_unknown".into(), offsetless_unknown.to_string()),
            ("offsetless_aborts".into(), offsetless_aborts.to_string()),
            (
                "duplicates_seen_running".into(),
                extra_while_running.to_string(),
            ),
            (
                "longest_wait_s".into(),
                format!("{:.1}", longest_wait.as_secs_f64()),
            ),
            ("elapsed_s".into(), format!("{drained_s:.1}")),
        ],
    })
}

/// Freezes the broker for `pause` (SIGSTOP), watching that no instance exits meanwhile, then
/// resumes it (SIGCONT), also on error.
fn pause_broker(
    stack: &PrivateStack,
    instances: &mut [super::Instance],
    pause: Duration,
) -> Result<(), String> {
    stack.signal_kafka("STOP")?;
    tracing::info!(secs = pause.as_secs_f64(), "broker SIGSTOP");
    let until = Instant::now() + pause;
    let mut exited = None;
    while Instant::now() < until && exited.is_none() {
        exited = instances.iter_mut().find_map(|i| {
            i.exited()
                .map(|s| format!("instance {} exited ({s}); see {}", i.name, i.log.display()))
        });
        std::thread::sleep(Duration::from_millis(200));
    }
    stack.signal_kafka("CONT")?;
    tracing::info!("broker SIGCONT");
    exited.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_taken_out_of_log_lines() {
        assert_eq!(
            crate::without_colours(
                "\x1b[33m WARN\x1b[0m batch aborted \x1b[3mrecords\x1b[0m\x1b[2m=\x1b[0m0"
            ),
            " WARN batch aborted records=0"
        );
    }

    #[test]
    fn partitions_fall_silent_one_after_the_other_and_the_expectation_is_one_result_each() {
        let opts = Options::short();
        let w = workload(1_700_000_000_000, 4, 500, opts.span);
        assert_eq!(w.len(), 2_000);
        let last = |p: i32| w.iter().filter(|r| r.partition == p).map(|r| r.at_ms).max();
        assert!(
            last(0) < Some(5_000) && last(3) > Some(19_000),
            "{:?}",
            last(0)
        );
        assert!(w.windows(2).all(|x| x[0].at_ms <= x[1].at_ms));
        let mut got = Results::default();
        for r in &w {
            got.by_id
                .insert(r.id.clone(), vec![(r.key.clone(), Some(r.ts))]);
        }
        assert_eq!(compare(&w, &got), Comparison::default());
        if let Some(v) = got.by_id.get_mut("t1-7") {
            v.push(v[0].clone());
        }
        got.by_id.remove("t2-9");
        got.by_id.insert("t9-0".into(), vec![("k".into(), None)]);
        let c = compare(&w, &got);
        assert_eq!((c.lost, c.duplicated, c.wrong), (1, 1, 1));
        use Fault::{Kill as K, Pause as P};
        assert_eq!(opts.plan(), [K, P, K, P, K]);
        assert_eq!(
            Options::long().plan(),
            [K, K, K, P, K, K, K, P, K, K, P, K, K, P, K, K]
        );
    }
}
