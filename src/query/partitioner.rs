//! Which partition a key lives in, as the producer of the inputs placed it: Kafka's default
//! partitioner, `murmur2(key) & 0x7fffffff % partitions` — what the Java clients use and what
//! eosflow's producers are set to (`partitioner = murmur2_random`) — or librdkafka's default,
//! `crc32(key) % partitions` (`consistent_random`: rust-rdkafka's, confluent-kafka-python's,
//! confluent-kafka-go's and kcat's default), or librdkafka's FNV-1a. A query must use the
//! partitioner its inputs were produced with, or it looks for a key in the wrong partition.

use serde::{Deserialize, Serialize};

use crate::config::choice::choice_strings;

/// The partitioner the inputs' keyed records were produced with (`queries.partitioner`):
/// where a query looks for a key. Named as librdkafka's `partitioner` property names them;
/// the `_random` variants place keyed records exactly as their plain form does (they differ
/// only for records without a key, which a query never asks for).
///
/// ```
/// use eosflow::query::Partitioner;
/// // Kafka's murmur2 (the Java clients', eosflow's): key "21" of 12 partitions.
/// assert_eq!(Partitioner::Murmur2.partition(b"21", 12), (-973932308i32 & 0x7fffffff) % 12);
/// // librdkafka's default: CRC-32 of the key.
/// assert_eq!(Partitioner::ConsistentRandom.partition(b"123456789", 7), (0xCBF43926u32 % 7) as i32);
/// assert_eq!("consistent_random".parse::<Partitioner>(), Ok(Partitioner::ConsistentRandom));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// Kafka's murmur2 (`murmur2` / `murmur2_random` in librdkafka): the Java clients' and
    /// eosflow's own producers' partitioner.
    #[default]
    #[serde(alias = "murmur2_random")]
    Murmur2,
    /// CRC-32 of the key (`consistent` / `consistent_random`): librdkafka's default, so
    /// rust-rdkafka's, Python's, Go's and kcat's unless they set `partitioner`.
    #[serde(alias = "consistent", alias = "crc32")]
    ConsistentRandom,
    /// 32-bit FNV-1a of the key (`fnv1a` / `fnv1a_random`): librdkafka's, as Sarama's default
    /// hash partitioner.
    #[serde(alias = "fnv1a_random")]
    Fnv1a,
}

impl Partitioner {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Murmur2 => "murmur2",
            Self::ConsistentRandom => "consistent_random",
            Self::Fnv1a => "fnv1a",
        }
    }

    /// The partition of `key` among `partitions` (more than zero), as this partitioner places
    /// a keyed record.
    pub fn partition(self, key: &[u8], partitions: usize) -> i32 {
        let n = partitions.max(1) as u64;
        let h = match self {
            Self::Murmur2 => u64::from((murmur2(key) & 0x7fff_ffff) as u32),
            Self::ConsistentRandom => u64::from(crc32(key)),
            // librdkafka: `rd_fnv1a(key) % partition_cnt` on the hash as a signed 32-bit
            // value, made non-negative.
            Self::Fnv1a => u64::from((fnv1a(key) as i32).unsigned_abs()),
        };
        (h % n) as i32
    }
}

choice_strings!(Partitioner);

/// CRC-32 (IEEE 802.3, zlib's), as librdkafka's `rd_crc32` computes it.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// 32-bit FNV-1a, as librdkafka's `rd_fnv1a` computes it.
pub fn fnv1a(data: &[u8]) -> u32 {
    let mut h = 0x811c_9dc5u32;
    for &b in data {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

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

/// The partition of `key` among `partitions` (more than zero), as Kafka's default (murmur2)
/// partitioner places a keyed record: [`Partitioner::Murmur2`]'s placement.
///
/// ```
/// use eosflow::query::partition_for;
/// // The same partition a Java producer (or eosflow's) writes key "21" to, of 12.
/// assert_eq!(partition_for(b"21", 12), ((-973932308i32 & 0x7fffffff) % 12));
/// ```
pub fn partition_for(key: &[u8], partitions: usize) -> i32 {
    Partitioner::Murmur2.partition(key, partitions)
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
        for p in [Partitioner::ConsistentRandom, Partitioner::Fnv1a] {
            for key in [&b""[..], b"x", b"order-17", &[0xff; 40]] {
                assert!((0..7).contains(&p.partition(key, 7)));
            }
        }
    }

    /// The standard check values (the CRC catalogue's "123456789"; FNV's published vectors).
    #[test]
    fn crc32_and_fnv1a_match_their_reference_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    }

    /// librdkafka's `unittest_fnv1a` (the absolute value of the signed hash, as Sarama).
    #[test]
    fn fnv1a_placement_matches_librdkafka() {
        let big = i32::MAX as usize;
        assert_eq!(Partitioner::Fnv1a.partition(b"kafka", big), 0xd33c4e1);
        assert_eq!(
            Partitioner::Fnv1a.partition(b"giberish123456789", big),
            0x77a58295
        );
        assert_eq!(Partitioner::Fnv1a.partition(b"", big), 0x7ee3623b);
    }
}
