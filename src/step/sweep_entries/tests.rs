//! Tests of [`SweepEntries`]: the walker rule on a hand-made radix tree, request-table rows, the
//! LUT translation, errors that name their values and change nothing, reuse of the allocation,
//! and a seeded property test against a naive reference over random trees.

use super::*;
use crate::input::ReqToToken;
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// A sweep entry (token check off: expected token -1).
fn entry(slot: i64, expected_position: i64, prev_slot: i64) -> VerifyEntry {
    VerifyEntry {
        slot,
        expected_token: -1,
        expected_position,
        prev_slot,
    }
}

/// `(slot, position, predecessor)` of every entry.
fn triples(entries: &SweepEntries) -> Vec<(i64, i64, i64)> {
    entries
        .iter()
        .map(|e| (e.slot, e.expected_position, e.prev_slot))
        .collect()
}

#[test]
fn radix_nodes_chain_to_their_parent_and_start_at_their_depth() {
    // root ── a [5, 6, 7] ─┬─ b [8, 9] ── e []
    //      │               └─ c [12]
    //      └─ d [20]
    let (a, b, c, d): ([i32; 3], [i32; 2], [i32; 1], [i32; 1]) = ([5, 6, 7], [8, 9], [12], [20]);
    let e: [i32; 0] = [];
    let mut entries = SweepEntries::new();
    entries.push_node(None, 0, &a).unwrap();
    entries.push_node(a.last().copied(), 3, &b).unwrap();
    entries.push_node(b.last().copied(), 5, &e).unwrap();
    entries.push_node(a.last().copied(), 3, &c).unwrap();
    entries.push_node(None, 0, &d).unwrap();
    assert_eq!(
        triples(&entries),
        [
            (5, 0, -1),
            (6, 1, 5),
            (7, 2, 6),
            (8, 3, 7), // b's first slot chains to a's last
            (9, 4, 8),
            (12, 3, 7), // so does c's, at the same depth
            (20, 0, -1),
        ]
    );
    assert!(entries.iter().all(|e| e.expected_token == -1));
    assert_eq!(entries.as_slice(), &*entries);
    assert_eq!(entries.as_ref(), entries.as_slice());
}

#[test]
fn rows_are_chains_from_position_zero() {
    let mut entries = SweepEntries::new();
    entries.push_row(&[3u64, 4, 5, 9], 3).unwrap();
    assert_eq!(triples(&entries), [(3, 0, -1), (4, 1, 3), (5, 2, 4)]);
    entries.push_row::<i32>(&[7, 8], 0).unwrap(); // nothing cached: no entry
    assert_eq!(entries.len(), 3);

    // The same from a table and from a view over the engine's own usize cells.
    let table = ReqToToken::from_vec(3, 4, (0..12).map(|x| 100 + x).collect()).unwrap();
    let mut from_table = SweepEntries::new();
    from_table.push_table_row(&table, 2, 4).unwrap();
    assert_eq!(
        triples(&from_table),
        [(108, 0, -1), (109, 1, 108), (110, 2, 109), (111, 3, 110)]
    );
    let cells: Vec<usize> = (0..12).map(|x| 100 + x).collect();
    let view = ReqToTokenView::new(3, 4, &cells).unwrap();
    let mut from_view = SweepEntries::new();
    from_view.push_table_row(view, 2, 4).unwrap();
    assert_eq!(from_view, from_table);
    let mut from_row = SweepEntries::new();
    from_row.push_row(table.row(2).unwrap(), 4).unwrap();
    assert_eq!(from_row, from_table);
}

