//! `eosflow dlt list|show|redrive|purge`: what an operator does with dead letters.
//!
//! Redrive sends selected records back to their original topic in one transaction, keeping key,
//! value and the `id` header (so dedup still holds: redriving twice yields one output) and adding
//! `eosflow.redrive`. Purge deletes a DLT's records up to an offset, after writing who, why and
//! what to the audit topic. Both are recorded in `eosflow.dlt.audit`.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Serialize;

use super::dlt::PREFIX;
use super::headers::REDRIVE;
use crate::kafka::reader::{partition_count, read_all};
use crate::kafka::{ClientRole, KafkaClients};
use crate::sink::TxnSink;

/// The audit topic (declared in `topics/dlt.toml`).
pub const AUDIT_TOPIC: &str = "eosflow.dlt.audit";

/// A dead letter, owned.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// DLT partition.
    pub partition: i32,
    /// DLT offset.
    pub offset: i64,
    /// Original key.
    pub key: Option<String>,
    /// Original value (lossy UTF-8 for display; the bytes are redriven as they are).
    #[serde(skip)]
    pub value: Option<Vec<u8>>,
    /// Every header.
    pub headers: Vec<(String, String)>,
    /// DLT append time, ms.
    pub timestamp: Option<i64>,
}

impl DeadLetter {
    fn from(m: &BorrowedMessage<'_>) -> Self {
        let headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(|k| String::from_utf8_lossy(k).to_string()),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: m.timestamp().to_millis(),
        }
    }

    /// First header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `eosflow.dlt.<name>`.
    pub fn dlt(&self, name: &str) -> Option<&str> {
        self.header(&format!("{PREFIX}{name}"))
    }
}

/// Which dead letters an operation applies to (all given criteria must hold).
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// Record key.
    pub key: Option<String>,
    /// `id` header.
    pub id: Option<String>,
    /// DLT offsets, inclusive.
    pub offsets: Option<(i64, i64)>,
    /// Failure time (`eosflow.dlt.last.failure.at`), ms, inclusive.
    pub time: Option<(i64, i64)>,
}

impl Selector {
    /// Whether `d` is selected.
    pub fn matches(&self, d: &DeadLetter) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| d.key.as_deref() == Some(k.as_str()))
            && self
                .id
                .as_ref()
                .is_none_or(|i| d.header("id") == Some(i.as_str()))
            && self
                .offsets
                .is_none_or(|(a, b)| (a..=b).contains(&d.offset))
            && self.time.is_none_or(|(a, b)| {
                d.dlt("last.failure.at")
                    .and_then(|t| t.parse::<i64>().ok())
                    .or(d.timestamp)
                    .is_some_and(|t| (a..=b).contains(&t))
            })
    }
}

