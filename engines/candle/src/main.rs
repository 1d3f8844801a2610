//! Runs the engine: the clean run and every bug flag (or one), one line per outcome.
//!
//! ```text
//! cargo run --release -- [--steps N] [--seed S] [--bug NAME | --clean] [--no-canary]
//! ```

use kv_canary_candle_engine::bugs::Bug;
use kv_canary_candle_engine::engine::{Engine, Outcome, RunConfig};
use kv_canary_candle_engine::footprint::canary_footprint;
use std::time::Instant;

fn line(name: &str, o: &Outcome) -> String {
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

fn main() -> kv_canary_candle_engine::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut steps, mut seed, mut only, mut clean_only, mut canary) = (1000, 7, None, false, true);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--steps" => steps = args.next().ok_or("--steps N")?.parse()?,
            "--seed" => seed = args.next().ok_or("--seed S")?.parse()?,
            "--bug" => only = Some(args.next().ok_or("--bug NAME")?.parse::<Bug>()?),
            "--clean" => clean_only = true,
            "--no-canary" => canary = false,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let (lines, names) = canary_footprint();
    println!(
        "canary integration (src/canary.rs): {lines} code lines, {} kv-canary names: {}",
        names.len(),
        names.join(", ")
    );
    let clean = RunConfig {
        seed,
        steps,
        bug: None,
        bug_step: 0,
        canary,
    };
    if only.is_none() {
        let t = Instant::now();
        let o = Engine::run(&clean)?;
        println!("{} [{:.1} s]", line("clean", &o), t.elapsed().as_secs_f64());
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
            ..clean
        };
        let o = Engine::run(&config)?;
        println!("{}", line(bug.name(), &o));
    }
    Ok(())
}
