//! Capacities: how many elements a buffer holds, carried in the buffer's type.
//!
//! Every plan buffer, the canary buffer and the violation ring are generic over a [`Capacity`].
//! There are four kinds, all behind the one trait:
//!
//! | kind | type | when | a mismatch is |
//! |---|---|---|---|
//! | static | [`Cap<N>`] | capacities known when the engine is compiled | a compile error that reads in decimal (`Cap<40>` vs `Cap<32>`) |
//! | derived | [`Derived<T>`] = `Cap<N>` | arithmetic over generic parameters (typenum) | the same decimal compile error |
//! | branded | [`VerifyCapacity<'id>`], [`WriteReqCapacity<'id>`], [`WriteEntryCapacity<'id>`] | read from a config at start-up | a compile (borrow-check) error: two brands never unify |
//! | named | [`NamedVerifyCapacity<T>`], [`NamedWriteReqCapacity<T>`], [`NamedWriteEntryCapacity<T>`] | read from a config, held in an engine struct | a compile error naming both configurations' types (equal names: compared at run time) |
//! | unchecked | [`UncheckedCapacity`] | FFI, quick experiments | a run-time [`Error::CapacityMismatch`] naming both numbers |
//!
//! Capacities are always positive: `Cap<0>` is rejected when a buffer of it is built (a
//! post-monomorphization error, visible in `cargo build`), the run-time kinds at construction.

mod brand;
mod constraint;
mod named;
mod typenum_bridge;

pub use brand::{Brand, VerifyCapacity, WriteEntryCapacity, WriteReqCapacity};
pub use constraint::{SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
pub use named::{NamedVerifyCapacity, NamedWriteEntryCapacity, NamedWriteReqCapacity};

use crate::Error;
use core::fmt;

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A number of elements, carried in a type.
///
/// Implemented by [`Cap<N>`] (static), the branded run-time capacities of
/// [`Shape::branded`](crate::Shape::branded) and [`UncheckedCapacity`]. Sealed: the guarantees of
/// the typed API rest on every implementation being one of these.
pub trait Capacity: Copy + fmt::Debug + Sealed {
    /// The number of elements (always at least 1).
    fn get(self) -> usize;
}

/// A static capacity of `N` elements, written as a plain number: `Cap<40>`.
///
/// Two different static capacities are two different types, so a buffer of `Cap<32>` handed to a
/// launch that expects `Cap<40>` does not compile, and the error names both numbers in decimal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cap<const N: usize>;

impl<const N: usize> Cap<N> {
    /// The capacity as a number.
    pub const VALUE: usize = N;
    /// Evaluating this fails the build when `N == 0` (SGLang: "capacity must be positive").
    pub(crate) const POSITIVE: () = assert!(
        N > 0,
        "kv-canary: `Cap<0>` is not a capacity: capacities must be positive, got 0"
    );

    /// The capacity value (a zero-sized token).
    pub const fn new() -> Self {
        Cap
    }
}

impl<const N: usize> fmt::Debug for Cap<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cap<{N}>")
    }
}

impl<const N: usize> Sealed for Cap<N> {}
impl<const N: usize> Capacity for Cap<N> {
    #[inline]
    fn get(self) -> usize {
        let () = Self::POSITIVE;
        N
    }
}

/// A capacity known only at run time and **not** branded: every launch compares it with the
/// buffer's at the call and returns [`Error::CapacityMismatch`]
/// naming both numbers when they differ — SGLang's own run-time check, kept for FFI and quick
/// experiments. Prefer [`Shape::branded`](crate::Shape::branded), which makes the same mistake a
/// compile error.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UncheckedCapacity(usize);

impl UncheckedCapacity {
    /// A run-time capacity of `n` elements; `n` must be positive.
    ///
    /// `what` names the capacity in the error (for example `"verify_capacity"`).
    pub fn new(what: &'static str, n: usize) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::ZeroCapacity { what, value: 0 });
        }
        Ok(UncheckedCapacity(n))
    }
}

impl fmt::Debug for UncheckedCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UncheckedCapacity({})", self.0)
    }
}

impl Sealed for UncheckedCapacity {}
impl Capacity for UncheckedCapacity {
    #[inline]
    fn get(self) -> usize {
        self.0
    }
}

/// Turns a typenum number into the decimal static capacity [`Cap<N>`].
///
/// Type-level arithmetic over *generic* parameters (`B * (K + 1)` for a shape generic over `B`
/// and `K`) needs typenum on stable Rust; this bridge converts the result back at the edge, so
/// users see `Cap<40>` in errors, never `UInt<UInt<UTerm, B1>, B0>`. Implemented for every typenum
/// constant from 1 to 2^40 (1..=1024 densely, then typenum's selected values: powers of two, one
/// less than them, powers of ten, 3600).
#[diagnostic::on_unimplemented(
    message = "kv-canary: the derived capacity `{Self}` has no decimal `Cap<N>` form",
    label = "not a positive typenum constant in 1..=1024 or one of typenum's selected larger values",
    note = "derived capacities must evaluate to 1..=1024, a power of two, one less than a power of two, or a power of ten; write a `Cap<N>` directly otherwise"
)]
pub trait ToCap {
    /// The decimal capacity.
    type Cap: Capacity;
}

/// The decimal capacity of a typenum expression: `Derived<Prod<B, Add1<K>>>` is `Cap<40>` for
/// `B = U8`, `K = U4`.
pub type Derived<T> = <T as ToCap>::Cap;

/// The run-time check behind every capacity comparison that the types could not settle.
pub(crate) fn check_equal(what: &'static str, expected: usize, found: usize) -> Result<(), Error> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::CapacityMismatch {
            what,
            expected,
            found,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use typenum::{Add1, Prod, U4, U8};

    #[test]
    fn derived_capacity_is_decimal() {
        fn same<T>(_: T, _: T) {}
        let derived: Derived<Prod<U8, Add1<U4>>> = Cap;
        same(derived, Cap::<40>);
        assert_eq!(derived.get(), 40);
        assert_eq!(format!("{derived:?}"), "Cap<40>");
    }

    #[test]
    fn unchecked_capacity_rejects_zero() {
        let err = UncheckedCapacity::new("verify_capacity", 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: verify_capacity must be positive, got 0"
        );
        assert_eq!(UncheckedCapacity::new("x", 7).unwrap().get(), 7);
    }

    #[test]
    fn unchecked_mismatch_names_both_numbers() {
        let err = check_equal("verify_capacity", 40, 32).unwrap_err();
        assert!(err.to_string().contains("40"), "{err}");
        assert!(err.to_string().contains("32"), "{err}");
    }
}
