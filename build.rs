//! Compiles `kernels/*.cu` to PTX with nvcc when the `cuda` feature is on.
//!
//! * Without the feature nothing happens: building, testing, linting and documenting the crate
//!   needs nothing from CUDA.
//! * With `DOCS_RS` set (docs.rs has no CUDA), every kernel gets an empty PTX file, so the
//!   documentation still builds.
//! * Otherwise nvcc is taken from `$NVCC`, else `$CUDA_PATH/bin/nvcc`, else
//!   `/usr/local/cuda/bin/nvcc`, else the `PATH`; without one the build fails and names
//!   `scripts/install-cuda-toolchain.sh`.
//! * The target is `sm_90` (Hopper: H100, H200); `KV_CANARY_CUDA_ARCH` overrides it (`sm_80`,
//!   `compute_90`, `90`, ...). The GPU is never asked (no `nvidia-smi`), so building needs none.
//!
//! The PTX lands in `$OUT_DIR/<name>.ptx` and `src/cuda/ptx.rs` embeds it with `include_str!`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Every kernel file; `src/cuda/ptx.rs` embeds one string per name.
const KERNELS: [&str; 5] = ["plan", "verify", "write", "scatter", "bench"];
/// The newest PTX ISA a CUDA 13.0 driver (the H200 machine's 580) loads.
const NEWEST_LOADABLE_PTX: (u32, u32) = (9, 0);

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    for var in [
        "NVCC",
        "CUDA_PATH",
        "KV_CANARY_CUDA_ARCH",
        "DOCS_RS",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if env::var_os("DOCS_RS").is_some() {
        for name in KERNELS {
            std::fs::write(out.join(format!("{name}.ptx")), "").expect("write empty PTX");
        }
        return;
    }
    let nvcc = find_nvcc().unwrap_or_else(|| {
        panic!(
            "kv-canary: the `cuda` feature needs nvcc (CUDA 13.0) to compile kernels/*.cu, and none \
             was found ($NVCC, $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH). Install it \
             with `sudo scripts/install-cuda-toolchain.sh`, or set NVCC=/path/to/nvcc."
        )
    });
    let arch = arch();
    let children: Vec<(&str, Child)> = KERNELS
        .iter()
        .map(|&name| (name, spawn_nvcc(&nvcc, &arch, name, &out)))
        .collect();
    let mut failed = Vec::new();
    for (name, child) in children {
        let result = child.wait_with_output().expect("wait for nvcc");
        if !result.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&result.stderr));
            failed.push(name);
            continue;
        }
        check_ptx_version(&out.join(format!("{name}.ptx")));
    }
    if !failed.is_empty() {
        panic!(
            "kv-canary: nvcc ({}) failed on kernels {failed:?} for {arch}",
            nvcc.display()
        );
    }
}

/// `$NVCC`, `$CUDA_PATH/bin/nvcc`, `/usr/local/cuda/bin/nvcc`, then the `PATH`.
fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = env::var_os("NVCC") {
        return Some(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Some(root) = env::var_os("CUDA_PATH") {
        candidates.push(PathBuf::from(root).join("bin").join("nvcc"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    if let Some(path) = env::var_os("PATH") {
        candidates.extend(env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// `-arch` for nvcc: `sm_90` unless `KV_CANARY_CUDA_ARCH` says otherwise (`90` means `sm_90`).
fn arch() -> String {
    match env::var("KV_CANARY_CUDA_ARCH") {
        Ok(a) if a.chars().all(|c| c.is_ascii_digit()) && !a.is_empty() => format!("sm_{a}"),
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => "sm_90".to_owned(),
    }
}

fn spawn_nvcc(nvcc: &Path, arch: &str, name: &str, out: &Path) -> Child {
    let src = Path::new("kernels").join(format!("{name}.cu"));
    Command::new(nvcc)
        .arg("-ptx")
        .arg(format!("-arch={arch}"))
        .args(["-std=c++17", "-O3", "-lineinfo", "-Ikernels"])
        .arg("-o")
        .arg(out.join(format!("{name}.ptx")))
        .arg(&src)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("kv-canary: cannot start nvcc {}: {e}", nvcc.display()))
}

/// Warns when nvcc wrote PTX newer than a CUDA 13.0 driver loads (a newer toolkit).
fn check_ptx_version(ptx: &Path) {
    let text = std::fs::read_to_string(ptx).unwrap_or_default();
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix(".version "))
        .and_then(|v| {
            let (major, minor) = v.trim().split_once('.')?;
            Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
        });
    if let Some(v) = version {
        if v > NEWEST_LOADABLE_PTX {
            println!(
                "cargo:warning=kv-canary: {} is PTX ISA {}.{}, newer than CUDA 13.0 drivers \
                 (580) load; use nvcc 13.0 (scripts/install-cuda-toolchain.sh) for those machines",
                ptx.display(),
                v.0,
                v.1
            );
        }
    }
}
