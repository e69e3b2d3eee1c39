//! `tensor[key]`: basic indexing and slicing, as in numpy and PyTorch.
//!
//! A key is one item or a tuple of items: an int (selects and removes a dim; negative counts
//! from the end), a slice (a view when its step is 1; a positive step > 1 copies the
//! selected rows with `index_select`; negative steps are refused, as in PyTorch), `...`
//! (as many full slices as needed), None (inserts a dim of size 1), or a 1-D sequence or
//! Tensor of integer positions (`index_select` along that dim). All are differentiable.

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PySlice, PySliceMethods, PyTuple};
use rnn_core::{Device, Tensor};

use crate::errors::run_op;
use crate::tensor::{tensor_from_py, PyTensor};

/// One item of a key, resolved against the dim it applies to.
enum Item {
    /// Keep `len` entries from `start`, every `step`-th.
    Range { start: usize, len: usize, step: usize },
    /// Select entry `index` and drop the dim.
    Index(usize),
    /// Insert a dim of size 1.
    NewAxis,
    /// Select these positions (a 1-D integer tensor).
    Positions(Tensor),
}

/// The items of `key`, with `...` expanded against `dims`.
fn parse_key(key: &Bound<'_, PyAny>, dims: &[usize]) -> PyResult<Vec<Item>> {
    let parts: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(tuple) => tuple.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let consuming = parts.iter().filter(|p| !p.is_none() && !p.is_instance_of::<PyEllipsis>()).count();
    if consuming > dims.len() {
        let msg = format!("too many indices: {consuming} for a tensor of {} dims", dims.len());
        return Err(PyIndexError::new_err(msg));
    }
    let mut items = Vec::new();
    let mut dim = 0;
    for part in &parts {
        if part.is_instance_of::<PyEllipsis>() {
            let skipped = dims.len() - consuming;
            items.extend((dim..dim + skipped).map(|d| Item::Range { start: 0, len: dims[d], step: 1 }));
            dim += skipped;
            continue;
        }
        let item = parse_item(part, dims.get(dim).copied(), dim)?;
        if !matches!(item, Item::NewAxis) {
            dim += 1;
        }
        items.push(item);
    }
    Ok(items)
}

/// One key item; `size` is the size of the dim it applies to (None past the last dim).
fn parse_item(part: &Bound<'_, PyAny>, size: Option<usize>, dim: usize) -> PyResult<Item> {
    if part.is_none() {
        return Ok(Item::NewAxis);
    }
    let size = size.ok_or_else(|| PyIndexError::new_err("too many indices for the tensor"))?;
    if let Ok(slice) = part.cast::<PySlice>() {
        let ind = slice.indices(size as isize)?;
        if ind.step <= 0 {
            return Err(PyValueError::new_err("slice step must be positive (negative steps are not supported)"));
        }
        return Ok(Item::Range { start: ind.start as usize, len: ind.slicelength, step: ind.step as usize });
    }
    if let Ok(index) = part.extract::<i64>() {
        let resolved = if index < 0 { index + size as i64 } else { index };
        if resolved < 0 || resolved >= size as i64 {
            let msg = format!("index {index} is out of range for dim {dim} of size {size}");
            return Err(PyIndexError::new_err(msg));
        }
        return Ok(Item::Index(resolved as usize));
    }
    let positions = tensor_from_py(part)
        .map_err(|_| PyTypeError::new_err("indices must be ints, slices, ..., None or integer sequences"))?;
    if !positions.dtype().is_int() || positions.rank() != 1 {
        return Err(PyTypeError::new_err("an index tensor must be a 1-D integer tensor"));
    }
    Ok(Item::Positions(positions))
}

/// Applies the items in order; `dim` tracks the dim of the result the next item acts on.
fn apply_items(t: &Tensor, items: Vec<Item>) -> rnn_core::Result<Tensor> {
    let mut out = t.clone();
    let mut dim = 0;
    for item in items {
        match item {
            Item::NewAxis => {
                out = out.unsqueeze(dim)?;
                dim += 1;
            }
            Item::Index(i) => out = out.narrow(dim, i, 1)?.squeeze(dim)?,
            Item::Range { start, len, step: 1 } => {
                out = out.narrow(dim, start, len)?;
                dim += 1;
            }
            Item::Range { start, len, step } => {
                let ids: Vec<i64> = (0..len).map(|k| (start + k * step) as i64).collect();
                out = out.index_select(&Tensor::from_vec(ids, len, Device::Cpu)?.to_device(out.device())?, dim)?;
                dim += 1;
            }
            Item::Positions(ids) => {
                out = out.index_select(&ids.to_device(out.device())?, dim)?;
                dim += 1;
            }
        }
    }
    Ok(out)
}

#[pymethods]
impl PyTensor {
    /// Indexing and slicing: ``t[0]``, ``t[1:3]``, ``t[::2]``, ``t[..., -1]``,
    /// ``t[:, None]``, ``t[[0, 2]]``. Int and step-1 slices give views; see the module
    /// documentation of ``rnn.Tensor`` for the full rules. IndexError when out of range.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let items = parse_key(key, self.inner.dims())?;
        let t = &self.inner;
        Ok(PyTensor::new(run_op(py, &[t], move || apply_items(t, items))?))
    }
}
