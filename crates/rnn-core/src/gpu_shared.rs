//! What the GPU backends (CUDA and wgpu) do the same way, written once over `GpuStorage`:
//! the op table forwarding of `BackendStorage`, contiguous copies and `cat`, the layouts of
//! reductions and `index_select`, and binding tensors to user kernels.

use crate::storage::{BackendStorage, Storage};
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// A GPU backend's storage: a buffer on one device.
pub(crate) trait GpuStorage: BackendStorage + Clone {
    /// The number of elements.
    fn elem_len(&self) -> usize;
    /// An uninitialized storage of `len` elements of `dtype` on the same device.
    fn alloc_same_device(&self, dtype: DType, len: usize) -> Result<Self>;
    /// Writes `self` seen through `l`, converted to `out`'s dtype, into `out` seen through
    /// `ol` (same shape).
    fn copy_to(&self, l: &Layout, out: &Self, ol: &Layout) -> Result<()>;
    /// This backend's storage inside a `Storage`, if it is one.
    fn of(s: &Storage) -> Option<&Self>;
}

/// `GpuStorage` for a backend's storage type `$s`, held in `Storage::$variant`, with an
/// inherent `len`, `alloc_like` and its module's `elementwise::copy_into`.
macro_rules! impl_gpu_storage {
    ($s:ident, $variant:ident) => {
        impl $crate::gpu_shared::GpuStorage for $s {
            fn elem_len(&self) -> usize {
                self.len()
            }
            fn alloc_same_device(&self, dtype: DType, len: usize) -> Result<Self> {
                self.alloc_like(dtype, len)
            }
            fn copy_to(&self, l: &Layout, out: &Self, ol: &Layout) -> Result<()> {
                elementwise::copy_into(self, l, out, ol)
            }
            fn of(s: &Storage) -> Option<&Self> {
                match s {
                    Storage::$variant(s) => Some(s),
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use impl_gpu_storage;

/// The `BackendStorage` methods a GPU backend implements with its modules `elementwise`,
/// `reduce`, `matmul`, `index` and `window`, each function named as the method.
macro_rules! forward_gpu_ops {
    () => {
        fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
            elementwise::unary(self, l, op)
        }
        fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
            elementwise::binary(self, l, rhs, rl, op)
        }
        fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
            elementwise::cmp(self, l, rhs, rl, op)
        }
        fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
            elementwise::where_cond(self, l, t, tl, f, fl)
        }
        fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Self> {
            reduce::reduce(self, l, op, dims)
        }
        fn softmax_last_dim(&self, l: &Layout, log: bool) -> Result<Self> {
            reduce::softmax_last_dim(self, l, log)
        }
        fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
            matmul::matmul(self, l, rhs, rl)
        }
        fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
            $crate::gpu_shared::copy(self, l, dtype)
        }
        fn copy_strided(&self, l: &Layout) -> Result<Self> {
            $crate::gpu_shared::copy(self, l, self.dtype())
        }
        fn cat(parts: &[(&Self, &Layout)], dim: usize) -> Result<Self> {
            $crate::gpu_shared::cat(parts, dim)
        }
        fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
            index::index_select(self, l, ids, il, dim)
        }
        fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
            index::gather(self, l, ids, il, dim)
        }
        fn scatter_add(
            &self,
            l: &Layout,
            ids: &Self,
            il: &Layout,
            src: &Self,
            sl: &Layout,
            dim: usize,
        ) -> Result<Self> {
            index::scatter_add(self, l, ids, il, src, sl, dim)
        }
        fn unfold2d(&self, l: &Layout, w: &Window2d, pad_value: f64) -> Result<Self> {
            window::unfold2d(self, l, w, pad_value)
        }
        fn fold2d(&self, l: &Layout, out_hw: (usize, usize), w: &Window2d) -> Result<Self> {
            window::fold2d(self, l, out_hw, w)
        }
    };
}
pub(crate) use forward_gpu_ops;

/// A contiguous copy of `src` seen through `l`, converted to `dtype`.
pub(crate) fn copy<S: GpuStorage>(src: &S, l: &Layout, dtype: DType) -> Result<S> {
    let out = src.alloc_same_device(dtype, l.shape().elem_count())?;
    src.copy_to(l, &out, &Layout::contiguous(l.shape().clone()))?;
    Ok(out)
}

