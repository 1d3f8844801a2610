//! [`Shape`]: the engine's knobs turned into every capacity, once.
//!
//! A shape holds the three capacities a canary step needs and allocates every buffer from them:
//!
//! * **verify capacity** — entries of a [`VerifyPlan`]. SGLang sizes it per forward pass from the
//!   KV pool (`3 x pool slots` in one version) or from the maximum sequence length (another); for
//!   speculative decoding the verify plan of a draft step holds `bs x (topk + 1)` entries.
//! * **write-request capacity** — rows of a [`WritePlan`]: `max_bs`.
//! * **write-entry capacity** — tokens one write may stamp:
//!   `max(max_bs x tokens_per_req, max_extend_tokens)`.
//!
//! Three ways to build one, each deriving every capacity from one expression:
//!
//! * static numbers: `Shape::<Cap<{ BS * (TOPK + 1) }>, Cap<BS>, Cap<{ BS * (TOPK + 1) }>>::new()`
//!   with `const` items, or [`Shape::of`] with a [`StaticShape`] such as [`SpeculativeShape`]
//!   that does the arithmetic over generic parameters (typenum) and converts back to decimal;
//! * run-time numbers from a config, branded: [`Shape::branded`] (mismatches stay compile errors);
//! * run-time numbers, unchecked: [`Shape::unchecked`] (mismatches are run-time errors).

use crate::capacity::{
    Brand, Cap, Capacity, Derived, NamedVerifyCapacity, NamedWriteEntryCapacity,
    NamedWriteReqCapacity, StaticCapacity, ToCap, ToTypenum, UncheckedCapacity, VerifyCapacity,
    WriteEntryCapacity, WriteReqCapacity,
};
use crate::input::WriteInputs;
use crate::memory::static_size;
use crate::plan::{VerifyPlan, WritePlan};
use crate::Error;
use core::marker::PhantomData;
use core::ops::{Add, Mul};
use typenum::{Add1, Max, Maximum, Prod, B1, U3};

/// The three capacities of a canary step, in their types. Allocates every plan buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape<V: Capacity, W: Capacity, E: Capacity> {
    verify: V,
    write_reqs: W,
    write_entries: E,
}

impl<V: Capacity, W: Capacity, E: Capacity> Shape<V, W, E> {
    /// The verify capacity.
    pub fn verify_capacity(&self) -> V {
        self.verify
    }
    /// The write-request capacity (max batch size).
    pub fn write_req_capacity(&self) -> W {
        self.write_reqs
    }
    /// The write-entry capacity (max tokens stamped by one write).
    pub fn write_entry_capacity(&self) -> E {
        self.write_entries
    }
    /// A host verify plan of this shape's verify capacity; one that cannot be allocated is
    /// [`Error::AllocationFailed`] naming its size.
    pub fn try_verify_plan(&self) -> Result<VerifyPlan<V>, Error> {
        VerifyPlan::try_with_capacity(self.verify)
    }
    /// A host write plan of this shape's write-request capacity (fallible, as
    /// [`try_verify_plan`](Self::try_verify_plan)).
    pub fn try_write_plan(&self) -> Result<WritePlan<W>, Error> {
        WritePlan::try_with_capacity(self.write_reqs)
    }
    /// Host per-token write inputs of this shape's write-entry capacity, input assert off
    /// (turn it on with [`WriteInputs::try_with_input_assert`]); fallible, as
    /// [`try_verify_plan`](Self::try_verify_plan).
    pub fn try_write_inputs(&self) -> Result<WriteInputs<E>, Error> {
        WriteInputs::try_with_capacity(self.write_entries)
    }
}

/// The infallible allocations of a static shape, whose sizes are fixed when the engine is
/// compiled (each panics only if the machine cannot hold them, like a `Box<[i64; N]>`). Run-time
/// shapes ([`Shape::branded`], [`Shape::unchecked`]) allocate with the `try_` forms.
impl<V: StaticCapacity, W: StaticCapacity, E: StaticCapacity> Shape<V, W, E> {
    /// A host verify plan of `V` entries.
    pub fn verify_plan(&self) -> VerifyPlan<V> {
        static_size(self.try_verify_plan())
    }
    /// A host write plan of `W` requests.
    pub fn write_plan(&self) -> WritePlan<W> {
        static_size(self.try_write_plan())
    }
    /// Host per-token write inputs of `E` entries, input assert off (turn it on with
    /// [`WriteInputs::with_input_assert`]).
    pub fn write_inputs(&self) -> WriteInputs<E> {
        static_size(self.try_write_inputs())
    }
}

