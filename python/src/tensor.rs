//! `rnn.Tensor`: the Python handle on an `rnn_core::Tensor`, its conversions and autograd.
//! Operators are in `tensor_ops.rs`, reductions and shape ops in `tensor_shape.rs`,
//! indexing in `tensor_index.rs`.
//!
//! Other binding modules build on three items: [`PyTensor`] (wrap a result with
//! `PyTensor::new(tensor)`, read `.inner`), [`tensor_from_py`] (accepts a Tensor, a numpy
//! array, a scalar or a nested list) and [`tensor_to_numpy`].

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rnn_core::Tensor;

use crate::autograd::{accumulate_into_slots, slot_for, GradSlot};
use crate::device::{device_from_py, PyDevice};
use crate::errors::{run_op, without_gil};
use crate::numpy_io::{cast, move_to};
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

    /// `requires_grad = value`: a tensor that tracks no gradient becomes a leaf variable;
    /// `false` detaches a leaf.
    fn change_requires_grad(&mut self, requires_grad: bool) -> PyResult<()> {
        if requires_grad == self.inner.tracks_grad() {
            return Ok(());
        }
        if requires_grad && !self.inner.dtype().is_float() {
            let dtype = self.inner.dtype();
            return Err(PyValueError::new_err(format!("only float tensors can require gradients, not {dtype}")));
        }
        if !requires_grad && !self.inner.is_variable() {
            let msg = "requires_grad cannot be turned off on a computed tensor: use detach()";
            return Err(PyRuntimeError::new_err(msg));
        }
        let inner = if requires_grad { self.inner.requires_grad() } else { self.inner.detach() };
        *self = PyTensor::new(inner);
        Ok(())
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
            tensor = cast(py, tensor, dtype_from_py(dtype)?)?;
        }
        if let Some(device) = device {
            tensor = move_to(py, tensor, device_from_py(Some(device))?)?;
        }
        if requires_grad {
            tensor = tensor.requires_grad();
        }
        Ok(PyTensor::new(tensor))
    }

    /// The size of each dimension, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        pyo3::types::PyTuple::new(py, self.inner.dims())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.inner.rank()
    }

    /// The number of elements.
    fn numel(&self) -> usize {
        self.inner.elem_count()
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

    /// numpy's conversion protocol: ``np.asarray(t)`` is ``t.numpy()`` (cast to ``dtype``).
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(&self, py: Python<'_>, dtype: Option<&Bound<'_, PyAny>>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
        if copy == Some(false) {
            return Err(PyValueError::new_err("a Tensor cannot be viewed by numpy without a copy"));
        }
        let array = tensor_to_numpy(py, &self.inner)?;
        match dtype {
            Some(dtype) => Ok(array.bind(py).call_method1("astype", (dtype,))?.unbind()),
            None => Ok(array),
        }
    }

    /// None: numpy's operators (``array + tensor``, ``array @ tensor``) defer to the
    /// Tensor's, so the result is a Tensor, as with ``tensor + array``.
    #[classattr]
    fn __array_ufunc__() -> Option<Py<PyAny>> {
        None
    }

    /// The elements as nested Python lists (``t.numpy().tolist()``).
    fn tolist(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(tensor_to_numpy(py, &self.inner)?.bind(py).call_method0("tolist")?.unbind())
    }

    /// The value of a one-element tensor as a Python float (int for integer dtypes).
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let t = self.inner.clone();
        let value = run_op(py, &[&self.inner], move || t.to_f64_scalar())?;
        if self.inner.dtype().is_int() {
            return Ok((value as i64).into_pyobject(py)?.into_any().unbind());
        }
        Ok(value.into_pyobject(py)?.into_any().unbind())
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        let t = self.inner.clone();
        run_op(py, &[&self.inner], move || t.to_f64_scalar())
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        Ok(self.__float__(py)? as i64)
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.__float__(py)? != 0.0)
    }

    /// The size of the first dimension.
    fn __len__(&self) -> PyResult<usize> {
        let dims = self.inner.dims();
        dims.first().copied().ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("len() of a 0-d tensor"))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let t = self.inner.clone();
        let printed = run_op(py, &[&self.inner], move || Ok(format!("{t}")))?;
        // The core's display ends with a `Tensor[shape, dtype, device]` line: keep the values.
        let values = printed.rsplit_once('\n').map_or(printed.as_str(), |(values, _)| values);
        let values = values.replace('\n', "\n       ");
        let grad = if self.inner.tracks_grad() { ", requires_grad=True" } else { "" };
        Ok(format!("tensor({values}, dtype={}, device={}{grad})", self.inner.dtype(), self.inner.device()))
    }

    /// Tensors hash by identity (``==`` compares elementwise and returns a tensor).
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    /// Copies the tensor to ``device`` and/or converts it to ``dtype`` (``t.to("cuda:0")``,
    /// ``t.to(dtype="f16")``, or as in PyTorch ``t.to(rnn.float16)``: a dtype in the first
    /// place is the dtype). Gradients flow back through the copy. Returns ``self`` when
    /// nothing changes.
    #[pyo3(signature = (device = None, dtype = None))]
    pub(crate) fn to(
        slf: &Bound<'_, Self>,
        device: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyTensor>> {
        let py = slf.py();
        let original = slf.borrow().inner.clone();
        let mut tensor = original.clone();
        let (device, dtype) = crate::device::device_and_dtype(device, dtype);
        if let Some(dtype) = dtype {
            tensor = cast(py, tensor, dtype_from_py(dtype)?)?;
        }
        if let Some(device) = device {
            tensor = move_to(py, tensor, device_from_py(Some(device))?)?;
        }
        if tensor.id() == original.id() {
            return Ok(slf.clone().unbind());
        }
        Py::new(py, PyTensor::new(tensor))
    }

    /// A copy on the CPU (``self`` when it already is there).
    fn cpu(slf: &Bound<'_, Self>) -> PyResult<Py<PyTensor>> {
        let cpu = "cpu".into_pyobject(slf.py())?.into_any();
        Self::to(slf, Some(&cpu), None)
    }
}

