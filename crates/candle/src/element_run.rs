//! [`ElementRun`]: where a tensor's elements lie as elements of another type (the checks of
//! `TensorMemory`, without a device).

use std::fmt;

/// A tensor's memory as a run of `T`: its byte offset from the storage's start and its length
/// in `T`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementRun {
    /// Bytes from the storage's first element to the tensor's.
    pub offset: usize,
    /// Elements of `T`.
    pub len: usize,
}

/// A tensor's memory that is not a whole, aligned run of the wanted elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotARun {
    /// Bytes from the storage's start (`None`: past `usize`).
    pub offset: Option<usize>,
    /// The tensor's bytes (`None`: past `usize`).
    pub bytes: Option<usize>,
    /// The wanted element's size.
    pub size: usize,
    /// The wanted element's alignment.
    pub align: usize,
}

impl fmt::Display for NotARun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show =
            |v: Option<usize>| v.map_or("more than usize::MAX".to_owned(), |v| v.to_string());
        write!(
            f,
            "kv-canary: a tensor of {} bytes at byte offset {} is not a whole run of {}-byte \
             elements aligned to {} bytes",
            show(self.bytes),
            show(self.offset),
            self.size,
            self.align
        )
    }
}

impl std::error::Error for NotARun {}

impl ElementRun {
    /// The run of `T`s of a tensor of `count` elements of `E` starting `start` elements into
    /// its storage: whole (its bytes a multiple of `T`'s size, `T` not zero-sized) and aligned
    /// (its byte offset a multiple of `T`'s alignment), else [`NotARun`] naming the numbers.
    pub fn of<E, T>(start: usize, count: usize) -> Result<Self, NotARun> {
        let (e, size, align) = (
            std::mem::size_of::<E>(),
            std::mem::size_of::<T>(),
            std::mem::align_of::<T>(),
        );
        let (offset, bytes) = (start.checked_mul(e), count.checked_mul(e));
        match (offset, bytes) {
            (Some(offset), Some(bytes)) if size > 0 && bytes % size == 0 && offset % align == 0 => {
                Ok(ElementRun {
                    offset,
                    len: bytes / size,
                })
            }
            _ => Err(NotARun {
                offset,
                bytes,
                size,
                align,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ElementRun, NotARun};

    #[test]
    fn whole_aligned_runs_and_the_rest_named() {
        // A bf16 KV cache as bytes; u32 tables as i32; i64 as two u32.
        assert_eq!(
            ElementRun::of::<u16, u8>(3, 10),
            Ok(ElementRun { offset: 6, len: 20 })
        );
        assert_eq!(
            ElementRun::of::<u32, i32>(5, 7),
            Ok(ElementRun { offset: 20, len: 7 })
        );
        assert_eq!(
            ElementRun::of::<i64, u32>(1, 3),
            Ok(ElementRun { offset: 8, len: 6 })
        );
        // Three bf16 are not whole u32s; a bf16 at an odd element offset is not u32-aligned.
        let ragged = ElementRun::of::<u16, u32>(0, 3).unwrap_err();
        assert_eq!((ragged.bytes, ragged.size), (Some(6), 4));
        assert!(
            ragged.to_string().starts_with("kv-canary:") && ragged.to_string().contains("6 bytes")
        );
        let misaligned = ElementRun::of::<u16, u32>(1, 2).unwrap_err();
        assert!(misaligned.to_string().contains("offset 2"), "{misaligned}");
        // Sizes past usize and zero-sized elements are refused, not wrapped or divided by.
        let huge: NotARun = ElementRun::of::<u64, u8>(usize::MAX / 4, 1).unwrap_err();
        assert!(huge.to_string().contains("more than usize::MAX"), "{huge}");
        assert!(ElementRun::of::<u8, ()>(0, 4).is_err());
    }
}
