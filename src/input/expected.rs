//! The optional expected-token pool, which always travels with its valid lengths.

use super::ExpectedTokenTable;

mod sealed {
    pub trait Sealed {}
}

/// What the plan op uses for expected tokens: [`NoExpectedTokens`] (every entry gets -1) or an
/// [`ExpectedTokenPool`] (a table together with its per-request valid lengths).
///
/// A bare [`ExpectedTokenTable`] is not accepted: SGLang's run-time check "requires
/// req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set" is a
/// compile error here.
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` cannot supply expected tokens: an expected-token table (`ExpectedTokenTable` = `ReqTable<TokenIds>`) needs its valid lengths",
    label = "expected tokens without `req_to_verify_expected_tokens_valid_lens`",
    note = "pass `table.with_valid_lens(&valid_lens)` (one length per batch row), or `NoExpectedTokens`"
)]
pub trait ExpectedTokens: Copy + sealed::Sealed {
    /// The pool and its valid lengths, if any.
    fn pool(&self) -> Option<ExpectedTokenPool<'_>>;
}

/// No expected-token pool: every verify entry's expected token is -1 (check skipped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoExpectedTokens;

impl sealed::Sealed for NoExpectedTokens {}
impl ExpectedTokens for NoExpectedTokens {
    fn pool(&self) -> Option<ExpectedTokenPool<'_>> {
        None
    }
}

/// The expected-token pool with its valid lengths (spec §3.2): the entry at position `pos` of
/// batch row `r` expects `table[rp][pos + offset]` when `0 <= pos + offset < valid_lens[r]`, else
/// -1. `valid_lens` holds one length per batch row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedTokenPool<'a> {
    table: &'a ExpectedTokenTable,
    valid_lens: &'a [i64],
}

impl<'a> ExpectedTokenPool<'a> {
    /// The token table.
    pub fn table(&self) -> &'a ExpectedTokenTable {
        self.table
    }
    /// `req_to_verify_expected_tokens_valid_lens`, one per batch row.
    pub fn valid_lens(&self) -> &'a [i64] {
        self.valid_lens
    }
}

impl ExpectedTokenTable {
    /// Pairs the pool with this step's valid lengths (one per batch row), making it usable by
    /// the plan op.
    pub fn with_valid_lens<'a>(&'a self, valid_lens: &'a [i64]) -> ExpectedTokenPool<'a> {
        ExpectedTokenPool {
            table: self,
            valid_lens,
        }
    }
}

impl sealed::Sealed for ExpectedTokenPool<'_> {}
impl ExpectedTokens for ExpectedTokenPool<'_> {
    fn pool(&self) -> Option<ExpectedTokenPool<'_>> {
        Some(*self)
    }
}
