//! Evolvable state: a store's value schema and its history, for
//! [`AvroSerde::for_store`](super::avro_serde::AvroSerde::for_store).
//!
//! A store's values are Avro in the topics' wire format (magic byte, schema id, body), so each
//! value says which schema wrote it. The value schema is registered under the subject of the
//! store's changelog, `<app.id>-<store>-changelog-value` (Confluent's TopicNameStrategy on the
//! changelog topic), so the registry lists every schema the store may hold. A value written
//! under an older id is read with Avro schema resolution into the current schema, or — when a
//! rename or restructure needs more than resolution — decoded as its own version and handed to
//! the application's [`Upcasters`], keyed by the version's type name `stores.<store>.v<n>` (the
//! name `schemas/stores/<store>.v<n>.avsc` gives it, as `schemas/<domain>/<event>.v<n>.avsc`
//! names an event). `eosflow schemas check` refuses a new version the store's old values cannot
//! be read with. See docs/state-evolution.md.
//!
//! ```
//! use eosflow::serdes::StoreSchema;
//!
//! let v1 = r#"{"type":"record","name":"Count","namespace":"counts.v1",
//!     "fields":[{"name":"count","type":"long"}]}"#;
//! let v2 = r#"{"type":"record","name":"Count","namespace":"counts.v2",
//!     "fields":[{"name":"hits","type":"long","default":0},
//!               {"name":"last_seen","type":"long","default":-1}]}"#;
//! let schema = StoreSchema::new("counts", 2, v2)?.with_previous(1, v1)?;
//! assert_eq!(schema.current_version(), 2);
//! assert_eq!(schema.type_name(1), "stores.counts.v1");
//! assert_eq!(StoreSchema::subject("shop", "counts"), "shop-counts-changelog-value");
//! # Ok::<(), eosflow::serdes::StoreSchemaError>(())
//! ```

use std::collections::BTreeMap;

use super::decode::Upcasters;

/// docs/state-evolution.md, whose example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/state-evolution.md")]
pub struct StateEvolutionPage;

/// The directory under the schema root holding store value schemas
/// (`schemas/stores/<store>.v<n>.avsc`); [`super::Catalog::from_dir`] leaves it out, since its
/// files are no topic's contracts.
pub const STORES_DIR: &str = "stores";

/// Why a [`StoreSchema`] could not be built: caught while the topology is built, naming the
/// store and version, rather than as failing records later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreSchemaError {
    /// A version's text is not a valid Avro record schema.
    #[error("store {store}: value schema v{version} is not a valid Avro record schema: {error}")]
    Invalid {
        /// The store.
        store: String,
        /// The version.
        version: u32,
        /// apache-avro's (or the JSON parser's) error.
        error: String,
    },
    /// A previous version is not older than the current one, or is given twice.
    #[error("store {store}: v{version} is not a previous version of current v{current} (or is given twice)")]
    Version {
        /// The store.
        store: String,
        /// The version given.
        version: u32,
        /// The current version.
        current: u32,
    },
}

/// One store's value schema: the current version (what values are written with) and the older
/// versions the application still knows (so an upcaster can name them), with the upcasters
/// that turn an older version's value into the current one. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StoreSchema {
    store: String,
    current: u32,
    versions: BTreeMap<u32, String>,
    upcasters: Upcasters,
}

impl StoreSchema {
    /// Store `store`'s value schema `text`, at version `version`: what its values are written
    /// with from now on.
    pub fn new(store: &str, version: u32, text: &str) -> Result<Self, StoreSchemaError> {
        validate(store, version, text)?;
        Ok(Self {
            store: store.to_string(),
            current: version,
            versions: BTreeMap::from([(version, text.to_string())]),
            upcasters: Upcasters::new(),
        })
    }

    /// Adds an older version the store may still hold, so that values written with it are
    /// recognised as `stores.<store>.v<version>` and go through the upcasters registered from
    /// that name. Values of a version not given here are read by Avro resolution alone.
    pub fn with_previous(mut self, version: u32, text: &str) -> Result<Self, StoreSchemaError> {
        if version >= self.current || self.versions.contains_key(&version) {
            return Err(StoreSchemaError::Version {
                store: self.store.clone(),
                version,
                current: self.current,
            });
        }
        validate(&self.store, version, text)?;
        self.versions.insert(version, text.to_string());
        Ok(self)
    }

    /// The upcasters applied to values of older versions (by type name `stores.<store>.v<n>`;
    /// the chain must end at the current version's name). The application's own `Upcasters`
    /// may hold its topics' upcasters too: only the chains from this store's names are used.
    pub fn with_upcasters(mut self, upcasters: Upcasters) -> Self {
        self.upcasters = upcasters;
        self
    }

    /// The store's name.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The version values are written with.
    pub fn current_version(&self) -> u32 {
        self.current
    }

