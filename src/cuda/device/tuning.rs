//! [`KernelTuning`]: the plan kernel choice and the grid sizes a [`Gpu`](super::gpu::Gpu)'s
//! launches use.

/// Which plan kernel a launch uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKernel {
    /// The lean kernel (256 threads) for plans of at most 1024 rows, the large one (512
    /// threads) above.
    Auto,
    /// Always blocks of 128 threads (at most 1024 write requests; larger plans use `Large`).
    Small,
    /// Always blocks of 512 threads.
    Large,
    /// Entries in grid-strided rounds, one at a time instead of software-pipelined, so fewer
    /// registers (at most 64) and more warps per multiprocessor: blocks of 256 threads for at
    /// most 1024 rows, of 512 threads above.
    Lean,
}

/// Kernel tuning: which plan kernel runs and the grid sizes of the launches, in blocks per
/// multiprocessor (the write op always runs one block
/// per request row). The defaults fill an H200 at full occupancy; the benchmark sweeps them.
/// (Formerly `LaunchConfig`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelTuning {
    /// Plan kernel choice.
    pub plan_kernel: PlanKernel,
    /// Plan, large kernel: at most this many blocks of 512 threads per SM (one fits with 4096
    /// rows: 144 KB of shared memory, up to 124 registers). Every plan grid also shrinks to
    /// what the verify capacity needs; with a checked LUT (every block must be resident) the
    /// large and small kernels take at most one block per SM, the lean one as many as its
    /// registers and shared memory are sure to leave room for.
    pub plan_blocks_per_sm: u32,
    /// Plan: at most this many blocks of 128 threads per SM (the small kernel).
    pub plan_small_blocks_per_sm: u32,
    /// Plan, lean kernel: at most this many blocks of 256 threads per SM (half as many of 512
    /// threads); four fit by registers, two measured best (the default).
    pub plan_lean_blocks_per_sm: u32,
    /// Verify without real-KV folds: blocks of 512 threads per SM (four fit: 32 registers).
    pub verify_blocks_per_sm: u32,
    /// Verify with PARTIAL real-KV folds: blocks of 512 threads per SM (two fit: 64 registers).
    pub verify_fold_blocks_per_sm: u32,
    /// Verify with ALL real-KV folds, unstaged (strips over 128 bytes, or a slot stride that
    /// is not a multiple of 16): blocks of 512 threads per SM (one fits: up to 128 registers, a
    /// source's strip in flight per lane).
    pub verify_all_blocks_per_sm: u32,
    /// Verify with ALL real-KV folds staged through shared memory (strips of at most 128
    /// bytes): whether to use that kernel at all (else the unstaged one).
    pub verify_all_staged: bool,
    /// Verify, staged ALL: blocks of 256 threads per SM (three fit: 72 KB of shared memory,
    /// 64 registers).
    pub verify_all_staged_blocks_per_sm: u32,
    /// Verify with ALL real-KV folds of one source whose strips exceed 128 bytes (a 2 KB K, V
    /// or latent row) streamed through shared memory, one lane an entry: whether to use that
    /// kernel at all (else the unstaged one).
    pub verify_all_streamed: bool,
    /// Verify, streamed ALL: blocks of 256 threads per SM (three fit: 64 KB of shared memory
    /// each).
    pub verify_all_streamed_blocks_per_sm: u32,
    /// The step API's K and V launches of one stage (verify or write) as one pair launch (grid
    /// y = 2, the halves side by side) whenever both halves use the same kernel and grid: a
    /// K+V step queues 5 launches instead of 9 (3 with `plan_verify_fusion` and
    /// `defer_head_writes`). Off: one launch per half, K then V. (A NONE or
    /// PARTIAL verify pair whose halves each fit in the full grid but not both together runs
    /// each on half the grid, so that both planes are resident at once.)
    pub pair_launches: bool,
    /// The plan and the head verify of a step as one launch (`kv_canary_plan_verify_head`,
    /// [`plan_verify_head`](crate::cuda::plan_verify_head)), whenever the plan is the lean
    /// kernel (at most 1024 write requests) without a LUT or an expected-token pool: each entry
    /// is checked against the head buffers by the thread that plans it, so the head verify
    /// loads no plan column and needs no launch of its own. Off: the two launches.
    pub plan_verify_fusion: bool,
    /// The step API's head writes queued with its tail writes, in one launch behind the tail
    /// verify ([`write_ends`](crate::cuda::write_ends), [`write_ends_k`](crate::cuda::write_ends_k)),
    /// instead of at `write`: a launch fewer a step (a K+V decode step is three launches: the
    /// plan with the head verify, the tail verify, the writes). Nothing reads or writes the
    /// head buffers in between. A step dropped after `write` and before `verify_tail` (counted
    /// as abandoned by the next report) then leaves both ends unstamped, where the CPU backend,
    /// which stamps the head at `write`, leaves the head stamped. Off: the head writes at
    /// `write`, four launches.
    pub defer_head_writes: bool,
    /// Programmatic dependent launches (compute capability 9.0 and later; ignored before): each
    /// of the library's launches may start while the kernel ahead of it in the stream is still
    /// running, and waits for that grid (`griddepcontrol.wait`) before it touches memory. So the
    /// launch and the blocks' start overlap the kernel ahead, and a step's dependent launches
    /// follow each other without the gap between them. Off: every launch starts after the
    /// kernel ahead has finished. Never for cooperative launches or custom kernels.
    pub overlap_launches: bool,
}

impl Default for KernelTuning {
    fn default() -> Self {
        KernelTuning {
            plan_kernel: PlanKernel::Auto,
            plan_blocks_per_sm: 1,
            plan_small_blocks_per_sm: 4,
            plan_lean_blocks_per_sm: 2,
            verify_blocks_per_sm: 4,
            verify_fold_blocks_per_sm: 2,
            verify_all_blocks_per_sm: 1,
            verify_all_staged: true,
            verify_all_staged_blocks_per_sm: 3,
            verify_all_streamed: true,
            verify_all_streamed_blocks_per_sm: 3,
            pair_launches: true,
            plan_verify_fusion: true,
            defer_head_writes: true,
            overlap_launches: true,
        }
    }
}

impl KernelTuning {
    /// The same tuning with every count clamped to at least 1.
    pub(crate) fn clamped(self) -> Self {
        KernelTuning {
            plan_kernel: self.plan_kernel,
            plan_blocks_per_sm: self.plan_blocks_per_sm.max(1),
            plan_small_blocks_per_sm: self.plan_small_blocks_per_sm.max(1),
            plan_lean_blocks_per_sm: self.plan_lean_blocks_per_sm.max(1),
            verify_blocks_per_sm: self.verify_blocks_per_sm.max(1),
            verify_fold_blocks_per_sm: self.verify_fold_blocks_per_sm.max(1),
            verify_all_blocks_per_sm: self.verify_all_blocks_per_sm.max(1),
            verify_all_staged: self.verify_all_staged,
            verify_all_staged_blocks_per_sm: self.verify_all_staged_blocks_per_sm.max(1),
            verify_all_streamed: self.verify_all_streamed,
            verify_all_streamed_blocks_per_sm: self.verify_all_streamed_blocks_per_sm.max(1),
            pair_launches: self.pair_launches,
            plan_verify_fusion: self.plan_verify_fusion,
            defer_head_writes: self.defer_head_writes,
            overlap_launches: self.overlap_launches,
        }
    }
}
