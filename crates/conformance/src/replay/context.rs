//! The launch context shared by `write` and `verify` cases (golden README §5.5): the state a
//! launch mutates (canary buffer, violation ring and its write index, health counters) and its
//! settings (launch tag, real-KV sources and mode, chain-position assert flag), decoded into the
//! crate's types; the outputs those five state tensors produce; and [`replay_launch`], the replay
//! both ops share around their one launch.

use super::{capacity, Replayed};
use crate::case::{Case, Fields};
use crate::compare::Produced;
use crate::tensor::{Tensor, TensorData};
use crate::Error;
use kv_canary::consts::VIOLATION_FIELDS;
use kv_canary::Capacity;
use kv_canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, RealKv, RealKvHashMode,
    RealKvParams, RealKvSource, RealKvSources, UncheckedCapacity, ViolationRing,
};
use kv_canary_testkit::HostBackend;

/// What a launch mutates.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct State {
    pub buf: CanaryBuffer<UncheckedCapacity>,
    pub ring: ViolationRing<UncheckedCapacity>,
    pub counters: HealthCounters,
}

/// One real-KV source as dumped: its bytes, shape and parameters.
struct DumpedSource {
    bytes: Vec<u8>,
    shape: Vec<usize>,
    params: RealKvParams,
}

/// A launch's settings; [`Settings::launch`] borrows the source bytes.
struct Settings {
    tag: LaunchTag,
    mode: RealKvHashMode,
    sources: Vec<DumpedSource>,
    chain_position_assert: ChainPositionAssert,
}

impl Settings {
    /// The typed launch settings of `B`: every source validated, at most four of them
    /// ([`TooManyRealKvSources`](kv_canary::Error::TooManyRealKvSources) otherwise).
    pub fn launch<B: HostBackend>(&self) -> Result<B::Settings<'_>, Error> {
        let sources = self
            .sources
            .iter()
            .map(|s| RealKvSource::from_shape(&s.bytes, &s.shape, s.params))
            .collect::<Result<Vec<_>, kv_canary::Error>>()?;
        let real_kv = RealKv::new(self.mode, RealKvSources::try_from_slice(&sources)?);
        Ok(B::settings(
            self.tag,
            B::host_real_kv(real_kv),
            self.chain_position_assert,
        ))
    }
}

