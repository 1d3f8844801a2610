//! Value generators: mostly small values around the interesting range, sometimes extremes.

use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::{Error, UncheckedCapacity};

/// Values at the edges of the integer types the API stores.
const EXTREMES: [i64; 15] = [
    i64::MIN,
    i64::MIN + 1,
    -(1 << 40),
    i32::MIN as i64 - 1,
    i32::MIN as i64,
    -2,
    -1,
    0,
    1,
    i32::MAX as i64 - 1,
    i32::MAX as i64,
    1 << 31,
    1 << 40,
    i64::MAX - 1,
    i64::MAX,
];

/// A value in `[lo - 2, hi + 2]` most of the time, an extreme one in 16.
pub fn val(u: &mut Unstructured<'_>, lo: i64, hi: i64) -> Result<i64> {
    if u.ratio(1, 16)? {
        return Ok(*u.choose(&EXTREMES)?);
    }
    u.int_in_range(lo.saturating_sub(2)..=hi.saturating_add(2))
}

/// As [`val`], for `i32` columns.
pub fn val32(u: &mut Unstructured<'_>, lo: i64, hi: i64) -> Result<i32> {
    Ok(val(u, lo, hi)?.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
}

/// An `i32` count: mostly in `[lo - 2, hi + 2]`, sometimes an `i32` extreme.
pub fn count32(u: &mut Unstructured<'_>, lo: i32, hi: i32) -> Result<i32> {
    if u.ratio(1, 16)? {
        return Ok(*u.choose(&[i32::MIN, -1, i32::MAX - 1, i32::MAX])?);
    }
    u.int_in_range(lo.saturating_sub(2)..=hi.saturating_add(2))
}

/// `n` values from [`val`].
pub fn vals(u: &mut Unstructured<'_>, n: usize, lo: i64, hi: i64) -> Result<Vec<i64>> {
    (0..n).map(|_| val(u, lo, hi)).collect()
}

/// A length of `n` most of the time, sometimes one off or zero (a shape mistake).
pub fn len_near(u: &mut Unstructured<'_>, n: usize) -> Result<usize> {
    Ok(match u.int_in_range(0..=23)? {
        0 => n + 1,
        1 => n.saturating_sub(1),
        2 => 0,
        _ => n,
    })
}

/// Sizes a constructor may be asked for: small ones, or ones no machine can allocate (so that a
/// product of two is 0, at most 64, or at least 2^40, never a size that would really allocate
/// gigabytes).
pub fn size(u: &mut Unstructured<'_>) -> Result<usize> {
    if u.ratio(1, 4)? {
        Ok(*u.choose(&[
            1 << 40,
            1 << 44,
            1 << 62,
            1 << 63,
            usize::MAX / 8 + 1,
            usize::MAX - 1,
            usize::MAX,
        ])?)
    } else {
        u.int_in_range(0..=8)
    }
}

/// A run-time capacity of `n` (`n > 0`).
pub fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n).expect("n > 0")
}

/// `n` or, one time in 16, `n + 1` (a buffer of another shape).
pub fn cap_near(u: &mut Unstructured<'_>, what: &'static str, n: usize) -> Result<usize> {
    let _ = what;
    Ok(if u.ratio(1, 16)? { n + 1 } else { n })
}

/// Checks an error's message and returns its kind (the variant name) as the case's label.
pub fn error_label(op: &str, e: &Error) -> Verdict {
    let message = e.to_string();
    if !message.starts_with("kv-canary:") {
        return Err(format!(
            "{op}: message without the kv-canary: prefix: {message:?}"
        ));
    }
    let debug = format!("{e:?}");
    let kind: String = debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Ok(format!("{op} err {kind}"))
}

/// Fails with `message` unless `ok`.
pub fn ensure(ok: bool, message: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(message())
    }
}
