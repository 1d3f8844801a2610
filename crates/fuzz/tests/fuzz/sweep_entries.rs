//! `step::SweepEntries`: random sequences of `push_node`, `push_row`, `push_table_row`,
//! `through_lut` and `clear` over the engine element types (`i32`, `u64`, `usize`, slots and LUT
//! entries sometimes past `i64::MAX`, positions near `i64::MAX`, rows too short, rows missing,
//! slots past the LUT). After every call the builder must equal a naive model: the walker's rule
//! (slot at depth, chained to the slot before, the first to the parent's last or -1) appended on
//! success, every value translated through the LUT with negatives kept; an error (whose message
//! starts with `kv-canary:`) exactly when the model finds a value it cannot take, the builder
//! unchanged then.

use crate::gen::{ensure, error_label, val};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::step::SweepEntries;
use kv_canary::{Error, IndexElement, ReqToTokenView, VerifyEntry};

/// The model's entry (token check off).
fn entry(slot: i64, expected_position: i64, prev_slot: i64) -> VerifyEntry {
    VerifyEntry {
        slot,
        expected_token: -1,
        expected_position,
        prev_slot,
    }
}

/// An engine element: small (slots of a 64-slot pool and a little past), sometimes an extreme.
trait Element: IndexElement {
    fn draw(u: &mut Unstructured<'_>) -> Result<Self>;
}

impl Element for i32 {
    fn draw(u: &mut Unstructured<'_>) -> Result<i32> {
        Ok(val(u, -1, 64)?.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
    }
}

impl Element for u64 {
    fn draw(u: &mut Unstructured<'_>) -> Result<u64> {
        if u.ratio(1, 16)? {
            return Ok(*u.choose(&[i64::MAX as u64, 1 << 63, u64::MAX])?);
        }
        u.int_in_range(0..=66)
    }
}

impl Element for usize {
    fn draw(u: &mut Unstructured<'_>) -> Result<usize> {
        Ok(u64::draw(u)? as usize)
    }
}

fn draws<T: Element>(u: &mut Unstructured<'_>, n: usize) -> Result<Vec<T>> {
    (0..n).map(|_| T::draw(u)).collect()
}

/// A radix node's first position: its depth, sometimes at the end of `i64` or `usize`.
fn first_position(u: &mut Unstructured<'_>) -> Result<usize> {
    if u.ratio(1, 12)? {
        let edge = i64::MAX as usize;
        return Ok(*u.choose(&[edge - 2, edge, edge.wrapping_add(1), usize::MAX])?);
    }
    u.int_in_range(0..=20)
}

/// The model's chain: `slots` from `first` on, the first chained to `predecessor`; `None` when
/// a value does not fit in `i64`.
fn chain<T: IndexElement>(
    predecessor: Option<i64>,
    first: usize,
    slots: &[T],
) -> Option<Vec<VerifyEntry>> {
    let mut prev = predecessor?;
    let mut out = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let slot = s.to_i64()?;
        let position = i64::try_from(first.checked_add(i)?).ok()?;
        out.push(entry(slot, position, prev));
        prev = slot;
    }
    Some(out)
}

/// The model's translation of `x` through `lut`.
fn translate<L: IndexElement>(lut: &[L], x: i64) -> Option<i64> {
    if x < 0 {
        return Some(x);
    }
    lut.get(usize::try_from(x).ok()?)?.to_i64()
}

/// One call on the builder and the model: the op's name, the builder's result, and the model's
/// entries after the call (`None`: the model expects an error).
type Call = (
    &'static str,
    std::result::Result<(), Error>,
    Option<Vec<VerifyEntry>>,
);

/// One random call of `T` elements (see [`Call`]).
fn call<T: Element>(
    u: &mut Unstructured<'_>,
    built: &mut SweepEntries,
    model: &[VerifyEntry],
) -> Result<Call> {
    let appended = |more: Option<Vec<VerifyEntry>>| {
        more.map(|more| model.iter().copied().chain(more).collect::<Vec<_>>())
    };
    Ok(match u.int_in_range(0..=4)? {
        0 => {
            let parent = if u.ratio(1, 3)? {
                None
            } else {
                Some(T::draw(u)?)
            };
            let first = first_position(u)?;
            let n = u.int_in_range(0..=6)?;
            let slots: Vec<T> = draws(u, n)?;
            let predecessor = match parent {
                None => Some(-1),
                Some(p) => p.to_i64(),
            };
            let result = built.push_node(parent, first, &slots);
            (
                "push_node",
                result,
                appended(chain(predecessor, first, &slots)),
            )
        }
        1 => {
            let n = u.int_in_range(0..=6)?;
            let row: Vec<T> = draws(u, n)?;
            let len = u.int_in_range(0..=n + 1)?;
            let want = row.get(..len).and_then(|cells| chain(Some(-1), 0, cells));
            ("push_row", built.push_row(&row, len), appended(want))
        }
        2 => {
            let (rows, width) = (u.int_in_range(1..=3)?, u.int_in_range(1..=5)?);
            let cells: Vec<T> = draws(u, rows * width)?;
            let view = ReqToTokenView::new(rows, width, &cells).expect("rows x width cells");
            let (r, len) = (u.int_in_range(0..=rows)?, u.int_in_range(0..=width + 1)?);
            let want = view
                .row(r)
                .and_then(|row| row.get(..len))
                .and_then(|cells| chain(Some(-1), 0, cells));
            let result = built.push_table_row(view, r, len);
            ("push_table_row", result, appended(want))
        }
        3 => {
            let n = u.int_in_range(0..=70)?;
            let lut: Vec<T> = draws(u, n)?;
            let want: Option<Vec<VerifyEntry>> = model
                .iter()
                .map(|e| {
                    Some(entry(
                        translate(&lut, e.slot)?,
                        e.expected_position,
                        translate(&lut, e.prev_slot)?,
                    ))
                })
                .collect();
            ("through_lut", built.through_lut(&lut), want)
        }
        _ => {
            built.clear();
            ("clear", Ok(()), Some(Vec::new()))
        }
    })
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let mut built = SweepEntries::new();
    let mut model: Vec<VerifyEntry> = Vec::new();
    let mut last = String::new();
    for _ in 0..u.int_in_range(1..=8)? {
        let (op, result, want) = match u.int_in_range(0..=2)? {
            0 => call::<i32>(u, &mut built, &model)?,
            1 => call::<u64>(u, &mut built, &model)?,
            _ => call::<usize>(u, &mut built, &model)?,
        };
        match (result, want) {
            (Ok(()), Some(want)) => {
                if let Err(message) = ensure(built.as_slice() == want, || {
                    format!("{op}: {:?}, the model {want:?}", built.as_slice())
                }) {
                    return Ok(Err(message));
                }
                model = want;
                last = format!(
                    "{op} ok ({} entries)",
                    match model.len() {
                        0 => "no",
                        1..=8 => "few",
                        _ => "many",
                    }
                );
            }
            (Err(err), None) => {
                let label = match error_label(op, &err) {
                    Ok(label) => label,
                    Err(message) => return Ok(Err(message)),
                };
                if let Err(message) = ensure(built.as_slice() == model, || {
                    format!("{op} failed ({err}) but changed the entries")
                }) {
                    return Ok(Err(message));
                }
                last = label;
            }
            (Ok(()), None) => {
                return Ok(Err(format!("{op}: accepted what the model rejects")));
            }
            (Err(err), Some(_)) => {
                return Ok(Err(format!("{op}: rejected what the model takes: {err}")));
            }
        }
    }
    // The outcome kind: the last call's (its op, and ok or its error's kind).
    Ok(Ok(format!("sweep_entries {last}")))
}
