//! [`WriteInputs`]: the per-token inputs of the write op (spec §4), typed by the write-entry
//! capacity and by whether the write input assert is on.

use crate::capacity::{Cap, Capacity};
use crate::memory::{host_array, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use derive_where::derive_where;

mod sealed {
    pub trait Sealed {}
}

/// Whether the write op compares each token and position with an expected one
/// (`enable_write_input_assert`), as a type: [`InputAssertOff`] or [`InputAssertOn`].
///
/// With the assert on, [`WriteInputs`] always carries the expected tensors; with it off, it has
/// nowhere to put them. SGLang's run-time errors "expected input tensors are required when
/// enable_write_input_assert=True" and "must be None when enable_write_input_assert=False" cannot
/// be written here:
///
/// ```
/// use kv_canary::{Cap, Shape};
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let mut inputs = shape.write_inputs().with_input_assert(); // WriteInputs<Cap<8>, InputAssertOn>
/// inputs.expected_mut().tokens[0] = 7;
/// assert_eq!(inputs.expected_tokens()[0], 7);
/// ```
///
/// ```compile_fail
/// use kv_canary::{Cap, Shape};
/// let inputs = Shape::<Cap<8>, Cap<4>, Cap<8>>::new().write_inputs(); // assert off
/// inputs.expected_tokens(); // no expected tensors exist
/// ```
pub trait WriteInputAssert: sealed::Sealed + 'static {
    /// `enable_write_input_assert`.
    const ENABLED: bool;
    /// What the inputs carry besides the three per-token arrays: nothing, or
    /// [`ExpectedWriteInputs`].
    type Expected<M: Memory>;
    /// `(expected_input_tokens, expected_input_positions)` of host inputs, if the assert is on.
    fn host_expected(expected: &Self::Expected<Host>) -> Option<(&[i64], &[i64])>;
}

/// The write input assert is off: no expected tensors exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputAssertOff;

/// The write input assert is on: every written token and position is compared with
/// [`ExpectedWriteInputs`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputAssertOn;

impl sealed::Sealed for InputAssertOff {}
impl WriteInputAssert for InputAssertOff {
    const ENABLED: bool = false;
    type Expected<M: Memory> = ();
    #[inline(always)]
    fn host_expected(_: &()) -> Option<(&[i64], &[i64])> {
        None
    }
}

impl sealed::Sealed for InputAssertOn {}
impl WriteInputAssert for InputAssertOn {
    const ENABLED: bool = true;
    type Expected<M: Memory> = ExpectedWriteInputs<M>;
    #[inline(always)]
    fn host_expected(e: &ExpectedWriteInputs) -> Option<(&[i64], &[i64])> {
        Some((&e.tokens, &e.positions))
    }
}

/// `expected_input_tokens` and `expected_input_positions`: what an independent oracle says the
/// model was fed, one per flat token.
#[derive_where(Clone, PartialEq; M::Array<i64>)]
pub struct ExpectedWriteInputs<M: Memory = Host> {
    pub(crate) tokens: M::Array<i64>,
    pub(crate) positions: M::Array<i64>,
}

// Written out, not derived: it prints SGLang's tensor names (`expected_input_tokens`, ...),
// which a derive cannot.
impl fmt::Debug for ExpectedWriteInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpectedWriteInputs")
            .field("expected_input_tokens", &self.tokens)
            .field("expected_input_positions", &self.positions)
            .finish()
    }
}

/// The per-token inputs of one write (spec §4): `input_ids`, `positions` and `out_cache_loc`,
/// `E` entries each (the write-entry capacity, in the type), plus the expected tensors when the
/// input assert `A` is on.
///
/// Request `r` of a [`WritePlan`](crate::WritePlan) stamps flat entries
/// `[write_offsets[r], write_offsets[r + 1])`. `out_cache_loc` is already in the canary's slot
/// space (SWA callers translate it); a negative slot skips the entry. Entries past the planned
/// total (CUDA-graph padding) are never read.
///
/// Allocate them from the shape you launch with (`shape.write_inputs()`), so that `E` matches.
///
/// `Clone`, `PartialEq` and `Debug` hold for host inputs; equality compares the arrays (the
/// capacity follows from their lengths).
#[derive_where(Clone, PartialEq, Debug; M::Array<i64>, A::Expected<M>)]
pub struct WriteInputs<E: Capacity, A: WriteInputAssert = InputAssertOff, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: E,
    pub(crate) input_ids: M::Array<i64>,
    pub(crate) positions: M::Array<i64>,
    pub(crate) out_cache_loc: M::Array<i64>,
    pub(crate) expected: A::Expected<M>,
}

