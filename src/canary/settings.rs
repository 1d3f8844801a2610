//! [`LaunchSettings`]: the per-launch settings shared by write and verify (spec §2.13).

use super::LaunchTag;
use crate::real_kv::RealKv;

mod sealed {
    pub trait Sealed {}
}

/// Whether verify compares stored tokens with the plan's expected tokens
/// (`check_verify_expected_token`), chosen at compile time as on SGLang's GPU path:
/// [`TokenCheckOn`] or [`TokenCheckOff`]. With the check off the expected-token array is never
/// read and every row's expected token is -1.
pub trait TokenCheck: Copy + sealed::Sealed + 'static {
    /// `check_verify_expected_token`.
    const ENABLED: bool;
}

/// Verify checks stored tokens against `verify_expected_tokens` (entries with -1 are skipped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCheckOn;

/// Verify ignores `verify_expected_tokens` (sweep launches; pools without an oracle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCheckOff;

impl sealed::Sealed for TokenCheckOn {}
impl TokenCheck for TokenCheckOn {
    const ENABLED: bool = true;
}
impl sealed::Sealed for TokenCheckOff {}
impl TokenCheck for TokenCheckOff {
    const ENABLED: bool = false;
}

/// `enable_chain_position_assert`: a run-time `i32` flag, not a type, because engines flip it
/// after CUDA-graph warm-up (0 during warm-up and capture, 1 afterwards) without re-planning.
///
/// Only the write op reads it: when non-zero, every request with a seed slot checks that its
/// positions continue the seed's (`pos == prev_pos + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChainPositionAssert(i32);

impl ChainPositionAssert {
    /// Flag 1: check positions (the steady state after warm-up).
    pub const ON: ChainPositionAssert = ChainPositionAssert(1);
    /// Flag 0: do not check (warm-up, graph capture).
    pub const OFF: ChainPositionAssert = ChainPositionAssert(0);

    /// The flag as stored in SGLang's `i32 [1]` tensor; any non-zero value is on.
    pub const fn from_flag(flag: i32) -> Self {
        ChainPositionAssert(flag)
    }

    /// The flag as stored.
    pub const fn flag(self) -> i32 {
        self.0
    }

    /// Whether positions are checked.
    pub const fn is_on(self) -> bool {
        self.0 != 0
    }
}

impl Default for ChainPositionAssert {
    /// [`ChainPositionAssert::ON`].
    fn default() -> Self {
        Self::ON
    }
}

/// What one write or verify launch needs besides its buffers: the tag stamped into violation
/// rows, the real-KV fingerprint settings and the chain-position assert flag (read by write only).
///
/// ```
/// use kv_canary::{ChainPositionAssert, LaunchSettings, LaunchTag};
/// let head = LaunchSettings::new(LaunchTag::HeadKFull);
/// let warm_up = head.with_chain_position_assert(ChainPositionAssert::OFF);
/// assert!(!warm_up.chain_position_assert.is_on());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchSettings<'a> {
    /// Stamped into field 0 of every violation row.
    pub tag: LaunchTag,
    /// The real-KV fingerprint (mode and sources).
    pub real_kv: RealKv<'a>,
    /// `enable_chain_position_assert` (write only).
    pub chain_position_assert: ChainPositionAssert,
}

impl LaunchSettings<'static> {
    /// A launch with tag `tag`, no real-KV fingerprint and the chain-position assert on.
    pub const fn new(tag: LaunchTag) -> Self {
        LaunchSettings {
            tag,
            real_kv: RealKv::NONE,
            chain_position_assert: ChainPositionAssert::ON,
        }
    }
}

impl<'a> LaunchSettings<'a> {
    /// The same launch with another real-KV fingerprint.
    pub fn with_real_kv<'b>(self, real_kv: RealKv<'b>) -> LaunchSettings<'b> {
        LaunchSettings {
            tag: self.tag,
            real_kv,
            chain_position_assert: self.chain_position_assert,
        }
    }

    /// The same launch with another chain-position assert flag.
    pub fn with_chain_position_assert(self, flag: ChainPositionAssert) -> Self {
        LaunchSettings {
            chain_position_assert: flag,
            ..self
        }
    }
}
