//! The topic-shaped face of the driver (Kafka Streams' `TestInputTopic` / `TestOutputTopic`):
//! serdes given once per topic, then typed records piped in and read out.
//!
//! The topics borrow nothing: they hold a name and serdes, and each call takes the driver
//! (`topic.pipe(&mut driver, k, v)`). A topic that kept `&mut driver` would let a test hold one
//! topic at a time — the borrow checker forbids an input and an output topic side by side.

use super::driver::{DriverError, TopologyTestDriver};
use super::records::{OutputRecord, TestRecord};
use crate::processor::{Application, StoreHandle};
use crate::retry::dlt::DltClass;
use crate::serdes::Serde;
use crate::topology::windows::{Window, WindowStoreHandle};

/// An input topic of the topology under test, with its key and value serdes: made by
/// [`TopologyTestDriver::input_topic`].
pub struct TestInputTopic<K, V> {
    name: String,
    keys: Box<dyn Serde<K>>,
    values: Box<dyn Serde<V>>,
    partition: i32,
}

impl<K, V> TestInputTopic<K, V> {
    pub(super) fn new(
        name: String,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> Self {
        Self {
            name,
            keys: Box::new(keys),
            values: Box::new(values),
            partition: 0,
        }
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same topic, piping into `partition` (0 unless set): the partition is the task, and
    /// so the stores, that handle the records.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// The record of `key` and `value` (`None`: a tombstone), not yet piped: to add headers
    /// or an id before [`TopologyTestDriver::pipe`].
    pub fn record(&self, key: Option<&K>, value: Option<&V>) -> Result<TestRecord, DriverError> {
        let key = key.map(|k| self.keys.serialize(k)).transpose()?;
        let value = value.map(|v| self.values.serialize(v)).transpose()?;
        Ok(TestRecord::new(self.name.as_str(), key, value).partition(self.partition))
    }

    /// Pipes `key` and `value` in at the driver's wall clock; handled and committed when this
    /// returns.
    pub fn pipe<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
        key: impl Into<K>,
        value: impl Into<V>,
    ) -> Result<(), DriverError> {
        driver.pipe(self.record(Some(&key.into()), Some(&value.into()))?)
    }

    /// Pipes `key` and `value` in with event time `timestamp` (ms): what windows and
    /// event-time timers go by.
    pub fn pipe_at<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
        key: impl Into<K>,
        value: impl Into<V>,
        timestamp: i64,
    ) -> Result<(), DriverError> {
        let record = self.record(Some(&key.into()), Some(&value.into()))?;
        driver.pipe(record.timestamp(timestamp))
    }

    /// Pipes a value without a key (Kafka's null key).
    pub fn pipe_value<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
        value: impl Into<V>,
    ) -> Result<(), DriverError> {
        driver.pipe(self.record(None, Some(&value.into()))?)
    }

    /// Pipes a tombstone for `key` (a null value: deletes the key from a table).
    pub fn pipe_tombstone<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
        key: impl Into<K>,
    ) -> Result<(), DriverError> {
        driver.pipe(self.record(Some(&key.into()), None)?)
    }

    /// Pipes every pair in order.
    pub fn pipe_all<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<(), DriverError> {
        for (k, v) in pairs {
            driver.pipe(self.record(Some(&k), Some(&v))?)?;
        }
        Ok(())
    }
}

/// A typed record the topology wrote, as [`TestOutputTopic::read_records`] gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct TestOutput<K, V> {
    /// The key; `None` where Kafka has null.
    pub key: Option<K>,
    /// The value; `None` for a tombstone.
    pub value: Option<V>,
    /// The Kafka timestamp the runtime would set (the event time that caused the record).
    pub timestamp: Option<i64>,
    /// Every header, in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// An output topic of the topology under test, with its key and value serdes: made by
/// [`TopologyTestDriver::output_topic`]. Each read takes what it returns: a record is read once.
pub struct TestOutputTopic<K, V> {
    name: String,
    keys: Box<dyn Serde<K>>,
    values: Box<dyn Serde<V>>,
}

/// A key-value pair read back: `None` where Kafka has null.
pub type KeyValue<K, V> = (Option<K>, Option<V>);

