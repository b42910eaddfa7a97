//! Contracts against the real registry and broker: every bad-input class dead-lettered with its
//! reason while good records behind it flow; every schema round-trips through the registry; v1
//! bytes upcast to v2; `eosflow schemas check` accepts and rejects the right changes.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use apache_avro::types::Value;
use eosflow::internals::codec::decode::{Limits, RegistrySource};
use eosflow::internals::codec::registry::Registry;
use eosflow::internals::codec::{Catalog, Decoder, Payload};
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::retry::tooling::{self, Selector};
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
use rdkafka::Message;
use serde_json::Value as Json;
use support::pipeline::{Instance, Pipeline};

fn schemas_dir() -> std::path::PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("schemas")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("tokio")
}

/// A value for every field of an Avro schema (JSON form), with named types resolved.
fn sample(schema: &Json, names: &mut HashMap<String, Json>, seed: i64) -> Value {
    match schema {
        Json::String(s) => match s.as_str() {
            "null" => Value::Null,
            "boolean" => Value::Boolean(seed % 2 == 0),
            "int" => Value::Int(seed as i32),
            "long" => Value::Long(seed * 1000),
            "float" => Value::Float(seed as f32),
            "double" => Value::Double(seed as f64),
            "bytes" => Value::Bytes(vec![seed as u8; 3]),
            "string" => Value::String(format!("s-{seed}")),
            named => {
                let short = named.rsplit('.').next().unwrap_or(named).to_string();
                let def = names
                    .get(&short)
                    .cloned()
                    .expect("named type defined earlier");
                sample(&def, names, seed)
            }
        },
        Json::Array(branches) => {
            let i = branches.len() - 1; // the non-null branch of ["null", T]
            Value::Union(i as u32, Box::new(sample(&branches[i], names, seed)))
        }
        Json::Object(o) => {
            if let Some(n) = o.get("name").and_then(Json::as_str) {
                names.insert(
                    n.rsplit('.').next().unwrap_or(n).to_string(),
                    schema.clone(),
                );
            }
            match (
                o.get("type").and_then(Json::as_str),
                o.get("logicalType").and_then(Json::as_str),
            ) {
                (Some("long"), Some("timestamp-millis")) => {
                    Value::TimestampMillis(1_700_000_000_000 + seed)
                }
                (Some("record"), _) => Value::Record(
                    o["fields"]
                        .as_array()
                        .expect("fields")
                        .iter()
                        .map(|f| {
                            (
                                f["name"].as_str().expect("name").to_string(),
                                sample(&f["type"], names, seed),
                            )
                        })
                        .collect(),
                ),
                (Some("enum"), _) => {
                    let s = o["symbols"].as_array().expect("symbols");
                    let i = (seed as usize) % s.len();
                    Value::Enum(i as u32, s[i].as_str().expect("symbol").to_string())
                }
                (Some("array"), _) => Value::Array(vec![sample(&o["items"], names, seed)]),
                (Some("map"), _) => Value::Map(HashMap::from([(
                    "k".to_string(),
                    sample(&o["values"], names, seed),
                )])),
                _ => sample(&o["type"], names, seed),
            }
        }
        other => panic!("unexpected schema node {other}"),
    }
}

fn sample_of(text: &str, seed: i64) -> Value {
    let json: Json = serde_json::from_str(text).expect("json");
    sample(&json, &mut HashMap::new(), seed)
}

