//! `Storage` holds a tensor's elements on one device. Each backend implements
//! `BackendStorage`; the enum dispatches to it with one macro, after checking that every
//! operand lives on the same device.

use crate::backend_stubs::{CudaStorage, WgpuStorage};
use crate::cpu::CpuStorage;
use crate::fused::FusedOp;
use crate::op_table::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::window::Window2d;
use crate::{DType, Device, Error, Layout, Result};

/// What every backend provides. Layouts describe how each operand is seen; binary operands
/// already share one (broadcast) shape. Results are contiguous.
pub trait BackendStorage: Sized {
    fn dtype(&self) -> DType;
    fn device(&self) -> Device;
    fn to_cpu(&self) -> Result<CpuStorage>;
    fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self>;
    fn full(value: f64, n: usize, dtype: DType, ordinal: usize) -> Result<Self>;
    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self>;
    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self>;
    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self>;
    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self>;
    fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Self>;
    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self>;
    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self>;
    fn copy_strided(&self, l: &Layout) -> Result<Self>;
    fn cat(parts: &[(&Self, &Layout)], dim: usize) -> Result<Self>;
    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self>;
    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self>;
    fn scatter_add(&self, l: &Layout, ids: &Self, il: &Layout, src: &Self, sl: &Layout, dim: usize) -> Result<Self>;
    /// `[N, C, H, W]` -> `[N, C, kh * kw, Ho * Wo]`, the windows of `window`; padding reads
    /// `pad_value` (see `Tensor::unfold2d`).
    fn unfold2d(&self, l: &Layout, window: &Window2d, pad_value: f64) -> Result<Self>;
    /// `[N, C, kh * kw, Ho * Wo]` -> `[N, C, H, W]` with `(H, W) = out_hw`: the adjoint of
    /// `unfold2d` (see `Tensor::fold2d`).
    fn fold2d(&self, l: &Layout, out_hw: (usize, usize), window: &Window2d) -> Result<Self>;
    /// A fused op's forward into contiguous results (`fused/`): its output, then the extra
    /// outputs it saves for the backward; `None` where this backend composes it from other ops.
    fn fused(op: &dyn FusedOp, inputs: &[(&Self, &Layout)]) -> Result<Option<Vec<Self>>>;
}

impl BackendStorage for CpuStorage {
    fn dtype(&self) -> DType {
        CpuStorage::dtype(self)
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        Ok(self.clone())
    }
    fn from_cpu(cpu: &CpuStorage, _: usize) -> Result<Self> {
        Ok(cpu.clone())
    }
    fn full(value: f64, n: usize, dtype: DType, _: usize) -> Result<Self> {
        CpuStorage::full(value, n, dtype)
    }
    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        CpuStorage::unary(self, l, op)
    }
    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        CpuStorage::binary(self, l, rhs, rl, op)
    }
    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
        CpuStorage::cmp(self, l, rhs, rl, op)
    }
    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        CpuStorage::where_cond(self, l, t, tl, f, fl)
    }
    fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Self> {
        CpuStorage::reduce(self, l, op, dims)
    }
    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        CpuStorage::matmul(self, l, rhs, rl)
    }
    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        CpuStorage::to_dtype(self, l, dtype)
    }
    fn copy_strided(&self, l: &Layout) -> Result<Self> {
        CpuStorage::copy_strided(self, l)
    }
    fn cat(parts: &[(&Self, &Layout)], dim: usize) -> Result<Self> {
        CpuStorage::cat(parts, dim)
    }
    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        CpuStorage::index_select(self, l, ids, il, dim)
    }
    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        CpuStorage::gather(self, l, ids, il, dim)
    }
    fn scatter_add(&self, l: &Layout, ids: &Self, il: &Layout, src: &Self, sl: &Layout, dim: usize) -> Result<Self> {
        CpuStorage::scatter_add(self, l, ids, il, src, sl, dim)
    }
    fn unfold2d(&self, l: &Layout, window: &Window2d, pad_value: f64) -> Result<Self> {
        CpuStorage::unfold2d(self, l, window, pad_value)
    }
    fn fold2d(&self, l: &Layout, out_hw: (usize, usize), window: &Window2d) -> Result<Self> {
        CpuStorage::fold2d(self, l, out_hw, window)
    }
    fn fused(op: &dyn FusedOp, inputs: &[(&Self, &Layout)]) -> Result<Option<Vec<Self>>> {
        op.cpu(inputs)
    }
}

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
    Wgpu(WgpuStorage),
}

