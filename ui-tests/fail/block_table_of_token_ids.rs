// Invariant: only a slot table can be a block table (`ReqToTokenView::block_table`, issue 32):
// its cells are blocks of slots. The expected-token pool (`ExpectedTokenTableView`, token ids)
// has no blocks; building one is a type error, not a run-time check.
//
// The first line is a missing associated function (E0599): `block_table` exists for
// `ReqTableView<'_, SlotIds, T>` only, which the note names.
use kv_canary::ExpectedTokenTableView;

fn main() {
    let cells = [1u32, 2, 3, 4];
    let _ = ExpectedTokenTableView::block_table(2, 2, 16, &cells);
}