impl<const V: usize, const W: usize, const E: usize> Shape<Cap<V>, Cap<W>, Cap<E>> {
    /// A static shape; write each capacity once, as an expression over `const` items:
    ///
    /// ```
    /// use kv_canary::{Cap, Shape};
    /// const MAX_BS: usize = 8;
    /// const TOPK: usize = 4;
    /// type Spec = Shape<Cap<{ MAX_BS * (TOPK + 1) }>, Cap<MAX_BS>, Cap<{ MAX_BS * (TOPK + 1) }>>;
    /// let shape = Spec::new();
    /// assert_eq!(shape.verify_plan().slot_indices().len(), 40);
    /// ```
    pub const fn new() -> Self {
        Shape {
            verify: Cap,
            write_reqs: Cap,
            write_entries: Cap,
        }
    }
}

impl<const V: usize, const W: usize, const E: usize> Default for Shape<Cap<V>, Cap<W>, Cap<E>> {
    fn default() -> Self {
        Self::new()
    }
}

/// A shape computed entirely at compile time, typically by typenum arithmetic over the shape's
/// generic parameters (see [`SpeculativeShape`], [`PoolShape`]).
pub trait StaticShape {
    /// Verify capacity.
    type Verify: StaticCapacity;
    /// Write-request capacity.
    type WriteReqs: StaticCapacity;
    /// Write-entry capacity.
    type WriteEntries: StaticCapacity;
}

impl Shape<Cap<1>, Cap<1>, Cap<1>> {
    /// The shape described by a [`StaticShape`]:
    ///
    /// ```
    /// use kv_canary::{Cap, Shape, SpeculativeShape};
    /// use typenum::{U4, U8};
    /// let shape = Shape::of::<SpeculativeShape<U8, U4>>();
    /// let _: Cap<40> = shape.verify_capacity(); // 8 x (4 + 1), in decimal
    /// ```
    pub fn of<S: StaticShape>() -> Shape<S::Verify, S::WriteReqs, S::WriteEntries> {
        Shape {
            verify: S::Verify::VALUE,
            write_reqs: S::WriteReqs::VALUE,
            write_entries: S::WriteEntries::VALUE,
        }
    }
}

/// Speculative decoding (EAGLE): `MaxBs` requests each verify and write `TopK + 1` tokens.
///
/// verify capacity = write-entry capacity = `MaxBs x (TopK + 1)`; write-request capacity =
/// `MaxBs`. Caching a plan of `MaxBs x TopK` entries (the bug this type removes) no longer
/// compiles against this shape. The parameters are typenum numbers or static capacities, so
/// `SpeculativeShape<U8, U4>` and `SpeculativeShape<Cap<8>, Cap<4>>` are the same shape (see
/// [`ToTypenum`] for the `Cap<N>` it takes).
///
/// ```
/// use kv_canary::{Cap, Shape, SpeculativeShape};
/// let shape = Shape::of::<SpeculativeShape<Cap<8>, Cap<4>>>();
/// let _: Shape<Cap<40>, Cap<8>, Cap<40>> = shape;
/// ```
pub struct SpeculativeShape<MaxBs, TopK>(PhantomData<(MaxBs, TopK)>);

impl<MaxBs, TopK, B, K> StaticShape for SpeculativeShape<MaxBs, TopK>
where
    MaxBs: ToTypenum<Typenum = B>,
    TopK: ToTypenum<Typenum = K>,
    K: Add<B1>,
    B: Mul<Add1<K>> + ToCap,
    Prod<B, Add1<K>>: ToCap,
{
    type Verify = Derived<Prod<B, Add1<K>>>;
    type WriteReqs = Derived<B>;
    type WriteEntries = Derived<Prod<B, Add1<K>>>;
}

/// SGLang's per-forward sizing from the KV pool: verify capacity = `3 x PoolSlots`,
/// write-request capacity = `MaxBs`, write-entry capacity =
/// `max(MaxBs x TokensPerReq, MaxExtendTokens)`. The parameters are typenum numbers or static
/// capacities ([`ToTypenum`]).
pub struct PoolShape<MaxBs, PoolSlots, TokensPerReq, MaxExtendTokens>(
    PhantomData<(MaxBs, PoolSlots, TokensPerReq, MaxExtendTokens)>,
);

