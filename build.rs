//! Compiles `kernels/*.cu` to PTX with nvcc when the `cuda` feature is on.
//!
//! * Without the feature nothing happens: building, testing, linting and documenting the crate
//!   needs nothing from CUDA.
//! * First it writes `$OUT_DIR/kv_canary_shared.h` from the Rust side's one definition of every
//!   constant and struct layout the kernels share (`src/cuda/abi/shared.rs`,
//!   `src/cuda/abi/args.rs`): `constexpr`s, the status-code enums, and `sizeof`/`offsetof`
//!   static asserts of every argument struct. `kernels/common.cuh` includes it.
//! * With `DOCS_RS` set (docs.rs has no CUDA), every kernel gets an empty PTX file, so the
//!   documentation still builds.
//! * Otherwise nvcc is taken from `$NVCC`, else `$CUDA_PATH/bin/nvcc`, else
//!   `/usr/local/cuda/bin/nvcc`, else the `PATH`; without one the build fails and names
//!   `scripts/install-cuda-toolchain.sh`.
//! * Targets: `sm_90` (Hopper, the tuned PTX) and `sm_80` (JIT-compiled by the driver for every
//!   8.x device); `KV_CANARY_CUDA_ARCH` overrides the list (`sm_90`, `sm_80,sm_90`, `90`, ...).
//!   The GPU is never asked (no `nvidia-smi`), so building needs none.
//!
//! * With `KV_CANARY_PTX_DIR` set, nvcc is not needed: the PTX is taken from that folder, as
//!   `scripts/export-ptx.sh` wrote it from a build that had nvcc (the `*.ptx` files and
//!   `kv_canary_ptx.stamp` of that build's `$OUT_DIR`; copied by hand they serve too). The folder's
//!   `kv_canary_ptx.stamp` must equal this crate's (a hash of every file in `kernels/` and of
//!   the generated ABI header), so PTX of other kernels or another argument layout is refused
//!   before it could be launched with the wrong arguments; a missing file is named.
//!
//! The PTX lands in `$OUT_DIR/<name>.<arch>.ptx`, beside `kv_canary_ptx.stamp`;
//! `$OUT_DIR/kv_canary_ptx.rs` (included by `src/cuda/abi/ptx.rs`) embeds it with
//! `include_str!`.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[path = "kernels/shared_header.rs"]
mod shared_header;

/// Every kernel file of the library; `src/cuda/abi/kernels.rs` lists their entry points.
const KERNELS: [&str; 5] = ["plan", "verify", "write", "scatter", "readback"];
/// The default targets, oldest first.
const DEFAULT_ARCHS: [&str; 2] = ["sm_80", "sm_90"];
/// The stamp file of a PTX folder (`$OUT_DIR`, or one `scripts/export-ptx.sh` wrote).
const STAMP: &str = "kv_canary_ptx.stamp";
/// The newest PTX ISA a CUDA 13.0 driver (the H200 machine's 580) loads.
const NEWEST_LOADABLE_PTX: (u32, u32) = (9, 0);

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=src/cuda/abi/args.rs");
    println!("cargo:rerun-if-changed=src/cuda/abi/ptr.rs");
    println!("cargo:rerun-if-changed=src/cuda/abi/shared.rs");
    println!("cargo:rerun-if-changed=kernels/shared_header.rs");
    for var in [
        "NVCC",
        "CUDA_PATH",
        "KV_CANARY_CUDA_ARCH",
        "KV_CANARY_PTX_DIR",
        "DOCS_RS",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = shared_header::generate();
    std::fs::write(out.join("kv_canary_shared.h"), &header).expect("write the header");
    let stamp = kernel_stamp(&header);
    std::fs::write(out.join(STAMP), &stamp).expect("write the PTX stamp");
    let archs = archs();
    std::fs::write(out.join("kv_canary_ptx.rs"), ptx_table(&archs)).expect("write the PTX table");
    if env::var_os("DOCS_RS").is_some() {
        for name in KERNELS {
            for arch in &archs {
                std::fs::write(out.join(format!("{name}.{arch}.ptx")), "").expect("empty PTX");
            }
        }
        return;
    }
    if let Some(dir) = env::var_os("KV_CANARY_PTX_DIR") {
        copy_prebuilt(Path::new(&dir), &archs, &stamp, &out);
        return;
    }
    let nvcc = find_nvcc().unwrap_or_else(|| {
        panic!(
            "kv-canary: the `cuda` feature needs nvcc (CUDA 13.0) to compile kernels/*.cu, and none \
             was found ($NVCC, $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH). Install it \
             with `sudo scripts/install-cuda-toolchain.sh`, or set NVCC=/path/to/nvcc."
        )
    });
    let mut children: Vec<(String, Child)> = Vec::new();
    for arch in &archs {
        for name in KERNELS {
            children.push((
                format!("{name}.{arch}"),
                spawn_nvcc(&nvcc, arch, name, &out),
            ));
        }
    }
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
            "kv-canary: nvcc ({}) failed on kernels {failed:?}",
            nvcc.display()
        );
    }
}

