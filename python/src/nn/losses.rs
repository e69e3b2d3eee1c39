//! `rnn.nn.functional`'s losses: rnn-nn's loss functions with PyTorch's names and keyword
//! arguments (`reduction="mean" | "sum" | "none"`). Inputs first, targets second.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnn_core::{Result, Tensor};
use rnn_nn::loss::{self, CrossEntropyOptions, Reduction};

use crate::errors::without_gil;
use crate::numpy_io::tensor_from_py;
use crate::tensor::PyTensor;

fn reduction(name: &str) -> PyResult<Reduction> {
    match name {
        "mean" => Ok(Reduction::Mean),
        "sum" => Ok(Reduction::Sum),
        "none" => Ok(Reduction::None),
        other => Err(PyValueError::new_err(format!("reduction must be 'mean', 'sum' or 'none', got '{other}'"))),
    }
}

/// Reads both arguments and runs `f` on them with the GIL released.
fn pair_loss(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    f: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    let (x, y) = (tensor_from_py(input)?, tensor_from_py(target)?);
    Ok(PyTensor::new(without_gil(py, move || f(&x, &y))?))
}

/// Mean squared error of ``input`` against ``target`` (same shape).
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean"))]
fn mse_loss(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    reduction: &str,
) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::mse_with(x, y, r))
}

/// Mean absolute error of ``input`` against ``target`` (same shape).
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean"))]
fn l1_loss(py: Python<'_>, input: &Bound<'_, PyAny>, target: &Bound<'_, PyAny>, reduction: &str) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::l1_loss_with(x, y, r))
}

/// Huber loss: quadratic below ``delta``, linear above.
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean", delta = 1.0))]
fn huber_loss(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    reduction: &str,
    delta: f64,
) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::huber_loss_with(x, y, delta, r))
}

/// Cross entropy of logits ``input`` (``[N, C]`` or ``[N, C, d...]``) against class ids
/// (``[N]`` / ``[N, d...]``, integer) or class probabilities (same shape as ``input``).
#[pyfunction]
#[pyo3(signature = (input, target, ignore_index = None, reduction = "mean", label_smoothing = 0.0))]
fn cross_entropy(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    ignore_index: Option<i64>,
    reduction: &str,
    label_smoothing: f64,
) -> PyResult<PyTensor> {
    let options = CrossEntropyOptions { label_smoothing, reduction: self::reduction(reduction)?, ignore_index };
    pair_loss(py, input, target, move |x, y| loss::cross_entropy_with(x, y, &options))
}

/// Negative log likelihood of class ids from log-probabilities (``log_softmax`` output).
#[pyfunction]
#[pyo3(signature = (input, target, ignore_index = None, reduction = "mean"))]
fn nll_loss(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    ignore_index: Option<i64>,
    reduction: &str,
) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::nll_loss_with(x, y, r, ignore_index))
}

/// Binary cross entropy of probabilities ``input`` against 0/1 targets (same shape).
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean"))]
fn binary_cross_entropy(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    reduction: &str,
) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::binary_cross_entropy_with(x, y, r))
}

/// Binary cross entropy of ``sigmoid(input)``, computed stably from the logits.
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean"))]
fn binary_cross_entropy_with_logits(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    reduction: &str,
) -> PyResult<PyTensor> {
    let r = self::reduction(reduction)?;
    pair_loss(py, input, target, move |x, y| loss::binary_cross_entropy_with_logits_with(x, y, r))
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mse_loss, m)?)?;
    m.add_function(wrap_pyfunction!(l1_loss, m)?)?;
    m.add_function(wrap_pyfunction!(huber_loss, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(nll_loss, m)?)?;
    m.add_function(wrap_pyfunction!(binary_cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(binary_cross_entropy_with_logits, m)?)
}
