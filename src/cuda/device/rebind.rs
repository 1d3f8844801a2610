//! [`Rebind`]: the device inputs whose capacity is in their type (the batch columns, the valid
//! lengths, the write inputs), made again over the same engine memory with another capacity,
//! for the steps after a [`Canary::reshape`](crate::step::Canary::reshape) or
//! [`try_reshape`](crate::step::Canary::try_reshape): [`Shared::rebind`] and
//! [`Borrowed::rebind`].

use super::plan_inputs::{DeviceBatch, DeviceValidLens};
use crate::capacity::Capacity;
use crate::input::{InputAssertOff, WriteInputs};
use crate::memory::Device;
use crate::Error;

mod sealed {
    pub trait Sealed {}
}

/// A device input whose capacity is part of its type, so that a view of it can be rebound to
/// another capacity over the same engine buffers ([`Shared::rebind`](crate::cuda::Shared::rebind),
/// [`Borrowed::rebind`](crate::cuda::Borrowed::rebind)): [`DeviceBatch`] (`W`), [`DeviceValidLens`]
/// (`W`) and the device [`WriteInputs`] (`E`). Sealed.
pub trait Rebind: sealed::Sealed {
    /// The same input with capacity `C`.
    type With<C: Capacity>;

    /// The views again with capacity `capacity`: each array of the engine's checked against
    /// the buffer its safe constructor was given (a view made by an `unsafe` `from_raw`
    /// knows only its own length, so it can shrink but not grow); a count or `bs` of the
    /// view's own is a new one, 0. The context of the memory must be current.
    #[doc(hidden)]
    fn rebound<C: Capacity>(&self, capacity: C) -> Result<Self::With<C>, Error>;
}

impl<W: Capacity> sealed::Sealed for DeviceBatch<W> {}
impl<W: Capacity> Rebind for DeviceBatch<W> {
    type With<C: Capacity> = DeviceBatch<C>;
    fn rebound<C: Capacity>(&self, capacity: C) -> Result<DeviceBatch<C>, Error> {
        DeviceBatch::rebound(self, capacity)
    }
}

impl<W: Capacity> sealed::Sealed for DeviceValidLens<W> {}
impl<W: Capacity> Rebind for DeviceValidLens<W> {
    type With<C: Capacity> = DeviceValidLens<C>;
    fn rebound<C: Capacity>(&self, capacity: C) -> Result<DeviceValidLens<C>, Error> {
        DeviceValidLens::rebound(self, capacity)
    }
}

impl<E: Capacity> sealed::Sealed for WriteInputs<E, InputAssertOff, Device> {}
impl<E: Capacity> Rebind for WriteInputs<E, InputAssertOff, Device> {
    type With<C: Capacity> = WriteInputs<C, InputAssertOff, Device>;
    fn rebound<C: Capacity>(&self, capacity: C) -> Result<Self::With<C>, Error> {
        WriteInputs::rebound(self, capacity)
    }
}
