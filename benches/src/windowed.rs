//! The windowed shape: a tumbling event-time window count and sum per key, emitted once per
//! window when it closes, exactly-once, for eosflow (`eosflow run --topology windowed-sum`, the
//! [`topology`] below) and for Kafka Streams (`benches/peer/src/WindowPeer.java`:
//! `groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(…)).aggregate(…)
//! .suppress(untilWindowCloses(unbounded()))`), on the same input in the same run.
//!
//! Results only appear when windows close, so throughput is not read from the output: a poller
//! reads the consumer group's committed input offsets every [`POLL_MS`] ms, and the point's
//! rate is 80 % of the backlog divided by the time the committed offsets, summed over the
//! partitions, took from the 10th to the 90th percentile of it (linear between polls; see
//! [`total_rate`]). Both contenders commit their offsets in
//! their transactions, so a committed offset means the records before it are processed and
//! their effects committed.
//!
//! Correctness, lightly: after the backlog, one record per partition far ahead in event time
//! closes every window; the committed results must then be exactly one per (key, window) of the
//! input, their counts must add up to the records and their sums to the amounts.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::workload::now_us;
use super::BenchError;
use eosflow::internals::codec::decode::{Decoder, RegistrySource};
use eosflow::internals::codec::registry::Registry;
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow::serdes::{Serde, SerdeError, StringSerde};
use eosflow::topology::windows::{
    EmitStrategy, TimeWindows, WindowStoreHandle, WindowedAggregate, WindowedSerde,
};
use eosflow::topology::{Topology, TopologyError};

/// Window size (ms): tumbling windows of 10 s of event time.
pub const SIZE_MS: i64 = 10_000;
/// Grace period (ms): a window closes 2 s of stream time after its end.
pub const GRACE_MS: i64 = 2_000;
/// How far ahead of the backlog's last event time the closing record of each partition is:
/// well past every window's close (size + grace).
pub const CLOSE_AHEAD_MS: i64 = 60_000;
/// How often the committed offsets are polled (ms).
pub const POLL_MS: u64 = 100;
/// The name of eosflow's windowed store (its changelog is `<app>-windows-changelog`).
pub const STORE: &str = "windows";

/// A window's aggregate: how many records and the sum of their amounts. Stored and emitted as
/// 16 bytes, count then sum, big-endian — by eosflow and by the Kafka Streams peer alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountSum {
    /// Records in the window.
    pub count: i64,
    /// Sum of their amounts.
    pub sum: i64,
}

/// [`CountSum`] as 16 big-endian bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountSumSerde;

impl Serde<CountSum> for CountSumSerde {
    fn serialize(&self, v: &CountSum) -> Result<Vec<u8>, SerdeError> {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&v.count.to_be_bytes());
        out.extend_from_slice(&v.sum.to_be_bytes());
        Ok(out)
    }

    fn deserialize(&self, b: &[u8]) -> Result<CountSum, SerdeError> {
        let long = |r: std::ops::Range<usize>| {
            b.get(r)
                .and_then(|s| s.try_into().ok())
                .map(i64::from_be_bytes)
        };
        match (b.len(), long(0..8), long(8..16)) {
            (16, Some(count), Some(sum)) => Ok(CountSum { count, sum }),
            _ => Err(SerdeError::new(format!(
                "a count and sum is 16 bytes, got {}",
                b.len()
            ))),
        }
    }
}

/// The amount of an input value: `total_minor` of an Avro order event in the registry's wire
/// format (read with the one-field walk, writer schema cached by id, as the counting topology
/// does), else a space-padded decimal. Deserialize-only: a source serde.
pub struct AmountSerde {
    registry_url: String,
    /// Created at the first Avro value. One serde serves every partition of the one processing
    /// thread, so the lock is never contended.
    decoder: Mutex<Option<Decoder>>,
}

impl AmountSerde {
    /// Amounts, fetching Avro writer schemas from the registry at `registry_url` (once per id).
    pub fn new(registry_url: &str) -> Self {
        Self {
            registry_url: registry_url.to_string(),
            decoder: Mutex::new(None),
        }
    }

    fn avro(&self, raw: &[u8]) -> Result<i64, SerdeError> {
        let mut guard = self
            .decoder
            .lock()
            .map_err(|_| SerdeError::new("the Avro decoder's lock is poisoned"))?;
        if guard.is_none() {
            let source = RegistrySource::new(Registry::new(&self.registry_url))
                .map_err(|e| SerdeError::new(format!("schema registry client: {e}")))?;
            let catalog = eosflow_orders::contracts::catalog().map_err(SerdeError::new)?;
            *guard = Some(Decoder::new(source, catalog));
        }
        let decoder = guard
            .as_mut()
            .ok_or_else(|| SerdeError::new("no Avro decoder"))?;
        let (_, type_name, total) = decoder
            .decode_long_field(raw, "total_minor")
            .map_err(SerdeError::new)?;
        total.ok_or_else(|| SerdeError::new(format!("{type_name} has no long `total_minor`")))
    }
}

