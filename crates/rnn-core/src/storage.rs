//! `Storage` holds a tensor's elements on one device. Each backend implements
//! `BackendStorage`; the enum dispatches to it with one macro, after checking that every
//! operand lives on the same device.

use crate::backends::{CudaStorage, WgpuStorage};
use crate::cpu::CpuStorage;
use crate::op::{BinaryOp, CmpOp, Epilogue, ReduceOp, UnaryOp};
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
    /// Softmax, or log-softmax when `log`, along the last dim (a fused kernel).
    fn softmax_last_dim(&self, l: &Layout, log: bool) -> Result<Self>;
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

    /// `act(x @ wᵀ + bias)` with `x` (self) `[m, k]`, `w` `[n, k]` and `bias` `[n]`: a
    /// Linear layer's forward, into a contiguous `[m, n]`. The default composes matmul, add
    /// and the activation; a backend with a fused kernel overrides it.
    fn linear(&self, l: &Layout, w: &Self, wl: &Layout, bias: Option<(&Self, &Layout)>, act: Epilogue) -> Result<Self> {
        let y = self.matmul(l, w, &wl.transpose(0, 1)?)?;
        add_bias_act(y, (l.dims()[0], wl.dims()[0]), bias, act)
    }
}

/// `act(y + bias)` for a contiguous `[rows, n]` `y` and a bias of `n` elements, with
/// elementwise ops: the tail of `BackendStorage::linear` where it is not fused.
pub(crate) fn add_bias_act<S: BackendStorage>(
    y: S,
    (rows, n): (usize, usize),
    bias: Option<(&S, &Layout)>,
    act: Epilogue,
) -> Result<S> {
    let out = Layout::contiguous(vec![rows, n]);
    let y = match bias {
        Some((b, bl)) => {
            // Every row reads the same bias vector.
            let rows_of_bias = Layout::new(out.shape().clone(), vec![0, bl.strides()[0]], bl.start_offset());
            y.binary(&out, b, &rows_of_bias, BinaryOp::Add)?
        }
        None => y,
    };
    match act.unary() {
        Some(op) => y.unary(&out, op),
        None => Ok(y),
    }
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
    fn softmax_last_dim(&self, l: &Layout, log: bool) -> Result<Self> {
        CpuStorage::softmax_last_dim(self, l, log)
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
        Ok(match (self, t, f) {
            (Storage::Cpu(c), Storage::Cpu(t), Storage::Cpu(f)) => Storage::Cpu(c.where_cond(l, t, tl, f, fl)?),
            (Storage::Cuda(c), Storage::Cuda(t), Storage::Cuda(f)) => Storage::Cuda(c.where_cond(l, t, tl, f, fl)?),
            (Storage::Wgpu(c), Storage::Wgpu(t), Storage::Wgpu(f)) => Storage::Wgpu(c.where_cond(l, t, tl, f, fl)?),
            (c, t, f) => {
                let other = if c.device() != t.device() { t } else { f };
                return Err(Error::DeviceMismatch { op: "where_cond", lhs: c.device(), rhs: other.device() });
            }
        })
    }

    pub fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Storage> {
        Ok(dispatch!(self, s => s.reduce(l, op, dims)))
    }

    pub fn softmax_last_dim(&self, l: &Layout, log: bool) -> Result<Storage> {
        Ok(dispatch!(self, s => s.softmax_last_dim(l, log)))
    }

    pub fn matmul(&self, l: &Layout, rhs: &Storage, rl: &Layout) -> Result<Storage> {
        Ok(dispatch2!("matmul", self, rhs, |a, b| a.matmul(l, b, rl)))
    }

    pub fn linear(
        &self,
        l: &Layout,
        w: &Storage,
        wl: &Layout,
        bias: Option<(&Storage, &Layout)>,
        act: Epilogue,
    ) -> Result<Storage> {
        let mismatch =
            |other: &Storage| Error::DeviceMismatch { op: "linear", lhs: self.device(), rhs: other.device() };
        // The bias as the same backend's storage as `x`, via `pick`.
        fn typed<'a, T>(
            bias: Option<(&'a Storage, &'a Layout)>,
            pick: fn(&Storage) -> Option<&T>,
            mismatch: impl Fn(&Storage) -> Error,
        ) -> Result<Option<(&'a T, &'a Layout)>> {
            bias.map(|(b, bl)| pick(b).map(|b| (b, bl)).ok_or_else(|| mismatch(b))).transpose()
        }
        Ok(match (self, w) {
            (Storage::Cpu(x), Storage::Cpu(w)) => {
                let b = typed(bias, |s| if let Storage::Cpu(s) = s { Some(s) } else { None }, mismatch)?;
                Storage::Cpu(x.linear(l, w, wl, b, act)?)
            }
            (Storage::Cuda(x), Storage::Cuda(w)) => {
                let b = typed(bias, |s| if let Storage::Cuda(s) = s { Some(s) } else { None }, mismatch)?;
                Storage::Cuda(x.linear(l, w, wl, b, act)?)
            }
            (Storage::Wgpu(x), Storage::Wgpu(w)) => {
                let b = typed(bias, |s| if let Storage::Wgpu(s) = s { Some(s) } else { None }, mismatch)?;
                Storage::Wgpu(x.linear(l, w, wl, b, act)?)
            }
            (_, w) => return Err(mismatch(w)),
        })
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
        Ok(match (self, ids, src) {
            (Storage::Cpu(a), Storage::Cpu(i), Storage::Cpu(s)) => Storage::Cpu(a.scatter_add(l, i, il, s, sl, dim)?),
            (Storage::Cuda(a), Storage::Cuda(i), Storage::Cuda(s)) => {
                Storage::Cuda(a.scatter_add(l, i, il, s, sl, dim)?)
            }
            (Storage::Wgpu(a), Storage::Wgpu(i), Storage::Wgpu(s)) => {
                Storage::Wgpu(a.scatter_add(l, i, il, s, sl, dim)?)
            }
            (a, i, s) => {
                let other = if a.device() != i.device() { i } else { s };
                return Err(Error::DeviceMismatch { op: "scatter_add", lhs: a.device(), rhs: other.device() });
            }
        })
    }

    pub fn cat(parts: &[(&Storage, &Layout)], dim: usize) -> Result<Storage> {
        let device = parts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?.0.device();
        macro_rules! collect {
            ($v:ident) => {{
                let mut typed = Vec::with_capacity(parts.len());
                for (s, l) in parts {
                    match s {
                        Storage::$v(s) => typed.push((s, *l)),
                        s => return Err(Error::DeviceMismatch { op: "cat", lhs: device, rhs: s.device() }),
                    }
                }
                Storage::$v(BackendStorage::cat(&typed, dim)?)
            }};
        }
        Ok(match parts[0].0 {
            Storage::Cpu(_) => collect!(Cpu),
            Storage::Cuda(_) => collect!(Cuda),
            Storage::Wgpu(_) => collect!(Wgpu),
        })
    }
}
