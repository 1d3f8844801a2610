//! The golden tensor encoding (golden README §2) and typed accessors over it.
//!
//! * `{"dtype": "i64" | "i32", "shape": [..], "data": [..]}`: row-major integers;
//! * `{"dtype": "u8", "shape": [..], "hex": ".."}`: row-major bytes, two lowercase hex digits each;
//! * `null`: an absent optional tensor.
//!
//! Decoding checks that the data fills the shape exactly and that `i32` values fit in `i32`.
//! The accessors ([`Tensor::into_i64`], ...) turn a wrong element type into
//! [`Error::WrongElementType`] and a wrong rank into [`Error::Malformed`], naming the input.

use crate::Error;
use core::fmt;
use serde_json::Value;

/// A short name of a JSON value's type, for error messages (`"integer"` for a number that fits
/// in `i64`, `"number"` for any other number, which no golden field holds).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 64-bit signed integers.
    I64,
    /// 32-bit signed integers.
    I32,
    /// Bytes.
    U8,
}

impl Dtype {
    /// The golden spelling: `"i64"`, `"i32"` or `"u8"`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::I64 => "i64",
            Dtype::I32 => "i32",
            Dtype::U8 => "u8",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor's elements, flat and row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorData {
    /// `i64` elements.
    I64(Vec<i64>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// Bytes.
    U8(Vec<u8>),
}

/// One decoded tensor: its shape and its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The elements, `product(shape)` of them.
    pub data: TensorData,
}

impl Tensor {
    /// A 1-D `i64` tensor.
    pub fn i64(data: Vec<i64>) -> Self {
        Tensor {
            shape: vec![data.len()],
            data: TensorData::I64(data),
        }
    }

    /// A 1-D `i32` tensor.
    pub fn i32(data: Vec<i32>) -> Self {
        Tensor {
            shape: vec![data.len()],
            data: TensorData::I32(data),
        }
    }

    /// A byte tensor of `shape` (row-major `data`, `product(shape)` bytes).
    pub fn u8(shape: Vec<usize>, data: Vec<u8>) -> Self {
        Tensor {
            shape,
            data: TensorData::U8(data),
        }
    }