impl Serde<i64> for AmountSerde {
    fn serialize(&self, _: &i64) -> Result<Vec<u8>, SerdeError> {
        Err(SerdeError::new("amounts are only read"))
    }

    fn deserialize(&self, raw: &[u8]) -> Result<i64, SerdeError> {
        if raw.first() == Some(&0) {
            return self.avro(raw);
        }
        let text = std::str::from_utf8(raw).map_err(|_| SerdeError::new("not UTF-8"))?;
        text.trim()
            .parse()
            .map_err(|_| SerdeError::new("not a decimal amount"))
    }
}

/// eosflow's side of the shape (`eosflow run --topology windowed-sum`): `input`'s amounts
/// counted and summed per key in tumbling windows of [`SIZE_MS`] with [`GRACE_MS`] grace, one
/// final result per window to `output` (`WindowedSerde<String>` keys — key, start, end —
/// and [`CountSumSerde`] values), Avro schemas from `registry_url`.
///
/// Decimal amounts need no registry; in the broker-free test driver:
///
/// ```
/// use eosflow::serdes::StringSerde;
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::windows::{Windowed, WindowedSerde};
/// use eosflow_bench::windowed::{topology, CountSum, CountSumSerde};
///
/// let mut driver = TopologyTestDriver::new(topology("orders", "totals", "http://127.0.0.1:9")?)?;
/// for (ms, amount) in [(1_000, "5"), (4_000, "7"), (25_000, "1")] {
///     driver.pipe(TestRecord::new("orders", Some("ann"), Some(amount)).timestamp(ms))?;
/// }
/// // Stream time 25 s: the window [0, 10 s) closed at 12 s (its end plus 2 s of grace).
/// let out = driver.read_output("totals", &WindowedSerde::new(StringSerde), &CountSumSerde)?;
/// let first = Windowed::new("ann".to_string(), 0, 10_000);
/// assert_eq!(out, vec![(Some(first), Some(CountSum { count: 2, sum: 12 }))]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn topology(input: &str, output: &str, registry_url: &str) -> Result<Topology, TopologyError> {
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(SIZE_MS as u64),
        Duration::from_millis(GRACE_MS as u64),
    );
    let store = WindowStoreHandle::new(STORE, StringSerde, CountSumSerde);
    let aggregate = WindowedAggregate::time(
        store,
        windows,
        CountSum::default,
        |_, amount: &i64, a: CountSum| CountSum {
            count: a.count + 1,
            sum: a.sum + amount,
        },
    )
    .emit(EmitStrategy::OnWindowClose);
    Topology::builder()
        .add_source("in", &[input], StringSerde, AmountSerde::new(registry_url))
        .add_windowed_aggregate("aggregate", aggregate, &["in"])
        .add_sink(
            "out",
            output,
            WindowedSerde::new(StringSerde),
            CountSumSerde,
            &["aggregate"],
        )
        .build()
}

/// The start of the window of event time `ts`.
pub fn window_start(ts: i64) -> i64 {
    ts - ts.rem_euclid(SIZE_MS)
}

/// What the input implies: the window results that closing every window must give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Expected {
    /// Distinct (key, window) of the backlog and the probes.
    pub windows: u64,
    /// Records in them.
    pub records: i64,
    /// Sum of their amounts.
    pub amount: i64,
}

/// The backlog records `r<i>` (key `k<i % keys>`, event time `base + i·step`, amount of record
/// `i`) and one probe per partition (key `probe-<p>`, event time `base`, amount of record 0).
pub fn expected(
    (records, keys): (u64, u64),
    partitions: i32,
    (base, step): (i64, i64),
) -> Expected {
    let keys = keys.max(1);
    let mut windows: HashSet<(u64, i64)> = HashSet::new();
    let mut amount = 0i64;
    for i in 0..records {
        windows.insert((i % keys, window_start(base + i as i64 * step)));
        amount += eosflow_verify::Workload::amount(i);
    }
    Expected {
        windows: windows.len() as u64 + partitions as u64,
        records: records as i64 + i64::from(partitions),
        amount: amount + i64::from(partitions) * eosflow_verify::Workload::amount(0),
    }
}

/// What the committed output held once every window was closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Emitted {
    /// Window results.
    pub windows: u64,
    /// Results for a (key, window) that already had one.
    pub duplicates: u64,
    /// Sum of their counts.
    pub records: i64,
    /// Sum of their sums.
    pub amount: i64,
}