/// Why a DLT operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DltError {
    /// Reading the DLT failed.
    #[error(transparent)]
    Read(#[from] crate::kafka::reader::ReadError),
    /// Producing or deleting failed.
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// The admin API refused.
    #[error("kafka admin: {0}")]
    Admin(#[from] rdkafka::error::KafkaError),
    /// The audit topic could not be created.
    #[error("audit topic {AUDIT_TOPIC}: {0}")]
    Topics(#[from] crate::kafka::topics::TopicsError),
    /// A local runtime could not be built.
    #[error("{0}")]
    Io(String),
    /// A record cannot be redriven.
    #[error("DLT record {partition}@{offset} has no eosflow.dlt.original.topic header: it was not written by eosflow")]
    NoOrigin {
        /// DLT partition.
        partition: i32,
        /// DLT offset.
        offset: i64,
    },
    /// A dead letter marked `eosflow.dlt.redrivable: false`: a failed timer, whose key and
    /// value are internal (a store key, a timer payload), not a record of the input topic.
    #[error("DLT record {partition}@{offset} is a failed timer ({what}), not an input record: it cannot be redriven; select without it (its headers say what failed, and the timer's clean-up already ran)")]
    NotRedrivable {
        /// DLT partition.
        partition: i32,
        /// DLT offset.
        offset: i64,
        /// The timer: `kind name due`.
        what: String,
    },
}

/// Every dead letter of `dlt_topic` that `sel` selects, in DLT order.
pub fn read(
    clients: &KafkaClients,
    dlt_topic: &str,
    sel: &Selector,
) -> Result<Vec<DeadLetter>, DltError> {
    let mut out = Vec::new();
    read_all(clients, dlt_topic, Duration::from_secs(120), |m| {
        let d = DeadLetter::from(m);
        if sel.matches(&d) {
            out.push(d);
        }
        Ok(())
    })?;
    out.sort_by_key(|d| (d.timestamp, d.partition, d.offset));
    Ok(out)
}

/// Counts by error class and the oldest failure, for `dlt list`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records per `eosflow.dlt.error.class`.
    pub by_class: BTreeMap<String, u64>,
    /// Earliest failure time, ms.
    pub oldest: Option<i64>,
}

/// Summarises dead letters.
pub fn summarize(letters: &[DeadLetter]) -> Summary {
    let mut s = Summary::default();
    for d in letters {
        *s.by_class
            .entry(d.dlt("error.class").unwrap_or("unknown").to_string())
            .or_default() += 1;
        let t = d
            .dlt("first.failure.at")
            .and_then(|t| t.parse().ok())
            .or(d.timestamp);
        s.oldest = match (s.oldest, t) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    s
}

#[derive(Serialize)]
struct Audit<'a> {
    action: &'a str,
    dlt_topic: &'a str,
    reason: &'a str,
    operator: String,
    at_ms: i64,
    records: Vec<(i32, i64, Option<&'a str>)>,
}

fn operator() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

use crate::clock::now_ms;

/// Sends `letters` back to their original topics in one transaction, with an audit record.
/// `progress` is called after each record.
pub fn redrive(
    clients: &KafkaClients,
    app_id: &str,
    dlt_topic: &str,
    letters: &[DeadLetter],
    reason: &str,
    mut progress: impl FnMut(usize),
) -> Result<usize, DltError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DltError::Io(e.to_string()))?
        .block_on(ensure_audit_topic(clients))?;
    let sink = TxnSink::new(
        clients,
        &format!("{app_id}-dlt-redrive"),
        Duration::from_secs(60),
    )?;
    sink.begin()?;
    for (i, d) in letters.iter().enumerate() {
        let Some(topic) = d.dlt("original.topic") else {
            sink.abort()?;
            return Err(DltError::NoOrigin {
                partition: d.partition,
                offset: d.offset,
            });
        };
        if d.dlt("redrivable") == Some("false") {
            sink.abort()?;
            let what = ["timer.kind", "timer.name", "timer.due"]
                .map(|h| d.dlt(h).unwrap_or("?"))
                .join(" ");
            return Err(DltError::NotRedrivable {
                partition: d.partition,
                offset: d.offset,
                what,
            });
        }
        let mut headers: Vec<(String, Vec<u8>)> = d
            .headers
            .iter()
            .filter(|(k, _)| !k.starts_with("eosflow."))
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        headers.push((
            REDRIVE.into(),
            format!("{dlt_topic}:{}:{}", d.partition, d.offset).into_bytes(),
        ));
        // The original Kafka timestamp, not the redrive's clock: a windowed aggregate or join
        // reading the Kafka timestamp puts the record back into the windows it belonged to.
        let timestamp = d
            .dlt("original.timestamp")
            .and_then(|t| t.parse::<i64>().ok())
            .filter(|t| *t >= 0);
        sink.send_at(
            topic,
            None,
            timestamp,
            d.key.as_deref().map(str::as_bytes),
            d.value.as_deref(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )?;
        progress(i + 1);
    }
    audit(&sink, "redrive", dlt_topic, reason, letters)?;
    sink.commit()?;
    Ok(letters.len())
}

/// Creates the audit topic if it is missing (it is declared in `topics/dlt.toml` too).
async fn ensure_audit_topic(clients: &KafkaClients) -> Result<(), DltError> {
    let mut spec = crate::kafka::topics::TopicSpec::new(AUDIT_TOPIC, 1, "delete");
    spec.retention_ms = Some(-1);
    crate::kafka::topics::apply(clients, &[spec], Duration::from_secs(30)).await?;
    Ok(())
}

fn audit(
    sink: &TxnSink,
    action: &str,
    dlt_topic: &str,
    reason: &str,
    letters: &[DeadLetter],
) -> Result<(), DltError> {
    let a = Audit {
        action,
        dlt_topic,
        reason,
        operator: operator(),
        at_ms: now_ms(),
        records: letters
            .iter()
            .map(|d| (d.partition, d.offset, d.header("id")))
            .collect(),
    };
    let value = serde_json::to_vec(&a).unwrap_or_default();
    sink.send(
        AUDIT_TOPIC,
        None,
        Some(dlt_topic.as_bytes()),
        Some(&value),
        &[],
    )?;
    Ok(())
}

/// Deletes every record of `dlt_topic` before `before` (per partition; all of it when `None`),
/// after recording the reason and the purged records in the audit topic.
pub async fn purge(
    clients: &KafkaClients,
    app_id: &str,
    dlt_topic: &str,
    before: Option<i64>,
    reason: &str,
) -> Result<usize, DltError> {
    let sel = Selector {
        offsets: before.map(|b| (0, b - 1)),
        ..Selector::default()
    };
    let letters = read(clients, dlt_topic, &sel)?;
    ensure_audit_topic(clients).await?;
    let sink = TxnSink::new(
        clients,
        &format!("{app_id}-dlt-audit"),
        Duration::from_secs(60),
    )?;
    sink.begin()?;
    audit(&sink, "purge", dlt_topic, reason, &letters)?;
    sink.commit()?;
    let partitions = partition_count(clients, dlt_topic, Duration::from_secs(30))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let end = match before {
            Some(b) => Offset::Offset(b),
            None => Offset::End,
        };
        tpl.add_partition_offset(dlt_topic, p, end)?;
    }
    let admin: AdminClient<DefaultClientContext> = clients.config(ClientRole::Admin).create()?;
    admin
        .delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    Ok(letters.len())
}
