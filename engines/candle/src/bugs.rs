//! The bug flags: each a realistic engine bug, armed at a step and made at the first step from
//! then on where it can be (the step it was made is recorded with the requests it concerns).

use std::fmt;
use std::str::FromStr;

/// A bug the engine can be run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// The slot mapping off by one for one token: `reshape_and_cache` writes it into another
    /// sequence's cached slot.
    SlotOffByOne,
    /// A block freed while a sequence still holds it (a reference-count bug), reallocated and
    /// overwritten by its next owner.
    FreedWhileHeld,
    /// A block-table row left stale after a copy-on-write of a forked sequence's shared block.
    StaleRowAfterCow,
    /// A K byte of a live cached block (a running request's) flipped after its write.
    LiveKvFlip,
    /// A K byte of an idle cached block (in the prefix cache, no request running on it)
    /// flipped after its write.
    IdleKvFlip,
    /// Two requests' sampled tokens swapped on their way to the next step's input ids.
    TokenSwap,
}

impl Bug {
    /// Every bug flag.
    pub const ALL: [Bug; 6] = [
        Bug::SlotOffByOne,
        Bug::FreedWhileHeld,
        Bug::StaleRowAfterCow,
        Bug::LiveKvFlip,
        Bug::IdleKvFlip,
        Bug::TokenSwap,
    ];

    /// The flag's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Bug::SlotOffByOne => "slot-off-by-one",
            Bug::FreedWhileHeld => "freed-while-held",
            Bug::StaleRowAfterCow => "stale-row-after-cow",
            Bug::LiveKvFlip => "live-kv-flip",
            Bug::IdleKvFlip => "idle-kv-flip",
            Bug::TokenSwap => "token-swap",
        }
    }
}

impl fmt::Display for Bug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Bug {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Bug::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown bug {s:?}"))
    }
}

/// A bug as it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    /// Which.
    pub bug: Bug,
    /// The step it was made in.
    pub step: u64,
    /// The requests whose KV or inputs it damaged (the ones a report should name).
    pub requests: Vec<u64>,
    /// The slot it damaged (the misdirected write's target, the flipped byte's slot), if one.
    pub slot: Option<i64>,
    /// What happened.
    pub detail: String,
}

/// The armed bug, and what it did.
#[derive(Clone, Debug, Default)]
pub struct BugState {
    armed: Option<(Bug, u64)>,
    /// The bug, once made.
    pub made: Option<Made>,
}

impl BugState {
    /// `bug` armed from step `at`.
    pub fn new(bug: Option<Bug>, at: u64) -> Self {
        BugState {
            armed: bug.map(|b| (b, at)),
            made: None,
        }
    }

    /// Whether `bug` is armed and due at `step` (and not made yet).
    pub fn due(&self, bug: Bug, step: u64) -> bool {
        self.made.is_none() && self.armed.is_some_and(|(b, at)| b == bug && step >= at)
    }

    /// Records that the armed bug was made.
    pub fn record(&mut self, step: u64, requests: Vec<u64>, slot: Option<i64>, detail: String) {
        let (bug, _) = self.armed.expect("an armed bug");
        self.made = Some(Made {
            bug,
            step,
            requests,
            slot,
            detail,
        });
    }
}
