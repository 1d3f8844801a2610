//! # kv-canary
//!
//! A type-state Rust port of SGLang's *kv-canary*: a small canary buffer beside an LLM engine's
//! KV cache that catches slots written to the wrong place, freed too early or reused stale.
//! Each forward step a **plan** op derives which slots to check and where to write, a **write**
//! op extends per-request hash chains, and a **verify** op re-derives the chains and reports every
//! mismatch.
//!
//! Every plan buffer carries its capacity in its type, one [`Shape`] derives every capacity from
//! the engine's knobs, and the ops accept only buffers of matching types: SGLang's run-time
//! `verify_capacity=40 does not match ... shape[0]=32` is a compile error here.
//!
//! ```
//! use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape};
//!
//! // One expression per capacity: verify 8 entries, 4 requests, 16 written tokens.
//! let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
//! let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
//!
//! // req_to_token[r][p] = 8r + p; request in pool row 2 has 3 cached tokens and writes 2 more.
//! let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
//! let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
//! let summary = cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut verify, &mut write)?;
//!
//! assert_eq!(summary.verify_num_valid, 3);
//! assert_eq!(&verify.slot_indices()[..3], &[16, 17, 18]);
//! assert_eq!(write.offsets(), &[0, 2, 2, 6, 0]);
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! A buffer from another shape does not compile:
//!
//! ```compile_fail
//! use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, VerifyPlan};
//! let shape = Shape::<Cap<40>, Cap<8>, Cap<40>>::new();
//! let mut stale = VerifyPlan::<Cap<32>>::new();
//! let mut write = shape.write_plan();
//! let table = ReqToToken::zeros(1, 1).unwrap();
//! let batch = Batch::new();
//! cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut stale, &mut write);
//! ```
//!
//! Engines drive the ops through [`step`]: a [`Canary`] owns every buffer of one KV group and
//! runs each forward step's launches in the only order that checks anything (the raw ops, called
//! one by one, are shown at [`cpu::write`]):
//!
//! ```
//! use kv_canary::{Batch, Canary, Cap, PlanInputs, ReqToToken, Shape, TailKv};
//!
//! // The shape above, canary buffers of 64 KV slots, a 16-row violation ring.
//! let mut canary = Canary::full(Shape::<Cap<8>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
//! let mut inputs = canary.write_inputs();
//!
//! // The request in pool row 1 prefills tokens 7, 8 into slots 8, 9, then decodes 9 into 10:
//! // (cached tokens, [(token, position, slot)]) per step.
//! for (cached, tokens) in [(0, &[(7, 0, 8), (8, 1, 9)][..]), (2, &[(9, 2, 10)][..])] {
//!     let batch = Batch::from_columns([1], [cached], [tokens.len() as i64]);
//!     let p = inputs.parts_mut();
//!     for (i, &(token, position, slot)) in tokens.iter().enumerate() {
//!         (p.input_ids[i], p.positions[i], p.out_cache_loc[i]) = (token, position, slot);
//!     }
//!     let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
//!     // ... the engine's forward pass writes this step's KV bytes here ...
//!     let report = step.verify_tail(TailKv::NONE)?;
//!     // Each of the four buffers (head and tail, K and V) re-checked the cached prefix: clean.
//!     assert_eq!((report.entries_checked(), report.recorded()), (4 * cached as u64, 0));
//! }
//! assert_eq!(canary.steps(), 2);
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! Modules: [`capacity`] (static, derived, branded and unchecked capacities), [`shape`] (knobs to
//! capacities), [`plan`] (the plan buffers), [`input`] (plan inputs as types), [`hash`] and
//! [`consts`] (spec §2), [`canary`] (canary buffer, violation ring, counters, launch settings),
//! [`real_kv`] (real-KV fingerprints), [`cpu`] (the reference ops: plan, write, verify, scatter),
//! [`step`] (the per-step API engines call: a [`Canary`] that runs plan, head verify, write and
//! tail verify in order), [`conformance`] (the golden-vector runner), and with the `cuda`
//! feature `cuda` (the same ops as CUDA kernels on typed device buffers).
// `unsafe` is denied everywhere; only the CUDA backend (driver calls) allows it, with a
// `// SAFETY:` comment on every block.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The conformance runner includes kv-canary-testkit's `Offload`, written as `kv_canary::...`.
extern crate self as kv_canary;

pub mod canary;
pub mod capacity;
pub mod conformance;
pub mod consts;
pub mod cpu;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[allow(unsafe_code)]
pub mod cuda;
mod error;
pub mod hash;
pub mod input;
mod memory;
pub mod plan;
pub mod real_kv;
pub mod shape;
pub mod step;

pub use canary::{
    CanaryBuffer, CanarySlot, ChainPositionAssert, FailReason, HealthCounters, Launch, LaunchTag,
    SlotStride, TokenCheck, TokenCheckOff, TokenCheckOn, Violation, ViolationRing,
};
pub use capacity::{
    Cap, Capacity, Derived, ToCap, UncheckedCapacity, VerifyCapacity, WriteEntryCapacity,
    WriteReqCapacity,
};
pub use error::Error;
pub use input::{
    Batch, BatchRow, ExpectedTokenPool, ExpectedTokenTable, ExpectedTokens, Full, Group,
    InputAssertOff, InputAssertOn, NoExpectedTokens, PlanInputs, PositionOffset, ReqToToken, Swa,
    SwaWindow, WriteInputs,
};
#[cfg(feature = "cuda")]
pub use memory::Device;
pub use memory::{Element, Host, Memory};
pub use plan::{VerifyEntry, VerifyPlan, WritePlan};
pub use real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};
pub use shape::{
    BrandedShape, EngineKnobs, PoolShape, Shape, SpeculativeShape, StaticShape, UncheckedShape,
    VerifyCapacityRule,
};
pub use step::{Canary, StepReport, TailKv};
