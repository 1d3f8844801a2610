//! The KV pool: a slot allocator with reference counts, and the fake KV bytes of every slot.

use kv_canary::hash::splitmix64;
use kv_canary::step::TailKv;
use kv_canary::RealKvHashMode;

/// The slot allocator of a paged KV pool with page size 1. Slot 0 is reserved (the padding
/// slot every stale `req_to_token` cell points to) and never handed out.
///
/// `refs` is the engine's own reference count, which it frees by (and which a bug may get
/// wrong). `held` is the ground truth the simulation keeps beside it: how many scheduled requests
/// really hold each slot. Handing out a slot that is still held is the moment a bug corrupts the
/// cache.
#[derive(Debug)]
pub struct SlotPool {
    free: Vec<i64>,
    refs: Vec<u32>,
    held: Vec<u32>,
}

impl SlotPool {
    /// A pool of `slots` slots, all free but slot 0.
    pub fn new(slots: usize) -> Self {
        SlotPool {
            free: (1..slots as i64).rev().collect(),
            refs: vec![0; slots],
            held: vec![0; slots],
        }
    }

    /// Free slots.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Hands out the most recently freed slot. Returns it, and whether some scheduled request
    /// still holds it (always `false` in a correct engine).
    pub fn alloc(&mut self) -> Option<(i64, bool)> {
        let slot = self.free.pop()?;
        let s = slot as usize;
        let still_held = self.held[s] > 0;
        self.refs[s] = 1;
        self.held[s] += 1;
        Some((slot, still_held))
    }

    /// One more request shares `slot` (a cached prefix).
    pub fn share(&mut self, slot: i64) {
        self.refs[slot as usize] += 1;
        self.held[slot as usize] += 1;
    }

    /// A request drops `slot`: the engine's count goes down and the slot is freed at zero.
    /// `still_scheduled` keeps the ground truth's hold (the request is, wrongly, still run).
    pub fn release(&mut self, slot: i64, still_scheduled: bool) {
        let s = slot as usize;
        if !still_scheduled {
            self.held[s] = self.held[s].saturating_sub(1);
        }
        if self.refs[s] == 0 {
            return; // already freed by an earlier bug: the engine would double-free it
        }
        self.refs[s] -= 1;
        if self.refs[s] == 0 {
            self.free.push(slot);
        }
    }

    /// The use-after-free bug: frees `slot` whatever its count. Returns whether another request
    /// still shares it.
    pub fn release_ignoring_refcount(&mut self, slot: i64) -> bool {
        let s = slot as usize;
        self.held[s] = self.held[s].saturating_sub(1);
        let shared = self.refs[s] > 1;
        if self.refs[s] > 0 {
            self.refs[s] = 0;
            self.free.push(slot);
        }
        shared
    }

    /// The engine's reference count of `slot`.
    pub fn refs(&self, slot: i64) -> u32 {
        self.refs[slot as usize]
    }
}

/// Bytes of K (and of V) per token: one 32-byte strip per slot.
pub const KV_BYTES_PER_TOKEN: usize = 32;

/// The fake K and V bytes of every slot of a pool: what the forward pass writes and the tail
/// launches fingerprint.
#[derive(Debug)]
pub struct KvBytes {
    k: Vec<u8>,
    v: Vec<u8>,
}

impl KvBytes {
    /// Zeroed K and V bytes for `slots` slots.
    pub fn new(slots: usize) -> Self {
        KvBytes {
            k: vec![0; slots * KV_BYTES_PER_TOKEN],
            v: vec![0; slots * KV_BYTES_PER_TOKEN],
        }
    }

    /// The "attention layer" writes the K and V of `token` at `position` (after `prev_token`)
    /// into `slot`. The bytes depend on content only, so a shared prefix has the same KV.
    pub fn write(&mut self, slot: i64, token: i64, position: i64, prev_token: i64) {
        let words = |salt: u64| {
            [token as u64, position as u64, prev_token as u64, salt]
                .map(|w| splitmix64(w ^ salt.rotate_left(17)))
        };
        let at = slot as usize * KV_BYTES_PER_TOKEN;
        for (half, salt) in [(&mut self.k, 0x4B), (&mut self.v, 0x56)] {
            for (i, w) in words(salt).into_iter().enumerate() {
                half[at + 8 * i..at + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
    }

    /// The kv-scribble bug: a stray store overwrites 8 bytes of `slot`'s V strip.
    pub fn scribble_v(&mut self, slot: i64) {
        let at = slot as usize * KV_BYTES_PER_TOKEN + 8;
        for b in &mut self.v[at..at + 8] {
            *b ^= 0xA5;
        }
    }

    /// The tail launches' fingerprints: every byte of each slot's K strip (K half) and V strip
    /// (V half), ALL mode.
    pub fn tail_kv(&self) -> TailKv<'_> {
        TailKv::dense(RealKvHashMode::All, &self.k, &self.v, KV_BYTES_PER_TOKEN)
            .expect("32-byte strips satisfy the 16-byte rules")
    }
}

/// A fixed permutation of the slots `1..slots` (slot 0 maps to 0): the SWA sub-pool's slot of
/// every full-pool slot.
pub fn swa_permutation(slots: usize) -> Vec<i64> {
    let n = slots as u64 - 1;
    let stride = (0..)
        .map(|k| 2 * k + 613)
        .find(|&a| gcd(a, n) == 1)
        .expect("some odd stride works");
    let mut lut = vec![0i64; slots];
    for (x, cell) in lut.iter_mut().enumerate().skip(1) {
        *cell = 1 + ((x as u64 - 1) * stride % n) as i64;
    }
    lut
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