impl<MaxBs, PoolSlots, TokensPerReq, MaxExtendTokens, B, P, T, X> StaticShape
    for PoolShape<MaxBs, PoolSlots, TokensPerReq, MaxExtendTokens>
where
    MaxBs: ToTypenum<Typenum = B>,
    PoolSlots: ToTypenum<Typenum = P>,
    TokensPerReq: ToTypenum<Typenum = T>,
    MaxExtendTokens: ToTypenum<Typenum = X>,
    U3: Mul<P>,
    Prod<U3, P>: ToCap,
    B: Mul<T> + ToCap,
    Prod<B, T>: Max<X>,
    Maximum<Prod<B, T>, X>: ToCap,
{
    type Verify = Derived<Prod<U3, P>>;
    type WriteReqs = Derived<B>;
    type WriteEntries = Derived<Maximum<Prod<B, T>, X>>;
}

/// How a run-time shape sizes its verify plan (spec §2.4; SGLang's versions differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyCapacityRule {
    /// `3 x pool_slots` ([`EngineKnobs::pool_slots`]): every slot of the pool, three times over
    /// (one SGLang version), so no batch of distinct requests overflows it.
    PoolSlots,
    /// The maximum sequence length (another SGLang version).
    MaxSeqLen {
        /// `max_seq_len` of the `req_to_token` table.
        max_seq_len: usize,
    },
    /// `max_bs x tokens_per_req`: one entry per token of a full forward pass (speculative
    /// decoding: `bs x (topk + 1)`).
    TokensPerForward,
    /// A number chosen by the engine.
    Exact(usize),
}

/// The engine's knobs a [`Shape`] is derived from at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineKnobs {
    /// Maximum batch size (rows of a plan).
    pub max_bs: usize,
    /// Tokens each request writes per decode step: 1, or `topk + 1` for speculative decoding.
    pub tokens_per_req: usize,
    /// Token budget of one prefill (chunked-prefill size).
    pub max_extend_tokens: usize,
    /// Slots in the KV pool, slot 0 included: the size of the canary's buffers
    /// ([`slot_capacity`](Self::slot_capacity)), and what [`VerifyCapacityRule::PoolSlots`]
    /// sizes the verify plan from. Given once, so the two cannot disagree.
    pub pool_slots: usize,
    /// How the verify capacity is sized.
    pub verify: VerifyCapacityRule,
}

impl EngineKnobs {
    /// A serving engine without speculative decoding: decode steps of up to `max_bs` requests
    /// writing one token each, prefill (or chunked-prefill) steps of up to `max_extend_tokens`
    /// tokens, over a KV pool of `pool_slots` slots: a write-entry capacity of
    /// `max(max_bs, max_extend_tokens)` and a verify capacity of `3 x pool_slots`, as
    /// [`speculative`](Self::speculative) sizes it, so every cached prefix fits.
    ///
    /// ```
    /// use kv_canary::{Capacity, EngineKnobs};
    /// let knobs = EngineKnobs::serving(64, 8192, 100_000);
    /// assert_eq!(knobs.write_req_capacity()?, 64);
    /// assert_eq!(knobs.write_entry_capacity()?, 8192); // a prefill chunk, not 64 x 1
    /// assert_eq!(knobs.verify_capacity()?, 300_000);
    /// assert_eq!(knobs.slot_capacity()?.get(), 100_000); // the canary buffers' slots
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn serving(max_bs: usize, max_extend_tokens: usize, pool_slots: usize) -> Self {
        EngineKnobs {
            max_bs,
            tokens_per_req: 1,
            max_extend_tokens,
            pool_slots,
            verify: VerifyCapacityRule::PoolSlots,
        }
    }

