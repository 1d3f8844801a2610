//! The CPU engine end to end: a clean run of 1000 steps (arrivals, chunked prefill, decode,
//! padding rows and tokens, prefix sharing, forks with copy-on-write, evictions, preemptions)
//! reports nothing; every bug flag is caught, at or after the step it was made, naming the
//! request it damaged.

use kv_canary_candle_engine::bugs::Bug;
use kv_canary_candle_engine::canary_common::Finding;
use kv_canary_candle_engine::engine::{Engine, Outcome, RunConfig};
use kv_canary_candle_engine::footprint::{canary_footprint, gpu_canary_footprint};

fn run(seed: u64, steps: u64, bug: Option<Bug>, bug_step: u64) -> Outcome {
    let config = RunConfig {
        seed,
        steps,
        bug,
        bug_step,
        canary: true,
    };
    Engine::run(&config).expect("the engine runs")
}

#[test]
fn a_clean_run_of_1000_steps_reports_nothing() {
    let o = run(7, 1000, None, 0);
    let s = o.stats;
    eprintln!("clean run: {s:?}");
    assert_eq!(
        o.findings,
        Vec::<Finding>::new(),
        "a clean run reports nothing"
    );
    assert_eq!(s.steps, 1000);
    assert!(s.arrivals > 200 && s.finished > 200, "{s:?}");
    assert!(s.mixed_steps > 100, "chunked prefill beside decodes: {s:?}");
    assert!(s.padding_rows > 1000 && s.padding_tokens > 1000, "{s:?}");
    assert!(s.prefix_hits > 100 && s.evictions > 100, "{s:?}");
    assert!(s.preemptions > 10, "{s:?}");
    assert!(s.forks > 10 && s.copies > 10, "{s:?}");
    assert!(
        s.step_entries > 1_000_000 && s.sweep_entries > 10_000,
        "{s:?}"
    );
}

/// The first report of a bug run: its findings, and the requests named with their verdicts.
fn first_report(bug: Bug, seed: u64) -> (kv_canary_candle_engine::bugs::Made, Vec<Finding>) {
    let o = run(seed, 400, Some(bug), 60);
    let made = o
        .made
        .unwrap_or_else(|| panic!("{bug} (seed {seed}) was made"));
    let first = o
        .findings
        .first()
        .unwrap_or_else(|| panic!("{bug} (seed {seed}) made at {made:?} was reported"))
        .step;
    assert!(
        first >= made.step,
        "{bug}: reported at {first}, made at {made:?}"
    );
    let found: Vec<Finding> = o.findings.into_iter().filter(|f| f.step == first).collect();
    eprintln!("{bug} (seed {seed}): made {made:?}; reported {found:?}");
    (made, found)
}

fn named(found: &[Finding], id: u64, verdict: &str) -> bool {
    found.iter().any(|f| {
        f.requests
            .iter()
            .any(|(r, v)| *r == id && v.starts_with(verdict))
    })
}

const SEEDS: [u64; 2] = [7, 11];

#[test]
fn a_slot_mapping_off_by_one_is_caught() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::SlotOffByOne, seed);
        let (writer, victims) = made.requests.split_last().unwrap();
        assert!(named(&found, *writer, "Abort"), "the writer is the culprit");
        assert!(victims.iter().any(|&v| named(&found, v, "Recompute")));
        assert!(found.iter().any(|f| Some(f.slot) == made.slot));
        assert!(found[0].step <= made.step + 1);
    }
}

#[test]
fn a_block_freed_while_held_is_caught() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::FreedWhileHeld, seed);
        assert!(named(&found, made.requests[0], "Recompute"), "the holder");
    }
}

#[test]
fn a_stale_row_after_copy_on_write_is_caught() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::StaleRowAfterCow, seed);
        assert!(named(&found, made.requests[0], "Recompute"));
        assert!(found[0].step <= made.step + 1);
    }
}

#[test]
fn a_flipped_byte_of_a_live_block_is_caught() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::LiveKvFlip, seed);
        assert_eq!(found[0].launch, "TAIL_K_FULL");
        assert_eq!(Some(found[0].slot), made.slot);
        assert!(made.requests.iter().all(|&r| named(&found, r, "Recompute")));
    }
}

