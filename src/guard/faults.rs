//! Fault injection (issue 33 item 5; feature `faults`, off by default): the perturbations an
//! engine turns on in staging to show that each detector fires, SGLang's five (`perturb/`),
//! each with a probability per step, a warm-up and a limit, from a seeded generator so that a
//! failing run replays; and [`TokenOracle`], the deterministic tokens the write-input check and
//! the expected-token pool compare against.
//!
//! | [`Fault`] | what it does (the engine calls the hook) | the detector that must fire |
//! |---|---|---|
//! | `TableCell` | one active table cell (not written this step) points at another request's slot | the per-step verify's chain or position check |
//! | `LiveKv` | byte 0 of a live slot's KV XOR 0xFF, before the forward pass | the tail verify's real-KV fingerprint |
//! | `IdleKv` | byte 0 of an idle cached slot's KV flipped | a sweep's real-KV fingerprint |
//! | `AfterStamp` | a byte of a slot this step wrote, after the tail stamp | the next verify (or a transfer's digest) |
//! | `TokenSwap` | two requests' sampled tokens swapped | the write-input check against the [`TokenOracle`] |

use crate::hash::splitmix64;

/// Memory a fault corrupts in place: the engine's KV bytes or table cells. Host memory (a slice
/// or a `Vec`) here; with the `cuda` feature also device memory (the crate's
/// `cuda::DeviceArray`, a cust `DeviceBuffer`, with `cudarc` a `CudaSlice`), where the hook reads
/// the one element it corrupts and writes it back (synchronous: fault injection is a staging
/// tool, not part of the step).
pub trait FaultMemory<T> {
    /// Replaces element `at` with `corrupt` of it; `None` (nothing changed) when `at` is outside
    /// the memory or a device copy failed.
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()>;
}

impl<T: Copy> FaultMemory<T> for [T] {
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()> {
        let cell = self.get_mut(at)?;
        *cell = corrupt(*cell);
        Some(())
    }
}

impl<T: Copy> FaultMemory<T> for Vec<T> {
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()> {
        self.as_mut_slice().modify(at, corrupt)
    }
}

/// One kind of perturbation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// A table cell pointed at another request's slot.
    TableCell,
    /// Byte 0 of a live slot's KV flipped before the forward pass.
    LiveKv,
    /// Byte 0 of an idle cached slot's KV flipped.
    IdleKv,
    /// A byte of a slot this step wrote, flipped after the tail stamp.
    AfterStamp,
    /// Two requests' sampled tokens swapped.
    TokenSwap,
}

/// When a fault fires: with `probability` each step after `warmup` steps, at most `limit`
/// times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultPlan {
    /// The perturbation.
    pub fault: Fault,
    /// The chance each step (0 to 1).
    pub probability: f64,
    /// Steps before it may fire.
    pub warmup: u64,
    /// Times it fires at most.
    pub limit: u32,
}

/// What was injected, for the detection table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The perturbation.
    pub fault: Fault,
    /// The step it was injected in (1-based, [`FaultInjector::begin_step`]).
    pub step: u64,
    /// The slot it corrupted, or the first of the swapped tokens' indices.
    pub at: i64,
}

/// Injects the planned faults into the engine's memory at its hooks.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    plans: Vec<(FaultPlan, u32)>,
    state: u64,
    step: u64,
    injected: Vec<Injected>,
}

impl FaultInjector {
    /// An injector of `plans`, its draws from `seed`.
    pub fn new(seed: u64, plans: &[FaultPlan]) -> Self {
        FaultInjector {
            plans: plans.iter().map(|&p| (p, 0)).collect(),
            state: seed,
            step: 0,
            injected: Vec::new(),
        }
    }

    /// Starts the engine's next step.
    pub fn begin_step(&mut self) {
        self.step += 1;
    }

    /// Everything injected so far.
    pub fn injected(&self) -> &[Injected] {
        &self.injected
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix64(self.state)
    }

    /// A draw in `[0, n)` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Whether `fault` fires this step (a draw is made only for a planned, warmed-up fault
    /// under its limit).
    fn fires(&mut self, fault: Fault) -> bool {
        let step = self.step;
        let Some(i) = self
            .plans
            .iter()
            .position(|(p, n)| p.fault == fault && step > p.warmup && *n < p.limit)
        else {
            return false;
        };
        let draw = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        if draw < self.plans[i].0.probability {
            self.plans[i].1 += 1;
            return true;
        }
        false
    }

