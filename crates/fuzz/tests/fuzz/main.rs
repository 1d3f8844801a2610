//! Coverage-free fuzzing of kv-canary's public API, run by `cargo test` on stable Rust.
//!
//! Each target turns a byte string into a call of the public API through
//! [`arbitrary::Unstructured`] and checks, per case:
//!
//! * no panic (every case runs under `catch_unwind`; the input is printed and saved);
//! * every error's message starts with `kv-canary:`;
//! * an op that returns an error leaves every output byte-identical (outputs are cloned first);
//! * on success, the documented relations between the inputs, the outputs and the summary.
//!
//! A run replays the checked-in corpus (`corpus/<target>/*.bin`) first, then feeds the target
//! byte strings from a seeded ChaCha8 generator (fresh ones, and mutations of the corpus) until
//! its time budget is spent, and prints the number of cases. Environment:
//!
//! * `KV_CANARY_FUZZ_SECONDS`: seconds per target (default 1.5);
//! * `KV_CANARY_FUZZ_SEED`: the generator's seed (default fixed, so a plain run is reproducible
//!   up to its time budget);
//! * `KV_CANARY_FUZZ_SAVE_CORPUS=1`: replaces the corpus with the first input of each of the
//!   rarest outcomes (a success or an error kind) of this run, ten per target (how the corpus
//!   was made).
//!
//! Arguments, as libtest's (`kv_canary_testkit::TestSelection`): name filters (a target runs if
//! its name contains one; all by default), `--skip NAME`, `--exact`, `--list`; libtest's other
//! options are accepted and ignored.

mod block_tables;
mod constructors;
mod gen;
mod golden;
mod guard;
mod k_only;
mod ops;
mod step;
mod sweep;
mod sweep_entries;
mod toy;
mod views;

use arbitrary::Unstructured;
use kv_canary_testkit::TestSelection;
use rand::{Rng as _, RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The outcome of one case: `Ok(label)` names what happened (an outcome kind, for the
/// statistics and the corpus), `Err(message)` is a broken invariant.
pub type Verdict = Result<String, String>;

thread_local! {
    /// Where the last panic of this thread came from (set by the panic hook).
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// One fuzz target.
struct Target {
    name: &'static str,
    run: fn(&mut Unstructured<'_>) -> arbitrary::Result<Verdict>,
}

const TARGETS: &[Target] = &[
    Target {
        name: "plan",
        run: ops::plan,
    },
    Target {
        name: "write",
        run: ops::write,
    },
    Target {
        name: "verify",
        run: ops::verify,
    },
    Target {
        name: "scatter",
        run: ops::scatter,
    },
    Target {
        name: "constructors",
        run: constructors::run,
    },
    Target {
        name: "step",
        run: step::run,
    },
    Target {
        name: "sweep",
        run: sweep::run,
    },
    Target {
        name: "sweep_entries",
        run: sweep_entries::run,
    },
    Target {
        name: "k_only",
        run: k_only::run,
    },
    Target {
        name: "views",
        run: views::run,
    },
    Target {
        name: "block_tables",
        run: block_tables::run,
    },
    Target {
        name: "guard",
        run: guard::run,
    },
    Target {
        name: "golden_parser",
        run: golden::run,
    },
];

/// Inputs saved per target with `KV_CANARY_FUZZ_SAVE_CORPUS=1`: the first of each of the rarest
/// outcome kinds.
const SAVED_PER_TARGET: usize = 10;
/// Longest generated input.
const MAX_INPUT: usize = 4096;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} does not parse")),
    )
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn failure_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures")
}

/// Runs one case; `Err` describes a panic or a broken invariant.
fn run_case(target: &Target, bytes: &[u8]) -> Verdict {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut u = Unstructured::new(bytes);
        (target.run)(&mut u)
    }));
    match result {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(_)) => Ok("input too short".to_owned()),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a non-string panic".to_owned());
            let at = PANIC_AT.with(|p| p.take());
            Err(format!("panic at {at}: {message}"))
        }
    }
}

/// Byte-level mutations of a corpus entry: flips, overwrites, insertions, deletions, splices.
fn mutate(rng: &mut ChaCha8Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    for _ in 0..rng.random_range(1..=8) {
        let len = bytes.len();
        match rng.random_range(0..6) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                bytes[i] = rng.random();
            }
            2 => {
                let i = rng.random_range(0..=len);
                bytes.insert(i, rng.random());
            }
            3 if len > 0 => {
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(16));
                bytes.drain(i..i + n);
            }
            4 if !other.is_empty() => {
                let i = rng.random_range(0..=len);
                let j = rng.random_range(0..other.len());
                let n = rng.random_range(1..=(other.len() - j).min(64));
                bytes.splice(i..i, other[j..j + n].iter().copied());
            }
            _ => {
                let i = rng.random_range(0..=len);
                bytes.truncate(i);
            }
        }
    }
    bytes.truncate(MAX_INPUT);
    bytes
}

