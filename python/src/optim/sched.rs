//! `rnn.optim.lr_scheduler`: rnn-nn's learning-rate schedules with PyTorch's names. A
//! scheduler sets its optimizer's rate at creation (a warmup starts low) and at each
//! `step()`, called once per epoch; `ReduceLROnPlateau.step(metric)` takes the metric.

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnn_nn::optim::{LrSchedule, LrScheduler, PlateauConfig, PlateauMode};

use crate::errors::PyErrExt;
use crate::optim::PyOptimizer;

/// The base of every scheduler.
#[pyclass(name = "LRScheduler", module = "rnn.optim.lr_scheduler", subclass)]
pub struct PyScheduler {
    inner: Mutex<Box<dyn LrScheduler>>,
    optimizer: Py<PyOptimizer>,
}

impl PyScheduler {
    /// The scheduler of `schedule` from the optimizer's current rate, applied to it.
    fn build(optimizer: &Bound<'_, PyOptimizer>, schedule: LrSchedule) -> PyResult<PyScheduler> {
        let opt = optimizer.borrow();
        let base_lr = opt.lock().learning_rate();
        let scheduler = schedule.build(base_lr).py_err()?;
        scheduler.apply(opt.lock().as_mut());
        Ok(PyScheduler { inner: Mutex::new(scheduler), optimizer: optimizer.clone().unbind() })
    }
}

#[pymethods]
impl PyScheduler {
    /// Moves to the next epoch and sets the optimizer's learning rate. ``metrics`` (e.g. the
    /// validation loss) is required by ``ReduceLROnPlateau`` and ignored by the others.
    #[pyo3(signature = (metrics = None))]
    fn step(&self, py: Python<'_>, metrics: Option<f64>) -> PyResult<()> {
        let opt = self.optimizer.bind(py).borrow();
        let mut scheduler = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut optimizer = opt.lock();
        scheduler.step(optimizer.as_mut(), metrics).py_err()
    }

    /// The current learning rate, in a list (one per parameter group, as in PyTorch).
    fn get_last_lr(&self) -> Vec<f64> {
        vec![self.inner.lock().unwrap_or_else(|e| e.into_inner()).current_lr()]
    }

    /// The optimizer this scheduler drives.
    #[getter]
    fn optimizer(&self, py: Python<'_>) -> Py<PyOptimizer> {
        self.optimizer.clone_ref(py)
    }
}

/// Multiplies the rate by ``gamma`` every ``step_size`` epochs.
#[pyclass(name = "StepLR", module = "rnn.optim.lr_scheduler", extends = PyScheduler)]
pub struct PyStepLr;

#[pymethods]
impl PyStepLr {
    #[new]
    #[pyo3(signature = (optimizer, step_size, gamma = 0.1))]
    fn new(optimizer: &Bound<'_, PyOptimizer>, step_size: usize, gamma: f64) -> PyResult<(Self, PyScheduler)> {
        Ok((PyStepLr, PyScheduler::build(optimizer, LrSchedule::step(step_size, gamma))?))
    }
}

/// Multiplies the rate by ``gamma`` every epoch.
#[pyclass(name = "ExponentialLR", module = "rnn.optim.lr_scheduler", extends = PyScheduler)]
pub struct PyExponentialLr;

#[pymethods]
impl PyExponentialLr {
    #[new]
    fn new(optimizer: &Bound<'_, PyOptimizer>, gamma: f64) -> PyResult<(Self, PyScheduler)> {
        Ok((PyExponentialLr, PyScheduler::build(optimizer, LrSchedule::Exponential { gamma })?))
    }
}

/// Half a cosine from the base rate down to ``eta_min`` over ``T_max`` epochs.
#[pyclass(name = "CosineAnnealingLR", module = "rnn.optim.lr_scheduler", extends = PyScheduler)]
pub struct PyCosineLr;

#[pymethods]
impl PyCosineLr {
    #[new]
    #[pyo3(signature = (optimizer, T_max, eta_min = 0.0))]
    #[allow(non_snake_case)]
    fn new(optimizer: &Bound<'_, PyOptimizer>, T_max: usize, eta_min: f64) -> PyResult<(Self, PyScheduler)> {
        Ok((PyCosineLr, PyScheduler::build(optimizer, LrSchedule::cosine(T_max, eta_min))?))
    }
}

/// A linear warmup from ``start_factor * lr`` to ``lr`` over ``total_iters`` epochs, then
/// the base rate (``end_factor`` must be 1).
#[pyclass(name = "LinearLR", module = "rnn.optim.lr_scheduler", extends = PyScheduler)]
pub struct PyLinearLr;

#[pymethods]
impl PyLinearLr {
    #[new]
    #[pyo3(signature = (optimizer, start_factor = 1.0 / 3.0, end_factor = 1.0, total_iters = 5))]
    fn new(
        optimizer: &Bound<'_, PyOptimizer>,
        start_factor: f64,
        end_factor: f64,
        total_iters: usize,
    ) -> PyResult<(Self, PyScheduler)> {
        if end_factor != 1.0 {
            return Err(PyValueError::new_err(format!("LinearLR supports end_factor=1.0 only, got {end_factor}")));
        }
        let then = Box::new(LrSchedule::Constant);
        let schedule = LrSchedule::LinearWarmup { warmup_steps: total_iters, start_factor, then };
        Ok((PyLinearLr, PyScheduler::build(optimizer, schedule)?))
    }
}

/// Multiplies the rate by ``factor`` when the metric passed to ``step`` has not improved
/// for more than ``patience`` epochs (relative threshold).
#[pyclass(name = "ReduceLROnPlateau", module = "rnn.optim.lr_scheduler", extends = PyScheduler)]
pub struct PyPlateau;

#[pymethods]
impl PyPlateau {
    #[new]
    #[pyo3(signature = (optimizer, mode = "min", factor = 0.1, patience = 10, threshold = 1e-4, cooldown = 0, min_lr = 0.0))]
    fn new(
        optimizer: &Bound<'_, PyOptimizer>,
        mode: &str,
        factor: f64,
        patience: usize,
        threshold: f64,
        cooldown: usize,
        min_lr: f64,
    ) -> PyResult<(Self, PyScheduler)> {
        let mode = match mode {
            "min" => PlateauMode::Min,
            "max" => PlateauMode::Max,
            other => return Err(PyValueError::new_err(format!("mode must be 'min' or 'max', got '{other}'"))),
        };
        let config = PlateauConfig { mode, factor, patience, threshold, cooldown, min_lr };
        Ok((PyPlateau, PyScheduler::build(optimizer, LrSchedule::ReduceOnPlateau(config))?))
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduler>()?;
    m.add_class::<PyStepLr>()?;
    m.add_class::<PyExponentialLr>()?;
    m.add_class::<PyCosineLr>()?;
    m.add_class::<PyLinearLr>()?;
    m.add_class::<PyPlateau>()
}
