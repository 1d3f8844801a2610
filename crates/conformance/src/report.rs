//! The runner's report: one line per case and a final count line.

use core::fmt;

/// What happened to one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every output matched (or the expected error was raised, naming the same values).
    Pass,
    /// The reference completed where the crate returns a documented error
    /// ([`crate::divergence::DIVERGENCES`]): counted as passed, named in its line.
    Divergence(&'static str),
    /// The first difference, e.g. `verify_plan.verify_slot_indices[3] expected 17 got 18`.
    Fail(String),
    /// Not replayed, and why.
    Skip(String),
}

/// One case's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    /// The golden file's `file` header field (`"plan"`, `"pipeline"`, ...).
    pub file: String,
    /// The case name.
    pub name: String,
    /// The case's op.
    pub op: String,
    /// What happened.
    pub outcome: Outcome,
}

impl fmt::Display for CaseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Pass => write!(f, "pass {}", self.name),
            Outcome::Divergence(what) => {
                write!(f, "pass {} (documented divergence: {what})", self.name)
            }
            Outcome::Fail(why) => write!(f, "FAIL {}: {why}", self.name),
            Outcome::Skip(why) => write!(f, "skip {}: {why}", self.name),
        }
    }
}

/// The results of a run, in file and case order.
///
/// `Display` prints one line per case (`pass NAME`, `FAIL NAME: ...`, `skip NAME: ...`) and
/// then exactly `N passed, M failed, K skipped`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every case's result.
    pub results: Vec<CaseResult>,
}

impl Report {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Cases that passed, documented divergences included.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass | Outcome::Divergence(_)))
    }

    /// Cases accepted as documented divergences (counted in [`passed`](Self::passed) too).
    pub fn diverged(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Divergence(_)))
    }

    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    /// Cases that were skipped.
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skip(_)))
    }

    /// The final line: `N passed, M failed, K skipped`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            writeln!(f, "{r}")?;
        }
        write!(f, "{}", self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, outcome: Outcome) -> CaseResult {
        CaseResult {
            file: "plan".into(),
            name: name.into(),
            op: "plan".into(),
            outcome,
        }
    }

    #[test]
    fn lines_and_summary() {
        let report = Report {
            results: vec![
                result("a", Outcome::Pass),
                result("b", Outcome::Fail("x[1] expected 2 got 3".into())),
                result("c", Outcome::Skip("op not supported".into())),
                result("d", Outcome::Pass),
            ],
        };
        assert_eq!(
            report.to_string(),
            "pass a\nFAIL b: x[1] expected 2 got 3\nskip c: op not supported\npass d\n\
             2 passed, 1 failed, 1 skipped"
        );
        assert_eq!(
            Report::default().to_string(),
            "0 passed, 0 failed, 0 skipped"
        );
    }
}
