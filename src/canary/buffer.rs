//! [`CanaryBuffer`]: one canary record per KV slot (spec §2.3).

use crate::capacity::{Cap, Capacity};
use crate::consts::{CANARY_FIELDS_PER_SLOT, CANARY_SLOT_BYTES};
use crate::hash::{chain_step, CHAIN_HEAD};
use crate::memory::{host_table, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use derive_where::derive_where;

/// Bytes per canary slot: at least 32 and a multiple of 8, checked once at construction.
///
/// Production uses exactly 32 ([`SlotStride::DEFAULT`]); wider strides leave bytes `32..stride`
/// of every slot untouched by every op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotStride(usize);

impl SlotStride {
    /// 32 bytes: the four `i64` fields and nothing else.
    pub const DEFAULT: SlotStride = SlotStride(CANARY_SLOT_BYTES);

    /// A stride of `bytes` bytes; it must be at least 32 and a multiple of 8.
    pub fn new(bytes: usize) -> Result<SlotStride, Error> {
        if bytes < CANARY_SLOT_BYTES || !bytes.is_multiple_of(8) {
            return Err(Error::InvalidSlotStride { bytes });
        }
        Ok(SlotStride(bytes))
    }

    /// The stride in bytes.
    pub const fn get(self) -> usize {
        self.0
    }
}

impl Default for SlotStride {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The four fields of one canary slot (little-endian `i64` at byte offsets 0, 8, 16, 24).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CanarySlot {
    /// Token id written into the KV slot.
    pub token: i64,
    /// Sequence position of that token.
    pub position: i64,
    /// Chain hash of the request's previous token (`CHAIN_HEAD` for a chain head).
    pub prev_hash: i64,
    /// Fingerprint of the slot's real KV bytes (0 when not hashed).
    pub real_kv_hash: i64,
}

impl CanarySlot {
    /// The chain hash this slot passes to its successor: `mix3(prev_hash, token, position)`
    /// (the real-KV hash is deliberately not part of the chain, spec §2.2).
    #[inline]
    pub const fn chain_hash(&self) -> i64 {
        chain_step(self.prev_hash, self.token, self.position)
    }

    #[inline]
    pub(crate) fn from_bytes(b: &[u8]) -> CanarySlot {
        let field = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 * i..8 * i + 8]);
            i64::from_le_bytes(w)
        };
        CanarySlot {
            token: field(0),
            position: field(1),
            prev_hash: field(2),
            real_kv_hash: field(3),
        }
    }

    #[inline]
    pub(crate) fn to_bytes(self, b: &mut [u8]) {
        let fields = [self.token, self.position, self.prev_hash, self.real_kv_hash];
        for (i, v) in fields.into_iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// The canary buffer of spec §2.3: `S` slots (its capacity, in the type) of `stride` bytes each.
///
/// Slot `s` occupies bytes `[s * stride, (s + 1) * stride)`; its first 32 bytes hold a
/// [`CanarySlot`], the rest are never touched. The raw bytes are kept, so a buffer read back from
/// a device or a dump keeps its tail bytes. Only the write op mutates it; verify reads it.
///
/// `Clone` and `PartialEq` hold for host buffers; equality compares stride and bytes (the
/// capacity follows from them).
#[derive_where(Clone, PartialEq; M::Array<u8>)]
pub struct CanaryBuffer<S: Capacity, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: S,
    pub(crate) stride: SlotStride,
    pub(crate) bytes: M::Array<u8>,
}

impl<const N: usize> CanaryBuffer<Cap<N>> {
    /// A zeroed host buffer of `N` slots of 32 bytes.
    ///
    /// # Panics
    ///
    /// If the `N x 32` bytes cannot be allocated (a size fixed at compile time); run-time
    /// capacities use [`try_with_capacity`](Self::try_with_capacity).
    pub fn new() -> Self {
        static_size(Self::try_with_capacity(Cap))
    }
}

impl<const N: usize> Default for CanaryBuffer<Cap<N>> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Capacity> CanaryBuffer<S> {
    /// A zeroed host buffer of `capacity` slots of 32 bytes; a capacity whose bytes cannot be
    /// allocated is [`Error::AllocationFailed`] naming it.
    pub fn try_with_capacity(capacity: S) -> Result<Self, Error> {
        Self::try_with_stride(capacity, SlotStride::DEFAULT)
    }