    /// Decodes one golden tensor; `null` is `Ok(None)`. `what` names it in errors.
    pub fn decode(what: &str, json: &Value) -> Result<Option<Tensor>, Error> {
        if json.is_null() {
            return Ok(None);
        }
        let bad = |detail: String| Error::Malformed {
            detail: format!("golden tensor {what}: {detail}"),
        };
        if json.as_object().is_none() {
            return Err(bad(format!(
                "expected an object or null, got {}",
                type_name(json)
            )));
        }
        let dtype = match json.get("dtype").and_then(Value::as_str) {
            Some("i64") => Dtype::I64,
            Some("i32") => Dtype::I32,
            Some("u8") => Dtype::U8,
            other => return Err(bad(format!("unknown dtype {other:?}"))),
        };
        let shape = json
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("missing shape".into()))?
            .iter()
            .map(|d| d.as_i64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("shape entries must be non-negative integers".into()))?;
        let len = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        let data = match dtype {
            Dtype::U8 => {
                let hex = json
                    .get("hex")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("u8 tensor without a hex string".into()))?;
                TensorData::U8(decode_hex(hex, len).map_err(bad)?)
            }
            Dtype::I64 | Dtype::I32 => {
                let items = json
                    .get("data")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("integer tensor without a data array".into()))?;
                if items.len() != len {
                    return Err(bad(format!(
                        "shape {shape:?} needs {len} elements, data has {}",
                        items.len()
                    )));
                }
                let values = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.as_i64()
                            .ok_or_else(|| bad(format!("data[{i}] is a {}", type_name(v))))
                    })
                    .collect::<Result<Vec<i64>, Error>>()?;
                if dtype == Dtype::I64 {
                    TensorData::I64(values)
                } else {
                    let narrowed = values
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| {
                            i32::try_from(v)
                                .map_err(|_| bad(format!("data[{i}] = {v} does not fit in i32")))
                        })
                        .collect::<Result<Vec<i32>, Error>>()?;
                    TensorData::I32(narrowed)
                }
            }
        };
        Ok(Some(Tensor { shape, data }))
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        match self.data {
            TensorData::I64(_) => Dtype::I64,
            TensorData::I32(_) => Dtype::I32,
            TensorData::U8(_) => Dtype::U8,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match &self.data {
            TensorData::I64(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::U8(v) => v.len(),
        }
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to `i64`, if it exists.
    pub fn get(&self, i: usize) -> Option<i64> {
        match &self.data {
            TensorData::I64(v) => v.get(i).copied(),
            TensorData::I32(v) => v.get(i).map(|&x| i64::from(x)),
            TensorData::U8(v) => v.get(i).map(|&x| i64::from(x)),
        }
    }

    /// Checks that the tensor has `rank` dimensions.
    pub fn require_rank(&self, what: &'static str, rank: usize) -> Result<&Self, Error> {
        if self.shape.len() == rank {
            Ok(self)
        } else {
            Err(Error::Malformed {
                detail: format!(
                    "{what} must be {rank}-D, got shape {:?}",
                    self.shape.as_slice()
                ),
            })
        }
    }

    fn wrong_type(&self, what: &'static str, expected: Dtype) -> Error {
        Error::WrongElementType {
            what,
            expected: expected.name(),
            found: self.dtype().name().to_string(),
        }
    }

    /// The elements of a 1-D `i64` tensor.
    pub fn into_i64(self, what: &'static str) -> Result<Vec<i64>, Error> {
        self.require_rank(what, 1)?;
        match self.data {
            TensorData::I64(v) => Ok(v),
            _ => Err(self.wrong_type(what, Dtype::I64)),
        }
    }

    /// The elements of a 1-D `i32` tensor.
    pub fn into_i32(self, what: &'static str) -> Result<Vec<i32>, Error> {
        self.require_rank(what, 1)?;
        match self.data {
            TensorData::I32(v) => Ok(v),
            _ => Err(self.wrong_type(what, Dtype::I32)),
        }
    }

    /// The one element of an `i32` tensor of shape `[1]` (a plan's scalar fields).
    pub fn into_i32_scalar(self, what: &'static str) -> Result<i32, Error> {
        single(what, self.into_i32(what)?)
    }

    /// The one element of an `i64` tensor of shape `[1]` (the health counters).
    pub fn into_i64_scalar(self, what: &'static str) -> Result<i64, Error> {
        single(what, self.into_i64(what)?)
    }

    /// `(rows, cols, cells)` of a 2-D `i64` tensor (the violation ring).
    pub fn into_i64_table(self, what: &'static str) -> Result<(usize, usize, Vec<i64>), Error> {
        self.require_rank(what, 2)?;
        let (rows, cols) = (self.shape[0], self.shape[1]);
        match self.data {
            TensorData::I64(v) => Ok((rows, cols, v)),
            _ => Err(self.wrong_type(what, Dtype::I64)),
        }
    }

    /// `(shape, bytes)` of a byte tensor of any rank (a real-KV source as dumped).
    pub fn into_u8(self, what: &'static str) -> Result<(Vec<usize>, Vec<u8>), Error> {
        match self.data {
            TensorData::U8(v) => Ok((self.shape, v)),
            _ => Err(self.wrong_type(what, Dtype::U8)),
        }
    }

    /// `(rows, cols, bytes)` of a 2-D byte tensor (the canary buffer).
    pub fn into_u8_table(self, what: &'static str) -> Result<(usize, usize, Vec<u8>), Error> {
        self.require_rank(what, 2)?;
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let (_, bytes) = self.into_u8(what)?;
        Ok((rows, cols, bytes))
    }

    /// `(rows, cols, cells)` of a 2-D `i32` tensor.
    pub fn into_i32_table(self, what: &'static str) -> Result<(usize, usize, Vec<i32>), Error> {
        self.require_rank(what, 2)?;
        let (rows, cols) = (self.shape[0], self.shape[1]);
        match self.data {
            TensorData::I32(v) => Ok((rows, cols, v)),
            _ => Err(self.wrong_type(what, Dtype::I32)),
        }
    }
}

/// The one element of `v` (a tensor of shape `[1]`), else the library's
/// [`LengthMismatch`](kv_canary::Error::LengthMismatch) naming `what`.
fn single<T: Copy>(what: &'static str, v: Vec<T>) -> Result<T, Error> {
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(kv_canary::Error::LengthMismatch {
            what,
            expected: 1,
            found: v.len(),
        }
        .into()),
    }
}

