//! The suppression buffer of [`crate::dsl::KTable::suppress`] (Kafka Streams'
//! `KTableSuppressProcessor` over an `InMemoryTimeOrderedKeyValueChangeBuffer`), kept in a
//! changelogged store of the topology rather than in memory.
//!
//! Per key the buffer holds the key's latest update (value or tombstone, with its timestamp
//! and headers) and the time it was *first* buffered. After each record the node:
//!
//! 1. advances its observed stream time (the largest record time it has seen, kept in the
//!    store, so a restart resumes it);
//! 2. buffers the record (a key already buffered keeps its buffer time, takes the new value);
//! 3. emits, oldest buffer time first, every entry whose buffer time plus the time limit is at
//!    or before the observed stream time;
//! 4. while the buffer holds more entries or bytes than its bounds, emits its oldest entry
//!    early (Kafka Streams' `emitEarlyWhenFull`).
//!
//! An emitted record is the buffered update as it came: key, value (a tombstone too), the
//! timestamp and headers of the record that last updated it. Everything a record does to the
//! buffer — entries, the time index, the observed stream time — is written through the batch
//! overlay and changelogged in the batch's transaction with what it emitted: a crash between
//! buffering and emitting replays the batch, so no emission is lost or doubled.
//!
//! The store's keys, in one store so a restore brings them back together:
//!
//! - `e · key` → the entry: `buffer time (8) · has timestamp (1) · timestamp (8) · header
//!   count (4) · (name length (4) · name · value length (4) · value)* · has value (1) · value`;
//! - `t · buffer time (8, sign-flipped big-endian) · key` → nothing: the entries in time order,
//!   ties by key bytes (Kafka Streams' `BufferKey` order);
//! - `m` → `observed stream time (8) · entries (8) · bytes (8)`.
//!
//! An entry's size, which `max_bytes` bounds, is what it occupies in the store: its key and
//! value and its time-index key.

use std::sync::Arc;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use crate::processor::{KeyValueStore, StoreHandle};
use crate::record::ProcessError;
use crate::serdes::Serde;

const ENTRY: u8 = b'e';
const INDEX: u8 = b't';
const META: &[u8] = b"m";

/// How long updates wait and how much the buffer may hold (the DSL's `Suppressed`, resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// How long after its first buffered update a key is emitted (ms of observed stream time).
    pub(crate) time_ms: i64,
    /// The most entries the buffer holds before it emits its oldest early.
    pub(crate) max_records: u64,
    /// The most bytes the buffer holds before it emits its oldest early.
    pub(crate) max_bytes: u64,
}

/// The suppression node: buffers a table's updates per key in `store`, emits them by time and
/// bounds (see the module doc).
pub(crate) struct Suppress<K, V> {
    keys: Arc<dyn Serde<K>>,
    values: Arc<dyn Serde<V>>,
    store: StoreHandle<Vec<u8>, Vec<u8>>,
    limits: Limits,
}

impl<K, V> Suppress<K, V> {
    pub(crate) fn new(
        keys: Arc<dyn Serde<K>>,
        values: Arc<dyn Serde<V>>,
        store: StoreHandle<Vec<u8>, Vec<u8>>,
        limits: Limits,
    ) -> Self {
        Self {
            keys,
            values,
            store,
            limits,
        }
    }
}

/// The node's bookkeeping, in the store's `m` key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Meta {
    stream_time: Option<i64>,
    entries: u64,
    bytes: u64,
}

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&self.stream_time.unwrap_or(i64::MIN).to_be_bytes());
        out.extend_from_slice(&self.entries.to_be_bytes());
        out.extend_from_slice(&self.bytes.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let stream_time = Some(r.i64()?).filter(|t| *t != i64::MIN);
        Some(Self {
            stream_time,
            entries: r.u64()?,
            bytes: r.u64()?,
        })
    }
}

/// One buffered update, as stored under `e · key`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    buffer_time: i64,
    timestamp: Option<i64>,
    headers: Vec<(String, Vec<u8>)>,
    value: Option<Vec<u8>>,
}

