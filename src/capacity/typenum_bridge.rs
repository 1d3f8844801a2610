//! The [`ToCap`] impls of typenum numbers: every positive number has one.
//!
//! typenum writes a number as its bits, least significant outermost:
//! 6 = `UInt<UInt<UInt<UTerm, B1>, B1>, B0>`. The numbers of at most 10 bits (1 to 1023) get one
//! impl each, mapping to the decimal [`Cap<N>`]: a macro builds every bit pattern from the
//! leading `B1` down, doubling the list and the number at each bit, so nothing is generated into
//! the source tree and nothing depends on typenum's list of named constants. One more impl takes
//! every number of 11 bits or more (1024 and up) to [`TypenumCap<T>`], which is compared by value.
//! The two sets cannot overlap: a number of at most 10 bits has `UTerm` where the second impl
//! has an eleventh `UInt`. Both carry `do_not_recommend`, so an error about a number without an
//! impl (zero) does not list a thousand bit patterns.
//!
//! Measured with rustc 1.95 in a scratch crate on the shared 2-core build machine: 1,023 such
//! impls build in 0.9 s, 2,047 (11 bits) in 2.6 s and 4,095 in 8 s (the cost grows with the
//! square), which is why the written-out range stops at 10 bits.

use super::{Cap, ToCap, TypenumCap};
use typenum::{NonZero, UInt, UTerm, Unsigned, B0, B1};

/// Writes one `ToCap` impl per `[type number]` pair of the list, then recurses with every pair
/// extended by one more bit, once per `_` left in the second list.
macro_rules! numbers_up_to_bits {
    (@impls $([($($t:tt)*) $n:tt])*) => {
        $(
            #[diagnostic::do_not_recommend]
            impl ToCap for $($t)* {
                type Cap = Cap<$n>;
            }
            // The test build checks every impl against typenum's own value of the type.
            #[cfg(test)]
            const _: () = assert!(<$($t)* as Unsigned>::USIZE == $n);
        )*
    };
    ([$($pair:tt)*] []) => {
        numbers_up_to_bits!(@impls $($pair)*);
    };
    ([$([($($t:tt)*) $n:tt])*] [_ $($more:tt)*]) => {
        numbers_up_to_bits!(@impls $([($($t)*) $n])*);
        numbers_up_to_bits!(
            [$([(UInt<$($t)*, B0>) { 2 * $n }] [(UInt<$($t)*, B1>) { 2 * $n + 1 }])*]
            [$($more)*]
        );
    };
}

// 1 (one bit), then nine more bits: every number from 1 to 2^10 - 1.
numbers_up_to_bits!([[(UInt<UTerm, B1>) 1]] [_ _ _ _ _ _ _ _ _]);

/// Every number of 11 bits or more: eleven `UInt` levels (the low eleven bits) around the rest.
#[diagnostic::do_not_recommend]
impl<X, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1_, B0_> ToCap
    for UInt<
        UInt<
            UInt<
                UInt<UInt<UInt<UInt<UInt<UInt<UInt<UInt<X, B10>, B9>, B8>, B7>, B6>, B5>, B4>, B3>,
                B2,
            >,
            B1_,
        >,
        B0_,
    >
where
    Self: Unsigned + NonZero,
{
    type Cap = TypenumCap<Self>;
}
