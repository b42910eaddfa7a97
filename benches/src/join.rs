//! The stream-table join shape: every order of the input joined with its customer's row from a
//! table co-partitioned with it, exactly-once, for eosflow (`eosflow run --topology
//! stream-table-join`, the [`topology`] below) and for Kafka Streams
//! (`benches/peer/src/JoinPeer.java`: `stream.mapValues(amount).join(builder.table(…), …)` with
//! `topology.optimization=all`, so the table's topic is its changelog in both), on the same
//! topics in the same run.
//!
//! - The table topic `<input>.customers` (compacted, as many partitions as the input) holds one
//!   row of [`ROW_BYTES`] bytes per key `k<i>` for `i < table rows` (`--join-table-rows`,
//!   default: the keys), written and committed before the instances start, timestamped before
//!   every input record. The backlog's keys are `k<i % keys>`: with at least as many rows as
//!   keys every order finds its customer.
//! - A result is the order's key and the amount as 8 big-endian bytes followed by the row.
//! - Throughput is read as in the windowed shape: the group's committed input offsets, polled
//!   (see [`crate::windowed::OffsetPoller`]), 10th→90th percentile of each partition's backlog.
//! - Correctness: the committed results must be one per backlog record (the probes, keyed
//!   `probe-<p>`, have no customer: an inner join drops them), their amounts must add up to the
//!   backlog's and each must carry its key's row.

use std::time::Duration;

use rdkafka::Message;

use super::workload;
use super::BenchError;
use crate::windowed::AmountSerde;
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{BytesSerde, Serde, SerdeError, StringSerde};
use eosflow::topology::{TableHandle, Topology, TopologyError};

/// Bytes of a table row (a customer record of about this size).
pub const ROW_BYTES: usize = 100;
/// The table's name (its store's).
pub const TABLE: &str = "customers";

/// The table topic of an input: `<input>.customers`.
pub fn table_topic(input: &str) -> String {
    format!("{input}.{TABLE}")
}

/// The row of key `k<i>`: its name and tier, space-padded to [`ROW_BYTES`].
pub fn row(i: u64) -> Vec<u8> {
    let mut v = format!("customer k{i} tier {}", i % 5).into_bytes();
    v.resize(ROW_BYTES, b' ');
    v
}

/// A result value: the order's amount (8 big-endian bytes) and its customer's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enriched {
    /// The order's amount.
    pub amount: i64,
    /// The customer's row.
    pub row: Vec<u8>,
}

/// [`Enriched`] as 8 big-endian bytes of amount followed by the row, as the peer writes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnrichedSerde;

impl Serde<Enriched> for EnrichedSerde {
    fn serialize(&self, v: &Enriched) -> Result<Vec<u8>, SerdeError> {
        let mut out = Vec::with_capacity(8 + v.row.len());
        out.extend_from_slice(&v.amount.to_be_bytes());
        out.extend_from_slice(&v.row);
        Ok(out)
    }

    fn deserialize(&self, b: &[u8]) -> Result<Enriched, SerdeError> {
        let amount = b
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| SerdeError::new(format!("a result is ≥ 8 bytes, got {}", b.len())))?;
        Ok(Enriched {
            amount,
            row: b[8..].to_vec(),
        })
    }
}

/// eosflow's side of the shape (`eosflow run --topology stream-table-join`): `input`'s amounts
/// (Avro schemas from `registry_url`, or decimal text) inner-joined by key with the table of
/// [`table_topic`]`(input)`, to `output`.
///
/// In the broker-free test driver, with decimal amounts:
///
/// ```
/// use eosflow::serdes::StringSerde;
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::TableHandle;
/// use eosflow_bench::join::{row, table_topic, topology, Enriched, EnrichedSerde};
///
/// let mut driver = TopologyTestDriver::new(topology("orders", "enriched", "http://127.0.0.1:9")?)?;
/// let table = TableHandle::new("customers", table_topic("orders"), StringSerde, eosflow::serdes::BytesSerde);
/// driver.pipe_table(&table, &"k7".to_string(), Some(&row(7)))?;
/// driver.pipe(TestRecord::new("orders", Some("k7"), Some("12")))?;
/// driver.pipe(TestRecord::new("orders", Some("probe-0"), Some("1")))?; // no customer: dropped
/// let out = driver.read_output("enriched", &StringSerde, &EnrichedSerde)?;
/// assert_eq!(out, vec![(Some("k7".to_string()), Some(Enriched { amount: 12, row: row(7) }))]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn topology(input: &str, output: &str, registry_url: &str) -> Result<Topology, TopologyError> {
    let customers = TableHandle::new(TABLE, table_topic(input), StringSerde, BytesSerde);
    Topology::builder()
        .add_source("in", &[input], StringSerde, AmountSerde::new(registry_url))
        .add_table(&customers)
        .add_stream_table_join(
            "join",
            &customers,
            |_, amount: &i64, row: &Vec<u8>| {
                Some(Enriched {
                    amount: *amount,
                    row: row.clone(),
                })
            },
            &["in"],
        )
        .add_sink("out", output, StringSerde, EnrichedSerde, &["join"])
        .build()
}

/// Writes rows `k0 … k<rows - 1>` to `topic` at timestamp `ts`, visible when this returns.
pub fn load_table(
    clients: &KafkaClients,
    topic: &str,
    rows: u64,
    ts: i64,
) -> Result<(), BenchError> {
    let p = workload::producer(clients, 5)?;
    for i in 0..rows {
        let key = format!("k{i}");
        workload::send_at(&p, topic, (None, Some(ts)), &key, &key, &row(i))?;
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    workload::flush(&p)
}

/// What the backlog implies: one result per record (`records`), the sum of their amounts.
pub fn expected(records: u64) -> (u64, i64) {
    let amount = (0..records).map(eosflow_verify::Workload::amount).sum();
    (records, amount)
}

/// What the committed output held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Joined {
    /// Results.
    pub results: u64,
    /// Sum of their amounts.
    pub amount: i64,
    /// Results whose row is not their key's (or whose key is not `k<i>`).
    pub wrong_rows: u64,
}

/// Reads every committed result of `output` (read_committed).
pub fn joined(clients: &KafkaClients, output: &str) -> Result<Joined, BenchError> {
    let mut j = Joined::default();
    eosflow::internals::kafka::reader::read_all(clients, output, Duration::from_secs(60), |m| {
        let v = EnrichedSerde
            .deserialize(m.payload().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let want = m
            .key()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(|k| k.strip_prefix('k'))
            .and_then(|i| i.parse::<u64>().ok())
            .map(row);
        if want.as_deref() != Some(v.row.as_slice()) {
            j.wrong_rows += 1;
        }
        j.results += 1;
        j.amount += v.amount;
        Ok(())
    })
    .map_err(|err| BenchError::Kafka(format!("reading the join results of {output}: {err}")))?;
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enriched_round_trips_and_rows_have_their_size() {
        let v = Enriched {
            amount: -3,
            row: row(42),
        };
        assert_eq!(v.row.len(), ROW_BYTES);
        let b = EnrichedSerde.serialize(&v).expect("serialize");
        assert_eq!(EnrichedSerde.deserialize(&b).expect("deserialize"), v);
        assert!(EnrichedSerde.deserialize(&b[..7]).is_err());
    }
}
