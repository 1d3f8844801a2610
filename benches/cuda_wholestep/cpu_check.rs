//! The benchmark's workloads on the CPU reference canary (runs without a GPU): the setup step
//! and two measured steps must be verified and clean, with the numbers of entries the device
//! run expects. This checks the workload construction that the device run relies on.

use crate::workload::{cap, Mode, Workload, RING_ROWS};
use kv_canary::step::{Canary, GroupKind, KOnly, StepReport, StepStatus, TailKv};
use kv_canary::{
    Error, Full, PlanInputs, RealKv, RealKvSource, RealKvSources, UncheckedCapacity as Uc,
};

/// What one CPU run of a workload saw.
pub struct CpuCheck {
    /// Entries the measured step verified, over all its verify launches.
    pub entries_checked: u64,
    /// Entries the measured step wrote, over all its write launches.
    pub entries_written: u64,
}

/// Runs `w`'s setup step and its measured step twice on a CPU canary in `mode` (a FULL canary
/// for the K+V modes, a K-only one for K only, as on the device); every report must be clean.
pub fn run(w: &Workload, mode: Mode) -> Result<CpuCheck, String> {
    let err = |what: &'static str| move |e: Error| format!("{}: {what}: {e}", w.kind.name);
    let slots = cap("slots", w.slots).map_err(err("slots"))?;
    let ring = cap("ring rows", RING_ROWS).map_err(err("ring"))?;
    let (layout, params) = w.kv_layout();
    let k = vec![0x5Au8; w.kv_pool_bytes()];
    let v = vec![0xA5u8; w.kv_pool_bytes()];
    let (k_token, v_token) = w.token_layouts();
    let source = |bytes, token| -> Result<RealKv<'_>, String> {
        let s = RealKvSource::strided(bytes, layout, params)
            .and_then(|s| s.with_token_layout(token))
            .map_err(err("source"))?;
        Ok(RealKv::new(
            mode.hash_mode(),
            RealKvSources::from_array([s]),
        ))
    };
    let report = if mode == Mode::KOnlyPartial {
        let mut canary: Canary<Uc, Uc, Uc, Uc, Uc, KOnly<Full>> =
            Canary::try_k_only(w.shape, slots, ring).map_err(err("canary"))?;
        steps(w, mode, &mut canary, || source(&k, k_token))?
    } else {
        let mut canary = Canary::try_full(w.shape, slots, ring).map_err(err("canary"))?;
        steps(w, mode, &mut canary, || {
            Ok(TailKv::new(source(&k, k_token)?, source(&v, v_token)?))
        })?
    };
    let want_checked = (Workload::verify_launches(mode) * w.verify_entries) as u64;
    if report.entries_checked() != want_checked {
        return Err(format!(
            "{} {}: the CPU step checked {} entries, the benchmark expects {want_checked}",
            w.kind.name,
            mode.name(),
            report.entries_checked()
        ));
    }
    Ok(CpuCheck {
        entries_checked: report.entries_checked(),
        entries_written: report.entries_written(),
    })
}

/// The setup step (if any) and the measured step twice on `canary`, each report clean; returns
/// the last report.
fn steps<'a, G: GroupKind<Pool = Full>>(
    w: &Workload,
    mode: Mode,
    canary: &mut Canary<Uc, Uc, Uc, Uc, Uc, G>,
    kv: impl Fn() -> Result<G::Sources<RealKv<'a>>, String>,
) -> Result<StepReport, String> {
    let err = |what: &'static str| move |e: Error| format!("{}: {what}: {e}", w.kind.name);
    let mut steps = Vec::new();
    if let Some((batch, inputs)) = &w.setup {
        steps.push((batch, inputs, "setup"));
    }
    steps.push((&w.step.0, &w.step.1, "step"));
    steps.push((&w.step.0, &w.step.1, "step again"));
    let mut last = None;
    for (batch, inputs, label) in steps {
        let report = canary
            .plan(&PlanInputs::full(batch, &w.table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(inputs))
            .map_err(err("step"))?
            .verify_tail(kv()?)
            .map_err(err("tail"))?;
        if report.status() != StepStatus::Clean {
            return Err(format!(
                "{} {}, {label}: the CPU report is not clean: {report}",
                w.kind.name,
                mode.name()
            ));
        }
        last = Some(report);
    }
    last.ok_or_else(|| "no step ran".to_owned())
}