    /// The current version's schema text.
    pub fn current_text(&self) -> &str {
        self.versions
            .get(&self.current)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Every version this schema knows, oldest first, with its text.
    pub fn versions(&self) -> impl Iterator<Item = (u32, &str)> {
        self.versions.iter().map(|(v, t)| (*v, t.as_str()))
    }

    /// The upcasters.
    pub fn upcasters(&self) -> &Upcasters {
        &self.upcasters
    }

    /// The type name of `version` (`stores.<store>.v<n>`): what upcasters are registered by,
    /// and what `schemas/stores/<store>.v<n>.avsc` is called by `eosflow schemas check`.
    pub fn type_name(&self, version: u32) -> String {
        format!("{STORES_DIR}.{}.v{version}", self.store)
    }

    /// The registry subject of `store`'s values in application `app_id`: the changelog
    /// topic's value subject, `<app.id>-<store>-changelog-value`.
    pub fn subject(app_id: &str, store: &str) -> String {
        format!("{app_id}-{store}-changelog-value")
    }
}

fn validate(store: &str, version: u32, text: &str) -> Result<(), StoreSchemaError> {
    let invalid = |error: String| StoreSchemaError::Invalid {
        store: store.to_string(),
        version,
        error,
    };
    let schema = apache_avro::Schema::parse_str(text).map_err(|e| invalid(e.to_string()))?;
    if !matches!(schema, apache_avro::Schema::Record(_)) {
        return Err(invalid("the top level is not a record".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use apache_avro::types::Value;

    use super::*;
    use crate::codec::avro_serde::AvroSerde;
    use crate::codec::decode::{encode_wire, FixedSource};
    use crate::processor::{Context, ProcessError, Processor, ProcessorSpec, Record, StoreHandle};
    use crate::serdes::{Serde, StringSerde};
    use crate::testing::{TestRecord, TopologyTestDriver};

    /// v1 of store `counts`: how many records a key had.
    const V1: &str = r#"{"type":"record","name":"Count","namespace":"counts.v1",
        "fields":[{"name":"count","type":"long"}]}"#;
    /// v2: `count` renamed `hits` (a default, so Avro alone would read v1 values as 0: the
    /// upcaster carries the count over) and `last_seen` added.
    const V2: &str = r#"{"type":"record","name":"Count","namespace":"counts.v2",
        "fields":[{"name":"hits","type":"long","default":0},
                  {"name":"last_seen","type":"long","default":-1}]}"#;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
    struct CountV1 {
        count: i64,
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
    struct CountV2 {
        hits: i64,
        last_seen: i64,
    }

    /// `stores.counts.v1` → v2: `hits` is the old `count`; when it was last seen is unknown.
    fn count_v1_to_v2(v: Value) -> Result<Value, String> {
        let Value::Record(fields) = v else {
            return Err(format!("expected a record, got {v:?}"));
        };
        let count = fields
            .into_iter()
            .find_map(|(n, v)| (n == "count").then_some(v))
            .ok_or("no count")?;
        Ok(Value::Record(vec![
            ("hits".into(), count),
            ("last_seen".into(), Value::Long(-1)),
        ]))
    }

    fn source() -> FixedSource {
        FixedSource(HashMap::from([(1, V1.to_string()), (2, V2.to_string())]))
    }

    fn v1_serde() -> AvroSerde<CountV1> {
        let schema = StoreSchema::new("counts", 1, V1).expect("v1");
        AvroSerde::for_store_with(1, schema, source()).expect("serde")
    }

    fn v2_schema(upcast: bool) -> StoreSchema {
        let mut up = Upcasters::new();
        if upcast {
            up.register("stores.counts.v1", "stores.counts.v2", count_v1_to_v2);
        }
        StoreSchema::new("counts", 2, V2)
            .and_then(|s| s.with_previous(1, V1))
            .expect("v2")
            .with_upcasters(up)
    }

    fn v2_serde(upcast: bool) -> AvroSerde<CountV2> {
        AvroSerde::for_store_with(2, v2_schema(upcast), source()).expect("serde")
    }

    #[test]
    fn a_v1_value_is_upcast_to_v2_and_v2_values_round_trip() {
        let old = v1_serde()
            .serialize(&CountV1 { count: 41 })
            .expect("v1 bytes");
        assert_eq!(&old[..5], &[0, 0, 0, 0, 1], "the schema id is in the value");
        let v2 = v2_serde(true);
        assert_eq!(
            v2.deserialize(&old).expect("upcast"),
            CountV2 {
                hits: 41,
                last_seen: -1
            }
        );
        let new = CountV2 {
            hits: 42,
            last_seen: 7,
        };
        let bytes = v2.serialize(&new).expect("v2 bytes");
        assert_eq!(&bytes[..5], &[0, 0, 0, 0, 2]);
        assert_eq!(v2.deserialize(&bytes).expect("v2"), new);
        // Without the upcaster, Avro resolution alone reads the renamed field's default: the
        // count would restart, which is why the rename needs the upcaster.
        assert_eq!(v2_serde(false).deserialize(&old).expect("resolved").hits, 0);
    }

    #[test]
    fn a_writer_is_recognised_by_its_canonical_form_when_the_registry_reformats_it() {
        let reformatted: serde_json::Value = serde_json::from_str(V1).expect("json");
        let mut with_doc = reformatted.clone();
        with_doc["doc"] = "as the registry returned it".into();
        let src = FixedSource(HashMap::from([(5, with_doc.to_string())]));
        let serde = AvroSerde::<CountV2>::for_store_with(2, v2_schema(true), src).expect("serde");
        let old = encode_wire(
            5,
            &apache_avro::Schema::parse_str(V1).expect("v1"),
            Value::Record(vec![("count".into(), Value::Long(3))]),
        )
        .expect("bytes");
        assert_eq!(serde.deserialize(&old).expect("upcast").hits, 3);
    }

    #[test]
    fn unreadable_values_are_errors_naming_the_store_the_id_and_the_fix() {
        let v2 = v2_serde(true);
        let e = v2
            .deserialize(&[0, 0, 0, 0, 9, 2])
            .expect_err("unknown id")
            .to_string();
        assert!(
            e.contains(
                "store-unknown-schema-id: store counts: the value was written with schema id 9"
            ) && e.contains("re-register that schema"),
            "{e}"
        );
        let e = v2
            .deserialize(b"plain text")
            .expect_err("not Avro")
            .to_string();
        assert!(e.contains("store-value-not-avro: store counts"), "{e}");
        // v3 adds a field without a default and has no upcaster from v1: v1 values cannot be
        // read.
        let v3 = r#"{"type":"record","name":"Count","namespace":"counts.v3",
            "fields":[{"name":"hits","type":"long"},{"name":"last_seen","type":"long"}]}"#;
        let schema = StoreSchema::new("counts", 3, v3)
            .and_then(|s| s.with_previous(1, V1))
            .expect("v3");
        let serde = AvroSerde::<CountV2>::for_store_with(3, schema, source()).expect("serde");
        let old = v1_serde().serialize(&CountV1 { count: 1 }).expect("v1");
        let e = serde
            .deserialize(&old)
            .expect_err("incompatible")
            .to_string();
        assert!(
            e.contains("store-value-incompatible: store counts: a value written with schema id 1 (stores.counts.v1) cannot be read as the store's current value schema stores.counts.v3")
                && e.contains("register an upcaster from stores.counts.v1"),
            "{e}"
        );
        // An upcaster chain that stops short of the current version.
        let mut up = Upcasters::new();
        up.register("stores.counts.v1", "stores.counts.v2", count_v1_to_v2);
        let schema = StoreSchema::new("counts", 3, v3)
            .and_then(|s| s.with_previous(1, V1))
            .expect("v3")
            .with_upcasters(up);
        let serde = AvroSerde::<CountV2>::for_store_with(3, schema, source()).expect("serde");
        let e = serde
            .deserialize(&old)
            .expect_err("short chain")
            .to_string();
        assert!(
            e.contains(
                "store-upcast-failed: store counts: the value of schema id 1 (stores.counts.v1)"
            ) && e.contains("lead to stores.counts.v2, not to the current version"),
            "{e}"
        );
    }

    #[test]
    fn versions_must_be_older_than_the_current_and_valid() {
        let e = StoreSchema::new("counts", 1, V1)
            .and_then(|s| s.with_previous(2, V2))
            .expect_err("newer");
        assert!(e
            .to_string()
            .contains("store counts: v2 is not a previous version of current v1"));
        let e = StoreSchema::new("counts", 1, r#""long""#).expect_err("not a record");
        assert!(e
            .to_string()
            .contains("store counts: value schema v1 is not a valid Avro record"));
    }

    /// Counts records per key in store `counts`, at v1 or v2 of its value schema; v2 outputs
    /// `hits:<n> prev_last_seen:<m>` so a test sees which values were upcast.
    struct Counter {
        v2: bool,
        h1: StoreHandle<String, CountV1>,
        h2: StoreHandle<String, CountV2>,
    }

    fn counter(v2: bool, upcast: bool) -> ProcessorSpec<Counter> {
        ProcessorSpec::new(Counter {
            v2,
            h1: StoreHandle::new("counts", StringSerde, v1_serde()),
            h2: StoreHandle::new("counts", StringSerde, v2_serde(upcast)),
        })
        .store_name("default")
        .store("counts")
    }

    impl Processor for Counter {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
            let out = if self.v2 {
                let mut s = ctx.store(&self.h2)?;
                let prev = s.get(&key)?.unwrap_or(CountV2 {
                    hits: 0,
                    last_seen: 0,
                });
                let next = CountV2 {
                    hits: prev.hits + 1,
                    last_seen: r.offset,
                };
                s.put(&key, &next)?;
                format!("hits:{} prev_last_seen:{}", next.hits, prev.last_seen)
            } else {
                let mut s = ctx.store(&self.h1)?;
                let n = s.get(&key)?.map_or(0, |c| c.count) + 1;
                s.put(&key, &CountV1 { count: n })?;
                format!("count:{n}")
            };
            ctx.emit(
                "out",
                Some(key.into_bytes()),
                Some(out.into_bytes()),
                vec![],
            );
            Ok(())
        }
    }

    #[test]
    fn a_driver_topology_upgraded_mid_stream_from_v1_to_v2_keeps_every_count() {
        let mut d = TopologyTestDriver::new(counter(false, true)).expect("driver");
        let keys = 7;
        let total = 200;
        let switch = 90;
        let mut want: BTreeMap<String, i64> = BTreeMap::new();
        let mut in_v1: BTreeMap<String, i64> = BTreeMap::new();
        for i in 0..total {
            if i == switch {
                d.replace_processor(counter(true, true));
            }
            let key = format!("k{}", (i * 7 + i / 3) % keys);
            *want.entry(key.clone()).or_default() += 1;
            if i < switch {
                *in_v1.entry(key.clone()).or_default() += 1;
            }
            d.pipe(TestRecord::new("in", Some(key.as_str()), Some("x")).id(&format!("r{i}")))
                .expect("pipe");
        }
        assert!(
            d.read_raw_output("in.DLT").is_empty(),
            "nothing dead-lettered"
        );
        let out = d.read_raw_output("out");
        assert_eq!(out.len(), total as usize);
        // Per key: outputs count 1, 2, … n with no gap across the upgrade, and the first v2
        // output of a key that had v1 values read a v1 value (last_seen -1, from the upcaster).
        let mut seen: BTreeMap<String, i64> = BTreeMap::new();
        let mut upcast_reads = 0;
        for o in &out {
            let n = seen.entry(o.key_text()).or_default();
            *n += 1;
            let v = o.value_text();
            if let Some(c) = v.strip_prefix("count:") {
                assert_eq!(c, n.to_string(), "{v}");
            } else {
                assert!(v.starts_with(&format!("hits:{n} ")), "{} {v}", o.key_text());
                let first_v2 = *n == in_v1.get(&o.key_text()).copied().unwrap_or(0) + 1;
                if first_v2 && *n > 1 {
                    assert!(v.ends_with("prev_last_seen:-1"), "a v1 value read: {v}");
                    upcast_reads += 1;
                }
            }
        }
        assert_eq!(upcast_reads, in_v1.len(), "every key's v1 value was read");
        assert_eq!(seen, want);
        let handle = StoreHandle::new("counts", StringSerde, v2_serde(true));
        let store: BTreeMap<String, i64> = d
            .store_entries(&handle)
            .expect("store")
            .into_iter()
            .map(|(k, v)| (k, v.hits))
            .collect();
        assert_eq!(store, want, "the final store holds every key's count");
    }

    #[test]
    fn an_unreadable_store_value_dead_letters_the_record_naming_the_store() {
        let mut d = TopologyTestDriver::new(counter(false, true)).expect("driver");
        d.pipe(TestRecord::new("in", Some("k"), Some("x")).id("a"))
            .expect("pipe");
        // A v2 deploy that forgot the upcaster and whose v2 cannot read v1 at all.
        let v3 = r#"{"type":"record","name":"Count","namespace":"counts.v3",
            "fields":[{"name":"hits","type":"long"},{"name":"last_seen","type":"long"}]}"#;
        let schema = StoreSchema::new("counts", 3, v3).expect("v3");
        let mut src = source();
        src.0.insert(3, v3.to_string());
        let broken = AvroSerde::<CountV2>::for_store_with(3, schema, src).expect("serde");
        d.replace_processor(
            ProcessorSpec::new(Counter {
                v2: true,
                h1: StoreHandle::new("counts", StringSerde, v1_serde()),
                h2: StoreHandle::new("counts", StringSerde, broken),
            })
            .store_name("default")
            .store("counts"),
        );
        d.pipe(TestRecord::new("in", Some("k"), Some("x")).id("b"))
            .expect("pipe");
        let dead = d.read_raw_output("in.DLT");
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].dlt_class(), Some("permanent"));
        let reason = dead[0].dlt_reason().unwrap_or_default();
        assert!(
            reason.contains(
                "store-value-incompatible: store counts: a value written with schema id 1"
            ),
            "{reason}"
        );
    }
}
