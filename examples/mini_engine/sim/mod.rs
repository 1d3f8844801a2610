//! A small simulated serving engine that runs the canary every step through the step API.
//!
//! Shared by `examples/mini_engine.rs` (which prints a report) and `tests/mini_engine.rs`
//! (which asserts on it). [`run`] drives the loop:
//!
//! ```text
//! schedule   admit (sharing a prompt prefix), allocate KV slots, write req_to_token, batch
//! head       canary.plan_verify_head_and_write(plan inputs, write inputs): the batch,
//!            req_to_token and expected-token pool are planned, the head buffers verified and
//!            input_ids / positions / out_cache_loc stamped in one call (the inputs are filled
//!            before the plan; `plan(..)?.verify_head()?.write(..)?` does the same)
//! forward    write the K and V bytes of this step's tokens; sample
//! tail       .verify_tail(K and V bytes)  -> StepReport
//! finish     retire finished requests: free rows and (refcounted) slots
//! ```

mod engine;
mod kv_pool;
mod requests;

pub use engine::{BugState, Engine, Stats};

use kv_canary::guard::{Action, Guard, Policy};
use kv_canary::step::{Canary, SlotRows};
use kv_canary::{Cap, LaunchTag, PlanInputs, Shape, Swa, Violation};

/// KV pool slots (slot 0 reserved).
pub const POOL_SLOTS: usize = 2048;
/// Most requests per batch: the write-request capacity.
pub const MAX_BS: usize = 8;
/// Rows of the request pool (row 0 is the padding row).
pub const REQ_ROWS: usize = 16;
/// Width of `req_to_token`: the longest request.
pub const MAX_SEQ_LEN: usize = 128;
/// Prefill chunk size.
pub const CHUNK: usize = 32;
/// Token budget of one step: a decode token per running request plus one prefill chunk.
pub const STEP_TOKENS: usize = MAX_BS + CHUNK;
/// Rows of each canary's violation ring.
pub const RING_ROWS: usize = 64;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// Every capacity, once, with SGLang's formulas: verify `3 x pool slots`, write requests
/// `max_bs`, write entries `max(max_bs x 1, step token budget)`.
pub type Spec = Shape<Cap<{ 3 * POOL_SLOTS }>, Cap<MAX_BS>, Cap<{ max(MAX_BS, STEP_TOKENS) }>>;

/// A bug the engine can be told to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// A finished request's slots are freed without their reference counts, although another
    /// request shares its prompt prefix; the pool hands them to someone else.
    UseAfterFree,
    /// `req_to_token` cells of one request are written one column to the right.
    OffByOne,
    /// A finished request's row and slots are freed, but the scheduler keeps running it.
    StaleRow,
    /// A stray store overwrites KV bytes of a slot after they were written.
    KvScribble,
}

impl Bug {
    /// Every bug.
    pub const ALL: [Bug; 4] = [
        Bug::UseAfterFree,
        Bug::OffByOne,
        Bug::StaleRow,
        Bug::KvScribble,
    ];

    /// The command-line name (`use-after-free`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Bug::UseAfterFree => "use-after-free",
            Bug::OffByOne => "off-by-one",
            Bug::StaleRow => "stale-row",
            Bug::KvScribble => "kv-scribble",
        }
    }

    /// The bug of a command-line name.
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// One run's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Steps to run (a run with a bug halts at the end of the first step that reports one).
    pub steps: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// The bug to inject.
    pub bug: Option<Bug>,
    /// The first step at which the bug may strike.
    pub inject_at: u64,
    /// Also run an SWA-group canary with this window.
    pub swa_window: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            steps: 2000,
            seed: 7,
            bug: None,
            inject_at: 300,
            swa_window: None,
        }
    }
}

/// What a run did and found.
#[derive(Debug)]
pub struct Outcome {
    /// Steps run.
    pub steps: u64,
    /// The engine's counters.
    pub stats: Stats,
    /// Most requests in one batch.
    pub max_running: usize,
    /// Canary slots checked by every verify launch of every step.
    pub entries_checked: u64,
    /// Canary slots stamped by every write launch of every step.
    pub entries_written: u64,
    /// Violations reported, over every step.
    pub violations: u64,
    /// The bug and when it fired and corrupted the cache.
    pub bug: BugState,
    /// The first step whose report was not clean.
    pub detected_at: Option<u64>,
    /// Every violation row of that step (FULL group first, then SWA).
    pub detection: Vec<Violation>,
    /// The first few distinct violations of that step, as sentences, with the launches that
    /// found each and the requests that hold its slot.
    pub first_violations: Vec<String>,
    /// The guard's verdicts at the detection step (FULL group): the requests to recompute and
    /// to abort, with the slot that decided each.
    pub verdicts: Vec<String>,
    /// Defects of the simulation itself (must be empty).
    pub anomalies: Vec<String>,
}

/// How many violations an outcome quotes.
const QUOTED: usize = 6;

