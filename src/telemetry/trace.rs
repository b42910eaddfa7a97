//! W3C trace context across a processor: an output caused by an input joins the input's trace
//! as a child span (`traceparent` = same trace id, new span id, same flags).

use rand::Rng;

/// The `traceparent` for a record caused by one carrying `parent`; `None` if `parent` is not a
/// valid version-00 trace context (it is then not propagated).
pub fn child_traceparent(parent: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(parent).ok()?;
    let mut parts = text.trim().split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    if parts.next().is_some()
        || version != "00"
        || !hex(trace_id, 32)
        || !hex(span_id, 16)
        || !hex(flags, 2)
        || trace_id.bytes().all(|b| b == b'0')
    {
        return None;
    }
    let mut span: u64 = 0;
    while span == 0 {
        span = rand::thread_rng().gen();
    }
    Some(format!("00-{trace_id}-{span:016x}-{flags}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_keeps_trace_and_flags_with_a_new_span() {
        let p = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = child_traceparent(p).expect("valid parent");
        assert!(c.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(c.ends_with("-01"));
        assert_ne!(&c[36..52], "00f067aa0ba902b7");
        assert_eq!(c.len(), 55);
    }

    #[test]
    fn invalid_parents_are_not_propagated() {
        for bad in [
            &b"garbage"[..],
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(
                child_traceparent(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
