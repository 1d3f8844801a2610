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
//!
//! [`TypenumCap<T>`] (a derived capacity of 1024 or more) cannot be compared with `Cap<N>` by
//! the type checker on stable Rust, so every pair of static capacities of which one is a
//! `TypenumCap` has an impl, and its `check` evaluates a constant that compares the two numbers:
//! a mismatch fails `cargo build` with a message formatted from both numbers in decimal
//! (`kv-canary: verify capacity mismatch: the shape derives 1500 but the verify plan holds 1499`).
//! These impls carry `do_not_recommend`, so the type-level errors above keep their one-line hint.

use super::{
    check_equal, Cap, Capacity, NamedVerifyCapacity, NamedWriteEntryCapacity,
    NamedWriteReqCapacity, StaticCapacity, TypenumCap, UncheckedCapacity, VerifyCapacity,
    WriteEntryCapacity, WriteReqCapacity,
};
use crate::Error;
use core::fmt;
use core::marker::PhantomData;
use typenum::{NonZero, Unsigned};

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

/// A compile-time message of at most 256 bytes, built from text and numbers (`core::fmt` is not
/// available in constants; a crate such as `const_format` cannot format the associated constants
/// of generic parameters, which is what the numbers here are).
struct ConstMessage {
    bytes: [u8; 256],
    len: usize,
}

impl ConstMessage {
    const fn new() -> Self {
        ConstMessage {
            bytes: [0; 256],
            len: 0,
        }
    }

    /// Appends `text` (truncated at the buffer's end).
    const fn text(mut self, text: &str) -> Self {
        let text = text.as_bytes();
        let mut i = 0;
        while i < text.len() && self.len < self.bytes.len() {
            self.bytes[self.len] = text[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// Appends `n` in decimal.
    const fn number(mut self, mut n: usize) -> Self {
        let mut digits = [0u8; 20];
        let mut count = 0;
        loop {
            digits[count] = b'0' + (n % 10) as u8;
            count += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        while count > 0 && self.len < self.bytes.len() {
            count -= 1;
            self.bytes[self.len] = digits[count];
            self.len += 1;
        }
        self
    }

    const fn as_str(&self) -> &str {
        let (text, _) = self.bytes.split_at(self.len);
        match core::str::from_utf8(text) {
            Ok(text) => text,
            // Only ASCII is ever written.
            Err(_) => "kv-canary: capacity mismatch",
        }
    }
}

/// Fails the build unless two static capacities hold the same number; the message is pieced
/// together like the type-level ones: `what` (`"verify capacity"`), the shape's number,
/// `buffer_holds` (`"the verify plan holds"`), the buffer's number, and a `note`.
const fn assert_same_number(
    what: &str,
    shape: usize,
    buffer_holds: &str,
    buffer: usize,
    note: &str,
) {
    if shape != buffer {
        let message = ConstMessage::new()
            .text("kv-canary: ")
            .text(what)
            .text(" mismatch: the shape derives ")
            .number(shape)
            .text(" but ")
            .text(buffer_holds)
            .text(" ")
            .number(buffer)
            .text("; ")
            .text(note);
        panic!("{}", message.as_str());
    }
}

macro_rules! same_capacity_trait {
    (
        $(#[$doc:meta])*
        $name:ident, $branded:ident, $named:ident, $what:literal,
        $same_number:ident, $kind:literal, $buffer_holds:literal, $short_note:literal,
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

        /// Evaluating `HOLDS` fails the build unless `S` and `B` are the same number.
        struct $same_number<S, B>(PhantomData<(S, B)>);

        impl<S: StaticCapacity, B: StaticCapacity> $same_number<S, B> {
            const HOLDS: () =
                assert_same_number($kind, S::NUMBER, $buffer_holds, B::NUMBER, $short_note);
        }

        #[diagnostic::do_not_recommend]
        impl<const N: usize, T: Unsigned + NonZero> $name<TypenumCap<T>> for Cap<N> {
            #[inline]
            fn check(self, _: TypenumCap<T>) -> Result<(), Error> {
                let () = $same_number::<Self, TypenumCap<T>>::HOLDS;
                Ok(())
            }
        }

        #[diagnostic::do_not_recommend]
        impl<T: Unsigned + NonZero, const N: usize> $name<Cap<N>> for TypenumCap<T> {
            #[inline]
            fn check(self, _: Cap<N>) -> Result<(), Error> {
                let () = $same_number::<Self, Cap<N>>::HOLDS;
                Ok(())
            }
        }

        #[diagnostic::do_not_recommend]
        impl<T: Unsigned + NonZero, U: Unsigned + NonZero> $name<TypenumCap<U>> for TypenumCap<T> {
            #[inline]
            fn check(self, _: TypenumCap<U>) -> Result<(), Error> {
                let () = $same_number::<Self, TypenumCap<U>>::HOLDS;
                Ok(())
            }
        }
    };
}

same_capacity_trait!(
    /// The shape's verify capacity (`Self`) equals a verify plan's capacity (`Buffer`).
    SameVerifyCapacity, VerifyCapacity, NamedVerifyCapacity, "verify_capacity",
    SameVerifyNumber, "verify capacity", "the verify plan holds",
    "allocate plan buffers from the shape you launch with (`shape.verify_plan()`)",
    message = "kv-canary: verify capacity mismatch: the shape derives `{Self}` but the verify plan holds `{Buffer}`",
    label = "the shape's verify capacity is `{Self}`, the verify plan's `{Buffer}`",
    note = "allocate plan buffers from the shape you launch with (`shape.verify_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-request capacity (`Self`) equals a write plan's capacity (`Buffer`).
    SameWriteReqCapacity, WriteReqCapacity, NamedWriteReqCapacity, "write_req_capacity",
    SameWriteReqNumber, "write-request capacity", "the write plan holds",
    "allocate plan buffers from the shape you launch with (`shape.write_plan()`)",
    message = "kv-canary: write-request capacity mismatch: the shape derives `{Self}` but the write plan holds `{Buffer}`",
    label = "the shape's write-request capacity is `{Self}`, the write plan's `{Buffer}`",
    note = "allocate plan buffers from the shape you launch with (`shape.write_plan()`), so both come from one expression",
);

same_capacity_trait!(
    /// The shape's write-entry capacity (`Self`) equals a per-token input buffer's (`Buffer`).
    SameWriteEntryCapacity, WriteEntryCapacity, NamedWriteEntryCapacity, "write_entry_capacity",
    SameWriteEntryNumber, "write-entry capacity", "the write inputs hold",
    "allocate write inputs from the shape you launch with (`shape.write_inputs()`), or make the views of the engine's buffers with its write-entry capacity",
    message = "kv-canary: write-entry capacity mismatch: the shape derives `{Self}` but the write inputs hold `{Buffer}`",
    label = "the shape's write-entry capacity is `{Self}`, the write inputs' `{Buffer}`",
    note = "allocate write inputs from the shape you launch with (`shape.write_inputs()`), or make the views of the engine's buffers with its write-entry capacity, so both come from one expression",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_time_messages_name_both_numbers_in_decimal() {
        let message = ConstMessage::new()
            .text("kv-canary: verify capacity mismatch: the shape derives ")
            .number(1500)
            .text(" but the verify plan holds ")
            .number(1_099_511_627_775)
            .text(", ")
            .number(0);
        assert_eq!(
            message.as_str(),
            "kv-canary: verify capacity mismatch: the shape derives 1500 but the verify plan \
             holds 1099511627775, 0"
        );
        let full = ConstMessage::new().text(&"x".repeat(300)).number(7);
        assert_eq!(full.as_str().len(), 256);
    }
}
