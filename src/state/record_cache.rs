//! The record cache: recently read committed values of a store's `state` column, kept in memory
//! in front of RocksDB (Kafka Streams' caching layer, `statestore.cache.max.bytes`).
//!
//! # Why
//!
//! A stateful operator reads its key's value for every record: a count, a window's aggregate, a
//! table row for a join. Within a batch the [`Overlay`](super::Overlay) answers keys the batch
//! already wrote; the first read of a key in each batch, and every read of a key only read (a
//! join's table row), went to RocksDB: a memtable search, or a block and a bloom filter when the
//! memtable was flushed before the key was read again (a window that stays open longer than a
//! memtable lives). The cache answers those from a hash map.
//!
//! # What it never changes
//!
//! It holds **committed** values only: a read that misses fills it from RocksDB, and
//! [`Store::apply`](super::Store::apply) (the only way anything is written to a store: a
//! committed batch, a restore, a standby's replay) replaces the entries of the keys it wrote,
//! after RocksDB took them. The open batch's writes stay in its overlay, which is read first and
//! dropped on abort. So the cache decides only how often RocksDB is read, never what is
//! committed, emitted or restored. Kafka Streams' cache is also where its writes wait for the
//! commit; eosflow's overlay already holds a batch's writes, one per key, until the commit
//! that carries them to the changelog, so this cache needs no dirty entries and no flush.
//!
//! # Budget
//!
//! `state.cache_bytes` (default 10 MiB, Kafka Streams' default; 0 switches it off) is shared by
//! all stores of an instance, divided between its processing threads. Each store keeps its own
//! least-recently-used order; an entry costs its key, its value and [`ENTRY_OVERHEAD`] bytes.
//! When the instance's total passes the budget, the store inserting evicts its own least
//! recently used entries first (as Kafka Streams' `ThreadCache` evicts from the cache being
//! written); an entry larger than an eighth of the budget is never cached.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fast_hash::FastMap;

/// Bytes an entry costs besides its key and value: the map slot, the list links and the key's
/// second copy are counted by their size; this is the rest (allocator headers, `Vec`s).
pub const ENTRY_OVERHEAD: usize = 64;

/// The budget all caches of an instance (or one processing thread) share, and their counters.
#[derive(Debug)]
pub struct CacheBudget {
    limit: usize,
    used: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

/// What a budget's caches did since they were created (for metrics and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads answered from memory.
    pub hits: u64,
    /// Reads that went to RocksDB.
    pub misses: u64,
    /// Entries dropped to stay within the budget.
    pub evictions: u64,
    /// Bytes held now.
    pub bytes: usize,
}

impl CacheBudget {
    /// A budget of `limit` bytes; `None` for 0 (no cache).
    pub fn new(limit: u64) -> Option<Arc<Self>> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        (limit > 0).then(|| {
            Arc::new(Self {
                limit,
                used: AtomicUsize::new(0),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                evictions: AtomicU64::new(0),
            })
        })
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bytes: self.used.load(Ordering::Relaxed),
        }
    }

    fn over(&self) -> bool {
        self.used.load(Ordering::Relaxed) > self.limit
    }
}

/// "No node": the end of the list.
const NIL: u32 = u32::MAX;

struct Node {
    key: Vec<u8>,
    value: Option<Box<[u8]>>,
    prev: u32,
    next: u32,
}

impl Node {
    fn cost(&self) -> usize {
        2 * self.key.len() + self.value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD
    }
}

/// One store's entries in least-recently-used order: a map to slots of a node array whose
/// links form the order (most recent at `head`).
struct Lru {
    map: FastMap<Vec<u8>, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    bytes: usize,
    /// Bumped by every apply: a miss filled from RocksDB is only inserted if no apply ran
    /// between its read and its insert (the value read might be older than the apply's).
    generation: u64,
}

impl Lru {
    fn new() -> Self {
        Self {
            map: FastMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            generation: 0,
        }
    }

