//! The golden file and case model (golden README §1, §3) and typed access to a case's fields.

use crate::tensor::{type_name, Tensor};
use crate::Error;
use serde::Deserialize;
use serde_json::Value;

/// The `format` every golden file declares.
pub const FORMAT: &str = "kv-canary-golden";
/// The `format_version` this runner reads.
pub const FORMAT_VERSION: i64 = 1;

/// One golden file: a header and its cases, in file order.
#[derive(Clone, Debug)]
pub struct GoldenFile {
    /// The header's `file` field (`"plan"`, `"errors"`, ...).
    pub file: String,
    /// The fill value of fresh plan buffers (`-7`).
    pub marker: i64,
    /// The cases, in file order.
    pub cases: Vec<Case>,
}

/// A golden file as written: the header's fields and the cases (unknown fields are ignored).
#[derive(Deserialize)]
struct RawFile {
    format: String,
    format_version: i64,
    file: String,
    marker: i64,
    count: i64,
    cases: Vec<Case>,
}

/// The reference's error for an error case (`errors.json`, golden README §5.7).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct GoldenError {
    /// `ValueError` or `TypeError`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The reference's exact message (wording differs from ours; values must agree).
    pub message: String,
    /// The reference entry point that raised.
    pub raised_by: String,
}

/// One recorded call of one op (unknown fields such as `description` are ignored; `null` is
/// the same as absent).
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    /// Unique name across all files, e.g. `plan/random_005_bs17`.
    pub name: String,
    /// The op: `plan`, `write`, `verify`, `scatter_req_token_ids`, `real_kv_source_new`,
    /// `verify_plan_allocate`, `write_plan_allocate`.
    pub op: String,
    /// The flow id (pipeline cases only).
    pub flow: Option<String>,
    /// Position within the flow (pipeline cases only).
    pub step: Option<i64>,
    /// Sorted labels.
    pub tags: Vec<String>,
    /// Every argument and initial buffer content.
    pub inputs: Value,
    /// Every buffer after the call; `None` for error cases.
    pub outputs: Option<Value>,
    /// The expected error (error cases only).
    pub error: Option<GoldenError>,
    /// The values the expected error names (error cases only).
    pub offending_values: Option<Value>,
}

impl GoldenFile {
    /// Parses one golden file. `source` names it in errors.
    pub fn parse(source: &str, text: &str) -> Result<GoldenFile, Error> {
        let bad = |detail: String| Error::Malformed {
            detail: format!("{source}: {detail}"),
        };
        let raw: RawFile = serde_json::from_str(text).map_err(|e| bad(format!("JSON {e}")))?;
        if raw.format != FORMAT {
            return Err(bad(format!(
                "format is {:?}, expected {FORMAT:?}",
                raw.format
            )));
        }
        if raw.format_version != FORMAT_VERSION {
            return Err(bad(format!(
                "format_version is {}, this runner reads {FORMAT_VERSION}",
                raw.format_version
            )));
        }
        if usize::try_from(raw.count) != Ok(raw.cases.len()) {
            return Err(bad(format!(
                "count is {} but there are {} cases",
                raw.count,
                raw.cases.len()
            )));
        }
        if let Some(c) = raw
            .cases
            .iter()
            .find(|c| c.error.is_some() == c.outputs.is_some())
        {
            return Err(c
                .inputs()
                .malformed("a case has exactly one of `outputs` and `error`"));
        }
        Ok(GoldenFile {
            file: raw.file,
            marker: raw.marker,
            cases: raw.cases,
        })
    }
}

impl Case {
    /// Typed access to `inputs`.
    pub fn inputs(&self) -> Fields<'_> {
        Fields::new(&self.name, &self.inputs)
    }
}

/// Typed access to the members of one JSON object; errors name the case and the key.
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    context: &'a str,
    json: &'a Value,
}

impl<'a> Fields<'a> {
    /// Wraps `json`; `context` (a case name) prefixes errors.
    pub fn new(context: &'a str, json: &'a Value) -> Self {
        Fields { context, json }
    }

    /// A [`Error::Malformed`] naming the context.
    pub fn malformed(&self, detail: &str) -> Error {
        Error::Malformed {
            detail: format!("golden {}: {detail}", self.context),
        }
    }

