// Invariant: a launch fingerprints at most 4 real-KV sources (SGLang: "at most 4 RealKvSource
// entries supported by the CUDA ABI, got N", spec §7). A fixed array of sources is counted by the
// compiler; sources counted at run time go through `RealKvSources::try_from_slice`, which
// returns `Error::TooManyRealKvSources`.
use kv_canary::{RealKvParams, RealKvSource, RealKvSources};

fn main() -> Result<(), kv_canary::Error> {
    let kv = vec![0u8; 256];
    let layer = RealKvSource::new(&kv, 64, RealKvParams::new(1, 64, 64))?;
    let _ = RealKvSources::from_array([layer, layer, layer, layer, layer]);
    Ok(())
}
