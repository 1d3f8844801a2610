//! Compile-fail and compile-pass cases for the typed API (`ui-tests/`).
//!
//! Each `ui-tests/fail/*.rs` case breaks one configuration invariant that SGLang checks at run
//! time and this crate moved into types; its `.stderr` snapshot is what a user sees. The
//! `ui-tests/pass/*.rs` cases are the intended uses. `ui-tests/build-fail/*.rs` holds errors that
//! only `cargo build` reports (post-monomorphization), so they run with the pass cases, which
//! trybuild builds rather than checks.
//!
//! Compiler messages change between releases, so the snapshots are pinned to rustc 1.95; on any
//! other compiler this test says so loudly and does nothing. Regenerate with
//! `TRYBUILD=overwrite cargo test --test ui` and read every changed snapshot.

use std::io::Write;
use std::process::Command;

/// The compiler the snapshots were recorded with.
const PINNED: &str = "rustc 1.95.";

/// `rustc --version` of the compiler cargo will use (`$RUSTC` if set).
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    match Command::new(&rustc).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(err) => format!("unknown ({rustc:?} --version failed: {err})"),
    }
}

#[test]
fn ui() {
    if cfg!(feature = "cuda") {
        // With the `cuda` feature the crate has a second `plan` (`cuda::plan`) and
        // `PlanInputs`, so rustc qualifies those names in its messages and every snapshot
        // would differ; `tests/ui_cuda.rs` holds that feature's cases.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! SKIPPED: the ui snapshots are recorded without the `cuda` feature; \
             run `cargo test --test ui` without it. No compile-fail case was checked here. !!!\n"
        );
        return;
    }
    let version = rustc_version();
    if !version.starts_with(PINNED) {
        // Written straight to the process's stderr: the test harness captures `eprintln!`.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! SKIPPED: ui snapshots are pinned to rustc 1.95; this is {version}. \
             No compile-fail case was checked. !!!\n"
        );
        return;
    }
    // Fail cases alone: trybuild checks them with `cargo check`.
    {
        let fail = trybuild::TestCases::new();
        fail.compile_fail("ui-tests/fail/*.rs");
    }
    // Pass cases (and post-monomorphization failures): trybuild builds these.
    let built = trybuild::TestCases::new();
    built.pass("ui-tests/pass/*.rs");
    built.compile_fail("ui-tests/build-fail/*.rs");
}