#[test]
fn contracts_every_schema_round_trips_through_the_registry() {
    let catalog = Catalog::from_dir(&schemas_dir()).expect("schemas/");
    assert!(catalog.len() >= 6);
    let topic = support::unique("contracts-roundtrip");
    let registry = Registry::new(&support::registry_url());
    let mut encoded = Vec::new();
    rt().block_on(async {
        for c in catalog.iter() {
            let value = sample_of(&c.text, 3);
            let bytes = tokio::time::timeout(
                Duration::from_secs(30),
                registry.encode(&topic, &c.text, value.clone()),
            )
            .await
            .expect("registry answers")
            .unwrap_or_else(|e| panic!("{}: {e}", c.type_name));
            assert_eq!(bytes[0], 0);
            let cold = Registry::new(&support::registry_url())
                .decode(&bytes)
                .await
                .expect("decode");
            assert_eq!(cold, value, "{}", c.type_name);
            encoded.push((c.type_name.clone(), bytes, value));
        }
    });
    // The processor-side decoder over the same bytes (no upcasters: types stay as written).
    let source = RegistrySource::new(Registry::new(&support::registry_url())).expect("source");
    let mut d = Decoder::new(source, catalog.clone());
    for (type_name, bytes, value) in &encoded {
        let (_, t, v) = d
            .decode_avro(bytes)
            .unwrap_or_else(|e| panic!("{type_name}: {e}"));
        assert_eq!(&t, type_name);
        assert_eq!(&v, value);
    }
    assert_eq!(
        d.fetches() as usize,
        encoded.len(),
        "one fetch per schema id"
    );
}

#[test]
fn contracts_v1_bytes_from_the_registry_are_upcast_to_v2_and_fetched_once() {
    let catalog = eosflow_orders::contracts::catalog().expect("catalog");
    let v1 = catalog.get("orders.order-placed.v1").expect("v1");
    let v2 =
        apache_avro::Schema::parse_str(&catalog.get("orders.order-placed.v2").expect("v2").text)
            .expect("v2");
    let topic = support::unique("contracts-upcast");
    let bytes = rt()
        .block_on(Registry::new(&support::registry_url()).encode(
            &topic,
            &v1.text,
            sample_of(&v1.text, 1),
        ))
        .expect("encode v1");
    let source = RegistrySource::new(Registry::new(&support::registry_url())).expect("source");
    let mut d = Decoder::new(source, catalog.clone())
        .with_upcasters(eosflow_orders::contracts::upcasters());
    for _ in 0..50 {
        let r = Record {
            topic: &topic,
            partition: 0,
            offset: 0,
            timestamp: None,
            key: Some(b"o-1"),
            value: Some(&bytes),
            headers: &[("type".to_string(), b"orders.order-placed.v1".to_vec())],
        };
        let e = d.decode(&r).expect("decodes");
        assert_eq!(e.type_name, "orders.order-placed.v2");
        assert_eq!(e.upcast_from.as_deref(), Some("orders.order-placed.v1"));
        let Payload::Avro(Value::Record(fields)) = &e.payload else {
            panic!("record")
        };
        assert_eq!(
            fields.last(),
            Some(&(
                "channel".to_string(),
                Value::Union(0, Box::new(Value::Null))
            ))
        );
        assert!(Value::Record(fields.clone()).validate(&v2));
    }
    assert_eq!(d.fetches(), 1, "50 decodes, one registry fetch");
}

/// Decodes with the contracts decoder and emits `<type> <order_id>` per good record.
struct OrdersProbe {
    decoder: Decoder,
    output: String,
}