#[test]
fn a_flipped_byte_of_an_idle_cached_block_is_caught_by_a_sweep() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::IdleKvFlip, seed);
        assert!(matches!(
            found[0].launch.as_str(),
            "SWEEP_K_FULL" | "TAIL_K_FULL"
        ));
        assert_eq!(Some(found[0].slot), made.slot);
        if found[0].launch == "SWEEP_K_FULL" {
            // No request holds an idle block: the guard's judge_sweep evicts it, no verdict.
            assert!(
                found[0].evict && found[0].requests.is_empty(),
                "{:?}",
                found[0]
            );
        } else {
            assert!(!found[0].requests.is_empty(), "the block's reader is named");
        }
    }
}

#[test]
fn swapped_sampled_tokens_are_caught() {
    for seed in SEEDS {
        let (made, found) = first_report(Bug::TokenSwap, seed);
        assert_eq!(
            found[0].step,
            made.step + 1,
            "the next step's write-input check"
        );
        assert!(found.iter().all(|f| f.launch.ends_with("_FULL")));
        for &id in &made.requests {
            assert!(
                named(&found, id, "Abort"),
                "request {id} fed the other's token"
            );
        }
    }
}

#[test]
fn the_canary_integration_is_small() {
    let (lines, names) = canary_footprint();
    eprintln!(
        "src/canary.rs + src/canary_common.rs: {lines} code lines, {} kv-canary names: {names:?}",
        names.len()
    );
    assert!(lines < 150, "{lines} lines");
    assert!(names.len() < 20, "{} names: {names:?}", names.len());
    // The GPU path (src/gpu_canary.rs, built with feature `cuda`) counts the same way (candle
    // tensors wrapped by the kv-canary-candle adapter, whose name counts). Its names meet the
    // goal; its lines do not yet (165: one-step-late reports and the device views' construction,
    // one wrapped tensor a line, on top of the shared helpers), so this bounds them against
    // regressions.
    let (lines, names) = gpu_canary_footprint();
    eprintln!(
        "src/gpu_canary.rs + src/canary_common.rs: {lines} code lines, {} kv-canary names: {names:?}",
        names.len()
    );
    assert!(lines <= 165, "GPU path: {lines} lines");
    assert!(
        names.len() < 20,
        "GPU path: {} names: {names:?}",
        names.len()
    );
}

/// The engine computes what a model computes: a request's greedy tokens in the busy clean run
/// (batched with others, chunked, its prompt partly read from the prefix cache, maybe preempted
/// and recomputed) are the tokens it gets alone.
#[test]
fn a_request_gets_the_same_tokens_batched_and_alone() {
    let (seed, steps) = (7, 300);
    let busy = run(seed, steps, None, 0).transcripts;
    let arrivals = Engine::arrivals(seed, steps);
    let mut compared = 0;
    for r in arrivals.iter().filter(|r| !r.fork).step_by(9).take(8) {
        let Some((_, batched)) = busy.iter().find(|(id, _)| *id == r.id) else {
            continue;
        };
        let alone = Engine::run_requests(seed, vec![r.clone()], 400).expect("runs alone");
        assert_eq!(alone.len(), 1);
        assert_eq!(&alone[0].1, batched, "request {}", r.id);
        compared += 1;
    }
    assert!(compared >= 6, "{compared}");
}

/// The engine's K layout and the library's agree on where a token's first byte lies.
#[test]
fn the_k_layout_is_vllms() {
    use kv_canary::{PagedShape, RealKvSource, TokenLayout};
    use kv_canary_candle_engine::config::{BLOCK_SIZE, HEAD_DIM, KV_HEADS, NUM_BLOCKS, NUM_SLOTS};
    use kv_canary_candle_engine::kv_cache::{element_index, Half, BLOCK_ELEMENTS};
    let shape = PagedShape::new(KV_HEADS, HEAD_DIM, 4, BLOCK_SIZE);
    let bytes = vec![0u8; NUM_BLOCKS * BLOCK_ELEMENTS * 4];
    for (half, layout) in [
        (Half::K, TokenLayout::vllm_k(shape).unwrap()),
        (Half::V, TokenLayout::vllm_v(shape).unwrap()),
    ] {
        let source = RealKvSource::paged(&bytes, NUM_BLOCKS, layout, shape, 16).unwrap();
        for slot in [1, 17, 300, NUM_SLOTS - 1] {
            let ours = element_index(half, slot, 0, 0) * 4;
            assert_eq!(
                source.first_byte(slot as i64),
                Some(ours),
                "{half:?} slot {slot}"
            );
        }
    }
}
