//! `Tensor`: a cheap-to-clone handle on shared storage seen through a layout, which
//! remembers the op that produced it when gradients are being tracked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::backprop::{grad_enabled, Op};
use crate::storage::Storage;
use crate::{DType, Device, Error, Layout, Result, Shape, WithDType};

/// Unique id of a tensor node (a view gets a new id; it shares storage, not identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(usize);

impl TensorId {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(1);
        TensorId(COUNTER.fetch_add(1, Ordering::Relaxed))
    }
}

pub(crate) struct TensorInner {
    id: TensorId,
    storage: Arc<RwLock<Storage>>,
    layout: Layout,
    op: Option<Op>,
    is_variable: bool,
    dtype: DType,
    device: Device,
}

/// Takes a dropped graph apart with an explicit stack. The default drop would recurse once
/// per op (this node's op drops its inputs, whose ops drop theirs, ...), and a chain of a
/// million ops would overflow the thread's stack; `backward` is iterative for the same reason.
impl Drop for TensorInner {
    fn drop(&mut self) {
        let Some(op) = self.op.take() else { return };
        let mut stack = Vec::new();
        op.into_tensors(&mut stack);
        while let Some(tensor) = stack.pop() {
            // The last handle on a node: empty its op here, so that dropping the node itself
            // recurses no further. A node still referenced elsewhere stays whole.
            if let Some(mut inner) = Arc::into_inner(tensor.0) {
                if let Some(op) = inner.op.take() {
                    op.into_tensors(&mut stack);
                }
            }
        }
    }
}

#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

impl Tensor {
    /// Wraps a result; the op is kept only when gradients are on and an input tracks them.
    pub(crate) fn from_parts(storage: Storage, layout: Layout, op: Option<Op>) -> Tensor {
        let op = op.filter(|op| grad_enabled() && op.inputs().iter().any(|t| t.tracks_grad()));
        Self::with_storage(Arc::new(RwLock::new(storage)), layout, op, false)
    }

    fn with_storage(storage: Arc<RwLock<Storage>>, layout: Layout, op: Option<Op>, is_variable: bool) -> Tensor {
        let (dtype, device) = {
            let s = storage.read().unwrap_or_else(|e| e.into_inner());
            (s.dtype(), s.device())
        };
        Tensor(Arc::new(TensorInner { id: TensorId::new(), storage, layout, op, is_variable, dtype, device }))
    }

    /// A view: the same storage with another layout.
    pub(crate) fn view(&self, layout: Layout, op: Option<Op>) -> Tensor {
        let op = op.filter(|op| grad_enabled() && op.inputs().iter().any(|t| t.tracks_grad()));
        Self::with_storage(self.0.storage.clone(), layout, op, false)
    }

    pub(crate) fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        self.0.storage.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn storage_mut(&self) -> RwLockWriteGuard<'_, Storage> {
        self.0.storage.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Names this tensor's storage: equal for tensors that share it (`same_storage`).
    pub(crate) fn storage_key(&self) -> usize {
        Arc::as_ptr(&self.0.storage) as *const () as usize
    }

    pub fn id(&self) -> TensorId {
        self.0.id
    }
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    pub fn shape(&self) -> &Shape {
        self.0.layout.shape()
    }
    pub fn dims(&self) -> &[usize] {
        self.0.layout.dims()
    }
    pub fn rank(&self) -> usize {
        self.dims().len()
    }
    pub fn elem_count(&self) -> usize {
        self.shape().elem_count()
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn device(&self) -> Device {
        self.0.device
    }
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }
    pub(crate) fn op(&self) -> Option<&Op> {
        self.0.op.as_ref()
    }
    /// Whether this tensor is a leaf that receives gradients.
    pub fn is_variable(&self) -> bool {
        self.0.is_variable
    }
    /// Whether gradients flow through this tensor (a variable or computed from one).
    pub fn tracks_grad(&self) -> bool {
        self.0.is_variable || self.0.op.is_some()
    }

    /// The same data as a leaf that receives gradients (`requires_grad_` in PyTorch).
    pub fn requires_grad(&self) -> Tensor {
        Self::with_storage(self.0.storage.clone(), self.0.layout.clone(), None, true)
    }

    /// The same data, cut off from the graph: no gradient flows through the result.
    pub fn detach(&self) -> Tensor {
        Self::with_storage(self.0.storage.clone(), self.0.layout.clone(), None, false)
    }

