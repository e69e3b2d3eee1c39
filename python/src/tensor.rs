//! `rnn.Tensor`: the Python handle on an `rnn_core::Tensor`.
//!
//! Other binding modules build on three items: [`PyTensor`] (wrap a result with
//! `PyTensor::new(tensor)`, read `.inner`), [`tensor_from_py`] (accepts a Tensor, a numpy
//! array, a scalar or a nested list) and [`tensor_to_numpy`].

use pyo3::prelude::*;
use rnn_core::Tensor;

use crate::autograd::{slot_for, GradSlot};
use crate::device::{device_from_py, PyDevice};
use crate::errors::without_gil;
pub use crate::numpy_io::{dtype_from_py, tensor_from_py, tensor_to_numpy};

/// A multi-dimensional array on a device (CPU, CUDA or wgpu), with autograd.
///
/// ``Tensor(data, dtype=None, device=None, requires_grad=False)`` copies ``data`` (a numpy
/// array, a Python number, a nested list or another Tensor). numpy arrays keep their
/// dtype; Python floats become ``f32`` and ints ``i64``. ``dtype`` converts (names such as
/// ``"f32"`` or ``"float32"``), ``device`` places it (``"cpu"``, ``"cuda:0"``, ``"wgpu:0"``
/// or a ``Device``); ``requires_grad=True`` makes it a leaf that receives ``.grad``.
#[pyclass(name = "Tensor", module = "rnn")]
pub struct PyTensor {
    pub inner: Tensor,
    /// The gradient slot of a variable (`None` for tensors that are not variables).
    grad: Option<GradSlot>,
}

impl PyTensor {
    /// Wraps a tensor for Python (a variable gets the grad slot its other wrappers share).
    pub fn new(inner: Tensor) -> Self {
        let grad = inner.is_variable().then(|| slot_for(&inner));
        PyTensor { inner, grad }
    }

    /// The accumulated gradient of this variable, if `backward` has reached it.
    pub fn grad(&self) -> Option<Tensor> {
        let slot = self.grad.as_ref()?;
        slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the gradient (None clears it), as an optimizer's `zero_grad` does.
    pub fn set_grad(&mut self, grad: Option<Tensor>) {
        let slot = self.grad.get_or_insert_with(Default::default);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = grad;
    }
}

#[pymethods]
impl PyTensor {
    #[new]
    #[pyo3(signature = (data, dtype = None, device = None, requires_grad = false))]
    fn py_new(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        requires_grad: bool,
    ) -> PyResult<Self> {
        let mut tensor = tensor_from_py(data)?.detach();
        if let Some(dtype) = dtype {
            tensor = crate::numpy_io::cast(py, tensor, dtype_from_py(dtype)?)?;
        }
        if let Some(device) = device {
            tensor = crate::numpy_io::move_to(py, tensor, device_from_py(Some(device))?)?;
        }
        if requires_grad {
            tensor = tensor.requires_grad();
        }
        Ok(PyTensor::new(tensor))
    }

    /// The size of each dimension, as a tuple.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.inner.dims().to_vec()
    }

    /// The element type's name: ``"f32"``, ``"f64"``, ``"f16"``, ``"bf16"``, ``"u8"``,
    /// ``"u32"`` or ``"i64"`` (compare with ``rnn.float32`` etc.).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().as_str()
    }

    /// The device the tensor lives on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.inner.device() }
    }

    /// The elements as a new numpy array (one copy; from a GPU, a transfer). bf16 becomes
    /// ``ml_dtypes.bfloat16`` when ml_dtypes is installed, else float32.
    fn numpy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        tensor_to_numpy(py, &self.inner)
    }

    /// The value of a one-element tensor as a Python float (int for integer dtypes).
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let t = self.inner.clone();
        let value = without_gil(py, move || t.to_f64_scalar())?;
        if self.inner.dtype().is_int() {
            return Ok((value as i64).into_pyobject(py)?.into_any().unbind());
        }
        Ok(value.into_pyobject(py)?.into_any().unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let t = self.inner.clone();
        let printed = without_gil(py, move || Ok(format!("{t}")))?;
        // The core's display ends with a `Tensor[shape, dtype, device]` line: keep the values.
        let values = printed.rsplit_once('\n').map_or(printed.as_str(), |(values, _)| values);
        let values = values.replace('\n', "\n       ");
        let grad = if self.inner.tracks_grad() { ", requires_grad=True" } else { "" };
        Ok(format!("tensor({values}, dtype={}, device={}{grad})", self.inner.dtype(), self.inner.device()))
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTensor>()
}
