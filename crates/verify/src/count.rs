//! The counting topology: per key, a running count and sum of integer amounts in state, and
//! one output record per input naming the input's id and the key's count after it.
//!
//! Because every output carries the count it produced, a reader can prove exactly-once from
//! the output alone: per key, the counts must be exactly 1..=n with no gap and no repeat.
//!
//! Values are decimal amounts, or Avro order events in the registry's wire format (magic byte
//! 0), whose `total_minor` is the amount: the benchmarks' input, decoded with the writer schema
//! cached by id.

use serde::{Deserialize, Serialize};

use eosflow::internals::codec::decode::{Decoder, RegistrySource};
use eosflow::internals::codec::registry::Registry;
use eosflow::processor::{Application, Context, ProcessError, Record};

/// What one output record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountOutput {
    /// The input's message id.
    pub id: String,
    /// The key's count including this input.
    pub count: i64,
    /// The key's sum including this input.
    pub sum: i64,
}

/// Per-key state: count and sum, 16 bytes big-endian.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountState {
    /// Inputs counted.
    pub count: i64,
    /// Sum of their amounts.
    pub sum: i64,
}

impl CountState {
    /// Encodes for the store and changelog.
    pub fn encode(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.count.to_be_bytes());
        v.extend_from_slice(&self.sum.to_be_bytes());
        v
    }

    /// Decodes; `None` for bytes that are not a count state.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let count = i64::from_be_bytes(b.get(0..8)?.try_into().ok()?);
        let sum = i64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        (b.len() == 16).then_some(Self { count, sum })
    }
}

/// The handler: values are decimal integers or Avro order events; anything else is a
/// permanent error.
pub struct CountProcessor {
    output_topic: String,
    registry_url: Option<String>,
    /// Created at the first Avro value; caches writer schemas by id.
    decoder: Option<Decoder>,
}

impl std::fmt::Debug for CountProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountProcessor")
            .field("output_topic", &self.output_topic)
            .field("registry_url", &self.registry_url)
            .finish()
    }
}

impl Clone for CountProcessor {
    /// A clone starts with an empty schema cache (it refills from the registry).
    fn clone(&self) -> Self {
        Self {
            output_topic: self.output_topic.clone(),
            registry_url: self.registry_url.clone(),
            decoder: None,
        }
    }
}

impl CountProcessor {
    /// Emits to `output_topic`.
    pub fn new(output_topic: impl Into<String>) -> Self {
        Self {
            output_topic: output_topic.into(),
            registry_url: None,
            decoder: None,
        }
    }

    /// Accepts Avro values, fetching writer schemas from the registry at `url` (once per id).
    pub fn with_registry(mut self, url: &str) -> Self {
        self.registry_url = Some(url.to_string());
        self
    }

    /// The `total_minor` of an Avro order event.
    fn avro_amount(&mut self, raw: &[u8]) -> Result<i64, ProcessError> {
        if self.decoder.is_none() {
            let url = self.registry_url.as_deref().ok_or_else(|| {
                ProcessError::permanent(
                    "value is Avro (magic byte 0) but this counting topology has no schema registry",
                )
            })?;
            let source = RegistrySource::new(Registry::new(url)).map_err(|e| {
                ProcessError::transient(format!("starting the schema registry client: {e}"))
            })?;
            let catalog = eosflow_orders::contracts::catalog().map_err(ProcessError::permanent)?;
            self.decoder = Some(Decoder::new(source, catalog));
        }
        let Some(decoder) = self.decoder.as_mut() else {
            return Err(ProcessError::permanent("no Avro decoder"));
        };
        // Only `total_minor` is needed: the record is walked and checked, not built.
        let (_, type_name, total) = decoder
            .decode_long_field(raw, "total_minor")
            .map_err(ProcessError::from)?;
        total.ok_or_else(|| {
            ProcessError::permanent(format!(
                "{type_name} has no long `total_minor`: the counting topology sums order totals"
            ))
        })
    }
}

