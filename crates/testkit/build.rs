//! Compiles `kernels/bench.cu` (the benchmark floors) to PTX with nvcc when the `cuda` feature
//! is on, for `sm_90` (the H200 the floors are measured on; `KV_CANARY_CUDA_ARCH` overrides it
//! with one arch). Like kv-canary's build script it writes `kv_canary_shared.h` first (the bench
//! kernels include `common.cuh`), and under `DOCS_RS` an empty PTX file.

use std::env;
use std::path::PathBuf;
use std::process::Command;

#[path = "../../kernels/shared_header.rs"]
mod shared_header;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=../../kernels");
    println!("cargo:rerun-if-changed=../../src/cuda/abi");
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
    std::fs::write(out.join("kv_canary_shared.h"), shared_header::generate())
        .expect("write the header");
    let ptx = out.join("bench.ptx");
    if env::var_os("DOCS_RS").is_some() {
        std::fs::write(&ptx, "").expect("empty PTX");
        return;
    }
    let nvcc = find_nvcc().unwrap_or_else(|| {
        panic!(
            "kv-canary-testkit: the `cuda` feature needs nvcc (CUDA 13.0); none was found \
             ($NVCC, $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH). Install it with \
             `sudo scripts/install-cuda-toolchain.sh`, or set NVCC=/path/to/nvcc."
        )
    });
    let arch = match env::var("KV_CANARY_CUDA_ARCH") {
        Ok(a) if !a.trim().is_empty() => {
            let last = a.split(',').map(str::trim).next_back().unwrap_or("sm_90");
            if last.chars().all(|c| c.is_ascii_digit()) {
                format!("sm_{last}")
            } else {
                last.to_owned()
            }
        }
        _ => "sm_90".to_owned(),
    };
    let result = Command::new(&nvcc)
        .arg("-ptx")
        .arg(format!("-arch={arch}"))
        .args(["-std=c++17", "-O3", "-lineinfo", "-I../../kernels"])
        .arg(format!("-I{}", out.display()))
        .arg("-o")
        .arg(&ptx)
        .arg("kernels/bench.cu")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "kv-canary-testkit: cannot start nvcc {}: {e}",
                nvcc.display()
            )
        });
    if !result.status.success() {
        panic!(
            "kv-canary-testkit: nvcc failed on kernels/bench.cu for {arch}:\n{}",
            String::from_utf8_lossy(&result.stderr)
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
