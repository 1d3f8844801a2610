//! The watchdog over a device canary: [`Watchdog::after_device_step`], the twin of
//! [`Watchdog::after_step`] for a canary on a [`Stream`]. At each check (every `interval` engine
//! steps after `warmup`, SGLang's every 100 after 100) it waits for the canary's stream and
//! reads the launches' kernel-run counters back from the device (one small synchronous
//! download a launch tag), then judges them exactly as the host watchdog does; between checks
//! it only counts.

use super::device::stream::Stream;
use crate::canary::LaunchTag;
use crate::capacity::Capacity;
use crate::error::Error;
use crate::guard::{Stall, Watchdog};
use crate::step::{Canary, GroupKind};

impl Watchdog {
    /// Counts one engine step of a device canary (call it once per forward step, after the
    /// step was queued) and, at each check, returns what is wrong with `canary`, if anything:
    /// the host watchdog's [`Stall`]s from the device's counters. A failed readback is the
    /// driver's error (the check did not run: nothing is reported as healthy).
    pub fn after_device_step<V, W, E, S, R, G>(
        &mut self,
        canary: &Canary<V, W, E, S, R, G, Stream>,
    ) -> Result<Option<Stall>, Error>
    where
        V: Capacity,
        W: Capacity,
        E: Capacity,
        S: Capacity,
        R: Capacity,
        G: GroupKind,
    {
        if !self.count_step() {
            return Ok(None);
        }
        canary.backend().synchronize()?;
        let mut counters: Vec<(LaunchTag, i64)> = Vec::new();
        for tag in canary.tags() {
            if let Some(c) = canary.counters(tag) {
                counters.push((tag, c.to_host()?.kernel_run_counter()));
            }
        }
        Ok(self.check(
            canary.steps(),
            canary.chain_position_assert().is_on(),
            counters,
        ))
    }
}
