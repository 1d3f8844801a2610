//! The engine's verdicts on what the canary finds (issue 33 item 1): a layer above
//! [`step`](crate::step) that turns a report's violation rows into verdicts on requests, under
//! the engine's [`Policy`].
//!
//! A violation row names a slot. A **verify** row says a cached slot failed: its **victims** are
//! the requests whose verify entries read it (a shared prefix has several), and its **culprit**
//! is the request whose write last landed there (a stray write into another request's slot, a
//! block freed and reallocated while still held), which the [`Guard`] knows from the slots each
//! step wrote. A **write** row (the input assert, the chain-position assert) names its culprit
//! directly: the request that wrote the slot.
//!
//! Verdicts, strongest last: [`Verdict::Keep`] (log and keep serving), [`Verdict::Recompute`]
//! (the victim's cached prefix is lost: treat it as a cache miss), [`Verdict::Abort`] (the
//! culprit's own state is wrong). The policy's [`Action`] picks, per kind of finding, among off,
//! log, per-request verdicts and failing the engine (SGLang's `none` / `log` / `raise`). Every
//! violation is judged once, however many steps report the same corrupted record (a request
//! that reads it later, sharing the cached prefix, is judged a victim then, once); a run of
//! unverified steps (a plan over its verify capacity, with both numbers) is reported once.
//!
//! ```
//! use kv_canary::guard::{Action, Guard, Policy, Verdict};
//! use kv_canary::step::{Canary, SlotRows, TailKv};
//! use kv_canary::{Batch, Cap, LaunchTag, CanarySlot, PlanInputs, ReqToToken, Shape};
//!
//! let mut canary = Canary::full(Shape::<Cap<16>, Cap<2>, Cap<8>>::new(), Cap::<32>, Cap::<8>);
//! let mut guard = Guard::new(Policy { violations: Action::PerRequest, ..Policy::default() });
//! // Request "a" (pool row 1) caches slots 1, 2; it prefills them in step 1.
//! let table = ReqToToken::from_vec(2, 4, vec![0, 0, 0, 0, 1, 2, 3, 0])?;
//! let mut inputs = canary.write_inputs();
//! let p = inputs.parts_mut();
//! (p.out_cache_loc[0], p.input_ids[0], p.positions[0]) = (1, 10, 0);
//! (p.out_cache_loc[1], p.input_ids[1], p.positions[1]) = (2, 11, 1);
//! let prefill = Batch::from_columns([1], [0], [2]);
//! let plan_inputs = PlanInputs::full(&prefill, &table);
//! let report = canary.plan(&plan_inputs)?.verify_head()?.write(&inputs)?.verify_tail(TailKv::NONE)?;
//! let rows = SlotRows::new(&plan_inputs, inputs.out_cache_loc())?;
//! assert!(guard.judge(&report, &rows, &[Some("a")])?.verdicts.is_empty());
//! // Something overwrites slot 1's record; the next step's verify of "a" reports it.
//! for tag in [LaunchTag::HeadKFull, LaunchTag::TailKFull] {
//!     let b = canary.buffer_mut(tag).unwrap();
//!     b.set_slot(1, CanarySlot { token: 99, ..b.slot(1).unwrap() })?;
//! }
//! let decode = Batch::from_columns([1], [2], [0]);
//! let plan_inputs = PlanInputs::full(&decode, &table);
//! let nothing = canary.write_inputs();
//! let report = canary.plan(&plan_inputs)?.verify_head()?.write(&nothing)?.verify_tail(TailKv::NONE)?;
//! let rows = SlotRows::new(&plan_inputs, nothing.out_cache_loc())?;
//! let judgement = guard.judge(&report, &rows, &[Some("a")])?;
//! assert_eq!(judgement.verdict_of(&"a"), Some(Verdict::Recompute));
//! # Ok::<(), kv_canary::Error>(())
//! ```

mod cadence;
#[cfg(feature = "faults")]
#[cfg_attr(docsrs, doc(cfg(feature = "faults")))]
pub mod faults;
mod judge;
mod policy;
mod records;
mod watchdog;

pub use cadence::{CachedBlocks, CachedPrefixes, CachedRun, SweepCadence};
pub use judge::{Guard, Judgement, RequestVerdict, Role};
pub use policy::{Action, Policy, Verdict};
pub use records::{Record, Stats};
pub use watchdog::{Stall, Watchdog};
