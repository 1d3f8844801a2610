//! KV that moves keeps its canary, on the device: the twins of the host canary's
//! [`export_records`](crate::step::Canary::export_records),
//! [`import_records`](crate::step::Canary::import_records) and
//! [`copy_records`](crate::step::Canary::copy_records) for a canary on a [`Stream`].
//!
//! Each first waits for the canary's stream (every step and sweep queued before it has run, so
//! the records are the ones those launches left), then copies the slots' records between the
//! device buffers and the host, one copy a run of consecutive slots a buffer (a block's slots
//! are one run). An import reads each run, replaces its records and writes it back, so the bytes
//! of a slot past its 32-byte record (a stride above 32) stay as they were. The records are the
//! host canary's, byte for byte: records exported on one backend import on the other.

use super::device::stream::Stream;
use super::driver::memory as driver;
use crate::canary::{CanaryBuffer, CanarySlot};
use crate::capacity::Capacity;
use crate::consts::CANARY_SLOT_BYTES;
use crate::error::Error;
use crate::memory::Device;
use crate::step::moves::checked_slots;
use crate::step::{Canary, GroupKind, MovedRecords};

/// Runs of consecutive slots in `at`, in order: (index of the run's first slot in `at`, its first
/// slot, its length).
fn runs(at: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for (i, &s) in at.iter().enumerate() {
        match out.last_mut() {
            Some((_, first, len)) if *first + *len == s => *len += 1,
            _ => out.push((i, s, 1)),
        }
    }
    out
}

impl<V, W, E, S, R, G> Canary<V, W, E, S, R, G, Stream>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// The canary's buffers in the host canary's order: head K, head V, tail K, tail V (V only
    /// when the canary has it).
    fn device_buffers(&self) -> Vec<&CanaryBuffer<S, Device>> {
        self.tags()
            .into_iter()
            .filter_map(|tag| self.buffer(tag))
            .collect()
    }

    /// The records of `slots` from every buffer of this canary, once the launches queued on
    /// its stream have run: the twin of the host's
    /// [`export_records`](crate::step::Canary::export_records) (the same errors, the same
    /// records).
    pub fn export_records(&self, slots: &[i64]) -> Result<MovedRecords, Error> {
        let num_slots = self.slots().get();
        let at = checked_slots("export_records slots", slots, num_slots)?;
        self.backend().synchronize()?;
        let mut buffers = Vec::new();
        for buffer in self.device_buffers() {
            let stride = buffer.stride().get();
            let mut records = vec![CanarySlot::default(); at.len()];
            for (first_index, first, len) in runs(&at) {
                let mut bytes = vec![0u8; len * stride];
                driver::download(&mut bytes, buffer.device_bytes(), first * stride)?;
                for (j, record) in records[first_index..first_index + len]
                    .iter_mut()
                    .enumerate()
                {
                    *record = CanarySlot::from_bytes(&bytes[j * stride..][..CANARY_SLOT_BYTES]);
                }
            }
            buffers.push(records);
        }
        Ok(MovedRecords::from_buffers(buffers, at.len()))
    }

    /// Writes `records` into `slots` of every buffer of this canary, once the launches queued
    /// on its stream have run: the twin of the host's
    /// [`import_records`](crate::step::Canary::import_records) (the same checks, made before
    /// anything is written).
    pub fn import_records(&mut self, records: &MovedRecords, slots: &[i64]) -> Result<(), Error> {
        let num_slots = self.slots().get();
        let at = checked_slots("import_records slots", slots, num_slots)?;
        let buffers = self.device_buffers();
        if records.buffers().len() != buffers.len() {
            return Err(Error::LengthMismatch {
                what: "moved records' canary buffers (K only and K+V canaries differ)",
                expected: buffers.len(),
                found: records.buffers().len(),
            });
        }
        if at.len() != records.len() {
            return Err(Error::LengthMismatch {
                what: "import_records slots",
                expected: records.len(),
                found: at.len(),
            });
        }
        self.backend().synchronize()?;
        for (buffer, records) in buffers.into_iter().zip(records.buffers()) {
            let stride = buffer.stride().get();
            for (first_index, first, len) in runs(&at) {
                let mut bytes = vec![0u8; len * stride];
                driver::download(&mut bytes, buffer.device_bytes(), first * stride)?;
                for (j, record) in records[first_index..first_index + len].iter().enumerate() {
                    record.to_bytes(&mut bytes[j * stride..][..CANARY_SLOT_BYTES]);
                }
                driver::upload(buffer.device_bytes(), first * stride, &bytes)?;
            }
        }
        Ok(())
    }

    /// Copies the records of slots `from` into slots `to` in every buffer: the twin of the
    /// host's [`copy_records`](crate::step::Canary::copy_records) (a copy-on-write of a shared
    /// block on the device).
    pub fn copy_records(&mut self, from: &[i64], to: &[i64]) -> Result<(), Error> {
        let records = self.export_records(from)?;
        self.import_records(&records, to)
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_of_consecutive_slots() {
        assert_eq!(runs(&[]), []);
        assert_eq!(runs(&[5]), [(0, 5, 1)]);
        assert_eq!(
            runs(&[16, 17, 18, 3, 4, 9, 8]),
            [(0, 16, 3), (3, 3, 2), (5, 9, 1), (6, 8, 1)]
        );
    }
}
