//! `rnn.micrograd`: micrograd_rs's scalar autograd API (`Value`, `Device`) on rnn's tensors.
//!
//! A `Value` is a rank-0 tensor on its device (f64 where the device has f64, f32 on wgpu),
//! so its arithmetic and its gradients are rnn's ops and autograd. `backward()` runs the
//! core's backward once and adds each gradient into the `grad` of every `Value` of the graph
//! (micrograd accumulates until the user resets `grad`). The graph of Python objects (each
//! `Value` keeps its operands) is walked iteratively, so deep graphs need no deep stack.
//! `MLP`, `Layer` and `Neuron` are in `rnn/micrograd.py`, built from `Value`s.

use std::collections::HashSet;

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use rnn_core::{no_grad, DType, Device, Result, Tensor};

use crate::errors::{without_gil, PyErrExt};

/// Where values live: ``Device.cpu()`` or ``Device.gpu()`` (the first GPU this build can
/// use; RuntimeError when there is none).
#[pyclass(name = "Device", module = "rnn.micrograd", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MgDevice {
    pub inner: Device,
}

#[pymethods]
impl MgDevice {
    /// The CPU device.
    #[staticmethod]
    fn cpu() -> Self {
        MgDevice { inner: Device::Cpu }
    }

    /// The first GPU of ``rnn.GpuManager().devices()``. Raises RuntimeError if none is available.
    #[staticmethod]
    fn gpu(py: Python<'_>) -> PyResult<Self> {
        let first = py.detach(|| rnn::GpuManager::new().default_device().map(|d| d.device));
        first.map(|inner| MgDevice { inner }).ok_or_else(|| {
            PyRuntimeError::new_err(
                "GPU is not available: no CUDA device or hardware wgpu adapter was found \
                 (a software adapter is used only when RNN_GPU_DEVICE names it, e.g. wgpu:0)",
            )
        })
    }

    /// Whether ``Device.gpu()`` would find a GPU.
    #[staticmethod]
    fn is_gpu_available(py: Python<'_>) -> bool {
        py.detach(rnn::GpuManager::is_gpu_available)
    }

    /// Whether this is a GPU.
    #[getter]
    fn is_gpu(&self) -> bool {
        !self.inner.is_cpu()
    }

    fn __repr__(&self) -> String {
        match self.inner {
            Device::Cpu => "Device.cpu()".into(),
            d => format!("Device.gpu() ({d})"),
        }
    }
}

/// A device from this module's `Device`, an `rnn.Device` or a name (None: the CPU).
fn any_device(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    match obj.map(|o| o.cast::<MgDevice>()) {
        Some(Ok(d)) => Ok(d.get().inner),
        _ => crate::device::device_from_py(obj),
    }
}

/// The dtype of values on `device`: f64 unless the device lacks it (wgpu).
fn value_dtype(device: Device) -> DType {
    match device {
        Device::Wgpu(_) => DType::F32,
        _ => DType::F64,
    }
}

/// A scalar with a gradient: ``Value(data, device=Device.cpu())``.
#[pyclass(name = "Value", module = "rnn.micrograd")]
pub struct Value {
    tensor: Tensor,
    grad: f64,
    /// The values this one was computed from (micrograd's `_prev`).
    prev: Vec<Py<Value>>,
    device: Device,
}

impl Value {
    fn leaf(data: f64, device: Device) -> Result<Value> {
        let tensor = Tensor::full(data, (), value_dtype(device), device)?.requires_grad();
        Ok(Value { tensor, grad: 0.0, prev: Vec::new(), device })
    }

    /// The result of an op on `operands`.
    fn result(tensor: Tensor, operands: Vec<Py<Value>>, device: Device) -> Value {
        Value { tensor, grad: 0.0, prev: operands, device }
    }

    /// `op(self, other)` where `other` is a Value (same device) or a number.
    fn binary(
        slf: &Bound<'_, Value>,
        other: &Bound<'_, PyAny>,
        with_value: fn(&Tensor, &Tensor) -> Result<Tensor>,
        with_number: impl FnOnce(&Tensor, f64) -> Result<Tensor>,
    ) -> PyResult<Value> {
        let this = slf.borrow();
        if let Ok(rhs) = other.cast::<Value>() {
            let out = with_value(&this.tensor, &rhs.borrow().tensor).py_err()?;
            return Ok(Value::result(out, vec![slf.clone().unbind(), rhs.clone().unbind()], this.device));
        }
        let Ok(x) = other.extract::<f64>() else {
            let kind = other.get_type().name()?;
            return Err(PyTypeError::new_err(format!("unsupported operand: Value and {kind}")));
        };
        let out = with_number(&this.tensor, x).py_err()?;
        Ok(Value::result(out, vec![slf.clone().unbind()], this.device))
    }

    fn unary(slf: &Bound<'_, Value>, op: fn(&Tensor) -> Result<Tensor>) -> PyResult<Value> {
        let this = slf.borrow();
        Ok(Value::result(op(&this.tensor).py_err()?, vec![slf.clone().unbind()], this.device))
    }

    /// Every value of the graph ending at `root` (each once), iteratively.
    fn graph(py: Python<'_>, root: &Py<Value>) -> Vec<Py<Value>> {
        let (mut seen, mut order, mut stack) = (HashSet::new(), Vec::new(), vec![root.clone_ref(py)]);
        while let Some(v) = stack.pop() {
            let value = v.borrow(py);
            if !seen.insert(value.tensor.id()) {
                continue;
            }
            stack.extend(value.prev.iter().map(|p| p.clone_ref(py)));
            drop(value);
            order.push(v);
        }
        order
    }
}

