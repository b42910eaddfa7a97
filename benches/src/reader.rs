//! The observer: a `read_committed` reader of a point's output topic, in its own thread, that
//! notes when each output became visible. Throughput comes from the arrival times of the
//! backlog's outputs (`r<i>`), latency from those of the paced records (`l<i>`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::workload::now_us;
use super::BenchError;
use eosflow::kafka::{ClientRole, KafkaClients};

/// What the reader saw so far.
#[derive(Debug, Default)]
pub struct Seen {
    /// Arrival time (µs) of each backlog output, in arrival order.
    pub backlog: Vec<u64>,
    /// Arrival time (µs) of each paced output by its index (first arrival only).
    pub paced: HashMap<u64, u64>,
    /// Outputs of probe records (`p<i>`) by index.
    pub probes: HashMap<u64, u64>,
    /// Outputs whose id was seen before (at-least-once repeats).
    pub repeats: u64,
}

/// The running reader.
pub struct Reader {
    stop: Arc<AtomicBool>,
    /// Outputs seen so far, any kind.
    pub total: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
    handle: Option<JoinHandle<Result<(), String>>>,
}

impl Reader {
    /// Starts reading `topic`'s `partitions` from the beginning.
    pub fn start(clients: &KafkaClients, topic: &str, partitions: i32) -> Result<Self, BenchError> {
        let consumer: BaseConsumer = clients
            .config(ClientRole::Reader)
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "10")
            .create()
            .map_err(|e| BenchError::Kafka(format!("output reader: {e}")))?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| BenchError::Kafka(format!("output reader: {e}")))?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| BenchError::Kafka(format!("output reader: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let total = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let handle = {
            let (stop, total, seen) = (stop.clone(), total.clone(), seen.clone());
            std::thread::spawn(move || read_loop(&consumer, &stop, &total, &seen))
        };
        Ok(Self {
            stop,
            total,
            seen,
            handle: Some(handle),
        })
    }

    /// Distinct backlog outputs, paced outputs and probes seen.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.seen
            .lock()
            .map(|s| (s.backlog.len(), s.paced.len(), s.probes.len()))
            .unwrap_or_default()
    }

    /// Arrival times (µs) of probes `base..base + n`, once all of them arrived.
    pub fn probes_arrived(&self, base: u64, n: u64) -> Option<Vec<u64>> {
        let s = self.seen.lock().ok()?;
        (base..base + n)
            .map(|i| s.probes.get(&i).copied())
            .collect()
    }

    /// Stops the thread and hands over what it saw.
    pub fn finish(mut self) -> Result<Seen, BenchError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| BenchError::Kafka("the output reader panicked".into()))?
                .map_err(BenchError::Kafka)?;
        }
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| BenchError::Kafka("output reader state poisoned".into()))?;
        Ok(std::mem::take(&mut *seen))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_loop(
    consumer: &BaseConsumer,
    stop: &AtomicBool,
    total: &AtomicU64,
    seen: &Mutex<Seen>,
) -> Result<(), String> {
    let mut backlog_ids: std::collections::HashSet<u64> = std::collections::HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(polled) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let m = match polled {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "output reader");
                continue;
            }
        };
        let at = now_us();
        total.fetch_add(1, Ordering::Relaxed);
        let id = m.headers().and_then(|hs| {
            hs.iter()
                .find(|h| h.key == "causation_id")
                .and_then(|h| h.value)
                .map(<[u8]>::to_vec)
        });
        let Some(id) = id else { continue };
        let (kind, n) = match id.split_first() {
            Some((k, rest)) => (
                *k,
                std::str::from_utf8(rest)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok()),
            ),
            None => continue,
        };
        let Some(n) = n else { continue };
        let mut s = seen.lock().map_err(|_| "poisoned".to_string())?;
        match kind {
            b'r' => {
                if backlog_ids.insert(n) {
                    s.backlog.push(at);
                } else {
                    s.repeats += 1;
                }
            }
            b'l' => {
                let first = match s.paced.entry(n) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(at);
                        true
                    }
                };
                if !first {
                    s.repeats += 1;
                }
            }
            b'p' => {
                s.probes.entry(n).or_insert(at);
            }
            _ => {}
        }
    }
    Ok(())
}
