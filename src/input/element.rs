//! [`IndexElement`]: the integer types an engine keeps its host index arrays in (`i32`, `i64`,
//! `u32`, `u64`, `usize`), so that views over its own slices need no casts.
//!
//! The ops compute in `i64` (spec §3, §4). A view converts each element when the op reads it:
//! `i32`, `i64` and `u32` always fit; a `u64` or `usize` element past `i64::MAX` is
//! [`Error::ElementOutOfRange`] naming the array, the index and the value, returned before the
//! op modifies anything.

use crate::Error;
use core::fmt::Debug;

mod sealed {
    pub trait Sealed {}
}

/// An integer type a host view may hold: `i32`, `i64`, `u32`, `u64` or `usize`. Sealed.
pub trait IndexElement: Copy + Ord + Debug + Send + Sync + 'static + sealed::Sealed {
    /// The type's name in errors.
    const NAME: &'static str;
    /// Whether every value of the type fits in `i64` (`i32`, `i64`, `u32`): the ops then skip
    /// the conversion checks.
    const FITS_I64: bool;
    /// The smallest value (the seed of a maximum).
    const MIN: Self;
    /// The value as `i64`, if it fits.
    fn to_i64(self) -> Option<i64>;
    /// The value as `i64`, exact for every value [`to_i64`](IndexElement::to_i64) accepts
    /// (others wrap; the ops convert only checked values this way).
    fn as_i64(self) -> i64;
    /// The value, exactly, for error messages.
    fn wide(self) -> i128;
}

macro_rules! lossless {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl IndexElement for $t {
            const NAME: &'static str = stringify!($t);
            const FITS_I64: bool = true;
            const MIN: Self = <$t>::MIN;
            #[inline(always)]
            fn to_i64(self) -> Option<i64> {
                Some(i64::from(self))
            }
            #[inline(always)]
            fn as_i64(self) -> i64 {
                i64::from(self)
            }
            fn wide(self) -> i128 {
                i128::from(self)
            }
        }
    )*};
}
lossless!(i32, i64, u32);

macro_rules! narrowing {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl IndexElement for $t {
            const NAME: &'static str = stringify!($t);
            const FITS_I64: bool = false;
            const MIN: Self = <$t>::MIN;
            #[inline(always)]
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
            #[inline(always)]
            fn as_i64(self) -> i64 {
                self as i64
            }
            fn wide(self) -> i128 {
                self as i128
            }
        }
    )*};
}
narrowing!(u64, usize);

/// Element `index` of the array `what`, as the `i64` the ops compute with; a value past
/// `i64::MAX` is [`Error::ElementOutOfRange`] naming it.
#[inline(always)]
pub(crate) fn read_i64<T: IndexElement>(
    what: &'static str,
    index: usize,
    value: T,
) -> Result<i64, Error> {
    match value.to_i64() {
        Some(v) => Ok(v),
        None => Err(out_of_range(what, index, value)),
    }
}

/// The error of an element past `i64::MAX`; out of line, so the ops' loops stay small.
#[cold]
#[inline(never)]
fn out_of_range<T: IndexElement>(what: &'static str, index: usize, value: T) -> Error {
    Error::ElementOutOfRange {
        what,
        index,
        value: value.wide(),
        element: T::NAME,
    }
}

/// Checks that every element of `values` (elements `first..` of the array `what`) fits in
/// `i64`; free for the types that always fit.
#[inline]
pub(crate) fn check_fits<T: IndexElement>(
    what: &'static str,
    first: usize,
    values: &[T],
) -> Result<(), Error> {
    if T::FITS_I64 {
        return Ok(());
    }
    match values.iter().position(|v| v.to_i64().is_none()) {
        None => Ok(()),
        Some(i) => read_i64(what, first + i, values[i]).map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_i64_are_named() {
        assert_eq!(read_i64("positions", 3, 7u64), Ok(7));
        assert_eq!(read_i64("positions", 3, -7i32), Ok(-7));
        assert_eq!(read_i64("positions", 3, u32::MAX), Ok(i64::from(u32::MAX)));
        let err = read_i64("out_cache_loc", 2, u64::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc[2] = 18446744073709551615 (u64) is past i64::MAX, the largest value the ops read"
        );
        assert!(read_i64("x", 0, usize::MAX).is_err());
        assert_eq!(
            check_fits("x", 10, &[1u64, 1 << 63]),
            Err(Error::ElementOutOfRange {
                what: "x",
                index: 11,
                value: 1 << 63,
                element: "u64"
            })
        );
        assert_eq!(check_fits("x", 0, &[i64::MIN]), Ok(()));
    }
}
