//! The hash of the crate's per-record lookup tables (the record cache's keys, the decoder's
//! writer schemas by id): a word at a time, multiply and rotate (FxHash's), in place of the
//! standard SipHash, which was most of a lookup's cost there. Neither table is open to an
//! attacker's choice of collisions: record-cache keys are the application's own and bounded in
//! number, and only schema ids the registry knows are cached.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // hashbrown takes its control bits from the top: spread the low ones up.
        self.0 ^ (self.0 >> 29)
    }
}
