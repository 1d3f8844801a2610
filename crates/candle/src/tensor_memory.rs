//! [`TensorMemory`]: a candle CUDA tensor's memory as a `cudarc` `DevicePtr`.

use crate::element_run::ElementRun;
use candle_core::cuda_backend::cudarc::driver::{
    sys::CUdeviceptr, CudaStream, DevicePtr, DeviceRepr, DeviceSlice, SyncOnDrop,
};
use candle_core::cuda_backend::CudaDType;
use candle_core::{bail, DType, Result, Storage, Tensor};
use std::marker::PhantomData;
use std::sync::Arc;

/// The memory of a contiguous candle CUDA tensor as `len` elements of `T` (a bf16 KV cache's
/// bytes as `u8`, a `u32` tensor as `i32`, ...): a `cudarc` [`DevicePtr<T>`] that keeps the
/// tensor alive and holds no lock on its storage, so kv-canary's views over it can be made once
/// and kept while the engine writes the tensor in place.
///
/// Uses take no cudarc event: the engine must queue its work on the tensor and the canary's on
/// one stream (candle's own, which kv-canary's `Stream::from_cudarc` wraps), as a candle engine
/// does.
pub struct TensorMemory<T> {
    _tensor: Tensor,
    stream: Arc<CudaStream>,
    ptr: CUdeviceptr,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T> TensorMemory<T> {
    /// The memory of `tensor` as elements of `T`, shared (what kv-canary's views keep alive).
    /// Errors (candle's error, the message naming the values): a tensor that is not
    /// contiguous or not on a CUDA device, a dtype without a CUDA slice here (`u8`, `u32`,
    /// `i16`, `i32`, `i64`, `bf16`, `f16`, `f32`, `f64`), a byte length that is not a whole number of `T`
    /// or a first element not aligned for `T`.
    pub fn shared(tensor: &Tensor) -> Result<Arc<Self>> {
        Ok(Arc::new(Self::new(tensor)?))
    }

    /// The memory of `tensor` as elements of `T` (errors as [`shared`](Self::shared)).
    pub fn new(tensor: &Tensor) -> Result<Self> {
        match tensor.dtype() {
            DType::U8 => Self::of::<u8>(tensor),
            DType::U32 => Self::of::<u32>(tensor),
            DType::I16 => Self::of::<i16>(tensor),
            DType::I32 => Self::of::<i32>(tensor),
            DType::I64 => Self::of::<i64>(tensor),
            DType::BF16 => Self::of::<half::bf16>(tensor),
            DType::F16 => Self::of::<half::f16>(tensor),
            DType::F32 => Self::of::<f32>(tensor),
            DType::F64 => Self::of::<f64>(tensor),
            other => bail!("kv-canary: TensorMemory does not read {other:?} tensors"),
        }
    }

    /// `tensor`'s memory, its elements `E`.
    fn of<E: DeviceRepr + CudaDType>(tensor: &Tensor) -> Result<Self> {
        if !tensor.is_contiguous() {
            bail!(
                "kv-canary: TensorMemory needs a contiguous tensor (shape {:?}, strides {:?})",
                tensor.dims(),
                tensor.stride()
            );
        }
        let (storage, layout) = tensor.storage_and_layout();
        let Storage::Cuda(cuda) = &*storage else {
            bail!(
                "kv-canary: TensorMemory needs a CUDA tensor ({:?})",
                tensor.device()
            )
        };
        let slice = cuda.as_cuda_slice::<E>()?;
        let stream = Arc::clone(slice.stream());
        let (base, in_use) = slice.device_ptr(&stream);
        drop(in_use);
        let run = ElementRun::of::<E, T>(layout.start_offset(), tensor.elem_count())
            .map_err(|e| candle_core::Error::Msg(format!("{e} ({:?} tensor)", tensor.dtype())))?;
        Ok(TensorMemory {
            _tensor: tensor.clone(),
            stream,
            ptr: base + run.offset as u64,
            len: run.len,
            _element: PhantomData,
        })
    }
}

impl<T> DeviceSlice<T> for TensorMemory<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for TensorMemory<T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}
