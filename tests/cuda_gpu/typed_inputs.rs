//! The engine's per-token write inputs in their own element types on the GPU (issue 32):
//! `input_ids`, `positions` and `out_cache_loc` each `i64`, `i32` or `u32` (mistral.rs: `u32`
//! token ids, `i64` positions and slot mapping), viewed in place by `WriteInputs::from_buffers`
//! and read by the write kernel in their types, and the input assert's expected tokens and
//! positions in the ids' and positions' types (`Borrowed::with_expected`). Every launch leaves
//! the canary, the ring and the counters as the CPU's write over the same values leaves them.

use crate::canary::{
    all_rows, random_write_case, run_write, same_state, KvSetup, State, WriteCase,
};
use crate::rng::Rng;
use crate::{ensure, fail, scaled};
use cust::memory::{DeviceBuffer, DeviceCopy};
use kv_canary::backend::Cpu;
use kv_canary::cuda::{self, DeviceIndex, DeviceInputAssert, DeviceSettings, Gpu, Stream};
use kv_canary::{Device, Error, IndexElement, UncheckedCapacity, UncheckedShape, WriteInputs};

/// An element type an engine keeps an index array in: what storing an `i64` there keeps.
trait Stored: DeviceIndex + DeviceCopy {
    fn store(v: i64) -> Self;
    fn load(self) -> i64;
}
impl Stored for i64 {
    fn store(v: i64) -> Self {
        v
    }
    fn load(self) -> i64 {
        self
    }
}
impl Stored for i32 {
    fn store(v: i64) -> Self {
        v as i32
    }
    fn load(self) -> i64 {
        i64::from(self)
    }
}
impl Stored for u32 {
    fn store(v: i64) -> Self {
        v as u32
    }
    fn load(self) -> i64 {
        i64::from(self)
    }
}

/// `values` as the engine stores them in `T`.
fn stored<T: Stored>(values: &[i64]) -> Vec<T> {
    values.iter().map(|&v| T::store(v)).collect()
}

/// The case's inputs as an engine of these element types holds them (what the CPU then writes).
fn narrow<T: Stored, P: Stored, L: Stored>(c: &mut WriteCase) {
    c.ids = stored::<T>(&c.ids).into_iter().map(Stored::load).collect();
    c.positions = stored::<P>(&c.positions)
        .into_iter()
        .map(Stored::load)
        .collect();
    c.slots = stored::<L>(&c.slots)
        .into_iter()
        .map(Stored::load)
        .collect();
}

/// The case's write on the GPU over engine buffers of `T`, `P` and `L` (outer `Err`: the
/// harness failed; inner: the launch's outcome).
fn gpu_write<T: Stored, P: Stored, L: Stored>(
    gpu: &Gpu,
    stream: &Stream,
    c: &WriteCase,
    st: &mut State,
) -> Result<Result<(), Error>, String> {
    let e = UncheckedCapacity::new("e", c.ids.len()).map_err(fail("capacity"))?;
    let v = UncheckedCapacity::new("v", 1).map_err(fail("capacity"))?;
    let shape = UncheckedShape::from_capacities(v, c.plan.capacity(), e);
    let ids = DeviceBuffer::from_slice(&stored::<T>(&c.ids)).map_err(fail("ids"))?;
    let pos = DeviceBuffer::from_slice(&stored::<P>(&c.positions)).map_err(fail("positions"))?;
    let loc = DeviceBuffer::from_slice(&stored::<L>(&c.slots)).map_err(fail("slots"))?;
    let inputs =
        WriteInputs::from_buffers(gpu, e, &ids, &pos, &loc).map_err(fail("inputs view"))?;
    match &c.expected {
        None => launch(gpu, stream, c, &inputs, &shape, st),
        Some((t, p)) => {
            // The expected tensors in the engine's types too: tokens as its ids, positions as
            // its positions.
            let et = DeviceBuffer::from_slice(&stored::<T>(t)).map_err(fail("expected ids"))?;
            let ep = DeviceBuffer::from_slice(&stored::<P>(p)).map_err(fail("expected pos"))?;
            let asserted = inputs
                .with_expected(gpu, &et, &ep)
                .map_err(fail("expected view"))?;
            launch(gpu, stream, c, &asserted, &shape, st)
        }
    }
}

