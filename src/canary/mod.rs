//! The canary state of spec §2: the [`CanaryBuffer`] the write op stamps and the verify op
//! checks, the [`ViolationRing`] both report into, the [`HealthCounters`], and what a launch
//! stamps into a row ([`LaunchTag`], [`FailReason`]), decoded as a [`Violation`].
//!
//! Buffers carry their capacity in their type (`CanaryBuffer<S>` has `S` slots,
//! `ViolationRing<R>` `R` rows) and are generic over the [`Memory`](crate::Memory) they live in.

mod buffer;
mod counters;
mod fail_reason;
mod ring;
mod settings;
mod tag;
mod violation;

pub use buffer::{CanaryBuffer, CanarySlot, SlotStride};
pub use counters::HealthCounters;
pub use fail_reason::FailReason;
pub use ring::{RingCount, ViolationRing, WRAPPED_WRITE_INDEX};
pub use settings::{ChainPositionAssert, LaunchSettings, TokenCheck, TokenCheckOff, TokenCheckOn};
pub use tag::LaunchTag;
#[cfg(feature = "cuda")]
pub(crate) use violation::decode_rows;
pub use violation::Violation;