    /// Speculative decoding with `topk` draft tokens over a KV pool of `pool_slots` slots:
    /// `tokens_per_req = topk + 1`, no prefill budget beyond that (an engine that also
    /// prefills sets [`max_extend_tokens`](Self::max_extend_tokens), or starts from
    /// [`serving`](Self::serving)), and a verify capacity of
    /// `3 x pool_slots` (SGLang's per-forward sizing), so every cached prefix a step attends to
    /// fits in its verify plan.
    ///
    /// The verify plan holds one entry per cached token every request of the step attends to:
    /// a decode batch of 8 requests with 2,000-token prefixes needs 16,000 entries, however few
    /// tokens it writes. A smaller capacity is not an error, but the plan then disables
    /// verification and the step's report is [`Unverified`](crate::step::StepStatus::Unverified).
    pub fn speculative(max_bs: usize, topk: usize, pool_slots: usize) -> Self {
        EngineKnobs {
            verify: VerifyCapacityRule::PoolSlots,
            ..EngineKnobs::draft_step(max_bs, topk, pool_slots)
        }
    }

    /// SGLang's EAGLE draft-step sizing over a KV pool of `pool_slots` slots:
    /// `tokens_per_req = topk + 1` and a verify capacity of `max_bs x (topk + 1)`, the step's
    /// own tokens ([`SpeculativeShape`] at run time).
    ///
    /// That capacity covers a step only while the prefixes it verifies add up to at most
    /// `max_bs x (topk + 1)` entries; with real prefixes most steps overflow it and check nothing
    /// (their reports are [`Unverified`](crate::step::StepStatus::Unverified)). Engines verifying
    /// cached prefixes want [`speculative`](Self::speculative).
    pub fn draft_step(max_bs: usize, topk: usize, pool_slots: usize) -> Self {
        EngineKnobs {
            max_bs,
            tokens_per_req: topk.saturating_add(1),
            max_extend_tokens: 0,
            pool_slots,
            verify: VerifyCapacityRule::TokensPerForward,
        }
    }

    /// The canary buffers' slot capacity: [`pool_slots`](Self::pool_slots), the `slots` of
    /// [`Canary::try_full`](crate::step::Canary::try_full) and the other constructors, so the
    /// buffers and a [`PoolSlots`](VerifyCapacityRule::PoolSlots) verify capacity come from
    /// one number. Zero is [`Error::ZeroCapacity`].
    pub fn slot_capacity(&self) -> Result<UncheckedCapacity, Error> {
        UncheckedCapacity::new("pool_slots", self.pool_slots)
    }

    /// The verify capacity these knobs derive; a product that overflows is
    /// [`Error::CapacityOverflow`] naming both factors.
    pub fn verify_capacity(&self) -> Result<usize, Error> {
        const WHAT: &str = "verify_capacity";
        let n = match self.verify {
            VerifyCapacityRule::PoolSlots => product(WHAT, "3 x pool_slots", 3, self.pool_slots)?,
            VerifyCapacityRule::MaxSeqLen { max_seq_len } => max_seq_len,
            VerifyCapacityRule::TokensPerForward => self.tokens_per_forward(WHAT)?,
            VerifyCapacityRule::Exact(n) => n,
        };
        positive(WHAT, n)
    }

    /// The write-request capacity: `max_bs`.
    pub fn write_req_capacity(&self) -> Result<usize, Error> {
        positive("write_req_capacity", self.max_bs)
    }

    /// The write-entry capacity: `max(max_bs x tokens_per_req, max_extend_tokens)`.
    pub fn write_entry_capacity(&self) -> Result<usize, Error> {
        const WHAT: &str = "write_entry_capacity";
        let per_step = self.tokens_per_forward(WHAT)?;
        positive(WHAT, per_step.max(self.max_extend_tokens))
    }

    /// `max_bs x tokens_per_req`, for the capacity `what`.
    fn tokens_per_forward(&self, what: &'static str) -> Result<usize, Error> {
        product(
            what,
            "max_bs x tokens_per_req",
            self.max_bs,
            self.tokens_per_req,
        )
    }
}

fn product(what: &'static str, formula: &'static str, a: usize, b: usize) -> Result<usize, Error> {
    a.checked_mul(b).ok_or(Error::CapacityOverflow {
        what,
        formula,
        a,
        b,
    })
}

fn positive(what: &'static str, n: usize) -> Result<usize, Error> {
    if n == 0 {
        Err(Error::ZeroCapacity { what, value: 0 })
    } else {
        Ok(n)
    }
}

/// A shape whose capacities were computed at run time and branded with `'id`.
pub type BrandedShape<'id> =
    Shape<VerifyCapacity<'id>, WriteReqCapacity<'id>, WriteEntryCapacity<'id>>;

