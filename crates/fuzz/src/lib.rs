//! Nothing: the fuzz harness is the `fuzz` test (`tests/fuzz/`).