/// The stamp of the kernels a PTX folder was compiled from: FNV-1a (64 bits) over the generated
/// ABI header and every file of `kernels/` (name and bytes, in name order), one line.
fn kernel_stamp(header: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(header.as_bytes());
    let mut files: Vec<PathBuf> = std::fs::read_dir("kernels")
        .expect("read kernels/")
        .map(|e| e.expect("read kernels/").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in files {
        feed(file.file_name().expect("a file name").as_encoded_bytes());
        feed(&std::fs::read(&file).expect("read a kernel file"));
    }
    format!("kv-canary kernels and ABI {hash:016x}\n")
}

/// Copies the PTX of every kernel and target from `dir` (`KV_CANARY_PTX_DIR`) into `out`, after
/// checking that `dir`'s stamp is `stamp`; fails the build naming what is missing or different.
fn copy_prebuilt(dir: &Path, archs: &[String], stamp: &str, out: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let theirs = std::fs::read_to_string(dir.join(STAMP)).unwrap_or_else(|e| {
        panic!(
            "kv-canary: KV_CANARY_PTX_DIR={} has no readable {STAMP} ({e}); write the folder with \
             scripts/export-ptx.sh (or copy a cuda build's $OUT_DIR/*.ptx and {STAMP})",
            dir.display()
        )
    });
    if theirs != stamp {
        panic!(
            "kv-canary: the PTX in KV_CANARY_PTX_DIR={} was built from other kernels or another \
             argument layout (its stamp `{}`, this crate's `{}`): launching it could pass the \
             wrong arguments; export it again from this version with scripts/export-ptx.sh",
            dir.display(),
            theirs.trim(),
            stamp.trim()
        );
    }
    for arch in archs {
        for name in KERNELS {
            let file = format!("{name}.{arch}.ptx");
            std::fs::copy(dir.join(&file), out.join(&file)).unwrap_or_else(|e| {
                panic!(
                    "kv-canary: KV_CANARY_PTX_DIR={} lacks {file} ({e}); export it with the same \
                     KV_CANARY_CUDA_ARCH",
                    dir.display()
                )
            });
        }
    }
}

/// `$OUT_DIR/kv_canary_ptx.rs`: `TARGETS` and, per kernel file, its PTX of every target.
fn ptx_table(archs: &[String]) -> String {
    let mut s = String::from(
        "/// Compute capability (`90` for 9.0) and nvcc arch of every embedded target.\n\
         pub(crate) const TARGETS: &[(u32, &str)] = &[",
    );
    for arch in archs {
        let _ = write!(s, "({}, {arch:?}), ", arch_cc(arch));
    }
    s.push_str(
        "];\n/// Per kernel file (in `ModuleId` order): (compute capability, arch, PTX).\n\
         pub(crate) const PTX: [&[(u32, &str, &str)]; 5] = [\n",
    );
    for name in KERNELS {
        s.push_str("    &[");
        for arch in archs {
            let _ = write!(
                s,
                "({}, {arch:?}, include_str!(concat!(env!(\"OUT_DIR\"), \"/{name}.{arch}.ptx\"))), ",
                arch_cc(arch)
            );
        }
        s.push_str("],\n");
    }
    s.push_str("];\n");
    s
}

/// The compute capability an arch targets (`sm_90` and `compute_90`: 90).
fn arch_cc(arch: &str) -> u32 {
    let digits: String = arch.chars().filter(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or_else(|_| {
        panic!("kv-canary: KV_CANARY_CUDA_ARCH entry {arch:?} names no compute capability")
    })
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

/// The targets: [`DEFAULT_ARCHS`] unless `KV_CANARY_CUDA_ARCH` lists others (comma-separated;
/// `90` means `sm_90`), oldest first.
fn archs() -> Vec<String> {
    let mut archs: Vec<String> = match env::var("KV_CANARY_CUDA_ARCH") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                if a.chars().all(|c| c.is_ascii_digit()) {
                    format!("sm_{a}")
                } else {
                    a.to_owned()
                }
            })
            .collect(),
        _ => DEFAULT_ARCHS.map(str::to_owned).to_vec(),
    };
    archs.sort_by_key(|a| arch_cc(a));
    archs.dedup();
    archs
}

fn spawn_nvcc(nvcc: &Path, arch: &str, name: &str, out: &Path) -> Child {
    let src = Path::new("kernels").join(format!("{name}.cu"));
    Command::new(nvcc)
        .arg("-ptx")
        .arg(format!("-arch={arch}"))
        .args(["-std=c++17", "-O3", "-lineinfo", "-Ikernels"])
        .arg(format!("-I{}", out.display()))
        .arg("-o")
        .arg(out.join(format!("{name}.{arch}.ptx")))
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