#[pymethods]
impl Value {
    /// ``device``: a ``Device`` of this module, an ``rnn.Device`` or a name such as ``"cpu"``
    /// (default: the CPU).
    #[new]
    #[pyo3(signature = (data, device = None))]
    fn new(py: Python<'_>, data: f64, device: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let device = any_device(device)?;
        without_gil(py, move || Value::leaf(data, device))
    }

    /// The value, as a float. Setting it (``p.data -= lr * p.grad``) writes in place.
    #[getter]
    fn get_data(&self, py: Python<'_>) -> PyResult<f64> {
        without_gil(py, || self.tensor.to_f64_scalar())
    }

    #[setter]
    fn set_data(&self, py: Python<'_>, data: f64) -> PyResult<()> {
        let t = &self.tensor;
        without_gil(py, || no_grad(|| t.assign(&Tensor::full(data, (), t.dtype(), t.device())?)))
    }

    /// d(output)/d(this value), summed over the ``backward()`` calls since it was last set.
    #[getter]
    fn get_grad(&self) -> f64 {
        self.grad
    }

    #[setter]
    fn set_grad(&mut self, grad: f64) {
        self.grad = grad;
    }

    /// The device this value lives on.
    #[getter]
    fn device(&self) -> MgDevice {
        MgDevice { inner: self.device }
    }

    /// This value on ``device`` (differentiable: gradients flow back to this value).
    fn to(slf: &Bound<'_, Self>, device: &Bound<'_, PyAny>) -> PyResult<Value> {
        let this = slf.borrow();
        let target = any_device(Some(device))?;
        let dtype = value_dtype(target);
        // Convert where the dtype exists: before moving to wgpu (no f64), after moving back.
        let out = match target {
            Device::Wgpu(_) => this.tensor.to_dtype(dtype).and_then(|t| t.to_device(target)),
            _ => this.tensor.to_device(target).and_then(|t| t.to_dtype(dtype)),
        };
        let out = out.py_err()?;
        Ok(Value::result(out, vec![slf.clone().unbind()], target))
    }

    /// Adds d(self)/d(v) into ``v.grad`` for every value ``v`` this one was computed from.
    fn backward(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let root = slf.clone().unbind();
        let values = Value::graph(py, &root);
        let tensor = slf.borrow().tensor.clone();
        let grads = without_gil(py, move || tensor.backward())?;
        for v in values {
            let mut value = v.borrow_mut(py);
            if let Some(g) = grads.get(&value.tensor) {
                value.grad += without_gil(py, || g.to_f64_scalar())?;
            }
        }
        // The core keeps gradients of leaves only; micrograd also sets the output's to 1.
        let mut root = slf.borrow_mut();
        if grads.get(&root.tensor).is_none() {
            root.grad += 1.0;
        }
        Ok(())
    }

    fn relu(slf: &Bound<'_, Self>) -> PyResult<Value> {
        Value::unary(slf, Tensor::relu)
    }

    fn tanh(slf: &Bound<'_, Self>) -> PyResult<Value> {
        Value::unary(slf, Tensor::tanh)
    }

    fn exp(slf: &Bound<'_, Self>) -> PyResult<Value> {
        Value::unary(slf, Tensor::exp)
    }

    fn __neg__(slf: &Bound<'_, Self>) -> PyResult<Value> {
        Value::unary(slf, Tensor::neg)
    }

    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, Tensor::add, |t, x| t.add_scalar(x))
    }

    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, |a, b| b.add(a), |t, x| t.add_scalar(x))
    }

    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, Tensor::sub, |t, x| t.sub_scalar(x))
    }

    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, |a, b| b.sub(a), |t, x| t.neg()?.add_scalar(x))
    }

    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, Tensor::mul, |t, x| t.mul_scalar(x))
    }

    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, |a, b| b.mul(a), |t, x| t.mul_scalar(x))
    }

    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, Tensor::div, |t, x| t.div_scalar(x))
    }

    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        Value::binary(slf, other, |a, b| b.div(a), |t, x| t.recip()?.mul_scalar(x))
    }

    /// ``self ** exponent`` for a number ``exponent`` (as in micrograd).
    fn __pow__(
        slf: &Bound<'_, Self>,
        exponent: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Value> {
        if modulo.is_some_and(|m| !m.is_none()) || exponent.cast::<Value>().is_ok() {
            return Err(PyTypeError::new_err("Value ** x supports a number x only"));
        }
        let x: f64 = exponent.extract()?;
        let this = slf.borrow();
        let out = this.tensor.pow_scalar(x).py_err()?;
        Ok(Value::result(out, vec![slf.clone().unbind()], this.device))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Value(data={}, grad={})", self.get_data(py)?, self.grad))
    }
}

/// ``n`` numbers drawn uniformly from ``[lo, hi)`` by rnn's global generator
/// (``rnn.manual_seed`` makes them reproducible): the initial weights of ``MLP``.
#[pyfunction]
fn _uniform(py: Python<'_>, n: usize, lo: f64, hi: f64) -> PyResult<Vec<f64>> {
    without_gil(py, move || Tensor::rand(lo, hi, n, DType::F64, Device::Cpu)?.to_vec::<f64>())
}

pub fn register(py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    // `rnn._rnn.Device` is `rnn.Device`: this class is exported as `rnn.micrograd.Device`.
    m.add("MicrogradDevice", py.get_type::<MgDevice>())?;
    m.add_class::<Value>()?;
    m.add_function(wrap_pyfunction!(_uniform, m)?)
}