/// The parts laid side by side along `dim` (same dtype, same other dims).
pub(crate) fn cat<S: GpuStorage>(parts: &[(&S, &Layout)], dim: usize) -> Result<S> {
    let (first, fl) = parts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
    let mut dims = fl.dims().to_vec();
    dims[dim] = parts.iter().map(|(_, l)| l.dims()[dim]).sum();
    let out_layout = Layout::contiguous(dims);
    let out = first.alloc_same_device(first.dtype(), out_layout.shape().elem_count())?;
    let mut offset = 0;
    for (s, l) in parts {
        if s.dtype() != first.dtype() {
            return Err(Error::DTypeMismatch { op: "cat", lhs: first.dtype(), rhs: s.dtype() });
        }
        let len = l.dims()[dim];
        s.copy_to(l, &out, &out_layout.narrow(dim, offset, len)?)?;
        offset += len;
    }
    Ok(out)
}

/// (dims, strides) with size-1 dims dropped and each dim merged into the one before it when
/// the two step through storage as one dim (row-major order is kept).
fn merge_dims(dims_strides: impl Iterator<Item = (usize, usize)>) -> (Vec<usize>, Vec<usize>) {
    let (mut dims, mut strides) = (Vec::new(), Vec::<usize>::new());
    for (d, s) in dims_strides.filter(|&(d, _)| d != 1) {
        match (dims.last_mut(), strides.last_mut()) {
            (Some(pd), Some(ps)) if *ps == d * s => {
                *pd *= d;
                *ps = s;
            }
            _ => {
                dims.push(d);
                strides.push(s);
            }
        }
    }
    (dims, strides)
}

/// The (dims, strides) of the dims of `l` not in `dims`, then of `dims` (sorted), each
/// merged by `merge_dims`.
pub(crate) type DimsStrides = (Vec<usize>, Vec<usize>);
pub(crate) fn kept_and_reduced(l: &Layout, dims: &[usize]) -> (DimsStrides, DimsStrides) {
    let kept: Vec<usize> = (0..l.dims().len()).filter(|d| !dims.contains(d)).collect();
    let part = |ds: &[usize]| merge_dims(ds.iter().map(|&d| (l.dims()[d], l.strides()[d])));
    (part(&kept), part(dims))
}

/// How `index_select` reads its 1-D `ids` (layout `il`): broadcast to the output's shape, so
/// that output position (o, j, k) reads ids[j].
pub(crate) fn index_select_ids(l: &Layout, il: &Layout, dim: usize) -> Result<Layout> {
    let (&[m], &[stride]) = (il.dims(), il.strides()) else {
        return Err(Error::invalid("index_select", format!("ids of shape {:?} are not 1-D", il.dims())));
    };
    let mut dims = l.dims().to_vec();
    dims[dim] = m;
    let mut strides = vec![0; dims.len()];
    strides[dim] = stride;
    Ok(Layout::new(dims.into(), strides, il.start_offset()))
}

const USER_KERNEL: &str = "user kernel";

/// The storage a user kernel's tensor argument binds on `device`: the tensor's own for
/// outputs and for inputs that cover their storage from its start, else a contiguous copy.
pub(crate) fn bound_storage<S: GpuStorage>(t: &Tensor, output: bool, device: Device) -> Result<S> {
    let mismatch = |rhs| Error::DeviceMismatch { op: USER_KERNEL, lhs: device, rhs };
    if t.device() != device {
        return Err(mismatch(t.device()));
    }
    let n = t.elem_count();
    if n == 0 {
        return Err(Error::EmptyTensor { op: USER_KERNEL, shape: t.shape().clone() });
    }
    let storage = t.storage();
    let s = S::of(&storage).ok_or_else(|| mismatch(storage.device()))?;
    let whole = t.layout().contiguous_offsets() == Some((0, n));
    if output {
        if !whole || s.elem_len() != n {
            let msg = "an output must be a whole contiguous tensor (e.g. from Tensor::zeros), not a view";
            return Err(Error::invalid(USER_KERNEL, msg));
        }
        if t.op().is_some() {
            let msg = "an output must not be the result of an op recorded for gradients (write a fresh tensor)";
            return Err(Error::invalid(USER_KERNEL, msg));
        }
        return Ok(s.clone());
    }
    if whole {
        return Ok(s.clone());
    }
    copy(s, t.layout(), s.dtype())
}
