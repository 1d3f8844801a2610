// Invariant: the per-request columns `req_pool_indices`, `prefix_lens`, `extend_seq_lens` have
// one length, `bs` (spec §3.3 check 6, "length must be N, got M").
//
// The first line reads "mismatched types" (E0308): the three columns are arrays of one const
// length `B`, and rustc reports an array of another length as a type mismatch, which no
// attribute can reword. The next lines say it in numbers: "expected an array with a size of 3,
// found one with a size of 2". Columns whose lengths are known only at run time go through
// `Batch::try_from_columns`, which returns `Error::LengthMismatch` naming both lengths.
use kv_canary::Batch;

fn main() {
    let _batch = Batch::from_columns([1, 2, 3], [5, 0], [1, 7, 1]);
}
