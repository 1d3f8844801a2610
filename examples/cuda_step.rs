//! One full canary step on the GPU: plan, verify (head), write, verify (tail), on device
//! buffers, printing the plan summary, the violations found and each kernel's device time.
//!
//! Step 0 prefills three requests; step 1 decodes one token each after a slot of request 2's
//! prefix was corrupted behind the canary's back: both verifies of that step (head, before the
//! write, and tail, after it) report the broken chain link of the slot after it.
//!
//! Run on a machine with a CUDA GPU: `cargo run --release --features cuda --example cuda_step`
//! (or the binary staged by `scripts/gpu-build.sh`). Without a device it says so and exits.

use kv_canary::cuda::{self, DeviceSettings, Event, Gpu, Stream};
use kv_canary::{
    Batch, CanaryBuffer, Cap, Error, HealthCounters, LaunchTag, ReqToToken, Shape, TokenCheckOff,
    ViolationRing,
};

/// At most 4 requests of up to 64 tokens; verify every cached token; write 64 tokens a step.
type Spec = Shape<Cap<256>, Cap<4>, Cap<64>>;
const WIDTH: usize = 64;

fn main() -> Result<(), Error> {
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(Error::NoCudaDevice { detail }) => {
            println!("cuda_step: SKIPPED, no CUDA device ({detail})");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    println!("device: {} ({} SMs)\n", gpu.name(), gpu.sm_count());
    let shape = Spec::new();
    let stream = Stream::new(&gpu)?;
    // Request row r owns slots 64 r .. 64 r + 63 (row 0 is the padding row).
    let host_table = ReqToToken::from_vec(4, WIDTH, (0..4 * WIDTH as i32).collect())?;
    let table = cuda::DeviceReqToToken::from_host(&gpu, &host_table)?;
    let (batch, verify, write) = (
        shape.device_batch(&gpu)?,
        shape.device_verify_plan(&gpu)?,
        shape.device_write_plan(&gpu)?,
    );
    let inputs = shape.write_inputs().to_device(&gpu)?;
    let canary = CanaryBuffer::<Cap<256>>::new().to_device(&gpu)?;
    let ring = ViolationRing::<Cap<16>>::new().to_device(&gpu)?;
    let counters = HealthCounters::new().to_device(&gpu)?;
    // One canary buffer here: the head verify and the write run with the HEAD tag, the tail
    // verify with the TAIL tag, so each violation row says which verify found it.
    let head = DeviceSettings::new(LaunchTag::HeadKFull);
    let tail = DeviceSettings::new(LaunchTag::TailKFull);
    let plan_inputs = cuda::PlanInputs::full(&batch, &table);
    let events: Vec<Event> = (0..5).map(|_| Event::new(&gpu)).collect::<Result<_, _>>()?;

    // (request row, cached tokens, new tokens) per step.
    let steps: [&[(i64, i64, i64)]; 2] = [
        &[(1, 0, 5), (2, 0, 7), (3, 0, 3)],
        &[(1, 5, 1), (2, 7, 1), (3, 3, 1)],
    ];
    for (step, rows) in steps.iter().enumerate() {
        let host_batch: Batch = rows
            .iter()
            .map(|&(rp, prefix, ext)| kv_canary::BatchRow {
                req_pool_index: rp,
                prefix_len: prefix,
                extend_len: ext,
            })
            .collect();
        let mut host_inputs = shape.write_inputs();
        let p = host_inputs.parts_mut();
        let mut i = 0;
        for &(rp, prefix, ext) in rows.iter() {
            for pos in prefix..prefix + ext {
                p.input_ids[i] = 1000 * rp + pos;
                p.positions[i] = pos;
                p.out_cache_loc[i] = 64 * rp + pos;
                i += 1;
            }
        }
        batch.upload(&host_batch)?;
        inputs.upload(&host_inputs)?;
        if step == 1 {
            // Corrupt request 2's token at position 3 (slot 131): the chain link of slot 132
            // no longer matches.
            let mut host = canary.to_host()?;
            let mut rec = host.slot(131).expect("slot 131");
            rec.token += 1;
            host.set_slot(131, rec)?;
            canary.upload(&host)?;
        }
        stream.record(&events[0])?;
        cuda::plan(&stream, &shape, &plan_inputs, &verify, &write)?;
        stream.record(&events[1])?;
        cuda::verify(
            &stream,
            &shape,
            &verify,
            TokenCheckOff,
            &head,
            &canary,
            &ring,
            &counters,
        )?;
        stream.record(&events[2])?;
        cuda::write(
            &stream, &shape, &write, &inputs, &head, &canary, &ring, &counters,
        )?;
        stream.record(&events[3])?;
        cuda::verify(
            &stream,
            &shape,
            &verify,
            TokenCheckOff,
            &tail,
            &canary,
            &ring,
            &counters,
        )?;
        stream.record(&events[4])?;
        stream.status()?;

        let (v, w) = (verify.to_host()?, write.to_host()?);
        println!("step {step}: batch {:?}", rows);
        println!(
            "  plan: verify_num_valid {} (enable {}), write_offsets {:?}, seeds {:?}, write_num_valid_reqs {}",
            v.num_valid(),
            v.enable(),
            &w.offsets()[..=rows.len()],
            &w.seed_slot_indices()[..rows.len()],
            w.num_valid_reqs()
        );
        let r = ring.to_host()?;
        println!(
            "  violations so far: {} (write index {})",
            r.stored_len(),
            r.write_index()
        );
        for violation in r.violations() {
            println!("    {violation}");
        }
        let c = counters.to_host()?;
        println!(
            "  counters: slot_run_counter {}, kernel_run_counter {}",
            c.slot_run_counter(),
            c.kernel_run_counter()
        );
        let names = ["plan", "verify (head)", "write", "verify (tail)"];
        let times: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                Ok(format!(
                    "{n} {:.1} us",
                    1e3 * events[k + 1].elapsed_ms(&events[k])?
                ))
            })
            .collect::<Result<_, Error>>()?;
        println!("  device time: {}\n", times.join(", "));
    }
    Ok(())
}
