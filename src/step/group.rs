//! [`GroupKind`]: which KV pool group a [`Canary`](super::Canary) shadows, and so which launch
//! tags its launches stamp (spec §2.8).

use super::KvPair;
use crate::canary::LaunchTag;
use crate::input::{Full, Group, IndexElement, Swa};

mod sealed {
    pub trait Sealed {}
}

/// The KV pool group of a [`Canary`](super::Canary), as a type: [`Full`] or [`SwaGroup`].
///
/// It fixes two things. The plan inputs the canary accepts ([`GroupKind::Plan`]: a FULL canary
/// plans with [`Full`], an SWA canary with an [`Swa`] group that carries its window and lookup
/// table), so a batch of one group cannot be planned into the other's slot space. And the launch
/// tags: `HEAD_*` for the head launches, `TAIL_*` for the tail launches, `_FULL` or `_SWA`.
pub trait GroupKind: sealed::Sealed + 'static {
    /// The plan-input group of this kind.
    type Plan<'a>: Group;
    /// `"FULL"` or `"SWA"`.
    const NAME: &'static str;
    /// The tags of the head launches (K half, V half).
    const HEAD: KvPair<LaunchTag>;
    /// The tags of the tail launches (K half, V half).
    const TAIL: KvPair<LaunchTag>;
}

impl sealed::Sealed for Full {}
impl GroupKind for Full {
    type Plan<'a> = Full;
    const NAME: &'static str = "FULL";
    const HEAD: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::HeadKFull,
        v: LaunchTag::HeadVFull,
    };
    const TAIL: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::TailKFull,
        v: LaunchTag::TailVFull,
    };
}

/// The sliding-window (SWA) group: slots live in the SWA sub-pool's index space, and each step is
/// planned with an [`Swa`] group (window and `full_to_swa_index_mapping`). `out_cache_loc` must
/// already be translated into SWA slots (spec §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SwaGroup;

impl sealed::Sealed for SwaGroup {}
impl GroupKind for SwaGroup {
    type Plan<'a> = Swa<'a>;
    const NAME: &'static str = "SWA";
    const HEAD: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::HeadKSwa,
        v: LaunchTag::HeadVSwa,
    };
    const TAIL: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::TailKSwa,
        v: LaunchTag::TailVSwa,
    };
}

/// The plan-input groups a canary of kind `K` plans with: [`Full`] for a FULL canary, an
/// [`Swa`] group with a lookup table of any element type for an SWA canary.
pub trait GroupOf<K: GroupKind>: Group {}
impl GroupOf<Full> for Full {}
impl<L: IndexElement> GroupOf<SwaGroup> for Swa<'_, L> {}
