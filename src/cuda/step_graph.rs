//! [`StepGraph`]: a whole device step (plan, head verify, write, the engine's forward pass,
//! tail verify, the report's copies) captured into CUDA graphs that the graph owns, with the
//! canary and the inputs they replay over, and replayed over refilled inputs.

use super::backend::StreamCanary;
use super::device::gpu::Gpu;
use super::device::settings::DeviceRealKv;
use super::device::stream::Stream;
use super::driver::stream::{begin_capture_on, launch_on, ExecGraph};
use super::report::{CapturedReport, DeviceStepReport, PendingDeviceReport};
use super::sweep::PendingSweepReport;
use crate::backend::PlanWith;
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::plan::VerifyEntry;
use crate::step::{GroupKind, PlanInputsOf};
use crate::Error;

/// Graph instances a [`StepGraph`] alternates between.
const INSTANCES: usize = 2;

/// The step closure of a [`StepGraph`]: runs one step on the canary with the inputs, returns
/// what `verify_tail` returned.
type StepFn<V, W, E, S, R, G, K> = Box<
    dyn FnMut(&mut StreamCanary<V, W, E, S, R, G>, &K) -> Result<PendingDeviceReport, Error> + Send,
>;

/// One captured step: its executable graph and its report staging.
struct Instance {
    /// Dropped first: waits for the last replay's copies into the staging.
    report: CapturedReport,
    exec: ExecGraph,
}

/// A whole device step captured into CUDA graphs owned with everything they replay over: the
/// canary, the engine's inputs `K` and the step closure.
///
/// # Shape
///
/// A step graph owns the [`Canary`](crate::step::Canary) (moved in, [`StepGraph::into_canary`] gives it back), the
/// engine's inputs `K` (owned or `Arc`s: the batch, the table, the write inputs, ...) and the
/// step closure, which runs the step stages on the canary with those inputs and the engine's
/// forward-pass work between `write` and `verify_tail`. The closure runs only while the
/// canary's stream is capturing: twice, into two graph instances with their own pinned report
/// staging (reserved before the capture: a captured step allocates nothing and never syncs the
/// host). Replays alternate between the instances, so the report of replay N lands in its own
/// staging while replay N+1 runs, and is readable without blocking once its event completed
/// (at replay N+1 at the latest).
///
/// # The report rule
///
/// Every replay's report is delivered once, in replay order ([`StepGraph::try_take`],
/// [`StepGraph::wait`]). A replay that would overwrite the staging of a replay whose report
/// was not taken (two replays ahead) is refused with [`Error::ReportUnread`] naming both
/// replays; nothing is queued and nothing is lost.
///
/// # What the step closure may use
///
/// The graph replays over the device addresses the closure's launches used at capture time,
/// so each buffer they use must stay alive and in place while the graph lives: the canary's
/// buffers (owned by the graph), the buffers of `K` (owned by the graph; refill them in place
/// between replays, through [`StepGraph::inputs`]) and whatever the closure owns (it is
/// `'static` and kept by the graph). A buffer made inside the closure would be freed before the
/// replays: do not (its zeroing is a synchronous transfer, which fails a global-mode capture
/// anyway). The closure must not synchronise the host or transfer synchronously either: the
/// capture then fails with an error.
///
/// `Send` (when `K` is): an engine stores it in its own structs and drives it from its own
/// thread. The safe views that keep the engine's buffers alive
/// ([`Shared`](crate::cuda::Shared), `from_shared`) suit `K`: the graph then owns every buffer
/// it replays over.
///
/// # Drop
///
/// Dropping the graph (or [`into_parts`](StepGraph::into_parts)) first waits for every replay
/// queued, then destroys the graph instances, then drops the canary and `K`: memory that `K`
/// keeps alive is released only after the last replay that read it. Untaken reports are
/// discarded, and no later report counts them: take them first ([`wait`](StepGraph::wait) until
/// [`unread`](StepGraph::unread) is 0). A new [`Shape`](crate::Shape) for the canary
/// (`Canary::reshape`) means taking the reports, `into_parts`, the reshape, inputs of the new
/// capacities (views made anew over the same buffers: a view carries the capacity it was made
/// with, so the batch view must match the new write request capacity and the write inputs the
/// new write entry capacity), and a new graph and capture.
///
/// ```no_run
/// use kv_canary::cuda::{self, StepGraph, Stream};
/// use kv_canary::step::Canary;
/// use kv_canary::{Batch, Cap, ReqToToken, Shape};
///
/// let gpu = cuda::Gpu::new()?;
/// let shape = Shape::<Cap<32>, Cap<4>, Cap<16>>::new();
/// let canary = Canary::full_on(Stream::new(&gpu)?, shape, Cap::<64>, Cap::<16>)?;
/// // The engine's inputs, owned by the graph and refilled in place between replays.
/// struct Inputs {
///     batch: cuda::DeviceBatch<Cap<4>>,
///     table: cuda::DeviceReqToToken,
///     write: kv_canary::WriteInputs<Cap<16>, kv_canary::InputAssertOff, kv_canary::Device>,
/// }
/// let inputs = Inputs {
///     batch: shape.device_batch(&gpu)?,
///     table: cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::from_vec(4, 8, (0..32).collect())?)?,
///     write: canary.try_write_inputs()?,
/// };
/// let mut graph = StepGraph::new(canary, inputs, |canary, k: &Inputs| {
///     let step = canary
///         .plan(&cuda::PlanInputs::full(&k.batch, &k.table))?
///         .verify_head()?
///         .write(&k.write)?;
///     // ... the engine's forward pass, queued on `step`'s stream (captured too) ...
///     step.verify_tail(cuda::TailKvOnDevice::NONE)
/// });
/// graph.capture()?;
/// for _ in 0..3 {
///     // Two replays in flight is the most: when the device is that far behind (an engine
///     // refilling its inputs asynchronously can get there), wait for the older one.
///     if graph.unread() == 2 {
///         if let Some((replay, report)) = graph.wait()? {
///             assert!(report.is_clean(), "replay {replay}");
///         }
///     }
///     graph.inputs().batch.upload(&Batch::from_columns([1], [0], [3]))?;
///     graph.replay()?; // queued; refused (`Error::ReportUnread`) while the replay two back is unread
///     while let Some((replay, report)) = graph.try_take()? {
///         assert!(report.is_clean(), "replay {replay}");
///     }
/// }
/// while let Some((_, report)) = graph.wait()? {
///     assert!(report.is_clean());
/// }
/// # Ok::<(), kv_canary::Error>(())
/// ```
pub struct StepGraph<V, W, E, S, R, G, K>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Dropped first: each waits for its last replay before its graph is destroyed.
    instances: Vec<Instance>,
    canary: StreamCanary<V, W, E, S, R, G>,
    inputs: K,
    step: StepFn<V, W, E, S, R, G, K>,
    /// Replays queued so far.
    replays: u64,
    /// Reports taken so far (replays `0..taken` delivered).
    taken: u64,
}