struct Stats {
    corpus: usize,
    cases: u64,
    outcomes: BTreeMap<String, u64>,
    failures: Vec<(Vec<u8>, String)>,
}

fn fuzz(target: &Target, budget: Duration, seed: u64, save: bool) -> Stats {
    let dir = corpus_dir(target.name);
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bin"))
            .collect();
        paths.sort();
        for p in paths {
            corpus.push(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
        }
    }
    let mut stats = Stats {
        corpus: corpus.len(),
        cases: 0,
        outcomes: BTreeMap::new(),
        failures: Vec::new(),
    };
    // The first input of every outcome kind (for `KV_CANARY_FUZZ_SAVE_CORPUS`).
    let mut firsts: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut record = |stats: &mut Stats, bytes: &[u8], verdict: Verdict, from_corpus: bool| {
        stats.cases += 1;
        match verdict {
            Ok(label) => {
                if save && !from_corpus && !firsts.contains_key(&label) {
                    firsts.insert(label.clone(), bytes.to_vec());
                }
                *stats.outcomes.entry(label).or_insert(0) += 1;
            }
            Err(message) => {
                if stats.failures.len() < 5 {
                    stats.failures.push((bytes.to_vec(), message));
                }
            }
        }
    };
    for bytes in &corpus {
        let verdict = run_case(target, bytes);
        record(&mut stats, bytes, verdict, true);
    }
    let name_hash = target.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ name_hash);
    let start = Instant::now();
    while start.elapsed() < budget {
        let bytes = if !corpus.is_empty() && rng.random_range(0..2) == 0 {
            let base = &corpus[rng.random_range(0..corpus.len())];
            let other = &corpus[rng.random_range(0..corpus.len())];
            mutate(&mut rng, base, other)
        } else {
            let mut bytes = vec![0u8; rng.random_range(0..=MAX_INPUT)];
            rng.fill_bytes(&mut bytes);
            bytes
        };
        let verdict = run_case(target, &bytes);
        record(&mut stats, &bytes, verdict, false);
    }
    if save {
        // The rarest outcome kinds: the deepest paths the generator reached.
        let mut kinds: Vec<(&String, &u64)> = stats.outcomes.iter().collect();
        kinds.sort_by_key(|&(label, n)| (*n, label.clone()));
        std::fs::create_dir_all(&dir).unwrap();
        for old in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(old.unwrap().path()).unwrap();
        }
        for (label, _) in kinds.into_iter().take(SAVED_PER_TARGET) {
            if let Some(bytes) = firsts.get(label) {
                let name: String = label
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
            }
        }
    }
    stats
}

fn main() {
    let selection = TestSelection::from_env();
    let seconds: f64 = env("KV_CANARY_FUZZ_SECONDS").unwrap_or(1.5);
    let seed: u64 = env("KV_CANARY_FUZZ_SEED").unwrap_or(0x6b76_2d63_616e_6172);
    let save = env::<u8>("KV_CANARY_FUZZ_SAVE_CORPUS") == Some(1);
    let budget = Duration::from_secs_f64(seconds);
    // Panics are caught and reported per case, with the place they come from.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_AT.with(|p| *p.borrow_mut() = at);
    }));
    let selected: Vec<_> = TARGETS
        .iter()
        .filter(|t| selection.selects(t.name))
        .collect();
    if selection.lists() {
        for target in &selected {
            println!("{}: test", target.name);
        }
        return;
    }
    println!(
        "fuzz: {seconds} s per target, seed {seed:#x}, {} of {} targets{}",
        selected.len(),
        TARGETS.len(),
        if selection.filters_by_name() {
            " (selected by name)"
        } else {
            ""
        }
    );
    let mut failed = false;
    for target in selected {
        let stats = fuzz(target, budget, seed, save);
        println!(
            "fuzz {:<14} {:>9} cases ({} corpus), {} outcome kinds, {} failures",
            target.name,
            stats.cases,
            stats.corpus,
            stats.outcomes.len(),
            stats.failures.len()
        );
        if std::env::var_os("KV_CANARY_FUZZ_VERBOSE").is_some() {
            for (label, n) in &stats.outcomes {
                println!("    {n:>9}  {label}");
            }
        }
        for (bytes, message) in &stats.failures {
            failed = true;
            let dir = failure_dir();
            std::fs::create_dir_all(&dir).unwrap();
            let hash = bytes.iter().fold(0u64, |h, &b| {
                h.rotate_left(5) ^ u64::from(b).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            });
            let path = dir.join(format!("{}-{hash:016x}.bin", target.name));
            std::fs::write(&path, bytes).unwrap();
            let hex: String = bytes.iter().take(128).map(|b| format!("{b:02x}")).collect();
            println!(
                "FAILED {}: {message}\n  input ({} bytes, saved to {}): {hex}...",
                target.name,
                bytes.len(),
                path.display()
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
