//! Capacity equality as trait bounds, with messages that read like sentences.
//!
//! Each trait has exactly one impl per capacity kind (nalgebra's `ShapeConstraint` pattern): two
//! static capacities must be the same number, two branded capacities the same brand, and two
//! unchecked capacities are compared at run time. Because the unmet obligation is the annotated
//! trait itself, `#[diagnostic::on_unimplemented]` fires and the first line of the error says
//! which capacities disagree, in decimal.

use super::{
    check_equal, Cap, Capacity, UncheckedCapacity, VerifyCapacity, WriteEntryCapacity,
    WriteReqCapacity,
};
use crate::Error;

macro_rules! same_capacity_trait {
    (
        $(#[$doc:meta])*
        $name:ident, $branded:ident, $what:literal,
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

        impl<const N: usize> $name<Cap<N>> for Cap<N> {
            #[inline]
            fn check(self, _: Cap<N>) -> Result<(), Error> {
                Ok(())
            }
        }

        impl<'id> $name<$branded<'id>> for $branded<'id> {
            #[inline]
            fn check(self, _: $branded<'id>) -> Result<(), Error> {
                Ok(())
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
    SameVerifyCapacity, VerifyCapacity, "verify_capacity",
    message = "kv-canary: verify capacity mismatch: the shape derives `{Self}` but the verify plan holds `{Buffer}`",
    label = "this verify plan was allocated with another verify capacity",
    note = "allocate plan buffers from the shape you launch with (`shape.verify_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-request capacity (`Self`) equals a write plan's capacity (`Buffer`).
    SameWriteReqCapacity, WriteReqCapacity, "write_req_capacity",
    message = "kv-canary: write-request capacity mismatch: the shape derives `{Self}` but the write plan holds `{Buffer}`",
    label = "this write plan was allocated with another write-request capacity",
    note = "allocate plan buffers from the shape you launch with (`shape.write_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-entry capacity (`Self`) equals a per-token input buffer's (`Buffer`).
    SameWriteEntryCapacity, WriteEntryCapacity, "write_entry_capacity",
    message = "kv-canary: write-entry capacity mismatch: the shape derives `{Self}` but the write inputs hold `{Buffer}`",
    label = "these write inputs were allocated with another write-entry capacity",
    note = "allocate write inputs from the shape you launch with (`shape.write_inputs()`), so both come from one expression",
);
