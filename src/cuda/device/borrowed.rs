//! Safe views of the engine's device memory: [`Borrowed`], a device input viewing memory
//! borrowed for `'a` (a cust `DeviceBuffer`, a crate `DeviceArray` or, with the `cudarc`
//! feature, a cudarc slice), so the memory outlives the view; and [`Shared`], one keeping `Arc`s
//! of the buffers it views, so it can live in an engine's struct or a stored graph's inputs.
//! Dropping either waits until nothing that read the memory can still run.

use super::gpu::Gpu;
use super::rebind::Rebind;
use crate::capacity::Capacity;
use crate::Error;
use core::marker::PhantomData;
use core::ops::Deref;
use std::sync::Arc;

/// What a [`Borrowed`] view synchronises when dropped: the context of the memory it views.
#[derive(Clone)]
pub(crate) enum Fence {
    /// The `Gpu`'s (primary) context: memory of the crate's or cust's allocation.
    Gpu(Gpu),
    /// A cudarc slice's context.
    #[cfg(feature = "cudarc")]
    Cudarc(std::sync::Arc<cudarc::driver::CudaContext>),
}

impl Fence {
    /// Makes the memory's context current on this thread.
    fn make_current(&self) -> Result<(), Error> {
        match self {
            Fence::Gpu(gpu) => gpu.make_current(),
            #[cfg(feature = "cudarc")]
            Fence::Cudarc(context) => Ok(context.bind_to_thread()?),
        }
    }

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

impl<'a, T> Borrowed<'a, T> {
    /// A view made from this one's value by `derive` (more views of memory borrowed for `'a`
    /// in the same context), fenced as this one: dropping either synchronises the context.
    pub(crate) fn derive<U>(
        &self,
        derive: impl FnOnce(&T) -> Result<U, Error>,
    ) -> Result<Borrowed<'a, U>, Error> {
        self.fence.make_current()?;
        Ok(Borrowed {
            value: derive(&self.value)?,
            fence: self.fence.clone(),
            memory: PhantomData,
        })
    }
}

impl<'a, T: Rebind> Borrowed<'a, T> {
    /// The same view with capacity `capacity`, over the same borrowed memory: for the steps
    /// after a reshape changed the capacity of the canary's shape (the old view's capacity no
    /// longer matches). Each array is checked against the buffer it was made from: one too
    /// short for `capacity` is [`Error::DeviceView`] naming it, the buffer's length and the
    /// asked-for length, and nothing changes. A `bs` (or count) of the view's own is a new one,
    /// 0, as for a view made anew; the engine's is viewed again. Nothing is copied and nothing
    /// synchronised (dropping the old view still synchronises, once).
    pub fn rebind<C: Capacity>(&self, capacity: C) -> Result<Borrowed<'a, T::With<C>>, Error> {
        self.fence.make_current()?;
        Ok(Borrowed {
            value: self.value.rebound(capacity)?,
            fence: self.fence.clone(),
            memory: PhantomData,
        })
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

/// A device input viewing buffers it keeps alive (`Arc`s of the engine's cust buffers or crate
/// arrays); dereferences to the input, which is accepted wherever the crate-owned one is. It
/// borrows nothing, so an engine stores it in its own struct, or in a
/// [`StepGraph`](crate::cuda::StepGraph)'s inputs, beside nothing else; the buffers stay
/// allocated while it lives, and the engine writes them through the view (`upload_on`) or with
/// its own kernels. Dropping it synchronises the `Gpu`'s context first, so no launch or graph
/// replay that read the buffers still runs when their last `Arc` goes: one synchronisation, at
/// the end of the view's life (make views once and keep them).
pub struct Shared<T> {
    value: T,
    fence: Fence,
    /// Released after the fence has waited (fields drop after `Drop::drop`).
    buffers: Vec<Arc<dyn Send + Sync>>,
}

impl<T> Shared<T> {
    /// `value`, viewing `buffers`, whose context `fence` names.
    pub(crate) fn new(value: T, fence: Fence, buffers: Vec<Arc<dyn Send + Sync>>) -> Self {
        Shared {
            value,
            fence,
            buffers,
        }
    }
}

impl<T> Shared<T> {
    /// A view made from this one's value by `derive` (more views, of `more`, in the same
    /// context), keeping this one's buffers and `more` alive, fenced as this one.
    pub(crate) fn derive<U>(
        &self,
        more: Vec<Arc<dyn Send + Sync>>,
        derive: impl FnOnce(&T) -> Result<U, Error>,
    ) -> Result<Shared<U>, Error> {
        self.fence.make_current()?;
        Ok(Shared {
            value: derive(&self.value)?,
            fence: self.fence.clone(),
            buffers: self.buffers.iter().cloned().chain(more).collect(),
        })
    }
}

impl<T: Rebind> Shared<T> {
    /// [`Borrowed::rebind`] of a view that keeps its buffers alive: the new view keeps them
    /// too (the same `Arc`s), so the old one can be dropped (its drop synchronises, once) or
    /// kept for steps still queued.
    pub fn rebind<C: Capacity>(&self, capacity: C) -> Result<Shared<T::With<C>>, Error> {
        self.fence.make_current()?;
        Ok(Shared {
            value: self.value.rebound(capacity)?,
            fence: self.fence.clone(),
            buffers: self.buffers.clone(),
        })
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Nothing that read the buffers may still run once their last handle may go.
        self.fence.wait();
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shared")
            .field("value", &self.value)
            .field("buffers", &self.buffers.len())
            .finish()
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
