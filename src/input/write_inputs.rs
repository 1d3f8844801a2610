//! [`WriteInputs`]: the per-token inputs of the write op (spec §4), typed by the write-entry
//! capacity and by whether the write input assert is on; [`WriteInputsView`]: the same inputs
//! borrowed from an engine's own slices, of any [`IndexElement`] type.

use super::element::IndexElement;
use crate::capacity::{Cap, Capacity};
use crate::memory::{host_array, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use core::marker::PhantomData;
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
#[derive_where(Clone, PartialEq; M::IndexArray)]
pub struct ExpectedWriteInputs<M: Memory = Host> {
    pub(crate) tokens: M::IndexArray,
    pub(crate) positions: M::IndexArray,
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
#[derive_where(Clone, PartialEq, Debug; M::IndexArray, A::Expected<M>)]
pub struct WriteInputs<E: Capacity, A: WriteInputAssert = InputAssertOff, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: E,
    pub(crate) input_ids: M::IndexArray,
    pub(crate) positions: M::IndexArray,
    pub(crate) out_cache_loc: M::IndexArray,
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

/// The first `capacity` entries of a view's array `what`, which must hold at least that many
/// (an engine's bucketed arrays may be longer: only the plan's tokens are read).
fn view_prefix<'a, T>(what: &'static str, capacity: usize, v: &'a [T]) -> Result<&'a [T], Error> {
    v.get(..capacity).ok_or(Error::WriteInputsLength {
        what,
        capacity,
        found: v.len(),
    })
}

/// `Ok` when the write input `what` holds exactly the write entry `capacity` of entries.
fn check_len<T>(what: &'static str, capacity: usize, v: &[T]) -> Result<(), Error> {
    if v.len() == capacity {
        Ok(())
    } else {
        Err(Error::WriteInputsLength {
            what,
            capacity,
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

/// The per-token inputs of one write borrowed from an engine's own slices: `input_ids`,
/// `positions` and `out_cache_loc` (and, with the input assert `A` on, the expected tensors) of
/// element type `T`, `E` entries each, no copy. The write op and the step API read a view
/// exactly as the owned [`WriteInputs`] it describes; the capacity is in the type, so a view of
/// another shape's capacity does not compile where the owned inputs would not.
///
/// ```
/// use kv_canary::{Cap, WriteInputsView};
/// // The engine's own i32 arrays of 4 entries; entries 2 and 3 skip (slot -1).
/// let (ids, positions, slots) = ([7i32, 8, 0, 0], [0i32, 1, 0, 0], [8i32, 9, -1, -1]);
/// let view = WriteInputsView::from_arrays(&ids, &positions, &slots);
/// assert_eq!(view.capacity(), Cap::<4>);
/// ```
///
/// A view goes wherever the owned inputs of its capacity go:
///
/// ```
/// use kv_canary::{cpu, CanaryBuffer, Cap, HealthCounters, LaunchSettings, LaunchTag, Shape,
///                 ViolationRing, WriteInputsView};
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let a = [0u32; 8];
/// let view = WriteInputsView::from_arrays(&a, &a, &a);
/// let (mut canary, mut ring) = (CanaryBuffer::<Cap<32>>::new(), ViolationRing::<Cap<4>>::new());
/// cpu::write(&shape, &shape.write_plan(), &view, &LaunchSettings::new(LaunchTag::HeadKFull),
///            &mut canary, &mut ring, &mut HealthCounters::new())?;
/// # Ok::<(), kv_canary::Error>(())
/// ```
///
/// and a view of another capacity does not compile:
///
/// ```compile_fail
/// use kv_canary::{cpu, CanaryBuffer, Cap, HealthCounters, LaunchSettings, LaunchTag, Shape,
///                 ViolationRing, WriteInputsView};
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let a = [0u32; 4]; // 4 entries, not 8
/// let view = WriteInputsView::from_arrays(&a, &a, &a);
/// let (mut canary, mut ring) = (CanaryBuffer::<Cap<32>>::new(), ViolationRing::<Cap<4>>::new());
/// cpu::write(&shape, &shape.write_plan(), &view, &LaunchSettings::new(LaunchTag::HeadKFull),
///            &mut canary, &mut ring, &mut HealthCounters::new())?;
/// # Ok::<(), kv_canary::Error>(())
/// ```
pub struct WriteInputsView<
    'a,
    E: Capacity,
    A: WriteInputAssert = InputAssertOff,
    T: IndexElement = i64,
    P: IndexElement = T,
    L: IndexElement = P,
> {
    capacity: E,
    input_ids: &'a [T],
    positions: &'a [P],
    out_cache_loc: &'a [L],
    /// The expected tensors; empty while the assert is off (the type says which, so the write
    /// op's per-entry branch on them is decided at compile time).
    expected: (&'a [T], &'a [P]),
    assert: PhantomData<A>,
}

impl<E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement> Clone
    for WriteInputsView<'_, E, A, T, P, L>
{
    fn clone(&self) -> Self {
        *self
    }
}
impl<E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement> Copy
    for WriteInputsView<'_, E, A, T, P, L>
{
}

impl<E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement> fmt::Debug
    for WriteInputsView<'_, E, A, T, P, L>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteInputsView")
            .field("capacity", &self.capacity)
            .field("element", &T::NAME)
            .field("input_ids", &self.input_ids)
            .field("positions", &self.positions)
            .field("out_cache_loc", &self.out_cache_loc)
            .field("expected", &self.input_assert_tensors())
            .finish()
    }
}

impl<'a, const N: usize, T: IndexElement, P: IndexElement, L: IndexElement>
    WriteInputsView<'a, Cap<N>, InputAssertOff, T, P, L>
{
    /// A view of three arrays of the static capacity `N`, input assert off.
    pub fn from_arrays(
        input_ids: &'a [T; N],
        positions: &'a [P; N],
        out_cache_loc: &'a [L; N],
    ) -> Self {
        WriteInputsView {
            capacity: Cap,
            input_ids,
            positions,
            out_cache_loc,
            expected: (&[], &[]),
            assert: PhantomData,
        }
    }
}

impl<'a, E: Capacity, T: IndexElement, P: IndexElement, L: IndexElement>
    WriteInputsView<'a, E, InputAssertOff, T, P, L>
{
    /// A view of the first `capacity` entries of three slices, each of its own element type
    /// (mistral.rs: `u32` input ids, `i64` positions, an `i64` slot mapping with -1 padding),
    /// input assert off. A slice may be longer than `capacity` (a bucketed batch); a shorter
    /// one is [`Error::WriteInputsLength`].
    pub fn new(
        capacity: E,
        input_ids: &'a [T],
        positions: &'a [P],
        out_cache_loc: &'a [L],
    ) -> Result<Self, Error> {
        let n = capacity.get();
        Ok(WriteInputsView {
            capacity,
            input_ids: view_prefix("input_ids", n, input_ids)?,
            positions: view_prefix("positions", n, positions)?,
            out_cache_loc: view_prefix("out_cache_loc", n, out_cache_loc)?,
            expected: (&[], &[]),
            assert: PhantomData,
        })
    }

    /// Turns the input assert on with the engine's expected tensors (their first `capacity`
    /// entries; shorter is [`Error::WriteInputsLength`]).
    pub fn with_expected(
        self,
        expected_input_tokens: &'a [T],
        expected_input_positions: &'a [P],
    ) -> Result<WriteInputsView<'a, E, InputAssertOn, T, P, L>, Error> {
        let n = self.capacity.get();
        Ok(WriteInputsView {
            capacity: self.capacity,
            input_ids: self.input_ids,
            positions: self.positions,
            out_cache_loc: self.out_cache_loc,
            expected: (
                view_prefix("expected_input_tokens", n, expected_input_tokens)?,
                view_prefix("expected_input_positions", n, expected_input_positions)?,
            ),
            assert: PhantomData,
        })
    }
}

impl<'a, E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement>
    WriteInputsView<'a, E, A, T, P, L>
{
    /// The write-entry capacity (the length of every array).
    pub fn capacity(&self) -> E {
        self.capacity
    }
    /// `input_ids`.
    pub fn input_ids(&self) -> &'a [T] {
        self.input_ids
    }
    /// `positions`.
    pub fn positions(&self) -> &'a [P] {
        self.positions
    }
    /// `out_cache_loc`.
    pub fn out_cache_loc(&self) -> &'a [L] {
        self.out_cache_loc
    }
    /// `(expected_input_tokens, expected_input_positions)` when the assert is on.
    #[inline(always)]
    pub fn input_assert_tensors(&self) -> Option<(&'a [T], &'a [P])> {
        A::ENABLED.then_some(self.expected)
    }
}