/// The [`StepGraph`] of a [`NamedCanary`](crate::step::NamedCanary): capacities named by the
/// engine's configuration type `T`, run-time slot and ring-row counts, inputs `K`, group `G`.
pub type NamedStepGraph<T, K, G = crate::Full> = StepGraph<
    crate::NamedVerifyCapacity<T>,
    crate::NamedWriteReqCapacity<T>,
    crate::NamedWriteEntryCapacity<T>,
    crate::UncheckedCapacity,
    crate::UncheckedCapacity,
    G,
    K,
>;

const _: fn() = || {
    fn owned<T: Send + 'static>() {}
    type Small = crate::capacity::Cap<16>;
    owned::<StepGraph<Small, Small, Small, Small, Small, crate::input::Full, Vec<u8>>>();
};

impl<V, W, E, S, R, G, K> StepGraph<V, W, E, S, R, G, K>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// A step graph over `canary` and `inputs`, with `step` as its step (nothing is captured
    /// yet: [`capture`](Self::capture)). `step` runs a whole step on the canary it is given
    /// (plan, head verify, write, the engine's forward pass on the canary's stream, tail
    /// verify) with the inputs it is given, and returns what `verify_tail` returned.
    pub fn new(
        canary: StreamCanary<V, W, E, S, R, G>,
        inputs: K,
        step: impl FnMut(&mut StreamCanary<V, W, E, S, R, G>, &K) -> Result<PendingDeviceReport, Error>
            + Send
            + 'static,
    ) -> Self {
        StepGraph {
            instances: Vec::new(),
            canary,
            inputs,
            step: Box::new(step),
            replays: 0,
            taken: 0,
        }
    }

    /// Captures the step into the graph's two instances (running the step closure twice on the
    /// capturing stream; nothing runs on the device), after loading every kernel file and
    /// reserving the two report stagings. Replaces an earlier capture (waiting for its
    /// replays; their untaken reports are discarded). On error nothing stays captured and the
    /// canary stays in the graph ([`into_canary`](Self::into_canary)).
    pub fn capture(&mut self) -> Result<(), Error> {
        self.instances.clear();
        let gpu: Gpu = self.canary.backend().gpu().clone();
        let raw = self.canary.backend().as_raw();
        self.canary.prepare_capture(INSTANCES)?;
        let mut instances = Vec::with_capacity(INSTANCES);
        for _ in 0..INSTANCES {
            // SAFETY: `raw` is the canary's stream, alive while the canary (owned by `self`) is.
            let open = unsafe { begin_capture_on(gpu.context(), raw) }?;
            let result = (self.step)(&mut self.canary, &self.inputs);
            let graph = open.end()?;
            let report = result?.into_captured()?;
            let exec = graph.instantiate(gpu.context())?;
            instances.push(Instance { report, exec });
        }
        self.instances = instances;
        self.replays = 0;
        self.taken = 0;
        Ok(())
    }

    /// Queues the next replay of the step on the canary's stream (no host sync) and returns
    /// its number (from 0). [`Error::ReportUnread`] when the replay two back (the one whose
    /// staging this replay would reuse) has not been taken yet: nothing is queued then.
    pub fn replay(&mut self) -> Result<u64, Error> {
        let n = self.replays;
        if n >= self.taken + INSTANCES as u64 {
            return Err(Error::ReportUnread {
                unread: self.taken,
                replay: n,
            });
        }
        let at = (n % INSTANCES as u64) as usize;
        let stream = self.canary.backend();
        let instance = self.instances.get_mut(at).ok_or_else(|| Error::Malformed {
            detail: "a step graph was replayed before it was captured (StepGraph::capture)"
                .to_owned(),
        })?;
        instance.report.can_replay(n)?;
        // SAFETY: the instance was captured on this stream (`capture`) over buffers owned by
        // `self` (the canary, the inputs, the step closure), alive as long as the graph.
        unsafe { launch_on(stream.gpu().context(), &instance.exec, stream.as_raw()) }?;
        // SAFETY: the replay was just queued on the stream; this instance is not replayed
        // again before its report is taken (checked above, at each replay).
        unsafe { instance.report.replayed(stream) }?;
        self.replays += 1;
        Ok(n)
    }

    /// The oldest replay's report not taken yet, with its number, if its copies have landed;
    /// `None` when it has not (or no replay is pending). Never blocks. An error of that
    /// replay (a malformed-data error its kernels recorded, as the CPU op's [`Error`], or the
    /// driver's) is returned as [`Error::InReplay`] naming the replay ([`Error::root`] is the
    /// error itself); a decoded report then counts as taken, and the next take is the next
    /// replay's.
    pub fn try_take(&mut self) -> Result<Option<(u64, DeviceStepReport)>, Error> {
        self.take(false)
    }

    /// The oldest replay's report not taken yet, with its number, blocking until its copies
    /// have landed; `None` when every replay's report was taken. Errors as
    /// [`try_take`](Self::try_take)'s.
    pub fn wait(&mut self) -> Result<Option<(u64, DeviceStepReport)>, Error> {
        self.take(true)
    }

    fn take(&mut self, block: bool) -> Result<Option<(u64, DeviceStepReport)>, Error> {
        let n = self.taken;
        if n >= self.replays {
            return Ok(None);
        }
        let at = (n % INSTANCES as u64) as usize;
        let Some(instance) = self.instances.get_mut(at) else {
            return Ok(None);
        };
        let report = if block {
            instance.report.wait()
        } else {
            instance.report.try_take()
        };
        match report {
            Ok(Some(report)) => {
                self.taken += 1;
                Ok(Some((n, report)))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                // Decoded and consumed: the error is that replay's report.
                if !instance.report.is_unread() {
                    self.taken += 1;
                }
                Err(Error::InReplay {
                    replay: n,
                    error: Box::new(e),
                })
            }
        }
    }

    /// Replays queued so far.
    pub fn replays(&self) -> u64 {
        self.replays
    }

    /// Replays whose report was not taken yet (0, 1 or 2).
    pub fn unread(&self) -> u64 {
        self.replays - self.taken
    }

    /// The engine's inputs, to refill in place between replays (their `upload` methods take
    /// `&self`). On a non-blocking or foreign stream, synchronous uploads are not ordered
    /// with the replays: see the ordering rules of [`cuda`](crate::cuda).
    pub fn inputs(&self) -> &K {
        &self.inputs
    }

    /// The canary: its buffers, counters and stream (for the engine's own launches between
    /// replays, or a test's fault injection).
    pub fn canary(&self) -> &StreamCanary<V, W, E, S, R, G> {
        &self.canary
    }

    /// The canary's stream, on which the replays run.
    pub fn stream(&self) -> &Stream {
        self.canary.backend()
    }

    /// The canary and the inputs back, after waiting for every replay queued (untaken reports
    /// are discarded).
    pub fn into_parts(mut self) -> (StreamCanary<V, W, E, S, R, G>, K) {
        self.instances.clear();
        (self.canary, self.inputs)
    }

    /// The canary back, after waiting for every replay queued (untaken reports are
    /// discarded).
    pub fn into_canary(self) -> StreamCanary<V, W, E, S, R, G> {
        self.into_parts().0
    }
}