    fn node(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let n = self.node(i);
            (n.prev, n.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.node(p).next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.node(n).prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let head = self.head;
        {
            let n = self.node(i);
            n.prev = NIL;
            n.next = head;
        }
        match head {
            NIL => self.tail = i,
            h => self.node(h).prev = i,
        }
        self.head = i;
    }

    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Removes the least recently used entry; its cost, or `None` if empty.
    fn pop_back(&mut self) -> Option<usize> {
        let i = self.tail;
        if i == NIL {
            return None;
        }
        self.unlink(i);
        let n = &mut self.nodes[i as usize];
        let cost = n.cost();
        let key = std::mem::take(&mut n.key);
        n.value = None;
        self.map.remove(&key);
        self.free.push(i);
        self.bytes -= cost;
        Some(cost)
    }

    fn insert(&mut self, key: &[u8], value: Option<&[u8]>) -> isize {
        let node = Node {
            key: key.to_vec(),
            value: value.map(Box::from),
            prev: NIL,
            next: NIL,
        };
        let cost = node.cost();
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(key.to_vec(), i);
        self.push_front(i);
        self.bytes += cost;
        cost as isize
    }

    /// Replaces the value of `key` if it is cached; the change in bytes.
    fn replace(&mut self, key: &[u8], value: Option<&[u8]>) -> isize {
        let Some(&i) = self.map.get(key) else {
            return 0;
        };
        let n = &mut self.nodes[i as usize];
        let before = n.cost() as isize;
        n.value = value.map(Box::from);
        let after = n.cost() as isize;
        self.bytes = (self.bytes as isize + after - before) as usize;
        after - before
    }
}

/// One store's record cache (see the [module](self)).
pub struct RecordCache {
    lru: Mutex<Lru>,
    budget: Arc<CacheBudget>,
}

impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCache").finish_non_exhaustive()
    }
}

/// A cached lookup's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached {
    /// The committed value (`None`: the key is committed as absent).
    Hit(Option<Vec<u8>>),
    /// Not cached: read RocksDB, then [`RecordCache::fill`] with this ticket.
    Miss(Ticket),
}

/// The generation a miss was taken at (see [`RecordCache::fill`]).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Ticket(u64);

