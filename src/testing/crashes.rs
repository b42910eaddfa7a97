//! Crash simulation: the same input run once without a crash and again with a `kill -9` at
//! each chosen point, restored the way the runtime restores, and every committed output, store
//! entry and dead letter compared.
//!
//! The model (the runtime's, simplified to what a test can see):
//! - The input is cut into batches of a few records (or clock advances). A batch commits as a
//!   whole: the Kafka transaction holds its outputs, dead letters, retry forwards, changelog
//!   records and input offsets, so either all of them happened or none did.
//! - After the commit the runtime applies the batch's overlays to the local RocksDB. A crash
//!   between the two leaves the local store behind the changelog; the restart replays the
//!   changelog into it.
//! - A crash loses everything else: the processor (its struct fields included — the factory
//!   builds a new one), the open batch's overlays, outputs and dedup marks, and the stream time
//!   not yet committed. The restart re-processes from the last committed input position.
//!
//! A topology whose results depend on anything but its stores and its input (a counter in a
//! field, a cache that is not a store) gives other results after a crash; that is what the
//! comparison finds.

use std::fmt;
use std::time::Duration;

use super::driver::{DriverError, StoreContents, TopologyTestDriver};
use super::records::{OutputRecord, TestRecord};
use super::topics::TestInputTopic;
use crate::config::Config;
use crate::processor::Application;

/// One step of a crash test's input: a record piped in, or the wall clock moved on.
#[derive(Debug, Clone)]
pub enum CrashStep {
    /// [`TopologyTestDriver::pipe`].
    Pipe(TestRecord),
    /// [`TopologyTestDriver::advance_wall_clock`].
    AdvanceWallClock(Duration),
}

/// Where a simulated `kill -9` hits. Batches count from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// While batch `batch` is open, after `after_steps` of its steps: the batch never commits,
    /// its outputs and store writes are lost and it is processed again.
    MidBatch {
        /// The batch.
        batch: usize,
        /// Steps of it handled before the crash.
        after_steps: usize,
    },
    /// Right after batch `batch` committed and was applied to the local stores (a batch
    /// boundary).
    AfterCommit {
        /// The batch.
        batch: usize,
    },
    /// After batch `batch`'s transaction committed, before its writes reached the local
    /// stores: the restart restores them from the changelog.
    BeforeLocalApply {
        /// The batch.
        batch: usize,
    },
}

impl CrashPoint {
    /// The batch the crash hits.
    pub fn batch(self) -> usize {
        match self {
            Self::MidBatch { batch, .. }
            | Self::AfterCommit { batch }
            | Self::BeforeLocalApply { batch } => batch,
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MidBatch { batch, after_steps } => write!(
                f,
                "kill -9 inside batch {batch} after {after_steps} of its steps (the batch is lost and redone)"
            ),
            Self::AfterCommit { batch } => {
                write!(f, "kill -9 after batch {batch} committed and was applied")
            }
            Self::BeforeLocalApply { batch } => write!(
                f,
                "kill -9 after batch {batch}'s transaction committed, before the local store apply (restored from the changelog)"
            ),
        }
    }
}

/// What differed between the crash-free run and a run with a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The crash that made the difference.
    pub crash: CrashPoint,
    /// The first difference found, in words: which topic's record or which store's entry, and
    /// both sides.
    pub difference: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the run with a crash differs from the crash-free run\n  crash: {}\n  difference: {}",
            self.crash, self.difference
        )
    }
}

