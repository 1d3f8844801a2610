//! Capacity equality as trait bounds, with messages that read like sentences.
//!
//! Each trait has exactly one impl per capacity kind (nalgebra's `ShapeConstraint` pattern): two
//! static capacities must be the same number, two branded capacities the same brand, and two
//! unchecked capacities are compared at run time. Because the unmet obligation is the annotated
//! trait itself, `#[diagnostic::on_unimplemented]` fires and the first line of the error says
//! which capacities disagree, in decimal.
//!
//! One more impl per trait, for the private uninhabited `NoBuffer`, keeps that promise for
//! static capacities. A launch takes the shape before the buffers, and with a single impl for
//! `Cap<N>` the compiler would *infer* the buffer's capacity from the shape's (`Cap<40>` has only
//! one partner) and then report the real buffer as a bare "mismatched types" (E0308). With two
//! candidate partners it cannot guess, takes the buffer's capacity from the buffer, and reports
//! the unmet bound with the message below (`ui-tests/fail/verify_capacity_static.rs`).
//! `NoBuffer` cannot be constructed or named outside this module. Named capacities
//! ([`NamedVerifyCapacity<T>`] and friends) get the same second partner, for the same reason.
//!
//! The `Cap<N>` impls are written out rather than generated, so that the compiler's "the trait is
//! implemented for `Cap<N>`" hint quotes one line instead of a macro invocation.

use super::{
    check_equal, Cap, Capacity, NamedVerifyCapacity, NamedWriteEntryCapacity,
    NamedWriteReqCapacity, UncheckedCapacity, VerifyCapacity, WriteEntryCapacity, WriteReqCapacity,
};
use crate::Error;
use core::fmt;

/// A capacity no buffer has: uninhabited, private, and only a second impl partner of `Cap<N>`
/// (see the module docs).
#[derive(Clone, Copy)]
pub(crate) enum NoBuffer {}

impl fmt::Debug for NoBuffer {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

impl super::Sealed for NoBuffer {}
impl Capacity for NoBuffer {
    fn get(self) -> usize {
        match self {}
    }
}

macro_rules! same_capacity_trait {
    (
        $(#[$doc:meta])*
        $name:ident, $branded:ident, $named:ident, $what:literal,
        message = $message:literal,
        label = $label:literal,
        note = $note:literal $(,)?
    ) => {
        $(#[$doc])*
        #[diagnostic::on_unimplemented(message = $message, label = $label, note = $note)]
        pub trait $name<Buffer: Capacity>: Capacity {
            /// `Ok` when the capacities agree; the types settle every kind but
            /// [`UncheckedCapacity`], which is compared here.
            fn check(self, buffer: Buffer) -> Result<(), Error>;
        }

        impl<'id> $name<$branded<'id>> for $branded<'id> {
            #[inline]
            fn check(self, _: $branded<'id>) -> Result<(), Error> {
                Ok(())
            }
        }

        #[diagnostic::do_not_recommend]
        impl<const N: usize> $name<NoBuffer> for Cap<N> {
            fn check(self, buffer: NoBuffer) -> Result<(), Error> {
                match buffer {}
            }
        }

        #[diagnostic::do_not_recommend]
        impl<T> $name<NoBuffer> for $named<T> {
            fn check(self, buffer: NoBuffer) -> Result<(), Error> {
                match buffer {}
            }
        }

        impl<T> $name<$named<T>> for $named<T> {
            #[inline]
            fn check(self, buffer: $named<T>) -> Result<(), Error> {
                check_equal($what, self.get(), buffer.get())
            }
        }

        impl $name<UncheckedCapacity> for UncheckedCapacity {
            #[inline]
            fn check(self, buffer: UncheckedCapacity) -> Result<(), Error> {
                check_equal($what, self.get(), buffer.get())
            }
        }
    };
}

same_capacity_trait!(
    /// The shape's verify capacity (`Self`) equals a verify plan's capacity (`Buffer`).
    SameVerifyCapacity, VerifyCapacity, NamedVerifyCapacity, "verify_capacity",
    message = "kv-canary: verify capacity mismatch: the shape derives `{Self}` but the verify plan holds `{Buffer}`",
    label = "the shape's verify capacity is `{Self}`, the verify plan's `{Buffer}`",
    note = "allocate plan buffers from the shape you launch with (`shape.verify_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-request capacity (`Self`) equals a write plan's capacity (`Buffer`).
    SameWriteReqCapacity, WriteReqCapacity, NamedWriteReqCapacity, "write_req_capacity",
    message = "kv-canary: write-request capacity mismatch: the shape derives `{Self}` but the write plan holds `{Buffer}`",
    label = "the shape's write-request capacity is `{Self}`, the write plan's `{Buffer}`",
    note = "allocate plan buffers from the shape you launch with (`shape.write_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-entry capacity (`Self`) equals a per-token input buffer's (`Buffer`).
    SameWriteEntryCapacity, WriteEntryCapacity, NamedWriteEntryCapacity, "write_entry_capacity",
    message = "kv-canary: write-entry capacity mismatch: the shape derives `{Self}` but the write inputs hold `{Buffer}`",
    label = "the shape's write-entry capacity is `{Self}`, the write inputs' `{Buffer}`",
    note = "allocate write inputs from the shape you launch with (`shape.write_inputs()`), so both come from one expression",
);

impl<const N: usize> SameVerifyCapacity<Cap<N>> for Cap<N> {
    #[inline]
    fn check(self, _: Cap<N>) -> Result<(), Error> {
        Ok(())
    }
}

impl<const N: usize> SameWriteReqCapacity<Cap<N>> for Cap<N> {
    #[inline]
    fn check(self, _: Cap<N>) -> Result<(), Error> {
        Ok(())
    }
}

impl<const N: usize> SameWriteEntryCapacity<Cap<N>> for Cap<N> {
    #[inline]
    fn check(self, _: Cap<N>) -> Result<(), Error> {
        Ok(())
    }
}
