//! The golden-vector conformance runner of kv-canary: replays SGLang's recorded calls through
//! the library and compares every output, element for element.
//!
//! The golden files (`tests/golden/*.json` at the workspace root, format described in
//! `tests/golden/README.md`) record one call per case: its complete inputs, including the
//! initial contents of every buffer it writes, and the complete contents afterwards — or, for
//! error cases, the error. The runner
//!
//! 1. parses each file with serde_json (integers are parsed straight into `i64`, never through
//!    `f64`; objects keep their file order; a key written twice keeps its last value, serde_json's
//!    rule, where the hand-written parser this replaced rejected it — the golden files repeat no
//!    key) and decodes tensors ([`tensor`]);
//! 2. replays each case through the typed API on a chosen [`Backend`] (one replay function per
//!    op, dispatched by the case's `op`, each written once, generic over the library's backend
//!    seam);
//! 3. compares every output tensor in full, untouched tails included, reporting the first
//!    difference as `field[index] expected X got Y`; error cases are compared by error kind and
//!    the values the error names ([`expected_error`]);
//! 4. skips, and says so, ops it cannot replay yet — a skip is never a pass.
//!
//! The command line (`cargo run -p kv-canary-conformance -- DIR [--backend cuda]`) prints one
//! line per case and `N passed, M failed, K skipped`; as a library:
//!
//! ```no_run
//! use kv_canary_conformance::{run_dir, RunOptions};
//! let report = run_dir("tests/golden", &RunOptions::default())?;
//! println!("{report}"); // one line per case, then `N passed, M failed, K skipped`
//! assert_eq!(report.failed(), 0);
//! # Ok::<(), kv_canary_conformance::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod case;
mod compare;
pub mod divergence;
mod error;
pub mod expected_error;
mod replay;
mod report;
pub mod tensor;

pub use case::{Case, Fields, GoldenError, GoldenFile, FORMAT, FORMAT_VERSION};
pub use compare::{compare_outputs, compare_tensor, Produced};
pub use error::Error;
pub use replay::{judge, replay, replay_case, replay_on, Replayed, UNSUPPORTED_OP};
pub use report::{CaseResult, Outcome, Report};

use std::path::Path;

/// Which implementation replays the cases: the command line's choice, turned into a backend
/// value (`kv_canary::backend::Cpu`, or `kv_canary_testkit::Offload` on this thread's default
/// GPU) in one place, [`replay`]; every replay is written once, generic over
/// [`HostBackend`](kv_canary_testkit::HostBackend) ([`replay_on`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The CPU reference ops ([`kv_canary::cpu`]).
    #[default]
    Cpu,
    /// The CUDA kernels (`kv_canary::cuda`) on this thread's default GPU, through
    /// `kv_canary_testkit::Offload` (feature `cuda`).
    #[cfg(feature = "cuda")]
    Cuda,
}

impl Backend {
    /// The backend's command-line name (`"cpu"`, its
    /// [`HostBackend::NAME`](kv_canary_testkit::HostBackend::NAME)).
    pub fn name(self) -> &'static str {
        use kv_canary_testkit::HostBackend;
        match self {
            Backend::Cpu => kv_canary::backend::Cpu::NAME,
            #[cfg(feature = "cuda")]
            Backend::Cuda => kv_canary_testkit::Offload::NAME,
        }
    }

    /// Every backend compiled into this build.
    pub fn all() -> &'static [Backend] {
        &[
            Backend::Cpu,
            #[cfg(feature = "cuda")]
            Backend::Cuda,
        ]
    }

    /// The backend named `name` (see [`Backend::name`]), if compiled in.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::all().iter().copied().find(|b| b.name() == name)
    }
}

/// How to run the cases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// The implementation under test.
    pub backend: Backend,
}

/// Replays every case of `files` (in order) and collects the results.
pub fn run_files(files: &[GoldenFile], options: &RunOptions) -> Report {
    let results = files
        .iter()
        .flat_map(|f| {
            f.cases.iter().map(|case| CaseResult {
                file: f.file.clone(),
                name: case.name.clone(),
                op: case.op.clone(),
                outcome: replay_case(case, options.backend),
            })
        })
        .collect();
    Report { results }
}

/// Reads every `*.json` file in `dir` (sorted by file name); each must be a golden file.
/// Case names must be unique across the files.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<GoldenFile>, Error> {
    let dir = dir.as_ref();
    let io = |path: &Path, e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "json") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut files = Vec::with_capacity(paths.len());
    let mut names = std::collections::HashSet::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let file = GoldenFile::parse(&path.display().to_string(), &text)?;
        if let Some(dup) = file.cases.iter().find(|c| !names.insert(c.name.clone())) {
            return Err(Error::Malformed {
                detail: format!(
                    "{}: case name {:?} appears twice in {}",
                    path.display(),
                    dup.name,
                    dir.display()
                ),
            });
        }
        files.push(file);
    }
    Ok(files)
}

/// Loads the golden files of `dir` ([`load_dir`]) and replays every case ([`run_files`]).
pub fn run_dir(dir: impl AsRef<Path>, options: &RunOptions) -> Result<Report, Error> {
    Ok(run_files(&load_dir(dir)?, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_round_trip_their_names() {
        for &b in Backend::all() {
            assert_eq!(Backend::from_name(b.name()), Some(b));
        }
        assert_eq!(Backend::from_name("gpu"), None);
    }

    #[test]
    fn a_missing_directory_is_an_io_error() {
        let err = run_dir("/nonexistent/kv-canary-golden", &RunOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
    }
}
