//! `rnn.optim`: rnn-nn's optimizers (`SGD`, `Adam`, `AdamW`, `RMSprop`, `Adagrad`) with
//! PyTorch's constructor arguments, `step()` and `zero_grad()`. The learning-rate schedulers
//! are in `optim/sched.rs`.
//!
//! PyTorch's optimizers read `p.grad`; ours read the same gradients: the optimizer holds the
//! grad slot of each parameter (see `autograd.rs`), which `loss.backward()` fills, and hands
//! them to the rnn-nn optimizer as a `GradStore`. The update itself runs in Rust, fused
//! (one pass over parameter, gradient and state), with the GIL released.

mod sched;

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use rnn_core::{GradStore, Tensor};
use rnn_nn::optim::{AdagradConfig, AdamConfig, Optimizer, OptimizerConfig, RmsPropConfig, SgdConfig};

use crate::autograd::{slot_for, GradSlot};
use crate::errors::{without_gil, PyErrExt};
use crate::numpy_io::tensor_from_py;

/// The base of every optimizer: updates its parameters from their ``.grad``.
#[pyclass(name = "Optimizer", module = "rnn.optim", subclass)]
pub struct PyOptimizer {
    inner: Mutex<Box<dyn Optimizer>>,
    /// Each parameter with its gradient slot (kept alive here, so `backward` fills it even
    /// when no Python handle of the parameter is left).
    params: Vec<(Tensor, GradSlot)>,
    config: OptimizerConfig,
}

impl PyOptimizer {
    /// An optimizer over the tensors of the iterable `params` (they must require grad).
    fn build(params: &Bound<'_, PyAny>, config: OptimizerConfig) -> PyResult<PyOptimizer> {
        let mut tensors = Vec::new();
        for p in params.try_iter()? {
            let t = tensor_from_py(&p?)?;
            if !t.is_variable() {
                let msg =
                    "optimizer got a tensor that does not require grad (create parameters with requires_grad=True)";
                return Err(pyo3::exceptions::PyValueError::new_err(msg));
            }
            tensors.push(t);
        }
        if tensors.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("optimizer got an empty parameter list"));
        }
        let inner = config.build(tensors.clone()).py_err()?;
        let params = tensors.into_iter().map(|t| (t.clone(), slot_for(&t))).collect();
        Ok(PyOptimizer { inner: Mutex::new(inner), params, config })
    }

    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Optimizer>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyOptimizer {
    /// One update of every parameter that has a gradient (the others are left as they are).
    fn step(&self, py: Python<'_>) -> PyResult<()> {
        let mut grads = GradStore::new();
        for (param, slot) in &self.params {
            if let Some(g) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                grads.insert(param, g.clone());
            }
        }
        without_gil(py, || self.lock().step(&grads))
    }

    /// Clears the gradients of the parameters (``set_to_none=False``: sets them to zeros).
    #[pyo3(signature = (set_to_none = true))]
    fn zero_grad(&self, set_to_none: bool) -> PyResult<()> {
        for (_, slot) in &self.params {
            let mut grad = slot.lock().unwrap_or_else(|e| e.into_inner());
            *grad = match (set_to_none, grad.as_ref()) {
                (false, Some(g)) => Some(g.zeros_like().py_err()?),
                _ => None,
            };
        }
        Ok(())
    }

    /// The learning rate the next ``step`` uses (schedulers set it).
    #[getter]
    fn get_lr(&self) -> f64 {
        self.lock().learning_rate()
    }

    #[setter]
    fn set_lr(&self, lr: f64) -> PyResult<()> {
        if !(lr.is_finite() && lr >= 0.0) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!("lr must be a finite number >= 0, got {lr}")));
        }
        self.lock().set_learning_rate(lr);
        Ok(())
    }

    /// The parameters this optimizer updates.
    fn parameters(&self) -> Vec<crate::tensor::PyTensor> {
        self.params.iter().map(|(t, _)| crate::tensor::PyTensor::new(t.clone())).collect()
    }

    fn __repr__(&self) -> String {
        format!("{} ({} parameters, {:?})", self.config.name(), self.params.len(), self.config)
    }
}

/// Stochastic gradient descent, with optional momentum, dampening, Nesterov momentum and
/// L2 weight decay, as ``torch.optim.SGD``.
#[pyclass(name = "SGD", module = "rnn.optim", extends = PyOptimizer)]
pub struct PySgd;

#[pymethods]
impl PySgd {
    #[new]
    #[pyo3(signature = (params, lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false))]
    fn new(
        params: &Bound<'_, PyAny>,
        lr: f64,
        momentum: f64,
        dampening: f64,
        weight_decay: f64,
        nesterov: bool,
    ) -> PyResult<(Self, PyOptimizer)> {
        let config = SgdConfig { lr, momentum, dampening, nesterov, weight_decay };
        Ok((PySgd, PyOptimizer::build(params, OptimizerConfig::Sgd(config))?))
    }
}

fn adam_config(lr: f64, betas: (f64, f64), eps: f64, weight_decay: f64, amsgrad: bool) -> AdamConfig {
    AdamConfig { lr, beta1: betas.0, beta2: betas.1, eps, weight_decay, amsgrad }
}

