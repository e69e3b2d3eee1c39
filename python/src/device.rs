//! `rnn.Device`: where a tensor lives (`"cpu"`, `"cuda:0"`, `"wgpu:0"`).

use pyo3::prelude::*;
use pyo3::types::PyString;
use rnn_core::Device;

use crate::errors::PyErrExt;

/// A compute device: ``Device("cpu")``, ``Device("cuda:0")``, ``Device("wgpu:0")``.
///
/// ``Device.best()`` picks CUDA, then a hardware wgpu GPU, then the CPU; the environment
/// variable ``RNN_GPU_DEVICE`` (e.g. ``cpu``, ``cuda:0``, ``wgpu:1``) overrides the choice.
/// Wherever a device is expected, its name as a string is accepted too.
#[pyclass(name = "Device", module = "rnn", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDevice {
    pub inner: Device,
}

#[pymethods]
impl PyDevice {
    /// Parses a device name: ``cpu``, ``cuda``, ``cuda:N``, ``wgpu``, ``wgpu:N`` or
    /// ``wgpu:<part of an adapter name>``. Raises ValueError for a malformed name. The
    /// device need not exist (see ``is_available``): creating a tensor on it fails instead.
    #[new]
    fn new(name: &str) -> PyResult<Self> {
        Ok(PyDevice { inner: Device::parse(name).py_err()? })
    }

    /// The fastest available device (CUDA, then a hardware wgpu GPU, then the CPU), or the
    /// one ``RNN_GPU_DEVICE`` names (RuntimeError if that one is not available).
    #[staticmethod]
    fn best(py: Python<'_>) -> PyResult<Self> {
        let inner = crate::errors::without_gil(py, Device::best)?;
        Ok(PyDevice { inner })
    }

    /// The CPU device.
    #[staticmethod]
    fn cpu() -> Self {
        PyDevice { inner: Device::Cpu }
    }

    /// ``"cpu"``, ``"cuda"`` or ``"wgpu"``.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Wgpu(_) => "wgpu",
        }
    }

    /// The device's ordinal (0 for the CPU).
    #[getter]
    fn index(&self) -> usize {
        match self.inner {
            Device::Cpu => 0,
            Device::Cuda(i) | Device::Wgpu(i) => i,
        }
    }

    /// Whether tensors can be created on this device in this build, on this machine.
    fn is_available(&self, py: Python<'_>) -> bool {
        let device = self.inner;
        py.detach(move || device.is_available())
    }

    /// Blocks until all work queued on the device has finished (a no-op on the CPU).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let device = self.inner;
        crate::errors::without_gil(py, move || device.synchronize())
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!("Device('{}')", self.inner)
    }
}

/// A device from a `Device` or its name; `None` is the CPU.
pub fn device_from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Device::Cpu) };
    if let Ok(device) = obj.cast::<PyDevice>() {
        return Ok(device.get().inner);
    }
    if obj.is_instance_of::<PyString>() {
        return Device::parse(&obj.extract::<String>()?).py_err();
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "expected a Device or a device name such as 'cpu', got {}",
        obj.get_type().name()?
    )))
}

/// The `device` argument, `default` when it is absent or None.
pub fn device_or(device: Option<&Bound<'_, PyAny>>, default: Device) -> PyResult<Device> {
    device.filter(|d| !d.is_none()).map_or(Ok(default), |d| device_from_py(Some(d)))
}

/// `to`'s `(device, dtype)` arguments, with a dtype given first (`t.to(rnn.float16)`, as in
/// PyTorch) moved to its place: no device name is also a dtype name.
pub fn device_and_dtype<'a, 'py>(
    device: Option<&'a Bound<'py, PyAny>>,
    dtype: Option<&'a Bound<'py, PyAny>>,
) -> (Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>) {
    match (device, dtype) {
        (Some(first), None)
            if device_from_py(Some(first)).is_err() && crate::numpy_io::dtype_from_py(first).is_ok() =>
        {
            (None, Some(first))
        }
        given => given,
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDevice>()
}
