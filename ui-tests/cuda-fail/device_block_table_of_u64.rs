// Invariant: a device block table holds `u32` or `i32` cells (the plan kernel reads 4-byte
// cells, zero- or sign-extended; issue 32). A `u64` table, which the host views accept, is a
// type error on the device: `u64` is no `DeviceTableCell`.
use kv_canary::cuda;

fn main() -> Result<(), kv_canary::Error> {
    let gpu = cuda::Gpu::new()?;
    // SAFETY: never runs (the case does not compile).
    let _ = unsafe { cuda::DeviceReqToToken::block_table_from_raw::<u64>(&gpu, 0x1000, 2, 2, 16)? };
    Ok(())
}
