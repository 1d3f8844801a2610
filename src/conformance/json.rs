//! A small exact JSON parser for the golden files.
//!
//! Integers are parsed straight into `i64` (never through `f64`), so hashes such as
//! `-2414019407054260458` round-trip. Numbers with a fraction or an exponent are rejected: the
//! golden format has none, and accepting them would invite silent rounding. Objects keep their
//! key order and reject duplicate keys.

use crate::Error;

/// Nesting deeper than this is rejected (the golden format nests about five levels).
const MAX_DEPTH: usize = 64;

/// One JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer in the `i64` range.
    Int(i64),
    /// A string, escapes decoded.
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, in file order (keys are unique).
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON document (surrounding whitespace allowed, nothing else).
    pub fn parse(text: &str) -> Result<Json, Error> {
        let mut p = Parser {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = p.value(0)?;
        p.skip_ws();
        if p.at != p.bytes.len() {
            return Err(p.error("trailing characters after the document"));
        }
        Ok(value)
    }

    /// The member `key` of an object (`None` for a missing key or a non-object).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The members, if this is an object.
    pub fn as_object(&self) -> Option<&[(String, Json)]> {
        match self {
            Json::Object(members) => Some(members),
            _ => None,
        }
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Int(_) => "integer",
            Json::Str(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> Error {
        Error::Malformed {
            detail: format!("JSON: {what} at byte {}", self.at),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), Error> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", byte as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, Error> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'-' | b'0'..=b'9') => self.integer().map(Json::Int),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, Error> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("invalid literal"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, Error> {
        self.expect(b'{')?;
        let mut members: Vec<(String, Json)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected an object key"));
            }
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(self.error(&format!("duplicate key {key:?}")));
            }
            self.skip_ws();
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, Error> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]`")),
            }
        }
    }

    /// An integer, accumulated in negative space so that `i64::MIN` parses.
    fn integer(&mut self) -> Result<i64, Error> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let mut acc: i64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            acc = acc
                .checked_mul(10)
                .and_then(|a| a.checked_sub(i64::from(d - b'0')))
                .ok_or_else(|| self.error("integer outside the i64 range"))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 {
            return Err(self.error("expected a digit"));
        }
        if digits > 1 && self.bytes[start] == b'0' {
            return Err(self.error("leading zero in a number"));
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return Err(self.error("non-integer numbers are not supported"));
        }
        if negative {
            Ok(acc)
        } else {
            acc.checked_neg()
                .ok_or_else(|| self.error("integer outside the i64 range"))
        }
    }

    fn string(&mut self) -> Result<String, Error> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let run_start = self.at;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            // The input is a `&str` and the run stops only at ASCII bytes, so it is valid UTF-8.
            out.push_str(
                core::str::from_utf8(&self.bytes[run_start..self.at])
                    .map_err(|_| self.error("invalid UTF-8"))?,
            );
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let c = self.escape()?;
                    out.push(c);
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    fn escape(&mut self) -> Result<char, Error> {
        let b = self
            .peek()
            .ok_or_else(|| self.error("unterminated escape"))?;
        self.at += 1;
        Ok(match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    if !self.bytes[self.at..].starts_with(b"\\u") {
                        return Err(self.error("unpaired high surrogate"));
                    }
                    self.at += 2;
                    let lo = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(self.error("invalid low surrogate"));
                    }
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                char::from_u32(code).ok_or_else(|| self.error("invalid \\u escape"))?
            }
            _ => return Err(self.error("invalid escape")),
        })
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.error("short \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let nibble = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid hex digit in \\u escape"))?;
            v = v * 16 + nibble;
        }
        self.at += 4;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Json {
        Json::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn fails(s: &str) -> String {
        Json::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn integers_are_exact_over_the_whole_i64_range() {
        assert_eq!(
            parse("-2414019407054260458"),
            Json::Int(-2414019407054260458)
        );
        assert_eq!(parse("-9223372036854775808"), Json::Int(i64::MIN));
        assert_eq!(parse("9223372036854775807"), Json::Int(i64::MAX));
        // 2^53 + 1 is not representable in f64.
        assert_eq!(parse("9007199254740993"), Json::Int(9007199254740993));
        assert_eq!(parse("0"), Json::Int(0));
        assert_eq!(parse("-0"), Json::Int(0));
        assert!(fails("9223372036854775808").contains("i64 range"));
        assert!(fails("-9223372036854775809").contains("i64 range"));
    }

    #[test]
    fn floats_and_bad_numbers_are_errors() {
        assert!(fails("1.5").contains("non-integer"));
        assert!(fails("[1e3]").contains("non-integer"));
        assert!(fails("2E1").contains("non-integer"));
        assert!(fails("01").contains("leading zero"));
        assert!(fails("-").contains("digit"));
        assert!(fails("+1").contains("unexpected character"));
    }

    #[test]
    fn nested_documents_keep_order() {
        let v = parse(r#" {"b": [1, -2, {"c": null}], "a": true, "e": {}, "f": [], "g": false} "#);
        let keys: Vec<_> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["b", "a", "e", "f", "g"]);
        let b = v.get("b").unwrap().as_array().unwrap();
        assert_eq!(b[1].as_i64(), Some(-2));
        assert!(b[2].get("c").unwrap().is_null());
        assert_eq!(v.get("a"), Some(&Json::Bool(true)));
        assert_eq!(v.get("g"), Some(&Json::Bool(false)));
        assert_eq!(v.get("missing"), None);
    }

    #[test]
    fn string_escapes_decode() {
        assert_eq!(
            parse(r#""a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\ud83d\ude00 é""#),
            Json::Str("a\"b\\c/d\u{8}\u{c}\n\r\tAé😀 é".into())
        );
        assert!(fails(r#""\x""#).contains("invalid escape"));
        assert!(fails(r#""\ud83d""#).contains("surrogate"));
        assert!(fails(r#""\ud83d\u0041""#).contains("surrogate"));
        assert!(fails(r#""\u12zz""#).contains("hex digit"));
        assert!(fails(r#""\u12""#).contains("short"));
        assert!(fails("\"a\nb\"").contains("control character"));
        assert!(fails("\"abc").contains("unterminated"));
    }

    #[test]
    fn structural_errors_are_reported_with_a_position() {
        assert!(fails("[1, 2").contains("expected `,` or `]`"));
        assert!(fails("[1 2]").contains("at byte 3"));
        assert!(fails(r#"{"a" 1}"#).contains("expected `:`"));
        assert!(fails(r#"{"a": 1,}"#).contains("object key"));
        assert!(fails(r#"{"a": 1, "a": 2}"#).contains("duplicate key"));
        assert!(fails("[1] x").contains("trailing"));
        assert!(fails("nul").contains("invalid literal"));
        assert!(fails("").contains("end of input"));
        assert!(fails(&"[".repeat(200)).contains("too deep"));
        assert!(fails("[1,]").contains("unexpected character"));
    }
}
