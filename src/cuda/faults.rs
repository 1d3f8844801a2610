//! Fault injection into device memory (features `cuda` and `faults`): the
//! [`FaultMemory`] of the crate's [`DeviceArray`]s, cust `DeviceBuffer`s and (feature `cudarc`)
//! cudarc `CudaSlice`s, so that [`FaultInjector`](crate::guard::faults::FaultInjector)'s hooks
//! corrupt an engine's device KV cache or block table as they corrupt host memory. Each hook
//! reads the one element it corrupts and writes it back, synchronously (two copies, counted in
//! [`transfers_issued`](super::transfers_issued)); the engine calls it where no kernel of its
//! own is using that memory (between its steps), as it would any host write of it.

use super::driver::array::{DeviceArray, ViewableSlice};
use super::driver::memory as driver;
use crate::guard::faults::FaultMemory;
use crate::memory::Element;
use cust::memory::DeviceBuffer;

/// Element `at` of `memory` replaced with `corrupt` of it (download, then upload; both
/// synchronous and range-checked).
fn modify_on_device<T: Element, B: ViewableSlice<T> + ?Sized>(
    memory: &B,
    at: usize,
    corrupt: &dyn Fn(T) -> T,
) -> Option<()> {
    let mut cell = [T::default()];
    driver::download(&mut cell, memory, at).ok()?;
    driver::upload(memory, at, &[corrupt(cell[0])]).ok()
}

impl<T: Element> FaultMemory<T> for DeviceArray<T> {
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()> {
        modify_on_device(self, at, corrupt)
    }
}

impl<T: Element> FaultMemory<T> for DeviceBuffer<T> {
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()> {
        modify_on_device(self, at, corrupt)
    }
}

#[cfg(feature = "cudarc")]
impl<T: Element + cudarc::driver::DeviceRepr> FaultMemory<T> for cudarc::driver::CudaSlice<T> {
    fn modify(&mut self, at: usize, corrupt: &dyn Fn(T) -> T) -> Option<()> {
        if at >= self.len() {
            return None;
        }
        let stream = std::sync::Arc::clone(self.stream());
        let mut cell = [T::default()];
        stream
            .memcpy_dtoh(&self.slice(at..at + 1), &mut cell)
            .ok()?;
        stream.synchronize().ok()?;
        let value = [corrupt(cell[0])];
        stream
            .memcpy_htod(&value, &mut self.slice_mut(at..at + 1))
            .ok()?;
        stream.synchronize().ok()
    }
}