/// Replays one launch case (`write` or `verify`) on a backend `B`: decodes the context, then the
/// op's own inputs with `decode_op`, then the launch settings (the first error is the replay's);
/// runs `launch` on the state ([`run`]); and, for a backend that records rows out of order,
/// aligns the rows it appended with the golden ones ([`realign`]).
pub(super) fn replay_launch<B: HostBackend, T>(
    case: &Case,
    decode_op: impl FnOnce(&Fields<'_>) -> Result<T, Error>,
    launch: impl FnOnce(&T, &B::Settings<'_>, &mut State) -> Result<(), Error>,
) -> Replayed {
    let inputs = case.inputs();
    let decoded =
        decode(&inputs).and_then(|(state, settings)| Ok((state, settings, decode_op(&inputs)?)));
    let (mut state, settings, op) = match decoded {
        Ok(d) => d,
        Err(e) => return Replayed::Error(e),
    };
    let settings = match settings.launch::<B>() {
        Ok(l) => l,
        Err(e) => return Replayed::Error(e),
    };
    let initial_index = state.ring.write_index();
    let replayed = run(&mut state, |st| launch(&op, &settings, st));
    if B::RECORDS_ROWS_IN_ORDER {
        replayed
    } else {
        realign(case, initial_index, &mut state, replayed)
    }
}

/// Decodes `inputs.context`.
fn decode(inputs: &Fields<'_>) -> Result<(State, Settings), Error> {
    let ctx = inputs.object("context")?;
    let (slots, stride, bytes) = ctx
        .required_tensor("canary_buf")?
        .into_u8_table("canary_buf")?;
    let buf = CanaryBuffer::from_bytes(capacity("canary_buf slots", slots as i64)?, stride, bytes)?;
    let (rows, cols, cells) = ctx
        .required_tensor("violation_ring")?
        .into_i64_table("violation_ring")?;
    if cols != VIOLATION_FIELDS {
        return Err(kv_canary::Error::LengthMismatch {
            what: "violation_ring row",
            expected: VIOLATION_FIELDS,
            found: cols,
        }
        .into());
    }
    let index = ctx
        .required_tensor("violation_write_index")?
        .into_i32_scalar("violation_write_index")?;
    let ring = ViolationRing::from_parts(capacity("ring_capacity", rows as i64)?, cells, index)?;
    let counter = |key: &'static str| ctx.required_tensor(key)?.into_i64_scalar(key);
    let counters =
        HealthCounters::from_parts(counter("slot_run_counter")?, counter("kernel_run_counter")?);

    let sources = ctx
        .array("real_kv_sources")?
        .iter()
        .map(|item| {
            let f = Fields::new("real_kv_sources[]", item);
            let (shape, bytes) = f
                .required_tensor("tensor")?
                .into_u8("real_kv_sources.tensor")?;
            Ok(DumpedSource {
                bytes,
                shape,
                params: RealKvParams::new(
                    f.int("page_size")?,
                    f.int("num_bytes_per_token")?,
                    f.int("read_bytes")?,
                ),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let flag = ctx
        .required_tensor("enable_chain_position_assert")?
        .into_i32_scalar("enable_chain_position_assert")?;
    let settings = Settings {
        tag: LaunchTag::try_from(ctx.int("kernel_kind")?)?,
        mode: RealKvHashMode::try_from(ctx.int("real_kv_hash_mode")?)?,
        sources,
        chain_position_assert: ChainPositionAssert::from_flag(flag),
    };
    Ok((
        State {
            buf,
            ring,
            counters,
        },
        settings,
    ))
}

/// The five state tensors, by their golden output names.
fn outputs(state: &State) -> Produced {
    let ring_rows = state.ring.capacity().get();
    vec![
        (
            "canary_buf".into(),
            Tensor::u8(
                vec![state.buf.num_slots(), state.buf.stride().get()],
                state.buf.as_bytes().to_vec(),
            ),
        ),
        (
            "violation_ring".into(),
            Tensor {
                shape: vec![ring_rows, VIOLATION_FIELDS],
                data: TensorData::I64(state.ring.rows_flat().to_vec()),
            },
        ),
        (
            "violation_write_index".into(),
            Tensor::i32(vec![state.ring.write_index()]),
        ),
        (
            "slot_run_counter".into(),
            Tensor::i64(vec![state.counters.slot_run_counter()]),
        ),
        (
            "kernel_run_counter".into(),
            Tensor::i64(vec![state.counters.kernel_run_counter()]),
        ),
    ]
}

/// For a backend that records rows out of order: when the rows it appended in this launch are,
/// as a multiset, the rows the golden outputs appended, put them in the golden order so that the
/// full comparison passes; otherwise leave them, so that it reports the first difference.
/// `initial_index` is the write index before the launch.
fn align_new_rows(expected_ring: Option<&[i64]>, initial_index: i32, state: &mut State) {
    let Some(expected) = expected_ring else {
        return;
    };
    let cap = state.ring.capacity().get();
    let start = usize::try_from(initial_index).unwrap_or(0).min(cap);
    let end = state.ring.stored_len();
    let span = start * VIOLATION_FIELDS..end * VIOLATION_FIELDS;
    let mut rows = state.ring.rows_flat().to_vec();
    let (Some(want), Some(have)) = (expected.get(span.clone()), rows.get(span.clone())) else {
        return;
    };
    let sorted = |rows: &[i64]| {
        let mut v: Vec<&[i64]> = rows.chunks_exact(VIOLATION_FIELDS).collect();
        v.sort_unstable();
        v.concat()
    };
    if sorted(want) == sorted(have) {
        rows[span].copy_from_slice(want);
        // The same capacity, length and write index as the ring had: rebuilding cannot fail.
        if let Ok(ring) =
            ViolationRing::from_parts(state.ring.capacity(), rows, state.ring.write_index())
        {
            state.ring = ring;
        }
    }
}

/// [`align_new_rows`] against the case's golden ring, then the outputs again; errors pass
/// through.
fn realign(case: &Case, initial_index: i32, state: &mut State, replayed: Replayed) -> Replayed {
    if !matches!(replayed, Replayed::Outputs(_)) {
        return replayed;
    }
    let golden = case
        .outputs
        .as_ref()
        .and_then(|o| o.get("violation_ring"))
        .and_then(|j| Tensor::decode("violation_ring", j).ok().flatten());
    let rows = match golden.map(|t| t.data) {
        Some(TensorData::I64(v)) => Some(v),
        _ => None,
    };
    align_new_rows(rows.as_deref(), initial_index, state);
    Replayed::Outputs(outputs(state))
}

/// Runs `op` on `state`; an error leaves `state` as it was or is reported as a mutation.
fn run(state: &mut State, op: impl FnOnce(&mut State) -> Result<(), Error>) -> Replayed {
    let before = state.clone();
    match op(state) {
        Ok(()) => Replayed::Outputs(outputs(state)),
        Err(error) => match mutated(&before, state) {
            Some(buffer) => Replayed::MutatedThenFailed { error, buffer },
            None => Replayed::Error(error),
        },
    }
}

fn mutated(before: &State, after: &State) -> Option<&'static str> {
    if before.buf != after.buf {
        Some("canary_buf")
    } else if before.ring != after.ring {
        Some("violation_ring")
    } else if before.counters != after.counters {
        Some("health counters")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rows: Vec<i64>, index: i32) -> State {
        let cap = |n| UncheckedCapacity::new("c", n).unwrap();
        State {
            buf: CanaryBuffer::try_with_capacity(cap(1)).unwrap(),
            ring: ViolationRing::from_parts(cap(rows.len() / 8), rows, index).unwrap(),
            counters: HealthCounters::new(),
        }
    }

    #[test]
    fn new_rows_in_another_order_are_aligned_to_the_golden_order() {
        let (a, b, old) = ([1i64; 8], [2i64; 8], [9i64; 8]);
        let golden: Vec<i64> = [old, a, b, [0; 8]].concat();
        let mut s = state([old, b, a, [0; 8]].concat(), 3);
        align_new_rows(Some(&golden), 1, &mut s);
        assert_eq!(s.ring.rows_flat(), &golden[..]);
    }

    #[test]
    fn different_rows_are_left_for_the_comparison_to_report() {
        let (a, b, c) = ([1i64; 8], [2i64; 8], [3i64; 8]);
        let golden: Vec<i64> = [a, b].concat();
        let mut s = state([c, a].concat(), 2);
        align_new_rows(Some(&golden), 0, &mut s);
        assert_eq!(s.ring.rows_flat(), &[c, a].concat()[..]);
    }
}
