//! Kafka's default partitioner for keyed records: `toPositive(murmur2(key)) % partitions`.
//!
//! Implemented bit for bit like `org.apache.kafka.common.utils.Utils.murmur2`, so a key lands
//! in the same partition as with the Java client (and librdkafka's `murmur2_random`), which
//! co-partitioning of tables and streams depends on.

/// Kafka's murmur2 hash of `data` (seed `0x9747b28c`): exists so keyed records are partitioned
/// exactly as a Java producer would partition them.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = 0x9747_b28c ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions` (at least
/// one): exists so callers (and checkers) can predict where a keyed record goes.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    (positive % partitions.max(1) as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test_vectors() {
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input.as_bytes()), expected, "murmur2({input:?})");
        }
    }

    #[test]
    fn partition_for_key_is_to_positive_modulo() {
        // toPositive(-973932308) = 1173551340; % 3 = 0, % 7 = 5
        assert_eq!(partition_for_key(b"21", 3), (1_173_551_340u32 % 3) as i32);
        assert_eq!(partition_for_key(b"21", 7), (1_173_551_340u32 % 7) as i32);
    }
}
