//! Where the crate deliberately differs from SGLang's reference, and how the runner knows it.
//!
//! On some malformed inputs the reference skips work silently where the crate returns a named
//! error (the README's table "Where the crate differs from SGLang's reference" gives the
//! reasons). A golden case made by the reference on such inputs records outputs; the crate's
//! error is then accepted **only** when it is the listed error of the listed op and the case's
//! inputs are of the listed kind ([`divergence`]); any other error of a case with outputs fails.

use crate::case::{Case, Fields};
use crate::Error;

/// One documented divergence.
#[derive(Clone, Copy, Debug)]
pub struct Divergence {
    /// The golden op.
    pub op: &'static str,
    /// The crate's error variant ([`Error::variant_name`]).
    pub variant: &'static str,
    /// What the inputs are, what the reference does, and why the crate keeps its error.
    pub what: &'static str,
    /// Whether a case's inputs are of this kind.
    applies: fn(&Fields<'_>) -> Option<bool>,
}

/// The four divergences (README, "Where the crate differs from SGLang's reference").
pub const DIVERGENCES: &[Divergence] = &[
    Divergence {
        op: "write",
        variant: "MalformedOffsets",
        what: "write_offsets decrease inside the active requests: the reference skips a request \
               whose token count is <= 0 (spec §4); the crate refuses the plan, which the plan op \
               never makes (offsets are running sums), so it is corrupted",
        applies: |inputs| {
            let (offsets, active) = write_offsets(inputs)?;
            let at = first_decrease(&offsets[..=active])?;
            Some(offsets[at..=active].iter().any(|&o| o != 0))
        },
    },
    Divergence {
        op: "write",
        variant: "MalformedOffsets",
        what: "write_num_valid_reqs larger than the batch, over the offsets the plan zeroed past \
               it: the reference returns early; the crate refuses a request count the plan op \
               never writes (it writes bs)",
        applies: |inputs| {
            let (offsets, active) = write_offsets(inputs)?;
            let at = first_decrease(&offsets[..=active])?;
            Some(offsets[at..=active].iter().all(|&o| o == 0))
        },
    },
    Divergence {
        op: "write",
        variant: "ZeroCapacity",
        what: "a write of zero-length inputs: the reference only bumps the kernel counter (spec \
               §7); the crate's write entry capacity is positive, as every capacity is",
        applies: |inputs| {
            let ids = inputs.required_tensor("input_ids").ok()?;
            Some(ids.is_empty())
        },
    },
    Divergence {
        op: "scatter_req_token_ids",
        variant: "MalformedOffsets",
        what: "scatter offsets that decrease: the reference skips the request (spec §6); the \
               crate refuses offsets that are no running sums",
        applies: |inputs| {
            let offsets = inputs
                .required_tensor("offsets")
                .ok()?
                .into_i64("offsets")
                .ok()?;
            Some(first_decrease(&offsets).is_some())
        },
    },
];

/// The write plan's offsets and the index of its last active offset
/// (`min(write_num_valid_reqs, capacity)`), or `None` when the inputs do not decode.
fn write_offsets(inputs: &Fields<'_>) -> Option<(Vec<i64>, usize)> {
    let plan = inputs.object("write_plan").ok()?;
    let offsets = plan
        .required_tensor("write_offsets")
        .ok()?
        .into_i64("write_offsets")
        .ok()?;
    let requests = plan
        .required_tensor("write_num_valid_reqs")
        .ok()?
        .into_i32_scalar("write_num_valid_reqs")
        .ok()?;
    let active = usize::try_from(requests)
        .ok()?
        .min(offsets.len().checked_sub(1)?);
    Some((offsets, active))
}

/// The index of the first element smaller than the one before it.
fn first_decrease(values: &[i64]) -> Option<usize> {
    values.windows(2).position(|w| w[1] < w[0]).map(|i| i + 1)
}

/// The documented divergence that accepts `error` for `case` (a case the reference completed),
/// if there is one.
pub fn divergence(case: &Case, error: &Error) -> Option<&'static Divergence> {
    let variant = error.variant_name();
    let inputs = case.inputs();
    DIVERGENCES
        .iter()
        .find(|d| d.op == case.op && d.variant == variant && (d.applies)(&inputs) == Some(true))
}
