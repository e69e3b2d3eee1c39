//! The GPU API of the `rnn` crate (`rnn::gpu`) for Python: `GpuManager` lists the GPUs this
//! build can use and opens contexts on them (`GpuContext`: memory statistics, cache,
//! synchronize); `GpuProfiler` times named regions, also as a context manager:
//!
//! ```python
//! profiler = rnn.GpuProfiler()
//! with profiler.region("matmul"):
//!     y = x @ x
//! profiler.print_summary()
//! ```

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rnn::gpu::{GpuContext, GpuDevice, GpuManager, GpuProfiler, MemoryStats};

use crate::device::{device_from_py, PyDevice};
use crate::errors::{without_gil, PyErrExt};

/// Memory statistics as a dict: ``allocated``, ``reserved``, ``peak``, ``allocations``,
/// ``cache_hits``, ``total`` (bytes and counts).
pub fn memory_stats_dict<'py>(py: Python<'py>, s: &MemoryStats) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let entries = [
        ("allocated", s.allocated),
        ("reserved", s.reserved),
        ("peak", s.peak),
        ("allocations", s.allocations),
        ("cache_hits", s.cache_hits),
        ("total", s.total),
    ];
    for (key, value) in entries {
        dict.set_item(key, value)?;
    }
    Ok(dict)
}

/// One GPU: ``id`` (its index in ``GpuManager().devices()``), ``name``, ``device_type``
/// (``"Cuda"``, ``"Vulkan"``, ``"Metal"``, ``"Dx12"``, ``"Generic"``), ``backend``,
/// ``total_memory`` (bytes; 0 where unknown: wgpu), ``compute_capability`` (CUDA) and
/// ``device`` (the ``rnn.Device`` to put tensors on).
#[pyclass(name = "GpuDevice", module = "rnn", frozen, get_all)]
pub struct PyGpuDevice {
    id: usize,
    name: String,
    device_type: String,
    backend: String,
    total_memory: u64,
    compute_capability: Option<(u32, u32)>,
    device: PyDevice,
}

impl From<&GpuDevice> for PyGpuDevice {
    fn from(d: &GpuDevice) -> Self {
        PyGpuDevice {
            id: d.id,
            name: d.name.clone(),
            device_type: format!("{:?}", d.device_type),
            backend: d.backend.clone(),
            total_memory: d.total_memory,
            compute_capability: d.compute_capability,
            device: PyDevice { inner: d.device },
        }
    }
}

#[pymethods]
impl PyGpuDevice {
    fn __repr__(&self) -> String {
        format!(
            "GpuDevice(id={}, name='{}', type={}, device={})",
            self.id, self.name, self.device_type, self.device.inner
        )
    }
}

/// The GPUs this build can use on this machine, in the order ``Device.best()`` prefers
/// them (CUDA devices, then hardware wgpu adapters; a software adapter only when
/// ``RNN_GPU_DEVICE`` names it). On a machine without a GPU the list is empty.
#[pyclass(name = "GpuManager", module = "rnn", frozen)]
pub struct PyGpuManager(GpuManager);

#[pymethods]
impl PyGpuManager {
    #[new]
    fn new(py: Python<'_>) -> Self {
        PyGpuManager(py.detach(GpuManager::new))
    }

    fn devices(&self) -> Vec<PyGpuDevice> {
        self.0.devices().iter().map(PyGpuDevice::from).collect()
    }

    /// The preferred GPU, or None.
    fn default_device(&self) -> Option<PyGpuDevice> {
        self.0.default_device().map(PyGpuDevice::from)
    }

    /// Whether any GPU is usable.
    #[staticmethod]
    fn is_gpu_available(py: Python<'_>) -> bool {
        py.detach(GpuManager::is_gpu_available)
    }

    /// Opens GPU ``id`` (RuntimeError naming the valid ids when there is none).
    fn create_context(&self, py: Python<'_>, id: usize) -> PyResult<PyGpuContext> {
        Ok(PyGpuContext(without_gil(py, || self.0.create_context(id))?))
    }
}

/// An opened GPU: its memory statistics, cache and queue.
#[pyclass(name = "GpuContext", module = "rnn", frozen)]
pub struct PyGpuContext(GpuContext);