// The verifier's reference processor implements the runtime-facing `Application` itself,
// wiring included: every scenario, test and benchmark runs it with its store named `count`
// (changelog `<app>-count-changelog`), so the name travels with the type.
impl Application for CountProcessor {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let key = record.key.ok_or_else(|| {
            ProcessError::permanent("record has no key: the counting topology counts per key")
        })?;
        let raw = record.value.ok_or_else(|| {
            ProcessError::permanent("record has no value (tombstone): nothing to count")
        })?;
        if raw.first() == Some(&0) {
            let amount = self.avro_amount(raw)?;
            return self.count(ctx, record, key, amount);
        }
        let text = std::str::from_utf8(raw).map_err(|_| {
            ProcessError::permanent(format!(
                "value is not a decimal integer (not UTF-8, {} bytes)",
                raw.len()
            ))
        })?;
        // `transient:<k>:<amount>` fails transiently on its first k attempts: the retry ladder's
        // test input (and the fault suite's "transient-then-success").
        let text = match text.strip_prefix("transient:") {
            Some(rest) => {
                let (k, amount) = rest.split_once(':').unwrap_or((rest, "0"));
                let k: i64 = k.parse().unwrap_or(i64::MAX);
                let attempt = eosflow::internals::retry::headers::int(
                    record,
                    eosflow::internals::retry::headers::ATTEMPT,
                )
                .unwrap_or(0);
                if attempt < k {
                    return Err(ProcessError::transient(format!(
                        "simulated dependency outage (attempt {} of the {k} that fail)",
                        attempt + 1
                    )));
                }
                amount
            }
            None => text,
        };
        if text.trim() == "delete" {
            // Forgets the key (a changelog tombstone): the stale-store scenario's deletes.
            ctx.delete(key);
            return self.emit(ctx, record, key, CountState::default());
        }
        let amount: i64 = text.trim().parse().map_err(|_| {
            // The payload itself stays out of the message: it reaches logs and DLT headers.
            ProcessError::permanent(format!(
                "value is not a decimal integer ({} bytes)",
                text.len()
            ))
        })?;
        if amount == i64::MIN + 1 {
            // A deliberate trigger for tests of the panic path.
            panic!("amount {amount} is the panic trigger");
        }
        self.count(ctx, record, key, amount)
    }

    fn store_name(&self) -> &str {
        "count"
    }
}

impl CountProcessor {
    /// Adds `amount` to `key`'s state and emits the output.
    fn count(
        &self,
        ctx: &mut Context<'_>,
        record: &Record<'_>,
        key: &[u8],
        amount: i64,
    ) -> Result<(), ProcessError> {
        let mut state = match ctx.get(key)? {
            Some(b) => CountState::decode(&b).ok_or_else(|| {
                ProcessError::permanent("stored count state is corrupt (not 16 bytes)")
            })?,
            None => CountState::default(),
        };
        state.count += 1;
        state.sum = state.sum.saturating_add(amount);
        ctx.put(key, state.encode());
        self.emit(ctx, record, key, state)
    }

    /// Emits the output of `record`: its id and `key`'s state after it.
    fn emit(
        &self,
        ctx: &mut Context<'_>,
        record: &Record<'_>,
        key: &[u8],
        state: CountState,
    ) -> Result<(), ProcessError> {
        let id = ctx
            .message_id()
            .map(|i| String::from_utf8_lossy(i).to_string())
            .unwrap_or_else(|| format!("{}-{}-{}", record.topic, record.partition, record.offset));
        let out = CountOutput {
            id: id.clone(),
            count: state.count,
            sum: state.sum,
        };
        let value = serde_json::to_vec(&out).map_err(ProcessError::permanent)?;
        ctx.emit(
            self.output_topic.clone(),
            Some(key.to_vec()),
            Some(value),
            vec![("causation_id".into(), id.into_bytes())],
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_rejects_wrong_length() {
        let s = CountState { count: 3, sum: -7 };
        assert_eq!(CountState::decode(&s.encode()), Some(s));
        assert_eq!(CountState::decode(b"short"), None);
    }
}
