//! The driver's stand-ins for what the runtime gets from Kafka and the system: in-memory
//! topics as the engine's output, and a clock and id source that only the test moves.

use std::collections::BTreeMap;

use super::records::OutputRecord;
use crate::config::Config;
use crate::processor::engine::{Output, Stamps};
use crate::retry::base_and_level;
use crate::sink::SinkError;

/// The driver's clock and id source: moves only when the test says, ids count up.
pub(super) struct DriverStamps {
    pub(super) now_ms: i64,
    pub(super) text_ms: i64,
    pub(super) text: String,
    pub(super) ids: u128,
}

impl Stamps for DriverStamps {
    fn occurred_at(&mut self) -> &str {
        if self.text.is_empty() || self.text_ms != self.now_ms {
            self.text_ms = self.now_ms;
            self.text = chrono::DateTime::from_timestamp_millis(self.now_ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .unwrap_or_default();
        }
        &self.text
    }
    fn new_id(&mut self) -> uuid::Uuid {
        self.ids += 1;
        uuid::Uuid::from_u128(self.ids)
    }
}

/// `topic`'s retry policy without jitter: due times are exact, so a test knows how far to
/// advance the clock.
pub(super) fn exact_policy(config: &Config, topic: &str) -> crate::retry::RetryPolicy {
    let mut p = config.retry.policy_for(topic);
    p.jitter = 0.0;
    p
}

/// Records written, by topic, in order; retry forwards also wait on the ladder.
pub(super) struct Topics<'d> {
    pub(super) written: &'d mut BTreeMap<String, Vec<OutputRecord>>,
    pub(super) ladder: &'d mut Vec<OutputRecord>,
}

impl Output for Topics<'_> {
    fn emit<'h>(
        &mut self,
        topic: &str,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<(), SinkError> {
        let record = OutputRecord {
            topic: topic.to_string(),
            partition: None,
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers.map(|(k, v)| (k.to_string(), v.to_vec())).collect(),
        };
        self.written
            .entry(topic.to_string())
            .or_default()
            .push(record);
        Ok(())
    }

    fn forward(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<(), SinkError> {
        let record = OutputRecord {
            topic: topic.to_string(),
            partition: Some(partition),
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers.to_vec(),
        };
        if base_and_level(topic).1 > 0 {
            self.ladder.push(record.clone());
        }
        self.written
            .entry(topic.to_string())
            .or_default()
            .push(record);
        Ok(())
    }
}
