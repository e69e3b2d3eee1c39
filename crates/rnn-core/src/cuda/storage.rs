//! `CudaStorage`: a tensor's elements in a pooled device buffer. The ops live in the sibling
//! modules; this file holds the type, transfers and the `BackendStorage` dispatch.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::context::{device, driver_err, CudaDevice};
use super::pool::{alloc, PooledBuffer};
use super::{elementwise, index, matmul, reduce, window};
use crate::cpu::CpuStorage;
use crate::op::{BinaryOp, CmpOp, Epilogue, ReduceOp, UnaryOp};
use crate::storage::{BackendStorage, Storage};
use crate::window::Window2d;
use crate::{DType, Device, Error, Layout, Result};

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

    pub(crate) fn alloc(dev: &Arc<CudaDevice>, dtype: DType, len: usize) -> Result<CudaStorage> {
        let bytes = (len as u64).checked_mul(dtype.size_in_bytes() as u64).ok_or_else(|| Error::OutOfMemory {
            requested: usize::MAX,
            free: dev.mem_info().0 as usize,
            total: dev.total_memory as usize,
        })?;
        let buf = alloc(dev, bytes)?;
        Ok(CudaStorage { buf: Arc::new(buf), len, dtype, dev: dev.clone() })
    }

    /// An uninitialized storage of `len` elements on the same device.
    pub(crate) fn alloc_like(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        CudaStorage::alloc(&self.dev, dtype, len)
    }

    pub(crate) fn dev(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    pub(crate) fn slice(&self) -> &CudaSlice<u8> {
        self.buf.slice()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn byte_len(&self) -> usize {
        self.len * self.dtype.size_in_bytes()
    }
}

/// The bytes of a host tensor.
fn host_bytes(cpu: &CpuStorage) -> &[u8] {
    crate::cpu_each!(cpu, v => bytemuck::cast_slice(v))
}

/// A host tensor of `dtype` from its bytes.
fn host_storage(bytes: &[u8], dtype: DType) -> CpuStorage {
    use bytemuck::pod_collect_to_vec as typed;
    match dtype {
        DType::U8 => CpuStorage::U8(bytes.to_vec()),
        DType::U32 => CpuStorage::U32(typed(bytes)),
        DType::I64 => CpuStorage::I64(typed(bytes)),
        DType::F16 => CpuStorage::F16(typed(bytes)),
        DType::BF16 => CpuStorage::BF16(typed(bytes)),
        DType::F32 => CpuStorage::F32(typed(bytes)),
        DType::F64 => CpuStorage::F64(typed(bytes)),
    }
}

impl BackendStorage for CudaStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn device(&self) -> Device {
        Device::Cuda(self.dev.ordinal)
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        let mut bytes = vec![0u8; self.byte_len()];
        if !bytes.is_empty() {
            let view = self.slice().slice(..bytes.len());
            self.dev.stream.memcpy_dtoh(&view, &mut bytes).map_err(driver_err(self.dev.ordinal, "copy to host"))?;
        }
        self.dev.synchronize()?;
        Ok(host_storage(&bytes, self.dtype))
    }
    fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let dev = device(ordinal)?;
        let s = CudaStorage::alloc(&dev, cpu.dtype(), cpu.len())?;
        let bytes = host_bytes(cpu);
        if !bytes.is_empty() {
            let mut buf = Arc::try_unwrap(s.buf).map_err(|_| Error::Msg("cuda: fresh buffer shared".into()))?;
            let mut view = buf.slice_mut().slice_mut(..bytes.len());
            dev.stream.memcpy_htod(bytes, &mut view).map_err(driver_err(ordinal, "copy to device"))?;
            return Ok(CudaStorage { buf: Arc::new(buf), ..s });
        }
        Ok(s)
    }
    fn full(value: f64, n: usize, dtype: DType, ordinal: usize) -> Result<Self> {
        elementwise::fill(&device(ordinal)?, value, n, dtype)
    }
    crate::gpu_shared::forward_gpu_ops!();
    fn linear(&self, l: &Layout, w: &Self, wl: &Layout, bias: Option<(&Self, &Layout)>, act: Epilogue) -> Result<Self> {
        matmul::linear(self, l, w, wl, bias, act)
    }
}

crate::gpu_shared::impl_gpu_storage!(CudaStorage, Cuda);