    /// A zeroed host buffer of `capacity` slots of `stride` bytes; a size that cannot be
    /// allocated is [`Error::AllocationFailed`] naming both factors.
    pub fn try_with_stride(capacity: S, stride: SlotStride) -> Result<Self, Error> {
        Ok(CanaryBuffer {
            capacity,
            stride,
            bytes: host_table("canary_buf", capacity.get(), stride.get(), 0)?,
        })
    }

    /// The infallible form, for the CUDA backend's host copies of buffers that already exist on
    /// the device (`to_host`); it panics with the allocation error. Crate-private: the public
    /// API allocates run-time capacities with `try_with_capacity` and `try_with_stride` only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_stride(capacity: S, stride: SlotStride) -> Self {
        static_size(Self::try_with_stride(capacity, stride))
    }

    /// A host buffer from raw bytes (conformance dumps, FFI): `capacity` slots of
    /// `stride_bytes` bytes, so `bytes.len()` must be `capacity x stride_bytes`.
    pub fn from_bytes(capacity: S, stride_bytes: usize, bytes: Vec<u8>) -> Result<Self, Error> {
        let stride = SlotStride::new(stride_bytes)?;
        let expected = capacity.get().checked_mul(stride.get());
        if expected != Some(bytes.len()) {
            return Err(Error::TableShape {
                what: "canary_buf",
                rows: capacity.get(),
                cols: stride.get(),
                len: bytes.len(),
            });
        }
        Ok(CanaryBuffer {
            capacity,
            stride,
            bytes: bytes.into(),
        })
    }

    /// Every byte, slot after slot.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Every byte, mutable (length fixed): for tests that tamper with a record.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The record of slot `s`, if the buffer has that slot.
    pub fn slot(&self, s: usize) -> Option<CanarySlot> {
        (s < self.num_slots()).then(|| self.load(s))
    }

    /// Overwrites the record of slot `s` (its tail bytes stay); a slot outside the buffer is
    /// [`Error::CanarySlotOutOfRange`].
    pub fn set_slot(&mut self, s: usize, record: CanarySlot) -> Result<(), Error> {
        if s >= self.num_slots() {
            return Err(Error::CanarySlotOutOfRange {
                slot: s,
                num_slots: self.num_slots(),
            });
        }
        self.store(s, record);
        Ok(())
    }

    /// Every record, in slot order.
    pub fn slots(&self) -> impl ExactSizeIterator<Item = CanarySlot> + '_ {
        (0..self.num_slots()).map(move |s| self.load(s))
    }

    /// `compute_slot_hash(buf, s)`: the anchor hash for `s < 0`, else the chain hash of slot `s`.
    /// Callers have checked `s < num_slots`.
    #[inline]
    pub(crate) fn slot_hash(&self, s: i64) -> i64 {
        if s < 0 {
            CHAIN_HEAD
        } else {
            self.load(s as usize).chain_hash()
        }
    }

    /// The record of slot `s < num_slots`.
    #[inline]
    pub(crate) fn load(&self, s: usize) -> CanarySlot {
        let at = s * self.stride.get();
        CanarySlot::from_bytes(&self.bytes[at..at + CANARY_SLOT_BYTES])
    }

    /// Writes the record of slot `s < num_slots`, leaving its tail bytes alone.
    #[inline]
    pub(crate) fn store(&mut self, s: usize, record: CanarySlot) {
        let at = s * self.stride.get();
        record.to_bytes(&mut self.bytes[at..at + CANARY_SLOT_BYTES]);
    }
}

impl<S: Capacity, M: Memory> CanaryBuffer<S, M> {
    /// The capacity (number of slots).
    pub fn capacity(&self) -> S {
        self.capacity
    }
    /// Number of slots (`num_slots`).
    pub fn num_slots(&self) -> usize {
        self.capacity.get()
    }
    /// Bytes per slot (`slot_stride_bytes`).
    pub fn stride(&self) -> SlotStride {
        self.stride
    }

    /// `slot` as an index into this buffer, or [`Error::SlotOutOfRange`] naming `what[index]`.
    #[inline]
    pub(crate) fn check_slot(
        &self,
        what: &'static str,
        index: usize,
        slot: i64,
    ) -> Result<usize, Error> {
        match usize::try_from(slot) {
            Ok(s) if s < self.num_slots() => Ok(s),
            _ => Err(Error::SlotOutOfRange {
                what,
                index,
                slot,
                num_slots: self.num_slots(),
            }),
        }
    }
}

const _: () = assert!(CANARY_FIELDS_PER_SLOT * 8 == CANARY_SLOT_BYTES);

