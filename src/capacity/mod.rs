//! Capacities: how many elements a buffer holds, carried in the buffer's type.
//!
//! The kinds, and what a mismatch of each is: on [`Capacity`], where the rendered docs show
//! them.

mod brand;
mod constraint;
mod named;
mod typenum_bridge;

pub use brand::{Brand, VerifyCapacity, WriteEntryCapacity, WriteReqCapacity};
pub use constraint::{SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
pub use named::{NamedVerifyCapacity, NamedWriteEntryCapacity, NamedWriteReqCapacity};

use crate::Error;
use core::fmt;
use core::marker::PhantomData;
use typenum::{Bit, Const, NonZero, ToUInt, UInt, UTerm, Unsigned, U};

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A number of elements, carried in a type.
///
/// Every plan buffer, the canary buffer and the violation ring are generic over a [`Capacity`].
/// There are five kinds, all behind this one trait:
///
/// | kind | type | when | a mismatch is |
/// |---|---|---|---|
/// | static | [`Cap<N>`] | capacities known when the engine is compiled | a compile error that reads in decimal (`Cap<40>` vs `Cap<32>`) |
/// | derived | [`Derived<T>`]: `Cap<N>` below 1024, [`TypenumCap<T>`] from 1024 up | arithmetic over generic parameters (typenum) | below 1024 the same decimal compile error; from 1024 up a `cargo build` error naming both numbers in decimal |
/// | branded | [`VerifyCapacity<'id>`], [`WriteReqCapacity<'id>`], [`WriteEntryCapacity<'id>`] | read from a config at start-up | a compile (borrow-check) error: two brands never unify |
/// | named | [`NamedVerifyCapacity<T>`], [`NamedWriteReqCapacity<T>`], [`NamedWriteEntryCapacity<T>`] | read from a config, held in an engine struct | a compile error naming both configurations' types (equal names: compared at run time) |
/// | unchecked | [`UncheckedCapacity`] | FFI, quick experiments | a run-time [`Error::CapacityMismatch`](crate::Error::CapacityMismatch) naming both numbers |
///
/// Capacities are always positive: `Cap<0>` is rejected when a buffer of it is built (a
/// post-monomorphization error, visible in `cargo build`), `TypenumCap<U0>` and `Derived<U0>`
/// by the type checker, the run-time kinds at construction.
///
/// Sealed: the guarantees of the typed API rest on every implementation being one of these.
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

/// A static capacity of `T` elements, `T` a typenum number: what [`Derived`] gives for values of
/// 1024 and above, which have no `Cap<N>` form on stable Rust (turning a generic typenum number
/// into a const generic needs `generic_const_exprs`).
///
/// It works wherever a [`Cap<N>`] does. It equals a `Cap<N>` or another `TypenumCap` of the same
/// *value*: the launches compare the two numbers when the program is built (a
/// post-monomorphization check, so `cargo build` reports a mismatch and `cargo check` does not),
/// and the error names both numbers in decimal:
/// `kv-canary: verify capacity mismatch: the shape derives 1500 but the verify plan holds 1499`.
/// Its `Debug` form is decimal too (`TypenumCap<1500>`).
pub struct TypenumCap<T>(PhantomData<T>);

impl<T> TypenumCap<T> {
    /// The capacity value (a zero-sized token).
    pub const fn new() -> Self {
        TypenumCap(PhantomData)
    }
}

// Written out rather than derived: derives would demand `T: Clone` and so on of the typenum
// number, which its users never need.
impl<T> Clone for TypenumCap<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for TypenumCap<T> {}
impl<T> Default for TypenumCap<T> {
    fn default() -> Self {
        Self::new()
    }
}
impl<T> PartialEq for TypenumCap<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for TypenumCap<T> {}
impl<T> core::hash::Hash for TypenumCap<T> {
    fn hash<H: core::hash::Hasher>(&self, _: &mut H) {}
}

impl<T: Unsigned + NonZero> fmt::Debug for TypenumCap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TypenumCap<{}>", T::USIZE)
    }
}

