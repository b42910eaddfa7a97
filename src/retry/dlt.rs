//! Dead-letter topic naming and the headers that tell an operator what failed, where and why.

use crate::processor::{ProcessError, Record};

/// Longest error message kept in a header.
const MAX_ERROR_LEN: usize = 2048;

/// `<topic>.DLT`; a retry level's records go to their base topic's DLT.
pub fn topic_for(topic: &str) -> String {
    let base = match topic.rsplit_once(".retry.") {
        Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => topic,
    };
    format!("{base}.DLT")
}

/// The original headers plus the `eosflow.dlt.*` headers describing the failure.
pub fn headers(
    record: &Record<'_>,
    group: &str,
    err: &ProcessError,
    now_ms: i64,
) -> Vec<(String, Vec<u8>)> {
    let mut h: Vec<(String, Vec<u8>)> = record
        .headers
        .iter()
        .filter(|(k, _)| !k.starts_with("eosflow.dlt."))
        .cloned()
        .collect();
    let mut message = err.message().to_string();
    if message.len() > MAX_ERROR_LEN {
        let mut cut = MAX_ERROR_LEN;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let mut add = |k: &str, v: String| h.push((format!("eosflow.dlt.{k}"), v.into_bytes()));
    add("original.topic", record.topic.to_string());
    add("original.partition", record.partition.to_string());
    add("original.offset", record.offset.to_string());
    add(
        "original.timestamp",
        record.timestamp.map(|t| t.to_string()).unwrap_or_default(),
    );
    add("group", group.to_string());
    add("error.class", err.class().to_string());
    add("error.message", message);
    add("failed.at", now_ms.to_string());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_levels_share_their_base_dlt() {
        assert_eq!(topic_for("orders"), "orders.DLT");
        assert_eq!(topic_for("orders.retry.2"), "orders.DLT");
        assert_eq!(topic_for("orders.retry.x"), "orders.retry.x.DLT");
    }

    #[test]
    fn headers_name_origin_and_bound_the_message() {
        let hs = vec![("id".to_string(), b"m1".to_vec())];
        let r = Record {
            topic: "t",
            partition: 3,
            offset: 7,
            timestamp: Some(5),
            key: None,
            value: None,
            headers: &hs,
        };
        let h = headers(&r, "g", &ProcessError::permanent("é".repeat(3000)), 9);
        let get = |k: &str| {
            h.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| String::from_utf8_lossy(v).to_string())
        };
        assert_eq!(get("id").as_deref(), Some("m1"));
        assert_eq!(get("eosflow.dlt.original.offset").as_deref(), Some("7"));
        assert_eq!(get("eosflow.dlt.error.class").as_deref(), Some("permanent"));
        assert!(
            get("eosflow.dlt.error.message")
                .map(|m| m.len())
                .unwrap_or(0)
                <= MAX_ERROR_LEN
        );
    }
}