/// A shape whose capacities were computed at run time and named by the engine's type `T`
/// ([`NamedVerifyCapacity`], [`NamedWriteReqCapacity`], [`NamedWriteEntryCapacity`]): storable
/// in an engine struct, and a buffer of another name is a compile error.
///
/// Branded capacities ([`Shape::branded`]) need a closure: their brand is a lifetime that cannot
/// be named outside it. A named capacity is branded by a type instead, which an engine names in
/// its structs:
///
/// ```
/// use kv_canary::step::{Canary, NamedCanary};
/// use kv_canary::{Capacity, EngineKnobs, NamedShape, UncheckedCapacity};
///
/// /// The draft model's canary configuration (a marker type of the engine's).
/// #[derive(Clone, Copy, Debug)]
/// struct Draft;
///
/// struct Engine {
///     // `Canary<NamedVerifyCapacity<Draft>, NamedWriteReqCapacity<Draft>,
///     // NamedWriteEntryCapacity<Draft>, UncheckedCapacity, UncheckedCapacity>`
///     canary: NamedCanary<Draft>,
/// }
///
/// let knobs = EngineKnobs::speculative(8, 3, 1024); // read from the config file
/// let shape = NamedShape::<Draft>::named(&knobs)?;
/// let rows = UncheckedCapacity::new("ring rows", 64)?;
/// let mut engine = Engine { canary: Canary::try_full(shape, knobs.slot_capacity()?, rows)? };
/// assert_eq!(engine.canary.slots().get(), 1024);
/// assert_eq!(engine.canary.shape().verify_capacity().get(), 3 * 1024);
///
/// // The configuration changes (a larger batch): the canary moves in place, keeping its state.
/// engine.canary.reshape(NamedShape::named(&EngineKnobs::speculative(16, 3, 1024))?)?;
/// assert_eq!(engine.canary.shape().write_req_capacity().get(), 16);
/// # Ok::<(), kv_canary::Error>(())
/// ```
///
/// A verify plan of another configuration's shape does not compile: `NamedVerifyCapacity<Draft>`
/// and `NamedVerifyCapacity<Target>` are different types, and the error names both
/// (`ui-tests/fail/verify_capacity_named.rs`). Two shapes of the *same* name made from different
/// numbers are compared at each launch, like [`UncheckedCapacity`]
/// ([`Error::CapacityMismatch`] naming both): give each configuration its own name. A canary of
/// such a shape moves to new numbers in place with
/// [`Canary::reshape`](crate::step::Canary::reshape).
pub type NamedShape<T> =
    Shape<NamedVerifyCapacity<T>, NamedWriteReqCapacity<T>, NamedWriteEntryCapacity<T>>;

impl<T> NamedShape<T> {
    /// Derives the shape of the configuration named `T` from run-time `knobs`. Errors only when
    /// a capacity comes out zero or overflows.
    pub fn named(knobs: &EngineKnobs) -> Result<Self, Error> {
        Ok(Shape {
            verify: NamedVerifyCapacity::mint(knobs.verify_capacity()?),
            write_reqs: NamedWriteReqCapacity::mint(knobs.write_req_capacity()?),
            write_entries: NamedWriteEntryCapacity::mint(knobs.write_entry_capacity()?),
        })
    }
}

/// A shape whose capacities were computed at run time and are compared at each call.
pub type UncheckedShape = Shape<UncheckedCapacity, UncheckedCapacity, UncheckedCapacity>;

impl BrandedShape<'_> {
    /// Derives a shape from run-time `knobs` and runs `f` with it under a fresh brand.
    ///
    /// Every buffer allocated from the shape carries the brand, and every launch that takes the
    /// shape demands the same brand, so a buffer from another shape — even one computed from the
    /// same numbers — does not compile. Errors only when a capacity comes out zero or overflows;
    /// `f` allocates with the fallible `try_` forms, so a capacity too large for the machine is
    /// an error there too.
    ///
    /// ```
    /// use kv_canary::{EngineKnobs, Shape, VerifyCapacityRule};
    /// let knobs = EngineKnobs { max_bs: 4, tokens_per_req: 1, max_extend_tokens: 64,
    ///                           pool_slots: 100, verify: VerifyCapacityRule::PoolSlots };
    /// let entries =
    ///     Shape::branded(&knobs, |shape| shape.try_verify_plan().map(|p| p.slot_indices().len()))??;
    /// assert_eq!(entries, 300);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn branded<R>(
        knobs: &EngineKnobs,
        f: impl for<'id> FnOnce(BrandedShape<'id>) -> R,
    ) -> Result<R, Error> {
        let (v, w, e) = (
            knobs.verify_capacity()?,
            knobs.write_req_capacity()?,
            knobs.write_entry_capacity()?,
        );
        let brand = Brand::new();
        Ok(f(Shape {
            verify: VerifyCapacity::mint(v, brand),
            write_reqs: WriteReqCapacity::mint(w, brand),
            write_entries: WriteEntryCapacity::mint(e, brand),
        }))
    }
}

