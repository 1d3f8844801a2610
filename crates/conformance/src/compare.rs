//! Full comparison of a replay's outputs with a case's golden `outputs`.
//!
//! Every tensor in the golden outputs is compared whole — untouched tails included, since an op
//! that writes where it must not is wrong (golden README §4) — and every tensor the replay
//! produced must appear in the golden outputs. The first difference is reported as
//! `path[index] expected X got Y`.

use crate::tensor::{Tensor, TensorData};
use serde_json::Value;

/// One output of a replay: its path in the golden `outputs` object (members joined by `.`,
/// e.g. `verify_plan.verify_slot_indices`) and its contents.
pub type Produced = Vec<(String, Tensor)>;

/// `Ok` when `got` holds exactly the tensors of `expected`, element for element; otherwise the
/// first difference in golden order.
pub fn compare_outputs(expected: &Value, got: &Produced) -> Result<(), String> {
    let mut leaves = Vec::new();
    collect_leaves("", expected, &mut leaves)?;
    for (path, want) in &leaves {
        let have = got
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                format!("{path} is in the golden outputs but the replay did not produce it")
            })?;
        compare_tensor(path, want, have)?;
    }
    if let Some((path, _)) = got
        .iter()
        .find(|(p, _)| !leaves.iter().any(|(q, _)| q == p))
    {
        return Err(format!(
            "{path} was produced by the replay but is absent from the golden outputs"
        ));
    }
    Ok(())
}

fn collect_leaves(path: &str, json: &Value, out: &mut Vec<(String, Tensor)>) -> Result<(), String> {
    let is_tensor = json.get("dtype").is_some();
    match json.as_object() {
        Some(members) if !is_tensor => {
            for (key, value) in members {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                collect_leaves(&sub, value, out)?;
            }
            Ok(())
        }
        _ => match Tensor::decode(path, json).map_err(|e| e.to_string())? {
            Some(t) => {
                out.push((path.to_string(), t));
                Ok(())
            }
            None => Err(format!("{path}: golden output is null")),
        },
    }
}

/// Compares one tensor: dtype, shape, then elements.
pub fn compare_tensor(path: &str, want: &Tensor, have: &Tensor) -> Result<(), String> {
    let first_diff = match (&want.data, &have.data) {
        (TensorData::I64(a), TensorData::I64(b)) => first_difference(a, b),
        (TensorData::I32(a), TensorData::I32(b)) => first_difference(a, b),
        (TensorData::U8(a), TensorData::U8(b)) => first_difference(a, b),
        _ => {
            return Err(format!(
                "{path} dtype expected {} got {}",
                want.dtype(),
                have.dtype()
            ))
        }
    };
    if want.shape != have.shape || want.len() != have.len() {
        return Err(format!(
            "{path} shape expected {:?} ({} elements) got {:?} ({} elements)",
            want.shape,
            want.len(),
            have.shape,
            have.len()
        ));
    }
    match first_diff {
        None => Ok(()),
        Some(i) => {
            let shown = |t: &Tensor| match t.data {
                TensorData::U8(_) => format!("0x{:02x}", t.get(i).unwrap_or_default()),
                _ => t.get(i).unwrap_or_default().to_string(),
            };
            Err(format!(
                "{path}{} expected {} got {}",
                index_string(&want.shape, i),
                shown(want),
                shown(have)
            ))
        }
    }
}

fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// `[i]` for 1-D tensors, `[row][col]` for 2-D ones, and so on (row-major).
fn index_string(shape: &[usize], flat: usize) -> String {
    let mut parts = vec![0usize; shape.len().max(1)];
    let mut rest = flat;
    for (d, &n) in shape.iter().enumerate().rev() {
        if d == 0 || n == 0 {
            parts[d] = rest;
        } else {
            parts[d] = rest % n;
            rest /= n;
        }
    }
    parts.iter().map(|p| format!("[{p}]")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    const PLAN: &str = r#"{"verify_plan":{"verify_slot_indices":{"dtype":"i64","shape":[3],"data":[16,-7,-7]},
        "enable":{"dtype":"i32","shape":[1],"data":[1]}}}"#;

    fn produced(slots: Vec<i64>, enable: i32) -> Produced {
        vec![
            ("verify_plan.verify_slot_indices".into(), Tensor::i64(slots)),
            ("verify_plan.enable".into(), Tensor::i32(vec![enable])),
        ]
    }

    #[test]
    fn equal_outputs_pass() {
        assert_eq!(
            compare_outputs(&golden(PLAN), &produced(vec![16, -7, -7], 1)),
            Ok(())
        );
    }

    #[test]
    fn a_written_tail_is_reported_with_its_index() {
        assert_eq!(
            compare_outputs(&golden(PLAN), &produced(vec![16, -7, 0], 1)),
            Err("verify_plan.verify_slot_indices[2] expected -7 got 0".into())
        );
        assert_eq!(
            compare_outputs(&golden(PLAN), &produced(vec![16, -7, -7], 0)),
            Err("verify_plan.enable[0] expected 1 got 0".into())
        );
    }

    #[test]
    fn missing_extra_and_mistyped_outputs_fail() {
        let mut short = produced(vec![16, -7, -7], 1);
        short.pop();
        assert!(compare_outputs(&golden(PLAN), &short)
            .unwrap_err()
            .contains("verify_plan.enable is in the golden outputs"));
        let mut extra = produced(vec![16, -7, -7], 1);
        extra.push(("write_plan.x".into(), Tensor::i32(vec![0])));
        assert!(compare_outputs(&golden(PLAN), &extra)
            .unwrap_err()
            .contains("write_plan.x was produced"));
        let mut mistyped = produced(vec![16, -7, -7], 1);
        mistyped[1].1 = Tensor::i64(vec![1]);
        assert_eq!(
            compare_outputs(&golden(PLAN), &mistyped),
            Err("verify_plan.enable dtype expected i32 got i64".into())
        );
        assert!(compare_outputs(&golden(PLAN), &produced(vec![16, -7], 1))
            .unwrap_err()
            .contains("shape expected [3] (3 elements) got [2] (2 elements)"));
    }

    #[test]
    fn byte_tensors_report_row_and_column() {
        let want = Tensor::u8(vec![2, 4], vec![0; 8]);
        let mut bytes = vec![0; 8];
        bytes[6] = 0xa5;
        let have = Tensor::u8(vec![2, 4], bytes);
        assert_eq!(
            compare_tensor("canary_buf", &want, &have),
            Err("canary_buf[1][2] expected 0x00 got 0xa5".into())
        );
    }
}
