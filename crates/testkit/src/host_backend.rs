//! [`HostBackend`]: what the conformance runner and the GPU-vs-CPU differential tests ask of a
//! backend, so that each of them is written once and runs on [`Cpu`] and (feature `cuda`) on
//! `Offload`.

use kv_canary::backend::{Backend, Cpu, PlanWith, Scatters, Writes};
use kv_canary::{
    Host, InputAssertOff, InputAssertOn, RealKv, RuntimePlanInputs, UncheckedCapacity,
};

/// A backend of the library's seam whose buffers live on the host and whose launches fold
/// host real-KV sources: it plans any [`RuntimePlanInputs`] (so every typed combination of
/// host plan inputs), writes, verifies and scatters. Implemented by [`Cpu`] and by `Offload`
/// (the GPU ops on host buffers).
pub trait HostBackend: Backend<Memory = Host>
    + for<'a> PlanWith<RuntimePlanInputs<'a>, UncheckedCapacity, UncheckedCapacity, UncheckedCapacity>
    + Writes<InputAssertOff>
    + Writes<InputAssertOn>
    + Scatters
{
    /// The backend's name on a command line (`"cpu"`, `"cuda"`).
    const NAME: &'static str;

    /// Whether the backend records violation rows in the reference's sequential order
    /// (requests, then entries, in order). A parallel backend does not: its new rows are
    /// compared as a multiset (golden README §7), while the write index, counters and buffer
    /// bytes must still match exactly.
    const RECORDS_ROWS_IN_ORDER: bool;

    /// The host real-KV sources `real_kv` as this backend's launches take them.
    fn host_real_kv(real_kv: RealKv<'_>) -> Self::RealKv<'_>;
}

impl HostBackend for Cpu {
    const NAME: &'static str = "cpu";
    const RECORDS_ROWS_IN_ORDER: bool = true;

    fn host_real_kv(real_kv: RealKv<'_>) -> RealKv<'_> {
        real_kv
    }
}
