//! The envelope headers every message carries (docs/contracts.md): who it is, what it is, when it
//! happened, and which conversation and trace it belongs to.

/// Header names, in the order they are written.
pub const HEADERS: [&str; 8] = [
    "id",
    "type",
    "occurred_at",
    "aggregate_id",
    "correlation_id",
    "causation_id",
    "traceparent",
    "tenant",
];

/// A header that is present but not valid UTF-8 (every envelope header is text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header `{name}` is not valid UTF-8 ({len} bytes)")]
pub struct EnvelopeError {
    /// The header's name.
    pub name: &'static str,
    /// Its length, for the operator (never its bytes).
    pub len: usize,
}

/// The typed envelope; every field is optional so parsing tolerates producers that omit some.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// Unique message id (dedup key).
    pub id: Option<String>,
    /// Event type name, `<domain>.<event>.v<n>`.
    pub type_name: Option<String>,
    /// When the fact happened (RFC 3339), as opposed to when it was produced.
    pub occurred_at: Option<String>,
    /// The aggregate the event is about (normally also the key).
    pub aggregate_id: Option<String>,
    /// The id of the first message of the conversation.
    pub correlation_id: Option<String>,
    /// The id of the message that caused this one.
    pub causation_id: Option<String>,
    /// W3C trace context.
    pub traceparent: Option<String>,
    /// The tenant the data belongs to.
    pub tenant: Option<String>,
}

impl Envelope {
    /// Reads the envelope from Kafka headers (first occurrence wins; unknown headers ignored).
    pub fn parse(headers: &[(String, Vec<u8>)]) -> Result<Self, EnvelopeError> {
        let get = |name: &'static str| -> Result<Option<String>, EnvelopeError> {
            match headers.iter().find(|(k, _)| k == name) {
                None => Ok(None),
                Some((_, v)) => String::from_utf8(v.clone())
                    .map(Some)
                    .map_err(|_| EnvelopeError { name, len: v.len() }),
            }
        };
        Ok(Self {
            id: get("id")?,
            type_name: get("type")?,
            occurred_at: get("occurred_at")?,
            aggregate_id: get("aggregate_id")?,
            correlation_id: get("correlation_id")?,
            causation_id: get("causation_id")?,
            traceparent: get("traceparent")?,
            tenant: get("tenant")?,
        })
    }

    /// A new envelope for an event of `type_name`, with a fresh id and `occurred_at` = now.
    pub fn new(type_name: &str, aggregate_id: &str) -> Self {
        Self {
            id: Some(uuid::Uuid::new_v4().to_string()),
            type_name: Some(type_name.to_string()),
            occurred_at: Some(
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
            aggregate_id: Some(aggregate_id.to_string()),
            ..Self::default()
        }
    }

    /// The envelope of an output caused by `input`: causation = input id; correlation (or the
    /// input id when the input starts the conversation), traceparent and tenant are carried.
    pub fn child_of(input: &Envelope, type_name: &str, aggregate_id: &str) -> Self {
        Self {
            causation_id: input.id.clone(),
            correlation_id: input.correlation_id.clone().or_else(|| input.id.clone()),
            traceparent: input.traceparent.clone(),
            tenant: input.tenant.clone(),
            ..Self::new(type_name, aggregate_id)
        }
    }

    /// The headers to produce, skipping absent fields.
    pub fn to_headers(&self) -> Vec<(String, Vec<u8>)> {
        let values = [
            &self.id,
            &self.type_name,
            &self.occurred_at,
            &self.aggregate_id,
            &self.correlation_id,
            &self.causation_id,
            &self.traceparent,
            &self.tenant,
        ];
        HEADERS
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone().into_bytes())))
            .collect()
    }
}

/// An input's envelope borrowed from its headers: what [`Envelope::child_of`] carries over to
/// an output, without an owned `String` per field (the processor runtime stamps every output
/// from it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvelopeRef<'a> {
    /// The input's id.
    pub id: Option<&'a [u8]>,
    /// Its correlation id.
    pub correlation_id: Option<&'a [u8]>,
    /// Its W3C trace context.
    pub traceparent: Option<&'a [u8]>,
    /// Its tenant.
    pub tenant: Option<&'a [u8]>,
}