/// Why a crash test failed.
#[derive(thiserror::Error)]
pub enum CrashTestError {
    /// A run with a crash committed other outputs, store entries or dead letters than the
    /// crash-free run.
    #[error("{0}")]
    Diverged(Box<Divergence>),
    /// The driver failed (a store, a serde).
    #[error("crash test: {0}")]
    Driver(#[from] DriverError),
    /// The factory could not build the topology.
    #[error("crash test: the factory failed: {0}")]
    Factory(String),
}

// Debug as Display: a test that returns the error prints the report, not a struct dump.
impl fmt::Debug for CrashTestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a passing crash test did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashSummary {
    /// The steps per batch (chosen from the seed unless set).
    pub batch_steps: usize,
    /// The number of batches.
    pub batches: usize,
    /// Every crash simulated, each in a run of its own; all matched the crash-free run.
    pub crashes: Vec<CrashPoint>,
    /// How many records the crash-free run wrote to each topic (outputs, repartition and retry
    /// topics, DLTs): for a test to check that its input reached what it means to test.
    pub written: std::collections::BTreeMap<String, usize>,
}

/// A crash test: built by [`TopologyTestDriver::with_crashes`], fed with steps, run by
/// [`CrashTest::run`].
pub struct CrashTest<F> {
    seed: u64,
    factory: F,
    config: Option<Config>,
    batch_steps: Option<usize>,
    max_crashes: usize,
    steps: Vec<CrashStep>,
}

/// Up to this many batches, every crash point is simulated unless [`CrashTest::max_crashes`]
/// says fewer; above, a sample chosen by the seed.
const EXHAUSTIVE_BATCHES: usize = 24;

impl<P: Application> TopologyTestDriver<P> {
    /// A crash test of the topology `factory` builds: feed it input ([`CrashTest::pipe`],
    /// [`CrashTest::pipe_input`], [`CrashTest::advance_wall_clock`]), then
    /// [`CrashTest::run`] runs it once without a crash and again once per crash point —
    /// `kill -9` inside a batch, at each batch boundary and between a batch's commit and its
    /// local apply — restoring the stores from what committed and re-processing from the last
    /// committed input. It fails, naming the crash and the first difference, when any committed
    /// output, store entry or dead letter differs from the crash-free run.
    ///
    /// The factory builds the topology anew after each crash: a crash loses everything not in
    /// a store, struct fields included. `seed` chooses the batch size and the crash points;
    /// the same seed gives the same runs. Small inputs get every batch boundary.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let topology = || {
    ///     let builder = StreamsBuilder::new();
    ///     builder
    ///         .stream("clicks", Consumed::with(StringSerde, StringSerde))
    ///         .group_by_key()
    ///         .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-user"))
    ///         .to_stream()
    ///         .to("counts", Produced::with(StringSerde, I64Serde));
    ///     builder.build()
    /// };
    /// let mut crash_test = TopologyTestDriver::with_crashes(42, topology);
    /// let clicks = crash_test.input_topic("clicks", StringSerde, StringSerde);
    /// for user in ["ann", "bob", "ann", "ann", "bob"] {
    ///     crash_test.pipe_input(&clicks, user, "/home")?;
    /// }
    /// let summary = crash_test.run()?;
    /// assert!(summary.crashes.len() >= summary.batches);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_crashes<F, E>(seed: u64, factory: F) -> CrashTest<F>
    where
        F: FnMut() -> Result<P, E>,
        E: fmt::Display,
    {
        CrashTest {
            seed,
            factory,
            config: None,
            batch_steps: None,
            max_crashes: 3 * EXHAUSTIVE_BATCHES,
            steps: Vec::new(),
        }
    }
}

impl<F> CrashTest<F> {
    /// Runs the drivers with `config` (application id, retry ladder, dedup) instead of the
    /// default of [`TopologyTestDriver::new`].
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Cuts the input into batches of `steps` steps (at least 1) instead of a size chosen
    /// from the seed (1 to 3).
    pub fn batch_steps(mut self, steps: usize) -> Self {
        self.batch_steps = Some(steps.max(1));
        self
    }

    /// Simulates at most `crashes` crashes (72 unless set: every crash point of 24 batches);
    /// each is a run of its own. Fewer than there are crash points: a sample chosen by the seed.
    pub fn max_crashes(mut self, crashes: usize) -> Self {
        self.max_crashes = crashes.max(1);
        self
    }