/// Applies `$e` (a `Result` of the same backend's storage) to one storage.
macro_rules! dispatch {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Storage::Cpu($s) => Storage::Cpu($e?),
            Storage::Cuda($s) => Storage::Cuda($e?),
            Storage::Wgpu($s) => Storage::Wgpu($e?),
        }
    };
}

/// Applies `$e` to two storages that must be on the same backend.
macro_rules! dispatch2 {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        match ($a, $b) {
            (Storage::Cpu($x), Storage::Cpu($y)) => Storage::Cpu($e?),
            (Storage::Cuda($x), Storage::Cuda($y)) => Storage::Cuda($e?),
            (Storage::Wgpu($x), Storage::Wgpu($y)) => Storage::Wgpu($e?),
            (a, b) => return Err(Error::DeviceMismatch { op: $op, lhs: a.device(), rhs: b.device() }),
        }
    };
}

/// Applies `$e` to three storages that must be on the same backend.
macro_rules! dispatch3 {
    ($op:expr, $a:expr, $b:expr, $c:expr, |$x:ident, $y:ident, $z:ident| $e:expr) => {
        match ($a, $b, $c) {
            (Storage::Cpu($x), Storage::Cpu($y), Storage::Cpu($z)) => Storage::Cpu($e?),
            (Storage::Cuda($x), Storage::Cuda($y), Storage::Cuda($z)) => Storage::Cuda($e?),
            (Storage::Wgpu($x), Storage::Wgpu($y), Storage::Wgpu($z)) => Storage::Wgpu($e?),
            (a, b, c) => {
                let other = if a.device() != b.device() { b } else { c };
                return Err(Error::DeviceMismatch { op: $op, lhs: a.device(), rhs: other.device() });
            }
        }
    };
}

/// The storages of `parts` as backend `$v`'s (all on one device), with their layouts.
macro_rules! typed_parts {
    ($op:expr, $parts:expr, $v:ident) => {{
        let device = $parts[0].0.device();
        let mut typed = Vec::with_capacity($parts.len());
        for (s, l) in $parts {
            match s {
                Storage::$v(s) => typed.push((s, *l)),
                s => return Err(Error::DeviceMismatch { op: $op, lhs: device, rhs: s.device() }),
            }
        }
        typed
    }};
}