impl Emitted {
    /// Whether this is exactly what `want` implies.
    pub fn matches(&self, want: &Expected) -> bool {
        self.duplicates == 0
            && self.windows == want.windows
            && self.records == want.records
            && self.amount == want.amount
    }
}

/// Reads every committed result of `output` (read_committed).
pub fn emitted(clients: &KafkaClients, output: &str) -> Result<Emitted, BenchError> {
    let keys = WindowedSerde::new(StringSerde);
    let mut seen: HashSet<(String, i64)> = HashSet::new();
    let mut e = Emitted::default();
    eosflow::internals::kafka::reader::read_all(clients, output, Duration::from_secs(60), |m| {
        let k = keys
            .deserialize(m.key().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let v = CountSumSerde
            .deserialize(m.payload().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        if seen.insert((k.key, k.window.start)) {
            e.windows += 1;
        } else {
            e.duplicates += 1;
        }
        e.records += v.count;
        e.amount += v.sum;
        Ok(())
    })
    .map_err(|err| BenchError::Kafka(format!("reading the window results of {output}: {err}")))?;
    Ok(e)
}

/// One poll of the committed offsets: when (µs, the middle of the request) and each
/// partition's committed offset (-1 for none yet).
pub type Poll = (u64, Vec<i64>);

/// Polls a group's committed offsets on `topic` every [`POLL_MS`] ms in its own thread.
pub struct OffsetPoller {
    stop: Arc<AtomicBool>,
    polls: Arc<Mutex<Vec<Poll>>>,
    handle: Option<JoinHandle<()>>,
}

impl OffsetPoller {
    /// Starts polling `group`'s committed offsets of `topic`'s `partitions`. The client reads
    /// `read_uncommitted`, so its OffsetFetch does not wait for open transactions
    /// (`require_stable`): it sees an offset when its transaction has committed, never before.
    pub fn start(
        clients: &KafkaClients,
        group: &str,
        topic: &str,
        partitions: i32,
    ) -> Result<Self, BenchError> {
        let consumer: BaseConsumer = clients
            .config(ClientRole::Reader)
            .set("group.id", group)
            .set("isolation.level", "read_uncommitted")
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| BenchError::Kafka(format!("offset poller: {e}")))?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let (stop, polls, topic) = (stop.clone(), polls.clone(), topic.to_string());
            std::thread::spawn(move || {
                let tick = Duration::from_millis(POLL_MS);
                while !stop.load(Ordering::Relaxed) {
                    let started = std::time::Instant::now();
                    let before = now_us();
                    if let Ok(c) = consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
                        let at = before + (now_us().saturating_sub(before)) / 2;
                        let offsets = (0..partitions)
                            .map(|p| match c.find_partition(&topic, p).map(|e| e.offset()) {
                                Some(Offset::Offset(o)) => o,
                                _ => -1,
                            })
                            .collect();
                        if let Ok(mut v) = polls.lock() {
                            v.push((at, offsets));
                        }
                    }
                    if let Some(rest) = tick.checked_sub(started.elapsed()) {
                        std::thread::sleep(rest);
                    }
                }
            })
        };
        Ok(Self {
            stop,
            polls,
            handle: Some(handle),
        })
    }

    /// The latest committed offsets (empty before the first answer).
    pub fn latest(&self) -> Vec<i64> {
        self.polls
            .lock()
            .ok()
            .and_then(|v| v.last().map(|(_, o)| o.clone()))
            .unwrap_or_default()
    }

    /// Stops polling; every poll so far.
    pub fn finish(mut self) -> Vec<Poll> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.polls
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

impl Drop for OffsetPoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// When (µs) partition `p`'s committed offset reached `target`, linear between the poll before
/// and the first poll at or past it; `None` if it never did.
fn reached(polls: &[Poll], p: usize, target: f64) -> Option<f64> {
    let mut prev: Option<(f64, f64)> = None;
    for (at, offsets) in polls {
        let o = *offsets.get(p)? as f64;
        let t = *at as f64;
        if o >= target {
            return Some(match prev {
                Some((pt, po)) if o > po => pt + (t - pt) * (target - po) / (o - po),
                _ => t,
            });
        }
        prev = Some((t, o));
    }
    None
}

