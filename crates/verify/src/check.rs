//! The verdict, computed from outside the processor: the output topic and the changelog read
//! with `read_committed`, compared with what the workload says must be there.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use rdkafka::Message;

use super::workload::Workload;
use crate::count::{CountOutput, CountState};
use eosflow::internals::kafka::reader::{read_all, ReadError};
use eosflow::internals::state::Column;
use eosflow::kafka::KafkaClients;

/// What the outputs and the final state prove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Distinct records of the workload.
    pub records: u64,
    /// Of those, records the input topic does not hold: the harness failed to produce them
    /// (their sends were never acknowledged). Not judged, never counted as lost.
    pub not_produced: u64,
    /// Output records read.
    pub outputs: u64,
    /// Records in the input with no output.
    pub lost: u64,
    /// Outputs beyond one per input.
    pub duplicated: u64,
    /// Keys whose outputs' counts are not exactly 1..=n in order.
    pub sequence_breaks: u64,
    /// Keys whose final changelog state differs from the expected count and sum.
    pub state_mismatches: u64,
    /// Output records that could not be parsed.
    pub malformed: u64,
    /// Records found on the retry levels.
    pub forwarded: u64,
    /// Records found twice on one retry level (a forward committed twice).
    pub forward_duplicates: u64,
}

impl Verdict {
    /// Nothing lost, nothing duplicated, state exact.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.state_mismatches == 0
            && self.sequence_breaks == 0
            && self.malformed == 0
            && self.forward_duplicates == 0
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "records={} not_produced={} outputs={} lost={} duplicated={} state_mismatches={} sequence_breaks={} malformed={} forwarded={} forward_duplicates={}",
            self.records,
            self.not_produced,
            self.outputs,
            self.lost,
            self.duplicated,
            self.state_mismatches,
            self.sequence_breaks,
            self.malformed,
            self.forwarded,
            self.forward_duplicates
        )
    }
}

/// Reads the output and changelog topics to their committed end and judges them.
pub fn verify(
    clients: &KafkaClients,
    workload: &Workload,
    output_topic: &str,
    changelog_topic: &str,
    timeout: Duration,
) -> Result<Verdict, ReadError> {
    let mut v = verify_outputs(clients, workload, output_topic, timeout)?;
    let state = super::query::dump(
        clients,
        changelog_topic,
        super::query::StateFormat::Count,
        None,
        timeout,
    )?;
    v.state_mismatches = state_mismatches(workload, &state);
    Ok(v)
}

/// Reads the output topic to its committed end and judges it (state left unchecked), taking
/// every record of the workload as produced.
pub fn verify_outputs(
    clients: &KafkaClients,
    workload: &Workload,
    output_topic: &str,
    timeout: Duration,
) -> Result<Verdict, ReadError> {
    let all = vec![true; workload.records as usize];
    verify_outputs_of(clients, workload, &all, output_topic, timeout)
}

/// Which records of `workload` the input topic holds (by their `id` header), read back to its
/// end: what the processor can be judged on, whatever the producer believed it sent.
pub fn input_records(
    clients: &KafkaClients,
    workload: &Workload,
    input_topic: &str,
    timeout: Duration,
) -> Result<Vec<bool>, ReadError> {
    use rdkafka::message::Headers;
    let mut present = vec![false; workload.records as usize];
    read_all(clients, input_topic, timeout, |m| {
        let index = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == "id")
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|id| id.strip_prefix('r'))
                .and_then(|n| n.parse::<usize>().ok())
        });
        if let Some(slot) = index.and_then(|i| present.get_mut(i)) {
            *slot = true;
        }
        Ok(())
    })?;
    Ok(present)
}