/// Runs the engine for `cfg.steps` steps (or until the canary reports a violation), with the
/// canary on every step.
pub fn run(cfg: &Config) -> Result<Outcome, kv_canary::Error> {
    let mut engine = Engine::new(cfg.seed, cfg.bug, cfg.inject_at);
    let mut full = Canary::full(Spec::new(), Cap::<POOL_SLOTS>, Cap::<RING_ROWS>);
    let mut swa = Canary::swa(Spec::new(), Cap::<POOL_SLOTS>, Cap::<RING_ROWS>);
    let (mut inputs, mut swa_inputs) = (full.write_inputs(), swa.write_inputs());
    let mut out = Outcome {
        steps: 0,
        stats: Stats::default(),
        max_running: 0,
        entries_checked: 0,
        entries_written: 0,
        violations: 0,
        bug: BugState::default(),
        detected_at: None,
        detection: Vec::new(),
        first_violations: Vec::new(),
        verdicts: Vec::new(),
        anomalies: Vec::new(),
    };
    // The engine's policy: a verdict per request for violations, unverified steps logged.
    let mut guard = Guard::new(Policy {
        violations: Action::PerRequest,
        unverified: Action::Log,
        ..Policy::default()
    });
    for step in 0..cfg.steps {
        engine.schedule(step);
        out.max_running = out.max_running.max(engine.running());
        engine.fill_write_inputs(&mut inputs, false);
        let pool = engine.expected.with_valid_lens(&engine.valid_lens);
        let plan = PlanInputs::full(&engine.batch, &engine.req_to_token).with_expected(pool);
        // The write inputs are filled before the plan: the whole head stage in one call
        // (`plan(..)?.verify_head()?.write(..)?` gives the same report).
        let full_step = full.plan_verify_head_and_write(&plan, &inputs)?;
        // The step's slots by batch row, and its requests, for the guard's verdicts.
        let rows = SlotRows::new(&plan, inputs.out_cache_loc())?;
        let requests = engine.batch_requests();
        let swa_step = match cfg.swa_window {
            Some(window) => {
                engine.fill_write_inputs(&mut swa_inputs, true);
                let plan = plan.with_group(Swa::window(window).with_lut(&engine.lut));
                Some(swa.plan_verify_head_and_write(&plan, &swa_inputs)?)
            }
            None => None,
        };
        engine.forward(step);
        let report = full_step.verify_tail(engine.kv.tail_kv())?;
        let swa_report = match swa_step {
            Some(s) => Some(s.verify_tail(engine.swa_kv.tail_kv())?),
            None => None,
        };
        out.steps = step + 1;
        let reports = [Some(&report), swa_report.as_ref()];
        for r in reports.into_iter().flatten() {
            out.entries_checked += r.entries_checked();
            out.entries_written += r.entries_written();
            out.violations += r.recorded();
        }
        let judgement = guard.judge(&report, &rows, &requests)?;
        if !report.is_clean() || swa_report.as_ref().is_some_and(|r| !r.is_clean()) {
            out.detected_at = Some(step);
            out.verdicts = judgement
                .verdicts
                .iter()
                .map(|v| {
                    format!(
                        "request #{}: {:?} ({:?} of slot {})",
                        v.request, v.verdict, v.role, v.slot
                    )
                })
                .collect();
            let swa_rows = swa_report.iter().flat_map(|r| &r.violations);
            out.detection = report.violations.iter().chain(swa_rows).copied().collect();
            out.first_violations = quote(&engine, &out.detection);
            break;
        }
        engine.finish(step);
    }
    out.stats = engine.stats;
    out.bug = engine.bug.clone();
    out.anomalies = engine.anomalies.clone();
    Ok(out)
}

/// The first distinct violations of a step as sentences. Rows that differ only in the launch
/// that recorded them (the K and V halves, head and tail buffers) are merged; each sentence ends
/// with the launches that found it and the requests that hold its slot.
fn quote(engine: &Engine, rows: &[Violation]) -> Vec<String> {
    let mut found: Vec<(Violation, Vec<LaunchTag>)> = Vec::new();
    for v in rows {
        let same = |(u, _): &&mut (Violation, Vec<LaunchTag>)| {
            Violation {
                kernel_kind: 0,
                ..*u
            } == Violation {
                kernel_kind: 0,
                ..*v
            } && is_swa(u) == is_swa(v)
        };
        match found.iter_mut().find(same) {
            Some((_, tags)) => tags.extend(v.launch_tag()),
            None => found.push((*v, v.launch_tag().into_iter().collect())),
        }
    }
    found
        .into_iter()
        .take(QUOTED)
        .map(|(v, tags)| {
            let sentence = v.to_string();
            let what = sentence
                .rsplit_once(", launch ")
                .map_or(&*sentence, |(s, _)| s);
            let tags: Vec<&str> = tags.iter().map(|t| t.name()).collect();
            let full_slot = if is_swa(&v) {
                engine.lut.iter().position(|&s| s == v.slot).unwrap_or(0) as i64
            } else {
                v.slot
            };
            let holders = engine.describe_slot(full_slot);
            let slot = if is_swa(&v) {
                format!("SWA slot {} is full slot {full_slot}, held by", v.slot)
            } else {
                format!("slot {} is held by", v.slot)
            };
            format!(
                "{what}\n      found by {}; {slot} {holders}",
                tags.join(", ")
            )
        })
        .collect()
}

fn is_swa(v: &Violation) -> bool {
    v.launch_tag().is_some_and(|t| t.name().ends_with("_SWA"))
}
