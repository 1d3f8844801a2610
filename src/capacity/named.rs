//! Named run-time capacities: numbers read from the engine's configuration at start-up, named
//! by a type of the engine's, so that an engine struct can hold a canary of run-time capacities
//! and still get a compile error when buffers of two configurations meet.
//!
//! Why named and not branded, the engine-struct example, and how shapes of one name compare: on
//! [`NamedShape`](crate::NamedShape), where the rendered docs show them.

use super::{Capacity, Sealed};
use core::fmt;
use core::marker::PhantomData;

macro_rules! named_capacity {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// `T` is the engine's marker type naming the configuration; it is never stored, so the
        /// capacity is `Copy`, `Send` and `Sync` whatever `T` is.
        pub struct $name<T> {
            value: usize,
            name: PhantomData<fn() -> T>,
        }

        impl<T> $name<T> {
            /// Only a named shape mints these, after checking `value > 0`.
            pub(crate) fn mint(value: usize) -> Self {
                debug_assert!(value > 0);
                Self {
                    value,
                    name: PhantomData,
                }
            }
        }

        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<T> Copy for $name<T> {}

        impl<T> PartialEq for $name<T> {
            fn eq(&self, other: &Self) -> bool {
                self.value == other.value
            }
        }

        impl<T> Eq for $name<T> {}

        impl<T> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let name = core::any::type_name::<T>();
                let short = name.rsplit("::").next().unwrap_or(name);
                write!(f, concat!(stringify!($name), "<{}>({})"), short, self.value)
            }
        }

        impl<T> Sealed for $name<T> {}
        impl<T> Capacity for $name<T> {
            #[inline]
            fn get(self) -> usize {
                self.value
            }
        }
    };
}

named_capacity!(
    /// The verify capacity of the configuration named `T`, read at run time.
    NamedVerifyCapacity
);
named_capacity!(
    /// The write-request capacity of the configuration named `T`, read at run time.
    NamedWriteReqCapacity
);
named_capacity!(
    /// The write-entry capacity of the configuration named `T`, read at run time.
    NamedWriteEntryCapacity
);
