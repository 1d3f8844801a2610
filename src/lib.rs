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
//! Engines drive the ops through [`step`]: a [`step::Canary`] owns every buffer of one KV group and
//! runs each forward step's launches in the only order that checks anything (the raw ops, called
//! one by one, are shown at [`cpu::write`]):
//!
//! ```
//! use kv_canary::step::{Canary, TailKv};
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
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
//! # Layout: features, the backend seam, the workspace
//!
//! * Feature `cuda` adds the CUDA backend, `cuda`: the same ops as kernels (`kernels/*.cu`,
//!   compiled to PTX by nvcc at build time) on device buffers typed like the host ones.
//! * [`backend`] is the seam: [`backend::Backend`] (allocation, verify), [`backend::Writes`]
//!   (write) and [`backend::PlanWith`] (plan), implemented by [`backend::Cpu`] and, with the
//!   `cuda` feature, a CUDA stream; [`step::Canary`] is generic over it, so code driving the ops
//!   is written once.
//! * Inside the crate the layers import downward only: `consts` <- `hash`; `capacity`, `memory`
//!   <- the buffers (plans, inputs, real-KV, canary state) <- `Shape` <- [`cpu`] <- [`backend`]
//!   <- [`step`]; `cuda` in its own layers (`abi` <- `driver` <- `device` <- `ops`) on the same
//!   buffers. `docs/architecture.md` in the repository draws them and gives the reasons.
//! * Not in this crate, and not published: the golden-vector conformance runner (the workspace
//!   crate `kv-canary-conformance`: `cargo run -p kv-canary-conformance -- tests/golden`, with
//!   `--features cuda` and `--backend cuda` on a GPU) and the test and benchmark support
//!   (`kv-canary-testkit`: benchmark floors and their kernels, `Offload`).
//! * `rust-toolchain.toml` pins the compiler the ui snapshots (`ui-tests/`) are recorded with.
//!
//! # Where names live: one public path per item
//!
//! **Types of the data model are at the root, and only there**: capacities ([`Cap`],
//! [`UncheckedCapacity`], the branded ones), shapes ([`Shape`], [`EngineKnobs`]), plan buffers
//! ([`VerifyPlan`], [`WritePlan`]), plan and write inputs ([`Batch`], [`ReqToToken`],
//! [`PlanInputs`], [`WriteInputs`]), the canary state ([`CanaryBuffer`], [`ViolationRing`],
//! [`HealthCounters`], [`Violation`], [`FailReason`]), launch settings ([`LaunchSettings`],
//! [`LaunchTag`]), real-KV fingerprints ([`RealKv`]), memory spaces ([`Host`]) and [`Error`].
//! The modules that define them are private, so `kv_canary::VerifyPlan` is the one path.
//!
//! **Public modules are the layers that act on them**, and their items are reached through the
//! module only (their names would clash or mean nothing at the root):
//!
//! * [`cpu`]: the reference ops (`cpu::plan`, `cpu::write`, `cpu::verify`,
//!   `cpu::scatter_req_token_ids`) and their summaries;
//! * [`step`]: the per-step API engines call ([`step::Canary`] runs plan, head verify, write and
//!   tail verify in order; its stages and [`step::StepReport`]);
//! * `cuda` (feature `cuda`): the same ops as CUDA kernels on typed device buffers;
//! * [`hash`] and [`consts`]: the hash functions and constants of spec §2;
//! * [`backend`]: the seam the CPU and CUDA backends implement ([`backend::Backend`],
//!   [`backend::Cpu`]), so code driving the ops is written once.
//!
//! Inside the crate, code imports each item from its defining module (`crate::plan::VerifyPlan`),
//! never through the root re-exports. The one exception is [`Error`], the error type every
//! layer returns: it is imported as `crate::Error`.
// `unsafe` is denied everywhere; only the CUDA backend (driver calls) allows it, with a
// `// SAFETY:` comment on every block.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod canary;
mod capacity;
pub mod consts;
pub mod cpu;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[allow(unsafe_code)]
pub mod cuda;
mod error;
pub mod guard;
pub mod hash;
mod input;
mod memory;
mod plan;
mod real_kv;
mod shape;
pub mod step;

pub use canary::{
    CanaryBuffer, CanarySlot, ChainPositionAssert, FailReason, HealthCounters, LaunchSettings,
    LaunchTag, RingCount, SlotStride, TokenCheck, TokenCheckOff, TokenCheckOn, Violation,
    ViolationRing, WRAPPED_WRITE_INDEX,
};
pub use capacity::{
    Brand, Cap, Capacity, Derived, NamedVerifyCapacity, NamedWriteEntryCapacity,
    NamedWriteReqCapacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity,
    StaticCapacity, ToCap, ToTypenum, TypenumCap, UncheckedCapacity, VerifyCapacity,
    WriteEntryCapacity, WriteReqCapacity,
};
pub use error::Error;
pub use input::{
    Batch, BatchColumns, BatchRow, BatchView, ExpectedTokenPool, ExpectedTokenTable,
    ExpectedTokenTableView, ExpectedTokens, ExpectedWriteInputs, ExpectedWriteInputsMut, Full,
    Group, HostWriteInputs, IndexElement, InputAssertOff, InputAssertOn, NoExpectedTokens,
    PagedStepArrays, PagedStepSlices, PlanInputs, PoolRows, PositionOffset, QueryLens, QueryStarts,
    ReqTable, ReqTableView, ReqToToken, ReqToTokenView, RuntimePlanInputs, SlotIds, Swa, SwaWindow,
    TableKind, TokenIds, WriteInputAssert, WriteInputSource, WriteInputs, WriteInputsMut,
    WriteInputsView, MAX_BLOCK_SIZE,
};
#[cfg(feature = "cuda")]
pub use memory::Device;
pub use memory::{Element, Host, Memory};
pub use plan::{VerifyEntry, VerifyPlan, VerifyPlanMut, WritePlan, WritePlanMut, WriteRequest};
pub use real_kv::{
    AtMostFourSources, LayoutSignature, PagedShape, Pieces, RealKv, RealKvHashMode, RealKvParams,
    RealKvSource, RealKvSources, RowLayout, SourceCount, TokenLayout, TransferDigest,
    TRANSFER_DIGEST_VERSION,
};
pub use shape::{
    BrandedShape, EngineKnobs, NamedShape, PoolShape, Shape, SpeculativeShape, StaticShape,
    UncheckedShape, VerifyCapacityRule,
};
