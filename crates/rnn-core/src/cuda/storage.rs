//! `CudaStorage`: a tensor's elements in a pooled device buffer, and the primitives the
//! shared GPU layer (`gpu/`) runs programs with: allocation, transfers, launches.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::context::{device, driver_err, CudaDevice};
use super::launch;
use super::pool::{alloc, PooledBuffer};
use crate::cpu::CpuStorage;
use crate::gpu::deferred::Deferred;
use crate::gpu::gemm::GemmLaunch;
use crate::gpu::plan::KernelPlan;
use crate::gpu::target::Target;
use crate::gpu::{GemmBuffers, GemmOutcome, GpuStorage};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};

/// Whether 16-bit attention may run its tensor-core kernels: not with
/// `RNN_CUDA_TENSOR_CORES=0`, which plans as for a GPU before Ampere (the scalar kernels), so
/// that a recent GPU can check the kernels older ones run.
fn tensor_cores_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var("RNN_CUDA_TENSOR_CORES").as_deref() != Ok("0"))
}

#[derive(Clone)]
pub struct CudaStorage {
    buf: Arc<PooledBuffer>,
    len: usize,
    dtype: DType,
    dev: Arc<CudaDevice>,
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaStorage({} x {} on {:?})", self.len, self.dtype, self.dev)
    }
}

impl CudaStorage {
    /// Whether device `cuda:ordinal` can be used, with the reason when it cannot.
    pub fn check_device(ordinal: usize) -> Result<()> {
        device(ordinal).map(|_| ())
    }

    pub(crate) fn alloc_on(dev: &Arc<CudaDevice>, dtype: DType, len: usize) -> Result<CudaStorage> {
        let bytes = (len as u64).checked_mul(dtype.size_in_bytes() as u64).ok_or_else(|| Error::OutOfMemory {
            requested: usize::MAX,
            free: dev.mem_info().0 as usize,
            total: dev.total_memory as usize,
        })?;
        let buf = alloc(dev, bytes)?;
        Ok(CudaStorage { buf: Arc::new(buf), len, dtype, dev: dev.clone() })
    }

    pub(crate) fn dev(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    pub(crate) fn slice(&self) -> &CudaSlice<u8> {
        self.buf.slice()
    }

    pub(crate) fn dtype_size(&self) -> usize {
        self.dtype.size_in_bytes()
    }

    fn byte_len(&self) -> usize {
        self.len * self.dtype.size_in_bytes()
    }
}

impl GpuStorage for CudaStorage {
    fn elem_dtype(&self) -> DType {
        self.dtype
    }
    fn len(&self) -> usize {
        self.len
    }
    fn ordinal(&self) -> usize {
        self.dev.ordinal
    }
    fn device_of(ordinal: usize) -> Device {
        Device::Cuda(ordinal)
    }
    fn target_of(ordinal: usize) -> Result<Target> {
        let target = Target::cuda_on(device(ordinal)?.compute_capability);
        Ok(Target { tensor_cores: target.tensor_cores && tensor_cores_allowed(), ..target })
    }
    fn alloc(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        CudaStorage::alloc_on(&device(ordinal)?, dtype, len)
    }
    fn upload(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let dev = device(ordinal)?;
        let s = CudaStorage::alloc_on(&dev, cpu.dtype(), cpu.len())?;
        let bytes = cpu.as_bytes();
        if !bytes.is_empty() {
            let mut buf = Arc::try_unwrap(s.buf).map_err(|_| Error::Msg("cuda: fresh buffer shared".into()))?;
            let mut view = buf.slice_mut().slice_mut(..bytes.len());
            dev.stream.memcpy_htod(bytes, &mut view).map_err(driver_err(ordinal, "copy to device"))?;
            return Ok(CudaStorage { buf: Arc::new(buf), ..s });
        }
        Ok(s)
    }
    fn download(&self) -> Result<CpuStorage> {
        let mut bytes = vec![0u8; self.byte_len()];
        if !bytes.is_empty() {
            let view = self.slice().slice(..bytes.len());
            self.dev.stream.memcpy_dtoh(&view, &mut bytes).map_err(driver_err(self.dev.ordinal, "copy to host"))?;
        }
        self.dev.synchronize()?;
        Ok(CpuStorage::from_bytes(&bytes, self.dtype))
    }
    fn launch(plan: &KernelPlan, args: &[&Self]) -> Result<()> {
        launch::launch(plan, args)
    }
    fn deferred() -> &'static std::thread::LocalKey<Deferred<Self>> {
        thread_local!(static PENDING: Deferred<CudaStorage> = Deferred::default());
        &PENDING
    }
    fn gemm(g: &GemmLaunch, buffers: GemmBuffers<'_, Self>) -> Result<GemmOutcome> {
        launch::gemm(g, buffers)
    }
    fn of(s: &Storage) -> Option<&Self> {
        match s {
            Storage::Cuda(s) => Some(s),
            _ => None,
        }
    }
    fn device_address(&self) -> Option<u64> {
        Some(launch::address(self, 0))
    }
}
