//! A vLLM-style block allocator with reference counts and prefix caching (vLLM v1's
//! `KVCacheManager` / `BlockPool`, mistral.rs's `block_pool.rs`).
//!
//! A block's reference count is the number of sequences holding it. A full block gets the hash
//! of its tokens chained to its parent's; the cache maps hashes to blocks, so a new sequence
//! whose prompt starts with a cached chain takes those blocks (shared by reference count). A
//! block whose count drops to 0 joins the free queue but keeps its hash (an idle cached block)
//! until it is evicted, that is, reallocated; blocks without a hash are reallocated first. A
//! fork shares all of its parent's blocks, the partial last one included, which is copied on
//! write by whichever sequence appends to it first.

use crate::config::{BLOCK_SIZE, NUM_BLOCKS};
use std::collections::{HashMap, VecDeque};

/// The hash of a full block: its tokens chained to its parent's hash.
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h = parent.unwrap_or(0x51_7c_c1_b7_27_22_0a_95);
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01B3);
        h ^= h >> 29;
    }
    h
}

/// What the cache knows of a full block: its hash, its index in its chain and its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cached {
    /// The chained hash.
    pub hash: u64,
    /// The block's index in the chain (its first position is `index * BLOCK_SIZE`).
    pub index: usize,
    /// The parent block and its hash (`None` for the chain's first block).
    pub parent: Option<(u32, u64)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    refs: u32,
    cached: Option<Cached>,
}

/// The pool's blocks: reference counts, the free queue and the prefix cache.
#[derive(Debug)]
pub struct BlockAllocator {
    meta: Vec<Meta>,
    /// Blocks of count 0, the next to reallocate first.
    free: VecDeque<u32>,
    by_hash: HashMap<u64, u32>,
    /// Cached blocks reallocated (evicted from the prefix cache).
    pub evictions: u64,
    /// Blocks taken from the prefix cache by new sequences.
    pub hits: u64,
    /// Copies on write.
    pub copies: u64,
    /// Cached blocks dropped because their KV failed a verify.
    pub dropped: u64,
}

impl Default for BlockAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockAllocator {
    /// Every block but the null block 0 free.
    pub fn new() -> Self {
        BlockAllocator {
            meta: vec![Meta::default(); NUM_BLOCKS],
            free: (1..NUM_BLOCKS as u32).collect(),
            by_hash: HashMap::new(),
            evictions: 0,
            hits: 0,
            copies: 0,
            dropped: 0,
        }
    }

    /// Free blocks (idle cached ones included).
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// A block's reference count.
    pub fn refs(&self, block: u32) -> u32 {
        self.meta[block as usize].refs
    }

    /// The cached chain of full blocks matching `tokens`' first full blocks (at most `limit`
    /// tokens' worth), taken: each block's count goes up.
    pub fn take_prefix(&mut self, tokens: &[u32], limit: usize) -> Vec<u32> {
        let mut taken = Vec::new();
        let mut parent = None;
        for chunk in tokens[..limit].chunks_exact(BLOCK_SIZE) {
            let h = block_hash(parent, chunk);
            let Some(&b) = self.by_hash.get(&h) else {
                break;
            };
            self.take(b);
            self.hits += 1;
            taken.push(b);
            parent = Some(h);
        }
        taken
    }

    fn take(&mut self, block: u32) {
        let m = &mut self.meta[block as usize];
        if m.refs == 0 {
            self.free.retain(|&f| f != block);
        }
        m.refs += 1;
    }

    /// A fresh block (count 1), evicting the oldest idle cached block if need be; `None` when
    /// every block is held.
    pub fn allocate(&mut self) -> Option<u32> {
        let b = self.free.pop_front()?;
        let m = &mut self.meta[b as usize];
        if let Some(c) = m.cached.take() {
            self.by_hash.remove(&c.hash);
            self.evictions += 1;
        }
        m.refs = 1;
        Some(b)
    }

    /// Drops one reference; a block of count 0 joins the free queue (cached ones last, so they
    /// stay in the prefix cache longest). A block already free is left alone.
    pub fn release(&mut self, block: u32) {
        let m = &mut self.meta[block as usize];
        if m.refs == 0 {
            return;
        }
        m.refs -= 1;
        if m.refs == 0 {
            match m.cached {
                Some(_) => self.free.push_back(block),
                None => self.free.push_front(block),
            }
        }
    }

    /// Releases a sequence's blocks, last first (its tail is evicted before its head).
    pub fn release_all(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            self.release(b);
        }
    }

    /// The refcount bug of the bug flags: `block` is freed although a sequence holds it, and
    /// goes to the head of the free queue (the next allocation reuses it).
    pub fn free_while_held(&mut self, block: u32) {
        let m = &mut self.meta[block as usize];
        m.refs = 0;
        if let Some(c) = m.cached.take() {
            self.by_hash.remove(&c.hash);
        }
        self.free.push_front(block);
    }

    /// Drops `block` from the prefix cache (its KV failed a verify: the canary's lost slots),
    /// so no new sequence takes it; an idle one goes to the head of the free queue. `true`
    /// when it was cached.
    pub fn drop_cached(&mut self, block: u32) -> bool {
        let Some(m) = self.meta.get_mut(block as usize) else {
            return false;
        };
        let Some(c) = m.cached.take() else {
            return false;
        };
        self.by_hash.remove(&c.hash);
        self.dropped += 1;
        if m.refs == 0 {
            self.free.retain(|&f| f != block);
            self.free.push_front(block);
        }
        true
    }

    /// One more reference to each of `blocks` (a fork).
    pub fn fork(&mut self, blocks: &[u32]) {
        for &b in blocks {
            self.take(b);
        }
    }

    /// Registers a block that just became full as `cached` (unless its hash is cached
    /// already: the first copy stays the cached one).
    pub fn register(&mut self, block: u32, cached: Cached) {
        if self.meta[block as usize].cached.is_none() && !self.by_hash.contains_key(&cached.hash) {
            self.by_hash.insert(cached.hash, block);
            self.meta[block as usize].cached = Some(cached);
        }
    }

    /// The cache's record of `block`, if it is cached.
    pub fn cached(&self, block: u32) -> Option<Cached> {
        self.meta[block as usize].cached
    }

    /// The idle cached blocks (count 0, hash kept), in free-queue order, whose parent is still
    /// the cached block it was (so their chain can be checked).
    pub fn idle_cached(&self) -> impl Iterator<Item = (u32, Cached)> + '_ {
        self.free.iter().filter_map(|&b| {
            let c = self.meta[b as usize].cached?;
            let parent_ok = c
                .parent
                .is_none_or(|(p, h)| self.meta[p as usize].cached.is_some_and(|pc| pc.hash == h));
            parent_ok.then_some((b, c))
        })
    }

    /// Copy-on-write: a fresh block for a sequence about to append to its shared `block`,
    /// which loses one reference. `None` when no block is free.
    pub fn copy_on_write(&mut self, block: u32) -> Option<u32> {
        let fresh = self.allocate()?;
        self.release(block);
        self.copies += 1;
        Some(fresh)
    }
}
