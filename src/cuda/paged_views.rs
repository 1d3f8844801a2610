//! [`PagedStepViews`] (feature `cudarc`): every device view the canary reads in a vLLM-style
//! engine's step, made once from the engine's [`PagedStepArrays`] of cudarc memory (and its
//! layer-0 K and V caches) and kept in the engine's struct. The plan inputs, write inputs and
//! tail fingerprints of each step come from it, so an engine meets one name where it would
//! otherwise assemble a block table, a batch, valid lengths, an expected-token table, write
//! inputs and real-KV sources itself (each of which stays available as its own type for an
//! engine that needs only some).

use super::backend::TailKvOnDevice;
use super::device::borrowed::Shared;
use super::device::cudarc_views::CudarcKvSource;
use super::device::gpu::Gpu;
use super::device::plan_inputs::{
    DeviceBatch, DeviceExpectedPool, DeviceExpectedTable, DeviceIndex, DeviceReqToToken,
    DeviceTableCell, DeviceValidLens, PlanInputs,
};
use super::device::stream::Stream;
use crate::capacity::Capacity;
use crate::input::{
    whole_rows, Full, InputAssertOff, InputAssertOn, PagedStepArrays, WriteInputAssert, WriteInputs,
};
use crate::memory::Device;
use crate::real_kv::{PagedShape, RealKvHashMode};
use crate::step::KvPair;
use crate::Error;
use cudarc::driver::DevicePtr;
use std::sync::Arc;

/// The device views of a vLLM-style engine's step arrays, read in place every step: the block
/// table, the batch (context and query lengths, the device `bs`), the valid lengths of the
/// optional expected-token table, the write inputs (the input assert `X` on once the engine's
/// expected ids and positions are added), and optionally the K and V caches the tail verify
/// and sweeps fingerprint. `R` is the batch-row capacity, `E` the
/// write-entry capacity; both must be the canary's shape's.
///
/// Every view keeps its memory alive and reads it where the engine writes it: uploading the
/// step's arrays in place is all an engine does per step. The views borrow nothing, so the
/// engine's struct holds them; dropping them synchronises the memory's context (the
/// [`Shared`] rule).
pub struct PagedStepViews<R: Capacity, E: Capacity, X: WriteInputAssert = InputAssertOff> {
    table: Shared<DeviceReqToToken>,
    batch: Shared<DeviceBatch<R>>,
    valid_lens: Shared<DeviceValidLens<R>>,
    expected: Option<Shared<DeviceExpectedTable>>,
    write: Shared<WriteInputs<E, X, Device>>,
    kv: Option<KvPair<CudarcKvSource<'static>>>,
    /// The device the views were made on (the later builder steps' too).
    gpu: Gpu,
}

impl<R: Capacity, E: Capacity> PagedStepViews<R, E, InputAssertOff> {
    /// The views of `arrays` (each an `Arc` of the engine's cudarc memory: a `CudaSlice`, or a
    /// type implementing `DevicePtr` over a tensor's storage) on `gpu`, for `rows` batch rows
    /// and `tokens` write entries; the `with_*` steps add their views on the same `gpu`.
    ///
    /// The block table has `block_tables.len() / blocks_per_row` rows of `u32` or `i32` cells;
    /// the lengths are `i64`, `i32` or `u32`, read in their type; `bs` is the engine's device
    /// `i32` count of live rows, or `None` (then set it with the batch's `set_len_on` each step;
    /// name its type, `None::<Arc<CudaSlice<i32>>>`). Checked as
    /// [`DeviceReqToToken::block_table_from_cudarc_shared`],
    /// [`DeviceBatch::from_cudarc_query_lens_shared`] and [`WriteInputs::from_cudarc_shared`]
    /// check them (lengths at least the capacities); a block table whose length is not a
    /// multiple of `blocks_per_row` is [`Error::LengthMismatch`].
    #[allow(clippy::type_complexity)]
    pub fn from_cudarc<T, L, I, P, M, ST, SL, SB, SI, SP, SM>(
        gpu: &Gpu,
        rows: R,
        tokens: E,
        arrays: PagedStepArrays<Arc<ST>, Arc<SL>, Option<Arc<SB>>, Arc<SI>, Arc<SP>, Arc<SM>>,
    ) -> Result<Self, Error>
    where
        T: DeviceTableCell,
        L: DeviceIndex,
        I: DeviceIndex,
        P: DeviceIndex,
        M: DeviceIndex,
        ST: DevicePtr<T> + Send + Sync + 'static,
        SL: DevicePtr<L> + Send + Sync + 'static,
        SB: DevicePtr<i32> + Send + Sync + 'static,
        SI: DevicePtr<I> + Send + Sync + 'static,
        SP: DevicePtr<P> + Send + Sync + 'static,
        SM: DevicePtr<M> + Send + Sync + 'static,
    {
        let PagedStepArrays {
            block_tables,
            blocks_per_row,
            block_size,
            context_lens,
            query_lens,
            bs,
            input_ids,
            positions,
            slot_mapping,
        } = arrays;
        let table_rows = whole_rows(
            "block_tables",
            "blocks_per_row",
            block_tables.len(),
            blocks_per_row,
        )?;
        Ok(PagedStepViews {
            table: DeviceReqToToken::block_table_from_cudarc_shared::<T, ST>(
                gpu,
                block_tables,
                table_rows,
                blocks_per_row,
                block_size,
            )?,
            batch: DeviceBatch::from_cudarc_query_lens_shared::<L, L, SL, SL, SB>(
                gpu,
                rows,
                Arc::clone(&context_lens),
                query_lens,
                bs.clone(),
            )?,
            valid_lens: DeviceValidLens::from_cudarc_shared::<L, SL, SB>(
                gpu,
                rows,
                context_lens,
                bs,
            )?,
            expected: None,
            kv: None,
            gpu: gpu.clone(),
            write: WriteInputs::from_cudarc_shared::<I, P, M, SI, SP, SM>(
                gpu,
                tokens,
                input_ids,
                positions,
                slot_mapping,
            )?,
        })
    }

