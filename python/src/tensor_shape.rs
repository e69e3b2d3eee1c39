//! `rnn.Tensor` reductions (sum, mean, max, min, amax, amin, argmax, argmin, logsumexp, var,
//! std) and shape ops (reshape, transpose, permute, squeeze, ...). Shape ops are views where
//! the core makes them views.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rnn_core::op_table::BinaryOp;
use rnn_core::{AllDims, Shape, Tensor};

use crate::errors::run_op;
use crate::tensor::PyTensor;

/// Reduction dims from Python: None (every dim), an int, or a sequence of ints.
fn reduce_dims(t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<i64>> {
    match dim {
        None => Ok((0..t.rank() as i64).collect()),
        Some(d) if d.is_none() => Ok((0..t.rank() as i64).collect()),
        Some(d) => match d.extract::<i64>() {
            Ok(one) => Ok(vec![one]),
            Err(_) => d.extract::<Vec<i64>>(),
        },
    }
}

/// The shape from `reshape(2, 3)` or `reshape((2, 3))`, with one `-1` inferred.
fn target_shape(t: &Tensor, args: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    let dims: Vec<i64> = match args.len() {
        1 if args.get_item(0)?.extract::<i64>().is_err() => args.get_item(0)?.extract()?,
        _ => args.extract()?,
    };
    let known: i64 = dims.iter().filter(|&&d| d != -1).product();
    let inferred = dims.iter().filter(|&&d| d == -1).count();
    if inferred > 1 || dims.iter().any(|&d| d < -1) {
        return Err(PyValueError::new_err(format!("reshape: invalid shape {dims:?}")));
    }
    let total = t.elem_count() as i64;
    if inferred == 1 && (known == 0 || total % known != 0) {
        return Err(PyValueError::new_err(format!("reshape: shape {dims:?} is invalid for {total} elements")));
    }
    Ok(dims.iter().map(|&d| if d == -1 { (total / known) as usize } else { d as usize }).collect())
}

/// Runs a core op on `t` and wraps the result.
pub(crate) fn apply(
    py: Python<'_>,
    t: &Tensor,
    f: impl FnOnce(&Tensor) -> rnn_core::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    Ok(PyTensor::new(run_op(py, &[t], move || f(t))?))
}

/// One Python reduction per core reduction pair (`sum` / `sum_keepdim`, ...): `name = plain,
/// keepdim` (PyTorch's `amax` is the core's `max`).
macro_rules! reductions {
    ($($name:ident = $plain:ident, $keep:ident, $doc:literal;)*) => {
        #[pymethods]
        impl PyTensor {$(
            #[doc = $doc]
            #[doc = ""]
            #[doc = "``dim``: None (all dims), an int (negative counts from the end) or a"]
            #[doc = "sequence of ints; ``keepdim=True`` keeps reduced dims with size 1."]
            #[pyo3(signature = (dim = None, keepdim = false))]
            fn $name(&self, py: Python<'_>, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<PyTensor> {
                let dims = reduce_dims(&self.inner, dim)?;
                apply(py, &self.inner, move |t| if keepdim { t.$keep(dims) } else { t.$plain(dims) })
            }
        )*}
    };
}

reductions! {
    sum = sum, sum_keepdim, "The sum over ``dim`` (integer tensors sum into i64, as in PyTorch).";
    mean = mean, mean_keepdim, "The mean over ``dim``.";
    argmax = argmax, argmax_keepdim, "The i64 position of the largest value along ``dim`` (over the flattened dims when several or None); the first of ties.";
    argmin = argmin, argmin_keepdim, "The i64 position of the smallest value along ``dim``; the first of ties.";
    amax = max, max_keepdim, "The largest value over ``dim`` (NaN if any is NaN), as ``torch.amax``: values only, and ties share the gradient evenly.";
    amin = min, min_keepdim, "The smallest value over ``dim`` (NaN if any is NaN), as ``torch.amin``.";
    logsumexp = logsumexp, logsumexp_keepdim, "``log(sum(exp(x)))`` over ``dim``, computed stably (as ``torch.logsumexp``: a slice of -inf gives -inf); its gradient is the softmax.";
}

/// `max` or `min` in PyTorch's three forms: over everything (``t.max()``, a tensor), along
/// one dim (``t.max(dim)``, the named pair ``(values, indices)``), or against another tensor
/// (``t.max(other)``, as ``maximum``).
fn extreme(
    py: Python<'_>,
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    largest: bool,
) -> PyResult<Py<PyAny>> {
    let name = if largest { "max" } else { "min" };
    let Some(dim) = dim.filter(|d| !d.is_none()) else {
        let value = apply(py, t, move |t| match (largest, keepdim) {
            (true, false) => t.max(AllDims),
            (true, true) => t.max_keepdim(AllDims),
            (false, false) => t.min(AllDims),
            (false, true) => t.min_keepdim(AllDims),
        })?;
        return Ok(value.into_pyobject(py)?.into_any().unbind());
    };
    if dim.cast::<PyTensor>().is_ok() {
        let op = if largest { BinaryOp::Maximum } else { BinaryOp::Minimum };
        return Ok(crate::tensor_ops::binary(py, t, dim, op, false)?.into_pyobject(py)?.into_any().unbind());
    }
    let Ok(d) = dim.extract::<i64>() else {
        let msg = format!("{name}(dim) takes one dim, as in PyTorch; a{name} reduces over several");
        return Err(PyTypeError::new_err(msg));
    };
    let (values, indices) = run_op(py, &[t], move || {
        // The values gathered at the indices: the gradient goes to the element the index
        // names, as PyTorch's (amax shares it among ties).
        let indices = if largest { t.argmax_keepdim(d)? } else { t.argmin_keepdim(d)? };
        let values = t.gather(&indices, d)?;
        if keepdim {
            Ok((values, indices))
        } else {
            Ok((values.squeeze(d)?, indices.squeeze(d)?))
        }
    })?;
    let pair = py.import("rnn.return_types")?.getattr(name)?;
    Ok(pair.call1((PyTensor::new(values), PyTensor::new(indices)))?.unbind())
}

#[pymethods]
impl PyTensor {
    /// The largest value: ``t.max()`` over every element (NaN if any is NaN);
    /// ``t.max(dim, keepdim=False)`` the pair ``(values, indices)`` along ``dim`` (the
    /// first of ties, a NaN wins; the gradient goes to the indexed element), as
    /// ``torch.max``; ``t.max(other)`` is ``maximum``. ``amax`` reduces over several dims.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn max(&self, py: Python<'_>, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Py<PyAny>> {
        extreme(py, &self.inner, dim, keepdim, true)
    }

    /// The smallest value, in ``max``'s three forms (``min(dim)`` gives ``(values, indices)``).
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn min(&self, py: Python<'_>, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Py<PyAny>> {
        extreme(py, &self.inner, dim, keepdim, false)
    }
}