impl RecordCache {
    /// An empty cache charging `budget`.
    pub fn new(budget: Arc<CacheBudget>) -> Self {
        Self {
            lru: Mutex::new(Lru::new()),
            budget,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // A panic while the lock was held (a bug) leaves the list consistent or not; the safe
        // answer is an empty cache, which only costs reads.
        match self.lru.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                let freed = g.bytes;
                *g = Lru::new();
                self.budget.used.fetch_sub(freed, Ordering::Relaxed);
                self.lru.clear_poison();
                g
            }
        }
    }

    /// The committed value of `key` if cached (and marks it most recently used).
    pub fn get(&self, key: &[u8]) -> Cached {
        let mut lru = self.lock();
        match lru.map.get(key).copied() {
            Some(i) => {
                lru.touch(i);
                self.budget.hits.fetch_add(1, Ordering::Relaxed);
                Cached::Hit(lru.nodes[i as usize].value.as_deref().map(<[u8]>::to_vec))
            }
            None => {
                self.budget.misses.fetch_add(1, Ordering::Relaxed);
                Cached::Miss(Ticket(lru.generation))
            }
        }
    }

    /// Caches what RocksDB answered for a miss, unless an apply ran since the miss (its value
    /// may be older than the apply's) or the entry is too large for the budget.
    pub fn fill(&self, ticket: Ticket, key: &[u8], value: Option<&[u8]>) {
        let cost = 2 * key.len() + value.map_or(0, <[u8]>::len) + ENTRY_OVERHEAD;
        if cost > self.budget.limit / 8 {
            return;
        }
        let mut lru = self.lock();
        if lru.generation != ticket.0 || lru.map.contains_key(key) {
            return;
        }
        let added = lru.insert(key, value);
        self.charge(&mut lru, added);
    }

    /// After a write reached RocksDB: the cached entries of the keys it wrote take their new
    /// values (`None`: deleted); keys not cached stay uncached.
    pub fn apply<'k>(&self, writes: impl Iterator<Item = (&'k [u8], Option<&'k [u8]>)>) {
        let mut lru = self.lock();
        lru.generation = lru.generation.wrapping_add(1);
        if lru.map.is_empty() {
            return;
        }
        let mut delta = 0isize;
        for (key, value) in writes {
            delta += lru.replace(key, value);
        }
        self.charge(&mut lru, delta);
    }

    /// Forgets every entry (a store rebuilt under the cache's feet).
    pub fn clear(&self) {
        let mut lru = self.lock();
        let freed = lru.bytes;
        let generation = lru.generation.wrapping_add(1);
        *lru = Lru::new();
        lru.generation = generation;
        self.budget.used.fetch_sub(freed, Ordering::Relaxed);
    }

    /// Bytes this store's entries cost.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries cached.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `delta` bytes to the budget, then evicts this store's least recently used entries
    /// while the budget is exceeded.
    fn charge(&self, lru: &mut Lru, delta: isize) {
        if delta >= 0 {
            self.budget
                .used
                .fetch_add(delta as usize, Ordering::Relaxed);
        } else {
            self.budget
                .used
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
        while self.budget.over() {
            match lru.pop_back() {
                Some(cost) => {
                    self.budget.used.fetch_sub(cost, Ordering::Relaxed);
                    self.budget.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
    }
}

impl Drop for RecordCache {
    fn drop(&mut self) {
        let bytes = match self.lru.get_mut() {
            Ok(l) => l.bytes,
            Err(p) => p.into_inner().bytes,
        };
        self.budget.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(c: &RecordCache, k: &[u8]) -> Option<Option<Vec<u8>>> {
        match c.get(k) {
            Cached::Hit(v) => Some(v),
            Cached::Miss(_) => None,
        }
    }

    fn fill(c: &RecordCache, k: &[u8], v: Option<&[u8]>) {
        let Cached::Miss(t) = c.get(k) else {
            panic!("expected a miss");
        };
        c.fill(t, k, v);
    }

    #[test]
    fn a_filled_miss_is_a_hit_and_an_absent_key_is_cached_as_absent() {
        let budget = CacheBudget::new(1 << 20).expect("budget");
        let c = RecordCache::new(budget.clone());
        assert_eq!(hit(&c, b"a"), None);
        fill(&c, b"a", Some(b"1"));
        fill(&c, b"gone", None);
        assert_eq!(hit(&c, b"a"), Some(Some(b"1".to_vec())));
        assert_eq!(hit(&c, b"gone"), Some(None));
        let s = budget.stats();
        assert_eq!((s.hits, s.misses), (2, 3));
        assert_eq!(s.bytes, c.bytes());
    }

    #[test]
    fn apply_replaces_cached_keys_and_leaves_others_uncached() {
        let budget = CacheBudget::new(1 << 20).expect("budget");
        let c = RecordCache::new(budget);
        fill(&c, b"a", Some(b"1"));
        fill(&c, b"b", Some(b"1"));
        c.apply(
            [
                (&b"a"[..], Some(&b"22"[..])),
                (b"b", None),
                (b"c", Some(b"3")),
            ]
            .into_iter(),
        );
        assert_eq!(hit(&c, b"a"), Some(Some(b"22".to_vec())));
        assert_eq!(hit(&c, b"b"), Some(None));
        assert_eq!(hit(&c, b"c"), None);
    }

    #[test]
    fn a_fill_after_an_apply_that_ran_since_the_miss_is_dropped() {
        let budget = CacheBudget::new(1 << 20).expect("budget");
        let c = RecordCache::new(budget);
        let Cached::Miss(t) = c.get(b"a") else {
            panic!("miss");
        };
        // Another reader's apply wrote "a" after this miss read RocksDB's older value.
        c.apply([(&b"a"[..], Some(&b"new"[..]))].into_iter());
        c.fill(t, b"a", Some(b"old"));
        assert_eq!(hit(&c, b"a"), None);
    }

    #[test]
    fn the_least_recently_used_entries_go_first_and_the_budget_holds() {
        let per = 2 * 4 + 100 + ENTRY_OVERHEAD;
        let budget = CacheBudget::new((per * 10) as u64).expect("budget");
        let c = RecordCache::new(budget.clone());
        let v = [7u8; 100];
        for i in 0..10u32 {
            fill(&c, &i.to_be_bytes(), Some(&v));
        }
        // Key 0 read again: key 1 is now the least recently used.
        assert!(hit(&c, &0u32.to_be_bytes()).is_some());
        fill(&c, &10u32.to_be_bytes(), Some(&v));
        assert!(hit(&c, &1u32.to_be_bytes()).is_none());
        assert!(hit(&c, &0u32.to_be_bytes()).is_some());
        assert!(budget.stats().bytes <= per * 10);
        assert_eq!(budget.stats().evictions, 1);
        drop(c);
        assert_eq!(budget.stats().bytes, 0);
    }

    #[test]
    fn stores_share_the_budget_and_a_huge_value_is_not_cached() {
        let budget = CacheBudget::new(8 * 1024).expect("budget");
        let a = RecordCache::new(budget.clone());
        let b = RecordCache::new(budget.clone());
        for i in 0..100u32 {
            fill(&a, &i.to_be_bytes(), Some(&[1u8; 64]));
            fill(&b, &i.to_be_bytes(), Some(&[1u8; 64]));
        }
        assert!(budget.stats().bytes <= 8 * 1024);
        assert_eq!(budget.stats().bytes, a.bytes() + b.bytes());
        fill(&a, b"huge", Some(&[0u8; 2048]));
        assert_eq!(hit(&a, b"huge"), None);
        a.clear();
        assert_eq!(budget.stats().bytes, b.bytes());
        assert!(CacheBudget::new(0).is_none());
    }
}
