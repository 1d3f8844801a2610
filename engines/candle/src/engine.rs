//! The serving loop: arrivals, scheduling, copy-on-write copies, the model's forward pass
//! (guarded by the canary when it is on), greedy sampling, bookkeeping, the sweep; and the
//! bug flags' hooks where each bug happens in a real engine.

use crate::backend::{CpuBackend, ModelBackend};
use crate::batch::StepArrays;
use crate::bugs::{Bug, BugState, Made};
use crate::canary_common::Finding;
use crate::config::BLOCK_SIZE;
use crate::scheduler::Scheduler;
use crate::workload::{Request, Workload};
use crate::Result;
use std::collections::HashMap;

/// What a run does.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    /// Seeds the weights and the arrivals.
    pub seed: u64,
    /// Steps at most.
    pub steps: u64,
    /// The bug flag, armed from `bug_step`.
    pub bug: Option<Bug>,
    /// The first step the bug may be made in.
    pub bug_step: u64,
    /// Whether the canary guards the run.
    pub canary: bool,
}

/// Counts of what the run exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps run.
    pub steps: u64,
    /// Requests that arrived.
    pub arrivals: u64,
    /// Requests finished.
    pub finished: u64,
    /// Tokens computed (prefill and decode).
    pub tokens: u64,
    /// Steps with a prefill chunk and a decode together.
    pub mixed_steps: u64,
    /// Padding rows.
    pub padding_rows: u64,
    /// Padding tokens.
    pub padding_tokens: u64,
    /// Prefix-cache blocks reused.
    pub prefix_hits: u64,
    /// Cached blocks evicted.
    pub evictions: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Forks.
    pub forks: u64,
    /// Copies on write.
    pub copies: u64,
    /// Verify entries the canary's steps checked (all four launches).
    pub step_entries: u64,
    /// Verify entries its sweeps checked.
    pub sweep_entries: u64,
    /// Cached blocks dropped from the prefix cache because their KV failed a verify.
    pub cache_drops: u64,
}

/// The engine, its model and canary run by `B` ([`CpuBackend`] unless the GPU path's).
pub struct Engine<B: ModelBackend = CpuBackend> {
    backend: B,
    sched: Scheduler,
    arrays: StepArrays,
    workload: Workload,
    bugs: BugState,
    step: u64,
    stats: Stats,
    /// Everything the canary reported.
    pub findings: Vec<Finding>,
}

/// A run's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The bug as made, if any.
    pub made: Option<Made>,
    /// The canary's findings (the first report's, for a bug run).
    pub findings: Vec<Finding>,
    /// What the run exercised.
    pub stats: Stats,
    /// Finished requests' transcripts.
    pub transcripts: Vec<(u64, Vec<u32>)>,
}

/// The clean run of `clean` (unless `only` names a bug flag), then each bug flag's run made
/// from step 60 (only `only`'s; none when `clean_only`), each on a new backend from
/// `backend`; `report` gets each run's name, outcome and wall time in seconds.
pub fn run_suite<B: ModelBackend>(
    clean: &RunConfig,
    only: Option<Bug>,
    clean_only: bool,
    mut backend: impl FnMut() -> Result<B>,
    mut report: impl FnMut(&str, &Outcome, f64),
) -> Result<()> {
    let mut timed = |name: &str, config: &RunConfig| -> Result<()> {
        let t = std::time::Instant::now();
        let o = Engine::run_on(config, backend()?)?;
        report(name, &o, t.elapsed().as_secs_f64());
        Ok(())
    };
    if only.is_none() {
        timed("clean", clean)?;
    }
    if clean_only {
        return Ok(());
    }
    for bug in Bug::ALL
        .into_iter()
        .filter(|b| only.is_none_or(|o| o == *b))
    {
        let config = RunConfig {
            bug: Some(bug),
            bug_step: 60,
            ..*clean
        };
        timed(bug.name(), &config)?;
    }
    Ok(())
}

