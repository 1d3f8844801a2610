//! [`Watchdog`]: the canary's own health (issue 33 item 2). A canary whose launches stopped
//! running reports nothing, which reads as clean; the watchdog checks, every `interval` engine
//! steps after `warmup` steps, that the health counters advanced with the launches, that no
//! step was dropped, and that the engine finished its warm-up ([`Watchdog::mark_initialised`],
//! SGLang's `mark_init_finished`) so that the chain-position assert is on. What it finds is a
//! [`Stall`], reported under every policy (SGLang raises even in log mode); the policy's
//! [`watchdog`](super::Policy::watchdog) action fails the engine on it or not.

use crate::backend::Backend;
use crate::canary::{ChainPositionAssert, LaunchTag};
use crate::capacity::Capacity;
use crate::memory::Host;
use crate::step::{Canary, GroupKind};
use core::fmt;

/// What the watchdog found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Stall {
    /// A launch's kernel-run counter did not advance over the last interval: its launches
    /// stopped running (a stage skipped, a graph that no longer launches it).
    CountersFrozen {
        /// The launch.
        tag: LaunchTag,
        /// Its kernel-run counter, unchanged.
        runs: i64,
    },
    /// The engine ran more steps than the canary completed over the last interval: steps went
    /// unchecked (planned and dropped, or never planned).
    StepsDropped {
        /// Engine steps in the interval.
        engine: u64,
        /// Canary steps completed in it.
        canary: u64,
    },
    /// Warm-up is over and the engine never marked the canary initialised: the chain-position
    /// assert stays off.
    NeverInitialised {
        /// Engine steps so far.
        steps: u64,
    },
    /// The canary was initialised but its chain-position assert is off.
    AssertOff {
        /// Engine steps so far.
        steps: u64,
    },
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stall::CountersFrozen { tag, runs } => write!(
                f,
                "{tag:?} launches stopped: kernel-run counter frozen at {runs}"
            ),
            Stall::StepsDropped { engine, canary } => write!(
                f,
                "{engine} engine steps but {canary} canary steps completed in the interval"
            ),
            Stall::NeverInitialised { steps } => write!(
                f,
                "{steps} steps and the canary was never marked initialised: the chain-position \
                 assert is off"
            ),
            Stall::AssertOff { steps } => write!(
                f,
                "after {steps} steps the initialised canary's chain-position assert is off"
            ),
        }
    }
}

/// Checks a host canary's health every `interval` engine steps after `warmup` ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watchdog {
    interval: u64,
    warmup: u64,
    /// Engine steps so far.
    steps: u64,
    initialised: bool,
    /// At the last check: the canary's completed steps and its launches' kernel-run counters.
    last: Option<(u64, Vec<(LaunchTag, i64)>)>,
}

impl Default for Watchdog {
    /// SGLang's: every 100 steps after 100.
    fn default() -> Self {
        Watchdog::new(100, 100)
    }
}

impl Watchdog {
    /// A watchdog that checks every `interval` (at least 1) engine steps after `warmup`.
    pub fn new(interval: u64, warmup: u64) -> Self {
        Watchdog {
            interval: interval.max(1),
            warmup,
            steps: 0,
            initialised: false,
            last: None,
        }
    }

    /// Ends warm-up and graph capture: switches the canary's chain-position assert on (it is
    /// off while CUDA graphs are captured and warm-up batches run) and lets the watchdog expect
    /// it on from now on.
    pub fn mark_initialised<V, W, E, S, R, G, B>(
        &mut self,
        canary: &mut Canary<V, W, E, S, R, G, B>,
    ) where
        V: Capacity,
        W: Capacity,
        E: Capacity,
        S: Capacity,
        R: Capacity,
        G: GroupKind,
        B: Backend,
    {
        canary.set_chain_position_assert(ChainPositionAssert::ON);
        self.initialised = true;
    }

    /// Counts one engine step (call it once per forward step, after the step's report) and, at
    /// each check, returns what is wrong with `canary`, if anything.
    pub fn after_step<V, W, E, S, R, G, B>(
        &mut self,
        canary: &Canary<V, W, E, S, R, G, B>,
    ) -> Option<Stall>
    where
        V: Capacity,
        W: Capacity,
        E: Capacity,
        S: Capacity,
        R: Capacity,
        G: GroupKind,
        B: Backend<Memory = Host>,
    {
        if !self.count_step() {
            return None;
        }
        let counters: Vec<(LaunchTag, i64)> = canary
            .tags()
            .into_iter()
            .filter_map(|tag| Some((tag, canary.counters(tag)?.kernel_run_counter())))
            .collect();
        self.check(
            canary.steps(),
            canary.chain_position_assert().is_on(),
            counters,
        )
    }

    /// Counts one engine step; whether this step is a check.
    pub(crate) fn count_step(&mut self) -> bool {
        self.steps += 1;
        self.steps >= self.warmup && (self.steps - self.warmup).is_multiple_of(self.interval)
    }

    /// The check of a canary that completed `canary_steps` steps, with its chain-position
    /// assert `assert_on` and its launches' kernel-run `counters` (both backends' watchdogs).
    pub(crate) fn check(
        &mut self,
        canary_steps: u64,
        assert_on: bool,
        counters: Vec<(LaunchTag, i64)>,
    ) -> Option<Stall> {
        let now = (canary_steps, counters);
        let last = self.last.replace(now.clone());
        if !self.initialised {
            return Some(Stall::NeverInitialised { steps: self.steps });
        }
        if !assert_on {
            return Some(Stall::AssertOff { steps: self.steps });
        }
        let (then_steps, then_counters) = last?;
        let completed = now.0 - then_steps;
        if completed < self.interval {
            return Some(Stall::StepsDropped {
                engine: self.interval,
                canary: completed,
            });
        }
        now.1
            .iter()
            .zip(&then_counters)
            .find(|((_, n), (_, t))| n <= t)
            .map(|(&(tag, runs), _)| Stall::CountersFrozen { tag, runs })
    }
}
