//! The kernels of `kernels/*.cu`, compiled to PTX by `build.rs` for every target of
//! [`TARGETS`] and embedded here; [`for_device`] picks a module's PTX for a device.
//!
//! Two targets: `sm_90` (Hopper; the PTX the kernels were tuned with, unchanged) and `sm_80`,
//! which the driver JIT-compiles for every 8.x device (A100 8.0, A10/RTX 30 8.6, L4/L40 8.9).
//! Measured with nvcc 13.0: `-arch=sm_89` PTX of every kernel file is line for line the
//! `sm_80` PTX but for its `.target` line (these are integer and memory kernels; `sm_89` adds
//! only FP8 conversions), so a separate `sm_89` target would only double the build. Under `DOCS_RS`
//! the strings are empty (docs.rs has no CUDA).

use super::kernels::ModuleId;

include!(concat!(env!("OUT_DIR"), "/kv_canary_ptx.rs"));

/// The PTX of `module` for a device of compute capability `major.minor`: the newest target not
/// newer than the device, or `None` when the device is older than every target.
pub(crate) fn for_device(
    module: ModuleId,
    major: u32,
    minor: u32,
) -> Option<(&'static str, &'static str)> {
    let cc = major * 10 + minor;
    let (_, arch, ptx) = PTX[module.index()]
        .iter()
        .filter(|(target, _, _)| *target <= cc)
        .max_by_key(|(target, _, _)| *target)?;
    Some((arch, ptx))
}

/// Every embedded PTX of `module`.
#[cfg(test)]
pub(crate) fn variants(module: ModuleId) -> impl Iterator<Item = &'static str> {
    PTX[module.index()].iter().map(|(_, _, ptx)| *ptx)
}

/// The oldest compute capability any target serves (`80` for 8.0).
pub(crate) fn oldest_target() -> u32 {
    TARGETS.iter().map(|(cc, _)| *cc).min().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_is_embedded_for_every_target() {
        if std::env::var_os("DOCS_RS").is_some() {
            return;
        }
        for module in super::ModuleId::ALL {
            for (cc, arch) in super::TARGETS {
                let (got, ptx) = super::for_device(module, cc / 10, cc % 10).expect("target");
                assert_eq!(got, *arch);
                assert!(
                    ptx.lines().any(|l| l == format!(".target {arch}")),
                    "{module:?} for {arch}"
                );
            }
        }
        assert!(
            super::for_device(super::ModuleId::Plan, 7, 5).is_none()
                || super::oldest_target() <= 75
        );
    }
}
