//! What a step returns: [`StepReport`], with one summary per launch ([`KvPair`]) and the decoded
//! violations of the step.

use super::findings::findings;
#[cfg(test)]
use super::status::StepStatus;
use super::status::{Counted, PlanOverflow, Unverified};
use crate::canary::{HealthCounters, Violation};
use crate::cpu::{PlanSummary, VerifySummary, WriteSummary};
use crate::error::Error;
use crate::real_kv::{
    PagedShape, RealKv, RealKvHashMode, RealKvSource, RealKvSources, TokenLayout,
};
use core::fmt;

/// One value per half of a KV pool: `k` for the K half, `v` for the V half.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvPair<T> {
    /// The K half's.
    pub k: T,
    /// The V half's.
    pub v: T,
}

impl<T> KvPair<T> {
    /// Both halves, K first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        [&self.k, &self.v].into_iter()
    }

    /// Applies `f` to both halves.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> KvPair<U> {
        KvPair {
            k: f(self.k),
            v: f(self.v),
        }
    }
}

impl KvPair<HealthCounters> {
    /// The slots both halves' launches have checked since their counters began (K's
    /// `slot_run_counter` plus V's; the counters are cumulative, so a step's or a sweep's own
    /// share is the difference from the report before). Negative counters (a corrupted readback)
    /// count as 0.
    pub fn slots_run(&self) -> u64 {
        self.iter()
            .map(|c| u64::try_from(c.slot_run_counter()).unwrap_or(0))
            .sum()
    }
}

/// The real-KV fingerprints of the tail launches: the K half folds the K bytes of each slot, the
/// V half the V bytes (spec §2.10, §2.11). Head launches never fold (spec §1).
///
/// Every active source must cover every slot of the canary, so that no tail launch can fail
/// half-way through a step.
pub type TailKv<'a> = KvPair<RealKv<'a>>;

