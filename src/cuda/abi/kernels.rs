//! The kernel table: every entry point of `kernels/*.cu`, keyed by enums, with its module, name,
//! block size and dynamic shared memory. Ops pick a [`Kernel`]; nothing indexes by arithmetic.

use super::shared::{
    PLAN_MAX_ROWS, PLAN_VERIFY_THREADS, READBACK_THREADS, SCATTER_THREADS, STAGED_THREADS,
    VERIFY_STAGE_BYTES, VERIFY_STREAMED_SHARED_BYTES, VERIFY_THREADS, WRITE_THREADS,
};

/// A kernel file, loaded as one module (lazily, on first use of one of its kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ModuleId {
    /// `kernels/plan.cu`.
    Plan,
    /// `kernels/verify.cu`.
    Verify,
    /// `kernels/write.cu`.
    Write,
    /// `kernels/scatter.cu`.
    Scatter,
    /// `kernels/readback.cu`.
    Readback,
}

impl ModuleId {
    /// Every module, in the order of [`ModuleId::index`].
    pub(crate) const ALL: [ModuleId; 5] = [
        ModuleId::Plan,
        ModuleId::Verify,
        ModuleId::Write,
        ModuleId::Scatter,
        ModuleId::Readback,
    ];

    /// A dense index into per-module tables.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// The kernel file's name (`plan`).
    pub(crate) const fn file(self) -> &'static str {
        match self {
            ModuleId::Plan => "plan",
            ModuleId::Verify => "verify",
            ModuleId::Write => "write",
            ModuleId::Scatter => "scatter",
            ModuleId::Readback => "readback",
        }
    }

    /// Every kernel of the module, in the order of [`Kernel::index_in_module`].
    pub(crate) fn kernels(self) -> Vec<Kernel> {
        match self {
            ModuleId::Plan => PlanFamily::ALL
                .into_iter()
                .flat_map(|family| {
                    LutMode::ALL.into_iter().flat_map(move |lut| {
                        [false, true].map(|pool| Kernel::Plan { family, lut, pool })
                    })
                })
                .chain([false, true].map(|pair| Kernel::PlanVerifyHead { pair }))
                .collect(),
            ModuleId::Verify => Fold::ALL
                .into_iter()
                .flat_map(|fold| {
                    [false, true].into_iter().flat_map(move |tokens| {
                        [false, true].map(|pair| Kernel::Verify { fold, tokens, pair })
                    })
                })
                .chain([false, true].into_iter().flat_map(|tokens| {
                    [false, true].map(|pair| Kernel::VerifyStaged { tokens, pair })
                }))
                .chain([false, true].into_iter().flat_map(|tokens| {
                    [false, true].map(|pair| Kernel::VerifyStreamed { tokens, pair })
                }))
                .collect(),
            ModuleId::Write => Fold::ALL
                .into_iter()
                .flat_map(|fold| {
                    [false, true].into_iter().flat_map(move |assert| {
                        [false, true].map(|pair| Kernel::Write { fold, assert, pair })
                    })
                })
                .chain(Fold::ALL.into_iter().flat_map(|fold| {
                    [false, true].map(|assert| Kernel::WriteEnds { fold, assert })
                }))
                .collect(),
            ModuleId::Scatter => vec![Kernel::Scatter],
            ModuleId::Readback => vec![Kernel::Readback, Kernel::RingClear],
        }
    }
}

/// The fused plan kernels (kernels/plan.cu, `KVC_PLAN_FAMILY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PlanFamily {
    /// `kv_canary_plan_small*`: 128 threads, software-pipelined, at most 1024 rows.
    Small,
    /// `kv_canary_plan_large*`: 512 threads, software-pipelined, up to 4096 rows.
    Large,
    /// `kv_canary_plan_lean*`: 256 threads, a round at a time, at most 1024 rows.
    Lean,
    /// `kv_canary_plan_leanl*`: 512 threads, a round at a time, up to 4096 rows.
    LeanLarge,
}

impl PlanFamily {
    /// Every family.
    pub(crate) const ALL: [PlanFamily; 4] = [
        PlanFamily::Small,
        PlanFamily::Large,
        PlanFamily::Lean,
        PlanFamily::LeanLarge,
    ];

    /// Threads of a block and entries a thread takes per round.
    pub(crate) const fn block(self) -> (u32, u32) {
        match self {
            PlanFamily::Small => (128, 4),
            PlanFamily::Large | PlanFamily::LeanLarge => (512, 4),
            PlanFamily::Lean => (256, 4),
        }
    }