impl<K, V> TestOutputTopic<K, V> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn typed(&self, r: OutputRecord) -> Result<TestOutput<K, V>, DriverError> {
        let key = r
            .key
            .as_deref()
            .map(|k| self.keys.deserialize(k))
            .transpose()?;
        let value = r
            .value
            .as_deref()
            .map(|v| self.values.deserialize(v))
            .transpose()?;
        Ok(TestOutput {
            key,
            value,
            timestamp: r.timestamp,
            headers: r.headers,
        })
    }

    /// The oldest unread record as key and value; `None` when the topic has nothing unread.
    pub fn read_key_value<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
    ) -> Result<Option<KeyValue<K, V>>, DriverError> {
        Ok(self.read_record(driver)?.map(|r| (r.key, r.value)))
    }

    /// The oldest unread record with its timestamp and headers; `None` when nothing is unread.
    pub fn read_record<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
    ) -> Result<Option<TestOutput<K, V>>, DriverError> {
        driver
            .take_first(&self.name)
            .map(|r| self.typed(r))
            .transpose()
    }

    /// Every unread record, oldest first, with timestamps and headers.
    pub fn read_records<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
    ) -> Result<Vec<TestOutput<K, V>>, DriverError> {
        driver
            .read_raw_output(&self.name)
            .into_iter()
            .map(|r| self.typed(r))
            .collect()
    }

    /// Every unread record as key and value, oldest first.
    pub fn read_key_values<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
    ) -> Result<Vec<KeyValue<K, V>>, DriverError> {
        Ok(self
            .read_records(driver)?
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect())
    }

    /// Every unread value, oldest first (`None` for a tombstone).
    pub fn read_values<P: Application>(
        &self,
        driver: &mut TopologyTestDriver<P>,
    ) -> Result<Vec<Option<V>>, DriverError> {
        Ok(self
            .read_records(driver)?
            .into_iter()
            .map(|r| r.value)
            .collect())
    }

    /// Whether every record written to the topic has been read.
    pub fn is_empty<P: Application>(&self, driver: &TopologyTestDriver<P>) -> bool {
        driver.unread(&self.name) == 0
    }

    /// How many records are unread.
    pub fn len<P: Application>(&self, driver: &TopologyTestDriver<P>) -> usize {
        driver.unread(&self.name)
    }
}

/// A record the runtime dead-lettered, read from a `<topic>.DLT` by
/// [`TopologyTestDriver::dead_letters`]: why (class and reason) and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Why it is there: `permanent`, `late-record`, `bad-timestamp`, `transient-exhausted` …
    pub class: DltClass,
    /// The handler's error message (or the runtime's, for late records and bad timestamps).
    pub reason: String,
    /// The topic it was read from (a retry level's records name their level).
    pub original_topic: String,
    /// The input offset it had there.
    pub original_offset: Option<i64>,
    /// How many times it was tried.
    pub attempts: Option<u32>,
    /// The record as written to the DLT: key, value and headers unchanged.
    pub record: OutputRecord,
}

impl DeadLetter {
    /// The dead letter of a `<topic>.DLT` record; `None` when its class header is missing or
    /// unknown (not written by the runtime).
    pub fn from_record(record: OutputRecord) -> Option<Self> {
        let class = parse_class(record.dlt_class()?)?;
        let header = |name: &str| {
            record
                .header(&format!("{}{name}", crate::retry::dlt::PREFIX))
                .map(str::to_string)
        };
        Some(Self {
            class,
            reason: record.dlt_reason().unwrap_or_default().to_string(),
            original_topic: header("original.topic").unwrap_or_default(),
            original_offset: header("original.offset").and_then(|o| o.parse().ok()),
            attempts: header("attempts").and_then(|a| a.parse().ok()),
            record,
        })
    }
}

/// The class written as `text` in `eosflow.dlt.error.class`.
fn parse_class(text: &str) -> Option<DltClass> {
    [
        DltClass::Permanent,
        DltClass::TransientExhausted,
        DltClass::ParkedBehindDeadLetter,
        DltClass::Unwritable,
        DltClass::ParkedOverflow,
        DltClass::IdConflict,
        DltClass::LateRecord,
        DltClass::BadTimestamp,
    ]
    .into_iter()
    .find(|c| c.as_str() == text)
}

/// A typed read view of a key-value store of the topology under test (partition 0), as the
/// next record would see it: made by [`TopologyTestDriver::key_value_store`].
pub struct KeyValueStoreView<'d, P: Application, K, V> {
    driver: &'d mut TopologyTestDriver<P>,
    handle: &'d StoreHandle<K, V>,
}

impl<P: Application, K, V> KeyValueStoreView<'_, P, K, V> {
    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Result<Option<V>, DriverError> {
        self.driver.store_get(self.handle, key)
    }

    /// Every entry, in key (byte) order.
    pub fn all(&mut self) -> Result<Vec<(K, V)>, DriverError> {
        self.driver.store_entries(self.handle)
    }

    /// The entries with keys in `[from, to)`.
    pub fn range(&mut self, from: &K, to: &K) -> Result<Vec<(K, V)>, DriverError> {
        self.driver.store_range(self.handle, from, to)
    }

    /// The entries whose key starts with `prefix`.
    pub fn prefix(&mut self, prefix: &K) -> Result<Vec<(K, V)>, DriverError> {
        self.driver.store_prefix(self.handle, prefix)
    }
}

/// A typed read view of a windowed store of the topology under test (partition 0): made by
/// [`TopologyTestDriver::window_store`].
pub struct WindowStoreView<'d, P: Application, K, V> {
    driver: &'d mut TopologyTestDriver<P>,
    handle: &'d WindowStoreHandle<K, V>,
}

