//! The optional expected-token pool, which always travels with its valid lengths.

use super::element::IndexElement;
use super::table::{ExpectedTokenTable, ExpectedTokenTableView};

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
    /// The element type of the pool's cells (`i32` for the owned [`ExpectedTokenTable`]).
    type Token: IndexElement;
    /// The element type of the valid lengths.
    type Len: IndexElement;
    /// The pool and its valid lengths, if any.
    fn pool(&self) -> Option<ExpectedTokenPool<'_, Self::Token, Self::Len>>;
}

/// No expected-token pool: every verify entry's expected token is -1 (check skipped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoExpectedTokens;

impl sealed::Sealed for NoExpectedTokens {}
impl ExpectedTokens for NoExpectedTokens {
    type Token = i32;
    type Len = i64;
    fn pool(&self) -> Option<ExpectedTokenPool<'_>> {
        None
    }
}

/// The expected-token pool with its valid lengths (spec §3.2): the entry at position `pos` of
/// batch row `r` expects `table[rp][pos + offset]` when `0 <= pos + offset < valid_lens[r]`, else
/// -1. `valid_lens` holds one length per batch row.
///
/// The table is read through a view, of the owned [`ExpectedTokenTable`]
/// ([`ExpectedTokenTable::with_valid_lens`]) or of an engine's own slice
/// ([`ExpectedTokenTableView::with_valid_lens`]); `T` is its element type, `L` the valid
/// lengths'.
#[derive(Debug)]
pub struct ExpectedTokenPool<'a, T: IndexElement = i32, L: IndexElement = i64> {
    table: ExpectedTokenTableView<'a, T>,
    valid_lens: &'a [L],
}

impl<T: IndexElement, L: IndexElement> Clone for ExpectedTokenPool<'_, T, L> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: IndexElement, L: IndexElement> Copy for ExpectedTokenPool<'_, T, L> {}

impl<'a, T: IndexElement, L: IndexElement> ExpectedTokenPool<'a, T, L> {
    /// The token table.
    pub fn table(&self) -> ExpectedTokenTableView<'a, T> {
        self.table
    }
    /// `req_to_verify_expected_tokens_valid_lens`, one per batch row.
    pub fn valid_lens(&self) -> &'a [L] {
        self.valid_lens
    }
}

impl ExpectedTokenTable {
    /// Pairs the pool with this step's valid lengths (one per batch row), making it usable by
    /// the plan op.
    pub fn with_valid_lens<'a, L: IndexElement>(
        &'a self,
        valid_lens: &'a [L],
    ) -> ExpectedTokenPool<'a, i32, L> {
        self.view().with_valid_lens(valid_lens)
    }
}

impl<'a, T: IndexElement> ExpectedTokenTableView<'a, T> {
    /// Pairs the borrowed pool with this step's valid lengths (one per batch row), making it
    /// usable by the plan op.
    pub fn with_valid_lens<L: IndexElement>(
        self,
        valid_lens: &'a [L],
    ) -> ExpectedTokenPool<'a, T, L> {
        ExpectedTokenPool {
            table: self,
            valid_lens,
        }
    }
}

impl<T: IndexElement, L: IndexElement> sealed::Sealed for ExpectedTokenPool<'_, T, L> {}
impl<T: IndexElement, L: IndexElement> ExpectedTokens for ExpectedTokenPool<'_, T, L> {
    type Token = T;
    type Len = L;
    fn pool(&self) -> Option<ExpectedTokenPool<'_, T, L>> {
        Some(*self)
    }
}