impl Outcome {
    /// One line: the bug as made and the canary's first report of it (the step, the launch, the
    /// slot, the requests and their verdicts, the cached slots evicted), or the clean run's
    /// counts and what the canary reported.
    pub fn summary(&self, name: &str) -> String {
        let o = self;
        let first = o.findings.first();
        let reported = match (first, &o.made) {
            (None, _) => "no report".to_string(),
            (Some(f), _) => {
                let requests: Vec<String> = (o.findings.iter())
                    .filter(|g| g.step == f.step)
                    .flat_map(|g| g.requests.iter().map(|(id, v)| format!("{id} {v}")))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let evicted = (o.findings.iter())
                    .filter(|g| g.step == f.step && g.evict)
                    .map(|g| g.slot)
                    .collect::<std::collections::BTreeSet<_>>();
                format!(
                    "reported at step {} by {} (slot {}, {} violation(s)): requests [{}], cached slots evicted {:?}",
                    f.step,
                    f.launch,
                    f.slot,
                    o.findings.iter().filter(|g| g.step == f.step).count(),
                    requests.join(", "),
                    evicted
                )
            }
        };
        match &o.made {
            Some(m) => format!(
                "{name}: made at step {} ({}; requests {:?}), {reported}",
                m.step, m.detail, m.requests
            ),
            None => {
                let s = &o.stats;
                format!(
                    "{name}: {} steps, {} arrivals, {} finished, {} tokens, {} mixed steps, {} padding rows, \
                     {} padding tokens, {} prefix-cache blocks reused, {} evictions, {} preemptions, \
                     {} forks, {} copies on write; canary: {} step entries, {} sweep entries checked: {reported}",
                    s.steps, s.arrivals, s.finished, s.tokens, s.mixed_steps, s.padding_rows,
                    s.padding_tokens, s.prefix_hits, s.evictions, s.preemptions, s.forks, s.copies,
                    s.step_entries, s.sweep_entries
                )
            }
        }
    }
}

impl Engine {
    /// An engine for `config` on candle's CPU backend.
    pub fn new(config: &RunConfig) -> Result<Self> {
        Engine::with_backend(config, CpuBackend::new(config.seed, config.canary)?)
    }

    /// The bug's first report, or the whole run's findings, on the CPU: see
    /// [`run_on`](Self::run_on).
    pub fn run(config: &RunConfig) -> Result<Outcome> {
        Engine::run_on(config, CpuBackend::new(config.seed, config.canary)?)
    }

    /// Runs `requests`, all queued at the first step and no arrivals, until they finish (at
    /// most `steps` steps); the finished requests' transcripts.
    pub fn run_requests(
        seed: u64,
        requests: Vec<Request>,
        steps: u64,
    ) -> Result<Vec<(u64, Vec<u32>)>> {
        let config = RunConfig {
            seed,
            steps,
            bug: None,
            bug_step: 0,
            canary: true,
        };
        let mut engine = Engine::new(&config)?;
        engine.workload.arrival = 0.0;
        for r in requests {
            engine.sched.add(r);
        }
        while engine.step < steps
            && !(engine.sched.running.is_empty() && engine.sched.waiting.is_empty())
        {
            engine.step()?;
        }
        engine.findings.extend(engine.backend.finish()?);
        if !engine.findings.is_empty() {
            return Err(format!("the canary reported {:?}", engine.findings).into());
        }
        Ok(engine.sched.transcripts)
    }

    /// The requests `Engine::run` sees arrive with `seed` in `steps` steps, in order.
    pub fn arrivals(seed: u64, steps: u64) -> Vec<Request> {
        let mut w = Workload::new(seed);
        (0..steps).filter_map(|_| w.arrive()).collect()
    }
}

impl<B: ModelBackend> Engine<B> {
    /// An engine for `config` whose model and canary `backend` runs (`config.canary` is the
    /// backend's to honour).
    pub fn with_backend(config: &RunConfig, backend: B) -> Result<Self> {
        Ok(Engine {
            backend,
            sched: Scheduler::default(),
            arrays: StepArrays::new(),
            workload: Workload::new(config.seed),
            bugs: BugState::new(config.bug, config.bug_step),
            step: 0,
            stats: Stats::default(),
            findings: Vec::new(),
        })
    }

    /// Runs one step.
    pub fn step(&mut self) -> Result<()> {
        self.step += 1;
        let step = self.step;
        if let Some(r) = self.workload.arrive() {
            self.sched.add(r);
            self.stats.arrivals += 1;
        }
        self.sched.schedule(&mut self.arrays, &mut self.bugs, step);
        for &(from, to) in &self.sched.copies {
            self.backend.copy_block(from, to)?;
        }
        if self.bugs.due(Bug::SlotOffByOne, step) {
            self.misdirect_one_slot(step);
        }
        let stepped = self.backend.step(step, &self.arrays)?;
        self.drop_lost(&stepped.findings);
        self.findings.extend(stepped.findings);
        self.count();
        self.sched.update(&mut self.arrays, &stepped.sampled);
        if self.bugs.due(Bug::TokenSwap, step) {
            self.swap_tokens(step);
        }
        if self.bugs.due(Bug::LiveKvFlip, step) {
            self.flip_live(step)?;
        }
        if self.bugs.due(Bug::IdleKvFlip, step) {
            self.flip_idle(step)?;
        }
        let found = self.backend.sweep(step, &self.sched.alloc)?;
        self.drop_lost(&found);
        self.findings.extend(found);
        Ok(())
    }

