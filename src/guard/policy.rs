//! [`Policy`]: what the engine does about each kind of finding; [`Verdict`]: what happens to a
//! request.

/// What the engine does about one kind of finding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Action {
    /// Ignored (SGLang's `none`): no verdict, nothing reported.
    #[default]
    Off,
    /// Reported once, every request kept serving (SGLang's `log`).
    Log,
    /// Reported once, with a verdict per request it concerns: victims recompute, culprits abort.
    PerRequest,
    /// The engine fails: [`Guard::judge`](super::Guard::judge) returns an error naming the
    /// finding (SGLang's `raise`).
    Fail,
}

/// The engine's policy: one [`Action`] per kind of finding. The default is off for all, as
/// SGLang's `--kv-canary none`; a guard is built to turn them on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Violation rows (verify and write).
    pub violations: Action,
    /// Steps whose checks did not all run (a plan over its verify capacity, steps abandoned).
    pub unverified: Action,
    /// The [`Watchdog`](super::Watchdog)'s stalls: reported under every action (a canary that
    /// stopped checking must never read as clean), failing the engine under [`Action::Fail`].
    pub watchdog: Action,
}

impl Policy {
    /// The policy of an engine that recovers request by request: violations
    /// [`Action::PerRequest`] (victims recompute, culprits abort), unverified steps and watchdog
    /// stalls [`Action::Log`] (reported, every request kept).
    ///
    /// ```
    /// use kv_canary::guard::{Action, Policy};
    /// let p = Policy::per_request();
    /// assert_eq!((p.violations, p.unverified, p.watchdog), (Action::PerRequest, Action::Log, Action::Log));
    /// ```
    pub fn per_request() -> Self {
        Policy {
            violations: Action::PerRequest,
            unverified: Action::Log,
            watchdog: Action::Log,
        }
    }
}

/// What happens to one request, weakest first (a request concerned twice gets the stronger).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Verdict {
    /// Keep serving; the finding is logged.
    Keep,
    /// The request's cached prefix is lost: drop it from the prefix cache and recompute it (a
    /// cache miss).
    Recompute,
    /// Abort the request: its own writes or inputs are wrong.
    Abort,
}
