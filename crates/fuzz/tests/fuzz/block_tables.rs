//! `cpu::plan` over block tables and vLLM's columns (issue 32): random block sizes (0 and past
//! `MAX_BLOCK_SIZE` included), `i32` and `u32` blocks (negative, past `i32::MAX`, extreme), both
//! vLLM layouts with short columns and decreasing offsets, into plans pre-filled with garbage.
//! A success equals the plan over the expanded token table (SGLang's columns, a padding row 0 in
//! front); an error leaves both plans untouched.

use crate::gen::{cap, ensure, error_label, val, val32};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::{
    cpu, BatchColumns, BatchView, IndexElement, PlanInputs, ReqToTokenView, Shape,
    UncheckedCapacity, UncheckedShape, VerifyPlan, WritePlan,
};

type Cap = UncheckedCapacity;
type Plans = (VerifyPlan<Cap>, WritePlan<Cap>);

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=48)?;
    let w = u.int_in_range(1..=6)?;
    let shape = Shape::from_capacities(
        cap("verify_capacity", v),
        cap("write_req_capacity", w),
        cap("write_entry_capacity", 8),
    );
    let plans: Plans = (
        VerifyPlan::from_parts(
            cap("verify_capacity", v),
            (0..v).map(|_| val(u, -1, 40)).collect::<Result<_>>()?,
            (0..v).map(|_| val(u, -1, 40)).collect::<Result<_>>()?,
            (0..v).map(|_| val(u, -1, 40)).collect::<Result<_>>()?,
            (0..v).map(|_| val(u, -1, 40)).collect::<Result<_>>()?,
            u.int_in_range(0..=v as i32)?,
            u.int_in_range(0..=1)?,
        )
        .expect("lengths match"),
        WritePlan::from_parts(
            cap("write_req_capacity", w),
            (0..=w).map(|_| val(u, 0, 10)).collect::<Result<_>>()?,
            (0..w).map(|_| val(u, -1, 40)).collect::<Result<_>>()?,
            u.int_in_range(0..=w as i32)?,
        )
        .expect("lengths match"),
    );
    let block_size = if u.ratio(1, 16)? {
        *u.choose(&[0, kv_canary::MAX_BLOCK_SIZE + 1, usize::MAX])?
    } else {
        *u.choose(&[1, 2, 3, 4, 16])?
    };
    let rows = u.int_in_range(1..=w + 1)?;
    let blocks_per_row = u.int_in_range(1..=4)?;
    let unsigned = u.ratio(1, 2)?;
    let cells: Vec<i64> = (0..rows * blocks_per_row)
        .map(|_| val(u, -1, 12))
        .collect::<Result<_>>()?;
    let bs = u.int_in_range(0..=w + 1)?;
    let tokens = (blocks_per_row * block_size.min(64)) as i64;
    let context: Vec<u32> = (0..bs + u.int_in_range(0..=1)?)
        .map(|_| val(u, 0, tokens + 1).map(|x| x.clamp(0, u32::MAX as i64) as u32))
        .collect::<Result<_>>()?;
    let query: Vec<i32> = (0..bs).map(|_| val32(u, 0, 3)).collect::<Result<_>>()?;
    let mut starts = vec![0i64];
    for &q in &query {
        let next = if u.ratio(1, 16)? { -1 } else { i64::from(q) };
        starts.push(starts.last().unwrap().saturating_add(next));
    }
    if u.ratio(1, 16)? {
        starts.pop();
    }
    let cumulative = u.ratio(1, 2)?;
    Ok(if unsigned {
        let cells: Vec<u32> = cells.iter().map(|&c| c as u32).collect();
        check(
            &shape,
            plans,
            &cells,
            (rows, blocks_per_row, block_size),
            bs,
            &context,
            &query,
            &starts,
            cumulative,
        )
    } else {
        let cells: Vec<i32> = cells
            .iter()
            .map(|&c| c.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
            .collect();
        check(
            &shape,
            plans,
            &cells,
            (rows, blocks_per_row, block_size),
            bs,
            &context,
            &query,
            &starts,
            cumulative,
        )
    })
}

#[allow(clippy::too_many_arguments)]
fn check<T: IndexElement>(
    shape: &UncheckedShape,
    plans: Plans,
    cells: &[T],
    (rows, blocks_per_row, block_size): (usize, usize, usize),
    bs: usize,
    context: &[u32],
    query: &[i32],
    starts: &[i64],
    cumulative: bool,
) -> Verdict {
    let table = match ReqToTokenView::block_table(rows, blocks_per_row, block_size, cells) {
        Ok(t) => t,
        Err(e) => return error_label("block_table", &e),
    };
    let result = if cumulative {
        BatchView::from_query_starts(bs, context, starts)
            .map(|b| plan(shape, b, table, plans.clone()))
    } else {
        BatchView::from_query_lens(bs, context, query).map(|b| plan(shape, b, table, plans.clone()))
    };
    let (outcome, got) = match result {
        Err(e) => return error_label("batch view", &e),
        Ok(r) => r,
    };
    if let Err(e) = &outcome {
        ensure(got == plans, || format!("plan: {e} but a plan changed"))?;
        return error_label("plan", e);
    }
    // The same batch in SGLang's columns over the expanded token table (row 0: padding).
    let b = block_size as i64;
    let mut expanded = vec![0i64; blocks_per_row * block_size];
    for &cell in cells {
        let cell = cell.to_i64().expect("a planned table's cells fit");
        expanded.extend((0..b).map(|o| cell.saturating_mul(b).saturating_add(o)));
    }
    let tokens = ReqToTokenView::new(rows + 1, blocks_per_row * block_size, &expanded)
        .expect("the expansion's shape");
    let mut cols = [Vec::new(), Vec::new(), Vec::new()];
    for r in 0..bs {
        let q = if cumulative {
            starts[r + 1] - starts[r]
        } else {
            i64::from(query[r])
        };
        cols[0].push(r as i64 + 1);
        cols[1].push(i64::from(context[r]).saturating_sub(q));
        cols[2].push(q);
    }
    let sglang = BatchView::new(&cols[0], &cols[1], &cols[2]).expect("one length");
    let (expected, want) = plan(shape, sglang, tokens, plans);
    ensure(expected.is_ok() && want == got, || {
        format!("the block-table plan differs from the expanded table's ({expected:?})")
    })?;
    Ok(format!(
        "block_tables ok{}",
        if cumulative { " starts" } else { "" }
    ))
}

fn plan<B: BatchColumns, T: IndexElement>(
    shape: &UncheckedShape,
    batch: BatchView<'_, B>,
    table: ReqToTokenView<'_, T>,
    mut plans: Plans,
) -> (std::result::Result<(), kv_canary::Error>, Plans) {
    let r = cpu::plan(
        shape,
        &PlanInputs::from_views(batch, table),
        &mut plans.0,
        &mut plans.1,
    );
    (r.map(|_| ()), plans)
}