impl Storage {
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(s) => s.device(),
            Storage::Cuda(s) => s.device(),
            Storage::Wgpu(s) => s.device(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => BackendStorage::dtype(s),
            Storage::Cuda(s) => s.dtype(),
            Storage::Wgpu(s) => s.dtype(),
        }
    }

    pub fn from_cpu(cpu: CpuStorage, device: Device) -> Result<Storage> {
        Ok(match device {
            Device::Cpu => Storage::Cpu(cpu),
            Device::Cuda(i) => Storage::Cuda(CudaStorage::from_cpu(&cpu, i)?),
            Device::Wgpu(i) => Storage::Wgpu(WgpuStorage::from_cpu(&cpu, i)?),
        })
    }

    pub fn full(value: f64, n: usize, dtype: DType, device: Device) -> Result<Storage> {
        Ok(match device {
            Device::Cpu => Storage::Cpu(CpuStorage::full(value, n, dtype)?),
            Device::Cuda(i) => Storage::Cuda(CudaStorage::full(value, n, dtype, i)?),
            Device::Wgpu(i) => Storage::Wgpu(WgpuStorage::full(value, n, dtype, i)?),
        })
    }

    pub fn to_cpu(&self) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(s.clone()),
            Storage::Cuda(s) => s.to_cpu(),
            Storage::Wgpu(s) => s.to_cpu(),
        }
    }

    pub fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Storage> {
        Ok(dispatch!(self, s => s.unary(l, op)))
    }

    pub fn binary(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: BinaryOp) -> Result<Storage> {
        Ok(dispatch2!(op.name(), self, rhs, |a, b| a.binary(l, b, rl, op)))
    }

    pub fn cmp(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: CmpOp) -> Result<Storage> {
        Ok(dispatch2!(op.name(), self, rhs, |a, b| a.cmp(l, b, rl, op)))
    }

    pub fn where_cond(&self, l: &Layout, t: &Storage, tl: &Layout, f: &Storage, fl: &Layout) -> Result<Storage> {
        Ok(dispatch3!("where_cond", self, t, f, |c, t, f| c.where_cond(l, t, tl, f, fl)))
    }

    pub fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Storage> {
        Ok(dispatch!(self, s => s.reduce(l, op, dims)))
    }

    pub fn matmul(&self, l: &Layout, rhs: &Storage, rl: &Layout) -> Result<Storage> {
        Ok(dispatch2!("matmul", self, rhs, |a, b| a.matmul(l, b, rl)))
    }

    pub fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        Ok(dispatch!(self, s => s.to_dtype(l, dtype)))
    }

    pub fn copy_strided(&self, l: &Layout) -> Result<Storage> {
        Ok(dispatch!(self, s => s.copy_strided(l)))
    }

    pub fn unfold2d(&self, l: &Layout, window: &Window2d, pad_value: f64) -> Result<Storage> {
        Ok(dispatch!(self, s => s.unfold2d(l, window, pad_value)))
    }

    pub fn fold2d(&self, l: &Layout, out_hw: (usize, usize), window: &Window2d) -> Result<Storage> {
        Ok(dispatch!(self, s => s.fold2d(l, out_hw, window)))
    }

    pub fn index_select(&self, l: &Layout, ids: &Storage, il: &Layout, dim: usize) -> Result<Storage> {
        Ok(dispatch2!("index_select", self, ids, |a, i| a.index_select(l, i, il, dim)))
    }

    pub fn gather(&self, l: &Layout, ids: &Storage, il: &Layout, dim: usize) -> Result<Storage> {
        Ok(dispatch2!("gather", self, ids, |a, i| a.gather(l, i, il, dim)))
    }

    pub fn scatter_add(
        &self,
        l: &Layout,
        ids: &Storage,
        il: &Layout,
        src: &Storage,
        sl: &Layout,
        dim: usize,
    ) -> Result<Storage> {
        Ok(dispatch3!("scatter_add", self, ids, src, |a, i, s| a.scatter_add(l, i, il, s, sl, dim)))
    }

    pub fn cat(parts: &[(&Storage, &Layout)], dim: usize) -> Result<Storage> {
        let first = parts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
        Ok(match first.0 {
            Storage::Cpu(_) => Storage::Cpu(BackendStorage::cat(&typed_parts!("cat", parts, Cpu), dim)?),
            Storage::Cuda(_) => Storage::Cuda(BackendStorage::cat(&typed_parts!("cat", parts, Cuda), dim)?),
            Storage::Wgpu(_) => Storage::Wgpu(BackendStorage::cat(&typed_parts!("cat", parts, Wgpu), dim)?),
        })
    }

    /// A fused op's forward on the inputs' backend: its output, then its saved extra outputs
    /// (`None`: compose it from other ops).
    pub fn fused(op: &dyn FusedOp, parts: &[(&Storage, &Layout)]) -> Result<Option<Vec<Storage>>> {
        let first = parts.first().ok_or_else(|| Error::invalid(op.name(), "no inputs"))?;
        Ok(match first.0 {
            Storage::Cpu(_) => {
                let outs = BackendStorage::fused(op, &typed_parts!(op.name(), parts, Cpu))?;
                outs.map(|v| v.into_iter().map(Storage::Cpu).collect())
            }
            Storage::Cuda(_) => {
                let outs = BackendStorage::fused(op, &typed_parts!(op.name(), parts, Cuda))?;
                outs.map(|v| v.into_iter().map(Storage::Cuda).collect())
            }
            Storage::Wgpu(_) => {
                let outs = BackendStorage::fused(op, &typed_parts!(op.name(), parts, Wgpu))?;
                outs.map(|v| v.into_iter().map(Storage::Wgpu).collect())
            }
        })
    }
}
