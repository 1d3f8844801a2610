//! The runner's one error type: the library's errors from a replayed op, and what goes wrong
//! reading and decoding golden files, which the library's typed API cannot express.
//!
//! Messages start with `kv-canary:` like the library's, so an error case compares our message
//! with the reference's the same way whichever layer raised it.

/// Everything that can go wrong loading or replaying golden cases.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the library: a replayed op (or a constructor it needs) rejected its inputs.
    #[error(transparent)]
    Canary(#[from] kv_canary::Error),
    /// A file or directory could not be read.
    #[error("kv-canary: cannot read {path}: {detail}")]
    Io {
        /// The path.
        path: String,
        /// The operating system's error text.
        detail: String,
    },
    /// A dumped tensor of the wrong element type (the typed API cannot express it).
    #[error("kv-canary: {what} must be {expected}, got {found}")]
    WrongElementType {
        /// Which input.
        what: &'static str,
        /// The required element type.
        expected: &'static str,
        /// The element type given.
        found: String,
    },
    /// An input that another input requires is absent (the typed API pairs them, for example
    /// [`ExpectedTokenTable::with_valid_lens`](kv_canary::ExpectedTokenTable::with_valid_lens)).
    #[error("kv-canary: {required_by} requires {what}")]
    MissingInput {
        /// The absent input.
        what: &'static str,
        /// The input (or setting) that requires it.
        required_by: &'static str,
    },
    /// A malformed golden file or case input: not JSON of the golden format (serde_json's
    /// message names the line and column), a missing field, a wrong rank, a bad tensor encoding.
    #[error("kv-canary: {detail}")]
    Malformed {
        /// What is wrong, with the offending values.
        detail: String,
    },
}

impl Error {
    /// The name of the variant that describes the error, for comparing with a golden error
    /// case: the library's variant (`CapacityMismatch`, ...) for [`Error::Canary`], read from its
    /// `Debug` form so that new library variants need no update here; else this type's own
    /// (`MissingInput`, ...).
    pub fn variant_name(&self) -> String {
        let debug = match self {
            Error::Canary(e) => format!("{e:?}"),
            other => format!("{other:?}"),
        };
        debug
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_are_the_describing_variants() {
        let lib: Error = kv_canary::Error::LutIndexOutOfRange {
            slot: 1,
            lut_len: 1,
        }
        .into();
        assert_eq!(lib.variant_name(), "LutIndexOutOfRange");
        let own = Error::MissingInput {
            what: "a",
            required_by: "b",
        };
        assert_eq!(own.variant_name(), "MissingInput");
    }

    #[test]
    fn messages_start_with_the_crate_name_and_pass_library_errors_through() {
        let lib = kv_canary::Error::ZeroCapacity {
            what: "verify_capacity",
            value: 0,
        };
        assert_eq!(Error::from(lib.clone()).to_string(), lib.to_string());
        let own = [
            Error::Io {
                path: "x".into(),
                detail: "gone".into(),
            },
            Error::MissingInput {
                what: "a",
                required_by: "b",
            },
            Error::Malformed { detail: "m".into() },
        ];
        for e in own {
            assert!(e.to_string().starts_with("kv-canary: "), "{e}");
        }
    }
}