    /// Input topic `name` with its serdes, for [`CrashTest::pipe_input`] (the same type as
    /// [`TopologyTestDriver::input_topic`] makes).
    pub fn input_topic<K, V>(
        &self,
        name: impl Into<String>,
        key_serde: impl crate::serdes::Serde<K> + 'static,
        value_serde: impl crate::serdes::Serde<V> + 'static,
    ) -> TestInputTopic<K, V> {
        TestInputTopic::new(name.into(), key_serde, value_serde)
    }

    /// Adds a record to the input.
    pub fn pipe(&mut self, record: TestRecord) -> &mut Self {
        self.steps.push(CrashStep::Pipe(record));
        self
    }

    /// Adds `key` and `value` on `topic` to the input.
    pub fn pipe_input<K, V>(
        &mut self,
        topic: &TestInputTopic<K, V>,
        key: impl Into<K>,
        value: impl Into<V>,
    ) -> Result<&mut Self, DriverError> {
        let record = topic.record(Some(&key.into()), Some(&value.into()))?;
        Ok(self.pipe(record))
    }

    /// Adds a move of the wall clock by `by` to the input (timers fire, retries come back).
    pub fn advance_wall_clock(&mut self, by: Duration) -> &mut Self {
        self.steps.push(CrashStep::AdvanceWallClock(by));
        self
    }

    /// The steps added so far.
    pub fn steps(&self) -> &[CrashStep] {
        &self.steps
    }

    /// Runs the input without a crash, then once per crash point, and compares what committed.
    pub fn run<P, E>(&mut self) -> Result<CrashSummary, CrashTestError>
    where
        P: Application,
        F: FnMut() -> Result<P, E>,
        E: fmt::Display,
    {
        let mut rng = SplitMix(self.seed);
        let batch_steps = self
            .batch_steps
            .unwrap_or_else(|| 1 + (rng.next() % 3) as usize);
        let batches = self.steps.len().div_ceil(batch_steps);
        let crashes = self.crash_points(&mut rng, batch_steps, batches);
        let expected = self.outcome(batch_steps, None)?;
        for crash in &crashes {
            let got = self.outcome(batch_steps, Some(*crash))?;
            if let Some(difference) = first_difference(&expected, &got) {
                return Err(CrashTestError::Diverged(Box::new(Divergence {
                    crash: *crash,
                    difference,
                })));
            }
        }
        Ok(CrashSummary {
            batch_steps,
            batches,
            crashes,
            written: expected
                .topics
                .iter()
                .map(|(t, r)| (t.clone(), r.len()))
                .collect(),
        })
    }

