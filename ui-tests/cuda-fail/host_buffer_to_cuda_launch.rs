// Invariant: a CUDA launch takes device buffers only (SGLang: "all tensors on the same
// device", a run-time check). A host verify plan handed to `cuda::plan` is a type error.
use kv_canary::{cuda, Cap, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let gpu = cuda::Gpu::new()?;
    let stream = cuda::Stream::new(&gpu)?;
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let verify = shape.verify_plan(); // host memory
    let write = shape.device_write_plan(&gpu)?;
    let batch = shape.device_batch(&gpu)?;
    let table = cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::zeros(4, 8)?)?;
    cuda::plan(&stream, &shape, &cuda::PlanInputs::full(&batch, &table), &verify, &write)?;
    Ok(())
}