impl<'a> KvPair<RealKv<'a>> {
    /// No fingerprint on either half (every expected `real_kv_hash` is 0).
    pub const NONE: TailKv<'static> = KvPair {
        k: RealKv::NONE,
        v: RealKv::NONE,
    };

    /// The K half folds `k`, the V half `v`.
    pub fn new(k: RealKv<'a>, v: RealKv<'a>) -> Self {
        KvPair { k, v }
    }

    /// The tail fingerprints of a dense K pool and a dense V pool, each holding every slot's
    /// strip of `bytes_per_token` bytes, slot after slot, hashed under `mode`
    /// ([`RealKv::dense`], whose errors these are). A paged pool, strided rows or several
    /// sources per half are built from [`RealKvSource`](crate::RealKvSource)s and
    /// [`RealKv::new`].
    ///
    /// ```
    /// use kv_canary::step::{Canary, TailKv};
    /// use kv_canary::{Batch, Cap, PlanInputs, RealKvHashMode, ReqToToken, Shape};
    ///
    /// const BYTES: usize = 32; // one token's K (and V) strip
    /// let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
    /// let table = ReqToToken::from_vec(4, 8, (0..32).collect())?; // row r, position p: slot 8r + p
    /// let (mut k, mut v) = (vec![0u8; 64 * BYTES], vec![0u8; 64 * BYTES]); // the engine's pools
    /// let mut inputs = canary.write_inputs();
    ///
    /// // The request in row 1 prefills 3 tokens into slots 8, 9, 10; the forward pass writes
    /// // their K and V, which the tail launches fingerprint.
    /// let p = inputs.parts_mut();
    /// p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
    /// p.positions[..3].copy_from_slice(&[0, 1, 2]);
    /// p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
    /// let batch = Batch::from_columns([1], [0], [3]);
    /// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
    /// for slot in 8..11 {
    ///     k[slot * BYTES] = slot as u8;
    ///     v[slot * BYTES] = 100 + slot as u8;
    /// }
    /// let tail = TailKv::dense(RealKvHashMode::All, &k, &v, BYTES)?;
    /// assert!(step.verify_tail(tail)?.is_clean());
    ///
    /// // A stray store changes slot 9's V bytes; the next step re-checks the prefix and finds it.
    /// v[9 * BYTES + 5] ^= 0xff;
    /// let p = inputs.parts_mut();
    /// (p.input_ids[0], p.positions[0], p.out_cache_loc[0]) = (10, 3, 11);
    /// let batch = Batch::from_columns([1], [3], [1]);
    /// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
    /// let report = step.verify_tail(TailKv::dense(RealKvHashMode::All, &k, &v, BYTES)?)?;
    /// assert!(report.violations.iter().all(|row| row.slot == 9), "{report}");
    /// assert!(!report.violations.is_empty());
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn dense(
        mode: RealKvHashMode,
        k: &'a [u8],
        v: &'a [u8],
        bytes_per_token: usize,
    ) -> Result<Self, Error> {
        Ok(KvPair {
            k: RealKv::dense(mode, k, bytes_per_token)?,
            v: RealKv::dense(mode, v, bytes_per_token)?,
        })
    }

    /// The tail fingerprints of a paged engine's K and V caches of `num_blocks` blocks of
    /// `shape` in vLLM's layouts (mistral.rs, candle-vllm: K `[blocks, kv_heads, head_dim / x,
    /// block_size, x]`, V `[blocks, kv_heads, head_dim, block_size]`), hashed under `mode`;
    /// ALL folds a token's whole vector. Slot `s` is token `s % block_size` of block
    /// `s / block_size`. The errors of [`RealKvSource::paged`](crate::RealKvSource::paged);
    /// other layouts (HND, a shorter ALL read, several sources a half) are built from
    /// `RealKvSource::paged` and [`RealKv::new`].
    ///
    /// ```
    /// use kv_canary::step::TailKv;
    /// use kv_canary::{PagedShape, RealKvHashMode};
    /// let shape = PagedShape::new(2, 64, 2, 16); // 2 KV heads of 64 bf16, blocks of 16
    /// let (k, v) = (vec![0u8; 8 * shape.block_bytes()], vec![0u8; 8 * shape.block_bytes()]);
    /// let tail = TailKv::vllm_paged(RealKvHashMode::All, &k, &v, 8, shape)?;
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn vllm_paged(
        mode: RealKvHashMode,
        k: &'a [u8],
        v: &'a [u8],
        num_blocks: usize,
        shape: PagedShape,
    ) -> Result<Self, Error> {
        let one = |bytes, layout| -> Result<RealKv<'a>, Error> {
            let source =
                RealKvSource::paged(bytes, num_blocks, layout, shape, shape.token_bytes())?;
            Ok(RealKv::new(mode, RealKvSources::from_array([source])))
        };
        Ok(KvPair {
            k: one(k, TokenLayout::vllm_k(shape)?)?,
            v: one(v, TokenLayout::vllm_v(shape)?)?,
        })
    }
}

/// Everything one step did: the plan, one summary per launch, the health counters, and the
/// violations it recorded.
///
/// `violations` holds the rows recorded during this step only, decoded, in recording order: head
/// verify (K, V), head write (K, V), tail verify (K, V), tail write (K, V). Each row's
/// [`launch_tag`](Violation::launch_tag) says which launch found it and its
/// [`reasons`](Violation::reasons) what. Rows past the ring's capacity are lost; `dropped` counts
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// What the plan op produced.
    pub plan: PlanSummary,
    /// The verify capacity the plan was made for (the canary's shape).
    pub verify_capacity: usize,
    /// The head verify launches (no real-KV fold).
    pub head_verify: KvPair<VerifySummary>,
    /// The head write launches (no real-KV fold).
    pub head_write: KvPair<WriteSummary>,
    /// The tail verify launches (real-KV fold).
    pub tail_verify: KvPair<VerifySummary>,
    /// The tail write launches (real-KV fold).
    pub tail_write: KvPair<WriteSummary>,
    /// The health counters of the head launches after this step (cumulative, spec §2.7).
    pub head_counters: KvPair<HealthCounters>,
    /// The health counters of the tail launches after this step (cumulative).
    pub tail_counters: KvPair<HealthCounters>,
    /// This step's violation rows, decoded, in recording order.
    pub violations: Vec<Violation>,
    /// This step's rows that did not fit in the ring.
    pub dropped: u64,
    /// Steps started on the canary since the previous report that never reached their tail
    /// verify (dropped, or ended by an error): their checks did not all run.
    pub abandoned_steps: u64,
}

