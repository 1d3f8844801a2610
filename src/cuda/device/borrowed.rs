//! [`Borrowed`]: a device input viewing memory borrowed from the engine for `'a` (a cust
//! `DeviceBuffer`, a crate `DeviceArray` or, with the `cudarc` feature, a cudarc slice), so the
//! memory outlives the view, and whose drop waits until nothing that read it can still run.

use super::gpu::Gpu;
use crate::Error;
use core::marker::PhantomData;
use core::ops::Deref;

/// What a [`Borrowed`] view synchronises when dropped: the context of the memory it views.
pub(crate) enum Fence {
    /// The `Gpu`'s (primary) context: memory of the crate's or cust's allocation.
    Gpu(Gpu),
    /// A cudarc slice's context.
    #[cfg(feature = "cudarc")]
    Cudarc(std::sync::Arc<cudarc::driver::CudaContext>),
}

impl Fence {
    /// Waits for everything queued in the context; an error (a device already lost) leaves
    /// nothing running either.
    fn wait(&self) {
        let _ = match self {
            Fence::Gpu(gpu) => gpu.synchronize().map_err(drop),
            #[cfg(feature = "cudarc")]
            Fence::Cudarc(context) => context.synchronize().map_err(drop),
        };
    }
}

/// A device input viewing memory borrowed for `'a`; dereferences to the input, which is
/// accepted wherever the crate-owned one is. Dropping it synchronises the memory's context, so
/// no launch or graph replay that read the memory can still run when the borrow ends and the
/// memory may be freed (cudarc frees stream-ordered on the slice's own stream, cust's
/// `cuMemFree` at once, neither ordered with the canary's streams). Make views once and keep
/// them: the drop is their only synchronisation.
pub struct Borrowed<'a, T> {
    value: T,
    fence: Fence,
    memory: PhantomData<&'a ()>,
}

impl<T> Borrowed<'_, T> {
    /// `value`, viewing memory whose context `fence` names.
    pub(crate) fn new(value: T, fence: Fence) -> Self {
        Borrowed {
            value,
            fence,
            memory: PhantomData,
        }
    }
}

impl<T> Deref for Borrowed<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for Borrowed<'_, T> {
    fn drop(&mut self) {
        // Nothing that read the borrowed memory may still run once the borrow ends.
        self.fence.wait();
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for Borrowed<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Borrowed").field(&self.value).finish()
    }
}

/// `Ok` when the borrowed memory holds at least `needed` elements (it holds `len`); else
/// [`Error::LengthMismatch`] naming both.
pub(crate) fn at_least(what: &'static str, len: usize, needed: usize) -> Result<(), Error> {
    if len < needed {
        return Err(Error::LengthMismatch {
            what,
            expected: needed,
            found: len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_shorter_than_the_view_is_refused_naming_both_lengths() {
        assert_eq!(at_least("input_ids", 64, 64), Ok(()));
        let e = at_least("input_ids", 63, 64).unwrap_err();
        assert_eq!(
            e,
            Error::LengthMismatch {
                what: "input_ids",
                expected: 64,
                found: 63
            }
        );
    }
}