    /// The guard's lost slots (a verify failed there: every sweep finding, a step's verify
    /// findings) leave the prefix cache: a later request recomputes those tokens instead of
    /// reading the corrupted KV.
    fn drop_lost(&mut self, found: &[Finding]) {
        for f in found.iter().filter(|f| f.evict) {
            if let Ok(block) = u32::try_from(f.slot / BLOCK_SIZE as i64) {
                self.sched.alloc.drop_cached(block);
            }
        }
    }

    fn count(&mut self) {
        let (a, s) = (&self.arrays, &mut self.stats);
        s.steps += 1;
        let real: usize = self.sched.scheduled.iter().map(|x| x.query).sum();
        s.tokens += real as u64;
        s.padding_rows += (a.bs - self.sched.scheduled.len()) as u64;
        s.padding_tokens += (a.tokens - real) as u64;
        let decodes = self.sched.scheduled.iter().filter(|x| x.query == 1).count();
        s.mixed_steps += u64::from(decodes > 0 && decodes < self.sched.scheduled.len());
    }

    /// The bug's first report, or the whole run's findings, with `backend`: runs up to
    /// `config.steps` steps, a bug run stopping at the first report after the bug was made.
    pub fn run_on(config: &RunConfig, backend: B) -> Result<Outcome> {
        let mut engine = Engine::with_backend(config, backend)?;
        while engine.step < config.steps {
            engine.step()?;
            if config.bug.is_some() && engine.bugs.made.is_some() && !engine.findings.is_empty() {
                break;
            }
        }
        if engine.findings.is_empty() || config.bug.is_none() {
            engine.findings.extend(engine.backend.finish()?);
        }
        let s = &mut engine.stats;
        (s.finished, s.preemptions, s.forks) = (
            engine.sched.finished,
            engine.sched.preemptions,
            engine.sched.forks,
        );
        (s.step_entries, s.sweep_entries) = engine.backend.checked();
        let alloc = &engine.sched.alloc;
        (s.prefix_hits, s.evictions, s.copies) = (alloc.hits, alloc.evictions, alloc.copies);
        s.cache_drops = alloc.dropped;
        Ok(Outcome {
            transcripts: std::mem::take(&mut engine.sched.transcripts),
            made: engine.bugs.made.clone(),
            findings: engine.findings,
            stats: engine.stats,
        })
    }

    /// The batch row of each flat token this step (`None`: padding).
    fn token_requests(&self) -> Vec<Option<u64>> {
        let a = &self.arrays;
        let mut out = Vec::new();
        for r in 0..a.bs {
            out.extend((0..a.query_lens[r]).map(|_| a.requests[r]));
        }
        out
    }

    /// Slot mapping off by one: one token's slot moved onto a neighbouring slot that another
    /// running request has cached (and the writer does not hold).
    fn misdirect_one_slot(&mut self, step: u64) {
        let mut owners: HashMap<i64, Vec<u64>> = HashMap::new();
        for s in &self.sched.running {
            for p in 0..s.computed {
                owners.entry(s.slot(p)).or_default().push(s.id);
            }
        }
        let writers = self.token_requests();
        for (t, writer) in writers.iter().enumerate() {
            let (Some(w), slot) = (*writer, self.arrays.slot_mapping[t]) else {
                continue;
            };
            for target in [slot + 1, slot - 1] {
                if let Some(victims) = owners.get(&target).filter(|o| !o.contains(&w)) {
                    self.arrays.slot_mapping[t] = target;
                    let mut named = victims.clone();
                    named.push(w);
                    let detail = format!("request {w}'s token to slot {target}, not {slot}");
                    self.bugs.record(step, named, Some(target), detail);
                    return;
                }
            }
        }
    }

