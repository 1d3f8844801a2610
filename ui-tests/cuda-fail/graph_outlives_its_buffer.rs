// Invariant: a captured CUDA graph replays over the buffers it was captured with, so they must
// outlive it. A buffer made inside the capture (or dropped before the graph) does not compile.
use kv_canary::{cuda, Cap, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let gpu = cuda::Gpu::new()?;
    let mut stream = cuda::Stream::new(&gpu)?;
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let write = shape.device_write_plan(&gpu)?;
    let batch = shape.device_batch(&gpu)?;
    let table = cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::zeros(4, 8)?)?;
    let inputs = cuda::PlanInputs::full(&batch, &table);
    let graph = stream.capture(|s| {
        let verify = shape.device_verify_plan(&gpu)?; // freed when the closure returns
        cuda::plan(s, &shape, &inputs, &verify, &write)
    })?;
    graph.replay()?;
    Ok(())
}
