//! The device layer: the [`Gpu`](gpu::Gpu) handle, its kernel tuning, streams and graphs, and
//! the device twins of the host buffers and settings. Imports the driver and ABI layers below.

pub(crate) mod borrowed;
pub(crate) mod buffer_views;
pub(crate) mod canary_state;
#[cfg(feature = "cudarc")]
pub(crate) mod cudarc_views;
pub(crate) mod custom_module;
pub(crate) mod gpu;
pub(crate) mod plan_buffers;
pub(crate) mod plan_inputs;
pub(crate) mod readbacks;
pub(crate) mod rebind;
pub(crate) mod settings;
pub(crate) mod stream;
pub(crate) mod sub_slice;
pub(crate) mod tuning;
pub(crate) mod write_inputs;

/// Device buffers are `Send` and `Sync` as cust's `DeviceBuffer` and `DeviceBox` are: Rust never
/// borrows their memory (every access is a driver call or a kernel, ordered on streams), and each
/// transfer makes the buffer's own context current. Pinned for every buffer type of the backend.
mod thread_safety {
    use super::plan_inputs::{DeviceBatch, DeviceLut, DeviceReqToToken, DeviceValidLens};
    use super::settings::{DeviceRealKv, DeviceSettings};
    use crate::canary::{CanaryBuffer, HealthCounters, ViolationRing};
    use crate::capacity::Cap;
    use crate::cuda::driver::array::{DeviceArray, DeviceScalar};
    use crate::input::{InputAssertOff, WriteInputs};
    use crate::memory::Device;
    use crate::plan::{VerifyPlan, WritePlan};
    use static_assertions::assert_impl_all;

    assert_impl_all!(DeviceArray<u8>: Send, Sync);
    assert_impl_all!(DeviceScalar<i32>: Send, Sync);
    assert_impl_all!(VerifyPlan<Cap<8>, Device>: Send, Sync);
    assert_impl_all!(WritePlan<Cap<8>, Device>: Send, Sync);
    assert_impl_all!(CanaryBuffer<Cap<8>, Device>: Send, Sync);
    assert_impl_all!(ViolationRing<Cap<8>, Device>: Send, Sync);
    assert_impl_all!(HealthCounters<Device>: Send, Sync);
    assert_impl_all!(WriteInputs<Cap<8>, InputAssertOff, Device>: Send, Sync);
    assert_impl_all!(DeviceBatch<Cap<8>>: Send, Sync);
    assert_impl_all!(DeviceReqToToken: Send, Sync);
    assert_impl_all!(DeviceLut: Send, Sync);
    assert_impl_all!(DeviceValidLens<Cap<8>>: Send, Sync);
    assert_impl_all!(DeviceRealKv<'static>: Send, Sync);
    assert_impl_all!(DeviceSettings<'static>: Send, Sync);
}