impl Entry {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.buffer_time.to_be_bytes());
        out.push(u8::from(self.timestamp.is_some()));
        out.extend_from_slice(&self.timestamp.unwrap_or_default().to_be_bytes());
        out.extend_from_slice(&len32(self.headers.len()));
        for (name, value) in &self.headers {
            out.extend_from_slice(&len32(name.len()));
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&len32(value.len()));
            out.extend_from_slice(value);
        }
        out.push(u8::from(self.value.is_some()));
        out.extend_from_slice(self.value.as_deref().unwrap_or_default());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let buffer_time = r.i64()?;
        let has_ts = r.u8()? == 1;
        let ts = r.i64()?;
        let count = r.u32()?;
        let mut headers = Vec::new();
        for _ in 0..count {
            let n = r.u32()? as usize;
            let name = String::from_utf8(r.take(n)?.to_vec()).ok()?;
            let n = r.u32()? as usize;
            headers.push((name, r.take(n)?.to_vec()));
        }
        let value = (r.u8()? == 1).then(|| r.0.to_vec());
        Some(Self {
            buffer_time,
            timestamp: has_ts.then_some(ts),
            headers,
            value,
        })
    }
}

/// What an entry of `key` costs the buffer: its store key and value, and its index key.
fn size(key: &[u8], encoded: &[u8]) -> u64 {
    (1 + key.len() + encoded.len() + 1 + 8 + key.len()) as u64
}

fn len32(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes()
}

/// A time that sorts as bytes as it does as a number.
fn sortable(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn unsortable(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

fn entry_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(ENTRY);
    k.extend_from_slice(key);
    k
}

fn index_key(time: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(INDEX);
    k.extend_from_slice(&sortable(time));
    k.extend_from_slice(key);
    k
}

/// Reads the fixed-width fields of an encoded entry or meta.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take(8)?.try_into().ok().map(i64::from_be_bytes)
    }
}

/// The buffer in its store, for one call.
struct Buffer<'s, 'c, 'a> {
    store: &'s mut KeyValueStore<'c, 'a, Vec<u8>, Vec<u8>>,
    name: &'s str,
}

impl Buffer<'_, '_, '_> {
    fn corrupt(&self, what: &str) -> ProcessError {
        ProcessError::permanent(format!(
            "suppression buffer {}: a stored {what} does not decode",
            self.name
        ))
    }

    fn meta(&self) -> Result<Meta, ProcessError> {
        match self.store.get(&META.to_vec())? {
            None => Ok(Meta::default()),
            Some(b) => Meta::decode(&b).ok_or_else(|| self.corrupt("bookkeeping entry")),
        }
    }

    fn entry(&self, key: &[u8]) -> Result<Option<Entry>, ProcessError> {
        match self.store.get(&entry_key(key))? {
            None => Ok(None),
            Some(b) => Entry::decode(&b)
                .map(Some)
                .ok_or_else(|| self.corrupt("entry")),
        }
    }

    /// Buffers `update` for `key`: a key already buffered keeps its buffer time.
    fn put(&mut self, meta: &mut Meta, key: &[u8], mut update: Entry) -> Result<(), ProcessError> {
        match self.entry(key)? {
            Some(old) => {
                update.buffer_time = old.buffer_time;
                meta.bytes = meta.bytes.saturating_sub(size(key, &old.encode()));
            }
            None => {
                self.store
                    .put(&index_key(update.buffer_time, key), &Vec::new())?;
                meta.entries += 1;
            }
        }
        let encoded = update.encode();
        meta.bytes = meta.bytes.saturating_add(size(key, &encoded));
        self.store.put(&entry_key(key), &encoded)
    }

    /// The oldest entry: its buffer time and key.
    fn oldest(&self) -> Result<Option<(i64, Vec<u8>)>, ProcessError> {
        let Some(first) = self.store.prefix_bytes(&[INDEX])?.next() else {
            return Ok(None);
        };
        let (k, _) = first?;
        let time: [u8; 8] = k
            .get(1..9)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.corrupt("index key"))?;
        Ok(Some((unsortable(time), k[9..].to_vec())))
    }

    /// Takes `key`'s entry out of the buffer.
    fn evict(
        &mut self,
        meta: &mut Meta,
        time: i64,
        key: Vec<u8>,
    ) -> Result<(Vec<u8>, Entry), ProcessError> {
        let Some(entry) = self.entry(&key)? else {
            return Err(self.corrupt("index key without its entry"));
        };
        meta.entries = meta.entries.saturating_sub(1);
        meta.bytes = meta.bytes.saturating_sub(size(&key, &entry.encode()));
        self.store.delete(&entry_key(&key))?;
        self.store.delete(&index_key(time, &key))?;
        Ok((key, entry))
    }
}