/// Reads the output topic to its committed end and judges it against the records `present`
/// in the input (indexed by record, from [`input_records`]); the others count as not produced.
pub fn verify_outputs_of(
    clients: &KafkaClients,
    workload: &Workload,
    present: &[bool],
    output_topic: &str,
    timeout: Duration,
) -> Result<Verdict, ReadError> {
    let mut v = Verdict {
        records: workload.records,
        ..Verdict::default()
    };
    let mut seen: HashMap<String, u32> = HashMap::with_capacity(workload.records as usize);
    let mut counts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    read_all(clients, output_topic, timeout, |m| {
        v.outputs += 1;
        let parsed = m
            .payload()
            .and_then(|p| serde_json::from_slice::<CountOutput>(p).ok());
        let key = m.key().map(|k| String::from_utf8_lossy(k).to_string());
        match (parsed, key) {
            (Some(out), Some(key)) => {
                *seen.entry(out.id).or_default() += 1;
                counts.entry(key).or_default().push(out.count);
            }
            _ => v.malformed += 1,
        }
        Ok(())
    })?;
    for i in 0..workload.records {
        let n = seen.get(&Workload::id(i)).copied().unwrap_or(0);
        if !present.get(i as usize).copied().unwrap_or(false) {
            v.not_produced += 1;
            // An output of a record the input does not hold came from nowhere: a duplicate of
            // nothing, counted as such.
            v.duplicated += u64::from(n);
            continue;
        }
        match n {
            0 => v.lost += 1,
            n => v.duplicated += u64::from(n - 1),
        }
    }
    // Outputs of one key are in one partition, in commit order: counts must read 1, 2, …, n.
    for list in counts.values() {
        if list.iter().enumerate().any(|(i, c)| *c != i as i64 + 1) {
            v.sequence_breaks += 1;
        }
    }
    Ok(v)
}

/// Keys whose state (as `eosflow state dump --format count` prints it) is not what the
/// workload says, plus keys that should not exist at all.
pub fn state_mismatches(workload: &Workload, state: &BTreeMap<String, serde_json::Value>) -> u64 {
    state_mismatches_of(workload, &vec![true; workload.records as usize], state)
}

/// [`state_mismatches`] against the records `present` in the input only.
pub fn state_mismatches_of(
    workload: &Workload,
    present: &[bool],
    state: &BTreeMap<String, serde_json::Value>,
) -> u64 {
    let want = workload.expected_state_of(|i| present.get(i as usize).copied().unwrap_or(false));
    let mut bad = 0;
    for (key, w) in &want {
        let got = state.get(key);
        let ok = got.is_some_and(|g| {
            g["count"].as_i64() == Some(w.count) && g["sum"].as_i64() == Some(w.sum)
        });
        if !ok {
            bad += 1;
        }
    }
    bad + state.keys().filter(|k| !want.contains_key(*k)).count() as u64
}

/// Committed records in `topic` (0 when it has none).
pub fn count_records(
    clients: &KafkaClients,
    topic: &str,
    timeout: Duration,
) -> Result<u64, ReadError> {
    let mut n = 0;
    read_all(clients, topic, timeout, |_| {
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

/// Counts the records on each retry level and the ids found twice on one level. Valid for
/// workloads whose transient records heal on level 1 (nothing is re-forwarded legitimately).
pub fn check_ladder(
    clients: &KafkaClients,
    levels: &[String],
    timeout: Duration,
) -> Result<(u64, u64), ReadError> {
    let (mut forwarded, mut duplicates) = (0, 0);
    for topic in levels {
        let mut ids: HashMap<Vec<u8>, u32> = HashMap::new();
        read_all(clients, topic, timeout, |m| {
            use rdkafka::message::Headers;
            forwarded += 1;
            let id = m
                .headers()
                .and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "id")
                        .and_then(|h| h.value.map(<[u8]>::to_vec))
                })
                .unwrap_or_default();
            *ids.entry(id).or_default() += 1;
            Ok(())
        })?;
        duplicates += ids
            .values()
            .map(|n| u64::from(n.saturating_sub(1)))
            .sum::<u64>();
    }
    Ok((forwarded, duplicates))
}

/// The committed per-key state of the counting topology, rebuilt from its changelog.
pub fn read_state(
    clients: &KafkaClients,
    changelog_topic: &str,
    timeout: Duration,
) -> Result<BTreeMap<String, CountState>, ReadError> {
    let mut state: BTreeMap<String, CountState> = BTreeMap::new();
    read_all(clients, changelog_topic, timeout, |m| {
        let Some((Column::State, key)) = m.key().and_then(Column::parse_changelog_key) else {
            return Ok(());
        };
        let key = String::from_utf8_lossy(key).to_string();
        match m.payload().and_then(CountState::decode) {
            Some(s) => {
                state.insert(key, s);
            }
            None => {
                state.remove(&key);
            }
        }
        Ok(())
    })?;
    Ok(state)
}
