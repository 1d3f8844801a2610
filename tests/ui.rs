//! Compile-fail and compile-pass cases for the typed API (`ui-tests/`), the CPU and the CUDA ones.
//!
//! Each `ui-tests/fail/*.rs` case breaks one configuration invariant that SGLang checks at run
//! time and this crate moved into types; its `.stderr` snapshot is what a user sees. The
//! `ui-tests/pass/*.rs` cases are the intended uses. `ui-tests/build-fail/*.rs` holds errors that
//! only `cargo build` reports (post-monomorphization), so they run with the pass cases, which
//! trybuild builds rather than checks. With the `cuda` feature, `ui-tests/cuda-fail/*.rs` adds
//! the CUDA backend's cases (a host buffer handed to a CUDA launch, a device buffer of another
//! capacity, a graph outliving a buffer it replays over).
//!
//! Under `cuda` the CPU cases run too, against their one snapshot set: the crate then also has
//! `cuda::plan`, `cuda::PlanInputs` and `cuda::Swa`, and rustc writes those three CPU names
//! qualified (`kv_canary::cpu::plan`) in a few "required by a bound in" notes and impl labels.
//! [`cuda_qualified`] rewrites exactly those lines of a copy of each snapshot; every other byte
//! must match. Once the device twins are named apart, the rewrite finds nothing to change.
//!
//! Compiler messages change between releases, so the snapshots are recorded with the compiler
//! that `rust-toolchain.toml` pins. On another compiler this test says so loudly and checks
//! nothing, unless it runs under CI (`CI=true`, or `KV_CANARY_UI_REQUIRED=1`, which `.ci/run`
//! sets): there a compiler mismatch fails. Regenerate with `TRYBUILD=overwrite cargo test --test
//! ui` (add `--features cuda` for the CUDA cases) and read every changed snapshot.

use std::io::Write;
use std::process::Command;

/// `rust-toolchain.toml`, which pins the compiler the snapshots were recorded with.
const TOOLCHAIN_FILE: &str = include_str!("../rust-toolchain.toml");

/// The pinned release (`1.95.0`), read from the `channel` line of `rust-toolchain.toml`.
fn pinned_release() -> &'static str {
    TOOLCHAIN_FILE
        .lines()
        .filter_map(|line| line.trim().strip_prefix("channel"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"'))
        .next()
        .expect("rust-toolchain.toml has a `channel = \"...\"` line")
}

/// `rustc --version` of the compiler cargo will use (`$RUSTC` if set).
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    match Command::new(&rustc).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(err) => format!("unknown ({rustc:?} --version failed: {err})"),
    }
}

/// Under CI a compiler mismatch fails instead of skipping.
fn required() -> bool {
    let set = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    set("CI", "true") || set("KV_CANARY_UI_REQUIRED", "1")
}

#[test]
fn ui() {
    let pinned = pinned_release();
    let version = rustc_version();
    if !version.starts_with(&format!("rustc {pinned} ")) {
        let message = format!(
            "ui snapshots are pinned to rustc {pinned} (rust-toolchain.toml); this is {version}"
        );
        assert!(
            !required(),
            "{message}: under CI (CI=true or KV_CANARY_UI_REQUIRED=1) the pinned compiler is \
             required"
        );
        // Written straight to the process's stderr: the test harness captures `eprintln!`.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! SKIPPED: {message}. No compile-fail case was checked. !!!\n"
        );
        return;
    }
    let cases = if cfg!(feature = "cuda") {
        copy_with_cuda_qualified_snapshots()
    } else {
        "ui-tests".to_owned()
    };
    // Fail cases alone: trybuild checks them with `cargo check`.
    {
        let fail = trybuild::TestCases::new();
        fail.compile_fail(format!("{cases}/fail/*.rs"));
        #[cfg(feature = "cuda")]
        fail.compile_fail("ui-tests/cuda-fail/*.rs");
    }
    // Pass cases (and post-monomorphization failures): trybuild builds these.
    let built = trybuild::TestCases::new();
    built.pass(format!("{cases}/pass/*.rs"));
    built.compile_fail(format!("{cases}/build-fail/*.rs"));
}

/// Copies `ui-tests/{fail,pass,build-fail}` to `ui-under-cuda` in cargo's scratch folder for
/// tests (`CARGO_TARGET_TMPDIR`), each snapshot through
/// [`cuda_qualified`], and returns the copy's folder. (The copy is rewritten on every run, so
/// `TRYBUILD=overwrite` under `cuda` changes nothing in `ui-tests/`: regenerate without `cuda`.)
fn copy_with_cuda_qualified_snapshots() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-under-cuda");
    let _ = std::fs::remove_dir_all(&copy);
    for folder in ["fail", "pass", "build-fail"] {
        let to = copy.join(folder);
        std::fs::create_dir_all(&to).expect("create the copy of the ui cases");
        let from = root.join("ui-tests").join(folder);
        for entry in std::fs::read_dir(&from).expect("read ui-tests") {
            let path = entry.expect("read ui-tests").path();
            let text = std::fs::read_to_string(&path).expect("read a ui case");
            let text = if path.extension().is_some_and(|e| e == "stderr") {
                cuda_qualified(&text, &copy.join(folder).display().to_string(), folder)
            } else {
                text
            };
            std::fs::write(to.join(path.file_name().expect("a file")), text)
                .expect("write the copy of a ui case");
        }
    }
    copy.display().to_string()
}

/// A CPU snapshot as rustc writes it when the `cuda` feature is on: the case's own path points
/// into the copy (`copy`, absolute: trybuild shortens only paths inside the crate), and the CPU
/// `plan`, `PlanInputs` and `Swa` are qualified where rustc qualifies them (the notes naming a
/// bound's item, and an impl's label), nowhere else.
fn cuda_qualified(snapshot: &str, copy: &str, folder: &str) -> String {
    let mut out = String::with_capacity(snapshot.len() + 256);
    for line in snapshot.split_inclusive('\n') {
        let mut line = line.replace(&format!("--> ui-tests/{folder}/"), &format!("--> {copy}/"));
        if line.starts_with("note: required by a bound in `") {
            line = line
                .replace("`plan`", "`kv_canary::cpu::plan`")
                .replace("`PlanInputs::<", "`kv_canary::PlanInputs::<");
        }
        if line.contains("^ `Swa<'_") && line.trim_end().ends_with(">`") {
            line = line.replace("`Swa<'_", "`kv_canary::Swa<'_");
        }
        out.push_str(&line);
    }
    out
}