impl<T: Unsigned + NonZero> Sealed for TypenumCap<T> {}
impl<T: Unsigned + NonZero> Capacity for TypenumCap<T> {
    #[inline]
    fn get(self) -> usize {
        T::USIZE
    }
}

/// A capacity fixed when the program is compiled: [`Cap<N>`] and [`TypenumCap<T>`] (and so every
/// [`Derived`]). It can be made from nothing and its number is a constant.
///
/// Run-time capacities (branded, named, unchecked) are not static: where a method is only for
/// static ones (`Canary::write_inputs`, `Canary::full`, `Shape::verify_plan`), its fallible `try_`
/// form ([`Canary::try_write_inputs`](crate::step::Canary::try_write_inputs),
/// [`Canary::try_full`](crate::step::Canary::try_full),
/// [`Shape::try_verify_plan`](crate::Shape::try_verify_plan), ...) serves them.
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` is a run-time capacity, and this needs a static one (`Cap<N>`)",
    note = "run-time capacities use the fallible forms: `Canary::try_write_inputs`, `Canary::try_full`, `Shape::try_verify_plan`, ..."
)]
pub trait StaticCapacity: Capacity {
    /// The capacity value.
    const VALUE: Self;
    /// The number of elements.
    const NUMBER: usize;
}
impl<const N: usize> StaticCapacity for Cap<N> {
    const VALUE: Self = Cap;
    const NUMBER: usize = N;
}
impl<T: Unsigned + NonZero> StaticCapacity for TypenumCap<T> {
    const VALUE: Self = TypenumCap::new();
    const NUMBER: usize = T::USIZE;
}

/// Turns a typenum number into a static capacity: [`Cap<N>`] for 1 to 1023, [`TypenumCap<T>`]
/// from 1024 up. Also implemented by the static capacities themselves (`Cap<N>` and
/// `TypenumCap<T>` turn into themselves).
///
/// Type-level arithmetic over *generic* parameters (`B * (K + 1)` for a shape generic over `B`
/// and `K`) needs typenum on stable Rust; this bridge converts the result back at the edge, so
/// users see `Cap<40>` in errors, never `UInt<UInt<UTerm, B1>, B0>`. Every positive typenum
/// number has an impl; below 1024 they are written out (one per bit pattern, by a macro), above
/// it one impl covers every number of 11 bits or more.
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` is not a positive typenum number, so it is no capacity",
    label = "not a positive typenum number (`U0` is zero; capacities must be positive)",
    note = "derived capacities are typenum expressions over positive numbers, such as `Prod<U300, U5>`"
)]
pub trait ToCap {
    /// The static capacity: `Cap<N>` below 1024, `TypenumCap<Self>` from 1024 up.
    type Cap: StaticCapacity;
}

/// The static capacity of a typenum expression: `Derived<Prod<B, Add1<K>>>` is `Cap<40>` for
/// `B = U8`, `K = U4`, and `Derived<Prod<U300, U5>>` is `TypenumCap<U1500>`, which launches
/// compare with `Cap<1500>` by value.
pub type Derived<T> = <T as ToCap>::Cap;

impl<const N: usize> ToCap for Cap<N> {
    type Cap = Cap<N>;
}
impl<T: Unsigned + NonZero> ToCap for TypenumCap<T> {
    type Cap = TypenumCap<T>;
}