/// Variance and standard deviation with PyTorch's ``correction``: one Python method per core
/// method taking `(dims, correction, keepdim)`.
macro_rules! spreads {
    ($($name:ident = $core:ident, $doc:literal;)*) => {
        #[pymethods]
        impl PyTensor {$(
            #[doc = $doc]
            #[pyo3(signature = (dim = None, keepdim = false, *, correction = 1.0))]
            fn $name(&self, py: Python<'_>, dim: Option<&Bound<'_, PyAny>>, keepdim: bool, correction: f64) -> PyResult<PyTensor> {
                let dims = reduce_dims(&self.inner, dim)?;
                apply(py, &self.inner, move |t| t.$core(dims, correction, keepdim))
            }
        )*}
    };
}

spreads! {
    var = var_with, "The variance over ``dim`` (None: all dims), divided by ``n - correction``: 1 (the default) is the unbiased estimate, 0 the population variance, as ``torch.var``.";
    std = std_with, "The square root of ``var`` (same arguments), as ``torch.std``; its gradient is NaN where a slice is constant, as PyTorch's.";
}

#[pymethods]
impl PyTensor {
    /// The same elements in a new shape: ``t.reshape(2, -1)`` or ``t.reshape((2, 3))``; one
    /// dim may be -1 (inferred). A view when the layout allows, else a copy.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = target_shape(&self.inner, shape)?;
        apply(py, &self.inner, move |t| t.reshape(dims))
    }

    /// Same as ``reshape``.
    #[pyo3(signature = (*shape))]
    fn view(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        self.reshape(py, shape)
    }

    /// Merges dims ``start_dim..=end_dim`` into one.
    #[pyo3(signature = (start_dim = 0, end_dim = -1))]
    fn flatten(&self, py: Python<'_>, start_dim: i64, end_dim: i64) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.flatten(start_dim, end_dim))
    }

    /// Reorders the dims: ``t.permute(2, 0, 1)`` or ``t.permute((2, 0, 1))`` (a view).
    #[pyo3(signature = (*dims))]
    fn permute(&self, py: Python<'_>, dims: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let rank = self.inner.rank() as i64;
        let given: Vec<i64> = match dims.len() {
            1 if dims.get_item(0)?.extract::<i64>().is_err() => dims.get_item(0)?.extract()?,
            _ => dims.extract()?,
        };
        let perm: Vec<usize> = given.iter().map(|&d| if d < 0 { (d + rank) as usize } else { d as usize }).collect();
        apply(py, &self.inner, move |t| t.permute(&perm))
    }

    /// Swaps two dims (a view).
    fn transpose(&self, py: Python<'_>, dim0: i64, dim1: i64) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.transpose(dim0, dim1))
    }

    /// Swaps the last two dims (a view); a 1-D tensor is returned as is.
    fn t(&self, py: Python<'_>) -> PyResult<PyTensor> {
        if self.inner.rank() < 2 {
            return Ok(PyTensor::new(self.inner.clone()));
        }
        apply(py, &self.inner, |t| t.t())
    }

    /// ``t()`` as a property.
    #[getter(T)]
    fn transposed(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.t(py)
    }

    /// Removes dim ``dim`` if its size is 1, or every dim of size 1 when ``dim`` is None.
    #[pyo3(signature = (dim = None))]
    fn squeeze(&self, py: Python<'_>, dim: Option<i64>) -> PyResult<PyTensor> {
        match dim {
            Some(d) => apply(py, &self.inner, move |t| t.squeeze(d)),
            None => {
                let kept: Vec<usize> = self.inner.dims().iter().copied().filter(|&n| n != 1).collect();
                apply(py, &self.inner, move |t| t.reshape(kept))
            }
        }
    }

    /// Inserts a dim of size 1 at ``dim`` (``-1`` appends one).
    fn unsqueeze(&self, py: Python<'_>, dim: i64) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.unsqueeze(dim))
    }

    /// This tensor repeated (as a view) to ``shape``, numpy's broadcasting rules.
    #[pyo3(signature = (*shape))]
    fn broadcast_to(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims: Vec<usize> = match shape.len() {
            1 if shape.get_item(0)?.extract::<usize>().is_err() => shape.get_item(0)?.extract()?,
            _ => shape.extract()?,
        };
        apply(py, &self.inner, move |t| t.broadcast_as(Shape::from(dims)))
    }

    /// The same values in a row-major layout (``self`` when it already is).
    fn contiguous(&self, py: Python<'_>) -> PyResult<PyTensor> {
        apply(py, &self.inner, |t| t.contiguous())
    }

    /// A copy with storage of its own, cut off from the graph (no gradient flows through it).
    fn clone(&self, py: Python<'_>) -> PyResult<PyTensor> {
        apply(py, &self.inner, |t| t.deep_copy())
    }
}
