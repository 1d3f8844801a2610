//! Compile-fail cases of the CUDA backend (`ui-tests/cuda-fail/`, feature `cuda`): a host
//! buffer handed to a CUDA launch, a device buffer of another capacity, a graph outliving a
//! buffer it replays over. Pinned to rustc 1.95 like `tests/ui.rs`; regenerate with
//! `TRYBUILD=overwrite cargo test --features cuda --test ui_cuda` and read every snapshot.
#![cfg(feature = "cuda")]

use std::io::Write;
use std::process::Command;

/// The compiler the snapshots were recorded with.
const PINNED: &str = "rustc 1.95.";

fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    match Command::new(&rustc).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(err) => format!("unknown ({rustc:?} --version failed: {err})"),
    }
}

#[test]
fn ui_cuda() {
    let version = rustc_version();
    if !version.starts_with(PINNED) {
        // Written straight to the process's stderr: the test harness captures `eprintln!`.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! SKIPPED: CUDA ui snapshots are pinned to rustc 1.95; this is {version}. \
             No compile-fail case was checked. !!!\n"
        );
        return;
    }
    trybuild::TestCases::new().compile_fail("ui-tests/cuda-fail/*.rs");
}