impl<K, V> Suppress<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn over(&self, meta: &Meta) -> bool {
        meta.entries > self.limits.max_records || meta.bytes > self.limits.max_bytes
    }

    /// A buffered update as the record it was.
    fn emission(&self, key: &[u8], entry: Entry) -> Result<TypedRecord<K, V>, ProcessError> {
        let bad = |what: &str, e: crate::serdes::SerdeError| {
            ProcessError::permanent(format!(
                "suppression buffer {}: a buffered {what} does not deserialize: {e}",
                self.store.name()
            ))
        };
        let value = match &entry.value {
            Some(v) => Some(self.values.deserialize(v).map_err(|e| bad("value", e))?),
            None => None,
        };
        Ok(TypedRecord {
            key: Some(self.keys.deserialize(key).map_err(|e| bad("key", e))?),
            value,
            timestamp: entry.timestamp,
            headers: entry.headers,
        })
    }
}

impl<K, V> NodeProcessor<K, V> for Suppress<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        let Some(key) = &record.key else {
            return Err(ProcessError::permanent(format!(
                "{} buffers a table's updates by key: an update without a key cannot be kept",
                ctx.node_name()
            )));
        };
        let ser = |e: crate::serdes::SerdeError| {
            ProcessError::permanent(format!("suppression buffer {}: {e}", self.store.name()))
        };
        let key = self.keys.serialize(key).map_err(ser)?;
        let value = match &record.value {
            Some(v) => Some(self.values.serialize(v).map_err(ser)?),
            None => None,
        };
        let timestamp = record.timestamp.or(ctx.event_time_ms());
        let time = timestamp.unwrap_or_default();
        let mut emitted = Vec::new();
        {
            let mut store = ctx.store(&self.store)?;
            let mut buffer = Buffer {
                store: &mut store,
                name: self.store.name(),
            };
            let mut meta = buffer.meta()?;
            let now = meta.stream_time.map_or(time, |t| t.max(time));
            meta.stream_time = Some(now);
            let update = Entry {
                buffer_time: time,
                timestamp,
                headers: record.headers,
                value,
            };
            buffer.put(&mut meta, &key, update)?;
            let expiry = now.saturating_sub(self.limits.time_ms);
            while let Some((t, k)) = buffer.oldest()? {
                if t > expiry && !self.over(&meta) {
                    break;
                }
                emitted.push(buffer.evict(&mut meta, t, k)?);
            }
            buffer.store.put(&META.to_vec(), &meta.encode())?;
        }
        for (key, entry) in emitted {
            let r = self.emission(&key, entry)?;
            ctx.forward(r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let e = Entry {
            buffer_time: -5,
            timestamp: Some(42),
            headers: vec![("k".into(), b"v".to_vec())],
            value: Some(b"abc".to_vec()),
        };
        assert_eq!(Entry::decode(&e.encode()), Some(e));
        let tomb = Entry {
            buffer_time: 7,
            timestamp: None,
            headers: Vec::new(),
            value: None,
        };
        assert_eq!(Entry::decode(&tomb.encode()), Some(tomb));
        let m = Meta {
            stream_time: Some(3),
            entries: 2,
            bytes: 90,
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m));
        assert_eq!(
            Meta::decode(&Meta::default().encode()),
            Some(Meta::default())
        );
    }

    /// A key updated while waiting comes out once, with its latest value and that update's
    /// timestamp and headers (set by a node upstream).
    #[test]
    fn a_buffered_update_keeps_its_timestamp_and_headers() -> Result<(), Box<dyn std::error::Error>>
    {
        use crate::serdes::{BytesSerde, StringSerde};
        use crate::testing::{TestRecord, TopologyTestDriver};
        use crate::topology::{ProcessorContext, TopologyBuilder};

        let store = StoreHandle::new("held-store", BytesSerde, BytesSerde);
        let tag = |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                   mut r: TypedRecord<String, String>| {
            let value = r.value.clone().unwrap_or_default();
            r.headers.push(("seen".into(), value.into_bytes()));
            ctx.forward(r);
            Ok::<(), ProcessError>(())
        };
        let limits = Limits {
            time_ms: 10,
            max_records: u64::MAX,
            max_bytes: u64::MAX,
        };
        let held = Suppress::<String, String>::new(
            Arc::new(StringSerde),
            Arc::new(StringSerde),
            store.clone(),
            limits,
        );
        let topology = TopologyBuilder::new()
            .add_source("in", &["input"], StringSerde, StringSerde)
            .add_processor("tag", tag, &["in"])
            .add_node("held", held, &["tag"])
            .forwards::<String, String>("held")
            .add_state_store(&store, &["held"])
            .add_sink("out", "output", StringSerde, StringSerde, &["held"])
            .build()?;
        let mut d = TopologyTestDriver::new(topology)?;
        d.pipe(TestRecord::new("input", Some("hey"), Some("a")).timestamp(100))?;
        d.pipe(TestRecord::new("input", Some("hey"), Some("b")).timestamp(105))?;
        d.pipe(TestRecord::new("input", Some("tick"), Some("c")).timestamp(109))?;
        assert!(
            d.read_raw_output("output").is_empty(),
            "hey waits until 110"
        );
        d.pipe(TestRecord::new("input", Some("tick"), Some("d")).timestamp(110))?;
        let out = d.read_raw_output("output");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key_text(), "hey");
        assert_eq!(out[0].value.as_deref(), Some(&b"b"[..]));
        assert_eq!(out[0].timestamp, Some(105));
        assert!(out[0].headers.iter().any(|(k, v)| k == "seen" && v == b"b"));
        Ok(())
    }

    /// A `kill -9` at every crash point (mid-batch, after commit, before the local apply)
    /// gives the crash-free run's emissions: the buffer, its index and stream time restore
    /// from the changelog with the outputs they go with.
    #[test]
    fn kill_9_anywhere_gives_the_crash_free_emissions() {
        use crate::dsl::{
            BufferConfig, Consumed, Materialized, Produced, StreamsBuilder, Suppressed,
        };
        use crate::serdes::StringSerde;
        use crate::testing::{TestRecord, TopologyTestDriver};

        let topology = || {
            let builder = StreamsBuilder::new();
            builder
                .stream("input", Consumed::with(StringSerde, StringSerde))
                .to_table(Materialized::with(StringSerde, StringSerde).named("latest"))
                .suppress(Suppressed::until_time_limit(
                    std::time::Duration::from_millis(5),
                    BufferConfig::max_records(3),
                ))
                .to_stream()
                .to("output", Produced::with(StringSerde, StringSerde));
            builder.build()
        };
        let mut crash_test = TopologyTestDriver::with_crashes(11, topology).max_crashes(12);
        for i in 0..20u32 {
            let key = format!("k{}", (i * 7) % 5);
            let value = (i % 4 != 3).then(|| i.to_string());
            crash_test.pipe(
                TestRecord::new("input", Some(key.as_str()), value.as_deref())
                    .timestamp(i64::from(i) * 2)
                    .id(&format!("m{i}")),
            );
        }
        let summary = crash_test
            .run()
            .expect("every crash matches the crash-free run");
        assert!(
            summary.written.get("output").copied().unwrap_or(0) > 5,
            "{summary:?}"
        );
        assert!(!summary.crashes.is_empty());
    }

    #[test]
    fn times_sort_as_bytes() {
        let times = [i64::MIN, -1, 0, 1, 99, i64::MAX];
        for w in times.windows(2) {
            assert!(sortable(w[0]) < sortable(w[1]));
            assert_eq!(unsortable(sortable(w[0])), w[0]);
        }
    }
}
