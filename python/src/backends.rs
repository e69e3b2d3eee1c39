//! `rnn.backends`: neural_arch's backend API (`get_backend("cuda" | "wgpu" | "cpu")`) on
//! rnn's fused ops. numpy arrays in, numpy arrays out: each call uploads its inputs to the
//! backend's device, runs the op there and reads the result back.
//!
//! | neural_arch                          | rnn                                               |
//! |--------------------------------------|---------------------------------------------------|
//! | `gelu(x)`                            | `Tensor::gelu` (tanh approximation, fused kernel)  |
//! | `fused_linear_gelu(x, w, b)`         | `Tensor::linear(w, b, Epilogue::Gelu)`: `gelu(x wᵀ + b)` |
//! | `layernorm(x, w, b, eps)`            | `Tensor::layer_norm` (fused kernel)               |
//! | `flash_attention(q, k, v, scale)`    | `scaled_dot_product_attention` (FlashAttention-2 style) |

use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rnn_core::{scaled_dot_product_attention, AttentionMask, Device, Epilogue, Result, Tensor};

use crate::device::PyDevice;
use crate::errors::without_gil;
use crate::numpy_io::{tensor_from_py, tensor_to_numpy};

/// The ops ``benchmark_kernel`` knows.
const BENCHMARK_OPS: [&str; 4] = ["gelu", "layernorm", "softmax", "flash_attention"];

/// One compute backend: ``is_available``, ``has_custom_kernels``, the fused ops, a kernel
/// benchmark and memory information. Made by ``get_backend``.
#[pyclass(name = "Backend", module = "rnn.backends", frozen)]
pub struct PyBackend {
    name: String,
    device: Device,
    available: bool,
}

impl PyBackend {
    /// Runs `op` on the inputs uploaded to the backend's device and returns the result as numpy.
    fn run<const N: usize>(
        &self,
        py: Python<'_>,
        inputs: [&Bound<'_, PyAny>; N],
        op: impl FnOnce([Tensor; N]) -> Result<Tensor> + Send,
    ) -> PyResult<Py<PyAny>> {
        self.check_available()?;
        let host: Vec<Tensor> = inputs.iter().map(|x| tensor_from_py(x)).collect::<PyResult<_>>()?;
        let device = self.device;
        let out = without_gil(py, move || {
            let moved = host.iter().map(|t| t.to_device(device)).collect::<Result<Vec<_>>>()?;
            let arr: [Tensor; N] = moved.try_into().map_err(|_| rnn_core::Error::Msg("internal: arity".into()))?;
            op(arr)?.to_device(Device::Cpu)
        })?;
        tensor_to_numpy(py, &out)
    }

    fn check_available(&self) -> PyResult<()> {
        match self.available {
            true => Ok(()),
            false => Err(PyRuntimeError::new_err(format!(
                "the {} backend is not available on this machine (device {}); see rnn.GpuManager().devices()",
                self.name, self.device
            ))),
        }
    }
}

/// The op of `benchmark_kernel`'s `name` on `x` (already on the device).
fn benchmark_op(name: &str, x: &Tensor) -> Result<Tensor> {
    match name {
        "gelu" => x.gelu(),
        "layernorm" => x.layer_norm(None, None, 1e-5),
        "softmax" => x.softmax(-1),
        _ => scaled_dot_product_attention(x, x, x, &AttentionMask::none(), None),
    }
}

#[pymethods]
impl PyBackend {
    /// The backend's name: ``"cuda"``, ``"wgpu"`` or ``"cpu"``.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The device the backend computes on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.device }
    }

    /// Whether this machine and build can run the backend.
    #[getter]
    fn is_available(&self) -> bool {
        self.available
    }

    /// Whether the fused kernels (GELU, linear + GELU, LayerNorm, flash attention) run on
    /// this backend: every available backend has them (CUDA compiles them with NVRTC at
    /// first use).
    #[getter]
    fn has_custom_kernels(&self) -> bool {
        self.available
    }

    /// GELU (tanh approximation) of ``x``.
    fn gelu(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.run(py, [x], |[x]| x.gelu())
    }

    /// ``gelu(x @ weight.T + bias)`` with ``weight`` ``[out, in]`` (PyTorch's layout), in one
    /// fused op (a cuBLASLt epilogue on CUDA).
    #[pyo3(signature = (x, weight, bias = None))]
    fn fused_linear_gelu(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        weight: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        match bias.filter(|b| !b.is_none()) {
            Some(b) => self.run(py, [x, weight, b], |[x, w, b]| x.linear(&w, Some(&b), Epilogue::Gelu)),
            None => self.run(py, [x, weight], |[x, w]| x.linear(&w, None, Epilogue::Gelu)),
        }
    }

    /// Layer normalization over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias``.
    #[pyo3(signature = (x, weight, bias, eps = 1e-5))]
    fn layernorm(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        weight: &Bound<'_, PyAny>,
        bias: &Bound<'_, PyAny>,
        eps: f64,
    ) -> PyResult<Py<PyAny>> {
        self.run(py, [x, weight, bias], move |[x, w, b]| x.layer_norm(Some(&w), Some(&b), eps))
    }

    /// ``softmax(q kᵀ · scale) v`` for ``[B, H, N, D]`` arrays, without storing the scores
    /// (FlashAttention-2 style tiles). ``block_size`` is accepted for compatibility and
    /// checked; the kernels choose their own tile sizes. ``causal=True`` masks future keys.
    #[pyo3(signature = (q, k, v, scale = None, block_size = 64, causal = false))]
    #[allow(clippy::too_many_arguments)]
    fn flash_attention(
        &self,
        py: Python<'_>,
        q: &Bound<'_, PyAny>,
        k: &Bound<'_, PyAny>,
        v: &Bound<'_, PyAny>,
        scale: Option<f64>,
        block_size: usize,
        causal: bool,
    ) -> PyResult<Py<PyAny>> {
        if block_size == 0 {
            return Err(PyValueError::new_err("block_size must be positive"));
        }
        let mask = AttentionMask { causal, ..AttentionMask::none() };
        self.run(py, [q, k, v], move |[q, k, v]| scaled_dot_product_attention(&q, &k, &v, &mask, scale))
    }