#[test]
fn errors_name_their_values_and_append_nothing() {
    let mut entries = SweepEntries::new();
    entries.push_node(None, 0, &[1u64, 2]).unwrap();
    let before = entries.clone();
    let cases: Vec<(Error, &str)> = vec![
        (
            entries.push_node(None, 2, &[3u64, 1 << 63, 4]).unwrap_err(),
            "radix node slots[1] = 9223372036854775808 (u64)",
        ),
        (
            entries.push_node(Some(u64::MAX), 2, &[3u64]).unwrap_err(),
            "parent_last[0] = 18446744073709551615 (u64)",
        ),
        (
            entries.push_row(&[1usize, 2, 3], 4).unwrap_err(),
            "a request-table row has 3 cells, fewer than the 4 cached tokens",
        ),
        (
            entries.push_row(&[1u64, 1 << 63], 2).unwrap_err(),
            "req_to_token row[1] = 9223372036854775808 (u64)",
        ),
    ];
    let cells: Vec<u64> = vec![1, 2, 3, 4, 5, 1 << 63];
    let view = ReqToTokenView::new(2, 3, &cells).unwrap();
    let table_cases = [
        (
            entries.push_table_row(view, 1, 3).unwrap_err(),
            "req_to_token[5] = 9223372036854775808 (u64)", // row-major index
        ),
        (
            entries.push_table_row(view, 2, 1).unwrap_err(),
            "req_to_token row 2, outside the table's 2 rows",
        ),
        (
            entries.push_table_row(view, 0, 4).unwrap_err(),
            "req_to_token row 0 has 3 cells, fewer than the 4 cached tokens",
        ),
    ];
    for (err, named) in cases.into_iter().chain(table_cases) {
        let message = err.to_string();
        assert!(
            message.starts_with("kv-canary: ") && message.contains(named),
            "{message}"
        );
    }
    assert_eq!(entries, before);
    // Row 1 up to its bad cell is fine.
    entries.push_table_row(view, 1, 2).unwrap();
    assert_eq!(&triples(&entries)[2..], [(4, 0, -1), (5, 1, 4)]);
}

#[cfg(target_pointer_width = "64")]
#[test]
fn positions_past_i64_are_errors_naming_the_first() {
    let mut entries = SweepEntries::new();
    let last = i64::MAX as usize;
    entries.push_node(Some(1i32), last, &[7]).unwrap(); // position i64::MAX itself fits
    assert_eq!(triples(&entries), [(7, i64::MAX, 1)]);
    let err = entries
        .push_node(Some(1i32), last - 1, &[7, 8, 9])
        .unwrap_err();
    assert_eq!(
        err,
        Error::ElementOutOfRange {
            what: "radix node positions",
            index: 2,
            value: i64::MAX as i128 + 1,
            element: "usize",
        }
    );
    let err = entries.push_node(None, usize::MAX, &[7i32]).unwrap_err();
    assert!(
        matches!(err, Error::ElementOutOfRange { index: 0, value, .. } if value == usize::MAX as i128),
        "{err}"
    );
    assert_eq!(entries.len(), 1);
}

#[test]
fn the_lut_translates_slots_and_predecessors_and_keeps_chain_heads() {
    let mut entries = SweepEntries::new();
    entries.push_node(None, 0, &[1i32, 2, 3]).unwrap();
    entries.push_node(Some(2i32), 2, &[4i32]).unwrap();
    // full slot x -> SWA slot 10 x; slot 4 is not SWA-resident (-1), the production sentinel
    // at the end.
    let lut: Vec<i32> = vec![0, 10, 20, 30, -1, -1];
    entries.through_lut(&lut).unwrap();
    assert_eq!(
        triples(&entries),
        [(10, 0, -1), (20, 1, 10), (30, 2, 20), (-1, 2, 20)]
    );
}

#[test]
fn a_slot_past_the_lut_is_an_error_naming_it_and_translates_nothing() {
    let mut entries = SweepEntries::new();
    entries.push_row(&[1i64, 2, 6], 3).unwrap();
    let before = entries.clone();
    let lut: Vec<i64> = (0..6).collect();
    let err = entries.through_lut(&lut).unwrap_err();
    assert_eq!(
        err,
        Error::LutIndexOutOfRange {
            slot: 6,
            lut_len: 6
        }
    );
    assert!(
        err.to_string().starts_with("kv-canary: SWA slot 6"),
        "{err}"
    );
    assert_eq!(
        entries, before,
        "the entries before it are not translated either"
    );

    // A predecessor past the LUT is named the same way.
    let mut entries = SweepEntries::new();
    entries.push_node(Some(9i32), 0, &[1i32]).unwrap();
    assert_eq!(
        entries.through_lut(&lut),
        Err(Error::LutIndexOutOfRange {
            slot: 9,
            lut_len: 6
        })
    );
    // An entry of the LUT past i64::MAX is named by its index.
    let wide: Vec<u64> = vec![0, 5, 1 << 63];
    let mut entries = SweepEntries::new();
    entries.push_row(&[1i32, 2], 2).unwrap();
    let err = entries.through_lut(&wide).unwrap_err();
    assert_eq!(
        err,
        Error::ElementOutOfRange {
            what: "full_to_swa_index_mapping",
            index: 2,
            value: 1 << 63,
            element: "u64",
        }
    );
    assert_eq!(triples(&entries), [(1, 0, -1), (2, 1, 1)]);
    // An empty LUT rejects every non-negative slot, slot 0 included.
    let mut entries = SweepEntries::new();
    entries.push_row(&[0i32], 1).unwrap();
    assert!(entries.through_lut::<i64>(&[]).is_err());
}