impl<'a> EnvelopeRef<'a> {
    /// Borrows the envelope of `headers`; empty when an envelope header is not UTF-8 (as
    /// [`Envelope::parse`] refuses such an envelope whole).
    pub fn of(headers: &'a [(String, Vec<u8>)]) -> Self {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_slice())
        };
        if HEADERS
            .iter()
            .any(|h| get(h).is_some_and(|v| std::str::from_utf8(v).is_err()))
        {
            return Self::default();
        }
        Self {
            id: get("id"),
            correlation_id: get("correlation_id"),
            traceparent: get("traceparent"),
            tenant: get("tenant"),
        }
    }

    /// The envelope headers of an output it caused, by [`Envelope::child_of`]'s rules: a new
    /// `id`, `occurred_at`, the output's `aggregate_id`, causation = this id, correlation (or
    /// this id when it starts the conversation) and tenant carried, and `traceparent` (the
    /// caller's child span). Absent fields are `None`.
    pub fn child_headers<'o>(
        &self,
        id: &'o [u8],
        occurred_at: &'o [u8],
        aggregate_id: Option<&'o [u8]>,
        traceparent: Option<&'o [u8]>,
    ) -> [(&'static str, Option<&'o [u8]>); 7]
    where
        'a: 'o,
    {
        [
            ("id", Some(id)),
            ("occurred_at", Some(occurred_at)),
            ("aggregate_id", aggregate_id),
            ("correlation_id", self.correlation_id.or(self.id)),
            ("causation_id", self.id),
            ("traceparent", traceparent),
            ("tenant", self.tenant),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_tolerates_missing_headers_and_rejects_bad_utf8() {
        let h = vec![
            ("id".to_string(), b"m-1".to_vec()),
            ("x".into(), vec![0xff]),
        ];
        let e = Envelope::parse(&h).expect("parses");
        assert_eq!(e.id.as_deref(), Some("m-1"));
        assert_eq!(e.tenant, None);
        let bad = vec![("type".to_string(), vec![0xc3, 0x28])];
        assert_eq!(
            Envelope::parse(&bad).unwrap_err().to_string(),
            "header `type` is not valid UTF-8 (2 bytes)"
        );
    }

    #[test]
    fn child_of_sets_causation_and_carries_context() {
        let mut input = Envelope::new("things.thing-created.v1", "o-1");
        input.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        input.tenant = Some("acme".into());
        let child = Envelope::child_of(&input, "things.thing-moved.v1", "o-1");
        assert_eq!(child.causation_id, input.id);
        assert_eq!(
            child.correlation_id, input.id,
            "the input started the conversation"
        );
        assert_eq!(child.traceparent, input.traceparent);
        assert_eq!(child.tenant.as_deref(), Some("acme"));
        assert_ne!(child.id, input.id);
        let grandchild = Envelope::child_of(&child, "x.y.v1", "o-1");
        assert_eq!(
            grandchild.correlation_id, input.id,
            "correlation is carried"
        );
        let round = Envelope::parse(&grandchild.to_headers()).expect("round trip");
        assert_eq!(round, grandchild);
    }

    #[test]
    fn the_borrowed_form_stamps_what_child_of_stamps() {
        for input in [
            Envelope::new("things.thing-created.v1", "o-1"),
            Envelope {
                correlation_id: Some("conv-9".into()),
                tenant: Some("acme".into()),
                ..Envelope::new("x.y.v1", "o-2")
            },
            Envelope::default(),
        ] {
            let headers = input.to_headers();
            let owned = Envelope::child_of(&input, "", "o-1");
            let borrowed = EnvelopeRef::of(&headers).child_headers(
                owned.id.as_deref().unwrap_or_default().as_bytes(),
                owned.occurred_at.as_deref().unwrap_or_default().as_bytes(),
                Some(b"o-1"),
                owned.traceparent.as_deref().map(str::as_bytes),
            );
            let stamped: Vec<(String, Vec<u8>)> = borrowed
                .iter()
                .filter_map(|(k, v)| Some((k.to_string(), (*v)?.to_vec())))
                .collect();
            let expected = Envelope {
                type_name: None,
                ..owned
            };
            assert_eq!(Envelope::parse(&stamped).expect("parses"), expected);
        }
        // A non-UTF-8 envelope header: nothing is carried, as parse refuses it.
        let bad = vec![
            ("id".to_string(), b"m".to_vec()),
            ("tenant".into(), vec![0xff]),
        ];
        assert_eq!(EnvelopeRef::of(&bad), EnvelopeRef::default());
    }
}
