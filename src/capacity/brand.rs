//! Branded run-time capacities: numbers read at start-up whose mismatch is a compile error.
//!
//! [`Shape::branded`](crate::Shape::branded) runs a closure that is generic over a fresh lifetime
//! `'id` (`for<'id> FnOnce(Shape<VerifyCapacity<'id>, ..>) -> R`). Each call invents a new `'id`
//! that cannot be named outside the closure and cannot unify with any other, so buffers allocated
//! from one branded shape are rejected by launches of another, even though both capacities were
//! computed at run time. The technique is the one of bluss's `indexing` crate and GhostCell.

use super::{Capacity, Sealed};
use core::fmt;
use core::marker::PhantomData;

/// The invariant lifetime brand shared by every capacity of one branded shape.
///
/// `fn(&'id ()) -> &'id ()` makes `'id` invariant: the compiler can neither shorten nor lengthen
/// it, so two brands are equal only when they come from the same closure call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Brand<'id>(PhantomData<fn(&'id ()) -> &'id ()>);

impl Brand<'_> {
    pub(crate) fn new() -> Self {
        Brand(PhantomData)
    }
}

impl fmt::Debug for Brand<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Brand")
    }
}

macro_rules! branded_capacity {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name<'id> {
            value: usize,
            brand: Brand<'id>,
        }

        impl<'id> $name<'id> {
            /// Only a branded shape mints these, after checking `value > 0`.
            pub(crate) fn mint(value: usize, brand: Brand<'id>) -> Self {
                debug_assert!(value > 0);
                Self { value, brand }
            }

            /// The brand this capacity belongs to.
            pub fn brand(self) -> Brand<'id> {
                self.brand
            }
        }

        impl fmt::Debug for $name<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.value)
            }
        }

        impl Sealed for $name<'_> {}
        impl Capacity for $name<'_> {
            #[inline]
            fn get(self) -> usize {
                self.value
            }
        }
    };
}

branded_capacity!(
    /// The verify capacity of one branded shape: the length of its `VerifyPlan` entry arrays.
    VerifyCapacity
);
branded_capacity!(
    /// The write-request capacity of one branded shape: the most batch rows one plan may hold.
    WriteReqCapacity
);
branded_capacity!(
    /// The write-entry capacity of one branded shape: the most tokens one write may stamp.
    WriteEntryCapacity
);
