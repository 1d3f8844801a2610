// Invariant: a device verify plan holds exactly the shape's verify capacity, as on the host
// (SGLang: "verify_capacity=X does not match verify_plan_out.verify_slot_indices.shape[0]=Y").
use kv_canary::{cuda, Cap, Device, ReqToToken, Shape, VerifyPlan};

fn main() -> Result<(), kv_canary::Error> {
    let gpu = cuda::Gpu::new()?;
    let stream = cuda::Stream::new(&gpu)?;
    let shape = Shape::<Cap<40>, Cap<8>, Cap<40>>::new();
    // Allocated with another number instead of `shape.device_verify_plan(&gpu)`.
    let verify = VerifyPlan::<Cap<32>, Device>::on_device(&gpu, Cap)?;
    let write = shape.device_write_plan(&gpu)?;
    let batch = shape.device_batch(&gpu)?;
    let table = cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::zeros(9, 64)?)?;
    cuda::plan(&stream, &shape, &cuda::PlanInputs::full(&batch, &table), &verify, &write)?;
    Ok(())
}