    /// The mean time in milliseconds of ``num_runs`` runs of the op ``name`` (``"gelu"``,
    /// ``"layernorm"``, ``"softmax"`` or ``"flash_attention"`` with ``x`` as q, k and v) on
    /// ``x`` already on the device, after a warm-up run; each run waits for the device.
    #[pyo3(signature = (name, x, num_runs = 10))]
    fn benchmark_kernel(&self, py: Python<'_>, name: &str, x: &Bound<'_, PyAny>, num_runs: usize) -> PyResult<f64> {
        self.check_available()?;
        if !BENCHMARK_OPS.contains(&name) {
            return Err(PyValueError::new_err(format!(
                "unknown kernel '{name}' (known: {})",
                BENCHMARK_OPS.join(", ")
            )));
        }
        if num_runs == 0 {
            return Err(PyValueError::new_err("num_runs must be at least 1"));
        }
        let (x, device, name) = (tensor_from_py(x)?, self.device, name.to_string());
        without_gil(py, move || {
            let x = x.to_device(device)?;
            benchmark_op(&name, &x)?;
            device.synchronize()?;
            let start = Instant::now();
            for _ in 0..num_runs {
                benchmark_op(&name, &x)?;
                device.synchronize()?;
            }
            Ok(start.elapsed().as_secs_f64() * 1e3 / num_runs as f64)
        })
    }

    /// The device allocator's byte counts: ``allocated``, ``reserved``, ``peak``,
    /// ``allocations``, ``cache_hits``, ``total`` (device memory where the backend reports
    /// it, else 0). The CPU backend has no pool: every count is 0.
    fn memory_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_available()?;
        let device = self.device;
        let stats = match device {
            Device::Cpu => Default::default(),
            d => without_gil(py, move || rnn_core::gpu_memory::memory_stats(d))?,
        };
        crate::gpu::memory_stats_dict(py, &stats)
    }

    /// A CuPy-style view of the device's memory pool: ``used_bytes()``, ``total_bytes()``,
    /// ``free_all_blocks()``.
    fn memory_pool(&self) -> PyResult<PyMemoryPool> {
        self.check_available()?;
        Ok(PyMemoryPool { device: self.device })
    }

    fn __repr__(&self) -> String {
        format!("Backend('{}', device={}, available={})", self.name, self.device, self.available)
    }
}

/// The device's caching allocator, with CuPy's memory-pool method names.
#[pyclass(name = "MemoryPool", module = "rnn.backends", frozen)]
pub struct PyMemoryPool {
    device: Device,
}

impl PyMemoryPool {
    fn stats(&self, py: Python<'_>) -> PyResult<rnn_core::gpu_memory::MemoryStats> {
        match self.device {
            Device::Cpu => Ok(Default::default()),
            d => without_gil(py, move || rnn_core::gpu_memory::memory_stats(d)),
        }
    }
}

#[pymethods]
impl PyMemoryPool {
    /// Bytes held by live arrays (tensors) on the device.
    fn used_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.stats(py)?.allocated)
    }

    /// Bytes the pool holds from the device: used plus cached for reuse.
    fn total_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.stats(py)?.reserved)
    }

    /// Returns the cached, unused blocks to the device.
    fn free_all_blocks(&self, py: Python<'_>) -> PyResult<()> {
        let device = self.device;
        without_gil(py, move || rnn_core::gpu_memory::empty_cache(device))
    }
}

/// The device a backend name stands for, and whether it is available: the first listed GPU
/// of that kind (see ``rnn.GpuManager``: hardware GPUs, or the adapter ``RNN_GPU_DEVICE``
/// names), else ordinal 0 and unavailable. ``"cuda:N"`` / ``"wgpu:N"`` name a device
/// explicitly (a software wgpu adapter included).
fn backend_device(name: &str) -> PyResult<(Device, bool)> {
    if name == "cpu" {
        return Ok((Device::Cpu, true));
    }
    if name.contains(':') {
        let device = crate::errors::PyErrExt::py_err(Device::parse(name))?;
        return Ok((device, device.is_available()));
    }
    let fallback = match name {
        "cuda" => Device::Cuda(0),
        "wgpu" => Device::Wgpu(0),
        other => {
            return Err(PyValueError::new_err(format!("unknown backend '{other}' (expected 'cuda', 'wgpu' or 'cpu')")))
        }
    };
    let same_kind = |d: &Device| std::mem::discriminant(d) == std::mem::discriminant(&fallback);
    let listed = rnn::GpuManager::new().devices().iter().map(|g| g.device).find(same_kind);
    Ok(listed.map_or((fallback, false), |d| (d, d.is_available())))
}

/// The backend ``name``: ``"cuda"``, ``"wgpu"`` or ``"cpu"`` (or ``"cuda:N"``, ``"wgpu:N"``).
/// An unavailable backend is returned too, with ``is_available`` False; its ops raise
/// RuntimeError.
#[pyfunction]
fn get_backend(py: Python<'_>, name: &str) -> PyResult<PyBackend> {
    let (device, available) = py.detach(|| backend_device(name))?;
    let kind = name.split(':').next().unwrap_or(name).to_string();
    Ok(PyBackend { name: kind, device, available })
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBackend>()?;
    m.add_class::<PyMemoryPool>()?;
    m.add_function(wrap_pyfunction!(get_backend, m)?)
}
