//! `rnn.Tensor` selection ops under PyTorch's names: masked_fill, where, gather,
//! index_select, narrow, expand, and the isnan / isinf / isfinite masks.

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};
use rnn_core::{DType, Tensor};

use crate::numpy_io::tensor_from_py;
use crate::tensor::PyTensor;
use crate::tensor_ops::{operand, tensor_pair};
use crate::tensor_shape::apply;

#[pymethods]
impl PyTensor {
    /// ``value`` where ``mask`` (a u8 / bool mask, broadcast to this shape) is non-zero,
    /// this tensor elsewhere.
    fn masked_fill(&self, py: Python<'_>, mask: &Bound<'_, PyAny>, value: f64) -> PyResult<PyTensor> {
        let mask = tensor_from_py(mask)?;
        apply(py, &self.inner, move |t| t.masked_fill(&mask.to_device(t.device())?, value))
    }

    /// This tensor where ``condition`` (a u8 / bool mask) is non-zero, ``other`` (a Tensor or
    /// a number) elsewhere, all broadcast together (``torch.Tensor.where``); the result's
    /// dtype is promoted as by the arithmetic operators (an integer tensor with 0.5 gives f32).
    #[pyo3(name = "where")]
    fn where_(&self, py: Python<'_>, condition: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        select(py, condition, &self.inner, other, false)
    }

    /// The elements at ``index`` (i64) along ``dim``: ``out[i][j] = self[index[i][j]][j]``
    /// for ``dim=0``; ``index`` has this tensor's rank.
    fn gather(&self, py: Python<'_>, dim: i64, index: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let index = tensor_from_py(index)?;
        apply(py, &self.inner, move |t| t.gather(&index.to_device(t.device())?, dim))
    }

    /// The slices at the positions ``index`` (1-D, i64) along ``dim``.
    fn index_select(&self, py: Python<'_>, dim: i64, index: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let index = tensor_from_py(index)?;
        apply(py, &self.inner, move |t| t.index_select(&index.to_device(t.device())?, dim))
    }

    /// ``length`` elements of ``dim`` from ``start`` (a view).
    fn narrow(&self, py: Python<'_>, dim: i64, start: usize, length: usize) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.narrow(dim, start, length))
    }

    /// A broadcast view at ``sizes`` (``t.expand(3, -1)``; -1 keeps a dim, new dims go in
    /// front), as ``torch.Tensor.expand``.
    #[pyo3(signature = (*sizes))]
    fn expand(&self, py: Python<'_>, sizes: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let sizes: Vec<i64> = match sizes.len() {
            1 if sizes.get_item(0)?.extract::<i64>().is_err() => sizes.get_item(0)?.extract()?,
            _ => sizes.extract()?,
        };
        let shape = expanded_shape(self.inner.dims(), &sizes)?;
        apply(py, &self.inner, move |t| t.broadcast_as(shape))
    }

    /// A u8 mask of the NaN elements (none in an integer tensor).
    fn isnan(&self, py: Python<'_>) -> PyResult<PyTensor> {
        mask(py, &self.inner, |t| t.ne(t))
    }

    /// A u8 mask of the infinite elements.
    fn isinf(&self, py: Python<'_>) -> PyResult<PyTensor> {
        mask(py, &self.inner, |t| t.abs()?.eq_scalar(f64::INFINITY))
    }

    /// A u8 mask of the finite elements (all of an integer tensor).
    fn isfinite(&self, py: Python<'_>) -> PyResult<PyTensor> {
        // x - x is 0 exactly where x is finite (NaN for NaN and the infinities).
        mask(py, &self.inner, |t| t.sub(t)?.eq_scalar(0.0))
    }
}

/// `torch.where(condition, input, other)`: ``input`` where ``condition`` is non-zero,
/// ``other`` elsewhere, broadcast together; either may be a number. The result's dtype is
/// promoted as by the arithmetic operators (f16 with f32 gives f32, an integer tensor with
/// 0.5 gives f32, a number takes the tensor's dtype otherwise).
#[pyfunction]
#[pyo3(name = "where")]
fn where_fn(
    py: Python<'_>,
    condition: &Bound<'_, PyAny>,
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    // A number as `input` takes `other`'s dtype, as a number on the left of an operator.
    let number = |x: &Bound<'_, PyAny>| x.is_instance_of::<PyFloat>() || x.is_instance_of::<PyInt>();
    if let (true, Ok(other)) = (number(input), other.cast::<PyTensor>()) {
        return select(py, condition, &other.borrow().inner, input, true);
    }
    select(py, condition, &tensor_from_py(input)?, other, false)
}

/// `condition ? on_true : other` (`reflected`: `condition ? other : on_true`), the two values
/// promoted to one dtype as by the arithmetic operators, on `on_true`'s device.
fn select(
    py: Python<'_>,
    condition: &Bound<'_, PyAny>,
    on_true: &Tensor,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<PyTensor> {
    let condition = tensor_from_py(condition)?;
    let other = operand(on_true, other)?;
    apply(py, on_true, move |t| {
        let (yes, no) = tensor_pair(t, other, reflected)?;
        let (yes, no) = (yes.to_device(t.device())?, no.to_device(t.device())?);
        condition.to_device(t.device())?.where_cond(&yes, &no)
    })
}

/// A mask op; an integer tensor (never NaN nor infinite) goes through f32, where every one
/// of its values is finite.
fn mask(py: Python<'_>, t: &Tensor, f: fn(&Tensor) -> rnn_core::Result<Tensor>) -> PyResult<PyTensor> {
    apply(py, t, move |t| if t.dtype().is_float() { f(t) } else { f(&t.to_dtype(DType::F32)?) })
}

/// The shape `expand` makes of `dims` with `sizes` (-1 keeps a dim).
fn expanded_shape(dims: &[usize], sizes: &[i64]) -> PyResult<Vec<usize>> {
    if sizes.len() < dims.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "expand: {} sizes for a tensor of rank {}",
            sizes.len(),
            dims.len()
        )));
    }
    let lead = sizes.len() - dims.len();
    sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| match (s, i.checked_sub(lead).map(|j| dims[j])) {
            (-1, Some(d)) => Ok(d),
            (s, _) if s >= 0 => Ok(s as usize),
            (s, _) => Err(pyo3::exceptions::PyValueError::new_err(format!("expand: invalid size {s} at {i}"))),
        })
        .collect()
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(where_fn, m)?)
}