/// Autograd.
#[pymethods]
impl PyTensor {
    /// Whether gradients flow through this tensor: a leaf created with
    /// ``requires_grad=True``, or a result computed from one. Setting it to True on a
    /// tensor that does not track gradients makes it such a leaf (in place, as
    /// ``requires_grad_()`` does).
    #[getter(requires_grad)]
    fn get_requires_grad(&self) -> bool {
        self.inner.tracks_grad()
    }

    #[setter(requires_grad)]
    fn set_requires_grad(&mut self, value: bool) -> PyResult<()> {
        self.change_requires_grad(value)
    }

    /// Makes this tensor a leaf that receives ``.grad`` (or, with False, cuts it off the
    /// graph); returns ``self``.
    #[pyo3(signature = (requires_grad = true))]
    fn requires_grad_(mut slf: PyRefMut<'_, Self>, requires_grad: bool) -> PyResult<PyRefMut<'_, Self>> {
        slf.change_requires_grad(requires_grad)?;
        Ok(slf)
    }

    /// Whether this is a leaf of the graph (not computed from a tensor that requires grad).
    #[getter]
    fn is_leaf(&self) -> bool {
        self.inner.is_variable() || !self.inner.tracks_grad()
    }

    /// The gradient accumulated by ``backward()`` on this leaf, or None. Can be set (to a
    /// Tensor of the same shape, or None to clear it).
    #[getter(grad)]
    fn get_grad(&self) -> Option<PyTensor> {
        self.grad().map(PyTensor::new)
    }

    #[setter(grad)]
    fn set_grad_py(&mut self, grad: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let grad = grad.filter(|g| !g.is_none()).map(tensor_from_py).transpose()?;
        if let Some(g) = &grad {
            if g.dims() != self.inner.dims() {
                let msg = format!("grad of shape {:?} for a tensor of shape {:?}", g.dims(), self.inner.dims());
                return Err(PyValueError::new_err(msg));
            }
        }
        self.set_grad(grad.map(|g| g.detach()));
        Ok(())
    }

    /// Computes the gradients of this tensor with respect to every leaf it depends on and
    /// adds them to those leaves' ``.grad`` (as in PyTorch, gradients accumulate over calls:
    /// clear them with ``x.grad = None`` or an optimizer's ``zero_grad``). A non-scalar
    /// tensor is seeded with ones (the gradient of its sum), or with ``gradient`` when
    /// given. ValueError when the tensor does not depend on a leaf that requires grad.
    #[pyo3(signature = (gradient = None))]
    fn backward(&self, py: Python<'_>, gradient: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let seed = gradient.map(tensor_from_py).transpose()?;
        let root = self.inner.clone();
        without_gil(py, move || {
            let root = match seed {
                // d(sum(root * g))/dx is g weighted by d(root)/dx: the vector-Jacobian product.
                Some(g) => root.mul(&g.detach().to_dtype(root.dtype())?.to_device(root.device())?)?.sum_all()?,
                None => root,
            };
            accumulate_into_slots(&root.backward()?)
        })
    }

    /// The same data, cut off from the graph: no gradient flows through the result.
    fn detach(&self) -> PyTensor {
        PyTensor::new(self.inner.detach())
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTensor>()
}