    /// Rows a block of the family scans at most.
    pub(crate) const fn max_rows(self) -> usize {
        match self {
            PlanFamily::Small | PlanFamily::Lean => 1024,
            PlanFamily::Large | PlanFamily::LeanLarge => PLAN_MAX_ROWS,
        }
    }

    /// Blocks a multiprocessor is sure to hold by registers (the `__launch_bounds__` minimum;
    /// the pipelined kernels: one).
    pub(crate) const fn resident_by_registers(self) -> u32 {
        match self {
            PlanFamily::Small | PlanFamily::Large => 1,
            PlanFamily::Lean => 4,
            PlanFamily::LeanLarge => 2,
        }
    }

    const fn prefix(self) -> &'static str {
        match self {
            PlanFamily::Small => "kv_canary_plan_small",
            PlanFamily::Large => "kv_canary_plan_large",
            PlanFamily::Lean => "kv_canary_plan_lean",
            PlanFamily::LeanLarge => "kv_canary_plan_leanl",
        }
    }
}

/// How a plan kernel treats the SWA LUT (kernels/plan.cu, `LutMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LutMode {
    /// A FULL group: no LUT.
    None,
    /// SGLang's GPU semantics: an index past the end is clamped and recorded.
    Clamp,
    /// Checked like the CPU op (a cooperative launch with a grid barrier).
    Checked,
}

impl LutMode {
    /// Every mode.
    pub(crate) const ALL: [LutMode; 3] = [LutMode::None, LutMode::Clamp, LutMode::Checked];
}

/// The real-KV fold a verify or write kernel is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fold {
    /// No fingerprint.
    None,
    /// The first 16 bytes of each source.
    Partial,
    /// `read_bytes` of each source.
    All,
}

impl Fold {
    /// Every fold.
    pub(crate) const ALL: [Fold; 3] = [Fold::None, Fold::Partial, Fold::All];
}

/// One kernel entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    /// `kv_canary_plan_<family>[_pool][_lut_clamp|_lut]`.
    Plan {
        /// Block shape and pipelining.
        family: PlanFamily,
        /// LUT handling.
        lut: LutMode,
        /// With an expected-token pool.
        pool: bool,
    },
    /// `kv_canary_verify[_partial|_all][_tokens][_pair]`.
    Verify {
        /// Real-KV fold.
        fold: Fold,
        /// Expected-token check on.
        tokens: bool,
        /// The K+V pair launch (grid y = 2, [`VerifyPairArgs`](super::args::VerifyPairArgs)).
        pair: bool,
    },
    /// `kv_canary_verify_all_staged[_tokens][_pair]`: ALL folds staged through shared memory.
    VerifyStaged {
        /// Expected-token check on.
        tokens: bool,
        /// The K+V pair launch.
        pair: bool,
    },
    /// `kv_canary_verify_all_streamed[_tokens][_pair]`: ALL folds of one source of strips over
    /// 128 bytes, streamed through shared memory a 128-byte chunk at a time.
    VerifyStreamed {
        /// Expected-token check on.
        tokens: bool,
        /// The K+V pair launch.
        pair: bool,
    },
    /// `kv_canary_write[_partial|_all][_assert][_pair]`.
    Write {
        /// Real-KV fold.
        fold: Fold,
        /// Input assert on.
        assert: bool,
        /// The K+V pair launch (grid y = 2, [`WritePairArgs`](super::args::WritePairArgs)).
        pair: bool,
    },
    /// `kv_canary_plan_verify_head[_pair]`: the lean plan at one entry a thread a round and the
    /// head verify of the K half (both halves: `pair`) in one launch.
    PlanVerifyHead {
        /// Both halves ([`PlanVerifyHeadPairArgs`](super::args::PlanVerifyHeadPairArgs)), else
        /// the K half ([`PlanVerifyHeadArgs`](super::args::PlanVerifyHeadArgs)).
        pair: bool,
    },
    /// `kv_canary_write[_partial|_all][_assert]_ends`: a step's tail writes and
    /// head writes in one launch (grid y = 4, [`WriteEndsArgs`](super::args::WriteEndsArgs)).
    WriteEnds {
        /// Real-KV fold (the tail's; the head halves have no source).
        fold: Fold,
        /// Input assert on.
        assert: bool,
    },
    /// `kv_canary_scatter`.
    Scatter,
    /// `kv_canary_readback`: a report's pieces into its pinned staging.
    Readback,
    /// `kv_canary_ring_clear`: a violation ring emptied (rows zeroed, write index 0).
    RingClear,
}