    /// Two requests' sampled tokens swapped on their way to the next step's input ids.
    fn swap_tokens(&mut self, step: u64) {
        let a = &mut self.arrays;
        let live: Vec<(usize, u64)> = (a.sample_rows.iter())
            .filter_map(|&r| {
                let s = self.sched.running.iter().find(|s| s.row == Some(r))?;
                s.fed.then_some((r, s.id))
            })
            .collect();
        for (i, &(r1, id1)) in live.iter().enumerate() {
            if let Some(&(r2, id2)) = live[i + 1..]
                .iter()
                .find(|(r2, _)| a.last_sampled[*r2] != a.last_sampled[r1])
            {
                a.last_sampled.swap(r1, r2);
                let detail = format!("rows {r1} and {r2}' sampled tokens swapped");
                self.bugs.record(step, vec![id1, id2], None, detail);
                return;
            }
        }
    }

    /// A K byte of a running request's last cached token flipped (layer 0).
    fn flip_live(&mut self, step: u64) -> Result<()> {
        let Some(s) = self.sched.running.iter().find(|s| s.computed > 0) else {
            return Ok(());
        };
        let slot = s.slot(s.computed - 1);
        self.backend.flip_k_byte(slot as usize)?;
        let holders = (self.sched.running.iter())
            .filter(|o| (0..o.computed).any(|p| o.slot(p) == slot))
            .map(|o| o.id)
            .collect();
        self.bugs.record(
            step,
            holders,
            Some(slot),
            format!("K byte of slot {slot} flipped"),
        );
        Ok(())
    }

    /// A K byte of an idle cached block flipped (layer 0): the block freed last, so the one
    /// evicted last.
    fn flip_idle(&mut self, step: u64) -> Result<()> {
        let Some((block, c)) = self.sched.alloc.idle_cached().last() else {
            return Ok(());
        };
        let slot = block as usize * BLOCK_SIZE;
        self.backend.flip_k_byte(slot)?;
        let detail = format!(
            "K byte of slot {slot} (idle cached block {block}, positions from {}) flipped",
            c.index * BLOCK_SIZE
        );
        self.bugs
            .record(step, Vec::new(), Some(slot as i64), detail);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Engine, RunConfig};
    use crate::backend::ModelBackend;
    use crate::block_allocator::block_hash;
    use crate::config::BLOCK_SIZE;

    /// The engine honours the guard's lost slots: a K byte of a system prompt's first block
    /// (the most shared prefixes) flipped while the block sits idle in the prefix cache is
    /// reported once (by the verify of the request that takes the block next, or by a sweep),
    /// and the block leaves the prefix cache: nothing else is reported to step 400 while the
    /// cache keeps serving other prefixes. Without the drop the corrupted block stays cached,
    /// to be taken as a prefix again (seed 7: a sweep reports it again at step 383).
    #[test]
    fn a_lost_cached_block_is_never_served_again() {
        let config = RunConfig {
            seed: 7,
            steps: 400,
            bug: None,
            bug_step: 0,
            canary: true,
        };
        let mut e = Engine::new(&config).expect("an engine");
        let firsts: Vec<u64> = (e.workload.system_prompts().iter())
            .filter(|p| p.len() >= BLOCK_SIZE)
            .map(|p| block_hash(None, &p[..BLOCK_SIZE]))
            .collect();
        // From step 60, the first step at which a system prompt's first block sits idle.
        let block = loop {
            e.step().expect("a step");
            let idle = (e.sched.alloc.idle_cached()).find(|(_, c)| firsts.contains(&c.hash));
            match idle {
                Some((block, _)) if e.step >= 60 => break block,
                _ => assert!(e.step < 200, "no system prompt block idle by step 200"),
            }
        };
        let flipped_at = e.step;
        e.backend
            .flip_k_byte(block as usize * BLOCK_SIZE)
            .expect("a flip");
        let hits_before = e.sched.alloc.hits;
        while e.step < config.steps {
            e.step().expect("a step");
        }
        e.findings
            .extend(e.backend.finish().expect("the last report"));
        let reported = e.findings.first().expect("the flip is reported").step;
        assert!(
            e.findings.iter().all(|f| f.step == reported),
            "reported once, at step {reported}: {:?}",
            e.findings
        );
        assert_eq!(e.sched.alloc.dropped, 1);
        assert!(
            e.sched.alloc.hits > hits_before + 20,
            "the cache kept serving other prefixes: {} hits after the flip",
            e.sched.alloc.hits - hits_before
        );
        eprintln!(
            "block {block} flipped after step {flipped_at}, reported at step {reported} by {} \
             ({} finding(s)); {} prefix-cache hits after",
            e.findings[0].launch,
            e.findings.len(),
            e.sched.alloc.hits - hits_before
        );
    }
}