impl<E: Capacity, A: WriteInputAssert> WriteInputs<E, A> {
    /// The inputs as a view (what the write op reads).
    pub fn view(&self) -> WriteInputsView<'_, E, A, i64> {
        WriteInputsView {
            capacity: self.capacity,
            input_ids: &self.input_ids,
            positions: &self.positions,
            out_cache_loc: &self.out_cache_loc,
            expected: A::host_expected(&self.expected).unwrap_or((&[], &[])),
            assert: PhantomData,
        }
    }
}

/// Per-token write inputs in any memory, owned ([`WriteInputs`]) or borrowed
/// ([`WriteInputsView`]): what the step API's write stage holds, with the capacity and the input
/// assert as types.
pub trait WriteInputSource {
    /// The write-entry capacity.
    type Capacity: Capacity;
    /// Whether the input assert is on.
    type Assert: WriteInputAssert;
    /// The write-entry capacity (the length of every array).
    fn entries(&self) -> Self::Capacity;
}

impl<E: Capacity, A: WriteInputAssert, M: Memory> WriteInputSource for WriteInputs<E, A, M> {
    type Capacity = E;
    type Assert = A;
    fn entries(&self) -> E {
        self.capacity
    }
}

impl<E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement>
    WriteInputSource for WriteInputsView<'_, E, A, T, P, L>
{
    type Capacity = E;
    type Assert = A;
    fn entries(&self) -> E {
        self.capacity
    }
}

