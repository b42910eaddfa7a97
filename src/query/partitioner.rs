//! Which partition a key lives in: Kafka's default partitioner, `murmur2(key) & 0x7fffffff %
//! partitions` — what the Java clients use and what eosflow's producers are set to
//! (`partitioner = murmur2_random`), so a query finds the partition the key's records were
//! written to.

/// Kafka's murmur2 of `data` (seed `0x9747b28c`), as `org.apache.kafka.common.utils.Utils`
/// computes it.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if let Some(&b) = rest.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` among `partitions` (more than zero), as Kafka's default partitioner
/// places a keyed record.
///
/// ```
/// use eosflow::query::partition_for;
/// // The same partition a Java producer (or eosflow's) writes key "21" to, of 12.
/// assert_eq!(partition_for(b"21", 12), ((-973932308i32 & 0x7fffffff) % 12));
/// ```
pub fn partition_for(key: &[u8], partitions: usize) -> i32 {
    let n = partitions.max(1) as i64;
    ((murmur2(key) & 0x7fff_ffff) as i64 % n) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own test vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{:?}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn a_partition_is_within_the_count() {
        for key in [&b""[..], b"x", b"order-17", &[0xff; 40]] {
            let p = partition_for(key, 7);
            assert!((0..7).contains(&p), "{p}");
        }
        assert_eq!(partition_for(b"anything", 1), 0);
    }
}