#[test]
fn clear_and_clone_from_keep_the_allocation() {
    let mut entries = SweepEntries::with_capacity(64).unwrap();
    let at = entries.entries.as_ptr();
    for round in 0..3 {
        entries.clear();
        entries.push_row(&[1i32; 64], 64 - round).unwrap();
        assert_eq!(entries.entries.as_ptr(), at, "round {round}");
    }
    let mut swa = SweepEntries::with_capacity(64).unwrap();
    let swa_at = swa.entries.as_ptr();
    swa.clone_from(&entries);
    assert_eq!((swa.entries.as_ptr(), &swa), (swa_at, &entries));
    assert!(matches!(
        SweepEntries::with_capacity(usize::MAX),
        Err(Error::AllocationFailed {
            what: "sweep entries",
            ..
        })
    ));
}

/// A random radix tree: `(parent, slots)` per node, parents before children (node 0's parent
/// is the root, `None`). Slots are distinct, as in a real cache.
fn random_tree(rng: &mut ChaCha8Rng) -> Vec<(Option<usize>, Vec<u32>)> {
    let nodes = rng.random_range(0..12usize);
    let mut next_slot = rng.random_range(1..100u32);
    (0..nodes)
        .map(|n| {
            let parent = match n {
                0 => None,
                _ => rng.random_range(0..n + 1).checked_sub(1),
            };
            let len = rng.random_range(0..6u32);
            let slots = (next_slot..next_slot + len).map(|s| s * 3 % 1000).collect();
            next_slot += len;
            (parent, slots)
        })
        .collect()
}

/// The slots from the root to the end of `node`, by following parents.
fn path(tree: &[(Option<usize>, Vec<u32>)], node: usize) -> Vec<u32> {
    let mut chain = vec![node];
    while let Some(parent) = tree[*chain.last().unwrap()].0 {
        chain.push(parent);
    }
    chain
        .iter()
        .rev()
        .flat_map(|&n| tree[n].1.clone())
        .collect()
}

#[test]
fn entries_equal_a_naive_reference_for_random_trees() {
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let tree = random_tree(&mut rng);
        let mut built = SweepEntries::new();
        // Walk in node order, which visits parents before children.
        for (n, (parent, slots)) in tree.iter().enumerate() {
            // The walker's view: the parent's last slot (the last slot on the path above, as an
            // empty parent has none of its own) and the node's depth.
            let above = match parent {
                Some(p) => path(&tree, *p),
                None => vec![],
            };
            built
                .push_node(above.last().copied(), above.len(), slots)
                .unwrap();
            assert_eq!(path(&tree, n).len(), above.len() + slots.len());
        }
        // Naive: every slot of every node, at its index on the root path, after the slot before.
        let mut naive = Vec::new();
        for (n, (_, slots)) in tree.iter().enumerate() {
            let full = path(&tree, n);
            let start = full.len() - slots.len();
            for depth in start..full.len() {
                let prev = depth.checked_sub(1).map_or(-1, |d| i64::from(full[d]));
                naive.push(entry(i64::from(full[depth]), depth as i64, prev));
            }
        }
        assert_eq!(built.as_slice(), naive, "seed {seed}");

        // Through a random LUT, every value is translated and chain heads kept.
        let lut: Vec<i64> = (0..1000).map(|_| rng.random_range(0..5000)).collect();
        let mut swa = SweepEntries::new();
        swa.clone_from(&built);
        swa.through_lut(&lut).unwrap();
        let translate = |x: i64| if x < 0 { x } else { lut[x as usize] };
        let want: Vec<_> = naive
            .iter()
            .map(|e| {
                entry(
                    translate(e.slot),
                    e.expected_position,
                    translate(e.prev_slot),
                )
            })
            .collect();
        assert_eq!(swa.as_slice(), want, "seed {seed}");
    }
}