/// The point's steady-state records/s over all its partitions: 80 % of the whole backlog
/// (offsets `from[p]..to[p]` of every partition) over the time the sum of the committed
/// offsets took from the 10th to the 90th percentile of it.
///
/// Not the mean of [`rates`]: an instance that drains its partitions one after another (a
/// fetch brings one partition's records at a time) shows each partition fast in its own
/// 10th→90th span while the others wait; the mean of those rates then counts the same seconds
/// several times over. The sum moves only as fast as the instance really processes.
pub fn total_rate(polls: &[Poll], from: &[i64], to: &[i64]) -> Result<f64, BenchError> {
    let base: i64 = from.iter().sum();
    let n = (to.iter().sum::<i64>() - base) as f64;
    if n <= 0.0 {
        return Err(BenchError::Kafka("the point had no backlog".into()));
    }
    // The progress past `from` of every partition (a partition with no committed offset yet
    // counts as none), clamped at its end: one series, polled like a single partition.
    let summed: Vec<Poll> = polls
        .iter()
        .map(|(at, offsets)| {
            let done: i64 = offsets
                .iter()
                .zip(from.iter().zip(to))
                .map(|(&o, (&a, &b))| o.clamp(a, b) - a)
                .sum();
            (*at, vec![done])
        })
        .collect();
    let at = |q: f64| {
        reached(&summed, 0, q * n).ok_or_else(|| {
            BenchError::Timeout(format!(
                "the committed offsets never covered {:.0} % of the backlog",
                q * 100.0
            ))
        })
    };
    let span_s = (at(0.9)? - at(0.1)?) / 1e6;
    Ok(if span_s > 0.0 { 0.8 * n / span_s } else { 0.0 })
}

/// Each partition's records/s while it was being drained: 80 % of its backlog (offsets
/// `from[p]..to[p]`) over the time its committed offset took from the 10th to the 90th
/// percentile of it. Shows how evenly the partitions were served; the point's throughput is
/// [`total_rate`].
pub fn rates(polls: &[Poll], from: &[i64], to: &[i64]) -> Result<Vec<f64>, BenchError> {
    let mut out = Vec::with_capacity(from.len());
    for (p, (&a, &b)) in from.iter().zip(to).enumerate() {
        let n = (b - a) as f64;
        if n <= 0.0 {
            return Err(BenchError::Kafka(format!("partition {p} had no backlog")));
        }
        let at = |q: f64| {
            reached(polls, p, a as f64 + q * n).ok_or_else(|| {
                BenchError::Timeout(format!(
                    "partition {p}'s committed offset never reached {:.0}",
                    a as f64 + q * n
                ))
            })
        };
        let span_s = (at(0.9)? - at(0.1)?) / 1e6;
        out.push(if span_s > 0.0 { 0.8 * n / span_s } else { 0.0 });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_rates_interpolate_between_polls() {
        // 1 000 records from offset 1 to 1 001, committed in steps of 250 every 100 ms.
        let polls: Vec<Poll> = (0..6)
            .map(|i| (i * 100_000, vec![1 + (i as i64 * 250).min(1_000)]))
            .collect();
        let r = rates(&polls, &[1], &[1_001]).expect("rates");
        // 250 records per 100 ms = 2 500 records/s.
        assert!((r[0] - 2_500.0).abs() < 1e-6, "{r:?}");
        assert!(rates(&polls, &[1], &[5_000]).is_err(), "never reached");
    }

    #[test]
    fn the_total_rate_counts_partitions_drained_one_after_another_once() {
        // Two partitions of 1 000 records each, drained one after the other at 1 000 records
        // per 100 ms: each partition alone looks like 10 000 records/s, the instance did 2 000
        // records in 200 ms: 10 000 records/s in all, 5 000 per partition.
        let polls: Vec<Poll> = (0..=4)
            .map(|i: i64| {
                let a = (i * 500).min(1_000);
                let b = ((i - 2) * 500).clamp(0, 1_000);
                ((i as u64) * 50_000, vec![a, b])
            })
            .collect();
        let each = rates(&polls, &[0, 0], &[1_000, 1_000]).expect("rates");
        assert!((each[0] - 10_000.0).abs() < 1e-6, "{each:?}");
        let total = total_rate(&polls, &[0, 0], &[1_000, 1_000]).expect("total");
        assert!((total - 10_000.0).abs() < 1e-6, "{total}");
        assert!(total_rate(&polls, &[0, 0], &[1_000, 5_000]).is_err());
    }

    #[test]
    fn count_sum_round_trips_as_16_bytes() {
        let v = CountSum { count: 3, sum: -7 };
        let b = CountSumSerde.serialize(&v).expect("serialize");
        assert_eq!(b.len(), 16);
        assert_eq!(CountSumSerde.deserialize(&b).expect("deserialize"), v);
        assert!(CountSumSerde.deserialize(&b[..15]).is_err());
    }

    #[test]
    fn expected_windows_count_keys_per_window_and_the_probes() {
        // 20 000 records 1 ms apart from a window start: 2 windows × 100 keys, + 2 probes.
        let e = expected((20_000, 100), 2, (1_700_000_000_000, 1));
        assert_eq!(e.windows, 202);
        assert_eq!(e.records, 20_002);
    }
}
