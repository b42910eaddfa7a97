//! Ordered scans over uncommitted writes and the committed store at once.
//!
//! A scan sees layers in priority order — the handler call's own writes, then the open
//! batch's, then RocksDB — merged by key: for a key present in several layers the highest
//! layer wins, and a delete there hides the key in every layer below. The overlays stay the
//! source of truth until their transaction commits; nothing is written to RocksDB to scan.

use std::iter::Peekable;
use std::ops::Bound;

use super::StateError;

/// One entry of a layer: a key with its value, `None` for a delete.
pub type LayerItem = Result<(Vec<u8>, Option<Vec<u8>>), StateError>;

/// One layer of a scan, in key order.
pub type Layer<'a> = Box<dyn Iterator<Item = LayerItem> + 'a>;

/// Byte-range bounds of a scan (lower, upper).
pub type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The bounds selecting every key that starts with `prefix`: from `prefix` up to the next key
/// that does not (none when the prefix is all `0xff`).
pub fn prefix_bounds(prefix: &[u8]) -> KeyBounds {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < u8::MAX {
            upper.push(last + 1);
            return (Bound::Included(prefix.to_vec()), Bound::Excluded(upper));
        }
    }
    (Bound::Included(prefix.to_vec()), Bound::Unbounded)
}

/// Whether no key can lie within `bounds` (also what `BTreeMap::range` would panic on).
pub fn is_empty_range(bounds: &KeyBounds) -> bool {
    match (&bounds.0, &bounds.1) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u)) => l >= u,
        _ => false,
    }
}

/// Whether `key` is below the upper bound.
pub fn below_upper(key: &[u8], upper: &Bound<Vec<u8>>) -> bool {
    match upper {
        Bound::Included(u) => key <= u.as_slice(),
        Bound::Excluded(u) => key < u.as_slice(),
        Bound::Unbounded => true,
    }
}

/// Whether `key` is at or above the lower bound.
pub fn above_lower(key: &[u8], lower: &Bound<Vec<u8>>) -> bool {
    match lower {
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
        Bound::Unbounded => true,
    }
}

/// The merged scan: live keys with their newest value, in key order.
pub struct Merged<'a> {
    layers: Vec<Peekable<Layer<'a>>>,
}

impl<'a> Merged<'a> {
    /// Merges `layers`, the first one highest (it wins a key the others also have).
    pub fn new(layers: Vec<Layer<'a>>) -> Self {
        Self {
            layers: layers.into_iter().map(Iterator::peekable).collect(),
        }
    }
}

impl Iterator for Merged<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // An error ends the scan where it happened, reported once.
            for layer in &mut self.layers {
                if matches!(layer.peek(), Some(Err(_))) {
                    if let Some(Err(e)) = layer.next() {
                        self.layers.clear();
                        return Some(Err(e));
                    }
                }
            }
            let mut least: Option<(usize, &[u8])> = None;
            for (i, layer) in self.layers.iter_mut().enumerate() {
                if let Some(Ok((k, _))) = layer.peek() {
                    if least.is_none_or(|(_, l)| k.as_slice() < l) {
                        least = Some((i, k.as_slice()));
                    }
                }
            }
            let (winner, key) = least.map(|(i, k)| (i, k.to_vec()))?;
            // The highest layer holding the least key wins; the same key below is skipped.
            let mut newest = None;
            for (i, layer) in self.layers.iter_mut().enumerate() {
                let same = matches!(layer.peek(), Some(Ok((k, _))) if *k == key);
                if same {
                    let item = layer.next();
                    if newest.is_none() && i <= winner {
                        newest = item;
                    }
                }
            }
            match newest {
                Some(Ok((k, Some(v)))) => return Some(Ok((k, v))),
                // A delete hides the key.
                _ => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, Option<&str>)]) -> Layer<'static> {
        let owned: Vec<LayerItem> = entries
            .iter()
            .map(|(k, v)| Ok((k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))))
            .collect();
        Box::new(owned.into_iter())
    }

    fn scan(layers: Vec<Layer<'static>>) -> Vec<(String, String)> {
        Merged::new(layers)
            .map(|r| {
                let (k, v) = r.expect("no error");
                (
                    String::from_utf8_lossy(&k).to_string(),
                    String::from_utf8_lossy(&v).to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn the_highest_layer_wins_and_deletes_hide_committed_keys() {
        let call = layer(&[("b", None), ("d", Some("call"))]);
        let batch = layer(&[("a", Some("batch")), ("d", Some("batch")), ("e", None)]);
        let committed = layer(&[
            ("a", Some("old")),
            ("b", Some("old")),
            ("c", Some("old")),
            ("e", Some("old")),
            ("f", Some("old")),
        ]);
        let got = scan(vec![call, batch, committed]);
        let want: Vec<(String, String)> =
            [("a", "batch"), ("c", "old"), ("d", "call"), ("f", "old")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_put_over_a_delete_in_a_lower_layer_brings_the_key_back() {
        let call = layer(&[("k", Some("new"))]);
        let batch = layer(&[("k", None)]);
        let committed = layer(&[("k", Some("old"))]);
        assert_eq!(
            scan(vec![call, batch, committed]),
            vec![("k".to_string(), "new".to_string())]
        );
        assert!(scan(vec![layer(&[]), layer(&[("x", None)])]).is_empty());
    }

    #[test]
    fn an_error_in_a_layer_ends_the_scan_with_it() {
        let bad: Layer<'static> = Box::new(
            vec![
                Ok((b"a".to_vec(), Some(b"1".to_vec()))),
                Err(StateError::Changelog {
                    topic: "t".into(),
                    partition: 0,
                    message: "boom".into(),
                }),
            ]
            .into_iter(),
        );
        let got: Vec<_> = Merged::new(vec![bad, layer(&[("b", Some("2"))])]).collect();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok() && got[1].is_err());
    }

    #[test]
    fn prefix_bounds_stop_at_the_next_prefix_and_empty_ranges_are_detected() {
        assert_eq!(
            prefix_bounds(b"ab"),
            (
                Bound::Included(b"ab".to_vec()),
                Bound::Excluded(b"ac".to_vec())
            )
        );
        assert_eq!(
            prefix_bounds(b"a\xff"),
            (
                Bound::Included(b"a\xff".to_vec()),
                Bound::Excluded(b"b".to_vec())
            )
        );
        assert_eq!(prefix_bounds(b"\xff").1, Bound::Unbounded);
        assert!(is_empty_range(&(
            Bound::Included(b"b".to_vec()),
            Bound::Excluded(b"a".to_vec())
        )));
        assert!(is_empty_range(&(
            Bound::Included(b"a".to_vec()),
            Bound::Excluded(b"a".to_vec())
        )));
        assert!(!is_empty_range(&(
            Bound::Included(b"a".to_vec()),
            Bound::Included(b"a".to_vec())
        )));
    }
}