impl<V, W, E, S, R, G, K> StepGraph<V, W, E, S, R, G, K>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Sweeps idle cached slots between replays: [`Canary::sweep`](crate::step::Canary::sweep) on the graph's canary over
    /// `entries`, folding the real-KV sources that `real_kv` makes from the graph's inputs (the
    /// KV pool the step closure folds lives there, or behind `'static` views), queued on the
    /// canary's stream after the replays queued so far and before the next; no host sync beyond
    /// the driver's staging of `entries`; tags `SWEEP_*`. The sweep runs in the canary's verify
    /// plan and ring after the replays' report copies, and every replay's plan and ring clear
    /// overwrite them again, so neither disturbs the other; its report's staging comes from the
    /// stream's pool, not the graph's two (the first sweep allocates one, later ones reuse it).
    /// Errors as [`Canary::sweep`](crate::step::Canary::sweep) (nothing queued).
    pub fn sweep<F>(
        &mut self,
        entries: &[VerifyEntry],
        real_kv: F,
    ) -> Result<PendingSweepReport, Error>
    where
        F: for<'k> FnOnce(&'k K) -> Result<G::Sources<DeviceRealKv<'k>>, Error>,
    {
        let sources = real_kv(&self.inputs)?;
        self.canary.sweep(entries, sources)
    }

    /// Sweeps the cached prefixes of request-table rows between replays:
    /// [`Canary::sweep_table_rows`](crate::step::Canary::sweep_table_rows) on the graph's canary, the entries derived on the device
    /// from `rows` (device plan inputs: a batch of the rows and their cached tokens over the
    /// engine's `DeviceReqToToken`, say a second [`Shared`](super::Shared) view of the table
    /// buffer the graph's inputs view), folding the sources `real_kv` makes from the graph's
    /// inputs. Queued as [`sweep`](Self::sweep) is, with the plan launch in place of the
    /// entries' copies: no host sync, and no copy of the table. Errors as
    /// [`Canary::sweep_table_rows`](crate::step::Canary::sweep_table_rows) on a stream (a malformed row with the report).
    pub fn sweep_table_rows<I, F>(
        &mut self,
        rows: &I,
        real_kv: F,
    ) -> Result<PendingSweepReport, Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        Stream: PlanWith<I, V, W, E>,
        W: SameWriteReqCapacity<W>,
        F: for<'k> FnOnce(&'k K) -> Result<G::Sources<DeviceRealKv<'k>>, Error>,
    {
        let sources = real_kv(&self.inputs)?;
        self.canary.sweep_table_rows(rows, sources)
    }
}

impl<V, W, E, S, R, G, K> core::fmt::Debug for StepGraph<V, W, E, S, R, G, K>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StepGraph")
            .field("canary", &self.canary)
            .field("captured", &!self.instances.is_empty())
            .field("replays", &self.replays)
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}
