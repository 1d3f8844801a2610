//! [`GroupKind`]: which KV pool group a [`Canary`](super::Canary) shadows, and so which launch
//! tags its launches stamp (spec §2.8) and whether the pool has a V half ([`KOnly`]).

use super::KvPair;
use crate::canary::LaunchTag;
use crate::input::{Full, Group, IndexElement, Swa};
use core::marker::PhantomData;

mod sealed {
    pub trait Sealed {}
}

/// The KV pool group of a [`Canary`](super::Canary), as a type: [`Full`] or [`SwaGroup`] for a
/// pool with K and V halves, [`KOnly<Full>`](KOnly) or [`KOnly<SwaGroup>`](KOnly) for a pool
/// without a V half (an MLA-style latent cache).
///
/// It fixes three things. The plan inputs the canary accepts ([`GroupKind::Pool`]'s: a FULL
/// canary plans with [`Full`], an SWA canary with an [`Swa`] group that carries its window and
/// lookup table), so a batch of one group cannot be planned into the other's slot space. The
/// launch tags: `HEAD_*` for the head launches, `TAIL_*` for the tail launches, `SWEEP_*` for
/// sweeps, `_FULL` or `_SWA`. And the halves: a K-only canary holds two canary buffers (head and
/// tail K), launches only the K tags, and its tail and sweep launches take the K half's real-KV
/// sources alone ([`GroupKind::Sources`]), so it cannot be handed V sources.
pub trait GroupKind: sealed::Sealed + 'static {
    /// The plan-input group of this kind.
    type Plan<'a>: Group;
    /// The group whose plan inputs this canary accepts: itself for [`Full`] and [`SwaGroup`],
    /// the pool's group for a [`KOnly`] canary.
    type Pool: GroupKind;
    /// The real-KV sources of one tail verify or sweep: a [`KvPair`] for a pool with both
    /// halves, the K half's sources alone for a [`KOnly`] pool.
    type Sources<T>;
    /// `"FULL"`, `"SWA"`, `"FULL (K only)"` or `"SWA (K only)"`.
    const NAME: &'static str;
    /// Whether the pool has a V half (two more canary buffers and the `*_V_*` launches).
    const HAS_V: bool;
    /// The tags of the head launches (K half, V half).
    const HEAD: KvPair<LaunchTag>;
    /// The tags of the tail launches (K half, V half).
    const TAIL: KvPair<LaunchTag>;
    /// The tags of the sweep launches (K half, V half).
    const SWEEP: KvPair<LaunchTag>;

    /// The K half's sources and, for a pool with a V half, the V half's.
    #[doc(hidden)]
    fn split_sources<T>(sources: Self::Sources<T>) -> (T, Option<T>);
}

impl sealed::Sealed for Full {}
impl GroupKind for Full {
    type Plan<'a> = Full;
    type Pool = Full;
    type Sources<T> = KvPair<T>;
    const NAME: &'static str = "FULL";
    const HAS_V: bool = true;
    const HEAD: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::HeadKFull,
        v: LaunchTag::HeadVFull,
    };
    const TAIL: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::TailKFull,
        v: LaunchTag::TailVFull,
    };
    const SWEEP: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::SweepKFull,
        v: LaunchTag::SweepVFull,
    };

    fn split_sources<T>(sources: KvPair<T>) -> (T, Option<T>) {
        (sources.k, Some(sources.v))
    }
}

/// The sliding-window (SWA) group: slots live in the SWA sub-pool's index space, and each step is
/// planned with an [`Swa`] group (window and `full_to_swa_index_mapping`). `out_cache_loc` must
/// already be translated into SWA slots (spec §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SwaGroup;

impl sealed::Sealed for SwaGroup {}
impl GroupKind for SwaGroup {
    type Plan<'a> = Swa<'a>;
    type Pool = SwaGroup;
    type Sources<T> = KvPair<T>;
    const NAME: &'static str = "SWA";
    const HAS_V: bool = true;
    const HEAD: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::HeadKSwa,
        v: LaunchTag::HeadVSwa,
    };
    const TAIL: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::TailKSwa,
        v: LaunchTag::TailVSwa,
    };
    const SWEEP: KvPair<LaunchTag> = KvPair {
        k: LaunchTag::SweepKSwa,
        v: LaunchTag::SweepVSwa,
    };

    fn split_sources<T>(sources: KvPair<T>) -> (T, Option<T>) {
        (sources.k, Some(sources.v))
    }
}

/// A pool of group `G` ([`Full`] or [`SwaGroup`]) without a V half: an MLA-style latent cache
/// (SGLang's `v_head = None` groups, three endpoints per group). A canary of this group holds
/// the head and tail K buffers only, launches `HEAD_K_*`, `TAIL_K_*` and `SWEEP_K_*` only, and
/// its tail verify and sweeps take one set of real-KV sources (the latent pool's). It plans with
/// `G`'s plan inputs. Its reports have the same fields as a K+V canary's; the V launches'
/// summaries and counters stay at zero.
///
/// ```
/// use kv_canary::step::{Canary, KOnly};
/// use kv_canary::{Batch, Cap, Full, PlanInputs, RealKv, ReqToToken, Shape};
/// let mut canary: Canary<_, _, _, _, _, KOnly<Full>> =
///     Canary::k_only(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
/// let table = ReqToToken::zeros(4, 8)?;
/// let inputs = canary.write_inputs();
/// let batch = Batch::from_columns([1], [0], [3]);
/// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
/// let report = step.write(&inputs)?.verify_tail(RealKv::NONE)?; // the latent pool's sources
/// assert_eq!(canary.tags().len(), 2);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KOnly<G>(PhantomData<G>);

impl<G> sealed::Sealed for KOnly<G> {}

impl GroupKind for KOnly<Full> {
    type Plan<'a> = Full;
    type Pool = Full;
    type Sources<T> = T;
    const NAME: &'static str = "FULL (K only)";
    const HAS_V: bool = false;
    const HEAD: KvPair<LaunchTag> = Full::HEAD;
    const TAIL: KvPair<LaunchTag> = Full::TAIL;
    const SWEEP: KvPair<LaunchTag> = Full::SWEEP;

    fn split_sources<T>(sources: T) -> (T, Option<T>) {
        (sources, None)
    }
}

impl GroupKind for KOnly<SwaGroup> {
    type Plan<'a> = Swa<'a>;
    type Pool = SwaGroup;
    type Sources<T> = T;
    const NAME: &'static str = "SWA (K only)";
    const HAS_V: bool = false;
    const HEAD: KvPair<LaunchTag> = SwaGroup::HEAD;
    const TAIL: KvPair<LaunchTag> = SwaGroup::TAIL;
    const SWEEP: KvPair<LaunchTag> = SwaGroup::SWEEP;

    fn split_sources<T>(sources: T) -> (T, Option<T>) {
        (sources, None)
    }
}

/// The plan-input groups a canary of kind `K` plans with: [`Full`] for a FULL canary, an
/// [`Swa`] group with a lookup table of any element type for an SWA canary.
pub trait GroupOf<K: GroupKind>: Group {}
impl GroupOf<Full> for Full {}
impl<L: IndexElement> GroupOf<SwaGroup> for Swa<'_, L> {}