/// The case's write launch over device `inputs` (either input-assert state).
fn launch<A: DeviceInputAssert>(
    gpu: &Gpu,
    stream: &Stream,
    c: &WriteCase,
    inputs: &WriteInputs<UncheckedCapacity, A, Device>,
    shape: &UncheckedShape,
    st: &mut State,
) -> Result<Result<(), Error>, String> {
    let plan = c.plan.to_device(gpu).map_err(fail("plan"))?;
    let (dc, dr, dn) = (
        st.buf.to_device(gpu).map_err(fail("canary"))?,
        st.ring.to_device(gpu).map_err(fail("ring"))?,
        st.counters.to_device(gpu).map_err(fail("counters"))?,
    );
    let settings = DeviceSettings::new(c.tag).with_chain_position_assert(c.chain);
    stream.clear_status().map_err(fail("clear"))?;
    let outcome = cuda::write(stream, shape, &plan, inputs, &settings, &dc, &dr, &dn)
        .and_then(|()| stream.status());
    stream.clear_status().map_err(fail("clear"))?;
    st.buf = dc.to_host().map_err(fail("canary"))?;
    st.ring = dr.to_host().map_err(fail("ring"))?;
    st.counters = dn.to_host().map_err(fail("counters"))?;
    Ok(outcome)
}

/// One random case in element types `T`, `P`, `L`: GPU equal to CPU. Returns the rows the
/// launch recorded.
fn one<T: Stored, P: Stored, L: Stored>(
    gpu: &Gpu,
    stream: &Stream,
    seed: u64,
) -> Result<i64, String> {
    let mut rng = Rng::new(0x7E9D_0000 + seed);
    let mut c = random_write_case(&mut rng, seed.is_multiple_of(8));
    c.kv = KvSetup::none();
    narrow::<T, P, L>(&mut c);
    if let Some((t, p)) = &mut c.expected {
        // What the engine's expected arrays (of its ids' and positions' types) hold.
        *t = stored::<T>(t).into_iter().map(Stored::load).collect();
        *p = stored::<P>(p).into_iter().map(Stored::load).collect();
    }
    let label = format!(
        "typed write seed {seed} (input_ids {}, positions {}, out_cache_loc {}, expected \
         tensors {})",
        <T as IndexElement>::NAME,
        <P as IndexElement>::NAME,
        <L as IndexElement>::NAME,
        if c.expected.is_some() {
            "viewed"
        } else {
            "none"
        }
    );
    let (mut cs, mut gs) = (c.state.clone(), c.state.clone());
    let cpu = run_write(&c, &Cpu, &mut cs);
    let gpu_outcome = gpu_write::<T, P, L>(gpu, stream, &c, &mut gs)?;
    ensure!(
        cpu.is_ok() && gpu_outcome.is_ok(),
        "{label}: CPU {cpu:?}, GPU {gpu_outcome:?}"
    );
    let all = all_rows(&c.state, |s| run_write(&c, &Cpu, s));
    same_state(&label, &cs, &gs, c.state.ring.write_index(), &all)?;
    Ok(i64::from(cs.ring.write_index()) - i64::from(c.state.ring.write_index()))
}

/// Random write cases over engine arrays of mixed element types: every launch equal to the
/// CPU's over the same values.
pub fn typed_write_inputs_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let cases = scaled(400);
    let mut rows = 0i64;
    for seed in 0..cases {
        rows += match seed % 4 {
            0 => one::<u32, i64, i64>(gpu, &stream, seed)?, // mistral.rs, candle-vllm
            1 => one::<i32, i32, i32>(gpu, &stream, seed)?,
            2 => one::<u32, u32, i32>(gpu, &stream, seed)?,
            _ => one::<i64, i32, i64>(gpu, &stream, seed)?,
        };
    }
    println!(
        "    {cases} write launches over u32 / i32 / i64 engine arrays (4 type mixes): \
         {rows} violation rows, every state equal to the CPU's"
    );
    Ok(())
}
