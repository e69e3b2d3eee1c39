//! `rnn.Tensor` elementwise math (exp, relu, ...), clamping and softmax: one core op each.

use pyo3::prelude::*;
use rnn_core::Tensor;

use crate::errors::run_op;
use crate::tensor::{tensor_from_py, PyTensor};
use crate::tensor_shape::apply;

/// One Python method per core unary op, with its docstring.
macro_rules! unary_methods {
    ($($py_name:ident => $core:ident, $doc:literal;)*) => {
        #[pymethods]
        impl PyTensor {$(
            #[doc = $doc]
            #[doc = ""]
            #[doc = "Elementwise, differentiable; NaN and ±inf behave as in PyTorch."]
            pub(crate) fn $py_name(&self, py: Python<'_>) -> PyResult<PyTensor> {
                apply(py, &self.inner, |t| t.$core())
            }
        )*}
    };
}

unary_methods! {
    neg => neg, "``-x``.";
    abs => abs, "``|x|``.";
    exp => exp, "``e ** x``.";
    log => log, "The natural logarithm (``-inf`` at 0, NaN below).";
    sqrt => sqrt, "The square root (NaN below 0).";
    reciprocal => recip, "``1 / x``.";
    square => sqr, "``x * x``.";
    sin => sin, "The sine.";
    cos => cos, "The cosine.";
    tanh => tanh, "The hyperbolic tangent.";
    erf => erf, "The error function.";
    sigmoid => sigmoid, "``1 / (1 + exp(-x))``.";
    relu => relu, "``max(x, 0)`` (NaN stays NaN).";
    gelu => gelu, "GELU, tanh approximation (PyTorch's ``approximate='tanh'``).";
    gelu_erf => gelu_erf, "GELU, exact (erf) form (PyTorch's default ``gelu``).";
    silu => silu, "``x * sigmoid(x)``.";
    softplus => softplus, "``log(1 + exp(x))``.";
    floor => floor, "The largest integer not above ``x`` (NaN, infinities and -0.0 kept; gradient zero).";
    ceil => ceil, "The smallest integer not below ``x``.";
    trunc => trunc, "The integer part, toward zero.";
    sign => sign, "-1, 0 or 1 (0 at NaN, as ``torch.sign``).";
}

#[pymethods]
impl PyTensor {
    /// The nearest integer, halves to the even one (as ``torch.round``); with ``decimals``,
    /// to that many decimal places (negative: to tens, hundreds, ...), computed as PyTorch
    /// does: ``round(x * 10**d) / 10**d``. Gradient zero; NaN and infinities kept.
    #[pyo3(signature = (*, decimals = 0))]
    pub(crate) fn round(&self, py: Python<'_>, decimals: i32) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| match decimals {
            0 => t.round(),
            d if d > 0 => t.mul_scalar(10f64.powi(d))?.round()?.div_scalar(10f64.powi(d)),
            d => t.div_scalar(10f64.powi(-d))?.round()?.mul_scalar(10f64.powi(-d)),
        })
    }

    /// Limits every element to ``[min, max]`` (NaN stays NaN); either bound may be None.
    #[pyo3(signature = (min = None, max = None))]
    pub(crate) fn clamp(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        let (lo, hi) = (min.unwrap_or(f64::NEG_INFINITY), max.unwrap_or(f64::INFINITY));
        apply(py, &self.inner, move |t| t.clamp(lo, hi))
    }

    /// The elementwise larger of this tensor and ``other`` (a Tensor or a number), with
    /// broadcasting; NaN wins, as in PyTorch.
    fn maximum(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let other = self.same_kind(other)?;
        apply(py, &self.inner, move |t| t.maximum(&other))
    }

    /// The elementwise smaller of this tensor and ``other``; NaN wins.
    fn minimum(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let other = self.same_kind(other)?;
        apply(py, &self.inner, move |t| t.minimum(&other))
    }

    /// ``exp(x) / sum(exp(x))`` along ``dim`` (computed stably).
    #[pyo3(signature = (dim = -1))]
    fn softmax(&self, py: Python<'_>, dim: i64) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.softmax(dim))
    }

    /// ``log(softmax(x))`` along ``dim`` (computed stably).
    #[pyo3(signature = (dim = -1))]
    fn log_softmax(&self, py: Python<'_>, dim: i64) -> PyResult<PyTensor> {
        apply(py, &self.inner, move |t| t.log_softmax(dim))
    }
}

impl PyTensor {
    /// `other` as a tensor of this tensor's dtype and device.
    fn same_kind(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let py = other.py();
        let other = tensor_from_py(other)?;
        let (dtype, device) = (self.inner.dtype(), self.inner.device());
        let moved = other.clone();
        run_op(py, &[&other], move || moved.to_dtype(dtype)?.to_device(device))
    }
}
