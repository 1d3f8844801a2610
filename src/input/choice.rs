//! Plan inputs whose KV group and expected-token source are chosen at run time (a dump, a
//! config file), bridged to the typed [`PlanInputs`] in one place:
//! [`with_plan_inputs_choice!`](crate::with_plan_inputs_choice).
//!
//! The plan op is generic over the group ([`Full`] or [`Swa`]) and the expected-token source
//! ([`NoExpectedTokens`] or [`ExpectedTokenPool`]), so "has a LUT?" and "has a pool?" known only
//! at run time select one of four instantiations. Rust has no generic closures, so the four
//! arms cannot be one function taking a callback; the macro is their one source, used by the
//! host bridge (`PlanWith<RuntimePlanInputs>` in [`backend`](crate::backend)) and by device
//! twins of the inputs (the testkit's `Offload`), whose builders have the same
//! `with_group`/`with_expected` shape.

use super::{ExpectedTokenPool, Full, NoExpectedTokens, PlanInputs, Swa};

/// Runs `$body` on typed plan inputs built from a run-time choice: `$base` (inputs of the FULL
/// group without expected tokens, host [`PlanInputs`] or a device twin), `$group` (an `Option`
/// of the SWA group) and `$expected` (an `Option` of the expected-token pool). `$inputs` names
/// the typed inputs in `$body`, which is compiled once for each of the four combinations, so it
/// may call generic code; every arm must have the same type.
///
/// ```
/// use kv_canary::{cpu, with_plan_inputs_choice, Batch, Cap, PlanInputs, ReqToToken, Shape, Swa};
///
/// let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
/// let batch = Batch::from_columns([2], [3], [1]);
/// let lut: Vec<i64> = (0..33).collect();
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
/// let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
/// let has_lut = true; // known at run time only
/// let summary = with_plan_inputs_choice!(
///     PlanInputs::full(&batch, &table),
///     group: has_lut.then(|| Swa::window(2).with_lut(&lut)),
///     expected: None::<kv_canary::ExpectedTokenPool<'_>>,
///     |inputs| cpu::plan(&shape, &inputs, &mut verify, &mut write)
/// )?;
/// assert_eq!(summary.verify_num_valid, 2);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[macro_export]
macro_rules! with_plan_inputs_choice {
    ($base:expr, group: $group:expr, expected: $expected:expr, |$inputs:ident| $body:expr) => {{
        let base = $base;
        match ($group, $expected) {
            (::core::option::Option::None, ::core::option::Option::None) => {
                let $inputs = base;
                $body
            }
            (::core::option::Option::None, ::core::option::Option::Some(expected)) => {
                let $inputs = base.with_expected(expected);
                $body
            }
            (::core::option::Option::Some(group), ::core::option::Option::None) => {
                let $inputs = base.with_group(group);
                $body
            }
            (::core::option::Option::Some(group), ::core::option::Option::Some(expected)) => {
                let $inputs = base.with_group(group).with_expected(expected);
                $body
            }
        }
    }};
}

/// Host plan inputs whose group and expected-token source are chosen at run time: FULL inputs
/// without expected tokens (batch, table, offset), plus an optional SWA group and an optional
/// pool. Every backend that plans the four typed combinations plans these too
/// (`PlanWith<RuntimePlanInputs>`, see [`backend`](crate::backend)), with the same result as
/// the typed inputs the choice names.
#[derive(Clone, Copy, Debug)]
pub struct RuntimePlanInputs<'a> {
    /// Batch, table and offset (group [`Full`], no expected tokens).
    pub base: PlanInputs<'a, Full, NoExpectedTokens>,
    /// The SWA group (window and LUT), if the call has a LUT; `None` plans [`Full`].
    pub swa: Option<Swa<'a>>,
    /// The expected-token pool with its valid lengths, if any; `None` is [`NoExpectedTokens`].
    pub expected: Option<ExpectedTokenPool<'a>>,
}

impl<'a> RuntimePlanInputs<'a> {
    /// `base` with the group and expected-token source chosen at run time.
    pub fn new(
        base: PlanInputs<'a, Full, NoExpectedTokens>,
        swa: Option<Swa<'a>>,
        expected: Option<ExpectedTokenPool<'a>>,
    ) -> Self {
        RuntimePlanInputs {
            base,
            swa,
            expected,
        }
    }
}