    /// Turns the write op's input assert on over the engine's expected token ids and positions
    /// of each write entry (`i64`, `i32` or `u32` each; at least `tokens` long): a written
    /// token or position that differs is a write violation (`INPUT_ASSERT`).
    pub fn with_expected_inputs<I, P, SI, SP>(
        self,
        expected_ids: Arc<SI>,
        expected_positions: Arc<SP>,
    ) -> Result<PagedStepViews<R, E, InputAssertOn>, Error>
    where
        I: DeviceIndex,
        P: DeviceIndex,
        SI: DevicePtr<I> + Send + Sync + 'static,
        SP: DevicePtr<P> + Send + Sync + 'static,
    {
        Ok(PagedStepViews {
            write: self.write.with_expected_cudarc::<I, P, SI, SP>(
                &self.gpu,
                expected_ids,
                expected_positions,
            )?,
            table: self.table,
            batch: self.batch,
            valid_lens: self.valid_lens,
            expected: self.expected,
            kv: self.kv,
            gpu: self.gpu,
        })
    }
}

impl<R: Capacity, E: Capacity, X: WriteInputAssert> PagedStepViews<R, E, X> {
    /// Adds the expected-token check: `token_table` holds each batch row's token ids by
    /// position (`[rows, max_context]`, `u32` or `i32`), valid up to the row's context length
    /// (so this step's tokens are in it before the step is planned). Every verified entry's
    /// canary token is compared with it (a stale or swapped token is a verify violation).
    pub fn with_expected_tokens<T, S>(
        self,
        token_table: Arc<S>,
        max_context: usize,
    ) -> Result<Self, Error>
    where
        T: DeviceTableCell,
        S: DevicePtr<T> + Send + Sync + 'static,
    {
        let rows = whole_rows("token_table", "max_context", token_table.len(), max_context)?;
        let table = DeviceExpectedTable::from_cudarc_shared::<T, S>(
            &self.gpu,
            token_table,
            rows,
            max_context,
        )?;
        Ok(PagedStepViews {
            expected: Some(table),
            ..self
        })
    }

    /// Adds the K and V caches of the layer the canary fingerprints: `num_blocks` blocks of
    /// `shape` in vLLM's layouts, in the engine's cudarc memory (any element type: a bf16
    /// cache is read as its bytes), every byte of a token read. Checked as
    /// [`KvPair::vllm_paged_cudarc`] checks them.
    pub fn with_kv_cache<T, S>(
        self,
        k: Arc<S>,
        v: Arc<S>,
        num_blocks: usize,
        shape: PagedShape,
    ) -> Result<Self, Error>
    where
        S: DevicePtr<T> + Send + Sync + 'static,
    {
        let kv = KvPair::vllm_paged_cudarc::<T, S>(&self.gpu, k, v, num_blocks, shape)?;
        Ok(PagedStepViews {
            kv: Some(kv),
            ..self
        })
    }

    /// The tail fingerprints of the K and V caches under `mode` (a step's `verify_tail` or a
    /// sweep's), or [`TailKvOnDevice::NONE`] when no cache was added.
    pub fn fingerprints(&self, mode: RealKvHashMode) -> TailKvOnDevice<'_> {
        match &self.kv {
            Some(kv) => kv.fingerprints(mode),
            None => TailKvOnDevice::NONE,
        }
    }

    /// The step's plan inputs (FULL group, offset 0), with the expected-token table when one
    /// was added: what [`Canary::plan`](crate::step::Canary::plan) takes.
    pub fn plan_inputs(&self) -> PlanInputs<'_, R, Full, Option<DeviceExpectedPool<'_, R>>> {
        let expected = self
            .expected
            .as_deref()
            .map(|table| table.with_valid_lens(&self.valid_lens));
        PlanInputs::full(&self.batch, &self.table).with_expected(expected)
    }

    /// The step's write inputs: what the planned stage's `write` takes.
    pub fn write_inputs(&self) -> &WriteInputs<E, X, Device> {
        &self.write
    }

    /// The block table's view (to upload rows on a stream, or read its geometry).
    pub fn table(&self) -> &DeviceReqToToken {
        &self.table
    }

    /// Sets the step's live rows on `stream` (the batch's and the valid lengths' count), for an
    /// engine that keeps no device `bs` ([`from_cudarc`](PagedStepViews::from_cudarc) with
    /// `None`); with a device count the engine updates its own memory instead. Queued, no
    /// wait. A count over `R` is [`Error::BatchExceedsWriteCapacity`], nothing queued.
    pub fn set_len_on(&self, stream: &Stream, bs: usize) -> Result<(), Error> {
        self.batch.set_len_on(stream, bs)?;
        self.valid_lens.set_len_on(stream, bs)
    }
}
