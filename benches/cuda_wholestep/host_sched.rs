//! Whether a slow host call was the library's or the operating system's: the calling thread's
//! scheduler accounting (Linux procfs), read before and after each timed call of the host
//! timeline.
//!
//! `/proc/thread-self/schedstat` gives the thread's time on a CPU and its time waiting on a
//! run queue (runnable, but another task had the CPU), in ns; `/proc/thread-self/status` its
//! involuntary context switches and its voluntary ones (the thread went to sleep in the
//! kernel: a blocking wait, as a synchronising driver call makes). A call over the stall threshold whose run-queue wait alone
//! brings it back under the threshold was preempted: the host did not wait for the device or
//! the driver, the OS ran something else. Everything else over the threshold (the thread on a
//! CPU, or asleep in the kernel: a blocking wait) is a stall. Where the accounting is missing
//! (no procfs, or schedstat reads zeros, as in some sandboxes), only an involuntary switch
//! during the call marks it preempted; with neither, every slow call counts as a stall.

use std::time::Duration;

/// The thread's scheduler accounting at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct SchedMark {
    /// Time runnable on a run queue, ns (`None`: not available).
    wait_ns: Option<u64>,
    /// Involuntary context switches.
    preemptions: Option<u64>,
    /// Voluntary context switches (the thread slept in the kernel).
    sleeps: Option<u64>,
}

impl SchedMark {
    /// The calling thread's accounting now.
    pub fn now() -> Self {
        // Time on a CPU, then time on a run queue; a time on a CPU of 0 (a thread that is
        // running) means the kernel keeps no such accounting here.
        let wait_ns = std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| {
                let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
                Some((f.next()??, f.next()??))
            })
            .filter(|&(run, _)| run > 0)
            .map(|(_, wait)| wait);
        let status = std::fs::read_to_string("/proc/thread-self/status").ok();
        let field = |name: &str| {
            status.as_deref().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse().ok())
            })
        };
        SchedMark {
            wait_ns,
            preemptions: field("nonvoluntary_ctxt_switches:"),
            sleeps: field("voluntary_ctxt_switches:"),
        }
    }
}

/// One timed host call with the thread's accounting around it.
#[derive(Clone, Copy, Debug)]
pub struct TimedCall {
    /// Wall time of the call, µs.
    pub wall_us: f64,
    /// Time the thread waited on a run queue around the call, µs (`None`: unknown).
    pub runqueue_us: Option<f64>,
    /// Involuntary context switches around the call (`None`: unknown).
    pub preemptions: Option<u64>,
    /// Voluntary context switches around the call: times the thread slept in the kernel
    /// (`None`: unknown).
    pub sleeps: Option<u64>,
}

impl TimedCall {
    /// A call of `wall` whose accounting read `before` just before it and `after` just after.
    pub fn new(wall: Duration, before: SchedMark, after: SchedMark) -> Self {
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        TimedCall {
            wall_us: wall.as_secs_f64() * 1e6,
            runqueue_us: delta(before.wait_ns, after.wait_ns).map(|ns| ns as f64 / 1e3),
            preemptions: delta(before.preemptions, after.preemptions),
            sleeps: delta(before.sleeps, after.sleeps),
        }
    }

    /// Whether the thread slept in the kernel during the call (a blocking wait).
    pub fn slept(&self) -> bool {
        self.sleeps.is_some_and(|n| n > 0)
    }

    /// Whether the call took over `stall_us` because the OS preempted the thread: its run-queue
    /// wait alone brings it under `stall_us` (or, without that accounting, it saw an
    /// involuntary context switch).
    pub fn preempted(&self, stall_us: f64) -> bool {
        match (self.runqueue_us, self.preemptions) {
            (Some(wait), _) => self.wall_us - wait <= stall_us,
            (None, Some(n)) => n > 0,
            (None, None) => false,
        }
    }
}

/// Which accounting the marks had: for the output's legend.
pub fn accounting(calls: &[TimedCall]) -> &'static str {
    if calls.iter().any(|c| c.runqueue_us.is_some()) {
        "run-queue wait (/proc/thread-self/schedstat)"
    } else if calls.iter().any(|c| c.preemptions.is_some()) {
        "involuntary context switches (/proc/thread-self/status)"
    } else {
        "none available: every slow call counts as a stall"
    }
}

/// The classification on made-up calls (the benchmark's CPU checks run it: a harness-less
/// bench runs no `#[test]`).
pub fn self_check() -> Result<(), String> {
    let call = |wall_us, runqueue_us, preemptions| TimedCall {
        wall_us,
        runqueue_us,
        preemptions,
        sleeps: Some(0),
    };
    let cases = [
        // 120 µs of which 90 on a run queue: 30 µs of its own, under 50.
        (call(120.0, Some(90.0), Some(1)), true),
        // 120 µs of which 20 on a run queue: 100 µs of its own, a stall.
        (call(120.0, Some(20.0), Some(1)), false),
        // Without the run-queue accounting, an involuntary switch marks it.
        (call(120.0, None, Some(1)), true),
        (call(120.0, None, Some(0)), false),
        // Without any accounting, never.
        (call(120.0, None, None), false),
    ];
    for (c, preempted) in cases {
        if c.preempted(50.0) != preempted || c.slept() {
            return Err(format!(
                "host_sched: {c:?} should be preempted = {preempted}, not slept"
            ));
        }
    }
    let slept = TimedCall {
        sleeps: Some(1),
        ..call(120.0, Some(0.0), Some(0))
    };
    if !slept.slept() || slept.preempted(50.0) {
        return Err(format!("host_sched: {slept:?} slept and was not preempted"));
    }
    Ok(())
}
