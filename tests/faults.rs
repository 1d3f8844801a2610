//! Fault injection (issue 33 item 5, feature `faults`): each of SGLang's five perturbations,
//! injected into a paged engine on the CPU canary (vLLM K and V layouts, u32 block tables, an
//! idle cached request swept each step, tokens from the oracle with the write-input check on),
//! is caught by the detector it targets; the test prints the detection table (fault x detector
//! x steps to detection). `cargo test --features faults --test faults` (`.ci/run` runs it).
#![cfg(feature = "faults")]

use kv_canary::guard::faults::{Fault, FaultInjector, FaultPlan, TokenOracle};
use kv_canary::step::{Canary, Findings, SweepEntries, TailKv};
use kv_canary::{
    BatchView, Cap, PlanInputs, RealKv, RealKvHashMode, RealKvSource, RealKvSources,
    ReqToTokenView, Shape, TokenLayout, WriteInputsView,
};

#[path = "shared/fault_scenario.rs"]
mod fault_scenario;

use fault_scenario::{
    block_slot as slot, detector, forward_token, plan, Detector, BLOCKS, EXPECTED, SHAPE,
};

type C = Canary<Cap<128>, Cap<2>, Cap<8>, Cap<{ BLOCKS * 16 }>, Cap<64>>;

fn src(bytes: &[u8], layout: TokenLayout) -> RealKvSource<'_> {
    RealKvSource::paged(bytes, BLOCKS, layout, SHAPE, SHAPE.token_bytes()).unwrap()
}
fn k_layout() -> TokenLayout {
    TokenLayout::vllm_k(SHAPE).unwrap()
}
fn v_layout() -> TokenLayout {
    TokenLayout::vllm_v(SHAPE).unwrap()
}
fn kv_of<'a>(k: &'a [u8], v: &'a [u8]) -> TailKv<'a> {
    let one = |bytes, layout| {
        RealKv::new(
            RealKvHashMode::All,
            RealKvSources::from_array([src(bytes, layout)]),
        )
    };
    TailKv::new(one(k, k_layout()), one(v, v_layout()))
}

/// A request: its id and its two blocks.
type Request = (u64, [u32; 2]);

/// Runs 8 decode steps of requests "a" (blocks 1, 2) and "b" (blocks 3, 4) after their
/// prefills, with request "c" (block 5) cached idle and swept each step, `plan` injected; returns
/// the injection's step and the first (step, detector) that reported.
fn run(plan: FaultPlan) -> (u64, Option<(u64, Detector)>) {
    let oracle = TokenOracle {
        seed: 7,
        vocab: 32000,
    };
    let mut canary: C = Canary::full(Shape::new(), Cap, Cap);
    let mut injector = FaultInjector::new(11, &[plan]);
    let mut k = vec![0u8; BLOCKS * SHAPE.block_bytes()];
    let mut v = vec![0u8; BLOCKS * SHAPE.block_bytes()];
    let requests: [Request; 2] = [(1, [1, 2]), (2, [3, 4])];
    let idle_blocks = [5u32, 0];
    let mut first: Option<(u64, Detector)> = None;
    // Step 0 prefills "c" (idle afterwards) with row 0; then steps of "a" and "b".
    for step in 0..10u64 {
        injector.begin_step();
        let (rows, context, query): (Vec<Request>, Vec<u32>, Vec<u32>) = if step == 0 {
            (vec![(3, idle_blocks)], vec![12], vec![12])
        } else if step == 1 {
            (requests.to_vec(), vec![16, 16], vec![16, 16])
        } else {
            let c = 16 + step as u32 - 1;
            (requests.to_vec(), vec![c, c], vec![1, 1])
        };
        let mut block_table: Vec<u32> = rows.iter().flat_map(|r| r.1).collect();
        // Hook: a table cell of "a" (positions cached before this step) points into "b".
        if step >= 2 {
            let eligible: Vec<usize> = vec![0]; // "a"'s first block, cached and not written
            injector.table_cell(&mut block_table, &eligible, &[requests[1].1[0]]);
        }
        let table = ReqToTokenView::block_table(rows.len(), 2, 16, &block_table).unwrap();
        let batch = BatchView::from_query_lens(rows.len(), &context, &query).unwrap();
        let (mut ids, mut expected, mut positions, mut slots) =
            (vec![0i64; 8], vec![0i64; 8], vec![0i64; 8], vec![-1i64; 8]);
        let mut t = 0;
        for (r, &(request, blocks)) in rows.iter().enumerate() {
            for p in (context[r] - query[r])..context[r] {
                let p = p as usize;
                if t < 8 {
                    ids[t] = oracle.token(request, p as i64);
                    expected[t] = ids[t];
                    positions[t] = p as i64;
                    slots[t] = slot(&blocks, p);
                }
                t += 1;
            }
        }
        // Prefills write more than 8 tokens: they go through the CPU in chunks below.
        let live: Vec<i64> = rows
            .iter()
            .enumerate()
            .flat_map(|(r, &(_, blocks))| {
                (0..(context[r] - query[r]) as usize).map(move |p| slot(&blocks, p))
            })
            .collect();
        injector.live_kv(&mut k, &live, k_first_byte);
        if step >= 2 {
            injector.swap_tokens(&mut ids[..2]);
        }
        let (report, written) = if query.iter().any(|&q| q > 8) {
            // Prefill: stamp every token, 8 at a time, through the write-input check too.
            prefill(&mut canary, &rows, &context, &oracle, &mut k, &mut v)
        } else {
            let write = WriteInputsView::new(Cap::<8>, &ids, &positions, &slots)
                .unwrap()
                .with_expected(&expected, &positions)
                .unwrap();
            let step_ = canary
                .plan(&PlanInputs::from_views(batch, table))
                .unwrap()
                .verify_head()
                .unwrap()
                .write(&write)
                .unwrap();
            for (i, &s) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
                forward(&mut k, &mut v, s, positions[i] as usize);
            }
            let report = step_.verify_tail(kv_of(&k, &v)).unwrap();
            (report.violations.clone(), slots.clone())
        };
        injector.after_stamp(&mut k, &written, k_first_byte);
        // The idle request's sweep.
        let idle: Vec<i64> = (0..12).map(|p| slot(&idle_blocks, p)).collect();
        if step >= 1 {
            injector.idle_kv(&mut k, &idle, k_first_byte);
            let mut entries = SweepEntries::new();
            entries.push_node(None::<i64>, 0, &idle).unwrap();
            let sweep = canary.sweep(entries.as_slice(), kv_of(&k, &v)).unwrap();
            if let Some(row) = sweep.violations().first() {
                first = first.or(Some((step, detector(row))));
            }
        }
        if let Some(row) = report.first() {
            first = first.or(Some((step, detector(row))));
        }
    }
    let injected = injector.injected().first().map(|i| i.step - 1);
    (injected.expect("the fault was injected"), first)
}

