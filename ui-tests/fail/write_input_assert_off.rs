// Invariant: the write op's expected input tensors exist exactly when the write input assert is
// on (SGLang: "expected input tensors are required when enable_write_input_assert=True" and
// "must be None when enable_write_input_assert=False", spec §7). Inputs with the assert off have
// nowhere to put them; `.with_input_assert()` allocates them and turns the assert on.
//
// The first line is a missing method (E0599): the expected tensors belong to
// `WriteInputs<_, InputAssertOn>` only, which the last line of the error names.
use kv_canary::{Cap, Shape};

fn main() {
    let mut inputs = Shape::<Cap<8>, Cap<4>, Cap<8>>::new().write_inputs(); // assert off
    inputs.expected_mut().tokens[0] = 7;
}
