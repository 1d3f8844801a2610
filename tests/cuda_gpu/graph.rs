//! CUDA graph capture and replay.

use crate::rng::Rng;
use crate::{ensure, fail};
use kv_canary::cuda::{self, Gpu, Stream};
use kv_canary::{cpu, Batch, BatchRow, Cap, ReqToToken, Shape};

/// One plan launch captured once, replayed over 20 different batches refilled in place; every
/// replay equals the CPU op run on the same inputs.
pub fn plan_replay(gpu: &Gpu) -> Result<(), String> {
    type S = Shape<Cap<2048>, Cap<64>, Cap<256>>;
    let shape = S::new();
    let mut rng = Rng::new(0x6A_0000);
    let host_table = ReqToToken::from_vec(
        65,
        48,
        (0..65 * 48).map(|_| rng.range(0, 9999) as i32).collect(),
    )
    .map_err(fail("table"))?;
    let table = cuda::DeviceReqToToken::from_host(gpu, &host_table).map_err(fail("table"))?;
    let batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let verify = shape.device_verify_plan(gpu).map_err(fail("verify plan"))?;
    let write = shape.device_write_plan(gpu).map_err(fail("write plan"))?;
    let (mut host_verify, mut host_write) = (shape.verify_plan(), shape.write_plan());
    let mut stream = Stream::new(gpu).map_err(fail("stream"))?;
    let inputs = cuda::PlanInputs::full(&batch, &table);
    let graph = stream
        .capture(|s| cuda::plan(s, &shape, &inputs, &verify, &write))
        .map_err(fail("capture"))?;
    for step in 0..20 {
        let bs = rng.range(0, 64);
        let host_batch: Batch = (0..bs)
            .map(|_| BatchRow {
                req_pool_index: if rng.chance(15) { 0 } else { rng.range(1, 64) },
                prefix_len: rng.range(0, 48),
                extend_len: rng.range(0, 4),
            })
            .collect();
        batch.upload(&host_batch).map_err(fail("upload"))?;
        graph.replay().map_err(fail("replay"))?;
        graph.stream().status().map_err(fail("status"))?;
        let inputs = kv_canary::PlanInputs::full(&host_batch, &host_table);
        cpu::plan(&shape, &inputs, &mut host_verify, &mut host_write).map_err(fail("cpu plan"))?;
        let (v, w) = (
            verify.to_host().map_err(fail("download"))?,
            write.to_host().map_err(fail("download"))?,
        );
        ensure!(
            v == host_verify,
            "step {step}: verify plans differ after replay"
        );
        ensure!(
            w == host_write,
            "step {step}: write plans differ after replay"
        );
    }
    println!("    1 capture, 20 replays over refilled batches: equal to the CPU op");
    Ok(())
}