/// Dynamic shared memory of a staged ALL verify block: 8 warps x 2 stages x `Stage`.
pub(crate) const STAGED_SHARED_BYTES: u32 = 8 * 2 * VERIFY_STAGE_BYTES;

impl Kernel {
    /// The module that holds it.
    pub(crate) const fn module(self) -> ModuleId {
        match self {
            Kernel::Plan { .. } | Kernel::PlanVerifyHead { .. } => ModuleId::Plan,
            Kernel::Verify { .. } | Kernel::VerifyStaged { .. } | Kernel::VerifyStreamed { .. } => {
                ModuleId::Verify
            }
            Kernel::Write { .. } | Kernel::WriteEnds { .. } => ModuleId::Write,
            Kernel::Scatter => ModuleId::Scatter,
            Kernel::Readback | Kernel::RingClear => ModuleId::Readback,
        }
    }

    /// Its position in [`ModuleId::kernels`] (the loaded module's function table).
    pub(crate) const fn index_in_module(self) -> usize {
        match self {
            Kernel::Plan { family, lut, pool } => {
                (family as usize * LutMode::ALL.len() + lut as usize) * 2 + pool as usize
            }
            Kernel::Verify { fold, tokens, pair } => {
                (fold as usize * 2 + tokens as usize) * 2 + pair as usize
            }
            Kernel::VerifyStaged { tokens, pair } => {
                Fold::ALL.len() * 4 + tokens as usize * 2 + pair as usize
            }
            Kernel::VerifyStreamed { tokens, pair } => {
                Fold::ALL.len() * 4 + 4 + tokens as usize * 2 + pair as usize
            }
            Kernel::Write { fold, assert, pair } => {
                (fold as usize * 2 + assert as usize) * 2 + pair as usize
            }
            Kernel::WriteEnds { fold, assert } => {
                Fold::ALL.len() * 4 + fold as usize * 2 + assert as usize
            }
            Kernel::PlanVerifyHead { pair } => {
                PlanFamily::ALL.len() * LutMode::ALL.len() * 2 + pair as usize
            }
            Kernel::Scatter | Kernel::Readback => 0,
            Kernel::RingClear => 1,
        }
    }

    /// The entry point's name in the PTX.
    pub(crate) fn name(self) -> String {
        let fold = |f: Fold| match f {
            Fold::None => "",
            Fold::Partial => "_partial",
            Fold::All => "_all",
        };
        let on = |b: bool, s: &'static str| if b { s } else { "" };
        match self {
            Kernel::Plan { family, lut, pool } => {
                let lut = match lut {
                    LutMode::None => "",
                    LutMode::Clamp => "_lut_clamp",
                    LutMode::Checked => "_lut",
                };
                format!("{}{}{lut}", family.prefix(), on(pool, "_pool"))
            }
            Kernel::Verify {
                fold: f,
                tokens,
                pair,
            } => format!(
                "kv_canary_verify{}{}{}",
                fold(f),
                on(tokens, "_tokens"),
                on(pair, "_pair")
            ),
            Kernel::VerifyStaged { tokens, pair } => format!(
                "kv_canary_verify_all_staged{}{}",
                on(tokens, "_tokens"),
                on(pair, "_pair")
            ),
            Kernel::VerifyStreamed { tokens, pair } => format!(
                "kv_canary_verify_all_streamed{}{}",
                on(tokens, "_tokens"),
                on(pair, "_pair")
            ),
            Kernel::Write {
                fold: f,
                assert,
                pair,
            } => format!(
                "kv_canary_write{}{}{}",
                fold(f),
                on(assert, "_assert"),
                on(pair, "_pair")
            ),
            Kernel::WriteEnds { fold: f, assert } => {
                format!("kv_canary_write{}{}_ends", fold(f), on(assert, "_assert"))
            }
            Kernel::PlanVerifyHead { pair } => {
                format!("kv_canary_plan_verify_head{}", on(pair, "_pair"))
            }
            Kernel::Scatter => "kv_canary_scatter".to_owned(),
            Kernel::Readback => "kv_canary_readback".to_owned(),
            Kernel::RingClear => "kv_canary_ring_clear".to_owned(),
        }
    }