// Written out, not derived: it leaves out the bytes (megabytes in an engine), which a derive
// would print.
impl<S: Capacity> fmt::Debug for CanaryBuffer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CanaryBuffer")
            .field("capacity", &self.capacity)
            .field("slot_stride_bytes", &self.stride.get())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::UncheckedCapacity;

    #[test]
    fn stride_must_hold_four_fields_and_align_to_8() {
        assert_eq!(SlotStride::new(32).unwrap().get(), 32);
        assert_eq!(SlotStride::new(64).unwrap().get(), 64);
        for bad in [0, 24, 31, 36, 60, usize::MAX] {
            let err = SlotStride::new(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("kv-canary: canary slot_stride_bytes must be in [32, ..) and a multiple of 8, got {bad}")
            );
        }
    }

    #[test]
    fn fields_are_little_endian_at_offsets_0_8_16_24() {
        let mut buf = CanaryBuffer::<Cap<3>>::new();
        let rec = CanarySlot {
            token: 0x0102,
            position: -1,
            prev_hash: i64::MIN,
            real_kv_hash: 7,
        };
        buf.set_slot(1, rec).unwrap();
        let b = &buf.as_bytes()[32..64];
        assert_eq!(&b[0..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0xFF; 8]);
        assert_eq!(&b[16..24], &[0, 0, 0, 0, 0, 0, 0, 0x80]);
        assert_eq!(&b[24..32], &[7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(buf.slot(1), Some(rec));
        assert_eq!(buf.slot(3), None);
        assert_eq!(
            buf.set_slot(usize::MAX, rec).unwrap_err().to_string(),
            format!(
                "kv-canary: canary slot {} is outside the canary buffer's 3 slots",
                usize::MAX
            )
        );
        assert!(buf.set_slot(3, rec).is_err());
    }

    #[test]
    fn run_time_capacities_allocate_fallibly() {
        let cap = UncheckedCapacity::new("num_slots", 1 << 40).unwrap();
        let stride = SlotStride::new(1 << 30).unwrap();
        assert_eq!(
            CanaryBuffer::try_with_stride(cap, stride).unwrap_err(),
            Error::AllocationFailed {
                what: "canary_buf",
                rows: 1 << 40,
                cols: 1 << 30,
                element_bytes: 1
            }
        );
        let cap = UncheckedCapacity::new("num_slots", 1 << 61).unwrap();
        assert!(CanaryBuffer::try_with_capacity(cap).is_err());
        let cap = UncheckedCapacity::new("num_slots", 2).unwrap();
        assert_eq!(
            CanaryBuffer::try_with_capacity(cap).unwrap().as_bytes(),
            &[0; 64]
        );
    }

    #[test]
    fn wide_strides_keep_their_tail_bytes() {
        let cap = UncheckedCapacity::new("num_slots", 2).unwrap();
        let mut buf = CanaryBuffer::from_bytes(cap, 64, vec![0xA5; 128]).unwrap();
        buf.set_slot(1, CanarySlot::default()).unwrap();
        assert_eq!(&buf.as_bytes()[64..96], &[0; 32]);
        assert_eq!(&buf.as_bytes()[96..128], &[0xA5; 32]);
        assert_eq!(&buf.as_bytes()[..64], &[0xA5; 64]);
    }

    #[test]
    fn from_bytes_checks_the_length_and_stride() {
        let cap = UncheckedCapacity::new("num_slots", 2).unwrap();
        assert!(CanaryBuffer::from_bytes(cap, 32, vec![0; 63]).is_err());
        assert!(CanaryBuffer::from_bytes(cap, 24, vec![0; 48]).is_err());
    }

    #[test]
    fn slot_hash_is_the_anchor_for_negative_slots() {
        let mut buf = CanaryBuffer::<Cap<2>>::new();
        assert_eq!(buf.slot_hash(-1), CHAIN_HEAD);
        assert_eq!(buf.slot_hash(-5), CHAIN_HEAD);
        let rec = CanarySlot {
            token: 10,
            position: 0,
            prev_hash: CHAIN_HEAD,
            real_kv_hash: 99,
        };
        buf.set_slot(1, rec).unwrap();
        assert_eq!(buf.slot_hash(1) as u64, 0xCD6D_3FC6_4AB6_8B75);
    }

    #[test]
    fn check_slot_names_the_array_and_value() {
        let buf = CanaryBuffer::<Cap<4>>::new();
        assert_eq!(buf.check_slot("x", 0, 3), Ok(3));
        let err = buf.check_slot("out_cache_loc", 5, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc[5] = 4 is outside the canary buffer's 4 slots"
        );
        assert!(buf.check_slot("x", 0, -1).is_err());
    }
}