    /// Whether two tensors share storage (a view and its source do).
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// Overwrites this tensor's elements with `src`'s, in place (the optimizer update).
    /// Every tensor sharing the storage sees the change; no gradient is recorded.
    pub fn assign(&self, src: &Tensor) -> Result<()> {
        if src.shape() != self.shape() {
            return Err(Error::ShapeMismatch { op: "assign", lhs: self.shape().clone(), rhs: src.shape().clone() });
        }
        if src.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch { op: "assign", lhs: self.dtype(), rhs: src.dtype() });
        }
        if src.device() != self.device() {
            return Err(Error::DeviceMismatch { op: "assign", lhs: self.device(), rhs: src.device() });
        }
        let n = self.elem_count();
        let whole =
            self.layout().contiguous_offsets() == Some((0, n)) && self.storage().cpu_len().is_none_or(|len| len == n);
        if !whole {
            return Err(Error::invalid("assign", "the destination must be a whole contiguous tensor, not a view"));
        }
        let new = src.storage().copy_strided(src.layout())?;
        *self.storage_mut() = new;
        Ok(())
    }

    // ---- creation ----

    pub fn from_vec<T: WithDType>(data: Vec<T>, shape: impl Into<Shape>, device: Device) -> Result<Tensor> {
        let shape = shape.into();
        let expected = shape.checked_elem_count("from_vec")?;
        if data.len() != expected {
            return Err(Error::ElementCountMismatch { op: "from_vec", expected, got: data.len(), shape });
        }
        let storage = Storage::from_cpu(T::into_storage(data), device)?;
        Ok(Self::from_parts(storage, Layout::contiguous(shape), None))
    }

    pub fn from_slice<T: WithDType>(data: &[T], shape: impl Into<Shape>, device: Device) -> Result<Tensor> {
        Self::from_vec(data.to_vec(), shape, device)
    }

    /// A rank-0 tensor.
    pub fn scalar<T: WithDType>(value: T, device: Device) -> Result<Tensor> {
        Self::from_vec(vec![value], (), device)
    }

    pub fn full(value: f64, shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = shape.into();
        let storage = Storage::full(value, shape.checked_elem_count("full")?, dtype, device)?;
        Ok(Self::from_parts(storage, Layout::contiguous(shape), None))
    }
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(0.0, shape, dtype, device)
    }
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(1.0, shape, dtype, device)
    }
    pub fn zeros_like(&self) -> Result<Tensor> {
        Self::zeros(self.shape(), self.dtype(), self.device())
    }
    pub fn ones_like(&self) -> Result<Tensor> {
        Self::ones(self.shape(), self.dtype(), self.device())
    }
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Self::full(value, self.shape(), self.dtype(), self.device())
    }

    /// `start, start + 1, ..` below `end`.
    pub fn arange<T: WithDType>(start: T, end: T, device: Device) -> Result<Tensor> {
        Self::arange_step(start, end, T::from_f64(1.0), device)
    }

    /// `start, start + step, ..` up to (not including) `end`; `step` may be negative.
    pub fn arange_step<T: WithDType>(start: T, end: T, step: T, device: Device) -> Result<Tensor> {
        let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
        if st == 0.0 || !st.is_finite() || !s.is_finite() || !e.is_finite() {
            return Err(Error::invalid("arange", format!("bad range {start}..{end} step {step}")));
        }
        let n = ((e - s) / st).ceil().max(0.0) as usize; // saturates, then fails to allocate
        let mut data = crate::error::try_vec(n)?;
        data.extend((0..n).map(|i| T::from_f64(s + i as f64 * st)));
        Self::from_vec(data, n, device)
    }

    // ---- reading back ----

    /// The elements in row-major order, on the host.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch { op: "to_vec", lhs: self.dtype(), rhs: T::DTYPE });
        }
        {
            // A CPU tensor is read where it lies: no clone of its whole storage first.
            let storage = self.storage();
            if let Storage::Cpu(cpu) = &*storage {
                return match self.layout().contiguous_offsets() {
                    Some((start, end)) => Ok(cpu.as_slice::<T>()?[start..end].to_vec()),
                    None => Ok(cpu.copy_strided(self.layout())?.as_slice::<T>()?.to_vec()),
                };
            }
        }
        let cpu = self.storage().to_cpu()?;
        let contiguous = cpu.copy_strided(self.layout())?;
        Ok(contiguous.as_slice::<T>()?.to_vec())
    }

    /// Writes `src` over this tensor's elements in place, if no one else can see the change:
    /// a whole contiguous CPU tensor whose storage no other handle or view shares. Returns
    /// `Ok(false)`, touching nothing, otherwise (the caller then makes a new tensor). Used to
    /// put results back into buffers a step owns, instead of allocating new ones every step.
    pub fn write_if_unique<T: WithDType>(&self, src: &[T]) -> Result<bool> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch { op: "write_if_unique", lhs: self.dtype(), rhs: T::DTYPE });
        }
        let n = self.elem_count();
        if src.len() != n {
            let msg = format!("{} values for a tensor of {n} elements", src.len());
            return Err(Error::invalid("write_if_unique", msg));
        }
        if !self.is_sole_owner() {
            return Ok(false);
        }
        let mut storage = self.storage_mut();
        let Storage::Cpu(cpu) = &mut *storage else { return Ok(false) };
        match T::slice_of_mut(cpu) {
            Some(dst) if dst.len() == n => {
                dst.copy_from_slice(src);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The elements as a vector, moved out without a copy, when this handle alone holds a
    /// whole contiguous CPU tensor of type `T` (no other handle or view shares its storage);
    /// otherwise the tensor comes back unchanged. Lets a buffer that became a tensor be
    /// reused once every view of it is gone (data-parallel gradient buckets).
    pub fn try_into_vec<T: WithDType>(self) -> std::result::Result<Vec<T>, Tensor> {
        if self.dtype() != T::DTYPE || !self.is_sole_owner() {
            return Err(self);
        }
        let taken = match &mut *self.storage_mut() {
            Storage::Cpu(cpu) => T::vec_of_mut(cpu).map(std::mem::take),
            _ => None,
        };
        taken.ok_or(self)
    }

    /// Whether no other handle or view can see this tensor's storage, which it covers whole
    /// and contiguously: only then may an op write its result into the tensor's own buffer.
    /// (While this handle is the only one, no other thread can make a new one.)
    pub(crate) fn is_sole_owner(&self) -> bool {
        let alone = Arc::strong_count(&self.0) == 1 && Arc::strong_count(&self.0.storage) == 1;
        let n = self.elem_count();
        alone
            && self.layout().contiguous_offsets() == Some((0, n))
            && self.storage().cpu_len().is_none_or(|len| len == n)
    }

    /// Calls `f` with the elements in row-major order: a contiguous CPU tensor lends its
    /// storage (no copy; the storage is read-locked during `f`), others are copied once.
    pub fn with_host_slice<T: WithDType, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch { op: "with_host_slice", lhs: self.dtype(), rhs: T::DTYPE });
        }
        {
            let storage = self.storage();
            if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, self.layout().contiguous_offsets()) {
                return Ok(f(&cpu.as_slice::<T>()?[start..end]));
            }
        }
        Ok(f(&self.to_vec::<T>()?))
    }

    pub fn to_vec1<T: WithDType>(&self) -> Result<Vec<T>> {
        self.expect_rank("to_vec1", 1)?;
        self.to_vec()
    }

    pub fn to_vec2<T: WithDType>(&self) -> Result<Vec<Vec<T>>> {
        self.expect_rank("to_vec2", 2)?;
        let (rows, cols) = (self.dims()[0], self.dims()[1]);
        let flat = self.to_vec::<T>()?;
        // Indexed rather than chunked, so that rows of length 0 are kept.
        Ok((0..rows).map(|i| flat[i * cols..][..cols].to_vec()).collect())
    }

    pub fn to_vec3<T: WithDType>(&self) -> Result<Vec<Vec<Vec<T>>>> {
        self.expect_rank("to_vec3", 3)?;
        let (d0, d1, d2) = (self.dims()[0], self.dims()[1], self.dims()[2]);
        let flat = self.to_vec::<T>()?;
        let row = |i: usize, j: usize| flat[(i * d1 + j) * d2..][..d2].to_vec();
        Ok((0..d0).map(|i| (0..d1).map(|j| row(i, j)).collect()).collect())
    }

    /// The value of a one-element tensor (any rank).
    /// Every element converted to f64 on the host, whatever the dtype and device (a GPU
    /// backend need not store f64 for this).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        self.detach().to_device(Device::Cpu)?.to_dtype(DType::F64)?.to_vec::<f64>()
    }

    /// The single element, converted to f64 on the host (see `to_f64_vec`).
    pub fn to_f64_scalar(&self) -> Result<f64> {
        match self.to_f64_vec()?.as_slice() {
            [x] => Ok(*x),
            v => Err(Error::invalid(
                "to_f64_scalar",
                format!("tensor of shape {:?} has {} elements, not 1", self.shape(), v.len()),
            )),
        }
    }

    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.elem_count() != 1 {
            return Err(Error::invalid(
                "to_scalar",
                format!("tensor of shape {:?} has {} elements, not 1", self.shape(), self.elem_count()),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    pub(crate) fn expect_rank(&self, op: &'static str, rank: usize) -> Result<()> {
        if self.rank() != rank {
            return Err(Error::RankMismatch { op, expected: rank, got: self.rank(), shape: self.shape().clone() });
        }
        Ok(())
    }
}

impl Storage {
    /// Number of elements, known without a device round trip for CPU storage.
    fn cpu_len(&self) -> Option<usize> {
        match self {
            Storage::Cpu(c) => Some(c.len()),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor[{:?}, {}, {}]", self.shape(), self.dtype(), self.device())
    }
}