fn decode_hex(hex: &str, len: usize) -> Result<Vec<u8>, String> {
    let bytes = hex.as_bytes();
    if Some(bytes.len()) != len.checked_mul(2) {
        return Err(format!(
            "{len} bytes need {} hex digits, got {}",
            len.saturating_mul(2),
            bytes.len()
        ));
    }
    let nibble = |i: usize| -> Result<u8, String> {
        match bytes[i] {
            d @ b'0'..=b'9' => Ok(d - b'0'),
            d @ b'a'..=b'f' => Ok(d - b'a' + 10),
            d => Err(format!(
                "hex[{i}] = {:?} is not a lowercase hex digit",
                d as char
            )),
        }
    };
    (0..len)
        .map(|i| Ok(nibble(2 * i)? << 4 | nibble(2 * i + 1)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(s: &str) -> Result<Option<Tensor>, Error> {
        Tensor::decode("t", &serde_json::from_str(s).unwrap())
    }

    #[test]
    fn integer_tensors_decode_exactly() {
        let t = decode(r#"{"dtype":"i64","shape":[2],"data":[-2414019407054260458, 3]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t.clone().into_i64("t").unwrap(), [-2414019407054260458, 3]);
        assert_eq!(t.get(0), Some(-2414019407054260458));
        let t = decode(r#"{"dtype":"i32","shape":[2,2],"data":[1,2,3,-4]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t.into_i32_table("t").unwrap(), (2, 2, vec![1, 2, 3, -4]));
        let empty = decode(r#"{"dtype":"i64","shape":[0],"data":[]}"#)
            .unwrap()
            .unwrap();
        assert!(empty.is_empty());
        assert_eq!(decode("null").unwrap(), None);
        let scalar = decode(r#"{"dtype":"i32","shape":[1],"data":[-7]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(scalar.into_i32_scalar("s").unwrap(), -7);
    }

    /// serde_json parses integers into `i64` exactly: the extremes, and values that `f64`
    /// cannot hold, come back unchanged; anything outside `i64` or with a fraction or exponent
    /// is no integer and is rejected by the decoder, never rounded.
    #[test]
    fn integers_are_exact_over_the_whole_i64_range() {
        let values = [
            i64::MIN,
            i64::MIN + 1,
            -2414019407054260458,
            -9007199254740993, // -(2^53 + 1): not representable in f64
            -1,
            0,
            1,
            9007199254740993,
            i64::MAX - 1,
            i64::MAX,
        ];
        let text = format!(
            r#"{{"dtype":"i64","shape":[{}],"data":{values:?}}}"#,
            values.len()
        );
        let t = decode(&text).unwrap().unwrap();
        assert_eq!(t.into_i64("t").unwrap(), values);
        for (number, kind) in [
            ("9223372036854775808", "data[0] is a number"), // i64::MAX + 1
            ("-9223372036854775809", "data[0] is a number"), // i64::MIN - 1
            ("1.5", "data[0] is a number"),
            ("1e3", "data[0] is a number"),
            ("-0.0", "data[0] is a number"),
        ] {
            let text = format!(r#"{{"dtype":"i64","shape":[1],"data":[{number}]}}"#);
            let err = decode(&text).unwrap_err().to_string();
            assert!(err.contains(kind), "{number}: {err}");
        }
    }

    #[test]
    fn byte_tensors_decode_hex() {
        let t = decode(r#"{"dtype":"u8","shape":[2,2],"hex":"00a5ff10"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t.data, TensorData::U8(vec![0, 0xa5, 0xff, 0x10]));
        assert_eq!(t.dtype(), Dtype::U8);
        let err = decode(r#"{"dtype":"u8","shape":[2],"hex":"00A5"}"#).unwrap_err();
        assert!(err.to_string().contains("lowercase hex"), "{err}");
        let err = decode(r#"{"dtype":"u8","shape":[2],"hex":"00a"}"#).unwrap_err();
        assert!(err.to_string().contains("4 hex digits, got 3"), "{err}");
    }

    #[test]
    fn malformed_tensors_name_the_problem() {
        let cases = [
            (
                r#"{"dtype":"i64","shape":[3],"data":[1,2]}"#,
                "needs 3 elements",
            ),
            (
                r#"{"dtype":"i32","shape":[1],"data":[2147483648]}"#,
                "fit in i32",
            ),
            (r#"{"dtype":"f32","shape":[1],"data":[1]}"#, "unknown dtype"),
            (r#"{"dtype":"i64","shape":[-1],"data":[]}"#, "non-negative"),
            (
                r#"{"dtype":"i64","shape":[1],"data":[true]}"#,
                "data[0] is a boolean",
            ),
            (r#"[1]"#, "expected an object"),
        ];
        for (text, needle) in cases {
            let err = decode(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn accessors_reject_wrong_types_and_ranks() {
        let t = decode(r#"{"dtype":"i64","shape":[2],"data":[1,2]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            t.clone().into_i32("pool_out").unwrap_err(),
            Error::WrongElementType {
                what: "pool_out",
                expected: "i32",
                found: "i64".into()
            }
        );
        assert!(t.clone().into_i32_scalar("n").is_err());
        let err = t.into_i32_table("req_to_token").unwrap_err().to_string();
        assert_eq!(err, "kv-canary: req_to_token must be 2-D, got shape [2]");
        let two_d = decode(r#"{"dtype":"i64","shape":[1,2],"data":[1,2]}"#)
            .unwrap()
            .unwrap();
        assert!(two_d.clone().into_i64("flat_in").is_err());
        assert_eq!(two_d.into_i64_table("ring").unwrap(), (1, 2, vec![1, 2]));
        let bytes = decode(r#"{"dtype":"u8","shape":[1,2],"hex":"0aff"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            bytes.clone().into_u8_table("buf").unwrap(),
            (1, 2, vec![10, 255])
        );
        assert!(bytes.into_i64_scalar("c").is_err());
        let counter = decode(r#"{"dtype":"i64","shape":[1],"data":[-9]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(counter.clone().into_i64_scalar("c").unwrap(), -9);
        assert!(counter.into_u8("buf").is_err());
    }
}