#[pymethods]
impl PyGpuContext {
    #[getter]
    fn id(&self) -> usize {
        self.0.id()
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.0.device() }
    }

    /// The caching allocator's byte counts, with the device's memory in ``total``.
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let ctx = self.0;
        let stats = without_gil(py, move || ctx.try_memory_stats())?;
        memory_stats_dict(py, &stats)
    }

    /// Frees the buffers the allocator keeps for reuse.
    fn empty_cache(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.0;
        without_gil(py, move || ctx.empty_cache())
    }

    /// Waits until every queued kernel has finished.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.0;
        without_gil(py, move || ctx.synchronize())
    }
}

/// Times named regions of work on one device (``device``: a Device or name; default the
/// best one). GPU work is asynchronous: a region waits for the work queued before it and in
/// it. ``with profiler.region(name):`` times a block; ``start`` / ``end`` do the same by hand.
#[pyclass(name = "GpuProfiler", module = "rnn", frozen)]
pub struct PyGpuProfiler(Mutex<GpuProfiler>);

impl PyGpuProfiler {
    fn with<T>(&self, f: impl FnOnce(&mut GpuProfiler) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[pymethods]
impl PyGpuProfiler {
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let profiler = match device.filter(|d| !d.is_none()) {
            Some(d) => GpuProfiler::new(device_from_py(Some(d))?),
            None => py.detach(GpuProfiler::default),
        };
        Ok(PyGpuProfiler(Mutex::new(profiler)))
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.with(|p| p.device()) }
    }

    /// Starts region ``name`` once the work queued so far has finished.
    fn start(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        without_gil(py, || self.with(|p| p.start(name)))
    }

    /// Ends region ``name`` once its work has finished; returns its time in seconds.
    /// ``memory_used`` (bytes) and ``device_id`` are recorded with it as given.
    #[pyo3(signature = (name, memory_used = 0, device_id = 0))]
    fn end(&self, py: Python<'_>, name: &str, memory_used: u64, device_id: usize) -> PyResult<f64> {
        Ok(without_gil(py, || self.with(|p| p.end(name, memory_used, device_id)))?.as_secs_f64())
    }

    /// A context manager timing its block as region ``name``.
    #[pyo3(signature = (name, memory_used = 0, device_id = 0))]
    fn region(slf: Py<Self>, name: String, memory_used: u64, device_id: usize) -> PyProfileRegion {
        PyProfileRegion { profiler: slf, name, memory_used, device_id }
    }

    /// Per region name: ``count``, ``total``, ``mean``, ``min``, ``max`` (seconds) and
    /// ``max_memory_used`` (bytes), in the order the names first ended.
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let rows = self.with(|p| p.summary());
        rows.iter()
            .map(|s| {
                let d = PyDict::new(py);
                d.set_item("name", &s.name)?;
                d.set_item("count", s.count)?;
                for (key, value) in [("total", s.total), ("mean", s.mean), ("min", s.min), ("max", s.max)] {
                    d.set_item(key, value.as_secs_f64())?;
                }
                d.set_item("max_memory_used", s.max_memory_used)?;
                Ok(d)
            })
            .collect()
    }

    /// The summary as a table.
    fn report(&self) -> String {
        self.with(|p| p.report())
    }

    /// Prints the report (through Python's ``print``, so it shows where Python output goes).
    fn print_summary(&self, py: Python<'_>) -> PyResult<()> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("end", "")?;
        py.import("builtins")?.getattr("print")?.call((self.report(),), Some(&kwargs))?;
        Ok(())
    }

    /// Writes the ended regions as a Chrome trace (``chrome://tracing``, Perfetto).
    fn export_chrome_trace(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.with(|p| p.export_chrome_trace(&path)).py_err()
    }

    /// Forgets every region.
    fn clear(&self) {
        self.with(|p| p.clear())
    }
}

/// ``with profiler.region(name):`` (see ``GpuProfiler``).
#[pyclass(name = "ProfileRegion", module = "rnn")]
pub struct PyProfileRegion {
    profiler: Py<PyGpuProfiler>,
    name: String,
    memory_used: u64,
    device_id: usize,
}

#[pymethods]
impl PyProfileRegion {
    fn __enter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.profiler.get().start(slf.py(), &slf.name)?;
        Ok(slf)
    }

    /// Ends the region (also when the block raised; the exception propagates).
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.profiler.get().end(py, &self.name, self.memory_used, self.device_id)?;
        Ok(false)
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGpuDevice>()?;
    m.add_class::<PyGpuManager>()?;
    m.add_class::<PyGpuContext>()?;
    m.add_class::<PyGpuProfiler>()?;
    m.add_class::<PyProfileRegion>()
}
