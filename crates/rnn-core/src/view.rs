//! Movement ops. Views (reshape of contiguous data, transpose, permute, narrow, squeeze,
//! unsqueeze, broadcast) copy nothing: they make a new layout over the same storage.

use crate::backprop::Op;
use crate::storage::Storage;
use crate::{DType, Device, Dim, Error, Layout, Result, Shape, Tensor};

impl Tensor {
    /// The same elements in a new shape; copies first only when the layout is not contiguous.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let expected = shape.checked_elem_count("reshape")?;
        if expected != self.elem_count() {
            return Err(Error::ElementCountMismatch { op: "reshape", expected, got: self.elem_count(), shape });
        }
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        match self.layout().reshape(shape.clone()) {
            Some(layout) => Ok(self.view(layout, Some(Op::Reshape(self.clone())))),
            None => self.contiguous()?.reshape(shape),
        }
    }

    /// Merges dims `start..=end` into one.
    pub fn flatten(&self, start: impl Dim, end: impl Dim) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(1);
        }
        let (s, e) = (start.to_index(self.shape(), "flatten")?, end.to_index(self.shape(), "flatten")?);
        if s > e {
            return Err(Error::invalid("flatten", format!("start dim {s} is after end dim {e}")));
        }
        let d = self.dims();
        let mut dims = d[..s].to_vec();
        dims.push(d[s..=e].iter().product());
        dims.extend_from_slice(&d[e + 1..]);
        self.reshape(dims)
    }

    pub fn flatten_all(&self) -> Result<Tensor> {
        self.reshape(self.elem_count())
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let layout = self.layout().permute(perm)?;
        Ok(self.view(layout, Some(Op::Permute(self.clone(), perm.to_vec()))))
    }

    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Tensor> {
        let (a, b) = (d0.to_index(self.shape(), "transpose")?, d1.to_index(self.shape(), "transpose")?);
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Swaps the last two dims.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::RankMismatch { op: "t", expected: 2, got: self.rank(), shape: self.shape().clone() });
        }
        self.transpose(-2, -1)
    }

    /// `len` elements of `dim` from `start`.
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "narrow")?;
        let layout = self.layout().narrow(d, start, len)?;
        if len == self.dims()[d] {
            return Ok(self.clone());
        }
        Ok(self.view(layout, Some(Op::Narrow(self.clone(), d, start))))
    }

    /// Removes `dim`, which must have size 1.
    pub fn squeeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "squeeze")?;
        if self.dims()[d] != 1 {
            return Err(Error::invalid(
                "squeeze",
                format!("dim {d} of shape {:?} has size {}, not 1", self.shape(), self.dims()[d]),
            ));
        }
        let mut dims = self.dims().to_vec();
        dims.remove(d);
        self.strided_view(dims, |strides| {
            strides.remove(d);
        })
    }

    /// Inserts a dim of size 1 at `dim` (which may equal the rank).
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = dim.to_index_plus_one(self.shape(), "unsqueeze")?;
        let mut dims = self.dims().to_vec();
        dims.insert(d, 1);
        self.strided_view(dims, |strides| strides.insert(d, 0))
    }

    /// A reshape that only adds or removes size-1 dims: keeps the strides of the others.
    fn strided_view(&self, dims: Vec<usize>, edit: impl FnOnce(&mut Vec<usize>)) -> Result<Tensor> {
        let mut strides = self.layout().strides().to_vec();
        edit(&mut strides);
        let layout = Layout::new(dims.into(), strides, self.layout().start_offset());
        Ok(self.view(layout, Some(Op::Reshape(self.clone()))))
    }

    /// Stretches size-1 dims (and adds leading dims) to `shape` without copying.
    pub fn broadcast_as(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        shape.checked_elem_count("broadcast_as")?;
        let layout = self.layout().broadcast_as(&shape)?;
        Ok(self.view(layout, Some(Op::Broadcast(self.clone()))))
    }

    /// A contiguous tensor with the same elements (itself when already contiguous).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let storage = self.storage().copy_strided(self.layout())?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), Some(Op::Copy(self.clone()))))
    }

    /// A detached copy with its own storage: later `assign`s to either tensor do not affect
    /// the other (a snapshot, e.g. of the best weights during training).
    pub fn deep_copy(&self) -> Result<Tensor> {
        let storage = self.storage().copy_strided(self.layout())?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), None))
    }

    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let storage = self.storage().to_dtype(self.layout(), dtype)?;
        let op = dtype.is_float().then(|| Op::ToDType(self.clone()));
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), op))
    }

    /// A copy on `device` (itself when already there); gradients flow back across.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let cpu = self.storage().to_cpu()?.copy_strided(self.layout())?;
        let storage = Storage::from_cpu(cpu, device)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), Some(Op::Copy(self.clone()))))
    }

    /// Joins tensors along `dim`; their other dims, dtypes and devices must agree (inside an
    /// autocast region, mixed float dtypes are promoted to the widest first).
    pub fn cat(tensors: &[Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
        let d = dim.to_index(first.shape(), "cat")?;
        if crate::autocast::is_active() && tensors.iter().any(|t| t.dtype() != first.dtype()) {
            // Inside an autocast region mixed float dtypes are promoted, as PyTorch does.
            let refs: Vec<&Tensor> = tensors.iter().collect();
            return crate::autocast::autocast_op(crate::AutocastOp::Elementwise, &refs, |t| Tensor::cat(t, d));
        }
        for t in &tensors[1..] {
            check_cat_compatible(first, t, d)?;
        }
        if tensors.len() == 1 {
            return Ok(first.clone());
        }
        let guards: Vec<_> = tensors.iter().map(|t| t.storage()).collect();
        let parts: Vec<(&Storage, &Layout)> = guards.iter().zip(tensors).map(|(g, t)| (&**g, t.layout())).collect();
        let storage = Storage::cat(&parts, d)?;
        let mut dims = first.dims().to_vec();
        dims[d] = tensors.iter().map(|t| t.dims()[d]).sum();
        Ok(Tensor::from_parts(storage, Layout::contiguous(dims), Some(Op::Cat(tensors.to_vec(), d))))
    }

    /// Joins tensors of one shape along a new dim.
    pub fn stack(tensors: &[Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("stack", "no tensors given"))?;
        let d = dim.to_index_plus_one(first.shape(), "stack")?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch { op: "stack", lhs: first.shape().clone(), rhs: t.shape().clone() });
            }
        }
        let parts = tensors.iter().map(|t| t.unsqueeze(d)).collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, d)
    }
}

fn check_cat_compatible(first: &Tensor, t: &Tensor, d: usize) -> Result<()> {
    if t.dtype() != first.dtype() {
        return Err(Error::DTypeMismatch { op: "cat", lhs: first.dtype(), rhs: t.dtype() });
    }
    if t.device() != first.device() {
        return Err(Error::DeviceMismatch { op: "cat", lhs: first.device(), rhs: t.device() });
    }
    let same_rank = t.rank() == first.rank();
    if !same_rank || t.dims().iter().zip(first.dims()).enumerate().any(|(i, (a, b))| i != d && a != b) {
        return Err(Error::ShapeMismatch { op: "cat", lhs: first.shape().clone(), rhs: t.shape().clone() });
    }
    Ok(())
}