    /// Every batch boundary both ways and one crash inside each batch of more than one step;
    /// for long inputs, a sample of those chosen by the seed.
    fn crash_points(
        &self,
        rng: &mut SplitMix,
        batch_steps: usize,
        batches: usize,
    ) -> Vec<CrashPoint> {
        let mut all = Vec::new();
        for batch in 0..batches {
            let len = batch_steps.min(self.steps.len() - batch * batch_steps);
            // After 1 to all of its steps (all: handled, never committed).
            let after_steps = 1 + (rng.next() % len as u64) as usize;
            all.push(CrashPoint::MidBatch { batch, after_steps });
            all.push(CrashPoint::BeforeLocalApply { batch });
            all.push(CrashPoint::AfterCommit { batch });
        }
        if all.len() > self.max_crashes {
            // A seeded partial shuffle, then back in input order.
            let keep = self.max_crashes.min(all.len());
            for i in 0..keep {
                let j = i + (rng.next() % (all.len() - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(keep);
            all.sort_by_key(|c| (c.batch(), order(c)));
        }
        all
    }

    /// One run: with a crash at `crash`, or none. What committed at the end.
    fn outcome<P, E>(
        &mut self,
        batch_steps: usize,
        crash: Option<CrashPoint>,
    ) -> Result<Outcome, CrashTestError>
    where
        P: Application,
        F: FnMut() -> Result<P, E>,
        E: fmt::Display,
    {
        let mut driver = self.driver()?;
        let mut committed = driver.commit_point()?;
        let mut batch = 0;
        let mut start = 0;
        while start < self.steps.len() {
            let end = (start + batch_steps).min(self.steps.len());
            // Where a crash inside this batch resumes: its first step not committed.
            let mut resume = start;
            for (i, step) in self.steps[start..end].iter().enumerate() {
                if crash
                    == Some(CrashPoint::MidBatch {
                        batch,
                        after_steps: i,
                    })
                {
                    driver.crash(self.build()?, &committed, Vec::new())?;
                    // Redo the batch from its first uncommitted step.
                    return self.finish(driver, batch_steps, resume);
                }
                let commits = driver.summary().commits;
                apply(&mut driver, step)?;
                if driver.summary().commits != commits {
                    // The step committed inside itself (a clock move firing a chunk of 1 000 timers):
                    // what a crash keeps moves on with it, in every run alike.
                    committed = driver.commit_point()?;
                    resume = start + i + 1;
                }
            }
            if crash
                == Some(CrashPoint::MidBatch {
                    batch,
                    after_steps: end - start,
                })
            {
                // Every step handled, the commit never came.
                driver.crash(self.build()?, &committed, Vec::new())?;
                return self.finish(driver, batch_steps, resume);
            }
            if crash == Some(CrashPoint::BeforeLocalApply { batch }) {
                let (c, changelog) = driver.commit_to_changelog()?;
                driver.crash(self.build()?, &c, changelog)?;
                return self.finish(driver, batch_steps, end);
            }
            committed = driver.commit_point()?;
            if crash == Some(CrashPoint::AfterCommit { batch }) {
                driver.crash(self.build()?, &committed, Vec::new())?;
                return self.finish(driver, batch_steps, end);
            }
            batch += 1;
            start = end;
        }
        Outcome::of(&mut driver)
    }

    /// The rest of a run after its crash: from step `start` (a batch's first) to the end.
    fn finish<P: Application>(
        &self,
        mut driver: TopologyTestDriver<P>,
        batch_steps: usize,
        start: usize,
    ) -> Result<Outcome, CrashTestError> {
        let mut at = start;
        while at < self.steps.len() {
            let end = (at + batch_steps).min(self.steps.len());
            for step in &self.steps[at..end] {
                apply(&mut driver, step)?;
            }
            driver.commit_point()?;
            at = end;
        }
        Outcome::of(&mut driver)
    }

    fn build<P, E>(&mut self) -> Result<P, CrashTestError>
    where
        F: FnMut() -> Result<P, E>,
        E: fmt::Display,
    {
        (self.factory)().map_err(|e| CrashTestError::Factory(e.to_string()))
    }

    fn driver<P, E>(&mut self) -> Result<TopologyTestDriver<P>, CrashTestError>
    where
        P: Application,
        F: FnMut() -> Result<P, E>,
        E: fmt::Display,
    {
        let processor = self.build()?;
        Ok(match &self.config {
            Some(c) => TopologyTestDriver::with_config(processor, c.clone())?,
            None => TopologyTestDriver::new(processor)?,
        })
    }
}

fn order(c: &CrashPoint) -> u8 {
    match c {
        CrashPoint::MidBatch { .. } => 0,
        CrashPoint::BeforeLocalApply { .. } => 1,
        CrashPoint::AfterCommit { .. } => 2,
    }
}

fn apply<P: Application>(
    driver: &mut TopologyTestDriver<P>,
    step: &CrashStep,
) -> Result<(), DriverError> {
    match step {
        CrashStep::Pipe(r) => driver.pipe(r.clone()),
        CrashStep::AdvanceWallClock(by) => driver.advance_wall_clock(*by),
    }
}

/// What a run committed: each topic's records (outputs, repartition and retry topics, dead
/// letters) and each store's entries.
struct Outcome {
    topics: std::collections::BTreeMap<String, Vec<OutputRecord>>,
    stores: StoreContents,
}

impl Outcome {
    fn of<P: Application>(driver: &mut TopologyTestDriver<P>) -> Result<Self, CrashTestError> {
        Ok(Self {
            stores: driver.store_contents()?,
            topics: driver.written().clone(),
        })
    }
}

/// The first difference between the crash-free run and a run with a crash, in words.
/// Records compare by key, value and timestamp (their headers carry ids drawn per run);
/// dead letters also by class and reason.
fn first_difference(expected: &Outcome, got: &Outcome) -> Option<String> {
    let topics = expected.topics.keys().chain(got.topics.keys());
    for topic in topics.collect::<std::collections::BTreeSet<_>>() {
        let none = Vec::new();
        let e = expected.topics.get(topic).unwrap_or(&none);
        let g = got.topics.get(topic).unwrap_or(&none);
        let what = if topic.ends_with(".DLT") {
            "dead letter"
        } else {
            "output"
        };
        for i in 0..e.len().max(g.len()) {
            let (a, b) = (e.get(i), g.get(i));
            if a.map(Shown) != b.map(Shown) {
                return Some(format!(
                    "{what} {i} of topic {topic:?}: crash-free run {}, run with the crash {} \
                     ({} records without the crash, {} with)",
                    describe(a),
                    describe(b),
                    e.len(),
                    g.len()
                ));
            }
        }
    }
    let stores = expected.stores.keys().chain(got.stores.keys());
    for store in stores.collect::<std::collections::BTreeSet<_>>() {
        let none = Vec::new();
        let e = expected.stores.get(store).unwrap_or(&none);
        let g = got.stores.get(store).unwrap_or(&none);
        for i in 0..e.len().max(g.len()) {
            let (a, b) = (e.get(i), g.get(i));
            if a != b {
                let entry = |x: Option<&(Vec<u8>, Vec<u8>)>| match x {
                    Some((k, v)) => format!("key {} = {}", bytes(k), bytes(v)),
                    None => "no entry".to_string(),
                };
                return Some(format!(
                    "store entry {i} of {store}: crash-free run {}, run with the crash {}",
                    entry(a),
                    entry(b)
                ));
            }
        }
    }
    None
}

/// A record as compared: key, value, timestamp, and a dead letter's class and reason.
struct Shown<'r>(&'r OutputRecord);

impl PartialEq for Shown<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.0, other.0);
        (a.key == b.key)
            && (a.value == b.value)
            && (a.timestamp == b.timestamp)
            && (a.dlt_class() == b.dlt_class())
            && (a.dlt_reason() == b.dlt_reason())
    }
}

fn describe(r: Option<&OutputRecord>) -> String {
    let Some(r) = r else {
        return "no record".to_string();
    };
    let key = r.key.as_deref().map_or("null".to_string(), bytes);
    let value = r.value.as_deref().map_or("null".to_string(), bytes);
    let mut s = format!("key {key} value {value}");
    if let Some(t) = r.timestamp {
        s.push_str(&format!(" at {t}"));
    }
    if let (Some(class), Some(reason)) = (r.dlt_class(), r.dlt_reason()) {
        s.push_str(&format!(" ({class}: {reason})"));
    }
    s
}

/// Bytes as text when they are printable UTF-8, else as hex (an `I64Serde` value is 8 bytes).
fn bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(t) if t.chars().all(|c| !c.is_control()) => format!("{t:?}"),
        _ => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            if b.len() == 8 {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                format!("0x{hex} (i64 {})", i64::from_be_bytes(a))
            } else {
                format!("0x{hex}")
            }
        }
    }
}

/// A small deterministic generator (SplitMix64): the seed alone decides the crash points.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