    /// The member `key`; a missing key is an error.
    pub fn get(&self, key: &str) -> Result<&'a Value, Error> {
        self.json
            .get(key)
            .ok_or_else(|| self.malformed(&format!("missing field `{key}`")))
    }

    fn typed<T>(
        &self,
        key: &str,
        kind: &str,
        f: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T, Error> {
        let v = self.get(key)?;
        f(v).ok_or_else(|| {
            self.malformed(&format!(
                "field `{key}` must be {kind}, got {}",
                type_name(v)
            ))
        })
    }

    /// The integer member `key`.
    pub fn int(&self, key: &str) -> Result<i64, Error> {
        self.typed(key, "an integer", Value::as_i64)
    }

    /// The boolean member `key`.
    pub fn bool(&self, key: &str) -> Result<bool, Error> {
        self.typed(key, "a boolean", Value::as_bool)
    }

    /// The string member `key`.
    pub fn str(&self, key: &str) -> Result<&'a str, Error> {
        self.typed(key, "a string", Value::as_str)
    }

    /// The array member `key`.
    pub fn array(&self, key: &str) -> Result<&'a [Value], Error> {
        self.typed(key, "an array", |v| v.as_array().map(Vec::as_slice))
    }

    /// The object member `key`, as fields.
    pub fn object(&self, key: &str) -> Result<Fields<'a>, Error> {
        let v = self.typed(key, "an object", |v| v.as_object().map(|_| v))?;
        Ok(Fields::new(self.context, v))
    }

    /// The tensor member `key` (`null` is `None`).
    pub fn tensor(&self, key: &str) -> Result<Option<Tensor>, Error> {
        Tensor::decode(&format!("{}.{key}", self.context), self.get(key)?)
    }

    /// The tensor member `key`, which must not be `null`.
    pub fn required_tensor(&self, key: &str) -> Result<Tensor, Error> {
        self.tensor(key)?
            .ok_or_else(|| self.malformed(&format!("field `{key}` must be a tensor, got null")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"format":"kv-canary-golden","format_version":1,"file":"demo","marker":-7,"count":2,"cases":[
{"name":"demo/a","op":"plan","flow":null,"step":null,"tags":["plan"],"inputs":{"n":3,"t":{"dtype":"i64","shape":[1],"data":[-1]}},"outputs":{}},
{"name":"demo/b","op":"write_plan_allocate","flow":"f1","step":2,"tags":[],"inputs":{"write_req_capacity":0},"outputs":null,
 "error":{"type":"ValueError","message":"kv-canary: x","raised_by":"WritePlan.allocate"},"offending_values":{"write_req_capacity":0}}
]}"#;

    #[test]
    fn a_file_parses_into_cases() {
        let f = GoldenFile::parse("demo.json", FILE).unwrap();
        assert_eq!((f.file.as_str(), f.marker, f.cases.len()), ("demo", -7, 2));
        let a = &f.cases[0];
        assert_eq!((a.name.as_str(), a.op.as_str()), ("demo/a", "plan"));
        assert_eq!((a.flow.as_deref(), a.step), (None, None));
        assert_eq!(a.inputs().int("n").unwrap(), 3);
        assert_eq!(
            a.inputs()
                .required_tensor("t")
                .unwrap()
                .into_i64("t")
                .unwrap(),
            [-1]
        );
        let b = &f.cases[1];
        assert_eq!((b.flow.as_deref(), b.step), (Some("f1"), Some(2)));
        assert!(b.outputs.is_none());
        assert_eq!(b.error.as_ref().unwrap().raised_by, "WritePlan.allocate");
    }

    #[test]
    fn header_problems_are_errors() {
        let wrong_count = FILE.replace("\"count\":2", "\"count\":3");
        let err = GoldenFile::parse("demo.json", &wrong_count).unwrap_err();
        assert!(
            err.to_string().contains("count is 3 but there are 2"),
            "{err}"
        );
        let wrong_format = FILE.replace("kv-canary-golden", "other");
        assert!(GoldenFile::parse("demo.json", &wrong_format).is_err());
        let err = GoldenFile::parse("demo.json", "{").unwrap_err();
        assert!(
            err.to_string().starts_with("kv-canary: demo.json: JSON"),
            "{err}"
        );
    }

    #[test]
    fn case_problems_name_the_line() {
        let no_op = FILE.replacen(r#""op":"plan","#, "", 1);
        let err = GoldenFile::parse("demo.json", &no_op)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("kv-canary: demo.json: JSON missing field `op` at line 2"),
            "{err}"
        );
        let bad_tag = FILE.replacen(r#""tags":["plan"]"#, r#""tags":[1]"#, 1);
        let err = GoldenFile::parse("demo.json", &bad_tag)
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a string at line 2"), "{err}");
        let both = FILE.replacen(r#""outputs":null"#, r#""outputs":{}"#, 1);
        let err = GoldenFile::parse("demo.json", &both)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "kv-canary: golden demo/b: a case has exactly one of `outputs` and `error`"
        );
    }

    #[test]
    fn field_errors_name_case_and_key() {
        let f = GoldenFile::parse("demo.json", FILE).unwrap();
        let inputs = f.cases[0].inputs();
        let err = inputs.int("missing").unwrap_err().to_string();
        assert_eq!(err, "kv-canary: golden demo/a: missing field `missing`");
        let err = inputs.bool("n").unwrap_err().to_string();
        assert!(err.contains("`n` must be a boolean, got integer"), "{err}");
    }
}