/// Adam (L2 weight decay added to the gradient), as ``torch.optim.Adam``.
#[pyclass(name = "Adam", module = "rnn.optim", extends = PyOptimizer)]
pub struct PyAdam;

#[pymethods]
impl PyAdam {
    #[new]
    #[pyo3(signature = (params, lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.0, amsgrad = false))]
    #[pyo3(text_signature = "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.0, amsgrad=False)")]
    fn new(
        params: &Bound<'_, PyAny>,
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
    ) -> PyResult<(Self, PyOptimizer)> {
        let config = OptimizerConfig::Adam(adam_config(lr, betas, eps, weight_decay, amsgrad));
        Ok((PyAdam, PyOptimizer::build(params, config)?))
    }
}

/// Adam with decoupled weight decay, as ``torch.optim.AdamW``.
#[pyclass(name = "AdamW", module = "rnn.optim", extends = PyOptimizer)]
pub struct PyAdamW;

#[pymethods]
impl PyAdamW {
    #[new]
    #[pyo3(signature = (params, lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.01, amsgrad = false))]
    #[pyo3(text_signature = "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False)")]
    fn new(
        params: &Bound<'_, PyAny>,
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
    ) -> PyResult<(Self, PyOptimizer)> {
        let config = OptimizerConfig::AdamW(adam_config(lr, betas, eps, weight_decay, amsgrad));
        Ok((PyAdamW, PyOptimizer::build(params, config)?))
    }
}

/// RMSprop, as ``torch.optim.RMSprop``.
#[pyclass(name = "RMSprop", module = "rnn.optim", extends = PyOptimizer)]
pub struct PyRmsProp;

#[pymethods]
impl PyRmsProp {
    #[new]
    #[pyo3(signature = (params, lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0.0, momentum = 0.0, centered = false))]
    fn new(
        params: &Bound<'_, PyAny>,
        lr: f64,
        alpha: f64,
        eps: f64,
        weight_decay: f64,
        momentum: f64,
        centered: bool,
    ) -> PyResult<(Self, PyOptimizer)> {
        let config = RmsPropConfig { lr, alpha, eps, momentum, centered, weight_decay };
        Ok((PyRmsProp, PyOptimizer::build(params, OptimizerConfig::RmsProp(config))?))
    }
}

/// Adagrad, as ``torch.optim.Adagrad``.
#[pyclass(name = "Adagrad", module = "rnn.optim", extends = PyOptimizer)]
pub struct PyAdagrad;

#[pymethods]
impl PyAdagrad {
    #[new]
    #[pyo3(signature = (params, lr = 1e-2, lr_decay = 0.0, weight_decay = 0.0, initial_accumulator_value = 0.0, eps = 1e-10))]
    fn new(
        params: &Bound<'_, PyAny>,
        lr: f64,
        lr_decay: f64,
        weight_decay: f64,
        initial_accumulator_value: f64,
        eps: f64,
    ) -> PyResult<(Self, PyOptimizer)> {
        let config = AdagradConfig { lr, lr_decay, weight_decay, initial_accumulator_value, eps };
        Ok((PyAdagrad, PyOptimizer::build(params, OptimizerConfig::Adagrad(config))?))
    }
}

/// Clips the global L2 norm of the parameters' gradients to ``max_norm`` in place and
/// returns the norm before clipping, as ``torch.nn.utils.clip_grad_norm_``.
#[pyfunction]
fn clip_grad_norm_(py: Python<'_>, parameters: &Bound<'_, PyAny>, max_norm: f64) -> PyResult<f64> {
    let mut pairs = Vec::new();
    for p in parameters.try_iter()? {
        let t = tensor_from_py(&p?)?;
        let slot = slot_for(&t);
        pairs.push((t, slot));
    }
    let mut grads = GradStore::new();
    for (t, slot) in &pairs {
        if let Some(g) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            grads.insert(t, g.clone());
        }
    }
    let params: Vec<Tensor> = pairs.iter().map(|(t, _)| t.clone()).collect();
    let norm = without_gil(py, || rnn_nn::clip_grad_norm(&mut grads, &params, max_norm))?;
    for (t, slot) in &pairs {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = grads.get(t).cloned();
    }
    Ok(norm)
}

/// Clears the ``.grad`` of every tensor of ``parameters`` (``Module.zero_grad``).
#[pyfunction]
fn _zero_grad(parameters: &Bound<'_, PyAny>) -> PyResult<()> {
    for p in parameters.try_iter()? {
        let t = tensor_from_py(&p?)?;
        *slot_for(&t).lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    Ok(())
}

pub fn register(py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_zero_grad, m)?)?;
    m.add_class::<PyOptimizer>()?;
    m.add_class::<PySgd>()?;
    m.add_class::<PyAdam>()?;
    m.add_class::<PyAdamW>()?;
    m.add_class::<PyRmsProp>()?;
    m.add_class::<PyAdagrad>()?;
    m.add_function(wrap_pyfunction!(clip_grad_norm_, m)?)?;
    sched::register(py, m)
}