impl UncheckedShape {
    /// Derives an unbranded run-time shape from `knobs`. Launches compare its capacities with
    /// the buffers' at each call and return [`Error::CapacityMismatch`] naming both numbers.
    pub fn unchecked(knobs: &EngineKnobs) -> Result<Self, Error> {
        Ok(Shape {
            verify: UncheckedCapacity::new("verify_capacity", knobs.verify_capacity()?)?,
            write_reqs: UncheckedCapacity::new("write_req_capacity", knobs.write_req_capacity()?)?,
            write_entries: UncheckedCapacity::new(
                "write_entry_capacity",
                knobs.write_entry_capacity()?,
            )?,
        })
    }

    /// An unbranded shape from three explicit capacities (conformance dumps, FFI).
    pub fn from_capacities(
        verify: UncheckedCapacity,
        write_reqs: UncheckedCapacity,
        write_entries: UncheckedCapacity,
    ) -> Self {
        Shape {
            verify,
            write_reqs,
            write_entries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use typenum::{U1, U100, U16, U256, U4, U8};

    #[test]
    fn speculative_shape_is_bs_times_topk_plus_one() {
        let s = Shape::of::<SpeculativeShape<U8, U4>>();
        let _: Shape<Cap<40>, Cap<8>, Cap<40>> = s;
    }

    #[test]
    fn speculative_shape_takes_static_capacities() {
        let s = Shape::of::<SpeculativeShape<Cap<8>, Cap<4>>>();
        let _: Shape<Cap<40>, Cap<8>, Cap<40>> = s;
        let mixed = Shape::of::<SpeculativeShape<Cap<8>, U4>>();
        let _: Shape<Cap<40>, Cap<8>, Cap<40>> = mixed;
    }

    #[test]
    fn large_derived_shapes_allocate_their_numbers() {
        use crate::capacity::TypenumCap;
        use typenum::{Prod, U1000, U300, U5};
        // 300 x (4 + 1) = 1500 verify entries: a `TypenumCap`, compared by value.
        let s = Shape::of::<SpeculativeShape<U300, U4>>();
        type Entries = TypenumCap<Prod<U300, U5>>;
        let _: Shape<Entries, Cap<300>, Entries> = s;
        assert_eq!(s.verify_plan().slot_indices().len(), 1500);
        assert_eq!(s.write_inputs().capacity().get(), 1500);
        let pool = Shape::of::<PoolShape<U16, U1000, U1, Cap<256>>>();
        assert_eq!(pool.verify_capacity().get(), 3000);
        assert_eq!(pool.write_entry_capacity(), Cap::<256>);
    }

    #[test]
    fn pool_shape_follows_sglang() {
        let s = Shape::of::<PoolShape<U16, U100, U1, U256>>();
        let _: Shape<Cap<300>, Cap<16>, Cap<256>> = s;
    }

    #[test]
    fn knobs_derive_each_capacity_once() {
        let k = EngineKnobs {
            max_bs: 8,
            tokens_per_req: 5,
            max_extend_tokens: 64,
            pool_slots: 10,
            verify: VerifyCapacityRule::PoolSlots,
        };
        assert_eq!(k.verify_capacity().unwrap(), 30);
        assert_eq!(k.slot_capacity().unwrap().get(), 10);
        assert_eq!(k.write_req_capacity().unwrap(), 8);
        assert_eq!(k.write_entry_capacity().unwrap(), 64);
        let spec = EngineKnobs::speculative(8, 3, 4096);
        assert_eq!(
            spec.verify_capacity().unwrap(),
            3 * 4096,
            "covers real prefixes"
        );
        assert_eq!(spec.write_entry_capacity().unwrap(), 32);
        let spec = EngineKnobs::draft_step(8, 4, 4096);
        assert_eq!(spec.verify_capacity().unwrap(), 40);
        assert_eq!(spec.write_entry_capacity().unwrap(), 40);
        assert_eq!(spec.slot_capacity().unwrap().get(), 4096);
        let zero = EngineKnobs::draft_step(0, 4, 0);
        assert_eq!(
            zero.verify_capacity().unwrap_err().to_string(),
            "kv-canary: verify_capacity must be positive, got 0"
        );
        assert_eq!(
            zero.slot_capacity().unwrap_err().to_string(),
            "kv-canary: pool_slots must be positive, got 0"
        );
    }

    #[test]
    fn overflowed_knob_products_name_their_factors() {
        let big = EngineKnobs::draft_step(usize::MAX / 2, 2, 16);
        let msg = format!(
            "= max_bs x tokens_per_req = {} x 3 overflows usize",
            usize::MAX / 2
        );
        for err in [
            big.verify_capacity().unwrap_err(),
            big.write_entry_capacity().unwrap_err(),
        ] {
            assert!(err.to_string().contains(&msg), "{err}");
        }
        let pool = EngineKnobs::speculative(1, 0, usize::MAX);
        assert_eq!(
            pool.verify_capacity().unwrap_err(),
            Error::CapacityOverflow {
                what: "verify_capacity",
                formula: "3 x pool_slots",
                a: 3,
                b: usize::MAX
            }
        );
    }

    #[test]
    fn absurd_run_time_shapes_are_allocation_errors() {
        let knobs = EngineKnobs {
            verify: VerifyCapacityRule::Exact(1 << 61),
            ..EngineKnobs::draft_step(1 << 50, 0, 16)
        };
        let shape = Shape::unchecked(&knobs).unwrap();
        assert!(matches!(
            shape.try_verify_plan(),
            Err(Error::AllocationFailed {
                rows: 0x2000_0000_0000_0000,
                ..
            })
        ));
        assert!(shape.try_write_plan().is_err());
        assert!(shape.try_write_inputs().is_err());
        let err = Shape::branded(&knobs, |s| s.try_verify_plan().map(|_| ())).unwrap();
        assert!(err.is_err());
    }

    #[test]
    fn branded_and_unchecked_shapes_allocate_their_capacities() {
        let k = EngineKnobs::draft_step(3, 1, 16);
        let n = Shape::branded(&k, |s| {
            (
                s.try_verify_plan().unwrap().slot_indices().len(),
                s.try_write_plan().unwrap().offsets().len(),
            )
        })
        .unwrap();
        assert_eq!(n, (6, 4));
        let u = Shape::unchecked(&k).unwrap();
        assert_eq!(u.verify_capacity().get(), 6);
    }
}

#[cfg(test)]
mod named_tests {
    use super::*;
    use crate::cpu;
    use crate::input::{Batch, PlanInputs, ReqToToken};

    #[derive(Clone, Copy, Debug)]
    struct Draft;

    #[test]
    fn named_shapes_plan_and_compare_equal_names_at_run_time() {
        let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
        let batch = Batch::from_columns([2], [3], [1]);
        let shape = NamedShape::<Draft>::named(&EngineKnobs::speculative(4, 1, 8)).unwrap();
        assert_eq!(
            format!("{:?}", shape.verify_capacity()),
            "NamedVerifyCapacity<Draft>(24)"
        );
        let (mut verify, mut write) = (
            shape.try_verify_plan().unwrap(),
            shape.try_write_plan().unwrap(),
        );
        let inputs = PlanInputs::full(&batch, &table);
        let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write).unwrap();
        assert_eq!(summary.verify_num_valid, 3);
        // The same name from other numbers: compared at the call, both numbers named.
        let other = NamedShape::<Draft>::named(&EngineKnobs::speculative(4, 1, 4)).unwrap();
        let mut stale = other.try_verify_plan().unwrap();
        let err = cpu::plan(&shape, &inputs, &mut stale, &mut write).unwrap_err();
        assert_eq!(
            err,
            Error::CapacityMismatch {
                what: "verify_capacity",
                expected: 24,
                found: 12
            }
        );
    }
}