/// Mutable views of a host [`WriteInputs`]' per-token arrays (lengths fixed).
#[derive(Debug)]
pub struct WriteInputsMut<'a> {
    /// `input_ids`.
    pub input_ids: &'a mut [i64],
    /// `positions`.
    pub positions: &'a mut [i64],
    /// `out_cache_loc` (negative = skip).
    pub out_cache_loc: &'a mut [i64],
}

/// Mutable views of the expected tensors (lengths fixed).
#[derive(Debug)]
pub struct ExpectedWriteInputsMut<'a> {
    /// `expected_input_tokens`.
    pub tokens: &'a mut [i64],
    /// `expected_input_positions`.
    pub positions: &'a mut [i64],
}

impl<const N: usize> WriteInputs<Cap<N>> {
    /// Host inputs of `N` entries, assert off (see [`WriteInputs::try_with_capacity`]).
    ///
    /// # Panics
    ///
    /// If the `N` entries cannot be allocated (a size fixed at compile time).
    pub fn new() -> Self {
        static_size(Self::try_with_capacity(Cap))
    }

    /// [`try_with_input_assert`](WriteInputs::try_with_input_assert) for a static capacity.
    ///
    /// # Panics
    ///
    /// If the expected tensors' `N` entries cannot be allocated (a size fixed at compile time).
    pub fn with_input_assert(self) -> WriteInputs<Cap<N>, InputAssertOn> {
        static_size(self.try_with_input_assert())
    }
}

impl<const N: usize> Default for WriteInputs<Cap<N>> {
    fn default() -> Self {
        Self::new()
    }
}

fn check_len(what: &'static str, expected: usize, v: &[i64]) -> Result<(), Error> {
    if v.len() == expected {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            found: v.len(),
        })
    }
}

impl<E: Capacity> WriteInputs<E> {
    /// Host inputs of `capacity` entries, assert off: tokens and positions 0, every
    /// `out_cache_loc` -1 (skip), so entries never filled in stamp nothing.
    ///
    /// A capacity whose arrays cannot be allocated is [`Error::AllocationFailed`] naming it.
    pub fn try_with_capacity(capacity: E) -> Result<Self, Error> {
        let n = capacity.get();
        Ok(WriteInputs {
            capacity,
            input_ids: host_array("input_ids", n, 0)?,
            positions: host_array("positions", n, 0)?,
            out_cache_loc: host_array("out_cache_loc", n, -1)?,
            expected: (),
        })
    }

    /// The infallible form, for the CUDA backend's host copies of inputs that already exist on
    /// the device (`to_host`); it panics with the allocation error. Crate-private: the public
    /// API allocates run-time capacities with `try_with_capacity` only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_capacity(capacity: E) -> Self {
        static_size(Self::try_with_capacity(capacity))
    }

    /// Host inputs from raw arrays (conformance dumps, FFI), assert off; each array must hold
    /// exactly `capacity` entries.
    pub fn from_parts(
        capacity: E,
        input_ids: Vec<i64>,
        positions: Vec<i64>,
        out_cache_loc: Vec<i64>,
    ) -> Result<Self, Error> {
        let n = capacity.get();
        check_len("input_ids", n, &input_ids)?;
        check_len("positions", n, &positions)?;
        check_len("out_cache_loc", n, &out_cache_loc)?;
        Ok(WriteInputs {
            capacity,
            input_ids: input_ids.into(),
            positions: positions.into(),
            out_cache_loc: out_cache_loc.into(),
            expected: (),
        })
    }

    /// Turns the input assert on, with expected tokens and positions zeroed (fill them with
    /// [`expected_mut`](WriteInputs::expected_mut)); expected tensors that cannot be allocated
    /// are [`Error::AllocationFailed`] naming their size.
    pub fn try_with_input_assert(self) -> Result<WriteInputs<E, InputAssertOn>, Error> {
        let n = self.capacity.get();
        Ok(WriteInputs {
            capacity: self.capacity,
            input_ids: self.input_ids,
            positions: self.positions,
            out_cache_loc: self.out_cache_loc,
            expected: ExpectedWriteInputs {
                tokens: host_array("expected_input_tokens", n, 0)?,
                positions: host_array("expected_input_positions", n, 0)?,
            },
        })
    }

    /// The infallible form of [`try_with_input_assert`](Self::try_with_input_assert), for the
    /// CUDA backend's host copies (crate-private, as [`with_capacity`](Self::with_capacity)).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn expect_input_assert(self) -> WriteInputs<E, InputAssertOn> {
        static_size(self.try_with_input_assert())
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOn> {
    /// Host inputs with the input assert on, from raw arrays; each of the five must hold
    /// exactly `capacity` entries.
    pub fn from_parts_with_expected(
        capacity: E,
        input_ids: Vec<i64>,
        positions: Vec<i64>,
        out_cache_loc: Vec<i64>,
        expected_input_tokens: Vec<i64>,
        expected_input_positions: Vec<i64>,
    ) -> Result<Self, Error> {
        let n = capacity.get();
        check_len("expected_input_tokens", n, &expected_input_tokens)?;
        check_len("expected_input_positions", n, &expected_input_positions)?;
        let off = WriteInputs::from_parts(capacity, input_ids, positions, out_cache_loc)?;
        Ok(WriteInputs {
            capacity,
            input_ids: off.input_ids,
            positions: off.positions,
            out_cache_loc: off.out_cache_loc,
            expected: ExpectedWriteInputs {
                tokens: expected_input_tokens.into(),
                positions: expected_input_positions.into(),
            },
        })
    }

    /// `expected_input_tokens`.
    pub fn expected_tokens(&self) -> &[i64] {
        &self.expected.tokens
    }

    /// `expected_input_positions`.
    pub fn expected_positions(&self) -> &[i64] {
        &self.expected.positions
    }

    /// Mutable views of the expected tensors.
    pub fn expected_mut(&mut self) -> ExpectedWriteInputsMut<'_> {
        ExpectedWriteInputsMut {
            tokens: &mut self.expected.tokens,
            positions: &mut self.expected.positions,
        }
    }

    /// Turns the input assert off, dropping the expected tensors.
    pub fn without_input_assert(self) -> WriteInputs<E> {
        WriteInputs {
            capacity: self.capacity,
            input_ids: self.input_ids,
            positions: self.positions,
            out_cache_loc: self.out_cache_loc,
            expected: (),
        }
    }
}