    /// The K+V pair launch of a verify or write kernel (the same kernel for two halves in one
    /// launch, grid y = 2); `None` for a kernel without one.
    pub(crate) const fn paired(self) -> Option<Kernel> {
        match self {
            Kernel::Verify { fold, tokens, .. } => Some(Kernel::Verify {
                fold,
                tokens,
                pair: true,
            }),
            Kernel::VerifyStaged { tokens, .. } => {
                Some(Kernel::VerifyStaged { tokens, pair: true })
            }
            Kernel::VerifyStreamed { tokens, .. } => {
                Some(Kernel::VerifyStreamed { tokens, pair: true })
            }
            Kernel::Write { fold, assert, .. } => Some(Kernel::Write {
                fold,
                assert,
                pair: true,
            }),
            Kernel::Plan { .. }
            | Kernel::PlanVerifyHead { .. }
            | Kernel::WriteEnds { .. }
            | Kernel::Scatter
            | Kernel::Readback
            | Kernel::RingClear => None,
        }
    }

    /// Threads of a block.
    pub(crate) const fn threads(self) -> u32 {
        match self {
            Kernel::Plan { family, .. } => family.block().0,
            Kernel::PlanVerifyHead { .. } => PLAN_VERIFY_THREADS,
            Kernel::Verify { .. } => VERIFY_THREADS,
            Kernel::VerifyStaged { .. } | Kernel::VerifyStreamed { .. } => STAGED_THREADS,
            Kernel::Write { .. } | Kernel::WriteEnds { .. } => WRITE_THREADS,
            Kernel::Scatter => SCATTER_THREADS,
            Kernel::Readback | Kernel::RingClear => READBACK_THREADS,
        }
    }

    /// The most dynamic shared memory a launch of it asks for (raised once, when its module
    /// loads): plan blocks keep up to `PLAN_MAX_ROWS` rows, a staged verify block its stages.
    pub(crate) const fn max_shared_bytes(self) -> u32 {
        match self {
            Kernel::Plan { .. } | Kernel::PlanVerifyHead { .. } => {
                plan_shared_bytes(PLAN_MAX_ROWS, 512)
            }
            Kernel::VerifyStaged { .. } => STAGED_SHARED_BYTES,
            Kernel::VerifyStreamed { .. } => VERIFY_STREAMED_SHARED_BYTES,
            _ => 0,
        }
    }
}

/// Dynamic shared memory of a plan block of `threads` threads holding `rows` rows
/// (kernels/plan.cu, `Smem`): 32 bytes a slot, `rows + rows / rpt + 1` slots, where `rpt`,
/// the rows a thread scans, is the smallest power of two with `rpt * threads >= rows` (row
/// `r` lives in slot `r + r / rpt` when `rpt > 1`, against bank conflicts).
pub(crate) const fn plan_shared_bytes(rows: usize, threads: u32) -> u32 {
    let mut rpt = 1usize;
    while rpt * (threads as usize) < rows {
        rpt *= 2;
    }
    let pad = if rpt > 1 { rows / rpt } else { 0 };
    ((rows + pad + 1) * 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_sits_at_its_index_and_names_an_entry_of_its_ptx() {
        for module in ModuleId::ALL {
            let kernels = module.kernels();
            for (i, k) in kernels.iter().enumerate() {
                assert_eq!(k.index_in_module(), i, "{k:?}");
                assert_eq!(k.module(), module);
            }
            if std::env::var_os("DOCS_RS").is_some() {
                continue;
            }
            for ptx in super::super::ptx::variants(module) {
                let entries = ptx.lines().filter(|l| l.contains(".entry ")).count();
                assert_eq!(entries, kernels.len(), "{module:?}: entries vs table");
                for k in &kernels {
                    assert!(
                        ptx.contains(&format!(".entry {}(", k.name())),
                        "{k:?} missing"
                    );
                }
            }
        }
    }

    #[test]
    fn shared_memory_fits_an_sm_for_every_row_count() {
        // 227 KB: the most a Hopper block may opt into.
        for rows in 1..=PLAN_MAX_ROWS {
            assert!(plan_shared_bytes(rows, 512) <= 227 * 1024, "{rows} rows");
        }
        for rows in 1..=1024 {
            assert!(plan_shared_bytes(rows, 128) <= plan_shared_bytes(PLAN_MAX_ROWS, 512));
        }
        // Row r of thread t sits in slot r + r / rpt: 4096 rows of 512 threads (rpt 8) take
        // 4096 + 512 slots plus the total.
        assert_eq!(plan_shared_bytes(4096, 512), (4096 + 512 + 1) * 32);
        assert_eq!(plan_shared_bytes(512, 512), (512 + 1) * 32);
        assert_eq!(plan_shared_bytes(513, 512), (513 + 256 + 1) * 32);
    }
}
