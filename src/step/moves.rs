//! KV that moves keeps its canary (issue 33 item 6): the records of a set of slots, exported
//! from every buffer of a canary (head and tail, K and V) and imported into other slot ids, of
//! the same canary (an offload to host memory and back into freshly allocated blocks) or of
//! another (a request moved to another instance).
//!
//! A record's chain hash is content-only (spec §2.2: `mix3(prev_hash, token, position)`, the slot
//! id is no part of it), and its real-KV fingerprint is of the KV bytes, so records copied to new
//! slots, beside the same KV bytes copied to the same new slots, verify as before; a KV byte
//! changed on the way is the next verify's violation, as any corrupted byte.

use super::Canary;
use crate::backend::Backend;
use crate::canary::{CanaryBuffer, CanarySlot};
use crate::capacity::Capacity;
use crate::error::Error;
use crate::memory::Host;
use crate::step::GroupKind;

/// The records of a set of slots from every buffer of a canary, in the order the slots were
/// named: what travels with the KV when an engine moves it ([`Canary::export_records`],
/// [`Canary::import_records`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedRecords {
    /// Per buffer (head K, head V, tail K, tail V; the V halves only for a K+V canary), the
    /// slots' records.
    buffers: Vec<Vec<CanarySlot>>,
    /// How many slots the records are of.
    slots: usize,
}

impl MovedRecords {
    /// Records of `slots` slots, one list a buffer (the device canary's export).
    #[cfg(feature = "cuda")]
    pub(crate) fn from_buffers(buffers: Vec<Vec<CanarySlot>>, slots: usize) -> Self {
        MovedRecords { buffers, slots }
    }

    /// Per buffer, the records (the device canary's import).
    #[cfg(feature = "cuda")]
    pub(crate) fn buffers(&self) -> &[Vec<CanarySlot>] {
        &self.buffers
    }

    /// How many slots the records are of.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }
}

/// The slots as buffer indices, each checked against a buffer of `num_slots` slots: slot 0
/// (reserved) and any slot outside are [`Error::SlotOutOfRange`] naming it.
pub(crate) fn checked_slots(
    what: &'static str,
    slots: &[i64],
    num_slots: usize,
) -> Result<Vec<usize>, Error> {
    slots
        .iter()
        .enumerate()
        .map(|(index, &slot)| {
            usize::try_from(slot)
                .ok()
                .filter(|&s| s > 0 && s < num_slots)
                .ok_or(Error::SlotOutOfRange {
                    what,
                    index,
                    slot,
                    num_slots,
                })
        })
        .collect()
}

impl<V, W, E, S, R, G, B> Canary<V, W, E, S, R, G, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend<Memory = Host>,
{
    /// The canary's buffers in a fixed order: head K, head V, tail K, tail V (V only when the
    /// canary has it).
    fn host_buffers(&self) -> impl Iterator<Item = &CanaryBuffer<S>> {
        [
            Some(&self.head.k),
            self.head.v.as_ref(),
            Some(&self.tail.k),
            self.tail.v.as_ref(),
        ]
        .into_iter()
        .flatten()
    }

    /// The records of `slots` (cached slots of the engine's KV about to move: a request's
    /// blocks' slots, in any order) from every buffer of this canary. Slot 0 and slots outside
    /// the buffers are [`Error::SlotOutOfRange`] naming them.
    ///
    /// ```
    /// use kv_canary::step::{Canary, TailKv};
    /// use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
    /// let shape = Shape::<Cap<16>, Cap<2>, Cap<8>>::new();
    /// let mut canary = Canary::full(shape, Cap::<32>, Cap::<8>);
    /// // A request of 3 tokens in slots 4, 5, 6.
    /// let table = ReqToToken::from_vec(2, 8, vec![0, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0])?;
    /// let mut inputs = canary.write_inputs();
    /// let p = inputs.parts_mut();
    /// p.out_cache_loc[..3].copy_from_slice(&[4, 5, 6]);
    /// p.input_ids[..3].copy_from_slice(&[70, 71, 72]);
    /// p.positions[..3].copy_from_slice(&[0, 1, 2]);
    /// let prefill = Batch::from_columns([1], [0], [3]);
    /// canary.plan(&PlanInputs::full(&prefill, &table))?.verify_head()?.write(&inputs)?
    ///     .verify_tail(TailKv::NONE)?;
    /// // Offload the request, bring it back into slots 20, 21, 22, and verify it there.
    /// let records = canary.export_records(&[4, 5, 6])?;
    /// canary.import_records(&records, &[20, 21, 22])?;
    /// let moved = ReqToToken::from_vec(2, 8, vec![0, 0, 0, 0, 0, 0, 0, 0, 20, 21, 22, 0, 0, 0, 0, 0])?;
    /// let check = Batch::from_columns([1], [3], [0]);
    /// let nothing = canary.write_inputs();
    /// let report = canary.plan(&PlanInputs::full(&check, &moved))?.verify_head()?
    ///     .write(&nothing)?.verify_tail(TailKv::NONE)?;
    /// assert!(report.is_clean(), "{report}");
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn export_records(&self, slots: &[i64]) -> Result<MovedRecords, Error> {
        let num_slots = self.head.k.num_slots();
        let at = checked_slots("export_records slots", slots, num_slots)?;
        let buffers = self
            .host_buffers()
            .map(|buffer| at.iter().map(|&s| buffer.load(s)).collect())
            .collect();
        Ok(MovedRecords {
            buffers,
            slots: at.len(),
        })
    }

    /// Copies the records of slots `from` into slots `to` (one to one, in order) in every
    /// buffer of this canary: KV copied inside the pool (a copy-on-write of a shared block, a
    /// defragmentation) keeps its canary. [`export_records`](Self::export_records) then
    /// [`import_records`](Self::import_records), with their errors; nothing is written on one.
    pub fn copy_records(&mut self, from: &[i64], to: &[i64]) -> Result<(), Error> {
        let records = self.export_records(from)?;
        self.import_records(&records, to)
    }

    /// Writes `records` into `slots` (one slot a record, in order) of every buffer of this
    /// canary: the new home of KV moved back from host memory, or moved in from another
    /// instance. Records of a canary of other halves (K only into K+V), a slot count other
    /// than the records', slot 0 or slots outside the buffers are errors naming them, and
    /// nothing is written then.
    pub fn import_records(&mut self, records: &MovedRecords, slots: &[i64]) -> Result<(), Error> {
        let num_slots = self.head.k.num_slots();
        let at = checked_slots("import_records slots", slots, num_slots)?;
        let buffers = self.host_buffers().count();
        if records.buffers.len() != buffers {
            return Err(Error::LengthMismatch {
                what: "moved records' canary buffers (K only and K+V canaries differ)",
                expected: buffers,
                found: records.buffers.len(),
            });
        }
        if at.len() != records.slots {
            return Err(Error::LengthMismatch {
                what: "import_records slots",
                expected: records.slots,
                found: at.len(),
            });
        }
        let targets = [
            Some(&mut self.head.k),
            self.head.v.as_mut(),
            Some(&mut self.tail.k),
            self.tail.v.as_mut(),
        ];
        for (buffer, records) in targets.into_iter().flatten().zip(&records.buffers) {
            for (&s, &record) in at.iter().zip(records) {
                buffer.store(s, record);
            }
        }
        Ok(())
    }
}