/// Where slot `s`'s first K byte lies (offsets only depend on the layout, so one zeroed cache of
/// the right size serves every call).
fn k_first_byte(s: i64) -> Option<usize> {
    static ZEROS: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let bytes = ZEROS.get_or_init(|| vec![0u8; BLOCKS * SHAPE.block_bytes()]);
    src(bytes, k_layout()).first_byte(s)
}

/// The forward pass: a token's K and V bytes, a function of its position.
fn forward(k: &mut [u8], v: &mut [u8], slot: i64, pos: usize) {
    forward_token(k, k_layout(), slot, pos);
    forward_token(v, v_layout(), slot, pos);
}

/// A prefill of `rows` (context = query), 8 tokens a step of the canary; returns the
/// violations and the written slots.
fn prefill(
    canary: &mut C,
    rows: &[Request],
    context: &[u32],
    oracle: &TokenOracle,
    k: &mut [u8],
    v: &mut [u8],
) -> (Vec<kv_canary::Violation>, Vec<i64>) {
    let mut violations = Vec::new();
    let mut written = Vec::new();
    for (r, &(request, blocks)) in rows.iter().enumerate() {
        for chunk in (0..context[r] as usize).step_by(8) {
            let n = (context[r] as usize - chunk).min(8);
            let table = ReqToTokenView::block_table(1, 2, 16, &blocks).unwrap();
            let (ctx, q) = ([(chunk + n) as u32], [n as u32]);
            let batch = BatchView::from_query_lens(1, &ctx, &q).unwrap();
            let mut ids = vec![0i64; 8];
            let mut positions = vec![0i64; 8];
            let mut slots = vec![-1i64; 8];
            for i in 0..n {
                let p = chunk + i;
                (ids[i], positions[i], slots[i]) =
                    (oracle.token(request, p as i64), p as i64, slot(&blocks, p));
            }
            let write = WriteInputsView::new(Cap::<8>, &ids, &positions, &slots)
                .unwrap()
                .with_expected(&ids, &positions)
                .unwrap();
            let step = canary
                .plan(&PlanInputs::from_views(batch, table))
                .unwrap()
                .verify_head()
                .unwrap()
                .write(&write)
                .unwrap();
            for i in 0..n {
                forward(k, v, slots[i], positions[i] as usize);
            }
            violations.extend(step.verify_tail(kv_of(k, v)).unwrap().violations);
            written.extend(&slots[..n]);
        }
    }
    (violations, written)
}

#[test]
fn each_perturbation_is_caught_by_its_detector() {
    // Nothing injected: nothing reported.
    let quiet = FaultPlan {
        probability: 0.0,
        ..plan(Fault::LiveKv)
    };
    let mut injector = FaultInjector::new(1, &[quiet]);
    injector.begin_step();
    assert!(injector.swap_tokens(&mut [1, 2]).is_none());
    eprintln!("| fault | injected at step | detector | steps to detection |");
    eprintln!("|---|---|---|---|");
    for (fault, detectors) in EXPECTED {
        let (injected, first) = run(plan(fault));
        let (step, detector) = first.unwrap_or_else(|| panic!("{fault:?} was not detected"));
        assert!(
            detectors.contains(&detector),
            "{fault:?} detected by {detector:?}, not {detectors:?}"
        );
        assert!(
            step >= injected && step <= injected + 1,
            "{fault:?}: {step} vs {injected}"
        );
        eprintln!(
            "| {fault:?} | {injected} | {detector:?} | {} |",
            step - injected
        );
    }
    let oracle = TokenOracle {
        seed: 7,
        vocab: 100,
    };
    assert_eq!(oracle.token(3, 9), oracle.token(3, 9));
    assert!((0..100).all(|p| oracle.token(1, p) < 100));
}