/// Turns a number written either way — a typenum number or a static capacity — into its typenum
/// form, so that shapes doing typenum arithmetic ([`SpeculativeShape`](crate::SpeculativeShape),
/// [`PoolShape`](crate::PoolShape)) take `Cap<8>` as well as `U8`.
///
/// `Cap<N>` goes through typenum's own table (`typenum::U<N>`): 0 to 1024 and typenum's named
/// larger values (powers of two and of ten, one less than a power of two, 3600).
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` is not a number a typenum shape can do arithmetic on",
    label = "neither a typenum number nor a `Cap<N>` with a typenum form",
    note = "write the shape's parameters as typenum numbers (`U8`) or as `Cap<N>` (`Cap<8>`)"
)]
pub trait ToTypenum {
    /// The typenum number.
    type Typenum: Unsigned;
}
impl ToTypenum for UTerm {
    type Typenum = UTerm;
}
impl<U: Unsigned, B: Bit> ToTypenum for UInt<U, B> {
    type Typenum = UInt<U, B>;
}
impl<const N: usize> ToTypenum for Cap<N>
where
    Const<N>: ToUInt,
    U<N>: Unsigned,
{
    type Typenum = U<N>;
}
impl<T: Unsigned + NonZero> ToTypenum for TypenumCap<T> {
    type Typenum = T;
}

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
    use typenum::{Add1, Prod, Sub1, U1, U1023, U1024, U1099511627776, U2, U300, U4, U5, U8};

    fn same<T>(_: T, _: T) {}

    #[test]
    fn derived_capacity_is_decimal() {
        let derived: Derived<Prod<U8, Add1<U4>>> = Cap;
        same(derived, Cap::<40>);
        assert_eq!(derived.get(), 40);
        assert_eq!(format!("{derived:?}"), "Cap<40>");
    }

    #[test]
    fn derived_capacities_below_1024_are_cap() {
        same(<Derived<U1023> as StaticCapacity>::VALUE, Cap::<1023>);
        same(<Derived<U1> as StaticCapacity>::VALUE, Cap::<1>);
        same(
            <Derived<Prod<U300, U2>> as StaticCapacity>::VALUE,
            Cap::<600>,
        );
        // A static capacity is its own derived capacity.
        same(<Derived<Cap<7>> as StaticCapacity>::VALUE, Cap::<7>);
    }

    #[test]
    fn derived_capacities_from_1024_up_are_typenum_caps_of_their_value() {
        let at_1024: Derived<U1024> = TypenumCap::new();
        assert_eq!(at_1024.get(), 1024);
        // 300 x 5: not one of typenum's named constants.
        let derived: Derived<Prod<U300, U5>> = TypenumCap::new();
        assert_eq!(derived.get(), 1500);
        assert_eq!(<Derived<Prod<U300, U5>> as StaticCapacity>::NUMBER, 1500);
        assert_eq!(format!("{derived:?}"), "TypenumCap<1500>");
        // Just below 2^40, and 2^40 itself.
        let near: Derived<Sub1<Prod<U1099511627776, U1>>> = TypenumCap::new();
        assert_eq!(near.get(), (1 << 40) - 1);
        let top: Derived<U1099511627776> = TypenumCap::new();
        assert_eq!(top.get(), 1 << 40);
        let odd: Derived<Prod<Sub1<U1099511627776>, U1>> = TypenumCap::new();
        assert_eq!(odd.get(), 1_099_511_627_775);
    }

    #[test]
    fn typenum_caps_compare_by_value_with_static_capacities() {
        use super::constraint::SameVerifyCapacity;
        let derived: Derived<Prod<U300, U5>> = TypenumCap::new();
        assert!(SameVerifyCapacity::check(derived, Cap::<1500>).is_ok());
        assert!(SameVerifyCapacity::check(Cap::<1500>, derived).is_ok());
        let same_value: TypenumCap<Prod<typenum::U500, typenum::U3>> = TypenumCap::new();
        assert!(SameVerifyCapacity::check(derived, same_value).is_ok());
    }

    #[test]
    fn static_capacities_turn_into_typenum() {
        same(
            <<Cap<8> as ToTypenum>::Typenum as Default>::default(),
            U8::new(),
        );
        assert_eq!(<<Cap<1024> as ToTypenum>::Typenum as Unsigned>::USIZE, 1024);
        assert_eq!(
            <<TypenumCap<U1024> as ToTypenum>::Typenum as Unsigned>::USIZE,
            1024
        );
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