/// Host write inputs the CPU write op reads: the owned [`WriteInputs`] and any
/// [`WriteInputsView`], read through a view of element type [`Element`](Self::Element).
pub trait HostWriteInputs: WriteInputSource {
    /// The element type of `input_ids` (and `expected_input_tokens`).
    type Element: IndexElement;
    /// The element type of `positions` (and `expected_input_positions`).
    type Position: IndexElement;
    /// The element type of `out_cache_loc` (the slot mapping).
    type Location: IndexElement;
    /// The inputs as a view.
    #[allow(clippy::type_complexity, reason = "one element type per array")]
    fn host_view(
        &self,
    ) -> WriteInputsView<
        '_,
        Self::Capacity,
        Self::Assert,
        Self::Element,
        Self::Position,
        Self::Location,
    >;
}

impl<E: Capacity, A: WriteInputAssert> HostWriteInputs for WriteInputs<E, A> {
    type Element = i64;
    type Position = i64;
    type Location = i64;
    #[inline]
    fn host_view(&self) -> WriteInputsView<'_, E, A, i64> {
        self.view()
    }
}

impl<E: Capacity, A: WriteInputAssert, T: IndexElement, P: IndexElement, L: IndexElement>
    HostWriteInputs for WriteInputsView<'_, E, A, T, P, L>
{
    type Element = T;
    type Position = P;
    type Location = L;
    #[inline]
    fn host_view(&self) -> WriteInputsView<'_, E, A, T, P, L> {
        *self
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
    fn views_check_lengths_and_carry_the_expected_tensors() {
        let cap = UncheckedCapacity::new("write_entry_capacity", 2).unwrap();
        let (a, b, c) = ([1u64, 2], [3u64, 4], [5u64, 6]);
        let off = WriteInputsView::new(cap, &a, &b, &c).unwrap();
        assert_eq!(
            (off.input_assert_tensors(), off.out_cache_loc()),
            (None, &c[..])
        );
        let on = off.with_expected(&b, &a).unwrap();
        assert_eq!(on.input_assert_tensors(), Some((&b[..], &a[..])));
        let err = WriteInputsView::new(cap, &a, &b, &c[..1]).unwrap_err();
        assert_eq!(
            err,
            Error::WriteInputsLength {
                what: "out_cache_loc",
                capacity: 2,
                found: 1
            }
        );
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc length is 1, but write inputs hold the write entry \
             capacity, 2 (owned inputs exactly, views at least): pad this step's tokens to it \
             (entries past the plan's tokens are never read)"
        );
        assert!(off.with_expected(&b, &a[..1]).is_err());
        let owned = WriteInputs::<Cap<3>>::new().with_input_assert();
        let v = owned.view();
        assert_eq!(
            (v.out_cache_loc(), v.input_assert_tensors()),
            (&[-1; 3][..], Some((&[0; 3][..], &[0; 3][..])))
        );
    }

    #[test]
    fn from_parts_names_the_short_array() {
        let cap = UncheckedCapacity::new("write_entry_capacity", 2).unwrap();
        let err = WriteInputs::from_parts(cap, vec![0; 2], vec![0; 2], vec![0; 3]).unwrap_err();
        assert_eq!(
            err,
            Error::WriteInputsLength {
                what: "out_cache_loc",
                capacity: 2,
                found: 3
            }
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
