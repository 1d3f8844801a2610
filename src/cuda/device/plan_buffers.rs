//! Device twins of the plan buffers (verify and write plans): allocation from a shape and typed transfers that keep the
//! capacity type (`VerifyPlan<C>` <-> `VerifyPlan<C, Device>`).

use super::gpu::Gpu;
use super::plan_inputs::{DeviceBatch, DeviceValidLens};
use crate::capacity::Capacity;
use crate::cuda::driver::memory as driver;
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::Error;

impl<C: Capacity> VerifyPlan<C, Device> {
    /// A device verify plan of `capacity` entries: arrays zeroed, `verify_num_valid = 0`,
    /// `enable = 1`, like [`VerifyPlan::try_with_capacity`]. Prefer [`Shape::device_verify_plan`].
    pub fn on_device(gpu: &Gpu, capacity: C) -> Result<Self, Error> {
        gpu.make_current()?;
        let n = capacity.get();
        Ok(VerifyPlan {
            capacity,
            slot_indices: driver::zeroed(n)?,
            expected_tokens: driver::zeroed(n)?,
            expected_positions: driver::zeroed(n)?,
            prev_slot_indices: driver::zeroed(n)?,
            num_valid: driver::scalar(0)?,
            enable: driver::scalar(1)?,
            requested: driver::scalar(0)?,
        })
    }

    /// Overwrites every field with `host`'s (a synchronous copy; same capacity type, so the
    /// same lengths).
    pub fn upload(&self, host: &VerifyPlan<C>) -> Result<(), Error> {
        driver::upload(&self.slot_indices, 0, &host.slot_indices)?;
        driver::upload(&self.expected_tokens, 0, &host.expected_tokens)?;
        driver::upload(&self.expected_positions, 0, &host.expected_positions)?;
        driver::upload(&self.prev_slot_indices, 0, &host.prev_slot_indices)?;
        driver::set_scalar(&self.num_valid, host.num_valid)?;
        driver::set_scalar(&self.enable, host.enable)?;
        driver::set_scalar(&self.requested, host.requested)
    }

    /// A host copy (synchronous: waits for the launches queued before it).
    pub fn to_host(&self) -> Result<VerifyPlan<C>, Error> {
        let mut host = VerifyPlan::with_capacity(self.capacity);
        driver::download(&mut host.slot_indices, &self.slot_indices, 0)?;
        driver::download(&mut host.expected_tokens, &self.expected_tokens, 0)?;
        driver::download(&mut host.expected_positions, &self.expected_positions, 0)?;
        driver::download(&mut host.prev_slot_indices, &self.prev_slot_indices, 0)?;
        host.num_valid = driver::get_scalar(&self.num_valid)?;
        host.enable = driver::get_scalar(&self.enable)?;
        host.requested = driver::get_scalar(&self.requested)?;
        Ok(host)
    }
}

impl<C: Capacity> VerifyPlan<C> {
    /// A device copy with the same capacity type.
    pub fn to_device(&self, gpu: &Gpu) -> Result<VerifyPlan<C, Device>, Error> {
        let device = VerifyPlan::on_device(gpu, self.capacity)?;
        device.upload(self)?;
        Ok(device)
    }
}

impl<C: Capacity> WritePlan<C, Device> {
    /// A device write plan for `capacity` requests, zeroed like [`WritePlan::try_with_capacity`].
    /// Prefer [`Shape::device_write_plan`].
    pub fn on_device(gpu: &Gpu, capacity: C) -> Result<Self, Error> {
        gpu.make_current()?;
        let n = capacity.get();
        let len = n.checked_add(1).ok_or(Error::OutOfRange {
            what: "write_req_capacity",
            value: i64::MAX,
            allowed: "[1, usize::MAX - 1]",
        })?;
        Ok(WritePlan {
            capacity,
            offsets: driver::zeroed(len)?,
            seed_slot_indices: driver::zeroed(n)?,
            num_valid_reqs: driver::scalar(0)?,
        })
    }

    /// Overwrites every field with `host`'s (synchronous).
    pub fn upload(&self, host: &WritePlan<C>) -> Result<(), Error> {
        driver::upload(&self.offsets, 0, &host.offsets)?;
        driver::upload(&self.seed_slot_indices, 0, &host.seed_slot_indices)?;
        driver::set_scalar(&self.num_valid_reqs, host.num_valid_reqs)
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<WritePlan<C>, Error> {
        let mut host = WritePlan::with_capacity(self.capacity);
        driver::download(&mut host.offsets, &self.offsets, 0)?;
        driver::download(&mut host.seed_slot_indices, &self.seed_slot_indices, 0)?;
        host.num_valid_reqs = driver::get_scalar(&self.num_valid_reqs)?;
        Ok(host)
    }
}

impl<C: Capacity> WritePlan<C> {
    /// A device copy with the same capacity type.
    pub fn to_device(&self, gpu: &Gpu) -> Result<WritePlan<C, Device>, Error> {
        let device = WritePlan::on_device(gpu, self.capacity)?;
        device.upload(self)?;
        Ok(device)
    }
}

impl<V: Capacity, W: Capacity, E: Capacity> Shape<V, W, E> {
    /// A device verify plan of this shape's verify capacity.
    pub fn device_verify_plan(&self, gpu: &Gpu) -> Result<VerifyPlan<V, Device>, Error> {
        VerifyPlan::on_device(gpu, self.verify_capacity())
    }

    /// A device write plan of this shape's write-request capacity.
    pub fn device_write_plan(&self, gpu: &Gpu) -> Result<WritePlan<W, Device>, Error> {
        WritePlan::on_device(gpu, self.write_req_capacity())
    }

    /// Device batch columns for up to the write-request capacity rows.
    pub fn device_batch(&self, gpu: &Gpu) -> Result<DeviceBatch<W>, Error> {
        DeviceBatch::new(gpu, self.write_req_capacity())
    }

    /// Device expected-token valid lengths for up to the write-request capacity rows.
    pub fn device_valid_lens(&self, gpu: &Gpu) -> Result<DeviceValidLens<W>, Error> {
        DeviceValidLens::new(gpu, self.write_req_capacity())
    }
}
