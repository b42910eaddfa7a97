//! Failed records: the retry ladder (`<topic>.retry.<n>`), per-key order behind a retried
//! record (the parked set), and dead-letter topics.
//!
//! Every forward — to a retry level or to the DLT — is produced in the same Kafka transaction
//! as the input offset and the state change, so routing is exactly-once too.

pub mod config;
pub mod depth;
pub mod dlt;
pub mod headers;
pub mod parked;
pub mod policy;
pub mod tooling;

pub use parked::Parked;
pub use policy::{OnDeadLetter, RetryPolicy};

/// `<base>.retry.<level>`.
pub fn retry_topic(base: &str, level: u32) -> String {
    format!("{base}.retry.{level}")
}

/// The input topic a topic belongs to and its ladder level (0 for the input itself).
pub fn base_and_level(topic: &str) -> (&str, u32) {
    match topic.rsplit_once(".retry.") {
        Some((base, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
            (base, n.parse().unwrap_or(0))
        }
        _ => (topic, 0),
    }
}

/// Every topic a processor over `inputs` reads or writes besides its outputs: the inputs, their
/// retry levels and DLTs. Declared in `topics/` and checked at start.
pub fn ladder_topics(inputs: &[String], levels: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in inputs {
        out.push(t.clone());
        for n in 1..=levels {
            out.push(retry_topic(t, n));
        }
        out.push(dlt::topic_for(t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip() {
        assert_eq!(base_and_level("events"), ("events", 0));
        assert_eq!(base_and_level(&retry_topic("events", 3)), ("events", 3));
        assert_eq!(base_and_level("a.retry.b"), ("a.retry.b", 0));
        assert_eq!(
            ladder_topics(&["t".into()], 2),
            vec!["t", "t.retry.1", "t.retry.2", "t.DLT"]
        );
    }
}