impl Processor for OrdersProbe {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let event = self.decoder.decode(r)?;
        let Payload::Avro(Value::Record(fields)) = &event.payload else {
            return Err(ProcessError::permanent("expected an Avro record"));
        };
        let order = fields
            .iter()
            .find_map(|(n, v)| match (n.as_str(), v) {
                ("order_id", Value::String(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let key = r.key.map(<[u8]>::to_vec);
        ctx.emit(
            &self.output,
            key,
            Some(format!("{} {order}", event.type_name).into_bytes()),
            vec![],
        );
        Ok(())
    }
}

/// A record to produce: key, value, headers.
type Raw = (Option<Vec<u8>>, Vec<u8>, Vec<(String, Vec<u8>)>);

fn produce_bytes(topic: &str, records: &[Raw]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for (key, value, headers) in records {
        let mut h = rdkafka::message::OwnedHeaders::new();
        for (k, v) in headers {
            h = h.insert(rdkafka::message::Header {
                key: k,
                value: Some(v.as_slice()),
            });
        }
        let mut rec: BaseRecord<'_, Vec<u8>, Vec<u8>> =
            BaseRecord::to(topic).payload(value).headers(h);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        producer.send(rec).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
fn contracts_each_bad_input_class_lands_in_the_dlt_with_its_reason_and_good_records_flow() {
    let p = Pipeline::new("contracts-bad", 1);
    let catalog = eosflow_orders::contracts::catalog().expect("catalog");
    let v1 = catalog
        .get("orders.order-placed.v1")
        .expect("v1")
        .text
        .clone();
    let stranger = r#"{"type":"record","name":"Stranger","namespace":"contracts.test","doc":"A type no consumer knows.","fields":[{"name":"a","type":"int","doc":"Anything."}]}"#;
    let registry = Registry::new(&support::registry_url());
    let (goods, stranger_bytes) = rt().block_on(async {
        let mut goods = Vec::new();
        for i in 0..9 {
            let mut v = sample_of(&v1, i);
            if let Value::Record(f) = &mut v {
                f[0].1 = Value::String(format!("o-{i}"));
            }
            goods.push(
                registry
                    .encode(&p.input, &v1, v)
                    .await
                    .expect("encode good"),
            );
        }
        let s = registry
            .encode(
                &p.input,
                stranger,
                Value::Record(vec![("a".into(), Value::Int(1))]),
            )
            .await
            .expect("encode stranger");
        (goods, s)
    });
    let good = goods[0].clone();
    let mut unknown_id = good.clone();
    unknown_id[1..5].copy_from_slice(&0x7fff_fff0u32.to_be_bytes());
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"garbage");
    let mut oversize = good.clone();
    oversize.resize(8192, 0);
    let hdr = |k: &str, v: &[u8]| vec![(k.to_string(), v.to_vec())];
    // (key, value, headers, expected reason prefix)
    type Bad = (
        Option<Vec<u8>>,
        Vec<u8>,
        Vec<(String, Vec<u8>)>,
        &'static str,
    );
    let bads: Vec<Bad> = vec![
        (
            Some(b"bad-magic".to_vec()),
            b"\x01\0\0\0\x01hello".to_vec(),
            hdr("id", b"b-magic"),
            "unknown-magic-byte: 0x01",
        ),
        (
            Some(b"bad-id".to_vec()),
            unknown_id,
            hdr("id", b"b-id"),
            "unknown-schema-id: schema id 2147483632",
        ),
        (
            Some(b"bad-truncated".to_vec()),
            good[..good.len() - 4].to_vec(),
            hdr("id", b"b-trunc"),
            "truncated-avro:",
        ),
        (
            Some(b"bad-corrupt".to_vec()),
            trailing,
            hdr("id", b"b-corrupt"),
            "corrupt-avro:",
        ),
        (
            Some(b"bad-type".to_vec()),
            stranger_bytes,
            hdr("id", b"b-type"),
            "unknown-type: contracts.test.Stranger",
        ),
        (
            Some(b"bad-oversize".to_vec()),
            oversize,
            hdr("id", b"b-big"),
            "oversize: the value is 8192 bytes, the limit is 4096",
        ),
        (None, good.clone(), hdr("id", b"b-nullkey"), "null-key:"),
        (
            Some(b"bad-header-id".to_vec()),
            good.clone(),
            hdr("id", &[0xff, 0xfe, 0x00]),
            "bad-header: header `id` is not valid UTF-8",
        ),
        (
            Some(b"bad-header-type".to_vec()),
            good.clone(),
            hdr("type", &[0xc3, 0x28]),
            "bad-header: header `type` is not valid UTF-8",
        ),
    ];
    let mut records = Vec::new();
    for (i, (key, value, headers, _)) in bads.iter().enumerate() {
        records.push((key.clone(), value.clone(), headers.clone()));
        records.push((
            Some(format!("good-{i}").into_bytes()),
            goods[i].clone(),
            vec![
                ("id".to_string(), format!("g-{i}").into_bytes()),
                ("type".into(), b"orders.order-placed.v1".to_vec()),
            ],
        ));
    }
    produce_bytes(&p.input, &records);

    let source = RegistrySource::new(Registry::new(&support::registry_url())).expect("source");
    let decoder = Decoder::new(source, catalog)
        .with_upcasters(eosflow_orders::contracts::upcasters())
        .with_limits(Limits {
            max_value_bytes: 4096,
            ..Limits::default()
        });
    let mut c = p.config("a");
    c.retry.delays_ms = vec![300, 300, 300];
    c.retry.jitter_percent = 0;
    let inst = Instance::start(
        &c,
        // The Pipeline helper declares `<app>-count-changelog`.
        ProcessorSpec::new(OrdersProbe {
            decoder,
            output: p.output.clone(),
        })
        .store_name("count"),
    );
    let outputs = support::wait_for("9 good outputs", Duration::from_secs(60), || {
        let mut out = Vec::new();
        read_all(
            &support::clients(),
            &p.output,
            Duration::from_secs(30),
            |m| {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
                Ok(())
            },
        )
        .expect("read output");
        (out.len() >= 9).then_some(out)
    });
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    assert_eq!(
        summary.retried, 0,
        "bad input is permanent: nothing climbs the ladder"
    );
    let expected: Vec<String> = (0..9)
        .map(|i| format!("orders.order-placed.v2 o-{i}"))
        .collect();
    assert_eq!(
        outputs, expected,
        "every good record, upcast to v2, in order"
    );

    let letters =
        tooling::read(&support::clients(), &p.dlt, &Selector::default()).expect("read DLT");
    assert_eq!(
        letters.len(),
        bads.len(),
        "one dead letter per bad record: {letters:#?}"
    );
    for (letter, (key, _, _, reason)) in letters.iter().zip(&bads) {
        assert_eq!(letter.key.as_deref().map(str::as_bytes), key.as_deref());
        assert_eq!(letter.dlt("error.class"), Some("permanent"));
        let msg = letter.dlt("error.message").unwrap_or_default();
        assert!(
            msg.starts_with(reason),
            "{:?}: expected {reason:?}, got {msg:?}",
            letter.key
        );
    }
}

/// Runs `eosflow schemas check` on `dir` (no registry, no git); (exit ok, stdout).
fn check_cli(dir: &Path, extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["schemas", "check", "--dir"])
        .arg(dir)
        .args(extra)
        .env("EOSFLOW_SCHEMA_REGISTRY_URL", support::registry_url())
        .output()
        .expect("run eosflow schemas check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn schema_dir(v1_fields: &str, v2_fields: &str, rules: Option<&str>) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(support::unique("contracts-schemas"));
    std::fs::create_dir_all(dir.join("shop")).expect("mkdir");
    let rec = |ns: &str, fields: &str| {
        format!(
            r#"{{"type":"record","name":"Thing","namespace":"{ns}","doc":"A thing.","fields":[{fields}]}}"#
        )
    };
    std::fs::write(dir.join("shop/thing.v1.avsc"), rec("shop.v1", v1_fields)).expect("write v1");
    std::fs::write(dir.join("shop/thing.v2.avsc"), rec("shop.v2", v2_fields)).expect("write v2");
    if let Some(r) = rules {
        std::fs::write(dir.join("compatibility.toml"), r).expect("write rules");
    }
    dir
}

const A: &str = r#"{"name":"a","type":"string","doc":"a"}"#;
const B: &str = r#"{"name":"b","type":"int","doc":"b"}"#;
const NO_REMOTE: &[&str] = &["--no-registry", "--no-git"];

#[test]
fn contracts_schemas_check_accepts_an_added_optional_field_with_a_default() {
    let dir = schema_dir(
        A,
        &format!(r#"{A},{{"name":"c","type":["null","string"],"default":null,"doc":"c"}}"#),
        None,
    );
    let (ok, out) = check_cli(&dir, NO_REMOTE);
    assert!(ok, "{out}");
    assert!(out.contains("ok   shop.thing.v2 vs shop.thing.v1"), "{out}");
}

#[test]
fn contracts_schemas_check_rejects_an_added_field_without_default() {
    let dir = schema_dir(
        A,
        &format!(r#"{A},{{"name":"c","type":"long","doc":"c"}}"#),
        None,
    );
    let (ok, out) = check_cli(&dir, NO_REMOTE);
    assert!(!ok, "{out}");
    assert!(
        out.contains("Thing.c: field `c` (long) was added without a default"),
        "{out}"
    );
}

#[test]
fn contracts_schemas_check_rejects_a_type_change() {
    let dir = schema_dir(
        &format!("{A},{B}"),
        &format!(r#"{A},{{"name":"b","type":"string","doc":"b"}}"#),
        None,
    );
    let (ok, out) = check_cli(&dir, NO_REMOTE);
    assert!(!ok, "{out}");
    assert!(
        out.contains("Thing.b: type changed from int to string (not an Avro promotion)"),
        "{out}"
    );
    // int → long is a promotion
    let dir = schema_dir(
        &format!("{A},{B}"),
        &format!(r#"{A},{{"name":"b","type":"long","doc":"b"}}"#),
        None,
    );
    assert!(check_cli(&dir, NO_REMOTE).0);
}

#[test]
fn contracts_schemas_check_field_removal_without_default_fails_under_full_not_backward() {
    let v1 = format!("{A},{B}");
    let dir = schema_dir(&v1, A, None);
    let (ok, out) = check_cli(&dir, NO_REMOTE);
    assert!(ok, "BACKWARD: new readers ignore the removed field: {out}");
    let dir = schema_dir(
        &v1,
        A,
        Some("default = \"BACKWARD\"\n[types]\n\"shop.thing\" = \"FULL\"\n"),
    );
    let (ok, out) = check_cli(&dir, NO_REMOTE);
    assert!(!ok, "{out}");
    assert!(out.contains("Thing.b: old readers cannot read new data: field `b` (int) was added without a default"), "{out}");
}

/// Runs `eosflow schemas register` for the repo's schemas under `topic`; its output.
fn register_cli(topic: &str) -> String {
    let reg = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["schemas", "register", "--topic", topic, "--dir"])
        .arg(schemas_dir())
        .env("EOSFLOW_SCHEMA_REGISTRY_URL", support::registry_url())
        .output()
        .expect("register");
    let out =
        String::from_utf8_lossy(&reg.stdout).to_string() + &String::from_utf8_lossy(&reg.stderr);
    assert!(reg.status.success(), "{out}");
    out
}

#[test]
fn contracts_schemas_check_of_the_repo_passes_and_asks_the_registry() {
    let topic = support::unique("contracts-check");
    let reg_out = register_cli(&topic);
    assert!(
        reg_out.contains(&format!("subject {topic}-orders.v2.OrderPlaced")),
        "{reg_out}"
    );
    let (ok, out) = check_cli(&schemas_dir(), &["--topic", &topic]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "ok   orders.order-placed.v2 vs registry subject {topic}-orders.v2.OrderPlaced"
        )),
        "{out}"
    );
    assert!(
        out.contains("ok   orders.order-placed.v2 vs orders.order-placed.v1"),
        "{out}"
    );
}

#[test]
fn contracts_schemas_check_reports_what_the_registry_rejects() {
    // Register the repo's schemas under a fresh topic (which also sets BACKWARD on each subject),
    // then check a copy whose v1 gained a field without a default: only the registry has the old
    // v1, so only the registry comparison can fail.
    let topic = support::unique("contracts-reject");
    assert!(register_cli(&topic).contains("rule BACKWARD"));
    let dir = std::env::temp_dir().join(support::unique("contracts-reject"));
    std::fs::create_dir_all(dir.join("orders")).expect("mkdir");
    let v1 =
        std::fs::read_to_string(schemas_dir().join("orders/order-placed.v1.avsc")).expect("v1");
    let mut json: Json = serde_json::from_str(&v1).expect("json");
    json["fields"]
        .as_array_mut()
        .expect("fields")
        .push(serde_json::json!({"name": "priority", "type": "int", "doc": "New, no default."}));
    std::fs::write(dir.join("orders/order-placed.v1.avsc"), json.to_string()).expect("write");
    let (ok, out) = check_cli(&dir, &["--topic", &topic, "--no-git"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "FAIL orders.order-placed.v1 vs registry subject {topic}-orders.v1.OrderPlaced"
        )),
        "{out}"
    );
    assert!(
        out.contains("OrderPlaced.priority: field `priority` (int) was added without a default"),
        "{out}"
    );
}