// Not clean when the plan overflowed its verify capacity (nothing was checked) or an earlier
// step was abandoned.
findings!(StepReport, unverified: |report| Unverified {
    plan_overflow: (!report.plan.enabled).then_some(PlanOverflow {
        needed: Some(report.plan.requested_entries),
        capacity: report.verify_capacity,
    }),
    abandoned_steps: report.abandoned_steps,
});

impl StepReport {
    /// Canary slots checked, over the four verify launches (slot-0 entries excluded).
    pub fn entries_checked(&self) -> u64 {
        let verifies = self.head_verify.iter().chain(self.tail_verify.iter());
        verifies.map(|s| s.checked as u64).sum()
    }

    /// Canary slots stamped, over the four write launches.
    pub fn entries_written(&self) -> u64 {
        let writes = self.head_write.iter().chain(self.tail_write.iter());
        writes.map(|s| s.written).sum()
    }
}

/// One line: `bs 3, 12 verify entries (enabled), 5 tokens written; 48 slots checked, 20 stamped;
/// clean` — or `2 violations (0 dropped)`, or `UNVERIFIED: ...` naming what was not checked.
impl fmt::Display for StepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bs {}, {} ({}), {} written; {} checked, {} stamped; ",
            self.plan.bs,
            Counted(
                self.plan.requested_entries,
                "verify entry",
                "verify entries"
            ),
            if self.plan.enabled {
                "enabled"
            } else {
                "DISABLED: over capacity"
            },
            Counted(self.plan.write_tokens, "token", "tokens"),
            Counted(self.entries_checked(), "slot", "slots"),
            self.entries_written(),
        )?;
        self.status().write_line(f, self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::{Counted, StepStatus, Unverified};
    use core::fmt;

    /// A status line as the reports end theirs.
    struct Line(StepStatus, u64);

    impl fmt::Display for Line {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.write_line(f, self.1)
        }
    }

    #[test]
    fn status_lines_count_one_in_the_singular() {
        assert_eq!(Line(StepStatus::Clean, 0).to_string(), "clean");
        let one = StepStatus::Violations { recorded: 1 };
        assert_eq!(Line(one, 0).to_string(), "1 violation (0 dropped)");
        let three = StepStatus::Violations { recorded: 3 };
        assert_eq!(Line(three, 1).to_string(), "3 violations (1 dropped)");
        let gaps = Unverified {
            plan_overflow: None,
            abandoned_steps: 1,
        };
        assert_eq!(
            Line(StepStatus::Unverified { gaps, recorded: 1 }, 0).to_string(),
            "UNVERIFIED: 1 earlier step did not complete (an error ended it, or it was dropped \
             before its tail verify); 1 violation (0 dropped)"
        );
        assert_eq!(Counted(1, "slot", "slots").to_string(), "1 slot");
        assert_eq!(Counted(0, "slot", "slots").to_string(), "0 slots");
    }

    #[test]
    fn a_status_alone_reads_as_its_line_without_the_drops() {
        assert_eq!(StepStatus::Clean.to_string(), "clean");
        assert_eq!(
            StepStatus::Violations { recorded: 2 }.to_string(),
            "2 violations"
        );
        let gaps = Unverified {
            plan_overflow: Some(super::PlanOverflow {
                needed: None,
                capacity: 32,
            }),
            abandoned_steps: 0,
        };
        let line = StepStatus::Unverified { gaps, recorded: 0 }.to_string();
        assert!(
            line.starts_with("UNVERIFIED: ")
                && line.ends_with("; 0 violations")
                && line.contains("32"),
            "{line}"
        );
    }
}
