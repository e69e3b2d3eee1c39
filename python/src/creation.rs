//! Module functions that make tensors: `rnn.zeros`, `rnn.ones`, `rnn.full`, `rnn.arange`,
//! `rnn.rand`, `rnn.randn`, `rnn.cat`, `rnn.stack`, `rnn.manual_seed`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rnn_core::{DType, Device, Tensor};

use crate::device::device_or;
use crate::errors::{run_op, without_gil};
use crate::numpy_io::dtype_or;
use crate::tensor::{tensor_from_py, PyTensor};

/// The shape from `zeros(2, 3)` or `zeros((2, 3))`.
fn shape_args(args: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    if args.len() == 1 && args.get_item(0)?.extract::<usize>().is_err() {
        return args.get_item(0)?.extract();
    }
    args.extract()
}

/// Makes a tensor with `make(shape, dtype, device)` (f32 on the CPU unless given) and
/// applies `requires_grad`.
fn create(
    py: Python<'_>,
    shape: Vec<usize>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
    make: impl FnOnce(Vec<usize>, DType, Device) -> rnn_core::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    let kind = (dtype_or(dtype, DType::F32)?, device_or(device, Device::Cpu)?);
    create_as(py, shape, kind, requires_grad, make)
}

/// `create` with the dtype and device resolved.
fn create_as(
    py: Python<'_>,
    shape: Vec<usize>,
    (dtype, device): (DType, Device),
    requires_grad: bool,
    make: impl FnOnce(Vec<usize>, DType, Device) -> rnn_core::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    let t = without_gil(py, move || make(shape, dtype, device))?;
    Ok(PyTensor::new(if requires_grad { t.requires_grad() } else { t }))
}

/// A tensor of zeros: ``rnn.zeros(2, 3)`` or ``rnn.zeros((2, 3), dtype="f64", device="cpu")``.
#[pyfunction]
#[pyo3(signature = (*shape, dtype = None, device = None, requires_grad = false))]
fn zeros(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    create(py, shape_args(shape)?, dtype, device, requires_grad, Tensor::zeros)
}

/// A tensor of ones (arguments as for ``zeros``).
#[pyfunction]
#[pyo3(signature = (*shape, dtype = None, device = None, requires_grad = false))]
fn ones(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    create(py, shape_args(shape)?, dtype, device, requires_grad, Tensor::ones)
}

/// A tensor of ``shape`` filled with ``value``.
#[pyfunction]
#[pyo3(signature = (shape, value, dtype = None, device = None, requires_grad = false))]
fn full(
    py: Python<'_>,
    shape: Vec<usize>,
    value: f64,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    create(py, shape, dtype, device, requires_grad, move |s, d, dev| Tensor::full(value, s, d, dev))
}

/// A tensor of ``input``'s shape filled with ``value``, in ``input``'s dtype and device
/// unless ``dtype`` / ``device`` say otherwise (``torch.full_like``).
#[pyfunction]
#[pyo3(signature = (input, value, dtype = None, device = None, requires_grad = false))]
fn full_like(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    value: f64,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let like = tensor_from_py(input)?;
    let kind = (dtype_or(dtype, like.dtype())?, device_or(device, like.device())?);
    create_as(py, like.dims().to_vec(), kind, requires_grad, move |s, d, dev| Tensor::full(value, s, d, dev))
}

/// `full_like` with a fixed value: `zeros_like`, `ones_like`.
macro_rules! constant_like {
    ($($name:ident => $value:literal, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (input, dtype = None, device = None, requires_grad = false))]
        fn $name(
            py: Python<'_>,
            input: &Bound<'_, PyAny>,
            dtype: Option<&Bound<'_, PyAny>>,
            device: Option<&Bound<'_, PyAny>>,
            requires_grad: bool,
        ) -> PyResult<PyTensor> {
            full_like(py, input, $value, dtype, device, requires_grad)
        }
    )*};
}

constant_like! {
    zeros_like => 0.0, "Zeros of ``input``'s shape, dtype and device (``torch.zeros_like``).";
    ones_like => 1.0, "Ones of ``input``'s shape, dtype and device (``torch.ones_like``).";
}

/// Uniform random values in ``[low, high)`` (seeded by ``rnn.manual_seed``).
#[pyfunction]
#[pyo3(signature = (*shape, low = 0.0, high = 1.0, dtype = None, device = None, requires_grad = false))]
fn rand(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    low: f64,
    high: f64,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    create(py, shape_args(shape)?, dtype, device, requires_grad, move |s, d, dev| Tensor::rand(low, high, s, d, dev))
}

/// Normal random values with ``mean`` and ``std`` (seeded by ``rnn.manual_seed``).
#[pyfunction]
#[pyo3(signature = (*shape, mean = 0.0, std = 1.0, dtype = None, device = None, requires_grad = false))]
fn randn(
    py: Python<'_>,
    shape: &Bound<'_, PyTuple>,
    mean: f64,
    std: f64,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    create(py, shape_args(shape)?, dtype, device, requires_grad, move |s, d, dev| Tensor::randn(mean, std, s, d, dev))
}

/// ``start, start + step, ...`` below ``end`` (``arange(5)`` is 0..5). The dtype is i64
/// when every argument is an int, else f32, unless ``dtype`` is given.
#[pyfunction]
#[pyo3(signature = (start, end = None, step = None, dtype = None, device = None))]
fn arange(
    py: Python<'_>,
    start: &Bound<'_, PyAny>,
    end: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    let all_ints = [Some(start), end, step].into_iter().flatten().all(|v| v.extract::<i64>().is_ok());
    let default = if all_ints { DType::I64 } else { DType::F32 };
    let dtype = dtype_or(dtype, default)?;
    let (mut lo, mut hi) = (0.0, start.extract::<f64>()?);
    if let Some(end) = end.filter(|e| !e.is_none()) {
        (lo, hi) = (hi, end.extract()?);
    }
    let step = step.filter(|s| !s.is_none()).map_or(Ok(1.0), |s| s.extract::<f64>())?;
    let device = device_or(device, Device::Cpu)?;
    let t =
        without_gil(py, move || Tensor::arange_step(lo, hi, step, Device::Cpu)?.to_dtype(dtype)?.to_device(device))?;
    Ok(PyTensor::new(t))
}

/// The tensors of a list, as core tensors.
fn tensor_list(tensors: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    tensors.try_iter()?.map(|t| tensor_from_py(&t?)).collect()
}

/// Joins tensors along an existing dim (their other dims must match).
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
fn cat(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<PyTensor> {
    let ts = tensor_list(tensors)?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    Ok(PyTensor::new(run_op(py, &refs, || Tensor::cat(&ts, dim))?))
}

/// Joins tensors of one shape along a new dim.
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
fn stack(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<PyTensor> {
    let ts = tensor_list(tensors)?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    Ok(PyTensor::new(run_op(py, &refs, || Tensor::stack(&ts, dim))?))
}

/// Seeds the library's random generator (``rand``, ``randn``, layer initialization).
#[pyfunction]
fn manual_seed(seed: u64) {
    rnn_core::manual_seed(seed);
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(ones, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(full_like, m)?)?;
    m.add_function(wrap_pyfunction!(zeros_like, m)?)?;
    m.add_function(wrap_pyfunction!(ones_like, m)?)?;
    m.add_function(wrap_pyfunction!(rand, m)?)?;
    m.add_function(wrap_pyfunction!(randn, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(cat, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(manual_seed, m)?)
}