impl<P: Application, K, V> WindowStoreView<'_, P, K, V> {
    /// The value of `key`'s window starting at `start`.
    pub fn fetch(&mut self, key: &K, start: i64) -> Result<Option<V>, DriverError> {
        Ok(self
            .fetch_range(key, start, start)?
            .into_iter()
            .find(|(w, _)| w.start == start)
            .map(|(_, v)| v))
    }

    /// `key`'s windows whose start lies in `from..=to`, in start order.
    pub fn fetch_range(
        &mut self,
        key: &K,
        from: i64,
        to: i64,
    ) -> Result<Vec<(Window, V)>, DriverError> {
        self.driver.window_fetch_range(self.handle, key, from, to)
    }

    /// Every window of every key, in key then start order.
    pub fn all(&mut self) -> Result<Vec<(K, Window, V)>, DriverError> {
        self.driver.window_all(self.handle)
    }
}

/// The topic-shaped API: what Kafka Streams' `TopologyTestDriver` calls `createInputTopic`,
/// `createOutputTopic`, `getKeyValueStore` and `getWindowStore`.
impl<P: Application> TopologyTestDriver<P> {
    /// Input topic `name` with its serdes: pipe typed records with
    /// [`TestInputTopic::pipe`], `pipe_at` (event time) or `pipe_value` (no key).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("words", Consumed::with(StringSerde, StringSerde))
    ///     .map_values(|w| w.to_uppercase())
    ///     .to("shouted", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let words = driver.input_topic("words", StringSerde, StringSerde);
    /// let shouted = driver.output_topic("shouted", StringSerde, StringSerde);
    /// words.pipe(&mut driver, "k", "hello")?;
    /// words.pipe_value(&mut driver, "bye")?;
    /// let values = shouted.read_values(&mut driver)?;
    /// assert_eq!(values, vec![Some("HELLO".to_string()), Some("BYE".to_string())]);
    /// assert!(shouted.is_empty(&driver));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn input_topic<K, V>(
        &self,
        name: impl Into<String>,
        key_serde: impl Serde<K> + 'static,
        value_serde: impl Serde<V> + 'static,
    ) -> TestInputTopic<K, V> {
        TestInputTopic::new(name.into(), key_serde, value_serde)
    }

    /// Output topic `name` with its serdes: read what the topology wrote with
    /// [`TestOutputTopic::read_key_value`], `read_records`, `read_values`; `is_empty` says
    /// whether everything was read.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("amounts", Consumed::with(StringSerde, I64Serde))
    ///     .filter(|_, v| *v > 0)
    ///     .to("positive", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let amounts = driver.input_topic("amounts", StringSerde, I64Serde);
    /// let positive = driver.output_topic("positive", StringSerde, I64Serde);
    /// amounts.pipe_at(&mut driver, "a", 5, 1_000)?;
    /// amounts.pipe(&mut driver, "b", -1)?;
    /// let first = positive.read_records(&mut driver)?;
    /// assert_eq!(first.len(), 1);
    /// assert_eq!(first[0].key.as_deref(), Some("a"));
    /// assert_eq!((first[0].value, first[0].timestamp), (Some(5), Some(1_000)));
    /// assert_eq!(positive.read_key_value(&mut driver)?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn output_topic<K, V>(
        &self,
        name: impl Into<String>,
        key_serde: impl Serde<K> + 'static,
        value_serde: impl Serde<V> + 'static,
    ) -> TestOutputTopic<K, V> {
        TestOutputTopic {
            name: name.into(),
            keys: Box::new(key_serde),
            values: Box::new(value_serde),
        }
    }

    /// A typed read view of the key-value store `handle` names (partition 0), as the next
    /// record would see it.
    pub fn key_value_store<'d, K, V>(
        &'d mut self,
        handle: &'d StoreHandle<K, V>,
    ) -> KeyValueStoreView<'d, P, K, V> {
        KeyValueStoreView {
            driver: self,
            handle,
        }
    }

    /// A typed read view of the windowed store `handle` names (partition 0).
    pub fn window_store<'d, K, V>(
        &'d mut self,
        handle: &'d WindowStoreHandle<K, V>,
    ) -> WindowStoreView<'d, P, K, V> {
        WindowStoreView {
            driver: self,
            handle,
        }
    }

    /// Takes the dead letters written for `topic` since the last read: `topic` is an input
    /// topic (its `<topic>.DLT` is read) or the DLT's own name. Records of the DLT without a
    /// known class are left out (the runtime writes none).
    pub fn dead_letters(&mut self, topic: &str) -> Vec<DeadLetter> {
        let dlt = if topic.ends_with(".DLT") {
            topic.to_string()
        } else {
            crate::retry::dlt::topic_for(topic)
        };
        self.read_raw_output(&dlt)
            .into_iter()
            .filter_map(DeadLetter::from_record)
            .collect()
    }
}
