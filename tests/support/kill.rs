//! The shape every exactly-once DSL test on the broker shares: a backlog before any instance
//! starts, a first instance killed (-9) mid-backlog, a second one killed once it has written
//! results of its own, and a third on a wiped state directory that finishes the work. The
//! instances are the test binary re-executed in child mode ([`super::spawn_child`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::kafka::topics::TopicSpec;
use rdkafka::Message;

use super::pipeline::Running;

/// Records the second instance must have written (records and transaction markers) to the
/// output before it is killed: it did work of its own, on state the first one left.
const SECOND_WRITES: i64 = 20;

/// One application's instances in a kill test, and the topics whose group lag says how much
/// work is left.
pub struct KillTest {
    /// The environment variable that puts the test binary in child mode.
    child_env: &'static str,
    app: String,
    partitions: i32,
    state_dir: PathBuf,
    /// The application's input topics (the backlog is on them).
    inputs: Vec<String>,
    /// The repartition topics: work is left while they have records not yet consumed.
    internal: Vec<String>,
    output: String,
    started: Instant,
}

/// A running second instance and how much had been written to the output when it started.
pub struct Second {
    instance: Running,
    written_before: i64,
}

impl KillTest {
    /// The instances of `config`'s application (child mode through `child_env`), which read
    /// `inputs` and `repartition` (all of `partitions` partitions) and write `output`.
    pub fn new(
        child_env: &'static str,
        config: &Config,
        partitions: i32,
        (inputs, repartition): (&[&str], &[&str]),
        output: &str,
    ) -> Self {
        let owned = |t: &[&str]| t.iter().map(|t| t.to_string()).collect();
        Self {
            child_env,
            app: config.app.id.clone(),
            partitions,
            state_dir: config.state.dir.clone(),
            inputs: owned(inputs),
            internal: owned(repartition),
            output: output.to_string(),
            started: Instant::now(),
        }
    }

    /// Records the group has not consumed yet on `topics`, summed (`i64::MAX` while a topic's
    /// offsets cannot be read).
    fn lag_on(&self, topics: &[String]) -> i64 {
        topics.iter().fold(0i64, |sum, t| {
            sum.saturating_add(super::lag(&self.app, t, self.partitions))
        })
    }

    /// Records the group has not consumed yet on the inputs and the repartition topics.
    pub fn left(&self) -> i64 {
        self.lag_on(&self.inputs)
            .saturating_add(self.lag_on(&self.internal))
    }

    /// Starts an instance.
    pub fn spawn(&self) -> Running {
        super::spawn_child(self.child_env, &self.app)
    }

    /// Starts the first instance on a `backlog` of input records, kills it (-9) once the group
    /// has consumed `consumed` of them, and asserts that it died mid-stream: records left on an
    /// input or a repartition topic. Returns how many.
    pub fn kill_first_mid_backlog(&self, backlog: i64, consumed: i64) -> i64 {
        let mut first = self.spawn();
        super::wait_for(
            "the first input records consumed",
            Duration::from_secs(90),
            || (self.lag_on(&self.inputs) <= backlog - consumed).then_some(()),
        );
        first.kill().expect("kill -9");
        first.wait().expect("reaped");
        let (inputs, internal) = (self.lag_on(&self.inputs), self.lag_on(&self.internal));
        println!(
            "killed with {inputs} of {backlog} input records and {internal} repartition records left after {:?}",
            self.started.elapsed()
        );
        assert!(
            inputs.saturating_add(internal) > 0,
            "the instance must die mid-stream, not after the work"
        );
        inputs.saturating_add(internal)
    }

    /// Starts the second instance (the caller produces the rest of the workload while it
    /// runs).
    pub fn start_second(&self) -> Second {
        let written_before = super::written(&self.output, self.partitions);
        Second {
            instance: self.spawn(),
            written_before,
        }
    }

    /// Kills the `second` instance (-9) once it has written results of its own, then starts a
    /// third on a wiped state directory (its stores and timers restored from their changelogs
    /// alone) and kills it once every input and repartition record is consumed.
    pub fn kill_then_drain_on_wiped_state(&self, second: Second) {
        let Second {
            mut instance,
            written_before,
        } = second;
        super::wait_for(
            "the second instance's first results",
            Duration::from_secs(90),
            || {
                (super::written(&self.output, self.partitions) > written_before + SECOND_WRITES)
                    .then_some(())
            },
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        println!(
            "killed again with {} input and {} repartition records left after {:?}",
            self.lag_on(&self.inputs),
            self.lag_on(&self.internal),
            self.started.elapsed()
        );
        std::fs::remove_dir_all(&self.state_dir).expect("wiping the state directory");
        let mut third = self.spawn();
        super::wait_for(
            "every input and every repartition record processed",
            Duration::from_secs(180),
            || (self.left() == 0).then_some(()),
        );
        third.kill().expect("kill -9");
        third.wait().expect("reaped");
        println!("drained after {:?}", self.started.elapsed());
    }
}

impl Drop for KillTest {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Asserts that no dead-letter topic among `internal` (a topology's internal topics) holds a
/// record.
pub fn assert_no_dead_letters(internal: &[TopicSpec]) {
    for dead in internal.iter().filter(|s| s.name.ends_with(".DLT")) {
        let letters = super::read_payloads(&dead.name);
        assert!(
            letters.is_empty(),
            "nothing dead-lettered in {}: {} records",
            dead.name,
            letters.len()
        );
    }
}

/// Every record of `topic`, read_committed, as key bytes → its values in order (`None`: a
/// tombstone); watermark-only records (no key, no value) are skipped.
pub fn changes(topic: &str) -> BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>> {
    let mut got: BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    eosflow::internals::kafka::reader::read_all(
        &super::clients(),
        topic,
        Duration::from_secs(60),
        |m| {
            if m.key().is_none() && m.payload().is_none() {
                return Ok(());
            }
            got.entry(m.key().unwrap_or_default().to_vec())
                .or_default()
                .push(m.payload().map(<[u8]>::to_vec));
            Ok(())
        },
    )
    .expect("read a topic");
    got
}

/// The table a change stream leaves: each key's last value, tombstoned keys gone.
pub fn fold(changes: &BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    changes
        .iter()
        .filter_map(|(k, list)| list.last().cloned().flatten().map(|v| (k.clone(), v)))
        .collect()
}

/// The key-value store `store` of `app` as its changelog leaves it (its keys are the rows'
/// column tag `s` then the key's bytes): key → value bytes.
pub fn store_from_changelog(app: &str, store: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    fold(&changes(&format!("{app}-{store}-changelog")))
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(b"s").map(|k| (k.to_vec(), v)))
        .collect()
}