impl<E: Capacity, A: WriteInputAssert> WriteInputs<E, A> {
    /// `input_ids` (all `E` entries).
    pub fn input_ids(&self) -> &[i64] {
        &self.input_ids
    }
    /// `positions`.
    pub fn positions(&self) -> &[i64] {
        &self.positions
    }
    /// `out_cache_loc`.
    pub fn out_cache_loc(&self) -> &[i64] {
        &self.out_cache_loc
    }
    /// Mutable views of the three per-token arrays.
    pub fn parts_mut(&mut self) -> WriteInputsMut<'_> {
        WriteInputsMut {
            input_ids: &mut self.input_ids,
            positions: &mut self.positions,
            out_cache_loc: &mut self.out_cache_loc,
        }
    }
    /// `(expected_input_tokens, expected_input_positions)` when the assert is on, for code
    /// generic over `A` (a backend that re-types the inputs for its own launch).
    pub fn input_assert_tensors(&self) -> Option<(&[i64], &[i64])> {
        A::host_expected(&self.expected)
    }
}

impl<E: Capacity, A: WriteInputAssert, M: Memory> WriteInputs<E, A, M> {
    /// The write-entry capacity (the length of every array).
    pub fn capacity(&self) -> E {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::UncheckedCapacity;

    #[test]
    fn fresh_inputs_skip_every_entry() {
        let w = WriteInputs::<Cap<3>>::new();
        assert_eq!(w.out_cache_loc(), &[-1, -1, -1]);
        assert_eq!(w.input_assert_tensors(), None);
        let mut on = w.with_input_assert();
        on.expected_mut().tokens[1] = 7;
        assert_eq!(on.expected_tokens(), &[0, 7, 0]);
        assert_eq!(on.input_assert_tensors().unwrap().0, &[0, 7, 0]);
        assert_eq!(on.without_input_assert().input_ids(), &[0, 0, 0]);
    }

    #[test]
    fn run_time_capacities_allocate_fallibly() {
        let cap = UncheckedCapacity::new("write_entry_capacity", 1 << 61).unwrap();
        assert_eq!(
            WriteInputs::try_with_capacity(cap).unwrap_err(),
            Error::AllocationFailed {
                what: "input_ids",
                rows: 1 << 61,
                cols: 1,
                element_bytes: 8
            }
        );
        let cap = UncheckedCapacity::new("write_entry_capacity", 2).unwrap();
        let on = WriteInputs::try_with_capacity(cap)
            .unwrap()
            .try_with_input_assert()
            .unwrap();
        assert_eq!(on.expected_tokens(), &[0, 0]);
    }

    #[test]
    fn from_parts_names_the_short_array() {
        let cap = UncheckedCapacity::new("write_entry_capacity", 2).unwrap();
        let err = WriteInputs::from_parts(cap, vec![0; 2], vec![0; 2], vec![0; 3]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc length must be 2, got 3"
        );
        let err = WriteInputs::from_parts_with_expected(
            cap,
            vec![0; 2],
            vec![0; 2],
            vec![0; 2],
            vec![0; 2],
            vec![0; 1],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("expected_input_positions"),
            "{err}"
        );
    }
}