    fn record(&mut self, fault: Fault, at: i64) -> Option<Injected> {
        let injected = Injected {
            fault,
            step: self.step,
            at,
        };
        self.injected.push(injected.clone());
        Some(injected)
    }

    /// [`Fault::TableCell`]: when it fires, `cells[eligible[k]]` (an active cell the step does
    /// not write) becomes one of `others` (another request's slots or blocks). `cells` is host
    /// or device memory ([`FaultMemory`]).
    pub fn table_cell<T: Copy + Into<i64>, M: FaultMemory<T> + ?Sized>(
        &mut self,
        cells: &mut M,
        eligible: &[usize],
        others: &[T],
    ) -> Option<Injected> {
        if eligible.is_empty() || others.is_empty() || !self.fires(Fault::TableCell) {
            return None;
        }
        let (at, with) = (
            eligible[self.below(eligible.len())],
            others[self.below(others.len())],
        );
        cells.modify(at, &|_| with)?;
        self.record(Fault::TableCell, with.into())
    }

    /// The byte-flip hooks: when `fault` fires, the byte at `byte_of(slot)` of `kv` (byte 0 of
    /// a chosen slot of `slots`) is XORed with 0xFF.
    fn flip<M: FaultMemory<u8> + ?Sized>(
        &mut self,
        fault: Fault,
        kv: &mut M,
        slots: &[i64],
        byte_of: impl Fn(i64) -> Option<usize>,
    ) -> Option<Injected> {
        let live: Vec<i64> = slots.iter().copied().filter(|&s| s > 0).collect();
        if live.is_empty() || !self.fires(fault) {
            return None;
        }
        let slot = live[self.below(live.len())];
        kv.modify(byte_of(slot)?, &|b| b ^ 0xFF)?;
        self.record(fault, slot)
    }

    /// [`Fault::LiveKv`] over the step's live slots (those it reads), before the forward pass;
    /// `byte_of` gives a slot's first KV byte (`RealKvSource::first_byte`); `kv` is host or
    /// device memory ([`FaultMemory`]).
    pub fn live_kv<M: FaultMemory<u8> + ?Sized>(
        &mut self,
        kv: &mut M,
        live: &[i64],
        byte_of: impl Fn(i64) -> Option<usize>,
    ) -> Option<Injected> {
        self.flip(Fault::LiveKv, kv, live, byte_of)
    }

    /// [`Fault::IdleKv`] over idle cached slots (no running request reads them).
    pub fn idle_kv<M: FaultMemory<u8> + ?Sized>(
        &mut self,
        kv: &mut M,
        idle: &[i64],
        byte_of: impl Fn(i64) -> Option<usize>,
    ) -> Option<Injected> {
        self.flip(Fault::IdleKv, kv, idle, byte_of)
    }

    /// [`Fault::AfterStamp`] over this step's written slots (its slot mapping), after the tail
    /// verify stamped them.
    pub fn after_stamp<M: FaultMemory<u8> + ?Sized>(
        &mut self,
        kv: &mut M,
        written: &[i64],
        byte_of: impl Fn(i64) -> Option<usize>,
    ) -> Option<Injected> {
        self.flip(Fault::AfterStamp, kv, written, byte_of)
    }

    /// [`Fault::TokenSwap`]: swaps two of the step's sampled tokens (one a request).
    pub fn swap_tokens<T>(&mut self, tokens: &mut [T]) -> Option<Injected> {
        if tokens.len() < 2 || !self.fires(Fault::TokenSwap) {
            return None;
        }
        let a = self.below(tokens.len());
        let b = (a + 1 + self.below(tokens.len() - 1)) % tokens.len();
        tokens.swap(a, b);
        self.record(Fault::TokenSwap, a as i64)
    }
}

/// Deterministic tokens: the token of `request` at `position` is a hash of both and the seed,
/// below `vocab`. The engine samples from it (a mock model) and fills the write-input check's
/// expected tokens from it, so every input check is ground-truthed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenOracle {
    /// The seed.
    pub seed: u64,
    /// Tokens are below this (at least 1).
    pub vocab: u64,
}

impl TokenOracle {
    /// The token of `request` at `position`.
    pub fn token(&self, request: u64, position: i64) -> i64 {
        let h = splitmix64(self.seed ^ splitmix64(request ^ splitmix64(position as u64)));
        (h % self.vocab.max(1)) as i64
    }
}
