//! Run-time configuration: capacities parsed from the command line, still mismatch-proof.
//!
//! A real engine learns `max_bs`, `topk` and the KV pool size at start-up, so its capacities are
//! not compile-time numbers. `Shape::branded` derives every capacity from those knobs and brands
//! them with a fresh lifetime: a buffer allocated from one branded shape is refused *at compile
//! time* by launches of any other shape, even though all the numbers came from the command line
//! (see `ui-tests/fail/verify_capacity_branded.rs`). `Shape::unchecked` is the escape hatch for
//! FFI and quick experiments: the same mistake compiles and is reported at the call, as
//! `Error::CapacityMismatch` naming both numbers.
//!
//! Run it with defaults (`cargo run --example runtime_config`) or with your own knobs:
//! `cargo run --example runtime_config -- --max-bs 8 --topk 4 --pool-slots 1024`.

mod common;

use kv_canary::{
    cpu, Batch, Capacity, EngineKnobs, Error, PlanInputs, ReqToToken, Shape, UncheckedCapacity,
    VerifyCapacityRule, VerifyPlan,
};
use std::process::ExitCode;

/// The engine's knobs, as read from the command line.
#[derive(Debug)]
struct Args {
    max_bs: usize,
    topk: usize,
    pool_slots: usize,
    max_extend: usize,
}

const USAGE: &str =
    "usage: runtime_config [--max-bs N] [--topk K] [--pool-slots P] [--max-extend X]
  --max-bs N       most requests per batch (default 8)
  --topk K         speculative draft tokens per request (default 4)
  --pool-slots P   KV pool slots (default 1024)
  --max-extend X   chunked-prefill token budget (default 256)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        max_bs: 8,
        topk: 4,
        pool_slots: 1024,
        max_extend: 256,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (flag.clone(), None),
        };
        let field = match name.as_str() {
            "--max-bs" => &mut args.max_bs,
            "--topk" => &mut args.topk,
            "--pool-slots" => &mut args.pool_slots,
            "--max-extend" => &mut args.max_extend,
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument `{flag}`")),
        };
        let value = inline
            .or_else(|| it.next())
            .ok_or_else(|| format!("`{name}` needs a value"))?;
        *field = value
            .parse()
            .map_err(|_| format!("`{name}` needs a non-negative integer, got `{value}`"))?;
    }
    // Each request row (plus the padding row 0) owns pool_slots / (max_bs + 1) slots; it must
    // hold a prefix and the topk + 1 tokens of a step.
    let per_request = args.pool_slots / args.max_bs.saturating_add(1);
    if per_request <= args.topk.saturating_add(1) {
        return Err(format!(
            "--pool-slots {} leaves {per_request} slots per request; max_bs = {} and topk = {} \
             need more than topk + 1 = {}",
            args.pool_slots,
            args.max_bs,
            args.topk,
            args.topk.saturating_add(1)
        ));
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("error: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Error> {
    println!("{args:?}\n");
    branded(args)?;
    println!();
    unchecked(args)
}

/// The engine's steady state: one branded shape, every buffer allocated from it.
fn branded(args: &Args) -> Result<(), Error> {
    // SGLang's per-forward sizing: verify 3 x pool slots, write requests max_bs, written tokens
    // max(max_bs x (topk + 1), max_extend).
    let knobs = EngineKnobs {
        max_bs: args.max_bs,
        tokens_per_req: args.topk + 1,
        max_extend_tokens: args.max_extend,
        pool_slots: args.pool_slots,
        verify: VerifyCapacityRule::PoolSlots,
    };
    // The pool as the engine lays it out: request row r (row 0 = padding) owns `width`
    // consecutive slots, so every slot named by `req_to_token` is inside the pool.
    let rows = args.max_bs + 1;
    let width = args.pool_slots / rows;
    let cells: Vec<i32> = (0..rows * width).map(|s| s as i32).collect();
    let req_to_token = ReqToToken::from_vec(rows, width, cells)?;

    // A decode-heavy batch of max_bs requests with growing prefixes, each writing topk + 1.
    let t = (args.topk + 1) as i64;
    let batch: Batch = (0..args.max_bs)
        .map(|r| kv_canary::BatchRow {
            req_pool_index: r as i64 + 1,
            prefix_len: ((3 * r + 1) % (width - args.topk - 1)) as i64,
            extend_len: t,
        })
        .collect();

    Shape::branded(&knobs, |shape| {
        println!(
            "branded shape from the command line: verify {} (3 x {} pool slots), \
             write requests {}, written tokens {}",
            shape.verify_capacity().get(),
            args.pool_slots,
            shape.write_req_capacity().get(),
            shape.write_entry_capacity().get()
        );
        let mut verify = shape.try_verify_plan()?;
        let mut write = shape.try_write_plan()?;
        let inputs = PlanInputs::full(&batch, &req_to_token);
        let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
        common::print_batch(&batch);
        println!();
        common::print_plan(&verify, &write, &batch, &summary, 12);
        Ok(())
    })?
}

/// The unchecked path: the seed bug compiles, and the launch refuses it with both numbers.
fn unchecked(args: &Args) -> Result<(), Error> {
    let shape = Shape::unchecked(&EngineKnobs::draft_step(
        args.max_bs,
        args.topk,
        args.pool_slots,
    ))?;
    // A verify plan cached from the old formula, bs x topk, instead of bs x (topk + 1).
    let stale_entries = args.max_bs * args.topk;
    let mut stale = match UncheckedCapacity::new("verify_capacity", stale_entries) {
        Ok(capacity) => VerifyPlan::try_with_capacity(capacity)?,
        Err(err) => {
            println!("a plan of bs x topk = {stale_entries} entries cannot be allocated: {err}");
            return Ok(());
        }
    };
    let mut write = shape.try_write_plan()?;
    let req_to_token = ReqToToken::zeros(args.max_bs + 1, args.topk + 2)?;
    let batch = Batch::from_columns([1], [1], [(args.topk + 1) as i64]);
    let inputs = PlanInputs::full(&batch, &req_to_token);
    println!(
        "unchecked shape: verify {} = {} x ({} + 1); cached plan holds {} = {} x {}",
        shape.verify_capacity().get(),
        args.max_bs,
        args.topk,
        stale_entries,
        args.max_bs,
        args.topk
    );
    match cpu::plan(&shape, &inputs, &mut stale, &mut write) {
        Err(err @ Error::CapacityMismatch { .. }) => {
            println!("the launch refused it at run time:\n  {err}");
            Ok(())
        }
        Err(other) => Err(other),
        Ok(_) => unreachable!("bs x topk < bs x (topk + 1) whenever both are positive"),
    }
}
